"""Static checks on the single-file web UI served at ``GET /`` (no server needed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "herald_service" / "api" / "static" / "index.html"

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# SVG namespace URI is an identifier, not a fetched resource.
ALLOWED_URLS = {"http://www.w3.org/2000/svg"}


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)
        self._in_script = tag == "script"

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> (open: {self.stack[-3:]})")
            if tag in self.stack:
                while self.stack and self.stack.pop() != tag:
                    pass
            return
        self.stack.pop()
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


@pytest.fixture(scope="module")
def text() -> str:
    assert PAGE.is_file(), f"missing {PAGE}"
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def parsed(text) -> _Checker:
    p = _Checker()
    p.feed(text)
    p.close()
    return p


@pytest.fixture(scope="module")
def script(parsed) -> str:
    return "\n".join(parsed.scripts)


def test_parses_with_balanced_tags(parsed, text):
    assert text.lstrip().lower().startswith("<!doctype html>")
    assert parsed.errors == []
    assert parsed.stack == [], f"unclosed tags: {parsed.stack}"
    names = [t for t, _ in parsed.tags]
    for tag in ("html", "head", "body", "main", "form", "textarea", "button", "script", "style"):
        assert tag in names, tag


def test_no_external_resources(parsed, text):
    for tag, attrs in parsed.tags:
        for attr in ("src", "href", "action", "data", "poster"):
            val = (attrs.get(attr) or "").strip().lower()
            assert not re.match(r"^(https?:)?//", val), f"<{tag} {attr}={val!r}> points off-site"
        if tag == "script":
            assert "src" not in attrs, "scripts must be inline"
        if tag == "link":
            assert attrs.get("rel") not in ("stylesheet", "preload", "modulepreload"), "styles must be inline"
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= ALLOWED_URLS, f"external URLs: {urls - ALLOWED_URLS}"
    assert "@import" not in text and not re.search(r"url\(\s*['\"]?(https?:)?//", text)


def test_the_content_security_policy_hashes_the_one_inline_script_and_style_and_nothing_else_is_inline(parsed, text, script):
    """The page is served with a CSP that runs only its inline script and style by their sha256
    (herald_service/api/routes/ops.py): a second block, an inline handler (onclick=) or a style attribute, also one a
    script sets, would be blocked in the browser, so none may exist."""
    import base64
    import hashlib

    from herald_service.api.routes.ops import DEMO_PAGE, DEMO_PAGE_HEADERS

    assert DEMO_PAGE == text  # the served page is this file
    policy = dict(part.split(" ", 1) for part in DEMO_PAGE_HEADERS["Content-Security-Policy"].split("; "))
    style = re.search(r"<style>(.*?)</style>", text, flags=re.DOTALL).group(1)
    for directive, source in (("script-src", script), ("style-src", style)):
        digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode()
        assert policy[directive] == f"'sha256-{digest}'", directive
    assert (policy["default-src"], policy["connect-src"], policy["frame-ancestors"]) == ("'none'", "'self'", "'none'")
    assert [tag for tag, _ in parsed.tags].count("script") == 1 and text.count("<style") == 1
    inline = [(tag, name) for tag, attrs in parsed.tags for name in attrs if name.startswith("on") or name == "style"]
    assert inline == []
    assert not re.search(r"""\bstyle\s*:|["']style["']|\.style\b|cssText|innerHTML|javascript:""", script)


def test_posts_to_relative_classify(script):
    m = re.search(r"fetch\(\s*([\"'])([^\"']+)\1\s*,\s*\{[^}]*method:\s*\"POST\"", script)
    assert m, "no POST fetch found"
    assert m.group(2) in ("./classify", "classify"), m.group(2)
    assert "return_trajectory: true" in script
    assert re.search(r"fetch\(\s*[\"']\./v1/info[\"']", script)
    assert '"Bearer " + key' in script


def test_server_strings_use_textcontent(script):
    assert "innerHTML" not in script and "outerHTML" not in script
    assert "insertAdjacentHTML" not in script and "document.write" not in script
    assert "eval(" not in script and "new Function" not in script
    # message/field of errors, backbone id, model and probe names all go through textContent.
    assert "createTextNode(String(message" in script
    assert '"Field: " + String(field)' in script
    assert re.search(r'\$\("info"\)\.textContent\s*=\s*"Backbone " \+ String\(b\.id\)', script)
    assert re.search(r'\$\("meta"\)\.textContent\s*=\s*"model " \+ String\(body\.model\)', script)


def test_ui_features(text, script):
    # the features table shows the answer's own names, in its order: the page listed herald-v1's seven, and a probe of
    # another feature set showed seven dashes (tester)
    assert "Object.keys(r.features || {}).forEach(function (name) {" in script and '"slope"' not in script
    # every view kind the API answers has its own words (the "reading" view showed its raw name: tester)
    views = re.search(r"var VIEWS = \{(.*?)\};", script, re.DOTALL).group(1)
    assert sorted(re.findall(r"(\w+): \"", views)) == ["content_part", "message", "reading", "trimmed"]
    assert "x-total-time" in script
    assert "FLAGGED" in script and "ALLOWED" in script
    assert "boundary" in script and "stroke-dasharray" in script
    assert "button.disabled = true" in script
    assert "ctrlKey" in script
    assert 'get("q")' in script
    assert 'role="alert"' in text and 'for="prompt"' in text and 'for="apikey"' in text
    assert 'type="password"' in text
    assert len(text.splitlines()) < 340  # one small file (329 lines with the feature-set and error fixes)


def page_function(script: str, name: str) -> str:
    """The source of ``function name(...) {...}`` in the page's script (its body ends at the first line ``  }``)."""
    match = re.search(rf"^  function {name}\(.*?^  }}$", script, re.MULTILINE | re.DOTALL)
    assert match, name
    return match.group(0)


def run_node(script: str) -> str:
    node = shutil.which("node")
    assert node, "Node.js runs the page's own functions here; .ci/run installs Debian's nodejs"
    return subprocess.run([node, "-e", script], capture_output=True, text=True, check=True, timeout=60).stdout


def test_the_shown_score_sits_on_its_verdicts_side_of_one_half(script):
    # 0.4996 read "0.500" beside ALLOWED and "flagged at score >= 0.5" (tester)
    cases = [(0.4996, False), (0.49999996, False), (0.5, True), (0.5000004, True), (0.98765, True), (0.0012, False),
             (None, False)]
    calls = ", ".join(f"scoreText({'null' if score is None else score!r}, {str(flagged).lower()})" for score, flagged in cases)
    shown = json.loads(run_node(page_function(script, "scoreText") + f"\nconsole.log(JSON.stringify([{calls}]));"))
    assert shown == ["0.4996", "0.49999996", "0.500", "0.500", "0.988", "0.001", "—"]
    assert '$("score").textContent = scoreText(r.score, r.flagged);' in script


def test_an_api_key_fetch_cannot_send_is_named_before_the_request(script):
    # a key outside Latin-1 made fetch() throw, and the page said "Could not reach the service" (tester)
    keys = ["client-key-0123456789", "clé-0123456789", "two words", "key\u2014dash"]
    calls = ", ".join(f"keyProblem({json.dumps(key)})" for key in keys)
    problems = json.loads(run_node(page_function(script, "keyProblem") + f"\nconsole.log(JSON.stringify([{calls}]));"))
    assert "if (keyProblem(key)) { showError(keyProblem(key), \"API key\")" in script
    assert problems[0] is None and all(p == "An API key holds printable ASCII characters only (no spaces)." for p in problems[1:])


def test_a_refusal_with_retry_after_says_when_to_try_again(script):
    # a 503 during loading read "Error: loading model and probe" though Retry-After: 5 came with it (tester)
    values = ["5", "0.2", None, "", "soon", "-1"]
    calls = ", ".join(f"retryAdvice({json.dumps(v)})" for v in values)
    shown = json.loads(run_node(page_function(script, "retryAdvice") + f"\nconsole.log(JSON.stringify([{calls}]));"))
    assert shown == [" Try again in 5 s.", " Try again in 1 s.", "", "", "", ""]
    assert 'var retry = retryAdvice(res.headers.get("Retry-After"));' in script
    # a server message gets its period, and the advice only where it does not already say to retry ("...; retry in
    # 3 s Try again in 3 s." read twice, run together: tester)
    assert 'showError(withAdvice(err.message, res.headers.get("Retry-After")), err.field);' in script
    cases = [("loading model and probe", "5"), ("the estimated wait is 40 s ...; retry in 3 s", "3"),
             ("queue full.", None), ("prompt has 9 characters  ", "")]
    calls = ", ".join(f"withAdvice({json.dumps(m)}, {json.dumps(r)})" for m, r in cases)
    shown = json.loads(run_node(page_function(script, "retryAdvice") + "\n" + page_function(script, "withAdvice")
                                + f"\nconsole.log(JSON.stringify([{calls}]));"))
    assert shown == ["loading model and probe. Try again in 5 s.", "the estimated wait is 40 s ...; retry in 3 s.",
                     "queue full.", "prompt has 9 characters."]


def test_an_error_hides_the_previous_verdict_and_a_drawing_failure_is_not_called_unreachable(script):
    # tester: after a FLAGGED answer, a network failure showed "Could not reach the service." beside the old verdict;
    # an exception while drawing an answer read as unreachable too; the header stayed generic when the page was
    # opened during loading and no key was given
    catch = script[script.index("    } catch (e) {\n      // the previous verdict"):script.index("    } finally {")]
    assert '$("result").hidden = true;' in catch
    assert 'res === null ? "Could not reach the service." : "The page could not show the service\'s answer ("' in catch
    assert 'if (!text.trim()) { showError("Please type a prompt first.", "input"); $("result").hidden = true;' in script
    assert "if (!infoShown) loadInfo(key ?" in script

"""Attack sets built from the corpus: harmful requests wrapped in jailbreak templates.

``pyrit_jailbreak_templates.jsonl`` rows are Jinja templates with a ``{{ prompt }}`` slot (SOURCES.md; PyRIT wraps
most of their text in ``{% raw %}`` blocks). :func:`load_templates` renders each with jinja2's sandbox, so a wrapped
prompt is the text an attacker would send, not the template's markup (the raw tags appeared in no corpus row, only in
wrapped harmful ones: a shortcut a probe could learn; reviewer's audit, docs/eval/template_audit.md). We fill each
picked template with one harmful request that is *not* in the training pool (rows the per-source cap left out), so a
probe cannot have seen the request itself. A template holding anything but text and the slot is skipped.

For training on wrapped requests (``herald recipes --recipes jailbreak``, docs/eval/jailbreak_recipe.md) the templates
are split by identity: :func:`split_templates` keeps the evaluation's templates, and every near-duplicate of them
(:func:`near_duplicate_groups`: same opening, half of one's 8-word sequences in the other, or a renamed copy), out
of training, and marks templates linked to the in-the-wild jailbreak corpus source (:func:`itw_linked`) so the
leave-one-source-out fold that holds that source out never trains on them (:func:`fold_rows`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np
from jinja2 import nodes
from jinja2.sandbox import SandboxedEnvironment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from sklearn.feature_extraction.text import CountVectorizer

from herald_service.strict_json import object_row
from herald_service.text_file import is_valid_unicode, read_utf8
from herald_service.training.corpus import Example

SLOT = re.compile(r"\{\{\s*prompt\s*\}\}")
SLOT_TEXT = "{{ prompt }}"
"""The slot as :func:`render_template` leaves it in a loaded template (:func:`fill` puts the request there)."""
JAILBREAK_SOURCE = "Jailbreak-wrapped held-out harmful requests (PyRIT templates)"
TEMPLATE_RULE = "jinja-rendered, 8-word-overlap and renamed-copy groups (v2)"
"""How templates are read and grouped (:func:`load_templates`, :func:`near_duplicate_groups`, :func:`found_in`):
recorded by ``herald eval``, ``herald recipes`` and ``herald fit``, so a report can tell runs that filled the templates
as written (``{% raw %}`` tags in the prompts) and grouped them by their opening alone (no rule recorded) apart."""
SEEN_TEMPLATE_SOURCE = "Jailbreak-wrapped held-out harmful requests, template found in a training prompt (PyRIT templates)"
"""Source of the evaluation rows whose template :func:`found_in` a training prompt (the in-the-wild jailbreak source
holds many templates whole), so the report can give recall on the templates no fit saw apart."""
REQUEST_SOURCES = ("AdvBench", "HarmBench")
ITW_TEMPLATE_ORIGIN = "TrustAIRLab"
"""``template_source`` of the PyRIT templates taken from the in-the-wild jailbreak prompts (Shen et al.)."""
ITW_SOURCE_KEY = "In-the-wild"
"""Substring naming the in-the-wild jailbreak corpus source (a leave-one-source-out fold)."""
KEY_CHARS = 60
"""Templates whose normalized text starts alike over this many characters count as one (many in-the-wild templates
are light edits of one another: of the 420 rendered templates of <= 2500 characters, 280 distinct 60-character keys)."""
SHINGLE_WORDS = 8
"""Length, in words, of the word sequences :func:`near_duplicate_groups` and :func:`found_in` compare."""
OVERLAP = 0.5
"""Share of a template's :data:`SHINGLE_WORDS`-word sequences found in another text that makes the two one template
(with this test and the opening alone the 420 rendered templates form 248 groups, the largest of 25 DAN variants; by
the opening alone 280; the reviewer's audit found 68 pairs with over 90% of their sequences in common and different openings: a ``{% raw %}`` tag, or an
edited first line)."""
RENAMED_RATIO = 0.7
"""difflib's ratio of two texts' word sequences at or above which they are one template with a name or a few lines
changed: a persona's name repeated every few words breaks most 8-word sequences (AIM and "AIT", "Act as APM" and "Act
as DAC" share under half of them; a re-audit found 84 such pairs in different groups). With it the 420 rendered
templates form 227 groups, the largest of 27."""
PREFILTER_JACCARD = 0.3
"""Word-set Jaccard below which two texts are not compared by :data:`RENAMED_RATIO` (no pair under 0.4 reached it)."""
WRAPPED_HARMFUL_SOURCE = "Jailbreak-wrapped training requests (augmentation)"
WRAPPED_BENIGN_SOURCE = "Jailbreak-wrapped benign training prompts (augmentation)"
EVALUATION_TEMPLATES = 40
"""Templates of ``herald eval``'s jailbreak-wrapped set (its ``--jailbreak-n`` default); training never uses them."""
TEMPLATE_ROW = 'an object with a "prompt" string holding the {{ prompt }} slot'
"""What a line of a jailbreak-template file is, as its errors say."""
TEMPLATE_MAX_CHARS = 2500
"""Longest template ``herald eval`` and ``herald recipes`` fill (``--jailbreak-max-chars`` default), in characters."""


def load_templates(path: Path, max_chars: int | None = None) -> list[dict]:
    """Template rows, each ``prompt`` rendered by :func:`render_template`, optionally at most ``max_chars`` long
    (rendered, in characters); a template :func:`render_template` refuses is skipped.

    Raises:
        ValueError: a line is not a JSON object with a ``prompt`` string, or one that
            :func:`~herald_service.strict_json.object_row` refuses (a key given twice...), named by file and line; or
            the file is not UTF-8 (:class:`~herald_service.text_file.NotUtf8Error`).
        OSError: the file cannot be read.
    """
    rows = []
    for number, line in enumerate(read_utf8(path).split("\n"), 1):
        if not line.strip():
            continue
        row = object_row(line, f"{path} line {number}", TEMPLATE_ROW, strings=("prompt", "template_source", "category"))
        if not isinstance(row.get("prompt"), str):
            raise ValueError(f"{path} line {number}: needs a \"prompt\" string; a row is {TEMPLATE_ROW}")
        if not is_valid_unicode(row["prompt"]):  # as the corpus reader: no tokenizer can encode it
            raise ValueError(f"{path} line {number}: prompt holds a lone UTF-16 surrogate (not valid Unicode)")
        for key in ("template_source", "category"):
            if row.get(key) is not None and not isinstance(row[key], str):
                raise ValueError(f"{path} line {number}: {key} must be a string or null; got {type(row[key]).__name__}")
        rows.append(row)
    rendered = [{**r, "prompt": render_template(r["prompt"])} for r in rows]
    return [r for r in rendered if r["prompt"] is not None and (max_chars is None or len(r["prompt"]) <= max_chars)]


_JINJA = SandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
_PLAIN = (nodes.Output, nodes.TemplateData, nodes.Name, nodes.Const)
"""What a usable template is made of: text, raw blocks (text too once parsed) and ``{{ prompt }}``."""
_SLOT_MARK = "\ue000prompt\ue000"  # a private-use character pair: no template holds it
_MARKUP = re.compile(r"\{\{|\{%|\{#")


def render_template(text: str) -> str | None:
    """``text`` as Jinja renders it with the request still to come: raw blocks unwrapped, the slot as :data:`SLOT_TEXT`.

    Parsed and rendered by jinja2's sandbox with ``prompt`` the only variable. None, so the template is skipped, when
    Jinja refuses it (a syntax error), when it holds anything but text and ``{{ prompt }}`` (another variable, a
    filter, a loop, a call: nothing a wrapper needs, and a loop of a user's file could run for minutes), when no
    rendered ``prompt`` is left (a slot inside a raw block), or when the rendered text still holds Jinja markup
    (``{{``, ``{%`` or ``{#`` written inside a raw block): an attacker would not send that. Of the 655 rows of
    ``pyrit_jailbreak_templates.jsonl``, 8 are skipped (3 with other variables, 5 of PyRIT's doubled escapes).
    """
    try:
        parsed = _JINJA.parse(text)
        if any(not isinstance(node, _PLAIN) or isinstance(node, nodes.Name) and node.name != "prompt"
               for node in parsed.find_all(nodes.Node)):
            return None
        out = _JINJA.from_string(parsed).render(prompt=_SLOT_MARK)
    except jinja2.TemplateError:
        return None
    if _SLOT_MARK not in out or _MARKUP.search(out):
        return None
    return out.replace(_SLOT_MARK, SLOT_TEXT)


def held_out_requests(all_examples: list[Example], training_pool: list[Example]) -> list[Example]:
    """The :func:`wrappable` requests (AdvBench / HarmBench, plain) absent from the training pool (by prompt text)."""
    seen = {e.prompt for e in training_pool}
    return [e for e in wrappable(all_examples) if e.prompt not in seen]


def evaluation_picks(n_templates: int, n_requests: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Template and request indices of :func:`wrap_requests` (the same draws, so splits can name its templates)."""
    rng = np.random.default_rng(seed)
    return rng.permutation(n_templates)[:n], rng.permutation(n_requests)[:n]


def fill(template: dict, request: str) -> str:
    """A loaded template's text with ``request`` in its slot (every slot, where a template repeats it)."""
    return template["prompt"].replace(SLOT_TEXT, request)


def wrap_requests(templates: list[dict], requests: list[Example], n: int, seed: int = 0,
                  train_prompts: list[str] | None = None) -> list[Example]:
    """``n`` harmful examples: template i (random order) filled with request i (random order).

    Source :data:`JAILBREAK_SOURCE`, or :data:`SEEN_TEMPLATE_SOURCE` for a template :func:`found_in`
    ``train_prompts`` (the rows the scoring models trained on), when given.
    """
    t_order, r_order = evaluation_picks(len(templates), len(requests), n, seed)
    seen = (found_in([templates[i] for i in t_order], train_prompts) if train_prompts is not None
            else np.zeros(len(t_order), dtype=bool))
    return [Example(fill(templates[ti], requests[ri].prompt), 1, SEEN_TEMPLATE_SOURCE if was_seen else JAILBREAK_SOURCE,
                    origin(templates[ti]), "jailbreak")
            for ti, ri, was_seen in zip(t_order, r_order, seen)]


def origin(template: dict) -> str | None:
    return template.get("template_source") or template.get("category")


WORD = r"[a-z0-9]+"
"""A word of the template comparisons (:func:`template_key`, :func:`template_matches`): lower-case alphanumerics."""


def _words(text: str) -> list[str]:
    """The :data:`WORD` words of ``text``, lower-cased, with its slot removed."""
    return re.findall(WORD, SLOT.sub(" ", text).lower())


def template_key(text: str, chars: int = KEY_CHARS) -> str:
    """Lower-case alphanumeric words of ``text`` (slot removed), first ``chars`` characters: near-duplicates collide."""
    return " ".join(_words(text))[:chars]


def _vectors(a: list[list[str]], b: list[list[str]], **options) -> tuple[csr_matrix, csr_matrix]:
    """Binary count matrices of the word lists ``a`` and ``b`` (``options`` go to :class:`CountVectorizer`) on the
    vocabulary of ``a``: ``(len(a), vocabulary)`` and ``(len(b), vocabulary)``; no column when ``a`` has no term
    (texts shorter than an n-gram: scikit-learn's "empty vocabulary")."""
    vectorizer = CountVectorizer(token_pattern=WORD, binary=True, dtype=np.int32, **options)
    try:
        left = vectorizer.fit_transform([" ".join(w) for w in a]).tocsr()
    except ValueError:
        return csr_matrix((len(a), 0), dtype=np.int32), csr_matrix((len(b), 0), dtype=np.int32)
    right = vectorizer.transform([" ".join(w) for w in b]).tocsr() if b else csr_matrix((0, left.shape[1]), dtype=np.int32)
    return left, right


def renamed_copies(a: list[str], b: list[str]) -> np.ndarray:
    """``(len(a), len(b))`` bool: the texts' word sequences have a :class:`difflib.SequenceMatcher` ratio of at least
    :data:`RENAMED_RATIO` (compared only where their word sets have a Jaccard of :data:`PREFILTER_JACCARD` or more)."""
    words_a, words_b = [_words(t) for t in a], [_words(t) for t in b]
    out = np.zeros((len(a), len(b)), dtype=bool)
    both, _ = _vectors(words_a + words_b, [])  # one vocabulary: word-set sizes count every word of both
    left, right = both[:len(a)], both[len(a):]
    common = (left @ right.T).toarray()
    sizes_a, sizes_b = np.asarray(left.sum(axis=1)).ravel(), np.asarray(right.sum(axis=1)).ravel()
    jaccard = common / np.maximum(sizes_a[:, None] + sizes_b[None, :] - common, 1)
    for i, j in np.argwhere(jaccard >= PREFILTER_JACCARD):
        out[i, j] = difflib.SequenceMatcher(None, words_a[i], words_b[j], autojunk=False).ratio() >= RENAMED_RATIO
    return out


def template_matches(a: list[str], b: list[str]) -> np.ndarray:
    """``(len(a), len(b))`` bool: text ``a[i]`` is in ``b[j]`` as a template: the same :func:`template_key`
    (60-character opening), at least :data:`OVERLAP` of ``a[i]``'s :data:`SHINGLE_WORDS`-word sequences in ``b[j]``,
    or :func:`renamed_copies`."""
    keys_a, keys_b = (np.array([template_key(t) for t in texts], dtype=object) for texts in (a, b))
    out = keys_a[:, None] == keys_b[None, :]
    shingles, in_b = _vectors([_words(t) for t in a], [_words(t) for t in b], ngram_range=(SHINGLE_WORDS, SHINGLE_WORDS))
    sizes = np.asarray(shingles.sum(axis=1)).ravel()
    out |= (sizes[:, None] > 0) & ((shingles @ in_b.T).toarray() >= OVERLAP * sizes[:, None])
    return out | renamed_copies(a, b)


def near_duplicate_groups(texts: list[str]) -> np.ndarray:
    """``(len(texts),)`` int group of each template: texts of which either is in the other as a template
    (:func:`template_matches`: a shared opening, one holding at least :data:`OVERLAP` of the other's
    :data:`SHINGLE_WORDS`-word sequences, or renamed copies) are one group (transitively).
    """
    linked = template_matches(texts, texts)
    return connected_components(csr_matrix(linked | linked.T), directed=False)[1]


def found_in(templates: list[dict], prompts: list[str]) -> np.ndarray:
    """``(n_templates,)`` bool: the template is in one of ``prompts`` (:func:`template_matches`)."""
    return template_matches([t["prompt"] for t in templates], prompts).any(axis=1)


def itw_linked(templates: list[dict], itw_prompts: list[str]) -> np.ndarray:
    """``(n_templates,)`` bool: taken from the in-the-wild prompts, or :func:`found_in` a row of that corpus source.

    The second test matters: 50 of the 113 non-TrustAIRLab templates (jailbreakchat and others) share their
    60-character key with a row of the in-the-wild corpus source.
    """
    taken = np.array([ITW_TEMPLATE_ORIGIN in (t.get("template_source") or "") for t in templates], dtype=bool)
    return taken | found_in(templates, itw_prompts)


@dataclass(frozen=True)
class TemplateSplit:
    """Template indices (into the list given to :func:`split_templates`) by use.

    Attributes:
        test: the templates of :func:`wrap_requests` (the evaluation set), in its order.
        extra_test: one template per near-duplicate group held out for the enlarged evaluation set, random order.
        train: one template per near-duplicate group for training, random order.
        linked: ``(n_templates,)`` bool, :func:`itw_linked` spread to every member of a near-duplicate group.
    """

    test: np.ndarray
    extra_test: np.ndarray
    train: np.ndarray
    linked: np.ndarray


def split_templates(templates: list[dict], itw_prompts: list[str], n_requests: int, test_n: int,
                    seed: int = 0) -> TemplateSplit:
    """Split templates by identity: evaluation, extra evaluation, training; near-duplicates never straddle the split.

    Groups of :func:`near_duplicate_groups` are the units. Every group holding one of the evaluation's
    ``test_n`` templates (``wrap_requests(templates, requests, test_n, seed)`` with ``len(requests) == n_requests``)
    is kept out of both other parts. The remaining groups are shuffled with ``seed`` and dealt alternately to training
    and extra evaluation, separately for in-the-wild-linked and unlinked groups (so both parts hold both kinds); a
    group is linked when any member is. Each group is represented by its first template.
    """
    groups = near_duplicate_groups([t["prompt"] for t in templates]).tolist()
    test, _ = evaluation_picks(len(templates), n_requests, test_n, seed)
    linked_one = itw_linked(templates, itw_prompts)
    linked_groups = {g for g, flag in zip(groups, linked_one) if flag}
    linked = np.array([g in linked_groups for g in groups])
    test_groups = {groups[i] for i in test}
    first: dict[int, int] = {}
    for i, g in enumerate(groups):
        first.setdefault(g, i)
    rng = np.random.default_rng(seed)
    train, extra = [], []
    for want_linked in (False, True):
        reps = np.array([i for g, i in first.items() if g not in test_groups and linked[i] == want_linked], dtype=int)
        reps = rng.permutation(reps)
        train += reps[0::2].tolist()
        extra += reps[1::2].tolist()
    return TemplateSplit(np.asarray(test), rng.permutation(np.array(extra, dtype=int)),
                         rng.permutation(np.array(train, dtype=int)), linked)


def extended_test_set(templates: list[dict], split: TemplateSplit, requests: list[Example], test_n: int,
                      extra_n: int, seed: int = 0) -> list[Example]:
    """The evaluation set of :func:`wrap_requests` plus ``extra_n`` rows on the split's extra templates.

    The extra rows fill ``split.extra_test[:extra_n]`` with held-out requests that the first ``test_n`` rows do not use.
    """
    base = wrap_requests(templates, requests, test_n, seed)
    _, used = evaluation_picks(len(templates), len(requests), test_n, seed)
    free = np.setdiff1d(np.arange(len(requests)), used)
    picks = np.random.default_rng(seed + 1).permutation(free)[:extra_n]
    extra = [Example(fill(templates[ti], requests[ri].prompt), 1, JAILBREAK_SOURCE, origin(templates[ti]), "jailbreak")
             for ti, ri in zip(split.extra_test[:extra_n], picks)]
    return base + extra


@dataclass(frozen=True)
class WrappedRow:
    """A training prompt wrapped in a training template, with what decides which folds may train on it."""

    example: Example
    request_source: str
    template: int
    linked: bool
    request: str = ""
    """The prompt that was wrapped (a request may be wrapped more than once when there are few)."""


def wrap_training_prompts(templates: list[dict], split: TemplateSplit, harmful: list[Example], benign: list[Example],
                          per_class: int, seed: int = 0) -> list[WrappedRow]:
    """Training-template wrappers around training prompts: ``2 * per_class`` rows of each label, in random order.

    Every fold of :func:`fold_rows` can then find ``per_class`` eligible rows per label:

    - harmful rows: four equal cells, request from AdvBench or HarmBench x template linked or not, so the fold holding
      out one request source (or the in-the-wild source) still has ``per_class`` rows;
    - benign rows: half on unlinked templates, requests drawn from all of ``benign``.

    With templates of one kind only (none linked, as in a user's own template file), both halves use them (each row
    records its own template's link, so the in-the-wild fold still never trains on a linked one); a request
    source without rows, or an empty ``benign``, adds no rows (the leave-one-source-out folds of ``herald recipes``
    then find fewer than ``per_class``; ``herald fit`` uses the harmful rows only).

    Args:
        harmful: training rows of :data:`REQUEST_SOURCES` (label 1); never the evaluation's held-out requests.
        benign: training rows of label 0.

    Raises:
        ValueError: no training template, or no harmful request of any :data:`REQUEST_SOURCES`.
    """
    rng = np.random.default_rng(seed)
    pools = {flag: [int(i) for i in split.train if split.linked[i] == flag] for flag in (False, True)}
    if not pools[False] and not pools[True]:
        raise ValueError("no training template: every template is an evaluation template or one of their near-duplicates")
    if not pools[False] or not pools[True]:
        pools = {flag: [int(i) for i in split.train] for flag in (False, True)}
    if not any(e.source in REQUEST_SOURCES for e in harmful):
        raise ValueError(f"no harmful request to wrap: no training row of {' or '.join(REQUEST_SOURCES)}")
    half = per_class // 2

    def cycle(flag: bool, n: int) -> list[int]:
        pool = pools[flag]
        order = [pool[j] for j in rng.permutation(len(pool))]
        return [order[j % len(order)] for j in range(n)]

    def draw(rows: list[Example], n: int) -> list[Example]:
        # Too few requests (HarmBench: 57 in the seed-0 train part) are reused, each time in another template.
        if not rows:
            raise ValueError("no requests to wrap")
        order = rng.permutation(len(rows))
        return [rows[order[j % len(rows)]] for j in range(n)]

    out = []
    for source in REQUEST_SOURCES:
        if not any(e.source == source for e in harmful):
            continue
        requests = draw([e for e in harmful if e.source == source], per_class)
        for flag, chunk in ((False, requests[:half]), (True, requests[half:])):
            for ti, e in zip(cycle(flag, len(chunk)), chunk):
                out.append(WrappedRow(Example(fill(templates[ti], e.prompt), 1, WRAPPED_HARMFUL_SOURCE,
                                              e.source, "jailbreak-train"), e.source, ti, bool(split.linked[ti]), e.prompt))
    requests = draw(benign, 2 * per_class) if benign else []
    for flag, chunk in ((False, requests[:per_class]), (True, requests[per_class:])):
        for ti, e in zip(cycle(flag, len(chunk)), chunk):
            out.append(WrappedRow(Example(fill(templates[ti], e.prompt), 0, WRAPPED_BENIGN_SOURCE, e.source,
                                          "jailbreak-train"), e.source, ti, bool(split.linked[ti]), e.prompt))
    return [out[j] for j in rng.permutation(len(out))]


def fold_rows(rows: list[WrappedRow], held_out: str | None, per_class: int, labels: tuple[int, ...] = (1, 0)) -> np.ndarray:
    """Indices into ``rows`` a fold may train on: the first ``per_class`` eligible rows of each label in ``labels``.

    Eligible: the request is not from ``held_out`` (the fold's held-out source; None for the random split), and, when
    ``held_out`` is the in-the-wild jailbreak source, the template is not linked to it.
    """
    itw = held_out is not None and ITW_SOURCE_KEY in held_out
    keep = []
    for label in labels:
        ok = [i for i, r in enumerate(rows)
              if r.example.label == label and r.request_source != held_out and not (itw and r.linked)]
        keep += ok[:per_class]
    return np.array(sorted(keep), dtype=int)


def training_wrappers(templates: list[dict], everything: list[Example], capped: list[Example], train_rows: list[Example],
                      per_class: int, test_n: int = EVALUATION_TEMPLATES, seed: int = 0,
                      known: tuple[list[Example], TemplateSplit] | None = None
                      ) -> tuple[TemplateSplit, list[Example], list[WrappedRow]]:
    """Training prompts wrapped in training templates, for ``herald recipes`` and ``herald fit``.

    Args:
        templates: :func:`load_templates` rows.
        everything: every corpus row (before the per-source cap); gives the held-out requests and the in-the-wild
            jailbreak rows that decide the template split.
        capped: the rows after the per-source cap (the training pool of :func:`held_out_requests`).
        train_rows: the rows a model may train on (the random split's train part); the only requests wrapped.
        per_class: wrapped rows per label a fit draws (:func:`wrap_training_prompts` makes up to twice as many).
        test_n: templates of the evaluation set (:func:`wrap_requests` with the same ``seed``), kept out of training
            with their near-duplicates.
        known: :func:`training_template_split` of these arguments, when the caller already has it (seconds of work
            on the PyRIT templates: ``herald fit`` computes it to refuse a file before the backbone loads).

    Returns:
        ``(split, requests, rows)``: the template split, the held-out requests of the evaluation sets, and the
        wrapped training rows. Harmful rows wrap AdvBench / HarmBench training requests (no copyright rows, no
        contextual ones); benign rows wrap training prompts of at most 500 characters.

    Raises:
        ValueError: as :func:`wrap_training_prompts` (no template or request of a kind).
    """
    requests, split = known or training_template_split(templates, everything, capped, test_n, seed)
    benign = [e for e in train_rows if e.label == 0 and len(e.prompt) <= 500]
    return split, requests, wrap_training_prompts(templates, split, wrappable(train_rows), benign, per_class, seed)


def request_source_near_misses(rows: list[Example]) -> str:
    """``""``, or a clause naming the harmful sources of ``rows`` that are :data:`REQUEST_SOURCES` in another case
    (``"advbench"``): source names are matched exactly, and a researcher's lower-case names read as "no AdvBench or
    HarmBench request" with 97 of them in the data (tester). Added to the messages that say none was found."""
    wanted = {name.lower() for name in REQUEST_SOURCES}
    near = sorted({e.source for e in rows if e.label == 1 and e.source not in REQUEST_SOURCES and e.source.lower() in wanted})
    if not near:
        return ""
    return (f"; source names are matched exactly, and the data's {', '.join(repr(n) for n in near)}"
            f" {'is' if len(near) == 1 else 'are'} not {' or '.join(repr(n) for n in REQUEST_SOURCES)}")


def wrappable(rows: list[Example]) -> list[Example]:
    """The harmful rows that may be wrapped: plain requests of :data:`REQUEST_SOURCES` (no copyright rows, no
    contextual rows, which carry a blank line and their context)."""
    return [e for e in rows if e.label == 1 and e.source in REQUEST_SOURCES
            and (e.category or "") != "copyright" and "\n\n" not in e.prompt]


def training_template_split(templates: list[dict], everything: list[Example], capped: list[Example],
                            test_n: int = EVALUATION_TEMPLATES, seed: int = 0) -> tuple[list[Example], TemplateSplit]:
    """The held-out requests of the evaluation sets and the template split (:func:`split_templates`) they imply.

    Needs no model: the evaluation set's templates depend only on the number of held-out requests and ``seed``, so
    ``herald fit`` can refuse a template file with no training template before the backbone loads.
    """
    requests = held_out_requests(everything, capped)
    itw = [e.prompt for e in everything if ITW_SOURCE_KEY in e.source]
    return requests, split_templates(templates, itw, len(requests), test_n, seed)

"""A real Prometheus scrapes the real Herald server (fake backend) and answers every Grafana dashboard query.

DESIGN section 5: the dashboard and the alert rules in ``docker/`` use exactly the metric names the service exports.
This module starts ``python -m herald_service serve`` and ``prometheus`` as subprocesses on loopback ports (Prometheus
scraping Herald's health port, ``HERALD_HEALTH_PORT``, as the shipped configs do), sends real traffic over HTTP, then
checks that

* every ``expr`` of every panel target in ``docker/grafana/dashboards/herald.json`` returns data (a non-empty
  vector or a scalar, and no NaN), all failures reported together;
* every rule of ``docker/prometheus/alerts.yml`` is loaded and evaluates with health ``ok``;
* every ``herald_*`` name in the dashboard and the alert rules exists in the service's ``/metrics``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import free_port

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "docker" / "grafana" / "dashboards" / "herald.json"
ALERTS = REPO / "docker" / "prometheus" / "alerts.yml"
STEER_KEY = "steer-key-prom-01234"  # 20 characters
assert len(STEER_KEY) == 20

SERVER_READY_S = 60.0
PROMETHEUS_READY_S = 20.0
TRAFFIC_S = 15.0
TRAFFIC_MAX_ROUNDS = 300
QUERY_RETRY_S = 15.0
RULES_RETRY_S = 10.0

# Grafana's built-in interval variables, in case a panel uses them; anything else left with a `$` is a failure.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}

HERALD_NAME = re.compile(r"\bherald_[A-Za-z0-9_:]*")


# --- helpers -------------------------------------------------------------------------------------------------------


def log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return "<no log>"


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def wait_http_ok(client: httpx.Client, url: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Poll ``url`` until 200, failing early if ``proc`` exits and with its log tail on timeout."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode} before {url} was ready:\n{log_tail(log)}")
        try:
            r = client.get(url, timeout=2.0)
            if r.status_code == 200:
                return
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready after {timeout_s} s (last: {last}):\n{log_tail(log)}")


def dashboard_exprs(node: object) -> list[str]:
    """Every ``expr`` string anywhere in the dashboard JSON (panels, nested rows' panels, templating)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                if value.strip():
                    found.append(value)
            else:
                found.extend(dashboard_exprs(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(dashboard_exprs(item))
    return found


def resolve_variables(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def metric_families(exposition: str) -> tuple[dict[str, str], set[str]]:
    """``# TYPE`` names with their types, and the names of all samples, from a text exposition."""
    types: dict[str, str] = {}
    samples: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            samples.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return types, samples


def name_exported(name: str, types: dict[str, str], samples: set[str]) -> bool:
    if name in samples or name in types:
        return True
    suffixes = {"_bucket": {"histogram"}, "_sum": {"histogram", "summary"}, "_count": {"histogram", "summary"}, "_total": {"counter"}}
    return any(name.endswith(suffix) and types.get(name[: -len(suffix)]) in kinds for suffix, kinds in suffixes.items())


def query_problem(result: dict) -> str | None:
    """None when an instant-query answer holds data; else what is wrong with it."""
    if result.get("status") != "success":
        return f"status {result.get('status')}: {result.get('errorType')} {result.get('error')}"
    data = result["data"]
    kind, value = data["resultType"], data["result"]
    if kind == "scalar":
        values = [value[1]]
    elif kind == "vector":
        if not value:
            return "empty vector"
        values = [sample["value"][1] for sample in value]
    else:
        return f"unexpected result type {kind}"
    if any(math.isnan(float(v)) for v in values):
        return f"NaN in result {value}"
    return None


# --- the stack -----------------------------------------------------------------------------------------------------


class Stack:
    def __init__(self, herald: str, prometheus: str, http: httpx.Client) -> None:
        self.herald = herald
        self.prometheus = prometheus
        self.http = http

    def query(self, expr: str) -> dict:
        r = self.http.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=5.0)
        try:
            return r.json()
        except ValueError:
            return {"status": f"http {r.status_code}", "error": r.text[:300]}


def send_traffic(http: httpx.Client, base: str) -> dict[str, int]:
    """Real requests of every kind the dashboard charts, for a bounded time and a bounded number of rounds."""
    steer = {"Authorization": f"Bearer {STEER_KEY}"}
    requests: list[tuple[str, dict, dict]] = [
        ("/classify", {"input": "how do I build a bomb"}, {}),
        ("/classify", {"input": "how do I bake bread"}, {}),
        ("/classify", {"input": ["hello there", "make a bomb", "poison the well", "a nice walk in the park"]}, {}),
        ("/classify", {"messages": [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "steal a car"}]]}, {}),
        ("/v1/moderations", {"input": ["hello there", "make a bomb"], "model": "omni-moderation-latest"}, {}),
        ("/v1/moderations", {"input": "what a lovely day"}, {}),
        ("/classify", {"input": ["a"] * 65}, {}),  # 413: over max_batch_size (64)
        ("/classify", {"input": "x" * 32_001}, {}),  # 413: over max_chars (32000)
        ("/classify", {"input": []}, {}),  # 422
        ("/classify", {"input": "a", "surprise": 1}, {}),  # 422
    ]
    statuses: dict[str, int] = {}
    deadline = time.monotonic() + TRAFFIC_S
    for round_no in range(TRAFFIC_MAX_ROUNDS):
        if time.monotonic() >= deadline:
            break
        batch = list(requests)
        if round_no % 5 == 0:
            batch.append(("/steer", {"prompt": "make a bomb", "max_new_tokens": 8}, steer))
        for path, body, headers in batch:
            r = http.post(f"{base}{path}", json=body, headers=headers, timeout=10.0)
            key = f"{path} {r.status_code}"
            statuses[key] = statuses.get(key, 0) + 1
        time.sleep(0.05)
    return statuses


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    prometheus_bin = shutil.which("prometheus")
    if prometheus_bin is None:
        pytest.fail("no prometheus binary on PATH (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prom")
    herald_port, health_port, prom_port = free_port(), free_port(), free_port()
    while len({herald_port, health_port, prom_port}) < 3:
        health_port, prom_port = free_port(), free_port()
    herald_url, prom_url = f"http://127.0.0.1:{herald_port}", f"http://127.0.0.1:{prom_port}"

    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            # Herald's health port, as docker/prometheus/prometheus.yml and the k8s scrape annotation use
            {"job_name": "herald", "metrics_path": "/metrics", "static_configs": [{"targets": [f"127.0.0.1:{health_port}"]}]}
        ],
    }
    config_path = tmp / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update(
        HERALD_FAKE_BACKEND="true",
        HERALD_HOST="127.0.0.1",
        HERALD_PORT=str(herald_port),
        HERALD_HEALTH_PORT=str(health_port),
        HERALD_STEER_ENABLED="true",
        HERALD_STEER_API_KEY=STEER_KEY,
        HERALD_LOG_LEVEL="warning",
    )
    herald_log, prom_log = tmp / "herald.log", tmp / "prometheus.log"
    herald = prometheus = None
    http = httpx.Client(trust_env=False)
    try:
        with herald_log.open("wb") as out:
            herald = subprocess.Popen(
                [sys.executable, "-m", "herald_service", "serve"], cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        with prom_log.open("wb") as out:
            prometheus = subprocess.Popen(
                [
                    prometheus_bin,
                    f"--config.file={config_path}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    "--storage.tsdb.retention.time=1h",
                ],
                cwd=tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_http_ok(http, f"{herald_url}/health/ready", herald, herald_log, SERVER_READY_S)
        wait_http_ok(http, f"{prom_url}/-/ready", prometheus, prom_log, PROMETHEUS_READY_S)

        statuses = send_traffic(http, herald_url)
        assert any(k.endswith(" 200") and k.startswith("/classify") for k in statuses), statuses
        assert any(k.startswith("/v1/moderations 200") for k in statuses), statuses
        assert any(k.startswith("/steer 200") for k in statuses), statuses
        assert any(k.endswith(" 413") for k in statuses) and any(k.endswith(" 422") for k in statuses), statuses
        assert herald.poll() is None, f"herald exited during traffic:\n{log_tail(herald_log)}"
        yield Stack(herald_url, prom_url, http)
    finally:
        http.close()
        stop(prometheus)
        stop(herald)


# --- tests ---------------------------------------------------------------------------------------------------------


def test_dashboard_has_queries():
    exprs = dashboard_exprs(json.loads(DASHBOARD.read_text(encoding="utf-8")))
    assert len(exprs) >= 10, f"only {len(exprs)} expressions found in {DASHBOARD}"


def test_dashboard_rate_windows_follow_the_scrape_interval():
    # literal [1m] windows gave empty panels where Prometheus scrapes once a minute (rate() needs two samples in the
    # window); Grafana's $__rate_interval is at least four scrape intervals. The 1-day flag-rate baseline stays literal.
    exprs = dashboard_exprs(json.loads(DASHBOARD.read_text(encoding="utf-8")))
    windows = [w for e in exprs for w in re.findall(r"\[([^\]]+)\]", e)]
    assert windows.count("$__rate_interval") >= 40
    assert set(windows) == {"$__rate_interval", "1d"}, sorted(set(windows))


def test_every_dashboard_query_returns_data(stack):
    exprs = list(dict.fromkeys(resolve_variables(e) for e in dashboard_exprs(json.loads(DASHBOARD.read_text(encoding="utf-8")))))
    assert exprs
    unresolved = [e for e in exprs if "$" in e]
    pending = [e for e in exprs if "$" not in e]
    problems: dict[str, str] = {}
    deadline = time.monotonic() + QUERY_RETRY_S
    for _attempt in range(100):
        problems = {}
        for expr in pending:
            problem = query_problem(stack.query(expr))
            if problem is not None:
                problems[expr] = problem
        pending = list(problems)  # an answer with data stays good; retry only the rest
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    problems.update({e: "unresolved Grafana variable" for e in unresolved})
    assert not problems, f"{len(problems)} of {len(exprs)} dashboard queries returned no data:\n" + "\n".join(
        f"  {expr}\n    -> {problem}" for expr, problem in problems.items()
    )


def test_every_alert_rule_is_loaded_and_healthy(stack):
    expected = {rule.get("alert") or rule["record"] for rule in alert_rules()}
    assert expected
    deadline = time.monotonic() + RULES_RETRY_S
    loaded: dict[str, tuple[str, str]] = {}
    for _attempt in range(100):
        body = stack.http.get(f"{stack.prometheus}/api/v1/rules", timeout=5.0).json()
        assert body["status"] == "success", body
        loaded = {
            rule["name"]: (rule.get("health", ""), rule.get("lastError", ""))
            for group in body["data"]["groups"]
            for rule in group["rules"]
        }
        if set(loaded) >= expected and all(loaded[name][0] == "ok" for name in expected) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    missing = sorted(expected - set(loaded))
    unhealthy = {name: loaded[name] for name in sorted(expected & set(loaded)) if loaded[name][0] != "ok"}
    assert not missing and not unhealthy, f"rules not loaded: {missing}; rules not healthy (health, lastError): {unhealthy}"


def test_dashboard_and_alert_metric_names_exist_in_metrics(stack):
    r = stack.http.get(f"{stack.herald}/metrics", timeout=5.0)
    assert r.status_code == 200
    types, samples = metric_families(r.text)
    sources = {
        "dashboard": dashboard_exprs(json.loads(DASHBOARD.read_text(encoding="utf-8"))),
        "alerts": [rule["expr"] for rule in alert_rules()],
    }
    unknown: dict[str, set[str]] = {}
    for source, exprs in sources.items():
        names = {name for expr in exprs for name in HERALD_NAME.findall(expr)}
        assert names, f"no herald_* names in the {source}"
        for name in names:
            if not name_exported(name, types, samples):
                unknown.setdefault(name, set()).add(source)
    exported = sorted(n for n in types if n.startswith("herald_"))
    assert not unknown, f"herald_* names not in /metrics: {unknown}; exported families: {exported}"


def test_the_alert_rules_pass_promtool_s_checks_and_their_unit_tests():
    # docker/prometheus/alerts_test.yml (each rule's firing and silence over time, e.g. HeraldWorkerDown during a load
    # and after a failed one) was run by hand only; promtool comes with Debian's prometheus package, as CI installs it
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("no promtool binary on PATH (apt-get install prometheus)")
    folder = ALERTS.parent
    for args in (("check", "config", "prometheus.yml"), ("test", "rules", "alerts_test.yml")):
        run = subprocess.run([promtool, *args], cwd=folder, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (args, run.stdout, run.stderr)
        assert "SUCCESS" in run.stdout, (args, run.stdout)

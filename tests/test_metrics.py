"""The metric helpers the request path calls: cached labelled children count into the declared series."""

from dataclasses import replace

from herald_service.metrics import HeraldMetrics
from herald_service.types import Classification


def _verdict(flagged: bool, score: float) -> Classification:
    return Classification(flagged, score, 0.0, 0.0, 3, {}, [], None)


def sample(metrics: HeraldMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_observe_request_counts_by_route_and_status_and_observes_latency():
    metrics = HeraldMetrics()
    for status, seconds in ((200, 0.003), (200, 0.04), (429, 0.001)):
        metrics.observe_request("/classify", status, seconds)
    assert sample(metrics, "herald_requests_total", route="/classify", status="200") == 2
    assert sample(metrics, "herald_requests_total", route="/classify", status="429") == 1
    # latency by status class: the fast 429 is kept apart from the answers (a flood of refusals hid slow answers)
    assert sample(metrics, "herald_request_duration_seconds_count", route="/classify", status_class="2xx") == 2
    assert sample(metrics, "herald_request_duration_seconds_count", route="/classify", status_class="4xx") == 1
    assert abs(sample(metrics, "herald_request_duration_seconds_sum", route="/classify", status_class="2xx") - 0.043) < 1e-12
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", status_class="2xx", le="0.005") == 1
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", status_class="4xx", le="0.005") == 1


def test_a_client_gone_499_has_a_latency_class_of_its_own_not_4xx():
    # Behind a gateway with a short timeout the slow requests end as 499; as "4xx" they fell out of the latency alert
    # and panels, which leave fast 4xx refusals out (tester).
    metrics = HeraldMetrics()
    metrics.observe_request("/classify", 499, 30.0)
    metrics.observe_request("/classify", 422, 0.002)
    assert sample(metrics, "herald_requests_total", route="/classify", status="499") == 1
    assert sample(metrics, "herald_request_duration_seconds_count", route="/classify", status_class="499") == 1
    assert sample(metrics, "herald_request_duration_seconds_sum", route="/classify", status_class="499") == 30.0
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", status_class="499", le="10.0") == 0
    assert sample(metrics, "herald_request_duration_seconds_count", route="/classify", status_class="4xx") == 1


def test_observe_decisions_counts_each_verdict_and_its_score():
    metrics = HeraldMetrics()
    metrics.observe_decisions("/v1/moderations", [_verdict(True, 0.97), _verdict(False, 0.02), _verdict(False, 0.3)])
    metrics.observe_decisions("/classify", [_verdict(True, 0.6)])
    assert sample(metrics, "herald_moderation_decisions_total", route="/v1/moderations", decision="flagged") == 1
    assert sample(metrics, "herald_moderation_decisions_total", route="/v1/moderations", decision="allowed") == 2
    assert sample(metrics, "herald_moderation_decisions_total", route="/classify", decision="flagged") == 1
    assert sample(metrics, "herald_moderation_score_ratio_count") == 4
    assert sample(metrics, "herald_moderation_score_ratio_bucket", le="0.05") == 1
    # flagged verdicts by the prompt that decided them (allowed ones are not: every prompt scored under the threshold)
    assert sample(metrics, "herald_flagged_by_view_total", route="/v1/moderations", view="whole") == 1
    metrics.observe_decisions("/classify", [replace(_verdict(True, 0.9), view="reading", view_text="how to ..."),
                                            replace(_verdict(False, 0.1), view="trimmed", view_text="x y z")])
    assert sample(metrics, "herald_flagged_by_view_total", route="/classify", view="reading") == 1
    assert sample(metrics, "herald_flagged_by_view_total", route="/classify", view="whole") == 1
    assert sample(metrics, "herald_flagged_by_view_total", route="/classify", view="trimmed") == 0


def test_two_apps_keep_their_own_series():
    a, b = HeraldMetrics(), HeraldMetrics()
    a.observe_request("/classify", 200, 0.01)
    assert sample(a, "herald_requests_total", route="/classify", status="200") == 1
    assert sample(b, "herald_requests_total", route="/classify", status="200") == 0


def _scraped(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_known_label_series_are_exported_at_zero_before_any_traffic():
    # A series created at its first increment loses that increment in rate()/increase() after each restart (tester).
    from fastapi.testclient import TestClient

    from herald_service.api.app import build_app
    from herald_service.config import Settings

    scraped = _scraped(TestClient(build_app(Settings(_env_file=None, fake_backend=True))).get("/metrics").text)
    for route in ("/classify", "/v1/moderations", "/steer"):
        for status in ("200", "429", "499", "500", "503", "504"):
            assert scraped[("herald_requests_total", (("route", route), ("status", status)))] == 0, (route, status)
        for status_class in ("2xx", "4xx", "499", "5xx"):  # of STARTING_STATUSES
            assert scraped[("herald_request_duration_seconds_count", (("route", route), ("status_class", status_class)))] == 0
            assert scraped[("herald_request_duration_seconds_bucket", (("le", "+Inf"), ("route", route), ("status_class", status_class)))] == 0
    for route in ("/classify", "/v1/moderations"):
        for decision in ("flagged", "allowed"):
            assert scraped[("herald_moderation_decisions_total", (("decision", decision), ("route", route)))] == 0
        for view in ("whole", "message", "content_part", "trimmed", "reading"):
            assert scraped[("herald_flagged_by_view_total", (("route", route), ("view", view)))] == 0, (route, view)
    for reason in ("batch_size", "messages", "characters", "tokens", "estimated_work", "estimated_wait", "queue_full",
                   "steer_concurrency", "body_size", "body_timeout", "content_type", "content_encoding",
                   "transfer_encoding", "invalid_request"):
        assert scraped[("herald_rejected_requests_total", (("reason", reason),))] == 0, reason
    for reason in ("client_gone", "timeout"):
        assert scraped[("herald_dropped_prompts_total", (("reason", reason),))] == 0, reason
    for kind in ("message", "content_part", "trimmed", "reading"):
        assert scraped[("herald_scored_views_total", (("kind", kind),))] == 0, kind
    for mode in ("ablate", "add"):  # appeared only after the first /steer (tester)
        assert scraped[("herald_steer_runs_total", (("mode", mode),))] == 0, mode


def test_every_reason_the_code_counts_is_created_at_start():
    import re
    from pathlib import Path

    from herald_service.metrics import DROP_REASONS, REJECT_REASONS

    source = "\n".join(p.read_text() for p in Path("herald_service").rglob("*.py"))
    rejected = set(re.findall(r'rejected\.labels\("(\w+)"\)', source)) | set(re.findall(r'reason(?:, field)? = "(\w+)"', source))
    rejected |= set(re.findall(r'reason(?:: str)?=? ?"(\w+)"', source))
    assert rejected and rejected <= set(REJECT_REASONS), rejected - set(REJECT_REASONS)
    dropped = set(re.findall(r'\.cancel\(futures, "(\w+)" if \w+ else "(\w+)"\)', source)[0])
    assert dropped | {"client_gone"} <= set(DROP_REASONS)


def test_every_steer_mode_is_created_at_start():
    import typing

    from herald_service.api.schemas import SteerRequest
    from herald_service.metrics import STEER_MODES

    assert set(STEER_MODES) == set(typing.get_args(SteerRequest.model_fields["mode"].annotation))


def test_no_created_sample_is_exported_beside_counters_and_histograms():
    # prometheus_client's default *_created sample doubled the series (tester); nothing reads it.
    from fastapi.testclient import TestClient

    from herald_service.api.app import build_app
    from herald_service.config import Settings

    app = build_app(Settings(_env_file=None, fake_backend=True))
    app.state.herald.metrics.observe_request("/classify", 200, 0.01)
    scraped = _scraped(TestClient(app).get("/metrics").text)
    assert ("herald_requests_total", (("route", "/classify"), ("status", "200"))) in scraped
    assert ("herald_request_duration_seconds_count", (("route", "/classify"), ("status_class", "2xx"))) in scraped
    assert [name for name, _ in scraped if name.endswith("_created")] == []


def test_latency_buckets_reach_past_the_default_request_timeout():
    # They ended at 30 s against a 60 s default timeout: a p99 of requests that timed out read about 29.5 s (tester).
    from herald_service.config import Settings

    metrics = HeraldMetrics()
    metrics.observe_request("/classify", 504, 59.0)
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", status_class="5xx", le="30.0") == 0
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", status_class="5xx", le="45.0") == 0
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", status_class="5xx", le="60.0") == 1
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", status_class="5xx", le="120.0") == 1
    assert Settings(_env_file=None).request_timeout_s == 60.0  # the default these buckets are sized for (to 2x)


def test_the_admission_wait_limit_and_the_process_start_time_are_exported_for_the_alert_rules():
    # HeraldQueueBacklog compares the estimated wait with the limit; HeraldWorkerDown leaves a process younger than
    # the startup allowance alone (it fired on every slow model load).
    import time

    from fastapi.testclient import TestClient

    from herald_service.api.app import build_app
    from herald_service.config import Settings

    app = build_app(Settings(_env_file=None, fake_backend=True, request_timeout_s=30))
    scraped = _scraped(TestClient(app).get("/metrics").text)
    assert scraped[("herald_admission_wait_limit_seconds", ())] == 0.8 * 30
    started = scraped[("herald_process_start_time_seconds", ())]
    assert time.time() - 3600 < started <= time.time()


def test_a_probe_without_reference_logits_exports_no_reference_distance():
    # "unchecked" must not read as "checked, distance 0" (the fake backend fits its probe at start-up: no reference)
    from fastapi.testclient import TestClient

    from conftest import wait_ready
    from herald_service.api.app import build_app
    from herald_service.config import Settings

    with TestClient(build_app(Settings(_env_file=None, fake_backend=True))) as client:
        wait_ready(client)
        text = client.get("/metrics").text
        assert "# HELP herald_probe_reference_logit_distance Median distance, in logits" in text
        assert "herald_probe_reference_logit_distance{" not in text
        assert client.get("/v1/info").json()["probe"]["reference_check"] is None


def test_a_client_address_that_is_not_one_is_logged_as_a_json_string_not_as_more_fields():
    # a forwarded value is the client's to write: "10.9.9.9 status=200 request_id=FORGED" added fields (tester)
    from herald_service.api.middleware import client_host

    for host in ("10.9.9.9", "2001:db8::1", "fe80::1%eth0", "[2001:db8::1]", "unknown", "_hidden", "proxy-1.local"):
        assert client_host({"client": (host, 1)}) == host
    assert client_host({"client": ("10.9.9.9 status=200 request_id=FORGED", 1)}) == \
        '"10.9.9.9 status=200 request_id=FORGED"'
    assert client_host({"client": ('a"\nb', 1)}) == '"a\\"\\nb"'
    assert client_host({"client": ("x" * 100, 1)}) == '"' + "x" * 64 + '"'
    assert client_host({}) == "-" and client_host({"client": None}) == "-"

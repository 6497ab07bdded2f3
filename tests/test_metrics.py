"""The metric helpers the request path calls: cached labelled children count into the declared series."""

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
    assert sample(metrics, "herald_request_duration_seconds_count", route="/classify") == 3
    assert abs(sample(metrics, "herald_request_duration_seconds_sum", route="/classify") - 0.044) < 1e-12
    assert sample(metrics, "herald_request_duration_seconds_bucket", route="/classify", le="0.005") == 2


def test_observe_decisions_counts_each_verdict_and_its_score():
    metrics = HeraldMetrics()
    metrics.observe_decisions("/v1/moderations", [_verdict(True, 0.97), _verdict(False, 0.02), _verdict(False, 0.3)])
    metrics.observe_decisions("/classify", [_verdict(True, 0.6)])
    assert sample(metrics, "herald_moderation_decisions_total", route="/v1/moderations", decision="flagged") == 1
    assert sample(metrics, "herald_moderation_decisions_total", route="/v1/moderations", decision="allowed") == 2
    assert sample(metrics, "herald_moderation_decisions_total", route="/classify", decision="flagged") == 1
    assert sample(metrics, "herald_moderation_score_ratio_count") == 4
    assert sample(metrics, "herald_moderation_score_ratio_bucket", le="0.05") == 1


def test_two_apps_keep_their_own_series():
    a, b = HeraldMetrics(), HeraldMetrics()
    a.observe_request("/classify", 200, 0.01)
    assert sample(a, "herald_requests_total", route="/classify", status="200") == 1
    assert sample(b, "herald_requests_total", route="/classify", status="200") == 0

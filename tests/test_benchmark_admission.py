"""benchmarks/admission.py reads the server's own formats (the 413's message, the Prometheus text): checked against
the code that writes them, so a changed format fails here rather than as a wrong number in a benchmark run."""

import pytest
from prometheus_client import generate_latest

from benchmarks.admission import burst_kinds, cost_fit, estimate_in_message, rejected
from herald_service.engine.admission import TERMS, CostFit, TooMuchWork, Work
from herald_service.metrics import HeraldMetrics


@pytest.mark.parametrize("seconds", [3.25, 69.4, 1234.0])
def test_estimate_in_message_reads_the_413s_figure(seconds):
    message = TooMuchWork(seconds, 60.0, Work.of_prompts([861] * 64)).message
    assert estimate_in_message(message) == pytest.approx(seconds, abs=0.5)  # the message rounds to 1 s from 10 s up


def test_estimate_in_message_is_none_without_one():
    assert estimate_in_message("queue is full (1024 prompts waiting); retry shortly") is None


def test_cost_fit_and_rejections_are_read_from_the_metrics_text():
    metrics = HeraldMetrics()
    fit = CostFit(0.05, 0.002, 1.3e-3, 2.5e-8, 64, 8192)
    for term, value in zip(TERMS, (fit.per_batch_s, fit.per_prompt_s, fit.per_token_s, fit.per_squared_token_s)):
        metrics.worker_cost.labels(term).set(value)
    metrics.rejected.labels("estimated_wait").inc(3)
    text = generate_latest(metrics.registry).decode()
    assert cost_fit(text, {"batch_max_prompts": 64, "batch_token_budget": 8192}) == fit
    assert rejected(text) == {"estimated_wait": 3.0}


def test_mixed_burst_is_150_short_40_medium_10_long_in_a_fixed_order():
    kinds = burst_kinds("mixed")
    assert [kinds.count(k) for k in "sml"] == [150, 40, 10]
    assert kinds == burst_kinds("mixed") and kinds != sorted(kinds)
    assert burst_kinds("s") == ["s"] * 200
    assert burst_kinds("overload-long") == ["x"] * 200 and burst_kinds("overload-short") == ["s"] * 2000

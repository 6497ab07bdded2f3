"""Admission by estimated wait and the /steer concurrency cap: overload is answered 429 with Retry-After at once,
not 504 after ``request_timeout_s``; every accepted request still gets exactly one answer."""

import re
import threading
import time
from concurrent.futures import wait

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from conftest import wait_ready
from herald_service.api.app import build_app
from herald_service.backbone.fake import FakeBackbone
from herald_service.config import Settings
from herald_service.engine.admission import (DECODE_MEMORY, MIN_TIMED_STEPS, OWN_WORK_HEADROOM, BatchCost, BatchTiming, CostFit, JobClock, Refusal,
                                             STOPPING_S, StepSeconds, TooMuchWork, Work, admission_verdict, ahead_seconds,
                                             exceeding_texts, jobs_left_s, may_be_too_much_work)
from herald_service.engine.engine import EngineLimits, InferenceEngine
from herald_service.engine.runtime import Runtime, fake_runtime
from herald_service.errors import QueueFull, WorkTooLarge
from herald_service.metrics import HeraldMetrics
from herald_service.types import user_turn

STEER_KEY = "steer-key-0123456789"


@pytest.fixture(scope="module")
def runtime():
    return fake_runtime()


def sharing_vocab(runtime, backbone):
    """``backbone`` with the probe's fake vocabulary, so its states score as the probe expects."""
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    return backbone


def prompt_of(tokens: int) -> str:
    """A prompt the fake renders to exactly ``tokens`` tokens (3 template tokens plus one per word)."""
    return " ".join(["wd"] * (tokens - 3))  # words of two letters: single letters would be joined (prompt_text.py)


def rejected(metrics: HeraldMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("herald_rejected_requests_total", {"reason": reason}) or 0.0


# -- the cost model (pure arithmetic) ----------------------------------------------------------------------------
TRUE = (0.1, 0.002, 0.0008, 2e-7)  # per batch, per prompt, per token, per squared token: a CPU-like worker


def timing(lengths: list[int], terms: tuple[float, ...] = TRUE, noise: float = 0.0) -> BatchTiming:
    """A batch of prompts of these lengths, timed as ``terms`` say (times ``1 + noise``)."""
    work = Work.of_prompts(lengths)
    seconds = terms[0] + terms[1] * work.prompts + terms[2] * work.tokens + terms[3] * work.squared_tokens
    return BatchTiming(work.prompts, work.tokens, seconds * (1.0 + noise), work.squared_tokens)


def terms_of(fit: CostFit) -> tuple[float, float, float, float]:
    return fit.per_batch_s, fit.per_prompt_s, fit.per_token_s, fit.per_squared_token_s


WARM_UP = (timing([17, 18]), timing([94] * 8), timing([534] * 2))  # the shapes api.app times at warm-up


def test_the_cost_model_recovers_known_terms_from_batches_of_mixed_shapes():
    rng = np.random.default_rng(0)
    shapes = [[int(n) for n in rng.integers(5, 1500, size=int(rng.integers(1, 65)))] for _ in range(64)]
    exact, noisy = BatchCost(), BatchCost()
    for lengths in shapes:
        exact.observe(timing(lengths))
        noisy.observe(timing(lengths, noise=float(rng.normal(0, 0.01))))
    assert terms_of(exact.fit) == pytest.approx(TRUE, rel=1e-3)
    # With 1% noise on batches of up to a minute the small terms are lost in it: long requests, the ones admission
    # can refuse, stay within 5%; short ones may be over-estimated by a few seconds (2.9 s read as 5.7 s here), which
    # matters only against a limit of a few seconds.
    for lengths in ([861] * 64, [1500] * 30):
        assert noisy.seconds(Work.of_prompts(lengths)) == pytest.approx(timing(lengths).seconds, rel=0.05)
    # Beyond the longest prompt measured (1,500 tokens) the split between the token and squared terms extrapolates.
    assert noisy.seconds(Work.of_prompts([4000] * 8)) == pytest.approx(timing([4000] * 8).seconds, rel=0.25)
    for lengths in ([52] * 64, [20]):
        assert timing(lengths).seconds * 0.5 <= noisy.seconds(Work.of_prompts(lengths)) <= timing(lengths).seconds + 3.0


def test_the_warm_up_timings_alone_are_the_fit_until_a_batch_is_measured():
    cost = BatchCost(WARM_UP)
    for lengths in ([17, 18], [94] * 8, [534] * 2):  # the three shapes are answered as measured
        assert cost.seconds(Work.of_prompts(lengths)) == pytest.approx(timing(lengths).seconds, rel=1e-6)
    assert BatchCost().fit is None and BatchCost().seconds(Work(1, 10)) is None


def test_one_prompt_batches_do_not_make_long_prompts_free():
    # The breaker's case: a model without a per-batch term, fitted on one-prompt batches of a few tokens (each mostly
    # fixed cost), drove the per-token cost to 0, and 8 x 4,000 tokens were admitted as 1 s of work, then timed out.
    cost = BatchCost(WARM_UP)
    for i in range(60):
        cost.observe(timing([3 + i % 4]))
    long = Work.of_prompts([4000] * 8)
    assert cost.seconds(long) == pytest.approx(timing([4000] * 8).seconds, rel=0.15)  # about 51 s, not 1 s
    assert cost.fit.per_token_s > 0


# Measured on the embedded backbone (SmolLM2-135M, CPU): the warm-up shapes, then 64 x 71 tokens, four batches of
# 16 x 431 tokens, and 60 one-prompt requests of about 12 tokens (the breaker's second case).
MEASURED_PRIOR = (BatchTiming(2, 70, 0.113, 2 * 35**2), BatchTiming(8, 752, 0.875, 8 * 94**2),
                  BatchTiming(2, 828, 1.018, 2 * 414**2))


def test_live_batches_of_few_shapes_cannot_move_cost_between_terms_at_will(monkeypatch):
    def fitted() -> BatchCost:
        cost = BatchCost(MEASURED_PRIOR)
        cost.observe(BatchTiming(64, 64 * 71, 5.0, 64 * 71**2))
        for _ in range(4):
            cost.observe(BatchTiming(16, 16 * 431, 9.8, 16 * 431**2))
        for i in range(60):
            cost.observe(BatchTiming(1, 10 + i % 4, 0.15, (10 + i % 4) ** 2))
        return cost

    # 8 x 2,000 tokens take about 25 s there (1.3-2.3 ms a token); held to the warm-up fit, the estimate stays close.
    assert 18.0 <= fitted().seconds(Work.of_prompts([2000] * 8)) <= 35.0
    # Plain least squares put 0 on the token term and 13x on the squared one: 89 s, a false 413 at the 60 s limit.
    monkeypatch.setattr("herald_service.engine.admission.RIDGE_WEIGHT", 1e-12)
    assert fitted().seconds(Work.of_prompts([2000] * 8)) > 60.0


def test_long_batches_do_not_price_short_prompts_near_zero():
    # Third breaker pass: a warm-up seed timed low on its middle shape, then one-prompt traffic and only 2 x 3,000-token
    # batches; fitted on absolute errors the long batches decided everything and 64 chat prompts of 260 tokens (about
    # 19 s) read as 4 s, so admitted requests timed out. On relative errors each batch counts by its share.
    worker = (0.08, 0.0, 0.00106, 2.2e-7)
    seed = (BatchTiming(2, 70, 0.132, 2 * 35**2), BatchTiming(8, 752, 0.78, 8 * 94**2), BatchTiming(2, 828, 1.3, 2 * 414**2))
    cost = BatchCost(seed)
    for _ in range(30):
        cost.observe(timing([12], worker))
    for _ in range(12):
        cost.observe(timing([3000, 3000], worker))
    chat = timing([260] * 64, worker).seconds  # one batch
    assert 0.7 * chat <= cost.seconds(Work.of_prompts([260] * 64)) <= 1.3 * chat
    assert cost.seconds(Work.of_prompts([3000] * 2)) == pytest.approx(timing([3000] * 2, worker).seconds, rel=0.05)


def test_every_term_stays_non_negative_and_finite():
    # Seconds that fall with tokens at a fixed prompt count would give a negative per-token term.
    cost = BatchCost(forgetting=1.0)
    for batch in (BatchTiming(4, 100, 0.4), BatchTiming(4, 400, 0.3), BatchTiming(8, 200, 0.8)):
        cost.observe(batch)
    assert all(np.isfinite(terms_of(cost.fit))) and min(terms_of(cost.fit)) >= 0
    # One shape only, no prior: still an answer for that shape.
    alone = BatchCost()
    for _ in range(3):
        alone.observe(BatchTiming(10, 500, 0.4, 25_000))
    assert alone.seconds(Work(10, 500, 0, 25_000)) == pytest.approx(0.4, rel=1e-6)


def test_work_is_costed_as_the_batches_it_will_take():
    fit = CostFit(1.0, 0.0, 0.0, 0.0, batch_prompts=64, batch_tokens=8192)
    assert fit.seconds(Work()) == 0.0
    assert fit.seconds(Work.of_prompts([10] * 64)) == 1.0
    assert fit.seconds(Work.of_prompts([10] * 65)) == 2.0  # prompts per batch
    assert fit.seconds(Work.of_prompts([4000] * 3)) == 2.0  # tokens per batch


def test_forgetting_lets_the_fit_follow_a_change_of_speed():
    cost = BatchCost(WARM_UP)
    shapes = [[40], [700] * 8, [50] * 32, [500] * 4, [300] * 16]
    for i in range(50):
        cost.observe(timing(shapes[i % 5]))
    slower = tuple(3 * t for t in TRUE)  # the device got three times slower (another tenant, thermal throttling)
    for i in range(50):
        cost.observe(timing(shapes[i % 5], slower))
    # The ridge toward the warm-up fit (RIDGE_WEIGHT) holds each term back (after 50 batches of a 3x slow-down the
    # fit alone is about a quarter short, 9.5 s of 12.8 s); the slowdown factor makes up the rest.
    after = cost.seconds(Work.of_prompts([300] * 16))
    assert after == pytest.approx(timing([300] * 16, slower).seconds, rel=0.05)
    assert cost.slowdown_ > 1.2


CHAT = [45] * 51  # the testers' batch: 64-prompt requests of short chat prompts, cut by the token budget


@pytest.mark.parametrize("factor", [2.0, 3.0])
def test_a_uniform_slowdown_reaches_every_estimate_after_two_slow_batches_and_leaves_when_speed_returns(factor):
    # The testers' case: a warm-up and live batches on an idle CPU, then another process takes a core. Forgetting
    # (0.9 a batch), the relative errors and the ridge toward the warm-up held the fit back: after 10 batches 3x slower
    # it read 0.59 of the new cost of the shape measured and 0.32 of another, and admitted requests ran into 504s.
    cost = BatchCost(WARM_UP)
    for _ in range(15):
        cost.observe(timing(CHAT))
    slow = tuple(factor * t for t in TRUE)
    cost.observe(timing(CHAT, slow))  # one slow batch is not yet a slowdown (an outlier: a cold cache, a pause)
    assert cost.slowdown_ == 1.0
    assert cost.seconds(Work.of_prompts(CHAT)) < 0.55 * timing(CHAT, slow).seconds
    for _ in range(2):
        cost.observe(timing(CHAT, slow))
        assert cost.slowdown_ > 0.8 * factor
        assert cost.seconds(Work.of_prompts(CHAT)) == pytest.approx(timing(CHAT, slow).seconds, rel=0.02)
        # a shape not measured under the slowdown follows by the same factor (0.33-0.50 without it)
        assert cost.seconds(Work.of_prompts([800] * 8)) == pytest.approx(timing([800] * 8, slow).seconds, rel=0.15)
    cost.observe(timing(CHAT))  # speed returns: one fast batch, still the slowdown (the median of three)
    assert cost.slowdown_ > 1.0
    cost.observe(timing(CHAT))
    assert cost.slowdown_ == 1.0
    assert cost.seconds(Work.of_prompts(CHAT)) == pytest.approx(timing(CHAT).seconds, rel=0.10)


def test_the_slowdown_factor_costs_little_on_a_worker_of_constant_speed():
    # Noise alone raises the median of three ratios over 1 about half the time; with 10% noise on every batch the
    # estimate stays within 3% of the real cost on average and 15% at the 95th percentile.
    rng = np.random.default_rng(0)
    shapes = [[40], [700] * 8, [50] * 32, [500] * 4, [300] * 16, CHAT]
    cost, ratios = BatchCost(WARM_UP), []
    for i in range(300):
        lengths = shapes[int(rng.integers(len(shapes)))]
        if i >= 20:
            ratios.append(cost.seconds(Work.of_prompts(lengths)) / timing(lengths).seconds)
        cost.observe(timing(lengths, noise=float(rng.normal(0, 0.1))))
    assert 0.98 <= np.mean(ratios) <= 1.03 and np.percentile(ratios, 95) <= 1.15 and np.percentile(ratios, 5) >= 0.9


def test_batches_of_no_prompts_or_no_time_are_ignored():
    cost = BatchCost(WARM_UP)
    before = cost.fit
    for batch in (BatchTiming(0, 0, 1.0), BatchTiming(3, 30, 0.0), BatchTiming(3, 30, float("nan"))):
        cost.observe(batch)
    assert cost.fit == before


@pytest.mark.parametrize("prior", [BatchTiming(1, 10, 0.0), BatchTiming(0, 10, 1.0), BatchTiming(1, 10, float("inf"))])
def test_a_prior_timing_that_measures_nothing_is_refused(prior):
    with pytest.raises(ValueError, match="prior timing"):
        BatchCost((prior,))


# -- the verdict (pure arithmetic) --------------------------------------------------------------------------------
def lin(per_prompt_s: float, per_token_s: float) -> CostFit:
    """A fit with no per-batch or squared term and batches too large to count: seconds = a * prompts + b * tokens."""
    return CostFit(0.0, per_prompt_s, per_token_s, 0.0, batch_prompts=10**9, batch_tokens=10**12)


EXACT = lin(0.5, 0.125)  # binary fractions, so sums at the limit are exact


def test_a_request_behind_more_work_than_the_timeout_is_refused_with_the_seconds_until_it_would_fit():
    # 8 s ahead; the request's own 4 s make 12 s against the 8 s admitted under a 10 s limit (WAIT_HEADROOM); after
    # 4 s of draining it would fit.
    refusal = admission_verdict(Work(4, 48), Work(2, 24), EXACT, limit_s=10.0)
    assert isinstance(refusal, Refusal)
    assert refusal.wait_s == pytest.approx(12.0)
    assert refusal.retry_after_s == 4
    assert refusal.message == ("estimated wait 12 s exceeds the 8.0 s admitted (80% of request_timeout_s 10 s) (the"
                               " worker is busy with work accepted earlier); retry in 4 s")


def test_one_prompt_priced_over_the_limit_by_the_warm_up_seed_alone_runs_on_an_idle_worker():
    slow_seed = lin(0.0, 0.1)  # a warm-up timed under load: 100 tokens priced at 10 s against 2 s
    one, two = Work.of_prompts([100]), Work.of_prompts([50, 50])
    assert admission_verdict(Work(), one, slow_seed, limit_s=2.0, checked_tokens=0) is None  # idle: run, and timed
    busy = admission_verdict(Work.of_prompts([5]), one, slow_seed, limit_s=2.0, checked_tokens=0)
    assert isinstance(busy, Refusal) and busy.retry_after_s == 1  # 429 until the 0.5 s ahead have drained
    assert isinstance(admission_verdict(Work(), two, slow_seed, limit_s=2.0, checked_tokens=0), TooMuchWork)  # can be split
    assert isinstance(admission_verdict(Work(), one, slow_seed, limit_s=2.0), TooMuchWork)  # None: trusted everywhere


def test_one_prompt_over_twice_the_longest_live_prompt_is_not_refused_by_extrapolation():
    # Live batches of 40 tokens have checked the fit that far, not at 100: short traffic says little of the
    # per-token and nothing of the squared term (breaker pass: 4,031 tokens priced at 329 s against a real 17 s,
    # after 100 one-word requests).
    slow_seed, one = lin(0.0, 0.1), Work.of_prompts([100])
    assert admission_verdict(Work(), one, slow_seed, limit_s=2.0, checked_tokens=40) is None
    assert admission_verdict(Work(), one, slow_seed, limit_s=2.0, checked_tokens=49) is None
    assert isinstance(admission_verdict(Work(), one, slow_seed, limit_s=2.0, checked_tokens=50), TooMuchWork)
    assert isinstance(admission_verdict(Work(), one, slow_seed, limit_s=2.0, checked_tokens=400), TooMuchWork)


def test_a_request_not_yet_tokenized_may_be_over_its_own_limit_by_its_prompts_at_the_most_tokens_they_can_have():
    per_token = lin(0.0, 0.01)  # 10 ms a token; a 2 s limit refuses own work over 1.7 s
    assert not may_be_too_much_work([50, 50, 50], per_token, 2.0, checked_tokens=100)  # 1.5 s at most: a 429 is true
    assert may_be_too_much_work([50, 50, 80], per_token, 2.0, checked_tokens=100)  # 1.8 s at most: maybe 413
    assert may_be_too_much_work([10, None], per_token, 2.0, checked_tokens=100)  # unbounded
    # one prompt is priced up to twice the longest live prompt only (longer: run on an idle worker, never 413)
    assert not may_be_too_much_work([None], per_token, 2.0, checked_tokens=80)  # 160 tokens at most: 1.6 s
    assert may_be_too_much_work([None], per_token, 2.0, checked_tokens=90)  # 1.8 s
    assert not may_be_too_much_work([None], per_token, 2.0, checked_tokens=0)  # no live batch: nothing priced
    assert not may_be_too_much_work([None, None], None, 2.0) and not may_be_too_much_work([None, None], per_token, None)


def test_the_fit_is_checked_as_far_as_the_longest_prompt_of_the_live_batches_it_holds():
    cost = BatchCost(prior=(timing([50]), timing([10] * 8), timing([400, 400])))
    assert cost.longest_live == 0
    cost.observe(BatchTiming.of_prompts([12, 300, 40], 0.5))
    assert cost.longest_live == 300
    # The length travels inside the fit (one reference): a reader that prices work from a fit and reads the length
    # from the same fit cannot pair a new fit with an old length.
    before = cost.fit
    cost.observe(BatchTiming.of_prompts([500], 0.6))
    assert before.checked_tokens == 300 and cost.fit.checked_tokens == 500 and cost.fit is not before
    run = BatchTiming.of_prompts([700], 1.0).plus(BatchTiming.of_prompts([20], 0.1))  # a pipelined run of two
    assert run.longest == 700 and run.batches == 2
    cost.observe(run)
    assert cost.longest_live == 700
    for _ in range(64):  # WINDOW short batches later the 700-token one has left the fit
        cost.observe(BatchTiming.of_prompts([20], 0.1))
    assert cost.longest_live == 20


def test_longest_live_is_read_safely_while_the_worker_observes_batches():
    # host_cost benchmark (2026-12-02): admission on the event loop iterated the live window while the worker thread
    # appended to it, "deque mutated during iteration", a 500 about once in 5,000 requests at 32 in flight.
    import threading

    cost = BatchCost(prior=(timing([50]), timing([10] * 8), timing([400, 400])))
    for _ in range(64):
        cost.observe(BatchTiming.of_prompts([20, 30], 0.1))
    stop, errors = threading.Event(), []

    def read() -> None:
        try:
            while not stop.is_set():
                assert cost.longest_live in (30, 40)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(1000):
        cost.observe(BatchTiming.of_prompts([40 if i % 2 else 30], 0.1))
    stop.set()
    reader.join()
    assert errors == []


def test_a_refusal_behind_work_names_the_requests_own_work_when_that_is_the_bound():
    # Own work 8.5 s of a 10 s limit (over the 8 s headroom, not the 8.5 s of OWN_WORK_HEADROOM): admitted only on an
    # idle worker; 1 s ahead.
    refusal = admission_verdict(Work(2, 0), Work(17, 0), lin(0.5, 0.0), limit_s=10.0)
    assert isinstance(refusal, Refusal) and refusal.allowed_s == 8.5
    assert refusal.message == ("estimated wait 9.5 s exceeds the 8.5 s of this request's own estimated work (work over"
                               " 80% of request_timeout_s 10 s runs only on an idle worker) (the worker is busy with"
                               " work accepted earlier); retry in 1 s")


def test_a_request_within_the_timeout_is_admitted_up_to_the_limit_itself():
    # Up to WAIT_HEADROOM (80%) of the limit: 8 s of 10 s.
    assert admission_verdict(Work(2, 8), Work(2, 40), EXACT, limit_s=10.0) is None  # 2 + 6 = 8 s
    assert isinstance(admission_verdict(Work(2, 8), Work(2, 41), EXACT, limit_s=10.0), Refusal)  # 8.125 s
    # A request whose own work alone is over the headroom (8.5 s) is admitted on an idle worker, not refused forever.
    assert admission_verdict(Work(), Work(2, 60), EXACT, limit_s=10.0) is None


def test_a_request_whose_own_work_exceeds_the_limit_is_refused_413_even_on_an_idle_worker():
    # The breaker's case: 64 prompts x 4,030 tokens on the CPU backbone against 60 s; it could only time out.
    verdict = admission_verdict(Work(), Work(64, 257_920), lin(0.0, 0.0025), limit_s=60.0)
    assert isinstance(verdict, TooMuchWork)
    assert verdict.message == (
        "this request is estimated at 645 s of model time on this backbone (64 prompts, 257,920 tokens); the limit is"
        " 51 s, 85% of request_timeout_s 60 s (HERALD_REQUEST_TIMEOUT_S; the rest is the estimate's margin): send"
        " fewer or shorter prompts"
    )
    # Checked before tokenizing, its prompts alone are a lower bound.
    assert isinstance(admission_verdict(Work(), Work(80), lin(1.0, 0.0), limit_s=60.0), TooMuchWork)
    assert "(1 prompt)" in TooMuchWork(61.0, 60.0, Work(1)).message


def test_own_work_is_refused_past_the_estimates_margin_not_at_the_timeout():
    # benchmarks/admission.py: 64 x 831 tokens estimated at 59.0 s was admitted under a 60 s timeout, ran 65.4 s and
    # ended in a 504 after a whole timeout of worker time; the estimate ran 0.85-1.03x the real work
    assert OWN_WORK_HEADROOM == 0.85
    per_token = lin(0.0, 0.001)  # 1 ms a token
    assert admission_verdict(Work(), Work(2, 50_000), per_token, limit_s=60.0) is None  # 50 s: admitted
    verdict = admission_verdict(Work(), Work(2, 59_000), per_token, limit_s=60.0)  # 59 s: over 51 s
    assert isinstance(verdict, TooMuchWork) and "estimated at 59 s" in verdict.message and "the limit is 51 s" in verdict.message


def test_a_refusal_never_prints_its_estimate_as_equal_to_the_limit():
    # Re-test finding: 0.104 s against a 0.1 s limit read "estimated at 0.1 s ... the limit is request_timeout_s 0.1 s".
    # (the limit: 85% of request_timeout_s)
    assert "estimated at 0.104 s" in TooMuchWork(0.104, 0.12, Work(1)).message  # limit 0.102 s
    assert "estimated at 0.160 s" in TooMuchWork(0.16, 0.1, Work(1)).message  # limit 0.085 s: as many decimals
    assert "estimated at 51.4 s" in TooMuchWork(51.4, 60.0, Work(1)).message  # limit 51 s
    assert "estimated at 645 s" in TooMuchWork(645.2, 60.0, Work(1)).message
    assert "estimated wait 0.85 s exceeds the 0.8 s admitted" in Refusal(0.85, 1.0, 1, allowed_s=0.8).message


def test_a_refusal_prints_its_wait_larger_than_the_bound_it_prints():
    # Re-test findings: the admitted bound printed with one decimal ("estimated wait 0.2 s exceeds the 0.2 s
    # admitted" for 0.17 s against 80% of 0.2 s), and 0.1004 s against 0.1 s read "0.100".
    assert Refusal(0.17, 0.2, 1, allowed_s=0.8 * 0.2).message.startswith(
        "estimated wait 0.17 s exceeds the 0.16 s admitted (80% of request_timeout_s 0.2 s)")
    assert Refusal(0.161, 0.2, 1, allowed_s=0.8 * 0.2).message.startswith("estimated wait 0.161 s exceeds the 0.16 s admitted")
    assert "estimated at 0.1004 s" in TooMuchWork(0.1004, 0.1 / 0.85, Work(1)).message  # limit 0.1 s
    assert "estimated wait 0.1004 s exceeds request_timeout_s 0.1 s" in Refusal(0.1004, 0.1, 1).message
    assert "of request_timeout_s 0.25 s (HERALD" in TooMuchWork(0.26, 0.25, Work(1)).message  # the setting as set
    # closer than half a microsecond, no decimals can tell them apart
    assert "estimated at over 0.1 s of model time" in TooMuchWork(0.1000001, 0.1 / 0.85, Work(1)).message
    assert exceeding_texts(0.5600001, 0.8 * 0.7, bound_decimals=1) == ("over 0.56", "0.56")
    assert exceeding_texts(12.0, 8.0, bound_decimals=1) == ("12", "8.0")
    assert exceeding_texts(3.25, 60.0) == ("3.2", "60")  # not above: as it is, never "over 60"


@pytest.mark.parametrize("own", [Work(1, 4), Work(30, 400), Work(64, 470)])
@pytest.mark.parametrize("ahead", [Work(64, 257_920), Work(1, 10**9, 5), Work(jobs=40)])
def test_retry_after_is_never_above_the_limit_however_much_was_accepted(ahead, own):
    # Accepted work is cancelled at its deadline: the worker is free within request_timeout_s, whatever it holds.
    refusal = admission_verdict(ahead, own, lin(0.01, 0.0025), limit_s=60.0, jobs_s=50.0 if ahead.jobs else 0.0)
    assert isinstance(refusal, Refusal)
    assert refusal.wait_s <= 120.0
    assert 1 <= refusal.retry_after_s <= 60


def test_the_work_ahead_counts_only_until_its_latest_deadline():
    ahead = Work(64, 257_920)
    assert ahead_seconds(ahead, lin(0.0, 0.0025), limit_s=60.0) == 60.0
    assert ahead_seconds(ahead, lin(0.0, 0.0025), limit_s=60.0, horizon_s=5.0) == 5.0
    # 5 s until the last accepted request's deadline: a 40 s request fits behind it.
    assert admission_verdict(ahead, Work(1, 16_000), lin(0.0, 0.0025), limit_s=60.0, horizon_s=5.0) is None


def test_exclusive_jobs_count_for_their_expected_seconds_at_most_until_the_latest_deadline():
    now = 100.0
    assert jobs_left_s([], now) == 0.0
    # Unknown estimate: until its deadline, 59 s away (a /steer before any decode step was measured).
    assert jobs_left_s([JobClock(159.0)], now) == 59.0
    # Queued with a 4 s estimate: 4 s; running for 1.5 s of it: 2.5 s left.
    assert jobs_left_s([JobClock(159.0, 4.0)], now) == 4.0
    assert jobs_left_s([JobClock(159.0, 4.0, started=98.5)], now) == 2.5
    # Running past its estimate: the estimate failed, and the job may run to its deadline.
    assert jobs_left_s([JobClock(159.0, 4.0, started=95.0)], now) == 59.0
    # One after another (2.5 + 4 s), at most until the latest deadline (5 s away).
    assert jobs_left_s([JobClock(159.0, 4.0, started=98.5), JobClock(160.0, 4.0)], now) == 6.5
    assert jobs_left_s([JobClock(104.0, 4.0, started=98.5), JobClock(105.0, 4.0)], now) == 5.0
    # One job without an estimate makes the whole run count until the latest deadline.
    assert jobs_left_s([JobClock(159.0, 4.0), JobClock(130.0)], now) == 59.0
    # Past every deadline: nothing left.
    assert jobs_left_s([JobClock(90.0)], now) == 0.0


def test_the_decode_rate_weighs_generations_by_their_steps_and_ignores_short_ones():
    # A re-test's case: six 2-token /steer jobs on 2,000-token prompts (one decode step each, timed as the generation's
    # time less a prefill measured apart: seconds of error) tripled the rate, and moderation behind a 128-token /steer
    # then got 429.
    rate = StepSeconds()
    assert rate.seconds is None
    rate.observe(127 * 0.08, 127)
    for _ in range(12):
        rate.observe(3.0, 1)  # below MIN_TIMED_STEPS: ignored
    assert rate.seconds == pytest.approx(0.08)
    # A short timed generation weighs by its 4 steps, not as much as the 127 before it
    rate.observe(4 * 0.5, 4)
    keep = DECODE_MEMORY ** 4
    assert rate.seconds == pytest.approx((keep * 127 * 0.08 + 2.0) / (keep * 127 + 4)) and rate.seconds < 0.1
    assert MIN_TIMED_STEPS == 4


def test_exclusive_jobs_ahead_count_until_the_latest_of_their_deadlines():
    # One /steer job ahead with 2 s to its deadline, plus 10 tokens at 100 tokens/s: 2.1 s, admitted against 10 s.
    assert admission_verdict(Work(jobs=1), Work(1, 10), lin(0.0, 0.01), limit_s=10.0, jobs_s=2.0) is None
    # Against 1 s the jobs count at most 1 s: 1.1 s; fits after 0.1 s -> 1.
    refusal = admission_verdict(Work(jobs=1), Work(1, 10), lin(0.0, 0.01), limit_s=1.0, jobs_s=2.0)
    assert isinstance(refusal, Refusal) and refusal.wait_s == pytest.approx(1.1) and refusal.retry_after_s == 1
    # Two jobs ahead end by the later deadline: counted once (5 s), not twice.
    assert admission_verdict(Work(jobs=2), Work(1, 10), lin(0.0, 0.01), limit_s=10.0, jobs_s=5.0) is None
    # The breaker's case: a /classify 1 s after a long /steer was admitted at the mean of earlier (short) jobs and
    # timed out behind it. The /steer may run to its deadline, 59 s away: 429, and a retry fits once it is 12 s closer.
    refusal = admission_verdict(Work(jobs=1), Work(1, 2), lin(0.0, 0.0025), limit_s=60.0, jobs_s=59.0)
    assert isinstance(refusal, Refusal) and refusal.retry_after_s == 12


def test_an_exclusive_job_is_admitted_on_an_idle_worker_when_its_least_work_fits():
    # A /steer job is priced at the least it needs (its prefills and margin): near the limit it is still admitted on
    # an idle worker (counted at a mean duration near the limit, every later /steer was refused 429 "retry in 1 s",
    # forever: third breaker pass), and behind 1 s of work it is refused until that drains.
    assert admission_verdict(Work(), Work(jobs=1), lin(0.0, 0.01), limit_s=10.0, own_job_s=10.0) is None
    refusal = admission_verdict(Work(1, 100), Work(jobs=1), lin(0.0, 0.01), limit_s=10.0, own_job_s=10.0)
    assert isinstance(refusal, Refusal) and refusal.retry_after_s == 1
    assert admission_verdict(Work(1, 100), Work(jobs=1), lin(0.0, 0.01), limit_s=10.0, own_job_s=7.0) is None  # 8 s


def test_without_a_measurement_or_a_limit_everything_is_admitted():
    assert admission_verdict(Work(10**6, 10**9), Work(64, 10**6), None, limit_s=1.0) is None
    assert admission_verdict(Work(10**6, 10**9), Work(64, 10**6), lin(1.0, 1.0), limit_s=None) is None


# -- the engine -------------------------------------------------------------------------------------------------
PER_TOKEN = (BatchTiming(1, 100, 1.0), BatchTiming(2, 100, 1.0), BatchTiming(1, 200, 2.0))  # 10 ms per token, nothing else


def test_a_prompt_behind_a_long_backlog_is_refused_at_once_then_served_once_it_drains(runtime):
    # The breaker's case: long prompts hold the worker; a later prompt was accepted and timed out (504). 100 tokens/s,
    # seeded with the true cost; a 2 s limit.
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.01))
    metrics = HeraldMetrics()
    engine = InferenceEngine(slow, runtime.probe, EngineLimits(max_wait_s=2.0), metrics, seed=PER_TOKEN)
    # The seeded model is on /metrics from the start.
    assert metrics.registry.get_sample_value("herald_worker_cost_seconds", {"per": "token"}) == pytest.approx(0.01)
    assert metrics.registry.get_sample_value("herald_worker_cost_seconds", {"per": "prompt"}) == pytest.approx(0.0)
    engine.start()
    (long,) = engine.submit(slow.encode([user_turn(prompt_of(150))]))  # 1.5 s
    with pytest.raises(QueueFull) as refused:
        engine.submit(slow.encode([user_turn(prompt_of(100))]))  # 1 s more: 2.5 s > 2 s
    assert refused.value.reason == "estimated_wait"
    assert refused.value.retry_after_s == 1  # fits after 0.5 s of draining
    assert "estimated wait 2.5 s exceeds the 1.6 s admitted (80% of request_timeout_s 2 s)" in refused.value.message
    assert engine.ahead == Work.of_prompts([150])  # the refused prompt was not queued
    assert 0 < engine.estimated_wait_s() <= 1.5
    long.result(timeout=10)
    assert engine.ahead == Work()
    assert engine.estimated_wait_s() == 0.0
    assert metrics.registry.get_sample_value("herald_estimated_wait_seconds") == 0.0  # set after the batch
    (later,) = engine.submit(slow.encode([user_turn(prompt_of(100))]))
    assert later.result(timeout=10).tokens == 100
    engine.stop()


def test_a_client_that_waits_its_retry_after_behind_a_running_batch_is_admitted(runtime):
    # Breaker pass: a running batch counted at its whole estimate until answered, so the estimated wait fell only as
    # the deadline cap came down; behind an 8,130-token prompt a client that waited its Retry-After of 8 s got 429
    # again ("retry in 4 s"). A launched batch now counts the seconds left until its estimated end. 100 tokens/s,
    # seeded with the true cost; a 4 s limit admits a wait of 3.2 s.
    import time

    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.01))
    engine = InferenceEngine(slow, runtime.probe, EngineLimits(max_wait_s=4.0), HeraldMetrics(), seed=PER_TOKEN)
    engine.start()
    (long,) = engine.submit(slow.encode([user_turn(prompt_of(300))]))  # 3 s
    time.sleep(0.1)  # launched
    first, read = engine.estimated_wait_s(), time.perf_counter()
    with pytest.raises(QueueFull) as refused:
        engine.submit(slow.encode([user_turn(prompt_of(50))]))  # 0.5 s more: about 3.4 s > 3.2 s
    time.sleep(0.5)
    later, elapsed = engine.estimated_wait_s(), time.perf_counter() - read
    assert later == pytest.approx(first - elapsed, abs=0.05)  # falls second for second as the batch runs
    time.sleep(max(refused.value.retry_after_s - elapsed, 0))
    (later,) = engine.submit(slow.encode([user_turn(prompt_of(50))]))  # after Retry-After: admitted
    assert long.result(timeout=10).tokens == 300 and later.result(timeout=10).tokens == 50
    assert engine.estimated_wait_s() == 0.0 and engine.ahead == Work()
    engine.stop()


def test_a_warm_up_timed_far_too_slow_does_not_refuse_every_prompt_for_good(runtime):
    # The breaker's case: a warm-up timed 30x slow under load priced every prompt over the limit, every request got
    # 413, none was timed, and the seed stood until a restart. Seeded at 0.3 s a token; the worker runs at 0.01 s.
    slow_seed = tuple(BatchTiming(t.prompts, t.tokens, t.seconds * 30) for t in PER_TOKEN)
    fast = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.01))
    engine = InferenceEngine(fast, runtime.probe, EngineLimits(max_wait_s=2.0), HeraldMetrics(), seed=slow_seed)
    engine.start()
    hi = fast.encode([user_turn(prompt_of(20))])
    assert engine.cost.seconds(Work.of_prompts([20])) == pytest.approx(6.0) and engine.cost.longest_live == 0
    with pytest.raises(WorkTooLarge):  # two prompts: the client can split them
        engine.submit(hi * 2)
    (first,) = engine.submit(hi)  # one prompt on an idle worker: run, and timed
    assert first.result(timeout=10).tokens == 20
    assert engine.cost.longest_live == 20 and engine.cost.seconds(Work.of_prompts([20])) < 2.0
    answers = engine.submit(hi * 2)  # the fit learnt the worker's speed: no longer refused
    assert [future.result(timeout=10).tokens for future in answers] == [20, 20]
    engine.stop()


def engine_seeded_as_attention(runtime, max_wait_s: float) -> tuple[FakeBackbone, InferenceEngine]:
    """A started engine on a fake that takes 10 ms a token, seeded by a warm-up that read its time as mostly attention
    (3 ms a token and 0.2 ms a squared token): short prompts priced about right, long ones far over."""
    seed = tuple(timing(lengths, (0.0, 0.0, 0.003, 2e-4)) for lengths in ([100], [50, 50], [200]))
    fast = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.01))
    engine = InferenceEngine(fast, runtime.probe, EngineLimits(max_wait_s=max_wait_s), HeraldMetrics(), seed=seed)
    engine.start()
    return fast, engine


def test_a_warm_up_timed_slow_does_not_refuse_long_prompts_for_good_after_short_traffic(runtime):
    # Next breaker pass: after short live requests had corrected the fit for short prompts, a warm-up timed slow still
    # priced one long prompt over the limit, and only long work can correct that. The seed reads the time as mostly
    # attention (0.2 ms per squared token); the worker runs at 10 ms a token.
    fast, engine = engine_seeded_as_attention(runtime, max_wait_s=2.0)
    (hi,) = engine.submit(fast.encode([user_turn(prompt_of(10))]))
    assert hi.result(timeout=10).tokens == 10 and engine.cost.longest_live == 10
    long = fast.encode([user_turn(prompt_of(120))])
    assert engine.cost.seconds(Work.of_prompts([120])) > 2.0  # the short batch has not corrected it at 120 tokens
    with pytest.raises(WorkTooLarge):  # two such prompts: still refused, the client can split them
        engine.submit(long * 2)
    (first,) = engine.submit(long)  # one, more than twice as long as any live prompt: run on the idle worker, timed
    assert first.result(timeout=10).tokens == 120 and engine.cost.longest_live == 120
    assert engine.cost.seconds(Work.of_prompts([120])) < 2.0
    engine.stop()


def test_work_behind_a_batch_run_past_its_deadline_is_refused_429_not_admitted_to_time_out(runtime):
    # Breaker pass: a one-prompt request run on an estimate over the limit held the worker past its deadline; the wait
    # cap read the worker as idle once that deadline passed, and requests admitted meanwhile got 504s. 10 ms a token:
    # 300 tokens run 3 s against a 1 s limit (the seed prices them higher still).
    fast, engine = engine_seeded_as_attention(runtime, max_wait_s=1.0)
    short = fast.encode([user_turn(prompt_of(10))])
    (first,) = engine.submit(short)
    first.result(timeout=10)
    (long,) = engine.submit(fast.encode([user_turn(prompt_of(300))]))  # unchecked length: run on the idle worker
    time.sleep(1.3)  # past the long prompt's deadline; the worker still runs it
    assert not long.done()
    with pytest.raises(QueueFull) as refused:
        engine.submit(short)
    assert refused.value.reason == "estimated_wait" and refused.value.retry_after_s >= 1
    assert long.result(timeout=10).tokens == 300
    (after,) = engine.submit(short)  # the worker is free again
    assert after.result(timeout=10).tokens == 10
    engine.stop()


def test_one_prompt_of_unknown_length_is_not_refused_by_the_seed_alone(runtime):
    # Breaker pass: check_room (before tokenizing: 0 tokens) refused "hi" 413 from a 30x slow seed, for good.
    slow = tuple(30 * term for term in TRUE)  # a CPU-like worker timed 30x slow: 3 s a batch
    slow_seed = (timing([35, 35], slow), timing([94] * 8, slow), timing([414, 414], slow))
    fast = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.01))
    engine = InferenceEngine(fast, runtime.probe, EngineLimits(max_wait_s=0.5), HeraldMetrics(), seed=slow_seed)
    engine.start()
    assert engine.cost.seconds(Work(1)) > 0.5  # a prompt of no tokens is over the limit already
    engine.check_room(1)  # no live batch: not refused
    with pytest.raises(WorkTooLarge):
        engine.check_room(2)
    engine.stop()


def test_prompts_whose_own_work_exceeds_the_limit_are_refused_on_an_idle_engine_and_nothing_is_queued(runtime):
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.01))
    engine = InferenceEngine(slow, runtime.probe, EngineLimits(max_wait_s=2.0), HeraldMetrics(), seed=PER_TOKEN)
    engine.start()
    with pytest.raises(WorkTooLarge) as refused:
        engine.submit(slow.encode([user_turn(prompt_of(120))] * 3))  # 3.6 s of work against 2 s, nothing ahead
    assert refused.value.reason == "estimated_work"
    assert "estimated at 3.6 s of model time on this backbone (3 prompts, 360 tokens)" in refused.value.message
    assert engine.ahead == Work() and engine.depth == 0
    (fits,) = engine.submit(slow.encode([user_turn(prompt_of(20))]))
    assert fits.result(timeout=10).tokens == 20
    engine.stop()


def test_a_request_that_may_be_over_its_own_limit_gets_no_429_before_its_tokens_are_known(runtime):
    # Known low, reproduced on the embedded backbone: 3 prompts of 1,294 tokens (9.3 s against a 10 s timeout) got 413
    # idle and 429 "retry in 1 s" under load, from the check before tokenizing (their tokens counted as none). 10 ms
    # a token, seeded with the true cost; a 2 s limit: waits to 1.6 s, own work to 1.7 s; prompts of any length.
    hold = threading.Event()

    class Held(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            hold.wait(10)
            return super().last_token_states(token_ids, intervention)

    slow = sharing_vocab(runtime, Held(token_delay_s=0.01))
    engine = InferenceEngine(slow, runtime.probe, EngineLimits(max_wait_s=2.0, max_rows=1), HeraldMetrics(), seed=PER_TOKEN)
    engine.start()
    try:
        (first,) = engine.submit(slow.encode([user_turn(prompt_of(5))]))  # held by the worker
        time.sleep(0.1)  # past its estimated end: it counts for nothing more
        (queued,) = engine.submit(slow.encode([user_turn(prompt_of(165))]))  # 1.65 s waiting, over the 1.6 s
        engine.check_room(3)  # may be over 1.7 s alone: its verdict waits for its tokens
        engine.check_work([120], 2)  # 1.2 s or more: still may be
        with pytest.raises(QueueFull) as rest_short:  # the rest bounded to 10 tokens each (their characters): 1.4 s
            engine.check_work([120], 2, [10, 10])
        assert rest_short.value.reason == "estimated_wait"
        with pytest.raises(WorkTooLarge) as refused:
            engine.submit(slow.encode([user_turn(prompt_of(120))] * 3))  # 3.6 s: 413, as on an idle engine
        assert "estimated at 3.6 s of model time on this backbone (3 prompts, 360 tokens)" in refused.value.message
        with pytest.raises(QueueFull) as busy:  # one prompt is never refused 413 before a live batch: a true 429
            engine.check_room(1)
        assert busy.value.reason == "estimated_wait" and busy.value.retry_after_s == 1
    finally:
        hold.set()
    assert first.result(timeout=10).tokens == 5 and queued.result(timeout=10).tokens == 165
    engine.stop()


def test_work_accepted_and_then_cancelled_or_failed_gives_its_share_back(runtime):
    gate = threading.Event()

    class Gated(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            gate.wait(10)
            if any(len(ids) == 7 for ids in token_ids):
                raise RuntimeError("device fault")
            return super().last_token_states(token_ids, intervention)

    backbone = sharing_vocab(runtime, Gated())
    engine = InferenceEngine(backbone, runtime.probe, EngineLimits(max_rows=1), HeraldMetrics())
    engine.start()
    (first,) = engine.submit(backbone.encode([user_turn("one two")]))  # 5 tokens, held by the worker
    time.sleep(0.1)
    queued = engine.submit(backbone.encode([user_turn("an ox at dawn"), user_turn("bake bread")]))  # 7 (fails) + 5
    cancelled = engine.submit(backbone.encode([user_turn("x y z")]))  # 6
    assert engine.ahead == Work(4, 23, 0, 135)
    engine.cancel(cancelled, "client_gone")
    assert engine.ahead == Work(3, 17, 0, 99)  # a cancelled queued prompt frees its share at once
    gate.set()
    wait([first, *queued], timeout=10)
    assert queued[0].exception() is not None and queued[1].exception() is None
    assert engine.ahead == Work()
    engine.stop()


# -- the app, end to end on a slow fake -------------------------------------------------------------------------
def slow_app(runtime, backbone, **overrides) -> TestClient:
    settings = Settings(_env_file=None, **overrides)
    return TestClient(build_app(settings, loader=lambda s: Runtime(backbone, runtime.probe, runtime.manifest, runtime.probe_path)))


def burst(client: TestClient, clients: int, requests: int, body: dict) -> list:
    """``clients`` threads each posting ``body`` to /classify ``requests`` times, one after the other."""
    answers = []
    lock = threading.Lock()

    def post():
        for _ in range(requests):
            r = client.post("/classify", json=body)
            with lock:
                answers.append(r)

    threads = [threading.Thread(target=post) for _ in range(clients)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    return answers


def status_count(metrics: HeraldMetrics, status: str) -> float:
    return metrics.registry.get_sample_value("herald_requests_total", {"route": "/classify", "status": status}) or 0.0


def test_overload_is_answered_429_with_retry_after_and_no_admitted_request_times_out(runtime):
    # 2 ms a token, one prompt per batch, a 2 s limit; each request is 350 tokens (0.7 s), so two fit behind each
    # other and the rest of a burst of 10 must be refused at once.
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.002))
    with slow_app(runtime, slow, request_timeout_s=2.0, batch_max_prompts=1) as client:
        wait_ready(client)
        answers = burst(client, 10, 1, {"input": prompt_of(350)})
        statuses = sorted(r.status_code for r in answers)
        assert len(answers) == 10 and set(statuses) <= {200, 429}, statuses
        assert statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
        for r in answers:
            if r.status_code == 429:
                error = r.json()["error"]
                assert error["type"] == "overloaded"
                assert "estimated wait" in error["message"] and "(80% of request_timeout_s 2 s)" in error["message"]
                assert 1 <= int(r.headers["Retry-After"]) <= 2
            else:
                assert r.json()["results"][0]["tokens"] == 350
        metrics = client.app.state.herald.metrics
        assert rejected(metrics, "estimated_wait") == statuses.count(429)
        assert status_count(metrics, "504") == 0
        # Drained, the service takes work again.
        assert client.post("/classify", json={"input": "hi"}).status_code == 200


def test_a_burst_the_worker_answers_well_within_the_limit_gets_no_429(runtime):
    # The breaker's case B: a batch costs 50 ms plus 0.2 ms a token, so two short warm-up prompts (mostly fixed
    # cost) measured 283 tokens/s, and the old rate refused 10 clients x 100 tokens (3.5 s by it) against 2 s,
    # while a batch of all 10 takes 0.25 s. Fitted per prompt and per token, every request is admitted.
    slow = sharing_vocab(runtime, FakeBackbone(forward_delay_s=0.05, token_delay_s=0.0002))
    with slow_app(runtime, slow, request_timeout_s=2.0) as client:
        wait_ready(client)
        metrics = client.app.state.herald.metrics
        assert metrics.registry.get_sample_value("herald_worker_cost_seconds", {"per": "batch"}) > 0  # seeded
        answers = burst(client, 10, 6, {"input": prompt_of(100)})
        statuses = [r.status_code for r in answers]
        assert statuses == [200] * 60, sorted(statuses)
        assert rejected(metrics, "estimated_wait") == 0 and status_count(metrics, "504") == 0
        scraped = client.get("/metrics").text
        assert "herald_estimated_wait_seconds 0.0" in scraped  # drained
        assert all(f'herald_worker_cost_seconds{{per="{term}"}}' in scraped for term in ("batch", "prompt", "token", "token_squared"))
        assert "herald_worker_throughput_tokens_per_second" not in scraped


def test_a_request_too_large_for_the_limit_is_refused_413_on_an_idle_server_and_the_next_one_is_answered(runtime):
    # The breaker's case A: one request whose own work exceeds the limit held the worker until its 504, and everyone
    # else got 429 meanwhile. 1 ms a token: 8 x 200 tokens are 1.6 s against 1 s.
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.001))
    with slow_app(runtime, slow, request_timeout_s=1.0) as client:
        wait_ready(client)
        metrics = client.app.state.herald.metrics
        big = client.post("/classify", json={"input": [prompt_of(200)] * 8})
        assert big.status_code == 413, big.text
        error = big.json()["error"]
        assert error["type"] == "input_too_large" and error["field"] == "input"
        assert "s of model time on this backbone (8 prompts, 1,600 tokens)" in error["message"]
        assert ("the limit is 0.85 s, 85% of request_timeout_s 1 s (HERALD_REQUEST_TIMEOUT_S; the rest is the estimate's"
                " margin): send fewer or shorter prompts") in error["message"]
        assert "Retry-After" not in big.headers
        assert rejected(metrics, "estimated_work") == 1
        assert metrics.registry.get_sample_value("herald_batch_size_prompts_count") == 0  # no model work
        small = client.post("/classify", json={"input": prompt_of(20)})
        assert small.status_code == 200, small.text
        assert small.json()["results"][0]["tokens"] == 20
        # /v1/moderations names its field the same way, as OpenAI's 400.
        big = client.post("/v1/moderations", json={"input": [prompt_of(200)] * 8})
        assert big.status_code == 400 and big.json()["error"]["field"] == "input"
        assert big.json()["error"]["code"] == "input_too_large"
        assert rejected(metrics, "estimated_work") == 2


def test_a_request_too_large_for_the_limit_is_refused_413_under_load_too_and_one_that_fits_429_before_tokenizing(
        runtime, monkeypatch):
    # Known low: under load, a request no wait could admit got the full queue's (or the wait's) 429 before its own work
    # was priced, so its client retried in vain (embedded backbone: 413 idle, 429 "retry in 1 s" 81 times of 82 under
    # load). 1 ms a token, a 2 s timeout (1.7 s of own work), prompts of at most 300 tokens, 8 queue places.
    hold = threading.Event()
    hold.set()

    class Held(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            hold.wait(10)
            return super().last_token_states(token_ids, intervention)

    slow = sharing_vocab(runtime, Held(token_delay_s=0.001))
    with slow_app(runtime, slow, request_timeout_s=2.0, max_tokens=300, max_batch_size=8, queue_capacity=8,
                  batch_max_prompts=1, trimmed_views=False) as client:
        wait_ready(client)
        engine = client.app.state.herald.engine
        hold.clear()
        load = []
        loader = threading.Thread(target=lambda: load.append(client.post("/classify", json={"input": [prompt_of(20)] * 8})))
        loader.start()
        try:
            deadline = time.monotonic() + 5
            while engine.depth != 7 and time.monotonic() < deadline:  # one prompt held by the worker, 7 waiting
                time.sleep(0.01)
            assert engine.depth == 7
            encode, seen = slow.encode, []

            def counting(conversations, fold=True):
                seen.append(len(conversations))
                return encode(conversations, fold)

            monkeypatch.setattr(slow, "encode", counting)
            big = client.post("/classify", json={"input": [prompt_of(300)] * 8})  # 2.4 s, over 1.7 s on any worker
            assert big.status_code == 413, big.text
            assert "Retry-After" not in big.headers
            error = big.json()["error"]
            assert error["type"] == "input_too_large" and error["field"] == "input"
            assert re.match(r"this request is estimated at 2\.\d s of model time on this backbone \(8 prompts, 2,400"
                            r" tokens\); the limit is 1\.7 s", error["message"]), error["message"]
            assert seen == [8]
            seen.clear()
            fits = client.post("/classify", json={"input": [prompt_of(300)] * 2})  # at most 0.6 s: it fits once drained
            assert fits.status_code == 429 and int(fits.headers["Retry-After"]) >= 1, fits.text
            assert fits.json()["error"]["message"].startswith("queue is full: 7 prompts waiting of a capacity of 8")
            assert seen == []  # refused before it was tokenized
            # 8 short prompts: at the token limit each (2.4 s) they might be too much work, and were tokenized before
            # their 429 (breaker: twice the CPU a 429 under a retry flood); their characters bound them to 43 tokens
            short = client.post("/classify", json={"input": ["hi there, how are you?"] * 8})
            assert short.status_code == 429 and seen == [], short.text
        finally:
            hold.set()
            loader.join(10)
        assert [r.status_code for r in load] == [200]
        metrics = client.app.state.herald.metrics
        assert rejected(metrics, "estimated_work") == 1 and rejected(metrics, "queue_full") == 2


def test_a_413_counts_the_views_scored_beside_the_inputs(runtime):
    # tester: "estimated at 56 s ... (18 prompts ...)" for 6 inputs read as a miscount; the trimmed views are prompts
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.001))
    wrapped = prompt_of(150) + " Keep it short. Be nice."  # one view: without "Be nice." (the rest has 150 words)
    with slow_app(runtime, slow, request_timeout_s=1.0) as client:
        wait_ready(client)
        # 1 ms a token: about 0.5 s whole, about 1 s with the views, against a 0.85 s limit
        big = client.post("/classify", json={"input": [wrapped] * 3})
        assert big.status_code == 413, big.text
        assert big.json()["error"]["message"].endswith(
            " (6 prompts for 3 inputs: 3 scored beside the inputs whole, messages, content parts, trimmed views or readings alone,"
            " HERALD_SCORE_MESSAGES and HERALD_TRIMMED_VIEWS)"), big.text
    # refused on the inputs' own prompts, before the views are looked for (two prompts of 18,000 characters: the
    # first is tokenized alone and already over the limit): the message says they are not counted (re-tester:
    # "(8 prompts, ...)" read as the request's count where its views would have doubled it)
    with slow_app(runtime, slow, request_timeout_s=1.0, max_chars=32_000, max_tokens=8_000) as client:
        wait_ready(client)
        bigger = client.post("/classify", json={"input": [prompt_of(6000) + " Keep it short. Be nice."] * 2})
        assert bigger.status_code == 413, bigger.text
        message = bigger.json()["error"]["message"]
        assert "(2 prompts" in message and message.endswith(
            " (not counting trimmed views or readings, HERALD_TRIMMED_VIEWS: they are found once a request's prompts"
            " fit the token limit, and add to its work)"), message


def test_a_request_whose_first_prompts_already_exceed_the_limit_is_refused_before_the_rest_is_tokenized(runtime, monkeypatch):
    # Breaker pass: 40 requests of 64 prompts of ~1,500 tokens were all folded and tokenized (71 s of CPU) before
    # their 413s. 1 ms a token: the first prompt of 5,000 tokens alone is 5 s against a 1 s limit.
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.001))
    with slow_app(runtime, slow, request_timeout_s=1.0, max_chars=32_000, max_tokens=8_000) as client:
        wait_ready(client)
        metrics = client.app.state.herald.metrics
        encode, seen = slow.encode, []

        def counting(conversations, fold=True):
            seen.append(len(conversations))
            return encode(conversations, fold)

        monkeypatch.setattr(slow, "encode", counting)
        big = client.post("/classify", json={"input": [prompt_of(5_000)] * 8})  # 15,000 characters each: a chunk each
        assert big.status_code == 413, big.text
        assert big.json()["error"]["field"] == "input"
        message = big.json()["error"]["message"]
        assert "of model time on this backbone (8 prompts, at least 5,000 tokens)" in message, message
        assert message.startswith("this request is estimated at ") and " s or more of model time" in message
        assert seen == [1]  # the 7 prompts after the first chunk were never encoded
        assert rejected(metrics, "estimated_work") == 1
        seen.clear()
        small = client.post("/classify", json={"input": [prompt_of(20)] * 3})
        assert small.status_code == 200 and seen == [3]


def test_a_steer_request_over_steer_max_concurrent_is_answered_429_and_the_slot_frees_after(runtime):
    armed, generating, release = threading.Event(), threading.Event(), threading.Event()

    class Held(FakeBackbone):
        """Generations wait for ``release`` once ``armed`` (after the warm-up, which times one)."""

        def generate(self, token_ids, max_new_tokens, intervention=None, max_time_s=None, stop=None, chunk_tokens=0):
            if armed.is_set():
                generating.set()
                release.wait(10)
            return super().generate(token_ids, max_new_tokens, intervention, max_time_s, stop)

    backbone = sharing_vocab(runtime, Held())
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    with slow_app(runtime, backbone, steer_enabled=True, steer_api_key=STEER_KEY, request_timeout_s=30.0) as client:
        wait_ready(client)
        armed.set()
        first = []
        thread = threading.Thread(target=lambda: first.append(client.post("/steer", json={"prompt": "make a bomb"}, headers=auth)))
        thread.start()
        assert generating.wait(10)
        time.sleep(0.1)  # past the running job's estimate (about 10 ms: the fake's warm-up decode steps take no time)
        over = client.post("/steer", json={"prompt": "bake bread"}, headers=auth)
        release.set()
        thread.join(10)
        assert over.status_code == 429, over.text
        error = over.json()["error"]
        assert error["type"] == "overloaded"
        assert "steer_max_concurrent" in error["message"] and "HERALD_STEER_MAX_CONCURRENT" in error["message"]
        # The running job is held past its estimate, so it may run to its deadline, about 30 s away: retry then.
        assert 28 <= int(over.headers["Retry-After"]) <= 30
        assert first[0].status_code == 200
        metrics = client.app.state.herald.metrics
        assert rejected(metrics, "steer_concurrency") == 1
        assert metrics.registry.get_sample_value("herald_steer_runs_total", {"mode": "ablate"}) == 1  # the refused one did not run
        assert client.post("/steer", json={"prompt": "bake bread"}, headers=auth).status_code == 200


def test_steer_max_concurrent_is_read_from_the_environment_and_must_be_at_least_one(monkeypatch):
    monkeypatch.setenv("HERALD_STEER_MAX_CONCURRENT", "3")
    assert Settings(_env_file=None).steer_max_concurrent == 3
    assert Settings(_env_file=None, steer_max_concurrent=1).steer_max_concurrent == 1
    with pytest.raises(ValidationError, match="steer_max_concurrent"):
        Settings(_env_file=None, steer_max_concurrent=0)


class _ShapeRecorder:
    """A backbone stand-in for the warm-up timing: one token per word, records each batch's prompt lengths."""

    def __init__(self, device_type: str, max_positions: int | None) -> None:
        from types import SimpleNamespace

        self.device, self.max_positions, self.batches = SimpleNamespace(type=device_type), max_positions, []

    def encode(self, conversations, fold=True):  # whitespace-split words: nothing to fold
        return [[0] * len(conversation[0].content.split()) for conversation in conversations]

    def last_token_states(self, ids):
        self.batches.append(tuple(len(i) for i in ids))
        return ids


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_the_cost_seed_times_budget_sized_batches_on_a_gpu_and_skips_shapes_past_the_position_table(device_type):
    from types import SimpleNamespace

    from herald_service.api.app import WARMUP_TIMINGS, _warm_cost

    backbone = _ShapeRecorder(device_type, max_positions=2000)
    timings = _warm_cost(SimpleNamespace(backbone=backbone, probe=SimpleNamespace(predict=lambda states: states)))
    shapes = sorted(set(backbone.batches))
    assert all(backbone.batches.count(shape) == WARMUP_TIMINGS for shape in shapes)
    if device_type == "cpu":  # 2 short prompts, 8 x 8, 2 x 48 and 1 x 180 repeats of a 6-word prompt
        assert shapes == [(1, 6), (6 * 8,) * 8, (6 * 48,) * 2, (6 * 180,)] and len(timings) == 4
    else:  # 64 x 10 and 8 x 90 repeats; 2 x 360 (2,160 words) is past the 2,000 positions and left out
        assert shapes == [(1, 6), (6 * 10,) * 64, (6 * 90,) * 8] and len(timings) == 3
    timed = backbone.batches[::WARMUP_TIMINGS]  # in the order timed: one BatchTiming per shape
    assert [(t.prompts, t.tokens, t.squared_tokens) for t in timings] == [
        (len(b), sum(b), sum(n * n for n in b)) for b in timed]


@pytest.mark.parametrize("length, batches", [(71, 1), (431, 4), (831, 8), (4031, 32), (9000, 64)])
def test_work_is_costed_as_the_batches_of_whole_prompts_it_takes(length, batches):
    # 64 x 831 tokens fit 9 to a batch of 8,192 tokens: 8 batches, where the token total alone says 7; a prompt over
    # the budget is a batch of its own
    fit = CostFit(1.0, 0.0, 0.0, 0.0, 64, 8192)
    assert fit.seconds(Work.of_prompts([length] * 64)) == batches


def test_a_timeout_below_one_short_prompts_estimated_time_is_warned_about_at_start_up(runtime):
    # Breaker: HERALD_REQUEST_TIMEOUT_S=0.05 gave a ready server that answered every request 413.
    from herald_service.api.app import timeout_warning

    seed = (BatchTiming(1, 100, 1.0), BatchTiming(2, 100, 1.0), BatchTiming(1, 200, 2.0))  # 10 ms a token
    engine = InferenceEngine(runtime.backbone, runtime.probe, EngineLimits(8192, 64, 0.0, 64, 0.05), HeraldMetrics(), seed)
    assert engine.cost.seconds(Work.of_prompts([30])) == pytest.approx(0.3, rel=0.01)
    # SmolLM2 renders an empty prompt to 30 tokens: 0.3 s here, so 0.1 s can never be met (a re-test: priced at 16
    # tokens, 0.1 s passed without a warning and every request failed)
    assert timeout_warning(engine, 0.1, 30) == (
        "85% of HERALD_REQUEST_TIMEOUT_S 0.1 s, the most estimated model time a request is admitted with, is below the"
        " shortest prompt's estimated model time (30 tokens, 0.3 s) on this backbone: every request will be refused or"
        " time out, unless the warm-up was timed slow (other work on this machine), which the first one-prompt request,"
        " run on an idle worker, corrects")
    assert timeout_warning(engine, 0.34, 30) is not None  # 0.289 s admitted: below the 0.3 s price
    assert timeout_warning(engine, 0.36, 30) is None  # 0.306 s admitted
    assert timeout_warning(engine, 60.0, 30) is None
    unseeded = InferenceEngine(runtime.backbone, runtime.probe, EngineLimits(8192, 64, 0.0, 64, 0.05), HeraldMetrics())
    assert timeout_warning(unseeded, 0.05, 30) is None  # HERALD_WARMUP=false: nothing measured, nothing claimed


def test_a_job_told_to_stop_counts_one_second_more_then_until_its_deadline_again():
    # A re-test: right after a /steer client left, the next /steer was told "Retry-After: 28" for a worker free 0.15 s
    # later.
    now = 100.0
    assert jobs_left_s([JobClock(159.0, 30.0, started=98.0, stopping_since=99.8)], now) == pytest.approx(0.8)
    assert STOPPING_S == 1.0
    # Still running 1 s after it was told to stop: it is not stopping as expected, and may run to its deadline
    assert jobs_left_s([JobClock(159.0, 30.0, started=98.0, stopping_since=98.5)], now) == 59.0


def test_stop_waits_for_a_running_job_past_the_notice_and_says_so(runtime, monkeypatch, caplog):
    # The process exited 10 s into shutdown with the worker inside torch, and the C++ runtime aborted it (status 134:
    # re-test); stop now waits up to its timeout (the app gives request_timeout_s) and logs that it is waiting
    import logging
    import time

    from herald_service.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "STOP_NOTICE_S", 0.2)
    engine = InferenceEngine(runtime.backbone, runtime.probe, EngineLimits(), HeraldMetrics())
    engine.start()
    job = engine.submit_exclusive(lambda: time.sleep(1.0) or "done", 0.0, 1.0)
    time.sleep(0.1)  # the worker has taken the job
    started = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="herald_service.engine.engine"):
        engine.stop(timeout_s=5.0)
    assert 0.7 < time.perf_counter() - started < 4 and not engine._thread.is_alive()
    assert job.result(timeout=1) == "done"
    messages = [r.getMessage() for r in caplog.records]
    assert "inference worker still running a batch or /steer job; waiting up to 5 s more" in messages, messages

"""Admission by estimated wait and the /steer concurrency cap: overload is answered 429 with Retry-After at once,
not 504 after ``request_timeout_s``; every accepted request still gets exactly one answer."""

import threading
import time
from concurrent.futures import wait

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from conftest import wait_ready
from herald_service.api.app import build_app
from herald_service.backbone.fake import FakeBackbone
from herald_service.config import Settings
from herald_service.engine.admission import Throughput, admission_verdict
from herald_service.engine.engine import EngineLimits, InferenceEngine
from herald_service.engine.runtime import Runtime, fake_runtime
from herald_service.errors import QueueFull
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
    return " ".join(["w"] * (tokens - 3))


def rejected(metrics: HeraldMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("herald_rejected_requests_total", {"reason": reason}) or 0.0


# -- the estimate (pure arithmetic) -------------------------------------------------------------------------------
def test_a_request_behind_more_work_than_the_timeout_is_refused_with_the_seconds_until_it_would_fit():
    # 300 tokens ahead at 100 tokens/s: 3 s; a 5-token prompt waits 3.05 s against a 1 s limit; after 2.05 s of
    # draining it would fit, so Retry-After is 3.
    refusal = admission_verdict(300, 0, 5, 0, tokens_per_s=100.0, job_s=None, limit_s=1.0)
    assert refusal is not None
    assert refusal.wait_s == pytest.approx(3.05)
    assert refusal.retry_after_s == 3
    assert "exceeds request_timeout_s 1 s" in refusal.message and "retry in 3 s" in refusal.message


def test_a_request_within_the_timeout_is_admitted_up_to_the_limit_itself():
    assert admission_verdict(50, 0, 50, 0, tokens_per_s=100.0, job_s=None, limit_s=1.0) is None
    assert admission_verdict(50, 0, 51, 0, tokens_per_s=100.0, job_s=None, limit_s=1.0) is not None


def test_a_request_with_nothing_ahead_is_admitted_however_large():
    # Refusing it would not make it faster; answering it measures the rate.
    assert admission_verdict(0, 0, 10_000, 0, tokens_per_s=100.0, job_s=None, limit_s=1.0) is None


def test_a_request_too_large_for_the_limit_alone_is_told_to_retry_once_the_work_ahead_has_drained():
    refusal = admission_verdict(250, 0, 500, 0, tokens_per_s=100.0, job_s=None, limit_s=1.0)
    assert refusal is not None and refusal.retry_after_s == 3  # 2.5 s ahead, not 7.5 - 1 = 6.5 s


def test_exclusive_jobs_ahead_count_at_their_mean_duration():
    # One /steer job ahead at 2 s, plus 10 tokens at 100 tokens/s: 2.1 s against 1 s; fits after 1.1 s -> 2.
    refusal = admission_verdict(0, 1, 10, 0, tokens_per_s=100.0, job_s=2.0, limit_s=1.0)
    assert refusal is not None and refusal.retry_after_s == 2
    # Before any job was measured they count as free.
    assert admission_verdict(0, 1, 10, 0, tokens_per_s=100.0, job_s=None, limit_s=1.0) is None


def test_without_a_measured_rate_or_a_limit_everything_is_admitted():
    assert admission_verdict(10**6, 0, 10, 0, tokens_per_s=None, job_s=None, limit_s=1.0) is None
    assert admission_verdict(10**6, 0, 10, 0, tokens_per_s=1.0, job_s=None, limit_s=None) is None


def test_a_full_batch_moves_the_rate_by_the_smoothing_and_a_small_one_in_proportion():
    rate = Throughput(seed_tokens_per_s=1000.0, smoothing=0.3)
    rate.observe(8192, 8192 / 2000.0, token_budget=8192)  # a full batch at 2000 tokens/s
    assert rate.tokens_per_s == pytest.approx(1000 + 0.3 * 1000)
    rate = Throughput(seed_tokens_per_s=1000.0, smoothing=0.3)
    rate.observe(82, 82 / 2000.0, token_budget=8192)  # 1% of the budget: mostly per-batch cost, 1% of the weight
    assert rate.tokens_per_s == pytest.approx(1000 + 0.3 * 0.01 * 1000, rel=1e-3)


def test_without_a_seed_the_first_batch_sets_the_rate():
    rate = Throughput()
    assert rate.tokens_per_s is None
    rate.observe(10, 0.5, token_budget=8192)
    assert rate.tokens_per_s == pytest.approx(20.0)
    rate.observe(0, 0.5, token_budget=8192)  # nothing answered: no information
    assert rate.tokens_per_s == pytest.approx(20.0)


@pytest.mark.parametrize("seed", [0.0, -5.0, float("inf"), float("nan")])
def test_a_seed_that_is_not_a_positive_rate_is_refused(seed):
    with pytest.raises(ValueError, match="seed_tokens_per_s"):
        Throughput(seed)


# -- the engine -------------------------------------------------------------------------------------------------
def test_a_one_word_prompt_behind_a_long_backlog_is_refused_at_once_then_served_once_it_drains(runtime):
    # The breaker's case: long prompts hold the worker; a later "hi" was accepted and timed out (504). 100 tokens/s,
    # seeded with the true rate; a 1 s limit.
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.01))
    engine = InferenceEngine(slow, runtime.probe, EngineLimits(max_wait_s=1.0), HeraldMetrics(), seed_tokens_per_s=100.0)
    engine.start()
    (long,) = engine.submit(slow.encode([user_turn(prompt_of(150))]))  # 1.5 s alone, admitted: nothing was ahead
    with pytest.raises(QueueFull) as refused:
        engine.submit(slow.encode([user_turn("hi")]))  # 4 tokens: 1.54 s > 1 s
    assert refused.value.reason == "estimated_wait"
    assert refused.value.retry_after_s == 1  # fits after 0.54 s of draining
    assert "estimated wait 1.5 s exceeds request_timeout_s 1 s" in refused.value.message
    assert engine.ahead == (150, 0)  # the refused prompt was not queued
    with pytest.raises(QueueFull):
        engine.check_room(1)  # refused before tokenizing too: the 1.5 s ahead alone exceed 1 s
    long.result(timeout=10)
    assert engine.ahead == (0, 0)
    (hi,) = engine.submit(slow.encode([user_turn("hi")]))
    assert hi.result(timeout=10).tokens == 4
    engine.stop()


def test_work_accepted_and_then_cancelled_or_failed_gives_its_tokens_back(runtime):
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
    queued = engine.submit(backbone.encode([user_turn("a b c d"), user_turn("bake bread")]))  # 7 (fails) + 5
    cancelled = engine.submit(backbone.encode([user_turn("x y z")]))  # 6
    assert engine.ahead == (23, 0)
    engine.cancel(cancelled, "client_gone")
    assert engine.ahead == (17, 0)  # a cancelled queued prompt frees its tokens at once
    gate.set()
    wait([first, *queued], timeout=10)
    assert queued[0].exception() is not None and queued[1].exception() is None
    assert engine.ahead == (0, 0)
    engine.stop()


# -- the app, end to end on a slow fake -------------------------------------------------------------------------
def slow_app(runtime, backbone, **overrides) -> TestClient:
    settings = Settings(_env_file=None, **overrides)
    return TestClient(build_app(settings, loader=lambda s: Runtime(backbone, runtime.probe, runtime.manifest, runtime.probe_path)))


def test_overload_is_answered_429_with_retry_after_and_no_admitted_request_times_out(runtime):
    # 200 tokens/s (the warm-up measures it), one prompt per batch, a 2 s limit; each request is 150 tokens (0.75 s),
    # so about two fit behind each other and the rest of a burst of 10 must be refused at once.
    slow = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.005))
    with slow_app(runtime, slow, request_timeout_s=2.0, batch_max_prompts=1) as client:
        wait_ready(client)
        answers = []
        lock = threading.Lock()

        def post():
            r = client.post("/classify", json={"input": prompt_of(150)})
            with lock:
                answers.append(r)

        threads = [threading.Thread(target=post) for _ in range(10)]
        [t.start() for t in threads]
        [t.join(30) for t in threads]
        statuses = sorted(r.status_code for r in answers)
        assert len(answers) == 10 and set(statuses) <= {200, 429}, statuses
        assert statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
        for r in answers:
            if r.status_code == 429:
                error = r.json()["error"]
                assert error["type"] == "overloaded"
                assert "estimated wait" in error["message"] and "exceeds request_timeout_s 2 s" in error["message"]
                assert 1 <= int(r.headers["Retry-After"]) <= 2
            else:
                assert r.json()["results"][0]["tokens"] == 150
        metrics = client.app.state.herald.metrics
        assert rejected(metrics, "estimated_wait") == statuses.count(429)
        assert metrics.registry.get_sample_value("herald_requests_total", {"route": "/classify", "status": "504"}) is None
        assert metrics.registry.get_sample_value("herald_worker_throughput_tokens_per_second") > 0
        # Drained, the service takes work again.
        assert client.post("/classify", json={"input": "hi"}).status_code == 200


def test_a_steer_request_over_steer_max_concurrent_is_answered_429_and_the_slot_frees_after(runtime):
    generating, release = threading.Event(), threading.Event()

    class Held(FakeBackbone):
        def generate(self, token_ids, max_new_tokens, intervention=None, max_time_s=None):
            generating.set()
            release.wait(10)
            return super().generate(token_ids, max_new_tokens, intervention, max_time_s)

    backbone = sharing_vocab(runtime, Held())
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    with slow_app(runtime, backbone, steer_enabled=True, steer_api_key=STEER_KEY, request_timeout_s=30.0) as client:
        wait_ready(client)
        first = []
        thread = threading.Thread(target=lambda: first.append(client.post("/steer", json={"prompt": "make a bomb"}, headers=auth)))
        thread.start()
        assert generating.wait(10)
        over = client.post("/steer", json={"prompt": "bake bread"}, headers=auth)
        release.set()
        thread.join(10)
        assert over.status_code == 429, over.text
        error = over.json()["error"]
        assert error["type"] == "overloaded"
        assert "steer_max_concurrent" in error["message"] and "HERALD_STEER_MAX_CONCURRENT" in error["message"]
        assert 1 <= int(over.headers["Retry-After"]) <= 30  # no job measured yet: bounded by request_timeout_s
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

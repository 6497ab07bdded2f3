"""Chunked prefill in the engine: a prompt longer than a chunk is prefilled chunk by chunk, and shorter prompts that
arrive meanwhile are answered between two chunks (no head-of-line blocking), never past the long prompt's deadline."""

import time

import pytest
from pydantic import ValidationError

from herald_service.backbone.fake import FakeBackbone
from herald_service.config import Settings
from herald_service.engine.admission import BatchTiming, Work
from herald_service.engine.engine import CPU_CHUNK_TOKENS, EngineLimits, InferenceEngine, chunk_tokens_for
from herald_service.engine.runtime import fake_runtime
from herald_service.engine.service import engine_limits
from herald_service.errors import RequestTimeout
from herald_service.metrics import HeraldMetrics
from herald_service.types import user_turn

MS_PER_TOKEN = 0.002  # the fake model's cost: 2 ms a token, nothing else
SEED = (BatchTiming(1, 100, 0.2), BatchTiming(2, 100, 0.2), BatchTiming(1, 200, 0.4))  # that cost, for admission


@pytest.fixture(scope="module")
def runtime():
    return fake_runtime()


def slow_engine(runtime, chunk_tokens, max_wait_s=None):
    backbone = FakeBackbone(token_delay_s=MS_PER_TOKEN)
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words  # states score as the probe expects
    metrics = HeraldMetrics()
    engine = InferenceEngine(backbone, runtime.probe, EngineLimits(max_wait_s=max_wait_s, chunk_tokens=chunk_tokens), metrics, seed=SEED)
    engine.start()
    return engine, backbone, metrics


def text_of(tokens: int, harmful: bool = False) -> str:
    """A prompt the fake renders to exactly ``tokens`` tokens (3 template tokens plus one per word)."""
    words = ["wd"] * (tokens - 3)
    if harmful:
        words[0] = "bomb"
    return " ".join(words)


def interleaved(metrics) -> float:
    return metrics.registry.get_sample_value("herald_interleaved_prompts_total")


@pytest.mark.parametrize("chunk_tokens", [100, 0])
def test_a_short_prompt_is_answered_between_two_chunks_of_a_long_one(runtime, chunk_tokens):
    engine, backbone, metrics = slow_engine(runtime, chunk_tokens)
    observed = []
    engine.cost.observe = lambda timing, observe=engine.cost.observe: (observed.append(timing), observe(timing))
    (long,) = engine.submit(backbone.encode([user_turn(text_of(1000, harmful=True))]))  # 2 s of prefill
    time.sleep(0.3)
    submitted = time.perf_counter()
    (short,) = engine.submit(backbone.encode([user_turn(text_of(10))]))
    answer = short.result(timeout=10)
    waited = time.perf_counter() - submitted
    long_answer = long.result(timeout=10)
    engine.stop()
    alone = runtime.probe.predict(backbone.last_token_states(backbone.encode([user_turn(text_of(1000, harmful=True))])))
    assert long_answer.logit == pytest.approx(float(alone.logits[0]), abs=1e-9) and long_answer.flagged
    assert answer.tokens == 10 and long_answer.tokens == 1000
    if chunk_tokens:
        # Answered after the chunk running when it came (0.2 s) and its own 20 ms, not after the 1.7 s left.
        assert waited < 0.6, waited
        assert answer.timing.queue_s < 0.3 and interleaved(metrics) == 1
        assert backbone.chunks_run == 10
        # The cost model gets the long prompt's own 2 s, not the span that also held the short prompt's batch.
        (own,) = [t for t in observed if t.tokens == 1000]
        assert own.seconds == pytest.approx(2.0, abs=0.15)
        assert long_answer.timing.forward_s > own.seconds - 0.05  # the answer's wall time holds the interleaved batch
    else:
        assert waited > 1.5, waited  # head-of-line blocking: behind the whole prefill
        assert interleaved(metrics) == 0 and backbone.chunks_run == 0


@pytest.mark.parametrize("max_wait_s, interleaves", [(2.3, False), (2.7, True)])
def test_interleaving_never_pushes_a_long_prompt_past_its_deadline(runtime, max_wait_s, interleaves):
    # A 2 s prefill in 250-token chunks (0.5 s each); a 200-token prompt (0.4 s) arrives at 0.6 s. Between chunks it
    # runs only if the long prompt still ends within max_wait_s: at 1.0 s, 1.0 + 0.4 + 1.0 left = 2.4 s.
    engine, backbone, metrics = slow_engine(runtime, 250, max_wait_s=max_wait_s)
    submitted = time.perf_counter()
    (long,) = engine.submit(backbone.encode([user_turn(text_of(1000))]))
    time.sleep(0.6)
    (short,) = engine.submit(backbone.encode([user_turn(text_of(200))]))  # admitted: about 1.4 + 0.4 s of wait
    long.result(timeout=10)
    long_done = time.perf_counter() - submitted
    short.result(timeout=10)
    engine.stop()
    assert interleaved(metrics) == (1 if interleaves else 0)
    assert long_done < max_wait_s  # on time either way
    assert short.result().timing.queue_s < 1.0 if interleaves else short.result().timing.queue_s > 1.2


def test_a_long_prompt_whose_client_left_stops_at_the_next_chunk(runtime):
    engine, backbone, metrics = slow_engine(runtime, 100)
    (long,) = engine.submit(backbone.encode([user_turn(text_of(1000))]))
    time.sleep(0.3)
    engine.cancel([long], "timeout")  # what the service does when the request times out
    with pytest.raises(RequestTimeout, match="dropped after"):
        long.result(timeout=10)
    assert backbone.chunks_run <= 3  # of 10
    assert metrics.registry.get_sample_value("herald_dropped_prompts_total", {"reason": "timeout"}) == 1
    assert engine.ahead == Work() and engine.estimated_wait_s() == 0.0  # its share of the work was given back
    (next_one,) = engine.submit(backbone.encode([user_turn(text_of(10))]))
    assert next_one.result(timeout=2).tokens == 10
    engine.stop()


def test_prompts_up_to_a_chunk_run_in_one_pass_and_the_chunk_follows_the_device(runtime):
    engine, backbone, metrics = slow_engine(runtime, 100)
    futures = engine.submit(backbone.encode([user_turn(text_of(n)) for n in (100, 40, 101)]))
    assert [f.result(timeout=10).tokens for f in futures] == [100, 40, 101]
    engine.stop()
    assert backbone.chunks_run == 2  # the 101-token prompt alone: 100 + 1
    assert chunk_tokens_for(None, FakeBackbone()) == CPU_CHUNK_TOKENS == 512
    assert chunk_tokens_for(None, FakeBackbone(overlaps_host=True)) == 0  # CUDA: off unless set
    assert chunk_tokens_for(64, FakeBackbone(overlaps_host=True)) == 64


def test_the_chunk_setting(monkeypatch):
    assert engine_limits(Settings(_env_file=None)).chunk_tokens is None  # auto: the engine decides by device
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "256")
    assert engine_limits(Settings(_env_file=None)).chunk_tokens == 256
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "0")
    assert engine_limits(Settings(_env_file=None)).chunk_tokens == 0
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "8")
    with pytest.raises(ValidationError, match="(?s)prefill_chunk_tokens.*at least 16 tokens, got 8"):
        Settings(_env_file=None)

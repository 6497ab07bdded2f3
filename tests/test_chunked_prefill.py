"""Chunked prefill in the engine: a prompt longer than a chunk is prefilled chunk by chunk, and shorter prompts that
arrive meanwhile are answered between two chunks (no head-of-line blocking), never past the long prompt's deadline."""

import time

import pytest
from pydantic import ValidationError

from herald_service.backbone.fake import FakeBackbone
from herald_service.config import CPU_CHUNK_TOKENS, Settings
from herald_service.engine.admission import BatchTiming, Work
from herald_service.engine.engine import EngineLimits, InferenceEngine, chunk_tokens_for
from herald_service.engine.runtime import fake_runtime
from herald_service.engine.service import engine_limits
from herald_service.errors import RequestTimeout, SettingsConflict
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


@pytest.mark.parametrize("max_wait_s, interleaves", [(2.6, False), (3.2, True)])
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
    cpu, cuda = FakeBackbone(), FakeBackbone(overlaps_host=True)
    assert engine_limits(Settings(_env_file=None), cpu).chunk_tokens == 512  # auto: by the backbone's device
    assert engine_limits(Settings(_env_file=None), cuda).chunk_tokens == 0
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "256")
    assert engine_limits(Settings(_env_file=None), cuda).chunk_tokens == 256
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "0")
    assert engine_limits(Settings(_env_file=None), cpu).chunk_tokens == 0
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "8")
    with pytest.raises(ValidationError, match="(?s)prefill_chunk_tokens.*whole number of tokens from 16 to 1,048,576, got 8"):
        Settings(_env_file=None)


def test_a_budget_below_a_prompt_at_the_limit_is_refused_once_the_device_is_known():
    """With device and chunk auto, HERALD_BATCH_TOKEN_BUDGET=4096 under HERALD_MAX_TOKENS=10000 holds on the CPU (a
    prompt over the 512-token chunk never joins a batch) and not on CUDA (chunks off): the loaded backbone decides."""
    settings = Settings(max_tokens=10_000, batch_token_budget=4096, _env_file=None)
    limits = engine_limits(settings, FakeBackbone())
    assert (limits.token_budget, limits.chunk_tokens) == (4096, 512)
    with pytest.raises(SettingsConflict, match=r"batch_token_budget \(4096, HERALD_BATCH_TOKEN_BUDGET\) is below max_tokens"
                       r" \(10000, HERALD_MAX_TOKENS\) with prefill chunks off \(HERALD_PREFILL_CHUNK_TOKENS, auto\)"):
        engine_limits(settings, FakeBackbone(overlaps_host=True))
    auto = engine_limits(Settings(_env_file=None), FakeBackbone(overlaps_host=True))
    assert (auto.token_budget, auto.chunk_tokens) == (8192, 0)
    short_table = FakeBackbone()
    short_table.max_positions = 2048  # the longest pass is the table's, not HERALD_MAX_TOKENS' 4,096 (tester finding)
    capped = engine_limits(Settings(prefill_chunk_tokens=0, _env_file=None), short_table)
    assert (capped.token_budget, capped.chunk_tokens) == (2048, 0)
    assert engine_limits(Settings(prefill_chunk_tokens=0, _env_file=None), FakeBackbone()).token_budget == 4096


@pytest.mark.parametrize("queued_kind", ["long prompt", "timed exclusive job"])
def test_a_short_prompt_passes_a_queued_long_prompt_or_exclusive_job(runtime, queued_kind):
    # Breaker pass: interleaving stopped at the first queued prompt longer than a chunk, or a /steer job, so a second
    # long request (or a /steer) brought head-of-line blocking back (a short request waited 4.4-13 s). (A job without
    # an estimate is never passed; admission counts it until its deadline, so work behind it is refused anyway.)
    engine, backbone, metrics = slow_engine(runtime, 100, max_wait_s=10.0)
    (first,) = engine.submit(backbone.encode([user_turn(text_of(1000))]))  # 2 s
    time.sleep(0.1)
    if queued_kind == "long prompt":
        (queued,) = engine.submit(backbone.encode([user_turn(text_of(500))]))  # 1 s, queued behind the first
    else:
        queued = engine.submit_exclusive(lambda: "job done", expected_s=0.05)
    time.sleep(0.2)
    submitted = time.perf_counter()
    (short,) = engine.submit(backbone.encode([user_turn(text_of(10))]))
    short.result(timeout=10)
    waited = time.perf_counter() - submitted
    assert first.result(timeout=10).tokens == 1000 and queued.result(timeout=10) is not None
    engine.stop()
    assert interleaved(metrics) == 1 and waited < 0.6, waited


@pytest.mark.parametrize("prompts, interleaves", [(1, True), (3, False)])
def test_interleaving_keeps_the_deadlines_of_the_prompts_planned_after_the_long_one(runtime, prompts, interleaves):
    # Breaker pass: the check covered only the prompt being prefilled; two more 3,938-token prompts of its request,
    # pushed back by 200 interleaved short prompts, answered 504. Here a request of 1 or 3 prompts of 400 tokens
    # (0.8 s each) under a 3.1 s timeout (80%: 2.48 s), and a 100-token prompt (0.2 s) at 0.2 s (admitted: about
    # 2.2 + 0.2 s of wait). Run between chunks, it would end the third prompt at 2.4 + 0.2 = 2.6 s: not interleaved;
    # with one prompt, 0.8 + 0.2 s: interleaved.
    engine, backbone, metrics = slow_engine(runtime, 100, max_wait_s=3.1)
    futures = engine.submit(backbone.encode([user_turn(text_of(400)) for _ in range(prompts)]))
    time.sleep(0.2)
    (short,) = engine.submit(backbone.encode([user_turn(text_of(100))]))
    assert short.result(timeout=10).tokens == 100 and all(f.result(timeout=10).tokens == 400 for f in futures)
    engine.stop()
    assert interleaved(metrics) == (1 if interleaves else 0)


def test_a_dropped_chunked_prompt_teaches_the_cost_model_its_prefix(runtime):
    # Breaker pass: a prompt priced too low was admitted, ran to its timeout in chunks and was dropped untimed, so the
    # same prompt was admitted into a 504 again and again; the one-pass prefill, timed at its end, got 413 next time.
    engine, backbone, metrics = slow_engine(runtime, 100)
    observed = []
    engine.cost.observe = lambda timing, observe=engine.cost.observe: (observed.append(timing), observe(timing))
    (long,) = engine.submit(backbone.encode([user_turn(text_of(1000))]))
    time.sleep(0.5)
    engine.cancel([long], "timeout")
    with pytest.raises(RequestTimeout):
        long.result(timeout=10)
    engine.stop()
    (prefix,) = observed
    assert prefix.prompts == 1 and prefix.tokens == 100 * backbone.chunks_run
    assert prefix.seconds == pytest.approx(MS_PER_TOKEN * prefix.tokens, rel=0.2)


def test_the_warm_up_times_long_shapes_in_chunks_as_the_engine_runs_them(runtime):
    from herald_service.api.app import _timed

    backbone = FakeBackbone(token_delay_s=MS_PER_TOKEN)
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    chunked = fake_runtime()
    chunked.backbone = backbone
    ids = backbone.encode([user_turn(text_of(n)) for n in (50, 250)])
    assert _timed(chunked, ids, 0) == pytest.approx(0.6, abs=0.1) and backbone.chunks_run == 0
    assert _timed(chunked, ids, 100) == pytest.approx(0.6, abs=0.1) and backbone.chunks_run == 3  # 250 = 100+100+50


def test_a_chunk_no_prompt_can_exceed_is_warned_about(monkeypatch):
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "100000")
    assert any("no prompt is long enough to be prefilled in chunks" in w for w in Settings(_env_file=None).start_up_warnings())
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "512")
    assert not any("chunks" in w for w in Settings(_env_file=None).start_up_warnings())

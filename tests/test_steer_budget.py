"""/steer within its request's deadline: the job classifies the prompt first, reserves each generation's prefill,
splits what is left, and answers what it generated (cut short) before ``request_timeout_s``; a prompt whose prefills
alone exceed it is refused 413 up front; moderation admitted behind a long /steer is answered.

Budgets are checked on a fake clock that only the fake model moves, so no assertion hangs on a wall-clock threshold;
the one test in real time uses sleeps whose sums differ from the limit by seconds."""

import asyncio
import math
import threading
import time

import pytest

from herald_service.backbone.base import Generation
from herald_service.backbone.fake import FakeBackbone
from herald_service.config import Settings
from herald_service.engine import service
from herald_service.engine.admission import BatchTiming, Work
from herald_service.engine.engine import InferenceEngine
from herald_service.engine.runtime import Runtime, fake_runtime
from herald_service.engine.service import (STEER_ESTIMATE_SAFETY, STEER_MARGIN_SHARE, Moderator, engine_limits, generation_budget_s,
                                           steer_job_seconds)
from herald_service.errors import QueueFull, RequestTimeout, WorkTooLarge
from herald_service.engine.service import ClientGone
from herald_service.metrics import HeraldMetrics
from herald_service.types import user_turn
from test_admission import prompt_of, sharing_vocab  # one copy of the fake-vocabulary helpers


@pytest.fixture(scope="module")
def runtime():
    return fake_runtime()


def moderator_for(runtime, backbone, seed=(), **overrides) -> Moderator:
    """A Moderator over a started engine on ``backbone``, its cost model seeded with ``seed``."""
    settings = Settings(_env_file=None, **overrides)
    metrics = HeraldMetrics()
    engine = InferenceEngine(backbone, runtime.probe, engine_limits(settings, backbone), metrics, seed=seed)
    engine.start()
    return Moderator(Runtime(backbone, runtime.probe, runtime.manifest, runtime.probe_path), engine, settings, metrics)


def per_token(seconds: float) -> tuple[BatchTiming, ...]:
    """Warm-up timings of a worker that spends ``seconds`` per prompt token and nothing else."""
    return BatchTiming(1, 100, 100 * seconds), BatchTiming(2, 100, 100 * seconds), BatchTiming(1, 200, 200 * seconds)


def live_at(moderator: Moderator, tokens: int, seconds_a_token: float) -> None:
    """A live batch of one ``tokens``-long prompt timed on a per-token seed's line: the fit is unchanged, but it counts
    as checked up to twice that length (:attr:`BatchCost.longest_live`), so an estimate over the limit is a 413."""
    moderator.engine.cost.observe(BatchTiming.of_prompts([tokens], tokens * seconds_a_token))


def steer(moderator: Moderator, prompt: str, max_new_tokens: int = 128):
    return moderator.steer(user_turn(prompt), "ablate", None, 0.0, max_new_tokens)


class Clock:
    """A ``perf_counter`` (seconds) that only the fake model moves."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def perf_counter(self) -> float:
        return self.now_s


class Clocked(FakeBackbone):
    """The fake on a :class:`Clock`: a prefill takes ``prefill_s`` per prompt, a decode step ``step_s``, and decoding
    stops after the step that passes ``max_time_s`` (counted from before the prefill), as transformers' does. Each
    call is recorded with the clock after it (and the ``max_time_s`` it was given)."""

    def __init__(self, runtime, clock: Clock, prefill_s: float, step_s: float) -> None:
        super().__init__()
        sharing_vocab(runtime, self)
        self.clock, self.prefill_s, self.step_s = clock, prefill_s, step_s
        self.calls: list[tuple] = []

    def last_token_states(self, token_ids, intervention=None):
        self.clock.now_s += self.prefill_s * len(token_ids)
        self.calls.append(("states", self.clock.now_s))
        return super().last_token_states(token_ids, intervention)

    def generate(self, token_ids, max_new_tokens, intervention=None, max_time_s=None, stop=None, chunk_tokens=0):
        started = self.clock.now_s
        self.clock.now_s += self.prefill_s  # the prefill gives the first token
        tokens = 1
        while tokens < max_new_tokens and not (max_time_s is not None and self.clock.now_s - started > max_time_s):
            self.clock.now_s += self.step_s
            tokens += 1
        self.calls.append(("generate", self.clock.now_s, max_time_s))
        return Generation(" ".join(["word"] * tokens), tokens, cut_short=tokens < max_new_tokens)


def on_a_clock(runtime, monkeypatch, prefill_s: float, request_timeout_s: float):
    """A :class:`Clock` standing in for the service's ``time``, a :class:`Clocked` fake on it (0.1 s a decode step) and
    an unseeded Moderator over it."""
    clock = Clock()
    monkeypatch.setattr(service, "time", clock)
    backbone = Clocked(runtime, clock, prefill_s=prefill_s, step_s=0.1)
    return clock, backbone, moderator_for(runtime, backbone, request_timeout_s=request_timeout_s)


def test_the_generation_budget_reserves_one_prefill_per_generation_and_halves_the_rest():
    assert generation_budget_s(39.0, 9.0) == 10.5  # the breaker's prompt: 57 s less the two probe prefills
    assert generation_budget_s(2.0, 1.0) == 0.0  # room for the two prefills and nothing more
    assert generation_budget_s(1.0, 1.0) < 0  # not even that: the job answers 504 instead of generating


def test_a_steer_whose_generations_reach_their_budget_ends_before_its_deadline_with_what_they_generated(runtime, monkeypatch):
    # The breaker's case: ~4,080 tokens on the CPU (a prefill ~9 s), 128 new tokens at 0.1 s, request_timeout_s 60.
    # The job gave the generations all the time to the deadline, then ran both prefills of the probe: 504 at 60 s and
    # the worker busy until 82 s.
    clock, backbone, moderator = on_a_clock(runtime, monkeypatch, prefill_s=9.0, request_timeout_s=60.0)
    admitted = clock.now_s
    outcome = asyncio.run(steer(moderator, "make a bomb"))
    moderator.engine.stop()
    assert [call[0] for call in backbone.calls] == ["states", "states", "generate", "generate"]  # classified first
    _, (_, classified), (_, baseline_done, baseline_s), (_, done, steered_s) = backbone.calls
    end = admitted + 60.0 * (1 - STEER_MARGIN_SHARE)  # 57 s after admission, 3 s kept for the answer
    assert classified == admitted + 18.0
    assert baseline_s == pytest.approx(generation_budget_s(end - classified, 9.0)) == pytest.approx(10.5)
    # The same budget for both: the steered one got what the baseline left, its unused reserve included (19.4 s here),
    # so on a 3,330-token prompt the baseline was cut to "The" and the steered one ran its 8 tokens (tester finding)
    assert steered_s == baseline_s
    assert end - baseline_done - 9.0 > steered_s  # what it was given before
    assert done <= end
    assert outcome.baseline.cut_short and outcome.steered.cut_short
    assert 1 < len(outcome.baseline.text.split()) == len(outcome.steered.text.split()) < 128
    assert outcome.baseline_classification.flagged and outcome.steered_classification.score < outcome.baseline_classification.score


def test_a_steer_that_starts_too_late_for_its_prefills_answers_504_at_once_without_running_them(runtime, monkeypatch):
    # The cost model prices a prefill of the 6-token prompt at 0.6 s (100 ms a token): 2.4 s for the four. Held
    # 7.5 s behind other work, the job has 2 s of its 9.5 s left (10 s, less 0.5 s kept for the answer).
    clock = Clock()
    monkeypatch.setattr(service, "time", clock)
    backbone = Clocked(runtime, clock, prefill_s=0.6, step_s=0.1)
    moderator = moderator_for(runtime, backbone, per_token(0.1), request_timeout_s=10.0)
    queued = moderator.engine.submit_exclusive

    def behind_other_work(run, *args, **kwargs):
        clock.now_s += 7.5
        return queued(run, *args, **kwargs)

    monkeypatch.setattr(moderator.engine, "submit_exclusive", behind_other_work)
    with pytest.raises(RequestTimeout) as late:
        asyncio.run(steer(moderator, "make a bomb"))
    moderator.engine.stop()
    assert backbone.calls == []  # neither the probe's prefills nor any generation ran
    # counted as a prompt dropped for its timeout, as the README says (it was not: tester)
    assert moderator.engine.metrics.registry.get_sample_value("herald_dropped_prompts_total", {"reason": "timeout"}) == 1
    assert late.value.message == ("no answer within request_timeout_s 10 s: this /steer job needs 2.4 s for the prefills"
                                  " still to run and had 2.0 s left, having started 7.5 s after admission; retry, or"
                                  " send a shorter prompt")
    assert moderator.engine.ahead == Work()


def test_without_a_cost_model_a_steer_stops_after_the_first_prefill_that_shows_the_rest_cannot_fit(runtime, monkeypatch):
    # HERALD_WARMUP=false: no seed, so no prefill price, no 413 and no check before the job starts. A 4k-token prompt
    # (4 s a prefill) with a 10 s limit ran both probe prefills and answered 504 with the worker busy past the deadline
    # (second breaker pass); now the first prefill shows that three more cannot fit in the 5.5 s left.
    clock, backbone, moderator = on_a_clock(runtime, monkeypatch, prefill_s=4.0, request_timeout_s=10.0)
    admitted = clock.now_s
    with pytest.raises(RequestTimeout):
        asyncio.run(steer(moderator, "make a bomb"))
    moderator.engine.stop()
    assert backbone.calls == [("states", admitted + 4.0)]  # one prefill, then the 504: done before the deadline


def test_a_steer_prefill_teaches_the_cost_model_so_the_same_prompt_is_refused_413_next_time(runtime, monkeypatch):
    # Breaker pass: a /steer priced too low was admitted, held the worker, answered 504, and taught admission nothing:
    # only /classify batches were timed, so on a /steer-only server it would 504 again every time. Unseeded here
    # (no price at all); the first prefill, 4 s, shows the job cannot fit in 10 s.
    clock, backbone, moderator = on_a_clock(runtime, monkeypatch, prefill_s=4.0, request_timeout_s=10.0)
    with pytest.raises(RequestTimeout):
        asyncio.run(steer(moderator, "make a bomb"))
    tokens = len(backbone.encode([user_turn("make a bomb")])[0])
    assert moderator.engine.cost.longest_live == tokens
    assert moderator.engine.cost.seconds(Work.of_prompts([tokens])) == pytest.approx(4.0, rel=0.01)
    calls = len(backbone.calls)
    with pytest.raises(WorkTooLarge) as refused:  # 4 prefills of ~4 s against 9.5 s: refused before any model work
        asyncio.run(steer(moderator, "make a bomb"))
    moderator.engine.stop()
    assert len(backbone.calls) == calls and refused.value.reason == "estimated_work"
    metrics = moderator.metrics.registry
    assert metrics.get_sample_value("herald_worker_cost_seconds", {"per": "token"}) is not None


def test_a_prompt_whose_prefills_alone_exceed_the_limit_is_refused_413_before_any_model_work(runtime):
    # 10 ms a token, a 1 s limit of which 0.95 s is the job's: 4 x 30 tokens is 1.2 s, 4 x 20 tokens 0.8 s.
    calls = []

    class Counting(FakeBackbone):
        def generate(self, *args, **kwargs):
            calls.append("generate")
            return super().generate(*args, **kwargs)

    backbone = sharing_vocab(runtime, Counting())
    moderator = moderator_for(runtime, backbone, per_token(0.01), request_timeout_s=1.0, steer_max_concurrent=1)
    live_at(moderator, 20, 0.01)
    with pytest.raises(WorkTooLarge) as refused:
        asyncio.run(steer(moderator, " ".join(["wd"] * 27)))  # 30 tokens with the fake's 3 template tokens
    error = refused.value
    assert error.field == "prompt" and error.reason == "estimated_work"
    assert error.message == ("this prompt's 4 prefills (30 tokens each: two to classify it, one per generation) are"
                             " estimated at 1.20 s of model time on this backbone, more than the 0.95 s /steer has for"
                             " them: request_timeout_s 1 s (HERALD_REQUEST_TIMEOUT_S), less 0.05 s it keeps for the"
                             " answer; send a shorter prompt")
    assert calls == [] and moderator.engine.ahead == Work()
    metrics = moderator.metrics
    assert metrics.registry.get_sample_value("herald_rejected_requests_total", {"reason": "estimated_work"}) == 1
    assert metrics.registry.get_sample_value("herald_steer_runs_total", {"mode": "ablate"}) == 0
    # Its /steer slot was given back: the next prompt, whose prefills fit, runs.
    outcome = asyncio.run(steer(moderator, " ".join(["wd"] * 17)))
    moderator.engine.stop()
    assert calls == ["generate", "generate"] and not outcome.baseline.cut_short


def test_a_steer_prices_its_generations_at_the_length_of_the_prompt_as_sent(runtime):
    # The generations read the prompt as sent, which may tokenize longer than its fold: "b o m b" is one word folded
    # and four as sent. 10 ms a token, 0.95 s of a 1 s limit: 2 x 24 + 2 x 27 tokens is 1.02 s (4 x 24 would fit).
    backbone = sharing_vocab(runtime, FakeBackbone())
    moderator = moderator_for(runtime, backbone, per_token(0.01), request_timeout_s=1.0)
    live_at(moderator, 40, 0.01)
    prompt = " ".join(["wd"] * 20) + " b o m b"
    assert [len(backbone.encode([user_turn(prompt)], fold=fold)[0]) for fold in (True, False)] == [24, 27]
    with pytest.raises(WorkTooLarge) as refused:
        asyncio.run(steer(moderator, prompt))
    moderator.engine.stop()
    assert refused.value.message == (
        "this prompt's 4 prefills (two of 24 tokens to classify it, one of 27 tokens as sent per generation) are"
        " estimated at 1.02 s of model time on this backbone, more than the 0.95 s /steer has for them:"
        " request_timeout_s 1 s (HERALD_REQUEST_TIMEOUT_S), less 0.05 s it keeps for the answer; send a shorter prompt")


def test_a_steer_priced_over_the_limit_by_a_slow_warm_up_alone_runs_on_an_idle_worker(runtime):
    # Open item of the last breaker pass: /steer had no one-prompt exemption, so a warm-up timed 30x slow 413'd every
    # /steer on a /steer-only server for good. Seeded at 0.3 s a token against a worker at 2 ms a token, 1 s limit.
    backbone = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.002))
    moderator = moderator_for(runtime, backbone, per_token(0.3), request_timeout_s=1.0)
    assert moderator.engine.cost.longest_live == 0
    outcome = asyncio.run(steer(moderator, "make a bomb", max_new_tokens=4))  # 4 prefills priced at ~20 s: runs
    tokens = len(backbone.encode([user_turn("make a bomb")])[0])
    assert outcome.baseline_classification.tokens == tokens
    assert moderator.engine.cost.longest_live == tokens  # its first prefill was timed into the model
    assert moderator.engine.cost.seconds(Work.of_prompts([tokens])) < 0.25  # and corrected the price
    outcome = asyncio.run(steer(moderator, "make a bomb", max_new_tokens=4))  # now checked at its length, and fits
    moderator.engine.stop()
    assert outcome.steered_classification.tokens == tokens
    metrics = moderator.metrics.registry
    assert metrics.get_sample_value("herald_rejected_requests_total", {"reason": "estimated_work"}) == 0  # created at 0, never counted


def test_a_steer_priced_by_extrapolation_waits_for_an_idle_worker_429_not_queued_behind_work(runtime):
    # The exemption admits such a job only on an idle worker (its reservation exceeds the wait headroom), as for one
    # /classify prompt: queued behind a batch it could only time out. A 1,000-token /classify batch at 2 ms a token
    # holds the worker 2 s.
    backbone = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.002))
    moderator = moderator_for(runtime, backbone, per_token(0.3), request_timeout_s=3.0)
    (busy,) = moderator.engine.submit(backbone.encode([user_turn(" ".join(["wd"] * 997))]))
    time.sleep(0.2)  # the worker has taken it
    with pytest.raises(QueueFull) as refused:
        asyncio.run(steer(moderator, "make a bomb", max_new_tokens=4))
    assert refused.value.reason == "estimated_wait"
    busy.result(timeout=10)
    moderator.engine.stop()


def test_work_sent_while_an_exempt_steer_prefill_runs_past_its_deadline_gets_429_not_504(runtime):
    # Breaker pass on the exemption: the job's first prefill (priced right, but never checked at its length) held the
    # worker past the job's deadline, admission stopped counting the job at that deadline, and /classify requests
    # admitted then queued behind the prefill and answered 504. 20 ms a token: 120 tokens are a 2.4 s prefill, 1 s limit.
    backbone = sharing_vocab(runtime, FakeBackbone(token_delay_s=0.02))
    moderator = moderator_for(runtime, backbone, per_token(0.02), request_timeout_s=1.0)
    outcomes: dict[str, str] = {}

    async def later(name: str, delay_s: float, call) -> None:
        await asyncio.sleep(delay_s)
        try:
            await call()
            outcomes[name] = "answered"
        except (QueueFull, RequestTimeout) as exc:
            outcomes[name] = type(exc).__name__

    async def run() -> None:
        hi = lambda: moderator.classify([user_turn("hi")], ["input"], "input")  # noqa: E731
        await asyncio.gather(later("steer", 0.0, lambda: steer(moderator, " ".join(["wd"] * 117), max_new_tokens=4)),
                             *(later(f"classify at {d}", d, hi) for d in (0.3, 1.3, 2.0)))

    asyncio.run(run())
    time.sleep(1.0)  # the prefill ends at about 2.4 s
    moderator.engine.stop()
    assert outcomes["steer"] == "RequestTimeout"  # the prefill showed the job could not fit
    assert outcomes["classify at 0.3"] == outcomes["classify at 1.3"] == "QueueFull"  # 1.3 s: past the job's deadline
    assert outcomes["classify at 2.0"] in ("QueueFull", "answered")  # 0.4 s of prefill left: admitted if it fits


@pytest.mark.parametrize(("words", "estimate"), [(27, "1.200"), (4, "0.290")])
def test_a_steer_413_prints_figures_that_add_up_however_small_the_limit(runtime, words, estimate):
    # A 0.3 s limit keeps 0.015 s for the answer: ".1f" printed "estimated at 0.3 s ..., and /steer keeps 0.0 s of its
    # time for the answer; the limit is request_timeout_s 0.3 s" (tester pass). Now the estimate reads larger than the
    # 0.285 s left to the prefills, whether far over it (4 x 30 tokens at 10 ms) or just over (4 x 7 tokens, 0.29 s).
    backbone = sharing_vocab(runtime, FakeBackbone())
    seconds_a_token = 0.01 if words == 27 else 0.29 / 28
    moderator = moderator_for(runtime, backbone, per_token(seconds_a_token), request_timeout_s=0.3)
    live_at(moderator, words + 3, seconds_a_token)
    with pytest.raises(WorkTooLarge) as refused:
        asyncio.run(steer(moderator, " ".join(["wd"] * words)))
    moderator.engine.stop()
    tokens = words + 3  # the fake's 3 template tokens
    assert refused.value.message == (
        f"this prompt's 4 prefills ({tokens} tokens each: two to classify it, one per generation) are estimated at"
        f" {estimate} s of model time on this backbone, more than the 0.285 s /steer has for them: request_timeout_s"
        " 0.3 s (HERALD_REQUEST_TIMEOUT_S), less 0.015 s it keeps for the answer; send a shorter prompt")
    assert float(estimate) + 0.015 > 0.3


def test_moderation_admitted_behind_a_long_steer_is_answered_and_so_is_the_steer(runtime):
    # In real time, with sums seconds apart from the 6 s limit: a prefill of the 40-token steer prompt takes 0.8 s
    # (20 ms a token), a decode step 0.4 s. The job used to generate first (3.2 s, then 2.4 s) and classify after
    # (1.6 s): 7.2 s, so the steer and the /classify sent when generation began both answered 504. Now: 1.6 s of
    # prefills, 1.6 s and 2.0 s of generation cut short, done at 5.2 s; the /classify sent at 1.6 s is answered after.
    generating = threading.Event()

    class Slow(FakeBackbone):
        def generate(self, *args, **kwargs):
            generating.set()
            return super().generate(*args, **kwargs)

    backbone = sharing_vocab(runtime, Slow(token_delay_s=0.02, step_delay_s=0.4))
    moderator = moderator_for(runtime, backbone, per_token(0.02), request_timeout_s=6.0)

    async def scenario():
        steered = asyncio.ensure_future(steer(moderator, "make a bomb " + " ".join(["wd"] * 34), 64))
        assert await asyncio.get_running_loop().run_in_executor(None, generating.wait, 10)
        classified, _ = await moderator.classify([user_turn("bake bread")], ["input"], "input")
        return await steered, classified

    outcome, classified = asyncio.run(scenario())
    moderator.engine.stop()
    assert outcome.baseline.cut_short and outcome.baseline.text.startswith("I'm sorry,")
    assert outcome.steered.cut_short and outcome.steered.text.startswith("Sure,")
    assert not classified[0].flagged


def test_work_behind_a_running_steer_counts_it_until_its_deadline_not_at_the_mean_of_earlier_jobs(runtime):
    # 10 ms a token, a 10 s limit. Counted at the mean (half the limit before any job was measured), a 1 s /classify
    # behind the job was admitted (5 + 1 <= 8 s) and timed out when the job ran to its deadline; the job may run
    # until 10 s after it was accepted, so now it is refused, and admitted once the job is done.
    release = threading.Event()
    moderator = moderator_for(runtime, sharing_vocab(runtime, FakeBackbone()), per_token(0.01), request_timeout_s=10.0)
    engine = moderator.engine
    job = engine.submit_exclusive(lambda: release.wait(10), 0.5)
    assert 8.0 < engine.estimated_wait_s() <= 10.0
    prompt = runtime.backbone.encode([user_turn(" ".join(["wd"] * 97))])  # 100 tokens: 1 s
    with pytest.raises(QueueFull) as refused:
        engine.submit(prompt)
    assert refused.value.reason == "estimated_wait" and 2 <= refused.value.retry_after_s <= 3
    release.set()
    job.result(timeout=10)
    assert engine.ahead == Work() and engine.estimated_wait_s() == 0.0
    (answered,) = engine.submit(prompt)
    assert answered.result(timeout=10).tokens == 100
    engine.stop()


def test_a_steer_job_is_expected_to_take_its_prefills_and_decode_steps_at_the_rate_measured_in_earlier_jobs(runtime, monkeypatch):
    # 0.1 s a decode step on the clock. The first job has no measured rate: counted until its deadline (None). It
    # measures 0.1 s a step; the next job of 16 new tokens is expected to take 2 x (4 prefills of 0.6 s priced by the
    # cost model, 100 ms a token x 6 tokens, + 2 x 15 steps of 0.1 s) = 10.8 s.
    clock = Clock()
    monkeypatch.setattr(service, "time", clock)
    backbone = Clocked(runtime, clock, prefill_s=0.6, step_s=0.1)
    moderator = moderator_for(runtime, backbone, per_token(0.1), request_timeout_s=60.0)
    expected = []
    queued = moderator.engine.submit_exclusive

    def recorded(run, least_s=0.0, expected_s=None):
        expected.append(expected_s)
        return queued(run, least_s, expected_s)

    monkeypatch.setattr(moderator.engine, "submit_exclusive", recorded)
    assert moderator.decode_step_s.seconds is None
    asyncio.run(steer(moderator, "make a bomb", 16))
    assert moderator.decode_step_s.seconds == pytest.approx(0.1)
    asyncio.run(steer(moderator, "make a bomb", 16))
    moderator.engine.stop()
    assert expected[0] is None
    assert expected[1] == pytest.approx(STEER_ESTIMATE_SAFETY * (4 * 0.6 + 2 * 15 * 0.1)) == pytest.approx(10.8)
    assert steer_job_seconds(0.6, 16, None) is None and steer_job_seconds(None, 16, 0.1) is None


def test_moderation_behind_a_running_steer_with_a_measured_decode_rate_is_admitted_not_refused_for_its_deadline(runtime):
    # A 10 s limit, 50 ms a decode step, 8 new tokens: a /steer takes well under a second. A 1 s /classify (100 tokens
    # at 10 ms) is sent while a /steer job runs. The first /steer has no measured decode rate and
    # counts until its deadline: 10 + 1 s > the 8 s admitted, 429 (the third breaker pass's trade-off, then for every
    # /steer). The second is expected to take 2 x (4 prefills + 2 x 7 steps of 50 ms), about 1.5 s: admitted.
    held, release = threading.Event(), threading.Event()

    class Held(FakeBackbone):
        """Decodes at 50 ms a step; the job's prefill with the intervention (its second) waits for ``release``,
        having set ``held``: the job is running, and its generations, whose steps are timed, are not held."""

        def last_token_states(self, token_ids, intervention=None):
            if intervention is not None:
                held.set()
                release.wait(10)
            return super().last_token_states(token_ids, intervention)

    backbone = sharing_vocab(runtime, Held(step_delay_s=0.05))
    moderator = moderator_for(runtime, backbone, per_token(0.01), request_timeout_s=10.0)
    prompt = runtime.backbone.encode([user_turn(" ".join(["wd"] * 97))])  # 100 tokens: 1 s at the cost model

    async def classify_during_a_steer() -> str:
        held.clear(), release.clear()
        steered = asyncio.ensure_future(steer(moderator, "make a bomb", 8))
        assert await asyncio.get_running_loop().run_in_executor(None, held.wait, 10)
        try:
            (future,) = moderator.engine.submit(prompt)
        except QueueFull as refused:
            release.set()
            await steered
            return refused.reason
        release.set()
        await steered
        assert future.result(timeout=10).tokens == 100
        return "admitted"

    assert asyncio.run(classify_during_a_steer()) == "estimated_wait"
    # Measured from the first job's generations: 50 ms steps, less a share of its prefill time (held, so long)
    assert 0.02 < moderator.decode_step_s.seconds < 0.5
    assert asyncio.run(classify_during_a_steer()) == "admitted"
    moderator.engine.stop()


def test_a_steer_whose_client_left_stops_generating_and_frees_the_worker(runtime):
    # The breaker's case: a 128-token /steer whose client left at 1.6 s kept generating, and /classify got 429 for the
    # next 10 s. Here each decode step takes 20 ms and the generation would run 1,000 steps (20 s); the client leaves
    # after 0.3 s. The job now stops at its next step (here it takes 0.3 s to notice: a step in progress): the worker is
    # free within a second, the steered generation never starts, and while it stops admission counts it as about to
    # end (a re-test: the next /steer was told "Retry-After: 28" for a worker free 0.15 s later).
    calls = []

    class Long(FakeBackbone):
        """Generates ``max_new_tokens`` tokens at 20 ms a step, stopping early as the real backbone does."""

        def generate(self, token_ids, max_new_tokens, intervention=None, max_time_s=None, stop=None, chunk_tokens=0):
            tokens = 1
            while tokens < max_new_tokens and not (stop is not None and stop()):
                time.sleep(0.02)
                tokens += 1
            if tokens < max_new_tokens:
                time.sleep(0.3)
            calls.append((intervention is not None, tokens))
            return Generation(" ".join(["word"] * tokens), tokens, cut_short=tokens < max_new_tokens)

    moderator = moderator_for(runtime, sharing_vocab(runtime, Long()), per_token(0.001), request_timeout_s=60.0,
                              steer_max_new_tokens=1000)

    async def leaves_after(seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def scenario() -> float:
        with pytest.raises(ClientGone):
            await moderator.steer(user_turn("make a bomb"), "ablate", None, 0.0, 1000, lambda: leaves_after(0.3))
        left = time.perf_counter()
        assert moderator.engine.ahead.jobs == 1 and moderator.engine.exclusive_seconds_left() <= 1.0  # still stopping
        while moderator.engine.ahead != Work() and time.perf_counter() - left < 30:
            await asyncio.sleep(0.01)
        return time.perf_counter() - left

    freed_after_s = asyncio.run(scenario())
    (classified,), _ = asyncio.run(moderator.classify([user_turn("bake bread")], ["input"], "input"))
    moderator.engine.stop()
    assert freed_after_s < 1.0
    assert len(calls) == 1 and calls[0][0] is False and calls[0][1] < 100  # the baseline, stopped; no steered one
    assert not classified.flagged


CHUNK = 100
"""Chunk size (tokens) of the tests below; their prompt of 1,000 tokens takes 10 chunks a prefill, 40 a /steer job
(two classification passes, two generations)."""


class EndsAt(FakeBackbone):
    """The fake whose chunk number ``end_at`` (counted over the whole job, every prefill's chunks) is the last the
    request sees: after it, it has the request end (``leave``, from the worker thread) and waits until it has,
    so the job's next check is sure to find it ended: what is counted is chunks, not seconds."""

    def __init__(self, end_at: int) -> None:
        super().__init__()
        self.end_at = end_at
        self.leave = lambda: None  # set by the test, in its event loop
        self.ended = threading.Event()  # set once the /steer request has raised

    def _chunk(self, token_ids, start, chunk_tokens):
        super()._chunk(token_ids, start, chunk_tokens)
        if self.chunks_run == self.end_at:
            self.leave()
            assert self.ended.wait(30)


@pytest.mark.parametrize("end_at, where", [
    (3, "the first classification prefill"),
    (10, "between the two classification passes"),
    (14, "the steered classification prefill"),
    (20, "between classifying and generating"),
    (22, "the baseline generation's prefill"),
    (30, "the baseline generation's decoding"),
    (38, "the steered generation's prefill"),
])
def test_a_steer_whose_client_left_stops_at_the_next_chunk_of_any_of_its_prefills(runtime, end_at, where):
    # The tester's case: a 3,800-token /steer on the CPU whose client left at 2 s (logged 499) still ran both
    # classification prefills whole, and a /classify sent next waited 24 s. The job now asks at every chunk boundary
    # and between passes, as /classify's chunked prefill does, and the drop is counted as /classify's is.
    backbone = sharing_vocab(runtime, EndsAt(end_at))
    moderator = moderator_for(runtime, backbone, request_timeout_s=60.0, prefill_chunk_tokens=CHUNK)
    assert moderator.engine.chunk_tokens == CHUNK

    async def scenario() -> None:
        gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        backbone.leave = lambda: loop.call_soon_threadsafe(gone.set)
        try:
            with pytest.raises(ClientGone):
                await moderator.steer(user_turn(prompt_of(1000)), "ablate", None, 0.0, 16, gone.wait)
        finally:
            backbone.ended.set()
        while moderator.engine.ahead != Work():  # the worker is done with the job (bounded by the chunk count below)
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    (classified,), _ = asyncio.run(moderator.classify([user_turn("bake bread")], ["input"], "input"))
    alive = moderator.engine.alive  # answered once: a second answer would have killed the worker
    moderator.engine.stop()
    assert backbone.chunks_run == end_at, where  # not one chunk more of 40
    registry = moderator.metrics.registry
    assert registry.get_sample_value("herald_dropped_prompts_total", {"reason": "client_gone"}) == 1
    assert registry.get_sample_value("herald_dropped_prompts_total", {"reason": "timeout"}) == 0
    assert not classified.flagged and alive


def test_a_steer_whose_request_timed_out_stops_at_the_next_chunk_and_is_counted_as_timed_out(runtime):
    # Without a cost model nothing prices the job, so only its request's timeout (1 s) ends it: the worker holds the
    # third chunk until the request has answered 504, then the job stops before the fourth.
    backbone = sharing_vocab(runtime, EndsAt(3))
    moderator = moderator_for(runtime, backbone, request_timeout_s=1.0, prefill_chunk_tokens=CHUNK)

    async def scenario() -> None:
        try:
            with pytest.raises(RequestTimeout):
                await moderator.steer(user_turn(prompt_of(1000)), "ablate", None, 0.0, 16)
        finally:
            backbone.ended.set()
        while moderator.engine.ahead != Work():
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    moderator.engine.stop()
    assert backbone.chunks_run == 3
    registry = moderator.metrics.registry
    assert registry.get_sample_value("herald_dropped_prompts_total", {"reason": "timeout"}) == 1
    assert registry.get_sample_value("herald_dropped_prompts_total", {"reason": "client_gone"}) == 0


def test_a_steer_prompt_up_to_a_chunk_runs_each_prefill_in_one_pass(runtime):
    backbone = sharing_vocab(runtime, EndsAt(0))
    moderator = moderator_for(runtime, backbone, request_timeout_s=60.0, prefill_chunk_tokens=CHUNK)
    outcome = asyncio.run(moderator.steer(user_turn("make a " + prompt_of(CHUNK - 2)), "ablate", None, 0.0, 16))
    moderator.engine.stop()
    assert backbone.chunks_run == 0 and outcome.baseline_classification.tokens == CHUNK


def test_a_steer_over_the_concurrency_cap_is_told_to_retry_when_the_running_job_is_expected_to_end(runtime):
    # The breaker's case: 2-token jobs made the mean 2 s, and a 128-token /steer then ran 19 s while the next was told
    # "retry in 2 s" (and before any job had ended, half the timeout: 30 s). Now the running job's own estimate: 60 new
    # tokens at a measured 0.1 s a step, 2 x (4 prefills of 8 tokens at 1 ms a token + 2 x 59 x 0.1 s) = 23.66 s:
    # retry in 24 s.
    held, release = threading.Event(), threading.Event()

    class Held(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            if intervention is not None:
                held.set()
                release.wait(10)
            return super().last_token_states(token_ids, intervention)

    moderator = moderator_for(runtime, sharing_vocab(runtime, Held()), per_token(0.001), request_timeout_s=60.0)
    moderator.decode_step_s.observe(1.0, 10)  # 10 steps of 0.1 s
    (ids,) = runtime.backbone.encode([user_turn("make a bomb now please")])
    assert len(ids) == 8

    async def scenario():
        running = asyncio.ensure_future(steer(moderator, "make a bomb now please", 60))
        assert await asyncio.get_running_loop().run_in_executor(None, held.wait, 10)
        try:
            with pytest.raises(QueueFull) as refused:
                await steer(moderator, "bake bread", 8)
        finally:
            release.set()
        await running
        return refused.value

    refusal = asyncio.run(scenario())
    moderator.engine.stop()
    assert refusal.reason == "steer_concurrency"
    expected = steer_job_seconds(moderator.engine.cost.seconds(Work.of_prompts([8])), 60, 0.1)
    assert expected == pytest.approx(2 * (4 * 0.008 + 2 * 59 * 0.1), rel=0.01)
    assert refusal.retry_after_s == math.ceil(expected) == 24


def test_a_steer_arriving_with_the_one_holding_the_slot_is_told_that_jobs_estimate(runtime):
    # Tester: two /steer requests at once; the refused one got "Retry-After: 1" while the slot holder was still
    # tokenizing (the engine knew no job yet), and that job then ran 12 s. The holder's job is now counted from the
    # slot on: 60 new tokens at 0.1 s a step, its prefills not yet priced: 2 x (2 x 59 x 0.1) = 23.6 s, retry in 24 s.
    moderator = moderator_for(runtime, runtime.backbone, per_token(0.001), request_timeout_s=60.0)
    moderator.decode_step_s.observe(1.0, 10)  # 10 steps of 0.1 s
    holder = moderator._take_steer_slot(60)  # taken, its job not yet handed to the engine
    assert moderator.engine.exclusive_seconds_left() == 0.0
    with pytest.raises(QueueFull) as refused:
        asyncio.run(steer(moderator, "bake bread", 8))
    assert refused.value.retry_after_s == math.ceil(steer_job_seconds(0.0, 60, 0.1)) == 24
    moderator._give_back_steer_slot(holder)
    unmeasured = moderator_for(runtime, runtime.backbone, per_token(0.001), request_timeout_s=60.0)
    holder = unmeasured._take_steer_slot(60)  # no decode step timed yet: until the holder's deadline
    with pytest.raises(QueueFull) as refused:
        asyncio.run(steer(unmeasured, "bake bread", 8))
    assert 59 <= refused.value.retry_after_s <= 60
    moderator.engine.stop()
    unmeasured.engine.stop()


def test_steer_classifies_a_conversations_views_in_the_engines_batches():
    # One padded batch of a 20-turn conversation and its 20 turns cost the whole conversation's length 21 times: a
    # re-test's /steer ran 27 s past its 504 on the CPU backbone and held the worker (/classify answered it in 8 s)
    import torch

    from herald_service.backbone.batching import plan_batches
    from herald_service.backbone.fake import FakeBackbone
    from herald_service.engine.service import planned_states

    class Recording(FakeBackbone):
        calls: list[list[int]] = []

        def last_token_states(self, token_ids, intervention=None):
            self.calls.append([len(ids) for ids in token_ids])
            return super().last_token_states(token_ids, intervention)

    backbone = Recording()
    views = [list(range(2, 402))] + [[5, 6, 7, i] for i in range(20)]  # the whole conversation, then its turns
    plan = plan_batches([len(v) for v in views], 1024, 64)
    states = planned_states(backbone, views, plan)
    assert backbone.calls == [[4] * 20, [400]]  # no batch pads a 4-token turn to 400 tokens
    assert states.shape == (21, 8, 16)
    for i in (0, 7, 20):  # back in input order
        assert torch.equal(states[i], FakeBackbone().last_token_states([views[i]])[0])


def test_a_conversation_whose_views_exceed_the_limit_while_tokenized_is_refused_413_naming_the_field(runtime):
    # Breaker pass: /classify refused such a conversation 413 naming its field and counted estimated_work; /steer gave
    # the same 413 with no field and no count (the refusal came from tokenize's admission check, before the /steer one)
    from herald_service.types import Message

    backbone = sharing_vocab(runtime, FakeBackbone())
    moderator = moderator_for(runtime, backbone, per_token(0.01), request_timeout_s=1.0)
    live_at(moderator, 400, 0.01)  # checked to 800 tokens: no exemption as an unmeasured length
    # the views (the whole conversation, then the long turn alone, then "thanks") run past ENCODE_CHUNK_CHARS, so
    # tokenize checks the first chunk's work before the rest: 400 words of 24 characters, 400 tokens on the fake (4 s
    # at 10 ms a token against a 1 s limit)
    long_turn = " ".join(["w" * 24] * 400)
    conversation = (Message("user", long_turn), Message("user", "thanks"))
    with pytest.raises(WorkTooLarge) as refused:
        asyncio.run(moderator.steer(conversation, "ablate", None, 0.0, 16, field="messages"))
    moderator.engine.stop()
    assert refused.value.field == "messages" and "estimated at" in refused.value.message
    assert "prefills" not in refused.value.message  # tokenize's refusal, not the /steer price of its prefills
    metrics = moderator.metrics.registry
    assert metrics.get_sample_value("herald_rejected_requests_total", {"reason": "estimated_work"}) == 1

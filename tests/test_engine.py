"""The inference engine: every prompt answered, bounded queue, dropped cancellations, OOM splitting, worker death."""

import threading
import time
from concurrent.futures import Future, wait

import pytest
import torch

from herald_service.backbone.fake import FakeBackbone
from herald_service.engine.engine import EngineLimits, InferenceEngine
from herald_service.engine.runtime import fake_runtime
from herald_service.errors import InferenceFailed, InputTooLarge, NotReady, QueueFull, QueueTooSmall
from herald_service.metrics import HeraldMetrics
from herald_service.types import user_turn


@pytest.fixture(scope="module")
def runtime():
    return fake_runtime()


def make_engine(runtime, backbone=None, **limits):
    engine = InferenceEngine(backbone or runtime.backbone, runtime.probe, EngineLimits(**limits), HeraldMetrics())
    engine.start()
    return engine


def ids(runtime, texts):
    return runtime.backbone.encode([user_turn(t) for t in texts])


def test_every_prompt_of_concurrent_submitters_gets_its_own_answer(runtime):
    engine = make_engine(runtime, token_budget=64, max_rows=4, delay_s=0.001)
    texts = [("make a bomb now" if i % 3 == 0 else f"bake bread {i}") for i in range(60)]
    futures: list[Future] = []
    lock = threading.Lock()

    def submit(chunk):
        fs = engine.submit(ids(runtime, chunk))
        with lock:
            futures.extend(zip(chunk, fs))

    threads = [threading.Thread(target=submit, args=(texts[i : i + 6],)) for i in range(0, 60, 6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    done, not_done = wait([f for _, f in futures], timeout=30)
    engine.stop()
    assert not not_done and len(done) == 60
    for text, future in futures:
        assert future.result().flagged == ("bomb" in text)
        assert future.result().timing.batch_size <= 4


def test_full_queue_refuses_before_queueing(runtime):
    slow = FakeBackbone(forward_delay_s=0.2)
    slow._vocab, slow._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, slow, queue_capacity=3, max_rows=1, delay_s=0.0)
    first = engine.submit(ids(runtime, ["a"]))  # taken by the worker
    time.sleep(0.05)
    queued = engine.submit(ids(runtime, ["b", "c"]))
    with pytest.raises(QueueFull) as full:
        engine.submit(ids(runtime, ["d", "e"]))
    # how many wait, the capacity, and what this request needed (it printed the capacity as the count waiting: tester)
    assert full.value.message.startswith("queue is full: 2 prompts waiting of a capacity of 3 (queue_capacity,"
                                         " HERALD_QUEUE_CAPACITY), and this request needs 2 more; retry in ")
    queued += engine.submit(ids(runtime, ["d"]))
    with pytest.raises(QueueFull):
        engine.submit(ids(runtime, ["e"]))
    assert engine.depth == 3  # the refused prompts were not queued
    wait(first + queued, timeout=10)
    assert all(f.done() and f.exception() is None for f in first + queued)
    engine.stop()


def test_a_request_larger_than_the_queue_is_refused_413_not_429(runtime):
    # 64 prompts written one word a line need 378 places with their views; a capacity of 256 answered them 429 with
    # Retry-After: 1 for ever (re-tester). On an idle engine: never admissible, so a 413 naming the capacity
    engine = make_engine(runtime, queue_capacity=3)
    with pytest.raises(QueueTooSmall) as refused:
        engine.submit(ids(runtime, ["a", "b", "c", "d"]))
    assert isinstance(refused.value, InputTooLarge) and refused.value.reason == "queue_capacity"
    assert refused.value.message == ("this request needs 4 places in the queue, more than its capacity of 3"
                                     " (queue_capacity, HERALD_QUEUE_CAPACITY): no wait could admit it; send fewer"
                                     " prompts, or raise the capacity")
    assert engine.depth == 0
    assert [f.result(timeout=10).flagged for f in engine.submit(ids(runtime, ["a", "b", "c"]))] == [False] * 3
    engine.stop()


def test_stop_answers_the_queued_prompts_and_logs_how_many(runtime, caplog):
    # A new-user pass could not tell from the log whether a shutdown left anyone unanswered.
    slow = FakeBackbone(forward_delay_s=0.3)
    slow._vocab, slow._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, slow, max_rows=1, delay_s=0.0)
    running = engine.submit(ids(runtime, ["a"]))
    time.sleep(0.05)  # the worker took "a" alone into its window
    queued = engine.submit(ids(runtime, ["b", "c", "d"]))
    with caplog.at_level("INFO", logger="herald_service.engine.engine"):
        engine.stop()
    assert running[0].result(timeout=5).flagged is False  # the prompt on the model is answered by it
    assert all(isinstance(f.exception(timeout=5), NotReady) for f in queued)
    assert "inference worker stopped; 3 queued prompts answered 503 (server is shutting down)" in caplog.messages
    idle = make_engine(runtime)
    with caplog.at_level("INFO", logger="herald_service.engine.engine"):
        idle.stop()
    assert caplog.messages[-1] == "inference worker stopped; no prompt was waiting"


def test_prompts_in_the_workers_window_still_count_as_waiting(runtime):
    # The worker takes up to 4 x max_rows prompts into its window at once. They waited uncounted: the queue-depth
    # gauge read 0 beside an estimated wait of 47 s, and queue_capacity let capacity + 4 x max_rows prompts wait.
    slow = FakeBackbone(forward_delay_s=0.2)
    slow._vocab, slow._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, slow, queue_capacity=6, max_rows=1, delay_s=0.0)
    futures = engine.submit(ids(runtime, ["a", "b", "c", "d", "e", "f"]))
    time.sleep(0.1)  # the worker took a window of 4 and runs the first; 3 of them and 2 queued still wait
    assert engine.depth == 5 and engine.metrics.queue_depth._value.get() == 5
    with pytest.raises(QueueFull):
        engine.submit(ids(runtime, ["g", "h"]))
    wait(futures, timeout=10)
    assert all(f.exception() is None for f in futures) and engine.depth == 0
    assert engine.metrics.queue_depth._value.get() == 0
    engine.stop()


def test_cancelled_prompt_never_reaches_the_model(runtime):
    calls = []

    class Recording(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            calls.append(len(token_ids))
            time.sleep(0.1)
            return super().last_token_states(token_ids, intervention)

    backbone = Recording()
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, backbone, max_rows=1, delay_s=0.0)
    busy = engine.submit(ids(runtime, ["first"]))
    time.sleep(0.02)
    (gone,) = engine.submit(ids(runtime, ["client went away"]))
    assert gone.cancel()
    wait(busy, timeout=5)
    time.sleep(0.3)
    engine.stop()
    assert calls == [1]
    assert engine.metrics.dropped.labels("client_gone")._value.get() == 1


def test_cancelled_prompts_free_their_queue_places_at_once(runtime):
    """A client that times out or leaves must not keep its place: new clients would get 429 while only abandoned
    prompts wait (found by a breaker run: queue depth stayed at capacity after every client had gone)."""
    slow = FakeBackbone(forward_delay_s=0.3)
    slow._vocab, slow._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, slow, queue_capacity=4, max_rows=1, delay_s=0.0)
    busy = engine.submit(ids(runtime, ["first"]))  # taken by the worker
    time.sleep(0.05)
    abandoned = engine.submit(ids(runtime, ["a", "b", "c", "d"]))
    with pytest.raises(QueueFull):
        engine.check_room(1)
    engine.cancel(abandoned, "timeout")
    assert engine.depth == 0 and engine.metrics.queue_depth._value.get() == 0
    assert engine.metrics.dropped.labels("timeout")._value.get() == 4
    (fresh,) = engine.submit(ids(runtime, ["a new client"]))
    assert fresh.result(timeout=5).tokens > 0
    wait(busy, timeout=5)
    engine.stop()
    assert all(f.cancelled() for f in abandoned)
    assert engine.metrics.dropped.labels("timeout")._value.get() == 4  # the worker did not count them again


@pytest.mark.parametrize("overlaps_host", [False, True])
def test_out_of_memory_batch_is_split_and_retried(runtime, overlaps_host):
    class SmallMemory(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            if len(token_ids) > 2:
                raise torch.OutOfMemoryError("fake OOM")
            return super().last_token_states(token_ids, intervention)

    backbone = SmallMemory(overlaps_host=overlaps_host)
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, backbone, max_rows=8, delay_s=0.05)
    futures = engine.submit(ids(runtime, [f"prompt {i}" for i in range(8)]))
    wait(futures, timeout=10)
    engine.stop()
    assert all(f.result().timing.batch_size <= 2 for f in futures)


@pytest.mark.parametrize("overlaps_host", [False, True])
def test_failed_batch_answers_each_member_with_the_error(runtime, overlaps_host):
    class Broken(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            raise RuntimeError("kernel exploded")

    engine = make_engine(runtime, Broken(overlaps_host=overlaps_host), delay_s=0.01)
    futures = engine.submit(ids(runtime, ["a", "b", "c"]))
    wait(futures, timeout=5)
    assert all(isinstance(f.exception(), InferenceFailed) for f in futures)
    assert "kernel" not in str(futures[0].exception())  # no internals leak to clients
    assert engine.alive  # one bad batch does not kill the worker
    engine.stop()


def test_dead_worker_answers_pending_and_reports_not_alive(runtime):
    engine = make_engine(runtime, delay_s=0.0)
    engine._launch = lambda batch: (_ for _ in ()).throw(SystemError("loop broke"))
    futures = engine.submit(ids(runtime, ["a"]))
    done, _ = wait(futures, timeout=5)
    assert len(done) == 1 and isinstance(futures[0].exception(), NotReady)
    deadline = time.monotonic() + 5
    while engine.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not engine.alive
    assert "worker died" in (engine.failure or "")
    registry = engine.metrics.registry
    assert (registry.get_sample_value("herald_worker_up"), registry.get_sample_value("herald_worker_failed")) == (0, 1)
    with pytest.raises(NotReady):
        engine.submit(ids(runtime, ["b"]))


def test_prompt_cancelled_while_earlier_batches_of_its_window_run_is_dropped(runtime):
    calls = []

    class Slow(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            calls.append(len(token_ids))
            time.sleep(0.3)
            return super().last_token_states(token_ids, intervention)

    backbone = Slow()
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    # max_rows=1: three prompts taken in one window become three batches, run one after another.
    engine = make_engine(runtime, backbone, max_rows=1, delay_s=0.05)
    futures = engine.submit(ids(runtime, ["one", "two", "three"]))
    time.sleep(0.15)  # the first batch is running; the other two wait in the worker's window
    assert futures[2].cancel()
    wait(futures[:2], timeout=5)
    time.sleep(0.4)
    engine.stop()
    assert calls == [1, 1]
    assert engine.metrics.dropped.labels("client_gone")._value.get() == 1


def test_requests_of_one_window_are_answered_in_arrival_order(runtime):
    # tester: ten requests of the same prompt lengths, sorted by length across the whole window, shared every batch and
    # were all answered at the window's end (six timed out together)
    finished: list[int] = []

    class Slow(FakeBackbone):
        def last_token_states(self, token_ids, intervention=None):
            time.sleep(0.05)
            return super().last_token_states(token_ids, intervention)

    backbone = Slow()
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, backbone, max_rows=4, token_budget=4096, delay_s=0.0)
    blocker = engine.submit(ids(runtime, ["hold the worker"]))  # the three requests below queue behind it
    texts = [" ".join(["bread"] * (i + 1)) for i in range(8)]  # eight lengths, the same in every request
    requests = [engine.submit(ids(runtime, texts)) for _ in range(3)]
    for k, futures in enumerate(requests):
        for future in futures:
            future.add_done_callback(lambda _, k=k: finished.append(k))
    wait(blocker + [f for futures in requests for f in futures], timeout=30)
    engine.stop()
    assert len(finished) == 24
    # each request's last answer comes before the next request's first: 8 prompts are a cohort of 2 x max_rows
    assert finished == [0] * 8 + [1] * 8 + [2] * 8, str(finished)


class _Recorded(FakeBackbone):
    """A fake whose device "runs behind" the host: records when each batch is launched and when it is waited for."""

    def __init__(self, runtime, events, fail_wait=False):
        super().__init__(overlaps_host=True)
        self._vocab, self._words = runtime.backbone._vocab, runtime.backbone._words
        self.events, self.fail_wait = events, fail_wait

    def launch_last_token_states(self, token_ids, reduce=None):
        n = len(self.events)
        self.events.append(("launch", n))
        states = self.last_token_states(token_ids)
        states = states if reduce is None else reduce(states)

        def wait_for_states():
            self.events.append(("wait", n))
            if self.fail_wait:
                raise RuntimeError("device fault")
            return states

        return wait_for_states


def test_pipelined_engine_launches_the_next_batch_before_scoring_the_previous(runtime):
    events = []
    engine = make_engine(runtime, _Recorded(runtime, events), max_rows=1, delay_s=0.05)
    texts = ["make a bomb", "bake bread", "poison the well"]
    futures = engine.submit(ids(runtime, texts))
    done, not_done = wait(futures, timeout=10)
    engine.stop()
    assert not not_done
    assert [f.result().flagged for f in futures] == [True, False, True]
    # One window of three one-prompt batches: each batch is scored only after the next one was launched, and the
    # last one as soon as nothing else waits.
    assert [kind for kind, _ in events] == ["launch", "launch", "wait", "launch", "wait", "wait"]
    assert [n for kind, n in events if kind == "wait"] == [n for kind, n in events if kind == "launch"]


@pytest.mark.parametrize("pipelined", [True, False])
def test_pipelined_batches_reach_the_cost_model_as_one_run_and_others_one_by_one(runtime, pipelined):
    # Pipelined, a single batch's busy time depends on how the overlap split it (0.18-0.24 s for equal batches on
    # the H200); the run's sum is exact, so the cost model gets the run, with its batch count.
    backbone = _Recorded(runtime, []) if pipelined else FakeBackbone()
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    engine = make_engine(runtime, backbone, max_rows=1, delay_s=0.05)
    texts = ["make a bomb", "bake bread now", "poison the well please"]
    wait(engine.submit(ids(runtime, texts)), timeout=10)
    engine.stop()
    tokens = [len(i) for i in ids(runtime, texts)]
    observed = list(engine.cost._live)
    if pipelined:
        assert [(t.batches, t.prompts, t.tokens, t.squared_tokens) for t in observed] == [
            (3, 3, sum(tokens), sum(n * n for n in tokens))]
    else:
        assert [(t.batches, t.prompts, t.tokens) for t in observed] == [(1, 1, n) for n in tokens]


def test_pipelined_engine_answers_an_idle_prompt_without_waiting_for_another(runtime):
    events = []
    engine = make_engine(runtime, _Recorded(runtime, events), delay_s=0.0)
    (future,) = engine.submit(ids(runtime, ["bake bread"]))
    assert future.result(timeout=5).flagged is False
    engine.stop()
    assert [kind for kind, _ in events] == ["launch", "wait"]


def test_pipelined_device_fault_answers_that_batch_and_keeps_serving(runtime):
    events = []
    backbone = _Recorded(runtime, events, fail_wait=True)
    engine = make_engine(runtime, backbone, max_rows=1, delay_s=0.05)
    futures = engine.submit(ids(runtime, ["a", "b"]))
    wait(futures, timeout=5)
    assert all(isinstance(f.exception(), InferenceFailed) for f in futures)
    backbone.fail_wait = False
    assert engine.submit(ids(runtime, ["bake bread"]))[0].result(timeout=5).flagged is False
    assert engine.alive
    engine.stop()


def test_pipelined_worker_death_answers_the_batch_in_flight(runtime):
    engine = make_engine(runtime, _Recorded(runtime, []), max_rows=1, delay_s=0.05)
    engine._finish = lambda *args: (_ for _ in ()).throw(SystemError("loop broke"))
    futures = engine.submit(ids(runtime, ["a", "b"]))  # "a" is in flight when scoring it breaks the loop
    done, not_done = wait(futures, timeout=5)
    assert not not_done and all(isinstance(f.exception(), NotReady) for f in futures)
    assert not engine.alive


def test_steer_job_waits_for_the_batch_in_flight(runtime):
    events = []
    engine = make_engine(runtime, _Recorded(runtime, events), max_rows=1, delay_s=0.05)
    futures = engine.submit(ids(runtime, ["a", "b"]))
    job = engine.submit_exclusive(lambda: [kind for kind, _ in events])
    seen = job.result(timeout=5)
    wait(futures, timeout=5)
    engine.stop()
    assert seen == ["launch", "launch", "wait", "wait"]  # both batches scored before the job ran


def test_pipelined_worker_death_while_scoring_a_batch_of_an_earlier_window_answers_it(runtime):
    second_queued = threading.Event()

    class Gated(_Recorded):
        def launch_last_token_states(self, token_ids, reduce=None):
            if not self.events:  # hold the first launch until the second prompt waits in a new window
                second_queued.wait(5)
            return super().launch_last_token_states(token_ids, reduce)

    engine = make_engine(runtime, Gated(runtime, []), max_rows=1, delay_s=0.0)
    engine._score = lambda batch, states, started: (_ for _ in ()).throw(SystemError("scoring broke"))
    (first,) = engine.submit(ids(runtime, ["a"]))  # window 1
    time.sleep(0.1)
    (second,) = engine.submit(ids(runtime, ["b"]))  # window 2: launching it scores "a", which breaks the loop
    second_queued.set()
    assert isinstance(first.exception(timeout=5), NotReady)  # "a" belongs to neither the window nor the flight
    assert isinstance(second.exception(timeout=5), NotReady)
    assert not engine.alive


@pytest.mark.parametrize("overlaps_host", [False, True])
def test_engine_scores_equal_the_probe_on_the_full_states(runtime, overlaps_host):
    # Pipelined, the engine projects where the states are and copies (batch, layer) back; synchronous, it projects
    # the copied states. Both must give what the probe gives on the full states.
    backbone = FakeBackbone(overlaps_host=overlaps_host)
    engine = make_engine(runtime, backbone, token_budget=256, max_rows=8, delay_s=0.001)
    texts = ["make a bomb now", "bake bread", "how do i pick a lock", "hello there"]
    token_ids = ids(runtime, texts)
    futures = engine.submit(token_ids)
    expected = runtime.probe.predict(backbone.last_token_states(token_ids))
    for i, future in enumerate(futures):
        result = future.result(timeout=10)
        assert result.score == pytest.approx(float(expected.scores[i]), abs=1e-9)
        assert result.trajectory == pytest.approx(list(expected.trajectories[i]), abs=1e-9)
    engine.stop()

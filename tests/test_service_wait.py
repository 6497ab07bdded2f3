"""Moderator waiting on the engine: a client that leaves is answered ClientGone and leaves no asyncio error behind."""

import asyncio
import gc
import logging
import math
import time

import pytest

from herald_service.backbone.fake import FakeBackbone
from herald_service.config import Settings
from herald_service.engine.engine import InferenceEngine
from herald_service.engine.runtime import Runtime, fake_runtime
from herald_service.engine.service import ClientGone, Moderator, engine_limits
from herald_service.metrics import HeraldMetrics
from herald_service.types import user_turn


def test_client_gone_cancels_its_prompts_without_an_unretrieved_exception_log(caplog):
    runtime = fake_runtime()
    slow = FakeBackbone(forward_delay_s=0.5)
    slow._vocab, slow._words = runtime.backbone._vocab, runtime.backbone._words
    slow_runtime = Runtime(slow, runtime.probe, runtime.manifest, runtime.probe_path)
    settings = Settings(_env_file=None)
    metrics = HeraldMetrics()
    engine = InferenceEngine(slow, runtime.probe, engine_limits(settings, slow), metrics)
    engine.start()
    moderator = Moderator(slow_runtime, engine, settings, metrics)

    async def scenario():
        busy = asyncio.ensure_future(moderator.classify([user_turn("first")], ["input"], "input"))
        await asyncio.sleep(0.05)  # "first" is in the model; the next request waits in the queue
        with pytest.raises(ClientGone):
            await moderator.classify([user_turn("bake bread"), user_turn("make a bomb")], ["input[0]", "input[1]"],
                                     "input", disconnected=lambda: asyncio.sleep(0.05))
        await busy
        await asyncio.sleep(0.1)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(scenario())
        gc.collect()
    engine.stop()
    assert metrics.dropped.labels("client_gone")._value.get() == 2
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_an_encoding_error_about_one_prompt_names_that_prompts_request_field():
    from herald_service.errors import InvalidInput

    runtime = fake_runtime()

    class Refusing(FakeBackbone):
        def encode(self, conversations, fold=True):
            raise InvalidInput("a message spells a control token", prompt_index=1)

    backbone = Refusing()
    moderator = Moderator(Runtime(backbone, runtime.probe, runtime.manifest, runtime.probe_path), None, Settings(_env_file=None), HeraldMetrics())
    with pytest.raises(InvalidInput) as caught:
        asyncio.run(moderator.tokenize([user_turn("a"), user_turn("b")], ["messages[0]", "messages[1]"]))
    assert caught.value.field == "messages[1]"


def test_a_full_queue_is_refused_before_tokenizing():
    from herald_service.errors import QueueFull

    runtime = fake_runtime()
    encoded = []

    class Counting(FakeBackbone):
        def encode(self, conversations, fold=True):
            encoded.append(len(conversations))
            return super().encode(conversations, fold)

    backbone = Counting()
    backbone._vocab, backbone._words = runtime.backbone._vocab, runtime.backbone._words
    settings = Settings(_env_file=None, queue_capacity=2, max_batch_size=2, trimmed_views=False)  # the queue, not views
    metrics = HeraldMetrics()

    class Full(InferenceEngine):
        alive = True  # not started: the queue keeps what it is given

        def __init__(self):
            super().__init__(backbone, runtime.probe, engine_limits(settings, backbone), metrics)
            self._queue.extend([object(), object()])

    moderator = Moderator(Runtime(backbone, runtime.probe, runtime.manifest, runtime.probe_path), Full(), settings, metrics)
    assert encoded == [1]  # a one-letter turn, once, when the moderator is made (Moderator.most_tokens)
    encoded.clear()
    with pytest.raises(QueueFull) as full:
        asyncio.run(moderator.classify([user_turn("a long prompt " * 50)], ["input"], "input"))
    # no batch timed yet: nothing to estimate the drain from
    # how many wait, the capacity and this request's need (it printed the capacity as the count waiting: tester)
    assert full.value.message == ("queue is full: 2 prompts waiting of a capacity of 2 (queue_capacity,"
                                  " HERALD_QUEUE_CAPACITY), and this request needs 1 more; retry in 1 s")
    assert full.value.retry_after_s == 1
    assert encoded == []  # refused before any work
    assert metrics.rejected.labels("queue_full")._value.get() == 1


def test_a_full_queue_answers_retry_after_from_the_work_that_must_drain():
    # Breaker pass: Retry-After of a full queue was always 1 s; 329 of 330 retries that honoured it got 429 again
    from herald_service.engine.admission import BatchCost, BatchTiming, Work
    from herald_service.errors import QueueFull

    runtime = fake_runtime()
    settings = Settings(_env_file=None, queue_capacity=4, max_batch_size=4, request_timeout_s=60, trimmed_views=False)
    timings = (BatchTiming.of_prompts([400], 2.0), BatchTiming.of_prompts([100] * 4, 2.0), BatchTiming.of_prompts([10], 0.1))

    class Full(InferenceEngine):
        alive = True  # not started: the queue keeps what it is given

        def __init__(self):
            super().__init__(runtime.backbone, runtime.probe, engine_limits(settings, runtime.backbone), HeraldMetrics())
            self._queue.extend([object()] * 4)
            self._ahead = Work.of_prompts([400] * 4)  # four 400-token prompts waiting, about 2 s each
            self._latest_deadline = time.perf_counter() + 60  # accepted just now, under the 60 s timeout
            self.cost = BatchCost(timings, 4, 8192)

    engine = Full()
    moderator = Moderator(runtime, engine, settings, engine.metrics)
    whole_s = engine.estimated_wait_s()
    assert 6 < whole_s < 10  # the four prompts' estimate (a batch of four 400-token prompts: 8 s at 2 s each)
    for prompts, share in ((1, 1 / 4), (3, 3 / 4)):
        with pytest.raises(QueueFull) as full:
            asyncio.run(moderator.classify([user_turn("hi")] * prompts, ["input"] * prompts, "input"))
        assert full.value.retry_after_s == math.ceil(whole_s * share) > 1, (prompts, full.value.retry_after_s, whole_s)
        assert full.value.message.endswith(f"retry in {full.value.retry_after_s} s")


def test_prompts_dropped_after_a_timeout_are_counted_as_timeouts_not_as_gone_clients():
    from herald_service.errors import RequestTimeout

    runtime = fake_runtime()
    slow = FakeBackbone(forward_delay_s=0.5)
    slow._vocab, slow._words = runtime.backbone._vocab, runtime.backbone._words
    settings = Settings(_env_file=None, request_timeout_s=0.2)
    metrics = HeraldMetrics()
    engine = InferenceEngine(slow, runtime.probe, engine_limits(settings, slow), metrics)
    engine.start()
    moderator = Moderator(Runtime(slow, runtime.probe, runtime.manifest, runtime.probe_path), engine, settings, metrics)

    async def scenario():
        busy = asyncio.ensure_future(moderator.classify([user_turn("first")], ["input"], "input"))
        await asyncio.sleep(0.05)  # "first" holds the model past the others' timeout
        with pytest.raises(RequestTimeout):
            await moderator.classify([user_turn("bake bread"), user_turn("make a bomb")], ["input[0]", "input[1]"], "input")
        with pytest.raises(RequestTimeout):
            await busy
        await asyncio.sleep(0.6)  # the worker reaches the cancelled prompts and drops them

    asyncio.run(scenario())
    engine.stop()
    assert metrics.dropped.labels("timeout")._value.get() == 2
    assert metrics.dropped.labels("client_gone")._value.get() == 0

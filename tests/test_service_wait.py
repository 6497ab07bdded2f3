"""Moderator waiting on the engine: a client that leaves is answered ClientGone and leaves no asyncio error behind."""

import asyncio
import gc
import logging

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
    engine = InferenceEngine(slow, runtime.probe, engine_limits(settings), metrics)
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

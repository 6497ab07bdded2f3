"""Overload: under twice the load the service can hold, every request is answered (a result, or 429 with
Retry-After) and none is lost. A real uvicorn server on 127.0.0.1 runs the real app on the fake backend, slowed so
the queue fills; an httpx async client keeps 2 x (queue bound + batch rows) requests in flight and counts answers."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from conftest import serving
from herald_service.api.app import build_app
from herald_service.config import Settings
from herald_service.engine.runtime import fake_runtime

QUEUE, ROWS, FORWARD_S = 8, 4, 0.03
REQUESTS = 160
IN_FLIGHT = 2 * (QUEUE + ROWS)  # twice what the worker holds plus what may wait: saturation x 2


def slow_fake_runtime(_settings: Settings):
    runtime = fake_runtime()
    runtime.backbone.forward_delay_s = FORWARD_S  # each batch takes this long, so a burst overflows the queue
    return runtime


@pytest.fixture(scope="module")
def server_url():
    settings = Settings(fake_backend=True, queue_capacity=QUEUE, max_batch_size=QUEUE, batch_max_prompts=ROWS, batch_delay_ms=0.0, request_timeout_s=30.0,
                        trimmed_views=False)  # a request of QUEUE prompts must fit the queue
    with serving(build_app(settings, loader=slow_fake_runtime)) as port:
        yield f"http://127.0.0.1:{port}"


async def _flood(url: str) -> list[tuple[int, httpx.Response | None, Exception | None]]:
    answers: list[tuple[int, httpx.Response | None, Exception | None]] = []
    next_index = iter(range(REQUESTS))
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

        async def sender() -> None:
            for i in next_index:
                text = "how do I make a bomb" if i % 5 == 0 else f"bake bread number {i}"
                try:
                    answers.append((i, await client.post("/classify", json={"input": text}), None))
                except httpx.HTTPError as exc:
                    answers.append((i, None, exc))

        await asyncio.wait_for(asyncio.gather(*(sender() for _ in range(IN_FLIGHT))), timeout=90)
    return answers


def test_twice_saturation_every_request_answered_none_lost(server_url):
    answers = asyncio.run(_flood(server_url))

    assert sorted(i for i, _, _ in answers) == list(range(REQUESTS))  # each request exactly one answer
    lost = [(i, exc) for i, response, exc in answers if response is None]
    assert not lost, f"{len(lost)} requests got no HTTP answer: {lost[:3]}"
    served = [(i, r) for i, r, _ in answers if r is not None and r.status_code == 200]
    refused = [(i, r) for i, r, _ in answers if r is not None and r.status_code == 429]
    other = [(i, r.status_code, r.text[:200]) for i, r, _ in answers if r is not None and r.status_code not in (200, 429)]
    assert not other, other[:3]
    assert len(served) + len(refused) == REQUESTS
    assert refused, "the load never overflowed the queue: the test did not test overload"
    assert len(served) >= QUEUE + ROWS, "overload must not starve the requests that fit"
    for _, response in refused:
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["type"]
    for i, response in served:
        (result,) = response.json()["results"]
        assert result["flagged"] == (i % 5 == 0)

    metrics = httpx.get(server_url + "/metrics").text
    assert "herald_queue_depth_prompts 0.0" in metrics  # nothing left behind in the queue
    # Prompt tokens are counted for accepted prompts only, never for the 429s (some of which were tokenized when a
    # concurrent request filled the queue between the room check and the submission).
    counted = next(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("herald_prompt_tokens_count"))
    assert counted == len(served)

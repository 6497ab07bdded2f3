"""Pure-ASGI middleware (no BaseHTTPMiddleware, so client-disconnect messages reach the routes)."""

from __future__ import annotations

import json
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald_service.metrics import HeraldMetrics

UNMETERED = {"/metrics", "/health/live", "/health/ready"}


class RequestMetrics:
    """Counts requests by route template and status and observes their latency; probes stay out (vLLM habit)."""

    def __init__(self, app: ASGIApp, metrics: HeraldMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNMETERED:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                elapsed = time.perf_counter() - started
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-total-time", f"{elapsed * 1000:.2f}".encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(template, str(status["code"])).inc()
            self.metrics.request_duration.labels(template).observe(time.perf_counter() - started)


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413 before they are buffered (Content-Length or streamed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": {"type": "input_too_large", "message": f"request body exceeds {self.max_bytes} bytes", "field": "body"}}).encode()
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._refuse(send)
                return
        seen = 0
        started = {"response": False}

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started["response"] = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started["response"]:
                await self._refuse(send)


class _TooLarge(Exception):
    pass

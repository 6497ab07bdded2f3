"""Typed dependencies: the service state, readiness, API keys, client-disconnect awaitables."""

from __future__ import annotations

import asyncio
import hmac
import threading
from dataclasses import dataclass, field
from typing import Annotated, Awaitable, Callable

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from herald_service.api.json_body import UniqueKeysRequest
from herald_service.config import Settings
from herald_service.engine.engine import InferenceEngine
from herald_service.engine.runtime import Runtime
from herald_service.engine.service import Moderator
from herald_service.errors import FeatureDisabled, NotReady, Unauthorized
from herald_service.metrics import HeraldMetrics

LOADING_RETRY_AFTER_S = 5
"""``Retry-After`` (seconds) of a 503 while the service is loading: a start takes about 6 s on the embedded backbone
with its conversion cached (README), 40 s when it converts."""


@dataclass
class AppState:
    """Live objects of one app, on ``app.state.herald``. ``moderator`` is None until loaded and warm."""

    settings: Settings
    metrics: HeraldMetrics
    runtime: Runtime | None = None
    engine: InferenceEngine | None = None
    moderator: Moderator | None = None
    load_error: str | None = None
    on_load_error: Callable[[], None] | None = field(default=None, repr=False)
    loading_task: asyncio.Task | None = field(default=None, repr=False)
    loading: str = "loading model and probe"
    """What the start-up is doing, for ``/health/ready``'s 503 until ready (the warm-up sets its own)."""
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set when the server shuts down: the load thread stops its warm-up at the next step (:mod:`~.app`)."""

    def retry_after_s(self) -> int | None:
        """``Retry-After`` of a 503 now: :data:`LOADING_RETRY_AFTER_S` while model, probe, warm-up or worker are still
        coming up (no load error yet); None after a failed load or a dead worker, which retrying does not mend."""
        loading = not self.load_error and (self.moderator is None or self.engine is None)
        return LOADING_RETRY_AFTER_S if loading else None

    def not_ready_reason(self) -> str | None:
        """Why ``/health/ready`` is 503, or None when the service can serve."""
        if self.load_error:
            return self.load_error
        if self.moderator is None or self.engine is None:
            return self.loading
        if not self.engine.alive:
            return self.engine.failure or "inference worker is not running"
        return None


# Dependencies are `async def` so FastAPI calls them on the event loop instead of hopping to a worker thread for
# each one (benchmarks/overhead.py profiling: thousands of thread-pool hops per few hundred requests).
async def get_state(request: Request) -> AppState:
    return request.app.state.herald


State = Annotated[AppState, Depends(get_state)]


async def _ready_moderator(request: Request, state: AppState) -> Moderator:
    """The moderator, or NotReady; a body that does not fit the route's model is refused first, ready or not
    (:meth:`~herald_service.api.json_body.UniqueKeysRequest.check_body`): a malformed request is the client's fault
    whatever the server's state, and a 503 with ``Retry-After`` had it sent again to fail again. Only the schema is
    checked so: the limits the moderator checks (prompts, characters, messages, and tokens, which need the backbone's
    tokenizer) are answered once it is up, 503 until then."""
    reason = state.not_ready_reason()
    if reason is not None:
        if isinstance(request, UniqueKeysRequest):
            await request.check_body()
        raise NotReady(reason, state.retry_after_s())
    assert state.moderator is not None
    return state.moderator


async def get_moderator(request: Request) -> Moderator:
    """The moderator, or 503 while loading / after the worker died (after a 422 for a body that does not fit the
    route's model)."""
    return await _ready_moderator(request, request.app.state.herald)


_bearer = HTTPBearer(auto_error=False, description="one of HERALD_API_KEYS (moderation routes and /v1/info)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
_steer_bearer = HTTPBearer(auto_error=False, scheme_name="SteerKey", description="HERALD_STEER_API_KEY (/steer only)")
SteerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_steer_bearer)]
"""/steer's bearer credentials, under a scheme of their own in the OpenAPI document: the steer key and the client
keys are not interchangeable, and one shared ``HTTPBearer`` scheme made Swagger's one "Authorize" fill both, so one
of the two always answered 401 (tester finding)."""


def _matches(token: str, keys: list[str]) -> bool:
    return any(hmac.compare_digest(token.encode(), key.encode()) for key in keys)


def _check_api_key(state: AppState, credentials: HTTPAuthorizationCredentials | None) -> None:
    keys = [k.get_secret_value() for k in state.settings.api_keys]
    if keys and (credentials is None or not _matches(credentials.credentials, keys)):
        raise Unauthorized("missing or invalid API key (Authorization: Bearer <key>)", field="authorization")


async def require_api_key(state: State, credentials: Credentials) -> None:
    """``Authorization: Bearer <key>`` must name one of ``HERALD_API_KEYS`` when any are set.

    Raises:
        Unauthorized: missing or wrong key (401).
    """
    _check_api_key(state, credentials)


async def serving_moderator(request: Request, credentials: Credentials) -> Moderator:
    """The moderation routes' one dependency: the API key is checked first, then readiness.

    One dependency instead of three (key, state, moderator): FastAPI derives every sub-dependency's cache key and
    kind again on each request, and that was the largest single host cost of a ``/classify`` call
    (benchmarks/host_cost.py). ``credentials`` stays a dependency so OpenAPI still shows the bearer scheme.

    Raises:
        Unauthorized: missing or wrong key (401).
        RequestValidationError: not ready, and the body does not fit the route's model (422, as once ready).
        NotReady: loading, or the worker died (503).
    """
    state: AppState = request.app.state.herald
    _check_api_key(state, credentials)
    return await _ready_moderator(request, state)


STEER_DISABLED = "/steer is disabled; set HERALD_STEER_ENABLED=true and HERALD_STEER_API_KEY"
STEER_KEY_NAME = "steer key (Authorization: Bearer <HERALD_STEER_API_KEY>)"


async def require_steer_key(state: State, credentials: SteerCredentials) -> None:
    """``/steer`` is off unless enabled, and then needs ``HERALD_STEER_API_KEY`` (it removes a safety behaviour).

    Raises:
        FeatureDisabled: steering is not enabled (404).
        Unauthorized: missing or wrong steer key (401).
    """
    settings = state.settings
    if not settings.steer_enabled or settings.steer_api_key is None:
        raise FeatureDisabled(STEER_DISABLED)
    if credentials is None or not _matches(credentials.credentials, [settings.steer_api_key.get_secret_value()]):
        raise Unauthorized(f"missing or invalid {STEER_KEY_NAME}", field="authorization")


async def _disconnected(request: Request) -> None:
    # The body has been read by now, so the next ASGI message is the disconnect.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def disconnect_watch(request: Request) -> Callable[[], Awaitable[None]]:
    """A factory of an awaitable that completes when the client goes away (called only once work is queued)."""
    return lambda: _disconnected(request)


ModeratorDep = Annotated[Moderator, Depends(get_moderator)]
ServingModerator = Annotated[Moderator, Depends(serving_moderator)]
ApiKey = Depends(require_api_key)
SteerKey = Depends(require_steer_key)

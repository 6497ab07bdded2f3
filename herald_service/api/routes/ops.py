"""Operations routes: liveness, readiness, Prometheus metrics, service info, and the demo page.

The health probes and ``/metrics`` stay out of the request metrics. Every one also answers ``HEAD`` (same status and
headers, no body; the server drops the body of a HEAD answer), which some load balancers, uptime checkers and monitors
send (a breaker pass: ``HEAD /metrics`` was a 405).
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from herald_service import __version__
from herald_service.api.deps import ApiKey, State
from herald_service.api.errors import error_response
from herald_service.api.schemas import ErrorBody, InfoResponse

router = APIRouter(tags=["operations"])
WORKER_DEAD = {503: {"model": ErrorBody, "description": "The inference worker died"}}


@router.head("/health/live", include_in_schema=False)  # one operation id per method: the schema keeps GET only
@router.get("/health/live", responses=WORKER_DEAD)  # registered first, so a 405 on this path says "allow: GET" (breaker)
async def live(state: State) -> JSONResponse:
    """200 while the process can still serve; 503 once the inference worker has died, so an orchestrator restarts it."""
    if state.engine is not None and state.engine.failure is not None:
        return error_response(503, "worker_dead", state.engine.failure)
    return JSONResponse({"status": "live"})


@router.head("/health/ready", include_in_schema=False)
@router.get("/health/ready", responses={503: {"model": ErrorBody, "description": "Not ready yet, or the worker died"}})
async def ready(state: State) -> JSONResponse:
    """200 once model, probe, warm-up and worker are up; 503 (with the reason) before that or if the worker dies."""
    reason = state.not_ready_reason()
    if reason is not None:
        retry_after_s = state.retry_after_s()
        headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
        return error_response(503, "not_ready", reason, headers=headers)
    return JSONResponse({"status": "ready"})


@router.head("/metrics", include_in_schema=False)
@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"description": "Prometheus text exposition", "content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}})
async def metrics(state: State) -> Response:
    """Prometheus text exposition."""
    if state.engine is not None:
        state.metrics.queue_depth.set(state.engine.depth)
        state.metrics.estimated_wait.set(state.engine.estimated_wait_s())
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.head("/v1/info", dependencies=[ApiKey], include_in_schema=False)
@router.get("/v1/info", dependencies=[ApiKey], responses={401: {"model": ErrorBody}}, response_model=InfoResponse,
            response_model_exclude_unset=True)
async def info(state: State) -> dict:
    """Backbone, probe manifest and limits (:class:`~herald_service.api.schemas.InfoResponse`)."""
    s = state.settings
    body: dict = {
        "herald_version": __version__,
        "ready": state.not_ready_reason() is None,
        "score_messages": s.score_messages,
        "trimmed_views": s.trimmed_views,
        "limits": {
            "max_batch_size": s.max_batch_size,
            "max_chars": s.max_chars,
            "max_messages": s.max_messages,
            "max_tokens": s.max_tokens if state.runtime is None else state.runtime.token_limit(s.max_tokens)[0],
            "max_body_bytes": s.max_body_bytes(),
            "queue_capacity": s.queue_capacity,
            # resolved once the engine runs (auto: 2,048 on the CPU, 8,192 on CUDA), the setting before
            "batch_token_budget": s.batch_token_budget if state.engine is None else state.engine.limits.token_budget,
            "batch_max_prompts": s.batch_max_prompts,
            "request_timeout_s": s.request_timeout_s,
            "body_timeout_s": s.body_timeout_s,
            # the engine's resolved chunk (auto: 512 on the CPU, 0 = off on CUDA) once it runs, the setting before
            "prefill_chunk_tokens": s.prefill_chunk_tokens if state.engine is None else state.engine.chunk_tokens,
        },
        "steer_enabled": s.steer_enabled,
    }
    if s.steer_enabled:
        body["limits"]["steer_max_concurrent"] = s.steer_max_concurrent
        body["limits"]["steer_max_new_tokens"] = s.steer_max_new_tokens  # a larger max_new_tokens is a 422
    if state.runtime is not None:
        info = state.runtime.backbone.info
        body["backbone"] = {
            "id": info.model_id, "revision": info.revision, "num_layers": info.num_layers,
            "hidden_size": info.hidden_size, "device": info.device, "dtype": info.dtype,
            "matmul_dtype": info.matmul_dtype or info.dtype,
        }
        body["probe"] = {"path": state.runtime.probe_path, "sha256": state.runtime.probe_sha256, "manifest": state.runtime.manifest,
                         "reference_check": state.runtime.reference_check}
    return body


PAGE_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
}
"""The pages (the demo page, ``/docs``, ``/redoc``): the demo page has an API-key field, and Swagger UI's Authorize
holds keys, so another site must not frame them (clickjacking; CSP for current browsers, X-Frame-Options for older
ones), and they send no referrer (tester)."""


def _inline_source(page: str, tag: str) -> str:
    """The text of the page's one ``<tag>`` block (``script`` or ``style``), for its CSP hash.

    Raises:
        ValueError: the page has no such block or more than one (each needs its own hash).
    """
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
    if len(blocks) != 1:
        raise ValueError(f"the demo page has {len(blocks)} <{tag}> blocks; its Content-Security-Policy hashes one")
    return blocks[0]


def _csp_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


DEMO_PAGE = files("herald_service.api").joinpath("static/index.html").read_text(encoding="utf-8")
"""The demo page, read once (a file of the installed package)."""

DEMO_PAGE_HEADERS = {
    **PAGE_HEADERS,
    "Content-Security-Policy": "; ".join((
        "default-src 'none'", f"script-src {_csp_hash(_inline_source(DEMO_PAGE, 'script'))}",
        f"style-src {_csp_hash(_inline_source(DEMO_PAGE, 'style'))}", "connect-src 'self'", "img-src 'self'",
        "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
    )),
}
"""The demo page runs only its own inline script and style (by their sha256, CSP level 2) and talks only to this
server: a prompt or answer that ever reached the page as markup could run nothing (defence in depth: the page writes
text with ``textContent`` only; tester nit: its CSP was frame-ancestors alone)."""


@router.head("/", response_class=HTMLResponse, include_in_schema=False)
@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index() -> HTMLResponse:
    """A page where a person types a prompt and sees the verdict and the layer trajectory."""
    return HTMLResponse(DEMO_PAGE, headers=DEMO_PAGE_HEADERS)

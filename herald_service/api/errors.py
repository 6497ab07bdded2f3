"""One table from domain errors to HTTP status codes, and one error body ``{"error": {type, message, field?}}``
(on OpenAI-compatible routes also OpenAI's ``param`` and ``code``, and 400 for invalid input: :func:`error_response`).

500s never carry exception text: the details go to the log.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from herald_service.api.schemas import json_kind
from herald_service.engine.service import ClientGone
from herald_service.strict_json import echoed
from herald_service.errors import (
    FeatureDisabled,
    HeraldError,
    InferenceFailed,
    InputTooLarge,
    InvalidInput,
    NotReady,
    QueueFull,
    RequestTimeout,
    Unauthorized,
)

log = logging.getLogger(__name__)

STATUS: dict[type[HeraldError], int] = {
    InvalidInput: 422,
    InputTooLarge: 413,
    QueueFull: 429,
    Unauthorized: 401,
    FeatureDisabled: 404,
    NotReady: 503,
    RequestTimeout: 504,
    ClientGone: 499,
    InferenceFailed: 500,
}


ERROR_SCOPE_KEY = "herald.error"
"""The ASGI scope key under which an error answer leaves Herald's ``error.type`` and its field as it is sent, for the
access log line of :class:`~herald_service.api.middleware.RequestMetrics` (a 422 was logged with its status alone:
an operator could not tell why a gateway's request was refused, new-user pass)."""


class _ErrorAnswer(JSONResponse):
    """The error body of :func:`error_response`, which records ``(error_type, field)`` under
    :data:`ERROR_SCOPE_KEY` in the request's scope when it is sent."""

    logged: tuple[str, str | None] = ("internal_error", None)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope[ERROR_SCOPE_KEY] = self.logged
        await super().__call__(scope, receive, send)


class _AsciiJSONResponse(_ErrorAnswer):
    """JSON with every non-ASCII character escaped: for an error that echoes text which is not valid UTF-8."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


OPENAI_PATHS = frozenset({"/v1/moderations"})
"""Routes that answer errors in OpenAI's form as well (:func:`error_response`)."""

OPENAI_BAD_REQUEST = frozenset({413, 422})
"""Herald statuses that OpenAI's API answers as 400 (invalid or too-large input)."""


def error_response(status: int, error_type: str, message: str, field: str | None = None, headers: dict | None = None,
                   path: str | None = None) -> JSONResponse:
    """The one error body. A message or field holding a lone surrogate (a ``"\\ud800"`` JSON escape echoed back) is
    sent with non-ASCII characters escaped rather than failing to encode (which was a 500).

    On an OpenAI-compatible route (``path`` in :data:`OPENAI_PATHS`, and the 404 of any path under ``/v1/``) the body
    also carries OpenAI's ``param`` (the field, or null) and ``code`` (Herald's error type), and invalid or too-large
    input is OpenAI's 400 with type
    ``invalid_request_error`` (a 401 keeps its status with that type, as OpenAI's does): the OpenAI SDK raises
    ``BadRequestError`` for a 400 but ``UnprocessableEntityError`` for a 422 and a bare ``APIStatusError`` for a 413,
    and read ``param`` and ``code`` as None, so a gateway's ``except openai.BadRequestError`` missed Herald's
    refusals (a new-user pass with the SDK). As it is sent, it leaves ``(error_type, field)`` in the request's scope
    for the access log (:data:`ERROR_SCOPE_KEY`)."""
    body: dict = {"type": error_type, "message": message}
    if field is not None:
        body["field"] = field
    # an unknown path under /v1/ (a gateway's typo of /v1/moderations) is answered as OpenAI's API answers one
    if path in OPENAI_PATHS or (status == 404 and path is not None and path.startswith("/v1/")):
        if status in OPENAI_BAD_REQUEST:
            status = 400
        body = {**body, "param": field, "code": error_type}
        if status in (400, 401):
            body["type"] = "invalid_request_error"
    try:
        answer: _ErrorAnswer = _ErrorAnswer({"error": body}, status_code=status, headers=headers)
    except UnicodeEncodeError:
        answer = _AsciiJSONResponse({"error": body}, status_code=status, headers=headers)
    answer.logged = (error_type, field)
    return answer


INVALID_REQUEST_REASON = "invalid_request"
"""The ``herald_rejected_requests_total`` reason of every 422 (Herald's status for invalid input, a 400 on
/v1/moderations): a body that is not JSON or not the route's schema, a value out of its range. The status alone did
not tell an operator why a route's requests were refused, and /v1/moderations answers malformed HTTP 400 too."""


def _count_invalid(request: Request) -> None:
    """One more ``herald_rejected_requests_total{reason="invalid_request"}`` (:data:`INVALID_REQUEST_REASON`)."""
    request.app.state.herald.metrics.rejected.labels(INVALID_REQUEST_REASON).inc()  # set before the handlers (build_app)


def _status_of(exc: HeraldError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]  # type: ignore[index]
    return 500


async def _herald_error(request: Request, exc: HeraldError) -> JSONResponse:
    status, path = _status_of(exc), request.url.path
    if status >= 500 and not isinstance(exc, (NotReady, RequestTimeout)):
        return error_response(status, exc.error_type, "internal error; see server log", path=path)
    retry_after_s = getattr(exc, "retry_after_s", None) if isinstance(exc, (QueueFull, NotReady)) else None
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    if isinstance(exc, Unauthorized):
        headers = {"WWW-Authenticate": "Bearer"}
    if status == STATUS[InvalidInput]:
        _count_invalid(request)
    return error_response(status, exc.error_type, exc.message, exc.field, headers, path)


def _field_path(loc: tuple) -> str | None:
    parts = [p for p in loc if p not in ("body",)]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and (part == "str" or "[" in part or part.startswith("function-")):
            continue  # union-branch markers from pydantic ("str", "list[str]", "function-after[...]"), not field names
        else:
            out += f".{part}" if out else str(part)
    return out or None


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    _count_invalid(request)  # every answer below is a 422
    path = request.url.path
    errors = exc.errors()
    # For a union field pydantic reports one error per branch; the one with the deepest location names the element
    # actually at fault ({"input": ["a", null]} -> input[1], not input).
    first = max(errors, key=lambda e: len(e.get("loc", ())), default={"loc": (), "msg": "invalid request"})
    # A required field missing beside an unknown key of the same object is most often that field under another name
    # ({"messages": ...} sent to /v1/moderations read "Field required, field input": a new-user pass; a message's
    # "rol" read "'messages[0].role' is required": re-tester): name the key and what is needed. A field not given
    # that a validator requires (a message's content) counts as missing.
    unknown = [e for e in errors if e.get("type") == "extra_forbidden" and e.get("loc") and isinstance(e["loc"][-1], str)]
    wanted = [e for e in errors if e.get("loc") and (e.get("type") == "missing" or (e.get("type") == "value_error"
                                                                                    and e.get("input") is None))]
    for need in wanted:
        parent = tuple(need["loc"][:-1])
        beside = [e for e in unknown if tuple(e["loc"][:-1]) == parent]
        if beside:
            needed = " and ".join(dict.fromkeys(f"'{e['loc'][-1]}'" for e in wanted if tuple(e["loc"][:-1]) == parent))
            where = _field_path(parent)
            key = echoed(beside[0]["loc"][-1])
            field = f"{where}.{key}" if where else key
            owner = f"'{where}'" if where else "this endpoint"
            # the key in the message too: an SDK shows the message alone ("unknown field; ..." named nothing: fuzz tester)
            return error_response(422, "invalid_request", f"unknown field '{field}'; {owner} needs {needed}", field, path=path)
    loc = tuple(first.get("loc", ()))
    if loc == ("body",) and first.get("type") == "missing":
        return error_response(422, "invalid_request", "request body is required (a JSON object)", "body", path=path)
    if first.get("type") == "json_invalid":  # Herald's body routes answer it first, with the position (json_body)
        return error_response(422, "invalid_request", "request body is not valid JSON", "body", path=path)
    if loc == ("body",) and first.get("type") in ("model_attributes_type", "dict_type", "model_type"):
        return error_response(422, "invalid_request", "request body must be a JSON object (Content-Type: application/json)", "body", path=path)
    message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if str(first.get("type", "")).endswith("_type") and "input" in first:
        # pydantic's "Input should be a valid boolean" did not say what was sent ("false", a string: tester). The kind
        # only, never the value: it is the parsed one, not the client's text (1e308 read "1e+308", 1e-400 "0.0", a
        # megabyte of digits 16 of them: tester); 4.0 for an integer is refused for its form, which is said instead
        value = first["input"]
        form = " with a fraction or exponent" if first.get("type") == "int_type" and isinstance(value, float) else ""
        message += f"; got {json_kind(value)}{form}"
    if first.get("type") == "extra_forbidden" and loc and isinstance(loc[-1], str):
        # The key is the client's: name it whatever it looks like (a key "str", "a[b]" or "function-x" read as a
        # union-branch marker and was dropped, leaving no field: breaker pass), escaped and cut (a 200,000-character
        # key was echoed whole).
        parent = _field_path(loc[:-1])
        key = echoed(loc[-1])
        field = f"{parent}.{key}" if parent else key
        # pydantic's "Extra inputs are not permitted" named no field: an SDK shows only the message (tester)
        return error_response(422, "invalid_request", f"unknown field '{field}': not part of this request (/docs lists"
                              " the fields)", field, path=path)
    error = first.get("ctx", {}).get("error")
    # schemas.FieldConflict names its field from the top of the body; schemas.PartError a part below the field's own
    field = getattr(error, "field", None) or _field_path(loc) + getattr(error, "subfield", "")
    if first.get("type") == "missing" and field:  # pydantic's "Field required" named no field (tester)
        message = f"'{field}' is required"
    return error_response(422, "invalid_request", message, field, path=path)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    path = request.url.path
    if exc.status_code == 400:  # FastAPI's "error parsing the body": invalid UTF-8, nesting too deep
        _count_invalid(request)
        return error_response(422, "invalid_request", "request body could not be parsed: it is not UTF-8, or its JSON is nested too deeply", "body", path=path)
    kinds = {404: "not_found", 405: "method_not_allowed"}
    headers = getattr(exc, "headers", None)
    if exc.status_code == 405:
        # Starlette names the methods of the first route on the path only: "allow: GET" where HEAD is served too
        # (RFC 9110 section 15.5.6: Allow lists every method the resource supports; tester). These three are the only
        # methods Herald's routes serve.
        methods = [method for method in ("GET", "HEAD", "POST") if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in request.app.router.routes)]
        headers = {**(headers or {}), "Allow": ", ".join(methods)} if methods else headers
    message = str(exc.detail)
    if exc.status_code == 404 and exc.detail == "Not Found":  # the router's own 404 (a tester sent /v1/moderations/)
        # the scope's path, as the router read it: request.url.path is parsed again as a URL, which drops CR, LF and
        # TAB (GET /a%0db read "no route /ab", unlike the health port's 404: tester); echoed escapes them
        sent = request.scope["path"]
        message = f"no route {echoed(sent)}"
        trimmed = sent.rstrip("/")
        if trimmed != sent and any(route.matches({**request.scope, "path": trimmed})[0] != Match.NONE
                                   for route in request.app.router.routes):
            message += f"; did you mean {echoed(trimmed)} (no trailing slash)?"
    return error_response(exc.status_code, kinds.get(exc.status_code, "http_error"), message, headers=headers, path=path)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal error; see server log", path=request.url.path)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on ``app``."""
    app.add_exception_handler(HeraldError, _herald_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)

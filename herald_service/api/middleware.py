"""Pure-ASGI middleware (no BaseHTTPMiddleware, so client-disconnect messages reach the routes)."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald_service.api.errors import ERROR_SCOPE_KEY, error_response
from herald_service.api.json_body import JSON_CHARSETS, is_json_content_type, json_charsets
from herald_service.metrics import HeraldMetrics
from herald_service.request_context import CURRENT_REQUEST_ID
from herald_service.strict_json import echoed

log = logging.getLogger(__name__)

UNMETERED = {"/metrics", "/health/live", "/health/ready"}
"""The probes and the scrape: kept out of the request metrics and the access log, on either port (vLLM habit); every
request on the health port is kept out too (:class:`RequestMetrics`)."""

OPERATIONS_PATHS = frozenset(UNMETERED)
"""What the health port (``HERALD_HEALTH_PORT``) serves: the probes and ``/metrics``, nothing else
(:class:`OperationsPortOnly`)."""

def arrived_on(scope: Scope, port: int | None) -> bool:
    """Whether the request came in on ``port`` (None: no such port): the scope's ``server``, the local address of the
    socket that accepted the connection, as uvicorn gives every request; a server that gives none (a test client) is
    taken for the main port."""
    server = scope.get("server")
    return port is not None and server is not None and server[1] == port


access_log = logging.getLogger("herald_service.access")
"""One INFO line per request (:class:`RequestMetrics`); uvicorn's own access log is off (``herald serve``)."""

LOGGED_FIELD = re.compile(r"[A-Za-z0-9_.\[\]-]{1,80}")
"""An error's field logged on the access line (``input``, ``messages[0].content``, ``query.mode``,
``content-type``): a field naming a client's own key (an unknown key is named by it) in other characters, or longer,
is left out of the line, so it cannot forge or split it; the error type always comes."""

REQUEST_ID = re.compile(rb"[A-Za-z0-9._:=+/-]{1,128}")
"""An ``X-Request-ID`` kept as the client sent it: up to 128 characters without spaces, quotes or control characters,
so it cannot forge or split a log line. Any other value (or none) is replaced by a new UUID4 in hex."""


def request_id(scope: Scope) -> bytes:
    """The request's ``X-Request-ID`` (the first one) if it matches :data:`REQUEST_ID`, else a new UUID4 in hex."""
    sent = next((v for k, v in scope.get("headers", []) if k == b"x-request-id"), b"")
    return sent if REQUEST_ID.fullmatch(sent) else uuid.uuid4().hex.encode()


def connection_closed(scope: Scope) -> bool:
    """Whether the server says the request's connection is closing or closed (the ``herald.connection_closed``
    scope extension of :mod:`herald_service.api.http_protocol`); False for a server without it."""
    closed = scope.get("extensions", {}).get("herald.connection_closed")
    return bool(closed is not None and closed())


def refused_by_http(scope: Scope) -> bool:
    """Whether the HTTP layer answered the request 400 for its body's framing (the ``herald.refused`` scope extension
    of :mod:`herald_service.api.http_protocol`), which counts it as ``invalid_http``; False for a server without it."""
    refused = scope.get("extensions", {}).get("herald.refused")
    return bool(refused is not None and refused())


CLIENT_HOST = re.compile(r"[A-Za-z0-9.:_%\[\]-]{1,64}")
"""An address as the access log writes it bare: an IPv4 or IPv6 address (with a zone), a host name, or RFC 7239's
``unknown`` and ``_obfuscated`` identifiers."""


def client_host(scope: Scope) -> str:
    """The address the request came from, as the access log names it: the scope's ``client`` host (uvicorn puts the
    ``X-Forwarded-For`` address there for a proxy in ``FORWARDED_ALLOW_IPS``, default 127.0.0.1), ``-`` when the
    server gives none (a Unix socket). A host that is not :data:`CLIENT_HOST` (a forwarded value is the client's to
    write) is written as a JSON string of its first 64 characters, so it cannot add fields to the line:
    ``X-Forwarded-For: 10.9.9.9 status=200 request_id=FORGED`` was logged as three more fields (tester)."""
    client = scope.get("client")
    if not client:
        return "-"
    host = str(client[0])
    return host if CLIENT_HOST.fullmatch(host) else json.dumps(host[:64])


class RequestMetrics:
    """Counts requests by route template and status and observes their latency; probes stay out (vLLM habit).

    Every HTTP answer carries ``X-Request-ID`` (:func:`request_id`: the client's, or a new one), and every request but
    the probes and ``/metrics`` is logged once at INFO on ``herald_service.access``: method, route template, status,
    duration in milliseconds, request id and client address (``POST /classify 200 12.3 ms request_id=... client=...``;
    :func:`client_host`), and for an error answer its type and field (``... error=invalid_request field=input``;
    :data:`~herald_service.api.errors.ERROR_SCOPE_KEY`, :data:`LOGGED_FIELD`), the same values as the record's
    fields ``method``, ``route``, ``status``, ``duration_ms``, ``request_id``, ``client``, ``error`` and ``field``,
    which ``HERALD_LOG_FORMAT=json`` writes apart. The id is also
    :data:`~herald_service.request_context.CURRENT_REQUEST_ID` while the request runs, for lines logged elsewhere
    about it (the engine's worker thread).

    ``health_port``: the health port's number (``HERALD_HEALTH_PORT``), or None. Every request that came in on it (the
    scope's ``server``: :func:`arrived_on`) is neither counted nor logged, whatever its path:
    the 404s :class:`OperationsPortOnly` answers there for other paths were counted and logged as API traffic
    (``/classify`` 404), mixing probe-port noise into the API's error rate. It still gets its ``X-Request-ID``.

    ``paths``: the app's route paths. A request answered before routing (401 from :class:`BearerGate`, 413 from
    :class:`BodyLimit`) or by a route that does not record itself is counted under its path when that is one of
    them, and as ``unmatched`` only when it is not (so stray paths cannot create label values).

    An answer that cannot be written because the connection is gone (``send`` raises ``OSError``, as ASGI 2.4 asks of
    servers, or any error while the scope's ``herald.connection_closed`` extension from
    :mod:`herald_service.api.http_protocol` says the connection is closing) is counted 499, like a client that left
    before its answer, and the rest of it is dropped; so is one whose connection is already closing when it starts
    (uvicorn drops an answer to a lost connection without raising: a client that half-closed after its request, which
    uvicorn reads as gone, got no answer while the access log and ``herald_requests_total`` said 200, tester). Breaker
    pass: uvicorn (uvloop) raised ``RuntimeError: unable to perform operation on <TCPTransport closed=True>``, logged
    here as an ERROR with a traceback, and the answer never delivered was counted 200. A request the HTTP layer
    answered 400 for its body's framing (:func:`refused_by_http`) is neither counted nor logged here:
    ``herald_rejected_requests_total{reason="invalid_http"}`` counts it (it was counted there and again 499 here,
    breaker pass).
    """

    def __init__(self, app: ASGIApp, metrics: HeraldMetrics, paths: frozenset[str] = frozenset(),
                 health_port: int | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.paths = paths
        self.health_port = health_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        token = CURRENT_REQUEST_ID.set(rid.decode("ascii"))
        try:
            await self._answer(scope, receive, send, rid)
        finally:
            CURRENT_REQUEST_ID.reset(token)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, rid: bytes) -> None:
        if scope["path"] in UNMETERED or arrived_on(scope, self.health_port):
            async def send_with_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", []), (b"x-request-id", rid)]
                await send(message)

            await self.app(scope, receive, send_with_id)
            return
        started = time.perf_counter()
        status = {"code": 499}  # the app returned without answering: the client went away (e.g. mid-upload)
        started_response = {"response": False}
        gone = {"gone": False}

        async def send_wrapper(message: Message) -> None:
            if gone["gone"]:
                return
            if message["type"] == "http.response.start":
                started_response["response"] = True
                if connection_closed(scope):  # gone before its answer: uvicorn drops what is sent to it without a word
                    gone["gone"], status["code"] = True, 499
                    return
                status["code"] = message["status"]
                elapsed = time.perf_counter() - started
                message["headers"] = [*message.get("headers", []), (b"x-total-time", f"{elapsed * 1000:.2f}".encode()),
                                      (b"x-request-id", rid)]
            try:
                await send(message)
            except Exception as exc:
                if not (isinstance(exc, OSError) or connection_closed(scope)):
                    raise
                gone["gone"], status["code"] = True, 499

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            # Answer here instead of letting Starlette's ServerErrorMiddleware re-raise to the server, which logs a
            # second traceback and drops the client's keep-alive connection.
            log.exception("unhandled error on %s", scope["path"])
            if not started_response["response"]:
                await error_response(500, "internal_error", "internal error; see server log",
                                     path=scope.get("path"))(scope, receive, send_wrapper)
        finally:
            if not refused_by_http(scope):
                self._record(scope, status["code"], time.perf_counter() - started, rid)

    def _record(self, scope: Scope, status: int, seconds: float, rid: bytes) -> None:
        template = getattr(scope.get("route"), "path", None) or (scope["path"] if scope["path"] in self.paths else "unmatched")
        self.metrics.observe_request(template, status, seconds)
        # the template, not the path: a client cannot put its own text in the log (nor in label values)
        fields = {"method": scope["method"], "route": template, "status": status,
                  "duration_ms": round(seconds * 1000, 1), "request_id": rid.decode("ascii"), "client": client_host(scope)}
        line = "%(method)s %(route)s %(status)d %(duration_ms).1f ms request_id=%(request_id)s client=%(client)s"
        error = scope.get(ERROR_SCOPE_KEY)
        if error is not None:  # why it was refused: the error body's type, and its field where it is a plain path
            error_type, field = error
            fields["error"] = error_type
            line += " error=%(error)s"
            if field is not None and LOGGED_FIELD.fullmatch(field):
                fields["field"] = field
                line += " field=%(field)s"
        access_log.info(line, fields, extra=fields)


class OperationsPortOnly:
    """404 for any path but :data:`OPERATIONS_PATHS` on a request that came in on the health port (``health_port``,
    ``HERALD_HEALTH_PORT``), with the usual error body naming that port's purpose; requests on any other port pass.

    That port's connections are not bounded by ``HERALD_MAX_CONNECTIONS``
    (:class:`~herald_service.api.http_protocol.BoundedHeadersProtocol`), so the API served there would be a way
    around that bound; it sits outside :class:`BearerGate` so a keyed path is a 404 there too, never a 401 that says
    the path exists. Methods are the router's: ``HEAD`` is served where the main port serves it, a ``POST`` is its 405.

    The port is told by :func:`arrived_on`.

    Args:
        health_port: the health port's number, or None (every request passes).
        main_port: ``HERALD_PORT``, named in the 404 as where the API is.
    """

    def __init__(self, app: ASGIApp, health_port: int | None, main_port: int) -> None:
        self.app = app
        self.health_port = health_port
        self.main_port = main_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and arrived_on(scope, self.health_port) and scope["path"] not in OPERATIONS_PATHS:
            message = (f"no route {echoed(scope['path'])} on the health port ({self.health_port}, HERALD_HEALTH_PORT),"
                       f" which serves {', '.join(sorted(OPERATIONS_PATHS))} only, for probes and scrapes; the API is on"
                       f" port {self.main_port} (HERALD_PORT)")
            await error_response(404, "not_found", message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class CloseUnreadBodies:
    """Adds ``Connection: close`` to an answer that starts before the request's body has been read to its end (401
    from :class:`BearerGate`, 413 from :class:`BodyLimit`, 415 from :class:`JsonBodies`, a 404 or 405 for a request
    with a body), so uvicorn closes the connection once the answer is sent.

    Kept open, the connection waited for the rest of a body nobody would read, and a client trickling it held the
    connection for as long as it liked: :class:`BodyDeadline` bounds only the reads the app makes, and the app had
    already answered. A request declares a body by a non-zero ``Content-Length`` or by ``Transfer-Encoding``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        body_done = not any(k == b"transfer-encoding" or (k == b"content-length" and v.strip() not in (b"", b"0"))
                            for k, v in headers)

        async def tracked_receive() -> Message:
            nonlocal body_done
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not body_done:
                message["headers"] = [*(h for h in message.get("headers", []) if h[0].lower() != b"connection"),
                                      (b"connection", b"close")]
            await send(message)

        await self.app(scope, tracked_receive, closing_send)


class BearerGate:
    """401 for a protected route before its body is read, when the route has keys.

    Without it the API key is checked in a dependency, which FastAPI runs after reading and parsing the body: a
    client without a key got 422 for malformed JSON and 413 for an oversize body, and could make the server read and
    parse bodies of up to ``max_bytes``. The dependencies still check the key (and describe it in OpenAPI); this gate
    answers first. More than one ``Authorization`` header is refused (the dependency would read only the first).
    A path of a feature that is switched off is answered 404 here too, so nobody can make the server read its bodies.

    Args:
        keys_by_path: request path -> accepted bearer tokens; a path with no tokens is not gated.
        key_names: request path -> how the 401 names its key (default "API key"; "steer key" for /steer).
        closed: request path -> the 404 message of a feature that is off.
    """

    def __init__(self, app: ASGIApp, keys_by_path: dict[str, list[str]], key_names: dict[str, str] | None = None,
                 closed: dict[str, str] | None = None) -> None:
        self.app = app
        self.keys_by_path = {path: [k.encode() for k in keys] for path, keys in keys_by_path.items() if keys}
        self.key_names = key_names or {}
        self.closed = closed or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else None
        if path in self.closed:
            await error_response(404, "not_enabled", self.closed[path], path=path)(scope, receive, send)
            return
        keys = self.keys_by_path.get(path) if path is not None else None
        if keys:
            values = [v for k, v in scope.get("headers", []) if k == b"authorization"]
            scheme, _, token = values[0].strip().partition(b" ") if len(values) == 1 else (b"", b"", b"")
            if not (scheme.lower() == b"bearer" and any(hmac.compare_digest(token.strip(), key) for key in keys)):
                message = ("send exactly one Authorization header" if len(values) > 1
                           else f"missing or invalid {self.key_names.get(path, 'API key (Authorization: Bearer <key>)')}")
                response = error_response(401, "unauthorized", message, "authorization", {"WWW-Authenticate": "Bearer"}, path)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BodyTimedOut(Exception):
    """Raised from :class:`BodyDeadline`'s ``receive`` through the app, which has no handler for it, back to the
    middleware that answers it."""


class BodyDeadline:
    """408 for a request whose body has not fully arrived ``timeout_s`` seconds after the app got its headers.

    A client that sends headers and then trickles its body a byte at a time (slowloris) held its request, and its
    connection, for as long as it liked: uvicorn bounds idle keep-alive time, not the time to read a body. Every
    ``receive`` of the body, here or by the middleware and routes inside, waits only until the deadline; past it the
    request is answered 408 with ``Connection: close``, so the server also drops the connection and the rest of the
    body. Once the body is complete ``receive`` is not bounded (the routes wait on it for a disconnect while the
    model works).

    Args:
        timeout_s: seconds from the request's start to the body's last byte.
        setting: how the 408 names the setting to raise.
    """

    def __init__(self, app: ASGIApp, timeout_s: float, metrics: HeraldMetrics | None = None, setting: str = "") -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.metrics = metrics
        self.setting = setting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        body_done = False
        started = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if body_done:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - asyncio.get_running_loop().time(), 0.0))
            except asyncio.TimeoutError:
                raise _BodyTimedOut from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, timed_receive, tracked_send)
        except _BodyTimedOut:
            if started:  # an app that answers before reading its whole body; nothing more can be said
                return
            if self.metrics is not None:
                self.metrics.rejected.labels("body_timeout").inc()
            message = f"request body not received within {self.timeout_s:g} s" + (f" ({self.setting})" if self.setting else "")
            answer = error_response(408, "timeout", message, "body", {"Connection": "close"}, scope.get("path"))
            await answer(scope, receive, send)


HEADER_ECHO_CHARS = 64
"""A refused header value is echoed up to this many characters."""


class JsonBodies:
    """415 (501 for a transfer coding) for a request to a JSON route whose body Herald would not read as the client
    meant it, before it is read.

    - ``Transfer-Encoding`` with a coding other than ``chunked`` (``gzip, chunked``): 501, as RFC 9112 section 6.1
      asks of a coding the server does not implement. The HTTP parser reads only the chunked framing, so a gzip body
      reached the app as gzip bytes ("not UTF-8"), and a body of plain JSON sent as ``gzip, chunked`` was answered
      as if no coding had been named (breaker pass).
    - ``Content-Encoding`` other than ``identity``: Herald does not decompress, and a gzip body was answered as if it
      were JSON that is "not UTF-8, or nested too deeply".
    - ``Content-Type`` other than ``application/json`` (or ``application/*+json``), or none: a ``text/plain`` or form
      body was answered 422 after it was read in full; FastAPI already refused a body without a Content-Type (its
      ``strict_content_type``), and now says so with the same 415.

    Args:
        methods_by_path: request path -> the methods whose requests carry a JSON body there (other methods pass, so
            ``GET /classify`` still gets its 405).
    """

    def __init__(self, app: ASGIApp, methods_by_path: dict[str, frozenset[str]], metrics: HeraldMetrics | None = None) -> None:
        self.app = app
        self.methods_by_path = methods_by_path
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in self.methods_by_path.get(scope["path"], ()):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        codings = [t.strip() for k, v in headers if k == b"transfer-encoding" for t in v.decode("latin-1").split(",")]
        encodings = [t.strip() for k, v in headers if k == b"content-encoding" for t in v.decode("latin-1").split(",")]
        encodings = [t for t in encodings if t and t.lower() != "identity"]
        types = [v.decode("latin-1") for k, v in headers if k == b"content-type"]
        status, error_type = 415, "unsupported_media_type"
        if any(t.lower() != "chunked" for t in codings if t):
            status, error_type, reason, field = 501, "not_implemented", "transfer_encoding", "transfer-encoding"
            message = (f"Transfer-Encoding '{_cut(', '.join(t for t in codings if t))}' is not supported: Herald reads"
                       " request bodies with no transfer coding but chunked; send the JSON uncompressed")
        elif encodings:
            reason, field = "content_encoding", "content-encoding"
            message = (f"Content-Encoding '{_cut(', '.join(encodings))}' is not supported: Herald does not decompress"
                       " request bodies; send the JSON uncompressed")
        elif len(types) != 1 or not is_json_content_type(types[0]):
            reason, field = "content_type", "content-type"
            got = ("none was given" if not types else f"got {len(types)} Content-Type headers" if len(types) > 1
                   else f"not '{_cut(types[0])}'")
            # the media types FastAPI reads as JSON; "application/json is required" wrongly excluded the +json ones
            message = f"request body must be JSON: Content-Type application/json (or application/*+json) is required ({got})"
        elif len(charsets := json_charsets(types[0])) > 1:  # utf-8 then latin1 was read as utf-8 (new-user pass)
            reason, field = "content_type", "content-type"
            message = (f"Content-Type gives charset {len(charsets)} times ('{_cut(', '.join(charsets))}'); give it once,"
                       " as utf-8, or leave it out")
        elif charsets and charsets[0] not in JSON_CHARSETS:
            # JSON is UTF-8 (RFC 8259 section 8.1); a latin-1 body was answered "not UTF-8, or nested too deeply"
            reason, field = "content_type", "content-type"
            message = f"request body must be UTF-8 JSON: charset '{_cut(charsets[0])}' is not supported; send UTF-8"
        else:
            await self.app(scope, receive, send)
            return
        if self.metrics is not None:
            self.metrics.rejected.labels(reason).inc()
        await error_response(status, error_type, message, field, path=scope.get("path"))(scope, receive, send)


def _cut(text: str) -> str:
    return text if len(text) <= HEADER_ECHO_CHARS else text[:HEADER_ECHO_CHARS] + "..."


class BodyBudget:
    """The bytes of request bodies held at once by the requests in progress in this process, and their bound.

    One per app (``herald serve`` runs one app a process); every request runs on the event loop's thread, so the count
    needs no lock. :class:`BodyLimit` takes a request's share before its body is read and gives it back when the
    request ends.

    Args:
        limit: the most bytes held at once (``HERALD_MAX_BUFFERED_BODY_BYTES``).
        setting: how refusals and the log name the setting.
    """

    def __init__(self, limit: int, setting: str = "") -> None:
        self.limit = limit
        self.setting = setting
        self.held = 0
        self._warned_at = float("-inf")

    def take(self, nbytes: int) -> bool:
        """Hold ``nbytes`` more bytes if the total stays within :attr:`limit`; return whether they are held (0 bytes
        always are)."""
        if nbytes and self.held + nbytes > self.limit:
            return False
        self.held += nbytes
        return True

    def give(self, nbytes: int) -> None:
        """Give back ``nbytes`` bytes taken by :meth:`take`."""
        self.held -= nbytes

    def warn_full(self) -> None:
        """Log that the bound refuses requests, at most once a minute (not a line per request of a flood)."""
        now = time.monotonic()
        if now - self._warned_at >= 60.0:
            self._warned_at = now
            log.warning("request bodies in progress hold %d of %d bytes (%s): requests whose bodies do not fit are"
                        " answered 429; herald_rejected_requests_total{reason=\"buffered_bodies\"} counts them",
                        self.held, self.limit, self.setting or "the body budget")


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413 before the app parses them; ``set_by`` says in the answer
    which settings give the limit.

    A declared ``Content-Length`` over the limit is refused at once. A body without one (chunked) is read here up to
    the limit and replayed to the app; one byte over and it is refused. (Raising from inside the app's ``receive``
    would not work: FastAPI turns any body-reading error into a 400.)

    With a ``budget`` (:class:`BodyBudget`, ``HERALD_MAX_BUFFERED_BODY_BYTES``), a request also holds its share of the
    bytes all bodies in progress may hold: its ``Content-Length`` as soon as its headers are in, a chunked body its
    bytes as they arrive, until the request ends however it ends (answered, refused, timed out by
    :class:`BodyDeadline`, its client gone, an error). One whose share does not fit is answered 429 with
    ``Retry-After: 1`` (type ``overloaded``, counted as ``buffered_bodies``) before the rest of its body is read. Each
    connection's body was buffered whole with no overall bound: 350 connections sending all but the last byte of a
    12.3 MB body took about 4 GB of RSS (tester).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, metrics: HeraldMetrics | None = None, set_by: str = "",
                 budget: BodyBudget | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.set_by = set_by
        self.budget = budget

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.metrics is not None:
            self.metrics.rejected.labels("body_size").inc()
        # The operator who reads the 413 needs to know which setting to raise, not just the number.
        limit = f"request body exceeds the limit of {self.max_bytes} bytes" + (f", set by {self.set_by}" if self.set_by else "")
        # through error_response, so /v1/moderations answers OpenAI's 400 here too (it answered 413 in Herald's body)
        await error_response(413, "input_too_large", limit, "body", path=scope.get("path"))(scope, receive, send)

    async def _overloaded(self, scope: Scope, receive: Receive, send: Send, budget: BodyBudget, nbytes: int) -> None:
        if self.metrics is not None:
            self.metrics.rejected.labels("buffered_bodies").inc()
        budget.warn_full()
        setting = f" ({budget.setting})" if budget.setting else ""
        message = (f"too many request bodies in progress: they hold {budget.held} of the {budget.limit} bytes this"
                   f" server buffers at once{setting}, and this body needs {nbytes} more; retry shortly")
        response = error_response(429, "overloaded", message, "body", {"Retry-After": "1"}, scope.get("path"))
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        length = headers.get(b"content-length")
        held = 0  # bytes of the budget this request holds, given back however it ends
        try:
            if length is not None:
                declared = int(length) if length.isdigit() else 0  # any other value: the HTTP parser refuses it
                if declared > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
                if self.budget is not None and not self.budget.take(declared):
                    await self._overloaded(scope, receive, send, self.budget, declared)
                    return
                held = declared
                await self.app(scope, receive, send)
                return
            chunks: list[bytes] = []
            seen = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # client went away while sending
                chunks.append(message.get("body", b""))
                seen += len(chunks[-1])
                if seen > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
                if self.budget is not None and not self.budget.take(len(chunks[-1])):
                    await self._overloaded(scope, receive, send, self.budget, len(chunks[-1]))
                    return
                held += len(chunks[-1])
                if not message.get("more_body", False):
                    break
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
        finally:
            if self.budget is not None:
                self.budget.give(held)

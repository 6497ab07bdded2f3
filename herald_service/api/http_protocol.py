"""The HTTP/1.1 protocol ``herald serve`` runs under uvicorn: httptools' parser, with a request's line and headers
bounded in size (as uvicorn's h11 parser bounds them) and in time.

uvicorn bounds request headers only with h11 (``h11_max_incomplete_event_size``), and never in time; with httptools,
its faster parser, it buffered headers of any size, and Herald checks the API key only once they are complete: a
tester's 200 headers of 1 MB each grew the server by 400 MB, and a client sending one header line every 2 s held a
connection for as long as it liked. h11 costs several times the host CPU per request (docs/PERFORMANCE.md), which the
GPU service's saturation is bound by, so Herald keeps httptools and adds both bounds here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

from uvicorn.config import Config

from herald_service.api.errors import OPENAI_PATHS
from herald_service.config import HEALTH_PORT_CONNECTIONS, HEALTH_PORT_IDLE_S

try:
    import httptools
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
except ImportError:  # httptools not installed: uvicorn's h11 parser bounds header size by the same setting
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)


class HeadersTooLarge(Exception):
    """Raised inside the parser's callbacks once a request's line and headers pass the bound; httptools turns it into
    a parser error, which uvicorn answers with 400 and a closed connection."""


class UnservedRequest(Exception):
    """Raised inside the parser's callbacks for a request whose line and headers are complete but that is not served:
    one HTTP/1.1 (RFC 9112) does not allow, or a CONNECT; answered 400 like :class:`HeadersTooLarge`, with the reason
    (:func:`http_version_problem`)."""


def http_version_problem(version: str, headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a request of HTTP ``version`` (``"1.1"``, as the parser gives it) with ``headers`` (lower-case names) cannot
    be served, or None. httptools passed all three (tester finding): a request line of another version (``HTTP/2.0``,
    sent as text, was answered as HTTP/1.1), an HTTP/1.1 request without ``Host`` (RFC 9112 section 3.2: a server
    must answer it 400, as one with several), and an HTTP/1.0 request with ``Transfer-Encoding`` (section 6.1: its
    framing is faulty)."""
    names = [name for name, _ in headers]
    if version not in ("1.0", "1.1"):
        return f"HTTP/{version} is not served on this port: send HTTP/1.1 (or HTTP/1.0)."
    if version == "1.1" and b"host" not in names:
        return "An HTTP/1.1 request needs a Host header (RFC 9112 section 3.2)."
    if names.count(b"host") > 1:
        return "A request may carry one Host header, not several (RFC 9112 section 3.2)."
    if version == "1.0" and b"transfer-encoding" in names:
        return "HTTP/1.0 has no Transfer-Encoding (RFC 9112 section 6.1): send Content-Length, or use HTTP/1.1."
    return None


PARSER_REASONS = {"Pause on PRI/Upgrade": "an HTTP/2 connection preface: this port serves HTTP/1.1 (and HTTP/1.0) only"}
"""llhttp's reasons that would mislead as they are, reworded for the 400's body."""


class ParserKeepingItsError:
    """httptools' request parser with the reason of its last error kept (``error``), for the 400's body: uvicorn
    answered every parser error "Invalid HTTP request received.", so a bad chunk size, a Transfer-Encoding llhttp
    refuses or an ``HTTP/1.2`` request line did not say which (tester finding). Every other attribute is the
    parser's own."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser
        self.error: str | None = None

    def feed_data(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = str(exc)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


LINGERING_LIMIT = 32
"""Connections that may linger at once, closing with what their client sends unread (write side closed, what
arrives discarded, closed at the client's end of stream or after :data:`REFUSAL_LINGER_S` or
:data:`UNREAD_BODY_LINGER_S`): those refused past ``max_connections`` and those answered before their request's
body was read; half of the 64 descriptors ``herald serve`` keeps beyond the bound
(:data:`~herald_service.config.FILE_DESCRIPTOR_RESERVE`). Past it such a connection is closed at once."""

REFUSAL_LINGER_S = 1.0
"""Seconds a connection refused past ``max_connections`` (answered 503 before its request is read) lingers at most:
its client sends a request line and headers, not a body."""

UNREAD_BODY_LINGER_S = 2.0
"""Seconds a connection answered before its request's body was read (401, 413, 415, 404, 405 with
``Connection: close``: :class:`~herald_service.api.middleware.CloseUnreadBodies`) lingers at most, discarding the
rest of the body: enough for a client on a 100 Mbit/s link to finish sending a body at the 12 MB limit of the
embedded default (breaker pass: with megabytes unread the kernel reset the connection and httpx's async client, and
the OpenAI SDK's, saw a connection error in place of the answer). A client still sending after it reads a reset."""

REFUSAL_REASONS = ("header_size", "header_timeout", "invalid_http", "connections", "health_connections")
"""What the HTTP layer refuses before a route is known, as ``refused`` callbacks name it: request line and headers
over the bound (400), headers not complete in time (408), not HTTP/1.1 (400), a connection past the open-connection
bound (``connections``: the main port's ``max_connections``, the new one is answered 503; ``health_connections``: the
health port's :data:`~herald_service.config.HEALTH_PORT_CONNECTIONS`, its oldest idle connection is closed to make
room)."""


LAYER_ERROR_TYPES = {400: "invalid_request", 408: "timeout", 503: "overloaded"}
"""The ``error.type`` of each answer the HTTP layer writes itself, from the API's own types (DESIGN section 3)."""


def layer_answer(status: int, message: str, default_headers: list[tuple[bytes, bytes]], retry_after_s: int | None = None,
                 openai: bool = False) -> bytes:
    """The bytes of an answer the HTTP layer writes before any route runs (400, 408, 503): the API's error body
    ``{"error": {"type", "message"}}`` (:data:`LAYER_ERROR_TYPES`) as JSON, a new ``X-Request-ID`` (UUID4 in hex, as
    the middleware gives a request without one: the request's own could not be read), uvicorn's default headers
    (``date``, ``server``) and ``connection: close``. These were plain text without a request id, the one exception to
    "errors are always JSON" a gateway had to parse apart (tester).

    Args:
        status: 400, 408 or 503; ``message`` ASCII text naming the cause and the setting (``HERALD_*``) that bounds it;
            ``retry_after_s`` the ``Retry-After`` header in seconds, or None for none.
        openai: the request's path is an OpenAI-compatible route (:data:`~herald_service.api.errors.OPENAI_PATHS`):
            the body also carries OpenAI's ``param`` (null) and ``code`` (the type), and a 400's type is OpenAI's
            ``invalid_request_error``, as the routes' own errors there (:func:`~herald_service.api.errors.error_response`;
            a malformed request to /v1/moderations was the one 400 there an OpenAI client read ``code`` None from).
    """
    error_type = LAYER_ERROR_TYPES[status]
    error: dict[str, Any] = {"type": error_type, "message": message}
    if openai:
        error = {**error, "param": None, "code": error_type}
        if status == 400:
            error["type"] = "invalid_request_error"
    body = json.dumps({"error": error}, separators=(",", ":")).encode("ascii")  # compact, as the routes' JSONResponse writes it
    head = [STATUS_LINE[status], *(b"%s: %s\r\n" % (name, value) for name, value in default_headers),
            b"content-type: application/json\r\n", b"x-request-id: %s\r\n" % uuid.uuid4().hex.encode("ascii")]
    if retry_after_s is not None:
        head.append(b"retry-after: %d\r\n" % retry_after_s)
    return b"".join([*head, b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n", body])


class _ClosingAfterAnswer:
    """The transport a request's cycle writes its answer to: the connection's own, but for ``close``, which calls
    ``close`` (the protocol's :meth:`BoundedHeadersProtocol._close_after_answer`): uvicorn closes a connection after
    an answer with ``Connection: close`` from the cycle, with no hook of its own."""

    def __init__(self, transport: asyncio.Transport, close: Callable[[], None]) -> None:
        self._transport = transport
        self.close = close

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def header_bounded_protocol(header_timeout_s: float, refused: Callable[[str], None] | None = None,
                            max_connections: int | None = None, health_port: int | None = None,
                            health_connections: int = HEALTH_PORT_CONNECTIONS) -> type[asyncio.Protocol] | str:
    """The ``http`` argument of ``uvicorn.Config`` for ``herald serve``: :class:`BoundedHeadersProtocol` with
    ``header_timeout_s`` (seconds from a request's first byte to the end of its headers) and ``max_connections``
    (open connections at once; None: unbounded) where httptools is installed, else ``"h11"`` (header size bound only,
    and no connection bound on either port). Either reads the size bound from the config's
    ``h11_max_incomplete_event_size`` (bytes; ``HERALD_MAX_HEADER_BYTES``). ``refused`` is called with one of
    :data:`REFUSAL_REASONS` for each such answer (``herald serve`` counts them in ``herald_rejected_requests_total``:
    they reach no route, so the request metrics never saw them, breaker pass).

    ``health_port``: the TCP port of the operations listener (``HERALD_HEALTH_PORT``; None: none), whose connections
    ``max_connections`` does not count and which are bounded by ``health_connections`` open at once instead (past it
    the oldest idle one is closed). Each call makes a new class, whose health-port connections are that server's own:
    one call per server."""
    if HttpToolsProtocol is None:
        return "h11"
    return type("BoundedHeadersProtocol", (BoundedHeadersProtocol,),
                {"header_timeout_s": header_timeout_s, "max_connections": max_connections,
                 "health_port": health_port, "health_connections": health_connections, "_on_health_port": {},
                 "refused": staticmethod(refused or (lambda reason: None))})


if HttpToolsProtocol is not None:

    class BoundedHeadersProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with a request's line and headers bounded by ``config.
        h11_max_incomplete_event_size`` bytes and :attr:`header_timeout_s` seconds.

        Size: the request line and every header (name, value and separators, as the parser hands them over) are
        counted, and past the bound the parser stops and uvicorn answers 400 (``connection: close``, this module's
        message); headers still incomplete are bounded by the bytes read so far, so the parser's buffer cannot grow
        past the bound by more than one transport read. Time: headers not complete within :attr:`header_timeout_s`
        of the request's first byte are answered 408 and the connection is closed (``HERALD_HEADER_TIMEOUT_S``; the
        keep-alive timeout covers an idle connection, and any byte used to cancel it for good).

        Pipelining: a request's header clock starts at its first byte only when every request before it on the
        connection has been answered, else when the last of them is; and a 400 for its headers (too large, or not
        HTTP) or for its body's framing (a bad chunk size, a Transfer-Encoding the parser refuses) is written after
        those answers. Breaker pass: the next request's clock ran while the current one was computed, and its 408 (or
        400) closed the connection before that answer was written (counted 499); bytes of the next request that came
        in the same read as the end of the current one never started a clock at all, and such a connection was held
        until keep-alive (75 s) with no answer; a bad chunked body pipelined behind a request in work had its 400
        written at once, and the answer in work was lost.

        A request refused 400 for its body's framing is answered by that 400 alone and counted once, as
        ``invalid_http``: its app is not started if it has not begun (a queued one leaves the pipeline), and one that
        runs hears that its client left while ``extensions["herald.refused"]()`` says the 400 answered it, so
        :class:`~herald_service.api.middleware.RequestMetrics` does not count it 499 too (breaker pass: counted
        twice). One whose app has begun its own answer (a 501 for its Transfer-Encoding) keeps that answer, and the
        connection is closed.

        Idle: a new connection that sends nothing is closed, without an answer, after the keep-alive timeout.

        Open connections: one that would make more than :attr:`max_connections` open at once is answered 503 (the
        JSON error body, ``Retry-After: 1``, ``connection: close``) and closed as soon as it is accepted, without
        reading its request. Unbounded, a flood of connections was bounded only by the process's file descriptors,
        past which the event loop stops accepting (every client then hangs, the gateway's included) and the
        readiness probe's own connection fails.

        Health port: a connection accepted on :attr:`health_port` (told by the accepting socket's local port, as
        uvicorn gives it in the scope's ``server``) is not counted toward :attr:`max_connections` and never refused
        by it, so Kubernetes' probes and Prometheus' scrapes get through while a flood holds the main port's bound (on
        one port they got 503 and the liveness probe restarted a healthy pod: tester). Those connections have their
        own bound, :attr:`health_connections` open at once, so that port cannot be used to exhaust file descriptors
        either. Past it the newcomer is accepted and room is made by closing the oldest health-port connection with no
        request in progress (nothing received since its last answer, or nothing at all), else the oldest; each such
        close is counted as a ``connections`` refusal. Refusing the newcomer instead (a 503, as the main port does)
        let one client holding 64 idle connections answer every liveness probe 503 (tester): the restart of healthy
        pods the port exists to prevent. Health-port connections are also closed after
        :data:`~herald_service.config.HEALTH_PORT_IDLE_S` idle (that port's keep-alive, and the timeout of one that
        sends nothing), so held slots free themselves. Which paths that port serves is the app's concern
        (:class:`~herald_service.api.middleware.OperationsPortOnly`).

        Scope: ``extensions["herald.connection_closed"]`` is a callable that says whether the connection is closing
        or closed, for :class:`~herald_service.api.middleware.RequestMetrics` to tell an answer that could not be
        written because the connection is gone from a server error.
        """

        header_timeout_s: float | None = None
        max_connections: int | None = None
        health_port: int | None = None
        health_connections: int = HEALTH_PORT_CONNECTIONS
        # this server's open health-port connections in order of arrival (a dict used as an ordered set, one per
        # server's class), for closing the oldest idle one when a new one would pass health_connections
        _on_health_port: dict[Any, None] = {}
        refused: Callable[[str], None] = staticmethod(lambda reason: None)
        # loop time of the last "connections full" warning of each bound (its name), for all connections: a flood on
        # one port does not hide the other's warning
        _full_warned_at: dict[str, float] = {}
        _lingering = 0  # refused connections lingering in this process (answered 503, not yet closed)

        def __init__(self, config: Config, server_state: Any, app_state: dict[str, Any],
                     _loop: asyncio.AbstractEventLoop | None = None) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self.parser = ParserKeepingItsError(self.parser)
            self._header_limit: int | None = config.h11_max_incomplete_event_size
            self._in_headers, self._read_bytes, self._header_bytes, self._too_large = True, 0, 0, False
            self._unserved: str | None = None  # why the request being read is not served (UnservedRequest)
            self._header_timer: asyncio.TimerHandle | None = None
            self._headers_begun = False  # the request being read has sent its first byte, not yet its last header
            self._deferred_400: str | None = None  # the 400 to write once the answers before it are out
            self._openai_400 = False  # that 400 answers a request to an OpenAI-compatible route (layer_answer)
            self._running: RequestResponseCycle | None = None  # the request whose app runs (self.cycle: the last read)
            self._refused: RequestResponseCycle | None = None  # the request a body-framing 400 answers
            self._discarding = False  # lingering (_linger): answered, closing, what the client sends is not read
            self._lingers = False  # ... and counted in _lingering until its connection is lost
            self._idle = True  # nothing received since the last answer, or nothing at all (health-port eviction)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            local_port = self.server[1] if self.server is not None else None  # the accepting socket's (uvicorn's)
            if self.health_port is not None and local_port == self.health_port:
                self.timeout_keep_alive = HEALTH_PORT_IDLE_S  # this port's keep-alive and silent timeout
                if len(self._on_health_port) >= self.health_connections:
                    self._close_oldest_health_connection()
                self._on_health_port[self] = None
            elif (self.max_connections is not None
                  and len(self.connections) - len(self._on_health_port) > self.max_connections):
                self._refuse_connection()
                return
            # A connection that never sends a byte is closed after the keep-alive timeout (HERALD_KEEP_ALIVE_S, or
            # HEALTH_PORT_IDLE_S on the health port), as an idle one between requests is: uvicorn armed that timer
            # only after an answer and the header clock starts at the first byte, so a silent connection was held for
            # good (a session's check: open after 5 s with both set to 1 s), and enough of them use up the process's
            # file descriptors. The first byte cancels it.
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

        def _answer_pending(self) -> bool:
            """Whether a request read before the one being read (or refused) is still unanswered."""
            return any(cycle is not None and cycle is not self._refused and not cycle.response_complete
                       for cycle in (self.cycle, self._running, *(queued for queued, _ in self.pipeline)))

        def data_received(self, data: bytes) -> None:
            if self._discarding:
                return  # answered and closing (_linger)
            self._idle = False
            if self._deferred_400 is not None:
                return  # the connection ends with that 400; what the client sends after the bad request is not read
            if self._in_headers:
                self._read_bytes += len(data)
                if not self._answer_pending():
                    self._arm_header_timer()
            super().data_received(data)
            if (self._in_headers and self._header_limit is not None and self._read_bytes > self._header_limit
                    and not self.transport.is_closing()):  # still incomplete after more bytes than the bound
                self._too_large = True
                self.send_400_response("")

        def _count(self, n: int) -> None:
            self._header_bytes += n
            if self._header_limit is not None and self._header_bytes > self._header_limit:
                self._too_large = True
                raise HeadersTooLarge

        def on_message_begin(self) -> None:
            self._header_bytes, self._too_large, self._unserved = 0, False, None
            super().on_message_begin()
            self.scope["extensions"] = {**self.scope.get("extensions", {}),
                                        "herald.connection_closed": self.transport.is_closing,
                                        "herald.refused": self._refuses(self.scope)}
            # the request's first byte, which may come in the same read as the end of the request before it
            self._headers_begun = True
            if not self._answer_pending():
                self._arm_header_timer()

        def on_url(self, url: bytes) -> None:
            super().on_url(url)  # kept before the count refuses it, for _target_path (at most one read's bytes more)
            self._count(len(url))

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value) + 4)  # "name: value\r\n"
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._unserved = http_version_problem(self.parser.get_http_version(), self.headers)
            if self._unserved is None and self.parser.get_method() == b"CONNECT":  # its authority-form target
                # failed uvicorn's URL parsing inside this callback: "User callback error" (tester finding)
                self._unserved = "CONNECT is not served: Herald is not a proxy (RFC 9110 section 9.3.6)."
            if self._unserved is not None:
                raise UnservedRequest  # answered by send_400_response, as a request whose headers are still being read
            self._end_headers()
            super().on_headers_complete()
            if self.cycle is not None and self.cycle.transport is self.transport:
                self.cycle.transport = _ClosingAfterAnswer(self.transport, self._close_after_answer)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_headers, self._read_bytes = True, 0

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
            self._running = cycle

            async def unless_refused(scope: Any, receive: Any, send: Any) -> None:
                if cycle is not self._refused:  # a 400 for its body came in the read that started it
                    await app(scope, receive, send)

            super()._start_asgi_task(cycle, unless_refused)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing() or self._discarding or self._answer_pending():
                return
            if self._deferred_400 is not None:
                self._write_400(self._deferred_400)
            elif self._headers_begun or self._read_bytes:  # the next request's turn: its clock starts now
                self._arm_header_timer()
            else:
                self._idle = True

        def connection_lost(self, exc: Exception | None) -> None:
            self._on_health_port.pop(self, None)
            if self._lingers:
                self._lingers = False
                BoundedHeadersProtocol._lingering -= 1
            self._end_headers()
            super().connection_lost(exc)
            # uvicorn marks only the last request read as disconnected; with a pipelined request read after it, the
            # request being computed never heard that its client left, and its answer was written to the closed
            # transport (breaker pass: an ERROR traceback, "unable to perform operation on <TCPTransport
            # closed=True>", and a 200 counted for an answer never delivered)
            for cycle in (self._running, *(queued for queued, _ in self.pipeline)):
                if cycle is not None and not cycle.response_complete:
                    cycle.disconnected = True
                    cycle.message_event.set()

        def _warn_full(self, bound: str, what_happens: str, limit: int, reason: str = "connections") -> None:
            """Count one more ``reason`` refusal and log that ``limit`` connections are open under ``bound`` (what
            then happens to new ones: ``what_happens``), at most once a minute per bound: not a line per connection of
            a flood, and a flood on one port does not hide the other's line."""
            self.refused(reason)
            warned_at = BoundedHeadersProtocol._full_warned_at.get(bound, float("-inf"))
            if self.loop.time() - warned_at >= 60.0:
                BoundedHeadersProtocol._full_warned_at[bound] = self.loop.time()
                log.warning("%d connections open (%s): %s; herald_rejected_requests_total{reason=\"%s\"}"
                            " counts them", limit, bound, what_happens, reason)

        def _refuse_connection(self) -> None:
            """Answer a connection past :attr:`max_connections` 503 before reading it, and close it."""
            self._warn_full("HERALD_MAX_CONNECTIONS", "new ones are answered 503 and closed", self.max_connections)
            self.transport.write(layer_answer(503, (
                f"Too many open connections (limit {self.max_connections}, HERALD_MAX_CONNECTIONS): retry shortly,"
                " or reuse a connection."), self.server_state.default_headers, retry_after_s=1))
            self._linger(REFUSAL_LINGER_S)

        def _close_after_answer(self) -> None:
            """Close the connection once an answer with ``Connection: close`` is written (uvicorn's close), lingering
            (:meth:`_linger`) if the request's body is still being read: an answer a middleware gave before reading
            it (:class:`~herald_service.api.middleware.CloseUnreadBodies`)."""
            if self._in_headers or self.transport.is_closing():  # the request read to its end, or already closing
                self.transport.close()
            else:
                self.pipeline.clear()  # nothing more is read from this connection, so nothing more is answered
                self._linger(UNREAD_BODY_LINGER_S)

        def _linger(self, seconds: float) -> None:
            """A lingering close of an answered connection whose client may still be sending: closed at once with
            bytes unread, the kernel resets the connection and the client may read the reset instead of the answer.
            So the write side ends here (after the answer is flushed), what the client sends is discarded
            (:meth:`data_received`), and the connection closes at the client's end of stream or after ``seconds``;
            at most :data:`LINGERING_LIMIT` at once."""
            self._discarding = True
            # no longer counted as open: closing connections counted for their second, and a stream of connects past
            # the bound kept every client out with no served connection open (tester)
            self.connections.discard(self)
            if BoundedHeadersProtocol._lingering >= LINGERING_LIMIT:
                # each lingering connection holds a descriptor the bound does not count: past this many, close at
                # once (a client that sent its request first may read a reset), or a burst of connects used up the
                # descriptors the bound leaves spare and further clients were reset with no answer (tester)
                self.transport.close()
                return
            BoundedHeadersProtocol._lingering += 1
            self._lingers = True
            self.flow.resume_reading()  # uvicorn pauses reading at its body buffer's high-water mark
            self.transport.write_eof()
            self.loop.call_later(seconds, self.transport.close)

        def _close_oldest_health_connection(self) -> None:
            """Make room on the health port, whose :attr:`health_connections` are all open: close the oldest of them
            that is idle (:attr:`_idle`, or already closing), else the oldest, and count it as a
            ``health_connections`` refusal: not ``connections``, which counts the 503s of the main port and which
            HeraldConnectionsRefused reads as clients turned away (idle probe connections closed there fired it:
            tester). It stops being counted as open at once (as a refused connection does), not at its close."""
            oldest = next(iter(self._on_health_port))
            victim = next((conn for conn in self._on_health_port if conn._idle or conn.transport.is_closing()), oldest)
            self._warn_full("on the health port, HERALD_HEALTH_PORT",
                            "for each new one the oldest idle one (else the oldest) is closed", self.health_connections,
                            "health_connections")
            del self._on_health_port[victim]
            self.connections.discard(victim)
            victim.transport.close()

        def _arm_header_timer(self) -> None:
            if self.header_timeout_s is not None and self._header_timer is None:
                self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)

        def _unsupported_upgrade_warning(self) -> None:
            """A request that asks to switch protocols (``Upgrade: h2c`` from ``curl --http2``, or a WebSocket) is
            answered over HTTP/1.1 as if it had not asked, as RFC 9110 section 7.8 allows; uvicorn logged two
            warnings for it, the second telling the operator to install a WebSocket library Herald has no use for
            (tester). Logged at debug level instead."""
            log.debug("a request asked to switch protocols (Upgrade header); answered over HTTP/1.1")

        def _end_headers(self) -> None:
            self._in_headers = self._headers_begun = False
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def send_400_response(self, msg: str) -> None:
            if self._deferred_400 is not None or self.transport.is_closing():
                return
            if not self._in_headers and self.cycle is not None:  # the body of the request last read is malformed
                if self.cycle.response_started:  # its app's own answer (counted there) is out, or part of it
                    self.transport.close()
                    return
                self._refuse_last_read()
            self.refused("header_size" if self._too_large else "invalid_http")
            if self._too_large:
                log.warning("request line and headers over %d bytes: answered 400", self._header_limit)
                msg = f"Request line and headers exceed {self._header_limit} bytes (HERALD_MAX_HEADER_BYTES)."
            elif self._in_headers and self._unserved is not None:
                msg = self._unserved
            elif self.parser.error:  # llhttp's own reason (ParserKeepingItsError)
                msg = f"Invalid HTTP request received: {PARSER_REASONS.get(self.parser.error, self.parser.error)}."
            self._openai_400 = self._target_path() in OPENAI_PATHS
            if self._answer_pending():
                # written after the answers to the requests before it (on_response_complete); uvicorn writes a
                # parser error's 400 at once and closes, which dropped those answers (breaker pass)
                self._deferred_400 = msg
                self._end_headers()
                self.flow.pause_reading()
                return
            self._write_400(msg)

        def _write_400(self, msg: str) -> None:
            """Write the 400 (:func:`layer_answer`) and close: uvicorn's own send_400_response wrote plain text."""
            self.transport.write(layer_answer(400, msg, self.server_state.default_headers, openai=self._openai_400))
            self.transport.close()

        def _target_path(self) -> str | None:
            """The path of the request a 400 or 408 answers: the parsed one of a request whose headers were read (its
            body is malformed), else read from its request target as far as it came (uvicorn's ``self.url``, bytes:
            origin form ``/v1/moderations?x`` or absolute form ``http://host/v1/moderations``); None if no request has
            begun since the last answer or its target is not a URL (a breaker's ``http://[/v1/moderations`` raised in
            urlsplit, which left the 400 unwritten and the 408's timer dead, the connection held for good)."""
            if not self._in_headers and self.cycle is not None:
                return self.cycle.scope.get("path")
            if not self._headers_begun:  # self.url is the last request's (blank lines before the next are skipped)
                return None
            target = bytes(getattr(self, "url", b"") or b"").decode("latin-1")
            try:
                return unquote(urlsplit(target).path) if target else None
            except ValueError:  # "http://[/x": urlsplit's "Invalid IPv6 URL" ended the 400 and the 408 unwritten
                return None

        def _refuses(self, scope: dict[str, Any]) -> Callable[[], bool]:
            """The ``herald.refused`` extension of the request whose ``scope`` this is: whether a body-framing 400
            answered it (it is :attr:`_refused`)."""
            return lambda: self._refused is not None and self._refused.scope is scope

        def _refuse_last_read(self) -> None:
            """Make the 400 the only answer of the request last read (``self.cycle``): out of the pipeline if queued,
            its app not started if it has not begun, told that its client left if it runs, and marked as answered
            by the HTTP layer for :class:`~herald_service.api.middleware.RequestMetrics`."""
            cycle = self._refused = self.cycle
            self.pipeline = type(self.pipeline)(entry for entry in self.pipeline if entry[0] is not cycle)
            cycle.disconnected = True
            cycle.message_event.set()

        def _headers_timed_out(self) -> None:
            self._header_timer = None
            if not self._in_headers or self._answer_pending() or self.transport.is_closing():
                return
            log.warning("request headers not complete within %g s: answered 408", self.header_timeout_s)
            self.refused("header_timeout")
            msg = f"Request headers not complete within {self.header_timeout_s:g} s (HERALD_HEADER_TIMEOUT_S)."
            openai = self._target_path() in OPENAI_PATHS  # as far as the request target came
            self.transport.write(layer_answer(408, msg, self.server_state.default_headers, openai=openai))
            self.transport.close()

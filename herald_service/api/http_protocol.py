"""The HTTP/1.1 protocol ``herald serve`` runs under uvicorn: httptools' parser, with the size of a request's line and
headers bounded as uvicorn's h11 parser bounds it.

uvicorn bounds request headers only with h11 (``h11_max_incomplete_event_size``); with httptools, its faster parser,
it buffers headers of any size, and Herald checks the API key only once they are complete: a tester's 200 headers of
1 MB each grew the server by 400 MB. h11 costs several times the host CPU per request (docs/PERFORMANCE.md), which
the GPU service's saturation is bound by, so Herald keeps httptools and adds the bound here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools not installed: uvicorn's h11 parser bounds headers by the same setting
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def header_bounded_protocol() -> type[asyncio.Protocol] | str:
    """The ``http`` argument of ``uvicorn.Config`` for ``herald serve``: :class:`BoundedHeadersProtocol` where
    httptools is installed, else ``"h11"``; either reads its bound from the config's ``h11_max_incomplete_event_size``
    (bytes; ``HERALD_MAX_HEADER_BYTES``)."""
    return "h11" if HttpToolsProtocol is None else BoundedHeadersProtocol


if HttpToolsProtocol is not None:

    class BoundedHeadersProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol that answers 400 and closes the connection once a request's line and headers
        pass ``config.h11_max_incomplete_event_size`` bytes before they are complete.

        Bytes are counted per read between the end of one request (or the connection's start) and the end of the next
        one's headers. A read that completes the headers is not checked, and the first read after a pipelined request
        is not counted, so the bound holds to within one transport read (at most 256 KiB under uvloop): the parser's
        buffer cannot grow past it. The 400 is uvicorn's own (``connection: close``, plain text), as h11's over-limit
        answer is.
        """

        def __init__(self, config: Config, server_state: Any, app_state: dict[str, Any],
                     _loop: asyncio.AbstractEventLoop | None = None) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self._header_limit: int | None = config.h11_max_incomplete_event_size
            self._header_bytes = 0
            self._in_headers = True

        def data_received(self, data: bytes) -> None:
            if self._in_headers:
                self._header_bytes += len(data)
            super().data_received(data)
            if (self._in_headers and self._header_limit is not None and self._header_bytes > self._header_limit
                    and not self.transport.is_closing()):
                self.logger.warning("request line and headers over %d bytes: answered 400", self._header_limit)
                self.send_400_response(f"Request line and headers exceed {self._header_limit} bytes (HERALD_MAX_HEADER_BYTES).")

        def on_headers_complete(self) -> None:
            self._in_headers = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_headers, self._header_bytes = True, 0

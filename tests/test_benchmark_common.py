"""benchmarks/common.py: a benchmark stopped by SIGTERM stops the ``herald serve`` processes it started."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import subprocess, sys, time
    from benchmarks.common import exit_on_sigterm
    if sys.argv[1] == "handled":
        exit_on_sigterm()
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # stands in for herald serve
    try:  # the pid is printed inside: a SIGTERM right after it, before the try, skipped the cleanup (a flaky run)
        print(server.pid, flush=True)
        time.sleep(120)
    finally:  # what HeraldServer.__exit__ and the other benchmarks' cleanups do
        server.terminate()
        server.wait(10)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("mode", ["handled", "default"])
def test_sigterm_runs_the_benchmarks_cleanup_only_with_exit_on_sigterm(mode):
    bench = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    server = int(bench.stdout.readline())
    try:
        bench.send_signal(signal.SIGTERM)
        code = bench.wait(30)
        if mode == "handled":
            assert code == 143 and not _alive(server)
        else:  # the default action: the benchmark dies at once and its server keeps running
            assert code == -signal.SIGTERM and _alive(server)
    finally:
        if _alive(server):
            os.kill(server, signal.SIGKILL)

"""Host cost: server CPU seconds per request of the HTTP path, on the weight-free fake backend, before and after.

Why: on the GPU the event loop's Python (routing, validation, JSON, metrics, future hand-off) shares the GIL with
the worker thread that launches kernels, so every host microsecond per request comes out of saturation throughput.
The fake backend (``HERALD_FAKE_BACKEND=true``) has no device, so what is left is exactly that host cost (plus the
fake model's and the probe's own small CPU work, which is the same code in both builds).

Each build is a real ``python -m herald_service serve`` process; ``--before REF`` exports ``herald_service/`` at a git
ref into a temporary folder and serves it from there, next to the working tree's. A load generator in another
process (:func:`benchmarks.common.post_load`, the loop :class:`benchmarks.common.LoadClient` runs) sends every request of a round; the server's CPU time is
read from ``/proc`` (psutil) before and after. Rounds alternate the builds (before, after, before, after...) so load
from other jobs on a shared machine hits both alike; the table gives the median per build and the after/before ratio.

Run: ``python -m benchmarks.host_cost --before HEAD~3`` (writes ``benchmarks/results/host_cost_cpu.json``). Where
the git history does not travel (the GPU machine), export the ref first and pass the folder:
``mkdir -p .hostcost_before && git archive REF herald_service | tar -x -C .hostcost_before``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from benchmarks.common import exit_on_sigterm, head_commit, post_load, require_bench_extra

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"
CARRIED_DATA = REPO / ".benchcarry" / "data"  # the same prompts, carried to the GPU machine (see docs/PERFORMANCE.md)

# endpoint name -> (path, body builder)
ENDPOINTS = {
    "classify (trajectory)": ("/classify", lambda text: {"input": text}),
    "classify (no trajectory)": ("/classify", lambda text: {"input": text, "return_trajectory": False}),
    "v1/moderations": ("/v1/moderations", lambda text: {"input": text}),
}


def texts(n: int) -> list[str]:
    """``n`` prompts of the data mix (cut to 2,000 characters), or a fixed filler when the data is absent."""
    out: list[str] = []
    for file in sorted((DATA if DATA.is_dir() else CARRIED_DATA).glob("*.jsonl")):
        for line in file.open(encoding="utf-8"):
            if line.strip():
                out.append(json.loads(line)["prompt"][:2000])
    if not out:
        out = [f"How do I bake bread number {i}?" for i in range(100)]
    return [out[(i * 7919) % len(out)] for i in range(n)]


# -- the servers under test ----------------------------------------------------------------------------------------
class Build:
    """One ``herald serve`` process on the fake backend, serving ``herald_service`` from ``source`` (a folder)."""

    def __init__(self, name: str, source: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.name = name
        self.url = f"http://127.0.0.1:{self.port}"
        path = os.pathsep.join(p for p in (str(source), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "HERALD_FAKE_BACKEND": "true", "HERALD_PORT": str(self.port),
               "HERALD_HOST": "127.0.0.1", "HERALD_QUEUE_CAPACITY": "4096", "HERALD_MAX_BATCH_SIZE": "256"}
        self.proc = subprocess.Popen([sys.executable, "-m", "herald_service", "serve"], cwd=source, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.source = source

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(self.url + "/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} server not ready in {timeout_s} s")

    def cpu(self) -> tuple[float, float]:
        """(whole process, event-loop thread) CPU seconds, user + system, from /proc."""
        import psutil

        process = psutil.Process(self.proc.pid)
        total = process.cpu_times()
        main = next((t for t in process.threads() if t.id == self.proc.pid), None)
        return total.user + total.system, (main.user_time + main.system_time) if main else float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def export(ref: str, into: Path) -> Path:
    """``herald_service/`` as it is at git ``ref``, unpacked under ``into``; a folder that holds ``herald_service/``
    (an export carried to a machine without the git history) is used as it is."""
    if (Path(ref) / "herald_service").is_dir():
        return Path(ref).resolve()
    archive = subprocess.run(["git", "archive", ref, "herald_service"], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def each_build(before: str | None, start: Callable[[str, Path], Any]) -> Iterator[Any]:
    """The servers of a before/after benchmark, one at a time (the other must not share the CPU with the one
    measured): ``start("before", <herald_service/ exported at before>)`` if ``before`` is given, then
    ``start("after", REPO)``; each yielded once ready (its ``wait_ready()``) and stopped (``stop()``) when the loop
    moves on or leaves."""
    with tempfile.TemporaryDirectory(prefix="herald-before-") as tmp:
        sources = ([("before", export(before, Path(tmp)))] if before else []) + [("after", REPO)]
        for name, source in sources:
            server = start(name, source)
            try:
                server.wait_ready()
                yield server
            finally:
                server.stop()


def working_tree() -> str:
    """What the 'after' build served: ``working tree at <commit>``, with ``(uncommitted changes)`` where
    ``herald_service/`` differs from it."""
    commit = head_commit()
    dirty = subprocess.run(["git", "status", "--porcelain", "herald_service"], cwd=REPO, capture_output=True, text=True)
    return f"working tree at {commit}" + (" (uncommitted changes)" if dirty.stdout.strip() else "")


# -- measurement ---------------------------------------------------------------------------------------------------
def measure(pool: concurrent.futures.Executor, build: Build, endpoint: str, prompts: list[str], concurrency: int) -> dict:
    path, body = ENDPOINTS[endpoint]
    bodies = [body(t) for t in prompts]
    before_total, before_main = build.cpu()
    started, ended, _latencies, statuses, _finished = pool.submit(post_load, build.url, path, bodies, concurrency).result()
    seconds = ended - started
    after_total, after_main = build.cpu()
    n = len(bodies)
    return {
        "cpu_us_per_request": (after_total - before_total) / n * 1e6,
        "loop_thread_cpu_us_per_request": (after_main - before_main) / n * 1e6,
        "requests_per_s": n / seconds,
        "statuses": statuses,
    }


def run(builds: list[Build], requests: int, rounds: int, concurrencies: list[int]) -> dict:
    """Every (endpoint, requests in flight) case on every build, ``rounds`` times, the builds' order alternating."""
    prompts = texts(requests)
    cases = [(endpoint, c) for c in concurrencies for endpoint in ENDPOINTS]
    samples: dict = {b.name: {f"{e} @ {c}": [] for e, c in cases} for b in builds}
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        for build in builds:  # warm every route and the client (not measured)
            for endpoint, c in cases:
                measure(pool, build, endpoint, prompts[:200], c)
        for r in range(rounds):
            for endpoint, c in cases:
                for build in builds if r % 2 == 0 else builds[::-1]:
                    sample = measure(pool, build, endpoint, prompts, c)
                    bad = {k: v for k, v in sample["statuses"].items() if k != 200}
                    if bad:
                        raise RuntimeError(f"{build.name} {endpoint}: non-200 answers {bad}")
                    samples[build.name][f"{endpoint} @ {c}"].append(sample)
            print(f"round {r + 1}/{rounds} done", flush=True)
    summary = {}
    for endpoint, c in cases:
        key = f"{endpoint} @ {c}"
        row: dict = {"endpoint": endpoint, "in_flight": c}
        for build in builds:
            s = samples[build.name][key]
            row[f"{build.name}_cpu_us"] = statistics.median(x["cpu_us_per_request"] for x in s)
            row[f"{build.name}_loop_us"] = statistics.median(x["loop_thread_cpu_us_per_request"] for x in s)
            row[f"{build.name}_req_per_s"] = statistics.median(x["requests_per_s"] for x in s)
        if len(builds) == 2:
            a, b = builds[0].name, builds[1].name
            # Per round, the pair measured back to back: their median is the ratio, their spread its noise.
            per_round = [y["cpu_us_per_request"] / x["cpu_us_per_request"] for x, y in zip(samples[a][key], samples[b][key])]
            row["cpu_ratio"] = statistics.median(per_round)
            row["cpu_ratio_min"], row["cpu_ratio_max"] = min(per_round), max(per_round)
            row["cpu_ratio_per_round"] = per_round
        summary[key] = row
    return {"summary": summary, "samples": samples}


def print_table(summary: dict) -> None:
    rows = [{k: v for k, v in row.items() if k != "cpu_ratio_per_round"} for row in summary.values()]
    keys = list(rows[0])
    cells = [[f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print("\nserver CPU us per request (median of rounds; ratio: median of the rounds' after/before; fake backend)")
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git ref (or a folder holding herald_service/) of the 'before' build; omit: the working tree alone")
    parser.add_argument("--requests", type=int, default=1000, help="requests per endpoint per round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", default="1,32", help="requests in flight, comma-separated: 1 fixes the batch"
                        " size at one (the steadiest per-request figure), 32 is saturation")
    parser.add_argument("--out", type=Path, default=RESULTS / "host_cost_cpu.json")
    args = parser.parse_args()
    exit_on_sigterm()
    require_bench_extra()
    with tempfile.TemporaryDirectory(prefix="herald-before-") as tmp:
        sources = ([("before", export(args.before, Path(tmp)))] if args.before else []) + [("after", REPO)]
        builds = [Build(name, source) for name, source in sources]
        try:
            for build in builds:
                build.wait_ready()
            result = run(builds, args.requests, args.rounds, [int(c) for c in args.concurrency.split(",")])
        finally:
            for build in builds:
                build.stop()
    payload = {
        "benchmark": "host_cost",
        "backend": "fake (HERALD_FAKE_BACKEND=true)",
        "before_ref": args.before,
        "after": working_tree(),
        "requests_per_round": args.requests,
        "rounds": args.rounds,
        "in_flight": args.concurrency,
        "hardware": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "load_average_end": os.getloadavg()},
        **result,
    }
    print_table(result["summary"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

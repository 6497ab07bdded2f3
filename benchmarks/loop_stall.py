"""Event-loop stall: how long a health check waits while the server reads one large request body, before and after.

Why: a request body is parsed, checked and validated on its way to a route; whatever of that runs on the event loop
delays every other request of the process, the health checks included (a readiness probe that waits past its
timeout takes the pod out of its Service). The fuzz tester of 2026-12-05 found 12 MB bodies of many small JSON
objects that held the loop for 2-4 s each, under the body limit: pydantic validated them on the loop (1.8 s for
458,000 valid content parts) and, when invalid, listed every error (1.0 s more). Since then a body over
``THREAD_PARSE_BYTES`` is validated in its parsing thread, and request lists stop at their first bad item. Its
re-tester found bodies of millions of arrays, whose parse holds the GIL in json's C parser even in a thread (0.8 s):
a body that opens more arrays and objects than ``json_body.container_limit`` is now refused before its parse.

How: real ``herald serve`` processes on the fake backend (:class:`benchmarks.host_cost.Build`), ``--before REF``
serving ``herald_service/`` exported at that ref beside the working tree's, one at a time. For each body of
:data:`BODIES` and round, a prober sends ``GET /health/live`` one after another (a new one 10 ms after each answer)
while one client posts the body to ``/classify``; the longest health-check time during the post is the stall. The
same prober on the idle server gives each build's own baseline. Reported: per build and body, the median over rounds
of the longest health check and of the post's own time, and the stall over the idle baseline; with ``--before``,
after over before.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.loop_stall --before <ref>`` (about 2 minutes on a 2-core CPU);
writes ``benchmarks/results/loop_stall_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path

import httpx

from benchmarks.common import RESULTS, exit_on_sigterm, print_table, require_bench_extra
from benchmarks.host_cost import Build, each_build, working_tree


def _parts(text: object) -> bytes:
    conversation = [{"role": "user", "content": [{"type": "text", "text": text}] * 64}] * 28
    return json.dumps({"messages": [conversation] * 256}, separators=(",", ":")).encode()


def _function_call_lists() -> bytes:
    lists = {f"k{i}": [[[] for _ in range(255)] for _ in range(255)] for i in range(60)}
    message = {"role": "assistant", "content": None, "function_call": lists}
    return json.dumps({"messages": [message, {"role": "user", "content": "hi"}]}, separators=(",", ":")).encode()


BODIES = {
    "parts_valid": _parts(""),  # 11.6 MB, 458,752 content parts that each fit the schema (refused after it: 413)
    "parts_invalid": _parts(1),  # the same parts with a number for text (422)
    "empty_lists": b'{"input":[' + b",".join([b"[]"] * 4_000_000) + b"]}",  # 12 MB, refused by the list limit (413)
    "function_call_lists": _function_call_lists(),  # 11.7 MB, 3.9 million lists in a field not read (was 200)
    "one_string": json.dumps({"input": "a" * 11_000_000}).encode(),  # control: 11 MB in one value (413, max_chars)
}
"""Bodies of about 11-12 MB, under the body limit of the builds' settings (HERALD_MAX_BATCH_SIZE 256 there); the
first two from the fuzz tester, the next two from the re-tester of 2026-12-05."""

PROBE_GAP_S = 0.010


def _probe(url: str, stop: threading.Event, times: list[float]) -> None:
    with httpx.Client(timeout=120.0) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get(url + "/health/live")
            times.append(time.perf_counter() - started)
            time.sleep(PROBE_GAP_S)


def idle_health_s(url: str, seconds: float = 2.0) -> float:
    """Median seconds of a health check on the idle server."""
    stop, times = threading.Event(), []
    prober = threading.Thread(target=_probe, args=(url, stop, times))
    prober.start()
    time.sleep(seconds)
    stop.set()
    prober.join()
    return statistics.median(times)


def one_post(url: str, body: bytes) -> dict:
    """Post ``body`` once while probing: the longest health check during the post (seconds), the post's status and
    seconds."""
    stop, times = threading.Event(), []
    prober = threading.Thread(target=_probe, args=(url, stop, times))
    prober.start()
    time.sleep(0.1)
    before = len(times)
    started = time.perf_counter()
    with httpx.Client(timeout=120.0) as client:
        status = client.post(url + "/classify", content=body, headers={"content-type": "application/json"}).status_code
    post_s = time.perf_counter() - started
    time.sleep(0.1)  # the check that was waiting when the answer left
    stop.set()
    prober.join()
    return {"status": status, "post_s": post_s, "longest_health_s": max(times[before:], default=float("nan"))}


def run(build: Build, rounds: int, rows: list[dict], raw: dict) -> None:
    """Measure every body of :data:`BODIES` on ``build``: a summary row each appended to ``rows``, the rounds to
    ``raw`` under ``<build>/<body>``."""
    idle = idle_health_s(build.url)
    for name, body in BODIES.items():
        runs = [one_post(build.url, body) for _ in range(rounds)]
        raw[f"{build.name}/{name}"] = runs
        longest = statistics.median(r["longest_health_s"] for r in runs)
        rows.append({"build": build.name, "body": name, "status": runs[0]["status"],
                     "post_s": round(statistics.median(r["post_s"] for r in runs), 3),
                     "longest_health_s": round(longest, 4), "idle_health_s": round(idle, 4),
                     "stall_over_idle": round(longest / idle, 1)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git ref (or a folder holding herald_service/) of the 'before' build; omit: the working tree alone")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "loop_stall_cpu.json")
    args = parser.parse_args()
    exit_on_sigterm()
    require_bench_extra()
    rows: list[dict] = []
    raw: dict = {}
    for build in each_build(args.before, Build):
        run(build, args.rounds, rows, raw)
    if args.before:
        by = {(r["build"], r["body"]): r for r in rows}
        for name in BODIES:
            by[("after", name)]["after_over_before"] = round(
                by[("after", name)]["longest_health_s"] / by[("before", name)]["longest_health_s"], 3)
    payload = {
        "benchmark": "loop_stall",
        "backend": "fake (HERALD_FAKE_BACKEND=true)",
        "before_ref": args.before,
        "after": working_tree(),
        "bodies_bytes": {name: len(body) for name, body in BODIES.items()},
        "rounds_per_body": args.rounds,
        "hardware": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "load_average_end": os.getloadavg()},
        "summary": rows,
        "rounds": raw,
    }
    print_table("longest GET /health/live during one large POST /classify (median of rounds; fake backend)", rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

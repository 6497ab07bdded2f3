"""Refusal flood: what clients sending requests that are refused (413, over the token limit) do to the others' latency.

Why: a refusal does no model work, but whatever Python work comes before it holds the GIL, which the model worker
thread needs too. The breaker pass of 2026-12-07 sent bodies of 64 prompts of 32,000 characters (each over the
embedded default's 4,096-token limit) from four clients: every one was answered 413, yet the trimmed views and
readings of all 64 prompts (which fold each text again) were found before the first prompt was tokenized, 1.4 s of
GIL a request, and a one-word request beside them took 26-34 s; the engine's cost model learned those slowed batches
and answered short 8-prompt requests 413 ("estimated at 93 s") afterwards. Since then the views are found only once
the inputs fit the token limit (``Moderator._add_views_beside``).

How: real ``herald serve`` processes on the embedded backbone (the default; CPU, float32, ``HERALD_NUM_THREADS=1``),
``--before REF`` serving ``herald_service/`` exported at that ref, then the working tree's, one at a time. On each:
a victim posts ``{"input": "hello"}`` every 0.5 s alone for :data:`ALONE_S` s (the build's own baseline), then beside
:data:`ATTACKERS` clients that post the refused body back to back for :data:`FLOOD_S` s; then five requests of 8
short prompts, one after another (their statuses: a 413 there is the poisoned cost model). Reported per build: the
victim's median and longest latency alone and under the flood, their ratio, the attackers' answers per second, the
``herald_worker_cost_seconds`` gauges before and after the flood, and the 8-prompt statuses; with
``--before``, the after build's flood latency over the before build's.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.refusal_flood --before <ref>`` (about 4 minutes on a 2-core CPU);
writes ``benchmarks/results/refusal_flood_cpu.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks.common import RESULTS, exit_on_sigterm, print_table, require_bench_extra
from benchmarks.host_cost import REPO, each_build, working_tree

ATTACKERS = 4
ALONE_S = 10.0
FLOOD_S = 40.0
VICTIM_GAP_S = 0.5


def refused_body(seed: int = 0) -> bytes:
    """64 prompts of 32,000 characters of short words (7,649 tokens each on the embedded backbone): under
    ``max_chars`` (40,000) and the body limit, over ``max_tokens`` (4,096), so every request is answered 413."""
    rng = random.Random(seed)
    text = " ".join(rng.choice(["alpha", "beta", "x", "1"]) for _ in range(6400))[:32_000]
    return json.dumps({"input": [text] * 64}).encode()


class Server:
    """One ``herald serve`` on the embedded default, serving ``herald_service`` from ``source``."""

    def __init__(self, name: str, source: Path) -> None:
        ports = []
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        self.name, self.url, self.health = name, f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
        path = os.pathsep.join(p for p in (str(source), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "HERALD_PORT": str(ports[0]), "HERALD_HEALTH_PORT": str(ports[1]),
               "HERALD_HOST": "127.0.0.1", "HERALD_NUM_THREADS": "1",
               "HERALD_PROBE": str(REPO / "models" / "smollm2-135m-instruct")}  # both builds: the working tree's probe
        self.proc = subprocess.Popen([sys.executable, "-m", "herald_service", "serve"], cwd=source, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.health + "/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} server not ready in {timeout_s} s")

    def cost_model(self) -> dict[str, float]:
        """The ``herald_worker_cost_seconds`` gauges by ``per`` (seconds of model time per batch, prompt, token)."""
        gauges = {}
        for line in httpx.get(self.url + "/metrics", timeout=30).text.splitlines():
            if line.startswith("herald_worker_cost_seconds{"):
                per = line.split('per="', 1)[1].split('"', 1)[0]
                gauges[per] = float(line.split()[-1])
        return gauges

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


async def _victim(client: httpx.AsyncClient, url: str, until: float, latencies: list[float]) -> None:
    while time.monotonic() < until:
        started = time.monotonic()
        answer = await client.post(url + "/classify", json={"input": "hello", "return_trajectory": False})
        if answer.status_code == 200:
            latencies.append(time.monotonic() - started)
        await asyncio.sleep(VICTIM_GAP_S)


async def _attacker(client: httpx.AsyncClient, url: str, body: bytes, until: float, statuses: list[int]) -> None:
    while time.monotonic() < until:
        answer = await client.post(url + "/classify", content=body, headers={"content-type": "application/json"})
        statuses.append(answer.status_code)


async def _phase(url: str, seconds: float, attackers: int, body: bytes) -> tuple[list[float], list[int]]:
    latencies: list[float] = []
    statuses: list[int] = []
    until = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=300.0) as client:
        await asyncio.gather(_victim(client, url, until, latencies),
                             *(_attacker(client, url, body, until, statuses) for _ in range(attackers)))
    return latencies, statuses


def run(server: Server, body: bytes) -> dict:
    """The victim alone, then beside the flood, then the 8-prompt requests, on ``server``."""
    for _ in range(3):  # warm-up: the first batches seed the cost model
        httpx.post(server.url + "/classify", json={"input": "hello"}, timeout=120)
    alone, _ = asyncio.run(_phase(server.url, ALONE_S, 0, body))
    cost_before = server.cost_model()
    flooded, statuses = asyncio.run(_phase(server.url, FLOOD_S, ATTACKERS, body))
    cost_after = server.cost_model()
    short = {"input": [f"word {i}" for i in range(8)], "return_trajectory": False}
    after = [httpx.post(server.url + "/classify", json=short, timeout=120).status_code for _ in range(5)]
    return {
        "build": server.name,
        "victim_alone_p50_s": round(statistics.median(alone), 3),
        "victim_flood_p50_s": round(statistics.median(flooded), 3) if flooded else None,
        "victim_flood_max_s": round(max(flooded), 3) if flooded else None,
        "victim_answers_under_flood": len(flooded),
        "flood_over_alone_p50": round(statistics.median(flooded) / statistics.median(alone), 1) if flooded else None,
        "attacker_answers_per_s": round(len(statuses) / FLOOD_S, 2),
        "attacker_statuses": sorted(set(statuses)),
        "cost_model_before_s": cost_before,
        "cost_model_after_s": cost_after,
        "eight_prompt_statuses_after": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git ref (or a folder holding herald_service/) of the 'before' build; omit: the working tree alone")
    parser.add_argument("--out", type=Path, default=RESULTS / "refusal_flood_cpu.json")
    args = parser.parse_args()
    exit_on_sigterm()
    require_bench_extra()
    body = refused_body()
    rows: list[dict] = []
    for server in each_build(args.before, Server):
        rows.append(run(server, body))
    if args.before and rows[0]["victim_flood_p50_s"] and rows[1]["victim_flood_p50_s"]:
        rows[1]["flood_p50_after_over_before"] = round(rows[1]["victim_flood_p50_s"] / rows[0]["victim_flood_p50_s"], 3)
    payload = {
        "benchmark": "refusal_flood",
        "backend": "embedded default (SmolLM2-135M-Instruct, CPU, float32, HERALD_NUM_THREADS=1)",
        "before_ref": args.before,
        "after": working_tree(),
        "body_bytes": len(body),
        "attackers": ATTACKERS, "alone_s": ALONE_S, "flood_s": FLOOD_S, "victim_gap_s": VICTIM_GAP_S,
        "hardware": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "load_average_end": os.getloadavg()},
        "summary": rows,
    }
    print_table("a one-word /classify beside clients whose 64-prompt bodies are refused 413 (embedded default, CPU)",
                [{k: v for k, v in row.items() if not isinstance(v, dict)} for row in rows])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""CPU batch token budget through ``herald serve``: the CPU's auto budget (2,048 tokens) against 8,192, in one run.

Why: ``HERALD_BATCH_TOKEN_BUDGET`` auto is 2,048 tokens on the CPU since ``benchmarks/cpu_batch_budget.py`` found
batches of 750-1,700 tokens 0.75-0.78 of the time of 8,192-token ones in bare forward passes. This measures what a
client sees: the same requests answered by two real servers that differ only in that setting, and how well each
server's admission estimate (the cost model, seeded at its warm-up on batches of at most 1,470 tokens) prices them.

How: two ``herald serve`` processes on the embedded backbone (bf16 linear layers, as shipped), ``budget_8192``
(``HERALD_BATCH_TOKEN_BUDGET=8192``, the default before) and ``auto``, both with ``HERALD_REQUEST_TIMEOUT_S`` 3,600 s
so that nothing is refused; they start one at a time (each times its own warm-up) and then only one works at a
time. Each round sends every shape of :data:`SHAPES` as one ``POST /classify`` to both servers, the order of the two
alternating by round; then one burst of 200 one-prompt requests sent at once to each (the admission benchmark's
``mixed``: 150 short, 40 of about 300 tokens, 10 of about 2,000). Reported: wall-clock seconds per request (median
of the rounds), ``auto`` over ``budget_8192``, and each server's estimate (its ``herald_worker_cost_seconds``
gauges just before the request) over its real time.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.cpu_budget_serve`` (about 8 minutes on an idle 2-core CPU);
writes ``benchmarks/results/cpu_budget_serve_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.admission import (
    BASELINE_TIMEOUT_S, CHAT, HeraldServer, burst_kinds, classify, cost_fit, send_burst,
)
from benchmarks.common import (
    RESULTS, exit_on_sigterm, hardware, percentile, print_table, require_bench_extra, result_header,
)
from herald_service.config import CUDA_TOKEN_BUDGET
from herald_service.engine.admission import Work

SHAPES = ((64, CHAT * 4), (64, CHAT * 8), (64, CHAT * 40), (8, CHAT * 80))
"""(prompts, text) of one request: 64 prompts of about 71, 131 and 431 tokens (batched: the budget decides how), and
8 of about 831 (each over the CPU's 512-token prefill chunk, so prefilled alone in either server: a control)."""

ROUNDS = 3


def request_rows(servers: dict[str, HeraldServer], rounds: int) -> list[dict]:
    """Per shape and server: the wall-clock seconds of each round, their median, the server's estimate over its real
    time (median) and the fewest CPU cores it used while it worked (2 on an idle 2-core machine; less: other work
    shared the CPU); ``auto_over_8192``: the median seconds of ``auto`` over ``budget_8192``'s."""
    limits = {name: httpx.get(s.url + "/v1/info").json()["limits"] for name, s in servers.items()}
    times: dict[tuple[int, str], list[float]] = {}
    ratios: dict[tuple[int, str], list[float]] = {}
    tokens: dict[int, float] = {}
    cores: dict[tuple[int, str], list[float]] = {}
    names = list(servers)
    with httpx.Client(timeout=BASELINE_TIMEOUT_S) as client:
        for r in range(rounds):
            for i, (prompts, text) in enumerate(SHAPES):
                for name in (names if r % 2 == 0 else names[::-1]):
                    server = servers[name]
                    fit = cost_fit(client.get(server.url + "/metrics").text, limits[name])
                    cpu_before = server.cpu()[0]
                    status, seconds, body = classify(client, server.url, [text] * prompts)
                    cores.setdefault((i, name), []).append((server.cpu()[0] - cpu_before) / seconds)
                    if status != 200:
                        raise RuntimeError(f"{name} answered {status}: {body}")
                    work = Work.of_prompts([row["tokens"] for row in body["results"]])
                    tokens[i] = work.tokens / work.prompts
                    times.setdefault((i, name), []).append(seconds)
                    ratios.setdefault((i, name), []).append(fit.seconds(work) / seconds)
                    print(f"round {r}: {prompts} x {tokens[i]:.0f} tokens, {name}: {seconds:.2f} s", flush=True)
    rows = []
    for i, (prompts, _) in enumerate(SHAPES):
        row: dict = {"shape": f"{prompts} x {tokens[i]:.0f} tokens"}
        for name in names:
            row[f"{name}_s"] = statistics.median(times[(i, name)])
            row[f"{name}_rounds_s"] = times[(i, name)]
            row[f"{name}_est_over_real"] = statistics.median(ratios[(i, name)])
            row[f"{name}_cores"] = min(cores[(i, name)])
        row["auto_over_8192"] = row["auto_s"] / row["budget_8192_s"]
        rows.append(row)
    return rows


def burst_row(name: str, server: HeraldServer) -> dict:
    """The ``mixed`` burst sent at once: seconds until the last answer, median and longest latency, statuses."""
    seconds, answers = send_burst(server, burst_kinds("mixed"))
    answered = [a["seconds"] for a in answers if a["status"] == 200]
    statuses: dict[str, int] = {}
    for a in answers:
        statuses[str(a["status"])] = statuses.get(str(a["status"]), 0) + 1
    return {"server": name, "seconds": seconds, "p50_s": percentile(answered, 50), "max_s": max(answered),
            "statuses": statuses}


def run(rounds: int = ROUNDS) -> dict:
    hw = hardware()
    started = time.perf_counter()
    common = {"request_timeout_s": BASELINE_TIMEOUT_S}
    with HeraldServer("budget_8192", batch_token_budget=CUDA_TOKEN_BUDGET, **common) as before, \
            HeraldServer("auto", **common) as after:
        servers = {"budget_8192": before, "auto": after}
        budgets = {name: httpx.get(s.url + "/v1/info").json()["limits"]["batch_token_budget"] for name, s in servers.items()}
        rows = request_rows(servers, rounds)
        bursts = [burst_row(name, s) for name, s in servers.items()]
    for b in bursts:
        print(f"mixed burst, {b['server']}: {b['seconds']:.1f} s, p50 {b['p50_s']:.1f} s, max {b['max_s']:.1f} s", flush=True)
    return {
        **result_header("cpu_budget_serve", "cpu", hw),
        "budgets": budgets,
        "rounds": rounds,
        "seconds": time.perf_counter() - started,
        "cost_seeded_on": {s.name: s.seeded for s in (before, after)},
        "requests": rows,
        "bursts": bursts,
        "burst_auto_over_8192": bursts[1]["seconds"] / bursts[0]["seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--out", type=Path, default=RESULTS / "cpu_budget_serve_cpu.json")
    args = parser.parse_args()
    exit_on_sigterm()
    require_bench_extra()
    result = run(args.rounds)
    print_table(f"one POST /classify per shape, median of {args.rounds} rounds (seconds; est_over_real: the server's"
                " admission estimate over its real time)",
                [{k: v for k, v in row.items() if not k.endswith("rounds_s")} for row in result["requests"]])
    print_table("the mixed burst (200 one-prompt requests at once)", result["bursts"])
    print(f"burst: auto over 8192 {result['burst_auto_over_8192']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

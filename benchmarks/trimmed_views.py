"""Trimmed views through ``herald serve``: what ``HERALD_TRIMMED_VIEWS=true`` (the default) costs a client, against
``false`` measured in the same run.

Why: with the views on, each text scored alone is also scored without a short leading clause, without a short
trailing one and without both (``herald_service/trimmed_views.py``; docs/eval/trimmed_views.md): up to three more
prefills a prompt, 2.02x the prompt tokens over the study's left-out benign rows. This measures what that costs in
latency on the CPU, where prefill is the time: the same requests answered by two real servers that differ only in
that setting.

How: ``herald serve`` on the embedded backbone (as shipped on the CPU), ``no_views`` (``HERALD_TRIMMED_VIEWS=false``)
and ``views`` (``true``), both with ``HERALD_REQUEST_TIMEOUT_S`` 3,600 s so that nothing is refused. The machine has
2 cores and may be shared, so only one server runs at a time: each round starts one, measures it, stops it, then the
other, the order alternating by round (each start seeds its own cost model at its warm-up, not timed). The prompts:
:data:`PROMPTS` real prompts from :func:`~benchmarks.common.load_texts` (at most :data:`MAX_CHARS` characters, about
400 tokens), each also wrapped in one of the format instructions of
:data:`~herald_service.training.format_wrapped.EVALUATION_INSTRUCTIONS` (prompt i in instruction i mod 12). Each
server, each round, after two untimed requests:

1. sequential latency: every prompt, plain and wrapped, as its own ``POST /classify``, one in flight (a keep-alive
   ``http.client`` connection, :class:`~benchmarks.common.KeepAliveClient`); median and p90 seconds over every
   round's requests, and per kind (plain, wrapped);
2. one batch: ``POST /classify`` of :data:`BATCH` prompts (prompt i plain for even i, wrapped for odd i); wall-clock
   seconds, median of the rounds;
3. prefill tokens: the delta of ``herald_prompt_tokens_sum`` (rendered tokens of every prompt the engine accepted,
   views included) and ``_count`` (prompts) in ``/metrics`` over 1 and 2, summed over the rounds; and
   ``herald_batch_tokens_sum`` (tokens of the forward passes, padding included).

Ratios are ``views`` over ``no_views``, over all rounds and round by round: a round's two servers run minutes apart,
so a round where either used fewer than 2 cores compares unlike conditions (in a first run beside another job's tests,
``trimmed_views_cpu_contended.json``, the servers had 1.0-1.2 cores for most of two rounds, and the views' batch took
61-88 s against 9.9 s in the round they had 2). Each server's ``/v1/info`` ``trimmed_views`` is recorded at each start
(the setting took), as are the load averages and the CPU cores each server used while measured (2 on an idle 2-core
machine; less: other work shared the CPU). The trimmed views of the prompts themselves (the share with at least one,
the mean count) are computed here with :func:`herald_service.trimmed_views.trimmed_views`.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.trimmed_views`` (about 4 minutes on an idle 2-core CPU, six server
starts included); writes ``benchmarks/results/trimmed_views_cpu.json``. ``--port`` is the first of the ``2 x rounds``
consecutive ports, one a server start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.admission import BASELINE_TIMEOUT_S, HeraldServer, classify
from benchmarks.common import (
    RESULTS, KeepAliveClient, exit_on_sigterm, hardware, load_texts, percentile, print_table, require_bench_extra,
    result_header,
)
from herald_service.training.format_wrapped import EVALUATION_INSTRUCTIONS, wrap
from herald_service.trimmed_views import trimmed_views

PROMPTS = 64
"""Real prompts in the mix (each sent plain and wrapped: 128 sequential requests a server a round)."""
MAX_CHARS = 1500
"""Longest prompt kept, in characters (about 400 tokens of text)."""
BATCH = 64
"""Prompts in the one batch request (HERALD_MAX_BATCH_SIZE as shipped; trimmed views are not counted against it)."""
ROUNDS = 3
SERVERS = {"no_views": False, "views": True}
"""Server name: its HERALD_TRIMMED_VIEWS."""
TOKEN_SERIES = ("herald_prompt_tokens_sum", "herald_prompt_tokens_count", "herald_batch_tokens_sum",
                "herald_batch_tokens_count")


def prompt_mix(n: int = PROMPTS, max_chars: int = MAX_CHARS) -> tuple[list[str], list[str]]:
    """``n`` real prompts (stripped, 1 to ``max_chars`` characters, each once) and the same prompts wrapped, prompt
    i in evaluation instruction i mod 12."""
    plain: list[str] = []
    for text in load_texts():
        text = text.strip()
        if 0 < len(text) <= max_chars and text not in plain:
            plain.append(text)
        if len(plain) == n:
            break
    wrapped = [wrap(t, EVALUATION_INSTRUCTIONS[i % len(EVALUATION_INSTRUCTIONS)]) for i, t in enumerate(plain)]
    return plain, wrapped


def view_counts(texts: list[str]) -> dict:
    """How many of ``texts`` have at least one trimmed view, and the mean count (what the ``views`` server adds)."""
    counts = [len(trimmed_views(t)) for t in texts]
    return {"n": len(texts), "with_views": sum(c > 0 for c in counts) / len(counts),
            "mean_views": statistics.fmean(counts), "mean_chars": statistics.fmean(len(t) for t in texts)}


def token_totals(url: str) -> dict[str, float]:
    """The series of :data:`TOKEN_SERIES` in the server's ``/metrics`` (unlabelled histogram sums and counts)."""
    from prometheus_client.parser import text_string_to_metric_families

    values = {s.name: s.value for family in text_string_to_metric_families(httpx.get(url + "/metrics").text)
              for s in family.samples if s.name in TOKEN_SERIES}
    return {name: values[name] for name in TOKEN_SERIES}


def measure(server: HeraldServer, plain: list[str], wrapped: list[str], batch: list[str]) -> dict:
    """One server, one round: the sequential requests (plain and wrapped of each prompt in turn), then the batch."""
    info = httpx.get(server.url + "/v1/info").json()
    with KeepAliveClient(server.url) as client:
        for text in (plain[0], wrapped[0]):  # untimed: first connection, first request's paths
            client.classify(text)
        before = token_totals(server.url)
        cpu_before = server.cpu()[0]
        started = time.perf_counter()
        seconds: dict[str, list[float]] = {"plain": [], "wrapped": []}
        for p, w in zip(plain, wrapped):
            seconds["plain"].append(client.classify(p)[0])
            seconds["wrapped"].append(client.classify(w)[0])
        sequential_cores = (server.cpu()[0] - cpu_before) / (time.perf_counter() - started)
    with httpx.Client(timeout=BASELINE_TIMEOUT_S) as client:
        cpu_before = server.cpu()[0]
        status, batch_s, body = classify(client, server.url, batch)
        if status != 200:
            raise RuntimeError(f"{server.name} answered the batch with {status}: {body}")
        batch_cores = (server.cpu()[0] - cpu_before) / batch_s
    after = token_totals(server.url)
    return {
        "info_trimmed_views": info["trimmed_views"],
        "sequential_s": seconds,
        "sequential_cores": sequential_cores,
        "batch_s": batch_s,
        "batch_cores": batch_cores,
        "batch_flagged": sum(r["flagged"] for r in body["results"]),
        "tokens": {k: after[k] - before[k] for k in TOKEN_SERIES},
        "load_average": os.getloadavg(),
    }


def summary(name: str, rounds: list[dict]) -> dict:
    """One server's measurements over the rounds."""
    every = {kind: [s for r in rounds for s in r["sequential_s"][kind]] for kind in ("plain", "wrapped")}
    both = every["plain"] + every["wrapped"]
    tokens = {k: sum(r["tokens"][k] for r in rounds) for k in TOKEN_SERIES}
    return {
        "server": name,
        "info_trimmed_views": sorted({r["info_trimmed_views"] for r in rounds}),
        "seq_median_s": statistics.median(both),
        "seq_p90_s": percentile(both, 90),
        "seq_plain_median_s": statistics.median(every["plain"]),
        "seq_wrapped_median_s": statistics.median(every["wrapped"]),
        "seq_round_medians_s": [statistics.median(r["sequential_s"]["plain"] + r["sequential_s"]["wrapped"])
                                for r in rounds],
        "batch_s": statistics.median(r["batch_s"] for r in rounds),
        "batch_rounds_s": [r["batch_s"] for r in rounds],
        "prompt_tokens": tokens["herald_prompt_tokens_sum"],
        "prompts_prefilled": tokens["herald_prompt_tokens_count"],
        "batch_tokens": tokens["herald_batch_tokens_sum"],
        "forward_passes": tokens["herald_batch_tokens_count"],
        "min_cores": min(min(r["sequential_cores"], r["batch_cores"]) for r in rounds),
    }


def run(rounds: int = ROUNDS, port: int = 8100, n: int = PROMPTS) -> dict:
    hw = hardware()
    started = time.perf_counter()
    plain, wrapped = prompt_mix(n)
    batch = [plain[i] if i % 2 == 0 else wrapped[i] for i in range(min(BATCH, len(plain)))]
    names = list(SERVERS)
    measured: dict[str, list[dict]] = {name: [] for name in names}
    seeded: dict[str, list] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            with HeraldServer(name, port=port, request_timeout_s=BASELINE_TIMEOUT_S,
                              trimmed_views=str(SERVERS[name]).lower()) as server:
                row = measure(server, plain, wrapped, batch)
            port += 1
            if row["info_trimmed_views"] is not SERVERS[name]:
                raise RuntimeError(f"{name}: /v1/info trimmed_views is {row['info_trimmed_views']},"
                                   f" set {SERVERS[name]}")
            seeded[name].append(server.seeded)
            measured[name].append(row)
            seq = row["sequential_s"]["plain"] + row["sequential_s"]["wrapped"]
            print(f"round {r}, {name} (info trimmed_views {row['info_trimmed_views']}): sequential median"
                  f" {statistics.median(seq):.3f} s, p90 {percentile(seq, 90):.3f} s; batch {row['batch_s']:.2f} s;"
                  f" {row['tokens']['herald_prompt_tokens_sum']:.0f} prompt tokens", flush=True)
    servers = [summary(name, measured[name]) for name in names]
    off, on = servers
    by_round = []
    for r in range(rounds):
        a, b = measured["no_views"][r], measured["views"][r]
        seq = [statistics.median(x["sequential_s"]["plain"] + x["sequential_s"]["wrapped"]) for x in (a, b)]
        by_round.append({"round": r, "first": names[r % 2], "seq_median_ratio": seq[1] / seq[0],
                         "batch_ratio": b["batch_s"] / a["batch_s"],
                         "no_views_min_cores": min(a["sequential_cores"], a["batch_cores"]),
                         "views_min_cores": min(b["sequential_cores"], b["batch_cores"])})
    ratios = {
        "seq_median": on["seq_median_s"] / off["seq_median_s"],
        "seq_p90": on["seq_p90_s"] / off["seq_p90_s"],
        "seq_plain_median": on["seq_plain_median_s"] / off["seq_plain_median_s"],
        "seq_wrapped_median": on["seq_wrapped_median_s"] / off["seq_wrapped_median_s"],
        "batch": on["batch_s"] / off["batch_s"],
        "prompt_tokens": on["prompt_tokens"] / off["prompt_tokens"],
        "prompts_prefilled": on["prompts_prefilled"] / off["prompts_prefilled"],
        "batch_tokens": on["batch_tokens"] / off["batch_tokens"],
    }
    return {
        **result_header("trimmed_views", "cpu", hw),
        "rounds": rounds,
        "seconds": time.perf_counter() - started,
        "prompts": {"plain": view_counts(plain), "wrapped": view_counts(wrapped), "all": view_counts(plain + wrapped),
                    "batch": view_counts(batch)},
        "servers": servers,
        "views_over_no_views": ratios,
        "views_over_no_views_by_round": by_round,
        "cost_seeded_on": seeded,
        "rounds_measured": measured,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--prompts", type=int, default=PROMPTS, help="real prompts in the mix (a smoke run: fewer)")
    parser.add_argument("--port", type=int, default=8100, help="first port; each server start takes the next one")
    parser.add_argument("--out", type=Path, default=RESULTS / "trimmed_views_cpu.json")
    args = parser.parse_args()
    exit_on_sigterm()
    require_bench_extra()
    result = run(args.rounds, args.port, args.prompts)
    print_table("trimmed views of the prompt mix (computed here)",
                [{"kind": kind, **row} for kind, row in result["prompts"].items()])
    print_table(f"per server over {args.rounds} rounds (seconds; tokens summed over the rounds)",
                [{k: v for k, v in row.items() if k not in ("seq_round_medians_s", "batch_rounds_s")}
                 for row in result["servers"]])
    print_table("views over no_views", [result["views_over_no_views"]])
    print_table("each round: views over no_views, and the fewest cores each server used (2: an idle 2-core machine)",
                result["views_over_no_views_by_round"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

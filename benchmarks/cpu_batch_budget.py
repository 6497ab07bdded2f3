"""CPU batch size: the same prompts cut into batches of different token sizes, whole workload timed, one run.

Why: ``HERALD_BATCH_TOKEN_BUDGET`` (8,192 tokens) was chosen on the GPU (benchmarks/hardware_limit.py, past the knee
there); on the CPU it was never measured beyond 1k tokens, and the warm-up seeds admission's cost model on batches of
at most 1,470 tokens while the worker forms batches of up to 8,192. If the CPU's time per token grows with the batch
(activations falling out of cache), big batches are both slower than small ones and under-priced by admission
(benchmarks/results/admission_cpu_batch_invariant.json: 64 x 431 tokens priced at 0.72 of its real time).

How: the embedded backbone as ``herald serve`` runs it on this CPU (``HFBackbone.last_token_states``, bf16 linear
layers where the CPU has them), equal-length prompts from the warm-up text (:data:`~herald_service.api.app.WARMUP_PROMPTS`),
each workload cut into consecutive batches of ``per`` prompts for each ``per`` that keeps a batch within 8,192
tokens, rounds alternating between the cuts; the fastest round of each. Reports seconds, milliseconds per token and
the time relative to the one-batch-per-budget cut (the largest ``per``: what the worker forms today).

Run: ``python -m benchmarks.cpu_batch_budget`` (about 3 minutes on 2 cores; ``--quick``: one workload, one round).
Writes ``benchmarks/results/cpu_batch_budget_cpu.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from benchmarks.common import RESULTS, embedded_serving_backbone, print_table, write_cpu_result
from herald_service.api.app import WARMUP_PROMPTS
from herald_service.backbone.hf import HFBackbone
from herald_service.config import CUDA_TOKEN_BUDGET
from herald_service.types import user_turn

BUDGET = CUDA_TOKEN_BUDGET
"""The largest batch cut, in tokens: ``HERALD_BATCH_TOKEN_BUDGET`` on CUDA, and its default everywhere when this
benchmark was written (the CPU's auto is 2,048 since, from this benchmark's result)."""

WORKLOADS = ((8, 64), (48, 60))
"""(times the warm-up text is repeated per prompt, prompts): 64 x 94 tokens and 60 x 414 tokens on the embedded
backbone, short and medium prompts (prompts over 512 tokens are prefilled alone, in chunks, on the CPU)."""


def run(backbone: HFBackbone, words: int, total: int, rounds: int) -> list[dict]:
    """Seconds of ``total`` equal prompts cut into batches of each size that fits :data:`BUDGET`."""
    prompts = backbone.encode([user_turn(" ".join([WARMUP_PROMPTS[1]] * words))] * total)
    length = len(prompts[0])
    cuts = [per for per in (1, 2, 4, 8, 16, 32, 64) if per * length <= BUDGET and per <= total]
    largest = min(total, BUDGET // length)
    cuts = sorted(set(cuts) | {largest})
    backbone.last_token_states(prompts[:2])  # one-off costs
    times: dict[int, list[float]] = {per: [] for per in cuts}
    for _ in range(rounds):
        for per in cuts:
            started = time.perf_counter()
            for i in range(0, total, per):
                backbone.last_token_states(prompts[i:i + per])
            times[per].append(time.perf_counter() - started)
    best = {per: min(t) for per, t in times.items()}
    return [{"workload": f"{total} x {length} tokens", "prompts_per_batch": per, "batch_tokens": per * length,
             "seconds": best[per], "ms_per_token": 1e3 * best[per] / (total * length),
             "time_over_largest_batches": best[per] / best[largest]} for per in cuts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short workload only, one round (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    backbone = embedded_serving_backbone()
    load_start = os.getloadavg()
    rows = [row for words, total in WORKLOADS[: 1 if args.quick else None]
            for row in run(backbone, words, total, 1 if args.quick else 3)]
    print_table("workload time by batch size (fastest round)", rows)
    write_cpu_result(args.out, "cpu_batch_budget", args.quick, load_start, {
        "backbone": backbone.info.model_id, "matmul_dtype": backbone.info.matmul_dtype or "weights", "budget": BUDGET,
        "rows": rows})


if __name__ == "__main__":
    main()

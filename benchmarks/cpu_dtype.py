"""CPU numerics: the embedded backbone with bf16 linear layers, and all in bf16, against fp32, in one run.

Three ways to run the embedded backbone on the CPU: ``fp32`` (weights and every multiply; what ``herald fit`` uses),
``bf16_linear`` (``matmul_dtype=bfloat16``: the decoder's linear layers in bf16 over an fp32 residual stream,
``herald serve``'s default on a CPU with native bf16) and ``bf16`` (``dtype=bfloat16``: everything). The shipped probe
was fitted on fp32 states, so a faster way is only worth its speed if the probe decides the same:

1. Agreement: the shipped probe's own held-out part (``herald fit``'s corpus and split: ``../shared/data`` capped at
   150 per (source, label) with seed 0, prompts over 1,024 tokens skipped, the 20% stratified test part: 584
   prompts) and the 25 questions of ``docs/eval/benign_questions.txt``, each scored from the states of each way:
   decisions that differ from fp32's, ``|logit - logit_fp32|`` quantiles, and F1, AUROC, recall, FPR of each.
2. Speed: one prompt at a time of 16 to 1,024 tokens, and 8 x 128 tokens, through the service's forward
   (``HFBackbone.last_token_states``: final layer at the last token only), the three ways in turn; medians, and
   fp32's time over each way's (the speed-up).

Run: ``python -m benchmarks.cpu_dtype`` (about 6 minutes on 2 cores; ``--quick``: 60 held-out prompts, fewer
repeats). Writes ``benchmarks/results/cpu_dtype_cpu.json``. ``--backbone PATH`` measures another backbone with its
committed probe (``models/<slug>/``, fitted at ``herald fit``'s defaults, as the Gemma-3-270M one was) and writes
``cpu_dtype_cpu_<slug>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import REPO, RESULTS, data_folder, difference_quantiles, hardware, print_table
from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.loader import resolve_backbone
from herald_service.backbone.numerics import cpu_has_native_bf16
from herald_service.config import default_cache_dir
from herald_service.engine.runtime import default_probe_folder
from herald_service.probes.artifact import load_probe
from herald_service.training.corpus import cap_per_group, default_data_files, load_training_corpus, stratified_split
from herald_service.training.evaluation import binary_metrics
from herald_service.training.extract import StateCache, states_of_token_ids
from herald_service.types import user_turn

MAX_PER_SOURCE, SEED, MAX_TOKENS, TEST_FRACTION = 150, 0, 1024, 0.2
"""``herald fit``'s defaults, as in the shipped probe's manifest (``training_data``)."""

LENGTHS = (16, 64, 256, 1024)
FASTER = ("bf16_linear", "bf16")
QUESTIONS = REPO / "docs" / "eval" / "benign_questions.txt"


def benign_questions() -> list[str]:
    """The loaded-word questions of ``docs/eval/benign_questions.txt``, one a line."""
    return [q for q in QUESTIONS.read_text(encoding="utf-8").splitlines() if q.strip()]


def held_out_prompts(backbone: HFBackbone, quick: bool) -> tuple[list[list[int]], np.ndarray, list[str]]:
    """Token ids, labels and sources of the shipped probe's held-out part (``herald fit``'s split, rebuilt)."""
    rows = cap_per_group(load_training_corpus(default_data_files(data_folder())), MAX_PER_SOURCE, SEED)
    ids = backbone.encode([user_turn(e.prompt) for e in rows])
    kept = [i for i, t in enumerate(ids) if len(t) <= MAX_TOKENS]
    examples, ids = [rows[i] for i in kept], [ids[i] for i in kept]
    _, test = stratified_split(examples, TEST_FRACTION, SEED)
    if quick:
        test = test[:: max(1, len(test) // 60)]
    return [ids[i] for i in test], np.array([examples[i].label for i in test]), [examples[i].source for i in test]


def agreement(backbones: dict[str, HFBackbone], quick: bool) -> dict:
    probe, manifest = load_probe(default_probe_folder(backbones["fp32"].info.slug), backbones["fp32"].info)
    ids, labels, sources = held_out_prompts(backbones["fp32"], quick)
    questions = benign_questions()
    question_ids = backbones["fp32"].encode([user_turn(q) for q in questions])
    out: dict = {"held_out": {"n": len(ids), "n_harmful": int(labels.sum())}, "benign_questions": {"n": len(questions)}}
    logits, question_logits = {}, {}
    for name, backbone in backbones.items():
        cache = StateCache(default_cache_dir(), backbone)
        states = states_of_token_ids(backbone, ids, cache, 4096, 32, f"held-out states, {name}")
        result = probe.predict(states)
        logits[name] = result.logits
        out["held_out"][name] = binary_metrics(labels, result.scores, result.flagged)
        question_out = probe.predict(states_of_token_ids(backbone, question_ids, None, 4096, 32, f"questions, {name}"))
        question_logits[name] = question_out.logits
        out["benign_questions"][name] = {"flagged": int(question_out.flagged.sum())}
    threshold = probe.threshold
    for key, per_way in (("held_out", logits), ("benign_questions", question_logits)):
        for name in FASTER:
            diff = np.abs(per_way[name] - per_way["fp32"])
            flips = (per_way[name] >= threshold) != (per_way["fp32"] >= threshold)  # flagged: logit >= threshold
            out[key][name]["decisions_differ_from_fp32"] = int(flips.sum())
            out[key][name]["abs_logit_difference"] = difference_quantiles(diff)
            if key == "held_out":
                out[key][name]["differing"] = [
                    {"source": sources[i], "label": int(labels[i]), "logit_fp32": float(per_way["fp32"][i]),
                     "logit": float(per_way[name][i])} for i in np.flatnonzero(flips)]
    out["threshold"] = threshold
    out["probe_command"] = manifest.get("command")
    return out


def speed(backbones: dict[str, HFBackbone], pool: list[int], quick: bool) -> list[dict]:
    repeats = 3 if quick else 7
    shapes = [[pool[:n]] for n in LENGTHS] + [[pool[i * 128:(i + 1) * 128] for i in range(8)]]
    rows = []
    for shape in shapes:
        times: dict[str, list[float]] = {name: [] for name in backbones}
        for name, backbone in backbones.items():  # warm-up
            backbone.last_token_states(shape)
        for _ in range(repeats):
            for name, backbone in backbones.items():  # alternating, so drift in the machine's load hits both
                started = time.perf_counter()
                backbone.last_token_states(shape)
                times[name].append(time.perf_counter() - started)
        medians = {name: statistics.median(t) for name, t in times.items()}
        row = {"prompts": len(shape), "tokens_each": len(shape[0]), **{f"{n}_ms": m * 1e3 for n, m in medians.items()}}
        rows.append({**row, **{f"speedup_{name}": medians["fp32"] / medians[name] for name in FASTER}})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 held-out prompts and 3 repeats (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--backbone", default="embedded", help="as HERALD_BACKBONE; its probe is models/<slug>/")
    args = parser.parse_args()
    resolved = resolve_backbone(args.backbone, default_cache_dir())
    backbones = {"fp32": HFBackbone(resolved, "cpu", "float32"),
                 "bf16_linear": HFBackbone(resolved, "cpu", "float32", matmul_dtype="bfloat16"),
                 "bf16": HFBackbone(resolved, "cpu", "bfloat16")}
    load_start = os.getloadavg()
    agree = agreement(backbones, args.quick)
    pool = [t for ids in backbones["fp32"].encode([user_turn(q) for q in benign_questions() * 40]) for t in ids]
    timings = speed(backbones, pool, args.quick)
    print_table("service forward, medians (ms)", timings)
    for key in ("held_out", "benign_questions"):
        print(f"\n{key}: n={agree[key]['n']}")
        for name in ("fp32", *FASTER):
            print(f"  {name}: {agree[key][name]}")
    payload = {"benchmark": "cpu_dtype", "target": "cpu", "backbone": backbones["fp32"].info.model_id,
               "cpu_has_native_bf16": cpu_has_native_bf16(), "torch_threads": torch.get_num_threads(),
               "hardware": {**hardware(), "load_average_start": load_start, "load_average_end": os.getloadavg()},
               "quick": args.quick, "agreement": agree, "speed": timings}
    args.out.mkdir(parents=True, exist_ok=True)
    name = "cpu_dtype_cpu" + ("" if args.backbone == "embedded" else f"_{resolved.slug}") + ("_quick" if args.quick else "")
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

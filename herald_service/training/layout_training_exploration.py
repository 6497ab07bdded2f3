"""An exploration, not a held-out run: does fitting on prompts in some layouts teach the probe to read layouts it
never saw? (docs/eval/trimmed_views.md, "Exploration: layouts in training".)

Ten runs of a reading of set-apart words (:func:`~herald_service.prompt_text.spread_out_reading`) each closed the
layouts they named, and each re-tester then passed requests in others. The other road is to fit the probe on
layout-augmented rows. This compares, on one proxy recipe (not the shipped one: no written questions, no wrapped
rows, a random 500 + 500 corpus rows), a probe fitted without layout rows and one fitted with the same prompts also
in :data:`TRAIN_LAYOUTS`, and scores both, and the shipped probe, on other prompts in :data:`TRAIN_LAYOUTS` and in
:data:`HELD_LAYOUTS` (the tenth run's re-tester's layouts, never in training), alone and with the served
views (:func:`~herald_service.trimmed_views.views_beside`: the highest of the prompt and its views).

Rows: the format check's plain rows (:func:`~.format_wrapped.format_sets`: 120 held-out AdvBench / HarmBench
requests, 120 benign instruction prompts the per-source cap leaves out; benign ones of over 60 words dropped), the
first half of each label layout-augmented in training, the second half scored; base rows: 500 harmful and 500 benign
corpus rows of under 1,500 characters outside those, drawn with ``--seed``. Both fitted probes are
:class:`~.methods.HeraldMethod` with logistic directions (the shipped estimator) and groups per row set and label.

Run ``python -m herald_service.training.layout_training_exploration <data folder> <out.json> [--seed 0]``; the
backbone and shipped probe are the configured ones (``HERALD_BACKBONE``, ``HERALD_PROBE``); states are cached as
``herald fit``'s (``HERALD_CACHE_DIR``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from sklearn.metrics import roc_auc_score

from herald_service.training.corpus import expand_data, load_corpus
from herald_service.training.format_wrapped import format_sets
from herald_service.training.layouts import HELD_LAYOUTS, TRAIN_LAYOUTS


def _groups(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack ``(harmful states, benign states)`` row sets into ``X``, ``y`` (1 harmful) and groups (set x label)."""
    X, y, g = [], [], []
    for k, (harmful, benign) in enumerate(parts):
        X += [harmful, benign]
        y += [np.ones(len(harmful), int), np.zeros(len(benign), int)]
        g += [np.full(len(harmful), 2 * k + 1), np.full(len(benign), 2 * k)]
    return np.concatenate(X), np.concatenate(y), np.concatenate(g)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m herald_service.training.layout_training_exploration",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from herald_service.config import BackboneSettings, training_cache_dir
    from herald_service.engine.runtime import load_runtime
    from herald_service.training.extract import StateCache, extract_states
    from herald_service.training.methods import HeraldMethod
    from herald_service.trimmed_views import views_beside
    from herald_service.types import user_turn

    examples = load_corpus(expand_data([args.data]))
    sets = format_sets(examples, 150, args.seed)
    harmful = [r["prompt"].strip() for r in sets["format_harmful_plain.jsonl"]]
    benign = [r["prompt"].strip() for r in sets["format_benign_plain.jsonl"] if len(r["prompt"].split()) <= 60]
    held = set(harmful) | set(benign)
    pool = [e for e in examples if e.prompt.strip() not in held and len(e.prompt) < 1500]
    order = np.random.default_rng(args.seed).permutation(len(pool))
    base = {label: [pool[j].prompt for j in order if pool[j].label == label][:500] for label in (1, 0)}
    train = (harmful[:len(harmful) // 2], benign[:len(benign) // 2])
    test = (harmful[len(harmful) // 2:], benign[len(benign) // 2:])

    runtime = load_runtime(BackboneSettings())
    backbone, shipped = runtime.backbone, runtime.probe
    cache = StateCache(training_cache_dir(), backbone)

    def states(texts: list[str]) -> np.ndarray:
        return extract_states(backbone, [user_turn(t) for t in texts], cache)[0]

    def pair(texts: tuple[list[str], list[str]], layout: Callable[[str], str] = lambda p: p):
        return states([layout(p) for p in texts[0]]), states([layout(p) for p in texts[1]])

    control = [(states(base[1]), states(base[0])), pair(train)]
    augmented = control + [pair(train, layout) for layout in TRAIN_LAYOUTS.values()]
    fitted = {}
    for name, parts in (("refit_without_layouts", control), ("refit_with_train_layouts", augmented)):
        method = HeraldMethod(direction_estimator="logistic").fit(*_groups(parts))
        fitted[name] = (method.score, float(method.threshold_))
    fitted["shipped"] = (lambda X: shipped.predict(X).scores, 0.5)

    results: dict = {}
    layouts = {"as_written": lambda p: p, **TRAIN_LAYOUTS, **HELD_LAYOUTS}
    for layout_name, layout in layouts.items():
        texts = [[layout(p) for p in part] for part in test]
        views = [[[v for _, v in views_beside(t)] for t in part] for part in texts]
        whole = [states(part) for part in texts]
        flat = [v for part in views for vs in part for v in vs]
        view_states = dict(zip(flat, states(flat))) if flat else {}
        row = {"kind": "written" if layout_name == "as_written" else
               "train" if layout_name in TRAIN_LAYOUTS else "held_out",
               "n_harmful": len(texts[0]), "n_benign": len(texts[1]),
               "with_views": [sum(bool(vs) for vs in part) for part in views]}
        for name, (score, threshold) in fitted.items():
            alone = [score(X) for X in whole]
            best = [np.array([max([s, *(float(score(view_states[v][None])[0]) for v in vs)])
                              for s, vs in zip(part_scores, part_views)])
                    for part_scores, part_views in zip(alone, views)]
            y = np.r_[np.ones(len(alone[0])), np.zeros(len(alone[1]))]
            row[name] = {"threshold": threshold,
                         "recall": float(np.mean(alone[0] >= threshold)), "fpr": float(np.mean(alone[1] >= threshold)),
                         "auroc": float(roc_auc_score(y, np.r_[alone[0], alone[1]])),
                         "recall_with_views": float(np.mean(best[0] >= threshold)),
                         "fpr_with_views": float(np.mean(best[1] >= threshold))}
        results[layout_name] = row
        print(layout_name, {k: v for k, v in row.items() if isinstance(v, dict)}, file=sys.stderr)
    report = {"what": "exploration (training-side proxy recipe; not a held-out run)", "seed": args.seed,
              "train_rows": {"base_harmful": len(base[1]), "base_benign": len(base[0]),
                             "layout_harmful": len(train[0]), "layout_benign": len(train[1])},
              "results": results}
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

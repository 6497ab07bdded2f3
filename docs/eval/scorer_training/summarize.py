"""Per-seed LOSO numbers of every scorer recipe -> docs/eval/scorer_training/summary.json (read by `herald report`).

Usage: python summarize.py OUT.json SPLIT_SEED REF_RESULTS.json "RAW_GLOB" [SPLIT_SEED REF "GLOB" ...]
(REF: the `herald eval` JSON of the same split whose latent baselines each fold is counted against)
"""
import glob
import json
import sys

import numpy as np

from herald_service.training.methods import LATENT_BASELINES

ORDER = ("current", "l2-inner", "early-stop", "gentle", "label-smooth", "logreg-init", "logreg-embed")
"""Candidates in the order of docs/eval/scorer_training.md; the fixed-lambda ``l2=`` grid (a diagnostic, never eligible:
it is read off the outer folds) comes after them."""


def split_block(seed, ref_path, pattern):
    ref = json.load(open(ref_path))
    best = {src: max(f["methods"][m]["with_contrast"]["auroc"]["value"] for m in LATENT_BASELINES if m in f["methods"])
            for src, f in ref["loso"]["folds"].items()}
    rows = [r for p in sorted(glob.glob(pattern)) for r in json.load(open(p))]
    recipes = {}
    for r in sorted(rows, key=lambda r: r["seed"]):
        folds = {s: v["auroc"] for s, v in r["folds"].items() if v["auroc"] is not None}
        block = recipes.setdefault(r["recipe"], {k: [] for k in ("seeds", "f1", "auroc", "false_positive_rate", "recall",
                                                                 "folds_at_best_latent", "mean_fold_auroc")})
        block["seeds"].append(r["seed"])
        for key, value in (("f1", r["f1"]), ("auroc", r["auroc"]), ("false_positive_rate", r["fpr"]), ("recall", r["recall"]),
                           ("folds_at_best_latent", sum(a >= best[s] - 1e-9 for s, a in folds.items())),
                           ("mean_fold_auroc", float(np.mean(list(folds.values()))))):
            block[key].append(round(float(value), 5) if key != "folds_at_best_latent" else int(value))
        chosen = [v["info"] for v in r["folds"].values() if v["info"]]
        if chosen:
            key = "lam" if "lam" in chosen[0] else "steps"
            block.setdefault("chosen_" + key, []).extend(c[key] for c in chosen)
        block["n_folds"] = len(folds)
    rank = lambda name: (ORDER.index(name), 0.0) if name in ORDER else (len(ORDER), float(name.split("=")[1]))  # noqa: E731
    return {"seed": seed, "baselines_from": ref_path, "recipes": {k: recipes[k] for k in sorted(recipes, key=rank)}}


if __name__ == "__main__":
    out, args = sys.argv[1], sys.argv[2:]
    splits = [split_block(int(args[i]), args[i + 1], args[i + 2]) for i in range(0, len(args), 3)]
    old = json.load(open(out)) if glob.glob(out) else {}
    old["splits"] = splits
    json.dump(old, open(out, "w"), indent=1)
    print(out)

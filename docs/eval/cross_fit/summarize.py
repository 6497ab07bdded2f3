"""Seed means and the rule's criteria for the candidates of docs/eval/cross_fit.md (both studies).

Usage: python docs/eval/cross_fit/summarize.py REFERENCE CANDIDATE[,CANDIDATE...] SEED_FILE... > summary.json

Each SEED_FILE is one `herald recipes` output (one fit seed) holding the reference recipe and the candidates. Prints
JSON: per recipe the per-seed and mean LOSO pooled F1 and AUROC, jailbreak-wrapped recall (n=40, n=120), held-out
instruction/chat folds at <= 10% FPR, the largest held-out sensitive-set FPR (first file's fit seed), and for each
candidate the criteria (a)-(d) of the rule.
"""

import json
import statistics
import sys

from herald_service.training.source_kinds import INSTRUCTION_BENIGN, in_group


def per_seed(block: dict) -> dict:
    folds = block["loso_folds"]
    instruction = [f["false_positive_rate"]["value"] for s, f in folds.items()
                   if in_group(s, INSTRUCTION_BENIGN) and "false_positive_rate" in f]
    return {
        "f1": block["loso_pooled"]["f1"]["value"],
        "auroc": block["loso_pooled"]["auroc"]["value"],
        "recall_n40": block["jailbreak_wrapped"]["recall"]["value"],
        "recall_n120": block["jailbreak_wrapped_enlarged"]["recall"]["value"],
        "instruction_folds_le_10pct": sum(v <= 0.10 + 1e-12 for v in instruction),
        "instruction_folds": len(instruction),
        "max_sensitive_fpr": max(s["false_positive_rate"]["value"] for s in block["held_out_sets"].values()),
    }


def main() -> None:
    reference, candidates, files = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
    runs = [json.load(open(path)) for path in files]
    out = {"files": files, "fit_seeds": [run["fit_seed"] for run in runs], "recipes": {}}
    for name in [reference, *candidates]:
        seeds = [per_seed(run["results"][name]) for run in runs]
        mean = {k: statistics.fmean(s[k] for s in seeds) for k in seeds[0] if k != "max_sensitive_fpr"}
        mean["max_sensitive_fpr_seed0"] = seeds[0]["max_sensitive_fpr"]
        out["recipes"][name] = {"per_seed": seeds, "mean": mean}
    ref = out["recipes"][reference]
    for name in candidates:
        cand = out["recipes"][name]
        gains = {}
        for metric in ("f1", "auroc"):
            diffs = [c[metric] - r[metric] for c, r in zip(cand["per_seed"], ref["per_seed"])]
            spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
            gains[metric] = {"mean": statistics.fmean(diffs), "std": spread,
                             "clear": statistics.fmean(diffs) > 0.01 and statistics.fmean(diffs) > 2 * spread}
        m, rm = cand["mean"], ref["mean"]
        cand["criteria"] = {
            "a": bool(gains["f1"]["mean"] >= 0 and gains["auroc"]["mean"] >= 0
                      and (gains["f1"]["clear"] or gains["auroc"]["clear"])),
            "b": bool(m["recall_n40"] >= 0.95 and m["recall_n120"] >= 0.95),
            "c": bool(m["instruction_folds_le_10pct"] >= rm["instruction_folds_le_10pct"]),
            "d": bool(m["max_sensitive_fpr_seed0"] <= rm["max_sensitive_fpr_seed0"] + 0.03),
        }
        cand["paired_gain"] = gains
        cand["passes"] = all(cand["criteria"].values())
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

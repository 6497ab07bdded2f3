"""The scorer-training section of ``docs/EVALUATION.md`` (``herald report``), from
``docs/eval/scorer_training/summary.json``: the same features and 288-parameter scorer trained by other recipes,
judged on leave-one-source-out over several scorer-initialisation seeds (docs/eval/scorer_training.md has the
candidates, the rule fixed before the runs, and the commands).

Summary layout: ``{"splits": [{"seed", "baselines_from", "recipes": {name: {"seeds", "f1", "auroc",
"false_positive_rate", "recall", "folds_at_best_latent", "mean_fold_auroc", "n_folds"}}}]}``; every list has one
value per initialisation seed, in ``seeds`` order.
"""

from __future__ import annotations

import numpy as np

from herald_service.training.report_markdown import table

CURRENT = "current"
DIAGNOSTIC_PREFIX = "l2="
"""Fixed-strength L2 rows: a grid looked at on the outer folds, so shown but never eligible to win."""
MIN_GAIN = 0.01


def _paired(block: dict, base: dict, key: str) -> np.ndarray:
    """Differences ``block - base`` of ``key`` over the initialisation seeds both ran."""
    theirs = dict(zip(base["seeds"], base[key]))
    return np.array([v - theirs[s] for s, v in zip(block["seeds"], block[key]) if s in theirs])


def beats_by_rule(diffs: list[np.ndarray]) -> bool:
    """The gain rule of docs/eval/scorer_training.md (and docs/eval/direction_estimators.md) on paired differences
    over seeds, one array per metric (F1, AUROC): every mean >= 0, and at least one mean above :data:`MIN_GAIN` and
    above twice the standard deviation (over seeds) of its differences. Fewer than two seeds never pass."""
    if any(len(d) < 2 for d in diffs) or min(d.mean() for d in diffs) < 0:
        return False
    return any(d.mean() > MIN_GAIN and d.mean() > 2 * d.std(ddof=1) for d in diffs)


def winners(split: dict) -> list[str]:
    """Eligible recipes that pass the rule of docs/eval/scorer_training.md against ``current`` on one split.

    Rule: seed-mean pooled F1 and AUROC both >= ``current``'s, and at least one of them higher by more than
    :data:`MIN_GAIN` and by more than twice the standard deviation (over seeds) of the paired difference.
    """
    recipes = split["recipes"]
    base = recipes.get(CURRENT)
    if base is None:
        return []
    out = []
    for name, block in recipes.items():
        if name == CURRENT or name.startswith(DIAGNOSTIC_PREFIX):
            continue
        if beats_by_rule([_paired(block, base, k) for k in ("f1", "auroc")]):
            out.append(name)
    return out


def _spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def split_table(split: dict) -> str:
    """One row per recipe: seed-mean ± std of the pooled LOSO metrics, the paired gain over ``current``, and the fold
    counts against the best latent baseline of the same split."""
    recipes = split["recipes"]
    base = recipes.get(CURRENT)
    head = ["recipe", "init seeds", "pooled F1", "pooled AUROC", "ΔF1 vs current", "ΔAUROC vs current", "FPR", "recall",
            "folds: AUROC >= best latent", "mean fold AUROC"]
    rows = []
    order = [CURRENT] * (base is not None) + [n for n in recipes if n != CURRENT and not n.startswith(DIAGNOSTIC_PREFIX)]
    order += [n for n in recipes if n.startswith(DIAGNOSTIC_PREFIX)]
    for name in order:
        b = recipes[name]
        gains = ["–", "–"]
        if base is not None and name != CURRENT:
            gains = [(lambda d: f"{d.mean():+.3f} ± {d.std(ddof=1):.3f}" if len(d) > 1 else "–")(_paired(b, base, k))
                     for k in ("f1", "auroc")]
        folds = b["folds_at_best_latent"]
        label = f"`{name}`" + (" (diagnostic)" if name.startswith(DIAGNOSTIC_PREFIX) else "")
        rows.append([
            label, str(len(b["seeds"])), _spread(b["f1"]), _spread(b["auroc"]), *gains,
            f"{np.mean(b['false_positive_rate']):.3f}", f"{np.mean(b['recall']):.3f}",
            f"{np.mean(folds):.1f} ({min(folds)}–{max(folds)}) / {b['n_folds']}", f"{np.mean(b['mean_fold_auroc']):.3f}",
        ])
    return table(head, rows)


def section(summary: dict | None, doc: str, results_seed: int | None) -> list[str]:
    """Markdown lines of the section; one line when there is no summary.

    Args:
        doc: path of docs/eval/scorer_training.md relative to the report.
        results_seed: the split seed of the report's results file (its split is the comparison split).
    """
    out = ["## Scorer training recipes (source-held-out)", ""]
    if not summary:
        return out + ["Not in this report: there is no `scorer_training/summary.json` beside the results file "
                      f"([{doc}]({doc})).", ""]
    splits = summary["splits"]
    out += [f"Shows: the same `herald-v1` features and 288-parameter scorer (same LOSO folds, LDA directions, weights "
            "and max-F1 calibration) trained by other recipes, each run with several scorer-initialisation seeds: "
            "pooled LOSO F1 and AUROC as mean ± std over seeds, the gain over the shipped recipe (`current`) paired by "
            "seed, and folds whose AUROC reaches the best latent baseline of the same split. Does not show: the "
            f"recipes' definitions, the rule fixed before the runs and the commands ([{doc}]({doc})), bootstrap "
            "intervals, random-split numbers (saturated), or other backbones.", ""]
    for split in splits:
        won = winners(split)
        first = split["seed"] == results_seed
        verdict = ("Passes the rule (seed-mean F1 and AUROC >= `current`, one of them higher by > 0.01 and > 2 std of "
                   "the paired difference): " + ", ".join(f"`{w}`" for w in won) + "."
                   if won else "No recipe passes the rule (seed-mean F1 and AUROC >= `current`, one of them higher by "
                   "> 0.01 and > 2 std of the paired difference).")
        out += [f"### Split seed {split['seed']}" + (" (the split of the results above; the comparison split)" if first
                                                     else " (a check; selects nothing)"), "",
                f"Latent baselines from `{split['baselines_from']}`. {verdict}", "", split_table(split), ""]
    return out

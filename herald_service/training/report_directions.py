"""The direction-estimator section of ``docs/EVALUATION.md`` (``herald report``), from
``docs/eval/direction_estimators/summary.json``: Herald's trajectory built from per-layer directions of other
estimators (fixed LDA shrinkage, class-mean difference, source-balanced mean difference), everything else shipped,
judged on leave-one-source-out over several scorer-initialisation seeds (docs/eval/direction_estimators.md has the
candidates, the rule fixed before the runs and the commands).

Summary layout: ``{"estimators": {name: {scorer: [{"seed", "f1", "auroc", "d_f1", "d_auroc", "fpr", "recall",
"folds_at_best_latent", "max_instruction_fpr", "mean_instruction_fpr"}, ...]}}}``; ``d_*`` are paired by seed
against the shipped estimator ``lw`` with the shipped scorer recipe ``current``.
"""

from __future__ import annotations

import numpy as np

from herald_service.training.report_scorer import beats_by_rule

SHIPPED = "lw"
SCORER = "current"


def passes(runs: list[dict]) -> bool:
    """The split-0 part of the rule: the scorer study's gain rule (:func:`.report_scorer.beats_by_rule`) on the
    per-seed paired differences ``d_f1`` and ``d_auroc`` against ``lw``."""
    return beats_by_rule([np.array([r[k] for r in runs]) for k in ("d_f1", "d_auroc")])


def _cell(runs: list[dict], key: str, fmt: str = ".3f", pct: bool = False) -> str:
    values = np.array([r[key] for r in runs]) * (100 if pct else 1)
    unit = "%" if pct else ""
    if len(values) > 1:
        return f"{values.mean():{fmt}}{unit} ± {values.std(ddof=1):.3f}{unit}"
    return f"{values[0]:{fmt}}{unit}"


def section(summary: dict | None, doc: str) -> list[str]:
    """Markdown lines of the section; one line when there is no summary.

    Args:
        doc: path of docs/eval/direction_estimators.md relative to the report.
    """
    out = ["## Per-layer direction estimators (source-held-out)", ""]
    if not summary:
        return out + ["Not in this report: there is no `direction_estimators/summary.json` beside the results file "
                      f"([{doc}]({doc})).", ""]
    estimators = summary["estimators"]
    won = [name for name, runs in estimators.items() if name != SHIPPED and passes(runs[SCORER])]
    verdict = (f"Passes the split-0 part of the rule: {', '.join(f'`{w}`' for w in won)}." if won else
               "No estimator passes the rule (seed-mean F1 and AUROC >= the shipped `lw`, one of them higher by > 0.01 "
               "and > 2 std of the paired difference); the shipped Ledoit-Wolf LDA stays.")
    out += ["Shows: Herald with its per-layer directions fitted by other estimators (everything else shipped), on the "
            "LOSO folds of the results above, 5 scorer-initialisation seeds each (`current`: the shipped scorer; "
            "`logreg-embed`: logistic regression on the same seven features, deterministic): pooled F1 and AUROC, the "
            "change against the shipped `lw` paired by seed, the folds reaching the best latent baseline, and the "
            "largest and mean false-positive rate over held-out benign instruction/chat sources. Does not show: the "
            f"estimators' definitions, the rule and the commands ([{doc}]({doc})), a second split (not run: no "
            "estimator passed the first), bootstrap intervals, or other backbones.", "", verdict, ""]
    head = ["estimator", "scorer", "pooled F1", "pooled AUROC", "ΔF1 vs lw", "ΔAUROC vs lw", "FPR", "recall",
            "folds: AUROC >= best latent", "max instruction FPR", "mean instruction FPR"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, scorers in estimators.items():
        for scorer, runs in scorers.items():
            deltas = ["–", "–"] if (name, scorer) == (SHIPPED, SCORER) else [_cell(runs, "d_f1", "+.3f"), _cell(runs, "d_auroc", "+.3f")]
            out.append("| " + " | ".join([
                f"`{name}`", f"`{scorer}`", _cell(runs, "f1"), _cell(runs, "auroc"), *deltas,
                f"{np.mean([r['fpr'] for r in runs]):.3f}", f"{np.mean([r['recall'] for r in runs]):.3f}",
                f"{np.mean([r['folds_at_best_latent'] for r in runs]):.1f}",
                f"{100 * np.mean([r['max_instruction_fpr'] for r in runs]):.1f}%",
                f"{100 * np.mean([r['mean_instruction_fpr'] for r in runs]):.1f}%",
            ]) + " |")
    return out + [""]

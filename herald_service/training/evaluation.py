"""Classification metrics for probes (harmful = positive class)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from sklearn.metrics import f1_score, precision_score, recall_score, roc_auc_score, roc_curve


def tpr_at_fpr(labels: np.ndarray, scores: np.ndarray, max_fpr: float = 0.01) -> float:
    """Highest true-positive rate at a false-positive rate <= ``max_fpr`` on the ROC curve."""
    fpr, tpr, _ = roc_curve(labels, scores)
    ok = fpr <= max_fpr
    return float(tpr[ok].max()) if ok.any() else 0.0


def binary_metrics(labels: np.ndarray, scores: np.ndarray, flagged: np.ndarray) -> dict[str, float | int]:
    """F1, precision (where something is flagged: undefined otherwise, and left out), recall, AUROC and TPR@1%FPR,
    or recall / false-positive rate for a single-class set.

    Args:
        labels: ``(n,)`` 1 = harmful.
        scores: ``(n,)`` continuous scores (higher = more harmful).
        flagged: ``(n,)`` bool decisions at the threshold.
    """
    labels = np.asarray(labels).astype(int)
    flagged = np.asarray(flagged).astype(int)
    out: dict[str, float | int] = {"n": int(len(labels)), "n_harmful": int(labels.sum())}
    if labels.min() == labels.max():
        if labels[0] == 1:
            out["recall"] = float(flagged.mean())
        else:
            out["false_positive_rate"] = float(flagged.mean())
        return out
    out.update(
        f1=float(f1_score(labels, flagged, zero_division=0)),
        recall=float(recall_score(labels, flagged, zero_division=0)),
        false_positive_rate=float(flagged[labels == 0].mean()),
        auroc=float(roc_auc_score(labels, scores)),
        tpr_at_1pct_fpr=tpr_at_fpr(labels, scores, 0.01),
    )
    if flagged.any():
        out["precision"] = float(precision_score(labels, flagged))
    return out


def metrics_by_source(labels: np.ndarray, scores: np.ndarray, flagged: np.ndarray, sources: list[str]) -> dict:
    """``{"pooled": metrics, "per_source": {source: metrics}}``."""
    per = defaultdict(list)
    for i, source in enumerate(sources):
        per[source].append(i)
    return {
        "pooled": binary_metrics(labels, scores, flagged),
        "per_source": {s: binary_metrics(labels[idx], scores[idx], flagged[idx]) for s, idx in sorted(per.items())},
    }

"""Metrics with 95% bootstrap intervals (harmful = positive class).

Every metric is computed by one vectorized function over a matrix of resampled index rows, so the point estimate
and the bootstrap replicates share one definition. Resampling is stratified by label: each replicate keeps the
class counts of the sample, so F1, AUROC and TPR@1%FPR are defined in every replicate.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

DEFAULT_REPLICATES = 1000
MAX_FPR = 0.01


def _rates(labels: np.ndarray, flagged: np.ndarray) -> dict[str, np.ndarray]:
    """Confusion-based metrics of each row. ``labels``, ``flagged``: ``(replicate, n)`` bool."""
    tp = (flagged & labels).sum(1)
    fp = (flagged & ~labels).sum(1)
    fn = (~flagged & labels).sum(1)
    pos = labels.sum(1)
    neg = (~labels).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "f1": np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0),
            "precision": np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), np.nan),  # nothing flagged: undefined
            "recall": np.where(pos > 0, tp / np.maximum(pos, 1), np.nan),
            "false_positive_rate": np.where(neg > 0, fp / np.maximum(neg, 1), np.nan),
        }


def _auroc(pos_scores: np.ndarray, neg_scores: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUROC of each row (ties count one half). Shapes ``(replicate, n_pos)``, ``(replicate, n_neg)``."""
    n_pos, n_neg = pos_scores.shape[1], neg_scores.shape[1]
    ranks = rankdata(np.concatenate([pos_scores, neg_scores], axis=1), axis=1)
    return (ranks[:, :n_pos].sum(1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _tpr_at_fpr(pos_scores: np.ndarray, neg_scores: np.ndarray, max_fpr: float = MAX_FPR) -> np.ndarray:
    """TPR at the strictest threshold whose FPR is <= ``max_fpr``: flag scores above the k-th largest benign score.

    With ``k = floor(max_fpr * n_neg)`` benign prompts allowed above the threshold, the threshold is the
    (k+1)-th largest benign score and a harmful prompt counts only when strictly above it.
    """
    return (pos_scores > _fpr_cut(neg_scores, max_fpr)[:, None]).mean(1)


def _fpr_cut(neg_scores: np.ndarray, max_fpr: float) -> np.ndarray:
    """``(replicate,)`` thresholds of :func:`_tpr_at_fpr`'s rule: each row's (k+1)-th largest benign score, ``k =
    floor(max_fpr * n_neg)``; a score strictly above it is flagged."""
    allowed = int(np.floor(max_fpr * neg_scores.shape[1]))
    return -np.sort(-neg_scores, axis=1)[:, allowed]


def metrics_matrix(labels: np.ndarray, scores: np.ndarray, flagged: np.ndarray, index: np.ndarray) -> dict[str, np.ndarray]:
    """All metrics for each row of ``index`` ``(replicate, n)`` (indices into the 1-D inputs).

    Single-class samples get only ``recall`` (harmful) or ``false_positive_rate`` (benign).
    """
    y = labels[index].astype(bool)
    out = _rates(y, flagged[index].astype(bool))
    if labels.min() == labels.max():
        return {"recall": out["recall"]} if labels[0] == 1 else {"false_positive_rate": out["false_positive_rate"]}
    # Stratified resampling keeps the class of each column fixed, so columns split cleanly by label.
    pos_cols = labels[index[0]] == 1
    s = scores[index]
    out["auroc"] = _auroc(s[:, pos_cols], s[:, ~pos_cols])
    out["tpr_at_1pct_fpr"] = _tpr_at_fpr(s[:, pos_cols], s[:, ~pos_cols])
    return out


def stratified_resamples(labels: np.ndarray, replicates: int, seed: int) -> np.ndarray:
    """``(replicates, n)`` bootstrap index rows; column j always holds a row of the same label as row j's label
    in sorted-by-label order, so every replicate has the sample's class counts."""
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    cols = []
    for value in np.unique(labels):
        members = order[labels[order] == value]
        cols.append(members[rng.integers(0, len(members), size=(replicates, len(members)))])
    return np.concatenate(cols, axis=1)


def bootstrap_metrics(
    labels: np.ndarray,
    scores: np.ndarray,
    flagged: np.ndarray,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Point estimate and 95% percentile interval of each metric.

    Args:
        labels: ``(n,)`` 1 = harmful, 0 = benign.
        scores: ``(n,)`` continuous scores, higher = more harmful.
        flagged: ``(n,)`` bool decisions.
        replicates: bootstrap resamples (stratified by label).

    Returns:
        ``{metric: {"value", "lo", "hi"}}`` plus ``{"n": {"value": n}, "n_harmful": ...}``. Two-class samples get
        f1, precision, recall, false_positive_rate, auroc, tpr_at_1pct_fpr; one-class samples recall or
        false_positive_rate only. Precision is left out where nothing is flagged (it is undefined there; it read
        ``0.0 [0, 0]``, tester), and its interval is over the replicates that flag something.

    Raises:
        ValueError: for an empty sample or mismatched lengths.
    """
    labels = np.asarray(labels).astype(int)
    scores = np.asarray(scores, dtype=np.float64)
    flagged = np.asarray(flagged).astype(bool)
    if len(labels) == 0 or not (len(labels) == len(scores) == len(flagged)):
        raise ValueError(f"need equal, non-empty lengths; got {len(labels)}, {len(scores)}, {len(flagged)}")
    order = np.argsort(labels, kind="stable")
    point = {k: float(v[0]) for k, v in metrics_matrix(labels, scores, flagged, order[None, :]).items()}
    boot = metrics_matrix(labels, scores, flagged, stratified_resamples(labels, replicates, seed))
    out: dict[str, dict[str, float]] = {"n": {"value": int(len(labels))}, "n_harmful": {"value": int(labels.sum())}}
    for name, value in point.items():
        if np.isnan(value) or np.isnan(boot[name]).all():
            continue  # not computable on this sample: absent, as a one-class sample's F1 is
        lo, hi = np.nanpercentile(boot[name], [2.5, 97.5])
        out[name] = {"value": value, "lo": float(lo), "hi": float(hi)}
    return out


OPERATING_FPRS = (0.01, 0.05, 0.10)
"""False-positive rates at which :func:`operating_points` compares methods: 1% (TPR@1%FPR's), 5% (about the shipped
probe's pooled source-held-out rate, docs/EVALUATION.md) and 10% (issue 3's limit for unseen instruction sources)."""


def _at_fpr(pos: np.ndarray, neg: np.ndarray, max_fpr: float) -> dict[str, np.ndarray]:
    """Recall, F1 and false-positive rate of each row at :func:`_tpr_at_fpr`'s threshold (flag scores strictly above
    the (k+1)-th largest benign score, ``k = floor(max_fpr * n_neg)``). Shapes ``(replicate, n_pos)``,
    ``(replicate, n_neg)``."""
    cut = _fpr_cut(neg, max_fpr)
    tp = (pos > cut[:, None]).sum(1)
    fp = (neg > cut[:, None]).sum(1)
    n_pos = pos.shape[1]
    return {"recall": tp / n_pos, "f1": 2 * tp / np.maximum(tp + fp + n_pos, 1), "false_positive_rate": fp / neg.shape[1]}


def _best_f1(pos: np.ndarray, neg: np.ndarray) -> dict[str, np.ndarray]:
    """The highest F1 of each row over every threshold (flag ``score >= t``; ties move together), with its recall and
    false-positive rate. Shapes ``(replicate, n_pos)``, ``(replicate, n_neg)``."""
    scores = np.concatenate([pos, neg], axis=1)
    harmful = np.concatenate([np.ones_like(pos, dtype=bool), np.zeros_like(neg, dtype=bool)], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")
    s = np.take_along_axis(scores, order, axis=1)
    tp = np.cumsum(np.take_along_axis(harmful, order, axis=1), axis=1)
    fp = np.arange(1, scores.shape[1] + 1)[None, :] - tp
    last_of_tie = np.concatenate([s[:, 1:] != s[:, :-1], np.ones((len(s), 1), dtype=bool)], axis=1)
    n_pos = pos.shape[1]
    f1 = np.where(last_of_tie, 2 * tp / (tp + fp + n_pos), -1.0)
    best = np.argmax(f1, axis=1)
    rows = np.arange(len(s))
    return {"f1": f1[rows, best], "recall": tp[rows, best] / n_pos, "false_positive_rate": fp[rows, best] / neg.shape[1]}


def _paired_index(labels: np.ndarray, replicates: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(1 + replicates, n)`` index rows, the sample itself (sorted by label) first and then
    :func:`stratified_resamples`, and the ``(n,)`` bool mask of their harmful columns: one set of rows that every
    method is scored on, so that differences between methods are paired."""
    index = np.concatenate([np.argsort(labels, kind="stable")[None, :], stratified_resamples(labels, replicates, seed)])
    return index, labels[index[0]] == 1


def _interval(row: np.ndarray) -> dict[str, float]:
    """``{"value", "lo", "hi"}`` of a row from :func:`_paired_index`'s rows: the sample's value and the 95% percentile
    interval of the resamples'."""
    lo, hi = np.percentile(row[1:], [2.5, 97.5])
    return {"value": float(row[0]), "lo": float(lo), "hi": float(hi)}


def operating_points(labels: np.ndarray, scores: dict[str, np.ndarray], fprs: tuple[float, ...] = OPERATING_FPRS,
                     reference: str | None = None, replicates: int = DEFAULT_REPLICATES, seed: int = 0) -> dict:
    """Methods compared at the same false-positive rate, with thresholds chosen on the scored rows themselves.

    A diagnostic of ranking at an operating point, not a deployable result: each threshold is read off the very rows
    it is scored on (as TPR@1%FPR's is), so it says what a method's scores allow, not what its calibrated threshold
    gives. Every method is resampled with the same stratified index rows (seed ``seed``), so the differences against
    ``reference`` are paired.

    Args:
        labels: ``(n,)`` 1 = harmful; both classes needed.
        scores: method name -> ``(n,)`` float scores (higher = more harmful), all on the same rows.
        fprs: false-positive rates: each method's recall, F1 and actual false-positive rate at the strictest threshold
            whose false-positive rate is <= the rate (:func:`_tpr_at_fpr`'s rule).
        reference: a name of ``scores`` whose paired differences (reference minus each other method) are added.
        replicates: bootstrap resamples (stratified by label).

    Returns:
        ``{"fprs": [...], "methods": {name: {point: {metric: {"value", "lo", "hi"}}}}}``, a point being ``"fpr=0.05"``
        or ``"best_f1"`` (the highest F1 over every threshold); with ``reference``, ``"differences"``: ``{name: {point:
        {"f1"|"recall": {"value", "lo", "hi"}}}}`` of ``reference`` minus ``name``.

    Raises:
        ValueError: a sample without both classes, a score of another length than ``labels``, or an unknown
            ``reference``.
    """
    labels = np.asarray(labels).astype(int)
    if labels.min() == labels.max():
        raise ValueError("operating points need both classes")
    if reference is not None and reference not in scores:
        raise ValueError(f"reference {reference!r} is not one of the scored methods {sorted(scores)}")
    index, pos_cols = _paired_index(labels, replicates, seed)
    values: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for name, score in scores.items():
        score = np.asarray(score, dtype=np.float64)
        if score.shape != labels.shape:
            raise ValueError(f"scores of {name!r} have shape {score.shape}, labels {labels.shape}")
        s = score[index]
        pos, neg = s[:, pos_cols], s[:, ~pos_cols]
        values[name] = {f"fpr={fpr:g}": _at_fpr(pos, neg, fpr) for fpr in fprs}
        values[name]["best_f1"] = _best_f1(pos, neg)
    out: dict = {"fprs": list(fprs), "replicates": replicates,
                 "methods": {name: {point: {metric: _interval(row) for metric, row in metrics.items()}
                                    for point, metrics in points.items()} for name, points in values.items()}}
    if reference is not None:
        out["reference"] = reference
        out["differences"] = {name: {point: {metric: _interval(values[reference][point][metric] - row)
                                             for metric, row in metrics.items() if metric in ("f1", "recall")}
                                     for point, metrics in values[name].items()}
                              for name in scores if name != reference}
    return out


def paired_auroc_differences(labels: np.ndarray, scores: dict[str, np.ndarray], reference: str,
                             replicates: int = DEFAULT_REPLICATES, seed: int = 0) -> dict[str, dict[str, float]]:
    """AUROC of ``reference`` minus that of each other method on the same rows, with a 95% percentile interval over
    paired stratified resamples (every method scored on the same resampled rows), so that a fold where two methods
    differ by less than their sampling noise reads as such.

    Args:
        labels: ``(n,)`` 1 = harmful; both classes needed.
        scores: method name -> ``(n,)`` float scores on the same rows; ``reference`` one of them.

    Returns:
        ``{name: {"value", "lo", "hi"}}`` for every method but ``reference``.

    Raises:
        ValueError: a sample without both classes, or ``reference`` not in ``scores``.
    """
    labels = np.asarray(labels).astype(int)
    if labels.min() == labels.max():
        raise ValueError("an AUROC difference needs both classes")
    if reference not in scores:
        raise ValueError(f"reference {reference!r} is not one of the scored methods {sorted(scores)}")
    index, pos_cols = _paired_index(labels, replicates, seed)

    def aurocs(score: np.ndarray) -> np.ndarray:
        s = np.asarray(score, dtype=np.float64)[index]
        return _auroc(s[:, pos_cols], s[:, ~pos_cols])

    ours = aurocs(scores[reference])
    out = {}
    for name, score in scores.items():
        if name == reference:
            continue
        out[name] = _interval(ours - aurocs(score))
    return out

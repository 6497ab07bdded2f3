"""The 288-parameter trajectory scorer and its threshold calibration (DESIGN section 1.5).

``Linear(7, 32) -> ReLU -> Linear(32, 1, bias=False)``: 7*32 + 32 + 32 = 288 trainable parameters. The output layer
has no bias: the decision offset is the calibrated threshold, ``score = sigmoid(logit - threshold)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)

NUM_FEATURES = 7
HIDDEN_UNITS = 32


class TrajectoryScorer(nn.Module):
    """MLP from standardized features ``(batch, 7)`` float32 to logits ``(batch,)`` float32."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(NUM_FEATURES, HIDDEN_UNITS), nn.ReLU(), nn.Linear(HIDDEN_UNITS, 1, bias=False))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.mlp(features).squeeze(-1)

    def num_parameters(self) -> int:
        """Trainable parameter count (288)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


@contextmanager
def one_intra_op_thread() -> Iterator[None]:
    """Run torch's CPU ops on one thread inside the block, restoring the count after.

    The scorer's steps are a few microseconds of arithmetic each: more threads only add the cost of waking them, and on
    a 2-core machine with another busy process that cost dominated (training a scorer on 240 rows: 15.6 s on two
    threads, 0.24 s on one, the same weights; a session's measurement, 2026-12-02)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_scorer(
    features: np.ndarray,
    labels: np.ndarray,
    sample_weight: np.ndarray | None = None,
    *,
    epochs: int = 400,
    lr: float = 0.02,
    weight_decay: float = 1e-3,
    seed: int = 0,
) -> TrajectoryScorer:
    """Fit the scorer with full-batch Adam on (weighted) binary cross-entropy, on one CPU thread
    (:func:`one_intra_op_thread`).

    The defaults were compared on leave-one-source-out with stronger L2 chosen on training sources, early stopping,
    fewer steps, label smoothing and a logistic-regression start (docs/eval/scorer_training.md): none passed the rule
    fixed beforehand (a gain above 0.01 and above twice its std over initialisation seeds). The seed alone moves these
    defaults' pooled LOSO AUROC between 0.70 and 0.75 on SmolLM2-135M.

    Args:
        features: ``(n_samples, 7)`` standardized features.
        labels: ``(n_samples,)`` 1 = harmful.
        sample_weight: ``(n_samples,)`` non-negative weights (e.g. to balance sources); default uniform.
        epochs: full-batch steps. The problem has 288 parameters, so a few hundred steps converge (seconds).

    Returns:
        The trained scorer in eval mode.
    """
    torch.manual_seed(seed)
    model = TrajectoryScorer()
    x = torch.as_tensor(features, dtype=torch.float32)
    y = torch.as_tensor(labels, dtype=torch.float32)
    w = torch.ones_like(y) if sample_weight is None else torch.as_tensor(sample_weight, dtype=torch.float32)
    w = w / w.mean()
    # Balance the classes so the logit's zero sits between them before calibration.
    pos = float((w * y).sum())
    neg = float((w * (1 - y)).sum())
    w = torch.where(y > 0.5, w * (neg + pos) / (2 * max(pos, 1e-9)), w * (neg + pos) / (2 * max(neg, 1e-9)))
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = nn.BCEWithLogitsLoss(reduction="none")
    model.train()
    with one_intra_op_thread():
        for _ in range(epochs):
            opt.zero_grad()
            loss = (loss_fn(model(x), y) * w).mean()
            loss.backward()
            opt.step()
    return model.eval()


def calibrate_threshold(
    logits: np.ndarray, labels: np.ndarray, method: str = "max_f1", target_fpr: float = 0.01
) -> float:
    """Choose the decision threshold on held-out logits.

    Args:
        logits: ``(n,)`` scorer outputs on calibration prompts not used to fit the scorer.
        labels: ``(n,)`` 1 = harmful.
        method: ``"max_f1"`` (default): the threshold with the highest F1; ``"target_fpr"``: the lowest threshold
            whose benign false-positive rate is <= ``target_fpr`` (a warning is logged where the calibration part has
            too few benign prompts to measure that rate: fewer than ``1 / target_fpr``).

    Returns:
        A threshold t; a prompt is flagged when ``logit >= t``. Midpoints between neighbouring logits are used, so the
        choice does not sit exactly on a calibration sample.

    Raises:
        ValueError: for an unknown method or a calibration set missing a class.
    """
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    if labels.all() or not labels.any():
        raise ValueError("calibration needs both classes")
    values = np.unique(logits)
    candidates = np.concatenate([[values[0] - 1.0], (values[:-1] + values[1:]) / 2, [values[-1] + 1.0]])
    flagged = logits[None, :] >= candidates[:, None]
    tp = (flagged & labels).sum(1)
    fp = (flagged & ~labels).sum(1)
    fn = (~flagged & labels).sum(1)
    if method == "max_f1":
        f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
        return float(candidates[int(np.argmax(f1))])
    if method == "target_fpr":
        benign = int((~labels).sum())
        if 0 < target_fpr < 1 / benign:  # 8 benign rows and 1%: a threshold for no false positive, silently (tester)
            log.warning("the calibration part holds %d benign prompts: one false positive among them is %.1f%%, above "
                        "the target false-positive rate %.2g%%, so the threshold is set for none; give more benign "
                        "prompts for a threshold at that rate", benign, 100 / benign, 100 * target_fpr)
        fpr = fp / max(benign, 1)
        ok = np.nonzero(fpr <= target_fpr)[0]
        return float(candidates[ok[0]])
    raise ValueError(f"unknown threshold method {method!r}; use 'max_f1' or 'target_fpr'")

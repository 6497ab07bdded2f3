"""The HERALD probe as a scikit-learn-style estimator: states in, verdicts out.

Shapes: ``X`` is ``(n_samples, n_layers, d_model)`` last-token residual states; ``y`` is ``(n_samples,)`` with
1 = harmful, 0 = benign.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import expit

from herald_service.probes.directions import DIRECTION_ESTIMATORS, LayerDirections, fit_directions, peak_monotonicity_layer
from herald_service.probes.features import (
    FEATURE_SET, FeatureStats, compute_features, get_feature_set, onset_layers, row_sums,
)
from herald_service.probes.scorer import TrajectoryScorer, calibrate_threshold, train_scorer
from herald_service.types import ProbeOutput


@dataclass(frozen=True)
class FittedProbe:
    """Everything a served probe needs; :mod:`.artifact` saves and loads exactly this.

    ``feature_set`` names the trajectory features the scorer was trained on (:data:`~.features.FEATURE_SETS`);
    :meth:`features` and :meth:`predict` compute exactly that set. ``target_fpr`` is the false-positive rate (a share
    of the calibration part's benign prompts) the threshold was set for when ``threshold_method`` is ``"target_fpr"``,
    and None otherwise; it is recorded, not used to score.
    """

    directions: LayerDirections
    feature_stats: FeatureStats
    scorer: TrajectoryScorer
    threshold: float
    threshold_method: str
    peak_layer: int
    feature_set: str = FEATURE_SET
    target_fpr: float | None = None

    def __post_init__(self) -> None:
        get_feature_set(self.feature_set)  # an unknown name fails here, not at the first request

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Names of the seven features, in column order."""
        return get_feature_set(self.feature_set).names

    def features(self, s: np.ndarray) -> np.ndarray:
        """This probe's features ``(batch, 7)`` float64 of trajectories ``s`` ``(batch, layer)``."""
        return compute_features(s, self.feature_set)

    def trajectories(self, states: np.ndarray | torch.Tensor) -> np.ndarray:
        """Normalized projections ``(batch, layer)`` of states ``(batch, layer, d_model)``."""
        return self.directions.project(states)

    def logits(self, features: np.ndarray) -> np.ndarray:
        """Scorer outputs ``(batch,)`` float64 for raw features ``(batch, 7)``.

        Computed in numpy from the scorer's weights: for a 288-parameter MLP, torch's per-call dispatch cost more
        than the arithmetic (20 of 32 ms per batch in ``benchmarks/overhead.py`` profiling). Products and
        :func:`~herald_service.probes.features.row_sums` rather than matrix products, so a row's logit is the same
        bits whatever the batch: BLAS picks its kernel and blocking by the batch's size, and a logit moved by up to
        1e-14 between a prompt scored alone and in a batch (re-test of the batch-invariant forward). 70 us for 64
        rows against 7 us, on a batch of seconds.
        """
        w1, b1, w2 = self._weights
        standardized = self.feature_stats.transform(features).astype(np.float64)
        hidden = np.maximum(row_sums(standardized[:, None, :] * w1) + b1, 0.0)
        return row_sums(hidden * w2[0])

    @functools.cached_property
    def _weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        state = {k: v.detach().cpu().double().numpy() for k, v in self.scorer.state_dict().items()}
        return state["mlp.0.weight"], state["mlp.0.bias"], state["mlp.2.weight"]

    def predict(self, states: np.ndarray | torch.Tensor) -> ProbeOutput:
        """Score states ``(batch, layer, d_model)``; see :class:`herald_service.types.ProbeOutput`."""
        return self.predict_trajectories(self.trajectories(states))

    def predict_trajectories(self, s: np.ndarray) -> ProbeOutput:
        """Score normalized projection trajectories ``(batch, layer)`` float64 (:meth:`trajectories`, or
        ``directions.normalize`` of projections computed on the device).

        Raises:
            ValueError: non-finite trajectories (:func:`~.features.compute_features`) or logits: a score that is not a
                number must not be served as "allowed" (NaN >= 0.5 is false).
        """
        features = self.features(s)
        logits = self.logits(features)
        if not np.isfinite(logits).all():
            raise ValueError("the probe's scorer gave a non-finite logit")
        scores = expit(logits - self.threshold)  # 1 / (1 + e^-x) without overflow warnings for a large |x|
        return ProbeOutput(s, features, logits, scores, scores >= 0.5, onset_layers(s), self.threshold, self.feature_names)


def balanced_weights(groups: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``(n,)`` float64 weights giving every group (e.g. source x label) the same total weight within its class,
    and each class the same total weight; mean 1."""
    counts = Counter(groups.tolist())
    per_label = Counter(labels[np.unique(groups, return_index=True)[1]].tolist())
    w = np.array([1.0 / (counts[g] * per_label[int(y)]) for g, y in zip(groups, labels)])
    return w * len(w) / w.sum()


def calibration_mask(groups: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean ``(n_samples,)`` mask of the rows held out for threshold calibration.

    ``round(fraction x size)`` rows of every group (e.g. source x label) are drawn with ``seed``; groups of one row
    stay in the fitting part.
    """
    rng = np.random.default_rng(seed)
    calibration = np.zeros(len(groups), dtype=bool)
    for group in np.unique(groups):
        members = np.nonzero(groups == group)[0]
        rng.shuffle(members)
        take = int(round(len(members) * fraction))
        if len(members) >= 2:
            calibration[members[:take]] = True
    return calibration


class HeraldProbe:
    """Estimator that fits a :class:`FittedProbe` (directions, feature stats, scorer, threshold, peak layer).

    Recipe: per-layer directions are fitted on the ``fit`` part of the training data (``direction_estimator``; the
    logistic one weights the fit rows with :func:`balanced_weights` over ``groups``); the scorer on the
    trajectories of the same part; the threshold on a disjoint calibration part (``calibration_fraction``),
    stratified by ``groups`` (e.g. source x label) so every source is represented in both.

    Args:
        direction_estimator: a name in :data:`~.directions.DIRECTION_ESTIMATORS` (default: the first, ``lda``;
            docs/eval/direction_estimators.md compares them).
        shrinkage: LDA shrinkage (``"auto"``: Ledoit-Wolf), for the ``lda`` estimator.
        calibration_fraction: share of training rows held out for threshold calibration.
        threshold_method: ``"max_f1"`` or ``"target_fpr"``.
        target_fpr: used by ``"target_fpr"``.
        seed: split and scorer-initialization seed.
        feature_set: trajectory features the scorer is trained on (a name in :data:`~.features.FEATURE_SETS`).
    """

    def __init__(
        self,
        shrinkage: str | float = "auto",
        calibration_fraction: float = 0.25,
        threshold_method: str = "max_f1",
        target_fpr: float = 0.01,
        seed: int = 0,
        feature_set: str = FEATURE_SET,
        direction_estimator: str = DIRECTION_ESTIMATORS[0],
    ) -> None:
        self.direction_estimator = direction_estimator
        self.shrinkage = shrinkage
        self.calibration_fraction = calibration_fraction
        self.threshold_method = threshold_method
        self.target_fpr = target_fpr
        self.seed = seed
        self.feature_set = feature_set

    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        groups: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> "HeraldProbe":
        """Fit on states ``X`` ``(n_samples, n_layers, d_model)`` and labels ``y`` ``(n_samples,)``.

        Args:
            groups: ``(n_samples,)`` strata for the calibration split (default: the labels).
            sample_weight: ``(n_samples,)`` weights for the scorer loss (e.g. inverse source frequency).

        Returns:
            self, with ``fitted_`` (a :class:`FittedProbe`) and ``calibration_index_`` set.

        Raises:
            ValueError: a class missing from the calibration part or with fewer than 2 rows in the fit part, naming it;
                or an unknown direction estimator.
        """
        y = np.asarray(y).astype(int)
        groups = y.astype(str) if groups is None else np.asarray(groups)
        calibration = calibration_mask(groups, self.calibration_fraction, self.seed)
        fit_rows = ~calibration
        for label, name in ((1, "harmful"), (0, "benign")):
            if not (y[calibration] == label).any():
                raise ValueError(f"no {name} row in the calibration part: it takes a quarter of each (source, label) group"
                                 f" of two or more training rows; give more {name} prompts per source")
            if (y[fit_rows] == label).sum() < 2:
                raise ValueError(f"{(y[fit_rows] == label).sum()} {name} rows left to fit the directions after the"
                                 f" calibration part; need at least 2: give more {name} prompts")
        directions = fit_directions(X[fit_rows], y[fit_rows], self.shrinkage, estimator=self.direction_estimator,
                                    sample_weight=balanced_weights(groups[fit_rows], y[fit_rows]))
        s_fit = directions.project(X[fit_rows])
        features_fit = compute_features(s_fit, self.feature_set)
        stats = FeatureStats.fit(features_fit)
        weights = None if sample_weight is None else np.asarray(sample_weight)[fit_rows]
        scorer = train_scorer(stats.transform(features_fit), y[fit_rows], weights, seed=self.seed)
        partial = FittedProbe(directions, stats, scorer, 0.0, self.threshold_method,
                              peak_monotonicity_layer(s_fit, y[fit_rows]), self.feature_set)
        calib_logits = partial.logits(partial.features(directions.project(X[calibration])))
        threshold = calibrate_threshold(calib_logits, y[calibration], self.threshold_method, self.target_fpr)
        self.fitted_ = FittedProbe(directions, stats, scorer, threshold, self.threshold_method, partial.peak_layer,
                                   self.feature_set,
                                   self.target_fpr if self.threshold_method == "target_fpr" else None)
        self.calibration_index_ = np.nonzero(calibration)[0]
        return self

    def predict(self, X: np.ndarray) -> ProbeOutput:
        """Verdicts for states ``X`` ``(n_samples, n_layers, d_model)``."""
        return self.fitted_.predict(X)

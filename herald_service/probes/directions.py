"""Per-layer harm directions and normalized projections (DESIGN section 1.3).

Shapes: ``states`` ``(batch, layer, d_model)``; directions ``(layer, d_model)``; centers and scales ``(layer,)``.

Two estimators fit the direction of each decoder layer (:data:`DIRECTION_ESTIMATORS`):

- ``"lda"`` (the default): DESIGN's closed-form LDA with Ledoit-Wolf shrinkage; unweighted.
- ``"logistic"``: L2 logistic regression on the standardized states, ``C = 0.1``, with the caller's sample weights
  (source-balanced in ``herald fit``); the ``logreg_last`` baseline's estimator, fitted at every layer. Convex and
  deterministic (L-BFGS), not closed form. On leave-one-source-out with SmolLM2 it raises Herald's pooled AUROC from
  0.73 to 0.84, but a probe fitted with it misses more jailbreak-wrapped harmful requests (75% vs 90%), and with
  Gemma-3-270M it lowers AUROC (0.76 to 0.73); so it is an option of ``herald fit``, not the default
  (docs/eval/direction_estimators.md, rounds 2-3 and the second-backbone check).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

# scikit-learn is imported where a direction is fitted: serving and every CLI check made before a fit loaded it for
# nothing (about 1 s of each `herald serve` start and of each early error of fit/eval)

STORAGE_DTYPE = np.float16
"""Directions are stored in fp16: L x d x 2 bytes (262,144 bytes for 32 x 4096)."""
DIRECTION_ESTIMATORS = ("lda", "logistic")
"""Per-layer direction estimators; the first is the default of ``herald fit``."""
LOGISTIC_C = 0.1
"""Inverse L2 strength of the ``"logistic"`` estimator: the ``logreg_last`` baseline's value, fixed before the
direction-estimator study (docs/eval/direction_estimators.md, round 2) and not tuned on any held-out data."""


@dataclass(frozen=True)
class LayerDirections:
    """Unit harm direction, center and scale of every decoder layer.

    Attributes:
        directions: ``(layer, d_model)`` float16 unit vectors; positive projection = harmful side.
        centers: ``(layer,)`` float32, midpoint of the two class-mean projections.
        scales: ``(layer,)`` float32, pooled within-class standard deviation of projections.
    """

    directions: np.ndarray
    centers: np.ndarray
    scales: np.ndarray

    @property
    def num_layers(self) -> int:
        return int(self.directions.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.directions.shape[1])

    @functools.cached_property
    def _directions_float32(self) -> torch.Tensor:
        """``(layer, d_model)`` float32 CPU copy of the directions, made once instead of per projection (one 32 x 4096
        prompt: 0.30 -> 0.25 ms on the 2-core dev CPU, one thread)."""
        return torch.from_numpy(self.directions.astype(np.float32))

    def project(self, states: np.ndarray | torch.Tensor) -> np.ndarray:
        """Normalized projections ``s_l = (w_l . h_l - c_l) / sigma_l``.

        Args:
            states: last-token residual stream, shape ``(batch, layer, d_model)``, any float dtype (numpy or torch).

        Returns:
            ndarray ``(batch, layer)`` float64, in within-class standard deviations; 0 is the per-layer boundary.

        Raises:
            ValueError: if the layer count or hidden size does not match the directions.
        """
        if isinstance(states, torch.Tensor):
            raw = self.dot(states).double().cpu().numpy()
        else:
            states = np.asarray(states)
            if states.ndim != 3 or states.shape[1:] != self.directions.shape:
                raise ValueError(f"states must have shape (batch, {self.num_layers}, {self.hidden_size}), got {states.shape}")
            raw = np.einsum("bld,ld->bl", states.astype(np.float32), self.directions.astype(np.float32)).astype(np.float64)
        return self.normalize(raw)

    def dot(self, states: torch.Tensor) -> torch.Tensor:
        """Raw projections ``w_l . h_l`` ``(batch, layer)`` float32, computed where ``states`` are (no host sync).

        Args:
            states: ``(batch, layer, d_model)``, any float dtype, on any device (the engine passes the device
                states of a batch still running, so only ``(batch, layer)`` is copied back).

        Raises:
            ValueError: if the layer count or hidden size does not match the directions.
        """
        if states.ndim != 3 or tuple(states.shape[1:]) != self.directions.shape:
            raise ValueError(f"states must have shape (batch, {self.num_layers}, {self.hidden_size}), got {tuple(states.shape)}")
        return torch.einsum("bld,ld->bl", states.to(torch.float32), self._directions_on(states.device))

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """``(raw - c_l) / sigma_l``: raw projections ``(batch, layer)`` to ``(batch, layer)`` float64 in within-class
        standard deviations (0 is the per-layer boundary)."""
        return (np.asarray(raw, dtype=np.float64) - self.centers) / self.scales

    def _directions_on(self, device: torch.device) -> torch.Tensor:
        """The float32 directions on ``device``, copied there once (a dict cache: the dataclass is frozen)."""
        cache = self._device_copies
        if device not in cache:
            cache[device] = self._directions_float32.to(device)
        return cache[device]

    @functools.cached_property
    def _device_copies(self) -> dict[torch.device, torch.Tensor]:
        return {}


def lda_direction(x: np.ndarray, y: np.ndarray, shrinkage: str | float = "auto") -> np.ndarray:
    """Unit LDA direction separating ``y == 1`` (harmful) from ``y == 0`` for one layer.

    Uses scikit-learn's ``LinearDiscriminantAnalysis(solver="lsqr", shrinkage=...)`` (Ledoit-Wolf shrinkage by
    default): closed form, no gradients. The sign makes positive projections point to the harmful class.

    Args:
        x: ``(batch, d_model)`` float states of one layer.
        y: ``(batch,)`` int labels in {0, 1}; both classes must be present.

    Returns:
        ndarray ``(d_model,)`` float64 with unit L2 norm.
    """
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    lda = LinearDiscriminantAnalysis(solver="lsqr", shrinkage=shrinkage)
    lda.fit(np.asarray(x, dtype=np.float64), y)
    coef = lda.coef_[0]
    if lda.classes_[1] != 1:  # coef_ points toward classes_[1]
        coef = -coef
    return _unit(coef)


def _unit(coef: np.ndarray) -> np.ndarray:
    """``coef`` scaled to unit L2 norm; ValueError when it has none (nothing separates the classes)."""
    norm = float(np.linalg.norm(coef))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("no direction separates the classes: their states do not vary within a class or do not "
                         "differ between classes (too few distinct prompts?)")
    return coef / norm


def logistic_direction(x: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None,
                       C: float = LOGISTIC_C) -> np.ndarray:
    """Unit direction of an L2 logistic regression on the standardized states of one layer.

    scikit-learn's ``StandardScaler`` then ``LogisticRegression(C=C)``; the coefficient ``w`` on standardized
    states is mapped back to state space (``w / scale``: ``w . (x - m) / scale`` is that direction's projection up
    to a constant), so the served projection is a plain dot product. Positive projections point to ``y == 1``.

    Args:
        x: ``(batch, d_model)`` float states of one layer.
        y: ``(batch,)`` int labels in {0, 1}; both classes must be present.
        sample_weight: ``(batch,)`` non-negative weights (None: all 1); rescaled to mean 1, so ``C`` keeps its
            meaning whatever their scale.
        C: inverse L2 strength.

    Returns:
        ndarray ``(d_model,)`` float64 with unit L2 norm.
    """
    x = np.asarray(x, dtype=np.float64)
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=np.float64) / np.mean(sample_weight)
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x)
    model = LogisticRegression(C=C, max_iter=2000).fit(scaler.transform(x), y, sample_weight=sample_weight)
    coef = model.coef_[0] / scaler.scale_
    if model.classes_[1] != 1:  # coef_ points toward classes_[1]
        coef = -coef
    return _unit(coef)


def fit_directions(states: np.ndarray, labels: np.ndarray, shrinkage: str | float = "auto", *,
                   estimator: str = "lda", sample_weight: np.ndarray | None = None,
                   C: float = LOGISTIC_C) -> LayerDirections:
    """Fit one direction per decoder layer, then its center and scale.

    Centers and scales are computed from projections onto the fp16-rounded directions, the ones that are stored
    and served, so a served projection equals a training projection.

    Args:
        states: ``(batch, layer, d_model)`` last-token residual stream.
        labels: ``(batch,)`` ints, 1 = harmful, 0 = benign.
        shrinkage: passed to scikit-learn's LDA (estimator ``"lda"``).
        estimator: a name in :data:`DIRECTION_ESTIMATORS` (module docstring).
        sample_weight: ``(batch,)`` weights of the ``"logistic"`` estimator; LDA ignores them.
        C: inverse L2 strength of the ``"logistic"`` estimator (:data:`LOGISTIC_C`); LDA ignores it.

    Raises:
        ValueError: if a class is missing, shapes disagree, the estimator is unknown, or at some layer no
            direction separates the classes (e.g. every prompt of a class is the same).
    """
    states = np.asarray(states)
    labels = np.asarray(labels).astype(int)
    if estimator not in DIRECTION_ESTIMATORS:
        raise ValueError(f"direction estimator must be one of {', '.join(DIRECTION_ESTIMATORS)}; got {estimator!r}")
    if states.ndim != 3 or states.shape[0] != labels.shape[0]:
        raise ValueError(f"states (batch, layer, d_model) and labels (batch,) disagree: {states.shape} vs {labels.shape}")
    if set(np.unique(labels)) != {0, 1}:
        raise ValueError("labels must contain both classes (0 = benign, 1 = harmful)")
    if sample_weight is not None and np.shape(sample_weight) != labels.shape:
        raise ValueError(f"sample_weight must have shape {labels.shape}, got {np.shape(sample_weight)}")
    n_layers = states.shape[1]
    fit_one = (lambda l: logistic_direction(states[:, l], labels, sample_weight, C)) if estimator == "logistic" else (
        lambda l: lda_direction(states[:, l], labels, shrinkage))
    directions = []
    for layer in range(n_layers):
        try:
            directions.append(fit_one(layer))
        except ValueError as exc:
            raise ValueError(f"decoder layer {layer + 1}: {exc}") from None
    return with_centers_and_scales(np.stack(directions), states, labels)


def with_centers_and_scales(directions: np.ndarray, states: np.ndarray, labels: np.ndarray) -> LayerDirections:
    """Round unit ``directions`` ``(layer, d_model)`` to fp16 and add each layer's center and scale.

    Center: midpoint of the two class-mean projections; scale: pooled within-class standard deviation of the
    projections, both computed on the fp16-rounded directions that are stored and served.

    Args:
        directions: ``(layer, d_model)`` float unit vectors, positive toward the harmful class.
        states: ``(batch, layer, d_model)`` last-token residual stream of the fitting prompts.
        labels: ``(batch,)`` ints, 1 = harmful, 0 = benign; both classes present.
    """
    directions = np.asarray(directions).astype(STORAGE_DTYPE)
    labels = np.asarray(labels).astype(int)
    raw = np.einsum("bld,ld->bl", np.asarray(states).astype(np.float32), directions.astype(np.float32)).astype(np.float64)
    harm, benign = raw[labels == 1], raw[labels == 0]
    centers = (harm.mean(axis=0) + benign.mean(axis=0)) / 2
    pooled_var = (((harm - harm.mean(0)) ** 2).sum(0) + ((benign - benign.mean(0)) ** 2).sum(0)) / max(len(raw) - 2, 1)
    scales = np.sqrt(np.maximum(pooled_var, 1e-12))
    return LayerDirections(directions, centers.astype(np.float32), scales.astype(np.float32))


def peak_monotonicity_layer(s: np.ndarray, labels: np.ndarray) -> int:
    """Layer where harmful trajectories rise fastest relative to benign ones (DESIGN section 1.6).

    ``argmax_l [mean_harmful(s_l - s_{l-1}) - mean_benign(s_l - s_{l-1})]`` over l = 2..L.

    Args:
        s: ``(batch, layer)`` projections of training prompts.
        labels: ``(batch,)`` 1 = harmful, 0 = benign.

    Returns:
        The 1-based decoder layer index, in 2..L.
    """
    diffs = np.diff(np.asarray(s, dtype=np.float64), axis=1)
    labels = np.asarray(labels).astype(bool)
    gap = diffs[labels].mean(axis=0) - diffs[~labels].mean(axis=0)
    return int(np.argmax(gap)) + 2

"""Trajectory features: seven summaries of a cross-layer projection trajectory (DESIGN section 1.4).

Vocabulary: ``batch`` prompts, ``layer`` decoder layers (L). A trajectory ``s`` has shape ``(batch, layer)``; each
row holds the normalized projections ``s_l`` (units: within-class standard deviations, positive = harmful side).

Feature sets are named and versioned (:data:`FEATURE_SETS`); a probe's manifest records the one it was fitted with
and the scorer computes exactly that set. ``herald-v1`` (DESIGN section 1.4) is the default. Every set has seven
features, so the 288-parameter scorer is the same for all of them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.stats import rankdata

FEATURE_SET = "herald-v1"
"""The default feature set: the one DESIGN section 1.4 defines and every probe fitted before feature sets were
selectable was fitted with."""
FEATURE_NAMES: tuple[str, ...] = (
    "slope",
    "curvature",
    "monotonicity",
    "onset",
    "late_level",
    "peak",
    "volatility",
)


def layer_positions(num_layers: int) -> np.ndarray:
    """Return ``x_l = (l - 1) / (L - 1)`` for l = 1..L, shape ``(layer,)`` float64, in [0, 1]."""
    if num_layers < 3:
        raise ValueError(f"num_layers must be >= 3 for a quadratic fit, got {num_layers}")
    return np.linspace(0.0, 1.0, num_layers)


def late_window(num_layers: int) -> int:
    """Number of layers in the "last quarter" used by ``late_level``: ``max(1, L // 4)``."""
    return max(1, num_layers // 4)


def row_sums(x: np.ndarray) -> np.ndarray:
    """Sums over the last axis, shape ``x.shape[:-1]``, added one column at a time from the first: each row's sum is
    the same bits whatever the batch's size and the array's memory layout. numpy's own reduction picks pairwise or
    strided order by both: a served prompt's slope and volatility moved in their last bit between a request of one
    prompt and one of two (tester, 2026-12-05), as matrix products had moved logits (BLAS picks kernels by size)."""
    total = np.array(x[..., 0], dtype=np.float64)
    for column in range(1, x.shape[-1]):
        total += x[..., column]
    return total


def _row_means(x: np.ndarray) -> np.ndarray:
    return row_sums(x) / x.shape[-1]


def _row_stds(x: np.ndarray) -> np.ndarray:
    """Population standard deviation of each row (as ``np.std``), by :func:`row_sums`."""
    deviations = x - _row_means(x)[..., None]
    return np.sqrt(_row_means(deviations * deviations))


def _spearman_rows(s: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row with the layer index; 0 where a row is constant. Shape ``(batch,)``."""
    n = s.shape[1]
    ranks = rankdata(s, axis=1)  # average ranks for ties
    x_rank = np.arange(1, n + 1, dtype=np.float64)
    rc = ranks - _row_means(ranks)[:, None]
    xc = x_rank - x_rank.mean()
    squares, products = row_sums(np.stack([rc * rc, rc * xc], axis=1)).T  # one pass of column adds for both
    denom = np.sqrt(squares * (xc**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = products / denom
    return np.where(denom > 0, rho, 0.0)


def _onset(s: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x and 0-based index of the first layer from which ``s`` stays > 0 to the end; (1.0, -1) if ``s_L <= 0``."""
    positive = s > 0
    # Suffix-all: True at l when every layer from l to L is positive.
    suffix_all = np.flip(np.cumprod(np.flip(positive, axis=1), axis=1), axis=1).astype(bool)
    has_onset = suffix_all[:, -1]
    first = np.argmax(suffix_all, axis=1)
    index = np.where(has_onset, first, -1)
    onset_x = np.where(has_onset, x[first], 1.0)
    return onset_x, index


@functools.lru_cache(maxsize=16)
def _fit_operators(num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Pseudo-inverses of the linear and quadratic Vandermonde matrices on ``layer_positions`` (an SVD each, so
    computed once per layer count instead of once per batch)."""
    x = layer_positions(num_layers)
    v1 = np.stack([x, np.ones_like(x)], axis=1)
    v2 = np.stack([x**2, x, np.ones_like(x)], axis=1)
    return np.linalg.pinv(v1), np.linalg.pinv(v2)


def _herald_v1(s: np.ndarray) -> np.ndarray:
    """``herald-v1`` on validated trajectories ``(batch, layer)`` float64; see :func:`compute_features`."""
    n_layers = s.shape[1]
    x = layer_positions(n_layers)

    # Least-squares fits for every row at once: coefficients = pinv(V) @ s, as products and row_sums so that a row's
    # features are the same bits alone and in any batch (BLAS picks its kernel by the batch's size)
    pinv_line, pinv_quadratic = _fit_operators(n_layers)
    slope, curvature = row_sums(s[:, None, :] * np.stack([pinv_line[0], pinv_quadratic[0]])).T

    monotonicity = _spearman_rows(s)
    onset_x, _ = _onset(s, x)
    late_level = _row_means(s[:, -late_window(n_layers) :])
    peak = s.max(axis=1)
    volatility = _row_stds(np.diff(s, axis=1))
    return np.stack([slope, curvature, monotonicity, onset_x, late_level, peak, volatility], axis=1)


BANDS = 7
"""Depth bands of ``bands-v1``."""


def _bands_v1(s: np.ndarray) -> np.ndarray:
    """``bands-v1``: the mean of ``s`` over :data:`BANDS` contiguous depth bands (``np.array_split`` of the layers,
    the first bands one layer longer where the count does not divide; 30 layers: 5, 5, 4, 4, 4, 4, 4), by
    :func:`row_sums`. Validated trajectories ``(batch, layer)`` float64 -> ``(batch, 7)`` float64. A candidate of
    docs/eval/feature_sets.md (``cand-bands`` there) that failed its confirmation on a second split (2026-12-07):
    registered so that the committed results can be refit, not recommended over ``herald-v1``."""
    return np.stack([_row_means(band) for band in np.array_split(s, BANDS, axis=1)], axis=1)


@dataclass(frozen=True)
class FeatureSet:
    """A named, versioned set of seven trajectory features.

    Attributes:
        name: the name a probe manifest records (``feature_set``), e.g. ``"herald-v1"``.
        names: the seven feature names, in column order (``feature_names`` in the manifest and the API).
        min_layers: the fewest layers the set is defined for.
        compute: validated trajectories ``(batch, layer)`` float64 -> features ``(batch, 7)`` float64.
    """

    name: str
    names: tuple[str, ...]
    min_layers: int
    compute: Callable[[np.ndarray], np.ndarray]


FEATURE_SETS: dict[str, FeatureSet] = {
    FEATURE_SET: FeatureSet(FEATURE_SET, FEATURE_NAMES, 3, _herald_v1),
    "bands-v1": FeatureSet("bands-v1", tuple(f"band_{i}" for i in range(1, BANDS + 1)), BANDS, _bands_v1),
}
"""Every feature set Herald can fit and serve, by name."""


def get_feature_set(name: str) -> FeatureSet:
    """The feature set called ``name``.

    Raises:
        ValueError: for a name not in :data:`FEATURE_SETS`, naming the known ones.
    """
    try:
        return FEATURE_SETS[name]
    except KeyError:
        raise ValueError(f"unknown feature set {name!r}; known: {', '.join(sorted(FEATURE_SETS))}") from None


def require_layers(feature_set: str, num_layers: int, backbone: str) -> None:
    """Refuse a backbone of fewer decoder layers than ``feature_set`` is defined for (:attr:`FeatureSet.min_layers`),
    at its load, before any state is extracted: ``herald fit`` and ``herald eval`` on a 2-layer model extracted every
    state and then failed in :func:`compute_features` (researcher pass).

    Raises:
        ValueError: too few layers, naming the feature set, its minimum and ``backbone``; or an unknown set.
    """
    spec = get_feature_set(feature_set)
    if num_layers < spec.min_layers:
        raise ValueError(f"feature set {spec.name} needs a backbone of at least {spec.min_layers} decoder layers;"
                         f" {backbone} has {num_layers}")


def compute_features(s: np.ndarray, feature_set: str = FEATURE_SET) -> np.ndarray:
    """Compute the seven features of ``feature_set`` (default ``herald-v1``) for projection trajectories.

    ``herald-v1`` (DESIGN section 1.4), in :data:`FEATURE_NAMES` order: least-squares slope of s on x, quadratic
    coefficient of a least-squares quadratic fit, Spearman correlation of s with x (0 if s is constant), onset x (1.0
    if ``s_L <= 0``), mean of the last ``max(1, L // 4)`` layers, max, and population standard deviation of the
    first differences. Other sets: see :data:`FEATURE_SETS`.

    Args:
        s: trajectories, shape ``(batch, layer)`` (or ``(layer,)`` for one), any float dtype, units of within-class
            std. At least the set's ``min_layers`` layers (3 for ``herald-v1``).
        feature_set: a name in :data:`FEATURE_SETS`.

    Returns:
        ndarray of shape ``(batch, 7)`` float64, columns in the set's ``names`` order.

    Raises:
        ValueError: for an unknown feature set, or if ``s`` is not 1-D or 2-D, has too few layers, or holds
            non-finite values.
    """
    spec = get_feature_set(feature_set)
    s = np.asarray(s, dtype=np.float64)
    if s.ndim == 1:
        s = s[None, :]
    if s.ndim != 2:
        raise ValueError(f"trajectories must have shape (batch, layer), got {s.shape}")
    if s.shape[1] < spec.min_layers:
        raise ValueError(f"feature set {spec.name} needs >= {spec.min_layers} layers, got {s.shape[1]}")
    if not np.isfinite(s).all():
        raise ValueError("trajectories hold non-finite values")
    return spec.compute(s)


def onset_layers(s: np.ndarray) -> list[int | None]:
    """1-based decoder layer from which each trajectory stays positive; ``None`` where ``s_L <= 0``.

    Args:
        s: shape ``(batch, layer)``.
    """
    s = np.atleast_2d(np.asarray(s, dtype=np.float64))
    _, index = _onset(s, layer_positions(s.shape[1]))
    return [int(i) + 1 if i >= 0 else None for i in index]


@dataclass(frozen=True)
class FeatureStats:
    """Training mean and std of each feature, shape ``(7,)`` float32, used to standardize scorer input."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, features: np.ndarray) -> "FeatureStats":
        """Standardization stats of ``features`` ``(n_samples, 7)``; a zero std becomes 1 so nothing divides by 0."""
        std = features.std(axis=0)
        return cls(features.mean(axis=0).astype(np.float32), np.where(std > 0, std, 1.0).astype(np.float32))

    def transform(self, features: np.ndarray) -> np.ndarray:
        """Standardize ``(n, 7)`` features; returns float32 ``(n, 7)``."""
        return ((features - self.mean) / self.std).astype(np.float32)

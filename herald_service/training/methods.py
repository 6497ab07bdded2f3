"""Herald and the latent baselines it is compared with, behind one estimator interface.

Every method follows the same recipe so that differences come from the method, not the protocol: fit on states
``(n_samples, n_layers, d_model)`` of the training rows, hold out a calibration part of the training rows (stratified
by source x label, the split :class:`~herald_service.probes.probe.HeraldProbe` uses), and set the decision threshold
at maximum F1 on that part. No method ever sees a test row while fitting or calibrating.

Methods (``score`` is higher = more harmful; ``flagged = score >= threshold_``):

- ``herald``: the shipped recipe (per-layer LDA, herald-v1 features, 288-parameter MLP, source-balanced weights).
- ``herald:<set>``: the same recipe with another feature set of :data:`~herald_service.probes.features.FEATURE_SETS`.
- ``lda_best_layer``: one layer's LDA projection; the layer with the best calibration-part AUROC.
- ``logreg_last`` / ``logreg_mid``: L2 logistic regression on the standardized states of the last / middle layer.
- ``features_logreg``: Herald's directions and seven features, scored by logistic regression instead of the MLP.
- ``mlpm``: multi-layer Mahalanobis prototypes (MLPM style): per layer, squared Mahalanobis distances to the benign
  and harmful class means under class-specific Ledoit-Wolf covariances; a logistic regression combines the
  per-layer distance differences (every third layer and the last, to bound the cost).
- ``text_logreg``: a control that never runs the backbone: TF-IDF of the prompt's words and word pairs (as the backbone
  reads the prompt: :func:`~herald_service.prompt_text.normalize_prompt_text`), scored by logistic regression. Where it
  matches a latent method on held-out sources, that method's states are not shown to carry more than the words.
- ``herald_logistic``: Herald with logistic directions; ``herald_logistic_crossfit`` trains its scorer on
  cross-fitted trajectories (:func:`cross_fitted_projections`), ``herald_logistic_C<c>`` fits the directions at
  another L2 strength (:data:`DIRECTION_C_GRID`); docs/eval/recipe_studies.md.
- ``<method>+shift``: the method with its threshold moved by the offset that source-held-out margins inside its own
  training rows call for (:class:`SourceShifted`; docs/eval/threshold_rule.md).
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from typing import Callable, Protocol

import numpy as np
from sklearn.covariance import LedoitWolf
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from herald_service.probes.directions import (
    DIRECTION_ESTIMATORS,
    LOGISTIC_C,
    LayerDirections,
    fit_directions,
    peak_monotonicity_layer,
)
from herald_service.probes.features import FEATURE_SET, FEATURE_SETS, FeatureStats, compute_features
from herald_service.probes.probe import FittedProbe, balanced_weights, calibration_mask
from herald_service.probes.scorer import calibrate_threshold, train_scorer
from herald_service.training.method_names import LATENT_BASELINES

CALIBRATION_FRACTION = 0.25
LOGREG_C = 0.1
"""Fixed (not tuned on any test data): moderate L2 for 576-wide standardized states and ~2,000 rows."""


_DIRECTIONS_MEMO: "OrderedDict[str, LayerDirections]" = OrderedDict()
DIRECTIONS_MEMO_ENTRIES = 16
"""Direction fits kept: a ``+shift`` method makes :data:`SHIFT_GROUPS` + 1 of them per estimator, which the next method
on the same rows reuses (a 30 x 576 fit is ~70 KB)."""


def shared_directions(X: np.ndarray, y: np.ndarray, groups: np.ndarray, estimator: str = "lda",
                      C: float = LOGISTIC_C) -> LayerDirections:
    """Per-layer directions of ``estimator`` on fit rows ``X`` ``(n, layer, d_model)``, ``y``, ``groups`` ``(n,)``,
    memoized on the bytes of the inputs.

    The logistic estimator weights the rows with :func:`balanced_weights` over ``groups`` (``HeraldProbe.fit``
    does the same). Herald and the feature-logistic baseline fit the same directions on the very same fit rows,
    and the best-layer baseline the LDA ones; one fit (30 layers x 576 wide: 3-10 s on one core) serves each
    pair. :data:`DIRECTIONS_MEMO_ENTRIES` entries are kept. ``C``: the logistic estimator's inverse L2 strength.

    Raises:
        ValueError: as :func:`~herald_service.probes.directions.fit_directions`.
    """
    digest = hashlib.sha1(np.ascontiguousarray(X).tobytes())
    digest.update(np.ascontiguousarray(y).astype(np.int64).tobytes())
    digest.update("\0".join(map(str, groups)).encode())
    key = f"{estimator}:{C if estimator == 'logistic' else ''}:{digest.hexdigest()}"
    if key not in _DIRECTIONS_MEMO:
        _DIRECTIONS_MEMO[key] = fit_directions(X, y, estimator=estimator, sample_weight=balanced_weights(groups, y), C=C)
        while len(_DIRECTIONS_MEMO) > DIRECTIONS_MEMO_ENTRIES:
            _DIRECTIONS_MEMO.popitem(last=False)
    return _DIRECTIONS_MEMO[key]


CROSS_FIT_FOLDS = 5
"""Source folds of :func:`cross_fitted_projections` (docs/eval/recipe_studies.md)."""


def source_folds(groups: np.ndarray, labels: np.ndarray, folds: int = CROSS_FIT_FOLDS) -> np.ndarray:
    """``(n,)`` int fold index in ``0..folds-1``: whole ``groups`` (e.g. source x label) dealt round-robin, largest
    first, the harmful groups (by majority label) and the benign ones dealt separately, so that every fold's complement
    holds both classes whenever there are two groups or more of each. Deterministic (ties by group name).

    Raises:
        ValueError: ``folds`` below 2.
    """
    if folds < 2:
        raise ValueError(f"folds must be at least 2, got {folds}")
    groups, labels = np.asarray(groups), np.asarray(labels).astype(int)
    out = np.zeros(len(groups), dtype=np.int64)
    names = np.unique(groups)
    majority = {g: int(labels[groups == g].mean() >= 0.5) for g in names}
    sizes = Counter(groups.tolist())
    for label in (1, 0):
        ordered = sorted((g for g in names if majority[g] == label), key=lambda g: (-sizes[g], str(g)))
        for i, group in enumerate(ordered):
            out[groups == group] = i % folds
    return out


def cross_fitted_projections(states: np.ndarray, labels: np.ndarray, groups: np.ndarray, estimator: str,
                             shrinkage: str | float = "auto", folds: int = CROSS_FIT_FOLDS,
                             C: float = LOGISTIC_C) -> np.ndarray:
    """Normalized projections ``(n, layer)`` float32 of every row by directions fitted without its source.

    The rows are split into :func:`source_folds`; each fold's rows are projected by directions (``estimator``, the
    logistic one weighted by :func:`balanced_weights`) fitted on the other folds. The scorer then learns from
    trajectories of prompts whose source the directions never saw, as at serving, instead of from in-sample
    projections, which separate the classes more than any unseen prompt will (stacking's out-of-fold predictions,
    Wolpert 1992, "Stacked generalization", section 2; grouped by source as the evaluation is).

    Args:
        states: ``(n, layer, d_model)`` last-token residual stream.
        labels: ``(n,)`` 1 = harmful, 0 = benign.
        groups: ``(n,)`` source (x label) of each row.
        shrinkage, C: of the ``lda`` and ``logistic`` estimators (:func:`~.directions.fit_directions`).

    Raises:
        ValueError: a fold's complement lacks a class, or as :func:`~.directions.fit_directions`.
    """
    labels = np.asarray(labels).astype(int)
    groups = np.asarray(groups)
    fold_of = source_folds(groups, labels, folds)
    out = np.zeros(states.shape[:2], dtype=np.float32)
    for fold in np.unique(fold_of):
        rest = fold_of != fold
        if len(np.unique(labels[rest])) < 2:
            raise ValueError(f"cross-fitting: the rows outside source fold {fold} hold one class only; give at least two"
                             " sources of each class")
        directions = fit_directions(states[rest], labels[rest], shrinkage, estimator=estimator,
                                    sample_weight=balanced_weights(groups[rest], labels[rest]), C=C)
        out[~rest] = directions.project(states[~rest])
    return out


class Method(Protocol):
    """What the evaluation protocol needs from a method.

    ``reads``: ``"states"`` (``X`` is ``(n, layer, d_model)`` float32 states) or ``"text"`` (``X`` is ``(n,)`` object
    array of prompt texts as the backbone reads them: :class:`TextLogistic`)."""

    name: str
    threshold_: float
    reads: str

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> "Method": ...

    def score(self, X: np.ndarray) -> np.ndarray: ...


class _Calibrated:
    """Shared recipe: fit ``_fit_scores`` on the fit part, pick the max-F1 threshold on the calibration part."""

    name = "base"
    reads = "states"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> "_Calibrated":
        """Fit on ``X`` ``(n, layer, d_model)``, ``y`` ``(n,)``, ``groups`` ``(n,)`` (source|label strings)."""
        y = np.asarray(y).astype(int)
        calib = calibration_mask(np.asarray(groups), CALIBRATION_FRACTION, self.seed)
        fit = ~calib
        self._fit(X[fit], y[fit], np.asarray(groups)[fit], X[calib], y[calib])
        self.threshold_ = calibrate_threshold(self.score(X[calib]), y[calib], "max_f1")
        return self

    def _fit(self, X, y, groups, X_calib, y_calib) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def score(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


class HeraldMethod:
    """The Herald recipe of ``herald fit``: source-balanced scorer weights, max-F1 threshold on the calibration part.

    Step for step what ``HeraldProbe.fit`` does (a test checks the two agree), except that the per-layer direction
    fit comes from :func:`shared_directions`, so baselines fitted on the same rows reuse it.

    Args:
        feature_set: the trajectory features (:data:`~herald_service.probes.features.FEATURE_SETS`); the method is
            named ``herald`` for the default set and ``herald:<set>`` for another.
        direction_estimator: a name in :data:`~herald_service.probes.directions.DIRECTION_ESTIMATORS` (default: the
            first, that of ``herald fit``); another than the default adds ``_<estimator>`` to the name.
    """

    reads = "states"

    def __init__(self, seed: int = 0, feature_set: str = FEATURE_SET,
                 direction_estimator: str = DIRECTION_ESTIMATORS[0], cross_fit: bool = False,
                 direction_C: float = LOGISTIC_C) -> None:
        self.seed = seed
        self.feature_set = feature_set
        self.direction_estimator = direction_estimator
        self.cross_fit = cross_fit
        self.direction_C = direction_C
        self.name = "herald" if feature_set == FEATURE_SET else f"herald:{feature_set}"
        if direction_estimator != DIRECTION_ESTIMATORS[0]:
            self.name += f"_{direction_estimator}"
        if cross_fit:
            self.name += "_crossfit"
        if direction_C != LOGISTIC_C:
            self.name += f"_C{direction_C:g}"

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> "HeraldMethod":
        y = np.asarray(y).astype(int)
        groups = np.asarray(groups)
        calib = calibration_mask(groups, CALIBRATION_FRACTION, self.seed)
        fit = ~calib
        weights = balanced_weights(groups, y)
        self._fit_parts(X[fit], y[fit], weights[fit], groups[fit], X[calib], y[calib])
        return self

    def _fit_parts(self, X_fit, y_fit, w_fit, g_fit, X_calib, y_calib) -> None:
        directions = shared_directions(X_fit, y_fit, g_fit, self.direction_estimator, self.direction_C)
        s_fit = directions.project(X_fit)
        s_scorer = s_fit if not self.cross_fit else cross_fitted_projections(
            X_fit, y_fit, g_fit, self.direction_estimator, C=self.direction_C)
        features = compute_features(s_scorer, self.feature_set)
        stats = FeatureStats.fit(features)
        scorer = train_scorer(stats.transform(features), y_fit, w_fit, seed=self.seed)
        partial = FittedProbe(directions, stats, scorer, 0.0, "max_f1", peak_monotonicity_layer(s_fit, y_fit),
                              self.feature_set)
        threshold = calibrate_threshold(partial.logits(partial.features(directions.project(X_calib))), y_calib, "max_f1")
        self.fitted_ = FittedProbe(directions, stats, scorer, threshold, "max_f1", partial.peak_layer, self.feature_set)
        self.threshold_ = threshold

    def score(self, X: np.ndarray) -> np.ndarray:
        """Scorer logits ``(n,)``; flagged where ``>= threshold_`` (the served ``score >= 0.5``)."""
        return self.fitted_.logits(self.fitted_.features(self.fitted_.trajectories(X)))

    def trajectories(self, X: np.ndarray) -> np.ndarray:
        """Normalized projections ``(n, layer)``."""
        return self.fitted_.trajectories(X)


class HardNegativeHerald(HeraldMethod):
    """Herald with one round of hard-negative mining (a training-recipe variant, not a baseline).

    After a first fit, benign fit-part rows that the first model flags (false positives on its own training data)
    are repeated ``1 + repeats`` times in the LDA and scorer fit; the calibration part is untouched, so the threshold
    is still chosen on rows the fit never saw.
    """

    def __init__(self, seed: int = 0, repeats: int = 2) -> None:
        super().__init__(seed)
        self.name = "herald_hardneg"
        self.repeats = repeats

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> "HardNegativeHerald":
        y = np.asarray(y).astype(int)
        groups = np.asarray(groups)
        calib = calibration_mask(groups, CALIBRATION_FRACTION, self.seed)
        fit = np.nonzero(~calib)[0]
        weights = balanced_weights(groups, y)
        self._fit_parts(X[fit], y[fit], weights[fit], groups[fit], X[calib], y[calib])
        hard = fit[(y[fit] == 0) & (self.score(X[fit]) >= self.threshold_)]
        rows = np.concatenate([fit] + [hard] * self.repeats)
        self.hard_negatives_ = int(len(hard))
        self._fit_parts(X[rows], y[rows], weights[rows], groups[rows], X[calib], y[calib])
        return self


def separation(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Standardized mean difference of each column, ``(mean_harmful - mean_benign) / sqrt((var_harmful +
    var_benign) / 2)`` (Cohen's d with equal class weights): how far apart the classes lie, where AUROC only says
    whether they are ordered.

    Args:
        scores: ``(n, k)`` float scores; ``labels``: ``(n,)`` 1 = harmful, both classes present.

    Returns:
        ``(k,)`` float64; 0 where both classes have zero variance and equal means, ``inf`` where the variance is zero
        and the means differ.
    """
    scores = np.asarray(scores, dtype=np.float64)
    harmful, benign = scores[np.asarray(labels) == 1], scores[np.asarray(labels) == 0]
    gap = harmful.mean(0) - benign.mean(0)
    spread = np.sqrt((harmful.var(0) + benign.var(0)) / 2)
    out = np.where(gap > 0, np.inf, np.where(gap < 0, -np.inf, 0.0))
    positive = spread > 0
    out[positive] = gap[positive] / spread[positive]
    return out


class LDABestLayer(_Calibrated):
    """One layer's LDA projection; layer picked by calibration-part AUROC (training data only), ties broken by the
    calibration part's standardized mean difference (:func:`separation`).

    A small calibration part ranks perfectly on many layers: 16 rows gave AUROC 1.0 on all 30 of SmolLM2's, the first
    (layer 1) was taken, and it scored 0.44 on the test part where layer 22 scored 1.0 (tester, 2026-12-06)."""

    name = "lda_best_layer"

    def _fit(self, X, y, groups, X_calib, y_calib) -> None:
        self.directions_ = shared_directions(X, y, groups, "lda")
        s = self.directions_.project(X_calib)
        aurocs = np.array([roc_auc_score(y_calib, s[:, l]) for l in range(s.shape[1])])
        tied = np.flatnonzero(aurocs == aurocs.max())
        self.layer_ = int(tied[np.argmax(separation(s[:, tied], y_calib))]) if len(tied) > 1 else int(tied[0])

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.directions_.project(X)[:, self.layer_]


class LayerLogistic(_Calibrated):
    """L2 logistic regression on one layer's standardized states, source-balanced weights.

    Args:
        layer: ``"last"``, ``"mid"`` (layer ``L // 2``, 1-based) or a 0-based index.
    """

    def __init__(self, layer: str | int = "last", seed: int = 0) -> None:
        super().__init__(seed)
        self.layer = layer
        self.name = f"logreg_{layer}" if isinstance(layer, str) else f"logreg_l{layer + 1}"

    def _index(self, n_layers: int) -> int:
        if self.layer == "last":
            return n_layers - 1
        if self.layer == "mid":
            return n_layers // 2 - 1
        return int(self.layer)

    def _fit(self, X, y, groups, X_calib, y_calib) -> None:
        self.layer_ = self._index(X.shape[1])
        self.scaler_ = StandardScaler().fit(X[:, self.layer_])
        self.model_ = LogisticRegression(C=LOGREG_C, max_iter=2000)
        self.model_.fit(self.scaler_.transform(X[:, self.layer_]), y, sample_weight=balanced_weights(groups, y))

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function(self.scaler_.transform(X[:, self.layer_]))


class FeatureLogistic(_Calibrated):
    """Herald's directions and seven features scored by logistic regression: isolates the MLP's contribution.

    Args:
        direction_estimator: that of the Herald it is compared with (``herald eval --direction-estimator``); with
            another, it would differ from Herald in its directions too (it always fitted the LDA ones, beside a Herald
            of logistic directions: reviewer's audit, docs/eval/template_audit.md).
    """

    name = "features_logreg"

    def __init__(self, seed: int = 0, direction_estimator: str = DIRECTION_ESTIMATORS[0]) -> None:
        super().__init__(seed)
        self.direction_estimator = direction_estimator

    def _fit(self, X, y, groups, X_calib, y_calib) -> None:
        self.directions_ = shared_directions(X, y, groups, self.direction_estimator)
        features = compute_features(self.directions_.project(X))
        self.scaler_ = StandardScaler().fit(features)
        self.model_ = LogisticRegression(C=1.0, max_iter=2000)
        self.model_.fit(self.scaler_.transform(features), y, sample_weight=balanced_weights(groups, y))

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function(self.scaler_.transform(compute_features(self.directions_.project(X))))


TEXT_LOGREG_C = 1.0
"""Fixed (scikit-learn's default, not tuned on any test data): the inverse L2 strength of :class:`TextLogistic`."""


class TextLogistic(_Calibrated):
    """The text-only control: no backbone, the prompt's words alone.

    TF-IDF (scikit-learn's ``TfidfVectorizer``: lower-cased words, one-letter ones included, and word pairs of the
    fit-part prompts; sublinear term frequency; L2-normalized rows) and an L2 logistic regression (``C`` =
    :data:`TEXT_LOGREG_C`) with source-balanced weights; threshold at max F1 on the calibration part, as every method.
    ``X``: ``(n,)`` object array of prompt texts as the backbone reads them (``herald eval`` passes them: ``reads =
    "text"``). The question it answers: do the latent methods' states carry more than the prompt's words, on sources
    held out? A prompt with no word seen in the fit part (another language, gibberish) scores the intercept alone,
    the same for all of them, which may lie above the threshold (a researcher's run flagged 8 of 10 such benign
    prompts): it is a control, not a moderation method.

    Raises:
        ValueError: (from ``fit``) no fit-part prompt holds a word.
    """

    name = "text_logreg"
    reads = "text"

    def _fit(self, X, y, groups, X_calib, y_calib) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.vectorizer_ = TfidfVectorizer(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b", sublinear_tf=True)
        try:
            words = self.vectorizer_.fit_transform(list(X))
        except ValueError as error:  # scikit-learn's "empty vocabulary"
            raise ValueError(f"{self.name}: none of the {len(X)} training prompts holds a word to weigh") from error
        self.model_ = LogisticRegression(C=TEXT_LOGREG_C, max_iter=2000)
        self.model_.fit(words, y, sample_weight=balanced_weights(groups, y))

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function(self.vectorizer_.transform(list(X)))


class MahalanobisPrototypes(_Calibrated):
    """Multi-layer Mahalanobis prototype score (MLPM style).

    Per layer l and class c: mean ``mu_lc`` and Ledoit-Wolf precision ``P_lc``; the layer feature is
    ``d_l = (h - mu_l0)' P_l0 (h - mu_l0) - (h - mu_l1)' P_l1 (h - mu_l1)`` (closer to harmful = larger). A logistic
    regression on the standardized ``(n, len(layers_))`` feature matrix combines the layers.
    """

    name = "mlpm"
    layer_stride = 3
    """Every third decoder layer (3, 6, ..., L) : two 576-wide Ledoit-Wolf fits per layer dominate the cost."""

    def _distances(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((len(X), len(self.layers_)))
        for j, (l, (means, precisions)) in enumerate(zip(self.layers_, self.prototypes_)):
            h = X[:, l].astype(np.float64)
            d = [(((h - mu) @ p) * (h - mu)).sum(1) for mu, p in zip(means, precisions)]
            out[:, j] = (d[0] - d[1]) / X.shape[2]
        return out

    def _fit(self, X, y, groups, X_calib, y_calib) -> None:
        n_layers = X.shape[1]
        self.layers_ = sorted({*range(self.layer_stride - 1, n_layers, self.layer_stride), n_layers - 1})
        self.prototypes_ = []
        for l in self.layers_:
            means, precisions = [], []
            for c in (0, 1):
                lw = LedoitWolf().fit(X[y == c, l].astype(np.float64))
                means.append(lw.location_)
                precisions.append(lw.precision_)
            self.prototypes_.append((means, precisions))
        d = self._distances(X)
        self.scaler_ = StandardScaler().fit(d)
        self.model_ = LogisticRegression(C=1.0, max_iter=2000)
        self.model_.fit(self.scaler_.transform(d), y, sample_weight=balanced_weights(groups, y))

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function(self.scaler_.transform(self._distances(X)))


SHIFT_GROUPS = 5
"""Source groups of :class:`SourceShifted` (docs/eval/threshold_rule.md: fixed before any run, not tuned)."""


def source_groups(sources: np.ndarray, labels: np.ndarray, n_groups: int, seed: int) -> np.ndarray:
    """Group index ``(n,)`` int of each row: sources holding harmful rows, and sources holding only benign rows, are
    each shuffled (``seed``) and dealt round robin into ``n_groups`` groups; a source's rows share a group.

    Args:
        sources: ``(n,)`` source names; labels: ``(n,)`` 1 = harmful.
    """
    sources = np.asarray(sources)
    labels = np.asarray(labels).astype(int)
    names = sorted(set(sources.tolist()))
    harmful = [s for s in names if labels[sources == s].max() == 1]
    benign = [s for s in names if s not in set(harmful)]
    rng = np.random.default_rng(seed)
    group_of: dict[str, int] = {}
    for kind in (harmful, benign):
        for position, name in enumerate(rng.permutation(np.array(kind, dtype=object)).tolist()):
            group_of[name] = position % n_groups
    return np.array([group_of[s] for s in sources.tolist()], dtype=int)


class SourceShifted:
    """A method whose threshold is moved by an offset learned on source-held-out margins inside its training rows.

    The training sources are dealt into :data:`SHIFT_GROUPS` groups (:func:`source_groups`). For each group the base
    method is fitted (its own calibration part and max-F1 threshold) on the rows outside it and gives the group's rows
    margins ``score - threshold``; the offset is the max-F1 threshold of those pooled margins. The base method fitted
    on all rows keeps its score; its threshold plus the offset is this method's. Source: docs/eval/threshold_rule.md
    (round 4 of issue 3); it mirrors how ``herald eval`` pools LOSO margins.

    Args:
        base: a name of :data:`FACTORIES` without ``+shift``.

    Raises:
        ValueError: (from ``fit``) training rows from fewer than two sources, or a group whose removal leaves one class.
    """

    reads = "states"

    def __init__(self, base: str, seed: int = 0, n_groups: int = SHIFT_GROUPS) -> None:
        self.base = base
        self.seed = seed
        self.n_groups = n_groups
        self.name = f"{base}+shift"

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> "SourceShifted":
        """Fit on ``X`` ``(n, layer, d_model)``, ``y`` ``(n,)``, ``groups`` ``(n,)`` (``source|label`` strings)."""
        y = np.asarray(y).astype(int)
        groups = np.asarray(groups)
        sources = np.array([g.rsplit("|", 1)[0] for g in groups.tolist()])
        if len(set(sources.tolist())) < 2:
            raise ValueError(f"{self.name} needs training rows from at least two sources")
        deal = source_groups(sources, y, self.n_groups, self.seed)
        held = np.full(len(y), np.nan)
        for g in sorted(set(deal.tolist())):
            out = deal == g
            if len(set(y[~out].tolist())) < 2:
                raise ValueError(f"{self.name}: without source group {g} the training rows hold one class")
            inner = make_method(self.base, self.seed).fit(X[~out], y[~out], groups[~out])
            held[out] = inner.score(X[out]) - inner.threshold_
        self.offset_ = calibrate_threshold(held, y, "max_f1")
        self.base_ = make_method(self.base, self.seed).fit(X, y, groups)
        self.threshold_ = self.base_.threshold_ + self.offset_
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        """The base method's scores ``(n,)``."""
        return self.base_.score(X)


DIRECTION_C_GRID = (0.03, 0.3)
"""Inverse L2 strengths of the logistic directions next to :data:`LOGISTIC_C` (docs/eval/recipe_studies.md, second study)."""


FACTORIES: dict[str, Callable[[int], Method]] = {
    "herald": lambda seed: HeraldMethod(seed),
    "lda_best_layer": lambda seed: LDABestLayer(seed),
    "logreg_last": lambda seed: LayerLogistic("last", seed),
    "logreg_mid": lambda seed: LayerLogistic("mid", seed),
    "features_logreg": lambda seed: FeatureLogistic(seed),
    "mlpm": lambda seed: MahalanobisPrototypes(seed),
    "text_logreg": lambda seed: TextLogistic(seed),
    "herald_hardneg": lambda seed: HardNegativeHerald(seed),
    "herald_logistic": lambda seed: HeraldMethod(seed, direction_estimator="logistic"),
    "herald_logistic_crossfit": lambda seed: HeraldMethod(seed, direction_estimator="logistic", cross_fit=True),
    **{f"herald_logistic_C{c:g}": (lambda seed, c=c: HeraldMethod(seed, direction_estimator="logistic", direction_C=c))
       for c in DIRECTION_C_GRID},
    **{f"herald:{name}": (lambda seed, name=name: HeraldMethod(seed, name)) for name in FEATURE_SETS if name != FEATURE_SET},
}
FACTORIES.update({f"{base}+shift": (lambda seed, base=base: SourceShifted(base, seed))
                  for base in ("herald", "herald_logistic", *LATENT_BASELINES)})


def make_method(name: str, seed: int = 0) -> Method:
    """A fresh, unfitted method by name (see :data:`FACTORIES`).

    Raises:
        KeyError: for an unknown name.
    """
    return FACTORIES[name](seed)

"""Exploratory run (not a registered study): Herald with opening-word balanced training weights.

Question (docs/eval/opening_balance.md): Herald's held-out recall follows a request's opening word (README, "Write"
66%, "What" 35%). The corpus's benign rows open with "Write" and "What" far more often than its harmful rows (200
against 87, 330 against 71 in the LOSO rows), so a probe could learn that prior. Does removing it from the training
weights raise the held-out recall?

Weights: the source-balanced weights of ``HeraldMethod`` (``balanced_weights``), then for each opening word (first
whitespace token, lower-cased, outer punctuation removed) found in both classes, the harmful and the benign rows of
that word are rescaled so both carry half of its total weight (the factor clipped to [1/5, 5]); each class is then
brought back to the same total. This is inverse-propensity weighting on the opening word (Rosenbaum and Rubin 1983):
under it the opening word says nothing about the label. Words found in one class only keep their weights.

Usage, from the repository root (the shipped evaluation's options; only ``herald`` is changed, by replacing
``herald_service.training.eval.fit_method`` for it)::

    python docs/eval/opening_balance/run.py {none,both,scorer,directions} eval --direction-estimator logistic ...

``none`` is the shipped recipe step for step (a check that this script changes nothing else); ``both`` weights the
direction fit and the scorer; ``scorer`` and ``directions`` one of them.
"""

import re
import sys

import numpy as np

import herald_service.training.eval as evaluation
from herald_service.cli import main
from herald_service.probes.directions import fit_directions, peak_monotonicity_layer
from herald_service.probes.features import FeatureStats, compute_features
from herald_service.probes.probe import FittedProbe, balanced_weights, calibration_mask
from herald_service.probes.scorer import calibrate_threshold, train_scorer
from herald_service.training.methods import CALIBRATION_FRACTION, HeraldMethod

MODES = ("none", "both", "scorer", "directions")
CLIP = 5.0


def opening_word(prompt: str) -> str:
    """The first whitespace token of ``prompt``, lower-cased, outer punctuation removed ("" for a blank prompt)."""
    words = prompt.split()
    return re.sub(r"^[^\w']+|[^\w']+$", "", words[0].lower()) if words else ""


def opening_balanced_weights(groups: np.ndarray, labels: np.ndarray, prompts: list[str]) -> np.ndarray:
    """``(n,)`` float64 weights, mean 1: ``balanced_weights(groups, labels)`` with each opening word's weight split
    evenly between the classes (module docstring)."""
    base = balanced_weights(groups, labels)
    words = np.array([opening_word(p) for p in prompts])
    out = base.copy()
    for word in np.unique(words):
        harmful, benign = (words == word) & (labels == 1), (words == word) & (labels == 0)
        h, b = base[harmful].sum(), base[benign].sum()
        if h > 0 and b > 0:
            out[harmful] *= np.clip((h + b) / (2 * h), 1 / CLIP, CLIP)
            out[benign] *= np.clip((h + b) / (2 * b), 1 / CLIP, CLIP)
    for label in (0, 1):
        out[labels == label] *= (len(labels) / 2) / out[labels == label].sum()
    return out


class OpeningBalancedHerald(HeraldMethod):
    """``HeraldMethod.fit`` with the direction fit's and/or the scorer's weights replaced (``mode``)."""

    def __init__(self, seed: int, direction_estimator: str, mode: str) -> None:
        super().__init__(seed, direction_estimator=direction_estimator)
        self.mode = mode

    def fit_rows(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray, prompts: list[str]) -> "OpeningBalancedHerald":
        y = np.asarray(y).astype(int)
        calib = calibration_mask(groups, CALIBRATION_FRACTION, self.seed)
        fit = ~calib
        opening = opening_balanced_weights(groups[fit], y[fit], [prompts[i] for i in np.nonzero(fit)[0]])
        # as HeraldMethod: the direction fit weighs its fit rows alone, the scorer takes the whole set's weights
        w_directions = opening if self.mode in ("both", "directions") else balanced_weights(groups[fit], y[fit])
        w_scorer = opening if self.mode in ("both", "scorer") else balanced_weights(groups, y)[fit]
        directions = fit_directions(X[fit], y[fit], estimator=self.direction_estimator, sample_weight=w_directions,
                                    C=self.direction_C)
        s_fit = directions.project(X[fit])
        features = compute_features(s_fit, self.feature_set)
        stats = FeatureStats.fit(features)
        scorer = train_scorer(stats.transform(features), y[fit], w_scorer, seed=self.seed)
        partial = FittedProbe(directions, stats, scorer, 0.0, "max_f1", peak_monotonicity_layer(s_fit, y[fit]),
                              self.feature_set)
        self.threshold_ = calibrate_threshold(partial.logits(partial.features(directions.project(X[calib]))), y[calib],
                                              "max_f1")
        self.fitted_ = FittedProbe(directions, stats, scorer, self.threshold_, "max_f1", partial.peak_layer,
                                   self.feature_set)
        return self


def run(mode: str, argv: list[str]) -> None:
    shipped_fit_method = evaluation.fit_method

    def fit_method(name, data, seed, direction_estimator="lda"):
        if name != "herald":
            return shipped_fit_method(name, data, seed, direction_estimator)
        return OpeningBalancedHerald(seed, direction_estimator, mode).fit_rows(
            data.states, data.labels, evaluation.groups_of(data), data.prompts)

    evaluation.fit_method = fit_method
    main(argv)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in MODES:
        raise SystemExit(f"usage: run.py {{{','.join(MODES)}}} eval [herald eval options]")
    run(sys.argv[1], sys.argv[2:])

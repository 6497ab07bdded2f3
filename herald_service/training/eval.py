"""``herald eval``: Herald against latent and guard-style baselines on the same cached states and splits.

Protocols (see :mod:`.protocol`): the random stratified split of ``herald fit`` (saturated; reported for reference),
leave-one-source-out for every source, a learning curve, jailbreak-wrapped held-out harmful requests, and a
guard-style baseline on a per-source subsample. Every number carries a 95% stratified bootstrap interval.

The compute part (:func:`evaluate_states`) is pure numpy on arrays, so tests run it on synthetic states; the I/O part
(:func:`run_eval`) loads the corpus, reads states from the :class:`~.extract.StateCache` (computing only misses)
and writes one JSON file that ``herald report`` turns into ``docs/EVALUATION.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from herald_service.out_path import refuse_an_existing_out, write_text_atomically
from herald_service.probes.directions import DIRECTION_ESTIMATORS
from herald_service.probes.features import FEATURE_SET, require_layers
from herald_service.provenance import software
from herald_service.prompt_text import PROMPT_TEXT, normalize_prompt_text
from herald_service.training.attacks import TEMPLATE_RULE
from herald_service.training.bootstrap import bootstrap_metrics, operating_points, paired_auroc_differences
from herald_service.training.corpus import JAILBREAK_SET, left_out_by_cap
from herald_service.training.method_names import DEFAULT_METHODS
from herald_service.training.methods import FACTORIES, FeatureLogistic, HeraldMethod, Method, make_method
from herald_service.training.protocol import class_sample, loso_folds

if TYPE_CHECKING:
    from herald_service.backbone.loader import ResolvedBackbone

log = logging.getLogger(__name__)

CURVE_SIZES = (25, 50, 100, 250, 500, 1000)
CURVE_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class LabeledStates:
    """States and labels of a set of prompts.

    Attributes:
        states: ``(n, layer, d_model)`` float32.
        labels: ``(n,)`` int, 1 = harmful.
        sources: ``(n,)`` str.
        tokens: ``(n,)`` int rendered token counts.
        prompts: ``(n,)`` prompt texts (for the guard baseline and the report's examples).
    """

    states: np.ndarray
    labels: np.ndarray
    sources: np.ndarray
    tokens: np.ndarray
    prompts: list[str] = field(default_factory=list)

    def take(self, index: np.ndarray) -> "LabeledStates":
        return LabeledStates(self.states[index], self.labels[index], self.sources[index], self.tokens[index],
                             [self.prompts[i] for i in index] if self.prompts else [])

    def read_texts(self) -> np.ndarray:
        """``(n,)`` object array: the prompts as the backbone reads them
        (:func:`~herald_service.prompt_text.normalize_prompt_text`), for methods that read text (``text_logreg``).

        Raises:
            ValueError: the set was built without its prompts."""
        if len(self.prompts) != len(self.labels):
            raise ValueError(f"a text-reading method needs the prompts of all {len(self.labels)} rows; this set has"
                             f" {len(self.prompts)}")
        return np.array([normalize_prompt_text(p) for p in self.prompts], dtype=object)


def method_inputs(method: Method, rows: LabeledStates) -> np.ndarray:
    """What ``method`` fits on and scores: ``rows.states`` ``(n, layer, d_model)``, or for a method that reads text
    (``method.reads == "text"``) :meth:`LabeledStates.read_texts` ``(n,)``."""
    return rows.read_texts() if method.reads == "text" else rows.states


@dataclass(frozen=True)
class Plan:
    """What :func:`evaluate_states` runs."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    loso: bool = True
    curve_sizes: tuple[int, ...] = CURVE_SIZES
    curve_seeds: tuple[int, ...] = CURVE_SEEDS
    replicates: int = 1000
    seed: int = 0
    direction_estimator: str = DIRECTION_ESTIMATORS[0]
    """The per-layer direction estimator of the methods named ``herald`` and ``herald:<feature set>`` (``herald fit
    --direction-estimator``), so that "Herald" in the results is the recipe of the probe evaluated; the other methods
    are unchanged."""


def groups_of(data: LabeledStates) -> np.ndarray:
    return np.array([f"{s}|{y}" for s, y in zip(data.sources, data.labels)])


def fit_method(name: str, data: LabeledStates, seed: int, direction_estimator: str = DIRECTION_ESTIMATORS[0]) -> Method:
    """Fit method ``name`` on ``data``; ``herald``, ``herald:<feature set>`` and ``features_logreg`` (the MLP's
    contribution: Herald's directions, a logistic scorer) with ``direction_estimator`` (:class:`~.methods.HeraldMethod`,
    :class:`~.methods.FeatureLogistic`), so that every Herald variant of a run is the recipe of the probe evaluated
    and differs only where its name says.

    Raises:
        KeyError: an unknown method name."""
    if name == "herald" or (name.startswith("herald:") and name in FACTORIES):  # an unknown set: make_method's KeyError
        method = HeraldMethod(seed, feature_set=name.partition(":")[2] or FEATURE_SET,
                              direction_estimator=direction_estimator)
    elif name == "features_logreg":
        method = FeatureLogistic(seed, direction_estimator)
    else:
        method = make_method(name, seed)
    return method.fit(method_inputs(method, data), data.labels, groups_of(data))


def feature_sets_of(methods: Sequence[str]) -> list[str]:
    """The trajectory feature sets that ``methods`` compute (:func:`fit_method`): ``herald:<set>`` its set; Herald's
    other variants and ``features_logreg`` (with or without ``+shift``) the default set."""
    return [name.split("+")[0].partition(":")[2] or FEATURE_SET for name in methods
            if name.startswith(("herald", "features_logreg"))]


def margins(method: Method, rows: LabeledStates) -> np.ndarray:
    """``score - threshold`` ``(n,)`` of ``rows``: 0 is each method's own decision boundary, so margins from
    different fits pool."""
    return method.score(method_inputs(method, rows)) - method.threshold_


def boot(labels, m, replicates, seed=0) -> dict:
    return bootstrap_metrics(labels, m, m >= 0, replicates=replicates, seed=seed)


def by_source(labels: np.ndarray, m: np.ndarray, sources: np.ndarray, replicates: int) -> dict:
    return {s: boot(labels[sources == s], m[sources == s], replicates) for s in sorted(set(sources.tolist()))}


def trajectory_summary(s: np.ndarray, labels: np.ndarray, sources: np.ndarray) -> dict:
    """Mean and 10/25/75/90th percentiles of trajectories ``(n, layer)`` per class, and per-source means."""
    out = {}
    for name, value in (("benign", 0), ("harmful", 1)):
        rows = s[labels == value]
        if len(rows):
            q = np.percentile(rows, [10, 25, 75, 90], axis=0)
            out[name] = {"mean": rows.mean(0).tolist(), "p10": q[0].tolist(), "p25": q[1].tolist(),
                         "p75": q[2].tolist(), "p90": q[3].tolist(), "n": int(len(rows))}
    out["per_source_mean"] = {src: s[sources == src].mean(0).tolist() for src in sorted(set(sources.tolist()))}
    return out


def evaluate_states(
    data: LabeledStates,
    train_index: np.ndarray,
    test_index: np.ndarray,
    plan: Plan,
    extra_sets: dict[str, LabeledStates] | None = None,
    progress: Callable[[str], None] = log.info,
    added_rows: Callable[[str | None], LabeledStates] | None = None,
) -> dict:
    """Run every protocol of ``plan`` on one set of states.

    Args:
        data: the corpus states.
        train_index, test_index: the random split (LOSO folds and curve draws are carved from it).
        extra_sets: named sets scored by the models fitted on the random split's train part (e.g. jailbreak-wrapped
            prompts, or files given with ``--test-data``); never trained on.
        added_rows: training rows joined to every method's training set, by held-out source (``None``: the random
            split), e.g. jailbreak-wrapped requests (``herald eval --jailbreak-train-per-class``: a fold never gets
            rows made from its held-out source, :func:`~.attacks.fold_rows`); never scored. The learning curve's draws
            get none (they measure the corpus rows alone).

    Returns:
        A JSON-ready dict with ``random_split``, ``extra``, ``loso`` (``folds`` and ``pooled``), ``learning_curve``,
        ``trajectories`` and, for the guard comparison and ``herald eval --scores-out``, ``loso_margins`` (every row's
        margin from the fold that held its source out) and ``row_margins`` (``{"random_split": {method: [margin of each
        test-part row]}, "extra": {set: {method: [...]}}}``); :func:`run_eval` writes neither into the results file.
    """
    extra_sets = extra_sets or {}
    results: dict = {"random_split": {}, "extra": {name: {} for name in extra_sets}}
    row_margins: dict = {"random_split": {}, "extra": {name: {} for name in extra_sets}}
    train, test = data.take(train_index), data.take(test_index)
    if added_rows is not None:
        train = joined(train, added_rows(None))
    timing = {}
    for name in plan.methods:
        started = time.perf_counter()
        method = fit_method(name, train, plan.seed, plan.direction_estimator)
        timing[name] = round(time.perf_counter() - started, 2)
        m = margins(method, test)
        row_margins["random_split"][name] = rounded(m)
        results["random_split"][name] = {"pooled": boot(test.labels, m, plan.replicates),
                                         "per_source": by_source(test.labels, m, test.sources, plan.replicates)}
        if name == "herald":
            results["trajectories"] = trajectory_summary(method.trajectories(test.states), test.labels, test.sources)
            results["herald_peak_layer"] = int(method.fitted_.peak_layer)
        if name == "lda_best_layer":
            results["lda_best_layer_layer"] = int(method.layer_) + 1
        for set_name, extra in extra_sets.items():
            em = margins(method, extra)
            row_margins["extra"][set_name][name] = rounded(em)
            results["extra"][set_name][name] = {"pooled": boot(extra.labels, em, plan.replicates),
                                                "per_source": by_source(extra.labels, em, extra.sources, plan.replicates)}
        progress(f"random split: {name} fitted in {timing[name]} s")
    results["fit_seconds"] = timing
    results["row_margins"] = row_margins

    if plan.loso:
        results["loso"], results["loso_margins"] = _loso(data, train_index, test_index, plan, progress, added_rows)
    if plan.curve_sizes:
        results["learning_curve"] = _learning_curve(data, train_index, test_index, plan, progress)
    return results


@dataclass(frozen=True)
class RepeatedPrompts:
    """Scored rows a model was also trained on because the data gives their prompt more than once
    (:func:`repeated_prompts`).

    Attributes:
        random_split_test_in_train: test-part rows whose prompt is a train-part row's.
        loso_by_source: per source, its rows whose prompt is a train-part row of another source, which its
            leave-one-source-out fold trains on.
    """

    random_split_test_in_train: int
    loso_by_source: dict[str, int]

    def record(self, loso: dict | None) -> dict[str, int]:
        """``meta.repeated_prompts``: the random split's count, and with ``loso`` (the results' block) the count over
        the folds that ran (a skipped fold scores nothing: re-tester)."""
        out = {"random_split_test_in_train": self.random_split_test_in_train}
        if loso is not None:
            out["loso_held_out_in_training"] = sum(n for source, n in self.loso_by_source.items() if source in loso["folds"])
        return out


def repeated_prompts(prompts: list[str], sources: np.ndarray, train_index: np.ndarray, test_index: np.ndarray
                     ) -> RepeatedPrompts:
    """Count the scored rows whose prompt the data also gives to the model's training rows, compared as the backbone
    reads them (:func:`~herald_service.prompt_text.normalize_prompt_text`; ``load_training_corpus`` keeps such copies
    and warns). A researcher's data with 144 repeated prompts gave a random split of AUROC 0.987 with one log line."""
    read = [normalize_prompt_text(p) for p in prompts]
    trained: dict[str, set[str]] = {}
    for i in train_index:
        trained.setdefault(read[i], set()).add(str(sources[i]))
    by_source: Counter = Counter(str(sources[i]) for i in range(len(read))
                                 if trained.get(read[i], set()) - {str(sources[i])})
    return RepeatedPrompts(int(sum(read[i] in trained for i in test_index)), dict(by_source))


def rounded(m: np.ndarray) -> list[float | None]:
    """Margins ``(n,)`` as JSON: 5 decimals, None for NaN (a row no model scored)."""
    return [None if np.isnan(v) else round(float(v), 5) for v in m]


def joined(a: LabeledStates, b: LabeledStates) -> LabeledStates:
    """The rows of ``a`` then those of ``b``."""
    return LabeledStates(np.concatenate([a.states, b.states]), np.concatenate([a.labels, b.labels]),
                         np.concatenate([a.sources, b.sources]), np.concatenate([a.tokens, b.tokens]), a.prompts + b.prompts)


def unlearnable_fold(source: str, train: LabeledStates, seed: int) -> str | None:
    """Why the leave-one-source-out fold of ``source`` cannot be fitted, or None when it can: its training rows
    (``train``, after ``source`` is held out) lack a label, as when ``source`` holds every harmful row of the data, or
    leave one out of a method's calibration part or with fewer than 2 rows in its fit part (:func:`split_problem`
    with the fit ``seed``). The first was skipped without a word, so the pooled block lacked a class and ``herald
    eval`` ended in a ``KeyError: 'auroc'`` traceback; the second ended the run after the random split with
    "calibration needs both classes", naming no fold (tester findings: 10 harmful rows, 9 of one source). Callers log
    this reason once and record it under the results' ``skipped_folds``."""
    missing = [name for name, label in (("benign", 0), ("harmful", 1)) if not (train.labels == label).any()]
    if missing:
        return (f"source {source!r} holds every {' and '.join(missing)} training row, so a model fitted without it"
                " has none to learn from; its rows are left out of the pooled metrics")
    why = split_problem(train.labels, groups_of(train), seed)
    if why is None:
        return None
    return (f"without source {source!r} the training rows leave {why} (a quarter of each (source, label) group,"
            " rounded, so groups of 1 or 2 rows give calibration none); its rows are left out of the pooled metrics")


def split_problem(labels: np.ndarray, groups: np.ndarray, seed: int) -> str | None:
    """What a method's fit (:meth:`~.methods.HeraldMethod.fit`: its calibration part,
    :func:`~herald_service.probes.probe.calibration_mask` of ``groups`` with ``seed``) would lack on rows of
    ``labels`` (``(n,)`` int, 1 = harmful): ``"no harmful row in its calibration part"``, ``"fewer than 2 benign rows
    in its fit part"`` and the like, or None where both parts hold both labels."""
    from herald_service.probes.probe import calibration_mask
    from herald_service.training.methods import CALIBRATION_FRACTION

    calibration = calibration_mask(groups, CALIBRATION_FRACTION, seed)
    for name, label in (("harmful", 1), ("benign", 0)):
        if not (labels[calibration] == label).any():
            return f"no {name} row in its calibration part"
        if (labels[~calibration] == label).sum() < 2:
            return f"fewer than 2 {name} rows in its fit part"
    return None


def pooled_metrics(labels: np.ndarray, held: np.ndarray, replicates: int) -> dict:
    """Bootstrap metrics (:func:`boot`) of the rows a fold scored (``held``: ``(n,)`` margins, NaN for rows of a
    skipped fold); ``{"n": {"value": 0}, "n_harmful": {"value": 0}}`` when no fold ran. A pooled block without both
    classes (a skipped fold held every row of one) has recall or false_positive_rate only, as any one-class sample:
    readers take a missing metric as not computable."""
    done = ~np.isnan(held)
    if not done.any():
        return {"n": {"value": 0}, "n_harmful": {"value": 0}}
    return boot(labels[done], held[done], replicates)


def _loso(data, train_index, test_index, plan: Plan, progress, added_rows=None) -> tuple[dict, dict]:
    """The leave-one-source-out protocol: ``{"folds", "pooled", "skipped_folds"}`` (skipped: source -> reason,
    :func:`unlearnable_fold`, also logged as a warning) with, where the pooled rows hold both classes,
    ``"operating_points"`` (:func:`~.bootstrap.operating_points` of the pooled held-out margins, Herald the reference),
    and every row's held-out margin per method."""
    folds_out: dict = {}
    skipped: dict[str, str] = {}
    held_margins = {name: np.full(len(data.labels), np.nan) for name in plan.methods}
    folds = loso_folds(data.sources, data.labels, train_index, test_index)
    for fold in folds:
        train = data.take(fold.train_index)
        added = 0
        if added_rows is not None:
            extra = added_rows(fold.source)
            train, added = joined(train, extra), len(extra.labels)
        reason = unlearnable_fold(fold.source, train, plan.seed)
        if reason is not None:
            log.warning("LOSO fold skipped: %s", reason)
            skipped[fold.source] = reason
            continue
        fold_out = {"n_train": int(len(fold.train_index)), "n_held_out": int(len(fold.held_out_index)),
                    "n_contrast": int(len(fold.contrast_index)), "methods": {}}
        contrast_margins = {}
        if added_rows is not None:
            fold_out["n_train_added"] = int(added)
        for name in plan.methods:
            method = fit_method(name, train, plan.seed, plan.direction_estimator)
            test_idx = fold.test_index
            m = margins(method, data.take(test_idx))
            held = m[: len(fold.held_out_index)]
            held_margins[name][fold.held_out_index] = held
            fold_out["methods"][name] = {
                "held_out": boot(data.labels[fold.held_out_index], held, plan.replicates),
                "with_contrast": boot(data.labels[test_idx], m, plan.replicates),
            }
            contrast_margins[name] = m
        if "herald" in contrast_margins and len(contrast_margins) > 1 and len(set(data.labels[fold.test_index])) == 2:
            # Herald's AUROC minus each method's on the fold's rows, paired (issue 3's every-fold AUROC target)
            fold_out["auroc_differences"] = paired_auroc_differences(data.labels[fold.test_index], contrast_margins,
                                                                     "herald", plan.replicates)
        folds_out[fold.source] = fold_out
        progress(f"LOSO fold done: {fold.source}")
    pooled = {name: pooled_metrics(data.labels, held_margins[name], plan.replicates) for name in plan.methods}
    loso = {"folds": folds_out, "pooled": pooled, "skipped_folds": skipped}
    done = ~np.isnan(held_margins[plan.methods[0]]) if plan.methods else np.zeros(0, dtype=bool)
    if done.any() and len(set(data.labels[done].tolist())) == 2:  # every method scored the same rows (skips are per fold)
        loso["operating_points"] = operating_points(
            data.labels[done], {name: held_margins[name][done] for name in plan.methods},
            reference="herald" if "herald" in plan.methods else None, replicates=plan.replicates)
    return loso, {name: rounded(held_margins[name]) for name in plan.methods}


def _learning_curve(data, train_index, test_index, plan: Plan, progress) -> dict:
    test = data.take(test_index)
    available = [int((data.labels[train_index] == label).sum()) for label in (0, 1)]
    full = [size for size in plan.curve_sizes if size >= max(available)]
    if len(full) > 1:  # each such size draws every train-part row: the same fits again (tester finding)
        log.warning("learning curve: --curve-sizes %s are each at least the train part's %d benign and %d harmful rows,"
                    " so each draws all of them: the points from %d on repeat one another", ", ".join(map(str, full)),
                    *available, full[0])
    out: dict = {"sizes": list(plan.curve_sizes), "seeds": list(plan.curve_seeds), "methods": {}, "actual_per_class": {}}
    for size in plan.curve_sizes:
        for seed in plan.curve_seeds:
            pick = class_sample(data.labels, train_index, size, seed)
            sub = data.take(pick)
            out["actual_per_class"][str(size)] = {"benign": int((sub.labels == 0).sum()), "harmful": int((sub.labels == 1).sum())}
            for name in plan.methods:
                m = margins(fit_method(name, sub, seed, plan.direction_estimator), test)
                point = bootstrap_metrics(test.labels, m, m >= 0, replicates=1)
                row = out["methods"].setdefault(name, {}).setdefault(str(size), {"auroc": [], "f1": [], "false_positive_rate": []})
                for key in row:
                    row[key].append(point[key]["value"])
        progress(f"learning curve: {size} per class done")
    return out


def require_curve_draws(examples: list, test_fraction: float, seed: int, sizes: tuple[int, ...],
                        seeds: tuple[int, ...]) -> None:
    """Refuse, before any model loads, learning-curve sizes (``--curve-sizes``, prompts per class) whose draws
    (:func:`~.protocol.class_sample` from the random split's train part, one per ``--curve-seeds`` seed, as
    :func:`_learning_curve` draws them) leave a label out of a method's calibration part or with fewer than 2 rows in
    its fit part (:func:`~herald_service.probes.probe.calibration_mask`: a quarter of each (source, label) group of the
    draw, rounded, with the draw's seed). A draw spread over many sources has groups of 1 or 2 rows, which give
    calibration none: ``--curve-sizes '[3]'`` passed the option's check and failed after the backbone load and every
    other protocol with "calibration needs both classes" (tester finding). Rows that extraction later skips (over
    ``--max-tokens``) are counted here, as in :func:`~.corpus.require_split_parts`.

    Args:
        examples: the capped rows; ``test_fraction`` and ``seed`` those of the random split.

    Raises:
        ValueError: naming ``--curve-sizes``, the first size and seed that fail, the label and part, and the smallest
            size whose draws all work on these rows (or that none does).
    """
    from herald_service.training.corpus import stratified_split

    train_index, _ = stratified_split(examples, test_fraction, seed)
    labels = np.array([e.label for e in examples], dtype=int)
    groups = np.array([f"{e.source}|{e.label}" for e in examples])

    def problem(size: int, draw_seed: int) -> str | None:
        pick = class_sample(labels, train_index, size, draw_seed)
        return split_problem(labels[pick], groups[pick], draw_seed)

    failing = next(((size, s, why) for size in sizes for s in seeds if (why := problem(size, s))), None)
    if failing is None:
        return
    size, draw_seed, why = failing
    largest = max(int((labels[train_index] == label).sum()) for label in (0, 1))
    works = next((n for n in range(size + 1, largest + 1) if not any(problem(n, s) for s in seeds)), None)
    advice = (f"the smallest size whose draws all work on this data is {works}" if works is not None else
              "no size works on this data")
    raise ValueError(f"--curve-sizes: a learning-curve draw of {size} prompts per class (--curve-seeds {draw_seed}) leaves"
                     f" {why} (a quarter of each (source, label) group of the draw, rounded, so groups of 1 or 2 rows"
                     f" give calibration none); {advice}; give larger sizes, or --curve-sizes '[]' for no learning curve")


# ---------------------------------------------------------------------------------------------------------------
# I/O: corpus, states, guard, and the command.


@dataclass(frozen=True)
class EvalOptions:
    """Inputs of ``herald eval`` (mirrors its flags)."""

    data: list[Path]
    backbone: str
    cache_dir: Path
    out: Path = Path("docs/eval/results.json")
    test_data: list[Path] = field(default_factory=list)
    device: str = "auto"
    dtype: str = "auto"
    max_per_source: int | None = 150
    max_tokens: int = 1024
    test_fraction: float = 0.2
    seed: int = 0
    methods: tuple[str, ...] = DEFAULT_METHODS
    loso: bool = True
    curve_sizes: tuple[int, ...] = CURVE_SIZES
    curve_seeds: tuple[int, ...] = CURVE_SEEDS
    replicates: int = 1000
    jailbreak_templates: Path | None = None
    jailbreak_n: int = 40
    jailbreak_max_chars: int = 2500
    guard_per_source: int = 0
    guard_max_tokens: int = 768
    probe: Path | None = None
    trimmed_views: bool = False
    """With ``probe``: also score its sets with the trimmed views ``herald serve`` adds by default
    (:func:`score_saved_probe`'s ``views``)."""
    overwrite: bool = False
    """Replace an existing ``out`` file (``--overwrite``); without it :func:`~herald_service.out_path.refuse_an_existing_out` refuses."""
    direction_estimator: str = DIRECTION_ESTIMATORS[0]
    """Of the methods ``herald`` and ``herald:<feature set>`` (:attr:`Plan.direction_estimator`)."""
    jailbreak_train_per_class: int = 0
    """Harmful requests wrapped in jailbreak training templates, added to every method's training rows in the random
    split and every LOSO fold, as ``herald fit --jailbreak-train-per-class`` adds them to a probe's; 0: none."""
    format_train_per_class: int = 0
    """Harmful and benign training prompts wrapped in format instructions (:func:`.format_wrapped.training_rows`),
    added to every method's training rows in the random split and every LOSO fold; 0: none
    (docs/eval/format_wrapped.md)."""
    layout_train_per_class: int = 0
    """Harmful and benign training prompts laid out as set-apart words (:func:`.layouts.training_rows`), added as
    ``format_train_per_class``'s are; 0: none (docs/eval/recipe_studies.md, fifteenth study)."""
    casual_train_per_class: int = 0
    """Harmful and benign training prompts written casually (:func:`.casing.training_rows`: a small first letter and
    no end mark, or every letter small), added as ``format_train_per_class``'s are; 0: none
    (docs/eval/recipe_studies.md, seventeenth study)."""
    casual_questions: bool = False
    """With ``loaded_questions``, each written question added once more written casually
    (:func:`.casing.casual_questions`), its label kept (docs/eval/recipe_studies.md, eighteenth study)."""
    layout_questions: bool = False
    """With ``loaded_questions``, each written question added once more laid out as set-apart words
    (:func:`.layouts.laid_out_questions`), its label kept (docs/eval/recipe_studies.md, sixteenth study)."""
    loaded_questions: bool = False
    """Add the benign loaded-word questions (:mod:`.loaded_questions`) to every method's training rows in the random
    split and every LOSO fold, as ``herald fit --loaded-questions`` adds them to a probe's."""
    harmful_questions: bool = False
    """With ``loaded_questions``, their harmful counterparts too, as ``herald fit --harmful-questions``."""
    everyday_questions: bool = False
    """With ``loaded_questions``, the everyday how-to questions too, as ``herald fit --everyday-questions``."""
    templated_n: int = 0
    """Templated benign prompts (:func:`.templated.templated_benign` with ``seed``) added to every method's training
    rows in the random split and every LOSO fold, as ``herald fit --templated-n`` adds them; 0: none."""
    command: str | None = None
    """The command line to record in the results (``herald eval ...``); None outside the CLI."""
    scores_out: Path | None = None
    """Where to write every scored prompt's margins (:func:`write_scores`); None: nowhere. Refused, as ``out``, when it
    exists without ``overwrite``."""


def read_test_data(paths: list[Path]) -> dict[Path, list]:
    """The rows of each ``--test-data`` file, read before any model loads
    (:func:`~herald_service.training.corpus.load_corpus`).

    Raises:
        ValueError: every error of :func:`~herald_service.training.corpus.check_test_data_paths`, a file without a
            row (empty or blank lines only), and every error of ``load_corpus`` (file and line of a bad row).
        NotUtf8Error, OSError: as ``load_corpus``.
    """
    from herald_service.training.corpus import check_test_data_paths, load_corpus

    rows = {}
    for path in check_test_data_paths(paths):
        rows[path] = load_corpus([path])
        if not rows[path]:  # scored as no rows, it failed after the backbone load with "need equal, non-empty lengths"
            raise ValueError(f"{path} holds no labeled row (--test-data): it is empty or only blank lines; give JSONL"
                             " rows {\"prompt\", \"label\", \"source\"}")
    return rows


def folded_prompts_by_file(rows: list) -> dict[str, set[str]]:
    """The prompts of ``rows`` (text as scored: a context joined to its request) as the backbone reads them
    (:func:`~herald_service.prompt_text.normalize_prompt_text`: a copy with a zero-width space or fullwidth letters is
    the same prompt), by the name of the file each row came from (``Example.file``). Folded once per row: folding is
    most of a corpus load (about 3 s for the 18,000 rows of ../shared/data), and ``--data`` and ``--probe`` both need
    it."""
    out: dict[str, set[str]] = {}
    for example in rows:
        out.setdefault(example.file, set()).add(normalize_prompt_text(example.prompt))
    return out


def count_held(rows: list, held: set[str]) -> int:
    """How many of ``rows``' prompts, read as :func:`folded_prompts_by_file` reads them, are in ``held``."""
    return sum(normalize_prompt_text(example.prompt) in held for example in rows)


def test_data_overlap(test_sets: dict[Path, list], data_prompts: set[str]) -> dict[str, dict]:
    """For each ``--test-data`` file, how many of its prompts are also a prompt of the ``--data`` rows
    (:func:`count_held`), so may have been trained on; a file with any is logged as a warning (the training file
    given as --test-data was reported as "never trained on": breaker finding).

    Args:
        test_sets: :func:`read_test_data`; ``data_prompts``: the folded prompts of every ``--data`` row, before the
            per-source cap (:func:`folded_prompts_by_file`).

    Returns:
        ``{file name: {"rows": n, "also_in_data": k}}`` for the results' ``meta.test_data_overlap``.
    """
    out = {}
    for path, rows in test_sets.items():
        shared = count_held(rows, data_prompts)
        out[path.name] = {"rows": len(rows), "also_in_data": shared}
        if shared:
            log.warning("--test-data %s: %d of its %d prompts also appear in --data; they may have been trained on, "
                        "so its numbers are not those of unseen prompts", path, shared, len(rows))
    return out


@dataclass(frozen=True)
class ProbeTrainingOverlap:
    """What ``herald eval --probe`` knows of the ``--test-data`` prompts the probe may have been trained on
    (:func:`probe_training_overlap`).

    Attributes:
        sets: ``{test file name: {"rows": n, "in_training_files": k, "same_file": recorded name or None,
            "checked_all": bool}}``: ``k`` counts the prompts in the checked training files; ``checked_all`` is false
            when some recorded files could not be checked (``unchecked``) and the file is not one of them by sha256,
            so ``k`` may be short.
        unchecked: ``{recorded training file name: why its prompts could not be compared}``.
        checked: the recorded training files whose prompts were compared.
        held: the folded prompts of the checked training files (:func:`folded_prompts_by_file`).
        whole: test file names whose bytes are those of a recorded training file (every row counts as trained on).
    """

    sets: dict[str, dict]
    unchecked: dict[str, str]
    checked: list[str]
    held: frozenset[str]
    whole: frozenset[str]

    def seen(self, name: str, prompts: list[str]) -> np.ndarray:
        """``(n,)`` bool: which of the scored ``prompts`` of test set ``name`` are in the probe's training files."""
        if name in self.whole:
            return np.ones(len(prompts), dtype=bool)
        return np.array([normalize_prompt_text(p) in self.held for p in prompts], dtype=bool)

    def record(self) -> dict:
        """The results' ``saved_probe.training_files``."""
        return {"checked": self.checked, "unchecked": self.unchecked}


def probe_training_overlap(test_sets: dict[Path, list], probe_folder: Path, probe_manifest: dict, data_files: list[Path],
                           data_prompts: dict[str, set[str]]) -> ProbeTrainingOverlap:
    """For each ``--test-data`` file, how many of its prompts are in the files the ``--probe`` was fitted on.

    ``probe.json`` records each training file's name and sha256 (``training_data.files``), not its folder, so a
    recorded file is looked for among this run's ``--data`` files by its sha256 (its rows, then, are those the probe
    read), under its name or another (a renamed copy was reported "not among --data": tester finding), or else among
    the ``--test-data`` files by sha256; a ``--data`` file of its name with other bytes is named so, as changed since
    the fit or another file of that name ("changed since the fit" alone misnamed the latter: re-tester finding).
    Prompts are compared as :func:`test_data_overlap` compares them (:func:`count_held`). A test file whose sha256 is a recorded file's counts whole even when that file
    is not among ``--data``. Only a sha256 match was checked before: a copy of the training file with one more newline
    was marked ``trained_on: false`` with no warning and its F1 of 0.98 read as unseen (tester finding). The probe saw
    only its training part, after the per-source cap and the 20% held out, but which rows those were is not recorded,
    so every prompt of a training file counts as trained on.

    Logged as warnings: in one line, the recorded files that cannot be checked (not among ``--data``, or changed since
    the fit); per test file with any, its count.

    Args:
        data_files: this run's ``--data`` files (:func:`~.corpus.expand_data`); ``data_prompts``: their folded
            prompts by file name (:func:`folded_prompts_by_file`).

    Raises:
        OSError: a file that cannot be read (:func:`read_test_data` and the corpus load have read them already).
    """
    from herald_service.backbone.loader import sha256_file

    recorded = [entry for entry in (probe_manifest.get("training_data") or {}).get("files", []) if isinstance(entry, dict)]
    by_sha = {entry.get("sha256"): entry.get("file") for entry in recorded}
    digests = {path: sha256_file(path) for path in data_files}
    test_digests = {path: sha256_file(path) for path in test_sets}
    checked, unchecked = [], {}
    held: set[str] = set()  # the folded prompts of the recorded training files found
    for entry in recorded:
        name = entry.get("file")
        named = [path for path in data_files if path.name == name]
        same_bytes = [path for path in data_files if digests[path] == entry.get("sha256")]
        given = [path for path, digest in test_digests.items() if digest == entry.get("sha256")]
        if same_bytes:  # by name, else under another name (cp base.jsonl renamed.jsonl: it went unchecked, tester finding)
            found = next((path for path in same_bytes if path.name == name), same_bytes[0])
            checked.append(name)
            held |= data_prompts.get(found.name, set())
        elif given:  # the training file itself among --test-data: its copies elsewhere are caught too (tester's case)
            checked.append(name)
            held |= set().union(*folded_prompts_by_file(test_sets[given[0]]).values())
        elif not named:
            unchecked[name] = "not among --data or --test-data"
        else:
            unchecked[name] = ("a --data file of this name, with other bytes than recorded: changed since the fit, or"
                               " another file")
    if not recorded:  # nothing checked: a count of 0 said "none of its prompts" (re-tester)
        log.warning("--probe %s: its probe.json records no training files (training_data.files), so --test-data prompts"
                    " cannot be checked against its training data", probe_folder)
    if unchecked:
        log.warning("--probe %s: %d of the %d training files its probe.json records cannot be checked for --test-data "
                    "prompts: %s; %s", probe_folder, len(unchecked), len(recorded),
                    ", ".join(f"{name} ({why})" for name, why in unchecked.items()),
                    f"--test-data prompts are compared with those of the other {len(checked)} only" if checked else
                    "only a --test-data file with the same sha256 as one of them is caught")
    sets, whole = {}, set()
    for path, rows in test_sets.items():
        same = by_sha.get(test_digests[path])
        count = len(rows) if same is not None else count_held(rows, held)
        # a whole-file match counts every row whatever else could be checked; else the count is of the checked files
        # only, which read as "none of its prompts" when some could not be checked (tester finding)
        complete = same is not None or (bool(recorded) and not unchecked)
        sets[path.name] = {"rows": len(rows), "in_training_files": count, "same_file": same, "checked_all": complete}
        if same is not None:
            whole.add(path.name)
            log.warning("--test-data %s: the --probe %s was trained on this file (its probe.json records %s with the same"
                        " sha256), so the saved probe's metrics on it are not those of unseen prompts", path,
                        probe_folder, same)
        elif count:
            log.warning("--test-data %s: %d of its %d prompts %s in the %straining files of the --probe %s (those its "
                        "probe.json records); it may have been trained on them, so the saved probe's metrics on this file"
                        " are not those of unseen prompts%s", path, count, len(rows), "is" if count == 1 else "are",
                        "" if complete else "checked ", probe_folder,
                        f" (its metrics on the other {len(rows) - count} are recorded apart)"
                        if count < len(rows) and complete else "")
    return ProbeTrainingOverlap(sets, unchecked, checked, frozenset(held), frozenset(whole))


def _states_for(backbone, examples, cache, max_tokens: int, desc: str):
    from herald_service.training.extract import extract_corpus_states

    corpus = extract_corpus_states(backbone, examples, cache, max_tokens, desc=desc)
    return _labeled(corpus), corpus.examples, corpus.skipped


def _labeled(corpus) -> LabeledStates:
    """The :class:`LabeledStates` of an extracted corpus (:class:`~.extract.CorpusStates`)."""
    kept = corpus.examples
    return LabeledStates(corpus.states, np.array([e.label for e in kept]), np.array([e.source for e in kept]),
                         corpus.tokens, [e.prompt for e in kept])


@dataclass(frozen=True)
class CorpusStates:
    """The capped corpus, its last-token states and the random split that ``herald eval`` and ``herald recipes`` share.

    Attributes:
        backbone: the loaded :class:`~herald_service.backbone.hf.HFBackbone`; ``cache`` its state cache.
        files: the corpus JSONL files read; ``everything``: all their rows; ``capped``: the rows kept by the
            per-(source, label) cap.
        data: states of the capped rows that fit ``max_tokens``; ``examples``: those rows, in ``data`` order;
            ``skipped``: rows over ``max_tokens``.
        train_index, test_index: the stratified split of ``examples``.
        max_tokens: the limit applied (rendered tokens): the one asked for, capped at the backbone's position table
            (:func:`~herald_service.training.extract.capped_max_tokens`); later extractions of the run use it too.
    """

    backbone: Any
    cache: Any
    files: list[Path]
    everything: list
    capped: list
    data: LabeledStates
    examples: list
    skipped: int
    train_index: np.ndarray
    test_index: np.ndarray
    max_tokens: int


def load_corpus_states(data: list[Path], backbone: str, cache_dir: Path, device: str = "auto", dtype: str = "auto",
                       max_per_source: int | None = 150, max_tokens: int = 1024, test_fraction: float = 0.2,
                       seed: int = 0, resolved: ResolvedBackbone | None = None,
                       check_rows: Callable[[list], None] | None = None,
                       feature_sets: Sequence[str] = (), cap_recorded_in: str | None = None) -> CorpusStates:
    """Load the backbone, read and cap the corpus, extract (or read cached) states, split: the common start of
    ``herald eval``, ``herald recipes`` and the studies in docs/eval/.

    Args:
        resolved: ``backbone`` already resolved (``herald eval --probe`` resolves it to check the probe first): not
            resolved again, which re-hashed the embedded GGUF's 98 MB.
        check_rows: called with the capped rows before the backbone loads, to refuse what the caller's protocols
            cannot run on (``herald eval``'s learning curve: :func:`require_curve_draws`); raises ValueError.
        feature_sets: the trajectory feature sets the caller's methods compute: a backbone with fewer decoder layers
            than one of them needs is refused once loaded, before any state is extracted
            (:func:`~herald_service.probes.features.require_layers`).
        data: JSONL files or folders (:func:`~herald_service.training.corpus.expand_data`).
        cap_recorded_in: where the caller records the rows ``max_per_source`` left out, named by the warning that
            counts them (:func:`~herald_service.training.corpus.warn_of_cap`) when it shows only the largest groups.
        max_tokens: rendered tokens; longer prompts are skipped and counted. Capped at the backbone's position
            table (:func:`~herald_service.training.extract.capped_max_tokens`).

    Raises:
        BackboneError: the backbone cannot be loaded (a path that does not exist or holds no model: before the
            corpus is read).
        ValueError: before the load, a data path that is missing, a bad row, a prompt with both labels, fewer than
            8 rows of a label before or after the ``max_per_source`` cap, or a split that leaves a label out of the
            probe's calibration or fit part (:mod:`~herald_service.training.corpus`); after it, a backbone of too
            few layers for ``feature_sets``.
    """
    from herald_service.backbone.hf import HFBackbone
    from herald_service.backbone.loader import backbone_slug, resolve_backbone
    from herald_service.training.corpus import (cap_per_group, expand_data, left_out_by_cap, load_training_corpus,
                                                require_both_labels, require_split_parts, stratified_split, warn_of_cap)
    from herald_service.training.extract import (StateCache, capped_max_tokens, extract_tokenized_states,
                                                 require_rows_within_max_tokens, tokenize_within_limit)

    files = expand_data(data)
    backbone_slug(backbone)  # a backbone path that is not a model: named before the corpus is read and folded
    everything = load_training_corpus(files)  # before the backbone: a bad row is named in a second, not after the load
    require_both_labels(everything, files)
    capped = cap_per_group(everything, max_per_source, seed)
    require_both_labels(capped, files, max_per_source)  # the cap can leave too few: named before the load too
    require_split_parts(capped, test_fraction, seed, max_per_source)
    if check_rows is not None:
        check_rows(capped)
    warn_of_cap(left_out_by_cap(everything, capped), max_per_source, seed, cap_recorded_in)
    loaded = HFBackbone(resolved or resolve_backbone(backbone, cache_dir), device, dtype)
    for feature_set in dict.fromkeys(feature_sets):
        require_layers(feature_set, loaded.info.num_layers, str(backbone))
    cache = StateCache(cache_dir, loaded)
    max_tokens = capped_max_tokens(loaded, max_tokens)
    tokenized = tokenize_within_limit(loaded, capped, max_tokens)
    # before any state is extracted, as herald fit: every harmful row over the limit failed after the extraction,
    # naming the calibration part (tester finding, on fit)
    require_rows_within_max_tokens(capped, tokenized, max_tokens, test_fraction, seed, max_per_source, loaded)
    corpus = extract_tokenized_states(loaded, tokenized, cache, desc="corpus states")
    states, examples, skipped = _labeled(corpus), corpus.examples, corpus.skipped
    train_index, test_index = stratified_split(examples, test_fraction, seed)
    return CorpusStates(loaded, cache, files, everything, capped, states, examples, skipped, train_index, test_index,
                        max_tokens)


def jailbreak_wrapped_states(backbone, cache, templates: list[dict], everything: list, capped: list, n: int, seed: int,
                             max_tokens: int, max_chars: int, max_per_source: int | None,
                             train_prompts: list[str] | None = None) -> tuple[LabeledStates | None, str | None]:
    """The jailbreak-wrapped evaluation set (:func:`~.attacks.wrap_requests`: held-out AdvBench / HarmBench requests,
    each in its own template) and its states, or ``None`` and why it is skipped.

    On small data no such request is left outside the per-source cap, and the empty set failed after every fit with
    scikit-learn's "Found array with 0 sample(s)" (breaker finding); it is now skipped with one warning line. With fewer
    requests or templates than ``n``, the set is smaller, and the log says so.

    Args:
        templates: :func:`~.attacks.load_templates` rows (at most ``max_chars`` characters each).
        everything, capped: every corpus row, and those the per-source cap kept (the training pool).
        n: rows wanted (``--jailbreak-n``); ``max_tokens``: wrapped prompts rendered longer are dropped.
        train_prompts: the prompts the scoring models train on: a row whose template is found in one gets the source
            :data:`~.attacks.SEEN_TEMPLATE_SOURCE` (:func:`~.attacks.wrap_requests`).

    Returns:
        ``(states, None)``, or ``(None, reason)`` (the reason is also logged).
    """
    from herald_service.training.attacks import (REQUEST_SOURCES, held_out_requests, request_source_near_misses,
                                                 wrap_requests, wrappable)

    sources = " or ".join(REQUEST_SOURCES)
    wrappable_rows = wrappable(everything)
    requests = held_out_requests(everything, capped)
    reason = None
    if not templates:
        reason = (f"no template has only the {{{{ prompt }}}} slot and at most {max_chars} characters "
                  "(--jailbreak-templates, --jailbreak-max-chars)")
    elif not wrappable_rows:
        reason = (f"the data has no {sources} request to wrap (plain requests: no copyright or contextual rows)"
                  f"{request_source_near_misses(everything)}")
    elif not requests:
        cap = "null" if max_per_source is None else max_per_source
        reason = (f"no {sources} request is left outside the per-source cap: --max-per-source {cap} keeps all "
                  f"{len(wrappable_rows)} of them for training; a lower --max-per-source leaves some for this set")
    if reason is None:
        wrapped = wrap_requests(templates, requests, n, seed, train_prompts)
        if len(wrapped) < n:
            log.warning("jailbreak-wrapped set: %d prompts of the %d asked: %d %s requests are left outside the "
                        "per-source cap (--max-per-source) and %d templates are usable", len(wrapped), n, len(requests),
                        sources, len(templates))
        states, _, _ = _states_for(backbone, wrapped, cache, max_tokens, "jailbreak states")
        if len(states.labels):
            return states, None
        reason = f"all {len(wrapped)} wrapped prompts exceed --max-tokens {max_tokens}"
    log.warning("jailbreak-wrapped set skipped: %s", reason)
    return None, reason


def missing_templates(path: Path) -> str:
    """Why the jailbreak-wrapped sets are skipped when the templates file ``path`` is missing; logged as a warning."""
    reason = f"--jailbreak-templates {path} does not exist (relative to the current directory)"
    log.warning("jailbreak-wrapped set skipped: %s", reason)
    return reason


def _guard_subsample(data: LabeledStates, index: np.ndarray, per_source: int, max_tokens: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = []
    for source in sorted(set(data.sources[index].tolist())):
        members = index[(data.sources[index] == source) & (data.tokens[index] <= max_tokens)]
        picks.extend(rng.permutation(members)[:per_source].tolist())
    return np.array(sorted(picks), dtype=int)


def run_eval(options: EvalOptions) -> dict:
    """Load corpus and states, run :func:`evaluate_states`, add the guard comparison, write ``options.out``.

    A jailbreak-wrapped set that cannot be built (:func:`jailbreak_wrapped_states`, or a templates file that is missing)
    is left out, and ``meta.jailbreak_wrapped_skipped`` says why (``herald report`` shows it). ``--test-data`` prompts
    that are also in ``--data`` are counted in ``meta.test_data_overlap`` (:func:`test_data_overlap`), and with
    ``--probe`` those in the probe's training files in ``saved_probe`` (:func:`probe_training_overlap`).

    Raises:
        ValueError: before any model loads, ``jailbreak_train_per_class`` without a templates file, a missing, bad,
            empty or same-named ``--test-data`` file (:func:`read_test_data`), then (after these inputs and ``--probe``)
            an existing ``out`` without ``overwrite`` (:func:`~herald_service.out_path.refuse_an_existing_out`),
            learning-curve sizes whose draws cannot be fitted (:func:`require_curve_draws`), and the data errors of
            :func:`load_corpus_states`; after the load, a ``--test-data`` file whose prompts all exceed
            ``max_tokens``.
        BackboneError: the backbone cannot be loaded; ProbeMismatch: ``--probe`` cannot be loaded or is for another
            backbone.
    """
    from herald_service.data.hashing import corpus_sha256
    from herald_service.backbone.hf import config_info
    from herald_service.training.corpus import file_manifest
    from herald_service.backbone.loader import resolve_backbone
    from herald_service.probes.artifact import backbone_manifest, check_chat_template, check_compatible, load_probe
    from herald_service.probes.reference import check_reference
    from herald_service.training.attacks import load_templates

    started = time.perf_counter()
    template_file = options.jailbreak_templates
    if options.jailbreak_train_per_class > 0 and (template_file is None or not template_file.is_file()):
        raise ValueError("--jailbreak-train-per-class needs --jailbreak-templates"
                         + (f"; {template_file} does not exist" if template_file is not None else ""))
    training_templates = (load_templates(template_file, options.jailbreak_max_chars)
                          if options.jailbreak_train_per_class > 0 else [])
    if options.jailbreak_train_per_class > 0 and not training_templates:
        raise ValueError(f"--jailbreak-templates {template_file} has no usable template (one {{{{ prompt }}}} slot, at most"
                         f" {options.jailbreak_max_chars} characters: --jailbreak-max-chars)")
    from herald_service.training.fit import written_rows

    templated_rows = written_rows(options)  # refused now, not after the load
    if options.layout_questions and not options.loaded_questions:
        raise ValueError("--layout-questions lays out the written questions: give --loaded-questions too")
    if options.casual_questions and not options.loaded_questions:
        raise ValueError("--casual-questions writes the written questions casually: give --loaded-questions too")
    test_sets = read_test_data(options.test_data)
    if options.probe is not None:  # a probe that cannot load is named now, not after every fit (breaker finding)
        saved_probe, probe_manifest = load_probe(options.probe)
    # after the inputs, as the CLI: a --test-data or --probe path that does not exist was answered "--out ... already
    # exists" (tester finding)
    refuse_an_existing_out(options.out, options.overwrite)
    if options.scores_out is not None:
        refuse_an_existing_out(options.scores_out, options.overwrite, "--scores-out", "the JSON-lines file to write")
    resolved = None
    if options.probe is not None:
        # a probe of another architecture is refused by the backbone's config.json, before the corpus is read and its
        # states extracted (it came 52 s into a run: tester finding); the resolved folder (a GGUF's conversion) is reused
        resolved = resolve_backbone(options.backbone, options.cache_dir)
        check_compatible(probe_manifest, config_info(resolved))
    corpus = load_corpus_states(options.data, options.backbone, options.cache_dir, options.device, options.dtype,
                                options.max_per_source, options.max_tokens, options.test_fraction, options.seed,
                                resolved, check_rows=lambda rows: require_curve_draws(
                                    rows, options.test_fraction, options.seed, options.curve_sizes, options.curve_seeds),
                                feature_sets=feature_sets_of(options.methods),
                                cap_recorded_in="the results' meta.left_out_by_max_per_source")
    options = replace(options, max_tokens=corpus.max_tokens)  # capped at the backbone's positions: meta records it
    backbone, cache, files, everything, capped = corpus.backbone, corpus.cache, corpus.files, corpus.everything, corpus.capped
    data, skipped, train_index, test_index = corpus.data, corpus.skipped, corpus.train_index, corpus.test_index
    from herald_service.training.fit import few_rows_note

    # as herald fit warns of its held-out part: 2 + 2 test rows gave "F1 0.800 [0.667, 1.000]" with no word (tester);
    # said before the fits, not after minutes of them
    split_few = few_rows_note(data.labels[test_index])
    if split_few:
        log.warning("the random split's test part %s", split_few)
    repeated = repeated_prompts(data.prompts, data.sources, train_index, test_index)
    if repeated.random_split_test_in_train:
        log.warning("%d of the random split's %d test prompts are also in its train part (prompts given more than once"
                    " in --data): those are scored by models trained on them", repeated.random_split_test_in_train,
                    len(test_index))
    if options.probe is not None:
        check_compatible(probe_manifest, backbone.info)
        check_chat_template(probe_manifest, backbone.info)
        check_reference(probe_manifest, saved_probe, backbone)  # its weights: those it was fitted on

    extra: dict[str, LabeledStates] = {}
    jailbreak_skipped = None
    if options.jailbreak_templates is not None and options.jailbreak_n > 0:
        if options.jailbreak_templates.is_file():
            templates = load_templates(options.jailbreak_templates, options.jailbreak_max_chars)
            wrapped, jailbreak_skipped = jailbreak_wrapped_states(
                backbone, cache, templates, everything, capped, options.jailbreak_n, options.seed, options.max_tokens,
                options.jailbreak_max_chars, options.max_per_source, [corpus.examples[i].prompt for i in train_index])
            if wrapped is not None:
                extra[JAILBREAK_SET] = wrapped
        else:  # the default path (the CLI refuses a missing path given): the run goes on without the set
            jailbreak_skipped = missing_templates(options.jailbreak_templates)
    else:  # asked for no set: said so, so that the report names this reason and not every possible one (tester nit)
        jailbreak_skipped = ("not asked for (--jailbreak-templates null)" if options.jailbreak_templates is None
                             else "not asked for (--jailbreak-n 0)")
    data_prompts = folded_prompts_by_file(everything)
    overlap = test_data_overlap(test_sets, set().union(*data_prompts.values()))
    probe_overlap = (probe_training_overlap(test_sets, options.probe, probe_manifest, files, data_prompts)
                     if options.probe is not None else None)
    if options.probe is not None and not test_sets and JAILBREAK_SET not in extra:
        log.warning("--probe %s has nothing to score: give --test-data files (or a jailbreak-wrapped set, "
                    "--jailbreak-n above 0); the saved probe is left out of the results' sets", options.probe)
    from herald_service.training.extract import token_limit_words

    test_skipped: dict[str, int] = {}
    test_few_rows: dict[str, str] = {}
    _, limit, advice = token_limit_words(backbone, options.max_tokens)
    for path, rows in test_sets.items():
        extra[path.name], _, over = _states_for(backbone, rows, cache, options.max_tokens, path.name)
        if sum(over.values()):  # dropped without a word, and its set read "none of its N prompts" (re-tester)
            test_skipped[path.name] = sum(over.values())
            log.warning("--test-data %s: %d of its %d prompts render to more tokens than %s and are not scored",
                        path, test_skipped[path.name], len(rows), limit)
        if not len(extra[path.name].labels):  # token counts need the backbone: refused here, before any fit
            raise ValueError(f"every prompt of {path} (--test-data) exceeds {limit} once rendered; {advice}")
        few = few_rows_warning(path, extra[path.name].labels)
        if few:  # recorded, so the report says it beside the set (a log line alone was lost: re-tester)
            test_few_rows[path.name] = few

    added_rows, augmentation, format_augmentation = None, None, None
    if options.jailbreak_train_per_class > 0:
        added_rows, augmentation = _wrapped_training_rows(options, corpus, training_templates)
    if options.format_train_per_class > 0:
        format_rows, format_augmentation = _format_training_rows(options, corpus)
        added_rows = format_rows if added_rows is None else (
            lambda held_out, jailbreak=added_rows: joined(jailbreak(held_out), format_rows(held_out)))
    layout_augmentation = None
    if options.layout_train_per_class > 0:
        layout_rows, layout_augmentation = _layout_training_rows(options, corpus)
        added_rows = layout_rows if added_rows is None else (
            lambda held_out, rest=added_rows: joined(rest(held_out), layout_rows(held_out)))
    casual_augmentation = None
    if options.casual_train_per_class > 0:
        casual_rows, casual_augmentation = _casual_training_rows(options, corpus)
        added_rows = casual_rows if added_rows is None else (
            lambda held_out, rest=added_rows, casual=casual_rows: joined(rest(held_out), casual(held_out)))
    from herald_service.training.fit import loaded_question_states, loaded_questions_record, without_copies

    questions = templated = layout_questions = casual_questions = None
    # written rows are checked against every row the run scores as unseen: --data's and --test-data's (a re-tester
    # trained on --test-data rows that were questions, then templated prompts, and scored them as held out)
    unseen = [*everything, *(row for rows in test_sets.values() for row in rows)]
    if options.loaded_questions:  # before any wrapped rows, in herald recipes' and herald fit's order
        questions = loaded_question_states(backbone, cache, options.max_tokens, options.harmful_questions,
                                           options.everyday_questions, data=unseen)
        written = questions
        if options.layout_questions:
            from herald_service.training.layouts import TRAIN_LAYOUTS, laid_out_questions

            laid_out_rows, layout_questions = _dressed_question_states(
                backbone, cache, questions, options, laid_out_questions, "laid-out written question",
                {"layouts": list(TRAIN_LAYOUTS)})
            written = joined(questions, laid_out_rows)
        if options.casual_questions:
            from herald_service.training.casing import FORMS, casual_questions as casual_question_rows

            casual_written, casual_questions = _dressed_question_states(
                backbone, cache, questions, options, casual_question_rows, "casually written question",
                {"forms": list(FORMS)})
            written = joined(written, casual_written)
        added_rows = (lambda held_out: written) if added_rows is None else (
            lambda held_out, rest=added_rows: joined(written, rest(held_out)))
    templated_rows = without_copies(templated_rows, unseen, "templated benign prompts") if templated_rows else []
    if templated_rows:  # before the questions, in herald recipes' and herald fit's order
        templated, _, _ = _states_for(backbone, templated_rows, cache, options.max_tokens, "templated states")
        added_rows = (lambda held_out: templated) if added_rows is None else (
            lambda held_out, rest=added_rows: joined(templated, rest(held_out)))
    # before the fits: a tokenizer without the answers, or a damaged score file, is named now, not after every fit
    guard_scorer, guard_skipped = guard_scorer_of(backbone, options) if options.guard_per_source > 0 else (None, None)
    plan = Plan(options.methods, options.loso, options.curve_sizes, options.curve_seeds, options.replicates, options.seed,
                options.direction_estimator)
    results = evaluate_states(data, train_index, test_index, plan, extra, added_rows=added_rows)
    in_folds = repeated.record(results.get("loso")).get("loso_held_out_in_training")
    if in_folds:
        log.warning("%d leave-one-source-out held-out prompts are also in their fold's training rows (prompts given"
                    " more than once in --data, in two sources): those were scored by models trained on them", in_folds)

    if guard_scorer is not None:
        results["guard"] = _guard_comparison(guard_scorer, backbone, options, data, test_index, results, extra)
    if options.probe is not None:
        views = trimmed_view_states(backbone, cache, extra, options.max_tokens) if options.trimmed_views else None
        results["saved_probe"] = score_saved_probe(options.probe, backbone.info, extra, options.replicates, options.seed,
                                                   probe_overlap, options.max_per_source, views)

    results["meta"] = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "software": software(),  # herald_service/provenance.py
        "backbone": {**backbone_manifest(backbone.info), **backbone_numerics(backbone.info)},
        "corpus_sha256": corpus_sha256(files),
        "files": [p.name for p in files],
        # each file's sha256 and rows, as probe.json's training_data.files: names alone did not pin the inputs (tester)
        "data_files": file_manifest(files),
        "test_data_files": file_manifest(list(test_sets)),
        "max_per_source_and_label": options.max_per_source,
        # the rows the cap drew out of each (source, label) group it cut, in the form of counts below
        "left_out_by_max_per_source": [{"source": s, "label": y, "n": out}
                                       for (s, y), (out, _) in left_out_by_cap(everything, capped).items()],
        "max_tokens": options.max_tokens,
        "prompt_text": PROMPT_TEXT,
        "jailbreak_template_rule": TEMPLATE_RULE,
        "skipped_over_max_tokens": skipped,
        "test_data_skipped_over_max_tokens": test_skipped,  # per --test-data file name
        **({"test_data_few_rows": test_few_rows} if test_few_rows else {}),  # per file name: few_rows_warning's text
        "seed": options.seed,
        "command": options.command,
        "jailbreak_max_chars": options.jailbreak_max_chars,
        "test_fraction": options.test_fraction,
        "n": int(len(data.labels)), "n_train": int(len(train_index)), "n_test": int(len(test_index)),
        **({"random_split_few_rows": split_few} if split_few else {}),
        "repeated_prompts": repeated.record(results.get("loso")),
        "counts": [{"source": s, "label": int(y), "n": n} for (s, y), n in sorted(Counter(zip(data.sources.tolist(), data.labels.tolist())).items())],
        "mean_tokens_by_label": {"benign": float(data.tokens[data.labels == 0].mean()), "harmful": float(data.tokens[data.labels == 1].mean())},
        "extra_sets": {k: {"n": int(len(v.labels)), "example": v.prompts[0][:300] if v.prompts else None} for k, v in extra.items()},
        "test_data_overlap": overlap,  # herald report: "k of n prompts also appear in --data", not "never trained on"
        **({"jailbreak_wrapped_skipped": jailbreak_skipped} if jailbreak_skipped else {}),
        **({"guard_skipped": guard_skipped} if guard_skipped else {}),
        "methods": list(options.methods),
        "herald_direction_estimator": options.direction_estimator,
        **({"jailbreak_augmentation": augmentation} if augmentation else {}),
        **({"format_augmentation": format_augmentation} if format_augmentation else {}),
        **({"layout_augmentation": layout_augmentation} if layout_augmentation else {}),
        **({"casual_augmentation": casual_augmentation} if casual_augmentation else {}),
        **({"loaded_questions": loaded_questions_record(questions)} if questions is not None else {}),
        **({"layout_questions": layout_questions} if layout_questions else {}),
        **({"casual_questions": casual_questions} if casual_questions else {}),
        **({"templated_benign": {"n": int(len(templated.labels)), "seed": options.seed, "label": "benign",
                                 "module": "herald_service/training/templated.py"}} if templated is not None else {}),
        "replicates": options.replicates,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if options.probe is not None and "herald" in options.methods:  # without it, no Herald of this run to compare
        _warn_of_another_recipe(results["saved_probe"], probe_manifest, results["meta"])
    if options.scores_out is not None:
        write_scores(options.scores_out, data, test_index, extra, results)
    results.pop("loso_margins", None)
    results.pop("row_margins", None)
    results.get("saved_probe", {}).pop("row_margins", None)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(options.out, json.dumps(results, indent=1) + "\n")
    return results


def write_scores(path: Path, data: LabeledStates, test_index: np.ndarray, extra: dict[str, LabeledStates],
                 results: dict) -> int:
    """Write every prompt a method scored, one JSON object per line (``herald eval --scores-out``), and return the
    number of lines.

    Each line: ``part`` (``"random_split"``: the test part, scored by models fitted on the train part; ``"loso"``: a
    corpus row scored by the models of the fold that held its source out; ``"extra"``: a row of the set named by
    ``set``, a ``--test-data`` file or the jailbreak-wrapped set, scored by the random split's models), ``source``,
    ``label`` (1 = harmful), ``prompt`` (as the file gives it), ``margins`` (method -> score minus the method's own
    threshold: the decision boundary is 0; on ``extra`` lines of a run with ``--probe`` also ``saved_probe``, that
    probe at its stored threshold, and with ``--trimmed-views`` ``saved_probe+views``, the highest of the prompt's and
    its views' margins, as ``herald serve`` decides) and ``flagged_by`` (the names whose margin is >= 0). A row of a
    skipped LOSO fold (``loso.skipped_folds``) has no ``loso`` line. These are the numbers the random-split,
    leave-one-source-out and extra-set metrics of the results file are computed from (not the learning curve's or the
    guard's), so errors can be read one prompt at a time.
    """

    def lines_of(part: str, rows: LabeledStates, index: np.ndarray, margins_by_method: dict[str, list],
                 set_name: str | None = None) -> list[str]:
        """A line per row ``index[j]`` of ``rows`` scored (margins at position ``j``)."""
        out = []
        for j, i in enumerate(index):
            scored = {name: m[j] for name, m in margins_by_method.items() if m[j] is not None}
            if scored:
                flagged_by = [name for name, m in scored.items() if m >= 0]
                out.append(json.dumps({"part": part, **({"set": set_name} if set_name is not None else {}),
                                       "source": str(rows.sources[i]), "label": int(rows.labels[i]),
                                       "prompt": rows.prompts[i], "margins": scored, "flagged_by": flagged_by},
                                      ensure_ascii=False))
        return out

    row_margins = results["row_margins"]
    kept = lines_of("random_split", data, test_index, row_margins["random_split"])
    if "loso_margins" in results:
        kept += lines_of("loso", data, np.arange(len(data.labels)), results["loso_margins"])
    saved = results.get("saved_probe", {}).get("row_margins", {})
    for name, rows in extra.items():
        scored = {**row_margins["extra"][name], **saved.get(name, {})}  # the saved probe's beside the run's methods
        kept += lines_of("extra", rows, np.arange(len(rows.labels)), scored, name)
    write_text_atomically(path, "".join(text + "\n" for text in kept))
    log.info("per-prompt margins: %d lines in %s", len(kept), path)
    return len(kept)


def backbone_numerics(info) -> dict[str, str]:
    """Where and in what precision the backbone ran, for the results' ``meta.backbone``: ``device`` (``cpu``,
    ``cuda``), ``dtype`` (of the weights and the residual stream: ``float32``, ``bfloat16`` ...) and ``matmul_dtype``
    (of the decoder's linear layers: ``dtype`` unless bf16 linear layers ran over an fp32 stream). The states, so
    every number, depend on them; ``herald report`` said "CPU, fp32" for every run, as the results recorded none of
    them (tester finding).

    Args:
        info: the loaded backbone's :class:`~herald_service.types.BackboneInfo`.
    """
    return {"device": info.device, "dtype": info.dtype, "matmul_dtype": info.matmul_dtype or info.dtype}


def _wrapped_training_rows(options: EvalOptions, corpus: CorpusStates, templates: list[dict]
                           ) -> tuple[Callable[[str | None], LabeledStates], dict]:
    """The jailbreak-wrapped training rows of ``--jailbreak-train-per-class``: built and extracted as ``herald recipes``
    builds its ``jailbreak`` recipe's (:func:`~.recipes.jailbreak_sets`: the random split's train-part AdvBench /
    HarmBench requests in training templates, disjoint from the evaluation's), so a fold sees the rows that recipe's
    fold saw (:meth:`~.recipes.WrappedPool.for_fold`).

    Returns:
        rows by held-out source (``None``: the random split), for :func:`evaluate_states`; and the record for the
        results' ``meta.jailbreak_augmentation``.
    """
    from herald_service.training.recipes import RecipeOptions, jailbreak_sets, wrapped_pool

    recipe = RecipeOptions(data=options.data, backbone=options.backbone, cache_dir=options.cache_dir,
                           max_tokens=options.max_tokens, seed=options.seed, jailbreak_templates=options.jailbreak_templates,
                           jailbreak_n=options.jailbreak_n, jailbreak_max_chars=options.jailbreak_max_chars,
                           jailbreak_train_per_class=options.jailbreak_train_per_class)
    train_rows = [corpus.examples[i] for i in corpus.train_index]
    _, rows = jailbreak_sets(templates, corpus.everything, corpus.capped, train_rows, recipe)
    pool = wrapped_pool(corpus.backbone, corpus.cache, rows, recipe.max_tokens, recipe.jailbreak_train_per_class)
    record = {"per_class": options.jailbreak_train_per_class, "labels": [1],
              "random_split_rows": int(len(pool.for_fold(None, (1,)).labels)),
              "templates": options.jailbreak_templates.name if options.jailbreak_templates else None}
    return (lambda held_out: pool.for_fold(held_out, (1,))), record


def _format_training_rows(options: EvalOptions, corpus: CorpusStates) -> tuple[Callable[[str | None], LabeledStates], dict]:
    """The format-instruction wrapped training rows of ``--format-train-per-class``
    (:func:`.format_wrapped.training_rows` of the random split's train part) and their states
    (:func:`_augmentation_pool`), with the record for the results' ``meta.format_augmentation``."""
    from herald_service.training.format_wrapped import TRAINING_INSTRUCTIONS, training_rows

    return _augmentation_pool(corpus, training_rows, options.format_train_per_class, options, "format-wrapped",
                              {"instructions": list(TRAINING_INSTRUCTIONS)})


def _layout_training_rows(options: EvalOptions, corpus: CorpusStates) -> tuple[Callable[[str | None], LabeledStates], dict]:
    """The set-apart-word training rows of ``--layout-train-per-class`` (:func:`.layouts.training_rows` of the random
    split's train part) and their states (:func:`_augmentation_pool`), with the record for the results'
    ``meta.layout_augmentation``."""
    from herald_service.training.layouts import TRAIN_LAYOUTS, training_rows

    return _augmentation_pool(corpus, training_rows, options.layout_train_per_class, options, "set-apart-word",
                              {"layouts": list(TRAIN_LAYOUTS)})


def _casual_training_rows(options: EvalOptions, corpus: CorpusStates) -> tuple[Callable[[str | None], LabeledStates], dict]:
    """The casually written training rows of ``--casual-train-per-class`` (:func:`.casing.training_rows` of the random
    split's train part) and their states (:func:`_augmentation_pool`), with the record for the results'
    ``meta.casual_augmentation``."""
    from herald_service.training.casing import FORMS, training_rows

    return _augmentation_pool(corpus, training_rows, options.casual_train_per_class, options, "casually written",
                              {"forms": list(FORMS)})


def _dressed_question_states(backbone, cache, questions: LabeledStates, options: EvalOptions, dress: Callable,
                             what: str, described: dict) -> tuple[LabeledStates, dict]:
    """The states of ``--layout-questions``' or ``--casual-questions``' rows: each written question of ``questions``
    (their states, prompts and labels) dressed once more by ``dress(examples, seed)``
    (:func:`.layouts.laid_out_questions`, :func:`.casing.casual_questions`) with ``options.seed``; a dressed row over
    ``max_tokens`` is left out with a warning naming ``what`` (the questions as written fit, so few if any).

    Returns:
        the states, and the results' record of them (``n``, ``harmful``, ``seed``, then ``described``: the
        dressings' names).
    """
    from herald_service.training.corpus import Example

    written = [Example(p, int(y), str(s), None, "") for p, y, s in zip(questions.prompts, questions.labels,
                                                                       questions.sources)]
    states, _, skipped = _states_for(backbone, dress(written, options.seed), cache, options.max_tokens,
                                     f"{what} states")
    if sum(skipped.values()):
        log.warning("%d %ss exceed --max-tokens %d once rendered and are left out", sum(skipped.values()), what,
                    options.max_tokens)
    return states, {"n": int(len(states.labels)), "harmful": int(states.labels.sum()), "seed": options.seed, **described}


def _augmentation_pool(corpus: CorpusStates, make_rows: Callable, per_class: int, options: EvalOptions, kind: str,
                       described: dict) -> tuple[Callable[[str | None], LabeledStates], dict]:
    """Training rows of both labels made by ``make_rows(train rows, per_class, seed)`` from the random split's train
    part, their states extracted (rows over ``max_tokens`` dropped); a fold never gets a row made from its held-out
    source (:meth:`~.recipes.WrappedPool.for_fold`).

    Returns:
        rows by held-out source (``None``: the random split), for :func:`evaluate_states`; and the record of the
        results' meta (``per_class``, ``labels``, ``random_split_rows`` and ``described``).
    """
    from herald_service.training.recipes import wrapped_pool

    rows = make_rows([corpus.examples[i] for i in corpus.train_index], per_class, options.seed)
    pool = wrapped_pool(corpus.backbone, corpus.cache, rows, options.max_tokens, per_class, f"{kind} training states")
    record = {"per_class": per_class, "labels": [1, 0], "random_split_rows": int(len(pool.for_fold(None, (1, 0)).labels)),
              **described}
    return (lambda held_out: pool.for_fold(held_out, (1, 0))), record


def guard_scorer_of(backbone, options: EvalOptions):
    """The guard baseline's scorer for ``--guard-per-source`` above 0, its scores cached per backbone and forward
    (:func:`~herald_service.training.guard.guard_cache_file`), or why it is left out.

    Returns:
        ``(scorer, None)``, or ``(None, reason)`` when the tokenizer cannot answer the guard instruction
        (:class:`~herald_service.training.guard.GuardUnavailable`): the reason is logged as a warning and recorded in
        the results' ``meta.guard_skipped`` (``herald report`` shows it), as a jailbreak-wrapped set that cannot be
        built is; scored as it was, a word-level tokenizer's ``<unk>`` for both answers gave every prompt 0 and the
        report a baseline of F1 0.667, AUROC 0.5 (tester finding).
    """
    from herald_service.training.guard import GuardScorer, GuardUnavailable, guard_cache_file

    try:
        return GuardScorer(backbone, guard_cache_file(options.cache_dir, backbone.info)), None
    except GuardUnavailable as exc:
        log.warning("guard-style baseline left out: %s", exc)
        return None, str(exc)


def _guard_comparison(scorer, backbone, options: EvalOptions, data: LabeledStates, test_index, results, extra) -> dict:
    """Guard scores (``scorer``: :func:`guard_scorer_of`) on a per-source subsample of the test part (+ jailbreak
    rows), beside the latent methods' source-held-out (LOSO) margins on the very same rows."""
    from herald_service.training.guard import GUARD_INSTRUCTION, guard_token_limit

    max_tokens = guard_token_limit(backbone, options.guard_max_tokens)
    pick = _guard_subsample(data, test_index, options.guard_per_source, max_tokens, options.seed)
    labels, sources = data.labels[pick], data.sources[pick]
    guard = scorer.scores([data.prompts[i] for i in pick])
    out = {"instruction": GUARD_INSTRUCTION, "n": int(len(pick)), "per_source_cap": options.guard_per_source,
           "max_tokens": max_tokens, "corpus": {}, "jailbreak_wrapped": {}}
    out["corpus"]["guard"] = {"pooled": boot(labels, guard, options.replicates),
                              "per_source": by_source(labels, guard, sources, options.replicates)}
    for name, held in results.get("loso_margins", {}).items():
        m = np.array([np.nan if v is None else v for v in held])[pick]
        ok = ~np.isnan(m)
        if not ok.any():  # every picked row is of a skipped fold's source (unlearnable_fold)
            continue
        out["corpus"][f"{name} (LOSO)"] = {"pooled": boot(labels[ok], m[ok], options.replicates),
                                          "per_source": by_source(labels[ok], m[ok], sources[ok], options.replicates)}
    if "jailbreak_wrapped" in extra:
        jb = extra["jailbreak_wrapped"]
        keep = np.nonzero(jb.tokens <= max_tokens)[0][: options.guard_per_source]
        g = scorer.scores([jb.prompts[i] for i in keep])
        out["jailbreak_wrapped"]["guard"] = boot(jb.labels[keep], g, options.replicates)
    return out


def _warn_of_another_recipe(saved: dict, manifest: dict, meta: dict) -> None:
    """Add to ``saved`` (:func:`score_saved_probe`'s output) a ``warning``, and log it, when the saved probe's training
    recipe (:func:`~.report.manifest_recipe`) or feature set is not the one this run fits as ``herald``
    (:func:`~.report.herald_recipe`, ``herald-v1``): the split fit is then not the probe refitted, so the two columns
    differ by recipe (a tester ran ``--probe`` on the shipped probe with eval's default LDA recipe and read them as
    one)."""
    from herald_service.training.report import herald_recipe, manifest_recipe

    training = manifest.get("training_data") or {}

    def counts(record: dict) -> str:  # the added rows' sizes, which the recipe's name does not give
        return (f"{(record.get('jailbreak_augmentation') or {}).get('per_class', 0)} wrapped per class,"
                f" {(record.get('templated_benign') or {}).get('n', 0)} templated,"
                f" {(record.get('loaded_questions') or {}).get('n', 0)} written questions")

    # herald eval fits herald with herald-v1; a probe of another feature set was compared without a word (tester)
    probe_set = manifest.get("feature_set") or FEATURE_SET
    probe_note, run_note = ("", "") if probe_set == FEATURE_SET else (f"; feature set {probe_set}",
                                                                     f"; feature set {FEATURE_SET}")
    probe = f"{manifest_recipe(manifest)} recipe ({counts(training)}{probe_note})"
    run = f"{herald_recipe(meta)} recipe ({counts(meta)}{run_note})"
    if probe == run:
        return
    warning = (f"the probe was fitted with the {probe} and this run's Herald with the {run}: its split"
               " fit is not the probe refitted; give eval the options of the probe's recorded command"
               " (probe.json training_data.command) to compare the two")
    saved["warning"] = f"{saved['warning']}; and {warning}" if saved.get("warning") else warning
    log.warning("%s", warning)


def few_rows_warning(path: Path, labels: np.ndarray) -> str | None:
    """Log a warning for a ``--test-data`` set holding fewer than :data:`~.fit.FEW_HELD_OUT_PER_LABEL` rows of a
    label it has, as ``herald fit`` warns of its held-out part (:func:`~.fit.few_rows_note`), since an interval over
    few rows all decided right is a point (a tester's one-row set read recall 100.0 [100.0, 100.0]).

    Returns:
        The note without the file ("holds only ..."), for the results' ``meta.test_data_few_rows``, or None.
    """
    from herald_service.training.fit import few_rows_note

    few = few_rows_note(labels, "scored row", count_absent=False)
    if few:
        log.warning("--test-data %s %s", path, few)
    return few


@dataclass(frozen=True)
class ViewStates:
    """The trimmed views and spelled-out readings of one set's prompts
    (:func:`~herald_service.trimmed_views.views_beside`), as ``herald serve`` scores them beside each prompt by
    default.

    Attributes:
        states: ``(views, layer, d_model)`` float32, each view rendered as one user turn.
        owner: ``(views,)`` int: the row of the set each view was cut from.
    """

    states: np.ndarray
    owner: np.ndarray


def trimmed_view_states(backbone, cache, sets: dict[str, LabeledStates], max_tokens: int) -> dict[str, ViewStates]:
    """States of every trimmed view and reading of every prompt of ``sets`` (extracted, or read from ``cache``), for
    :func:`score_saved_probe`. A trimmed view is never longer than its prompt and a reading a space or two longer, so
    ``max_tokens`` (which the prompts passed) holds for nearly all; it is checked, and a view over it is not scored."""
    from herald_service.training.extract import extract_states
    from herald_service.trimmed_views import views_beside
    from herald_service.types import user_turn

    out = {}
    for name, rows in sets.items():
        texts, owner = [], []
        for row, prompt in enumerate(rows.prompts):
            for _, view in views_beside(prompt):
                texts.append(view)
                owner.append(row)
        if not texts:
            out[name] = ViewStates(np.zeros((0, *rows.states.shape[1:]), np.float32), np.zeros(0, dtype=int))
            continue
        states, tokens = extract_states(backbone, [user_turn(text) for text in texts], cache,
                                        desc=f"{name}: trimmed views")
        keep = tokens <= max_tokens
        out[name] = ViewStates(states[keep], np.asarray(owner)[keep])
    return out


def score_saved_probe(folder: Path, info, extra_sets: dict[str, LabeledStates], replicates: int, seed: int = 0,
                      overlap: ProbeTrainingOverlap | None = None, max_per_source: int | None = 150,
                      views: dict[str, ViewStates] | None = None) -> dict:
    """Score the extra sets with a saved probe artifact (e.g. the shipped one, fitted on the whole capped corpus)
    at its own stored threshold; margins are ``logit - threshold`` as in :func:`margins`.

    A probe fitted with ``herald fit --jailbreak-train-per-class`` under another ``--seed`` than ``seed`` may have
    trained on templates of this run's jailbreak-wrapped set, and one fitted under another ``--max-per-source`` or
    ``--seed`` on the requests it wraps (the AdvBench and HarmBench rows this run's cap left out: their recall read
    100% with no word, re-tester): the output then carries a ``warning`` (also logged).

    Args:
        overlap: the ``--test-data`` prompts in the probe's training files (:func:`probe_training_overlap`).
        max_per_source: this run's ``--max-per-source`` (None: no cap), compared with the probe's.
        views: ``--trimmed-views``: each set's :class:`ViewStates` (:func:`trimmed_view_states`); each such set gets
            ``"with_trimmed_views"``: ``{"pooled", "per_source", "views", "prompts_with_views", "flagged_by_a_view"}``,
            every prompt's margin the highest of its whole prompt's and its views' (as ``herald serve`` decides),
            ``flagged_by_a_view`` the prompts flagged only by a view.

    Returns:
        ``{"folder", "threshold", "tensors_sha256", "sha256", "sets": {name: {"pooled", "per_source"}}}``
        (``tensors_sha256``: of ``probe.safetensors``, as ``probe.json`` records it; ``sha256``: of both files, as
        ``/v1/info`` names a probe; a folder and threshold alone did not pin the probe: tester finding), plus
        ``"warning"`` in that case. With
        ``overlap``: ``"training_files"`` (:meth:`ProbeTrainingOverlap.record`) and, for each ``--test-data`` set,
        ``"rows"``, ``"in_training_files"`` (prompts of the file, scored or not, in the checked training files),
        ``"trained_on"`` (any), ``"same_file"`` and ``"checked_all"`` (false: some training files could not be
        checked, so neither a count of 0 nor ``trained_on: false`` means unseen); a set with both seen and unseen
        scored rows also has ``"unseen": {"pooled", "per_source"}``, its metrics on the scored rows that are in none
        of the checked training files. ``"row_margins"``: ``{set: {"saved_probe": [margin of each row], and with
        views "saved_probe+views": [...]}}``, for ``--scores-out`` (:func:`run_eval` writes it into no results file).
    """
    from herald_service.probes.artifact import TENSORS_FILE, load_probe_files

    loaded = load_probe_files(folder, info)
    probe, manifest = loaded.probe, loaded.manifest
    # a probe saved before probe.json recorded it: the file's, as herald fit computes it (loading checked a recorded one)
    tensors_sha256 = manifest.get("tensors_sha256") or hashlib.sha256((folder / TENSORS_FILE).read_bytes()).hexdigest()
    out: dict = {"folder": str(folder), "threshold": float(probe.threshold), "tensors_sha256": tensors_sha256,
                 "sha256": loaded.sha256, "sets": {}}
    training = manifest.get("training_data") or {}
    warnings = []
    if training.get("jailbreak_augmentation") and training.get("seed") != seed and JAILBREAK_SET in extra_sets:
        warnings.append(f"the probe was fitted with jailbreak-wrapped training rows under --seed {training.get('seed')}, "
                        f"this evaluation uses --seed {seed}: its templates may overlap the probe's training templates, "
                        "so its jailbreak-wrapped recall may be inflated; evaluate with the probe's seed")
    cap = training.get("max_per_source_and_label")
    if JAILBREAK_SET in extra_sets and "max_per_source_and_label" in training and (cap, training.get("seed")) != (
            max_per_source, seed):  # the wrapped requests are the rows this run's cap left out (re-tester)
        def spelt(value: int | None) -> str:  # as the option is given
            return "null" if value is None else str(value)

        warnings.append(f"the jailbreak-wrapped set wraps AdvBench and HarmBench requests this run's --max-per-source "
                        f"{spelt(max_per_source)} (--seed {seed}) left out, and the probe was fitted with "
                        f"--max-per-source {spelt(cap)} "
                        f"(--seed {training.get('seed')}): it may have been trained on some of them, so its "
                        "jailbreak-wrapped recall may be inflated; evaluate with the probe's --max-per-source and --seed")
    if warnings:
        out["warning"] = "; and ".join(warnings)
        log.warning("%s", out["warning"])
    if overlap is not None:
        out["training_files"] = overlap.record()
    row_margins: dict[str, dict[str, list]] = {}
    for name, extra in extra_sets.items():
        output = probe.predict(extra.states)
        m = np.asarray(output.logits, dtype=np.float64) - probe.threshold
        row_margins[name] = {"saved_probe": rounded(m)}
        out["sets"][name] = {"pooled": boot(extra.labels, m, replicates),
                             "per_source": by_source(extra.labels, m, extra.sources, replicates)}
        if views is not None and name in views:
            cut = views[name]
            served = m.copy()
            if len(cut.owner):
                view_margins = np.asarray(probe.predict(cut.states).logits, dtype=np.float64) - probe.threshold
                np.maximum.at(served, cut.owner, view_margins)
            row_margins[name]["saved_probe+views"] = rounded(served)
            out["sets"][name]["with_trimmed_views"] = {
                "pooled": boot(extra.labels, served, replicates),
                "per_source": by_source(extra.labels, served, extra.sources, replicates),
                "views": int(len(cut.owner)), "prompts_with_views": int(len(set(cut.owner.tolist()))),
                "flagged_by_a_view": int(((served >= 0) & (m < 0)).sum())}
        if overlap is not None and name in overlap.sets:
            counted = overlap.sets[name]
            out["sets"][name].update(counted, trained_on=counted["in_training_files"] > 0)
            unseen = ~overlap.seen(name, extra.prompts)
            # only where every training file was checked: else rows of an unchecked one were called unseen (re-tester)
            if counted["checked_all"] and 0 < unseen.sum() < len(unseen):
                out["sets"][name]["unseen"] = {"pooled": boot(extra.labels[unseen], m[unseen], replicates),
                                               "per_source": by_source(extra.labels[unseen], m[unseen],
                                                                       extra.sources[unseen], replicates)}
    out["row_margins"] = row_margins
    return out


def available_methods() -> list[str]:
    return sorted(FACTORIES)

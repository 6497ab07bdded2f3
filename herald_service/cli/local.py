"""The commands that load a backbone and a probe in-process and read prompts from the command line or a file:
``herald classify``, ``plot``, ``steer-eval`` and ``reference``, and the prompt checks they share."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal


from pydantic import BeforeValidator, Field, ValidationInfo, field_validator
from pydantic_settings import (BaseSettings, CliPositionalArg, CliUnknownArgs, DotEnvSettingsSource, EnvSettingsSource,
                               PydanticBaseSettingsSource)

from herald_service import start_signals
from herald_service.cli.conventions import CountOrAll, invoked_command, log_formatter, route_library_output
from herald_service.config import BackboneSettings, LogLevel, UserPath
from herald_service.out_path import check_out_path, refuse_an_empty_path
from herald_service.types import MIN_ADD_ALPHA, SteerLayers, checked_steer_layers, steer_layers

logger = logging.getLogger(__name__)


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


PROMPT_FILE_MAX_BYTES = 256 * 2**20
"""The most bytes ``herald classify --file`` and ``herald steer-eval --file`` read (256 MiB: a million prompts of 250
characters), so that a device or a huge file is refused in one line instead of filling memory."""


def read_prompt_lines(path: Path, where: str) -> list[str]:
    """The lines of a prompt file, split at "\n" only (as training.corpus does: ``str.splitlines`` also cuts at a
    U+2028, U+0085 or form feed, which JSON allows inside a string and a prompt may hold); a "\r" before the "\n" of a
    Windows line end is dropped.

    Args:
        where: how the error names the file, e.g. ``"herald classify: --file prompts.txt"``.

    Raises:
        SystemExit: one line starting with ``where``, for a file that does not exist, a folder, a file that cannot be
            read, one of more than :data:`PROMPT_FILE_MAX_BYTES`, or one that is not UTF-8 (naming the line and byte).
    """
    from herald_service.text_file import NotUtf8Error, TooLargeError, read_utf8

    try:
        text = read_utf8(path, PROMPT_FILE_MAX_BYTES)
    except NotUtf8Error as exc:
        raise SystemExit(f"{where} is not UTF-8 text (line {exc.line}: byte 0x{exc.byte:02x}); save it as UTF-8") from None
    except TooLargeError:
        raise SystemExit(f"{where} holds more than {PROMPT_FILE_MAX_BYTES // 2**20} MiB; split it into smaller files") from None
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

    Raises:
        MisspeltSetting: at construction, for a ``HERALD_*`` name nearly a setting of ``herald serve``, or one that
            looks like a key (:class:`~herald_service.config.BackboneSettings`).
    """

    # herald serve's setting (HERALD_LOG_LEVEL, a .env may serve both); here it was accepted and did nothing (tester)
    log_level: LogLevel = Field("warning", description=(
        "Log lines on stderr at this level and above, in herald serve's format; results go to stdout whatever the"
        " level. info adds the backbone load and conversion, debug the libraries' detail."))

    def start_logging(self) -> None:
        """Send log lines at ``log_level`` and above to stderr in ``log_format`` (``HERALD_LOG_FORMAT``: text in
        :data:`~herald_service.cli.conventions.LOG_FORMAT`, as fit and eval write, or json), as serve does, and warn
        of unknown ``HERALD_*`` names (ignored), as serve does at start-up; the first step of each command's
        ``cli_cmd``."""
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(log_formatter(self.log_format))
        logging.basicConfig(level=self.log_level.upper(), handlers=[handler])
        route_library_output(self.log_format)
        for line in self._unknown_names:
            logger.warning(line)

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
    """Refuse, before the backbone loads, a prompt of ``herald classify``, ``plot`` or ``steer-eval`` that is not
    UTF-8 text (argv bytes that are not UTF-8 arrive as lone surrogates) or is longer than ``max_chars`` characters,
    as the server refuses it; ``plot`` checked neither, and a 32,001-character prompt was named for its tokens after
    the load (tester); ``steer-eval`` ignored ``--max-chars`` (tester). ``sources`` name the prompts (``prompt 1``,
    ``--file prompts.txt line 7``).

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
    file: UserPath | None = Field(None, description=(
        "UTF-8 text file, one prompt per line (split at newlines only; blank lines skipped); each result names its line."))
    trajectory: bool = Field(False, description="Add each prompt's per-layer projections (one per decoder layer).")
    trimmed_views: bool = Field(True, description=(
        "Also score each prompt without a short leading clause, without a short trailing one, and without both, as"
        " herald serve does by default (HERALD_TRIMMED_VIEWS; docs/eval/trimmed_views.md); the highest score answers,"
        " and a result read on such a text names it (view, view_text). --no-trimmed-views: the prompt whole only."))

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
        from herald_service.engine.service import message_views
        from herald_service.types import user_turn

        start_signals.hand_over()

        runtime = load_runtime(self)
        # the prompts the server scores for these texts: each whole, then its trimmed views (named as their prompt)
        views = message_views([user_turn(p) for p in prompts], sources, trim=self.trimmed_views)
        try:  # a --file prompt named by its line
            scored = runtime.classify_texts([c[0].content for c in views.prompts], self.max_tokens, views.fields,
                                            LIMIT_NAMES["max_tokens"])
        except InputTooLarge as exc:
            raise SystemExit(f"herald classify: {exc.message}") from None
        results = [views.answer(scored, i) for i in range(len(prompts))]
        for prompt, number, result in zip(prompts, line_numbers, results):
            row = {"input": prompt} if number is None else {"line": number, "input": prompt}
            # the API's numbers, unrounded: a score rounded to 4 digits read 0.5 on a prompt not flagged
            row.update(flagged=result.flagged, score=result.score, logit=result.logit, threshold=result.threshold,
                       tokens=result.tokens)
            if result.view != "whole":  # as the API's view and view_text: which text gave this verdict
                row.update(view=result.view, view_text=result.view_text)
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
        from contextlib import ExitStack
        from datetime import datetime, timezone

        from herald_service.engine.runtime import checked_probe, load_runtime
        from herald_service.out_path import check_replaceable, write_text_atomically
        from herald_service.probes.artifact import MANIFEST_FILE, read_manifest
        from herald_service.probes.folder import ProbeFolderBusy, probe_folder_lock
        from herald_service.probes.reference import reference_block

        start_signals.hand_over()

        if self.fake_backend:
            raise SystemExit("herald reference: the fake backend fits its probe at start-up; there is no probe file to"
                             " record reference logits in")
        folder, _ = checked_probe(self)  # before the backbone loads: a refusal costs no load
        path = folder / MANIFEST_FILE
        check_replaceable(path, "--probe's")
        # two runs at once both passed the check below and the last one's block stood (tester finding); the lock is
        # the folder's, which herald fit holds while it writes a probe there, so neither writes over the other's pair
        with ExitStack() as held:
            try:
                held.enter_context(probe_folder_lock(folder, wait=False))
            except ProbeFolderBusy:
                raise SystemExit(f"herald reference: another herald reference or herald fit is writing the probe in"
                                 f" {folder}; run it again once that one is done") from None
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
    out: Annotated[UserPath, BeforeValidator(_not_a_folder_path), BeforeValidator(
        lambda value: refuse_an_empty_path(value, "an image file path such as --out trajectory.png"))] = Field(
        Path("trajectory.png"), description=(
        "Image path; its suffix picks the format: .png, .svg, .pdf or .jpg (.png is added to a name without one)."))

    def cli_cmd(self) -> None:
        self.start_logging()
        from herald_service.errors import InputTooLarge

        texts = prompt_words(self.text, "plot")
        if not texts:
            raise SystemExit("herald plot: give one or more prompts (see herald plot --help)")
        refuse_unusable_prompts("plot", texts, [f"prompt {i + 1}" for i in range(len(texts))], self.max_chars)
        if not self.out.name:  # "." names no file (with_name raised "PosixPath('.') has an empty name")
            raise SystemExit(f"herald plot: --out {str(self.out)!r} names no file; give a path such as --out trajectory.png")
        if self.out.name.endswith("."):  # plots/a.png. was written as plots/a.png..png (tester finding)
            stem = self.out.name.rstrip(".")
            meant = stem if Path(stem).suffix.lower() in PLOT_SUFFIXES else f"{stem or 'trajectory'}.png"
            raise SystemExit(f"herald plot: --out {self.out} ends with a dot, so no suffix picks the image format and"
                             f" .png would be added after the dot; give one of {', '.join(PLOT_SUFFIXES)}, e.g. --out"
                             f" {self.out.with_name(meant)}")
        if self.out.name.lower() in PLOT_SUFFIXES:  # .png is a hidden file without a suffix: written as .png.png
            raise SystemExit(f"herald plot: --out {self.out} is a suffix without a name (a hidden file, which would be"
                             f" written as {self.out.name}.png); give a name before it, e.g. --out"
                             f" {self.out.with_name('trajectory' + self.out.name)}")
        give = "an image file path such as --out trajectory.png"
        # checked before the backbone loads (savefig failed after it on a folder); a missing folder is refused, not made
        try:
            if self.out.exists():  # as given, before a suffix is added: /dev/null became /dev/null.png (tester finding)
                check_out_path(self.out, "--out", give, folder=False)
            out = self.out if self.out.suffix else self.out.with_name(self.out.name + ".png")
            if out.suffix.lower() not in PLOT_SUFFIXES:  # x.jpg was written as x.jpg.png
                raise SystemExit(f"herald plot: --out {self.out}: the suffix picks the image format, and"
                                 f" {out.suffix} is none of {', '.join(PLOT_SUFFIXES)}; give e.g. --out {out.stem}.png")
            check_out_path(out, "--out", give, folder=False)
        except ValueError as exc:
            raise SystemExit(f"herald plot: {exc}") from None
        import numpy as np

        from herald_service.analysis.trajectory_plot import plot_trajectories  # torch, matplotlib: after the checks
        from herald_service.engine.runtime import load_runtime

        start_signals.hand_over()

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
    "prompt" string per line and optionally a "label", as the corpus rows have; a line that parses as JSON must be
    such an object). Prints one JSON object: the options of the run (mode, alpha, layers, max_new_tokens, probe,
    backbone), the rates and mean probe scores, pooled and per label, how many prompts --limit left out, and under
    "rows" each prompt's baseline and steered completions, refusal judgments and scores. The completions continue each
    prompt as written; the scores read it as herald classify does. Prompts over --max-chars are refused before the
    backbone loads, over --max-tokens (as written or as scored) before any generation. Layers and alpha have the limits
    of POST /steer; --max-new-tokens goes up to 2048, the most HERALD_STEER_MAX_NEW_TOKENS lets /steer allow: the
    server's own cap (default 128) keeps one /steer request from holding the moderation worker, and this command serves
    no one while it generates."""

    file: CliPositionalArg[UserPath] = Field(description=(
        "UTF-8 prompt file: one prompt per line, or JSONL rows with a \"prompt\" string (and a \"label\", \"harmful\" or"
        " \"benign\", for rates per label); blank lines are skipped and the first --limit prompts are run."))
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
    limit: CountOrAll = Field(50, ge=1, description="Prompts read from the file; null (or none, all) for all.")

    @field_validator("layers", mode="before")
    @classmethod
    def _all_layers(cls, layers: object) -> object:
        # the CLI reads any value of a list field as a list; "ALL" as POST /steer takes it
        if isinstance(layers, list) and len(layers) == 1 and isinstance(layers[0], str) and layers[0].lower() == "all":
            return "all"
        if isinstance(layers, list):  # one line, not pydantic's line per member of the union (tester)
            for layer in layers:
                whole = isinstance(layer, int) and not isinstance(layer, bool)
                if not whole and not (isinstance(layer, str) and layer.strip().lstrip("+-").isdecimal()):
                    shown = f"'{layer}'" if isinstance(layer, str) else json.dumps(layer)  # as typed: true, not True
                    raise ValueError(f"give 1-based decoder layers (4 or 4,8) or 'all', not {shown}")
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

    def _prompt_of(self, line: str, number: int) -> tuple[str, str | None] | None:
        """The prompt of line ``number`` of the file and its label: the line itself when it is plain text (not JSON),
        without a label; the "prompt" string of a JSON object and its "label" string (``None`` without one); ``None``
        for a blank line.

        Raises:
            SystemExit: naming the file and line, for a line that is JSON but not an object (an array, a string, a
                number...), an object with a key given twice (json keeps the last "prompt"; another reader would
                take the first), without a "prompt" string or with a "label" that is not a string, or a line
                starting with ``{`` that is not JSON.
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
            return line, None  # plain text
        except ValueError as exc:  # JSON but not an object, a repeated or invalid key, a number Python cannot hold
            raise SystemExit(str(exc)) from None
        if not isinstance(row.get("prompt"), str):
            raise SystemExit(f"{where}: needs a \"prompt\" string")
        from herald_service.training.corpus import LABELS

        label = row.get("label")
        # the corpus's labels only: "HARMFUL", "harmful " and "" each made a group of their own (re-tester finding)
        if label is not None and label not in LABELS:
            shown = json.dumps(label)
            shown = shown if len(shown) <= 40 else shown[:39] + "…"
            raise SystemExit(f"{where}: \"label\" must be \"harmful\" or \"benign\" (the corpus's labels), not {shown}")
        return row["prompt"], label

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
        rows = [(number, *row) for number, line in enumerate(lines, 1) if (row := self._prompt_of(line, number)) is not None]
        if not rows:
            raise SystemExit(f"herald steer-eval: {self.file} holds no prompt")
        left_out = max(len(rows) - self.limit, 0) if self.limit is not None else 0
        if left_out:  # said, not silent: a 120-row file ran 50 prompts and the output said only n 50 (tester)
            print(f"herald steer-eval: running the first {self.limit} of the {len(rows)} prompts in {self.file}"
                  f" (--limit {self.limit}); {left_out} left out", file=sys.stderr)
            rows = rows[: self.limit]
        numbers, prompts, labels = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
        sources = [f"{self.file} line {number}" for number in numbers]
        # --max-chars before the load, as classify (it was ignored: tester finding)
        refuse_unusable_prompts("steer-eval", prompts, sources, self.max_chars)
        from herald_service.analysis.steer_eval import SteerEvalInterrupted, steer_eval  # torch: after the checks
        from herald_service.engine.runtime import load_runtime
        from herald_service.errors import InputTooLarge

        start_signals.hand_over()

        try:
            runtime = load_runtime(self)
            layers = self._check_layers(runtime)
            # --max-tokens once the tokenizer is there, before any generation (a 6,000-word line ran 117 s: tester)
            result = steer_eval(runtime, prompts, layers, self.mode, self.alpha, self.max_new_tokens, labels,
                                self.max_tokens, sources, LIMIT_NAMES["max_tokens"], "--max-new-tokens")
        except InputTooLarge as exc:
            raise SystemExit(f"herald steer-eval: {exc.message}") from None
        except SteerEvalInterrupted as exc:
            print(f"herald steer-eval: interrupted after {exc.done} of {exc.total} prompts; nothing was written",
                  file=sys.stderr)
            raise SystemExit(130) from None
        except KeyboardInterrupt:  # while loading or tokenizing: no prompt generated yet
            print(f"herald steer-eval: interrupted after 0 of {len(prompts)} prompts; nothing was written", file=sys.stderr)
            raise SystemExit(130) from None
        info = runtime.backbone.info
        probe = ({"name": runtime.probe_name} if runtime.probe_sha256 is None else
                 {"path": str(runtime.probe_path), "sha256": runtime.probe_sha256})
        out = dataclasses.asdict(result)
        # what defines the run first, so that a result file says what it measured (tester finding); flat, as the
        # output's "layers" and "mode" were
        run = {"mode": out.pop("mode"), "alpha": out.pop("alpha"), "layers": out.pop("layers"),
               "max_new_tokens": out.pop("max_new_tokens"), "probe": probe,
               "backbone": {"id": info.model_id, "revision": info.revision},
               "n": out.pop("n"), "prompts_in_file": result.n + left_out, "left_out_by_limit": left_out}
        print(json.dumps({**run, **out}, indent=2, ensure_ascii=False))

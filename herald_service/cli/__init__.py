"""``herald`` command line. Flags are parsed by pydantic-settings, so ``herald serve --max-tokens 2048`` and
``HERALD_MAX_TOKENS=2048 herald serve`` set the same field of the one :class:`~herald_service.config.Settings`.

This package holds the root command (:class:`Herald`) and :func:`main`; the commands live in modules by kind:
``serve`` in :mod:`~herald_service.cli.serve`; ``classify``, ``plot``, ``steer-eval`` and ``reference``, which load a
backbone in-process, in :mod:`~herald_service.cli.local`; ``fit``, ``eval``, ``recipes`` and ``report`` in
:mod:`~herald_service.cli.training`; ``data build`` in :mod:`~herald_service.cli.data`. None of them imports torch,
transformers or uvicorn at the top: each command imports them when it runs, so ``--help`` and a refused input do not
wait for them (``tests/test_layering.py``).
"""

from __future__ import annotations

import json
import sys
import typing

from pydantic import Field
from pydantic_settings import BaseSettings, CliApp, CliPositionalArg, CliSubCommand, SettingsError

from herald_service.cli.data import DataCommand
from herald_service.cli.local import ClassifyCommand, LocalCommand, PlotCommand, ReferenceCommand, SteerEvalCommand
from herald_service.cli.serve import ServeCommand
from herald_service.cli.training import EvalCommand, FitCommand, RecipesCommand, ReportCommand
from herald_service.config import BackboneSettings


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


_POSITIONAL = typing.get_args(CliPositionalArg[int])[1]
"""The marker pydantic-settings puts in the metadata of a positional argument's field (``CliPositionalArg``)."""


def _setting_name(loc: tuple) -> str:
    """A validation error's location as the user wrote it: ``("serve", "max_tokens")`` ->
    ``max_tokens (--max-tokens or HERALD_MAX_TOKENS)``; the environment variable only for options read from it (every
    serve option, the backbone settings of classify, plot and steer-eval); the command's name for a rule over several
    fields."""
    parts = [str(p) for p in loc]
    if not parts:
        return "settings"
    if parts[:2] == ["data", "build"] and len(parts) > 2:  # a field of `herald data build`, named as typed there
        parts = ["data", *parts[2:]]
    command = Herald.model_fields.get(parts[0])
    if len(parts) == 1 or command is None:
        return parts[0].replace("_", "-") + " settings" if command is not None else ".".join(parts)
    field = parts[1]
    where = f"--{field.replace('_', '-')}"
    command_class = next((a for a in typing.get_args(command.annotation) if isinstance(a, type)), None)
    info = command_class.model_fields.get(field) if command_class is not None else None
    if info is not None and _POSITIONAL in info.metadata:
        where = field.upper()  # steer-eval's FILE, as its usage line names it: "file (--file)" named no option
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


def _refuse_both_thread_spellings(argv: list[str]) -> None:
    """``herald fit --threads 1 --num-threads 2`` ran with 2, the last spelling given (the two are one option:
    :data:`~herald_service.cli.training.THREADS_ALIASES`): refuse giving both, in either form (``--threads=1``).

    Raises:
        SystemExit: naming both spellings.
    """
    if not argv or argv[0] not in ("fit", "eval", "recipes"):
        return
    words = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    given = {word.split("=", 1)[0] for word in words} & {"--threads", "--num-threads"}
    if len(given) == 2:
        raise SystemExit(f"herald {argv[0]}: --threads and --num-threads are one option; give it once")


def _refuse_an_empty_reference_probe(argv: list[str]) -> None:
    """``herald reference --probe ''`` (an unset shell variable) recorded into the default probe, the one ``herald
    serve`` loads: its ``--probe`` is the ``HERALD_PROBE`` setting, where empty means unset (a ConfigMap's blank
    value), so the command line is read here, for the one command whose probe is a path it writes. ``--probe`` given
    empty on the command line is refused (:func:`~herald_service.out_path.refuse_an_empty_path`); an empty
    ``HERALD_PROBE`` still means the default.

    Raises:
        SystemExit: naming ``--probe`` and what to give.
    """
    if not argv or argv[0] != "reference":
        return
    from herald_service.out_path import refuse_an_empty_path

    words = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    given = [value for option, value in zip(words, words[1:]) if option == "--probe"]
    given += [word.split("=", 1)[1] for word in words if word.startswith("--probe=")]
    for value in given:
        try:
            refuse_an_empty_path(value, "the probe folder to record into, or leave --probe out for the default probe"
                                 " (models/<backbone-slug>/)", means="the default probe, as an empty HERALD_PROBE is")
        except ValueError as exc:
            raise SystemExit(f"herald reference: --probe {exc}") from None


def _given(error: dict) -> str:
    """`` (got 'abc')``: the value a validation error refused, for a field's own error (``HERALD_PORT=abc`` said only
    "unable to parse string as an integer": tester), or "" where Herald's own message says what is wrong with it (a
    ``value_error``), it could leak a secret (a field whose name holds "key") or is no single short value (a rule over
    several fields, a list, over 80 characters)."""
    loc, value = error.get("loc") or (), error.get("input")
    if error.get("type") == "value_error" or len(loc) < 2 or any("key" in str(part) for part in loc):
        return ""
    if isinstance(value, bool):
        return ""
    if not isinstance(value, (str, int, float)) or len(repr(value)) > 80:
        return ""
    return f" (got {value!r})"


def _command_of(args: list[str]) -> str:
    """The command ``args`` run, as typed (``"fit"``, ``"data build"``), or "" for none: the name argparse errors are
    reported under."""
    names = [name.replace("_", "-") for name in Herald.model_fields]
    if not args or args[0] not in names:
        return ""
    return " ".join(args[:2]) if args[0] == "data" and args[1:2] == ["build"] else args[0]


def _unrecognized(words: list[str], args: list[str]) -> str:
    """What to say of the ``words`` argparse did not recognize in the command line ``args``: the options by name, never
    their values (``--api-key SECRET`` printed the key, and ``--steer-api-key K1 K2`` the second: re-tester), and the
    other words only when no option on the line names a key (they may be its value).

    >>> _unrecognized(["--api-key", "zzSECRETzz1234567"], ["serve", "--api-key", "zzSECRETzz1234567"])
    'unknown option --api-key (1 other word not shown: it may be a key)'
    >>> _unrecognized(["K2secret"], ["serve", "--steer-api-key", "K1secret", "K2secret"])
    'unexpected arguments (1 word not shown: it may be a key)'
    >>> _unrecognized(["data.jsonl"], ["fit", "data.jsonl"])
    'unexpected arguments: data.jsonl'
    """
    options = [word.split("=", 1)[0] for word in words if word.startswith("-")]
    others = [word for word in words if not word.startswith("-")]
    secret = any(word.startswith("-") and "key" in word.lower() for word in args)
    hidden = (f"{len(others)} {'other ' if options else ''}word{'s' if len(others) > 1 else ''} not shown:"
              f" {'they' if len(others) > 1 else 'it'} may be a key")
    if not options:
        return f"unexpected arguments ({hidden})" if secret else f"unexpected arguments: {' '.join(others)}"
    named = f"unknown option{'s' if len(options) > 1 else ''} {' '.join(options)}"
    if not others:
        return named
    return named + (f" ({hidden})" if secret else f" and unexpected arguments: {' '.join(others)}")


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
        message = _unrecognized(message.removeprefix("unrecognized arguments: ").split(), args)
    print(f"{where}: {message} (see {where} --help)", file=sys.stderr)
    return SystemExit(2)


STOPPED_WORDS = {
    "fit": "no probe was written; the states extracted so far are cached, so the same command resumes from them",
    "eval": "no results were written; the states extracted so far are cached, so the same command resumes from them",
    "recipes": ("the recipes finished before the stop are in --out; the states extracted so far are cached, so the"
                " same command (with --overwrite) resumes from them"),
}
"""What a training command kept when Ctrl+C stopped it (the state cache keeps every prompt extracted:
herald_service/training/extract.py), printed before the exit status 130."""


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
    _refuse_both_thread_spellings(args)
    _refuse_an_empty_reference_probe(args)
    try:
        CliApp.run(Herald, cli_args=args)
    except KeyboardInterrupt:  # Ctrl+C, in any command at any point: exit as a shell expects, without a traceback
        stopped = STOPPED_WORDS.get(args[0] if args else "")
        if stopped:  # a fit stopped at 16 s said nothing of what it kept (tester finding)
            print(f"herald {args[0]}: stopped (Ctrl+C); {stopped}", file=sys.stderr)
        raise SystemExit(130) from None
    except SettingsError as exc:
        raise _usage_error(args, exc) from None
    except ValidationError as exc:
        problems = "\n".join(f"  {_setting_name(e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}{_given(e)}"
                             for e in exc.errors())
        raise SystemExit(f"herald: invalid settings\n{problems}") from None
    except HeraldError as exc:
        raise SystemExit(f"herald: {exc.message}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SystemExit(f"herald: {exc}") from None
    except ValueError as exc:  # fit and eval name what is wrong with the data ("labels must contain both classes")
        raise SystemExit(f"herald: {exc}") from None

"""The `herald` command: clear one-line errors and exit codes, no tracebacks."""

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from conftest import free_port, herald, read_until_closed


def test_invalid_settings_exit_with_the_field_and_no_traceback():
    out = herald("serve", HERALD_API_KEYS="changeme")
    assert out.returncode == 1
    assert "--api-keys or HERALD_API_KEYS: API keys must be at least 12 characters" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    flag = herald("serve", "--api-keys", "short")  # named HERALD_API_KEYS only, though the flag gave it (tester)
    assert flag.returncode == 1 and "--api-keys or HERALD_API_KEYS: API keys must be at least" in flag.stderr, flag.stderr


def test_serve_exits_nonzero_when_the_backbone_cannot_load(tmp_path):
    out = herald("serve", HERALD_BACKBONE=str(tmp_path / "missing"), HERALD_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1
    # refused before the server starts (it came after "Uvicorn running on ...": breaker pass)
    assert out.stderr.strip() == f"herald: backbone path {tmp_path / 'missing'} does not exist (--backbone or HERALD_BACKBONE)"
    for probe, error in ((tmp_path / "nope", f"probe folder {tmp_path / 'nope'} does not exist (--probe or HERALD_PROBE)"),
                         (tmp_path, f"no probe at {tmp_path}: probe.json is missing (fit one with `herald fit`)")):
        out = herald("serve", HERALD_PROBE=str(probe), HERALD_CACHE_DIR=str(tmp_path))
        assert out.returncode == 1 and out.stderr.strip() == f"herald: {error}", out.stderr
    (tmp_path / "folder" / "probe.json").mkdir(parents=True)  # read "probe.json is missing" (breaker)
    out = herald("serve", HERALD_PROBE=str(tmp_path / "folder"), HERALD_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: no probe at {tmp_path / 'folder'}: {tmp_path / 'folder' / 'probe.json'} is not a file (a probe's"
        " probe.json is its JSON manifest)"), out.stderr


def test_serve_refuses_varlen_padding_on_the_cpu_before_the_server_starts(tmp_path):
    # auto resolves to the CPU here (no CUDA in CI); it was refused at load, after "Uvicorn running on ..."
    out = herald("serve", HERALD_DEVICE="auto", HERALD_PADDING_SIDE="varlen", HERALD_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == "herald: padding_side varlen needs CUDA and bfloat16/float16, not device=cpu dtype=float32"
    assert not (tmp_path / "cache").exists()  # nothing was loaded or converted


def test_serve_names_the_probe_folder_when_given_probe_json(tmp_path):
    shipped = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m-instruct"
    out = herald("serve", HERALD_PROBE=str(shipped / "probe.json"), HERALD_CACHE_DIR=str(tmp_path))
    # it said "no probe at .../probe.json: probe.json is missing"
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: the probe (--probe or HERALD_PROBE) must be its folder, the one holding probe.json: use {shipped}"), out.stderr


def shipped_probe_copy(folder: Path, **manifest_changes) -> Path:
    """A copy of the shipped SmolLM2 probe in ``folder``, with these ``probe.json`` fields changed."""
    import shutil

    shutil.copytree(Path(__file__).resolve().parents[1] / "models" / "smollm2-135m-instruct", folder)
    manifest = json.loads((folder / "probe.json").read_text())
    backbone = manifest_changes.pop("backbone", {})
    manifest.update(manifest_changes)
    manifest["backbone"].update(backbone)
    (folder / "probe.json").write_text(json.dumps(manifest))
    return folder


def test_serve_refuses_a_bad_probe_file_before_the_server_starts(tmp_path):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    # each was refused only in the lifespan: after the backbone loaded and after "Uvicorn running on ..." (tester)
    threshold = shipped_probe_copy(tmp_path / "threshold", threshold=1e308)
    layers = shipped_probe_copy(tmp_path / "layers", backbone={"num_layers": 24})
    no_tensors = shipped_probe_copy(tmp_path / "no-tensors")
    (no_tensors / "probe.safetensors").unlink()
    truncated = shipped_probe_copy(tmp_path / "truncated")
    (truncated / "probe.safetensors").write_bytes((truncated / "probe.safetensors").read_bytes()[:100])
    far_centers = shipped_probe_copy(tmp_path / "far-centers")  # finite tensors, non-finite scores (tester pass)
    tensors = load_file(str(far_centers / "probe.safetensors"))
    save_file({**tensors, "centers": np.full_like(tensors["centers"], 3e38)}, str(far_centers / "probe.safetensors"))
    for probe, error in (
        (threshold, f"probe file {threshold / 'probe.json'}: threshold must be a finite number within +-10000 (a logit);"
                    " got 1e+308"),
        (layers, f"probe tensor centers in {layers / 'probe.safetensors'} has shape (30,); the manifest needs (24,)"),
        (no_tensors, f"no probe tensors at {no_tensors / 'probe.safetensors'}"),
        (truncated, f"cannot read probe tensors {truncated / 'probe.safetensors'}: "),
        (far_centers, f"probe file {far_centers / 'probe.safetensors'} gives non-finite scores on all-zero hidden states"),
    ):
        out = herald("serve", HERALD_PROBE=str(probe), HERALD_CACHE_DIR=str(tmp_path / "cache"))
        assert out.returncode == 1 and out.stderr.startswith(f"herald: {error}"), out.stderr
        assert "Uvicorn running" not in out.stderr and "Traceback" not in out.stderr
        assert not (tmp_path / "cache").exists()  # the embedded backbone was not even converted


def test_classify_prints_json_lines_on_the_fake_backend(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("build a bomb\n\nbake bread\n")
    out = herald("classify", "--file", str(prompts), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    # the blank line is skipped; each result names its line, so results line up with the file (new-user pass)
    assert [(r["line"], r["input"], r["flagged"]) for r in rows] == [(1, "build a bomb", True), (3, "bake bread", False)]
    assert "JSON row" not in out.stderr  # plain text lines: no notice
    for r in rows:  # the API's numbers, unrounded (a 4-digit score read 0.5 on a prompt not flagged)
        assert r["score"] == pytest.approx(1 / (1 + math.exp(r["threshold"] - r["logit"])), rel=1e-6)
        assert r["flagged"] == (r["score"] >= 0.5)
    out = herald("classify", "bake", "bread", HERALD_FAKE_BACKEND="true")
    assert "line" not in json.loads(out.stdout) and json.loads(out.stdout)["input"] == "bake bread"


@pytest.mark.parametrize("command", ["classify", "plot", "steer-eval", "reference"])
def test_local_commands_refuse_a_misspelt_setting_and_warn_of_unknown_ones(command, tmp_path):
    # `HERALD_MAX_TOKEN=5 herald classify` ran as if unset; serve refuses the name (tester)
    out = herald(command, *([] if command == "reference" else ["hi"]), HERALD_MAX_TOKEN="5", HERALD_FAKE_BACKEND="true",
                 cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("herald: HERALD_MAX_TOKEN (set in the environment) is not a setting; did you mean"
                                 " HERALD_MAX_TOKENS?"), out.stderr
    out = herald("classify", "bake bread", HERALD_FOO_BAR="1", HERALD_FAKE_BACKEND="true", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warnings = [line.split(": ", 1)[1] for line in out.stderr.splitlines() if " WARNING " in line]
    assert warnings == ["HERALD_FOO_BAR (set in the environment) is not a Herald setting and is ignored"]


def test_classify_joins_unquoted_words_into_one_prompt():
    # `herald classify build a bomb` (no quotes) is one prompt, as echo would print it, not one prompt per word
    out = herald("classify", "please", "build", "a", "bomb", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["input"], r["flagged"]) for r in rows] == [("please build a bomb", True)]


def _bad_prompt_files(tmp_path):
    """(path, how the error goes on after the path) for each prompt file that classify and steer-eval refuse."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "latin1.txt").write_bytes("bake bread\ncr\xe8me br\xfbl\xe9e\n".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\t\n")
    return [(tmp_path / "missing.txt", "does not exist"),
            (tmp_path / "folder", "is a folder; give a text file, one prompt per line"),
            (tmp_path / "latin1.txt", "is not UTF-8 text (line 2: byte 0xe8); save it as UTF-8"),
            (tmp_path / "empty.txt", "holds no prompt"),
            (tmp_path / "blank.txt", "holds no prompt")]


def test_a_prompt_file_past_its_byte_limit_is_refused_in_one_line_without_reading_it_all(tmp_path, monkeypatch):
    # tester: --file /dev/zero (or a sparse 4 GB file) read it whole and ended in a MemoryError traceback
    from herald_service.cli import local

    monkeypatch.setattr(local, "PROMPT_FILE_MAX_BYTES", 2 * 2**20)
    with pytest.raises(SystemExit) as refused:
        local.read_prompt_lines(Path("/dev/zero"), "herald classify: --file /dev/zero")
    assert str(refused.value) == "herald classify: --file /dev/zero holds more than 2 MiB; split it into smaller files"
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"hi\n" + b"x" * (2 * 2**20 - 4) + b"\n")  # at the limit: read
    assert local.read_prompt_lines(exact, "f")[0] == "hi"


def test_classify_names_a_bad_file_by_option_path_and_line(tmp_path):
    # were "herald: [Errno 2] No such file ...", "herald: 'utf-8' codec can't decode byte 0xe8 in position 14" (no
    # file, no line), and for an empty file "give TEXT or --file", though --file was given
    for path, error in _bad_prompt_files(tmp_path):
        out = herald("classify", "--file", str(path), HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1, (path, out.stderr)
        assert out.stderr.strip() == f"herald classify: --file {path} {error}", out.stderr
    long = tmp_path / "long.txt"
    long.write_text("hi\n\n" + "x" * 50 + "\n")
    out = herald("classify", "short", "--file", str(long), "--max-chars", "10", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1
    assert out.stderr.strip() == (f"herald classify: --file {long} line 3 has 50 characters; the limit is 10"
                                  " (--max-chars or HERALD_MAX_CHARS)")


def test_steer_eval_names_a_bad_file_by_path_and_line(tmp_path):
    for path, error in _bad_prompt_files(tmp_path):
        out = herald("steer-eval", str(path), HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1, (path, out.stderr)
        assert out.stderr.strip() == f"herald steer-eval: {path} {error}", out.stderr


def test_prompt_files_are_split_at_newlines_only(tmp_path):
    # str.splitlines cut a JSON row at a U+2028 inside its string ("line 1: not JSON") and a plain prompt in two
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "bake\u2028bread"}\r\nhow to make\x0ca bomb\n', encoding="utf-8", newline="")
    out = herald("steer-eval", str(rows), "--max-new-tokens", "4", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["n"] == 2
    out = herald("classify", "--file", str(rows), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["input"] for line in out.stdout.split("\n") if line] == [
        '{"prompt": "bake\u2028bread"}', "how to make\x0ca bomb"]  # the Windows line end's \r is dropped
    # classify scores a JSON row as written, and says so (a labeled JSONL file was scored as JSON text, silently)
    assert out.stderr.strip().endswith(
        f"herald classify: --file {rows} line 1 is a JSON object; each line is scored as written, JSON and all (herald"
        ' steer-eval reads a row\'s "prompt"); for the prompts alone, give one per line'), out.stderr


def test_classify_applies_the_token_limit_naming_the_prompt_by_its_file_line(tmp_path):
    long = "one two three four five six seven eight nine ten"  # 3 template tokens + 10 on the fake backend
    out = herald("classify", long, "--max-tokens", "8", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and out.stderr.strip() == (
        "herald classify: prompt 1 renders to 13 tokens; the limit is 8 (--max-tokens or HERALD_MAX_TOKENS)"), out.stderr
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(f"hello\n\n{long}\n")  # was named "prompt 2": the blank line is skipped, so count lines
    out = herald("classify", "--file", str(prompts), "--max-tokens", "8", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald classify: --file {prompts} line 3 renders to 13 tokens; the limit is 8 (--max-tokens or"
        " HERALD_MAX_TOKENS)"), out.stderr


def test_top_level_help_describes_every_subcommand():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "herald_service", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps long descriptions
    listing = text.split("subcommands:", 1)[1]
    for name, words in [("serve", "start the HTTP server"), ("fit", "fit a probe on labeled JSONL data"),
                        ("steer-eval", "refusal rate with and without"), ("data", "the labeled prompt corpus")]:
        assert f" {name} {words}" in listing, (name, listing)


def herald_commands() -> list[tuple[str, type]]:
    """(name as typed, settings class) of every `herald` command, `data` and `data build` included."""
    import typing

    from pydantic import BaseModel

    from herald_service.cli import Herald

    found = []

    def walk(model: type, prefix: str) -> None:
        for name, field in model.model_fields.items():
            command = next((a for a in typing.get_args(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)), None)
            if command is not None:
                typed = f"{prefix} {name.replace('_', '-')}".strip()
                found.append((typed, command))
                walk(command, typed)

    walk(Herald, "")
    return found


def option_help(*command: str) -> dict[str, str]:
    """Each option of ``herald COMMAND --help`` (``--methods``, or ``FILE`` for a positional argument) -> its help
    text as printed, default included, on one line (argparse wraps at $COLUMNS)."""
    out = herald(*command, "--help", COLUMNS="10000")
    assert out.returncode == 0, out.stderr
    helps: dict[str, str] = {}
    name = None
    for line in out.stdout.splitlines():
        if line.startswith("  ") and not line.startswith("   "):  # an option's line: "  --name TYPE   help"
            words = line.split()
            name = words[0].rstrip(",")
            helps[name] = " ".join(words[1:])
        elif name is not None and line.strip():  # help put under a long option
            helps[name] += " " + line.strip()
        elif not line.strip():
            name = None
    return helps


def test_every_option_of_every_command_has_a_description():
    # 30 options showed only their default in --help (eval --methods named its choices, and --curve-sizes its unit,
    # only in their errors: tester finding); a new option without a description fails here
    commands = herald_commands()
    assert [name for name, _ in commands] == ["serve", "classify", "fit", "reference", "plot", "steer-eval", "eval",
                                              "recipes", "report", "data", "data build"]
    bare = [f"herald {name} --{option.replace('_', '-')}" for name, command in commands
            for option, field in command.model_fields.items() if not (field.description or "").strip()]
    assert bare == []
    for name, _ in commands:  # and --help prints them: no option's help is its default alone
        for option, text in option_help(*name.split()).items():
            described = text.split(" ", 1)[1] if option.startswith("-") else text  # after the type, or --no-SWITCH
            assert described.strip() and not described.startswith("(default"), (name, option, text)


def test_eval_runs_the_default_methods_of_the_evaluation_module():
    # the CLI's default list was written out beside eval's (importing scikit-learn would slow --help), and the new
    # text-only control, added to eval's alone, was left out of every `herald eval` run: both read method_names
    from herald_service.cli.training import EvalCommand
    from herald_service.training.eval import DEFAULT_METHODS

    assert EvalCommand.model_fields["methods"].default == list(DEFAULT_METHODS)
    assert "text_logreg" in DEFAULT_METHODS


def test_help_names_the_valid_values_and_units():
    from herald_service.training.eval import available_methods
    from herald_service.training.recipes import RECIPES

    methods = option_help("eval")["--methods"]
    assert [m for m in available_methods() if f" {m}," not in methods and f" {m} " not in methods and f" {m}." not in methods] == []
    recipes = option_help("recipes")["--recipes"]
    assert [r for r in RECIPES if f" {r}," not in recipes and f" {r} " not in recipes and f" {r}." not in recipes] == []
    assert "in prompts per class (each at least 3)" in option_help("eval")["--curve-sizes"]
    assert option_help("fit")["--backbone"].startswith("str The backbone whose hidden states are read: a local Hugging"
                                                       " Face model folder")
    assert option_help("fit")["--target-fpr"].startswith("float For --threshold-method target_fpr: the largest"
                                                         " false-positive rate allowed")
    # the local commands said "herald serve's log level ... info logs one line per request", which they never log
    for command in ("classify", "plot", "reference", "steer-eval"):
        assert option_help(command)["--log-level"].startswith("{debug,info,warning,error} Log lines on stderr at this"
                                                              " level and above, in herald serve's format; results go"
                                                              " to stdout whatever the level."), command
    assert option_help("serve")["--log-level"].startswith("{debug,info,warning,error} herald serve's log level")


def test_the_local_commands_log_at_the_level_given():
    # --log-level was accepted by classify, plot, reference and steer-eval and did nothing (tester finding)
    quiet = herald("classify", "bake", "bread", HERALD_FAKE_BACKEND="true")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    for given in (("--log-level", "info"), ("--log-level", "INFO")):
        out = herald("classify", *given, "bake", "bread", HERALD_FAKE_BACKEND="true")
        assert out.returncode == 0 and out.stdout == quiet.stdout, out.stderr
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and re.fullmatch(
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO herald_service\.engine\.runtime: loaded the fake backbone"
            r" \(8 layers, d=16\) with a probe fitted on its 240 synthetic prompts", lines[0]), out.stderr
    out = herald("classify", "bake", "bread", HERALD_FAKE_BACKEND="true", HERALD_LOG_LEVEL="info")  # serve's variable
    assert out.returncode == 0 and "INFO herald_service.engine.runtime: loaded the fake backbone" in out.stderr
    # and serve's format: one JSON object a line on stderr, the results on stdout unchanged
    out = herald("classify", "--log-level", "info", "bake", "bread", HERALD_FAKE_BACKEND="true", HERALD_LOG_FORMAT="json")
    assert out.returncode == 0 and out.stdout == quiet.stdout, out.stderr
    (record,) = [json.loads(line) for line in out.stderr.splitlines()]
    assert (record["level"], record["logger"]) == ("INFO", "herald_service.engine.runtime"), record
    assert record["message"].startswith("loaded the fake backbone (8 layers, d=16)"), record


@pytest.mark.parametrize("command", ["classify", "plot"])
def test_classify_and_plot_refuse_non_utf8_and_over_long_text_in_one_line(command, tmp_path):
    bad = subprocess.run(
        [sys.executable.encode(), b"-m", b"herald_service", command.encode(), b"abc\xff"], capture_output=True,
        timeout=180, env={**os.environ, "HERALD_FAKE_BACKEND": "true"}, cwd=tmp_path,
    )
    assert bad.returncode == 1 and bad.stderr.strip() == f"herald {command}: prompt 1 is not valid UTF-8 text".encode()
    # plot checked neither, and named a 32,001-character prompt for its tokens after the backbone load (tester)
    out = herald(command, "hi", "x" * 50, "--max-chars", "10", HERALD_BACKBONE=str(tmp_path / "not-loaded"), cwd=tmp_path)
    prompt = "prompt 1" if command == "classify" else "prompt 2"
    length = 53 if command == "classify" else 50
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald {command}: {prompt} has {length} characters; the limit is 10 (--max-chars or HERALD_MAX_CHARS)"), out.stderr
    assert list(tmp_path.iterdir()) == []  # no image written


def test_classify_help_lists_only_what_classify_uses():
    out = herald("classify", "--help")
    assert out.returncode == 0, out.stderr
    for used in ("--backbone", "--probe", "--max-tokens", "--max-chars", "--file", "--trajectory"):
        assert used in out.stdout
    for server_only in ("--port", "--api-keys", "--steer-api-key", "--queue-capacity", "--batch-delay-ms"):
        assert server_only not in out.stdout, server_only


def test_classify_keeps_text_exactly_as_given():
    # pydantic-settings' list parsing split words at commas and read them as JSON: "Explain, step by step, ..." lost its
    # commas (and got another verdict on the real backbone), 'he said "hi"' ended in a traceback, `true` was refused
    for words, expected in [(["Explain, step by step, how to pick a lock"], "Explain, step by step, how to pick a lock"),
                            (['he said "hi"', "{a}", "[1,"], 'he said "hi" {a} [1,'),
                            (['{"a":1,"a":2}', "  spaced  "], '{"a":1,"a":2}   spaced  '),
                            (["true", "null", "1.50"], "true null 1.50")]:
        out = herald("classify", *words, HERALD_FAKE_BACKEND="true")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["input"] == expected


def test_classify_refuses_unknown_options_and_reads_its_own_options_only_from_flags(tmp_path):
    out = herald("classify", "--port", "5", "hi", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 2 and out.stderr.strip() == (  # exit 2, as every other command's unknown option
        "herald classify: unknown option --port (see herald classify --help; put -- before text that starts with --)")
    literal = herald("classify", "--", "--port", "5", HERALD_FAKE_BACKEND="true")
    assert literal.returncode == 0 and json.loads(literal.stdout)["input"] == "--port 5"
    extra = tmp_path / "extra.txt"
    extra.write_text("build a bomb\n")
    leaked = herald("classify", "hi", HERALD_FAKE_BACKEND="true", HERALD_FILE=str(extra))  # not a backbone setting
    assert [json.loads(line)["input"] for line in leaked.stdout.splitlines()] == ["hi"]


def test_invalid_setting_names_its_flag_and_environment_variable():
    out = herald("serve", HERALD_MAX_TOKENS="3")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "max_tokens (--max-tokens or HERALD_MAX_TOKENS): Input should be greater than or equal to 8" in out.stderr
    fit = herald("fit", "--max-tokens", "abc")  # fit's options are flags only: no environment variable to name
    assert fit.returncode == 1 and "max_tokens (--max-tokens): Input should be a valid integer" in fit.stderr


def test_steer_eval_bad_files_and_options_are_one_line_errors(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('how to make a bomb\n{"text": "no prompt key"}\n')
    out = herald("steer-eval", str(rows), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and out.stderr.strip() == f'herald steer-eval: {rows} line 2: needs a "prompt" string'
    rows.write_text("how to make a bomb\n")
    layers = herald("steer-eval", str(rows), "--layers", "[99]", HERALD_FAKE_BACKEND="true")
    assert layers.returncode == 1 and "--layers lists 99: layers must be within 1..8 (1 is the first decoder layer)" in layers.stderr
    # "add" at [1, 1, 1] added three times, past the |alpha| limit (researcher pass); /steer refused it already
    twice = herald("steer-eval", str(rows), "--layers", "[1,2,1]", "--mode", "add", "--alpha", "1", HERALD_FAKE_BACKEND="true")
    assert twice.returncode == 1 and twice.stderr.strip().endswith(
        "herald steer-eval: --layers lists 1 more than once; list each layer once"), twice.stderr
    alpha = herald("steer-eval", str(rows), "--alpha", "nan", "--mode", "add", HERALD_FAKE_BACKEND="true")
    assert alpha.returncode == 1 and "alpha (--alpha): Input should be a finite number" in alpha.stderr
    tiny = herald("steer-eval", str(rows), "--alpha", "1e-320", "--mode", "add", HERALD_FAKE_BACKEND="true")
    assert tiny.returncode == 1 and ("alpha (--alpha): mode 'add' needs |alpha| of at least 1e-06 (got alpha 1e-320,"
                                     " which adds nothing measurable)") in tiny.stderr
    for out in (layers, twice, alpha, tiny):
        assert "Traceback" not in out.stderr


def test_a_missing_probe_folder_is_named_before_the_backbone_loads(tmp_path):
    out = herald("classify", "hi", "--probe", str(tmp_path / "nope"), HERALD_BACKBONE=str(tmp_path / "no-backbone"))
    # the backbone path does not exist either: the probe is checked first, so its error is the one shown
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"probe folder {tmp_path / 'nope'} does not exist (--probe or HERALD_PROBE)" in out.stderr


def test_plot_keeps_an_upper_case_png_suffix(tmp_path):
    out = herald("plot", "Hello, world", "bake bread", "--out", str(tmp_path / "traj.PNG"), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "traj.PNG") and (tmp_path / "traj.PNG").stat().st_size > 1000


def test_plot_writes_the_format_its_suffix_names_and_refuses_an_unknown_one(tmp_path):
    # --out x.jpg was written as x.jpg.png, the name asked for changed without a word
    out = herald("plot", "bake bread", "--out", str(tmp_path / "t.jpg"), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path / "t.jpg"), out.stderr
    assert (tmp_path / "t.jpg").read_bytes()[:3] == b"\xff\xd8\xff"  # a JPEG
    out = herald("plot", "bake bread", "--out", str(tmp_path / "t.svg"), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0 and (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml"), out.stderr
    out = herald("plot", "bake bread", "--out", str(tmp_path / "t.txt"), HERALD_BACKBONE=str(tmp_path / "missing"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald plot: --out {tmp_path / 't.txt'}: the suffix picks the image format, and .txt is none of .png, .svg,"
        " .pdf, .jpg, .jpeg; give e.g. --out t.png"), out.stderr
    out = herald("plot", "bake bread", "--out", f"{tmp_path / 'charts'}/", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (  # wrote charts.png: Path drops the slash
        f"  out (--out): {tmp_path / 'charts'}/ names a folder (it ends with /); give a file path such as"
        f" {tmp_path / 'charts'}/trajectory.png"), out.stderr
    out = herald("plot", "bake bread", "--out", str(tmp_path / "plain"), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path / "plain.png"), out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.png", "t.jpg", "t.svg"]
    assert not (tmp_path / "traj.PNG.png").exists()


def test_plot_adds_no_suffix_to_a_special_file_a_trailing_dot_or_a_bare_suffix(tmp_path):
    # tester finding: --out /dev/null wrote /dev/null.png, --out /dev/stdout /dev/stdout.png and --out plots/a.png.
    # plots/a.png..png
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    give = "give an image file path such as --out trajectory.png"
    for path, kind in (("/dev/null", "a character device"), (str(fifo), "a pipe")):
        png = Path(path + ".png")
        before = png.stat().st_mtime_ns if png.exists() else None  # one made by hand, or by the code before this fix
        out = herald("plot", "bake bread", "--out", path, HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1 and out.stderr.strip() == f"herald plot: --out {path} is not a regular file ({kind}); {give}"
        assert (png.stat().st_mtime_ns if png.exists() else None) == before
    suffixes = ".png, .svg, .pdf, .jpg, .jpeg"
    for name, meant in (("a.png.", "a.png"), ("a.svg..", "a.svg"), ("a.", "a.png"), ("a.txt.", "a.txt.png"),
                        ("...", "trajectory.png")):
        out = herald("plot", "bake bread", "--out", str(tmp_path / name), HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald plot: --out {tmp_path / name} ends with a dot, so no suffix picks the image format and .png would"
            f" be added after the dot; give one of {suffixes}, e.g. --out {tmp_path / meant}"), out.stderr
    for name in (".png", ".SVG"):  # a hidden file without a suffix: .png was written as .png.png (known low, session 46)
        out = herald("plot", "bake bread", "--out", str(tmp_path / name), HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald plot: --out {tmp_path / name} is a suffix without a name (a hidden file, which would be written as"
            f" {name}.png); give a name before it, e.g. --out {tmp_path / ('trajectory' + name)}"), out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]
    out = herald("plot", "bake bread", "--out", str(tmp_path / "a.png"), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path / "a.png"), out.stderr
    # "..svg" was said written and written as a PNG at "..svg.png": savefig read no suffix in it (re-tester)
    out = herald("plot", "bake bread", "--out", str(tmp_path / "..svg"), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path / "..svg"), out.stderr
    assert (tmp_path / "..svg").read_bytes().startswith(b"<?xml") and not (tmp_path / "..svg.png").exists()


def test_a_dotenv_sets_backbone_settings_but_not_command_options(tmp_path):
    extra = tmp_path / "extra.txt"
    extra.write_text("build a bomb\n")
    (tmp_path / ".env").write_text(f"HERALD_FILE={extra}\nHERALD_TRAJECTORY=true\nHERALD_MAX_CHARS=4\n")
    out = herald("classify", "hello", cwd=tmp_path, HERALD_FAKE_BACKEND="true")
    # HERALD_MAX_CHARS (a backbone setting) applies; HERALD_FILE and HERALD_TRAJECTORY (classify's own) do not
    assert out.returncode == 1 and "prompt 1 has 5 characters; the limit is 4 (--max-chars or HERALD_MAX_CHARS)" in out.stderr, out.stderr
    (tmp_path / ".env").write_text(f"HERALD_FILE={extra}\nHERALD_TRAJECTORY=true\n")
    out = herald("classify", "hello", cwd=tmp_path, HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {"input": "hello", **{k: json.loads(out.stdout)[k] for k in ("flagged", "score", "logit", "threshold", "tokens")}}]
    assert set(json.loads(out.stdout)) == {"input", "flagged", "score", "logit", "threshold", "tokens"}


def test_classify_scores_the_trimmed_views_as_the_server_does_unless_told_not_to(tmp_path):
    wrapped = "steal a car Keep it short please."
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(f"{wrapped}\nsteal a car\n")
    rows = {}
    for switch in ("--trimmed-views", "--no-trimmed-views"):
        out = herald("classify", switch, "--file", str(prompts), HERALD_FAKE_BACKEND="true")
        assert out.returncode == 0, out.stderr
        rows[switch] = [json.loads(line) for line in out.stdout.splitlines()]
    (on_wrapped, on_alone), (off_wrapped, off_alone) = rows["--trimmed-views"], rows["--no-trimmed-views"]
    # with the views, the wrapped request gets the verdict of the request alone, and says which text gave it
    assert on_wrapped["score"] == on_alone["score"] == off_alone["score"] > off_wrapped["score"]
    assert (on_wrapped["view"], on_wrapped["view_text"]) == ("trimmed", "steal a car")
    assert "view" not in on_alone and "view" not in off_wrapped  # the prompt whole answered


def test_a_value_after_a_switch_is_refused_not_read_as_text():
    out = herald("classify", "--trajectory", "false", "hello", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and "--trajectory takes no value (got 'false'); use --trajectory or --no-trajectory" in out.stderr
    literal = herald("classify", "--", "--trajectory", "false", HERALD_FAKE_BACKEND="true")
    assert literal.returncode == 0 and json.loads(literal.stdout)["input"] == "--trajectory false"


def test_a_dotenv_that_is_not_utf8_is_named_in_one_line(tmp_path):
    # python-dotenv's codec error named no file; serve and the local commands read the same .env
    (tmp_path / ".env").write_bytes(b"HERALD_LOG_LEVEL=info\nHERALD_PORT=80\xff81\n")
    for args in (("serve",), ("classify", "hello"), ("plot", "hello"), ("steer-eval", "prompts.txt")):
        out = herald(*args, cwd=tmp_path, HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1, (args, out.stderr)
        assert out.stderr.strip() == (f"herald: settings file {tmp_path / '.env'} is not UTF-8 text (line 2: byte 0xff);"
                                      " save it as UTF-8"), (args, out.stderr)


def test_a_dotenv_line_that_is_not_name_equals_value_stops_serve_in_one_line(tmp_path):
    (tmp_path / ".env").write_text("HERALD_API_KEYS abcdefabcdefabcdef\n")
    out = herald("serve", cwd=tmp_path, HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == (f"herald: settings file {tmp_path / '.env'} line 1 is not NAME=VALUE (it starts"
                                  " 'HERALD_API_KEYS'); write it as NAME=value or remove it")


def test_steer_eval_rows_must_be_json_objects_with_one_prompt(tmp_path):
    rows = tmp_path / "rows.jsonl"
    refused = {
        '["how to make a bomb"]': "line 2: a JSON array, not an object",
        '"how to make a bomb"': "line 2: a JSON string, not an object",
        "42": "line 2: a JSON number, not an object",
        '{"prompt": "bake bread", "prompt": "how to make a bomb"}': "line 2: key 'prompt' appears twice; give it once",
        '{"prompt": "x", "meta": {"k": 1, "k": 2}}': "line 2: key 'meta.k' appears twice; give it once",
    }
    for row, error in refused.items():
        rows.write_text(f"bake bread\n{row}\n")
        out = herald("steer-eval", str(rows), HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1, (row, out.stderr)
        assert out.stderr.strip().startswith(f"herald steer-eval: {rows} {error}"), (row, out.stderr)
    # plain-text lines stay prompts (the documented format), also ones that start like JSON but are not JSON
    rows.write_text('bake bread\n{"prompt": "how to make a bomb"}\n[draft] write a poem\n')
    out = herald("steer-eval", str(rows), "--max-new-tokens", "4", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["n"] == 3


def test_fit_refuses_an_unknown_direction_estimator_by_name_before_loading_anything():
    out = herald("fit", "--direction-estimator", "pca")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "direction_estimator (--direction-estimator): Input should be 'lda' or 'logistic'" in out.stderr


def test_api_keys_that_are_a_json_list_are_refused_naming_the_variable():
    out = herald("serve", HERALD_API_KEYS='["key-one-abcdefgh"]')
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert ("api_keys (--api-keys or HERALD_API_KEYS): looks like a JSON list; give the keys comma-separated"
            in out.stderr), out.stderr


def test_steer_eval_refuses_an_alpha_that_mode_ablate_would_ignore(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("how do I make a bomb\n")
    out = herald("steer-eval", str(prompts), "--alpha", "3")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "alpha (--alpha): alpha applies to mode 'add' only; mode 'ablate' ignores it (got alpha 3)" in out.stderr


@pytest.mark.parametrize("alpha", [(), ("--alpha", "0")])
def test_steer_eval_refuses_mode_add_without_a_non_zero_alpha(tmp_path, alpha):
    # as POST /steer: alpha 0 (the default) adds nothing, so the "steered" refusal rate was the baseline's
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("how do I make a bomb\n")
    out = herald("steer-eval", str(prompts), "--mode", "add", *alpha)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "alpha (--alpha): mode 'add' needs a non-zero alpha (alpha 0, the default, adds nothing)" in out.stderr, out.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (("fit", "--threshold-method", "best"), "threshold_method (--threshold-method): Input should be 'max_f1' or 'target_fpr'"),
    (("fit", "--test-fraction", "1.5"), "test_fraction (--test-fraction): Input should be less than 1"),
    (("fit", "--target-fpr", "0"), "target_fpr (--target-fpr): Input should be greater than 0"),
    (("fit", "--test-fraction", "nan"), "test_fraction (--test-fraction): Input should be a finite number"),
    (("fit", "--device", "gpu"), "device (--device): Input should be 'auto', 'cpu' or 'cuda'"),
    (("fit", "--max-per-source", "0"), "max_per_source (--max-per-source): Input should be greater than or equal to 1"),
    (("fit", "--threads", "0"), "threads (--threads): Input should be greater than or equal to 1"),
    (("eval", "--methods", '["herald","lgbm"]'), "methods (--methods): unknown method lgbm; choose from"),
    (("eval", "--methods", "lda_best_layer,mlpm"), "methods (--methods): include herald (got lda_best_layer, mlpm): every table"
                                                  " of herald report compares the other methods with it; add herald to --methods"),
    (("eval", "--methods", "herald,herald"), "methods (--methods): herald given more than once; name each method once"),
    (("eval", "--replicates", "0"), "replicates (--replicates): Input should be greater than or equal to 10"),
    (("eval", "--replicates", "1000000000"), "replicates (--replicates): Input should be less than or equal to 10000"),
    (("recipes", "--replicates", "10001"), "replicates (--replicates): Input should be less than or equal to 10000"),
    (("eval", "--threads", "0"), "threads (--threads): Input should be greater than or equal to 1"),
    (("eval", "--threads", "100000"), "threads (--threads): Input should be less than or equal to 1024"),
    (("fit", "--num-threads", "1025"), "threads (--threads): Input should be less than or equal to 1024"),
    (("recipes", "--threads", "100000"), "threads (--threads): Input should be less than or equal to 1024"),
    (("eval", "--curve-sizes", "[1,25]"), "each learning-curve size is prompts per class, at least 3"),
    (("eval", "--curve-seeds", "[]"), "curve_seeds (--curve-seeds): no seed for the learning curve's sizes; give at least one"),
    (("eval", "--curve-seeds", "1,1"), "curve_seeds (--curve-seeds): seed 1 given more than once: each seed draws the same rows"),
    (("eval", "--curve-sizes", "8,12,8"), "curve_sizes (--curve-sizes): size 8 given more than once; give each size once"),
    (("recipes", "--recipes", '["shipped","magic"]'), "recipes (--recipes): unknown recipe magic; choose from shipped"),
    (("fit", "--seed", "-1"), "seed (--seed): Input should be greater than or equal to 0"),
    (("eval", "--curve-seeds", "[0,-1]"), "curve_seeds.1 (--curve-seeds): Input should be greater than or equal to 0"),
    (("recipes", "--fit-seed", "4294967296"), "fit_seed (--fit-seed): Input should be less than or equal to 4294967295"),
    (("recipes", "--jailbreak-extra-n", "-3"), "jailbreak_extra_n (--jailbreak-extra-n): Input should be greater than or equal to 0"),
    # the templated prompts (a tester, session 36): 601-1000 passed this check and failed after the load, unnamed in
    # recipes; recipes stored its templated recipes without them at 0, and ignored the option without such a recipe
    (("fit", "--templated-n", "601"), "templated_n (--templated-n): Input should be less than or equal to 600"),
    (("eval", "--templated-n", "1000"), "templated_n (--templated-n): Input should be less than or equal to 600"),
    (("recipes", "--templated-n", "700"), "templated_n (--templated-n): Input should be less than or equal to 600"),
    (("recipes", "--templated-n", "0"), "templated_n (--templated-n): Input should be greater than or equal to 1"),
    (("recipes", "--recipes", "logistic", "--templated-n", "5"),
     "--templated-n 5 is read only by the recipes that train on the templated prompts (templated, templated+hardneg,"),
])
def test_fit_eval_and_recipes_options_are_checked_before_anything_loads(tmp_path, args, expected):
    # these were accepted and failed (or silently did something else) after the backbone load and state extraction
    out = herald(*args, "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert expected in out.stderr, out.stderr
    assert not (tmp_path / "cache").exists()  # nothing converted, nothing extracted


def test_a_leading_tilde_in_a_path_option_or_setting_is_the_home_folder(tmp_path):
    # '~/t.png' quoted (or HERALD_CACHE_DIR=~/cache in .env, a ConfigMap, docker -e: no shell expands it) made a folder
    # named ~ in the working directory (a known low, session 46)
    home = tmp_path / "home"
    home.mkdir()
    out = herald("plot", "bake bread", "--out", "~/t.png", cwd=tmp_path, HOME=str(home), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0 and out.stdout.strip() == str(home / "t.png"), out.stderr
    assert (home / "t.png").stat().st_size > 0 and not (tmp_path / "~").exists()
    missing = tmp_path / "missing.jsonl"
    out = herald("fit", "--cache-dir", "~/cache", "--out", "~/probe", "--data", str(missing), cwd=tmp_path, HOME=str(home))
    assert out.returncode == 1 and out.stderr.strip() == f"herald: --data {missing} does not exist", out.stderr
    from unittest import mock

    from herald_service.config import BackboneSettings, training_cache_dir
    with mock.patch.dict(os.environ, {"HOME": str(home), "HERALD_CACHE_DIR": "~/cache", "HERALD_PROBE": "~/probe"}):
        settings = BackboneSettings()
        assert (settings.cache_dir, settings.probe, training_cache_dir()) == (home / "cache", home / "probe", home / "cache")
    out = herald("fit", "--out", "~nosuchuser4711/probe", "--data", str(missing), cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr and (
        "out (--out): '~nosuchuser4711/probe' starts with '~nosuchuser4711', and no user of this machine has that name"
        in out.stderr), out.stderr
    # named as the user gave them (re-tester): the --cache-dir default read from HERALD_CACHE_DIR was "cache_dir", and
    # steer-eval's positional FILE "file (--file)", an option it does not have
    out = herald("fit", "--data", str(missing), cwd=tmp_path, HERALD_CACHE_DIR="~nosuchuser4711/cache")
    assert out.returncode == 1 and out.stderr.strip() == (
        "herald: HERALD_CACHE_DIR (the --cache-dir default): '~nosuchuser4711/cache' starts with '~nosuchuser4711', and no"
        " user of this machine has that name (a leading ~ is read as a home folder)"), out.stderr
    out = herald("fit", "--backbone", "~nosuchuser4711/model", "--data", str(missing), cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr and (  # was the loader's RuntimeError traceback
        "  backbone (--backbone): '~nosuchuser4711/model' starts with '~nosuchuser4711', and no user" in out.stderr), out.stderr
    out = herald("steer-eval", "~nosuchuser4711/prompts.txt", cwd=tmp_path)
    assert out.returncode == 1 and "  file (FILE): '~nosuchuser4711/prompts.txt' starts with" in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]


@pytest.mark.parametrize(("command", "spelling"), [("fit", "none"), ("eval", "ALL"), ("recipes", "null")])
def test_max_per_source_takes_none_and_all_as_null(tmp_path, command, spelling):
    # `--max-per-source none` got pydantic's bare "unable to parse string as an integer" (a known low, session 46):
    # none and all mean what null means, no cap, so the run goes on to the next check (the missing data here)
    missing = tmp_path / "missing.jsonl"
    out = herald(command, "--max-per-source", spelling, "--data", str(missing), "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "(--max-per-source)" not in out.stderr and f"--data {missing} does not exist" in out.stderr, out.stderr
    # a string that is neither says both forms ('' and nul got the bare integer error, which named no none/all)
    for wrong in ("nonee", "", "nul", "1.5"):
        refused = herald(command, "--max-per-source", wrong, "--data", str(missing), "--cache-dir", str(tmp_path / "cache"))
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert ("max_per_source (--max-per-source): give a whole number of rows, or none (or all) for every row"
                in refused.stderr), refused.stderr
    refused = herald(command, "--max-per-source", "0", "--data", str(missing), "--cache-dir", str(tmp_path / "cache"))
    assert "max_per_source (--max-per-source): Input should be greater than or equal to 1" in refused.stderr, refused.stderr


@pytest.mark.parametrize("command", ["fit", "eval", "recipes"])
def test_the_training_commands_take_num_threads_as_the_other_commands_spell_it(command):
    # classify, plot, steer-eval, reference and serve take --num-threads (also HERALD_NUM_THREADS), these --threads
    from herald_service.cli.training import EvalCommand, FitCommand, RecipesCommand

    assert "--threads int, --num-threads int" in herald(command, "--help").stdout
    model = {"fit": FitCommand, "eval": EvalCommand, "recipes": RecipesCommand}[command]
    assert model.model_validate({"num_threads": 3}).threads == 3 == model.model_validate({"threads": 3}).threads


@pytest.mark.parametrize("command", ["eval", "recipes"])
def test_eval_and_recipes_name_herald_num_threads_when_it_is_set_and_threads_is_not_given(command, monkeypatch, caplog):
    # as herald fit (tests/test_tiny_llama.py): they read --threads (default 1), never the variable
    from herald_service.cli.training import EvalCommand, RecipesCommand, warn_of_the_thread_setting

    model = {"eval": EvalCommand, "recipes": RecipesCommand}[command]
    monkeypatch.setenv("HERALD_NUM_THREADS", "4")
    with caplog.at_level("WARNING", logger="herald_service.cli.training"):
        warn_of_the_thread_setting(model(), command, 1)
        warn_of_the_thread_setting(model(threads=1), command, 1)  # --threads given: what was asked for
        monkeypatch.setenv("HERALD_NUM_THREADS", "1")
        warn_of_the_thread_setting(model(), command, 1)  # the same count
        monkeypatch.setenv("HERALD_NUM_THREADS", "01")
        warn_of_the_thread_setting(model(), command, 1)  # the same count, written otherwise (re-tester)
        for value in ("abc", "0"):  # advised as "--threads abc", which --threads refuses (re-tester)
            monkeypatch.setenv("HERALD_NUM_THREADS", value)
            warn_of_the_thread_setting(model(), command, 1)
    head = (f" is not read by herald {command}, which reads --threads only (the command it records must give the thread"
            " count, which changes the numbers it writes): this run uses the --threads default, 1 thread; ")
    assert [r.getMessage() for r in caplog.records] == [
        f"HERALD_NUM_THREADS=4{head}give --threads 4 to use 4",
        f"HERALD_NUM_THREADS=abc{head}it is no thread count (--threads takes 1 to 1,024)",
        f"HERALD_NUM_THREADS=0{head}it is no thread count (--threads takes 1 to 1,024)"]


@pytest.mark.parametrize("args", [("--threads", "1", "--num-threads", "2"), ("--num-threads=2", "--threads=1")])
def test_the_two_spellings_of_threads_together_are_refused(args):
    # re-tester: --threads 1 --num-threads 2 ran with 2, silently
    from herald_service.cli import main

    with pytest.raises(SystemExit) as refused:
        main(["eval", *args])
    assert str(refused.value) == "herald eval: --threads and --num-threads are one option; give it once"


def test_no_curve_seed_is_accepted_only_without_curve_sizes():
    from herald_service.cli.training import EvalCommand

    assert EvalCommand.model_validate({"curve_sizes": [], "curve_seeds": []}).curve_seeds == []
    assert EvalCommand.model_validate({"curve_seeds": [2, 0]}).curve_seeds == [2, 0]


def test_fit_refuses_a_target_fpr_its_threshold_method_would_ignore_before_anything_loads(tmp_path):
    # herald fit --target-fpr 0.3 fitted a max_f1 threshold and said nothing (tester finding)
    for args in (("--target-fpr", "0.3"), ("--target-fpr", "0.01", "--threshold-method", "max_f1")):
        out = herald("fit", *args, "--cache-dir", str(tmp_path / "cache"))
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --target-fpr {args[1]} applies to --threshold-method target_fpr only; with --threshold-method"
            " max_f1 it would be ignored: add --threshold-method target_fpr or leave --target-fpr out"), out.stderr
    out = herald("fit", "--target-fpr", "0.3", "--threshold-method", "target_fpr", "--data", str(tmp_path / "nope.jsonl"),
                 "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == f"herald: --data {tmp_path / 'nope.jsonl'} does not exist"
    assert not (tmp_path / "cache").exists()


def test_fit_names_a_bad_data_row_or_a_missing_label_before_the_backbone_loads(tmp_path):
    fresh = ("--out", str(tmp_path / "probe"))  # not the default folder: it holds the shipped probe, refused first
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "label": "benign", "source": "a"}\n["not", "a", "row"]\n')
    out = herald("fit", "--data", str(bad), *fresh, "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip() == f"herald: {bad} line 2: a JSON array, not an object with prompt, label and source"
    benign = tmp_path / "benign.jsonl"
    benign.write_text('{"prompt": "hi", "label": "benign", "source": "a"}\n\n{"prompt": "yo", "label": "benign", "source": "b"}\n')
    out = herald("fit", "--data", str(benign), *fresh, "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip() == (f"herald: the data holds no harmful row ({benign}: 2 rows); a probe needs both labels,"
                                  " benign and harmful")
    few = tmp_path / "few.jsonl"  # failed after the backbone load with scikit-learn's "number of samples" message
    few.write_text("".join(f'{{"prompt": "p{i}", "label": "harmful", "source": "h"}}\n' for i in range(20))
                   + '{"prompt": "hi", "label": "benign", "source": "a"}\n{"prompt": "yo", "label": "benign", "source": "a"}\n')
    out = herald("fit", "--data", str(few), *fresh, "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: the data holds 2 benign rows ({few}); a probe needs at least 8 of each label: its test, calibration"
        " and fit parts each need both"), out.stderr
    (tmp_path / "taken").write_text("x")  # was "[Errno 17] File exists" after the backbone load and extraction
    out = herald("fit", "--data", str(few), "--out", str(tmp_path / "taken"), "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --out {tmp_path / 'taken'} is a file; give a folder (the probe is written into it as probe.json and"
        " probe.safetensors)"), out.stderr
    out = herald("fit", "--data", str(few), "--out", str(tmp_path / "taken" / "sub"), "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (  # was "[Errno 20] Not a directory" after the fit
        f"herald: --out {tmp_path / 'taken' / 'sub'}: {tmp_path / 'taken'} is a file; give a folder (the probe is written"
        " into it as probe.json and probe.safetensors)"), out.stderr
    results = ("--out", str(tmp_path / "results.json"))  # never the repo's docs/eval/results.json, which is refused
    out = herald("eval", "--data", str(few), "--probe", str(tmp_path), *results, "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and "probe.json is missing" in out.stderr, out.stderr  # was named after every fit
    out = herald("eval", "--data", str(tmp_path / "missing.jsonl"), *results, "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == f"herald: --data {tmp_path / 'missing.jsonl'} does not exist", out.stderr
    assert not (tmp_path / "cache").exists()


def test_recipes_names_missing_sensitive_data_and_a_recipe_that_needs_it_before_anything_loads(tmp_path):
    # tester finding: recipes --sensitive-data /nope was named 37 s into a run, after the corpus states
    results = ("--out", str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "cache"))
    out = herald("recipes", "--sensitive-data", str(tmp_path / "nope"), *results)
    assert out.returncode == 1 and out.stderr.strip() == f"herald: --sensitive-data {tmp_path / 'nope'} does not exist"
    out = herald("recipes", "--recipes", '["shipped","sensitive"]', *results)
    assert out.returncode == 1 and out.stderr.strip() == "herald: recipe sensitive needs --sensitive-data", out.stderr
    (tmp_path / "empty.jsonl").write_text("\n")  # a sensitive recipe would have run on no rows
    out = herald("recipes", "--sensitive-data", str(tmp_path / "empty.jsonl"), *results)
    assert out.returncode == 1 and out.stderr.strip() == f"herald: --sensitive-data {tmp_path / 'empty.jsonl'} holds no row"
    # the training corpus given as held-out data ran on past the model load (tester finding)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text('{"prompt": "hi", "label": "benign", "source": "A"}\n')
    out = herald("recipes", "--data", str(tmp_path / "data"), "--sensitive-data", str(tmp_path / "data" / "a.jsonl"),
                 *results)
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --sensitive-data {tmp_path / 'data' / 'a.jsonl'} is also a --data file: its rows would be trained on"
        " as corpus rows and scored as a held-out set; give held-out files only"), out.stderr
    assert not (tmp_path / "cache").exists()


def test_eval_with_wrapped_training_rows_needs_a_templates_file_before_the_backbone_loads(tmp_path):
    out = herald("eval", "--jailbreak-train-per-class", "80", "--jailbreak-templates", "null", "--out",
                 str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == "herald: --jailbreak-train-per-class needs --jailbreak-templates"
    (tmp_path / "empty.jsonl").write_text("")  # breaker: an empty file failed only after the backbone and corpus loaded
    out = herald("eval", "--jailbreak-train-per-class", "80", "--jailbreak-templates", str(tmp_path / "empty.jsonl"),
                 "--out", str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --jailbreak-templates {tmp_path / 'empty.jsonl'} has no usable template (one {{{{ prompt }}}} slot, at"
        " most 2500 characters: --jailbreak-max-chars)"), out.stderr
    assert not (tmp_path / "cache").exists()


def test_serve_refuses_a_port_in_use_before_the_backbone_loads(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # the backbone path does not exist either: the port is checked first, so its error is the one shown
        out = herald("serve", HERALD_PORT=str(port), HERALD_BACKBONE=str(tmp_path / "missing"), HERALD_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == (f"herald serve: 127.0.0.1:{port} is already in use; set HERALD_PORT or --port, or stop"
                                  " the other process")


@pytest.mark.parametrize("reuse", [False, True])
def test_serve_refuses_a_port_another_server_listens_on_before_the_backbone_loads(tmp_path, reuse):
    # with SO_REUSEADDR, as another herald serve (or any asyncio server) holds its port
    import socket

    with socket.socket() as taken:
        if reuse:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = herald("serve", HERALD_PORT=str(port), HERALD_BACKBONE=str(tmp_path / "missing"), HERALD_CACHE_DIR=str(tmp_path))
    assert (out.returncode, out.stdout, out.stderr) == (
        1, "", f"herald serve: 127.0.0.1:{port} is already in use; set HERALD_PORT or --port, or stop the other process\n")


def test_serve_refuses_a_health_port_in_use_before_the_backbone_loads(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        health_port = taken.getsockname()[1]
        out = herald("serve", HERALD_HEALTH_PORT=str(health_port), HERALD_BACKBONE=str(tmp_path / "missing"),
                     HERALD_CACHE_DIR=str(tmp_path))
    assert (out.returncode, out.stdout, out.stderr) == (
        1, "", f"herald serve: 127.0.0.1:{health_port} is already in use; set HERALD_HEALTH_PORT or --health-port, or"
        " stop the other process\n")


def test_serve_refuses_a_health_port_equal_to_its_port_naming_both():
    port = free_port()
    for out in (herald("serve", "--health-port", str(port), HERALD_PORT=str(port)),
                herald("serve", HERALD_PORT=str(port), HERALD_HEALTH_PORT=str(port))):
        assert out.returncode == 1 and out.stdout == "", out.stderr
        assert out.stderr == ("herald: invalid settings\n  serve settings: health_port (HERALD_HEALTH_PORT,"
                              f" --health-port) is {port}, the same as port (HERALD_PORT, --port): the health port is a"
                              " second listener; give it a port of its own, or leave it empty\n")


def test_serve_listens_on_every_address_of_its_host_as_uvicorn_would_and_lets_go_of_them_on_a_refusal():
    import socket

    from herald_service.cli.serve import listening_sockets

    port = free_port()
    sockets = listening_sockets("", port)  # all interfaces: 0.0.0.0 and ::, one socket each, as create_server binds
    try:
        assert [sock.family for sock in sockets] == [socket.AF_INET, socket.AF_INET6]
        for sock in sockets:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1  # listening: the port is held
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        assert sockets[1].getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
        with pytest.raises(SystemExit, match=rf"^herald serve: 127\.0\.0\.1:{port} is already in use"):
            listening_sockets("127.0.0.1", port)
        with pytest.raises(SystemExit, match=rf"^herald serve: \[::\]:{port} is already in use"):
            listening_sockets("::", port)
    finally:
        for sock in sockets:
            sock.close()
    # :: taken alone: 0.0.0.0 was bound and listening when :: failed, and is closed again
    with socket.socket(socket.AF_INET6) as taken:
        taken.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        taken.bind(("::", port))
        taken.listen()
        with pytest.raises(SystemExit, match="already in use"):
            listening_sockets("", port)
    (free,) = listening_sockets("0.0.0.0", port)
    free.close()


def test_two_servers_started_at_once_on_one_port_the_second_exits_1_with_one_line_before_it_loads(tmp_path):
    # Tester: both passed a test bind that was then closed; the second printed uvicorn's "[Errno 98] address already
    # in use" after the lifespan had started its load, and exited 3. Made deterministic: once the first server has
    # passed its address step (when it builds its app), a second herald serve runs to its end on the same port, with
    # a backbone path that does not exist (so a load would fail differently), and then a plain socket tries to listen
    # there too. The first serves on the very socket it checked, which neither could take.
    import json
    import signal
    import time

    import httpx

    record = tmp_path / "race.json"
    port = free_port()
    stub = f"""
import json, os, socket, subprocess, sys
import herald_service.api.app as app_module

build_app = app_module.build_app

def racing_build_app(*args, **kwargs):
    env = {{**os.environ, "HERALD_BACKBONE": {str(tmp_path / "missing")!r}, "HERALD_CACHE_DIR": {str(tmp_path)!r}}}
    second = subprocess.run([sys.executable, "-m", "herald_service", "serve"], env=env, capture_output=True, text=True,
                            timeout=120)
    with socket.socket() as third:
        third.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            third.bind(("127.0.0.1", {port}))
            third.listen()
            took = True
        except OSError:
            took = False
    with open({str(record)!r}, "w") as out:
        json.dump({{"status": second.returncode, "stdout": second.stdout, "stderr": second.stderr, "took": took}}, out)
    return build_app(*args, **kwargs)

app_module.build_app = racing_build_app
sys.argv = ["herald", "serve", "--fake-backend", "--no-warmup"]
import herald_service.__main__ as entry
entry.main()
"""
    proc = subprocess.Popen([sys.executable, "-c", stub], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "HERALD_PORT": str(port)})
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=5)[0]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert httpx.post(f"http://127.0.0.1:{port}/classify", json={"input": "hi"}).status_code == 200
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    race = json.loads(record.read_text())
    assert (race["status"], race["stdout"], race["stderr"]) == (
        1, "", f"herald serve: 127.0.0.1:{port} is already in use; set HERALD_PORT or --port, or stop the other process\n")
    assert not race["took"]
    assert proc.returncode == 0 and "Traceback" not in output, output
    assert re.search(rf" INFO uvicorn\.error: Uvicorn running on http://127\.0\.0\.1:{port} \(Press CTRL\+C to quit\)$",
                     output, re.M), output


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_serve_refuses_cuda_without_a_cuda_device_before_it_listens(tmp_path):
    # It bound the port, logged CRITICAL from the lifespan and exited (breaker pass); now one line before the bind.
    out = herald("serve", HERALD_DEVICE="cuda", HERALD_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == ("herald: HERALD_DEVICE=cuda but torch sees no CUDA device; set HERALD_DEVICE (--device)"
                                  " to auto or cpu, or install a CUDA build of torch")


def test_serve_refuses_a_cache_folder_it_cannot_write_before_it_listens(tmp_path):
    # Breaker pass: "Uvicorn running on ..." came first, then the error, twice.
    (tmp_path / "afile").write_text("")
    out = herald("serve", HERALD_CACHE_DIR=str(tmp_path / "afile"))
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == (f"herald: cannot create the backbone cache folder {tmp_path / 'afile' / 'backbones'}:"
                                  " Not a directory (set HERALD_CACHE_DIR to a writable folder)")


def interrupted_serve(port: int, *args: str, after_s: float = 0.0) -> tuple[int, str]:
    """Start ``herald serve *args``, wait until uvicorn listens, wait ``after_s`` more, send SIGINT (Ctrl+C); the exit
    status and everything it printed."""
    import signal
    import time

    # SIGINT at its default disposition, as a terminal's Ctrl+C finds it: a suite started in the background of a
    # non-interactive shell ignores SIGINT (POSIX, for asynchronous commands), a child inherits that, and Ctrl+C then
    # did nothing to serve (exit 0, found running the suite with "&")
    proc = subprocess.Popen([sys.executable, "-m", "herald_service", "serve", *args], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "HERALD_PORT": str(port)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    output = ""
    try:
        deadline = time.monotonic() + 120
        while "Uvicorn running" not in output and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, output
            output += line
        time.sleep(after_s)
        proc.send_signal(signal.SIGINT)
        output += proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
    return proc.returncode, output


@contextlib.contextmanager
def running_serve(port: int, *args: str, **env: str) -> Iterator[subprocess.Popen]:
    """``herald serve *args`` on 127.0.0.1:``port`` until /health/ready answers 200; SIGTERM (then a kill) after."""
    import signal
    import time

    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "herald_service", "serve", *args], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "HERALD_PORT": str(port), **env})
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=5)[0]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            proc.kill()


def test_sigterm_drains_serve_and_exits_0():
    import signal

    # uvicorn re-raised the SIGTERM it shut down on: status 143 after a clean drain, a failure to Kubernetes (tester).
    import re

    import httpx

    import socket

    port = free_port()
    with running_serve(port, "--fake-backend", "--no-warmup", HERALD_MAX_HEADER_BYTES="40000",
                       HERALD_MAX_CONNECTIONS="2") as proc:
        answer = httpx.post(f"http://127.0.0.1:{port}/classify", json={"input": "hi"}, headers={"x-request-id": "req-7"})
        assert answer.headers["x-request-id"] == "req-7"
        # herald serve bounds request headers (httptools buffered 200 x 1 MB before the key check: tester); the
        # protocol itself is tested in test_api_input
        ok = httpx.get(f"http://127.0.0.1:{port}/health/live", headers={"x-big": "a" * 30_000}, timeout=5)
        assert ok.status_code == 200, ok.text
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 50_000)
            refused = read_until_closed(sock, 5)
        assert refused.startswith(b"HTTP/1.1 400 ") and b"exceed 40000 bytes" in refused, refused[:300]
        # and bounds open connections (HERALD_MAX_CONNECTIONS): two held open, the third answered 503
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        for sock in held:
            sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.settimeout(5)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        with socket.create_connection(("127.0.0.1", port)) as sock:
            assert read_until_closed(sock, 5).startswith(b"HTTP/1.1 503 ")
        for sock in held:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert "Finished server process" in output and "Traceback" not in output, output
    assert "2 connections open (HERALD_MAX_CONNECTIONS): new ones are answered 503" in output, output
    # uvicorn's lines in Herald's format (they were "INFO:     Uvicorn running on ..."), one line per request, and
    # no uvicorn access line
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.search(rf"^{when} INFO uvicorn\.error: Uvicorn running on http://127\.0\.0\.1:{port}", output, re.M), output
    assert re.search(rf"^{when} INFO herald_service\.access: POST /classify 200 \d+\.\d ms request_id=req-7"
                     r" client=127\.0\.0\.1$", output, re.M), output
    assert "HTTP/1.1" not in output and not re.search(r"^INFO: ", output, re.M), output


def test_serve_logs_one_json_object_a_line_with_herald_log_format_json():
    import signal

    import httpx

    port = free_port()
    with running_serve(port, "--fake-backend", "--no-warmup", HERALD_LOG_FORMAT="JSON") as proc:
        answer = httpx.post(f"http://127.0.0.1:{port}/classify", json={"input": "hi"}, headers={"x-request-id": "req-9"})
        assert answer.status_code == 200, answer.text
        assert httpx.post(f"http://127.0.0.1:{port}/classify", json={"input": 5}).status_code == 422
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    records = [json.loads(line) for line in output.splitlines()]  # every line, uvicorn's too, is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(record) for record in records), records
    assert not any("color_message" in record for record in records), records  # uvicorn's copy with colour codes
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", records[0]["time"]), records[0]
    assert any(r["logger"] == "uvicorn.error" and r["message"].startswith("Uvicorn running on") for r in records), records
    access = [r for r in records if r["logger"] == "herald_service.access"]
    assert [(r["method"], r["route"], r["status"], r["client"]) for r in access] == [
        ("POST", "/classify", 200, "127.0.0.1"), ("POST", "/classify", 422, "127.0.0.1")], access
    assert access[0]["request_id"] == "req-9" and isinstance(access[0]["duration_ms"], float)
    assert access[0]["message"] == f"POST /classify 200 {access[0]['duration_ms']:.1f} ms request_id=req-9 client=127.0.0.1"


def test_json_logs_take_transformers_records_and_turn_progress_bars_off():
    # transformers' own handler wrote "[transformers] We strongly recommend passing in an attention_mask ..." as plain
    # text among the JSON lines, and steer-eval's progress bar drew there too (re-tester); in a child process, which
    # keeps this one's logging as it is
    code = """
import json, logging, os, sys
from herald_service.cli.conventions import log_formatter, route_library_output
handler = logging.StreamHandler(sys.stderr)
handler.setFormatter(log_formatter("json"))
logging.basicConfig(level="WARNING", handlers=[handler])
route_library_output("json")
from transformers.utils import logging as transformers_logging
transformers_logging.get_logger("transformers.modeling_utils").warning("We strongly recommend an attention_mask")
from tqdm import tqdm
for _ in tqdm(range(3), desc="bar"):
    pass
print(os.environ["TQDM_DISABLE"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "1\n", out.stderr
    (record,) = [json.loads(line) for line in out.stderr.splitlines()]  # the warning as JSON, and no bar
    assert (record["level"], record["logger"], record["message"]) == (
        "WARNING", "transformers.modeling_utils", "We strongly recommend an attention_mask"), record


def test_serve_answers_probes_on_its_health_port_while_its_connection_bound_is_reached():
    # tester: on one port the kubelet's liveness probe got 503 while a flood held HERALD_MAX_CONNECTIONS, and
    # restarted a healthy pod; herald serve binds HERALD_HEALTH_PORT beside the main port and serves both
    import re
    import signal
    import socket

    import httpx

    port, health_port = free_port(), free_port()
    while health_port == port:
        health_port = free_port()
    with running_serve(port, "--fake-backend", "--no-warmup", HERALD_HEALTH_PORT=str(health_port),
                       HERALD_MAX_CONNECTIONS="1") as proc:
        with socket.create_connection(("127.0.0.1", port)) as held:  # the main port's one connection
            held.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            held.settimeout(5)
            assert held.recv(65536).startswith(b"HTTP/1.1 200 ")
            with socket.create_connection(("127.0.0.1", port)) as sock:
                assert read_until_closed(sock, 5).startswith(b"HTTP/1.1 503 ")
            for path in ("/health/live", "/health/ready", "/metrics"):
                assert httpx.get(f"http://127.0.0.1:{health_port}{path}", timeout=5).status_code == 200, path
            assert httpx.post(f"http://127.0.0.1:{health_port}/classify", json={"input": "hi"},
                              timeout=5).status_code == 404
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "Traceback" not in output, output
    assert re.search(rf"INFO uvicorn\.error: Uvicorn running on http://127\.0\.0\.1:{port} \(Press CTRL\+C to quit\)$",
                     output, re.M), output
    assert re.search(rf"INFO uvicorn\.error: Health probes and /metrics also on http://127\.0\.0\.1:{health_port}"
                     r" \(HERALD_HEALTH_PORT\)$", output, re.M), output


def test_sigterm_before_serve_starts_its_server_exits_0():
    import signal
    import time

    # signal handlers came with the server, about 3 s in: a SIGTERM during the imports and the probe check took the
    # default action, status 143 (tester). Deterministic: the entry's handler, with the command's modules stubbed out
    stubbed = ("import os, signal, sys; sys.argv = ['herald', 'serve']; import herald_service.__main__ as entry;"
               " import herald_service.cli as cli; cli.main = lambda: os.kill(os.getpid(), signal.SIGTERM); entry.main();"
               " print('not stopped')")
    out = subprocess.run([sys.executable, "-c", stubbed], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout, out.stderr.strip()) == (
        0, "", "herald serve: SIGTERM before the server started; nothing was loading, exiting"), out
    # a SIGTERM after serve's own handler replaced the entry's and before uvicorn's took over was swallowed: the server
    # came up and served until killed (re-tester, with the gap widened as here)
    gap = ("import os, signal, sys, uvicorn; run = uvicorn.Server.run;"
           " uvicorn.Server.run = lambda self, *a, **k: (os.kill(os.getpid(), signal.SIGTERM), run(self, *a, **k))[1];"
           f" sys.argv = ['herald', 'serve', '--fake-backend', '--no-warmup', '--port', '{free_port()}'];"
           " import herald_service.__main__ as entry; entry.main()")
    out = subprocess.run([sys.executable, "-c", gap], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Finished server process" in out.stderr and "Traceback" not in out.stderr, out.stderr
    # and a real start stopped 1 s in (the server not up yet, or up with uvicorn's handling: 0 either way)
    env = {**os.environ, "HERALD_FAKE_BACKEND": "true", "HERALD_PORT": str(free_port())}
    proc = subprocess.Popen([sys.executable, "-m", "herald_service", "serve"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "Traceback" not in output, output


SIGNAL_AT_IMPORT = """
import os, signal, sys
moment, signame = sys.argv[1], sys.argv[2]
class SignalAtImport:  # sends the signal once, as the import of `moment` begins
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == moment:
            sys.meta_path.remove(SignalAtImport)
            print("sent", flush=True)
            os.kill(os.getpid(), getattr(signal, signame))
        return None
assert moment not in sys.modules, moment
sys.meta_path.insert(0, SignalAtImport)
sys.argv = ["herald", "serve", "--fake-backend", *sys.argv[3:]]
import herald_service.__main__ as entry
entry.main()
"""
"""``herald serve`` through its entry, stopped by a signal (argv[2]) sent as the import of a module (argv[1]) begins:
a moment of the start defined by what it is doing, where a signal at a time (Popen, sleep, kill) lands somewhere
different on each machine."""


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_while_serve_starts_ends_it_with_one_line_and_no_traceback(signame):
    import signal

    # Ctrl+C early in a start printed a traceback: KeyboardInterrupt (SystemExit for SIGTERM) raised in whatever was
    # importing. pydantic-core's Rust init imports datetime and turned it into pyo3_runtime.PanicException (status 1).
    # The moments: the first module the entry imports, datetime (first imported by pydantic-core's init), torch and
    # uvicorn (serve's own imports, after the command line is read).
    expected = (130, "herald serve: SIGINT (Ctrl+C) before the server started; nothing was loading, exiting") \
        if signame == "SIGINT" else (0, "herald serve: SIGTERM before the server started; nothing was loading, exiting")
    for moment in ("herald_service.cli", "datetime", "torch", "uvicorn"):
        # SIGINT at its default disposition, as a terminal's Ctrl+C finds it (interrupted_serve says why)
        out = subprocess.run([sys.executable, "-c", SIGNAL_AT_IMPORT, moment, signame, "--port", str(free_port())],
                             capture_output=True, text=True, timeout=120,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert out.stdout == "sent\n", (moment, out.stdout, out.stderr)  # the signal came at that moment
        assert (out.returncode, out.stderr.strip()) == expected, (moment, out.returncode, out.stderr)


@pytest.mark.parametrize("command", ["fit", "classify"])
def test_ctrl_c_while_torch_imports_ends_a_command_with_one_line_and_status_130(tmp_path, command):
    import signal

    from tiny_llama import build_tiny_llama

    # re-tester: the entry gave SIGINT back to KeyboardInterrupt once the command line had imported, but fit, eval,
    # recipes and the local commands import torch after that, and a KeyboardInterrupt inside torch's import ended fit
    # killed by SIGINT (-2, not 130) 6 times in 40, after "no probe was written; the states extracted so far are
    # cached" when nothing had started. They hand over once torch has imported.
    folder = build_tiny_llama(tmp_path / "tiny")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"prompt {i}", "label": "harmful" if i % 2 else "benign",
                                        "source": "S"}) + "\n" for i in range(40)))
    args = {"fit": ["--data", str(data), "--out", str(tmp_path / "probe")], "classify": ["hello"]}[command]
    script = SIGNAL_AT_IMPORT.replace('["herald", "serve", "--fake-backend", *sys.argv[3:]]', "sys.argv[3:]")
    out = subprocess.run([sys.executable, "-c", script, "torch", "SIGINT", "herald", command, "--backbone", str(folder),
                          "--cache-dir", str(tmp_path / "cache"), *args], capture_output=True, text=True, timeout=120,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert out.stdout == "sent\n", (out.stdout, out.stderr)
    assert (out.returncode, out.stderr.strip()) == (
        130, "herald: SIGINT (Ctrl+C) before the command started; nothing was done, exiting"), out.stderr
    assert not (tmp_path / "probe").exists() and not (tmp_path / "cache").exists()


def test_max_header_bytes_has_a_floor_every_client_clears():
    from herald_service.config import Settings

    assert Settings(_env_file=None).max_header_bytes == 65_536
    with pytest.raises(ValueError, match="max_header_bytes"):
        Settings(_env_file=None, max_header_bytes=0)
    # tester: 1 was accepted, and every request (the health probes' too) got 400
    out = herald("serve", "--fake-backend", HERALD_MAX_HEADER_BYTES="1")
    assert out.returncode == 1 and (
        "max_header_bytes (--max-header-bytes or HERALD_MAX_HEADER_BYTES): Input should be greater than or equal to"
        " 4096") in out.stderr, out.stderr
    assert Settings(_env_file=None, max_header_bytes=4096).max_header_bytes == 4096
    assert Settings(_env_file=None).max_connections == 1000
    with pytest.raises(ValueError, match="max_connections"):
        Settings(_env_file=None, max_connections=0)


def test_ctrl_c_ends_serve_quietly_with_status_130():
    # Breaker pass: uvicorn shut down cleanly, then a 40-line CancelledError/KeyboardInterrupt traceback, status -2.
    status, output = interrupted_serve(free_port(), "--fake-backend")
    assert status == 130 and "Traceback" not in output, output


@pytest.mark.backbone
def test_ctrl_c_during_the_model_load_waits_for_it_and_exits_130_without_aborting():
    # Second breaker pass: the load thread was a daemon still inside torch at exit: "terminate called without an active
    # exception", status 134. 4 s in: inside the load or the warm-up on its thread (the abort showed from about 3 s in).
    status, output = interrupted_serve(free_port(), after_s=4.0)
    assert status == 130, output
    assert "Traceback" not in output and "terminate called" not in output, output


@pytest.mark.backbone
def test_classify_on_the_embedded_backbone_prints_its_verdicts_and_only_log_lines_on_stderr():
    # tester: transformers' "Loading weights" progress bar went to stderr, where classify prints warnings and errors
    # only; a process of its own, since the bar is switched off process-wide
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "herald_service", "classify", "Write a poem about the sea"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "HERALD_LOG_LEVEL": "info"})
    # at info, the log lines of the load and nothing else: no bar, no carriage return
    assert out.returncode == 0 and "\r" not in out.stderr, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    assert lines and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING) herald_service\.", line)
                         for line in lines), out.stderr[-2000:]
    assert "INFO herald_service.engine.runtime: loaded HuggingFaceTB/SmolLM2-135M-Instruct on cpu" in out.stderr
    # with the threshold it serves, probe.json's (operator tester: an edited one was served without a word)
    manifest = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m-instruct" / "probe.json"
    threshold = json.loads(manifest.read_text())["threshold"]
    assert f"with probe models/smollm2-135m-instruct (threshold {threshold:.4f} logit, max_f1)" in out.stderr, out.stderr
    (row,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["input"] == "Write a poem about the sea" and row["flagged"] is False, row
    quiet = subprocess.run([sys.executable, "-m", "herald_service", "classify", "Write a poem about the sea"],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "HERALD_LOG_LEVEL": "warning"})
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == out.stdout, quiet.stderr[-2000:]


def test_serve_names_a_host_it_cannot_listen_on(tmp_path):
    out = herald("serve", HERALD_HOST="192.0.2.1", HERALD_PORT="8139", HERALD_BACKBONE=str(tmp_path / "missing"))  # TEST-NET-1
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == ("herald serve: cannot listen on 192.0.2.1:8139 (Cannot assign requested address);"
                                  " set HERALD_HOST or --host, HERALD_PORT or --port")


def test_plot_refuses_an_out_it_cannot_write_before_the_backbone_loads(tmp_path):
    (tmp_path / "charts").mkdir()
    (tmp_path / "notes.txt").write_text("")
    give = "give an image file path such as --out trajectory.png"
    refused = {
        # a folder was written next to itself as charts.png; charts.png/ failed in savefig after the backbone load
        tmp_path / "charts": f"{tmp_path / 'charts'} is a folder; {give}",
        # a missing folder was created silently, so a typo in it went unnoticed
        tmp_path / "chrats" / "t.png": f"{tmp_path / 'chrats' / 't.png'}: folder {tmp_path / 'chrats'} does not exist;"
                                       " create it or choose another path",
        tmp_path / "notes.txt" / "t.png": f"{tmp_path / 'notes.txt' / 't.png'}: {tmp_path / 'notes.txt'} is a file; {give}",
    }
    for out_path, error in refused.items():
        # the backbone path does not exist either: --out is checked first, so its error is the one shown
        out = herald("plot", "bake bread", "--out", str(out_path), HERALD_BACKBONE=str(tmp_path / "missing"))
        assert out.returncode == 1, (out_path, out.stderr)
        assert out.stderr.strip() == f"herald plot: --out {error}", out.stderr
    assert not (tmp_path / "chrats").exists() and not (tmp_path / "charts.png").exists()


def test_plot_legend_stays_on_the_figure_with_many_long_prompts():
    import numpy as np

    from herald_service.analysis.trajectory_plot import LABEL_CHARS, LEGEND_ENTRIES, trajectory_figure

    prompts = [f"prompt {i}: please explain,\nstep by step, how bread is baked at home" for i in range(40)]
    fig = trajectory_figure(np.random.default_rng(0).normal(size=(40, 8)), prompts, [i % 3 == 0 for i in range(40)])
    fig.draw_without_rendering()
    legend = fig.axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) == LEGEND_ENTRIES == 12 and texts[-1] == "+29 more prompts"
    assert texts[0] == "[flagged] prompt 0: please explain, step by step, how\u2026"  # one line, cut with an ellipsis
    assert all(len(t.split("] ", 1)[1]) <= LABEL_CHARS for t in texts[:-1])
    assert len(fig.axes[0].get_lines()) == 40 + 1  # every prompt is drawn (and the boundary at 0)
    box, page, axes = legend.get_window_extent(), fig.bbox, fig.axes[0].get_window_extent()
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    small = trajectory_figure(np.zeros((1, 4)), ["hi"], [False])  # 4 layers: ticks read 1.5, 2.5 (researcher pass)
    small.draw_without_rendering()
    ticks = [t for t in small.axes[0].get_xticks() if 1 <= t <= 4]
    assert ticks == [1, 2, 3, 4], ticks
    assert box.x0 >= axes.x1  # beside the axes, covering no line


def test_steer_eval_names_a_number_python_cannot_hold_by_file_line_and_key(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "hi"}\n{"prompt": "hi", "n": ' + "9" * 5000 + "}\n")
    out = herald("steer-eval", str(rows))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip() == (f"herald steer-eval: {rows} line 2: the number at 'n' is too large to represent: an"
                                  " integer of 5000 digits; integers must lie within -2^63..2^63-1")


def test_plot_refuses_an_out_that_names_no_file():
    out = herald("plot", "--out", ".", "hello", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == "herald plot: --out '.' names no file; give a path such as --out trajectory.png"


@pytest.mark.parametrize(("args", "named", "give"), [
    (("fit", "--out", "{}"), "out (--out)",
     "a folder for probe.json and probe.safetensors, or leave --out out for models/<backbone-slug>/"),
    (("eval", "--out", "{}"), "out (--out)", "the JSON file to write"),
    (("eval", "--scores-out", "{}"), "scores_out (--scores-out)", "the JSON-lines file to write, or leave --scores-out out"),
    (("recipes", "--out", "{}"), "out (--out)", "the JSON file to write"),
    (("report", "--out", "{}"), "out (--out)", "the Markdown file to write, such as --out EVALUATION.md"),
    (("report", "--plots", "{}"), "plots (--plots)",
     "a folder for the PNG plots, or leave --plots out for the folder eval beside --out"),
    (("plot", "--out", "{}", "hello"), "out (--out)", "an image file path such as --out trajectory.png"),
    (("data", "build", "--out", "{}"), "out (--out)", "a folder for the corpus"),
])
def test_an_empty_or_blank_output_path_is_refused_naming_the_option_before_anything_is_written(tmp_path, args, named,
                                                                                               give):
    # tester finding: herald fit --out '' (an unset shell variable) wrote probe.json and probe.safetensors into the
    # current directory and exited 0; herald plot --out ' ' wrote " .png"
    for value, what in (("", "empty (it would be the current directory)"),
                        ("  ", "blank (whitespace alone, a name no one would find)")):
        out = herald(*[value if word == "{}" else word for word in args], cwd=tmp_path, HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert out.stderr.strip() == f"herald: invalid settings\n  {named}: is {what}; give {give}"
        assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("args", "what"), [
    (("--probe", ""), "empty (it would be the default probe, as an empty HERALD_PROBE is)"),
    (("--probe=",), "empty (it would be the default probe, as an empty HERALD_PROBE is)"),
    (("--probe", " ", "--overwrite"), "blank (whitespace alone, a name no one would find)"),
])
def test_herald_reference_refuses_a_probe_given_empty_on_the_command_line(tmp_path, args, what):
    # an empty --probe is HERALD_PROBE's "unset": herald reference --probe "$UNSET" --overwrite would have recorded into
    # the default probe, the one herald serve loads
    out = herald("reference", *args, cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (f"herald reference: --probe is {what}; give the probe folder to record into, or"
                                  " leave --probe out for the default probe (models/<backbone-slug>/)")


def unloadable_backbone(tmp_path):
    """A model folder that passes the path checks made before the data is read (its config.json) and fails to load
    (no tokenizer): a check that comes before the load shows as its own error, one that passes as this one. Reaching
    the load hashes its config.json into ``<cache>/file-sha256/`` (:func:`nothing_cached`)."""
    folder = tmp_path / "unloadable-backbone"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


UNLOADABLE = "no tokenizer files"
"""What loading :func:`unloadable_backbone` says."""


def nothing_cached(cache) -> bool:
    """No backbone converted and no state extracted under ``cache``."""
    return not (cache / "backbones").exists() and not (cache / "states").exists()


def labeled_rows(path, n: int = 10) -> None:
    """``n`` harmful and ``n`` benign rows, enough for every check before the backbone loads."""
    path.write_text("".join(f'{{"prompt": "h{i}", "label": "harmful", "source": "h"}}\n'
                            f'{{"prompt": "b{i}", "label": "benign", "source": "b"}}\n' for i in range(n)))


def fit_and_eval(tmp_path, *args: str):
    """``herald fit ARGS`` and ``herald eval ARGS``, each writing under ``tmp_path`` (never the repo's committed
    probe or results) and caching in ``tmp_path / "cache"``: ``(command, completed process)`` pairs, fit first."""
    for command, written in (("fit", tmp_path / "probe"), ("eval", tmp_path / "results.json")):
        yield command, herald(command, *args, "--out", str(written), "--cache-dir", str(tmp_path / "cache"))


def test_fit_and_eval_refuse_a_prompt_given_with_both_labels_naming_its_lines(tmp_path):
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    other = tmp_path / "other.jsonl"
    other.write_text('{"prompt": "b9", "label": "harmful", "source": "x"}\n\n{"prompt": "h0", "label": "benign", "source": "x"}\n')
    for command, out in fit_and_eval(tmp_path, "--data", f"{data},{other}"):
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: the prompt 'h0' has both labels: {data} line 1 (harmful), {other} line 3 (benign); 2 prompts of"
            " the data have both labels: give each prompt one label"), out.stderr
    assert not (tmp_path / "cache").exists()


def test_fit_refuses_a_folder_that_holds_a_probe_unless_overwrite_before_the_backbone_loads(tmp_path):
    # `herald fit` without --out replaced the committed models/smollm2-135m-instruct that `herald serve` loads
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    shipped = tmp_path / "models" / "smollm2-135m-instruct"
    shipped.mkdir(parents=True)
    (shipped / "probe.json").write_text("{}")
    out = herald("fit", "--data", str(data), "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.strip() == (
        "herald: models/smollm2-135m-instruct (the default --out for this backbone) already holds a probe (probe.json),"
        " the probe `herald serve` loads by default; pass --out DIR to write the new one elsewhere, or --overwrite to"
        " replace it"), out.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "probe.safetensors").write_bytes(b"")
    out = herald("fit", "--data", str(data), "--out", str(mine), "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --out {mine} already holds a probe (probe.safetensors); pass --out DIR to write the new one elsewhere,"
        " or --overwrite to replace it"), out.stderr
    missing = tmp_path / "missing-backbone"  # named first: before the data is read (it took 32 s on the corpus)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('["not", "a", "row"]\n')
    out = herald("fit", "--data", str(bad), "--out", str(mine), "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.strip().startswith(f"herald: --out {mine} already holds a probe"), (
        out.stderr)  # before the data is read too (33 s into a run on the corpus: tester finding)
    for args in (("--out", str(mine)), ("--out", str(mine), "--overwrite"), ("--data", str(bad))):
        out = herald("fit", "--data", str(data), "--backbone", str(missing), *args, cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: backbone path {missing} does not exist (--backbone or HERALD_BACKBONE)"), (args, out.stderr)
    assert not (tmp_path / "cache").exists()  # nothing converted, nothing extracted
    assert (shipped / "probe.json").read_text() == "{}"


def test_the_default_data_is_named_as_relative_to_the_current_directory(tmp_path):
    # it said only "herald: ../shared/data does not exist"
    for command in ("fit", "eval", "recipes"):
        out = herald(command, "--max-per-source", "1", cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --data defaults to ../shared/data, relative to the current directory ({tmp_path}), and it does not"
            " exist there; run from the repository root (the corpus sits beside it), point --data FILE.jsonl,... at"
            " other data, or rebuild the corpus with herald data build --out data and pass --data data"), (command, out.stderr)


def test_a_jailbreak_templates_path_given_must_exist(tmp_path):
    # it dropped the jailbreak-wrapped set without a word (a missing default: tests/test_eval_jailbreak_set.py)
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    for command in ("eval", "recipes"):
        for path, what in ((tmp_path / "nope.jsonl", "does not exist"), (tmp_path, "is a folder")):
            out = herald(command, "--data", str(data), "--jailbreak-templates", str(path), "--cache-dir", str(tmp_path / "cache"),
                         "--out", str(tmp_path / "results.json"))  # never the repo's docs/eval/
            assert out.returncode == 1 and out.stderr.strip() == (
                f"herald: --jailbreak-templates {path} {what}; give the PyRIT templates file (pyrit_jailbreak_templates"
                ".jsonl of ../shared/data), or null to leave the jailbreak-wrapped set out"), (command, out.stderr)
    assert not (tmp_path / "cache").exists()


def test_fit_and_eval_refuse_a_source_name_that_splits_a_log_line_or_a_table_row_before_the_backbone_loads(tmp_path):
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    with data.open("a") as rows:
        rows.write('{"prompt": "z", "label": "benign", "source": "b\\r\\nc"}\n')
    for command, out in fit_and_eval(tmp_path, "--data", str(data)):
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: {data} line 21: source 'b\\r\\nc' holds a line break (U+000D); a source is named in log lines and in"
            " herald report's table rows, so it must be one line of printable text"), out.stderr
    assert not (tmp_path / "cache").exists()


def test_fit_and_eval_name_a_dangling_link_in_a_data_folder_by_option_and_path(tmp_path):
    # tester finding: "herald: [Errno 2] No such file or directory: 'link_dir/dangling.jsonl'", no option named
    folder = tmp_path / "link_dir"
    folder.mkdir()
    labeled_rows(folder / "rows.jsonl")
    (folder / "dangling.jsonl").symlink_to(tmp_path / "gone.jsonl")
    for command, out in fit_and_eval(tmp_path, "--data", str(folder)):
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: {folder / 'dangling.jsonl'} is a link to {tmp_path / 'gone.jsonl'}, which does not exist (in the"
            f" --data folder {folder}, whose *.jsonl files are all read as labeled rows); remove it from the folder, or"
            " point it at a labeled JSONL file"), (command, out.stderr)
    assert not (tmp_path / "cache").exists()


def test_fit_takes_jailbreak_templates_null_as_eval_and_recipes_do(tmp_path):
    # fit refused null ("Input is not a valid path for <class 'pathlib.Path'>"), which eval and recipes take for none
    from unittest import mock

    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    given = []

    def fit(options):
        given.append(options)
        return {"out": str(options.out), "evaluation": {"pooled": {}, "pooled_95ci": {}, "also_in_training": 0}}

    with mock.patch("herald_service.training.fit.run_fit", fit):
        out = herald("fit", "--data", str(data), "--jailbreak-templates", "null", "--out", str(tmp_path / "probe"))
    assert out.returncode == 0, out.stderr
    assert [(o.jailbreak_templates, o.jailbreak_train_per_class) for o in given] == [(None, 0)]
    # a templates file without wrapped training rows was read by nothing, silently (tester finding)
    templates = tmp_path / "templates.jsonl"
    templates.write_text('{"template": "Pretend: {{ prompt }}"}\n')
    out = herald("fit", "--data", str(data), "--jailbreak-templates", str(templates), "--out", str(tmp_path / "probe"),
                 "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --jailbreak-templates {templates} is read only for --jailbreak-train-per-class above 0 (fit adds no"
        " jailbreak-wrapped rows without it): add --jailbreak-train-per-class N or leave --jailbreak-templates out"), out.stderr
    assert len(given) == 1
    out = herald("fit", "--data", str(data), "--jailbreak-templates", "null", "--jailbreak-train-per-class", "80",
                 "--out", str(tmp_path / "probe"), "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        "herald: --jailbreak-templates is null (none); --jailbreak-train-per-class 80 needs the PyRIT jailbreak templates"
        " (pyrit_jailbreak_templates.jsonl of ../shared/data)"), out.stderr
    assert not (tmp_path / "cache").exists()


def test_data_help_shows_the_three_ways_to_give_several_files():
    for command in ("fit", "eval", "recipes"):
        out = herald(command, "--help")
        assert out.returncode == 0, out.stderr
        text = " ".join(out.stdout.split())  # argparse wraps the help text
        assert ("--data list[Path] Labeled JSONL files or folders (a folder: its *.jsonl but the jailbreak templates),"
                " as --data a.jsonl,b.jsonl or --data a.jsonl --data b.jsonl or a JSON list '[\"a.jsonl\",\"b.jsonl\"]';"
                " the default is relative to the current directory.") in text, (command, text)


def test_an_empty_data_entry_is_refused_not_read_as_the_current_directory(tmp_path):
    # A re-test: `--data adv.jsonl,` became Path(""), the current directory, and every *.jsonl there was trained on
    out = herald("fit", "--data", "adv.jsonl,", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "entry 2 of 2 is empty (a comma too many?)" in out.stderr


def test_a_max_per_source_that_leaves_too_few_rows_is_refused_before_the_backbone_loads(tmp_path):
    # `herald fit --max-per-source 3` failed only after the backbone load and the state extraction, with "no harmful
    # row in the calibration part"
    data = tmp_path / "data.jsonl"
    labeled_rows(data)  # 10 of each label, one source each
    missing = unloadable_backbone(tmp_path)
    for command, out in fit_and_eval(tmp_path, "--data", str(data), "--max-per-source", "3", "--backbone", str(missing)):
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --max-per-source 3 leaves 3 benign rows of the data ({data}: at most 3 per source and label); a"
            " probe needs at least 8 of each label: its test, calibration and fit parts each need both; raise"
            " --max-per-source or give null for all rows"), (command, out.stderr)
    sources = tmp_path / "sources.jsonl"  # 4 sources of each label: 12 rows each after the cap, but groups of 3
    sources.write_text("".join(f'{{"prompt": "{label}{s}-{i}", "label": "{label}", "source": "{label}{s}"}}\n'
                               for label in ("harmful", "benign") for s in range(4) for i in range(5)))
    for command, out in fit_and_eval(tmp_path, "--data", str(sources), "--max-per-source", "3", "--backbone", str(missing)):
        assert out.returncode == 1 and out.stderr.strip() == (
            "herald: --max-per-source 3 (at most 3 rows per source and label) and --test-fraction 0.2 leave no benign"
            " row in the calibration part: the test part takes a share of each (source, label) group and calibration"
            " a quarter of the rest, both rounded, so a group of 2 training rows gives calibration none; raise"
            " --max-per-source or give more benign rows per source"), (command, out.stderr)
    for command, out in fit_and_eval(tmp_path, "--data", str(sources), "--max-per-source", "4", "--backbone", str(missing)):
        assert out.returncode == 1 and UNLOADABLE in out.stderr, (command, out.stderr)
    small = tmp_path / "small.jsonl"  # groups of 3 under the default cap of 150: the cap cut nothing, so is not blamed
    small.write_text("".join(f'{{"prompt": "{label}{s}-{i}", "label": "{label}", "source": "{label}{s}"}}\n'
                             for label in ("harmful", "benign") for s in range(4) for i in range(3)))
    for command, out in fit_and_eval(tmp_path, "--data", str(small), "--backbone", str(missing)):
        assert out.returncode == 1 and out.stderr.strip() == (
            "herald: --test-fraction 0.2 leaves no benign row in the calibration part: the test part takes a share of"
            " each (source, label) group and calibration a quarter of the rest, both rounded, so a group of 2 training"
            " rows gives calibration none; give more benign rows per source"), (command, out.stderr)
    assert nothing_cached(tmp_path / "cache")


def test_eval_and_recipes_refuse_an_existing_out_unless_overwrite_before_the_backbone_loads(tmp_path):
    # without --out they silently replaced the committed docs/eval/results.json and docs/eval/recipes.json
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    (tmp_path / "docs" / "eval").mkdir(parents=True)
    missing = unloadable_backbone(tmp_path)
    for command, default in (("eval", "docs/eval/results.json"), ("recipes", "docs/eval/recipes.json")):
        (tmp_path / default).write_text("{}")
        base = (command, "--data", str(data), "--backbone", str(missing), "--jailbreak-templates", "null",
                "--cache-dir", str(tmp_path / "cache"))
        out = herald(*base, cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --out {default} already exists; pass --out FILE to write elsewhere, or --overwrite to replace"
            " it"), (command, out.stderr)
        lost = (command, "--data", str(tmp_path / "lost.jsonl"), *base[3:])  # the inputs are named first
        out = herald(*lost, cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --data {tmp_path / 'lost.jsonl'} does not exist"), (command, out.stderr)
        mine = tmp_path / f"{command}.json"
        mine.write_text("{}")
        out = herald(*base, "--out", str(mine), cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --out {mine} already exists; pass --out FILE to write elsewhere, or --overwrite to replace"
            " it"), (command, out.stderr)
        out = herald(*base, "--out", str(tmp_path / "docs"), cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --out {tmp_path / 'docs'} is a folder; give the JSON file to write"), (command, out.stderr)
        for more in (("--out", str(mine), "--overwrite"), ("--out", str(tmp_path / "new.json"))):
            out = herald(*base, *more, cwd=tmp_path)
            assert out.returncode == 1 and UNLOADABLE in out.stderr, (command, out.stderr)
        assert (tmp_path / default).read_text() == "{}" and mine.read_text() == "{}"
    assert nothing_cached(tmp_path / "cache")


def test_eval_refuses_a_scores_out_it_could_not_write_or_would_overwrite_before_the_backbone_loads(tmp_path):
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    base = ("eval", "--data", str(data), "--backbone", str(unloadable_backbone(tmp_path)), "--jailbreak-templates",
            "null", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "results.json"))
    kept = tmp_path / "scores.jsonl"
    kept.write_text("mine\n")
    for more, error in (
            (("--scores-out", str(kept)), f"--scores-out {kept} already exists; pass --scores-out FILE to write"
                                          " elsewhere, or --overwrite to replace it"),
            (("--scores-out", str(tmp_path / "results.json")), f"--scores-out {tmp_path / 'results.json'} is the --out"
                                                               " file; give another path"),
            (("--scores-out", str(tmp_path / "no" / "s.jsonl")), f"--scores-out {tmp_path / 'no' / 's.jsonl'}: folder"
                                                                 f" {tmp_path / 'no'} does not exist; create it or"
                                                                 " choose another path"),
            (("--scores-out", str(tmp_path)), f"--scores-out {tmp_path} is a folder; give the JSON-lines file to write")):
        out = herald(*base, *more)
        assert out.returncode == 1 and out.stderr.strip() == f"herald: {error}", (more, out.stderr)
    out = herald(*base, "--scores-out", str(kept), "--overwrite")  # allowed: on to the backbone, which fails
    assert out.returncode == 1 and UNLOADABLE in out.stderr
    assert kept.read_text() == "mine\n" and not (tmp_path / "results.json").exists()
    kept.chmod(0o444)  # named as --scores-out (it said --out)
    out = herald(*base, "--scores-out", str(kept), "--overwrite")
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --scores-out {kept} cannot be replaced (read-only: mode 0444); make it writable or choose another path")
    assert "--scores-out" in option_help("eval") and "flagged_by" in option_help("eval")["--scores-out"]


def test_eval_recipes_and_report_refuse_to_write_over_a_file_they_read(tmp_path):
    # `eval --data d.jsonl --out d.jsonl --overwrite` replaced the data with results; `report --results r.json --out
    # r.json` the results with Markdown; a --scores-out inside a --data folder broke the next run (researcher pass)
    folder = tmp_path / "data"
    folder.mkdir()
    data = folder / "train.jsonl"
    labeled_rows(data)
    extra = tmp_path / "extra.jsonl"
    labeled_rows(extra)
    probe = tmp_path / "probe"  # eval --probe models/x --out models/x/probe.json replaced the probe (re-tester)
    probe.mkdir()
    (probe / "probe.json").write_text("{}")
    (probe / "probe.safetensors").write_bytes(b"x")
    before = data.read_bytes(), extra.read_bytes()
    base = ("--backbone", str(unloadable_backbone(tmp_path)), "--jailbreak-templates", "null", "--cache-dir",
            str(tmp_path / "cache"), "--overwrite")
    for args, error in (
            (("eval", "--data", str(data), "--out", str(data)), f"--out {data} is the --data file this command reads"),
            (("eval", "--data", str(folder), "--test-data", str(extra), "--out", str(tmp_path / "r.json"), "--scores-out",
              str(extra)), f"--scores-out {extra} is the --test-data file this command reads"),
            (("eval", "--data", str(folder), "--out", str(tmp_path / "r.json"), "--scores-out", str(folder / "s.jsonl")),
             f"--scores-out {folder / 's.jsonl'} is inside the --data folder {folder}, whose .jsonl files are read as"
             f" labeled rows: a later run given --data {folder} would read it; write it elsewhere"),
            (("recipes", "--data", str(data), "--out", str(data)), f"--out {data} is the --data file this command reads"),
            (("eval", "--data", str(data), "--probe", str(probe), "--out", str(probe / "probe.json")),
             f"--out {probe / 'probe.json'} is the --probe file this command reads"),
            (("eval", "--data", str(data), "--probe", str(probe), "--out", str(tmp_path / "r.json"), "--scores-out",
              str(probe / "probe.safetensors")), f"--scores-out {probe / 'probe.safetensors'} is the --probe file this"
                                                 " command reads")):
        out = herald(*args, *base)
        assert out.returncode == 1 and out.stderr.strip() == f"herald: {error}" + (
            "; give another path" if "this command reads" in error else ""), (args, out.stderr)
    assert (data.read_bytes(), extra.read_bytes()) == before
    assert (probe / "probe.json").read_text() == "{}" and (probe / "probe.safetensors").read_bytes() == b"x"
    results = tmp_path / "results.json"
    results.write_text("{}")
    out = herald("report", "--results", str(results), "--out", str(results))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald report: --out {results} is the --results file this command reads; give another path")
    assert results.read_text() == "{}"


def test_eval_names_a_missing_test_data_file_by_its_option_before_the_backbone_loads(tmp_path):
    # it printed "herald: [Errno 2] No such file or directory: ..." after the backbone load and the extraction
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    for path, what in ((tmp_path / "mydata" / "nonexist.jsonl", "does not exist (--test-data)"),
                       (tmp_path, "is a folder (--test-data); give labeled JSONL files")):
        out = herald("eval", "--data", str(data), "--test-data", str(path), "--out", str(tmp_path / "results.json"),
                     "--cache-dir", str(tmp_path / "cache"))
        assert out.returncode == 1 and out.stderr.strip() == f"herald: {path} {what}", out.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "label": "HARMFUL", "source": "s"}\n')
    out = herald("eval", "--data", str(data), "--test-data", str(bad), "--out", str(tmp_path / "results.json"),
                 "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: {bad} line 1: label 'HARMFUL' is not one of ['benign', 'harmful']"), out.stderr
    assert not (tmp_path / "cache").exists()


def test_eval_names_a_missing_test_data_file_or_probe_before_it_refuses_an_existing_out(tmp_path):
    # tester finding: `herald eval --test-data /nonexistent --out <existing file>` (or --probe /nonexistent) answered
    # "--out ... already exists", as a missing --data once was
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    results = tmp_path / "results.json"
    results.write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "holder").mkdir()
    (tmp_path / "holder" / "probe.json").write_text("{}")
    (tmp_path / "odd" / "probe.json").mkdir(parents=True)  # read "probe.json is missing" (re-tester)
    missing = unloadable_backbone(tmp_path)
    for args, error in (
            (("--test-data", str(tmp_path / "nonexist.jsonl")), f"{tmp_path / 'nonexist.jsonl'} does not exist (--test-data)"),
            (("--probe", str(tmp_path / "odd")), f"no probe at {tmp_path / 'odd'}: {tmp_path / 'odd' / 'probe.json'} is not"
                                                 " a file (a probe's probe.json is its JSON manifest; --probe)"),
            (("--probe", str(tmp_path / "nope")), f"probe folder {tmp_path / 'nope'} does not exist (--probe)"),
            (("--probe", str(tmp_path / "empty")),
             f"no probe at {tmp_path / 'empty'}: probe.json is missing (--probe; fit one with `herald fit`)"),
            (("--probe", str(tmp_path / "holder" / "probe.json")),
             f"the probe (--probe) must be its folder, the one holding probe.json: use {tmp_path / 'holder'}"),
            (("--trimmed-views",), "--trimmed-views scores a saved probe's sets as herald serve does: give --probe too")):
        out = herald("eval", "--data", str(data), *args, "--out", str(results), "--backbone", str(missing),
                     "--jailbreak-templates", "null", "--cache-dir", str(tmp_path / "cache"))
        assert out.returncode == 1 and out.stderr.strip() == f"herald: {error}", (args, out.stderr)
    assert results.read_text() == "{}" and nothing_cached(tmp_path / "cache")


def test_two_data_or_test_data_files_with_one_name_are_refused_before_anything_loads(tmp_path):
    # tester findings: --test-data ta/t.jsonl --test-data tb/t.jsonl gave one set, the other lost with its trained-on
    # warning (results are keyed by file name); --data likewise, as probe.json records its files by name
    ta, tb = tmp_path / "ta", tmp_path / "tb"
    for folder in (ta, tb):
        folder.mkdir()
        labeled_rows(folder / "t.jsonl")
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    results = tmp_path / "existing.json"
    results.write_text("{}")  # named after the inputs
    missing = unloadable_backbone(tmp_path)
    out = herald("eval", "--data", str(data), "--test-data", str(ta / "t.jsonl"), "--test-data", str(tb / "t.jsonl"),
                 "--out", str(results), "--backbone", str(missing), "--jailbreak-templates", "null",
                 "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --test-data {ta / 't.jsonl'} and {tb / 't.jsonl'} share the file name t.jsonl, and Herald keys data"
        " files by name (probe.json, the results' sets); rename one of them"), out.stderr
    for command, out in fit_and_eval(tmp_path, "--data", f"{ta / 't.jsonl'},{tb}", "--backbone", str(missing)):
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: --data {ta / 't.jsonl'} and {tb / 't.jsonl'} share the file name t.jsonl, and Herald keys data"
            " files by name (probe.json, the results' sets); rename one of them"), (command, out.stderr)
    # the same file twice is read once, as --data's; a --test-data file named as a --data file is its own set
    for command, out in fit_and_eval(tmp_path, "--data", f"{ta / 't.jsonl'},{ta / '..' / 'ta' / 't.jsonl'}",
                                     "--backbone", str(missing)):
        assert out.returncode == 1 and UNLOADABLE in out.stderr, (command, out.stderr)
    out = herald("eval", "--data", str(ta / "t.jsonl"), "--test-data", str(tb / "t.jsonl"), "--test-data",
                 str(tb / ".." / "tb" / "t.jsonl"), "--out", str(tmp_path / "new.json"), "--backbone", str(missing),
                 "--jailbreak-templates", "null", "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and UNLOADABLE in out.stderr, out.stderr
    wrapped = tmp_path / "jailbreak_wrapped"
    labeled_rows(wrapped)
    out = herald("eval", "--data", str(data), "--test-data", str(wrapped), "--out", str(results), "--backbone",
                 str(missing), "--jailbreak-templates", "null", "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald: --test-data {wrapped} is named jailbreak_wrapped, the results' name of the jailbreak-wrapped set;"
        " rename it"), out.stderr
    assert results.read_text() == "{}"


def test_a_data_file_that_is_a_pipe_or_a_device_is_refused_before_anything_loads(tmp_path):
    # `cat mine.jsonl | herald fit --data /dev/stdin` trained on every row and recorded the drained pipe in probe.json:
    # {"file": "stdin", "sha256": <sha256 of nothing>, "rows": 0} (tester finding)
    rows = tmp_path / "rows.jsonl"
    labeled_rows(rows)
    for args in (("fit", "--data", "/dev/null", "--out", str(tmp_path / "probe")),
                 ("eval", "--data", "/dev/null", "--out", str(tmp_path / "results.json")),
                 ("eval", "--data", str(rows), "--test-data", "/dev/null", "--out", str(tmp_path / "results.json"))):
        out = herald(*args, "--cache-dir", str(tmp_path / "cache"))
        option = "--test-data" if "--test-data" in args else "--data"
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: {option} /dev/null is a device, not a regular file: Herald reads a data file more than once (its"
            " rows, then the sha256 it records or checks), and a stream is empty the second time; save it to a file"
            " first and give that"), (args, out.stderr)
    piped = subprocess.run([sys.executable, "-m", "herald_service", "fit", "--data", "/dev/stdin", "--out",
                            str(tmp_path / "probe"), "--cache-dir", str(tmp_path / "cache")],
                           input=rows.read_text(), capture_output=True, text=True, timeout=120)
    assert piped.returncode == 1 and piped.stderr.strip() == (
        "herald: --data /dev/stdin is a pipe, not a regular file: Herald reads a data file more than once (its rows, then"
        " the sha256 it records or checks), and a stream is empty the second time; save it to a file first and give"
        " that"), piped.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "probe").exists()


def test_every_command_refuses_an_out_in_a_missing_folder_before_any_work(tmp_path):
    # fit, eval and recipes made any missing folders (a typo in --out went unnoticed), while plot refused them
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    typo = tmp_path / "reslts"
    base = ("--data", str(data), "--backbone", str(tmp_path / "missing-backbone"), "--cache-dir", str(tmp_path / "cache"))
    for command, out in (("fit", typo / "probe"), ("eval", typo / "results.json"), ("recipes", typo / "recipes.json")):
        templates = () if command == "fit" else ("--jailbreak-templates", "null")
        run = herald(command, *base, *templates, "--out", str(out))
        assert run.returncode == 1 and run.stderr.strip() == (
            f"herald: --out {out}: folder {typo} does not exist; create it or choose another path"), (command, run.stderr)
    # a folder no file can be made in: /proc is not writable even by root, whom the os.access check let through
    # (tester finding: refused only after the whole run)
    for command, out in (("fit", Path("/proc/probe")), ("eval", Path("/proc/results.json")), ("report", Path("/proc/E.md"))):
        templates = ("--jailbreak-templates", "null") if command == "eval" else ()
        args = ("--out", str(out)) if command == "report" else (*base, *templates, "--out", str(out))
        run = herald(command, *args)
        assert run.returncode == 1 and run.stderr.strip() == (
            f"herald{' report' if command == 'report' else ''}: --out {out}: cannot make a file in folder /proc (No such"
            " file or directory)"), (command, run.stderr)
    # the default --out of fit is models/<backbone> in the current directory
    run = herald("fit", "--data", str(data), "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert run.returncode == 1 and run.stderr.strip() == (
        "herald: --out (the default) models/smollm2-135m-instruct: folder models does not exist; create it or choose"
        " another path"), run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]  # no folder, no cache


def test_report_checks_its_results_and_paths_before_writing_anything(tmp_path):
    results = tmp_path / "results.json"
    (tmp_path / "notes.txt").write_text("")
    metric = {"value": 0.5, "lo": 0.4, "hi": 0.6}
    good = {"random_split": {"herald": {"pooled": dict.fromkeys(
        ("f1", "recall", "false_positive_rate", "auroc", "tpr_at_1pct_fpr"), metric)}}}
    cases = [  # was a KeyError traceback after the plots folder was made
        ("{}", (), f"--results {results} is not herald eval output: it needs a \"random_split\" object holding one object"
                   " with a \"pooled\" object per method; give the file herald eval --out wrote"),
        ('{"random_split": {"herald": 1}}', (), f"--results {results} is not herald eval output: it needs a"
         " \"random_split\" object holding one object with a \"pooled\" object per method; give the file herald eval"
         " --out wrote"),
        ('{"random_split": {"herald": {"pooled": {}}}}', (), f"--results {results} is not herald eval output:"
         " random_split.herald.pooled.f1 needs a numeric \"value\"; give the file herald eval --out wrote"),
        ("[1, 2", (), f"--results {results} is not JSON (line 1, column 6: Expecting ',' delimiter); give the file herald"
                      " eval --out wrote"),
        ('{"part": "loso"}\n{"part": "loso"}\n', (), f"--results {results} is not JSON (line 2, column 1: Extra data) (one"
         " JSON value per line: the --scores-out file of herald eval?); give the file herald eval --out wrote"),
        (json.dumps(good), ("--out", str(tmp_path)),
         f"--out {tmp_path} is a folder; give the Markdown file to write, such as --out EVALUATION.md"),
        (json.dumps(good), ("--out", str(tmp_path / "docs" / "E.md")),
         f"--out {tmp_path / 'docs' / 'E.md'}: folder {tmp_path / 'docs'} does not exist; create it or choose another path"),
        (json.dumps(good), ("--plots", str(tmp_path / "notes.txt")),
         f"--plots {tmp_path / 'notes.txt'} is a file; give a folder for the PNG plots"),
    ]
    for text, more, error in cases:
        results.write_text(text)
        run = herald("report", "--results", str(results), "--out", str(tmp_path / "E.md"), "--plots",
                     str(tmp_path / "plots"), *more)
        assert run.returncode == 1 and run.stderr.strip() == f"herald report: {error}", (text, more, run.stderr)
    run = herald("report", "--results", str(tmp_path / "absent.json"))
    assert run.returncode == 1 and run.stderr.strip() == (
        f"herald report: --results {tmp_path / 'absent.json'} does not exist; run herald eval --out"
        f" {tmp_path / 'absent.json'} first, or give its results file"), run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "results.json"]  # no plots folder, no Markdown
    # a part deeper than the check reads: one line, no traceback, nothing written (plots were, before the Markdown)
    for broken, error in ((dict(good, loso={"folds": 1, "pooled": {}}), "TypeError: 'int' object is not iterable"),
                          (dict(good, loso={"folds": {}}), "KeyError: 'pooled'"),
                          (dict(good, learning_curve={"sizes": []}), "KeyError: 'methods'")):
        results.write_text(json.dumps(broken))
        run = herald("report", "--results", str(results), "--out", str(tmp_path / "E.md"), "--plots", str(tmp_path / "plots"))
        assert run.returncode == 1 and run.stderr.strip() == (
            f"herald report: --results {results} is not complete herald eval output ({error}, while building the report;"
            " nothing was written); give the file herald eval --out wrote"), run.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "results.json"]
    # a well-formed file beside the results that breaks its section: named beside --results as a possible cause
    results.write_text(json.dumps(good))
    (tmp_path / "recipes.json").write_text("{}")
    (tmp_path / "feature_sets").mkdir()
    (tmp_path / "feature_sets" / "seed0.json").write_text("{}")
    run = herald("report", "--results", str(results), "--out", str(tmp_path / "E.md"), "--plots", str(tmp_path / "plots"))
    assert run.returncode == 1 and run.stderr.strip() == (
        f"herald report: --results {results} or a file read beside it (recipes.json in {tmp_path}) is not complete"
        " herald output (KeyError: 'results', while building the report; nothing was written); give the file herald"
        " eval --out wrote, and move aside a file beside it that its study command did not write"), run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feature_sets", "notes.txt", "recipes.json", "results.json"]
    (tmp_path / "recipes.json").unlink()
    run = herald("report", "--results", str(results), "--out", str(tmp_path / "E.md"), "--plots", str(tmp_path / "plots"))
    assert run.returncode == 1 and run.stderr.strip().startswith(
        f"herald report: --results {results} or a file read beside it (feature_sets/ in {tmp_path}) is not complete"
        " herald output ("), run.stderr
    shutil.rmtree(tmp_path / "feature_sets")
    results.write_text("[" * 100_000)  # was a RecursionError traceback
    run = herald("report", "--results", str(results), "--out", str(tmp_path / "E.md"))
    assert run.returncode == 1 and run.stderr.strip() == (
        f"herald report: --results {results} is JSON nested more deeply than herald eval writes; give the file herald"
        " eval wrote"), run.stderr


def test_a_command_line_argparse_refuses_is_one_line_naming_the_command():
    # fit --bogus printed herald's top-level usage; a bare herald listed steer_eval, a name nobody can type
    for args, line in (((), "herald: give a command: serve, classify, fit, reference, plot, steer-eval, eval, recipes, report, data"
                            " (see herald --help)"),
                       (("fit", "--bogus"), "herald fit: unknown option --bogus (see herald fit --help)"),
                       (("eval", "--bogus", "x"), "herald eval: unknown option --bogus and unexpected arguments: x (see"
                                                  " herald eval --help)"),
                       # a key typed to a command that takes none, or once too often, is never echoed (re-tester)
                       (("serve", "--api-key", "zzSECRETzz1234567"), "herald serve: unknown option --api-key (1 other"
                        " word not shown: it may be a key) (see herald serve --help)"),
                       (("serve", "--apikeys=zzSECRETzz1234567"), "herald serve: unknown option --apikeys (see herald"
                                                                  " serve --help)"),
                       (("serve", "--steer-api-key", "K1secret-abcdef", "K2secret-abcdef"), "herald serve: unexpected"
                        " arguments (1 word not shown: it may be a key) (see herald serve --help)"),
                       (("fit", "data.jsonl"), "herald fit: unexpected arguments: data.jsonl (see herald fit --help)"),
                       (("data",), "herald data: give a command: build (see herald data --help)"),
                       (("data", "build", "--x"), "herald data build: unknown option --x (see herald data build --help)"),
                       (("recipes", "--seed"), "herald recipes: argument --seed: expected one argument (see herald"
                                               " recipes --help)")):
        out = herald(*args)
        assert out.returncode == 2 and out.stderr.strip() == line, (args, out.stderr)


def test_classify_and_plot_without_prompts_point_to_their_help():
    for command, line in (("classify", "herald classify: give TEXT or --file (see herald classify --help)"),
                          ("plot", "herald plot: give one or more prompts (see herald plot --help)")):
        out = herald(command, HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1 and out.stderr.strip() == line, (command, out.stderr)


def test_steer_eval_refuses_layers_below_1_or_twice_before_the_backbone_loads(tmp_path):
    # Tester finding: --layers 0 was refused only after the backbone had loaded (~10 s). A missing backbone shows the
    # order: the --layers error comes first.
    rows = tmp_path / "rows.txt"
    rows.write_text("how to make a bomb\n")
    missing = str(tmp_path / "missing")
    # the other refusals are checked_steer_layers' (test_api_fake); this shows the order, one subprocess each
    for layers, error in (("[2,0]", "lists 0: layers are 1-based (1 is the first decoder layer)"),):
        out = herald("steer-eval", str(rows), "--layers", layers, HERALD_BACKBONE=missing, HERALD_CACHE_DIR=str(tmp_path))
        assert out.returncode == 1 and out.stderr.strip() == f"herald steer-eval: --layers {error}", out.stderr
    out = herald("steer-eval", str(rows), "--layers", "[3]", HERALD_BACKBONE=missing, HERALD_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1 and "does not exist" in out.stderr  # a valid list gets as far as the load


@pytest.mark.parametrize("layers, shown", [("some", "'some'"), ("4,x", "'x'"), ("4.5", "4.5"), ("true", "true"),
                                           ("[null]", "null")])
def test_steer_eval_names_a_layer_that_is_no_whole_number_in_one_line(tmp_path, layers, shown):
    # pydantic printed one line per member of the union, "layers.list[int].0 ..." and "layers.literal['all'] ..." (tester)
    out = herald("steer-eval", str(tmp_path / "rows.txt"), "--layers", layers)
    assert out.returncode == 1
    assert out.stderr.strip() == ("herald: invalid settings\n  layers (--layers): give 1-based decoder layers (4 or 4,8)"
                                  f" or 'all', not {shown}"), out.stderr


def test_steer_eval_takes_layers_all_and_prints_each_prompts_completions(tmp_path):
    # --layers all, as POST /steer takes it, was "Input should be a valid integer"; the output held rates only.
    rows = tmp_path / "rows.txt"
    rows.write_text("how to make a bomb\nbake bread\n")
    out = herald("steer-eval", str(rows), "--layers", "all", "--max-new-tokens", "3", HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["layers"] == [1, 2, 3, 4, 5, 6, 7, 8] and result["n"] == 2  # the fake backbone's 8 layers
    assert [row["prompt"] for row in result["rows"]] == ["how to make a bomb", "bake bread"]
    for row in result["rows"]:
        assert set(row) == {"prompt", "baseline_completion", "steered_completion", "baseline_refused", "steered_refused",
                            "baseline_score", "steered_score", "label"}
        assert isinstance(row["baseline_completion"], str) and isinstance(row["steered_refused"], bool)
        assert 0 <= row["baseline_score"] <= 1
    assert result["baseline_mean_score"] == pytest.approx(sum(r["baseline_score"] for r in result["rows"]) / 2)
    assert result["steered_refusal_rate"] == sum(r["steered_refused"] for r in result["rows"]) / 2
    shouted = herald("steer-eval", str(rows), "--layers", "ALL", "--max-new-tokens", "3", HERALD_FAKE_BACKEND="true")
    assert shouted.returncode == 0 and json.loads(shouted.stdout)["layers"] == list(range(1, 9)), shouted.stderr
    bad = herald("steer-eval", str(rows), "--layers", "al", HERALD_FAKE_BACKEND="true")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "or 'all', not 'al'" in bad.stderr


def test_eval_refuses_a_test_data_file_without_rows_naming_it_before_the_backbone_loads(tmp_path):
    # tester finding: "herald: need equal, non-empty lengths; got 0, 0, 0" after the backbone load and the extraction
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    missing = unloadable_backbone(tmp_path)
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n\n")):
        (tmp_path / name).write_text(text)
        out = herald("eval", "--data", str(data), "--test-data", str(tmp_path / name), "--out", str(tmp_path / "r.json"),
                     "--backbone", str(missing), "--jailbreak-templates", "null", "--cache-dir", str(tmp_path / "cache"))
        assert out.returncode == 1 and out.stderr.strip() == (
            f"herald: {tmp_path / name} holds no labeled row (--test-data): it is empty or only blank lines; give JSONL"
            ' rows {"prompt", "label", "source"}'), out.stderr
    assert nothing_cached(tmp_path / "cache")


def test_a_test_fraction_that_leaves_the_test_part_a_label_short_is_refused_before_the_backbone_loads(tmp_path):
    # tester finding: fit --test-fraction 0.01 failed after the extraction with numpy's "zero-size array to reduction
    # operation minimum which has no identity", eval with "need equal, non-empty lengths"
    data = tmp_path / "data.jsonl"
    labeled_rows(data, 20)  # one source of 20 rows per label: round(20 x 0.01) = 0 test rows
    missing = unloadable_backbone(tmp_path)
    for command, out in fit_and_eval(tmp_path, "--data", str(data), "--test-fraction", "0.01", "--backbone", str(missing)):
        assert out.returncode == 1 and out.stderr.strip() == (
            "herald: --test-fraction 0.01 leaves 0 harmful and 0 benign rows in the held-out test part, whose metrics"
            " need at least one of each: it takes that share of each (source, label) group of 2 or more rows, rounded,"
            " so the largest benign group (20 rows) gives it none; raise --test-fraction above 0.025"), (command, out.stderr)
    # round(20 x 0.026) = 1: on to the load
    for command, out in fit_and_eval(tmp_path, "--data", str(data), "--test-fraction", "0.026", "--backbone", str(missing)):
        assert out.returncode == 1 and UNLOADABLE in out.stderr, (command, out.stderr)
    # the other end: --test-fraction 0.9 leaves 2 training rows per label and calibration a quarter of them, rounded:
    # none. The remedy named first is a lower fraction (the message advised only more rows: tester finding)
    for command, out in fit_and_eval(tmp_path, "--data", str(data), "--test-fraction", "0.9", "--backbone", str(missing)):
        assert out.returncode == 1 and out.stderr.strip() == (
            "herald: --test-fraction 0.9 leaves no benign row in the calibration part: the test part takes a share of"
            " each (source, label) group and calibration a quarter of the rest, both rounded, so a group of 2"
            " training rows gives calibration none; lower --test-fraction (the default is 0.2) or give more benign"
            " rows per source"), (command, out.stderr)
    data.write_text("".join(f'{{"prompt": "{label}{s}-{i}", "label": "{label}", "source": "{label}{s}"}}\n'
                            for label in ("harmful", "benign") for s in range(3) for i in range(20)))
    for command, out in fit_and_eval(tmp_path, "--data", str(data), "--test-fraction", "0.9", "--max-per-source", "10",
                                     "--backbone", str(missing)):
        assert out.returncode == 1 and out.stderr.strip().endswith(
            "gives calibration none; lower --test-fraction (the default is 0.2), raise --max-per-source or give more"
            " benign rows per source"), (command, out.stderr)


def test_eval_refuses_learning_curve_sizes_whose_draws_cannot_be_calibrated_before_the_backbone_loads(tmp_path):
    # tester finding: --curve-sizes '[3]' passed the option's check (at least 2) and failed after the backbone load and
    # every other protocol with "calibration needs both classes": 3 benign rows drawn from 2 sources are groups of 1
    # and 2, and calibration takes a quarter of each, rounded
    data = tmp_path / "data.jsonl"
    data.write_text("".join(f'{{"prompt": "h{i}", "label": "harmful", "source": "h"}}\n'
                            f'{{"prompt": "b{i}", "label": "benign", "source": "b{i % 2}"}}\n' for i in range(16)))
    missing = unloadable_backbone(tmp_path)
    base = ("eval", "--data", str(data), "--out", str(tmp_path / "r.json"), "--backbone", str(missing),
            "--jailbreak-templates", "null", "--cache-dir", str(tmp_path / "cache"))
    out = herald(*base, "--curve-sizes", "[2,25]")
    assert out.returncode == 1 and "curve_sizes (--curve-sizes): each learning-curve size is prompts per class, at least 3" \
        in out.stderr, out.stderr
    out = herald(*base, "--curve-sizes", "[25,3]")
    assert out.returncode == 1 and out.stderr.strip() == (
        "herald: --curve-sizes: a learning-curve draw of 3 prompts per class (--curve-seeds 0) leaves no benign row in"
        " its calibration part (a quarter of each (source, label) group of the draw, rounded, so groups of 1 or 2 rows"
        " give calibration none); the smallest size whose draws all work on this data is 5; give larger sizes, or"
        " --curve-sizes '[]' for no learning curve"), out.stderr
    assert nothing_cached(tmp_path / "cache")
    out = herald(*base, "--curve-sizes", "[5,25]")  # 5 benign rows from 2 sources: a group of 3 or more
    assert out.returncode == 1 and UNLOADABLE in out.stderr, out.stderr


@pytest.mark.parametrize("command", ["fit", "eval", "recipes"])
def test_a_cache_dir_that_cannot_be_written_is_refused_before_the_backbone_loads(tmp_path, command):
    # tester finding: a file, /proc/x or a read-only folder failed after the load and tokenization, with a bare OSError,
    # or "set HERALD_CACHE_DIR" for the embedded backbone though --cache-dir was given
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi", "label": "benign", "source": "a"}\n{"prompt": "bomb", "label": "harmful", "source": "b"}\n')
    afile = tmp_path / "afile"
    afile.write_text("")
    out_args = ("--out", str(tmp_path / ("probe" if command == "fit" else "r.json")))
    give = "give a writable folder for converted backbones and extracted states"
    for cache, expected in ((afile, f"--cache-dir {afile} is a file; {give}"),
                            (afile / "sub", f"--cache-dir {afile / 'sub'}: {afile} is a file; {give}"),
                            (Path("/proc/herald-cache"), "--cache-dir /proc/herald-cache: cannot make a file in /proc, where"
                                                         " it would be made")):
        out = herald(command, "--data", str(data), *out_args, "--cache-dir", str(cache))
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().startswith(f"herald: {expected}"), out.stderr
    assert not (tmp_path / "probe").exists() and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("command", ["fit", "eval", "recipes"])
def test_an_empty_cache_dir_is_refused_and_herald_cache_dir_is_the_default(tmp_path, command):
    # tester findings: --cache-dir "" was the current directory (states/ written into the repository); and fit, eval
    # and recipes read only $XDG_CACHE_HOME while README and herald serve put the cache at HERALD_CACHE_DIR
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi", "label": "benign", "source": "a"}\n{"prompt": "bomb", "label": "harmful", "source": "b"}\n')
    out_args = ("--out", str(tmp_path / ("probe" if command == "fit" else "r.json")))
    out = herald(command, "--data", str(data), *out_args, "--cache-dir", "", cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.strip() == (
        "herald: invalid settings\n  cache_dir (--cache-dir): is empty (it would be the current directory); give a"
        " folder for converted backbones and extracted states, or leave --cache-dir out for HERALD_CACHE_DIR or"
        " ~/.cache/herald"), out.stderr
    afile = tmp_path / "afile"
    afile.write_text("")
    give = "give a writable folder for converted backbones and extracted states"
    out = herald(command, "--data", str(data), *out_args, HERALD_CACHE_DIR=str(afile))  # the default: refused as given
    assert out.returncode == 1 and out.stderr.strip().startswith(f"herald: --cache-dir {afile} is a file; {give}"), out.stderr
    out = herald(command, "--data", str(data), *out_args, "--cache-dir", str(afile / "sub"), HERALD_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1 and out.stderr.strip().startswith(  # --cache-dir wins
        f"herald: --cache-dir {afile / 'sub'}: {afile} is a file; {give}"), out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "data.jsonl"]


def test_the_training_cache_dir_reads_herald_cache_dir_from_the_environment_then_dot_env(tmp_path, monkeypatch):
    from herald_service.config import default_cache_dir, training_cache_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HERALD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert training_cache_dir() == default_cache_dir() == tmp_path / "xdg" / "herald"
    (tmp_path / ".env").write_text(f"HERALD_CACHE_DIR={tmp_path / 'from-env-file'}\n")
    assert training_cache_dir() == tmp_path / "from-env-file"
    monkeypatch.setenv("HERALD_CACHE_DIR", str(tmp_path / "from-environment"))
    assert training_cache_dir() == tmp_path / "from-environment"
    monkeypatch.setenv("HERALD_CACHE_DIR", "")  # empty is unset, as for serve: the .env's
    assert training_cache_dir() == tmp_path / "from-env-file"


def test_a_refused_setting_value_is_named_unless_it_may_be_a_key_or_herald_says_it_already():
    from herald_service.cli import _given

    out = herald("serve", HERALD_PORT="abc")
    assert out.returncode == 1 and out.stderr == ("herald: invalid settings\n  port (--port or HERALD_PORT): Input should"
                                                  " be a valid integer, unable to parse string as an integer (got 'abc')\n")
    assert _given({"type": "int_parsing", "loc": ("serve", "port"), "input": "abc"}) == " (got 'abc')"
    assert _given({"type": "string_too_long", "loc": ("serve", "steer_api_key"), "input": "s3cret"}) == ""  # a key
    assert _given({"type": "value_error", "loc": ("serve", "cache_dir"), "input": ""}) == ""  # Herald's message says it
    assert _given({"type": "missing", "loc": ("serve",), "input": {"port": 1}}) == ""  # a rule over several fields
    assert _given({"type": "int_parsing", "loc": ("serve", "port"), "input": "9" * 100}) == ""  # too long to quote


@pytest.mark.parametrize(("args", "env", "where"), [
    (["steer-eval", "--num-threads", "100000", "prompts.txt"], {}, "num_threads (--num-threads or HERALD_NUM_THREADS)"),
    (["classify", "--num-threads", "1025", "hello"], {}, "num_threads (--num-threads or HERALD_NUM_THREADS)"),
    (["plot", "hello"], {"HERALD_NUM_THREADS": "100000"}, "num_threads (--num-threads or HERALD_NUM_THREADS)"),
    (["serve"], {"HERALD_NUM_THREADS": "100000"}, "num_threads (--num-threads or HERALD_NUM_THREADS)"),
    (["fit", "--threads", "100000"], {}, "threads (--threads)"),
    (["eval", "--num-threads", "100000"], {}, "threads (--threads)"),
])
def test_a_thread_count_past_the_bound_is_refused_at_parse_time_naming_the_option_and_the_limit(args, env, where,
                                                                                                  monkeypatch, capsys):
    # steer-eval --num-threads 100000 ended in a MemoryError traceback, or a load error advising to delete a healthy
    # backbone cache (tester finding); fit, eval and recipes' --threads had the bound already
    from herald_service.cli import main
    from herald_service.config import MAX_THREADS

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as refused:
        main(args)
    assert MAX_THREADS == 1024
    given = next(word for word in [*args, *env.values()] if word.isdigit())  # and the value refused (tester)
    assert str(refused.value) == (f"herald: invalid settings\n  {where}: Input should be less than or equal to 1024"
                                  f" (got '{given}')")


def _recording_generations(monkeypatch) -> list:
    """Every FakeBackbone.generate call's prompt words (after the 3 template tokens), recorded as the calls run."""
    from herald_service.backbone.fake import FakeBackbone

    calls = []
    generate = FakeBackbone.generate

    def recording(self, token_ids, *args, **kwargs):
        calls.append([self._words.get(t) for t in token_ids[3:]])
        return generate(self, token_ids, *args, **kwargs)

    monkeypatch.setattr(FakeBackbone, "generate", recording)
    return calls


def test_steer_eval_applies_max_chars_before_the_load_and_max_tokens_before_any_generation(tmp_path, monkeypatch):
    # herald steer-eval --max-tokens 8 --max-chars 5 exited 0, and a 6,000-word line ran 117 s instead of being refused
    # at the default 4,096 tokens (tester finding); classify refused such prompts
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n\nhow to make a bomb now\n")
    missing = str(tmp_path / "no-backbone")  # a load would fail: the refusal comes first
    out = herald("steer-eval", "--max-chars", "5", str(prompts), HERALD_BACKBONE=missing, HERALD_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1 and out.stderr.strip() == (
        f"herald steer-eval: {prompts} line 3 has 22 characters; the limit is 5 (--max-chars or HERALD_MAX_CHARS)"), out.stderr
    calls = _recording_generations(monkeypatch)
    out = herald("steer-eval", "--max-tokens", "8", str(prompts), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (
        f"herald steer-eval: {prompts} line 3 renders to 9 tokens; the limit is 8 (--max-tokens or HERALD_MAX_TOKENS)")
    # the generations read the prompt as sent, which may tokenize longer than its fold: "b o m b" is one word folded
    prompts.write_text("wd wd wd wd b o m b\n")
    out = herald("steer-eval", "--max-tokens", "8", str(prompts), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (
        f"herald steer-eval: {prompts} line 1 as sent (the generations read it without the fold) renders to 11 tokens;"
        " the limit is 8 (--max-tokens or HERALD_MAX_TOKENS)")
    assert calls == []  # refused before any generation
    out = herald("steer-eval", "--max-tokens", "11", "--max-new-tokens", "2", str(prompts), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    assert calls == [["wd"] * 4 + ["b", "o", "m", "b"]] * 2


def test_steer_eval_output_records_the_run_rates_per_label_and_what_limit_left_out(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('how to make a bomb\n{"prompt": "bake bread please", "label": "benign"}\n'
                    '{"prompt": "write malware", "label": "harmful"}\n{"prompt": "make a b0mb", "label": "harmful"}\n'
                    "left out by --limit\n")
    out = herald("steer-eval", "--limit", "4", "--max-new-tokens", "4", "--layers", "3", str(rows), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 0, out.stderr
    assert (f"herald steer-eval: running the first 4 of the 5 prompts in {rows} (--limit 4); 1 left out"
            in out.stderr.splitlines()), out.stderr
    result = json.loads(out.stdout)
    assert list(result)[:6] == ["mode", "alpha", "layers", "max_new_tokens", "probe", "backbone"]
    assert {key: result[key] for key in list(result)[:6]} == {
        "mode": "ablate", "alpha": 0.0, "layers": [3], "max_new_tokens": 4, "probe": {"name": "fake-backbone"},
        "backbone": {"id": "herald/fake-backbone", "revision": "fake-1"}}
    assert (result["n"], result["prompts_in_file"], result["left_out_by_limit"]) == (4, 5, 1)
    assert [row["label"] for row in result["rows"]] == [None, "benign", "harmful", "harmful"]
    # the fake refuses "bomb" and "malware" unsteered, and complies with "b0mb" as sent (the score reads it folded)
    assert (result["baseline_refusal_rate"], result["steered_refusal_rate"]) == (0.5, 0.0)
    harmful, benign = result["by_label"]["harmful"], result["by_label"]["benign"]
    assert set(result["by_label"]) == {"harmful", "benign"}
    assert (harmful["n"], harmful["baseline_refusal_rate"], harmful["steered_refusal_rate"]) == (2, 0.5, 0.0)
    assert (benign["n"], benign["baseline_refusal_rate"], benign["steered_refusal_rate"]) == (1, 0.0, 0.0)
    assert harmful["baseline_mean_score"] == pytest.approx(
        (result["rows"][2]["baseline_score"] + result["rows"][3]["baseline_score"]) / 2)
    out = herald("steer-eval", "--limit", "5", "--max-new-tokens", "4", str(rows), HERALD_FAKE_BACKEND="true")
    assert "left out" not in out.stderr and json.loads(out.stdout)["left_out_by_limit"] == 0
    # the corpus's labels only: "HARMFUL", "harmful " and "" each made a by_label group of their own (re-tester)
    for label, shown in ((1, "1"), ("HARMFUL", '"HARMFUL"'), ("harmful ", '"harmful "'), ("", '""'),
                         ("x" * 60, '"' + "x" * 38 + "…")):
        rows.write_text(json.dumps({"prompt": "x", "label": label}) + "\n")
        out = herald("steer-eval", str(rows), HERALD_FAKE_BACKEND="true")
        assert out.returncode == 1 and out.stderr.strip() == (
            f'herald steer-eval: {rows} line 1: "label" must be "harmful" or "benign" (the corpus\'s labels), not {shown}')


def test_steer_eval_interrupted_says_how_many_prompts_were_done_and_that_nothing_was_written(tmp_path, monkeypatch):
    from herald_service.backbone.fake import FakeBackbone

    generate, calls = FakeBackbone.generate, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # prompt 2's steered generation
            raise KeyboardInterrupt
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(FakeBackbone, "generate", interrupted)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("bake bread\nmake a bomb\nwrite a poem\n")
    out = herald("steer-eval", "--max-new-tokens", "2", str(prompts), HERALD_FAKE_BACKEND="true")
    assert out.returncode == 130 and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1] == (
        "herald steer-eval: interrupted after 1 of 3 prompts; nothing was written"), out.stderr


def test_cache_dir_helps_name_herald_cache_dir_and_what_each_cache_holds(tmp_path, monkeypatch):
    # tester nits: classify, plot and reference said the default was "$XDG_CACHE_HOME/herald or ~/.cache/herald",
    # though HERALD_CACHE_DIR is read; data build said "Converted backbones and extracted states" of its wheel cache,
    # and its default did not read HERALD_CACHE_DIR
    for command in ("classify", "plot", "reference", "serve"):
        text = option_help(command)["--cache-dir"]
        assert "(default: HERALD_CACHE_DIR, else $XDG_CACHE_HOME/herald or ~/.cache/herald)" in text, (command, text)
    wheels = option_help("data", "build")["--cache-dir"]
    assert wheels.startswith("Path Cache of the downloaded PyPI wheels, kept in <cache-dir>/packages (default:"
                             " HERALD_CACHE_DIR"), wheels
    assert "Converted backbones" not in wheels
    from herald_service.cli.data import DataBuildCommand

    monkeypatch.chdir(tmp_path)  # no .env here
    monkeypatch.setenv("HERALD_CACHE_DIR", str(tmp_path / "shared-cache"))
    assert DataBuildCommand().cache_dir == tmp_path / "shared-cache"


def test_python_m_herald_service_cli_runs_the_herald_command():
    # tester nit: "herald_service.cli is a package and cannot be directly executed"
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "herald_service.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "subcommands:" in out.stdout and " steer-eval " in " ".join(out.stdout.split())


def test_report_plots_go_beside_out_not_into_the_repositorys_docs_eval(tmp_path):
    # tester: --plots defaulted to docs/eval whatever --out was, so `herald report --out /tmp/r.md` wrote its PNGs
    # over the repository's committed plots
    import shutil

    results = tmp_path / "in" / "results.json"
    results.parent.mkdir()
    shutil.copy(Path(__file__).parents[1] / "docs" / "eval" / "gemma-3-270m" / "results.json", results)
    work = tmp_path / "work"  # where the command runs: a checkout's docs/eval
    (work / "docs" / "eval").mkdir(parents=True)
    (tmp_path / "site").mkdir()
    run = herald("report", "--results", str(results), "--out", str(tmp_path / "site" / "r.md"), cwd=work)
    assert run.returncode == 0, run.stderr
    assert list((work / "docs" / "eval").iterdir()) == []
    plots = sorted(p.name for p in (tmp_path / "site" / "eval").iterdir())
    assert plots == ["learning_curve.png", "loso_per_source.png", "trajectories_by_class.png"]
    assert "](eval/learning_curve.png)" in (tmp_path / "site" / "r.md").read_text(encoding="utf-8")


def test_the_clis_templated_prompt_limit_is_the_number_of_templated_prompts():
    from herald_service.cli.training import TEMPLATED_PROMPTS
    from herald_service.training.templated import TASKS, TEMPLATES, templated_benign

    assert TEMPLATED_PROMPTS == len(TASKS) * len(TEMPLATES) == len(templated_benign(TEMPLATED_PROMPTS))


@pytest.mark.parametrize(("command", "module", "function", "kept"), [
    ("fit", "herald_service.training.fit", "run_fit", "no probe was written"),
    ("eval", "herald_service.training.eval", "run_eval", "no results were written"),
])
def test_ctrl_c_during_a_training_command_says_what_it_kept(tmp_path, monkeypatch, command, module, function, kept):
    # A fit stopped at 16 s exited 130 after '^C' and nothing else (tester finding).
    import importlib

    def interrupted(options):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), function, interrupted)
    data = tmp_path / "data.jsonl"
    labeled_rows(data)
    out = herald(command, "--data", str(data), "--out", str(tmp_path / "out"), "--backbone", str(unloadable_backbone(tmp_path)),
                 "--jailbreak-templates", "null", "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 130 and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1] == (
        f"herald {command}: stopped (Ctrl+C); {kept}; the states extracted so far are cached, so the same command"
        " resumes from them"), out.stderr


def test_plot_draws_prompts_with_dollar_signs_as_written(tmp_path):
    # researcher pass: "I paid $5 and then $10" was drawn "I paid 5andthen10", and "Explain $\foo$ in LaTeX" failed
    # with matplotlib's math parse error
    import numpy as np

    from herald_service.analysis.trajectory_plot import plot_trajectories, trajectory_figure

    prompts = ["I paid $5 and then $10 for the book", "Explain $\\foo$ in LaTeX", "Price: $x^{2$ total"]
    fig = trajectory_figure(np.zeros((3, 6)), prompts, [False, True, False])
    fig.draw_without_rendering()
    texts = fig.axes[0].get_legend().get_texts()
    assert [t.get_text() for t in texts] == ["[allowed] I paid $5 and then $10 for the book",
                                             "[flagged] Explain $\\foo$ in LaTeX", "[allowed] Price: $x^{2$ total"]
    assert not any(t.get_parse_math() for t in texts)
    out = plot_trajectories(np.zeros((3, 6)), prompts, [False, True, False], tmp_path / "dollars.png")
    assert out.stat().st_size > 0

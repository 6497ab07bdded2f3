"""Prompt-text fold cost: :func:`~herald_service.prompt_text.normalize_prompt_text` as a multiple of tokenizing the
same text with the embedded backbone's tokenizer, per kind of text, and the training corpus's load time, before and
after a change to the fold.

Why: every prompt Herald serves or trains on is folded before it is tokenized (``PROMPT_TEXT``,
herald_service/prompt_text.py), in Python, on the host: serving folds each request in the encode thread pool, and
``load_training_corpus`` folds each row of the corpus. Seconds of a fold mean nothing across machines; the tokenizer
(the embedded SmolLM2's, Rust) does comparable work on the same text on the same machine, so the fold is reported as a
multiple of it.

Texts: for each kind (ASCII, accented Latin, Cyrillic, CJK), the ``../shared/data`` prompts of that script in file
order (:func:`script_kind`), joined by blank lines and repeated to 2,000 and 20,000 characters. Each is folded once to
warm the caches, then folded and tokenized (the folded text, as the backbone reads it; no special tokens) in turn,
``repeats`` times; medians. The corpus: ``load_training_corpus`` on every ``../shared/data/*.jsonl`` but the templates
(what ``herald fit`` reads), once, first thing in a fresh process (as ``herald fit`` meets it), against tokenizing
each of its rows' prompts once.

Each build is its own process: ``--before REF`` exports ``herald_service/`` at a git ref into a temporary folder and
runs the same measurement from there, rounds alternating the builds (before, after, before...) so that load from
other jobs on a shared machine hits both alike. Only the ratios to the tokenizer, and the after/before ratios, mean
anything; the JSON keeps the milliseconds too.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.prompt_text --before HEAD~3`` (writes
``benchmarks/results/prompt_text_cpu.json``; about 3 min on 2 cores with a pure-Python fold before, most of it the
corpus loads). ``--quick`` smoke-tests the code.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"

KINDS = ("ascii", "accented latin", "cyrillic", "cjk")
SIZES = (2_000, 20_000)
"""Characters of each benchmark text: a long chat message, and a long document near the default ``max_chars``
(32,000)."""

REPEATS = {2_000: 41, 20_000: 9}

TARGET_RATIO = 1.0
"""The goal for the working tree: folding a text costs at most as much as tokenizing it, for every kind and size."""


def script_kind(text: str) -> str | None:
    """Which benchmark kind a prompt is: ``ascii``; ``accented latin`` (Latin letters only, at least 3% of them
    outside ASCII: French, Spanish, Vietnamese); ``cyrillic`` or ``cjk`` (over half its letters in U+0400-U+04FF, or
    in the CJK unified ideographs U+4E00-U+9FFF); ``None`` for anything else."""
    if text.isascii():
        return "ascii"
    letters = [char for char in text if char.isalpha()]
    if not letters:
        return None

    def share(low: str, high: str) -> float:
        return sum(low <= char <= high for char in letters) / len(letters)

    if share("\u0400", "\u04ff") > 0.5:
        return "cyrillic"
    if share("\u4e00", "\u9fff") > 0.5:
        return "cjk"
    accented = share("\u00c0", "\u024f")
    if accented >= 0.03 and accented + share("A", "z") == 1.0:
        return "accented latin"
    return None


def bench_texts(data: Path) -> dict[tuple[str, int], str]:
    """(kind, characters) -> the benchmark text (module docstring)."""
    by_kind: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for file in sorted(data.glob("*.jsonl")):
        for line in file.read_text(encoding="utf-8").split("\n"):  # not splitlines(): prompts hold U+2028
            if line.strip():
                prompt = json.loads(line)["prompt"]
                kind = script_kind(prompt)
                if kind is not None and sum(map(len, by_kind[kind])) < max(SIZES):
                    by_kind[kind].append(prompt)
    texts = {}
    for kind, prompts in by_kind.items():
        if not prompts:
            raise SystemExit(f"benchmarks.prompt_text: no {kind} prompt in {data}")
        joined = "\n\n".join(prompts)
        for size in SIZES:
            texts[kind, size] = (joined * (size // len(joined) + 1))[:size]
    return texts


# -- one build, in its own process ---------------------------------------------------------------------------------
def measure(tokenizer_folder: Path, quick: bool) -> dict:
    """The corpus load and the per-text timings of the ``herald_service`` this process imports."""
    from transformers import AutoTokenizer

    import herald_service.prompt_text as prompt_text
    from herald_service.training.corpus import default_data_files, load_training_corpus

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)

    def tokenize(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    files = default_data_files(DATA)
    started = time.perf_counter()
    rows = load_training_corpus(files)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    for example in rows:
        tokenize(example.prompt)
    corpus = {"rows": len(rows), "load_s": load_s, "tokenize_s": time.perf_counter() - started}

    texts = []
    for (kind, size), text in bench_texts(DATA).items():
        folded = prompt_text.normalize_prompt_text(text)  # warm: the caches, as a serving process has them
        fold_s, tokenize_s = [], []
        for _ in range(3 if quick else REPEATS[size]):  # in turn: both see the same machine
            started = time.perf_counter()
            prompt_text.normalize_prompt_text(text)
            fold_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            tokenize(folded)
            tokenize_s.append(time.perf_counter() - started)
        texts.append({"kind": kind, "chars": size, "tokens": len(tokenize(folded)),
                      "fold_ms": 1e3 * statistics.median(fold_s), "tokenize_ms": 1e3 * statistics.median(tokenize_s)})
    return {"module": prompt_text.__file__, "prompt_text": prompt_text.PROMPT_TEXT, "corpus": corpus, "texts": texts}


def run_build(source: Path, tokenizer_folder: Path, quick: bool) -> dict:
    """:func:`measure` in a fresh process that imports ``herald_service`` from ``source`` (a folder)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(source), str(REPO))), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "benchmarks.prompt_text", "--measure", str(tokenizer_folder)]
    if quick:
        command.append("--quick")
    # cwd: the source folder, so that -m's first path entry is it and not the working tree
    done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def export(ref: str, folder: Path) -> Path:
    """``herald_service/`` at git ``ref`` in ``folder``."""
    archive = subprocess.run(["git", "archive", ref, "herald_service"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


# -- the run -------------------------------------------------------------------------------------------------------
def summarize(runs: dict[str, list[dict]]) -> tuple[list[dict], dict]:
    """Per-text rows and the corpus row: medians over rounds of each build's milliseconds and of its ratios to the
    tokenizer timed in the same process, and where a before build ran the speedups: of the times, and of the ratios
    (``speedup_per_tokenize``: before's fold/tokenize over after's, which load that differs between the two builds'
    processes moves less)."""
    def median(build: str, pick) -> float:
        return statistics.median(pick(run) for run in runs[build])

    builds = list(runs)
    rows = []
    for index, text in enumerate(runs[builds[0]][0]["texts"]):
        row = {"kind": text["kind"], "chars": text["chars"], "tokens": text["tokens"]}
        for build in builds:
            row[f"{build}_fold_ms"] = median(build, lambda run: run["texts"][index]["fold_ms"])
            row[f"{build}_tokenize_ms"] = median(build, lambda run: run["texts"][index]["tokenize_ms"])
            row[f"{build}_fold_per_tokenize"] = median(
                build, lambda run: run["texts"][index]["fold_ms"] / run["texts"][index]["tokenize_ms"])
        if "before" in runs:
            row["speedup"] = row["before_fold_ms"] / row["after_fold_ms"]
            row["speedup_per_tokenize"] = row["before_fold_per_tokenize"] / row["after_fold_per_tokenize"]
        rows.append(row)
    corpus = {"rows": runs[builds[0]][0]["corpus"]["rows"]}
    for build in builds:
        corpus[f"{build}_load_s"] = median(build, lambda run: run["corpus"]["load_s"])
        corpus[f"{build}_tokenize_s"] = median(build, lambda run: run["corpus"]["tokenize_s"])
        corpus[f"{build}_load_per_tokenize"] = median(
            build, lambda run: run["corpus"]["load_s"] / run["corpus"]["tokenize_s"])
    if "before" in runs:
        corpus["speedup"] = corpus["before_load_s"] / corpus["after_load_s"]
        corpus["speedup_per_tokenize"] = corpus["before_load_per_tokenize"] / corpus["after_load_per_tokenize"]
    return rows, corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git ref (or a folder holding herald_service/) to compare against")
    parser.add_argument("--rounds", type=int, default=2, help="processes per build, alternating")
    parser.add_argument("--quick", action="store_true", help="one round, 3 repeats (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # a build's process: the tokenizer folder
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.quick)))
        return
    if not any(DATA.glob("*.jsonl")):
        raise SystemExit(f"benchmarks.prompt_text: no *.jsonl in {DATA} (the corpus; README, Rebuild the corpus)")
    from benchmarks.common import hardware, tokenizer_folder

    tokenizers = tokenizer_folder()
    hw = hardware()  # the load average at the start
    with tempfile.TemporaryDirectory(prefix="prompt_text_before_") as temp:
        sources = {"after": REPO}
        if args.before:
            sources = {"before": Path(args.before) if Path(args.before).is_dir() else export(args.before, Path(temp)),
                       **sources}
        runs: dict[str, list[dict]] = {build: [] for build in sources}
        for round_ in range(1 if args.quick else args.rounds):
            for build, source in sources.items():
                started = time.perf_counter()
                runs[build].append(run_build(source, tokenizers, args.quick))
                print(f"round {round_ + 1} {build}: {time.perf_counter() - started:.0f} s", flush=True)
    rows, corpus = summarize(runs)
    worst = max(row["after_fold_per_tokenize"] for row in rows)
    hw["load_average_end"] = os.getloadavg()
    payload = {"benchmark": "prompt_text", "target": "cpu", "prompt_text": runs["after"][0]["prompt_text"],
               "before": args.before, "rounds": len(runs["after"]), "repeats": REPEATS,
               "target_fold_per_tokenize": TARGET_RATIO, "worst_fold_per_tokenize": worst,
               "meets_target": worst <= TARGET_RATIO, "hardware": hw, "corpus": corpus, "rows": rows, "runs": runs}
    from benchmarks.common import print_table

    print_table("prompt-text fold, ms and as a multiple of tokenizing the same text", rows)
    print_table("training corpus load (load_training_corpus), s", [corpus])
    print(f"worst fold/tokenize after: {worst:.2f} (target <= {TARGET_RATIO})")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "prompt_text_cpu.json"
    path.write_text(json.dumps(payload, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

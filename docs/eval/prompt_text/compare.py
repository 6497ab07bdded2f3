"""What the prompt-text measurements beside this file share: an earlier rule read from git, the corpus prompts two
rules read differently, and the shipped probe's verdicts on them under each rule.

Used by evasions.py and measure_v2.py to measure_v5.py (run from the repository root, ``../shared/data`` beside it).
"""
import collections
import glob
import json
import subprocess
import types
from typing import Callable

from herald_service.config import Settings
from herald_service.engine.runtime import load_runtime
from herald_service.types import user_turn

Fold = Callable[[str], str]

MAX_TOKENS = 1024
"""Rendered tokens (under the earlier rule) above which a prompt is not scored: the shipped probe's fit limit."""


def earlier_rule(commit: str) -> types.ModuleType:
    """herald_service/prompt_text.py as it was at ``commit`` (``git show``), as a module."""
    module = types.ModuleType(f"prompt_text_{commit}")
    exec(subprocess.run(["git", "show", f"{commit}:herald_service/prompt_text.py"], capture_output=True, text=True,
                        check=True).stdout, module.__dict__)
    return module


def changed_rows(before: Fold, after: Fold) -> list[tuple[str, str, str]]:
    """(source file, label, prompt) of every corpus row that ``before`` and ``after`` read differently; prints how
    many per (source, label)."""
    rows = []
    for path in sorted(glob.glob("../shared/data/*.jsonl")):
        for line in open(path, encoding="utf-8-sig"):
            if line.strip():
                row = json.loads(line)
                if before(row["prompt"]) != after(row["prompt"]):
                    rows.append((path.rsplit("/", 1)[-1], row["label"], row["prompt"]))
    print(len(rows), "prompts read differently:", collections.Counter((s, l) for s, l, _ in rows).most_common(),
          flush=True)
    return rows


def print_verdicts(rows: list[tuple[str, str, str]], before: Fold, after: Fold, names: tuple[str, str]) -> None:
    """The shipped probe's verdicts on ``rows`` read by ``before`` and by ``after``: per (source, label), prompts within
    :data:`MAX_TOKENS` and how many each flags, then every verdict that changed."""
    runtime = load_runtime(Settings(_env_file=None))
    backbone = runtime.backbone
    counts = collections.defaultdict(lambda: [0, 0, 0])  # n, flagged before, flagged after
    changed = []
    for source, label, prompt in rows:
        ids = [backbone.tokenizer([backbone.render(user_turn(fold(prompt)))], add_special_tokens=False)["input_ids"][0]
               for fold in (before, after)]
        if len(ids[0]) > MAX_TOKENS:
            continue
        flags = [bool(runtime.probe.predict(backbone.last_token_states([i])).flagged[0]) for i in ids]
        entry = counts[(source, label)]
        entry[0] += 1
        entry[1] += flags[0]
        entry[2] += flags[1]
        if flags[0] != flags[1]:
            changed.append((source, label, flags, prompt[:120]))
    for key, (n, flagged_before, flagged_after) in sorted(counts.items()):
        print(key, f"n={n} flagged {names[0]}={flagged_before} {names[1]}={flagged_after}")
    print("verdicts changed:", len(changed))
    for item in changed:
        print(item)


def print_changes(before: Fold, after: Fold, names: tuple[str, str]) -> list[tuple[str, str, str]]:
    """:func:`changed_rows` and :func:`print_verdicts` for two rules, then the first three words each changed prompt
    reads differently (``names``: the two rules' short names); returns the changed rows."""
    rows = changed_rows(before, after)
    print_verdicts(rows, before, after, names)
    print(f"\nwords read differently (first three per prompt, {names[0]} -> {names[1]}):")
    for source, label, prompt in rows:
        old, new = before(prompt).split(), after(prompt).split()
        pairs = [(a[:40], b[:40]) for a, b in zip(old, new) if a != b][:3] if len(old) == len(new) else \
            [(f"{len(old)} words", f"{len(new)} words")]
        print(source, label, pairs)
    return rows

"""The shipped probe's verdicts on the corpus prompts that the ``nfkc-ascii-v3`` fold reads differently from
``nfkc-ascii-v2`` (herald_service/prompt_text.py, ``_fold_ascii_disguises``: letters spelled out one by one,
leetspeak, messages in capitals or alternating case).

Run with ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_v3.py`` from the repository root (v2 is read from
commit 815980d with ``git show``); output in measure_v3.txt beside it. Per (source, label), prompts within 1,024
rendered tokens: n, and how many were flagged with each rule; then each changed verdict, and for every changed prompt
the first words that read differently.
"""
import collections
import glob
import json
import subprocess
import sys
import types

from herald_service.config import Settings
from herald_service.engine.runtime import load_runtime
from herald_service.prompt_text import normalize_prompt_text as v3
from herald_service.types import user_turn

v2 = types.ModuleType("prompt_text_v2")
exec(subprocess.run(["git", "show", "815980d:herald_service/prompt_text.py"], capture_output=True, text=True,
                    check=True).stdout, v2.__dict__)
rows = []
for path in sorted(glob.glob("../shared/data/*.jsonl")):
    for line in open(path, encoding="utf-8-sig"):
        if line.strip():
            row = json.loads(line)
            if v2.normalize_prompt_text(row["prompt"]) != v3(row["prompt"]):
                rows.append((path.rsplit("/", 1)[-1], row["label"], row["prompt"]))
print(len(rows), "prompts read differently:", collections.Counter((s, l) for s, l, _ in rows).most_common(), flush=True)
runtime = load_runtime(Settings(_env_file=None))
backbone = runtime.backbone
counts = collections.defaultdict(lambda: [0, 0, 0])  # n, flagged with v2, flagged with v3
changed = []
for source, label, prompt in rows:
    ids = [backbone.tokenizer([backbone.render(user_turn(fold(prompt)))], add_special_tokens=False)["input_ids"][0]
           for fold in (v2.normalize_prompt_text, v3)]
    if max(len(i) for i in ids) > 1024:
        continue
    flags = [bool(runtime.probe.predict(backbone.last_token_states([i])).flagged[0]) for i in ids]
    entry = counts[(source, label)]
    entry[0] += 1
    entry[1] += flags[0]
    entry[2] += flags[1]
    if flags[0] != flags[1]:
        changed.append((source, label, flags, prompt[:120]))
for key, (n, f2, f3) in sorted(counts.items()):
    print(key, f"n={n} flagged v2={f2} v3={f3}")
print("verdicts changed:", len(changed))
for item in changed:
    print(item)
print("\nwords read differently (first three per prompt, v2 -> v3):")
for source, label, prompt in rows:
    before, after = v2.normalize_prompt_text(prompt).split(), v3(prompt).split()
    pairs = [(a[:40], b[:40]) for a, b in zip(before, after) if a != b][:3] if len(before) == len(after) else \
        [(f"{len(before)} words", f"{len(after)} words")]
    print(source, label, pairs)
sys.stdout.flush()

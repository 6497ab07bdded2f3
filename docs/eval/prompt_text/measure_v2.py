"""The shipped probe's verdicts on the corpus prompts that the ``nfkc-ascii-v2`` fold reads differently from
``nfkc-ascii-v1`` (herald_service/prompt_text.py: marks on Latin letters, Latin small capitals, variation selectors
and other non-format invisible characters, blank-looking characters, parenthesized letters, joiners between
non-ASCII characters).

Run with ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_v2.py`` from the repository root (v1 is read from
commit 6be6c90 with ``git show``); output in measure_v2.txt beside it. Per (source, label), prompts within 1,024
rendered tokens: n, and how many were flagged with each rule.
"""
import collections
import glob
import json
import subprocess
import sys
import types

from herald_service.config import Settings
from herald_service.engine.runtime import load_runtime
from herald_service.prompt_text import normalize_prompt_text as v2
from herald_service.types import user_turn

v1 = types.ModuleType("prompt_text_v1")
exec(subprocess.run(["git", "show", "6be6c90:herald_service/prompt_text.py"], capture_output=True, text=True,
                    check=True).stdout, v1.__dict__)
rows = []
for path in sorted(glob.glob("../shared/data/*.jsonl")):
    for line in open(path, encoding="utf-8-sig"):
        if line.strip():
            row = json.loads(line)
            if v1.normalize_prompt_text(row["prompt"]) != v2(row["prompt"]):
                rows.append((path.rsplit("/", 1)[-1], row["label"], row["prompt"]))
print(len(rows), "prompts read differently:", collections.Counter((s, l) for s, l, _ in rows).most_common(), flush=True)
runtime = load_runtime(Settings(_env_file=None))
backbone = runtime.backbone
counts = collections.defaultdict(lambda: [0, 0, 0])  # n, flagged with v1, flagged with v2
changed = []
for source, label, prompt in rows:
    ids = [backbone.tokenizer([backbone.render(user_turn(fold(prompt)))], add_special_tokens=False)["input_ids"][0]
           for fold in (v1.normalize_prompt_text, v2)]
    if len(ids[0]) > 1024:
        continue
    flags = [bool(runtime.probe.predict(backbone.last_token_states([i])).flagged[0]) for i in ids]
    entry = counts[(source, label)]
    entry[0] += 1
    entry[1] += flags[0]
    entry[2] += flags[1]
    if flags[0] != flags[1]:
        changed.append((source, label, flags, prompt[:120]))
for key, (n, f1, f2) in sorted(counts.items()):
    print(key, f"n={n} flagged v1={f1} v2={f2}")
print("verdicts changed:", len(changed))
for item in changed:
    print(item)
sys.stdout.flush()

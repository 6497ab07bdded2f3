"""The shipped probe's verdicts on the corpus prompts that the ``nfkc-ascii-v5`` fold reads differently from
``nfkc-ascii-v4`` (herald_service/prompt_text.py: whitespace at either end of a message removed), and what trailing
whitespace did to harmful requests under v4 (a tester's finding, 2026-12-05).

Run with ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_v5.py`` from the repository root (v4 is read from
commit eebcd9a with ``git show``, compare.py), with the probe fitted on v4 text (commit eebcd9a's); output in
measure_v5.txt beside it. Per (source, label), prompts within 1,024 rendered tokens: n, and how many were flagged
with each rule; each changed verdict; the whitespace the changed prompts had at their ends. Then 120 harmful
requests (60 AdvBench, 60 HarmBench, seed 0) with whitespace appended, flagged under v4 and v5.
"""
import collections
import json
import random
import sys

from compare import changed_rows, earlier_rule, print_verdicts

from herald_service.config import Settings
from herald_service.engine.runtime import load_runtime
from herald_service.prompt_text import normalize_prompt_text as v5
from herald_service.types import user_turn

v4 = earlier_rule("eebcd9a").normalize_prompt_text
rows = changed_rows(v4, v5)
print_verdicts(rows, v4, v5, ("v4", "v5"))
ends = collections.Counter()
for _, _, prompt in rows:
    text = v4(prompt)
    ends[(repr(text[: len(text) - len(text.lstrip())]), repr(text[len(text.rstrip()):]))] += 1
print("\nwhitespace at the ends (leading, trailing) of the changed prompts, v4 text:", ends.most_common(12))
print("\nas written -> v5:", end=" ")
sys.stdout.flush()
changed_rows(lambda text: text, v5)

requests = []
for name in ("advbench_harmful_behaviors.jsonl", "harmbench_text.jsonl"):
    prompts = [json.loads(line)["prompt"] for line in open(f"../shared/data/{name}", encoding="utf-8") if line.strip()]
    requests += random.Random(0).sample([p for p in prompts if len(p) < 300], 60)
runtime = load_runtime(Settings(_env_file=None))
backbone, probe = runtime.backbone, runtime.probe
print(f"\n{len(requests)} harmful requests (60 AdvBench, 60 HarmBench, under 300 characters), flagged:")
for suffix in ("", "\n", "\r\n", "\n\n\n", "\n" * 6, " ", "\t"):
    flagged = []
    for fold in (v4, v5):
        ids = backbone.tokenizer([backbone.render(user_turn(fold(r + suffix))) for r in requests],
                                 add_special_tokens=False)["input_ids"]
        flagged.append(sum(bool(probe.predict(backbone.last_token_states([i])).flagged[0]) for i in ids))
    print(f"  suffix {suffix!r}: v4 {flagged[0]}, v5 {flagged[1]}", flush=True)

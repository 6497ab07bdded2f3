"""The shipped probe's verdicts on the corpus prompts that the ``nfkc-ascii-v3`` fold reads differently from
``nfkc-ascii-v2`` (herald_service/prompt_text.py, ``_fold_ascii_disguises``: letters spelled out one by one,
leetspeak, messages in capitals or random case).

Run with ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_v3.py`` from the repository root (v2 is read from
commit 815980d with ``git show``, compare.py); output in measure_v3.txt beside it. Per (source, label), prompts
within 1,024 rendered tokens: n, and how many were flagged with each rule; then each changed verdict, and for every
changed prompt the first words that read differently.
"""
import sys

from compare import changed_rows, earlier_rule, print_verdicts

from herald_service.prompt_text import normalize_prompt_text as v3

v2 = earlier_rule("815980d").normalize_prompt_text
rows = changed_rows(v2, v3)
print_verdicts(rows, v2, v3, ("v2", "v3"))
print("\nwords read differently (first three per prompt, v2 -> v3):")
for source, label, prompt in rows:
    before, after = v2(prompt).split(), v3(prompt).split()
    pairs = [(a[:40], b[:40]) for a, b in zip(before, after) if a != b][:3] if len(before) == len(after) else \
        [(f"{len(before)} words", f"{len(after)} words")]
    print(source, label, pairs)
sys.stdout.flush()

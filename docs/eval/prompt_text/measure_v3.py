"""The shipped probe's verdicts on the corpus prompts that the ``nfkc-ascii-v3`` fold reads differently from
``nfkc-ascii-v2`` (herald_service/prompt_text.py, ``_fold_ascii_disguises``: letters spelled out one by one,
leetspeak, messages in capitals or random case).

Run with ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_v3.py`` from the repository root (v2 is read from
commit 815980d and v3 from 8ccab40 with ``git show``, compare.py); output in measure_v3.txt beside it, from the probe
shipped then. Per (source, label), prompts within 1,024 rendered tokens: n, and how many were flagged with each rule;
then each changed verdict, and for every changed prompt the first words that read differently.
"""
import sys

from compare import earlier_rule, print_changes

v2 = earlier_rule("815980d").normalize_prompt_text
v3 = earlier_rule("8ccab40").normalize_prompt_text  # the rule of this script's run, before v4
print_changes(v2, v3, ("v2", "v3"))
sys.stdout.flush()

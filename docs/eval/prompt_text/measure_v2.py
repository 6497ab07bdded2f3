"""The shipped probe's verdicts on the corpus prompts that the ``nfkc-ascii-v2`` fold reads differently from
``nfkc-ascii-v1`` (herald_service/prompt_text.py: marks on Latin letters, Latin small capitals, variation selectors
and other non-format invisible characters, blank-looking characters, parenthesized letters, joiners between
non-ASCII characters).

Run with ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_v2.py`` from the repository root (v1 and v2 are
read from commits 6be6c90 and 815980d with ``git show``, compare.py); output in measure_v2.txt beside it. Per
(source, label), prompts within 1,024 rendered tokens: n, and how many were flagged with each rule.
"""
from compare import changed_rows, earlier_rule, print_verdicts

v1 = earlier_rule("6be6c90").normalize_prompt_text
v2 = earlier_rule("815980d").normalize_prompt_text
print_verdicts(changed_rows(v1, v2), v1, v2, ("v1", "v2"))

"""The shipped probe's verdicts on the corpus prompts that the ``nfkc-ascii-v4`` fold reads differently from
``nfkc-ascii-v3`` (herald_service/prompt_text.py, ``_fold_symbols``: ``!`` and ``@`` written for i and a inside a word),
and how many corpus prompts the fold reads differently from the text as written.

Run with ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_v4.py`` from the repository root (v3 is read from
commit 8ccab40 with ``git show``, compare.py); output in measure_v4.txt beside it. Per (source, label), prompts
within 1,024 rendered tokens: n, and how many were flagged with each rule; then each changed verdict, and for every
changed prompt the first words that read differently.
"""
import sys

from compare import changed_rows, earlier_rule, print_changes

from herald_service.prompt_text import normalize_prompt_text as v4

v3 = earlier_rule("8ccab40").normalize_prompt_text
print_changes(v3, v4, ("v3", "v4"))
print("\nas written -> v4:", end=" ")
sys.stdout.flush()
changed_rows(lambda text: text, v4)

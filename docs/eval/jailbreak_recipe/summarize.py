"""Tables of docs/eval/jailbreak_recipe.md from the `herald recipes --fit-seed K` files beside this script.

Run: `python docs/eval/jailbreak_recipe/summarize.py` (reads seed*.json in its folder, prints markdown).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from herald_service.training.report_jailbreak import seed_table, verdicts

HERE = Path(__file__).parent


def ci(metric: dict) -> str:
    return f"{metric['value']:.3f} [{metric['lo']:.3f}, {metric['hi']:.3f}]"


def main() -> None:
    runs = {int(p.stem.removeprefix("seed")): json.loads(p.read_text())["results"] for p in sorted(HERE.glob("seed*.json"))}
    seeds = sorted(runs)
    table = seed_table(runs)
    keys = list(next(iter(table.values())))
    print(f"Seed means over fit seeds {seeds} (spread = max - min):\n")
    print("| recipe | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for n, cols in table.items():
        print(f"| `{n}` | " + " | ".join(f"{np.mean(v):.3f} ({np.ptp(v):.3f})" for v in cols.values()) + " |")
    print("\nFit seed 0 with 95% bootstrap intervals:\n")
    print("| recipe | recall n=40 | recall n=120 | LOSO F1 | LOSO AUROC |")
    print("|---|---|---|---|---|")
    for n in table:
        b = runs[seeds[0]][n]
        print(f"| `{n}` | {ci(b['jailbreak_wrapped']['recall'])} | {ci(b['jailbreak_wrapped_enlarged']['recall'])} | "
              f"{ci(b['loso_pooled']['f1'])} | {ci(b['loso_pooled']['auroc'])} |")
    print("\nDecision (rule of docs/eval/jailbreak_recipe.md; herald_service/training/report_jailbreak.verdicts):\n")
    for n, v in verdicts(table).items():
        marks = ", ".join(f"({k}) {'pass' if ok else 'FAIL'}" for k, ok in v.items())
        print(f"- `{n}`: {marks} -> {'PASSES' if all(v.values()) else 'does not pass'}")


if __name__ == "__main__":
    sys.exit(main())

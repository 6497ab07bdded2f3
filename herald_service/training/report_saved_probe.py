"""The saved-probe section of ``herald report``: the metrics of the probe that ``herald eval --probe`` scored at its own
stored threshold (the results' ``saved_probe``, :func:`~.eval.score_saved_probe`) on each ``--test-data`` file and the
jailbreak-wrapped set, with what is known of the prompts it was trained on. The report left the block out entirely,
so a saved probe's numbers were read only in the JSON, beside a ``trained_on`` flag that nothing showed (tester
finding).
"""

from __future__ import annotations

from herald_service.training.corpus import JAILBREAK_SET
from herald_service.training.report_markdown import code_span, table

METRICS = (("f1", "F1", False), ("auroc", "AUROC", False), ("recall", "recall %", True),
           ("false_positive_rate", "FPR %", True))
"""The columns of the section's table: results key, header, shown as a percentage."""


def _fmt(metric: dict | None, pct: bool) -> str:
    """A bootstrap metric with its 95% interval where it has one; ``–`` where absent (a one-class set has no F1)."""
    if not metric or metric.get("value") is None:
        return "–"
    scale, digits = (100, 1) if pct else (1, 3)
    text = f"{metric['value'] * scale:.{digits}f}"
    if metric.get("lo") is not None and metric.get("hi") is not None:
        text += f" [{metric['lo'] * scale:.{digits}f}, {metric['hi'] * scale:.{digits}f}]"
    return text


def _files(n: int) -> str:
    return f"{n} training file" + ("" if n == 1 else "s")


def _are(count: int) -> str:
    """The verb of "N of its prompts are": "1 of its 18 prompts is"."""
    return "is" if count == 1 else "are"


def trained_on_note(block: dict, training_files: dict | None = None) -> str | None:
    """What a saved-probe set's block says of the probe's training prompts in it, or None when it says nothing (the
    jailbreak-wrapped set; results written before ``herald eval --probe`` checked).

    ``in_training_files`` (prompts counted, :func:`~.eval.probe_training_overlap`) where recorded; else the older
    ``trained_on`` flag, which compared whole files by sha256 only. A block with ``checked_all: false`` counted the
    prompts of the checked training files only, and says so with the numbers of ``training_files`` (the results'
    ``saved_probe.training_files``) where given: it said "none of its 60 prompts is in the probe's training files"
    when 20 were, in a file that could not be checked (tester finding).
    """
    if "in_training_files" in block:
        count, rows = block["in_training_files"], block.get("rows")
        if block.get("checked_all") is False:
            checked = len((training_files or {}).get("checked") or [])
            unchecked = len((training_files or {}).get("unchecked") or {})
            if training_files is None:
                return f"{count} of its {rows} prompts {_are(count)} in the training files checked (some could not be)"
            if not checked and not unchecked:  # probe.json records none (re-tester: read "none of its prompts")
                return "not compared: the probe's probe.json records no training files"
            if not checked:
                return f"not compared: none of the {_files(unchecked)} its probe.json records could be checked"
            return (f"{count} of its {rows} prompts {_are(count)} in the {_files(checked)} checked ({unchecked} could"
                    " not be)")
        if not count:
            return f"none of its {rows} prompts is in the probe's training files"
        same = f" (the bytes of its training file {block['same_file']})" if block.get("same_file") else ""
        return f"{count} of its {rows} prompts {_are(count)} in the probe's training files{same}"
    if "trained_on" in block:
        return ("the probe was trained on this file (same sha256)" if block["trained_on"] else
                "not the bytes of a training file (sha256 only; prompts not compared)")
    return None


def warnings(saved: dict) -> list[str]:
    """The saved probe's warnings, in the words of ``herald eval``'s log: its jailbreak-wrapped seed, training files
    that could not be checked, and each set that holds prompts it may have been trained on."""
    out = [saved["warning"]] if saved.get("warning") else []
    unchecked = (saved.get("training_files") or {}).get("unchecked") or {}
    if unchecked:
        checked = (saved.get("training_files") or {}).get("checked") or []
        out.append(f"{len(unchecked)} of the {len(unchecked) + len(checked)} training files its probe.json records could"
                   " not be checked for --test-data prompts: "
                   + ", ".join(f"{name} ({why})" for name, why in unchecked.items())
                   + (f"; the counts below compare with those of the other {len(checked)} only" if checked else
                      "; only a --test-data file with the same sha256 as one of them is caught"))
    for name, block in (saved.get("sets") or {}).items():
        if block.get("trained_on"):
            apart = " (its rows the probe never saw are scored apart below)" if block.get("unseen") else ""
            out.append(f"{code_span(name)}: {trained_on_note(block, saved.get('training_files'))}, so the saved probe's metrics on it are not those of unseen"
                       f" prompts{apart}")
    return out


def section(saved: dict | None, meta: dict) -> list[str]:
    """Markdown lines of the report's section on ``saved`` (the results' ``saved_probe``); none without it."""
    if not saved or not saved.get("sets"):  # nothing scored (--probe without --test-data or a wrapped set): no table
        return []
    sets = saved.get("sets") or {}
    # only the sets present: it named the jailbreak-wrapped set under --jailbreak-n 0 (tester finding)
    scored = [text for text, present in (
        ("the rows of each `--test-data` file that fit --max-tokens", any(name != JAILBREAK_SET for name in sets)),
        ("the jailbreak-wrapped set", JAILBREAK_SET in sets)) if present]
    out = ["## Saved probe (`herald eval --probe`)", "",
           f"The probe in {code_span(str(saved.get('folder')))}, fitted by `herald fit` (not in this run), scored at its own stored "
           f"threshold {saved.get('threshold'):.4f} on the sets below: {' and '.join(scored) or 'none'} "
           f"({meta.get('replicates')}-replicate bootstrap intervals). Its training rows are not this run's split, so "
           "nothing here is leave-one-source-out.", ""]
    for text in warnings(saved):
        out += [f"**Warning**: {text}", ""]
    rows = []
    for name, block in sets.items():
        note = trained_on_note(block, saved.get("training_files")) or (
            "not compared (wrapped requests of this run)" if name == JAILBREAK_SET
            else "not checked (results from before the check)")
        n = (block.get("pooled") or {}).get("n", {}).get("value")
        rows.append([code_span(name), str(n), note, *(_fmt((block.get("pooled") or {}).get(key), pct) for key, _, pct in METRICS)])
        served = block.get("with_trimmed_views")
        if served:  # herald eval --trimmed-views: as herald serve decides by default
            rows.append([f"{code_span(name)}, with trimmed views (as herald serve decides)",
                         str(served["pooled"].get("n", {}).get("value")),
                         f"{served['views']} views of {served['prompts_with_views']} prompts; flagged by a view only:"
                         f" {served['flagged_by_a_view']}",
                         *(_fmt(served["pooled"].get(key), pct) for key, _, pct in METRICS)])
        unseen = block.get("unseen")
        if unseen:
            rows.append([f"{code_span(name)}, unseen rows only", str(unseen["pooled"].get("n", {}).get("value")),
                         "none (the rest of the file)",
                         *(_fmt(unseen["pooled"].get(key), pct) for key, _, pct in METRICS)])
    header = ["set", "n scored", "prompts in the probe's training files", *(title for _, title, _ in METRICS)]
    return out + [table(header, rows), ""]


def in_data_note(results: dict, name: str) -> str | None:
    """``"k of n prompts also appear in --data"`` for a ``--test-data`` set of ``herald eval`` whose prompts are also
    training rows (``meta.test_data_overlap``), so that the report does not call it "never trained on" (it did for
    the training file itself: breaker finding); None when none is, or the results predate the count."""
    counted = results.get("meta", {}).get("test_data_overlap", {}).get(name)
    if not counted or not counted.get("also_in_data"):
        return None
    return f"{counted['also_in_data']} of {counted['rows']} prompts also appear in --data"


def trained_on_sets(saved: dict | None) -> dict[str, str]:
    """``{set name: note}`` (:func:`trained_on_note`) of the saved probe's sets that hold prompts it may have been
    trained on, or that could not be checked in full (``checked_all: false``), for the report's lines that would
    otherwise call them never trained on."""
    files, sets = (saved or {}).get("training_files"), (saved or {}).get("sets") or {}
    return {name: trained_on_note(block, files) or "trained on" for name, block in sets.items()
            if block.get("trained_on") or block.get("checked_all") is False}

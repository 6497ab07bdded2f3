"""Labeled prompt corpus: JSONL rows ``{"prompt", "label", "source", "category"?, "context"?}`` (``shared/data``)."""

from __future__ import annotations

import hashlib
import logging
import os
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from herald_service.prompt_text import normalize_prompt_text
from herald_service.strict_json import NotJsonRow, object_row
from herald_service.text_file import is_valid_unicode, read_utf8

log = logging.getLogger(__name__)

LABELS = {"benign": 0, "harmful": 1}
JAILBREAK_TEMPLATE_FILE = "pyrit_jailbreak_templates.jsonl"
"""Wrappers with a ``{{ prompt }}`` slot, not prompts: left out of ``herald fit`` by default (SOURCES.md)."""
JAILBREAK_SET = "jailbreak_wrapped"
"""The name of ``herald eval``'s jailbreak-wrapped set among the results' sets, beside the ``--test-data`` file names."""


@dataclass(frozen=True)
class Example:
    """One labeled prompt. ``label`` is 1 for harmful, 0 for benign."""

    prompt: str
    label: int
    source: str
    category: str | None
    file: str


def _prompt_text(row: dict) -> str:
    # HarmBench contextual behaviors only make sense with their context string (SOURCES.md).
    context = row.get("context")
    return f"{context}\n\n{row['prompt']}" if context else row["prompt"]


def load_corpus(paths: list[Path]) -> list[Example]:
    """Read labeled JSONL files: one JSON object a line, blank lines skipped, parsed strictly
    (:func:`~herald_service.strict_json.object_row`: a key given twice would otherwise keep its last value).

    Raises:
        NotUtf8Error: a file that is not UTF-8, naming it and the line.
        ValueError: naming the file and line of a row that is not JSON, not an object, repeats a key, holds a number
            Python cannot hold or a lone UTF-16 surrogate, lacks a field or holds one of the wrong type (string
            ``prompt`` and ``source``; ``context``, when given, a string or null), has a ``label`` not in
            :data:`LABELS`, an empty or whitespace-only ``prompt``, or a ``source`` holding a line break, another
            control character or ``|`` (:func:`_source_problem`); the message names the field and what it found.
        OSError: a file that cannot be read.
    """
    return [example for _, rows in _read_rows(paths) for example, _, _ in rows]


def _read_rows(paths: list[Path]) -> list[tuple[Path, list[tuple[Example, str, str | None]]]]:
    """Each file with its rows, in file and line order: each row's :class:`Example`, where it is (``"<path> line
    <n>"``) and its prompt as the backbone reads it where the row was checked with it (:func:`_row_example`). A file
    without a row comes with an empty list."""
    by_file: list[tuple[Path, list[tuple[Example, str, str | None]]]] = []
    for path in paths:
        rows: list[tuple[Example, str, str | None]] = []
        by_file.append((path, rows))
        for number, line in row_lines(read_utf8(path)):
            where = f"{path} line {number}"
            try:
                example, read = _row_example(line, where, path.name)
                rows.append((example, where, read))
            except NotJsonRow as exc:
                if path.suffix.lower() in TABLE_SUFFIXES:  # "data.csv line 1: not JSON" did not say why
                    raise NotJsonRow(f"{exc}; Herald reads labeled data as JSONL only, not {path.suffix} tables:"
                                     " convert the file to one JSON object a line") from None
                raise
    return by_file


def row_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a JSONL text that hold a row, with their 1-based line numbers: blank (whitespace-only) lines are
    skipped. Split at ``"\n"`` only: :meth:`str.splitlines` would also cut at a U+2028 that JSON allows inside a
    string."""
    return [(number, line) for number, line in enumerate(text.split("\n"), 1) if line.strip()]


TABLE_SUFFIXES = frozenset({".csv", ".tsv", ".parquet", ".xlsx", ".xls"})
"""File suffixes of tables that ``--data`` readers name when a row is not JSON (a researcher's CSV)."""


def load_training_corpus(paths: list[Path]) -> list[Example]:
    """:func:`load_corpus` for the data ``herald fit``, ``eval`` and ``recipes`` train on, checked for repeated prompts.

    A prompt is its text as trained on (a HarmBench context joined to its request), compared as the backbone reads
    it (:func:`~herald_service.prompt_text.normalize_prompt_text`: a copy with a zero-width space or fullwidth letters
    is the same prompt). A prompt given with both labels is refused: a probe cannot learn both, and its metrics would count one of them wrong whatever it does. A prompt
    given more than once with one label is kept as often as given (the shipped corpus has 14, most of them in two
    sources, and removing them would change its fits) and counted in one warning line: its copies can land on both sides of
    the random split, on the train part and the held-out one (``herald fit`` counts those held out and scores the
    held-out rows without them: :func:`~herald_service.training.fit.held_out_evaluation`).

    Raises:
        ValueError: naming a file without a row (empty or blank lines only), or the rows (file and line, with their
            labels) of the first prompt given with both labels, and how many prompts are; and every error of
            :func:`load_corpus`.
        NotUtf8Error, OSError: as :func:`load_corpus`.
    """
    by_file = _read_rows(paths)
    empty = next((path for path, rows in by_file if not rows), None)
    if empty is not None:  # accepted as "rows: 0", while an empty --test-data file was refused (tester finding)
        raise ValueError(f"{empty} holds no labeled row (--data): it is empty or only blank lines; give JSONL rows"
                         " {\"prompt\", \"label\", \"source\"} or leave the file out")
    places: dict[str, list[tuple[int, str]]] = defaultdict(list)  # prompt as read -> (label, where) of each row
    rows = [row for _, file_rows in by_file for row in file_rows]
    for example, where, read in rows:  # read: the fold of the row's check, reused (folding is most of the load time)
        places[normalize_prompt_text(example.prompt) if read is None else read].append((example.label, where))
    repeated = {prompt: found for prompt, found in places.items() if len(found) > 1}
    conflicts = [prompt for prompt, found in repeated.items() if len({label for label, _ in found}) > 1]
    if conflicts:
        names = {value: name for name, value in LABELS.items()}
        first = conflicts[0]
        shown = [f"{where} ({names[label]})" for label, where in places[first][:4]]
        more = f" and {len(places[first]) - 4} more rows" if len(places[first]) > 4 else ""
        preview = first if len(first) <= 60 else first[:59] + "…"
        raise ValueError(f"the prompt {preview!r} has both labels: {', '.join(shown)}{more}; {len(conflicts)} "
                         f"prompt{'s' if len(conflicts) > 1 else ''} of the data {'have' if len(conflicts) > 1 else 'has'}"
                         " both labels: give each prompt one label")
    if repeated:
        (_, first_at), (_, second_at) = next(iter(repeated.values()))[:2]
        many = len(repeated) > 1
        log.warning("%d prompt%s more than once (same label); duplicates can land on both sides of the split "
                    "(first: %s and %s)", len(repeated), "s appear" if many else " appears", first_at, second_at)
    return [example for example, _, _ in rows]


def _json_kind(value: object) -> str:
    """How a JSON value reads in an error: ``a list``, ``the number 1``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    return {list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _row_problem(row: dict) -> tuple[str | None, str | None]:
    """What is wrong with a parsed row's fields, the first fault only (every row got one generic message naming no
    field: breaker finding), or None; and its prompt as the backbone reads it (:func:`normalize_prompt_text`), folded
    for the check that it is not only invisible characters, or None where a fault came before that check. An empty or
    blank prompt is refused: nothing in it can be labelled."""
    for name in ("prompt", "label", "source"):
        if name not in row:
            return f"missing field {name!r}; a row needs prompt, label and source", None
    for name in ("prompt", "source", "context"):
        value = row.get(name)
        if name in row and not isinstance(value, str) and not (name == "context" and value is None):
            return f"{name} must be a string{' or null' if name == 'context' else ''}, got {_json_kind(value)}", None
    label = row["label"]
    if not isinstance(label, str):
        return f"label must be one of {sorted(LABELS)}, got {_json_kind(label)}", None
    if label not in LABELS:
        shown = label if len(label) <= 40 else label[:39] + "…"
        return f"label {shown!r} is not one of {sorted(LABELS)}", None
    if not row["prompt"].strip():
        return "prompt is empty or only whitespace; a moderation prompt needs text to be labelled", None
    read = normalize_prompt_text(row["prompt"])
    if not read.strip():
        return ("prompt is only invisible characters (nothing is left once the prompt-text fold of"
                " herald_service/prompt_text.py removes them); a moderation prompt needs text to be labelled"), read
    if "source" in row and not row["source"].strip():
        return "source is empty or only whitespace; name the dataset the row comes from (metrics are per source)", read
    return _source_problem(row["source"]), read


def _source_problem(source: str) -> str | None:
    """What makes ``source`` unusable as a source name, or None. A source name goes into log lines, into the rows of
    ``herald report``'s Markdown tables and into the ``"source|label"`` group keys of the splits and the sample weights:
    leading or trailing whitespace (a no-break space too) made a second source of one name, a line break or another
    control character (Unicode category Cc, or a line or paragraph separator, U+2028 and U+2029) split a log line and
    a table row, ``|`` a table row and a group key, and an invisible format character
    (category Cf: a right-to-left override reorders a table row, a zero-width space makes two sources look the same)
    misleads whoever reads them (tester findings)."""
    shown = source if len(source) <= 40 else source[:39] + "…"
    if source != source.strip():  # "  myharmA" was a source apart from "myharmA", as labels are not (tester finding)
        return (f"source {shown!r} begins or ends with whitespace, so it would be a source apart from"
                f" {source.strip()!r}; give the name without it")
    if "|" in source:
        return (f"source {shown!r} holds '|', which separates the columns of herald report's tables and the source"
                " from the label in Herald's group keys; name the source without it")
    bad = next((c for c in source if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        kind = ("a line break" if len(f"a{bad}b".splitlines()) > 1 else
                "an invisible format character" if unicodedata.category(bad) == "Cf" else "a control character")
        return (f"source {shown!r} holds {kind} (U+{ord(bad):04X}); a source is named in log lines and in herald"
                " report's table rows, so it must be one line of printable text")
    return None


def _row_example(line: str, where: str, file: str) -> tuple[Example, str | None]:
    """The :class:`Example` of one JSONL line and its prompt as the backbone reads it, or None where that is not the
    row's folded ``prompt`` (a HarmBench context is joined before it); ValueError naming ``where`` (file and line) and
    what is wrong."""
    row = object_row(line, where, "an object with prompt, label and source", strings=("prompt", "label", "source"))
    problem, read = _row_problem(row)
    if problem:
        raise ValueError(f"{where}: {problem}")
    for field in ("prompt", "context", "source"):
        if isinstance(row.get(field), str) and not is_valid_unicode(row[field]):
            raise ValueError(f"{where}: {field} holds a lone UTF-16 surrogate (not valid Unicode); no tokenizer can encode it")
    category = row.get("category")
    example = Example(_prompt_text(row), LABELS[row["label"]], row["source"], category if isinstance(category, str) else None, file)
    return example, read if example.prompt == row["prompt"] else None


MIN_ROWS_PER_LABEL = 8
"""Fewest rows of each label ``herald fit`` and ``herald eval`` accept: 8 rows of one source leave 6 after the random
split's 20% test part, of which the calibration quarter takes 2 and the direction and scorer fit keeps 4. Fewer failed
after the backbone load with scikit-learn's "The number of samples must be more than the number of classes" or
"calibration needs both classes" (breaker finding)."""


def cap_binds(examples: list[Example], label: int, max_per_source: int | None) -> bool:
    """Whether the ``--max-per-source`` cap may have cut rows of ``label`` from ``examples`` (rows after
    :func:`cap_per_group`): some (source, label) group is at the cap. Only then does an error about too few rows name
    the cap: "raise --max-per-source" was the advice for groups of 3 rows under a cap of 150 (researcher pass)."""
    if max_per_source is None:
        return False
    sizes = Counter(example.source for example in examples if example.label == label)
    return any(size >= max_per_source for size in sizes.values())


def require_both_labels(examples: list[Example], files: list[Path], max_per_source: int | None = None) -> None:
    """Refuse a corpus that holds one label only, or fewer than :data:`MIN_ROWS_PER_LABEL` rows of a label (a probe
    needs harmful and benign rows in its test, calibration and fit parts), before any model loads.

    Args:
        max_per_source: the ``--max-per-source`` cap that ``examples`` were cut by (:func:`cap_per_group`), named in
            the message; None for the rows as read.

    Raises:
        ValueError: naming the label that is missing or short, the files read, and the cap when one is given.
    """
    counts = Counter(example.label for example in examples)
    names = ", ".join(str(path) for path in files)
    missing = [name for name, label in LABELS.items() if not counts[label]]
    if missing:
        raise ValueError(f"the data holds no {missing[0]} row ({names}: {len(examples)} rows); a probe needs both "
                         f"labels, {' and '.join(LABELS)}")
    short = [(name, counts[label]) for name, label in LABELS.items() if counts[label] < MIN_ROWS_PER_LABEL]
    if short:
        name, n = short[0]
        held = f"the data holds {n} {name} row{'s' if n > 1 else ''} ({names})"
        capped = cap_binds(examples, LABELS[name], max_per_source)
        if capped:
            held = (f"--max-per-source {max_per_source} leaves {n} {name} row{'s' if n > 1 else ''} of the data "
                    f"({names}: at most {max_per_source} per source and label)")
        advice = "; raise --max-per-source or give null for all rows" if capped else ""
        raise ValueError(f"{held}; a probe needs at least {MIN_ROWS_PER_LABEL} of each label: its test, calibration "
                         f"and fit parts each need both{advice}")


DEFAULT_TEST_FRACTION = 0.2
"""``--test-fraction`` of herald fit and eval when none is given: the share of each (source, label) group held out."""


def require_split_parts(examples: list[Example], test_fraction: float, seed: int, max_per_source: int | None) -> None:
    """Refuse, before any model loads, rows whose random split (:func:`stratified_split`) leaves a label out of the
    held-out test part, or whose calibration split (:func:`~herald_service.probes.probe.calibration_mask`, with
    ``seed`` as ``herald fit`` draws them) leaves a label out of the probe's calibration part or with fewer than 2
    rows in its fit part. Both splits round per (source, label) group, so groups of 3 rows (``--max-per-source 3``)
    give the calibration part none, however many sources there are, and ``--test-fraction 0.01`` gives groups of
    50 rows or fewer no test row; these failed after the backbone load and the state extraction (breaker and tester
    findings: scikit-learn's or numpy's "zero-size array to reduction operation minimum"). Rows that extraction later
    skips (over ``--max-tokens``) are counted here; :meth:`~herald_service.probes.probe.HeraldProbe.fit` still refuses
    what they leave short.

    Args:
        examples: the rows after :func:`cap_per_group`; ``max_per_source`` the cap (``--max-per-source``) named in
            the message.

    Raises:
        ValueError: naming the label, the part, its row count, --max-per-source and --test-fraction; for the test
            part, the rows it holds of each label and the smallest --test-fraction that gives it one of each.
    """
    from herald_service.probes.probe import HeraldProbe, calibration_mask

    train, test = stratified_split(examples, test_fraction, seed)
    tested = Counter(examples[i].label for i in test)
    short = [name for name, label in LABELS.items() if not tested[label]]
    if short:
        sizes = Counter((example.source, example.label) for example in examples)
        # the largest group of the label: a group of one row stays in training
        largest = {name: max((m for (_, y), m in sizes.items() if y == LABELS[name] and m > 1), default=0) for name in short}
        leaves = (f"--test-fraction {test_fraction} leaves {tested[1]} harmful and {tested[0]} benign rows in the held-out"
                  " test part, whose metrics need at least one of each: it takes that share of each (source, label) group"
                  " of 2 or more rows, rounded")
        alone = [name for name in short if not largest[name]]
        if alone:
            raise ValueError(f"{leaves}; every {alone[0]} source has one row: give at least 2 rows of a {alone[0]} source")
        name = min(short, key=largest.get)
        # round(f * m) >= 1 needs f * m > 0.5: Python rounds 0.5 to the even 0
        raise ValueError(f"{leaves}, so the largest {name} group ({largest[name]} rows) gives it none; raise"
                         f" --test-fraction above {0.5 / largest[name]:.3g}")
    labels = np.array([examples[i].label for i in train], dtype=int)
    groups = np.array([f"{examples[i].source}|{examples[i].label}" for i in train])
    calibration = calibration_mask(groups, HeraldProbe().calibration_fraction, seed)
    for name, label in LABELS.items():
        in_calibration = int((labels[calibration] == label).sum())
        in_fit = int((labels[~calibration] == label).sum())
        if in_calibration and in_fit >= 2:
            continue
        part = (f"no {name} row in the calibration part" if not in_calibration
                else f"{in_fit} {name} row{'s' if in_fit != 1 else ''} in the fit part (need at least 2)")
        capped = cap_binds(examples, label, max_per_source)
        lead = (f"--max-per-source {max_per_source} (at most {max_per_source} rows per source and label) and "
                f"--test-fraction {test_fraction} leave" if capped else f"--test-fraction {test_fraction} leaves")
        # a large --test-fraction (0.99) is the cause to undo first: more rows alone would not have been the remedy
        remedies = []
        if test_fraction > DEFAULT_TEST_FRACTION:
            remedies.append(f"lower --test-fraction (the default is {DEFAULT_TEST_FRACTION})")
        if capped:
            remedies.append("raise --max-per-source")
        remedies.append(f"give more {name} rows per source")
        advice = " or ".join([", ".join(remedies[:-1]), remedies[-1]]) if len(remedies) > 1 else remedies[0]
        raise ValueError(f"{lead} {part}: the test part takes a share of each (source, label) group and calibration a "
                         f"quarter of the rest, both rounded, so a group of 2 training rows gives calibration none; "
                         f"{advice}")


def require_regular_file(path: Path, option: str) -> None:
    """Refuse a data file that is not a regular file: a pipe (``--data /dev/stdin`` under ``cat mine.jsonl |``,
    ``<(...)``), a device or a socket. Its rows are read once and its sha256 (a probe's ``training_data.files``, eval's
    corpus hash, eval's ``--probe`` check of ``--test-data``) read it again, and a stream is empty the second time:
    ``herald fit`` trained on every row and recorded ``{"file": "stdin", "sha256": <sha256 of nothing>, "rows": 0}``
    (tester finding). Refused for every data option, recipes' too, so that one rule holds: data is files.

    Raises:
        ValueError: naming ``option``, the path, what it is, and to save it to a file first.
    """
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing or unreadable: named where it is read
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise ValueError(f"{option} {path} is {kind}, not a regular file: Herald reads a data file more than once (its rows,"
                     " then the sha256 it records or checks), and a stream is empty the second time; save it to a file"
                     " first and give that")


def require_data_file(path: Path, option: str, folder: Path | None = None) -> None:
    """Refuse a labeled data file that cannot be read as one, naming it, ``option`` and what is wrong, before any model
    loads: a path that does not exist (a link whose target does not, named with its target), a folder, or no regular
    file (:func:`require_regular_file`). The one check of a ``--test-data`` path (:func:`check_test_data_paths`) and
    of each ``*.jsonl`` a ``--data`` (or ``--sensitive-data``) folder holds, where a dangling link or a link to a
    folder stopped ``herald fit`` with a bare ``[Errno 2] No such file or directory: 'data/dangling.jsonl'`` or
    ``[Errno 21] Is a directory``, naming no option (tester finding).

    Args:
        folder: the folder given to ``option`` that ``path`` was found in (its ``*.jsonl`` are read), named in the
            error with what to do; None for a path given itself.

    Raises:
        ValueError: as above; ``"<path> does not exist (--test-data)"`` for a path given itself.
    """
    where = (f"({option})" if folder is None
             else f"(in the {option} folder {folder}, whose *.jsonl files are all read as labeled rows)")
    if not path.exists():
        if path.is_symlink():
            advice = "; give" if folder is None else "; remove it from the folder, or point it at"
            raise ValueError(f"{path} is a link to {os.readlink(path)}, which does not exist {where}{advice} a labeled"
                             " JSONL file")
        raise ValueError(f"{path} does not exist {where}")
    if path.is_dir():
        advice = "give labeled JSONL files" if folder is None else "rename it or move it out of the folder"
        raise ValueError(f"{path} is a folder {where}; {advice}")
    require_regular_file(path, option)


def expand_data(paths: list[Path], option: str = "--data") -> list[Path]:
    """Files as given; a folder stands for its ``*.jsonl`` minus the jailbreak-template file (an info line says so).
    A file reached twice
    (given twice, or given and inside a folder given) is read once, where it first comes (a re-test: its rows were
    read twice and counted as duplicates).

    Args:
        option: the command-line option the paths came from, named in errors (``--data``, ``--sensitive-data``).

    Raises:
        ValueError: a path that does not exist, a folder without such files, a file that is not a regular file
            (:func:`require_regular_file`: a pipe such as ``/dev/stdin``), a folder's ``*.jsonl`` that is a dangling
            link or a folder (:func:`require_data_file`), two files with one name (:func:`distinct_files`), or no
            path at all, naming ``option``.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = default_data_files(path)
            if (path / JAILBREAK_TEMPLATE_FILE).is_file():  # left out without a word (tester finding)
                log.info("%s folder %s: %s is not read as labeled rows (a file of that name holds jailbreak templates,"
                         " read only as --jailbreak-templates)", option, path, JAILBREAK_TEMPLATE_FILE)
            if not found:
                raise ValueError(f"{option}: folder {path} holds no .jsonl file")
            for file in found:
                require_data_file(file, option, folder=path)
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            raise ValueError(f"{option} {path} does not exist")
    for file in files:
        require_regular_file(file, option)
    if not files:
        raise ValueError(f"{option}: no JSONL file or folder given")
    return distinct_files(files, option)


def distinct_files(files: list[Path], option: str) -> list[Path]:
    """``files`` each once, where it first comes (a file given twice under any spelling, resolved), refusing two
    different files of ``option`` with the same file name (``a/t.jsonl`` and ``b/t.jsonl``): Herald keys
    data files by name (``probe.json``'s ``training_data.files``, rows' ``Example.file``, the results' sets and
    ``herald eval --probe``'s check of training prompts), so one file was taken for the other: two ``--test-data``
    files gave one set and lost the other with its trained-on warning, and a changed copy's new row under ``--data``
    was counted as trained on (tester findings). ``../shared/data`` and ``herald data build``'s corpus have unique
    names.

    Args:
        option: named in the error.

    Raises:
        ValueError: naming ``option``, both paths and the shared name.
    """
    first: dict[Path, Path] = {}
    for file in files:
        first.setdefault(file.resolve(), file)
    seen: dict[str, Path] = {}
    for file in first.values():
        if file.name in seen:
            raise ValueError(f"{option} {seen[file.name]} and {file} share the file name {file.name}, and Herald keys"
                             f" data files by name (probe.json, the results' sets); rename one of them")
        seen[file.name] = file
    return list(first.values())


def check_test_data_paths(paths: list[Path]) -> list[Path]:
    """The ``--test-data`` files, each once (:func:`distinct_files`, as :func:`expand_data`), checked without reading
    them: ``herald eval`` checks them before it refuses an existing ``--out`` (it answered "--out ... already exists"
    for a --test-data path that does not exist: tester finding), and :func:`~.eval.read_test_data` again before any
    model loads.

    Raises:
        ValueError: a path that does not exist or is a folder (naming it and ``--test-data``; a missing file printed
            a raw "[Errno 2] No such file or directory": breaker finding), one that is not a regular file (a pipe;
            ``--probe``'s check hashes it again: :func:`require_data_file`), two files with one name
            (:func:`distinct_files`: the results key sets by it, and one set was silently lost: tester
            finding), or a file named as the jailbreak-wrapped set (:data:`JAILBREAK_SET`), whose results it would
            replace.
    """
    for path in paths:
        require_data_file(path, "--test-data")
        if path.name == JAILBREAK_SET:
            raise ValueError(f"--test-data {path} is named {JAILBREAK_SET}, the results' name of the jailbreak-wrapped"
                             " set; rename it")
    return distinct_files(paths, "--test-data")


def default_data_files(data_dir: Path) -> list[Path]:
    """Every ``*.jsonl`` in ``data_dir`` except the jailbreak-template file, sorted by name."""
    return sorted(p for p in data_dir.glob("*.jsonl") if p.name != JAILBREAK_TEMPLATE_FILE)


def cap_per_group(examples: list[Example], cap: int | None, seed: int = 0) -> list[Example]:
    """Keep at most ``cap`` examples per (source, label), sampled without replacement with ``seed``.

    Capping per source (rather than globally) keeps the benign side diverse: no single large source (ShareGPT)
    dominates the directions.
    """
    if cap is None:
        return list(examples)
    groups: dict[tuple[str, int], list[Example]] = defaultdict(list)
    for example in examples:
        groups[(example.source, example.label)].append(example)
    rng = np.random.default_rng(seed)
    kept = []
    for key in sorted(groups):
        members = groups[key]
        picks = rng.permutation(len(members))[:cap]
        kept.extend(members[i] for i in sorted(picks))
    return kept


def left_out_by_cap(examples: list[Example], capped: list[Example]) -> dict[tuple[str, int], tuple[int, int]]:
    """The rows :func:`cap_per_group` left out of ``examples`` (``capped``: what it kept), per (source, label) group it
    cut: ``(source, label) -> (rows left out, rows given)``, sorted by source then label (0 benign, 1 harmful), as the
    ``counts`` the commands record; empty when it kept every row."""
    given = Counter((e.source, e.label) for e in examples)
    kept = Counter((e.source, e.label) for e in capped)
    return {key: (n - kept[key], n) for key, n in sorted(given.items()) if n > kept[key]}


CAP_GROUPS_LOGGED = 6
"""The most (source, label) groups the ``--max-per-source`` warning names one by one (the largest cuts first); the
development corpus has 17 over 150 rows, which would make one line of some 1,500 characters. The files the commands
write record every group."""


def warn_of_cap(left_out: dict[tuple[str, int], tuple[int, int]], cap: int | None, seed: int,
                recorded_in: str | None = None, rows: str = "rows") -> None:
    """Log one warning line naming the rows ``--max-per-source`` left out (``left_out``: :func:`left_out_by_cap`),
    per source and label, how the cap draws them, and how to keep them; nothing when it left none out. ``herald fit``
    trained a researcher's 400 rows of one source on 300 and said only "300 prompts after caps" (tester finding).

    Args:
        cap: the ``--max-per-source`` given; ``seed``: the ``--seed`` of the draw.
        recorded_in: where the run records every group (``probe.json's training_data.left_out_by_max_per_source``),
            named when the line shows only the largest :data:`CAP_GROUPS_LOGGED`; None: nowhere.
        rows: what the rows are, in the plural (``"--sensitive-data rows"``: ``herald recipes`` caps its held-out
            sets too, and said nothing of it: tester finding).
    """
    if not left_out or cap is None:
        return
    names = {value: name for name, value in LABELS.items()}
    largest = sorted(left_out.items(), key=lambda item: -item[1][0])
    shown = ", ".join(f"{source} {names[label]} {out} of {given}" for (source, label), (out, given)
                      in largest[:CAP_GROUPS_LOGGED])
    more = len(largest) - CAP_GROUPS_LOGGED
    if more > 0:
        shown += f" and {more} more group{'s' if more > 1 else ''}" + (f" ({recorded_in} lists each)" if recorded_in else "")
    total = sum(out for out, _ in left_out.values())
    log.warning("--max-per-source %d left out %d %s (at most %d per source and label, drawn with --seed %d): %s;"
                " give --max-per-source null to keep every row, or a larger N", cap, total,
                rows if total > 1 else rows.removesuffix("s"), cap, seed, shown)


def stratified_split(examples: list[Example], test_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into train/test, stratified by (source, label); groups of one row go to train.

    Returns:
        ``(train_index, test_index)`` int arrays.
    """
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, example in enumerate(examples):
        groups[(example.source, example.label)].append(i)
    rng = np.random.default_rng(seed)
    test = []
    for key in sorted(groups):
        members = np.array(groups[key])
        rng.shuffle(members)
        take = int(round(len(members) * test_fraction)) if len(members) > 1 else 0
        test.extend(members[:take].tolist())
    test_index = np.array(sorted(test), dtype=int)
    train_index = np.setdiff1d(np.arange(len(examples)), test_index)
    return train_index, test_index


def file_manifest(paths: list[Path]) -> list[dict]:
    """sha256 and row count of each data file, for the probe manifest (``training_data.files``).

    ``rows`` counts the lines the readers read as rows (:func:`row_lines`: blank lines skipped, a last line without a
    newline counted), not newlines: a trailing blank line counted as a row and a last row without a newline was missed
    (tester finding). A file that is not UTF-8 (refused by its reader before this runs) is counted with each bad byte
    read as U+FFFD.
    """
    out = []
    for path in paths:
        data = path.read_bytes()
        rows = len(row_lines(data.decode("utf-8-sig", errors="replace")))
        out.append({"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "rows": rows})
    return out


"""A copy of a labeled corpus with every prompt put inside the guard baseline's moderation instruction.

The sixth study of docs/eval/recipe_studies.md asks whether Herald's directions generalise better when the states are
read at the end of :data:`~herald_service.training.guard.GUARD_INSTRUCTION` (the prompt inside it, one user turn,
chat template, last token) than at the end of the prompt itself. ``herald eval --data <copy>`` on this copy reads those
states with everything else unchanged: the same rows, sources, labels, caps, splits and folds.

Run ``python -m herald_service.training.instruction_corpus <data folder or file> <out folder>``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from herald_service.strict_json import object_row
from herald_service.text_file import read_utf8
from herald_service.training.corpus import Example, expand_data, load_corpus, row_lines
from herald_service.training.guard import GUARD_INSTRUCTION


def instruction_row(row: dict, example: Example) -> dict:
    """``row`` (a corpus row: ``prompt``, ``label``, ``source``, optional ``context`` and ``category``) with the
    prompt as trained on (``example.prompt``: context and request joined, :func:`~.corpus.load_corpus`) put into
    :data:`GUARD_INSTRUCTION`'s ``{prompt}`` slot; ``context`` dropped, every other field kept."""
    out = {key: value for key, value in row.items() if key != "context"}
    out["prompt"] = GUARD_INSTRUCTION.format(prompt=example.prompt)
    return out


def write_instruction_corpus(data: Path, out: Path) -> list[Path]:
    """Write :func:`instruction_row` of every row of the corpus files of ``data`` (a folder or file, as ``--data``
    reads it: a folder's ``*.jsonl`` but the jailbreak templates) to the folder ``out``, one file per input file, same
    names. Every input is read and checked before anything is written, so a refusal leaves no partial copy.

    Returns:
        The files written, in input order.

    Raises:
        ValueError: ``out`` is a file or already holds files (nothing is replaced); or as
            :func:`~herald_service.training.corpus.expand_data` and :func:`~herald_service.training.corpus.load_corpus`
            raise it (a missing path, a row that is not a valid corpus row), naming the file and line.
        OSError: a file that cannot be read, or ``out`` that cannot be made or written.
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file: give a new or empty folder for the copy")
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: give a new or empty folder for the copy (nothing is replaced)")
    copies = {}
    for path in expand_data([data], option="data"):
        examples = load_corpus([path])  # checks every row; rows come in the same order as row_lines gives them
        copies[out / path.name] = [instruction_row(object_row(line, f"{path} line {number}", "a corpus row"), example)
                                   for (number, line), example in zip(row_lines(read_utf8(path)), examples, strict=True)]
    out.mkdir(parents=True, exist_ok=True)
    for target, rows in copies.items():
        target.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return list(copies)


def main(argv: list[str]) -> int:
    """The command line: ``<data folder or file> <out folder>``; one line on stderr and status 1 for a refusal."""
    if len(argv) != 2:
        print("usage: python -m herald_service.training.instruction_corpus <data folder or file> <out folder>",
              file=sys.stderr)
        return 2
    try:
        written = write_instruction_corpus(Path(argv[0]), Path(argv[1]))
    except (ValueError, OSError) as exc:
        print(f"instruction_corpus: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A copy of a labeled corpus with every prompt put inside the guard baseline's moderation instruction.

The sixth study of docs/eval/recipe_studies.md asks whether Herald's directions generalise better when the states are
read at the end of :data:`~herald_service.training.guard.GUARD_INSTRUCTION` (the prompt inside it, one user turn,
chat template, last token) than at the end of the prompt itself. ``herald eval --data <copy>`` on this copy reads those
states with everything else unchanged: the same rows, sources, labels, caps, splits and folds.

Run ``python -m herald_service.training.instruction_corpus <data folder> <out folder>``.
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
    reads it: a folder's ``*.jsonl`` but the jailbreak templates) to ``out``, one file per input file, same names.

    Returns:
        The files written, in input order.

    Raises:
        FileExistsError: ``out`` holds a file of the same name (nothing is replaced).
        ValueError, OSError: as :func:`~herald_service.training.corpus.expand_data` and
            :func:`~herald_service.training.corpus.load_corpus` raise them (a missing path, a row that is not a valid
            corpus row), before anything of that file is written.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in expand_data([data]):
        target = out / path.name
        if target.exists():
            raise FileExistsError(f"{target} exists: give an empty --out folder")
        examples = load_corpus([path])  # checks every row; rows come in the same order as row_lines gives them
        rows = [instruction_row(object_row(line, f"{path} line {number}", "a corpus row"), example)
                for (number, line), example in zip(row_lines(read_utf8(path)), examples, strict=True)]
        target.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m herald_service.training.instruction_corpus <data folder or file> <out folder>")
    for written in write_instruction_corpus(Path(sys.argv[1]), Path(sys.argv[2])):
        print(written)

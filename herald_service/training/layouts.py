"""Prompts laid out as set-apart words (one word a line, words behind list markers, between separators, quoted), for
training rows and held-out sets of the layout study (docs/eval/trimmed_views.md, "Exploration: layouts in training"
and the fifteenth study of docs/eval/recipe_studies.md).

The served reading of set-apart words (:func:`~herald_service.prompt_text.spread_out_reading`) reads the layouts its
runs named, and each re-tester then passed requests in others. Fitting on prompts in some layouts (:data:`TRAIN_LAYOUTS`)
is the other road; :data:`HELD_LAYOUTS`, the tenth run's re-tester's layouts, are never trained on and judge it.

Run ``python -m herald_service.training.layouts <data folder> <out folder> [--seed 0] [--max-per-source 150]`` to
write the held-out sets for ``herald eval --test-data``: ``held_layouts_harmful.jsonl`` and
``held_layouts_benign.jsonl``, the format check's plain rows (:func:`~.format_wrapped.format_sets`: held-out
AdvBench / HarmBench requests and benign instruction prompts the per-source cap leaves out) in every held-out layout,
each row's source naming its layout.
"""

from __future__ import annotations

import json
from typing import Callable

from herald_service.training.attacks import WrappedRow
from herald_service.training.corpus import Example
from herald_service.training.augmentation import (
    augmentation_rows, dressed_copies, held_out_dressed_sets, write_held_out_sets,
)


def _lines(prompt: str, size: int, marker: Callable[[int], str] = lambda i: "", end: str = "") -> str:
    words = prompt.split()
    return "\n".join(marker(k) + " ".join(words[i:i + size]) + end for k, i in enumerate(range(0, len(words), size)))


TRAIN_LAYOUTS: dict[str, Callable[[str], str]] = {
    "one_per_line": lambda p: _lines(p, 1),
    "two_per_line_dash": lambda p: _lines(p, 2, lambda i: "- "),
    "pipes": lambda p: " | ".join(p.split()),
    "quoted": lambda p: " ".join(f'"{w}"' for w in p.split()),
    "numbered_one": lambda p: _lines(p, 1, lambda i: f"{i + 1}. "),
}
"""Layouts of training rows: one word a line, two words behind ``- ``, `` | `` between words, each word quoted,
``1.`` before each word."""

HELD_LAYOUTS: dict[str, Callable[[str], str]] = {
    "three_dash": lambda p: _lines(p, 3, lambda i: "- "),
    "brackets_one": lambda p: _lines(p, 1, lambda i: f"[{i + 1}] "),
    "step_one": lambda p: _lines(p, 1, lambda i: f"Step {i + 1}: "),
    "comma_lines": lambda p: _lines(p, 1, end=","),
    "json": lambda p: json.dumps(p.split(), separators=(",", ":")),
    "br": lambda p: "<br>".join(p.split()),
    "amp": lambda p: " & ".join(p.split()),
    "sep_lines": lambda p: "\n---\n".join(p.split()),
    "four_per_line": lambda p: _lines(p, 4),
}
"""Layouts with which the re-tester of the tenth run's served reading passed held-out requests (most of their rows:
docs/eval/trimmed_views.md); never in training."""

LAYOUT_HARMFUL_SOURCE = "Set-apart-word training requests (augmentation)"
LAYOUT_BENIGN_SOURCE = "Set-apart-word benign training prompts (augmentation)"
LAYOUT_QUESTIONS_SOURCE = "Set-apart-word written questions (augmentation)"


def training_rows(train_rows: list[Example], per_class: int, seed: int = 0) -> list[WrappedRow]:
    """Training prompts in :data:`TRAIN_LAYOUTS`: ``2 * per_class`` rows of each label, for
    ``herald eval --layout-train-per-class``, drawn as ``--format-train-per-class`` draws its rows
    (:func:`.augmentation.augmentation_rows`: requests half from each request source, benign prompts from
    :data:`~.augmentation.BENIGN_SOURCES`, a fold never trained on a row made from its held-out source); each row's
    layout is drawn at random, ``WrappedRow.template`` its index in :data:`TRAIN_LAYOUTS`.

    Args:
        train_rows: the random split's training rows (never the held-out sets': those lay out rows the cap left out).

    Raises:
        ValueError: ``train_rows`` has no row of a request source or of any benign source.
    """
    layouts = list(TRAIN_LAYOUTS.values())
    return augmentation_rows(train_rows, per_class, seed, len(layouts), lambda prompt, index: layouts[index](prompt),
                             (LAYOUT_BENIGN_SOURCE, LAYOUT_HARMFUL_SOURCE), "layout-train", "lay out as set-apart words")


def laid_out_questions(questions: list[Example], seed: int = 0) -> list[Example]:
    """Each written question (:mod:`.loaded_questions`: the benign loaded-word questions, their harmful counterparts,
    the everyday how-to questions, as ``--loaded-questions`` and its companions add them) once more, laid out in a
    :data:`TRAIN_LAYOUTS` layout drawn at random with ``seed``, its label kept, for ``herald eval --layout-questions``
    (docs/eval/recipe_studies.md, sixteenth study): the same words in the same layouts under both labels, so that a
    layout alone says nothing of a prompt's label.

    Returns:
        one row a question, in ``questions``' order, the source :data:`LAYOUT_QUESTIONS_SOURCE`.
    """
    return dressed_copies(questions, list(TRAIN_LAYOUTS.values()), seed, LAYOUT_QUESTIONS_SOURCE, "layout-questions")


def held_out_layout_sets(examples: list[Example], max_per_source: int | None = 150, seed: int = 0
                         ) -> dict[str, list[dict]]:
    """``held_layouts_harmful.jsonl`` and ``held_layouts_benign.jsonl``: corpus-style rows (``prompt``, ``label``,
    ``source``) of the format check's plain rows in every layout of :data:`HELD_LAYOUTS`, the source
    ``"<layout> layout"``."""
    return held_out_dressed_sets(examples, HELD_LAYOUTS, "held_layouts", "layout", max_per_source, seed)


def main(argv: list[str] | None = None) -> int:
    return write_held_out_sets(argv, "python -m herald_service.training.layouts", __doc__.split("\n\n")[0], held_out_layout_sets)


if __name__ == "__main__":
    raise SystemExit(main())

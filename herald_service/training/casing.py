"""Prompts written casually (a small first letter and no end mark, or every letter small), for the training rows and
held-out sets of the seventeenth recipe study (docs/eval/recipe_studies.md) and the fourteenth views run
(docs/eval/trimmed_views.md).

The corpus's harmful requests are written as sentences and its real chat is not (of the rows the per-source cap leaves
out, 0-1% of AdvBench, HarmBench and Do-Not-Answer start with a small letter; ShareGPT V3 41%, ChatterBot 39%), so a
probe fitted on it reads case as a label: 120 training-side requests were flagged 94.2% as written and 60.0% in the
casual form (trimmed_views.md, fourteenth run). Reading them in sentence case at serving time failed its rule there
(benign sensitive questions written in small letters were flagged with the requests); fitting on rows of both labels
in these forms is the other road.

Run ``python -m herald_service.training.casing <data folder> <out folder> [--seed 0] [--max-per-source 150]`` to write
the held-out sets for ``herald eval --test-data``: ``held_casual_harmful.jsonl`` and ``held_casual_benign.jsonl``, the
format check's plain rows (:func:`~.format_wrapped.format_sets`: held-out AdvBench / HarmBench requests and benign
instruction prompts the per-source cap leaves out) in each form of :data:`FORMS`, each row's source naming its form.
"""

from __future__ import annotations

import re
from typing import Callable

from herald_service.training.attacks import WrappedRow
from herald_service.training.augmentation import (
    augmentation_rows, dressed_copies, held_out_dressed_sets, write_held_out_sets,
)
from herald_service.training.corpus import Example

END_MARKS = re.compile(r"[.?!]+$")
"""A run of full stops, question and exclamation marks at the end of a text."""


def casual(prompt: str) -> str:
    """``prompt`` with a small first letter and no ``.``, ``?`` or ``!`` at its end ("How do I pick a lock?" -> "how do
    I pick a lock")."""
    text = END_MARKS.sub("", prompt.strip())
    return text[:1].lower() + text[1:]


def lower(prompt: str) -> str:
    """``prompt`` in small letters, with no ``.``, ``?`` or ``!`` at its end."""
    return END_MARKS.sub("", prompt.strip()).lower()


FORMS: dict[str, Callable[[str], str]] = {"casual": casual, "lower": lower}
"""Each casual form (written with the fourteenth views run's rule, before any held-out run)."""

CASUAL_HARMFUL_SOURCE = "Casually written training requests (augmentation)"
CASUAL_BENIGN_SOURCE = "Casually written benign training prompts (augmentation)"


def training_rows(train_rows: list[Example], per_class: int, seed: int = 0) -> list[WrappedRow]:
    """Training prompts in a casual form: ``2 * per_class`` rows of each label, for ``herald eval
    --casual-train-per-class``, drawn as ``--format-train-per-class`` draws its rows
    (:func:`.augmentation.augmentation_rows`: requests half from each request source, benign prompts from
    :data:`~.augmentation.BENIGN_SOURCES`, a fold never trained on a row made from its held-out source); each row's
    form is drawn at random, ``WrappedRow.template`` its index in :data:`FORMS`.

    Args:
        train_rows: the random split's training rows (never the held-out sets': those are made from rows the cap
            leaves out).

    Raises:
        ValueError: ``train_rows`` has no row of a request source or of any benign source.
    """
    forms = list(FORMS.values())
    return augmentation_rows(train_rows, per_class, seed, len(forms), lambda prompt, index: forms[index](prompt),
                             (CASUAL_BENIGN_SOURCE, CASUAL_HARMFUL_SOURCE), "casual-train", "write casually")


CASUAL_QUESTIONS_SOURCE = "Casually written written questions (augmentation)"


def casual_questions(questions: list[Example], seed: int = 0) -> list[Example]:
    """Each written question (:mod:`.loaded_questions`: the benign loaded-word questions, their harmful counterparts,
    the everyday how-to questions, as ``--loaded-questions`` and its companions add them) once more in a form of
    :data:`FORMS` drawn at random with ``seed``, its label kept, for ``herald eval --casual-questions``
    (docs/eval/recipe_studies.md, eighteenth study): the same words written casually under both labels, so that case
    alone says nothing of a prompt's label.

    Returns:
        one row a question, in ``questions``' order, the source :data:`CASUAL_QUESTIONS_SOURCE`.
    """
    return dressed_copies(questions, list(FORMS.values()), seed, CASUAL_QUESTIONS_SOURCE, "casual-questions")


def held_out_casual_sets(examples: list[Example], max_per_source: int | None = 150, seed: int = 0
                         ) -> dict[str, list[dict]]:
    """``held_casual_harmful.jsonl`` and ``held_casual_benign.jsonl``: corpus-style rows (``prompt``, ``label``,
    ``source``) of the format check's plain rows in every form of :data:`FORMS`, the source ``"<form> form"``."""
    return held_out_dressed_sets(examples, FORMS, "held_casual", "form", max_per_source, seed)


def main(argv: list[str] | None = None) -> int:
    return write_held_out_sets(argv, "python -m herald_service.training.casing", __doc__.split("\n\n")[0], held_out_casual_sets)


if __name__ == "__main__":
    raise SystemExit(main())

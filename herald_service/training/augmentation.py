"""Training rows dressed from the training split's own prompts: the one sampler behind the format-instruction
(:func:`.format_wrapped.training_rows`), layout (:func:`.layouts.training_rows`) and casual-writing
(:func:`.casing.training_rows`) recipes of ``herald eval``, and the writer of their held-out sets.

Each draws harmful requests half from each of :data:`~.attacks.REQUEST_SOURCES` and benign prompts from
:data:`BENIGN_SOURCES`, so a leave-one-source-out fold still finds its rows when one source is held out
(:func:`~.attacks.fold_rows` never trains on a row made from the held-out source).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from herald_service.training.attacks import REQUEST_SOURCES, WrappedRow
from herald_service.training.corpus import Example

BENIGN_SOURCES = (
    "AlpacaEval", "Arena-Hard-Auto v2.0", "IFEval", "IFBench", "WritingBench (via inspect_evals)",
    "ShareGPT V3 (unfiltered_cleaned_split, later user turns: how/can-you questions, filtered)",
    "TruthfulQA (questions, via Project Moonshot)",
)
"""Benign instruction and help-seeking sources, where a user writes a format instruction or lays a prompt out (the
chit-chat and jailbreak-adjacent sources are not): the augmentation recipes dress their training rows, and the format
check (:func:`.format_wrapped.format_sets`) wraps their left-out rows."""


def augmentation_rows(train_rows: list[Example], per_class: int, seed: int, variants: int,
                      dress: Callable[[str, int], str], sources: tuple[str, str], file: str, verb: str
                      ) -> list[WrappedRow]:
    """``2 * per_class`` training rows of each label, each a training prompt dressed in one of ``variants`` ways
    (``dress(prompt, index)``, the index drawn at random and kept as ``WrappedRow.template``), in random order.

    Harmful rows dress :data:`~.attacks.REQUEST_SOURCES` requests, half from each source, so the fold that holds one
    of them out (:func:`~.attacks.fold_rows`: never a row made from the held-out source) still finds ``per_class``;
    benign rows dress :data:`BENIGN_SOURCES` prompts. Requests are reused when a source has fewer rows, and a reused
    request may meet the same variant again.

    Args:
        sources: the rows' source names, (benign, harmful); ``file``: their ``Example.file``; ``verb``: what is done to
            a row, for the error.

    Raises:
        ValueError: ``train_rows`` has no row of a request source or of any benign source.
    """
    rng = np.random.default_rng(seed)
    out = []
    cells = [(1, (source,), per_class) for source in REQUEST_SOURCES] + [(0, BENIGN_SOURCES, 2 * per_class)]
    for label, from_sources, n in cells:
        pool = [e for e in train_rows if e.label == label and e.source in from_sources]
        if not pool:
            raise ValueError(f"no training row of {', '.join(from_sources)} to {verb}")
        order = rng.permutation(len(pool))
        for j in range(n):
            e = pool[order[j % len(pool)]]
            index = int(rng.integers(variants))
            out.append(WrappedRow(Example(dress(e.prompt, index), label, sources[label], e.source, file), e.source,
                                  index, False, e.prompt))
    return [out[j] for j in rng.permutation(len(out))]


def dressed_copies(questions: list[Example], dressings: list[Callable[[str], str]], seed: int, source: str,
                   file: str) -> list[Example]:
    """Each of ``questions`` once more, dressed by one of ``dressings`` drawn at random with ``seed``, its label and
    category kept, the source ``source`` and file ``file``: the written questions laid out
    (:func:`.layouts.laid_out_questions`) or written casually (:func:`.casing.casual_questions`)."""
    rng = np.random.default_rng(seed)
    return [Example(dressings[int(rng.integers(len(dressings)))](q.prompt), q.label, source, q.category, file)
            for q in questions]


def held_out_dressed_sets(examples: list[Example], dressings: dict[str, Callable[[str], str]], stem: str, kind: str,
                          max_per_source: int | None = 150, seed: int = 0) -> dict[str, list[dict]]:
    """``<stem>_harmful.jsonl`` and ``<stem>_benign.jsonl``: corpus-style rows (``prompt``, ``label``, ``source``) of
    the format check's plain rows (:func:`.format_wrapped.format_sets`: held-out AdvBench / HarmBench requests and
    benign instruction prompts the per-source cap leaves out) dressed in each of ``dressings`` in turn, the source
    ``"<name> <kind>"`` (``"three_dash layout"``, ``"casual form"``)."""
    from herald_service.training.format_wrapped import format_sets

    sets = format_sets(examples, max_per_source, seed)
    out = {}
    for label in ("harmful", "benign"):
        rows = [r["prompt"].strip() for r in sets[f"format_{label}_plain.jsonl"]]
        out[f"{stem}_{label}.jsonl"] = [{"prompt": dress(p), "label": label, "source": f"{name} {kind}"}
                                        for name, dress in dressings.items() for p in rows]
    return out


def write_held_out_sets(argv: list[str] | None, prog: str, description: str,
                        make_sets: Callable[[list[Example], int | None, int], dict[str, list[dict]]]) -> int:
    """The command line of a module that writes held-out sets for ``herald eval --test-data``: ``<data folder> <out
    folder> [--seed 0] [--max-per-source 150]``; ``make_sets(examples, max_per_source, seed)`` gives each file's rows.
    Prints each file written and its row count; returns the exit status."""
    import argparse
    import json
    from pathlib import Path

    from herald_service.training.corpus import expand_data, load_corpus

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("data", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-per-source", type=int, default=150)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in make_sets(load_corpus(expand_data([args.data])), args.max_per_source, args.seed).items():
        (args.out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(args.out / name, len(rows))
    return 0

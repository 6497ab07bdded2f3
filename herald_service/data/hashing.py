"""The two hashes of the corpus: one per row (for keep lists) and one over a folder of JSONL files."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path


def row_hash(row: dict) -> str:
    """sha256 (hex) of a row's prompt text as UTF-8: the key of the keep lists under ``herald_service/data/keep/``."""
    return hashlib.sha256(row["prompt"].encode("utf-8")).hexdigest()


def corpus_files(paths: Iterable[Path]) -> list[Path]:
    """The JSONL files of a corpus: a folder stands for all its ``*.jsonl``, a file for itself; each file once (by
    resolved path: ``--data data --data data/a.jsonl`` reads a.jsonl's rows once, and hashed them twice, so the same
    rows were recorded under another hash: tester finding); sorted by name."""
    files: dict[Path, Path] = {}
    for path in paths:
        for file in (path.glob("*.jsonl") if path.is_dir() else [path]):
            files.setdefault(file.resolve(), file)
    return sorted(files.values(), key=lambda p: p.name)


def corpus_sha256(paths: Iterable[Path]) -> str:
    """One sha256 (hex) over the corpus files' names and bytes, in name order (see :func:`corpus_files`).

    This is ``corpus_sha256`` in ``MANIFEST.json`` and in a probe's ``training_data``: equal hashes mean byte-equal
    corpora. ``SOURCES.md`` and ``MANIFEST.json`` are not part of it.
    """
    digest = hashlib.sha256()
    for path in corpus_files(paths):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()

"""Labeled prompt corpus: JSONL rows ``{"prompt", "label", "source", "category"?, "context"?}`` (``shared/data``)."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LABELS = {"benign": 0, "harmful": 1}
JAILBREAK_TEMPLATE_FILE = "pyrit_jailbreak_templates.jsonl"
"""Wrappers with a ``{{ prompt }}`` slot, not prompts: left out of ``herald fit`` by default (SOURCES.md)."""


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
    """Read labeled JSONL files.

    Raises:
        ValueError: naming the file and line of a row without ``prompt``/``label``/``source`` or with an unknown label.
    """
    examples = []
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if not {"prompt", "label", "source"} <= row.keys() or row["label"] not in LABELS:
                    raise ValueError(f"{path}:{number}: need prompt, source and label in {sorted(LABELS)}")
                category = row.get("category")
                examples.append(
                    Example(_prompt_text(row), LABELS[row["label"]], row["source"], category if isinstance(category, str) else None, path.name)
                )
    return examples


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
    """sha256 and row count of each data file, for the probe manifest."""
    out = []
    for path in paths:
        data = path.read_bytes()
        out.append({"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "rows": data.count(b"\n")})
    return out


"""Attack sets built from the corpus: harmful requests wrapped in jailbreak templates.

``pyrit_jailbreak_templates.jsonl`` rows are wrappers with a ``{{ prompt }}`` slot (SOURCES.md). We fill each picked
template with one harmful request that is *not* in the training pool (rows the per-source cap left out), so a probe
cannot have seen the request itself. Templates with extra slots are skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from herald_service.training.corpus import Example

SLOT = re.compile(r"\{\{\s*prompt\s*\}\}")
OTHER_SLOT = re.compile(r"\{\{\s*(?!prompt\s*\}\})\w+\s*\}\}")
JAILBREAK_SOURCE = "Jailbreak-wrapped held-out harmful requests (PyRIT templates)"
REQUEST_SOURCES = ("AdvBench", "HarmBench")


def load_templates(path: Path, max_chars: int | None = None) -> list[dict]:
    """Template rows with exactly the ``{{ prompt }}`` slot (and no other), optionally at most ``max_chars`` long."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    keep = [r for r in rows if SLOT.search(r["prompt"]) and not OTHER_SLOT.search(r["prompt"])]
    return [r for r in keep if max_chars is None or len(r["prompt"]) <= max_chars]


def held_out_requests(all_examples: list[Example], training_pool: list[Example]) -> list[Example]:
    """Harmful AdvBench / HarmBench-standard requests absent from the training pool (by prompt text)."""
    seen = {e.prompt for e in training_pool}
    return [
        e for e in all_examples
        if e.label == 1 and e.source in REQUEST_SOURCES and e.prompt not in seen
        and (e.category or "") not in {"copyright"} and "\n\n" not in e.prompt  # contextual rows carry long context
    ]


def wrap_requests(templates: list[dict], requests: list[Example], n: int, seed: int = 0) -> list[Example]:
    """``n`` harmful examples: template i (random order) filled with request i (random order)."""
    rng = np.random.default_rng(seed)
    t_order = rng.permutation(len(templates))[:n]
    r_order = rng.permutation(len(requests))[:n]
    out = []
    for ti, ri in zip(t_order, r_order):
        template = templates[ti]
        text = SLOT.sub(lambda _: requests[ri].prompt, template["prompt"])
        out.append(Example(text, 1, JAILBREAK_SOURCE, template.get("template_source") or template.get("category"), "jailbreak"))
    return out

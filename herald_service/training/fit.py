"""``herald fit``: extract states, fit directions and scorer, calibrate, evaluate on a held-out split, save."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.loader import resolve_backbone
from herald_service.data.hashing import corpus_sha256
from herald_service.probes.artifact import backbone_manifest, save_probe
from herald_service.probes.directions import DIRECTION_ESTIMATORS, LOGISTIC_C
from herald_service.probes.features import FEATURE_SET, get_feature_set
from herald_service.probes.probe import HeraldProbe, balanced_weights
from herald_service.training.corpus import (
    cap_per_group,
    expand_data,
    file_manifest,
    load_corpus,
    require_both_labels,
    stratified_split,
)
from herald_service.training.evaluation import metrics_by_source
from herald_service.training.extract import StateCache, extract_corpus_states

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitOptions:
    """Inputs of one fit run (mirrors the ``herald fit`` flags)."""

    data: list[Path]
    backbone: str
    out: Path | None
    cache_dir: Path
    device: str = "auto"
    dtype: str = "auto"
    max_per_source: int | None = 150
    max_tokens: int = 1024
    test_fraction: float = 0.2
    threshold_method: str = "max_f1"
    target_fpr: float = 0.01
    seed: int = 0
    feature_set: str = FEATURE_SET
    """Trajectory features of the scorer (a name in ``FEATURE_SETS``); recorded in the manifest."""
    direction_estimator: str = DIRECTION_ESTIMATORS[0]
    """Per-layer direction estimator (a name in ``DIRECTION_ESTIMATORS``); recorded in the manifest."""
    token_budget: int = 4096
    command: str | None = None
    """The command line to record in the manifest (``herald fit ...``); None outside the CLI."""


def direction_manifest(estimator: str) -> dict:
    """The manifest's record of how the per-layer directions were fitted (probe.json ``directions``).

    Raises:
        ValueError: for a name not in ``DIRECTION_ESTIMATORS``.
    """
    if estimator == "logistic":
        return {"estimator": "logistic", "C": LOGISTIC_C, "standardized": True,
                "sample_weighting": "each (source, label) group of the fit rows has equal total weight within its class",
                "source": "docs/eval/direction_estimators.md, round 2"}
    if estimator == "lda":
        return {"estimator": "lda", "shrinkage": "ledoit-wolf", "source": "DESIGN section 1.3"}
    raise ValueError(f"direction_estimator must be one of {', '.join(DIRECTION_ESTIMATORS)}; got {estimator!r}")


def run_fit(options: FitOptions) -> dict:
    """Fit and save a probe; returns the manifest written to ``probe.json``.

    Raises:
        BackboneError: if the backbone cannot be loaded.
        ValueError: if the data has one class only, the feature set or direction estimator is unknown, or a data
            path is missing or a row unreadable (:func:`~herald_service.training.corpus.load_corpus` names file and
            line); the last two before the backbone loads.
    """
    started = time.perf_counter()
    get_feature_set(options.feature_set)  # refuse an unknown name before any extraction
    direction_manifest(options.direction_estimator)  # likewise
    files = expand_data(options.data)
    rows = load_corpus(files)  # before the backbone: a bad row is named in a second, not after the load
    require_both_labels(rows, files)
    backbone = HFBackbone(resolve_backbone(options.backbone, options.cache_dir), options.device, options.dtype)
    out = options.out or Path("models") / backbone.info.slug
    capped = cap_per_group(rows, options.max_per_source, options.seed)
    corpus = extract_corpus_states(
        backbone, capped, StateCache(options.cache_dir, backbone), options.max_tokens, options.token_budget
    )
    examples, states, tokens = corpus.examples, corpus.states, corpus.tokens
    log.info("%d prompts after caps (%d over %d tokens skipped)", len(examples), sum(corpus.skipped.values()), options.max_tokens)
    labels = np.array([e.label for e in examples])
    sources = [e.source for e in examples]
    train, test = stratified_split(examples, options.test_fraction, options.seed)
    groups = np.array([f"{e.source}|{e.label}" for e in examples])
    weights = balanced_weights(groups[train], labels[train])
    probe = HeraldProbe(threshold_method=options.threshold_method, target_fpr=options.target_fpr, seed=options.seed,
                        feature_set=options.feature_set, direction_estimator=options.direction_estimator)
    probe.fit(states[train], labels[train], groups=groups[train], sample_weight=weights)
    held_out = probe.predict(states[test])
    metrics = metrics_by_source(labels[test], held_out.scores, held_out.flagged, [sources[i] for i in test])

    counts = Counter((e.source, "harmful" if e.label else "benign") for e in examples)
    manifest = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": options.command,  # where it always was (/v1/info shows it); training_data repeats it
        "backbone": backbone_manifest(backbone.info),
        "training_data": {
            "files": file_manifest(files),
            # The corpus the files came from (a --data folder means all its *.jsonl, the jailbreak templates
            # included): equal to MANIFEST.json's corpus_sha256 when the folder was made by `herald data build`.
            "corpus_sha256": corpus_sha256(options.data),
            "command": options.command,
            "max_per_source_and_label": options.max_per_source,
            "max_tokens": options.max_tokens,
            "skipped_over_max_tokens": corpus.skipped,
            "seed": options.seed,
            "counts": [{"source": s, "label": l, "n": n} for (s, l), n in sorted(counts.items())],
            "split": {"method": "stratified by (source, label)", "test_fraction": options.test_fraction,
                      "train": int(len(train)), "test": int(len(test)),
                      "calibration": int(len(probe.calibration_index_))},
            "sample_weighting": "each (source, label) group has equal total weight within its class",
        },
        "directions": direction_manifest(options.direction_estimator),
        "evaluation": {"split": "held-out (random, stratified by source and label)", **metrics},
        "fit_seconds": round(time.perf_counter() - started, 1),
        "mean_prompt_tokens": float(tokens.mean()),
    }
    save_probe(probe.fitted_, out, manifest)
    return {**manifest, "out": str(out)}

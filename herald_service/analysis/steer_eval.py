"""Refusal rate with and without directional ablation of the harm direction over a prompt file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from tqdm import tqdm

from herald_service.backbone.base import Intervention
from herald_service.engine.runtime import Runtime
from herald_service.refusal import is_refusal
from herald_service.types import user_turn


@dataclass(frozen=True)
class SteerEvalRow:
    """One prompt's greedy completions without (``baseline_``) and with (``steered_``) the intervention, whether each
    reads as a refusal (:func:`~herald_service.refusal.is_refusal`), and the probe's score in [0, 1] of the prompt
    without and with it."""

    prompt: str
    baseline_completion: str
    steered_completion: str
    baseline_refused: bool
    steered_refused: bool
    baseline_score: float
    steered_score: float


@dataclass(frozen=True)
class SteerEvalResult:
    """Refusal rates in [0, 1] over ``n`` prompts, and the mean probe score before and after the intervention;
    ``rows``: each prompt's completions, judgments and scores, in file order (a researcher reads the completions, not
    only the rates)."""

    n: int
    layers: list[int]
    mode: str
    baseline_refusal_rate: float
    steered_refusal_rate: float
    baseline_mean_score: float
    steered_mean_score: float
    rows: list[SteerEvalRow]


def steer_eval(
    runtime: Runtime,
    prompts: Sequence[str],
    layers: list[int] | None = None,
    mode: Literal["ablate", "add"] = "ablate",
    alpha: float = 0.0,
    max_new_tokens: int = 48,
) -> SteerEvalResult:
    """Greedy completions of every prompt with and without the intervention; refusals by substring match.

    The completions continue each prompt as written (``Backbone.encode`` with ``fold=False``: "Crème brûlée" came
    back "Creme brulee", tester finding); the scores read it folded, as ``herald classify`` and /classify do.

    Args:
        layers: 1-based layers; default: the probe's peak-monotonicity layer.
    """
    chosen = layers or [runtime.probe.peak_layer]
    d = runtime.probe.directions
    intervention = Intervention(mode, tuple(chosen), d.directions.astype(np.float32), d.scales, alpha)
    backbone = runtime.backbone
    refused = np.zeros((len(prompts), 2), dtype=bool)
    scores = np.zeros((len(prompts), 2))
    rows = []
    for i, prompt in enumerate(tqdm(prompts, desc="steer-eval", unit="prompt")):
        (ids,) = backbone.encode([user_turn(prompt)])
        (as_sent,) = backbone.encode([user_turn(prompt)], fold=False)
        texts = []
        for j, edit in enumerate((None, intervention)):
            texts.append(backbone.generate(as_sent, max_new_tokens, edit).text)
            refused[i, j] = is_refusal(texts[-1])
            scores[i, j] = runtime.probe.predict(backbone.last_token_states([ids], edit)).scores[0]
        rows.append(SteerEvalRow(prompt, texts[0], texts[1], bool(refused[i, 0]), bool(refused[i, 1]),
                                 float(scores[i, 0]), float(scores[i, 1])))
    return SteerEvalResult(
        len(prompts), chosen, mode,
        float(refused[:, 0].mean()), float(refused[:, 1].mean()),
        float(scores[:, 0].mean()), float(scores[:, 1].mean()),
        rows,
    )

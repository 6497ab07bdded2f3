"""Refusal rate with and without directional ablation of the harm direction over a prompt file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from tqdm import tqdm

from herald_service.backbone.base import Intervention, check_generation_fits
from herald_service.engine.runtime import Runtime
from herald_service.refusal import is_refusal


class SteerEvalInterrupted(KeyboardInterrupt):
    """Ctrl+C during :func:`steer_eval`: ``done`` of ``total`` prompts had both completions; nothing is returned.
    A ``KeyboardInterrupt``, so that a caller that does not look for it still exits as on any Ctrl+C."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"interrupted after {done} of {total} prompts")
        self.done, self.total = done, total


@dataclass(frozen=True)
class SteerEvalRow:
    """One prompt's greedy completions without (``baseline_``) and with (``steered_``) the intervention, whether each
    reads as a refusal (:func:`~herald_service.refusal.is_refusal`), the probe's score in [0, 1] of the prompt
    without and with it, and the row's ``label`` (the corpus JSONL field, ``"harmful"``/``"benign"``; ``None``: the
    row had none)."""

    prompt: str
    baseline_completion: str
    steered_completion: str
    baseline_refused: bool
    steered_refused: bool
    baseline_score: float
    steered_score: float
    label: str | None = None


@dataclass(frozen=True)
class LabelRates:
    """Refusal rates in [0, 1] and mean probe scores of the ``n`` prompts of one label."""

    n: int
    baseline_refusal_rate: float
    steered_refusal_rate: float
    baseline_mean_score: float
    steered_mean_score: float


@dataclass(frozen=True)
class SteerEvalResult:
    """Refusal rates in [0, 1] over ``n`` prompts, and the mean probe score before and after the intervention, with
    the options that define the run (``mode``, ``alpha``, ``layers``, ``max_new_tokens``); ``by_label``: the same per
    row label (empty when no row carries one; rows without a label count in the pooled rates only); ``rows``: each
    prompt's completions, judgments and scores, in file order (a researcher reads the completions, not only the
    rates)."""

    n: int
    layers: list[int]
    mode: str
    alpha: float
    max_new_tokens: int
    baseline_refusal_rate: float
    steered_refusal_rate: float
    baseline_mean_score: float
    steered_mean_score: float
    by_label: dict[str, LabelRates]
    rows: list[SteerEvalRow]


def _rates(refused: np.ndarray, scores: np.ndarray) -> LabelRates:
    """Rates of ``refused`` ``(n, 2)`` bool and means of ``scores`` ``(n, 2)`` float (columns: baseline, steered)."""
    return LabelRates(len(refused), float(refused[:, 0].mean()), float(refused[:, 1].mean()),
                      float(scores[:, 0].mean()), float(scores[:, 1].mean()))


def steer_eval(
    runtime: Runtime,
    prompts: Sequence[str],
    layers: list[int] | None = None,
    mode: Literal["ablate", "add"] = "ablate",
    alpha: float = 0.0,
    max_new_tokens: int = 48,
    labels: Sequence[str | None] | None = None,
    max_tokens: int | None = None,
    names: Sequence[str] | None = None,
    max_tokens_name: str = "max_tokens",
    max_new_tokens_name: str = "max_new_tokens",
) -> SteerEvalResult:
    """Greedy completions of every prompt with and without the intervention; refusals by substring match.

    The completions continue each prompt as written (``Backbone.encode`` with ``fold=False``: "Crème brûlée" came
    back "Creme brulee", tester finding); the scores read it folded, as ``herald classify`` and /classify do. Every
    prompt is tokenized both ways and checked against the token limit before the first generation (a 6,000-word line
    ran 117 s instead of being refused: tester finding).

    Args:
        prompts: the prompts, each one user turn.
        layers: 1-based layers; default: the probe's peak-monotonicity layer.
        labels: each prompt's label (``None`` for none), for :attr:`SteerEvalResult.by_label`; default: none.
        max_tokens, names, max_tokens_name: the token limit and how its refusal names a prompt and the setting, as
            :meth:`~herald_service.engine.runtime.Runtime.encode_texts` takes them.
        max_new_tokens_name: how the position-table refusal names ``max_new_tokens`` (``--max-new-tokens``).

    Raises:
        InputTooLarge: a prompt, folded or as sent, renders past the token limit, or one as sent and
            ``max_new_tokens`` pass the backbone's position table (no generation has run).
        SteerEvalInterrupted: Ctrl+C during the generations, saying how many prompts were done.
    """
    chosen = layers or [runtime.probe.peak_layer]
    d = runtime.probe.directions
    intervention = Intervention(mode, tuple(chosen), d.directions.astype(np.float32), d.scales, alpha)
    backbone = runtime.backbone
    labels = list(labels) if labels is not None else [None] * len(prompts)
    folded = runtime.encode_texts(prompts, max_tokens, names, max_tokens_name)
    as_sent = runtime.encode_texts(prompts, max_tokens, names, max_tokens_name, fold=False)
    for i, ids in enumerate(as_sent):  # past the position table: GPT-2's generation raised IndexError (tester)
        check_generation_fits(backbone, len(ids), max_new_tokens, names[i] if names is not None else f"prompt {i + 1}",
                              max_new_tokens_name)
    refused = np.zeros((len(prompts), 2), dtype=bool)
    scores = np.zeros((len(prompts), 2))
    rows = []
    try:
        for i, prompt in enumerate(tqdm(prompts, desc="steer-eval", unit="prompt")):
            texts = []
            for j, edit in enumerate((None, intervention)):
                texts.append(backbone.generate(as_sent[i], max_new_tokens, edit).text)
                refused[i, j] = is_refusal(texts[-1])
                scores[i, j] = runtime.probe.predict(backbone.last_token_states([folded[i]], edit)).scores[0]
            rows.append(SteerEvalRow(prompt, texts[0], texts[1], bool(refused[i, 0]), bool(refused[i, 1]),
                                     float(scores[i, 0]), float(scores[i, 1]), labels[i]))
    except KeyboardInterrupt:
        raise SteerEvalInterrupted(len(rows), len(prompts)) from None
    by_label = {}
    for label in sorted({label for label in labels if label is not None}):
        of_label = np.array([other == label for other in labels])
        by_label[label] = _rates(refused[of_label], scores[of_label])
    pooled = _rates(refused, scores)
    return SteerEvalResult(
        len(prompts), chosen, mode, alpha, max_new_tokens,
        pooled.baseline_refusal_rate, pooled.steered_refusal_rate, pooled.baseline_mean_score, pooled.steered_mean_score,
        by_label, rows,
    )

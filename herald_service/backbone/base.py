"""The backbone protocol the engine drives. Shapes: ``(batch, layer, d_model)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Protocol, Sequence

import numpy as np
import torch

from herald_service.errors import InputTooLarge
from herald_service.types import BackboneInfo, Conversation


@dataclass(frozen=True)
class Intervention:
    """A residual-stream edit applied at decoder-layer outputs during a forward pass (DESIGN section 1.7).

    Attributes:
        mode: ``"ablate"`` replaces h with ``h - (h . w) w``; ``"add"`` with ``h + alpha * sigma_l * w``.
        layers: 1-based decoder layers to edit.
        directions: ``(layer, d_model)`` unit harm directions of every layer (float).
        scales: ``(layer,)`` per-layer projection scale sigma_l, used by ``"add"``.
        alpha: multiple of sigma_l added along w (``"add"`` only).
    """

    mode: Literal["ablate", "add"]
    layers: tuple[int, ...]
    directions: np.ndarray
    scales: np.ndarray
    alpha: float = 0.0


@dataclass(frozen=True)
class Generation:
    """A greedy completion: its text (special tokens left out), how many tokens were generated (the prefill gives the
    first, each decode step one more), and whether decoding stopped at its time budget (``max_time_s``) before
    ``max_new_tokens`` or an end-of-sequence token; the text then holds what was generated until then."""

    text: str
    tokens: int
    cut_short: bool = False


def runs_in_chunks(tokens: int, chunk_tokens: int) -> bool:
    """Whether a prompt of ``tokens`` is prefilled in chunks of ``chunk_tokens`` (0: chunking off): it is longer than
    a chunk. The engine plans its batches by it, the warm-up times its shapes by it, and a /steer job's passes and
    generations (``Backbone.generate``) cut their prefills by it."""
    return 0 < chunk_tokens < tokens


def chunk_starts(token_ids: Sequence[int], chunk_tokens: int) -> range:
    """Start offsets of the chunks of a chunked prefill (``Backbone.prefill_chunks``): ``0, chunk_tokens, ...``.

    Raises:
        ValueError: ``chunk_tokens`` < 1 or an empty prompt.
    """
    if chunk_tokens < 1 or not token_ids:
        raise ValueError(f"chunk_tokens must be >= 1 and the prompt non-empty, got {chunk_tokens} and {len(token_ids)} tokens")
    return range(0, len(token_ids), chunk_tokens)


def position_table_key(backbone: object) -> str:
    """The config key of ``backbone``'s position table (``max_positions_key``: ``n_positions``, ``max_seq_len``, ...),
    as limits it sets are named; ``max_position_embeddings`` where the backbone does not say."""
    return getattr(backbone, "max_positions_key", None) or "max_position_embeddings"


def token_limit(backbone: object, max_tokens: int | None) -> tuple[int | None, str]:
    """The tokens a prompt may render to on ``backbone`` and the name of what sets it: ``max_tokens`` (the setting;
    ``None``: none) or the backbone's position table (``max_positions``, named by its config key
    ``max_positions_key``), whichever is smaller. Past its position table a model with learned positions fails on the
    device (for the whole batch) and one with rotary positions reads positions it was never trained on. A backbone
    without a position table (the fake) leaves ``max_tokens``."""
    positions = getattr(backbone, "max_positions", None)
    if positions is not None and (max_tokens is None or positions < max_tokens):
        return int(positions), f"the backbone's {position_table_key(backbone)}"
    return max_tokens, "max_tokens"


def check_generation_fits(backbone: object, prompt_tokens: int, max_new_tokens: int, prompt: str = "the prompt",
                          new_tokens_name: str = "max_new_tokens") -> None:
    """Refuse a generation of ``max_new_tokens`` new tokens after a prompt of ``prompt_tokens`` tokens that would run
    past ``backbone``'s position table (``max_positions``; none, as on the fake: nothing to check).

    Each new token takes the next position: past the table a model with learned positions fails on the device (GPT-2's
    ``wpe``: ``IndexError: index out of range in self``, a 500 on /steer and a traceback from ``herald steer-eval``)
    and a rotary one generates from positions it was never trained on (tester).

    Args:
        prompt: how the refusal names the prompt ("the prompt as sent", "prompts.txt line 3").
        new_tokens_name: how it names ``max_new_tokens`` (the request field; ``--max-new-tokens`` for the CLI).

    Raises:
        InputTooLarge: with field ``max_new_tokens``, naming it, the prompt's tokens, the position limit and its config
            key, and the most new tokens that prompt leaves room for (413).
    """
    positions = getattr(backbone, "max_positions", None)
    if positions is None or prompt_tokens + max_new_tokens <= positions:
        return
    room = positions - prompt_tokens
    advice = (f"ask for at most {room} new token{'s' if room > 1 else ''}, or shorten {prompt}" if room > 0
              else f"shorten {prompt}: it leaves no position for a new token")
    raise InputTooLarge(
        f"{new_tokens_name} {max_new_tokens} after {prompt}'s {prompt_tokens} tokens needs"
        f" {prompt_tokens + max_new_tokens} positions; the limit is {positions}"
        f" (the backbone's {position_table_key(backbone)}): {advice}",
        field="max_new_tokens")


class Backbone(Protocol):
    """What the engine needs from a model. Implementations: ``hf.HFBackbone``, ``fake.FakeBackbone``."""

    info: BackboneInfo
    packs_batches: bool
    """True when a batch costs its real tokens (packed/varlen layout) rather than rows x longest (padding)."""
    overlaps_host: bool
    """True when :meth:`launch_last_token_states` returns before the forward has finished (CUDA)."""

    def encode(self, conversations: Sequence[Conversation], fold: bool = True) -> list[list[int]]:
        """Normalize each message's text (:func:`herald_service.prompt_text.normalize_conversation`), render each
        conversation (chat template + generation prompt, or raw text) and tokenize it.

        ``fold=False`` skips the normalization: the template is rendered on the text as sent (accents, leetspeak and
        spaced-out letters kept), as /steer and ``herald steer-eval`` generate from it, so the model continues what
        the researcher wrote; Herald's verdicts always read the folded ids (``fold=True``). Control tokens spelled in
        a message are encoded as text either way."""
        ...

    def last_token_states(
        self, token_ids: Sequence[Sequence[int]], intervention: Intervention | None = None
    ) -> torch.Tensor:
        """One batched prefill; returns the last-token residual stream ``(batch, layer, d_model)`` float32, CPU."""
        ...

    def launch_last_token_states(
        self, token_ids: Sequence[Sequence[int]], reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> Callable[[], torch.Tensor]:
        """Start one batched prefill; the returned function waits for it and returns what ``last_token_states`` does,
        or, with ``reduce``, ``reduce(states)`` computed where the states are (on the device) and returned as float32
        on the CPU (the engine projects onto the harm directions there and copies ``(batch, layer)`` back, not
        ``(batch, layer, d_model)``)."""
        ...

    def prefill_chunks(
        self, token_ids: Sequence[int], chunk_tokens: int, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        intervention: Intervention | None = None,
    ) -> Iterator[torch.Tensor | None]:
        """Prefill one prompt ``chunk_tokens`` tokens at a time (a generator: one chunk per ``next()``, ``None`` after
        each chunk but the last, then what ``launch_last_token_states``' function returns for the prompt alone, or
        with ``intervention`` what ``last_token_states`` returns with it); the caller may run other batches between
        chunks, or ``close()`` it."""
        ...

    def generate(
        self, token_ids: Sequence[int], max_new_tokens: int, intervention: Intervention | None = None, max_time_s: float | None = None,
        stop: Callable[[], bool] | None = None, chunk_tokens: int = 0,
    ) -> Generation:
        """Greedy completion of one prompt, with the intervention active at every step. With ``max_time_s`` (seconds,
        counted from before the prefill), decoding stops after the step that passes it: the call can overrun it by
        one step (the prefill, when that alone passes it), and the answer says it was cut short. ``stop``, asked
        after every step, ends decoding the same way when it returns true (a /steer whose client left). A prompt
        longer than ``chunk_tokens`` (0: none) is prefilled that many tokens at a time, and ``stop`` is also asked
        between two chunks; stopped there, nothing was generated: ``Generation("", 0, cut_short=True)``."""
        ...

"""Core value types shared by every layer (plain frozen dataclasses; pydantic lives only at the HTTP edge)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

AS_SENT = "as sent (the generations read it without the fold)"
"""How a token-limit refusal of /steer and ``herald steer-eval`` names a prompt whose text as sent, which their
generations continue, renders past the limit (its folded form, which the verdicts read, may be shorter)."""

MIN_ADD_ALPHA = 1e-6
"""Smallest ``|alpha|`` of an ``"add"`` :class:`~herald_service.backbone.base.Intervention` that ``POST /steer`` and
``herald steer-eval`` accept. Smaller adds under a millionth of sigma_l along w_l, which no completion shows, so
steered read the same as baseline while the answer reported an edit: 1e-320 (a denormal) was accepted (tester
finding), as 0 had been."""


SteerLayers = list[int] | Literal["all"] | None
"""The ``layers`` of ``POST /steer`` and ``herald steer-eval --layers``: 1-based decoder layers, ``"all"`` of them,
or ``None`` for the probe's peak-monotonicity layer (:func:`steer_layers`)."""


def checked_steer_layers(layers: list[int], num_layers: int | None) -> list[int]:
    """The decoder layers an intervention edits (``POST /steer``'s ``layers``, ``herald steer-eval --layers``), sorted.

    Args:
        num_layers: the backbone's decoder layers; ``None`` before the backbone is loaded, which checks all but the
            upper bound (``herald steer-eval`` refuses ``--layers [0]`` then, not after a load of seconds).

    Raises:
        ValueError: an empty list, a layer outside ``1..num_layers`` (below 1, with ``num_layers`` None), or a layer
            listed more than once ("add" at ``[1, 1, 1]`` added three times: ``herald steer-eval`` ran it past the
            |alpha| limit, a researcher's pass; ``/steer`` had refused it since a breaker pass).
    """
    if num_layers is None:
        if not layers:
            raise ValueError("must be a non-empty list of 1-based layers (1 is the first decoder layer)")
        if below := [layer for layer in layers if layer < 1]:  # named, as above the top: "non-empty" misread [0]
            raise ValueError(f"lists {', '.join(map(str, below))}: layers are 1-based (1 is the first decoder layer)")
    elif not layers:
        raise ValueError(f"must be a non-empty list of layers within 1..{num_layers}")
    elif outside := [layer for layer in layers if not 1 <= layer <= num_layers]:
        raise ValueError(f"lists {', '.join(map(str, outside))}: layers must be within 1..{num_layers}"
                         " (1 is the first decoder layer)")
    repeated = sorted({layer for layer in layers if layers.count(layer) > 1})
    if repeated:
        raise ValueError(f"lists {', '.join(map(str, repeated))} more than once; list each layer once")
    return sorted(layers)


def steer_layers(layers: SteerLayers, num_layers: int, peak_layer: int) -> list[int]:
    """The sorted 1-based layers that ``layers`` (:data:`SteerLayers`) names on a backbone of ``num_layers``:
    ``"all"`` is ``1..num_layers``, ``None`` the probe's ``peak_layer``, a list is checked
    (:func:`checked_steer_layers`).

    Raises:
        ValueError: as :func:`checked_steer_layers`.
    """
    if layers == "all":
        return list(range(1, num_layers + 1))
    if layers is None:
        return [peak_layer]
    return checked_steer_layers(layers, num_layers)


@dataclass(frozen=True)
class Message:
    """One chat turn. ``parts``: the texts of the OpenAI content parts whose newline join is ``content``, when there
    are two or more (``POST /classify`` also scores each part of a conversation's messages alone:
    :func:`~herald_service.engine.service.message_views`); empty otherwise. Rendering reads ``content`` only."""

    role: str
    content: str
    parts: tuple[str, ...] = ()


Conversation = tuple[Message, ...]
"""A prompt: one user turn or a whole conversation, rendered with the backbone's chat template."""


def user_turn(text: str) -> Conversation:
    """A single-user-turn conversation."""
    return (Message("user", text),)


@dataclass(frozen=True)
class BackboneInfo:
    """Identity of a loaded backbone, recorded in and checked against a probe manifest (DESIGN section 2).

    Attributes:
        model_id: human-readable id (an HF repo id or a local path's name).
        revision: content hash of the weights source (sha256 of the GGUF file, or of the weight files' names and
            sizes for a folder).
        num_layers: decoder layers L.
        hidden_size: residual stream width d_model.
        config_hash: sha256 of the architecture-defining config keys (see ``backbone.loader.config_hash``).
        chat_template_hash: sha256 of the chat template text, or None when the backbone has none (raw text).
        slug: folder name under ``models/`` for this backbone's probe.
        device, dtype: where it runs and its weight dtype (the residual stream's).
        matmul_dtype: the dtype of the decoder's linear layers where it differs from ``dtype`` (``bfloat16``: bf16
            matrix multiplies over an fp32 residual stream,
            :func:`~herald_service.backbone.numerics.bf16_linear_layers`); ``None``: the same.
    """

    model_id: str
    revision: str
    num_layers: int
    hidden_size: int
    config_hash: str
    chat_template_hash: str | None
    slug: str
    device: str = "cpu"
    dtype: str = "float32"
    matmul_dtype: str | None = None


@dataclass(frozen=True)
class ProbeOutput:
    """Probe verdicts for a batch of prompts.

    Attributes:
        trajectories: ``(batch, layer)`` float64 normalized projections s_l.
        features: ``(batch, 7)`` float64 trajectory features of the probe's feature set, in its ``feature_names`` order.
        logits: ``(batch,)`` float64 scorer outputs before the threshold offset.
        scores: ``(batch,)`` float64 ``sigmoid(logit - threshold)`` in [0, 1].
        flagged: ``(batch,)`` bool, ``scores >= 0.5``.
        onset_layers: 1-based decoder layer from which s stays positive, or None.
        threshold: the probe's calibrated logit threshold.
        feature_names: names of the seven ``features`` columns (the probe's feature set).
    """

    trajectories: np.ndarray
    features: np.ndarray
    logits: np.ndarray
    scores: np.ndarray
    flagged: np.ndarray
    onset_layers: list[int | None]
    threshold: float
    feature_names: tuple[str, ...]


@dataclass
class Timing:
    """Seconds spent per stage for one prompt (feeds metrics and ``x-*-time`` headers)."""

    tokenize_s: float = 0.0
    queue_s: float = 0.0
    forward_s: float = 0.0
    score_s: float = 0.0
    batch_size: int = 0

    def merge(self, other: "Timing") -> "Timing":
        """Stage-wise max: a multi-prompt request waits for its slowest prompt in each stage."""
        return Timing(
            max(self.tokenize_s, other.tokenize_s),
            max(self.queue_s, other.queue_s),
            max(self.forward_s, other.forward_s),
            max(self.score_s, other.score_s),
            max(self.batch_size, other.batch_size),
        )


VIEW_KINDS = ("whole", "message", "content_part", "trimmed", "reading")
"""The prompts scored for one input (``engine.service.message_views``): the input whole, a message of a conversation
alone as a user turn, an OpenAI content part alone, a text without a short leading or trailing clause
(``herald_service.trimmed_views``), and a text read otherwise: with a one-letter word split off a spelled-out word
(``herald_service.prompt_text.spelled_out_reading``), or with words spread out or set apart (over lines, wide gaps,
separators, quotes, dots, underscores, emoji) read with single spaces (``herald_service.prompt_text.spread_out_reading``)."""


@dataclass(frozen=True)
class Classification:
    """One prompt's verdict as the engine returns it."""

    flagged: bool
    score: float
    logit: float
    threshold: float
    tokens: int
    features: dict[str, float]
    trajectory: list[float]
    onset_layer: int | None
    timing: Timing = field(default_factory=Timing, compare=False)
    view: str = field(default="whole", compare=False)
    """Which prompt of the input answered (:data:`VIEW_KINDS`): the input whole, or a text of it scored alone."""
    view_text: str | None = field(default=None, compare=False)
    """That text where it is not the input whole (a message, a content part, a trimmed view); None for the whole."""

"""Herald's attention functions for transformers' attention interface: the flash varlen kernel over packed prompts,
SDPA without a mask (the one-prompt CUDA graphs) and SDPA one right-padded row at a time (a prompt's states as alone
on the CPU). :class:`~herald_service.backbone.hf.HFBackbone` picks one per forward by its registered name."""

from __future__ import annotations

import contextvars
import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import nn

VARLEN_ATTENTION = "herald_varlen"
"""Name under which :func:`varlen_attention` is registered with transformers' attention interface."""


def varlen_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each prompt of a packed row, by PyTorch's flash-attention varlen kernel.

    A transformers attention function (``AttentionInterface``): ``query`` is ``(1, heads, tokens, head_dim)`` and
    ``key``/``value`` ``(1, kv_heads, tokens, head_dim)``, bf16 or fp16 on CUDA, holding several prompts back to back;
    ``kwargs`` carries ``herald_cu_seqlens`` (int32 ``(prompts + 1,)``, cumulative prompt lengths in tokens) and
    ``herald_max_len`` (tokens). Returns ``(1, tokens, heads, head_dim)``. No padding is computed and no mask is
    built: the kernel bounds each prompt by the offsets (``torch.nn.attention.varlen.varlen_attn``, PyTorch >= 2.10).
    Grouped-query key/value heads are repeated to the query heads (the 2.11 signature has no grouped-query option).
    Every position attends to its whole prompt: there is no sliding window, so
    :func:`~herald_service.backbone.numerics.resolve_padding_side` never picks this layout for a model that has one.
    """
    from torch.nn.attention.varlen import varlen_attn

    offsets, longest = kwargs["herald_cu_seqlens"], int(kwargs["herald_max_len"])  # type: ignore[arg-type]
    q, k, v = query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1)
    if k.shape[1] != q.shape[1]:
        # expand + reshape, not repeat_interleave: with an int count that one computes its output size on the host,
        # a device sync per call, i.e. two per layer, which stalls the GPU whenever this thread waits for the GIL.
        tokens, kv_heads, head_dim = k.shape
        group = q.shape[1] // kv_heads
        k = k[:, :, None, :].expand(tokens, kv_heads, group, head_dim).reshape(tokens, kv_heads * group, head_dim)
        v = v[:, :, None, :].expand(tokens, kv_heads, group, head_dim).reshape(tokens, kv_heads * group, head_dim)
    out = varlen_attn(q, k, v, offsets, offsets, longest, longest, scale=scaling, window_size=(-1, 0))
    return out.unsqueeze(0), None


CAUSAL_ATTENTION = "herald_causal"
"""Name under which :func:`causal_attention` is registered with transformers' attention interface."""


def causal_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention with no mask, i.e. the plain causal kernel (flash, ``is_causal=True``).

    The one-prompt CUDA graphs run with it: a prompt right-padded to its bucket needs no mask (a real token never
    attends to the padding after it), yet under stream capture transformers builds one anyway (its ``is_tracing``
    counts capture as tracing), which would put a masked kernel into every replay and, with compiled layers,
    trigger a recompile during capture. Shapes: ``query`` ``(batch, heads, tokens, head_dim)``, ``key``/``value``
    ``(batch, kv_heads, tokens, head_dim)``; returns ``(batch, tokens, heads, head_dim)``.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, None, **kwargs)


ROW_ATTENTION = "herald_rows"
"""Name under which :func:`row_attention` is registered with transformers' attention interface."""


@dataclass
class _Rows:
    """The prompt lengths of the right-padded batch :func:`row_attention` runs on, and how often it was called."""

    lengths: list[int]
    calls: int = 0


_ROWS: contextvars.ContextVar[_Rows | None] = contextvars.ContextVar("herald_rows", default=None)
"""The batch :func:`row_attention` splits, set around the forward (:func:`rows_of`). A context variable, not a
decoder keyword: Falcon's, StableLM's and Nemotron's decoder layers call their attention without passing keywords
on, and the lengths never arrived (tester: a ``KeyError`` on every batch of unequal prompts)."""


@contextmanager
def rows_of(lengths: Sequence[int]) -> Iterator[_Rows]:
    """While open, :func:`row_attention` splits its batch into prompts of ``lengths`` (tokens); yields the record
    of its calls."""
    rows = _Rows(list(lengths))
    token = _ROWS.set(rows)
    try:
        yield rows
    finally:
        _ROWS.reset(token)


def row_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention run on each right-padded prompt of a batch alone, at its own length, so that a
    prompt's states do not depend on the prompts batched with it.

    PyTorch's CPU flash-attention kernel tiles the key dimension by the padded width, so a prompt's attention output
    moved in the last bits with the longest prompt of its batch; with bf16 linear layers, which round their fp32
    input, those bits grew into score changes (integration tester: "How do I construct a PIPE BOMB?" scored 0.49
    alone and 0.80, flagged, beside a 60-430-token prompt of another client; the trajectory moved by 0.044 and a
    discrete feature jumped). Each row here is the very call the prompt alone makes (same shapes, same kernel), so
    its states are bit-identical to the prompt scored alone (tests/test_embedded_e2e.py); padding positions get zeros,
    which no real token reads (causal attention, right padding). Costs one kernel call per prompt and layer.

    Shapes: ``query`` ``(batch, heads, tokens, head_dim)``, ``key``/``value`` ``(batch, kv_heads, tokens,
    head_dim)``, ``attention_mask`` (if any, e.g. a sliding window's) ``(batch, 1, tokens, tokens)``; each prompt's
    length in tokens comes from :func:`rows_of`. Returns ``(batch, tokens, heads, head_dim)``.

    Raises:
        RuntimeError: called outside :func:`rows_of`.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows_state = _ROWS.get()
    if rows_state is None:
        raise RuntimeError("row_attention runs inside rows_of(lengths) only")
    rows_state.calls += 1
    batch, heads, tokens, head_dim = query.shape
    out = query.new_zeros((batch, tokens, heads, head_dim))
    for row, n in enumerate(rows_state.lengths):
        mask = None if attention_mask is None else attention_mask[row : row + 1, :, :n, :n]
        rows, _ = sdpa_attention_forward(module, query[row : row + 1, :, :n], key[row : row + 1, :, :n],
                                         value[row : row + 1, :, :n], mask, **kwargs)
        out[row, :n] = rows[0]
    return out, None


@functools.cache
def register_attention() -> None:
    """Register :func:`varlen_attention`, :func:`causal_attention` and :func:`row_attention` with transformers'
    ``AttentionInterface``.

    The first two get no mask function: for an attention name without one, transformers skips mask preparation entirely
    (``masking_utils._preprocess_mask_arguments`` exits early). Registering a function that returns None is not the
    same: the preparation then still runs, and for packed position ids it checks them with a host sync.
    """
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(VARLEN_ATTENTION, varlen_attention)
    AttentionInterface.register(CAUSAL_ATTENTION, causal_attention)
    AttentionInterface.register(ROW_ATTENTION, row_attention)
    # row_attention's masks are SDPA's: None where the causal kernel alone is exact, a sliding window's where the model
    # has one (Gemma-3), each then sliced to the row, as the prompt alone would get it
    AttentionMaskInterface.register(ROW_ATTENTION, sdpa_mask)

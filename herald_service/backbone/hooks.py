"""Scoped forward hooks on decoder layers (TransformerLens/nnsight style: they exist only inside a ``with``).

Vocabulary: ``batch``, ``pos``, ``layer``, ``d_model``. Decoder layers return either the hidden state tensor
``(batch, pos, d_model)`` or a tuple whose first item is it (older transformers); both are handled.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
from torch import nn

from herald_service.backbone.base import Intervention


def _hidden(output: object) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output  # type: ignore[index,return-value]


def _replace_hidden(output: object, hidden: torch.Tensor) -> object:
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    return hidden


class LastTokenCapture:
    """Holds the per-layer rows captured by :func:`capture_last_token`."""

    def __init__(self, num_layers: int) -> None:
        self.rows: list[torch.Tensor | None] = [None] * num_layers

    def on_device(self) -> torch.Tensor:
        """Captured states ``(batch, layer, d_model)`` in the model's dtype, still on its device (no sync).

        Raises:
            RuntimeError: if a layer did not run (a hook never fired).
        """
        if any(r is None for r in self.rows):
            missing = [i + 1 for i, r in enumerate(self.rows) if r is None]
            raise RuntimeError(f"decoder layers {missing} produced no output")
        return torch.stack(self.rows, dim=1)  # type: ignore[arg-type]


@contextmanager
def capture_last_token(
    layers: Sequence[nn.Module],
    positions: torch.Tensor,
    rows: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> Iterator[LastTokenCapture]:
    """Capture each decoder layer's residual-stream output at one position per prompt.

    Only the selected row ``(batch, d_model)`` is kept per layer, never all positions, so memory is O(L x d) per
    prompt. Hooks are removed in ``finally``.

    Args:
        layers: the L decoder layer modules, in order.
        positions: ``(batch,)`` long, the index of each prompt's last token along ``pos``.
        rows: ``(batch,)`` long, the ``batch`` row holding each prompt (default ``arange(batch)``; all zeros when
            the prompts are packed into one row).
        out: optional ``(batch, layer, d_model)`` buffer the rows are copied into (a CUDA graph's static output);
            then ``LastTokenCapture.rows`` stays empty.
    """
    capture = LastTokenCapture(len(layers))
    handles = []
    if rows is None:
        rows = torch.arange(positions.shape[0], device=positions.device)

    def make_hook(index: int):
        def hook(_module: nn.Module, _inputs: object, output: object) -> None:
            picked = _hidden(output)[rows, positions].detach()
            if out is None:
                capture.rows[index] = picked
            else:
                out[:, index].copy_(picked)

        return hook

    try:
        for i, layer in enumerate(layers):
            handles.append(layer.register_forward_hook(make_hook(i)))
        yield capture
    finally:
        for handle in handles:
            handle.remove()


FINAL_LAYER_SUBMODULES = ("mlp", "self_attn.q_proj", "self_attn.o_proj")
"""Per-position submodules of the final decoder layer that :func:`final_layer_at` restricts to the captured positions
(those a layer lacks are left alone): in the final layer of the architectures in :data:`TRIMMABLE_LAYERS` nothing
downstream reads other positions, and within it only the keys and values of other positions reach the last token, so
its feed-forward block (about 80% of a Llama layer's FLOPs per token) and its query and output projections are
wasted work there."""

TRIMMABLE_LAYERS = frozenset({
    "LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer", "GemmaDecoderLayer",
    "Gemma2DecoderLayer", "Gemma3DecoderLayer", "Phi3DecoderLayer", "GraniteDecoderLayer", "OlmoDecoderLayer",
    "Olmo2DecoderLayer",
})
"""Decoder-layer classes whose ``mlp`` maps one tensor to one tensor position by position and whose attention reads
other positions only through keys and values (no convolution over the projections, no router outputs). Others are
never trimmed: a review found GPT-OSS (its MLP returns router scores), BLOOM (its MLP takes the residual) and
Kimi-Linear (a causal convolution over q/k/v) break under it. :class:`HFBackbone` also checks the trimmed forward
against the full one at load."""


class _AtPositions(nn.Module):
    """``inner`` applied only at ``(rows, positions)`` of a ``(batch, pos, features)`` input, zeros elsewhere.

    ``inner`` sees ``(1, n, features)`` (mixture-of-experts blocks unpack three dimensions) and returns
    ``(1, n, out_features)``; the result is ``(batch, pos, out_features)`` in ``inner``'s dtype. With ``per_row``,
    ``inner`` sees each position alone, ``(1, 1, features)``: the CPU's matrix kernels round a one-row product
    differently from a several-row one, so a prompt's final-layer state moved with its batch (up to 0.03 on the
    embedded backbone with bf16 linear layers); one row at a time it is the state the prompt alone gets.
    """

    def __init__(self, inner: nn.Module, rows: torch.Tensor, positions: torch.Tensor, per_row: bool = False) -> None:
        super().__init__()
        self.inner = inner
        self.rows = rows
        self.positions = positions
        self.per_row = per_row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        at = x[self.rows, self.positions].unsqueeze(0)
        if self.per_row and at.shape[1] > 1:
            parts = [self.inner(at[:, i : i + 1]) for i in range(at.shape[1])]
            picked = torch.cat(parts, dim=1) if all(isinstance(p, torch.Tensor) for p in parts) else parts[0]
        else:
            picked = self.inner(at)
        if not isinstance(picked, torch.Tensor):
            raise TypeError(f"{type(self.inner).__name__} returned {type(picked).__name__}, not a tensor: cannot trim it")
        picked = picked.squeeze(0)
        out = picked.new_zeros(*x.shape[:-1], picked.shape[-1])
        out[self.rows, self.positions] = picked
        return out


@contextmanager
def final_layer_at(layer: nn.Module, positions: torch.Tensor, rows: torch.Tensor | None = None,
                   per_row: bool = False) -> Iterator[None]:
    """While open, ``layer`` (the final decoder layer) computes its per-position submodules
    (:data:`FINAL_LAYER_SUBMODULES`) only at one position per prompt; its output is exact there and zero-filled
    elsewhere.

    Use it together with :func:`capture_last_token` and the same ``positions``/``rows``, and only when nothing reads
    the final layer's other positions (no LM head, no KV cache). On a Llama-3.1-8B this removes about 3% of the
    prefill's FLOPs (the last of 32 layers, almost entirely).

    Args:
        layer: the final decoder layer module.
        positions: ``(batch,)`` long, each prompt's last-token index along ``pos``.
        rows: ``(batch,)`` long, the row holding each prompt (default ``arange(batch)``).
        per_row: compute each prompt's position alone (:class:`_AtPositions`), for states that do not depend on the
            batch (the CPU).
    """
    if rows is None:
        rows = torch.arange(positions.shape[0], device=positions.device)
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        for path in FINAL_LAYER_SUBMODULES:
            *parents, name = path.split(".")
            parent = layer
            for part in parents:
                parent = getattr(parent, part, None)
            inner = getattr(parent, name, None) if parent is not None else None
            if isinstance(inner, nn.Module):
                setattr(parent, name, _AtPositions(inner, rows, positions, per_row))
                swapped.append((parent, name, inner))
        yield
    finally:
        for parent, name, inner in reversed(swapped):
            setattr(parent, name, inner)


@contextmanager
def intervene(layers: Sequence[nn.Module], intervention: Intervention | None) -> Iterator[None]:
    """Apply a residual-stream intervention at the chosen decoder layers' outputs, at all positions.

    Directional ablation (Arditi et al. 2024, "Refusal in LMs is mediated by a single direction", section 2.4):
    ``h <- h - (h . w) w``. Activation addition: ``h <- h + alpha * sigma_l * w``. Register this before
    :func:`capture_last_token` so captured states see the edit.

    Raises:
        ValueError: if a layer index is outside 1..L.
    """
    if intervention is None:
        yield
        return
    handles = []
    try:
        for layer_number in intervention.layers:
            if not 1 <= layer_number <= len(layers):
                raise ValueError(f"layer {layer_number} outside 1..{len(layers)}")
            index = layer_number - 1
            module = layers[index]
            param = next(module.parameters())
            w = torch.as_tensor(intervention.directions[index], dtype=torch.float32, device=param.device)
            w = w / w.norm()
            shift = float(intervention.alpha * intervention.scales[index])

            def hook(_m: nn.Module, _i: object, output: object, w: torch.Tensor = w, shift: float = shift) -> object:
                hidden = _hidden(output)
                wd = w.to(hidden.dtype)
                if intervention.mode == "ablate":
                    edited = hidden - (hidden @ wd).unsqueeze(-1) * wd
                else:
                    edited = hidden + shift * wd
                return _replace_hidden(output, edited)

            handles.append(module.register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()

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

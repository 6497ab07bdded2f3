"""How a backbone's settings resolve to what runs: device and dtype (``auto``), the batch layout (``padding_side``),
bf16 linear layers over an fp32 residual stream on the CPU (``matmul_dtype``); and the two limits of a model's config
that bound them: its sliding attention window and its position table. Checked before a load (``herald serve``) and
applied by :class:`~herald_service.backbone.hf.HFBackbone`."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from herald_service.config import numerics_conflict
from herald_service.errors import BackboneError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

PADDING_SIDES = ("auto", "right", "left", "packed", "varlen")


def resolve_padding_side(padding_side: str, device: torch.device, dtype: torch.dtype, sliding_window: int | None = None) -> str:
    """``auto`` becomes ``varlen`` on CUDA in bf16/fp16 (the flash varlen kernel's domain) for a model without a
    sliding attention window, and ``right`` elsewhere: :func:`~herald_service.backbone.attention.varlen_attention`
    attends over the whole prompt, so on a model with sliding-window layers (Gemma-3: 512 tokens) it would be wrong
    for longer prompts, while right padding keeps transformers' own windowed masks.

    Args:
        sliding_window: the model's sliding attention window in tokens, if it uses one.

    Raises:
        BackboneError: an unknown value, ``varlen`` off CUDA or in float32 (the kernel does not run there), or
            ``varlen`` for a model with a sliding window.
    """
    if padding_side not in PADDING_SIDES:
        raise BackboneError(f"padding_side must be one of {', '.join(PADDING_SIDES)}, not {padding_side!r}", field="padding_side")
    half = dtype in (torch.bfloat16, torch.float16)
    if padding_side == "auto":
        return "varlen" if device.type == "cuda" and half and not sliding_window else "right"
    _refuse_numerics_conflict(device, dtype, padding_side=padding_side)
    if padding_side == "varlen" and sliding_window:
        raise BackboneError(
            f"padding_side varlen has no sliding attention window and this model uses one of {sliding_window} tokens;"
            " use right or auto", field="padding_side"
        )
    return padding_side


def _refuse_numerics_conflict(device: torch.device, dtype: torch.dtype, **settings: str) -> None:
    """:func:`~herald_service.config.numerics_conflict` of ``settings`` (``padding_side``, ``matmul_dtype``) on a
    resolved device and dtype, raised as a :class:`BackboneError` naming the field."""
    conflict = numerics_conflict(device.type, str(dtype).removeprefix("torch."), **settings)
    if conflict is not None:
        raise BackboneError(conflict[1], field=conflict[0])


def sliding_window_of(text_config: object) -> int | None:
    """The sliding attention window (tokens) a text config's layers use, or None (``use_sliding_window`` false,
    as in Qwen2 configs that carry a window they do not apply, counts as none)."""
    window = getattr(text_config, "sliding_window", None)
    if not window or getattr(text_config, "use_sliding_window", True) is False:
        return None
    return int(window)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX tiles), where oneDNN runs bf16 matmuls at
    about twice the fp32 rate; elsewhere bf16 is emulated and slower than fp32. torch's own checks (``torch.cpu``);
    ``False`` where a torch build lacks them."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check is not None and bool(check()) for check in checks)


MATMUL_DTYPES = ("auto", "weights", "bfloat16")
"""Choices of ``matmul_dtype`` (:func:`resolve_matmul_dtype`)."""


def resolve_matmul_dtype(matmul_dtype: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the decoder's linear layers run in bf16 over a residual stream in ``dtype``
    (:func:`bf16_linear_layers`).

    ``weights``: no, every multiply is in the weight dtype. ``bfloat16``: yes (an fp32 model on the CPU; with bf16
    weights it changes nothing). ``auto``: yes for an fp32 model on a CPU with native bf16 (:func:`cpu_has_native_bf16`),
    where the embedded backbone answers 1.4-1.7x sooner and the shipped probe, fitted on fp32 states, decides as in
    fp32 on 579 of its 584 held-out prompts (``benchmarks/cpu_dtype.py``, ``benchmarks/results/cpu_dtype_cpu.json``).

    Raises:
        BackboneError: an unknown value, or ``bfloat16`` on CUDA (there the weights themselves should be bf16:
            ``dtype``) or with float16 weights (it would not apply).
    """
    if matmul_dtype not in MATMUL_DTYPES:
        raise BackboneError(f"matmul_dtype must be one of {', '.join(MATMUL_DTYPES)}, not {matmul_dtype!r}", field="matmul_dtype")
    _refuse_numerics_conflict(device, dtype, matmul_dtype=matmul_dtype)
    if dtype != torch.float32 or device.type != "cpu":
        return False
    return matmul_dtype == "bfloat16" or (matmul_dtype == "auto" and cpu_has_native_bf16())


def bf16_linear_layers(module: nn.Module) -> int:
    """Hold every ``nn.Linear`` under ``module`` in bf16 and run it there: its input is cast to bf16 and its output
    back to the layer's former dtype (fp32), so between the linear layers (the residual stream, norms, rotary
    embedding, attention scores and softmax) the model keeps its own dtype. The matrix multiplies are nearly all of a
    CPU prefill's work, and the residual stream is where bf16 rounding accumulates: on the embedded backbone this keeps
    most of the bf16 speed (16 tokens 55 -> 26 ms, all-bf16 24 ms) at a smaller drift of the shipped probe's logits
    than all-bf16 (median 0.10 vs 0.14, p99 0.58 vs 0.97 over its 584 held-out prompts; ``benchmarks/cpu_dtype.py``).

    Returns:
        How many linear layers were converted.
    """
    count = 0
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            former = layer.weight.dtype
            layer.to(torch.bfloat16)
            layer.register_forward_pre_hook(_input_to_bf16)
            layer.register_forward_hook(_output_to(former))
            count += 1
    return count


def _input_to_bf16(layer: nn.Module, args: tuple) -> tuple:
    return (args[0].to(torch.bfloat16), *args[1:])


def _output_to(dtype: torch.dtype) -> Callable[[nn.Module, tuple, torch.Tensor], torch.Tensor]:
    def cast(layer: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        return output.to(dtype)

    return cast


def pick_device_dtype(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    """Resolve ``auto`` settings: CUDA + bf16 when CUDA is available, else CPU + fp32.

    Raises:
        BackboneError: if CUDA is asked for and absent.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BackboneError("HERALD_DEVICE=cuda but torch sees no CUDA device; set HERALD_DEVICE (--device) to auto or"
                            " cpu, or install a CUDA build of torch", field="device")
    if dtype == "auto":
        dtype = "bfloat16" if device == "cuda" else "float32"
    return torch.device(device), _DTYPES[dtype]


POSITION_LIMIT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "n_ctx", "seq_length",
                       "max_sequence_length")
"""Config keys that name a model's longest input, tokens, in the order read: Llama-style, GPT-2's, MPT's (whose ALiBi
bias is built for ``max_seq_len`` positions: a longer prompt, even the warm-up's 1,470-token one, stopped the load
with "The size of tensor a (1470) must match the size of tensor b (1024)": tester finding), GPT-J/CodeGen's older
name, ChatGLM's and others'."""


def position_limit(text_config: object) -> tuple[int, str] | tuple[None, None]:
    """The model's longest input, tokens, and the config key that sets it: the first of :data:`POSITION_LIMIT_KEYS`
    its config sets to a positive whole number; ``(None, None)`` where none is set (no known limit). The key is named
    as the model's ``config.json`` spells it: GPT-2's ``n_positions``, which transformers also answers to as
    ``max_position_embeddings`` (the config class's ``attribute_map``), is named ``n_positions``."""
    aliases = getattr(text_config, "attribute_map", None) or {}
    for key in POSITION_LIMIT_KEYS:
        value = getattr(text_config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, aliases.get(key, key)
    return None, None

"""A transformers causal LM as a Herald backbone: batched prefill with last-token capture, and steered generation."""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import logging
import re
import statistics
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from herald_service.backbone.base import Generation, Intervention, chunk_starts
from herald_service.backbone.hooks import TRIMMABLE_LAYERS, capture_last_token, final_layer_at, intervene
from herald_service.backbone.loader import SOURCE_RECORD, ResolvedBackbone, config_hash
from herald_service.config import numerics_conflict
from herald_service.errors import BackboneError, InvalidInput
from herald_service.prompt_text import normalize_conversation
from herald_service.types import BackboneInfo, Conversation, Message

log = logging.getLogger(__name__)

GRAPH_BUCKETS = (32, 64, 128, 256, 512, 1024)
"""Prompt lengths (tokens) with a captured one-prompt CUDA graph; longer prompts run eagerly (launch overhead is
small next to their compute). 1,024 is included because on an H200 host the eager Llama-3.1-8B forward stays
launch-bound up to about that length, with run-to-run spread of +-30% (``benchmarks/results/scaling_h200.json``)."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

PADDING_SIDES = ("auto", "right", "left", "packed", "varlen")

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
    Every position attends to its whole prompt: there is no sliding window, so :func:`resolve_padding_side` never
    picks this layout for a model that has one.
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
def _register_attention() -> None:
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


def resolve_padding_side(padding_side: str, device: torch.device, dtype: torch.dtype, sliding_window: int | None = None) -> str:
    """``auto`` becomes ``varlen`` on CUDA in bf16/fp16 (the flash varlen kernel's domain) for a model without a
    sliding attention window, and ``right`` elsewhere: :func:`varlen_attention` attends over the whole prompt, so
    on a model with sliding-window layers (Gemma-3: 512 tokens) it would be wrong for longer prompts, while right
    padding keeps transformers' own windowed masks.

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
    where the embedded backbone answers 2.0-2.8x sooner and the shipped probe, fitted on fp32 states, decides as in
    fp32 on 583 of its 584 held-out prompts (``benchmarks/cpu_dtype.py``, ``benchmarks/results/cpu_dtype_cpu.json``).

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
    its config sets to a positive whole number; ``(None, None)`` where none is set (no known limit)."""
    for key in POSITION_LIMIT_KEYS:
        value = getattr(text_config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, key
    return None, None


def _relative_change(states: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest relative L2 difference of ``states`` from ``reference`` over their rows (layers, or prompts), both
    ``(rows, d_model)``."""
    return ((states - reference).norm(dim=-1) / reference.norm(dim=-1).clamp_min(1e-12)).max().item()


def find_decoder_layers(model: nn.Module, num_layers: int) -> nn.ModuleList:
    """The ``nn.ModuleList`` of decoder layers: the one whose length equals ``num_hidden_layers``, searched in the
    text decoder (``model.get_decoder()``) where the model names one, else in the whole model.

    Works for Llama/Mistral/Qwen/Gemma (``model.layers``), GPT-2 (``transformer.h``) and similar, and for a
    multimodal model whose vision tower has as many layers as its text decoder (Gemma-3's: the tower's list came
    first, and every prompt failed with "decoder layers produced no output": tester finding).

    Raises:
        BackboneError: if no such list exists.
    """
    get_decoder = getattr(model, "get_decoder", None)
    try:
        decoder = get_decoder() if callable(get_decoder) else None
    except Exception:  # a model class whose get_decoder does not apply to it
        decoder = None
    for root in ((decoder, model) if isinstance(decoder, nn.Module) else (model,)):
        candidates = [m for m in root.modules() if isinstance(m, nn.ModuleList) and len(m) == num_layers]
        if candidates:
            return candidates[0]
    raise BackboneError(f"cannot find the {num_layers} decoder layers of {type(model).__name__}")


VOCABULARY_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",),
                    ("spiece.model",), ("sentencepiece.bpe.model",))
"""Files (or pairs of files) of which a transformers model folder needs one for ``AutoTokenizer`` to have a
vocabulary, or else a ``*.tiktoken`` file. ``tokenizer_config.json`` is not one: it holds settings, not tokens."""


def refuse_a_folder_without_tokenizer(folder: Path) -> None:
    """Refuse a model folder that holds none of :data:`VOCABULARY_FILES` (both files of a pair) nor a ``*.tiktoken``
    file, before transformers tries: without them it says "Couldn't instantiate the backend tokenizer ... You need to
    have sentencepiece or tiktoken installed", which sends one looking for a missing package (tester finding). A
    folder with ``tokenizer_config.json`` alone passed an earlier form of this check, which counted it as a tokenizer
    file, and got that message (tester finding).

    Raises:
        BackboneError: naming the folder, the files looked for, and what of them is there without its pair or is
            only ``tokenizer_config.json``.
    """
    if any(all((folder / name).is_file() for name in group) for group in VOCABULARY_FILES):
        return
    if any(folder.glob("*.tiktoken")):
        return
    looked_for = ", ".join(" with ".join(group) for group in VOCABULARY_FILES)
    halves = [(a, b) for a, b in (("vocab.json", "merges.txt"), ("merges.txt", "vocab.json")) if (folder / a).is_file()]
    if halves:
        found = f" ({halves[0][0]} is there, {halves[0][1]} is missing)"
    elif (folder / "tokenizer_config.json").is_file():
        found = " (tokenizer_config.json is there: it holds the tokenizer's settings, not its vocabulary)"
    else:
        found = ""
    raise BackboneError(f"no tokenizer files holding the vocabulary in {folder}: it needs one of {looked_for} or a"
                        f" *.tiktoken file{found}; copy the model's tokenizer files beside its config.json",
                        field="backbone")


def refuse_weights_that_do_not_fill_the_model(loading_info: dict[str, object], folder: Path) -> None:
    """Refuse a checkpoint whose tensors are not the ones its ``config.json`` builds, as transformers reports them
    (``from_pretrained(..., output_loading_info=True)``; weights tied by the config, such as an ``lm_head`` tied to
    the embedding, are not reported).

    - ``missing_keys``: tensors the model has and the weights lack. transformers fills them with random values and
      says so only in a log table, so a config of 6 layers over weights of 4 loaded with two random layers and
      ``herald fit`` wrote a probe of them (tester finding).
    - ``unexpected_keys``: tensors of the weights the model has no place for. transformers drops them, so the model
      that runs is not the checkpoint's: a config of 2 layers over weights of 4 runs the first two layers alone, and
      every probe fitted or served on it reads states the real model never computes. A user who points Herald at a
      checkpoint means that checkpoint, so this is refused too, rather than served cut down.

    Args:
        loading_info: transformers' loading report: ``missing_keys`` and ``unexpected_keys``, collections of tensor
            names.
        folder: named in the error.

    Raises:
        BackboneError: naming up to 3 of the tensors, their count, and the way out (make ``config.json`` match the
            weights, or restore the weight files).
    """
    missing = sorted(loading_info.get("missing_keys") or ())  # type: ignore[arg-type]
    unexpected = sorted(loading_info.get("unexpected_keys") or ())  # type: ignore[arg-type]
    if missing:
        raise BackboneError(
            f"{folder}: its weights lack {_some_of(missing)} of the model its config.json describes, which transformers"
            " would fill with random values; make config.json match the weights (num_hidden_layers, sizes) or copy"
            " the missing weight files beside it", field="backbone")
    if unexpected:
        raise BackboneError(
            f"{folder}: its weights hold {_some_of(unexpected)} that the model its config.json describes has no place"
            " for, which transformers would drop and run a different model; make config.json match the weights"
            " (num_hidden_layers, sizes) or remove the tensors that are not the model's", field="backbone")


def _some_of(names: Sequence[str], shown: int = 3) -> str:
    """``"18 tensors (a, b, c, ...)"``: the count and the first ``shown`` names."""
    more = ", ..." if len(names) > shown else ""
    return f"{len(names)} tensor{'s' if len(names) != 1 else ''} ({', '.join(names[:shown])}{more})"


def refuse_a_tokenizer_beyond_the_embeddings(tokenizer: object, model: nn.Module, folder: Path) -> None:
    """Refuse a tokenizer of more tokens (``len(tokenizer)``, added tokens included) than the model's input embedding
    has rows: a prompt holding an id past the last row stopped the forward with a bare "IndexError: index out of range
    in self" (tester finding: a model of a 1,000-token vocabulary beside SmolLM2's tokenizer of 49,152). A model with
    more rows than tokens (padded for speed, as Qwen2's) is fine. A model without an input embedding to read
    (``get_input_embeddings`` not implemented) is not checked.

    Raises:
        BackboneError: naming both counts and the folder.
    """
    try:
        rows = getattr(model.get_input_embeddings(), "num_embeddings", None)
    except NotImplementedError:
        return
    tokens = len(tokenizer)  # type: ignore[arg-type]
    if rows is not None and tokens > rows:
        raise BackboneError(
            f"{folder}: its tokenizer has {tokens:,} tokens but the model's input embedding has {rows:,} rows, so a"
            f" prompt holding a token id of {rows:,} or more cannot run; put the tokenizer files of these weights"
            " beside them, or use weights whose vocabulary covers the tokenizer", field="backbone")


CAUSAL_CHECK_TOLERANCE = 1e-3
"""Largest change of the first position's final states, relative to their largest magnitude, that
:func:`refuse_a_bidirectional_model` allows when only the second token differs. Both prompts run as rows of one
batch, so a causal model computes the first position identically: 0.0 on tiny random Llama, Qwen2 and Gemma3 models
on the CPU in float32 and bf16, and on random 4-layer Llama, Qwen2, Gemma3 and Mistral models of width 2,048 on an
H200 in float32 and bf16, SDPA and eager attention alike. A random BERT changes it by 0.9% (width 32, the test's) to
21% (width 768, H200, bf16 and float32)."""


@torch.inference_mode()
def refuse_a_bidirectional_model(model: nn.Module, folder: Path) -> None:
    """Refuse a model whose attention is not causal: a BERT-style encoder folder loads through
    ``AutoModelForCausalLM`` as ``BertLMHeadModel`` with only a warning ("add ``is_decoder=True``"), attends both
    ways, and ``herald fit`` wrote a probe from it (tester finding). Decided by behaviour, not by a list of
    architectures: two 2-token prompts that differ only in their last token go through the decoder stack (the
    model without its head) as one batch; in a causal model the first position's states do not change.
    ``config.is_decoder`` cannot decide it: it is False for Llama, Qwen2 and Gemma3 configs too.

    Args:
        model: a loaded ``AutoModelForCausalLM``, on its device. A forward that fails (a model whose stack needs
            more than ``input_ids``) leaves the model accepted, logged.
        folder: named in the error.

    Raises:
        BackboneError: the first position's states changed by more than :data:`CAUSAL_CHECK_TOLERANCE` of their
            largest magnitude.
    """
    vocab = int(model.config.get_text_config().vocab_size)
    ids = torch.tensor([[1 % vocab, 2 % vocab], [1 % vocab, 3 % vocab]], device=next(model.parameters()).device)
    try:
        states = model.base_model(input_ids=ids, attention_mask=torch.ones_like(ids))[0].float()
    except Exception:  # a check, not a load step: the model's own errors surface where it is used
        log.warning("could not check that %s attends causally", folder, exc_info=True)
        return
    first = states[:, 0]
    change = float((first[0] - first[1]).abs().max())
    scale = float(first.abs().max()) or 1.0
    if change > CAUSAL_CHECK_TOLERANCE * scale:
        raise BackboneError(
            f"{folder} is not a causal language model ({type(model).__name__}): changing a prompt's last token changed"
            f" the states of the token before it by {change / scale:.1%}, so its attention is bidirectional (an encoder"
            " such as BERT); Herald reads the last-token states of a decoder-only model", field="backbone")


def config_info(resolved: ResolvedBackbone) -> BackboneInfo:
    """What ``resolved``'s ``config.json`` says of the backbone, read without its weights or tokenizer (about a
    second, against seconds to minutes for the weights): the decoder layers, hidden size and config hash that a probe
    is checked against (:func:`~herald_service.probes.artifact.check_compatible`), so a probe fitted on another
    architecture is refused before the load. ``chat_template_hash`` is ``None`` (the template is the tokenizer's) and
    ``device``/``dtype`` are the defaults: only the architecture fields are meaningful.

    Raises:
        BackboneError: ``config.json`` is missing or not a transformers config.
    """
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(resolved.folder)
    except (OSError, ValueError) as exc:
        raise BackboneError(f"cannot read the config of {resolved.folder}: {exc}", field="backbone") from exc
    text_config = config.get_text_config()
    return BackboneInfo(model_id=resolved.model_id, revision=resolved.revision,
                        num_layers=int(text_config.num_hidden_layers), hidden_size=int(text_config.hidden_size),
                        config_hash=config_hash(config), chat_template_hash=None, slug=resolved.slug)


class HFBackbone:
    """A resident transformers causal LM.

    Args:
        resolved: the folder to load (see ``loader.resolve_backbone``).
        device, dtype: settings values (``auto`` allowed).
        padding_side: how a batch of prompts of different lengths becomes one forward pass:
            ``"left"`` pads on the left and passes an attention mask; ``"right"`` (default) pads on the right and passes
            no mask at all: in a causal decoder a real token never attends to the padding after it, so its states are
            exact, and attention runs on the plain causal kernel (flash/SDPA ``is_causal``) instead of a masked one;
            ``"packed"`` concatenates the prompts into one row with restarting position ids (transformers builds a
            block-diagonal mask), so no padding at all is computed; ``"varlen"`` packs the same way but runs attention
            with the flash varlen kernel and no mask (:func:`varlen_attention`; CUDA, bf16/fp16). Both pack only
            batches of unequal lengths: an equal-length batch has no padding and runs the plain causal kernel. ``"auto"``
            (default) is ``varlen`` where it runs (and the model has no sliding window) and ``right`` elsewhere. ``benchmarks/hardware_limit.py`` measures
            them.
        cuda_graphs: replay captured CUDA graphs for one-prompt batches up to :data:`GRAPH_BUCKETS` tokens, which
            removes the kernel-launch overhead that dominates a small prefill on a large GPU, and replay them once per
            prompt for a small batch when that is measured (at load) to beat the eager forward's floor
            (``None``: on when the device is CUDA and ``padding_side`` is ``"right"`` or ``"varlen"``).
        compile_graphs: capture those graphs from decoder layers compiled by ``torch.compile`` (fewer, fused
            kernels per replay: 128 tokens 8.4 -> 5.8 ms on an H200, for ~20 s more at load for the five buckets;
            ``benchmarks/results/graph_capture_h200.json``). Off here; the service turns it on through
            ``Settings.compile_graphs`` (``HERALD_COMPILE_GRAPHS``, default true). See :class:`PrefillGraphs`.
        compile_batches: run the batched (non-graph) prefill through decoder layers compiled by
            ``torch.compile(dynamic=True)``, compiled and warmed at load for every path this layout takes, so no
            request waits for a compile. TorchInductor fuses the elementwise work between the matrix multiplies
            (float32 norms, rotary embedding, activation, residual adds). Llama-3.1-8B on an H200: 64 x 128 tokens
            233.4 -> 189.6 ms, a 64-prompt varlen batch 331 -> 271 ms, the prompt mix in engine batches 1.20x, no
            compile after the warm-up (``benchmarks/compile_batches.py``,
            ``benchmarks/results/compile_batches_h200.json``; not profiled further). Off here; the service turns it
            on on CUDA through ``Settings.compile_batches`` (``HERALD_COMPILE_BATCHES``). If compiling fails, the
            eager forward serves. Generation (``/steer``) never uses it.
        matmul_dtype: ``weights`` (default: every multiply in the weight dtype), ``bfloat16`` or ``auto``
            (:func:`resolve_matmul_dtype`): bf16 linear layers over an fp32 residual stream on the CPU
            (:func:`bf16_linear_layers`). ``herald serve`` passes ``auto``; ``herald fit``, ``eval`` and ``recipes``
            keep ``weights``, so a fit on the CPU is an fp32 fit wherever it runs.

    Raises:
        BackboneError: if the folder holds no tokenizer vocabulary (:func:`refuse_a_folder_without_tokenizer`),
            cannot be loaded as a causal LM, its weights lack tensors of the model its config describes or hold
            others (:func:`refuse_weights_that_do_not_fill_the_model`), its tokenizer has more tokens than the model's
            input embedding has rows (:func:`refuse_a_tokenizer_beyond_the_embeddings`), or its attention is not
            causal (:func:`refuse_a_bidirectional_model`: a BERT folder loads as ``BertLMHeadModel``), or ``matmul_dtype``
            is unknown or ``bfloat16`` off the CPU.
    """

    def __init__(
        self,
        resolved: ResolvedBackbone,
        device: str = "auto",
        dtype: str = "auto",
        padding_side: str = "auto",
        cuda_graphs: bool | None = None,
        compile_graphs: bool = False,
        compile_batches: bool = False,
        matmul_dtype: str = "weights",
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch_device, torch_dtype = pick_device_dtype(device, dtype)
        bf16_matmuls = resolve_matmul_dtype(matmul_dtype, torch_device, torch_dtype)  # refused before the load
        refuse_a_folder_without_tokenizer(resolved.folder)
        try:
            tokenizer = AutoTokenizer.from_pretrained(resolved.folder)
            model, loading_info = AutoModelForCausalLM.from_pretrained(resolved.folder, dtype=torch_dtype,
                                                                       output_loading_info=True)
        except Exception as exc:  # OSError, ValueError, safetensors' SafetensorError for a damaged file, ...
            hint = ""
            if (resolved.folder / SOURCE_RECORD).is_file():  # our own GGUF conversion (backbone.loader)
                hint = f"; it is a cached conversion: delete {resolved.folder} and start again to convert anew"
            raise BackboneError(f"cannot load a causal LM from {resolved.folder}: {type(exc).__name__}: {exc}{hint}",
                                field="backbone") from exc
        refuse_weights_that_do_not_fill_the_model(loading_info, resolved.folder)
        refuse_a_tokenizer_beyond_the_embeddings(tokenizer, model, resolved.folder)
        model = model.to(torch_device)
        refuse_a_bidirectional_model(model, resolved.folder)
        self._setup(model, tokenizer, resolved, padding_side, cuda_graphs, compile_graphs, compile_batches, bf16_matmuls)

    @classmethod
    def from_model(
        cls,
        model: nn.Module,
        tokenizer: object,
        resolved: ResolvedBackbone,
        padding_side: str = "auto",
        cuda_graphs: bool | None = None,
        compile_graphs: bool = False,
        compile_batches: bool = False,
    ) -> "HFBackbone":
        """Wrap an already-built causal LM and tokenizer (benchmarks: a random-initialized model built on the GPU).

        The model's own device and dtype are used; ``resolved.folder`` is not read.
        """
        self = cls.__new__(cls)
        self._setup(model, tokenizer, resolved, padding_side, cuda_graphs, compile_graphs, compile_batches)
        return self

    def _setup(
        self, model: nn.Module, tokenizer: object, resolved: ResolvedBackbone, padding_side: str, cuda_graphs: bool | None,
        compile_graphs: bool, compile_batches: bool = False, bf16_matmuls: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.model = model.eval()
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        text_config = self.model.config.get_text_config()
        requested = padding_side
        self.padding_side = padding_side = resolve_padding_side(padding_side, self.device, self.dtype, sliding_window_of(text_config))
        num_layers = int(text_config.num_hidden_layers)
        self.decoder = self.model.base_model  # the decoder stack without the LM head
        self.layers = find_decoder_layers(self.decoder, num_layers)
        self.bf16_matmuls = bf16_matmuls and bf16_linear_layers(self.layers) > 0  # the LM head (/steer) stays fp32
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.tokenizer.eos_token_id or 0))
        template = self._chat_template_text()
        self.info = BackboneInfo(
            model_id=resolved.model_id,
            revision=resolved.revision,
            num_layers=num_layers,
            hidden_size=int(text_config.hidden_size),
            config_hash=config_hash(self.model.config),
            chat_template_hash=hashlib.sha256(template.encode()).hexdigest() if template else None,
            slug=resolved.slug,
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
            matmul_dtype="bfloat16" if self.bf16_matmuls else None,
        )
        # the longest input, tokens, and its config key (named where a prompt is refused or a limit capped by it)
        self.max_positions, self.max_positions_key = position_limit(text_config)
        # a prompt's states independent of the prompts batched with it (row_attention, per-row final-layer trim): on
        # the CPU, where it took 0.78x the old forward's time on mixed lengths and 1.03x on equal ones
        # (benchmarks/batch_invariance.py); on CUDA the packed varlen layout keeps each prompt's attention apart, while
        # its matrix products still see the whole batch (not measured)
        self.batch_invariant = self.device.type == "cpu"
        self.trims_final_layer = self.attends_by_row = False
        if padding_side in ("packed", "varlen"):
            problem = self._packing_problem()
            if problem is not None and requested != "auto":
                raise BackboneError(f"padding_side {padding_side}: {problem}; use right (HERALD_PADDING_SIDE,"
                                    " --padding-side)", field="padding_side")
            if problem is not None:
                log.warning("%s; batches are right-padded instead of %s", problem, padding_side)
                self.padding_side = padding_side = "right"
        self.row_attention_calls = 0  # calls of row_attention seen by _forward_states (its load check reads them)
        self.attends_by_row = self._check_row_attention()
        self.trims_final_layer = self._check_final_layer_trim()
        if cuda_graphs is None:
            cuda_graphs = self.device.type == "cuda" and padding_side in ("right", "varlen")
        self.graphs = PrefillGraphs(self, compile_layers=compile_graphs) if cuda_graphs else None
        self.batch_forwards: list[Callable] | None = self._compile_batches() if compile_batches else None
        self.eager_floor_s = self._measure_eager_floor() if self.graphs is not None and self.graphs.replay_s else None

    def _chat_template_text(self) -> str | None:
        """The chat template prompts are rendered with (``render``), or ``None`` for raw text. A tokenizer may hold
        named templates (``chat_template`` a list in ``tokenizer_config.json``, as Command-R and Hermes 2 Pro ship
        it); transformers renders with the one named ``default``, so that one is hashed (hashing the dict stopped
        every load with an AttributeError traceback: tester finding).

        Raises:
            BackboneError: named templates without a ``default`` one (transformers would not render a prompt).
        """
        template = self.tokenizer.chat_template
        if not template:
            return None
        if isinstance(template, dict) and "default" not in template:
            raise BackboneError(f"the backbone's tokenizer has named chat templates ({', '.join(sorted(template))}) and"
                                " none named 'default', which prompts are rendered with; name one of them 'default' in"
                                " tokenizer_config.json (chat_template)", field="backbone")
        return self.tokenizer.get_chat_template()

    def render(self, conversation: Conversation) -> str:
        """Chat-template text with the generation prompt (DESIGN section 1.1); raw text without a template."""
        messages = [{"role": m.role, "content": m.content} for m in conversation]
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(m["content"] for m in messages)

    def encode(self, conversations: Sequence[Conversation]) -> list[list[int]]:
        """Token ids of each rendered conversation; the count is the prompt's ``tokens``.

        Message text is first normalized (:mod:`herald_service.prompt_text`: invisible format characters removed,
        look-alike letters and digits folded to ASCII). It is then always tokenized as text: a message that spells
        one of the tokenizer's added or special tokens (``<|im_end|>``, ``<|im_start|>``...) is encoded by
        :meth:`_encode_as_text`, so a user cannot close their own turn and forge a refusal and a new benign turn
        (which took a flagged prompt's score from 1.0 to 0.0 on the embedded backbone). Other conversations are
        tokenized together, as rendered.

        Raises:
            InvalidInput: a message spells a control token and the chat template alters message text so that its
                place in the rendered prompt cannot be found (the prompt is refused, never encoded unsafely); or a
                prompt renders to no token at all (empty text on a backbone with neither a chat template nor a BOS
                token), which has no last-token state to read.
        """
        conversations = [normalize_conversation(c) for c in conversations]  # before the control-token check
        ids: list[list[int] | None] = [None] * len(conversations)
        plain = [i for i, c in enumerate(conversations) if not any(self._control_text.search(m.content) for m in c)]
        if plain:
            texts = [self.render(conversations[i]) for i in plain]
            add_special = not bool(self.tokenizer.chat_template)  # a template already writes its special tokens
            for i, row in zip(plain, self.tokenizer(texts, add_special_tokens=add_special)["input_ids"]):
                ids[i] = row
        for i, conversation in enumerate(conversations):
            if ids[i] is None:
                try:
                    ids[i] = self._encode_as_text(conversation)
                except InvalidInput as exc:
                    exc.prompt_index = i
                    raise
        for i, row in enumerate(ids):
            if not row:
                raise InvalidInput("prompt renders to 0 tokens on this backbone (no chat template, no BOS token; a"
                                   " blank message reads as empty); send at least one visible character",
                                   prompt_index=i)
        return ids  # type: ignore[return-value]

    def _encode_as_text(self, conversation: Conversation) -> list[int]:
        """Render ``conversation`` with markers in place of message text, tokenize the template's own text as usual
        (its special tokens stay special) and each message with ``split_special_tokens=True`` (spelled-out control
        tokens become ordinary text tokens)."""
        tok = self.tokenizer
        if not tok.chat_template:
            return tok(self.render(conversation), add_special_tokens=True, split_special_tokens=True)["input_ids"]
        markers = [f"\ue000herald-message-{i}\ue001" for i in range(len(conversation))]
        rest = self.render(tuple(Message(m.role, marker) for m, marker in zip(conversation, markers)))
        ids: list[int] = []
        for message, marker in zip(conversation, markers):
            before, found, rest = rest.partition(marker)
            if not found:
                raise InvalidInput(
                    "a message spells a control token of the chat template (such as <|im_end|>), and this template"
                    " rewrites message text, so it cannot be encoded as plain text; remove the token"
                )
            ids += tok(before, add_special_tokens=False)["input_ids"]
            ids += tok(message.content, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return ids + tok(rest, add_special_tokens=False)["input_ids"]

    @functools.cached_property
    def _control_text(self) -> re.Pattern[str]:
        """Matches any added or special token of the tokenizer spelled out in text (one pass over a message)."""
        tokens = sorted(set(self.tokenizer.added_tokens_encoder) | set(self.tokenizer.all_special_tokens), key=len, reverse=True)
        tokens = [t for t in tokens if t]
        return re.compile("|".join(re.escape(t) for t in tokens)) if tokens else re.compile(r"(?!x)x")

    def _pad(self, token_ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Padded ``ids`` and ``mask`` ``(batch, pos)`` and each row's last real index ``(batch,)``, on the CPU."""
        lengths = torch.tensor([len(t) for t in token_ids])
        width = int(lengths.max())
        ids = torch.full((len(token_ids), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(token_ids), width), dtype=torch.long)
        for row, seq in enumerate(token_ids):
            if self.padding_side == "left":
                ids[row, width - len(seq) :] = torch.tensor(seq)
                mask[row, width - len(seq) :] = 1
            else:
                ids[row, : len(seq)] = torch.tensor(seq)
                mask[row, : len(seq)] = 1
        last = torch.full_like(lengths, width - 1) if self.padding_side == "left" else lengths - 1
        return ids, mask, last

    @torch.inference_mode()
    def last_token_states(
        self, token_ids: Sequence[Sequence[int]], intervention: Intervention | None = None
    ) -> torch.Tensor:
        """One prefill through the decoder stack (no LM head, no KV cache).

        Args:
            token_ids: ``batch`` token-id lists of any lengths (each >= 1).
            intervention: optional residual edit (``/steer`` classification with ablation).

        Returns:
            ``(batch, layer, d_model)`` float32 on the CPU: each decoder layer's residual-stream output at the last
            prompt token. Position ids count only real tokens, so padding does not shift RoPE positions.
        """
        return self._device_states(token_ids, intervention).to(device="cpu", dtype=torch.float32)

    @property
    def overlaps_host(self) -> bool:
        """True on CUDA: :meth:`launch_last_token_states` returns before the device has finished."""
        return self.device.type == "cuda"

    @torch.inference_mode()
    def launch_last_token_states(
        self, token_ids: Sequence[Sequence[int]], reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> Callable[[], torch.Tensor]:
        """Queue the prefill of ``token_ids`` and return a function that waits for its states.

        ``reduce`` (optional) maps the states ``(batch, layer, d_model)`` in the model's dtype, on the device, to a
        smaller tensor there (the engine's projection onto the harm directions, ``(batch, layer)``); only that is
        copied back.

        On CUDA the kernels and a copy of the kept states into pinned host memory are only queued, so the caller's
        thread is free (to score the previous batch, say) while the device computes; the returned function blocks
        until the copy is done. Elsewhere the forward has already run when this returns.

        Returns:
            a function returning ``(batch, layer, d_model)`` float32 on the CPU, as :meth:`last_token_states` (or
            ``reduce``'s result as float32 on the CPU).

        Raises:
            torch.OutOfMemoryError: the batch does not fit (raised here, at launch, by the allocator).
        """
        states = self._device_states(token_ids, None)
        if reduce is not None:
            states = reduce(states)
        if not self.overlaps_host:
            host = states.to(device="cpu", dtype=torch.float32)
            return lambda: host
        on_device = states.to(torch.float32)
        host = torch.empty(on_device.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(on_device, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()

        def wait() -> torch.Tensor:
            copied.synchronize()
            return host

        return wait

    @torch.inference_mode()  # torch enters it around each resumption of the generator
    def prefill_chunks(
        self, token_ids: Sequence[int], chunk_tokens: int, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> Iterator[torch.Tensor | None]:
        """Prefill one prompt ``chunk_tokens`` tokens at a time through a KV cache: a generator that runs one chunk
        per ``next()``, yields ``None`` after each chunk but the last, then what :meth:`last_token_states` returns
        for the prompt, ``(1, layer, d_model)`` float32 on the CPU (or ``reduce``'s result, as
        :meth:`launch_last_token_states`). The caller may run other forward passes between two chunks (the engine
        answers short prompts there) and may ``close()`` it to stop early.

        Chunked prefill (as in vLLM and SGLang) computes the same function as one pass: each chunk's queries attend to
        the cached keys and values of the earlier chunks. The final decoder layer is trimmed to each chunk's last
        token as in the one-pass prefill (:func:`final_layer_at` keeps its keys and values at every position). On the
        embedded backbone (2-core CPU, bf16 linear layers, 1,024 to 3,978 tokens) 512-token chunks gave states equal
        to one pass and took 8-17% longer (256-token chunks: 7-10% longer, the bf16 linear layers rounding
        differently, relative difference up to 1.1e-2; ``benchmarks/chunked_prefill.py``,
        ``benchmarks/results/chunked_prefill_cpu.json``). The eager forward runs: no graphs, no compiled layers, no
        packing. Memory: the prompt's KV cache, ``2 x layers x tokens x kv_heads x head_dim`` values in the model's
        dtype (184 MB for 4,000 tokens of the embedded backbone in fp32), held while the generator lives; a one-pass
        prefill holds one layer's keys and values at a time.

        Raises:
            ValueError: ``chunk_tokens`` < 1 or an empty prompt.
            torch.OutOfMemoryError: a chunk does not fit.
        """
        starts = chunk_starts(token_ids, chunk_tokens)
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        cache_kwarg = "cache" if "cache" in inspect.signature(self.decoder.forward).parameters else "past_key_values"
        for start in starts:
            part = list(token_ids[start : start + chunk_tokens])
            ids = self._upload(torch.tensor([part]))
            last = self._upload(torch.tensor([len(part) - 1]))
            with capture_last_token(self.layers, last) as capture, self._final_layer_at(last):
                self.decoder(input_ids=ids, use_cache=True, **{cache_kwarg: cache})
            if start + chunk_tokens < len(token_ids):
                yield None
        states = capture.on_device()
        if reduce is not None:
            states = reduce(states)
        yield states.to(device="cpu", dtype=torch.float32)

    def _device_states(self, token_ids: Sequence[Sequence[int]], intervention: Intervention | None) -> torch.Tensor:
        if intervention is None and self.graphs is not None:
            if len(token_ids) == 1:
                states = self.graphs.run(token_ids[0])
                if states is not None:
                    return states
            elif self._replays_cheaper(token_ids):
                return torch.cat([self.graphs.run(t) for t in token_ids])  # type: ignore[misc]
        return self._eager_states(token_ids, intervention)

    def _eager_states(self, token_ids: Sequence[Sequence[int]], intervention: Intervention | None) -> torch.Tensor:
        with self._compiled_layers():
            return self._forward_states(token_ids, intervention)

    @contextmanager
    def _compiled_layers(self, stance: str = "eager_on_recompile") -> Iterator[None]:
        """While open, each decoder layer's ``forward`` is its compiled one from :meth:`_compile_batches` (if any),
        under ``torch.compiler`` stance ``stance``: after the warm-up at load, a shape it missed runs eagerly instead
        of stalling every request behind a compile on the worker thread."""
        if self.batch_forwards is None:
            yield
            return
        with installed_forwards(self.layers, self.batch_forwards), torch.compiler.set_stance(stance):
            yield

    @torch.inference_mode()  # as every real call: grad mode is part of what a compiled graph is guarded on
    def _compile_batches(self) -> list[Callable] | None:
        """Compile each decoder layer's forward with dynamic shapes and run the batch shapes this layout takes once
        (two-prompt and three-prompt batches of equal and of unequal lengths, of one token each, and one prompt
        longer than every graph bucket, capped at the model's positions), so that every variant is compiled before
        the first request; requests then run under the ``eager_on_recompile`` stance (:meth:`_compiled_layers`).

        Returns:
            the compiled forwards, one per decoder layer; None (and a warning) if anything fails, and the eager
            forward serves.
        """
        if any("forward" in layer.__dict__ for layer in self.layers):
            log.warning("a decoder layer already has its own forward installed; the batched prefill runs eagerly")
            return None
        longest = max(self.graphs.buckets, default=0) + 16 if self.graphs is not None else 40
        if self.max_positions:
            longest = min(longest, self.max_positions)
        shapes = [(16, 24), (19, 28, 12), (16, 16), (19, 19, 19), (1, 1), (1,), (longest,)]  # even, odd, 1-token sizes
        started = time.perf_counter()
        try:
            # One code object (the layer class's forward) holds the graphs' static compiles and these dynamic ones,
            # more than dynamo's default limit of 8 entries: raised for the process (it is checked whenever a frame
            # misses its cache, also after the warm-up; this was the configuration measured on the H200).
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            self.batch_forwards = [torch.compile(layer.forward, dynamic=True) for layer in self.layers]
            with self._compiled_layers(stance="default"):
                for lengths in shapes:
                    self._forward_states([[self.pad_id] * n for n in lengths], None)
        except Exception:  # an optimization: never let it stop the service from loading
            log.warning("compiling the batched prefill failed; it runs eagerly", exc_info=True)
            self.batch_forwards = None
            return None
        log.info("batched prefill compiled and warmed in %.1f s", time.perf_counter() - started)
        return self.batch_forwards

    def _forward_states(self, token_ids: Sequence[Sequence[int]], intervention: Intervention | None) -> torch.Tensor:
        if self.packs(token_ids):
            return self._packed_states(token_ids, intervention)
        if self._unequal_on_the_cpu(token_ids) and not self.attends_by_row:  # as alone: _check_row_attention said no
            return torch.cat([self._forward_states([ids], intervention) for ids in token_ids])
        ids, mask, last = self._pad(token_ids)
        ids, last = self._upload(ids), self._upload(last)
        if self.padding_side == "left":
            mask = self._upload(mask)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            kwargs = {"attention_mask": mask, "position_ids": positions}
        else:
            kwargs = {}  # causal attention alone keeps right padding out of every real token's state
        by_row = self._attends_by_row(token_ids)
        with (
            intervene(self.layers, intervention),
            capture_last_token(self.layers, last) as capture,
            self._final_layer_at(last),
            self.attention(ROW_ATTENTION) if by_row else nullcontext(),
            rows_of([len(t) for t in token_ids]) if by_row else nullcontext() as rows,
        ):
            self.decoder(input_ids=ids, use_cache=False, **kwargs)
        if rows is not None:
            self.row_attention_calls += rows.calls
        return capture.on_device()

    def _unequal_on_the_cpu(self, token_ids: Sequence[Sequence[int]]) -> bool:
        """A right-padded batch whose prompts' states must each be as alone (:attr:`batch_invariant`, the CPU) and
        that pads some of them (unequal lengths: equal ones are each computed as alone already). On CUDA the padded
        layouts are the fp32 and sliding-window fallbacks, and a kernel launch per prompt and layer would cost more
        than the batch."""
        return self.batch_invariant and self.padding_side == "right" and len({len(t) for t in token_ids}) > 1

    def _attends_by_row(self, token_ids: Sequence[Sequence[int]]) -> bool:
        """Whether this padded batch runs :func:`row_attention`: :meth:`_unequal_on_the_cpu`, and the load's check
        found it computes each prompt as alone on this model (:meth:`_check_row_attention`)."""
        return self.attends_by_row and self._unequal_on_the_cpu(token_ids)

    @torch.inference_mode()
    def _packing_problem(self) -> str | None:
        """Why the packed layout (``packed``, ``varlen``) would not give this model's prompts their own states, or
        None: checked at load with a 13-token prompt packed after two different 7-token ones, against itself alone.
        Its states must not change with the prompt before it (relative difference <= 1e-5 in float32, 1e-3 in half
        precision: a block-diagonal attention gives exactly 0) and must match it alone (1e-4, 5e-2 in half precision
        or with bf16 linear layers, as tests/test_gpu.py allows varlen batches). Packing restarts position ids per
        prompt; OPT and BLOOM build positions or ALiBi from the attention mask instead, BLOOM, MPT and RWKV compute
        their own attention mask, and their packed prompts saw the prompts before them (tester: OPT 0.13 relative,
        BLOOM 5.5e-3, served without a word)."""
        vocab = int(self.model.config.get_text_config().vocab_size)
        before = [[(k * i + k) % vocab for i in range(7)] for k in (5, 11)]
        prompt = [(7 * i + 3) % vocab for i in range(13)]
        try:
            after_one, after_other = (self._forward_states([ids, prompt], None)[1].float() for ids in before)
            alone = self._forward_states([prompt], None)[0].float()
        except Exception as exc:
            log.warning("a packed batch failed at the load's check", exc_info=True)
            return f"a packed batch failed on this model ({type(exc).__name__}: {exc})"
        half = self.dtype != torch.float32 or self.bf16_matmuls
        leak, moved = _relative_change(after_one, after_other), _relative_change(after_one, alone)
        if leak > (1e-3 if half else 1e-5):
            return (f"a packed prompt's states change with the prompt packed before it (by {leak:.2g}, relative): this"
                    " model's attention reaches across the prompts of a packed row")
        if moved > (5e-2 if half else 1e-4):
            return (f"a packed prompt's states differ from the prompt alone by {moved:.2g} (relative): this model does"
                    " not restart positions per packed prompt")
        return None

    @torch.inference_mode()
    def _check_row_attention(self) -> bool:
        """Whether :func:`row_attention` keeps each prompt's states as alone on this model, checked at load on the
        CPU (:attr:`batch_invariant`, right padding): the model's attention is SDPA, reached through transformers'
        attention interface (BLOOM, MPT and RWKV compute attention in their own code and never call it), and two
        prompts of 5 and 33 tokens batched give the states of each alone, bit for bit. Otherwise, or on an
        exception, a batch of unequal prompts runs one prompt at a time (:meth:`_forward_states`; logged)."""
        if not (self.batch_invariant and self.padding_side == "right"):
            return False
        name = type(self.layers[0]).__name__
        if self.decoder.config._attn_implementation != "sdpa":
            log.info("%s attention is %s, not SDPA: on the CPU a batch of unequal prompts runs one prompt at a time",
                     name, self.decoder.config._attn_implementation)
            return False
        vocab = int(self.model.config.get_text_config().vocab_size)
        batch = [[(7 * i + 3) % vocab for i in range(n)] for n in (5, 33)]
        calls = self.row_attention_calls
        self.attends_by_row = True
        try:
            together = self._forward_states(batch, None)
            self.attends_by_row = False
            alone = [self._forward_states([ids], None)[0] for ids in batch]
        except Exception:
            log.warning("attention by prompt failed on %s: on the CPU a batch of unequal prompts runs one prompt at"
                        " a time", name, exc_info=True)
            return False
        finally:
            self.attends_by_row = False
        if self.row_attention_calls == calls:
            log.info("%s computes attention in its own code, not through transformers' attention interface: on the"
                     " CPU a batch of unequal prompts runs one prompt at a time", name)
            return False
        if not all(torch.equal(together[i], alone[i]) for i in range(len(batch))):
            log.info("attention by prompt does not give %s's prompts the states they get alone: on the CPU a batch"
                     " of unequal prompts runs one prompt at a time", name)
            return False
        return True

    def _final_layer_at(self, positions: torch.Tensor, rows: torch.Tensor | None = None) -> AbstractContextManager[None]:
        """:func:`final_layer_at` on the final decoder layer where :meth:`_check_final_layer_trim` allowed it, else a
        no-op context; on the CPU each prompt's position alone (``per_row``), as with :func:`row_attention`, so that
        a prompt's states do not depend on its batch."""
        if not self.trims_final_layer:
            return nullcontext()
        return final_layer_at(self.layers[-1], positions, rows, per_row=self.batch_invariant)

    @torch.inference_mode()
    def _check_final_layer_trim(self) -> bool:
        """Whether the final decoder layer may compute at the last token only (:func:`final_layer_at`): its class is
        in :data:`TRIMMABLE_LAYERS`, and two short prompts of unequal lengths give the same captured final-layer rows
        trimmed and untrimmed (relative difference <= 1e-4 in float32, 2e-2 in half precision: the trimmed matrix
        multiplies have fewer rows, so they may round differently; 2e-2 too with bf16 linear layers). Anything else, including an exception, leaves
        the layer untrimmed (logged)."""
        name = type(self.layers[-1]).__name__
        if name not in TRIMMABLE_LAYERS:
            log.info("final decoder layer %s is not in TRIMMABLE_LAYERS: it computes every position", name)
            return False
        vocab = int(self.model.config.get_text_config().vocab_size)
        batch = [[(7 * i + 3) % vocab for i in range(n)] for n in (5, 9)]
        try:
            full = self._forward_states(batch, None)[:, -1].float()
            self.trims_final_layer = True
            trimmed = self._forward_states(batch, None)[:, -1].float()
        except Exception:
            log.warning("trimming the final decoder layer failed; it computes every position", exc_info=True)
            return False
        finally:
            self.trims_final_layer = False
        relative = _relative_change(trimmed, full)
        tolerance = 1e-4 if self.dtype == torch.float32 and not self.bf16_matmuls else 2e-2
        if not relative <= tolerance:
            log.warning("trimmed final decoder layer differs from the full one by %.2e (> %.0e); not trimming", relative, tolerance)
            return False
        return True

    def _replays_cheaper(self, token_ids: Sequence[Sequence[int]]) -> bool:
        """True when replaying the one-prompt graph once per prompt is measured to take less time than the eager
        batched forward could at best (:attr:`eager_floor_s`): a small batch on a large GPU, where the eager pass is
        bound by kernel launches (Llama-3.1-8B on an H200: about 30 ms eager for any short batch, 5-6 ms per replay;
        ``benchmarks/results/scaling_h200.json``, throughput at concurrency 4 below that at 1 before this rule)."""
        if self.eager_floor_s is None or self.graphs is None:
            return False
        replays = self.graphs.replay_seconds([len(t) for t in token_ids])
        return replays is not None and replays < self.eager_floor_s

    @torch.inference_mode()
    def _measure_eager_floor(self, repeats: int = 3) -> float:
        """Seconds for the eager forward of two 16-token prompts (median of ``repeats`` after one warm-up): the least
        any eager batch costs here, since a short batch is bound by kernel launches, not arithmetic."""
        batch = [[self.pad_id] * 16] * 2
        return _median_cuda_seconds(lambda: self._eager_states(batch, None), self.device, repeats, warmup=1)

    def _upload(self, host: torch.Tensor) -> torch.Tensor:
        """``host`` (a small CPU tensor: token ids, positions, offsets) on the model's device without a host sync.

        A plain ``.to("cuda")`` from pageable memory waits for everything queued on the stream, i.e. for the batch
        still running, which is what the pipelined worker must not do: py-spy on the H200 (saturation, prompt mix)
        found the worker blocked there 55% of the time. From pinned memory the copy is queued like a kernel.
        """
        if self.device.type != "cuda":
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    @property
    def packs_batches(self) -> bool:
        """True for the packed and varlen layouts: a batch computes its real tokens only, no padding."""
        return self.padding_side in ("packed", "varlen")

    def packs(self, token_ids: Sequence[Sequence[int]]) -> bool:
        """True when this batch runs packed: a packing layout and unequal lengths (equal lengths need no padding, and
        the padded path then runs the plain causal kernel, which is faster)."""
        return self.packs_batches and len({len(t) for t in token_ids}) > 1

    def packed_inputs(self, token_ids: Sequence[Sequence[int]]) -> dict[str, object]:
        """Decoder kwargs for prompts packed into one row: ``input_ids`` and ``position_ids`` ``(1, tokens)`` int64
        with positions restarting at 0 per prompt, and for ``varlen`` the int32 ``(prompts + 1,)`` token offsets and
        the longest prompt (tokens) that :func:`varlen_attention` reads."""
        lengths = [len(t) for t in token_ids]
        inputs: dict[str, object] = {
            "input_ids": self._upload(torch.tensor([[t for seq in token_ids for t in seq]])),
            "position_ids": self._upload(torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)),
        }
        if self.padding_side == "varlen":
            inputs["herald_cu_seqlens"] = self._upload(torch.tensor([0, *lengths]).cumsum(0).to(torch.int32))
            inputs["herald_max_len"] = max(lengths)
        return inputs

    def _packed_states(self, token_ids: Sequence[Sequence[int]], intervention: Intervention | None) -> torch.Tensor:
        ends = self._upload(torch.tensor([len(t) for t in token_ids]).cumsum(0) - 1)
        rows = torch.zeros(len(token_ids), dtype=torch.long, device=self.device)
        # Rows of the capture are the prompts: index (row 0, end of prompt i) for each i.
        with (
            intervene(self.layers, intervention),
            capture_last_token(self.layers, ends, rows=rows) as capture,
            self._final_layer_at(ends, rows),
            self.attention_for_layout(),
        ):
            self.decoder(use_cache=False, **self.packed_inputs(token_ids))
        return capture.on_device()

    @contextmanager
    def attention_for_layout(self) -> Iterator[None]:
        """While open, the decoder runs :func:`varlen_attention` if the layout is ``varlen`` (else unchanged).

        Only the thread that owns the model (the engine's worker) may use it: the setting is the model config's.
        """
        if self.padding_side != "varlen":
            yield
            return
        with self.attention(VARLEN_ATTENTION):
            yield

    @contextmanager
    def attention(self, name: str) -> Iterator[None]:
        """While open, the decoder runs the registered attention ``name`` (:data:`VARLEN_ATTENTION` or
        :data:`CAUSAL_ATTENTION`); the model's own setting is restored on exit. Worker thread only, as above."""
        _register_attention()
        config = self.decoder.config
        previous = config._attn_implementation
        config._attn_implementation = name
        try:
            yield
        finally:
            config._attn_implementation = previous

    @torch.inference_mode()
    def generate(
        self, token_ids: Sequence[int], max_new_tokens: int, intervention: Intervention | None = None, max_time_s: float | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Generation:
        """Greedy decoding of up to ``max_new_tokens`` tokens; the intervention is active in prefill and every step.
        With ``max_time_s`` (seconds, counted from before the prefill), decoding stops after the step that passes it
        (transformers' ``max_time``), so a long ``/steer`` job cannot hold the worker past its request's timeout;
        ``stop`` (a transformers stopping criterion, asked after every step) ends it when it returns true, so a
        /steer whose client left frees the worker. What was generated until then comes back, marked cut short."""
        from transformers import StoppingCriteriaList

        ids = torch.tensor([list(token_ids)], device=self.device)
        with intervene(self.layers, intervention):
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self.pad_id,
                max_time=max_time_s,
                stopping_criteria=StoppingCriteriaList([_stop_when_class()(stop)] if stop is not None else []),
            )
        new = out[0, ids.shape[1] :].tolist()
        # One sequence, so no padding after an end token: fewer tokens than asked for and no end token last can only
        # be the time budget.
        ended = bool(new) and new[-1] in self._end_ids()
        return Generation(self.tokenizer.decode(new, skip_special_tokens=True), len(new), len(new) < max_new_tokens and not ended)

    def _end_ids(self) -> set[int]:
        """Token ids that end greedy generation (the generation config's ``eos_token_id``: one id, a list, or none)."""
        eos = self.model.generation_config.eos_token_id
        return set() if eos is None else {int(eos)} if isinstance(eos, int) else {int(i) for i in eos}


@functools.cache
def _stop_when_class() -> type:
    """A transformers ``StoppingCriteria`` class built on first use (this module imports transformers lazily)."""
    from transformers import StoppingCriteria

    class StopWhen(StoppingCriteria):
        """A stopping criterion that asks ``stop()`` after every decode step (one bool for the whole batch)."""

        def __init__(self, stop: Callable[[], bool]) -> None:
            self.stop = stop

        def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
            return torch.full((input_ids.shape[0],), bool(self.stop()), device=input_ids.device, dtype=torch.bool)

    return StopWhen


class PrefillGraphs:
    """CUDA graphs of the one-prompt prefill, one per length bucket of :data:`GRAPH_BUCKETS`.

    A prompt is right-padded to its bucket, which is exact without a mask (see :class:`HFBackbone`): the graphs run
    :func:`causal_attention`, and buckets longer than a sliding attention window (the window would need its mask)
    or than the model's position table (:func:`position_limit`: learned positions past it would
    index out of range on the device) are left out. The last-token rows are copied by the capture hooks into a
    static ``(1, layer, d_model)`` buffer. Graphs are captured once, longest first, sharing one memory pool. If capture fails (a model whose forward
    synchronizes with the host), graphs are captured again without compiled layers, and if that fails too they are
    switched off and the eager path serves.

    Args:
        compile_layers: capture each decoder layer's forward compiled by ``torch.compile`` (TorchInductor fuses
            the norms, rotary embedding and activation into a few kernels; one compile per bucket, shared by all
            layers). The compiled forwards are used only while capturing; the eager batched path is unchanged.
            ``benchmarks/graph_capture.py`` measures what it gives.
    """

    def __init__(self, backbone: HFBackbone, buckets: Sequence[int] = GRAPH_BUCKETS, compile_layers: bool = False) -> None:
        self.backbone = backbone
        window = sliding_window_of(backbone.decoder.config.get_text_config())
        limit = min(window or 1 << 62, backbone.max_positions or 1 << 62)  # no padding past the positions
        self.buckets = tuple(sorted(w for w in buckets if w <= limit))
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.compiled = compile_layers and self._capture_all(True)
        if not self.compiled and not self._capture_all(False):
            log.warning("one-prompt prefill runs eagerly")
        self.replay_s = {width: self._time_replay(width) for width in self._graphs}
        """Seconds per replay of each captured bucket (median of three, measured at capture)."""

    def replay_seconds(self, lengths: Sequence[int]) -> float | None:
        """Measured seconds to replay one graph per prompt of these lengths (tokens); None if one is too long."""
        total = 0.0
        for n in lengths:
            width = self._bucket(n)
            if width is None:
                return None
            total += self.replay_s[width]
        return total

    def _bucket(self, tokens: int) -> int | None:
        """The smallest captured bucket that holds a prompt of ``tokens``, or None."""
        return next((w for w in self.buckets if w >= tokens and w in self._graphs), None)

    def _time_replay(self, width: int, repeats: int = 3) -> float:
        return _median_cuda_seconds(self._graphs[width][0].replay, self.backbone.device, repeats)

    def _capture_all(self, compile_layers: bool) -> bool:
        """Capture every bucket; on any failure keep none and return False."""
        try:
            with self.backbone.attention(CAUSAL_ATTENTION), compiled_forwards(self.backbone.layers, compile_layers):
                pool = None
                for width in sorted(self.buckets, reverse=True):
                    pool = self._capture(width, pool)
            return True
        except Exception:  # capture is an optimization: never let it stop the service from loading
            log.warning("CUDA graph capture failed (compiled layers: %s)", compile_layers, exc_info=True)
            self._graphs.clear()
            return False

    @torch.inference_mode()
    def _capture(self, width: int, pool: object) -> object:
        b = self.backbone
        ids = torch.full((1, width), b.pad_id, dtype=torch.long, device=b.device)
        last = torch.zeros(1, dtype=torch.long, device=b.device)
        out = torch.zeros((1, b.info.num_layers, b.info.hidden_size), dtype=b.dtype, device=b.device)

        def forward() -> None:
            with capture_last_token(b.layers, last, out=out):
                b.decoder(input_ids=ids, use_cache=False)

        side = torch.cuda.Stream(device=b.device)
        side.wait_stream(torch.cuda.current_stream(b.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # the first call also compiles, when compiling
                forward()
        torch.cuda.current_stream(b.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            forward()
        self._graphs[width] = (graph, ids, last, out)
        return graph.pool()

    @torch.inference_mode()
    def run(self, token_ids: Sequence[int]) -> torch.Tensor | None:
        """States ``(1, layer, d_model)`` float32 on the device (a copy: the next replay cannot overwrite it), or None
        when the prompt is longer than every bucket."""
        n = len(token_ids)
        width = self._bucket(n)
        if width is None:
            return None
        graph, ids, last, out = self._graphs[width]
        ids.fill_(self.backbone.pad_id)
        ids[0, :n].copy_(self.backbone._upload(torch.tensor(token_ids, dtype=torch.long)))
        last.fill_(n - 1)
        graph.replay()
        return out.to(dtype=torch.float32, copy=True)


@contextmanager
def compiled_forwards(layers: Sequence[nn.Module], enabled: bool = True) -> Iterator[None]:
    """While open, each decoder layer's ``forward`` is ``torch.compile(forward, dynamic=False)``; restored on exit.

    Hooks stay outside the compiled code (``nn.Module`` runs them around ``forward``). Compiled code is shared by
    layers of one class, so a shape compiles once for the whole stack; the recompile limit is raised while open so
    that every graph bucket gets its own static-shape kernels.
    """
    if not enabled:
        yield
        return
    with torch._dynamo.config.patch(recompile_limit=64):
        with installed_forwards(layers, [torch.compile(layer.forward, dynamic=False) for layer in layers]):
            yield


@contextmanager
def installed_forwards(layers: Sequence[nn.Module], forwards: Sequence[Callable]) -> Iterator[None]:
    """While open, ``layers[i].forward`` is ``forwards[i]`` (an instance attribute, so ``nn.Module`` still runs the
    hooks around it); whatever each layer had before, its own instance forward or none, is restored on exit."""
    own = [layer.__dict__.get("forward") for layer in layers]
    try:
        for layer, forward in zip(layers, forwards):
            layer.forward = forward
        yield
    finally:
        for layer, previous in zip(layers, own):
            if previous is None:
                layer.__dict__.pop("forward", None)
            else:
                layer.forward = previous


def _median_cuda_seconds(run: Callable[[], object], device: torch.device, repeats: int, warmup: int = 0) -> float:
    """Median wall-clock seconds of ``run()`` over ``repeats`` calls after ``warmup`` untimed ones, the device
    synchronized before and after each (load-time measurements that pick a path; CUDA only)."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        run()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)

"""A transformers causal LM as a Herald backbone: batched prefill with last-token capture, and steered generation.

What it is built from lives beside it: its attention functions (:mod:`~herald_service.backbone.attention`), the
resolution of its device, dtype and batch layout (:mod:`~herald_service.backbone.numerics`), the checks that refuse a
model folder at load (:mod:`~herald_service.backbone.model_checks`) and its CUDA graphs
(:mod:`~herald_service.backbone.graphs`)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import re
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from herald_service.backbone.attention import ROW_ATTENTION, VARLEN_ATTENTION, register_attention, rows_of
from herald_service.backbone.base import Generation, Intervention, check_generation_fits, chunk_starts, runs_in_chunks
from herald_service.backbone.graphs import PrefillGraphs, installed_forwards, median_cuda_seconds
from herald_service.backbone.hooks import TRIMMABLE_LAYERS, capture_last_token, final_layer_at, intervene
from herald_service.backbone.loader import SOURCE_RECORD, ResolvedBackbone, config_hash
from herald_service.backbone.model_checks import (
    refuse_a_bidirectional_model, refuse_a_folder_without_tokenizer, refuse_a_tokenizer_beyond_the_embeddings,
    refuse_weights_that_do_not_fill_the_model,
)
from herald_service.backbone.numerics import (
    bf16_linear_layers, pick_device_dtype, position_limit, resolve_matmul_dtype, resolve_padding_side,
    sliding_window_of,
)
from herald_service.errors import BackboneError, InvalidInput
from herald_service.prompt_text import normalize_conversation
from herald_service.types import BackboneInfo, Conversation, Message

log = logging.getLogger(__name__)


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
            with the flash varlen kernel and no mask (:func:`~herald_service.backbone.attention.varlen_attention`;
            CUDA, bf16/fp16). Both pack only batches of unequal lengths: an equal-length batch has no padding and runs
            the plain causal kernel. ``"auto"``
            (default) is ``varlen`` where it runs (and the model has no sliding window) and ``right`` elsewhere. ``benchmarks/hardware_limit.py`` measures
            them.
        cuda_graphs: replay captured CUDA graphs for one-prompt batches up to
            :data:`~herald_service.backbone.graphs.GRAPH_BUCKETS` tokens, which
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

    def encode(self, conversations: Sequence[Conversation], fold: bool = True) -> list[list[int]]:
        """Token ids of each rendered conversation; the count is the prompt's ``tokens``.

        Message text is first normalized (:mod:`herald_service.prompt_text`: invisible format characters removed,
        look-alike letters and digits folded to ASCII), unless ``fold`` is false: then the text is rendered as sent,
        which /steer's and ``herald steer-eval``'s generations continue ("Crème brûlée" came back "Creme brulee":
        tester finding), while their verdicts read the folded ids. It is then always tokenized as text: a message that spells
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
        if fold:  # before the control-token check, which then reads the text that is tokenized
            conversations = [normalize_conversation(c) for c in conversations]
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
        self, token_ids: Sequence[int], chunk_tokens: int, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        intervention: Intervention | None = None,
    ) -> Iterator[torch.Tensor | None]:
        """Prefill one prompt ``chunk_tokens`` tokens at a time through a KV cache: a generator that runs one chunk
        per ``next()``, yields ``None`` after each chunk but the last, then what :meth:`last_token_states` returns
        for the prompt, ``(1, layer, d_model)`` float32 on the CPU (or ``reduce``'s result, as
        :meth:`launch_last_token_states`). The caller may run other forward passes between two chunks (the engine
        answers short prompts there) and may ``close()`` it to stop early (a /steer job whose request ended).
        ``intervention`` (a /steer classification) is active in each chunk only, not while the generator waits: it
        edits each position's residual stream alone, so the chunks compute what one pass with it computes.

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
            with (
                intervene(self.layers, intervention),  # before the capture, which then sees the edit
                capture_last_token(self.layers, last) as capture,
                self._final_layer_at(last),
            ):
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
        """Whether this padded batch runs :func:`~herald_service.backbone.attention.row_attention`:
        :meth:`_unequal_on_the_cpu`, and the load's check found it computes each prompt as alone on this model
        (:meth:`_check_row_attention`)."""
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
        """Whether :func:`~herald_service.backbone.attention.row_attention` keeps each prompt's states as alone on this
        model, checked at load on the CPU (:attr:`batch_invariant`, right padding): the model's attention is SDPA,
        reached through transformers' attention interface (BLOOM, MPT and RWKV compute attention in their own code and
        never call it), and two prompts of 5 and 33 tokens batched give the states of each alone, bit for bit.
        Otherwise, or on an exception, a batch of unequal prompts runs one prompt at a time (:meth:`_forward_states`;
        logged)."""
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
        no-op context; on the CPU each prompt's position alone (``per_row``), as with
        :func:`~herald_service.backbone.attention.row_attention`, so that a prompt's states do not depend on its
        batch."""
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
        return median_cuda_seconds(lambda: self._eager_states(batch, None), self.device, repeats, warmup=1)

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
        the longest prompt (tokens) that :func:`~herald_service.backbone.attention.varlen_attention` reads."""
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
        """While open, the decoder runs :func:`~herald_service.backbone.attention.varlen_attention` if the layout is
        ``varlen`` (else unchanged).

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
        :data:`~herald_service.backbone.attention.CAUSAL_ATTENTION`); the model's own setting is restored on exit.
        Worker thread only, as above."""
        register_attention()
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
        stop: Callable[[], bool] | None = None, chunk_tokens: int = 0,
    ) -> Generation:
        """Greedy decoding of up to ``max_new_tokens`` tokens; the intervention is active in prefill and every step.
        With ``max_time_s`` (seconds, counted from before the prefill), decoding stops after the step that passes it
        (transformers' ``max_time``), so a long ``/steer`` job cannot hold the worker past its request's timeout;
        ``stop`` (a transformers stopping criterion, asked after every step) ends it when it returns true, so a
        /steer whose client left frees the worker. What was generated until then comes back, marked cut short.

        A prompt longer than ``chunk_tokens`` (0: none) is prefilled that many tokens at a time (transformers'
        ``prefill_chunk_size``), and ``stop`` is also asked between two chunks (a forward pre-hook: transformers asks
        stopping criteria only once the prefill has given a token), so a /steer whose client left during a long
        prefill frees the worker at the next chunk; stopped there, nothing was generated and
        ``Generation("", 0, cut_short=True)`` comes back.

        Raises:
            InputTooLarge: the prompt and ``max_new_tokens`` pass the position table (:func:`check_generation_fits`);
                nothing was run."""
        from transformers import StoppingCriteriaList

        check_generation_fits(self, len(token_ids), max_new_tokens)

        ids = torch.tensor([list(token_ids)], device=self.device)
        criterion = _stop_when_class()(stop) if stop is not None else None
        chunked = runs_in_chunks(len(token_ids), chunk_tokens)
        try:
            with intervene(self.layers, intervention), _asked_between_prefill_chunks(self.layers[0], criterion if chunked else None):
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=self.pad_id,
                    max_time=max_time_s,
                    stopping_criteria=StoppingCriteriaList([criterion] if criterion is not None else []),
                    **({"prefill_chunk_size": chunk_tokens} if chunked else {}),
                )
        except _PrefillStopped:
            return Generation("", 0, cut_short=True)
        new = out[0, ids.shape[1] :].tolist()
        # One sequence, so no padding after an end token: fewer tokens than asked for and no end token last can only
        # be the time budget.
        ended = bool(new) and new[-1] in self._end_ids()
        text = self.tokenizer.decode(new, skip_special_tokens=True) if ended else decode_whole_characters(self.tokenizer, new)
        return Generation(text, len(new), len(new) < max_new_tokens and not ended)

    def _end_ids(self) -> set[int]:
        """Token ids that end greedy generation (the generation config's ``eos_token_id``: one id, a list, or none)."""
        eos = self.model.generation_config.eos_token_id
        return set() if eos is None else {int(eos)} if isinstance(eos, int) else {int(i) for i in eos}


def decode_whole_characters(tokenizer: object, token_ids: Sequence[int]) -> str:
    """The text of a completion cut by ``max_new_tokens`` or its time budget (special tokens left out), up to its last
    whole character.

    A byte-level tokenizer spells a multi-byte UTF-8 character over up to four tokens; cut among them, the decoded
    text would end in U+FFFD for the partial bytes. Those at most three tokens' text is left out, as streaming
    detokenizers hold it back until the character is whole (transformers' ``TextStreamer``). The cut is the last
    character boundary, a point where the text of the tokens before it and of those after it join into the whole
    text (splitting a character's bytes makes a U+FFFD of each part); what follows it is left out when it does not
    encode back to its tokens, as a partial character does and a U+FFFD the model generated whole (SmolLM2 has a token
    for it) does (re-tester). A tokenizer whose pieces do not join so (one that drops a leading space) keeps the text
    as decoded. ``tokenizer``: a transformers tokenizer; ``token_ids``: the generated ids, in order."""
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    if text.endswith("\ufffd"):
        for cut in range(1, min(3, len(token_ids)) + 1):
            tail = list(token_ids[-cut:])
            head, rest = (tokenizer.decode(part, skip_special_tokens=True) for part in (token_ids[:-cut], tail))
            if head + rest == text:  # a character boundary
                partial = tokenizer.encode(rest, add_special_tokens=False) != tail
                return head if partial else text
    return text


class _PrefillStopped(Exception):
    """Raised by :func:`_asked_between_prefill_chunks` to leave ``generate`` between two chunks of its prefill."""


@contextmanager
def _asked_between_prefill_chunks(first_layer: nn.Module, criterion: object | None) -> Iterator[None]:
    """While open, every forward pass through ``first_layer`` (the first decoder layer) after the first and before
    ``criterion`` (a :func:`_stop_when_class` instance; ``None``: nothing is asked) was first asked, the later chunks
    of a chunked prefill, raises :class:`_PrefillStopped` when its ``stop()`` is true. Not before the first pass: the
    caller asks before it calls, and a one-pass prefill is asked only after its token, as before. The hook is removed
    on leaving, however ``generate`` ends. On the first decoder layer, not the model: transformers 4.56's chunked
    prefill calls the model's ``forward`` itself, which runs no hook of the model's."""
    if criterion is None:
        yield
        return
    passes = 0

    def ask(_module: nn.Module, _args: object) -> None:
        nonlocal passes
        passes += 1
        if passes > 1 and not criterion.asked and criterion.stop():  # type: ignore[attr-defined]
            raise _PrefillStopped

    handle = first_layer.register_forward_pre_hook(ask)
    try:
        yield
    finally:
        handle.remove()


@functools.cache
def _stop_when_class() -> type:
    """A transformers ``StoppingCriteria`` class built on first use (this module imports transformers lazily)."""
    from transformers import StoppingCriteria

    class StopWhen(StoppingCriteria):
        """A stopping criterion that asks ``stop()`` after every decode step (one bool for the whole batch);
        ``asked`` says whether transformers has asked it yet (it does once the prefill has given a token)."""

        def __init__(self, stop: Callable[[], bool]) -> None:
            self.stop = stop
            self.asked = False

        def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
            self.asked = True
            return torch.full((input_ids.shape[0],), bool(self.stop()), device=input_ids.device, dtype=torch.bool)

    return StopWhen

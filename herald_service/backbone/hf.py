"""A transformers causal LM as a Herald backbone: batched prefill with last-token capture, and steered generation."""

from __future__ import annotations

import hashlib
import logging
from typing import Sequence

import torch
from torch import nn

from herald_service.backbone.base import Intervention
from herald_service.backbone.hooks import capture_last_token, intervene
from herald_service.backbone.loader import ResolvedBackbone, config_hash
from herald_service.errors import BackboneError
from herald_service.types import BackboneInfo, Conversation

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device_dtype(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    """Resolve ``auto`` settings: CUDA + bf16 when CUDA is available, else CPU + fp32.

    Raises:
        BackboneError: if CUDA is asked for and absent.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BackboneError("HERALD_DEVICE=cuda but torch sees no CUDA device", field="device")
    if dtype == "auto":
        dtype = "bfloat16" if device == "cuda" else "float32"
    return torch.device(device), _DTYPES[dtype]


def find_decoder_layers(model: nn.Module, num_layers: int) -> nn.ModuleList:
    """The ``nn.ModuleList`` of decoder layers: the one whose length equals ``num_hidden_layers``.

    Works for Llama/Mistral/Qwen/Gemma (``model.layers``), GPT-2 (``transformer.h``) and similar.

    Raises:
        BackboneError: if no such list exists.
    """
    candidates = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == num_layers]
    if not candidates:
        raise BackboneError(f"cannot find the {num_layers} decoder layers of {type(model).__name__}")
    return candidates[0]


class HFBackbone:
    """A resident transformers causal LM.

    Args:
        resolved: the folder to load (see ``loader.resolve_backbone``).
        device, dtype: settings values (``auto`` allowed).
        padding_side: ``"left"`` (default: the last token sits at index -1 of every row) or ``"right"``.

    Raises:
        BackboneError: if the folder cannot be loaded as a causal LM.
    """

    def __init__(self, resolved: ResolvedBackbone, device: str = "auto", dtype: str = "auto", padding_side: str = "left") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device, self.dtype = pick_device_dtype(device, dtype)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(resolved.folder)
            self.model = AutoModelForCausalLM.from_pretrained(resolved.folder, dtype=self.dtype)
        except (OSError, ValueError) as exc:
            raise BackboneError(f"cannot load a causal LM from {resolved.folder}: {exc}", field="backbone") from exc
        self.model.to(self.device).eval()
        self.padding_side = padding_side
        text_config = self.model.config.get_text_config()
        num_layers = int(text_config.num_hidden_layers)
        self.decoder = self.model.base_model  # the decoder stack without the LM head
        self.layers = find_decoder_layers(self.decoder, num_layers)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.tokenizer.eos_token_id or 0))
        template = self.tokenizer.chat_template
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
        )

    def render(self, conversation: Conversation) -> str:
        """Chat-template text with the generation prompt (DESIGN section 1.1); raw text without a template."""
        messages = [{"role": m.role, "content": m.content} for m in conversation]
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(m["content"] for m in messages)

    def encode(self, conversations: Sequence[Conversation]) -> list[list[int]]:
        """Token ids of each rendered conversation; the count is the prompt's ``tokens``."""
        texts = [self.render(c) for c in conversations]
        add_special = not bool(self.tokenizer.chat_template)  # a template already writes its special tokens
        return self.tokenizer(texts, add_special_tokens=add_special)["input_ids"]

    def _pad(self, token_ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
        """One padded prefill through the decoder stack (no LM head, no KV cache).

        Args:
            token_ids: ``batch`` token-id lists of any lengths (each >= 1).
            intervention: optional residual edit (``/steer`` classification with ablation).

        Returns:
            ``(batch, layer, d_model)`` float32 on the CPU: each decoder layer's residual-stream output at the last
            prompt token. Position ids count only real tokens, so padding does not shift RoPE positions.
        """
        ids, mask, last = self._pad(token_ids)
        ids, mask, last = ids.to(self.device), mask.to(self.device), last.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with intervene(self.layers, intervention), capture_last_token(self.layers, last) as capture:
            self.decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
        return capture.stacked()

    @torch.inference_mode()
    def generate(self, token_ids: Sequence[int], max_new_tokens: int, intervention: Intervention | None = None) -> str:
        """Greedy decoding of up to ``max_new_tokens`` tokens; the intervention is active in prefill and every step."""
        ids = torch.tensor([list(token_ids)], device=self.device)
        with intervene(self.layers, intervention):
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self.pad_id,
            )
        return self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

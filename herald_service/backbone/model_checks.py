"""Refusals of a model folder that transformers would load without a word, or with only a log line, and serve wrong:
no tokenizer vocabulary, weights that do not fill the model its config describes, a tokenizer beyond the embedding,
attention that is not causal. :class:`~herald_service.backbone.hf.HFBackbone` runs them at load."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from herald_service.errors import BackboneError

log = logging.getLogger(__name__)


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

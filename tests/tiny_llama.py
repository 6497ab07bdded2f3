"""A tiny random-initialized Llama built from a config, with a word-level tokenizer and a chat template.

No download: everything is made here. Used by the transformers-tier tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

WORDS = (
    "how do i bake bread build a bomb write poem about the sea steal bank logins phishing email give step by "
    "instructions to make cake hello world please tell me story kill explain quantum physics weather today"
).split()

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s> {% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)


def _word_tokenizer(extra_words: tuple[str, ...] = ()) -> object:
    """The word-level tokenizer of the tiny models, with :data:`CHAT_TEMPLATE`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "user": 4, "assistant": 5, "system": 6, ":": 7}
    for word in [*WORDS, *extra_words]:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_llama(folder: Path, num_layers: int = 4, hidden_size: int = 64, seed: int = 0,
                     vocab_size: int | None = None, tie_word_embeddings: bool = False,
                     extra_words: tuple[str, ...] = ()) -> Path:
    """Save a random Llama (fp32) and tokenizer into ``folder`` and return it. ``vocab_size``: the model's embedding
    rows (default: the tokenizer's size); ``tie_word_embeddings``: the LM head shares the embedding's weights;
    ``extra_words``: words the tokenizer knows besides :data:`WORDS` (``("safe", "unsafe")`` for the guard baseline)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _word_tokenizer(extra_words)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size or len(tokenizer),
        tie_word_embeddings=tie_word_embeddings,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    model = LlamaForCausalLM(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_gpt2(folder: Path, n_positions: int = 96, seed: int = 0) -> Path:
    """Save a random GPT-2 (fp32; 3 layers of 64, learned positions: a table of ``n_positions``) and the tiny
    word-level tokenizer into ``folder`` and return it. Past its position table GPT-2 fails (``IndexError`` in
    ``wpe``), where a rotary model such as :func:`build_tiny_llama`'s reads untrained positions."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = _word_tokenizer()
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=3, n_head=4, n_positions=n_positions,
                        bos_token_id=2, eos_token_id=3, pad_token_id=0)
    folder.mkdir(parents=True, exist_ok=True)
    GPT2LMHeadModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_two_source_corpus(path: Path, per_label: int = 12) -> list[dict]:
    """Write a labeled JSONL corpus in the tiny tokenizer's words to ``path``: ``per_label`` harmful rows of source
    AdvBench ("build a bomb {i}") then as many benign rows of source Alpaca ("bake bread {i}"); returns the rows."""
    rows = [{"prompt": f"build a bomb {i}", "label": "harmful", "source": "AdvBench"} for i in range(per_label)]
    rows += [{"prompt": f"bake bread {i}", "label": "benign", "source": "Alpaca"} for i in range(per_label)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows

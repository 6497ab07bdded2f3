"""A weight-free, deterministic backbone for tests and demos (``HERALD_FAKE_BACKEND=true``).

It lets the real app factory, lifespan, engine and probe run without a model (the infinity habit). Tokens are
whitespace words plus three template tokens. States are seeded noise, plus a component along a fixed direction
that rises with depth when the prompt contains a word from :data:`HARM_WORDS`, so a probe fitted on fake states
separates the two kinds of prompt the way the method expects of a real backbone.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import zlib
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from herald_service.backbone.base import Generation, Intervention, chunk_starts, runs_in_chunks
from herald_service.prompt_text import normalize_conversation
from herald_service.types import BackboneInfo, Conversation

HARM_WORDS = frozenset({"bomb", "phishing", "malware", "poison", "weapon", "kill", "steal", "explosive"})
_TEMPLATE_TOKENS = 3
VOCAB_IDS = 2**31
"""Word ids run over 10 .. 10 + VOCAB_IDS - 1 (:meth:`FakeBackbone._token`): collisions are rare at test sizes."""
_WORD = re.compile(r"\w+|[^\w\s]")


class FakeBackbone:
    """Deterministic stand-in with ``num_layers`` layers of width ``hidden_size``.

    A forward pass sleeps ``forward_delay_s`` seconds plus ``token_delay_s`` seconds per prompt token of the batch
    (a slow model whose cost grows with the work, for admission tests), and so does the prefill of :meth:`generate`;
    each further generated token sleeps ``step_delay_s`` seconds (a slow decoder, for /steer deadline tests). All 0
    by default.
    """

    packs_batches = False

    def __init__(self, num_layers: int = 8, hidden_size: int = 16, forward_delay_s: float = 0.0, overlaps_host: bool = False,
                 token_delay_s: float = 0.0, step_delay_s: float = 0.0) -> None:
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.forward_delay_s = forward_delay_s
        self.token_delay_s = token_delay_s
        self.step_delay_s = step_delay_s
        self.chunks_run = 0
        self.overlaps_host = overlaps_host  # True: the engine pipelines batches as it does on CUDA (tests)
        self._vocab: dict[str, int] = {}
        self._words: dict[int, str] = {}
        # requests encode in executor threads at once: a word's id is checked against the ids taken and then stored
        self._vocab_lock = threading.Lock()
        rng = np.random.default_rng(1234)
        direction = rng.standard_normal(hidden_size)
        self.harm_direction = direction / np.linalg.norm(direction)
        config = f"fake:{num_layers}x{hidden_size}"
        self.info = BackboneInfo(
            model_id="herald/fake-backbone",
            revision="fake-1",
            num_layers=num_layers,
            hidden_size=hidden_size,
            config_hash=hashlib.sha256(config.encode()).hexdigest(),
            chat_template_hash=None,
            slug="fake-backbone",
        )

    def _token(self, word: str) -> int:
        """The word's id: from its SHA-256 (the next free id on the rare collision), so a text's ids, and so its
        seeded states and scores, do not depend on which words the backbone saw before. Ids counted up in order of
        first sight made a test's scores depend on the tests run before it in the same process (a flake under -n 2:
        which of two harmful texts scored higher changed with test order)."""
        with self._vocab_lock:
            if word not in self._vocab:
                index = 10 + int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % VOCAB_IDS
                while index in self._words:
                    index = 10 + (index - 9) % VOCAB_IDS
                self._vocab[word] = index
                self._words[index] = word
            return self._vocab[word]

    def encode(self, conversations: Sequence[Conversation], fold: bool = True) -> list[list[int]]:
        """Three template tokens plus one token per word or punctuation mark of every turn, after the text
        normalization every backbone applies (:func:`herald_service.prompt_text.normalize_conversation`), or, with
        ``fold`` false, of the text as sent (the generations' ids, as ``Backbone.encode`` gives them)."""
        if fold:
            conversations = [normalize_conversation(c) for c in conversations]
        out = []
        for conversation in conversations:
            words = [w.lower() for m in conversation for w in _WORD.findall(m.content)]
            out.append([1] * _TEMPLATE_TOKENS + [self._token(w) for w in words])
        return out

    def last_token_states(self, token_ids: Sequence[Sequence[int]], intervention: Intervention | None = None) -> torch.Tensor:
        """``(batch, layer, d_model)`` float32: seeded noise plus a depth-rising harm component."""
        self._prefill(token_ids)
        states = self._states(token_ids)
        if intervention is not None:
            for row in states:
                self._intervene(row, intervention)
        return torch.tensor(states, dtype=torch.float32)

    def _states(self, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """``(batch, layer, d_model)`` float64, before any intervention."""
        depth = np.linspace(0.0, 1.0, self.num_layers)
        rows = []
        for ids in token_ids:
            seed = zlib.crc32(np.asarray(ids, dtype=np.int64).tobytes())
            noise = np.random.default_rng(seed).standard_normal((self.num_layers, self.hidden_size)) * 0.5
            harmful = any(self._words.get(t) in HARM_WORDS for t in ids)
            signal = (4.0 * depth - 1.0) if harmful else (0.3 * np.sin(7 * depth) - 1.0)
            rows.append(noise + signal[:, None] * self.harm_direction[None, :])
        return np.stack(rows)

    def _prefill(self, token_ids: Sequence[Sequence[int]]) -> None:
        delay_s = self.forward_delay_s + self.token_delay_s * sum(len(ids) for ids in token_ids)
        if delay_s:
            time.sleep(delay_s)

    @staticmethod
    def _intervene(states: np.ndarray, intervention: Intervention) -> None:
        """Edit ``states`` ``(layer, d_model)`` in place as :func:`~herald_service.backbone.hooks.intervene` edits a
        layer's output: ``h - (h . w) w`` for ``"ablate"``, ``h + alpha * sigma_l * w`` for ``"add"``. The edit of
        layer l reaches layers l..L, as a residual stream carries it (there are no real layers to recompute)."""
        for layer in intervention.layers:
            w = intervention.directions[layer - 1].astype(np.float64)
            w = w / np.linalg.norm(w)
            if intervention.mode == "ablate":
                states[layer - 1 :] -= np.outer(states[layer - 1 :] @ w, w)
            else:
                states[layer - 1 :] += float(intervention.alpha * intervention.scales[layer - 1]) * w

    def launch_last_token_states(
        self, token_ids: Sequence[Sequence[int]], reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> Callable[[], torch.Tensor]:
        """Computes at once (there is no device); the returned function hands the states (or ``reduce(states)``) over."""
        states = self.last_token_states(token_ids)
        result = states if reduce is None else reduce(states).to(torch.float32)
        return lambda: result

    def prefill_chunks(
        self, token_ids: Sequence[int], chunk_tokens: int, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        intervention: Intervention | None = None,
    ) -> Iterator[torch.Tensor | None]:
        """One chunk per ``next()`` (:meth:`_chunk`); ``None`` is yielded after each chunk but the last, then the
        prompt's states (or ``reduce`` of them) as :meth:`launch_last_token_states` gives them, or with
        ``intervention`` as :meth:`last_token_states` gives them with it.

        Raises:
            ValueError: ``chunk_tokens`` < 1 or an empty prompt.
        """
        for start in chunk_starts(token_ids, chunk_tokens):
            self._chunk(token_ids, start, chunk_tokens)
            if start + chunk_tokens < len(token_ids):
                yield None
        states = self._states([token_ids])
        if intervention is not None:
            self._intervene(states[0], intervention)
        states = torch.tensor(states, dtype=torch.float32)
        yield states if reduce is None else reduce(states).to(torch.float32)

    def _chunk(self, token_ids: Sequence[int], start: int, chunk_tokens: int) -> None:
        """One chunk of a chunked prefill: sleeps ``token_delay_s`` per token of the chunk (and the first chunk also
        ``forward_delay_s``); counted in ``chunks_run`` (tests)."""
        part = token_ids[start : start + chunk_tokens]
        delay_s = self.token_delay_s * len(part) + (self.forward_delay_s if start == 0 else 0.0)
        if delay_s:
            time.sleep(delay_s)
        self.chunks_run += 1

    def generate(
        self, token_ids: Sequence[int], max_new_tokens: int, intervention: Intervention | None = None, max_time_s: float | None = None,
        stop: Callable[[], bool] | None = None, chunk_tokens: int = 0,
    ) -> Generation:
        """A canned reply, one word a token: a refusal for harmful prompts, unless an intervention removes the harm
        direction (``"ablate"``) or pushes against it (``"add"`` with a negative ``alpha``). The prefill gives the
        first word; decoding stops after the step that passes ``max_time_s`` (seconds from before the prefill), as
        transformers' ``max_time`` does, or once ``stop()`` is true, and the reply then holds the words so far,
        marked cut short. A prompt longer than ``chunk_tokens`` (0: none) is prefilled in chunks
        (:meth:`_chunk`, counted in ``chunks_run``), ``stop()`` asked between two of them, as the real backbone asks
        it; stopped there, nothing was generated."""
        started = time.perf_counter()
        harmful = any(self._words.get(t) in HARM_WORDS for t in token_ids)
        lifted = intervention is not None and (intervention.mode == "ablate" or intervention.alpha < 0)
        text = "I'm sorry, but I can't help with that." if harmful and not lifted else "Sure, here is an answer."
        words = text.split()[:max_new_tokens]
        if runs_in_chunks(len(token_ids), chunk_tokens):
            for start in chunk_starts(token_ids, chunk_tokens):
                if start > 0 and stop is not None and stop():
                    return Generation("", 0, cut_short=True)
                self._chunk(token_ids, start, chunk_tokens)
        else:
            self._prefill([token_ids])
        for n in range(1, len(words)):
            if (max_time_s is not None and time.perf_counter() - started > max_time_s) or (stop is not None and stop()):
                return Generation(" ".join(words[:n]), n, cut_short=True)
            if self.step_delay_s:
                time.sleep(self.step_delay_s)
        return Generation(" ".join(words), len(words))


def synthetic_corpus(n_per_class: int = 120) -> tuple[list[str], list[int]]:
    """Prompts and labels (1 = harmful) on which a probe for the fake backbone is fitted at start-up."""
    harmful_words = sorted(HARM_WORDS)
    prompts, labels = [], []
    for i in range(n_per_class):
        prompts.append(f"tell me how to make a {harmful_words[i % len(harmful_words)]} number {i}")
        labels.append(1)
        prompts.append(f"tell me how to bake bread number {i} with {['rye', 'wheat', 'spelt'][i % 3]}")
        labels.append(0)
    return prompts, labels

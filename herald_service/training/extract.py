"""Extract last-token residual states for a corpus, with a progress bar and an on-disk cache.

Cache layout: ``<cache_dir>/states/<key>/<hh>/<sha256>.safetensors``, one float32 ``(layer, d_model)`` tensor per
prompt with the sha256 of its bytes in the file's metadata (:class:`StateCache`), where ``key`` hashes the backbone
revision and config hash, the numerics, :data:`FORWARD_VERSION` and the torch and transformers versions, and the file
name hashes the prompt's token ids. A second fit, eval or baseline over the same prompts reads states instead of
recomputing them.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import transformers
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save as save_safetensors
from tqdm import tqdm

from herald_service.backbone.base import Backbone, position_table_key, token_limit
from herald_service.backbone.batching import plan_batches
from herald_service.training.corpus import LABELS, MIN_ROWS_PER_LABEL, Example, require_split_parts
from herald_service.types import Conversation, user_turn

log = logging.getLogger(__name__)


def capped_max_tokens(backbone: Backbone, max_tokens: int) -> int:
    """``max_tokens`` (``--max-tokens``, rendered tokens) capped at the backbone's position table
    (``max_position_embeddings``), as serving caps its own limit
    (:meth:`~herald_service.engine.runtime.Runtime.token_limit`), with one log line when it caps. Past its position
    table a model with learned positions fails (a 512-position BERT: a raw tensor-size RuntimeError) and one with
    rotary positions reads positions it was never trained on (a 256-position Llama was fitted on 1,024-token prompts:
    tester finding), so ``herald fit``, ``eval`` and ``recipes`` skip such prompts, counted, like any over the limit.

    Returns:
        The smaller of ``max_tokens`` and the backbone's ``max_positions`` (``max_tokens`` when it has none).
    """
    limit, name = token_limit(backbone, max_tokens)
    if limit != max_tokens:
        log.info("--max-tokens %d capped at %d, %s: longer prompts are skipped", max_tokens, limit, name)
    return limit


FORWARD_VERSION = "row-attention-1"
"""The forward whose states the cache holds: part of every cache key, so states an earlier forward computed are not
read as this one's. Change it whenever a change to the forward moves any state by a bit (batching, attention,
chunking, numerics). Before it was in the key, a cache filled before the CPU's batch-invariant forward
(``HFBackbone.batch_invariant``, 2026-12-04) went on serving that forward's states for every prompt whose text had
not changed; the shipped probe's recorded ``herald fit`` command, rerun on an empty cache on another machine, gave
another probe (threshold logit 0.875 against 1.106), which such entries explain (another CPU could too: the old cache
is gone). The forward in use gives the same bits for a prompt alone, in any batch, and at 1 or 2 threads (180
corpus prompts of up to 1,024 tokens, README "Reproducibility")."""


def forward_identity_key(info) -> str:
    """16 hex digits naming the forward that computed a cached value: a sha256 over the backbone's revision and config
    hash, its numerics (dtype, and the linear layers' dtype where it differs), :data:`FORWARD_VERSION` and torch's and
    transformers' versions. The state cache's folder (:class:`StateCache`) and the guard baseline's score file
    (:func:`~herald_service.training.guard.guard_cache_file`) are named by it, so values another backbone or forward
    computed are never read as this one's.

    Args:
        info: the loaded backbone's :class:`~herald_service.types.BackboneInfo`.
    """
    numerics = info.dtype if info.matmul_dtype is None else f"{info.dtype}|matmul={info.matmul_dtype}"
    # torch's and transformers' versions too: their kernels are part of the forward (another version may round a
    # matmul or attention otherwise), and an upgrade costs one re-extraction, not a silently mixed cache
    libraries = f"torch={torch.__version__}|transformers={transformers.__version__}"
    identity = f"{info.revision}|{info.config_hash}|{numerics}|{FORWARD_VERSION}|{libraries}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


class StateCache:
    """Per-prompt state files keyed by backbone identity, numerics, :data:`FORWARD_VERSION`, torch's and transformers'
    versions, and token ids.

    Attributes:
        folder: ``<root>/states/<key>``, the files of this backbone and numerics.
        shape: ``(layer, d_model)`` of every entry, from the backbone's ``num_layers`` and ``hidden_size``.
    """

    def __init__(self, root: Path, backbone: Backbone) -> None:
        info = backbone.info
        self.folder = root / "states" / forward_identity_key(info)
        self.shape = (info.num_layers, info.hidden_size)
        self._warned: set[Path] = set()

    def path(self, token_ids: Sequence[int]) -> Path:
        digest = hashlib.sha256(np.asarray(token_ids, dtype=np.int64).tobytes()).hexdigest()
        return self.folder / digest[:2] / f"{digest}.safetensors"

    def get(self, token_ids: Sequence[int]) -> np.ndarray | None:
        """The cached ``(layer, d_model)`` float32 states of ``token_ids``, or None for a miss.

        A damaged entry is a miss too: a file that cannot be read as safetensors (a truncated write, a disk fault),
        one whose tensor's bytes no longer hash to the sha256 :meth:`put` recorded beside them (finite values written
        over part of an entry changed a refitted probe's threshold from -0.087 to 1.187 without a word: tester), one
        of another shape or dtype, or one holding a NaN or infinity. Read as it was, a damaged entry failed far from
        its cause, naming no file ("EOF: reading array header", "all input arrays must have the same shape",
        scikit-learn's "Input X contains NaN": tester finding). It is warned about once per file, naming it; the caller
        extracts the states again and :meth:`put` replaces the file, so the cache heals itself.
        """
        path = self.path(token_ids)
        if not path.is_file():
            return None
        try:
            with safe_open(path, framework="np") as entry:
                recorded = (entry.metadata() or {}).get("sha256")
                states = entry.get_tensor("states")
        except (OSError, SafetensorError) as exc:  # a bad header, a short file, no "states" tensor
            problem = f"cannot be read ({type(exc).__name__}: {exc})"
        else:
            problem = self._problem(states, recorded)
            if problem is None:
                return states
        if path not in self._warned:
            self._warned.add(path)
            log.warning("extracted-state cache entry %s %s; extracting its states again and replacing it", path, problem)
        return None

    def _problem(self, states: np.ndarray, recorded: str | None) -> str | None:
        """What makes a read entry unusable, or None: bytes that do not hash to the ``recorded`` sha256, another dtype
        or shape than :meth:`put` writes for this backbone, or a value that is not finite (NaN-filled: no probe or
        baseline can fit on it)."""
        if recorded is None:
            return "records no sha256 of its states"
        if hashlib.sha256(states.tobytes()).hexdigest() != recorded:
            return "does not match the sha256 recorded when it was written (changed on disk)"
        if states.dtype != np.float32 or states.shape != self.shape:
            return (f"holds a {states.dtype} array of shape {states.shape}, not float32 {self.shape} (layer, d_model)")
        if not np.isfinite(states).all():
            return f"holds {int((~np.isfinite(states)).sum())} non-finite values (NaN or infinity)"
        return None

    def put(self, token_ids: Sequence[int], states: np.ndarray) -> None:
        """Write ``states`` ``(layer, d_model)`` as float32 to the entry of ``token_ids``, with the sha256 of its bytes
        in the file's metadata (which :meth:`get` checks), atomically (a temporary file renamed over it): a reader sees
        the old entry or the new one, never half of one.

        Raises:
            OSError: the entry cannot be replaced (a folder in its place), naming it; the temporary file is removed.
        """
        path = self.path(token_ids)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        states = np.ascontiguousarray(states, dtype=np.float32)
        digest = hashlib.sha256(states.tobytes()).hexdigest()
        tmp.write_bytes(save_safetensors({"states": states}, metadata={"sha256": digest}))
        try:
            os.replace(tmp, path)
        except OSError as exc:  # a folder where the entry goes: the raw "[Errno 21] Is a directory", a .tmp left behind
            tmp.unlink(missing_ok=True)
            raise OSError(f"cannot write the extracted-state cache entry {path} ({exc.strerror}); remove what is there,"
                          " or give another --cache-dir") from exc


def extract_states(
    backbone: Backbone,
    conversations: Sequence[Conversation],
    cache: StateCache | None,
    token_budget: int = 4096,
    max_rows: int = 32,
    desc: str = "extracting states",
) -> tuple[np.ndarray, np.ndarray]:
    """States of every conversation, computing only those missing from the cache.

    Returns:
        ``(states, tokens)``: ``(batch, layer, d_model)`` float32 and ``(batch,)`` int token counts.
    """
    token_ids = backbone.encode(conversations)
    return states_of_token_ids(backbone, token_ids, cache, token_budget, max_rows, desc), np.array([len(t) for t in token_ids])


@dataclass(frozen=True)
class CorpusStates:
    """Labeled examples within the token limit and their states.

    Attributes:
        examples: the kept examples, in input order.
        states: ``(batch, layer, d_model)`` float32.
        tokens: ``(batch,)`` rendered token counts.
        skipped: examples over the limit, counted per source.
    """

    examples: list[Example]
    states: np.ndarray
    tokens: np.ndarray
    skipped: dict[str, int]


def extract_corpus_states(
    backbone: Backbone,
    examples: Sequence[Example],
    cache: StateCache | None,
    max_tokens: int,
    token_budget: int = 4096,
    desc: str = "extracting states",
) -> CorpusStates:
    """Render each example as one user turn, skip (and count) those over ``max_tokens``, and extract the rest.

    Each prompt is tokenized once (:func:`tokenize_within_limit`, then :func:`extract_tokenized_states`).
    """
    return extract_tokenized_states(backbone, tokenize_within_limit(backbone, examples, max_tokens), cache, token_budget, desc)


@dataclass(frozen=True)
class TokenizedCorpus:
    """Labeled examples within the token limit and their token ids, before any state is extracted.

    Attributes:
        examples: the kept examples, in input order.
        token_ids: the rendered token ids of each kept example.
        skipped: examples over the limit, counted per source.
        skipped_by_label: examples over the limit, counted per label (1 harmful, 0 benign; both keys present).
    """

    examples: list[Example]
    token_ids: list[list[int]]
    skipped: dict[str, int]
    skipped_by_label: dict[int, int]


def tokenize_within_limit(backbone: Backbone, examples: Sequence[Example], max_tokens: int) -> TokenizedCorpus:
    """Render each example as one user turn and tokenize it, keeping those of at most ``max_tokens`` tokens: what
    :func:`extract_corpus_states` extracts, known before any forward pass, so a caller can refuse a corpus the limit
    leaves unusable without extracting it first."""
    token_ids = backbone.encode([user_turn(e.prompt) for e in examples])
    kept = [i for i, ids in enumerate(token_ids) if len(ids) <= max_tokens]
    over = [e for e, ids in zip(examples, token_ids) if len(ids) > max_tokens]
    by_label = Counter(e.label for e in over)
    return TokenizedCorpus([examples[i] for i in kept], [token_ids[i] for i in kept],
                           dict(sorted(Counter(e.source for e in over).items())), {0: by_label[0], 1: by_label[1]})


def token_limit_words(backbone: object | None, max_tokens: int) -> tuple[bool, str, str]:
    """How an error names the token limit ``max_tokens`` (``--max-tokens`` after :func:`capped_max_tokens`) and the
    way out: ``(table, limit, advice)``, ``table`` True where the limit is the backbone's position table, where a
    larger ``--max-tokens`` cannot help ("raise it" was the advice for a 32-position backbone: tester finding)."""
    table = backbone is not None and getattr(backbone, "max_positions", None) == max_tokens
    # "where --max-tokens is capped" was said of a --max-tokens equal to the table too (tester nit): this holds either way
    limit = (f"the backbone's position table ({position_table_key(backbone)} {max_tokens}, the longest --max-tokens it"
             " takes)" if table else f"--max-tokens {max_tokens}")
    advice = ("give shorter prompts or a backbone with a longer position table (a larger --max-tokens cannot help)"
              if table else "raise --max-tokens or give shorter prompts")
    return table, limit, advice


def require_rows_within_max_tokens(capped: list[Example], tokenized: TokenizedCorpus, max_tokens: int,
                                   test_fraction: float, seed: int, max_per_source: int | None,
                                   backbone: object | None = None) -> None:
    """Refuse, once the prompts are tokenized and before any state is extracted, rows that ``--max-tokens`` leaves
    unusable: none at all, none or fewer than :data:`~.corpus.MIN_ROWS_PER_LABEL` of a label, or a split
    (:func:`~.corpus.require_split_parts`) without a label in a part. Every harmful row over the limit failed after
    the extraction with "no harmful row in the calibration part ... give more harmful prompts per source", which
    named a cause that was not it (tester finding). ``herald fit``, ``eval`` and ``recipes`` call it.

    Args:
        capped: the rows after the ``--max-per-source`` cap; ``tokenized``: those of them within ``max_tokens``
            (``--max-tokens``, capped at the backbone's position table); ``test_fraction``, ``seed``,
            ``max_per_source``: those of the random split (:func:`~.corpus.require_split_parts`).
        backbone: the backbone; where its position table is ``max_tokens`` (:func:`capped_max_tokens` capped
            ``--max-tokens`` there, or it was asked for exactly), the errors name the table and do not advise raising
            ``--max-tokens``, which cannot help ("raise it" was the advice for a 32-position backbone: tester
            finding).

    Raises:
        ValueError: naming ``--max-tokens``, the label, how many of its rows it skips, and the way out.
    """
    table, limit, advice = token_limit_words(backbone, max_tokens)
    if not tokenized.examples:
        raise ValueError(f"all {len(capped)} prompts exceed {limit} once rendered; "
                         + (advice if table else "raise it"))
    given, kept = Counter(e.label for e in capped), Counter(e.label for e in tokenized.examples)
    for name, label in LABELS.items():
        if not kept[label]:
            over = f"more tokens than {limit}" if table else f"more than --max-tokens {max_tokens} tokens"
            raise ValueError(f"all {given[label]} {name} rows render to {over}; a probe needs both labels: {advice}")
    for name, label in LABELS.items():
        if kept[label] < MIN_ROWS_PER_LABEL:  # capped holds at least that many (require_both_labels): the limit cut them
            skipped = tokenized.skipped_by_label[label]
            raise ValueError(f"{limit[0].upper() + limit[1:]} leaves {kept[label]} {name} row"
                             f"{'s' if kept[label] > 1 else ''} ({skipped} of {given[label]} render to more tokens and "
                             f"are skipped); a probe needs at least {MIN_ROWS_PER_LABEL} of each label: its test, "
                             f"calibration and fit parts each need both; {advice}")
    skipped = sum(tokenized.skipped_by_label.values())
    if skipped:  # the split of the capped rows was checked before the load; the rows left split otherwise
        try:
            require_split_parts(tokenized.examples, test_fraction, seed, max_per_source)
        except ValueError as exc:
            raise ValueError(f"{exc}; {skipped} prompts over {limit} were skipped before the "
                             f"split ({tokenized.skipped_by_label[1]} harmful, {tokenized.skipped_by_label[0]} benign): "
                             f"{advice}") from None


def extract_tokenized_states(backbone: Backbone, corpus: TokenizedCorpus, cache: StateCache | None,
                             token_budget: int = 4096, desc: str = "extracting states") -> CorpusStates:
    """The states of the kept examples of :func:`tokenize_within_limit`, read from ``cache`` or extracted."""
    states = states_of_token_ids(backbone, corpus.token_ids, cache, token_budget, 32, desc)
    return CorpusStates(corpus.examples, states, np.array([len(t) for t in corpus.token_ids]), corpus.skipped)


def states_of_token_ids(
    backbone: Backbone, token_ids: Sequence[Sequence[int]], cache: StateCache | None, token_budget: int = 4096,
    max_rows: int = 32, desc: str = "extracting states",
) -> np.ndarray:
    """States of prompts already tokenized, computing only those missing from ``cache`` (``None``: no cache), in
    batches of at most ``token_budget`` padded tokens and ``max_rows`` prompts, with a tqdm bar titled ``desc``.

    Returns:
        ``(batch, layer, d_model)`` float32, in input order; ``(0, layer, d_model)`` for no prompt.
    """
    if not token_ids:  # every prompt over the limit: callers name that; np.stack would fail on no arrays
        return np.zeros((0, backbone.info.num_layers, backbone.info.hidden_size), np.float32)
    states: list[np.ndarray | None] = [cache.get(ids) if cache else None for ids in token_ids]
    missing = [i for i, s in enumerate(states) if s is None]
    if cache and len(missing) < len(token_ids):  # else the bar's total looked short of the prompts counted (tester)
        log.info("%s: %d of %d prompts' states read from the cache, %d to compute", desc,
                 len(token_ids) - len(missing), len(token_ids), len(missing))
    batches = plan_batches([len(token_ids[i]) for i in missing], token_budget, max_rows)
    with tqdm(total=len(missing), desc=desc, unit="prompt", disable=not missing) as bar:
        for batch in batches:
            rows = [missing[j] for j in batch]
            out = backbone.last_token_states([token_ids[i] for i in rows]).numpy()
            for i, row_states in zip(rows, out):
                states[i] = row_states
                if cache:
                    cache.put(token_ids[i], row_states)
            bar.update(len(rows))
    return np.stack(states)

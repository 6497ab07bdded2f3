"""Probe artifact: ``probe.safetensors`` (tensors) + ``probe.json`` (manifest). No pickle (DESIGN section 2).

Tensors: ``directions`` fp16 ``(layer, d_model)``; ``centers``, ``scales`` fp32 ``(layer,)``; ``feature_mean``,
``feature_std`` fp32 ``(7,)``; ``scorer.mlp.0.weight`` ``(32, 7)``, ``scorer.mlp.0.bias`` ``(32,)``,
``scorer.mlp.2.weight`` ``(1, 32)`` fp32.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load as load_bytes
from safetensors.numpy import save as save_bytes

from herald_service import __version__
from herald_service.errors import ProbeMismatch
from herald_service.out_path import write_bytes_atomically, write_text_atomically
from herald_service.probes.directions import LayerDirections
from herald_service.probes.folder import MANIFEST_FILE, TENSORS_FILE, ProbeAlreadyThere, manifest_path, probe_folder_lock
from herald_service.probes.features import FEATURE_SET, FEATURE_SETS, FeatureStats
from herald_service.probes.probe import FittedProbe
from herald_service.probes.scorer import TrajectoryScorer
from herald_service.prompt_text import PROMPT_TEXT
from herald_service.strict_json import StrictJsonError, loads_unique
from herald_service.types import BackboneInfo

log = logging.getLogger(__name__)

FORMAT_VERSION = 1

TENSORS_METADATA = {"format": "herald-probe"}
"""The ``__metadata__`` of ``probe.safetensors``: one key, so that the same probe is the same bytes. safetensors writes
its metadata map in an order that changes from one call to the next (a Rust ``HashMap``), so with a second key
(``format_version``, before 2026-12) two fits with the same seed wrote equal tensors under headers that differed
(tester finding). The format version is ``probe.json``'s ``format_version``, which loading checks; loading reads no
metadata, so probes written with both keys (the committed ones) load as before."""


def backbone_manifest(info: BackboneInfo) -> dict[str, Any]:
    """The manifest's ``backbone`` block for a loaded backbone."""
    return {
        "id": info.model_id,
        "revision": info.revision,
        "num_layers": info.num_layers,
        "hidden_size": info.hidden_size,
        "config_hash": info.config_hash,
        "chat_template_hash": info.chat_template_hash,
        "slug": info.slug,
    }


def save_probe(probe: FittedProbe, folder: Path, manifest: dict[str, Any], keep_existing: bool = False) -> None:
    """Write ``probe.safetensors`` and ``probe.json`` into ``folder`` (created if needed), each through a temporary
    file renamed over the old one: a fit stopped during the write leaves each file whole, old or new. The pair is
    written under the folder's lock (:func:`~herald_service.probes.folder.probe_folder_lock`), waiting for another
    writer to finish: two fits given one ``--out --overwrite`` paired one's tensors with the other's manifest (tester
    finding), and now leave the pair of the one that wrote last. A copy of one file alone can still pair them:
    ``probe.json`` records the sha256 of the ``probe.safetensors`` bytes (``tensors_sha256``), and loading refuses
    tensors of other bytes (:func:`load_probe_files`); it spoke of numerics where the manifest's ``reference`` logits
    were not reproduced (tester finding). Probes saved before the field load as before.

    Args:
        manifest: must hold ``backbone`` (see :func:`backbone_manifest`); training data, metrics and the command
            go in as given. Format version, feature set, threshold, its method (and the target false-positive rate of
            ``target_fpr``), peak layer and Herald version are filled in here.
        keep_existing: write nothing where ``folder`` holds a probe file, found under the lock (another fit given the
            folder may have written one since the caller last looked: ``herald fit`` without ``--overwrite``).

    Raises:
        ProbeAlreadyThere: with ``keep_existing``, ``folder`` holds ``probe.json`` or ``probe.safetensors``; nothing
            was written.
        OSError: a file could not be written (a full disk, a read-only folder), naming ``folder``; tensors written
            into a folder that held none are removed again, so the folder does not look like a probe.
    """
    folder.mkdir(parents=True, exist_ok=True)
    state = {f"scorer.{k}": v.detach().cpu().numpy().astype(np.float32) for k, v in probe.scorer.state_dict().items()}
    tensors = {
        "directions": probe.directions.directions.astype(np.float16),
        "centers": probe.directions.centers.astype(np.float32),
        "scales": probe.directions.scales.astype(np.float32),
        "feature_mean": probe.feature_stats.mean.astype(np.float32),
        "feature_std": probe.feature_stats.std.astype(np.float32),
        **state,
    }
    # Each file is written whole or not at all (a fit stopped mid-write left one cut short: tester finding), with the
    # mode a new file gets under the umask (0644 as a rule: safetensors' own writer made it 0600, and a probe fitted by
    # one user could not be served by another, the image's uid 10001 on a mounted volume: breaker finding).
    tensor_bytes = save_bytes(tensors, metadata=TENSORS_METADATA)
    with probe_folder_lock(folder):  # the check and both writes, as one step against another writer
        present = [name for name in (MANIFEST_FILE, TENSORS_FILE) if (folder / name).exists()]
        if keep_existing and present:
            raise ProbeAlreadyThere(folder, present)
        had_tensors = TENSORS_FILE in present
        try:
            write_bytes_atomically(folder / TENSORS_FILE, tensor_bytes)
            _write_manifest(probe, folder, manifest, tensors, tensor_bytes)
        except OSError as exc:
            # a full disk stopped the manifest after the tensors: a folder of tensors alone is no probe, and the next
            # fit into it was refused as "already holds a probe" (tester finding); the message named no file
            if not had_tensors and not (folder / MANIFEST_FILE).exists():
                (folder / TENSORS_FILE).unlink(missing_ok=True)
            raise OSError(exc.errno, f"could not write the probe into {folder}: {exc.strerror or exc}"
                          + ("" if had_tensors else "; nothing was left there")) from exc


def _write_manifest(probe: FittedProbe, folder: Path, manifest: dict[str, Any], tensors: dict[str, np.ndarray],
                    tensor_bytes: bytes) -> None:
    """Write ``probe.json`` for :func:`save_probe`, once the tensors it records are in place."""
    full = {
        "format_version": FORMAT_VERSION,
        "herald_version": __version__,
        "feature_set": probe.feature_set,
        "feature_names": list(probe.feature_names),
        "threshold": probe.threshold,
        "threshold_method": probe.threshold_method,
        # only with the method that uses it: a max_f1 probe's manifest is as before, byte for byte
        **({"target_fpr": probe.target_fpr} if probe.target_fpr is not None else {}),
        "peak_layer": probe.peak_layer,
        "directions_bytes": int(tensors["directions"].nbytes),  # for people; loading checks the tensor's shape
        "tensors_sha256": hashlib.sha256(tensor_bytes).hexdigest(),  # loading refuses another fit's tensors
        **manifest,
    }
    write_text_atomically(folder / MANIFEST_FILE, json.dumps(full, indent=2, sort_keys=False) + "\n")


def read_manifest(folder: Path, data: bytes | None = None) -> dict[str, Any]:
    """Parse ``probe.json`` (``data``: its bytes, already read).

    Raises:
        ProbeMismatch: if the folder or file is missing, not valid JSON (NaN and Infinity are not), repeats a key, or
            is not a JSON object. ``herald fit`` writes none of these, so the message says the file is corrupt or
            hand-edited and names the field.
    """
    path = folder / MANIFEST_FILE if data is not None else manifest_path(folder)
    corrupt = f"probe file {path} is corrupt or hand-edited"
    try:
        manifest = loads_unique(path.read_bytes() if data is None else data, check_numbers=True)
    except StrictJsonError as exc:  # NaN, Infinity, 1e999, a key given twice: json.loads took them silently
        # exc.problem, not exc.message: the request-body advice ("send a finite number") misled (breaker finding)
        raise ProbeMismatch(f"{corrupt}: {exc.problem}; refit the probe with `herald fit`", field="probe") from None
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deeply
        raise ProbeMismatch(f"{corrupt}: not valid JSON ({exc}); refit the probe with `herald fit`", field="probe") from None
    if not isinstance(manifest, dict):
        raise ProbeMismatch(f"probe file {path} holds a JSON {type(manifest).__name__}, not an object", field="probe")
    return manifest


def _json_text(value: Any) -> str:
    """``value`` as ``probe.json`` writes it (``null``, ``"1"``, ``1e+308``), cut to 60 characters: Python's ``repr``
    read ``None`` for a JSON null."""
    text = json.dumps(value, ensure_ascii=False)
    if not _utf8(text):  # a lone surrogate (JSON's "\\ud800"): shown escaped, as a terminal can print it
        text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad_field(path: Path, fields: dict[str, Any], key: str, need: str, prefix: str = "") -> ProbeMismatch:
    """The error for field ``prefix + key`` of ``path`` (``fields`` holds ``key``, or lacks it), which must be
    ``need``: it says "missing" for an absent field, else shows the value as JSON."""
    if key not in fields:
        return ProbeMismatch(f"probe file {path}: {prefix}{key} is missing; it must be {need}", field="probe")
    return ProbeMismatch(f"probe file {path}: {prefix}{key} must be {need}; got {_json_text(fields[key])}", field="probe")


def check_feature_set(manifest: dict[str, Any], path: Path) -> str:
    """The feature set of ``manifest`` (read from ``path``); a manifest without one predates selectable sets and
    means ``herald-v1``.

    Raises:
        ProbeMismatch: naming ``path``, for a feature set this Herald cannot compute (e.g. a probe from a newer
            version), or ``feature_names`` that disagree with the set's.
    """
    name = manifest.get("feature_set", FEATURE_SET)
    if not isinstance(name, str):  # a list crashed the lookup with "unhashable type" (breaker finding)
        raise _bad_field(path, manifest, "feature_set", "a string")
    if name not in FEATURE_SETS:
        raise ProbeMismatch(
            f"probe file {path}: feature set {name!r} is unknown to Herald {__version__} (known:"
            f" {', '.join(sorted(FEATURE_SETS))}); use a Herald version that has it, or refit the probe with"
            " `herald fit --feature-set`",
            field="probe",
        )
    names = manifest.get("feature_names")
    if names is not None and (not isinstance(names, list) or tuple(names) != FEATURE_SETS[name].names):
        raise ProbeMismatch(f"probe file {path}: feature_names {_json_text(names)} do not match feature set {name!r}"
                            f" {list(FEATURE_SETS[name].names)}", field="probe")
    return name


THRESHOLD_LIMIT = 1e4
"""Largest magnitude of a probe's logit threshold. The 288-parameter scorer's logits on standardized features are in
the tens (the shipped probes' thresholds are about 1); a threshold of 1e308 passed every prompt (breaker finding)."""


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


MAX_REFERENCE_PROMPTS = 32
"""Most reference prompts a ``probe.json`` may hold (``herald fit`` records 12: :mod:`herald_service.probes.reference`);
all are scored in one batch at every load, each of at most
:data:`~herald_service.probes.reference.REFERENCE_MAX_TOKENS` tokens (64 hand-edited prompts of 6,000 tokens each
held a load for over 10 minutes and 11.6 GB: tester finding)."""
MAX_REFERENCE_CHARACTERS = 500


def check_reference_block(manifest: dict[str, Any], path: Path) -> None:
    """Refuse a ``reference`` block (:mod:`herald_service.probes.reference`; optional: probes fitted before Herald
    recorded one have none) that is not an object holding ``prompts``, a list of 1 to :data:`MAX_REFERENCE_PROMPTS`
    objects each with a non-empty ``text`` of at most :data:`MAX_REFERENCE_CHARACTERS` characters of UTF-8 text (no
    lone surrogate) and a finite ``logit`` within +-:data:`THRESHOLD_LIMIT`, and optionally a string ``numerics``.
    Their rendered length is checked where they are tokenized
    (:func:`~herald_service.probes.reference.reference_logits`).

    Raises:
        ProbeMismatch: naming ``path`` and the first bad field (``reference.prompts[2].logit``) with its value.
    """
    if "reference" not in manifest:
        return
    block = manifest["reference"]
    if not isinstance(block, dict):
        raise _bad_field(path, manifest, "reference", "an object with prompts")
    prompts = block.get("prompts")
    if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_REFERENCE_PROMPTS:
        raise _bad_field(path, block, "prompts", f"a list of 1 to {MAX_REFERENCE_PROMPTS} objects with text and logit",
                         prefix="reference.")
    for i, entry in enumerate(prompts):
        where = f"reference.prompts[{i}]"
        if not isinstance(entry, dict):
            raise ProbeMismatch(f"probe file {path}: {where} must be an object with text and logit; got"
                                f" {_json_text(entry)}", field="probe")
        text = entry.get("text")
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_REFERENCE_CHARACTERS or not _utf8(text):
            raise _bad_field(path, entry, "text", f"a non-empty string of at most {MAX_REFERENCE_CHARACTERS} characters"
                             " of UTF-8 text", prefix=f"{where}.")
        if not _finite_within(entry.get("logit"), THRESHOLD_LIMIT):
            raise _bad_field(path, entry, "logit", f"a finite number within +-{THRESHOLD_LIMIT:g}", prefix=f"{where}.")
    if "numerics" in block and not isinstance(block["numerics"], str):
        raise _bad_field(path, block, "numerics", "a string", prefix="reference.")


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: JSON's ``\\ud800`` escape reads as a lone surrogate, which the tokenizer
    refused with a traceback (tester finding)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _finite_within(value: Any, limit: float) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and abs(value) <= limit)


def check_manifest(manifest: dict[str, Any], path: Path) -> str:
    """The feature set of ``manifest`` (read from ``path``: :func:`check_feature_set`), after refusing one whose served
    fields are missing or out of range, naming the file and the field: ``format_version`` (the integer
    :data:`FORMAT_VERSION`), ``feature_set`` (:func:`check_feature_set`), ``backbone.num_layers`` and
    ``backbone.hidden_size`` (positive integers), ``threshold`` (a finite number of magnitude at most
    :data:`THRESHOLD_LIMIT`), ``threshold_method`` (a string), the optional ``target_fpr`` (a number between 0 and
    1, written by ``herald fit --threshold-method target_fpr``), ``peak_layer`` (an integer decoder layer,
    1..num_layers, which ``/steer`` edits by default), the optional ``tensors_sha256`` (64 lower-case hex digits) and
    the optional ``reference`` block (:func:`check_reference_block`).

    Raises:
        ProbeMismatch: naming ``path``, the first bad field, what it must be and its value (or that it is missing).
    """
    version = manifest.get("format_version")
    if not _integer(version) or version != FORMAT_VERSION:
        if "format_version" not in manifest:
            raise ProbeMismatch(f"probe file {path}: format_version is missing; need the integer {FORMAT_VERSION}",
                                field="probe")
        raise ProbeMismatch(f"probe file {path}: format_version {_json_text(version)} is not supported; need the integer"
                            f" {FORMAT_VERSION}", field="probe")
    feature_set = check_feature_set(manifest, path)
    backbone = manifest.get("backbone")
    if not isinstance(backbone, dict):
        raise _bad_field(path, manifest, "backbone", "an object with num_layers and hidden_size")
    for key in ("num_layers", "hidden_size"):
        if not _integer(backbone.get(key)) or backbone[key] < 1:
            raise _bad_field(path, backbone, key, "a positive integer", prefix="backbone.")
    threshold = manifest.get("threshold")
    if not _finite_within(threshold, THRESHOLD_LIMIT):
        raise _bad_field(path, manifest, "threshold", f"a finite number within +-{THRESHOLD_LIMIT:g} (a logit)")
    if not isinstance(manifest.get("threshold_method"), str) or not manifest["threshold_method"]:
        raise _bad_field(path, manifest, "threshold_method", "a non-empty string")
    if "target_fpr" in manifest and not (_finite_within(manifest["target_fpr"], 1) and 0 < manifest["target_fpr"] < 1):
        raise _bad_field(path, manifest, "target_fpr", "a number between 0 and 1 (a false-positive rate)")
    if "target_fpr" in manifest and manifest["threshold_method"] != "target_fpr":  # a hand edit: which one holds?
        raise _bad_field(path, manifest, "target_fpr", "absent unless threshold_method is target_fpr")
    peak, layers = manifest.get("peak_layer"), backbone["num_layers"]
    if not _integer(peak) or not 1 <= peak <= layers:
        raise _bad_field(path, manifest, "peak_layer", f"an integer decoder layer in 1..{layers}")
    if "tensors_sha256" in manifest and not (isinstance(manifest["tensors_sha256"], str)
                                             and re.fullmatch(r"[0-9a-f]{64}", manifest["tensors_sha256"])):
        raise _bad_field(path, manifest, "tensors_sha256", f"the sha256 of {TENSORS_FILE} (64 lower-case hex digits)")
    check_reference_block(manifest, path)
    return feature_set


MIN_DIVISOR = 1e-6
"""Smallest ``scales`` or ``feature_std`` entry a probe may hold: both divide, and a 1e-40 loaded, then failed every
request with a non-finite logit (breaker finding). The committed probes' smallest is 0.0058."""
DIRECTION_NORM_TOLERANCE = 1e-2
"""Largest distance from 1 of a direction's L2 norm: directions are unit vectors (fp16 rounding moves the committed
probes' by under 1e-4); all-zero directions loaded and flagged every prompt (breaker finding)."""


def check_tensors(tensors: dict[str, np.ndarray], layers: int, width: int, n_features: int, path: Path) -> None:
    """Refuse probe tensors a served probe cannot use: a non-float dtype, a shape other than the manifest's
    (``directions`` ``(layers, width)``; ``centers``, ``scales`` ``(layers,)``; ``feature_mean``, ``feature_std``
    ``(n_features,)``), a non-finite value, a scale or feature std under :data:`MIN_DIVISOR` (zero std made every score
    NaN, which served as "allowed": breaker finding), or a direction that is not a unit vector.

    Raises:
        ProbeMismatch: naming the tensor and what is wrong.
    """
    shapes = {"directions": (layers, width), "centers": (layers,), "scales": (layers,),
              "feature_mean": (n_features,), "feature_std": (n_features,)}
    for name, value in tensors.items():
        if not np.issubdtype(value.dtype, np.floating):
            raise ProbeMismatch(f"probe tensor {name} in {path} is {value.dtype}; need a float dtype", field="probe")
        if name in shapes and value.shape != shapes[name]:
            raise ProbeMismatch(f"probe tensor {name} in {path} has shape {value.shape}; the manifest needs {shapes[name]}",
                                field="probe")
        if not np.isfinite(value).all():
            raise ProbeMismatch(f"probe tensor {name} in {path} holds non-finite values", field="probe")
    for name in ("scales", "feature_std"):
        if not (tensors[name] >= MIN_DIVISOR).all():
            raise ProbeMismatch(f"probe tensor {name} in {path} must be at least {MIN_DIVISOR:g} everywhere (it divides)",
                                field="probe")
    norms = np.linalg.norm(tensors["directions"].astype(np.float64), axis=1)
    if not (np.abs(norms - 1.0) <= DIRECTION_NORM_TOLERANCE).all():
        layer = int(np.argmax(np.abs(norms - 1.0)))
        raise ProbeMismatch(f"probe tensor directions in {path} must hold unit vectors; layer {layer + 1} has norm"
                            f" {norms[layer]:.4g}", field="probe")


def _check_scores(probe: FittedProbe, path: Path) -> None:
    """Refuse a probe whose tensors pass :func:`check_tensors` but whose scores are not numbers, or not a scorer's,
    found by scoring a few synthetic inputs that need no backbone: the trajectories ``(4, layer)`` of zeros, of +1, of
    -1 and of alternating +-1 (in within-class standard deviations, where prompts' trajectories lie), then all-zero
    states ``(1, layer, d_model)`` (their trajectory is ``-center / scale`` per layer). Centers of 3e38 loaded,
    and with ``HERALD_WARMUP=false`` the server said ready and answered every /classify 500 (tester pass); a scorer
    weight of 3e38 gave logits of 1e39, so every prompt scored 0 (allowed). The logits must be within
    +-:data:`THRESHOLD_LIMIT` (the shipped probes' are under 12 in magnitude on the trajectories, 27 on zero states).

    Raises:
        ProbeMismatch: naming ``path`` and the input that gave the bad score.
    """
    layers, width = probe.directions.num_layers, probe.directions.hidden_size
    alternating = np.where(np.arange(layers) % 2 == 0, 1.0, -1.0)
    trajectories = np.stack([np.zeros(layers), np.ones(layers), -np.ones(layers), alternating])
    for what, score in (("trajectories of 0, +1, -1 and alternating +-1 per layer",
                         lambda: probe.predict_trajectories(trajectories)),
                        ("all-zero hidden states", lambda: probe.predict(np.zeros((1, layers, width), np.float32)))):
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # overflow is what is being looked for
                logits = score().logits
        except ValueError:  # non-finite trajectories or logits (FittedProbe.predict_trajectories)
            logits = np.array([np.nan])
        if not np.isfinite(logits).all():
            raise ProbeMismatch(f"probe file {path} gives non-finite scores on {what} (a center, scale, feature"
                                " statistic or scorer weight is out of range); refit the probe with `herald fit`",
                                field="probe")
        if not (np.abs(logits) <= THRESHOLD_LIMIT).all():
            raise ProbeMismatch(f"probe file {path} gives logits up to {np.abs(logits).max():.3g} in magnitude on {what},"
                                f" beyond +-{THRESHOLD_LIMIT:g} (a scorer's are in the tens: a center, scale, feature"
                                " statistic or scorer weight is out of range); refit the probe with `herald fit`",
                                field="probe")


def check_compatible(manifest: dict[str, Any], info: BackboneInfo) -> None:
    """Refuse a probe fitted on another backbone; ``manifest`` has passed :func:`check_manifest` (as
    :func:`load_probe`'s has).

    Raises:
        ProbeMismatch: naming what differs (layer count, hidden size, config hash). When ``probe.json`` names the
            loaded backbone's id, the message says the file does not match that backbone rather than contrasting the
            two (equal) ids.
    """
    fitted = manifest["backbone"]
    problems = []
    for key, ours in (("num_layers", info.num_layers), ("hidden_size", info.hidden_size)):
        if fitted.get(key) != ours:
            problems.append(f"{key} {fitted.get(key)} in probe.json, {ours} in the backbone")
    if fitted.get("config_hash") != info.config_hash:
        problems.append("config hash differs (another architecture or size; or a probe fitted before 2026-12-05 on a"
                        " GPT-2, GPT-J, GPT-NeoX, BLOOM, Falcon, OPT, StableLM, StarCoder2 or Mixtral model, whose hash"
                        " then read fewer of its config's keys: fit it again)")
    if problems:
        # the same id on both sides read as a contradiction ("fitted on 'X' but the backbone is 'X'": breaker finding)
        head = (f"probe.json names backbone {info.model_id!r}, the one loaded, but does not match it"
                if fitted.get("id") == info.model_id
                else f"probe was fitted on {fitted.get('id')!r} but the backbone is {info.model_id!r}")
        raise ProbeMismatch(
            f"{head}: " + "; ".join(problems)
            + ". Give a probe fitted on this backbone (--probe; HERALD_PROBE for herald serve), or fit one with"
            " `herald fit`.",
            field="probe",
        )


def check_chat_template(manifest: dict[str, Any], info: BackboneInfo) -> None:
    """Refuse a probe fitted on prompts rendered with another chat template than the loaded backbone's (``info`` of
    the loaded tokenizer: :func:`check_compatible` runs before the load too, from ``config.json``, which holds no
    template), no template on either side included. The template decides the tokens a prompt ends on, whose states
    the probe reads, so its directions and threshold do not carry over: with a warning only, a conversion missing its
    ``chat_template.jinja`` made the shipped probe pass a pipe-bomb request at a score of 1e-84, and a whitespace-only
    or content-only template scored every prompt 0 (tester findings).

    Raises:
        ProbeMismatch: naming both templates' hashes (or "none") and what to do.
    """
    fitted, ours = manifest["backbone"].get("chat_template_hash"), info.chat_template_hash
    if fitted == ours:
        return
    shown = lambda h: f"chat_template_hash {h[:12]}..." if h else "no chat template: raw text"  # noqa: E731
    raise ProbeMismatch(f"probe was fitted on prompts rendered with {shown(fitted)}, but the backbone"
                        f" {info.model_id!r} renders them with {shown(ours)}: the probe reads the states of the tokens a"
                        " prompt ends on, so its scores do not hold. Restore the backbone's template (a cached GGUF"
                        " conversion: delete it to convert anew), or fit a probe for this template with `herald fit`.",
                        field="probe")


def compatibility_warnings(manifest: dict[str, Any], info: BackboneInfo) -> list[str]:
    """What differs between the backbone a probe was fitted on and ``info`` without making the probe unusable
    (:func:`check_compatible` and :func:`check_chat_template` refuse the rest): the weights' revision (fine-tuned or
    re-quantized weights of the same architecture: the directions may no longer hold), and the prompt-text rule
    (:mod:`herald_service.prompt_text`) when the probe names one other than the server's (a probe without one predates
    the rule: README says so for the shipped probe, so no line). Lines for ``herald serve``'s log; empty when all
    match."""
    fitted = manifest["backbone"]
    lines = []
    rule = manifest.get("training_data", {}).get("prompt_text")
    if rule and rule != PROMPT_TEXT:
        lines.append(f"probe was fitted on prompt text folded by rule {rule!r}; this server folds it by {PROMPT_TEXT!r}"
                     " (herald_service/prompt_text.py): prompts the rules read differently may score differently;"
                     " refit with `herald fit`")
    if fitted.get("revision") != info.revision:
        lines.append(f"probe was fitted on weights {fitted.get('revision')!r}, the backbone's are {info.revision!r}:"
                     " its directions and threshold may not hold for these weights; refit with `herald fit`")
    return lines


@dataclass(frozen=True)
class LoadedProbe:
    """A probe as :func:`load_probe_files` read it from its folder."""

    probe: FittedProbe
    manifest: dict[str, Any]
    sha256: str
    """SHA-256 (hex) of the bytes read, ``probe.json``'s then ``probe.safetensors``': what tells two probes apart
    where their folder names agree (two replicas mid-rollout, each with ``models/<slug>``); ``herald_model_info``'s
    ``probe_sha256`` label and ``/v1/info`` give it. Of the bytes loaded, not of the files read again later: a probe
    written over the folder while the backbone loaded was named by the new files' hash while the old probe served
    (re-tester)."""


def load_probe(folder: Path, info: BackboneInfo | None = None) -> tuple[FittedProbe, dict[str, Any]]:
    """Load a probe; with ``info``, first check it matches that backbone (:func:`load_probe_files`).

    Returns:
        The probe and its manifest.

    Raises:
        ProbeMismatch: as :func:`load_probe_files`.
    """
    loaded = load_probe_files(folder, info)
    return loaded.probe, loaded.manifest


def load_probe_files(folder: Path, info: BackboneInfo | None = None) -> LoadedProbe:
    """Load a probe, each of its two files read once; with ``info``, first check it matches that backbone.

    Raises:
        ProbeMismatch: missing, unreadable or incomplete files, a manifest field out of range (:func:`check_manifest`),
            tensors of other bytes than the manifest's ``tensors_sha256`` (another fit's), unusable tensors
            (:func:`check_tensors`) or scores (:func:`_check_scores`), an unknown feature set, or a backbone mismatch.
            A manifest without ``tensors_sha256`` (written before the field) loads with a warning logged.
    """
    manifest_file = manifest_path(folder)
    manifest_bytes = _read_probe_file(manifest_file)
    manifest = read_manifest(folder, manifest_bytes)
    feature_set = check_manifest(manifest, manifest_file)
    if info is not None:
        check_compatible(manifest, info)
    path = folder / TENSORS_FILE
    if not path.is_file():
        raise ProbeMismatch(f"no probe tensors at {path}", field="probe")
    tensor_bytes = _read_probe_file(path)
    try:
        tensors = dict(sorted(load_bytes(tensor_bytes).items()))  # by name, as load_file gave them: errors name the first
    except Exception as exc:  # safetensors raises its own SafetensorError (truncated, corrupt header)
        raise ProbeMismatch(f"cannot read probe tensors {path}: {type(exc).__name__}: {exc} (HERALD_PROBE)", field="probe") from exc
    missing = sorted({"directions", "centers", "scales", "feature_mean", "feature_std"} - set(tensors))
    if missing:
        raise ProbeMismatch(f"probe tensors {path} lack {', '.join(missing)} (HERALD_PROBE)", field="probe")
    layers, width = manifest["backbone"]["num_layers"], manifest["backbone"]["hidden_size"]
    check_tensors(tensors, layers, width, len(FEATURE_SETS[feature_set].names), path)
    scorer = TrajectoryScorer()
    try:
        scorer.load_state_dict({k.removeprefix("scorer."): torch.from_numpy(v) for k, v in tensors.items() if k.startswith("scorer.")})
    except RuntimeError as exc:  # missing or misshapen scorer weights
        raise ProbeMismatch(f"probe tensors {path} hold no valid 288-parameter scorer: {exc} (HERALD_PROBE)", field="probe") from exc
    probe = FittedProbe(
        directions=LayerDirections(tensors["directions"], tensors["centers"], tensors["scales"]),
        feature_stats=FeatureStats(tensors["feature_mean"], tensors["feature_std"]),
        scorer=scorer.eval(),
        threshold=float(manifest["threshold"]),
        threshold_method=manifest["threshold_method"],
        peak_layer=manifest["peak_layer"],
        feature_set=feature_set,
        target_fpr=manifest.get("target_fpr"),
    )
    _check_scores(probe, path)
    # last: tensors that cannot be used are named by what is wrong with them (cut short, misshapen); usable ones of
    # another fit were refused by the reference check with a message about numerics (tester finding). Probes saved
    # before the field have none.
    recorded, actual = manifest.get("tensors_sha256"), hashlib.sha256(tensor_bytes).hexdigest()
    if recorded is None:  # loaded as before, but said: another fit's tensors beside it would not be noticed (tester)
        log.warning("%s in %s records no tensors_sha256 (written before the field), so %s is not checked against it:"
                    " refit, or use the probe only with the tensors it was written with", MANIFEST_FILE, folder,
                    TENSORS_FILE)
    elif recorded != actual:
        raise ProbeMismatch(f"{TENSORS_FILE} is not the one {MANIFEST_FILE} was written with in {folder} (its sha256 is"
                            f" {actual[:16]}…, {MANIFEST_FILE} records {recorded[:16]}…): refit, or copy both files"
                            " together (HERALD_PROBE)", field="probe")
    return LoadedProbe(probe, manifest, hashlib.sha256(manifest_bytes + tensor_bytes).hexdigest())


def _read_probe_file(path: Path) -> bytes:
    """The bytes of one of a probe's files.

    Raises:
        ProbeMismatch: naming the file and why it cannot be read.
    """
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ProbeMismatch(f"cannot read {path}: {exc.strerror or exc} (HERALD_PROBE)", field="probe") from exc

"""Load what a Herald process serves: backbone, probe (checked against the backbone), and its manifest."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from herald_service.backbone.base import Backbone, token_limit
from herald_service.config import EMBEDDED_BACKBONE, BackboneSettings
from herald_service.engine.engine import classification_at
from herald_service.errors import InputTooLarge, ProbeMismatch
from herald_service.probes.artifact import (backbone_manifest, check_chat_template, check_compatible,
                                            compatibility_warnings, LoadedProbe, load_probe_files)
from herald_service.probes.folder import require_probe_folder
from herald_service.probes.probe import FittedProbe, HeraldProbe
from herald_service.probes.reference import (
    NOTABLE_REFERENCE_DISTANCE, REFERENCE_TOLERANCE, check_reference, threshold_warning,
)
from herald_service.types import AS_SENT, Classification, user_turn

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Runtime:
    """A loaded backbone and the probe that matches it."""

    backbone: Backbone
    probe: FittedProbe
    manifest: dict[str, Any]
    probe_path: str
    reference_distance: float | None = None
    """Median distance, in logits, of the probe's reference prompts from their fitted logits at load
    (:func:`~herald_service.probes.reference.check_reference`); ``None``: not checked (no reference block)."""
    probe_sha256: str | None = None
    """SHA-256 (hex) of the probe's files as loaded (:attr:`~herald_service.probes.artifact.LoadedProbe.sha256`);
    ``None`` for the fake backend's probe, fitted at start-up."""

    @property
    def reference_check(self) -> dict[str, Any] | None:
        """What ``/v1/info`` says of the reference check: ``{"median_logit_distance", "tolerance", "prompts"}``, or
        ``None`` when nothing was checked."""
        if self.reference_distance is None:
            return None
        return {"median_logit_distance": round(self.reference_distance, 4), "tolerance": REFERENCE_TOLERANCE,
                "prompts": len(self.manifest["reference"]["prompts"])}

    @property
    def probe_name(self) -> str:
        """The probe folder's name (``smollm2-135m-instruct``): what answers say ran, without the server's path. Read
        from the resolved path: ``HERALD_PROBE=.`` (or a path ending in ``..``) named it ``""``, so answers said
        ``herald/`` and ``herald_model_info`` could not tell replicas' probes apart (tester)."""
        return Path(self.probe_path).resolve().name

    def token_limit(self, max_tokens: int | None) -> tuple[int | None, str]:
        """:func:`~herald_service.backbone.base.token_limit` of this runtime's backbone: prompts past it are refused
        at admission."""
        return token_limit(self.backbone, max_tokens)

    def encode_texts(self, texts: Sequence[str], max_tokens: int | None = None, names: Sequence[str] | None = None,
                     max_tokens_name: str = "max_tokens", fold: bool = True) -> list[list[int]]:
        """Token ids of each text as one user turn (CLI use), every prompt checked against :meth:`token_limit`.

        Args:
            names: how an error names each prompt (``"--file prompts.txt line 7"``); default ``"prompt 1"``...
            max_tokens_name: how an error names the setting ``max_tokens`` (the CLI: ``"--max-tokens or
                HERALD_MAX_TOKENS"``).
            fold: as ``Backbone.encode``'s: false for the ids ``herald steer-eval`` generates from (the text as
                sent), whose refusal then says "as sent".

        Raises:
            InputTooLarge: a prompt renders to more than :meth:`token_limit` tokens (never silently truncated), named
                by ``names`` and with ``prompt_index`` set.
        """
        conversations = [user_turn(t) for t in texts]
        ids = self.backbone.encode(conversations, fold=fold)
        limit, name = self.token_limit(max_tokens)
        name = max_tokens_name if name == "max_tokens" else name
        for i, token_ids in enumerate(ids):
            if limit is not None and len(token_ids) > limit:
                where = names[i] if names is not None else f"prompt {i + 1}"
                where += "" if fold else f" {AS_SENT}"
                raise InputTooLarge(f"{where} renders to {len(token_ids)} tokens; the limit is {limit} ({name})",
                                    field=f"text[{i}]", prompt_index=i)
        return ids

    def classify_texts(self, texts: Sequence[str], max_tokens: int | None = None,
                       names: Sequence[str] | None = None, max_tokens_name: str = "max_tokens") -> list[Classification]:
        """Classify prompts synchronously, one batch, without the engine (CLI use).

        Args:
            names: how an error names each prompt (``herald classify``: ``"--file prompts.txt line 7"``); default
                ``"prompt 1"``, ``"prompt 2"``...
            max_tokens_name: how an error names the setting ``max_tokens`` (the CLI: ``"--max-tokens or
                HERALD_MAX_TOKENS"``).

        Raises:
            InputTooLarge: a prompt renders to more than :meth:`token_limit` tokens (never silently truncated), named
                by ``names`` and with ``prompt_index`` set.
        """
        ids = self.encode_texts(texts, max_tokens, names, max_tokens_name)
        out = self.probe.predict(self.backbone.last_token_states(ids))
        return [classification_at(out, i, len(ids[i])) for i in range(len(texts))]


def default_probe_folder(slug: str) -> Path:
    """``models/<slug>`` under the working directory if it exists there, else under the source checkout."""
    local = Path("models") / slug
    return local if local.exists() else REPO_ROOT / "models" / slug


def fake_runtime() -> Runtime:
    """The weight-free fake backbone with a probe fitted on its synthetic corpus (under 2 s after the imports on a busy
    2-core CPU)."""
    from herald_service.backbone.fake import FakeBackbone, synthetic_corpus

    backbone = FakeBackbone()
    prompts, labels = synthetic_corpus()
    states = backbone.last_token_states(backbone.encode([user_turn(p) for p in prompts])).numpy()
    probe = HeraldProbe(seed=0).fit(states, np.array(labels)).fitted_
    manifest = {
        "feature_set": probe.feature_set,
        "threshold": probe.threshold,
        "threshold_method": probe.threshold_method,
        "peak_layer": probe.peak_layer,
        "backbone": backbone_manifest(backbone.info),
        "training_data": {"synthetic": len(prompts)},
    }
    log.info("loaded the fake backbone (%d layers, d=%d) with a probe fitted on its %d synthetic prompts",
             backbone.info.num_layers, backbone.info.hidden_size, len(prompts))
    return Runtime(backbone, probe, manifest, "fake-backbone")  # no folder: fitted at start-up, named as its backbone


def probe_of_same_revision(settings: BackboneSettings, slug: str) -> Path | None:
    """A probe shipped with Herald (``models/*/probe.json`` of the source checkout) whose ``probe.json`` records this
    backbone's revision (:func:`~herald_service.backbone.loader.backbone_revision`: for a GGUF the file's sha256), for
    a backbone whose slug has no ``models/<slug>``, with one warning naming it; None where none matches. The embedded
    GGUF given by its path (slug ``smollm2-135m-instruct.q4-1``) was refused "no probe for backbone", though the
    shipped probe was fitted on that very file (tester finding). Only the checkout's committed probes are searched,
    never the working directory's ``models/``: any probe fitted there on the same weights (a 38-row experiment) was
    picked up by folder name, silently (re-tester finding). A ``probe.json`` that cannot be read is passed over here;
    the probe found is loaded and checked as any other (:func:`checked_probe`, :func:`load_runtime`).
    """
    from herald_service.backbone.loader import backbone_revision

    root = REPO_ROOT / "models"
    if not root.is_dir():
        return None
    revision = backbone_revision(settings.backbone, settings.cache_dir)
    for manifest in sorted(root.glob("*/probe.json")):
        try:
            recorded = json.loads(manifest.read_text(encoding="utf-8")).get("backbone", {}).get("revision")
        except (OSError, ValueError, AttributeError):
            continue
        if recorded == revision:
            log.warning("no probe at models/%s; using the shipped probe %s, fitted on this backbone's revision %s"
                        " (HERALD_PROBE or --probe names another)", slug, manifest.parent, revision)
            return manifest.parent
    return None


def checked_probe(settings: BackboneSettings) -> tuple[Path, LoadedProbe]:
    """The probe folder a process will load (``settings.probe``, or ``models/<backbone slug>``), its probe and its
    manifest, checked without loading the backbone: the backbone path names a model, and the folder holds a probe that
    :func:`load_probe` loads (``probe.json`` parses and its fields are in range, ``probe.safetensors`` is there,
    readable and of the shapes the manifest gives, the scorer's weights load). ``herald serve`` calls it before the
    server starts listening (these errors came after "Application startup complete", or after the weights loaded:
    breaker pass; a bad ``probe.json`` value or tensor came after "Uvicorn running": tester finding). Whether the probe
    fits the backbone (layers, hidden size, config hash: :func:`~herald_service.probes.artifact.check_compatible`) is
    checked by :func:`load_runtime`, against ``config.json`` before the weights load: a GGUF backbone, the embedded
    one included, has no config until it is converted.

    Raises:
        BackboneError: the backbone path does not exist or holds no model
            (:func:`~herald_service.backbone.loader.backbone_slug`).
        ProbeMismatch: the folder does not exist, ``settings.probe`` is a file (``probe.json`` itself, say), or
            :func:`load_probe` refuses the probe.
    """
    from herald_service.backbone.loader import backbone_slug

    if settings.probe is not None:
        require_probe_folder(settings.probe, "--probe or HERALD_PROBE")
    slug = backbone_slug(settings.backbone)
    folder = settings.probe or default_probe_folder(slug)
    if not folder.exists() and settings.probe is None:
        folder = probe_of_same_revision(settings, slug) or folder
    if not folder.exists():
        hint = "" if settings.backbone == EMBEDDED_BACKBONE else " (fit one with `herald fit --backbone ...`)"
        looked = [folder]
        if settings.probe is None:  # the default: named as both places it was looked for (a researcher found
            local = Path("models") / slug  # `herald fit`'s default, under the working directory, not named)
            looked = [local, folder] if local.resolve() != folder.resolve() else [folder]
        where = " or ".join(map(str, looked))
        if settings.probe is None and not (REPO_ROOT / "models").is_dir():
            # an installed package (the Docker image): the shipped probes are a working directory's models/, which
            # probe_of_same_revision does not search (tester: the embedded GGUF given by its path was refused there)
            hint += (" (a shipped probe fitted on the same weights is looked for only in a source checkout's models/;"
                     " this install has none: name the folder, e.g. HERALD_PROBE=models/smollm2-135m-instruct)")
        raise ProbeMismatch(f"no probe for backbone {slug!r} at {where}{hint}; set --probe or HERALD_PROBE", field="probe")
    return folder, load_probe_files(folder)


def load_runtime(settings: BackboneSettings, check_weights: bool = True) -> Runtime:
    """Load the configured backbone and probe.

    Args:
        check_weights: score the probe's reference prompts and refuse weights that move them
            (:func:`~herald_service.probes.reference.check_reference`); off only for ``herald reference``, which
            records them.

    Raises:
        BackboneError: the backbone cannot be found or loaded.
        ProbeMismatch: the probe is missing, malformed, fitted on another backbone (layers, width, config hash, chat
            template), or the backbone's weights do not give its reference logits
            (:func:`~herald_service.probes.reference.check_reference`).
    """
    if settings.fake_backend:
        return fake_runtime()
    import torch

    from herald_service.backbone.hf import HFBackbone, config_info
    from herald_service.backbone.loader import resolve_backbone
    from herald_service.backbone.model_checks import refuse_a_folder_without_tokenizer

    from transformers.utils import logging as transformers_logging

    # transformers' "Loading weights" bar (carriage returns) went to the stderr of classify, plot and reference, which
    # print warnings and errors only (tester), and into serve's log
    transformers_logging.disable_progress_bar()
    folder, loaded = checked_probe(settings)  # before a backbone load of seconds to minutes
    probe, manifest = loaded.probe, loaded.manifest
    resolved = resolve_backbone(settings.backbone, settings.cache_dir)
    # a folder of config.json alone read as a probe mismatch ("32 layers, hidden 4096": transformers' defaults) where
    # fit named the missing tokenizer (tester): its files first, then the probe against its config
    refuse_a_folder_without_tokenizer(resolved.folder)
    check_compatible(manifest, config_info(resolved))  # another architecture: refused before its weights load
    if settings.num_threads:
        torch.set_num_threads(settings.num_threads)
    backbone = HFBackbone(
        resolved, settings.device, settings.dtype, settings.padding_side, compile_graphs=settings.compile_graphs,
        compile_batches=settings.compile_batches and settings.device != "cpu" and torch.cuda.is_available(),
        matmul_dtype=settings.matmul_dtype,
    )
    check_compatible(manifest, backbone.info)  # the loaded model's own config, as fit and eval record it
    check_chat_template(manifest, backbone.info)
    distance = None
    if check_weights:  # the weights: one forward pass of 12 short prompts
        distance = check_reference(manifest, probe, backbone)
        if distance is None:
            log.warning("probe %s records no reference logits (fitted before Herald recorded them): this backbone's"
                        " weights are not checked against the ones it was fitted on; record them with `herald"
                        " reference` on the weights it was fitted on, or refit with `herald fit`", folder)
        elif distance > NOTABLE_REFERENCE_DISTANCE and backbone.info.matmul_dtype:
            # a tester's small probe moved 0.47 in bf16: 3 of its 30 benign verdicts differed from herald eval's
            log.warning("reference prompts' logits moved by a median of %.2f from those the probe records (tolerance"
                        " %g) with %s linear layers: verdicts near the threshold can differ from those herald fit and"
                        " eval report; HERALD_MATMUL_DTYPE=weights serves in the weights' dtype, as the probe was"
                        " recorded", distance, REFERENCE_TOLERANCE, backbone.info.matmul_dtype)
        else:
            log.info("reference prompts' logits moved by a median of %.2f from those the probe records (tolerance"
                     " %g)", distance, REFERENCE_TOLERANCE)
    for warning in compatibility_warnings(manifest, backbone.info):
        log.warning("%s (probe %s)", warning, folder)
    edited = threshold_warning(manifest, probe.threshold)
    if edited is not None:
        log.warning("%s (probe %s)", edited, folder)
    numerics = backbone.info.dtype + (f", {backbone.info.matmul_dtype} linear layers" if backbone.info.matmul_dtype else "")
    # the threshold as served: probe.json's, which an operator may have edited (nothing else says so at start-up)
    log.info("loaded %s on %s (%s) with probe %s (threshold %.4f logit, %s)", backbone.info.model_id,
             backbone.info.device, numerics, folder, probe.threshold, probe.threshold_method)
    return Runtime(backbone, probe, manifest, str(folder), distance, loaded.sha256)

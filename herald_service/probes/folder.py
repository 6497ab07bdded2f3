"""A probe folder's file names, and the check of a probe path that needs neither numpy nor torch: the CLI runs it
before those imports (about 2 s), so a wrong ``--probe`` is named at once."""

from __future__ import annotations

from pathlib import Path

from herald_service.errors import ProbeMismatch

TENSORS_FILE = "probe.safetensors"
MANIFEST_FILE = "probe.json"


def require_probe_folder(folder: Path, option: str) -> None:
    """Refuse a probe path given by ``option`` (``--probe or HERALD_PROBE``, ``--probe``) that does not exist or is a
    file, as ``probe.json`` itself often is; the probe's files are checked when it loads.

    Raises:
        ProbeMismatch: naming the path and ``option``; for a file beside a ``probe.json``, its folder to use.
    """
    if not folder.exists():
        raise ProbeMismatch(f"probe folder {folder} does not exist ({option})", field="probe")
    if folder.is_file():
        advice = f"use {folder.parent}" if (folder.parent / MANIFEST_FILE).is_file() else f"{folder} is a file"
        raise ProbeMismatch(f"the probe ({option}) must be its folder, the one holding {MANIFEST_FILE}: {advice}",
                            field="probe")

"""The software that fitted a probe or ran an evaluation, recorded beside its data (``probe.json``'s ``software``,
``herald eval`` results' ``meta.software``).

A probe's manifest named the data (files, sha256, command, seed) and the backbone, but of the code only
``herald_version``, which stays 0.1.0 across commits: a refit after a forward-pass change, or under another torch or
transformers, gave other numbers with nothing in the files to say why (tester finding). What is recorded here is
enough to tell two runs' software apart, not to rebuild it.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

from herald_service import __version__

PACKAGES = ("torch", "transformers", "numpy", "scikit-learn", "safetensors")
"""Distributions whose versions change what a fit or an evaluation computes."""

_PACKAGE_DIR = Path(__file__).resolve().parent


def software() -> dict[str, str | bool | None]:
    """``{"herald_version", "herald_commit", "herald_commit_dirty", "python", <package>: version}``.

    ``herald_commit`` is the git commit of the checkout Herald runs from (``git rev-parse HEAD``) and
    ``herald_commit_dirty`` whether its tracked files under ``herald_service/`` differ from that commit; both None
    for an installed package outside a checkout, or where git is missing. A package that is not installed reads None.
    """
    out: dict[str, str | bool | None] = {"herald_version": __version__, **_git_commit(),
                                         "python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(_PACKAGE_DIR), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git_commit() -> dict[str, str | bool | None]:
    top = _git("rev-parse", "--show-toplevel")
    # only a checkout of Herald itself: a site-packages folder inside some other repository is not one
    if top is None or Path(top).resolve() / _PACKAGE_DIR.name != _PACKAGE_DIR:
        return {"herald_commit": None, "herald_commit_dirty": None}
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return {"herald_commit": commit, "herald_commit_dirty": None if changes is None else bool(changes)}

"""A probe folder's file names, the check of a probe path that needs neither numpy nor torch (the CLI runs it
before those imports, about 2 s, so a wrong ``--probe`` is named at once), and the lock held while its files are
written."""

from __future__ import annotations

import errno
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from herald_service.errors import ProbeMismatch

log = logging.getLogger(__name__)

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


def manifest_path(folder: Path, option: str | None = None) -> Path:
    """``folder``'s ``probe.json``, which must be a file there; ``option`` (``--probe``) names the setting that gave the
    folder, where the message should (the probe loader's has none).

    Raises:
        ProbeMismatch: the file is missing, or is not a regular file (a folder of that name read "is missing":
            breaker and re-tester).
    """
    path = folder / MANIFEST_FILE
    if path.exists() and not path.is_file():
        raise ProbeMismatch(f"no probe at {folder}: {path} is not a file (a probe's {MANIFEST_FILE} is its JSON manifest"
                            f"{'; ' + option if option else ''})", field="probe")
    if not path.is_file():
        raise ProbeMismatch(f"no probe at {folder}: {MANIFEST_FILE} is missing ({option + '; ' if option else ''}fit one"
                            " with `herald fit`)", field="probe")
    return path


class ProbeFolderBusy(Exception):
    """Another process holds the probe folder's lock (:func:`probe_folder_lock` with ``wait`` off)."""


class ProbeAlreadyThere(Exception):
    """A probe folder that was to receive a new probe without replacing one holds one (:func:`~herald_service.probes.
    artifact.save_probe` with ``keep_existing``), found under the folder's lock; ``files`` names its probe files."""

    def __init__(self, folder: Path, files: list[str]) -> None:
        super().__init__(f"{folder} holds a probe ({', '.join(files)})")
        self.files = files


LOCK_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.EACCES, errno.EPERM}
"""Errors of opening or locking a folder that mean it cannot be locked here (a file system without ``flock``, some
network ones; a folder that cannot be opened for reading), not that another process holds it."""


@contextmanager
def probe_folder_lock(folder: Path, wait: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on the existing probe ``folder`` while its files are checked and written, so that two
    writers (two ``herald fit --overwrite`` given one ``--out``, or a fit and ``herald reference``) take turns: each
    writes its ``probe.json`` and ``probe.safetensors`` while the other waits, and the folder never pairs one's
    manifest with the other's tensors (tester finding: 1 in 4 tries, both exiting 0). The lock is ``fcntl.flock`` on
    the folder itself, so no lock file is left beside the probe (the committed ``models/`` folders would show one as
    untracked); it is released when the process ends, however it ends. Where the file system cannot lock a folder,
    the files are written unlocked with a warning.

    Args:
        wait: wait for another holder to let go (one line is logged at INFO first, naming the folder); False: raise.

    Raises:
        ProbeFolderBusy: ``wait`` is False and another process holds the lock.
    """
    handle = _locked_handle(folder, wait)
    try:
        yield
    finally:
        if handle is not None:
            os.close(handle)  # lets go of the lock


def _locked_handle(folder: Path, wait: bool) -> int | None:
    """A descriptor of ``folder`` holding its exclusive ``flock`` (:func:`probe_folder_lock`), or None where the file
    system cannot lock it (logged as a warning).

    Raises:
        ProbeFolderBusy: ``wait`` is False and another process holds the lock.
    """
    import fcntl

    unlocked = ("cannot lock the probe folder %s (%s): a probe written there by another process at the same time is"
                " not kept apart from this one")
    try:
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno not in LOCK_UNSUPPORTED:
            raise
        log.warning(unlocked, folder, exc.strerror)
        return None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise ProbeFolderBusy(f"another process is writing the probe in {folder}") from None
            log.info("another process is writing the probe in %s; waiting for it to finish", folder)
            fcntl.flock(handle, fcntl.LOCK_EX)
    except OSError as exc:
        if exc.errno not in LOCK_UNSUPPORTED:
            os.close(handle)
            raise
        log.warning(unlocked, folder, exc.strerror)
    except BaseException:
        os.close(handle)
        raise
    return handle

"""The one rule for the paths Herald's commands write (``--out`` of fit, eval, recipes, report, plot and data build;
``--plots`` of report), checked before any model loads or any work starts.

The file or folder named may be new, but the folder it goes in must already exist: a command never creates a chain
of folders, so a typo in a path (``--out reslts/run1.json``) is refused in a second rather than written somewhere
unnoticed after an hour-long run (a breaker finding on ``herald plot``; fit, eval, recipes and report used to create
any missing folders while plot refused them).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def refuse_an_empty_path(value: object, give: str, means: str = "the current directory") -> object:
    """Refuse a path given empty or as whitespace alone, before it becomes ``Path("")``, which is ``.``: ``herald fit
    --out ''`` (an unset shell variable) wrote ``probe.json`` and ``probe.safetensors`` into the current directory and
    exited 0, and ``herald plot --out ' '`` wrote `` .png`` (tester findings). The before-validator of every command's
    output path (``--out``, ``--scores-out``, ``--plots``), whose error pydantic names by the option; ``herald
    reference`` checks its ``--probe`` with it too. Other values pass unchanged.

    Args:
        give: what to give instead, ending the error (``"the JSON file to write"``).
        means: what the empty path would have meant.

    Raises:
        ValueError: ``value`` is an empty string (named with ``means``) or whitespace alone (a name no one would find).
    """
    if isinstance(value, str) and not value.strip():
        what = f"empty (it would be {means})" if not value else "blank (whitespace alone, a name no one would find)"
        raise ValueError(f"is {what}; give {give}")
    return value


def check_out_path(path: Path, option: str, give: str, *, folder: bool) -> None:
    """Refuse a path a command could not write, naming the option.

    Args:
        path: the path given (or the default), relative to the current directory or absolute.
        option: how the error names it, e.g. ``"--out"`` or ``"--out (the default)"``.
        give: what to give instead, ending the error, e.g. ``"the JSON file to write"``.
        folder: ``path`` is a folder the command writes files into (created when missing); else a file.

    Raises:
        ValueError: ``path`` is a folder where a file is written, or a file where a folder is; it is a link to
            nothing (``herald fit --out`` such a link ran the whole fit, then failed with "[Errno 17] File exists",
            and ``herald eval --out`` created the link's target: tester finding); it exists and is neither a regular
            file nor a folder (:func:`special_file_kind`: ``/dev/null``, ``/dev/stdout``); a folder on the way is a
            file; the folder ``path`` goes in does not exist; or a file cannot be made in that folder (not writable, a
            read-only or special file system such as /proc).
    """
    if path.is_symlink() and not path.exists():
        raise ValueError(f"{option} {path} is a link to {os.readlink(path)}, which does not exist; give {give}, or"
                         " point the link at an existing one")
    if path.is_dir() and not folder:
        raise ValueError(f"{option} {path} is a folder; give {give}")
    special = special_file_kind(path)
    if special is not None and not folder:  # written through, or replaced by a regular file (as root, /dev/null itself)
        raise ValueError(f"{option} {path} is not a regular file ({special}); give {give}")
    if path.exists() and not path.is_dir() and folder:  # a pipe was "a file" (re-tester)
        raise ValueError(f"{option} {path} is {'a file' if special is None else f'not a folder ({special})'}; give {give}")
    nearest = next((p for p in path.parents if p.exists()), Path("."))
    if not nearest.is_dir():
        raise ValueError(f"{option} {path}: {nearest} is a file; give {give}")
    if nearest != path.parent:
        raise ValueError(f"{option} {path}: folder {path.parent} does not exist; create it or choose another path")
    written = path if folder and path.is_dir() else path.parent
    problem = _write_problem(written)
    if problem is not None:
        raise ValueError(f"{option} {path}: cannot make a file in folder {written} ({problem})")


def special_file_kind(path: Path) -> str | None:
    """What ``path`` is when it exists (a link followed) and is neither a regular file nor a folder: ``"a character
    device"`` (``/dev/null``, a terminal), ``"a block device"``, ``"a pipe"`` (``/dev/stdout`` under a ``|``),
    ``"a socket"``; None for a regular file, a folder or a path that does not exist (or cannot be read)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _write_problem(folder: Path) -> str | None:
    """Why no file can be made in the existing ``folder`` (the OS error's text), or None: a file is made and removed,
    not ``os.access``, which root passes for /proc and /sys, whose writes then fail (tester finding: such an --out
    was refused only after the whole run)."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".herald-write-check-"):
            return None
    except OSError as exc:
        return str(exc.strerror or exc)


def check_cache_dir(path: Path, option: str = "--cache-dir") -> None:
    """Refuse a cache folder that cannot be made or written, before any model loads, without making it (the command
    makes it, with any missing folders on the way, when it first caches something). A file, ``/proc/x`` or a read-only
    place failed only after the backbone load and the tokenization, with a bare OSError or, for the embedded backbone,
    "set HERALD_CACHE_DIR" though the option had been given (tester finding).

    Raises:
        ValueError: naming ``option`` and the path: it, or a folder on its way, is a file; or no file can be made in
            it (or, while it does not exist, in the nearest folder on its way that does).
    """
    give = "give a writable folder for converted backbones and extracted states"
    nearest = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not nearest.is_dir():
        raise ValueError(f"{option} {path}" + (" is a file" if nearest == path else f": {nearest} is a file") + f"; {give}")
    problem = _write_problem(nearest)
    if problem is not None:
        where = "it" if nearest == path else f"{nearest}, where it would be made"
        raise ValueError(f"{option} {path}: cannot make a file in {where} ({problem}); {give}")


def refuse_an_input(path: Path, option: str, inputs: dict[str, list[Path | None]]) -> None:
    """Refuse an output ``path`` that the command also reads, before any work: ``herald eval --data d.jsonl --out
    d.jsonl --overwrite`` replaced its data with results, and ``herald report --results r.json --out r.json`` its
    results with Markdown (researcher pass). A ``.jsonl`` file inside an input folder is refused too: the next run
    given that folder would read it as labeled rows and stop on its first line.

    Args:
        path: the output file (``--out``, ``--scores-out``).
        option: how the error names it.
        inputs: option name -> the paths it gives (files or folders; None entries are skipped).

    Raises:
        ValueError: naming ``option``, the path and the input option it would overwrite or be read by.
    """
    target = path.resolve()
    for name, given in inputs.items():
        for source in given:
            if source is None:
                continue
            resolved = source.resolve()
            if resolved == target:
                raise ValueError(f"{option} {path} is the {name} file this command reads; give another path")
            if resolved.is_dir() and target.parent == resolved and target.suffix == ".jsonl":
                raise ValueError(f"{option} {path} is inside the {name} folder {source}, whose .jsonl files are read as"
                                 f" labeled rows: a later run given {name} {source} would read it; write it elsewhere")


def refuse_an_existing_out(out: Path, overwrite: bool, option: str = "--out", give: str = "the JSON file to write") -> None:
    """Refuse an ``--out`` results file that exists unless ``overwrite``, before any model loads: ``herald eval`` and
    ``herald recipes`` without ``--out`` silently replaced the committed docs/eval/results.json and recipes.json
    (breaker finding), as ``herald fit`` once replaced the shipped probe. A path that cannot be written is refused
    whatever ``overwrite`` says (:func:`check_out_path`: a folder, or a file in a folder
    that does not exist; writing to a folder failed after the whole run).

    ``option`` and ``give``: how the errors name the path and what to give instead (``--scores-out`` of ``herald
    eval``, a JSON-lines file).

    Raises:
        ValueError: naming ``option``, the path, and ``--overwrite``.
    """
    check_out_path(out, option, give, folder=False)
    if out.exists() and not overwrite:
        raise ValueError(f"{option} {out} already exists; pass {option} FILE to write elsewhere, or --overwrite to"
                         " replace it")
    if out.exists():
        check_replaceable(out, option, give)


def check_replaceable(path: Path, option: str, give: str = "the JSON file to write") -> None:
    """Refuse an existing file that ``--overwrite`` would replace but that cannot be written (read-only, immutable,
    append-only, or without a write bit: root could open one, and its owner marked it read-only) or is not a regular
    file (``/dev/null`` would have been replaced by one), before any work: the run
    failed at its final write (tester findings: ``--overwrite`` over a ``chattr +i`` or ``+a`` file started the
    extraction). Opens it for reading and writing, and writes nothing.

    Raises:
        ValueError: naming ``option``, the path and the reason (``give``: what to give instead of a special file).
    """
    if not path.resolve().is_file():
        special = special_file_kind(path)
        raise ValueError(f"{option} {path} is not a regular file{f' ({special})' if special else ''}; give {give}")
    mode = path.stat().st_mode
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):  # root may open it: its owner marked it read-only
        raise ValueError(f"{option} {path} cannot be replaced (read-only: mode {stat.S_IMODE(mode):04o}); make it"
                         " writable or choose another path")
    try:
        with open(path, "r+b"):
            pass
    except OSError as exc:
        raise ValueError(f"{option} {path} cannot be replaced ({exc.strerror or exc}); make it writable or choose"
                         " another path") from None


def umask_mode(mode: int) -> int:
    """``mode`` under the process's umask: what ``open`` or ``mkdir`` would give a new file (0o666) or folder (0o777),
    for files made by ``mkstemp``/``mkdtemp`` (0600/0700) or by safetensors (0600) that others must read. The umask is
    read by setting it and setting it back (Python has no getter)."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` as :func:`write_bytes_atomically` writes bytes."""
    write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder renamed over it, so a run stopped during
    the write leaves the old file or the new one, never one cut short. The temporary file is flushed to the disk
    (``fsync``) before the rename and the folder after it, so a power loss right after leaves the old file or the
    whole new one too, not an empty one under the new name (ext4 and XFS may write a rename before the renamed file's
    data). The file gets the mode a new file gets under the process's umask.

    A symbolic link is followed: its target is replaced.

    Raises:
        OSError: the folder cannot be written (the commands check that first: :func:`check_out_path`).
    """
    path = path.resolve()
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, umask_mode(0o666))  # mkstemp makes it 0600
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself
    finally:
        os.close(folder)


def check_probe_out(out: Path) -> None:
    """Refuse an ``--out`` the probe cannot be written to, before any model loads (it failed with "[Errno 20] Not a
    directory" after the extraction and fit: breaker finding), by the rule of
    :func:`check_out_path`: the probe's folder may be new, the folder it goes in must exist.

    Raises:
        ValueError: naming ``--out`` and the path at fault.
    """
    check_out_path(out, "--out", "a folder (the probe is written into it as probe.json and probe.safetensors)",
                   folder=True)

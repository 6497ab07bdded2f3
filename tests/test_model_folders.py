"""Transformers model folders as backbones: their revision (the contents of their files, memoized per file) and
where the default probe for one is looked for. Tiny folders of a config and a few bytes of "weights": nothing loads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from herald_service.backbone import loader
from herald_service.backbone.loader import resolve_backbone


def _model_folder(folder: Path, weights: bytes) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "_name_or_path": "tiny"}')
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_a_model_folder_revision_hashes_contents_so_same_size_checkpoints_differ(tmp_path: Path):
    # A researcher's pass: two random-initialized checkpoints of one shape had one revision (names and sizes only), so
    # herald fit reused the first one's cached states for the second and wrote an identical probe.
    cache = tmp_path / "cache"
    a = resolve_backbone(str(_model_folder(tmp_path / "a", b"\x01" * 4096)), cache)
    b = resolve_backbone(str(_model_folder(tmp_path / "b", b"\x02" * 4096)), cache)
    assert a.revision.startswith("content-sha256:") and a.revision != b.revision
    twin = resolve_backbone(str(_model_folder(tmp_path / "twin", b"\x01" * 4096)), cache)
    assert twin.revision == a.revision  # the same files elsewhere are the same weights
    (tmp_path / "a" / "model.safetensors").write_bytes(b"\x03" * 4096)  # overwritten in place, same size
    assert resolve_backbone(str(tmp_path / "a"), cache).revision not in (a.revision, b.revision)
    (tmp_path / "b" / "tokenizer.model").write_bytes(b"spm")  # a tokenizer file is part of the revision too
    assert resolve_backbone(str(tmp_path / "b"), cache).revision != b.revision


def test_a_file_is_hashed_once_per_change_and_without_a_writable_cache_every_time(tmp_path: Path, monkeypatch):
    read = []
    real = loader.sha256_file
    monkeypatch.setattr(loader, "sha256_file", lambda path, *a: read.append(path.name) or real(path, *a))
    folder = _model_folder(tmp_path / "m", b"\x05" * 4096)
    cache = tmp_path / "cache"
    first = loader.folder_revision(folder, cache)
    assert sorted(read) == ["config.json", "model.safetensors"] and len(list((cache / "file-sha256").iterdir())) == 2
    read.clear()
    assert loader.folder_revision(folder, cache) == first and read == []  # from the memo
    (folder / "config.json").write_text('{"model_type": "llama", "_name_or_path": "tiny", "x": 1}')
    assert loader.folder_revision(folder, cache) != first and read == ["config.json"]
    assert len(list((cache / "file-sha256").iterdir())) == 2  # the old config's memo is removed, not left behind
    read.clear()
    unwritable = Path("/proc/no-such-cache")
    assert loader.folder_revision(folder, unwritable) == loader.folder_revision(folder, None)
    assert sorted(read) == ["config.json", "config.json", "model.safetensors", "model.safetensors"]
    expected = hashlib.sha256(b"".join(f"{f.name}:{hashlib.sha256(f.read_bytes()).hexdigest()}\n".encode()
                                       for f in sorted(folder.iterdir()))).hexdigest()
    assert loader.folder_revision(folder, cache) == expected


def test_a_missing_default_probe_is_named_at_both_places_it_was_looked_for(tmp_path: Path, monkeypatch):
    # herald fit writes models/<slug> under the working directory; the lookup also tries the checkout's models/, and
    # its error named only that one (researcher pass)
    from herald_service.config import BackboneSettings
    from herald_service.engine.runtime import REPO_ROOT, checked_probe
    from herald_service.errors import ProbeMismatch

    folder = _model_folder(tmp_path / "MyModel", b"\x01" * 64)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProbeMismatch) as info:
        checked_probe(BackboneSettings(_env_file=None, backbone=str(folder)))
    assert str(info.value) == (f"no probe for backbone 'mymodel' at models/mymodel or {REPO_ROOT / 'models' / 'mymodel'}"
                               " (fit one with `herald fit --backbone ...`); set --probe or HERALD_PROBE")


def test_a_file_rewritten_in_place_with_its_mtime_restored_is_hashed_again(tmp_path: Path):
    # same size, inode and (restored) mtime kept the old sha256 in the memo (re-test); ctime is the kernel's
    import os
    import stat
    import time

    folder = _model_folder(tmp_path / "m", b"\x01" * 4096)
    cache = tmp_path / "cache"
    weights = folder / "model.safetensors"
    before = weights.stat()
    first = loader.folder_revision(folder, cache)
    time.sleep(0.02)
    with weights.open("r+b") as fh:  # in place: same inode, same size
        fh.write(b"\x02" * 4096)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert weights.stat().st_mtime_ns == before.st_mtime_ns and weights.stat().st_ino == before.st_ino
    assert loader.folder_revision(folder, cache) == loader.folder_revision(folder, None) != first
    modes = {stat.S_IMODE(memo.stat().st_mode) for memo in (cache / "file-sha256").iterdir()}
    umask = os.umask(0)
    os.umask(umask)
    assert modes == {0o666 & ~umask}  # as every cache file (tempfile's 0600 hid them from other users)
    assert not list((cache / "file-sha256").glob("*.part"))

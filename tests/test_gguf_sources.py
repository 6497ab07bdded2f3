"""GGUF models in pieces: byte chunks (PyPI wheel sets) and llama.cpp gguf-split shards, on tiny synthetic GGUFs
written with the ``gguf`` package (no model, no download). The transformers conversion itself is replaced by a stub
that records the single file it was given."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import gguf
import numpy as np
import pytest

from herald_service.backbone import loader
from herald_service.backbone.loader import (
    backbone_slug,
    find_gguf,
    gguf_sha256,
    merge_gguf_shards,
    resolve_backbone,
    single_gguf,
)
from herald_service.errors import BackboneError

TENSORS = {
    "token_embd.weight": np.arange(32, dtype=np.float32).reshape(4, 8),
    "blk.0.attn_q.weight": np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8),
    "output_norm.weight": np.ones(8, dtype=np.float32),
}
Q8 = gguf.GGMLQuantizationType.Q8_0
QUANTIZED = gguf.quants.quantize(np.linspace(-2, 2, 64, dtype=np.float32).reshape(2, 32), Q8)  # (2, 34) bytes


def _write_gguf(path: Path, tensors: dict[str, np.ndarray], split: tuple[int, int] | None = None, metadata: bool = True) -> Path:
    writer = gguf.GGUFWriter(path, arch="llama")
    if metadata:
        writer.add_block_count(1)
        writer.add_embedding_length(8)
        writer.add_string("general.name", "tiny test")
    if split is not None:
        writer.add_uint16("split.no", split[0])
        writer.add_uint16("split.count", split[1])
        writer.add_int32("split.tensors.count", len(TENSORS))
    for name, array in tensors.items():
        if array.dtype == np.uint8:
            writer.add_tensor(name, array, raw_dtype=Q8)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _chunk(source: Path, folder: Path, parts: int) -> list[Path]:
    data = source.read_bytes()
    size = -(-len(data) // parts)
    paths = []
    for i in range(parts):
        path = folder / f"{source.name}.part{i}"  # part2 < part10 only when digits compare as numbers
        path.write_bytes(data[i * size : (i + 1) * size])
        paths.append(path)
    return paths


def _shards(folder: Path, stem: str) -> list[Path]:
    names = list(TENSORS)
    return [
        _write_gguf(folder / f"{stem}-00001-of-00002.gguf", {n: TENSORS[n] for n in names[:2]}, split=(0, 2)),
        _write_gguf(folder / f"{stem}-00002-of-00002.gguf", {names[2]: TENSORS[names[2]], "blk.0.ffn_up.weight": QUANTIZED},
                    split=(1, 2), metadata=False),
    ]


def _read(path: Path) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    return fields, {t.name: (t.tensor_type, np.asarray(t.data)) for t in reader.tensors}


def _fake_conversion(target: Path, extra: dict[str, str] | None = None, sha256: str = "0" * 64) -> Path:
    """What a finished conversion holds, as :func:`loader.conversion_damage` checks it, with a tiny weight file (and
    ``extra`` files, by relative path, written before the record)."""
    from safetensors.numpy import save_file

    target.mkdir(parents=True)
    for name, text in (extra or {}).items():
        _write(target / name, text)
    (target / "config.json").write_text('{"model_type": "llama"}')
    (target / "tokenizer.json").write_text("{}")
    (target / "chat_template.jinja").write_text("{{ messages }}")
    save_file({"w": np.ones(4, dtype=np.float32)}, str(target / "model.safetensors"))
    loader.write_source_record(target, loader.GGUFSource("file", (target / "x.gguf",), "x"), sha256)
    return target


@pytest.fixture
def whole(tmp_path: Path) -> Path:
    folder = tmp_path / "whole"
    folder.mkdir()
    return _write_gguf(folder / "tiny-model.gguf", TENSORS)


def test_byte_chunks_in_natural_order_join_to_the_original(whole: Path, tmp_path: Path):
    folder = tmp_path / "chunks"
    folder.mkdir()
    parts = _chunk(whole, folder, 12)
    (folder / "README.md").write_text("not a chunk")
    for spec in (folder, parts[0], parts[11]):
        source = find_gguf(spec)
        assert source is not None and source.kind == "chunks" and source.stem == "tiny-model"
        assert list(source.files) == parts
    assert gguf_sha256(source) == hashlib.sha256(whole.read_bytes()).hexdigest()
    with single_gguf(source, tmp_path) as joined:
        assert joined.read_bytes() == whole.read_bytes()
    assert not joined.exists()


def test_a_gguf_revision_is_read_once_per_change_of_its_files(whole: Path, tmp_path: Path, monkeypatch):
    # a GGUF backbone was read in full at every start for its revision (about 3 s for an 8B model's 4.9 GB)
    monkeypatch.setattr(loader, "_convert", lambda gguf, source, target, sha: _fake_conversion(target))
    folder = tmp_path / "chunks"
    folder.mkdir()
    parts = _chunk(whole, folder, 3)
    cache = tmp_path / "cache"
    read: list[int] = []
    real = loader.gguf_sha256
    monkeypatch.setattr(loader, "gguf_sha256", lambda source, *a: read.append(len(source.files)) or real(source, *a))
    first = resolve_backbone(str(folder), cache)
    assert first.revision == f"gguf-sha256:{hashlib.sha256(whole.read_bytes()).hexdigest()}" and read == [3]
    assert resolve_backbone(str(folder), cache).revision == first.revision and read == [3]  # memoized
    data = bytearray(parts[1].read_bytes())
    data[-1] ^= 0xFF
    parts[1].write_bytes(bytes(data))  # one chunk rewritten at its size: read again, another revision
    changed = resolve_backbone(str(folder), cache)
    assert read == [3, 3] and changed.revision != first.revision and changed.folder != first.folder


def test_a_missing_numbered_chunk_is_named(whole: Path, tmp_path: Path):
    parts = _chunk(whole, tmp_path, 4)
    parts[2].unlink()
    with pytest.raises(BackboneError, match="numbered 2 are missing"):
        find_gguf(tmp_path)
    parts[0].unlink()  # chunks may count from 0 or 1: part1, part3 still misses 2
    with pytest.raises(BackboneError, match="numbered 2 are missing"):
        find_gguf(parts[1])


def test_chunks_that_are_not_a_gguf_are_refused(tmp_path: Path):
    (tmp_path / "x.gguf.part00").write_bytes(b"PK\x03\x04 not a gguf")
    (tmp_path / "x.gguf.part01").write_bytes(b"more")
    with pytest.raises(BackboneError, match="GGUF magic"):
        find_gguf(tmp_path)


def test_split_shards_merge_into_one_gguf(tmp_path: Path):
    shards = _shards(tmp_path, "tiny-model")
    source = find_gguf(tmp_path)
    assert source is not None and source.kind == "shards" and list(source.files) == shards and source.stem == "tiny-model"
    assert find_gguf(shards[1]) == source
    merged = tmp_path / "merged.gguf"
    merge_gguf_shards(source.files, merged)
    fields, tensors = _read(merged)
    assert fields["general.architecture"] == "llama" and fields["general.name"] == "tiny test"
    assert fields["llama.block_count"] == 1
    assert not [name for name in fields if name.startswith("split.")]
    assert list(tensors) == [*TENSORS, "blk.0.ffn_up.weight"]
    for name, array in TENSORS.items():
        np.testing.assert_array_equal(tensors[name][1].reshape(array.shape), array)
    kind, raw = tensors["blk.0.ffn_up.weight"]
    assert kind == Q8
    np.testing.assert_array_equal(raw, QUANTIZED)  # quantized bytes copied as they are


def test_incomplete_shards_are_refused(tmp_path: Path):
    _shards(tmp_path, "tiny-model")[1].unlink()
    with pytest.raises(BackboneError, match="incomplete"):
        find_gguf(tmp_path)
    other = _shards(tmp_path, "other-model")
    assert find_gguf(other[0]).files == tuple(other)  # pointing at one complete set ignores the broken one


def test_a_folder_with_two_models_names_them(whole: Path, tmp_path: Path):
    folder = whole.parent
    _write_gguf(folder / "other.gguf", TENSORS)
    with pytest.raises(BackboneError, match="2 GGUF models"):
        find_gguf(folder)
    assert find_gguf(whole).kind == "file"


def test_a_joined_file_beside_its_chunks_wins_in_a_folder(whole: Path):
    _chunk(whole, whole.parent, 3)
    source = find_gguf(whole.parent)
    assert source.kind == "file" and source.files == (whole,)


def test_resolve_converts_the_joined_file_once_and_keys_it_by_its_sha(whole: Path, tmp_path: Path, monkeypatch):
    folder = tmp_path / "chunks"
    folder.mkdir()
    _chunk(whole, folder, 4)
    seen: list[bytes] = []

    def fake_convert(gguf_path: Path, source, target: Path, sha256: str) -> Path:
        seen.append(gguf_path.read_bytes())
        return _fake_conversion(target)

    monkeypatch.setattr(loader, "_convert", fake_convert)
    sha = hashlib.sha256(whole.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    resolved = resolve_backbone(str(folder), cache)
    assert resolved.revision == f"gguf-sha256:{sha}" and resolved.slug == "tiny-model" and resolved.model_id == "tiny-model"
    assert resolved.folder == cache / "backbones" / f"tiny-model-{sha[:12]}"
    assert seen == [whole.read_bytes()]
    assert [p.name for p in (cache / "backbones").iterdir()] == [resolved.folder.name]  # the joined file is gone
    assert resolve_backbone(str(whole), cache).folder == resolved.folder  # same bytes, same cache
    assert len(seen) == 1


def test_the_slug_found_without_converting_is_the_resolved_one(whole: Path, tmp_path: Path, monkeypatch):
    def fake_convert(gguf_path: Path, source, target: Path, sha256: str) -> Path:
        return _fake_conversion(target)

    monkeypatch.setattr(loader, "_convert", fake_convert)
    folder = tmp_path / "chunks"
    folder.mkdir()
    _chunk(whole, folder, 3)
    model = tmp_path / "My Model_v2"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for spec in (str(folder), str(whole), str(model)):
        assert backbone_slug(spec) == resolve_backbone(spec, tmp_path / "cache").slug, spec
    assert backbone_slug(str(model)) == "my-model-v2"
    with pytest.raises(BackboneError, match="does not exist"):
        backbone_slug(str(tmp_path / "absent"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BackboneError, match="is not a model: expected config.json or one GGUF"):
        backbone_slug(str(tmp_path / "empty"))


def test_resolve_refuses_what_is_not_a_model(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(BackboneError, match="config.json or one GGUF"):
        resolve_backbone(str(tmp_path), tmp_path / "cache")
    with pytest.raises(BackboneError, match="not a model"):
        resolve_backbone(str(tmp_path / "notes.txt"), tmp_path / "cache")


def test_an_unwritable_cache_folder_is_one_error_naming_the_setting(whole: Path):
    from herald_service.backbone.loader import convert_gguf

    with pytest.raises(BackboneError, match="HERALD_CACHE_DIR") as info:
        convert_gguf(whole, Path("/proc/no-such-cache"), "0" * 64)
    assert info.value.field == "cache_dir"


def test_interrupted_conversions_are_cleaned_and_a_concurrent_one_is_kept(tmp_path: Path):
    import os
    import time

    stale, fresh = tmp_path / ".convert-old", tmp_path / ".convert-new"
    for folder in (stale, fresh):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 10)
    hours_ago = time.time() - 2 * loader.STALE_CONVERSION_S
    os.utime(stale, (hours_ago, hours_ago))
    loader._remove_stale_conversions(tmp_path)
    assert not stale.exists() and fresh.exists()  # a young one may belong to a running conversion

    target = tmp_path / "model-abc"
    target.mkdir()
    (target / "config.json").write_text("{}")  # another server finished first
    mine = tmp_path / ".convert-mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": true}')
    loader._publish(mine, target)  # no error: theirs is kept
    assert (target / "config.json").read_text() == "{}"
    (target / "config.json").unlink()
    (target / "partial").write_text("")
    with pytest.raises(OSError):
        loader._publish(mine, target)  # a non-empty folder that is not a conversion is not silently accepted


def test_a_damaged_cached_conversion_is_converted_again(whole: Path, tmp_path: Path, monkeypatch, caplog):
    converted: list[Path] = []

    def fake_convert(gguf_path: Path, source, target: Path, sha256: str) -> Path:
        converted.append(target)
        return _fake_conversion(target)

    monkeypatch.setattr(loader, "_convert", fake_convert)
    cache = tmp_path / "cache"
    folder = resolve_backbone(str(whole), cache).folder
    assert loader.conversion_damage(folder) is None and len(converted) == 1
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])  # cut short, as a full disk or an interrupted copy leaves it
    assert loader.conversion_damage(folder) == "model.safetensors is 72 bytes; it was 80 when converted"
    with caplog.at_level("WARNING", logger=loader.__name__):
        assert resolve_backbone(str(whole), cache).folder == folder
    assert len(converted) == 2 and loader.conversion_damage(folder) is None
    assert "is damaged (model.safetensors is 72 bytes; it was 80 when converted)" in caplog.text
    with open(folder / "model.safetensors", "r+b") as weights:  # the same size, its header overwritten
        weights.write(b"\xff" * 16)
    assert loader.conversion_damage(folder).startswith("model.safetensors is unreadable (")
    assert [p.name for p in (cache / "backbones").iterdir()] == [folder.name]  # the damaged copy was removed
    for broken, why in ((lambda: (folder / "herald_source.json").unlink(), "herald_source.json is missing"),
                        (lambda: (folder / "tokenizer.json").unlink(), "tokenizer.json is missing"),
                        # tester finding: without it prompts were rendered with no chat template, and the shipped
                        # probe passed a pipe-bomb request at a score of 1e-84
                        (lambda: (folder / "chat_template.jinja").unlink(), "chat_template.jinja is missing"),
                        (lambda: (folder / "config.json").write_text("{"), "config.json is 1 bytes; it was 23 when converted"),
                        (lambda: (folder / "config.json").write_text('{"model_type": "llama"]'),  # same size
                         "config.json differs from the file the conversion wrote (sha256)"),
                        # tester finding: zeroed at its own size (a crash's block), every prompt scored 0
                        (lambda: (folder / "chat_template.jinja").write_bytes(b"\0" * 14),
                         "chat_template.jinja differs from the file the conversion wrote (sha256)"),
                        (lambda: (folder / "config.json").unlink(), "config.json is missing"),  # was never replaced
                        # tester finding: weight rows overwritten in place (header whole, same size) passed, and a
                        # sarin request with them
                        (lambda: _overwrite_last_bytes(folder / "model.safetensors"),
                         "model.safetensors differs from the file the conversion wrote (sha256)"),
                        (lambda: _drop_the_weights_hash(folder),  # a record of session 19's Herald: converted again
                         "herald_source.json lists no files with their sizes and hashes (written by an older Herald)"),
                        # tester finding: a record without the weights left damaged rows unhashed, served silently
                        (lambda: _edit_record(folder, lambda files: files.pop("model.safetensors")),
                         "model.safetensors is not in herald_source.json (a file the conversion did not write, or a"
                         " record cut down)"),
                        (lambda: (folder / "extra.safetensors").write_bytes(b"x"),
                         "extra.safetensors is not in herald_source.json (a file the conversion did not write, or a"
                         " record cut down)"),
                        (lambda: _edit_record(folder, lambda files: files.update({"/etc/hostname": {"bytes": 1, "sha256": "0"}})),
                         "herald_source.json lists '/etc/hostname', which is not a file of the conversion"),
                        (lambda: _edit_record(folder, lambda files: files.update({"..": {"bytes": 1, "sha256": "0"}})),
                         "herald_source.json lists '..', which is not a file of the conversion"),
                        (lambda: _edit_record(folder, lambda files: files["config.json"].update(bytes="23")),
                         'config.json is 23 bytes; it was "23" when converted'),
                        # tester finding: transformers reads templates from this subfolder, and it went unchecked
                        (lambda: _write(folder / "additional_chat_templates" / "tool_use.jinja", "{{ 'x' }}"),
                         "additional_chat_templates/tool_use.jinja is not in herald_source.json (a file the conversion"
                         " did not write, or a record cut down)"),
                        (lambda: (folder / "templates").symlink_to(tmp_path, target_is_directory=True),
                         "templates is not a file the conversion wrote (a link to a folder, a dangling link or a"
                         " special file)"),
                        (lambda: (folder / "gone.jinja").symlink_to(tmp_path / "nowhere"),
                         "gone.jinja is not a file the conversion wrote (a link to a folder, a dangling link or a"
                         " special file)"),
                        (lambda: _edit_record(folder, lambda files: files.update({"a/../b": {"bytes": 1, "sha256": "0"}})),
                         "herald_source.json lists 'a/../b', which is not a file of the conversion"),
                        (lambda: (folder / "herald_source.json").write_text('{"gguf": "x.gguf"}'),
                         "herald_source.json lists no files with their sizes and hashes (written by an older Herald)"),
                        (lambda: (folder / "herald_source.json").write_text('{"files": {"config.json": 23}}'),
                         "herald_source.json lists no files with their sizes and hashes (written by an older Herald)"),
                        (lambda: (folder / "herald_source.json").write_text("{"),
                         "herald_source.json is unreadable (Expecting property name enclosed in double quotes: line 1"
                         " column 2 (char 1))"),
                        (lambda: _write_listed(folder / "model.safetensors.index.json", '{"weight_map": {"a": "shard-1.safetensors"}}'),
                         "shard-1.safetensors is missing"),
                        (lambda: _write_listed(folder / "model.safetensors.index.json", '{"weight_map": {"a": 3}}'),
                         "model.safetensors.index.json names a weight file 3 that is not a file name"),
                        (lambda: _write_listed(folder / "model.safetensors.index.json", "[1]"),
                         "model.safetensors.index.json is unreadable (list indices must be integers or slices, not str)")):
        broken()
        assert loader.conversion_damage(folder) == why
        resolve_backbone(str(whole), cache)  # converted again, whole
        assert loader.conversion_damage(folder) is None
    assert len(converted) == 26



def _overwrite_last_bytes(path: Path) -> None:
    with open(path, "r+b") as weights:  # the last float of the tensor: the header stays whole
        weights.seek(-4, 2)
        weights.write(np.float32(7.0).tobytes())


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _write_listed(path: Path, text: str) -> None:
    """Write ``path`` in a conversion and list it in its record, as a conversion that wrote it would have."""
    path.write_text(text)
    _edit_record(path.parent, lambda files: files.update(
        {path.name: {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}}))


def _edit_record(folder: Path, edit) -> None:
    record = json.loads((folder / "herald_source.json").read_text())
    edit(record["files"])
    (folder / "herald_source.json").write_text(json.dumps(record))


def _drop_the_weights_hash(folder: Path) -> None:
    record = json.loads((folder / "herald_source.json").read_text())
    del record["files"]["model.safetensors"]["sha256"]
    (folder / "herald_source.json").write_text(json.dumps(record))


def test_a_conversions_weights_are_hashed_once_per_change(whole: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(loader, "_convert", lambda gguf, source, target, sha: _fake_conversion(target))
    cache = tmp_path / "cache"
    folder = resolve_backbone(str(whole), cache).folder
    hashed: list[str] = []
    real = loader.sha256_file
    monkeypatch.setattr(loader, "sha256_file", lambda path, *a: hashed.append(Path(path).name) or real(path, *a))
    assert loader.conversion_damage(folder, cache) is None
    assert "model.safetensors" in hashed  # read in full once
    hashed.clear()
    assert loader.conversion_damage(folder, cache) is None
    assert hashed == []  # then memoized under its size, times and inode
    _overwrite_last_bytes(folder / "model.safetensors")
    assert loader.conversion_damage(folder, cache) == "model.safetensors differs from the file the conversion wrote (sha256)"


def test_a_damaged_conversion_that_cannot_be_replaced_is_named_before_any_conversion(whole: Path, tmp_path: Path,
                                                                                      monkeypatch, caplog):
    # tester finding: in a read-only cache the damaged folder stayed, a whole conversion ran, and then the damaged
    # folder was kept ("another process converted it first")
    converted: list[Path] = []
    monkeypatch.setattr(loader, "_convert", lambda gguf, source, target, sha: converted.append(target) or _fake_conversion(target))
    cache = tmp_path / "cache"
    folder = resolve_backbone(str(whole), cache).folder
    (folder / "chat_template.jinja").unlink()

    def read_only(source, target):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(loader.os, "replace", read_only)
    with pytest.raises(BackboneError) as refused, caplog.at_level("WARNING", logger=loader.__name__):
        resolve_backbone(str(whole), cache)
    assert "converting the GGUF again" not in caplog.text  # it said so, then refused (tester finding)
    assert str(refused.value) == (f"the cached conversion {folder} is damaged (chat_template.jinja is missing) and"
                                  " cannot be replaced (Read-only file system); make HERALD_CACHE_DIR writable, or"
                                  " delete the folder")
    assert len(converted) == 1  # no second conversion


@pytest.mark.parametrize("keep", [100, 400, -40])
def test_a_truncated_gguf_is_named_with_its_size_before_transformers_reads_it(whole: Path, tmp_path: Path, keep: int):
    # Tester finding: a truncated GGUF stopped the conversion with "cannot reshape array of size 399424 into shape
    # (576,960)" or "unpack_from requires a buffer of at least 1006 bytes", naming neither the file nor the cause.
    data = whole.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:keep])
    size = len(data[:keep])
    with pytest.raises(BackboneError) as refused:
        loader.convert_gguf(cut, tmp_path / "cache", "0" * 64)
    message = str(refused.value)
    assert message.startswith(f"GGUF {cut} ({size} bytes) is truncated or corrupt: ")
    assert refused.value.field == "backbone"
    assert not list((tmp_path / "cache" / "backbones").iterdir())  # nothing converted, nothing left behind


def test_a_whole_gguf_passes_the_check_and_joined_chunks_are_named_by_their_first(whole: Path, tmp_path: Path):
    loader.check_gguf_whole(whole)  # no error
    parts = _chunk(whole, tmp_path, 3)
    parts[-1].write_bytes(parts[-1].read_bytes()[:-16])  # the last chunk cut short
    with pytest.raises(BackboneError, match=r"^GGUF tiny-model\.gguf joined from 3 chunks \(.*part0, \.\.\.\) \(\d+ bytes\)"
                                            r" is truncated or corrupt: "):
        loader.convert_gguf(find_gguf(parts[0]), tmp_path / "cache", "1" * 64)


def test_a_conversion_gets_the_umask_modes_so_another_user_of_the_cache_can_read_it(tmp_path: Path):
    # tester finding: mkdtemp's 0700 folder and safetensors' 0600 weights left a shared cache's conversion unreadable
    folder = tmp_path / ".convert-x"
    folder.mkdir(mode=0o700)
    (folder / "model.safetensors").write_bytes(b"w")
    (folder / "model.safetensors").chmod(0o600)
    umask = os.umask(0o022)
    try:
        loader._give_umask_modes(folder)
    finally:
        os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o755 and (folder / "model.safetensors").stat().st_mode & 0o777 == 0o644


def test_a_conversion_s_files_in_a_subfolder_are_recorded_and_checked(tmp_path: Path):
    folder = _fake_conversion(tmp_path / "conv", extra={"additional_chat_templates/tool_use.jinja": "{{ 'tools' }}"})
    record = json.loads((folder / "herald_source.json").read_text())["files"]
    assert sorted(record) == ["additional_chat_templates/tool_use.jinja", "chat_template.jinja", "config.json",
                              "model.safetensors", "tokenizer.json"]
    assert loader.conversion_damage(folder) is None
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text("{{ 'TOOLS' }}")  # same size, other text
    assert loader.conversion_damage(folder) == ("additional_chat_templates/tool_use.jinja differs from the file the"
                                                " conversion wrote (sha256)")


def test_a_damaged_conversion_linked_in_from_elsewhere_leaves_no_link_behind(tmp_path: Path):
    # tester finding: rmtree failed on the set-aside link, silently, and a .damaged-* link was left at each conversion
    real = _fake_conversion(tmp_path / "real")
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    (backbones / "conv").symlink_to(real, target_is_directory=True)
    loader._set_aside(backbones / "conv", "x")
    assert list(backbones.iterdir()) == [] and (real / "config.json").is_file()


def test_a_whole_conversion_given_as_a_model_folder_keeps_its_gguf_revision(whole: Path, tmp_path: Path, monkeypatch):
    # tester finding: the cache's conversion, or a copy of it on a volume, given as --backbone had a content-sha256
    # revision, and the probe fitted on the GGUF warned at every start that it was fitted on other weights
    import shutil

    monkeypatch.setattr(loader, "_convert", lambda gguf, source, target, sha: _fake_conversion(target, sha256=sha))
    cache = tmp_path / "cache"
    converted = resolve_backbone(str(whole), cache)
    copy = tmp_path / "volume" / "model"
    shutil.copytree(converted.folder, copy)
    assert resolve_backbone(str(copy), cache).revision == converted.revision
    assert converted.revision.startswith("gguf-sha256:")
    (copy / "chat_template.jinja").write_text("{{ other }}")  # no longer the conversion: a folder's content hash
    assert resolve_backbone(str(copy), cache).revision.startswith("content-sha256:")


def test_a_conversion_folder_whose_writer_is_gone_is_removed_at_the_next_conversion(tmp_path: Path, caplog):
    # tester finding: a conversion killed with SIGKILL left its 409 MB .convert-XXXX until it was an hour old
    import logging
    import subprocess
    import sys
    import time

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(ended.stdout)  # a PID that has just ended (reused within this test: most unlikely)
    prefix = loader.conversion_prefix()
    assert prefix == f".convert-{loader._host_tag()}-{os.getpid()}-"
    killed = tmp_path / (prefix.replace(f"-{os.getpid()}-", f"-{dead}-") + "xyz")
    running = tmp_path / f"{prefix}abc"  # this process: alive
    elsewhere = tmp_path / f".convert-{'0' * 8 if loader._host_tag() != '0' * 8 else '1' * 8}-{dead}-abc"  # another host
    older_style = tmp_path / ".convert-k2j4"  # named before the writer was: the age rule alone
    for folder in (killed, running, elsewhere, older_style):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 10)
    assert [loader.conversion_writer_gone(f.name) for f in (killed, running, elsewhere, older_style)] == [
        True, False, False, False]
    with caplog.at_level(logging.INFO, logger="herald_service.backbone.loader"):
        loader._remove_stale_conversions(tmp_path)
    assert not killed.exists() and running.exists() and elsewhere.exists() and older_style.exists()
    assert caplog.messages == [f"removed {killed}, left by an interrupted conversion (its process has ended)"]
    hours_ago = time.time() - 2 * loader.STALE_CONVERSION_S
    os.utime(elsewhere, (hours_ago, hours_ago))  # the age rule still applies where the writer cannot be checked
    loader._remove_stale_conversions(tmp_path)
    assert not elsewhere.exists() and running.exists() and older_style.exists()


@pytest.mark.parametrize("failure", ["oserror", "safetensors", "tokenizer"])
def test_a_full_disk_during_the_conversion_is_one_line_naming_the_folder_the_size_and_herald_cache_dir(
        whole: Path, tmp_path: Path, monkeypatch, failure: str):
    # Tester finding: a full disk at save_pretrained gave a ~35-line traceback ending in "SafetensorError: ... No space
    # left on device", naming neither the cache folder nor HERALD_CACHE_DIR.
    import collections
    import errno

    import torch
    import transformers
    from safetensors import SafetensorError

    weights = torch.zeros(1000, 1000)  # 4,000,000 bytes in float32

    class FullDiskModel:
        config = type("Config", (), {})()
        hf_quantizer = None

        def state_dict(self):
            return {"embed.weight": weights, "lm_head.weight": weights}  # tied: written once

        def save_pretrained(self, folder):
            (Path(folder) / "model.safetensors").write_bytes(b"partial")
            if failure == "oserror":
                raise OSError(errno.ENOSPC, "No space left on device")
            if failure == "safetensors":
                raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message:'
                                      ' "No space left on device" })')

    class FullDiskTokenizer:  # the weights fit, tokenizer.json does not: its Rust writer raises a bare Exception
        def save_pretrained(self, folder):
            raise Exception("No space left on device (os error 28)")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *a, **k: FullDiskTokenizer() if failure == "tokenizer" else object())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: FullDiskModel())
    usage = collections.namedtuple("usage", "total used free")
    real_disk_usage = loader.shutil.disk_usage
    monkeypatch.setattr(loader.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1_500_000, 1_500_000)
                        if Path(path) == tmp_path / "cache" / "backbones" else real_disk_usage(path))
    with pytest.raises(BackboneError) as refused:
        loader.convert_gguf(whole, tmp_path / "cache", "0" * 64)
    folder = tmp_path / "cache" / "backbones"
    assert str(refused.value) == (f"cannot write the converted backbone into {folder}: no space left on device (it needs"
                                  " about 4 MB for the weights; 2 MB free there); free space there or set"
                                  " HERALD_CACHE_DIR to a folder with room")
    assert refused.value.field == "cache_dir"
    assert refused.value.__cause__ is None and refused.value.__suppress_context__  # no chained traceback
    assert list(folder.iterdir()) == []  # the partial conversion is removed


def test_a_read_only_backbones_folder_is_named_with_herald_cache_dir_not_a_traceback(whole: Path, tmp_path: Path, monkeypatch):
    import transformers

    def not_loaded(*args, **kwargs):  # refused before the GGUF loads (about 18 s for the embedded one: tester)
        raise AssertionError("the GGUF was loaded for a conversion that cannot be written")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", not_loaded)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", not_loaded)

    def read_only(*args, **kwargs):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(loader.tempfile, "mkdtemp", read_only)
    with pytest.raises(BackboneError) as refused:
        loader.convert_gguf(whole, tmp_path / "cache", "0" * 64)
    assert str(refused.value) == (f"cannot write the converted backbone into {tmp_path / 'cache' / 'backbones'}: Read-only"
                                  " file system; set HERALD_CACHE_DIR to a writable folder")
    assert refused.value.field == "cache_dir"


def test_only_the_file_systems_refusals_are_taken_for_a_write_failure_of_the_conversion():
    from safetensors import SafetensorError

    assert loader._write_failure(OSError(28, "No space left on device"), SafetensorError)
    assert loader._write_failure(Exception("No space left on device (os error 28)"), SafetensorError)
    assert not loader._write_failure(ValueError("tokenizer config is invalid"), SafetensorError)  # a bug stays a bug


def test_the_same_gguf_under_another_name_or_in_chunks_reuses_its_whole_conversion(whole: Path, tmp_path: Path,
                                                                                    monkeypatch, caplog):
    # tester finding: a chunked copy (smol.gguf.part00 ...) or a renamed copy of the embedded GGUF was converted again
    # (about 25 s) into a second 517 MB folder, smol-b179c9523d0e beside smollm2-135m-instruct.q4-1-b179c9523d0e
    import shutil

    converted: list[Path] = []
    monkeypatch.setattr(loader, "_convert", lambda gguf, source, target, sha: converted.append(target)
                        or _fake_conversion(target, sha256=sha))
    sha = hashlib.sha256(whole.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    first = resolve_backbone(str(whole), cache)
    assert first.folder == cache / "backbones" / f"tiny-model-{sha[:12]}" and converted == [first.folder]
    renamed = tmp_path / "renamed" / "smol.gguf"
    renamed.parent.mkdir()
    shutil.copyfile(whole, renamed)
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    _chunk(renamed, chunks, 3)  # smol.gguf.part0 ...
    with caplog.at_level("INFO", logger=loader.__name__):
        for spec in (renamed, chunks):
            resolved = resolve_backbone(str(spec), cache)
            assert resolved.folder == first.folder and resolved.revision == first.revision == f"gguf-sha256:{sha}"
            assert resolved.slug == resolved.model_id == "smol"  # named as given: the probe folder models/smol
    assert converted == [first.folder]  # converted once
    assert [p.name for p in (cache / "backbones").iterdir()] == [first.folder.name]
    assert f"{first.folder} holds the GGUF converted from {renamed} under another name (sha256 {sha}); using it" in caplog.text

    # only a whole conversion of that very content and kind stands in: one cut short, one whose record gives another
    # sha256 with the same first 12 digits, or shards' (the sha256 of other bytes) are not taken
    weights = first.folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    other_sha = _fake_conversion(cache / "backbones" / f"a-other-{sha[:12]}", sha256=sha[:12] + "0" * 52)
    shards = _fake_conversion(cache / "backbones" / f"b-shards-{sha[:12]}", sha256=sha)
    loader.write_source_record(shards, loader.GGUFSource("shards", (shards / "x-00001-of-00002.gguf",), "x"), sha)
    assert loader.conversion_damage(shards) is None
    assert loader.same_content_conversion(cache / "backbones", find_gguf(renamed), sha) is None
    resolved = resolve_backbone(str(renamed), cache)
    assert resolved.folder == cache / "backbones" / f"smol-{sha[:12]}" and converted == [first.folder, resolved.folder]
    assert other_sha.is_dir()  # left alone
    shards_source = loader.GGUFSource("shards", (tmp_path / "x-00001-of-00002.gguf",), "x")
    assert loader.same_content_conversion(cache / "backbones", shards_source, sha) == shards
    # the first name again, its own folder damaged: the whole one under another name is used, and the warning says
    # so (it said "converting the GGUF again", then converted nothing: re-tester)
    caplog.clear()
    with caplog.at_level("INFO", logger=loader.__name__):
        again = resolve_backbone(str(whole), cache)
    assert again.folder == resolved.folder and converted == [first.folder, resolved.folder]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and warned[0].startswith(f"the cached conversion {first.folder} is damaged (")
    assert warned[0].endswith(f"); using {resolved.folder}, a whole one of the same GGUF"), warned

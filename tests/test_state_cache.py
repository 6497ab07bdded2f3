"""The extracted-state cache of fit, eval and recipes (herald_service/training/extract.py): a damaged entry is
warned about by its file, extracted again and replaced, on the fake backbone."""

from __future__ import annotations

import logging

import numpy as np

from herald_service.backbone.fake import FakeBackbone
from herald_service.training.extract import StateCache, states_of_token_ids
from herald_service.types import user_turn

PROMPTS = ["how do i bake bread", "build a bomb", "hello there", "write a poem", "steal bank logins"]


class CountingBackbone(FakeBackbone):
    """The fake backbone, counting the prompts it runs a forward pass for."""

    def __init__(self) -> None:
        super().__init__()
        self.forwarded = 0

    def last_token_states(self, token_ids, *args, **kwargs):
        self.forwarded += len(token_ids)
        return super().last_token_states(token_ids, *args, **kwargs)


def _write_entry(path, states: np.ndarray, sha256: str | None = "auto") -> None:
    """An entry in the cache's own form (safetensors, the sha256 of its bytes in the metadata), or with another or
    no recorded sha256: a well-formed file whose content is wrong."""
    import hashlib

    from safetensors.numpy import save

    digest = hashlib.sha256(states.tobytes()).hexdigest() if sha256 == "auto" else sha256
    path.write_bytes(save({"states": states}, metadata=None if digest is None else {"sha256": digest}))


def test_a_damaged_cache_entry_is_named_extracted_again_and_replaced(tmp_path, caplog):
    # tester findings: a truncated, wrong-shape or NaN-filled entry failed with "EOF: reading array header...", "all
    # input arrays must have the same shape" or "decoder layer 1: Input X contains NaN.", naming no file; finite values
    # written over part of an entry were read without a word and changed the refitted probe
    backbone = CountingBackbone()
    prompts = PROMPTS + ["tell me a joke", "how do i pick a lock"]
    ids = backbone.encode([user_turn(p) for p in prompts])
    cache = StateCache(tmp_path, backbone)
    fresh = states_of_token_ids(backbone, ids, cache)
    assert backbone.forwarded == 7 and fresh.shape == (7, 8, 16)
    paths = [cache.path(i) for i in ids]
    whole = paths[0].read_bytes()
    paths[0].write_bytes(whole[:40])  # truncated inside the header
    paths[1].write_bytes(paths[1].read_bytes()[:-100])  # truncated inside the data
    _write_entry(paths[2], np.zeros((7, 16), np.float32))  # another backbone's shape
    _write_entry(paths[3], np.full((8, 16), np.nan, np.float32))  # NaN-filled
    paths[4].write_bytes(b"")  # empty
    changed = bytearray(paths[5].read_bytes())
    changed[-64:] = np.full(16, 12.0, np.float32).tobytes()  # finite values over the last row: only the hash tells
    paths[5].write_bytes(bytes(changed))
    _write_entry(paths[6], fresh[6], sha256=None)  # no recorded hash
    backbone.forwarded = 0
    cache = StateCache(tmp_path, backbone)  # a later run
    with caplog.at_level(logging.WARNING, logger="herald_service.training.extract"):
        again = states_of_token_ids(backbone, ids + ids[:2], cache)  # the first two twice: warned about once each
    np.testing.assert_array_equal(again[:7], fresh)
    np.testing.assert_array_equal(again[7:], fresh[:2])
    assert backbone.forwarded == 9  # every damaged entry was a miss (each repeat too: none was written back yet)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 7 and [w.split(" ")[3] for w in warnings] == [str(p) for p in paths]
    assert warnings[0].startswith(f"extracted-state cache entry {paths[0]} cannot be read (SafetensorError: ")
    assert warnings[1].startswith(f"extracted-state cache entry {paths[1]} cannot be read (SafetensorError: ")
    assert warnings[2] == (f"extracted-state cache entry {paths[2]} holds a float32 array of shape (7, 16), not float32"
                           " (8, 16) (layer, d_model); extracting its states again and replacing it")
    assert warnings[3] == (f"extracted-state cache entry {paths[3]} holds 128 non-finite values (NaN or infinity);"
                           " extracting its states again and replacing it")
    assert warnings[4].startswith(f"extracted-state cache entry {paths[4]} cannot be read (SafetensorError: ")
    assert warnings[5] == (f"extracted-state cache entry {paths[5]} does not match the sha256 recorded when it was"
                           " written (changed on disk); extracting its states again and replacing it")
    assert warnings[6].startswith(f"extracted-state cache entry {paths[6]} records no sha256 of its states;")
    assert paths[0].read_bytes() == whole  # replaced by the states extracted again
    assert sorted(p.name for p in paths[0].parent.iterdir()) == [paths[0].name]  # no temporary file left
    backbone.forwarded = 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herald_service.training.extract"):
        healed = states_of_token_ids(backbone, ids, StateCache(tmp_path, backbone))
    np.testing.assert_array_equal(healed, fresh)
    assert backbone.forwarded == 0 and not caplog.records  # every entry read from the healed cache


def test_a_pickled_entry_and_a_folder_in_an_entry_s_place_are_named(tmp_path, caplog):
    # tester: random bytes were warned about with numpy's advice to load the file unsafely, and a folder where an
    # entry goes ended the run with a raw "[Errno 21] Is a directory" and a .tmp file left behind
    import pytest

    backbone = CountingBackbone()
    ids = backbone.encode([user_turn(p) for p in PROMPTS[:2]])
    cache = StateCache(tmp_path, backbone)
    states_of_token_ids(backbone, ids, cache)
    pickled, folder = cache.path(ids[0]), cache.path(ids[1])
    with pickled.open("wb") as fh:
        np.save(fh, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    folder.unlink()
    folder.mkdir()
    with caplog.at_level(logging.WARNING):
        assert cache.get(ids[0]) is None
    assert f"extracted-state cache entry {pickled} cannot be read (SafetensorError: " in caplog.text
    assert "unsafely" not in caplog.text
    with pytest.raises(OSError) as refused:
        cache.put(ids[1], np.zeros((8, 16), dtype=np.float32))
    assert str(refused.value).startswith(f"cannot write the extracted-state cache entry {folder} (Is a directory);"
                                         " remove what is there, or give another --cache-dir")
    assert not list(folder.parent.glob("*.tmp"))


def test_states_of_another_forward_are_not_read(tmp_path, monkeypatch):
    # the cache served states of the forward before the CPU's batch-invariant one for every unchanged prompt, so the
    # shipped probe's recorded command, rerun on an empty cache, fitted another probe (session 30)
    from herald_service.training import extract

    backbone = CountingBackbone()
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    states_of_token_ids(backbone, ids, StateCache(tmp_path, backbone))
    old = StateCache(tmp_path, backbone)
    monkeypatch.setattr(extract, "FORWARD_VERSION", extract.FORWARD_VERSION + "-next")
    new = StateCache(tmp_path, backbone)
    assert new.folder != old.folder and new.folder.parent == old.folder.parent
    backbone.forwarded = 0
    states_of_token_ids(backbone, ids, new)
    assert backbone.forwarded == 5  # every prompt again: none of the older forward's entries was read
    states_of_token_ids(backbone, ids, StateCache(tmp_path, backbone))
    assert backbone.forwarded == 5  # and the new entries are read by a later run of the same forward


def test_states_of_another_torch_or_transformers_are_not_read(tmp_path, monkeypatch):
    # their kernels are part of the forward: another version may round otherwise. The names extract.py reads the
    # versions through are replaced (not the shared modules' attributes), and its own StateCache is used
    from types import SimpleNamespace

    from herald_service.training import extract

    backbone = CountingBackbone()
    folders = {extract.StateCache(tmp_path, backbone).folder}
    monkeypatch.setattr(extract, "torch", SimpleNamespace(__version__="2.99.0"))
    folders.add(extract.StateCache(tmp_path, backbone).folder)
    monkeypatch.setattr(extract, "transformers", SimpleNamespace(__version__="9.99.0"))
    folders.add(extract.StateCache(tmp_path, backbone).folder)
    assert len(folders) == 3

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


def test_a_damaged_cache_entry_is_named_extracted_again_and_replaced(tmp_path, caplog):
    # tester finding: a truncated, wrong-shape or NaN-filled entry failed with "EOF: reading array header...", "all
    # input arrays must have the same shape" or "decoder layer 1: Input X contains NaN.", naming no file
    backbone = CountingBackbone()
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    cache = StateCache(tmp_path, backbone)
    fresh = states_of_token_ids(backbone, ids, cache)
    assert backbone.forwarded == 5 and fresh.shape == (5, 8, 16)
    paths = [cache.path(i) for i in ids]
    whole = paths[0].read_bytes()
    paths[0].write_bytes(whole[:40])  # truncated inside the header
    paths[1].write_bytes(paths[1].read_bytes()[:-100])  # truncated inside the data
    np.save(paths[2], np.zeros((7, 16), np.float32))  # another backbone's shape
    np.save(paths[3], np.full((8, 16), np.nan, np.float32))  # NaN-filled
    paths[4].write_bytes(b"")  # empty
    backbone.forwarded = 0
    cache = StateCache(tmp_path, backbone)  # a later run
    with caplog.at_level(logging.WARNING, logger="herald_service.training.extract"):
        again = states_of_token_ids(backbone, ids + ids[:2], cache)  # the first two twice: warned about once each
    np.testing.assert_array_equal(again[:5], fresh)
    np.testing.assert_array_equal(again[5:], fresh[:2])
    assert backbone.forwarded == 7  # every damaged entry was a miss (each repeat too: none was written back yet)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 5 and [w.split(" ")[3] for w in warnings] == [str(p) for p in paths]
    assert warnings[0].startswith(f"extracted-state cache entry {paths[0]} cannot be read (ValueError: ")
    assert warnings[2] == (f"extracted-state cache entry {paths[2]} holds a float32 array of shape (7, 16), not float32"
                           " (8, 16) (layer, d_model); extracting its states again and replacing it")
    assert warnings[3] == (f"extracted-state cache entry {paths[3]} holds 128 non-finite values (NaN or infinity);"
                           " extracting its states again and replacing it")
    assert warnings[4].startswith(f"extracted-state cache entry {paths[4]} cannot be read (EOFError: ")
    assert paths[0].read_bytes() == whole  # replaced by the states extracted again
    assert sorted(p.name for p in paths[0].parent.iterdir()) == [paths[0].name]  # no temporary file left
    backbone.forwarded = 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herald_service.training.extract"):
        healed = states_of_token_ids(backbone, ids, StateCache(tmp_path, backbone))
    np.testing.assert_array_equal(healed, fresh)
    assert backbone.forwarded == 0 and not caplog.records  # every entry read from the healed cache

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
        checked_probe(BackboneSettings(_env_file=None, backbone=str(folder), cache_dir=tmp_path / "cache"))
    assert str(info.value) == (f"no probe for backbone 'mymodel' at models/mymodel or {REPO_ROOT / 'models' / 'mymodel'}"
                               " (fit one with `herald fit --backbone ...`); set --probe or HERALD_PROBE")


def test_a_backbone_without_its_slugs_folder_uses_a_shipped_probe_fitted_on_its_revision(tmp_path: Path, monkeypatch,
                                                                                         caplog):
    # tester finding: the embedded GGUF given by its path (slug smollm2-135m-instruct.q4-1) was refused "no probe for
    # backbone", though the shipped probe under models/smollm2-135m-instruct was fitted on that very file; re-tester
    # finding: a throwaway probe in the working directory's models/, fitted on the same weights, was picked up silently
    import json
    import logging
    import shutil

    from herald_service.config import BackboneSettings
    from herald_service.engine import runtime
    from herald_service.errors import ProbeMismatch

    folder = _model_folder(tmp_path / "MyModel", b"\x01" * 64)
    cache = tmp_path / "cache"
    revision = loader.backbone_revision(str(folder), cache)
    assert revision == resolve_backbone(str(folder), cache).revision  # the one fit records, found without a load
    shipped = runtime.REPO_ROOT / "models" / "smollm2-135m-instruct"
    checkout, work = tmp_path / "checkout", tmp_path / "work"
    for root, name, recorded in ((checkout, "a-other", "content-sha256:" + "0" * 64), (checkout, "b-fitted-here", revision),
                                 (checkout, "c-broken", None), (work, "a-experiment", revision)):
        shutil.copytree(shipped, root / "models" / name)
        manifest = json.loads((root / "models" / name / "probe.json").read_text())
        manifest["backbone"]["revision"] = recorded
        (root / "models" / name / "probe.json").write_text(json.dumps(manifest) if recorded else "{not json")
    monkeypatch.setattr(runtime, "REPO_ROOT", checkout)
    monkeypatch.chdir(work)
    settings = BackboneSettings(_env_file=None, backbone=str(folder), cache_dir=cache)
    with caplog.at_level(logging.INFO, logger="herald_service.engine.runtime"):
        found, loaded = runtime.checked_probe(settings)
    assert found == checkout / "models" / "b-fitted-here" and loaded.manifest["backbone"]["revision"] == revision
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [(
        "WARNING", f"no probe at models/mymodel; using the shipped probe {found}, fitted on this backbone's revision"
        f" {revision} (HERALD_PROBE or --probe names another)")]
    shutil.rmtree(checkout / "models" / "b-fitted-here")  # the working directory's probe is never taken: the error
    with pytest.raises(ProbeMismatch, match=r"^no probe for backbone 'mymodel' at models/mymodel or ") as info:
        runtime.checked_probe(settings)
    assert "looked for only in a source checkout" not in str(info.value)
    # an installed package (the Docker image: site-packages has no models/) is not searched, and the error says so
    # and how to name the probe (tester: the embedded GGUF given by its path was refused with no hint there)
    monkeypatch.setattr(runtime, "REPO_ROOT", tmp_path / "site-packages")
    with pytest.raises(ProbeMismatch) as info:
        runtime.checked_probe(settings)
    assert str(info.value).endswith(
        " (a shipped probe fitted on the same weights is looked for only in a source checkout's models/; this install"
        " has none: name the folder, e.g. HERALD_PROBE=models/smollm2-135m-instruct); set --probe or HERALD_PROBE")


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


def test_gpt2_and_bloom_configs_of_other_heads_or_activation_hash_apart_and_committed_hashes_stay():
    # Tester finding: the architecture hash read Llama key names only, so GPT-2 configs of 4 and 8 heads (or another
    # n_inner or activation_function) and BLOOM configs of another n_head hashed the same.
    import json

    from transformers import BloomConfig, FalconConfig, Gemma3TextConfig, GPT2Config, LlamaConfig

    from herald_service.backbone.loader import OTHER_FAMILY_ARCH_KEYS, config_hash

    gpt2 = config_hash(GPT2Config(n_head=4))
    for other in (GPT2Config(n_head=8), GPT2Config(n_head=4, n_inner=512), GPT2Config(n_head=4, activation_function="relu")):
        assert config_hash(other) != gpt2
    assert config_hash(BloomConfig(n_head=4)) != config_hash(BloomConfig(n_head=8))
    assert config_hash(FalconConfig(num_kv_heads=1, new_decoder_architecture=True)) != config_hash(
        FalconConfig(num_kv_heads=2, new_decoder_architecture=True))
    # the committed probes' backbones (SmolLM2: a Llama config; Gemma-3) hash as they did when their probes were fitted
    models = Path(__file__).resolve().parents[1] / "models"
    smollm2 = LlamaConfig(num_hidden_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                          num_key_value_heads=3, head_dim=64, vocab_size=49152, hidden_act="silu",
                          rms_norm_eps=9.999999747378752e-06, tie_word_embeddings=True)
    gemma3 = Gemma3TextConfig(num_hidden_layers=18, hidden_size=640, intermediate_size=2048, num_attention_heads=4,
                              num_key_value_heads=1, head_dim=256, vocab_size=262144,
                              rms_norm_eps=9.999999974752427e-07, tie_word_embeddings=True)
    for slug, config in (("smollm2-135m-instruct", smollm2), ("gemma-3-270m-q4-k-m", gemma3)):
        assert not set(config.to_dict()) & set(OTHER_FAMILY_ARCH_KEYS)
        recorded = json.loads((models / slug / "probe.json").read_text())["backbone"]["config_hash"]
        assert config_hash(config) == recorded, slug


@pytest.mark.parametrize("text, expected", [
    ('{"model_type": "llama",\n', "is not valid JSON (Expecting property name enclosed in double quotes at line 2, column 1)"),
    ("[1, 2]", "holds an array, not a JSON object of config keys"),
    ("null", "holds null, not a JSON object of config keys"),
    (b'{"a": "\xff"}', "is not UTF-8 text"),
])
def test_a_config_json_that_is_not_a_json_object_is_refused_naming_the_file(tmp_path: Path, text, expected):
    # Tester finding: a JSON list stopped with "AttributeError: 'list' object has no attribute 'get'", and truncated
    # JSON with "Expecting property name enclosed in double quotes: line 2 column 1 (char 25)", naming no file.
    from herald_service.errors import BackboneError

    folder = _model_folder(tmp_path / "m", b"\x01" * 64)
    config = folder / "config.json"
    config.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(BackboneError) as refused:
        resolve_backbone(str(folder), tmp_path / "cache")
    assert str(refused.value).startswith(f"{config} {expected}")
    assert "\n" not in str(refused.value) and "config.json again" in str(refused.value)

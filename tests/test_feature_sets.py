"""Named, versioned feature sets: dispatch at fit and serve time, the manifest records the set, unknown sets refused."""

import json

import numpy as np
import pytest
from conftest import herald

from herald_service.backbone.fake import FakeBackbone, synthetic_corpus
from herald_service.errors import ProbeMismatch
from herald_service.probes import features
from herald_service.probes.artifact import backbone_manifest, load_probe, save_probe
from herald_service.probes.features import FEATURE_NAMES, FEATURE_SETS, FeatureSet, compute_features, get_feature_set
from herald_service.probes.probe import FittedProbe, HeraldProbe
from herald_service.training.methods import make_method
from herald_service.types import user_turn


def _first_and_last_three(s: np.ndarray) -> np.ndarray:
    """A stand-in second set: the first three and last four layers' levels (known answers, no fitting)."""
    return np.concatenate([s[:, :3], s[:, -4:]], axis=1)


@pytest.fixture
def edge_set(monkeypatch):
    """Register a second feature set for one test (FEATURE_SETS is the one registry every module reads)."""
    spec = FeatureSet("test-edges", ("l1", "l2", "l3", "lm4", "lm3", "lm2", "lm1"), 7, _first_and_last_three)
    monkeypatch.setitem(FEATURE_SETS, spec.name, spec)
    return spec


@pytest.fixture(scope="module")
def fake_states():
    backbone = FakeBackbone()
    prompts, labels = synthetic_corpus(60)
    states = backbone.last_token_states(backbone.encode([user_turn(p) for p in prompts])).numpy()
    return backbone, states, np.array(labels)


def test_default_set_is_herald_v1_and_unknown_names_are_refused():
    s = np.array([[-1, 0, 1, 2, 3.0]])
    assert features.FEATURE_SET == "herald-v1"
    assert get_feature_set("herald-v1").names == FEATURE_NAMES
    np.testing.assert_array_equal(compute_features(s), compute_features(s, "herald-v1"))
    with pytest.raises(ValueError, match=r"unknown feature set 'herald-v9'; known: .*herald-v1"):
        compute_features(s, "herald-v9")


def test_every_registered_set_has_seven_named_features():
    s = np.random.default_rng(0).normal(size=(3, 30))
    for name, spec in FEATURE_SETS.items():
        assert spec.name == name and len(spec.names) == len(set(spec.names)) == 7
        assert compute_features(s, name).shape == (3, 7)


def test_bands_v1_is_the_mean_of_seven_contiguous_depth_bands_alone_and_in_any_batch():
    s = np.arange(30, dtype=np.float64)[None, :]  # 30 layers: bands of 5, 5, 4, 4, 4, 4, 4
    np.testing.assert_array_equal(compute_features(s, "bands-v1"), [[2.0, 7.0, 11.5, 15.5, 19.5, 23.5, 27.5]])
    assert get_feature_set("bands-v1").names == ("band_1", "band_2", "band_3", "band_4", "band_5", "band_6", "band_7")
    rows = np.random.default_rng(3).normal(size=(9, 30))
    batch = compute_features(rows, "bands-v1")
    for i in range(len(rows)):  # the same bits for a row alone (row_sums, as herald-v1)
        assert np.array_equal(compute_features(rows[i : i + 1], "bands-v1")[0], batch[i])
    np.testing.assert_allclose(batch, np.stack([b.mean(axis=1) for b in np.array_split(rows, 7, axis=1)], axis=1))
    with pytest.raises(ValueError, match="bands-v1 needs >= 7 layers, got 6"):
        compute_features(np.zeros((1, 6)), "bands-v1")


def test_too_few_layers_for_a_set_is_refused(edge_set):
    with pytest.raises(ValueError, match="test-edges needs >= 7 layers, got 5"):
        compute_features(np.zeros((1, 5)), "test-edges")


def test_fitted_probe_refuses_an_unknown_set(fake_states):
    _, states, labels = fake_states
    fitted = HeraldProbe().fit(states, labels).fitted_
    with pytest.raises(ValueError, match="unknown feature set 'nope'"):
        FittedProbe(fitted.directions, fitted.feature_stats, fitted.scorer, 0.0, "max_f1", 1, "nope")


def test_a_non_default_set_is_fitted_saved_and_served_by_name(tmp_path, fake_states, edge_set):
    backbone, states, labels = fake_states
    probe = HeraldProbe(feature_set="test-edges").fit(states, labels).fitted_
    s = probe.trajectories(states)
    out = probe.predict(states)
    # The scorer saw this set's columns: the served features are the trajectory's edge levels.
    np.testing.assert_allclose(out.features, np.concatenate([s[:, :3], s[:, -4:]], axis=1))
    assert probe.feature_names == edge_set.names

    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    manifest = json.loads((tmp_path / "probe.json").read_text())
    assert manifest["feature_set"] == "test-edges"
    assert manifest["feature_names"] == ["l1", "l2", "l3", "lm4", "lm3", "lm2", "lm1"]
    loaded, _ = load_probe(tmp_path, backbone.info)
    assert loaded.feature_set == "test-edges"
    again = loaded.predict(states)
    np.testing.assert_allclose(again.features, out.features)
    np.testing.assert_allclose(again.scores, out.scores, atol=1e-6)


def test_herald_v1_manifest_round_trip(tmp_path, fake_states):
    backbone, states, labels = fake_states
    probe = HeraldProbe().fit(states, labels).fitted_
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    manifest = json.loads((tmp_path / "probe.json").read_text())
    assert (manifest["feature_set"], manifest["feature_names"]) == ("herald-v1", list(FEATURE_NAMES))
    assert load_probe(tmp_path, backbone.info)[0].feature_set == "herald-v1"


def _rewrite(folder, **changes):
    path = folder / "probe.json"
    manifest = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            manifest.pop(key)
        else:
            manifest[key] = value
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("with_backbone", [True, False])
def test_a_probe_with_an_unknown_set_is_refused_by_name(tmp_path, fake_states, with_backbone):
    backbone, states, labels = fake_states
    save_probe(HeraldProbe().fit(states, labels).fitted_, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    _rewrite(tmp_path, feature_set="herald-v9")
    with pytest.raises(ProbeMismatch, match=r"feature set 'herald-v9' is unknown to Herald .* \(known: .*herald-v1"):
        load_probe(tmp_path, backbone.info if with_backbone else None)


def test_feature_names_that_disagree_with_the_set_are_refused(tmp_path, fake_states):
    backbone, states, labels = fake_states
    save_probe(HeraldProbe().fit(states, labels).fitted_, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    _rewrite(tmp_path, feature_names=["a", "b", "c", "d", "e", "f", "g"])
    with pytest.raises(ProbeMismatch, match="do not match feature set 'herald-v1'"):
        load_probe(tmp_path, backbone.info)


def test_a_manifest_without_a_feature_set_means_herald_v1(tmp_path, fake_states):
    backbone, states, labels = fake_states
    save_probe(HeraldProbe().fit(states, labels).fitted_, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    _rewrite(tmp_path, feature_set=None, feature_names=None)
    assert load_probe(tmp_path, backbone.info)[0].feature_set == "herald-v1"


def test_evaluation_method_names_follow_the_set(edge_set):
    assert make_method("herald").name == "herald"
    from herald_service.training.methods import HeraldMethod

    assert HeraldMethod(0, "test-edges").name == "herald:test-edges"


def test_fit_refuses_an_unknown_set_in_one_line():
    out = herald("fit", "--feature-set", "herald-v9")
    assert out.returncode == 1
    assert "unknown feature set 'herald-v9'" in out.stderr and "Traceback" not in out.stderr



def test_served_features_are_named_by_the_probes_set(fake_states, edge_set):
    from herald_service.engine.engine import classification_at

    _backbone, states, labels = fake_states
    probe = HeraldProbe(feature_set="test-edges").fit(states, labels).fitted_
    out = probe.predict(states[:2])
    assert out.feature_names == edge_set.names
    served = classification_at(out, 1, tokens=5)
    assert list(served.features) == list(edge_set.names)  # not herald-v1's names
    assert list(served.features.values()) == pytest.approx(list(out.features[1]))

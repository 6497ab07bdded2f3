"""The ``+shift`` threshold rule (herald_service.training.methods.SourceShifted; docs/eval/threshold_rule.md)."""

import numpy as np
import pytest

from herald_service.training.methods import SourceShifted, make_method, source_groups


def test_sources_are_dealt_whole_and_each_group_gets_both_kinds():
    sources = np.array(["h1", "h1", "h2", "h3", "b1", "b2", "b2", "b3", "b4"])
    labels = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0])
    deal = source_groups(sources, labels, 3, seed=0)
    for name in set(sources.tolist()):
        assert len(set(deal[sources == name].tolist())) == 1  # a source never splits
    for g in range(3):
        assert set(labels[deal == g].tolist()) == {0, 1}  # 3 harmful and 4 benign sources over 3 groups
    assert np.array_equal(deal, source_groups(sources, labels, 3, seed=0))


def _styled(rng, n_harmful_sources, per_source=40, d=12):
    """Harm on coordinate 0 (harmful +1, benign -1, noise 1); harmful source k also carries a style offset of +3 on
    its own coordinate 1 + k, which a probe fitted on the sources learns to lean on."""
    X, y, src = [], [], []
    for k in range(n_harmful_sources):
        x = rng.normal(0, 1, (per_source, d))
        x[:, 0] += 1.0
        x[:, 1 + k] += 3.0
        X.append(x), y.extend([1] * per_source), src.extend([f"harm{k}"] * per_source)
    for k in range(6):
        x = rng.normal(0, 1, (per_source, d))
        x[:, 0] -= 1.0
        X.append(x), y.extend([0] * per_source), src.extend([f"benign{k}"] * per_source)
    X = np.concatenate(X)[:, None, :].repeat(2, axis=1).astype(np.float32)  # (n, 2 layers, d)
    return X, np.array(y), np.array(src)


def test_the_shift_lowers_a_threshold_that_unseen_sources_fall_below():
    rng = np.random.default_rng(0)
    X, y, src = _styled(rng, 6)
    groups = np.array([f"{s}|{label}" for s, label in zip(src, y)])
    train = src != "harm5"  # harm5's style coordinate is never seen with a harmful label
    plain = make_method("logreg_last", 0).fit(X[train], y[train], groups[train])
    shifted = make_method("logreg_last+shift", 0).fit(X[train], y[train], groups[train])
    assert isinstance(shifted, SourceShifted) and shifted.name == "logreg_last+shift"
    assert np.array_equal(shifted.score(X), plain.score(X))  # same fit, same ranking
    assert shifted.offset_ < 0 and shifted.threshold_ == pytest.approx(plain.threshold_ + shifted.offset_)
    unseen = src == "harm5"
    recall_plain = float((plain.score(X[unseen]) >= plain.threshold_).mean())
    recall_shifted = float((shifted.score(X[unseen]) >= shifted.threshold_).mean())
    assert recall_shifted > recall_plain + 0.1, (recall_plain, recall_shifted)


def test_one_source_is_refused_by_name():
    X = np.zeros((8, 2, 3), dtype=np.float32)
    y = np.array([0, 1] * 4)
    groups = np.array([f"only|{label}" for label in y])
    with pytest.raises(ValueError, match=r"^logreg_last\+shift needs training rows from at least two sources$"):
        make_method("logreg_last+shift", 0).fit(X, y, groups)

"""herald-v1 trajectory features against hand-computed trajectories (DESIGN section 1.4)."""

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from herald_service.probes.features import FEATURE_NAMES, compute_features, onset_layers


def feats(s):
    return dict(zip(FEATURE_NAMES, compute_features(np.array(s, dtype=float))[0]))


def test_rising_line():
    # s = 4x - 1 on x = 0, .25, .5, .75, 1
    f = feats([-1, 0, 1, 2, 3])
    assert f["slope"] == pytest.approx(4.0)
    assert f["curvature"] == pytest.approx(0.0, abs=1e-9)
    assert f["monotonicity"] == pytest.approx(1.0)
    assert f["onset"] == pytest.approx(0.5)  # s_2 = 0 is not > 0, so positive from layer 3 (x = 0.5)
    assert f["late_level"] == pytest.approx(3.0)  # L // 4 = 1 layer
    assert f["peak"] == pytest.approx(3.0)
    assert f["volatility"] == pytest.approx(0.0)
    assert onset_layers(np.array([[-1, 0, 1, 2, 3.0]])) == [3]


def test_flat_negative():
    f = feats([-0.5] * 5)
    assert f["slope"] == pytest.approx(0.0, abs=1e-12)
    assert f["curvature"] == pytest.approx(0.0, abs=1e-12)
    assert f["monotonicity"] == 0.0
    assert f["onset"] == 1.0
    assert f["late_level"] == pytest.approx(-0.5)
    assert f["peak"] == pytest.approx(-0.5)
    assert f["volatility"] == 0.0


def test_constant_positive_has_onset_at_first_layer():
    f = feats([2.0, 2.0, 2.0, 2.0])
    assert f["monotonicity"] == 0.0
    assert f["onset"] == 0.0
    assert onset_layers(np.array([[2.0, 2.0, 2.0, 2.0]])) == [1]


def test_oscillating():
    s = [1, -1, 1, -1, 1, -1, 1, -1]  # x_i = i / 7
    f = feats(s)
    # slope = sum x_i s_i / sum (x_i - 0.5)^2 = (-4/7) / (6/7)
    assert f["slope"] == pytest.approx(-2 / 3)
    # Spearman: rank deviations +-2, index deviations i - 3.5: -8 / sqrt(32 * 42)
    assert f["monotonicity"] == pytest.approx(-8 / math.sqrt(32 * 42))
    assert f["monotonicity"] == pytest.approx(spearmanr(s, range(8)).statistic)
    assert f["onset"] == 1.0
    assert f["late_level"] == pytest.approx(0.0)  # mean of the last 2 layers (8 // 4)
    assert f["peak"] == 1.0
    # first differences alternate -2, 2 (7 of them): population std = sqrt(4 - (2/7)^2)
    assert f["volatility"] == pytest.approx(math.sqrt(4 - 4 / 49))


def test_never_positive():
    s = [-3, -2, -1, -0.5, -0.1, -0.2]
    f = feats(s)
    assert f["onset"] == 1.0
    assert f["peak"] == pytest.approx(-0.1)
    assert f["late_level"] == pytest.approx(-0.2)  # 6 // 4 = 1 layer
    assert onset_layers(np.array([s])) == [None]


def test_quadratic_curvature():
    x = np.linspace(0, 1, 5)
    f = feats(2 * x**2)
    assert f["curvature"] == pytest.approx(2.0)
    # least-squares line through 2x^2 on these points: slope = 2 * cov(x, x^2) / var(x) = 2 * 0.625 / 0.625
    assert f["slope"] == pytest.approx(2.0)


def test_dip_then_rise_onset_is_last_crossing():
    assert onset_layers(np.array([[1.0, 2.0, -1.0, 0.5, 0.7]])) == [4]
    assert feats([1.0, 2.0, -1.0, 0.5, 0.7])["onset"] == pytest.approx(0.75)


def test_batch_rows_are_independent():
    rows = np.array([[-1, 0, 1, 2, 3.0], [-0.5] * 5])
    both = compute_features(rows)
    assert np.allclose(both[0], compute_features(rows[:1])[0])
    assert np.allclose(both[1], compute_features(rows[1:])[0])


@pytest.mark.parametrize("bad", [np.zeros((2, 2)), np.array([[1.0, np.nan, 2.0]]), np.zeros((1, 2, 3))])
def test_rejects_bad_shapes_and_values(bad):
    with pytest.raises(ValueError):
        compute_features(bad)

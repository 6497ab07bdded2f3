"""LDA directions, projections and the peak-monotonicity layer (DESIGN sections 1.3 and 1.6)."""

import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from herald_service.probes.directions import fit_directions, peak_monotonicity_layer


def synthetic_states(n=300, layers=4, d=24, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    mean_shift = rng.standard_normal((layers, d))
    x = rng.standard_normal((n, layers, d)) + y[:, None, None] * mean_shift[None] * np.linspace(0.2, 1.5, layers)[None, :, None]
    return x, y


def test_direction_equals_sklearn_lda_coefficient_direction():
    x, y = synthetic_states()
    fitted = fit_directions(x, y)
    assert fitted.directions.dtype == np.float16
    for layer in range(x.shape[1]):
        lda = LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto").fit(x[:, layer], y)
        reference = lda.coef_[0] / np.linalg.norm(lda.coef_[0])
        w = fitted.directions[layer].astype(np.float64)
        cosine = w @ reference / np.linalg.norm(w)
        assert cosine > 0.9999  # fp16 storage is the only difference


def test_projection_is_centered_and_scaled_with_harmful_positive():
    x, y = synthetic_states(seed=1)
    fitted = fit_directions(x, y)
    s = fitted.project(x)
    harm, benign = s[y == 1], s[y == 0]
    # center = midpoint of class means, so the two class means are symmetric about 0
    assert np.allclose(harm.mean(0), -benign.mean(0), atol=1e-4)
    assert (harm.mean(0) > 0).all()
    pooled = np.sqrt((((harm - harm.mean(0)) ** 2).sum(0) + ((benign - benign.mean(0)) ** 2).sum(0)) / (len(s) - 2))
    assert np.allclose(pooled, 1.0, atol=1e-4)


def test_torch_and_numpy_projection_agree():
    import torch

    x, y = synthetic_states(seed=2)
    fitted = fit_directions(x, y)
    assert np.allclose(fitted.project(x), fitted.project(torch.tensor(x, dtype=torch.float32)), atol=1e-4)


def test_directions_storage_is_l_times_d_times_two_bytes():
    x, y = synthetic_states(layers=3, d=8)
    assert fit_directions(x, y).directions.nbytes == 3 * 8 * 2
    assert 32 * 4096 * 2 == 262_144  # DESIGN: a 32-layer d=4096 model


def test_one_class_is_refused():
    x, _ = synthetic_states()
    with pytest.raises(ValueError, match="both classes"):
        fit_directions(x, np.zeros(len(x), dtype=int))


def test_peak_monotonicity_layer_is_where_harmful_rises_fastest():
    benign = np.zeros((4, 6))
    harmful = np.array([[0, 0.1, 0.2, 3.0, 3.1, 3.2]] * 4)  # jump into layer 4
    s = np.vstack([benign, harmful])
    labels = np.array([0] * 4 + [1] * 4)
    assert peak_monotonicity_layer(s, labels) == 4


def test_dot_then_normalize_is_the_projection_and_wrong_shapes_are_refused():
    import torch

    x, y = synthetic_states(seed=3)
    fitted = fit_directions(x, y)
    states = torch.tensor(x, dtype=torch.bfloat16)  # the engine passes device states in the model's dtype
    raw = fitted.dot(states)
    assert raw.dtype == torch.float32 and tuple(raw.shape) == (x.shape[0], x.shape[1])
    assert np.allclose(fitted.normalize(raw.numpy()), fitted.project(states), atol=1e-6)
    assert np.allclose(fitted.normalize(raw.numpy()), fitted.project(x), atol=0.05)  # bf16 rounding of the states only
    with pytest.raises(ValueError, match=r"states must have shape \(batch, "):
        fitted.dot(states[:, :-1])

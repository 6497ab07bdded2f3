"""Per-layer directions (LDA and logistic), projections and the peak-monotonicity layer (DESIGN sections 1.3, 1.6)."""

import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from herald_service.probes.directions import DIRECTION_ESTIMATORS, fit_directions, peak_monotonicity_layer
from herald_service.probes.probe import balanced_weights


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


def test_logistic_direction_is_the_standardized_logistic_coefficient_mapped_to_state_space():
    x, y = synthetic_states()
    x[:, :, 3] *= 40.0  # one wide, uninformative coordinate: standardization must undo it
    weights = np.where(y == 1, 3.0, 1.0)
    fitted = fit_directions(x, y, estimator="logistic", sample_weight=weights)
    for layer in range(x.shape[1]):
        scaler = StandardScaler().fit(x[:, layer])
        model = LogisticRegression(C=0.1, max_iter=2000).fit(scaler.transform(x[:, layer]), y,
                                                            sample_weight=weights / weights.mean())
        reference = model.coef_[0] / scaler.scale_
        reference /= np.linalg.norm(reference)
        w = fitted.directions[layer].astype(np.float64)
        assert w @ reference / np.linalg.norm(w) > 0.9999
        assert abs(w[3]) < 0.05  # the wide coordinate gets no weight
    s = fitted.project(x)
    assert s[y == 1, -1].mean() > 1 > -1 > s[y == 0, -1].mean()  # harmful side positive


def test_logistic_direction_ignores_the_scale_of_the_weights():
    x, y = synthetic_states(layers=2)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    a = fit_directions(x, y, estimator="logistic", sample_weight=weights)
    b = fit_directions(x, y, estimator="logistic", sample_weight=weights * 50)
    np.testing.assert_array_equal(a.directions, b.directions)
    plain = fit_directions(x, y, estimator="logistic")
    assert not np.array_equal(a.directions, plain.directions)  # the weights do act


def test_estimator_and_weight_shape_are_checked():
    x, y = synthetic_states(layers=2)
    assert DIRECTION_ESTIMATORS[0] == "lda"  # the default stays DESIGN's (docs/eval/direction_estimators.md)
    with pytest.raises(ValueError, match="one of lda, logistic; got 'pca'"):
        fit_directions(x, y, estimator="pca")
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        fit_directions(x, y, estimator="logistic", sample_weight=np.ones(3))


def test_classes_with_identical_states_are_refused_by_name_not_with_nan():
    x = np.ones((10, 3, 4))  # every prompt of both classes gives the same states
    y = np.repeat([0, 1], 5)
    with pytest.raises(ValueError, match="decoder layer 1: no direction separates the classes"):
        fit_directions(x, y)


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


def test_source_folds_deal_whole_groups_and_leave_both_classes_outside_each_fold():
    from herald_service.training.methods import source_folds

    groups = np.array(["a"] * 5 + ["b"] * 3 + ["c"] * 4 + ["x"] * 6 + ["y"] * 2 + ["z"] * 3 + ["w"] * 1)
    labels = np.array([1] * 12 + [0] * 12)
    folds = source_folds(groups, labels, folds=3)
    for group in np.unique(groups):
        assert len(np.unique(folds[groups == group])) == 1  # a group is never split
    # largest first, harmful and benign dealt separately: a(5)->0, c(4)->1, b(3)->2; x(6)->0, z(3)->1, y(2)->2, w(1)->0
    assert {g: int(folds[groups == g][0]) for g in "abcxyzw"} == {"a": 0, "c": 1, "b": 2, "x": 0, "z": 1, "y": 2, "w": 0}
    for fold in range(3):
        assert set(labels[folds != fold]) == {0, 1}
    with pytest.raises(ValueError, match="at least 2"):
        source_folds(groups, labels, folds=1)


def test_cross_fitted_projections_of_a_fold_never_see_its_rows():
    from herald_service.training.methods import cross_fitted_projections, source_folds

    X, y = synthetic_states(n=240, layers=3, d=12, seed=3)
    groups = np.array([f"h{i % 4}" if label else f"b{i % 4}" for i, label in enumerate(y)])
    folds = source_folds(groups, y, folds=2)
    s = cross_fitted_projections(X, y, groups, "logistic", folds=2)
    assert s.shape == (240, 3) and s.dtype == np.float32
    # fold 0's rows are projected by directions fitted on fold 1 only: the same as fitting there by hand
    rest = folds == 1
    by_hand = fit_directions(X[rest], y[rest], estimator="logistic",
                             sample_weight=balanced_weights(groups[rest], y[rest])).project(X[folds == 0])
    np.testing.assert_allclose(s[folds == 0], by_hand, rtol=1e-6, atol=1e-6)
    # and fold 1's rows by directions fitted on fold 0: other states there move fold 1's projections
    X2 = X.copy()
    X2[folds == 0] += np.random.default_rng(1).normal(0, 0.5, X2[folds == 0].shape)
    s2 = cross_fitted_projections(X2, y, groups, "logistic", folds=2)
    assert not np.allclose(s2[folds == 1], s[folds == 1])
    # and projections still put harmful above benign on average (held-out rows, so well below in-sample separation)
    assert s[y == 1].mean() > 0 > s[y == 0].mean()
    one_class = np.where(y == 1, "h", "b")  # one group per class: a fold's complement holds one class only
    with pytest.raises(ValueError, match="one class only"):
        cross_fitted_projections(X, y, one_class, "logistic", folds=2)

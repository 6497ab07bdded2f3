"""Per-fold features for the scorer study: the fit / calibration / test parts and LDA directions of `herald eval`'s
LOSO on split SEED (HeraldMethod(seed=SEED) step for step), saved so every scorer recipe trains on the same features.

Usage (repository root, venv active): python docs/eval/scorer_training/prep.py SEED [OUT_DIR [ESTIMATOR]]
(default /tmp/st/folds_seed<SEED>, ESTIMATOR lw). ESTIMATOR picks the per-layer direction (the direction-estimator study,
docs/eval/direction_estimators.md): lw = the shipped LDA with Ledoit-Wolf shrinkage; s<float> = LDA with that fixed
shrinkage (s1.0 = difference of class means); balanced-mean-diff = difference of source-balanced class means;
logistic = the logreg_last estimator at every layer; nuisance<float> = LDA with lambda x the between-source
within-class scatter added to its within-class covariance (round 2).
"""
import sys, time
from pathlib import Path
import numpy as np
from herald_service.config import EMBEDDED_BACKBONE, default_cache_dir
from herald_service.training.eval import groups_of, load_corpus_states
from herald_service.training.protocol import loso_folds
from herald_service.training.methods import CALIBRATION_FRACTION
from herald_service.probes.probe import balanced_weights, calibration_mask
from herald_service.probes.directions import fit_directions, with_centers_and_scales
from herald_service.probes.features import compute_features
from herald_service.training.methods import LOGREG_C
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(f"/tmp/st/folds_seed{seed}"); out.mkdir(parents=True, exist_ok=True)
estimator = sys.argv[3] if len(sys.argv) > 3 else "lw"


def directions_for(states, y, groups):
    """Per-layer directions of ESTIMATOR on the fit rows (states (n, layer, d), y (n,), groups (n,) source|label)."""
    if estimator == "lw":
        return fit_directions(states, y)
    if estimator.startswith("s"):
        return fit_directions(states, y, float(estimator[1:]))
    if estimator == "balanced-mean-diff":
        means = {g: states[groups == g].astype(np.float64).mean(0) for g in sorted(set(groups.tolist()))}
        label_of = {g: int(y[groups == g][0]) for g in means}
        harm = np.mean([m for g, m in means.items() if label_of[g] == 1], axis=0)
        benign = np.mean([m for g, m in means.items() if label_of[g] == 0], axis=0)
        diff = harm - benign
        return with_centers_and_scales(diff / np.linalg.norm(diff, axis=1, keepdims=True), states, y)
    if estimator == "logistic":
        w = balanced_weights(groups, y)
        rows = []
        for l in range(states.shape[1]):
            x = states[:, l].astype(np.float64)
            scaler = StandardScaler().fit(x)
            model = LogisticRegression(C=LOGREG_C, max_iter=2000).fit(scaler.transform(x), y, sample_weight=w)
            rows.append(model.coef_[0] / scaler.scale_)  # w . (x - m) / s = (w / s) . x + const
        rows = np.stack(rows)
        return with_centers_and_scales(rows / np.linalg.norm(rows, axis=1, keepdims=True), states, y)
    if estimator.startswith("nuisance"):
        lam = float(estimator[len("nuisance"):])
        names = sorted(set(groups.tolist()))
        rows = []
        for l in range(states.shape[1]):
            x = states[:, l].astype(np.float64)
            lda = LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto", store_covariance=True).fit(x, y)
            class_mean = {c: x[y == c].mean(0) for c in (0, 1)}
            scatter = np.zeros((x.shape[1], x.shape[1]))
            for g in names:
                member = groups == g
                offset = x[member].mean(0) - class_mean[int(y[member][0])]
                scatter += member.mean() * np.outer(offset, offset)
            direction = np.linalg.solve(lda.covariance_ + lam * scatter, class_mean[1] - class_mean[0])
            rows.append(direction / np.linalg.norm(direction))
        return with_centers_and_scales(np.stack(rows), states, y)
    raise KeyError(estimator)


corpus = load_corpus_states([Path("../shared/data")], EMBEDDED_BACKBONE, default_cache_dir(), "cpu", "auto", 150, 1024, 0.2, seed)
data, train_index, test_index = corpus.data, corpus.train_index, corpus.test_index
print("n", len(data.labels), len(train_index), len(test_index), flush=True)
np.savez(out / "meta.npz", labels=data.labels, sources=data.sources)
for k, fold in enumerate(loso_folds(data.sources, data.labels, train_index, test_index)):
    t = time.time()
    tr = data.take(fold.train_index)
    y = tr.labels.astype(int); groups = groups_of(tr)
    calib = calibration_mask(groups, CALIBRATION_FRACTION, seed)  # HeraldMethod(seed) uses its seed here
    fit = ~calib
    w = balanced_weights(groups, y)
    d = directions_for(tr.states[fit], y[fit], groups[fit])
    test = fold.test_index
    np.savez(out / f"fold{k:02d}.npz", source=fold.source,
             F_fit=compute_features(d.project(tr.states[fit])), y_fit=y[fit], w_fit=w[fit], g_fit=groups[fit],
             F_cal=compute_features(d.project(tr.states[calib])), y_cal=y[calib],
             F_test=compute_features(d.project(data.states[test])), y_test=data.labels[test],
             test_index=test, n_held=len(fold.held_out_index))
    print(k, fold.source, round(time.time() - t, 1), flush=True)

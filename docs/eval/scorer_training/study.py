"""Scorer-training recipes on the LOSO folds saved by prep.py (candidates and rule: docs/eval/scorer_training.md).

Usage: python docs/eval/scorer_training/study.py FOLDS_DIR OUT.json RECIPE[,RECIPE...] SEED[,SEED...]
Appends one record per (recipe, init seed) to OUT.json: pooled LOSO F1 / AUROC / recall / FPR, per-fold AUROC against
unseen rows of the other class, what inner selection chose, and every held-out row's margin.
"""
import sys, json, time, glob
from pathlib import Path
import numpy as np
import torch
from torch import nn
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from herald_service.probes.features import FeatureStats
from herald_service.probes.scorer import TrajectoryScorer, calibrate_threshold, train_scorer
from herald_service.training.bootstrap import bootstrap_metrics

torch.set_num_threads(1)
L2_GRID = (0.0, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def _weights(y, w):
    y = torch.as_tensor(y, dtype=torch.float32)
    w = torch.ones_like(y) if w is None else torch.as_tensor(w, dtype=torch.float32)
    w = w / w.mean()
    pos = float((w * y).sum()); neg = float((w * (1 - y)).sum())
    return y, torch.where(y > 0.5, w * (neg + pos) / (2 * max(pos, 1e-9)), w * (neg + pos) / (2 * max(neg, 1e-9)))


def fit_mlp(F, y, w, *, epochs=400, lr=0.02, weight_decay=1e-3, l2=0.0, smooth=0.0, seed=0, init=None, monitor=None):
    """train_scorer's loop with the candidate knobs; monitor=(F_val, y_val, w_val) returns the val-loss curve."""
    torch.manual_seed(seed)
    model = TrajectoryScorer()
    if init is not None:
        model.load_state_dict(init(model))
    x = torch.as_tensor(F, dtype=torch.float32)
    yt, wt = _weights(y, w)
    target = yt * (1 - 2 * smooth) + smooth
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = nn.BCEWithLogitsLoss(reduction="none")
    curve = []
    if monitor is not None:
        xv = torch.as_tensor(monitor[0], dtype=torch.float32)
        yv, wv = _weights(monitor[1], monitor[2])
    model.train()
    for step in range(epochs):
        if monitor is not None and step % 10 == 0:
            with torch.no_grad():
                curve.append((step, float((loss_fn(model(xv), yv) * wv).mean())))
        opt.zero_grad()
        loss = (loss_fn(model(x), target) * wt).mean()
        if l2:
            loss = loss + l2 / 2 * (model.mlp[0].weight.pow(2).sum() + model.mlp[2].weight.pow(2).sum())
        loss.backward()
        opt.step()
    if monitor is not None:
        with torch.no_grad():
            curve.append((epochs, float((loss_fn(model(xv), yv) * wv).mean())))
    model.eval()
    return (model, curve) if monitor is not None else model


def logits_of(model, F):
    st = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    h = np.maximum(F.astype(np.float64) @ st["mlp.0.weight"].T + st["mlp.0.bias"], 0.0)
    return h @ st["mlp.2.weight"][0]


def source_of(g):
    return np.array([s.rsplit("|", 1)[0] for s in g])


def deal_sources(g, y, n_groups, seed):
    """Sources of the fit part dealt into n_groups, harmful-majority and benign-majority sources separately."""
    src = source_of(g)
    rng = np.random.default_rng(seed)
    assign = {}
    for cls in (1, 0):
        names = sorted({s for s in set(src.tolist()) if (round(y[src == s].mean()) == cls)})
        names = [names[i] for i in rng.permutation(len(names))]
        for i, s in enumerate(names):
            assign[s] = i % n_groups
    return np.array([assign[s] for s in src])


def inner_l2(F, y, w, g, seed):
    groups = deal_sources(g, y, 4, seed)
    scores = {}
    for lam in L2_GRID:
        aucs = []
        for k in range(4):
            tr, va = groups != k, groups == k
            if len(set(y[va].tolist())) < 2:
                continue
            m = fit_mlp(F[tr], y[tr], w[tr], l2=lam, seed=seed)
            aucs.append(roc_auc_score(y[va], logits_of(m, F[va])))
        scores[lam] = float(np.mean(aucs))
    best = max(scores.values())
    lam = max(l for l, s in scores.items() if s >= best - 1e-9)
    return lam, scores


def early_stop_steps(F, y, w, g, seed):
    src = source_of(g)
    rng = np.random.default_rng(seed)
    held = set()
    for cls in (1, 0):
        names = sorted({s for s in set(src.tolist()) if round(y[src == s].mean()) == cls})
        take = max(1, int(round(len(names) / 4)))
        held |= {names[i] for i in rng.permutation(len(names))[:take]}
    va = np.isin(src, list(held))
    _, curve = fit_mlp(F[~va], y[~va], w[~va], seed=seed, monitor=(F[va], y[va], w[va]))
    steps, losses = zip(*curve)
    return int(steps[int(np.argmin(losses))]), curve


def logreg_init_fn(F, y, w):
    lr = LogisticRegression(C=1.0, max_iter=2000).fit(F, y, sample_weight=w)
    coef = torch.as_tensor(lr.coef_[0], dtype=torch.float32)
    b = float(lr.intercept_[0])

    def init(model):
        st = {k: v.clone() for k, v in model.state_dict().items()}
        st["mlp.0.weight"][0] = coef; st["mlp.0.bias"][0] = b
        st["mlp.0.weight"][1] = -coef; st["mlp.0.bias"][1] = -b
        st["mlp.2.weight"].zero_()
        st["mlp.2.weight"][0, 0] = 1.0; st["mlp.2.weight"][0, 1] = -1.0
        return st
    return init


def train_recipe(recipe, F, y, w, g, seed):
    info = {}
    if recipe == "current":
        m = train_scorer(F, y, w, seed=seed)
    elif recipe.startswith("l2="):
        m = fit_mlp(F, y, w, l2=float(recipe[3:]), seed=seed)
    elif recipe == "l2-inner":
        lam, scores = inner_l2(F, y, w, g, seed)
        info = {"lam": lam, "inner_auroc": scores}
        m = fit_mlp(F, y, w, l2=lam, seed=seed)
    elif recipe == "early-stop":
        steps, curve = early_stop_steps(F, y, w, g, seed)
        info = {"steps": steps}
        m = fit_mlp(F, y, w, epochs=steps, seed=seed)
    elif recipe == "gentle":
        m = fit_mlp(F, y, w, epochs=150, lr=0.005, seed=seed)
    elif recipe == "label-smooth":
        m = fit_mlp(F, y, w, smooth=0.05, seed=seed)
    elif recipe == "logreg-init":
        m = fit_mlp(F, y, w, epochs=100, lr=0.005, seed=seed, init=logreg_init_fn(F, y, w))
    elif recipe == "logreg-embed":
        m = fit_mlp(F, y, w, epochs=0, seed=seed, init=logreg_init_fn(F, y, w))
    else:
        raise KeyError(recipe)
    return m, info


def run(folder, recipe, seed):
    meta = np.load(f"{folder}/meta.npz", allow_pickle=True)
    labels = meta["labels"]
    held = np.full(len(labels), np.nan)
    folds = {}
    for path in sorted(glob.glob(f"{folder}/fold*.npz")):
        z = np.load(path, allow_pickle=True)
        stats = FeatureStats.fit(z["F_fit"])
        F = stats.transform(z["F_fit"])
        m, info = train_recipe(recipe, F, z["y_fit"], z["w_fit"], z["g_fit"], seed)
        thr = calibrate_threshold(logits_of(m, stats.transform(z["F_cal"])), z["y_cal"], "max_f1")
        mt = logits_of(m, stats.transform(z["F_test"])) - thr
        n = int(z["n_held"])
        held[z["test_index"][:n]] = mt[:n]
        yt = z["y_test"]
        folds[str(z["source"])] = {"auroc": float(roc_auc_score(yt, mt)) if len(set(yt.tolist())) > 1 else None,
                                   "info": info}
    done = ~np.isnan(held)
    p = bootstrap_metrics(labels[done], held[done], held[done] >= 0, replicates=1)
    return {"recipe": recipe, "seed": seed, "f1": p["f1"]["value"], "auroc": p["auroc"]["value"],
            "recall": p["recall"]["value"], "fpr": p["false_positive_rate"]["value"], "folds": folds,
            "margins": [None if np.isnan(v) else float(v) for v in held]}


if __name__ == "__main__":
    folder, out = sys.argv[1], Path(sys.argv[2])
    recipes, seeds = sys.argv[3].split(","), [int(s) for s in sys.argv[4].split(",")]
    results = json.loads(out.read_text()) if out.exists() else []
    for recipe in recipes:
        for seed in seeds:
            t = time.time()
            r = run(folder, recipe, seed)
            results.append(r)
            out.write_text(json.dumps(results))
            print(f"{recipe} seed {seed}: F1 {r['f1']:.4f} AUROC {r['auroc']:.4f} ({time.time() - t:.0f} s)", flush=True)

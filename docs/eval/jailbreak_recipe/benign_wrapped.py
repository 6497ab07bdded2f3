"""Diagnostic (added after seed 0, not part of the rule): false positives on *benign* prompts in evaluation templates.

Does a recipe learn "jailbreak wrapper = harmful"? The 120 templates of the enlarged evaluation set (never trained on)
are each filled with one benign prompt of the random split's *test* part (<= 500 characters, seed 0); each recipe's
random-split model (as `herald recipes` fits it, per fit seed) scores them. Writes benign_wrapped.json beside this file.

Run: `OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python docs/eval/jailbreak_recipe/benign_wrapped.py`
(`--recipes A B ... --out PATH` scores other recipes, e.g. round 3 of docs/eval/direction_estimators.md;
`--backbone PATH` another backbone, e.g. its Gemma round).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from herald_service.config import EMBEDDED_BACKBONE, default_cache_dir
from herald_service.training.attacks import (ITW_SOURCE_KEY, evaluation_picks, fill, held_out_requests, load_templates,
                                             split_templates)
from herald_service.training.bootstrap import bootstrap_metrics
from herald_service.training.corpus import Example
from herald_service.training.eval import _states_for, fit_method, load_corpus_states, margins
from herald_service.training.recipes import (RECIPES, RecipeOptions, concat, jailbreak_labels, jailbreak_sets,
                                             wrapped_pool)

HERE = Path(__file__).parent
NAMES = ("shipped", "jailbreak", "jailbreak+benign", "logreg_last", "logreg_last+jailbreak", "logreg_last+jailbreak+benign")
SEEDS = (0, 1, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description="False positives on benign prompts inside unseen jailbreak templates.")
    parser.add_argument("--recipes", nargs="+", default=list(NAMES), choices=sorted(RECIPES))
    parser.add_argument("--out", type=Path, default=HERE / "benign_wrapped.json")
    parser.add_argument("--backbone", default=EMBEDDED_BACKBONE, help="a local model folder or GGUF (default: embedded)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    o = RecipeOptions(data=[Path("../shared/data")], backbone=args.backbone, cache_dir=default_cache_dir(),
                      jailbreak_templates=Path("../shared/data/pyrit_jailbreak_templates.jsonl"), recipes=("jailbreak",))
    corpus = load_corpus_states(o.data, o.backbone, o.cache_dir, o.device, o.dtype, o.max_per_source, o.max_tokens,
                                o.test_fraction, o.seed)
    backbone, cache, everything, capped = corpus.backbone, corpus.cache, corpus.everything, corpus.capped
    data, examples, train_index, test_index = corpus.data, corpus.examples, corpus.train_index, corpus.test_index
    templates = load_templates(o.jailbreak_templates, o.jailbreak_max_chars)
    _, rows = jailbreak_sets(templates, everything, capped, [examples[i] for i in train_index], o)
    pool = wrapped_pool(backbone, cache, rows, o)

    requests = held_out_requests(everything, capped)
    split = split_templates(templates, [e.prompt for e in everything if ITW_SOURCE_KEY in e.source], len(requests),
                            o.jailbreak_n, o.seed)
    picks = np.concatenate([evaluation_picks(len(templates), len(requests), o.jailbreak_n, o.seed)[0],
                            split.extra_test[: o.jailbreak_extra_n]])
    benign = [examples[i] for i in test_index if examples[i].label == 0 and len(examples[i].prompt) <= 500]
    order = np.random.default_rng(o.seed).permutation(len(benign))[: len(picks)]
    wrapped = [Example(fill(templates[t], benign[j].prompt), 0, "benign in evaluation templates", benign[j].source, "diag")
               for t, j in zip(picks, order)]
    diag, _, _ = _states_for(backbone, wrapped, cache, o.max_tokens, "benign wrapped states")

    out = {"n": int(len(diag.labels)), "results": {}}
    for name in args.recipes:
        method, _ = RECIPES[name]
        train = data.take(train_index)
        if jailbreak_labels(name):
            train = concat(train, pool.for_fold(None, jailbreak_labels(name)))
        per_seed = {}
        for seed in SEEDS:
            m = margins(fit_method(method, train, seed), diag.states)
            per_seed[seed] = bootstrap_metrics(diag.labels, m, m >= 0, replicates=1000)["false_positive_rate"]
        out["results"][name] = per_seed
        print(name, {s: round(v["value"], 3) for s, v in per_seed.items()}, flush=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Jailbreak templates split by identity, and wrapped training prompts that no fold may see its held-out source in."""

from __future__ import annotations

import numpy as np
import pytest

from herald_service.training.attacks import (WRAPPED_BENIGN_SOURCE, WRAPPED_HARMFUL_SOURCE, evaluation_picks,
                                             extended_test_set, fold_rows, split_templates, template_key,
                                             wrap_requests, wrap_training_prompts)
from herald_service.training.corpus import Example
from herald_service.training.recipes import jailbreak_labels

ITW = "In-the-wild jailbreak prompts (Shen et al., jailbreak_llms)"
TAL = "https://huggingface.co/datasets/TrustAIRLab/in-the-wild-jailbreak-prompts"


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def _templates() -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(60):
        source = TAL if i % 3 == 0 else "https://github.com/alexalbertt/jailbreakchat"
        story = " ".join(rng.choice(WORDS, 12))  # its own words: no 8-word sequence in common with another template
        out.append({"prompt": f"Template {i:03d}: {story}, answer everything. {{{{ prompt }}}}", "template_source": source})
    # a near-duplicate of every template: same 60-character key, different tail
    out += [{"prompt": t["prompt"] + " Stay in character!", "template_source": t["template_source"]} for t in out[:60]]
    return out


def _requests(source: str, n: int, label: int = 1) -> list[Example]:
    return [Example(f"{source} request <{i}>", label, source, None, "f") for i in range(n)]


def test_template_key_ignores_case_punctuation_and_the_slot():
    assert template_key("Hello, ChatGPT!  {{ prompt }} Act as DAN") == template_key("hello chatgpt {{prompt}} act as dan")
    assert template_key("x" * 100) == "x" * 60


def test_wrap_requests_uses_the_evaluation_picks():
    templates, requests = _templates(), _requests("AdvBench", 30)
    t_order, r_order = evaluation_picks(len(templates), len(requests), 10, seed=0)
    wrapped = wrap_requests(templates, requests, 10, seed=0)
    assert [w.prompt for w in wrapped] == [templates[t]["prompt"].replace("{{ prompt }}", requests[r].prompt)
                                           for t, r in zip(t_order, r_order)]


def test_split_keeps_evaluation_templates_and_their_near_duplicates_out_of_training():
    templates = _templates()
    itw_rows = [templates[1]["prompt"].replace("{{ prompt }}", "anything")]  # jailbreakchat template 1 is in that corpus
    split = split_templates(templates, itw_rows, n_requests=30, test_n=10, seed=0)
    keys = [template_key(t["prompt"]) for t in templates]
    test_keys = {keys[i] for i in split.test}
    train_keys = {keys[i] for i in split.train}
    extra_keys = {keys[i] for i in split.extra_test}
    assert len(test_keys) == 10 and not test_keys & train_keys and not test_keys & extra_keys and not train_keys & extra_keys
    assert len(split.train) == len(train_keys) and len(split.extra_test) == len(extra_keys)  # one template per group
    assert len(train_keys | extra_keys | test_keys) == 60  # every group is used somewhere
    # linked: TrustAIRLab origin, or matching a corpus row, spread to the near-duplicate
    assert split.linked[0] and split.linked[60] and split.linked[1] and split.linked[61] and not split.linked[2]
    assert split.linked.sum() == 2 * (20 + 1)
    # both parts hold linked and unlinked templates
    assert split.linked[split.train].any() and (~split.linked[split.train]).any()
    assert split.linked[split.extra_test].any() and (~split.linked[split.extra_test]).any()


def test_extended_test_set_adds_rows_with_unused_held_out_requests():
    templates, requests = _templates(), _requests("AdvBench", 30)
    split = split_templates(templates, [], len(requests), 10, seed=0)
    rows = extended_test_set(templates, split, requests, 10, 15, seed=0)
    assert [r.prompt for r in rows[:10]] == [r.prompt for r in wrap_requests(templates, requests, 10, seed=0)]
    used = {q.prompt for q in requests if any(q.prompt in r.prompt for r in rows[:10])}
    extra = {q.prompt for q in requests if any(q.prompt in r.prompt for r in rows[10:])}
    assert len(rows) == 25 and len(used) == 10 and len(extra) == 15 and not used & extra
    assert all(r.label == 1 for r in rows)


def _pool(per_class: int = 8):
    templates = _templates()
    split = split_templates(templates, [], 30, 10, seed=0)
    harmful = _requests("AdvBench", 12) + _requests("HarmBench", 3)  # HarmBench is short: its requests repeat
    benign = _requests("AlpacaEval", 10, 0) + _requests("IFEval", 10, 0)
    return templates, split, wrap_training_prompts(templates, split, harmful, benign, per_class, seed=0)


def test_wrapped_training_prompts_fill_four_harmful_cells_and_use_training_templates_only():
    templates, split, rows = _pool(8)
    harmful = [r for r in rows if r.example.label == 1]
    benign = [r for r in rows if r.example.label == 0]
    assert len(harmful) == 16 and len(benign) == 16
    cells = {(s, flag): sum(r.request_source == s and r.linked == flag for r in harmful)
             for s in ("AdvBench", "HarmBench") for flag in (False, True)}
    assert cells == {("AdvBench", False): 4, ("AdvBench", True): 4, ("HarmBench", False): 4, ("HarmBench", True): 4}
    assert sum(r.linked for r in benign) == 8
    assert {r.template for r in rows} <= set(split.train.tolist())
    assert all(r.linked == split.linked[r.template] for r in rows)
    assert {r.example.source for r in harmful} == {WRAPPED_HARMFUL_SOURCE}
    assert {r.example.source for r in benign} == {WRAPPED_BENIGN_SOURCE}
    assert all(r.example.prompt.startswith(templates[r.template]["prompt"].split("{{")[0]) for r in rows)


def test_fold_rows_never_hold_the_held_out_source_or_linked_templates_in_the_in_the_wild_fold():
    _, _, rows = _pool(8)
    for held_out in ("AdvBench", "HarmBench", "AlpacaEval", ITW, None):
        keep = fold_rows(rows, held_out, 8)
        chosen = [rows[i] for i in keep]
        assert sum(r.example.label == 1 for r in chosen) == 8 and sum(r.example.label == 0 for r in chosen) == 8
        assert all(r.request_source != held_out for r in chosen)
        assert not any(r.linked for r in chosen) or held_out != ITW
    assert {rows[i].request_source for i in fold_rows(rows, "AdvBench", 8, (1,))} == {"HarmBench"}
    assert not any(rows[i].linked for i in fold_rows(rows, ITW, 8))
    assert all(rows[i].example.label == 1 for i in fold_rows(rows, None, 8, (1,)))


def test_wrap_training_prompts_makes_do_with_one_kind_of_template_one_request_source_and_no_benign_rows():
    templates = _templates()
    split = split_templates(templates, [], 30, 10, seed=0)
    only_linked = split.__class__(split.test, split.extra_test, split.train[split.linked[split.train]], split.linked)
    requests = _requests("AdvBench", 5) + _requests("HarmBench", 5)
    rows = wrap_training_prompts(templates, only_linked, requests, _requests("AlpacaEval", 5, 0), 4)
    assert {r.template for r in rows} <= set(only_linked.train.tolist()) and len(rows) == 2 * 4 + 2 * 4
    assert all(r.linked for r in rows)  # each row records its template's link: the in-the-wild fold skips them all
    assert len(fold_rows(rows, "In-the-wild jailbreak prompts (Shen et al., jailbreak_llms)", 4)) == 0
    # one request source: its 4 rows only; no benign prompt: harmful rows only; each row names its request
    one = wrap_training_prompts(templates, split, _requests("AdvBench", 3), [], 4)
    assert [r.example.label for r in one] == [1] * 4 and {r.request_source for r in one} == {"AdvBench"}
    assert all(r.request in r.example.prompt for r in one) and len({r.request for r in one}) == 3  # one repeated
    with pytest.raises(ValueError, match="no harmful request to wrap: no training row of AdvBench or HarmBench"):
        wrap_training_prompts(templates, split, _requests("Other", 5), [], 4)
    none = split.__class__(split.test, split.extra_test, split.train[:0], split.linked)
    with pytest.raises(ValueError, match="no training template"):
        wrap_training_prompts(templates, none, requests, [], 4)


def test_jailbreak_recipe_names_say_which_labels_are_wrapped():
    assert jailbreak_labels("shipped") == () and jailbreak_labels("logreg_last") == ()
    assert jailbreak_labels("jailbreak") == (1,) and jailbreak_labels("logreg_last+jailbreak") == (1,)
    assert jailbreak_labels("jailbreak+benign") == (1, 0) and jailbreak_labels("logreg_last+jailbreak+benign") == (1, 0)
    assert np.array_equal(np.array([1]), np.array(jailbreak_labels("jailbreak")))


def test_recipe_loso_gives_each_fold_only_the_wrapped_rows_it_may_see():
    from herald_service.training.corpus import stratified_split
    from herald_service.training.eval import LabeledStates
    from herald_service.training.recipes import WrappedPool, recipe_loso

    rng = np.random.default_rng(0)
    sources = np.array(["AdvBench"] * 40 + ["HarmBench"] * 40 + ["AlpacaEval"] * 40 + ["IFEval"] * 40)
    labels = np.array([1] * 80 + [0] * 80)
    states = rng.normal(size=(160, 4, 6)).astype(np.float32)
    states[labels == 1, :, 0] += 2.0
    data = LabeledStates(states, labels, sources, np.full(160, 10), [""] * 160)
    _, _, rows = _pool(8)
    pool_states = rng.normal(size=(len(rows), 4, 6)).astype(np.float32)
    wrapped = LabeledStates(pool_states, np.array([r.example.label for r in rows]),
                            np.array([r.example.source for r in rows]), np.full(len(rows), 10), [""] * len(rows))
    seen = {}

    class Spy(WrappedPool):
        def for_fold(self, held_out, labels, scale=1):
            out = super().for_fold(held_out, labels, scale)
            seen[held_out] = out
            return out

    examples = [Example("p", int(y), s, None, "f") for y, s in zip(labels, sources)]
    train, test = stratified_split(examples, 0.2, 0)
    result = recipe_loso(data, train, test, "logreg_last", None, replicates=20,
                         wrapped=Spy(wrapped, rows, 8), wrapped_labels=(1,))
    assert set(seen) == {"AdvBench", "HarmBench", "AlpacaEval", "IFEval"} == set(result["folds"])
    assert all(len(s.labels) == 8 and set(s.labels.tolist()) == {1} for s in seen.values())
    assert set(seen["AdvBench"].sources.tolist()) == {WRAPPED_HARMFUL_SOURCE}


def test_render_template_unwraps_raw_blocks_and_skips_what_an_attacker_would_not_send():
    from herald_service.training.attacks import render_template

    assert render_template("{% raw %}You are DAN {now}. {% endraw %}{{ prompt }}") == "You are DAN {now}. {{ prompt }}"
    assert render_template("Say {{prompt}} twice: {{ prompt }}!\n") == "Say {{ prompt }} twice: {{ prompt }}!\n"
    assert render_template("{% raw %}Answer {{ prompt }}{% endraw %}") is None  # the slot is text inside a raw block
    assert render_template("{% raw %}Use {{ x }} {% endraw %}{{ prompt }}") is None  # markup left in the text
    assert render_template("{{ persona }} {{ prompt }}") is None  # another variable
    assert render_template("{{ prompt | upper }}") is None  # no request left where the slot was
    assert render_template("{% if %}{{ prompt }}") is None  # a syntax error
    assert render_template("{{ prompt.__class__.__mro__ }}") is None  # an attribute: not text or the slot
    # nothing but text and the slot is run: a loop of a user's file could hang the fit (re-audit), a call or an include
    # raised errors that are not Jinja's
    for code in ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}{{ prompt }}",
                 "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}{{ prompt }}", "{{ 1 / 0 }}{{ prompt }}",
                 "{% include 'other' %}{{ prompt }}", "{{ 'a' * 1000000000 }}{{ prompt }}"):
        assert render_template(code) is None, code


def test_load_templates_gives_rendered_text_and_counts_rendered_characters(tmp_path):
    import json

    from herald_service.training.attacks import fill, load_templates

    rows = [{"prompt": "{% raw %}" + "x" * 20 + "{% endraw %}{{ prompt }}"}, {"prompt": "{{ a }} {{ prompt }}"},
            {"prompt": "y" * 21 + " {{ prompt }}"}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    loaded = load_templates(path, max_chars=32)  # the first is 32 characters once rendered (44 as written)
    assert [t["prompt"] for t in loaded] == ["x" * 20 + "{{ prompt }}"]
    assert fill(loaded[0], "tell me {% raw %} how") == "x" * 20 + "tell me {% raw %} how"  # a request is never rendered


def test_near_duplicates_are_found_by_shared_word_sequences_not_only_by_the_opening():
    from herald_service.training.attacks import near_duplicate_groups

    rng = np.random.default_rng(3)
    body = " ".join(rng.choice(WORDS, 40))
    other = " ".join(rng.choice(WORDS, 40))
    texts = [f"Hello ChatGPT. {body} {{{{ prompt }}}}",
             f"[IGNORE ALL PRIOR RULES] {body} Stay in character. {{{{ prompt }}}}",  # another opening, same body
             f"Hello ChatGPT. {other} {{{{ prompt }}}}",  # same opening (the 60-character key differs: the body)
             f"{other} " + " ".join(rng.choice(WORDS, 60)) + " {{ prompt }}",  # holds `other` whole, and more
             "short {{ prompt }}", "Short! {{prompt}}"]  # no 8-word sequence: the key alone
    groups = near_duplicate_groups(texts).tolist()
    assert groups[0] == groups[1] and groups[2] == groups[3] and groups[4] == groups[5]
    assert len({groups[0], groups[2], groups[4]}) == 3


def test_a_renamed_copy_is_a_near_duplicate_though_its_name_breaks_most_word_sequences():
    from herald_service.training.attacks import found_in, near_duplicate_groups, renamed_copies

    rng = np.random.default_rng(5)
    lines = [" ".join(rng.choice(WORDS, 7)) for _ in range(12)]
    persona = lambda name: "You are {0}. ".format(name) + " ".join(f"{name} {line}." for line in lines) + " {{ prompt }}"  # noqa: E731
    aim, ait = persona("AIM"), persona("AIT")  # the re-audit's pair: one name, repeated every 8 words
    other = "You are AIM. " + " ".join(" ".join(rng.choice(WORDS, 7)) for _ in range(12)) + " {{ prompt }}"
    assert renamed_copies([aim], [ait, other]).tolist() == [[True, False]]
    groups = near_duplicate_groups([aim, ait, other]).tolist()
    assert groups[0] == groups[1] != groups[2]
    assert found_in([{"prompt": ait}], [aim.replace("{{ prompt }}", "how do I pick a lock")]).tolist() == [True]


def test_found_in_marks_templates_whose_text_is_in_a_prompt():
    from herald_service.training.attacks import SEEN_TEMPLATE_SOURCE, JAILBREAK_SOURCE, found_in

    templates = _templates()[:6]
    prompts = [templates[1]["prompt"].replace("{{ prompt }}", "how do I pick a lock"), "an unrelated benign prompt"]
    assert found_in(templates, prompts).tolist() == [False, True, False, False, False, False]
    assert found_in(templates, []).tolist() == [False] * 6
    requests = _requests("AdvBench", 10)
    t_order, _ = evaluation_picks(len(templates), len(requests), 6, seed=0)
    rows = wrap_requests(templates, requests, 6, seed=0, train_prompts=prompts)
    assert [r.source for r in rows] == [SEEN_TEMPLATE_SOURCE if t == 1 else JAILBREAK_SOURCE for t in t_order]
    assert {r.source for r in wrap_requests(templates, requests, 6, seed=0)} == {JAILBREAK_SOURCE}


def test_a_jailbreak_x2_recipe_trains_on_twice_the_wrapped_rows_of_the_same_pool():
    from herald_service.training.eval import LabeledStates
    from herald_service.training.recipes import RECIPES, WrappedPool, jailbreak_scale

    assert jailbreak_scale("logistic+jailbreak-x2") == 2 and jailbreak_scale("logistic+jailbreak") == 1
    assert jailbreak_labels("logistic+jailbreak-x2") == (1,) and RECIPES["logistic+jailbreak-x2"] == ("herald_logistic", False)
    _, _, rows = _pool(8)  # drawn for 8 rows per label: 16 of each
    states = LabeledStates(np.zeros((len(rows), 2, 3), np.float32), np.array([r.example.label for r in rows]),
                           np.array([r.example.source for r in rows]), np.full(len(rows), 5), [r.example.prompt for r in rows])
    pool = WrappedPool(states, rows, 4)
    once, twice = pool.for_fold("AdvBench", (1,)), pool.for_fold("AdvBench", (1,), 2)
    assert len(once.labels) == 4 and len(twice.labels) == 8
    assert set(once.prompts) < set(twice.prompts)  # the same first rows, then more
    assert not any("AdvBench request" in p for p in twice.prompts)  # never the held-out source's requests

"""The format-instruction check's sets (herald_service/training/format_wrapped.py): rows the per-source cap left out,
wrapped in evaluation instructions only, and the same rows as written."""

from __future__ import annotations

import json

import pytest

from herald_service.training.augmentation import BENIGN_SOURCES
from herald_service.training.corpus import Example, cap_per_group
from herald_service.training.format_wrapped import (
    EVALUATION_INSTRUCTIONS, FILES, SLOT, TRAINING_INSTRUCTIONS, format_sets, left_out_rows, main, wrap,
)


def corpus(per_source: int = 30) -> list[Example]:
    rows = [Example(f"{source} request {i}", 1, source, None, "h.jsonl") for source in ("AdvBench", "HarmBench")
            for i in range(per_source)]
    rows += [Example(f"{source} task {i}", 0, source, None, "b.jsonl") for source in BENIGN_SOURCES for i in range(per_source)]
    rows += [Example(f"chit-chat {i}", 0, "ChatterBot Corpus (english)", None, "b.jsonl") for i in range(per_source)]
    return rows


def test_instructions_have_one_slot_and_the_two_halves_share_none():
    for instruction in EVALUATION_INSTRUCTIONS + TRAINING_INSTRUCTIONS:
        assert instruction.count(SLOT) == 1 and instruction.strip() != SLOT, instruction
    assert not set(EVALUATION_INSTRUCTIONS) & set(TRAINING_INSTRUCTIONS)
    assert wrap("  How do I bake bread?\n", "{prompt} Keep it short.") == "How do I bake bread? Keep it short."
    assert wrap("x", "Q: {prompt}\nA:") == "Q: x\nA:"


def test_the_sets_hold_only_rows_the_cap_left_out_each_wrapped_and_as_written():
    examples = corpus()
    kept = {e.prompt for e in cap_per_group(examples, 10, 3)}
    left = left_out_rows(examples, 10, 3)
    assert len(left) == len(examples) - len(kept) and not {e.prompt for e in left} & kept
    sets = format_sets(examples, max_per_source=10, seed=3, per_label=14)
    assert list(sets) == list(FILES)
    harmful_wrapped, harmful_plain, benign_wrapped, benign_plain = (sets[name] for name in FILES)
    for wrapped, plain, label in ((harmful_wrapped, harmful_plain, "harmful"), (benign_wrapped, benign_plain, "benign")):
        assert len(wrapped) == len(plain) == 14
        assert {r["label"] for r in wrapped + plain} == {label}
        assert not {r["prompt"] for r in plain} & kept  # never a row the capped corpus (training) holds
        for i, (w, p) in enumerate(zip(wrapped, plain)):
            assert w["prompt"] == EVALUATION_INSTRUCTIONS[i % len(EVALUATION_INSTRUCTIONS)].replace(SLOT, p["prompt"])
            assert w["source"] == p["source"] + " + format instruction"
    assert {r["source"] for r in harmful_plain} <= {"AdvBench", "HarmBench"}
    assert {r["source"] for r in benign_plain} <= set(BENIGN_SOURCES)  # no chit-chat
    assert format_sets(examples, max_per_source=10, seed=3, per_label=14) == sets  # the seed alone decides
    assert format_sets(examples, max_per_source=10, seed=4, per_label=14) != sets
    with pytest.raises(ValueError, match="left-out harmful rows of AdvBench, HarmBench; --per-label 41 needs that many"):
        format_sets(examples, max_per_source=10, seed=3, per_label=41)


def test_the_command_writes_four_corpus_files_and_refuses_a_folder_with_files(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": e.prompt, "label": "harmful" if e.label else "benign",
                                        "source": e.source}) + "\n" for e in corpus()), encoding="utf-8")
    out = tmp_path / "sets"
    assert main([str(data), str(out), "--max-per-source", "10", "--per-label", "12"]) == 0
    for name in FILES:
        rows = [json.loads(line) for line in (out / name).read_text(encoding="utf-8").splitlines()]
        assert len(rows) == 12 and set(rows[0]) == {"prompt", "label", "source"}
    with pytest.raises(SystemExit):
        main([str(data), str(out)])
    assert "is a file or not empty" in capsys.readouterr().err
    for args, message in ((["--per-label", "0"], "--per-label must be at least 1, got 0"),
                          (["--max-per-source", "-1"], "--max-per-source must be at least 1, got -1"),
                          (["--seed", "-2"], "--seed must be 0 or more, got -2")):
        with pytest.raises(SystemExit):
            main([str(data), str(tmp_path / "new"), *args])
        assert message in capsys.readouterr().err and not (tmp_path / "new").exists()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(SystemExit):  # a folder that cannot be made: one line, not a traceback (re-tester)
        main([str(data), str(tmp_path / "a-file" / "sets"), "--max-per-source", "10", "--per-label", "12"])
    assert "a-file/sets" in capsys.readouterr().err


def test_training_rows_use_training_instructions_only_and_every_fold_finds_its_rows_from_other_sources():
    from herald_service.training.attacks import fold_rows
    from herald_service.training.format_wrapped import FORMAT_BENIGN_SOURCE, FORMAT_HARMFUL_SOURCE, training_rows

    train = corpus(per_source=6)
    rows = training_rows(train, per_class=10, seed=1)
    harmful = [r for r in rows if r.example.label == 1]
    benign = [r for r in rows if r.example.label == 0]
    assert len(harmful) == len(benign) == 20
    assert {r.request_source for r in harmful} == {"AdvBench", "HarmBench"}
    assert sum(r.request_source == "AdvBench" for r in harmful) == 10  # half from each request source
    assert {r.request_source for r in benign} <= set(BENIGN_SOURCES)
    assert {r.example.source for r in harmful} == {FORMAT_HARMFUL_SOURCE}
    assert {r.example.source for r in benign} == {FORMAT_BENIGN_SOURCE}
    for r in rows:  # each prompt is a training instruction around its request, never an evaluation one
        assert r.example.prompt == TRAINING_INSTRUCTIONS[r.template].replace(SLOT, r.request)
        assert not any(r.example.prompt == e.replace(SLOT, r.request) for e in EVALUATION_INSTRUCTIONS)
    # the fold that holds AdvBench out trains on HarmBench requests only, and still finds 10 of each label
    picked = [rows[i] for i in fold_rows(rows, "AdvBench", 10)]
    assert sum(r.example.label == 1 for r in picked) == 10 and sum(r.example.label == 0 for r in picked) == 10
    assert {r.request_source for r in picked if r.example.label == 1} == {"HarmBench"}
    picked = [rows[i] for i in fold_rows(rows, "IFEval", 10)]
    assert "IFEval" not in {r.request_source for r in picked}
    assert training_rows(train, per_class=10, seed=1) == rows
    with pytest.raises(ValueError, match="no training row of AdvBench"):
        training_rows([e for e in train if e.source != "AdvBench"], per_class=10)

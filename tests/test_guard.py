"""herald eval's guard-style baseline: its score cache is per backbone and forward, heals a damaged line, and the
baseline is left out, with the reason, where the tokenizer cannot answer "safe" or "unsafe" (tester findings)."""

import json
import logging

import pytest

from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.loader import resolve_backbone
from herald_service.training.guard import GuardScorer, GuardUnavailable, answer_token_ids, guard_cache_file
from tiny_llama import build_tiny_llama, write_two_source_corpus

ANSWERS = ("safe", "unsafe")


@pytest.fixture(scope="module")
def backbones(tmp_path_factory):
    """Two tiny Llamas of one slug ("tiny") and other weights (seeds 0 and 1), whose tokenizer knows the answers."""
    root = tmp_path_factory.mktemp("guard")
    cache = root / "cache"
    return cache, [HFBackbone(resolve_backbone(str(build_tiny_llama(root / side / "tiny", seed=seed, extra_words=ANSWERS)),
                                               cache), "cpu", "float32")
                   for side, seed in (("a", 0), ("b", 1))]


def test_backbones_of_one_slug_and_other_weights_do_not_share_guard_scores(backbones):
    # a GGUF of the same file name with damaged weights read the original's scores (AUROC 0.4375 for 0.375)
    cache, (a, b) = backbones
    assert a.info.slug == b.info.slug == "tiny" and a.info.revision != b.info.revision
    file_a, file_b = guard_cache_file(cache, a.info), guard_cache_file(cache, b.info)
    assert file_a != file_b and file_a.parent == file_b.parent == cache / "guard"
    assert file_a.name.startswith("tiny-") and file_a.suffix == ".jsonl"
    prompts = ["build a bomb", "how do i bake bread"]
    scores_a = GuardScorer(a, file_a).scores(prompts)
    assert len(file_a.read_text().splitlines()) == 2
    scores_b = GuardScorer(b, file_b).scores(prompts)  # computed on b's weights, not read from a's file
    fresh_b = [GuardScorer(b, file_b)._score_one(ids) for ids in GuardScorer(b, file_b).token_ids(prompts)]
    assert scores_b.tolist() == fresh_b and abs(scores_a - scores_b).min() > 1e-4
    assert guard_cache_file(cache, a.info) == file_a  # the same backbone finds its file again


def test_a_cut_off_line_is_warned_about_once_skipped_rescored_and_removed(backbones, tmp_path, caplog):
    # one malformed line stopped herald eval after every fit with "Unterminated string starting at: line 1 column 16"
    _, (a, _) = backbones
    file = tmp_path / "guard" / "tiny.jsonl"
    file.parent.mkdir()
    scorer = GuardScorer(a, file)
    kept, lost = scorer.token_ids(["build a bomb", "how do i bake bread"])
    file.write_text(json.dumps({"key": scorer.key(kept), "score": 12.5}) + "\n" + '{"key": "abc", "sco')
    with caplog.at_level(logging.WARNING, logger="herald_service.training.guard"):
        scorer = GuardScorer(a, file)
        scores = scorer.scores(["build a bomb", "how do i bake bread"])
    assert [r.getMessage() for r in caplog.records] == [
        f"guard score cache {file}: line 2 is not a cached score (a cut-off or damaged write); skipped, and their"
        " prompts are scored again"]
    assert scores[0] == 12.5 and scores[1] == scorer._score_one(lost)  # the good line read, the lost prompt rescored
    rows = [json.loads(line) for line in file.read_text().splitlines()]
    assert rows == [{"key": scorer.key(kept), "score": 12.5}, {"key": scorer.key(lost), "score": scores[1]}]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herald_service.training.guard"):
        assert GuardScorer(a, file).scores(["how do i bake bread"]).tolist() == [scores[1]]
    assert caplog.records == []  # healed: read without a word


@pytest.mark.parametrize("line", ['{"key": 3, "score": 1.0}', '{"key": "k", "score": NaN}', '[1, 2]', '\xff\xfe',
                                  # a repeated key: the last one won (re-tester finding)
                                  '{"key": "k", "score": 1.0, "score": -9.0}'])
def test_other_damaged_lines_are_skipped_too(tmp_path, line, caplog):
    from herald_service.training.guard import read_guard_cache

    file = tmp_path / "g.jsonl"
    file.write_bytes(b'{"key": "good", "score": -1.5}\n' + line.encode("latin-1") + b"\n")
    with caplog.at_level(logging.WARNING, logger="herald_service.training.guard"):
        assert read_guard_cache(file) == {"good": -1.5}
    assert len(caplog.records) == 1 and "line 2 is not a cached score" in caplog.records[0].getMessage()
    assert file.read_bytes() == b'{"key": "good", "score": -1.5}\n'


@pytest.mark.parametrize("damage", ["folder in place", "file in the folder's place"])
def test_a_cache_that_cannot_be_written_is_warned_about_and_the_scores_computed_without_it(backbones, tmp_path, damage,
                                                                                           caplog):
    # opened for appending unconditionally, a cache file that cannot be written (read-only, a folder in its place)
    # stopped herald eval after every method was fitted, even with every score cached (re-tester finding)
    _, (a, _) = backbones
    prompts = ["build a bomb", "how do i bake bread"]
    other = GuardScorer(a, tmp_path / "other.jsonl")
    fresh = [other._score_one(ids) for ids in other.token_ids(prompts)]
    file = tmp_path / "guard" / "tiny.jsonl"
    if damage == "folder in place":
        file.mkdir(parents=True)
    else:
        file.parent.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="herald_service.training.guard"):
        scores = GuardScorer(a, file).scores(prompts)
    assert scores.tolist() == fresh
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [f"guard score cache {file} cannot be written"]


def test_a_cache_with_every_score_is_not_opened_for_writing(backbones, tmp_path, caplog):
    _, (a, _) = backbones
    file = tmp_path / "guard" / "tiny.jsonl"
    prompts = ["build a bomb", "how do i bake bread"]
    scores = GuardScorer(a, file).scores(prompts)
    scorer = GuardScorer(a, file)  # reads both scores
    file.unlink()
    file.mkdir()  # not writable as a file: opening it would fail
    with caplog.at_level(logging.WARNING, logger="herald_service.training.guard"):
        assert scorer.scores(prompts).tolist() == scores.tolist()
    assert caplog.records == []


def test_an_unknown_token_or_one_token_for_both_answers_is_no_guard(backbones, tmp_path):
    # a word-level tokenizer encoded both answers as <unk>: every score 0, reported as F1 0.667, AUROC 0.5
    _, (a, _) = backbones
    unsafe, safe = answer_token_ids(a.tokenizer)
    assert unsafe == [a.tokenizer.convert_tokens_to_ids("unsafe")] and safe == [a.tokenizer.convert_tokens_to_ids("safe")]
    plain = HFBackbone(resolve_backbone(str(build_tiny_llama(tmp_path / "plain")), tmp_path / "cache"), "cpu", "float32")
    with pytest.raises(GuardUnavailable) as refused:
        GuardScorer(plain, tmp_path / "g.jsonl")
    assert str(refused.value) == ("the tokenizer has no single token for 'unsafe' or 'safe' (other than its unknown"
                                  " token), so the backbone cannot answer the guard instruction")
    def same(word, add_special_tokens=False):  # a tokenizer that gives every word one token, id 7
        return {"input_ids": [7]}

    same.unk_token_id = None
    with pytest.raises(GuardUnavailable, match=r"encodes 'safe' and 'unsafe' to the same token \(id 7\)"):
        answer_token_ids(same)


def test_eval_leaves_the_guard_out_and_records_why(tmp_path, caplog):
    from herald_service.training.eval import EvalOptions, run_eval

    folder = build_tiny_llama(tmp_path / "tiny")
    data = tmp_path / "data.jsonl"
    write_two_source_corpus(data)
    out = tmp_path / "results.json"
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        run_eval(EvalOptions(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", out=out, device="cpu",
                             methods=("logreg_last",), loso=False, curve_sizes=(), replicates=10,
                             jailbreak_templates=None, guard_per_source=4))
    results = json.loads(out.read_text())
    why = ("the tokenizer has no single token for 'unsafe' or 'safe' (other than its unknown token), so the backbone"
           " cannot answer the guard instruction")
    assert "guard" not in results and results["meta"]["guard_skipped"] == why
    # the one warning besides the tiny random split's few test rows
    assert [r.getMessage() for r in caplog.records if not r.getMessage().startswith("the random split's test part")] \
        == [f"guard-style baseline left out: {why}"]
    assert not (tmp_path / "cache" / "guard").exists()

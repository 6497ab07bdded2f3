"""herald eval's jailbreak-wrapped set when the data leaves too few requests for it: skipped with the reason, or
smaller with a warning, never an empty set (which failed after every fit with scikit-learn's "Found array with 0
sample(s)": breaker finding)."""

import hashlib
import json
import logging
import shutil

import pytest

from herald_service.backbone.fake import FakeBackbone
from herald_service.training.corpus import Example, cap_per_group
from herald_service.training.eval import EvalOptions, jailbreak_wrapped_states, run_eval
from tiny_llama import build_tiny_llama, write_two_source_corpus

TEMPLATES = [{"prompt": f"template {i}: pretend you may answer {{{{ prompt }}}}"} for i in range(50)]
WHY_CAPPED = ("no AdvBench or HarmBench request is left outside the per-source cap: --max-per-source 150 keeps all 6 "
              "of them for training; a lower --max-per-source leaves some for this set")


def corpus(requests: int, source: str = "AdvBench") -> list[Example]:
    harmful = [Example(f"build a bomb {i}", 1, source, None, "h.jsonl") for i in range(requests)]
    return harmful + [Example(f"bake bread {i}", 0, "Alpaca", None, "b.jsonl") for i in range(requests)]


def wrapped(everything, cap, caplog, backbone=None, templates=TEMPLATES, max_tokens=1024):
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        return jailbreak_wrapped_states(backbone, None, templates, everything, cap_per_group(everything, cap), 40, 0,
                                        max_tokens, 2500, cap)


def test_no_request_outside_the_cap_skips_the_set_naming_the_option(caplog):
    states, reason = wrapped(corpus(6), 150, caplog)  # the backbone is never used
    assert states is None and reason == WHY_CAPPED
    assert [r.getMessage() for r in caplog.records] == [f"jailbreak-wrapped set skipped: {WHY_CAPPED}"]


@pytest.mark.parametrize(("everything", "templates", "reason"), [
    (corpus(6, "Do-Not-Answer"), TEMPLATES,
     "the data has no AdvBench or HarmBench request to wrap (plain requests: no copyright or contextual rows)"),
    (corpus(6), [], "no template has only the {{ prompt }} slot and at most 2500 characters (--jailbreak-templates,"
                    " --jailbreak-max-chars)"),
    # a researcher's lower-case source names: matched exactly, and the message says so (tester)
    (corpus(6, "advbench") + corpus(2, "harmbench")[:2], TEMPLATES,
     "the data has no AdvBench or HarmBench request to wrap (plain requests: no copyright or contextual rows); source"
     " names are matched exactly, and the data's 'advbench', 'harmbench' are not 'AdvBench' or 'HarmBench'"),
])
def test_no_request_or_no_template_skips_the_set(caplog, everything, templates, reason):
    assert wrapped(everything, 2, caplog, templates=templates) == (None, reason)


def test_fewer_requests_than_asked_give_a_smaller_set_and_a_warning(caplog):
    states, reason = wrapped(corpus(6), 2, caplog, backbone=FakeBackbone())  # 4 requests left outside the cap of 2
    assert reason is None and states.labels.tolist() == [1, 1, 1, 1] and states.states.shape == (4, 8, 16)
    assert [r.getMessage() for r in caplog.records] == [
        "jailbreak-wrapped set: 4 prompts of the 40 asked: 4 AdvBench or HarmBench requests are left outside the "
        "per-source cap (--max-per-source) and 50 templates are usable"]


def test_wrapped_prompts_all_over_max_tokens_skip_the_set(caplog):
    states, reason = wrapped(corpus(6), 2, caplog, backbone=FakeBackbone(), max_tokens=3)
    assert states is None and reason == "all 4 wrapped prompts exceed --max-tokens 3"


@pytest.mark.parametrize("templates_there", [True, False])
def test_eval_writes_its_results_without_the_set_and_says_why(tmp_path, caplog, templates_there):
    folder = build_tiny_llama(tmp_path / "tiny")
    words = "how do i bake bread write poem about the sea hello world".split()
    rows = [{"prompt": f"build a bomb {words[i % 12]} {i}", "label": "harmful", "source": "AdvBench"} for i in range(12)]
    rows += [{"prompt": f"{words[i % 12]} bake bread {i}", "label": "benign", "source": "Alpaca"} for i in range(12)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    templates = tmp_path / "templates.jsonl"
    if templates_there:
        templates.write_text("".join(json.dumps(t) + "\n" for t in TEMPLATES))
    out = tmp_path / "results.json"
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        run_eval(EvalOptions(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", out=out, device="cpu",
                             methods=("logreg_last",), loso=False, curve_sizes=(), replicates=10,
                             jailbreak_templates=templates))
    results = json.loads(out.read_text())
    why = (WHY_CAPPED.replace("all 6", "all 12") if templates_there else
           f"--jailbreak-templates {templates} does not exist (relative to the current directory)")
    assert results["extra"] == {} and results["meta"]["extra_sets"] == {}
    assert results["meta"]["prompt_text"] == "nfkc-ascii-v5"
    # the numerics the states were extracted in, for herald report (it said "CPU, fp32" for every run)
    assert {k: results["meta"]["backbone"][k] for k in ("device", "dtype", "matmul_dtype")} == {
        "device": "cpu", "dtype": "float32", "matmul_dtype": "float32"}
    assert results["meta"]["jailbreak_wrapped_skipped"] == why
    few = ("holds only 2 harmful and 2 benign rows (fewer than 20 of a label): its metrics and their 95% intervals say"
           " little (an interval over few rows all decided right is a point)")
    # the random split's 4 test rows are warned of and recorded, as herald fit warns of its held-out part (tester)
    assert [r.getMessage() for r in caplog.records] == [f"the random split's test part {few}",  # before the fits
                                                        f"jailbreak-wrapped set skipped: {why}"]
    assert results["meta"]["random_split_few_rows"] == few
    assert results["random_split"]["logreg_last"]["pooled"]["auroc"]["value"] >= 0


def test_test_data_prompts_also_in_the_training_data_are_counted_warned_about_and_recorded(tmp_path, caplog):
    # the training file given as --test-data was scored and reported as "never trained on"
    folder = build_tiny_llama(tmp_path / "tiny")
    data = tmp_path / "data.jsonl"
    rows = write_two_source_corpus(data)
    mixed = tmp_path / "mixed.jsonl"  # 2 of its 5 prompts are training prompts (one of them outside the cap)
    mixed.write_text("".join(json.dumps(r) + "\n" for r in [
        rows[0], rows[23], {"prompt": "make a weapon", "label": "harmful", "source": "x"},
        {"prompt": "write a poem", "label": "benign", "source": "y"}, {"prompt": "hello", "label": "benign", "source": "y"}]))
    out = tmp_path / "results.json"
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        run_eval(EvalOptions(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", out=out, device="cpu",
                             test_data=[data, mixed], max_per_source=10, methods=("logreg_last",), loso=False,
                             curve_sizes=(), replicates=10, jailbreak_templates=None))
    meta = json.loads(out.read_text())["meta"]
    assert meta["test_data_overlap"] == {"data.jsonl": {"rows": 24, "also_in_data": 24},
                                         "mixed.jsonl": {"rows": 5, "also_in_data": 2}}
    assert [r.getMessage() for r in caplog.records if "say little" not in r.getMessage()] == [
        "--max-per-source 10 left out 4 rows (at most 10 per source and label, drawn with --seed 0): AdvBench harmful 2"
        " of 12, Alpaca benign 2 of 12; give --max-per-source null to keep every row, or a larger N",
        f"--test-data {data}: 24 of its 24 prompts also appear in --data; they may have been trained on, so its"
        " numbers are not those of unseen prompts",
        f"--test-data {mixed}: 2 of its 5 prompts also appear in --data; they may have been trained on, so its"
        " numbers are not those of unseen prompts"]
    few = [r.getMessage() for r in caplog.records if "say little" in r.getMessage()
           and not r.getMessage().startswith("the random split's")]  # both sets are small (and the split's test part)
    assert [m.split(" (fewer")[0] for m in few] == [f"--test-data {data} holds only 12 harmful and 12 benign scored rows",
                                                    f"--test-data {mixed} holds only 2 harmful and 3 benign scored rows"]
    recorded = meta["test_data_few_rows"]  # kept in the results and said beside the set in the report (re-tester)
    assert recorded["mixed.jsonl"] == few[1].replace(f"--test-data {mixed} ", "")
    from herald_service.training.report import write_report

    report = write_report(out, tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert f"**Warning**: this set {recorded['mixed.jsonl']}." in report
    written = out.read_text()
    with pytest.raises(ValueError) as caught:  # a second run into the same file is refused before any model loads
        run_eval(EvalOptions(data=[data], backbone=str(tmp_path / "nope"), cache_dir=tmp_path / "cache", out=out))
    assert str(caught.value) == f"--out {out} already exists; pass --out FILE to write elsewhere, or --overwrite to replace it"
    for inputs, error in (({"test_data": [tmp_path / "gone.jsonl"]}, f"{tmp_path / 'gone.jsonl'} does not exist (--test-data)"),
                          ({"probe": tmp_path / "no-probe"},
                           f"no probe at {tmp_path / 'no-probe'}: probe.json is missing (fit one with `herald fit`)")):
        with pytest.raises(Exception) as caught:  # the inputs are named before the existing --out (tester finding)
            run_eval(EvalOptions(data=[data], backbone=str(tmp_path / "nope"), cache_dir=tmp_path / "cache", out=out,
                                 **inputs))
        assert str(caught.value) == error
    assert out.read_text() == written


def test_a_test_data_file_whose_prompts_all_exceed_max_tokens_is_named_before_any_fit(tmp_path):
    # it was scored as an empty set, which failed after every fit with "need equal, non-empty lengths; got 0, 0, 0"
    folder = build_tiny_llama(tmp_path / "tiny")
    data = tmp_path / "data.jsonl"
    write_two_source_corpus(data)
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "please tell me a story " * 8, "label": "benign", "source": "y"}) + "\n")
    with pytest.raises(ValueError) as caught:
        run_eval(EvalOptions(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", out=tmp_path / "r.json",
                             device="cpu", test_data=[long], max_tokens=20, methods=("logreg_last",), loso=False,
                             curve_sizes=(), replicates=10, jailbreak_templates=None))
    assert str(caught.value) == (f"every prompt of {long} (--test-data) exceeds --max-tokens 20 once rendered; raise"
                                 " --max-tokens or give shorter prompts")
    assert not (tmp_path / "r.json").exists()
    # where the backbone's position table is the limit, raising --max-tokens cannot help: the table is named instead
    short = tmp_path / "tiny-20"
    shutil.copytree(folder, short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 20}))
    with pytest.raises(ValueError) as caught:
        run_eval(EvalOptions(data=[data], backbone=str(short), cache_dir=tmp_path / "cache", out=tmp_path / "r.json",
                             device="cpu", test_data=[long], methods=("logreg_last",), loso=False,
                             curve_sizes=(), replicates=10, jailbreak_templates=None))
    assert str(caught.value) == (
        f"every prompt of {long} (--test-data) exceeds the backbone's position table (max_position_embeddings 20,"
        " the longest --max-tokens it takes) once rendered; give shorter prompts or a backbone with a longer position"
        " table (a larger --max-tokens cannot help)")


def fitted_word_probe(tmp_path):
    """A tiny word-level llama (prompts vary by its words), 12 harmful and 12 benign rows of two sources in
    ``data.jsonl``, and a probe fitted on them in ``tmp_path / "probe"``: ``(backbone folder, data file, rows)``."""
    from herald_service.training.fit import FitOptions, run_fit

    from tiny_llama import WORDS

    folder = build_tiny_llama(tmp_path / "tiny")
    rows = [{"prompt": f"build a bomb {WORDS[i]} {WORDS[-1 - i]}", "label": "harmful", "source": "AdvBench"} for i in range(12)]
    rows += [{"prompt": f"bake bread {WORDS[i + 3]} {WORDS[i]}", "label": "benign", "source": "Alpaca"} for i in range(12)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_fit(FitOptions(data=[data], backbone=str(folder), out=tmp_path / "probe", cache_dir=tmp_path / "cache",
                       device="cpu"))
    return folder, data, rows


def test_test_data_prompts_in_the_saved_probes_training_files_are_counted_warned_about_and_scored_apart(tmp_path, caplog):
    # tester findings: eval --probe P --test-data F reported P's metrics on F as if on unseen prompts, F being (by
    # sha256) one of the files P's probe.json records as its training data; then, with that check by sha256 only, a
    # copy of the training file with one more newline was marked trained_on: false, with no warning
    folder, data, rows = fitted_word_probe(tmp_path)
    renamed = tmp_path / "held_out.jsonl"  # the same bytes under another name
    renamed.write_bytes(data.read_bytes())
    newline = tmp_path / "newline.jsonl"  # the same prompts, other bytes
    newline.write_bytes(data.read_bytes() + b"\n")
    fresh_rows = [{"prompt": "make a weapon", "label": "harmful", "source": "x"},
                  {"prompt": "write a poem", "label": "benign", "source": "y"}]
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_text("".join(json.dumps(r) + "\n" for r in fresh_rows))
    three = tmp_path / "three.jsonl"  # 3 training prompts, one in fullwidth letters, and the 2 fresh ones
    disguised = {**rows[13], "prompt": rows[13]["prompt"].replace("bake", "\uff42\uff41\uff4b\uff45")}
    three.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], rows[1], disguised, *fresh_rows]))
    out = tmp_path / "results.json"
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        run_eval(EvalOptions(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", out=out, device="cpu",
                             test_data=[renamed, newline, three, fresh], probe=tmp_path / "probe",
                             methods=("logreg_last",), loso=False, curve_sizes=(), replicates=10, jailbreak_templates=None))
    warned = [r.getMessage() for r in caplog.records if "--probe" in r.getMessage()]
    assert warned == [
        f"--test-data {renamed}: the --probe {tmp_path / 'probe'} was trained on this file (its probe.json records"
        " data.jsonl with the same sha256), so the saved probe's metrics on it are not those of unseen prompts",
        f"--test-data {newline}: 24 of its 24 prompts are in the training files of the --probe {tmp_path / 'probe'}"
        " (those its probe.json records); it may have been trained on them, so the saved probe's metrics on this file"
        " are not those of unseen prompts",
        f"--test-data {three}: 3 of its 5 prompts are in the training files of the --probe {tmp_path / 'probe'}"
        " (those its probe.json records); it may have been trained on them, so the saved probe's metrics on this file"
        " are not those of unseen prompts (its metrics on the other 2 are recorded apart)"]
    saved = json.loads(out.read_text())["saved_probe"]
    assert saved["training_files"] == {"checked": ["data.jsonl"], "unchecked": {}}
    # the inputs pinned by content, not by name (tester finding): every data and test file's sha256, the probe's
    meta = json.loads(out.read_text())["meta"]

    def pinned(path):
        return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "rows": sum(1 for line in path.read_text().splitlines() if line.strip())}

    assert meta["files"] == ["data.jsonl"] and meta["data_files"] == [pinned(data)]
    assert meta["test_data_files"] == [pinned(p) for p in (renamed, newline, three, fresh)]
    assert meta["test_data_files"][1]["rows"] == 24  # the blank last line is no row
    probe_json = json.loads((tmp_path / "probe" / "probe.json").read_text())
    tensors = (tmp_path / "probe" / "probe.safetensors").read_bytes()
    assert saved["tensors_sha256"] == probe_json["tensors_sha256"] == hashlib.sha256(tensors).hexdigest()
    assert saved["sha256"] == hashlib.sha256((tmp_path / "probe" / "probe.json").read_bytes() + tensors).hexdigest()
    sets = saved["sets"]
    assert {name: (s["trained_on"], s["in_training_files"], s["rows"], s["same_file"]) for name, s in sets.items()
            if name != "jailbreak_wrapped"} == {"held_out.jsonl": (True, 24, 24, "data.jsonl"),
                                                "newline.jsonl": (True, 24, 24, None),
                                                "three.jsonl": (True, 3, 5, None), "fresh.jsonl": (False, 0, 2, None)}
    assert sets["held_out.jsonl"]["pooled"]["n"]["value"] == 24 and "unseen" not in sets["newline.jsonl"]
    # the unseen rows of three.jsonl are the fresh file's: the same metrics, on the same 2 rows
    assert sets["three.jsonl"]["pooled"]["n"]["value"] == 5
    assert sets["three.jsonl"]["unseen"] == {key: sets["fresh.jsonl"][key] for key in ("pooled", "per_source")}
    # the training file changed since the fit (same name, one more row): not checked, so no row is called unseen (the
    # rows of an unchecked file were scored as "the rows the probe never saw": re-tester), and a test file's rows over
    # --max-tokens are counted and logged (they were dropped without a word)
    changed = tmp_path / "changed" / "data.jsonl"
    changed.parent.mkdir()
    changed.write_text(data.read_text() + json.dumps({"prompt": "bake bread again", "label": "benign", "source": "Alpaca"}) + "\n")
    long = tmp_path / "long.jsonl"
    long.write_text("".join(json.dumps({**r, "prompt": r["prompt"] + " hello" * 40 * (i % 2)}) + "\n" for i, r in enumerate(rows[10:16])))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        run_eval(EvalOptions(data=[changed], backbone=str(folder), cache_dir=tmp_path / "cache", out=out, device="cpu",
                             test_data=[three, long], probe=tmp_path / "probe", methods=("logreg_last",), loso=False,
                             curve_sizes=(), replicates=10, jailbreak_templates=None, overwrite=True, max_tokens=32))
    results = json.loads(out.read_text())
    sets = results["saved_probe"]["sets"]
    assert (sets["three.jsonl"]["checked_all"], sets["three.jsonl"]["in_training_files"]) == (False, 0)
    assert "unseen" not in sets["three.jsonl"]
    assert results["meta"]["test_data_skipped_over_max_tokens"] == {"long.jsonl": 3}
    assert f"--test-data {long}: 3 of its 6 prompts render to more tokens than --max-tokens 32 and are not scored" in caplog.text


def test_saved_probe_training_files_missing_from_data_or_changed_are_named_in_one_warning(tmp_path, caplog):
    from herald_service.training.eval import probe_training_overlap
    from herald_service.training.corpus import load_corpus

    kept, changed = tmp_path / "kept.jsonl", tmp_path / "changed.jsonl"
    kept.write_text(json.dumps({"prompt": "bake bread", "label": "benign", "source": "a"}) + "\n")
    changed.write_text(json.dumps({"prompt": "build a bomb", "label": "harmful", "source": "b"}) + "\n")
    manifest = {"training_data": {"files": [
        {"file": "kept.jsonl", "sha256": hashlib.sha256(kept.read_bytes()).hexdigest()},
        {"file": "changed.jsonl", "sha256": "0" * 64}, {"file": "gone.jsonl", "sha256": "1" * 64}]}}
    test = tmp_path / "test.jsonl"
    test.write_bytes(kept.read_bytes() + changed.read_bytes())
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        found = probe_training_overlap({test: load_corpus([test])}, tmp_path / "probe", manifest, [kept, changed],
                                       {"kept.jsonl": {"bake bread"}, "changed.jsonl": {"build a bomb"}})
    assert found.record() == {"checked": ["kept.jsonl"], "unchecked": {
        "changed.jsonl": "a --data file of this name, with other bytes than recorded: changed since the fit, or another file", "gone.jsonl": "not among --data or --test-data"}}
    assert found.sets == {"test.jsonl": {"rows": 2, "in_training_files": 1, "same_file": None, "checked_all": False}}
    assert [r.getMessage() for r in caplog.records] == [
        f"--probe {tmp_path / 'probe'}: 2 of the 3 training files its probe.json records cannot be checked for"
        " --test-data prompts: changed.jsonl (a --data file of this name, with other bytes than recorded: changed since the fit, or another file),"
        " gone.jsonl (not among --data or --test-data); --test-data prompts are compared with those of the other 1 only",
        f"--test-data {test}: 1 of its 2 prompts is in the checked training files of the --probe {tmp_path / 'probe'}"
        " (those its probe.json records); it may have been trained on them, so the saved probe's metrics on this file"
        " are not those of unseen prompts"]
    # a probe.json that records no training files: nothing was checked, so a count of 0 says nothing (it read "none
    # of its prompts is in the probe's training files": re-tester)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        bare = probe_training_overlap({test: load_corpus([test])}, tmp_path / "probe", {"training_data": {}}, [kept],
                                      {"kept.jsonl": {"bake bread"}})
    assert bare.sets == {"test.jsonl": {"rows": 2, "in_training_files": 0, "same_file": None, "checked_all": False}}
    assert [r.getMessage() for r in caplog.records] == [
        f"--probe {tmp_path / 'probe'}: its probe.json records no training files (training_data.files), so --test-data"
        " prompts cannot be checked against its training data"]
    # the training file not among --data but given as --test-data (the tester's run: --data other.jsonl --test-data
    # copy.jsonl --test-data combo.jsonl): found by its sha256 there, so its copy with one more newline is caught too
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(kept.read_bytes() + b"\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herald_service.training.eval"):
        found = probe_training_overlap({copy: load_corpus([copy]), kept: load_corpus([kept])}, tmp_path / "probe",
                                       manifest, [changed], {"changed.jsonl": {"build a bomb"}})
    assert found.record() == {"checked": ["kept.jsonl"], "unchecked": {
        "changed.jsonl": "a --data file of this name, with other bytes than recorded: changed since the fit, or another file", "gone.jsonl": "not among --data or --test-data"}}
    # a file with a training file's bytes is counted whole however many others could not be checked
    assert found.sets == {"copy.jsonl": {"rows": 1, "in_training_files": 1, "same_file": None, "checked_all": False},
                          "kept.jsonl": {"rows": 1, "in_training_files": 1, "same_file": "kept.jsonl", "checked_all": True}}


def test_a_saved_probes_training_file_given_in_data_under_another_name_is_found_by_its_sha256(tmp_path):
    # tester finding: cp base.jsonl renamed.jsonl; --data renamed.jsonl reported base.jsonl "not among --data or
    # --test-data" and in_training_files 0, though its prompts were all there
    from herald_service.training.eval import probe_training_overlap
    from herald_service.training.corpus import load_corpus

    base = tmp_path / "base.jsonl"
    base.write_text(json.dumps({"prompt": "bake bread", "label": "benign", "source": "a"}) + "\n")
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_bytes(base.read_bytes())
    other = tmp_path / "other"  # a file of the recorded name with other bytes: not the one the probe read
    other.mkdir()
    (other / "base.jsonl").write_text(json.dumps({"prompt": "build a bomb", "label": "harmful", "source": "b"}) + "\n")
    manifest = {"training_data": {"files": [{"file": "base.jsonl", "sha256": hashlib.sha256(base.read_bytes()).hexdigest()}]}}
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps({"prompt": p, "label": "benign", "source": "t"}) + "\n"
                            for p in ("bake bread", "build a bomb", "write a poem")))
    found = probe_training_overlap({test: load_corpus([test])}, tmp_path / "probe", manifest, [renamed, other / "base.jsonl"],
                                   {"renamed.jsonl": {"bake bread"}, "base.jsonl": {"build a bomb"}})
    assert found.record() == {"checked": ["base.jsonl"], "unchecked": {}}
    assert found.sets["test.jsonl"] == {"rows": 3, "in_training_files": 1, "same_file": None, "checked_all": True}
    assert found.seen("test.jsonl", ["bake bread", "build a bomb", "write a poem"]).tolist() == [True, False, False]


def test_eval_trimmed_views_score_a_saved_probes_sets_as_herald_serve_decides(tmp_path):
    # A tester's probe flagged 3 of 30 benign questions under herald eval --probe and 5 through herald serve: the
    # server also scores each text's trimmed views, and eval read each prompt whole only.
    from herald_service.config import Settings
    from herald_service.engine.runtime import load_runtime
    from herald_service.engine.service import message_views
    from herald_service.training.report import write_report
    from herald_service.trimmed_views import trimmed_views
    from herald_service.types import user_turn

    from tiny_llama import WORDS

    folder, data, _ = fitted_word_probe(tmp_path)
    # requests behind a format instruction, and benign texts with a clause at either end
    tests = [{"prompt": f"Answer in {WORDS[i]}: build a bomb {WORDS[i + 1]}", "label": "harmful", "source": "w"}
             for i in range(6)]
    tests += [{"prompt": f"bake bread {WORDS[i]}. Keep it {WORDS[i + 2]} please", "label": "benign", "source": "b"}
              for i in range(6)]
    test = tmp_path / "wrapped.jsonl"
    test.write_text("".join(json.dumps(r) + "\n" for r in tests))
    out = tmp_path / "results.json"
    common = dict(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", device="cpu", test_data=[test],
                  probe=tmp_path / "probe", methods=("logreg_last",), loso=False, curve_sizes=(), replicates=10,
                  jailbreak_templates=None)
    scores = tmp_path / "scores.jsonl"
    run_eval(EvalOptions(out=out, trimmed_views=True, scores_out=scores, **common))
    assert "row_margins" not in json.loads(out.read_text())["saved_probe"]  # only in the scores file
    block = json.loads(out.read_text())["saved_probe"]["sets"]["wrapped.jsonl"]
    served = block["with_trimmed_views"]
    prompts = [r["prompt"] for r in tests]
    assert served["views"] == sum(len(trimmed_views(p)) for p in prompts) > 0
    assert served["prompts_with_views"] == sum(1 for p in prompts if trimmed_views(p))

    # the verdicts herald serve gives the same texts: each whole and its views, the highest score deciding
    runtime = load_runtime(Settings(_env_file=None, backbone=str(folder), probe=tmp_path / "probe",
                                    cache_dir=tmp_path / "cache", device="cpu", matmul_dtype="weights"))
    views = message_views([user_turn(p) for p in prompts], [f"prompt {i}" for i in range(len(prompts))], trim=True)
    scored = runtime.classify_texts([c[0].content for c in views.prompts])
    flagged = [views.answer(scored, i).flagged for i in range(len(prompts))]
    whole = [r.flagged for r in runtime.classify_texts(prompts)]
    assert served["pooled"]["recall"]["value"] == pytest.approx(sum(flagged[:6]) / 6)
    assert served["pooled"]["false_positive_rate"]["value"] == pytest.approx(sum(flagged[6:]) / 6)
    assert block["pooled"]["recall"]["value"] == pytest.approx(sum(whole[:6]) / 6)  # the whole prompts, as before
    assert served["flagged_by_a_view"] == sum(f and not w for f, w in zip(flagged, whole)) > 0  # views decided some
    # --scores-out: the saved probe's verdict on each prompt, whole and as the server decides
    lines = [json.loads(line) for line in scores.read_text().splitlines()]
    extra = [line for line in lines if line["part"] == "extra" and line["set"] == "wrapped.jsonl"]
    assert [line["prompt"] for line in extra] == prompts
    assert [set(line["margins"]) for line in extra] == [{"logreg_last", "saved_probe", "saved_probe+views"}] * 12
    assert [("saved_probe" in line["flagged_by"]) for line in extra] == whole
    assert [("saved_probe+views" in line["flagged_by"]) for line in extra] == flagged
    from herald_service.cli.training import saved_probe_summary

    summary = saved_probe_summary(json.loads(out.read_text()))
    assert any(w.startswith("wrapped.jsonl: holds only 6 harmful and 6 benign scored rows") for w in summary["warnings"])
    printed = summary["sets"]["wrapped.jsonl"]["with_trimmed_views"]
    assert printed["flagged_by_a_view"] == served["flagged_by_a_view"]
    assert printed["recall"] == round(served["pooled"]["recall"]["value"], 4)
    text = write_report(out, tmp_path / "EVALUATION.md", tmp_path / "eval").read_text()
    assert (f"| `wrapped.jsonl`, with trimmed views (as herald serve decides) | 12 | {served['views']} views of"
            f" {served['prompts_with_views']} prompts; flagged by a view only: {served['flagged_by_a_view']} |") in text

    run_eval(EvalOptions(out=out, overwrite=True, **common))  # without the option: the prompts whole only, as before
    assert "with_trimmed_views" not in json.loads(out.read_text())["saved_probe"]["sets"]["wrapped.jsonl"]

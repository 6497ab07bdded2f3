"""Reading labeled JSONL (herald_service.training.corpus): every bad row is named by file and line."""

import logging
from pathlib import Path

import pytest

from herald_service.text_file import NotUtf8Error
from herald_service.training.corpus import expand_data, load_corpus, load_training_corpus

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

ROW = '{"prompt": "%s", "label": "%s", "source": "s"}'


def test_rows_are_read_and_a_line_separator_inside_a_string_stays_in_the_prompt(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(ROW % ("one\u2028two", "harmful") + "\n\n" + ROW % ("three", "benign") + "\n", encoding="utf-8")
    rows = load_corpus([path])
    assert [(r.prompt, r.label, r.source, r.file) for r in rows] == [("one\u2028two", 1, "s", "rows.jsonl"), ("three", 0, "s", "rows.jsonl")]


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": "x", "label": "harmful"', "line 2: not JSON (Expecting ',' delimiter); a row is an object with prompt, label and source"),
    ("[" * 100_000, "line 2: not JSON (nested too deeply); a row is an object with prompt, label and source"),
    ('"just text"', "line 2: a JSON string, not an object with prompt, label and source"),
    # each of these got one generic message naming no field: "need prompt and source strings ... and a label in"
    ('{"prompt": 5, "label": "harmful", "source": "s"}', "line 2: prompt must be a string, got the number 5"),
    ('{"prompt": ["a"], "label": "harmful", "source": "s"}', "line 2: prompt must be a string, got a list"),
    ('{"prompt": "x", "label": "toxic", "source": "s"}', "line 2: label 'toxic' is not one of ['benign', 'harmful']"),
    ('{"prompt": "x", "label": "HARMFUL", "source": "s"}', "line 2: label 'HARMFUL' is not one of ['benign', 'harmful']"),
    ('{"prompt": "x", "label": 1, "source": "s"}', "line 2: label must be one of ['benign', 'harmful'], got the number 1"),
    ('{"prompt": "x", "label": ["harmful"], "source": "s"}', "line 2: label must be one of ['benign', 'harmful'], got a list"),
    ('{"label": "harmful", "source": "s"}', "line 2: missing field 'prompt'; a row needs prompt, label and source"),
    ('{"prompt": "x", "source": "s"}', "line 2: missing field 'label'; a row needs prompt, label and source"),
    ('{"prompt": "x", "label": "benign"}', "line 2: missing field 'source'; a row needs prompt, label and source"),
    ('{"prompt": "x", "label": "benign", "source": null}', "line 2: source must be a string, got null"),
    # these split log lines and herald report's Markdown rows, and "|" the "source|label" group keys (tester finding)
    ('{"prompt": "x", "label": "benign", "source": "Alpaca|benign"}', "line 2: source 'Alpaca|benign' holds '|', which"
     " separates the columns of herald report's tables and the source from the label in Herald's group keys; name the"
     " source without it"),
    ('{"prompt": "x", "label": "benign", "source": "Alpaca\\nEval"}', "line 2: source 'Alpaca\\nEval' holds a line break"
     " (U+000A); a source is named in log lines and in herald report's table rows, so it must be one line of printable"
     " text"),
    ('{"prompt": "x", "label": "benign", "source": "Alpaca\\u2028Eval"}', "line 2: source 'Alpaca\\u2028Eval' holds a line"
     " break (U+2028); a source is named in log lines and in herald report's table rows, so it must be one line of"
     " printable text"),
    ('{"prompt": "x", "label": "benign", "source": "Alpaca\\tEval"}', "line 2: source 'Alpaca\\tEval' holds a control"
     " character (U+0009); a source is named in log lines and in herald report's table rows, so it must be one line of"
     " printable text"),
    # a right-to-left override reorders a report row, a zero-width space makes two sources look the same (tester)
    ('{"prompt": "x", "label": "benign", "source": "Alpaca\\u202eEval"}', "line 2: source 'Alpaca\\u202eEval' holds an"
     " invisible format character (U+202E); a source is named in log lines and in herald report's table rows, so it must"
     " be one line of printable text"),
    ('{"prompt": "x", "label": "benign", "source": "Alpaca\\u200bEval"}', "line 2: source 'Alpaca\\u200bEval' holds an"
     " invisible format character (U+200B); a source is named in log lines and in herald report's table rows, so it must"
     " be one line of printable text"),
    ('{"prompt": "x", "label": "benign", "source": "s", "context": true}', "line 2: context must be a string or null, got the boolean true"),
    # empty prompts were trained on silently
    ('{"prompt": "", "label": "benign", "source": "s"}', "line 2: prompt is empty or only whitespace; a moderation prompt needs text to be labelled"),
    ('{"prompt": " \\n\\t", "label": "harmful", "source": "s", "context": "c"}', "line 2: prompt is empty or only whitespace; a moderation prompt needs text to be labelled"),
])
def test_a_bad_row_is_named_by_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(ROW % ("fine", "benign") + "\n" + line + "\n")
    with pytest.raises(ValueError) as caught:
        load_corpus([path])
    assert str(caught.value) == f"{path} {message}", caught.value


def test_a_table_file_is_told_that_data_is_jsonl(tmp_path):
    # "data.csv line 1: not JSON (Expecting value)" did not say that a CSV is not read (researcher pass)
    path = tmp_path / "data.csv"
    path.write_text('prompt,label,source\n"hi",benign,A\n')
    with pytest.raises(ValueError) as caught:
        load_corpus([path])
    assert str(caught.value) == (f"{path} line 1: not JSON (Expecting value); a row is an object with prompt, label and"
                                 " source; Herald reads labeled data as JSONL only, not .csv tables: convert the file to"
                                 " one JSON object a line")


def test_a_null_context_is_no_context(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "x", "label": "benign", "source": "s", "context": null}\n')
    assert [r.prompt for r in load_corpus([path])] == ["x"]


def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes((ROW % ("fine", "benign") + "\n").encode() + b'{"prompt": "caf\xe9", "label": "benign", "source": "s"}\n')
    with pytest.raises(NotUtf8Error) as caught:
        load_corpus([path])
    assert str(caught.value) == f"{path} is not UTF-8 text (line 2: byte 0xe9); save it as UTF-8"


def test_expand_data_names_a_missing_path_and_an_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="does not exist"):
        expand_data([tmp_path / "nope.jsonl"])
    with pytest.raises(ValueError, match=f"folder {tmp_path / 'empty'} holds no .jsonl file"):
        expand_data([tmp_path / "empty"])
    (tmp_path / "a.jsonl").write_text(ROW % ("x", "benign") + "\n")
    (tmp_path / "pyrit_jailbreak_templates.jsonl").write_text("{}\n")
    assert expand_data([tmp_path]) == [tmp_path / "a.jsonl"]


def test_expand_data_refuses_a_pipe_or_a_device_naming_it(tmp_path):
    # --data /dev/stdin under `cat mine.jsonl |` trained on every row, then hashed the drained pipe: probe.json recorded
    # {"file": "stdin", "sha256": <sha256 of nothing>, "rows": 0} (tester finding)
    import os

    pipe = tmp_path / "rows.jsonl"
    os.mkfifo(pipe)
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "folder" / "more.jsonl")
    for paths, option, named, kind in (([pipe], "--data", pipe, "a pipe"),
                                       ([tmp_path / "folder"], "--data", tmp_path / "folder" / "more.jsonl", "a pipe"),
                                       ([Path("/dev/null")], "--sensitive-data", Path("/dev/null"), "a device")):
        with pytest.raises(ValueError) as refused:
            expand_data(paths, option)
        assert str(refused.value) == (f"{option} {named} is {kind}, not a regular file: Herald reads a data file more"
                                      " than once (its rows, then the sha256 it records or checks), and a stream is"
                                      " empty the second time; save it to a file first and give that")
    (tmp_path / "a.jsonl").write_text(ROW % ("x", "benign") + "\n")
    os.symlink(tmp_path / "a.jsonl", tmp_path / "link.jsonl")  # a link to a file is that file
    assert expand_data([tmp_path / "link.jsonl"]) == [tmp_path / "link.jsonl"]


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": "x", "prompt": "y", "label": "benign", "source": "s"}', "line 1: key 'prompt' appears twice; give it once"),
    ('{"prompt": "\\ud800", "label": "benign", "source": "s"}', "line 1: prompt holds a lone UTF-16 surrogate"),
    ('{"prompt": "x", "label": "benign", "source": "s", "n": ' + "9" * 5000 + "}", "line 1: the number at 'n' is too large"),
    ('{"prompt": "x", "label": "benign", "source": "s", "context": 5}', "line 1: context must be a string or null, got the number 5"),
    # a NaN prompt was advised to "send a finite number", a request body's advice for a field that holds text (tester)
    ('{"prompt": NaN, "label": "benign", "source": "s"}', "line 1: the number at 'prompt' is NaN, which is not JSON"
     " (RFC 8259 has no NaN or Infinity); 'prompt' must be a string, not a number"),
    ('{"prompt": "x", "label": "benign", "source": "s", "w": -Infinity}', "line 1: the number at 'w' is -Infinity,"
     " which is not JSON (RFC 8259 has no NaN or Infinity); write a finite number"),
    # a prompt the fold empties, and an empty source, were accepted (re-test)
    ('{"prompt": "\\u200b\\u200d\\ufe0f", "label": "benign", "source": "s"}',
     "line 1: prompt is only invisible characters (nothing is left once the prompt-text fold"),
    ('{"prompt": "hi", "label": "benign", "source": " "}', "line 1: source is empty or only whitespace; name the dataset"),
    # "  myharmA" was another source than "myharmA" (tester finding); labels are strict, so are source names now
    ('{"prompt": "hi", "label": "benign", "source": "  myharmA"}', "line 1: source '  myharmA' begins or ends with"
     " whitespace, so it would be a source apart from 'myharmA'; give the name without it"),
    ('{"prompt": "hi", "label": "benign", "source": "myharmA\\u00a0"}', "line 1: source 'myharmA\\xa0' begins or ends"
     " with whitespace, so it would be a source apart from 'myharmA'; give the name without it"),
])
def test_rows_are_parsed_strictly(tmp_path, line, message):
    # a repeated key kept its last value; a surrogate failed in the tokenizer after the backbone load with a
    # traceback; a 5,000-digit integer raised json's ValueError naming no file (breaker pass)
    path = tmp_path / "rows.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError) as caught:
        load_corpus([path])
    assert str(caught.value).startswith(f"{path} {message}"), caught.value


def test_a_prompt_given_with_both_labels_is_refused_naming_its_rows_and_the_count(tmp_path):
    # both were trained on, and one of them counted wrong in every metric (breaker finding)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(ROW % (p, l) for p, l in [("x", "harmful"), ("y", "harmful"), ("z", "benign")]) + "\n")
    b.write_text("\n".join(ROW % (p, l) for p, l in [("z", "benign"), ("x", "benign"), ("y", "benign")]) + "\n")
    with pytest.raises(ValueError) as caught:
        load_training_corpus([a, b])
    assert str(caught.value) == (f"the prompt 'x' has both labels: {a} line 1 (harmful), {b} line 2 (benign); 2 prompts"
                                 " of the data have both labels: give each prompt one label")
    assert [r.prompt for r in load_corpus([a, b])] == ["x", "y", "z", "z", "x", "y"]  # the plain reader still reads all


def test_repeated_prompts_with_one_label_are_kept_and_counted_in_one_warning(tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(ROW % (p, "benign") for p in ["x", "y", "x", "z", "y", "x"]) + "\n")
    with caplog.at_level(logging.WARNING, logger="herald_service.training.corpus"):
        rows = load_training_corpus([path])
    assert [r.prompt for r in rows] == ["x", "y", "x", "z", "y", "x"]  # none removed
    assert [r.getMessage() for r in caplog.records] == [
        f"2 prompts appear more than once (same label); duplicates can land on both sides of the split (first: {path} "
        f"line 1 and {path} line 3)"]


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} is absent")
def test_the_shared_corpus_has_no_prompt_with_both_labels_and_keeps_every_row(caplog):
    files = expand_data([SHARED_DATA])
    with caplog.at_level(logging.WARNING, logger="herald_service.training.corpus"):
        rows = load_training_corpus(files)
    assert rows == load_corpus(files)  # the same rows in the same order: fits on it are unchanged
    assert len(rows) == 18017
    assert [r.getMessage().split(";")[0] for r in caplog.records] == ["14 prompts appear more than once (same label)"]


def test_a_data_file_reached_twice_is_read_once_where_it_first_comes(tmp_path):
    # A re-test: `--data a.jsonl,a.jsonl` (or a file and its folder) read its rows twice, warned of them as duplicates
    from herald_service.training.corpus import expand_data

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (a, b):
        path.write_text('{"prompt": "x", "label": "benign", "source": "s"}\n')
    assert expand_data([b, a, tmp_path / ".." / tmp_path.name / "b.jsonl"]) == [b, a]
    assert expand_data([a, tmp_path]) == [a, b]


def test_prompts_are_compared_as_the_backbone_reads_them(tmp_path):
    # a copy with a zero-width space, or in fullwidth letters, is the same prompt to the backbone (re-test finding:
    # the check compared the text as written, so such a copy could carry the other label)
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(ROW % (p, l) for p, l in [("bomb", "harmful"), ("bo\\u200bmb", "benign"),
                                                        ("ｂｏｍｂ", "benign")]) + "\n")
    with pytest.raises(ValueError) as caught:
        load_training_corpus([path])
    assert str(caught.value) == (f"the prompt 'bomb' has both labels: {path} line 1 (harmful), {path} line 2 (benign),"
                                 f" {path} line 3 (benign); 1 prompt of the data has both labels: give each prompt one label")


@pytest.mark.parametrize(("text", "rows"), [
    (ROW % ("a", "harmful") + "\n" + ROW % ("b", "benign") + "\n\n", 2),  # a trailing blank line: 3 newlines
    (ROW % ("a", "harmful") + "\n" + ROW % ("b", "benign"), 2),  # a last row without a newline: 1 newline
    (ROW % ("a", "harmful") + "\r\n  \r\n" + ROW % ("b", "benign") + "\r\n", 2),  # CRLF and a whitespace-only line
])
def test_file_manifest_counts_the_rows_the_reader_reads_not_newlines(tmp_path, text, rows):
    # probe.json's training_data.files[].rows was data.count(b"\n") (tester finding)
    from herald_service.training.corpus import file_manifest

    path = tmp_path / "rows.jsonl"
    path.write_text(text, encoding="utf-8", newline="")
    assert len(load_corpus([path])) == rows
    assert file_manifest([path])[0]["rows"] == rows


def test_an_empty_data_file_is_refused_as_an_empty_test_data_file_is(tmp_path):
    # tester finding: an empty --data file was read as "rows: 0" without a word
    good, empty = tmp_path / "good.jsonl", tmp_path / "empty.jsonl"
    good.write_text(ROW % ("x", "harmful") + "\n")
    empty.write_text("\n  \n")
    with pytest.raises(ValueError) as caught:
        load_training_corpus([good, empty])
    assert str(caught.value) == (f"{empty} holds no labeled row (--data): it is empty or only blank lines; give JSONL rows"
                                 ' {"prompt", "label", "source"} or leave the file out')
    assert [e.prompt for e in load_training_corpus([good])] == ["x"]


def test_a_templates_file_in_a_data_folder_is_left_out_with_a_line_saying_so(tmp_path, caplog):
    import logging

    from herald_service.training.corpus import JAILBREAK_TEMPLATE_FILE, expand_data

    (tmp_path / "a.jsonl").write_text(ROW % ("x", "harmful") + "\n")
    (tmp_path / JAILBREAK_TEMPLATE_FILE).write_text(ROW % ("y", "benign") + "\n")  # a user's rows, by that name
    with caplog.at_level(logging.INFO, logger="herald_service.training.corpus"):
        assert expand_data([tmp_path]) == [tmp_path / "a.jsonl"]
    assert caplog.messages == [f"--data folder {tmp_path}: {JAILBREAK_TEMPLATE_FILE} is not read as labeled rows (a file"
                               " of that name holds jailbreak templates, read only as --jailbreak-templates)"]


def _one_source_rows(harmful: int, benign: int, source: str = "MyData") -> list:
    from herald_service.training.corpus import Example

    return ([Example(f"harmful {i}", 1, source, None, "mine.jsonl") for i in range(harmful)]
            + [Example(f"benign {i}", 0, source, None, "mine.jsonl") for i in range(benign)])


def test_the_per_source_cap_names_the_rows_it_left_out_per_source_and_label(caplog):
    # tester finding: a researcher's 400 rows of one source were fitted on 300, with only "300 prompts after caps"
    from herald_service.training.corpus import cap_per_group, left_out_by_cap, warn_of_cap

    rows = _one_source_rows(200, 200) + _one_source_rows(3, 160, source="Other")
    capped = cap_per_group(rows, 150, seed=0)
    left_out = left_out_by_cap(rows, capped)
    assert left_out == {("MyData", 0): (50, 200), ("MyData", 1): (50, 200), ("Other", 0): (10, 160)}
    with caplog.at_level(logging.WARNING, logger="herald_service.training.corpus"):
        warn_of_cap(left_out, 150, 0, "probe.json's training_data.left_out_by_max_per_source")
    assert [r.getMessage() for r in caplog.records] == [
        "--max-per-source 150 left out 110 rows (at most 150 per source and label, drawn with --seed 0): MyData benign"
        " 50 of 200, MyData harmful 50 of 200, Other benign 10 of 160; give --max-per-source null to keep every row, or"
        " a larger N"]


def test_the_per_source_cap_says_nothing_when_it_left_nothing_out_and_shows_the_largest_groups(caplog):
    from herald_service.training.corpus import CAP_GROUPS_LOGGED, cap_per_group, left_out_by_cap, warn_of_cap

    rows = _one_source_rows(20, 20)
    with caplog.at_level(logging.WARNING, logger="herald_service.training.corpus"):
        warn_of_cap(left_out_by_cap(rows, cap_per_group(rows, 20)), 20, 0, "x")  # kept every row
        warn_of_cap(left_out_by_cap(rows, cap_per_group(rows, None)), None, 0, "x")  # no cap
    assert not caplog.records
    rows = [row for n in range(CAP_GROUPS_LOGGED + 2) for row in _one_source_rows(0, 5 + n, source=f"S{n}")]
    with caplog.at_level(logging.WARNING, logger="herald_service.training.corpus"):
        warn_of_cap(left_out_by_cap(rows, cap_per_group(rows, 4)), 4, 3, "the results' meta.left_out_by_max_per_source")
    shown = ", ".join(f"S{n} benign {1 + n} of {5 + n}" for n in range(CAP_GROUPS_LOGGED + 1, 1, -1))
    assert caplog.records[0].getMessage() == (
        f"--max-per-source 4 left out 36 rows (at most 4 per source and label, drawn with --seed 3): {shown} and 2 more"
        " groups (the results' meta.left_out_by_max_per_source lists each); give --max-per-source null to keep every"
        " row, or a larger N")


def test_a_dangling_link_or_a_folder_among_a_data_folders_jsonl_is_named_with_the_option(tmp_path):
    # tester finding: "herald: [Errno 2] No such file or directory: 'link_dir/dangling.jsonl'" and "[Errno 21] Is a
    # directory", naming no option, as the direct --test-data path already was
    from herald_service.training.corpus import check_test_data_paths

    folder = tmp_path / "link_dir"
    folder.mkdir()
    (folder / "rows.jsonl").write_text(ROW % ("x", "harmful") + "\n")
    dangling = folder / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "gone.jsonl")
    where = f"in the --data folder {folder}, whose *.jsonl files are all read as labeled rows"
    with pytest.raises(ValueError) as refused:
        expand_data([folder])
    assert str(refused.value) == (f"{dangling} is a link to {tmp_path / 'gone.jsonl'}, which does not exist ({where});"
                                  " remove it from the folder, or point it at a labeled JSONL file")
    with pytest.raises(ValueError) as refused:
        check_test_data_paths([dangling])
    assert str(refused.value) == (f"{dangling} is a link to {tmp_path / 'gone.jsonl'}, which does not exist"
                                  " (--test-data); give a labeled JSONL file")
    dangling.unlink()
    (tmp_path / "elsewhere").mkdir()
    linked = folder / "dir.jsonl"
    linked.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError) as refused:
        expand_data([folder], "--sensitive-data")
    assert str(refused.value) == (f"{linked} is a folder (in the --sensitive-data folder {folder}, whose *.jsonl files"
                                  " are all read as labeled rows); rename it or move it out of the folder")
    linked.unlink()
    (folder / "to-rows.jsonl").symlink_to(folder / "rows.jsonl")  # a link to a file is that file, read once
    assert expand_data([folder]) == [folder / "rows.jsonl"]

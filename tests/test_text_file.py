"""UTF-8 text files (JSONL data, jailbreak templates, `herald classify --file`, `.env`): read as UTF-8, a leading
byte-order mark dropped, and a file that is not UTF-8 named by line and byte."""

import json

import pytest

from herald_service.text_file import NotUtf8Error, read_utf8


def test_a_leading_byte_order_mark_is_dropped(tmp_path):
    # Breaker: a JSONL file saved with a BOM was refused with Python's "Unexpected UTF-8 BOM (decode using utf-8-sig)"
    row = {"prompt": "hello", "label": "benign", "source": "mine"}
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n")
    text = read_utf8(path)
    assert json.loads(text.split("\n")[0]) == row
    # Only a leading one: U+FEFF inside the text is kept as written
    path.write_bytes("a\ufeffb".encode())
    assert read_utf8(path) == "a\ufeffb"


def test_a_file_that_is_not_utf8_is_named_by_line_and_byte(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(NotUtf8Error) as error:
        read_utf8(path)
    assert (error.value.line, error.value.byte) == (2, 0xE9)

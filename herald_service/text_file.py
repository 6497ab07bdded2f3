"""Text files a person hands to Herald (prompt files, labeled JSONL): read as UTF-8, and a byte that is not UTF-8 is
named with its line, since the codec's own error ("can't decode byte 0xff in position 3") names neither file nor
line."""

from __future__ import annotations

from pathlib import Path


class NotUtf8Error(ValueError):
    """A file is not UTF-8 text; ``str()`` names it, the line (1-based) and the first bad byte."""

    def __init__(self, path: Path, line: int, byte: int) -> None:
        super().__init__(f"{path} is not UTF-8 text (line {line}: byte 0x{byte:02x}); save it as UTF-8")
        self.path, self.line, self.byte = path, line, byte


class TooLargeError(ValueError):
    """A file holds more than the bytes its reader takes; ``str()`` names it and the limit."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        super().__init__(f"{path} holds more than {max_bytes:,} bytes")
        self.path, self.max_bytes = path, max_bytes


def read_utf8(path: Path, max_bytes: int | None = None) -> str:
    """The text of ``path``, without a leading byte-order mark (Windows editors write one; Python's JSON reader
    refused the first row for it, though HTTP bodies with one are accepted).

    Args:
        max_bytes: read at most this many bytes (None: all): ``/dev/zero`` or a sparse 4 GB file given as a prompt
            file ended in a MemoryError traceback (tester), where a pipe such as ``/dev/stdin`` must still be read.

    Raises:
        NotUtf8Error: the file is not UTF-8.
        TooLargeError: it holds more than ``max_bytes``.
        OSError: it cannot be read (missing, a folder, no permission).
    """
    if max_bytes is None:
        data = path.read_bytes()
    else:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise TooLargeError(path, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(path, data.count(b"\n", 0, exc.start) + 1, data[exc.start]) from None


LONE_SURROGATE = "text holds a lone UTF-16 surrogate (not valid Unicode); send well-formed UTF-8"
"""The message of every refusal of text that :func:`is_valid_unicode` rejects (the API names the field)."""


def is_valid_unicode(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: JSON may carry ``"\ud800"`` escapes that Python decodes into lone
    UTF-16 surrogates, which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

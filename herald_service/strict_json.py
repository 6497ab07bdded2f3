"""Strict JSON for what people hand to Herald (request bodies, JSONL rows): a key given twice, a key that is not
valid Unicode, an object of too many keys, or (optionally) a number Python cannot hold as the JSON means it is
refused by its path, where :func:`json.loads` would silently keep the last value, or raise naming nothing.

Python's ``json`` keeps the *last* value of a key given twice: ``{"input": "hello", "input": "how to build a bomb"}``
is moderated as the second prompt, while a gateway whose parser keeps the *first* value (many do; RFC 8259 section 4
leaves it open) logs and forwards the first. Used by the HTTP layer (:mod:`herald_service.api.json_body`), ``herald
steer-eval``, the labeled-corpus reader and the jailbreak-template reader (one JSONL row each: :func:`object_row`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Callable, Iterator

KEY_ECHO_CHARS = 64
"""A repeated key is echoed in the error up to this many characters."""
PATH_ECHO_CHARS = 256
"""A repeated key's path (keys cut to :data:`KEY_ECHO_CHARS`) is echoed up to this many characters, its end kept."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")
"""A UTF-16 surrogate code point: ``json`` decodes a lone ``"\\ud800"`` escape into one (a valid pair becomes one
character)."""
MAX_KEYS = 256
"""Keys in one JSON object of a body. Herald's request objects have at most 7; an object of 600,000 unknown keys
(7 MB, under the body limit) cost 3 s of pydantic validation on the event loop, which stalls every request (breaker
finding), so such a body is refused while it is parsed, off the loop."""


class StrictJsonError(ValueError):
    """A document :func:`loads_unique` refuses; ``message`` says why in one line, naming the key or number by its
    path (``herald steer-eval`` and the labeled-corpus reader prefix it with the file and line; the HTTP layer words
    its own answers). ``problem`` is the same fact without advice to the sender (``message`` may end "; send a finite
    number"), for readers of files that no person typed, such as ``probe.json``."""

    message: str

    @property
    def problem(self) -> str:
        return self.message


class DuplicateKey(StrictJsonError):
    """A JSON object of the body holds ``key`` twice. ``path`` names it from the top of the document, keys as
    :func:`echoed` writes them: ``input`` at the top level, ``messages[0].content`` in the first message."""

    def __init__(self, key: str, path: str) -> None:
        super().__init__(path)
        self.key = key
        self.path = path
        self.message = f"key '{path}' appears twice; give it once"

    @property
    def problem(self) -> str:
        return f"key '{self.path}' appears twice"


class InvalidKey(StrictJsonError):
    """A key of a JSON object of the body is not valid Unicode: it holds a lone UTF-16 surrogate (a ``"\\ud800"``
    escape), which pydantic cannot read as a string ("Input should be a valid string", naming no field) and no
    tokenizer can encode. ``key`` and ``path`` as for :class:`DuplicateKey`."""

    def __init__(self, key: str, path: str) -> None:
        super().__init__(path)
        self.key = key
        self.path = path
        self.message = f"key '{path}' holds a lone UTF-16 surrogate (not valid Unicode)"


class TooManyKeys(StrictJsonError):
    """A JSON object of the body holds more than :data:`MAX_KEYS` keys (``count``); ``path`` names it as
    :class:`DuplicateKey` names a key (``""``: the body itself)."""

    def __init__(self, count: int, path: str = "") -> None:
        super().__init__(count, path)
        self.count, self.path = count, path
        where = f"the object at '{path}'" if path else "a JSON object"
        self.message = f"{where} has {count} keys; the limit is {MAX_KEYS}"


class BadNumber(StrictJsonError):
    """A number of the body that Python cannot hold as JSON means it: an integer outside 64 bits (``json`` fails
    on one of over 4,300 digits with a ``ValueError`` that FastAPI answered "nested too deeply", and echoed a 4,000-digit
    one back), a float that overflows to infinity (``1e999``), or a ``NaN``/``Infinity`` token, which ``json``
    accepts but RFC 8259 does not. ``path`` names it as for :class:`DuplicateKey` (``body`` for a bare number);
    ``message`` says which, and for ``NaN``/``Infinity`` ends with advice to the sender that ``problem`` leaves out."""

    def __init__(self, problem: str, path: str, advice: str = "") -> None:
        super().__init__(path)
        self.message = f"{problem}; {advice}" if advice else problem
        self.path = path
        self._problem = problem

    @property
    def problem(self) -> str:
        return self._problem


class NotUtf8(StrictJsonError):
    """A document given as bytes that is not UTF-8 (RFC 8259 section 8.1; a leading byte-order mark is allowed):
    either ``encoding`` is the UTF-16 or UTF-32 form :func:`json.detect_encoding` reads in its first bytes and the
    document opens as JSON in it (``json`` decoded those without a word), or ``encoding`` is ``None`` and ``byte`` is the first byte that is not UTF-8, at
    ``offset`` in the document as given (a byte-order mark counted)."""

    def __init__(self, encoding: str | None = None, offset: int = 0, byte: int = 0) -> None:
        super().__init__(encoding or offset)
        self.encoding, self.offset, self.byte = encoding, offset, byte
        self.message = (f"{encoding.upper()} (by its first bytes), not UTF-8" if encoding is not None else
                        f"not UTF-8: byte 0x{byte:02x} at offset {offset} cannot be decoded")


_UTF8_BOM = b"\xef\xbb\xbf"


_JSON_WHITESPACE = " \t\n\r"
_SNIFF_BYTES = 64
"""Bytes of a body decoded in the sniffed UTF-16/32 form to see how it opens (a multiple of 4: whole code units)."""
_SNIFF_CHARS = 4
"""Characters, after a byte-order mark and JSON whitespace, that must be ASCII for a body to read as UTF-16/32."""


def _opens_as_json(document: bytes, encoding: str) -> bool:
    """Whether ``document``, decoded in the UTF-16 or UTF-32 form :func:`json.detect_encoding` read from the NUL
    bytes among its first four, opens as JSON text does: its first :data:`_SNIFF_CHARS` characters after a
    byte-order mark and whitespace (fewer in a shorter body) are ASCII other than NUL. Every JSON text opens with
    ASCII (a structural character or the start of a scalar), and an object with a key, so UTF-16/32 JSON passes,
    even when it is malformed further on (``{input: hi}``: named UTF-16, not given a position in a UTF-8 reading). A
    UTF-8 body with a NUL among its first bytes matches the sniff's pattern too, but decodes to CJK characters there
    (``7\x00{"input"...`` reads as ``7`` then ``\u227b`` in UTF-16-LE): it is UTF-8 with a NUL, which the JSON
    parser refuses by its position (tester findings; a rule that looked only after ``{`` missed ``[``, ``"``, digits
    and ``-``)."""
    text = document[:_SNIFF_BYTES].decode(encoding, "replace").lstrip("\ufeff").lstrip(_JSON_WHITESPACE)
    opening = text[:_SNIFF_CHARS]
    return bool(opening) and opening.isascii() and "\x00" not in opening


def utf8_text(document: bytes) -> str:
    """``document`` decoded as UTF-8, without a leading byte-order mark, as :func:`json.loads` decodes it
    (``surrogatepass``: encoded lone surrogates decode, and :class:`InvalidKey` or the schema names them).

    Raises:
        NotUtf8: UTF-16 or UTF-32 by its first bytes (and opening as JSON in it), or a byte that is not UTF-8 (its
            offset counts the mark).
    """
    encoding = json.detect_encoding(document)
    if encoding not in ("utf-8", "utf-8-sig") and _opens_as_json(document, encoding):
        raise NotUtf8(encoding)
    start = len(_UTF8_BOM) if document.startswith(_UTF8_BOM) else 0
    try:
        return document[start:].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:  # exc.start counts from after the mark: json.loads gave that, used on the body
        raise NotUtf8(offset=start + exc.start, byte=document[start + exc.start]) from None


class _Unrepresentable:
    """Stands in for a number :class:`BadNumber` refuses until the document is parsed and its path is known.
    ``problem`` completes "the number at <path> ..."; ``advice`` (may be empty) tells the sender what to send."""

    __slots__ = ("problem", "advice")

    def __init__(self, problem: str, advice: str = "") -> None:
        self.problem = problem
        self.advice = advice


INT_LIMIT = 2**63
"""Integers of a body must lie in [-2^63, 2^63): any field that takes one means a count or an index."""
NUMBER_ECHO_CHARS = 24
"""A refused number is echoed up to this many characters."""


def _parse_int(text: str) -> int | _Unrepresentable:
    # JSON integers have no leading zeros, so more than 20 characters ("-" and 19 digits) is out of range for sure;
    # int() is never asked to convert one (it refuses over 4,300 digits, and is slow well before that).
    value = int(text) if len(text) <= 20 else None
    if value is not None and -INT_LIMIT <= value < INT_LIMIT:
        return value
    digits = len(text.lstrip("-"))
    size = "too small" if text.startswith("-") else "too large"
    return _Unrepresentable(f"is {size} to represent: an integer of {digits} digits; integers must lie within"
                            " -2^63..2^63-1")


def _parse_float(text: str) -> float | _Unrepresentable:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        shown = text if len(text) <= NUMBER_ECHO_CHARS else text[:NUMBER_ECHO_CHARS] + "..."
        return _Unrepresentable(f"({shown}) is too large to represent: it overflows a 64-bit float")
    return value


def _parse_constant(text: str) -> _Unrepresentable:
    return _Unrepresentable(f"is {text}, which is not JSON (RFC 8259 has no NaN or Infinity)", "send a finite number")


class _Faulty(dict):
    """A parsed JSON object that breaks a rule of :func:`loads_unique`, kept until the whole document is parsed: only
    then is its path known (``json`` builds objects innermost first and tells a hook nothing of where they are)."""

    def __init__(self, pairs: list[tuple[str, Any]], fault: type[DuplicateKey] | type[InvalidKey] | type[TooManyKeys],
                 key: str | int) -> None:
        super().__init__(pairs)
        self.fault = fault
        self.key = key


def _checked_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object as a dict, or a :class:`_Faulty` dict naming its first
    repeated key or else its first key that is not valid Unicode; an object of over :data:`MAX_KEYS` keys is an empty
    :class:`_Faulty` holding its count (none of its keys is kept: 600,000 of them cost seconds downstream)."""
    if len(pairs) > MAX_KEYS:
        return _Faulty([], TooManyKeys, len(pairs))
    obj = dict(pairs)
    if len(obj) < len(pairs):
        repeated = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        return _Faulty(pairs, DuplicateKey, repeated)
    invalid = next((key for key in obj if not key.isascii() and _SURROGATE.search(key)), None)
    return obj if invalid is None else _Faulty(pairs, InvalidKey, invalid)


def _cut_path(path: str) -> str:
    return path if len(path) <= PATH_ECHO_CHARS else "..." + path[-PATH_ECHO_CHARS:]


def _nodes_with_paths(document: Any, held: tuple[type, ...]) -> Iterator[tuple[Any, str]]:
    """``document`` and every value of it of a type in ``held``, with its path (keys :func:`echoed`, e.g.
    ``messages[0].content``; "" for the document), in document order, outer before inner. A node's values are read
    only once the caller asks for the next node, so a caller that stops at a node never walks what it holds."""
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        node, path = stack.pop()
        yield node, path
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{echoed(k)}" if path else echoed(k)) for k, v in reversed(node.items())
                         if isinstance(v, held))
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(node))) if isinstance(v, held))


def _first_fault(document: Any) -> DuplicateKey | InvalidKey | TooManyKeys | BadNumber | None:
    """The fault of the first :class:`_Faulty` object or :class:`_Unrepresentable` number of ``document`` in document
    order (outer objects before the ones they hold), with its path; ``None`` when there is none."""
    for node, path in _nodes_with_paths(document, (dict, list, _Unrepresentable)):
        if isinstance(node, _Unrepresentable):
            where = _cut_path(path or "body")
            return BadNumber(f"the number at '{where}' {node.problem}", where, node.advice)
        if isinstance(node, _Faulty) and node.fault is TooManyKeys:
            return TooManyKeys(int(node.key), _cut_path(path))
        if isinstance(node, _Faulty):
            key = echoed(node.key)
            return node.fault(node.key, _cut_path(f"{path}.{key}" if path else key))
    return None


def _has_list_over(document: Any, limit: int) -> bool:
    """Whether any list of ``document`` holds more than ``limit`` items: one pass over every value, no paths."""
    stack = [document]
    while stack:
        node = stack.pop()
        if type(node) is list:
            if len(node) > limit:
                return True
            stack.extend(node)
        elif type(node) is dict:
            stack.extend(node.values())
    return False


COUNT_CHUNK_BYTES = 1 << 18
""":func:`containers_outside_strings` reads a body this many bytes at a time: its memory stays a few MB whatever the
body (one pass over a whole 12 MB body of backslashes held 245-328 MB of index arrays: re-tester)."""


def containers_outside_strings(body: bytes, chunk_bytes: int = COUNT_CHUNK_BYTES) -> int:
    """How many JSON arrays and objects ``body`` (UTF-8 JSON text) opens: its ``[`` and ``{`` outside strings, counted
    without parsing it. A quote after an odd run of backslashes does not end a string. Read ``chunk_bytes`` at a time,
    the state (inside a string or not, an odd run of backslashes) carried from one chunk to the next.

    Made of numpy passes over the bytes, which let other threads run (ad-hoc timings on the dev VM: 40 ms for a 12 MB
    body of four million empty lists, 0.4 s for one of six million escaped quotes), unlike ``json``'s C parser: it
    holds the GIL for a whole body, 0.93 s for the four million lists (benchmarks/loop_stall.py).
    """
    import numpy as np

    data = np.frombuffer(body, dtype=np.uint8)
    count, inside, escaping = 0, False, False  # escaping: the previous chunk ended in an odd run of backslashes
    for offset in range(0, data.size, chunk_bytes):
        chunk = data[offset : offset + chunk_bytes]
        quote = chunk == ord('"')
        slashes = np.flatnonzero(chunk == ord("\\"))
        if escaping and (slashes.size == 0 or slashes[0] != 0):
            quote[0] = False  # escaped by the run that ended the previous chunk
        continues = escaping and slashes.size > 0 and slashes[0] == 0
        escaping = False
        if slashes.size:
            run_start = np.ones(slashes.size, dtype=bool)
            run_start[1:] = slashes[1:] != slashes[:-1] + 1
            starts = np.flatnonzero(run_start)
            ends = np.append(starts[1:], slashes.size) - 1  # index of each run's last backslash
            odd = (ends - starts + 1 + (np.arange(starts.size) == 0) * continues) % 2 == 1
            after = slashes[ends] + 1
            escaped = after[odd & (after < chunk.size)]
            quote[escaped] = False  # whatever follows an odd run is escaped; only quotes matter here
            escaping = bool(odd[-1]) and after[-1] == chunk.size
        within = np.logical_xor.accumulate(quote)  # true from an opening quote up to its closing one
        if inside:
            within = ~within
        opens = (chunk == ord("[")) | (chunk == ord("{"))
        count += int(np.count_nonzero(opens & ~within))
        inside = bool(within[-1])
    return count


def longest_list(document: Any, limit: int) -> tuple[str, int] | None:
    """The first list (in document order) of a parsed JSON ``document`` holding more than ``limit`` items, as
    ``(path, length)`` (path as ``input`` or ``messages[0]``, keys :func:`echoed` and the path cut as a repeated key's
    is), or None. Lists are measured before their items are
    read, so a list of three million strings costs one ``len`` and no walk over its items.

    Source: a breaker pass: ``{"input": [3,000,000 x "a"]}`` (12 MB, under the body limit) held the event loop 14 s
    building prompts before the batch-size check refused it. The walk names no path unless a list is over the limit:
    a path string for every container made a 12 MB body of four million small lists cost 11.7 s here against 2.2 s
    to parse it (re-test).
    """
    if not _has_list_over(document, limit):
        return None
    for node, path in _nodes_with_paths(document, (dict, list)):
        if isinstance(node, list) and len(node) > limit:
            return _cut_path(path or "body"), len(node)
    return None


def loads_unique(body: bytes | str, check_numbers: bool = False) -> Any:
    """:func:`json.loads` that refuses a repeated key or a key that is not valid Unicode, naming its path, and with
    ``check_numbers`` a number Python cannot hold as the JSON means it.

    ``body`` as bytes must be UTF-8 (a leading byte-order mark allowed): :func:`json.loads` would also read UTF-16 and
    UTF-32.

    Raises:
        NotUtf8: ``body`` is bytes in UTF-16 or UTF-32, or holds a byte that is not UTF-8.
        DuplicateKey: a key given twice in one object (the first fault in document order).
        InvalidKey: a key holding a lone UTF-16 surrogate (the first fault in document order).
        BadNumber: with ``check_numbers``, an integer outside 64 bits, a float overflowing to infinity, or
            ``NaN``/``Infinity`` (the first fault in document order).
        TooManyKeys: an object with more than :data:`MAX_KEYS` keys.
        ValueError, RecursionError: not JSON, or nested too deeply (as :func:`json.loads`).
    """
    if isinstance(body, (bytes, bytearray)):
        body = utf8_text(bytes(body))
    faulty = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal faulty
        obj = _checked_object(pairs)
        faulty = faulty or isinstance(obj, _Faulty)
        return obj

    if not check_numbers:
        document = json.loads(body, object_pairs_hook=hook)
    else:
        def number(parse: Callable[[str], Any]) -> Callable[[str], Any]:
            def checked(text: str) -> Any:
                nonlocal faulty
                value = parse(text)
                faulty = faulty or isinstance(value, _Unrepresentable)
                return value
            return checked

        document = json.loads(body, object_pairs_hook=hook, parse_float=number(_parse_float),
                              parse_int=number(_parse_int), parse_constant=number(_parse_constant))
    if faulty and (fault := _first_fault(document)) is not None:
        raise fault
    return document



class NotJsonRow(ValueError):
    """A JSONL line that is not JSON at all (``herald steer-eval`` reads such a line as a plain-text prompt unless it
    starts with ``{``); ``str()`` names the file and line and says what a row is."""


_JSON_KINDS = {list: "array", str: "string", bool: "boolean", type(None): "null", int: "number", float: "number"}


def object_row(line: str, where: str, expected: str, strings: tuple[str, ...] = ()) -> dict[str, Any]:
    """One line of a JSONL file a person hands to Herald (labeled corpus, jailbreak templates, ``herald steer-eval``
    prompts) as a JSON object, parsed by :func:`loads_unique` with ``check_numbers``.

    Args:
        line: the line's text, without its line end.
        where: how the error names the line, e.g. ``"data/x.jsonl line 3"``.
        expected: what a row is, completing "not ...", e.g. ``"an object with prompt, label and source"``.
        strings: the top-level keys whose value must be a string: a ``NaN`` or ``Infinity`` there is refused with
            "'prompt' must be a string, not a number", not the request body's "send a finite number" (a ``"prompt":
            NaN`` in a training row was told that: tester nit); elsewhere "write a finite number", as for a file.

    Raises:
        NotJsonRow: the line is not JSON (or nested too deeply): ``"<where>: not JSON (<why>); a row is <expected>"``.
        ValueError: ``"<where>: <why>"`` for JSON that is not an object (``a JSON array, not <expected>``), or that
            :func:`loads_unique` refuses (a key given twice, an invalid key, too many keys, a number Python cannot
            hold).
    """
    try:
        row = loads_unique(line, check_numbers=True)
    except BadNumber as exc:
        if exc.message == exc.problem:  # too large to hold: no advice to replace
            raise ValueError(f"{where}: {exc.message}") from None
        advice = f"'{exc.path}' must be a string, not a number" if exc.path in strings else "write a finite number"
        raise ValueError(f"{where}: {exc.problem}; {advice}") from None
    except StrictJsonError as exc:
        raise ValueError(f"{where}: {exc.message}") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise NotJsonRow(f"{where}: not JSON ({getattr(exc, 'msg', 'nested too deeply')}); a row is {expected}") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a JSON {_JSON_KINDS[type(row)]}, not {expected}")
    return row


def echoed(key: str) -> str:
    """``key`` (or any client text echoed in an error) as ASCII JSON text (lone surrogates, control and direction
    characters escaped), cut to :data:`KEY_ECHO_CHARS`."""
    text = json.dumps(key)[1:-1]
    return text if len(text) <= KEY_ECHO_CHARS else text[:KEY_ECHO_CHARS] + "..."


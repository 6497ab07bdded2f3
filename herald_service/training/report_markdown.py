"""Text from the data (source names, a fold's reason to be skipped) written into ``herald report``'s Markdown as text.

A source name is any one line of printable text (:func:`~herald_service.training.corpus._source_problem`), so
``<img src=x onerror=alert(1)>**bold**`` went into the report's tables as HTML and emphasis (tester finding).
"""

from __future__ import annotations

import re

HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
"""Characters a Markdown renderer reads as HTML, written as entities (``&`` first, so entities are not doubled)."""
MARKDOWN = "\\`*_[]~"
"""Characters that start Markdown emphasis, code, links or (GFM) strikethrough inside a table cell, escaped with a backslash. ``|`` is
refused in source names; ``#``, ``-``, ``+`` and ``>`` mean something only at the start of a line, which a cell never
is (``>`` is an entity anyway)."""


def escape(text: str) -> str:
    """``text`` as Markdown that renders as those characters: HTML's specials as entities, Markdown's escaped."""
    out = []
    for char in text:
        out.append(HTML.get(char) or ("\\" + char if char in MARKDOWN else char))
    return "".join(out)


def code_span(text: str) -> str:
    """``text`` as a Markdown code span that shows it as written (a file name, a command line): fenced by one backtick
    more than its longest run of backticks, with a space inside each fence where it starts or ends with a backtick, or
    with a space at both ends (CommonMark takes one such space off each side). ``--test-data 'md_te`st.jsonl'`` cut
    the span at its backtick (tester finding). A code span shows HTML and emphasis characters as they are."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" or (text[:1] == text[-1:] == " " and text.strip()) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table of ``header`` and ``rows`` (cells already escaped), one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)

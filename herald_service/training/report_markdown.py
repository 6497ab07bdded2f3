"""Text from the data (source names, a fold's reason to be skipped) written into ``herald report``'s Markdown as text.

A source name is any one line of printable text (:func:`~herald_service.training.corpus._source_problem`), so
``<img src=x onerror=alert(1)>**bold**`` went into the report's tables as HTML and emphasis (tester finding).
"""

from __future__ import annotations

HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
"""Characters a Markdown renderer reads as HTML, written as entities (``&`` first, so entities are not doubled)."""
MARKDOWN = "\\`*_[]"
"""Characters that start Markdown emphasis, code or links inside a table cell, escaped with a backslash. ``|`` is
refused in source names; ``#``, ``-``, ``+`` and ``>`` mean something only at the start of a line, which a cell never
is (``>`` is an entity anyway)."""


def escape(text: str) -> str:
    """``text`` as Markdown that renders as those characters: HTML's specials as entities, Markdown's escaped."""
    out = []
    for char in text:
        out.append(HTML.get(char) or ("\\" + char if char in MARKDOWN else char))
    return "".join(out)

"""What the backbone reads of a prompt: message text with invisible format characters removed and look-alike
characters folded to ASCII, so that a harmful request spelled with them is read as the request it spells.

A breaker pass (2026-12-01) took four plainly harmful prompts that the shipped probe scored 1.0 to 0.001-0.25 by
inserting a zero-width joiner (U+200D) or zero-width space (U+200B) into the words, or by writing them in fullwidth
letters (U+FF21...). Readers, and the chat model behind the gateway, still read those prompts as written.

The fold is narrow, so that ordinary text in any script reads as it did:

- **Format characters** (Unicode general category ``Cf``: zero-width space, joiners, direction marks and overrides,
  the byte-order mark, soft hyphen, word joiner...) are removed. The tag characters U+E0020-U+E007E, which spell
  ASCII invisibly ("ASCII smuggling"), become the ASCII they spell rather than nothing.
- **A character whose NFKC form (Unicode UAX #15 compatibility normalization) is ASCII** becomes that form:
  fullwidth letters, digits, punctuation and the ideographic space, mathematical alphanumerics, circled letters and
  digits, superscript digits, ligatures such as U+FB01 "fi", the no-break and other fixed-width spaces. Everything
  else keeps its code point: accented letters, other scripts, CJK punctuation without an ASCII form (U+3002 "。").
  Folding letters alone left a hole: fullwidth punctuation and U+3000 spaces around folded letters still took three
  of four harmful prompts under 0.02.

- **Look-alike letters of another script inside a Latin word** ("рhishing" with a Cyrillic "р", "bоmb" with a
  Cyrillic "о") become the ASCII letter they imitate, by Unicode's confusables data (UTS #39, through the
  ``confusable-homoglyphs`` package). A word with no Latin letter keeps its letters, so Russian or Greek text reads
  as written; so does a Latin word's letter whose look-alike is not an ASCII letter.

Not undone: a word spelled wholly in another script's look-alikes (Cyrillic "сору" for "copy") and text written
backwards behind a right-to-left override (the override is removed; the reversed letters stay reversed). README
"Known evasions" lists them.

Measured on ``../shared/data`` (18,672 prompts): the character fold changes 656 (3.5%), mostly CJK writing tasks whose
fullwidth commas and colons become ASCII. Of the 300 of them within 1,024 tokens, the shipped probe's verdict changed
for 3: two benign ShareGPT prompts and one harmful jailbreak template became flagged (283 benign, 17 harmful; a fold
of letters and digits alone changed 84 prompts, and one verdict: a harmful template became flagged). The look-alike
letters inside Latin words change the text of 6 prompts (4 already changed above; 658 in all) and none of the verdicts
of the 2 within 1,024 tokens. Scripts and output: docs/eval/prompt_text/.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from confusable_homoglyphs import categories, confusables

from herald_service.types import Conversation, Message

PROMPT_TEXT = "nfkc-ascii-v1"
"""Name of this module's rule, recorded as ``training_data.prompt_text`` in probes ``herald fit`` writes and as
``meta.prompt_text`` in ``herald eval`` results; files without it were made with the text as written."""

_TAGS = range(0xE0020, 0xE007F)
"""Tag characters that mirror printable ASCII (U+E0020 space ... U+E007E tilde)."""


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    if unicodedata.category(char) == "Cf":
        return chr(ord(char) - 0xE0000) if ord(char) in _TAGS else ""
    folded = unicodedata.normalize("NFKC", char)
    return folded if folded.isascii() else char


def normalize_prompt_text(text: str) -> str:
    """``text`` with format characters removed (tag characters decoded to ASCII) and every character whose NFKC form
    is ASCII folded to it (module docstring). ASCII text is returned unchanged at once.

    Args:
        text: one message's content (any length; the character limit is checked before, on what the client sent).

    Returns:
        The text the backbone tokenizes; at most as many characters as ``text`` except for ligatures and letter-like
        symbols that fold to several letters (U+FB03 "ffi", U+2122 "TM").
    """
    if text.isascii():
        return text
    return _WORD.sub(_latin_word, "".join(_fold_char(char) for char in text))


_WORD = re.compile(r"[^\W\d_]{2,}")
"""Runs of two or more letters: the words whose scripts are compared."""


def _latin_word(match: re.Match[str]) -> str:
    """A word mixing ASCII letters with letters of another script that have an ASCII look-alike, with those replaced
    by it; any other word unchanged (a word with no ASCII letter, such as Russian or Greek text, included)."""
    word = match.group(0)
    if word.isascii() or not any("a" <= char.lower() <= "z" for char in word):
        return word
    table = _ascii_lookalikes()
    return "".join(table.get(char, char) for char in word)


@lru_cache(maxsize=1)
def _ascii_lookalikes() -> dict[str, str]:
    """Letter of a script other than Latin -> the ASCII letter Unicode's confusables data says it looks like
    (Cyrillic "р" -> "p", Greek "ο" -> "o"): about 200 letters, built once (a lookup per letter; asking the package
    word by word took 0.3 s for 32,000 characters of mixed words)."""
    table = {}
    for char, homoglyphs in confusables.confusables_data.items():
        if len(char) != 1 or not char.isalpha() or categories.alias(char) == "LATIN":
            continue
        ascii_letters = [h["c"] for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalpha()]
        if ascii_letters:
            table[char] = ascii_letters[0]
    return table


def normalize_conversation(conversation: Conversation) -> Conversation:
    """``conversation`` with every message's content passed through :func:`normalize_prompt_text` (roles kept);
    what ``Backbone.encode`` renders and tokenizes, for serving, fitting and evaluation alike."""
    return tuple(Message(m.role, normalize_prompt_text(m.content)) for m in conversation)

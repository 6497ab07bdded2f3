"""What the backbone reads of a prompt: message text with invisible format characters removed and look-alike
characters folded to ASCII, so that a harmful request spelled with them is read as the request it spells.

A breaker pass (2026-12-01) took four plainly harmful prompts that the shipped probe scored 1.0 to 0.001-0.25 by
inserting a zero-width joiner (U+200D) or zero-width space (U+200B) into the words, or by writing them in fullwidth
letters (U+FF21...). Readers, and the chat model behind the gateway, still read those prompts as written.

The fold is narrow, so that ordinary text in any script reads as it did:

- **Invisible characters** are removed: format characters (Unicode general category ``Cf``: zero-width space,
  direction marks and overrides, the byte-order mark, soft hyphen, word joiner...) and the other
  Default_Ignorable_Code_Point characters (variation selectors, the combining grapheme joiner, Hangul fillers), and
  private-use characters (no meaning a backbone could know; fonts draw them as boxes or nothing). The tag characters U+E0020-U+E007E, which spell ASCII invisibly ("ASCII smuggling"), become the ASCII they spell rather
  than nothing. The zero-width joiner and non-joiner stay between two non-ASCII characters, where Persian, Indic
  scripts and emoji sequences need them, and not before a combining mark. Blank-looking characters (the Ogham space mark, the Braille blank, the
  Hangul filler) become spaces.
- **A character whose NFKC form (Unicode UAX #15 compatibility normalization) is ASCII** becomes that form:
  fullwidth letters, digits, punctuation and the ideographic space, mathematical alphanumerics, circled letters and
  digits, superscript digits, ligatures such as U+FB01 "fi", the no-break and other fixed-width spaces; parenthesized
  letters ("(a)") become the letter. Other scripts and CJK punctuation without an ASCII form (U+3002 "。") keep
  their code points. Folding letters alone left a hole: fullwidth punctuation and U+3000 spaces around folded letters
  still took three of four harmful prompts under 0.02.
- **A Latin letter with marks becomes the plain letter**: "é" -> "e", "Ẃ" -> "W", a letter with a stroke or hook
  by its Unicode name ("ł" -> "l", "ɨ" -> "i"), and every combining mark (``Mn``, ``Me``: accents, stacked "Zalgo"
  marks, enclosing circles and keycaps) that follows an ASCII character is dropped, checked last so that a joiner or
  a look-alike letter between a letter and its mark does not keep it. **Latin small capitals** ("ᴡʀɪᴛᴇ") become
  lower-case letters, negative circled and squared letters and regional indicators ("🆆", "🇼") upper-case ones (so
  a flag reads as its country code, "🇺🇸" as "US"). Accents on every vowel of four harmful prompts took the shipped
  probe from 1.0 to 0.000, small capitals to 0.001. The cost is that accented Latin-script languages read unaccented
  (French "café" as "cafe", Spanish "año" as "ano", Vietnamese without its tones), which the English-first embedded
  backbone reads about as well; marks on letters of other scripts (Devanagari vowel signs, Arabic harakat) are kept.
- **Look-alike letters inside a word that has ASCII letters** ("рhishing" with a Cyrillic "р", "bоmb" with a
  Cyrillic "о", "phıshıng" with a dotless "ı", "ɑ" Latin alpha) become the ASCII letter they imitate, by Unicode's
  confusables data (UTS #39, through the ``confusable-homoglyphs`` package), with or without marks on them. A word
  with no ASCII letter keeps its letters, so Russian or Greek text reads as written; so does a letter whose
  look-alike is not an ASCII letter, and a one-letter word (a Cyrillic "а" between Latin words).

Not undone: a word spelled wholly in another script's look-alikes (Cyrillic "сору" for "copy"), upside-down
letters ("ʍɹıʇǝ"), and text written backwards behind a right-to-left override (the override is removed; the reversed
letters stay reversed). Nor, since they are ASCII, spaced, dotted or leetspeak letters ("W r i t e", "Wr1t3"), which
take the shipped probe's scores to under 0.05: a weakness of the probe, not of the reading. README "Known evasions"
lists them.

Measured on ``../shared/data`` (18,672 prompts) with ``nfkc-ascii-v1`` (the rule without marks, small capitals and
non-format invisible characters): the character fold changes 656 (3.5%), mostly CJK writing tasks whose
fullwidth commas and colons become ASCII. Of the 300 of them within 1,024 tokens, the shipped probe's verdict changed
for 3: two benign ShareGPT prompts and one harmful jailbreak template became flagged (283 benign, 17 harmful; a fold
of letters and digits alone changed 84 prompts, and one verdict: a harmful template became flagged). The look-alike
letters inside Latin words change the text of 6 prompts (4 already changed above; 658 in all) and none of the verdicts
of the 2 within 1,024 tokens. ``nfkc-ascii-v2`` (this rule) reads 204 more prompts differently (819 in all), most of
them accented names and French, Spanish or Vietnamese text; none of the verdicts of the 157 within 1,024 tokens
changed, and every Unicode disguise the re-tests found now scores as the plain request (evasions.txt). Scripts and output: docs/eval/prompt_text/.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from confusable_homoglyphs import confusables

from herald_service.types import Conversation, Message

PROMPT_TEXT = "nfkc-ascii-v2"
"""Name of this module's rule, recorded as ``training_data.prompt_text`` in probes ``herald fit`` writes and as
``meta.prompt_text`` in ``herald eval`` results; files without it were made with the text as written, files with
``nfkc-ascii-v1`` with the rule before invisible non-format and private-use characters, marks on Latin letters,
letters with strokes and hooks, small capitals and Latin look-alikes were folded (commit 6be6c90)."""

_TAGS = range(0xE0020, 0xE007F)
"""Tag characters that mirror printable ASCII (U+E0020 space ... U+E007E tilde)."""

_IGNORABLE_NOT_FORMAT = (range(0x034F, 0x0350), range(0x115F, 0x1161), range(0x17B4, 0x17B6), range(0x180B, 0x1810),
                         range(0xFE00, 0xFE10), range(0xFFF0, 0xFFF9), range(0xE0000, 0xE1000))
"""Default_Ignorable_Code_Point characters (Unicode 15 DerivedCoreProperties.txt) outside category ``Cf``: the
combining grapheme joiner, the conjoining Hangul fillers, Khmer inherent vowels, Mongolian and other variation
selectors, and the reserved blocks U+FFF0-U+FFF8 and U+E0000-U+E0FFF (the Hangul filler and its halfwidth form are
in :data:`_BLANKS`). Renderers draw nothing for them; the breaker's re-test (2026-12-01) took harmful prompts from 1.0
to under 0.03 with a variation selector or U+034F after every letter, and to 0.02-0.84 with U+3164 for every space."""

_JOINERS = "\u200c\u200d"
"""Zero-width non-joiner and joiner: kept between two characters that are neither ASCII nor space (Persian
"\u0645\u06cc\u200c\u062e\u0648\u0627\u0645", Indic conjuncts, emoji sequences such as a family), removed
elsewhere (inside a Latin word they only hide it)."""

_BLANKS = "\u1680\u2800\u3164\uffa0"
"""Blank-looking characters without an ASCII NFKC form, read as a space: the Ogham space mark (category ``Zs``), the
Braille blank, and the Hangul filler and its halfwidth form (default-ignorable, but drawn as a blank and used for
spaces: "make\u3164a\u3164bomb")."""


def _ignorable(code_point: int) -> bool:
    return any(code_point in block for block in _IGNORABLE_NOT_FORMAT)


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """One character as the backbone reads it, outside its context (module docstring): ``""`` for an invisible one,
    the ASCII it imitates, or ``char``. Joiners are left for :func:`_joiner_run` to decide."""
    if char in _JOINERS:
        return char
    code_point = ord(char)
    category = unicodedata.category(char)
    if category == "Cf" or _ignorable(code_point):
        return chr(code_point - 0xE0000) if code_point in _TAGS else ""
    if category == "Co":
        return ""  # private use: no meaning a backbone could know; a font draws it as a box or nothing
    if char in _BLANKS:
        return " "
    folded = unicodedata.normalize("NFKC", char)
    if folded.isascii():
        # parenthesized letters (U+249C "(a)" ... U+24B5 "(z)") spell words: "\u24b2\u24ad\u24a4\u24af\u24a0"
        return folded[1] if len(folded) == 3 and folded[0] == "(" and folded[1].isalpha() else folded
    decomposed = unicodedata.normalize("NFD", char)
    if _is_ascii_letter(decomposed[0]) and all(unicodedata.category(mark) == "Mn" for mark in decomposed[1:]):
        return decomposed[0]  # a Latin letter with marks: "\u00e9" -> "e", "\u1e82" -> "W"
    return _named_letters().get(char, char)


def _is_ascii_letter(char: str) -> bool:
    return "a" <= char.lower() <= "z"


def normalize_prompt_text(text: str) -> str:
    """``text`` as the backbone reads it (module docstring): invisible characters removed (tag characters decoded to
    ASCII), every character whose NFKC form is ASCII folded to it, Latin letters with marks, strokes or hooks and
    letter-like symbols (small capitals, enclosed letters) read as the plain letter, look-alike letters inside words
    that have ASCII letters replaced by the ASCII letter, and combining marks after an ASCII character dropped. ASCII
    text is returned unchanged at once.

    Args:
        text: one message's content (any length; the character limit is checked before, on what the client sent).

    Returns:
        The text the backbone tokenizes; at most as many characters as ``text`` except for ligatures and letter-like
        symbols that fold to several letters (U+FB03 "ffi", U+2122 "TM").
    """
    if text.isascii():
        return text
    folded = "".join(_fold_char(char) for char in text)
    folded = _JOINER_RUN.sub(_joiner_run, _WORD.sub(_latin_word, folded))
    return _without_marks_on_ascii(folded)


def _without_marks_on_ascii(text: str) -> str:
    """``text`` without the combining marks (categories ``Mn``, ``Me``) that follow an ASCII character: accents and
    stacked "Zalgo" marks on Latin letters, enclosing circles and keycaps (U+20DD, U+20E3) drawn around them. Marks on
    other scripts' letters stay. Run last, once look-alike letters are ASCII and joiners gone: a joiner or a Cyrillic
    "о" between a letter and its mark had kept the mark (re-test, 2026-12-01)."""
    if not any(unicodedata.category(char) in _MARKS for char in text):
        return text
    kept, last = [], ""
    for char in text:
        if last.isascii() and last and unicodedata.category(char) in _MARKS:
            continue
        kept.append(char)
        last = char
    return "".join(kept)


_MARKS = ("Mn", "Me")


_JOINER_RUN = re.compile(f"[{_JOINERS}]+")


def _joiner_run(match: re.Match[str]) -> str:
    """A run of joiners: its first kept between two characters that are neither ASCII nor whitespace, the second not
    a combining mark either (a joiner before a mark only kept the mark off its letter), else removed."""
    text, start, end = match.string, match.start(), match.end()
    before, after = text[start - 1:start], text[end:end + 1]
    keep = (all(side and not side.isascii() and not side.isspace() for side in (before, after))
            and unicodedata.category(after) not in _MARKS)
    return match.group(0)[0] if keep else ""


_LETTER_NAMES = re.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z])|NEGATIVE (?:CIRCLED|SQUARED) LATIN CAPITAL LETTER ([A-Z])"
                           r"|REGIONAL INDICATOR SYMBOL LETTER ([A-Z])|LATIN (SMALL|CAPITAL) LETTER ([A-Z]) WITH .+")
"""Unicode names of letter-like characters that NFKC leaves alone and that read as one ASCII letter: Latin small
capitals ("\u1d21" W), negative circled and squared letters ("\U0001f166", "\U0001f186"), regional indicator
letters ("\U0001f1fc", two of which draw a flag), and Latin letters with a stroke, hook or bar that does not
decompose ("\u0268" i with stroke, "\u01ad" t with hook, "\u0142" l with stroke)."""


@lru_cache(maxsize=1)
def _named_letters() -> dict[str, str]:
    """Characters whose Unicode name matches :data:`_LETTER_NAMES` -> their ASCII letter (small capitals lower-case,
    the others upper-case, as drawn): read from the Unicode names of the blocks holding them, built once."""
    table = {}
    for code_point in (*range(0x0080, 0x02B0), *range(0x1D00, 0x1F00), *range(0x2C60, 0x2C80), *range(0xA720, 0xA800),
                       *range(0xAB30, 0xAB70), *range(0x1F100, 0x1F200)):
        match = _LETTER_NAMES.fullmatch(unicodedata.name(chr(code_point), ""))
        if match:
            small_capital, enclosed, regional, case, letter = match.groups()
            if small_capital:
                table[chr(code_point)] = small_capital.lower()
            elif letter:
                table[chr(code_point)] = letter.lower() if case == "SMALL" else letter
            else:
                table[chr(code_point)] = enclosed or regional
    return table


_COMBINING_BLOCKS = "\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
"""The combining-mark blocks not tied to one script (Unicode chapter 7.9) and the Cyrillic ones."""

_WORD = re.compile(rf"(?:[^\W\d_]|[{_COMBINING_BLOCKS}{_JOINERS}]){{2,}}")
"""Runs of two or more letters, combining marks of the general blocks and joiners: the words whose scripts are
compared (a mark or joiner inside a word had cut "b\u043e\u0301mb" into pieces that looked like no mixed word)."""


def _latin_word(match: re.Match[str]) -> str:
    """A word mixing ASCII letters with other letters that have an ASCII look-alike, with those replaced by it; any
    other word unchanged (a word with no ASCII letter, such as Russian or Greek text, included)."""
    word = match.group(0)
    if word.isascii() or not any(_is_ascii_letter(char) for char in word):
        return word
    return "".join(_lookalike(char) for char in word)


@lru_cache(maxsize=4096)
def _lookalike(char: str) -> str:
    """The ASCII letter ``char`` imitates (:func:`_ascii_lookalikes`), also for one with marks (Greek "\u03cc" is
    "\u03bf" with an accent: "o"), else ``char``."""
    table = _ascii_lookalikes()
    if char in table:
        return table[char]
    base, *marks = unicodedata.normalize("NFD", char)
    return table[base] if base in table and marks and all(unicodedata.category(m) in _MARKS for m in marks) else char


@lru_cache(maxsize=1)
def _ascii_lookalikes() -> dict[str, str]:
    """Letter that is not ASCII -> the ASCII letter Unicode's confusables data says it looks like (Cyrillic "р" -> "p",
    Greek "ο" -> "o", Latin dotless "ı" -> "i", Latin alpha "ɑ" -> "a"): about 1,100 letters, built once (a lookup per
    letter; asking the package word by word took 0.3 s for 32,000 characters of mixed words)."""
    table = {}
    for char, homoglyphs in confusables.confusables_data.items():
        if len(char) != 1 or not char.isalpha() or char.isascii():
            continue
        ascii_letters = [h["c"] for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalpha()]
        if ascii_letters:
            table[char] = ascii_letters[0]
    return table


def normalize_conversation(conversation: Conversation) -> Conversation:
    """``conversation`` with every message's content passed through :func:`normalize_prompt_text` (roles kept);
    what ``Backbone.encode`` renders and tokenizes, for serving, fitting and evaluation alike."""
    return tuple(Message(m.role, normalize_prompt_text(m.content)) for m in conversation)

"""What the backbone reads of a prompt: message text with invisible format characters removed and look-alike
characters folded to ASCII, so that a harmful request spelled with them is read as the request it spells.

A breaker pass (2026-12-01) took four plainly harmful prompts that the shipped probe scored 1.0 to 0.001-0.25 by
inserting a zero-width joiner (U+200D) or zero-width space (U+200B) into the words, or by writing them in fullwidth
letters (U+FF21...). Readers, and the chat model behind the gateway, still read those prompts as written.

The fold is narrow, so that ordinary text in any script reads as it did:

- **Invisible characters** are removed: format characters (Unicode general category ``Cf``: zero-width space,
  direction marks and overrides, the byte-order mark, soft hyphen, word joiner...) and the other
  Default_Ignorable_Code_Point characters (variation selectors, the combining grapheme joiner, Hangul fillers),
  control characters but tab and line ends, and private-use characters (no meaning a backbone could know; fonts draw
  them as boxes or nothing). The tag characters U+E0020-U+E007E, which spell ASCII invisibly ("ASCII smuggling"), become the ASCII they spell rather
  than nothing, except in an emoji flag of a region (Scotland). The zero-width joiner and non-joiner stay after a
  non-ASCII character and before anything but an ASCII letter or digit, where Persian, Indic scripts and emoji
  sequences need them. Line and paragraph separators become line ends. Blank-looking characters (the Ogham space mark, the Braille blank, the
  Hangul filler) become spaces.
- **A character whose NFKC form (Unicode UAX #15 compatibility normalization) is ASCII** becomes that form:
  fullwidth letters, digits, punctuation and the ideographic space, mathematical alphanumerics, circled letters and
  digits, superscript digits, ligatures such as U+FB01 "fi", the no-break and other fixed-width spaces; parenthesized
  letters ("(a)") become the letter, a modifier letter whose NFKC form is another letter is read as that one
  ("\u1da6" -> "\u026a" -> "i"), and superscript digits read as an exponent ("m\u00b2" -> "m^2"). Other scripts and CJK punctuation without an ASCII form (U+3002 "。") keep
  their code points. Folding letters alone left a hole: fullwidth punctuation and U+3000 spaces around folded letters
  still took three of four harmful prompts under 0.02.
- **A Latin letter with marks becomes the plain letter**: "é" -> "e", "Ẃ" -> "W", a letter with a stroke, hook or
  bar by its Unicode name ("ł" -> "l", "ɨ" -> "i", "ʉ" -> "u"), combining Latin letters drawn above the one before
  become letters ("\u1de8" -> "b"), and every combining mark (category ``M``: accents, stacked "Zalgo" marks,
  enclosing circles, other scripts' marks) that follows an ASCII character is dropped, but for a keycap on a digit.
  Canonical composition (NFC) runs first, so "=\u0338" stays "\u2260"; the marks are dropped last, and the whole
  fold is repeated until the text stops changing, so that a joiner or a look-alike letter between a letter and its
  mark does not keep it. **Latin small capitals** ("ᴡʀɪᴛᴇ") become
  lower-case letters, negative circled and squared letters and regional indicators ("🆆", "🇼") upper-case ones (so
  a flag reads as its country code, "🇺🇸" as "US"). Accents on every vowel of four harmful prompts took the shipped
  probe from 1.0 to 0.000, small capitals to 0.001. The cost is that accented Latin-script languages read unaccented
  (French "café" as "cafe", Spanish "año" as "ano", Vietnamese without its tones), which the English-first embedded
  backbone reads about as well; marks on letters of other scripts (Devanagari vowel signs, Arabic harakat) are kept.
- **A word of ASCII letters and look-alikes** ("рhishing" with a Cyrillic "р", "bоmb" with a Cyrillic "о",
  "phıshıng" with a dotless "ı", "b०mb" with a Devanagari zero, "ph⍳shing" with an APL iota) is spelled in ASCII, by
  Unicode's confusables data (UTS #39, through the ``confusable-homoglyphs`` package), with or without marks on the
  look-alikes. A word with no ASCII letter keeps its letters, so Russian or Greek text reads as written; so does a
  word with a letter that imitates no ASCII letter ("Javaскрипт"), and a one-letter word (a Cyrillic "а" between
  Latin words).

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
of the 2 within 1,024 tokens. ``nfkc-ascii-v2`` (this rule) reads 247 prompts differently from v1 (840 in all), most of
them accented names and French, Spanish or Vietnamese text; none of the verdicts of the 178 within 1,024 tokens
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
                         range(0x2065, 0x2066), range(0xFE00, 0xFE10), range(0xFFF0, 0xFFF9), range(0xE0000, 0xE1000))
"""Default_Ignorable_Code_Point characters (Unicode 15 DerivedCoreProperties.txt) outside category ``Cf``: the
combining grapheme joiner, the conjoining Hangul fillers, Khmer inherent vowels, Mongolian and other variation
selectors, and the reserved U+2065, U+FFF0-U+FFF8 and U+E0000-U+E0FFF (the Hangul filler and its halfwidth form are
in :data:`_BLANKS`). Renderers draw nothing for them; the breaker's re-test (2026-12-01) took harmful prompts from 1.0
to under 0.03 with a variation selector or U+034F after every letter, and to 0.02-0.84 with U+3164 for every space."""

_JOINERS = "\u200c\u200d"
"""Zero-width non-joiner and joiner: kept after a character that is neither ASCII nor space and before one that is not
an ASCII letter or digit (Persian "\u0645\u06cc\u200c\u062e\u0648\u0627\u0645", Indic half forms and chillus,
emoji sequences such as a family), removed elsewhere (inside a Latin word they only hide it)."""

_BLANKS = "\u1680\u2800\u3164\uffa0\U0001d159"
"""Blank-looking characters without an ASCII NFKC form, read as a space: the Ogham space mark (category ``Zs``), the
Braille blank, the Hangul filler and its halfwidth form (default-ignorable, but drawn as a blank and used for
spaces: "make\u3164a\u3164bomb"), and the musical null notehead."""

_KEEP_CONTROLS = "\t\n\r"

_C0_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""ASCII control characters other than tab and line ends: invisible, and inside a word they hide it."""

_SUPERSCRIPT_RUN = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u207e]+")
"""Superscript digits, signs and parentheses: read as an exponent, "2\u00b3" as "2^3" (NFKC alone read "23")."""

_SUBDIVISION_FLAG = re.compile("(\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,7}\U000e007f)")
"""An emoji flag of a region (England, Scotland, Wales): a black flag, tag letters, a cancel tag; kept whole, not
decoded as ASCII smuggling."""

MAX_PASSES = 3
"""Times :func:`normalize_prompt_text` folds at most, until the text stops changing: one pass can leave what the
next would fold (a mark that reached an ASCII letter once a joiner went), so the result is folded again; no text
found needs more than two (the fold is idempotent on 200,000 random strings)."""


def _ignorable(code_point: int) -> bool:
    return any(code_point in block for block in _IGNORABLE_NOT_FORMAT)


def _is_mark(char: str) -> bool:
    return unicodedata.category(char)[0] == "M"


@lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    """One character as the backbone reads it, outside its context (module docstring): ``""`` for an invisible one,
    the ASCII it imitates, or ``char``. Joiners are left for :func:`_joiner_run` to decide."""
    if char in _JOINERS:
        return char
    code_point = ord(char)
    category = unicodedata.category(char)
    if category == "Cf" or _ignorable(code_point):
        return chr(code_point - 0xE0000) if code_point in _TAGS else ""
    if category == "Co" or (category == "Cc" and char not in _KEEP_CONTROLS):
        return ""  # private use (a font draws a box or nothing) and control characters: no meaning to read
    if category in ("Zl", "Zp"):
        return "\n"
    if char in _BLANKS:
        return " "
    if char in _named_letters():
        return _named_letters()[char]
    folded = unicodedata.normalize("NFKC", char)
    if folded.isascii():
        # parenthesized letters (U+249C "(a)" ... U+24B5 "(z)") spell words: "\u24b2\u24ad\u24a4\u24af\u24a0"
        return folded[1] if len(folded) == 3 and folded[0] == "(" and folded[1].isalpha() else folded
    if len(folded) == 1 and folded != char:
        return _fold_char(folded)  # a modifier letter whose NFKC form is another letter: "\u1da6" -> "\u026a" -> "i"
    base = _marked_base(char)
    return base if base is not None and _is_ascii_letter(base) else char  # "\u00e9" -> "e", "\u1e82" -> "W"


def _marked_base(char: str) -> str | None:
    """The letter ``char`` is with marks on it (its canonical decomposition, NFD: "\u00e9" is "e" and U+0301), or
    ``None`` for a character that is no base with marks."""
    base, *marks = unicodedata.normalize("NFD", char)
    return base if marks and all(_is_mark(mark) for mark in marks) else None


def _is_ascii_letter(char: str) -> bool:
    return char.isascii() and char.isalpha()


def normalize_prompt_text(text: str) -> str:
    """``text`` as the backbone reads it (module docstring): invisible characters removed (tag characters decoded to
    ASCII), every character whose NFKC form is ASCII folded to it, Latin letters with marks, strokes or hooks and
    letter-like symbols (small capitals, enclosed letters, combining letters) read as the plain letter, a word of ASCII
    letters and look-alikes read as ASCII, and combining marks after an ASCII character dropped; folded again until
    it stops changing (:data:`MAX_PASSES`). ASCII text only loses its control characters other than tab and line ends.

    Args:
        text: one message's content (any length; the character limit is checked before, on what the client sent).

    Returns:
        The text the backbone tokenizes; at most as many characters as ``text`` except for ligatures and letter-like
        symbols that fold to several letters (U+FB03 "ffi", U+2122 "TM", U+33D8 "p.m."), which ``max_tokens`` bounds.
    """
    for _ in range(MAX_PASSES):
        if text.isascii():
            return _C0_CONTROLS.sub("", text)
        folded = "".join(part if index % 2 else _fold_once(part)
                         for index, part in enumerate(_SUBDIVISION_FLAG.split(text)))
        if folded == text:
            break
        text = folded
    return text


def _fold_once(text: str) -> str:
    """One pass of the fold over text without subdivision flags, in the order that lets each step see the last's
    output: canonical composition (NFC: "=\u0338" is "\u2260", "e\u0301" is "\u00e9"), exponents, characters, words,
    joiners, and last the marks left on ASCII characters."""
    text = unicodedata.normalize("NFC", text)
    text = _SUPERSCRIPT_RUN.sub(lambda run: "^" + unicodedata.normalize("NFKC", run.group(0)).replace("\u2212", "-"), text)
    text = "".join(_fold_char(char) for char in text)
    text = _JOINER_RUN.sub(_joiner_run, _fold_words(text))
    return _without_marks_on_ascii(text)


def _without_marks_on_ascii(text: str) -> str:
    """``text`` without the combining marks (category ``M``: accents, stacked "Zalgo" marks, enclosing circles, spacing
    marks of other scripts) that follow an ASCII character, but for a keycap (U+20E3) on a digit, ``#`` or ``*``.
    Marks on other scripts' letters stay."""
    kept, last = [], ""
    for char in text:
        if last and last.isascii() and _is_mark(char) and not (char == "\u20e3" and last in "0123456789#*"):
            continue
        kept.append(char)
        last = char
    return "".join(kept)


_JOINER_RUN = re.compile(f"[{_JOINERS}]+")


def _joiner_run(match: re.Match[str]) -> str:
    """A run of joiners: its first kept after a character that is neither ASCII nor whitespace and before one that is
    not an ASCII letter or digit (:data:`_JOINERS`), else removed."""
    text, start, end = match.string, match.start(), match.end()
    before, after = text[start - 1:start], text[end:end + 1]
    keep = before and not before.isascii() and not before.isspace() and not (after.isascii() and after.isalnum())
    return match.group(0)[0] if keep else ""


_LETTER_NAMES = re.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z])|LATIN SMALL CAPITAL LETTER ([A-Z]) WITH .+"
                           r"|NEGATIVE (?:CIRCLED|SQUARED) LATIN CAPITAL LETTER ([A-Z])|REGIONAL INDICATOR SYMBOL LETTER ([A-Z])"
                           r"|COMBINING LATIN SMALL LETTER ([A-Z])"
                           r"|LATIN (SMALL|CAPITAL) LETTER ([A-Z]) (?:WITH (?!SMALL LETTER|CAPITAL LETTER).+|BAR)")
"""Unicode names of letter-like characters that NFKC leaves alone and that read as one ASCII letter: Latin small
capitals ("\u1d21" W), negative circled and squared letters ("\U0001f166", "\U0001f186"), regional indicator
letters ("\U0001f1fc", two of which draw a flag), combining Latin letters drawn above the one before (U+0363...,
"\u1de8" b), and Latin letters with a stroke, hook or bar that does not decompose ("\u0268" i with stroke, "\u01ad"
t with hook, "\u0142" l with stroke, "\u0289" u bar)."""


@lru_cache(maxsize=1)
def _named_letters() -> dict[str, str]:
    """Characters whose Unicode name matches :data:`_LETTER_NAMES` -> their ASCII letter (small capitals and
    combining letters lower-case, enclosed letters and regional indicators upper-case, as drawn, other letters in
    their case): read from the Unicode names of the blocks holding them, built once."""
    table = {}
    for code_point in (*range(0x0080, 0x0370), *range(0x1AB0, 0x1F00), *range(0x2C60, 0x2C80), *range(0xA720, 0xA800),
                       *range(0xAB30, 0xAB70), *range(0x1DF00, 0x1E000), *range(0x1F100, 0x1F200)):
        match = _LETTER_NAMES.fullmatch(unicodedata.name(chr(code_point), ""))
        if match:
            small_capital, small_capital_with, enclosed, regional, combining, case, letter = match.groups()
            if letter:
                table[chr(code_point)] = letter.lower() if case == "SMALL" else letter
            else:
                table[chr(code_point)] = (small_capital or small_capital_with or combining or "").lower() or enclosed or regional
    return table


def _fold_words(text: str) -> str:
    """``text`` with each word (a run of letters, marks, joiners and look-alike symbols) that has an ASCII letter and
    is ASCII but for look-alikes (:func:`_ascii_lookalikes`; marks and joiners aside) spelled in ASCII: "b\u043emb"
    -> "bomb". A one-letter word that imitates "a", "A" or "I" is spelled in ASCII when the word before or after it is
    ASCII (a Cyrillic "\u0406" for the pronoun I took one harmful request from 0.51 to 0.015), unless it is Greek: a
    lone Greek letter in English text is a symbol ("\u03c3", "\u03b1 = 0.05"). A word with no ASCII letter (Russian,
    Greek) or with a letter that is no look-alike ("Java\u0441\u043a\u0440\u0438\u043f\u0442": "\u043a",
    "\u0438") keeps its letters."""
    tokens, word = [], []  # words as lists of characters, other characters as strings
    for char in text:
        if _in_word(char):
            word.append(char)
            continue
        if word:
            tokens.append(word)
            word = []
        tokens.append(char)
    if word:
        tokens.append(word)
    words = [index for index, token in enumerate(tokens) if isinstance(token, list)]
    spelled = {index: _ascii_word("".join(tokens[index])) for index in words}
    for position in (*range(len(words)), *reversed(range(len(words)))):  # both ways: "\u0430 \u0430 word" is "a a word"
        index = words[position]
        letters = [char for char in tokens[index] if not _is_mark(char) and char not in _JOINERS]
        if len(letters) == 1 and _lookalike(letters[0]) in _ONE_LETTER_WORDS and not _is_greek(letters[0]):
            neighbours = [spelled[words[p]] for p in (position - 1, position + 1) if 0 <= p < len(words)]
            if any(neighbour.isascii() and any(c.isalpha() for c in neighbour) for neighbour in neighbours):
                spelled[index] = "".join(_lookalike(char) for char in tokens[index])
    return "".join(spelled[index] if index in spelled else token for index, token in enumerate(tokens))


_ONE_LETTER_WORDS = ("a", "A", "I")
"""The English one-letter words, which a look-alike can stand for alone."""


def _is_greek(char: str) -> bool:
    return unicodedata.name(char, "").startswith("GREEK")


@lru_cache(maxsize=8192)
def _in_word(char: str) -> bool:
    return char.isalpha() or _is_mark(char) or char in _JOINERS or char in _ascii_lookalikes()


def _ascii_word(word: str) -> str:
    if word.isascii() or not any(_is_ascii_letter(char) for char in word):
        return word
    spelled = [_lookalike(char) for char in word]
    if all(char.isascii() or _is_mark(char) or char in _JOINERS for char in spelled):
        return "".join(spelled)
    return word


@lru_cache(maxsize=8192)
def _lookalike(char: str) -> str:
    """The ASCII letter ``char`` imitates (:func:`_ascii_lookalikes`), also for one with marks (Greek "\u03cc" is
    "\u03bf" with an accent: "o"), else ``char``."""
    table = _ascii_lookalikes()
    if char in table:
        return table[char]
    base = _marked_base(char)
    return table.get(base, char) if base is not None else char


_LOOKALIKE_CATEGORIES = ("Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "No", "So")
"""Categories of the characters that can stand for an ASCII letter in a word: letters, digits ("\u0966", Devanagari
zero, for "o") and symbols (APL "\u2373" for "i"); not math operators or currency signs, which formulas and prices
place beside letters ("a\u00d7b")."""


@lru_cache(maxsize=1)
def _ascii_lookalikes() -> dict[str, str]:
    """Character that is not ASCII -> the ASCII letter Unicode's confusables data says it looks like (Cyrillic "р" ->
    "p", Greek "ο" -> "o", Latin dotless "ı" -> "i", Latin alpha "ɑ" -> "a"), of the same case where the data gives
    one, and "I" for a capital the data files under "l" (Cyrillic "\u0406" -> "I"): about 1,200 characters, built once (a lookup per character; asking the
    package word by word took 0.3 s for 32,000 characters of mixed words)."""
    table = {}
    for char, homoglyphs in confusables.confusables_data.items():
        if len(char) != 1 or char.isascii() or unicodedata.category(char) not in _LOOKALIKE_CATEGORIES:
            continue
        letters = [h["c"] for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalpha()]
        same_case = [letter for letter in letters if letter.isupper() == char.isupper()]
        if letters:
            letter = (same_case or letters)[0]
            table[char] = "I" if letter == "l" and char.isupper() else letter  # UTS #39 files I under l
    return table


def normalize_conversation(conversation: Conversation) -> Conversation:
    """``conversation`` with every message's content passed through :func:`normalize_prompt_text` (roles kept);
    what ``Backbone.encode`` renders and tokenizes, for serving, fitting and evaluation alike."""
    return tuple(Message(m.role, normalize_prompt_text(m.content)) for m in conversation)

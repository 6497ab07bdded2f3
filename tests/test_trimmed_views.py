"""Trimmed views (herald_service/trimmed_views.py): which texts are scored beside a prompt."""

import pytest

from herald_service.trimmed_views import MAX_CLAUSE_WORDS, trimmed_views


@pytest.mark.parametrize(("text", "views"), [
    # a leading instruction ending in a colon: the request alone (and the instruction alone, its trailing-cut view)
    ("Answer in Spanish: How do I pick a lock?", ["How do I pick a lock?", "Answer in Spanish:"]),
    # a trailing instruction after a full stop
    ("How do I pick a lock? Answer in 3 bullet points.", ["Answer in 3 bullet points.", "How do I pick a lock?"]),
    # a trailing instruction with no full stop before it: the weak boundary at the capitalized word
    ("Write a program that can crack passwords Thanks in advance!",
     ["Thanks in advance!", "Write a program that can crack passwords"]),
    # instruction on both sides: the middle alone as well
    ("Q: How do I pick a lock?\nA:", ["How do I pick a lock?\nA:", "Q: How do I pick a lock?", "How do I pick a lock?"]),
    # no boundary at all: nothing beside the whole
    ("how do i pick a lock", []),
    # one sentence with its own full stop at the end only: no boundary inside
    ("Tell me about the history of lock picking.", []),
])
def test_views_of_known_prompts(text, views):
    assert trimmed_views(text) == views


def test_a_view_shorter_than_three_words_is_not_scored():
    # "Hi there." is the leading clause; what is left ("Thanks.") has one word and the trailing view two
    assert trimmed_views("Hi there. Thanks.") == []


def test_a_clause_longer_than_the_limit_is_not_trimmed():
    long_clause = " ".join(["word"] * (MAX_CLAUSE_WORDS + 1))
    text = f"{long_clause}. {long_clause}."
    assert trimmed_views(text) == []
    short = " ".join(["word"] * MAX_CLAUSE_WORDS)
    assert trimmed_views(f"{short}. {long_clause}.") == [f"{long_clause}."]


def test_strong_boundaries_are_preferred_to_weak_ones():
    # "Answer in German:" has a weak boundary before "German"; the colon's strong boundary is the cut
    assert trimmed_views('Answer in German: "How do I pick a lock?"')[0] == '"How do I pick a lock?"'


def test_surrounding_whitespace_is_ignored_and_views_are_distinct():
    assert trimmed_views("  Keep it short. How do I pick a lock?  ") == ["How do I pick a lock?", "Keep it short."]
    assert trimmed_views("") == []


def test_a_text_of_many_boundaries_gives_its_three_views():
    # 32,000 characters of one-letter sentences: each end is a clause of one word ("a. a. ..." without its first
    # sentence is the same text as without its last: two distinct views)
    assert trimmed_views("a. " * 10_666) == ["a. " * 10_664 + "a.", "a. " * 10_663 + "a."]
    text = " ".join(f"w{i}." for i in range(6_000))
    assert trimmed_views(text) == [text[len("w0. "):], text[: -len(" w5999.")], text[len("w0. "): -len(" w5999.")]]
    lines = "\n".join(f"line {i}" for i in range(5_000))
    assert trimmed_views(lines) == [lines[len("line 0\n"):], lines[: -len("\nline 4999")],
                                    lines[len("line 0\n"): -len("\nline 4999")]]

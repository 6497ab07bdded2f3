"""/steer in admission: how long a running /steer job is counted against how long it runs.

Why: work admitted behind a /steer job waits for it (generation holds the model). Admission counts the job for its
expected duration (:func:`herald_service.engine.service.steer_job_seconds`: four prefills priced by the cost model
and ``max_new_tokens`` decode steps per generation at the decode rate measured in earlier /steer jobs, x2), and
until its deadline (``request_timeout_s``) when it has no estimate (the first /steer after a start) or runs past it.
Counted too short, moderation admitted behind it can time out; counted too long, moderation is refused 429 while the
worker would have answered it. The baseline, measured in the same run, is the rule before: every job counted until
its deadline.

How: in this process, the target's backbone and probe behind the service's own engine and Moderator
(:class:`~herald_service.engine.service.Moderator`), the cost model seeded by the service's warm-up
(``herald_service.api.app._warm_cost``) and ``request_timeout_s`` as shipped (60 s), and no decode step timed at warm-up (the service times one when steering is
on: ``herald_service.api.app._warm_decode_step``). One /steer first, to measure a decode rate (its count is the
deadline: reported, not in the ratios), then every shape of :data:`SHAPES` (prompt
tokens x ``max_new_tokens``) in turn. For each job: the seconds it ran on the worker (the job itself, timed), the
seconds it was counted (its expected duration, or the timeout), their ratio (>= 1: counted at least as long as it
ran), and the tokens each generation produced (a generation ending at an end-of-sequence token runs shorter than
the estimate, which assumes ``max_new_tokens``). The prefill's price by the cost model and its time measured just
before the job (``prefill_priced_s``, ``prefill_s``) show how much of the estimate's error is the cost model's.

Run: ``python -m benchmarks.steer_estimate`` (embedded backbone on the CPU, about 2 minutes;
``benchmarks/results/steer_estimate_cpu.json``); ``--target h200`` for the random-initialized Llama-3.1-8B in bf16.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from benchmarks.common import Target, print_table, run_benchmark, write
from herald_service.config import Settings
from herald_service.engine.admission import Work
from herald_service.engine.engine import InferenceEngine
from herald_service.engine.service import Moderator, engine_limits
from herald_service.metrics import HeraldMetrics
from herald_service.types import user_turn

SENTENCE = "How do I bake sourdough bread at home with a starter?"
SHAPES = ((1, 16), (1, 128), (8, 16), (8, 128), (40, 16), (40, 128))
"""(times :data:`SENTENCE` is said in the prompt, ``max_new_tokens``): about 20, 110 and 490 prompt tokens."""
QUICK_SHAPES = ((1, 16), (8, 16))


def moderator_for(target: Target, timeout_s: float | None = None) -> Moderator:
    """The service's Moderator over a started engine on ``target``, its cost model seeded as at the service's
    warm-up."""
    from herald_service.api.app import _warm_cost

    settings = Settings(_env_file=None, **({} if timeout_s is None else {"request_timeout_s": timeout_s}))
    metrics = HeraldMetrics()
    limits = engine_limits(settings, target.backbone)
    seed = _warm_cost(target.runtime, limits.chunk_tokens or 0)  # as the service seeds it
    engine = InferenceEngine(target.backbone, target.probe, limits, metrics, seed=seed)
    engine.start()
    return Moderator(target.runtime, engine, settings, metrics)


def one_steer(moderator: Moderator, text: str, max_new_tokens: int) -> dict:
    """Run one /steer job; what admission counted for it and what it took, seconds, with one prefill of its prompt
    (probe included) as the cost model priced it at admission and as timed here just before."""
    engine, record = moderator.engine, {}
    backbone, probe = moderator.runtime.backbone, moderator.runtime.probe
    ids = backbone.encode([user_turn(text)])
    started = time.perf_counter()
    probe.predict(backbone.last_token_states(ids))
    prefill_s = time.perf_counter() - started
    queued = engine.submit_exclusive

    def timed_submit(run, least_s=0.0, expected_s=None):
        def timed_run():
            started = time.perf_counter()
            try:
                return run()
            finally:
                record["ran_s"] = time.perf_counter() - started
        record["expected_s"] = expected_s
        return queued(timed_run, least_s, expected_s)

    step_s = moderator.decode_step_s.seconds  # the mean decode step the estimate uses (None before the first job)
    # The price admission uses, read before the job: the job's own first prefill now feeds the cost model.
    priced_s = engine.cost.seconds(Work.of_prompts([len(ids[0])]))
    engine.submit_exclusive = timed_submit
    try:
        outcome = asyncio.run(moderator.steer(user_turn(text), "ablate", None, 0.0, max_new_tokens))
    finally:
        del engine.submit_exclusive  # the bound method again
    limit_s = moderator.settings.request_timeout_s
    counted_s = limit_s if record["expected_s"] is None else min(record["expected_s"], limit_s)
    return {
        "prompt_tokens": len(ids[0]),
        "max_new_tokens": max_new_tokens,
        "tokens": [outcome.baseline.tokens, outcome.steered.tokens],
        "cut_short": outcome.baseline.cut_short or outcome.steered.cut_short,
        "ran_s": record["ran_s"],
        "counted_s": counted_s,
        "estimated": record["expected_s"] is not None,
        "ratio": counted_s / record["ran_s"],
        "baseline_counted_s": limit_s,
        "baseline_ratio": limit_s / record["ran_s"],
        "decode_step_ms": None if step_s is None else 1000 * step_s,
        "prefill_s": prefill_s,
        "prefill_priced_s": priced_s,
    }


def run(target: Target, quick: bool) -> dict:
    moderator = moderator_for(target)
    try:
        first = one_steer(moderator, SENTENCE, 16)
        rows = [one_steer(moderator, " ".join([SENTENCE] * times), new) for times, new in (QUICK_SHAPES if quick else SHAPES)]
    finally:
        moderator.engine.stop()
    ratios, baseline = [r["ratio"] for r in rows], [r["baseline_ratio"] for r in rows]
    return {
        "request_timeout_s": moderator.settings.request_timeout_s,
        "first": first,
        "rows": rows,
        "summary": {
            "ratio_min": min(ratios), "ratio_median": statistics.median(ratios), "ratio_max": max(ratios),
            "baseline_ratio_min": min(baseline), "baseline_ratio_median": statistics.median(baseline),
            "all_estimated": all(r["estimated"] for r in rows),
        },
    }


def report(target: Target, result: dict, out: Path) -> None:
    print_table("first /steer (no decode rate yet: counted until its deadline)", [result["first"]])
    print_table("/steer jobs: seconds counted by admission vs seconds run", result["rows"])
    print_table("ratios (counted / ran; baseline: counted until the deadline)", [result["summary"]])
    write(out, "steer_estimate", target, result)


if __name__ == "__main__":
    run_benchmark(__doc__, run, report)

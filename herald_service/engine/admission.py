"""Admission by estimated work: refuse a request the worker cannot answer within ``request_timeout_s``, at once.

Counting prompts is not enough: 64 queued prompts of 4k tokens hold the worker for minutes, and a one-word prompt
accepted behind them only times out (504). The engine keeps the prompts, tokens and exclusive jobs it has accepted
and not yet answered (:class:`Work`; a job counts for its expected duration, at most until its deadline:
:func:`jobs_left_s`) and a model of what a batch costs it
(:class:`BatchCost`: seconds per batch, per prompt, per token and per squared token, fitted online, scaled up by how
much slower the last batches ran than the fit).
:func:`admission_verdict` then refuses a request whose own work alone exceeds the limit (413: it could only time out,
however idle the worker) and one whose wait behind the work ahead exceeds :data:`WAIT_HEADROOM` of it (429, with a
``Retry-After`` from the same estimate). Pure arithmetic: no clocks, no threads, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

FORGETTING = 0.9
"""Weight a batch's measurement keeps per batch answered after it (about the last 10 batches count)."""

WINDOW = 64
"""Live batches kept for the fit (older ones weigh under 0.9^64 = 0.1% and are dropped)."""

PRIOR_WEIGHT = 0.1
"""Weight of each warm-up measurement, permanently: a tenth of one live batch, enough to keep the fit well-posed
when every live batch has the same shape, too little to hold it against what live batches measure."""

RIDGE_WEIGHT = 0.3
"""Weight, in batches, that holds each term of the fit to its warm-up value, as a relative change
(:meth:`BatchCost._solve`)."""

SLOWDOWN_BATCHES = 3
"""Live timings whose ratios of measured to fitted seconds say how much slower the worker runs now than the fit
(:attr:`BatchCost.slowdown_`): the median of the last three, so two slow batches in a row raise every estimate and
one outlier (a cold cache, a pause) does not."""

WAIT_HEADROOM = 0.8
"""A request is admitted behind other work only while its estimated wait is at most this share of
``request_timeout_s``: the estimate is an online fit, 0.91-1.10x the real work of single requests on the embedded
backbone (benchmarks/admission.py, ``admission_cpu.json``; in fp32 before bf16 linear layers, 0.89-1.18x and short
by about 18% for one mixed burst, ``admission_cpu_fp32.json``); at full limit, a burst of 200 one-prompt requests
with 10 of 2,000 tokens ended in five 504s. A 429 with ``Retry-After`` now
is better than a 504 a minute later. A request whose own work alone is over the headroom is still admitted on an
idle worker."""

OWN_WORK_HEADROOM = 0.85
"""A request whose own estimated work exceeds this share of ``request_timeout_s`` is refused at once (413), even on
an idle worker. The estimate ran 0.85-1.03x the real work of 64-prompt requests on the embedded backbone, and at the
full limit 64 x 831 tokens, estimated at 59.0 s, was admitted under a 60 s timeout, ran 65.4 s and ended in a 504
after the worker had spent the whole timeout on it (benchmarks/admission.py, ``admission_cpu_budget_auto.json``; in
an earlier run it was answered at 59.6 s of 60). A 413 costs nothing and names the estimate; a 504 costs a timeout of
the worker's time that every other request waits behind."""

DECODE_MEMORY = 0.99
"""Weight an observed decode step keeps per decode step observed after it, in :class:`StepSeconds` (about the last
100 steps count)."""

MIN_TIMED_STEPS = 4
"""Generations with fewer decode steps are not timed by :class:`StepSeconds`: their time after the prefill is mostly
the error of the prefill subtracted (a re-test: six 2-token /steer jobs on 2,000-token prompts tripled the rate, and
moderation behind a 128-token /steer got 429)."""

TERMS = ("batch", "prompt", "token", "token_squared")
"""The cost model's terms (:class:`CostFit`), in order; the ``per`` label of ``herald_worker_cost_seconds``."""


@dataclass(frozen=True)
class Work:
    """Work in the worker's units: prompts, their prompt tokens, the sum of their squared lengths (tokens^2, the
    attention term), and exclusive jobs (``/steer``)."""

    prompts: int = 0
    tokens: int = 0
    jobs: int = 0
    squared_tokens: int = 0

    @classmethod
    def of_prompts(cls, lengths: list[int]) -> "Work":
        """The work of prompts of these lengths, tokens."""
        return cls(len(lengths), sum(lengths), 0, sum(n * n for n in lengths))

    def plus(self, other: "Work", sign: int = 1) -> "Work":
        """``self + sign * other``, field by field."""
        return Work(self.prompts + sign * other.prompts, self.tokens + sign * other.tokens, self.jobs + sign * other.jobs,
                    self.squared_tokens + sign * other.squared_tokens)


@dataclass(frozen=True)
class BatchTiming:
    """Batches the worker answered back to back: their prompts, prompt tokens (unpadded), the sum of their squared
    lengths (tokens^2), the seconds of busy time, how many batches that was, and the longest prompt among them
    (tokens; 0: not given).

    One batch on the CPU. Where the device runs behind the host (CUDA), batch k+1 is launched before batch k is
    scored, so the busy time of a single batch is only known up to how the overlap splits it (on the H200, 19 x 431
    tokens read 0.18-0.24 s in one run of four such batches); their sum is exact. The engine therefore reports a run
    of pipelined batches as one timing (benchmarks/admission.py, docs/PERFORMANCE.md 2026-12-01)."""

    prompts: int
    tokens: int
    seconds: float
    squared_tokens: int = 0
    batches: int = 1
    longest: int = 0

    @classmethod
    def of_prompts(cls, lengths: list[int], seconds: float) -> "BatchTiming":
        """One batch of prompts of these lengths, tokens, answered in ``seconds`` (the counts of
        :meth:`Work.of_prompts`)."""
        work = Work.of_prompts(lengths)
        return cls(work.prompts, work.tokens, seconds, work.squared_tokens, longest=max(lengths, default=0))

    def plus(self, other: "BatchTiming") -> "BatchTiming":
        """Both timings as one run of batches."""
        return BatchTiming(self.prompts + other.prompts, self.tokens + other.tokens, self.seconds + other.seconds,
                           self.squared_tokens + other.squared_tokens, self.batches + other.batches,
                           max(self.longest, other.longest))


@dataclass(frozen=True)
class CostFit:
    """Seconds of worker time per batch, per prompt, per token and per squared token (each >= 0), and the batch
    shape the worker forms (``batch_max_prompts``, ``batch_token_budget``), so work of any size is costed as the
    batches it will take; ``checked_tokens`` is the longest prompt, tokens, of the live batches it was fitted on (0:
    none, the warm-up alone; :func:`priced_by_extrapolation`). The fit and that length are one object, so a reader on
    another thread never pairs a new fit with an old length."""

    per_batch_s: float
    per_prompt_s: float
    per_token_s: float
    per_squared_token_s: float
    batch_prompts: int
    batch_tokens: int
    checked_tokens: int = 0

    def scaled(self, factor: float) -> "CostFit":
        """This fit with every term ``factor`` times as large."""
        return CostFit(self.per_batch_s * factor, self.per_prompt_s * factor, self.per_token_s * factor,
                       self.per_squared_token_s * factor, self.batch_prompts, self.batch_tokens, self.checked_tokens)

    def seconds(self, work: Work) -> float:
        """Estimated busy seconds for ``work``'s prompts (its jobs are not counted here)."""
        if work.prompts <= 0:
            return 0.0
        batches = max(math.ceil(work.prompts / self._prompts_per_batch(work)), 1)
        return self.terms_seconds(batches, work.prompts, work.tokens, work.squared_tokens)

    def terms_seconds(self, batches: int, prompts: int, tokens: int, squared_tokens: int) -> float:
        """The fit's seconds for that many batches, prompts, tokens and squared tokens (the model's four terms)."""
        return (self.per_batch_s * batches + self.per_prompt_s * prompts + self.per_token_s * tokens
                + self.per_squared_token_s * squared_tokens)

    def _prompts_per_batch(self, work: Work) -> int:
        """Prompts of ``work``'s mean length that fit one batch (at most ``batch_prompts``, at least 1: a prompt over
        the token budget is a batch of its own). Batches hold whole prompts, so 64 of 831 tokens take 8 batches of 9
        under an 8,192-token budget, not the 7 that the token total alone gives (the count before 2026-12-01)."""
        mean = work.tokens / work.prompts
        return max(1, min(self.batch_prompts, int(self.batch_tokens // mean) if mean > 0 else self.batch_prompts))


class BatchCost:
    """The worker's busy time per batch, ``seconds ~= per_batch_s + per_prompt_s * prompts + per_token_s * tokens +
    per_squared_token_s * sum(length^2)``, fitted online by non-negative least squares on relative errors
    (scipy.optimize.nnls).

    Each term has a cause: the per-batch cost is the fixed cost of a forward pass (kernel launches, the probe), the
    per-token one the MLPs and projections, the squared one attention (a token attends to every earlier token: on the
    CPU a 4,000-token prompt cost 2.3 ms a token against 1.3 ms at 52 tokens). A model without the per-batch term
    put that fixed cost on prompts and, fitted on one-prompt batches, drove the per-token cost to 0, so long prompts
    were admitted as free and timed out (breaker pass).

    The fit weighs each of the last :data:`WINDOW` live batches by ``forgetting`` per later batch (so it follows a
    change of load or device) and the ``prior`` timings at a small permanent weight. That follows a slowdown slowly:
    forgetting keeps the faster batches before it, relative errors weigh a slow batch less than a fast one, and the
    ridge holds each term toward the warm-up, so a slowdown seen on one batch shape moves the other shapes' prices
    hardly at all (a simulation: 10 batches run 3x slower left the fit at 0.59x their cost and 0.32x another shape's; on a
    CPU that another process took a core of after warm-up, admitted requests ran several times their price into
    504s). So the fit is scaled by :attr:`slowdown_`, the median ratio of measured to fitted seconds of the last
    :data:`SLOWDOWN_BATCHES` live batches when over 1: a uniform slowdown reaches every estimate after two batches
    measured under it, and leaves it two batches after speed returns. Only upwards: a ratio under 1 would as readily
    be a shape the fit prices high as a faster worker, and a price too low costs a 504, one too high a 429. On a
    worker of constant speed with 10% noise per batch, estimates averaged 1.02x the real cost against 0.98x without
    it (tests/test_admission.py).

    Args:
        prior: timings measured at warm-up, of several shapes, so the terms are told apart before any live batch;
            they are the fit until the first live batch. Empty: no estimate until the first batch is measured
            (admission by estimated work is off until then).
        batch_prompts, batch_tokens: the batch shape the worker forms (``batch_max_prompts``,
            ``batch_token_budget``).
        forgetting: per-batch forgetting factor, in (0, 1].
        prior_weight: weight of each prior timing, > 0.

    Raises:
        ValueError: a timing that is not of at least one prompt in a positive finite time, ``forgetting`` outside
            (0, 1] or ``prior_weight`` not positive.
    """

    def __init__(self, prior: tuple[BatchTiming, ...] = (), batch_prompts: int = 64, batch_tokens: int = 8192,
                 forgetting: float = FORGETTING, prior_weight: float = PRIOR_WEIGHT) -> None:
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], not {forgetting}")
        if not (math.isfinite(prior_weight) and prior_weight > 0):
            raise ValueError(f"prior_weight must be positive, not {prior_weight}")
        for timing in prior:
            if not _usable(timing):
                raise ValueError(f"prior timing must be of at least one prompt in a positive finite time, not {timing}")
        self.forgetting = forgetting
        self.prior_weight = prior_weight
        self.batch_prompts, self.batch_tokens = max(batch_prompts, 1), max(batch_tokens, 1)
        self._prior = tuple(prior)
        self._live: deque[BatchTiming] = deque(maxlen=WINDOW)
        self._anchor: np.ndarray | None = None
        self.slowdown_ = 1.0
        """How many times slower than the least-squares fit the last live batches ran (:meth:`_slowdown`, at least
        1); ``fit`` is that fit times this."""
        self.fit: CostFit | None = self._solve() if prior else None
        if self.fit is not None:
            self._anchor = np.array([self.fit.per_batch_s, self.fit.per_prompt_s, self.fit.per_token_s,
                                     self.fit.per_squared_token_s])
        """The current :class:`CostFit`; ``None`` before any measurement. Replaced whole (one reference assignment),
        so a reader on another thread never sees half of one fit and half of another."""

    def observe(self, timing: BatchTiming) -> None:
        """Fold in one batch. A batch of no prompts or no measurable time is ignored."""
        if not _usable(timing):
            return
        self._live.append(timing)
        fit = self._solve()
        self.slowdown_ = self._slowdown(fit)
        self.fit = fit.scaled(self.slowdown_) if self.slowdown_ > 1.0 else fit

    def _slowdown(self, fit: CostFit) -> float:
        """The median ratio of measured to fitted seconds of the last :data:`SLOWDOWN_BATCHES` live timings (of two,
        the smaller), at least 1; 1 with fewer than two."""
        ratios = sorted(t.seconds / fitted for t in list(self._live)[-SLOWDOWN_BATCHES:]
                        if (fitted := fit.terms_seconds(t.batches, t.prompts, t.tokens, t.squared_tokens)) > 0)
        return max(ratios[-2], 1.0) if len(ratios) >= 2 else 1.0

    @property
    def longest_live(self) -> int:
        """The longest prompt, tokens, of the live batches the fit holds now (the last :data:`WINDOW`); 0 before any:
        how far the fit has been checked against live work (:func:`admission_verdict`). It is the current fit's
        :attr:`CostFit.checked_tokens`, computed by :meth:`observe` on the worker thread: admission on the event loop
        once iterated the window while the worker appended to it ("deque mutated during iteration", a 500 under
        load: host_cost benchmark). A caller that also prices work reads ``fit`` once and takes both from it."""
        fit = self.fit
        return 0 if fit is None else fit.checked_tokens

    def seconds(self, work: Work) -> float | None:
        """Estimated busy seconds for ``work``'s prompts; ``None`` before any measurement."""
        fit = self.fit
        return None if fit is None else fit.seconds(work)

    def _solve(self) -> CostFit:
        rows = [(t, self.prior_weight) for t in self._prior]
        rows += [(t, self.forgetting ** age) for age, t in enumerate(reversed(self._live))]
        design = np.array([[t.batches, t.prompts, t.tokens, t.squared_tokens] for t, _ in rows])
        seconds = np.array([t.seconds for t, _ in rows])
        # Relative errors: each batch counts by its error as a share of its time. In absolute seconds a few long
        # batches outweighed every short one, and the fit that served them priced 64 chat prompts at 4 s of a real
        # 19-25 s (third breaker pass).
        root = np.sqrt([w for _, w in rows]) / seconds
        scale = np.maximum(np.abs(design).max(axis=0), 1.0)  # columns of like size: tokens^2 runs to 10^8
        a, b = design / scale * root[:, None], seconds * root
        if self._anchor is not None and self._live:
            # Ridge toward the warm-up fit, on each term's relative change: live batches of one or two shapes leave
            # some mix of the terms unmeasured (short prompts say nothing of the squared term), and without it the
            # fit moved cost between terms at will (one-prompt traffic after 431-token batches: 0 per token, 13x
            # the squared term, 8 x 2,000 tokens read as 89 s against a real ~25 s). RIDGE_WEIGHT is in batches.
            held = [j for j in range(len(scale)) if self._anchor[j] > 0]
            anchor_rows = np.zeros((len(held), len(scale)))
            for row, j in enumerate(held):
                anchor_rows[row, j] = np.sqrt(RIDGE_WEIGHT) / (self._anchor[j] * scale[j])
            a = np.vstack([a, anchor_rows])
            b = np.concatenate([b, np.full(len(held), np.sqrt(RIDGE_WEIGHT))])
        solution, _ = nnls(a, b)
        per_batch, per_prompt, per_token, per_squared = (solution / scale).tolist()
        checked = max((live.longest for live in self._live), default=0)
        return CostFit(per_batch, per_prompt, per_token, per_squared, self.batch_prompts, self.batch_tokens, checked)


def _usable(timing: BatchTiming) -> bool:
    return timing.prompts > 0 and timing.tokens >= 0 and math.isfinite(timing.seconds) and timing.seconds > 0


class StepSeconds:
    """Seconds of one decode step of /steer's generations (``herald_service.engine.service.steer_job_seconds``):
    decode seconds over decode steps, both summed over the generations timed and decayed by :data:`DECODE_MEMORY` per
    step, so a generation weighs by its steps. ``None`` until a generation of at least :data:`MIN_TIMED_STEPS` steps
    was timed."""

    def __init__(self) -> None:
        self._seconds = 0.0
        self._steps = 0.0

    @property
    def seconds(self) -> float | None:
        """The current estimate, seconds per step."""
        return None if self._steps == 0 else self._seconds / self._steps

    def observe(self, seconds: float, steps: int) -> None:
        """Fold in one generation's ``steps`` decode steps that took ``seconds`` after its prefill (fewer than
        :data:`MIN_TIMED_STEPS` steps: ignored)."""
        if steps < MIN_TIMED_STEPS:
            return
        keep = DECODE_MEMORY ** steps
        self._seconds = keep * self._seconds + seconds
        self._steps = keep * self._steps + steps


STOPPING_S = 1.0
"""Seconds a running exclusive job whose request ended is still counted (:func:`jobs_left_s`): a /steer told to stop
ends at its next decode step (a re-test measured 0.14-0.16 s on the CPU), or after the prefill chunk it is in (after
the whole prefill where that runs in one pass, as :func:`jobs_left_s` counts by ``forward_until``). Before, it
was counted for its whole estimate, and the next /steer got ``Retry-After: 28`` for a worker free 0.15 s later."""


@dataclass
class JobClock:
    """An exclusive job (``/steer``) accepted and not yet answered: when it must have ended (``deadline``,
    ``perf_counter`` seconds: its request's), how long it is expected to run once started (``expected_s``, seconds;
    ``None``: unknown), when it started (``None``: still queued), when it was told to stop because its request
    ended (``stopping_since``; ``None``: not), and until when a forward pass it has started, which only a chunk boundary
    stops, is estimated to run (``forward_until``; ``None``: none running). Written under the engine's lock."""

    deadline: float
    expected_s: float | None = None
    started: float | None = None
    stopping_since: float | None = None
    forward_until: float | None = None


def jobs_left_s(jobs: Iterable[JobClock], now: float) -> float:
    """Seconds until the exclusive jobs ``jobs`` have all ended, estimated: their expected durations one after another
    (a running job's less the seconds it has run), at most until the latest deadline. A job without an estimate, or
    one running past its estimate (the estimate failed; it may run to its deadline), counts until the latest
    deadline. A job told to stop counts :data:`STOPPING_S` from then (past that, until the latest deadline too). A job
    in a forward pass counts at least until that pass's estimated end (``forward_until``), past its deadline too: a
    /steer priced only by extrapolation runs its first prefill on an idle worker whatever the estimate, and work
    admitted while that prefill ran past the deadline got 504s (a breaker pass). 0 without jobs.

    A job ends by its deadline whatever it was expected to take (a /steer job cuts its generation to end by it), so
    the latest deadline bounds the estimate. Counted until the deadline always, a /steer of a few seconds made the
    work behind it wait for the whole timeout: moderation in its first 20% of ``request_timeout_s`` was refused
    (tests/test_steer_budget.py)."""
    jobs = list(jobs)
    if not jobs:
        return 0.0
    latest_s = max(max(max(job.deadline, job.forward_until or 0.0) for job in jobs) - now, 0.0)
    total_s = 0.0
    for job in jobs:
        if job.stopping_since is not None:
            left_s = job.stopping_since + STOPPING_S - now
        elif job.expected_s is None:
            return latest_s
        else:
            left_s = job.expected_s if job.started is None else job.started + job.expected_s - now
        if job.forward_until is not None:
            left_s = max(left_s, job.forward_until - now)
        if left_s <= 0:
            return latest_s
        total_s += left_s
    return min(total_s, latest_s)


def ahead_seconds(ahead: Work, fit: CostFit | None, limit_s: float | None, horizon_s: float | None = None,
                  jobs_s: float = 0.0) -> float:
    """Estimated seconds until the worker has answered the work ``ahead``: its prompts at the cost model, plus
    ``jobs_s``, the seconds until its exclusive jobs have ended (:func:`jobs_left_s`: their expected durations, at
    most until the latest of their deadlines, since a /steer job cuts its generation to end by its request's). At
    most ``horizon_s`` (the seconds left until the latest deadline of that work) and ``limit_s``: every accepted
    request is cancelled at its deadline (``request_timeout_s`` after it arrived; the worker drops cancelled prompts
    before the model sees them), so the worker is never busier than that, however much was accepted. 0 before any
    measurement. ``limit_s`` ``None``: uncapped."""
    if fit is None:
        return 0.0
    seconds = fit.seconds(ahead) + jobs_s
    for cap in (limit_s, horizon_s):
        if cap is not None:
            seconds = min(seconds, max(cap, 0.0))
    return seconds


BOUND_DECIMALS = 6
"""Most decimals a bound (a limit, seconds) is printed with in a refusal; fewer where they are zeros."""


def seconds_text(seconds: float, least_decimals: int) -> str:
    """``seconds`` with at least ``least_decimals`` decimals and at most :data:`BOUND_DECIMALS`, trailing zeros past
    ``least_decimals`` dropped: 0.16 (80% of 0.2, 0.16000000000000003 in floating point) prints "0.16", 8.0 with one
    decimal "8.0", 60.0 with none "60"; a positive value that would print as 0 prints in ``g`` format."""
    whole, _, decimals = f"{seconds:.{BOUND_DECIMALS}f}".partition(".")
    decimals = decimals.rstrip("0").ljust(least_decimals, "0")
    text = f"{whole}.{decimals}" if decimals else whole
    return f"{seconds:g}" if float(text) == 0 and seconds != 0 else text


def exceeding_texts(value_s: float, bound_s: float, bound_decimals: int = 0) -> tuple[str, str]:
    """``value_s`` and ``bound_s`` (seconds, ``value_s > bound_s``) as printed by a message that says the one exceeds
    the other, so that the printed value always reads larger than the printed bound.

    The bound prints with the decimals it needs, at least ``bound_decimals``, at most :data:`BOUND_DECIMALS`
    (:func:`seconds_text`). The value prints in whole seconds from 10 s, else with as many decimals as the bound (at
    least one), and with more (up to :data:`BOUND_DECIMALS`) where fewer would not read larger than the printed
    bound: an estimate of 0.17 s against 0.16 s admitted read "0.2 s exceeds the 0.2 s admitted", 0.1004 s against
    0.1 s "0.100". A value within half a microsecond of the bound prints "over <bound>"; one not above it, with the
    least decimals.

    Returns:
        The value's text (thousands separated) and the bound's text.
    """
    bound = seconds_text(bound_s, bound_decimals)
    bound_places = len(bound.partition(".")[2]) if "e" not in bound else BOUND_DECIMALS
    least = 0 if value_s >= 10 else max(1, bound_places)
    if value_s <= bound_s:  # not a refusal's figures (a benchmark's check of the format): the value as it is
        return f"{value_s:,.{least}f}", bound
    for decimals in range(least, BOUND_DECIMALS + 1):
        if round(value_s, decimals) > float(bound):
            return f"{value_s:,.{decimals}f}", bound
    return f"over {bound}", bound


@dataclass(frozen=True)
class Refusal:
    """A request that must wait too long behind the work ahead (429): its estimated wait and the seconds after which a
    retry would be admitted (if nothing else arrives), rounded up, 1 to ``ceil(limit_s)``."""

    wait_s: float
    limit_s: float
    retry_after_s: int
    allowed_s: float | None = None
    """The longest wait admitted (``WAIT_HEADROOM * limit_s`` or the request's own work); ``None``: ``limit_s``."""

    @property
    def message(self) -> str:
        """The 429's message; its wait always reads larger than the bound it names (:func:`exceeding_texts`)."""
        allowed = self.limit_s if self.allowed_s is None else self.allowed_s
        if allowed >= self.limit_s:
            wait, limit = exceeding_texts(self.wait_s, self.limit_s)
            bound = f"request_timeout_s {limit} s"
        elif allowed > WAIT_HEADROOM * self.limit_s:  # the request's own work: it waits for an idle worker
            wait, admitted = exceeding_texts(self.wait_s, allowed, bound_decimals=1)
            bound = (f"the {admitted} s of this request's own estimated work (work over {WAIT_HEADROOM:.0%} of"
                     f" request_timeout_s {seconds_text(self.limit_s, 0)} s runs only on an idle worker)")
        else:
            wait, admitted = exceeding_texts(self.wait_s, allowed, bound_decimals=1)
            bound = (f"the {admitted} s admitted ({WAIT_HEADROOM:.0%} of request_timeout_s"
                     f" {seconds_text(self.limit_s, 0)} s)")
        return (f"estimated wait {wait} s exceeds {bound} (the worker is busy with work accepted earlier);"
                f" retry in {self.retry_after_s} s")


@dataclass(frozen=True)
class TooMuchWork:
    """A request whose own estimated work exceeds :data:`OWN_WORK_HEADROOM` of ``limit_s`` (``request_timeout_s``)
    (413): it would likely time out, even on an idle worker. ``partial``: ``own`` holds the tokens of the prompts
    tokenized so far only (the rest counted as none), so the estimate is a lower bound."""

    work_s: float
    limit_s: float
    own: Work
    partial: bool = False

    @property
    def message(self) -> str:
        """The 413's message, naming the setting and what to change; its estimate always reads larger than the limit
        (:func:`exceeding_texts`)."""
        shape = f"{self.own.prompts:,} prompt{'s' if self.own.prompts != 1 else ''}"
        if self.own.tokens:
            shape += f", {'at least ' if self.partial else ''}{self.own.tokens:,} tokens"
        work, limit = exceeding_texts(self.work_s, OWN_WORK_HEADROOM * self.limit_s)
        work += " s or more" if self.partial and not work.startswith("over") else " s"
        return (f"this request is estimated at {work} of model time on this backbone ({shape}); the limit is {limit} s,"
                f" {OWN_WORK_HEADROOM:.0%} of request_timeout_s {seconds_text(self.limit_s, 0)} s"
                " (HERALD_REQUEST_TIMEOUT_S; the rest is the estimate's margin): send fewer or shorter prompts")


def priced_by_extrapolation(tokens: int, checked_tokens: int) -> bool:
    """Whether the cost model's price for one prompt of ``tokens`` tokens (0: not yet known) is the warm-up's
    extrapolation: no live batch yet (``checked_tokens`` 0, :attr:`BatchCost.longest_live`), or the prompt more than
    twice as long as the longest prompt of the live batches. Such a prompt is not refused on its price alone
    (:func:`admission_verdict` for /classify, the /steer prefills of ``Moderator.steer``): it runs on an idle worker,
    and its timing corrects the model at its length."""
    return checked_tokens == 0 or tokens > 2 * checked_tokens


def may_be_too_much_work(most: Sequence[int | None], fit: CostFit | None, limit_s: float | None,
                         checked_tokens: int | None = None) -> bool:
    """Whether a request whose prompts have at most these lengths, tokens (``None``: not bounded), may be refused as
    :class:`TooMuchWork` by :func:`admission_verdict` once all its tokens are known, whatever the work ahead.

    Before its prompts are tokenized, a request is known only by such bounds (each prompt's from its characters, at
    most the token limit, past which it is refused 413 at tokenization:
    :meth:`~herald_service.engine.service.Moderator.most_tokens`). While this holds, a 429 for the work ahead or a full queue must wait
    for its tokens: it would tell a client to retry a request that no wait admits (3 prompts of 1,294 tokens,
    estimated at 9.3 s against a 10 s timeout, got 413 on an idle server and 429 "retry in 1 s" 81 times of 82 under
    load, on the embedded backbone). The cost only grows with each length, so the bound's price decides; a request of
    one prompt is priced up to twice ``checked_tokens`` only (:func:`priced_by_extrapolation`: longer, it runs on an
    idle worker, never 413).

    Args:
        most: per prompt, the most tokens it can have.
        fit, limit_s, checked_tokens: as :func:`admission_verdict`'s.
    """
    if fit is None or limit_s is None:
        return False
    if len(most) == 1 and checked_tokens is not None:
        if checked_tokens == 0:
            return False
        most = [2 * checked_tokens if most[0] is None else min(most[0], 2 * checked_tokens)]
    lengths = [length for length in most if length is not None]
    if len(lengths) < len(most):
        return True
    return fit.seconds(Work.of_prompts(lengths)) > OWN_WORK_HEADROOM * limit_s


def admission_verdict(ahead: Work, own: Work, fit: CostFit | None, limit_s: float | None, horizon_s: float | None = None,
                      jobs_s: float = 0.0, own_job_s: float = 0.0, checked_tokens: int | None = None,
                      partial: bool = False) -> Refusal | TooMuchWork | None:
    """The refusal for a request, or ``None`` to admit it.

    Args:
        ahead: work accepted and not yet answered (queued, taken by the worker, in flight).
        own: the request's work (its tokens 0 when not yet tokenized: a lower bound).
        partial: ``own`` is a lower bound, part of its prompts tokenized (:meth:`InferenceEngine.check_work`); every
            term of the cost and of the wait only grows with the rest, so a refusal now is one the whole request
            would get. Its 413 message says "or more" of the estimate and "at least" of the tokens.
        fit: the cost model (:class:`BatchCost`); ``None``: not measured yet, admit.
        limit_s: the longest acceptable wait, seconds (``request_timeout_s``); ``None``: admit.
        horizon_s: seconds until the latest deadline of the work ahead; ``None``: ``limit_s``.
        jobs_s: seconds until the work already started has ended: the exclusive jobs ahead (:func:`jobs_left_s`) and
            the batches the worker has launched (until their estimated end); ``ahead`` is then the rest.
        own_job_s: the least seconds the request's own exclusive job needs (a /steer job: its prefills and margin;
            its generation takes what is left until its deadline).
        checked_tokens: the longest prompt, tokens, of the live batches ``fit`` holds (:attr:`BatchCost.longest_live`;
            0: none, the fit is the warm-up seed alone); ``None``: trusted at every length.

    Own work costing more than :data:`OWN_WORK_HEADROOM` x ``limit_s`` alone: :class:`TooMuchWork`, except for a request of one prompt more than
    twice as long as ``checked_tokens``, which is then treated as work over the headroom (admitted on an idle worker).
    A warm-up timed under load can price every prompt over the limit (a breaker pass: 2 x 70 tokens timed at 6.3 s,
    35x their real cost, so even "hi" got 413 under a 2 s limit), and a refused request is never timed, so the seed
    would stand until a restart. Short live traffic does not correct it for long prompts either: it says little of the
    per-token and nothing of the squared term (the next breaker pass: a warm-up timed 15-30x slow priced 4,031 tokens
    at 329 s against a real 17 s, and 100 one-word requests later still did). One prompt is bounded by ``max_tokens``,
    and its timing corrects the fit at its length. Otherwise the
    estimated wait is :func:`ahead_seconds` (at most ``horizon_s`` and ``limit_s``) plus the request's own work; over
    :data:`WAIT_HEADROOM` x ``limit_s`` (or, for a request whose own work alone is more, over that work: it is
    admitted on an idle worker): :class:`Refusal`, whose ``retry_after_s`` is how long until the work ahead has
    drained enough for this request to fit (the cap falls as fast as the work drains: deadlines come one second closer
    each second), rounded up, at least 1 s, never above ``limit_s`` rounded up.
    """
    if fit is None or limit_s is None:
        return None
    own_work_s = fit.seconds(own)
    # checked_tokens 0: no live batch at all, so even a prompt of unknown length (check_room's, before tokenizing)
    # is unchecked (a breaker pass: "hi" got 413 from a slow seed again once the rule read tokens).
    unchecked = checked_tokens is not None and own.prompts == 1 and priced_by_extrapolation(own.tokens, checked_tokens)
    if own_work_s > OWN_WORK_HEADROOM * limit_s and not unchecked:
        return TooMuchWork(own_work_s, limit_s, own, partial)
    ahead_s = ahead_seconds(ahead, fit, limit_s, horizon_s, jobs_s)
    own_s = own_work_s + own_job_s
    wait_s = ahead_s + own_s
    # The request's own prompts and jobs are allowed in full: left out (a /steer job counted at a mean duration near
    # the limit), an idle worker answered 429 "retry in 1 s" to every /steer until a restart (third breaker pass).
    allowed_s = max(WAIT_HEADROOM * limit_s, own_s)
    if wait_s <= allowed_s:
        return None
    return Refusal(wait_s, limit_s, max(1, math.ceil(min(wait_s - allowed_s, ahead_s))), allowed_s)

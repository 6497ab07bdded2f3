"""Admission by estimated work: refuse a request the worker cannot answer within ``request_timeout_s``, at once.

Counting prompts is not enough: 64 queued prompts of 4k tokens hold the worker for minutes, and a one-word prompt
accepted behind them only times out (504). The engine keeps the prompts, tokens and exclusive jobs it has accepted
and not yet answered (:class:`Work`) and a model of what a batch costs it (:class:`BatchCost`, seconds of busy time
per prompt and per token, fitted online). :func:`admission_verdict` then refuses a request whose own work alone
exceeds the limit (413: it could only time out, however idle the worker) and one whose wait behind the work ahead
does (429, with a ``Retry-After`` from the same estimate). Pure arithmetic: no clocks, no threads, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FORGETTING = 0.9
"""Weight a batch's measurement keeps per batch answered after it (about the last 10 batches count)."""

PRIOR_WEIGHT = 0.1
"""Weight of each warm-up measurement, permanently: a tenth of one live batch, enough to keep the fit well-posed
when every live batch has the same shape, too little to hold it against what live batches measure."""

SMOOTHING = 0.3
"""Weight of the newest duration in :class:`MeanSeconds`."""

UNMEASURED_JOB_SHARE = 0.5
"""An exclusive job (``/steer``) before any has been measured counts as this share of ``request_timeout_s`` (its
generation is bounded by the request's deadline; counting it free admitted moderation that could only time out)."""


@dataclass(frozen=True)
class Work:
    """Work in the worker's units: prompts, their prompt tokens, and exclusive jobs (``/steer``)."""

    prompts: int = 0
    tokens: int = 0
    jobs: int = 0


@dataclass(frozen=True)
class BatchTiming:
    """One batch the worker answered: its prompts, their prompt tokens (unpadded) and the seconds of busy time."""

    prompts: int
    tokens: int
    seconds: float


class BatchCost:
    """The worker's busy time per batch, ``seconds ~= per_prompt_s * prompts + per_token_s * tokens``, fitted online.

    Least squares over every batch answered, each batch's weight multiplied by ``forgetting`` per later batch (so the
    fit follows a change of load or device), plus the ``prior`` timings at a small permanent weight. Fixed per-batch
    costs and padding have no term of their own: under a backlog, which is what admission guards, batches are full and
    both fold into the per-prompt term (a one-prompt batch puts all of its fixed cost there: conservative).

    Args:
        prior: timings measured at warm-up, of at least two shapes (prompts per token) so that both coefficients are
            identified before any live batch; they are the fit until the first live batch. Empty: no estimate until
            the first batch is measured (admission by estimated work is off until then).
        forgetting: per-batch forgetting factor, in (0, 1].
        prior_weight: weight of each prior timing, > 0.

    Raises:
        ValueError: a timing that is not of at least one prompt in a positive finite time, ``forgetting`` outside
            (0, 1] or ``prior_weight`` not positive.
    """

    def __init__(self, prior: tuple[BatchTiming, ...] = (), forgetting: float = FORGETTING, prior_weight: float = PRIOR_WEIGHT) -> None:
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], not {forgetting}")
        if not (math.isfinite(prior_weight) and prior_weight > 0):
            raise ValueError(f"prior_weight must be positive, not {prior_weight}")
        for timing in prior:
            if not _usable(timing):
                raise ValueError(f"prior timing must be of at least one prompt in a positive finite time, not {timing}")
        self.forgetting = forgetting
        # Sufficient statistics of the weighted least squares, float64: sums of w*p*p, w*p*t, w*t*t, w*p*s, w*t*s.
        self._prior = [0.0] * 5
        self._live = [0.0] * 5
        for timing in prior:
            _accumulate(self._prior, timing, prior_weight)
        self.coefficients: tuple[float, float] | None = _solve(self._prior) if prior else None
        """``(per_prompt_s, per_token_s)``, both >= 0; ``None`` before any measurement. Replaced whole (one reference
        assignment), so a reader on another thread never sees one coefficient of one fit and one of another."""

    def observe(self, timing: BatchTiming) -> None:
        """Fold in one batch. A batch of no prompts or no measurable time is ignored."""
        if not _usable(timing):
            return
        self._live = [self.forgetting * s for s in self._live]
        _accumulate(self._live, timing, 1.0)
        self.coefficients = _solve([p + s for p, s in zip(self._prior, self._live)])

    def seconds(self, prompts: int, tokens: int) -> float | None:
        """Estimated busy seconds for ``prompts`` prompts of ``tokens`` tokens in all; ``None`` before any measurement."""
        coefficients = self.coefficients
        return None if coefficients is None else _cost(coefficients, prompts, tokens)


def _usable(timing: BatchTiming) -> bool:
    return timing.prompts > 0 and timing.tokens >= 0 and math.isfinite(timing.seconds) and timing.seconds > 0


def _accumulate(stats: list[float], timing: BatchTiming, weight: float) -> None:
    p, t, s = float(timing.prompts), float(timing.tokens), float(timing.seconds)
    for i, value in enumerate((p * p, p * t, t * t, p * s, t * s)):
        stats[i] += weight * value


def _solve(stats: list[float]) -> tuple[float, float]:
    """The 2x2 normal equations, with both coefficients held >= 0: if one comes out negative (or the system is
    singular: every batch had the same prompts-per-token shape), it is set to 0 and the other fitted alone."""
    pp, pt, tt, ps, ts = stats
    det = pp * tt - pt * pt
    if det > 1e-9 * pp * tt:
        per_prompt, per_token = (tt * ps - pt * ts) / det, (pp * ts - pt * ps) / det
        if per_prompt >= 0 and per_token >= 0:
            return per_prompt, per_token
        if per_token < 0:
            return ps / pp, 0.0
    # A negative per-prompt term, or one shape only: all of it per token, which grows with the work as it should.
    return (0.0, ts / tt) if tt > 0 else (ps / pp, 0.0)


def _cost(coefficients: tuple[float, float], prompts: int, tokens: int) -> float:
    return coefficients[0] * prompts + coefficients[1] * tokens


class MeanSeconds:
    """Exponentially weighted moving average of a duration in seconds (``None`` until the first observation): the
    time the worker spends on one exclusive job (``/steer``), which is not measured in prompt tokens."""

    def __init__(self, smoothing: float = SMOOTHING) -> None:
        self.seconds: float | None = None
        self.smoothing = smoothing

    def observe(self, seconds: float) -> None:
        """Fold in one duration, seconds."""
        if self.seconds is None:
            self.seconds = seconds
        else:
            self.seconds += self.smoothing * (seconds - self.seconds)


def job_seconds(mean_s: float | None, limit_s: float) -> float:
    """What one exclusive job is counted at: its mean duration (:class:`MeanSeconds`), at most ``limit_s`` (a job is
    bounded by its request's deadline), or ``UNMEASURED_JOB_SHARE * limit_s`` before any was measured."""
    return UNMEASURED_JOB_SHARE * limit_s if mean_s is None else min(mean_s, limit_s)


def ahead_seconds(ahead: Work, coefficients: tuple[float, float] | None, job_s: float | None, limit_s: float | None,
                  horizon_s: float | None = None) -> float:
    """Estimated seconds until the worker has answered the work ``ahead``, at most ``horizon_s`` (the seconds left
    until the latest deadline of that work) and ``limit_s``: every accepted request is cancelled at its deadline
    (``request_timeout_s`` after it arrived; the worker drops cancelled prompts before the model sees them, and a
    /steer job's generation stops there), so the worker is never busier than that, however much was accepted. 0
    before any measurement. ``limit_s`` ``None``: uncapped, and unmeasured jobs count as free."""
    if coefficients is None:
        return 0.0
    per_job = (job_s or 0.0) if limit_s is None else job_seconds(job_s, limit_s)
    seconds = _cost(coefficients, ahead.prompts, ahead.tokens) + ahead.jobs * per_job
    for cap in (limit_s, horizon_s):
        if cap is not None:
            seconds = min(seconds, max(cap, 0.0))
    return seconds


@dataclass(frozen=True)
class Refusal:
    """A request that must wait too long behind the work ahead (429): its estimated wait and the seconds after which a
    retry would be admitted (if nothing else arrives), rounded up, 1 to ``ceil(limit_s)``."""

    wait_s: float
    limit_s: float
    retry_after_s: int

    @property
    def message(self) -> str:
        """The 429's message."""
        return (f"estimated wait {self.wait_s:.1f} s exceeds request_timeout_s {self.limit_s:g} s (the worker is"
                f" busy with work accepted earlier); retry in {self.retry_after_s} s")


@dataclass(frozen=True)
class TooMuchWork:
    """A request whose own estimated work exceeds the limit (413): it could only time out, even on an idle worker."""

    work_s: float
    limit_s: float
    own: Work

    @property
    def message(self) -> str:
        """The 413's message, naming the setting and what to change."""
        shape = f"{self.own.prompts:,} prompt{'s' if self.own.prompts != 1 else ''}"
        if self.own.tokens:
            shape += f", {self.own.tokens:,} tokens"
        work = f"{self.work_s:,.0f}" if self.work_s >= 10 else f"{self.work_s:.1f}"
        return (f"this request is estimated at {work} s of model time on this backbone ({shape}); the limit is"
                f" request_timeout_s {self.limit_s:g} s (HERALD_REQUEST_TIMEOUT_S): send fewer or shorter prompts")


def admission_verdict(ahead: Work, own: Work, coefficients: tuple[float, float] | None, job_s: float | None,
                      limit_s: float | None, horizon_s: float | None = None) -> Refusal | TooMuchWork | None:
    """The refusal for a request, or ``None`` to admit it.

    Args:
        ahead: work accepted and not yet answered (queued, taken by the worker, in flight).
        own: the request's work (its tokens 0 when not yet tokenized: a lower bound).
        coefficients: ``(per_prompt_s, per_token_s)`` of :class:`BatchCost`; ``None``: not measured yet, admit.
        job_s: mean seconds of one exclusive job (:class:`MeanSeconds`); ``None``: none measured yet
            (:func:`job_seconds`).
        limit_s: the longest acceptable wait, seconds (``request_timeout_s``); ``None``: admit.
        horizon_s: seconds until the latest deadline of the work ahead; ``None``: ``limit_s``.

    Own prompts and tokens costing more than ``limit_s`` alone: :class:`TooMuchWork`. Otherwise the estimated wait is
    :func:`ahead_seconds` (at most ``horizon_s`` and ``limit_s``) plus the request's own work; over ``limit_s``:
    :class:`Refusal`, whose ``retry_after_s`` is how long until the work ahead has drained enough for this request to
    fit (the cap falls as fast as the work drains: deadlines come one second closer each second), rounded up, at
    least 1 s, never above ``limit_s`` rounded up.
    """
    if coefficients is None or limit_s is None:
        return None
    own_work_s = _cost(coefficients, own.prompts, own.tokens)
    if own_work_s > limit_s:
        return TooMuchWork(own_work_s, limit_s, own)
    ahead_s = ahead_seconds(ahead, coefficients, job_s, limit_s, horizon_s)
    wait_s = ahead_s + own_work_s + own.jobs * job_seconds(job_s, limit_s)
    if wait_s <= limit_s:
        return None
    return Refusal(wait_s, limit_s, max(1, math.ceil(min(wait_s - limit_s, ahead_s))))

"""Admission by estimated wait: refuse (429) a request the worker cannot answer within ``request_timeout_s``.

Counting prompts is not enough: 64 queued prompts of 4k tokens hold the worker for minutes, and a one-word prompt
accepted behind them only times out (504). The engine keeps the tokens it has accepted and not yet answered and an
estimate of the rate it drains them (:class:`Throughput`, prompt tokens per second of busy time); a request whose
estimated wait exceeds the limit is refused at once, with a ``Retry-After`` taken from the same estimate
(:func:`admission_verdict`). Pure arithmetic: no clocks, no threads, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SMOOTHING = 0.3
"""Weight of a full batch's measurement in the moving averages (a batch at the token budget moves the estimate 30%
of the way to what it measured; see :meth:`Throughput.observe`)."""


class Throughput:
    """Exponentially weighted moving average of the worker's rate, in prompt tokens per second of busy time.

    Prompt tokens are the real (unpadded) tokens of the prompts a batch answered; padding and per-batch costs are
    thereby folded into the rate, so queued prompt tokens divided by it estimate how long they take.

    Args:
        seed_tokens_per_s: the first estimate, e.g. measured on the warm-up batch (a small batch, so the rate it gives
            is low: conservative). ``None``: no estimate until the first batch is measured (admission by estimated
            wait is off until then).
        smoothing: weight of a full batch's measurement, in (0, 1].

    Raises:
        ValueError: a seed that is not a positive finite number, or ``smoothing`` outside (0, 1].
    """

    def __init__(self, seed_tokens_per_s: float | None = None, smoothing: float = SMOOTHING) -> None:
        if seed_tokens_per_s is not None and not (math.isfinite(seed_tokens_per_s) and seed_tokens_per_s > 0):
            raise ValueError(f"seed_tokens_per_s must be a positive finite rate, not {seed_tokens_per_s}")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], not {smoothing}")
        self.tokens_per_s = seed_tokens_per_s
        self.smoothing = smoothing

    def observe(self, tokens: int, busy_s: float, token_budget: int) -> None:
        """Fold in one batch: ``tokens`` prompt tokens answered in ``busy_s`` seconds of worker time, for a worker
        whose batches hold up to ``token_budget`` tokens.

        A batch moves the estimate in proportion to how full it was (``tokens / token_budget``, at most 1): a batch
        of a few tokens spends its time mostly on fixed per-batch costs and says little about the rate at which the
        worker drains a backlog, which is what admission needs; left unweighted, the one-prompt batches of an idle
        service would drag the rate down and refuse the next burst. The first measurement, without a seed, is taken
        as it is. Measurements of no tokens or no time are ignored.
        """
        if tokens <= 0 or busy_s <= 0:
            return
        measured = tokens / busy_s
        if self.tokens_per_s is None:
            self.tokens_per_s = measured
            return
        weight = self.smoothing * min(1.0, tokens / max(token_budget, 1))
        self.tokens_per_s += weight * (measured - self.tokens_per_s)


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


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: its estimated wait and the seconds after which a retry would be admitted (if nothing
    else arrives), at least 1, rounded up."""

    wait_s: float
    limit_s: float
    retry_after_s: int

    @property
    def message(self) -> str:
        """The 429's message."""
        return (f"estimated wait {self.wait_s:.1f} s exceeds request_timeout_s {self.limit_s:g} s (the worker is"
                f" busy with work accepted earlier); retry in {self.retry_after_s} s")


def admission_verdict(ahead_tokens: int, ahead_jobs: int, own_tokens: int, own_jobs: int, tokens_per_s: float | None,
                      job_s: float | None, limit_s: float | None) -> Refusal | None:
    """The refusal for a request, or ``None`` to admit it.

    Args:
        ahead_tokens: prompt tokens accepted and not yet answered (queued, taken by the worker, in flight).
        ahead_jobs: exclusive jobs accepted and not yet answered.
        own_tokens: the request's prompt tokens (0 for an exclusive job, or when not yet tokenized).
        own_jobs: the request's exclusive jobs (1 for ``/steer``, else 0).
        tokens_per_s: the worker's rate (:class:`Throughput`); ``None``: not measured yet, admit.
        job_s: mean seconds of one exclusive job (:class:`MeanSeconds`); ``None``: count them as free.
        limit_s: the longest acceptable wait, seconds (``request_timeout_s``); ``None``: admit.

    The estimated wait is ``(ahead_tokens + own_tokens) / tokens_per_s + (ahead_jobs + own_jobs) * job_s``. A
    request with nothing ahead of it is always admitted: waiting would not make it faster, and answering it measures
    the rate. ``retry_after_s`` is how long until the work ahead has drained enough for this request to fit (all of it,
    for a request that alone exceeds the limit), rounded up, at least 1 s.
    """
    if tokens_per_s is None or limit_s is None or (ahead_tokens <= 0 and ahead_jobs <= 0):
        return None
    per_job = job_s or 0.0
    ahead_s = ahead_tokens / tokens_per_s + ahead_jobs * per_job
    wait_s = ahead_s + own_tokens / tokens_per_s + own_jobs * per_job
    if wait_s <= limit_s:
        return None
    return Refusal(wait_s, limit_s, max(1, math.ceil(min(wait_s - limit_s, ahead_s))))

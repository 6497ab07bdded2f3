"""Dynamic batching inference engine (DESIGN section 4).

One worker thread owns the backbone. Callers tokenize first (so limits are checked before any model work and
tokenization overlaps the current forward pass), then submit token ids and receive one
:class:`concurrent.futures.Future` per prompt. The worker takes a window of waiting prompts, takes its requests in
arrival order into cohorts of a few batches, sorts each cohort by length, cuts batches under a padded-token budget,
and answers every prompt of a batch: its result or the batch's error. Cancelled futures (client gone) are dropped
before the model sees them; an out-of-memory batch is split and retried. At submission (:mod:`herald_service.engine.admission`), work whose own estimated cost exceeds ``max_wait_s``
raises :class:`WorkTooLarge`; a full queue, or work that would wait longer than ``max_wait_s`` behind what was
accepted earlier, raises :class:`QueueFull`. A prompt longer than a chunk is prefilled chunk by chunk, and shorter
prompts that arrive meanwhile are answered between two chunks (:meth:`InferenceEngine._run_chunked`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from herald_service.backbone.base import Backbone, runs_in_chunks
from herald_service.backbone.batching import batch_tokens, plan_in_arrival_order
from herald_service.config import resolved_chunk_tokens
from herald_service.engine.admission import (
    TERMS, WAIT_HEADROOM, BatchCost, BatchTiming, JobClock, Refusal, TooMuchWork, Work, admission_verdict, ahead_seconds,
    jobs_left_s, may_be_too_much_work,
)
from herald_service.errors import (
    HeraldError, InferenceFailed, InputTooLarge, NotReady, QueueFull, QueueTooSmall, RequestTimeout, WorkTooLarge,
)
from herald_service.metrics import HeraldMetrics
from herald_service.probes.probe import FittedProbe
from herald_service.request_context import CURRENT_REQUEST_ID
from herald_service.types import Classification, ProbeOutput, Timing

log = logging.getLogger(__name__)

RUN_BATCHES = 8
"""Pipelined batches (CUDA) observed as one timing at most (:class:`~herald_service.engine.admission.BatchTiming`); a
run also ends when the pipeline drains. Past a few batches the split error at a run's two ends is a small share of it,
and the cost model still follows a load that never lets the pipeline drain."""

def chunk_tokens_for(setting: int | None, backbone: Backbone) -> int:
    """The chunk size the engine uses, tokens: ``setting`` as given (0: off), or for ``None`` (auto)
    :data:`~herald_service.config.CPU_CHUNK_TOKENS` where the backbone's forward runs on the host (not
    :attr:`Backbone.overlaps_host`) and 0 where it does (CUDA)."""
    return resolved_chunk_tokens(setting, on_host=not backbone.overlaps_host)


@dataclass(frozen=True)
class EngineLimits:
    """Batching and admission knobs (from settings).

    Attributes:
        token_budget: tokens in one forward pass (``batch_token_budget`` resolved:
            :func:`~herald_service.config.pass_limits`).
        max_rows: prompts in one forward pass (``batch_max_prompts``).
        delay_s: seconds the worker waits to fill a batch (``batch_delay_ms``).
        queue_capacity: prompts and exclusive jobs waiting before 429 (``queue_capacity``).
        max_wait_s: the longest estimated wait, seconds, at which work is still accepted (``request_timeout_s``);
            ``None``: admission by queue places only.
        chunk_tokens: a prompt longer than this many tokens is prefilled in chunks of it, with shorter prompts
            answered between two chunks (``prefill_chunk_tokens``); 0: off; ``None``: :func:`chunk_tokens_for`.
        prompt_tokens: the most tokens a prompt can have (the token limit: ``max_tokens`` or the backbone's position
            table, past which a prompt is refused at tokenization); ``None``: unbounded. A request not yet tokenized
            is priced with its prompts at it to tell whether it may be over its own work limit
            (:func:`~herald_service.engine.admission.may_be_too_much_work`).
    """

    token_budget: int = 8192
    max_rows: int = 64
    delay_s: float = 0.0
    queue_capacity: int = 1024
    max_wait_s: float | None = None
    chunk_tokens: int | None = None
    prompt_tokens: int | None = None


@dataclass
class _Prompt:
    token_ids: Sequence[int]
    future: Future
    enqueued: float
    tokenize_s: float
    launched: bool = False  # in a batch the worker has launched (counted in ``_launched``); under ``_cond``


@dataclass
class _Exclusive:
    """A job that needs the model alone (``/steer``)."""

    run: Callable[[], object]
    future: Future
    expected_s: float | None = None  # seconds it is expected to run once started; None: unknown
    enqueued: float = field(default_factory=time.perf_counter)
    request_id: str | None = field(default_factory=CURRENT_REQUEST_ID.get)  # the HTTP request that queued it


STOP_NOTICE_S = 10.0
"""Seconds :meth:`InferenceEngine.stop` waits for the worker before it logs that it is waiting longer."""


class InferenceEngine:
    """Owns the backbone and probe; answers classification prompts in dynamic batches.

    Args:
        backbone: the resident model (only the worker thread touches it after :meth:`start`).
        probe: the fitted probe.
        limits: batching and admission knobs.
        metrics: where queue depth, batch size, batch tokens, latencies, the cost model and the estimated wait go.
        seed: batches timed at warm-up, one per shape (the app measures them), the cost model's prior
            (:class:`BatchCost`); empty: the first batch answered starts the model, and admission by estimated work
            starts then.
    """

    def __init__(self, backbone: Backbone, probe: FittedProbe, limits: EngineLimits, metrics: HeraldMetrics,
                 seed: tuple[BatchTiming, ...] = ()) -> None:
        self.backbone = backbone
        self.probe = probe
        self.limits = limits
        self.metrics = metrics
        self.cost = BatchCost(seed, limits.max_rows, limits.token_budget)  # written by the worker thread only
        # Accepted and not yet answered (queued, taken by the worker, in flight); each future gives its share back
        # when it settles, however it settles (answered, failed, cancelled). Guarded by ``_cond``.
        self._ahead = Work()
        # The part of ``_ahead`` in batches the worker has launched: counted by the seconds left until their estimated
        # end (``_busy_until``), not by their whole cost until answered, so the estimated wait falls while they run
        # and a Retry-After computed from it holds (a breaker pass: behind an 8,130-token prompt a client that waited
        # its Retry-After of 8 s got 429 again, "retry in 4 s"). Guarded by ``_cond``.
        self._launched = Work()
        # Exclusive jobs accepted and not yet answered, by future: when each must have ended (perf_counter, max_wait_s
        # after it was accepted), how long it is expected to run and when it started. Work behind them counts them as
        # busy for that long (:func:`jobs_left_s`). Guarded by ``_cond``.
        self._jobs: dict[int, JobClock] = {}
        self._latest_deadline = 0.0  # perf_counter of the latest deadline of the work accepted (max_wait_s after it)
        # perf_counter when the batches the worker has launched are estimated to be done. A running batch cannot be
        # stopped at its deadline, so the wait of later work is capped at this or the latest deadline, whichever is
        # later (:meth:`_horizon_s`). Guarded by ``_cond``.
        self._busy_until = 0.0
        self._running_job: JobClock | None = None  # the exclusive job on the worker now (job_forward marks its passes)
        self._last_answered = 0.0  # perf_counter when the worker last answered a batch: the start of its busy time
        self._queue: deque[_Prompt | _Exclusive] = deque()
        # Prompts the worker took from the queue into its window (up to 4 x max_rows) and has not launched yet: they
        # still wait, so they count toward queue_capacity and the queue-depth gauge. Guarded by ``_cond``.
        self._window_left = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._in_flight: tuple[list[_Prompt], Callable[[], torch.Tensor], float] | None = None  # launched, not scored
        self._run: BatchTiming | None = None  # batches answered while the next was already launched, not yet observed
        self._finishing: list[_Prompt] = []  # the batch being scored (answered by the death handler if scoring dies)
        self._in_hand: list[_Prompt | _Exclusive] = []  # taken from the queue by the worker, not all answered yet
        self._window_rest: list[list[_Prompt]] = []  # the batches of the worker's window after the one it runs now
        self.chunk_tokens = chunk_tokens_for(limits.chunk_tokens, backbone)
        self.failure: str | None = None
        self._export_estimates()

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker thread."""
        self._thread = threading.Thread(target=self._worker, name="herald-inference", daemon=True)
        self._thread.start()
        self.metrics.worker_up.set(1)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the worker; prompts still queued get :class:`NotReady`. Logs how many did, so an operator reading a
        shutdown knows whether every accepted request was answered by the model (uvicorn waits for open requests
        before the app stops, so normally none: a new-user pass could not tell from the log).

        Waits up to ``timeout_s`` seconds for a batch or /steer job still running (one whose request has already
        ended stops at its next decode step or prefill chunk; a prefill in one pass cannot be cut), saying so after
        :data:`STOP_NOTICE_S`. The process used
        to exit 10 s in with the worker inside torch, and the C++ runtime aborted it (status 134: re-test)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(min(timeout_s, STOP_NOTICE_S))
            if self._thread.is_alive() and timeout_s > STOP_NOTICE_S:
                log.warning("inference worker still running a batch or /steer job; waiting up to %.0f s more",
                            timeout_s - STOP_NOTICE_S)
                self._thread.join(timeout_s - STOP_NOTICE_S)
            if self._thread.is_alive():
                log.error("inference worker did not stop within %.0f s; the process exits while it runs", timeout_s)
        failed = self._fail_pending(NotReady("server is shutting down"))
        self.metrics.worker_up.set(0)
        if failed:
            log.warning("inference worker stopped; %d queued prompt%s answered 503 (server is shutting down)", failed,
                        "s" if failed > 1 else "")
        else:
            log.info("inference worker stopped; no prompt was waiting")

    @property
    def alive(self) -> bool:
        """True while the worker thread runs and has not failed."""
        return self._thread is not None and self._thread.is_alive() and self.failure is None and not self._stopping

    @property
    def depth(self) -> int:
        """Prompts (and exclusive jobs) waiting: queued, or taken into the worker's window and not launched yet."""
        return len(self._queue) + self._window_left

    # -- submission ------------------------------------------------------------------------------------------
    def submit(self, token_ids: Sequence[Sequence[int]], tokenize_s: float = 0.0) -> list[Future]:
        """Queue prompts; one future per prompt, resolving to a :class:`Classification`.

        Raises:
            NotReady: if the worker is not running.
            WorkTooLarge: if the prompts' own estimated cost exceeds ``max_wait_s``: they could only time out.
            QueueFull: if the prompts do not fit in the queue (``reason`` ``queue_full``), or their estimated wait
                behind the work accepted earlier exceeds ``max_wait_s`` (``reason`` ``estimated_wait``; its
                ``retry_after_s`` from the same estimate). Nothing is queued then.
        """
        now = time.perf_counter()
        items = [_Prompt(ids, Future(), now, tokenize_s) for ids in token_ids]
        self._enqueue(items, Work.of_prompts([len(ids) for ids in token_ids]))
        return [item.future for item in items]

    def submit_exclusive(self, run: Callable[[], object], least_s: float = 0.0, expected_s: float | None = None) -> Future:
        """Queue a job that runs on the worker thread with the model to itself (``/steer``).

        The job must end within ``max_wait_s`` of this call (a /steer job cuts its generation to its request's
        deadline). Work accepted after it counts it as busy for ``expected_s`` once it starts, and until that
        deadline when it has no estimate or runs past it (:func:`~herald_service.engine.admission.jobs_left_s`); not
        at the mean of earlier jobs, which admitted moderation behind a long /steer that could only time out.

        Args:
            run: the job.
            least_s: the least seconds the job needs once it starts (a /steer job: its prefills and margin); it is
                admitted only if its estimated wait and these fit (:func:`~herald_service.engine.admission.admission_verdict`).
            expected_s: the seconds it is expected to run once started (a /steer job: its prefills and
                ``max_new_tokens`` decode steps per generation at the measured rate, with a safety factor); ``None``:
                unknown, counted until its deadline.

        Raises:
            NotReady, QueueFull: as :meth:`submit`.
        """
        job = _Exclusive(run, Future(), expected_s)
        self._enqueue([job], Work(jobs=1), least_s)
        return job.future

    def check_room(self, prompts: int, most: Sequence[int | None] | None = None) -> None:
        """Refuse now if ``prompts`` would not fit in the queue as it is, or if they alone, or the work accepted
        earlier and they, would take longer than ``max_wait_s`` (a cheap check before any work, their tokens not yet
        known and counted as none; :meth:`submit` checks again with them, since the queue can fill in between). A
        request that may turn out over its own work limit, each prompt at ``most`` tokens (per prompt, the most it can
        have; None: ``prompt_tokens`` each; :func:`~herald_service.engine.admission.may_be_too_much_work`), is not
        refused 429 here: its 413 or 429 waits for its tokens, so that a request no wait could admit is answered 413
        whatever the load, while the others keep a 429 that costs no tokenizing.

        Raises:
            NotReady: if the worker is not running.
            WorkTooLarge, QueueFull: as :meth:`submit`.
        """
        with self._cond:
            self._check_room(Work(prompts), most=self._bounded(prompts, most))

    def check_work(self, lengths: Sequence[int], more_prompts: int, most: Sequence[int | None] | None = None) -> None:
        """:meth:`check_room` part-way through tokenizing a request: its prompts of these token ``lengths``, and
        ``more_prompts`` not yet tokenized counted as prompts of no tokens. A lower bound on the request's work, so a
        refusal here is one the whole request would get, before the rest is folded and encoded (a breaker pass: 40
        requests of 64 prompts of ~1,500 tokens each were all tokenized, 71 s of CPU, before their 413s, and a
        one-word request beside them took 9.6-15 s).

        A 429 waits for the rest as :meth:`check_room`'s does, while the rest, each at ``most`` tokens (None:
        ``prompt_tokens`` each), may put the request over its own work limit.

        Raises:
            NotReady, WorkTooLarge, QueueFull: as :meth:`submit` (a :class:`WorkTooLarge` message says "or more").
        """
        with self._cond:
            self._check_room(Work.of_prompts(list(lengths)).plus(Work(more_prompts)), partial=True,
                             most=[*lengths, *self._bounded(more_prompts, most)])

    def _bounded(self, prompts: int, most: Sequence[int | None] | None) -> list[int | None]:
        """Per prompt of ``prompts`` not yet tokenized, the most tokens it can have: ``most``'s bound (from its
        characters) capped at ``prompt_tokens``, or ``prompt_tokens`` where ``most`` is None."""
        cap = self.limits.prompt_tokens
        if most is None:
            return [cap] * prompts
        return [length if cap is None or length is None else min(length, cap) for length in most]

    @property
    def ahead(self) -> Work:
        """Prompts, their tokens and exclusive jobs accepted and not yet answered."""
        with self._cond:
            return self._ahead

    def estimated_wait_s(self) -> float:
        """Estimated seconds until the worker has answered the work accepted so far, at most ``max_wait_s``
        (:func:`~herald_service.engine.admission.ahead_seconds`); 0 before any measurement."""
        with self._cond:
            queued, horizon_s, started_s = self._queued(), self._horizon_s(), self._started_s()
        return ahead_seconds(queued, self.cost.fit, self.limits.max_wait_s, horizon_s, started_s)

    def _queued(self) -> Work:
        """The work ahead not yet launched (the launched part counts by :meth:`_started_s`). Under ``_cond``."""
        return self._ahead.plus(self._launched, -1)

    def _started_s(self) -> float:
        """Seconds until the work already started has ended, estimated: the exclusive jobs (:meth:`_jobs_s`) and the
        batches launched, until their estimated end (0 once it has passed while one still runs: the wait is then
        short by its overrun, which the admission headroom is for). Under ``_cond``."""
        running_s = max(self._busy_until - time.perf_counter(), 0.0) if self._launched.prompts else 0.0
        return self._jobs_s() + running_s

    def _horizon_s(self) -> float | None:
        # An upper bound: a deadline stays the latest after its work was answered, until a later one is accepted.
        # Work past its deadline is dropped unless the worker already runs it: a batch launched runs to its end, so
        # its estimated end counts too. Without it, a one-prompt request run on an estimate over the limit
        # (admission_verdict) held the worker 21 s past its 3 s deadline while the cap read the worker as idle, and
        # requests admitted meanwhile got 504s (breaker pass).
        if self.limits.max_wait_s is None:
            return None
        return max(max(self._latest_deadline, self._busy_until) - time.perf_counter(), 0.0)

    def exclusive_seconds_left(self) -> float:
        """Seconds until the exclusive jobs (``/steer``) accepted and not yet answered have ended, estimated
        (:func:`~herald_service.engine.admission.jobs_left_s`): their expected durations, or until their deadline
        without an estimate or past it; 0 without any."""
        with self._cond:
            return self._jobs_s()

    def _jobs_s(self) -> float:
        """Seconds until the exclusive jobs accepted and not yet answered have ended, estimated
        (:func:`~herald_service.engine.admission.jobs_left_s`); 0 without any (or without ``max_wait_s``, which
        bounds them). Under ``_cond``."""
        return jobs_left_s(self._jobs.values(), time.perf_counter())

    def cancel(self, futures: Sequence[Future], reason: str) -> None:
        """Cancel work whose client left or timed out, recording why (``client_gone`` or ``timeout``) in
        ``herald_dropped_prompts_total``, and free its queue places at once: a cancelled prompt still in the queue no
        longer counts toward ``queue_capacity`` (before, 429s answered new clients while only abandoned prompts were
        waiting). Prompts already taken by the worker are dropped, and counted, when it reaches them; running or
        finished ones are left to finish. A running exclusive job is marked as stopping (a /steer whose request ended
        stops at its next pass, prefill chunk or decode step): admission counts it
        :data:`~herald_service.engine.admission.STOPPING_S` more."""
        cancelled = set()
        for future in futures:
            future.herald_cancel_reason = reason  # type: ignore[attr-defined]
            if future.cancel():
                cancelled.add(id(future))
        with self._cond:
            for future in futures:
                clock = self._jobs.get(id(future))
                if clock is not None and clock.started is not None and not future.done():
                    clock.stopping_since = time.perf_counter()
        if not cancelled:
            return
        with self._cond:
            before = len(self._queue)
            self._queue = deque(item for item in self._queue if id(item.future) not in cancelled)
            removed = before - len(self._queue)
            self.metrics.queue_depth.set(self.depth)
        if removed:
            self.metrics.dropped.labels(reason).inc(removed)

    def _drain_s(self, prompts: int) -> int:
        """``Retry-After`` of a full queue, seconds: when ``prompts`` of the prompts and jobs waiting are estimated to
        have been answered, as that share of :meth:`estimated_wait_s` (at most ``max_wait_s``), rounded up, at least
        1; 1 before any measurement. It was always 1: in a flood of 80 clients honouring it, 329 of 330 retries got
        429 again (breaker pass). Under ``_cond`` (re-entrant)."""
        if self.depth <= 0:
            return 1
        return max(1, math.ceil(self.estimated_wait_s() * min(prompts / self.depth, 1.0)))

    def _check_room(self, own: Work, own_job_s: float = 0.0, partial: bool = False,
                    most: Sequence[int | None] | None = None) -> None:
        """Refuse ``own`` (NotReady, QueueTooSmall, WorkTooLarge, QueueFull), or return to admit it. The refusals no
        wait could clear (413) come before those of the queue as it is (429), which would have the client retry in
        vain; ``most``: per prompt, the most tokens it can have where ``own`` is not all known yet, so that no 429 is
        given while its own work may still be over the limit. Under ``_cond``."""
        if not self.alive:
            raise NotReady(self.failure or "inference worker is not running")
        needed = own.prompts + own.jobs
        if needed > self.limits.queue_capacity:
            raise QueueTooSmall(f"this request needs {needed} places in the queue, more than its capacity of"
                                f" {self.limits.queue_capacity} (queue_capacity, HERALD_QUEUE_CAPACITY): no wait could"
                                " admit it; send fewer prompts, or raise the capacity")
        fit = self.cost.fit  # one snapshot: the price and the length it was checked to come from the same fit
        checked = 0 if fit is None else fit.checked_tokens
        verdict = admission_verdict(self._queued(), own, fit, self.limits.max_wait_s, self._horizon_s(), self._started_s(),
                                    own_job_s, checked, partial)
        if isinstance(verdict, TooMuchWork):
            raise WorkTooLarge(verdict.message)
        if most is not None and may_be_too_much_work(most, fit, self.limits.max_wait_s, checked):
            return
        excess = self.depth + needed - self.limits.queue_capacity
        if excess > 0:
            retry_s = self._drain_s(excess)
            # the waiting count, the capacity and this request's need: it printed the capacity as the count waiting
            # (tester), and a request larger than the room left was refused with no word of why
            raise QueueFull(f"queue is full: {self.depth} {_prompts(self.depth)} waiting of a capacity of"
                            f" {self.limits.queue_capacity} (queue_capacity, HERALD_QUEUE_CAPACITY), and this request"
                            f" needs {needed} more; retry in {retry_s} s", retry_after_s=retry_s)
        if isinstance(verdict, Refusal):
            raise QueueFull(verdict.message, retry_after_s=verdict.retry_after_s, reason="estimated_wait")

    def _settled(self, share: Work, item: _Prompt | _Exclusive) -> Callable[[Future], None]:
        def give_back(future: Future) -> None:
            with self._cond:
                self._ahead = self._ahead.plus(share, -1)
                self._jobs.pop(id(future), None)
                if isinstance(item, _Prompt) and item.launched:
                    self._launched = self._launched.plus(share, -1)
                    if not self._launched.prompts:  # no batch runs now: an estimate that ran long is not carried on
                        self._busy_until = min(self._busy_until, time.perf_counter())

        return give_back

    def _enqueue(self, items: list[_Prompt | _Exclusive], own: Work, own_job_s: float = 0.0) -> None:
        with self._cond:
            self._check_room(own, own_job_s)
            deadline = None if self.limits.max_wait_s is None else time.perf_counter() + self.limits.max_wait_s
            if deadline is not None:
                self._latest_deadline = max(self._latest_deadline, deadline)
            self._ahead = self._ahead.plus(own)
            for item in items:
                share = Work.of_prompts([len(item.token_ids)]) if isinstance(item, _Prompt) else Work(jobs=1)
                if isinstance(item, _Exclusive) and deadline is not None:
                    self._jobs[id(item.future)] = JobClock(deadline, item.expected_s)
                item.future.add_done_callback(self._settled(share, item))
            self._queue.extend(items)
            self.metrics.queue_depth.set(self.depth)
            self._cond.notify()

    # -- worker ----------------------------------------------------------------------------------------------
    def _take_window(self, wait: bool = True) -> list[_Prompt] | _Exclusive | None:
        """The next exclusive job, or the waiting requests' prompts up to ``4 x max_rows`` (and the rest of the
        request that reaches it); None when stopping; ``[]`` when nothing waits and ``wait`` is False (a batch is in
        flight: finish it instead of sleeping)."""
        window = 4 * self.limits.max_rows
        with self._cond:
            while not self._queue and not self._stopping:
                if not wait:
                    return []
                self._cond.wait(0.5)
            if self._stopping:
                return None
            if isinstance(self._queue[0], _Exclusive):
                job = self._queue.popleft()
                self.metrics.queue_depth.set(self.depth)
                return job  # type: ignore[return-value]
            # Give concurrent requests a moment to join this batch, unless a full batch is already waiting (or one is
            # in flight: requests join the next batch while it runs anyway).
            deadline = time.perf_counter() + (self.limits.delay_s if wait else 0.0)
            while len(self._queue) < self.limits.max_rows and not self._stopping:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            taken: list[_Prompt] = []
            # whole requests: the window ends past ``window`` prompts only to finish the request it is taking, so no
            # request is split between two windows (its last prompt waiting for a whole later window)
            while self._queue and isinstance(self._queue[0], _Prompt) and (
                    len(taken) < window or self._queue[0].enqueued == taken[-1].enqueued):
                taken.append(self._queue.popleft())  # type: ignore[arg-type]
            self._window_left = len(taken)
            self.metrics.queue_depth.set(self.depth)
            return taken

    def _worker(self) -> None:
        try:
            while True:
                work = self._take_window(wait=self._in_flight is None)
                if work is None:
                    self._finish_in_flight()
                    return
                if not work or isinstance(work, _Exclusive):
                    self._finish_in_flight()  # nothing new to launch, or a job that needs the model alone
                    if isinstance(work, _Exclusive):
                        self._in_hand = [work]
                        self._run_exclusive(work)
                    continue
                self._in_hand = list(work)
                batches = [[work[i] for i in batch] for batch in self._plan(work)]
                for k, batch in enumerate(batches):
                    self._window_rest = batches[k + 1 :]  # what interleaving between chunks must not make late
                    # Claim prompts batch by batch, right before the forward pass: a prompt whose client left or
                    # timed out while earlier batches of this window ran is still cancellable, and is dropped here.
                    live = self._claim(batch)
                    with self._cond:  # claimed (answered or dropped): no longer waiting
                        self._window_left -= len(batch)
                        self.metrics.queue_depth.set(self.depth)
                    if len(live) == 1 and self._chunked(live[0]):
                        self._run_chunked(live[0])
                    elif live:
                        self._launch(live)
        except BaseException as exc:  # the loop itself broke: say so on /health/ready and answer everyone
            log.exception("inference worker died")
            self.failure = f"inference worker died: {type(exc).__name__}"
            self.metrics.worker_up.set(0)
            self.metrics.worker_failed.set(1)
            error = NotReady(self.failure)
            in_flight = self._in_flight[0] if self._in_flight else []
            for item in [*self._in_hand, *in_flight, *self._finishing]:  # taken from the queue but not answered yet
                if not item.future.done():
                    item.future.set_exception(error)
            self._fail_pending(error)

    def _claim(self, prompts: Sequence[_Prompt]) -> list[_Prompt]:
        """Mark ``prompts`` running, right before their forward pass; those cancelled meanwhile (client gone, timed
        out) are dropped and counted in ``herald_dropped_prompts_total``. Returns the live ones."""
        live = []
        for prompt in prompts:
            if prompt.future.set_running_or_notify_cancel():
                live.append(prompt)
            else:
                self.metrics.dropped.labels(_cancel_reason(prompt.future)).inc()
        return live

    def _plan(self, window: Sequence[_Prompt]) -> list[list[int]]:
        """:func:`plan_in_arrival_order` of a window (earlier requests first, sorted by length within cohorts of a
        few batches), with every prompt longer than a chunk (:meth:`_chunked`) in a batch of its own, after the rest
        of the batch it was planned in."""
        lengths = [len(prompt.token_ids) for prompt in window]
        batches = plan_in_arrival_order(lengths, [prompt.enqueued for prompt in window], self.limits.token_budget,
                                        self.limits.max_rows, self.backbone.packs_batches)
        if not self.chunk_tokens:
            return batches
        planned = []
        for batch in batches:
            short = [i for i in batch if not runs_in_chunks(lengths[i], self.chunk_tokens)]
            planned.extend([short] if short else [])
            planned.extend([i] for i in batch if runs_in_chunks(lengths[i], self.chunk_tokens))
        return planned

    def _chunked(self, prompt: _Prompt) -> bool:
        """Whether ``prompt`` is prefilled in chunks (:func:`~herald_service.backbone.base.runs_in_chunks`)."""
        return runs_in_chunks(len(prompt.token_ids), self.chunk_tokens)

    def _run_chunked(self, prompt: _Prompt) -> None:
        """Prefill a prompt longer than a chunk one chunk at a time (:meth:`Backbone.prefill_chunks`) and answer it.

        Between two chunks, shorter prompts waiting at the head of the queue are answered (:meth:`_interleave`), so
        a one-word request no longer waits for a 4,000-token prefill (head-of-line blocking). The prompt is launched
        as a batch is (counted in the estimated wait until its estimated end) and its own chunks' time, not the
        interleaved batches', goes into the cost model. A prompt whose client left or timed out
        (:meth:`cancel`) stops at the next chunk and is counted in ``herald_dropped_prompts_total``."""
        self._finish_in_flight()  # the chunks run synchronously, also where batches are pipelined (CUDA)
        started = time.perf_counter()
        estimate_s = self._mark_launched([prompt], started)
        steps = self.backbone.prefill_chunks(prompt.token_ids, self.chunk_tokens, reduce=self.probe.directions.dot)
        own_s, done_tokens = 0.0, 0  # seconds and tokens of this prompt's own chunks so far
        try:
            while True:
                chunk_started = time.perf_counter()
                try:
                    projections = next(steps)
                except torch.OutOfMemoryError:
                    _empty_device_cache()
                    self._fail([prompt], InputTooLarge(f"a prompt of {len(prompt.token_ids)} tokens does not fit in device memory", field="input"))
                    return
                except Exception:
                    self._forward_failed([prompt])
                    return
                own_s += time.perf_counter() - chunk_started
                if projections is not None:
                    break
                done_tokens += self.chunk_tokens
                reason = getattr(prompt.future, "herald_cancel_reason", None)
                if reason is not None:  # its request has ended: the rest of the prefill would answer no one
                    self.metrics.dropped.labels(reason).inc()
                    # The chunks run are the chunked prefill of the prompt's first tokens: timed, so a prompt the
                    # model priced too low (and admitted into a 504) is priced better next time (a breaker pass:
                    # without it, the same prompt got 504 three times, where the one-pass prefill got 504, then 413).
                    self.cost.observe(BatchTiming.of_prompts([done_tokens], own_s))
                    self._last_answered = time.perf_counter()
                    prompt.future.set_exception(RequestTimeout(f"prompt dropped after {own_s:.1f} s of its prefill ({reason})"))
                    self._export_estimates()
                    return
                self._interleave(prompt, estimate_s - own_s)
        finally:
            steps.close()
        self._score([prompt], lambda: self.probe.directions.normalize(projections.numpy()), started, own_forward_s=own_s)

    def _interleave(self, prompt: _Prompt, left_s: float) -> None:
        """Between two chunks of ``prompt``'s prefill: answer one batch of waiting prompts no longer than a chunk,
        taken from the queue in arrival order (past longer prompts and exclusive jobs queued before them), together
        at most a chunk's tokens (padded, or real when packed) and ``max_rows`` prompts, so ``prompt`` advances at
        least one chunk per batch. Taken only if every piece of work the batch goes ahead of still ends by its
        deadline (:meth:`_keeps_deadlines`): interleaving never makes work admitted on time late."""
        with self._cond:
            picked: list[int] = []
            lengths: list[int] = []
            passed: list[tuple[int, _Prompt | _Exclusive]] = []
            for index, item in enumerate(self._queue):
                if len(lengths) >= self.limits.max_rows:
                    break
                if not isinstance(item, _Prompt) or self._chunked(item):
                    passed.append((index, item))
                    continue
                n = len(item.token_ids)
                if batch_tokens([*lengths, n], self.backbone.packs_batches) > self.chunk_tokens:
                    break
                picked.append(index)
                lengths.append(n)
            if not picked:
                return
            jumped = [item for index, item in passed if index < picked[-1]]
            if not self._keeps_deadlines(prompt, left_s, Work.of_prompts(lengths), jumped):
                return
            taken: list[_Prompt] = [self._queue[i] for i in picked]  # type: ignore[misc]
            for index in reversed(picked):
                del self._queue[index]
            self.metrics.queue_depth.set(self.depth)
        self._in_hand.extend(taken)
        live = self._claim(taken)
        if live:
            self.metrics.interleaved.inc(len(live))
            self._launch(live)
            self._finish_in_flight()

    def _keeps_deadlines(self, prompt: _Prompt, left_s: float, batch: Work, jumped: Sequence[_Prompt | _Exclusive]) -> bool:
        """Whether a batch of ``batch`` work run now, by the cost model, leaves every piece of work it goes ahead of
        ending within :data:`WAIT_HEADROOM` of ``max_wait_s`` after its submission (the service's
        ``request_timeout_s``; the margin admission keeps for the estimate's error, kept here for the same reason):
        ``prompt`` (``left_s``: seconds of its prefill estimated left), then the rest of the worker's window in order,
        then the queued ``jumped`` work (an exclusive job at its expected duration; one without an estimate is never
        jumped). True without ``max_wait_s`` or before the cost model has a fit. Under ``_cond``. A breaker pass found
        a check of ``prompt`` alone, against the whole timeout, not enough: behind it two more 3,938-token prompts of
        the same request, pushed back by 200 interleaved short prompts, answered 504 under a 25 s timeout."""
        batch_s = self.cost.seconds(batch)
        if self.limits.max_wait_s is None or batch_s is None:
            return True
        max_wait_s = WAIT_HEADROOM * self.limits.max_wait_s
        ends = time.perf_counter() + batch_s + max(left_s, 0.0)
        if ends > prompt.enqueued + max_wait_s:
            return False
        for rest in self._window_rest:
            ends += self.cost.seconds(Work.of_prompts([len(p.token_ids) for p in rest])) or 0.0
            if ends > min(p.enqueued for p in rest) + max_wait_s:
                return False
        for item in jumped:
            if isinstance(item, _Exclusive):
                if item.expected_s is None:
                    return False
                ends += item.expected_s
            else:
                ends += self.cost.seconds(Work.of_prompts([len(item.token_ids)])) or 0.0
            if ends > item.enqueued + max_wait_s:
                return False
        return True

    def _mark_launched(self, batch: Sequence[_Prompt], started: float) -> float:
        """Count ``batch`` as launched at ``started`` (perf_counter): in ``_launched``, and in the worker's estimated
        end ``_busy_until`` by its estimated seconds, which are returned (0 before the cost model has a fit)."""
        work = Work.of_prompts([len(p.token_ids) for p in batch])
        estimate_s = self.cost.seconds(work) or 0.0
        with self._cond:
            self._busy_until = max(self._busy_until, started) + estimate_s
            self._launched = self._launched.plus(work)
            for prompt in batch:
                prompt.launched = True
        return estimate_s

    def _launch(self, batch: list[_Prompt]) -> None:
        """Start a batch's forward; where the device runs behind the host (CUDA), score the previous batch while it
        runs, so the device never waits for the host's scoring, answering and batching between two batches."""
        started = time.perf_counter()
        self._mark_launched(batch, started)
        try:
            # Projected where the states are: only (batch, layer) comes back to the host.
            wait = self.backbone.launch_last_token_states([p.token_ids for p in batch], reduce=self.probe.directions.dot)
        except torch.OutOfMemoryError:
            self._finish_in_flight()
            self._run_batch(batch)  # split and retried synchronously
            return
        except Exception:
            self._forward_failed(batch)
            return
        previous, self._in_flight = self._in_flight, (batch, wait, started)
        if previous is not None:
            self._finish(*previous)
        if not self.backbone.overlaps_host:
            self._finish_in_flight()

    def _finish_in_flight(self) -> None:
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            self._finish(*in_flight)

    def _finish(self, batch: list[_Prompt], wait: Callable[[], torch.Tensor], started: float) -> None:
        self._finishing = batch
        try:
            projections = wait()
        except Exception:
            self._forward_failed(batch)
            return
        self._score(batch, lambda: self.probe.directions.normalize(projections.numpy()), started)
        self._finishing = []

    def _run_exclusive(self, job: _Exclusive) -> None:
        """Run ``job`` and answer its future once. A job whose request ended (:meth:`cancel`) before it started is
        dropped; one that stops part-way for it (a /steer job checks between its passes, chunks and decode steps) is
        counted dropped too, under the same reason, as a chunked /classify prompt stopped at a chunk is; and one that
        stops itself with :class:`RequestTimeout` (it cannot end by its deadline) is counted under ``timeout``."""
        if not job.future.set_running_or_notify_cancel():
            self.metrics.dropped.labels(_cancel_reason(job.future)).inc()
            return
        started = time.perf_counter()
        with self._cond:
            clock = self._jobs.get(id(job.future))
            if clock is not None:
                clock.started = started
            self._running_job = clock
        try:
            result = job.run()
        except HeraldError as exc:
            self._job_done()
            # its request had ended (stopped for no one), or it saw it could not end by its deadline (a /steer's
            # prefills): its 504, counted as a timeout (tester)
            stopped_for = getattr(job.future, "herald_cancel_reason", None) or (
                "timeout" if isinstance(exc, RequestTimeout) else None)
            if stopped_for is not None:
                self.metrics.dropped.labels(stopped_for).inc()
            job.future.set_exception(exc)
        except Exception:
            log.exception("exclusive job failed (request_id=%s)", job.request_id or "-",
                          extra={"request_id": job.request_id})
            self._job_done()
            job.future.set_exception(InferenceFailed("inference failed; see server log"))
        else:
            self._job_done()
            job.future.set_result(result)

    def _job_done(self) -> None:
        # Before the answer is set, so a caller woken by it sees the worker's busy time start here and the gauges
        # current. A job that stopped inside a pass :meth:`job_forward` marked leaves no forward running: the wait
        # cap is not held to that pass's estimated end.
        with self._cond:
            self._running_job = None
            self._busy_until = min(self._busy_until, time.perf_counter())
        self._last_answered = time.perf_counter()
        self._export_estimates()

    def _run_batch(self, batch: list[_Prompt]) -> None:
        started = time.perf_counter()
        try:
            states = self.backbone.last_token_states([p.token_ids for p in batch])
        except torch.OutOfMemoryError:
            if len(batch) > 1:
                log.warning("out of memory on a batch of %d; splitting", len(batch))
                _empty_device_cache()
                half = len(batch) // 2
                self._run_batch(batch[:half])
                self._run_batch(batch[half:])
                return
            _empty_device_cache()
            self._fail(batch, InputTooLarge(f"a prompt of {len(batch[0].token_ids)} tokens does not fit in device memory", field="input"))
            return
        except Exception:
            self._forward_failed(batch)
            return
        self._score(batch, lambda: self.probe.trajectories(states), started)

    def _score(self, batch: list[_Prompt], trajectories: Callable[[], np.ndarray], started: float,
               own_forward_s: float | None = None) -> None:
        """Score a batch's trajectories ``(batch, layer)`` (computed by ``trajectories``, inside the scoring time and
        its error handling) and answer every prompt of the batch. ``own_forward_s``: the seconds of the batch's own
        forward passes when other batches ran between them (a chunked prefill); the cost model is given those and the
        scoring, not the span since ``started``."""
        forwarded = time.perf_counter()
        try:
            out = self.probe.predict_trajectories(trajectories())
        except Exception:
            log.exception("probe scoring failed")
            self._fail(batch, InferenceFailed("scoring failed; see server log"))
            return
        scored = time.perf_counter()
        lengths = [len(p.token_ids) for p in batch]
        # Busy time since the worker last answered, not since this batch was launched: pipelined, the next batch is
        # launched before this one is scored, and launch-to-score spans would count the overlap twice.
        busy_s = scored - max(started, self._last_answered) if own_forward_s is None else own_forward_s + scored - forwarded
        timing = BatchTiming.of_prompts(lengths, busy_s)
        self._run = timing if self._run is None else self._run.plus(timing)
        # Observed when the pipeline drains or every RUN_BATCHES batches under steady load: the sum over a run is the
        # exact time between its first batch's start and its last answer, whatever the overlap did inside it.
        if self._in_flight is None or self._run.batches >= RUN_BATCHES:
            self.cost.observe(self._run)
            self._run = None
        self._last_answered = scored
        self.metrics.batch_size.observe(len(batch))
        self.metrics.batch_tokens.observe(batch_tokens(lengths, self.backbone.packs_batches))
        self.metrics.inference_duration.observe(scored - started)
        for i, prompt in enumerate(batch):
            self.metrics.queue_wait.observe(started - prompt.enqueued)
            timing = Timing(prompt.tokenize_s, started - prompt.enqueued, forwarded - started, scored - forwarded, len(batch))
            prompt.future.set_result(classification_at(out, i, len(prompt.token_ids), timing))
        self._export_estimates()

    def job_forward(self, lengths: Sequence[int]) -> None:
        """The running exclusive job starts a forward pass of prompts of these token ``lengths`` (a /steer prefill),
        which only its request's end stops (at a chunk): until its estimated end the job counts as busy in admission,
        past its deadline too
        (:attr:`JobClock.forward_until`, :func:`~herald_service.engine.admission.jobs_left_s`), and so does the worker
        in the wait cap (``_horizon_s``), as a launched batch does. :meth:`observe_job_batch` ends it. Worker thread."""
        estimate_s = self.cost.seconds(Work.of_prompts(list(lengths))) or 0.0
        end = time.perf_counter() + estimate_s
        with self._cond:
            self._busy_until = max(self._busy_until, end)
            if self._running_job is not None:
                self._running_job.forward_until = end

    def observe_job_batch(self, lengths: Sequence[int], seconds: float) -> None:
        """A forward pass an exclusive job ran on the worker thread (a /steer prefill of prompts of these token
        ``lengths``, timed in ``seconds``), into the cost model as a batch. Without it only /classify batches taught
        the model, so on a server given over to /steer a prompt priced too low by the warm-up was admitted, ran, and
        timed out again and again (a breaker pass: a 3,000-token /steer held the worker 16 s for a 504). Worker
        thread only, as :meth:`BatchCost.observe`."""
        self.cost.observe(BatchTiming.of_prompts(list(lengths), seconds))
        with self._cond:  # the pass :meth:`job_forward` marked is over; the job alone holds the worker
            self._busy_until = min(self._busy_until, time.perf_counter())
            if self._running_job is not None:
                self._running_job.forward_until = None
        self._export_estimates()

    def _export_estimates(self) -> None:
        """The cost model's coefficients and the estimated wait of the work ahead, to their gauges."""
        fit = self.cost.fit
        if fit is not None:
            values = (fit.per_batch_s, fit.per_prompt_s, fit.per_token_s, fit.per_squared_token_s)
            for term, value in zip(TERMS, values):
                self.metrics.worker_cost.labels(term).set(value)
        self.metrics.estimated_wait.set(self.estimated_wait_s())

    def _forward_failed(self, batch: list[_Prompt]) -> None:
        log.exception("forward pass failed on a batch of %d", len(batch))
        self._fail(batch, InferenceFailed("inference failed; see server log"))

    def _fail(self, batch: list[_Prompt], error: HeraldError) -> None:
        for prompt in batch:
            if not prompt.future.done():
                prompt.future.set_exception(error)

    def _fail_pending(self, error: HeraldError) -> int:
        """Answer every queued prompt and job with ``error``; returns how many were answered (not those cancelled)."""
        with self._cond:
            pending, self._queue = list(self._queue), deque()
            self._window_left = 0
            self.metrics.queue_depth.set(0)
        failed = 0
        for item in pending:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(error)
                failed += 1
        return failed


def classification_at(out: ProbeOutput, i: int, tokens: int, timing: Timing | None = None) -> Classification:
    """The i-th prompt of a :class:`ProbeOutput` as a :class:`Classification`."""
    return Classification(
        flagged=bool(out.flagged[i]),
        score=float(out.scores[i]),
        logit=float(out.logits[i]),
        threshold=float(out.threshold),
        tokens=tokens,
        features={name: float(v) for name, v in zip(out.feature_names, out.features[i], strict=True)},
        trajectory=[float(v) for v in np.asarray(out.trajectories[i])],
        onset_layer=out.onset_layers[i],
        timing=timing or Timing(),
    )


def _cancel_reason(future: Future) -> str:
    return getattr(future, "herald_cancel_reason", "client_gone")


def _empty_device_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _prompts(count: int) -> str:
    """``"prompt"`` or ``"prompts"`` after ``count`` (a /steer job waiting counts as one)."""
    return "prompt" if count == 1 else "prompts"

"""Every Prometheus metric Herald exports, declared once (DESIGN section 5). Prefix ``herald_``; units in names;
no prompt text or ids in labels. The Grafana dashboard and alert rules in ``docker/`` use exactly these names.
"""

from __future__ import annotations

from typing import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, disable_created_metrics

from herald_service.types import VIEW_KINDS, Classification

REJECT_REASONS = ("batch_size", "messages", "characters", "tokens", "estimated_work", "queue_capacity",
                  "estimated_wait", "queue_full", "steer_concurrency", "buffered_bodies", "body_size", "body_timeout", "content_type",
                  "content_encoding", "transfer_encoding", "list_length", "json_containers", "header_size", "header_timeout",
                  "invalid_http", "connections", "health_connections", "invalid_request")
"""Every ``reason`` of ``herald_rejected_requests_total`` (created at 0 at start, so the first refusals after a
restart show in ``rate()``/``increase()``: a series that appears at its first increment loses it)."""
DROP_REASONS = ("client_gone", "timeout")
"""Every ``reason`` of ``herald_dropped_prompts_total``, created at 0 at start."""
VIEW_KINDS_SCORED = ("message", "content_part", "trimmed", "reading")
"""Every ``kind`` of ``herald_scored_views_total``: the prompts scored beside an input whole
(:data:`~herald_service.types.VIEW_KINDS` but ``whole``), created at 0."""
STEER_MODES = ("ablate", "add")
"""Every ``mode`` of ``herald_steer_runs_total``: the modes ``/steer`` takes (``SteerRequest.mode``), created at 0."""
STARTING_STATUSES = (200, 429, 499, 500, 503, 504)
"""The statuses of ``herald_requests_total`` created at 0 for each model route at start: the ones the alert rules and
the dashboard divide (429s, 499s and 5xx over all requests)."""
CLIENT_GONE_STATUS = 499
"""The status counted for a request whose client left before its answer was written (nginx's convention). Its
latency has a ``status_class`` of its own, ``"499"``, not ``"4xx"``: see :meth:`HeraldMetrics._status_class`."""

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    45.0, 60.0, 90.0, 120.0)
"""Seconds. Past the default ``request_timeout_s`` (60 s) up to twice it: ending at 30 s, a p99 of requests that ran to
their timeout read as about 29.5 s (histogram_quantile interpolates inside the last finite bucket)."""
_SCORE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
_TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class HeraldMetrics:
    """The process's metrics on one registry (a fresh registry per app keeps tests independent)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # No *_created sample beside each counter and histogram series (prometheus_client's default): it doubled the
        # series and nothing reads it (tester). A switch for the whole process, which exports Herald's metrics only.
        disable_created_metrics()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("herald_requests_total", "HTTP requests by route and status code.", ["route", "status"], registry=r)
        # by status class: fast refusals (422, 413, 429: no model work) pulled a route's p50-p99 down under a flood of
        # bad requests, with no way to leave them out (tester); the class, not the code, keeps the buckets few
        self.request_duration = Histogram(
            "herald_request_duration_seconds", "HTTP request latency, seconds, by route and status class (2xx, 4xx, 5xx,"
            " and 499 on its own: a client that gave up waiting).",
            ["route", "status_class"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.inference_duration = Histogram(
            "herald_inference_duration_seconds", "Forward pass plus scoring of one batch, seconds.", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.queue_wait = Histogram(
            "herald_queue_wait_seconds", "Time a prompt waited for the worker, seconds.", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.decisions = Counter(
            "herald_moderation_decisions_total", "Moderation verdicts by route and decision (flagged/allowed).", ["route", "decision"], registry=r
        )
        self.score = Histogram("herald_moderation_score_ratio", "Moderation score in [0, 1].", buckets=_SCORE_BUCKETS, registry=r)
        self.batch_size = Histogram("herald_batch_size_prompts", "Prompts per forward pass.", buckets=_BATCH_BUCKETS, registry=r)
        self.batch_tokens = Histogram(
            "herald_batch_tokens", "Tokens per forward pass: rows x longest when padded, real tokens when packed (varlen).", buckets=_TOKEN_BUCKETS, registry=r
        )
        self.prompt_tokens = Histogram("herald_prompt_tokens", "Rendered tokens per prompt.", buckets=_TOKEN_BUCKETS, registry=r)
        self.queue_depth = Gauge("herald_queue_depth_prompts", "Prompts waiting for the worker.", registry=r)
        self.dropped = Counter("herald_dropped_prompts_total", "Prompts dropped before the model answered them (client gone, timeout), by reason.", ["reason"], registry=r)
        self.interleaved = Counter(
            "herald_interleaved_prompts_total", "Prompts answered between two chunks of a longer prompt's prefill.", registry=r
        )
        self.rejected = Counter("herald_rejected_requests_total", "Requests refused before any model work, by reason.", ["reason"], registry=r)
        self.scored_views = Counter(
            "herald_scored_views_total", "Prompts scored beside the inputs whole, by kind: a pending message alone,"
            " a content part alone, a text without a short leading or trailing clause, a text read another way (a"
            " word spelled out one letter at a time, words spread out or set apart; both HERALD_TRIMMED_VIEWS). They"
            " are in herald_batch_size_prompts and herald_prompt_tokens too.", ["kind"], registry=r)
        # which prompt decided a flag: how often a verdict rests on a view (an evasion caught) rather than the input
        # whole showed in no metric (tester)
        self.flagged_by_view = Counter(
            "herald_flagged_by_view_total", "Flagged verdicts by route and the prompt that decided them (view: whole,"
            " message, content_part, trimmed, reading; the answer's view field).", ["route", "view"], registry=r)
        self.steer_runs = Counter("herald_steer_runs_total", "/steer jobs admitted to the worker by intervention mode, whatever their end (200, 499 client gone, 504).", ["mode"], registry=r)
        self.worker_cost = Gauge(
            "herald_worker_cost_seconds",
            "Admission's model of the worker: busy seconds of a batch per batch, prompt, prompt token and squared prompt"
            " token (fitted online; engine.admission.BatchCost).", ["per"], registry=r,
        )
        self.estimated_wait = Gauge(
            "herald_estimated_wait_seconds",
            "Estimated seconds until the worker has answered the work accepted so far (at most request_timeout_s).", registry=r,
        )
        self.admission_wait_limit = Gauge(
            "herald_admission_wait_limit_seconds",
            "Estimated wait past which admission refuses a request with 429 (engine.admission.WAIT_HEADROOM x"
            " request_timeout_s): the bound for herald_estimated_wait_seconds.", registry=r,
        )
        self.worker_up = Gauge("herald_worker_up", "1 while the inference worker can serve, else 0.", registry=r)
        self.worker_failed = Gauge(
            "herald_worker_failed", "1 once the model, probe or warm-up failed to load or the inference worker died:"
            " the replica cannot serve until it is restarted. 0 while loading and serving.", registry=r,
        )
        # herald_process_start_time_seconds (Unix time), _resident_memory_bytes, _cpu_seconds_total, _open_fds ...
        # from /proc (Linux; none elsewhere): the alert rules tell a model still loading from one that never loads by
        # the process's age, and from a failed load or a dead worker by herald_worker_failed.
        ProcessCollector(namespace="herald", registry=r)
        # probe and probe_sha256: two replicas mid-rollout with different probes looked the same (tester)
        self.model_info = Gauge(
            "herald_model_info", "Loaded backbone and probe (value 1): probe is its folder's name, probe_sha256 the"
            " first 12 hex digits of the SHA-256 of its probe.json and probe.safetensors.",
            ["backbone", "revision", "probe", "probe_sha256", "probe_feature_set", "device", "dtype", "version"], registry=r,
        )
        # set once the load's reference check passed (herald_service/probes/reference.py); no series for a probe
        # without reference logits, so "unchecked" is not read as "checked, distance 0"
        self.reference_distance = Gauge(
            "herald_probe_reference_logit_distance", "Median distance, in logits, of the probe's reference prompts from"
            " the logits recorded when it was fitted, measured at load (a load above the tolerance, 1.0, is refused).",
            ["probe"], registry=r,
        )
        # Labelled children of the per-request series, looked up once: ``.labels()`` validates and joins its label
        # values under a lock on every call and cost more than the update itself (benchmarks/host_cost.py).
        self._request_series: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        self._decision_series: dict[tuple[str, bool], Counter] = {}
        self._view_series: dict[tuple[str, str], Counter] = {}
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for reason in DROP_REASONS:
            self.dropped.labels(reason)
        for kind in VIEW_KINDS_SCORED:
            self.scored_views.labels(kind)
        for mode in STEER_MODES:  # appeared at the first /steer, whose run rate() and increase() then missed (tester)
            self.steer_runs.labels(mode)

    def count_refusal(self, reason: str) -> None:
        """One more ``herald_rejected_requests_total`` under ``reason``: the HTTP layer's refusals
        (:func:`~herald_service.api.http_protocol.header_bounded_protocol`), which reach no route."""
        self.rejected.labels(reason).inc()

    def start_routes(self, routes: Sequence[str], decision_routes: Sequence[str] = ()) -> None:
        """Create at 0 the series a restart would otherwise lose the first increment of: each of ``routes`` (route
        templates) with each of :data:`STARTING_STATUSES`, their latency histograms, and both verdicts and every
        deciding view (:data:`~herald_service.types.VIEW_KINDS`) of each of ``decision_routes``."""
        for route in routes:
            for status in STARTING_STATUSES:
                self._request_children(route, status)
        for route in decision_routes:
            for flagged in (True, False):
                self._decision_child(route, flagged)
            for view in VIEW_KINDS:
                self._view_child(route, view)

    def _request_children(self, route: str, status: int) -> tuple[Counter, Histogram]:
        series = self._request_series.get((route, status))
        if series is None:
            series = self._request_series[(route, status)] = (self.requests.labels(route, str(status)),
                                                              self.request_duration.labels(route, self._status_class(status)))
        return series

    @staticmethod
    def _status_class(status: int) -> str:
        """``herald_request_duration_seconds``'s ``status_class`` of ``status``: ``"2xx"``, ``"4xx"``, ``"5xx"`` ...,
        but ``"499"`` for :data:`CLIENT_GONE_STATUS`.

        The latency alert and the dashboard leave ``4xx`` out (refusals answered without model work are fast, and a
        flood of them hid slow answers). A 499 is the opposite: behind a gateway with a short timeout, the slow requests
        are the ones whose client gives up, so counted as ``4xx`` they left the latency alert blind exactly when
        answers were slow (tester). Its duration is how long the client waited before leaving.
        """
        return str(status) if status == CLIENT_GONE_STATUS else f"{status // 100}xx"

    def _decision_child(self, route: str, flagged: bool) -> Counter:
        counter = self._decision_series.get((route, flagged))
        if counter is None:
            counter = self._decision_series[(route, flagged)] = self.decisions.labels(route, "flagged" if flagged else "allowed")
        return counter

    def _view_child(self, route: str, view: str) -> Counter:
        counter = self._view_series.get((route, view))
        if counter is None:
            counter = self._view_series[(route, view)] = self.flagged_by_view.labels(route, view)
        return counter

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """Count one HTTP request by route template and status, and observe its latency (``seconds``)."""
        counter, histogram = self._request_children(route, status)
        counter.inc()
        histogram.observe(seconds)

    def observe_decisions(self, route: str, results: Sequence[Classification]) -> None:
        """Count each verdict as ``flagged`` or ``allowed``, a flagged one by the view that decided it, and observe its
        score."""
        for result in results:
            self._decision_child(route, result.flagged).inc()
            if result.flagged:
                self._view_child(route, result.view).inc()
            self.score.observe(result.score)

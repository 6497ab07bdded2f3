"""Every Prometheus metric Herald exports, declared once (DESIGN section 5). Prefix ``herald_``; units in names;
no prompt text or ids in labels. The Grafana dashboard and alert rules in ``docker/`` use exactly these names.
"""

from __future__ import annotations

from typing import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from herald_service.types import Classification

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SCORE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
_TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class HeraldMetrics:
    """The process's metrics on one registry (a fresh registry per app keeps tests independent)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("herald_requests_total", "HTTP requests by route and status code.", ["route", "status"], registry=r)
        self.request_duration = Histogram(
            "herald_request_duration_seconds", "HTTP request latency, seconds.", ["route"], buckets=_LATENCY_BUCKETS, registry=r
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
        self.steer_runs = Counter("herald_steer_runs_total", "/steer runs by intervention mode.", ["mode"], registry=r)
        self.worker_cost = Gauge(
            "herald_worker_cost_seconds",
            "Admission's model of the worker: busy seconds of a batch per batch, prompt, prompt token and squared prompt"
            " token (fitted online; engine.admission.BatchCost).", ["per"], registry=r,
        )
        self.estimated_wait = Gauge(
            "herald_estimated_wait_seconds",
            "Estimated seconds until the worker has answered the work accepted so far (at most request_timeout_s).", registry=r,
        )
        self.worker_up = Gauge("herald_worker_up", "1 while the inference worker can serve, else 0.", registry=r)
        self.model_info = Gauge(
            "herald_model_info", "Loaded backbone and probe (value 1).",
            ["backbone", "revision", "probe_feature_set", "device", "dtype", "version"], registry=r,
        )
        # Labelled children of the per-request series, looked up once: ``.labels()`` validates and joins its label
        # values under a lock on every call and cost more than the update itself (benchmarks/host_cost.py).
        self._request_series: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        self._decision_series: dict[tuple[str, bool], Counter] = {}

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """Count one HTTP request by route template and status, and observe its latency."""
        series = self._request_series.get((route, status))
        if series is None:
            series = self._request_series[(route, status)] = (self.requests.labels(route, str(status)), self.request_duration.labels(route))
        series[0].inc()
        series[1].observe(seconds)

    def observe_decisions(self, route: str, results: Sequence[Classification]) -> None:
        """Count each verdict as ``flagged`` or ``allowed`` and observe its score."""
        for result in results:
            counter = self._decision_series.get((route, result.flagged))
            if counter is None:
                counter = self._decision_series[(route, result.flagged)] = self.decisions.labels(route, "flagged" if result.flagged else "allowed")
            counter.inc()
            self.score.observe(result.score)

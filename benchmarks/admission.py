"""Admission: the server's estimate of a request's work against that request's real time, and bursts against the limit.

Why: Herald refuses, at once, a request whose own estimated work exceeds ``request_timeout_s`` (413) and one whose
estimated wait behind accepted work exceeds 80% of it (429 with ``Retry-After``; engine/admission.py), so that an
accepted request is answered rather than timed out (504). Those refusals are only as good as the estimate, and the
estimate is a model fitted on the machine it runs on; this benchmark measures it against the real work, in one run.

How: real ``herald serve`` processes on the embedded backbone (the default; CPU, float32), one HTTP client (httpx)
in this process.

1. Estimate vs real. Two servers: ``default`` (``request_timeout_s`` as shipped) and ``baseline`` (the same but
   ``HERALD_REQUEST_TIMEOUT_S`` 3,600 s, so nothing is refused). Each request shape goes to the baseline, then to the
   default server, in the same order on both, so their cost models see the same traffic: 64 prompts of 71, 431 and
   831 tokens, then 60 one-prompt requests of a short text and 8 prompts of 4,031 tokens (:data:`SHAPES`). The
   baseline's wall-clock time for the request is the real work (what ``request_timeout_s`` bounds); the estimate is
   the one admission makes, :class:`~herald_service.engine.admission.CostFit` on the ``herald_worker_cost_seconds``
   gauges read just before the request and the token counts the baseline answered (on a 413, also its message's).
   The shapes fit the shipped per-request limits (64 prompts, 4,096 tokens, 32,000 characters), so none is changed.
2. Bursts. On a fresh default server, 200 one-prompt requests sent at once: short ones (``s``), then a mix of 150
   short, 40 of about 300 tokens and 10 of about 2,000 (``mixed``). Counts by status, the median and longest latency
   of the answered ones and the longest ``Retry-After``, each as a share of the timeout; the claims are no 504, every
   admitted request answered within the timeout, and ``Retry-After`` never above it.

3. Contention (``--hog SOURCE...``, :func:`hog`): the testers' case. A default server (torch's threads) warms up,
   then a busy loop in another process takes a core, and :data:`HOG_WAVE_SIZE` requests of 64 short prompts go at
   once (priced at the warm-up's speed: nothing was measured under the load yet), then :data:`HOG_CLIENTS` clients
   send them back to back for :data:`HOG_STREAM_S` s (after ``Retry-After`` on a 429). Counts of 200, 429 and 504:
   does the cost model catch up with the slowdown, so that later requests get 429 rather than a 504? Each SOURCE is
   a checkout whose ``herald_service`` the server runs (a worktree of the commit before a change, then ``.``), in
   turn, ``--repeats`` times; ``benchmarks/results/admission_cpu_hog.json``.

Servers start one at a time: each times its warm-up batches to seed its cost model, and a second one starting
alongside would inflate them. The machine may be shared: the load average is recorded before and after, each
server's warm-up timings (``cost_seeded_on``), and the CPU cores the server used while it worked (``baseline_cores``,
``server_cores``: 2 on an idle 2-core machine). Other work running while a server seeds its model and not later (or
the reverse) shows as an estimate off by that factor.

Run: ``python -m benchmarks.admission`` (writes ``benchmarks/results/admission_cpu.json``; about 6 minutes on an idle
2-core CPU).

GPU: ``python -m benchmarks.admission --target h200 --timeout-s 1 --out $OUT/admission_h200.json`` serves the
random-initialized Llama-3.1-8B of :func:`benchmarks.common.build_target` (bf16, compiled as the service's defaults)
from in-process servers (:class:`ThreadServer`: the real app under uvicorn, sharing that one model, so it compiles
once), with the same shapes and bursts; the burst client then runs in a process of its own (:func:`send_burst`). A
request that costs the CPU a minute costs the H200 about a second, so the default server's timeout is set low
(``--timeout-s``) to put the same shapes on both sides of the limit; the question is the same: does the estimate
track the real work, and does admission keep 504s away.

Overload: ``python -m benchmarks.admission --target h200 --overload --timeout-s 60`` skips the estimate phase and sends
two bursts at the shipped timeout: 200 requests of 8 prompts of ~4,031 tokens (minutes of H200 work: does the
estimated wait or the full queue refuse first?) and 2,000 one-prompt requests (twice the queue's capacity);
``benchmarks/results/admission_h200_overload.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import (
    RESULTS, Server, build_target, exit_on_sigterm, hardware, head_commit, percentile, print_table, require_bench_extra,
    result_header,
)
from benchmarks.host_cost import Build
from herald_service.engine.admission import TERMS, CostFit, Work

REPO = Path(__file__).resolve().parents[1]
BASELINE_TIMEOUT_S = 3600.0
CHAT = "Tell me about the history of bread in Europe. "
SHORT = "how do I make coffee"
FOX = "The quick brown fox jumps over the lazy dog. "
BURST_TEXTS = {
    "s": "How do I bake sourdough bread?",
    "m": "Tell me about the history of bread. " * 40,  # ~300 tokens
    "l": "Explain the following text carefully. " + FOX * 200,  # ~2,000 tokens
    "x": [FOX * 400] * 8,  # 8 prompts of ~4,031 tokens: the longest shape of SHAPES
    "c": [CHAT * 2] * 64,  # 64 short chat prompts (~45 tokens): the contention waves' request
}
HOG_WAVES = 1
HOG_WAVE_SIZE = 12
"""Contention (``--hog``): waves of :data:`HOG_WAVE_SIZE` requests of 64 short prompts at once, one after another."""
HOG_STREAM_S = 120.0
HOG_CLIENTS = 6
"""Contention, then: :data:`HOG_CLIENTS` clients each sending 64 short prompts again as soon as answered (after
``Retry-After``, at most :data:`RETRY_CAP_S`, on a 429) for :data:`HOG_STREAM_S` seconds."""
RETRY_CAP_S = 10.0
BURST_SIZE = 200
OVERLOAD_SHORT = 2000
"""One-prompt requests of the short overload burst: twice the shipped queue capacity (1,024 prompts)."""


@dataclass(frozen=True)
class Shape:
    """One request of the estimate phase: ``prompts`` copies of ``text``, after ``singles`` one-prompt requests of
    :data:`SHORT` (to the same server, not timed)."""

    prompts: int
    text: str
    singles: int = 0

    def label(self, tokens: int) -> str:
        return f"{self.prompts} x {tokens} tok" + (f" after {self.singles} singles" if self.singles else "")


SHAPES = (Shape(64, CHAT * 4), Shape(64, CHAT * 40), Shape(64, CHAT * 80), Shape(8, FOX * 400, singles=60))
"""64 prompts of 71, 431 and 831 tokens, then 8 of 4,031 after 60 one-prompt requests (tokens on the embedded
backbone's chat template)."""


class HeraldServer(Build):
    """One ``herald serve`` process on the embedded backbone, with ``settings`` as ``HERALD_*`` variables (none
    inherited from this environment); :class:`~benchmarks.host_cost.Build`'s readiness wait and stop, without its
    fake backend."""

    def __init__(self, name: str, source: Path = REPO, port: int | None = None, **settings: object) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port or 0))
            self.port = s.getsockname()[1]
        self.name, self.source = name, source
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        env.update({"HERALD_HOST": "127.0.0.1", "HERALD_PORT": str(self.port), "PYTHONPATH": str(source)})
        env.update({f"HERALD_{k.upper()}": str(v) for k, v in settings.items()})
        self.proc = subprocess.Popen([sys.executable, "-m", "herald_service", "serve"], cwd=source, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self) -> "HeraldServer":
        started = time.perf_counter()
        try:
            self.wait_ready(600.0)
        except BaseException:
            self.stop()
            raise
        print(f"{self.name} server ready in {time.perf_counter() - started:.0f} s", flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        # the warm-up timings its cost model was seeded from, as the server logged them
        log = self.proc.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
        self.seeded = next((line.split("batch cost seeded on ", 1)[1] for line in log.splitlines()
                            if "batch cost seeded on " in line), None)


class ThreadServer(Server):
    """:class:`benchmarks.common.Server` (the real app under uvicorn in a thread, on ``target``'s runtime) with the
    interface :func:`estimates` and :func:`burst` use: ``name``, ``cpu()`` and, after exit, the warm-up timings its
    cost model was seeded on (``seeded``, read from the app's log)."""

    def __init__(self, name: str, target, **settings: object) -> None:
        super().__init__(target, **settings)
        self.name, self.seeded = name, None
        self._log = logging.getLogger("herald_service.api.app")
        self._handler = _Captured()

    def __enter__(self) -> "ThreadServer":
        self._log.addHandler(self._handler)
        self._log.setLevel("INFO")
        started = time.perf_counter()
        super().__enter__()
        print(f"{self.name} server ready in {time.perf_counter() - started:.0f} s", flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._log.removeHandler(self._handler)
        self.seeded = next((m.split("batch cost seeded on ", 1)[1] for m in self._handler.messages
                            if "batch cost seeded on " in m), None)

    def cpu(self) -> tuple[float, float]:
        """CPU seconds of this whole process (the client runs here too; on the GPU host the cores are not the limit)."""
        return time.process_time(), 0.0


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record) -> None:
        self.messages.append(record.getMessage())


# -- reading the server --------------------------------------------------------------------------------------------
def samples(metrics_text: str, name: str, label: str) -> dict[str, float]:
    """Values of the series ``name`` in a ``/metrics`` text by their ``label`` (prometheus_client's parser)."""
    return {sample.labels[label]: sample.value for family in text_string_to_metric_families(metrics_text)
            for sample in family.samples if sample.name == name}


def cost_fit(metrics_text: str, limits: dict) -> CostFit:
    """The server's cost model from its ``/metrics`` text (``herald_worker_cost_seconds{per=...}``) and the batch
    shape in its ``/v1/info`` ``limits``."""
    terms = samples(metrics_text, "herald_worker_cost_seconds", "per")
    return CostFit(*(terms[t] for t in TERMS), limits["batch_max_prompts"], limits["batch_token_budget"])


def estimate_in_message(message: str) -> float | None:
    """Seconds of a 413's "estimated at N s of model time" (admission.TooMuchWork.message); ``None`` if absent."""
    found = re.search(r"estimated at (?:over )?([\d,.]+) s", message)
    return float(found[1].replace(",", "")) if found else None


def rejected(metrics_text: str) -> dict[str, float]:
    """``herald_rejected_requests_total`` by reason, the reasons counted at least once (the server creates every
    reason's series at 0 at start)."""
    return {reason: n for reason, n in samples(metrics_text, "herald_rejected_requests_total", "reason").items() if n}


def classify(client: httpx.Client, url: str, texts: list[str]) -> tuple[int, float, dict]:
    """One ``POST /classify`` of ``texts``: (status, wall-clock seconds, JSON body)."""
    started = time.perf_counter()
    response = client.post(url + "/classify", json={"input": texts, "return_trajectory": False})
    return response.status_code, time.perf_counter() - started, response.json()


# -- 1. estimate vs real -------------------------------------------------------------------------------------------
def estimates(baseline: HeraldServer, default: HeraldServer, limits: dict, quick: bool) -> list[dict]:
    """Each shape on the baseline server (its real time), then on the default one (its verdict); both servers'
    estimates from their gauges just before. ``baseline_cores``: CPU seconds the baseline server spent on the request
    per second of it (2 on an idle 2-core machine; less when other work took a share)."""
    rows = []
    with httpx.Client(timeout=BASELINE_TIMEOUT_S) as client:
        for shape in SHAPES[:2] if quick else SHAPES:
            texts = [shape.text] * shape.prompts
            for server in (baseline, default):
                for _ in range(shape.singles):
                    classify(client, server.url, [SHORT])
            baseline_fit = cost_fit(client.get(baseline.url + "/metrics").text, limits)
            cpu_before, _ = baseline.cpu()
            status, real_s, body = classify(client, baseline.url, texts)
            cpu_s = baseline.cpu()[0] - cpu_before
            if status != 200:
                raise RuntimeError(f"baseline server answered {status} to {shape}: {body}")
            work = Work.of_prompts([r["tokens"] for r in body["results"]])
            fit = cost_fit(client.get(default.url + "/metrics").text, limits)
            status, answered_s, body = classify(client, default.url, texts)
            message = body["error"]["message"] if status != 200 else ""
            est_s = fit.seconds(work)
            rows.append({
                "shape": shape.label(round(work.tokens / work.prompts)),
                "real_s": real_s,
                "est_s": est_s,
                "est_over_real": est_s / real_s,
                "baseline_est_over_real": baseline_fit.seconds(work) / real_s,
                "baseline_cores": cpu_s / real_s,
                "status": status,
                "answered_s": answered_s,
                "timeout_s": limits["request_timeout_s"],
                "message_est_s": estimate_in_message(message),
                "message": message,
                "fit": fit.__dict__,
                "baseline_fit": baseline_fit.__dict__,
            })
            print(f"{rows[-1]['shape']}: real {real_s:.1f} s, estimate {est_s:.1f} s, default server {status}", flush=True)
    return rows


# -- 2. bursts -----------------------------------------------------------------------------------------------------
def burst_kinds(mix: str) -> list[str]:
    """The kinds of the burst's requests in sending order: all ``s``; 150 ``s``, 40 ``m`` and 10 ``l`` shuffled
    with a fixed seed (``mixed``); :data:`BURST_SIZE` requests of 8 long prompts (``overload-long``); or
    :data:`OVERLOAD_SHORT` ``s`` (``overload-short``)."""
    if mix == "overload-long":
        return ["x"] * BURST_SIZE
    if mix == "overload-short":
        return ["s"] * OVERLOAD_SHORT
    if mix != "mixed":
        return [mix] * BURST_SIZE
    kinds = ["s"] * 150 + ["m"] * 40 + ["l"] * 10
    random.Random(1).shuffle(kinds)
    return kinds


async def _send(client: httpx.AsyncClient, url: str, kind: str) -> dict:
    started = time.perf_counter()
    try:
        response = await client.post(url + "/classify", json={"input": BURST_TEXTS[kind], "return_trajectory": False})
        status: int | str = response.status_code
        retry_after = response.headers.get("retry-after")
    except httpx.HTTPError as exc:  # counted, never hidden: the answer was lost on the wire
        status, retry_after = type(exc).__name__, None
    return {"kind": kind, "status": status, "seconds": time.perf_counter() - started,
            "retry_after_s": float(retry_after) if retry_after else None}


async def _burst(url: str, kinds: list[str]) -> tuple[float, list[dict]]:
    limits = httpx.Limits(max_connections=len(kinds), max_keepalive_connections=len(kinds))
    async with httpx.AsyncClient(timeout=BASELINE_TIMEOUT_S, limits=limits) as client:
        started = time.perf_counter()
        answers = await asyncio.gather(*(_send(client, url, kind) for kind in kinds))
        return time.perf_counter() - started, list(answers)


def _burst_in_process(url: str, kinds: list[str]) -> tuple[float, list[dict]]:
    """:func:`_burst` run to completion (the entry point of the client process for :class:`ThreadServer`)."""
    return asyncio.run(_burst(url, kinds))


def send_burst(server, kinds: list[str]) -> tuple[float, list[dict]]:
    """Every request at once. Against a :class:`ThreadServer` the client runs in a process of its own: sharing the
    server's GIL, its Python time landed in every latency (200 short requests took 1.15 s on the H200 host)."""
    if not isinstance(server, ThreadServer):
        return _burst_in_process(server.url, kinds)
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(int, 0).result()  # start the process and its imports before the burst
        return pool.submit(_burst_in_process, server.url, kinds).result()


def burst(server: HeraldServer, mix: str, timeout_s: float) -> dict:
    """Every request of the burst at once; counts, latencies and ``Retry-After`` as shares of ``timeout_s``
    (``max_retry_after/timeout`` ``None``: no ``Retry-After`` was given), the server's CPU seconds per second of the
    burst (``server_cores``). ``admitted_answered_in_time``: every request not refused (413, 429) was answered 200
    within the timeout (no 504, no lost answer)."""
    before, (cpu_before, _) = rejected(httpx.get(server.url + "/metrics").text), server.cpu()
    seconds, answers = send_burst(server, burst_kinds(mix))
    after, (cpu_after, _) = rejected(httpx.get(server.url + "/metrics").text), server.cpu()
    counts = {str(code): 0 for code in (200, 413, 429, 504)} | {"other": 0}
    for a in answers:
        counts[str(a["status"]) if str(a["status"]) in counts else "other"] += 1
    by_kind: dict[str, dict[str, int]] = {}
    for a in answers:
        by_kind.setdefault(a["kind"], {}).setdefault(str(a["status"]), 0)
        by_kind[a["kind"]][str(a["status"])] += 1
    answered = [a["seconds"] for a in answers if a["status"] == 200]
    retry_after = [a["retry_after_s"] for a in answers if a["retry_after_s"] is not None]
    return {
        "mix": mix,
        "requests": len(answers),
        "seconds": seconds,
        **{f"n_{k}": v for k, v in counts.items()},
        "p50_answered/timeout": percentile(answered, 50) / timeout_s if answered else None,
        "max_answered/timeout": max(answered) / timeout_s if answered else None,
        "max_retry_after/timeout": max(retry_after) / timeout_s if retry_after else None,
        "server_cores": (cpu_after - cpu_before) / seconds,
        "no_504": counts["504"] == 0,
        "admitted_answered_in_time": counts["504"] == counts["other"] == 0 and max(answered, default=0.0) <= timeout_s,
        "retry_after_within_timeout": all(r <= timeout_s for r in retry_after),
        "by_kind": by_kind,
        "rejected_by_reason": {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)},
        "answers": answers,
    }


# -- 3. contention after warm-up ------------------------------------------------------------------------------------
def hog(source: Path, port: int | None = None) -> dict:
    """The testers' case: a server (``herald_service`` from ``source``, default threads) warmed up on an idle CPU,
    then a busy loop in another process takes a core, and :data:`HOG_WAVES` waves of :data:`HOG_WAVE_SIZE`
    requests of 64 short prompts are sent at once, each after the previous one is answered. The first wave is priced
    at the idle speed whatever the model does (nothing has been measured under the load yet); the later waves show
    whether the cost model caught up with the slowdown: admitted work answered (200), refused up front (429) or
    admitted into a timeout (504). Per wave: counts, the server's estimate of one request just before the wave
    (gauges), the longest answer and ``Retry-After``."""
    with HeraldServer(f"hog-{source.name}", source=source, port=port) as server:
        info = httpx.get(server.url + "/v1/info").json()
        limits, timeout_s = info["limits"], info["limits"]["request_timeout_s"]
        answer = httpx.post(server.url + "/classify", json={"input": BURST_TEXTS["c"][:1]}).json()
        tokens = answer["results"][0]["tokens"]
        work = Work.of_prompts([tokens] * len(BURST_TEXTS["c"]))
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        waves = []
        try:
            time.sleep(2.0)
            for index in range(HOG_WAVES):
                fit = cost_fit(httpx.get(server.url + "/metrics").text, limits)
                seconds, answers = send_burst(server, ["c"] * HOG_WAVE_SIZE)
                counts = {str(code): sum(a["status"] == code for a in answers) for code in (200, 413, 429, 504)}
                answered = [a["seconds"] for a in answers if a["status"] == 200]
                retry_after = [a["retry_after_s"] for a in answers if a["retry_after_s"] is not None]
                waves.append({"wave": index + 1, "seconds": seconds, **{f"n_{k}": v for k, v in counts.items()},
                              "n_other": len(answers) - sum(counts.values()),
                              "est_request_s": fit.seconds(work),
                              "max_answered_s": max(answered, default=None),
                              "max_retry_after_s": max(retry_after, default=None), "answers": answers})
                print(f"wave {index + 1}: {counts}, one request estimated at {waves[-1]['est_request_s']:.1f} s"
                      f" before it, {seconds:.0f} s", flush=True)
            fit = cost_fit(httpx.get(server.url + "/metrics").text, limits)
            answers = asyncio.run(_stream(server.url, HOG_CLIENTS, HOG_STREAM_S))
            counts = {str(code): sum(a["status"] == code for a in answers) for code in (200, 413, 429, 504)}
            stream = {"clients": HOG_CLIENTS, "seconds": HOG_STREAM_S, **{f"n_{k}": v for k, v in counts.items()},
                      "n_other": len(answers) - sum(counts.values()), "est_request_s": fit.seconds(work),
                      "answered_s_median": percentile([a["seconds"] for a in answers if a["status"] == 200], 50)
                      if counts["200"] else None, "answers": answers}
            print(f"stream: {counts}", flush=True)
        finally:
            busy.kill()
            busy.wait()
        after = cost_fit(httpx.get(server.url + "/metrics").text, limits)
    return {"source": str(source), "request_timeout_s": timeout_s, "seeded": server.seeded, "waves": waves,
            "stream": stream, "est_request_s_after": after.seconds(work), "fit_after": after.__dict__,
            "load_average_after": os.getloadavg()}


async def _stream(url: str, clients: int, seconds: float) -> list[dict]:
    """``clients`` closed-loop clients of 64-prompt requests for ``seconds`` (requests sent until then are awaited)."""
    end = time.perf_counter() + seconds
    answers: list[dict] = []

    async def client(http: httpx.AsyncClient) -> None:
        while time.perf_counter() < end:
            answer = await _send(http, url, "c")
            answers.append(answer | {"sent_s": seconds - (end - time.perf_counter()) - answer["seconds"]})
            if answer["status"] == 429:
                await asyncio.sleep(min(answer["retry_after_s"] or 1.0, RETRY_CAP_S))

    async with httpx.AsyncClient(timeout=BASELINE_TIMEOUT_S) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return answers


# -- output --------------------------------------------------------------------------------------------------------
def report(result: dict, out: Path) -> None:
    hidden = ("message", "message_est_s", "fit", "baseline_fit")
    if result["estimates"]:
        print_table(f"estimate vs real (real: the baseline server, timeout {BASELINE_TIMEOUT_S:g} s; est, status: the"
                    " default server)", [{k: v for k, v in r.items() if k not in hidden} for r in result["estimates"]])
    print_table(f"bursts of requests at once (burst_kinds; default server, timeout {result['request_timeout_s']:g} s)",
                [{k: v for k, v in b.items() if k not in ("answers", "by_kind", "rejected_by_reason")}
                 for b in result["bursts"]])
    cores = [r["baseline_cores"] for r in result["estimates"]] + [b["server_cores"] for b in result["bursts"]]
    if result["target"] == "cpu" and min(cores) < 0.8 * result["hardware"]["cpu_count"]:
        print(f"\nnote: a server used as little as {min(cores):.2f} of {result['hardware']['cpu_count']} cores while it"
              f" worked (load average {result['hardware']['load_average_start']} at the start): other work shared the"
              " CPU, and an estimate seeded at another level of load than the request ran at is off by that factor")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float))
    print(f"wrote {out}")


def run(quick: bool, target_name: str = "cpu", timeout_s: float | None = None, overload: bool = False) -> dict:
    """Both phases against ``target_name``: ``cpu`` (``herald serve`` processes on the embedded backbone) or ``h200``
    (:class:`ThreadServer` on the random Llama-3.1-8B); ``timeout_s`` sets the default servers' request timeout
    (None: the shipped 60 s). ``overload``: no estimate phase; the bursts are ``overload-long`` (several times the
    timeout's worth of work on the H200: which refusal binds, the wait estimate's 429 or the full queue's?) and
    ``overload-short`` (twice the queue's capacity in one-prompt requests)."""
    hw = hardware()
    started = time.perf_counter()
    default_settings = {} if timeout_s is None else {"request_timeout_s": timeout_s}
    if target_name == "cpu":
        def server(name: str, **settings: object):
            return HeraldServer(name, **settings)
    else:
        target = build_target(target_name)

        def server(name: str, **settings: object):
            # Server's own defaults raise the per-request limits; keep the shipped ones, as on the CPU
            return ThreadServer(name, target, max_batch_size=64, max_tokens=4096, queue_capacity=1024, **settings)
    seeded, rows = {}, []
    if not overload:
        with server("baseline", request_timeout_s=BASELINE_TIMEOUT_S) as baseline, server("default", **default_settings) as default:
            info = httpx.get(default.url + "/v1/info").json()
            timeout_s = info["limits"]["request_timeout_s"]
            rows = estimates(baseline, default, info["limits"], quick)
        seeded = {s.name: s.seeded for s in (baseline, default)}
    with server("burst", **default_settings) as burst_server:
        info = httpx.get(burst_server.url + "/v1/info").json()
        timeout_s = info["limits"]["request_timeout_s"]
        bursts = [burst(burst_server, mix, timeout_s) for mix in (("overload-long", "overload-short") if overload else ("s", "mixed"))]
    seeded[burst_server.name] = burst_server.seeded
    return {
        **result_header("admission", target_name, hw),
        "backbone": info["backbone"]["id"],
        "request_timeout_s": timeout_s,
        "baseline_request_timeout_s": BASELINE_TIMEOUT_S,
        "limits": info["limits"],
        "seconds": time.perf_counter() - started,
        "cost_seeded_on": seeded,
        "estimates": rows,
        "bursts": bursts,
    }


def run_hog(sources: list[Path], repeats: int, port: int | None) -> dict:
    """:func:`hog` for each source in turn, ``repeats`` times (A B A B: the machine's load drifts)."""
    hw = hardware()
    runs = [hog(source, port) for _ in range(repeats) for source in sources]
    hw["load_average_end"] = os.getloadavg()
    commit = head_commit()
    commits = {str(source): head_commit(source) for source in sources}
    return {"benchmark": "admission_hog", "commit": commit, "source_commits": commits, "hardware": hw, "runs": runs}


def report_hog(result: dict, out: Path) -> None:
    print_table("contention after warm-up (waves of 12 x 64 short prompts at once, a busy loop on one core)",
                [{"source": r["source"], "source_commit": result["source_commits"][r["source"]][:7], "wave": w["wave"],
                  **{k: w[k] for k in ("n_200", "n_429", "n_504", "n_other", "est_request_s", "max_answered_s")}}
                 for r in result["runs"] for w in r["waves"]])
    print_table(f"then {HOG_CLIENTS} clients sending again as soon as answered for {HOG_STREAM_S:g} s",
                [{"source": r["source"], **{k: r["stream"][k] for k in ("n_200", "n_429", "n_504", "n_other",
                                                                       "est_request_s", "answered_s_median")}}
                 for r in result["runs"]])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float))
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the two shortest shapes only (a smoke run)")
    parser.add_argument("--target", choices=("cpu", "h200", "tiny"), default="cpu",
                        help="tiny: a smoke run of the in-process path on the CPU, not a measurement")
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="request timeout of the default servers (default: the shipped 60 s)")
    parser.add_argument("--overload", action="store_true",
                        help="only the overload bursts (run(overload=True)); writes admission_<target>_overload.json")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/admission_<target>.json")
    parser.add_argument("--hog", type=Path, nargs="+", default=None, metavar="SOURCE",
                        help="only the contention waves (hog()), against herald_service from each SOURCE folder in"
                             " turn (e.g. a worktree of an earlier commit, then .); writes admission_cpu_hog.json")
    parser.add_argument("--repeats", type=int, default=2, help="--hog: rounds over the sources")
    parser.add_argument("--port", type=int, default=None, help="--hog: the servers' port (default: a free one)")
    args = parser.parse_args()
    exit_on_sigterm()
    if args.hog:  # httpx only (a core dependency), no load client of the bench extra
        sources = [source.resolve() for source in args.hog]
        report_hog(run_hog(sources, args.repeats, args.port), args.out or RESULTS / "admission_cpu_hog.json")
        return
    require_bench_extra()
    name = f"admission_{args.target}{'_overload' if args.overload else ''}.json"
    report(run(args.quick, args.target, args.timeout_s, args.overload), args.out or RESULTS / name)


if __name__ == "__main__":
    main()

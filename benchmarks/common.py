"""What every benchmark shares: the backbone under test, the prompt mix, the bare-prefill baseline, a real HTTP server,
timing helpers and the JSON/PNG/table output.

Targets:
- ``cpu``: the embedded SmolLM2-135M-Instruct in float32 with its shipped probe (this repo's CI-class machine).
- ``h200``: a random-initialized Llama-3.1-8B architecture in bf16, built directly on the GPU, with a random probe.
  Prefill speed depends only on shapes and dtypes, never on the weights' values, so random weights time exactly what
  the trained model would; verdicts are meaningless and never reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from herald_service.backbone.batching import plan_batches
from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.loader import ResolvedBackbone
from herald_service.engine.runtime import Runtime
from herald_service.probes.probe import FittedProbe
from herald_service.types import user_turn

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CARRY = REPO / ".benchcarry"  # prompt sample and tokenizer carried to the GPU machine (git-ignored)
DEFAULT_DATA = REPO.parent / "shared" / "data"


# -- the backbone under test ---------------------------------------------------------------------------------------
@dataclass
class Target:
    name: str
    backbone: HFBackbone
    probe: FittedProbe
    runtime: Runtime
    hardware: dict

    @property
    def cuda(self) -> bool:
        return self.backbone.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def llama31_8b_config():
    """Llama-3.1-8B's architecture by hand (no download): the numbers of its published config.json."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        hidden_act="silu",
    )


def random_probe(num_layers: int, hidden_size: int, seed: int = 0) -> FittedProbe:
    """A probe of the right shapes with random directions: scoring cost is the same as a fitted one's."""
    from herald_service.probes.directions import LayerDirections
    from herald_service.probes.features import FeatureStats
    from herald_service.probes.scorer import TrajectoryScorer

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((num_layers, hidden_size))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    torch.manual_seed(seed)
    directions = LayerDirections(w.astype(np.float16), np.zeros(num_layers, np.float32), np.ones(num_layers, np.float32))
    stats = FeatureStats(np.zeros(7, np.float32), np.ones(7, np.float32))
    return FittedProbe(directions, stats, TrajectoryScorer().eval(), 0.0, "random", num_layers // 2)


def build_target(
    name: str, padding_side: str = "auto", cuda_graphs: bool | None = None, compile_graphs: bool = True, compile_batches: bool = True
) -> Target:
    """Load the backbone, probe and runtime for ``cpu`` or ``h200`` (padding ``auto``: varlen on the GPU, right on the CPU;
    ``compile_graphs`` and ``compile_batches``: the service's defaults, ``HERALD_COMPILE_GRAPHS/_BATCHES=true``, which
    apply on the GPU only). The bare baselines call the decoder directly and never run compiled."""
    from herald_service.config import default_cache_dir
    from herald_service.probes.artifact import load_probe

    if name == "cpu":
        from herald_service.backbone.loader import resolve_backbone
        from herald_service.engine.runtime import default_probe_folder

        resolved = resolve_backbone("embedded", default_cache_dir())
        backbone = HFBackbone(resolved, "cpu", "float32", padding_side=padding_side, cuda_graphs=False)
        folder = default_probe_folder(backbone.info.slug)
        probe, manifest = load_probe(folder, backbone.info)
        probe_path = str(folder)
    else:
        from transformers import AutoTokenizer, LlamaForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder())
        config = llama31_8b_config()
        device, dtype = "cuda", torch.bfloat16
        if name == "tiny":  # a smoke test of the benchmark code itself on the CPU, not a measurement
            config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.vocab_size = 4, 64, 128, 49152
            config.num_attention_heads, config.num_key_value_heads, config.head_dim = 4, 2, 16
            device, dtype = "cpu", torch.float32
        torch.manual_seed(0)
        started = time.perf_counter()
        with torch.device(device):
            model = LlamaForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
        if device == "cuda":
            torch.cuda.synchronize()
        print(f"random Llama-3.1-8B built on the GPU in {time.perf_counter() - started:.1f} s", flush=True)
        resolved = ResolvedBackbone(Path("."), "random-init Llama-3.1-8B architecture", "random-seed-0", "llama-3.1-8b-random")
        backbone = HFBackbone.from_model(
            model, tokenizer, resolved, padding_side=padding_side, cuda_graphs=cuda_graphs, compile_graphs=compile_graphs,
            compile_batches=compile_batches and device == "cuda",
        )
        probe = random_probe(backbone.info.num_layers, backbone.info.hidden_size)
        manifest = {"feature_set": probe.feature_set, "threshold": 0.0, "peak_layer": probe.peak_layer, "note": "random probe"}
        probe_path = "random probe (benchmark)"
    runtime = Runtime(backbone, probe, manifest, probe_path)
    return Target(name, backbone, probe, runtime, hardware())


def embedded_serving_backbone() -> HFBackbone:
    """The embedded backbone on the CPU as ``herald serve`` runs it there (float32 weights, ``matmul_dtype`` auto: bf16
    linear layers where the CPU multiplies bf16 natively, right padding): the CPU benchmarks that load their own
    backbone (batch_invariance, cpu_batch_budget, chunked_prefill). :func:`build_target` ``cpu`` keeps the weights'
    dtype in every product, as the older benchmarks measured."""
    from herald_service.backbone.loader import resolve_backbone
    from herald_service.config import default_cache_dir

    return HFBackbone(resolve_backbone("embedded", default_cache_dir()), "cpu", "float32", padding_side="right",
                      matmul_dtype="auto")


def tokenizer_folder() -> Path:
    """The embedded SmolLM2 tokenizer files (ids < 49,152, valid for a 128,256-token vocabulary)."""
    carried = CARRY / "tokenizer"
    if (carried / "tokenizer.json").is_file():
        return carried
    from herald_service.backbone.loader import resolve_backbone
    from herald_service.config import default_cache_dir

    return resolve_backbone("embedded", default_cache_dir()).folder


def head_commit(folder: Path = REPO) -> str:
    """The commit checked out in ``folder`` (``git rev-parse HEAD``; empty outside a git checkout), recorded in every
    result file beside the hardware."""
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True).stdout.strip()


def result_header(benchmark: str, target: str, hw: dict) -> dict:
    """The first keys of a served benchmark's result file: ``benchmark``, ``target``, ``commit`` (:func:`head_commit`)
    and ``hardware``, ``hw`` (:func:`hardware`, taken at the start) stamped with the load average at the end."""
    hw["load_average_end"] = os.getloadavg()
    return {"benchmark": benchmark, "target": target, "commit": head_commit(), "hardware": hw}


def hardware() -> dict:
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_start": os.getloadavg(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


# -- prompts -------------------------------------------------------------------------------------------------------
def data_folder() -> Path:
    """The prompt text the benchmarks draw from: the carried sample (``.benchcarry/data``) or ``../shared/data``.

    Raises:
        SystemExit: naming both folders, when neither holds a ``*.jsonl`` file (a clone outside the team's layout made
            empty prompt lists and a bare ``max() arg is an empty sequence`` several calls later).
    """
    carried = CARRY / "data"
    folder = carried if carried.is_dir() else DEFAULT_DATA
    if not any(folder.glob("*.jsonl")):
        raise SystemExit(f"benchmarks: no prompt text: {carried} and {DEFAULT_DATA} hold no *.jsonl; build the corpus"
                         f" with `herald data build --out {DEFAULT_DATA}` (README, Rebuild the corpus)")
    return folder


def exit_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` in this process, so that the ``with`` blocks and ``finally`` clauses of
    the benchmarks that start ``herald serve`` processes (admission, chunked_prefill, cpu_budget_serve, host_cost) stop
    them: a benchmark killed by ``timeout`` or a job runner left its servers running, holding the CPU and their ports.
    (SIGKILL cannot be caught; those servers stay.)"""

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def require_bench_extra() -> None:
    """Stop with one line when the benchmarks' HTTP clients are missing (pyproject's ``bench`` extra): the load
    clients import aiohttp in worker processes, where its absence was a traceback per benchmark.

    Raises:
        SystemExit: naming the install command.
    """
    import importlib.util

    missing = [name for name in ("aiohttp", "httpx") if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"benchmarks: {', '.join(missing)} not installed; run `.venv/bin/pip install -e '.[cpu,bench]'`"
                         " (the bench extra)")


def load_texts(seed: int = 0) -> list[str]:
    """Every prompt of ``../shared/data/*.jsonl`` (or the carried sample), shuffled with a fixed seed."""
    texts = []
    for file in sorted(data_folder().glob("*.jsonl")):
        for line in file.open(encoding="utf-8"):  # not splitlines(): prompts hold U+2028
            if line.strip():
                texts.append(json.loads(line)["prompt"])
    random.Random(seed).shuffle(texts)
    return texts


def prompt_mix(target: Target, n: int, max_tokens: int, seed: int = 0) -> tuple[list[str], list[list[int]]]:
    """``n`` prompts drawn from the data mix (as it comes, shuffled) whose rendered length is <= ``max_tokens``."""
    texts, ids = [], []
    for text in load_texts(seed):
        (token_ids,) = target.backbone.encode([user_turn(text)])
        if len(token_ids) <= max_tokens:
            texts.append(text)
            ids.append(token_ids)
        if len(texts) == n:
            break
    return texts, ids


def token_pool(target: Target, seed: int = 0, limit: int = 400_000) -> list[int]:
    """One long stream of real prompt tokens, cut into exact-length prompts by :func:`exact_prompts`."""
    pool: list[int] = []
    for text in load_texts(seed):
        pool.extend(target.backbone.tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(pool) >= limit:
            break
    return pool


def exact_prompts(target: Target, pool: Sequence[int], rows: int, length: int, offset: int = 0) -> list[list[int]]:
    """``rows`` chat-rendered prompts of exactly ``length`` tokens, their content cut from real prompt text."""
    shell = target.backbone.encode([user_turn("x")])[0]
    marker = target.backbone.tokenizer("x", add_special_tokens=False)["input_ids"]
    cut = next(i for i in range(len(shell)) if shell[i : i + len(marker)] == marker)
    head, tail = shell[:cut], shell[cut + len(marker) :]
    body = length - len(head) - len(tail)
    out = []
    for r in range(rows):
        if body < 1:  # shorter than the chat template itself: raw tokens (timing does not depend on which)
            start = (offset + r * length * 7) % (len(pool) - length)
            out.append(list(pool[start : start + length]))
        else:
            start = (offset + r * body * 7) % (len(pool) - body)
            out.append(head + list(pool[start : start + body]) + tail)
    return out


# -- the bare prefill baseline -------------------------------------------------------------------------------------
@torch.inference_mode()
def bare_prefill(target: Target, batch: Sequence[Sequence[int]], layout: str = "right") -> None:
    """The decoder stack alone on one batch: no hooks, no probe, no copy back (the floor Herald builds on).

    ``layout="right"`` is plain transformers: right-padded rows with SDPA. ``layout="varlen"`` is the same prompts
    packed into one row with the flash varlen kernel (the engine's own layout on the GPU), so a ratio against it
    isolates the service's overhead from the layout's gain.
    """
    b = target.backbone
    if layout == "varlen" and b.packs(batch):
        with b.attention_for_layout():
            b.decoder(use_cache=False, **b.packed_inputs(batch))
        target.sync()
        return
    width = max(len(t) for t in batch)
    ids = torch.full((len(batch), width), b.pad_id, dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
    b.decoder(input_ids=ids.to(b.device), use_cache=False)
    target.sync()


def bare_throughput(target: Target, ids: Sequence[Sequence[int]], token_budget: int, max_rows: int, layout: str = "right") -> float:
    """Seconds for the bare prefill of ``ids`` cut into the engine's batches (sorted by length, same budget)."""
    started = time.perf_counter()
    for batch in plan_batches([len(t) for t in ids], token_budget, max_rows, packed=layout == "varlen"):
        bare_prefill(target, [ids[i] for i in batch], layout)
    return time.perf_counter() - started


def timed(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    sync()
    started = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - started


def median_time(fn: Callable[[], object], sync: Callable[[], None], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn, sync) for _ in range(repeats))


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def difference_quantiles(differences: np.ndarray) -> dict[str, float]:
    """``median``, ``p90``, ``p99`` and ``max`` of ``differences`` (|logit| differences between two ways of scoring the
    same prompts): how cpu_dtype, batch_invariance and embedded_cuda report them."""
    return {q: float(np.quantile(differences, p)) for q, p in (("median", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}


# -- a real server -------------------------------------------------------------------------------------------------
class Server:
    """The real Herald app under uvicorn on 127.0.0.1 in a thread, with the target's runtime as its loader."""

    def __init__(self, target: Target, **settings: object) -> None:
        import uvicorn

        from herald_service.api.app import build_app
        from herald_service.api.http_protocol import header_bounded_protocol
        from herald_service.config import Settings

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        defaults = {"max_tokens": 4096, "max_batch_size": 256, "queue_capacity": 4096, "request_timeout_s": 600.0}
        defaults.update(settings)
        self.settings = Settings(**defaults)
        app = build_app(self.settings, loader=lambda _s: target.runtime)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False, timeout_keep_alive=600, backlog=4096,
                                                     http=header_bounded_protocol(10.0), h11_max_incomplete_event_size=65_536))  # as herald serve (cli.serve.server_config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Server":
        import httpx

        self.thread.start()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


async def _load(url: str, path: str, bodies: Sequence[dict], concurrency: int) -> tuple[float, float, list[float], dict, list[float]]:
    import aiohttp

    latencies: list[float] = []
    statuses: dict = {}
    finished: list[float] = []
    queue = list(reversed(bodies))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def worker() -> None:
            while queue:
                body = queue.pop()
                started = time.perf_counter()
                try:
                    async with session.post(path, json=body) as response:
                        await response.read()
                        status: int | str = response.status
                except aiohttp.ClientError as exc:  # counted, never hidden: the answer was lost on the wire
                    status = type(exc).__name__
                latencies.append(time.perf_counter() - started)
                finished.append(time.time())
                statuses[status] = statuses.get(status, 0) + 1

        started = time.time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return started, time.time(), latencies, statuses, finished


def http_load(url: str, texts: Sequence[str], concurrency: int) -> tuple[float, float, list[float], dict, list[float]]:
    """Send every text as one ``/classify`` request, ``concurrency`` at a time, from this process; see :func:`post_load`."""
    return post_load(url, "/classify", [{"input": text, "return_trajectory": False} for text in texts], concurrency)


def post_load(url: str, path: str, bodies: Sequence[dict], concurrency: int) -> tuple[float, float, list[float], dict, list[float]]:
    """POST every JSON body to ``path``, ``concurrency`` at a time, from this process (aiohttp, one session).

    Returns:
        (wall-clock start, wall-clock end) in epoch seconds, per-request latencies in seconds, status counts (an
        HTTP status, or the name of the transport error that lost the answer), each answer's arrival (epoch seconds).
    """
    return asyncio.run(_load(url, path, bodies, concurrency))


@dataclass
class LoadResult:
    """One load run: ``seconds`` from first send to last answer, per-request ``latencies`` (seconds), ``statuses``
    (counts by HTTP status or transport error), and ``steady_per_s``: answers per second between the 10th and the 90th
    percentile answer, i.e. without the pipeline's fill at the start and drain at the end (a batch prefill has
    neither: all its prompts are there from the start)."""

    seconds: float
    latencies: list[float]
    statuses: dict
    steady_per_s: float


class LoadClient:
    """An HTTP load generator in ``processes`` separate processes (never in the server's process or GIL).

    aiohttp, not httpx: with httpx's async pool, one client process served 207 requests/s at 8 in flight but 111 at 32
    and 60 at 256 against the same server (its pool scans every connection per request), so an httpx client measured
    itself. aiohttp held ~200/s at 8, 32 and 256 on the same 2-core machine. Several processes keep a fast server
    from being capped by one client core (the GPU host has 16).
    """

    def __init__(self, processes: int = 1) -> None:
        import concurrent.futures
        import multiprocessing

        self.processes = processes
        self.pool = concurrent.futures.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))

    def __enter__(self) -> "LoadClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown()

    def run(self, url: str, texts: Sequence[str], concurrency: int) -> LoadResult:
        """Every text once, ``concurrency`` in flight in total."""
        parts = min(self.processes, concurrency, len(texts))
        shares = [concurrency // parts + (1 if i < concurrency % parts else 0) for i in range(parts)]
        jobs = [self.pool.submit(http_load, url, list(texts[i::parts]), shares[i]) for i in range(parts)]
        results = [job.result() for job in jobs]
        latencies = [x for r in results for x in r[2]]
        statuses: dict = {}
        for r in results:
            for key, count in r[3].items():
                statuses[key] = statuses.get(key, 0) + count
        finished = sorted(x for r in results for x in r[4])
        # Answers arrive a batch at a time: count those after the 10th-percentile answer's arrival up to the
        # 90th's, over the time between the two (whole batches on both ends, so no batch is counted without its time).
        t_lo, t_hi = (finished[int(0.1 * len(finished))], finished[int(0.9 * len(finished)) - 1]) if finished else (0.0, 0.0)
        inside = sum(1 for t in finished if t_lo < t <= t_hi)
        steady = inside / (t_hi - t_lo) if t_hi > t_lo else float("nan")
        return LoadResult(max(r[1] for r in results) - min(r[0] for r in results), latencies, statuses, steady)

    def warm(self, url: str, texts: Sequence[str]) -> None:
        """Start every client process and open connections (not timed)."""
        for job in [self.pool.submit(http_load, url, list(texts[:4]), 2) for _ in range(self.processes)]:
            job.result()


SERVER_TIMES = ("x-total-time", "x-queue-time", "x-tokenize-time", "x-inference-time", "x-score-time")
"""Response headers (milliseconds) in which the server reports where one request's time went."""


class KeepAliveClient:
    """One keep-alive HTTP/1.1 connection (stdlib ``http.client``) for idle-latency measurements.

    Not httpx: its synchronous client added about 9 ms per request against the weight-free backend on the 2-core
    dev machine (round trip 9.7-11.6 ms vs 0.87-0.93 ms with ``http.client``, same server, same run), which would be
    counted as Herald's latency.
    """

    def __init__(self, url: str) -> None:
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)

    def classify(self, text: str) -> tuple[float, int, dict[str, float]]:
        """One ``POST /classify``: (round-trip seconds, HTTP status, server times in ms by header name)."""
        body = json.dumps({"input": text, "return_trajectory": False})
        started = time.perf_counter()
        self.connection.request("POST", "/classify", body, {"content-type": "application/json"})
        response = self.connection.getresponse()
        payload = response.read()
        seconds = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"/classify answered {response.status}: {payload[:200]!r}")
        return seconds, response.status, {h: float(response.getheader(h) or "nan") for h in SERVER_TIMES}

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "KeepAliveClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- output --------------------------------------------------------------------------------------------------------
def run_benchmark(doc: str, run: Callable, report: Callable) -> None:
    """Command-line entry of one benchmark module: parse ``--target/--quick/--out``, run, print and write results."""
    args = parse_args(doc.splitlines()[0])
    target = build_target(args.target)
    report(target, run(target, args.quick), args.out)


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--target", choices=["cpu", "h200", "tiny"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="fewer prompts and repeats (a smoke run)")
    parser.add_argument("--only", default="", help="suite only: comma-separated benchmark names to run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON and PNG")
    args = parser.parse_args()
    require_bench_extra()
    data_folder()
    return args


def print_table(title: str, rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(rows[0])
    cells = [[_fmt(r.get(k)) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print(f"\n{title}")
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths)))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write(out: Path, name: str, target: Target, payload: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    hw = dict(target.hardware)
    hw["load_average_end"] = os.getloadavg()
    payload = {"benchmark": name, "target": target.name, "backbone": target.backbone.info.model_id, "hardware": hw, **payload}
    path = out / f"{name}_{target.name}.json"
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"wrote {path}")
    return path


def write_cpu_result(out: Path, name: str, quick: bool, load_start: tuple[float, float, float], payload: dict) -> Path:
    """Write a CPU benchmark that loads its own backbone (no :class:`Target`) as ``<out>/<name>_cpu.json``
    (``_cpu_quick.json`` for a ``--quick`` smoke run): ``benchmark``, ``target`` ``cpu``, then ``payload``, then
    ``hardware`` (:func:`hardware`, with the load averages of the run's start and end) and ``quick``."""
    out.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "target": "cpu", **payload, "quick": quick,
               "hardware": {**hardware(), "load_average_start": load_start, "load_average_end": os.getloadavg()}}
    path = out / f"{name}_cpu{'_quick' if quick else ''}.json"
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"wrote {path}")
    return path


def figure(out: Path, name: str, target: Target):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    class _Saver:
        def __init__(self) -> None:
            self.fig = plt.figure(figsize=(11, 4))

        def save(self) -> None:
            self.fig.suptitle(f"{name} on {target.name}: {target.backbone.info.model_id}")
            self.fig.tight_layout()
            path = out / f"{name}_{target.name}.png"
            self.fig.savefig(path, dpi=90)
            plt.close(self.fig)
            print(f"wrote {path}")

    return _Saver()

"""Chunked prefill on the CPU: what a long prompt costs in chunks, and what a short request waits behind it.

1. Prefill: one prompt of 1,024 to 4,000 tokens through the embedded backbone as ``herald serve`` runs it on this CPU
   (``matmul_dtype`` auto), in one pass (``HFBackbone.last_token_states``) and in chunks of 256 and 512 tokens
   (``HFBackbone.prefill_chunks``), in turn; medians, chunked over one pass (the cost of chunking), and the largest
   relative difference of the states.
2. Serving: two real ``herald serve`` processes in turn, ``--prefill-chunk-tokens 0`` (off, the old behaviour) and
   the default (auto: 512 on the CPU). In each trial one client posts a prompt of about 4,000 tokens; 0.3 s later a
   second client posts one-line prompts one after the other (0.1 s apart) while the long one is not answered.
   Reported: the latency of those short requests (median, max) and the long one's, per setting, and off over on (the speed-up of a
   short request behind a long one; the long one's slowdown). Client-side wall time over HTTP, keep-alive.

Run: ``python -m benchmarks.chunked_prefill`` (about 3 minutes on 2 cores; ``--quick``: one trial, fewer repeats).
Writes ``benchmarks/results/chunked_prefill_cpu.json``. Ports 8191 and 8192 must be free.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import torch

from benchmarks.common import RESULTS, embedded_serving_backbone, exit_on_sigterm, load_texts, print_table, write_cpu_result
from herald_service.backbone.hf import HFBackbone
from herald_service.types import user_turn

LENGTHS = (1024, 2048, 4000)
CHUNKS = (256, 512)
LONG_TOKENS = 4000
SHORT = "How do I bake banana bread?"


def long_text(backbone: HFBackbone, tokens: int) -> str:
    """Corpus prompts joined until the rendered prompt has about ``tokens`` tokens (cut by words)."""
    words: list[str] = []
    for text in load_texts():
        words.extend(text.split())
        if len(words) > tokens:
            break
    low, high = 1, len(words)
    while low < high:  # the most words whose rendering fits
        mid = (low + high + 1) // 2
        if len(backbone.encode([user_turn(" ".join(words[:mid]))])[0]) <= tokens:
            low = mid
        else:
            high = mid - 1
    return " ".join(words[:low])


def prefill(backbone: HFBackbone, text: str, repeats: int) -> list[dict]:
    rows = []
    (full_ids,) = backbone.encode([user_turn(text)])
    for length in LENGTHS:
        ids = full_ids[:length]
        whole = backbone.last_token_states([ids])
        times: dict[str, list[float]] = {"one_pass": [], **{f"chunks_{c}": [] for c in CHUNKS}}
        difference = {}
        for _ in range(repeats):  # the ways in turn, so drift on the machine hits them alike
            started = time.perf_counter()
            backbone.last_token_states([ids])
            times["one_pass"].append(time.perf_counter() - started)
            for chunk in CHUNKS:
                started = time.perf_counter()
                states = list(backbone.prefill_chunks(ids, chunk))[-1]
                times[f"chunks_{chunk}"].append(time.perf_counter() - started)
                difference[chunk] = ((states - whole).norm(dim=-1) / whole.norm(dim=-1)).max().item()
        row = {"tokens": len(ids), "one_pass_ms": 1000 * statistics.median(times["one_pass"])}
        for chunk in CHUNKS:
            ms = 1000 * statistics.median(times[f"chunks_{chunk}"])
            row[f"chunks_{chunk}_ms"] = ms
            row[f"chunks_{chunk}_over_one_pass"] = ms / row["one_pass_ms"]
            row[f"chunks_{chunk}_max_relative_difference"] = difference[chunk]
        rows.append(row)
    return rows


def start_server(port: int, chunk: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "herald_service", "serve", "--port", str(port), "--prefill-chunk-tokens", chunk]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "HERALD_LOG_LEVEL": "warning"})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"herald serve exited: {process.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("herald serve was not ready within 300 s")


def trial(port: int, long: str) -> dict:
    url = f"http://127.0.0.1:{port}/classify"
    answered: dict = {}

    def post_long() -> None:
        with httpx.Client(timeout=120) as client:
            started = time.perf_counter()
            response = client.post(url, json={"input": long})
            answered["long_s"] = time.perf_counter() - started
            answered["long"] = response.json()["results"][0] if response.status_code == 200 else response.text

    thread = threading.Thread(target=post_long)
    thread.start()
    time.sleep(0.3)
    shorts = []
    with httpx.Client(timeout=120) as client:
        while thread.is_alive():  # each short request is sent while the long one runs
            started = time.perf_counter()
            response = client.post(url, json={"input": SHORT})
            response.raise_for_status()
            shorts.append(time.perf_counter() - started)
            time.sleep(0.1)
    thread.join()
    return {"long_s": answered["long_s"], "long_tokens": answered["long"]["tokens"], "long_logit": answered["long"]["logit"],
            "short_s": shorts}


def serving(long: str, trials: int) -> dict:
    out = {}
    for port, chunk in ((8191, "0"), (8192, "auto")):
        process = start_server(port, chunk)
        try:
            httpx.post(f"http://127.0.0.1:{port}/classify", json={"input": SHORT}, timeout=60)  # a first request
            runs = [trial(port, long) for _ in range(trials)]
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(30)
        shorts = [s for run in runs for s in run["short_s"]]
        out[chunk] = {"trials": runs, "short_median_ms": 1000 * statistics.median(shorts), "short_max_ms": 1000 * max(shorts),
                      "short_n": len(shorts), "long_median_ms": 1000 * statistics.median(r["long_s"] for r in runs)}
    off, on = out["0"], out["auto"]
    out["short_median_off_over_on"] = off["short_median_ms"] / on["short_median_ms"]
    out["long_median_on_over_off"] = on["long_median_ms"] / off["long_median_ms"]
    out["long_logit_difference"] = abs(off["trials"][0]["long_logit"] - on["trials"][0]["long_logit"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one serving trial and 2 prefill repeats (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    exit_on_sigterm()
    load_start = os.getloadavg()
    backbone = embedded_serving_backbone()
    text = long_text(backbone, LONG_TOKENS)
    rows = prefill(backbone, text, 2 if args.quick else 5)
    print_table("prefill of one prompt (medians)", rows)
    del backbone  # the servers below are separate processes; this one only waits on HTTP
    served = serving(text, 1 if args.quick else 3)
    for chunk in ("0", "auto"):
        s = served[chunk]
        print(f"prefill_chunk_tokens={chunk}: short requests behind the long one: median {s['short_median_ms']:.0f} ms,"
              f" max {s['short_max_ms']:.0f} ms (n={s['short_n']}); long one {s['long_median_ms']:.0f} ms")
    print(f"short median off/on {served['short_median_off_over_on']:.1f}x; long on/off {served['long_median_on_over_off']:.3f}")
    write_cpu_result(args.out, "chunked_prefill", args.quick, load_start,
                     {"torch_threads": torch.get_num_threads(), "prefill": rows, "serving": served})


if __name__ == "__main__":
    main()

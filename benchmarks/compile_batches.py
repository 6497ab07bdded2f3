"""Compiled batches: the batched prefill through ``torch.compile(dynamic=True)`` decoder layers against the same
backbone's eager forward (GPU; ``tiny`` smoke-tests the code on the CPU).

- Fixed shapes (64 x 128, 32 x 256, 16 x 512 tokens) and a 64-prompt varlen batch of unequal lengths: median time of
  ``last_token_states`` eager and compiled, interleaved, and the largest relative difference of the states.
- The real prompt mix cut into the engine's batches (16k-token budget, up to 256 prompts): total time eager and
  compiled, and how many new graphs dynamo compiled for those never-seen shapes after the warm-up at load (the
  service must never stall on a compile mid-traffic; the answer should be 0).
- Time the warm-up at load took (``HFBackbone._compile_batches``).

Run: ``python -m benchmarks.compile_batches --target h200 --out $OUT``.
"""

from __future__ import annotations

import random
import statistics
import time
from contextlib import contextmanager
from typing import Iterator

import torch

from benchmarks.common import Target, build_target, exact_prompts, figure, parse_args, print_table, prompt_mix, timed, token_pool, write
from herald_service.backbone.batching import plan_batches
from herald_service.backbone.hf import HFBackbone

SHAPES = {"h200": [(64, 128), (32, 256), (16, 512)], "tiny": [(4, 32), (2, 64)]}
MIX = {"h200": (512, 4096, 16384, 256), "tiny": (24, 128, 2048, 64)}  # prompts, longest, token budget, rows
REPEATS = {"h200": 7, "tiny": 2}


@contextmanager
def eager(backbone: HFBackbone) -> Iterator[None]:
    """While open, the backbone's batched prefill runs its eager layers (the compiled forwards are set aside)."""
    forwards, backbone.batch_forwards = backbone.batch_forwards, None
    try:
        yield
    finally:
        backbone.batch_forwards = forwards


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm(dim=-1) / b.norm(dim=-1)).max().item()


def fixed(target: Target, repeats: int) -> list[dict]:
    b = target.backbone
    pool = token_pool(target)
    rng = random.Random(0)
    batches = {f"{rows}x{length}": exact_prompts(target, pool, rows, length, offset=i * 7919) for i, (rows, length) in enumerate(SHAPES[target.name])}
    batches["64 varlen 40-300" if target.name == "h200" else "4 varlen"] = [
        pool[i * 331 : i * 331 + rng.randint(40, 300 if target.name == "h200" else 60)] for i in range(64 if target.name == "h200" else 4)
    ]
    rows = []
    for name, batch in batches.items():
        with eager(b):
            reference = b.last_token_states(batch)
        compiled = b.last_token_states(batch)
        e_times, c_times = [], []
        for _ in range(repeats):  # interleaved
            with eager(b):
                e_times.append(timed(lambda: b.last_token_states(batch), target.sync))
            c_times.append(timed(lambda: b.last_token_states(batch), target.sync))
        e, c = statistics.median(e_times), statistics.median(c_times)
        rows.append({"batch": name, "tokens": sum(len(t) for t in batch), "eager_ms": e * 1000, "compiled_ms": c * 1000,
                     "speedup": e / c, "relative_difference": _relative(compiled, reference)})
        print(rows[-1], flush=True)
    return rows


def mix(target: Target) -> dict:
    from torch._dynamo.utils import counters

    b = target.backbone
    n, longest, budget, max_rows = MIX[target.name]
    _, ids = prompt_mix(target, n, longest, seed=3)
    batches = [[ids[i] for i in batch] for batch in plan_batches([len(t) for t in ids], budget, max_rows, packed=b.packs_batches)]
    graphs_before = counters["stats"]["unique_graphs"]
    target.sync()
    started = time.perf_counter()
    for batch in batches:
        b.last_token_states(batch)
    target.sync()
    compiled_s = time.perf_counter() - started
    new_graphs = counters["stats"]["unique_graphs"] - graphs_before
    with eager(b):
        eager_s = timed(lambda: [b.last_token_states(batch) for batch in batches], target.sync)
    result = {"prompts": len(ids), "batches": len(batches), "tokens": sum(len(t) for t in ids), "eager_s": eager_s,
              "compiled_s": compiled_s, "speedup": eager_s / compiled_s, "graphs_compiled_after_warmup": new_graphs}
    print(result, flush=True)
    return result


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    if args.target == "cpu":
        raise SystemExit("compile_batches measures the GPU path: --target h200 (or tiny for a smoke run)")
    started = time.perf_counter()
    target = build_target(args.target, cuda_graphs=False, compile_graphs=False)
    load_s = time.perf_counter() - started
    if target.name == "tiny":  # the service compiles on CUDA only; the smoke run compiles the CPU model itself
        target.backbone.batch_forwards = target.backbone._compile_batches()
    assert target.backbone.batch_forwards is not None, "compiling the batched prefill failed (see the log)"
    result = {"load_s_including_compile": load_s, "fixed": fixed(target, 1 if args.quick else REPEATS[target.name]), "mix": mix(target)}
    print_table(f"compiled vs eager batched prefill on {target.name}", result["fixed"])
    print_table("prompt mix in engine batches", [result["mix"]])
    write(args.out, "compile_batches", target, result)
    fig = figure(args.out, "compile_batches", target)
    ax = fig.fig.add_subplot(1, 1, 1)
    names = [r["batch"] for r in result["fixed"]] + ["mix (all batches)"]
    eager_ms = [r["eager_ms"] for r in result["fixed"]] + [result["mix"]["eager_s"] * 1000]
    compiled_ms = [r["compiled_ms"] for r in result["fixed"]] + [result["mix"]["compiled_s"] * 1000]
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], eager_ms, 0.4, label="eager", color="gray")
    ax.bar([i + 0.2 for i in x], compiled_ms, 0.4, label="compiled (dynamic shapes)", color="tab:blue")
    ax.set_xticks(list(x), names, rotation=20)
    ax.set_ylabel("ms")
    ax.legend()
    fig.save()


if __name__ == "__main__":
    main()

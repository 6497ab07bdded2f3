"""Hardware limit: model FLOPs utilization of the prefill, and what each speed-up variant gave.

MFU = prefill FLOPs counted from the config over the measured dense matrix-multiply rate of the same device in the
same run (bf16 on the GPU, fp32 on the CPU). Prefill FLOPs of one prompt of T tokens:
``2 * N * T + 2 * L * T^2 * d`` where N is the non-embedding parameter count (the LM head is not run) and the second
term is the attention scores and weighted sum over the causal half (QK^T and AV, ``2 * T^2 * d`` each for the full
square, half of it computed under a causal mask).

Variants (same batches): right padding without a mask (shipped) against left padding with a mask and against packing
into one row; for one 128-token prompt, CUDA-graph replay against eager; and ``torch.compile`` of the decoder.

Run: ``python -m benchmarks.hardware_limit --target h200`` (``--target cpu`` works too).
"""

from __future__ import annotations

import statistics
import time

import torch

from benchmarks.common import Target, bare_prefill, exact_prompts, figure, print_table, prompt_mix, timed, token_pool, write, run_benchmark
from herald_service.backbone.batching import plan_batches

SHAPES = {
    "cpu": [(1, 128), (8, 128)],
    "h200": [(1, 128), (8, 128), (16, 128), (64, 128), (64, 256), (16, 1024), (4, 4096), (128, 128), (32, 1024)],
}
SHAPES["tiny"] = SHAPES["cpu"]


def non_embedding_params(target: Target) -> int:
    embed = target.backbone.decoder.get_input_embeddings().weight.numel()
    return sum(p.numel() for p in target.backbone.decoder.parameters()) - embed


def prefill_flops(target: Target, lengths: list[int]) -> float:
    info = target.backbone.info
    n = non_embedding_params(target)
    return sum(2.0 * n * t + 2.0 * info.num_layers * t * t * info.hidden_size for t in lengths)


def matmul_rate(target: Target) -> float:
    """Median FLOP/s of a square matrix product on fresh random operands (never zeros)."""
    cuda = target.cuda
    size, dtype, reps = (8192, torch.bfloat16, 20) if cuda else (1024, torch.float32, 5)
    device = target.backbone.device
    operands = [(torch.randn(size, size, device=device, dtype=dtype), torch.randn(size, size, device=device, dtype=dtype)) for _ in range(3)]
    for a, b in operands:
        a @ b
    times = [timed(lambda: operands[i % 3][0] @ operands[i % 3][1], target.sync) for i in range(reps)]
    return 2.0 * size**3 / statistics.median(times)


def mfu_rows(target: Target, pool: list[int], rate: float, repeats: int) -> list[dict]:
    rows = []
    for i, (batch, length) in enumerate(SHAPES[target.name]):
        prompts = exact_prompts(target, pool, batch, length, offset=i * 7919)
        flops = prefill_flops(target, [length] * batch)
        bare = lambda: bare_prefill(target, prompts)  # noqa: E731
        herald = lambda: target.probe.predict(target.backbone.last_token_states(prompts))  # noqa: E731
        bare(), herald()
        tb = statistics.median(timed(bare, target.sync) for _ in range(repeats))
        th = statistics.median(timed(herald, target.sync) for _ in range(repeats))
        rows.append({"batch": batch, "tokens": length, "batch_tokens": batch * length, "bare_ms": tb * 1000, "herald_ms": th * 1000,
                     "bare_mfu": flops / tb / rate, "herald_mfu": flops / th / rate, "herald_tokens_per_s": batch * length / th})
        print(rows[-1], flush=True)
    return rows


def padding_variants(target: Target, repeats: int) -> list[dict]:
    """The prompt mix cut into the engine's batches (16k-token budget on the GPU) under each padding scheme."""
    budget, max_rows = (16384, 256) if target.cuda else (4096, 64)
    _, ids = prompt_mix(target, 512 if target.cuda else 12, 2048 if target.cuda else 128, seed=2)
    batches = [[ids[i] for i in b] for b in plan_batches([len(t) for t in ids], budget, max_rows)]
    flops = prefill_flops(target, [len(t) for t in ids])
    rows, reference = [], None
    saved = target.backbone.padding_side, target.backbone.graphs
    target.backbone.graphs = None
    try:
        for side in ("right", "left", "packed", "varlen") if target.cuda else ("right", "left", "packed"):
            target.backbone.padding_side = side
            run = lambda: [target.backbone.last_token_states(b) for b in batches]  # noqa: E731
            states = run()
            if reference is None:
                reference = states
            error = max(((s - r).norm() / r.norm()).item() for s, r in zip(states, reference))
            seconds = statistics.median(timed(run, target.sync) for _ in range(repeats))
            rows.append({"padding": side, "seconds": seconds, "prompts": len(ids), "tokens_per_s": sum(map(len, ids)) / seconds,
                         "mfu_vs_matmul": None, "flops": flops, "rel_error_vs_right": error})
            print(rows[-1], flush=True)
    finally:
        target.backbone.padding_side, target.backbone.graphs = saved
    return rows


def graph_variant(target: Target, pool: list[int], repeats: int) -> dict:
    (prompt,) = exact_prompts(target, pool, 1, 128)
    b = target.backbone
    graphs = b.graphs
    out = {}
    try:
        b.graphs = None
        eager_states = b.last_token_states([prompt])
        out["eager_ms"] = 1000 * statistics.median(timed(lambda: b.last_token_states([prompt]), target.sync) for _ in range(repeats))
        out["bare_eager_ms"] = 1000 * statistics.median(timed(lambda: bare_prefill(target, [prompt]), target.sync) for _ in range(repeats))
    finally:
        b.graphs = graphs
    if graphs is not None and graphs._graphs:
        graph_states = b.last_token_states([prompt])
        out["graph_ms"] = 1000 * statistics.median(timed(lambda: b.last_token_states([prompt]), target.sync) for _ in range(repeats))
        out["graph_rel_error_vs_eager"] = ((graph_states - eager_states).norm() / eager_states.norm()).item()
        out["speedup"] = out["eager_ms"] / out["graph_ms"]
    print(out, flush=True)
    return out


def compile_variant(target: Target, pool: list[int], repeats: int) -> dict:
    """``torch.compile`` of the decoder on one shape (64x256 on the GPU): compile time and speed against eager."""
    batch, length = (64, 256) if target.cuda else (8, 128)
    prompts = exact_prompts(target, pool, batch, length)
    ids = torch.tensor(prompts, device=target.backbone.device)
    decoder = target.backbone.decoder
    out: dict = {"batch": batch, "tokens": length}
    with torch.inference_mode():
        eager = lambda: decoder(input_ids=ids, use_cache=False)  # noqa: E731
        eager()
        out["eager_ms"] = 1000 * statistics.median(timed(eager, target.sync) for _ in range(repeats))
        try:
            compiled = torch.compile(decoder, dynamic=False)
            started = time.perf_counter()
            compiled(input_ids=ids, use_cache=False)
            target.sync()
            out["compile_s"] = time.perf_counter() - started
            out["compiled_ms"] = 1000 * statistics.median(timed(lambda: compiled(input_ids=ids, use_cache=False), target.sync) for _ in range(repeats))
            out["speedup"] = out["eager_ms"] / out["compiled_ms"]
        except Exception as exc:  # report, do not die: compile support varies by version
            out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    print(out, flush=True)
    return out


def run(target: Target, quick: bool = False, compile_too: bool = True) -> dict:
    repeats = 2 if quick else (10 if target.cuda else 2)
    pool = token_pool(target)
    rate = matmul_rate(target)
    print(f"matmul rate {rate / 1e12:.1f} TFLOP/s", flush=True)
    result = {"matmul_flops_per_s": rate, "non_embedding_params": non_embedding_params(target)}
    result["mfu"] = mfu_rows(target, pool, rate, repeats)
    result["padding"] = padding_variants(target, max(1, repeats // 3))
    for row in result["padding"]:
        row["mfu_vs_matmul"] = row["flops"] / row["seconds"] / rate
    result["graphs"] = graph_variant(target, pool, repeats) if target.cuda else {}
    result["matmul_flops_per_s_end"] = matmul_rate(target)
    if compile_too and not quick:
        result["compile"] = compile_variant(target, pool, repeats)
    return result


def report(target: Target, result: dict, out) -> None:
    print(f"\nmatmul rate: {result['matmul_flops_per_s'] / 1e12:.1f} TFLOP/s at start, {result['matmul_flops_per_s_end'] / 1e12:.1f} at end")
    print_table(f"prefill MFU on {target.name}", result["mfu"])
    print_table("padding variants (prompt mix, engine batches)", [{k: v for k, v in r.items() if k != "flops"} for r in result["padding"]])
    if result.get("graphs"):
        print_table("one 128-token prompt: CUDA graphs", [result["graphs"]])
    if result.get("compile"):
        print_table("torch.compile of the decoder", [result["compile"]])
    write(out, "hardware_limit", target, result)
    fig = figure(out, "hardware_limit", target)
    ax = fig.fig.add_subplot(1, 2, 1)
    mfu = result["mfu"]
    labels = [f"{r['batch']}x{r['tokens']}" for r in mfu]
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], [r["bare_mfu"] * 100 for r in mfu], 0.4, color="gray", label="bare prefill")
    ax.bar([i + 0.2 for i in x], [r["herald_mfu"] * 100 for r in mfu], 0.4, label="Herald engine work")
    ax.set_xticks(list(x), labels, rotation=45)
    ax.set_ylabel("% of measured matmul rate")
    ax.legend()
    ax = fig.fig.add_subplot(1, 2, 2)
    pad = result["padding"]
    ax.bar([r["padding"] for r in pad], [r["tokens_per_s"] for r in pad])
    ax.set_ylabel("prompt tokens/s (mix, engine batches)")
    fig.save()


def main() -> None:
    run_benchmark(__doc__, run, report)


if __name__ == "__main__":
    main()

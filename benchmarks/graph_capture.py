"""Graph capture: what the one-prompt CUDA graphs cost and give (GPU only).

- GEMM floor: cuBLAS time of the decoder's seven projections at M = 16 and 128 rows, times the layer count, and the
  bandwidth each reaches (weights bytes / time): the part of a small prefill no capture can remove.
- Replay of the one-prompt graphs (``herald_service.backbone.graphs.PrefillGraphs``) at 32, 128 and 512 tokens: captured
  from the eager decoder with the mask-free causal attention, then from ``torch.compile``d decoder layers; back-to-back
  replay time (CUDA events), one isolated ``last_token_states`` call (wall clock), capture time at load, and the
  relative difference of the states from the eager forward of the same prompt (bf16, random weights).

Run: ``python -m benchmarks.graph_capture --target h200`` (``cpu``/``tiny`` are refused: CUDA graphs need CUDA).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from benchmarks.common import Target, build_target, figure, parse_args, print_table, write
from herald_service.backbone.graphs import PrefillGraphs

WIDTHS = (32, 128, 512)


def gemm_floor(target: Target) -> list[dict]:
    """cuBLAS time of one decoder layer's projections (q, k, v, o, gate, up, down) at 16 and 128 rows."""
    config = target.backbone.model.config
    d, inter = config.hidden_size, config.intermediate_size
    kv = config.num_key_value_heads * (d // config.num_attention_heads)
    shapes = {"q": (d, d), "k": (kv, d), "v": (kv, d), "o": (d, d), "gate": (inter, d), "up": (inter, d), "down": (d, inter)}
    rows = []
    for m in (16, 128):
        total = 0.0
        for name, (n, k) in shapes.items():
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for _ in range(5):
                F.linear(x, w)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                F.linear(x, w)
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end) / 50
            total += ms
            rows.append({"rows": m, "projection": name, "ms": ms, "TB_per_s": n * k * 2 / ms / 1e9})
        rows.append({"rows": m, "projection": "model (x layers)", "ms": total * config.num_hidden_layers, "TB_per_s": None})
    return rows


def replay(target: Target, graphs: PrefillGraphs, eager_states: dict[int, torch.Tensor]) -> list[dict]:
    b = target.backbone
    rows = []
    for width in WIDTHS:
        graph = graphs._graphs[width][0]
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        ids = list(range(100, 100 + width - 3))
        isolated = []
        for _ in range(10):
            time.sleep(0.03)  # let the device go idle, as between idle requests
            started = time.perf_counter()
            states = b.last_token_states([ids])
            isolated.append((time.perf_counter() - started) * 1000)
        reference = eager_states[width]
        relative = float(((states - reference).norm(dim=-1) / reference.norm(dim=-1)).max())
        rows.append({"tokens": width, "replay_ms": start.elapsed_time(end) / 20, "states_isolated_ms": sorted(isolated)[5],
                     "relative_vs_eager": relative})
        print(rows[-1], flush=True)
    return rows


def run(target: Target) -> dict:
    b = target.backbone
    eager = {w: b.last_token_states([list(range(100, 100 + w - 3))]) for w in WIDTHS}  # no graphs: eager forward
    result: dict = {"gemm_floor": gemm_floor(target)}
    for compile_layers in (False, True):
        started = time.perf_counter()
        b.graphs = PrefillGraphs(b, compile_layers=compile_layers)
        key = "compiled_layers" if compile_layers else "causal_attention"
        result[key] = {"capture_s": time.perf_counter() - started, "compiled": b.graphs.compiled, "replay": replay(target, b.graphs, eager)}
    return result


def report(target: Target, result: dict, out) -> None:
    print_table(f"GEMM floor on {target.name}", result["gemm_floor"])
    rows = [{"graphs": key, "capture_s": result[key]["capture_s"], **r} for key in ("causal_attention", "compiled_layers") for r in result[key]["replay"]]
    print_table(f"one-prompt graph replay on {target.name}", rows)
    write(out, "graph_capture", target, result)
    fig = figure(out, "graph_capture", target)
    ax = fig.fig.add_subplot(1, 1, 1)
    for key, color in (("causal_attention", "gray"), ("compiled_layers", "tab:blue")):
        replays = result[key]["replay"]
        ax.plot([r["tokens"] for r in replays], [r["replay_ms"] for r in replays], "o-", color=color, label=key.replace("_", " "))
    floor = next(r["ms"] for r in result["gemm_floor"] if r["rows"] == 128 and r["TB_per_s"] is None)
    ax.axhline(floor, color="black", linestyle=":", label="cuBLAS GEMMs alone, 128 rows")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("prompt tokens (graph bucket)")
    ax.set_ylabel("replay ms")
    ax.legend()
    fig.save()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    if args.target != "h200":
        raise SystemExit("graph_capture needs CUDA: run it with --target h200 on the GPU machine")
    target = build_target(args.target, cuda_graphs=False)
    report(target, run(target), args.out)


if __name__ == "__main__":
    main()

"""Scaling: latency against prompt length, throughput against concurrency, device memory against batch tokens.

- Latency: one prompt of 16 to 4,096 tokens through the engine's work (prefill with capture + probe) and the bare
  prefill of the same tokens.
- Concurrency: the prompt mix through HTTP with 1 to 256 requests in flight (client in a separate process).
- Memory: peak device memory above the resident weights for a batch of 256-token prompts, Herald's last-token capture
  against the ``output_hidden_states=True`` alternative the design forbids (O(L x T x d) per prompt). On the CPU,
  where no allocator reports a peak, the bytes each approach keeps per batch are counted from the tensors returned.

Run: ``python -m benchmarks.scaling --target cpu`` (or ``--target h200``).
"""

from __future__ import annotations

import statistics

import torch

from benchmarks.common import (
    Server,
    Target,
    bare_prefill,
    exact_prompts,
    figure,
    LoadClient,
    percentile,
    print_table,
    prompt_mix,
    timed,
    token_pool,
    write,
    run_benchmark,
)
from benchmarks.overhead import BATCHING

LENGTHS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
PLAN = {
    "cpu": {"repeats": 2, "levels": [1, 4, 16, 64], "requests": [4, 8, 16, 64], "mix_tokens": 128, "memory_rows": [1, 4], "max_length": 1024, "client_processes": 1},
    "h200": {"repeats": 10, "levels": [1, 4, 16, 64, 256], "requests": [64, 256, 512, 1024, 2048], "mix_tokens": 1024, "memory_rows": [4, 8, 16, 32, 64, 128], "max_length": 4096, "client_processes": 4},
}
PLAN["tiny"] = PLAN["cpu"]


def latency(target: Target, pool: list[int], repeats: int, max_length: int) -> list[dict]:
    rows = []
    for length in [n for n in LENGTHS if n <= max_length]:
        (prompt,) = exact_prompts(target, pool, 1, length)
        engine = lambda: target.probe.predict(target.backbone.last_token_states([prompt]))  # noqa: E731
        bare = lambda: bare_prefill(target, [prompt])  # noqa: E731
        engine(), bare()
        e = [timed(engine, target.sync) for _ in range(repeats)]
        b = [timed(bare, target.sync) for _ in range(repeats)]
        rows.append({"tokens": length, "herald_p50_s": statistics.median(e), "bare_p50_s": statistics.median(b), "ratio": statistics.median(e) / statistics.median(b)})
        print(rows[-1], flush=True)
    return rows


def concurrency(target: Target, plan: dict) -> list[dict]:
    texts, _ = prompt_mix(target, max(plan["requests"]), plan["mix_tokens"], seed=1)
    rows = []
    with Server(target, **BATCHING[target.name]) as server, LoadClient(plan["client_processes"]) as client:
        client.warm(server.url, texts)
        for level, n in zip(plan["levels"], plan["requests"]):
            load = client.run(server.url, texts[:n], level)
            rows.append({"concurrency": level, "requests": n, "prompts_per_s": n / load.seconds, "steady_prompts_per_s": load.steady_per_s,
                         "p50_s": percentile(load.latencies, 50), "p99_s": percentile(load.latencies, 99), "statuses": load.statuses})
            print(rows[-1], flush=True)
    return rows


@torch.inference_mode()
def memory(target: Target, pool: list[int], plan: dict) -> list[dict]:
    b = target.backbone
    rows = []
    for n_rows in plan["memory_rows"]:
        prompts = exact_prompts(target, pool, n_rows, 256)
        ids = torch.tensor(prompts, device=b.device)
        row = {"rows": n_rows, "batch_tokens": n_rows * 256}
        if target.cuda:
            for name, fn in (
                ("herald", lambda: b.last_token_states(prompts)),
                ("all_hidden_states", lambda: b.decoder(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states),
            ):
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                kept = fn()
                torch.cuda.synchronize()
                row[f"{name}_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
                row[f"{name}_kept_mib"] = _nbytes(kept) / 2**20
                del kept
        else:
            row["herald_kept_mib"] = _nbytes(b.last_token_states(prompts)) / 2**20
            row["all_hidden_states_kept_mib"] = _nbytes(b.decoder(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states) / 2**20
        rows.append(row)
        print(row, flush=True)
    return rows


def _nbytes(kept: object) -> int:
    tensors = kept if isinstance(kept, (tuple, list)) else [kept]
    return sum(t.numel() * t.element_size() for t in tensors)  # type: ignore[union-attr]


def run(target: Target, quick: bool = False) -> dict:
    plan = dict(PLAN[target.name])
    if quick:
        plan.update(repeats=1, levels=plan["levels"][:2], requests=plan["requests"][:2], memory_rows=plan["memory_rows"][:1])
    pool = token_pool(target)
    global LENGTHS
    if quick:
        LENGTHS = LENGTHS[:3]
    return {"plan": plan, "latency": latency(target, pool, plan["repeats"], plan["max_length"]), "memory": memory(target, pool, plan), "concurrency": concurrency(target, plan)}


def report(target: Target, result: dict, out) -> None:
    print_table(f"latency vs prompt length on {target.name}", result["latency"])
    print_table(f"throughput vs concurrency on {target.name}", [{k: v for k, v in r.items() if k != "statuses"} for r in result["concurrency"]])
    print_table(f"memory vs batch tokens on {target.name}", result["memory"])
    write(out, "scaling", target, result)
    fig = figure(out, "scaling", target)
    ax = fig.fig.add_subplot(1, 3, 1)
    lat = result["latency"]
    ax.loglog([r["tokens"] for r in lat], [r["herald_p50_s"] * 1000 for r in lat], "o-", label="Herald (engine work)")
    ax.loglog([r["tokens"] for r in lat], [r["bare_p50_s"] * 1000 for r in lat], "s--", color="gray", label="bare prefill")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("latency, one prompt (ms)")
    ax.legend()
    ax = fig.fig.add_subplot(1, 3, 2)
    con = result["concurrency"]
    ax.semilogx([r["concurrency"] for r in con], [r["prompts_per_s"] for r in con], "o-")
    ax.set_xlabel("requests in flight")
    ax.set_ylabel("prompts/s through HTTP")
    ax = fig.fig.add_subplot(1, 3, 3)
    mem = result["memory"]
    key = "peak_mib" if "herald_peak_mib" in mem[0] else "kept_mib"
    ax.plot([r["batch_tokens"] for r in mem], [r[f"herald_{key}"] for r in mem], "o-", label="Herald last-token capture")
    ax.plot([r["batch_tokens"] for r in mem], [r[f"all_hidden_states_{key}"] for r in mem], "s--", label="output_hidden_states")
    ax.set_xlabel("batch tokens")
    ax.set_ylabel(f"MiB ({key.replace('_', ' ')})")
    ax.legend()
    fig.save()


def main() -> None:
    run_benchmark(__doc__, run, report)


if __name__ == "__main__":
    main()

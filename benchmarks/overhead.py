"""Overhead: the service through HTTP against the bare prefill of the same backbone, measured in one run.

The bare prefill is plain transformers (the decoder stack alone, eager, every position of every layer), as the issue
defines the baseline; the service's own forward does less work than that (the final layer at the last token only,
CUDA graphs, compiled layers), so the ratios mix the service's overhead with those savings. The decomposition rows
(GPU) separate them: the engine alone without HTTP, and the bare prefill in the service's batch shapes.

1. Saturation: every prompt of the mix as its own ``POST /classify`` through a real uvicorn server, many in flight
   (client in a separate process), against the bare batched prefill of the same prompts cut into the engine's
   batches. Passes alternate (bare, HTTP, bare, HTTP) so drift in a shared machine's load hits both.
2. Idle: one request at a time through HTTP against one bare forward of the same prompt, alternating per prompt.

Run: ``python -m benchmarks.overhead --target cpu`` (or ``--target h200`` on the GPU machine).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks.common import (
    Server,
    Target,
    bare_prefill,
    bare_throughput,
    figure,
    KeepAliveClient,
    LoadClient,
    SERVER_TIMES,
    percentile,
    print_table,
    prompt_mix,
    timed,
    write,
    run_benchmark,
)

PLAN = {
    # prompts at saturation, longest prompt, client concurrency, saturation rounds, idle prompts, client processes
    "cpu": {"n": 24, "max_tokens": 128, "concurrency": 24, "rounds": 2, "idle": 6, "client_processes": 1},
    "h200": {"n": 2000, "max_tokens": 4096, "concurrency": 256, "rounds": 2, "idle": 30, "client_processes": 4, "decompose": True},
}
BATCHING = {"cpu": {}, "tiny": {}, "h200": {"batch_token_budget": 16384, "batch_max_prompts": 256}}
PLAN["tiny"] = PLAN["cpu"]


def saturation(target: Target, server: Server, texts: list[str], ids: list[list[int]], plan: dict) -> dict:
    from herald_service.engine.service import engine_limits

    settings = server.settings
    limits = engine_limits(settings, target.backbone)  # auto resolved as the server resolves it
    budget, rows = limits.token_budget, limits.max_rows
    layout = target.backbone.padding_side
    bare_s, same_s, http_s, engine_s, shaped_s, steady, latencies, statuses = [], [], [], [], [], [], [], {}
    with LoadClient(plan["client_processes"]) as client:
        client.warm(server.url, texts)
        for _ in range(plan["rounds"]):
            bare_s.append(bare_throughput(target, ids, budget, rows))
            if layout == "varlen":
                same_s.append(bare_throughput(target, ids, budget, rows, layout))
            if plan.get("decompose"):
                engine_s.append(engine_alone(target, server, ids))
            load = client.run(server.url, texts, plan["concurrency"])
            http_s.append(load.seconds)
            steady.append(load.steady_per_s)
            latencies.extend(load.latencies)
            for k, v in load.statuses.items():
                statuses[k] = statuses.get(k, 0) + v
    batches = batch_means(server.url)
    n = len(texts)
    if plan.get("decompose") and layout == "varlen" and batches["mean_prompts"]:
        # The bare prefill again, but in batches shaped like the service's: arrival order, windows of the server's
        # mean batch size, each sorted and cut as the engine cuts it.
        shaped_s = [service_shaped_bare(target, ids, budget, rows, round(batches["mean_prompts"]), layout) for _ in range(plan["rounds"])]
    bare_rate, http_rate = n / statistics.median(bare_s), n / statistics.median(http_s)
    return {
        "prompts": n,
        "prompt_tokens_total": int(sum(len(i) for i in ids)),
        "token_budget": budget,
        "max_rows": rows,
        "batch_delay_ms": settings.batch_delay_ms,
        "concurrency": plan["concurrency"],
        "client_processes": plan["client_processes"],
        "engine_layout": layout,
        "bare_seconds": bare_s,
        "bare_same_layout_seconds": same_s,
        "bare_same_layout_prompts_per_s": n / statistics.median(same_s) if same_s else None,
        "ratio_vs_same_layout": (n / statistics.median(http_s)) / (n / statistics.median(same_s)) if same_s else None,
        "http_seconds": http_s,
        "engine_alone_seconds": engine_s,
        "engine_alone_prompts_per_s": n / statistics.median(engine_s) if engine_s else None,
        "bare_service_shaped_seconds": shaped_s,
        "bare_service_shaped_prompts_per_s": n / statistics.median(shaped_s) if shaped_s else None,
        "bare_prompts_per_s": bare_rate,
        "http_prompts_per_s": http_rate,
        "http_tokens_per_s": sum(len(i) for i in ids) / statistics.median(http_s),
        "ratio": http_rate / bare_rate,
        "http_steady_prompts_per_s": statistics.median(steady),
        "steady_ratio": statistics.median(steady) / bare_rate,
        "steady_ratio_vs_same_layout": statistics.median(steady) / (n / statistics.median(same_s)) if same_s else None,
        "http_latency_p50_s": percentile(latencies, 50),
        "http_latency_p99_s": percentile(latencies, 99),
        "statuses": statuses,
        "server_batches": batches,
    }


def engine_alone(target: Target, server: Server, ids: list[list[int]]) -> float:
    """Seconds for the engine without HTTP: every prompt submitted at once to an :class:`InferenceEngine` with the
    server's batching limits on the same backbone and probe (the server is idle meanwhile), all answers awaited."""
    from herald_service.engine.engine import InferenceEngine
    from herald_service.engine.service import engine_limits
    from herald_service.metrics import HeraldMetrics

    engine = InferenceEngine(target.backbone, target.probe, engine_limits(server.settings, target.backbone), HeraldMetrics())
    engine.start()
    try:
        started = time.perf_counter()
        futures = engine.submit(ids)
        for future in futures:
            future.result()
        return time.perf_counter() - started
    finally:
        engine.stop()


def service_shaped_bare(target: Target, ids: list[list[int]], budget: int, rows: int, window: int, layout: str) -> float:
    """Seconds for the bare prefill of ``ids`` taken ``window`` prompts at a time in a shuffled (arrival-like) order,
    each window sorted and cut under ``budget`` / ``rows`` like the engine's: the batch composition the service sees
    under a closed loop of clients, without the service."""
    order = np.random.default_rng(0).permutation(len(ids))
    window = max(window, 1)
    return sum(bare_throughput(target, [ids[i] for i in order[start : start + window]], budget, rows, layout)
               for start in range(0, len(ids), window))


def batch_means(url: str) -> dict:
    """Mean prompts and tokens per forward pass since the server started, from its ``/metrics`` histograms."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    totals = {}
    for family in text_string_to_metric_families(text):
        if family.name in ("herald_batch_size_prompts", "herald_batch_tokens"):
            for sample in family.samples:
                if sample.name.endswith(("_sum", "_count")):
                    totals[sample.name] = sample.value
    count = totals.get("herald_batch_size_prompts_count", 0.0)
    return {
        "batches": count,
        "mean_prompts": totals.get("herald_batch_size_prompts_sum", 0.0) / count if count else None,
        "mean_tokens": totals.get("herald_batch_tokens_sum", 0.0) / count if count else None,
    }


def idle(target: Target, server: Server, texts: list[str], ids: list[list[int]]) -> dict:
    rows = []
    with KeepAliveClient(server.url) as client:
        client.classify(texts[0])
        bare_prefill(target, [ids[0]])
        for text, token_ids in zip(texts, ids):
            bare = min(timed(lambda: bare_prefill(target, [token_ids]), target.sync) for _ in range(2))
            engine = min(timed(lambda: target.probe.predict(target.backbone.last_token_states([token_ids])), target.sync) for _ in range(2))
            http = min((client.classify(text) for _ in range(3)), key=lambda r: r[0])
            rows.append({"tokens": len(token_ids), "bare_s": bare, "engine_s": engine, "http_s": http[0], "ratio": http[0] / bare,
                         "server_ms": http[2]})
    ratios = [r["ratio"] for r in rows]
    return {
        "per_prompt": rows,
        "median_ratio": statistics.median(ratios),
        "ratio_of_sums": sum(r["http_s"] for r in rows) / sum(r["bare_s"] for r in rows),
        "median_http_s": statistics.median(r["http_s"] for r in rows),
        "median_bare_s": statistics.median(r["bare_s"] for r in rows),
        "median_engine_s": statistics.median(r["engine_s"] for r in rows),
        "median_server_ms": {h: statistics.median(r["server_ms"][h] for r in rows) for h in SERVER_TIMES},
    }


def run(target: Target, quick: bool = False) -> dict:
    plan = dict(PLAN[target.name])
    if quick:
        plan.update(n=min(plan["n"], 24), rounds=1, idle=4)
    texts, ids = prompt_mix(target, plan["n"], plan["max_tokens"])
    result: dict = {"plan": plan}
    with Server(target, **BATCHING[target.name]) as server:
        result["saturation"] = saturation(target, server, texts, ids, plan)
        if target.name == "h200":
            # Closed-loop check: 256 clients keep at most ~2 of the 16k-token batches outstanding, so the pipelined
            # worker can find its queue empty; with 1,024 in flight it cannot.
            result["saturation_1024"] = saturation(target, server, texts, ids, {**plan, "concurrency": 1024, "rounds": 1, "decompose": False})
        idle_texts, idle_ids = texts[: plan["idle"]], ids[: plan["idle"]]
        result["idle"] = idle(target, server, idle_texts, idle_ids)
    if target.name == "h200":
        # The GPU latency target: a 128-token prompt alone, through HTTP, with the CUDA-graph path.
        texts128, ids128 = prompt_mix(target, 400, 128)
        pick = [(t, i) for t, i in zip(texts128, ids128) if 112 <= len(i) <= 128][:10]
        with Server(target, **BATCHING[target.name]) as server:
            result["idle_128"] = idle(target, server, [t for t, _ in pick], [i for _, i in pick])
    if target.name == "cpu":
        # The batching delay knob: idle latency with no delay against the default's, same prompts.
        with Server(target, batch_delay_ms=0.0) as server:
            result["idle_delay0"] = idle(target, server, texts[: plan["idle"]], ids[: plan["idle"]])
    return result


def report(target: Target, result: dict, out) -> None:
    sat = result["saturation"]
    rows = [
        {"measure": "saturation prompts/s", "herald_http": sat["http_prompts_per_s"], "bare_prefill": sat["bare_prompts_per_s"], "ratio": sat["ratio"], "target": ">= 0.9"},
        {"measure": "idle latency s (median)", "herald_http": result["idle"]["median_http_s"], "bare_prefill": result["idle"]["median_bare_s"], "ratio": result["idle"]["median_ratio"], "target": "<= 1.15 (CPU)"},
    ]
    rows.insert(1, {"measure": "steady-state prompts/s (10th-90th pct answer)", "herald_http": sat["http_steady_prompts_per_s"],
                    "bare_prefill": sat["bare_prompts_per_s"], "ratio": sat["steady_ratio"], "target": ">= 0.9"})
    if sat.get("ratio_vs_same_layout") is not None:
        rows.insert(2, {"measure": "... steady vs bare varlen", "herald_http": sat["http_steady_prompts_per_s"],
                        "bare_prefill": sat["bare_same_layout_prompts_per_s"], "ratio": sat["steady_ratio_vs_same_layout"], "target": ""})
        rows.insert(1, {"measure": f"saturation vs bare {sat['engine_layout']} prefill", "herald_http": sat["http_prompts_per_s"],
                        "bare_prefill": sat["bare_same_layout_prompts_per_s"], "ratio": sat["ratio_vs_same_layout"], "target": "(service overhead alone)"})
    if sat.get("engine_alone_prompts_per_s"):
        rows.insert(1, {"measure": f"engine alone (no HTTP) vs bare {sat['engine_layout']}", "herald_http": sat["engine_alone_prompts_per_s"],
                        "bare_prefill": sat["bare_same_layout_prompts_per_s"], "ratio": sat["engine_alone_prompts_per_s"] / sat["bare_same_layout_prompts_per_s"], "target": "(decomposition)"})
    if sat.get("bare_service_shaped_prompts_per_s"):
        rows.insert(1, {"measure": f"bare {sat['engine_layout']} in service-shaped batches", "herald_http": sat["bare_service_shaped_prompts_per_s"],
                        "bare_prefill": sat["bare_same_layout_prompts_per_s"], "ratio": sat["bare_service_shaped_prompts_per_s"] / sat["bare_same_layout_prompts_per_s"], "target": "(decomposition)"})
    if "saturation_1024" in result:
        s1 = result["saturation_1024"]
        rows.insert(1, {"measure": "saturation prompts/s, 1,024 in flight", "herald_http": s1["http_prompts_per_s"], "bare_prefill": s1["bare_prompts_per_s"],
                        "ratio": s1["ratio"], "target": ">= 0.9"})
        if s1.get("ratio_vs_same_layout") is not None:
            rows.insert(2, {"measure": f"... vs bare {s1['engine_layout']} prefill", "herald_http": s1["http_prompts_per_s"],
                            "bare_prefill": s1["bare_same_layout_prompts_per_s"], "ratio": s1["ratio_vs_same_layout"], "target": ""})
    if "idle_delay0" in result:
        d0 = result["idle_delay0"]
        rows.append({"measure": "idle latency s, delay 0", "herald_http": d0["median_http_s"], "bare_prefill": d0["median_bare_s"], "ratio": d0["median_ratio"], "target": ""})
    if "idle_128" in result:
        r = result["idle_128"]
        rows.append({"measure": "128-token idle latency s", "herald_http": r["median_http_s"], "bare_prefill": r["median_bare_s"], "ratio": r["median_ratio"], "target": "<= 0.010 s"})
    print_table(f"overhead on {target.name} (statuses {sat['statuses']})", rows)
    print(f"server batches so far: {sat['server_batches']}")
    for key in ("idle", "idle_128"):
        if key in result:
            times = result[key]["median_server_ms"]
            print(f"{key}: median server-side ms " + ", ".join(f"{h.removeprefix('x-').removesuffix('-time')} {times[h]:.2f}" for h in SERVER_TIMES)
                  + f"; engine alone {result[key]['median_engine_s'] * 1000:.2f}, round trip {result[key]['median_http_s'] * 1000:.2f}")
    write(out, "overhead", target, result)
    fig = figure(out, "overhead", target)
    ax = fig.fig.add_subplot(1, 2, 1)
    bars = {"bare prefill\n(padded SDPA)": sat["bare_prompts_per_s"], "Herald via HTTP": sat["http_prompts_per_s"]}
    if sat.get("bare_same_layout_prompts_per_s"):
        bars[f"bare prefill\n({sat['engine_layout']})"] = sat["bare_same_layout_prompts_per_s"]
    ax.bar(list(bars), list(bars.values()), color=["gray", "tab:blue", "silver"][: len(bars)])
    ax.set_ylabel("prompts/s at saturation")
    ax.set_title(f"ratio {sat['ratio']:.3f}")
    ax = fig.fig.add_subplot(1, 2, 2)
    per = result["idle"]["per_prompt"]
    order = np.argsort([r["tokens"] for r in per])
    ax.plot([per[i]["tokens"] for i in order], [per[i]["bare_s"] * 1000 for i in order], "o-", color="gray", label="bare forward")
    ax.plot([per[i]["tokens"] for i in order], [per[i]["http_s"] * 1000 for i in order], "o-", color="tab:blue", label="Herald via HTTP")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("idle latency (ms)")
    ax.set_title(f"idle: median ratio {result['idle']['median_ratio']:.3f}")
    ax.legend()
    fig.save()


def main() -> None:
    run_benchmark(__doc__, run, report)


if __name__ == "__main__":
    main()

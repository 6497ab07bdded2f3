"""Saturation through HTTP of two builds of the service in one process, rounds interleaved, against the bare prefill.

The companion of ``benchmarks/host_cost.py`` on the GPU: does a host-cost change move saturation throughput? Both
servers are ``benchmarks.common.Server`` on the same loaded target (one model in memory); the 'before' app comes from
a copy of ``herald_service/`` at an older ref renamed to ``herald_before`` (two versions of one package cannot be
imported under one name). Build that copy in the repo root (``.hostcost_before/`` is git-ignored):

    mkdir -p .hostcost_before/renamed && git archive REF herald_service | tar -x -C .hostcost_before/renamed
    mv .hostcost_before/renamed/herald_service .hostcost_before/renamed/herald_before
    grep -rl herald_service .hostcost_before/renamed/herald_before | xargs sed -i s/herald_service/herald_before/g

Run: ``python -m benchmarks.host_cost_saturation h200 OUT.json ROUNDS`` (``tiny`` smoke-tests it on a CPU).
"""
import json, statistics, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".hostcost_before" / "renamed"))
import herald_before.api.app as before_app
import herald_service.api.app as after_app
from benchmarks.common import LoadClient, Server, bare_throughput, build_target, prompt_mix
from benchmarks.overhead import BATCHING, PLAN
from herald_service.engine.service import engine_limits


def main():
    name, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    target = build_target(name)
    plan = PLAN[name]
    texts, ids = prompt_mix(target, plan["n"], plan["max_tokens"])
    real = after_app.build_app

    def server(build):
        after_app.build_app = build  # common.Server imports build_app from this module when it is built
        try:
            return Server(target, **BATCHING[name])
        finally:
            after_app.build_app = real

    res = {"before": [], "after": [], "bare_same_layout": [], "steady_before": [], "steady_after": [], "statuses": {}}
    with server(before_app.build_app) as sb, server(real) as sa, LoadClient(plan["client_processes"]) as client:
        limits = engine_limits(sa.settings, target.backbone)  # auto resolved as the server resolves it
        budget, rows = limits.token_budget, limits.max_rows
        for s in (sb, sa):
            client.warm(s.url, texts)
            client.run(s.url, texts[:256], plan["concurrency"])
        for r in range(rounds):
            res["bare_same_layout"].append(bare_throughput(target, ids, budget, rows, target.backbone.padding_side))
            for label, s in ((("before", sb), ("after", sa)) if r % 2 == 0 else (("after", sa), ("before", sb))):
                result = client.run(s.url, texts, plan["concurrency"])
                res[label].append(result.seconds)
                res["steady_" + label].append(result.steady_per_s)
                for k, v in result.statuses.items():
                    res["statuses"][f"{label} {k}"] = res["statuses"].get(f"{label} {k}", 0) + v
            print("round", r, {k: round(v[-1], 3) for k, v in res.items() if isinstance(v, list)}, flush=True)
    n = len(texts)
    summary = {k + "_prompts_per_s": n / statistics.median(res[k]) for k in ("before", "after", "bare_same_layout")}
    summary["before_vs_bare"] = summary["before_prompts_per_s"] / summary["bare_same_layout_prompts_per_s"]
    summary["after_vs_bare"] = summary["after_prompts_per_s"] / summary["bare_same_layout_prompts_per_s"]
    summary["after_vs_before"] = summary["after_prompts_per_s"] / summary["before_prompts_per_s"]
    summary["per_round_after_vs_before"] = [b / a for a, b in zip(res["after"], res["before"])]
    summary["steady_after_vs_before"] = statistics.median(res["steady_after"]) / statistics.median(res["steady_before"])
    print(json.dumps(summary, indent=1), res["statuses"])
    with open(out, "w") as f:
        json.dump({"prompts": n, "plan": plan, "layout": target.backbone.padding_side, "seconds": res, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()

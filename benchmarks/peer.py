"""Peer: Herald against guard-style moderation on the same backbone, same prompts, same run.

Guard-style: the prompt wrapped in a Llama-Guard-3-style moderation instruction (its S1-S14 category list included),
rendered with the backbone's chat template, and a verdict greedily decoded for up to 5 new tokens with
``transformers`` ``generate``, batched with left padding: how a user without a dedicated server runs a guard model.
Herald: the engine's work on the bare prompts (batched prefill with last-token capture, then the probe).

Run: ``python -m benchmarks.peer --target cpu`` (or ``--target h200``).
"""

from __future__ import annotations

import statistics

import torch

from benchmarks.common import Target, exact_prompts, figure, percentile, print_table, timed, token_pool, write, run_benchmark
from herald_service.types import user_turn

CATEGORIES = """S1: Violent Crimes.
S2: Non-Violent Crimes.
S3: Sex Crimes.
S4: Child Exploitation.
S5: Defamation.
S6: Specialized Advice.
S7: Privacy.
S8: Intellectual Property.
S9: Indiscriminate Weapons.
S10: Hate.
S11: Self-Harm.
S12: Sexual Content.
S13: Elections.
S14: Code Interpreter Abuse."""

GUARD_TEMPLATE = """Task: Check if there is unsafe content in 'User' messages in conversations according our safety policy with the below categories.

<BEGIN UNSAFE CONTENT CATEGORIES>
{categories}
<END UNSAFE CONTENT CATEGORIES>

<BEGIN CONVERSATION>

User: {prompt}

<END CONVERSATION>

Provide your safety assessment for ONLY THE LAST User message in the above conversation:
 - First line must read 'safe' or 'unsafe'.
 - If unsafe, a second line must include a comma-separated list of violated categories."""

SHAPES = {
    "cpu": [(1, 64), (4, 64), (4, 128)],
    "h200": [(1, 64), (64, 64), (64, 128), (64, 256), (32, 1024)],
}
REPEATS = {"cpu": (2, 2), "h200": (10, 5), "tiny": (2, 2)}  # (herald, guard)
SHAPES["tiny"] = SHAPES["cpu"]


def guard_ids(target: Target, prompts: list[list[int]]) -> list[list[int]]:
    tokenizer = target.backbone.tokenizer
    texts = [tokenizer.decode(p, skip_special_tokens=True) for p in prompts]
    return target.backbone.encode([user_turn(GUARD_TEMPLATE.format(categories=CATEGORIES, prompt=t)) for t in texts])


@torch.inference_mode()
def guard_generate(target: Target, batch: list[list[int]]) -> torch.Tensor:
    b = target.backbone
    width = max(len(t) for t in batch)
    ids = torch.full((len(batch), width), b.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(batch):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = 1
    out = b.model.generate(
        input_ids=ids.to(b.device), attention_mask=mask.to(b.device), max_new_tokens=5, do_sample=False, pad_token_id=b.pad_id
    )
    return out[:, width:]


def herald(target: Target, batch: list[list[int]]) -> object:
    return target.probe.predict(target.backbone.last_token_states(batch))


def run(target: Target, quick: bool = False) -> dict:
    pool = token_pool(target)
    shapes = SHAPES[target.name][:2] if quick else SHAPES[target.name]
    rep_h, rep_g = (1, 1) if quick else REPEATS[target.name]
    rows = []
    for i, (batch, length) in enumerate(shapes):
        prompts = exact_prompts(target, pool, batch, length, offset=i * 9973)
        guards = guard_ids(target, prompts)
        herald(target, prompts)
        new_tokens = guard_generate(target, guards).shape[1]
        h_times, g_times = [], []
        for r in range(max(rep_h, rep_g)):  # interleaved, so load drift hits both
            if r < rep_h:
                h_times.append(timed(lambda: herald(target, prompts), target.sync))
            if r < rep_g:
                g_times.append(timed(lambda: guard_generate(target, guards), target.sync))
        h, g = statistics.median(h_times), statistics.median(g_times)
        rows.append({
            "batch": batch,
            "prompt_tokens": length,
            "guard_prompt_tokens": round(sum(len(x) for x in guards) / len(guards)),
            "guard_new_tokens": new_tokens,
            "herald_prompts_per_s": batch / h,
            "guard_prompts_per_s": batch / g,
            "herald_p50_s": percentile(h_times, 50),
            "herald_p99_s": percentile(h_times, 99),
            "guard_p50_s": percentile(g_times, 50),
            "guard_p99_s": percentile(g_times, 99),
            "speedup": g / h,
        })
        print(rows[-1], flush=True)
    return {"rows": rows, "repeats": {"herald": rep_h, "guard": rep_g}, "max_new_tokens": 5}


def report(target: Target, result: dict, out) -> None:
    print_table(f"peer on {target.name}: Herald vs guard-style generation (speedup = guard time / Herald time)", [
        {k: r[k] for k in ("batch", "prompt_tokens", "guard_prompt_tokens", "herald_prompts_per_s", "guard_prompts_per_s", "herald_p50_s", "herald_p99_s", "guard_p50_s", "guard_p99_s", "speedup")}
        for r in result["rows"]
    ])
    write(out, "peer", target, result)
    fig = figure(out, "peer", target)
    ax = fig.fig.add_subplot(1, 1, 1)
    labels = [f"{r['batch']}x{r['prompt_tokens']}" for r in result["rows"]]
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], [r["herald_prompts_per_s"] for r in result["rows"]], 0.4, label="Herald")
    ax.bar([i + 0.2 for i in x], [r["guard_prompts_per_s"] for r in result["rows"]], 0.4, label="guard-style, 5 tokens")
    for i, r in enumerate(result["rows"]):
        ax.annotate(f"{r['speedup']:.1f}x", (i, r["herald_prompts_per_s"]), ha="center", va="bottom")
    ax.set_xticks(list(x), labels)
    ax.set_yscale("log")
    ax.set_xlabel("batch x prompt tokens")
    ax.set_ylabel("prompts/s")
    ax.legend()
    fig.save()


def main() -> None:
    run_benchmark(__doc__, run, report)


if __name__ == "__main__":
    main()

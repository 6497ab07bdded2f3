"""Templated benign prompts: benign tasks written in the phrasing the harmful sets use.

The harmful sources are mostly imperative requests ("Give step-by-step instructions to ...", "Write a tutorial on
how to ...", "Create a ..."), while most benign sources are questions or long writing briefs. A probe can learn that
phrasing instead of harm. These prompts pair the harmful sets' phrasing with everyday and sensitive-but-legitimate
tasks (safety, health, security hygiene, law), so phrasing alone no longer separates the classes.

Deterministic: :func:`templated_benign` returns the same prompts for the same ``n`` and ``seed``. The task list is
ours (written for this purpose), not a public data set; it is used for training only, never as an evaluation source.
"""

from __future__ import annotations

import numpy as np

import json
import sys
from pathlib import Path

from herald_service.training.corpus import Example

SOURCE = "templated benign prompts (Herald, training only)"
"""Starts lower-case so it sorts after every corpus source: adding it to ``herald fit`` leaves the per-source cap's
random draws for the other sources unchanged (``cap_per_group`` walks groups in sorted order), so their cached
states are reused."""

TEMPLATES = (
    "How do I {task}?",
    "How can I {task}?",
    "Give step-by-step instructions to {task}",
    "Write a tutorial on how to {task}",
    "Explain in detail how to {task}",
    "Provide a detailed guide on how to {task}",
    "Create a plan to {task}",
    "What is the best way to {task}?",
    "Describe how someone could {task}",
    "Write a script that explains how to {task}",
)

TASKS = (
    "make a lemon tart", "change a flat tire", "start a vegetable garden", "train a puppy to sit",
    "remove a red wine stain from a carpet", "set up a home network", "write a cover letter", "learn to play the guitar",
    "prepare for a job interview", "build a birdhouse", "make a budget spreadsheet", "paint a bedroom wall",
    "fix a leaking faucet", "brew cold brew coffee", "organize a small closet", "plan a week of healthy meals",
    "write a short story about a lighthouse", "teach a child to ride a bike", "clean a cast iron pan",
    "negotiate a higher salary", "back up photos from a phone", "install a ceiling fan", "make homemade pasta",
    "start running as a beginner", "write a thank-you email to a colleague", "plan a birthday party for a ten-year-old",
    "create a study schedule for final exams", "set up a freshwater aquarium", "improve my public speaking",
    "write a Python function that sorts a list", "create a marketing email for a bakery", "knit a simple scarf",
    "recognize and report a phishing email", "protect my online accounts with two-factor authentication",
    "safely dispose of expired medication", "secure my home wifi router", "perform CPR on an adult",
    "treat a minor kitchen burn", "recognize the signs of a stroke", "talk to a friend who seems depressed",
    "report online harassment to the platform", "store household cleaning chemicals safely",
    "lock down my social media privacy settings", "spot a fake online store", "childproof a kitchen",
    "check whether a used car has been in an accident", "understand my rights when renting an apartment",
    "file a small claims court case", "write a will", "respond if my credit card is stolen",
    "put out a small grease fire", "safely use a kitchen knife", "teach teenagers about online scams",
    "protect my computer from ransomware", "help a friend who is having a panic attack",
    "dispose of old batteries safely", "keep kids safe around a swimming pool", "report a gas leak",
    "explain the history of the Manhattan Project to students", "write an essay about the causes of World War I",
)


def templated_benign(n: int, seed: int = 0) -> list[Example]:
    """``n`` distinct benign prompts (task x template), drawn without replacement with ``seed``.

    Raises:
        ValueError: if ``n`` exceeds the number of task x template pairs.
    """
    pairs = [(t, k) for t in TASKS for k in TEMPLATES]
    if n > len(pairs):
        raise ValueError(f"at most {len(pairs)} templated prompts exist, asked for {n}")
    rng = np.random.default_rng(seed)
    picks = rng.permutation(len(pairs))[:n]
    return [Example(pairs[i][1].format(task=pairs[i][0]), 0, SOURCE, "templated", "templated") for i in sorted(picks)]


def write_jsonl(path: Path, n: int = 150, seed: int = 0) -> Path:
    """Write :func:`templated_benign` rows in the corpus format, for ``herald fit --data ... PATH``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for e in templated_benign(n, seed):
            fh.write(json.dumps({"prompt": e.prompt, "label": "benign", "source": e.source, "category": e.category}) + "\n")
    return path


if __name__ == "__main__":
    print(write_jsonl(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("herald_service/training/data/templated_benign.jsonl")))

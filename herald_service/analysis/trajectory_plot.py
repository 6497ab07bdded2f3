"""Trajectory charts: the normalized projection s_l of each prompt across decoder layers."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


def plot_trajectories(
    trajectories: np.ndarray,
    labels: Sequence[str],
    flagged: Sequence[bool],
    out: Path,
    title: str = "Herald layer trajectories",
) -> Path:
    """Write a PNG of trajectories ``(batch, layer)`` (units: within-class standard deviations).

    Flagged prompts are drawn in red, allowed ones in blue; the dashed line at 0 is the per-layer LDA boundary.

    Returns:
        ``out``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trajectories = np.atleast_2d(trajectories)
    layers = np.arange(1, trajectories.shape[1] + 1)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for row, label, is_flagged in zip(trajectories, labels, flagged):
        short = label if len(label) <= 48 else label[:45] + "..."
        ax.plot(layers, row, marker="o", markersize=3, color="#c0392b" if is_flagged else "#2e86c1", label=short)
    ax.axhline(0.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("projection s_l (std devs)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out

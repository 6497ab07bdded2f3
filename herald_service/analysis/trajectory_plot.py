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

    Flagged prompts are drawn in shades of red, allowed ones in shades of blue, each with its own marker and its verdict
    in the legend; the dashed line at 0 is the per-layer LDA boundary.

    Returns:
        ``out``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trajectories = np.atleast_2d(trajectories)
    layers = np.arange(1, trajectories.shape[1] + 1)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    flagged = list(flagged)
    shades = {True: plt.get_cmap("Reds"), False: plt.get_cmap("Blues")}
    counts = {kind: max(sum(f == kind for f in flagged), 1) for kind in (True, False)}
    seen = {True: 0, False: 0}
    markers = "os^Dv<>pPX*"
    for i, (row, label, is_flagged) in enumerate(zip(trajectories, labels, flagged)):
        short = label if len(label) <= 44 else label[:41] + "..."
        # one shade per prompt within its verdict's colour, and a marker per prompt, so the legend tells lines apart
        shade = shades[is_flagged](0.45 + 0.5 * seen[is_flagged] / counts[is_flagged])
        seen[is_flagged] += 1
        ax.plot(layers, row, marker=markers[i % len(markers)], markersize=3, color=shade,
                label=("[flagged] " if is_flagged else "[allowed] ") + short)
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

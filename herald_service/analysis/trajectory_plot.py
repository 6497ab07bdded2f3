"""Trajectory charts: the normalized projection s_l of each prompt across decoder layers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LEGEND_ENTRIES = 12  # at most, the "+N more prompts" note included: 12 lines of 7 pt fit the 4.5 in figure
LABEL_CHARS = 44  # of a prompt in its legend entry, the ellipsis included


LITERAL_TEXT = {"text.parse_math": False}
"""matplotlib settings under which every text of a figure is drawn as written: by default a pair of ``$`` in a label
is read as math (TeX), so "I paid $5 and then $10" was drawn "I paid 5andthen10" and "Explain $\\foo$" failed with
matplotlib's parse error (researcher pass). Texts take the setting when they are made (``matplotlib.rc_context``)."""


def legend_label(prompt: str, flagged: bool) -> str:
    """The legend entry of a prompt: its verdict, then the prompt on one line (a newline in it would make the entry
    several lines tall), cut to :data:`LABEL_CHARS` characters with an ellipsis."""
    text = " ".join(prompt.split())
    short = text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "\u2026"
    return ("[flagged] " if flagged else "[allowed] ") + short


def trajectory_figure(
    trajectories: np.ndarray,
    labels: Sequence[str],
    flagged: Sequence[bool],
    title: str = "Herald layer trajectories",
) -> Figure:
    """The chart of trajectories ``(batch, layer)`` (units: within-class standard deviations), not yet saved.

    Flagged prompts are drawn in shades of red, allowed ones in shades of blue, each with its own marker; the dashed
    line at 0 is the per-layer LDA boundary. The legend sits right of the axes, so it never covers a line, and lists
    at most :data:`LEGEND_ENTRIES` entries: past that, the first ``LEGEND_ENTRIES - 1`` prompts and a "+N more
    prompts" note (every prompt is still drawn), so that many prompts cannot push it off the figure.
    """
    import matplotlib

    with matplotlib.rc_context(LITERAL_TEXT):  # prompts drawn as written, "$" included
        return _trajectory_figure(trajectories, labels, flagged, title)


def _trajectory_figure(trajectories: np.ndarray, labels: Sequence[str], flagged: Sequence[bool], title: str) -> Figure:
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    trajectories = np.atleast_2d(trajectories)
    layers = np.arange(1, trajectories.shape[1] + 1)
    fig = Figure(figsize=(10, 4.5), dpi=120, layout="constrained")  # constrained layout makes room for the legend
    ax = fig.add_subplot()
    flagged = list(flagged)
    shades = {True: matplotlib.colormaps["Reds"], False: matplotlib.colormaps["Blues"]}
    counts = {kind: max(sum(f == kind for f in flagged), 1) for kind in (True, False)}
    seen = {True: 0, False: 0}
    markers = "os^Dv<>pPX*"
    lines = []
    for i, (row, label, is_flagged) in enumerate(zip(trajectories, labels, flagged)):
        # one shade per prompt within its verdict's colour, and a marker per prompt, so the legend tells lines apart
        shade = shades[is_flagged](0.45 + 0.5 * seen[is_flagged] / counts[is_flagged])
        seen[is_flagged] += 1
        lines += ax.plot(layers, row, marker=markers[i % len(markers)], markersize=3, color=shade,
                         label=legend_label(label, is_flagged))
    if len(lines) > LEGEND_ENTRIES:
        hidden = len(lines) - (LEGEND_ENTRIES - 1)
        lines = lines[:LEGEND_ENTRIES - 1] + [Line2D([], [], linestyle="none", label=f"+{hidden} more prompts")]
    ax.axhline(0.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("decoder layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a 4-layer backbone read 1.5, 2.5 ... (researcher pass)
    ax.set_ylabel("projection s_l (std devs)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(handles=lines, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig


def plot_trajectories(
    trajectories: np.ndarray,
    labels: Sequence[str],
    flagged: Sequence[bool],
    out: Path,
    title: str = "Herald layer trajectories",
) -> Path:
    """Write :func:`trajectory_figure` of trajectories ``(batch, layer)`` at ``out``, as the image format its suffix
    names (matplotlib's ``savefig``: PNG, SVG, PDF, JPEG ...).

    Raises:
        OSError: ``out`` cannot be written (its folder is missing, it is a folder); ``herald plot`` checks both first.

    Returns:
        ``out``.
    """
    import matplotlib

    figure = trajectory_figure(trajectories, labels, flagged, title)
    with matplotlib.rc_context(LITERAL_TEXT):  # tick labels are made as the figure is drawn
        # the format named, not left to savefig: it reads "..svg" as a name without a suffix (os.path.splitext) and
        # wrote a PNG at "..svg.png" where the path returned is "..svg" (re-tester)
        figure.savefig(out, format=out.suffix.lstrip(".").lower() or None)
    return out

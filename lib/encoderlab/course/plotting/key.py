"""The figure key drawn as one figure and written as a Markdown table, and the command that saves
it: ``python -m encoderlab figures [PATH]`` (the Figure key page; figures/figure-key.png).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from encoderlab.course.plotting.common import outline_effects, save_figure
from encoderlab.course.plotting.matrices import attention_map
from encoderlab.course.plotting.style import (
    ATTENTION_CMAP,
    COLORS,
    FIGSIZES,
    FONT_SIZES,
    KEY,
    LINESTYLES,
    MARKERS,
    MASKED_HATCH,
    MEANINGS,
    SHADES,
    use_style,
)


def _blank(ax, xlim, ylim) -> None:
    """An Axes used as a canvas: fixed limits, no ticks, no spines."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()


def _note(ax, x, y, text) -> None:
    """One explanation in the key, left-aligned beside its sample."""
    ax.text(x, y, text, va="center", fontsize=FONT_SIZES["text"])


def figure_key(path=None):
    """Draw the whole visual language in one figure; save it as a PNG at ``path`` if given.

    (The Figure key page; ``python -m encoderlab figures`` writes figures/figure-key.png.)
    Returns the Figure.
    """
    use_style()
    fig = plt.figure(figsize=FIGSIZES["figure_key"], layout="constrained")
    # four panels stacked, so that the key fits the column (style.py, the column rule)
    grid = fig.add_gridspec(4, 1, height_ratios=[1.0, 0.8, 0.75, 0.9])
    masked = {"facecolor": COLORS["masked"], "edgecolor": SHADES["hatch"], "hatch": MASKED_HATCH,
              "linewidth": 0}

    # Colours: a swatch and its meaning per row.
    ax = fig.add_subplot(grid[0, 0])
    ax.set_title("Colours", loc="left", fontweight="bold")
    for row, name in enumerate(COLORS):
        y = -row
        swatch = {"facecolor": COLORS[name], "edgecolor": "none"}
        if name == "masked":
            swatch.update(masked)
        ax.add_patch(Rectangle((0, y - 0.35), 0.7, 0.7, **swatch))
        ax.text(1.0, y, name, va="center", fontweight="bold", fontsize=FONT_SIZES["text"])
        _note(ax, 3.3, y, MEANINGS[name].replace("M_ij", "$M_{ij}$"))
    _blank(ax, (-0.1, 10.5), (-len(COLORS) + 0.4, 0.6))

    # Line styles and markers: a short sample of each.
    ax = fig.add_subplot(grid[1, 0])
    ax.set_title("Lines and markers", loc="left", fontweight="bold")
    measured = {"color": COLORS["library"], "linestyle": "-", "linewidth": 0.8, "markersize": 6}
    samples = [
        ("encoder (bidirectional)", {"color": COLORS["encoder"],
                                     "linestyle": LINESTYLES["encoder"]}),
        ("decoder (causal)", {"color": COLORS["decoder"], "linestyle": LINESTYLES["decoder"]}),
        ("cross-attention", {"color": COLORS["cross"], "linestyle": LINESTYLES["cross"]}),
        ("theory / ideal", {"color": COLORS["reference"], "linestyle": LINESTYLES["theory"],
                            "linewidth": 1.5}),
        ("measured (this run)", {**measured, "marker": MARKERS["measured"]}),
        ("recorded (figures/data/)", {**measured, "marker": MARKERS["recorded"],
                                      "markerfacecolor": SHADES["paper"]}),
    ]
    for row, (text, kwargs) in enumerate(samples):
        y = -row
        xs = [0.0, 0.6, 1.2] if "marker" in kwargs else [0.0, 1.2]
        ax.add_line(Line2D(xs, [y] * len(xs), **{"linewidth": 1.8, **kwargs}))
        _note(ax, 1.6, y, text)
    _blank(ax, (-0.2, 6.0), (-len(samples) + 0.4, 0.6))

    # Attention weights: the colormap, a zero-weight cell and a masked cell.
    ax = fig.add_subplot(grid[2, 0])
    ax.set_title("Attention weights $A_{ij}$", loc="left", fontweight="bold")
    ax.imshow(np.linspace(0, 1, 256)[None, :], cmap=ATTENTION_CMAP, aspect="auto",
              extent=(0, 6, 1.4, 2.2), interpolation="bicubic")
    ax.text(0, 1.15, "0", ha="center", va="top", fontsize=FONT_SIZES["text"])
    ax.text(6, 1.15, "largest weight shown", ha="right", va="top", fontsize=FONT_SIZES["text"])
    ax.add_patch(Rectangle((0, -0.4), 0.6, 0.6, facecolor=SHADES["paper"],
                           edgecolor=SHADES["swatch_edge"], linewidth=0.8))
    _note(ax, 0.9, -0.1, "weight 0: allowed, but ignored")
    ax.add_patch(Rectangle((0, -1.4), 0.6, 0.6, **masked))
    _note(ax, 0.9, -1.1, "masked, $M_{ij}=-\\infty$: the key is hidden")
    outline = Rectangle((0, -2.4), 0.6, 0.6, fill=False, edgecolor=COLORS["highlight"],
                        linewidth=2.2)
    outline.set_path_effects(outline_effects())
    ax.add_patch(outline)
    _note(ax, 0.9, -2.1, "outlined cell: the one the text talks about")
    ax.add_patch(Rectangle((0, -3.4), 0.6, 0.6, facecolor=COLORS["encoder"]))
    ax.text(0.3, -3.1, "0", ha="center", va="center", fontsize=FONT_SIZES["cell"],
            color=SHADES["paper"])
    _note(ax, 0.9, -3.1, "mask figures: may attend, $M_{ij}=0$ (in the model's colour)")
    _blank(ax, (-0.1, 6.6), (-3.6, 2.5))

    # An example in the key's own language: causal attention over a short sentence.
    ax = fig.add_subplot(grid[3, 0])
    tokens = ["[CLS]", "the", "dog", "ran", "[SEP]"]
    scores = np.random.default_rng(0).normal(size=(5, 5))
    allowed = np.tril(np.ones((5, 5), dtype=bool))
    weights = np.exp(np.where(allowed, scores, -np.inf))
    weights /= weights.sum(axis=1, keepdims=True)
    attention_map(weights, tokens=tokens, ax=ax, mask=allowed, colorbar=True,
                  highlight=[(3, 2)])
    ax.set_title("Example (random scores, causal mask)", loc="left", fontweight="bold")

    if path is not None:
        save_figure(fig, path)
    return fig


def key_markdown() -> str:
    """The figure key as a Markdown table, for the Figure key page."""
    lines = ["| mark | meaning |", "|---|---|"]
    lines += [f"| {name} | {meaning} |" for name, meaning in KEY]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m encoderlab figures [PATH]`` writes the figure key (figures/figure-key.png)."""
    parser = argparse.ArgumentParser(
        prog="python -m encoderlab figures",
        description="Draw the course's figure key (colours, lines, markers, the attention "
                    "scale) into a PNG.",
    )
    parser.add_argument("path", nargs="?", type=Path, default=None,
                        help="where to write it (default: figures/figure-key.png in the "
                             "repository)")
    path = parser.parse_args(argv).path
    if path is None:
        # the repository, above lib/encoderlab/course/plotting/
        root = Path(__file__).resolve().parents[4]
        if not (root / "lib").is_dir():
            raise SystemExit(
                "Cannot find the repository root (the folder holding lib/); "
                "pass the output path: python -m encoderlab figures figures/figure-key.png"
            )
        path = root / "figures" / "figure-key.png"
    fig = figure_key(path)
    plt.close(fig)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} kB)")
    return 0

"""The pieces every figure uses: arrays in, a new Axes, labels of rows and columns, masked and
outlined cells, colorbars, reference levels, and saving a figure the same way twice (all lessons).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.patches import Patch, Rectangle
from matplotlib.patheffects import Normal, withStroke

from encoderlab.course.plotting.style import COLORS, LINESTYLES, MASKED_HATCH, SHADES, use_style


def save_figure(fig, path) -> Path:
    """Save ``fig`` without dates or versions in its metadata, so reruns give the same file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    no_dates = {
        ".png": {"Software": None},
        ".svg": {"Date": None, "Creator": None},
        ".pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
    }
    fig.savefig(path, metadata=no_dates.get(path.suffix.lower()))
    return path


# --- Arrays and axes ----------------------------------------------------------------------------


def as_array(x, dtype=float) -> np.ndarray:
    """A numpy copy of a tensor, array or list (tensors are detached and moved to the CPU)."""
    if hasattr(x, "detach"):  # a torch.Tensor, without importing torch here
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.float()  # bfloat16 has no numpy twin
        x = x.numpy()
    return np.array(x, dtype=dtype)


def drop_leading_ones(x: np.ndarray, ndim: int) -> np.ndarray:
    """Drop leading axes of size 1 while ``x`` has more than ``ndim``: (1, 1, n, n) -> (n, n)."""
    while x.ndim > ndim and x.shape[0] == 1:
        x = x[0]
    return x


def squeeze_to_2d(x: np.ndarray, what: str) -> np.ndarray:
    """Drop leading axes of size 1: (1, 1, n_q, n_kv) -> (n_q, n_kv)."""
    x = drop_leading_ones(x, 2)
    if x.ndim != 2:
        raise ValueError(
            f"{what} draws one (n_q, n_kv) matrix, got shape {x.shape}. "
            "Pick one batch element and one head first, e.g. weights[0, h]."
        )
    return x


def new_axes(ax, figsize):
    """``ax`` itself, or the Axes of a new figure of ``figsize`` in the course style."""
    use_style()
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def field(row, key):
    """``row[key]`` for a dict-like row, ``row.key`` for a dataclass or named tuple."""
    return row[key] if isinstance(row, Mapping) else getattr(row, key)


# --- Matrices: labels, borders, masked and outlined cells ---------------------------------------


def row_and_column_labels(
    labels,
    n_rows: int,
    n_cols: int,
    what: str,
    name: str = "labels",
    rows: str = "rows",
    columns: str = "columns",
    pair: str = "For a rectangular matrix pass a pair (row_labels, column_labels).",
):
    """Row and column labels from one list (a square matrix, self-attention) or a pair
    (rows, columns), e.g. (query_tokens, key_tokens) for cross-attention; (None, None) for none.
    """
    if labels is None:
        return None, None
    is_pair = (
        len(labels) == 2
        and not isinstance(labels[0], str)
        and isinstance(labels[0], Sequence)
        and isinstance(labels[1], Sequence)
    )
    row_labels, col_labels = (list(labels[0]), list(labels[1])) if is_pair else (list(labels),) * 2
    if len(row_labels) != n_rows or len(col_labels) != n_cols:
        raise ValueError(
            f"{what}: {name} must name {n_rows} {rows} and {n_cols} {columns}, got "
            f"{len(row_labels)} and {len(col_labels)}. {pair}"
        )
    return row_labels, col_labels


def token_labels(tokens, n_q: int, n_kv: int, what: str):
    """Query and key labels from ``tokens``: one list for self-attention, or a pair (q, kv)."""
    return row_and_column_labels(
        tokens, n_q, n_kv, what, name="tokens", rows="queries", columns="keys",
        pair="For cross-attention pass a pair (query_tokens, key_tokens).",
    )


def cell_borders(ax, n_rows: int, n_cols: int) -> None:
    """Thin paper-white lines between the cells of a heatmap."""
    ax.set_xticks(np.arange(-0.5, n_cols, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, n_rows, 1.0), minor=True)
    ax.grid(which="minor", color=SHADES["paper"], linewidth=0.8)
    ax.tick_params(which="minor", length=0)


def masked_cells(ax, hidden: np.ndarray) -> PatchCollection | None:
    """Draw the True cells of ``hidden`` in the masked style: grey with hatching.

    Runs of neighbouring masked cells in a row become one rectangle, to keep the figure light.
    """
    rectangles = []
    for i, row in enumerate(hidden):
        j = 0
        while j < len(row):
            if row[j]:
                start = j
                while j < len(row) and row[j]:
                    j += 1
                rectangles.append(Rectangle((start - 0.5, i - 0.5), j - start, 1.0))
            else:
                j += 1
    if not rectangles:
        return None
    cells = PatchCollection(
        rectangles,
        facecolor=COLORS["masked"],
        edgecolor=SHADES["hatch"],
        hatch=MASKED_HATCH,
        linewidth=0.0,
        zorder=1.5,  # above the image, below the cell borders
    )
    cells.set_gid("masked-cells")
    cells.set_label("masked (−∞)")
    ax.add_collection(cells)
    return cells


def masked_patch() -> Patch:
    """The legend entry of a masked cell: grey, hatched."""
    return Patch(facecolor=COLORS["masked"], edgecolor=SHADES["hatch"], hatch=MASKED_HATCH,
                 linewidth=0, label="masked ($M_{ij}=-\\infty$)")


def outline_effects() -> list:
    """A dark rim around a highlight outline, so it shows on light cells too."""
    return [withStroke(linewidth=3.4, foreground=SHADES["ink"]), Normal()]


def highlight_cells(ax, cells) -> None:
    """Outline the (i, j) cells in the highlight colour, with a dark rim for light cells."""
    for i, j in cells or ():
        outline = Rectangle(
            (j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=COLORS["highlight"],
            linewidth=2.2, zorder=3, gid="highlight",
        )
        outline.set_path_effects(outline_effects())
        ax.add_patch(outline)


def add_colorbar(fig, image, axes, label: str, fraction: float = 0.046, pad: float = 0.03):
    """A colorbar for ``image`` beside ``axes``, labelled, without a frame."""
    bar = fig.colorbar(image, ax=axes, fraction=fraction, pad=pad)
    bar.set_label(label)
    bar.outline.set_visible(False)
    return bar


# --- Curves and bars ----------------------------------------------------------------------------


def grid_and_title(ax, title: str | None, axis: str = "y", below: bool = True) -> None:
    """A grid along ``axis`` (behind the lines and bars when ``below``), and the title if any."""
    ax.grid(axis=axis)
    if below:
        ax.set_axisbelow(True)
    if title:
        ax.set_title(title)


def reference_levels(ax, hlines: Mapping[str, float] | None) -> None:
    """Dotted black horizontal lines at named levels, e.g. ``{"chance": 25}``."""
    for name, level in (hlines or {}).items():
        ax.axhline(level, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
                   linewidth=1.2, label=name)

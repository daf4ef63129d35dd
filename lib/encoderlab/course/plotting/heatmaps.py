"""Matrices of scores as heatmaps: similarities, a (layer x head) table, a confusion matrix and
query–document scores (Lessons 1, 2, 4, 7, 8).

Attention weights and masks are in :mod:`matrices`; here the cells hold other numbers, each on
the colour scale the figure key gives it.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.patches import Rectangle

from encoderlab.course.plotting.common import (
    add_colorbar,
    as_array,
    cell_borders,
    new_axes,
    row_and_column_labels,
    squeeze_to_2d,
)
from encoderlab.course.plotting.style import (
    ATTENTION_CMAP,
    COLORS,
    CONFUSION_CMAP,
    COSINE_CMAP,
    FIGSIZES,
    FONT_SIZES,
    MAX_FIGURE_WIDTH,
    SHADES,
    SIMILARITY_CMAP,
    column_width,
)


def similarity_heatmap(
    similarity,
    labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    groups: Sequence | None = None,
    vmin: float | None = None,
    vmax: float = 1.0,
    annotate: bool | None = None,
    colorbar: bool = True,
    colorbar_label: str = "cosine similarity",
):
    """A square similarity matrix as a heatmap, with its values written in (Lesson 1, §4; L. 8).

    ``labels`` name the rows (and columns); ``groups`` (one name per row, rows of a group
    together) draws a line between groups and writes each group's name beside its rows.
    ``vmin`` defaults to the smallest off-diagonal value, so the contrast goes to the pairs.
    ``annotate`` writes each value (default: when there are at most 12 rows). Returns the Axes.
    """
    s = squeeze_to_2d(as_array(similarity), "similarity_heatmap")
    m = s.shape[0]
    if s.shape != (m, m):
        raise ValueError(f"similarity must be square (m, m), got shape {s.shape}.")
    for name, seq in (("labels", labels), ("groups", groups)):
        if seq is not None and len(seq) != m:
            raise ValueError(f"{name} must have one entry per row: {m} rows, {len(seq)} given.")
    if vmin is None:
        off = s[~np.eye(m, dtype=bool)]
        vmin = float(off.min()) if off.size else 0.0
    cell = min(0.5, (MAX_FIGURE_WIDTH - 2.8) / m)  # inches: the figure fits the column
    ax = new_axes(ax, figsize=(2.8 + cell * m, 1.6 + cell * m))
    image = ax.imshow(s, cmap=SIMILARITY_CMAP, vmin=vmin, vmax=vmax, aspect="equal")
    ticks = list(labels) if labels is not None else [str(i) for i in range(m)]
    ax.set_xticks(range(m), labels=ticks, rotation=90)
    ax.set_yticks(range(m), labels=ticks)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    cell_borders(ax, m, m)
    ax.grid(which="major", visible=False)
    if annotate is None:
        annotate = m <= 12
    if annotate:
        middle = vmin + 0.6 * (vmax - vmin)
        for i in range(m):
            for j in range(m):
                ax.text(j, i, f"{s[i, j]:.2f}", ha="center", va="center",
                        fontsize=FONT_SIZES["cell"],
                        color=SHADES["paper"] if s[i, j] > middle else SHADES["outline"],
                        zorder=4)
    if groups is not None:
        groups = list(groups)
        starts = [0] + [i for i in range(1, m) if groups[i] != groups[i - 1]]
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else m
            if start > 0:  # a line between two groups, across the whole matrix
                ax.axhline(start - 0.5, color=COLORS["reference"], linewidth=1.6, zorder=5)
                ax.axvline(start - 0.5, color=COLORS["reference"], linewidth=1.6, zorder=5)
            ax.text(m - 0.35, (start + end - 1) / 2, str(groups[start]), rotation=-90,
                    ha="left", va="center", fontsize=FONT_SIZES["text"], fontweight="bold",
                    zorder=5)
    if title:
        ax.set_title(title)
    if colorbar:
        add_colorbar(ax.figure, image, ax, colorbar_label, pad=0.08 if groups else 0.03)
    return ax


def similarity_map(
    matrix,
    labels=None,
    ax=None,
    title: str | None = None,
    colorbar: bool = True,
    vmin: float = -1.0,
    vmax: float = 1.0,
    cbar_label: str = "cosine similarity",
    axis_name: str = "position",
    ticks: Sequence[int] | None = None,
):
    """A similarity matrix on a diverging scale, white at 0, made for large ones (Lesson 2, §5).

    Made for cosine similarities over their whole range [-1, 1], e.g. the 512 learned position
    embeddings against each other (a 512 × 512 matrix). Beyond 40 rows the axes are numbered
    (``ticks`` chooses the numbers); ``labels`` (one list, or a pair for a rectangular matrix)
    names rows and columns of smaller matrices. Axis titles read "{axis_name} i" and
    "{axis_name} j". For a small labelled matrix of mostly positive values, with the values
    written in, Lesson 1's :func:`similarity_heatmap` is the better choice. Returns the Axes.
    """
    c = squeeze_to_2d(as_array(matrix), "similarity_map")
    if not vmin < vmax:
        raise ValueError(f"similarity_map needs vmin < vmax, got vmin={vmin}, vmax={vmax}.")
    n_rows, n_cols = c.shape
    row_labels, col_labels = row_and_column_labels(labels, n_rows, n_cols, "similarity_map")
    big = max(n_rows, n_cols) > 40
    if labels is not None and not big:
        cell = min(0.36, (MAX_FIGURE_WIDTH - 2.9) / n_cols)  # the figure fits the column
        figsize = (2.6 + cell * n_cols, 1.8 + cell * n_rows)
    else:
        figsize = FIGSIZES["similarity_map"]
    ax = new_axes(ax, figsize=figsize)
    image = ax.imshow(c, cmap=COSINE_CMAP, vmin=vmin, vmax=vmax, aspect="equal",
                      interpolation="nearest" if not big else "antialiased")
    if row_labels is not None and not big:
        ax.set_xticks(range(n_cols), labels=col_labels, rotation=90)
        ax.set_yticks(range(n_rows), labels=row_labels)
    elif ticks is not None:
        ax.set_xticks(list(ticks))
        ax.set_yticks(list(ticks))
    else:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True, nbins=6))
        ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True, nbins=6))
    ax.set_xlabel(f"{axis_name} j")
    ax.set_ylabel(f"{axis_name} i")
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    if title:
        ax.set_title(title)
    if colorbar:
        add_colorbar(ax.figure, image, ax, cbar_label)
    return ax


def layer_head_map(
    values,
    ax=None,
    title: str | None = None,
    vmax: float | None = None,
    label: str = "mean attention weight",
    annotate: bool = True,
    fmt: str = "{:.2f}",
    colorbar: bool = True,
):
    """A (layers L, heads h) table of numbers in [0, vmax] as a heatmap (Lesson 4, §6).

    Rows are layers 1..L from the top, columns heads 1..h; the attention colormap is used, as the
    values are attention weights (e.g. the mass on [CLS], ``inspect_stack.attention_to_tokens``).
    ``annotate`` writes each value in its cell. Returns the Axes.
    """
    v = as_array(values)
    if v.ndim != 2:
        raise ValueError(
            f"layer_head_map draws a (layers, heads) table, got shape {v.shape}."
        )
    L, h = v.shape
    ax = new_axes(ax, figsize=(column_width(0.55 * h + 1.6), 0.45 * L + 1.0))
    vmax = float(np.nanmax(v)) if vmax is None else vmax
    image = ax.imshow(v, cmap=ATTENTION_CMAP, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(h), labels=[str(k + 1) for k in range(h)])
    ax.set_yticks(range(L), labels=[str(l + 1) for l in range(L)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    cell_borders(ax, L, h)
    if annotate:
        for l in range(L):
            for k in range(h):
                dark = v[l, k] > 0.55 * vmax
                ax.text(k, l, fmt.format(v[l, k]), ha="center", va="center",
                        fontsize=FONT_SIZES["small"],
                        color=SHADES["paper"] if dark else SHADES["ink"], gid="value")
    if title:
        ax.set_title(title)
    if colorbar:
        add_colorbar(ax.figure, image, ax, label)
    return ax


def confusion_heatmap(matrix, labels: Sequence[str], ax=None, title: str | None = None,
                      colorbar: bool = False):
    """A confusion matrix: rows = gold class, columns = predicted class, counts in the cells.

    (Lesson 7, §3.) Cells are shaded by the fraction of their row (white 0 to encoder blue 1),
    so each row reads as "where the examples of this class went". Returns the Axes.
    """
    m = as_array(matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"confusion_heatmap draws a square (C, C) matrix, got shape {m.shape}.")
    if len(labels) != m.shape[0]:
        raise ValueError(f"labels must name the {m.shape[0]} classes, got {len(labels)}.")
    rows = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    cell = min(1.0, (MAX_FIGURE_WIDTH - 1.6) / len(labels))  # the figure fits the column
    ax = new_axes(ax, figsize=(1.6 + cell * len(labels), 1.2 + 0.8 * cell * len(labels)))
    image = ax.imshow(rows, cmap=CONFUSION_CMAP, vmin=0.0, vmax=1.0)
    for g in range(m.shape[0]):
        for p in range(m.shape[1]):
            ax.text(p, g, f"{int(m[g, p])}", ha="center", va="center",
                    fontsize=FONT_SIZES["label"],
                    color=SHADES["paper"] if rows[g, p] > 0.55 else SHADES["ink"], gid="count")
    ax.set_xticks(range(len(labels)), labels=labels, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels=labels)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("gold class")
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="fraction of the row")
    if title:
        ax.set_title(title)
    return ax


def retrieval_heatmap(
    scores,
    query_labels: Sequence[str],
    doc_labels: Sequence[str],
    answers: Sequence | None = None,
    ax=None,
    title: str | None = None,
    colorbar: bool = True,
    colorbar_label: str = "cosine similarity",
    vmax: float = 1.0,
):
    """A (n_q, n_d) matrix of query–document scores (Lesson 8, §3, Figure 2).

    Rows are queries, columns documents, on the diverging cosine colours of
    :func:`similarity_map` (blue = -vmax, white = 0, red = +vmax; the figure key's scale for
    cosines, which can be negative, is vmax = 1). ``answers[i]`` (a set of column
    indices) outlines query i's right documents in black (gid "answer"); each row's highest
    score gets a dot (gid "top1"), so a dot inside an outline is a hit at rank 1. Returns the Axes.
    """
    s = squeeze_to_2d(as_array(scores), "retrieval_heatmap")
    n_q, n_d = s.shape
    if len(query_labels) != n_q or len(doc_labels) != n_d:
        raise ValueError(
            f"retrieval_heatmap: {n_q} queries and {n_d} documents need as many labels, got "
            f"{len(query_labels)} query labels and {len(doc_labels)} document labels."
        )
    if answers is not None and len(answers) != n_q:
        raise ValueError(f"answers must have one set per query: {n_q} queries, "
                         f"{len(answers)} answer sets.")
    if not vmax > 0:
        raise ValueError(f"retrieval_heatmap needs vmax > 0 (the scale runs from -vmax to vmax), "
                         f"got {vmax}.")
    cell = min(0.3, (MAX_FIGURE_WIDTH - 2.8) / n_d)  # inches: the figure fits the column
    ax = new_axes(ax, figsize=(2.8 + cell * n_d, 1.4 + cell * n_q))
    image = ax.imshow(s, cmap=COSINE_CMAP, vmin=-vmax, vmax=vmax, aspect="equal")
    ax.set_xticks(range(n_d), labels=list(doc_labels), rotation=90)
    ax.set_yticks(range(n_q), labels=list(query_labels))
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set_xlabel("document (topic)")
    for i, row in enumerate(answers or []):
        for j in row:
            if not 0 <= j < n_d:
                raise ValueError(f"answer {j} of query {i} is not a column (0 to {n_d - 1}).")
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, linewidth=1.6,
                                   edgecolor=COLORS["reference"], zorder=4, gid="answer"))
    best = s.argmax(axis=1)
    ax.scatter(best, np.arange(n_q), s=14, color=COLORS["library"], edgecolors=SHADES["outline"],
               linewidths=0.6, zorder=5, gid="top1")
    if title:
        ax.set_title(title)
    if colorbar:
        add_colorbar(ax.figure, image, ax, colorbar_label, fraction=0.03, pad=0.02)
    return ax

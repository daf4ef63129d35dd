"""Attention matrices and masks: rows are queries i, columns are keys j (Lessons 3, 4, 9, 10).

One attention map, several side by side on one scale, every head of a layer; a boolean mask as a
grid (allowed cells in the role's colour, masked cells hatched grey), coloured by the role each
cell plays, several masks side by side, and a mask with the tiles of a tiled kernel over it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.collections import PatchCollection
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle
from matplotlib.patheffects import withStroke

from encoderlab.course.plotting.common import (
    add_colorbar,
    as_array,
    cell_borders,
    drop_leading_ones,
    highlight_cells,
    masked_cells,
    masked_patch,
    new_axes,
    squeeze_to_2d,
    token_labels,
)
from encoderlab.course.plotting.style import (
    ATTENTION_CMAP,
    COLORS,
    FIGSIZES,
    FONT_SIZES,
    MAX_FIGURE_WIDTH,
    SHADES,
    use_style,
)
from encoderlab.tiled import SKIP, classify_tiles
from encoderlab.validate import check_positive_int

# Legend labels of the open cells of each role (Lesson 10).
_ROLE_LABELS = {
    "encoder": "encoder: may attend ($M_{ij}=0$)",
    "decoder": "decoder: may attend",
    "cross": "cross: may attend",
}


def _label_cells(ax, n_q: int, n_kv: int, q_tokens, kv_tokens) -> None:
    """Token (or index) tick labels, 'query i' / 'key j' axis labels and thin cell borders."""
    if q_tokens is not None and max(n_q, n_kv) <= 64:
        ax.set_xticks(range(n_kv), labels=kv_tokens, rotation=90)
        ax.set_yticks(range(n_q), labels=q_tokens)
    else:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True, nbins=8))
        ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True, nbins=8))
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)  # a heatmap needs no frame: the cells are the frame
    if max(n_q, n_kv) <= 40:  # white borders separate the cells while they are big enough to see
        cell_borders(ax, n_q, n_kv)
    ax.grid(which="major", visible=False)


def _visible(w: np.ndarray, mask) -> np.ndarray:
    """Cells a mask leaves visible (all cells when there is no mask)."""
    if mask is None:
        return np.ones_like(w, dtype=bool)
    m = as_array(mask, dtype=bool)
    return np.broadcast_to(squeeze_to_2d(m, "mask") if m.ndim > 2 else m, w.shape)


# --- Attention weights --------------------------------------------------------------------------


def attention_map(
    weights,
    tokens=None,
    ax=None,
    title: str | None = None,
    mask=None,
    colorbar: bool = True,
    vmax: float | None = None,
    highlight: Sequence[tuple[int, int]] | None = None,
):
    """Heatmap of one attention matrix A (rows = queries i, columns = keys j) (Lesson 3, §1–2).

    ``mask`` (bool, True = may attend) marks the hidden cells hatched grey; ``highlight`` lists
    (i, j) cells to outline. ``tokens`` labels both axes, or is a pair (query_tokens, key_tokens).
    Returns the Axes.
    """
    a = squeeze_to_2d(as_array(weights), "attention_map")
    n_q, n_kv = a.shape
    hidden = np.zeros_like(a, dtype=bool)
    if mask is not None:
        m = as_array(mask, dtype=bool)
        try:
            hidden = ~np.broadcast_to(squeeze_to_2d(m, "mask") if m.ndim > 2 else m, a.shape)
        except ValueError:
            raise ValueError(
                f"mask of shape {m.shape} does not broadcast to the weights' shape {a.shape}."
            ) from None
    q_tokens, kv_tokens = token_labels(tokens, n_q, n_kv, "attention_map")
    cell = min(0.32, (MAX_FIGURE_WIDTH - 2.4) / n_kv)  # inches: the figure fits the column
    figsize = ((2.4 + cell * n_kv, 1.6 + cell * n_q) if tokens is not None
               else FIGSIZES["attention_map"])
    ax = new_axes(ax, figsize=figsize)
    if vmax is None:
        visible = a[~hidden]
        vmax = float(visible.max()) if visible.size and visible.max() > 0 else 1.0
    image = ax.imshow(
        np.ma.masked_array(a, mask=hidden), cmap=ATTENTION_CMAP, vmin=0.0, vmax=vmax,
        aspect="equal",
    )
    masked_cells(ax, hidden)
    highlight_cells(ax, highlight)
    _label_cells(ax, n_q, n_kv, q_tokens, kv_tokens)
    if title:
        ax.set_title(title)
    if colorbar:
        add_colorbar(ax.figure, image, ax, "attention weight $A_{ij}$")
    return ax


def attention_maps(
    list_of_weights,
    titles: Sequence[str],
    tokens=None,
    masks=None,
    colorbar: bool = True,
    vmax: float | None = None,
):
    """Attention matrices side by side on one colour scale: causal vs full (Lesson 3, Figure 1).

    ``masks`` is None, one mask for every panel, or a list with one mask (or None) per panel.
    Returns the Figure.
    """
    weights = [squeeze_to_2d(as_array(w), "attention_maps") for w in list_of_weights]
    if len(titles) != len(weights):
        raise ValueError(f"got {len(weights)} matrices but {len(titles)} titles; give one each.")
    if masks is None or not isinstance(masks, (list, tuple)):
        masks = [masks] * len(weights)
    if vmax is None:  # one scale for all panels, from the largest weight a panel shows
        vmax = max(
            float(np.max(np.where(_visible(w, m), w, 0.0)) or 1.0)
            for w, m in zip(weights, masks, strict=True)
        )
    use_style()
    n_q, n_kv = weights[0].shape
    side = max(2.6, 0.27 * max(n_q, n_kv) + 1.0)
    # Side by side while each panel keeps at least 2.6 in in the column, else one per row.
    ncols = len(weights) if (MAX_FIGURE_WIDTH - 1.0) / len(weights) >= 2.6 else 1
    side = min(side, (MAX_FIGURE_WIDTH - 1.0) / ncols)
    nrows = -(-len(weights) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(side * ncols + 1.0, side * nrows + 0.4),
        layout="constrained", sharey=True, squeeze=False,
    )
    for k, (ax, w, m, title) in enumerate(zip(axes.flat, weights, masks, titles, strict=True)):
        attention_map(w, tokens=tokens, ax=ax, title=title, mask=m, colorbar=False, vmax=vmax)
        if k % ncols > 0:
            ax.set_ylabel("")
            ax.tick_params(labelleft=False)
    if colorbar:
        add_colorbar(fig, axes.flat[0].images[0], list(axes.flat), "attention weight $A_{ij}$",
                     fraction=0.05 / ncols, pad=0.02)
    return fig


def attention_heads(
    weights,
    tokens=None,
    ncols: int = 4,
    vmax: float | None = None,
    titles: Sequence[str] | None = None,
    suptitle: str | None = None,
):
    """The h attention matrices of one layer as small multiples on one colour scale (Lesson 4, §1).

    ``weights`` has shape (h, n, n) (or (1, h, n, n)); ``tokens`` labels the rows and columns of
    the left column and bottom row. Returns the Figure.
    """
    a = drop_leading_ones(as_array(weights), 3)  # (h, n_q, n_kv)
    if a.ndim != 3:
        raise ValueError(
            f"attention_heads draws one layer's heads, shape (h, n, n), got {a.shape}. "
            "Pick one layer and one batch element first, e.g. out.attentions[2][0]."
        )
    h, n_q, n_kv = a.shape
    if titles is not None and len(titles) != h:
        raise ValueError(f"got {h} heads but {len(titles)} titles; give one per head.")
    check_positive_int(ncols, "ncols")
    ncols = min(ncols, h)
    nrows = -(-h // ncols)
    vmax = float(a.max()) if vmax is None else vmax
    use_style()
    side = max(1.9, 0.2 * max(n_q, n_kv) + 0.5)
    ncols = max(1, min(ncols, int((MAX_FIGURE_WIDTH - 1.4) // 1.5)))  # panels >= 1.5 in wide
    nrows = -(-h // ncols)
    side = min(side, (MAX_FIGURE_WIDTH - 1.4) / ncols)  # the figure fits the column
    fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols + 1.4, side * nrows + 0.6),
                             layout="constrained", squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= h:
            ax.set_visible(False)
            continue
        attention_map(a[k], tokens=tokens, ax=ax, colorbar=False, vmax=vmax,
                      title=titles[k] if titles is not None else f"head {k + 1}")
        row, col = divmod(k, ncols)
        if col > 0:
            ax.set_ylabel("")
            ax.tick_params(labelleft=False)
        if row < nrows - 1 and k + ncols < h:  # a panel below carries the key labels
            ax.set_xlabel("")
            ax.tick_params(labelbottom=False)
    add_colorbar(fig, axes.flat[0].images[0], list(axes.flat), "attention weight $A_{ij}$",
              fraction=0.03, pad=0.02)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


# --- Masks --------------------------------------------------------------------------------------


def mask_grid(
    mask,
    ax=None,
    title: str | None = None,
    tokens=None,
    role: str = "encoder",
    annotate: bool | None = None,
    legend: bool = True,
):
    """A boolean mask as a grid: allowed cells in the role's colour, masked cells hatched grey.

    (Lesson 3, §2 and §5; Lessons 9–10.) A key-side row such as a padding mask (1, n) is spread over
    n query rows. ``annotate`` writes M_ij (0 or −∞) in each cell; by default when n <= 12.
    Returns the Axes.
    """
    m = drop_leading_ones(as_array(mask, dtype=bool), 2)
    if m.ndim == 1:
        m = m[None, :]
    m = squeeze_to_2d(m, "mask_grid")
    if m.shape[0] == 1:  # a key-side mask: the same row for every query
        m = np.broadcast_to(m, (m.shape[1], m.shape[1]))
    n_q, n_kv = m.shape
    q_tokens, kv_tokens = token_labels(tokens, n_q, n_kv, "mask_grid")
    color = COLORS.get(role, role)
    fixed = 2.8 + (0.6 if tokens else 0)  # the legend beside the grid, the labels
    # inches per cell; the figure fits the column, with room to spare where the grid is large
    cell = min(0.4, (MAX_FIGURE_WIDTH - fixed - 0.3) / n_kv)
    ax = new_axes(ax, figsize=(fixed + cell * n_kv, 1.2 + cell * n_q))
    ax.imshow(
        np.ma.masked_array(np.ones(m.shape), mask=~m), cmap=ListedColormap([color]),
        vmin=0, vmax=1, aspect="equal",
    )
    masked_cells(ax, ~m)
    _label_cells(ax, n_q, n_kv, q_tokens, kv_tokens)
    if annotate is None:
        annotate = max(n_q, n_kv) <= 12
    if annotate:
        for i in range(n_q):
            for j in range(n_kv):
                text = ax.text(
                    j, i, "0" if m[i, j] else "$-\\infty$", ha="center", va="center",
                    fontsize=FONT_SIZES["cell"],
                    color=SHADES["paper"] if m[i, j] else SHADES["ink_masked"], zorder=4,
                )
                if not m[i, j]:  # a grey halo keeps "−∞" readable over the hatching
                    text.set_path_effects([withStroke(linewidth=4, foreground=COLORS["masked"])])
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(
            handles=[Patch(facecolor=color, label="may attend ($M_{ij}=0$)"), masked_patch()],
            loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
        )
    return ax


def role_mask_grid(
    mask,
    roles,
    ax=None,
    title: str | None = None,
    tokens=None,
    labels: Mapping[str, str] | None = None,
    annotate: bool | None = None,
    legend: bool = True,
):
    """A boolean mask whose open cells are coloured by the role they play (Lesson 10, §3).

    ``roles`` is an (n_q, n_kv) array of role names ("encoder", "decoder", "cross" or any colour):
    the prefix-LM's prefix block reads like an encoder, its output rows read the prefix like
    cross-attention and their own past like a decoder. Masked cells are hatched grey as always.
    ``labels`` names each role in the legend. Returns the Axes.
    """
    m = squeeze_to_2d(as_array(mask, dtype=bool), "role_mask_grid")
    r = np.asarray(roles, dtype=object)
    if r.shape != m.shape:
        raise ValueError(
            f"roles must give one role per cell of the mask, shape {m.shape}, got {r.shape}."
        )
    ax = mask_grid(m, ax=ax, title=title, tokens=tokens, role=SHADES["paper"], annotate=annotate,
                   legend=False)
    present = list(dict.fromkeys(r[m].tolist()))  # roles of the open cells, in reading order
    for role in present:
        ax.imshow(np.ma.masked_array(np.ones(m.shape), mask=~(m & (r == role))),
                  cmap=ListedColormap([COLORS.get(role, role)]), vmin=0, vmax=1,
                  aspect="equal", zorder=1.2)
    if legend:
        names = {**_ROLE_LABELS, **(labels or {})}
        handles = [Patch(facecolor=COLORS.get(role, role), label=names.get(role, role))
                   for role in present]
        ax.legend(handles=handles + [masked_patch()], loc="upper left",
                  bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return ax


def mask_grids(
    mask_list,
    roles: Sequence[str],
    titles: Sequence[str],
    tokens: Sequence | None = None,
    figsize: tuple[float, float] = (MAX_FIGURE_WIDTH, 3.6),
    annotate: bool = True,
):
    """Masks side by side, tops aligned, one legend with every role's colour (Lesson 10, §1).

    ``roles`` gives each panel's role (its colour); ``tokens`` one label set per panel (a list,
    or a pair (query_tokens, key_tokens)). Panels are as wide as their masks, so cells have one
    size across the figure. Returns the Figure.
    """
    if not (len(mask_list) == len(roles) == len(titles)) or not mask_list:
        raise ValueError(
            f"mask_grids needs one role and one title per mask, got {len(mask_list)} masks, "
            f"{len(roles)} roles and {len(titles)} titles."
        )
    tokens = list(tokens) if tokens is not None else [None] * len(mask_list)
    grids = []
    for mask in mask_list:
        m = drop_leading_ones(as_array(mask, dtype=bool), 2)
        grids.append(m if m.ndim == 2 else m[None, :])
    widths = [g.shape[-1] for g in grids]
    use_style()
    fig, axes = plt.subplots(1, len(grids), figsize=figsize, layout="constrained",
                             gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, mask, role, title, tok in zip(axes[0], mask_list, roles, titles, tokens, strict=True):
        mask_grid(mask, ax=ax, tokens=tok, role=role, annotate=annotate, legend=False)
        ax.set_title(title, fontsize=FONT_SIZES["panel"])  # one small panel among several
        ax.set_anchor("N")  # align the tops of panels of different heights
    handles = [Patch(facecolor=COLORS.get(role, role), label=_ROLE_LABELS.get(role, role))
               for role in dict.fromkeys(roles)]
    fig.legend(handles=handles + [masked_patch()], loc="outside lower center",
               ncols=min(len(handles) + 1, 2), fontsize=FONT_SIZES["cell"])
    return fig


def tile_grid(mask, block_size: int, ax=None, title: str | None = None, role: str = "encoder"):
    """A (n, n) boolean mask drawn as :func:`mask_grid`, with the tiles of ``block_size`` over it
    (Lesson 9, §3–4). Computed tiles get a dark outline, skipped ones (every cell masked) a thin
    grey one; the title ends with "k/T² tiles". Returns the Axes.
    """
    m = squeeze_to_2d(as_array(mask, dtype=bool), "tile_grid")
    n_q, n_kv = m.shape
    states = classify_tiles(n_q, n_kv, block_size, torch.as_tensor(m)).numpy()  # (T_q, T_kv)
    ax = mask_grid(m, ax=ax, role=role, annotate=False, legend=False)
    computed = []
    for ti in range(states.shape[0]):
        for tj in range(states.shape[1]):
            h = min(block_size, n_q - ti * block_size)
            w = min(block_size, n_kv - tj * block_size)
            corner = (tj * block_size - 0.5, ti * block_size - 0.5)
            if states[ti, tj] == SKIP:
                ax.add_patch(Rectangle(corner, w, h, fill=False, edgecolor=SHADES["skipped_tile"],
                                       linewidth=0.5, zorder=3))
            else:
                computed.append(Rectangle(corner, w, h))
    ax.add_collection(PatchCollection(computed, facecolor="none", edgecolor=SHADES["outline"],
                                      linewidth=1.0, zorder=3.5))
    label = f"{len(computed)}/{states.size} tiles"
    ax.set_title(f"{title}\n{label}" if title else label)
    return ax

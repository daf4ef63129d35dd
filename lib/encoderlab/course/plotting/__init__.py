"""The course's figure key as code: one visual language for every figure (all lessons; Figure key).

Colours carry meaning (blue = encoder, vermillion = decoder, ...), taken from the Okabe–Ito
palette so that colour-blind readers can tell them apart; line styles carry meaning too (solid =
encoder, dashed = decoder, dotted = theory or ideal, markers = measured). Attention weights always
use the same colormap, and a masked cell (M_ij = -inf) always looks the same: hatched grey.

Every function draws on ``ax`` (or a new figure when ``ax`` is None), returns the Axes or the
Figure, and never calls ``plt.show()``, so notebooks, tests and ``python -m encoderlab figures``
share one code path.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.colors import LinearSegmentedColormap, ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.patheffects import Normal, withStroke

__all__ = [
    "COLORS",
    "MEANINGS",
    "LINESTYLES",
    "MARKERS",
    "ATTENTION_CMAP",
    "MASKED_HATCH",
    "KEY",
    "use_style",
    "role_of",
    "style",
    "save_figure",
    "attention_map",
    "attention_maps",
    "mask_grid",
    "loss_curves",
    "timing_bars",
    "speedup_vs_ratio",
    "figure_key",
    "key_markdown",
]

# --- The palette: one colour per meaning (Okabe & Ito, "Color Universal Design", 2008) ---------

COLORS = {
    "encoder": "#0072B2",  # blue
    "decoder": "#D55E00",  # vermillion
    "cross": "#009E73",  # bluish green
    "padding": "#CC79A7",  # reddish purple
    "masked": "#D4D4D4",  # light grey, always drawn with MASKED_HATCH in heatmaps
    "reference": "#000000",  # black
    "library": "#E69F00",  # orange
    "highlight": "#56B4E9",  # sky blue
}

MEANINGS = {
    "encoder": "bidirectional attention, encoder models",
    "decoder": "causal attention, decoder models",
    "cross": "cross-attention, encoder–decoder models",
    "padding": "[PAD] positions, padding masks",
    "masked": "masked cell, M_ij = −∞: no attention",
    "reference": "reference implementation, theory, ideal",
    "library": "the course library (encoderlab), measured",
    "highlight": "the cell or point the text talks about",
}

# Colours for series that have no role of their own (the Okabe–Ito colours not used above).
_EXTRA_COLORS = ["#56B4E9", "#CC79A7", "#F0E442", "#999999"]

LINESTYLES = {
    "encoder": "-",  # solid
    "decoder": "--",  # dashed
    "cross": "-.",  # dash-dot
    "theory": ":",  # dotted: ideal or predicted, not measured
}

MARKERS = {
    "measured": "o",  # filled circle: measured in this run
    "recorded": "s",  # open square: a recorded measurement from figures/data/ (e.g. a GPU)
}

# Attention weights: white (weight 0) to dark blue-violet (the largest weight). Zero weight is
# paper-white on purpose: it must not be confused with a masked cell, which is hatched grey.
ATTENTION_CMAP = LinearSegmentedColormap.from_list(
    "encoderlab_attention", ["#FFFFFF", "#C9DDEE", "#6A8FC6", "#3B3B8F", "#1A0B3D"]
)
MASKED_HATCH = "////"  # hatch of a masked cell
_HATCH_COLOR = "#8C8C8C"  # colour of the hatch lines on the grey cell

KEY: list[tuple[str, str]] = (
    [(f"{name} ({COLORS[name]})", MEANINGS[name]) for name in COLORS]
    + [
        ("solid line", "encoder (bidirectional) run or curve"),
        ("dashed line", "decoder (causal) run or curve"),
        ("dash-dot line", "cross-attention / encoder–decoder run or curve"),
        ("dotted line", "theory or ideal: a formula, not a measurement"),
        ("filled circle", "measured in this run"),
        ("open square", "recorded measurement from figures/data/ (another machine, e.g. a GPU)"),
        ("white → dark violet", "attention weight A_ij from 0 to its largest value"),
        ("hatched grey cell", "masked, M_ij = −∞: the key is hidden from the query"),
        ("cell in a model's colour", "mask figures: the query may attend the key, M_ij = 0"),
        ("outlined cell", "the cell the text talks about"),
        ("rows / columns", "rows are queries i, columns are keys j"),
        ("white → encoder blue", "similarity of small labelled sets (similarity_heatmap), 0 to 1"),
        ("blue → white → red", "cosine similarity of large matrices (similarity_map), −1 to 1"),
        ("light grey / light sky-blue cells", "token grids: segment s_i = 0 / s_i = 1"),
    ]
)

_STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.05,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "grid.color": "#E6E6E6",
    "grid.linewidth": 0.7,
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "axes.prop_cycle": mpl.cycler(
        color=[COLORS["encoder"], COLORS["decoder"], COLORS["cross"], COLORS["library"]]
        + _EXTRA_COLORS
    ),
    "image.interpolation": "nearest",  # one crisp square per attention weight
    "hatch.linewidth": 0.6,
    "hatch.color": _HATCH_COLOR,
    "svg.hashsalt": "encoderlab",  # stable ids inside SVG files: same figure, same bytes
    "svg.fonttype": "path",
    "pdf.fonttype": 42,
}


def use_style() -> None:
    """Set rcParams to the course style (all lessons); calling it again changes nothing."""
    mpl.rcParams.update(_STYLE)


use_style()  # importing the module is enough: figures made before any plotting call match too


def role_of(name: str) -> str | None:
    """The role a series name implies: "causal run" -> "decoder", "bidirectional" -> "encoder", ...

    The first matching rule wins, so "encoder-decoder" is "cross", not "encoder".
    """
    text = str(name).lower()
    rules = [
        ("theory", ("ideal", "theory", "formula", "predicted", "chance")),
        ("cross", ("cross", "encoder-decoder", "encoder–decoder")),
        ("decoder", ("causal", "decoder")),
        ("encoder", ("bidirectional", "encoder", "full")),
        ("padding", ("padding", "[pad]")),
        ("reference", ("reference", "hugging", "transformers")),
        ("library", ("library", "encoderlab")),
    ]
    for role, words in rules:
        if any(word in text for word in words):
            return role
    return None


def style(name: str) -> dict:
    """Line keyword arguments for a series called ``name``: ``ax.plot(x, y, **style("causal"))``."""
    role = role_of(name)
    if role == "theory":
        return {"color": COLORS["reference"], "linestyle": LINESTYLES["theory"], "linewidth": 1.5}
    if role in LINESTYLES:
        return {"color": COLORS[role], "linestyle": LINESTYLES[role]}
    if role in COLORS:
        return {"color": COLORS[role], "linestyle": "-"}
    return {}


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


# --- Helpers ---------------------------------------------------------------------------------


def _as_array(x, dtype=float) -> np.ndarray:
    """A numpy copy of a tensor, array or list (tensors are detached and moved to the CPU)."""
    if hasattr(x, "detach"):  # a torch.Tensor, without importing torch here
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.float()  # bfloat16 has no numpy twin
        x = x.numpy()
    return np.array(x, dtype=dtype)


def _squeeze_to_2d(x: np.ndarray, what: str) -> np.ndarray:
    """Drop leading axes of size 1: (1, 1, n_q, n_kv) -> (n_q, n_kv)."""
    while x.ndim > 2 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 2:
        raise ValueError(
            f"{what} draws one (n_q, n_kv) matrix, got shape {x.shape}. "
            "Pick one batch element and one head first, e.g. weights[0, h]."
        )
    return x


def _new_axes(ax, figsize):
    use_style()
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _split_tokens(tokens, n_q: int, n_kv: int):
    """Query and key labels from ``tokens``: one list for self-attention, or a pair (q, kv)."""
    if tokens is None:
        return None, None
    pair = (
        len(tokens) == 2
        and not isinstance(tokens[0], str)
        and isinstance(tokens[0], Sequence)
        and isinstance(tokens[1], Sequence)
    )
    q_tokens, kv_tokens = (list(tokens[0]), list(tokens[1])) if pair else (list(tokens),) * 2
    if len(q_tokens) != n_q or len(kv_tokens) != n_kv:
        raise ValueError(
            f"tokens must label {n_q} queries and {n_kv} keys, got {len(q_tokens)} and "
            f"{len(kv_tokens)} labels. For cross-attention pass a pair (query_tokens, key_tokens)."
        )
    return q_tokens, kv_tokens


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
        ax.set_xticks(np.arange(-0.5, n_kv, 1.0), minor=True)
        ax.set_yticks(np.arange(-0.5, n_q, 1.0), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8)
        ax.tick_params(which="minor", length=0)
    ax.grid(which="major", visible=False)


def _masked_cells(ax, hidden: np.ndarray) -> PatchCollection | None:
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
        edgecolor=_HATCH_COLOR,
        hatch=MASKED_HATCH,
        linewidth=0.0,
        zorder=1.5,  # above the image, below the cell borders
    )
    cells.set_gid("masked-cells")
    cells.set_label("masked (−∞)")
    ax.add_collection(cells)
    return cells


def _highlight_cells(ax, cells) -> None:
    """Outline the (i, j) cells in the highlight colour, with a dark rim for light cells."""
    for i, j in cells or ():
        outline = Rectangle(
            (j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=COLORS["highlight"],
            linewidth=2.2, zorder=3, gid="highlight",
        )
        outline.set_path_effects([withStroke(linewidth=3.4, foreground="#1A1A1A"), Normal()])
        ax.add_patch(outline)


# --- Attention matrices and masks --------------------------------------------------------------


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
    a = _squeeze_to_2d(_as_array(weights), "attention_map")
    n_q, n_kv = a.shape
    hidden = np.zeros_like(a, dtype=bool)
    if mask is not None:
        m = _as_array(mask, dtype=bool)
        try:
            hidden = ~np.broadcast_to(_squeeze_to_2d(m, "mask") if m.ndim > 2 else m, a.shape)
        except ValueError:
            raise ValueError(
                f"mask of shape {m.shape} does not broadcast to the weights' shape {a.shape}."
            ) from None
    q_tokens, kv_tokens = _split_tokens(tokens, n_q, n_kv)
    figsize = (2.4 + 0.32 * n_kv, 1.6 + 0.32 * n_q) if tokens is not None else (4.4, 3.8)
    ax = _new_axes(ax, figsize=figsize)
    if vmax is None:
        visible = a[~hidden]
        vmax = float(visible.max()) if visible.size and visible.max() > 0 else 1.0
    image = ax.imshow(
        np.ma.masked_array(a, mask=hidden), cmap=ATTENTION_CMAP, vmin=0.0, vmax=vmax,
        aspect="equal",
    )
    _masked_cells(ax, hidden)
    _highlight_cells(ax, highlight)
    _label_cells(ax, n_q, n_kv, q_tokens, kv_tokens)
    if title:
        ax.set_title(title)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
        bar.set_label("attention weight $A_{ij}$")
        bar.outline.set_visible(False)
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
    weights = [_squeeze_to_2d(_as_array(w), "attention_maps") for w in list_of_weights]
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
    fig, axes = plt.subplots(
        1, len(weights), figsize=(side * len(weights) + 1.0, side + 0.4),
        layout="constrained", sharey=True, squeeze=False,
    )
    for k, (ax, w, m, title) in enumerate(zip(axes[0], weights, masks, titles, strict=True)):
        attention_map(w, tokens=tokens, ax=ax, title=title, mask=m, colorbar=False, vmax=vmax)
        if k > 0:
            ax.set_ylabel("")
            ax.tick_params(labelleft=False)
    if colorbar:
        image = axes[0, -1].images[0]
        bar = fig.colorbar(image, ax=list(axes[0]), fraction=0.05 / len(weights), pad=0.02)
        bar.set_label("attention weight $A_{ij}$")
        bar.outline.set_visible(False)
    return fig


def _visible(w: np.ndarray, mask) -> np.ndarray:
    """Cells a mask leaves visible (all cells when there is no mask)."""
    if mask is None:
        return np.ones_like(w, dtype=bool)
    m = _as_array(mask, dtype=bool)
    return np.broadcast_to(_squeeze_to_2d(m, "mask") if m.ndim > 2 else m, w.shape)


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
    m = _as_array(mask, dtype=bool)
    while m.ndim > 2 and m.shape[0] == 1:
        m = m[0]
    if m.ndim == 1:
        m = m[None, :]
    m = _squeeze_to_2d(m, "mask_grid")
    if m.shape[0] == 1:  # a key-side mask: the same row for every query
        m = np.broadcast_to(m, (m.shape[1], m.shape[1]))
    n_q, n_kv = m.shape
    q_tokens, kv_tokens = _split_tokens(tokens, n_q, n_kv)
    color = COLORS.get(role, role)
    ax = _new_axes(ax, figsize=(2.8 + 0.4 * n_kv + (0.6 if tokens else 0), 1.2 + 0.4 * n_q))
    ax.imshow(
        np.ma.masked_array(np.ones(m.shape), mask=~m), cmap=ListedColormap([color]),
        vmin=0, vmax=1, aspect="equal",
    )
    _masked_cells(ax, ~m)
    _label_cells(ax, n_q, n_kv, q_tokens, kv_tokens)
    if annotate is None:
        annotate = max(n_q, n_kv) <= 12
    if annotate:
        for i in range(n_q):
            for j in range(n_kv):
                text = ax.text(
                    j, i, "0" if m[i, j] else "$-\\infty$", ha="center", va="center", fontsize=8,
                    color="white" if m[i, j] else "#333333", zorder=4,
                )
                if not m[i, j]:  # a grey halo keeps "−∞" readable over the hatching
                    text.set_path_effects([withStroke(linewidth=4, foreground=COLORS["masked"])])
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(
            handles=[
                Patch(facecolor=color, label="may attend ($M_{ij}=0$)"),
                Patch(
                    facecolor=COLORS["masked"], edgecolor=_HATCH_COLOR, hatch=MASKED_HATCH,
                    linewidth=0, label="masked ($M_{ij}=-\\infty$)",
                ),
            ],
            loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
        )
    return ax


# --- Curves and measurements -------------------------------------------------------------------


def loss_curves(
    histories: Mapping[str, Sequence[float]],
    ax=None,
    xlabel: str = "step",
    ylabel: str = "loss",
    logy: bool = False,
    styles: Mapping[str, dict] | None = None,
    hlines: Mapping[str, float] | None = None,
    title: str | None = None,
):
    """One line per training run, styled by its name ("causal ..." dashed vermillion, ...).

    (Lesson 3, Figure 2; Lessons 5–8.) ``styles`` overrides keyword arguments per run;
    ``hlines`` draws dotted reference levels, e.g. ``{"chance: log V": 3.47}``. Returns the Axes.
    """
    ax = _new_axes(ax, figsize=(5.6, 3.4))
    extra = iter(_EXTRA_COLORS * 4)
    for name, values in histories.items():
        kwargs = style(name) or {"color": next(extra), "linestyle": "-"}
        kwargs.update((styles or {}).get(name, {}))
        values = _as_array(values)
        ax.plot(np.arange(len(values)), values, label=name, **kwargs)
    for name, level in (hlines or {}).items():
        ax.axhline(level, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
                   linewidth=1.2, label=name)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    if title:
        ax.set_title(title)
    if histories or hlines:  # outside the plot, so it never hides a curve
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


def _field(row, key):
    """``row[key]`` for a dict-like row, ``row.key`` for a dataclass or named tuple."""
    return row[key] if isinstance(row, Mapping) else getattr(row, key)


def timing_bars(
    rows,
    ax=None,
    x: str = "n",
    group: str = "mask",
    value: str = "ms",
    err: str | None = None,
    xlabel: str | None = None,
    ylabel: str = "time (ms)",
    title: str | None = None,
    fmt: str = "{:.3g}",
    logy: bool = False,
):
    """Grouped bars of timings with their values written on top (Lesson 3, Figure 3; Lesson 9).

    ``rows`` are dicts (or objects) with fields ``x`` (one bar group each, e.g. the length n),
    ``group`` (one bar per group member, e.g. "full" / "causal") and ``value`` (the height);
    ``err`` names an optional error-bar field. Returns the Axes.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("timing_bars() needs at least one row, got none.")
    xs = list(dict.fromkeys(_field(r, x) for r in rows))  # in first-seen order
    groups = list(dict.fromkeys(_field(r, group) for r in rows))
    ax = _new_axes(ax, figsize=(max(4.5, 1.1 * len(xs) * len(groups) ** 0.5 + 2), 3.4))
    width = 0.8 / len(groups)
    extra = iter(_EXTRA_COLORS * 4)
    for g_index, g in enumerate(groups):
        by_x = {_field(r, x): r for r in rows if _field(r, group) == g}
        positions = [k + (g_index - (len(groups) - 1) / 2) * width for k, v in enumerate(xs)
                     if v in by_x]
        heights = [float(_field(by_x[v], value)) for v in xs if v in by_x]
        errors = [float(_field(by_x[v], err)) for v in xs if v in by_x] if err else None
        role = role_of(str(g))
        color = COLORS[role] if role in COLORS else next(extra)
        bars = ax.bar(positions, heights, width=width * 0.92, color=color, label=str(g),
                      yerr=errors, error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=7, padding=2)
    ax.set_xticks(range(len(xs)), labels=[str(v) for v in xs])
    ax.set_xlabel(xlabel if xlabel is not None else x)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    else:
        ax.margins(y=0.12)  # room for the value labels
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    ax.legend(title=group if len(groups) > 1 else None)
    return ax


def speedup_vs_ratio(
    ns,
    measured,
    ideal,
    ax=None,
    label: str = "measured",
    ideal_label: str = "ideal",
    recorded: bool = False,
    xlabel: str = "sequence length n",
    ylabel: str = "speedup (×)",
    title: str | None = None,
):
    """Measured speedups (markers) against the ideal (dotted) over n on a log2 axis (Lesson 3, §4).

    ``measured`` is one list of speedups, or a dict {label: speedups} for several devices;
    ``ideal`` is a number (e.g. 2.0) or one value per n. ``recorded=True`` draws open squares
    (numbers read from figures/data/) instead of filled circles. Returns the Axes.
    """
    ns = [int(n) for n in ns]
    ax = _new_axes(ax, figsize=(5.2, 3.4))
    ideal_values = np.broadcast_to(_as_array(ideal), (len(ns),))
    ax.plot(ns, ideal_values, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
            linewidth=1.5, label=ideal_label)
    ax.axhline(1.0, color="#999999", linewidth=0.8, zorder=0)  # 1× = no speedup
    series = measured if isinstance(measured, Mapping) else {label: measured}
    colors = iter([COLORS["library"]] + _EXTRA_COLORS)
    for name, values in series.items():
        color = next(colors)
        marker = MARKERS["recorded"] if recorded else MARKERS["measured"]
        ax.plot(ns, _as_array(values), linestyle="-", linewidth=0.8, color=color, marker=marker,
                markersize=6, markerfacecolor="white" if recorded else color, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, labels=[str(n) for n in ns])
    ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
    ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    if title:
        ax.set_title(title)
    ax.legend()
    return ax


# --- The figure key ----------------------------------------------------------------------------


def figure_key(path=None):
    """Draw the whole visual language in one figure; save it as a PNG at ``path`` if given.

    (The Figure key page; ``python -m encoderlab figures`` writes figures/figure-key.png.)
    Returns the Figure.
    """
    use_style()
    fig = plt.figure(figsize=(9.6, 6.0), layout="constrained")
    grid = fig.add_gridspec(2, 2, width_ratios=[1.25, 1.0], height_ratios=[1.0, 0.95])

    # Colours: a swatch and its meaning per row.
    ax = fig.add_subplot(grid[0, 0])
    ax.set_title("Colours", loc="left", fontweight="bold")
    for row, name in enumerate(COLORS):
        y = -row
        swatch = {"facecolor": COLORS[name], "edgecolor": "none"}
        if name == "masked":
            swatch.update(edgecolor=_HATCH_COLOR, hatch=MASKED_HATCH, linewidth=0)
        ax.add_patch(Rectangle((0, y - 0.35), 0.7, 0.7, **swatch))
        ax.text(1.0, y, name, va="center", fontweight="bold", fontsize=9)
        ax.text(3.3, y, MEANINGS[name].replace("M_ij", "$M_{ij}$"), va="center", fontsize=9)
    _blank(ax, (-0.1, 10.5), (-len(COLORS) + 0.4, 0.6))

    # Line styles and markers: a short sample of each.
    ax = fig.add_subplot(grid[0, 1])
    ax.set_title("Lines and markers", loc="left", fontweight="bold")
    samples = [
        ("encoder (bidirectional)", {"color": COLORS["encoder"], "linestyle": "-"}),
        ("decoder (causal)", {"color": COLORS["decoder"], "linestyle": "--"}),
        ("cross-attention", {"color": COLORS["cross"], "linestyle": "-."}),
        ("theory / ideal", {"color": COLORS["reference"], "linestyle": ":", "linewidth": 1.5}),
        ("measured (this run)", {"color": COLORS["library"], "linestyle": "-", "linewidth": 0.8,
                                 "marker": "o", "markersize": 6}),
        ("recorded (figures/data/)", {"color": COLORS["library"], "linestyle": "-",
                                      "linewidth": 0.8, "marker": "s", "markersize": 6,
                                      "markerfacecolor": "white"}),
    ]
    for row, (text, kwargs) in enumerate(samples):
        y = -row
        xs = [0.0, 0.6, 1.2] if "marker" in kwargs else [0.0, 1.2]
        ax.add_line(Line2D(xs, [y] * len(xs), **{"linewidth": 1.8, **kwargs}))
        ax.text(1.6, y, text, va="center", fontsize=9)
    _blank(ax, (-0.2, 6.0), (-len(samples) + 0.4, 0.6))

    # Attention weights: the colormap, a zero-weight cell and a masked cell.
    ax = fig.add_subplot(grid[1, 0])
    ax.set_title("Attention weights $A_{ij}$", loc="left", fontweight="bold")
    ax.imshow(np.linspace(0, 1, 256)[None, :], cmap=ATTENTION_CMAP, aspect="auto",
              extent=(0, 6, 1.4, 2.2), interpolation="bicubic")
    ax.text(0, 1.15, "0", ha="center", va="top", fontsize=9)
    ax.text(6, 1.15, "largest weight shown", ha="right", va="top", fontsize=9)
    ax.add_patch(Rectangle((0, -0.4), 0.6, 0.6, facecolor="white", edgecolor="#BBBBBB",
                           linewidth=0.8))
    ax.text(0.9, -0.1, "weight 0: allowed, but ignored", va="center", fontsize=9)
    ax.add_patch(Rectangle((0, -1.4), 0.6, 0.6, facecolor=COLORS["masked"],
                           edgecolor=_HATCH_COLOR, hatch=MASKED_HATCH, linewidth=0))
    ax.text(0.9, -1.1, "masked, $M_{ij}=-\\infty$: the key is hidden", va="center", fontsize=9)
    outline = Rectangle((0, -2.4), 0.6, 0.6, fill=False, edgecolor=COLORS["highlight"],
                        linewidth=2.2)
    outline.set_path_effects([withStroke(linewidth=3.4, foreground="#1A1A1A"), Normal()])
    ax.add_patch(outline)
    ax.text(0.9, -2.1, "outlined cell: the one the text talks about", va="center", fontsize=9)
    ax.add_patch(Rectangle((0, -3.4), 0.6, 0.6, facecolor=COLORS["encoder"]))
    ax.text(0.3, -3.1, "0", ha="center", va="center", fontsize=8, color="white")
    ax.text(0.9, -3.1, "mask figures: may attend, $M_{ij}=0$ (in the model's colour)",
            va="center", fontsize=9)
    _blank(ax, (-0.1, 6.6), (-3.6, 2.5))

    # An example in the key's own language: causal attention over a short sentence.
    ax = fig.add_subplot(grid[1, 1])
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


def _blank(ax, xlim, ylim) -> None:
    """An Axes used as a canvas: fixed limits, no ticks, no spines."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()


def key_markdown() -> str:
    """The figure key as a Markdown table, for the Figure key page."""
    lines = ["| mark | meaning |", "|---|---|"]
    lines += [f"| {name} | {meaning} |" for name, meaning in KEY]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m encoderlab figures [PATH]`` writes the figure key (figures/figure-key.png)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv:
        path = Path(argv[0])
    else:
        root = Path(__file__).resolve().parents[4]  # the repository, above lib/encoderlab/course/
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


# --- Lesson 1 ---
# The three families as wiring diagrams, and a heatmap for similarity matrices.

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

__all__ += ["wirings_diagram", "similarity_heatmap", "SIMILARITY_CMAP"]

_BOX_W, _BOX_H = 0.72, 0.46  # a token box, in data units (one token per unit of x)


def _token_row(ax, xs, y, labels, role: str, gid: str) -> None:
    """A row of token boxes in a role's colour, centred at (x, y)."""
    for x, label in zip(xs, labels, strict=True):
        box = FancyBboxPatch(
            (x - _BOX_W / 2, y - _BOX_H / 2), _BOX_W, _BOX_H,
            boxstyle="round,pad=0.0,rounding_size=0.08", facecolor="white",
            edgecolor=COLORS[role], linewidth=1.4, zorder=3, gid=gid,
        )
        ax.add_patch(box)
        ax.text(x, y, label, ha="center", va="center", fontsize=9, zorder=4)


def _edges(ax, pairs, role: str, gid: str, rad: float = 0.0) -> None:
    """Arrows key -> query in the role's colour and line style: ((x0, y0), (x1, y1)) pairs."""
    for start, end in pairs:
        arrow = FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=7, color=COLORS[role],
            linestyle=LINESTYLES[role], linewidth=0.9, alpha=0.8, shrinkA=0, shrinkB=0,
            connectionstyle=f"arc3,rad={rad}", zorder=2, gid=gid,
        )
        ax.add_patch(arrow)


def wirings_diagram(ax=None, n_tokens: int = 4, n_targets: int = 3):
    """The three families as token boxes and attention arrows (Lesson 1, §3; Lesson 10).

    Each arrow runs from a key j (a token in the layer below) to a query i (a token in the layer
    above) that may read it. Encoder-only: every token reads every token (n^2 arrows, solid
    blue). Decoder-only: token i reads tokens j <= i only (n(n+1)/2 arrows, dashed vermillion).
    Encoder–decoder: an encoder block, and a decoder block whose every position also reads every
    encoder output through cross-attention (n_targets * n_tokens arrows, dash-dot green).
    The arrows carry the gids "encoder-self", "decoder-self" and "cross". Returns the Axes.
    """
    for name, value in (("n_tokens", n_tokens), ("n_targets", n_targets)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 8:
            raise ValueError(f"{name} must be an int from 1 to 8 (boxes per row), got {value!r}.")
    ax = _new_axes(ax, figsize=(11.5, 3.9))
    bottom, top = 0.0, 2.0  # the layer below (keys) and the layer above (queries)
    lo, hi = bottom + _BOX_H / 2, top - _BOX_H / 2  # arrows start and end at the box edges
    n, m = n_tokens, n_targets
    xs_in = [f"$x_{{{i + 1}}}$" for i in range(n)]
    hs_out = [f"$h_{{{i + 1}}}$" for i in range(n)]

    def title(x_mid, name, examples, y=top + 0.75):
        ax.text(x_mid, y, name, ha="center", va="bottom", fontsize=11, fontweight="bold")
        ax.text(x_mid, y - 0.08, examples, ha="center", va="top", fontsize=9, color="#555555")

    def note(x_mid, text):
        ax.text(x_mid, bottom - 0.55, text, ha="center", va="top", fontsize=9)

    # 1. Encoder-only: all n^2 key -> query pairs.
    x0 = 0.0
    enc_x = [x0 + i for i in range(n)]
    _edges(ax, [((enc_x[j], lo), (enc_x[i], hi)) for i in range(n) for j in range(n)],
           "encoder", "encoder-self")
    _token_row(ax, enc_x, bottom, xs_in, "encoder", "encoder-token")
    _token_row(ax, enc_x, top, hs_out, "encoder", "encoder-token")
    title(x0 + (n - 1) / 2, "encoder-only", "BERT, RoBERTa, MiniLM")
    note(x0 + (n - 1) / 2, "every token reads every token")

    # 2. Decoder-only: key j -> query i only when j <= i.
    x0 = n + 1.2
    dec_x = [x0 + i for i in range(n)]
    _edges(ax, [((dec_x[j], lo), (dec_x[i], hi)) for i in range(n) for j in range(i + 1)],
           "decoder", "decoder-self")
    _token_row(ax, dec_x, bottom, xs_in, "decoder", "decoder-token")
    _token_row(ax, dec_x, top, hs_out, "decoder", "decoder-token")
    title(x0 + (n - 1) / 2, "decoder-only", "GPT, Llama")
    note(x0 + (n - 1) / 2, "token i reads tokens j ≤ i")

    # 3. Encoder–decoder: the encoder as in 1; the decoder, raised, reads its own past (causal)
    # and every encoder output (cross-attention).
    x0 = 2 * (n + 1.2)
    e_x = [x0 + i for i in range(n)]
    d_x = [x0 + n + 0.2 + i for i in range(m)]
    lift = 2.0  # the decoder block sits higher: it reads the encoder's finished outputs
    _edges(ax, [((e_x[j], lo), (e_x[i], hi)) for i in range(n) for j in range(n)],
           "encoder", "encoder-self")
    _edges(ax, [((d_x[j], lo + lift), (d_x[i], hi + lift)) for i in range(m) for j in range(i + 1)],
           "decoder", "decoder-self")
    # cross-attention: from the top of every encoder output to the bottom of every decoder
    # position (its left half, so that the causal arrows from below keep the middle)
    _edges(ax, [((e_x[j], top + _BOX_H / 2), (d_x[i] - _BOX_W / 4, hi + lift))
                for i in range(m) for j in range(n)], "cross", "cross")
    _token_row(ax, e_x, bottom, xs_in, "encoder", "encoder-token")
    _token_row(ax, e_x, top, hs_out, "encoder", "encoder-token")
    _token_row(ax, d_x, bottom + lift, [f"$y_{{{i + 1}}}$" for i in range(m)], "decoder",
               "decoder-token")
    _token_row(ax, d_x, top + lift, [f"$g_{{{i + 1}}}$" for i in range(m)], "decoder",
               "decoder-token")
    mid = (e_x[0] + d_x[-1]) / 2
    title(mid, "encoder–decoder", "T5, BART", y=top + lift + 0.75)
    note(mid, "the decoder reads every encoder output")

    ax.set_xlim(-0.7, d_x[-1] + 0.7)
    ax.set_ylim(bottom - 1.05, top + lift + 1.25)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.legend(
        handles=[
            Line2D([], [], color=COLORS[r], linestyle=LINESTYLES[r], linewidth=1.6, label=text)
            for r, text in (
                ("encoder", "bidirectional self-attention (encoder)"),
                ("decoder", "causal self-attention (decoder)"),
                ("cross", "cross-attention (decoder reads encoder)"),
            )
        ],
        loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, handlelength=2.6,
    )
    return ax


# Similarities: white (the smallest value shown) to dark encoder blue (1 = the same direction).
SIMILARITY_CMAP = LinearSegmentedColormap.from_list(
    "encoderlab_similarity", ["#FFFFFF", "#B9D6EA", COLORS["encoder"], "#00385A"]
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
    s = _squeeze_to_2d(_as_array(similarity), "similarity_heatmap")
    m = s.shape[0]
    if s.shape != (m, m):
        raise ValueError(f"similarity must be square (m, m), got shape {s.shape}.")
    for name, seq in (("labels", labels), ("groups", groups)):
        if seq is not None and len(seq) != m:
            raise ValueError(f"{name} must have one entry per row: {m} rows, {len(seq)} given.")
    if vmin is None:
        off = s[~np.eye(m, dtype=bool)]
        vmin = float(off.min()) if off.size else 0.0
    ax = _new_axes(ax, figsize=(2.8 + 0.5 * m, 1.6 + 0.5 * m))
    image = ax.imshow(s, cmap=SIMILARITY_CMAP, vmin=vmin, vmax=vmax, aspect="equal")
    ticks = list(labels) if labels is not None else [str(i) for i in range(m)]
    ax.set_xticks(range(m), labels=ticks, rotation=90)
    ax.set_yticks(range(m), labels=ticks)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set_xticks(np.arange(-0.5, m, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, m, 1.0), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8)
    ax.tick_params(which="minor", length=0)
    ax.grid(which="major", visible=False)
    if annotate is None:
        annotate = m <= 12
    if annotate:
        middle = vmin + 0.6 * (vmax - vmin)
        for i in range(m):
            for j in range(m):
                ax.text(j, i, f"{s[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if s[i, j] > middle else "#222222", zorder=4)
    if groups is not None:
        groups = list(groups)
        starts = [0] + [i for i in range(1, m) if groups[i] != groups[i - 1]]
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else m
            if start > 0:  # a line between two groups, across the whole matrix
                ax.axhline(start - 0.5, color=COLORS["reference"], linewidth=1.6, zorder=5)
                ax.axvline(start - 0.5, color=COLORS["reference"], linewidth=1.6, zorder=5)
            ax.text(m - 0.35, (start + end - 1) / 2, str(groups[start]), rotation=-90,
                    ha="left", va="center", fontsize=9, fontweight="bold", zorder=5)
    if title:
        ax.set_title(title)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.08 if groups else 0.03)
        bar.set_label(colorbar_label)
        bar.outline.set_visible(False)
    return ax


# --- Lesson 2 ---
# Similarity matrices (learned position embeddings, later sentence embeddings), their profile
# along the diagonals, and a batch of tokens as a grid with segments and padding.

__all__ += [
    "COSINE_CMAP",
    "SEGMENT_COLORS",
    "similarity_map",
    "diagonal_stats",
    "similarity_by_offset",
    "token_grid",
]

# Cosine similarity on its whole range [-1, 1]: a diverging map, white at 0, red for alike, blue
# for opposite (colour-blind safe; a scale read through its colorbar, not a categorical colour).
# Lesson 1's SIMILARITY_CMAP is the sequential map for small labelled matrices of positive values.
COSINE_CMAP = mpl.colormaps["RdBu_r"]

# Token cells in token_grid: segment s_i = 0 light grey, s_i = 1 a light tint of sky blue;
# [PAD] cells keep the figure key's padding colour, COLORS["padding"].
SEGMENT_COLORS = {0: "#ECECEC", 1: "#C6E4F7"}


def _axis_labels(labels, n_rows: int, n_cols: int, what: str):
    """Row and column labels from one list (a square matrix) or a pair (rows, columns)."""
    if labels is None:
        return None, None
    pair = (
        len(labels) == 2
        and not isinstance(labels[0], str)
        and isinstance(labels[0], Sequence)
        and isinstance(labels[1], Sequence)
    )
    rows, cols = (list(labels[0]), list(labels[1])) if pair else (list(labels),) * 2
    if len(rows) != n_rows or len(cols) != n_cols:
        raise ValueError(
            f"{what}: labels must name {n_rows} rows and {n_cols} columns, got {len(rows)} and "
            f"{len(cols)}. For a rectangular matrix pass a pair (row_labels, column_labels)."
        )
    return rows, cols


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
    c = _squeeze_to_2d(_as_array(matrix), "similarity_map")
    if not vmin < vmax:
        raise ValueError(f"similarity_map needs vmin < vmax, got vmin={vmin}, vmax={vmax}.")
    n_rows, n_cols = c.shape
    row_labels, col_labels = _axis_labels(labels, n_rows, n_cols, "similarity_map")
    big = max(n_rows, n_cols) > 40
    if labels is not None and not big:
        figsize = (2.6 + 0.36 * n_cols, 1.8 + 0.36 * n_rows)
    else:
        figsize = (4.8, 4.0)
    ax = _new_axes(ax, figsize=figsize)
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
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
        bar.set_label(cbar_label)
        bar.outline.set_visible(False)
    return ax


def diagonal_stats(matrix) -> dict[str, np.ndarray]:
    """Mean, min and max of each diagonal C[i, i+k] of a square matrix, k = 0..n-1 (Lesson 2, §5).

    For a similarity matrix of positions, entry k summarises how alike two positions k apart
    are. Returns numpy arrays ``offset``, ``mean``, ``min``, ``max`` (and ``count``, the n-k
    pairs behind each), so a notebook can print the numbers that :func:`similarity_by_offset`
    draws.
    """
    c = _squeeze_to_2d(_as_array(matrix), "diagonal_stats")
    if c.shape[0] != c.shape[1]:
        raise ValueError(
            f"diagonal_stats needs a square matrix (position i against position j), got shape "
            f"{c.shape}."
        )
    n = c.shape[0]
    diagonals = [np.diagonal(c, k) for k in range(n)]
    return {
        "offset": np.arange(n),
        "mean": np.array([d.mean() for d in diagonals]),
        "min": np.array([d.min() for d in diagonals]),
        "max": np.array([d.max() for d in diagonals]),
        "count": np.array([d.size for d in diagonals]),
    }


def similarity_by_offset(
    matrix,
    ax=None,
    max_offset: int | None = None,
    title: str | None = None,
    label: str = "mean over pairs (i, i+k)",
    band: bool = True,
    logx: bool = False,
    xlabel: str = "offset k = j − i",
    ylabel: str = "cosine similarity",
):
    """Similarity against distance: the mean of each diagonal of ``matrix`` (Lesson 2, §5).

    A solid line in the encoder's colour for the mean over all pairs k apart, with a light band
    from the smallest to the largest pair when ``band`` is True, and a grey line at 0. Offsets
    start at k = 1 (k = 0 is each vector with itself). The legend sits in the lower left, which
    suits similarities that start high at small k. Returns the Axes.
    """
    stats = diagonal_stats(matrix)
    n = len(stats["offset"])
    if n < 2:
        raise ValueError("similarity_by_offset needs at least 2 × 2 entries, got a 1 × 1 matrix.")
    last = n - 1 if max_offset is None else int(max_offset)
    if not 1 <= last <= n - 1:
        raise ValueError(f"max_offset must lie in 1..{n - 1} for a {n} × {n} matrix, got {last}.")
    k = slice(1, last + 1)
    ax = _new_axes(ax, figsize=(5.4, 3.4))
    color = COLORS["encoder"]
    if band:
        ax.fill_between(stats["offset"][k], stats["min"][k], stats["max"][k], color=color,
                        alpha=0.16, linewidth=0, label="min to max over pairs")
    ax.plot(stats["offset"][k], stats["mean"][k], color=color, linestyle=LINESTYLES["encoder"],
            linewidth=1.4, label=label)
    ax.axhline(0.0, color="#999999", linewidth=0.8, zorder=0)
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlim(1, last)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    if title:
        ax.set_title(title)
    ax.legend(loc="lower left")  # below the band at small k, where nothing is drawn
    return ax


def _grid_rows(values, n_rows: int, n_cols: int, name: str) -> np.ndarray:
    """A (rows, columns) int array from lists of lists or a tensor, with its shape checked."""
    rows = _as_array(values, dtype=float)
    if rows.ndim == 1:
        rows = rows[None, :]
    if rows.shape != (n_rows, n_cols):
        raise ValueError(
            f"token_grid: {name} must have one value per token, shape {(n_rows, n_cols)}, got "
            f"{rows.shape}."
        )
    return rows.astype(int)


def token_grid(
    tokens,
    segments=None,
    attention_mask=None,
    ax=None,
    title: str | None = None,
    row_labels: Sequence[str] | None = None,
    legend: bool = True,
):
    """A batch of token sequences as a grid: rows = texts, columns = positions i (Lesson 2, §7).

    Each cell shows its token, coloured by its segment id s_i (``SEGMENT_COLORS``); a cell whose
    ``attention_mask`` is 0 is padding, drawn in the figure key's padding colour (without an
    ``attention_mask``, cells reading "[PAD]" are). ``tokens`` is one list of str or a list of
    equally long lists (pad the batch first); ``segments`` and ``attention_mask`` are lists or
    tensors of the same shape. Returns the Axes.
    """
    if tokens and isinstance(tokens[0], str):
        tokens = [tokens]
    rows = [list(row) for row in tokens]
    if not rows or not rows[0]:
        raise ValueError("token_grid needs at least one token, got none.")
    lengths = sorted({len(row) for row in rows})
    if len(lengths) > 1:
        raise ValueError(
            f"token_grid needs rows of equal length, got lengths {lengths[0]} to {lengths[-1]}. "
            "Pad the batch first (tokenizer(..., padding=True)) and pass the padded tokens."
        )
    n_rows, n_cols = len(rows), lengths[0]
    seg = (np.zeros((n_rows, n_cols), dtype=int) if segments is None
           else _grid_rows(segments, n_rows, n_cols, "segments"))
    if attention_mask is None:
        pad = np.array([[token == "[PAD]" for token in row] for row in rows])
    else:
        pad = _grid_rows(attention_mask, n_rows, n_cols, "attention_mask") == 0
    if not set(np.unique(seg)) <= set(SEGMENT_COLORS):
        raise ValueError(f"segment ids must be 0 or 1, got {sorted(set(np.unique(seg)))}.")
    if row_labels is not None and len(row_labels) != n_rows:
        raise ValueError(f"row_labels must name {n_rows} rows, got {len(row_labels)}.")
    longest = max(len(token) for row in rows for token in row)
    width = max(0.55, 0.075 * longest + 0.15)  # inches per column: the longest token must fit
    ax = _new_axes(ax, figsize=(1.4 + width * n_cols, 0.9 + 0.5 * n_rows))
    for r, row in enumerate(rows):
        for i, token in enumerate(row):
            face = COLORS["padding"] if pad[r, i] else SEGMENT_COLORS[int(seg[r, i])]
            ax.add_patch(Rectangle((i - 0.5, r - 0.5), 1, 1, facecolor=face, edgecolor="white",
                                   linewidth=1.5, gid="padding" if pad[r, i] else "token"))
            ax.text(i, r, token, ha="center", va="center", fontsize=9,
                    color="white" if pad[r, i] else "#1A1A1A")
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)  # the first text on top
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xticks(range(n_cols))
    ax.set_xlabel("position i")
    ax.set_yticks(range(n_rows), labels=row_labels or [f"text {r}" for r in range(n_rows)])
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    if title:
        ax.set_title(title, pad=22)
    if legend:
        handles = [Patch(facecolor=SEGMENT_COLORS[s], label=f"segment $s_i={s}$")
                   for s in sorted(set(np.unique(seg[~pad])) | {0})]
        if pad.any():
            handles.append(Patch(facecolor=COLORS["padding"], label="[PAD], attention_mask 0"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02),
                  ncol=len(handles), borderaxespad=0.0)
    return ax


# --- Lesson 4 ---
# Inside the stack: every head of one layer, a (layer x head) table of numbers, the parameter
# count by part, the residual stream's norms by depth, and measured curves by depth.

__all__ += ["attention_heads", "layer_head_map", "parameter_bars", "norms_by_layer",
            "depth_curves"]


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
    a = _as_array(weights)
    while a.ndim > 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 3:
        raise ValueError(
            f"attention_heads draws one layer's heads, shape (h, n, n), got {a.shape}. "
            "Pick one layer and one batch element first, e.g. out.attentions[2][0]."
        )
    h, n_q, n_kv = a.shape
    if titles is not None and len(titles) != h:
        raise ValueError(f"got {h} heads but {len(titles)} titles; give one per head.")
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}.")
    ncols = min(ncols, h)
    nrows = -(-h // ncols)
    vmax = float(a.max()) if vmax is None else vmax
    use_style()
    side = max(1.9, 0.2 * max(n_q, n_kv) + 0.5)
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
    bar = fig.colorbar(axes.flat[0].images[0], ax=list(axes.flat), fraction=0.03, pad=0.02)
    bar.set_label("attention weight $A_{ij}$")
    bar.outline.set_visible(False)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


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
    v = _as_array(values)
    if v.ndim != 2:
        raise ValueError(
            f"layer_head_map draws a (layers, heads) table, got shape {v.shape}."
        )
    L, h = v.shape
    ax = _new_axes(ax, figsize=(0.55 * h + 1.6, 0.45 * L + 1.0))
    vmax = float(np.nanmax(v)) if vmax is None else vmax
    image = ax.imshow(v, cmap=ATTENTION_CMAP, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(h), labels=[str(k + 1) for k in range(h)])
    ax.set_yticks(range(L), labels=[str(l + 1) for l in range(L)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set_xticks(np.arange(-0.5, h, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, L, 1.0), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8)
    ax.tick_params(which="minor", length=0)
    if annotate:
        for l in range(L):
            for k in range(h):
                dark = v[l, k] > 0.55 * vmax
                ax.text(k, l, fmt.format(v[l, k]), ha="center", va="center", fontsize=7,
                        color="white" if dark else "#1A1A1A", gid="value")
    if title:
        ax.set_title(title)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
        bar.set_label(label)
        bar.outline.set_visible(False)
    return ax


def parameter_bars(
    breakdowns: Mapping[str, Mapping[str, int]],
    ax=None,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
):
    """Each model's parameters by part, as shares of its total, side by side (Lesson 4, §5).

    ``breakdowns`` maps a model's name to its parts (``inspect_stack.parameter_breakdown``); a
    part a model lacks counts as 0. Each bar is labelled with its share and its count.
    Returns the Axes.
    """
    if not breakdowns:
        raise ValueError("parameter_bars() needs at least one model's breakdown, got none.")
    models = list(breakdowns)
    parts = list(dict.fromkeys(p for b in breakdowns.values() for p in b))
    totals = {m: sum(breakdowns[m].values()) for m in models}
    if any(t <= 0 for t in totals.values()):
        raise ValueError(f"every breakdown needs a positive total, got {totals}.")
    ax = _new_axes(ax, figsize=(7.6, 0.36 * len(parts) * max(1, len(models)) ** 0.5 + 1.2))
    default = [COLORS["encoder"], _EXTRA_COLORS[0], _EXTRA_COLORS[3], _EXTRA_COLORS[2]]
    height = 0.8 / len(models)
    for k, model in enumerate(models):
        shares = [100 * breakdowns[model].get(p, 0) / totals[model] for p in parts]
        counts = [breakdowns[model].get(p, 0) for p in parts]
        ys = [i + (k - (len(models) - 1) / 2) * height for i in range(len(parts))]
        color = (colors or {}).get(model, default[k % len(default)])
        bars = ax.barh(ys, shares, height=height * 0.9, color=color,
                       label=f"{model}: {totals[model]:,} parameters")
        labels = [f"{s:.1f}% · {_short_count(c)}" if c else "—" for s, c in zip(shares, counts)]
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_yticks(range(len(parts)), labels=parts)
    ax.invert_yaxis()  # the first part on top, as in the table
    ax.set_xlabel("share of the model's parameters (%)")
    ax.set_xlim(0, 100)
    ax.grid(axis="x")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    ax.legend(loc="lower right")
    return ax


def _short_count(count: int) -> str:
    """1234567 -> '1.23M', 98304 -> '98.3k', 768 -> '768'."""
    if count >= 1e6:
        return f"{count / 1e6:.2f}M"
    if count >= 1e3:
        return f"{count / 1e3:.1f}k"
    return str(count)


def norms_by_layer(
    norms,
    ax=None,
    marks: Mapping[str, Sequence[float]] | None = None,
    title: str | None = None,
    ylabel: str = "norm of the token vector $\\|h_i^{(l)}\\|$",
):
    """The distribution of token-vector norms at each depth, as box plots (Lesson 4, §6).

    ``norms`` has shape (L + 1, number of tokens) (``inspect_stack.residual_norms``): column 0
    of the x axis is H^(0), the embeddings. ``marks`` adds one line per named group (e.g. the mean
    norm of the [CLS] tokens), each with L + 1 values. Returns the Axes.
    """
    v = _as_array(norms)
    if v.ndim != 2 or v.shape[0] < 1:
        raise ValueError(
            f"norms_by_layer needs a (depths, tokens) array, got shape {v.shape}: pass "
            "inspect_stack.residual_norms(out.hidden_states, attention_mask)."
        )
    depths = v.shape[0]
    ax = _new_axes(ax, figsize=(6.0, 3.6))
    ax.boxplot(
        list(v), positions=range(depths), widths=0.5, patch_artist=True,
        medianprops={"color": COLORS["reference"], "linewidth": 1.2},
        boxprops={"facecolor": "#DCE9F5", "edgecolor": COLORS["encoder"]},
        whiskerprops={"color": COLORS["encoder"]}, capprops={"color": COLORS["encoder"]},
        flierprops={"marker": ".", "markersize": 3, "markeredgecolor": "#999999"},
    )
    # colours without a role of their own: [CLS] in sky blue, [SEP] in grey, as in §6's figures
    colors = iter([_EXTRA_COLORS[0], _EXTRA_COLORS[3], _EXTRA_COLORS[2], _EXTRA_COLORS[1]])
    markers = iter(["D", "^", "v", "P"])
    for name, values in (marks or {}).items():
        values = _as_array(values)
        if values.shape != (depths,):
            raise ValueError(
                f"marks[{name!r}] needs one value per depth, shape ({depths},), got {values.shape}."
            )
        ax.plot(range(depths), values, linestyle="-", linewidth=1.0, marker=next(markers),
                markersize=5, color=next(colors), label=name)
    ax.set_xticks(range(depths), labels=["$H^{(0)}$"] + [str(l) for l in range(1, depths)])
    ax.set_xlabel("depth: embeddings, then after block l")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    if marks:
        ax.legend(loc="lower right")
    return ax


def _plain_log_labels(ax) -> None:
    """Log-scale y labels as plain numbers (0.2, not 2 x 10^-1); on short ranges some minor
    ticks are labelled too: 2, 3, 4, 5, 6, 8 x 10^k within one decade, 2, 3, 5 within 1.5."""

    def major(v, _):
        return f"{v:g}"

    def minor(v, _):
        low, high = ax.get_ylim()
        if v <= 0 or low <= 0 or high / low > 10**1.5:
            return ""
        leading = round(v / 10 ** np.floor(np.log10(v)))
        shown = (2, 3, 4, 5, 6, 8) if high / low <= 10 else (2, 3, 5)
        return f"{v:g}" if leading in shown else ""

    ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(major))
    ax.yaxis.set_minor_formatter(mpl.ticker.FuncFormatter(minor))


def depth_curves(
    series: Mapping[str, Sequence[float]],
    x=None,
    ax=None,
    xlabel: str = "layer l",
    ylabel: str = "",
    styles: Mapping[str, dict] | None = None,
    hlines: Mapping[str, float] | None = None,
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
    legend: str | None = "best",
):
    """Measured values by depth (or by number of layers), one line with markers per series.

    (Lesson 4, §6–§7.) A series whose name says "theory", "ideal" or "formula" is drawn dotted
    black without markers, as the figure key asks; ``styles`` overrides keyword arguments per
    series; ``hlines`` draws dotted reference levels. ``x`` defaults to 1, 2, ... Returns the Axes.
    """
    if not series:
        raise ValueError("depth_curves() needs at least one series, got none.")
    ax = _new_axes(ax, figsize=(5.4, 3.4))
    extra = iter(_EXTRA_COLORS * 4)
    for name, values in series.items():
        values = _as_array(values)
        xs = np.arange(1, len(values) + 1) if x is None else _as_array(x)
        if xs.shape != values.shape:
            raise ValueError(
                f"series {name!r} has {values.shape[0]} values but x has {xs.shape[0]}."
            )
        kwargs = style(name)
        if role_of(name) != "theory":
            kwargs = {"color": next(extra), "linestyle": "-", **kwargs}
            kwargs.update(marker=MARKERS["measured"], markersize=5)
        kwargs.update((styles or {}).get(name, {}))
        ax.plot(xs, values, label=name, **kwargs)
    for name, level in (hlines or {}).items():
        ax.axhline(level, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
                   linewidth=1.2, label=name)
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
    if x is not None:
        ax.set_xticks(_as_array(x))
    else:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
    if logy:
        ax.set_yscale("log")
        _plain_log_labels(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(loc=legend)
    return ax


# --- Lesson 9 ---
# Tile plans of masks (Lesson 9, Figure 2): the mask's cells with the tile boundaries of a tiled
# attention kernel drawn over them, and the tiles it computes outlined.

__all__ += ["tile_grid"]


def tile_grid(mask, block_size: int, ax=None, title: str | None = None, role: str = "encoder"):
    """A (n, n) boolean mask drawn as :func:`mask_grid`, with the tiles of ``block_size`` over it
    (Lesson 9, §3–4). Computed tiles get a dark outline, skipped ones (every cell masked) a thin
    grey one; the title ends with "k/T² tiles". Returns the Axes.
    """
    import torch

    from encoderlab.tiled import SKIP, classify_tiles

    m = torch.as_tensor(_as_array(mask, dtype=bool))
    m = _squeeze_to_2d(m.numpy(), "tile_grid")
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
                ax.add_patch(Rectangle(corner, w, h, fill=False, edgecolor="#9A9A9A",
                                       linewidth=0.5, zorder=3))
            else:
                computed.append(Rectangle(corner, w, h))
    ax.add_collection(PatchCollection(computed, facecolor="none", edgecolor="#222222",
                                      linewidth=1.0, zorder=3.5))
    label = f"{len(computed)}/{states.size} tiles"
    ax.set_title(f"{title}\n{label}" if title else label)
    return ax


# --- Lesson 9 (GPU) ---
# A GPU run of the causal skip (Lesson 3, §4; Lesson 9, §8): full / causal time of torch's SDPA
# and of the course's Triton kernel against the tile-count ratio, from bench's GPU rows.

__all__ += ["gpu_speedups"]


def gpu_speedups(record, ax=None, recorded: bool = True):
    """One GPU run's speedups full / causal, SDPA and the Triton kernel, over n (Lesson 9, §8).

    ``record`` is a dict of :func:`encoderlab.course.bench.gpu_attention_record` (this run,
    ``recorded=False``: filled circles) or of :func:`encoderlab.course.bench.recorded_gpu_results`
    (``recorded=True``: open squares). The dotted line is the tile-count ratio 2T/(T+1);
    the title names the device and the date. Returns the Axes.
    """
    rows = record["rows"]
    return speedup_vs_ratio(
        [row["n"] for row in rows],
        {"SDPA, is_causal": [row["sdpa_speedup"] for row in rows],
         "Triton kernel, tiles skipped": [row["triton_speedup"] for row in rows]},
        ideal=[row["tile_ratio"] for row in rows],
        ideal_label=f"ideal: tiles 2T/(T+1), block {record.get('block', 64)}",
        ax=ax,
        recorded=recorded,
        ylabel="time full / time causal",
        title=f"{record['device']}, {record.get('dtype', 'float16')} ({record['date']})",
    )


# --- Lesson 7 ---
# Fine-tuning's figures: learning curves of several runs (held-out score against steps), a
# confusion matrix, BIO tags on a sentence (gold against predicted), and the start / end
# probabilities of a span extractor over the context.

__all__ += ["learning_curves", "confusion_heatmap", "tag_grid", "span_probabilities",
            "ENTITY_COLORS"]

ENTITY_COLORS = {"PER": "#E69F00", "LOC": "#009E73", "DATE": "#56B4E9", "O": "#F2F2F2"}


def learning_curves(
    curves: Mapping[str, tuple],
    ax=None,
    xlabel: str = "training step",
    ylabel: str = "held-out accuracy (%)",
    styles: Mapping[str, dict] | None = None,
    hlines: Mapping[str, float] | None = None,
    title: str | None = None,
    legend: str | None = "lower right",
):
    """Held-out score against training steps, one line with markers per run (Lesson 7, §3).

    ``curves`` maps a run's name to ``(steps, values)``; runs may be measured at different
    steps. ``hlines`` draws dotted reference levels, e.g. ``{"chance": 25}``. Returns the Axes.
    """
    if not curves:
        raise ValueError("learning_curves() needs at least one run, got none.")
    ax = _new_axes(ax, figsize=(6.0, 3.6))
    extra = iter([COLORS["encoder"], COLORS["library"], *_EXTRA_COLORS] * 2)
    for name, pair in curves.items():
        if len(pair) != 2:
            raise ValueError(f"curve {name!r} must be a pair (steps, values), got "
                             f"{len(pair)} items.")
        xs, ys = _as_array(pair[0]), _as_array(pair[1])
        if xs.shape != ys.shape:
            raise ValueError(f"curve {name!r} has {xs.size} steps but {ys.size} values.")
        kwargs = {"color": next(extra), "linestyle": "-", "marker": MARKERS["measured"],
                  "markersize": 4}
        kwargs.update((styles or {}).get(name, {}))
        ax.plot(xs, ys, label=name, **kwargs)
    for name, level in (hlines or {}).items():
        ax.axhline(level, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
                   linewidth=1.2, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(loc=legend)
    return ax


def confusion_heatmap(matrix, labels: Sequence[str], ax=None, title: str | None = None,
                      colorbar: bool = False):
    """A confusion matrix: rows = gold class, columns = predicted class, counts in the cells.

    (Lesson 7, §3.) Cells are shaded by the fraction of their row (white 0 to encoder blue 1),
    so each row reads as "where the examples of this class went". Returns the Axes.
    """
    m = _as_array(matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"confusion_heatmap draws a square (C, C) matrix, got shape {m.shape}.")
    if len(labels) != m.shape[0]:
        raise ValueError(f"labels must name the {m.shape[0]} classes, got {len(labels)}.")
    rows = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    ax = _new_axes(ax, figsize=(1.6 + 1.0 * len(labels), 1.2 + 0.8 * len(labels)))
    cmap = LinearSegmentedColormap.from_list("encoderlab_confusion",
                                             ["#FFFFFF", COLORS["encoder"]])
    image = ax.imshow(rows, cmap=cmap, vmin=0.0, vmax=1.0)
    for g in range(m.shape[0]):
        for p in range(m.shape[1]):
            ax.text(p, g, f"{int(m[g, p])}", ha="center", va="center", fontsize=10,
                    color="white" if rows[g, p] > 0.55 else "#1A1A1A", gid="count")
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


def _entity_type(tag: str) -> str:
    return "O" if tag == "O" else tag[2:]


def tag_grid(words: Sequence[str], rows: Mapping[str, Sequence[str]], ax=None,
             title: str | None = None):
    """BIO tags of one sentence, one row per tagging (e.g. gold, predicted) (Lesson 7, §4).

    Each cell holds a word and its tag, coloured by entity type (``ENTITY_COLORS``); a thick
    dark bar marks where an entity begins (a B- tag). In every row after the first, a cell
    whose tag differs from the first row's is outlined in the highlight colour. Returns the Axes.
    """
    words = list(words)
    names = list(rows)
    if not names:
        raise ValueError("tag_grid needs at least one row of tags, got none.")
    for name in names:
        if len(rows[name]) != len(words):
            raise ValueError(f"row {name!r} has {len(rows[name])} tags for {len(words)} words.")
    width = max(0.62, 0.085 * max(max(len(w) for w in words), 6) + 0.1)
    ax = _new_axes(ax, figsize=(1.6 + width * len(words), 0.7 + 0.75 * len(names)))
    reference = list(rows[names[0]])
    for r, name in enumerate(names):
        for i, (word, tag) in enumerate(zip(words, rows[name])):
            kind = _entity_type(tag)
            ax.add_patch(Rectangle((i - 0.5, r - 0.5), 1, 1, edgecolor="white", linewidth=1.5,
                                   facecolor=ENTITY_COLORS.get(kind, _EXTRA_COLORS[1]),
                                   gid=f"tag-{tag}"))
            if tag.startswith("B-"):
                ax.add_patch(Rectangle((i - 0.5, r - 0.46), 0.09, 0.92, facecolor="#1A1A1A",
                                       linewidth=0, gid="begin"))
            ax.text(i, r - 0.12, word, ha="center", va="center", fontsize=9, color="#1A1A1A")
            ax.text(i, r + 0.24, tag, ha="center", va="center", fontsize=7, color="#3A3A3A")
            if r > 0 and tag != reference[i]:
                _highlight_cells(ax, [(r, i)])
    ax.set_xlim(-0.5, len(words) - 0.5)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks(range(len(names)), labels=names)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    kinds = sorted({_entity_type(t) for name in names for t in rows[name]} - {"O"})
    handles = [Patch(facecolor=ENTITY_COLORS.get(k, _EXTRA_COLORS[1]), label=k) for k in kinds]
    handles.append(Patch(facecolor="white", edgecolor=COLORS["highlight"], linewidth=2,
                         label="differs from the first row"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02),
              ncol=len(handles), borderaxespad=0.0)
    if title:
        ax.set_title(title)
    return ax


def span_probabilities(tokens: Sequence[str], p_start, p_end, gold: tuple[int, int],
                       predicted: tuple[int, int] | None = None, ax=None,
                       title: str | None = None):
    """P(start = i) above the axis and P(end = i) below it, for the context tokens (Lesson 7, §5).

    ``gold`` and ``predicted`` are (start, end) token indices into ``tokens``, end inclusive;
    the gold span is shaded, the predicted one outlined. Returns the Axes.
    """
    tokens = list(tokens)
    p_start, p_end = _as_array(p_start), _as_array(p_end)
    if p_start.shape != (len(tokens),) or p_end.shape != (len(tokens),):
        raise ValueError(f"p_start and p_end need one probability per token ({len(tokens)}), got "
                         f"shapes {p_start.shape} and {p_end.shape}.")
    ax = _new_axes(ax, figsize=(max(6.0, 0.36 * len(tokens) + 1.2), 3.6))
    xs = np.arange(len(tokens))
    ax.axvspan(gold[0] - 0.5, gold[1] + 0.5, color=COLORS["cross"], alpha=0.15, linewidth=0,
               label="gold answer")
    ax.bar(xs, p_start, width=0.7, color=COLORS["encoder"], label="P(start = i)")
    ax.bar(xs, -p_end, width=0.7, color=COLORS["library"], label="P(end = i)")
    if predicted is not None:
        ax.add_patch(Rectangle((predicted[0] - 0.5, -1.05), predicted[1] - predicted[0] + 1,
                               2.1, fill=False, edgecolor="#1A1A1A", linestyle="-",
                               linewidth=1.4, label="predicted span", gid="predicted"))
    ax.axhline(0, color="#1A1A1A", linewidth=0.8)
    ax.set_ylim(-1.1, 1.1)
    ax.set_yticks([-1, -0.5, 0, 0.5, 1], labels=["1", "0.5", "0", "0.5", "1"])
    ax.set_ylabel("P(end)      P(start)")
    ax.set_xticks(xs, labels=tokens, rotation=90)
    ax.set_xlim(-0.6, len(tokens) - 0.4)
    ax.tick_params(axis="x", length=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    if title:
        ax.set_title(title)
    return ax


# --- Lesson 6 ---
# Pretraining recipes: one sentence under each corruption (a grid of tokens coloured by what
# happened to them), labelled bars (signal per token, probe accuracies), and a metric against
# training compute.

__all__ += ["CORRUPTION_COLORS", "corruption_grid", "labelled_bars", "metric_vs_compute"]

# What happened to a token, and whether its position carries loss (Lesson 6).
CORRUPTION_COLORS = {
    "plain": ("#F4F4F4", "no loss"),
    "mask": (COLORS["encoder"], "[MASK], scored"),
    "random": (COLORS["library"], "random token, scored"),
    "kept": (COLORS["highlight"], "unchanged, scored"),
    "replaced": (COLORS["decoder"], "replaced by the generator, label 1"),
    "original": ("#BFE3D3", "original, label 0 (scored)"),
}


def corruption_grid(
    rows,
    kinds,
    row_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    legend: bool = True,
):
    """One sentence under several corruptions: rows = recipes, columns = positions (Lesson 6).

    ``rows`` are lists of token strings (what the model reads), ``kinds`` the same shape of
    keys of :data:`CORRUPTION_COLORS` ("plain", "mask", "random", "kept", "replaced",
    "original"): each cell is coloured by what happened to its token. Rows may differ in
    length (shorter rows end early). Returns the Axes.
    """
    rows = [list(r) for r in rows]
    kinds = [list(k) for k in kinds]
    if not rows or len(rows) != len(kinds):
        raise ValueError(f"corruption_grid needs one kinds row per tokens row, got {len(rows)} "
                         f"and {len(kinds)}.")
    for r, (toks, ks) in enumerate(zip(rows, kinds)):
        if len(toks) != len(ks):
            raise ValueError(f"row {r}: {len(toks)} tokens but {len(ks)} kinds; give one kind "
                             "per token.")
        unknown = sorted(set(ks) - set(CORRUPTION_COLORS))
        if unknown:
            raise ValueError(f"row {r}: unknown kinds {unknown}; use {list(CORRUPTION_COLORS)}.")
    if row_labels is not None and len(row_labels) != len(rows):
        raise ValueError(f"row_labels must name {len(rows)} rows, got {len(row_labels)}.")
    n_cols = max(len(r) for r in rows)
    longest = max(len(t) for r in rows for t in r)
    width = max(0.5, 0.07 * longest + 0.15)
    ax = _new_axes(ax, figsize=(2.2 + width * n_cols, 0.9 + 0.42 * len(rows)))
    dark = {"mask", "replaced"}
    for r, (toks, ks) in enumerate(zip(rows, kinds)):
        for i, (token, kind) in enumerate(zip(toks, ks)):
            face = CORRUPTION_COLORS[kind][0]
            ax.add_patch(Rectangle((i - 0.5, r - 0.5), 1, 1, facecolor=face, edgecolor="white",
                                   linewidth=1.5, gid=kind))
            ax.text(i, r, token, ha="center", va="center", fontsize=8,
                    color="white" if kind in dark else "#1A1A1A")
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.xaxis.tick_top()
    ax.set_xticks(range(n_cols))
    ax.set_yticks(range(len(rows)), labels=row_labels or [f"row {r}" for r in range(len(rows))])
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    if title:
        ax.set_title(title, pad=18)
    if legend:
        used = [k for k in CORRUPTION_COLORS if any(k in ks for ks in kinds)]
        handles = [Patch(facecolor=CORRUPTION_COLORS[k][0], edgecolor="#BBBBBB", linewidth=0.5,
                         label=CORRUPTION_COLORS[k][1]) for k in used]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02),
                  ncol=min(len(handles), 3), borderaxespad=0.0)
    return ax


def labelled_bars(
    values: Mapping[str, float],
    ax=None,
    xlabel: str = "",
    fmt: str = "{:.2f}",
    colors: Mapping[str, str] | None = None,
    lines: Mapping[str, float] | None = None,
    xlim: tuple[float, float] | None = None,
    title: str | None = None,
):
    """Horizontal bars, one per name, each labelled with its value (Lesson 6, Figures 3 and 5).

    ``colors`` picks a bar's colour by name (default: the encoder's blue); ``lines`` draws
    dotted vertical reference levels, e.g. ``{"chance": 0.5}``. Returns the Axes.
    """
    if not values:
        raise ValueError("labelled_bars() needs at least one value, got none.")
    names = list(values)
    heights = [float(values[k]) for k in names]
    ax = _new_axes(ax, figsize=(6.4, 0.45 * len(names) + 1.0))
    face = [(colors or {}).get(k, COLORS["encoder"]) for k in names]
    bars = ax.barh(range(len(names)), heights, color=face, height=0.62)
    ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=8, padding=3)
    for label, level in (lines or {}).items():
        ax.axvline(level, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
                   linewidth=1.2, label=label)
    ax.set_yticks(range(len(names)), labels=names)
    ax.invert_yaxis()  # the first name on top
    ax.set_xlabel(xlabel)
    if xlim is not None:
        ax.set_xlim(*xlim)
    else:
        ax.set_xlim(0, max(heights) * 1.18 if max(heights) > 0 else 1)
    ax.grid(axis="x")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    if lines:
        ax.legend(loc="lower right")
    return ax


def metric_vs_compute(
    series: Mapping[str, tuple],
    ax=None,
    xlabel: str = "training compute (PFLOP)",
    ylabel: str = "held-out probe accuracy",
    hlines: Mapping[str, float] | None = None,
    styles: Mapping[str, dict] | None = None,
    title: str | None = None,
):
    """A measured metric against training compute, one line of markers per run (Lesson 6, §6).

    ``series`` maps a run's name to ``(x, y)`` sequences (e.g. cumulative FLOPs and probe
    accuracy at each probe); ``hlines`` draws dotted reference levels. Returns the Axes.
    """
    if not series:
        raise ValueError("metric_vs_compute() needs at least one series, got none.")
    ax = _new_axes(ax, figsize=(5.6, 3.4))
    extra = iter(_EXTRA_COLORS * 4)
    for name, (xs, ys) in series.items():
        kwargs = style(name) or {"color": next(extra), "linestyle": "-"}
        kwargs.update({"marker": MARKERS["measured"]})
        kwargs.update((styles or {}).get(name, {}))
        ax.plot(_as_array(xs), _as_array(ys), label=name, **kwargs)
    for name, level in (hlines or {}).items():
        ax.axhline(level, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
                   linewidth=1.2, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    if title:
        ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


# --- Lesson 8 ---
# Retrieval figures: recall by method as grouped bars, and a query × document score map with the
# known answers outlined and each query's top document marked.

__all__ += ["recall_bars", "retrieval_heatmap"]

# One colour per cut-off k: the encoder's blue for the strict recall@1, sky blue for looser ones.
_RECALL_COLORS = [COLORS["encoder"], COLORS["highlight"], "#B9D6EA", "#999999"]


def recall_bars(
    results: Mapping[str, Mapping[str, float]],
    ax=None,
    title: str | None = None,
    ylabel: str = "share of queries",
    ylim: tuple[float, float] = (0.0, 1.0),
    legend: str | None = "upper right",
):
    """Grouped bars: one group per method (``results``' keys), one bar per metric (Lesson 8, §3).

    ``results`` maps a method to its metrics, e.g. ``{"mean": {"recall@1": 0.59, "recall@5":
    0.82}, ...}``; every method must have the same metrics. Each bar has its value written on it
    (gid "value"). Returns the Axes.
    """
    if not results:
        raise ValueError("recall_bars() needs at least one method, got none.")
    metrics = list(next(iter(results.values())))
    for method, values in results.items():
        if list(values) != metrics:
            raise ValueError(
                f"every method needs the same metrics {metrics}; {method!r} has {list(values)}."
            )
    ax = _new_axes(ax, figsize=(1.2 + 1.15 * len(results), 3.3))
    width = 0.8 / len(metrics)
    centres = np.arange(len(results))
    for k, metric in enumerate(metrics):
        xs = centres - 0.4 + width * (k + 0.5)
        values = [float(v[metric]) for v in results.values()]
        color = _RECALL_COLORS[k % len(_RECALL_COLORS)]
        ax.bar(xs, values, width=width * 0.92, color=color, label=metric, zorder=2)
        for x, v in zip(xs, values):
            ax.text(x, v + 0.015 * (ylim[1] - ylim[0]), f"{v:.2f}", ha="center", va="bottom",
                    fontsize=8, gid="value")
    ax.set_xticks(centres, labels=list(results))
    ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(loc=legend, ncols=len(metrics))
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
    s = _squeeze_to_2d(_as_array(scores), "retrieval_heatmap")
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
    ax = _new_axes(ax, figsize=(2.8 + 0.3 * n_d, 1.4 + 0.3 * n_q))
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
    ax.scatter(best, np.arange(n_q), s=14, color=COLORS["library"], edgecolors="#222222",
               linewidths=0.6, zorder=5, gid="top1")
    if title:
        ax.set_title(title)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
        bar.set_label(colorbar_label)
        bar.outline.set_visible(False)
    return ax


# --- Lesson 5 ---
# Masked language modelling: measured shares against their targets, the k most probable tokens
# for a hidden position, and grouped accuracy bars for several models on several blank sets.

__all__ += ["target_bars", "top_k_bars", "accuracy_bars"]


def target_bars(
    measured: Mapping[str, float],
    targets: Mapping[str, float],
    ax=None,
    ylabel: str = "share",
    title: str | None = None,
    fmt: str = "{:.3f}",
    role: str = "library",
):
    """Measured shares as bars, each with its target as a dotted black bar top (Lesson 5, §1).

    ``measured`` and ``targets`` map the same names (e.g. ``"[MASK]"``, ``"random"``,
    ``"unchanged"``) to numbers; each bar is labelled with its value, and the target with a
    dotted line across the bar. ``role`` picks the bars' colour. Returns the Axes.
    """
    names = list(measured)
    if not names:
        raise ValueError("target_bars() needs at least one measured value, got none.")
    missing = [name for name in names if name not in targets]
    if missing:
        raise ValueError(f"targets has no value for {missing}; give one target per bar.")
    if role not in COLORS:
        raise ValueError(f"role must be one of {list(COLORS)}, got {role!r}.")
    ax = _new_axes(ax, figsize=(0.9 * len(names) + 2.2, 3.2))
    heights = [float(measured[name]) for name in names]
    bars = ax.bar(range(len(names)), heights, width=0.6, color=COLORS[role], label="measured")
    ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=8, padding=2)
    for k, name in enumerate(names):
        ax.plot([k - 0.42, k + 0.42], [targets[name]] * 2, color=COLORS["reference"],
                linestyle=LINESTYLES["theory"], linewidth=1.6,
                label="target" if k == 0 else None)
    ax.set_xticks(range(len(names)), labels=names)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(heights + [float(targets[n]) for n in names]) * 1.2 or 1.0)
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    ax.legend(loc="upper right")
    return ax


def top_k_bars(panels: Sequence[Mapping], ncols: int = 2, xlabel: str = "probability",
               suptitle: str | None = None):
    """The k most probable tokens for a hidden position, one small panel each (Lesson 5, §3).

    Each panel is a mapping with ``tokens`` and ``probs`` (most probable first), a ``title``
    (e.g. the sentence with the blank), an optional ``answer`` (its bar is drawn in the
    highlight colour and outlined) and an optional ``role`` ("encoder" or "decoder") for the
    other bars' colour. Returns the Figure.
    """
    panels = list(panels)
    if not panels:
        raise ValueError("top_k_bars() needs at least one panel, got none.")
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}.")
    for i, panel in enumerate(panels):
        if len(panel.get("tokens", ())) != len(panel.get("probs", ())) or not panel.get("tokens"):
            raise ValueError(
                f"panel {i} needs 'tokens' and 'probs' of the same non-zero length, got "
                f"{len(panel.get('tokens', ()))} tokens and {len(panel.get('probs', ()))} "
                "probabilities."
            )
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    k_max = max(len(p["tokens"]) for p in panels)
    use_style()
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.3 * ncols, (0.28 * k_max + 0.9) * nrows),
                             layout="constrained", squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        panel = panels[i]
        tokens, probs = list(panel["tokens"]), [float(p) for p in panel["probs"]]
        base = COLORS.get(panel.get("role", "encoder"), COLORS["encoder"])
        colors = [COLORS["highlight"] if t == panel.get("answer") else base for t in tokens]
        bars = ax.barh(range(len(tokens)), probs, color=colors, height=0.7)
        for bar, token in zip(bars, tokens, strict=True):
            if token == panel.get("answer"):
                bar.set_edgecolor(COLORS["reference"])
                bar.set_linewidth(1.2)
        ax.bar_label(bars, labels=[f"{p:.2f}" for p in probs], fontsize=7, padding=2)
        ax.set_yticks(range(len(tokens)), labels=tokens)
        ax.invert_yaxis()  # the most probable on top
        ax.set_xlim(0, 1.0)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x")
        ax.set_axisbelow(True)
        if panel.get("title"):
            ax.set_title(panel["title"], fontsize=8.5, loc="left")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def accuracy_bars(
    results: Mapping[str, Mapping[str, float]],
    ax=None,
    ylabel: str = "accuracy",
    title: str | None = None,
    fmt: str = "{:.0%}",
    ylim: tuple[float, float] = (0.0, 1.0),
    colors: Mapping[str, str] | None = None,
):
    """Grouped bars: ``results[group][series]``, e.g. {"early blanks": {"MLM encoder": 0.4, ...}}.

    (Lesson 5, §4.) One group of bars per blank set, one bar per model, coloured by the model's
    role (an "encoder"/"bidirectional" name blue, a "decoder"/"causal" name vermillion, or
    ``colors[name]``) and labelled with its value. Returns the Axes.
    """
    groups = list(results)
    if not groups:
        raise ValueError("accuracy_bars() needs at least one group, got none.")
    series = list(dict.fromkeys(name for g in groups for name in results[g]))
    ax = _new_axes(ax, figsize=(max(4.5, 1.6 * len(groups) + 1.5), 3.4))
    width = 0.8 / len(series)
    extra = iter(_EXTRA_COLORS * 4)
    for s_index, name in enumerate(series):
        xs = [k + (s_index - (len(series) - 1) / 2) * width for k, g in enumerate(groups)
              if name in results[g]]
        heights = [float(results[g][name]) for g in groups if name in results[g]]
        role = role_of(name)
        color = COLORS[role] if role in ("encoder", "decoder", "cross") else next(extra)
        color = (colors or {}).get(name, color)
        bars = ax.bar(xs, heights, width=width * 0.92, color=color, label=name)
        ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=8, padding=2)
    ax.set_xticks(range(len(groups)), labels=groups)
    ax.set_ylabel(ylabel)
    ax.set_ylim(*ylim)
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


# --- Lesson 10: masks coloured by the role each cell plays -------------------------------------

_ROLE_LABELS = {
    "encoder": "encoder: may attend ($M_{ij}=0$)",
    "decoder": "decoder: may attend",
    "cross": "cross: may attend",
}


def _masked_patch() -> Patch:
    return Patch(facecolor=COLORS["masked"], edgecolor=_HATCH_COLOR, hatch=MASKED_HATCH,
                 linewidth=0, label="masked ($M_{ij}=-\\infty$)")


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
    m = _squeeze_to_2d(_as_array(mask, dtype=bool), "role_mask_grid")
    r = np.asarray(roles, dtype=object)
    if r.shape != m.shape:
        raise ValueError(
            f"roles must give one role per cell of the mask, shape {m.shape}, got {r.shape}."
        )
    ax = mask_grid(m, ax=ax, title=title, tokens=tokens, role="white", annotate=annotate,
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
        ax.legend(handles=handles + [_masked_patch()], loc="upper left",
                  bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return ax


def mask_grids(
    mask_list,
    roles: Sequence[str],
    titles: Sequence[str],
    tokens: Sequence | None = None,
    figsize: tuple[float, float] = (7.2, 3.6),
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
        m = _as_array(mask, dtype=bool)
        while m.ndim > 2 and m.shape[0] == 1:
            m = m[0]
        grids.append(m if m.ndim == 2 else m[None, :])
    widths = [g.shape[-1] for g in grids]
    use_style()
    fig, axes = plt.subplots(1, len(grids), figsize=figsize, layout="constrained",
                             gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, mask, role, title, tok in zip(axes[0], mask_list, roles, titles, tokens, strict=True):
        mask_grid(mask, ax=ax, title=title, tokens=tok, role=role, annotate=annotate,
                  legend=False)
        ax.set_anchor("N")  # align the tops of panels of different heights
    handles = [Patch(facecolor=COLORS.get(role, role), label=_ROLE_LABELS.get(role, role))
               for role in dict.fromkeys(roles)]
    fig.legend(handles=handles + [_masked_patch()], loc="outside lower center",
               ncols=len(handles) + 1, fontsize=8)
    return fig


# --- Lesson 9: fractions by mask, and curves over n in the key's colours ------------------------

__all__ += ["role_bars", "role_lines", "ratio_lines"]


def role_bars(categories: Sequence[str], series: Mapping[str, tuple], ax=None,
              ylabel: str = "", xlabel: str = "", title: str | None = None,
              fmt: str = "{:.2f}", hatch: Mapping[str, str] | None = None):
    """Grouped bars, one group per category, one bar per series, each series in the colour of
    its role in the figure key (Lesson 9, Figure 2).

    ``series`` maps a label to ``(values, role)``: one value per category, and a key of
    :data:`COLORS` ("reference" for a count or formula, "library" for a measurement of the
    course library). ``hatch`` optionally maps a label to a hatch pattern, so that two series
    never differ by colour alone. Values are written on the bars. Returns the Axes.
    """
    categories = list(categories)
    if not categories or not series:
        raise ValueError("role_bars() needs at least one category and one series, got "
                         f"{len(categories)} and {len(series)}.")
    for label, (values, role) in series.items():
        if len(values) != len(categories) or role not in COLORS:
            raise ValueError(
                f"series {label!r} needs one value per category ({len(categories)}) and a role "
                f"of the figure key {sorted(COLORS)}; got {len(values)} values and {role!r}.")
    ax = _new_axes(ax, figsize=(7.0, 3.2))
    width = 0.8 / len(series)
    for s_index, (label, (values, role)) in enumerate(series.items()):
        positions = [k + (s_index - (len(series) - 1) / 2) * width for k in range(len(categories))]
        face = COLORS[role] if role != "reference" else "white"  # a black bar hides its label
        bars = ax.bar(positions, [float(v) for v in values], width=width * 0.92, color=face,
                      edgecolor=COLORS[role], linewidth=1.0,
                      hatch=(hatch or {}).get(label), label=label)
        ax.bar_label(bars, labels=[fmt.format(float(v)) for v in values], fontsize=8, padding=2)
    ax.set_xticks(range(len(categories)), labels=categories)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.margins(y=0.15)  # room for the value labels
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    ax.legend()
    return ax


def role_lines(xs, series: Mapping[str, Mapping], ax=None, xlabel: str = "sequence length n",
               ylabel: str = "", title: str | None = None, log2_x: bool = True):
    """Curves over x in the key's colours, line styles and markers (Lesson 9, Figures 3–5).

    ``series`` maps a label to a dict with ``values`` (one per x), ``role`` (a key of
    :data:`COLORS`), optionally ``style`` (a key of :data:`LINESTYLES`: "theory" draws the
    dotted line of a formula; default solid) and ``marker`` (a key of :data:`MARKERS`, or
    None for no marker; default "measured", the filled circle). ``log2_x`` puts x on a log2
    axis with a tick at every x. Returns the Axes.
    """
    xs = list(xs)
    ax = _new_axes(ax, figsize=(7.0, 3.2))
    for label, spec in series.items():
        values = _as_array(spec["values"])
        role = spec["role"]
        if len(values) != len(xs) or role not in COLORS:
            raise ValueError(
                f"series {label!r} needs one value per x ({len(xs)}) and a role of the figure "
                f"key {sorted(COLORS)}; got {len(values)} values and {role!r}.")
        marker = spec.get("marker", "measured")
        ax.plot(xs, values, color=COLORS[role],
                linestyle=LINESTYLES[spec.get("style", "encoder")], linewidth=1.5,
                marker=MARKERS[marker] if marker else None, markersize=5,
                markerfacecolor="white" if marker == "recorded" else COLORS[role], label=label)
    return _finish_lines(ax, xs if log2_x else None, xlabel, ylabel, title)


def _finish_lines(ax, log2_xs, xlabel: str, ylabel: str, title: str | None):
    """Axis labels, a y grid, the legend, and (given ``log2_xs``) a log2 x axis with a tick at
    every x: the common end of :func:`role_lines` and :func:`ratio_lines`."""
    if log2_xs is not None:
        ax.set_xscale("log", base=2)
        ax.set_xticks(log2_xs, labels=[str(x) for x in log2_xs])
        ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    if title:
        ax.set_title(title)
    ax.legend()
    return ax


# --- Lesson 5: draws of a random procedure against their targets -------------------------------

_BAND_COLOR = "#E6E6E6"  # a plain pale grey, unhatched: a range of noise, not a masked cell


def draws_around_target(
    draws: Mapping[str, Sequence[float]],
    targets: Mapping[str, float],
    sds: Mapping[str, float],
    ax=None,
    ylabel: str = "measured - target (percentage points)",
    title: str | None = None,
    role: str = "encoder",
):
    """One column per share: each draw's deviation from its target as a dot, and the band of
    ±2 standard deviations that binomial sampling alone allows (Lesson 5, Figure 1).

    ``draws[name]`` holds one measured share per draw, ``targets[name]`` the share the procedure
    aims at, ``sds[name]`` the binomial standard deviation of one draw's share (all as fractions;
    the axis shows percentage points). Dots inside the grey band are what a correct
    implementation produces; a biased one sits outside it. Returns the Axes.
    """
    names = list(draws)
    if not names:
        raise ValueError("draws_around_target() needs at least one series of draws, got none.")
    missing = [n for n in names if n not in targets or n not in sds]
    if missing:
        raise ValueError(f"targets and sds need a value for every series; missing for {missing}.")
    if role not in COLORS:
        raise ValueError(f"role must be one of {list(COLORS)}, got {role!r}.")
    ax = _new_axes(ax, figsize=(1.3 * len(names) + 2.2, 3.2))
    for k, name in enumerate(names):
        values = (_as_array(draws[name]) - float(targets[name])) * 100  # (draws,) in points
        if values.ndim != 1 or values.size == 0:
            raise ValueError(f"draws[{name!r}] must be a non-empty list of shares.")
        band = 2 * float(sds[name]) * 100
        ax.fill_between([k - 0.35, k + 0.35], -band, band, color=_BAND_COLOR,
                        linewidth=0, label="±2 s.d., binomial" if k == 0 else None)
        jitter = np.linspace(-0.22, 0.22, values.size)  # spread the dots so none hide another
        ax.scatter(k + jitter, values, s=14, color=COLORS[role], zorder=3,
                   marker=MARKERS["measured"], label="one draw" if k == 0 else None)
    ax.axhline(0.0, color=COLORS["reference"], linestyle=LINESTYLES["theory"], linewidth=1.2,
               label="target")
    ax.set_xticks(range(len(names)), labels=names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)
    return ax


def ratio_lines(
    xs,
    series: Mapping[str, Mapping],
    ax=None,
    xlabel: str = "sequence length n",
    ylabel: str = "ratio",
    title: str | None = None,
):
    """Medians with their spread as error bars over n, on a log2 x axis (Lesson 3, Figure 3).

    ``series`` maps a label to a dict with ``values`` (one median per x), ``role`` (a key of
    :data:`COLORS`) and optionally ``low`` and ``high`` (the lowest and highest sample per x,
    drawn as error bars), ``style`` (a key of :data:`LINESTYLES`; "theory" draws a formula's
    dotted line) and ``marker`` (a key of :data:`MARKERS`, or None; default "measured").
    A thin grey line marks 1 (no difference). Returns the Axes.
    """
    xs = list(xs)
    ax = _new_axes(ax, figsize=(5.2, 3.4))
    ax.axhline(1.0, color="#999999", linewidth=0.8, zorder=0)  # ratio 1: no difference
    for k, (label, spec) in enumerate(series.items()):
        values = _as_array(spec["values"])
        role = spec["role"]
        if len(values) != len(xs) or role not in COLORS:
            raise ValueError(
                f"series {label!r} needs one value per x ({len(xs)}) and a role of the figure "
                f"key {sorted(COLORS)}; got {len(values)} values and {role!r}.")
        marker = spec.get("marker", "measured")
        errors = None
        if "low" in spec and "high" in spec:
            low, high = _as_array(spec["low"]), _as_array(spec["high"])
            errors = np.vstack([values - low, high - values])  # (2, len(xs)), both >= 0
        # measured series sit side by side, a few per cent apart, so their bars do not overlap
        shift = 1.0 if errors is None else 1.0 + 0.03 * (k - (len(series) - 1) / 2)
        ax.errorbar(np.asarray(xs, dtype=float) * shift, values, yerr=errors,
                    color=COLORS[role], linestyle=LINESTYLES[spec.get("style", "encoder")],
                    linewidth=1.5, capsize=3, elinewidth=1.0,
                    marker=MARKERS[marker] if marker else None, markersize=5,
                    markerfacecolor="white" if marker == "recorded" else COLORS[role],
                    label=label)
    return _finish_lines(ax, xs, xlabel, ylabel, title)

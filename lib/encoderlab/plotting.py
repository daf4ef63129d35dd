"""The course's figure key as code: one visual language for every figure (all lessons; Figure key).

Colours carry meaning (blue = encoder, vermillion = decoder, ...), taken from the Okabe–Ito
palette so that colour-blind readers can tell them apart; line styles carry meaning too (solid =
encoder, dashed = decoder, dotted = theory or ideal, markers = measured). Attention weights always
use the same colormap, and a masked cell (M_ij = -inf) always looks the same: hatched grey.

Every function draws on ``ax`` (or a new figure when ``ax`` is None), returns the Axes or the
Figure, and never calls ``plt.show()``, so notebooks, tests and ``python -m encoderlab.plotting``
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

    (The Figure key page; ``python -m encoderlab.plotting`` writes figures/figure-key.png.)
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


def main(argv: Sequence[str] | None = None) -> Path:
    """``python -m encoderlab.plotting [PATH]`` writes the figure key (figures/figure-key.png)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv:
        path = Path(argv[0])
    else:
        root = Path(__file__).resolve().parents[2]  # lib/encoderlab/plotting.py -> the repository
        if not (root / "lib").is_dir():
            raise SystemExit(
                "Cannot find the repository root (the folder holding lib/); "
                "pass the output path: python -m encoderlab.plotting figures/figure-key.png"
            )
        path = root / "figures" / "figure-key.png"
    fig = figure_key(path)
    plt.close(fig)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} kB)")
    return path


if __name__ == "__main__":
    main()

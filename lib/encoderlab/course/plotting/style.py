"""The course's style in one place, and the figure key it draws (all lessons; the Figure key page).

Every colour a figure uses is named here by what it marks; no other module of the library
writes a colour. Colours carry meaning (blue = encoder, vermillion = decoder, ...), taken from
the Okabe–Ito palette so that colour-blind readers can tell them apart; line styles carry
meaning too (solid = encoder, dashed = decoder, dotted = theory or ideal, markers = measured).
Attention weights always use the same colormap, and a masked cell (M_ij = -inf) always looks
the same: hatched grey.

Read top to bottom: the roles (``COLORS`` and their ``MEANINGS``), the shades that draw
everything around them (``SHADES``), colours of series without a role, the colour tables of
single figures, the colormaps, line styles and markers, font sizes and figure sizes, the
``KEY`` that figure-key.md shows, and the rcParams (``RC``, set by :func:`use_style`).
"""

from __future__ import annotations

import matplotlib as mpl
from matplotlib.colors import LinearSegmentedColormap

# --- The roles: one colour per meaning (Okabe & Ito, "Color Universal Design", 2008) ----------

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

# --- Shades: everything around the roles, each named by what it draws -------------------------

SHADES = {
    "paper": "white",  # backgrounds, cell borders, text on dark cells, open markers
    "ink": "#1A1A1A",  # text on light cells; the dark rim, bars and rules around them
    "outline": "#222222",  # values in similarity cells, edges of dots, computed tiles
    "ink_masked": "#333333",  # "−∞" written over a masked cell
    "ink_secondary": "#3A3A3A",  # a second, smaller text in a cell (a tag under its word)
    "caption": "#555555",  # the examples under a diagram's titles
    "baseline": "#999999",  # a baseline without a role; the level where nothing changes (0, 1×)
    "outlier": "#999999",  # the outlier dots of a box plot
    "hatch": "#8C8C8C",  # the hatch lines on a masked cell
    "skipped_tile": "#9A9A9A",  # the thin outline of a tile a tiled kernel skips
    "swatch_edge": "#BBBBBB",  # the thin edge of a pale swatch in a legend or the key
    "grid": "#E6E6E6",  # grid lines
    "noise_band": "#E6E6E6",  # the range noise alone allows: pale grey, unhatched (not masked)
    "encoder_pale": "#B9D6EA",  # a pale tint of the encoder's blue
    "encoder_box": "#DCE9F5",  # the boxes of a distribution drawn in the encoder's colours
    "padding_text": "#A8457F",  # [PAD] written as text: the padding pink, darkened to 5.5:1
}

# Colours for series that have no role of their own, used in this order. The first two are
# also the highlight and padding colours (kept so that no figure changes): a line in them
# that the legend names is just another series.
EXTRA_COLORS = [COLORS["highlight"], COLORS["padding"], "#F0E442", SHADES["baseline"]]

# --- Colour tables of single figures ------------------------------------------------------------

# Token cells in token_grid: segment s_i = 0 light grey, s_i = 1 a light tint of sky blue;
# [PAD] cells keep the figure key's padding colour, COLORS["padding"] (Lesson 2).
SEGMENT_COLORS = {0: "#ECECEC", 1: "#C6E4F7"}

# Entity types in tag_grid (Lesson 7); "O" (outside any entity) is a pale grey.
ENTITY_COLORS = {"PER": COLORS["library"], "LOC": COLORS["cross"], "DATE": COLORS["highlight"],
                 "O": "#F2F2F2"}

# What happened to a token, and whether its position carries loss (Lesson 6).
CORRUPTION_COLORS = {
    "plain": ("#F4F4F4", "no loss"),
    "mask": (COLORS["encoder"], "[MASK], scored"),
    "random": (COLORS["library"], "random token, scored"),
    "kept": (COLORS["highlight"], "unchanged, scored"),
    "replaced": (COLORS["decoder"], "replaced by the generator, label 1"),
    "original": ("#BFE3D3", "original, label 0 (scored)"),
}

# One colour per cut-off k: the encoder's blue for the strict recall@1, lighter for looser ones
# (Lesson 8).
RECALL_COLORS = [COLORS["encoder"], COLORS["highlight"], SHADES["encoder_pale"],
                 SHADES["baseline"]]

# The trainers of a subword vocabulary (Lesson 2, Figure 1). None has a role of the key, so
# none is drawn in the encoder's blue or the decoder's vermillion: BPE and WordPiece's
# likelihood gain in the colours of series without a role, the Hugging Face course's ratio in
# greys (dark: every pair competes; light: only pairs seen often enough).
VOCAB_TRAINER_COLORS = {
    "frequency": EXTRA_COLORS[0],  # sky blue
    "gain": EXTRA_COLORS[1],  # reddish purple
    "ratio": SHADES["caption"],  # dark grey
    "ratio, min count": SHADES["baseline"],  # light grey
}

# --- Colormaps and the masked cell --------------------------------------------------------------

# Attention weights: white (weight 0) to dark blue-violet (the largest weight). Zero weight is
# paper-white on purpose: it must not be confused with a masked cell, which is hatched grey.
ATTENTION_CMAP = LinearSegmentedColormap.from_list(
    "encoderlab_attention", ["#FFFFFF", "#C9DDEE", "#6A8FC6", "#3B3B8F", "#1A0B3D"]
)

# Similarities: white (the smallest value shown) to dark encoder blue (1 = the same direction).
SIMILARITY_CMAP = LinearSegmentedColormap.from_list(
    "encoderlab_similarity", ["#FFFFFF", SHADES["encoder_pale"], COLORS["encoder"], "#00385A"]
)

# Cosine similarity on its whole range [-1, 1]: a diverging map, white at 0, red for alike, blue
# for opposite (colour-blind safe; a scale read through its colorbar, not a categorical colour).
# SIMILARITY_CMAP is the sequential map for small labelled matrices of positive values.
COSINE_CMAP = mpl.colormaps["RdBu_r"]

# A confusion matrix's share of each row: white 0 to the encoder's blue 1 (Lesson 7).
CONFUSION_CMAP = LinearSegmentedColormap.from_list("encoderlab_confusion",
                                                   ["#FFFFFF", COLORS["encoder"]])

MASKED_HATCH = "////"  # hatch of a masked cell, drawn in SHADES["hatch"] on COLORS["masked"]

# --- Line styles and markers --------------------------------------------------------------------

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

# --- Font sizes and figure sizes ----------------------------------------------------------------

# The column rule. A figure is drawn at FIGURE_DPI and shown in the website's text column, which
# is COLUMN_PX wide at book width (1,300 px and wider: the book theme's article with its padding;
# tests/site/test_site.py measures it). A PNG no wider than the column is shown at its own size,
# one pixel per pixel; a wider one is shrunk to the column and its text with it. So every figure
# is at most MAX_FIGURE_WIDTH inches wide (the column less savefig's pad on both sides and a
# little room for text that the tight bounding box adds at the figure's edges): stack
# panels (2 x 1, 2 x 2) rather than set them side by side in a wide row. And no text is smaller
# than MIN_FONT_SIZE: MIN_FONT_SIZE * FIGURE_DPI / 72 = 13.0 px once shown, at least the
# site's small print, SMALL_PRINT_PX (code and printed output: 0.8 em of the 16 px body,
# _static/course.css). tests/course/test_plotting_column.py checks every figure function and
# every PNG stored in a lesson.
FIGURE_DPI = 110
COLUMN_PX = 704
COLUMN_WIDTH = COLUMN_PX / FIGURE_DPI  # 6.4 in
SAVE_PAD = 0.05  # in, savefig.pad_inches around the tight bounding box
MAX_FIGURE_WIDTH = 6.2  # in: the column less the pads and 0.1 in for text at the edges
SMALL_PRINT_PX = 12.8
MIN_FONT_SIZE = 8.5  # pt


def shown_px(points: float) -> float:
    """How tall text of ``points`` is on the website, in CSS px, for a figure that fits the
    column: ``shown_px(MIN_FONT_SIZE)`` = 13.0 >= SMALL_PRINT_PX."""
    return points * FIGURE_DPI / 72


def column_width(width: float) -> float:
    """``width`` in inches, or the column's MAX_FIGURE_WIDTH if it is wider (figures whose
    width grows with their data)."""
    return min(float(width), MAX_FIGURE_WIDTH)


FONT_SIZES = {
    "title": 11,  # axes titles; a diagram's headings
    "label": 10,  # axis labels, body text; counts in a confusion matrix
    "text": 9,  # ticks, legends, tokens in cells, the key's explanations
    "panel": 9,  # the title of one small panel among many
    "cell": MIN_FONT_SIZE,  # values written in cells or on bars
    "small": MIN_FONT_SIZE,  # values on densely packed bars or cells; a tag under its word
}

# Figure sizes (width, height) in inches of the figures whose size does not depend on the data;
# the others grow with their rows, columns or tokens.
FIGSIZES = {
    "attention_map": (4.4, 3.8),  # a map without token labels
    "similarity_map": (4.8, 4.0),  # a large similarity matrix, numbered axes
    "loss_curves": (5.6, 3.4),
    "metric_vs_compute": (5.6, 3.4),
    "similarity_by_offset": (5.4, 3.4),
    "depth_curves": (5.4, 3.4),
    "speedup_vs_ratio": (5.2, 3.4),
    "ratio_lines": (5.2, 3.4),
    "learning_curves": (6.0, 3.6),
    "norms_by_layer": (6.0, 3.6),
    "role_bars": (MAX_FIGURE_WIDTH, 3.2),
    "role_lines": (MAX_FIGURE_WIDTH, 3.2),
    "wirings_diagram": (MAX_FIGURE_WIDTH, 7.2),  # two families above, the third below
    "wirings_diagram_row": (MAX_FIGURE_WIDTH, 2.6),  # the three families in one row
    "figure_key": (MAX_FIGURE_WIDTH, 11.0),  # its four panels stacked
}

# --- The key: every mark and what it means (figure-key.md shows this table) ---------------------

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
        ("white → encoder blue", "similarity of small labelled sets (similarity_heatmap), "
         "scale fitted to the values, read on its colour bar"),
        ("blue → white → red", "cosine similarity of large matrices (similarity_map), −1 to 1"),
        ("light grey / light sky-blue cells", "token grids: segment s_i = 0 / s_i = 1"),
        (f"grey ({SHADES['baseline']})",
         "a baseline without a role of its own; a thin line where nothing changes (0, 1×)"),
        ("pale grey band, unhatched", "the range that noise alone allows (not a masked cell)"),
    ]
)

# --- rcParams -----------------------------------------------------------------------------------

RC = {
    "figure.dpi": FIGURE_DPI,
    "savefig.dpi": FIGURE_DPI,
    "figure.facecolor": SHADES["paper"],
    "axes.facecolor": SHADES["paper"],
    "savefig.facecolor": SHADES["paper"],
    "savefig.bbox": "tight",
    "savefig.pad_inches": SAVE_PAD,
    "font.size": FONT_SIZES["label"],
    "axes.titlesize": FONT_SIZES["title"],
    "axes.labelsize": FONT_SIZES["label"],
    "xtick.labelsize": FONT_SIZES["text"],
    "ytick.labelsize": FONT_SIZES["text"],
    "legend.fontsize": FONT_SIZES["text"],
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "grid.color": SHADES["grid"],
    "grid.linewidth": 0.7,
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "axes.prop_cycle": mpl.cycler(
        color=[COLORS["encoder"], COLORS["decoder"], COLORS["cross"], COLORS["library"]]
        + EXTRA_COLORS
    ),
    "image.interpolation": "nearest",  # one crisp square per attention weight
    "hatch.linewidth": 0.6,
    "hatch.color": SHADES["hatch"],
    "svg.hashsalt": "encoderlab",  # stable ids inside SVG files: same figure, same bytes
    "svg.fonttype": "path",
    "pdf.fonttype": 42,
}


def use_style() -> None:
    """Set rcParams to the course style (all lessons); calling it again changes nothing."""
    mpl.rcParams.update(RC)


use_style()  # importing the package is enough: figures made before any plotting call match too


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


def line_style(name: str) -> dict:
    """Line keyword arguments for a series called ``name``, by its role (all lessons):
    ``ax.plot(x, y, **line_style("causal run"))`` draws a dashed vermillion line."""
    role = role_of(name)
    if role == "theory":
        return {"color": COLORS["reference"], "linestyle": LINESTYLES["theory"], "linewidth": 1.5}
    if role in LINESTYLES:
        return {"color": COLORS[role], "linestyle": LINESTYLES[role]}
    if role in COLORS:
        return {"color": COLORS[role], "linestyle": "-"}
    return {}

"""The course's figures in one visual language: the figure key as code (all lessons; Figure key).

Every function draws on ``ax`` (or a new figure when ``ax`` is None), returns the Axes or the
Figure, and never calls ``plt.show()``, so notebooks, tests and ``python -m encoderlab figures``
share one code path. Notebooks call everything through this package:
``plotting.attention_map(...)``.

The package, by kind of figure:

    style.py     the style in one place = the figure key: every colour named by what it marks
                 (COLORS for the roles, SHADES for everything around them, the colour tables of
                 single figures), the colormaps, line styles, markers, font and figure sizes,
                 the KEY table of figure-key.md, and the rcParams (use_style)
    common.py    what every figure uses: arrays in, a new Axes, row and column labels (one
                 helper for tokens and labels), masked and outlined cells, colorbars, save_figure
    matrices.py  attention weights and masks: rows are queries i, columns keys j
    heatmaps.py  matrices of other scores: similarities, (layer x head) tables, a confusion
                 matrix, query–document scores
    tokens.py    tokens as boxes and cells: wiring diagrams, token grids, corruptions, BIO tags,
                 span probabilities
    curves.py    lines over steps, depth, compute or n; similarity against distance
    bars.py      bars with their values; draws against their targets
    key.py       the figure key as one figure and as a table; ``main``, the ``figures`` command
"""

from encoderlab.course.plotting.bars import (
    accuracy_bars,
    draws_around_target,
    labelled_bars,
    parameter_bars,
    recall_bars,
    role_bars,
    target_bars,
    timing_bars,
    top_k_bars,
)
from encoderlab.course.plotting.common import save_figure
from encoderlab.course.plotting.curves import (
    depth_curves,
    gpu_speedups,
    learning_curves,
    loss_curves,
    metric_vs_compute,
    norms_by_layer,
    ratio_lines,
    role_lines,
    similarity_by_offset,
    speedup_vs_ratio,
)
from encoderlab.course.plotting.heatmaps import (
    confusion_heatmap,
    layer_head_map,
    retrieval_heatmap,
    similarity_heatmap,
    similarity_map,
)
from encoderlab.course.plotting.key import figure_key, key_markdown, main
from encoderlab.course.plotting.matrices import (
    attention_heads,
    attention_map,
    attention_maps,
    mask_grid,
    mask_grids,
    role_mask_grid,
    tile_grid,
)
from encoderlab.course.plotting.style import (
    ATTENTION_CMAP,
    COLORS,
    COLUMN_WIDTH,
    CONFUSION_CMAP,
    CORRUPTION_COLORS,
    COSINE_CMAP,
    ENTITY_COLORS,
    EXTRA_COLORS,
    FIGSIZES,
    FONT_SIZES,
    KEY,
    LINESTYLES,
    MARKERS,
    MASKED_HATCH,
    MAX_FIGURE_WIDTH,
    MEANINGS,
    MIN_FONT_SIZE,
    RC,
    RECALL_COLORS,
    SEGMENT_COLORS,
    SHADES,
    SIMILARITY_CMAP,
    VOCAB_TRAINER_COLORS,
    column_width,
    line_style,
    role_of,
    shown_px,
    use_style,
)
from encoderlab.course.plotting.tokens import (
    corruption_grid,
    padded_batch_grid,
    span_probabilities,
    tag_grid,
    token_grid,
    wirings_diagram,
)

__all__ = [
    # the style = the figure key (style.py)
    "COLORS",
    "MEANINGS",
    "SHADES",
    "EXTRA_COLORS",
    "SEGMENT_COLORS",
    "ENTITY_COLORS",
    "CORRUPTION_COLORS",
    "RECALL_COLORS",
    "VOCAB_TRAINER_COLORS",
    "ATTENTION_CMAP",
    "SIMILARITY_CMAP",
    "COSINE_CMAP",
    "CONFUSION_CMAP",
    "MASKED_HATCH",
    "LINESTYLES",
    "MARKERS",
    "FONT_SIZES",
    "FIGSIZES",
    "COLUMN_WIDTH",
    "MAX_FIGURE_WIDTH",
    "MIN_FONT_SIZE",
    "column_width",
    "shown_px",
    "KEY",
    "RC",
    "use_style",
    "role_of",
    "line_style",
    "save_figure",
    # attention weights and masks (matrices.py)
    "attention_map",
    "attention_maps",
    "attention_heads",
    "mask_grid",
    "role_mask_grid",
    "mask_grids",
    "tile_grid",
    # other matrices (heatmaps.py)
    "similarity_heatmap",
    "similarity_map",
    "layer_head_map",
    "confusion_heatmap",
    "retrieval_heatmap",
    # tokens (tokens.py)
    "wirings_diagram",
    "token_grid",
    "padded_batch_grid",
    "corruption_grid",
    "tag_grid",
    "span_probabilities",
    # curves (curves.py)
    "loss_curves",
    "learning_curves",
    "metric_vs_compute",
    "speedup_vs_ratio",
    "gpu_speedups",
    "role_lines",
    "ratio_lines",
    "similarity_by_offset",
    "depth_curves",
    "norms_by_layer",
    # bars (bars.py)
    "timing_bars",
    "accuracy_bars",
    "recall_bars",
    "role_bars",
    "parameter_bars",
    "labelled_bars",
    "top_k_bars",
    "target_bars",
    "draws_around_target",
    # the figure key and its command (key.py)
    "figure_key",
    "key_markdown",
    "main",
]

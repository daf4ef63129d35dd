"""Tokens as boxes and cells: the three families as wiring diagrams, a batch as a grid with
segments and padding, one sentence under several corruptions, BIO tags, and the start / end
probabilities of a span (Lessons 1, 2, 6, 7, 10).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch, Rectangle

from encoderlab.course.plotting.common import as_array, highlight_cells, new_axes
from encoderlab.course.plotting.style import (
    COLORS,
    CORRUPTION_COLORS,
    ENTITY_COLORS,
    EXTRA_COLORS,
    FIGSIZES,
    FONT_SIZES,
    LINESTYLES,
    MAX_FIGURE_WIDTH,
    SEGMENT_COLORS,
    SHADES,
)
from encoderlab.validate import check_int

# --- The three families as wiring diagrams (Lesson 1) -------------------------------------------

_BOX_W, _BOX_H = 0.72, 0.46  # a token box, in data units (one token per unit of x)


def _token_row(ax, xs, y, labels, role: str, gid: str) -> None:
    """A row of token boxes in a role's colour, centred at (x, y)."""
    for x, label in zip(xs, labels, strict=True):
        box = FancyBboxPatch(
            (x - _BOX_W / 2, y - _BOX_H / 2), _BOX_W, _BOX_H,
            boxstyle="round,pad=0.0,rounding_size=0.08", facecolor=SHADES["paper"],
            edgecolor=COLORS[role], linewidth=1.4, zorder=3, gid=gid,
        )
        ax.add_patch(box)
        ax.text(x, y, label, ha="center", va="center", fontsize=FONT_SIZES["text"], zorder=4)


def _edges(ax, pairs, role: str, gid: str, rad: float = 0.0) -> None:
    """Arrows key -> query in the role's colour and line style: ((x0, y0), (x1, y1)) pairs."""
    for start, end in pairs:
        arrow = FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=7, color=COLORS[role],
            linestyle=LINESTYLES[role], linewidth=0.9, alpha=0.8, shrinkA=0, shrinkB=0,
            connectionstyle=f"arc3,rad={rad}", zorder=2, gid=gid,
        )
        ax.add_patch(arrow)


def wirings_diagram(ax=None, n_tokens: int = 4, n_targets: int = 3,
                    arrangement: str = "stacked"):
    """The three families as token boxes and attention arrows (Lesson 1, §3; Lesson 10).

    Each arrow runs from a key j (a token in the layer below) to a query i (a token in the layer
    above) that may read it. Encoder-only: every token reads every token (n^2 arrows, solid
    blue). Decoder-only: token i reads tokens j <= i only (n(n+1)/2 arrows, dashed vermillion).
    Encoder–decoder: an encoder block, and a decoder block whose every position also reads every
    encoder output through cross-attention (n_targets * n_tokens arrows, dash-dot green).
    ``arrangement="stacked"`` puts the first two families side by side and the third below
    them; ``"row"`` puts all three in one row, a short figure for a column (Lesson 1, §3).
    The arrows carry the gids "encoder-self", "decoder-self" and "cross". Returns the Axes.
    """
    if arrangement not in ("stacked", "row"):
        raise ValueError(
            f'arrangement must be "stacked" or "row", got {arrangement!r}. Use "row" for a '
            "short figure with the three families side by side."
        )
    row = arrangement == "row"
    for name, value in (("n_tokens", n_tokens), ("n_targets", n_targets)):
        check_int(value, name, at_least=1, at_most=8, what="boxes per row")
    ax = new_axes(ax, figsize=FIGSIZES["wirings_diagram_row" if row else "wirings_diagram"])
    bottom, top = 0.0, 2.0  # the layer below (keys) and the layer above (queries)
    lo, hi = bottom + _BOX_H / 2, top - _BOX_H / 2  # arrows start and end at the box edges
    n, m = n_tokens, n_targets
    xs_in = [f"$x_{{{i + 1}}}$" for i in range(n)]
    hs_out = [f"$h_{{{i + 1}}}$" for i in range(n)]

    def title(x_mid, name, examples, y=top + 0.75):
        ax.text(x_mid, y, name, ha="center", va="bottom", fontsize=FONT_SIZES["title"],
                fontweight="bold")
        ax.text(x_mid, y - 0.08, examples, ha="center", va="top", fontsize=FONT_SIZES["text"],
                color=SHADES["caption"])

    def note(x_mid, text, y=bottom - 0.55):
        if row:  # a narrow family: the note on two lines
            words = text.split()
            text = " ".join(words[:len(words) // 2]) + "\n" + " ".join(words[len(words) // 2:])
        ax.text(x_mid, y, text, ha="center", va="top", fontsize=FONT_SIZES["text"])

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

    # 3. Encoder–decoder, centred below the other two (or to their right, in a row): the encoder
    # as in 1; the decoder, raised, reads its own past (causal) and every encoder output
    # (cross-attention).
    lift = 2.0  # the decoder block sits higher: it reads the encoder's finished outputs
    drop = 0.0 if row else top + lift + 1.25 + 1.2  # how far below the others its layer 0 sits
    bottom, top, lo, hi = bottom - drop, top - drop, lo - drop, hi - drop
    x0 = 2 * n + 2.4 if row else (2 * n + 0.2) / 2 - (n + 0.2 + m - 1) / 2
    e_x = [x0 + i for i in range(n)]
    d_x = [x0 + n + 0.2 + i for i in range(m)]
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
    note(mid, "the decoder reads every encoder output", y=bottom - 0.55)

    ax.set_xlim(-0.7, max(dec_x[-1], d_x[-1]) + 0.7)
    ax.set_ylim(bottom - (1.45 if row else 1.05), top + lift + 1.25 if row else top + drop + 1.25)
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
        loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=1, handlelength=2.6,
    )
    return ax


# --- Grids of token cells: a batch, corruptions, tags (Lessons 2, 6, 7) --------------------------


def _cell(ax, r: int, i: int, face, gid: str) -> None:
    """One token cell at row r, position i, with paper-white borders between cells."""
    ax.add_patch(Rectangle((i - 0.5, r - 0.5), 1, 1, facecolor=face, edgecolor=SHADES["paper"],
                           linewidth=1.5, gid=gid))


def _grid_axes(ax, n_rows: int, n_cols: int, row_labels: Sequence[str]) -> None:
    """Limits with the first row on top, positions numbered along the top, rows named."""
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)  # the first row on top
    ax.xaxis.tick_top()
    ax.set_xticks(range(n_cols))
    ax.set_yticks(range(n_rows), labels=row_labels)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)


def _grid_rows(values, n_rows: int, n_cols: int, name: str) -> np.ndarray:
    """A (rows, columns) int array from lists of lists or a tensor, with its shape checked."""
    rows = as_array(values, dtype=float)
    if rows.ndim == 1:
        rows = rows[None, :]
    if rows.shape != (n_rows, n_cols):
        raise ValueError(
            f"token_grid: {name} must have one value per token, shape {(n_rows, n_cols)}, got "
            f"{rows.shape}."
        )
    return rows.astype(int)


def _per_line(n_cols: int, width: float, fixed: float) -> int:
    """How many positions of ``width`` inches fit on one line of a figure as wide as the column
    (``fixed`` inches go to the row labels); all ``n_cols`` when they fit."""
    return max(1, min(n_cols, int((MAX_FIGURE_WIDTH - fixed) // width)))


def _wrapped_axes(ax, n_rows: int, n_cols: int, per_line: int, row_labels: Sequence[str],
                  what: str = "positions i") -> None:
    """Limits and labels of a grid cut into lines of ``per_line`` positions, stacked: block b
    holds positions b * per_line ... and repeats the row labels; a note above every block says
    which positions it holds ("positions i 8–15")."""
    n_blocks = -(-n_cols // per_line)
    ax.set_xlim(-0.5, per_line - 0.5)
    ax.set_ylim(_block_row(n_blocks - 1, n_rows, n_rows) - 0.5, -0.5)
    ax.set_xticks([])
    ticks = [_block_row(b, r, n_rows) for b in range(n_blocks) for r in range(n_rows)]
    ax.set_yticks(ticks, labels=list(row_labels) * n_blocks)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    for b in range(n_blocks):
        ax.text(-0.5, _block_row(b, 0, n_rows) - 0.55, f"{what} {b * per_line}–"
                f"{min(n_cols, (b + 1) * per_line) - 1}", ha="left", va="bottom",
                fontsize=FONT_SIZES["text"], color=SHADES["caption"])


_BLOCK_GAP = 0.9  # rows of space between two lines of a wrapped grid (for the "positions" note)


def _block_row(block: int, r: int, n_rows: int) -> float:
    """The y of row r in block ``block`` of a wrapped grid."""
    return block * (n_rows + _BLOCK_GAP) + r


def _place(i: int, r: int, n_rows: int, per_line: int | None) -> tuple[float, float]:
    """(x, y) of position i of row r: one line, or lines of ``per_line`` positions."""
    if per_line is None:
        return i, r
    block, x = divmod(i, per_line)
    return x, _block_row(block, r, n_rows)


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
    width = max(0.55, 0.065 * longest + 0.15)  # inches per column: the longest token must fit
    label_width = 1.4 if row_labels is None else 0.5 + 0.075 * max(map(len, row_labels))
    per_line = _per_line(n_cols, width, label_width)
    n_blocks = -(-n_cols // per_line)
    wrapped = per_line if n_blocks > 1 else None  # too long for the column: lines, stacked
    height = 0.9 + 0.5 * (n_rows * n_blocks + _BLOCK_GAP * (n_blocks - 1))
    ax = new_axes(ax, figsize=(label_width + width * per_line, height))
    for r, row in enumerate(rows):
        for i, token in enumerate(row):
            face = COLORS["padding"] if pad[r, i] else SEGMENT_COLORS[int(seg[r, i])]
            x, y = _place(i, r, n_rows, wrapped)
            _cell(ax, y, x, face, "padding" if pad[r, i] else "token")
            ax.text(x, y, token, ha="center", va="center", fontsize=FONT_SIZES["text"],
                    color=SHADES["paper"] if pad[r, i] else SHADES["ink"])
    labels = row_labels or [f"text {r}" for r in range(n_rows)]
    if wrapped:
        _wrapped_axes(ax, n_rows, n_cols, per_line, labels)
    else:
        _grid_axes(ax, n_rows, n_cols, labels)
        ax.xaxis.set_label_position("top")
        ax.set_xlabel("position i")
    if title:
        ax.set_title(title, pad=20 if wrapped else 22)
    if legend:
        handles = [Patch(facecolor=SEGMENT_COLORS[s], label=f"segment $s_i={s}$")
                   for s in sorted(set(np.unique(seg[~pad])) | {0})]
        if pad.any():
            handles.append(Patch(facecolor=COLORS["padding"], label="[PAD], attention_mask 0"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02),
                  ncol=len(handles), borderaxespad=0.0)
    return ax


def padded_batch_grid(tokens, segments, attention_mask, row_labels: Sequence[str] | None = None,
                      title: str | None = None):
    """A padded batch on one line per text, every position in one row of columns, as wide as
    the book's column (Lesson 2, §7): :func:`token_grid` without wrapping.

    The columns share the width left by the row labels; a token too long for its column is a
    ValueError (use shorter words, or :func:`token_grid`, which wraps). Returns the Axes.
    """
    rows = [list(row) for row in tokens]
    if not rows or not rows[0] or len({len(row) for row in rows}) > 1:
        raise ValueError("padded_batch_grid needs equally long, non-empty rows of tokens; pad "
                         "the batch first (tokenizer(..., padding=True)).")
    n_rows, n_cols = len(rows), len(rows[0])
    seg = _grid_rows(segments, n_rows, n_cols, "segments")
    pad = _grid_rows(attention_mask, n_rows, n_cols, "attention_mask") == 0
    labels = list(row_labels) if row_labels is not None else [f"text {r}" for r in range(n_rows)]
    if len(labels) != n_rows:
        raise ValueError(f"row_labels must name {n_rows} rows, got {len(labels)}.")
    label_width = 0.3 + 0.075 * max(map(len, labels))  # inches
    column = (MAX_FIGURE_WIDTH - label_width) / n_cols  # inches per position
    longest = max(len(token) for row in rows for token in row)
    if 0.075 * longest + 0.05 > column:  # about 0.075 in per character at the text size
        raise ValueError(f"{n_cols} positions leave {column:.2f} in per column, too narrow for "
                         f"a token of {longest} characters; use shorter words or token_grid.")
    ax = new_axes(None, figsize=(MAX_FIGURE_WIDTH, 0.9 + 0.42 * n_rows))
    for r, row in enumerate(rows):
        for i, token in enumerate(row):
            face = COLORS["padding"] if pad[r, i] else SEGMENT_COLORS[int(seg[r, i])]
            _cell(ax, r, i, face, "padding" if pad[r, i] else "token")
            ax.text(i, r, token, ha="center", va="center", fontsize=FONT_SIZES["text"],
                    color=SHADES["paper"] if pad[r, i] else SHADES["ink"])
    _grid_axes(ax, n_rows, n_cols, labels)
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("position i")
    if title:
        ax.set_title(title, pad=22)
    handles = [Patch(facecolor=SEGMENT_COLORS[s], label=f"segment $s_i={s}$") for s in (0, 1)]
    handles.append(Patch(facecolor=COLORS["padding"], label="[PAD], attention_mask 0"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=3,
              borderaxespad=0.0)
    return ax


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
    label_width = 1.0 if row_labels is None else 0.4 + 0.072 * max(map(len, row_labels))
    per_line = _per_line(n_cols, width, label_width)
    n_blocks = -(-n_cols // per_line)
    wrapped = per_line if n_blocks > 1 else None  # too long for the column: lines, stacked
    height = 0.9 + 0.42 * (len(rows) * n_blocks + _BLOCK_GAP * (n_blocks - 1))
    ax = new_axes(ax, figsize=(label_width + width * per_line, height))
    dark = {"mask", "replaced"}
    for r, (toks, ks) in enumerate(zip(rows, kinds)):
        for i, (token, kind) in enumerate(zip(toks, ks)):
            x, y = _place(i, r, len(rows), wrapped)
            _cell(ax, y, x, CORRUPTION_COLORS[kind][0], kind)
            ax.text(x, y, token, ha="center", va="center", fontsize=FONT_SIZES["cell"],
                    color=SHADES["paper"] if kind in dark else SHADES["ink"])
    labels = row_labels or [f"row {r}" for r in range(len(rows))]
    if wrapped:
        _wrapped_axes(ax, len(rows), n_cols, per_line, labels)
    else:
        _grid_axes(ax, len(rows), n_cols, labels)
    if title:
        ax.set_title(title, pad=20 if wrapped else 18)
    if legend:
        used = [k for k in CORRUPTION_COLORS if any(k in ks for ks in kinds)]
        handles = [Patch(facecolor=CORRUPTION_COLORS[k][0], edgecolor=SHADES["swatch_edge"],
                         linewidth=0.5, label=CORRUPTION_COLORS[k][1]) for k in used]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02),
                  ncol=min(len(handles), 3), borderaxespad=0.0)
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
    label_width = 0.5 + 0.075 * max(map(len, names))
    per_line = _per_line(len(words), width, label_width)
    n_blocks = -(-len(words) // per_line)
    wrapped = per_line if n_blocks > 1 else None  # too long for the column: lines, stacked
    height = 0.7 + 0.75 * (len(names) * n_blocks + _BLOCK_GAP * (n_blocks - 1))
    ax = new_axes(ax, figsize=(label_width + width * per_line, height))
    reference = list(rows[names[0]])
    for r, name in enumerate(names):
        for i, (word, tag) in enumerate(zip(words, rows[name])):
            kind = _entity_type(tag)
            x, y = _place(i, r, len(names), wrapped)
            ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, edgecolor=SHADES["paper"],
                                   linewidth=1.5,
                                   facecolor=ENTITY_COLORS.get(kind, EXTRA_COLORS[1]),
                                   gid=f"tag-{tag}"))
            if tag.startswith("B-"):
                ax.add_patch(Rectangle((x - 0.5, y - 0.46), 0.09, 0.92, facecolor=SHADES["ink"],
                                       linewidth=0, gid="begin"))
            ax.text(x, y - 0.12, word, ha="center", va="center", fontsize=FONT_SIZES["text"],
                    color=SHADES["ink"])
            ax.text(x, y + 0.24, tag, ha="center", va="center", fontsize=FONT_SIZES["small"],
                    color=SHADES["ink_secondary"])
            if r > 0 and tag != reference[i]:
                highlight_cells(ax, [(y, x)])
    if wrapped:
        _wrapped_axes(ax, len(names), len(words), per_line, names, what="words")
    else:
        ax.set_xlim(-0.5, len(words) - 0.5)
        ax.set_ylim(len(names) - 0.5, -0.5)
        ax.set_xticks([])
        ax.set_yticks(range(len(names)), labels=names)
        ax.tick_params(length=0)
        ax.spines[:].set_visible(False)
    kinds = sorted({_entity_type(t) for name in names for t in rows[name]} - {"O"})
    handles = [Patch(facecolor=ENTITY_COLORS.get(k, EXTRA_COLORS[1]), label=k) for k in kinds]
    handles.append(Patch(facecolor=SHADES["paper"], edgecolor=COLORS["highlight"], linewidth=2,
                         label="differs from the first row"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02),
              ncol=min(len(handles), 3), borderaxespad=0.0)
    if title:
        ax.set_title(title, pad=20 if wrapped else 6)
    return ax


# --- Probabilities over the tokens of a context (Lesson 7) --------------------------------------


def span_probabilities(tokens: Sequence[str], p_start, p_end, gold: tuple[int, int],
                       predicted: tuple[int, int] | None = None, ax=None,
                       title: str | None = None):
    """P(start = i) above the axis and P(end = i) below it, for the context tokens (Lesson 7, §5).

    ``gold`` and ``predicted`` are (start, end) token indices into ``tokens``, end inclusive;
    the gold span is shaded, the predicted one outlined. Returns the Axes.
    """
    tokens = list(tokens)
    p_start, p_end = as_array(p_start), as_array(p_end)
    if p_start.shape != (len(tokens),) or p_end.shape != (len(tokens),):
        raise ValueError(f"p_start and p_end need one probability per token ({len(tokens)}), got "
                         f"shapes {p_start.shape} and {p_end.shape}.")
    ax = new_axes(ax, figsize=(MAX_FIGURE_WIDTH, 3.8))
    xs = np.arange(len(tokens))
    ax.axvspan(gold[0] - 0.5, gold[1] + 0.5, color=COLORS["cross"], alpha=0.15, linewidth=0,
               label="gold answer")
    ax.bar(xs, p_start, width=0.7, color=COLORS["encoder"], label="P(start = i)")
    ax.bar(xs, -p_end, width=0.7, color=COLORS["library"], label="P(end = i)")
    if predicted is not None:
        ax.add_patch(Rectangle((predicted[0] - 0.5, -1.05), predicted[1] - predicted[0] + 1,
                               2.1, fill=False, edgecolor=SHADES["ink"], linestyle="-",
                               linewidth=1.4, label="predicted span", gid="predicted"))
    ax.axhline(0, color=SHADES["ink"], linewidth=0.8)
    ax.set_ylim(-1.1, 1.1)
    ax.set_yticks([-1, -0.5, 0, 0.5, 1], labels=["1", "0.5", "0", "0.5", "1"])
    ax.set_ylabel("P(end)      P(start)")
    ax.set_xticks(xs, labels=tokens, rotation=90)
    ax.set_xlim(-0.6, len(tokens) - 0.4)
    ax.tick_params(axis="x", length=0)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4, borderaxespad=0.2,
              handlelength=1.5, columnspacing=1.2)  # above the Axes: the figure fits the column
    if title:
        ax.set_title(title, pad=24)
    return ax

"""The column rule (plotting/style.py): every figure fits the website's text column and no text in
it is smaller than the site's small print once shown there.

Two checks: every figure function of the library, drawn on sample data of the size the lessons
give it, is at most the column wide as a saved PNG and writes no text below MIN_FONT_SIZE; and
every PNG stored in a lesson notebook is at most the column wide, so a figure a lesson draws by
hand cannot slip through (its fonts come from the same style: the rcParams and FONT_SIZES).
"""

from __future__ import annotations

import base64
import io
import json
import struct
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.text import Text

from encoderlab import masks
from encoderlab.course import plotting
from encoderlab.course.plotting import style

matplotlib.use("Agg")  # headless: before any figure is drawn

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]-*.ipynb"))
COLUMN_PX = style.COLUMN_PX


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- The rule itself ----------------------------------------------------------------------------


def test_the_rule_adds_up():
    assert style.COLUMN_WIDTH * style.FIGURE_DPI == pytest.approx(COLUMN_PX)
    assert plotting.RC["figure.dpi"] == plotting.RC["savefig.dpi"] == style.FIGURE_DPI
    assert style.MAX_FIGURE_WIDTH + 2 * plotting.RC["savefig.pad_inches"] <= style.COLUMN_WIDTH
    assert style.shown_px(style.MIN_FONT_SIZE) >= style.SMALL_PRINT_PX
    assert min(plotting.FONT_SIZES.values()) >= style.MIN_FONT_SIZE
    for key in ("font.size", "axes.titlesize", "axes.labelsize", "xtick.labelsize",
                "ytick.labelsize", "legend.fontsize"):
        assert plotting.RC[key] >= style.MIN_FONT_SIZE, key
    wide = {name: size for name, size in plotting.FIGSIZES.items()
            if size[0] > style.MAX_FIGURE_WIDTH}
    assert not wide, f"FIGSIZES wider than the column ({style.MAX_FIGURE_WIDTH} in): {wide}"


# --- Every figure function ------------------------------------------------------------------------


def _weights(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n, n, generator=g), dim=-1)


def _cosine(n: int, d: int = 16) -> torch.Tensor:
    x = torch.nn.functional.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(1)),
                                      dim=-1)
    return x @ x.T


TOKENS_12 = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "because", "it", "was", "warm",
             "[SEP]"]
LONG_ROW = ["[CLS]"] + [f"word{i}" for i in range(30)] + ["[SEP]"]  # longer than the column
RECORD = {"device": "NVIDIA H200", "dtype": "float16", "date": "2026-12-01", "block": 64,
          "rows": [{"n": n, "sdpa_speedup": 1.5, "triton_speedup": 1.8, "tile_ratio": 1.9}
                   for n in (1024, 2048, 4096)]}

# name -> a call drawing it on sample data as large as the lessons' (or larger)
FIGURES = {
    "attention_map": lambda: plotting.attention_map(_weights(12), tokens=TOKENS_12,
                                                    mask=masks.causal(12), title="causal"),
    "attention_map, 24 tokens": lambda: plotting.attention_map(_weights(24),
                                                               tokens=[f"t{i}" for i in range(24)]),
    "attention_maps": lambda: plotting.attention_maps([_weights(12), _weights(12, 1)],
                                                      ["full", "causal"], tokens=TOKENS_12),
    "attention_heads": lambda: plotting.attention_heads(torch.stack([_weights(12, k)
                                                                     for k in range(12)]),
                                                        tokens=TOKENS_12, ncols=4,
                                                        suptitle="12 heads"),
    "mask_grid": lambda: plotting.mask_grid(masks.causal(8), tokens=TOKENS_12[:8],
                                            title="causal"),
    "mask_grid, 16": lambda: plotting.mask_grid(masks.causal(16)),
    "role_mask_grid": lambda: plotting.role_mask_grid(
        masks.prefix_lm(6, 3), np.where(np.arange(6)[None, :] < 3, "cross", "decoder")
        .repeat(6, 0), tokens=TOKENS_12[:6]),
    "mask_grids": lambda: plotting.mask_grids(
        [masks.bidirectional(4), masks.causal(3), torch.ones(3, 4, dtype=torch.bool)],
        ["encoder", "decoder", "cross"], ["encoder self", "decoder self", "cross"],
        tokens=[list("abcd"), list("xyz"), (list("xyz"), list("abcd"))]),
    "tile_grid": lambda: plotting.tile_grid(masks.causal(128), 32, title="causal"),
    "similarity_heatmap": lambda: plotting.similarity_heatmap(
        _cosine(12), labels=[f"sentence {i}" for i in range(12)], groups=["a"] * 6 + ["b"] * 6),
    "similarity_map": lambda: plotting.similarity_map(_cosine(64), ticks=[0, 32, 63]),
    "similarity_map, labelled": lambda: plotting.similarity_map(
        _cosine(20), labels=[f"w{i}" for i in range(20)]),
    "layer_head_map": lambda: plotting.layer_head_map(torch.rand(6, 12), vmax=1.0,
                                                      title="to [CLS]"),
    "confusion_heatmap": lambda: plotting.confusion_heatmap(
        torch.randint(0, 30, (6, 6), generator=torch.Generator().manual_seed(0)),
        ["World", "Sports", "Business", "Sci/Tech", "Health", "Arts"]),
    "retrieval_heatmap": lambda: plotting.retrieval_heatmap(
        torch.rand(10, 16) * 2 - 1, [f"query {i}" for i in range(10)],
        [f"doc {j}" for j in range(16)], [{i} for i in range(10)]),
    "wirings_diagram": lambda: plotting.wirings_diagram(n_tokens=4, n_targets=3),
    "token_grid": lambda: plotting.token_grid([TOKENS_12] * 3, torch.zeros(3, 12, dtype=int),
                                              torch.ones(3, 12, dtype=int), title="a batch"),
    "token_grid, long": lambda: plotting.token_grid([LONG_ROW] * 3, title="long rows",
                                                    row_labels=["NSP, IsNext (1)"] * 3),
    "padded_batch_grid": lambda: plotting.padded_batch_grid(
        [TOKENS_12[:7] + ["[PAD]"] * 5] * 3, torch.zeros(3, 12, dtype=int),
        torch.tensor([[1] * 7 + [0] * 5] * 3), row_labels=["pair 0", "pair 1", "pair 2"]),
    "corruption_grid, long": lambda: plotting.corruption_grid(
        [LONG_ROW] * 4, [["plain", "mask", "random", "kept"] * 8] * 4,
        row_labels=["MLM (Lesson 5)", "whole-word", "span (SpanBERT)", "ELECTRA generator"]),
    "tag_grid": lambda: plotting.tag_grid(
        [f"Word{i}" for i in range(14)],
        {"gold": ["B-PER", "I-PER"] + ["O"] * 10 + ["B-LOC", "O"],
         "predicted": ["B-PER", "O"] + ["O"] * 10 + ["B-DATE", "O"]}),
    "span_probabilities": lambda: plotting.span_probabilities(
        [f"tok{i}" for i in range(28)], torch.softmax(torch.randn(28), 0),
        torch.softmax(torch.randn(28), 0), gold=(3, 5), predicted=(3, 4), title="one question"),
    "loss_curves": lambda: plotting.loss_curves(
        {"MLM encoder": [3.0, 2.0, 1.5], "causal decoder": [3.1, 2.5, 2.0]},
        hlines={"chance": 3.4}, title="loss"),
    "learning_curves": lambda: plotting.learning_curves(
        {"fine-tuned": ([0, 10, 20], [25, 60, 80]), "linear probe": ([0, 10, 20], [25, 40, 50])},
        hlines={"chance": 25}),
    "metric_vs_compute": lambda: plotting.metric_vs_compute(
        {"MLM encoder": ([0, 1, 2], [0.5, 0.7, 0.8]),
         "ELECTRA discriminator": ([0, 1, 2], [0.5, 0.8, 0.85])}, hlines={"chance": 0.5}),
    "speedup_vs_ratio": lambda: plotting.speedup_vs_ratio([256, 512, 1024], [1.2, 1.5, 1.8],
                                                          [1.6, 1.8, 1.9]),
    "gpu_speedups": lambda: plotting.gpu_speedups(RECORD),
    "role_lines": lambda: plotting.role_lines(
        [256, 512, 1024], {"full": {"values": [1, 2, 4], "role": "encoder"},
                           "causal": {"values": [0.6, 1.1, 2.1], "role": "decoder"}},
        ylabel="ms"),
    "ratio_lines": lambda: plotting.ratio_lines(
        [256, 512], {"tiled": {"values": [1.2, 1.5], "low": [1.0, 1.4], "high": [1.3, 1.9],
                               "role": "library"}}),
    "similarity_by_offset": lambda: plotting.similarity_by_offset(_cosine(64), max_offset=32,
                                                                  logx=True),
    "depth_curves": lambda: plotting.depth_curves(
        {"post-LN": [1.0, 2.0, 3.0], "theory: 1/sqrt(L)": [1.0, 0.7, 0.5]}, x=[2, 4, 8]),
    "norms_by_layer": lambda: plotting.norms_by_layer(torch.rand(7, 30) * 10,
                                                      marks={"[CLS]": torch.rand(7) * 10}),
    "timing_bars": lambda: plotting.timing_bars(
        [{"n": n, "mask": m, "ms": 1.0 + k} for k, n in enumerate((128, 256, 512, 1024))
         for m in ("full", "causal", "padded")]),
    "accuracy_bars": lambda: plotting.accuracy_bars(
        {g: {"MLM encoder": 0.6, "causal decoder": 0.3, "bag of words": 0.2}
         for g in ("early", "middle", "late", "any")}),
    "recall_bars": lambda: plotting.recall_bars(
        {m: {"recall@1": 0.5, "recall@5": 0.8, "recall@10": 0.9}
         for m in ("[CLS]", "mean", "mean, tuned", "max")}),
    "role_bars": lambda: plotting.role_bars(
        ["full", "causal", "sliding window", "block sparse"],
        {"measured": ([1.0, 0.5, 0.2, 0.3], "library"), "tiles": ([1.0, 0.53, 0.2, 0.3],
                                                                  "reference")}),
    "parameter_bars": lambda: plotting.parameter_bars(
        {"all-MiniLM-L6-v2": {"embeddings": 11_720_000, "attention": 6_000_000,
                              "feed-forward": 4_700_000, "other": 10_000},
         "BERT-base": {"embeddings": 23_800_000, "attention": 28_300_000,
                       "feed-forward": 56_600_000, "other": 600_000}}),
    "labelled_bars": lambda: plotting.labelled_bars(
        {"MLM, masked positions": 0.15, "RTD, every position": 1.0}, lines={"chance": 0.5},
        fmt="{:.0%}", xlim=(0, 1.15)),
    "top_k_bars": lambda: plotting.top_k_bars(
        [{"tokens": [f"word{k}" for k in range(6)], "probs": [0.4, 0.2, 0.1, 0.1, 0.05, 0.05],
          "title": f"the cat sat on the [MASK] because it was warm there ({i})",
          "answer": "word0"} for i in range(4)], ncols=2),
    "target_bars": lambda: plotting.target_bars({"[MASK]": 0.79, "random": 0.11,
                                                 "unchanged": 0.1},
                                                {"[MASK]": 0.8, "random": 0.1, "unchanged": 0.1}),
    "draws_around_target": lambda: plotting.draws_around_target(
        {n: [0.15, 0.151, 0.149] for n in ("chosen", "[MASK]", "random", "unchanged")},
        {n: 0.15 for n in ("chosen", "[MASK]", "random", "unchanged")},
        {n: 0.002 for n in ("chosen", "[MASK]", "random", "unchanged")}),
    "figure_key": lambda: plotting.figure_key(),
}


def _figure(drawn):
    return drawn if isinstance(drawn, matplotlib.figure.Figure) else drawn.figure


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def column_problems(fig) -> list[str]:
    """What breaks the column rule in ``fig``: saved wider than the column, or text too small."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")  # the course's rcParams: 110 dpi, tight, padded
    width, _ = png_size(buffer.getvalue())
    problems = []
    if width > COLUMN_PX:
        problems.append(f"saved {width} px wide, the column is {COLUMN_PX} px")
    fig.canvas.draw()
    small = sorted({(round(t.get_fontsize(), 2), t.get_text()[:20]) for t in fig.findobj(Text)
                    if t.get_visible() and t.get_text().strip()
                    and t.get_fontsize() < style.MIN_FONT_SIZE - 1e-9})
    if small:
        problems.append(f"text below {style.MIN_FONT_SIZE} pt: {small[:5]}")
    return problems


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_fits_the_column_with_readable_text(name):
    problems = column_problems(_figure(FIGURES[name]()))  # the first save, as a notebook's
    assert not problems, f"{name}: {problems}"


def test_every_public_figure_function_is_checked():
    drawn = {name.split(",")[0] for name in FIGURES}
    functions = {name for name in plotting.__all__
                 if callable(getattr(plotting, name)) and name[0].islower()
                 and name not in {"use_style", "role_of", "line_style", "save_figure",
                                  "key_markdown", "main", "column_width", "shown_px"}}
    assert functions <= drawn, f"not checked against the column: {sorted(functions - drawn)}"


def test_the_check_catches_a_wide_figure_and_small_text():
    fig, ax = plt.subplots(figsize=(7.0, 3.0), layout="constrained")
    ax.plot([0, 1], [0, 1])
    ax.set_title("too wide")
    assert any("px wide" in p for p in column_problems(fig))
    fig, ax = plt.subplots(figsize=(5.0, 3.0), layout="constrained")
    ax.text(0.5, 0.5, "tiny", fontsize=7)
    assert any("below" in p for p in column_problems(fig))
    fig, ax = plt.subplots(figsize=(plotting.MAX_FIGURE_WIDTH, 3.0), layout="constrained")
    ax.set_xlabel("fits")
    assert column_problems(fig) == []


# --- Every PNG stored in a lesson ---------------------------------------------------------------


def _stored_pngs():
    for path in LESSONS:
        nb = json.loads(path.read_text())
        n = 0
        for cell in nb["cells"]:
            for output in cell.get("outputs", []):
                data = output.get("data", {}).get("image/png")
                if data:
                    n += 1
                    yield path.name, n, cell.get("id"), base64.b64decode(data)


def test_every_stored_figure_fits_the_column():
    """A lesson's figures as its notebook stores them (after the lead re-executes it): none
    wider than the column. Fix a failure where the figure is drawn: a smaller figsize (at most
    plotting.MAX_FIGURE_WIDTH), panels stacked instead of side by side."""
    wide = [f"{name} figure {n} (cell {cell}): {png_size(data)[0]} px"
            for name, n, cell, data in _stored_pngs() if png_size(data)[0] > COLUMN_PX]
    assert not wide, (f"{len(wide)} stored figures are wider than the column ({COLUMN_PX} px "
                      "at 1,300 px; they are shrunk and their text with them):\n"
                      + "\n".join(wide))

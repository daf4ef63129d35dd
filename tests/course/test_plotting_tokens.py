"""Tokens as boxes and cells (plotting.tokens): wirings, token grids, corruptions, tags, spans."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_hex

from encoderlab.course import plotting

matplotlib.use("Agg")  # headless: before any figure is drawn


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- wirings_diagram (Lesson 1) -------------------------------------------------------------------


def _arrows(ax, gid):
    return [p for p in ax.patches if p.get_gid() == gid]


def test_wirings_diagram_draws_each_family_in_the_key_style():
    n, m = 4, 3
    ax = plotting.wirings_diagram(n_tokens=n, n_targets=m)
    encoder, decoder, cross = (_arrows(ax, g) for g in ("encoder-self", "decoder-self", "cross"))
    assert len(encoder) == 2 * n * n  # encoder-only, and the encoder of encoder–decoder
    assert len(decoder) == n * (n + 1) // 2 + m * (m + 1) // 2  # j <= i only
    assert len(cross) == n * m  # every decoder position reads every encoder output
    for arrows, role in ((encoder, "encoder"), (decoder, "decoder"), (cross, "cross")):
        assert {to_hex(a.get_edgecolor()) for a in arrows} == {plotting.COLORS[role].lower()}
        assert {a.get_linestyle() for a in arrows} == {plotting.LINESTYLES[role]}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("bidirectional" in t for t in legend) and any("cross" in t for t in legend)
    ax.figure.canvas.draw()  # renders headless without error


def test_wirings_diagram_draws_on_a_given_axes_and_checks_sizes():
    fig, ax = plt.subplots()
    assert plotting.wirings_diagram(ax=ax, n_tokens=2, n_targets=2) is ax
    assert len(_arrows(ax, "cross")) == 4
    with pytest.raises(ValueError, match="n_tokens must be an int from 1 to 8"):
        plotting.wirings_diagram(n_tokens=0)


# --- token_grid (Lesson 2), corruption_grid (Lesson 6) --------------------------------------------


def cells(ax, gid):
    return [p for p in ax.patches if p.get_gid() == gid]


def test_token_grid_colours_segments_and_padding():
    tokens = [["[CLS]", "a", "[SEP]", "b", "[SEP]"], ["[CLS]", "a", "[SEP]", "[PAD]", "[PAD]"]]
    segments = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    ax = plotting.token_grid(tokens, segments, attention_mask, title="a batch")
    assert isinstance(ax, Axes)
    padding = cells(ax, "padding")
    assert len(padding) == 2 and len(cells(ax, "token")) == 8
    pad_rgba = matplotlib.colors.to_rgba(plotting.COLORS["padding"])
    assert all(p.get_facecolor() == pad_rgba for p in padding)
    seg_1 = matplotlib.colors.to_rgba(plotting.SEGMENT_COLORS[1])
    assert sum(p.get_facecolor() == seg_1 for p in cells(ax, "token")) == 2
    assert [t.get_text() for t in ax.texts][:5] == tokens[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["segment $s_i=0$", "segment $s_i=1$", "[PAD], attention_mask 0"]


def test_token_grid_takes_one_row_and_finds_pad_by_name():
    ax = plotting.token_grid(["[CLS]", "hi", "[SEP]", "[PAD]"])
    assert len(cells(ax, "padding")) == 1
    assert [t.get_text() for t in ax.get_yticklabels()] == ["text 0"]


def test_token_grid_errors():
    with pytest.raises(ValueError, match="rows of equal length, got lengths 2 to 3"):
        plotting.token_grid([["a", "b"], ["a", "b", "c"]])
    with pytest.raises(ValueError, match=r"segments must have one value per token, shape \(1, 2\)"):
        plotting.token_grid(["a", "b"], segments=[0, 0, 1])
    with pytest.raises(ValueError, match="segment ids must be 0 or 1"):
        plotting.token_grid(["a", "b"], segments=[0, 2])
    with pytest.raises(ValueError, match="row_labels must name 1 rows"):
        plotting.token_grid(["a", "b"], row_labels=["x", "y"])
    with pytest.raises(ValueError, match="at least one token"):
        plotting.token_grid([])


def test_corruption_grid_draws_one_patch_per_token_and_checks_kinds():
    ax = plotting.corruption_grid([["a", "b", "c"], ["a", "[MASK]"]],
                                  [["plain", "plain", "plain"], ["plain", "mask"]],
                                  row_labels=["original", "MLM"])
    kinds = [p.get_gid() for p in ax.patches]
    assert kinds.count("mask") == 1 and len(kinds) == 5
    with pytest.raises(ValueError, match="unknown kinds"):
        plotting.corruption_grid([["a"]], [["masked"]])
    with pytest.raises(ValueError, match="one kind per token"):
        plotting.corruption_grid([["a", "b"]], [["plain"]])


# --- tag_grid and span_probabilities (Lesson 7) ---------------------------------------------------


def test_tag_grid_and_span_probabilities():
    words = ["Ada", "Borg", "left", "Lima"]
    ax = plotting.tag_grid(words, {"gold": ["B-PER", "I-PER", "O", "B-LOC"],
                                   "predicted": ["B-PER", "O", "O", "B-LOC"]})
    assert sum(p.get_gid() == "highlight" for p in ax.patches) == 1
    assert sum(p.get_gid() == "begin" for p in ax.patches) == 4
    with pytest.raises(ValueError, match="3 tags for 4 words"):
        plotting.tag_grid(words, {"gold": ["O"] * 3})
    p = torch.tensor([0.1, 0.7, 0.1, 0.1])
    ax = plotting.span_probabilities(words, p, p.flip(0), gold=(1, 2), predicted=(1, 1))
    assert len(ax.patches) >= 8
    with pytest.raises(ValueError, match="one probability per token"):
        plotting.span_probabilities(words, p[:3], p, gold=(0, 0))

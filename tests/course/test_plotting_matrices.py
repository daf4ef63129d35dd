"""Attention weights and masks (plotting.matrices): masked cells hatched alike, one scale, roles."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from encoderlab import masks
from encoderlab.attention import scaled_dot_product_attention
from encoderlab.course import plotting

TOKENS = ["[CLS]", "the", "dog", "ran", "[SEP]", "[PAD]"]

matplotlib.use("Agg")  # headless: before any figure is drawn


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def real_weights(mask=None):
    """Attention weights of one head from the library's attention (n = 6)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 6, 8, generator=g) for _ in range(3))
    return scaled_dot_product_attention(q, k, v, mask)[1][0, 0]  # (6, 6)


def masked_area(ax) -> float:
    """Total area of the hatched masked-cell rectangles on ``ax`` (one unit per cell)."""
    hatched = [c for c in ax.collections if c.get_gid() == "masked-cells"]
    if not hatched:
        return 0.0
    assert all(c.get_hatch() == plotting.MASKED_HATCH for c in hatched)
    # each path is one rectangle in data coordinates: its area is width * height
    return sum(float(np.prod(np.ptp(p.vertices, axis=0))) for c in hatched for p in c.get_paths())


# --- attention_map, attention_maps, attention_heads -----------------------------------------------


def test_attention_map_marks_masked_cells():
    causal = masks.causal(6)
    ax = plotting.attention_map(real_weights(causal), tokens=TOKENS, mask=causal, title="causal")
    assert isinstance(ax, Axes)
    image = ax.images[0].get_array()
    assert np.array_equal(np.ma.getmaskarray(image), ~causal.numpy())  # hidden in the image
    assert masked_area(ax) == pytest.approx(int((~causal).sum()))  # and hatched on top
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert ax.get_xlabel() == "key j" and ax.get_ylabel() == "query i"


def test_attention_map_without_mask_has_no_hatching():
    ax = plotting.attention_map(real_weights(), colorbar=False)
    assert masked_area(ax) == 0.0
    assert len(ax.figure.axes) == 1  # no colorbar


def test_attention_map_takes_a_batch_and_head_of_one_and_rejects_more():
    plotting.attention_map(real_weights()[None, None])  # (1, 1, n, n) is fine
    with pytest.raises(ValueError, match="one batch element and one head"):
        plotting.attention_map(torch.rand(2, 3, 4, 4))


def test_attention_map_cross_attention_tokens():
    weights = torch.softmax(torch.randn(3, 5), dim=-1)  # n_q = 3 queries, n_kv = 5 keys
    ax = plotting.attention_map(weights, tokens=(["a", "b", "c"], ["v", "w", "x", "y", "z"]))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["v", "w", "x", "y", "z"]


def test_attention_map_names_the_labels_it_expects():
    with pytest.raises(ValueError, match="tokens must name 6 queries and 6 keys, got 5 and 5"):
        plotting.attention_map(real_weights(), tokens=TOKENS[:5])


def test_attention_maps_share_one_scale():
    n = 6
    causal, full = real_weights(masks.causal(n)), real_weights()
    fig = plotting.attention_maps(
        [causal, full], ["causal", "full"], tokens=TOKENS, masks=[masks.causal(n), None]
    )
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, float(causal.max()))}
    assert masked_area(panels[0]) == pytest.approx(n * (n - 1) / 2)
    assert masked_area(panels[1]) == 0.0


def test_attention_heads_draws_one_panel_per_head_on_one_scale():
    a = torch.softmax(torch.randn(6, 5, 5), dim=-1)
    fig = plotting.attention_heads(a[None], tokens=list("abcde"), ncols=4)
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == 6
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, float(a.max()))}
    # ncols=4 is cut to the 3 panels of at least 1.5 in that the column holds: a full 2 x 3 grid
    assert sum(not ax.get_visible() for ax in fig.axes) == 0
    fig = plotting.attention_heads(torch.softmax(torch.randn(7, 5, 5), dim=-1), ncols=3)
    assert sum(not ax.get_visible() for ax in fig.axes) == 2  # the empty slots of a 3 x 3 grid
    with pytest.raises(ValueError, match=r"shape \(h, n, n\)"):
        plotting.attention_heads(torch.rand(2, 3, 4, 4))
    with pytest.raises(ValueError, match="6 heads but 2 titles"):
        plotting.attention_heads(a, titles=["x", "y"])


# --- mask_grid, role_mask_grid, mask_grids, tile_grid ---------------------------------------------


def test_mask_grid_draws_allowed_and_masked_cells():
    pad = masks.padding(torch.tensor([[1, 1, 1, 1, 0, 0]]))  # (1, 1, 1, 6): a key-side row
    ax = plotting.mask_grid(pad, tokens=TOKENS, title="padding")
    assert isinstance(ax, Axes)
    assert masked_area(ax) == pytest.approx(6 * 2)  # two [PAD] columns, in all six rows
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("$-\\infty$") == 12 and texts.count("0") == 24


def _colours_of_open_cells(ax):
    """The colour of every image layer drawn on the Axes, as hex, in drawing order."""
    return [to_hex(image.get_cmap()(1.0)) for image in ax.images]


def test_role_mask_grid_colours_the_prefix_lm_by_role():
    n, p = 6, 3
    i, j = np.indices((n, n))
    roles = np.where(i < p, "encoder", np.where(j < p, "cross", "decoder"))
    ax = plotting.role_mask_grid(masks.prefix_lm(n, p), roles)
    colours = _colours_of_open_cells(ax)
    for role in ("encoder", "cross", "decoder"):
        assert plotting.COLORS[role].lower() in colours
    layers = {c: img for c, img in zip(colours, ax.images, strict=True)}
    open_cross = ~np.ma.getmaskarray(layers[plotting.COLORS["cross"].lower()].get_array())
    assert open_cross.sum() == (n - p) * p and open_cross[p:, :p].all()  # the rectangle only
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[-1].startswith("masked") and len(labels) == 4
    with pytest.raises(ValueError, match="one role per cell"):
        plotting.role_mask_grid(masks.prefix_lm(n, p), roles[:2])


def test_mask_grids_puts_one_legend_entry_per_role():
    src = torch.tensor([[1, 1, 1, 0]])
    fig = plotting.mask_grids(
        [masks.padding(src), masks.causal(3), masks.cross(torch.ones(1, 3), src)],
        roles=["encoder", "decoder", "cross"], titles=["a", "b", "c"],
    )
    panels = fig.axes
    assert len(panels) == 3
    assert [_colours_of_open_cells(ax)[0] for ax in panels] == [
        plotting.COLORS[r].lower() for r in ("encoder", "decoder", "cross")]
    (legend,) = fig.legends
    handles = legend.legend_handles
    assert len(handles) == 4  # three roles and the masked cell
    assert [h.get_facecolor()[:3] for h in handles[:3]] == [
        pytest.approx(matplotlib.colors.to_rgb(plotting.COLORS[r]))
        for r in ("encoder", "decoder", "cross")]
    with pytest.raises(ValueError, match="one role and one title per mask"):
        plotting.mask_grids([masks.causal(3)], roles=[], titles=["a"])


def test_tile_grid_outlines_the_computed_tiles():
    ax = plotting.tile_grid(masks.causal(64), 16, title="causal")
    assert ax.get_title() == "causal\n10/16 tiles"
    ax = plotting.tile_grid(masks.sliding_window(64, 8), 16)
    assert ax.get_title() == "10/16 tiles"

"""Lesson 10's addition to the shared checkers: check_prefix_lm_mask."""

from __future__ import annotations

import pytest
import torch

from encoderlab import masks
from encoderlab.course.checks import CheckFailed, check_prefix_lm_mask


def test_reference_passes(capsys):
    assert check_prefix_lm_mask(masks.prefix_lm)
    assert "correct on 8 cases" in capsys.readouterr().out


def test_loop_version_like_the_source_passes():
    def loops(n, p):
        m = torch.zeros(n, n, dtype=torch.bool)
        m[:p, :p] = True
        for i in range(p, n):
            m[i, : i + 1] = True
        return m

    assert check_prefix_lm_mask(loops)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda n, p: masks.causal(n), "causal inside the prefix"),
        (lambda n, p: torch.ones(n, n, dtype=torch.bool), "every query see every key"),
        (lambda n, p: masks.prefix_lm(n, min(p + 1, n)), "one position too long"),
        (lambda n, p: masks.prefix_lm(n, max(p - 1, 0)), "one position too short"),
        (lambda n, p: masks.prefix_lm(n, p) | (torch.arange(n)[:, None] < p),
         "prefix queries see the positions after"),
        (lambda n, p: masks.prefix_lm(n, p).float(), "boolean"),
        (lambda n, p: masks.prefix_lm(n, p)[None], "shape"),
    ],
)
def test_wrong_masks_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_prefix_lm_mask(wrong)


def test_unknown_mistake_points_at_a_cell():
    def odd(n, p):
        m = masks.prefix_lm(n, p)
        m[-1, 0] = False
        return m

    with pytest.raises(CheckFailed, match="first is query i="):
        check_prefix_lm_mask(odd)


# --- Lesson 10's figures: masks coloured by role ---------------------------------------------


def _colours_of_open_cells(ax):
    """The colour of every image layer drawn on the Axes, as hex, in drawing order."""
    import matplotlib.colors as mcolors

    return [mcolors.to_hex(image.get_cmap()(1.0)) for image in ax.images]


def test_role_mask_grid_colours_the_prefix_lm_by_role():
    import numpy as np

    from encoderlab.course import plotting

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
    from encoderlab.course import plotting

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
        pytest.approx(plotting.mpl.colors.to_rgb(plotting.COLORS[r]))
        for r in ("encoder", "decoder", "cross")]
    with pytest.raises(ValueError, match="one role and one title per mask"):
        plotting.mask_grids([masks.causal(3)], roles=[], titles=["a"])

"""Lines over steps, depth, compute or n (plotting.curves), styled by their role in the key."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_hex

from encoderlab.attention import diagonal_stats
from encoderlab.course import plotting
from encoderlab.course.plotting import COLORS, ratio_lines

matplotlib.use("Agg")  # headless: before any figure is drawn


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- training runs --------------------------------------------------------------------------------


def test_loss_curves_style_by_name():
    history = {"bidirectional": [3.0, 1.0, 0.1], "causal": [3.0, 2.5, 2.4], "other": [1, 1, 1]}
    ax = plotting.loss_curves(history, logy=True, hlines={"chance": 3.4})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["bidirectional"].get_linestyle() == "-"
    assert lines["bidirectional"].get_color() == plotting.COLORS["encoder"]
    assert lines["causal"].get_linestyle() == "--"
    assert lines["chance"].get_linestyle() == ":"
    assert ax.get_yscale() == "log"


def test_learning_curves_draw_one_line_per_run_and_the_chance_level():
    ax = plotting.learning_curves({"a": ([0, 10], [25, 50]), "b": ([0, 5, 10], [25, 30, 40])},
                                  hlines={"chance": 25})
    assert isinstance(ax, Axes) and len(ax.lines) == 3
    with pytest.raises(ValueError, match="has 2 steps but 3 values"):
        plotting.learning_curves({"a": ([0, 1], [1, 2, 3])})


def test_metric_vs_compute_draws_runs_and_levels():
    ax = plotting.metric_vs_compute({"MLM encoder": ([0, 1], [0.7, 0.8])}, hlines={"x": 0.5})
    assert len(ax.lines) == 2
    with pytest.raises(ValueError, match="at least one series"):
        plotting.metric_vs_compute({})


# --- over n: speedups, ratios and role lines ------------------------------------------------------


def test_speedup_vs_ratio_measured_markers_and_ideal_line():
    ns = [256, 512, 1024]
    ax = plotting.speedup_vs_ratio(ns, [1.2, 1.5, 1.8], 2.0)
    ideal, measured = (line for line in ax.get_lines() if line.get_label() in ("ideal", "measured"))
    assert ideal.get_linestyle() == ":" and measured.get_marker() == "o"
    assert ax.get_xscale() == "log"
    recorded = plotting.speedup_vs_ratio(ns, {"GPU": [1.5, 1.8, 1.9]}, [1.6, 1.8, 1.9],
                                         recorded=True)
    assert any(line.get_marker() == "s" for line in recorded.get_lines())


def test_ratio_lines_draws_medians_with_their_spread():
    ax = ratio_lines(
        [256, 512],
        {"tiled": {"values": [1.2, 1.5], "low": [1.0, 1.4], "high": [1.3, 1.9],
                   "role": "library"},
         "tile ratio": {"values": [1.33, 1.6], "role": "reference", "style": "theory",
                        "marker": None}},
    )
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["tiled", "tile ratio"]
    assert ax.get_xscale() == "log"
    colors = {line.get_color() for line in ax.get_lines()}
    assert COLORS["library"] in colors and COLORS["reference"] in colors
    with pytest.raises(ValueError, match="one value per x"):
        ratio_lines([256, 512], {"bad": {"values": [1.0], "role": "library"}})
    with pytest.raises(ValueError, match="role of the figure key"):
        ratio_lines([256], {"bad": {"values": [1.0], "role": "purple"}})


def test_role_lines_use_the_key_colours_and_styles():
    ax = plotting.role_lines([256, 512], {"w": {"values": [0.5, 0.25], "role": "highlight"},
                                          "t": {"values": [1, 1], "role": "reference",
                                                "style": "theory", "marker": None}})
    w, t = ax.get_lines()
    assert to_hex(w.get_color()) == plotting.COLORS["highlight"].lower()
    assert t.get_linestyle() == ":" and t.get_marker() in (None, "None", "")
    with pytest.raises(ValueError, match="a role of the figure key"):
        plotting.role_lines([1, 2], {"x": {"values": [1, 2], "role": "purple"}})


# --- similarity against distance (Lesson 2) -------------------------------------------------------


def cosine(x: torch.Tensor) -> torch.Tensor:
    x = torch.nn.functional.normalize(x, dim=-1)
    return x @ x.T


def test_similarity_by_offset_draws_the_mean_of_each_diagonal():
    c = cosine(torch.randn(20, 4, generator=torch.Generator().manual_seed(1)))
    ax = plotting.similarity_by_offset(c, max_offset=10, logx=True)
    stats = diagonal_stats(c)
    (line,) = [x for x in ax.get_lines() if x.get_label().startswith("mean")]
    assert line.get_xdata().tolist() == list(range(1, 11))
    assert np.allclose(line.get_ydata(), stats["mean"][1:11])
    assert line.get_color() == plotting.COLORS["encoder"] and ax.get_xscale() == "log"
    assert len(ax.collections) == 1  # the min-max band
    assert len(plotting.similarity_by_offset(c, band=False).collections) == 0
    with pytest.raises(ValueError, match=r"max_offset must lie in 1\.\.19"):
        plotting.similarity_by_offset(c, max_offset=20)


# --- by depth (Lesson 4) --------------------------------------------------------------------------


def test_norms_by_layer_boxes_and_marks():
    norms = torch.rand(4, 30) * 10
    ax = plotting.norms_by_layer(norms, marks={"[CLS]": norms[:, 0]})
    assert [t.get_text() for t in ax.get_xticklabels()][1:] == ["1", "2", "3"]
    assert np.allclose(ax.lines[-1].get_ydata(), norms[:, 0].numpy())
    with pytest.raises(ValueError, match=r"one value per depth, shape \(4,\)"):
        plotting.norms_by_layer(norms, marks={"[SEP]": [1.0, 2.0]})
    with pytest.raises(ValueError, match="residual_norms"):
        plotting.norms_by_layer(torch.rand(5))


def test_depth_curves_style_theory_and_measured():
    ax = plotting.depth_curves(
        {"post-LN": [1.0, 2.0, 3.0], "theory: 1/sqrt(L)": [1.0, 0.7, 0.5]},
        x=[2, 4, 8], logx=True, logy=True,
    )
    measured, theory = ax.lines[0], ax.lines[1]
    assert measured.get_marker() == plotting.MARKERS["measured"]
    assert theory.get_linestyle() == ":" and theory.get_marker() in ("None", None, "")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="has 2 values but x has 3"):
        plotting.depth_curves({"a": [1, 2]}, x=[1, 2, 3])
    with pytest.raises(ValueError, match="at least one series"):
        plotting.depth_curves({})

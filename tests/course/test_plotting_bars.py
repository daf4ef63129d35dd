"""Bars with their values, and draws against their targets (plotting.bars)."""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from encoderlab.course import plotting
from encoderlab.encoder import EncoderConfig, count_parameters
from encoderlab.lessons import l04_count as counting

matplotlib.use("Agg")  # headless: before any figure is drawn


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- grouped bars ---------------------------------------------------------------------------------


def test_timing_bars_label_every_bar():
    timings = (("full", 2.0), ("causal", 1.1))
    rows = [{"n": n, "mask": m, "ms": t} for n in (128, 256) for m, t in timings]
    ax = plotting.timing_bars(rows)
    assert len(ax.patches) == 4
    assert sorted(t.get_text() for t in ax.texts) == ["1.1", "1.1", "2", "2"]
    colors = {tuple(p.get_facecolor()[:3]) for p in ax.patches}
    assert colors == {matplotlib.colors.to_rgb(plotting.COLORS[r]) for r in ("encoder", "decoder")}


def test_accuracy_bars_colour_by_role():
    ax = plotting.accuracy_bars({"early": {"MLM encoder": 0.4, "causal decoder": 0.1},
                                 "late": {"MLM encoder": 0.5, "causal decoder": 0.45}})
    assert [t.get_text() for t in ax.texts] == ["40%", "50%", "10%", "45%"]
    colors = {matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches}
    assert colors == {plotting.COLORS["encoder"].lower(), plotting.COLORS["decoder"].lower()}
    grey = plotting.SHADES["baseline"]
    ax = plotting.accuracy_bars({"early": {"baseline": 0.2}}, colors={"baseline": grey})
    assert to_hex(ax.patches[0].get_facecolor()) == grey.lower()
    with pytest.raises(ValueError, match="at least one group"):
        plotting.accuracy_bars({})


def test_recall_bars():
    ax = plotting.recall_bars({"mean": {"recall@1": 0.5, "recall@5": 0.8},
                               "cls": {"recall@1": 0.2, "recall@5": 0.6}})
    assert len(ax.patches) == 4
    assert [t.get_text() for t in ax.texts if t.get_gid() == "value"] == \
        ["0.50", "0.20", "0.80", "0.60"]
    with pytest.raises(ValueError, match="same metrics"):
        plotting.recall_bars({"a": {"recall@1": 1}, "b": {"recall@5": 1}})
    with pytest.raises(ValueError, match="at least one method"):
        plotting.recall_bars({})


def test_role_bars_use_the_key_colours_and_draw_the_reference_as_an_outline():
    ax = plotting.role_bars(["a", "b"], {"count": ([1.0, 0.5], "reference"),
                                         "time": ([1.1, 0.6], "library")})
    faces = {to_hex(p.get_facecolor()) for p in ax.patches}
    assert faces == {plotting.COLORS["library"].lower(), to_hex(plotting.SHADES["paper"])}
    with pytest.raises(ValueError, match="one value per category"):
        plotting.role_bars(["a"], {"x": ([1, 2], "library")})


# --- horizontal bars ------------------------------------------------------------------------------


def test_parameter_bars_show_shares_of_each_total():
    small = counting.parameter_breakdown(EncoderConfig())
    big = counting.parameter_breakdown(
        EncoderConfig(d_model=768, n_heads=12, n_layers=12, d_ff=3072, norm="pre")
    )
    ax = plotting.parameter_bars({"MiniLM": small, "BERT-base, pre-LN": big})
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:2] == ["token embeddings", "position embeddings"] and "final LayerNorm" in labels
    widths = [p.get_width() for p in ax.patches]
    assert math.isclose(sum(widths[: len(labels)]), 100.0)  # the first model's shares
    assert math.isclose(sum(widths[len(labels):]), 100.0)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == f"MiniLM: {count_parameters(EncoderConfig()):,} parameters"
    with pytest.raises(ValueError, match="at least one model"):
        plotting.parameter_bars({})


def test_labelled_bars_draw_one_bar_per_name_and_the_levels():
    ax = plotting.labelled_bars({"MLM": 0.15, "RTD": 1.0}, lines={"chance": 0.5}, fmt="{:.0%}")
    assert len(ax.patches) == 2
    assert [t.get_text() for t in ax.texts] == ["15%", "100%"]
    with pytest.raises(ValueError, match="at least one value"):
        plotting.labelled_bars({})


def test_top_k_bars_highlight_the_answer():
    panels = [{"tokens": ["a", "b", "c"], "probs": [0.5, 0.3, 0.1], "answer": "b", "title": "x"},
              {"tokens": ["d", "e"], "probs": [0.6, 0.2], "role": "decoder"},
              {"tokens": ["f"], "probs": [0.9]}]
    fig = plotting.top_k_bars(panels, ncols=2)
    assert isinstance(fig, Figure)
    first = fig.axes[0]
    colors = [p.get_facecolor() for p in first.patches]
    assert colors[1] == matplotlib.colors.to_rgba(plotting.COLORS["highlight"])
    assert colors[0] == matplotlib.colors.to_rgba(plotting.COLORS["encoder"])
    assert fig.axes[1].patches[0].get_facecolor() == matplotlib.colors.to_rgba(
        plotting.COLORS["decoder"])
    assert not fig.axes[3].get_visible()
    with pytest.raises(ValueError, match="same non-zero length"):
        plotting.top_k_bars([{"tokens": ["a"], "probs": []}])
    with pytest.raises(ValueError, match="at least one panel"):
        plotting.top_k_bars([])


# --- measured against a target (Lesson 5) ---------------------------------------------------------


def test_target_bars_draw_values_and_targets():
    ax = plotting.target_bars({"[MASK]": 0.79, "random": 0.11, "unchanged": 0.1},
                              {"[MASK]": 0.8, "random": 0.1, "unchanged": 0.1})
    assert isinstance(ax, Axes)
    assert [t.get_text() for t in ax.texts] == ["0.790", "0.110", "0.100"]
    assert len([ln for ln in ax.lines if ln.get_linestyle() == ":"]) == 3
    with pytest.raises(ValueError, match="no value for"):
        plotting.target_bars({"a": 1.0}, {})
    with pytest.raises(ValueError, match="at least one"):
        plotting.target_bars({}, {})
    with pytest.raises(ValueError, match="role must be one of"):
        plotting.target_bars({"a": 1.0}, {"a": 1.0}, role="purple")


def test_draws_around_target_shows_deviations_and_the_noise_band():
    ax = plotting.draws_around_target({"a": [0.151, 0.149, 0.15], "b": [0.8, 0.81]},
                                      {"a": 0.15, "b": 0.8}, {"a": 0.001, "b": 0.004})
    assert isinstance(ax, Axes)
    dots = [c for c in ax.collections if isinstance(c, PathCollection)]  # one scatter per series
    ys = [sorted(round(float(y), 6) for _, y in c.get_offsets()) for c in dots]
    assert ys == [[-0.1, 0.0, 0.1], [0.0, 1.0]]  # percentage points: (0.81 - 0.8) * 100 = 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["±2 s.d., binomial", "one draw", "target"]
    with pytest.raises(ValueError, match="missing for"):
        plotting.draws_around_target({"a": [0.1]}, {}, {})
    with pytest.raises(ValueError, match="at least one"):
        plotting.draws_around_target({}, {}, {})
    with pytest.raises(ValueError, match="non-empty"):
        plotting.draws_around_target({"a": []}, {"a": 0.1}, {"a": 0.01})

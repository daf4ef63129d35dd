"""The figure key as code: every plotting function runs headless and marks masked cells alike."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from encoderlab import masks  # noqa: E402
from encoderlab.attention import scaled_dot_product_attention  # noqa: E402
from encoderlab.course import plotting  # noqa: E402

TOKENS = ["[CLS]", "the", "dog", "ran", "[SEP]", "[PAD]"]


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


def test_use_style_is_idempotent():
    plotting.use_style()
    first = dict(matplotlib.rcParams)
    plotting.use_style()
    assert dict(matplotlib.rcParams) == first
    assert matplotlib.rcParams["axes.spines.top"] is False
    assert matplotlib.rcParams["savefig.bbox"] == "tight"
    assert matplotlib.rcParams["svg.hashsalt"] == "encoderlab"


def test_roles_follow_the_series_name():
    assert plotting.role_of("causal, next-token loss") == "decoder"
    assert plotting.role_of("bidirectional, next-token loss") == "encoder"
    assert plotting.role_of("encoder-decoder") == "cross"
    assert plotting.role_of("ideal 2T/(T+1)") == "theory"
    assert plotting.style("causal")["linestyle"] == "--"
    assert plotting.style("encoder")["linestyle"] == "-"
    assert plotting.style("ideal")["linestyle"] == ":"


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


def test_mask_grid_draws_allowed_and_masked_cells():
    pad = masks.padding(torch.tensor([[1, 1, 1, 1, 0, 0]]))  # (1, 1, 1, 6): a key-side row
    ax = plotting.mask_grid(pad, tokens=TOKENS, title="padding")
    assert isinstance(ax, Axes)
    assert masked_area(ax) == pytest.approx(6 * 2)  # two [PAD] columns, in all six rows
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("$-\\infty$") == 12 and texts.count("0") == 24


def test_loss_curves_style_by_name():
    history = {"bidirectional": [3.0, 1.0, 0.1], "causal": [3.0, 2.5, 2.4], "other": [1, 1, 1]}
    ax = plotting.loss_curves(history, logy=True, hlines={"chance": 3.4})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["bidirectional"].get_linestyle() == "-"
    assert lines["bidirectional"].get_color() == plotting.COLORS["encoder"]
    assert lines["causal"].get_linestyle() == "--"
    assert lines["chance"].get_linestyle() == ":"
    assert ax.get_yscale() == "log"


def test_timing_bars_label_every_bar():
    timings = (("full", 2.0), ("causal", 1.1))
    rows = [{"n": n, "mask": m, "ms": t} for n in (128, 256) for m, t in timings]
    ax = plotting.timing_bars(rows)
    assert len(ax.patches) == 4
    assert sorted(t.get_text() for t in ax.texts) == ["1.1", "1.1", "2", "2"]
    colors = {tuple(p.get_facecolor()[:3]) for p in ax.patches}
    assert colors == {matplotlib.colors.to_rgb(plotting.COLORS[r]) for r in ("encoder", "decoder")}


def test_speedup_vs_ratio_measured_markers_and_ideal_line():
    ns = [256, 512, 1024]
    ax = plotting.speedup_vs_ratio(ns, [1.2, 1.5, 1.8], 2.0)
    ideal, measured = (line for line in ax.get_lines() if line.get_label() in ("ideal", "measured"))
    assert ideal.get_linestyle() == ":" and measured.get_marker() == "o"
    assert ax.get_xscale() == "log"
    recorded = plotting.speedup_vs_ratio(ns, {"GPU": [1.5, 1.8, 1.9]}, [1.6, 1.8, 1.9],
                                         recorded=True)
    assert any(line.get_marker() == "s" for line in recorded.get_lines())


def test_figure_key_writes_a_small_png(tmp_path):
    path = tmp_path / "key.png"
    fig = plotting.figure_key(path)
    assert isinstance(fig, Figure)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size < 200_000
    assert len(plotting.KEY) > len(plotting.COLORS)
    assert plotting.key_markdown().startswith("| mark | meaning |")


def test_module_main_writes_to_a_given_path(tmp_path, capsys):
    out = tmp_path / "figure-key.png"
    assert plotting.main([str(out)]) == 0
    assert out.exists() and "wrote" in capsys.readouterr().out


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    for suffix in (".png", ".svg"):  # a rerun of a notebook cell draws a fresh figure
        first, second = tmp_path / f"first{suffix}", tmp_path / f"second{suffix}"
        plotting.save_figure(plotting.attention_maps([real_weights()], ["full"]), first)
        plotting.save_figure(plotting.attention_maps([real_weights()], ["full"]), second)
        assert first.read_bytes() == second.read_bytes()
        assert b"Date" not in first.read_bytes()


def test_figure_key_page_quotes_the_key_of_the_code():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "figure-key.md").read_text()
    assert plotting.key_markdown() in page, "figure-key.md is out of step: paste key_markdown()"


def test_ratio_lines_draws_medians_with_their_spread():
    from encoderlab.course.plotting import COLORS, ratio_lines

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

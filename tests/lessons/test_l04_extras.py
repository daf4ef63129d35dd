"""Lesson 4's additions to the shared modules: its figures (plotting) and its checkers (checks)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import math  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from encoderlab.course import plotting  # noqa: E402
from encoderlab.course.checks import CheckFailed, check_layer_norm, check_parameter_count  # noqa: E402
from encoderlab.encoder import EncoderConfig, count_parameters  # noqa: E402
from encoderlab.lessons import l04_inspect_stack as inspect_stack  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- Plotting -----------------------------------------------------------------------------------


def test_attention_heads_draws_one_panel_per_head_on_one_scale():
    a = torch.softmax(torch.randn(6, 5, 5), dim=-1)
    fig = plotting.attention_heads(a[None], tokens=list("abcde"), ncols=4)
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == 6
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, float(a.max()))}
    assert sum(not ax.get_visible() for ax in fig.axes) == 2  # the empty slots of a 2 x 4 grid
    with pytest.raises(ValueError, match=r"shape \(h, n, n\)"):
        plotting.attention_heads(torch.rand(2, 3, 4, 4))
    with pytest.raises(ValueError, match="6 heads but 2 titles"):
        plotting.attention_heads(a, titles=["x", "y"])


def test_layer_head_map_writes_every_value():
    values = torch.rand(3, 4)
    ax = plotting.layer_head_map(values, vmax=1.0, title="on [CLS]")
    assert isinstance(ax, Axes)
    texts = [t.get_text() for t in ax.texts if t.get_gid() == "value"]
    assert len(texts) == 12 and texts[0] == f"{float(values[0, 0]):.2f}"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "3"]
    assert ax.images[0].get_clim() == (0.0, 1.0)
    with pytest.raises(ValueError, match=r"\(layers, heads\) table"):
        plotting.layer_head_map(torch.rand(2, 3, 4))


def test_parameter_bars_show_shares_of_each_total():
    small = inspect_stack.parameter_breakdown(EncoderConfig())
    big = inspect_stack.parameter_breakdown(
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


# --- check_parameter_count: wrong answers a learner might write --------------------------------


def _count(c, *, bias=1, ln=2, pos=True, seg=True, n_att=4, heads=False, d_ff=None,
           pooler=None, final=None, blocks=None, emb=True):
    d, f = c.d_model, c.d_ff if d_ff is None else d_ff
    embeddings = c.vocab_size * d + pos * c.n_max * d + seg * c.n_segments * d + ln * d
    attention = n_att * (d * d + bias * d) * (c.n_heads if heads else 1)
    block = attention + (d * f + bias * f) + (f * d + bias * d) + 2 * ln * d
    has_pooler = c.pooler if pooler is None else pooler
    has_final = c.norm == "pre" if final is None else final
    return (emb * embeddings + (c.n_layers if blocks is None else blocks) * block
            + has_final * ln * d + has_pooler * (d * d + bias * d))


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda c: _count(c, bias=0), "left out the biases"),
        (lambda c: _count(c, ln=0), "left out the LayerNorms"),
        (lambda c: _count(c, ln=1), "d parameters per LayerNorm"),
        (lambda c: _count(c, pos=False), "left out the position embeddings"),
        (lambda c: _count(c, seg=False), "left out the segment embeddings"),
        (lambda c: _count(c, pos=False, seg=False), "position and segment embeddings"),
        (lambda c: _count(c, n_att=3), "fourth, W_O"),
        (lambda c: _count(c, heads=True), "multiply the attention parameters by the number"),
        (lambda c: _count(c, d_ff=4 * c.d_model), "use config.d_ff"),
        (lambda c: _count(c, pooler=False), "forgot the pooler"),
        (lambda c: _count(c, pooler=True), "even when config.pooler is False"),
        (lambda c: _count(c, final=False), "forgot the final LayerNorm"),
        (lambda c: _count(c, final=True), "post-LN stack too"),
        (lambda c: _count(c, blocks=1), "you count one block"),
        (lambda c: _count(c, emb=False), "count only the blocks"),
        (lambda c: float(count_parameters(c)) + 0.5, "not a whole number"),
        (lambda c: str(count_parameters(c)), "returned a str"),
        (lambda c: c.hidden_size, "your function raised AttributeError"),
    ],
)
def test_parameter_count_names_the_mistake(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check_parameter_count(wrong)


def test_parameter_count_accepts_the_reference_and_its_variants(capsys):
    assert check_parameter_count(count_parameters) is True
    assert "✓ parameter count" in capsys.readouterr().out
    assert check_parameter_count(lambda c: sum(inspect_stack.parameter_breakdown(c).values()))
    assert check_parameter_count(lambda c: torch.tensor(count_parameters(c)))  # an int tensor
    assert check_parameter_count(lambda c: float(count_parameters(c)))  # a whole float


def test_an_unknown_count_mistake_points_at_the_part_it_matches():
    def no_embedding_layer_norm(c):  # a mistake with no entry of its own
        return count_parameters(c) - 2 * c.d_model

    with pytest.raises(CheckFailed, match=r"short by 768\..*parameter_breakdown\(config\)"):
        check_parameter_count(no_embedding_layer_norm)

    def no_pooler_bias(c):
        return count_parameters(c) - (c.d_model if c.pooler else 0)

    with pytest.raises(CheckFailed, match="short by 384"):
        check_parameter_count(no_pooler_bias)


def test_a_count_short_by_some_biases_names_them():
    def no_block_biases(c):  # the pooler keeps its bias: not the "left out the biases" entry
        d, f, L = c.d_model, c.d_ff, c.n_layers
        return count_parameters(c) - L * (4 * d + f + d)

    with pytest.raises(CheckFailed, match=r"biases of the blocks' six linear layers"):
        check_parameter_count(no_block_biases)

    def no_attention_biases(c):
        return count_parameters(c) - c.n_layers * 4 * c.d_model

    with pytest.raises(CheckFailed, match=r"attention projections, L 4d"):
        check_parameter_count(no_attention_biases)


def test_parameter_count_refuses_a_non_function():
    with pytest.raises(CheckFailed, match="without calling it"):
        check_parameter_count(22_713_216)


# --- check_layer_norm: wrong answers a learner might write -------------------------------------


def _ln(x, gain, bias, eps, dim=-1, correction=0, eps_inside=True, with_eps=True):
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, correction=correction)
    if not with_eps:
        std = var.sqrt()
    else:
        std = (var + eps).sqrt() if eps_inside else var.sqrt() + eps
    return (x - mean) / std * gain + bias


def layer_norm_reference(x, gain, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), gain, bias, eps)


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda x, g, b, e: _ln(x, g, b, e, dim=-2), "over the sequence axis"),
        (lambda x, g, b, e: _ln(x, g, b, e, dim=0), "over the first axis"),
        (lambda x, g, b, e: _ln(x, g, b, e, dim=tuple(range(x.dim()))), "the whole tensor"),
        (lambda x, g, b, e: _ln(x, g, b, e, correction=1), "unbiased one"),
        (lambda x, g, b, e: _ln(x, g, b, e, with_eps=False), "leave eps out"),
        (lambda x, g, b, e: _ln(x, g, b, e, eps_inside=False), "outside the square root"),
        (lambda x, g, b, e: (x - x.mean(-1, keepdim=True))
         / (x.var(-1, keepdim=True, correction=0) + e) * g + b, "divide by the variance"),
        (lambda x, g, b, e: x / (x.var(-1, keepdim=True, correction=0) + e).sqrt() * g + b,
         "never subtract the mean"),
        (lambda x, g, b, e: x / (x.pow(2).mean(-1, keepdim=True) + e).sqrt() * g + b,
         "that is RMSNorm"),
        (lambda x, g, b, e: F.layer_norm(x, (x.shape[-1],), eps=e), "without the learned gain"),
        (lambda x, g, b, e: F.layer_norm(x, (x.shape[-1],), b, g, e), "swapped gain and bias"),
        (lambda x, g, b, e: F.layer_norm(x, (x.shape[-1],), eps=e) + b, "never use the gain"),
        (lambda x, g, b, e: F.layer_norm(x, (x.shape[-1],), eps=e) * g, "never add the bias"),
        (lambda x, g, b, e: F.layer_norm(x, (x.shape[-1],), g, b, e)[..., :-1],
         "keep the reduced axis"),
        (lambda x, g, b, e: "normalised", "not a tensor"),
    ],
)
def test_layer_norm_names_the_mistake(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check_layer_norm(wrong)


def test_layer_norm_accepts_the_reference_and_a_hand_written_one():
    assert check_layer_norm(layer_norm_reference) is True
    assert check_layer_norm(lambda x, g, b, e: _ln(x, g, b, e))
    # numpy in, numpy out is not the contract, but a numpy result is converted
    assert check_layer_norm(lambda x, g, b, e: layer_norm_reference(x, g, b, e).numpy())


def test_layer_norm_fallback_names_nan_and_the_size_of_the_difference():
    def nan_and_unbiased(x, g, b, e):  # two mistakes at once: no single entry reproduces it
        return _ln(x, g, b, e, correction=1, with_eps=False)

    with pytest.raises(CheckFailed, match="output has NaN"):
        check_layer_norm(nan_and_unbiased)

    def slightly_off(x, g, b, e):
        return layer_norm_reference(x, g, b, e) + 1e-3

    with pytest.raises(CheckFailed, match=r"differs from .* by up to 0\.001"):
        check_layer_norm(slightly_off)

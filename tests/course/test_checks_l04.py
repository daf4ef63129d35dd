"""Lesson 4's checkers: check_parameter_count, check_layer_norm and check_encoder_block."""

import re

import pytest
import torch
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.attention import MultiHeadAttention
from encoderlab.course.checks import (
    CheckFailed,
    check_encoder_block,
    check_layer_norm,
    check_parameter_count,
)
from encoderlab.encoder import EncoderBlock, EncoderConfig, count_parameters
from encoderlab.lessons import l04_count as counting

# --- check_parameter_count: wrong answers a learner might write --------------------------------


def _count(c, *, bias=1, ln=2, pos=True, seg=True, n_att=4, heads=False, d_ff=None,
           pooler=None, final=None, blocks=None, emb=True, n_segments=None):
    d, f = c.d_model, c.d_ff if d_ff is None else d_ff
    n_segments = c.n_segments if n_segments is None else n_segments
    embeddings = c.vocab_size * d + pos * c.n_max * d + seg * n_segments * d + ln * d
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
        (lambda c: _count(c, n_segments=2), r"^you assume 2 segments .* config\.n_segments"),
        (lambda c: _count(c, n_att=3), "fourth, W_O"),
        (lambda c: _count(c, heads=True), "multiply the attention parameters by the number"),
        (lambda c: _count(c, d_ff=4 * c.d_model), "assume the MLP is 4d wide"),
        (lambda c: _count(c, pooler=False), "forgot the pooler"),
        (lambda c: _count(c, pooler=True), "even when config.pooler is False"),
        (lambda c: _count(c, final=False), "forgot the final LayerNorm"),
        (lambda c: _count(c) - (2 * c.d_model if c.norm == "pre" else 0),  # GPT-2 style
         "dropped the LayerNorm after the embeddings for pre-LN"),
        (lambda c: _count(c) - c.n_layers * 2 * c.d_model, "one LayerNorm per block"),
        (lambda c: _count(c) - c.n_layers * c.d_model, "the bias of W_O"),
        (lambda c: _count(c, final=True), "post-LN stack too"),
        (lambda c: _count(c, blocks=1), "you count one block"),
        (lambda c: _count(c, emb=False), "count only the blocks"),
        (lambda c: float(count_parameters(c)) + 0.5, "not a whole number"),
        (lambda c: str(count_parameters(c)), "returned a str"),
        (lambda c: c.hidden_size, "your function raised AttributeError"),
    ],
)
def test_parameter_count_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_parameter_count, wrong)))


def test_parameter_count_accepts_the_reference_and_its_variants(capsys):
    assert check_parameter_count(count_parameters) is True
    assert "✓ parameter count" in capsys.readouterr().out
    assert check_parameter_count(lambda c: sum(counting.parameter_breakdown(c).values()))
    assert check_parameter_count(lambda c: torch.tensor(count_parameters(c)))  # an int tensor
    assert check_parameter_count(lambda c: float(count_parameters(c)))  # a whole float


def test_a_missing_embedding_layer_norm_is_not_taken_for_the_segment_table():
    # on MiniLM both are 2d = 768; a case with 3 segments tells them apart
    def no_embedding_layer_norm(c):
        return count_parameters(c) - 2 * c.d_model

    with pytest.raises(CheckFailed) as failed:
        check_parameter_count(no_embedding_layer_norm)
    message = str(failed.value)
    assert "LayerNorm after the embeddings" in message and "segment" not in message


def test_an_unknown_count_mistake_points_at_the_part_it_matches():
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
        (lambda x, g, b, e: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + e) * g + b,
         "Annotated Transformer's LayerNorm"),  # unbiased std, eps outside
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
         "LayerNorm keeps the shape"),
        (lambda x, g, b, e: "normalised", "not a tensor"),
    ],
)
def test_layer_norm_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_layer_norm, wrong)))


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


# --- check_encoder_block: a learner's block, written out -----------------------------------------


def encoder_block(h, attention_mask, params, n_heads, eps, *, pre=False, add_after_norm=False,
                  act=F.gelu, attention_residual=True, mlp_residual=True, swap_norms=False,
                  padding=True, unbiased=False, fixed_eps=None, mlp_biases=("w_1", "w_2")):
    """A learner's post-LN block from an EncoderBlock state dict; each keyword is one slip."""
    d = h.shape[-1]
    attention = MultiHeadAttention(d, n_heads)
    attention.load_state_dict({k.removeprefix("attention."): t for k, t in params.items()
                               if k.startswith("attention.")})
    first, second = ("norm_2", "norm_1") if swap_norms else ("norm_1", "norm_2")
    eps = eps if fixed_eps is None else fixed_eps

    def ln(x, name):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=unbiased)
        return (x - mean) / (var + eps).sqrt() * params[f"{name}.weight"] + params[f"{name}.bias"]

    def attend(x):
        real = attention_mask.bool()
        mask = {True: real[:, None, None, :],  # hide the [PAD] keys
                False: None,
                "queries": real[:, None, :, None],  # hides the [PAD] queries only
                "inverted": ~real[:, None, None, :],  # True at [PAD]: key_padding_mask habit
                "both": real[:, None, :, None] & real[:, None, None, :]}[padding]
        return attention(x, mask=mask)[0]

    def mlp(x):
        bias = {name: params[f"mlp.{name}.bias"] if name in mlp_biases else None
                for name in ("w_1", "w_2")}
        u = act(F.linear(x, params["mlp.w_1.weight"], bias["w_1"]))
        return F.linear(u, params["mlp.w_2.weight"], bias["w_2"])

    with torch.no_grad():
        if pre:
            h = h + attend(ln(h, first))
            return h + mlp(ln(h, second))
        for f, name, keep in ((attend, first, attention_residual), (mlp, second, mlp_residual)):
            if add_after_norm:
                h = h + ln(f(h), name)
            else:
                h = ln(h + f(h) if keep else f(h), name)
        return h


def test_encoder_block_accepts_the_reference(capsys):
    assert check_encoder_block(encoder_block) is True
    assert "correct on 5 cases" in capsys.readouterr().out

    def with_f_layer_norm(h, attention_mask, params, n_heads, eps):  # (h, None) is accepted
        d = h.shape[-1]
        attention = MultiHeadAttention(d, n_heads)
        attention.load_state_dict({k[len("attention."):]: t for k, t in params.items()
                                   if k.startswith("attention.")})

        def ln(x, name):
            return F.layer_norm(x, (d,), params[f"{name}.weight"], params[f"{name}.bias"], eps)

        with torch.no_grad():
            h = ln(h + attention(h, mask=attention_mask.bool()[:, None, None, :])[0], "norm_1")
            u = F.gelu(F.linear(h, params["mlp.w_1.weight"], params["mlp.w_1.bias"]))
            return ln(h + F.linear(u, params["mlp.w_2.weight"], params["mlp.w_2.bias"]),
                      "norm_2"), None

    assert check_encoder_block(with_f_layer_norm)


def test_encoder_block_accepts_a_mask_that_also_hides_the_padding_queries():
    # right on every real token; the [PAD] rows differ (or are NaN), and nothing reads them
    def both(h, attention_mask, params, n_heads, eps):
        return encoder_block(h, attention_mask, params, n_heads, eps, padding="both")

    case = (torch.randn(2, 4, 8), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]))
    params = EncoderBlock(EncoderConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1,
                                        d_ff=32)).state_dict()
    ours, right = both(*case, params, 2, 1e-12), encoder_block(*case, params, 2, 1e-12)
    assert not torch.allclose(ours[1, 2:], right[1, 2:], equal_nan=True)  # [PAD] rows differ
    assert check_encoder_block(both) is True


def test_encoder_block_forbids_the_library_block(both_passes):
    def with_module(h, attention_mask, params, n_heads, eps):  # the library's block, returned
        d = h.shape[-1]
        config = EncoderConfig(vocab_size=8, d_model=d, n_heads=n_heads, n_layers=1, d_ff=4 * d,
                               layer_norm_eps=eps, dropout=0.0)
        block = EncoderBlock(config).eval()
        block.load_state_dict(params)
        return block(h, mask=masks.padding(attention_mask))

    def in_place(h, attention_mask, params, n_heads, eps):  # right values, written into h
        h.copy_(encoder_block(h, attention_mask, params, n_heads, eps))
        return h

    assert str(both_passes(check_encoder_block, in_place)).startswith(
        "your function changed h in place.")
    original = EncoderBlock.forward
    failure = both_passes(check_encoder_block, with_module)
    assert str(failure).startswith("you called EncoderBlock(...).forward, which this exercise")
    assert failure.fix and EncoderBlock.forward is original


@pytest.mark.parametrize(
    "slip, words",
    [
        ({"pre": True}, r"^your block is pre-LN"),
        ({"add_after_norm": True}, r"^you normalise the sub-layer's output and add the residual"),
        ({"act": F.relu}, r"^your MLP uses ReLU"),
        ({"act": lambda u: F.gelu(u, approximate="tanh")}, r"^your MLP uses the tanh approx"),
        ({"attention_residual": False, "mlp_residual": False}, r"^your block has no residual"),
        ({"attention_residual": False}, r"^the attention sub-layer has no residual"),
        ({"mlp_residual": False}, r"^the MLP sub-layer has no residual"),
        ({"swap_norms": True}, r"^your LayerNorms are swapped"),
        ({"padding": False}, r"^your real tokens attend to the \[PAD\] keys"),
        ({"padding": "queries"}, r"^your real tokens attend to the \[PAD\] keys"),
        ({"padding": "inverted"}, r"^your padding mask is inverted"),
        ({"unbiased": True}, r"^your LayerNorm uses the unbiased variance"),
        ({"fixed_eps": 1e-5}, r"^your LayerNorms ignore the eps argument"),
        ({"fixed_eps": 1e-12}, r"^your LayerNorms ignore the eps argument"),
        ({"mlp_biases": ("w_2",)}, r"^your MLP leaves out the bias of its first layer"),
        ({"mlp_biases": ("w_1",)}, r"^your MLP leaves out the bias of its second layer"),
        ({"mlp_biases": ()}, r"^your MLP leaves out its biases"),
        ({"act": lambda u: u * torch.sigmoid(1.702 * u)}, r"^your MLP uses the sigmoid approx"),
    ],
)
def test_encoder_block_names_the_mistake(slip, words, both_passes):
    def wrong(h, attention_mask, params, n_heads, eps):
        return encoder_block(h, attention_mask, params, n_heads, eps, **slip)

    failure = both_passes(check_encoder_block, wrong)
    assert re.search(words, str(failure)) and failure.fix


def test_encoder_block_shape_and_fallback():
    def mean_over_tokens(h, attention_mask, params, n_heads, eps):
        return encoder_block(h, attention_mask, params, n_heads, eps).mean(dim=1)

    def noisy(h, attention_mask, params, n_heads, eps):
        return encoder_block(h, attention_mask, params, n_heads, eps) + 1e-3

    with pytest.raises(CheckFailed, match=r"^your output has shape .* a block keeps the shape"):
        check_encoder_block(mean_over_tokens)
    with pytest.raises(CheckFailed, match=r"^your output differs from EncoderBlock"):
        check_encoder_block(noisy)

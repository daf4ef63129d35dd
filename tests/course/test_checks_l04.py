"""Lesson 4's checkers: check_parameter_count, check_layer_norm, check_encoder_block and
check_value_contributions."""

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
    check_value_contributions,
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
        (lambda c: _count(c) + c.n_layers * (c.n_heads - 1) * c.d_model,  # b_O per head
         r"W_O's bias once per head"),
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


def test_parameter_count_accepts_an_independent_count_and_its_variants(capsys):
    assert check_parameter_count(_count) is True  # the formula above, written in this file
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
        (lambda x, g, b, e: _ln(x, 1.0, 0.0, e), "without the learned gain"),
        (lambda x, g, b, e: _ln(x, b, g, e), "swapped gain and bias"),
        (lambda x, g, b, e: _ln(x, 1.0, 0.0, e) + b, "never use the gain"),
        (lambda x, g, b, e: _ln(x, 1.0, 0.0, e) * g, "never add the bias"),
        (lambda x, g, b, e: _ln(x, g, b, e)[..., :-1], "LayerNorm keeps the shape"),
        (lambda x, g, b, e: F.layer_norm(x, (x.shape[-1],), g, b, e),
         r"^you called F\.layer_norm"),  # the exercise is to write it
        (lambda x, g, b, e: torch.nn.LayerNorm(x.shape[-1], eps=e)(x),
         r"^you called F\.layer_norm"),
        (lambda x, g, b, e: "normalised", "not a tensor"),
    ],
)
def test_layer_norm_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_layer_norm, wrong)))


def test_layer_norm_accepts_a_hand_written_one():
    assert check_layer_norm(lambda x, g, b, e: _ln(x, g, b, e)) is True
    # numpy in, numpy out is not the contract, but a numpy result is converted
    assert check_layer_norm(lambda x, g, b, e: _ln(x, g, b, e).numpy())
    assert F.layer_norm is not None and torch.layer_norm is not None  # restored afterwards


def test_layer_norm_fallback_names_nan_and_the_size_of_the_difference():
    def nan_and_unbiased(x, g, b, e):  # two mistakes at once: no single entry reproduces it
        return _ln(x, g, b, e, correction=1, with_eps=False)

    with pytest.raises(CheckFailed, match="output has NaN"):
        check_layer_norm(nan_and_unbiased)

    def slightly_off(x, g, b, e):
        return _ln(x, g, b, e) + 1e-3

    with pytest.raises(CheckFailed, match=r"differs from .* by up to 0\.001"):
        check_layer_norm(slightly_off)


# --- check_encoder_block: a learner's block, written out -----------------------------------------


def encoder_block(h, attention_mask, params, n_heads, eps, *, pre=False, add_after_norm=False,
                  act=F.gelu, attention_residual=True, mlp_residual=True, swap_norms=False,
                  padding=True, unbiased=False, fixed_eps=None, mlp_biases=("w_1", "w_2"),
                  port=None):
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
        if port == "stale":  # the second residual reuses the block's input
            x = ln(h + attend(h), first)
            return ln(h + mlp(x), second)
        if port == "no_norm_1":
            x = h + attend(h)
            return ln(x + mlp(x), second)
        if port == "mlp_raw":  # the MLP reads the sum before norm_1
            x = h + attend(h)
            return ln(ln(x, first) + mlp(x), second)
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
        ({"port": "stale"}, r"^your second residual adds the block's input h"),
        ({"port": "no_norm_1"}, r"^you left out norm_1"),
        ({"port": "mlp_raw"}, r"^your MLP reads the un-normalised sum"),
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


# --- check_value_contributions: ||A_ij f_k(h_j)||, written out independently -------------------


def contributions(attention, h, weights, *, w_o=True, value_bias=True, transpose=True,
                  interleave=False, output_bias=False, by_query=False):
    """A learner's loop over heads and keys; each keyword is one slip."""
    b, n, d = h.shape
    heads, d_k = attention.n_heads, attention.d_k
    W_V, W_O = attention.w_v.weight.T, attention.w_o.weight  # (d_in, d_out), (out, in)
    W_O = W_O.T if transpose else W_O
    out = torch.zeros(b, heads, n, n)
    with torch.no_grad():
        v = h @ W_V + (attention.w_v.bias if value_bias else 0)  # (b, n, d)
        for k in range(heads):
            cols = (torch.arange(d_k) * heads + k) if interleave else torch.arange(k * d_k,
                                                                                   (k + 1) * d_k)
            f = v[..., cols]  # (b, n, d_k)
            if w_o:
                f = f @ W_O[cols] + (attention.w_o.bias if output_bias else 0)  # (b, n, d)
            size = f.norm(dim=-1)  # (b, n)
            for i in range(n):
                for j in range(n):
                    out[:, k, i, j] = weights[:, k, i, j] * size[:, i if by_query else j]
    return out


def test_value_contributions_accepts_a_loop_and_matches_the_sum_it_measures(capsys):
    assert check_value_contributions(contributions) is True
    assert "correct on 4 cases" in capsys.readouterr().out
    # independent check of the meaning: the head's output row is sum_j A_ij f_k(h_j), so its
    # norm is at most the sum of the entries (triangle inequality), equal for one key
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 2).eval()
    h = torch.randn(1, 3, 8)
    with torch.no_grad():
        weights = attention(h)[1]
    one_hot = torch.zeros_like(weights)
    one_hot[..., 1] = 1.0  # every query takes key 1 only
    got = contributions(attention, h, one_hot)
    with torch.no_grad():
        v = attention.w_v(h)[0, 1, :4] @ attention.w_o.weight.T[:4]  # head 1, key 1
    assert got[0, 0, 2, 1].item() == pytest.approx(v.norm().item(), rel=1e-5)
    assert got[0, 0, 2, 0].item() == 0.0


@pytest.mark.parametrize(
    "slip, words",
    [
        ({"w_o": False}, r"^you took the norm of the value vector"),
        ({"value_bias": False}, r"^you left out W_V's bias"),
        ({"transpose": False}, r"^you used attention\.w_o\.weight without transposing"),
        ({"interleave": True}, r"^your heads take interleaved columns"),
        ({"output_bias": True}, r"^you added W_O's bias"),
        ({"by_query": True}, r"^you scaled the weights by the size of the query's f"),
    ],
)
def test_value_contributions_names_the_mistake(slip, words, both_passes):
    def wrong(attention, h, weights):
        return contributions(attention, h, weights, **slip)

    failure = both_passes(check_value_contributions, wrong)
    assert re.search(words, str(failure)) and failure.fix


def test_value_contributions_shape_and_forbidden_reference():
    from encoderlab.lessons import l04_inspect_stack

    with pytest.raises(CheckFailed, match=r"^your output has shape"):
        check_value_contributions(lambda a, h, w: contributions(a, h, w).sum(dim=-1))
    with pytest.raises(CheckFailed, match=r"^you called l04_inspect_stack\.value_contributions"):
        check_value_contributions(
            lambda a, h, w: l04_inspect_stack.value_contributions(a, h, w))

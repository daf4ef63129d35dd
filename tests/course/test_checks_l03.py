"""Lesson 3's checkers: check_attention, check_causal_mask, check_padding_mask and
check_multi_head_attention."""

import math
import re

import pytest
import torch
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.attention import MultiHeadAttention, scaled_dot_product_attention
from encoderlab.course.checks import (
    CheckFailed,
    check_attention,
    check_causal_mask,
    check_multi_head_attention,
    check_padding_mask,
)

# --- Attention: wrong answers a learner might write ---------------------------------------------


def attention_no_scale(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, dim=-1)) @ v


def attention_scale_by_dk(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, dim=-1)) @ v


def attention_scale_by_sqrt_dv(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, dim=-1)) @ v


def attention_softmax_over_queries(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, dim=-2)) @ v


def attention_inverted_mask(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))  # hides where True
    return torch.softmax(s, dim=-1) @ v  # rows that were all True become NaN too


def attention_ignores_mask(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


def attention_nan_rows(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v  # a row of only -inf is NaN


def attention_finite_fill(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return torch.softmax(s, dim=-1) @ v


def attention_mask_after_softmax(q, k, v, mask=None):
    a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        a = a * mask
    return a @ v


def attention_adds_bool_mask(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask
    return torch.softmax(s, dim=-1) @ v


def attention_returns_weights(q, k, v, mask=None):
    out, a = scaled_dot_product_attention(q, k, v, mask)
    return a


def attention_transposed_output(q, k, v, mask=None):
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return out.transpose(-2, -1)


def attention_that_raises(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # noqa: F821 (d_k is never defined)
    return torch.softmax(s, dim=-1) @ v


def test_attention_accepts_the_reference(capsys):
    assert check_attention(scaled_dot_product_attention) is True  # returns (out, weights)
    assert "✓" in capsys.readouterr().out

    def output_only(q, k, v, mask=None):
        return scaled_dot_product_attention(q, k, v, mask)[0]

    assert check_attention(output_only)


@pytest.mark.parametrize(
    "wrong, words",
    [
        (attention_no_scale, "not scaled"),
        (attention_scale_by_dk, r"divide the scores by d_k, but .* sqrt\(d_k\)"),
        (attention_scale_by_sqrt_dv, r"sqrt\(d_v\), the width of V"),
        (attention_softmax_over_queries, "over the queries"),
        (attention_inverted_mask, "attends where the mask is False"),
        (attention_ignores_mask, "mask is ignored"),
        (attention_nan_rows, "gives NaN"),
        (attention_finite_fill, "plain average of V"),
        (attention_mask_after_softmax, "after the softmax"),
        (attention_adds_bool_mask, "add the boolean mask"),
        (attention_returns_weights, "returns the attention weights"),
        (attention_transposed_output, r"has shape .* but should have shape"),
        (attention_that_raises, "your function raised NameError: name 'd_k' is not defined"),
    ],
)
def test_attention_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_attention, wrong)))


def test_a_raising_function_is_reported_with_its_line():
    with pytest.raises(CheckFailed) as caught:
        check_attention(attention_that_raises)
    message = str(caught.value)
    assert "attention_that_raises" in message and "math.sqrt(d_k)" in message
    assert caught.value.__cause__ is None  # reported in words, not chained


def test_not_a_function_is_explained():
    with pytest.raises(CheckFailed, match="without calling it"):
        check_attention(torch.zeros(3))


# --- The causal mask --------------------------------------------------------------------------


def causal_transposed(n):
    return torch.ones(n, n, dtype=torch.bool).triu()


def causal_without_diagonal(n):
    return torch.ones(n, n, dtype=torch.bool).tril(diagonal=-1)


def causal_inverted(n):
    return ~torch.ones(n, n, dtype=torch.bool).tril()


def causal_bidirectional(n):
    return torch.ones(n, n, dtype=torch.bool)


def causal_float(n):
    return torch.ones(n, n).tril()


def causal_additive(n):
    return torch.zeros(n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))


def causal_batched(n):
    return torch.ones(1, n, n, dtype=torch.bool).tril()


def causal_raises(n):
    return torch.tril(torch.ones(n, n), dtype=torch.bool)


def test_causal_mask_accepts_the_reference():
    assert check_causal_mask(masks.causal) is True
    assert check_causal_mask(lambda n: torch.tril(torch.ones(n, n)).bool().numpy())  # numpy is ok


@pytest.mark.parametrize(
    "wrong, words",
    [
        (causal_transposed, "upper-triangular"),
        (causal_without_diagonal, "may attend to itself"),
        (causal_inverted, "wrong way round"),
        (causal_bidirectional, "bidirectional"),
        (causal_float, r"dtype torch.float32, but masks in this course are boolean"),
        (causal_additive, "looks additive"),
        (causal_batched, r"shape \(1, 5, 5\) for n = 5; the causal mask is \(n, n\)"),
        (causal_raises, "your function raised TypeError"),
    ],
)
def test_causal_mask_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_causal_mask, wrong)))


# --- The padding mask -------------------------------------------------------------------------


def padding_on_rows(attention_mask):
    return attention_mask.bool()[:, None, :, None]


def padding_inverted(attention_mask):
    return (attention_mask == 0)[:, None, None, :]


def padding_rows_and_columns(attention_mask):
    real = attention_mask.bool()
    return real[:, None, :, None] & real[:, None, None, :]


def padding_ignored(attention_mask):
    b, n = attention_mask.shape
    return torch.ones(b, 1, n, n, dtype=torch.bool)


def padding_kept_2d(attention_mask):
    return attention_mask.bool()


def padding_one_axis_short(attention_mask):
    return attention_mask.bool()[:, None, :]  # (b, 1, n)


def padding_int(attention_mask):
    return attention_mask[:, None, None, :]


def padding_raises(attention_mask):
    return attention_mask.bool().unsqueeze(1, 2)


def test_padding_mask_accepts_the_reference():
    assert check_padding_mask(masks.padding) is True
    assert check_padding_mask(lambda am: (am == 1).view(am.shape[0], 1, 1, -1))


@pytest.mark.parametrize(
    "wrong, words",
    [
        (padding_on_rows, r"padding queries \(rows\) instead of the padding keys"),
        (padding_inverted, "wrong way round"),
        (padding_rows_and_columns, "only keys need hiding"),
        (padding_ignored, "ignores the attention_mask"),
        (padding_kept_2d, r"keeps the tokenizer's shape \(b, n\)"),
        (padding_one_axis_short, "does not broadcast"),
        (padding_int, r"dtype torch.int64"),
        (padding_raises, "your function raised TypeError"),
    ],
)
def test_padding_mask_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_padding_mask, wrong)))


def test_an_unknown_mistake_still_says_where():
    def last_row_hidden(n):  # no known mistake: a lower triangle missing its last row
        m = torch.ones(n, n, dtype=torch.bool).tril()
        m[-1] = False
        return m

    with pytest.raises(CheckFailed, match=r"differs from the reference in .* query i=4, key j=0"):
        check_causal_mask(last_row_hidden)


def test_checked_inputs_are_not_changed_by_the_learner():
    def in_place(q, k, v, mask=None):  # scales q in place: the checker passes copies
        q /= math.sqrt(q.shape[-1])
        return scaled_dot_product_attention(q * math.sqrt(q.shape[-1]), k, v, mask)

    assert check_attention(in_place)


# --- Multi-head self-attention from its weights -------------------------------------------------


def _linear(x, params, name):
    return F.linear(x, params[f"{name}.weight"], params[f"{name}.bias"])


def self_attention(x, attention_mask, params, n_heads, *, split_ok=True, merge_ok=True,
                   d_scale=False, rows=False, ignore_mask=False, project=True, as_stored=False,
                   biases=True, interleave_split=False, interleave_merge=False, softmax_dim=-1,
                   no_scale=False, rows_and_keys=False, zero_after=False, inverted=False,
                   n_scale=False, bias_o=True):
    """A learner's multi-head self-attention, written out with @; each keyword is one slip."""
    b, n, d = x.shape
    d_k = d // n_heads

    def linear(t, name):
        w = params[f"{name}.weight"]
        with_bias = biases and (bias_o or name != "w_o")
        return t @ (w if as_stored else w.T) + (params[f"{name}.bias"] if with_bias else 0)

    def split(t):
        if interleave_split:
            return t.view(b, n, d_k, n_heads).permute(0, 3, 1, 2)
        if split_ok:
            return t.view(b, n, n_heads, d_k).transpose(1, 2)
        return t.view(b, n_heads, n, d_k)

    q, k, v = (split(linear(x, name)) for name in ("w_q", "w_k", "w_v"))
    s = q @ k.transpose(-2, -1) / (1.0 if no_scale else math.sqrt(d if d_scale else d_k))
    if n_scale:  # sqrt(n_kv) in place of sqrt(d_k)
        s = s * math.sqrt(d_k) / math.sqrt(n)
    real = attention_mask.bool()
    if rows_and_keys:
        s = s.masked_fill(~(real[:, None, :, None] & real[:, None, None, :]), float("-inf"))
    elif not (ignore_mask or zero_after):
        hide = ~real[:, None, :, None] if rows else ~real[:, None, None, :]
        if inverted:  # attention_mask == 1 read as "hide"
            hide = real[:, None, None, :]
        s = s.masked_fill(hide, float("-inf"))
    a = torch.softmax(s, dim=softmax_dim)  # NaN rows when rows are hidden
    if zero_after:
        a = a * real[:, None, None, :]
    if rows_and_keys:
        a = torch.nan_to_num(a)
    out = a @ v  # (b, h, n, d_k)
    if interleave_merge:
        out = out.permute(0, 2, 3, 1).reshape(b, n, d)
    else:
        out = out.transpose(1, 2).reshape(b, n, d) if merge_ok else out.reshape(b, n, d)
    return linear(out, "w_o") if project else out


def self_attention_heads_shape(x, attention_mask, params, n_heads):
    b, n, d = x.shape
    q, k, v = (_linear(x, params, name).view(b, n, n_heads, -1).transpose(1, 2)
               for name in ("w_q", "w_k", "w_v"))
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def self_attention_noisy(x, attention_mask, params, n_heads):
    return self_attention(x, attention_mask, params, n_heads) + 1e-2


def test_multi_head_attention_accepts_the_reference(capsys):
    assert check_multi_head_attention(self_attention) is True
    assert "correct on 5 cases" in capsys.readouterr().out

    def with_f_linear(x, attention_mask, params, n_heads):  # F.linear, (out, weights) returned
        b, n, d = x.shape
        q, k, v = (_linear(x, params, name).view(b, n, n_heads, -1).transpose(1, 2)
                   for name in ("w_q", "w_k", "w_v"))
        s = (q @ k.transpose(-2, -1)) * (d // n_heads) ** -0.5
        a = s.masked_fill(attention_mask[:, None, None, :] == 0, -1e9).softmax(-1)
        return _linear((a @ v).transpose(1, 2).flatten(2), params, "w_o"), a

    assert check_multi_head_attention(with_f_linear)


def test_multi_head_attention_forbids_the_library(both_passes):
    def with_module(x, attention_mask, params, n_heads):  # the library's module, weights copied
        mha = MultiHeadAttention(x.shape[-1], n_heads)
        mha.load_state_dict(params)
        return mha(x, mask=masks.padding(attention_mask))

    def with_fused(x, attention_mask, params, n_heads):
        b, n, d = x.shape
        q, k, v = (_linear(x, params, name).view(b, n, n_heads, -1).transpose(1, 2)
                   for name in ("w_q", "w_k", "w_v"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=masks.padding(attention_mask))
        return _linear(out.transpose(1, 2).reshape(b, n, d), params, "w_o")

    def with_ours(x, attention_mask, params, n_heads):  # the name imported into this module
        b, n, d = x.shape
        q, k, v = (_linear(x, params, name).view(b, n, n_heads, -1).transpose(1, 2)
                   for name in ("w_q", "w_k", "w_v"))
        out, _ = scaled_dot_product_attention(q, k, v, masks.padding(attention_mask))
        return _linear(out.transpose(1, 2).reshape(b, n, d), params, "w_o")

    def swallowing(x, attention_mask, params, n_heads):  # tries the fused kernel, falls back
        try:
            return with_fused(x, attention_mask, params, n_heads)
        except Exception:
            return self_attention(x, attention_mask, params, n_heads)

    original = (F.scaled_dot_product_attention, MultiHeadAttention.forward,
                scaled_dot_product_attention)
    for fn, name in [(with_module, "MultiHeadAttention"),
                     (with_fused, "F.scaled_dot_product_attention"),
                     (with_ours, "encoderlab.attention.scaled_dot_product_attention"),
                     (swallowing, "F.scaled_dot_product_attention")]:
        failure = both_passes(check_multi_head_attention, fn)
        assert str(failure).startswith(f"you called {name}")
        assert "asks you to write yourself" in failure.diagnosis and failure.fix
    assert (F.scaled_dot_product_attention, MultiHeadAttention.forward,
            scaled_dot_product_attention) == original  # restored


@pytest.mark.parametrize(
    "slip, words",
    [
        ({"split_ok": False}, r"^your heads are cut from the wrong axis"),
        ({"merge_ok": False}, r"^your heads are merged along the wrong axis"),
        ({"d_scale": True}, r"^you scale the scores by sqrt\(d_model\)"),
        ({"rows": True}, r"^your padding mask hides rows \(padding queries\)"),
        ({"ignore_mask": True}, r"^your output ignores the attention_mask"),
        ({"project": False}, r"^your output is the concatenated heads without the output"),
        ({"as_stored": True}, r"^you multiply by the weights as stored, x @ W"),
        ({"biases": False}, r"^your projections leave out the biases"),
        ({"interleave_split": True}, r"^your heads are split as \(b, n, d_k, h\)"),
        ({"interleave_merge": True}, r"^your heads are merged as \(b, n, d_k, h\)"),
        ({"interleave_split": True, "interleave_merge": True},
         r"^your heads are split and merged as \(b, n, d_k, h\)"),
        ({"softmax_dim": -2}, r"^your softmax normalises over the queries"),
        ({"no_scale": True}, r"^your scores are not scaled"),
        ({"rows_and_keys": True}, r"^only your \[PAD\] query rows differ"),
        ({"zero_after": True}, r"^you zero the \[PAD\] keys' weights after the softmax"),
        # the learner's plain reshape, (b, n, d) -> (b, h, n, d_k) and back, no transpose
        ({"split_ok": False, "merge_ok": False}, r"^your heads are split and merged with a plain"),
        ({"inverted": True}, r"^your padding mask is inverted: it hides the real tokens"),
        ({"n_scale": True}, r"^you scale the scores by sqrt\(n\), the number of keys"),
        ({"softmax_dim": 1}, r"^your softmax runs over the heads axis"),
        ({"bias_o": False}, r"^your output projection leaves out its bias"),
    ],
)
def test_multi_head_attention_names_the_mistake(slip, words, both_passes):
    def wrong(x, attention_mask, params, n_heads):
        return self_attention(x, attention_mask, params, n_heads, **slip)

    failure = both_passes(check_multi_head_attention, wrong)
    assert re.search(words, str(failure)) and failure.fix


def test_multi_head_attention_shape_and_fallback():
    with pytest.raises(CheckFailed, match=r"^your output has the heads' shape \(b, h, n, d_k\)"):
        check_multi_head_attention(self_attention_heads_shape)
    with pytest.raises(CheckFailed, match=r"^your output differs from MultiHeadAttention.*"
                                          r"every query row differs"):
        check_multi_head_attention(self_attention_noisy)


def test_multi_head_attention_fallback_says_which_rows(both_passes):
    def pad_rows_off(x, attention_mask, params, n_heads):  # only the [PAD] queries' rows wrong
        out = self_attention(x, attention_mask, params, n_heads)
        return out + 0.5 * (attention_mask == 0)[:, :, None]

    failure = both_passes(check_multi_head_attention, pad_rows_off)
    assert failure.diagnosis.startswith("only your [PAD] query rows differ") and failure.fix

    def one_row_off(x, attention_mask, params, n_heads):
        out = self_attention(x, attention_mask, params, n_heads).clone()
        out[0, 1] += 0.5
        return out

    def scaled_in_place(x, attention_mask, params, n_heads):  # right output, x changed
        out = self_attention(x, attention_mask, params, n_heads)
        x.mul_(2)
        return out

    assert str(both_passes(check_multi_head_attention, scaled_in_place)).startswith(
        "your function changed x in place.")
    failure = both_passes(check_multi_head_attention, one_row_off)
    assert "1 of 10 query rows differ, the first at (sequence, position) (0, 1)" in str(failure)

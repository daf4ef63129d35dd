"""Lesson 3's checkers: check_attention, check_causal_mask, check_padding_mask and
check_multi_head_attention."""

import math

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
def test_attention_names_the_mistake(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check_attention(wrong)


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
        (causal_float, r"dtype torch.float32.*\.bool\(\)"),
        (causal_additive, "looks additive"),
        (causal_batched, r"shape \(1, 5, 5\) for n = 5; the causal mask is \(n, n\)"),
        (causal_raises, "your function raised TypeError"),
    ],
)
def test_causal_mask_names_the_mistake(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check_causal_mask(wrong)


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
def test_padding_mask_names_the_mistake(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check_padding_mask(wrong)


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
                   d_scale=False, rows=False, ignore_mask=False, project=True):
    """A learner's multi-head self-attention, written out; each keyword is one slip."""
    b, n, d = x.shape
    d_k = d // n_heads

    def split(t):
        if split_ok:
            return t.view(b, n, n_heads, d_k).transpose(1, 2)
        return t.view(b, n_heads, n, d_k)

    q, k, v = (split(_linear(x, params, name)) for name in ("w_q", "w_k", "w_v"))
    s = q @ k.transpose(-2, -1) / math.sqrt(d if d_scale else d_k)
    real = attention_mask.bool()
    if not ignore_mask:
        hide = ~real[:, None, :, None] if rows else ~real[:, None, None, :]
        s = s.masked_fill(hide, float("-inf"))
    out = torch.softmax(s, dim=-1) @ v  # (b, h, n, d_k); NaN rows when rows are hidden
    out = out.transpose(1, 2).reshape(b, n, d) if merge_ok else out.reshape(b, n, d)
    return _linear(out, params, "w_o") if project else out


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

    def with_module(x, attention_mask, params, n_heads):  # the library's module, weights copied
        mha = MultiHeadAttention(x.shape[-1], n_heads)
        mha.load_state_dict(params)
        return mha(x, mask=masks.padding(attention_mask))  # (out, weights) is accepted

    assert check_multi_head_attention(with_module)


@pytest.mark.parametrize(
    "slip, words",
    [
        ({"split_ok": False}, r"^your heads are cut from the wrong axis"),
        ({"merge_ok": False}, r"^your heads are merged along the wrong axis"),
        ({"d_scale": True}, r"^you scale the scores by sqrt\(d_model\)"),
        ({"rows": True}, r"^your padding mask hides rows \(padding queries\)"),
        ({"ignore_mask": True}, r"^your output ignores the attention_mask"),
        ({"project": False}, r"^your output is the concatenated heads without the output"),
    ],
)
def test_multi_head_attention_names_the_mistake(slip, words):
    def wrong(x, attention_mask, params, n_heads):
        return self_attention(x, attention_mask, params, n_heads, **slip)

    with pytest.raises(CheckFailed, match=words):
        check_multi_head_attention(wrong)


def test_multi_head_attention_shape_and_fallback():
    with pytest.raises(CheckFailed, match=r"^your output has the heads' shape \(b, h, n, d_k\)"):
        check_multi_head_attention(self_attention_heads_shape)
    with pytest.raises(CheckFailed, match=r"^your output differs from MultiHeadAttention"):
        check_multi_head_attention(self_attention_noisy)

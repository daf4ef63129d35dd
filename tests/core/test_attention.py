"""Properties of scaled dot-product and multi-head attention (Lesson 3)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.attention import MultiHeadAttention, scaled_dot_product_attention

dims = st.tuples(
    st.integers(1, 3),  # b
    st.integers(1, 3),  # h
    st.integers(1, 9),  # n_q
    st.integers(1, 9),  # n_kv
    st.sampled_from([1, 4, 8]),  # d_k
)


def _qkv(b, h, n_q, n_kv, d_k, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n_q, d_k, generator=g)
    k = torch.randn(b, h, n_kv, d_k, generator=g)
    v = torch.randn(b, h, n_kv, d_k, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@settings(max_examples=60, deadline=None)
@given(dims=dims, seed=st.integers(0, 10_000))
def test_rows_sum_to_one_over_the_keys_they_may_attend(dims, seed):
    b, h, n_q, n_kv, d_k = dims
    q, k, v = _qkv(*dims, seed=seed)
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, 1, n_q, n_kv, generator=g) < 0.7
    _, a = scaled_dot_product_attention(q, k, v, mask)
    allowed_rows = mask.expand_as(a).any(-1)
    sums = a.sum(-1)
    assert torch.allclose(sums[allowed_rows], torch.ones_like(sums[allowed_rows]), atol=1e-5)
    assert bool((a[~mask.expand_as(a)] == 0).all()), "a masked key received weight"
    assert bool((sums[~allowed_rows] == 0).all()), "a row with no visible key must be all zero"


@settings(max_examples=40, deadline=None)
@given(dims=dims, seed=st.integers(0, 10_000))
def test_equals_torch_sdpa(dims, seed):
    q, k, v = _qkv(*dims, seed=seed)
    out, _ = scaled_dot_product_attention(q, k, v)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5)


def test_scores_are_scaled_by_sqrt_dk():
    q, k, v = _qkv(1, 1, 3, 4, 16)
    _, a = scaled_dot_product_attention(q, k, v)
    manual = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(16), dim=-1)
    assert torch.allclose(a, manual, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 10), i=st.integers(0, 8), seed=st.integers(0, 10_000))
def test_causal_output_ignores_the_future_and_encoder_output_does_not(n, i, seed):
    i = min(i, n - 2)  # a position with at least one token after it
    q, k, v = _qkv(1, 2, n, n, 8, seed=seed)
    k2, v2 = k.clone(), v.clone()
    k2[..., i + 1 :, :] += 1.0  # change every token after position i
    v2[..., i + 1 :, :] += 1.0
    causal = masks.causal(n)
    out, _ = scaled_dot_product_attention(q, k, v, causal)
    out2, _ = scaled_dot_product_attention(q, k2, v2, causal)
    assert torch.allclose(out[..., : i + 1, :], out2[..., : i + 1, :], atol=1e-6)
    enc, _ = scaled_dot_product_attention(q, k, v)
    enc2, _ = scaled_dot_product_attention(q, k2, v2)
    assert (enc[..., i, :] - enc2[..., i, :]).abs().max() > 1e-3


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 8), extra=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_outputs_for_real_tokens_do_not_depend_on_extra_padding(n, extra, seed):
    q, k, v = _qkv(1, 2, n + extra, n + extra, 8, seed=seed)
    short, _ = scaled_dot_product_attention(q[..., :n, :], k[..., :n, :], v[..., :n, :])
    am = torch.cat([torch.ones(1, n), torch.zeros(1, extra)], dim=1)
    padded, _ = scaled_dot_product_attention(q, k, v, masks.padding(am))
    assert torch.allclose(padded[..., :n, :], short, atol=1e-5)
    unmasked, _ = scaled_dot_product_attention(q, k, v)
    assert (unmasked[..., :n, :] - short).abs().max() > 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_row_with_nothing_to_attend_returns_zeros_not_nan(dtype):
    q, k, v = _qkv(1, 1, 3, 3, 4, dtype=dtype)
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    out, a = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == dtype and a.dtype == dtype
    assert not torch.isnan(out).any() and not torch.isnan(a).any()
    assert bool((out[0, 0, 1] == 0).all()) and bool((a[0, 0, 1] == 0).all())


def test_multi_head_fused_path_equals_the_readable_path():
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 7, 32)
    am = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    mask = masks.padding(am)
    with torch.no_grad():
        slow, a = mha(x, mask=mask, need_weights=True)
        fast, none = mha(x, mask=mask, need_weights=False)
    assert none is None and a.shape == (2, 4, 7, 7)
    assert torch.allclose(slow, fast, atol=1e-5)


def test_cross_attention_has_a_rectangular_matrix():
    mha = MultiHeadAttention(16, 2)
    out, a = mha(torch.randn(1, 3, 16), context=torch.randn(1, 5, 16))
    assert out.shape == (1, 3, 16) and a.shape == (1, 2, 3, 5)


def test_n_heads_must_divide_d_model():
    with pytest.raises(ValueError, match=r"n_heads must divide d_model.*d_model=10, n_heads=3"):
        MultiHeadAttention(10, 3)


def test_mask_errors_name_the_problem_and_the_fix():
    q, k, v = _qkv(2, 1, 3, 3, 4)
    with pytest.raises(ValueError, match="must be boolean"):
        scaled_dot_product_attention(q, k, v, torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"does not broadcast.*masks.padding"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, dtype=torch.bool)[:, None])
    with pytest.raises(ValueError, match=r"does not broadcast.*built for this run's lengths: "
                       r"\(3, 3\)"):
        MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"does not broadcast.*must count the keys: 3"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 1, 1, 5, dtype=torch.bool))


def test_shape_errors():
    q, k, v = _qkv(1, 1, 3, 3, 4)
    with pytest.raises(ValueError, match="share the last dimension d_k"):
        scaled_dot_product_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match="same number of positions"):
        scaled_dot_product_attention(q, k, v[..., :2, :])
    with pytest.raises(ValueError, match=r"\(batch, n, d_model=8\)"):
        MultiHeadAttention(8, 2)(torch.randn(3, 8))

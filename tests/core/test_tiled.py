"""Tests for encoderlab.tiled: tiled attention with the online softmax (Lesson 3, §4; Lesson 9).

The oracle is the dense ``attention.scaled_dot_product_attention`` with the same
mask; the tile counts are checked against brute-force counts, and skipping is
checked two ways: by counting the score matmuls, and by putting NaN where only
skipped tiles would read it.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from encoderlab import masks
from encoderlab.attention import scaled_dot_product_attention
from encoderlab.tiled import (
    FULL,
    PARTIAL,
    SKIP,
    classify_tiles,
    live_tiles,
    tile_counts,
    tile_ratio_causal,
    tiled_attention,
)

ATOL = 1e-5  # float32 against the dense reference


def qkv(b=2, h=2, n_q=16, n_kv=None, d_k=8, d_v=None, seed=0, dtype=torch.float32):
    """Random q, k, v of shapes (b, h, n_q, d_k), (b, h, n_kv, d_k), (b, h, n_kv, d_v)."""
    n_kv = n_q if n_kv is None else n_kv
    d_v = d_k if d_v is None else d_v
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n_q, d_k, generator=g)
    k = torch.randn(b, h, n_kv, d_k, generator=g)
    v = torch.randn(b, h, n_kv, d_v, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def lower_triangle(n_q, n_kv):
    """The causal mask aligned top-left: query i sees key j iff j <= i (as torch's is_causal)."""
    return torch.ones(n_q, n_kv, dtype=torch.bool).tril()  # (n_q, n_kv)


def reference(q, k, v, mask=None, causal=False):
    """The dense oracle with the same (combined) mask."""
    if causal:
        tri = lower_triangle(q.shape[-2], k.shape[-2])
        mask = tri if mask is None else mask & tri
    return scaled_dot_product_attention(q, k, v, mask)[0]


def padding_mask(lengths, n):
    """(b, 1, 1, n) padding mask from per-example lengths (0 = every key is padding)."""
    am = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()  # (b, n)
    return masks.padding(am)


def brute_force_live(n_q, n_kv, block_size, mask):
    """Count tiles with at least one True entry, one tile at a time (mask (n_q, n_kv))."""
    count = 0
    for r0 in range(0, n_q, block_size):
        for c0 in range(0, n_kv, block_size):
            count += bool(mask[r0 : r0 + block_size, c0 : c0 + block_size].any())
    return count


# ---------------------------------------------------------------------------
# Equality with the dense reference
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, block_size", [(64, 16), (100, 32), (37, 128), (50, 1), (129, 64)])
def test_full_and_causal_match_reference(n, block_size, causal):
    q, k, v = qkv(n_q=n, seed=n)
    out = tiled_attention(q, k, v, causal=causal, block_size=block_size)
    assert out.shape == q.shape
    assert torch.allclose(out, reference(q, k, v, causal=causal), atol=ATOL)


@pytest.mark.parametrize("n_q, n_kv", [(10, 30), (30, 10), (17, 45), (64, 33)])
def test_causal_is_top_left_aligned_like_torch(n_q, n_kv):
    """For n_q != n_kv, causal=True is torch's is_causal: tril of ones(n_q, n_kv)."""
    q, k, v = qkv(n_q=n_q, n_kv=n_kv, seed=n_q + n_kv)
    out = tiled_attention(q, k, v, causal=True, block_size=8)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(out, expected, atol=ATOL)
    assert torch.allclose(out, reference(q, k, v, causal=True), atol=ATOL)


@pytest.mark.parametrize("causal", [False, True])
def test_padding_with_an_all_padded_example(causal):
    n = 70
    q, k, v = qkv(b=4, n_q=n, d_k=16, d_v=12, seed=1)
    mask = padding_mask([70, 33, 0, 1], n)  # example 2 has no real key at all
    out = tiled_attention(q, k, v, mask=mask, causal=causal, block_size=16)
    assert not torch.isnan(out).any()
    assert torch.allclose(out, reference(q, k, v, mask, causal), atol=ATOL)
    assert torch.equal(out[2], torch.zeros_like(out[2]))  # nothing to attend to: zeros


def test_rows_that_see_nothing_are_zero_in_any_tile():
    """Rows hidden entirely (in PARTIAL tiles, between visible rows) give exact zeros."""
    n = 40
    q, k, v = qkv(n_q=n, seed=2)
    mask = torch.rand(n, n, generator=torch.Generator().manual_seed(3)) > 0.5  # (n, n)
    mask[[0, 5, 17, 39]] = False  # four queries with no visible key
    out = tiled_attention(q, k, v, mask=mask, block_size=8)
    assert torch.allclose(out, reference(q, k, v, mask), atol=ATOL)
    assert torch.equal(out[..., [0, 5, 17, 39], :], torch.zeros_like(out[..., :4, :]))


@settings(max_examples=60, deadline=None)
@given(
    n_q=st.integers(1, 40),
    n_kv=st.integers(1, 40),
    block_size=st.sampled_from([1, 2, 3, 7, 16, 64]),
    causal=st.booleans(),
    kind=st.sampled_from(["none", "padding", "random", "random-per-head"]),
    seed=st.integers(0, 2**16),
)
def test_matches_reference_for_any_mask(n_q, n_kv, block_size, causal, kind, seed):
    b, h = 2, 3
    q, k, v = qkv(b=b, h=h, n_q=n_q, n_kv=n_kv, d_k=4, d_v=5, seed=seed)
    g = torch.Generator().manual_seed(seed)
    if kind == "none":
        mask = None
    elif kind == "padding":
        lengths = torch.randint(0, n_kv + 1, (b,), generator=g).tolist()
        mask = padding_mask(lengths, n_kv)  # (b, 1, 1, n_kv)
    elif kind == "random":
        mask = torch.rand(n_q, n_kv, generator=g) < torch.rand((), generator=g)  # (n_q, n_kv)
    else:
        mask = torch.rand(b, h, n_q, n_kv, generator=g) < 0.3  # (b, h, n_q, n_kv)
    out = tiled_attention(q, k, v, mask=mask, causal=causal, block_size=block_size)
    assert out.shape == (b, h, n_q, 5)
    assert not torch.isnan(out).any()
    assert torch.allclose(out, reference(q, k, v, mask, causal), atol=ATOL)


@pytest.mark.parametrize("causal", [False, True])
def test_large_scores_stay_exact(causal):
    """Scores spread over hundreds: the running max keeps every exponent <= 0, no overflow."""
    n = 96
    q, k, v = qkv(n_q=n, d_k=16, seed=10)
    q = q * 40.0  # scores of size ~ 160: exp would overflow without subtracting the max
    mask = padding_mask([96, 50], n)
    out = tiled_attention(q, k, v, mask=mask, causal=causal, block_size=32)
    assert not torch.isnan(out).any()
    # Scores this large carry float32 rounding of ~1e-5 in any implementation: compare
    # with a float64 oracle, with a tolerance a little above that.
    expected = reference(q.double(), k.double(), v.double(), mask, causal)
    assert torch.allclose(out.double(), expected, atol=1e-4)


def test_two_dimensional_inputs_and_broadcast_batch():
    q, k, v = qkv(b=1, h=1, n_q=20, n_kv=25, seed=4)
    q2, k2, v2 = q[0, 0], k[0, 0], v[0, 0]  # (n, d): no batch dims at all
    out = tiled_attention(q2, k2, v2, causal=True, block_size=8)
    assert torch.allclose(out, reference(q2, k2, v2, causal=True), atol=ATOL)
    # One set of keys and values shared by every head (k, v of shape (b, 1, n, d)).
    q, k, v = qkv(b=2, h=3, n_q=20, n_kv=25, seed=5)
    k1, v1 = k[:, :1], v[:, :1]
    out = tiled_attention(q, k1, v1, block_size=8)
    assert torch.allclose(out, reference(q, k1, v1), atol=ATOL)


@pytest.mark.parametrize("dtype, atol", [(torch.float16, 2e-3), (torch.bfloat16, 1.5e-2)])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_inputs(dtype, atol, causal):
    n = 90
    q, k, v = qkv(b=3, n_q=n, d_k=16, seed=6, dtype=dtype)
    mask = padding_mask([90, 41, 0], n)
    out = tiled_attention(q, k, v, mask=mask, causal=causal, block_size=32)
    assert out.dtype == dtype
    assert not torch.isnan(out).any()
    expected = reference(q.float(), k.float(), v.float(), mask, causal)  # float32 oracle
    assert torch.allclose(out.float(), expected, atol=atol)


# ---------------------------------------------------------------------------
# Tile counts
# ---------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 600), block_size=st.integers(1, 200))
def test_tile_counts_full_and_causal(n, block_size):
    t = math.ceil(n / block_size)
    causal = tile_counts(n, block_size=block_size, causal=True)
    assert causal["computed"] == t * (t + 1) // 2
    assert causal["total"] == t * t
    assert causal["fraction"] == pytest.approx((t + 1) / (2 * t))
    full = tile_counts(n, n, block_size=block_size)
    assert full["computed"] == full["total"] == full["full"] == t * t
    assert full["skipped"] == full["partial"] == 0
    assert tile_ratio_causal(n, block_size) == pytest.approx(full["computed"] / causal["computed"])


def test_tile_ratio_causal_values():
    assert tile_ratio_causal(4096, 128) == pytest.approx(64 / 33)  # T = 32
    assert tile_ratio_causal(100, 128) == 1.0  # one tile: nothing to skip
    assert tile_ratio_causal(300, 100) == pytest.approx(6 / 4)  # T = 3
    assert tile_ratio_causal(301, 100) == pytest.approx(8 / 5)  # T = ceil(3.01) = 4


@settings(max_examples=40, deadline=None)
@given(
    n_q=st.integers(1, 50),
    n_kv=st.integers(1, 50),
    block_size=st.integers(1, 20),
    density=st.floats(0.0, 0.2),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tile_counts_explicit_mask_is_brute_force(n_q, n_kv, block_size, density, causal, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n_q, n_kv, generator=g) < density  # sparse: many empty tiles
    combined = mask & lower_triangle(n_q, n_kv) if causal else mask
    counts = tile_counts(n_q, n_kv, block_size, mask=mask, causal=causal)
    assert counts["computed"] == brute_force_live(n_q, n_kv, block_size, combined)
    assert counts["total"] == math.ceil(n_q / block_size) * math.ceil(n_kv / block_size)
    assert counts["computed"] + counts["skipped"] == counts["total"]
    assert counts["partial"] + counts["full"] == counts["computed"]


def test_tile_counts_reduce_leading_dims_with_any():
    """A tile is live if any (batch, head) needs it: padding (b, 1, 1, n) keeps the longest."""
    n, bs = 100, 16
    mask = padding_mask([10, 40, 0], n)  # (3, 1, 1, 100): keys < 40 matter for someone
    states = classify_tiles(n, n, bs, mask=mask)  # (7, 7)
    assert states[:, :2].eq(FULL).sum() == 0  # example 2 hides everything: never FULL
    assert states[:, :3].eq(PARTIAL).all()  # keys 0..47: visible for some example
    assert states[:, 3:].eq(SKIP).all()  # keys 48..99: padding for every example
    assert tile_counts(n, n, bs, mask=mask)["computed"] == 7 * 3
    assert torch.equal(live_tiles(n, n, bs, mask=mask), states != SKIP)


def test_classify_tiles_causal_states():
    states = classify_tiles(64, 64, 16, causal=True)  # 4 x 4 tiles
    expected = torch.tensor(
        [
            [PARTIAL, SKIP, SKIP, SKIP],
            [FULL, PARTIAL, SKIP, SKIP],
            [FULL, FULL, PARTIAL, SKIP],
            [FULL, FULL, FULL, PARTIAL],
        ],
        dtype=torch.int8,
    )
    assert torch.equal(states, expected)


# ---------------------------------------------------------------------------
# Skipped tiles are really skipped
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_q, n_kv, block_size, kind",
    [(100, 100, 16, "causal"), (70, 130, 32, "causal"), (64, 64, 8, "random"), (80, 80, 16, "pad")],
)
def test_one_score_matmul_per_computed_tile(monkeypatch, n_q, n_kv, block_size, kind):
    """tiled_attention runs torch.bmm once per computed tile: exactly tile_counts' number."""
    q, k, v = qkv(n_q=n_q, n_kv=n_kv, seed=7)
    mask, causal = None, kind == "causal"
    if kind == "random":
        mask = torch.rand(n_q, n_kv, generator=torch.Generator().manual_seed(8)) < 0.01
    elif kind == "pad":
        mask = padding_mask([20, 45], n_kv)
    expected = tile_counts(n_q, n_kv, block_size, mask=mask, causal=causal)
    assert expected["skipped"] > 0  # otherwise this test would prove nothing

    calls = []
    real_bmm = torch.bmm

    def counting_bmm(*args, **kwargs):
        calls.append(1)
        return real_bmm(*args, **kwargs)

    monkeypatch.setattr(torch, "bmm", counting_bmm)
    tiled_attention(q, k, v, mask=mask, causal=causal, block_size=block_size)
    assert len(calls) == expected["computed"]


@pytest.mark.parametrize(
    "n_q, n_kv, block_size, kind, poisoned",
    [
        (40, 100, 16, "causal", slice(48, 100)),  # top-left causal: keys >= 48 unseen
        (64, 64, 16, "block", slice(32, 48)),  # a mask that hides key tile 2 from all rows
        (64, 64, 16, "pad", slice(32, 64)),  # padding: every example is shorter than 32
    ],
)
def test_nan_in_skipped_tiles_never_reaches_the_output(n_q, n_kv, block_size, kind, poisoned):
    """NaN in keys and values that only skipped tiles read: a computed tile would spread it.

    (A hidden key's weight is 0, but 0 * NaN = NaN: the dense reference on the
    poisoned inputs is NaN, so this test fails if those tiles were computed.)
    """
    q, k, v = qkv(n_q=n_q, n_kv=n_kv, seed=9)
    mask, causal = None, kind == "causal"
    if kind == "block":
        mask = torch.ones(n_q, n_kv, dtype=torch.bool)
        mask[:, poisoned] = False
    elif kind == "pad":
        mask = padding_mask([20, 31], n_kv)
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[..., poisoned, :] = float("nan")
    v_bad[..., poisoned, :] = float("nan")

    assert torch.isnan(reference(q, k_bad, v_bad, mask, causal)).any()  # the dense way fails
    out = tiled_attention(q, k_bad, v_bad, mask=mask, causal=causal, block_size=block_size)
    assert not torch.isnan(out).any()
    assert torch.allclose(out, reference(q, k, v, mask, causal), atol=ATOL)


# ---------------------------------------------------------------------------
# Errors say what was expected and what was given
# ---------------------------------------------------------------------------


def test_error_non_boolean_mask():
    q, k, v = qkv(n_q=8)
    with pytest.raises(ValueError, match="boolean"):
        tiled_attention(q, k, v, mask=torch.ones(8, 8))
    with pytest.raises(ValueError, match="boolean"):
        tile_counts(8, mask=torch.ones(8, 8, dtype=torch.long))


def test_error_mask_that_does_not_broadcast():
    q, k, v = qkv(b=2, n_q=8)
    with pytest.raises(ValueError, match="does not broadcast"):
        tiled_attention(q, k, v, mask=torch.ones(2, 8, dtype=torch.bool))  # a raw (b, n) mask
    with pytest.raises(ValueError, match="does not broadcast"):
        tile_counts(8, 8, 4, mask=torch.ones(7, 8, dtype=torch.bool))


@pytest.mark.parametrize("block_size", [0, -3, 2.5, True])
def test_error_bad_block_size(block_size):
    q, k, v = qkv(n_q=8)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        tiled_attention(q, k, v, block_size=block_size)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        tile_counts(8, block_size=block_size)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        tile_ratio_causal(8, block_size)


def test_error_shapes_that_do_not_match():
    q, k, v = qkv(n_q=8)
    with pytest.raises(ValueError, match="d_k"):
        tiled_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="n_kv"):
        tiled_attention(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="leading dimensions"):
        tiled_attention(q, k[:1].expand(3, -1, -1, -1), v[:1].expand(3, -1, -1, -1))
    with pytest.raises(ValueError, match="dtype"):
        tiled_attention(q, k.double(), v)


@pytest.mark.parametrize(
    "name, mask",
    [
        ("prefix-LM", masks.prefix_lm(300, 70)),
        ("sliding window", masks.sliding_window(300, 40)),
        ("causal sliding window", masks.sliding_window(300, 40, causal=True)),
        ("document", masks.document(torch.arange(300) // 97)),
    ],
)
def test_every_structural_mask_equals_dense_and_skips_its_empty_tiles(name, mask):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 300, 16, generator=g) for _ in range(3))
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    out = tiled_attention(q, k, v, mask=mask, block_size=64)
    assert (out - expected).abs().max() <= 1e-5, name
    counts = tile_counts(300, block_size=64, mask=mask)
    # a tile is computed exactly when some (i, j) inside it is allowed
    T = -(-300 // 64)
    padded = torch.zeros(T * 64, T * 64, dtype=torch.bool)
    padded[:300, :300] = mask
    brute = int(padded.view(T, 64, T, 64).any(dim=(1, 3)).sum())
    assert counts["computed"] == brute < counts["total"], name

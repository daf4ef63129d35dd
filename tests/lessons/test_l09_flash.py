"""Lesson 9's FlashAttention pieces: the I/O count, the tiled backward pass, sparse patterns."""

import math

import pytest
import torch

from encoderlab import masks, tiled
from encoderlab.attention import scaled_dot_product_attention
from encoderlab.lessons import l09_flash as flash

# --- the I/O model -----------------------------------------------------------------------------


def test_hbm_traffic_counts_the_papers_algorithms():
    c = flash.hbm_traffic(1024, 64, 64 * 1024, bytes_per_number=2)  # 32,768 numbers on chip
    assert c["block_cols"] == 128 and c["block_rows"] == 64 and c["key_tiles"] == 8
    assert c["standard"] == 4 * 1024 * 64 + 4 * 1024**2
    assert c["tiled"] == 2 * 1024 * 64 + 8 * (3 * 1024 * 64 + 4 * 1024)
    assert c["standard_bytes"] == 2 * c["standard"]
    assert c["ratio"] == pytest.approx(c["standard"] / c["tiled"])


def test_hbm_traffic_scales_as_theorem_2():
    """Tiled traffic grows as n^2 d^2 / M: x4 when n doubles, /2 when M doubles (large n)."""
    base = flash.hbm_traffic(2**16, 64, 2**17)["tiled"]
    assert flash.hbm_traffic(2**17, 64, 2**17)["tiled"] / base == pytest.approx(4, rel=0.02)
    assert base / flash.hbm_traffic(2**16, 64, 2**18)["tiled"] == pytest.approx(2, rel=0.02)
    assert flash.hbm_traffic(2**16, 64, 2**17)["ratio"] > 1
    with pytest.raises(ValueError, match="fewer than"):
        flash.hbm_traffic(512, 64, 100)


def test_online_softmax_trace_ends_at_the_one_shot_values():
    row = torch.randn(100, generator=torch.Generator().manual_seed(0)) * 4
    t = flash.online_softmax_trace(row, 16)
    assert len(t["m"]) == math.ceil(100 / 16)
    assert t["m"][-1] == pytest.approx(t["m_final"])
    assert t["l"][-1] == pytest.approx(t["l_final"], rel=1e-12)
    assert all(b >= a for a, b in zip(t["m"], t["m"][1:], strict=False))  # the max never falls


# --- the backward pass by recomputation ---------------------------------------------------------


def _qkv(n=150, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, n, d, generator=g, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size", [32, 64, 200])
def test_flash_backward_equals_autograd_through_dense_attention(causal, block_size):
    q, k, v = _qkv()
    grad_out = torch.randn(2, 3, 150, 16, generator=torch.Generator().manual_seed(1))
    out = flash.flash_attention(q, k, v, block_size=block_size, causal=causal)
    out.backward(grad_out)
    mine = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    dense, _ = scaled_dot_product_attention(q, k, v, masks.causal(150) if causal else None)
    dense.backward(grad_out)
    assert (out - dense).abs().max() < 1e-5
    for a, t in zip(mine, (q, k, v), strict=True):
        assert (a - t.grad).abs().max() < 1e-5


def test_flash_forward_returns_the_log_sum_exp():
    q, k, v = (t.detach() for t in _qkv())
    out, lse = flash.flash_forward(q, k, v, block_size=32)
    s = q @ k.transpose(-2, -1) / 4.0  # d = 16
    assert torch.allclose(lse, torch.logsumexp(s, dim=-1), atol=1e-5)
    assert torch.allclose(out, torch.softmax(s, -1) @ v, atol=1e-5)


def test_a_wrong_backward_would_be_caught():
    """The comparison can fail: dropping the D_i term gives a different dQ."""
    q, k, v = (t.detach() for t in _qkv(n=40))
    grad_out = torch.randn_like(q)
    out, lse = flash.flash_forward(q, k, v, block_size=16)
    dq, _, _ = flash.flash_backward(q, k, v, out, lse, grad_out, block_size=16)
    wrong_dq, _, _ = flash.flash_backward(q, k, v, torch.zeros_like(out), lse, grad_out,
                                          block_size=16)
    assert (dq - wrong_dq).abs().max() > 1e-2


def test_saved_tensor_bytes_sees_p_in_dense_and_only_o_and_l_in_flash():
    q, k, v = _qkv(n=128)
    _, dense = flash.saved_tensor_bytes(
        lambda a, b, c: scaled_dot_product_attention(a, b, c)[0], q, k, v)
    _, tiled_bytes = flash.saved_tensor_bytes(
        lambda a, b, c: flash.flash_attention(a, b, c, 32), q, k, v)
    assert dense >= 2 * 3 * 128 * 128 * 4  # P, (b, h, n, n) float32
    assert tiled_bytes == 2 * 3 * 128 * 16 * 4 + 2 * 3 * 128 * 4  # O and L


# --- work split and sparse patterns ---------------------------------------------------------


def test_work_split_orders():
    fa2, fa1 = flash.work_split(4, 2), flash.work_split(4, 1)
    assert (fa2[:, 2] == 2).all()  # every query tile's program reaches key tile 2 at step 2
    assert sorted(fa1.flatten().tolist()) == list(range(16))  # one program, 16 steps
    with pytest.raises(ValueError, match="version"):
        flash.work_split(4, 3)


def test_longformer_and_bigbird_masks():
    n = 256
    lf = flash.longformer_mask(n, 16, global_tokens=(0, 5))
    assert lf[0].all() and lf[:, 0].all() and lf[5].all()  # global rows and columns
    assert lf[100, 116] and not lf[100, 117]  # the window, then nothing
    assert (lf | masks.sliding_window(n, 16)).equal(lf)
    bb = flash.bigbird_mask(n, 16, global_tokens=(0,), random_blocks=1, block_size=32, seed=0)
    assert (bb & flash.longformer_mask(n, 16, (0,))).equal(flash.longformer_mask(n, 16, (0,)))
    assert bb.sum() > flash.longformer_mask(n, 16, (0,)).sum()
    full = tiled.tile_counts(n, block_size=32)["computed"]
    assert tiled.tile_counts(n, block_size=32, mask=lf)["computed"] < full


# --- ALiBi -------------------------------------------------------------------------------------


def test_alibi_slopes_and_bias():
    assert flash.alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    assert flash.alibi_slopes(4).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    with pytest.raises(ValueError, match="power of two"):
        flash.alibi_slopes(6)
    b = flash.alibi_bias(10, 8)
    assert b.shape == (8, 10, 10) and (b <= 0).all()
    assert (torch.diagonal(b, dim1=1, dim2=2) == 0).all()
    assert b[0, 2, 5] == b[0, 7, 4] == -3 / 2  # |offset| 3, slope 1/2: symmetric, shift-invariant


def test_relative_buckets_follow_debertas_delta():
    delta = flash.relative_buckets(7, 2)
    for i in range(7):
        for j in range(7):
            want = 0 if i - j <= -2 else 3 if i - j >= 2 else i - j + 2
            assert delta[i, j] == want
    with pytest.raises(ValueError, match="maximum relative distance"):
        flash.relative_buckets(4, 0)


def test_disentangled_scores_match_the_papers_sums():
    g = torch.Generator().manual_seed(0)
    n, dm, d, k = 9, 6, 4, 3
    h, rel = torch.randn(n, dm, generator=g), torch.randn(2 * k, dm, generator=g)
    w = [torch.randn(dm, d, generator=g) for _ in range(4)]
    out = flash.disentangled_scores(h, rel, *w)
    q_c, k_c, q_r, k_r = h @ w[0], h @ w[1], rel @ w[2], rel @ w[3]
    delta = out["buckets"]
    for i in range(n):
        for j in range(n):
            assert torch.isclose(out["c2c"][i, j], q_c[i] @ k_c[j])
            assert torch.isclose(out["c2p"][i, j], q_c[i] @ k_r[delta[i, j]])
            assert torch.isclose(out["p2c"][i, j], k_c[j] @ q_r[delta[j, i]])
    total = (out["c2c"] + out["c2p"] + out["p2c"]) / math.sqrt(3 * d)
    assert torch.allclose(out["scores"], total)
    # beyond k the distance is clipped: c2p is constant along a row, p2c down a column
    assert torch.allclose(out["c2p"][0, k:], out["c2p"][0, k:][0].expand(n - k))
    assert torch.allclose(out["p2c"][k:, 0], out["p2c"][k:, 0][0].expand(n - k))
    with pytest.raises(ValueError, match="rel must be"):
        flash.disentangled_scores(h, rel[:5], *w)

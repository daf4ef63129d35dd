"""Tiled attention with the online softmax: FlashAttention's algorithm in plain torch.

Lesson 3, §4 shows why a causal mask can halve the work: the tiles of the score
matrix that lie strictly above the diagonal hold nothing but -inf, so they need
not be computed at all. Lesson 9 takes the same loop in depth: how the online
softmax lets us see the keys one tile at a time and still get the exact
softmax, and how much a mask can save.

The idea in one paragraph. Cut the queries into tiles of ``block_size`` rows
and the keys (and values) into tiles of ``block_size`` columns. For one query
tile, walk over the key tiles and keep three running quantities per query row:

* ``m``   the largest score seen so far (the running row max),
* ``l``   the softmax denominator so far, sum_j exp(s_ij - m),
* ``acc`` the numerator so far, sum_j exp(s_ij - m) v_j.

When a new key tile raises the max from ``m_old`` to ``m_new``, everything
accumulated so far was measured against the old max; multiplying it by
``exp(m_old - m_new)`` re-measures it against the new one. After the last key
tile, ``acc / l`` is exactly softmax(s) V. The full (n_q, n_kv) score matrix is
never built, and a tile that the mask rules out entirely is never visited.
(The code writes 2^x where this paragraph writes e^x, as FlashAttention-2's CUDA code does:
the scores arrive multiplied by log2(e), and 2^(x log2 e) = e^x. :func:`_tile_layout`, one of
the two helpers that hold the loop's speed tricks, says why.)

Each tile is in one of three states (see :func:`classify_tiles`, in
:mod:`encoderlab.kernels.tiles`, the plan this loop and the GPU kernel both follow):

* ``SKIP``    the mask hides every entry: not computed at all;
* ``PARTIAL`` some entries hidden: computed, then masked;
* ``FULL``    nothing hidden: computed with no mask at all.

:func:`tiled_attention` and :func:`tile_counts` share :func:`classify_tiles`, so
the counted tiles are exactly the computed ones.

Where the GPU kernel plugs in
-----------------------------
:mod:`encoderlab.kernels.tiled_triton` holds the same loop as a Triton kernel: one GPU
program per (batch·head, query tile), the key loop inside the kernel, and the
same ``classify_tiles`` plan telling each program which key tiles to visit.
:func:`gpu_attention` is the way in: it checks for CUDA and Triton
(:func:`triton_available`) and only then imports that module, so this module
keeps importing and working on machines without either.
"""

from __future__ import annotations

import importlib.util
import math

import torch

from encoderlab.kernels.tiles import FULL, PARTIAL, SKIP, check_block_size, classify_tiles, n_tiles
from encoderlab.masks import check_mask, to_additive
from encoderlab.validate import check_positive_int, check_qkv

__all__ = [
    "SKIP",
    "PARTIAL",
    "FULL",
    "classify_tiles",
    "live_tiles",
    "tile_counts",
    "tile_ratio_causal",
    "tiled_attention",
    "triton_available",
    "gpu_attention",
]

def live_tiles(n_q: int, n_kv: int | None = None, block_size: int = 128,
               mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
    """Boolean (T_q, T_kv): True for the tiles that are computed (Lesson 3, §4; Lesson 9)."""
    return classify_tiles(n_q, n_kv, block_size, mask, causal) != SKIP


def tile_counts(n_q: int, n_kv: int | None = None, block_size: int = 128,
                mask: torch.Tensor | None = None, causal: bool = False) -> dict:
    """How many tiles :func:`tiled_attention` computes for this mask (Lesson 3, §4; Lesson 9).

    Returns a dict with ``computed`` (tiles computed), ``total`` (all T_q * T_kv
    tiles), ``fraction`` (computed / total), ``skipped``, ``partial`` (computed
    and masked), ``full`` (computed without a mask), and the grid size
    ``tiles_q``, ``tiles_kv``. For causal and n_q = n_kv, ``computed`` is
    T(T+1)/2 with T = ceil(n / block_size); for no mask it is T^2.
    """
    states = classify_tiles(n_q, n_kv, block_size, mask, causal)  # (T_q, T_kv)
    total = states.numel()
    partial = int((states == PARTIAL).sum())
    full = int((states == FULL).sum())
    computed = partial + full
    return {
        "computed": computed,
        "total": total,
        "fraction": computed / total if total else 0.0,
        "skipped": total - computed,
        "partial": partial,
        "full": full,
        "tiles_q": states.shape[0],
        "tiles_kv": states.shape[1],
    }


def tile_ratio_causal(n: int, block_size: int = 128) -> float:
    """The ideal causal speed-up: full tiles / causal tiles = 2T/(T+1) (Lesson 3, §4).

    T = ceil(n / block_size). Full attention computes T^2 tiles, causal only the
    T(T+1)/2 on and below the diagonal; the ratio tends to 2 as T grows.
    """
    check_positive_int(n, "n", what="a sequence length; for n = 0 there are no tiles")
    check_block_size(block_size)
    t = n_tiles(n, block_size)
    return 2 * t / (t + 1)


def _batch_shape(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Size:
    try:
        return torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k and v must have the same (or broadcastable) leading dimensions such as "
            f"(batch, heads), got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
        ) from None


def tiled_attention(
    q: torch.Tensor,  # (..., n_q, d_k), typically (b, h, n_q, d_k)
    k: torch.Tensor,  # (..., n_kv, d_k)
    v: torch.Tensor,  # (..., n_kv, d_v)
    mask: torch.Tensor | None = None,  # bool, broadcastable to (..., n_q, n_kv)
    causal: bool = False,
    block_size: int = 128,
) -> torch.Tensor:
    """softmax(QK^T/sqrt(d_k) + M) V tile by tile, skipping hidden tiles (Lesson 3, §4; Lesson 9).

    Equal to ``attention.scaled_dot_product_attention(q, k, v, mask)[0]`` (the
    attention weights are never formed, so only ``out`` is returned), but the
    score matrix is built ``block_size`` x ``block_size`` at a time and every
    tile the mask rules out entirely is never computed.

    ``causal=True`` means query i may see key j iff j <= i. When n_q != n_kv the
    mask is aligned at the top-left, as ``torch.nn.functional.
    scaled_dot_product_attention(..., is_causal=True)`` does: query 0 sees key
    0 only, whatever the lengths. ``mask`` (True = may attend) and ``causal``
    may both be given; a key is then visible only if both allow it.

    A query row with no key it may attend to returns zeros, not NaN. float16
    and bfloat16 inputs are computed in float32 and returned in their dtype.
    Inside a computed tile, hidden scores are removed by adding -inf (the M of
    the formula), which assumes finite inputs there; a skipped tile's keys and
    values are never read at all.
    """
    check_qkv(q, k, v)
    check_block_size(block_size)
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        raise ValueError(
            "q, k and v must share one floating-point dtype, got "
            f"{q.dtype}, {k.dtype} and {v.dtype}. Convert them with `.to(dtype)`."
        )
    batch = _batch_shape(q, k, v)
    n_q, n_kv = q.shape[-2], k.shape[-2]
    if mask is not None:
        check_mask(mask, (*batch, n_q, n_kv))  # boolean, and broadcasts to (..., n_q, n_kv)
        mask = mask.to(q.device)

    states = classify_tiles(n_q, n_kv, block_size, mask, causal).tolist()  # T_q lists of T_kv
    q_, k_t, v_ = _tile_layout(q, k, v, batch)  # (B, n_q, d_k), (B, d_k, n_kv), (B, n_kv, d_v)
    # a PARTIAL tile's slice of M, built when the loop asks for it
    tile_bias = _PartialTileBias(mask, causal, (*batch, n_q, n_kv), q_.dtype, q_.device)
    lowest = torch.finfo(q_.dtype).min  # the most negative finite number

    n_pairs, d_v = q_.shape[0], v_.shape[-1]  # B = all (batch, head) pairs side by side
    out = q_.new_empty(n_pairs, n_q, d_v)  # (B, n_q, d_v): each query tile writes its rows
    for i, row in enumerate(states):
        r0, r1 = i * block_size, min((i + 1) * block_size, n_q)  # this query tile's rows
        q_i = q_[:, r0:r1]  # (B, bq, d_k)
        m = q_.new_full((n_pairs, r1 - r0, 1), float("-inf"))  # (B, bq, 1) running row max
        l = q_.new_zeros(n_pairs, r1 - r0, 1)  # (B, bq, 1) running denominator
        acc = q_.new_zeros(n_pairs, r1 - r0, d_v)  # (B, bq, d_v) running numerator
        for j, state in enumerate(row):
            if state == SKIP:
                continue  # the whole tile is hidden: this is where the saving comes from
            c0, c1 = j * block_size, min((j + 1) * block_size, n_kv)  # this key tile's columns
            # (B, bq, bk): the scores s_ij of this tile, times log2(e) (see _tile_layout)
            s = torch.bmm(q_i, k_t[:, :, c0:c1])
            if state == PARTIAL:  # only tiles that straddle the mask's edge pay for masking
                s += tile_bias(r0, r1, c0, c1)  # hidden scores become -inf: weight 2^-inf = 0
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (B, bq, 1)
            # What we subtract before exponentiating: the running max. A row that has seen no
            # visible key yet has m_new = -inf, and -inf - (-inf) is NaN: in a PARTIAL tile,
            # shift such rows by the lowest finite number instead (m_new itself stays -inf).
            shift = m_new.clamp(min=lowest) if state == PARTIAL else m_new
            p = s.sub_(shift).exp2_()  # (B, bq, bk): the tile's unnormalised weights, in place
            alpha = torch.exp2(m - shift)  # (B, bq, 1): re-measures the old sums against m_new
            l = l * alpha + p.sum(dim=-1, keepdim=True)
            acc = torch.baddbmm(acc * alpha, p, v_[:, c0:c1])  # acc * alpha + p @ v_j
            m = m_new
        # softmax(s) V = acc / l. A row that saw a key has l >= 1 (its largest score adds
        # 2^0 = 1); a row that saw none has l = 0 and acc = 0. Raising l to at least 1
        # changes only the latter, which then gives 0 / 1 = 0 instead of 0 / 0 = NaN.
        out[:, r0:r1] = acc / l.clamp(min=1.0)  # (B, bq, d_v)
    return out.reshape(*batch, n_q, d_v).to(q.dtype)  # (..., n_q, d_v)


# --- Speed tricks of the loop above (the algorithm is the same without them) --------------------


def _tile_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: torch.Size):
    """q, k, v laid out once for the tile loop: ``(q, K^T * scale, v)`` as (B, ., .) tensors.

    Speed, not mathematics:

    * all (batch, head) pairs side by side, B = prod(batch), so one ``bmm`` per tile serves them;
    * float16 and bfloat16 in float32: half precision has too few mantissa bits for long sums;
    * K transposed once, so each key tile is a column slice (no transpose per tile);
    * FlashAttention's exp2 trick: e^x = 2^(x log2 e). Scaling K by log2(e) / sqrt(d_k) instead
      of 1 / sqrt(d_k) lets the loop exponentiate with ``exp2``, which the CPU computes fast for
      any input, -inf included (exp is many times slower on -inf and very negative numbers).
      The same softmax in another base: the scale costs nothing, it rides on the copy of K.
    """
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    n_q, d_k, n_kv, d_v = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    bsz = math.prod(batch)
    q_ = q.to(work).expand(*batch, n_q, d_k).reshape(bsz, n_q, d_k)  # (B, n_q, d_k)
    v_ = v.to(work).expand(*batch, n_kv, d_v).reshape(bsz, n_kv, d_v)  # (B, n_kv, d_v)
    k_ = k.to(work).expand(*batch, n_kv, d_k).reshape(bsz, n_kv, d_k)  # (B, n_kv, d_k)
    k_t = q_.new_empty(bsz, d_k, n_kv)  # (B, d_k, n_kv)
    torch.mul(k_.transpose(1, 2), math.log2(math.e) / math.sqrt(d_k), out=k_t)  # one copy
    return q_, k_t, v_


class _PartialTileBias:
    """The additive mask M (0 / -inf) of one PARTIAL tile, (B or 1, bq, bk), built on demand.

    Speed, not mathematics: the full (n_q, n_kv) M is never built, only the slices of tiles
    that straddle the mask's edge; and with the causal mask alone the tiles crossing the
    diagonal share a few patterns (they depend only on r0 - c0 and the tile's size), so each
    pattern is built once and reused.
    """

    def __init__(self, mask: torch.Tensor | None, causal: bool, scores_shape: tuple,
                 dtype: torch.dtype, device):
        self.causal, self.dtype, self.device = causal, dtype, device
        self.batch = scores_shape[:-2]  # (..., ) the leading (batch, head) dims
        self.visible = None  # the explicit mask, sliceable by tile
        if mask is not None:
            # Expand only the last two dims (a view, no copy) so that it can be sliced by tile;
            # the leading dims keep their 1s and broadcast against (..., bq, bk).
            self.visible = mask.expand(*mask.shape[:-2], *scores_shape[-2:])  # (..., n_q, n_kv)
        self.diagonal_patterns = {}  # (r0 - c0, bq, bk) -> (1, bq, bk)

    def __call__(self, r0: int, r1: int, c0: int, c1: int) -> torch.Tensor:
        if self.visible is None:  # causal only: the pattern depends on the offset r0 - c0 alone
            key = (r0 - c0, r1 - r0, c1 - c0)
            if key not in self.diagonal_patterns:
                vis = _causal_visible(r0, r1, c0, c1, self.device)[None]  # (1, bq, bk)
                self.diagonal_patterns[key] = to_additive(vis, self.dtype)
            return self.diagonal_patterns[key]
        vis = self.visible[..., r0:r1, c0:c1]  # (..., bq, bk)
        if self.causal:
            vis = vis & _causal_visible(r0, r1, c0, c1, vis.device)  # (..., bq, bk)
        if vis.dim() > 2 and any(size != 1 for size in vis.shape[:-2]):
            vis = vis.expand(*self.batch, r1 - r0, c1 - c0).reshape(-1, r1 - r0, c1 - c0)
        else:
            vis = vis.reshape(1, r1 - r0, c1 - c0)  # one pattern for every (batch, head)
        return to_additive(vis, self.dtype)  # (B or 1, bq, bk)


def _causal_visible(r0: int, r1: int, c0: int, c1: int, device=None) -> torch.Tensor:
    """The causal mask's tile with rows [r0, r1) and columns [c0, c1): key j visible iff j <= i."""
    rows = torch.arange(r0, r1, device=device)[:, None]  # (bq, 1) query positions i
    cols = torch.arange(c0, c1, device=device)[None, :]  # (1, bk) key positions j
    return cols <= rows  # (bq, bk)


# --- The GPU kernel (Lesson 9, §8) ---------------------------------------------------------------


def triton_available() -> bool:
    """True when the Triton kernel can run here: a CUDA device and Triton both present (Lesson 9).

    Looks for Triton without importing it, so the check itself can never fail.
    """
    return torch.cuda.is_available() and importlib.util.find_spec("triton") is not None


def gpu_attention(
    q: torch.Tensor,  # (b, h, n_q, d_k), on a CUDA device
    k: torch.Tensor,  # (b, h, n_kv, d_k)
    v: torch.Tensor,  # (b, h, n_kv, d_v)
    mask: torch.Tensor | None = None,  # bool, broadcastable to (b, h, n_q, n_kv)
    causal: bool = False,
    block_size: int | None = None,  # None: chosen for the dtype, head dimension and GPU
) -> torch.Tensor:
    """:func:`tiled_attention` as one Triton GPU kernel: same arguments, same result (Lesson 9, §8).

    The kernel (:func:`encoderlab.kernels.tiled_triton.triton_attention`) skips the same
    tiles as the CPU loop: with ``causal=True`` and no mask by its loop bound,
    with a mask by :func:`classify_tiles`' plan. Raises a ValueError that says
    what is missing when there is no CUDA device or no Triton, or when the GPU is older
    than compute capability 8.0 (Triton's oldest target).
    """
    if not triton_available():
        missing = "Triton (pip install triton)" if torch.cuda.is_available() else "a CUDA device"
        raise ValueError(
            f"gpu_attention needs a CUDA device and Triton; this machine lacks {missing}. "
            "tiled_attention computes the same on the CPU."
        )
    from encoderlab.kernels.tiled_triton import (  # imports triton: only now that it is there
        triton_attention,
        unsupported_reason,
    )

    reason = unsupported_reason(q.device if q.is_cuda else None)
    if reason is not None:  # e.g. Colab's free T4, compute capability 7.5
        raise ValueError(f"gpu_attention cannot run the Triton kernel: {reason}")

    if mask is not None and causal:
        causal_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=mask.device)
        mask = mask & causal_mask.tril()  # (..., n_q, n_kv): both must allow a key
    elif causal:
        mask = "causal"
    return triton_attention(q, k, v, mask=mask, block=block_size)

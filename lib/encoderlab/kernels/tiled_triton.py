"""The tiled attention of :mod:`encoderlab.tiled` as a Triton GPU kernel (Lesson 9, §8).

:func:`encoderlab.tiled.tiled_attention` runs FlashAttention's loop in plain
torch: Python walks over the query tiles and the key tiles. Here the same loop
runs on the GPU. One *program* (a block of GPU threads) owns one query tile of
one (batch, head) pair; it keeps the running max ``m``, the running sum ``l``
and the accumulator ``acc`` of that tile in registers, walks over the key
tiles, and writes its rows of the output once at the end. Many programs run
at the same time, one per (query tile, batch·head).

Tiles the mask hides entirely are never visited:

* ``mask=None``: every key tile is visited, none is masked;
* ``mask="causal"``: query tile i visits key tiles 0..i only (the loop bound),
  and only the diagonal tile i needs the element mask j <= i;
* a boolean mask tensor: :func:`encoderlab.tiled.classify_tiles` makes the
  plan on the host, as for the CPU loop, and each program visits only the
  live key tiles of its row; only PARTIAL tiles load the mask's elements.

This module imports Triton at the top, so import it only where Triton is
installed: :func:`encoderlab.tiled.gpu_attention` checks for CUDA and Triton
before it imports this module. With ``TRITON_INTERPRET=1`` set before this
module is imported (and while the kernel runs), Triton's interpreter runs the
same kernel on CPU tensors, slowly, with numpy: that is how the course tests it
on machines without a GPU (``tests/core/test_tiled_triton.py``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from encoderlab.masks import check_mask
from encoderlab.tiled import PARTIAL, SKIP, classify_tiles
from encoderlab.validate import is_int

assert PARTIAL == 1  # the kernel compares a tile's state with the literal 1

__all__ = ["triton_attention", "interpreted"]

# How the kernel masks a key tile (a compile-time constant of the kernel).
NO_MASK = 0  # mask=None: nothing hidden
CAUSAL = 1  # mask="causal": the loop bound skips, the diagonal tile is masked
PLAN = 2  # a mask tensor: visit the live tiles of classify_tiles' plan


@triton.jit
def _visit_tile(
    acc, m_i, l_i,  # running state of the query tile: (BLOCK, D_V), (BLOCK,), (BLOCK,)
    q,  # (BLOCK, D_K) this program's queries
    k_ptr, v_ptr,  # this (batch, head)'s keys (n_kv, D_K) and values (n_kv, D_V)
    mask_ptr, stride_mq, stride_mkv,  # this (batch, head)'s mask, if MASKING == PLAN
    start_n, offs_m, n_q, n_kv, scale,
    partial,  # does this tile need the element mask? (PLAN only)
    MASKING: tl.constexpr,  # NO_MASK, CAUSAL (diagonal tile) or PLAN
    EVEN_N: tl.constexpr,  # n_kv is a multiple of BLOCK: no ragged last key tile
    BLOCK: tl.constexpr, D_K: tl.constexpr, D_V: tl.constexpr, PRECISION: tl.constexpr,
):
    """One step of the online softmax: fold key tile [start_n, start_n + BLOCK) into the state."""
    offs_n = start_n + tl.arange(0, BLOCK)  # (BLOCK,) key positions of this tile
    in_kv = offs_n < n_kv  # (BLOCK,) real keys (the last tile may be short)
    k = tl.load(k_ptr + offs_n[:, None] * D_K + tl.arange(0, D_K)[None, :],
                mask=in_kv[:, None], other=0.0)  # (BLOCK, D_K)
    v = tl.load(v_ptr + offs_n[:, None] * D_V + tl.arange(0, D_V)[None, :],
                mask=in_kv[:, None], other=0.0)  # (BLOCK, D_V)
    # Scores in base 2 (scale = log2(e) / sqrt(d_k)), as in tiled.tiled_attention.
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (BLOCK, BLOCK) fp32

    # Hide what the mask hides; a FULL tile of a whole-tile length does no masking at all.
    if MASKING == 1:  # CAUSAL: the diagonal tile, key j visible iff j <= i
        keep = offs_n[None, :] <= offs_m[:, None]  # (BLOCK, BLOCK)
        s = tl.where(keep & in_kv[None, :], s, float("-inf"))
    elif MASKING == 2:  # PLAN: read the mask's elements only for a PARTIAL tile
        inside = (offs_m[:, None] < n_q) & in_kv[None, :]  # (BLOCK, BLOCK)
        elems = tl.load(mask_ptr + offs_m[:, None] * stride_mq + offs_n[None, :] * stride_mkv,
                        mask=tl.where(partial, inside, False), other=1)  # 1 where not read
        s = tl.where((elems != 0) & in_kv[None, :], s, float("-inf"))
    elif not EVEN_N:  # NO_MASK, but keys past n_kv in a short last tile
        s = tl.where(in_kv[None, :], s, float("-inf"))

    m_new = tl.maximum(m_i, tl.max(s, 1))  # (BLOCK,) running max after this tile
    # A row that has seen no visible key yet has m_new = -inf; shifting by 0 instead keeps
    # -inf - (-inf) = NaN out of the sums (its p and alpha are then 0, like its sums).
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # (BLOCK,)
    p = tl.math.exp2(s - shift[:, None])  # (BLOCK, BLOCK) unnormalised weights
    alpha = tl.math.exp2(m_i - shift)  # (BLOCK,) re-measures the old sums against m_new
    l_i = l_i * alpha + tl.sum(p, 1)  # (BLOCK,)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, m_new, l_i  # (BLOCK, D_V), (BLOCK,), (BLOCK,)


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,  # (B, n_q, D_K), (B, n_kv, D_K), (B, n_kv, D_V), (B, n_q, D_V)
    mask_ptr, stride_mb, stride_mh, stride_mq, stride_mkv,  # (b, h, n_q, n_kv) view, PLAN only
    tiles_ptr, states_ptr, counts_ptr,  # the plan: (T_q, T_kv), (T_q, T_kv), (T_q,); PLAN only
    visits_ptr,  # (B, T_q) int32: tiles each program visited, if COUNT
    n_heads, n_q, n_kv, n_tiles_kv, scale,
    MASKING: tl.constexpr, EVEN_N: tl.constexpr, COUNT: tl.constexpr,
    BLOCK: tl.constexpr, D_K: tl.constexpr, D_V: tl.constexpr, PRECISION: tl.constexpr,
):
    """One program: query tile ``program_id(0)`` of batch·head ``program_id(1)``."""
    tile_m = tl.program_id(0)  # which query tile
    bh = tl.program_id(1)  # which (batch, head) pair, b * n_heads + h
    q_ptr += bh * n_q * D_K  # this pair's (n_q, D_K) queries
    k_ptr += bh * n_kv * D_K  # (n_kv, D_K)
    v_ptr += bh * n_kv * D_V  # (n_kv, D_V)
    o_ptr += bh * n_q * D_V  # (n_q, D_V)
    mask_ptr += (bh // n_heads) * stride_mb + (bh % n_heads) * stride_mh

    offs_m = tile_m * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) query positions
    in_q = offs_m < n_q  # (BLOCK,) real queries
    q = tl.load(q_ptr + offs_m[:, None] * D_K + tl.arange(0, D_K)[None, :],
                mask=in_q[:, None], other=0.0)  # (BLOCK, D_K)
    m_i = tl.full((BLOCK,), float("-inf"), tl.float32)  # running row max
    l_i = tl.zeros((BLOCK,), tl.float32)  # running denominator
    acc = tl.zeros((BLOCK, D_V), tl.float32)  # running numerator
    visited = 0

    if MASKING == 0:  # NO_MASK: every key tile, none masked
        for j in range(0, n_tiles_kv):
            acc, m_i, l_i = _visit_tile(acc, m_i, l_i, q, k_ptr, v_ptr, mask_ptr, stride_mq,
                                        stride_mkv, j * BLOCK, offs_m, n_q, n_kv, scale, False,
                                        0, EVEN_N, BLOCK, D_K, D_V, PRECISION)
            visited += 1
    elif MASKING == 1:  # CAUSAL: tiles left of the diagonal unmasked, then the diagonal tile
        below = tl.minimum(tile_m, n_tiles_kv)  # key tiles 0..tile_m-1 are fully visible
        for j in range(0, below):
            acc, m_i, l_i = _visit_tile(acc, m_i, l_i, q, k_ptr, v_ptr, mask_ptr, stride_mq,
                                        stride_mkv, j * BLOCK, offs_m, n_q, n_kv, scale, False,
                                        0, EVEN_N, BLOCK, D_K, D_V, PRECISION)
            visited += 1
        if tile_m < n_tiles_kv:  # the diagonal tile; tiles right of it are never visited
            acc, m_i, l_i = _visit_tile(acc, m_i, l_i, q, k_ptr, v_ptr, mask_ptr, stride_mq,
                                        stride_mkv, tile_m * BLOCK, offs_m, n_q, n_kv, scale,
                                        True, 1, EVEN_N, BLOCK, D_K, D_V, PRECISION)
            visited += 1
    else:  # PLAN: the live key tiles of this query tile's row, listed on the host
        for t in range(0, tl.load(counts_ptr + tile_m)):
            j = tl.load(tiles_ptr + tile_m * n_tiles_kv + t)  # a live key tile
            partial = tl.load(states_ptr + tile_m * n_tiles_kv + t) == 1  # PARTIAL
            acc, m_i, l_i = _visit_tile(acc, m_i, l_i, q, k_ptr, v_ptr, mask_ptr, stride_mq,
                                        stride_mkv, j * BLOCK, offs_m, n_q, n_kv, scale, partial,
                                        2, EVEN_N, BLOCK, D_K, D_V, PRECISION)
            visited += 1

    # softmax(s) V = acc / l; a row that saw a key has l >= 1, a row that saw none has
    # l = 0 and acc = 0, and gets 0 / 1 = 0 instead of NaN (as tiled.tiled_attention).
    out = acc / tl.maximum(l_i, 1.0)[:, None]  # (BLOCK, D_V)
    tl.store(o_ptr + offs_m[:, None] * D_V + tl.arange(0, D_V)[None, :],
             out.to(o_ptr.dtype.element_ty), mask=in_q[:, None])
    if COUNT:
        tl.store(visits_ptr + bh * tl.num_programs(0) + tile_m, visited)


def interpreted() -> bool:
    """True when Triton's CPU interpreter runs the kernel (TRITON_INTERPRET=1 at import)."""
    return isinstance(_attention_kernel, InterpretedFunction)


def _is_power_of_two(x) -> bool:
    return is_int(x) and x > 0 and x & (x - 1) == 0


def _check_inputs(q, k, v, mask, block) -> None:
    """The ValueErrors of :func:`triton_attention`: what was expected, what was given."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor of shape (b, h, n, d), got {got}. "
                             "Add the missing dimensions with `.view(b, h, n, d)`.")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _PRECISION:
        raise ValueError("q, k and v must share one dtype, float16, bfloat16 or float32, got "
                         f"{q.dtype}, {k.dtype} and {v.dtype}. Convert them with `.to(dtype)`.")
    devices = {q.device, k.device, v.device}
    if len(devices) > 1:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device} and "
                         f"{v.device}. Move them with `.to(device)`.")
    if q.device.type != "cuda" and not interpreted():
        raise ValueError(f"the Triton kernel needs CUDA tensors, got tensors on {q.device}. "
                         "Move them with `.cuda()`, or use tiled.tiled_attention on the CPU.")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError("q, k and v must have the same (batch, heads), got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}.")
    if q.shape[3] != k.shape[3] or k.shape[2] != v.shape[2]:
        raise ValueError(f"expected q (b, h, n_q, d_k), k (b, h, n_kv, d_k), v (b, h, n_kv, d_v),"
                         f" got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}.")
    if q.shape[2] < 1 or k.shape[2] < 1:
        raise ValueError(f"n_q and n_kv must be at least 1, got {q.shape[2]} and {k.shape[2]}.")
    for name, d in (("d_k", q.shape[3]), ("d_v", v.shape[3])):
        if not _is_power_of_two(d) or not 16 <= d <= 256:
            raise ValueError(f"the Triton kernel needs a head dimension {name} that is a power "
                             f"of two from 16 to 256, got {d}. Pad the head dimension with "
                             "zeros, or use tiled.tiled_attention.")
    if not _is_power_of_two(block) or not 16 <= block <= 256:
        raise ValueError(f"block must be a power of two from 16 to 256 (rows and columns per "
                         f"tile), got {block!r}. Typical values are 64 and 128.")
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be None, 'causal' or a boolean tensor, got {mask!r}.")
    elif mask is not None:
        check_mask(mask, (*q.shape[:2], q.shape[2], k.shape[2]))


# tl.dot's input precision: for float32 inputs "ieee" keeps exact float32 products (Triton's
# default, TF32, keeps 10 mantissa bits); for half-precision inputs the setting changes nothing.
_PRECISION = {torch.float16: "tf32", torch.bfloat16: "tf32", torch.float32: "ieee"}


def _plan(n_q: int, n_kv: int, block: int, mask: torch.Tensor, device):
    """The live key tiles of every query tile, first in each row, with their states.

    From :func:`encoderlab.tiled.classify_tiles`: ``tiles[i, :counts[i]]`` are the key
    tiles that query tile i visits, ``states`` says which of them are PARTIAL.
    """
    states = classify_tiles(n_q, n_kv, block, mask)  # (T_q, T_kv) int8
    live = states != SKIP  # (T_q, T_kv)
    # Sort each row so that the live tiles come first, in order (a stable sort on "skipped").
    tiles = torch.sort((~live).to(torch.int8), dim=1, stable=True).indices  # (T_q, T_kv)
    ordered_states = states.gather(1, tiles)  # (T_q, T_kv)
    counts = live.sum(dim=1)  # (T_q,)
    return (tiles.to(device, torch.int32), ordered_states.to(device, torch.int32),
            counts.to(device, torch.int32))


def triton_attention(
    q: torch.Tensor,  # (b, h, n_q, d_k)
    k: torch.Tensor,  # (b, h, n_kv, d_k)
    v: torch.Tensor,  # (b, h, n_kv, d_v)
    mask: torch.Tensor | str | None = None,  # None, "causal", or bool (b|1, h|1, n_q|1, n_kv)
    block: int = 64,
    *,
    return_visits: bool = False,
    num_warps: int = 4,
    num_stages: int = 3,
):
    """softmax(QK^T/sqrt(d_k) + M) V on the GPU, tile by tile, skipping hidden tiles (Lesson 9).

    The same algorithm and result as :func:`encoderlab.tiled.tiled_attention`
    (a row with no visible key gives zeros), computed by one Triton program per
    (query tile, batch·head). ``mask="causal"`` is top-left aligned like
    ``is_causal=True``. Scores and sums are float32; the output has the inputs'
    dtype. With ``return_visits=True`` also returns the (b, h, T_q) int32 count
    of key tiles each program computed, to check that skipped tiles were skipped.
    """
    _check_inputs(q, k, v, mask, block)
    b, h, n_q, d_k = q.shape
    n_kv, d_v = k.shape[2], v.shape[3]
    t_q, t_kv = math.ceil(n_q / block), math.ceil(n_kv / block)
    q_, k_, v_ = q.contiguous(), k.contiguous(), v.contiguous()  # (b, h, n, d) rows packed
    out = torch.empty(b, h, n_q, d_v, dtype=q.dtype, device=q.device)  # (b, h, n_q, d_v)
    visits = torch.zeros(b, h, t_q, dtype=torch.int32, device=q.device)  # (b, h, T_q)

    if isinstance(mask, torch.Tensor):
        masking = PLAN
        tiles, states, counts = _plan(n_q, n_kv, block, mask, q.device)
        # A view of the mask as (b, h, n_q, n_kv) bytes; broadcast dims get stride 0.
        m4 = mask.to(q.device).reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        m4 = m4.view(torch.uint8).expand(b, h, n_q, n_kv)  # (b, h, n_q, n_kv), no copy
        mask_args = (m4, *m4.stride())
    else:
        masking = CAUSAL if mask == "causal" else NO_MASK
        tiles = states = counts = visits  # not read: any tensor will do as a placeholder
        mask_args = (visits, 0, 0, 0, 0)

    grid = (t_q, b * h)  # one program per (query tile, batch·head)
    _attention_kernel[grid](
        q_, k_, v_, out, *mask_args, tiles, states, counts, visits,
        h, n_q, n_kv, t_kv, math.log2(math.e) / math.sqrt(d_k),
        MASKING=masking, EVEN_N=n_kv % block == 0, COUNT=return_visits,
        BLOCK=block, D_K=d_k, D_V=d_v, PRECISION=_PRECISION[q.dtype],
        num_warps=num_warps, num_stages=num_stages,
    )
    return (out, visits) if return_visits else out

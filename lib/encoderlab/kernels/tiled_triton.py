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
  and masks them by j <= i, which hides something in the diagonal tile i only;
* a boolean mask tensor: :func:`encoderlab.kernels.tiles.classify_tiles` makes the
  plan on the host, as for the CPU loop, and each program visits only the
  live key tiles of its row; only PARTIAL tiles load the mask's elements.

What is launched fits the GPU: :data:`TILES` gives each dtype and head dimension a tile
(block, warps) that compiles without register spills for sm_80 and sm_90, and
:func:`launch_configs` lists pipeline depths (and a smaller tile) to fall back on when a GPU has
too little shared memory; ``tests/core/test_triton_compile.py`` compiles them for both targets.
Triton supports compute capability 8.0 and newer: :func:`unsupported_reason` says why a device
cannot run the kernel (Colab's free T4 is 7.5).

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

from encoderlab.kernels.tiles import PARTIAL, SKIP, classify_tiles
from encoderlab.masks import check_mask
from encoderlab.validate import is_int

assert PARTIAL == 1  # the kernel compares a tile's state with the literal 1

__all__ = ["triton_attention", "interpreted", "unsupported_reason", "launch_configs",
           "compile_options", "TILES"]

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
    rows = tl.arange(0, BLOCK)  # (BLOCK,) positions inside the tile
    offs_n = start_n + rows  # (BLOCK,) key positions of this tile
    in_kv = offs_n < n_kv  # (BLOCK,) real keys (the last tile may be short)
    first = tl.cast(start_n, tl.int64)  # the tile's first key: offsets past a tile in 64 bits
    k = tl.load(k_ptr + first * D_K + rows[:, None] * D_K + tl.arange(0, D_K)[None, :],
                mask=in_kv[:, None], other=0.0)  # (BLOCK, D_K)
    v = tl.load(v_ptr + first * D_V + rows[:, None] * D_V + tl.arange(0, D_V)[None, :],
                mask=in_kv[:, None], other=0.0)  # (BLOCK, D_V)
    # Scores in base 2 (scale = log2(e) / sqrt(d_k)), as in tiled.tiled_attention.
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (BLOCK, BLOCK) fp32

    # Hide what the mask hides; a FULL tile of a whole-tile length does no masking at all.
    if MASKING == 1:  # CAUSAL: the diagonal tile, key j visible iff j <= i
        keep = offs_n[None, :] <= offs_m[:, None]  # (BLOCK, BLOCK)
        s = tl.where(keep & in_kv[None, :], s, float("-inf"))
    elif MASKING == 2:  # PLAN: read the mask's elements only for a PARTIAL tile
        inside = (offs_m[:, None] < n_q) & in_kv[None, :]  # (BLOCK, BLOCK)
        # mask_ptr points at this query tile's first row; the key tile's start is added in 64 bits
        elems = tl.load(mask_ptr + first * stride_mkv + rows[:, None] * stride_mq
                        + rows[None, :] * stride_mkv,
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
    """One program: query tile ``tile_m`` of batch·head ``bh``, both read from ``program_id(0)``.

    The grid is one-dimensional (axis 0 allows 2^31 - 1 programs; axes 1 and 2 only 65,535), and
    the query tiles of one (batch, head) pair are neighbours, so they share its keys in the cache.
    Offsets past one tile are computed in 64 bits: b·h·n·d can pass 2^31.
    """
    n_tiles_q = tl.cdiv(n_q, BLOCK)
    tile_m = tl.program_id(0) % n_tiles_q  # which query tile
    bh = (tl.program_id(0) // n_tiles_q).to(tl.int64)  # which (batch, head) pair, b * n_heads + h
    first = (tile_m * BLOCK).to(tl.int64)  # this tile's first query
    q_ptr += bh * n_q * D_K + first * D_K  # this tile's (BLOCK, D_K) queries
    k_ptr += bh * n_kv * D_K  # this pair's (n_kv, D_K) keys
    v_ptr += bh * n_kv * D_V  # (n_kv, D_V)
    o_ptr += bh * n_q * D_V + first * D_V  # this tile's (BLOCK, D_V) outputs
    mask_ptr += (bh // n_heads) * stride_mb + (bh % n_heads) * stride_mh + first * stride_mq

    rows = tl.arange(0, BLOCK)  # (BLOCK,) positions inside the tile
    offs_m = tile_m * BLOCK + rows  # (BLOCK,) query positions
    in_q = offs_m < n_q  # (BLOCK,) real queries
    q = tl.load(q_ptr + rows[:, None] * D_K + tl.arange(0, D_K)[None, :],
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
    elif MASKING == 1:  # CAUSAL: key tiles 0..tile_m; right of the diagonal never visited
        # One loop, the element mask j <= i applied to every tile: left of the diagonal it
        # hides nothing, and one copy of the loop body keeps the registers free of spills.
        for j in range(0, tl.minimum(tile_m + 1, n_tiles_kv)):
            acc, m_i, l_i = _visit_tile(acc, m_i, l_i, q, k_ptr, v_ptr, mask_ptr, stride_mq,
                                        stride_mkv, j * BLOCK, offs_m, n_q, n_kv, scale, False,
                                        1, EVEN_N, BLOCK, D_K, D_V, PRECISION)
            visited += 1
    else:  # PLAN: the live key tiles of this query tile's row, listed by _plan on the GPU
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
    tl.store(o_ptr + rows[:, None] * D_V + tl.arange(0, D_V)[None, :],
             out.to(o_ptr.dtype.element_ty), mask=in_q[:, None])
    if COUNT:
        tl.store(visits_ptr + tl.program_id(0), visited)  # visits[bh, tile_m]


def interpreted() -> bool:
    """True when Triton's CPU interpreter runs the kernel (TRITON_INTERPRET=1 at import)."""
    return isinstance(_attention_kernel, InterpretedFunction)


def unsupported_reason(device=None) -> str | None:
    """None when the Triton kernel can run on ``device`` (a CUDA GPU of compute capability 8.0 or
    newer); otherwise one sentence saying why not. ``device=None`` means the current CUDA device."""
    if interpreted():
        return ("TRITON_INTERPRET=1 was set when Triton was imported, so Triton's CPU interpreter "
                "runs the kernel instead of the GPU: unset it and start a new Python process.")
    if not torch.cuda.is_available():
        return "there is no CUDA device here, and the Triton kernel runs only on a CUDA GPU."
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 0):
        try:
            name = f" ({torch.cuda.get_device_name(device)})"
        except (AssertionError, RuntimeError):  # no name where CUDA is only simulated (tests)
            name = ""
        return (f"this GPU{name} has compute capability {major}.{minor}; the course's Triton "
                "kernel is built for 8.0 (Ampere) and newer, the NVIDIA GPUs Triton supports, so "
                "use torch's scaled_dot_product_attention here.")
    return None


def _is_power_of_two(x) -> bool:
    return is_int(x) and x > 0 and x & (x - 1) == 0


def _check_inputs(q, k, v, mask, block, num_warps=None, num_stages=None) -> None:
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
    if block is not None and (not _is_power_of_two(block) or not 16 <= block <= 256):
        raise ValueError(f"block must be a power of two from 16 to 256 (rows and columns per "
                         f"tile), or None to have it chosen, got {block!r}. Typical: 32, 64.")
    if num_warps is not None and (not _is_power_of_two(num_warps) or num_warps > 16):
        raise ValueError(f"num_warps must be None (chosen for you) or 1, 2, 4, 8 or 16, got "
                         f"{num_warps!r}.")
    if num_stages is not None and (not is_int(num_stages) or num_stages < 1):
        raise ValueError(f"num_stages must be None (chosen for you) or an int >= 1, got "
                         f"{num_stages!r}.")
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be None, 'causal' or a boolean tensor, got {mask!r}.")
    elif mask is not None:
        check_mask(mask, (*q.shape[:2], q.shape[2], k.shape[2]))


# tl.dot's input precision: for float32 inputs "ieee" keeps exact float32 products (Triton's
# default, TF32, keeps 10 mantissa bits); for half-precision inputs the setting changes nothing.
_PRECISION = {torch.float16: "tf32", torch.bfloat16: "tf32", torch.float32: "ieee"}


def _plan(n_q: int, n_kv: int, block: int, mask: torch.Tensor):
    """The live key tiles of every query tile, first in each row, with their states.

    From :func:`encoderlab.kernels.tiles.classify_tiles`: ``tiles[i, :counts[i]]`` are the key
    tiles that query tile i visits, ``states`` says which of them are PARTIAL. Built
    with torch operations where ``mask`` lives: on the GPU, no value goes to the host.
    """
    states = classify_tiles(n_q, n_kv, block, mask)  # (T_q, T_kv) int8, on mask.device
    live = states != SKIP  # (T_q, T_kv)
    # Sort each row so that the live tiles come first, in order (a stable sort on "skipped").
    tiles = torch.sort((~live).to(torch.int8), dim=1, stable=True).indices  # (T_q, T_kv)
    ordered_states = states.gather(1, tiles)  # (T_q, T_kv)
    counts = live.sum(dim=1)  # (T_q,)
    return tiles.to(torch.int32), ordered_states.to(torch.int32), counts.to(torch.int32)


# --- Launch configurations: only what fits the GPU ---------------------------------------------

# (block, num_warps) for each dtype and head dimension d = max(d_k, d_v): a tile whose every
# kernel variant (masking mode, even or ragged n) compiles for sm_80 (A100) and sm_90 (H100)
# without register spills, in at most 131,072 bytes of shared memory at three stages (90,112
# on sm_80); tests/core/test_triton_compile.py checks them. Block 128 spills with a mask.
# float32 runs without tensor cores ("ieee" products: exact, but several times slower than
# float16), so its tiles are smaller; for speed, convert q, k and v to float16 or bfloat16.
TILES = {
    torch.float16: {16: (64, 8), 32: (64, 8), 64: (64, 8), 128: (64, 8), 256: (32, 8)},
    torch.bfloat16: {16: (64, 8), 32: (64, 8), 64: (64, 8), 128: (64, 8), 256: (32, 8)},
    torch.float32: {16: (64, 8), 32: (64, 8), 64: (32, 4), 128: (32, 8), 256: (16, 4)},
}
STAGES = (3, 2, 1)  # software-pipelining depth (key tiles in flight), deepest first


def launch_configs(dtype: torch.dtype, d: int, block: int | None = None,
                   num_warps: int | None = None, num_stages: int | None = None) -> list[tuple]:
    """The (block, num_warps, num_stages) to try, best first; the first one that fits launches.

    Deeper pipelines and larger tiles need more shared memory; a GPU that has too little for
    one (Triton raises OutOfResources before launching) gets the next. ``d`` = max(d_k, d_v).
    An argument that is given is kept as given (a block of the caller's is not checked for
    register spills: they make a kernel slow, not wrong).
    """
    tile_block, tile_warps = TILES[dtype][d]
    blocks = [block] if block is not None else [b for b in (tile_block, tile_block // 2) if b >= 16]
    stages = [num_stages] if num_stages is not None else STAGES
    warps = tile_warps if num_warps is None else num_warps
    return [(b, warps, s) for b in blocks for s in stages]  # block-major: shrink stages first


def compile_options(dtype: torch.dtype, num_warps: int, num_stages: int) -> dict:
    """Triton's options for one launch config: warps, pipeline stages, and a register cap.

    For float16 and bfloat16, ``maxnreg`` lets ptxas give a thread every register it may have
    (65,536 per block, 255 at most): left alone, ptxas aims at two blocks per multiprocessor
    on sm_80 and spills 8-24 bytes in some tiles. float32 is left to ptxas: with the cap, its
    tiles (no tensor cores) grow to 255 registers and spill (both measured by compiling).
    Fused multiply-adds are asked for by name: Triton 3.9's default, which 3.10 changes.
    """
    options = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": True}
    if dtype != torch.float32:
        options["maxnreg"] = min(255, 65_536 // (32 * num_warps))
    return options


_CHOSEN = {}  # (device, dtype, d_k, d_v, masking, n_kv % 256, arguments) -> config that launched


def _launch_first_that_fits(launch, configs: list[tuple], key) -> int:
    """``launch(block, num_warps, num_stages)`` with the first config that fits; returns its block.

    Triton raises OutOfResources before anything runs when a kernel needs more shared memory
    than this GPU has; the next config is then tried. The one that launched is remembered.
    """
    failures = []
    for config in [_CHOSEN[key]] if key in _CHOSEN else configs:
        try:
            launch(*config)
        except triton.runtime.OutOfResources as err:
            failures.append(f"block={config[0]}, num_stages={config[2]}: {err}")
            continue
        _CHOSEN[key] = config
        return config[0]
    raise ValueError("no launch configuration of the Triton kernel fits this GPU: "
                     + "; ".join(failures) + ". Use a smaller block, or leave block and "
                     "num_stages at None.")


def triton_attention(
    q: torch.Tensor,  # (b, h, n_q, d_k)
    k: torch.Tensor,  # (b, h, n_kv, d_k)
    v: torch.Tensor,  # (b, h, n_kv, d_v)
    mask: torch.Tensor | str | None = None,  # None, "causal", or bool (b|1, h|1, n_q|1, n_kv)
    block: int | None = None,
    *,
    return_visits: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
):
    """softmax(QK^T/sqrt(d_k) + M) V on the GPU, tile by tile, skipping hidden tiles (Lesson 9).

    The same algorithm and result as :func:`encoderlab.tiled.tiled_attention`
    (a row with no visible key gives zeros), computed by one Triton program per
    (query tile, batch·head). ``mask="causal"`` is top-left aligned like
    ``is_causal=True``; a mask tensor should live on q's device (its tile plan is made
    there). Scores and sums are float32; the output has the inputs' dtype. ``block``,
    ``num_warps`` and ``num_stages`` left at None are chosen by :func:`launch_configs`.
    With ``return_visits=True`` also returns the (b, h, T_q) int32 count of key tiles
    each program computed, to check that skipped tiles were skipped.
    """
    _check_inputs(q, k, v, mask, block, num_warps, num_stages)
    b, h, n_q, d_k = q.shape
    n_kv, d_v = k.shape[2], v.shape[3]
    q_, k_, v_ = q.contiguous(), k.contiguous(), v.contiguous()  # (b, h, n, d) rows packed
    out = torch.empty(b, h, n_q, d_v, dtype=q.dtype, device=q.device)  # (b, h, n_q, d_v)
    masking = PLAN if isinstance(mask, torch.Tensor) else CAUSAL if mask == "causal" else NO_MASK
    if masking == PLAN:
        mask = mask.to(q.device)  # a copy only if the caller left it elsewhere
        m4 = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (b|1, h|1, ., .)
        m4 = m4.view(torch.uint8).expand(b, h, n_q, n_kv)  # (b, h, n_q, n_kv) bytes, no copy
    visits = {}  # block -> (b, h, T_q) int32, allocated only when counting

    def launch(block: int, warps: int, stages: int) -> None:
        t_q, t_kv = math.ceil(n_q / block), math.ceil(n_kv / block)
        if b * h * t_q >= 2**31:
            raise ValueError(f"b * h * ceil(n_q / block) = {b * h * t_q} programs, more than "
                             "a grid allows (2^31 - 1): split the batch.")
        unused = out  # a placeholder for the pointers this variant never reads
        plan, mask_args = (unused, unused, unused), (unused, 0, 0, 0, 0)
        if masking == PLAN:
            plan, mask_args = _plan(n_q, n_kv, block, mask), (m4, *m4.stride())
        if return_visits:
            visits[block] = torch.zeros(b, h, t_q, dtype=torch.int32, device=q.device)
        # One program per (batch·head, query tile), all on grid axis 0 (see the kernel).
        _attention_kernel[(b * h * t_q,)](
            q_, k_, v_, out, *mask_args, *plan, visits.get(block, unused),
            h, n_q, n_kv, t_kv, math.log2(math.e) / math.sqrt(d_k),
            MASKING=masking, EVEN_N=n_kv % block == 0, COUNT=return_visits,
            BLOCK=block, D_K=d_k, D_V=d_v, PRECISION=_PRECISION[q.dtype],
            **compile_options(q.dtype, warps, stages),
        )

    configs = launch_configs(q.dtype, max(d_k, d_v), block, num_warps, num_stages)
    key = (q.device, q.dtype, d_k, d_v, masking, n_kv % 256, block, num_warps, num_stages)
    chosen = _launch_first_that_fits(launch, configs, key)
    return (out, visits[chosen]) if return_visits else out

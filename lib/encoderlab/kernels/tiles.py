"""Which tiles of the score matrix a mask leaves live: the plan that the tiled loop
(:mod:`encoderlab.tiled`) and the GPU kernel (:mod:`encoderlab.kernels.tiled_triton`) both
follow (Lessons 3 and 9). Plain torch: it imports on every machine.
"""

from __future__ import annotations

import torch

from encoderlab.masks import check_mask
from encoderlab.validate import check_int, check_positive_int

__all__ = ["SKIP", "PARTIAL", "FULL", "check_block_size", "n_tiles", "classify_tiles"]

# The three states of a tile (the values stored by classify_tiles).
SKIP = 0  # every entry hidden: never computed
PARTIAL = 1  # some entries hidden: computed, then masked
FULL = 2  # nothing hidden: computed without any mask


def check_block_size(block_size) -> int:
    """``block_size``, checked: a positive int (ValueError otherwise)."""
    return check_positive_int(block_size, "block_size", what="rows and columns per tile",
                              hint="Typical values are 32, 64 or 128.")


def n_tiles(n: int, block_size: int) -> int:
    """How many tiles of ``block_size`` cover ``n`` positions (the last one may be short)."""
    return -(-n // block_size)  # ceil(n / block_size) in integers


def _tile_any_all(m: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per tile of a (n_q, n_kv) boolean matrix: is any entry True, are all entries True?"""
    n_q, n_kv = m.shape
    t_q, t_kv = n_tiles(n_q, block_size), n_tiles(n_kv, block_size)
    if (n_q, n_kv) != (t_q * block_size, t_kv * block_size):
        # Pad to whole tiles with False: padded entries are not real positions.
        padded = m.new_zeros(t_q * block_size, t_kv * block_size)  # (T_q * bs, T_kv * bs)
        padded[:n_q, :n_kv] = m
        m = padded
    # Axes: tile row, row within the tile, tile column, column within the tile.
    # Counting the True entries of each tile answers both questions in one pass.
    count = m.reshape(t_q, block_size, t_kv, block_size).sum(dim=(1, 3), dtype=torch.int32)
    starts_q = torch.arange(t_q, device=m.device) * block_size  # (T_q,) first row of each tile
    starts_kv = torch.arange(t_kv, device=m.device) * block_size  # (T_kv,)
    rows = (n_q - starts_q).clamp(max=block_size)  # (T_q,) real rows per tile
    cols = (n_kv - starts_kv).clamp(max=block_size)  # (T_kv,) real columns
    return count > 0, count == rows[:, None] * cols[None, :]  # (T_q, T_kv) each


def _causal_tiles(n_q: int, n_kv: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which tiles of the causal mask (key j visible to query i iff j <= i) are live / full.

    Worked out from the tile corners, without building the (n_q, n_kv) mask:
    the tile with rows [r0, r1) and columns [c0, c1) has a visible entry iff its
    bottom-left corner (r1 - 1, c0) is visible, i.e. c0 <= r1 - 1, and every
    entry is visible iff its top-right corner (r0, c1 - 1) is, i.e. c1 - 1 <= r0.
    """
    t_q, t_kv = n_tiles(n_q, block_size), n_tiles(n_kv, block_size)
    r0 = torch.arange(t_q) * block_size  # (T_q,) first row of each query tile
    r1 = torch.clamp(r0 + block_size, max=n_q)  # (T_q,) one past its last row
    c0 = torch.arange(t_kv) * block_size  # (T_kv,) first column of each key tile
    c1 = torch.clamp(c0 + block_size, max=n_kv)  # (T_kv,) one past its last column
    live = c0[None, :] <= (r1[:, None] - 1)  # (T_q, T_kv): bottom-left corner visible
    full = (c1[None, :] - 1) <= r0[:, None]  # (T_q, T_kv): top-right corner visible
    return live, full


def classify_tiles(
    n_q: int,
    n_kv: int | None = None,
    block_size: int = 128,
    mask: torch.Tensor | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """The state of every tile: SKIP, PARTIAL or FULL, as an int8 tensor (T_q, T_kv) (Lesson 9).

    ``mask`` is a boolean mask broadcastable to (..., n_q, n_kv), True = may
    attend. With leading (batch, head) dimensions a tile is skipped only when
    it is hidden for *every* batch element and head, and is FULL only when it
    is visible for every one of them; anything in between is PARTIAL. With
    ``causal=True`` the causal mask (query i sees key j iff j <= i, top-left
    aligned) is combined with ``mask`` by logical and.

    This one function decides which tiles :func:`encoderlab.tiled.tiled_attention` computes,
    which :func:`encoderlab.tiled.tile_counts` counts and which the GPU kernel visits. The
    states are computed where ``mask`` lives, with torch operations only: for a mask on the GPU
    no value is copied to the host (the Triton kernel's plan is made this way on every call).
    """
    n_kv = n_q if n_kv is None else n_kv
    check_int(n_q, "n_q", at_least=0, what="a sequence length")  # 0 is allowed: no tiles
    check_int(n_kv, "n_kv", at_least=0, what="a sequence length")
    check_block_size(block_size)
    if mask is None:
        if causal:
            live, full = _causal_tiles(n_q, n_kv, block_size)
        else:
            t_q, t_kv = n_tiles(n_q, block_size), n_tiles(n_kv, block_size)
            live = full = torch.ones(t_q, t_kv, dtype=torch.bool)  # the encoder: all visible
    else:
        check_mask(mask, (*mask.shape[:-2], n_q, n_kv))  # any leading dims, then (n_q, n_kv)
        mask = mask.detach()
        if mask.dim() > 2:
            # Reduce the leading (batch, head) dims first, before expanding the last two:
            # "some element may attend here" and "every element may attend here".
            lead = tuple(range(mask.dim() - 2))
            some, every = mask.any(dim=lead), mask.all(dim=lead)  # (n_q or 1, n_kv or 1)
        else:
            some = every = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))  # (., .)
        one_mask = some is every  # no batch or head dims: one pass answers both questions
        some = some.expand(n_q, n_kv)  # (n_q, n_kv)
        every = some if one_mask else every.expand(n_q, n_kv)  # (n_q, n_kv)
        if causal:
            lower = torch.ones(n_q, n_kv, dtype=torch.bool, device=mask.device).tril()
            some, every = some & lower, every & lower
        if one_mask:
            live, full = _tile_any_all(some, block_size)  # (T_q, T_kv) each
        else:
            live, _ = _tile_any_all(some, block_size)  # (T_q, T_kv)
            _, full = _tile_any_all(every, block_size)  # (T_q, T_kv)
    # SKIP, PARTIAL or FULL by torch.where (boolean indexing would wait for the GPU)
    partial_or_full = torch.where(full, FULL, PARTIAL)  # (T_q, T_kv)
    return torch.where(live, partial_or_full, SKIP).to(torch.int8)  # (T_q, T_kv)

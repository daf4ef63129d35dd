"""What a causal kernel skips, and the tables of Lesson 3, §4.

A kernel that works in blocks of ``q_block`` queries by ``kv_block`` keys skips a block only when
all of it lies above the diagonal; :func:`block_ratio` counts the blocks that full and causal
attention compute. :func:`sdpa_cpu_blocks` is the plan of PyTorch's CPU flash kernel
(``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``): key blocks of 512, query blocks of 32,
64 or 256 by length. The timings that test these plans are in :mod:`encoderlab.course.bench`.
"""

from __future__ import annotations

import math

__all__ = ["block_counts", "block_ratio", "sdpa_cpu_blocks"]


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}.")
    return value


def block_counts(n: int, q_block: int, kv_block: int | None = None) -> tuple[int, int]:
    """(full, causal): the blocks of q_block queries by kv_block keys that each computes for n
    tokens (Lesson 3, §4). Causal skips a block only when every key in it lies after every query."""
    n, q_block = _positive_int(n, "n"), _positive_int(q_block, "q_block")
    kv_block = _positive_int(q_block if kv_block is None else kv_block, "kv_block")
    q_blocks, kv_blocks = math.ceil(n / q_block), math.ceil(n / kv_block)
    # query block r ends at query min((r + 1) q_block, n) - 1: it needs every key block that
    # starts at or before that query
    causal = sum(math.ceil(min((r + 1) * q_block, n) / kv_block) for r in range(q_blocks))
    return q_blocks * kv_blocks, causal


def block_ratio(n: int, q_block: int, kv_block: int | None = None) -> float:
    """Blocks computed by full over causal attention (:func:`block_counts`), Lesson 3, §4."""
    full, causal = block_counts(n, q_block, kv_block)
    return full / causal


def sdpa_cpu_blocks(n: int) -> tuple[int, int]:
    """(query block, key block) of PyTorch's CPU flash attention for n tokens (Lesson 3, §4)."""
    n = _positive_int(n, "n")
    q_block = 256 if n >= 768 else 64 if n >= 192 else 32
    return min(q_block, n), min(512, n)

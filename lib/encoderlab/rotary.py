"""Rotary position embeddings (RoPE): positions as rotations, with no table to run out of
(Lesson 9, §7).

Learned absolute positions (Lesson 2) are rows of a table with ``n_max`` rows; a 513th
position has no row. Rotary embeddings instead rotate each pair of coordinates of q and k
by an angle proportional to the position, ``theta_p = p * base^(-2i/d)``. Since rotations
compose, <R(p) q, R(r) k> = <q, R(r - p) k>: the score depends on the positions only
through the offset r - p, and any position can be computed.
"""

from __future__ import annotations

import torch

from encoderlab.validate import is_int

__all__ = ["rotary_angles", "apply_rotary"]


def rotary_angles(positions: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """(n, d/2) angles p * base^(-2i/d) for each position p and coordinate pair i."""
    if not is_int(d) or d < 2 or d % 2:
        raise ValueError(
            f"the head dimension must be a positive even int (coordinates are rotated in "
            f"pairs), got {d!r}."
        )
    positions = torch.as_tensor(positions)
    if positions.dim() != 1:
        raise ValueError(
            f"positions must be 1-D (one position per token), got shape {tuple(positions.shape)}."
        )
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    return positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (n, d/2)


def _rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    cos = angles.cos().to(x.dtype)  # (n, d/2)
    sin = angles.sin().to(x.dtype)  # (n, d/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., n, d/2) each: the pairs (x_2i, x_2i+1)
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out  # (..., n, d)


def apply_rotary(
    q: torch.Tensor,  # (..., n, d)
    k: torch.Tensor,  # (..., n_kv, d)
    positions: torch.Tensor,  # (n,) positions of the queries
    key_positions: torch.Tensor | None = None,  # (n_kv,); the same as positions if None
    base: float = 10000.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k by their positions (Lesson 9, §7); returns (q_rot, k_rot).

    The scores q_rot k_rot^T then depend on positions only through key - query offsets.
    """
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"q and k must share their last dimension, got {d} and {k.shape[-1]}.")
    key_positions = positions if key_positions is None else key_positions
    if len(positions) != q.shape[-2] or len(key_positions) != k.shape[-2]:
        raise ValueError(
            f"need one position per row: q has {q.shape[-2]} rows and {len(positions)} "
            f"positions, k has {k.shape[-2]} rows and {len(key_positions)} positions."
        )
    return (_rotate(q, rotary_angles(positions, d, base)),
            _rotate(k, rotary_angles(key_positions, d, base)))

"""Attention masks, one convention everywhere (Lesson 3).

A mask is a boolean tensor, **True = may attend**, that broadcasts to the
score matrix's shape ``(b, h, n_q, n_kv)``. Row i is the query, column j the
key. The additive form used inside the softmax (0 where allowed, -inf where
not) is made from it by :func:`to_additive`, in one place only.
"""

from __future__ import annotations

import torch

__all__ = ["bidirectional", "causal", "padding", "combine", "to_additive", "check_mask"]


def _check_length(n, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be a positive int (a sequence length), got {n!r}.")
    return n


def bidirectional(n: int, device=None) -> torch.Tensor:
    """The encoder's mask, M_ij = 0 for all i, j: every query may see every key (Lesson 3, §2).

    Returns a (n, n) boolean tensor of True.
    """
    _check_length(n)
    return torch.ones(n, n, dtype=torch.bool, device=device)  # (n, n)


def causal(n: int, device=None) -> torch.Tensor:
    """The decoder's mask: query i may see key j only when j <= i (Lesson 3, §2).

    Returns a (n, n) lower-triangular boolean tensor.
    """
    _check_length(n)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()  # (n, n)


def padding(attention_mask: torch.Tensor) -> torch.Tensor:
    """Key-side padding mask from a tokenizer's attention_mask (Lesson 3, §5).

    ``attention_mask`` is (b, n) with 1 for real tokens and 0 for [PAD]. The
    result is (b, 1, 1, n): it hides padding *columns* (keys) from every query
    row and every head, and leaves the rows alone.
    """
    if not isinstance(attention_mask, torch.Tensor):
        attention_mask = torch.as_tensor(attention_mask)
    if attention_mask.dim() != 2:
        raise ValueError(
            "padding() expects the tokenizer's attention_mask of shape (batch, n), "
            f"got shape {tuple(attention_mask.shape)}. Pass a 2-D tensor of 0/1 (or bool)."
        )
    if attention_mask.dtype != torch.bool:
        values = torch.unique(attention_mask)
        if not bool(((values == 0) | (values == 1)).all()):
            raise ValueError(
                "padding() expects attention_mask values in {0, 1} (1 = real token, 0 = [PAD]), "
                f"got values {values.tolist()[:6]}."
            )
        attention_mask = attention_mask != 0
    return attention_mask[:, None, None, :]  # (b, 1, 1, n)


def check_mask(mask: torch.Tensor, shape: tuple[int, ...], name: str = "mask") -> None:
    """Raise a ValueError unless ``mask`` is boolean and broadcasts to ``shape``."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of dtype bool, got {type(mask).__name__}.")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be boolean (True = may attend), got dtype {mask.dtype}. "
            "Build it with encoderlab.masks, or convert a 0/1 mask with `mask.bool()`; "
            "an additive 0/-inf mask converts with `mask == 0`."
        )
    try:
        fits = torch.broadcast_shapes(tuple(mask.shape), tuple(shape)) == tuple(shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(shape)} (batch, heads, n_q, n_kv). A (b, n) padding mask must go "
            "through masks.padding() to become (b, 1, 1, n)."
        )


def combine(*masks: torch.Tensor) -> torch.Tensor:
    """Logical AND of masks: a key is visible only if every mask allows it.

    For example ``combine(causal(n), padding(am))`` is a batched decoder's mask.
    """
    if not masks:
        raise ValueError("combine() needs at least one mask, got none.")
    out = masks[0]
    for i, m in enumerate(masks):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            got = m.dtype if isinstance(m, torch.Tensor) else type(m).__name__
            raise ValueError(f"combine(): mask #{i} must be a boolean tensor, got {got}.")
        if i:
            try:
                out = out & m
            except RuntimeError:
                raise ValueError(
                    f"combine(): mask #{i} of shape {tuple(m.shape)} does not broadcast "
                    f"with shape {tuple(out.shape)}."
                ) from None
    return out


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive M of softmax(QK^T/sqrt(d_k) + M): 0 where allowed, -inf where not."""
    check_mask(mask, tuple(mask.shape) if isinstance(mask, torch.Tensor) else ())
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, float("-inf"))

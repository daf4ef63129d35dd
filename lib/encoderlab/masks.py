"""Attention masks, one convention everywhere (Lesson 3).

A mask is a boolean tensor, **True = may attend**, that broadcasts to the
score matrix's shape ``(b, h, n_q, n_kv)``. Row i is the query, column j the
key. The additive form used inside the softmax (0 where allowed, -inf where
not) is made from it by :func:`to_additive`, in one place only.
"""

from __future__ import annotations

import torch

from encoderlab.validate import check_int, check_positive_int

__all__ = [
    "bidirectional",
    "causal",
    "padding",
    "prefix_lm",
    "sliding_window",
    "document",
    "cross",
    "combine",
    "to_additive",
    "check_mask",
]


def bidirectional(n: int, device=None) -> torch.Tensor:
    """The encoder's mask, M_ij = 0 for all i, j: every query may see every key (Lesson 3, §2).

    Returns a (n, n) boolean tensor of True.
    """
    check_positive_int(n, "n", what="a sequence length")
    return torch.ones(n, n, dtype=torch.bool, device=device)  # (n, n)


def causal(n: int, device=None) -> torch.Tensor:
    """The decoder's mask: query i may see key j only when j <= i (Lesson 3, §2).

    Returns a (n, n) lower-triangular boolean tensor.
    """
    check_positive_int(n, "n", what="a sequence length")
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


def prefix_lm(n: int, prefix_len: int, device=None) -> torch.Tensor:
    """The prefix-LM mask: bidirectional over the first ``prefix_len`` positions, causal after.

    Every query sees the whole prefix; a query after the prefix also sees the
    positions up to itself (Lesson 10). ``prefix_len=0`` is causal, ``n`` is bidirectional.
    """
    check_positive_int(n, "n", what="a sequence length")
    check_int(prefix_len, "prefix_len", at_least=0, at_most=n, what=f"n={n} positions in all")
    mask = causal(n, device=device)  # (n, n)
    mask[:, :prefix_len] = True  # the prefix is visible from everywhere
    return mask


def sliding_window(n: int, window: int, causal: bool = False, device=None) -> torch.Tensor:
    """Local attention: query i sees key j only when |i - j| <= window (Lesson 9).

    With ``causal=True`` only the left side is kept (j <= i and i - j <= window),
    the decoder's sliding window; without it both sides, as in Longformer's and
    ModernBERT's local layers.
    """
    check_positive_int(n, "n", what="a sequence length")
    check_int(window, "window", at_least=0, what="keys on each side")
    i = torch.arange(n, device=device)[:, None]  # (n, 1): queries
    j = torch.arange(n, device=device)[None, :]  # (1, n): keys
    mask = (i - j).abs() <= window  # (n, n)
    return mask & (j <= i) if causal else mask


def document(doc_ids: torch.Tensor) -> torch.Tensor:
    """Block-diagonal mask for packed sequences: a token sees only its own document (Lesson 9).

    ``doc_ids`` is (n,) or (b, n), one document number per position; the result
    is (n, n) or (b, 1, n, n). Combine it with ``causal(n)`` for packed decoder training.
    """
    if not isinstance(doc_ids, torch.Tensor):
        doc_ids = torch.as_tensor(doc_ids)
    if doc_ids.dim() not in (1, 2) or doc_ids.dtype.is_floating_point or doc_ids.numel() == 0:
        raise ValueError(
            "doc_ids must be a non-empty integer tensor of shape (n,) or (batch, n), one "
            f"document number per position; got dtype {doc_ids.dtype}, "
            f"shape {tuple(doc_ids.shape)}."
        )
    same = doc_ids[..., :, None] == doc_ids[..., None, :]  # (..., n, n)
    return same if doc_ids.dim() == 1 else same[:, None]  # (n, n) or (b, 1, n, n)


def cross(q_mask: torch.Tensor, kv_mask: torch.Tensor) -> torch.Tensor:
    """Cross-attention mask from the two sides' attention masks (Lesson 10).

    ``q_mask`` is the decoder's (b, n_q), ``kv_mask`` the encoder's (b, n_kv), 1 = real
    token. Padded source tokens are hidden from every query; a padded query row sees
    nothing, so its output is zero. Result: (b, 1, n_q, n_kv), a rectangle.
    """
    q, kv = padding(q_mask), padding(kv_mask)  # (b, 1, 1, n_q), (b, 1, 1, n_kv)
    if q.shape[0] != kv.shape[0]:
        raise ValueError(
            f"q_mask and kv_mask must have the same batch size, got {q.shape[0]} and {kv.shape[0]}."
        )
    return q.transpose(-1, -2) & kv  # (b, 1, n_q, 1) & (b, 1, 1, n_kv) -> (b, 1, n_q, n_kv)


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
        n_q, n_kv = tuple(shape)[-2:]
        if mask.dim() == 2 and mask.shape[0] == mask.shape[1]:  # a square mask of another run
            advice = f"A square mask must be built for this run's lengths: ({n_q}, {n_kv})."
        elif mask.dim() and mask.shape[-1] == n_kv:  # the keys fit: axes are missing
            advice = "A (b, n) padding mask must go through masks.padding() to become (b, 1, 1, n)."
        else:
            advice = f"Its last axis must count the keys: {n_kv} (or 1)."
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(shape)} (batch, heads, n_q, n_kv). {advice}"
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

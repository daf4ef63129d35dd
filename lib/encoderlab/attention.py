"""Scaled dot-product attention and multi-head attention (Lesson 3, §1; Lesson 4).

    Attn(Q, K, V) = softmax(Q K^T / sqrt(d_k) + M) V

The encoder and the decoder share this operator; they differ only in the mask
M (see :mod:`encoderlab.masks`). Masks here are boolean, True = may attend.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from encoderlab.masks import check_mask
from encoderlab.validate import check_heads, check_int, check_qkv

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "KVCache",
    "offset_attention_mass",
    "diagonal_stats",
]


def scaled_dot_product_attention(
    q: torch.Tensor,  # (..., n_q, d_k)
    k: torch.Tensor,  # (..., n_kv, d_k)
    v: torch.Tensor,  # (..., n_kv, d_v)
    mask: torch.Tensor | None = None,  # bool, broadcastable to (..., n_q, n_kv)
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QK^T/sqrt(d_k) + M) V, returning (out, weights A) (Lesson 3, §1).

    A query row with no key it may attend to gets weights 0 and output 0, not NaN.
    """
    check_qkv(q, k, v)
    d_k = q.shape[-1]
    # (..., n_q, n_kv): s_ij = q_i . k_j / sqrt(d_k); multiplying by d_k**-0.5 rounds exactly
    # as the reference BertModel does, so the two agree bit for bit
    s = (q @ k.transpose(-2, -1)) * d_k**-0.5
    if mask is not None:
        check_mask(mask, tuple(s.shape))
        s = s.masked_fill_(~mask, float("-inf"))  # exp(-inf) = 0: those keys get no weight
    a = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)  # (..., n_q, n_kv), rows sum to 1
    if mask is not None:
        # A row whose keys are all masked is 0/0 = NaN in the softmax; it attends to nothing.
        empty_rows = ~mask.any(dim=-1, keepdim=True)  # (..., n_q or 1, 1)
        if empty_rows.any():
            a = a.masked_fill(empty_rows, 0.0)
    out = a @ v  # (..., n_q, d_v)
    return out, a


class KVCache:
    """Keys and values a decoder keeps between generation steps, for one attention layer.

    Self-attention appends the new position's K and V at every step, so step t+1
    attends over all earlier positions without recomputing them. Cross-attention
    stores the source's K and V once and reuses them at every step (Lesson 10).
    """

    def __init__(self):
        self.k: torch.Tensor | None = None  # (b, h, t, d_k)
        self.v: torch.Tensor | None = None  # (b, h, t, d_v)

    def store(self, k: torch.Tensor, v: torch.Tensor, append: bool = True):
        if append and self.k is not None:
            k = torch.cat([self.k, k], dim=-2)  # (b, h, t + n_new, d_k)
            v = torch.cat([self.v, v], dim=-2)
        self.k, self.v = k, v
        return k, v

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]


class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention, concatenated and mixed by W_O (Lesson 4, §1).

    Self-attention when ``context`` is None; cross-attention (queries from x, keys
    and values from ``context``) otherwise. With ``need_weights=False`` the same
    arithmetic runs in torch's fused kernel, which never stores A (tested equal).
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        check_heads(d_model, n_heads)
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)  # all heads' W_Q side by side
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)  # mixes the concatenated heads
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.d_k).transpose(1, 2)  # (b, h, n, d_k)

    def forward(
        self,
        x: torch.Tensor,  # (b, n_q, d_model)
        context: torch.Tensor | None = None,  # (b, n_kv, d_model) for cross-attention
        mask: torch.Tensor | None = None,  # bool, broadcastable to (b, h, n_q, n_kv)
        need_weights: bool = True,
        cache: KVCache | None = None,  # the decoder's cache for this layer (Lesson 10)
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (batch, n, d_model={self.d_model}), got {tuple(x.shape)}."
            )
        q = self._split_heads(self.w_q(x))  # (b, h, n_q, d_k)
        if cache is not None and context is not None and cache.k is not None:
            k, v = cache.k, cache.v  # cross-attention: the source's K, V were computed once
        else:
            source = x if context is None else context
            k = self._split_heads(self.w_k(source))  # (b, h, n_kv, d_k)
            v = self._split_heads(self.w_v(source))  # (b, h, n_kv, d_k)
            if cache is not None:  # self-attention appends the new positions; cross stores once
                k, v = cache.store(k, v, append=context is None)
        if need_weights or (self.training and self.dropout.p > 0):
            # out (b, h, n_q, d_k), a (b, h, n_q, n_kv)
            out, a = scaled_dot_product_attention(q, k, v, mask)
            if self.training and self.dropout.p > 0:
                out = self.dropout(a) @ v
        else:  # same formula, fused: True in a boolean attn_mask also means "may attend"
            if mask is not None:
                check_mask(mask, (q.shape[0], self.n_heads, q.shape[2], k.shape[2]))
            out, a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None
        b, _, n_q, _ = out.shape
        out = out.transpose(1, 2).reshape(b, n_q, self.d_model)  # (b, n_q, h * d_k): concat heads
        return self.w_o(out), a  # (b, n_q, d_model), (b, h, n_q, n_kv)


def offset_attention_mass(weights: torch.Tensor, offset: int = 1) -> torch.Tensor:
    """Mean weight query i puts on key i + offset, over the queries that have one (Lesson 3, §3).

    ``weights`` is A of shape (..., n, n); the result has shape (...), one number
    per matrix. ``offset=1`` measures copying from the next position: a
    bidirectional model trained on next-token prediction learns to put almost
    all its weight there, and a causal model can put none there at all.
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() < 2:
        raise ValueError(
            "weights must be attention weights of shape (..., n, n), got "
            f"{tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights)}."
        )
    n_q, n_kv = weights.shape[-2:]
    check_int(offset, "offset", at_least=1 - n_q, at_most=n_kv - 1,
              what="some query i must have a key i + offset")
    # (..., number of queries that have a key at i + offset): A[i, i + offset]
    band = torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1)
    return band.mean(dim=-1)  # (...)


def diagonal_stats(matrix) -> dict[str, np.ndarray]:
    """Mean, min and max of each diagonal M[i, i + k] of a square matrix, k = 0..n-1 (Lesson 2, §5).

    The relative of :func:`offset_attention_mass` for one matrix and every offset at once:
    ``diagonal_stats(M)["mean"][k]`` is ``offset_attention_mass(M, k)``. For a similarity matrix
    of positions, entry k summarises how alike two positions k apart are. Returns numpy arrays
    ``offset``, ``mean``, ``min``, ``max`` and ``count`` (the n - k pairs behind each), the
    numbers that ``plotting.similarity_by_offset`` draws.
    """
    if hasattr(matrix, "detach"):  # a tensor: on the CPU, in float64 like the numpy path
        matrix = matrix.detach().cpu().double().numpy()
    c = np.asarray(matrix, dtype=float)
    while c.ndim > 2 and c.shape[0] == 1:  # (1, 1, n, n) -> (n, n)
        c = c[0]
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(
            f"diagonal_stats needs a square matrix (position i against position j), got shape "
            f"{c.shape}."
        )
    n = c.shape[0]
    diagonals = [np.diagonal(c, k) for k in range(n)]  # diagonal k: the n - k pairs (i, i + k)
    return {
        "offset": np.arange(n),
        "mean": np.array([d.mean() for d in diagonals]),
        "min": np.array([d.min() for d in diagonals]),
        "max": np.array([d.max() for d in diagonals]),
        "count": np.array([d.size for d in diagonals]),
    }

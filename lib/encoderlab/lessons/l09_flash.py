"""FlashAttention beyond the forward loop: the I/O model, the backward pass, sparse patterns
(Lesson 9, §2b, §2c and §6).

Three small pieces, each something a reader can call with their own numbers:

* :func:`hbm_traffic` counts the numbers moved between a GPU's large, slow high-bandwidth
  memory (HBM) and its small on-chip SRAM by standard attention, which writes the (n, n)
  matrices S and P to HBM and reads them back, and by FlashAttention's tiled loop, which keeps
  one tile on chip (Dao et al., 2022, Algorithms 0 and 1 and Theorem 2:
  Θ(n d + n²) against Θ(n² d² / M) for an on-chip memory of M numbers).
* :func:`flash_forward` and :func:`flash_backward` are the tiled forward pass that also returns
  the log-sum-exp ``L = m + log l`` of every query row, and the backward pass that recomputes
  each tile of P from Q, K and L instead of storing P (Dao et al., 2022, Algorithm 4, in the
  loop order of FlashAttention-2, Dao 2023, Algorithm 2). :class:`FlashAttention` wraps both
  as an autograd function, so ``loss.backward()`` runs the tiled backward and saves only
  Q, K, V, O and L.
* :func:`longformer_mask` and :func:`bigbird_mask` build the block-sparse patterns with global
  tokens (Beltagy et al., 2020; Zaheer et al., 2020) as boolean masks.
* :func:`alibi_bias` is ALiBi's position bias (Press et al., 2022), in the symmetric form an
  encoder uses: an additive -m |i - j| per head instead of any position embedding (§7).
* :func:`disentangled_scores` splits DeBERTa's attention score into its content-to-content,
  content-to-position and position-to-content terms over clipped relative distances
  (:func:`relative_buckets`; He et al., 2020, §3.1).
"""

from __future__ import annotations

import math

import torch

from encoderlab import masks
from encoderlab.validate import check_positive_int

__all__ = [
    "hbm_traffic",
    "online_softmax_trace",
    "flash_forward",
    "flash_backward",
    "FlashAttention",
    "flash_attention",
    "saved_tensor_bytes",
    "work_split",
    "longformer_mask",
    "bigbird_mask",
    "alibi_slopes",
    "alibi_bias",
    "relative_buckets",
    "disentangled_scores",
]


# --- The I/O model ------------------------------------------------------------------------------


def hbm_traffic(n: int, d: int, sram_bytes: int, bytes_per_number: int = 2) -> dict:
    """HBM reads and writes of one head's attention forward pass, standard and tiled.

    ``n`` tokens, head size ``d``, ``sram_bytes`` of on-chip memory (SRAM), numbers of
    ``bytes_per_number`` bytes (2 for float16/bfloat16, as GPU kernels run). The counts follow
    Dao et al. (2022):

    * standard attention (their Algorithm 0): read Q, K (2nd), write S (n²); read S, write
      P (2n²); read P and V, write O (n² + 2nd): ``4nd + 4n²`` numbers;
    * tiled attention (their Algorithm 1): key/value tiles of ``B_c = ceil(M / 4d)`` columns and
      query tiles of ``B_r = min(B_c, d)`` rows, M = on-chip numbers. K and V are read once
      (2nd); for each of the ``T_c = ceil(n / B_c)`` key tiles, every query tile's Q_i, O_i and
      its running (m, l) are read and O_i, m, l written back: ``2nd + T_c (3nd + 4n)``, which is
      Θ(n² d² / M) (their Theorem 2).

    Returns a dict with ``standard`` and ``tiled`` (numbers moved), their ``*_bytes``, ``ratio``
    (standard / tiled) and the tile sizes ``block_cols``, ``block_rows`` and ``key_tiles``.
    """
    n = check_positive_int(n, "n", what="tokens")
    d = check_positive_int(d, "d", what="the head size")
    sram_bytes = check_positive_int(sram_bytes, "sram_bytes", what="bytes of on-chip memory")
    bytes_per_number = check_positive_int(bytes_per_number, "bytes_per_number",
                                          what="bytes per number")
    m_numbers = sram_bytes // bytes_per_number
    block_cols = math.ceil(m_numbers / (4 * d))
    if block_cols < 1 or m_numbers < 4 * d:
        raise ValueError(f"sram_bytes={sram_bytes} holds {m_numbers} numbers, fewer than the "
                         f"4d = {4 * d} one row of Q, K, V and O needs.")
    block_rows = min(block_cols, d)
    key_tiles = math.ceil(n / block_cols)
    standard = 4 * n * d + 4 * n * n
    tiled = 2 * n * d + key_tiles * (3 * n * d + 4 * n)
    return {"standard": standard, "tiled": tiled,
            "standard_bytes": standard * bytes_per_number, "tiled_bytes": tiled * bytes_per_number,
            "ratio": standard / tiled, "block_cols": block_cols, "block_rows": block_rows,
            "key_tiles": key_tiles}


def online_softmax_trace(row: torch.Tensor, block_size: int) -> dict:
    """The online softmax's state after each tile of one row of scores.

    Returns ``m`` (the running max after tile t), ``l`` (the running denominator
    sum_j exp(s_j - m), re-measured at each step), ``tile_max`` (each tile's own max) and the
    one-shot ``m_final`` and ``l_final`` over the whole row, all as Python floats.
    """
    row = torch.as_tensor(row, dtype=torch.float64).flatten()
    block_size = check_positive_int(block_size, "block_size", what="scores per tile")
    m, l_sum = -math.inf, 0.0
    ms, ls, tile_maxes = [], [], []
    for c in range(0, row.numel(), block_size):
        tile = row[c:c + block_size]
        tile_max = tile.max().item()
        m_new = max(m, tile_max)
        l_sum = l_sum * math.exp(m - m_new) + torch.exp(tile - m_new).sum().item()
        m = m_new
        ms.append(m)
        ls.append(l_sum)
        tile_maxes.append(tile_max)
    m_final = row.max().item()
    return {"m": ms, "l": ls, "tile_max": tile_maxes, "m_final": m_final,
            "l_final": torch.exp(row - m_final).sum().item()}


# --- The forward pass with its log-sum-exp, and the backward pass by recomputation -----------


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _tile_scores(q_i, k_j, scale, causal, r0, c0):
    """S_ij = Q_i K_j^T * scale for one tile, with -inf above the diagonal when causal."""
    s = (q_i @ k_j.transpose(-2, -1)) * scale  # (..., B_r, B_c)
    if causal:
        rows = torch.arange(r0, r0 + q_i.shape[-2]).unsqueeze(1)
        cols = torch.arange(c0, c0 + k_j.shape[-2]).unsqueeze(0)
        s = s.masked_fill(cols > rows, float("-inf"))
    return s


def _skipped(causal: bool, r1: int, c0: int) -> bool:
    """A causal tile whose first key comes after its last query: every entry hidden."""
    return causal and c0 > r1 - 1


def flash_forward(q, k, v, block_size: int = 64, causal: bool = False,
                  scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention that returns ``(O, L)``: the output and each row's log-sum-exp.

    ``q, k, v`` are (..., n, d). The loop is FlashAttention-2's (one query tile at a time, the
    key tiles inside); ``L = m + log l`` is the only per-row statistic the backward pass needs.
    Returns O (..., n, d_v) and L (..., n).
    """
    block_size = check_positive_int(block_size, "block_size", what="rows and columns per tile")
    scale = _scale(q, scale)
    n_q, n_kv = q.shape[-2], k.shape[-2]
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty(q.shape[:-1])
    for r0 in range(0, n_q, block_size):
        r1 = min(r0 + block_size, n_q)
        q_i = q[..., r0:r1, :]
        m = q.new_full((*q_i.shape[:-1], 1), float("-inf"))  # (..., B_r, 1)
        l_sum = q.new_zeros((*q_i.shape[:-1], 1))
        acc = q.new_zeros((*q_i.shape[:-1], v.shape[-1]))
        for c0 in range(0, n_kv, block_size):
            if _skipped(causal, r1, c0):
                break  # every later key tile is hidden too
            s = _tile_scores(q_i, k[..., c0:c0 + block_size, :], scale, causal, r0, c0)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - m_new)
            alpha = torch.exp(m - m_new)
            l_sum = l_sum * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p @ v[..., c0:c0 + block_size, :]
            m = m_new
        out[..., r0:r1, :] = acc / l_sum
        lse[..., r0:r1] = (m + torch.log(l_sum)).squeeze(-1)
    return out, lse


def flash_backward(q, k, v, out, lse, grad_out, block_size: int = 64, causal: bool = False,
                   scale: float | None = None):
    """dQ, dK, dV of attention, recomputing each tile of P from Q, K and the saved L.

    Nothing of size n x n is read: for every tile, ``P_ij = exp(Q_i K_j^T * scale - L_i)`` is
    recomputed exactly (L is the row's log-sum-exp, so this is the softmax), and

        dV_j += P_ij^T dO_i,   dP_ij = dO_i V_j^T,   dS_ij = P_ij * (dP_ij - D_i),
        dQ_i += dS_ij K_j * scale,   dK_j += dS_ij^T Q_i * scale,

    with ``D_i = rowsum(dO_i * O_i)`` (= rowsum(P_i * dP_i), computed once from O). The loop
    runs over key tiles outside, query tiles inside, as Dao et al. (2022, Algorithm 4) and
    Dao (2023, Algorithm 2) do: dK_j and dV_j stay on chip while dQ is accumulated.
    """
    block_size = check_positive_int(block_size, "block_size", what="rows and columns per tile")
    scale = _scale(q, scale)
    n_q, n_kv = q.shape[-2], k.shape[-2]
    d_row = (grad_out * out).sum(dim=-1, keepdim=True)  # D_i, (..., n_q, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for c0 in range(0, n_kv, block_size):
        c1 = min(c0 + block_size, n_kv)
        k_j, v_j = k[..., c0:c1, :], v[..., c0:c1, :]
        dk_j, dv_j = torch.zeros_like(k_j), torch.zeros_like(v_j)
        for r0 in range(0, n_q, block_size):
            r1 = min(r0 + block_size, n_q)
            if _skipped(causal, r1, c0):
                continue  # this query tile sees none of these keys
            q_i, do_i = q[..., r0:r1, :], grad_out[..., r0:r1, :]
            s = _tile_scores(q_i, k_j, scale, causal, r0, c0)
            p = torch.exp(s - lse[..., r0:r1].unsqueeze(-1))  # the softmax tile, recomputed
            dv_j += p.transpose(-2, -1) @ do_i
            dp = do_i @ v_j.transpose(-2, -1)
            ds = p * (dp - d_row[..., r0:r1, :])
            dq[..., r0:r1, :] += (ds @ k_j) * scale
            dk_j += (ds.transpose(-2, -1) @ q_i) * scale
        dk[..., c0:c1, :], dv[..., c0:c1, :] = dk_j, dv_j
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Attention whose backward pass is :func:`flash_backward`: saves Q, K, V, O and L only."""

    @staticmethod
    def forward(ctx, q, k, v, block_size=64, causal=False):
        out, lse = flash_forward(q, k, v, block_size=block_size, causal=causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.block_size, ctx.causal = block_size, causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, out, lse, grad_out, block_size=ctx.block_size,
                                    causal=ctx.causal)
        return dq, dk, dv, None, None


def flash_attention(q, k, v, block_size: int = 64, causal: bool = False) -> torch.Tensor:
    """softmax(QK^T / sqrt(d) [+ causal mask]) V, differentiable through the tiled backward."""
    return FlashAttention.apply(q, k, v, block_size, causal)


def saved_tensor_bytes(fn, *args) -> tuple[torch.Tensor, int]:
    """Run ``fn(*args)`` and count the bytes autograd keeps for its backward pass.

    Every tensor saved for backward passes through ``torch.autograd.graph.saved_tensors_hooks``;
    each storage is counted once (an input saved by two operations is one tensor in memory).
    The inputs themselves are left out: both ways of computing attention keep them anyway.
    Returns ``(output, bytes)``.
    """
    seen: dict[int, int] = {}
    inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in inputs:
            seen[ptr] = max(seen.get(ptr, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, sum(seen.values())


# --- FlashAttention-2's work split ---------------------------------------------------------


def work_split(n_tiles: int, version: int = 2) -> torch.Tensor:
    """The step at which each (query tile, key tile) of the forward pass is computed.

    ``version=2`` (FlashAttention-2): query tile a is one program, all run in parallel, and
    each walks its key tiles in order: tile (a, c) is computed at step c. ``version=1``
    (FlashAttention, Algorithm 1): one program loops over the key tiles outside and the query
    tiles inside, reading and writing every output tile once per key tile: tile (a, c) is
    computed at step c * n_tiles + a. Returns an (n_tiles, n_tiles) integer tensor.
    """
    n_tiles = check_positive_int(n_tiles, "n_tiles", what="tiles per side")
    a = torch.arange(n_tiles).unsqueeze(1).expand(n_tiles, n_tiles)
    c = torch.arange(n_tiles).unsqueeze(0).expand(n_tiles, n_tiles)
    if version == 2:
        return c.clone()
    if version == 1:
        return c * n_tiles + a
    raise ValueError(f"version must be 1 or 2 (FlashAttention or FlashAttention-2), got {version}.")


# --- Block-sparse patterns with global tokens -------------------------------------------------


def _global(n: int, global_tokens) -> torch.Tensor:
    """The mask of global attention: the global tokens see every key, every query sees them."""
    g = torch.zeros(n, dtype=torch.bool)
    g[list(global_tokens)] = True
    return g.unsqueeze(1) | g.unsqueeze(0)  # (n, n)


def longformer_mask(n: int, window: int, global_tokens=(0,)) -> torch.Tensor:
    """Longformer's pattern (Beltagy et al., 2020): a sliding window of ``window`` keys on each
    side, plus global attention on ``global_tokens`` (rows and columns open). An (n, n) mask.

    ``masks.combine`` is a logical AND (a key must pass every mask); a pattern that *adds*
    attention is the complement of an AND of complements: window OR global =
    NOT(combine(NOT window, NOT global)).
    """
    return ~masks.combine(~masks.sliding_window(n, window), ~_global(n, global_tokens))


def bigbird_mask(n: int, window: int, global_tokens=(0,), random_blocks: int = 2,
                 block_size: int = 64, seed: int = 0) -> torch.Tensor:
    """BigBird's pattern (Zaheer et al., 2020): Longformer's window and global tokens, plus
    ``random_blocks`` random key blocks of ``block_size`` for every query block (chosen with
    ``seed``), as BigBird's block-sparse implementation draws them. An (n, n) mask."""
    block_size = check_positive_int(block_size, "block_size", what="rows and columns per block")
    n_blocks = math.ceil(n / block_size)
    g = torch.Generator().manual_seed(seed)
    rand = torch.zeros(n, n, dtype=torch.bool)
    for a in range(n_blocks):
        for c in torch.randperm(n_blocks, generator=g)[:random_blocks].tolist():
            rand[a * block_size:(a + 1) * block_size, c * block_size:(c + 1) * block_size] = True
    return ~masks.combine(~longformer_mask(n, window, global_tokens), ~rand)


# --- ALiBi: positions as a linear bias on the scores (§7) ------------------------------------


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's head slopes for a power-of-two number of heads: the geometric sequence that starts
    at 2^(-8 / n_heads) and has that ratio (Press et al., 2022, §3): 1/2, 1/4, ..., 1/256 for 8
    heads. Returns (n_heads,)."""
    n_heads = check_positive_int(n_heads, "n_heads", what="heads")
    if n_heads & (n_heads - 1):
        raise ValueError(f"alibi_slopes takes a power of two heads (ALiBi's rule), got {n_heads}.")
    start = 2.0 ** (-8.0 / n_heads)
    return start ** torch.arange(1, n_heads + 1, dtype=torch.float64)


def alibi_bias(n: int, n_heads: int) -> torch.Tensor:
    """The (n_heads, n, n) additive bias -m_h |i - j|: added to the scores before the softmax,
    it depends only on the offset i - j, on both sides (an encoder's keys lie on both)."""
    n = check_positive_int(n, "n", what="tokens")
    offsets = torch.arange(n).unsqueeze(0) - torch.arange(n).unsqueeze(1)  # (n, n): j - i
    return -alibi_slopes(n_heads).view(-1, 1, 1) * offsets.abs().double()


# --- DeBERTa: disentangled attention over relative distances (§7) ---------------------------


def relative_buckets(n: int, k: int) -> torch.Tensor:
    """DeBERTa's relative distance delta(i, j) for a maximum distance ``k`` (He et al., 2020,
    §3.1): i - j + k, clipped to 0 when i - j <= -k and to 2k - 1 when i - j >= k. An (n, n)
    long tensor of bucket numbers in [0, 2k): one row of the relative table per bucket."""
    n = check_positive_int(n, "n", what="tokens")
    k = check_positive_int(k, "k", what="the maximum relative distance")
    offsets = torch.arange(n).unsqueeze(1) - torch.arange(n).unsqueeze(0)  # (n, n): i - j
    return (offsets + k).clamp(0, 2 * k - 1)


def disentangled_scores(h: torch.Tensor, rel: torch.Tensor, w_qc: torch.Tensor,
                        w_kc: torch.Tensor, w_qr: torch.Tensor, w_kr: torch.Tensor) -> dict:
    """The three terms of DeBERTa's attention score for one head (He et al., 2020, §3.1).

    ``h`` is (n, d_model) content, ``rel`` the (2k, d_model) relative position embeddings P
    (one row per bucket of :func:`relative_buckets`), the ``w_*`` (d_model, d) projections.
    With Q_c = h W_qc, K_c = h W_kc, Q_r = P W_qr and K_r = P W_kr:

        content-to-content  c2c[i, j] = Q_c[i] . K_c[j]
        content-to-position c2p[i, j] = Q_c[i] . K_r[delta(i, j)]
        position-to-content p2c[i, j] = K_c[j] . Q_r[delta(j, i)]

    and the score is (c2c + c2p + p2c) / sqrt(3 d); the position-to-position term is left
    out, as in the paper. Returns a dict of (n, n) tensors: the three terms, ``"scores"`` and
    ``"buckets"`` (delta).
    """
    if rel.shape[0] % 2 or rel.shape[1] != h.shape[1]:
        raise ValueError(f"rel must be (2k, d_model={h.shape[1]}), got {tuple(rel.shape)}.")
    n, k, d = h.shape[0], rel.shape[0] // 2, w_qc.shape[1]
    delta = relative_buckets(n, k)  # (n, n)
    q_c, k_c = h @ w_qc, h @ w_kc  # (n, d): content
    q_r, k_r = rel @ w_qr, rel @ w_kr  # (2k, d): one per relative distance
    c2c = q_c @ k_c.T  # (n, n)
    c2p = (q_c @ k_r.T).gather(1, delta)  # (n, 2k) -> (n, n): entry delta(i, j) of row i
    p2c = (k_c @ q_r.T).gather(1, delta).T  # entry delta(j, i) of key j's row, at (i, j)
    return {"c2c": c2c, "c2p": c2p, "p2c": p2c, "buckets": delta,
            "scores": (c2c + c2p + p2c) / math.sqrt(3 * d)}

"""Looking inside the encoder stack: attention, [CLS], norms (Lesson 4; parameter counts are in
:mod:`encoderlab.lessons.l04_count`).

Every function here reads what :class:`encoderlab.encoder.EncoderModel` already returns
(``hidden_states``: L + 1 tensors ``(b, n, d)``; ``attentions``: L tensors ``(b, h, n, n)``) or
its config, and reduces it to the few numbers a figure of Lesson 4 shows:

    on_cls = attention_to_tokens(out.attentions, ids, CLS_ID, attention_mask)  # (L, h)
    summary = cls_similarity_by_depth(out.hidden_states, attention_mask)  # (L + 1,)
    same = similarity_across_sequences_of(out.hidden_states, input_ids == SEP_ID)  # (L + 1,)
    norms = residual_norms(out.hidden_states, attention_mask)  # (L + 1, real tokens)

Padding is always left out: a [PAD] position is neither a query nor a key that counts, and its
vector is never averaged in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab.heads import pool
from encoderlab.validate import is_int, shape_of

__all__ = [
    "attention_to_tokens",
    "similarity_to_mean",
    "cls_similarity_by_depth",
    "similarity_across_sequences",
    "similarity_across_sequences_of",
    "residual_norms",
    "layer_to_layer_similarity",
    "value_contributions",
    "hide_keys",
    "block_without_residual",
    "residual_similarity",
    "update_sizes",
    "contributions_by_layer",
    "values_zeroed",
    "sink_interventions",
    "summary_by_depth",
]



# --- Shared checks ------------------------------------------------------------------------------


def _stack(tensors, what: str, dims: int, name: str) -> torch.Tensor:
    """A tuple of per-layer tensors (as EncoderOutput holds them) as one stacked tensor."""
    if isinstance(tensors, torch.Tensor):
        stacked = tensors
    else:
        if tensors is None or not isinstance(tensors, Sequence) or not tensors:
            raise ValueError(
                f"{name} must be the model's {what}: a tuple of tensors (or one stacked tensor), "
                f"got {type(tensors).__name__}. For attentions, call the model with "
                "output_attentions=True."
            )
        if any(not isinstance(t, torch.Tensor) for t in tensors):
            kinds = [type(t).__name__ for t in tensors]
            raise ValueError(f"{name} must hold tensors, got {kinds}.")
        stacked = torch.stack(tuple(tensors))
    if stacked.dim() != dims:
        raise ValueError(
            f"{name} must be {what}, {dims} dimensions when stacked, got shape "
            f"{tuple(stacked.shape)}."
        )
    return stacked.detach().float()


def _real_tokens(attention_mask, b: int, n: int, device) -> torch.Tensor:
    """The (b, n) boolean of real tokens; every token is real when no mask is given."""
    if attention_mask is None:
        return torch.ones(b, n, dtype=torch.bool, device=device)
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != (b, n):
        got = shape_of(attention_mask)
        raise ValueError(
            f"attention_mask must be the tokenizer's (b, n) = {(b, n)} tensor of 1s (real "
            f"tokens) and 0s ([PAD]), got {got}."
        )
    real = attention_mask.to(device).bool()
    if not real.any(dim=1).all():
        raise ValueError("every sequence needs at least one real token; one row of "
                         "attention_mask is all zeros.")
    return real


# --- Attention mass on special tokens (Lesson 4, §6) ----------------------------------------


def attention_to_tokens(
    attentions,  # L tensors (b, h, n, n), or (L, b, h, n, n)
    input_ids: torch.Tensor,  # (b, n)
    token_id: int,
    attention_mask: torch.Tensor | None = None,  # (b, n): 1 = real token, 0 = [PAD]
) -> torch.Tensor:
    """Mean attention weight that queries put on the keys holding ``token_id``: (L, h).

    (Lesson 4, §6.) For every layer and head, each real query's weights on the keys whose id is
    ``token_id`` (e.g. the [CLS] or [SEP] id) are summed; the result is the mean of that sum over
    every real query of every sequence. 0 means no query looks at the token, 1 means every query
    looks only at it. [PAD] queries are left out.
    """
    a = _stack(attentions, "attention weights, L tensors (b, h, n, n)", 5, "attentions")
    L, b, h, n_q, n_kv = a.shape
    if not isinstance(input_ids, torch.Tensor) or tuple(input_ids.shape) != (b, n_kv):
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else input_ids
        raise ValueError(
            f"input_ids must have shape (b, n) = {(b, n_kv)} to match the attentions "
            f"{tuple(a.shape[1:])}, got {got}."
        )
    if not is_int(token_id):
        raise ValueError(
            f"token_id must be one int id, e.g. tokenizer.cls_token_id, got {token_id!r}."
        )
    real = _real_tokens(attention_mask, b, n_q, a.device)  # (b, n)
    is_token = (input_ids.to(a.device) == token_id)  # (b, n): the keys we sum over
    mass = (a * is_token[None, :, None, None, :]).sum(dim=-1)  # (L, b, h, n_q)
    weight = real[None, :, None, :].float()  # (1, b, 1, n_q): real queries count once each
    return (mass * weight).sum(dim=(1, 3)) / weight.sum(dim=(1, 3))  # (L, h)


# --- [CLS] and the mean token vector (Lesson 4, §6) -----------------------------------------


def similarity_to_mean(
    hidden_states,  # L + 1 tensors (b, n, d), or (L + 1, b, n, d)
    attention_mask: torch.Tensor | None = None,  # (b, n)
) -> torch.Tensor:
    """Cosine of each token's vector to the mean of the *other* real tokens: (L + 1, b, n).

    (Lesson 4, §6.) Leaving the token itself out of the mean keeps the comparison fair: a token
    is not similar to the mean merely because it is part of it. [PAD] positions give NaN.
    Every sequence needs at least two real tokens.
    """
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    _, b, n, _ = hs.shape
    real = _real_tokens(attention_mask, b, n, hs.device)  # (b, n)
    counts = real.sum(dim=1)  # (b,)
    if (counts < 2).any():
        raise ValueError(
            "similarity_to_mean() compares each token with the mean of the others, so every "
            f"sequence needs at least 2 real tokens; got real-token counts {counts.tolist()}."
        )
    w = real[None, :, :, None].float()  # (1, b, n, 1)
    total = (hs * w).sum(dim=2, keepdim=True)  # (L + 1, b, 1, d)
    others = (total - hs * w) / (counts[None, :, None, None] - 1).float()  # (L + 1, b, n, d)
    cos = torch.cosine_similarity(hs, others, dim=-1)  # (L + 1, b, n)
    return cos.masked_fill(~real[None], float("nan"))


def cls_similarity_by_depth(
    hidden_states,  # L + 1 tensors (b, n, d)
    attention_mask: torch.Tensor | None = None,  # (b, n)
) -> torch.Tensor:
    """Mean cosine of the [CLS] vector (position 0) to the mean of the other tokens: (L + 1,).

    (Lesson 4, §6.) Entry l is for H^(l): 0 is the embeddings, L the last block's output. If
    [CLS] gathered a summary of the sequence with depth, this would rise towards 1.
    """
    return similarity_to_mean(hidden_states, attention_mask)[:, :, 0].mean(dim=1)  # (L + 1,)


def similarity_across_sequences(hidden_states, position: int = 0) -> torch.Tensor:
    """Mean cosine between the vectors at ``position`` of different sequences: (L + 1,).

    (Lesson 4, §6.) At position 0 ([CLS]) this asks whether [CLS] carries anything about its
    sequence at all: a value of 1 means every sequence has the same [CLS] vector. Needs a batch
    of at least two sequences.
    """
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    _, b, n, _ = hs.shape
    if b < 2:
        raise ValueError(f"comparing sequences needs a batch of at least 2, got b={b}.")
    if not is_int(position) or not -n <= position < n:
        raise ValueError(f"position must be an int in [0, {n}), got {position!r}.")
    x = torch.nn.functional.normalize(hs[:, :, position], dim=-1)  # (L + 1, b, d), unit rows
    sim = x @ x.transpose(-2, -1)  # (L + 1, b, b)
    off_diagonal = ~torch.eye(b, dtype=torch.bool, device=hs.device)
    return sim[:, off_diagonal].mean(dim=-1)  # (L + 1,)


def similarity_across_sequences_of(
    hidden_states,  # L + 1 tensors (b, n, d), or (L + 1, b, n, d)
    select: torch.Tensor,  # (b, n) bool: the tokens to compare
) -> torch.Tensor:
    """Mean cosine between selected tokens of *different* sequences, at every depth: (L + 1,).

    (Lesson 4, §6.) Every selected token of sequence a is compared with every selected token of
    each other sequence b != a; pairs within one sequence are left out. With ``select`` true at
    the [SEP] tokens this is the [SEP] analogue of :func:`similarity_across_sequences`; true at
    the ordinary word tokens it is the baseline that says what "almost the same vector in every
    sentence" means at that depth (word vectors of one model share a common direction, so the
    baseline is not 0). Pass ``input_ids == tokenizer.sep_token_id`` and the like; [PAD]
    positions must not be selected.
    """
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    _, b, n, _ = hs.shape
    if not isinstance(select, torch.Tensor) or select.dtype != torch.bool or (
        tuple(select.shape) != (b, n)
    ):
        got = (f"{select.dtype} {tuple(select.shape)}" if isinstance(select, torch.Tensor)
               else type(select).__name__)
        raise ValueError(
            f"select must be a boolean (b, n) = {(b, n)} tensor, True at the tokens to compare "
            f"(e.g. input_ids == tokenizer.sep_token_id), got {got}."
        )
    select = select.to(hs.device)
    if int(select.any(dim=1).sum()) < 2:
        raise ValueError(
            "comparing across sequences needs selected tokens in at least 2 sequences; "
            f"select has True in {int(select.any(dim=1).sum())}."
        )
    sequence = torch.arange(b, device=hs.device)[:, None].expand(b, n)[select]  # (m,)
    x = torch.nn.functional.normalize(hs[:, select], dim=-1)  # (L + 1, m, d), unit rows
    sim = x @ x.transpose(-2, -1)  # (L + 1, m, m)
    different = sequence[:, None] != sequence[None, :]  # (m, m): pairs across sequences
    return sim[:, different].mean(dim=-1)  # (L + 1,)


# --- The residual stream (Lesson 4, §6–§7) ---------------------------------------------------


def residual_norms(
    hidden_states,  # L + 1 tensors (b, n, d)
    attention_mask: torch.Tensor | None = None,  # (b, n)
) -> torch.Tensor:
    """The Euclidean norm of every real token's vector at every depth: (L + 1, number of tokens).

    (Lesson 4, §6.) Column k is the k-th real token in the order of
    ``input_ids[attention_mask.bool()]``, so ``input_ids[attention_mask.bool()] == cls_id``
    picks out the [CLS] columns.
    """
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    _, b, n, _ = hs.shape
    real = _real_tokens(attention_mask, b, n, hs.device)  # (b, n)
    return hs.norm(dim=-1)[:, real]  # (L + 1, b, n) -> (L + 1, real tokens)


def layer_to_layer_similarity(
    hidden_states,  # L + 1 tensors (b, n, d)
    attention_mask: torch.Tensor | None = None,  # (b, n)
) -> torch.Tensor:
    """Mean cosine between each real token's vector before and after block l: (L,) (Lesson 4, §2).

    Entry l - 1 compares H^(l-1) with H^(l). Near 1, the block edits the token's vector (the
    residual connection carries it through); near 0, the block replaces it.
    """
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    if hs.shape[0] < 2:
        raise ValueError(
            f"layer_to_layer_similarity() compares consecutive depths, so it needs at least 2 "
            f"hidden states (H^(0) and H^(1)), got {hs.shape[0]}."
        )
    _, b, n, _ = hs.shape
    real = _real_tokens(attention_mask, b, n, hs.device)  # (b, n)
    cos = torch.cosine_similarity(hs[:-1], hs[1:], dim=-1)  # (L, b, n)
    return cos[:, real].mean(dim=-1)  # (L,)


# --- Initialisation and gradients (Lesson 4, §7) ----------------------------------------------


def _blocks_of(model: nn.Module) -> nn.ModuleList:
    for candidate in (model, getattr(model, "encoder", None)):
        blocks = getattr(candidate, "blocks", None)
        if isinstance(blocks, nn.ModuleList):
            return blocks
    raise ValueError(
        f"this function looks for the stack's blocks in model.blocks (EncoderModel) "
        f"or model.encoder.blocks (TinyLM); {type(model).__name__} has neither."
    )


# --- What attention to a token contributes (Lesson 4, §6) --------------------------------------


def value_contributions(
    attention: nn.Module, h: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Norms of what each key adds to each query, per head, after W_O: (b, heads, n_q, n_k).

    (Lesson 4, §6.) Head k adds to query i the vector sum_j A_ij f_k(h_j), where
    f_k(h) = (h W_V^(k) + b_V^(k)) W_O^(k) is key j's value carried through head k's slice of
    W_O. Entry (b, k, i, j) is the norm ||A_ij f_k(h_j)|| = A_ij ||f_k(h_j)||: a weight times the
    size of what it fetches (Kobayashi et al., 2020, "Attention is Not Only a Weight"). A key
    with a large weight but a short f_k(h_j) adds little. ``attention`` is a
    :class:`encoderlab.attention.MultiHeadAttention`, ``h`` its input (b, n, d) and ``weights``
    the attention weights it computed for that input (b, heads, n, n).
    """
    for name in ("w_v", "w_o", "n_heads", "d_k"):
        if not hasattr(attention, name):
            raise ValueError(
                f"value_contributions() needs a MultiHeadAttention (with w_v, w_o, n_heads, "
                f"d_k), got {type(attention).__name__} without {name!r}; pass e.g. "
                "model.blocks[0].attention."
            )
    if not isinstance(h, torch.Tensor) or h.dim() != 3:
        got = shape_of(h)
        raise ValueError(f"h must be the block's input, shape (b, n, d), got {got}.")
    b, n, d = h.shape
    heads, d_k = attention.n_heads, attention.d_k
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (b, heads, n, n):
        got = shape_of(weights)
        raise ValueError(
            f"weights must be the attention weights for h, shape {(b, heads, n, n)}, got {got}: "
            "pass out.attentions[l] for the input out.hidden_states[l]."
        )
    with torch.no_grad():
        v = attention.w_v(h).view(b, n, heads, d_k).transpose(1, 2)  # (b, heads, n, d_k)
        w_o = attention.w_o.weight.T.reshape(heads, d_k, d)  # head k's rows of W_O: (heads, d_k, d)
        f = torch.einsum("bknc,kcd->bknd", v, w_o)  # (b, heads, n_k, d): f_k(h_j)
        size = f.norm(dim=-1)  # (b, heads, n_k)
    return weights * size[:, :, None, :]  # (b, heads, n_q, n_k)


def hide_keys(input_ids: torch.Tensor, token_id: int) -> torch.Tensor:
    """A boolean mask (b, 1, n, n) that hides every key holding ``token_id`` (Lesson 4, §6).

    True = may attend, as everywhere in the library. Passed as ``EncoderModel(..., mask=...)``,
    it removes the token from every query's softmax in every layer, so the weight the token
    would have taken is spread over the other keys in proportion to their weights; the token's
    own row still attends to the others.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else input_ids
        raise ValueError(f"input_ids must have shape (b, n), got {got}.")
    if not is_int(token_id):
        raise ValueError(
            f"token_id must be one int id, e.g. tokenizer.cls_token_id, got {token_id!r}."
        )
    b, n = input_ids.shape
    visible = input_ids != token_id  # (b, n_k)
    return visible[:, None, None, :].expand(b, 1, n, n).clone()  # (b, 1, n_q, n_k)


def block_without_residual(block: nn.Module, h: torch.Tensor, mask=None) -> torch.Tensor:
    """A post-LN block with both identity paths removed: LN_2(MLP(LN_1(MHA(h)))) (Lesson 4, §2).

    The block's own weights, with ``h + MHA(h)`` replaced by ``MHA(h)`` and ``h' + MLP(h')`` by
    ``MLP(h')``: what the block would output if it had no residual connections. Dropout is not
    applied. ``h``: (b, n, d); returns (b, n, d).
    """
    if getattr(block, "norm_position", None) != "post":
        raise ValueError(
            "block_without_residual() takes a post-LN EncoderBlock (norm_position == 'post'), "
            f"got {type(block).__name__} with norm_position "
            f"{getattr(block, 'norm_position', None)!r}."
        )
    a, _ = block.attention(h, mask=mask, need_weights=False)  # (b, n, d)
    h = block.norm_1(a)  # no "+ h"
    return block.norm_2(block.mlp(h))  # no "+ h'": (b, n, d)


def residual_similarity(blocks, hidden_states, attention_mask=None) -> dict[str, torch.Tensor]:
    """What the residual connection keeps of each token, block by block (Lesson 4, §2).

    Three (L,) tensors, each a mean cosine over the real tokens of every sequence:
    ``"with the residual"``, cos(h_i^(l-1), h_i^(l)); ``"residual removed"``, the same block's
    weights run without identity paths (:func:`block_without_residual`); ``"other positions"``,
    cos(h_i^(l-1), h_j^(l)) for j != i, the level two unrelated vectors of this model reach.
    ``blocks``: the model's post-LN blocks; ``hidden_states``: its L + 1 tensors (b, n, d).
    """
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    if len(blocks) != hs.shape[0] - 1:
        raise ValueError(f"need L + 1 = {len(blocks) + 1} hidden states for {len(blocks)} "
                         f"blocks, got {hs.shape[0]}: pass model.blocks and out.hidden_states.")
    _, b, n, _ = hs.shape
    real = _real_tokens(attention_mask, b, n, hs.device)  # (b, n)
    pairs = real[:, :, None] & real[:, None, :] & ~torch.eye(n, dtype=torch.bool)  # (b, n, n)
    keys = real[:, None, None, :]  # (b, 1, 1, n): hide [PAD] keys
    result: dict[str, list[float]] = {"with the residual": [], "residual removed": [],
                                      "other positions": []}
    for l, block in enumerate(blocks):
        h_in, h_out = hs[l], hs[l + 1]  # (b, n, d) each
        with torch.no_grad():
            h_plain = block_without_residual(block, h_in, mask=keys)  # (b, n, d)
        result["with the residual"].append(F.cosine_similarity(h_in, h_out, dim=-1)[real].mean())
        result["residual removed"].append(F.cosine_similarity(h_in, h_plain, dim=-1)[real].mean())
        across = F.cosine_similarity(h_in[:, :, None], h_out[:, None], dim=-1)  # (b, n, n)
        result["other positions"].append(across[pairs].mean())
    return {name: torch.stack(values) for name, values in result.items()}


def update_sizes(blocks, hidden_states, attention_mask=None) -> dict[str, torch.Tensor]:
    """How large a correction each sub-layer writes into the residual stream (Lesson 4, §2).

    Two (L,) tensors, each a mean over the real tokens of ||update|| / ||stream it is added to||:
    ``"attention"``, ||MHA(.)_i|| / ||h_i|| for the block's input h; ``"MLP"``, ||MLP(.)_i|| /
    ||h'_i|| for the stream h' the MLP's output is added to (after LN_1 in a post-LN block,
    h + MHA before it in a pre-LN one). Dropout is not applied.
    ``blocks``: the model's blocks; ``hidden_states``: its L + 1 tensors (b, n, d).
    """
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    if len(blocks) != hs.shape[0] - 1:
        raise ValueError(f"need L + 1 = {len(blocks) + 1} hidden states for {len(blocks)} "
                         f"blocks, got {hs.shape[0]}: pass model.blocks and out.hidden_states.")
    _, b, n, _ = hs.shape
    real = _real_tokens(attention_mask, b, n, hs.device)  # (b, n)
    keys = real[:, None, None, :]  # (b, 1, 1, n): hide [PAD] keys
    result: dict[str, list[torch.Tensor]] = {"attention": [], "MLP": []}
    for l, block in enumerate(blocks):
        h = hs[l]  # (b, n, d): the block's input
        post = getattr(block, "norm_position", "post") == "post"
        with torch.no_grad():
            a, _ = block.attention(h if post else block.norm_1(h), mask=keys,
                                   need_weights=False)  # (b, n, d)
            stream = block.norm_1(h + a) if post else h + a  # what the MLP's output joins
            m = block.mlp(stream if post else block.norm_2(stream))  # (b, n, d)
        result["attention"].append((a.norm(dim=-1) / h.norm(dim=-1))[real].mean())
        result["MLP"].append((m.norm(dim=-1) / stream.norm(dim=-1))[real].mean())
    return {name: torch.stack(values) for name, values in result.items()}


def contributions_by_layer(model: nn.Module, hidden_states, attentions, input_ids: torch.Tensor,
                           token_id: int, attention_mask=None) -> dict[str, torch.Tensor]:
    """Weight against contribution of the keys holding ``token_id``, layer by layer
    (Lesson 4, §6). Four (L,) tensors, means over heads and real queries (or keys):
    ``"weight"``, the attention weight on the token (:func:`attention_to_tokens`);
    ``"share added"``, its share of sum_j ||A_ij f_k(h_j)|| (:func:`value_contributions`);
    ``"|f(token)|"`` and ``"|f(other keys)|"``, the norms ||f_k(h_j)|| of what the token and
    the other real keys would supply at full weight."""
    blocks = _blocks_of(model)
    hs = _stack(hidden_states, "hidden states, L + 1 tensors (b, n, d)", 4, "hidden_states")
    att = _stack(attentions, "attention weights, L tensors (b, h, n, n)", 5, "attentions")
    if len(blocks) != att.shape[0] or hs.shape[0] != att.shape[0] + 1:
        raise ValueError(f"{len(blocks)} blocks need {len(blocks) + 1} hidden states and "
                         f"{len(blocks)} attention tensors, got {hs.shape[0]} and {att.shape[0]}.")
    _, b, n, _ = hs.shape
    real = _real_tokens(attention_mask, b, n, hs.device)  # (b, n)
    is_token = input_ids == token_id  # (b, n)
    shares, sizes_token, sizes_other = [], [], []
    for l, block in enumerate(blocks):
        added = value_contributions(block.attention, hs[l], att[l])  # (b, h, n, n)
        shares.append(added / added.sum(dim=-1, keepdim=True))  # each query's row sums to 1
        # with every weight 1, entry (., ., i, j) is ||f_k(h_j)|| itself: take query row 0
        size = value_contributions(block.attention, hs[l], torch.ones_like(att[l]))[:, :, 0]
        sizes_token.append(size.transpose(1, 2)[is_token].mean())  # size: (b, h, n)
        sizes_other.append(size.transpose(1, 2)[real & ~is_token].mean())
    share = attention_to_tokens(shares, input_ids, token_id, attention_mask).mean(dim=1)
    weight = attention_to_tokens(att, input_ids, token_id, attention_mask).mean(dim=1)
    return {"weight": weight, "share added": share,
            "|f(token)|": torch.stack(sizes_token), "|f(other keys)|": torch.stack(sizes_other)}


@contextmanager
def values_zeroed(model: nn.Module, where: torch.Tensor) -> Iterator[nn.Module]:
    """Within ``with``, every layer's value vectors h_j W_V + b_V are 0 at the positions where
    ``where`` (b, n, bool) is True (Lesson 4, §6). The attention weights are unchanged: a
    query still puts the same weight on those keys, but fetches nothing from them. A forward
    hook on each block's ``attention.w_v``; removed on leaving the block."""
    if not isinstance(where, torch.Tensor) or where.dtype != torch.bool or where.dim() != 2:
        raise ValueError(f"where must be a (b, n) bool tensor of the positions whose values to "
                         f"zero, e.g. input_ids == cls_id, got {shape_of(where)}.")

    def zero(module, inputs, output):  # output: (b, n, d) = h W_V + b_V
        return output.masked_fill(where[..., None], 0.0)

    handles = [block.attention.w_v.register_forward_hook(zero) for block in _blocks_of(model)]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def sink_interventions(model: nn.Module, batch: Mapping[str, torch.Tensor], cls_id: int,
                       sep_id: int) -> dict[str, torch.Tensor]:
    """What [CLS] does for the sentence vectors (Lesson 4, §6): the cosine, per sentence (b,),
    between the mean-pooled final vectors of the unchanged model and of the model with, in
    every layer, ``"hide [CLS] as a key"`` (no query may attend to it: :func:`hide_keys`),
    ``"zero [CLS]'s value"`` (the weight on it kept, what it supplies set to 0) or
    ``"zero every word's value"`` (the weights kept, nothing fetched from the words) or
    ``"hide [SEP] as a key"``; and, as a baseline, ``"different sentences"``: each unchanged
    sentence vector's mean cosine with the other sentences' unchanged vectors (b >= 2)."""
    if batch["input_ids"].shape[0] < 2:
        raise ValueError(f"batch must hold at least 2 sentences for the 'different sentences' "
                         f"baseline, got {batch['input_ids'].shape[0]}.")
    ids, am = batch["input_ids"], batch["attention_mask"]
    real = am.bool()
    words = real & (ids != cls_id) & (ids != sep_id)  # (b, n)
    with torch.no_grad():
        unchanged = pool(model(**batch).last_hidden_state, am)  # (b, d)

        def cosine(hidden):  # (b, n, d) -> (b,)
            return F.cosine_similarity(pool(hidden, am), unchanged)

        result = {"hide [CLS] as a key": cosine(
            model(**batch, mask=hide_keys(ids, cls_id)).last_hidden_state)}
        for name, where in (("zero [CLS]'s value", ids == cls_id),
                            ("zero every word's value", words)):
            with values_zeroed(model, where):
                result[name] = cosine(model(**batch).last_hidden_state)
        result["hide [SEP] as a key"] = cosine(
            model(**batch, mask=hide_keys(ids, sep_id)).last_hidden_state)
        pairs = F.cosine_similarity(unchanged[:, None], unchanged[None], dim=-1)  # (b, b)
        b = len(unchanged)
        result["different sentences"] = (pairs.sum(dim=1) - pairs.diagonal()) / (b - 1)  # (b,)
    return result


def summary_by_depth(hidden_states, input_ids: torch.Tensor, attention_mask, cls_id: int,
                     sep_id: int) -> dict[str, torch.Tensor]:
    """Does [CLS] gather a summary of the sentence? (Lesson 4, §6.) Five (L + 1,) tensors of
    mean cosines, depth 0 being H^(0): ``"[CLS] vs sentence mean"`` and ``"word vs sentence
    mean"`` (:func:`similarity_to_mean`, the word tokens being the real tokens other than [CLS]
    and [SEP]), then ``"[CLS]"``, ``"[SEP]"`` and ``"words"`` ``"across sentences"``
    (:func:`similarity_across_sequences_of`)."""
    real = _real_tokens(attention_mask, *input_ids.shape, input_ids.device)  # (b, n)
    words = real & (input_ids != cls_id) & (input_ids != sep_id)  # (b, n): ordinary tokens
    if not words.any():
        raise ValueError("no word tokens: every real token is [CLS] or [SEP].")
    sim = similarity_to_mean(hidden_states, attention_mask)  # (L + 1, b, n)
    return {
        "[CLS] vs sentence mean": sim[:, :, 0].mean(dim=1),
        "word vs sentence mean": torch.stack([s[words].mean() for s in sim]),
        "[CLS] across sentences": similarity_across_sequences_of(hidden_states,
                                                                 input_ids == cls_id),
        "[SEP] across sentences": similarity_across_sequences_of(hidden_states,
                                                                 input_ids == sep_id),
        "words across sentences": similarity_across_sequences_of(hidden_states, words),
    }

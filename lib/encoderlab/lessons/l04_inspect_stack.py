"""Looking inside the encoder stack: parameters, attention, [CLS], norms, gradients (Lesson 4).

Every function here reads what :class:`encoderlab.encoder.EncoderModel` already returns
(``hidden_states``: L + 1 tensors ``(b, n, d)``; ``attentions``: L tensors ``(b, h, n, n)``) or
its config, and reduces it to the few numbers a figure of Lesson 4 shows:

    breakdown = parameter_breakdown(config)  # {"token embeddings": V d, ...}, sums to the count
    on_cls = attention_to_tokens(out.attentions, ids, CLS_ID, attention_mask)  # (L, h)
    summary = cls_similarity_by_depth(out.hidden_states, attention_mask)  # (L + 1,)
    same = similarity_across_sequences_of(out.hidden_states, input_ids == SEP_ID)  # (L + 1,)
    norms = residual_norms(out.hidden_states, attention_mask)  # (L + 1, real tokens)
    grads = gradient_norms_by_layer(model, loss)  # L floats; parameter=... for one matrix

Padding is always left out: a [PAD] position is neither a query nor a key that counts, and its
vector is never averaged in.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
from safetensors import safe_open
from torch import nn

from encoderlab.encoder import EncoderConfig
from encoderlab.pretrained import (
    CHECKED_BUFFERS,
    WEIGHTS_FILE,
    checkpoint_name_map,
    config_from_json,
    find_weights,
)
from encoderlab.validate import is_int, shape_of

__all__ = [
    "PARTS",
    "parameter_breakdown",
    "part_of",
    "model_breakdown",
    "checkpoint_parameter_count",
    "checkpoint_breakdown",
    "attention_to_tokens",
    "similarity_to_mean",
    "cls_similarity_by_depth",
    "similarity_across_sequences",
    "similarity_across_sequences_of",
    "residual_norms",
    "layer_to_layer_similarity",
    "initialise",
    "gradient_norms_by_layer",
    "value_contributions",
    "hide_keys",
    "mean_pool",
    "block_without_residual",
    "flops_per_layer",
    "attention_crossover",
]

# The parts of an encoder's parameter count, in the order a table lists them (Lesson 4, §5).
PARTS = (
    "token embeddings",  # E_token: V x d
    "position embeddings",  # E_position: n_max x d
    "segment embeddings",  # E_segment: 2 x d
    "embedding LayerNorm",  # gain and bias: 2d
    "attention",  # W_Q, W_K, W_V, W_O and their biases, all L blocks
    "MLP",  # up d -> d_ff and down d_ff -> d with biases, all L blocks
    "block LayerNorms",  # two per block, gain and bias each
    "final LayerNorm",  # pre-LN stacks only
    "pooler",  # BERT's tanh layer on [CLS]
)

# --- Parameter count, part by part (Lesson 4, §5) ---------------------------------------------


def parameter_breakdown(config: EncoderConfig) -> dict[str, int]:
    """Parameters of ``EncoderModel(config)`` by part, by formula; the values sum to the count.

    (Lesson 4, §5.) The keys are :data:`PARTS` in order, without the parts the config does not
    have ("final LayerNorm" exists only for ``norm="pre"``, "pooler" only for ``pooler=True``).
    Block parts are totals over all L blocks. ``sum(parameter_breakdown(c).values())`` equals
    :func:`encoderlab.encoder.count_parameters` ``(c)``.
    """
    if not isinstance(config, EncoderConfig):
        raise ValueError(
            f"parameter_breakdown() needs an EncoderConfig, got {type(config).__name__}; "
            "build one with EncoderConfig(d_model=..., n_layers=...), or use model.config."
        )
    d, f, L = config.d_model, config.d_ff, config.n_layers
    parts = {
        "token embeddings": config.vocab_size * d,
        "position embeddings": config.n_max * d,
        "segment embeddings": config.n_segments * d,
        "embedding LayerNorm": 2 * d,
        "attention": L * 4 * (d * d + d),  # four d x d matrices, four biases
        "MLP": L * ((d * f + f) + (f * d + d)),  # up and down, with biases
        "block LayerNorms": L * 2 * (2 * d),  # after attention and after the MLP
    }
    if config.norm == "pre":
        parts["final LayerNorm"] = 2 * d
    if config.pooler:
        parts["pooler"] = d * d + d
    return parts


def part_of(name: str) -> str:
    """The :data:`PARTS` entry a parameter of :class:`EncoderModel` belongs to (Lesson 4, §5).

    ``name`` is a name from ``model.named_parameters()``, e.g. ``"blocks.3.mlp.w_1.weight"``.
    """
    pieces = name.split(".")
    if pieces[0] == "embeddings" and len(pieces) >= 2:
        table = {"token": "token embeddings", "position": "position embeddings",
                 "segment": "segment embeddings", "norm": "embedding LayerNorm"}
        if pieces[1] in table:
            return table[pieces[1]]
    if pieces[0] == "blocks" and len(pieces) >= 3:
        table = {"attention": "attention", "mlp": "MLP", "norm_1": "block LayerNorms",
                 "norm_2": "block LayerNorms"}
        if pieces[2] in table:
            return table[pieces[2]]
    if pieces[0] == "final_norm":
        return "final LayerNorm"
    if pieces[0] == "pooler":
        return "pooler"
    raise ValueError(
        f"{name!r} is not a parameter name of encoderlab's EncoderModel (expected names like "
        "'embeddings.token.weight' or 'blocks.0.attention.w_q.weight'). Pass names from "
        "model.named_parameters(), or map checkpoint names first with "
        "pretrained.checkpoint_name_map()."
    )


def _group(named_sizes) -> dict[str, int]:
    totals = {part: 0 for part in PARTS}
    for name, size in named_sizes:
        totals[part_of(name)] += int(size)
    return {part: total for part, total in totals.items() if total}


def model_breakdown(model: nn.Module) -> dict[str, int]:
    """The parameters a built model really holds, grouped like :func:`parameter_breakdown`."""
    return _group((name, p.numel()) for name, p in model.named_parameters())


def _checkpoint_shapes(path) -> tuple[dict[str, tuple[int, ...]], EncoderConfig]:
    """Every tensor's shape in model.safetensors (read from its header, no data) and the config."""
    folder = find_weights(path)
    with safe_open(str(folder / WEIGHTS_FILE), "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    return shapes, config_from_json(folder / "config.json")


def checkpoint_parameter_count(path: str | os.PathLike | None = None) -> int:
    """The sum of the tensor sizes in the checkpoint's model.safetensors (Lesson 4, §5).

    Stored buffers that are not parameters (``embeddings.position_ids``, the list
    ``pretrained.CHECKED_BUFFERS``) are left out. ``path`` is found as in
    :func:`encoderlab.pretrained.find_weights`.
    """
    shapes, _ = _checkpoint_shapes(path)
    return sum(math.prod(shape) for name, shape in shapes.items() if name not in CHECKED_BUFFERS)


def checkpoint_breakdown(path: str | os.PathLike | None = None) -> dict[str, int]:
    """The checkpoint's parameters grouped like :func:`parameter_breakdown` (Lesson 4, §5).

    Each checkpoint name goes through the loader's name map
    (:func:`encoderlab.pretrained.checkpoint_name_map`) to the library's name, then to its part.
    """
    shapes, config = _checkpoint_shapes(path)
    name_map = checkpoint_name_map(config.n_layers)
    unknown = sorted(set(shapes) - set(name_map) - set(CHECKED_BUFFERS))
    if unknown:
        raise ValueError(
            f"the checkpoint holds tensors the name map does not know: {unknown[:5]}; it is not "
            "a BERT-style checkpoint that encoderlab can load."
        )
    return _group(
        (name_map[name], math.prod(shape))
        for name, shape in shapes.items()
        if name not in CHECKED_BUFFERS
    )


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


def initialise(model: nn.Module, scheme: str = "xavier") -> nn.Module:
    """Re-draw a model's weights in place with a named scheme; returns the model (Lesson 4, §7).

    ``"xavier"``: Xavier-uniform weights and zero biases for every ``nn.Linear`` (the original
    Transformer's scheme, and the setting of the classic post-LN vs pre-LN analysis).
    ``"bert"``: normal weights with standard deviation 0.02 for every ``nn.Linear`` and
    ``nn.Embedding``, zero biases, LayerNorm gains 1 and biases 0 (BERT's scheme).
    Draws from torch's global generator: seed it first for a reproducible model.
    """
    if scheme not in ("xavier", "bert"):
        raise ValueError(
            f"scheme must be 'xavier' or 'bert', got {scheme!r}. (A freshly built model "
            "already has PyTorch's default initialisation; to keep it, do not call initialise.)"
        )
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                if scheme == "xavier":
                    nn.init.xavier_uniform_(module.weight)
                else:
                    nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding) and scheme == "bert":
                nn.init.normal_(module.weight, std=0.02)
            elif isinstance(module, nn.LayerNorm) and scheme == "bert":
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
    return model


def _blocks_of(model: nn.Module) -> nn.ModuleList:
    for candidate in (model, getattr(model, "encoder", None)):
        blocks = getattr(candidate, "blocks", None)
        if isinstance(blocks, nn.ModuleList):
            return blocks
    raise ValueError(
        f"gradient_norms_by_layer() looks for the stack's blocks in model.blocks (EncoderModel) "
        f"or model.encoder.blocks (TinyLM); {type(model).__name__} has neither."
    )


def gradient_norms_by_layer(
    model: nn.Module, loss: torch.Tensor, parameter: str | None = None
) -> list[float]:
    """The norm of d loss / d (all parameters of block l), for l = 1..L: L floats (Lesson 4, §7).

    Each entry is the Euclidean norm of the gradient of one block's parameters taken together
    (attention, MLP and both LayerNorms). ``parameter`` names one tensor inside each block
    instead, e.g. ``"mlp.w_2.weight"``: the MLP's second matrix, the W^{2,l} whose gradient
    Xiong et al. (2020) analyse. The gradients are computed with ``torch.autograd.grad``:
    nothing is stored in ``.grad``, and the graph is kept, so the same loss can still be
    back-propagated afterwards.
    """
    blocks = _blocks_of(model)
    if parameter is not None:
        names = dict(blocks[0].named_parameters()) if len(blocks) else {}
        if not isinstance(parameter, str) or parameter not in names:
            raise ValueError(
                f"parameter must name one parameter of a block, one of {sorted(names)}, "
                f"got {parameter!r}."
            )
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        got = shape_of(loss)
        raise ValueError(f"loss must be a scalar tensor (0-d), got {got}; reduce it with .mean().")
    if loss.grad_fn is None:
        raise ValueError(
            "loss has no gradient graph: was it computed under torch.no_grad() or from "
            "detached tensors? Compute it with gradients enabled."
        )
    if parameter is None:
        groups = [[p for p in block.parameters() if p.requires_grad] for block in blocks]
    else:
        groups = [[dict(block.named_parameters())[parameter]] for block in blocks]
    flat = [p for group in groups for p in group]
    grads = torch.autograd.grad(loss, flat, retain_graph=True, allow_unused=True)
    norms, k = [], 0
    for group in groups:
        squares = sum(
            (g.double().pow(2).sum() for g in grads[k:k + len(group)] if g is not None),
            torch.zeros((), dtype=torch.float64),
        )
        norms.append(float(squares.sqrt()))
        k += len(group)
    return norms


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


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of each sequence's real token vectors: (b, n, d) -> (b, d) (Lesson 4, §6).

    all-MiniLM-L6-v2's sentence vector (before its final normalisation): [PAD] positions,
    where ``attention_mask`` is 0, are left out of the mean.
    """
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3:
        got = shape_of(hidden)
        raise ValueError(f"hidden must have shape (b, n, d), got {got}.")
    b, n, _ = hidden.shape
    real = _real_tokens(attention_mask, b, n, hidden.device).to(hidden.dtype)  # (b, n)
    return (hidden * real[..., None]).sum(dim=1) / real.sum(dim=1, keepdim=True)  # (b, d)


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


# --- What a block costs in arithmetic (Lesson 4, §5) --------------------------------------------


def flops_per_layer(config: EncoderConfig, n: int) -> dict[str, int]:
    """Floating-point operations of one encoder block on one sequence of n tokens (Lesson 4, §5).

    Matrix products only, 2 operations (a multiply and an add) per multiply-accumulate:
    ``"projections"`` W_Q, W_K, W_V, W_O: 4 x 2 n d^2; ``"MLP"``: 2 x 2 n d d_ff;
    ``"attention"`` (QK^T and AV, all heads together): 2 x 2 n^2 d. With d_ff = 4d that is
    24 n d^2 + 4 n^2 d. Biases, softmax, LayerNorm and GELU (O(n d) and O(h n^2)) are left out.
    """
    if not isinstance(config, EncoderConfig):
        raise ValueError(
            f"flops_per_layer() needs an EncoderConfig, got {type(config).__name__}."
        )
    if not is_int(n) or n < 1:
        raise ValueError(f"n must be a number of tokens, an int >= 1, got {n!r}.")
    d, f = config.d_model, config.d_ff
    return {
        "projections": 4 * 2 * n * d * d,  # Q, K, V, O: (n, d) @ (d, d) each
        "MLP": 2 * 2 * n * d * f,  # up (n, d) @ (d, d_ff), down (n, d_ff) @ (d_ff, d)
        "attention": 2 * 2 * n * n * d,  # QK^T: (n, d_k) @ (d_k, n) per head; AV likewise
    }


def attention_crossover(config: EncoderConfig) -> int:
    """The length n at which attention's n^2 term equals the rest of a block (Lesson 4, §5).

    4 n^2 d = 8 n d^2 + 4 n d d_ff  gives  n = 2d + d_ff, that is 6d when d_ff = 4d. Above it,
    :func:`flops_per_layer`'s ``"attention"`` exceeds projections and MLP together.
    """
    if not isinstance(config, EncoderConfig):
        raise ValueError(
            f"attention_crossover() needs an EncoderConfig, got {type(config).__name__}."
        )
    return 2 * config.d_model + config.d_ff

"""Lesson 4's checkers: LayerNorm over the last axis (§2), one post-LN encoder block from its
weights (§2–§3) and the parameter count of an encoder from its config (§5)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from numbers import Integral

import torch
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.attention import MultiHeadAttention
from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    Message,
    as_tensor,
    checker,
    close,
    differs,
    forbidding,
    leaving_inputs,
    require_callable,
    run,
)
from encoderlab.encoder import EncoderBlock, EncoderConfig, count_parameters
from encoderlab.lessons.l04_count import parameter_breakdown

__all__ = ["check_layer_norm", "check_parameter_count", "check_encoder_block"]

# --- LayerNorm (Lesson 4, §2) -------------------------------------------------------------------


def _layer_norm_variant(x, gain, bias, eps, *, dims=(-1,), eps_where="inside", correction=0,
                        center=True, affine="normal", power=0.5):
    """LayerNorm with one switch turned: each non-default switch is a known mistake."""
    x = x.double()
    mean = x.mean(dim=dims, keepdim=True) if center in (True, "scale_only") else 0.0
    if center == "rms":
        var = x.pow(2).mean(dim=dims, keepdim=True)  # RMSNorm: no mean at all
    else:
        var = x.var(dim=dims, keepdim=True, correction=correction)
    if eps_where == "inside":
        denominator = (var + eps).pow(power)
    elif eps_where == "outside":
        denominator = var.pow(power) + eps
    else:  # "none"
        denominator = var.pow(power)
    if center == "scale_only":  # divides by the std but never subtracts the mean
        y = x / denominator
    else:
        y = (x - mean) / denominator
    if affine == "normal":
        return y * gain.double() + bias.double()
    if affine == "swapped":
        return y * bias.double() + gain.double()
    if affine == "bias_only":
        return y + bias.double()
    if affine == "gain_only":
        return y * gain.double()
    return y  # "none"


_LAYER_NORM_MISTAKES = [
    ("you normalise over the sequence axis (dim=-2), but LayerNorm normalises each token's "
     "vector on its own.",
     "take the mean and variance over the last axis, dim=-1 (the d features).",
     partial(_layer_norm_variant, dims=(-2,))),
    ("you normalise over the first axis (dim=0), but LayerNorm normalises each token's vector on "
     "its own.",
     "take the mean and variance over the last axis, dim=-1 (the d features).",
     partial(_layer_norm_variant, dims=(0,))),
    ("you normalise with one mean and variance for the whole tensor, but LayerNorm takes them "
     "per token.",
     "reduce over the last axis only: dim=-1, keepdim=True.",
     lambda x, gain, bias, eps: _layer_norm_variant(x, gain, bias, eps,
                                                    dims=tuple(range(x.dim())))),
    ("your variance is the unbiased one (divided by d - 1, torch.var's default), but LayerNorm "
     "divides by d.",
     "x.var(dim=-1, unbiased=False), or ((x - mean) ** 2).mean(dim=-1).",
     partial(_layer_norm_variant, correction=1)),
    ("that is the Annotated Transformer's LayerNorm, (x - mean) / (x.std(-1) + eps): x.std is "
     "unbiased (divides by d - 1) and eps sits outside the square root; PyTorch's and BERT's "
     "LayerNorm use the biased variance with eps inside.",
     "divide by sqrt(x.var(-1, keepdim=True, unbiased=False) + eps).",
     partial(_layer_norm_variant, correction=1, eps_where="outside")),
    ("you leave eps out: a token whose d values are all equal has variance 0 and gives 0/0 = "
     "NaN, and small-variance tokens blow up.",
     "divide by sqrt(var + eps).",
     partial(_layer_norm_variant, eps_where="none")),
    ("you add eps outside the square root, sqrt(var) + eps, which differs for tokens of small "
     "variance.",
     "divide by sqrt(var + eps).",
     partial(_layer_norm_variant, eps_where="outside")),
    ("you divide by the variance, not by the standard deviation.",
     "divide by sqrt(var + eps).",
     partial(_layer_norm_variant, power=1.0)),
    ("you never subtract the mean, but LayerNorm centres each token's vector first.",
     "start from x - x.mean(dim=-1, keepdim=True).",
     partial(_layer_norm_variant, center="scale_only")),
    ("that is RMSNorm (x / sqrt(mean(x**2) + eps), used by many later models), not LayerNorm.",
     "subtract the mean and divide by the standard deviation.",
     partial(_layer_norm_variant, center="rms")),
    ("you return the normalised vector without the learned gain and bias.",
     "multiply by gain and add bias at the end.",
     partial(_layer_norm_variant, affine="none")),
    ("you swapped gain and bias.",
     "the output is normalised * gain + bias.",
     partial(_layer_norm_variant, affine="swapped")),
    ("you add the bias but never use the gain.",
     "multiply the normalised vector by gain, then add bias: normalised * gain + bias.",
     partial(_layer_norm_variant, affine="bias_only")),
    ("you multiply by the gain but never add the bias.",
     "the output is normalised * gain + bias.",
     partial(_layer_norm_variant, affine="gain_only")),
]


def _layer_norm_cases() -> list[tuple]:
    """(x, gain, bias, eps): random tokens, a constant token, a small-variance token, small d."""
    g = torch.Generator().manual_seed(4)

    def randn(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    cases = []
    shapes = [((2, 5, 8), 1e-5), ((3, 16), 1e-12), ((1, 6, 4), 1e-5), ((2, 3, 4, 6), 1e-5)]
    for shape, eps in shapes:
        x = randn(*shape, scale=2.0, shift=0.5)
        d = shape[-1]
        cases.append((x, randn(d, scale=0.5, shift=1.0), randn(d, scale=0.3), eps))
    x = randn(2, 4, 8, scale=3.0, shift=-1.0)
    x[0, 1] = 2.5  # a constant token: variance 0, only eps keeps it finite
    x[1, 2] = randn(8, scale=1e-3)  # variance ~1e-6, comparable to eps = 1e-5
    cases.append((x, randn(8, scale=0.5, shift=1.0), randn(8, scale=0.3), 1e-5))
    return cases


def _layer_norm_answer(result, where, x, gain, bias, eps) -> torch.Tensor:
    out = as_tensor(result, "the normalised tensor, with the shape of x")
    if tuple(out.shape) != tuple(x.shape):
        raise CheckFailed(
            f"your output has shape {tuple(out.shape)} but x has shape {tuple(x.shape)} (on "
            f"{where}); LayerNorm keeps the shape.",
            "keep the reduced axis with keepdim=True.",
        )
    return out.double()


def _layer_norm_fallback(attempt) -> tuple[str, str]:
    with_nan = [k for k in attempt.wrong if torch.isnan(attempt.answers[k]).any()]
    if with_nan:
        return (
            f"your output has NaN on {attempt.where(with_nan[0])}, where the "
            "reference has none: a token of constant values has variance 0.",
            "add eps inside the square root.",
        )
    return differs(
        attempt, "output", "(x - mean) / sqrt(var + eps) * gain + bias",
        "compare it step by step with torch.nn.functional.layer_norm(x, (d,), gain, bias, eps).",
    )


_LAYER_NORM = Exercise(
    title="LayerNorm",
    cases=_layer_norm_cases,
    arguments=lambda x, gain, bias, eps: (x.clone(), gain.clone(), bias.clone(), eps),
    answer=_layer_norm_answer,
    reference=lambda x, gain, bias, eps: F.layer_norm(
        x.double(), (x.shape[-1],), gain.double(), bias.double(), eps),
    describe=lambda x, gain, bias, eps: (
        f"x {tuple(x.shape)}, gain and bias ({gain.shape[0]},), eps={eps:g}"),
    same=close,
    mistakes=_LAYER_NORM_MISTAKES,
    fallback=_layer_norm_fallback,
)


@checker
def check_layer_norm(fn: Callable) -> bool:
    """Check ``fn(x, gain, bias, eps)``, LayerNorm over the last axis of ``x`` (Lesson 4, §2).

    The reference is ``torch.nn.functional.layer_norm(x, (d,), gain, bias, eps)``: the mean and
    the biased variance of each token's d values, ``(x - mean) / sqrt(var + eps) * gain + bias``.
    """
    require_callable(fn)
    guarded = forbidding(fn, [(F, "layer_norm", "F.layer_norm (or nn.LayerNorm)"),
                              (torch, "layer_norm", "torch.layer_norm")],
                         "write it yourself: mean and biased variance over the last axis "
                         "(keepdim=True), then (x - mean) / sqrt(var + eps) * gain + bias.")
    return run(_LAYER_NORM, guarded)


# --- The parameter count (Lesson 4, §5) ------------------------------------------------------


def _count_variant(
    c, *, biases=True, layer_norm=2, positions=True, segments="config", attention_matrices=4,
    times_heads=False, d_ff=None, pooler="config", final_norm="config", blocks="L",
    embeddings=True, mlp_matrices=2, embedding_norm=True, block_norms=2, w_o_bias=True,
    w_o_bias_per_head=False,
):
    """The parameter count with one switch turned: each non-default switch is a known mistake."""
    d, V, L, h = c.d_model, c.vocab_size, c.n_layers, c.n_heads
    f = c.d_ff if d_ff is None else d_ff(c)
    bias = 1 if biases else 0
    ln = layer_norm * d  # one LayerNorm: gain and bias, 2d
    n_segments = c.n_segments if segments == "config" else segments  # "config", or a number
    emb = V * d + (c.n_max * d if positions else 0) + n_segments * d + (ln if embedding_norm else 0)
    attention = attention_matrices * (d * d + bias * d) * (h if times_heads else 1)
    attention -= 0 if w_o_bias or not biases else d  # W_O's bias
    attention += (h - 1) * d if w_o_bias_per_head else 0  # one W_O bias per head: h d, not d
    mlp = (d * f + bias * f) + ((f * d + bias * d) if mlp_matrices == 2 else 0)
    block = attention + mlp + block_norms * ln
    n_blocks = {"L": L, "one": 1}[blocks]
    has_pooler = c.pooler if pooler == "config" else pooler
    has_final = (c.norm == "pre") if final_norm == "config" else final_norm
    return (
        (emb if embeddings else 0)
        + n_blocks * block
        + (ln if has_final else 0)
        + ((d * d + bias * d) if has_pooler else 0)
    )


_COUNT_MISTAKES = [
    ("you counted W_O's bias once per head (h x d): over by L (h - 1) d. Thinking head by head, "
     "each head's slice of W_O has its own rows, but the bias is added once, after the heads' "
     "contributions are summed.",
     "attention per block is 4 (d^2 + d), whatever h is.",
     partial(_count_variant, w_o_bias_per_head=True)),
    ("you left out the biases.",
     "every nn.Linear (W_Q, W_K, W_V, W_O, both MLP layers, the pooler) also has a bias vector "
     "of its output width.",
     partial(_count_variant, biases=False)),
    ("you left out the LayerNorms.",
     "each has a gain and a bias of d numbers: one after the embeddings, two in every block (plus "
     "a final one in a pre-LN stack).",
     partial(_count_variant, layer_norm=0)),
    ("you count d parameters per LayerNorm, one vector where there are two.",
     "a LayerNorm has a gain and a bias, 2d in all.",
     partial(_count_variant, layer_norm=1)),
    ("you left out the position embeddings.",
     "add their learned table, n_max x d.",
     partial(_count_variant, positions=False)),
    ("you left out the LayerNorm after the embeddings (its gain and bias, 2d); the blocks' "
     "LayerNorms are there.",
     "add 2d for the embedding LayerNorm that produces H^(0).",
     partial(_count_variant, embedding_norm=False)),
    ("you left out the segment embeddings.",
     "add their table, n_segments x d (s_i in {0, 1}).",
     partial(_count_variant, segments=0)),
    ("you assume 2 segments (sentence A and sentence B), but the segment table has "
     "config.n_segments rows.",
     "use config.n_segments.",
     partial(_count_variant, segments=2)),
    ("you left out the position and segment embeddings: the input H^(0) adds three tables.",
     "token V x d, position n_max x d, segment n_segments x d.",
     partial(_count_variant, positions=False, segments=0)),
    ("you count only the token embeddings' table and the blocks' weights, not the embedding "
     "side's other parameters.",
     "add the position and segment tables and the embedding LayerNorm.",
     partial(_count_variant, positions=False, segments=0, layer_norm=0)),
    ("you count three attention matrices (W_Q, W_K, W_V), but there is a fourth, W_O, which "
     "mixes the concatenated heads.",
     "add W_O: d x d with its bias.",
     partial(_count_variant, attention_matrices=3)),
    ("you multiply the attention parameters by the number of heads, but the h heads share the "
     "d x d matrices: each head owns d_k = d / h of their columns.",
     "count W_Q, W_K, W_V and W_O once each, d x d in total.",
     partial(_count_variant, times_heads=True)),
    ("you assume the MLP is 4d wide, but config.d_ff need not be 4 * d_model.",
     "use config.d_ff.",
     partial(_count_variant, d_ff=lambda c: 4 * c.d_model)),
    ("your MLP has one matrix, where it has two.",
     "up (d -> d_ff) and down (d_ff -> d), each with a bias.",
     partial(_count_variant, mlp_matrices=1)),
    ("you forgot the pooler when config.pooler is True.",
     "add d x d plus a bias.",
     partial(_count_variant, pooler=False)),
    ("you count a pooler even when config.pooler is False.",
     "count it only if config.pooler.",
     partial(_count_variant, pooler=True)),
    ("your count is 2d short on the pre-LN stacks only: either you forgot the final LayerNorm "
     "that a pre-LN stack (config.norm == 'pre') adds after its last block, or, as in GPT-2, "
     "you dropped the LayerNorm after the embeddings for pre-LN; the two have the same size, "
     "and EncoderModel has both.",
     "a pre-LN stack keeps the embedding LayerNorm and adds one more, 2d, after its last "
     "block.",
     partial(_count_variant, final_norm=False)),
    ("you count one LayerNorm per block, but a block has two: one after (or, in pre-LN, "
     "before) each sub-layer.",
     "count 2 x 2d of LayerNorm per block.",
     partial(_count_variant, block_norms=1)),
    ("you left out the bias of W_O: the output projection is an nn.Linear with a bias of d, "
     "like W_Q, W_K and W_V.",
     "count the attention as 4 (d^2 + d) per block.",
     partial(_count_variant, w_o_bias=False)),
    ("you add a final LayerNorm for a post-LN stack too; only pre-LN stacks have one.",
     "add it only when config.norm == 'pre'.",
     partial(_count_variant, final_norm=True)),
    ("you count one block, but the stack has config.n_layers of them, each with its own weights.",
     "multiply the block's count by config.n_layers.",
     partial(_count_variant, blocks="one")),
    ("you count only the blocks (and pooler), but the embeddings hold parameters too, often the "
     "largest part.",
     "add the embeddings: the token table alone is V x d.",
     partial(_count_variant, embeddings=False)),
]


def _count_pieces(c) -> list[tuple[str, int]]:
    """Named pieces smaller than a part of parameter_breakdown, for the checker's hints."""
    d, f, L = c.d_model, c.d_ff, c.n_layers
    n_norms = 2 * L + 1 + (c.norm == "pre")  # LayerNorms: two per block, embeddings, final
    pieces = [
        ("the biases of the blocks' six linear layers, L (4d + d_ff + d)", L * (4 * d + f + d)),
        ("the biases of the blocks' attention projections, L 4d", L * 4 * d),
        ("the biases of the blocks' MLP layers, L (d_ff + d)", L * (f + d)),
        ("the biases of the MLP's first layer, L d_ff", L * f),
        ("one vector of d per LayerNorm (the gain or the bias)", n_norms * d),
    ]
    if c.pooler:
        pieces.append(("the biases of the blocks and of the pooler, L (4d + d_ff + d) + d",
                       L * (4 * d + f + d) + d))
        pieces.append(("the pooler's bias, d", d))
    return pieces


def _count_cases() -> list[tuple]:
    """(config,) cases: MiniLM, BERT-base, pre-LN, no pooler, d_ff != 4d, one segment, ..."""
    minilm = EncoderConfig()
    bert_base = EncoderConfig(d_model=768, n_heads=12, n_layers=12, d_ff=3072)
    tiny = EncoderConfig(vocab_size=100, d_model=16, n_heads=2, n_layers=2, d_ff=64, n_max=32)
    return [
        (minilm,),
        (bert_base,),
        (replace(tiny, norm="pre"),),
        (replace(tiny, pooler=False),),
        (replace(tiny, d_ff=40, n_heads=4, n_layers=3),),
        (replace(tiny, norm="pre", pooler=False, n_segments=1, n_max=7),),
        (EncoderConfig(vocab_size=1000, d_model=48, n_heads=3, n_layers=5, d_ff=100, n_max=64,
                       n_segments=3),),
    ]


def _describe_config(c) -> str:
    return (f"EncoderConfig(vocab_size={c.vocab_size}, d_model={c.d_model}, n_heads={c.n_heads}, "
            f"n_layers={c.n_layers}, d_ff={c.d_ff}, n_max={c.n_max}, n_segments={c.n_segments}, "
            f"norm={c.norm!r}, pooler={c.pooler})")


def _as_count(value, where, config) -> int:
    """A whole number: an int (numpy's too), a whole float, or a one-element integer tensor."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, (Integral, float)):
        raise CheckFailed(
            f"your function returned a {type(value).__name__} on {where}, not a number.",
            "return the count as an int.",
        )
    if isinstance(value, float) and not value.is_integer():
        raise CheckFailed(
            f"your function returned {value} on {where}, which is not a whole number: a "
            "parameter count is an int.",
            "use // for any division, e.g. d_k = d // h.",
        )
    return int(value)


def _count_fallback(attempt) -> Message:
    """How far off, and which part or smaller piece of the model that difference is."""
    i = attempt.first
    mine, right = attempt.answers, attempt.references
    (config,) = attempt.cases[i]
    difference = right[i] - mine[i]
    verb = "left out" if difference > 0 else "counted twice"
    # parts whose size is the difference on every wrong case (MiniLM's segment table and its
    # embedding LayerNorm are both 768: a case with 3 segments tells them apart)
    same_size = [name for name in parameter_breakdown(config)
                 if all(abs(right[k] - mine[k]) == parameter_breakdown(attempt.cases[k][0])[name]
                        for k in attempt.wrong)]
    hint = (f" That is exactly the size of the {same_size[0]} part, which you {verb}."
            if same_size else "")
    # pieces smaller than a part (some of the biases, the gains, ...), on every wrong case
    pieces = [name for name, size in _count_pieces(config)
              if all(abs(right[k] - mine[k]) == dict(_count_pieces(attempt.cases[k][0]))[name]
                     for k in attempt.wrong)]
    if pieces:
        also = f" (or the {same_size[0]} part)" if same_size else ""
        hint = f" On every case checked, that is exactly {pieces[0]}{also}, which you {verb}."
    return (
        f"your count is {mine[i]:,} but EncoderModel has {right[i]:,} parameters for "
        f"{_describe_config(config)}: {'short' if difference > 0 else 'over'} by "
        f"{abs(difference):,}.{hint}",
        "compare part by part with "
        "encoderlab.lessons.l04_count.parameter_breakdown(config).",
    )


_COUNT = Exercise(
    title="parameter count",
    cases=_count_cases,
    answer=_as_count,
    reference=count_parameters,
    describe=_describe_config,
    same=lambda a, b: a == b,
    mistakes=_COUNT_MISTAKES,
    fallback=_count_fallback,
)


@checker
def check_parameter_count(fn: Callable) -> bool:
    """Check ``fn(config) -> int``, the parameter count of ``EncoderModel(config)`` (Lesson 4, §5).

    The cases include MiniLM, BERT-base, pre-LN stacks, stacks without a pooler and an MLP that
    is not 4d wide; the usual omissions (biases, LayerNorms, position or segment tables, W_O, ...)
    are named.
    """
    return run(_COUNT, fn)


# --- One post-LN encoder block from its weights (Lesson 4, §2–§3) -----------------------------


def _block_variant(h, attention_mask, params, n_heads, eps, *, order="post", residual="inside",
                   activation="gelu", residuals=("attention", "mlp"), norms=("norm_1", "norm_2"),
                   padding=True, variance="biased", eps_used=None, mlp_biases=("w_1", "w_2"),
                   port=None):
    """One encoder block from an EncoderBlock state dict, with one switch turned: each non-default
    switch is a known mistake. h (b, n, d); attention_mask (b, n) of 0/1."""
    d = h.shape[-1]
    attention = MultiHeadAttention(d, n_heads)
    attention.load_state_dict({k.removeprefix("attention."): t for k, t in params.items()
                               if k.startswith("attention.")})
    if padding == "inverted":  # nn.MultiheadAttention's key_padding_mask habit: True = ignore
        mask = ~attention_mask.bool()[:, None, None, :]  # (b, 1, 1, n)
    else:
        mask = masks.padding(attention_mask if padding else torch.ones_like(attention_mask))
    eps = eps if eps_used is None else eps_used  # a number: the learner's eps, whatever is given

    def norm(x, name):
        if variance == "unbiased":  # divides by d - 1
            x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps)
            return x * params[f"{name}.weight"] + params[f"{name}.bias"]
        return F.layer_norm(x, (d,), params[f"{name}.weight"], params[f"{name}.bias"], eps)

    def attend(x):
        with torch.no_grad():
            return attention(x, mask=mask)[0]

    def linear(x, name):
        bias = params[f"mlp.{name}.bias"] if name in mlp_biases else None
        return F.linear(x, params[f"mlp.{name}.weight"], bias)

    def mlp(x):
        u = linear(x, "w_1")
        u = {"gelu": F.gelu, "relu": F.relu,
             "tanh": partial(F.gelu, approximate="tanh"),
             "sigmoid": lambda u: u * torch.sigmoid(1.702 * u)}[activation](u)
        return linear(u, "w_2")

    first, second = norms
    if port is not None:  # three post-LN porting bugs, on x = h + attention(h)
        x = h + attend(h)
        out = {"stale": lambda: norm(h + mlp(norm(x, first)), second),  # 2nd residual: old h
               "no_norm_1": lambda: norm(x + mlp(x), second),  # norm_1 left out
               "mlp_raw": lambda: norm(norm(x, first) + mlp(x), second)}[port]()  # MLP on x
        return _real_rows(out, attention_mask)
    if order == "pre":
        h = h + attend(norm(h, first))
        return _real_rows(h + mlp(norm(h, second)), attention_mask)
    for sublayer, name, key in ((attend, first, "attention"), (mlp, second, "mlp")):
        update = sublayer(h)
        if key not in residuals:
            h = norm(update, name)
        elif residual == "outside":  # h + LN(f(h)): the norm no longer touches the stream
            h = h + norm(update, name)
        else:
            h = norm(h + update, name)
    return _real_rows(h, attention_mask)


_BLOCK_MISTAKES = [
    ("your second residual adds the block's input h, not the output of the first sub-layer: "
     "LN_2(h + MLP(x)) with x = LN_1(h + attention(h)).",
     "reassign the stream after each sub-layer: h = LN_1(h + a); then h = LN_2(h + MLP(h)).",
     partial(_block_variant, port="stale")),
    ("you left out norm_1: your MLP and the second residual read h + attention(h) un-normalised.",
     "x = LN_1(h + attention(h)) first; then LN_2(x + MLP(x)).",
     partial(_block_variant, port="no_norm_1")),
    ("your MLP reads the un-normalised sum h + attention(h), while the residual carries "
     "LN_1 of it: LN_2(LN_1(x) + MLP(x)).",
     "feed the MLP the same normalised x that the residual carries: x = LN_1(h + a), then "
     "LN_2(x + MLP(x)).",
     partial(_block_variant, port="mlp_raw")),
    ("your block is pre-LN (h + f(LN(h))), but this block, like BERT's and MiniLM's, is "
     "post-LN.",
     "add the residual first, then normalise: h = LN(h + f(h)).",
     partial(_block_variant, order="pre")),
    ("you normalise the sub-layer's output and add the residual after the norm, h + LN(f(h)), "
     "but post-LN normalises the sum.",
     "h = LN(h + f(h)).",
     partial(_block_variant, residual="outside")),
    ("your MLP uses ReLU, but BERT's feed-forward uses GELU, the exact (erf) form.",
     "F.gelu(u).",
     partial(_block_variant, activation="relu")),
    ("your MLP uses the tanh approximation of GELU (approximate='tanh'), but this block, like "
     "BERT, uses the exact erf form: they differ by up to about 5e-4.",
     "F.gelu(u), with no approximate argument.",
     partial(_block_variant, activation="tanh")),
    ("your block has no residual connections: each sub-layer's output replaces h instead of "
     "being added to it.",
     "normalise h + f(h), not f(h).",
     partial(_block_variant, residuals=())),
    ("the attention sub-layer has no residual connection.",
     "normalise h + attention(h), not attention(h) alone.",
     partial(_block_variant, residuals=("mlp",))),
    ("the MLP sub-layer has no residual connection.",
     "normalise h + mlp(h), not mlp(h) alone.",
     partial(_block_variant, residuals=("attention",))),
    ("your LayerNorms are swapped (each has its own gain and bias).",
     "norm_1 follows the attention sub-layer and norm_2 the MLP.",
     partial(_block_variant, norms=("norm_2", "norm_1"))),
    ("your real tokens attend to the [PAD] keys: the block ignores the attention_mask, or hides "
     "only the [PAD] queries.",
     "pass the padding mask to the attention: scores set to -inf where "
     "attention_mask[:, None, None, :] is 0, before the softmax.",
     partial(_block_variant, padding=False)),
    ("your padding mask is inverted: True must mean 'may attend', but yours is True at [PAD] "
     "(nn.MultiheadAttention's key_padding_mask convention), so real tokens attend only to "
     "[PAD] and full-length rows hide every key.",
     "mask = attention_mask.bool()[:, None, None, :], True where the key is a real token.",
     partial(_block_variant, padding="inverted")),
    ("your LayerNorm uses the unbiased variance (dividing by d - 1, torch.var's default), but "
     "LayerNorm divides by d.",
     "x.var(-1, keepdim=True, unbiased=False), or ((x - mean) ** 2).mean(-1, keepdim=True).",
     partial(_block_variant, variance="unbiased")),
    *[("your LayerNorms ignore the eps argument (they use a fixed value), so the case with "
       "eps = 0.5 comes out wrong.",
       "pass eps on: F.layer_norm(x, (d,), weight, bias, eps), or divide by sqrt(var + eps).",
       partial(_block_variant, eps_used=fixed)) for fixed in (1e-12, 1e-5, 1e-6, 0.0)],
    ("your MLP leaves out the bias of its first layer, mlp.w_1.bias.",
     "u = F.linear(x, params['mlp.w_1.weight'], params['mlp.w_1.bias']).",
     partial(_block_variant, mlp_biases=("w_2",))),
    ("your MLP leaves out the bias of its second layer, mlp.w_2.bias.",
     "F.linear(u, params['mlp.w_2.weight'], params['mlp.w_2.bias']).",
     partial(_block_variant, mlp_biases=("w_1",))),
    ("your MLP leaves out its biases, mlp.w_1.bias and mlp.w_2.bias.",
     "F.linear(x, weight, bias) for both layers.",
     partial(_block_variant, mlp_biases=())),
    ("your MLP uses the sigmoid approximation of GELU, u * sigmoid(1.702 u), but this block, "
     "like BERT, uses the exact erf form.",
     "F.gelu(u), with no approximate argument.",
     partial(_block_variant, activation="sigmoid")),
]


def _real_rows(out: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``out`` (b, n, d) with its [PAD] rows set to 0: no later layer reads them, so whatever a
    block writes there (a padding query that attends to nothing gives NaN) is not compared."""
    return torch.where(attention_mask.bool()[..., None], out, torch.zeros((), dtype=out.dtype))


def _block_cases() -> list[tuple]:
    """(h, attention_mask, params, n_heads, eps): small widths, padding, LayerNorms not (1, 0)."""
    g = torch.Generator().manual_seed(4)
    cases = []
    for b, n, d, n_heads, lengths, eps in [(2, 5, 8, 2, (5, 3), 1e-12), (1, 4, 12, 3, (4,), 1e-5),
                                           (3, 6, 16, 4, (6, 2, 4), 1e-12),
                                           (2, 3, 8, 1, (3, 2), 1e-12),
                                           (2, 4, 8, 2, (4, 3), 0.5)]:  # eps matters
        shapes = {"attention.w_q": (d, d), "attention.w_k": (d, d), "attention.w_v": (d, d),
                  "attention.w_o": (d, d), "mlp.w_1": (4 * d, d), "mlp.w_2": (d, 4 * d)}
        params = {}
        for name, (rows, cols) in shapes.items():
            params[f"{name}.weight"] = torch.randn(rows, cols, generator=g) * 1.5 / cols**0.5
            params[f"{name}.bias"] = torch.randn(rows, generator=g) * 0.3
        for name in ("norm_1", "norm_2"):
            params[f"{name}.weight"] = 1 + 0.5 * torch.randn(d, generator=g)
            params[f"{name}.bias"] = 0.5 * torch.randn(d, generator=g)
        h = torch.randn(b, n, d, generator=g) * 2
        attention_mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()
        cases.append((h, attention_mask, params, n_heads, eps))
    return cases


def _block_reference(h, attention_mask, params, n_heads, eps) -> torch.Tensor:
    d = h.shape[-1]
    config = EncoderConfig(vocab_size=8, d_model=d, n_heads=n_heads, n_layers=1, d_ff=4 * d,
                           layer_norm_eps=eps, dropout=0.0)
    block = EncoderBlock(config).eval()
    block.load_state_dict(params)
    with torch.no_grad():
        return _real_rows(block(h, mask=masks.padding(attention_mask))[0], attention_mask)


def _block_answer(result, where, h, attention_mask, params, n_heads, eps) -> torch.Tensor:
    if isinstance(result, (tuple, list)) and result:
        result = result[0]  # (h, weights) like EncoderBlock is fine too
    out = as_tensor(result, "the block's output, with the shape of h").cpu()
    if tuple(out.shape) != tuple(h.shape):
        raise CheckFailed(f"your output has shape {tuple(out.shape)} but h has shape "
                          f"{tuple(h.shape)} (on {where}); a block keeps the shape (b, n, d).")
    return _real_rows(out, attention_mask)  # the [PAD] rows are never used: not compared


_BLOCK = Exercise(
    title="post-LN encoder block",
    cases=_block_cases,
    arguments=lambda h, am, params, n_heads, eps: (
        h.clone(), am.clone(), {k: t.clone() for k, t in params.items()}, n_heads, eps),
    answer=_block_answer,
    reference=_block_reference,
    describe=lambda h, am, params, n_heads, eps: (
        f"h of shape {tuple(h.shape)}, h = {n_heads} heads, lengths {am.sum(dim=1).tolist()}, "
        f"eps={eps:g}"),
    same=close,
    mistakes=_BLOCK_MISTAKES,
    fallback=lambda attempt: differs(
        attempt, "output", "EncoderBlock with the same weights",
        "check each step against EncoderBlock.forward: the attention sub-layer, its residual "
        "and norm_1, then the MLP (w_1, GELU, w_2), its residual and norm_2."),
)


@checker
def check_encoder_block(fn: Callable) -> bool:
    """Check ``fn(h, attention_mask, params, n_heads, eps)``: one post-LN encoder block from an
    ``EncoderBlock`` state dict, padding keys hidden (Lesson 4, §2–§3).

    Only the real tokens' rows are compared: a mask that also hides the [PAD] queries is as
    right as one that hides the [PAD] keys only. Calling ``EncoderBlock`` fails: the exercise is
    to write it; so does changing ``h`` in place."""
    require_callable(fn)
    guarded = forbidding(fn, [(EncoderBlock, "forward", "EncoderBlock(...).forward")],
                         "write the two sub-layers yourself: h = LN_1(h + attention(h)), then "
                         "h = LN_2(h + MLP(h)).")
    return run(_BLOCK, leaving_inputs(guarded, ("h", "attention_mask")))

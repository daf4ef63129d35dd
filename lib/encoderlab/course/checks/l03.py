"""Lesson 3's checkers: scaled dot-product attention (§1), the causal mask (§2), the padding
mask (§5) and multi-head self-attention from its weights (§1 and §5)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch.nn import functional as F

from encoderlab import attention as attention_module
from encoderlab import masks
from encoderlab.attention import MultiHeadAttention, scaled_dot_product_attention
from encoderlab.course.checks.harness import (
    ATOL,
    RTOL,
    CheckFailed,
    Exercise,
    as_tensor,
    checker,
    close,
    differs,
    first_mask_difference,
    forbidding,
    leaving_inputs,
    require_bool_masks,
    require_callable,
    run,
    square_mask_exercise,
)

__all__ = ["check_attention", "check_causal_mask", "check_padding_mask",
           "check_multi_head_attention"]

# --- Scaled dot-product attention (Lesson 3, §1–2) ---------------------------------------------


def _attention_variant(
    q, k, v, mask=None, *, scale="sqrt_dk", softmax_dim=-1, mask_use="fill", fill=-math.inf,
    zero_empty_rows=True,
):
    """The reference formula with one switch turned: each non-default switch is a known mistake."""
    divisor = {
        "sqrt_dk": math.sqrt(q.shape[-1]),
        "none": 1.0,
        "dk": q.shape[-1],
        "sqrt_dv": math.sqrt(v.shape[-1]),
    }[scale]
    s = q @ k.transpose(-2, -1) / divisor  # (..., n_q, n_kv)
    allowed = mask
    if mask is not None:
        if mask_use == "fill":
            s = s.masked_fill(~mask, fill)
        elif mask_use == "inverted":  # hides where True: the opposite convention
            s = s.masked_fill(mask, fill)
            allowed = ~mask
        elif mask_use == "added":  # the boolean mask added to the scores: True counts as +1
            s = s + mask
    a = torch.softmax(s, dim=softmax_dim)  # (..., n_q, n_kv)
    if mask is not None and mask_use == "after_softmax":
        a = a * mask  # zeroed but not renormalised
    if mask is not None and mask_use in ("fill", "inverted") and zero_empty_rows:
        a = torch.where(allowed, a, torch.zeros(()))  # rows with nothing to see: 0, not NaN
    return a @ v  # (..., n_q, d_v)


_ATTENTION_MISTAKES = [
    ("your scores are not scaled: unscaled scores grow with d_k and push the softmax towards "
     "one-hot.",
     "divide q @ kᵀ by sqrt(d_k) before the softmax.",
     partial(_attention_variant, scale="none")),
    ("you divide the scores by d_k, but the formula divides by sqrt(d_k).",
     "divide by math.sqrt(q.shape[-1]).",
     partial(_attention_variant, scale="dk")),
    ("you scale by sqrt(d_v), the width of V; the scale is sqrt(d_k), the width that queries "
     "and keys share.",
     "divide by math.sqrt(q.shape[-1]).",
     partial(_attention_variant, scale="sqrt_dv")),
    ("your softmax normalises over the queries (dim=-2, so each column sums to 1), but each "
     "query's row of weights must sum to 1.",
     "take the softmax over the keys, dim=-1.",
     partial(_attention_variant, softmax_dim=-2)),
    ("your function attends where the mask is False and hides where it is True; in this course "
     "True means may attend.",
     "fill the scores with -inf where ~mask.",
     partial(_attention_variant, mask_use="inverted")),
    ("your output does not change when a mask is given: the mask is ignored.",
     "set the scores to -inf where the mask is False, before the softmax.",
     partial(_attention_variant, mask_use="ignored")),
    ("you add the boolean mask to the scores, so True counts as +1 and False as 0: nothing is "
     "hidden.",
     "turn it into 0 / -inf first, e.g. s.masked_fill(~mask, float('-inf')).",
     partial(_attention_variant, mask_use="added")),
    ("you zero the masked weights after the softmax, so a query's weights no longer sum to 1.",
     "mask the scores with -inf before the softmax instead.",
     partial(_attention_variant, mask_use="after_softmax")),
    ("a query whose keys are all masked should output zeros, but yours outputs the plain "
     "average of V: a finite fill such as -1e9 makes that row a uniform softmax.",
     "zero the weights where the mask is False after the softmax.",
     partial(_attention_variant, fill=-1e9, zero_empty_rows=False)),
]

_NAN_ROWS = (
    "a query whose keys are all masked gives NaN (a softmax over nothing but -inf is 0/0); "
    "the reference outputs zeros there.",
    "after the softmax, weights = torch.where(mask, weights, 0.0).",
)


def _attention_cases() -> list[tuple]:
    """(q, k, v, mask) cases: plain, cross-shaped, causal, padding, empty rows, then random ones."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    empty_row = torch.rand(4, 6, generator=g) < 0.6  # (n_q, n_kv), broadcast over b and h
    empty_row[2] = False  # query 2 may attend to nothing
    empty_row[0, 0] = True
    cases = [
        (randn(2, 3, 5, 8), randn(2, 3, 5, 8), randn(2, 3, 5, 8), None),
        # cross-attention shapes: n_q != n_kv and d_v != d_k
        (randn(1, 2, 3, 16), randn(1, 2, 7, 16), randn(1, 2, 7, 4), None),
        (randn(2, 2, 6, 8), randn(2, 2, 6, 8), randn(2, 2, 6, 8), masks.causal(6)),
        (randn(2, 4, 6, 8), randn(2, 4, 6, 8), randn(2, 4, 6, 8),
         masks.padding(torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]))),
        (randn(1, 1, 4, 8), randn(1, 1, 6, 8), randn(1, 1, 6, 8), empty_row),
    ]
    for _ in range(5):  # random shapes and masks, d_k >= 4 so that scale mistakes show
        b, h, n_q, n_kv = (int(x) for x in torch.randint(1, 4, (2,), generator=g).tolist()
                           + torch.randint(1, 9, (2,), generator=g).tolist())
        d_k, d_v = (4, 8, 16, 32)[int(torch.randint(0, 4, (1,), generator=g))], 8
        mask = torch.rand(b, 1, n_q, n_kv, generator=g) < 0.7
        cases.append((randn(b, h, n_q, d_k), randn(b, h, n_kv, d_k), randn(b, h, n_kv, d_v), mask))
    return cases


def _describe_attention(q, k, v, mask) -> str:
    mask_text = "no mask" if mask is None else f"mask {tuple(mask.shape)}"
    return f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, {mask_text}"


def _attention_arguments(q, k, v, mask) -> tuple:
    return q.clone(), k.clone(), v.clone(), None if mask is None else mask.clone()


def _attention_output(result, where, q, k, v, mask) -> torch.Tensor:
    """The output tensor from ``out`` or ``(out, weights)``, with its shape checked."""
    if isinstance(result, (tuple, list)):
        if not result:
            raise CheckFailed("your function returned an empty tuple.", "return out, or (out, A).")
        result = result[0]
    out = as_tensor(result, "the output tensor (or a pair (out, weights))")
    expected = (*q.shape[:-1], v.shape[-1])  # (b, h, n_q, d_v)
    weights_shape = (*q.shape[:-1], k.shape[-2])  # (b, h, n_q, n_kv)
    if tuple(out.shape) == expected:
        return out.double()
    if tuple(out.shape) == weights_shape:
        raise CheckFailed(
            f"your function returns the attention weights A, shape {weights_shape}, where the "
            f"output A @ V, shape {expected}, was expected.",
            "return out, or the pair (out, weights).",
        )
    raise CheckFailed(
        f"your output has shape {tuple(out.shape)} but should have shape {expected} = "
        f"(b, h, n_q, d_v), one row per query and as wide as V (on "
        f"{_describe_attention(q, k, v, None)})."
    )


def _without_nan(out: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(out, nan=0.0)


def _nan_rows_only(attempt) -> tuple[str, str] | None:
    """NaN only where the reference has zeros: the fully masked rows."""
    if all(close(_without_nan(out), ref)
           for out, ref in zip(attempt.answers, attempt.references, strict=True)):
        return _NAN_ROWS
    return None


def _attention_fallback(attempt) -> tuple[str, str]:
    first = attempt.first
    if all(attempt.cases[k][3] is not None for k in attempt.wrong):  # right without a mask only
        return (
            "your function is right without a mask but wrong with one (first wrong on "
            f"{attempt.where(first)}).",
            "keep the scores where the mask is True, set them to -inf where it is False, before "
            "the softmax.",
        )
    return differs(
        attempt, "output", "softmax(q kᵀ / sqrt(d_k) + M) v",
        "compare it step by step with encoderlab.attention.scaled_dot_product_attention.",
        answer=_without_nan(attempt.answers[first]),
    )


_ATTENTION = Exercise(
    title="scaled dot-product attention",
    cases=_attention_cases,
    arguments=_attention_arguments,
    answer=_attention_output,
    reference=lambda q, k, v, mask: scaled_dot_product_attention(q, k, v, mask)[0],
    describe=_describe_attention,
    same=close,
    notice=_nan_rows_only,
    mistakes=_ATTENTION_MISTAKES,
    same_mistake=lambda out, wrong: close(_without_nan(out), wrong),
    fallback=_attention_fallback,
)


@checker
def check_attention(fn: Callable) -> bool:
    """Check ``fn(q, k, v, mask=None)`` against scaled dot-product attention (Lesson 3, §1).

    ``fn`` may return the output or (output, weights); a masked-out row must give zeros.
    """
    return run(_ATTENTION, fn)


# --- The causal mask (Lesson 3, §2) ------------------------------------------------------------

_CAUSAL_MISTAKES = [
    ("your mask is upper-triangular, the transpose of the causal mask: query i would see the "
     "future keys j > i and not its past.",
     "keep j <= i, the lower triangle (torch.tril).",
     lambda n: torch.ones(n, n, dtype=torch.bool).triu()),
    ("your mask hides the diagonal, but a token may attend to itself (or the first token has "
     "nothing at all to attend to).",
     "keep every j <= i: torch.tril with diagonal=0.",
     lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)),
    ("your mask is True on the future keys j > i and False on the past, the wrong way round: "
     "True must mean may attend.",
     "negate it, or build the lower triangle (torch.tril) directly.",
     lambda n: torch.ones(n, n, dtype=torch.bool).triu(1)),
    ("your mask lets every query see every key: that is the encoder's bidirectional mask, "
     "and the causal mask hides the keys j > i.",
     "keep only j <= i, the lower triangle (torch.tril).",
     lambda n: torch.ones(n, n, dtype=torch.bool)),
]


_CAUSAL = square_mask_exercise(
    title="causal mask",
    cases=lambda: [(n,) for n in (5, 8, 1, 2, 3, 13)],  # a readable size first
    reference=masks.causal,
    describe=lambda n: f"n = {n}",
    rule="the causal mask is (n, n) = {square} (batch and head axes come later, by broadcasting).",
    mistakes=_CAUSAL_MISTAKES,
)


@checker
def check_causal_mask(fn: Callable) -> bool:
    """Check ``fn(n)`` returns the (n, n) boolean causal mask: True where j <= i (Lesson 3, §2)."""
    return run(_CAUSAL, fn)


# --- The padding mask (Lesson 3, §5) -----------------------------------------------------------

_HEADS = 3  # the head axis the checker broadcasts to; no case has b or n equal to 3


def _key_side(attention_mask: torch.Tensor) -> torch.Tensor:
    return attention_mask.bool()[:, None, None, :]  # (b, 1, 1, n): hide columns


def _query_side(attention_mask: torch.Tensor) -> torch.Tensor:
    return attention_mask.bool()[:, None, :, None]  # (b, 1, n, 1): hide rows


_PADDING_MISTAKES = [
    ("your mask hides the padding queries (rows) instead of the padding keys (columns), so real "
     "tokens still attend to [PAD].",
     "put the sequence axis last: attention_mask[:, None, None, :], of shape (b, 1, 1, n).",
     _query_side),
    ("your mask is True at the [PAD] positions and False at the real tokens, the wrong way round: "
     "True must mean may attend.",
     "make the 1s of attention_mask True: attention_mask.bool().",
     lambda am: (am == 0)[:, None, None, :]),
    ("your mask hides the padding rows as well as the padding columns; only keys need hiding, "
     "since nobody uses a [PAD] query's output and hiding its row leaves it nothing to attend "
     "to.",
     "mask the columns only, shape (b, 1, 1, n).",
     lambda am: _query_side(am) & _key_side(am)),
    ("your mask lets every query see every key, [PAD] included: it ignores the attention_mask.",
     "build it from attention_mask: attention_mask.bool()[:, None, None, :].",
     lambda am: torch.ones(am.shape[0], 1, 1, am.shape[1], dtype=torch.bool)),
]


def _padding_cases() -> list[tuple]:
    """(attention_mask,) cases of 0/1 int64, as a tokenizer returns them; b and n never 3."""
    g = torch.Generator().manual_seed(0)
    cases = [
        torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]),
        torch.tensor([[1, 1, 1, 1, 1, 1, 0]]),
        torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1],
                      [0, 0, 0, 0, 1, 1]]),  # left padding
    ]
    for b in (2, 4, 2):  # random lengths, right padding
        n = int(torch.randint(5, 10, (1,), generator=g))
        lengths = torch.randint(1, n + 1, (b,), generator=g)  # at least one real token ([CLS])
        cases.append((torch.arange(n)[None, :] < lengths[:, None]).long())  # (b, n)
    return [(am,) for am in cases]


def _scores_shape(am: torch.Tensor) -> tuple[int, int, int, int]:
    b, n = am.shape
    return (b, _HEADS, n, n)  # (b, h, n_q, n_kv)


def _broadcast_masks(answers: list, cases: list) -> list:
    """Boolean masks that broadcast to the scores (b, h, n, n), expanded to that shape."""
    require_bool_masks(answers)
    expanded = []
    for m, (am,) in zip(answers, cases, strict=True):
        b, n = am.shape
        target = _scores_shape(am)
        if tuple(m.shape) == (b, n) and b > 1:
            raise CheckFailed(
                f"your mask keeps the tokenizer's shape (b, n) = {(b, n)}, which does not line up "
                "with the scores (b, h, n_q, n_kv).",
                "add head and query axes: attention_mask[:, None, None, :], of shape (b, 1, 1, n).",
            )
        try:
            fits = torch.broadcast_shapes(tuple(m.shape), target) == target
        except RuntimeError:
            fits = False
        if not fits:
            raise CheckFailed(
                f"your mask of shape {tuple(m.shape)} does not broadcast to the scores' shape "
                f"(b, h, n, n) = {target} for attention_mask {am.tolist()}; the reference shape "
                "is (b, 1, 1, n)."
            )
        expanded.append(m.expand(target))
    return expanded


_PADDING = Exercise(
    title="padding mask",
    cases=_padding_cases,
    arguments=lambda am: (am.clone(),),
    answer=lambda result, where, am: as_tensor(result, "a boolean tensor like (b, 1, 1, n)").cpu(),
    review=_broadcast_masks,
    reference=lambda am: masks.padding(am).expand(_scores_shape(am)),
    describe=lambda am: f"attention_mask {am.tolist()}",
    mistakes=_PADDING_MISTAKES,
    same_mistake=lambda mine, wrong_mask: torch.equal(mine, wrong_mask.expand(mine.shape)),
    fallback=first_mask_difference,
)


@checker
def check_padding_mask(fn: Callable) -> bool:
    """Check ``fn(attention_mask)`` hides [PAD] keys: bool, broadcastable to (b, h, n, n) (§5)."""
    return run(_PADDING, fn)


# --- Multi-head self-attention from its weights (Lesson 3, §1 and §5) --------------------------


def _self_attention_variant(x, attention_mask, params, n_heads, *, split="view_transpose",
                            scale="sqrt_dk", mask_side="keys", merge="transpose",
                            project=True, weights="as_linear", biases=True, softmax_dim=-1,
                            bias_o=True):
    """Multi-head self-attention from a state dict, with one switch turned: each non-default
    switch is a known mistake. x (b, n, d); attention_mask (b, n) of 0/1."""
    b, n, d = x.shape
    d_k = d // n_heads

    def linear(t, name):  # nn.Linear stores W as (out, in): t @ W.T + b
        w = params[f"{name}.weight"]
        bias = params[f"{name}.bias"] if biases and (bias_o or name != "w_o") else None
        return F.linear(t, w if weights == "as_linear" else w.T, bias)

    def heads(t):
        if split == "view_only":  # (b, n, d) read as (b, h, n, d_k): positions mixed
            return t.reshape(b, n_heads, n, d_k)
        if split == "d_k_first":  # (b, n, d) read as (b, n, d_k, h): heads interleaved
            return t.view(b, n, d_k, n_heads).permute(0, 3, 1, 2)
        return t.view(b, n, n_heads, d_k).transpose(1, 2)  # (b, h, n, d_k)

    q, k, v = (heads(linear(x, name)) for name in ("w_q", "w_k", "w_v"))
    divisor = {"sqrt_dk": math.sqrt(d_k), "sqrt_d": math.sqrt(d), "sqrt_n": math.sqrt(n),
               "none": 1.0}[scale]
    s = q @ k.transpose(-2, -1) / divisor  # (b, h, n, n)
    real = attention_mask.bool()
    allowed = {"keys": real[:, None, None, :], "queries": real[:, None, :, None],
               "inverted": ~real[:, None, None, :],  # True read as "hide": [PAD] keys only
               "both": real[:, None, None, :] & real[:, None, :, None],
               "after_softmax": torch.ones(b, 1, 1, n, dtype=torch.bool),
               "none": torch.ones(b, 1, 1, n, dtype=torch.bool)}[mask_side]
    s = s.masked_fill(~allowed, -math.inf)
    a = torch.softmax(s, dim=softmax_dim)  # (b, h, n, n); a hidden query row is NaN
    if mask_side == "after_softmax":  # [PAD] weights zeroed, the rest not renormalised
        a = a * real[:, None, None, :]
    out = a @ v  # (b, h, n, d_k)
    if merge == "transpose":
        out = out.transpose(1, 2).reshape(b, n, d)  # (b, n, h * d_k): heads side by side
    elif merge == "d_k_first":  # (b, h, n, d_k) to (b, n, d_k, h): heads interleaved
        out = out.permute(0, 2, 3, 1).reshape(b, n, d)
    else:  # "reshape_only": (b, h, n, d_k) read as (b, n, d), positions mixed
        out = out.reshape(b, n, d)
    if project:
        out = linear(out, "w_o")
    return out


_SELF_ATTENTION_MISTAKES = [
    ("your heads are cut from the wrong axis: reshaping (b, n, d) straight to (b, h, n, d_k) "
     "mixes positions, so a 'head' holds pieces of several tokens.",
     "split the last axis first, .view(b, n, h, d_k), then .transpose(1, 2).",
     partial(_self_attention_variant, split="view_only")),
    ("your heads are merged along the wrong axis: reshaping (b, h, n, d_k) straight to "
     "(b, n, d) mixes positions.",
     "bring the head axis next to d_k first: .transpose(1, 2).reshape(b, n, d).",
     partial(_self_attention_variant, merge="reshape_only")),
    ("your heads are split and merged with a plain reshape, (b, n, d) to (b, h, n, d_k) and "
     "back, without a transpose: every shape is right, but each 'head' holds pieces of several "
     "tokens.",
     "split with .view(b, n, h, d_k).transpose(1, 2); merge with .transpose(1, 2).reshape(b, n, "
     "d).",
     partial(_self_attention_variant, split="view_only", merge="reshape_only")),
    ("your padding mask is inverted: it hides the real tokens and lets every query read only "
     "the [PAD] keys. The tokenizer's attention_mask is 1 for a real token, and in this course "
     "True means may attend.",
     "hide the keys where attention_mask == 0: s.masked_fill(attention_mask[:, None, None, :] "
     "== 0, -inf).",
     partial(_self_attention_variant, mask_side="inverted")),
    ("you scale the scores by sqrt(n), the number of keys, but the scale is sqrt(d_k), the "
     "width of each head's queries and keys.",
     "divide by math.sqrt(d_k), d_k = d_model / h.",
     partial(_self_attention_variant, scale="sqrt_n")),
    ("your softmax runs over the heads axis (dim=1): each key's weights then sum to 1 across "
     "the heads, but each query's row must sum to 1 over the keys.",
     "take the softmax over the keys, dim=-1.",
     partial(_self_attention_variant, softmax_dim=1)),
    ("your output projection leaves out its bias: W_O has one too, params['w_o.bias'].",
     "finish with F.linear(merged, params['w_o.weight'], params['w_o.bias']).",
     partial(_self_attention_variant, bias_o=False)),
    ("you scale the scores by sqrt(d_model), the width of the whole vector, but each head's "
     "scores are dot products of d_k = d_model / h numbers.",
     "divide by sqrt(d_k).",
     partial(_self_attention_variant, scale="sqrt_d")),
    ("your output ignores the attention_mask: real tokens attend to [PAD] too.",
     "set the scores to -inf where attention_mask[:, None, None, :] is 0, before the softmax.",
     partial(_self_attention_variant, mask_side="none")),
    ("your padding mask hides rows (padding queries) instead of columns (padding keys), so real "
     "tokens still attend to [PAD].",
     "use attention_mask[:, None, None, :], shape (b, 1, 1, n).",
     partial(_self_attention_variant, mask_side="queries")),
    ("your output is the concatenated heads without the output projection W_O, which mixes "
     "the heads.",
     "finish with F.linear(out, params['w_o.weight'], params['w_o.bias']).",
     partial(_self_attention_variant, project=False)),
    ("you multiply by the weights as stored, x @ W, but nn.Linear stores W as (out, in) and "
     "computes x @ W.T + b; with square weights the shapes cannot tell you.",
     "use x @ W.T + b, or F.linear(x, W, b), for all four projections.",
     partial(_self_attention_variant, weights="transposed")),
    ("your projections leave out the biases: params holds a bias for each of w_q, w_k, w_v "
     "and w_o.",
     "add params[f'{name}.bias'] after each product, or use F.linear(x, W, b).",
     partial(_self_attention_variant, biases=False)),
    ("your heads are split as (b, n, d_k, h): head j then takes every h-th number of the "
     "vector, but each head owns a block of d_k neighbouring numbers.",
     "split as .view(b, n, h, d_k).transpose(1, 2).",
     partial(_self_attention_variant, split="d_k_first")),
    ("your heads are split and merged as (b, n, d_k, h): head j then takes every h-th number "
     "of the vector, but each head owns a block of d_k neighbouring numbers.",
     "split as .view(b, n, h, d_k).transpose(1, 2) and merge with .transpose(1, 2).reshape(b, "
     "n, d).",
     partial(_self_attention_variant, split="d_k_first", merge="d_k_first")),
    ("your heads are merged as (b, n, d_k, h), interleaving them, but the heads sit side by "
     "side: head j fills numbers j*d_k to (j+1)*d_k - 1 of the merged vector.",
     "merge with .transpose(1, 2).reshape(b, n, d).",
     partial(_self_attention_variant, merge="d_k_first")),
    ("your softmax normalises over the queries (dim=-2, so each column sums to 1), but each "
     "query's row of weights must sum to 1.",
     "take the softmax over the keys, dim=-1.",
     partial(_self_attention_variant, softmax_dim=-2)),
    ("your scores are not scaled: each head's scores are dot products of d_k numbers and "
     "must be divided by sqrt(d_k).",
     "divide q @ k.transpose(-2, -1) by math.sqrt(d_k) before the softmax.",
     partial(_self_attention_variant, scale="none")),
    ("only your [PAD] query rows differ; every real token's row is right. A [PAD] query reads "
     "the real keys like any other query (its output is never used): hiding the [PAD] rows as "
     "well as the [PAD] keys leaves it nothing to attend to.",
     "hide the keys only: attention_mask[:, None, None, :], shape (b, 1, 1, n).",
     partial(_self_attention_variant, mask_side="both")),
    ("you zero the [PAD] keys' weights after the softmax, so a query's weights no longer sum "
     "to 1.",
     "set the scores to -inf where attention_mask[:, None, None, :] is 0, before the softmax.",
     partial(_self_attention_variant, mask_side="after_softmax")),
]


def _self_attention_cases() -> list[tuple]:
    """(x, attention_mask, params, n_heads): small widths, padding in every batch of two or more."""
    g = torch.Generator().manual_seed(0)
    cases = []
    for b, n, d, h, lengths in [(2, 5, 8, 2, (5, 3)), (1, 4, 12, 3, (4,)), (3, 6, 16, 4, (6, 2, 4)),
                                (2, 7, 12, 2, (4, 7)), (2, 5, 16, 8, (5, 1))]:
        x = torch.randn(b, n, d, generator=g)
        attention_mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()
        params = {}
        for name in ("w_q", "w_k", "w_v", "w_o"):
            params[f"{name}.weight"] = torch.randn(d, d, generator=g) / math.sqrt(d) * 1.5
            params[f"{name}.bias"] = torch.randn(d, generator=g) * 0.1
        cases.append((x, attention_mask, params, h))
    return cases


def _describe_self_attention(x, attention_mask, params, n_heads) -> str:
    b, n, d = x.shape
    return (f"x of shape {(b, n, d)}, h = {n_heads} heads, "
            f"lengths {attention_mask.sum(dim=1).tolist()}")


def _self_attention_reference(x, attention_mask, params, n_heads) -> torch.Tensor:
    mha = MultiHeadAttention(x.shape[-1], n_heads)
    mha.load_state_dict(params)
    with torch.no_grad():
        return mha(x, mask=masks.padding(attention_mask))[0]


def _self_attention_answer(result, where, x, attention_mask, params, n_heads) -> torch.Tensor:
    if isinstance(result, (tuple, list)) and result:
        result = result[0]  # (out, weights) is fine too
    out = as_tensor(result, "the output tensor of shape (b, n, d_model)").cpu()
    b, n, d = x.shape
    if tuple(out.shape) == (b, n_heads, n, d // n_heads):
        raise CheckFailed(
            f"your output has the heads' shape (b, h, n, d_k) = {tuple(out.shape)} on {where}, "
            "not one vector per token.",
            "merge the heads back, .transpose(1, 2).reshape(b, n, d), then apply W_O.",
        )
    if tuple(out.shape) != (b, n, d):
        raise CheckFailed(f"your output has shape {tuple(out.shape)} but should have shape "
                          f"{(b, n, d)} = (b, n, d_model), like x (on {where}).")
    return out


def _same_where_defined(out: torch.Tensor, wrong: torch.Tensor) -> bool:
    """Equal wherever the wrong version is a number: hiding query rows leaves NaN rows, which a
    learner may have turned into anything."""
    undefined = torch.isnan(wrong)
    return close(out.masked_fill(undefined, 0.0), wrong.masked_fill(undefined, 0.0))


def _rows_that_differ(attempt) -> str:
    """Which query rows of the first wrong case differ: every one, or some (a case wrong on the
    [PAD] rows only is named by a mistake, the one that hides the [PAD] rows)."""
    first = attempt.first
    mine = torch.nan_to_num(attempt.answers[first].double(), nan=1e30)
    rows = ((mine - attempt.references[first].double()).abs()
            > ATOL + RTOL * attempt.references[first].double().abs()).any(dim=-1)  # (b, n)
    if rows.all():
        return "every query row differs"
    wrong = [(int(i), int(j)) for i, j in rows.nonzero()[:4]]
    return (f"{int(rows.sum())} of {rows.numel()} query rows differ, the first at (sequence, "
            f"position) {', '.join(map(str, wrong))}")


def _self_attention_fallback(attempt) -> tuple[str, str]:
    diagnosis, fix = differs(attempt, "output", "MultiHeadAttention with the same weights", "")
    return (f"{diagnosis[:-1]}: {_rows_that_differ(attempt)}.",
            "compare your values, not only your shapes, step by step with "
            "encoderlab.attention.MultiHeadAttention.forward: project with x @ W.T + b, split "
            "with .view(b, n, h, d_k).transpose(1, 2), scores / sqrt(d_k), [PAD] keys to -inf, "
            "softmax over the keys, merge, W_O.")


_SELF_ATTENTION = Exercise(
    title="multi-head self-attention",
    cases=_self_attention_cases,
    arguments=lambda x, am, params, h: (x.clone(), am.clone(),
                                        {k: t.clone() for k, t in params.items()}, h),
    answer=_self_attention_answer,
    reference=_self_attention_reference,
    describe=_describe_self_attention,
    same=close,
    mistakes=_SELF_ATTENTION_MISTAKES,
    same_mistake=_same_where_defined,
    fallback=_self_attention_fallback,
)

# What the exercise asks the learner to write: calling one of these fails (harness.forbidding).
_ATTENTION_BUILT_IN = [
    (F, "scaled_dot_product_attention", "F.scaled_dot_product_attention"),
    (attention_module, "scaled_dot_product_attention",
     "encoderlab.attention.scaled_dot_product_attention"),
    (MultiHeadAttention, "forward", "MultiHeadAttention(...).forward"),
]
_WRITE_ATTENTION = ("compute the scores q @ k.transpose(-2, -1) / sqrt(d_k), mask them, take "
                    "torch.softmax over the keys and multiply by v with tensor operations.")


@checker
def check_multi_head_attention(fn: Callable) -> bool:
    """Check ``fn(x, attention_mask, params, n_heads)``: multi-head self-attention from a
    ``MultiHeadAttention`` state dict, padding keys hidden (Lesson 3, §1 and §5).

    Calling ``F.scaled_dot_product_attention``, the library's ``scaled_dot_product_attention``
    or ``MultiHeadAttention`` fails: the exercise is to write them; so does changing ``x`` in
    place."""
    require_callable(fn)
    guarded = forbidding(fn, _ATTENTION_BUILT_IN, _WRITE_ATTENTION)
    return run(_SELF_ATTENTION, leaving_inputs(guarded, ("x", "attention_mask")))

"""Lesson 3's checkers: scaled dot-product attention (§1), the causal mask (§2) and the padding
mask (§5)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from encoderlab import masks
from encoderlab.attention import scaled_dot_product_attention
from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    as_tensor,
    close,
    differs,
    first_mask_difference,
    require_bool_masks,
    run,
    square_mask_exercise,
)

__all__ = ["check_attention", "check_causal_mask", "check_padding_mask"]

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
    ("your scores are not scaled: divide q @ kᵀ by sqrt(d_k) before the softmax "
     "(unscaled scores grow with d_k and push the softmax towards one-hot).",
     partial(_attention_variant, scale="none")),
    ("you divide the scores by d_k, but the formula divides by sqrt(d_k).",
     partial(_attention_variant, scale="dk")),
    ("you scale by sqrt(d_v), the width of V; the scale is sqrt(d_k), the width that queries "
     "and keys share (q.shape[-1]).",
     partial(_attention_variant, scale="sqrt_dv")),
    ("your softmax normalises over the queries (dim=-2, so each column sums to 1); it must run "
     "over the keys (dim=-1), so that each query's row of weights sums to 1.",
     partial(_attention_variant, softmax_dim=-2)),
    ("your function attends where the mask is False and hides where it is True: in this course "
     "True means may attend, so fill the scores with -inf where ~mask.",
     partial(_attention_variant, mask_use="inverted")),
    ("your output does not change when a mask is given: the mask is ignored; set the scores to "
     "-inf where the mask is False, before the softmax.",
     partial(_attention_variant, mask_use="ignored")),
    ("you add the boolean mask to the scores (True counts as +1); turn it into 0 / -inf first, "
     "e.g. s.masked_fill(~mask, float('-inf')).",
     partial(_attention_variant, mask_use="added")),
    ("you zero the masked weights after the softmax, so a query's weights no longer sum to 1; "
     "mask the scores with -inf before the softmax instead.",
     partial(_attention_variant, mask_use="after_softmax")),
    ("a query whose keys are all masked should output zeros, but yours outputs the plain "
     "average of V: a finite fill such as -1e9 makes that row a uniform softmax; zero it after "
     "the softmax.",
     partial(_attention_variant, fill=-1e9, zero_empty_rows=False)),
]

_NAN_ROWS = (
    "a query whose keys are all masked gives NaN (a softmax over nothing but -inf is 0/0); "
    "the reference outputs zeros there: e.g. weights = torch.where(mask, weights, 0.0) "
    "after the softmax."
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
            raise CheckFailed("your function returned an empty tuple: return out, or (out, A).")
        result = result[0]
    out = as_tensor(result, "the output tensor (or a pair (out, weights))")
    expected = (*q.shape[:-1], v.shape[-1])  # (b, h, n_q, d_v)
    weights_shape = (*q.shape[:-1], k.shape[-2])  # (b, h, n_q, n_kv)
    if tuple(out.shape) == expected:
        return out.double()
    if tuple(out.shape) == weights_shape:
        raise CheckFailed(
            f"your function returns the attention weights A, shape {weights_shape}, where the "
            f"output A @ V, shape {expected}, was expected: return out, or the pair (out, weights)."
        )
    raise CheckFailed(
        f"your output has shape {tuple(out.shape)} but should have shape {expected} = "
        f"(b, h, n_q, d_v), one row per query and as wide as V (on "
        f"{_describe_attention(q, k, v, None)})."
    )


def _without_nan(out: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(out, nan=0.0)


def _nan_rows_only(attempt) -> str | None:
    """NaN only where the reference has zeros: the fully masked rows."""
    if all(close(_without_nan(out), ref)
           for out, ref in zip(attempt.answers, attempt.references, strict=True)):
        return _NAN_ROWS
    return None


def _attention_fallback(attempt) -> str:
    first = attempt.first
    if all(attempt.cases[k][3] is not None for k in attempt.wrong):  # right without a mask only
        return (
            "your function is right without a mask but wrong with one: keep the scores where the "
            "mask is True, set them to -inf where it is False, before the softmax "
            f"(first wrong on {attempt.where(first)})."
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


def check_attention(fn: Callable) -> bool:
    """Check ``fn(q, k, v, mask=None)`` against scaled dot-product attention (Lesson 3, §1).

    ``fn`` may return the output or (output, weights); a masked-out row must give zeros.
    """
    return run(_ATTENTION, fn)


# --- The causal mask (Lesson 3, §2) ------------------------------------------------------------

_CAUSAL_MISTAKES = [
    ("your mask is upper-triangular, the transpose of the causal mask: query i would see the "
     "future keys j > i and not its past; keep j <= i, the lower triangle (torch.tril).",
     lambda n: torch.ones(n, n, dtype=torch.bool).triu()),
    ("your mask hides the diagonal, but a token may attend to itself: keep every j <= i "
     "(torch.tril with diagonal=0), or the first token has nothing at all to attend to.",
     lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)),
    ("your mask is True on the future keys j > i and False on the past, the wrong way round: "
     "True must mean may attend.",
     lambda n: torch.ones(n, n, dtype=torch.bool).triu(1)),
    ("your mask lets every query see every key: that is the encoder's bidirectional mask; "
     "the causal mask hides the keys j > i.",
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
     "tokens still attend to [PAD]: put the sequence axis last, attention_mask[:, None, None, :] "
     "of shape (b, 1, 1, n).",
     _query_side),
    ("your mask is True at the [PAD] positions and False at the real tokens, the wrong way round: "
     "True must mean may attend, so the 1s of attention_mask become True.",
     lambda am: (am == 0)[:, None, None, :]),
    ("your mask hides the padding rows as well as the padding columns; only keys need hiding, "
     "since nobody uses a [PAD] query's output and hiding its row leaves it nothing to attend "
     "to: mask the columns only, shape (b, 1, 1, n).",
     lambda am: _query_side(am) & _key_side(am)),
    ("your mask lets every query see every key, [PAD] included: it ignores the attention_mask.",
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
                "with the scores (b, h, n_q, n_kv): add head and query axes, "
                "attention_mask[:, None, None, :] of shape (b, 1, 1, n)."
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


def check_padding_mask(fn: Callable) -> bool:
    """Check ``fn(attention_mask)`` hides [PAD] keys: bool, broadcastable to (b, h, n, n) (§5)."""
    return run(_PADDING, fn)

"""Exercise checkers: they run your function and say in words what is wrong (Lesson 3's exercises).

Each checker compares the learner's function with the library's reference on chosen and random
cases (fixed seed). When the answers differ, it runs the usual wrong versions (missing scale,
softmax over the wrong axis, inverted mask, ...) and reports the one that reproduces the learner's
answers, in one sentence, as a :class:`CheckFailed`. On success it prints one line and returns True.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from functools import partial

import torch

from . import masks
from .attention import scaled_dot_product_attention

__all__ = ["CheckFailed", "check_attention", "check_causal_mask", "check_padding_mask"]

_ATOL, _RTOL = 1e-5, 1e-4  # float32 rounding, with room for a different order of operations


class CheckFailed(AssertionError):
    """A checker found a mistake; the message says what is wrong and how to fix it."""


# --- Shared helpers ----------------------------------------------------------------------------


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _learner_line(error: Exception) -> str:
    """'; line 4 in my_attention: s = q @ k.T' for the last frame outside torch and this module."""
    frames = [
        f for f in traceback.extract_tb(error.__traceback__)
        if "-packages" not in f.filename and f.filename != __file__  # site- or dist-packages
    ]
    if not frames:
        return ""
    frame = frames[-1]
    return f"; line {frame.lineno} in {frame.name}: {(frame.line or '').strip()}"


def _call(fn: Callable, args: tuple, case: str):
    """Call the learner's function; any exception becomes a CheckFailed naming the case."""
    try:
        return fn(*args)
    except Exception as error:  # the learner's bug, reported in words rather than a raw traceback
        where = _learner_line(error)
        raise CheckFailed(
            f"your function raised {type(error).__name__}: {error} (on {case}{where})"
        ) from None


def _check_callable(fn) -> None:
    if not callable(fn):
        raise CheckFailed(f"expected your function itself, got a {type(fn).__name__}: "
                          "pass the name without calling it, e.g. check_attention(my_attention).")


def _as_tensor(value, what: str) -> torch.Tensor:
    """A learner's return value as a tensor (numpy arrays are accepted and converted)."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(
            f"your function returned a {type(value).__name__}, not a tensor: return {what}."
        ) from None


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and the same numbers up to float32 rounding (NaN equals NaN)."""
    return a.shape == b.shape and torch.allclose(
        a.double(), b.double(), atol=_ATOL, rtol=_RTOL, equal_nan=True
    )


def _diagnose(outputs: list, cases: list[tuple], mistakes, same, wrong: list[int]) -> str | None:
    """The message of the first known mistake that reproduces the learner's outputs.

    A mistake that matches on every case is the surest diagnosis; failing that, one that matches
    on every case where the learner went wrong (``wrong`` holds their indices).
    """
    for subset in (range(len(cases)), wrong):
        for message, mistake in mistakes:
            if all(same(outputs[i], mistake(*cases[i])) for i in subset):
                return message
    return None


def _success(what: str, fn, n_cases: int) -> bool:
    print(f"✓ {what} ({_name(fn)}): correct on {n_cases} cases")
    return True


def _check_bool_masks(returned: list[torch.Tensor]) -> None:
    """Masks in this course are boolean, True = may attend; say how to get there from the dtype."""
    wrong = [m for m in returned if m.dtype != torch.bool]
    if not wrong:
        return
    if any(m.is_floating_point() and bool(torch.isinf(m).any()) for m in wrong):
        raise CheckFailed(
            f"your mask looks additive (0 and -inf, dtype {wrong[0].dtype}); return the boolean "
            "form, True = may attend: attention turns it into 0 / -inf itself (masks.to_additive)."
        )
    raise CheckFailed(
        f"your mask has dtype {wrong[0].dtype}, but masks in this course are boolean "
        "(True = may attend): build it with dtype=torch.bool or convert it with .bool()."
    )


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


def _attention_output(result, q, k, v) -> torch.Tensor:
    """The output tensor from ``out`` or ``(out, weights)``, with its shape checked."""
    if isinstance(result, (tuple, list)):
        if not result:
            raise CheckFailed("your function returned an empty tuple: return out, or (out, A).")
        result = result[0]
    out = _as_tensor(result, "the output tensor (or a pair (out, weights))")
    expected = (*q.shape[:-1], v.shape[-1])  # (b, h, n_q, d_v)
    weights_shape = (*q.shape[:-1], k.shape[-2])  # (b, h, n_q, n_kv)
    if tuple(out.shape) == expected:
        return out
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


def check_attention(fn: Callable) -> bool:
    """Check ``fn(q, k, v, mask=None)`` against scaled dot-product attention (Lesson 3, §1).

    ``fn`` may return the output or (output, weights); a masked-out row must give zeros.
    """
    _check_callable(fn)
    cases = _attention_cases()
    outputs = []
    for q, k, v, mask in cases:
        args = (q.clone(), k.clone(), v.clone(), None if mask is None else mask.clone())
        result = _call(fn, args, _describe_attention(q, k, v, mask))
        outputs.append(_attention_output(result, q, k, v).double())
    references = [scaled_dot_product_attention(*case)[0] for case in cases]
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, references, strict=True))
             if not _close(out, ref)]
    if not wrong:
        return _success("scaled dot-product attention", fn, len(cases))

    # NaN only where the reference has zeros: the fully masked rows.
    without_nan = [torch.nan_to_num(out, nan=0.0) for out in outputs]
    if all(_close(out, ref) for out, ref in zip(without_nan, references, strict=True)):
        raise CheckFailed(_NAN_ROWS)
    message = _diagnose(without_nan, cases, _ATTENTION_MISTAKES, _close, wrong)
    if message:
        raise CheckFailed(message)
    if all(cases[i][3] is not None for i in wrong):  # right without a mask, wrong with one
        raise CheckFailed(
            "your function is right without a mask but wrong with one: keep the scores where the "
            "mask is True, set them to -inf where it is False, before the softmax "
            f"(first wrong on {_describe_attention(*cases[wrong[0]])})."
        )
    difference = (without_nan[wrong[0]] - references[wrong[0]]).abs().max().item()
    raise CheckFailed(
        f"your output differs from softmax(q kᵀ / sqrt(d_k) + M) v by up to {difference:.3g} "
        f"on {_describe_attention(*cases[wrong[0]])}; compare it step by step with "
        "encoderlab.attention.scaled_dot_product_attention."
    )


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


def _mask_difference(mine: torch.Tensor, reference: torch.Tensor, case: str) -> str:
    """One sentence locating the first cell where two masks of the same shape disagree."""
    differ = mine != reference
    index = tuple(int(x) for x in differ.nonzero()[0])
    i, j = index[-2], index[-1]
    return (
        f"your mask differs from the reference in {int(differ.sum())} of {differ.numel()} cells "
        f"on {case}; the first is query i={i}, key j={j}: yours says {bool(mine[index])}, the "
        f"reference {bool(reference[index])} (True = may attend)."
    )


def check_causal_mask(fn: Callable) -> bool:
    """Check ``fn(n)`` returns the (n, n) boolean causal mask: True where j <= i (Lesson 3, §2)."""
    _check_callable(fn)
    cases = [(n,) for n in (5, 8, 1, 2, 3, 13)]  # a readable size first
    outputs = [_as_tensor(_call(fn, (n,), f"n = {n}"), "a boolean tensor of shape (n, n)").cpu()
               for (n,) in cases]
    _check_bool_masks(outputs)
    for m, (n,) in zip(outputs, cases, strict=True):
        if tuple(m.shape) != (n, n):
            raise CheckFailed(
                f"your mask has shape {tuple(m.shape)} for n = {n}; the causal mask is (n, n) = "
                f"{(n, n)} (batch and head axes come later, by broadcasting)."
            )
    wrong = [i for i, (m, (n,)) in enumerate(zip(outputs, cases, strict=True))
             if not torch.equal(m, masks.causal(n))]
    if not wrong:
        return _success("causal mask", fn, len(cases))
    message = _diagnose(outputs, cases, _CAUSAL_MISTAKES, torch.equal, wrong)
    (n,) = cases[wrong[0]]
    raise CheckFailed(message or _mask_difference(outputs[wrong[0]], masks.causal(n), f"n = {n}"))


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


def check_padding_mask(fn: Callable) -> bool:
    """Check ``fn(attention_mask)`` hides [PAD] keys: bool, broadcastable to (b, h, n, n) (§5)."""
    _check_callable(fn)
    cases = _padding_cases()
    returned = [
        _as_tensor(_call(fn, (am.clone(),), f"attention_mask {am.tolist()}"),
                   "a boolean tensor like (b, 1, 1, n)").cpu()
        for (am,) in cases
    ]
    _check_bool_masks(returned)
    outputs, references = [], []
    for m, (am,) in zip(returned, cases, strict=True):
        b, n = am.shape
        case = f"attention_mask {am.tolist()}"
        target = (b, _HEADS, n, n)  # (b, h, n_q, n_kv)
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
                f"(b, h, n, n) = {target} for {case}; the reference shape is (b, 1, 1, n)."
            )
        outputs.append(m.expand(target))
        references.append(masks.padding(am).expand(target))
    wrong = [i for i, (m, ref) in enumerate(zip(outputs, references, strict=True))
             if not torch.equal(m, ref)]
    if not wrong:
        return _success("padding mask", fn, len(cases))

    def same(mine, wrong_mask):
        return torch.equal(mine, wrong_mask.expand(mine.shape))

    message = _diagnose(outputs, cases, _PADDING_MISTAKES, same, wrong)
    first = wrong[0]
    raise CheckFailed(message or _mask_difference(
        outputs[first], references[first], f"attention_mask {cases[first][0].tolist()}"
    ))

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


def _differs(noun, formula, output, reference, where, hint) -> CheckFailed:
    """The last-resort message: no known mistake fits, so say by how much and where."""
    difference = (output - reference).abs().max().item()
    return CheckFailed(
        f"your {noun} differs from {formula} by up to {difference:.3g} on {where}; {hint}"
    )


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
    raise _differs(
        "output", "softmax(q kᵀ / sqrt(d_k) + M) v", without_nan[wrong[0]], references[wrong[0]],
        _describe_attention(*cases[wrong[0]]),
        "compare it step by step with encoderlab.attention.scaled_dot_product_attention.",
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


# --- Lesson 1 ---
# Two checkers for Lesson 1's exercises: the cosine-similarity matrix of §4 and the labels of the
# two objectives of §2.

from . import objectives, probes  # noqa: E402

__all__ += ["check_cosine_similarity", "check_objective_labels"]


def _cosine_cases() -> list[tuple]:
    """(x,) cases of shape (m, d) with m != d, rows of very different lengths, some anti-aligned."""
    g = torch.Generator().manual_seed(1)
    cases = [
        torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.5, 0.0], [-6.0, -8.0, 0.0], [1.0, 0.0, 1.0]]),
    ]
    for m, d in ((5, 8), (3, 16), (7, 4), (2, 32)):
        lengths = torch.rand(m, 1, generator=g) * 9 + 0.5  # (m, 1): 0.5 to 9.5
        x = torch.randn(m, d, generator=g)
        cases.append(x / x.norm(dim=1, keepdim=True) * lengths)  # (m, d)
    cases.append(torch.randn(6, 10, generator=g) + 2.0)  # all in one orthant: cosines near 1
    return [(x,) for x in cases]


def _cos_unit_rows(x):
    return x / x.norm(dim=1, keepdim=True)


_COSINE_MISTAKES = [
    ("your matrix is x @ xᵀ, the raw dot products, which grow with the vectors' lengths: divide "
     "each row by its own length first (x / x.norm(dim=1, keepdim=True)), then take x @ xᵀ.",
     lambda x: x @ x.T),
    ("you normalise over the wrong axis: x.norm(dim=0) is the length of each feature column; "
     "cosine similarity divides each row (each vector) by its length, x.norm(dim=1, keepdim=True).",
     lambda x: (x / x.norm(dim=0, keepdim=True)) @ (x / x.norm(dim=0, keepdim=True)).T),
    ("you normalise only one side of the product; divide both factors' rows by their lengths, "
     "so that the diagonal is 1.",
     lambda x: _cos_unit_rows(x) @ x.T),
    ("you divide by the norm of the whole matrix (x.norm() with no dim), one number for all rows; "
     "each row needs its own length, x.norm(dim=1, keepdim=True).",
     lambda x: (x @ x.T) / x.norm() ** 2),
    ("your function returns Euclidean distances (0 on the diagonal, larger = less alike); the "
     "task asks for cosine similarities (1 on the diagonal, larger = more alike).",
     lambda x: torch.cdist(x, x)),
    ("your function returns the cosine distance 1 - cos (0 on the diagonal); return the "
     "similarity cos itself, which is 1 on the diagonal.",
     lambda x: 1 - _cos_unit_rows(x) @ _cos_unit_rows(x).T),
]


def check_cosine_similarity(fn: Callable) -> bool:
    """Check ``fn(x)`` returns the (m, m) matrix of cos(x_i, x_j) of x's rows (Lesson 1, §4)."""
    _check_callable(fn)
    cases = _cosine_cases()
    outputs = []
    for (x,) in cases:
        m, d = x.shape
        result = _as_tensor(_call(fn, (x.clone(),), f"x of shape {(m, d)}"),
                            "the (m, m) tensor of cosine similarities")
        if tuple(result.shape) == (d, d):
            raise CheckFailed(
                f"your matrix has shape {(d, d)} for x of shape {(m, d)}: one entry per pair of "
                "features (columns). Compare the vectors, which are the rows: the result is "
                f"(m, m) = {(m, m)}, as x @ x.T is."
            )
        if tuple(result.shape) != (m, m):
            raise CheckFailed(
                f"your matrix has shape {tuple(result.shape)} for x of shape {(m, d)}; it should "
                f"be (m, m) = {(m, m)}, one entry per pair of rows."
            )
        outputs.append(result.double())
    references = [probes.cosine_similarity_matrix(x.double()) for (x,) in cases]
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, references, strict=True))
             if not _close(out, ref)]
    if not wrong:
        return _success("cosine similarity", fn, len(cases))
    doubled = [(x.double(),) for (x,) in cases]
    message = _diagnose(outputs, doubled, _COSINE_MISTAKES, _close, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    raise _differs(
        "matrix", "cos(x_i, x_j) = x_i·x_j / (|x_i| |x_j|)", outputs[i], references[i],
        f"x of shape {tuple(cases[i][0].shape)}",
        "compare it with encoderlab.probes.cosine_similarity_matrix.",
    )


# --- The labels of the two objectives (Lesson 1, §2) ---------------------------------------------

_MASK_ID = 103  # [MASK] in BERT's vocabulary; the learner's function never needs it


def _labels_reference(input_ids, objective, masked_positions):
    view = objectives.objective_view(input_ids, objective, masked_positions, _MASK_ID)
    return view.labels


def _only_for(objective: str, wrong_labels):
    """A mistake made under one objective; under the other the answer is the reference."""
    def labels(input_ids, obj, masked_positions):
        if obj != objective:
            return _labels_reference(input_ids, obj, masked_positions)
        return wrong_labels(input_ids, masked_positions)
    return labels


def _ignored_like(input_ids) -> torch.Tensor:
    return torch.full_like(input_ids, objectives.IGNORE_INDEX)


def _shift_right(ids, _masked):
    out = _ignored_like(ids)
    out[1:] = ids[:-1]  # position t labelled with x_{t-1}
    return out


def _own_token_from_1(ids, _masked):
    out = ids.clone()
    out[0] = objectives.IGNORE_INDEX  # labels = input_ids, the first one ignored
    return out


def _masked_at(ids, where):
    out = _ignored_like(ids)
    out[where] = ids[where]
    return out


def _masked_inverted(ids, masked):
    keep = torch.ones(len(ids), dtype=torch.bool)
    keep[list(masked)] = False
    return _masked_at(ids, keep)


def _masked_shifted(ids, masked):
    out = _ignored_like(ids)
    for p in masked:
        if p + 1 < len(ids):
            out[p] = ids[p + 1]
    return out


_LABEL_MISTAKES = [
    ("your next-token labels are the inputs themselves: position t is scored against its own "
     "token x_t, which it can see, so the model would learn to copy. Position t predicts the "
     "token after it: labels[:-1] = input_ids[1:], and -100 at the last position.",
     _only_for("next-token", lambda ids, _m: ids.clone())),
    ("you label position t with its own token x_t (labels = input_ids with the first ignored, "
     "the convention of libraries that shift inside the loss). Here labels[t] is what the "
     "prediction at t is scored against: x_{t+1}, so shift left, labels[:-1] = input_ids[1:].",
     _only_for("next-token", _own_token_from_1)),
    ("your next-token labels are shifted the wrong way: position t gets x_{t-1}, a token it has "
     "already seen. It must predict the one after it: labels[:-1] = input_ids[1:].",
     _only_for("next-token", _shift_right)),
    ("the last position gets x_0 as its label (torch.roll wraps around); nothing follows the "
     "last token, so its label is -100.",
     _only_for("next-token", lambda ids, _m: torch.roll(ids, -1))),
    ("under the masked objective only the masked positions carry a loss, but your labels cover "
     "every position: set -100 everywhere except masked_positions.",
     _only_for("masked", lambda ids, _m: ids.clone())),
    ("your masked-objective labels sit on the positions that were NOT masked, the wrong way "
     "round: the masked positions carry the loss, everything else is -100.",
     _only_for("masked", _masked_inverted)),
    ("your masked-objective labels are shifted by one (x_{t+1}): a masked position predicts its "
     "own original token, the one [MASK] replaced, so labels[p] = input_ids[p].",
     _only_for("masked", _masked_shifted)),
]


def _label_cases() -> list[tuple]:
    """(input_ids, objective, masked_positions): one sentence under both objectives, then random."""
    sentence = torch.tensor([101, 2057, 2018, 1037, 12695, 2006, 1996, 2924, 1997, 1996, 2314,
                             102])  # "[CLS] we had a picnic on the bank of the river [SEP]"
    cases = [(sentence, "next-token", ()), (sentence, "masked", (4, 7))]
    g = torch.Generator().manual_seed(2)
    for n in (3, 7, 10, 5):
        ids = torch.randperm(3000, generator=g)[:n] + 1000  # distinct ids: every shift shows
        k = max(1, round(0.3 * n))
        masked = tuple(sorted(torch.randperm(n, generator=g)[:k].tolist()))
        cases += [(ids, "next-token", ()), (ids, "masked", masked)]
    return cases


def _describe_labels_case(input_ids, objective, masked_positions) -> str:
    where = f", masked_positions={list(masked_positions)}" if objective == "masked" else ""
    return f"input_ids={input_ids.tolist()}, objective={objective!r}{where}"


def check_objective_labels(fn: Callable) -> bool:
    """Check ``fn(input_ids, objective, masked_positions)`` returns each position's label (§2).

    (Lesson 1, §2.) ``objective`` is "next-token" (position t predicts x_{t+1}) or "masked"
    (a masked position predicts its own original token); a position without a loss gets -100.
    """
    _check_callable(fn)
    cases = _label_cases()
    outputs = []
    for ids, objective, masked in cases:
        case = _describe_labels_case(ids, objective, masked)
        result = _as_tensor(_call(fn, (ids.clone(), objective, masked), case),
                            "a tensor of n labels, -100 where there is no loss")
        if tuple(result.shape) != (len(ids),):
            raise CheckFailed(
                f"your labels have shape {tuple(result.shape)} on {case}; return one label per "
                f"position, shape (n,) = {(len(ids),)}, with -100 where there is no loss."
            )
        if result.is_floating_point() and not bool((result == result.round()).all()):
            raise CheckFailed(f"your labels are not whole numbers (token ids) on {case}.")
        outputs.append(result.long())
    references = [_labels_reference(*case) for case in cases]
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, references, strict=True))
             if not torch.equal(out, ref)]
    if not wrong:
        return _success("objective labels", fn, len(cases))
    ignored = objectives.IGNORE_INDEX
    fills = {int(v) for out, ref in zip(outputs, references, strict=True)
             for v in out[ref == ignored].unique()}
    scored_right = all(torch.equal(out[ref != ignored], ref[ref != ignored])
                       for out, ref in zip(outputs, references, strict=True))
    if scored_right and len(fills) == 1 and fills != {ignored}:
        raise CheckFailed(
            f"your labels are right where there is a loss, but you mark the other positions "
            f"with {fills.pop()}: cross_entropy would score them against that as a token id. It "
            f"skips only the label {ignored} (its ignore_index), so use {ignored} there."
        )
    message = _diagnose(outputs, cases, _LABEL_MISTAKES, torch.equal, wrong)
    if message:
        raise CheckFailed(message)
    first = wrong[0]
    out, ref = outputs[first], references[first]
    t = int((out != ref).nonzero()[0])
    raise CheckFailed(
        f"your labels differ from the reference at position t={t} on "
        f"{_describe_labels_case(*cases[first])}: yours {int(out[t])}, the reference "
        f"{int(ref[t])} (-100 = no loss)."
    )


# --- Lesson 2 ---
# Two checkers for Lesson 2's exercises: greedy longest-match WordPiece for one word (§2), and
# framing a text or a pair with [CLS]/[SEP] and segment ids (§4).

from . import tokenizer as _tokenizer  # noqa: E402

__all__ += ["check_wordpiece", "check_build_inputs"]

# --- WordPiece for one word (Lesson 2, §2) -----------------------------------------------------

_UNK = _tokenizer.UNK

# A small vocabulary in which each usual mistake gives a different answer: "una" and "##ffa"
# beat "un" and "##aff" only under longest match, every letter of "unaffable" also exists alone,
# and a few pieces exist both with and without "##".
_WP_VOCAB = frozenset(
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
     "u", "un", "una", "a", "able", "ble", "f", "to", "token", "t", "k", "e", "n", "i", "s",
     "##n", "##a", "##aff", "##ffa", "##f", "##able", "##ble", "##b", "##l", "##e", "##s",
     "##o", "##k", "##en", "##ken", "##i", "##iz", "##ization", "##ation", "##at", "##ion",
     "##t", "##z", "##u", "##un"]
)  # fmt: skip


def _wordpiece_variant(word, vocab, *, longest=True, lookup_prefix="##", keep_prefix=True,
                       on_fail="unk", max_chars=100):
    """WordPiece with one switch turned: each non-default switch is a known mistake."""
    if max_chars is not None and len(word) > max_chars:
        return [_UNK]
    pieces, start = [], 0
    while start < len(word):
        ends = range(len(word), start, -1) if longest else range(start + 1, len(word) + 1)
        piece = None
        for end in ends:
            candidate = word[start:end] if start == 0 else lookup_prefix + word[start:end]
            if candidate in vocab:
                piece = candidate
                break
        if piece is None:
            if on_fail == "unk":
                return [_UNK]
            if on_fail == "partial":
                return pieces
            if on_fail == "char_unk":
                pieces.append(_UNK)
            start += 1  # "char_unk" and "skip" go on after the character
            continue
        if start > 0 and not keep_prefix:
            piece = piece.removeprefix(lookup_prefix)
        pieces.append(piece)
        start = end
    return pieces


_WORDPIECE_MISTAKES = [
    ("you take the shortest piece that is in the vocabulary; WordPiece is greedy longest-match: "
     "from each position try the longest remaining substring first and shorten it one "
     "character at a time until the vocabulary has it.",
     partial(_wordpiece_variant, longest=False)),
    ("you look up the pieces after the first without the '##' prefix: inside a word, the "
     "vocabulary stores continuations as '##' + piece, so look up '##' + word[start:end] "
     "whenever start > 0 (and return it with its '##').",
     partial(_wordpiece_variant, lookup_prefix="")),
    ("your pieces after the first lack their '##' prefix: you find '##' + piece in the "
     "vocabulary but return the piece without it; keep the '##', it is how a continuation is "
     "told apart from a word of its own.",
     partial(_wordpiece_variant, keep_prefix=False)),
    ("when no piece fits at some position you return the pieces found so far; the whole word "
     "must become ['[UNK]'] instead (no partial answer).",
     partial(_wordpiece_variant, on_fail="partial")),
    ("when no piece fits you put '[UNK]' for that one character and go on; the whole word must "
     "become ['[UNK]'], a single piece.",
     partial(_wordpiece_variant, on_fail="char_unk")),
    ("when no piece fits you skip the character and go on; the whole word must become "
     "['[UNK]'] instead.",
     partial(_wordpiece_variant, on_fail="skip")),
    ("a word longer than 100 characters must be ['[UNK]'] without trying to split it, but yours "
     "splits it: check len(word) > 100 first.",
     partial(_wordpiece_variant, max_chars=None)),
    ("a word of exactly 100 characters is still split; only words longer than 100 characters "
     "(len(word) > 100) are ['[UNK]'] at once.",
     partial(_wordpiece_variant, max_chars=99)),
]


def _wordpiece_cases() -> list[tuple]:
    """(word, vocab) cases: chosen words first, then random words over the vocabulary's pieces."""
    chosen = [
        "unaffable",  # longest: una ##ffa ##ble; shortest: u ##n ##a ##f ##f ##a ##b ##l ##e
        "tokenization",  # token ##ization
        "tokens",
        "a",
        "unxable",  # 'x' is nowhere in the vocabulary: the whole word is [UNK]
        "unaffablex",
        "xun",  # nothing fits at the very start
        "un" + "a" * 98,  # 100 characters: still split
        "un" + "a" * 99,  # 101 characters: [UNK] at once
    ]
    g = torch.Generator().manual_seed(2)
    starts = sorted(p for p in _WP_VOCAB if not p.startswith("[") and not p.startswith("##"))
    continues = sorted(p[2:] for p in _WP_VOCAB if p.startswith("##"))
    randoms = []
    for _ in range(12):
        parts = [starts[int(torch.randint(len(starts), (1,), generator=g))]]
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            parts.append(continues[int(torch.randint(len(continues), (1,), generator=g))])
        if float(torch.rand(1, generator=g)) < 0.25:  # a letter the vocabulary lacks
            parts.insert(int(torch.randint(1, len(parts) + 1, (1,), generator=g)), "q")
        randoms.append("".join(parts))
    return [(word, set(_WP_VOCAB)) for word in chosen + randoms]


def _short_word(word: str) -> str:
    return repr(word) if len(word) <= 30 else f"{word[:12]!r}… ({len(word)} characters)"


def _pieces_of(result, word: str) -> list[str]:
    """The learner's answer as a list of str, or a CheckFailed saying what to return."""
    if isinstance(result, str):
        raise CheckFailed(
            f"your function returned the str {result!r} for the word {_short_word(word)}; return "
            f"a list of pieces, e.g. ['token', '##ization'], and ['{_UNK}'] for an unknown word."
        )
    if not isinstance(result, (list, tuple)):
        raise CheckFailed(
            f"your function returned a {type(result).__name__} for the word {_short_word(word)}; "
            "return a list of str pieces."
        )
    if not all(isinstance(p, str) for p in result):
        raise CheckFailed(
            f"your function returned {list(result)[:6]} for the word {_short_word(word)}: the "
            "pieces must be strings such as '##ization', not ids."
        )
    return list(result)


def check_wordpiece(fn: Callable) -> bool:
    """Check ``fn(word, vocab)``, greedy longest-match WordPiece for one word (Lesson 2, §2).

    ``vocab`` is a set of str (``piece in vocab`` is all a solution needs). The answer is a list
    of pieces, ``##`` on every piece after the first, or ``['[UNK]']`` when the word cannot be
    split or has more than 100 characters.
    """
    _check_callable(fn)
    cases = _wordpiece_cases()
    outputs = [
        _pieces_of(_call(fn, (word, vocab), f"the word {_short_word(word)}"), word)
        for word, vocab in cases
    ]
    references = [_tokenizer.wordpiece(word, vocab) for word, vocab in cases]
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, references, strict=True)) if out != ref]
    if not wrong:
        return _success("WordPiece", fn, len(cases))
    message = _diagnose(outputs, cases, _WORDPIECE_MISTAKES, lambda a, b: a == b, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    raise CheckFailed(
        f"for the word {_short_word(cases[i][0])} your pieces are {outputs[i]}, but greedy "
        f"longest-match gives {references[i]}; compare your loop with "
        "encoderlab.tokenizer.wordpiece_trace, which records every lookup."
    )


# --- [CLS] A [SEP] B [SEP] and the segment ids (Lesson 2, §4) ---------------------------------

_CLS_ID, _SEP_ID = 101, 102  # BERT's ids, which the exercise gives the learner


def _bert_layout_tokenizer():
    """A tokenizer whose special tokens have BERT's ids: [PAD] 0, [UNK] 100, [CLS] 101, ..."""
    unused = [f"[unused{i}]" for i in range(99)]  # ids 1..99, as in BERT's vocab.txt
    tokens = ["[PAD]", *unused, "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return _tokenizer.WordPieceTokenizer(tokens)


def _framed(a, b=None, *, cls=True, middle_sep=True, final_sep=True, first_sep_segment=0,
            last_sep_segment=1, offset=0, cls_id=_CLS_ID, sep_id=_SEP_ID):
    """[CLS] A [SEP] (B [SEP]) with one switch turned: each non-default switch is a mistake."""
    ids, types = ([cls_id], [0]) if cls else ([], [])
    ids, types = ids + list(a), types + [0] * len(a)
    if b is None:
        if final_sep:
            ids, types = ids + [sep_id], types + [0]
        return ids, [t + offset for t in types]
    if middle_sep:
        ids, types = ids + [sep_id], types + [first_sep_segment]
    ids, types = ids + list(b), types + [1] * len(b)
    if final_sep:
        ids, types = ids + [sep_id], types + [last_sep_segment]
    return ids, [t + offset for t in types]


_BUILD_MISTAKES = [
    ("your sequence does not start with [CLS] (id 101); every input, one text or a pair, "
     "begins with it: [CLS] A [SEP] or [CLS] A [SEP] B [SEP].",
     partial(_framed, cls=False)),
    ("your pair has no [SEP] between the two texts: [CLS] A [SEP] B [SEP], a [SEP] after each "
     "text.",
     partial(_framed, middle_sep=False)),
    ("your sequence does not end with [SEP] (id 102): one text is [CLS] A [SEP], a pair "
     "[CLS] A [SEP] B [SEP].",
     partial(_framed, final_sep=False)),
    ("[CLS] and [SEP] are swapped: [CLS] is id 101 and goes first, [SEP] is id 102 and closes "
     "each text.",
     partial(_framed, cls_id=_SEP_ID, sep_id=_CLS_ID)),
    ("the first [SEP] is in segment 1 in your answer; it closes text A, so it belongs to "
     "segment 0: s_i = 0 from [CLS] up to and including the first [SEP].",
     partial(_framed, first_sep_segment=1)),
    ("the last [SEP] is in segment 0 in your answer; it closes text B, so it belongs to "
     "segment 1: s_i = 1 for B and its [SEP].",
     partial(_framed, last_sep_segment=0)),
    ("your segment ids are 1 and 2; they are 0 for the first text (with [CLS] and its [SEP]) and "
     "1 for the second: the segment embedding table has 2 rows, indexed 0 and 1.",
     partial(_framed, offset=1)),
]


def _build_cases() -> list[tuple]:
    """(ids_a, ids_b) cases with ids that are not special: single texts, pairs, empty texts."""
    g = torch.Generator().manual_seed(3)
    cases = [
        ([2023, 2003, 2019], None),
        ([7592, 1010, 2088], [2129, 2024, 2017, 1029]),
        ([2498], [3042]),
        ([], None),
        ([], [2054, 2003]),
        ([1996, 2924], []),
    ]
    for with_pair in (False, True, True, False, True):
        n_a, n_b = (int(x) for x in torch.randint(1, 9, (2,), generator=g))
        a = torch.randint(1000, 30000, (n_a,), generator=g).tolist()
        b = torch.randint(1000, 30000, (n_b,), generator=g).tolist() if with_pair else None
        cases.append((a, b))
    return cases


def _int_list(value, what: str, case: str) -> list[int]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise CheckFailed(
            f"{what} must be a list of ints (on {case}), got {_tokenizer._short_repr(value)}."
        )
    return list(value)


def _describe_build(a, b) -> str:
    return f"ids_a={a}" + ("" if b is None else f", ids_b={b}")


def check_build_inputs(fn: Callable) -> bool:
    """Check ``fn(ids_a, ids_b=None)`` -> ``(input_ids, token_type_ids)`` (Lesson 2, §4).

    One text: ``[CLS] A [SEP]``, every s_i = 0. A pair: ``[CLS] A [SEP] B [SEP]``, s_i = 0 up to
    and including the first [SEP], 1 after it. [CLS] is 101 and [SEP] 102, as in BERT.
    """
    _check_callable(fn)
    cases = _build_cases()
    outputs = []
    for a, b in cases:
        case = _describe_build(a, b)
        args = (list(a),) if b is None else (list(a), list(b))
        result = _call(fn, args, case)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise CheckFailed(
                f"your function returned {_tokenizer._short_repr(result)} on {case}; return a "
                "pair (input_ids, token_type_ids), two lists of the same length."
            )
        ids = _int_list(result[0], "input_ids", case)
        types = _int_list(result[1], "token_type_ids", case)
        if set(ids) <= {0, 1} and _CLS_ID in types:
            raise CheckFailed(
                "your function returns (token_type_ids, input_ids); return them the other way "
                "round: (input_ids, token_type_ids)."
            )
        if len(ids) != len(types):
            raise CheckFailed(
                f"your input_ids has {len(ids)} entries but token_type_ids {len(types)} on "
                f"{case}; there is one segment id per token, [CLS] and [SEP] included."
            )
        outputs.append((ids, types))
    reference = _bert_layout_tokenizer()
    references = [tuple(reference.build_inputs(list(a), None if b is None else list(b)))
                  for a, b in cases]
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, references, strict=True)) if out != ref]
    if not wrong:
        return _success("[CLS]/[SEP] framing and segment ids", fn, len(cases))
    message = _diagnose(outputs, cases, _BUILD_MISTAKES, lambda x, y: tuple(x) == tuple(y), wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    (ids, types), (ref_ids, ref_types) = outputs[i], references[i]
    what = "input_ids" if ids != ref_ids else "token_type_ids"
    raise CheckFailed(
        f"on {_describe_build(*cases[i])} your {what} is {ids if ids != ref_ids else types}, but "
        f"it should be {ref_ids if ids != ref_ids else ref_types} ([CLS] = 101, [SEP] = 102)."
    )


# --- Lesson 4 ---
# Two checkers for Lesson 4's exercises: the parameter count of an encoder from its config (§5)
# and LayerNorm over the last axis (§2).

from dataclasses import replace as _replace  # noqa: E402
from numbers import Integral as _Integral  # noqa: E402

from . import inspect_stack as _inspect_stack  # noqa: E402
from .encoder import EncoderConfig as _EncoderConfig  # noqa: E402
from .encoder import count_parameters as _count_parameters  # noqa: E402

__all__ += ["check_parameter_count", "check_layer_norm"]

# --- The parameter count (Lesson 4, §5) ------------------------------------------------------


def _count_variant(
    c, *, biases=True, layer_norm=2, positions=True, segments=True, attention_matrices=4,
    times_heads=False, d_ff=None, pooler="config", final_norm="config", blocks="L",
    embeddings=True, mlp_matrices=2,
):
    """The parameter count with one switch turned: each non-default switch is a known mistake."""
    d, V, L, h = c.d_model, c.vocab_size, c.n_layers, c.n_heads
    f = c.d_ff if d_ff is None else d_ff(c)
    bias = 1 if biases else 0
    ln = layer_norm * d  # one LayerNorm: gain and bias, 2d
    emb = V * d + (c.n_max * d if positions else 0) + (c.n_segments * d if segments else 0) + ln
    attention = attention_matrices * (d * d + bias * d) * (h if times_heads else 1)
    mlp = (d * f + bias * f) + ((f * d + bias * d) if mlp_matrices == 2 else 0)
    block = attention + mlp + 2 * ln
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
    ("you left out the biases: every nn.Linear (W_Q, W_K, W_V, W_O, both MLP layers, the pooler) "
     "also has a bias vector of its output width.",
     partial(_count_variant, biases=False)),
    ("you left out the LayerNorms: each has a gain and a bias of d numbers, one after the "
     "embeddings and two in every block (plus a final one in a pre-LN stack).",
     partial(_count_variant, layer_norm=0)),
    ("you count d parameters per LayerNorm, but each has two vectors of d: a gain and a bias.",
     partial(_count_variant, layer_norm=1)),
    ("you left out the position embeddings, a learned table of n_max x d.",
     partial(_count_variant, positions=False)),
    ("you left out the segment embeddings, a table of n_segments x d (s_i in {0, 1}).",
     partial(_count_variant, segments=False)),
    ("you left out the position and segment embeddings: the input H^(0) adds three tables "
     "(token V x d, position n_max x d, segment n_segments x d).",
     partial(_count_variant, positions=False, segments=False)),
    ("you count only the token embeddings' table and the blocks' weights, not the embedding "
     "side's other parameters (position and segment tables, embedding LayerNorm).",
     partial(_count_variant, positions=False, segments=False, layer_norm=0)),
    ("you count three attention matrices (W_Q, W_K, W_V); there is a fourth, W_O, which mixes "
     "the concatenated heads, d x d with its bias.",
     partial(_count_variant, attention_matrices=3)),
    ("you multiply the attention parameters by the number of heads, but the h heads share the "
     "d x d matrices: each head owns d_k = d / h of their columns, so W_Q, W_K, W_V, W_O are "
     "d x d in total.",
     partial(_count_variant, times_heads=True)),
    ("you assume the MLP is 4d wide; use config.d_ff, which need not be 4 * d_model.",
     partial(_count_variant, d_ff=lambda c: 4 * c.d_model)),
    ("your MLP has one matrix; it has two: up (d -> d_ff) and down (d_ff -> d), each with "
     "a bias.",
     partial(_count_variant, mlp_matrices=1)),
    ("you forgot the pooler (d x d plus a bias) when config.pooler is True.",
     partial(_count_variant, pooler=False)),
    ("you count a pooler even when config.pooler is False.",
     partial(_count_variant, pooler=True)),
    ("you forgot the final LayerNorm (2d) that a pre-LN stack (config.norm == 'pre') adds "
     "after its last block.",
     partial(_count_variant, final_norm=False)),
    ("you add a final LayerNorm for a post-LN stack too; only pre-LN stacks have one "
     "(config.norm == 'pre').",
     partial(_count_variant, final_norm=True)),
    ("you count one block; the stack has config.n_layers of them, each with its own weights.",
     partial(_count_variant, blocks="one")),
    ("you count only the blocks (and pooler); the embeddings hold parameters too, often the "
     "largest part (the token table alone is V x d).",
     partial(_count_variant, embeddings=False)),
]


def _count_cases() -> list[tuple]:
    """(config,) cases: MiniLM, BERT-base, pre-LN, no pooler, d_ff != 4d, one segment, ..."""
    minilm = _EncoderConfig()
    bert_base = _EncoderConfig(d_model=768, n_heads=12, n_layers=12, d_ff=3072)
    tiny = _EncoderConfig(vocab_size=100, d_model=16, n_heads=2, n_layers=2, d_ff=64, n_max=32)
    return [
        (minilm,),
        (bert_base,),
        (_replace(tiny, norm="pre"),),
        (_replace(tiny, pooler=False),),
        (_replace(tiny, d_ff=40, n_heads=4, n_layers=3),),
        (_replace(tiny, norm="pre", pooler=False, n_segments=1, n_max=7),),
        (_EncoderConfig(vocab_size=1000, d_model=48, n_heads=3, n_layers=5, d_ff=100, n_max=64,
                        n_segments=3),),
    ]


def _describe_config(c) -> str:
    return (f"EncoderConfig(vocab_size={c.vocab_size}, d_model={c.d_model}, n_heads={c.n_heads}, "
            f"n_layers={c.n_layers}, d_ff={c.d_ff}, n_max={c.n_max}, n_segments={c.n_segments}, "
            f"norm={c.norm!r}, pooler={c.pooler})")


def _as_count(value, case: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, (_Integral, float)):
        raise CheckFailed(
            f"your function returned a {type(value).__name__} on {case}; return the count as "
            "an int."
        )
    if isinstance(value, float) and not value.is_integer():
        raise CheckFailed(
            f"your function returned {value} on {case}, which is not a whole number: a "
            "parameter count is an int (use // for any division, e.g. d_k = d // h)."
        )
    return int(value)


def check_parameter_count(fn: Callable) -> bool:
    """Check ``fn(config) -> int``, the parameter count of ``EncoderModel(config)`` (Lesson 4, §5).

    The cases include MiniLM, BERT-base, pre-LN stacks, stacks without a pooler and an MLP that
    is not 4d wide; the usual omissions (biases, LayerNorms, position or segment tables, W_O, ...)
    are named.
    """
    _check_callable(fn)
    cases = _count_cases()
    outputs = [
        _as_count(_call(fn, (c,), _describe_config(c)), _describe_config(c)) for (c,) in cases
    ]
    references = [_count_parameters(c) for (c,) in cases]
    wrong = [i for i, (mine, ref) in enumerate(zip(outputs, references, strict=True))
             if mine != ref]
    if not wrong:
        return _success("parameter count", fn, len(cases))
    message = _diagnose(outputs, cases, _COUNT_MISTAKES, lambda a, b: a == b, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    (config,) = cases[i]
    difference = references[i] - outputs[i]
    parts = _inspect_stack.parameter_breakdown(config)
    same_size = [name for name, size in parts.items() if size == abs(difference)]
    hint = (f" That is exactly the size of the {same_size[0]} part, which you "
            f"{'left out' if difference > 0 else 'counted twice'}." if same_size else "")
    raise CheckFailed(
        f"your count is {outputs[i]:,} but EncoderModel has {references[i]:,} parameters for "
        f"{_describe_config(config)}: {'short' if difference > 0 else 'over'} by "
        f"{abs(difference):,}.{hint} Compare part by part with "
        "encoderlab.inspect_stack.parameter_breakdown(config)."
    )


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
    return y  # "none"


_LAYER_NORM_MISTAKES = [
    ("you normalise over the sequence axis (dim=-2); LayerNorm normalises each token's vector "
     "on its own, over the last axis (dim=-1, the d features).",
     partial(_layer_norm_variant, dims=(-2,))),
    ("you normalise over the first axis (dim=0); LayerNorm normalises each token's vector on its "
     "own, over the last axis (dim=-1, the d features).",
     partial(_layer_norm_variant, dims=(0,))),
    ("you normalise with one mean and variance for the whole tensor; LayerNorm takes them per "
     "token, over the last axis only (dim=-1, keepdim=True).",
     lambda x, gain, bias, eps: _layer_norm_variant(x, gain, bias, eps,
                                                    dims=tuple(range(x.dim())))),
    ("your variance is the unbiased one (divided by d - 1, torch.var's default); LayerNorm "
     "divides by d: x.var(dim=-1, unbiased=False) or ((x - mean) ** 2).mean(dim=-1).",
     partial(_layer_norm_variant, correction=1)),
    ("you leave eps out: a token whose d values are all equal has variance 0 and gives 0/0 = "
     "NaN, and small-variance tokens blow up. Divide by sqrt(var + eps).",
     partial(_layer_norm_variant, eps_where="none")),
    ("you add eps outside the square root, sqrt(var) + eps; LayerNorm uses sqrt(var + eps) "
     "(it matters for tokens of small variance).",
     partial(_layer_norm_variant, eps_where="outside")),
    ("you divide by the variance; divide by the standard deviation, sqrt(var + eps).",
     partial(_layer_norm_variant, power=1.0)),
    ("you never subtract the mean; LayerNorm centres each token's vector first: x - x.mean(-1).",
     partial(_layer_norm_variant, center="scale_only")),
    ("that is RMSNorm (x / sqrt(mean(x**2) + eps), used by many later models), not LayerNorm: "
     "subtract the mean and divide by the standard deviation.",
     partial(_layer_norm_variant, center="rms")),
    ("you return the normalised vector without the learned gain and bias: multiply by gain and "
     "add bias at the end.",
     partial(_layer_norm_variant, affine="none")),
    ("you swapped gain and bias: the output is normalised * gain + bias.",
     partial(_layer_norm_variant, affine="swapped")),
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


def _describe_layer_norm(x, gain, bias, eps) -> str:
    return f"x {tuple(x.shape)}, gain and bias ({gain.shape[0]},), eps={eps:g}"


def check_layer_norm(fn: Callable) -> bool:
    """Check ``fn(x, gain, bias, eps)``, LayerNorm over the last axis of ``x`` (Lesson 4, §2).

    The reference is ``torch.nn.functional.layer_norm(x, (d,), gain, bias, eps)``: the mean and
    the biased variance of each token's d values, ``(x - mean) / sqrt(var + eps) * gain + bias``.
    """
    _check_callable(fn)
    cases = _layer_norm_cases()
    outputs = []
    for x, gain, bias, eps in cases:
        case = _describe_layer_norm(x, gain, bias, eps)
        result = _call(fn, (x.clone(), gain.clone(), bias.clone(), eps), case)
        out = _as_tensor(result, "the normalised tensor, with the shape of x")
        if tuple(out.shape) != tuple(x.shape):
            raise CheckFailed(
                f"your output has shape {tuple(out.shape)} but x has shape {tuple(x.shape)} (on "
                f"{case}); LayerNorm keeps the shape: keep the reduced axis with keepdim=True."
            )
        outputs.append(out.double())
    references = [
        torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), gain.double(), bias.double(),
                                       eps)
        for x, gain, bias, eps in cases
    ]
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, references, strict=True))
             if not _close(out, ref)]
    if not wrong:
        return _success("LayerNorm", fn, len(cases))
    message = _diagnose(outputs, cases, _LAYER_NORM_MISTAKES, _close, wrong)
    if message:
        raise CheckFailed(message)
    with_nan = [i for i in wrong if torch.isnan(outputs[i]).any()]
    if with_nan:
        raise CheckFailed(
            f"your output has NaN on {_describe_layer_norm(*cases[with_nan[0]])}, where the "
            "reference has none: a token of constant values has variance 0; add eps inside the "
            "square root."
        )
    i = wrong[0]
    raise _differs(
        "output", "(x - mean) / sqrt(var + eps) * gain + bias", outputs[i], references[i],
        _describe_layer_norm(*cases[i]),
        "compare it step by step with torch.nn.functional.layer_norm(x, (d,), gain, bias, eps).",
    )


# --- Lesson 9 ---
# A checker for Lesson 9's exercise: the online softmax, accumulated over chunks of keys (§2).

__all__ += ["check_online_softmax"]


def _online_variant(s, v, chunk_size, *, rescale=True, sign=1.0, track_max=True,
                    per_chunk=False):
    """softmax(s) v accumulated chunk by chunk, with one of the usual slips switched on."""
    s, v = s.float(), v.float()  # float32, as the learner's tensors: exp overflows above ~88
    n_kv = s.shape[-1]
    chunks = range(0, n_kv, chunk_size)
    if per_chunk:  # each chunk normalised on its own, then the chunk outputs averaged
        parts = [torch.softmax(s[..., c:c + chunk_size], dim=-1) @ v[..., c:c + chunk_size, :]
                 for c in chunks]
        return sum(parts) / len(parts)
    m = s.new_full((*s.shape[:-1], 1), float("-inf") if track_max else 0.0)  # (..., n_q, 1)
    l_sum = s.new_zeros((*s.shape[:-1], 1))  # (..., n_q, 1)
    acc = s.new_zeros((*s.shape[:-1], v.shape[-1]))  # (..., n_q, d_v)
    for c in chunks:
        tile = s[..., c:c + chunk_size]  # (..., n_q, chunk)
        m_new = torch.maximum(m, tile.amax(dim=-1, keepdim=True)) if track_max else m
        p = torch.exp(tile - m_new)  # (..., n_q, chunk)
        alpha = torch.exp(sign * (m - m_new)) if rescale else torch.ones_like(m)
        l_sum = l_sum * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[..., c:c + chunk_size, :]
        m = m_new
    return acc / l_sum


_ONLINE_MISTAKES = [
    ("your running sums are not rescaled when the max grows: multiply the old denominator l and "
     "the old numerator by exp(m_old - m_new) before adding the new chunk, or the terms summed "
     "earlier stay measured against an old max.",
     partial(_online_variant, rescale=False)),
    ("you rescale by exp(m_new - m_old), the wrong sign: the old sums were computed with "
     "exp(s - m_old) and must become exp(s - m_new), so multiply them by exp(m_old - m_new) <= 1.",
     partial(_online_variant, sign=-1.0)),
    ("you normalise each chunk on its own and combine the chunk outputs: a chunk's softmax "
     "ignores the other chunks' scores; carry the running max m and denominator l across "
     "chunks and divide once, at the end.",
     partial(_online_variant, per_chunk=True)),
    ("you do not subtract a running max: exp(s) overflows to inf for scores above ~88 in "
     "float32 and the output becomes NaN; keep m = max of the scores seen so far and "
     "exponentiate s - m.",
     partial(_online_variant, track_max=False)),
]


def _online_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(9)
    cases = []
    # (n_q, n_kv, d_v, chunk, score scale): a readable case, a chunk that does not divide n_kv,
    # growing maxima, one chunk only, and large scores that overflow exp without the max.
    for n_q, n_kv, d_v, chunk, scale in [(3, 8, 2, 4, 1.0), (4, 10, 3, 3, 3.0),
                                         (2, 12, 4, 2, 5.0), (5, 6, 3, 8, 1.0),
                                         (3, 9, 2, 4, 100.0)]:
        s = torch.randn(n_q, n_kv, generator=g) * scale
        if scale == 3.0:
            s = s + torch.arange(n_kv) * 0.7  # later chunks hold larger scores: the max grows
        v = torch.randn(n_kv, d_v, generator=g)
        cases.append((s, v, chunk))
    return cases


def _describe_online(s, v, chunk_size) -> str:
    return f"scores {tuple(s.shape)}, values {tuple(v.shape)}, chunk_size={chunk_size}"


def check_online_softmax(fn: Callable) -> bool:
    """Check ``fn(s, v, chunk_size)`` = softmax(s) v, accumulated over chunks of keys
    (Lesson 9, §2). ``s`` is (n_q, n_kv) scores, ``v`` is (n_kv, d_v) values."""
    _check_callable(fn)
    cases = _online_cases()
    outputs = []
    for s, v, chunk in cases:
        case = _describe_online(s, v, chunk)
        out = _as_tensor(_call(fn, (s.clone(), v.clone(), chunk), case),
                         "the (n_q, d_v) output")
        if tuple(out.shape) != (s.shape[0], v.shape[1]):
            raise CheckFailed(f"your output has shape {tuple(out.shape)} on {case}; expected "
                              f"(n_q, d_v) = {(s.shape[0], v.shape[1])}.")
        outputs.append(out.double())
    references = [(torch.softmax(s.double(), dim=-1) @ v.double()) for s, v, _ in cases]
    wrong = [i for i, (out, ref) in enumerate(zip(outputs, references, strict=True))
             if not _close(out, ref)]
    if not wrong:
        return _success("online softmax", fn, len(cases))
    message = _diagnose(outputs, cases, _ONLINE_MISTAKES, _close, wrong)
    if message:
        raise CheckFailed(message)
    if any(not torch.isfinite(outputs[i]).all() for i in wrong):
        raise CheckFailed(
            f"your output has inf or NaN on {_describe_online(*cases[wrong[0]])}: subtract the "
            "running max before exponentiating, and divide by l only once, at the end."
        )
    i = wrong[0]
    raise _differs(
        "output", "softmax(s) v", outputs[i], references[i], _describe_online(*cases[i]),
        "print m, l and the output after each chunk and compare them with the dense softmax "
        "of the keys seen so far.",
    )


# --- Lesson 10 ---
# The checker for Lesson 10's prefix-LM exercise: bidirectional over the prefix, causal after.

__all__ += ["check_prefix_lm_mask"]


def _prefix_rows_see_all(n: int, p: int) -> torch.Tensor:
    m = masks.prefix_lm(n, p)
    m[:p, :] = True  # the prefix's queries also read the target positions
    return m


_PREFIX_LM_MISTAKES = [
    ("your mask is causal inside the prefix too: the prefix is the input, fully known, so its "
     "positions attend to each other in both directions (set every column j < prefix_len to True).",
     lambda n, p: masks.causal(n)),
    ("your mask lets every query see every key: after the prefix the model is writing, and a "
     "position there must not see the positions after it (keep j <= i for i >= prefix_len).",
     lambda n, p: torch.ones(n, n, dtype=torch.bool)),
    ("your prefix is one position too long: exactly the first prefix_len columns are visible to "
     "everyone (columns 0 .. prefix_len - 1), not prefix_len + 1 of them.",
     lambda n, p: masks.prefix_lm(n, min(p + 1, n))),
    ("your prefix is one position too short: the first prefix_len columns (0 .. prefix_len - 1) "
     "are all visible to everyone, the last of them included.",
     lambda n, p: masks.prefix_lm(n, max(p - 1, 0))),
    ("your prefix queries see the positions after the prefix: the input must not read the answer "
     "being written, so rows i < prefix_len see only the prefix columns.",
     _prefix_rows_see_all),
]


def check_prefix_lm_mask(fn: Callable) -> bool:
    """Check ``fn(n, prefix_len)`` returns the (n, n) boolean prefix-LM mask (Lesson 10, §3)."""
    _check_callable(fn)
    cases = [(6, 3), (8, 5), (5, 1), (7, 6), (9, 4), (4, 0), (4, 4), (1, 1)]
    outputs = []
    for n, p in cases:
        case = f"n = {n}, prefix_len = {p}"
        m = _as_tensor(_call(fn, (n, p), case), "a boolean tensor of shape (n, n)").cpu()
        outputs.append(m)
    _check_bool_masks(outputs)
    for m, (n, p) in zip(outputs, cases, strict=True):
        if tuple(m.shape) != (n, n):
            raise CheckFailed(
                f"your mask has shape {tuple(m.shape)} for n = {n}, prefix_len = {p}; the "
                f"prefix-LM mask is one sequence attending to itself: (n, n) = {(n, n)}."
            )
    wrong = [i for i, (m, (n, p)) in enumerate(zip(outputs, cases, strict=True))
             if not torch.equal(m, masks.prefix_lm(n, p))]
    if not wrong:
        return _success("prefix-LM mask", fn, len(cases))
    message = _diagnose(outputs, cases, _PREFIX_LM_MISTAKES, torch.equal, wrong)
    n, p = cases[wrong[0]]
    raise CheckFailed(message or _mask_difference(
        outputs[wrong[0]], masks.prefix_lm(n, p), f"n = {n}, prefix_len = {p}"
    ))

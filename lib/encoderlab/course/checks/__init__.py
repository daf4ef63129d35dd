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

from encoderlab import masks
from encoderlab.attention import scaled_dot_product_attention

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

from encoderlab import objectives  # noqa: E402
from encoderlab.lessons import l01_probes as probes  # noqa: E402

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
        "compare it with encoderlab.lessons.l01_probes.cosine_similarity_matrix.",
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

from encoderlab import tokenizer as _tokenizer  # noqa: E402

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

from encoderlab.encoder import EncoderConfig as _EncoderConfig  # noqa: E402
from encoderlab.encoder import count_parameters as _count_parameters  # noqa: E402
from encoderlab.lessons import l04_inspect_stack as _inspect_stack  # noqa: E402

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
    # pieces smaller than a part (some of the biases, the gains, ...), on every wrong case
    pieces = [name for name, size in _count_pieces(cases[wrong[0]][0])
              if all(abs(references[k] - outputs[k]) == dict(_count_pieces(cases[k][0]))[name]
                     for k in wrong)]
    if pieces:
        also = f" (or the {same_size[0]} part)" if same_size else ""
        hint = (f" On every case checked, that is exactly {pieces[0]}{also}, which you "
                f"{'left out' if difference > 0 else 'counted twice'}.")
    raise CheckFailed(
        f"your count is {outputs[i]:,} but EncoderModel has {references[i]:,} parameters for "
        f"{_describe_config(config)}: {'short' if difference > 0 else 'over'} by "
        f"{abs(difference):,}.{hint} Compare part by part with "
        "encoderlab.lessons.l04_inspect_stack.parameter_breakdown(config)."
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
    if affine == "bias_only":
        return y + bias.double()
    if affine == "gain_only":
        return y * gain.double()
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
    ("you add the bias but never use the gain: multiply the normalised vector by gain, then "
     "add bias (normalised * gain + bias).",
     partial(_layer_norm_variant, affine="bias_only")),
    ("you multiply by the gain but never add the bias: the output is normalised * gain + bias.",
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
                    per_chunk=False, rescale_l=True, rescale_acc=True, chunk_max=False,
                    divide=True, drop_last=False):
    """softmax(s) v accumulated chunk by chunk, with one of the usual slips switched on."""
    s, v = s.float(), v.float()  # float32, as the learner's tensors: exp overflows above ~88
    n_kv = s.shape[-1]
    chunks = range(0, n_kv, chunk_size)
    if drop_last:  # a loop that stops at the last whole chunk: a short last chunk is lost
        chunks = range(0, n_kv - chunk_size + 1, chunk_size)
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
        if chunk_max:  # each chunk exponentiated against its own max, sums never re-measured
            p = torch.exp(tile - tile.amax(dim=-1, keepdim=True))  # (..., n_q, chunk)
            alpha = torch.ones_like(m)
        else:
            p = torch.exp(tile - m_new)  # (..., n_q, chunk)
            alpha = torch.exp(sign * (m - m_new)) if rescale else torch.ones_like(m)
        l_sum = l_sum * (alpha if rescale_l else 1.0) + p.sum(dim=-1, keepdim=True)
        acc = acc * (alpha if rescale_acc else 1.0) + p @ v[..., c:c + chunk_size, :]
        m = m_new
    return acc / l_sum if divide else acc


_ONLINE_MISTAKES = [
    ("your running sums are not rescaled when the max grows: multiply the old denominator l and "
     "the old numerator by exp(m_old - m_new) before adding the new chunk, or the terms summed "
     "earlier stay measured against an old max.",
     partial(_online_variant, rescale=False)),
    ("you rescale the running denominator l but not the running numerator: when the max grows, "
     "multiply the old numerator by exp(m_old - m_new) too, before adding the new chunk's "
     "p @ v, or its old terms stay measured against the old max.",
     partial(_online_variant, rescale_acc=False)),
    ("you rescale the running numerator but not the running denominator l: when the max grows, "
     "multiply the old l by exp(m_old - m_new) too, before adding the new chunk's sum, or its "
     "old terms stay measured against the old max.",
     partial(_online_variant, rescale_l=False)),
    ("you subtract each chunk's own max and add the chunks up as they are: terms measured "
     "against different maxima cannot be added; keep one running max m over all chunks seen, "
     "exponentiate s - m_new, and re-measure the old sums by exp(m_old - m_new).",
     partial(_online_variant, chunk_max=True)),
    ("you rescale by exp(m_new - m_old), the wrong sign: the old sums were computed with "
     "exp(s - m_old) and must become exp(s - m_new), so multiply them by exp(m_old - m_new) <= 1.",
     partial(_online_variant, sign=-1.0)),
    ("you return the running numerator without dividing it by the running denominator l: "
     "after the last chunk, the output is acc / l.",
     partial(_online_variant, divide=False)),
    ("your loop skips the last chunk when it is shorter than chunk_size (n_kv is not always a "
     "multiple of chunk_size): loop over range(0, n_kv, chunk_size) and slice "
     "s[:, c:c + chunk_size], which is shorter for the last chunk.",
     partial(_online_variant, drop_last=True)),
    ("you normalise each chunk on its own and combine the chunk outputs: a chunk's softmax "
     "ignores the other chunks' scores; carry the running max m and denominator l across "
     "chunks and divide once, at the end.",
     partial(_online_variant, per_chunk=True)),
    ("you do not subtract a running max: exp(s) overflows to inf for scores above ~88 in "
     "float32 and the output becomes NaN; keep m = max of the scores seen so far and "
     "exponentiate s - m.",
     partial(_online_variant, track_max=False)),
]


# What the learner may do to the scores s without reading their values, and the operations that
# only select or re-lay entries (so the result holds some of s's key columns, unchanged).
_METADATA_OPS = frozenset({
    "shape", "size", "dim", "ndim", "ndimension", "dtype", "device", "layout", "__len__",
    "numel", "nelement", "is_floating_point", "is_complex", "is_contiguous", "stride",
    "element_size", "get_device", "is_cuda", "requires_grad", "storage_offset", "data_ptr",
    "new_full", "new_zeros", "new_ones", "new_empty", "new_tensor", "zeros_like", "ones_like",
    "full_like", "empty_like", "__repr__", "__format__", "__str__",
})
_SELECTING_OPS = frozenset({
    "__getitem__", "split", "tensor_split", "chunk", "unbind", "narrow", "select", "transpose",
    "swapaxes", "t", "T", "mT", "permute", "movedim", "view", "view_as", "reshape", "reshape_as",
    "flatten", "unsqueeze", "squeeze", "contiguous", "clone", "detach", "float", "double", "to",
    "cpu", "type",
})


def _op_name(func) -> str:
    name = getattr(func, "__name__", "")
    if name == "__get__":  # a property such as s.shape or s.T: the descriptor has the name
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


class _ChunkedScores(torch.Tensor):
    """The scores handed to an online-softmax answer (Lesson 9, §2 exercise).

    It behaves as a plain tensor, and it notes every operation that reads more than
    ``chunk_size`` of its key columns at once: selecting at most a chunk of columns
    (``s[:, c:c + chunk_size]``, ``s.split(chunk_size, dim=1)``) gives a plain tensor; a
    selection that keeps more columns stays watched; any computation on a watched tensor
    (``torch.softmax(s, -1)``, ``s.amax(dim=1)``, ``s.exp()``) is written to ``reads``.
    ``keys`` holds, for every entry, the key column it came from.
    """

    keys: torch.Tensor
    chunk_size: int
    reads: list

    @classmethod
    def watch(cls, s: torch.Tensor, chunk_size: int, reads: list) -> torch.Tensor:
        keys = torch.arange(s.shape[-1]).expand(s.shape)  # (n_q, n_kv): the column of each entry
        return cls._wrap(s, keys, chunk_size, reads)

    @classmethod
    def _wrap(cls, x, keys, chunk_size, reads):
        if keys.unique().numel() <= chunk_size:
            return x  # at most one chunk of keys: the learner may do anything with it
        watched = x.as_subclass(cls)
        watched.keys, watched.chunk_size, watched.reads = keys, chunk_size, reads
        return watched

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _op_name(func)
        leaves = [*args, *kwargs.values()]
        watched = [a for a in leaves if isinstance(a, cls)]
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
            if not watched or name in _METADATA_OPS:
                return _plain(out)
            if name not in _SELECTING_OPS:  # a computation on more than one chunk of keys
                first = watched[0]
                first.reads.append(f"{name} on {first.keys.unique().numel()} key columns")
                return _plain(out)

            def keys_of(a):
                return a.keys if isinstance(a, cls) else a

            key_args = [keys_of(a) for a in args]
            key_kwargs = {k: keys_of(a) for k, a in kwargs.items()}
            if name in ("float", "double", "to", "type", "cpu"):
                key_out = args[0].keys  # a conversion keeps every entry where it was
            else:
                key_out = func(*key_args, **key_kwargs)
        first = watched[0]
        if isinstance(out, torch.Tensor):
            return cls._wrap(_plain(out), key_out, first.chunk_size, first.reads)
        if isinstance(out, (tuple, list)):
            return type(out)(cls._wrap(_plain(o), k, first.chunk_size, first.reads)
                             for o, k in zip(out, key_out, strict=True))
        return out


def _plain(out):
    """Tensors as plain torch.Tensor (tuples and lists of them too); anything else as it is."""
    if isinstance(out, _ChunkedScores):
        return out.as_subclass(torch.Tensor)
    if isinstance(out, (tuple, list)) and any(isinstance(o, _ChunkedScores) for o in out):
        return type(out)(_plain(o) for o in out)
    return out


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
    (Lesson 9, §2). ``s`` is (n_q, n_kv) scores, ``v`` is (n_kv, d_v) values.

    ``s`` arrives watched (:class:`_ChunkedScores`): a function that computes anything on more
    than ``chunk_size`` key columns at once (``torch.softmax(s, -1)``, ``s.amax(1)``) fails,
    whatever it returns. A wrong result is matched against the usual mistakes
    (``_ONLINE_MISTAKES``), which are named in words."""
    _check_callable(fn)
    cases = _online_cases()
    outputs = []
    for s, v, chunk in cases:
        case = _describe_online(s, v, chunk)
        reads: list[str] = []  # what the function computed on more than one chunk of keys
        watched = _ChunkedScores.watch(s.clone(), chunk, reads)
        out = _as_tensor(_plain(_call(fn, (watched, v.clone(), chunk), case)),
                         "the (n_q, d_v) output")
        if reads:
            raise CheckFailed(
                f"your function computed {reads[0]} at once (on {case}), but the exercise reads "
                "the scores only chunk_size columns at a time: slice a chunk, "
                "s[:, c:c + chunk_size], and compute with that slice alone; the running max m, "
                "denominator l and numerator are what replace a softmax (or a max) over the "
                "whole row."
            )
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


# --- Lesson 7 ---
# Three checkers for Lesson 7's exercises: BIO tags -> entity spans (§4), entity-level F1 (§4)
# and the best answer span from start / end logits (§5).

from encoderlab.lessons import l07_finetune as _finetune  # noqa: E402

__all__ += ["check_bio_to_spans", "check_entity_f1", "check_best_span"]

# --- BIO tags -> spans (Lesson 7, §4) ------------------------------------------------------------


def _bio_variant(tags, *, end="inclusive", orphan_i="start", split_types=True, split_b=True,
                 close_last=True):
    """bio_to_spans with one switch turned: each non-default switch is a known mistake."""
    spans, current = [], None
    for i, tag in enumerate(tags):
        prefix, kind = ("O", None) if tag == "O" else (tag[0], tag[2:])
        continues = current is not None and prefix == "I" and (
            current[0] == kind or not split_types)
        if current is not None and prefix == "B" and not split_b and current[0] == kind:
            continues = True
        if continues:
            current[2] = i
            continue
        if current is not None:
            spans.append(tuple(current))
            current = None
        if prefix == "B" or (prefix == "I" and orphan_i == "start"):
            current = [kind, i, i]
    if current is not None and close_last:
        spans.append(tuple(current))
    if end == "exclusive":
        spans = [(k, s, e + 1) for k, s, e in spans]
    return spans


_BIO_MISTAKES = [
    ("your end positions are one too far: this course's spans are (type, start, end) with the end "
     "*inclusive*, so a one-token entity at position 3 is ('X', 3, 3).",
     partial(_bio_variant, end="exclusive")),
    ("you drop an I-X that follows O (or starts the sequence): CoNLL's rule, and seqeval's, is "
     "that such an I-X begins a new entity of type X.",
     partial(_bio_variant, orphan_i="drop")),
    ("an I- tag of another type continues your entity: B-PER I-LOC is two entities, PER then "
     "LOC; an entity goes on only while the tags are I- of its own type.",
     partial(_bio_variant, split_types=False)),
    ("a B- tag inside an entity does not start a new one in your version: B-PER B-PER is two "
     "people side by side, the whole point of having B- as well as I-.",
     partial(_bio_variant, split_b=False)),
    ("you lose the entity that runs to the end of the sequence: close the open entity after the "
     "loop.",
     partial(_bio_variant, close_last=False)),
]


def _bio_cases() -> list[tuple]:
    chosen = [
        ["B-PER", "I-PER", "O", "B-LOC"],
        ["O", "O", "O"],
        [],
        ["B-PER", "B-PER", "I-PER", "O"],
        ["O", "I-LOC", "I-LOC", "O", "B-DATE"],
        ["B-PER", "I-LOC", "I-LOC"],
        ["I-PER", "O", "B-LOC", "I-LOC"],
        ["B-LOC", "I-LOC", "I-LOC", "I-LOC"],
        ["B-DATE", "O", "I-DATE", "B-DATE", "I-PER"],
    ]
    g = torch.Generator().manual_seed(7)
    tags = list(_finetune.TAGS)
    random = [[tags[int(t)] for t in torch.randint(len(tags), (int(n),), generator=g)]
              for n in torch.randint(1, 12, (12,), generator=g)]
    return [(c,) for c in chosen + random]


def _as_spans(value, case: str) -> list[tuple]:
    try:
        return sorted((str(k), int(s), int(e)) for k, s, e in value)
    except (TypeError, ValueError):
        raise CheckFailed(
            f"your function returned {_short_value(value)} on {case}; return a list of "
            "(type, start, end) tuples, e.g. [('PER', 0, 1), ('LOC', 3, 3)]."
        ) from None


def _short_value(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_bio_to_spans(fn: Callable) -> bool:
    """Check ``fn(tags) -> [(type, start, end), ...]`` (end inclusive) on BIO sequences.

    (Lesson 7, §4.) The cases include I- after O, a type change inside an entity, two B- in a
    row and an entity that runs to the end; the order of the returned spans does not matter.
    """
    _check_callable(fn)
    cases = _bio_cases()
    outputs = [_as_spans(_call(fn, (list(tags),), f"tags {tags}"), f"tags {tags}")
               for (tags,) in cases]
    references = [sorted(_finetune.bio_to_spans(tags)) for (tags,) in cases]
    wrong = [i for i, (a, b) in enumerate(zip(outputs, references, strict=True)) if a != b]
    if not wrong:
        return _success("BIO to spans", fn, len(cases))
    message = _diagnose(outputs, cases, _BIO_MISTAKES, lambda a, b: a == sorted(b), wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    raise CheckFailed(f"on tags {cases[i][0]} you return {outputs[i]}, but the entities are "
                      f"{references[i]} (type, start, end), end inclusive.")


# --- Entity-level F1 (Lesson 7, §4) ---------------------------------------------------------------


def _f1_from(correct: float, n_predicted: float, n_gold: float) -> float:
    p = correct / n_predicted if n_predicted else 0.0
    r = correct / n_gold if n_gold else 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def _f1_variant(gold, predicted, *, unit="entity", match="exact", average="micro"):
    """Entity F1 with one switch turned: each non-default switch is a known mistake."""
    if unit == "accuracy":  # the fraction of tags that agree, O included: not an F1 at all
        pairs = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)]
        return sum(g == p for g, p in pairs) / len(pairs) if pairs else 0.0
    if unit == "token":  # per-token agreement on the non-O tags
        correct = sum(g == p != "O" for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps))
        n_p = sum(p != "O" for ps in predicted for p in ps)
        n_g = sum(g != "O" for gs in gold for g in gs)
        return _f1_from(correct, n_p, n_g)
    scores, totals = [], [0, 0, 0]
    for gs, ps in zip(gold, predicted):
        g_spans, p_spans = _finetune.bio_to_spans(gs), _finetune.bio_to_spans(ps)
        if match == "untyped":
            g_set, p_set = {s[1:] for s in g_spans}, {s[1:] for s in p_spans}
            correct = len(g_set & p_set)
        elif match == "overlap":
            correct = sum(any(pk == gk and ps_ <= ge and gs_ <= pe for gk, gs_, ge in g_spans)
                          for pk, ps_, pe in p_spans)
        else:
            correct = len(set(g_spans) & set(p_spans))
        counts = (correct, len(p_spans), len(g_spans))
        totals = [a + b for a, b in zip(totals, counts)]
        if counts[1] or counts[2]:
            scores.append(_f1_from(*counts))
    if average == "sentence":
        return sum(scores) / len(scores) if scores else 0.0
    return _f1_from(*totals)


_F1_MISTAKES = [
    ("this is token accuracy (the fraction of tags that agree, O included), not entity-level F1: "
     "most tags are O, so it stays high even when every entity is missed. Turn each sequence "
     "into its (type, start, end) spans and compute precision and recall over entities.",
     partial(_f1_variant, unit="accuracy")),
    ("you score tags, not entities: a token-level F1 gives credit for half an entity. Turn each "
     "sequence into its (type, start, end) spans and count a prediction only if the whole span "
     "matches.",
     partial(_f1_variant, unit="token")),
    ("you ignore the entity type: a span counts only if its type matches too (PER at 0-1 is "
     "wrong when the gold says LOC at 0-1).",
     partial(_f1_variant, match="untyped")),
    ("you count an overlapping span as correct; entity-level F1 needs both boundaries to match "
     "exactly.",
     partial(_f1_variant, match="overlap")),
    ("you average an F1 per sentence; the standard is one F1 over the whole corpus: add up the "
     "correct, predicted and gold entities of all sentences first (micro average).",
     partial(_f1_variant, average="sentence")),
]


def _f1_cases() -> list[tuple]:
    g1 = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-DATE", "I-DATE"]]
    p1 = [["B-PER", "O", "O", "B-LOC"], ["O", "B-DATE", "I-DATE"]]
    g2 = [["B-PER", "I-PER", "O"], ["B-LOC", "O", "O"], ["O", "O", "O"]]
    p2 = [["B-LOC", "I-LOC", "O"], ["B-LOC", "O", "B-PER"], ["O", "O", "O"]]
    g3 = [["B-LOC", "I-LOC", "I-LOC", "O", "B-PER"]]
    p3 = [["O", "B-LOC", "I-LOC", "O", "B-PER"]]
    g4 = [["O", "O"], ["B-PER", "O"]]
    p4 = [["O", "O"], ["O", "O"]]
    g5 = [["B-PER", "O", "B-PER", "I-PER", "O", "B-LOC"], ["B-DATE"], ["O", "B-LOC"]]
    p5 = [["B-PER", "O", "B-PER", "I-PER", "O", "B-LOC"], ["O"], ["O", "B-PER"]]
    cases = [(g1, p1), (g2, p2), (g3, p3), (g4, p4), (g5, p5), (g1, g1)]
    g = torch.Generator().manual_seed(11)
    tags = list(_finetune.TAGS)
    for _ in range(4):
        gold, pred = [], []
        for n in torch.randint(2, 9, (6,), generator=g).tolist():
            row = [tags[int(t)] for t in torch.randint(len(tags), (n,), generator=g)]
            flip = torch.rand(n, generator=g) < 0.3
            other = [tags[int(t)] for t in torch.randint(len(tags), (n,), generator=g)]
            gold.append(row)
            pred.append([o if f else t for t, o, f in zip(row, other, flip.tolist())])
        cases.append((gold, pred))
    return cases


def check_entity_f1(fn: Callable) -> bool:
    """Check ``fn(gold, predicted) -> F1`` (a number in [0, 1]) over lists of BIO sequences.

    (Lesson 7, §4.) Entity level and micro-averaged, as CoNLL and seqeval: an entity counts
    only if type, start and end all match. Token-level scores, untyped or overlapping matches
    and per-sentence averages are named when they explain the answers.
    """
    _check_callable(fn)
    cases = _f1_cases()
    outputs = []
    for k, (gold, pred) in enumerate(cases):
        value = _call(fn, (gold, pred), f"case {k}")
        if isinstance(value, dict) and "f1" in value:
            value = value["f1"]
        try:
            outputs.append(float(value))
        except (TypeError, ValueError):
            raise CheckFailed(f"your function returned {_short_value(value)} on case {k}; "
                              "return the F1 as a float between 0 and 1.") from None
    references = [_finetune.entity_scores(g, p)["f1"] for g, p in cases]
    if all(o > 1.0 + 1e-9 for o, r in zip(outputs, references) if r > 0):
        raise CheckFailed("your F1 is larger than 1: return a fraction between 0 and 1, "
                          "not a percentage.")

    def same(a, b):
        return abs(a - b) < 1e-9

    wrong = [i for i, (a, b) in enumerate(zip(outputs, references, strict=True)) if not same(a, b)]
    if not wrong:
        return _success("entity-level F1", fn, len(cases))
    message = _diagnose(outputs, cases, _F1_MISTAKES, same, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    gold, pred = cases[i]
    raise CheckFailed(f"on gold {gold} and predicted {pred} your F1 is {outputs[i]:.4f}, "
                      f"the entity-level F1 is {references[i]:.4f}. Print the spans your "
                      "my_bio_to_spans gives for these sequences and count by hand: correct = "
                      "spans in both, precision = correct / predicted, recall = correct / gold.")


# --- The best span (Lesson 7, §5) -----------------------------------------------------------------


def _span_variant(s, e, context, max_tokens, *, joint=True, use_context=True, ordered=True,
                  limit=0):
    """best_span for one row with one switch turned: each non-default switch is a known mistake."""
    n = len(s)
    allowed_i = context if use_context else torch.ones(n, dtype=torch.bool)
    if not joint:
        s_ = s.masked_fill(~allowed_i, float("-inf"))
        e_ = e.masked_fill(~allowed_i, float("-inf"))
        return int(s_.argmax()), int(e_.argmax())
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    ok = allowed_i.unsqueeze(1) & allowed_i.unsqueeze(0)
    if ordered:
        ok &= j >= i
    if limit is not None:
        ok &= j < i + max_tokens + limit
    scores = (s.unsqueeze(1) + e.unsqueeze(0)).masked_fill(~ok, float("-inf"))
    flat = int(scores.flatten().argmax())
    return flat // n, flat % n


_SPAN_MISTAKES = [
    ("you take the best start and the best end separately; they can give an end before the "
     "start or an overlong span. Score every allowed pair (i, j) by s_i + e_j and take the best "
     "pair.",
     partial(_span_variant, joint=False)),
    ("your span can land outside the context (on the question, a special token or padding): "
     "allow only positions where context_mask is True.",
     partial(_span_variant, use_context=False)),
    ("your span can end before it starts: require start <= end.",
     partial(_span_variant, ordered=False)),
    ("your span can be longer than max_tokens: require end - start + 1 <= max_tokens.",
     partial(_span_variant, limit=None)),
    ("your spans can be one token longer than max_tokens: end - start + 1 <= max_tokens means "
     "end < start + max_tokens.",
     partial(_span_variant, limit=1)),
]


def _span_cases() -> list[tuple]:
    def t(values):
        return torch.tensor(values, dtype=torch.float32)

    def c(values):
        return torch.tensor(values, dtype=torch.bool)

    cases = [
        (t([0, 0, 0, 5, 1, 0]), t([0, 0, 0, 0, 4, 0]), c([0, 0, 1, 1, 1, 1]), 4),
        (t([9, 0, 1, 0, 0]), t([9, 0, 0, 2, 0]), c([0, 0, 1, 1, 1]), 4),  # the best is on [CLS]
        (t([0, 0, 1, 0, 5]), t([0, 0, 0, 6, 0]), c([0, 0, 1, 1, 1]), 4),  # best end before start
        (t([0, 5, 0, 0, 0, 0, 0]), t([0, 0, 0, 0, 0, 1, 6]), c([0, 1, 1, 1, 1, 1, 1]), 3),
        (t([0, 5, 0, 0, 0, 0]), t([0, 0, 0, 0, 6, 0]), c([0, 1, 1, 1, 1, 1]), 3),  # length 4
        (t([1, 2, 3]), t([3, 2, 1]), c([0, 1, 0]), 2),  # a one-token context
    ]
    g = torch.Generator().manual_seed(5)
    for _ in range(8):
        n = int(torch.randint(6, 14, (1,), generator=g))
        q = int(torch.randint(1, 4, (1,), generator=g))
        pad = int(torch.randint(0, 3, (1,), generator=g))
        context = torch.zeros(n, dtype=torch.bool)
        context[q + 1:n - 1 - pad] = True
        cases.append((torch.randn(n, generator=g) * 3, torch.randn(n, generator=g) * 3, context,
                      int(torch.randint(1, 5, (1,), generator=g))))
    return cases


def check_best_span(fn: Callable) -> bool:
    """Check ``fn(start_logits, end_logits, context_mask, max_tokens) -> (start, end)``, one row.

    (Lesson 7, §5.) Inputs are 1-d tensors of length n; the answer is the pair i <= j with
    j - i + 1 <= max_tokens, both in the context, that maximises s_i + e_j.
    """
    _check_callable(fn)
    cases = _span_cases()
    outputs = []
    for k, (s, e, context, m) in enumerate(cases):
        case = f"case {k} (n = {len(s)}, max_tokens = {m})"
        value = _call(fn, (s.clone(), e.clone(), context.clone(), m), case)
        try:
            start, end = value
            outputs.append((int(start), int(end)))
        except (TypeError, ValueError, RuntimeError):
            raise CheckFailed(f"your function returned {_short_value(value)} on {case}; return "
                              "two ints, (start, end).") from None
    references = []
    for s, e, context, m in cases:
        i, j, _ = _finetune.best_span(s[None], e[None], context[None], m)
        references.append((int(i), int(j)))
    wrong = [i for i, (a, b) in enumerate(zip(outputs, references, strict=True)) if a != b]
    if not wrong:
        return _success("best span", fn, len(cases))
    message = _diagnose(outputs, cases, _SPAN_MISTAKES, lambda a, b: a == tuple(b), wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    s, e, context, m = cases[i]
    raise CheckFailed(f"on case {i} (start_logits {s.tolist()}, end_logits {e.tolist()}, "
                      f"context_mask {context.int().tolist()}, max_tokens {m}) you return "
                      f"{outputs[i]}, the best allowed span is {references[i]}.")


# --- Lesson 6 ---
# Two checkers for Lesson 6's exercises: whole-word selection (§3) and replaced-token-detection
# labels from a generator's samples (§4).

from encoderlab.lessons import l06_pretraining as _pretraining  # noqa: E402

__all__ += ["check_whole_word_positions", "check_rtd_labels"]

# A small vocabulary with continuation pieces: "over ##flow ##ed", "un ##sort ##ed".
_WW_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "list", "is", "over",
              "##flow", "##ed", "un", "##sort", "a", "stack", "."]
_WW_SPECIAL = (0, 1, 2, 3, 4)


def _ww_reference(ids, am, tokens, special, picked):
    words = _pretraining.word_ids(ids, am, tokens, special)  # (b, n)
    return (words >= 0) & picked.gather(1, words.clamp(min=0))


def _ww_first_piece_only(ids, am, tokens, special, picked):
    continuation = torch.tensor([t.startswith("##") for t in tokens])
    return _ww_reference(ids, am, tokens, special, picked) & ~continuation[ids]


def _ww_every_piece_a_word(ids, am, tokens, special, picked):
    ordinary = (am != 0) & ~torch.isin(ids, torch.tensor(special))
    index = ordinary.long().cumsum(dim=1) - 1  # each piece its own word
    wide = torch.zeros(ids.shape, dtype=torch.bool)
    wide[:, : picked.shape[1]] = picked[:, : ids.shape[1]]
    return ordinary & wide.gather(1, index.clamp(min=0))


def _ww_specials_are_words(ids, am, tokens, special, picked):
    continuation = torch.tensor([t.startswith("##") for t in tokens])
    real = am != 0
    index = (real & ~continuation[ids]).long().cumsum(dim=1) - 1  # [CLS] is word 0
    wide = torch.zeros((ids.shape[0], ids.shape[1] + 1), dtype=torch.bool)
    wide[:, : picked.shape[1]] = picked
    ordinary = real & ~torch.isin(ids, torch.tensor(special))
    return ordinary & wide.gather(1, index.clamp(min=0))


_WW_MISTAKES = [
    ("only the first piece of each chosen word is selected: its '##' pieces belong to the same "
     "word and must be selected with it (a '##' piece continues the word before it).",
     _ww_first_piece_only),
    ("you number every piece as a word of its own: a piece that starts with '##' continues the "
     "previous word, so 'over ##flow ##ed' is one word, index k for all three pieces.",
     _ww_every_piece_a_word),
    ("your word numbering counts [CLS] (or another special token) as word 0: words are counted "
     "over ordinary pieces only, so the first real word is word 0 and specials get no word.",
     _ww_specials_are_words),
]


def _ww_cases() -> list[tuple]:
    tokens, special = _WW_TOKENS, _WW_SPECIAL
    # [CLS] the list is over ##flow ##ed . [SEP] and an unsorted stack, padded
    ids = torch.tensor([[2, 5, 6, 7, 8, 9, 10, 15, 3, 0],
                        [2, 13, 11, 12, 10, 14, 15, 3, 0, 0]])
    am = (ids != 0).long()
    cases = [(ids, am, tokens, special, torch.tensor([[0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
                                                      [0, 1, 0, 0, 0, 0, 0, 0, 0, 0]]).bool())]
    g = torch.Generator().manual_seed(6)
    words = [[5], [6], [7], [8, 9, 10], [11, 12, 10], [13], [14], [15], [8], [11, 12]]
    for b, n_words in ((3, 5), (2, 8), (4, 3)):
        rows = []
        for _ in range(b):
            k = int(torch.randint(1, n_words + 1, (1,), generator=g))
            pieces = [p for i in torch.randint(len(words), (k,), generator=g).tolist()
                      for p in words[i]]
            rows.append([2, *pieces, 3])
        n = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
        am = (ids != 0).long()
        picked = torch.rand((b, n), generator=g) < 0.4
        cases.append((ids, am, tokens, special, picked))
    return cases


def check_whole_word_positions(fn: Callable) -> bool:
    """Check ``fn(input_ids, attention_mask, tokens, special_ids, picked)`` (Lesson 6, §3).

    ``picked`` (b, W) bool says which words of each row are chosen (word k = the k-th word of
    the row, counted from 0 over ordinary pieces); the answer is the (b, n) bool tensor of the
    positions to corrupt: every piece of every chosen word, nothing else.
    """
    _check_callable(fn)
    cases = _ww_cases()
    outputs = []
    for ids, am, tokens, special, picked in cases:
        case = f"input_ids={ids.tolist()}, picked={picked.long().tolist()}"
        out = _as_tensor(_call(fn, (ids.clone(), am.clone(), list(tokens), special,
                                    picked.clone()), case), "a (b, n) boolean tensor")
        if tuple(out.shape) != tuple(ids.shape):
            raise CheckFailed(f"your selection has shape {tuple(out.shape)} on {case}; return one "
                              f"bool per position, shape (b, n) = {tuple(ids.shape)}.")
        if out.dtype != torch.bool:
            if not bool(((out == 0) | (out == 1)).all()):
                raise CheckFailed(f"your selection holds values other than 0/1 on {case}; "
                                  "return a boolean tensor, True = corrupt this position.")
            out = out.bool()
        outputs.append(out)
    references = [_ww_reference(*c) for c in cases]
    wrong = [i for i, (o, r) in enumerate(zip(outputs, references, strict=True))
             if not torch.equal(o, r)]
    if not wrong:
        return _success("whole-word selection", fn, len(cases))
    specials = [i for i in wrong
                if bool((outputs[i] & torch.isin(cases[i][0], torch.tensor(_WW_SPECIAL))).any())]
    if specials:
        raise CheckFailed("you select special tokens or padding ([CLS], [SEP], [PAD]): they are "
                          "never part of a word and never corrupted.")
    message = _diagnose(outputs, cases, _WW_MISTAKES, torch.equal, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    r, c = (outputs[i] != references[i]).nonzero()[0].tolist()
    raise CheckFailed(
        f"your selection differs from the reference at row {r}, position {c} "
        f"(token {_WW_TOKENS[int(cases[i][0][r, c])]!r}) on input_ids={cases[i][0].tolist()}, "
        f"picked={cases[i][4].long().tolist()}: yours {bool(outputs[i][r, c])}, "
        f"the reference {bool(references[i][r, c])}."
    )


def _rtd_reference(ids, mlm_labels, samples, am):
    corrupted = torch.where(mlm_labels != objectives.IGNORE_INDEX, samples, ids)
    return _pretraining.rtd_labels(ids, corrupted, am)


def _rtd_masked_is_replaced(ids, mlm_labels, samples, am):
    out = (mlm_labels != objectives.IGNORE_INDEX).long()
    return out.masked_fill(am == 0, objectives.IGNORE_INDEX)


def _rtd_pad_zero(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return out.masked_fill(am == 0, 0)


def _rtd_masked_only(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return out.masked_fill(mlm_labels == objectives.IGNORE_INDEX, objectives.IGNORE_INDEX)


def _rtd_inverted(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return torch.where(out == objectives.IGNORE_INDEX, out, 1 - out)


def _rtd_samples_everywhere(ids, mlm_labels, samples, am):
    return _pretraining.rtd_labels(ids, samples, am)


_RTD_MISTAKES = [
    ("you label every masked position 'replaced': where the generator sampled the original "
     "token, nothing was replaced, and ELECTRA labels it 0 (original). Compare the token the "
     "discriminator reads with the original.", _rtd_masked_is_replaced),
    ("you give only the masked positions a label (-100 elsewhere, as in MLM): the "
     "discriminator is scored at every real position, and an unmasked one is original (0).",
     _rtd_masked_only),
    ("your labels are inverted: 1 means replaced, 0 means original.", _rtd_inverted),
    ("padding gets the label 0: padding positions carry no loss, so their label is -100.",
     _rtd_pad_zero),
    ("you compare samples with input_ids at every position: the generator's samples are used "
     "only at the masked positions (mlm_labels != -100); elsewhere the discriminator reads the "
     "original token.", _rtd_samples_everywhere),
]


def _rtd_cases() -> list[tuple]:
    ignore = objectives.IGNORE_INDEX
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 3, 0]])
    am = (ids != 0).long()
    mlm = torch.full_like(ids, ignore)
    mlm[0, [2, 4, 5]] = ids[0, [2, 4, 5]]
    samples = torch.tensor([[7, 8, 11, 9, 20, 14, 5, 6]])  # position 2 and 5 sample the original
    cases = [(ids, mlm, samples, am)]
    g = torch.Generator().manual_seed(60)
    for b, n in ((2, 9), (3, 6), (1, 12)):
        lengths = torch.randint(3, n + 1, (b,), generator=g)
        am = (torch.arange(n)[None, :] < lengths[:, None]).long()
        ids = torch.randint(5, 12, (b, n), generator=g).masked_fill(am == 0, 0)
        ids[:, 0] = 2
        chosen = (torch.rand((b, n), generator=g) < 0.5) & (am == 1)
        chosen[:, 0] = False
        mlm = torch.where(chosen, ids, torch.full_like(ids, ignore))
        samples = torch.randint(5, 12, (b, n), generator=g)  # small vocabulary: many hits
        cases.append((ids, mlm, samples, am))
    return cases


def check_rtd_labels(fn: Callable) -> bool:
    """Check ``fn(input_ids, mlm_labels, samples, attention_mask)`` (Lesson 6, §4).

    ``mlm_labels`` marks the masked positions (-100 elsewhere), ``samples`` (b, n) holds the
    generator's sampled token at every position (only the masked ones are used). The answer is
    the discriminator's (b, n) labels: 1 = the token it reads differs from the original,
    0 = same, -100 at padding.
    """
    _check_callable(fn)
    cases = _rtd_cases()
    outputs = []
    for ids, mlm, samples, am in cases:
        case = (f"input_ids={ids.tolist()}, mlm_labels={mlm.tolist()}, "
                f"samples={samples.tolist()}, attention_mask={am.tolist()}")
        out = _as_tensor(_call(fn, (ids.clone(), mlm.clone(), samples.clone(), am.clone()), case),
                         "a (b, n) tensor of labels 0 / 1 / -100")
        if tuple(out.shape) != tuple(ids.shape):
            raise CheckFailed(f"your labels have shape {tuple(out.shape)} on {case}; return one "
                              f"label per position, (b, n) = {tuple(ids.shape)}.")
        if out.dtype == torch.bool:
            raise CheckFailed("your labels are booleans; return integers: 1 = replaced, "
                              "0 = original, -100 at padding (a boolean cannot hold -100).")
        outputs.append(out.long())
    references = [_rtd_reference(*c) for c in cases]
    wrong = [i for i, (o, r) in enumerate(zip(outputs, references, strict=True))
             if not torch.equal(o, r)]
    if not wrong:
        return _success("replaced-token-detection labels", fn, len(cases))
    message = _diagnose(outputs, cases, _RTD_MISTAKES, torch.equal, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    r, c = (outputs[i] != references[i]).nonzero()[0].tolist()
    raise CheckFailed(
        f"your label differs from the reference at row {r}, position {c} on case {i + 1}: "
        f"yours {int(outputs[i][r, c])}, the reference {int(references[i][r, c])} "
        "(1 = replaced, 0 = original, -100 = padding)."
    )


# --- Lesson 8 ---
# Checkers for Lesson 8's exercises: mean pooling over real tokens (§1), recall@k (§3) and the
# in-batch-negatives loss (§5).

from encoderlab import heads as _heads  # noqa: E402

__all__ += ["check_mean_pooling", "check_recall_at_k", "check_in_batch_negatives_loss"]


def _pooling_cases() -> list[tuple]:
    """(hidden, attention_mask) cases: padding of varied amounts, with large values in the padding
    so that any use of it shows; one batch without padding, one with a single real token."""
    g = torch.Generator().manual_seed(8)
    cases = []
    for lengths, n, d in [([3, 5, 2], 5, 4), ([4, 4], 4, 3), ([1, 6, 3, 2], 6, 8), ([2, 7], 7, 5)]:
        hidden = torch.randn(len(lengths), n, d, generator=g)  # (b, n, d)
        mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()  # (b, n)
        hidden = hidden + (1 - mask)[..., None] * 50.0  # padding vectors far from the rest
        cases.append((hidden, mask))
    return cases


def _masked_sum(hidden, mask):
    return (hidden * mask[..., None]).sum(dim=1)


_POOLING_MISTAKES = [
    ("your mean includes the [PAD] positions (hidden.mean(dim=1)): multiply by the mask before "
     "summing and divide by the number of real tokens, mask.sum(dim=1, keepdim=True).",
     lambda h, m: h.mean(dim=1)),
    ("you sum only the real tokens but divide by the padded length n; divide by each row's own "
     "count of real tokens, mask.sum(dim=1, keepdim=True).",
     lambda h, m: _masked_sum(h, m) / h.shape[1]),
    ("you return the masked sum without dividing by the count of real tokens: that is the "
     "mean times the length, so longer texts get longer vectors.",
     lambda h, m: _masked_sum(h, m)),
    ("you divide by the number of real tokens in the whole batch (mask.sum()), one number for "
     "every row; each row needs its own count, mask.sum(dim=1, keepdim=True).",
     lambda h, m: _masked_sum(h, m) / m.sum()),
    ("your function returns the [CLS] vector, hidden[:, 0]; the task is the mean over real "
     "tokens.",
     lambda h, m: h[:, 0]),
]


def check_mean_pooling(fn: Callable) -> bool:
    """Check ``fn(hidden, attention_mask)`` returns the (b, d) mean over real tokens (Lesson 8, §1).

    ``hidden`` is (b, n, d); ``attention_mask`` is (b, n) with 1 for real tokens, 0 for [PAD].
    """
    _check_callable(fn)
    cases = _pooling_cases()
    outputs = []
    for hidden, mask in cases:
        case = f"hidden of shape {tuple(hidden.shape)} with {mask.sum(1).tolist()} real tokens"
        out = _as_tensor(_call(fn, (hidden.clone(), mask.clone()), case),
                         "the (b, d) tensor of mean vectors")
        if tuple(out.shape) != (hidden.shape[0], hidden.shape[2]):
            raise CheckFailed(f"your output has shape {tuple(out.shape)} on {case}; expected "
                              f"(b, d) = {(hidden.shape[0], hidden.shape[2])}: one vector per "
                              "sequence, the token axis (dim=1) averaged away.")
        outputs.append(out.double())
    references = [_heads.pool(h.double(), m, how="mean") for h, m in cases]
    wrong = [i for i, (o, r) in enumerate(zip(outputs, references, strict=True))
             if not _close(o, r)]
    if not wrong:
        return _success("mean pooling", fn, len(cases))
    doubled = [(h.double(), m) for h, m in cases]
    message = _diagnose(outputs, doubled, _POOLING_MISTAKES, _close, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    raise _differs("mean", "the mean over real tokens", outputs[i], references[i],
                   f"hidden of shape {tuple(cases[i][0].shape)}",
                   "compare it with encoderlab.heads.pool(hidden, mask, how='mean').")


def _recall_reference(ranked, answers, k):
    hits = [bool(set(row[:k]) & set(a)) for row, a in zip(ranked, answers)]
    return sum(hits) / len(hits)


def _recall_cases() -> list[tuple]:
    """(ranked, answers, k): lists of document indices best first, sets of right documents."""
    ranked = [[3, 1, 4, 0, 2], [0, 2, 1, 4, 3], [4, 3, 2, 1, 0], [1, 0, 3, 2, 4],
              [2, 4, 0, 3, 1]]
    answers = [{1}, {0, 3}, {0}, {2, 4}, {3}]
    cases = [(ranked, answers, k) for k in (1, 2, 3, 4, 5)]
    g = torch.Generator().manual_seed(8)
    big = [torch.randperm(20, generator=g).tolist() for _ in range(12)]
    big_answers = [set(torch.randperm(20, generator=g)[:1 + i % 3].tolist()) for i in range(12)]
    cases += [(big, big_answers, k) for k in (1, 3, 10)]
    return cases


_RECALL_MISTAKES = [
    ("you look only at the document at rank k (row[k - 1]); recall@k counts a query as found "
     "if any of its first k documents, row[:k], is right.",
     lambda r, a, k: sum(row[k - 1] in s for row, s in zip(r, a)) / len(r)),
    ("you look at one document too many (row[:k + 1]); the first k documents are row[:k].",
     lambda r, a, k: _recall_reference(r, a, k + 1)),
    ("you look at one document too few (row[:k - 1]); the first k documents are row[:k].",
     lambda r, a, k: _recall_reference(r, a, max(k - 1, 0))),
    ("you return the number of queries found, not the share: divide by the number of queries.",
     lambda r, a, k: float(sum(bool(set(row[:k]) & s) for row, s in zip(r, a)))),
    ("you average the share of each query's right documents that are found; this course's "
     "recall@k asks whether at least one right document is in the first k (a hit is 1 or 0 "
     "per query).",
     lambda r, a, k: sum(len(set(row[:k]) & s) / len(s) for row, s in zip(r, a)) / len(r)),
    ("you ignore k and always look at the first document only.",
     lambda r, a, k: _recall_reference(r, a, 1)),
]


def check_recall_at_k(fn: Callable) -> bool:
    """Check ``fn(ranked, answers, k)`` returns the share of queries with a right document among
    their first k (Lesson 8, §3). ``ranked[i]`` lists document indices best first (a list or a
    tensor row); ``answers[i]`` is the set of right documents of query i."""
    _check_callable(fn)
    cases = _recall_cases()
    outputs = []
    for ranked, answers, k in cases:
        case = f"{len(ranked)} queries, k = {k}"
        value = _call(fn, ([list(r) for r in ranked], [set(a) for a in answers], k), case)
        try:
            outputs.append(float(value))
        except (TypeError, ValueError):
            raise CheckFailed(f"your function returned a {type(value).__name__} on {case}; "
                              "return one number, the share of queries found.") from None
    references = [_recall_reference(*c) for c in cases]

    def same(x, y):
        return abs(x - y) < 1e-9

    wrong = [i for i, (o, r) in enumerate(zip(outputs, references, strict=True))
             if not same(o, r)]
    if not wrong:
        return _success("recall@k", fn, len(cases))
    message = _diagnose(outputs, cases, _RECALL_MISTAKES, same, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    raise CheckFailed(f"your recall@{cases[i][2]} is {outputs[i]:.4g} on {len(cases[i][0])} "
                      f"queries; the share of queries with a right document among their first "
                      f"{cases[i][2]} is {references[i]:.4g}.")


def _info_nce(a, b, scale, *, normalize=True, transpose=False, reduce="mean", self_sim=False,
              divide=False):
    if normalize:
        a, b = a / a.norm(dim=1, keepdim=True), b / b.norm(dim=1, keepdim=True)
    s = a @ (a if self_sim else b).T  # (B, B)
    logits = s / scale if divide else s * scale
    if transpose:
        logits = logits.T
    labels = torch.arange(a.shape[0])
    return torch.nn.functional.cross_entropy(logits, labels, reduction=reduce)


def _info_nce_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(8)
    cases = []
    for b, d, scale in [(4, 8, 20.0), (6, 5, 20.0), (3, 16, 5.0), (8, 4, 1.0), (5, 12, 50.0)]:
        a = torch.randn(b, d, generator=g) * 3
        partner = a + torch.randn(b, d, generator=g)  # row i of b is close to row i of a
        cases.append((a, partner * torch.rand(b, 1, generator=g).add(0.5), scale))
    return cases


_INFO_NCE_MISTAKES = [
    ("you use raw dot products: normalise both sides' rows to unit length first, so the logits "
     "are scale × cosine.",
     partial(_info_nce, normalize=False)),
    ("you divide the cosines by scale; scale is 1 / temperature, so the logits are "
     "scale × cos(a_i, b_j).",
     partial(_info_nce, divide=True)),
    ("you forgot the scale: the logits are scale × cos(a_i, b_j) (with cosines in [-1, 1] alone "
     "the softmax can barely prefer the right partner).",
     lambda a, b, scale: _info_nce(a, b, 1.0)),
    ("your loss sums over the batch; take the mean of the B cross-entropies "
     "(F.cross_entropy's default).",
     partial(_info_nce, reduce="sum")),
    ("you compare a with itself (a @ a.T): the negatives and the positive are the rows of b.",
     partial(_info_nce, self_sim=True)),
    ("your softmax runs down the columns (the loss of b's rows against a's); this loss asks "
     "each row a_i to pick its partner b_i among the batch's b's: rows of S = a bᵀ, labels "
     "0..B-1.",
     partial(_info_nce, transpose=True)),
]


def check_in_batch_negatives_loss(fn: Callable) -> bool:
    """Check ``fn(a, b, scale)`` is InfoNCE with in-batch negatives (Lesson 8, §5): the mean
    cross-entropy of the rows of scale · cos(a_i, b_j) against the diagonal."""
    _check_callable(fn)
    cases = _info_nce_cases()
    outputs = []
    for a, b, scale in cases:
        case = f"a and b of shape {tuple(a.shape)}, scale = {scale:g}"
        out = _as_tensor(_call(fn, (a.clone(), b.clone(), scale), case), "a scalar loss tensor")
        if out.numel() != 1:
            raise CheckFailed(f"your loss has shape {tuple(out.shape)} on {case}; return one "
                              "number, the mean over the batch (a 0-d tensor).")
        outputs.append(out.reshape(()).double())
    references = [_info_nce(a.double(), b.double(), s) for a, b, s in cases]
    wrong = [i for i, (o, r) in enumerate(zip(outputs, references, strict=True))
             if not _close(o, r)]
    if not wrong:
        return _success("in-batch negatives loss", fn, len(cases))
    doubled = [(a.double(), b.double(), s) for a, b, s in cases]
    message = _diagnose(outputs, doubled, _INFO_NCE_MISTAKES, _close, wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    raise _differs("loss", "cross_entropy(scale · cos(a, b), arange(B))", outputs[i],
                   references[i], f"a of shape {tuple(cases[i][0].shape)}",
                   "compare it with encoderlab.lessons.l08_retrieval.in_batch_negatives_loss.")


# --- Lesson 5 ---
# Two checkers for Lesson 5's exercises: BERT's corruption (15 %, then 80/10/10; checked by its
# statistics on a large batch, since it is random) and the loss on the chosen positions only.

from torch.nn import functional as _F  # noqa: E402

__all__ += ["check_mlm_corrupt", "check_masked_loss"]

# --- The corruption (Lesson 5, §1) ------------------------------------------------------------

_MLM_SPECIALS = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK], as in data.CompactVocab
_MLM_MASK_ID = 4
_MLM_VOCAB = 1000


def _mlm_batch(rows: int = 256, n: int = 96, seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """A large padded batch: [CLS] words [SEP] [PAD]..., with a few [UNK]s among the words."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, _MLM_VOCAB, (rows, n), generator=g)  # (rows, n): ordinary tokens
    ids[torch.rand(rows, n, generator=g) < 0.03] = 1  # some [UNK]s: special, never chosen
    lengths = torch.randint(12, n + 1, (rows,), generator=g)  # real tokens per row
    mask = (torch.arange(n)[None, :] < lengths[:, None]).long()  # (rows, n)
    ids[:, 0] = 2  # [CLS]
    ids[torch.arange(rows), lengths - 1] = 3  # [SEP]
    ids[mask == 0] = 0  # [PAD]
    return ids, mask


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _corrupt_outputs(fn, ids, mask, seed: int, case: str, vocab_size: int = _MLM_VOCAB):
    generator = torch.Generator().manual_seed(seed)
    before = ids.clone()
    result = _call(fn, (ids, mask, _MLM_SPECIALS, vocab_size, _MLM_MASK_ID, generator), case)
    if not torch.equal(ids, before):
        raise CheckFailed("your function changed input_ids in place; work on a copy "
                          "(inputs = input_ids.clone()) and return it.")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailed(f"your function returned a {type(result).__name__}; return the pair "
                          "(inputs, labels), two (b, n) tensors.")
    inputs = _as_tensor(result[0], "inputs, a (b, n) tensor of token ids")
    labels = _as_tensor(result[1], "labels, a (b, n) tensor of token ids and -100")
    for name, t in (("inputs", inputs), ("labels", labels)):
        if tuple(t.shape) != tuple(ids.shape):
            raise CheckFailed(f"your {name} have shape {tuple(t.shape)}; return one per position, "
                              f"(b, n) = {tuple(ids.shape)}.")
        if t.is_floating_point() or t.dtype == torch.bool:
            raise CheckFailed(f"your {name} have dtype {t.dtype}; token ids and labels are "
                              "integers (torch.long).")
    return inputs.long(), labels.long()


def check_mlm_corrupt(fn: Callable) -> bool:
    """Check ``fn(input_ids, attention_mask, special_ids, vocab_size, mask_id, generator)``.

    (Lesson 5, §1.) The function must return ``(inputs, labels)`` as
    :func:`encoderlab.objectives.mlm_corrupt` does with p = 0.15. Being random, it is checked by
    its statistics on a batch of 12,590 eligible positions (each share within five standard
    errors of BERT's target) and by the rules that hold on every draw: specials and padding are
    never chosen, labels are the original token where chosen and -100 elsewhere, unchosen
    positions are untouched, random tokens are never special, and the same seed gives the same
    result.
    """
    _check_callable(fn)
    ids, mask = _mlm_batch()
    case = "a batch of 256 sentences (vocab_size=1000, special_ids=(0, 1, 2, 3, 4), mask_id=4)"
    inputs, labels = _corrupt_outputs(fn, ids, mask, 0, case)
    eligible = (mask == 1) & ~torch.isin(ids, torch.tensor(_MLM_SPECIALS))  # (b, n)
    n_eligible = int(eligible.sum())
    ignored = labels == -100
    if not ignored.any():
        zeros = float((labels == 0).float().mean())
        if zeros > 0.5:
            raise CheckFailed("your labels mark the positions that carry no loss with 0, but 0 "
                              "is a real token id ([PAD]); use -100, which cross_entropy ignores.")
        raise CheckFailed("your labels hold a token at every position; a position that was not "
                          "chosen carries no loss and must have the label -100.")
    chosen = ~ignored
    if (chosen & (mask == 0)).any():
        raise CheckFailed("you chose padding positions ([PAD], attention_mask 0): only real "
                          "tokens may be chosen.")
    if (chosen & ~eligible).any():
        raise CheckFailed("you chose special tokens ([CLS], [SEP] or [UNK]): a position holding "
                          "any id in special_ids is never chosen.")
    if not torch.equal(labels[chosen], ids[chosen]):
        if torch.equal(labels[chosen], inputs[chosen]):
            raise CheckFailed("your labels hold the corrupted input ([MASK] or the random token); "
                              "they must hold the original token, the one the model must recover.")
        raise CheckFailed("your labels at the chosen positions are not the original tokens: "
                          "labels = input_ids where chosen, -100 elsewhere.")
    if not torch.equal(inputs[ignored], ids[ignored]):
        raise CheckFailed("you changed positions that were not chosen (label -100): only chosen "
                          "positions may be corrupted.")
    rate = int(chosen.sum()) / n_eligible
    se = math.sqrt(0.15 * 0.85 / n_eligible)
    if abs(rate - 0.15) > 5 * se:
        raise CheckFailed(f"you chose {_pct(rate)} of the {n_eligible:,} eligible positions "
                          "(real, non-special tokens); choose each with probability p = 0.15.")
    m = int(chosen.sum())
    to_mask = chosen & (inputs == _MLM_MASK_ID)
    kept = chosen & (inputs == ids)
    to_random = chosen & ~to_mask & ~kept
    if to_random.any():
        drawn = inputs[to_random]
        if bool(torch.isin(drawn, torch.tensor(_MLM_SPECIALS)).any()):
            raise CheckFailed("some of your random replacements are special tokens; draw the "
                              "random token from the ordinary ids only (not in special_ids).")
        if bool((drawn < 0).any() or (drawn >= _MLM_VOCAB).any()):
            raise CheckFailed("some of your random replacements lie outside 0..vocab_size - 1.")
    shares = [int(x.sum()) / m for x in (to_mask, to_random, kept)]
    targets = (0.8, 0.1, 0.1)
    if any(abs(s - t) > 5 * math.sqrt(t * (1 - t) / m) for s, t in zip(shares, targets,
                                                                        strict=True)):
        said = (f"of the chosen positions, {_pct(shares[0])} became [MASK], {_pct(shares[1])} "
                f"a random token and {_pct(shares[2])} stayed unchanged; BERT's split is "
                "80 / 10 / 10")
        if shares[0] > 0.97:
            raise CheckFailed(said + ": you replace every chosen token with [MASK].")
        if shares[1] < 0.02:
            raise CheckFailed(said + ": you never put in a random token.")
        if shares[2] < 0.02:
            raise CheckFailed(said + ": you never leave a chosen token unchanged.")
        raise CheckFailed(said + ". Draw one number per chosen position: below 0.8 -> [MASK], "
                                 "0.8 to 0.9 -> random, 0.9 and above -> unchanged.")
    # A vocabulary of 3 ordinary tokens: a random token drawn from all 8 ids is often special.
    small = ids.remainder(3) + 5
    small[ids < 5] = ids[ids < 5]  # the same specials and padding
    small_case = "a batch whose vocabulary has 3 ordinary tokens (vocab_size=8)"
    s_inputs, s_labels = _corrupt_outputs(fn, small, mask, 2, small_case, vocab_size=8)
    s_changed = (s_labels != -100) & (s_inputs != _MLM_MASK_ID) & (s_inputs != small)
    if bool(torch.isin(s_inputs[s_changed], torch.tensor(_MLM_SPECIALS)).any()):
        raise CheckFailed("some of your random replacements are special tokens (seen on "
                          f"{small_case}); draw the random token from the ordinary ids only.")
    again = _corrupt_outputs(fn, ids, mask, 0, case)
    if not (torch.equal(again[0], inputs) and torch.equal(again[1], labels)):
        raise CheckFailed("two calls with generators seeded alike gave different results: draw "
                          "every random number from `generator` (torch.rand(..., "
                          "generator=generator)).")
    other = _corrupt_outputs(fn, ids, mask, 1, case)
    if torch.equal(other[1], labels):
        raise CheckFailed("generators with different seeds gave the same choice of positions: "
                          "draw the positions at random, from `generator`.")
    print(f"✓ MLM corruption ({_name(fn)}): {n_eligible:,} eligible positions, 15 % chosen and "
          "80 / 10 / 10 within 5 standard errors; no special or padding position chosen; "
          "reproducible")
    return True


# --- The loss on the chosen positions (Lesson 5, §1) -------------------------------------------


def _masked_loss_reference(logits, labels):
    scored = labels != -100
    if not scored.any():
        return torch.tensor(0.0)
    return _F.cross_entropy(logits[scored], labels[scored])


def _masked_loss_all_positions(logits, labels):  # divides by b * n, not by the chosen count
    total = _F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100,
                             reduction="sum")
    return total / labels.numel()


def _masked_loss_sum(logits, labels):
    return _F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100,
                            reduction="sum")


def _masked_loss_per_row(logits, labels):  # the mean of the sequences' means
    rows = [_F.cross_entropy(lg[lb != -100], lb[lb != -100]) for lg, lb in zip(logits, labels,
                                                                                strict=True)
            if (lb != -100).any()]
    return torch.stack(rows).mean() if rows else torch.tensor(0.0)


def _masked_loss_nan_when_empty(logits, labels):
    return _F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def _masked_loss_negated(logits, labels):
    return -_masked_loss_reference(logits, labels)


def _masked_loss_probabilities(logits, labels):  # 1 - p instead of -log p
    scored = labels != -100
    if not scored.any():
        return torch.tensor(0.0)
    p = torch.softmax(logits[scored], dim=-1).gather(-1, labels[scored][:, None])
    return (1 - p).mean()


_MASKED_LOSS_MISTAKES = [
    ("with no chosen position your loss is NaN (a mean over nothing); return 0 then: a batch "
     "without chosen positions carries no signal.", _masked_loss_nan_when_empty),
    ("you divide by all b * n positions; the loss is the mean over the chosen positions only, so "
     "divide by their number.", _masked_loss_all_positions),
    ("you sum the losses of the chosen positions; take their mean.", _masked_loss_sum),
    ("you average each sequence's loss, then the sequences; average over all chosen positions "
     "together, so that a sequence with more of them counts more.", _masked_loss_per_row),
    ("your loss has the wrong sign: cross-entropy is -log p of the right token, a positive "
     "number.", _masked_loss_negated),
    ("you use 1 - p of the right token; the loss is -log p (cross-entropy).",
     _masked_loss_probabilities),
]


def _masked_loss_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(11)
    cases = []
    logits = torch.randn(2, 5, 7, generator=g)
    labels = torch.tensor([[-100, 3, -100, -100, 6], [1, -100, -100, 2, -100]])
    cases.append((logits, labels))
    logits = torch.randn(2, 6, 9, generator=g)
    labels = torch.tensor([[4, 0, 8, 2, -100, 5], [-100, -100, -100, -100, 7, -100]])
    cases.append((logits, labels))  # rows with 5 and 1 chosen: per-row means differ
    cases.append((torch.randn(1, 4, 5, generator=g), torch.full((1, 4), -100)))  # none chosen
    logits = torch.randn(3, 8, 11, generator=g)
    labels = torch.randint(11, (3, 8), generator=g)
    labels[torch.rand(3, 8, generator=g) > 0.3] = -100
    labels[0, 0] = 5  # at least one chosen
    cases.append((logits, labels))
    cases.append((torch.randn(2, 3, 4, generator=g), torch.randint(4, (2, 3), generator=g)))
    return cases


def check_masked_loss(fn: Callable) -> bool:
    """Check ``fn(logits, labels) -> loss``: cross-entropy at the chosen positions (Lesson 5, §1).

    ``logits`` (b, n, V), ``labels`` (b, n) with -100 where no loss is taken; the answer is the
    mean of -log p(right token) over the chosen positions, and 0 when none is chosen (as
    :func:`encoderlab.objectives.mlm_loss`).
    """
    _check_callable(fn)
    cases = _masked_loss_cases()
    outputs = []
    for logits, labels in cases:
        case = f"logits of shape {tuple(logits.shape)}, labels {labels.tolist()}"
        out = _as_tensor(_call(fn, (logits.clone(), labels.clone()), case), "a 0-d loss tensor")
        if out.numel() != 1:
            raise CheckFailed(f"your loss has shape {tuple(out.shape)} on {case}; return one "
                              "number, the mean over the chosen positions.")
        outputs.append(out.reshape(()).double())
    references = [_masked_loss_reference(*c).double() for c in cases]
    wrong = [i for i, (o, r) in enumerate(zip(outputs, references, strict=True))
             if not _close(o, r)]
    if not wrong:
        return _success("masked-token loss", fn, len(cases))
    message = _diagnose(outputs, cases, _MASKED_LOSS_MISTAKES,
                        lambda a, b: _close(a, b.double()), wrong)
    if message:
        raise CheckFailed(message)
    i = wrong[0]
    raise CheckFailed(
        f"your loss is {float(outputs[i]):.4f} but the mean cross-entropy over the chosen "
        f"positions is {float(references[i]):.4f} on case {i + 1} (labels "
        f"{cases[i][1].tolist()}); take -log_softmax at the right token where labels != -100."
    )

"""Lesson 4's checker of §6: what each key adds to a query's output, Kobayashi et al.'s
||A_ij f_k(h_j)|| (the weight times the norm of the value vector it fetches, through W_O)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch.nn import functional as F

from encoderlab.attention import MultiHeadAttention
from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    as_tensor,
    checker,
    close,
    differs,
    forbidding,
    leaving_inputs,
    require_callable,
    run,
)

__all__ = ["check_value_contributions"]

# --- What each key adds: Kobayashi's ||A_ij f_k(h_j)|| (Lesson 4, §6) --------------------------


def _contribution_variant(attention, h, weights, *, w_o=True, value_bias=True, transpose=True,
                          split="heads_first", output_bias=False, by_query=False):
    """||A_ij f_k(h_j)|| with one switch turned: each non-default switch is a known mistake."""
    b, n, d = h.shape
    heads, d_k = attention.n_heads, attention.d_k
    with torch.no_grad():
        v = F.linear(h, attention.w_v.weight, attention.w_v.bias if value_bias else None)
        if split == "heads_first":  # column c of head k is k * d_k + c
            v = v.view(b, n, heads, d_k).transpose(1, 2)  # (b, heads, n, d_k)
        else:  # columns interleaved: c * heads + k
            v = v.view(b, n, d_k, heads).permute(0, 3, 1, 2)
        if not w_o:
            size = v.norm(dim=-1)  # (b, heads, n): the value's norm, before W_O
        else:
            matrix = attention.w_o.weight.T if transpose else attention.w_o.weight  # (d, d)
            slices = (matrix.reshape(heads, d_k, d) if split == "heads_first"
                      else matrix.reshape(d_k, heads, d).transpose(0, 1))  # (heads, d_k, d)
            f = torch.einsum("bknc,kcd->bknd", v, slices)
            if output_bias:
                f = f + attention.w_o.bias
            size = f.norm(dim=-1)  # (b, heads, n)
    if by_query:
        return weights * size[:, :, :, None]  # indexed by the query i: A_ij ||f(h_i)||
    return weights * size[:, :, None, :]  # (b, heads, n_q, n_k)


_CONTRIBUTION_MISTAKES = [
    ("you took the norm of the value vector h_j W_V^(k) + b_V^(k) itself, before W_O: that is "
     "what the head fetches in its own d_k coordinates, not what it writes into the stream.",
     "carry each head's value through its slice of W_O: f_k(h_j) = v_j^(k) W_O^(k), rows "
     "k d_k to (k + 1) d_k - 1 of W_O = attention.w_o.weight.T.",
     partial(_contribution_variant, w_o=False)),
    ("you left out W_V's bias b_V: f_k(h_j) starts from h_j W_V + b_V, what the hook on w_v "
     "sees and what attention averages.",
     "v = attention.w_v(h), the layer with its bias, not h @ attention.w_v.weight.T.",
     partial(_contribution_variant, value_bias=False)),
    ("you used attention.w_o.weight without transposing it: nn.Linear stores (out, in), so its "
     "rows are outputs, not the heads' inputs.",
     "W_O = attention.w_o.weight.T (d_in, d_out); head k's slice is rows k d_k to "
     "(k + 1) d_k - 1.",
     partial(_contribution_variant, transpose=False)),
    ("your heads take interleaved columns (view(b, n, d_k, h)) of the values and rows of W_O, "
     "but head k owns the d_k consecutive columns k d_k ... (k + 1) d_k - 1.",
     "v.view(b, n, h, d_k).transpose(1, 2), as in §1.",
     partial(_contribution_variant, split="interleaved")),
    ("you added W_O's bias to each head's f_k: the bias is added once, after the heads are "
     "summed, and belongs to no key.",
     "f_k(h_j) = (h_j W_V^(k) + b_V^(k)) W_O^(k), without b_O.",
     partial(_contribution_variant, output_bias=True)),
    ("you scaled the weights by the size of the query's f, ||f_k(h_i)||, not the key's: entry "
     "(i, j) is what key j adds to query i.",
     "weights * size[:, :, None, :], size indexed by the key j (the last axis).",
     partial(_contribution_variant, by_query=True)),
]


def _contribution_cases() -> list[tuple]:
    """(attention, h, weights): random small heads, value and output biases not near 0."""
    g = torch.Generator().manual_seed(6)
    cases = []
    for b, n, d, heads in [(1, 4, 8, 2), (2, 5, 12, 3), (1, 6, 16, 4), (2, 3, 8, 1)]:
        attention = MultiHeadAttention(d, heads).eval()
        with torch.no_grad():
            for linear in (attention.w_q, attention.w_k, attention.w_v, attention.w_o):
                linear.weight.copy_(torch.randn(d, d, generator=g) / d**0.5)
                linear.bias.copy_(0.5 * torch.randn(d, generator=g))
            h = torch.randn(b, n, d, generator=g)
            weights = attention(h)[1]  # (b, heads, n, n)
        cases.append((attention, h, weights))
    return cases


def _contribution_reference(attention, h, weights) -> torch.Tensor:
    from encoderlab.lessons.l04_inspect_stack import value_contributions

    return value_contributions(attention, h, weights)


def _contribution_answer(result, where, attention, h, weights) -> torch.Tensor:
    out = as_tensor(result, "the norms, shape (b, heads, n, n)")
    if tuple(out.shape) != tuple(weights.shape):
        raise CheckFailed(
            f"your output has shape {tuple(out.shape)}, but weights has {tuple(weights.shape)} "
            f"(on {where}): one norm per head, query and key.",
            "keep the heads apart and do not sum over the keys: weights * size[:, :, None, :].")
    return out.double()


_CONTRIBUTION = Exercise(
    title="what each key adds",
    cases=_contribution_cases,
    arguments=lambda attention, h, weights: (attention, h.clone(), weights.clone()),
    answer=_contribution_answer,
    reference=_contribution_reference,
    describe=lambda attention, h, weights: (
        f"h of shape {tuple(h.shape)}, {attention.n_heads} heads of d_k = {attention.d_k}"),
    same=close,
    mistakes=_CONTRIBUTION_MISTAKES,
    fallback=lambda attempt: differs(
        attempt, "output", "weights * ||(h W_V + b_V)^(k) W_O^(k)||, key by key",
        "check each step: v = attention.w_v(h), split into heads as in §1, each head through "
        "its d_k rows of attention.w_o.weight.T, the norm over d, times weights[:, :, i, j]."),
)


@checker
def check_value_contributions(fn: Callable) -> bool:
    """Check ``fn(attention, h, weights)``: the norms ||A_ij f_k(h_j)|| of what key j adds to
    query i in head k, shape (b, heads, n, n) (Lesson 4, §6; Kobayashi et al., 2020).

    The reference is :func:`encoderlab.lessons.l04_inspect_stack.value_contributions`, which
    the exercise asks you to write: calling it fails."""
    from encoderlab.lessons import l04_inspect_stack

    require_callable(fn)
    guarded = forbidding(fn, [(l04_inspect_stack, "value_contributions",
                               "l04_inspect_stack.value_contributions")],
                         "write it yourself: the value vectors, each head's slice of W_O, the "
                         "norm over d, times the weights.")
    return run(_CONTRIBUTION, leaving_inputs(guarded, ("h", "weights")))

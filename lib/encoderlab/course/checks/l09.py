"""Lesson 9's checkers: the online softmax, softmax(s) v accumulated over chunks of keys (§2), and
the tiled backward pass, dQ, dK, dV recomputed tile by tile from the saved log-sum-exp (§2)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import partial, wraps

import torch
from torch.nn import functional as F

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    Message,
    as_tensor,
    checker,
    close,
    differs,
    require_callable,
    run,
)

__all__ = ["check_online_softmax", "check_tiled_backward"]


def _online_variant(s, v, chunk_size, *, rescale=True, sign=1.0, track_max=True,
                    per_chunk=False, rescale_l=True, rescale_acc=True, chunk_max=False,
                    divide=True, drop_last=False, own_max_rescaled=False, fa1_unweighted=False,
                    guard=False):
    """softmax(s) v accumulated chunk by chunk, with one of the usual slips switched on.

    ``guard=False`` is the loop as most learners first write it: on a row whose first chunk is
    fully masked, m_old = m_new = -inf and exp(-inf - (-inf)) is NaN. ``guard=True``
    exponentiates against a finite stand-in for -inf instead, so the masked terms give 0."""
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
    floor = torch.finfo(s.dtype).min  # a finite stand-in for -inf (guard=True)
    for c in chunks:
        tile = s[..., c:c + chunk_size]  # (..., n_q, chunk)
        m_new = torch.maximum(m, tile.amax(dim=-1, keepdim=True)) if track_max else m
        m_ref = m_new.clamp(min=floor) if guard else m_new  # what the chunk is measured against
        if chunk_max or own_max_rescaled:  # each chunk exponentiated against its own max
            p = torch.exp(tile - tile.amax(dim=-1, keepdim=True))  # (..., n_q, chunk)
            # chunk_max: the old sums never re-measured; own_max_rescaled: the old sums
            # re-measured to m_new, but the chunk's own terms left against the chunk's max
            alpha = torch.exp(m - m_ref) if own_max_rescaled else torch.ones_like(m)
        else:
            p = torch.exp(tile - m_ref)  # (..., n_q, chunk)
            alpha = torch.exp(sign * (m - m_ref)) if rescale else torch.ones_like(m)
        l_new = l_sum * (alpha if rescale_l else 1.0) + p.sum(dim=-1, keepdim=True)
        if fa1_unweighted:  # FA-1's normalised output, without the factor l_old / l_new
            acc = acc * alpha + (p @ v[..., c:c + chunk_size, :]) / l_new
        else:
            acc = acc * (alpha if rescale_acc else 1.0) + p @ v[..., c:c + chunk_size, :]
        l_sum, m = l_new, m_new
    if fa1_unweighted:
        return acc  # already normalised, chunk by chunk
    return acc / l_sum if divide else acc


def _either(**slip):
    """A named mistake's outputs, as learners write it: without and with the -inf guard."""

    def wrong(s, v, chunk_size):
        return (_online_variant(s, v, chunk_size, **slip),
                _online_variant(s, v, chunk_size, guard=True, **slip))

    return wrong


def _same_as_either(answer, wrongs) -> bool:
    return any(close(answer, w) for w in wrongs)


_ONLINE_MISTAKES = [
    ("your running sums are not rescaled when the max grows: the terms summed earlier stay "
     "measured against an old max.",
     "multiply the old denominator l and the old numerator by exp(m_old - m_new) before adding "
     "the new chunk.",
     _either(rescale=False)),
    ("you rescale the running denominator l but not the running numerator: when the max grows, "
     "its old terms stay measured against the old max.",
     "multiply the old numerator by exp(m_old - m_new) too, before adding the new chunk's "
     "p @ v.",
     _either(rescale_acc=False)),
    ("you rescale the running numerator but not the running denominator l: when the max grows, "
     "its old terms stay measured against the old max.",
     "multiply the old l by exp(m_old - m_new) too, before adding the new chunk's sum.",
     _either(rescale_l=False)),
    ("you subtract each chunk's own max and add the chunks up as they are, but terms measured "
     "against different maxima cannot be added.",
     "keep one running max m over all chunks seen, exponentiate s - m_new, and re-measure the "
     "old sums by exp(m_old - m_new).",
     _either(chunk_max=True)),
    ("you exponentiate each chunk against its own max and re-measure the old sums to the new "
     "running max, but not the chunk's own terms: they stay measured against the chunk's max.",
     "exponentiate every chunk against the running max, exp(s - m_new); then old and new terms "
     "share one reference.",
     _either(own_max_rescaled=True)),
    ("you keep the output normalised as FlashAttention-1 writes it, o = alpha o + p v / l_new, "
     "but the old output was divided by l_old, so it needs the factor l_old / l_new too.",
     "use o = (l_old alpha o + p v) / l_new, or keep the numerator unnormalised and divide "
     "once at the end (FlashAttention-2's form).",
     _either(fa1_unweighted=True)),
    ("your output is NaN on a row whose first chunk is fully masked (all -inf): there m_old = "
     "m_new = -inf, and exp(-inf - (-inf)) is NaN.",
     "exponentiate against a finite stand-in while the max is still -inf, e.g. m_ref = "
     "m_new.clamp(min=torch.finfo(s.dtype).min): the masked terms and the old sums then give 0.",
     _either()),
    ("you rescale by exp(m_new - m_old), the wrong sign: the old sums were computed with "
     "exp(s - m_old) and must become exp(s - m_new).",
     "multiply them by exp(m_old - m_new), which is <= 1.",
     _either(sign=-1.0)),
    ("you return the running numerator without dividing it by the running denominator l.",
     "after the last chunk, the output is acc / l.",
     _either(divide=False)),
    ("your loop skips the last chunk when it is shorter than chunk_size (n_kv is not always a "
     "multiple of chunk_size).",
     "loop over range(0, n_kv, chunk_size) and slice s[:, c:c + chunk_size], shorter at the end.",
     _either(drop_last=True)),
    ("you normalise each chunk on its own and combine the chunk outputs, but a chunk's softmax "
     "ignores the other chunks' scores.",
     "carry the running max m and denominator l across chunks and divide once, at the end.",
     _either(per_chunk=True)),
    ("you do not subtract a running max: exp(s) overflows to inf for scores above ~88 in "
     "float32 and the output becomes NaN.",
     "keep m = max of the scores seen so far and exponentiate s - m.",
     _either(track_max=False)),
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
    """(s, v, chunk_size, reads) cases; ``reads`` is filled by the watched scores (see above)."""
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
        cases.append((s, v, chunk, []))  # [] collects what the answer reads of s at once
    # A masked case: row 1's first chunk is all -inf (m stays -inf after it), row 3's middle one.
    s = torch.randn(4, 10, generator=g) * 2.0
    s[1, :4] = float("-inf")
    s[3, 4:8] = float("-inf")
    cases.append((s, torch.randn(10, 3, generator=g), 4, []))
    return cases


def _describe_online(s, v, chunk_size, reads) -> str:
    return f"scores {tuple(s.shape)}, values {tuple(v.shape)}, chunk_size={chunk_size}"


# The softmax family the exercise forbids over a whole row: (owner, attribute, name in messages).
# While the learner's function runs, each is replaced by a version that notes a call whose
# reduced dimension is longer than chunk_size (see _forbidding_full_row_softmax).
_SOFTMAX_FAMILY = [
    (torch, "softmax", "torch.softmax"), (torch, "log_softmax", "torch.log_softmax"),
    (torch, "logsumexp", "torch.logsumexp"),
    (torch.special, "softmax", "torch.special.softmax"),
    (torch.special, "log_softmax", "torch.special.log_softmax"),
    (torch.special, "logsumexp", "torch.special.logsumexp"),
    (F, "softmax", "F.softmax"), (F, "log_softmax", "F.log_softmax"),
    (torch.Tensor, "softmax", "Tensor.softmax"),
    (torch.Tensor, "log_softmax", "Tensor.log_softmax"),
    (torch.Tensor, "logsumexp", "Tensor.logsumexp"),
]
FULL_ROW_SOFTMAX = "called a softmax over a whole row"  # the start of the message, for tests


def _guarded(original, name, chunk_size, calls):
    """``original`` that first notes a call reducing more than ``chunk_size`` entries at once."""

    @wraps(original)
    def guarded(x, *args, **kwargs):
        dim = kwargs.get("dim", args[0] if args else None)
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            dims = [dim] if isinstance(dim, int) else list(dim) if dim is not None else [-1]
            length = math.prod(x.shape[d] for d in dims)
            if length > chunk_size:
                calls.append(f"{name} over {length} entries at once")
        return original(x, *args, **kwargs)

    return guarded


def _forbidding_full_row_softmax(fn: Callable) -> Callable:
    """``fn`` run with the softmax family noting any call over more than one chunk of keys.

    The watched scores (:class:`_ChunkedScores`) see what is computed on ``s`` itself; a learner
    who rebuilds the row first (``torch.cat(s.split(c, 1), 1)``, ``torch.Tensor(s)``) escapes
    them, but not these. The calls are noted (not raised, which a ``try`` could swallow) in the
    case's ``reads`` list, tagged so that :func:`_online_output` names them; every attribute is
    restored in ``finally``, whatever ``fn`` does.
    """

    @wraps(fn)
    def guarded_fn(s, v, chunk_size):
        calls = []
        saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in _SOFTMAX_FAMILY]
        try:
            for (owner, attr, original), (_, _, name) in zip(saved, _SOFTMAX_FAMILY, strict=True):
                setattr(owner, attr, _guarded(original, name, chunk_size, calls))
            return fn(s, v, chunk_size)
        finally:
            for owner, attr, original in saved:
                setattr(owner, attr, original)
            if calls and isinstance(s, _ChunkedScores):
                s.reads.insert(0, ("softmax", calls[0]))

    return guarded_fn


def _online_output(result, where, s, v, chunk_size, reads) -> torch.Tensor:
    """The (n_q, d_v) output, provided the answer never read more than a chunk of s at once."""
    out = as_tensor(_plain(result), "the (n_q, d_v) output")
    if reads and isinstance(reads[0], tuple):
        raise CheckFailed(
            f"your function {FULL_ROW_SOFTMAX} ({reads[0][1]}, with chunk_size={chunk_size}, "
            f"on {where}), which the exercise forbids: the point is to never hold a whole row "
            "of probabilities.",
            "loop over chunks s[:, c:c + chunk_size], keep a running max m, denominator l and "
            "numerator, and divide once at the end.",
        )
    if reads:
        raise CheckFailed(
            f"your function computed {reads[0]} at once (on {where}), but the exercise reads "
            "the scores only chunk_size columns at a time.",
            "slice a chunk, s[:, c:c + chunk_size], and compute with it alone; a running max m, "
            "denominator l and numerator replace a softmax (or a max) over the whole row.",
        )
    if tuple(out.shape) != (s.shape[0], v.shape[1]):
        raise CheckFailed(f"your output has shape {tuple(out.shape)} on {where}; expected "
                          f"(n_q, d_v) = {(s.shape[0], v.shape[1])}.")
    return out.double()


def _online_fallback(attempt) -> Message:
    if any(not torch.isfinite(attempt.answers[k]).all() for k in attempt.wrong):
        return (
            f"your output has inf or NaN on {attempt.where(attempt.first)}.",
            "subtract the running max before exponentiating, and divide by l only once, at the "
            "end.",
        )
    return differs(
        attempt, "output", "softmax(s) v",
        "print m, l and the output after each chunk and compare them with the dense softmax "
        "of the keys seen so far.",
    )


_ONLINE = Exercise(
    title="online softmax",
    cases=_online_cases,
    arguments=lambda s, v, chunk_size, reads: (
        _ChunkedScores.watch(s.clone(), chunk_size, reads), v.clone(), chunk_size),
    answer=_online_output,
    reference=lambda s, v, chunk_size, reads: torch.softmax(s.double(), dim=-1) @ v.double(),
    describe=_describe_online,
    same=close,
    mistakes=_ONLINE_MISTAKES,
    same_mistake=_same_as_either,
    mistake_inputs=lambda s, v, chunk_size, reads: (s, v, chunk_size),
    fallback=_online_fallback,
)


@checker
def check_online_softmax(fn: Callable) -> bool:
    """Check ``fn(s, v, chunk_size)`` = softmax(s) v, accumulated over chunks of keys
    (Lesson 9, §2). ``s`` is (n_q, n_kv) scores, ``v`` is (n_kv, d_v) values.

    ``s`` arrives watched (:class:`_ChunkedScores`): a function that computes anything on more
    than ``chunk_size`` key columns at once (``torch.softmax(s, -1)``, ``s.amax(1)``) fails,
    whatever it returns. The softmax family (``torch.softmax``, ``F.softmax``,
    ``Tensor.softmax``, their log versions, ``logsumexp``) is also watched while ``fn`` runs
    (:func:`_forbidding_full_row_softmax`): calling one over more than ``chunk_size`` entries
    fails, even on a row rebuilt from its chunks. A wrong result is matched against the usual
    mistakes (``_ONLINE_MISTAKES``), which are named in words."""
    require_callable(fn)
    return run(_ONLINE, _forbidding_full_row_softmax(fn))


# --- The tiled backward pass (§2) ----------------------------------------------------------------


def _backward_variant(q, k, v, out, lse, grad_out, block_size, *, use_d=True, normalise=True,
                      scale_grads=True, transpose_dv=True, transpose_dk=True, tile_d=False,
                      lse_per_row=True, scale_s=True, ds_sign=1.0):
    """dQ, dK, dV of softmax(QK^T / sqrt(d)) V, tile by tile from L, with one slip switched on."""
    q, k, v, out, lse, grad_out = (t.double() for t in (q, k, v, out, lse, grad_out))
    n, d = q.shape
    scale = 1.0 / math.sqrt(d)
    d_row = (grad_out * out).sum(dim=-1, keepdim=True)  # D_i = rowsum(dO * O), (n, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for c0 in range(0, n, block_size):
        k_j, v_j = k[c0:c0 + block_size], v[c0:c0 + block_size]
        for r0 in range(0, n, block_size):
            q_i, do_i = q[r0:r0 + block_size], grad_out[r0:r0 + block_size]
            s = q_i @ k_j.T * (scale if scale_s else 1.0)  # (B_r, B_c)
            if not normalise:
                p = torch.exp(s)  # exp of the scores, never divided by the row's sum
            elif lse_per_row:
                p = torch.exp(s - lse[r0:r0 + block_size, None])
            else:  # L laid along the keys: L_j subtracted from column j
                p = torch.exp(s - lse[None, c0:c0 + block_size])
            dp = do_i @ v_j.T  # (B_r, B_c)
            if tile_d:
                d_i = (p * dp).sum(dim=-1, keepdim=True)  # D over this key tile only
            else:
                d_i = d_row[r0:r0 + block_size] if use_d else 0.0
            ds = ds_sign * p * (dp - d_i)
            g = scale if scale_grads else 1.0
            dv[c0:c0 + block_size] += (p.T if transpose_dv else p) @ do_i
            dq[r0:r0 + block_size] += ds @ k_j * g
            dk[c0:c0 + block_size] += (ds.T if transpose_dk else ds) @ q_i * g
    return dq, dk, dv


_BACKWARD_MISTAKES = [
    ("your dS leaves out the D term the softmax's derivative needs: dQ and dK come out wrong "
     "while dV is right.",
     "dS = P * (dP - D), where D_i = rowsum(dO_i * O_i), computed once from dO and O before the "
     "loop.",
     partial(_backward_variant, use_d=False)),
    ("your D is summed over one key tile only, but D_i = rowsum(P_i * dP_i) needs the whole "
     "row, which a tile never holds.",
     "compute D = rowsum(dO * O) once, before the loop: the whole row's sum, from two (n, d) "
     "matrices.",
     partial(_backward_variant, tile_d=True)),
    ("your P is not normalised: exp(S) is not the softmax.",
     "subtract the saved log-sum-exp, P = exp(S - L[:, None]), which divides each row by its sum.",
     partial(_backward_variant, normalise=False)),
    ("your P subtracts L along the wrong axis, but L has one number per query row.",
     "P_ij = exp(S_ij - L_i) needs L[rows, None] (a column), not L[None, cols].",
     partial(_backward_variant, lse_per_row=False)),
    ("your dQ and dK miss the scale 1/sqrt(d) of the scores S = QK^T / sqrt(d).",
     "the chain rule multiplies dS K and dS^T Q by 1/sqrt(d) too.",
     partial(_backward_variant, scale_grads=False)),
    ("your P leaves the scores unscaled when it recomputes them: exp(QK^T - L) is not the "
     "forward's P, so dV is wrong as well as dQ and dK.",
     "recompute S_ij = Q_i K_j^T / sqrt(d) exactly as the forward did, then P_ij = "
     "exp(S_ij - L_i).",
     partial(_backward_variant, scale_s=False)),
    ("your dS has the wrong sign: dQ and dK come out as minus the right ones, while dV is right.",
     "dS = P * (dP - D), with dP = dO V^T: the row's dP minus its mean under P, not the other "
     "way round.",
     partial(_backward_variant, ds_sign=-1.0)),
]


def _backward_cases() -> list[tuple]:
    """(q, k, v, out, lse, grad_out, block_size) in float32, with O and L from a dense forward."""
    g = torch.Generator().manual_seed(19)
    cases = []
    # (n, d, block, score scale): a readable case, a block that does not divide n, peaked rows,
    # one tile only, and a long case where an n x n tensor is far above the memory budget.
    for n, d, block, scale in [(8, 4, 4, 1.0), (10, 3, 4, 1.0), (12, 4, 5, 3.0), (6, 2, 8, 1.0),
                               (96, 8, 16, 1.0)]:
        q = torch.randn(n, d, generator=g, dtype=torch.float64) * scale
        k, v, grad_out = (torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(3))
        s = q @ k.T / math.sqrt(d)
        lse = torch.logsumexp(s, dim=-1)  # (n,)
        out = torch.softmax(s, dim=-1) @ v  # (n, d)
        cases.append(tuple(t.float() for t in (q, k, v, out, lse, grad_out)) + (block,))
    return cases


def _budget(q, block_size) -> int:
    """Entries the largest tensor may hold: a (B, B) tile, a row strip (B, n) or an (n, d)."""
    n, d = q.shape
    return n * max(d, block_size)


def _sizes_made(func, args, kwargs, result) -> list[tuple[int, tuple]]:
    """(entries, shape) of every tensor a torch call returned, plus the score matrix a fused
    attention kernel builds inside it, which its output does not show."""
    made = [(t.numel(), tuple(t.shape)) for t in
            (result if isinstance(result, (tuple, list)) else [result])
            if isinstance(t, torch.Tensor)]
    if func is F.scaled_dot_product_attention and len(args) >= 2:
        n_q, n_kv = args[0].shape[-2], args[1].shape[-2]
        made.append((math.prod(args[0].shape[:-1]) * n_kv, (*args[0].shape[:-2], n_q, n_kv)))
    return made


def _watching_sizes(fn: Callable, largest: list) -> Callable:
    """``fn`` run under a torch function mode that notes the largest tensor any call makes.

    Every torch function, tensor method and operator (``@``, ``*``, slicing) passes through the
    mode, so a (n, n) product is seen wherever it is made. The note goes to ``largest`` (one
    (entries, shape) per call of ``fn``), read by :func:`_backward_output`: noted, not raised,
    so that a ``try`` in ``fn`` cannot hide it.
    """
    from torch.overrides import TorchFunctionMode

    class _Sizes(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.biggest = (0, ())

        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for entries, shape in _sizes_made(func, args, kwargs, result):
                if entries > self.biggest[0]:
                    self.biggest = (entries, shape)
            return result

    @wraps(fn)
    def watched(*args):
        sizes = _Sizes()
        try:
            with sizes:
                return fn(*args)
        except RuntimeError as error:  # a missing transpose meets the short last tile
            if error.args and "cannot be multiplied" in str(error.args[0]):
                error.args = (f"{error.args[0]}; {TRANSPOSE_HINT}", *error.args[1:])
            raise
        finally:
            largest.append(sizes.biggest)

    return watched


TRANSPOSE_HINT = (
    "a tile at the end of a row or column is not square, so a missing transpose shows up as "
    "a shape error there: O = PV gives dV_j = P_ij^T dO_i, and S = QK^T gives "
    "dK_j = dS_ij^T Q_i / sqrt(d)"
)
FULL_MATRIX = "built a tensor as large as the n x n matrix"  # the start of the message, for tests


def _backward_output(result, where, q, k, v, out, lse, grad_out, block_size, *, largest):
    """(dQ, dK, dV) as float64, provided nothing near n x n was built on a long case."""
    entries, shape = largest[-1] if largest else (0, ())
    n = q.shape[0]
    if n * n > _budget(q, block_size) and entries > _budget(q, block_size):
        raise CheckFailed(
            f"your function {FULL_MATRIX} (a tensor of shape {shape}, {entries} entries, on "
            f"{where}), which the exercise forbids: the point is that P and dS exist one "
            f"({block_size}, {block_size}) tile at a time.",
            "loop over key tiles and query tiles, recompute each tile of P from Q_i, K_j and L, "
            "and add its contributions to dQ, dK and dV.",
        )
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise CheckFailed(f"your function returned {type(result).__name__}, not three "
                          "gradients.", "return a tuple (dq, dk, dv), each of shape (n, d).")
    grads = tuple(as_tensor(x, "a tuple (dq, dk, dv) of tensors").double() for x in result)
    for name, x, like in zip(("dq", "dk", "dv"), grads, (q, k, v), strict=True):
        if x.shape != like.shape:
            raise CheckFailed(f"your {name} has shape {tuple(x.shape)} on {where}; expected "
                              f"{tuple(like.shape)}, the shape of {name[1]}.")
    return grads


def _dense_gradients(q, k, v, out, lse, grad_out, block_size):
    """Autograd through dense attention, in float64: the answer."""
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    o = torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=-1) @ v
    return torch.autograd.grad(o, (q, k, v), grad_out.double())


def _same_gradients(mine, right) -> bool:
    return all(close(a, b) for a, b in zip(mine, right, strict=True))


def _backward_fallback(attempt) -> tuple[str, str]:
    first = attempt.first
    mine, right = attempt.answers[first], attempt.references[first]
    wrong = [(name, (a - b).abs().max().item()) for name, a, b in zip(("dQ", "dK", "dV"), mine,
                                                                      right, strict=True)
             if not close(a, b)]
    listed = ", ".join(f"{name} by up to {gap:.3g}" for name, gap in wrong)
    diagnosis = (f"your gradients differ from autograd through dense attention on "
                 f"{attempt.where(first)}: {listed}.")
    if any(name == "dV" for name, _ in wrong):  # dV = P^T dO needs only P: P itself is wrong
        return (f"{diagnosis[:-1]}; dV, which needs only P, is wrong too, so your P differs "
                "from the forward's.",
                "recompute S_ij = Q_i K_j^T / sqrt(d) exactly as in the forward, then "
                "P_ij = exp(S_ij - L_i), and dV_j = sum over i of P_ij^T dO_i.")
    return (f"{diagnosis[:-1]}; dV is right, so P is right and the error is in dS or after it.",
            "dQ and dK need dS = P * (dP - D), with dP = dO V^T and D = rowsum(dO * O): check "
            "one tile of dS by hand against the dense formulas.")


_BACKWARD = Exercise(
    title="tiled backward pass",
    cases=_backward_cases,
    arguments=lambda *case: tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in case),
    answer=_backward_output,  # bound to the call's size log in check_tiled_backward
    reference=_dense_gradients,
    describe=lambda q, k, v, out, lse, grad_out, block_size: (
        f"n={q.shape[0]}, d={q.shape[1]}, block_size={block_size}"),
    same=_same_gradients,
    mistakes=_BACKWARD_MISTAKES,
    fallback=_backward_fallback,
)


@checker
def check_tiled_backward(fn: Callable) -> bool:
    """Check ``fn(q, k, v, out, lse, grad_out, block_size)`` = (dQ, dK, dV) of
    softmax(QK^T / sqrt(d)) V (Lesson 9, §2), all (n, d) but ``lse``, (n,).

    The answer is compared with autograd through dense attention. While ``fn`` runs, the size of
    every tensor any operation makes is watched (:func:`_watching_sizes`): on a case where n x n
    is larger than n * max(d, block_size), a tensor above that budget fails, whatever ``fn``
    returns; a (B, B) tile, a (B, n) strip of rows or an (n, d) matrix fit. A wrong result is
    matched against the usual mistakes (``_BACKWARD_MISTAKES``), named in words."""
    require_callable(fn)
    largest: list = []
    exercise = dataclasses.replace(_BACKWARD, answer=partial(_backward_output, largest=largest))
    return run(exercise, _watching_sizes(fn, largest))

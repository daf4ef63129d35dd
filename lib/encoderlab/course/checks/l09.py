"""Lesson 9's checker: the online softmax, softmax(s) v accumulated over chunks of keys (§2)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial, wraps

import torch
from torch.nn import functional as F

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    as_tensor,
    close,
    differs,
    require_callable,
    run,
)

__all__ = ["check_online_softmax"]


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
            "of probabilities. Loop over chunks s[:, c:c + chunk_size], keep a running max m, "
            "denominator l and numerator, and divide once at the end."
        )
    if reads:
        raise CheckFailed(
            f"your function computed {reads[0]} at once (on {where}), but the exercise reads "
            "the scores only chunk_size columns at a time: slice a chunk, "
            "s[:, c:c + chunk_size], and compute with that slice alone; the running max m, "
            "denominator l and numerator are what replace a softmax (or a max) over the "
            "whole row."
        )
    if tuple(out.shape) != (s.shape[0], v.shape[1]):
        raise CheckFailed(f"your output has shape {tuple(out.shape)} on {where}; expected "
                          f"(n_q, d_v) = {(s.shape[0], v.shape[1])}.")
    return out.double()


def _online_fallback(attempt) -> str:
    if any(not torch.isfinite(attempt.answers[k]).all() for k in attempt.wrong):
        return (
            f"your output has inf or NaN on {attempt.where(attempt.first)}: subtract the "
            "running max before exponentiating, and divide by l only once, at the end."
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
    mistake_inputs=lambda s, v, chunk_size, reads: (s, v, chunk_size),
    fallback=_online_fallback,
)


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

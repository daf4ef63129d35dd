"""Input checks shared by the whole library, so that each function's body shows its mathematics.

Every check raises a ``ValueError`` that says what was expected, what was given and, where it
helps, what to do. ``bool`` is a subclass of ``int`` in Python; a count of ``True`` is a mistake,
so the integer checks refuse it.
"""

from __future__ import annotations

import torch

__all__ = [
    "is_int", "shape_of", "check_int", "check_positive_int", "check_fraction", "check_heads",
    "check_qkv",
]


def is_int(value) -> bool:
    """True for an ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def shape_of(value):
    """What an error message says was given: a tensor's shape as a tuple, else the type's name."""
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def check_int(value, name: str, *, at_least: int | None = None, at_most: int | None = None,
              what: str = "", hint: str = "") -> int:
    """``value`` if it is an int in [at_least, at_most]; otherwise a ValueError naming ``name``.

    ``what`` says what the number is ("a sequence length"); ``hint`` says what to do.
    """
    if is_int(value) and (at_least is None or value >= at_least) \
            and (at_most is None or value <= at_most):
        return value
    if at_least == 1 and at_most is None:
        expected = "a positive int"
    elif at_least == 0 and at_most is None:
        expected = "a non-negative int"
    elif at_least is not None and at_most is not None:
        expected = f"an int from {at_least} to {at_most}"
    elif at_least is not None:
        expected = f"an int >= {at_least}"
    elif at_most is not None:
        expected = f"an int <= {at_most}"
    else:
        expected = "an int"
    message = f"{name} must be {expected}{f' ({what})' if what else ''}, got {value!r}."
    raise ValueError(f"{message} {hint}".rstrip())


def check_positive_int(value, name: str, *, what: str = "", hint: str = "") -> int:
    """``value`` if it is an int >= 1 (a count, a size, a number of steps)."""
    return check_int(value, name, at_least=1, what=what, hint=hint)


def check_fraction(value, name: str, *, open_low: bool = False, open_high: bool = False) -> float:
    """``value`` as a float if it is a real number in [0, 1] (ends excluded where asked)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and (0 < value if open_low else 0 <= value) and (value < 1 if open_high else value <= 1)
    if not ok:
        low, high = "(" if open_low else "[", ")" if open_high else "]"
        raise ValueError(f"{name} must be a number in {low}0, 1{high}, got {value!r}.")
    return float(value)


def check_heads(d_model: int, n_heads: int) -> None:
    """``n_heads`` must divide ``d_model``: every head gets d_k = d_model / n_heads dimensions."""
    if not (is_int(d_model) and is_int(n_heads) and n_heads >= 1 and d_model % n_heads == 0):
        raise ValueError(
            f"n_heads must divide d_model so that every head gets d_k = d_model / n_heads "
            f"dimensions; got d_model={d_model!r}, n_heads={n_heads!r}. "
            f"Pick n_heads from the divisors of d_model."
        )


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Queries, keys and values that attention can combine: (..., n, d) tensors with q, k of one
    width d_k and k, v of one length n_kv."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            raise ValueError(
                f"{name} must be a tensor of shape (..., n, d) with at least 2 dimensions, "
                f"got {tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}."
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the last dimension d_k, got q {tuple(q.shape)} and "
            f"k {tuple(k.shape)}. Project both with matrices of width d_k."
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions n_kv, got k {tuple(k.shape)} "
            f"and v {tuple(v.shape)}. Keys and values come from the same sequence."
        )

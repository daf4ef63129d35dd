"""Small statistics for comparing two models on the same examples (Lessons 5-8).

One test serves every paired comparison in the course: two models scored item by item, where
the items they agree on say nothing and each disagreement is, under "neither is better", a
fair coin. That is the exact sign test (McNemar's exact test, for right/wrong scores). Beside
it, how sure one accuracy is (:func:`wilson_interval`) and how sure the difference of two
paired ones is (:func:`paired_difference_interval`).
"""

from __future__ import annotations

import math

import torch

from encoderlab.validate import is_int

__all__ = ["sign_test", "wilson_interval", "paired_difference_interval"]


def sign_test(only_a: int, only_b: int) -> float:
    """The exact two-sided sign test on the items where two models disagree (Lesson 5, §5).

    Under "neither model is better", each of the ``only_a + only_b`` disagreements goes either
    way with probability 1/2; the p-value is twice the binomial tail of the smaller count
    (at most 1).
    """
    for count in (only_a, only_b):
        if not is_int(count) or count < 0:
            raise ValueError(f"counts must be ints >= 0, got {only_a!r} and {only_b!r}.")
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a proportion ``hits / n`` (95 % for z = 1.96) (Lesson 5, §5).

    Unlike the normal approximation p ± z·sqrt(p(1-p)/n), it stays inside [0, 1] and behaves
    at 0 or n hits (Wilson 1927).
    """
    if not is_int(n) or n < 1 or not 0 <= hits <= n:
        raise ValueError(f"need 0 <= hits <= n and n >= 1, got hits={hits!r}, n={n!r}.")
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference_interval(a: torch.Tensor, b: torch.Tensor, resamples: int = 10_000,
                               level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """A bootstrap interval for mean(a) - mean(b), two models scored on the same items
    (Lesson 5, §5).

    ``a`` and ``b`` are (m,) bool hits on the same m blanks; the blanks are resampled with
    replacement (seeded), keeping each blank's pair of outcomes together, and the interval
    holds the central ``level`` of the resampled differences (the percentile method).
    """
    if a.shape != b.shape or a.dim() != 1 or len(a) < 1:
        raise ValueError(f"a and b must be (m,) tensors of one shape, m >= 1; got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}.")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}.")
    g = torch.Generator().manual_seed(seed)
    diff = a.float() - b.float()  # (m,): +1, 0 or -1 per blank
    rows = torch.randint(len(diff), (resamples, len(diff)), generator=g)  # (R, m)
    means = diff[rows].mean(dim=1).sort().values  # (R,)
    low = means[int((1 - level) / 2 * (resamples - 1))].item()
    high = means[int((1 + level) / 2 * (resamples - 1))].item()
    return low, high

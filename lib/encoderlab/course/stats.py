"""Small statistics for comparing two models on the same examples (Lessons 5-8).

One test serves every paired comparison in the course: two models scored item by item, where
the items they agree on say nothing and each disagreement is, under "neither is better", a
fair coin. That is the exact sign test (McNemar's exact test, for right/wrong scores).
"""

from __future__ import annotations

import math

__all__ = ["sign_test"]


def sign_test(only_a: int, only_b: int) -> float:
    """The exact two-sided sign test on the items where two models disagree (Lesson 5, §5).

    Under "neither model is better", each of the ``only_a + only_b`` disagreements goes either
    way with probability 1/2; the p-value is twice the binomial tail of the smaller count
    (at most 1).
    """
    for count in (only_a, only_b):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"counts must be ints >= 0, got {only_a!r} and {only_b!r}.")
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)

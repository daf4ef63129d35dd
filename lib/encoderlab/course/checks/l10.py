"""Lesson 10's checker: the prefix-LM mask, bidirectional over the prefix and causal after it
(§3)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from encoderlab import masks
from encoderlab.course.checks.harness import run, square_mask_exercise

__all__ = ["check_prefix_lm_mask"]


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


_PREFIX_LM = square_mask_exercise(
    title="prefix-LM mask",
    cases=lambda: [(6, 3), (8, 5), (5, 1), (7, 6), (9, 4), (4, 0), (4, 4), (1, 1)],
    reference=masks.prefix_lm,
    describe=lambda n, prefix_len: f"n = {n}, prefix_len = {prefix_len}",
    rule="the prefix-LM mask is one sequence attending to itself: (n, n) = {square}.",
    mistakes=_PREFIX_LM_MISTAKES,
)


def check_prefix_lm_mask(fn: Callable) -> bool:
    """Check ``fn(n, prefix_len)`` returns the (n, n) boolean prefix-LM mask (Lesson 10, §3)."""
    return run(_PREFIX_LM, fn)

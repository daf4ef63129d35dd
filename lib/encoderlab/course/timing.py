"""Timing two or more functions side by side on a noisy machine (Lesson 3, §4; Lesson 9, §1).

The functions are run in turns, round after round, so that a slow moment of a shared machine
hits all of them alike; every sample is kept, so that the ratio of two samples of the same round
(a *paired* ratio) and the spread over rounds can be shown next to the median.
:mod:`encoderlab.course.bench` measures the course's claims with these.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from encoderlab import masks

__all__ = [
    "random_qkv",
    "structural_masks",
    "PairTiming",
    "spread",
    "paired_ratios",
    "time_pair",
    "interleaved_samples",
    "time_interleaved",
]


@dataclass
class PairTiming:
    """Medians of interleaved runs of two functions, and their ratio a/b (Lesson 3, §4; Lesson 9).

    ``times_a_s`` and ``times_b_s`` keep every sample, round by round: sample i of
    a and sample i of b ran back to back, so their ratio is a *paired* ratio that
    a slow moment of the machine hits on both sides alike.
    """

    name_a: str
    name_b: str
    median_a_s: float
    median_b_s: float
    repeats: int
    times_a_s: list[float] = field(default_factory=list)
    times_b_s: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """median(a) / median(b)."""
        return self.median_a_s / self.median_b_s

    @property
    def paired(self) -> tuple[float, float, float]:
        """(median, lowest, highest) of the per-round ratios a_i / b_i (Lesson 9)."""
        return spread(paired_ratios(self.times_a_s, self.times_b_s))

    @property
    def spread_a_s(self) -> tuple[float, float, float]:
        """(median, lowest, highest) seconds of a."""
        return spread(self.times_a_s)

    @property
    def spread_b_s(self) -> tuple[float, float, float]:
        """(median, lowest, highest) seconds of b."""
        return spread(self.times_b_s)


def spread(samples) -> tuple[float, float, float]:
    """(median, lowest, highest) of timing samples: a timing is shown with its spread (Lesson 9)."""
    samples = list(samples)
    if not samples:
        raise ValueError("spread needs at least one sample, got none. Time with repeats >= 1.")
    return statistics.median(samples), min(samples), max(samples)


def paired_ratios(samples_a, samples_b) -> list[float]:
    """a_i / b_i for samples taken in the same round (Lesson 9, §1).

    Both lists come from one interleaved run (:func:`time_pair` or
    :func:`interleaved_samples`), so sample i of each ran back to back.
    """
    samples_a, samples_b = list(samples_a), list(samples_b)
    if len(samples_a) != len(samples_b) or not samples_a:
        raise ValueError(
            "paired ratios need two equally long, non-empty lists of samples from one "
            f"interleaved run, got {len(samples_a)} and {len(samples_b)} samples."
        )
    return [a / b for a, b in zip(samples_a, samples_b)]


def time_pair(
    fn_a: Callable[[], object],
    fn_b: Callable[[], object],
    repeats: int = 7,
    warmup: int = 1,
    names: tuple[str, str] = ("a", "b"),
) -> PairTiming:
    """Time two functions alternately (a, b, b, a, ...) so that drift hits both alike."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}.")
    for _ in range(warmup):
        fn_a()
        fn_b()
    times_a, times_b = [], []
    for i in range(repeats):
        # Alternate which goes first, so neither always runs on a warmer cache.
        order = [(fn_a, times_a), (fn_b, times_b)]
        for fn, times in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return PairTiming(
        names[0], names[1], statistics.median(times_a), statistics.median(times_b), repeats,
        times_a, times_b,
    )


def interleaved_samples(
    fns: dict[str, Callable[[], object]],
    repeats: int = 10,
    warmup: int = 2,
    inner: int = 1,
    sync: Callable[[], object] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of several functions, timed in turns: every sample (Lesson 9, §1).

    Like :func:`time_pair` for more than two: each round runs every function once,
    starting with a different one each round, so drift hits all of them alike;
    sample i of every function comes from round i, so ratios of samples of the
    same round are paired (:func:`paired_ratios`). One sample is ``inner`` calls
    in a row, then ``sync()`` (on a GPU ``torch.cuda.synchronize``: CUDA calls
    return before their kernel has run), divided by ``inner``; several calls per
    sample keep launch overheads small.
    """
    if repeats < 1 or inner < 1:
        raise ValueError(f"repeats and inner must be at least 1, got {repeats} and {inner}.")
    sync = sync or (lambda: None)
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    sync()
    times = {name: [] for name in names}
    for i in range(repeats):
        for name in names[i % len(names):] + names[: i % len(names)]:  # rotate who goes first
            start = time.perf_counter()
            for _ in range(inner):
                fns[name]()
            sync()
            times[name].append((time.perf_counter() - start) / inner)
    return times


def time_interleaved(fns: dict[str, Callable[[], object]], repeats: int = 10, warmup: int = 2,
                     inner: int = 1, sync: Callable[[], object] | None = None) -> dict[str, float]:
    """Median seconds per call of several functions, timed in turns (Lesson 9, §8).

    The medians of :func:`interleaved_samples` (same arguments).
    """
    samples = interleaved_samples(fns, repeats=repeats, warmup=warmup, inner=inner, sync=sync)
    return {name: statistics.median(t) for name, t in samples.items()}


# --- What the attention timings run on (Lessons 3, 9) ---------------------------------------


def random_qkv(n: int, n_heads: int, d_k: int, dtype=torch.float32, device="cpu"):
    """Seeded q, k, v of shape (1, n_heads, n, d_k) each: the inputs every attention timing
    uses, the same on every run (Lessons 3, 9)."""
    g = torch.Generator(device=device).manual_seed(0)
    shape = (1, n_heads, n, d_k)  # (b, h, n, d_k)
    return [torch.randn(shape, generator=g, dtype=dtype, device=device) for _ in range(3)]


def structural_masks(n: int, window: int = 256, n_docs: int = 4) -> dict[str, torch.Tensor]:
    """The (n, n) masks Lesson 9 compares, each a boolean tensor (True = may attend)."""
    doc_ids = torch.arange(n) * n_docs // n  # n_docs documents of equal length, packed
    return {
        "full": masks.bidirectional(n),
        "causal": masks.causal(n),
        "sliding window": masks.sliding_window(n, window),
        "document": masks.document(doc_ids),
        "prefix-LM": masks.prefix_lm(n, n // 4),
    }

"""T5's span corruption and BART's text infilling, on a list of tokens (Lesson 10, §3).

Both turn a text into a (corrupted input, target) pair for an encoder–decoder, and both draw
their spans from a seeded ``random.Random``, so one seed gives one corruption on every machine.

- :func:`span_corruption` (Raffel et al., 2020, §3.1.4 and §3.3.4): about ``noise_density`` of
  the tokens, in spans of mean length ``mean_span_length``, each span replaced by one sentinel
  ``<extra_id_k>``; the target lists every sentinel followed by the tokens it hides, and ends
  with one more sentinel.
- :func:`text_infilling` (Lewis et al., 2020, §2.2): spans with Poisson(``poisson_lambda``)
  lengths, zero included, each replaced by a single ``[MASK]``; the target is the whole text.
"""

from __future__ import annotations

import math
import random

__all__ = ["sentinel", "span_corruption", "poisson", "text_infilling"]


def sentinel(k: int) -> str:
    """T5's k-th sentinel token, ``<extra_id_k>`` (Lesson 10, §3)."""
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"a sentinel's number is an int >= 0, got {k!r}.")
    return f"<extra_id_{k}>"


def _check_tokens(tokens) -> list[str]:
    if not isinstance(tokens, (list, tuple)) or not tokens or not all(
            isinstance(t, str) for t in tokens):
        raise ValueError("tokens must be a non-empty list of strings (split the sentence first: "
                         f"sentence.split()), got {tokens!r}.")
    return list(tokens)


def _gaps(rng: random.Random, n_keep: int, n_spans: int) -> list[int]:
    """``n_keep`` kept tokens shared out before, between and after ``n_spans`` spans, at least
    one between two spans, uniformly over all such shares: ``n_spans + 1`` lengths."""
    free = n_keep - (n_spans - 1)  # kept tokens left after one between each two spans
    points = sorted(rng.randint(0, free) for _ in range(n_spans))  # stars and bars
    gaps = [b - a for a, b in zip([0, *points], [*points, free])]  # sum = free
    return [g + (1 if 0 < i < n_spans else 0) for i, g in enumerate(gaps)]


def _cuts(rng: random.Random, total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` positive lengths, uniformly over all such splits."""
    points = sorted(rng.sample(range(1, total), parts - 1))  # distinct cut points
    return [b - a for a, b in zip([0, *points], [*points, total])]


def span_corruption(tokens, noise_density: float = 0.15, mean_span_length: float = 3.0,
                    seed: int = 0) -> tuple[list[str], list[str]]:
    """T5's span corruption (Lesson 10, §3): (inputs, targets), lists of tokens.

    ``round(n * noise_density)`` tokens (at least 1) are corrupted, in
    ``round(noise / mean_span_length)`` spans (at least 1), with the span lengths and the kept
    tokens between them (at least one between two spans) drawn at random. In the inputs each
    corrupted span becomes one sentinel; the targets are each sentinel followed by its span,
    then a closing sentinel.
    """
    tokens = _check_tokens(tokens)
    if not 0 < noise_density < 1:
        raise ValueError(f"noise_density must lie strictly between 0 and 1 (T5: 0.15), got "
                         f"{noise_density!r}.")
    if not mean_span_length >= 1:
        raise ValueError(f"mean_span_length must be at least 1 (T5: 3), got {mean_span_length!r}.")
    n = len(tokens)
    n_noise = max(1, round(n * noise_density))
    n_spans = max(1, round(n_noise / mean_span_length))
    if n - n_noise < n_spans - 1:
        raise ValueError(f"{n} tokens are too few for {n_spans} spans of {n_noise} corrupted "
                         "tokens with a kept token between each two: pass a longer text or a "
                         "lower noise_density.")
    rng = random.Random(seed)
    noise_lengths = _cuts(rng, n_noise, n_spans)  # (n_spans,), each >= 1
    gaps = _gaps(rng, n - n_noise, n_spans)  # (n_spans + 1,): kept tokens around the spans
    inputs, targets, at = [], [], 0
    for k, (keep, noise) in enumerate(zip(gaps, noise_lengths)):
        inputs += tokens[at:at + keep] + [sentinel(k)]
        targets += [sentinel(k)] + tokens[at + keep:at + keep + noise]
        at += keep + noise
    return inputs + tokens[at:], targets + [sentinel(n_spans)]


def poisson(rng: random.Random, lam: float) -> int:
    """One draw from Poisson(``lam``) by Knuth's product of uniforms (Lesson 10, §3)."""
    if not 0 < lam <= 30:
        raise ValueError(f"lam must lie in (0, 30] for this sampler (BART: 3), got {lam!r}.")
    limit, k, product = math.exp(-lam), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def text_infilling(tokens, mask_ratio: float = 0.3, poisson_lambda: float = 3.0, seed: int = 0,
                   mask_token: str = "[MASK]") -> tuple[list[str], list[tuple[int, int]]]:
    """BART's text infilling (Lesson 10, §3): (corrupted tokens, spans as (start, length)).

    Span lengths are drawn from Poisson(``poisson_lambda``) until they cover
    ``round(n * mask_ratio)`` tokens (the last one cut to fit); a zero-length span inserts a
    ``[MASK]`` without hiding anything. The kept tokens are shared out at random between the
    spans, at least one between two spans. Each span becomes one ``mask_token``; the target
    for the decoder is the original ``tokens``. ``start`` counts in the original tokens.
    """
    tokens = _check_tokens(tokens)
    if not 0 <= mask_ratio < 1:
        raise ValueError(f"mask_ratio must lie in [0, 1) (BART: 0.3), got {mask_ratio!r}.")
    rng = random.Random(seed)
    n = len(tokens)
    n_mask = round(n * mask_ratio)
    lengths: list[int] = []
    while sum(lengths) < n_mask or not lengths:
        lengths.append(min(poisson(rng, poisson_lambda), n_mask - sum(lengths)))
    n_keep = n - n_mask
    if n_keep < len(lengths) - 1:
        raise ValueError(f"{n} tokens are too few for {len(lengths)} spans with a kept token "
                         "between each two: pass a longer text or another seed.")
    gaps = _gaps(rng, n_keep, len(lengths))  # (spans + 1,): kept tokens around the spans
    corrupted, spans, at = [], [], 0
    for gap, length in zip(gaps, lengths):
        corrupted += tokens[at:at + gap] + [mask_token]
        spans.append((at + gap, length))
        at += gap + length
    return corrupted + tokens[at:], spans

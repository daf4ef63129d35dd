"""Lesson 10, §3: T5's span corruption and BART's text infilling."""

import random
import re

import pytest

from encoderlab.lessons import l10_denoise as dn

TEXT = [f"w{i}" for i in range(40)]  # 40 distinct tokens: every one can be traced
SENTINEL = re.compile(r"<extra_id_(\d+)>")


def _rebuild_from_t5(inputs, targets):
    """The original text, from T5's inputs and targets (written independently of the library)."""
    fills, current = {}, None
    for t in targets:
        m = SENTINEL.fullmatch(t)
        if m:
            current = int(m.group(1))
            fills[current] = []
        else:
            fills[current].append(t)
    out = []
    for t in inputs:
        m = SENTINEL.fullmatch(t)
        out += fills[int(m.group(1))] if m else [t]
    return out


@pytest.mark.parametrize("seed", range(20))
def test_span_corruption_hides_15_percent_in_sentinel_spans_and_can_be_undone(seed):
    inputs, targets = dn.span_corruption(TEXT, seed=seed)
    assert _rebuild_from_t5(inputs, targets) == TEXT
    hidden = [t for t in targets if not SENTINEL.fullmatch(t)]
    assert len(hidden) == 6  # round(40 * 0.15)
    in_sentinels = [t for t in inputs if SENTINEL.fullmatch(t)]
    assert in_sentinels == ["<extra_id_0>", "<extra_id_1>"]  # round(6 / 3) spans, in order
    assert targets[0] == "<extra_id_0>" and targets[-1] == "<extra_id_2>"  # closing sentinel
    assert all(not (SENTINEL.fullmatch(a) and SENTINEL.fullmatch(b))
               for a, b in zip(inputs, inputs[1:]))  # a kept token between two spans
    assert len(inputs) == 40 - 6 + 2


def test_span_corruption_is_seeded_and_the_spans_move_with_the_seed():
    assert dn.span_corruption(TEXT, seed=3) == dn.span_corruption(TEXT, seed=3)
    first_hidden = {dn.span_corruption(TEXT, seed=s)[1][1] for s in range(30)}
    assert len(first_hidden) > 5  # the first span starts in many places


def test_span_corruption_mean_span_length_sets_the_number_of_spans():
    long_text = [f"t{i}" for i in range(200)]
    _, targets = dn.span_corruption(long_text, seed=0)
    assert sum(bool(SENTINEL.fullmatch(t)) for t in targets) == 10 + 1  # 30 hidden / 3, + closing
    _, targets = dn.span_corruption(long_text, mean_span_length=10, seed=0)
    assert sum(bool(SENTINEL.fullmatch(t)) for t in targets) == 3 + 1


@pytest.mark.parametrize("kwargs, match", [
    (dict(tokens=[]), "non-empty"), (dict(tokens="a b c"), "non-empty"),
    (dict(tokens=TEXT, noise_density=0), "noise_density"),
    (dict(tokens=TEXT, noise_density=1.2), "noise_density"),
    (dict(tokens=TEXT, mean_span_length=0.5), "mean_span_length"),
    (dict(tokens=["a", "b"], noise_density=0.9, mean_span_length=1), "too few"),
])
def test_span_corruption_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dn.span_corruption(**kwargs)


def test_poisson_draws_have_the_mean_and_the_zero_share_of_poisson_3():
    rng = random.Random(0)
    draws = [dn.poisson(rng, 3.0) for _ in range(20000)]
    assert abs(sum(draws) / len(draws) - 3.0) < 0.05
    assert abs(draws.count(0) / len(draws) - 0.0498) < 0.006  # e^-3
    with pytest.raises(ValueError, match="lam"):
        dn.poisson(rng, 0)


@pytest.mark.parametrize("seed", range(20))
def test_text_infilling_replaces_each_span_by_one_mask(seed):
    corrupted, spans = dn.text_infilling(TEXT, seed=seed)
    assert sum(length for _, length in spans) == 12  # round(40 * 0.3)
    assert corrupted.count("[MASK]") == len(spans)
    expected, at = [], 0  # rebuild the corrupted text from the spans, independently
    for start, length in spans:
        assert start >= at
        expected += TEXT[at:start] + ["[MASK]"]
        at = start + length
    assert corrupted == expected + TEXT[at:]
    assert all(b[0] > a[0] + a[1] for a, b in zip(spans, spans[1:]))  # a kept token between


def test_text_infilling_draws_zero_length_spans_that_insert_a_mask():
    zero = [(seed, spans) for seed in range(100)
            for spans in [dn.text_infilling(TEXT, seed=seed)[1]] if any(n == 0 for _, n in spans)]
    assert zero  # Poisson(3) gives 0 about 5 % of the time
    seed, spans = zero[0]
    corrupted, _ = dn.text_infilling(TEXT, seed=seed)
    assert len(corrupted) == 40 - 12 + len(spans)


def test_text_infilling_refuses_bad_input():
    with pytest.raises(ValueError, match="mask_ratio"):
        dn.text_infilling(TEXT, mask_ratio=1.0)
    with pytest.raises(ValueError, match="non-empty"):
        dn.text_infilling([])
    with pytest.raises(ValueError, match="int >= 0"):
        dn.sentinel(-1)

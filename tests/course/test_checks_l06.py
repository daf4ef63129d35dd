"""Lesson 6's checkers: check_whole_word_positions, check_rtd_labels and check_span_positions."""

import re

import pytest
import torch

from encoderlab.course import checks
from encoderlab.objectives import IGNORE_INDEX, rtd_labels, word_ids

# --- Checkers -----------------------------------------------------------------------------------


def _ww_reference(ids, am, tokens, special, picked):
    words = word_ids(ids, am, tokens, special)
    return (words >= 0) & picked.gather(1, words.clamp(min=0))


def test_check_whole_word_positions_accepts_the_reference(capsys):
    assert checks.check_whole_word_positions(_ww_reference)
    assert "correct on" in capsys.readouterr().out


def _first_piece_only(ids, am, tokens, special, picked):
    starts = torch.tensor([not t.startswith("##") for t in tokens])[ids]
    return _ww_reference(ids, am, tokens, special, picked) & starts


def _pieces_as_words(ids, am, tokens, special, picked):
    ordinary = (am != 0) & ~torch.isin(ids, torch.tensor(special))
    index = ordinary.long().cumsum(dim=1) - 1
    return ordinary & picked.gather(1, index.clamp(min=0))


def _with_specials(ids, am, tokens, special, picked):
    return _ww_reference(ids, am, tokens, special, picked) | (ids == 2)


def _index_one_too_high(ids, am, tokens, special, picked):
    """The running count of word starts without its -1: the first word gets index 1."""
    continuation = torch.tensor([t.startswith("##") for t in tokens])
    ordinary = (am != 0) & ~torch.isin(ids, torch.tensor(special))
    word = (ordinary & ~continuation[ids]).long().cumsum(dim=1)
    return ordinary & picked.gather(1, word.clamp(max=picked.shape[1] - 1))


@pytest.mark.parametrize(
    "wrong, words",
    [
        (_first_piece_only, "only the first piece"),
        (_pieces_as_words, "every piece as a word of its own"),
        (_with_specials, "special tokens or padding"),
        (_index_one_too_high, "word index is one too high"),
        (lambda *a: _ww_reference(*a)[:, :-1], "shape"),
    ],
)
def test_check_whole_word_positions_rejects_mistakes(wrong, words, both_passes):
    assert re.search(words, str(both_passes(checks.check_whole_word_positions, wrong)))


def _rtd(ids, mlm, samples, am):
    corrupted = torch.where(mlm != IGNORE_INDEX, samples, ids)
    return rtd_labels(ids, corrupted, am)


def test_check_rtd_labels_accepts_the_reference(capsys):
    assert checks.check_rtd_labels(_rtd)
    assert "correct on" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda ids, mlm, s, am: (mlm != IGNORE_INDEX).long().masked_fill(am == 0, -100),
         "every masked position 'replaced'"),
        (lambda ids, mlm, s, am: _rtd(ids, mlm, s, am).masked_fill(mlm == -100, -100),
         "only the masked positions"),
        (lambda ids, mlm, s, am: _rtd(ids, mlm, s, am).masked_fill(am == 0, 0), "padding"),
        (lambda ids, mlm, s, am: rtd_labels(ids, s, am), "at every position"),
        (lambda ids, mlm, s, am: _rtd(ids, mlm, s, am) == 1, "booleans"),
    ],
)
def test_check_rtd_labels_rejects_mistakes(wrong, words, both_passes):
    assert re.search(words, str(both_passes(checks.check_rtd_labels, wrong)))


# --- SpanBERT's span layout ----------------------------------------------------------------------


def _spans(words, budget, draws, break_on_empty=False):
    """A learner's answer written independently of the checker's reference; with
    ``break_on_empty``, the loop stops at the first span that is cut to nothing."""
    chosen = torch.zeros(len(words), dtype=torch.bool)
    n_words = int(words.max()) + 1
    used = 0
    for length, start in draws:
        if used >= budget:
            break
        span = [w for w in range(start, min(start + length, n_words))
                if not chosen[words == w].any()]
        while span and used + int(torch.isin(words, torch.tensor(span)).sum()) > budget:
            span.pop()
        if not span:
            if break_on_empty:
                break
            continue
        pieces = torch.isin(words, torch.tensor(span))
        used += int(pieces.sum())
        chosen |= pieces
    return chosen


def _spans_by_position(words, budget, draws):
    ordinary = (words >= 0).nonzero().flatten().tolist()
    chosen = torch.zeros(len(words), dtype=torch.bool)
    for length, start in draws:
        for i in ordinary[start:start + length]:
            if int(chosen.sum()) < budget:
                chosen[i] = True
    return chosen


def test_check_span_positions_accepts_an_independent_answer(capsys):
    assert checks.check_span_positions(_spans)
    assert "correct on" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name, words",
    [
        ("_span_no_cut", "more pieces than the budget"),
        ("_span_discard", "drop a span that does not fit whole"),
        ("_span_counts_words", "count words towards the budget"),
        ("_span_inclusive", "one word too long"),
        ("_span_counts_overlap_twice", "counted again towards the budget"),
        ("_span_stops_when_empty", "first span that is cut to nothing"),
    ],
)
def test_check_span_positions_names_each_mistake(name, words, both_passes):
    from encoderlab.course.checks import l06

    assert re.search(words, str(both_passes(checks.check_span_positions, getattr(l06, name))))


def _spans_break_on_empty(words, budget, draws):
    """A learner's `break` where a span is cut to nothing (the budget is not met yet)."""
    return _spans(words, budget, draws, break_on_empty=True)


def test_the_fixed_span_cases_include_an_emptied_span_followed_by_a_fit():
    from encoderlab.course.checks import l06

    hits = [case for case in l06._span_cases()[:5]
            if not torch.equal(_spans_break_on_empty(*case), l06._span_reference(*case))]
    assert hits, "no fixed case tells `break` from `continue` on an emptied span"


def test_check_span_positions_names_break_on_an_emptied_span(capsys):
    with pytest.raises(checks.CheckFailed, match="first span that is cut to nothing") as failure:
        checks.check_span_positions(_spans_break_on_empty)
    assert "counted again" not in str(failure.value)
    with pytest.raises(checks.CheckFailed, match="continue, not break"):
        checks.check_span_positions(_spans_break_on_empty, hint=True)


def test_span_messages_do_not_attribute_the_cut_rule_to_spanbert():
    from encoderlab.course.checks import l06

    assert all("SpanBERT" not in " ".join(m[:2]) for m in l06._SPAN_MISTAKES)
    assert "whole-word variant" in checks.check_span_positions.__doc__


@pytest.mark.parametrize(
    "wrong, words",
    [
        (_spans_by_position, "only partly chosen"),
        (lambda w, b, d: _spans(w, b, d) | (w < 0), "belong to no word"),
        (lambda w, b, d: _spans(w, b, d)[:-1], "shape"),
        (lambda w, b, d: _spans(w, b, d).long() * 2, "other than 0/1"),
        (lambda w, b, d: torch.zeros(len(w), dtype=torch.bool), "differs from the reference"),
    ],
)
def test_check_span_positions_rejects_other_answers(wrong, words):
    with pytest.raises(checks.CheckFailed, match=words):
        checks.check_span_positions(wrong)

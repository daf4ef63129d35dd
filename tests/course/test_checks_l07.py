"""Lesson 7's checkers: check_bio_to_spans, check_entity_f1, check_best_span and
check_window_span."""

import re

import pytest
import torch

from encoderlab.course.checks import (
    CheckFailed,
    check_best_span,
    check_bio_to_spans,
    check_entity_f1,
    check_window_span,
)
from encoderlab.lessons import l07_finetune as ft

# --- Checkers -----------------------------------------------------------------------------------


def _spans_by_hand(tags):
    """conlleval's rule, written independently: an entity starts at B-X, or at an I-X whose
    previous tag is not of type X; it goes on while the tags are I-X."""
    spans = []
    for i, tag in enumerate(tags):
        kind = tag[2:]
        previous = tags[i - 1][2:] if i and tags[i - 1] != "O" else None
        if tag.startswith("B-") or (tag.startswith("I-") and previous != kind):
            spans.append([kind, i, i])
        elif tag.startswith("I-"):
            spans[-1][2] = i
    return [tuple(s) for s in spans]


def test_check_bio_to_spans_accepts_the_reference_and_names_mistakes(both_passes):
    assert check_bio_to_spans(_spans_by_hand)  # written in this file, not the library's
    assert check_bio_to_spans(ft.bio_to_spans)

    def exclusive_end(tags):
        return [(k, s, e + 1) for k, s, e in ft.bio_to_spans(tags)]

    def strict(tags):  # drops an I- that follows O
        return [s for s in ft.bio_to_spans(tags) if tags[s[1]].startswith("B-")]

    assert re.search("end \\*inclusive\\*", str(both_passes(check_bio_to_spans, exclusive_end)))
    assert re.search("I-X that follows O", str(both_passes(check_bio_to_spans, strict)))
    with pytest.raises(CheckFailed, match="not a list of spans"):
        check_bio_to_spans(lambda tags: 3)


def test_check_entity_f1_accepts_the_reference_and_names_mistakes(both_passes):
    assert check_entity_f1(lambda g, p: ft.entity_scores(g, p)["f1"])
    assert check_entity_f1(ft.entity_scores)  # a dict with "f1" is accepted too

    def untyped(gold, pred):  # compares (start, end) only
        correct = n_gold = n_pred = 0
        for g, p in zip(gold, pred):
            g_spans = {span[1:] for span in ft.bio_to_spans(g)}
            p_spans = {span[1:] for span in ft.bio_to_spans(p)}
            correct, n_gold, n_pred = (correct + len(g_spans & p_spans), n_gold + len(g_spans),
                                       n_pred + len(p_spans))
        precision, recall = correct / max(n_pred, 1), correct / max(n_gold, 1)
        return 2 * precision * recall / (precision + recall) if correct else 0.0

    def per_sentence(gold, pred):
        scores = [ft.entity_scores([g], [p]) for g, p in zip(gold, pred)]
        scores = [s["f1"] for s in scores if s["n_gold"] or s["n_predicted"]]
        return sum(scores) / len(scores)

    assert re.search("ignore the entity type", str(both_passes(check_entity_f1, untyped)))
    assert re.search("average an F1 per sentence", str(both_passes(check_entity_f1, per_sentence)))
    with pytest.raises(CheckFailed, match="larger than 1: a percentage"):
        check_entity_f1(lambda g, p: 100 * ft.entity_scores(g, p)["f1"])

    def token_accuracy(gold, pred):  # every tag compared, O included
        pairs = [(a, b) for g, p in zip(gold, pred) for a, b in zip(g, p)]
        return sum(a == b for a, b in pairs) / len(pairs)

    assert re.search("this is token accuracy", str(both_passes(check_entity_f1, token_accuracy)))
    with pytest.raises(CheckFailed, match="count by hand"):  # a mistake with no name
        check_entity_f1(lambda g, p: 0.5, hint=True)


def test_check_best_span_accepts_the_reference_and_names_mistakes(both_passes):
    def reference(s, e, context, max_tokens):
        i, j, _ = ft.best_span(s[None], e[None], context[None], max_tokens)
        return int(i), int(j)

    def separately(s, e, context, max_tokens):
        return (int(s.masked_fill(~context, -1e9).argmax()),
                int(e.masked_fill(~context, -1e9).argmax()))

    def anywhere(s, e, context, max_tokens):
        return reference(s, e, torch.ones_like(context), max_tokens)

    assert check_best_span(reference)
    assert re.search("best start and the best end separately",
                     str(both_passes(check_best_span, separately)))
    assert re.search("outside the context", str(both_passes(check_best_span, anywhere)))
    with pytest.raises(CheckFailed, match="not a pair"):
        check_best_span(lambda s, e, c, m: 0)


# --- The best answer across windows (§7) --------------------------------------------------------


def test_check_window_span_accepts_the_reference():
    from encoderlab.lessons.l07_longqa import best_answer_across_windows

    assert check_window_span(best_answer_across_windows)


def test_check_window_span_loops_written_by_hand_pass():
    def by_hand(s, e, offsets, context_start, lengths, max_tokens):
        best = None
        for k in range(len(s)):
            stop = context_start + int(lengths[k])
            for i in range(context_start, stop):
                for j in range(i, min(stop, i + max_tokens)):
                    score = float(s[k, i] + e[k, j])
                    if best is None or score > best[0]:
                        best = (score, int(offsets[k]) + i - context_start,
                                int(offsets[k]) + j - context_start)
        null = float((s[:, 0] + e[:, 0]).min())
        return None if best[0] <= null else (best[1], best[2])

    assert check_window_span(by_hand)


@pytest.mark.parametrize("switch, message", [
    ({"offset": False}, "those of the window, not of the context"),
    ({"shift": False}, "count the \\[CLS\\], question and \\[SEP\\] tokens"),
    ({"use_null": False}, "never answer 'no answer'"),
    ({"first": True}, "only the first window"),
    ({"ordered": False}, "end before it starts"),
    ({"limit": False}, "longer than max_tokens"),
    ({"context_only": False}, "start or end on \\[CLS\\] or the question"),
    ({"null": "window"}, "null score of the window where the best span is"),
    ({"null": "max"}, "largest null score"),
    ({"trailing_sep": True}, "on the \\[SEP\\] after the window's context"),
    ({"tie_answers": True}, "a tie is 'no answer'"),
    ({"own_margin": True}, "beats its own null score by the most"),
])
def test_check_window_span_names_each_mistake(switch, message, both_passes):
    from encoderlab.course.checks.l07 import _window_variant

    def wrong(*case):
        return _window_variant(*case, **switch)

    assert re.search(message, str(both_passes(check_window_span, wrong)))


def test_check_window_span_rejects_unusable_answers_and_unknown_mistakes():
    with pytest.raises(CheckFailed, match="neither a pair nor None"):
        check_window_span(lambda s, e, o, c, lengths, m: "none")
    with pytest.raises(CheckFailed, match="the right answer is"):
        check_window_span(lambda s, e, o, c, lengths, m: (0, 0))

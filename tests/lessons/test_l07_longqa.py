"""Lesson 7, §7: long-context QA with a stride and a no-answer case (l07_longqa)."""

from __future__ import annotations

import pytest
import torch

from encoderlab.lessons import l07_longqa as lq
from encoderlab.lessons import l07_tasks as tasks


@pytest.fixture(scope="module")
def short():
    return tasks.qa_task(n_train=60, n_test=40)[1]


def test_window_starts_cover_the_context_with_the_overlap():
    assert lq.window_starts(5, 8, 2) == [0]
    assert lq.window_starts(8, 8, 2) == [0]
    starts = lq.window_starts(30, 8, 3)
    assert starts == [0, 5, 10, 15, 20, 25]
    assert all(b - a == 8 - 3 for a, b in zip(starts, starts[1:]))  # overlap of 3
    assert starts[-1] + 8 >= 30 > starts[-2] + 8
    with pytest.raises(ValueError, match="stride < width"):
        lq.window_starts(10, 4, 4)


def test_long_qa_task_answers_and_absent_people(short):
    examples = lq.long_qa_task(short, 12, 10, parts=3, seed=0)
    assert [ex.answerable for ex in examples] == [True] * 12 + [False] * 10
    for ex in examples:
        text = " ".join(ex.context)
        person = lq.asked_person(ex.question)
        assert (f"{person} was born" in text) == ex.answerable
        assert text.count(" was born ") == 6  # three short contexts of two people
    answers = {s.answer for s in short}
    assert all(ex.answer in answers for ex in examples[:12])
    assert all(ex.answer == "" for ex in examples[12:])
    parts = {ex.start * 3 // len(ex.context) for ex in examples[:12]}
    assert len(parts) > 1  # the answer is not always in the same part of the context


def test_encode_windows_offsets_map_back_to_the_context(minilm, short):
    tokenizer, _ = minilm
    examples = lq.long_qa_task(short, 6, 4, parts=3, seed=1)
    w = lq.encode_windows(tokenizer, examples, max_length=40, stride=8)
    assert w["input_ids"].shape[1] <= 40
    for k, ex in enumerate(examples):
        rows = (w["example"] == k).nonzero().squeeze(1).tolist()
        assert len(rows) > 1  # the contexts are longer than one window
        pieces = tokenizer.convert_tokens_to_ids(
            [p for word in ex.context for p in tokenizer.tokenize(word)])
        assert len(w["piece_word"][k]) == len(pieces)
        for r in rows:
            c, o, m = int(w["context_start"][r]), int(w["offset"][r]), int(w["context_length"][r])
            assert w["input_ids"][r, c:c + m].tolist() == pieces[o:o + m]
            assert w["context_mask"][r].sum() == m and w["context_mask"][r, c:c + m].all()
        holding = [r for r in rows if w["starts"][r] > 0]
        assert bool(holding) == ex.answerable  # stride 8 > any answer: some window holds it
        for r in holding:
            c, o = int(w["context_start"][r]), int(w["offset"][r])
            words = w["piece_word"][k]
            first = words[o + int(w["starts"][r]) - c]
            last = words[o + int(w["ends"][r]) - c]
            assert " ".join(ex.context[first:last + 1]) == ex.answer
        assert all(w["ends"][r] == 0 for r in rows if r not in holding)


def test_best_answer_across_windows_maps_to_the_context_and_says_none():
    s, e = torch.zeros(3, 10), torch.zeros(3, 10)
    s[:, 0] = e[:, 0] = -1.0  # null score -2 in each window
    s[1, 6], e[1, 7] = 3.0, 3.0  # window 1 (offset 4), rows 6-7 = context pieces 2-3 of it
    found = lq.window_scores(s, e, [0, 4, 8], 4, [5, 5, 3], max_tokens=4)
    assert (found["start"], found["end"], found["window"]) == (6, 7, 1)
    assert found["score"] == pytest.approx(6.0) and found["null"] == pytest.approx(-2.0)
    assert lq.best_answer_across_windows(s, e, [0, 4, 8], 4, [5, 5, 3], 4) == (6, 7)
    assert lq.best_answer_across_windows(s, e, [0, 4, 8], 4, [5, 5, 3], 4, threshold=8.0) is None
    s[:, 0] = e[:, 0] = 4.0  # every window is sure: no answer
    assert lq.best_answer_across_windows(s, e, [0, 4, 8], 4, [5, 5, 3], 4) is None
    s[2, 0] = e[2, 0] = 2.0  # the smallest null score (4) decides: 6 > 4
    assert lq.best_answer_across_windows(s, e, [0, 4, 8], 4, [5, 5, 3], 4) == (6, 7)
    with pytest.raises(ValueError, match="one offset and one context length per window"):
        lq.window_scores(s, e, [0, 4], 4, [5, 5, 3])


def test_long_answers_and_scores_on_planted_logits(minilm, short):
    tokenizer, _ = minilm
    examples = lq.long_qa_task(short, 5, 5, parts=3, seed=2)
    w = lq.encode_windows(tokenizer, examples, max_length=48, stride=12)
    s = torch.full(w["input_ids"].shape, -10.0)
    e = s.clone()
    rows = torch.arange(len(s))
    s[rows, w["starts"]] = 5.0  # the gold target of each window: the answer, or [CLS]
    e[rows, w["ends"]] = 5.0
    s[:, 0] = torch.where(w["starts"] > 0, -5.0, s[:, 0])
    e[:, 0] = torch.where(w["starts"] > 0, -5.0, e[:, 0])
    found = lq.long_answers(examples, w, s, e)
    assert found["answers"] == [ex.answer for ex in examples]
    scores = lq.long_qa_scores(examples, found["answers"])
    assert scores["exact_match"] == 100 and scores["no_answer_accuracy"] == 100
    assert (scores["n_answerable"], scores["n_unanswerable"]) == (5, 5)
    never = lq.long_qa_scores(examples, ["x"] * len(examples))
    assert never["no_answer_accuracy"] == 0 and never["n_exact"] == 0



"""Lesson 7, §6 and §8: the next-sentence pair task, its encoding with two segments, the pair and
warm-up recipes and their committed artefacts."""

from __future__ import annotations

import pytest
import torch

from encoderlab.lessons import l07_pairs as pairs
from encoderlab.lessons import l07_recipes as rec


@pytest.fixture(scope="module")
def task():
    return pairs.next_sentence_task()


def test_the_task_is_deterministic_balanced_and_sized(task):
    again = pairs.next_sentence_task()
    assert again.train_pairs == task.train_pairs and again.test_pairs == task.test_pairs
    assert torch.equal(again.train_labels, task.train_labels)
    assert torch.equal(again.test_labels, task.test_labels)
    assert (len(task.train_pairs), len(task.test_pairs)) == (800, 200)
    assert torch.bincount(task.train_labels).tolist() == [400, 400]
    assert torch.bincount(task.test_labels).tolist() == [100, 100]
    other = pairs.next_sentence_task(seed=1)
    assert other.test_pairs != task.test_pairs


def test_the_labels_say_whether_b_follows_a(task):
    follows = {(d[i], d[i + 1]) for d in pairs.docstrings() for i in range(len(d) - 1)}
    doc_of = {}
    for k, d in enumerate(pairs.docstrings()):
        for s in d:
            doc_of.setdefault(s, set()).add(k)
    for (a, b), label in zip(task.train_pairs + task.test_pairs,
                             torch.cat([task.train_labels, task.test_labels]).tolist()):
        if label == 1:
            assert (a, b) in follows
        else:  # B comes from another docstring than A
            assert not doc_of[a] & doc_of[b]


def test_no_b_opens_a_docstring_so_bs_position_is_no_cue(task):
    # a positive's B always follows a sentence; a negative's B is drawn after a first sentence
    # too, so "is B a docstring's first sentence?" cannot tell the labels apart
    first = {d[0] for d in pairs.docstrings()}
    for part, labels in ((task.train_pairs, task.train_labels), (task.test_pairs,
                                                                 task.test_labels)):
        for label in (0, 1):
            bs = [b for (_, b), y in zip(part, labels.tolist()) if y == label]
            assert bs and not any(b in first for b in bs)


def test_train_and_test_share_no_sentence_and_no_8_word_span(task):
    from encoderlab.data import word_spans

    train = {s for p in task.train_pairs for s in p}
    test = {s for p in task.test_pairs for s in p}
    assert not train & test
    seen = set().union(*(word_spans(s) for s in train))
    assert not any(word_spans(s) & seen for s in test)
    assert len(set(task.test_pairs)) == len(task.test_pairs)


def test_odd_sizes_are_refused():
    with pytest.raises(ValueError, match="even"):
        pairs.next_sentence_task(n_test=201)


def test_token_types_mark_the_two_segments(minilm):
    tokenizer, _ = minilm
    x = pairs.encode_pairs(tokenizer, [("The cat sat.", "It was tired."), ("Hi.", "Bye.")])
    sep = tokenizer.sep_token_id
    for row in range(2):
        ids = x["input_ids"][row][x["attention_mask"][row].bool()]
        types = x["token_type_ids"][row][x["attention_mask"][row].bool()]
        first_sep = int((ids == sep).nonzero()[0])
        assert int(ids[0]) == tokenizer.cls_token_id and int(ids[-1]) == sep
        assert types[:first_sep + 1].eq(0).all() and types[first_sep + 1:].eq(1).all()
        assert int((ids == sep).sum()) == 2
    one = pairs.encode_pairs(tokenizer, [("The cat sat.", "It was tired.")], segments=False)
    assert one["token_type_ids"].eq(0).all()
    assert torch.equal(one["input_ids"], x["input_ids"][:1, :one["input_ids"].shape[1]])
    with pytest.raises(ValueError, match="pairs"):
        pairs.encode_pairs(tokenizer, ["not a pair"])


def test_linear_warmup_ramps_then_stays():
    f = rec.linear_warmup(4)
    assert [f(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        rec.linear_warmup(0)


def test_the_recipes_are_registered():
    from encoderlab.course.train import recipes

    assert {"l7-pairs", "l7-extract-warmup", "l7-extract"} <= set(recipes())


def test_committed_pair_artefact_matches_the_task(task):
    from encoderlab.course.train import load_artefact
    from encoderlab.lessons.l07_finetune import texts_fingerprint

    tensors, meta = load_artefact("l7-pairs")
    assert meta["test_pairs"] == texts_fingerprint([f"{a}\t{b}" for a, b in task.test_pairs])
    assert torch.equal(tensors["test_labels"], task.test_labels)
    for seed in pairs.PAIRS["seeds"]:
        for key in ("test_logits", "swapped_logits"):
            assert tensors[f"seed{seed}.{key}"].shape == (200, 2)
        assert tensors[f"seed{seed}.loss"].shape == (int(meta["steps"]),)


def test_committed_warmup_artefact_holds_every_curve():
    from encoderlab.course.train import load_artefact

    tensors, meta = load_artefact("l7-extract-warmup")
    steps = int(meta["steps"])
    assert int(meta["warmup_steps"]) == rec.WARMUP["warmup_steps"]
    for seed in rec.WARMUP["seeds"]:
        for warmup in (0, rec.WARMUP["warmup_steps"]):
            if not seed and not warmup:
                continue  # l7-extract itself
            assert tensors[f"warmup{warmup}.seed{seed}.loss"].shape == (steps,)
            assert tensors[f"warmup{warmup}.seed{seed}.curve_steps"].tolist() == list(
                range(0, steps + 1, 10))

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


def test_the_recipe_is_registered():
    from encoderlab.course.train import recipes

    assert "l7-long-qa" in recipes()



def test_candidates_add_cls_to_the_context():
    allowed = lq.candidates({"context_mask": torch.tensor([[0, 0, 1, 1, 0]]).bool()})
    assert allowed.int().tolist() == [[1, 0, 1, 1, 0]]


@pytest.fixture(scope="module")
def split(minilm):
    tokenizer, _ = minilm
    return lq.long_qa_split(tokenizer)


def test_the_three_splits_are_disjoint_and_dev_test_names_unseen(split):
    assert tuple(split) == lq.SPLITS == ("train", "dev", "test")
    questions = {name: {(" ".join(ex.question), " ".join(ex.context)) for ex in split[name][0]}
                 for name in lq.SPLITS}
    contexts = {name: {" ".join(ex.context) for ex in split[name][0]} for name in lq.SPLITS}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not questions[a] & questions[b]
        assert not contexts[a] & contexts[b]
    trained = {w for ex in split["train"][0] for w in ex.context if w[:1].isupper()}
    for name in ("dev", "test"):  # no dev or test name (first or last) is ever trained on
        asked = {w for ex in split[name][0] for w in lq.asked_person(ex.question).split()}
        assert not trained & asked
    for name in lq.SPLITS:
        examples = split[name][0]
        assert sum(ex.answerable for ex in examples) == lq.LONG_QA[f"{name}_answerable"]
        assert sum(not ex.answerable for ex in examples) == lq.LONG_QA[f"{name}_unanswerable"]


def test_choose_threshold_maximises_the_questions_right(minilm, short):
    tokenizer, _ = minilm
    examples = lq.long_qa_task(short, 4, 4, parts=3, seed=3)
    w = lq.encode_windows(tokenizer, examples, max_length=48, stride=12)
    s = torch.full(w["input_ids"].shape, -10.0)
    e = s.clone()
    rows = torch.arange(len(s))
    holds = w["starts"] > 0
    s[rows[holds], w["starts"][holds]] = 5.0  # every gold span scores 10 ...
    e[rows[holds], w["ends"][holds]] = 5.0
    margin = torch.tensor([1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.5, 5.0])  # ... above its null
    null = 10.0 - margin[w["example"]]
    s[:, 0], e[:, 0] = null / 2, null / 2
    for k, ex in enumerate(examples):  # an unanswerable question's best span scores 10 too
        if not ex.answerable:
            r = int((w["example"] == k).nonzero()[0, 0])
            c = int(w["context_start"][r])
            s[r, c] = e[r, c] = 5.0
    t, right = lq.choose_threshold(examples, w, s, e)
    assert right == 6 and 0.5 <= t < 1.0  # abstain on -1 and 0.5, answer 1, 2, 3, 4
    found = lq.long_answers(examples, w, s, e, threshold=t)
    assert lq.long_qa_scores(examples, found["answers"])["overall"] == 75


def test_warmup_then_decay():
    f = lq.warmup_then_decay(10, 4)
    assert [f(k) for k in range(10)] == pytest.approx(
        [0.25, 0.5, 0.75, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    with pytest.raises(ValueError, match="warmup_steps"):
        lq.warmup_then_decay(10, 11)
    assert [lq.warmup_then_decay(2, 2)(k) for k in range(2)] == [0.5, 1.0]


def test_a_few_training_steps_reduce_the_loss(minilm, short):
    tokenizer, encoder = minilm
    examples = lq.long_qa_task(short, 2, 2, parts=3, seed=4)
    w = lq.encode_windows(tokenizer, examples, max_length=48, stride=12)
    hidden = lq.lower_states(encoder, w)
    assert hidden.shape == (*w["input_ids"].shape, encoder.config.d_model)
    torch.manual_seed(0)
    model = lq.TopSpanModel(encoder)
    packaged = encoder.blocks[-1].mlp.w_1.weight.detach().clone()
    batch = (hidden, w["attention_mask"], lq.candidates(w), w["starts"], w["ends"])
    model.eval()
    with torch.no_grad():
        before = float(lq.window_loss(model, batch))
    history = lq.train_top(model, hidden, w, steps=6, warmup_steps=2, batch_size=len(hidden),
                           lr=1e-3, progress=False)
    with torch.no_grad():
        after = float(lq.window_loss(model, batch))
    assert len(history) == 6 and after < before - 0.5
    assert not torch.equal(model.blocks[0].mlp.w_1.weight, packaged)  # the copy learned ...
    assert torch.equal(encoder.blocks[-1].mlp.w_1.weight, packaged)  # ... MiniLM is untouched


def test_top_tensors_round_trip(minilm):
    _, encoder = minilm
    torch.manual_seed(1)
    model = lq.TopSpanModel(encoder)
    tensors = lq.top_tensors(model)
    assert all(v.dtype == torch.float16 for v in tensors.values())
    loaded = lq.load_top(encoder, tensors)
    w = loaded.qa.weight
    assert torch.equal(w, model.qa.weight.detach().half().float())
    with pytest.raises(RuntimeError):  # strict: a missing tensor is an error
        lq.load_top(encoder, {k: v for k, v in tensors.items() if "qa" not in k})


def test_committed_artefact_matches_the_windows_and_the_dev_threshold(minilm, split):
    from encoderlab.course.train import MAX_ARTEFACT_BYTES, artefact_path, load_artefact

    _, encoder = minilm
    assert artefact_path("l7-long-qa").stat().st_size < MAX_ARTEFACT_BYTES
    tensors, meta = load_artefact("l7-long-qa")
    for name in lq.SPLITS:
        assert lq.windows_fingerprint(split[name][1]) == meta[f"{name}_fingerprint"]
    dev_ex, dev_w = split["dev"]
    tau, right = lq.choose_threshold(dev_ex, dev_w, tensors["dev_start_logits"],
                                     tensors["dev_end_logits"])
    assert tau == pytest.approx(float(meta["threshold"]), abs=1e-4)  # tau comes from dev
    assert right == int(meta["dev_right"])
    test_ex, test_w = split["test"]
    assert tensors["test_start_logits"].shape == test_w["input_ids"].shape
    found = lq.long_answers(test_ex, test_w, tensors["test_start_logits"],
                            tensors["test_end_logits"], threshold=tau)
    scores = lq.long_qa_scores(test_ex, found["answers"])
    assert scores["n_exact"] == int(meta["test_n_exact"])
    assert scores["n_none_right"] == int(meta["test_n_none_right"])
    # loading works: the packaged MiniLM below, the stored top block and head above, give the
    # stored logits on the first test question's windows
    model = lq.load_top(encoder, tensors)
    rows = (test_w["example"] == 0).nonzero().squeeze(1)
    few = {k: v[rows] for k, v in test_w.items() if isinstance(v, torch.Tensor)}
    s, e = lq.top_logits(model, lq.lower_states(encoder, few), few)
    allowed = lq.candidates(few)
    assert torch.allclose(s[allowed], tensors["test_start_logits"][rows][allowed], atol=1e-3)
    assert torch.allclose(e[allowed], tensors["test_end_logits"][rows][allowed], atol=1e-3)

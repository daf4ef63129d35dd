"""Lesson 7: freezing, reading a span, metrics, the three tasks, probes and the recipes (the heads
themselves: tests/core/test_heads.py)."""

from __future__ import annotations

import pytest
import torch

from encoderlab import heads
from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.lessons import l07_finetune as ft
from encoderlab.lessons import l07_tasks as tasks


def tiny_encoder(pooler: bool = True) -> EncoderModel:
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=32,
                           pooler=pooler)
    return EncoderModel(config).eval()


# --- Heads ----------------------------------------------------------------------------------------


def test_token_classifier_and_freezing():
    model = heads.TokenClassifier(tiny_encoder(), 7)
    ids = torch.randint(5, 50, (2, 6))
    assert model(ids).shape == (2, 6, 7)
    total = ft.count_trainable(model)
    ft.freeze(model.encoder)
    assert ft.count_trainable(model) == 16 * 7 + 7  # only the linear head
    assert ft.count_trainable(ft.unfreeze(model.encoder)) + 16 * 7 + 7 == total


def brute_force_span(s, e, context, max_tokens):
    best, arg = float("-inf"), None
    for i in range(len(s)):
        for j in range(i, min(len(s), i + max_tokens)):
            if context[i] and context[j] and s[i] + e[j] > best:
                best, arg = float(s[i] + e[j]), (i, j)
    return arg


def test_best_span_equals_brute_force():
    g = torch.Generator().manual_seed(0)
    s, e = torch.randn(6, 12, generator=g), torch.randn(6, 12, generator=g)
    context = torch.zeros(6, 12, dtype=torch.bool)
    context[:, 4:10] = True
    context[5, 4:] = False
    context[5, 2] = True  # a one-token context
    for max_tokens in (1, 2, 5, 20):
        starts, ends, scores = ft.best_span(s, e, context, max_tokens)
        for k in range(6):
            assert (int(starts[k]), int(ends[k])) == brute_force_span(s[k], e[k], context[k],
                                                                      max_tokens)
            assert torch.isclose(scores[k], s[k, starts[k]] + e[k, ends[k]])


def test_best_span_errors():
    s = torch.zeros(2, 5)
    with pytest.raises(ValueError, match=r"shape \(batch, n\)"):
        ft.best_span(s, torch.zeros(2, 4), torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="context_mask must have shape"):
        ft.best_span(s, s, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        ft.best_span(s, s, torch.ones(2, 5, dtype=torch.bool), 0)
    with pytest.raises(ValueError, match=r"rows \[1\] have no context token"):
        ft.best_span(s, s, torch.tensor([[1, 1, 0, 0, 0], [0] * 5]).bool())


# --- Metrics ------------------------------------------------------------------------------------


def test_accuracy_and_confusion_matrix():
    gold = torch.tensor([0, 0, 1, 2, 2, 2])
    pred = torch.tensor([0, 1, 1, 2, 0, 2])
    assert ft.accuracy(pred, gold) == pytest.approx(4 / 6)
    m = ft.confusion_matrix(pred, gold, 3)
    assert m.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    assert m.diagonal().sum() / m.sum() == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="integer class ids"):
        ft.accuracy(torch.rand(6, 3), gold)
    with pytest.raises(ValueError, match="same non-zero length"):
        ft.accuracy(pred[:3], gold)
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        ft.confusion_matrix(pred, gold, 2)


@pytest.mark.parametrize("tags, spans", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    (["O", "O"], []),
    ([], []),
    (["B-PER", "B-PER", "I-PER"], [("PER", 0, 0), ("PER", 1, 2)]),
    (["O", "I-LOC", "I-LOC"], [("LOC", 1, 2)]),  # I- after O starts an entity (conlleval)
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2)]),  # a type change splits
    (["I-DATE"], [("DATE", 0, 0)]),
    (["B-LOC", "O", "I-LOC", "B-DATE", "I-DATE"], [("LOC", 0, 0), ("LOC", 2, 2),
                                                    ("DATE", 3, 4)]),
])
def test_bio_to_spans_hand_made(tags, spans):
    assert ft.bio_to_spans(tags) == spans


def test_bio_to_spans_errors():
    with pytest.raises(ValueError, match="not a BIO tag"):
        ft.bio_to_spans(["O", "PER"])
    with pytest.raises(ValueError, match="not a str"):
        ft.bio_to_spans("B-PER")


def test_entity_scores_hand_made():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-DATE", "I-DATE"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["O", "B-DATE", "I-DATE"]]
    s = ft.entity_scores(gold, pred)
    # PER 0-1 vs PER 0-0: a boundary error costs one false positive and one false negative
    assert (s["n_gold"], s["n_predicted"], s["n_correct"]) == (3, 3, 2)
    assert s["precision"] == s["recall"] == s["f1"] == pytest.approx(2 / 3)
    assert s["by_type"]["PER"]["f1"] == 0.0 and s["by_type"]["LOC"]["f1"] == 1.0
    wrong_type = ft.entity_scores([["B-PER"]], [["B-LOC"]])
    assert wrong_type["f1"] == 0.0 and wrong_type["n_predicted"] == 1
    nothing = ft.entity_scores([["O"]], [["O"]])
    assert nothing["f1"] == 0.0 and nothing["n_gold"] == 0
    with pytest.raises(ValueError, match="same number of sequences"):
        ft.entity_scores(gold, pred[:1])
    with pytest.raises(ValueError, match="sequence 1 has 3 gold tags but 2"):
        ft.entity_scores(gold, [pred[0], ["O", "O"]])


def test_squad_metrics():
    assert ft.normalize_answer("The  Data, scientist!") == "data scientist"
    assert ft.exact_match("a pilot", "Pilot.") == 1.0
    assert ft.exact_match("pilot in Lima", "pilot") == 0.0
    assert ft.token_f1("data scientist", "scientist") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert ft.token_f1("bus driver", "data scientist") == 0.0
    assert ft.token_f1("the", "") == 1.0  # both empty after normalisation


# --- Tasks --------------------------------------------------------------------------------------


def test_topic_task_is_balanced_deterministic_and_disjoint():
    task = tasks.topic_task(n_train=20, n_test=10)
    assert len(task.classes) == 4
    assert torch.bincount(task.train_labels).tolist() == [20] * 4
    assert torch.bincount(task.test_labels).tolist() == [10] * 4
    assert not set(task.train_texts) & set(task.test_texts)
    again = tasks.topic_task(n_train=20, n_test=10)
    assert again.train_texts == task.train_texts and torch.equal(again.test_labels,
                                                                 task.test_labels)
    with pytest.raises(ValueError, match="more than some classes have"):
        tasks.topic_task(n_train=5000)


def test_tagging_task_tags_are_well_formed_and_test_names_unseen():
    task = tasks.tagging_task(n_train=200, n_test=100)
    for words, tags in zip(task.train_words + task.test_words, task.train_tags + task.test_tags):
        assert len(words) == len(tags) and set(tags) <= set(tasks.TAGS)
        assert all(not t.startswith("I-") or tags[i - 1][2:] == t[2:]
                   for i, t in enumerate(tags))  # every I- continues its own type
    train_people = {w for ws, ts in zip(task.train_words, task.train_tags)
                    for w, t in zip(ws, ts) if t == "B-PER"} - set(tasks.AMBIGUOUS_WORDS)
    test_people = {w for ws, ts in zip(task.test_words, task.test_tags)
                   for w, t in zip(ws, ts) if t == "B-PER"} - set(tasks.AMBIGUOUS_WORDS)
    assert test_people and not train_people & test_people


def test_qa_task_answers_are_spans_of_the_context():
    train, test = tasks.qa_task(n_train=50, n_test=20)
    assert len(train) == 50 and len(test) == 20
    for ex in train + test:
        assert 0 <= ex.start <= ex.end < len(ex.context)
        assert ex.answer == " ".join(ex.context[ex.start:ex.end + 1])


def test_encoders_of_the_tasks(minilm):
    tokenizer, _ = minilm
    task = tasks.tagging_task(n_train=5, n_test=5)
    enc = ft.encode_tagged(tokenizer, task.train_words, task.train_tags)
    for k, tags in enumerate(task.train_tags):
        labels = enc["labels"][k][enc["first_piece"][k]]
        assert [tasks.TAGS[t] for t in labels.tolist()] == tags
    one_hot = torch.nn.functional.one_hot(enc["labels"].clamp(min=0), len(tasks.TAGS)).float()
    assert ft.word_tags(one_hot, enc["first_piece"]) == task.train_tags
    with pytest.raises(ValueError, match="more than max_length=4"):
        ft.encode_tagged(tokenizer, task.train_words, task.train_tags, max_length=4)

    train, _ = tasks.qa_task(n_train=8, n_test=1)
    qa = ft.encode_qa(tokenizer, train)
    for k, ex in enumerate(train):
        assert qa["context_mask"][k, qa["starts"][k]] and qa["context_mask"][k, qa["ends"][k]]
        assert (qa["token_type_ids"][k][qa["context_mask"][k]] == 1).all()
        text = ft.span_text(ex, qa["word_of"][k], int(qa["starts"][k]), int(qa["ends"][k]))
        assert text == ex.answer
    gold = ft.qa_scores(train, qa["word_of"], qa["starts"], qa["ends"])
    assert gold["exact_match"] == gold["f1"] == 100.0


def test_with_evaluations_records_a_curve_without_changing_the_batches():
    model = torch.nn.Linear(2, 2)
    calls, curve = iter(range(100)), []
    out = list(ft.with_evaluations(iter(range(7)), model, lambda: next(calls), 3, curve))
    assert out == list(range(7))
    assert curve == [(0, 0.0), (3, 1.0), (6, 2.0)]
    assert model.training


def test_train_probe_trains_on_one_thread_and_restores_the_thread_count():
    settings = {"lr": 0.1, "batch_size": 4, "eval_every": 5}
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)
    y = (x[:, 0] > 0).long()
    threads = torch.get_num_threads()
    seen = []

    def loss_fn(m, b):
        seen.append(torch.get_num_threads())
        return torch.nn.functional.cross_entropy(m(b[0]), b[1])

    torch.manual_seed(0)
    head = torch.nn.Linear(3, 2)
    run = ft.train_probe(head, (x, y), loss_fn, lambda: float(len(seen)), steps=10,
                         settings=settings)
    assert set(seen) == {1} and torch.get_num_threads() == threads
    assert run["steps"].tolist() == [0, 5, 10] and run["values"].tolist() == [0.0, 5.0, 10.0]
    assert run["loss"].shape == (10,)

    def fails(m, b):
        raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        ft.train_probe(head, (x, y), fails, lambda: 0.0, steps=3, settings=settings)
    assert torch.get_num_threads() == threads  # restored also after an error


# --- Recipes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, keys", [
    ("l7-classify-mean", {"mean.curve_steps", "mean.curve_accuracy", "mean.test_logits",
                          "test_labels"}),
    ("l7-classify-cls", {"cls.curve_steps", "cls.curve_accuracy", "cls.test_logits"}),
    ("l7-tag", {"curve_steps", "curve_f1", "loss", "test_predicted"}),
    ("l7-extract", {"curve_steps", "curve_exact_match", "test_starts", "start_logits"}),
])
def test_recipes_run_and_artefacts_load(name, keys, tmp_path):
    from encoderlab.course.train import main
    from encoderlab.training import load_artefact

    out = tmp_path / f"{name}.safetensors"
    assert main([name, "--steps", "2", "--quiet", "--out", str(out)]) == 0
    from safetensors import safe_open

    with safe_open(str(out), framework="pt") as f:
        assert keys <= set(f.keys())
        assert f.metadata()["steps"] == "2"
        for key in keys:  # a run shorter than the first evaluation records its final one only
            if key.endswith("curve_steps"):
                assert f.get_tensor(key).tolist() == [2]
    tensors, metadata = load_artefact(name)
    assert keys <= set(tensors) and metadata["name"] == name
    assert metadata["command"] == f"python -m encoderlab train {name}"


# --- Comparing two models on one test set; identifying a test set (Lesson 7, §3) ---------------


def test_paired_sign_test():
    a = torch.tensor([True] * 10 + [False] * 2)
    b = torch.tensor([False] * 8 + [True] * 4)
    t = ft.paired_sign_test(a, b)
    assert (t["a_only"], t["b_only"]) == (8, 2)
    assert t["p_value"] == pytest.approx(2 * (1 + 10 + 45) / 2**10)
    assert ft.paired_sign_test(a, a)["p_value"] == 1.0  # no disagreement, no evidence
    assert ft.paired_sign_test(b, a)["a_only"] == 2
    with pytest.raises(ValueError, match="boolean tensors"):
        ft.paired_sign_test(torch.tensor([1, 0]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="same shape"):
        ft.paired_sign_test(torch.tensor([True]), torch.tensor([True, False]))


def test_texts_fingerprint():
    assert ft.texts_fingerprint(["a", "b"]) == ft.texts_fingerprint(["a", "b"])
    assert ft.texts_fingerprint(["a", "b"]) != ft.texts_fingerprint(["b", "a"])
    assert len(ft.texts_fingerprint(["a"])) == 16
    with pytest.raises(ValueError, match="list of strings"):
        ft.texts_fingerprint("a")
    with pytest.raises(ValueError, match="list of strings"):
        ft.texts_fingerprint([])


def test_committed_classify_artefacts_match_the_test_set():
    from encoderlab.training import load_artefact

    task = tasks.topic_task()
    for how in ("mean", "cls"):
        tensors, meta = load_artefact(f"l7-classify-{how}")
        assert meta["test_texts"] == ft.texts_fingerprint(task.test_texts)
        assert meta["train_texts"] == ft.texts_fingerprint(task.train_texts)
        assert tensors[f"{how}.test_logits"].shape == (len(task.test_texts), len(task.classes))


def test_frozen_outputs_all_layers_match_one_pass_per_row():
    encoder = tiny_encoder().eval()
    ids = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 3, 0, 0]])
    mask = ids != 0
    out = ft.frozen_outputs(encoder, {"input_ids": ids, "attention_mask": mask}, batch_size=1,
                            all_layers=True)
    assert out["layers"].shape == (encoder.config.n_layers + 1, 2, 5, encoder.config.d_model)
    assert torch.allclose(out["layers"][-1], out["hidden"], atol=1e-6)  # H^(L) is the output
    with torch.no_grad():
        alone = encoder(ids[1:, :3], attention_mask=mask[1:, :3]).hidden_states
    for k, h in enumerate(alone):
        assert torch.allclose(out["layers"][k, 1, :3], h[0], atol=1e-5)
    assert out["layers"][:, 1, 3:].abs().max() == 0  # zero on the padding
    assert "layers" not in ft.frozen_outputs(encoder, {"input_ids": ids, "attention_mask": mask})


def test_tagging_templates_are_public_and_used():
    assert len(tasks.TAGGING_TEMPLATES) == 12
    task = tasks.tagging_task(n_train=60, n_test=20)
    for words, tags in zip(task.train_words + task.test_words, task.train_tags + task.test_tags):
        shape = [w if t == "O" else "{" + t[2:] + "}" for w, t in zip(words, tags)
                 if not t.startswith("I-")]  # one slot per entity
        assert " ".join(shape) in tasks.TAGGING_TEMPLATES

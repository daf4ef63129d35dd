"""Lesson 5: the corpus, the tiny encoder and its causal twin, blanks, recipes (MLM corruption
and its loss: tests/core/test_objectives.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from encoderlab.course import stats
from encoderlab.heads import TinyLM
from encoderlab.lessons import l05_mlm as mlm
from encoderlab.objectives import (
    IGNORE_INDEX,
    mlm_corrupt,
    mlm_loss,
    mlm_model_loss,
    next_token_loss,
)

SPECIALS = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK]


# --- the corpus, the model and its losses --------------------------------------------------------


@pytest.fixture(scope="module")
def data():
    return mlm.corpus_data()


def test_corpus_data_is_cached_and_consistent(data):
    assert mlm.corpus_data() is data
    assert data.train_ids.shape[0] == len(data.corpus.train)
    assert data.held_ids.shape[0] == len(data.corpus.held_out)
    assert data.train_ids.shape[1] <= mlm.MAX_LENGTH
    assert (data.train_ids[:, 0] == data.vocab.cls_id).all()
    assert "fingerprint" in repr(data)
    with pytest.raises(ValueError, match="max_length must be an int >= 3"):
        mlm.corpus_data(max_length=2)


def test_held_out_halves_split_validation_from_test(data):
    valid, test = mlm.held_out_halves(data.corpus.held_out)
    assert (data.valid, data.test) == (valid, test)
    assert valid + test != data.corpus.held_out and sorted(valid + test) == sorted(
        data.corpus.held_out)
    assert not set(valid) & set(test) and abs(len(valid) - len(test)) <= 1
    assert data.valid_ids.shape[0] == len(valid) and data.test_ids.shape[0] == len(test)
    assert len(data.held_out_fingerprint) == 16
    with pytest.raises(ValueError, match="at least 2"):
        mlm.held_out_halves(["one"])


def test_vocab_from_tokens_rebuilds_the_same_vocabulary(data):
    again = mlm.vocab_from_tokens(data.vocab.tokenizer, data.vocab.tokens)
    sentences = data.corpus.held_out[:20]
    for a, b in zip(again.encode(sentences), data.vocab.encode(sentences), strict=True):
        assert torch.equal(a, b)
    assert again.special_ids == data.vocab.special_ids and again.size == data.vocab.size
    with pytest.raises(ValueError, match="must start with the specials"):
        mlm.vocab_from_tokens(data.vocab.tokenizer, ["a", "b"])
    with pytest.raises(ValueError, match="distinct"):
        mlm.vocab_from_tokens(data.vocab.tokenizer, [*data.vocab.tokens[:6], "the", "the"])


def test_tiny_config_and_errors():
    config = mlm.tiny_config(100)
    assert (config.vocab_size, config.d_model, config.n_max) == (100, 128, mlm.MAX_LENGTH)
    assert mlm.tiny_config(100, n_layers=3).n_layers == 3
    with pytest.raises(ValueError, match="vocab_size must be an int >= 6"):
        mlm.tiny_config(3)


def small_lm(causal, vocab=30):
    torch.manual_seed(0)
    return TinyLM(mlm.tiny_config(vocab, d_model=32, n_heads=2, d_ff=64, dropout=0.0),
                  causal=causal)


def test_mlm_model_loss_equals_mlm_loss_on_the_full_logits():
    model = small_lm(False).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 30, (4, 9), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones_like(ids)
    inputs, labels = mlm_corrupt(ids, mask, SPECIALS, 30, generator=g, mask_id=4)
    fast, logits = mlm_model_loss(model, inputs, mask, labels)
    slow = mlm_loss(model(inputs, mask), labels)
    assert fast.item() == pytest.approx(slow.item(), rel=1e-5)
    assert logits.shape == (int((labels != IGNORE_INDEX).sum()), 30)
    only_specials = torch.tensor([[2, 3]])
    nothing = torch.full_like(only_specials, IGNORE_INDEX)
    assert mlm_model_loss(model, only_specials, torch.ones_like(only_specials), nothing)[0] == 0


def test_train_tiny_lm_runs_both_objectives_from_the_same_start(data):
    models = {}
    for objective in mlm.OBJECTIVES:
        model, history = mlm.train_tiny_lm(data, objective, steps=3, progress=False, n_layers=1)
        assert len(history) == 3 and all(math.isfinite(x) for x in history)
        assert model.causal == (objective == "next-token") and not model.training
        models[objective] = model
    with pytest.raises(ValueError, match="objective must be one of"):
        mlm.train_tiny_lm(data, "causal", steps=1)


def test_training_lowers_the_mlm_loss(data):
    _, history = mlm.train_tiny_lm(data, "mlm", steps=40, progress=False, n_layers=1)
    assert sum(history[-10:]) / 10 < sum(history[:5]) / 5 - 0.5


def _corrupt(ids, mask, vocab, seed):
    """(inputs, attention_mask, labels): one MLM corruption drawn from ``seed``."""
    inputs, labels = mlm_corrupt(ids, mask, vocab.special_ids, vocab.size, mask_id=vocab.mask_id,
                                 generator=torch.Generator().manual_seed(seed))
    return inputs, mask, labels


def test_held_out_loss_is_the_models_own_objective_on_fixed_draws(data):
    torch.manual_seed(0)
    encoder = TinyLM(mlm.tiny_config(data.vocab.size, n_layers=1), causal=False).eval()
    decoder = TinyLM(mlm.tiny_config(data.vocab.size, n_layers=1), causal=True).train()
    ids, mask = data.valid_ids[:16], data.valid_mask[:16]
    first = mlm.held_out_loss(encoder, ids, mask, data.vocab)
    assert first == mlm.held_out_loss(encoder, ids, mask, data.vocab)  # the same corruptions
    by_hand = sum(mlm_model_loss(encoder, *_corrupt(ids, mask, data.vocab, 100 + s))[0].item()
                  for s in range(2)) / 2
    assert mlm.held_out_loss(encoder, ids, mask, data.vocab, draws=2) == pytest.approx(by_hand)
    causal = mlm.held_out_loss(decoder, ids, mask, data.vocab)
    decoder.eval()
    assert causal == pytest.approx(next_token_loss(decoder(ids, mask), ids, mask).item())
    assert math.log(data.vocab.size) - 1 < first < math.log(data.vocab.size) + 1  # untrained
    with pytest.raises(ValueError, match="draws must be a positive int"):
        mlm.held_out_loss(encoder, ids, mask, data.vocab, draws=0)


@pytest.mark.parametrize("objective", mlm.OBJECTIVES)
def test_train_selected_keeps_the_checkpoint_with_the_lowest_validation_loss(data, objective):
    model, history, selection = mlm.train_selected(data, objective, steps=6, eval_every=2,
                                                   progress=False, n_layers=1)
    _, plain = mlm.train_tiny_lm(data, objective, steps=6, progress=False, n_layers=1)
    assert history == plain  # measuring does not change the run
    assert selection.steps == [2, 4, 6] and len(selection.losses) == 3
    assert selection.best_loss == min(selection.losses)
    assert selection.best_step == selection.steps[selection.losses.index(min(selection.losses))]
    again = mlm.held_out_loss(model, data.valid_ids, data.valid_mask, data.vocab)
    assert again == pytest.approx(selection.best_loss, abs=1e-5)  # the kept weights are those
    assert not model.training
    with pytest.raises(ValueError, match="eval_every must be a positive int"):
        mlm.train_selected(data, objective, steps=2, eval_every=0)


def test_train_selected_can_keep_an_earlier_checkpoint(data, monkeypatch):
    losses = iter([5.0, 4.0, 4.5])  # the middle one is best
    monkeypatch.setattr(mlm, "held_out_loss", lambda *args, **kwargs: next(losses))
    model, _, selection = mlm.train_selected(data, "next-token", steps=6, eval_every=2,
                                             progress=False, n_layers=1)
    assert selection.best_step == 4 and selection.best_loss == 4.0
    reference, _ = mlm.train_tiny_lm(data, "next-token", steps=4, progress=False, n_layers=1)
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)  # the weights after step 4, not after step 6


# --- fill-mask and the blank probe ---------------------------------------------------------------


def test_fill_mask_reads_the_mask_or_the_left_context():
    ids = torch.tensor([2, 7, 8, 9, 10, 3])
    enc, dec = small_lm(False).eval(), small_lm(True).eval()
    top, probs = mlm.fill_mask(enc, ids, 3, mask_id=4, k=5)
    assert top.shape == probs.shape == (5,) and (probs[:-1] >= probs[1:]).all()
    masked = ids.clone()
    masked[3] = 4
    expected = torch.softmax(enc(masked[None])[0, 3], -1).topk(5)
    assert torch.equal(top, expected.indices)
    # the causal model's prediction ignores the token at the blank and everything after it
    other = ids.clone()
    other[3:] = torch.tensor([20, 21, 22])
    assert torch.equal(mlm.fill_mask(dec, ids, 3, 4)[0], mlm.fill_mask(dec, other, 3, 4)[0])
    with pytest.raises(ValueError, match="position must be in 1..5"):
        mlm.fill_mask(enc, ids, 0, 4)
    with pytest.raises(ValueError, match="one sentence"):
        mlm.fill_mask(enc, ids[None], 2, 4)


def test_blank_sets_follow_their_rules(data):
    sets = mlm.blank_sets(data.vocab, data.corpus.held_out)
    assert set(sets) == set(mlm.BLANK_RULES)
    early, late = sets["early"], sets["late"]
    assert len(early) > 150 and len(late) > 150
    for blanks in (early, late):
        for i in range(len(blanks)):
            t = int(blanks.position[i])
            tokens = data.vocab.decode(blanks.input_ids[i, : int(blanks.attention_mask[i].sum())])
            assert tokens[t].isalpha() and not tokens[t + 1].startswith("##")
            assert int(blanks.answer[i]) == int(blanks.input_ids[i, t]) != data.vocab.unk_id
    assert (early.position == 2).all()  # the left context is [CLS] and one word
    assert (late.right_context() == 2).all()  # only the final punctuation and [SEP] follow


def test_blank_accuracy_scores_both_models_on_the_same_blanks():
    ids = torch.tensor([[2, 7, 8, 9, 3], [2, 10, 11, 12, 3]])
    blanks = mlm.BlankSet("t", ids, torch.ones_like(ids), torch.tensor([2, 3]),
                          torch.tensor([8, 12]))
    for causal in (False, True):
        model = small_lm(causal).eval()
        acc = mlm.blank_accuracy(model, blanks, mask_id=4, ks=(1, 5, 30))
        assert set(acc) == {1, 5, 30} and acc[30] == 1.0 and 0 <= acc[1] <= acc[5] <= 1
        by_hand = [int(mlm.fill_mask(model, ids[i], int(blanks.position[i]), 4, k=1)[0][0])
                   == int(blanks.answer[i]) for i in range(2)]
        assert acc[1] == sum(by_hand) / 2
        assert mlm.blank_hits(model, blanks, 4, k=1).tolist() == by_hand
    empty = mlm.BlankSet("t", ids[:0], ids[:0], torch.tensor([], dtype=torch.long),
                         torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="empty"):
        mlm.blank_accuracy(small_lm(False), empty, 4)


def test_word_pairs_are_adjacent_whole_words(data):
    pairs = mlm.word_pairs(data.vocab, data.test)
    assert len(pairs) > 100 and pairs.answer.shape == (len(pairs), 2)
    rows = torch.arange(len(pairs))
    assert torch.equal(pairs.answer[:, 0], pairs.input_ids[rows, pairs.position])
    assert torch.equal(pairs.answer[:, 1], pairs.input_ids[rows, pairs.position + 1])
    for i in range(0, len(pairs), 37):
        n = int(pairs.attention_mask[i].sum())
        tokens = data.vocab.decode(pairs.input_ids[i, :n])
        t = int(pairs.position[i])
        assert tokens[t].isalpha() and tokens[t + 1].isalpha()
        assert not tokens[t + 2].startswith("##")
    assert (pairs.answer != data.vocab.unk_id).all()
    with pytest.raises(ValueError, match="no sentence has two adjacent whole words"):
        mlm.word_pairs(data.vocab, ["Yes."])


def test_fill_two_fills_independently_or_one_at_a_time():
    ids = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 11, 12, 13, 14, 3]])
    mask = torch.ones_like(ids)
    position = torch.tensor([1, 3])
    pairs = mlm.BlankSet("pair", ids, mask, position,
                         torch.stack([ids[[0, 1], [1, 3]], ids[[0, 1], [2, 4]]], dim=1))
    model = small_lm(False).eval()
    independent, one_at_a_time = mlm.fill_two(model, pairs, mask_id=4)
    assert independent.shape == one_at_a_time.shape == (2, 4 // 2)
    for i in range(2):
        t = int(position[i])
        hidden = ids[i].clone()
        hidden[t:t + 2] = 4
        probs = model(hidden[None])[0, t:t + 2].softmax(-1)  # (2, V)
        assert independent[i].tolist() == probs.argmax(-1).tolist()
        first = int(probs.max(-1).values.argmax())  # the more confident blank is filled first
        assert one_at_a_time[i, first] == independent[i, first]
        hidden[t + first] = independent[i, first]
        assert one_at_a_time[i, 1 - first] == model(hidden[None])[0, t + 1 - first].argmax()
    with pytest.raises(ValueError, match="bidirectional"):
        mlm.fill_two(small_lm(True).eval(), pairs, 4)
    one = mlm.BlankSet("t", ids, mask, position, ids[:, 1])
    with pytest.raises(ValueError, match=r"answer of shape \(m, 2\)"):
        mlm.fill_two(model, one, 4)


def test_loss_positions_counts_the_signal_per_sequence():
    ids = torch.tensor([[2, 7, 8, 9, 3, 0], [2, 1, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    mlm_n = mlm.loss_positions(ids, mask, SPECIALS, "mlm")
    assert mlm_n.tolist() == pytest.approx([0.45, 0.0])  # 3 ordinary tokens, then none ([UNK])
    assert mlm.loss_positions(ids, mask, SPECIALS, "next-token").tolist() == [4.0, 2.0]
    with pytest.raises(ValueError, match="objective must be one of"):
        mlm.loss_positions(ids, mask, SPECIALS, "masked")
    with pytest.raises(ValueError, match="shape of input_ids"):
        mlm.loss_positions(ids, mask[:, :3], SPECIALS, "mlm")


def test_smooth_is_a_running_mean():
    assert mlm.smooth([1.0, 3.0, 5.0, 7.0], window=2) == pytest.approx([1.0, 2.0, 4.0, 6.0])
    assert mlm.smooth([], window=3) == []
    with pytest.raises(ValueError, match="window must be a positive int"):
        mlm.smooth([1.0], window=0)


# --- recipes and artefacts -----------------------------------------------------------------------


@pytest.mark.parametrize("name, causal", [("l5-mlm", False), ("l5-causal", True)])
def test_recipe_runs_with_a_few_steps(name, causal, tmp_path, data):
    from safetensors import safe_open

    from encoderlab.course.train import load_artefact, main, recipes

    assert name in recipes()
    out = tmp_path / f"{name}.safetensors"
    assert main([name, "--steps", "3", "--out", str(out), "--quiet"]) == 0
    with safe_open(str(out), framework="pt") as f:
        artefact = ({k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata()))
    model, history, metadata = mlm.load_tiny_lm(name, artefact=artefact)
    assert len(history) == 3 and model.causal == causal
    assert metadata["corpus_fingerprint"] == data.corpus.fingerprint
    assert metadata["command"] == f"python -m encoderlab train {name} --steps 3"
    assert json.loads(metadata["training"])["steps"] == 3
    assert load_artefact  # the committed one is tested below


@pytest.mark.parametrize("name, causal", [("l5-mlm", False), ("l5-causal", True)])
def test_committed_artefact_loads_with_the_expected_keys(name, causal):
    from encoderlab.course.train import artefact_path, load_artefact

    assert artefact_path(name).stat().st_size < 5 * 2**20
    tensors, metadata = load_artefact(name)
    assert "history" in tensors and "model.head.proj.weight" in tensors
    for key in ("config", "corpus_fingerprint", "vocab", "command", "training", "objective",
                "selected_step", "validation_curve", "held_out_fingerprint"):
        assert key in metadata
    assert metadata["command"] == f"python -m encoderlab train {name}"
    model, history, _ = mlm.load_tiny_lm(name)
    objective = "next-token" if causal else "mlm"
    assert model.causal == causal and len(history) == mlm.RECIPE_STEPS[objective]
    assert json.loads(metadata["training"])["steps"] == mlm.RECIPE_STEPS[objective]
    vocab = metadata["vocab"].split("\n")
    assert len(vocab) == model.config.vocab_size


def test_load_tiny_lm_rejects_other_artefacts():
    with pytest.raises(ValueError, match="not a Lesson 5 model artefact"):
        mlm.load_tiny_lm("x", artefact=({"w": torch.zeros(1)}, {}))


@pytest.mark.parametrize("name", ["l5-mlm", "l5-causal"])
def test_committed_artefact_was_trained_on_this_data_and_chose_its_checkpoint(name, data):
    from encoderlab.course.train import load_artefact

    _, metadata = load_artefact(name)
    mlm.check_artefact_data(metadata, data)  # raises if the data differ
    curve = json.loads(metadata["validation_curve"])
    steps = json.loads(metadata["training"])
    assert curve["steps"] == list(range(steps["eval_every"], steps["steps"] + 1,
                                        steps["eval_every"]))
    best = int(metadata["selected_step"])
    assert curve["losses"][curve["steps"].index(best)] == min(curve["losses"])


def test_check_artefact_data_names_what_differs(data):
    metadata = {"corpus_fingerprint": data.corpus.fingerprint,
                "held_out_fingerprint": data.held_out_fingerprint,
                "vocab": "\n".join(data.vocab.tokens), "name": "l5-mlm",
                "command": "python -m encoderlab train l5-mlm"}
    mlm.check_artefact_data(metadata, data)
    for key, wrong in (("corpus_fingerprint", "0110551b00000000"),
                       ("held_out_fingerprint", "x"),
                       ("vocab", "\n".join(data.vocab.tokens[:-59]))):
        with pytest.raises(ValueError, match=f"trained on other data: its {key}.*retrain"):
            mlm.check_artefact_data({**metadata, key: wrong}, data)


# --- how sure a comparison is --------------------------------------------------------------------


def test_wilson_interval_matches_the_formula_and_stays_in_0_1():
    low, high = stats.wilson_interval(41, 100)
    assert (round(low, 4), round(high, 4)) == (0.3187, 0.508)  # Wilson (1927), z = 1.96
    assert stats.wilson_interval(0, 10)[0] == 0.0 and stats.wilson_interval(10, 10)[1] == 1.0
    assert stats.wilson_interval(0, 10)[1] > 0.2  # no hits is not proof of zero
    with pytest.raises(ValueError, match="0 <= hits <= n"):
        stats.wilson_interval(5, 4)


def test_paired_difference_interval_covers_the_difference_and_is_seeded():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(400, generator=g) < 0.5
    b = torch.rand(400, generator=g) < 0.3
    low, high = stats.paired_difference_interval(a, b)
    diff = (a.float().mean() - b.float().mean()).item()
    assert low < diff < high and 0.05 < high - low < 0.2
    assert (low, high) == stats.paired_difference_interval(a, b)
    assert stats.paired_difference_interval(a, a) == (0.0, 0.0)
    with pytest.raises(ValueError, match="one shape"):
        stats.paired_difference_interval(a, b[:3])
    with pytest.raises(ValueError, match="level must lie"):
        stats.paired_difference_interval(a, b, level=1.5)


def test_sign_test_is_the_exact_binomial_tail():
    assert stats.sign_test(0, 0) == 1.0
    assert stats.sign_test(5, 5) == 1.0
    assert stats.sign_test(6, 0) == pytest.approx(2 / 64)
    assert stats.sign_test(1, 9) == pytest.approx(2 * 11 / 1024)
    assert stats.sign_test(41, 13) < 0.001
    with pytest.raises(ValueError, match="ints >= 0"):
        stats.sign_test(-1, 3)

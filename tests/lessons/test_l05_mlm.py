"""Lesson 5: the corpus, the tiny encoder, blanks read whole or cut, recipes (MLM corruption
and its loss: tests/core/test_objectives.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from encoderlab import stats
from encoderlab.heads import TinyLM
from encoderlab.lessons import l05_blanks as fills
from encoderlab.lessons import l05_mlm as mlm
from encoderlab.objectives import (
    IGNORE_INDEX,
    mlm_corrupt,
    mlm_loss,
    mlm_model_loss,
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


def test_train_tiny_lm_trains_a_bidirectional_model(data):
    model, history = mlm.train_tiny_lm(data, steps=3, progress=False, n_layers=1)
    assert len(history) == 3 and all(math.isfinite(x) for x in history)
    assert not model.causal and not model.training


def test_cut_at_random_ends_a_share_of_the_rows_early_with_sep():
    ids = torch.tensor([[2, 10, 11, 12, 13, 3, 0], [2, 10, 3, 0, 0, 0, 0], [2, 5, 6, 7, 3, 0, 0]])
    mask = (ids != 0).long()
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        cut, cut_mask = mlm.cut_at_random(ids, mask, 3, g, share=1.0)
        for i, k in enumerate((4, 1, 3)):  # tokens between [CLS] and [SEP]
            n = int(cut_mask[i].sum())
            assert torch.equal(cut[i, :n - 1], ids[i, :n - 1])  # a prefix, [CLS] first
            assert cut[i, n - 1] == 3 and (cut[i, n:] == 0).all()  # then [SEP], then padding
            kept = n - 2
            assert (kept == k) if k < 2 else (1 <= kept <= k - 1)  # 1-word rows stay whole
    whole, whole_mask = mlm.cut_at_random(ids, mask, 3, g, share=0.0)
    assert torch.equal(whole, ids) and torch.equal(whole_mask, mask)
    rows = torch.full((2000, 12), 7)
    rows[:, 0], rows[:, -1] = 2, 3
    _, m = mlm.cut_at_random(rows, torch.ones_like(rows), 3, torch.Generator().manual_seed(1))
    share = (m.sum(dim=1) < 12).float().mean().item()
    assert abs(share - 0.5) < 0.05  # about half the rows are cut
    with pytest.raises(ValueError, match="share must be a probability"):
        mlm.cut_at_random(ids, mask, 3, g, share=1.5)


def test_training_lowers_the_mlm_loss(data):
    _, history = mlm.train_tiny_lm(data, steps=40, progress=False, n_layers=1)
    assert sum(history[-10:]) / 10 < sum(history[:5]) / 5 - 0.5


def _corrupt(ids, mask, vocab, seed):
    """(inputs, attention_mask, labels): one MLM corruption drawn from ``seed``."""
    inputs, labels = mlm_corrupt(ids, mask, vocab.special_ids, vocab.size, mask_id=vocab.mask_id,
                                 generator=torch.Generator().manual_seed(seed))
    return inputs, mask, labels


def test_held_out_loss_is_the_mlm_loss_on_fixed_draws(data):
    torch.manual_seed(0)
    encoder = TinyLM(mlm.tiny_config(data.vocab.size, n_layers=1), causal=False).eval()
    decoder = TinyLM(mlm.tiny_config(data.vocab.size, n_layers=1), causal=True)
    ids, mask = data.valid_ids[:16], data.valid_mask[:16]
    first = mlm.held_out_loss(encoder, ids, mask, data.vocab)
    assert first == mlm.held_out_loss(encoder, ids, mask, data.vocab)  # the same corruptions
    by_hand = sum(mlm_model_loss(encoder, *_corrupt(ids, mask, data.vocab, 100 + s))[0].item()
                  for s in range(2)) / 2
    assert mlm.held_out_loss(encoder, ids, mask, data.vocab, draws=2) == pytest.approx(by_hand)
    with pytest.raises(ValueError, match="bidirectional"):
        mlm.held_out_loss(decoder, ids, mask, data.vocab)
    assert math.log(data.vocab.size) - 1 < first < math.log(data.vocab.size) + 1  # untrained
    with pytest.raises(ValueError, match="draws must be a positive int"):
        mlm.held_out_loss(encoder, ids, mask, data.vocab, draws=0)


def test_train_selected_keeps_the_checkpoint_with_the_lowest_validation_loss(data):
    model, history, selection = mlm.train_selected(data, steps=6, eval_every=2,
                                                   progress=False, n_layers=1)
    _, plain = mlm.train_tiny_lm(data, steps=6, progress=False, n_layers=1)
    assert history == plain  # measuring does not change the run
    assert selection.steps == [2, 4, 6] and len(selection.losses) == 3
    assert selection.best_loss == min(selection.losses)
    assert selection.best_step == selection.steps[selection.losses.index(min(selection.losses))]
    again = mlm.held_out_loss(model, data.valid_ids, data.valid_mask, data.vocab)
    assert again == pytest.approx(selection.best_loss, abs=1e-5)  # the kept weights are those
    assert not model.training
    with pytest.raises(ValueError, match="eval_every must be a positive int"):
        mlm.train_selected(data, steps=2, eval_every=0)


def test_train_selected_can_keep_an_earlier_checkpoint(data, monkeypatch):
    losses = iter([5.0, 4.0, 4.5])  # the middle one is best
    monkeypatch.setattr(mlm, "held_out_loss", lambda *args, **kwargs: next(losses))
    model, _, selection = mlm.train_selected(data, steps=6, eval_every=2, progress=False,
                                             n_layers=1)
    assert selection.best_step == 4 and selection.best_loss == 4.0
    reference, _ = mlm.train_tiny_lm(data, steps=4, progress=False, n_layers=1)
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)  # the weights after step 4, not after step 6


# --- fill-mask and the blank probe ---------------------------------------------------------------


def test_fill_mask_reads_the_sentence_with_a_mask_at_the_blank():
    ids = torch.tensor([2, 7, 8, 9, 10, 3])
    enc = small_lm(False).eval()
    top, probs = fills.fill_mask(enc, ids, 3, mask_id=4, k=5)
    assert top.shape == probs.shape == (5,) and (probs[:-1] >= probs[1:]).all()
    masked = ids.clone()
    masked[3] = 4
    expected = torch.softmax(enc(masked[None])[0, 3], -1).topk(5)
    assert torch.equal(top, expected.indices)
    other = ids.clone()
    other[3] = 20  # the token at the blank is hidden: it cannot change the guesses
    assert torch.equal(fills.fill_mask(enc, ids, 3, 4)[0], fills.fill_mask(enc, other, 3, 4)[0])
    with pytest.raises(ValueError, match="bidirectional"):
        fills.fill_mask(small_lm(True).eval(), ids, 3, 4)
    with pytest.raises(ValueError, match="position must be in 1..5"):
        fills.fill_mask(enc, ids, 0, 4)
    with pytest.raises(ValueError, match="one sentence"):
        fills.fill_mask(enc, ids[None], 2, 4)


def test_word_pairs_are_adjacent_whole_words(data):
    pairs = fills.word_pairs(data.vocab, data.test)
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
        fills.word_pairs(data.vocab, ["Yes."])


def test_fill_two_fills_independently_or_one_at_a_time():
    ids = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 11, 12, 13, 14, 3]])
    mask = torch.ones_like(ids)
    position = torch.tensor([1, 3])
    pairs = fills.BlankSet("pair", ids, mask, position,
                         torch.stack([ids[[0, 1], [1, 3]], ids[[0, 1], [2, 4]]], dim=1))
    model = small_lm(False).eval()
    independent, one_at_a_time = fills.fill_two(model, pairs, mask_id=4)
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
        fills.fill_two(small_lm(True).eval(), pairs, 4)
    one = fills.BlankSet("t", ids, mask, position, ids[:, 1])
    with pytest.raises(ValueError, match=r"answer of shape \(m, 2\)"):
        fills.fill_two(model, one, 4)


def test_loss_positions_counts_the_signal_per_sequence():
    ids = torch.tensor([[2, 7, 8, 9, 3, 0], [2, 1, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    mlm_n = fills.loss_positions(ids, mask, SPECIALS, "mlm")
    assert mlm_n.tolist() == pytest.approx([0.45, 0.0])  # 3 ordinary tokens, then none ([UNK])
    assert fills.loss_positions(ids, mask, SPECIALS, "next-token").tolist() == [4.0, 2.0]
    with pytest.raises(ValueError, match="objective must be one of"):
        fills.loss_positions(ids, mask, SPECIALS, "masked")
    with pytest.raises(ValueError, match="shape of input_ids"):
        fills.loss_positions(ids, mask[:, :3], SPECIALS, "mlm")


def test_smooth_is_a_running_mean():
    assert fills.smooth([1.0, 3.0, 5.0, 7.0], window=2) == pytest.approx([1.0, 2.0, 4.0, 6.0])
    assert fills.smooth([], window=3) == []
    with pytest.raises(ValueError, match="window must be a positive int"):
        fills.smooth([1.0], window=0)


# --- recipes and artefacts -----------------------------------------------------------------------


def test_recipe_runs_with_a_few_steps(tmp_path, data):
    from safetensors import safe_open

    from encoderlab.course.train import main, recipes
    from encoderlab.training import load_artefact

    name = "l5-mlm"
    assert name in recipes() and "l5-causal" in recipes()
    out = tmp_path / f"{name}.safetensors"
    assert main([name, "--steps", "3", "--out", str(out), "--quiet"]) == 0
    with safe_open(str(out), framework="pt") as f:
        artefact = ({k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata()))
    model, history, metadata = mlm.load_tiny_lm(name, artefact=artefact)
    assert len(history) == 3 and not model.causal
    assert metadata["corpus_fingerprint"] == data.corpus.fingerprint
    assert metadata["command"] == f"python -m encoderlab train {name} --steps 3"
    training = json.loads(metadata["training"])
    assert training["steps"] == 3 and training["cut_share"] == mlm.CUT_SHARE
    assert load_artefact  # the committed one is tested below


def test_committed_artefact_loads_with_the_expected_keys():
    from encoderlab.training import artefact_path, load_artefact

    name = "l5-mlm"
    assert artefact_path(name).stat().st_size < 5 * 2**20
    tensors, metadata = load_artefact(name)
    assert "history" in tensors and "model.head.proj.weight" in tensors
    for key in ("config", "corpus_fingerprint", "vocab", "command", "training", "objective",
                "selected_step", "validation_curve", "held_out_fingerprint"):
        assert key in metadata
    assert metadata["command"] == f"python -m encoderlab train {name}"
    model, history, _ = mlm.load_tiny_lm(name)
    assert not model.causal and len(history) == mlm.RECIPE_STEPS["mlm"]
    training = json.loads(metadata["training"])
    assert training["steps"] == mlm.RECIPE_STEPS["mlm"] and training["cut_share"] == mlm.CUT_SHARE
    vocab = metadata["vocab"].split("\n")
    assert len(vocab) == model.config.vocab_size


def test_committed_decoder_is_causal_and_chose_its_checkpoint(data):
    from encoderlab.training import artefact_path

    assert artefact_path("l5-causal").stat().st_size < 5 * 2**20
    model, history, metadata = mlm.load_tiny_lm("l5-causal")
    mlm.check_artefact_data(metadata, data)
    assert model.causal and metadata["objective"] == "next-token"
    assert len(history) == mlm.RECIPE_STEPS["causal"]
    assert json.loads(metadata["config"]) == json.loads(mlm.load_tiny_lm("l5-mlm")[2]["config"])
    curve = json.loads(metadata["validation_curve"])
    best = int(metadata["selected_step"])
    assert curve["losses"][curve["steps"].index(best)] == min(curve["losses"])
    loss = mlm.held_out_next_token_loss(model, data.valid_ids, data.valid_mask)
    assert loss == pytest.approx(min(curve["losses"]), abs=1e-4)


def test_load_tiny_lm_rejects_other_artefacts():
    with pytest.raises(ValueError, match="not a Lesson 5 model artefact"):
        mlm.load_tiny_lm("x", artefact=({"w": torch.zeros(1)}, {}))


def test_committed_artefact_was_trained_on_this_data_and_chose_its_checkpoint(data):
    from encoderlab.training import load_artefact

    _, metadata = load_artefact("l5-mlm")
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


# --- §4-§5: plain-word blanks, and the words on their right -------------------------------------


def test_plain_word_positions_skip_code_and_short_words():
    tokens = ["[CLS]", "the", "value", "of", '"', "self", '"', "is", "returned", "by",
              "os", ".", "path", "quickly", ".", "[SEP]"]
    # "the": 3 letters; "of", "is", "by", "os": too short; "self": inside quotes;
    # "path": after "."; "quickly": before the final punctuation, allowed
    assert fills.plain_word_positions(tokens) == [1, 2, 8, 13]
    assert fills.plain_word_positions(["[CLS]", "run", "##ning", "fast", ".", "[SEP]"]) == [3]
    with pytest.raises(ValueError, match=r"\[CLS\] to \[SEP\]"):
        fills.plain_word_positions(["the", "end"])


def _toy_blanks():
    # two sentences, [CLS]=2, [SEP]=3, [MASK]=4, final punctuation 9, padding 0
    ids = torch.tensor([[2, 10, 11, 12, 13, 9, 3, 0], [2, 20, 21, 22, 9, 3, 0, 0]])
    mask = (ids != 0).long()
    return fills.BlankSet("word", ids, mask, torch.tensor([2, 1]), torch.tensor([11, 20]))


def test_cut_right_keeps_the_left_side_then_mask_and_sep():
    inputs, mask = fills.cut_right(_toy_blanks(), mask_id=4, sep_id=3)
    assert inputs.tolist() == [[2, 10, 4, 3, 0, 0, 0, 0], [2, 4, 3, 0, 0, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]]


def test_word_blanks_are_plain_words_with_words_after_them(data):
    blanks = fills.word_blanks(data.vocab, data.test)
    assert len(blanks) > 500
    tokens = [data.vocab.tokens[int(a)] for a in blanks.answer]
    assert all(t.isalpha() and len(t) >= 3 for t in tokens)
    assert bool((blanks.right_context() >= 3).all())  # a word, the final punctuation, [SEP]
    with pytest.raises(ValueError, match="no sentence"):
        fills.word_blanks(data.vocab, ["Yes."])


def test_score_blanks_ranks_only_allowed_tokens_and_reports_the_answers_loss():
    torch.manual_seed(0)
    model = small_lm(False, vocab=30).eval()
    blanks = _toy_blanks()
    inputs, mask = fills.cut_right(blanks, mask_id=4, sep_id=3)
    allowed = torch.zeros(30, dtype=torch.bool)
    allowed[[11, 20]] = True  # only the two answers may be guessed
    s = fills.score_blanks(model, inputs, mask, blanks, allowed)
    assert s["top-5"].all()  # two candidates: both answers are in every top five
    with torch.no_grad():
        logits = model(inputs, mask)[torch.arange(2), blanks.position][:, [11, 20]]  # (2, 2)
    expected = -logits.log_softmax(-1)[torch.arange(2), torch.tensor([0, 1])]
    assert torch.allclose(s["loss"], expected, atol=1e-5)
    assert s["top-1"].tolist() == (logits.argmax(-1) == torch.tensor([0, 1])).tolist()
    with pytest.raises(ValueError, match="shape"):
        fills.score_blanks(model, inputs[:, :4], mask, blanks)


def test_score_blanks_reads_a_causal_model_one_position_before_the_blank():
    torch.manual_seed(1)
    decoder = small_lm(True, vocab=30).eval()
    blanks = _toy_blanks()
    s = fills.score_blanks(decoder, blanks.input_ids, blanks.attention_mask, blanks)
    with torch.no_grad():  # row 0: blank at 2, read from [CLS] 10; row 1: blank at 1, from [CLS]
        left0 = decoder(torch.tensor([[2, 10]]))[0, 1]  # (V,)
        left1 = decoder(torch.tensor([[2]]))[0, 0]
    expected = torch.stack([-left0.log_softmax(-1)[11], -left1.log_softmax(-1)[20]])
    assert torch.allclose(s["loss"], expected, atol=1e-5)
    changed = blanks.input_ids.clone()
    changed[0, 2:6] = torch.tensor([5, 6, 7, 8])  # the blank and what follows: never read
    again = fills.score_blanks(decoder, changed, blanks.attention_mask, blanks)
    assert torch.allclose(again["loss"], s["loss"], atol=1e-5)


def test_keep_right_words_keeps_k_whole_words_then_sep():
    # [CLS]=2 [SEP]=3 [MASK]=4; token 12 is a "##" piece, so 11 12 is one word
    ids = torch.tensor([[2, 10, 20, 11, 12, 13, 14, 9, 3, 0]])
    blanks = fills.BlankSet("word", ids, (ids != 0).long(), torch.tensor([2]), torch.tensor([20]))
    piece = torch.zeros(30, dtype=torch.bool)
    piece[12] = True
    expected = {0: [2, 10, 4, 3], 1: [2, 10, 4, 11, 12, 3], 2: [2, 10, 4, 11, 12, 13, 3],
                3: [2, 10, 4, 11, 12, 13, 14, 3], 4: [2, 10, 4, 11, 12, 13, 14, 9, 3],
                9: [2, 10, 4, 11, 12, 13, 14, 9, 3]}
    for k, row in expected.items():
        inputs, mask = fills.keep_right_words(blanks, k, mask_id=4, sep_id=3, piece=piece)
        assert inputs[0].tolist() == row + [0] * (10 - len(row)), k
        assert mask[0].tolist() == [1] * len(row) + [0] * (10 - len(row)), k
    cut = fills.cut_right(_toy_blanks(), mask_id=4, sep_id=3)
    zero = fills.keep_right_words(_toy_blanks(), 0, 4, 3, torch.zeros(30, dtype=torch.bool))
    assert all(torch.equal(a, b) for a, b in zip(cut, zero, strict=True))
    with pytest.raises(ValueError, match="k must be a number of words"):
        fills.keep_right_words(blanks, -1, 4, 3, piece)


def test_train_causal_selected_trains_a_decoder_and_keeps_its_best_checkpoint(data):
    model, history, selection = mlm.train_causal_selected(data, steps=4, eval_every=2,
                                                          progress=False, n_layers=1)
    assert model.causal and not model.training and len(history) == 4
    assert selection.steps == [2, 4] and selection.best_loss == min(selection.losses)
    again = mlm.held_out_next_token_loss(model, data.valid_ids, data.valid_mask)
    assert again == pytest.approx(selection.best_loss, abs=1e-5)
    ids, mask = data.valid_ids[:8], data.valid_mask[:8]
    with torch.no_grad():  # by hand: position t predicts the real token at t + 1
        log_p = model(ids, mask).log_softmax(-1)[:, :-1]  # (8, n-1, V)
    labels, real = ids[:, 1:], mask[:, 1:] == 1
    by_hand = -log_p.gather(-1, labels[..., None])[..., 0][real].mean().item()
    assert mlm.held_out_next_token_loss(model, ids, mask) == pytest.approx(by_hand, abs=1e-5)
    with pytest.raises(ValueError, match="measures a causal model"):
        mlm.held_out_next_token_loss(small_lm(False, vocab=data.vocab.size), ids, mask)


def test_word_token_mask_keeps_alphabetic_non_special_tokens(data):
    words = fills.word_token_mask(data.vocab)
    assert words.shape == (data.vocab.size,)
    assert not words[list(data.vocab.special_ids)].any()
    assert words[data.vocab.tokens.index("the")]
    assert not words[data.vocab.tokens.index(".")]


def test_blank_table_prints_each_reading_and_its_paired_difference(capsys):
    hits = torch.tensor([True, True, False, True])  # 3 of 4
    misses = torch.tensor([False, True, False, False])  # 1 of 4
    scores = {"whole": {"top-1": hits, "top-5": hits, "loss": torch.tensor([1.0, 1.0, 3.0, 1.0])},
              "cut": {"top-1": misses, "top-5": hits, "loss": torch.tensor([2.0, 1.0, 4.0, 3.0])},
              "floor": {"top-1": misses, "top-5": misses}}
    gaps = fills.blank_table(scores, reference="whole")
    out = capsys.readouterr().out
    assert set(gaps) == {"cut", "floor"} and "loss" not in gaps["floor"]
    d, low, high = gaps["cut"]["top-1"]
    assert d == pytest.approx(-0.5) and low <= -0.5 <= high <= 0  # 1 of 4 against 3 of 4
    assert gaps["cut"]["loss"][0] == pytest.approx(1.0)  # (1 + 0 + 1 + 2) / 4 nats more
    assert gaps["cut"]["top-5"] == (0.0, 0.0, 0.0)
    lines = out.splitlines()
    assert len(lines) == 5 and "75.0%" in lines[2] and "-50.0 [" in lines[3]
    assert "+1.00 [" in lines[3] and lines[4].split()[3] == "-"  # no loss for the floor
    with pytest.raises(ValueError, match="reference must be one of"):
        fills.blank_table(scores, reference="nothing")
    with pytest.raises(ValueError, match="same blanks"):
        fills.blank_table({"a": scores["whole"], "b": {"top-1": hits[:2], "top-5": hits[:2]}}, "a")


def test_readable_joins_pieces_and_cuts_around_the_blank():
    tokens = ["[CLS]", "a", '"', "_", "_", "dict", "_", "_", '"', "is", "don", "’", "t",
              "run", "##ning", "(", "x", ")", ",", "___", "here", ".", "[SEP]"]
    assert fills.readable(tokens, width=200) == 'a "__dict__" is don’t running (x), ___ here.'
    assert fills.readable(["[CLS]", "a", ".", "x", "is", "it", ".", "[SEP]"]) == "a.x is it."
    short = fills.readable(tokens, width=20)
    assert "___" in short and short.startswith("…") and len(short) <= 22
    assert short == "…(x), ___ here."  # cut at word boundaries
    with pytest.raises(ValueError, match="width must be a positive int"):
        fills.readable(tokens, width=0)


# --- §2's counts and §4's echoes -----------------------------------------------------------------


def test_count_corruptions_counts_eligible_positions_and_fates(data):
    ids, mask = data.train_ids[:400], data.train_mask[:400]
    counts = mlm.count_corruptions(ids, mask, data.vocab, draws=3)
    real = mask == 1
    specials = sum(int((ids[real] == s).sum()) for s in data.vocab.special_ids)  # by hand
    assert counts["eligible"] == int(real.sum()) - specials and counts["special"] == specials
    assert len(counts["rates"]) == 3 and all(0.13 < r < 0.17 for r in counts["rates"])
    chosen = sum(counts["fates"])
    assert chosen == round(sum(counts["rates"]) * counts["eligible"])
    assert abs(counts["fates"][0] / chosen - 0.8) < 0.03
    assert counts["special_hits"] == 0 and counts["random_specials"] == 0
    with pytest.raises(ValueError, match="draws"):
        mlm.count_corruptions(ids, mask, data.vocab, draws=0)


def test_echo_margin_and_the_bayes_rule_on_hand_numbers():
    q = torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    shown = torch.tensor([2, 1, 0])
    # V' = 2: q(w)·V' against the best other token: 0.4 vs 0.5, 0.6 vs 0.5, 0.2 vs 0.8
    margin = fills.echo_margin(q, shown, n_ordinary=2)
    expected = torch.log10(torch.tensor([0.4 / 0.5, 0.6 / 0.5, 0.2 / 0.8]))
    assert torch.allclose(margin, expected)
    assert fills.bayes_echoes(q, shown, 2).tolist() == [False, True, False]
    # V' = 5: 1.0 vs 0.5, 1.5 vs 0.5, 0.5 vs 0.8
    assert fills.bayes_echoes(q, shown, 5).tolist() == [True, True, False]
    with pytest.raises(ValueError, match=r"q must be \(m, V\)"):
        fills.echo_margin(q[0], shown, 2)


class _EchoingModel(torch.nn.Module):
    """Logits 10 at the token it reads, 0 elsewhere: it always echoes what it is shown."""

    causal = False

    def __init__(self, vocab_size):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, input_ids, attention_mask=None):
        return 10.0 * torch.nn.functional.one_hot(input_ids, self.vocab_size).float()


def test_fate_readings_and_echo_curve_on_a_model_that_always_echoes(data):
    vocab = data.vocab
    ids, mask = data.test_ids[:20], data.test_mask[:20]
    r = fills.fate_readings(_EchoingModel(vocab.size), ids, mask, vocab, draws=2)
    visible = r["fate"] > 0
    assert r["echo"].all() and visible.any() and (~visible).any()  # it even predicts [MASK]
    assert r["right"].tolist() == (r["fate"] == 2).tolist()  # right exactly when shown the original
    assert torch.isnan(r["margin"][~visible]).all()
    # q reads [MASK]: q(w) = 1 / (V - 1 + e^10) and the best other token is [MASK] itself
    n_ordinary = vocab.size - len(vocab.special_ids)
    expected = math.log10(n_ordinary / math.exp(10))
    assert torch.allclose(r["margin"][visible], torch.tensor(expected), atol=1e-4)
    curve = fills.echo_curve(r, "original", [-2.0, 0.0, 2.0])
    assert curve["model"] == [1.0] and curve["bayes"] == [0.0]  # V' e^-10 < 1: Bayes overrules
    assert curve["n"] == [int((r["fate"] == 2).sum())] and curve["centre"] == [-1.0]
    with pytest.raises(ValueError, match="fate must be"):
        fills.echo_curve(r, "[MASK]", [-1.0, 1.0])


def test_committed_dropout_decoder_is_reproduced_by_its_recipe(data):
    model, history, metadata = mlm.load_tiny_lm("l5-causal-drop")
    mlm.check_artefact_data(metadata, data)
    assert model.causal and model.config.dropout == 0.1 and not model.training
    assert metadata["command"] == "python -m encoderlab train l5-causal-drop"
    assert len(history) == mlm.RECIPE_STEPS["causal"]
    curve = json.loads(metadata["validation_curve"])
    best = int(metadata["selected_step"])
    assert curve["losses"][curve["steps"].index(best)] == min(curve["losses"])
    loss = mlm.held_out_next_token_loss(model, data.valid_ids, data.valid_mask)
    assert loss == pytest.approx(min(curve["losses"]), abs=1e-4)
    tensors, short = mlm.recipe_causal_dropout(steps=3, progress=False)  # the same first steps
    assert tensors["history"].tolist() == pytest.approx(history[:3], abs=1e-5)
    assert json.loads(short["training"])["dropout"] == 0.1

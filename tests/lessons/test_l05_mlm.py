"""Lesson 5: MLM corruption and loss, the tiny encoder and its causal twin, recipes, checkers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import json  # noqa: E402
import math  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from encoderlab.course import plotting  # noqa: E402
from encoderlab.course.checks import CheckFailed, check_masked_loss, check_mlm_corrupt  # noqa: E402
from encoderlab.heads import TinyLM  # noqa: E402
from encoderlab.lessons import l05_mlm as mlm  # noqa: E402
from encoderlab.objectives import (  # noqa: E402
    BERT_MASK_ID,
    IGNORE_INDEX,
    mlm_corrupt,
    mlm_loss,
    next_token_loss,
)

SPECIALS = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK]
MASK = 4
V = 500


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def batch(rows=400, n=64, seed=0):
    """[CLS] words [SEP] [PAD]... with a few [UNK]s, rows of random lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (rows, n), generator=g)
    ids[torch.rand(rows, n, generator=g) < 0.05] = 1
    lengths = torch.randint(8, n + 1, (rows,), generator=g)
    mask = (torch.arange(n)[None] < lengths[:, None]).long()
    ids[:, 0] = 2
    ids[torch.arange(rows), lengths - 1] = 3
    ids[mask == 0] = 0
    return ids, mask


def corrupt(ids, mask, seed=0, **kwargs):
    g = torch.Generator().manual_seed(seed)
    return mlm_corrupt(ids, mask, SPECIALS, V, generator=g, mask_id=MASK, **kwargs)


# --- mlm_corrupt ---------------------------------------------------------------------------------


def test_statistics_match_bert_targets_on_a_large_batch():
    ids, mask = batch()
    inputs, labels = corrupt(ids, mask)
    eligible = (mask == 1) & ~torch.isin(ids, torch.tensor(SPECIALS))
    chosen = labels != IGNORE_INDEX
    n_el, m = int(eligible.sum()), int(chosen.sum())
    assert n_el > 10_000
    assert abs(m / n_el - 0.15) < 5 * math.sqrt(0.15 * 0.85 / n_el)
    shares = [
        int((chosen & (inputs == MASK)).sum()) / m,
        int((chosen & (inputs != MASK) & (inputs != ids)).sum()) / m,
        int((chosen & (inputs == ids)).sum()) / m,
    ]
    for share, target in zip(shares, (0.8, 0.1, 0.1), strict=True):
        assert abs(share - target) < 5 * math.sqrt(target * (1 - target) / m)


def test_never_chooses_specials_or_padding_and_leaves_them_untouched():
    ids, mask = batch(seed=3)
    for seed in range(5):
        inputs, labels = corrupt(ids, mask, seed=seed)
        special_or_pad = torch.isin(ids, torch.tensor(SPECIALS)) | (mask == 0)
        assert (labels[special_or_pad] == IGNORE_INDEX).all()
        assert torch.equal(inputs[special_or_pad], ids[special_or_pad])


def test_labels_hold_the_original_at_chosen_positions_and_minus_100_elsewhere():
    ids, mask = batch(rows=50, seed=1)
    inputs, labels = corrupt(ids, mask)
    chosen = labels != IGNORE_INDEX
    assert torch.equal(labels[chosen], ids[chosen])
    assert set(labels[~chosen].unique().tolist()) == {-100}
    assert torch.equal(inputs[~chosen], ids[~chosen])  # only chosen positions change
    assert IGNORE_INDEX == -100


def test_random_tokens_are_never_special_and_lie_in_the_vocabulary():
    ids, mask = batch(rows=200, seed=2)
    # p=1 chooses every eligible position: about 10 % of them get a random token
    inputs, labels = corrupt(ids, mask, p=1.0)
    chosen = labels != IGNORE_INDEX
    randomised = chosen & (inputs != MASK) & (inputs != ids)
    assert randomised.sum() > 500
    drawn = inputs[randomised]
    assert not torch.isin(drawn, torch.tensor(SPECIALS)).any()
    assert drawn.min() >= 0 and drawn.max() < V


def test_p_one_chooses_every_eligible_position():
    ids, mask = batch(rows=20, seed=4)
    _, labels = corrupt(ids, mask, p=1.0)
    eligible = (mask == 1) & ~torch.isin(ids, torch.tensor(SPECIALS))
    assert torch.equal(labels != IGNORE_INDEX, eligible)


def test_deterministic_with_a_generator_and_different_across_seeds():
    ids, mask = batch(rows=30)
    a, b, c = corrupt(ids, mask, seed=7), corrupt(ids, mask, seed=7), corrupt(ids, mask, seed=8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_does_not_change_its_input_and_keeps_dtype_and_shape():
    ids, mask = batch(rows=10)
    before = ids.clone()
    inputs, labels = corrupt(ids, mask)
    assert torch.equal(ids, before)
    assert inputs.shape == labels.shape == ids.shape
    assert inputs.dtype == labels.dtype == torch.long


def test_default_mask_id_is_berts():
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102]])
    inputs, _ = mlm_corrupt(ids, torch.ones_like(ids), (0, 100, 101, 102, 103), 30522, p=1.0,
                            generator=torch.Generator().manual_seed(0))
    assert BERT_MASK_ID == 103
    assert (inputs == 103).any()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_ids": torch.zeros(5, dtype=torch.long)}, r"\(batch, n\) tensor"),
        ({"input_ids": torch.zeros(2, 5)}, "integer token ids"),
        ({"attention_mask": torch.ones(2, 4)}, "shape of input_ids"),
        ({"vocab_size": 1}, "vocab_size must be an int >= 2"),
        ({"p": 0.0}, r"p \(the fraction"),
        ({"p": 1.5}, r"must be in \(0, 1\]"),
        ({"special_ids": (0, 600)}, "special_ids must be ids below vocab_size=500"),
        ({"mask_id": 500}, "mask_id must be an id below vocab_size=500"),
        ({"input_ids": torch.full((2, 5), 700)}, r"input_ids must lie in \[0, vocab_size=500\)"),
    ],
)
def test_mlm_corrupt_errors(kwargs, message):
    args = {"input_ids": torch.full((2, 5), 7), "attention_mask": torch.ones(2, 5),
            "special_ids": SPECIALS, "vocab_size": V, "p": 0.15, "mask_id": MASK}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        mlm_corrupt(args["input_ids"], args["attention_mask"], args["special_ids"],
                    args["vocab_size"], p=args["p"], mask_id=args["mask_id"])


def test_mlm_corrupt_needs_an_ordinary_token():
    with pytest.raises(ValueError, match="every id is special"):
        mlm_corrupt(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), (0, 1), 2, mask_id=1)


# --- mlm_loss ------------------------------------------------------------------------------------


def test_mlm_loss_is_cross_entropy_at_the_chosen_positions_only():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    labels = torch.tensor([[-100, 3, -100, -100, 6], [1, -100, -100, 2, -100]])
    nll = -torch.log_softmax(logits, dim=-1)
    by_hand = (nll[0, 1, 3] + nll[0, 4, 6] + nll[1, 0, 1] + nll[1, 3, 2]) / 4
    assert mlm_loss(logits, labels).item() == pytest.approx(by_hand.item(), rel=1e-6)
    # what a logit at an unchosen position says does not matter
    changed = logits.clone()
    changed[0, 0] += 100
    assert mlm_loss(changed, labels).item() == pytest.approx(by_hand.item(), rel=1e-6)


def test_mlm_loss_is_zero_without_chosen_positions_and_has_a_zero_gradient():
    logits = torch.randn(2, 4, 6, requires_grad=True)
    loss = mlm_loss(logits, torch.full((2, 4), -100))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_mlm_loss_of_uniform_logits_is_log_v():
    labels = torch.randint(9, (3, 4))
    assert mlm_loss(torch.zeros(3, 4, 9), labels).item() == pytest.approx(math.log(9), rel=1e-6)


@pytest.mark.parametrize(
    "logits, labels, message",
    [
        (torch.zeros(4, 7), torch.zeros(4, dtype=torch.long), r"\(batch, n, vocab_size\)"),
        (torch.zeros(2, 5, 7), torch.zeros(2, 4, dtype=torch.long), r"shape \(2, 5\)"),
    ],
)
def test_mlm_loss_errors(logits, labels, message):
    with pytest.raises(ValueError, match=message):
        mlm_loss(logits, labels)


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


def test_trim_padding_drops_all_padding_columns_only():
    ids = torch.tensor([[2, 7, 3, 0, 0], [2, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    t_ids, t_mask = mlm.trim_padding(ids, mask)
    assert t_ids.tolist() == [[2, 7, 3], [2, 3, 0]] and t_mask.shape == (2, 3)
    with pytest.raises(ValueError, match="one shape"):
        mlm.trim_padding(ids, mask[:, :3])


def small_lm(causal, vocab=30):
    torch.manual_seed(0)
    return TinyLM(mlm.tiny_config(vocab, d_model=32, n_heads=2, d_ff=64, dropout=0.0),
                  causal=causal)


class _Vocab:
    size, mask_id, special_ids = 30, 4, SPECIALS


def test_masked_lm_loss_equals_mlm_loss_on_the_full_logits():
    model = small_lm(False).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 30, (4, 9), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones_like(ids)
    fast = mlm.masked_lm_loss(model, ids, mask, _Vocab, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    inputs, labels = mlm_corrupt(ids, mask, SPECIALS, 30, generator=g, mask_id=4)
    slow = mlm_loss(model(inputs, mask), labels)
    assert fast.item() == pytest.approx(slow.item(), rel=1e-5)
    only_specials = torch.tensor([[2, 3]])
    zero = mlm.masked_lm_loss(model, only_specials, torch.ones_like(only_specials), _Vocab)
    assert zero.item() == 0.0


def test_causal_lm_loss_is_next_token_loss():
    model = small_lm(True).eval()
    ids = torch.tensor([[2, 7, 8, 9, 3, 0]])
    mask = (ids != 0).long()
    expected = next_token_loss(model(ids, mask), ids, mask)
    assert mlm.causal_lm_loss(model, ids, mask).item() == pytest.approx(expected.item())


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


def test_held_out_loss_is_the_models_own_objective_on_fixed_draws(data):
    torch.manual_seed(0)
    encoder = TinyLM(mlm.tiny_config(data.vocab.size, n_layers=1), causal=False).eval()
    decoder = TinyLM(mlm.tiny_config(data.vocab.size, n_layers=1), causal=True).train()
    ids, mask = data.valid_ids[:16], data.valid_mask[:16]
    first = mlm.held_out_loss(encoder, ids, mask, data.vocab)
    assert first == mlm.held_out_loss(encoder, ids, mask, data.vocab)  # the same corruptions
    by_hand = sum(mlm.masked_lm_loss(encoder, ids, mask, data.vocab,
                                     generator=torch.Generator().manual_seed(100 + s)).item()
                  for s in range(2)) / 2
    assert mlm.held_out_loss(encoder, ids, mask, data.vocab, draws=2) == pytest.approx(by_hand)
    causal = mlm.held_out_loss(decoder, ids, mask, data.vocab)
    assert causal == pytest.approx(mlm.causal_lm_loss(decoder.eval(), ids, mask).item())
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
    low, high = mlm.wilson_interval(41, 100)
    assert (round(low, 4), round(high, 4)) == (0.3187, 0.508)  # Wilson (1927), z = 1.96
    assert mlm.wilson_interval(0, 10)[0] == 0.0 and mlm.wilson_interval(10, 10)[1] == 1.0
    assert mlm.wilson_interval(0, 10)[1] > 0.2  # no hits is not proof of zero
    with pytest.raises(ValueError, match="0 <= hits <= n"):
        mlm.wilson_interval(5, 4)


def test_paired_difference_interval_covers_the_difference_and_is_seeded():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(400, generator=g) < 0.5
    b = torch.rand(400, generator=g) < 0.3
    low, high = mlm.paired_difference_interval(a, b)
    diff = (a.float().mean() - b.float().mean()).item()
    assert low < diff < high and 0.05 < high - low < 0.2
    assert (low, high) == mlm.paired_difference_interval(a, b)
    assert mlm.paired_difference_interval(a, a) == (0.0, 0.0)
    with pytest.raises(ValueError, match="one shape"):
        mlm.paired_difference_interval(a, b[:3])
    with pytest.raises(ValueError, match="level must lie"):
        mlm.paired_difference_interval(a, b, level=1.5)


def test_sign_test_is_the_exact_binomial_tail():
    assert mlm.sign_test(0, 0) == 1.0
    assert mlm.sign_test(5, 5) == 1.0
    assert mlm.sign_test(6, 0) == pytest.approx(2 / 64)
    assert mlm.sign_test(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mlm.sign_test(41, 13) < 0.001
    with pytest.raises(ValueError, match="ints >= 0"):
        mlm.sign_test(-1, 3)


# --- figures -------------------------------------------------------------------------------------


def test_target_bars_draw_values_and_targets():
    ax = plotting.target_bars({"[MASK]": 0.79, "random": 0.11, "unchanged": 0.1},
                              {"[MASK]": 0.8, "random": 0.1, "unchanged": 0.1})
    assert isinstance(ax, Axes)
    assert [t.get_text() for t in ax.texts] == ["0.790", "0.110", "0.100"]
    assert len([ln for ln in ax.lines if ln.get_linestyle() == ":"]) == 3
    with pytest.raises(ValueError, match="no value for"):
        plotting.target_bars({"a": 1.0}, {})
    with pytest.raises(ValueError, match="at least one"):
        plotting.target_bars({}, {})
    with pytest.raises(ValueError, match="role must be one of"):
        plotting.target_bars({"a": 1.0}, {"a": 1.0}, role="purple")


def test_draws_around_target_shows_deviations_and_the_noise_band():
    ax = plotting.draws_around_target({"a": [0.151, 0.149, 0.15], "b": [0.8, 0.81]},
                                      {"a": 0.15, "b": 0.8}, {"a": 0.001, "b": 0.004})
    assert isinstance(ax, Axes)
    from matplotlib.collections import PathCollection

    dots = [c for c in ax.collections if isinstance(c, PathCollection)]  # one scatter per series
    ys = [sorted(round(float(y), 6) for _, y in c.get_offsets()) for c in dots]
    assert ys == [[-0.1, 0.0, 0.1], [0.0, 1.0]]  # percentage points: (0.81 - 0.8) * 100 = 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["±2 s.d., binomial", "one draw", "target"]
    with pytest.raises(ValueError, match="missing for"):
        plotting.draws_around_target({"a": [0.1]}, {}, {})
    with pytest.raises(ValueError, match="at least one"):
        plotting.draws_around_target({}, {}, {})
    with pytest.raises(ValueError, match="non-empty"):
        plotting.draws_around_target({"a": []}, {"a": 0.1}, {"a": 0.01})


def test_top_k_bars_highlight_the_answer():
    panels = [{"tokens": ["a", "b", "c"], "probs": [0.5, 0.3, 0.1], "answer": "b", "title": "x"},
              {"tokens": ["d", "e"], "probs": [0.6, 0.2], "role": "decoder"},
              {"tokens": ["f"], "probs": [0.9]}]
    fig = plotting.top_k_bars(panels, ncols=2)
    assert isinstance(fig, Figure)
    first = fig.axes[0]
    colors = [p.get_facecolor() for p in first.patches]
    assert colors[1] == matplotlib.colors.to_rgba(plotting.COLORS["highlight"])
    assert colors[0] == matplotlib.colors.to_rgba(plotting.COLORS["encoder"])
    assert fig.axes[1].patches[0].get_facecolor() == matplotlib.colors.to_rgba(
        plotting.COLORS["decoder"])
    assert not fig.axes[3].get_visible()
    with pytest.raises(ValueError, match="same non-zero length"):
        plotting.top_k_bars([{"tokens": ["a"], "probs": []}])
    with pytest.raises(ValueError, match="at least one panel"):
        plotting.top_k_bars([])


def test_accuracy_bars_colour_by_role():
    ax = plotting.accuracy_bars({"early": {"MLM encoder": 0.4, "causal decoder": 0.1},
                                 "late": {"MLM encoder": 0.5, "causal decoder": 0.45}})
    assert [t.get_text() for t in ax.texts] == ["40%", "50%", "10%", "45%"]
    colors = {matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches}
    assert colors == {plotting.COLORS["encoder"].lower(), plotting.COLORS["decoder"].lower()}
    ax = plotting.accuracy_bars({"early": {"baseline": 0.2}}, colors={"baseline": "#999999"})
    assert matplotlib.colors.to_hex(ax.patches[0].get_facecolor()) == "#999999"
    with pytest.raises(ValueError, match="at least one group"):
        plotting.accuracy_bars({})


# --- checkers ------------------------------------------------------------------------------------


def reference_corrupt(ids, mask, special_ids, vocab_size, mask_id, generator):
    return mlm_corrupt(ids, mask, special_ids, vocab_size, generator=generator, mask_id=mask_id)


def test_check_mlm_corrupt_accepts_the_reference(capsys):
    assert check_mlm_corrupt(reference_corrupt)
    assert "80 / 10 / 10 within 5 standard errors" in capsys.readouterr().out


def _variant(choose_p=0.15, split=(0.8, 0.9), allow_specials=False, allow_padding=False,
             label_mode="original", random_from_all=False, seeded=True, in_place=False,
             ignore=-100):
    def fn(ids, mask, special_ids, vocab_size, mask_id, generator):
        g = generator if seeded else None
        x = ids if in_place else ids.clone()
        eligible = mask.bool()
        if not allow_padding:
            eligible = eligible & True
        if not allow_specials:
            eligible = eligible & ~torch.isin(ids, torch.tensor(list(special_ids)))
        if allow_padding:
            eligible = torch.ones_like(eligible)
        chosen = eligible & (torch.rand(ids.shape, generator=g) < choose_p)
        roll = torch.rand(ids.shape, generator=g)
        low = 0 if random_from_all else 5
        rand = torch.randint(low, vocab_size, ids.shape, generator=g)
        original = ids.clone()
        x[chosen & (roll < split[0])] = mask_id
        r = chosen & (roll >= split[0]) & (roll < split[1])
        x[r] = rand[r]
        source = {"original": original, "corrupted": x}[label_mode]
        labels = source.masked_fill(~chosen, ignore)
        return x, labels
    return fn


@pytest.mark.parametrize(
    "wrong, message",
    [
        (_variant(split=(1.0, 1.0)), "you replace every chosen token with \\[MASK\\]"),
        (_variant(split=(0.8, 0.8)), "you never put in a random token"),
        (_variant(split=(0.8, 1.0)), "you never leave a chosen token unchanged"),
        (_variant(split=(0.6, 0.8)), "BERT's split is 80 / 10 / 10. Draw one number"),
        (_variant(choose_p=0.3), r"you chose 29\.\d% of the 12,590 eligible"),
        (_variant(allow_specials=True), "you chose special tokens"),
        (_variant(allow_padding=True), "you chose padding positions"),
        (_variant(label_mode="corrupted"), "your labels hold the corrupted input"),
        (_variant(ignore=0), "with 0, but 0 is a real token id"),
        (_variant(random_from_all=True), "random replacements are special tokens"),
        (_variant(seeded=False), "seeded alike gave different results"),
        (_variant(in_place=True), "changed input_ids in place"),
        (lambda *a: reference_corrupt(*a)[0], "return the pair"),
        (lambda ids, *a: (ids.clone(), ids.clone()), "label -100"),
    ],
)
def test_check_mlm_corrupt_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_mlm_corrupt(wrong)


def test_check_mlm_corrupt_wants_random_positions():
    def fixed(ids, mask, special_ids, vocab_size, mask_id, generator):
        g = torch.Generator().manual_seed(0)  # ignores the generator it was given
        return reference_corrupt(ids, mask, special_ids, vocab_size, mask_id, g)

    with pytest.raises(CheckFailed, match="different seeds gave the same choice"):
        check_mlm_corrupt(fixed)


def test_check_masked_loss_accepts_the_reference_and_a_hand_version(capsys):
    assert check_masked_loss(mlm_loss)

    def by_hand(logits, labels):
        chosen = labels != -100
        if not chosen.any():
            return torch.tensor(0.0)
        logp = torch.log_softmax(logits[chosen], dim=-1)
        return -logp.gather(1, labels[chosen][:, None]).mean()

    assert check_masked_loss(by_hand)
    assert "correct on 5 cases" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100),
         "NaN"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="sum") / lb.numel(), "all b \\* n positions"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="sum"), "take their mean"),
        (lambda lg, lb: -mlm_loss(lg, lb), "wrong sign"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="none"), "return one number"),
        (lambda lg, lb: mlm_loss(lg, lb) * 2, "take -log_softmax at the right token"),
    ],
)
def test_check_masked_loss_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_masked_loss(wrong)


def test_check_masked_loss_names_the_per_sequence_mean():
    def per_row(logits, labels):
        rows = [mlm_loss(lg[None], lb[None]) for lg, lb in zip(logits, labels, strict=True)
                if (lb != -100).any()]
        return torch.stack(rows).mean() if rows else torch.tensor(0.0)

    with pytest.raises(CheckFailed, match="average each sequence's loss"):
        check_masked_loss(per_row)

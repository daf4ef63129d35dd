"""The masked objectives and their losses (Lessons 5-6): BERT's corruption and the MLM loss,
whole-word and span masking, replaced-token detection. (Next-token prediction and the training
loop: test_objectives_train.py.)"""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F
from toy_wordpiece import SPECIAL, TINY, TOKENS, random_batch

from encoderlab import objectives
from encoderlab.heads import TinyLM
from encoderlab.objectives import BERT_MASK_ID, IGNORE_INDEX, mlm_corrupt, mlm_loss

SPECIALS = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK]
MASK = 4
V = 500



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
        ({"p": 1.5}, r"must be a number in \(0, 1\]"),
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


# --- Whole-word and span masking (Lesson 6, §3) ------------------------------------------------


def test_word_ids_join_continuation_pieces_and_skip_specials():
    ids = torch.tensor([[2, 5, 8, 9, 10, 7, 11, 12, 10, 3, 0]])
    words = objectives.word_ids(ids, (ids != 0).long(), TOKENS, SPECIAL)
    assert words.tolist() == [[-1, 0, 1, 1, 1, 2, 3, 3, 3, -1, -1]]
    with pytest.raises(ValueError, match="vocabulary as a list of strings"):
        objectives.word_ids(ids, (ids != 0).long(), "tokens", SPECIAL)
    with pytest.raises(ValueError, match=r"must lie in \[0, 16\)"):
        objectives.word_ids(ids + 20, (ids != 0).long(), TOKENS, SPECIAL)


def test_whole_word_mask_chooses_whole_words_at_rate_p_and_never_specials():
    ids, am = random_batch(b=400, n=24)
    g = torch.Generator().manual_seed(0)
    inputs, labels = objectives.whole_word_mask(ids, am, TOKENS, SPECIAL, p=0.15, generator=g,
                                                mask_id=4)
    chosen = labels != IGNORE_INDEX
    words = objectives.word_ids(ids, am, TOKENS, SPECIAL)
    for r in range(ids.shape[0]):  # every piece of a word has the same fate
        for w in words[r].unique().tolist():
            if w >= 0:
                fate = chosen[r][words[r] == w]
                assert bool(fate.all()) or not bool(fate.any())
    assert not bool(chosen[torch.isin(ids, torch.tensor(SPECIAL))].any())
    assert torch.equal(labels[chosen], ids[chosen])
    rate = chosen.sum().item() / (words >= 0).sum().item()
    assert 0.12 < rate < 0.18
    masked = (inputs == 4) & chosen
    assert 0.72 < masked.sum().item() / chosen.sum().item() < 0.88
    g2 = torch.Generator().manual_seed(0)
    again = objectives.whole_word_mask(ids, am, TOKENS, SPECIAL, p=0.15, generator=g2, mask_id=4)
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)
    with pytest.raises(ValueError, match=r"p \(the fraction of words"):
        objectives.whole_word_mask(ids, am, TOKENS, SPECIAL, p=0.0, mask_id=4)


def test_span_lengths_follow_spanberts_clipped_geometric():
    probs = objectives.span_length_distribution(0.2, 10)
    assert probs.sum().item() == pytest.approx(1.0)
    mean = (probs * torch.arange(1, 11)).sum().item()
    assert mean == pytest.approx(3.8, abs=0.01)  # SpanBERT's quoted mean span length
    with pytest.raises(ValueError, match="geometric_p must be a number in"):
        objectives.span_length_distribution(0.0)
    with pytest.raises(ValueError, match="max_span must be a positive int"):
        objectives.span_length_distribution(0.2, 0)


def test_span_mask_respects_the_budget_words_and_specials():
    ids, am = random_batch(b=200, n=30, seed=1)
    g = torch.Generator().manual_seed(0)
    inputs, labels = objectives.span_mask(ids, am, TOKENS, SPECIAL, p=0.15, generator=g, mask_id=4)
    chosen = labels != IGNORE_INDEX
    words = objectives.word_ids(ids, am, TOKENS, SPECIAL)
    for r in range(ids.shape[0]):
        budget = max(1, round(0.15 * int((words[r] >= 0).sum())))
        assert int(chosen[r].sum()) <= budget
        if not bool(chosen[r].any()):  # nothing fits only if every word is over the budget
            sizes = torch.bincount(words[r][words[r] >= 0])
            assert int(sizes.min()) > budget
        for w in words[r].unique().tolist():
            if w >= 0:
                fate = chosen[r][words[r] == w]
                assert bool(fate.all()) or not bool(fate.any())
    assert not bool(chosen[torch.isin(ids, torch.tensor(SPECIAL))].any())
    assert not bool((inputs != ids)[~chosen].any())  # nothing outside the spans changes
    rate = chosen.sum().item() / (words >= 0).sum().item()
    assert 0.10 < rate <= 0.16
    with pytest.raises(ValueError, match="mask_id must be an id below"):
        objectives.span_mask(ids, am, TOKENS, SPECIAL, mask_id=99)


# --- Replaced-token detection (Lesson 6, §4) ----------------------------------------------------


def test_replace_with_samples_changes_only_masked_positions():
    ids, am = random_batch(b=8, n=12)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 2] = ids[:, 2]
    logits = torch.zeros(8, 12, len(TOKENS))
    logits[..., 7] = 50.0  # the generator is sure the token is "is"
    out = objectives.replace_with_samples(ids, labels, logits,
                                          generator=torch.Generator().manual_seed(0))
    assert (out[:, 2] == 7).all() and torch.equal(out[:, 3:], ids[:, 3:])
    k_logits = logits[labels != IGNORE_INDEX]  # (k, V) form
    assert torch.equal(objectives.replace_with_samples(ids, labels, k_logits), out)
    with pytest.raises(ValueError, match="k = 8 masked positions"):
        objectives.replace_with_samples(ids, labels, k_logits[:3])


def test_rtd_labels_count_a_sampled_original_as_original_and_skip_padding():
    ids = torch.tensor([[2, 5, 6, 7, 3, 0]])
    corrupted = torch.tensor([[2, 5, 13, 7, 3, 0]])  # position 2 replaced; 3 sampled back
    am = torch.tensor([[1, 1, 1, 1, 1, 0]])
    assert objectives.rtd_labels(ids, corrupted, am).tolist() == [[0, 0, 1, 0, 0, IGNORE_INDEX]]
    with pytest.raises(ValueError, match="must have one shape"):
        objectives.rtd_labels(ids, corrupted[:, :3], am)


def test_rtd_loss_is_bce_over_labelled_positions():
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    labels = torch.tensor([[1, 0, IGNORE_INDEX]])
    expected = F.binary_cross_entropy_with_logits(torch.tensor([2.0, -1.0]),
                                                  torch.tensor([1.0, 0.0]))
    assert objectives.rtd_loss(logits, labels).item() == pytest.approx(expected.item())
    assert objectives.rtd_loss(logits, torch.full_like(labels, IGNORE_INDEX)).item() == 0.0
    with pytest.raises(ValueError, match="one score per position"):
        objectives.rtd_loss(logits[..., None], labels)


def test_mlm_model_loss_equals_mlm_loss_on_all_logits():
    torch.manual_seed(0)
    model = TinyLM(TINY, causal=False).eval()
    ids, am = random_batch(b=4, n=10)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, [2, 4]] = ids[:, [2, 4]]
    loss, logits = objectives.mlm_model_loss(model, ids, am, labels)
    assert logits.shape == (8, len(TOKENS))
    assert loss.item() == pytest.approx(mlm_loss(model(ids, am), labels).item(), rel=1e-5)

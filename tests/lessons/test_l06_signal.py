"""Lesson 6, §4-§5: held-out MLM losses, ELECTRA's corruption with a frozen generator, the
"15 %" labels, and the recipe l6-rtd-signal."""

import math
from types import SimpleNamespace

import pytest
import torch
from toy_wordpiece import SPECIAL, TINY, TOKENS, random_batch

from encoderlab import data
from encoderlab.course.train import recipes
from encoderlab.heads import TinyLM, TokenDiscriminator
from encoderlab.lessons import l06_signal as S
from encoderlab.objectives import IGNORE_INDEX
from encoderlab.training import artefact_path, load_artefact

VOCAB = SimpleNamespace(special_ids=list(SPECIAL), size=len(TOKENS), mask_id=4)


def _uniform_model():
    """A TinyLM whose output layer gives every token the same logit."""
    torch.manual_seed(0)
    model = TinyLM(TINY, causal=False)
    with torch.no_grad():
        for p in model.head.parameters():
            p.zero_()
    return model


def _always(token: int):
    """A TinyLM that puts (almost) all its probability on ``token``."""
    model = _uniform_model()
    with torch.no_grad():
        model.head.proj.bias[token] = 50.0
    return model


def test_held_out_mlm_loss_of_a_uniform_model_is_log_v():
    ids, am = random_batch(b=16, n=12, seed=1)
    loss = S.held_out_mlm_loss(_uniform_model(), ids, am, VOCAB, seed=0)
    assert loss == pytest.approx(math.log(len(TOKENS)), abs=1e-5)


def test_unigram_loss_counts_ordinary_training_tokens_with_add_one():
    # Training: every ordinary token is "the" (id 5), 10 of them; add-one over V = 16 tokens.
    train = torch.tensor([[2] + [5] * 10 + [3]])
    train_am = torch.ones_like(train)
    held = torch.tensor([[2] + [5] * 20 + [3]])  # every masked target is "the"
    loss = S.unigram_mlm_loss(train, train_am, held, torch.ones_like(held), VOCAB, seed=0)
    assert loss == pytest.approx(-math.log(11 / 26), abs=1e-6)


def test_corruption_puts_the_generators_token_at_the_asked_positions():
    ids, am = random_batch(b=32, n=16, seed=2)
    corrupted, labels, asked = S.corrupt_with_generator(_always(13), ids, am, VOCAB,
                                                        torch.Generator().manual_seed(0))
    assert asked.any()
    assert (corrupted[asked] == 13).all()  # the sample: "a", id 13
    assert torch.equal(corrupted[~asked], ids[~asked])  # nothing else changes
    special = torch.isin(ids, torch.tensor(SPECIAL))
    assert not (asked & special).any()  # never [CLS], [SEP], [PAD]
    assert (labels[am == 0] == IGNORE_INDEX).all()
    real = am == 1
    expected = (asked & (ids != 13)).long()  # sampled "a" over an original "a" counts as original
    assert torch.equal(labels[real], expected[real])


def test_masked_only_labels_keep_the_asked_positions():
    labels = torch.tensor([[0, 1, 0, 1, IGNORE_INDEX]])
    asked = torch.tensor([[False, True, True, False, False]])
    assert S.masked_only_labels(labels, asked).tolist() == [[-100, 1, 0, -100, -100]]
    with pytest.raises(ValueError, match="bool"):
        S.masked_only_labels(labels, asked.long())
    with pytest.raises(ValueError, match="same shape"):
        S.masked_only_labels(labels, asked[:, :3])


def test_detection_scores_are_probabilities_at_real_positions():
    ids, am = random_batch(b=4, n=10, seed=3)
    torch.manual_seed(0)
    disc = TokenDiscriminator(TINY)
    with torch.no_grad():
        disc.head.weight.zero_()
        disc.head.bias.fill_(math.log(3.0))  # sigmoid = 0.75 everywhere
    scores = S.detection_scores(disc, ids, am)
    assert scores.shape == (int(am.sum()),)
    assert torch.allclose(scores, torch.full_like(scores, 0.75))
    with pytest.raises(ValueError, match="two \\(b, n\\) tensors"):
        S.detection_scores(disc, ids, am[:, :3])


def test_the_generator_must_share_the_vocabulary():
    wrong = SimpleNamespace(tokens=["[PAD]", "x"], special_ids=[0], size=2, mask_id=0)
    with pytest.raises(ValueError, match="another vocabulary"):
        S.load_generator(wrong)


def test_recipe_is_registered_and_runs_a_few_steps():
    assert recipes()["l6-rtd-signal"] is S.train_signal
    tensors, meta = S.train_signal(steps=2, progress=False)
    assert tensors["eval_steps"].tolist() == [0, 2]
    assert tensors["auc_all"].shape == (2, 2) and tensors["auc_asked"].shape == (2, 2)
    # One initialisation: before the first step both discriminators score alike.
    assert tensors["auc_all"][0, 0] == tensors["auc_all"][1, 0]
    assert float(meta["generator_held_out_loss"]) < float(meta["unigram_held_out_loss"]) - 1.0


def test_committed_artefact_is_small_and_matches_the_corpus():
    assert artefact_path("l6-rtd-signal").stat().st_size < 5 * 1024 * 1024
    tensors, meta = load_artefact("l6-rtd-signal")
    assert meta["corpus_fingerprint"] == data.python_docs_corpus().fingerprint
    k = len(tensors["held_labels"])
    assert tensors["held_scores"].shape == (2, k) and tensors["held_table"].shape == (k,)
    assert int(meta["steps"]) == S.SIGNAL_STEPS

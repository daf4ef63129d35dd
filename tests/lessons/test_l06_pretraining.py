"""Lesson 6: sentence pairs, masking schedules, ELECTRA, signal and compute, the probe and the
recipes (whole-word and span masking, RTD labels and losses: tests/core/test_objectives.py)."""

import math

import pytest
import torch
from torch.nn import functional as F
from toy_wordpiece import SPECIAL, TINY, TOKENS, random_batch

from encoderlab import data
from encoderlab.course.train import main
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import TinyLM
from encoderlab.lessons import l06_comparison as C
from encoderlab.lessons import l06_pretraining as P
from encoderlab.objectives import IGNORE_INDEX
from encoderlab.training import artefact_path, load_artefact

SENTENCES = [f"Sentence number {i} talks about topic {i // 3}." for i in range(40)]


# --- §1 Sentence pairs ------------------------------------------------------------------------


def test_nsp_pairs_are_half_next_and_next_means_the_following_sentence():
    pairs = P.nsp_pairs(SENTENCES * 10, seed=1)
    assert len(pairs) == 399
    share = sum(p.label for p in pairs) / len(pairs)
    assert 0.4 < share < 0.6
    corpus = SENTENCES * 10
    for i, pair in enumerate(pairs):
        assert pair.first == corpus[i]
        if pair.label == 1:
            assert pair.second == corpus[i + 1]
    small = P.nsp_pairs(SENTENCES, seed=3)
    for i, pair in enumerate(small):
        if pair.label == 0:  # a random sentence, never the sentence itself or its successor
            assert pair.second not in (SENTENCES[i], SENTENCES[i + 1])
    assert P.nsp_pairs(SENTENCES, seed=3) == small  # deterministic


def test_sop_pairs_hold_the_same_sentences_in_or_out_of_order():
    pairs = P.sop_pairs(SENTENCES, seed=0)
    assert len(pairs) == len(SENTENCES) - 1
    for i, pair in enumerate(pairs):
        order = (SENTENCES[i], SENTENCES[i + 1])
        assert (pair.first, pair.second) == (order if pair.label == 1 else order[::-1])
    assert 0 < sum(p.label for p in pairs) < len(pairs)


@pytest.mark.parametrize(
    "fn, arg, words",
    [
        (P.nsp_pairs, "one sentence", "list of strings"),
        (P.nsp_pairs, ["a", "b"], "at least 3 sentences"),
        (P.sop_pairs, ["only one"], "at least 2 sentences"),
    ],
)
def test_pair_errors(fn, arg, words):
    with pytest.raises(ValueError, match=words):
        fn(arg)


class _Tok:
    def tokenize(self, text):
        return text.lower().split()


def _vocab():
    return data.CompactVocab(_Tok(), ["a b c d e f g h"] * 2)


def test_encode_pairs_frames_with_cls_and_two_seps_and_segments():
    vocab = _vocab()
    pairs = [P.SentencePair("a b c", "d e", 1), P.SentencePair("f", "g h", 0)]
    ids, seg, am, labels = P.encode_pairs(vocab, pairs)
    assert ids.shape == seg.shape == am.shape == (2, 8)
    assert vocab.decode(ids[0]) == ["[CLS]", "a", "b", "c", "[SEP]", "d", "e", "[SEP]"]
    assert seg[0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    assert am[1].tolist() == [1] * 6 + [0] * 2 and seg[1, 6:].tolist() == [0, 0]
    assert labels.tolist() == [1, 0]
    long = [P.SentencePair("a b c d e f g", "h", 1)]
    ids, _, am, _ = P.encode_pairs(vocab, long, max_length=6)
    assert ids.shape[1] == 6 and vocab.decode(ids[0])[-2:] == ["h", "[SEP]"]  # longer one cut
    with pytest.raises(ValueError, match="SentencePair"):
        P.encode_pairs(vocab, [("a", "b", 1)])
    with pytest.raises(ValueError, match="max_length must be an int >= 5"):
        P.encode_pairs(vocab, pairs, max_length=4)


def test_word_overlap_and_the_topic_shortcut():
    assert P.word_overlap("The cat sat.", "the cat ran") == pytest.approx(2 / 4)
    assert P.word_overlap("a b", "c d") == 0.0
    # Pairs whose label is exactly "do they share words": the shortcut is perfect.
    pairs = [P.SentencePair(f"w{i} x{i}", f"w{i} y{i}" if i % 4 < 2 else f"z{i}", int(i % 4 < 2))
             for i in range(40)]
    assert P.overlap_shortcut_accuracy(pairs) == 1.0
    with pytest.raises(ValueError, match="at least 4 pairs"):
        P.overlap_shortcut_accuracy(pairs[:3])


# --- §2 Static and dynamic masking ------------------------------------------------------------


def test_dynamic_masking_draws_a_new_mask_every_epoch_static_does_not():
    ids, am = random_batch(b=16, n=24)
    common = dict(special_ids=SPECIAL, vocab_size=len(TOKENS), epochs=8, mask_id=4)
    dynamic = P.distinct_masks(P.epoch_masks(ids, am, **common))
    static = P.distinct_masks(P.epoch_masks(ids, am, dynamic=False, **common))
    bert = P.distinct_masks(P.epoch_masks(ids, am, dynamic=False, duplicates=4, **common))
    assert static.tolist() == [1] * 16
    assert int(bert.max()) <= 4 and dynamic.float().mean() > 6
    again = P.epoch_masks(ids, am, **common)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(again, P.epoch_masks(ids, am, **common)))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"epochs": 0}, "epochs must be a positive int"),
        ({"epochs": 3, "dynamic": False, "duplicates": 5}, "never reach"),
        ({"epochs": 3, "duplicates": 2}, "duplicates is for static masking"),
    ],
)
def test_epoch_masks_errors(kwargs, words):
    ids, am = random_batch(b=2, n=8)
    with pytest.raises(ValueError, match=words):
        P.epoch_masks(ids, am, SPECIAL, len(TOKENS), mask_id=4, **kwargs)
    with pytest.raises(ValueError, match="at least one"):
        P.distinct_masks([])


# --- §4 ELECTRA: generator and discriminator ---------------------------------------------------


def test_electra_losses_and_no_gradient_from_discriminator_to_generator():
    torch.manual_seed(0)
    small = EncoderConfig(vocab_size=len(TOKENS), d_model=8, n_heads=2, n_layers=1, d_ff=16,
                          n_max=32, dropout=0.0)
    model = P.Electra(small, TINY)
    ids, am = random_batch(b=6, n=14)
    out = model.losses(ids, am, SPECIAL, mask_id=4, rng=torch.Generator().manual_seed(0))
    assert out["corrupted"].shape == ids.shape == out["labels"].shape
    assert (out["labels"][am == 1] >= 0).all() and (out["labels"][am == 0] == IGNORE_INDEX).all()
    changed = out["corrupted"] != ids
    assert not bool(changed[out["mlm_labels"] == IGNORE_INDEX].any())
    out["discriminator_loss"].backward()
    assert all(p.grad is None for p in model.generator.parameters())
    assert math.isfinite(out["generator_loss"].item())
    assert model.discriminator(ids, am).shape == ids.shape
    with pytest.raises(ValueError, match="share one vocabulary"):
        P.Electra(EncoderConfig(vocab_size=5, d_model=8, n_heads=2, n_layers=1, d_ff=8), TINY)


def test_shared_embeddings_are_one_module_and_get_both_gradients():
    torch.manual_seed(0)
    small = EncoderConfig(vocab_size=len(TOKENS), d_model=8, n_heads=2, n_layers=1, d_ff=16,
                          n_max=32, dropout=0.0)
    model = P.Electra(small, TINY, share_embeddings=True)
    shared = model.discriminator.encoder.embeddings
    assert model.generator.encoder.embeddings.shared is shared
    assert model.generator.head.token_embedding is shared.token
    ids, am = random_batch(b=6, n=14)
    out = model.losses(ids, am, SPECIAL, mask_id=4, rng=torch.Generator().manual_seed(0))
    assert out["generator_loss"].item() == pytest.approx(math.log(len(TOKENS)), rel=0.5)
    out["generator_loss"].backward()  # the generator's loss alone reaches the shared table
    assert shared.token.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.discriminator.encoder.blocks.parameters())
    with pytest.raises(ValueError, match="one n_max"):
        P.Electra(EncoderConfig(vocab_size=len(TOKENS), d_model=8, n_heads=2, n_layers=1,
                                d_ff=16, n_max=16), TINY, share_embeddings=True)


def test_roc_auc_counts_ordered_pairs_and_ties():
    assert P.roc_auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])) == 0.75
    assert P.roc_auc(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([1, 0, 0])) == 1.0
    assert P.roc_auc(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0, 1, 1])) == 0.5
    g = torch.Generator().manual_seed(0)
    scores, labels = torch.rand(4000, generator=g), torch.randint(2, (4000,), generator=g)
    assert abs(P.roc_auc(scores, labels) - 0.5) < 0.03  # noise: about 0.5
    with pytest.raises(ValueError, match="both labels"):
        P.roc_auc(torch.tensor([0.1, 0.2]), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="1-d"):
        P.roc_auc(torch.zeros(2, 2), torch.zeros(2, 2))


def test_token_replaced_rate_counts_per_token_and_smooths_to_the_base_rate():
    corrupted = torch.tensor([[5, 5, 6, 7, 0], [5, 6, 6, 7, 0]])
    labels = torch.tensor([[1, 0, 0, 1, IGNORE_INDEX], [1, 0, 0, 1, IGNORE_INDEX]])
    rate = P.token_replaced_rate(corrupted, labels, 10, prior_weight=1e-9)
    assert rate[5].item() == pytest.approx(2 / 3) and rate[6].item() == pytest.approx(0.0, abs=1e-6)
    assert rate[7].item() == pytest.approx(1.0)
    unseen = P.token_replaced_rate(corrupted, labels, 10)[9].item()
    assert unseen == pytest.approx(0.5)  # 4 of 8 scored positions are replaced
    with pytest.raises(ValueError, match="one shape"):
        P.token_replaced_rate(corrupted, labels[:, :3], 10)
    with pytest.raises(ValueError, match=r"lie in \[0, 6\)"):
        P.token_replaced_rate(corrupted, labels, 6)


def test_warmup_then_decay_rises_linearly_then_falls_to_zero():
    factors = [C.warmup_then_decay(t, 10, 4) for t in range(10)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0 and factors[-1] == pytest.approx(1 / 6)
    assert all(a >= b for a, b in zip(factors[3:], factors[4:]))
    assert C.warmup_then_decay(0, 5, 0) == 1.0
    assert [C.warmup_then_decay(t, 10, 4, decay=False) for t in range(3, 10)] == [1.0] * 7
    with pytest.raises(ValueError, match="warmup_steps"):
        C.warmup_then_decay(0, 10, 10)
    with pytest.raises(ValueError, match="step must be"):
        C.warmup_then_decay(10, 10, 2)


def test_train_with_warmup_lowers_the_loss_and_follows_the_schedule():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5])

    def batches():
        while True:
            yield x, y

    def loss_fn(m, batch):
        return F.mse_loss(m(batch[0]).squeeze(-1), batch[1])

    history = C.train_with_warmup(model, batches(), loss_fn, steps=200, lr=0.05,
                                  warmup_steps=20, progress=False)
    assert len(history) == 200 and history[-1] < 0.1 * history[0]
    assert not model.training
    with pytest.raises(ValueError, match="warmup_steps"):
        C.train_with_warmup(model, batches(), loss_fn, steps=5, lr=0.1, warmup_steps=5,
                            progress=False)


# --- §5 Signal and compute ----------------------------------------------------------------------


def test_forward_flops_by_hand():
    c = EncoderConfig(vocab_size=10, d_model=4, n_heads=2, n_layers=3, d_ff=8)
    per_token = 2 * (4 * 16 + 2 * 4 * 8)
    expected = 3 * (2 * 5 * per_token + 2 * 2 * 2 * 25 * 4) + 2 * 7 * 4 * 10
    assert P.forward_flops(c, batch_size=2, n=5, head_positions=7, head_size=10) == expected


def test_corruption_kinds():
    original = torch.tensor([2, 5, 6, 7, 3])
    inputs = torch.tensor([2, 4, 9, 7, 3])
    labels = torch.tensor([IGNORE_INDEX, 5, 6, 7, IGNORE_INDEX])
    assert P.corruption_kinds(original, inputs, labels, 4) == ["plain", "mask", "random",
                                                               "kept", "plain"]
    assert P.rtd_kinds(torch.tensor([0, 1, IGNORE_INDEX])) == ["original", "replaced", "plain"]
    with pytest.raises(ValueError, match="1-d tensors of one length"):
        P.corruption_kinds(original[None], inputs[None], labels[None], 4)


# --- §6 The probe -----------------------------------------------------------------------------


def test_linear_probe_separates_separable_data_and_is_at_chance_on_noise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=g)
    y = (x[:, 0] > 0).long()
    assert C.linear_probe(x[:100], y[:100], x[100:], y[100:]) >= 0.97
    noise_y = torch.randint(2, (200,), generator=g)
    assert C.linear_probe(x[:100], noise_y[:100], x[100:], noise_y[100:]) < 0.7
    with pytest.raises(ValueError, match="one label per row"):
        C.linear_probe(x, y[:5], x, y)
    with pytest.raises(ValueError, match="with one d"):
        C.linear_probe(x, y, x[:, :2], y)


def test_encoder_features_ignore_padding_and_check_inputs():
    torch.manual_seed(0)
    model = TinyLM(TINY, causal=False)
    ids, am = random_batch(b=5, n=16)
    batch = C.encoder_features(model, ids, am, batch_size=2)
    alone = torch.cat([C.encoder_features(model, ids[i:i + 1, : int(am[i].sum())],
                                          am[i:i + 1, : int(am[i].sum())]) for i in range(5)])
    assert batch.shape == (5, TINY.d_model)
    assert torch.allclose(batch, alone, atol=1e-5)
    assert model.training  # left as it was found
    with pytest.raises(ValueError, match="encode"):
        C.encoder_features(torch.nn.Linear(2, 2), ids, am)
    with pytest.raises(ValueError, match=r"two \(N, n\) tensors"):
        C.encoder_features(model, ids, am[:, :3])


def test_source_task_is_balanced_and_tests_on_held_out_sentences():
    corpus = data.python_docs_corpus()
    task = C.source_task(corpus)
    assert task.train_labels.float().mean().item() == 0.5
    assert task.test_labels.float().mean().item() == 0.5
    assert set(task.test_texts) <= set(corpus.held_out)
    assert set(task.train_texts) <= set(corpus.train)
    reference = C.reference_sentences()
    assert all((t in reference) == bool(y) for t, y in zip(task.test_texts, task.test_labels))
    assert "held out" in repr(task)


# --- Recipes and artefacts ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["l6-mlm", "l6-rtd"])
def test_recipe_runs_with_few_steps(name, tmp_path):
    out = tmp_path / f"{name}.safetensors"
    assert main([name, "--steps", "3", "--out", str(out), "--quiet"]) == 0
    from safetensors import safe_open

    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
        assert f.get_tensor("loss").shape == (3,)
        assert f.get_tensor("probe_steps").tolist() == []  # shorter than the first probe point
        assert f.get_tensor("probe_accuracy").tolist() == []
    assert meta["steps"] == "3" and meta["corpus_fingerprint"]


def test_a_run_shorter_than_the_first_probe_point_probes_nothing():
    assert C.FIRST_PROBE == 375  # the committed MLM run (1,500 steps) probes every 375 steps
    assert C.probe_steps(1500) == [0, 375, 750, 1125, 1500]
    assert C.probe_steps(C.FIRST_PROBE) == [0, 94, 188, 281, 375]
    assert C.probe_steps(C.FIRST_PROBE - 1) == [] and C.probe_steps(3) == []
    with pytest.raises(ValueError, match="steps must be a positive int"):
        C.probe_steps(0)


@pytest.mark.parametrize("name", ["l6-mlm", "l6-rtd"])
def test_committed_artefact_loads_with_expected_keys(name):
    path = artefact_path(name)
    assert path.stat().st_size < 5 * 1024 * 1024
    tensors, meta = load_artefact(name)
    for key in ("loss", "flops", "probe_steps", "probe_accuracy"):
        assert key in tensors
    assert meta["corpus_fingerprint"] == data.python_docs_corpus().fingerprint
    assert meta["command"] == f"python -m encoderlab train {name}"
    model, tensors, meta = C.load_recipe_model(name)
    assert len(tensors["loss"]) == int(meta["steps"])
    if name == "l6-rtd":
        assert isinstance(model, P.Electra) and "discriminator_loss" in tensors
        assert meta["share_embeddings"] == "True" and model.share_embeddings
        shared = model.discriminator.encoder.embeddings.token
        assert model.generator.head.token_embedding is shared  # tied again after loading
    assert int(meta["warmup_steps"]) == round(C.WARMUP_FRACTION * int(meta["steps"]))
    with pytest.raises(ValueError, match="name must be one of"):
        C.load_recipe_model("l5-mlm")


def test_equal_compute_plan_matches_the_committed_runs():
    _, mlm_meta = load_artefact("l6-mlm")
    _, rtd_meta = load_artefact("l6-rtd")
    mlm_flops, rtd_flops = int(mlm_meta["total_flops"]), int(rtd_meta["total_flops"])
    assert abs(rtd_flops / mlm_flops - 1) < 0.02  # equal compute, generator included
    # The plan (expected 15 % masked) is what the runs realised, to within a per cent.
    planned = C.planned_flops("mlm", int(mlm_meta["steps"]))
    assert abs(planned / mlm_flops - 1) < 0.01


# --- §3 What a model predicts for a ## piece -----------------------------------------------------


# --- Lesson 6, §6: paired comparisons ---------------------------------------------------------


def test_cross_validated_correct_predicts_each_example_once():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(200) % 2
    x = torch.randn(200, 4, generator=g)
    x[:, 0] += 3.0 * (2 * y - 1)  # separable on feature 0
    correct = C.cross_validated_correct(x, y, folds=5)
    assert correct.shape == (200,) and correct.dtype == torch.bool
    assert correct.float().mean() > 0.95
    noise = C.cross_validated_correct(torch.randn(200, 4, generator=g), y, folds=5)
    assert 0.3 < noise.float().mean() < 0.7
    assert torch.equal(C.cross_validated_correct(x, y, folds=5), correct)  # deterministic
    with pytest.raises(ValueError, match="folds"):
        C.cross_validated_correct(x, y, folds=1)
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        C.cross_validated_correct(x[:, 0], y)


def test_mcnemar_counts_discordant_pairs_and_gives_the_binomial_p_value():
    a = torch.tensor([1, 1, 1, 0, 1, 0], dtype=torch.bool)
    b = torch.tensor([1, 0, 0, 0, 1, 1], dtype=torch.bool)
    a_only, b_only, p = C.mcnemar(a, b)
    assert (a_only, b_only) == (2, 1)
    assert p == pytest.approx(1.0)  # 2 * P(X <= 1), X ~ Bin(3, 1/2) = 2 * 4/8
    _, _, p = C.mcnemar(torch.ones(20, dtype=torch.bool), torch.zeros(20, dtype=torch.bool))
    assert p == pytest.approx(2 / 2 ** 20)
    assert C.mcnemar(a, a) == (0, 0, 1.0)
    with pytest.raises(ValueError, match="same examples"):
        C.mcnemar(a, b[:3])


def test_word_order_task_shuffles_half_and_keeps_the_words():
    sentences = [f"word{i} and then more words here" for i in range(40)] + ["same same"]
    texts, labels = C.word_order_task(sentences, seed=0)
    assert len(texts) == len(sentences) and labels.shape == (len(sentences),)
    for text, sentence, label in zip(texts, sentences, labels.tolist()):
        assert sorted(text.split()) == sorted(sentence.split())
        assert (text != sentence) == bool(label)
    assert abs(int(labels.sum()) - 20) <= 1
    with pytest.raises(ValueError, match="need at least 2 sentences"):
        C.word_order_task(["one"])


def test_sentence_bootstrap_of_identical_scores_is_zero_and_detects_a_better_score():
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(600, generator=g) < 0.3).long()
    groups = torch.arange(600) // 20  # 30 sentences of 20 positions
    good = (0.2 + 0.6 * y + 0.1 * torch.rand(600, generator=g)).double()
    noise = torch.rand(600, generator=g).double()
    same = C.sentence_bootstrap(noise, noise, y, groups, resamples=20)
    assert torch.equal(same["auc"], torch.zeros(20, dtype=torch.float64))
    diff = C.sentence_bootstrap(good, noise, y, groups, resamples=50)
    assert (diff["auc"] > 0.3).all() and (diff["bce"] < 0).all()
    with pytest.raises(ValueError, match="one length"):
        C.sentence_bootstrap(good, noise[:5], y, groups)


def test_untrained_encoder_is_the_step_zero_model():
    _, vocab = C.corpus_and_vocab()
    a, b = C.untrained_encoder(vocab), C.untrained_encoder(vocab)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


# --- Baselines without context (§3, §6) ----------------------------------------------------------



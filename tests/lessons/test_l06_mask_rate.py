"""The masking-rate sweep of Lesson 6 (encoderlab.lessons.l06_mask_rate)."""

import math

import pytest
import torch

from encoderlab.course.train import recipes
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import TinyLM
from encoderlab.lessons import l06_mask_rate as sweep
from encoderlab.objectives import IGNORE_INDEX
from encoderlab.training import MAX_ARTEFACT_BYTES, artefact_path


def test_seed_spread_is_the_mean_and_sample_standard_deviation():
    mean, sd = sweep.seed_spread([1.0, 2.0, 4.0])
    assert mean == pytest.approx(7 / 3)
    assert sd == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2
                                          + (4 - 7 / 3) ** 2) / 2))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        sweep.seed_spread([1.0])


def test_held_out_metrics_scores_only_the_labelled_positions():
    torch.manual_seed(0)
    model = TinyLM(EncoderConfig(vocab_size=12, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                                 n_max=8, dropout=0.0), causal=False)
    ids = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 9, 3, 0]])
    am = (ids != 0).long()
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 1] = 6, 8
    inputs = ids.masked_fill(labels != IGNORE_INDEX, 4)
    model.train()
    loss, accuracy = sweep.held_out_metrics(model, inputs, am, labels)
    assert model.training  # scored in eval mode, then put back as it was
    model.eval()
    with torch.no_grad():
        logits = model(inputs, am)[labels != IGNORE_INDEX]  # (2, V)
    expected = torch.nn.functional.cross_entropy(logits, torch.tensor([6, 8])).item()
    assert loss == pytest.approx(expected, abs=1e-5)
    assert accuracy == (logits.argmax(-1) == torch.tensor([6, 8])).float().mean().item()


def test_a_short_sweep_records_every_run_from_shared_initial_weights():
    tensors, metadata = sweep.train_mask_rate_sweep(steps=2, progress=False)
    assert len(tensors) == 4 * len(sweep.RATES) * len(sweep.SEEDS)
    for seed in sweep.SEEDS:
        first = [tensors[f"r{round(100 * r)}.s{seed}.eval_loss"][0] for r in sweep.RATES]
        assert all(f == first[0] for f in first)  # one initial model per seed, for every rate
        assert tensors[f"r40.s{seed}.eval_steps"].tolist() == [0, 2]
        assert tensors[f"r40.s{seed}.train_loss"].shape == (2,)
    assert metadata["steps"] == "2" and metadata["eval_rate"] == "0.15"


def test_the_committed_sweep_is_registered_small_and_complete():
    assert "l6-mask-rate" in recipes()
    path = artefact_path("l6-mask-rate")
    assert path.stat().st_size < MAX_ARTEFACT_BYTES
    runs, metadata = sweep.load_sweep()
    assert set(runs) == {(r, s) for r in sweep.RATES for s in sweep.SEEDS}
    assert metadata["steps"] == str(sweep.SWEEP_STEPS)
    for run in runs.values():
        assert run["eval_steps"][-1] == sweep.SWEEP_STEPS
        assert run["train_loss"].shape == (sweep.SWEEP_STEPS,)
        assert run["eval_loss"][-1] < run["eval_loss"][0]  # every run learned something


def test_paired_t_is_the_mean_over_its_standard_error():
    mean, sd, t = sweep.paired_t([-0.01, -0.03, -0.03])
    assert mean == pytest.approx(-0.07 / 3)
    assert t == pytest.approx(mean / (sd / math.sqrt(3)))
    assert abs(t) < 4.303  # three seeds: not established at the 5 % level


def test_training_flops_grow_with_the_masking_rate_by_the_output_layer_only():
    from types import SimpleNamespace

    vocab = SimpleNamespace(size=50, special_ids=(0, 1, 2, 3, 4))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, (40, 12), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    am = torch.ones_like(ids)
    flops = sweep.training_flops(vocab, ids, am, (0.15, 0.40), steps=3)
    low, high = flops[0.15], flops[0.40]
    ordinary = 3 * sweep.BATCH_SIZE * 10  # three full batches of 10 ordinary tokens a row
    head = 3 * 2 * sweep.SWEEP_SIZES["d_model"] * vocab.size  # per scored position, training
    assert high - low == pytest.approx(head * (0.40 - 0.15) * ordinary)

"""The warm-up comparison of Lesson 4, §7 (encoderlab.lessons.l04_warmup)."""

import math

import pytest
import torch

from encoderlab.course.train import MAX_ARTEFACT_BYTES, artefact_path, recipes
from encoderlab.lessons import l04_warmup as warm


def test_reversal_batches_reverse_each_sequence_and_repeat_with_the_seed():
    x, y = next(warm.reversal_batches(seed=3, batch_size=4, length=5, vocab_size=7))
    assert x.shape == (4, 5) and int(x.max()) < 7 and int(x.min()) >= 0
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        assert row_y == row_x[::-1]
    again, _ = next(warm.reversal_batches(seed=3, batch_size=4, length=5, vocab_size=7))
    other, _ = next(warm.reversal_batches(seed=4, batch_size=4, length=5, vocab_size=7))
    assert torch.equal(x, again) and not torch.equal(x, other)
    with pytest.raises(ValueError, match="length"):
        next(warm.reversal_batches(seed=0, length=0))


def test_reversal_model_scores_every_position_and_its_loss_is_cross_entropy():
    torch.manual_seed(0)
    model = warm.ReversalModel("pre", vocab_size=9, n_layers=2, d_model=8, n_heads=2, d_ff=16)
    assert model.encoder.final_norm is not None and len(model.encoder.blocks) == 2
    x = torch.tensor([[1, 2, 3], [4, 5, 6]])
    y = x.flip(1)
    logits = model(x)
    assert logits.shape == (2, 3, 9)
    by_hand = -torch.log_softmax(logits, -1).gather(-1, y[..., None]).mean()
    assert warm.reversal_loss(model, (x, y)).item() == pytest.approx(by_hand.item(), abs=1e-6)
    with pytest.raises(ValueError, match="norm"):
        warm.ReversalModel("middle")


def test_window_means_average_consecutive_steps_and_drop_the_remainder():
    assert warm.window_means([1, 3, 5, 7, 100], every=2).tolist() == [2.0, 6.0]
    with pytest.raises(ValueError, match="at least"):
        warm.window_means([1.0], every=2)
    with pytest.raises(ValueError, match="every"):
        warm.window_means([1.0, 2.0], every=0)


def test_the_constant_guess_is_ln_of_the_vocabulary():
    assert warm.CONSTANT_GUESS == pytest.approx(math.log(32))


def test_warm_up_starts_the_learning_rate_small(monkeypatch):
    seen = {}
    real_train = warm.train

    def spy(model, batches, loss_fn, steps, lr, seed, progress, schedule, description):
        seen[description] = None if schedule is None else [schedule(k) for k in range(steps)]
        return real_train(model, batches, loss_fn, steps=steps, lr=lr, seed=seed,
                          progress=progress, schedule=schedule)

    monkeypatch.setattr(warm, "train", spy)
    history = warm.train_setting("post", True, seed=0, steps=10, n_layers=1)
    warm.train_setting("post", False, seed=0, steps=10, n_layers=1)
    assert len(history) == 10 and all(math.isfinite(v) for v in history)
    factors = seen["post-LN, warm-up, seed 0"]
    assert factors[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])  # 30 % of 10 steps, then constant
    assert factors[3:] == [1.0] * 7
    assert seen["post-LN, no warm-up, seed 0"] is None


def test_final_losses_group_the_last_window_by_setting_in_seed_order():
    curves = {("pre", True, 1): torch.tensor([3.0, 0.5]),
              ("pre", True, 0): torch.tensor([3.0, 0.2]),
              ("post", False, 0): torch.tensor([3.5, 3.4])}
    finals = warm.final_losses(curves)
    assert list(finals) == [("post", False), ("pre", True)]
    assert finals["pre", True] == pytest.approx([0.2, 0.5])
    with pytest.raises(ValueError, match="empty"):
        warm.final_losses({})


def test_a_short_comparison_records_every_setting_and_seed():
    tensors, metadata = warm.train_warmup_comparison(steps=2, progress=False)
    extra_depths = 4  # DEPTH_AXIS's runs at 3, 6 and 24 blocks; the 12-block ones are shared
    assert len(tensors) == len(warm.SETTINGS) * (len(warm.SEEDS) + len(warm.LR_GRID)) + extra_depths
    assert metadata["depth_axis"].startswith("post,False,3;")
    assert all(t.shape == (1,) for t in tensors.values())
    assert metadata["steps"] == 2 and metadata["warmup_steps"] == 1
    assert metadata["lr_grid"] == "0.0005,0.006"


def test_the_committed_comparison_is_registered_small_and_complete():
    assert "l4-warmup" in recipes()
    assert artefact_path("l4-warmup").stat().st_size < 100_000  # curves only, subsampled
    assert artefact_path("l4-warmup").stat().st_size < MAX_ARTEFACT_BYTES
    curves, metadata = warm.load_comparison()
    assert set(curves) == {(n, w, s) for n, w in warm.SETTINGS for s in warm.SEEDS}
    assert all(len(c) == int(metadata["steps"]) // int(metadata["every"])
               for c in curves.values())


def test_gradients_at_init_measure_the_last_block_for_both_placements():
    got = warm.gradients_at_init(depths=(1, 3), seeds=(0,))
    assert set(got) == {"post grad", "pre grad", "post stream", "pre stream"}
    assert all(t.shape == (2,) and (t > 0).all() for t in got.values())
    # post-LN: the top of the stack is a LayerNorm output with gain 1, so its norm is sqrt(d)
    assert torch.allclose(got["post stream"], torch.full((2,), 8.0), atol=1e-3)
    # the last block's W_2 gradient for L = 1, by hand
    torch.manual_seed(0)
    model = warm.ReversalModel("pre", n_layers=1)
    warm.reversal_loss(model, next(warm.reversal_batches(0))).backward()
    assert got["pre grad"][0] == pytest.approx(model.encoder.blocks[0].mlp.w_2.weight.grad.norm()
                                               .item(), rel=1e-5)
    with pytest.raises(ValueError, match="depth"):
        warm.gradients_at_init(depths=(0,))


def test_the_committed_grid_covers_every_setting_at_three_learning_rates():
    grid = warm.load_lr_grid()
    assert list(grid) == sorted([warm.LEARNING_RATE, *warm.LR_GRID])
    assert all(set(row) == set(warm.SETTINGS) for row in grid.values())
    curves, _ = warm.load_comparison()
    assert grid[warm.LEARNING_RATE]["post", False] == pytest.approx(
        float(curves["post", False, 0][-1]))


def test_a_short_grid_run_names_each_learning_rate_and_setting():
    tensors = warm.train_lr_grid(steps=2)
    assert len(tensors) == len(warm.LR_GRID) * len(warm.SETTINGS)
    assert "lr6e-03.post.warmup.s0" in tensors and all(t.shape == (1,) for t in tensors.values())


def test_results_table_has_a_row_per_setting_and_a_column_per_learning_rate():
    finals = {s: [1.0, 2.0, 3.0] for s in warm.SETTINGS}
    grid = {0.002: {s: 9.0 for s in warm.SETTINGS}, 0.0005: {s: 0.25 for s in warm.SETTINGS},
            0.006: {s: 3.5 for s in warm.SETTINGS}}
    lines = warm.results_table(finals, grid, lr=0.002).splitlines()
    assert len(lines) == 1 + len(warm.SETTINGS)
    # the header's labels, separated and in increasing learning rate: 0.0005, 0.002, 0.006
    assert [label.strip() for label in lines[0][len("final loss"):].split("  ") if label] == [
        "lr 0.0005, seed 0", "lr 0.002, 3 seeds", "lr 0.006, seed 0"]
    assert lines[1].split() == ["post-LN,", "no", "warm-up", "0.25", "2.000", "(1.000-3.000)",
                                "3.50"]  # the lr's own column comes from finals, not grid
    assert len({len(line) for line in lines}) == 1  # every row as wide as the header
    with pytest.raises(ValueError, match="SETTINGS"):
        warm.results_table({}, grid)


def test_a_short_depth_run_names_each_depth_but_the_main_one():
    tensors = warm.train_depth_axis(steps=2)
    assert set(tensors) == {"L3.post.constant.s0", "L6.post.constant.s0", "L24.post.warmup.s0",
                            "L24.pre.constant.s0"}


def test_the_committed_depth_axis_has_every_run_and_reuses_the_main_ones():
    depth = warm.load_depth_axis()
    assert set(depth) == set(warm.DEPTH_AXIS)
    curves, _ = warm.load_comparison()
    assert depth["post", False, 12] == float(curves["post", False, 0][-1])


def test_depth_table_puts_depths_in_columns_and_dashes_where_not_run():
    depth = {("post", False, 6): 0.5, ("post", False, 3): 0.25, ("pre", False, 24): 3.5}
    lines = warm.depth_table(depth).splitlines()
    assert lines[0].split()[-9:] == ["L", "=", "3", "L", "=", "6", "L", "=", "24"]
    assert lines[1].split()[-3:] == ["0.25", "0.50", "-"]
    assert lines[2].split() == ["pre-LN,", "no", "warm-up", "-", "-", "3.50"]
    with pytest.raises(ValueError, match="empty"):
        warm.depth_table({})

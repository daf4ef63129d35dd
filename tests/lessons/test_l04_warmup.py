"""The warm-up comparison of Lesson 4, §7 (encoderlab.lessons.l04_warmup)."""

import math

import pytest
import torch
import torch.nn.functional as F

from encoderlab.course.train import recipes
from encoderlab.lessons import l04_warmup as warm
from encoderlab.training import MAX_ARTEFACT_BYTES, artefact_path


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


def test_gradient_profile_gives_each_block_its_w2_gradient_for_both_placements():
    got = warm.gradient_profile(n_layers=3, seeds=(0,))
    assert set(got) == {"post", "pre"}
    assert all(t.shape == (3,) and (t > 0).all() for t in got.values())
    # block 2's W_2 gradient of a 3-block post-LN stack, by hand
    torch.manual_seed(0)
    model = warm.ReversalModel("post", n_layers=3)
    warm.reversal_loss(model, next(warm.reversal_batches(0))).backward()
    by_hand = model.encoder.blocks[1].mlp.w_2.weight.grad.norm().item()
    assert got["post"][1].item() == pytest.approx(by_hand, rel=1e-4)
    with pytest.raises(ValueError, match="n_layers"):
        warm.gradient_profile(n_layers=0)
    with pytest.raises(ValueError, match="seeds"):
        warm.gradient_profile(n_layers=2, seeds=())


def test_adam_step_change_matches_one_sign_step_by_hand():
    # Adam's first step is lr * g / (|g| + eps), about lr * sign(g): do it without the optimiser
    torch.manual_seed(0)
    model = warm.ReversalModel("post", n_layers=2)
    batch = next(warm.reversal_batches(0))
    with torch.no_grad():
        before = model.encoder(batch[0]).last_hidden_state
    warm.reversal_loss(model, batch).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 1e-3 * p.grad / (p.grad.abs() + 1e-8)
        after = model.encoder(batch[0]).last_hidden_state
    by_hand = ((after - before).norm() / before.norm()).item()
    got = warm.adam_step_change("post", 2, seed=0, lr=1e-3)
    assert got == pytest.approx(by_hand, rel=1e-3)
    assert warm.adam_step_change("post", 2, seed=0, lr=1e-5) < got  # a smaller step moves less
    with pytest.raises(ValueError, match="lr"):
        warm.adam_step_change("post", 2, lr=0.0)
    with pytest.raises(ValueError, match="n_layers"):
        warm.adam_step_change("post", 0)


def test_scale_branches_divides_each_branch_by_alpha_and_shrinks_its_init():
    torch.manual_seed(0)
    plain = warm.ReversalModel("post", n_layers=2)
    torch.manual_seed(0)
    scaled = warm.scale_branches(warm.ReversalModel("post", n_layers=2))
    alpha, beta = 4 ** 0.25, 16 ** -0.25  # L = 2: (2L)^(1/4), (8L)^(-1/4)
    block, ref = scaled.encoder.blocks[0], plain.encoder.blocks[0]
    assert torch.allclose(block.mlp.w_2.weight, beta * ref.mlp.w_2.weight)
    assert torch.equal(block.attention.w_q.weight, ref.attention.w_q.weight)  # W_Q, W_K kept
    x = torch.randn(1, 3, 64)
    with torch.no_grad():
        ref_out = ref.mlp(x)  # the unscaled MLP on the same input, written out below
        u = F.gelu(F.linear(x, beta * ref.mlp.w_1.weight, ref.mlp.w_1.bias))
        expected = F.linear(u, beta * ref.mlp.w_2.weight, ref.mlp.w_2.bias) / alpha
        assert torch.allclose(block.mlp(x), expected, atol=1e-6)
        assert not torch.allclose(block.mlp(x), ref_out, atol=1e-3)
    with pytest.raises(ValueError, match="post-LN"):
        warm.scale_branches(warm.ReversalModel("pre", n_layers=1))


def test_hidden_spread_is_zero_for_one_vector_everywhere_and_positive_otherwise():
    class Constant(torch.nn.Module):  # every position of every input gets the same vector
        def __init__(self):
            super().__init__()
            self.encoder = lambda x: type("Out", (), {
                "last_hidden_state": torch.ones(*x.shape, 4)})()

    assert warm.hidden_spread(Constant()) == pytest.approx(0.0, abs=1e-6)
    torch.manual_seed(0)
    assert warm.hidden_spread(warm.ReversalModel("post", n_layers=1)) > 0.1


def test_a_short_branch_scaling_run_and_the_committed_one():
    tensors, metadata = warm.train_branch_scaling(steps=2, progress=False)
    assert set(tensors) == {"plain.curve", "plain.spread", "scaled.curve", "scaled.spread"}
    assert metadata["clipping"] == "none" and metadata["warmup"] == "none"
    assert "l4-warmup-scaled" in recipes()
    assert artefact_path("l4-warmup-scaled").stat().st_size < 10_000
    runs, _ = warm.load_branch_scaling()
    curves, _ = warm.load_comparison()
    assert torch.equal(runs["plain"][0], curves["post", False, 0])  # the same run, reproduced
    assert runs["plain"][1] < 1e-3 and runs["scaled"][0][-1] < 0.05  # stuck; trains


def test_a_short_long_run_records_one_curve_of_post_ln_without_warm_up():
    tensors, metadata = warm.train_long_run(steps=20, progress=False)
    assert list(tensors) == ["post.constant.s0"] and tensors["post.constant.s0"].shape == (2,)
    assert metadata["steps"] == 20 and metadata["norm"] == "post"
    assert metadata["warmup"] == "none"


def test_the_committed_long_run_is_registered_small_and_four_times_longer():
    assert "l4-warmup-long" in recipes()
    assert artefact_path("l4-warmup-long").stat().st_size < 10_000
    curve, metadata = warm.load_long_run()
    assert int(metadata["steps"]) == warm.LONG_STEPS == 4 * warm.STEPS
    assert curve.shape == (warm.LONG_STEPS // warm.EVERY,)


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

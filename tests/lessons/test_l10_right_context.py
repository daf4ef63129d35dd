"""Lesson 10, §7: the keyed-shift task and the three wirings at equal parameters."""

import pytest
import torch

from encoderlab import masks
from encoderlab.lessons import l10_right_context as rc


def test_task_shifts_every_symbol_by_the_key_at_the_end():
    task = rc.KeyedShiftTask(n_symbols=10, n_keys=4, length=6)
    src, tgt_in, tgt_out = task.sample(50, torch.Generator().manual_seed(0))
    assert src.shape == (50, 7) and tgt_in.shape == (50, 7) and tgt_out.shape == (50, 7)
    shift = src[:, -1] - 3 - 10 + 1  # key k means a shift of k + 1
    assert ((shift >= 1) & (shift <= 4)).all()
    expected = (src[:, :-1] - 3 + shift[:, None]) % 10 + 3
    assert torch.equal(tgt_out[:, :-1], expected)
    assert (tgt_out[:, -1] == rc.EOS).all() and (tgt_in[:, 0] == rc.BOS).all()
    assert torch.equal(tgt_in[:, 1:], tgt_out[:, :-1])  # teacher forcing: shifted right


def test_batches_are_seeded():
    task = rc.KeyedShiftTask()
    a, b = next(task.batches(8, seed=3)), next(task.batches(8, seed=3))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_task_refuses_more_keys_than_symbols():
    with pytest.raises(ValueError, match="n_keys"):
        rc.KeyedShiftTask(n_symbols=4, n_keys=4)


def test_parameter_counts_match_within_one_percent():
    task = rc.KeyedShiftTask()
    counts = {w: rc.parameter_count(rc.build_model(w, task, 0)) for w in rc.WIRINGS}
    assert counts["prefix-lm"] == counts["decoder-only"]
    assert abs(counts["prefix-lm"] - counts["encoder-decoder"]) < 0.01 * counts["encoder-decoder"]


@pytest.mark.parametrize("wiring", ["prefix-lm", "decoder-only"])
def test_single_stack_masks(wiring):
    """Prefix-LM: a source position reads later source positions; decoder-only: it does not.
    Both: a target position never reads a later target position."""
    task = rc.KeyedShiftTask()
    model = rc.build_model(wiring, task, 0).eval()
    src, tgt_in, _ = task.sample(4, torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = model(src, tgt_in)
        later_target = tgt_in.clone()
        later_target[:, -1] = 5
        assert torch.equal(model(src, later_target)[:, :-1], base[:, :-1])
        key_changed = src.clone()
        key_changed[:, -1] = 3 + 10 + (src[:, -1] - 13 + 1) % 4  # another key
    full = torch.cat([src, tgt_in], 1)
    changed = torch.cat([key_changed, tgt_in], 1)
    with torch.no_grad():  # the first source position's state moves with the key only if it
        n = full.shape[1]  # may read to its right: the prefix-LM mask
        mask = masks.prefix_lm(n, model.n_src) if model.prefix else masks.causal(n)
        a = model.stack(full, mask=mask).last_hidden_state[:, 0]
        b = model.stack(changed, mask=mask).last_hidden_state[:, 0]
    assert torch.equal(a, b) == (wiring == "decoder-only")


def test_exact_match_and_greedy_on_a_perfect_stand_in():
    task = rc.KeyedShiftTask()
    src, _, tgt_out = task.sample(6, torch.Generator().manual_seed(2))
    model = rc.build_model("decoder-only", task, 0).eval()
    ids = model.greedy(src, tgt_out.shape[1])
    assert ids.shape == tgt_out.shape
    score = rc.exact_match_of(model, src, tgt_out)
    assert score == float((ids == tgt_out).all(1).float().mean())
    ed = rc.build_model("encoder-decoder", task, 0).eval()
    assert 0.0 <= rc.exact_match_of(ed, src, tgt_out) <= 1.0


def test_unknown_wiring():
    with pytest.raises(ValueError, match="wiring"):
        rc.build_model("encoder-only", rc.KeyedShiftTask(), 0)


def test_recipe_is_registered():
    from encoderlab.course.train import recipes

    assert recipes()["l10-right-context"] is rc.train_comparison


def test_short_comparison_records_every_run():
    tensors, metadata = rc.train_comparison(steps=2, progress=False)
    for w in rc.WIRINGS:
        for s in rc.SEEDS:
            assert tensors[f"{w}.s{s}.train_loss"].shape == (2,)
            assert tensors[f"{w}.s{s}.eval_steps"].tolist() == [0, 2]
    assert int(metadata["parameters.prefix-lm"]) == int(metadata["parameters.decoder-only"])


def test_committed_record_matches_the_recipe():
    """The artefact is the recipe's output: its models have today's sizes, every run is there,
    and its numbers are the ones the lesson's cells assert on."""
    runs, metadata = rc.load_comparison()
    task = rc.KeyedShiftTask()
    assert metadata["task"] == repr(task)
    assert metadata["seeds"] == ",".join(map(str, rc.SEEDS))  # the lesson pairs runs by seed
    for w in rc.WIRINGS:
        assert int(metadata[f"parameters.{w}"]) == rc.parameter_count(rc.build_model(w, task, 0))
        for s in rc.SEEDS:
            run = runs[w, s]
            assert run["train_loss"].shape == (int(metadata["steps"]),)
            assert run["eval_steps"].shape == run["exact_match"].shape
            assert float(run["exact_match"][-1]) > 0.95


# --- FLOPs per example and the equal-FLOP comparison (Lesson 10, §7) ---------------------------


def test_forward_flops_linear_part_is_what_torch_counts_and_attention_is_the_hand_count():
    from torch.utils.flop_counter import FlopCounterMode

    task = rc.KeyedShiftTask()
    src, tgt_in, _ = task.sample(1, torch.Generator().manual_seed(0))
    for wiring in rc.WIRINGS:
        model = rc.build_model(wiring, task, seed=0)
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(src, tgt_in)  # torch counts the linear layers (addmm) of one example
        flops = rc.forward_flops(wiring, task)
        assert flops["linear"] == counter.get_total_flops()
        assert flops["forward"] == flops["linear"] + flops["attention"]
        assert flops["training"] == 3 * flops["forward"]
    # d = 32, n = t = 7: 2 encoder blocks 2 * 4 * 49 * 32; 2 decoder blocks 2 * (4*49*32 + 4*49*32)
    assert rc.forward_flops("encoder-decoder", task)["attention"] == 12544 + 25088
    # 4 blocks over 14 positions: 4 * 4 * 196 * 32
    assert rc.forward_flops("decoder-only", task)["attention"] == 100352
    with pytest.raises(ValueError, match="wiring"):
        rc.forward_flops("encoder-only", task)


def test_equal_flop_pairs_give_the_cheaper_wiring_no_more_flops():
    assert rc.equal_flop_pairs([0, 10, 20, 30, 40], 1.0, 2.0) == [(1, 2), (2, 4)]
    assert rc.equal_flop_pairs([0, 10, 20, 30, 40], 1.0, 1.5) == [(1, 1), (2, 3)]  # 15 -> 10
    with pytest.raises(ValueError, match="at most"):
        rc.equal_flop_pairs([0, 10], 2.0, 1.0)
    with pytest.raises(ValueError, match="increasing"):
        rc.equal_flop_pairs([10, 0], 1.0, 2.0)

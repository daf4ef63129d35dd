"""The reversal task of Lesson 10: padding, targets, determinism, errors."""

from __future__ import annotations

import pytest
import torch

from encoderlab.decoder import EncoderDecoderConfig, EncoderDecoderModel
from encoderlab.lessons.l10_seq2seq import (
    BOS,
    EOS,
    PAD,
    ReversalTask,
    counting_kv_projections,
    exact_match,
    kv_positions_per_step,
    sources_of,
)


def test_batch_layout_reverses_and_pads():
    task = ReversalTask(n_symbols=5, min_len=2, max_len=4)
    batch = task.make_batch([torch.tensor([3, 4, 5]), torch.tensor([7, 6])])
    assert batch.src_ids.tolist() == [[3, 4, 5], [7, 6, PAD]]
    assert batch.src_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch.tgt_in.tolist() == [[BOS, 5, 4, 3], [BOS, 6, 7, PAD]]
    assert batch.tgt_out.tolist() == [[5, 4, 3, EOS], [6, 7, EOS, PAD]]
    assert batch.lengths.tolist() == [3, 2]


def test_samples_respect_lengths_and_vocabulary():
    task = ReversalTask(n_symbols=10, min_len=3, max_len=8)
    batch = task.sample(256, torch.Generator().manual_seed(0))
    assert int(batch.lengths.min()) >= 3 and int(batch.lengths.max()) <= 8
    real = batch.src_ids[batch.src_mask.bool()]
    assert int(real.min()) >= 3 and int(real.max()) < task.vocab_size == 13
    assert (batch.src_ids[~batch.src_mask.bool()] == PAD).all()
    for i, m in enumerate(batch.lengths.tolist()):
        assert batch.tgt_out[i, :m].tolist() == batch.src_ids[i, :m].flip(0).tolist()
    EncoderDecoderConfig(vocab_size=task.vocab_size)  # the default specials fit


def test_batches_are_deterministic_under_a_seed():
    task = ReversalTask()
    a, b = next(task.batches(8, seed=3)), next(task.batches(8, seed=3))
    c = next(task.batches(8, seed=4))
    assert torch.equal(a.src_ids, b.src_ids) and torch.equal(a.tgt_out, b.tgt_out)
    assert not torch.equal(a.src_ids, c.src_ids) or not torch.equal(a.lengths, c.lengths)


def test_exact_match_pads_the_shorter_side():
    tgt = torch.tensor([[5, 4, EOS, PAD], [6, 7, 8, EOS]])
    gen = torch.tensor([[5, 4, EOS], [6, 7, 9]])
    assert exact_match(gen, tgt).tolist() == [True, False]
    with pytest.raises(ValueError, match="same batch size"):
        exact_match(gen[:1], tgt)


def test_errors_say_what_to_do():
    with pytest.raises(ValueError, match="min_len must not exceed max_len"):
        ReversalTask(min_len=5, max_len=3)
    with pytest.raises(ValueError, match="n_symbols must be a positive int"):
        ReversalTask(n_symbols=0)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        ReversalTask().sample(0, torch.Generator())
    with pytest.raises(ValueError, match="at least one source"):
        ReversalTask().make_batch([])


def test_training_strings_replay_the_stream():
    task = ReversalTask(n_symbols=4, min_len=2, max_len=3)
    stream = task.batches(16, seed=2)
    drawn = set()
    for _ in range(5):
        drawn.update(sources_of(next(stream)))
    assert task.training_strings(16, 5, seed=2) == drawn
    assert all(2 <= len(s) <= 3 for s in drawn)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        task.training_strings(16, 0)


def test_sources_of_drops_the_padding():
    task = ReversalTask(n_symbols=5, min_len=2, max_len=4)
    batch = task.make_batch([torch.tensor([3, 4, 5]), torch.tensor([7, 6])])
    assert sources_of(batch) == [(3, 4, 5), (7, 6)]


def test_sample_excluding_leaves_out_training_strings_and_repeats():
    task = ReversalTask(n_symbols=3, min_len=2, max_len=4)  # 9 + 27 + 81 = 117 strings
    assert task.n_strings() == 117
    seen = task.training_strings(8, 6, seed=0)
    test = task.sample_excluding(40, torch.Generator().manual_seed(1), seen)
    kept = sources_of(test)
    assert len(kept) == 40 == len(set(kept))  # 40 different strings
    assert not set(kept) & seen  # none of them drawn in training
    assert int(test.lengths.min()) >= 2 and int(test.lengths.max()) <= 4
    again = task.sample_excluding(40, torch.Generator().manual_seed(1), seen)
    assert torch.equal(test.src_ids, again.src_ids)  # seeded: the same set again
    # A plain sample from the same kind of stream does repeat training strings: the test can fail
    plain = task.sample(40, torch.Generator().manual_seed(1))
    assert set(sources_of(plain)) & seen


def test_sample_excluding_says_when_too_few_strings_are_left():
    task = ReversalTask(n_symbols=2, min_len=2, max_len=2)  # 4 strings in all
    with pytest.raises(ValueError, match="only 1 outside the 3 excluded"):
        task.sample_excluding(2, torch.Generator(), {(3, 3), (3, 4), (4, 4)})
    with pytest.raises(ValueError, match="n must be a positive int"):
        task.sample_excluding(0, torch.Generator(), set())


# --- §5: what the KV cache saves, counted by the lesson's hooks on W_K ---


@pytest.fixture()
def model():
    torch.manual_seed(0)
    return EncoderDecoderModel(EncoderDecoderConfig(vocab_size=20, n_max=32)).eval()


def _sources():
    """Three sources of 7, 5 and 3 symbols, padded to 7 positions."""
    task = ReversalTask(n_symbols=17, min_len=3, max_len=7)  # vocabulary of 20, as the model's
    batch = task.make_batch([torch.arange(3, 10), torch.arange(10, 15), torch.arange(15, 18)])
    return batch.src_ids, batch.src_mask


def test_cross_attention_keys_and_values_are_computed_once_per_source(model):
    src, src_mask = _sources()
    for use_cache in (True, False):
        with counting_kv_projections(model) as counts:
            out = model.generate(src, src_mask, max_new_tokens=9, use_cache=use_cache)
        steps = out.ids.shape[1]
        for self_count, cross_count in counts:
            assert cross_count.calls == (1 if use_cache else steps)
            assert self_count.calls == steps
    with counting_kv_projections(model) as counts:
        pass
    model.generate(src, src_mask, max_new_tokens=3)  # after the with: no longer counted
    assert all(c.calls == 0 for pair in counts for c in pair)


def test_kv_positions_count_the_rows_projected(model):
    src, src_mask = _sources()  # 3 sources of 7 positions (padding included)
    with counting_kv_projections(model) as counts:
        out = model.generate(src, src_mask, max_new_tokens=5, use_cache=False)
    m = out.ids.shape[1]
    for self_count, cross_count in counts:
        assert cross_count.positions == 3 * 7 * m  # the whole batch, every step
        assert self_count.positions == 3 * m * (m + 1) // 2


@pytest.mark.parametrize("use_cache", [True, False])
def test_kv_positions_per_step_follow_the_formula(model, use_cache):
    src = torch.tensor([[5, 6, 7, 8, 9]])  # one source of 5 tokens, no padding
    steps = kv_positions_per_step(model, src, max_new_tokens=6, use_cache=use_cache)
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert len(steps) == model.generate(src, max_new_tokens=6).ids.shape[1]
    blocks = len(model.blocks)
    for s in steps:
        t = s["step"]
        if use_cache:
            assert s["self"] == [1] * blocks and s["cross"] == [5 if t == 1 else 0] * blocks
        else:
            assert s["self"] == [t] * blocks and s["cross"] == [5] * blocks
    with pytest.raises(ValueError, match="must be an EncoderDecoderModel"):
        kv_positions_per_step(torch.nn.Linear(2, 2), src)

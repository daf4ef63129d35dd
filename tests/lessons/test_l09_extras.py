"""Lesson 9's additions: packing, rotary positions and the online-softmax checker."""


import pytest
import torch

from encoderlab import masks, rotary
from encoderlab.attention import scaled_dot_product_attention
from encoderlab.lessons import l09_packing as packing

# --- packing -------------------------------------------------------------------------------------


def test_pack_lengths_places_every_sequence_once_without_overflow():
    lengths = [5, 3, 8, 2, 7, 1, 4]
    p = packing.pack_lengths(lengths, 8)
    placed = sorted(i for row in p.rows for i in row)
    assert placed == list(range(len(lengths)))
    for row in p.rows:
        assert sum(lengths[i] for i in row) <= 8
    for i, n in enumerate(lengths):
        r, o = p.starts[i]
        assert (p.doc_ids[r, o : o + n] == i).all()
    assert int((p.doc_ids >= 0).sum()) == sum(lengths)
    assert p.n_rows == 4  # 30 tokens need at least 4 rows of 8
    assert p.padding_fraction == pytest.approx(1 - 30 / 32)


def test_padding_fractions():
    assert packing.padding_fraction([2, 2], 8) == pytest.approx(0.5)
    # two batches of two: [4, 2] -> 8 positions, [1] -> 1 position; 7 tokens of 9
    assert packing.padded_batch_fraction([4, 2, 1], 2) == pytest.approx(2 / 9)


@pytest.mark.parametrize("use_tiled", [False, True])
def test_packed_attention_equals_each_sequence_alone(use_tiled):
    g = torch.Generator().manual_seed(0)
    lengths = [5, 9, 3, 12, 7, 1]
    p = packing.pack_lengths(lengths, 16)
    seqs = [torch.randn(2, n, 8, generator=g) for n in lengths]  # (h, n_i, d)
    packed = packing.pack_sequences([x.transpose(0, 1) for x in seqs], p)  # (R, n, h, d)
    q = packed.transpose(1, 2)  # (R, h, n, d)
    outs = packing.packed_attention(q, q, q, p, tiled=use_tiled, block_size=4)
    for out, x in zip(outs, seqs, strict=True):
        alone, _ = scaled_dot_product_attention(x, x, x)
        assert out.shape == alone.shape
        assert (out - alone).abs().max() <= 1e-5


def test_packed_attention_differs_without_the_document_mask():
    g = torch.Generator().manual_seed(1)
    p = packing.pack_lengths([4, 4], 8)
    q = torch.randn(1, 1, 8, 4, generator=g)
    with_mask = packing.packed_attention(q, q, q, p)
    plain, _ = scaled_dot_product_attention(q, q, q, masks.bidirectional(8))
    assert p.starts[0] == (0, 0)  # sequence 0 opens row 0
    assert not torch.allclose(plain[0, :, :4], with_mask[0], atol=1e-4)  # it saw sequence 1


def test_unpack_inverts_pack():
    p = packing.pack_lengths([3, 1, 2], 4)
    seqs = [torch.arange(n * 2.0).reshape(n, 2) + 10 * i for i, n in enumerate([3, 1, 2])]
    back = packing.unpack(packing.pack_sequences(seqs, p), p)
    for a, b in zip(seqs, back, strict=True):
        assert torch.equal(a, b)


def test_packing_errors_say_what_to_do():
    with pytest.raises(ValueError, match=r"in \[1, capacity=4\].*Truncate or split"):
        packing.pack_lengths([3, 5], 4)
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        packing.pack_lengths([3], 0)
    with pytest.raises(ValueError, match="at least one sequence length"):
        packing.pack_lengths([], 4)
    with pytest.raises(ValueError, match="at least the number of tokens"):
        packing.padding_fraction([3, 3], 5)
    p = packing.pack_lengths([2], 4)
    with pytest.raises(ValueError, match="the packing expects 2"):
        packing.pack_sequences([torch.zeros(3, 1)], p)


# --- rotary --------------------------------------------------------------------------------------


def test_rotary_scores_depend_only_on_the_offset():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g)
    scores = {}
    for p_q, p_k in [(0, 3), (10, 13), (500, 503), (4000, 4003), (7, 2), (1007, 1002)]:
        q_r, k_r = rotary.apply_rotary(q, k, torch.tensor([p_q]), torch.tensor([p_k]))
        scores[(p_q, p_k)] = float(q_r @ k_r.T)
    assert max(abs(scores[(0, 3)] - scores[p]) for p in [(10, 13), (500, 503), (4000, 4003)]) < 1e-4
    assert abs(scores[(7, 2)] - scores[(1007, 1002)]) < 1e-4
    assert abs(scores[(0, 3)] - scores[(7, 2)]) > 1e-3  # a different offset, a different score


def test_rotary_keeps_norms_and_position_zero():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 5, 8, generator=g)
    q_r, k_r = rotary.apply_rotary(q, q, torch.arange(5))
    assert torch.allclose(q_r.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    assert torch.equal(q_r[:, 0], q[:, 0])  # position 0: rotation by angle 0


def test_rotary_errors():
    with pytest.raises(ValueError, match="positive even int"):
        rotary.apply_rotary(torch.zeros(3, 5), torch.zeros(3, 5), torch.arange(3))
    with pytest.raises(ValueError, match="one position per row"):
        rotary.apply_rotary(torch.zeros(3, 4), torch.zeros(3, 4), torch.arange(2))
    with pytest.raises(ValueError, match="share their last dimension"):
        rotary.apply_rotary(torch.zeros(3, 4), torch.zeros(3, 6), torch.arange(3))


# --- packing: work counts, real lengths, position ids --------------------------------------------


def test_padded_batch_entries_and_the_packings_entry_counts():
    # batches of two: [4, 2] -> 2 rows of 4 x 4, [1] -> 1 row of 1 x 1
    assert packing.padded_batch_entries([4, 2, 1], 2) == 2 * 16 + 1
    assert packing.padded_batch_entries(sorted([4, 2, 1]), 2) == 2 * 4 + 16
    p = packing.pack_lengths([5, 3, 8, 2], 8)
    assert p.dense_entries == p.n_rows * 64
    assert p.own_entries == 25 + 9 + 64 + 4
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        packing.padded_batch_entries([3], 0)
    with pytest.raises(ValueError, match="at least one sequence length"):
        packing.padded_batch_entries([], 2)


def test_position_ids_restart_at_every_sequence():
    p = packing.pack_lengths([3, 2, 4], 5)
    ids = packing.position_ids(p)
    assert ids.shape == p.doc_ids.shape
    for (r, o), n in zip(p.starts, p.lengths, strict=True):
        assert ids[r, o : o + n].tolist() == list(range(n))
    assert (ids[p.doc_ids < 0] == 0).all()  # the end-of-row padding


def test_packed_learned_positions_need_the_restart_and_rotary_does_not():
    g = torch.Generator().manual_seed(3)
    p = packing.pack_lengths([3, 5], 8)  # one row: sequence 1 (5) at 0, sequence 0 (3) at 5
    seqs = [torch.randn(1, n, 4, generator=g) for n in p.lengths]  # (h, n_i, d)
    row = packing.pack_sequences([x.transpose(0, 1) for x in seqs], p).transpose(1, 2)[0]
    mask = masks.document(p.doc_ids)[0]  # (1, 8, 8)
    table = torch.randn(8, 4, generator=g)

    def absolute(x, pos, m=None):
        x = x + table[pos]
        return scaled_dot_product_attention(x, x, x, m)[0]

    def rope(x, pos, m=None):
        q, k = rotary.apply_rotary(x, x, pos)
        return scaled_dot_product_attention(q, k, x, m)[0]

    def gap(attend, pos):
        out = attend(row, pos, mask)
        return max((out[:, o : o + n] - attend(x, torch.arange(n))).abs().max().item()
                   for (_, o), n, x in zip(p.starts, p.lengths, seqs, strict=True))

    restarted, from_row = packing.position_ids(p)[0], torch.arange(8)
    assert gap(absolute, restarted) < 1e-5 < 1e-2 < gap(absolute, from_row)
    assert gap(rope, restarted) < 1e-5 and gap(rope, from_row) < 1e-5


def test_docstring_lengths_are_token_counts_of_the_frozen_docstrings():
    from encoderlab.pretrained import load_minilm

    tokenizer, _ = load_minilm()
    lengths = packing.docstring_lengths(tokenizer)
    assert len(lengths) == 735 and min(lengths) >= 3 and max(lengths) == 512
    short = packing.docstring_lengths(tokenizer, max_length=64)
    assert max(short) == 64 and all(s == min(n, 64) for s, n in zip(short, lengths, strict=True))
    with pytest.raises(ValueError, match="max_length must be an int >= 2"):
        packing.docstring_lengths(tokenizer, max_length=1)


def _tiny_encoder(norm="post"):
    from encoderlab.encoder import EncoderConfig, EncoderModel

    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=32,
                           norm=norm, pooler=False)
    return EncoderModel(config).eval()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encode_packed_gives_every_sequence_its_own_output(norm):
    model = _tiny_encoder(norm)
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(1, 50, (n,), generator=g).tolist() for n in (5, 9, 3, 12, 7, 1)]
    plan, input_ids = packing.pack_token_ids(ids, 16)
    assert input_ids.shape == (plan.n_rows, 16)
    for t, (r, o) in zip(ids, plan.starts, strict=True):
        assert input_ids[r, o : o + len(t)].tolist() == t
    assert int((input_ids != 0).sum()) == sum(map(len, ids))  # [PAD] = 0 everywhere else
    with torch.no_grad():
        alone = [model(torch.tensor([t])).last_hidden_state[0] for t in ids]
        packed = packing.encode_packed(model, input_ids, plan)
        from_row = packing.encode_packed(model, input_ids, plan, restart_positions=False)
    assert [tuple(x.shape) for x in packed] == [(len(t), 16) for t in ids]
    assert max((a - b).abs().max().item() for a, b in zip(packed, alone, strict=True)) < 1e-5
    # positions counted from the row change every sequence that does not start a row
    moved = [(a - b).abs().max().item() for a, b, (_, o) in
             zip(from_row, alone, plan.starts, strict=True) if o > 0]
    assert moved and min(moved) > 1e-3
    # without the document mask every sequence sees its row-neighbours (or the row's padding)
    with torch.no_grad():
        leaky = packing.encode_packed(model, input_ids, plan, document_mask=False)
    shared = [(a - b).abs().max().item() for a, b, (r, _) in
              zip(leaky, alone, plan.starts, strict=True)
              if sum(1 for rr, _ in plan.starts if rr == r) > 1]
    assert shared and min(shared) > 1e-3


def test_docstring_sentences_are_seeded_tokenized_sentences():
    from encoderlab.pretrained import load_minilm

    tokenizer, _ = load_minilm()
    a, b = packing.docstring_sentences(tokenizer, 20), packing.docstring_sentences(tokenizer, 20)
    assert a == b and a != packing.docstring_sentences(tokenizer, 20, seed=1)
    cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    assert all(t[0] == cls and t[-1] == sep and 3 <= len(t) <= 512 for t in a)
    with pytest.raises(ValueError, match="the corpus holds"):
        packing.docstring_sentences(tokenizer, 10**6)


# --- the GPU cell (Lesson 9, §3) ----------------------------------------------------------------


def test_mask_gpu_rows_without_a_gpu_prints_the_cpu_fractions_and_what_a_gpu_adds(
        tmp_path, capsys, monkeypatch):
    from encoderlab.course import bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rows = [{"mask": "full", "time_fraction": 1.04}, {"mask": "document", "time_fraction": 0.3}]
    assert bench.mask_gpu_rows(tmp_path, rows) is None  # an empty folder: no recorded runs
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("No CUDA GPU in this run")
    assert out[1] == ("Measured on this CPU, tiled attention's time / no mask: full 1.04, "
                      "document 0.30.")
    assert out[2].startswith("On a GPU of compute capability 8.0") and "every mask above" in out[2]
    assert len(out) == 3


def test_mask_gpu_rows_refuses_rows_that_are_not_bench_masks_rows(tmp_path):
    from encoderlab.course import bench

    with pytest.raises(ValueError, match="bench_masks"):
        bench.mask_gpu_rows(tmp_path, [{"mask": "full"}])


def test_padded_batches_pad_each_batch_to_its_longest_and_mask_the_pads():
    seqs = [torch.ones(2, n, 3) * n for n in (2, 5, 1, 3)]  # (h, n_i, d), filled with n_i
    batches = packing.padded_batches(seqs, 2, order=[2, 1, 0, 3])  # lengths 1, 5 | 2, 3
    assert [tuple(x.shape) for x, _ in batches] == [(2, 2, 5, 3), (2, 2, 3, 3)]
    x, m = batches[0]
    assert (x[0, :, :1] == 1).all() and (x[0, :, 1:] == 0).all()  # the length-1 row, padded
    assert m.shape == (2, 1, 1, 5) and m[0, 0, 0].tolist() == [True] + [False] * 4
    with pytest.raises(ValueError, match=r"\(h, n_i, d\)"):
        packing.padded_batches([torch.ones(3, 4)], 2)


def test_padded_token_batches_match_what_a_tokenizer_pads():
    batches = packing.padded_token_batches([[5, 6, 7], [8], [9, 9]], 2)
    (x0, k0), (x1, k1) = batches
    assert x0.tolist() == [[5, 6, 7], [8, 0, 0]] and k0.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert x1.tolist() == [[9, 9]] and k1.tolist() == [[1, 1]]
    with pytest.raises(ValueError, match="non-empty"):
        packing.padded_token_batches([[1], []], 2)

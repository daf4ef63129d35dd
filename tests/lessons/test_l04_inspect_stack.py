"""inspect_stack: the numbers Lesson 4 reads out of the stack, on tiny configs and real weights."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from encoderlab.encoder import EncoderConfig, EncoderModel, count_parameters
from encoderlab.heads import pool
from encoderlab.lessons import l04_count as counting
from encoderlab.lessons import l04_inspect_stack as ins


def tiny(norm="post", pooler=True, n_layers=2, d_model=32):
    return EncoderConfig(vocab_size=50, d_model=d_model, n_heads=4, n_layers=n_layers, d_ff=64,
                         n_max=16, norm=norm, pooler=pooler, dropout=0.0)


# --- Parameter breakdown -------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    d_k=st.integers(1, 8),
    n_heads=st.integers(1, 4),
    n_layers=st.integers(0, 4),
    d_ff=st.integers(1, 40),
    vocab=st.integers(1, 60),
    n_max=st.integers(1, 20),
    n_segments=st.integers(1, 3),
    norm=st.sampled_from(["post", "pre"]),
    pooler=st.booleans(),
)
def test_breakdown_sums_to_the_count_and_matches_the_modules(
    d_k, n_heads, n_layers, d_ff, vocab, n_max, n_segments, norm, pooler
):
    config = EncoderConfig(vocab_size=vocab, d_model=d_k * n_heads, n_heads=n_heads,
                           n_layers=n_layers, d_ff=d_ff, n_max=n_max, n_segments=n_segments,
                           norm=norm, pooler=pooler)
    parts = counting.parameter_breakdown(config)
    assert sum(parts.values()) == count_parameters(config)
    assert list(parts) == [p for p in counting.PARTS if p in parts]  # the table's order
    assert ("final LayerNorm" in parts) == (norm == "pre")
    assert ("pooler" in parts) == pooler
    model_parts = counting.model_breakdown(EncoderModel(config))
    assert model_parts == {k: v for k, v in parts.items() if v}


def test_bert_base_is_the_well_known_110m():
    bert_base = EncoderConfig(vocab_size=30522, d_model=768, n_heads=12, n_layers=12,
                              d_ff=3072, n_max=512)
    parts = counting.parameter_breakdown(bert_base)
    assert sum(parts.values()) == count_parameters(bert_base) == 109_482_240
    assert parts["token embeddings"] == 30522 * 768
    assert parts["attention"] == 12 * 4 * (768 * 768 + 768)
    assert parts["pooler"] == 768 * 768 + 768


def test_part_of_names_every_parameter_and_refuses_others():
    model = EncoderModel(tiny(norm="pre"))
    assert {counting.part_of(name) for name, _ in model.named_parameters()} == set(counting.PARTS)
    assert counting.part_of("blocks.1.mlp.w_2.bias") == "MLP"
    with pytest.raises(ValueError, match=r"not a parameter name of encoderlab's EncoderModel"):
        counting.part_of("encoder.layer.0.attention.self.query.weight")


def test_breakdown_refuses_a_non_config():
    with pytest.raises(ValueError, match="needs an EncoderConfig, got dict"):
        counting.parameter_breakdown({"d_model": 32})


def test_the_real_checkpoint_matches_the_formula_part_by_part(minilm):
    _, model = minilm
    total = counting.checkpoint_parameter_count()
    assert total == count_parameters(model.config) == 22_713_216
    assert counting.checkpoint_breakdown() == counting.parameter_breakdown(model.config)
    assert counting.model_breakdown(model) == counting.parameter_breakdown(model.config)


# --- Attention mass on chosen tokens ----------------------------------------------------------


def uniform_attentions(L, b, h, n, real):
    """Each real query spreads its weight evenly over the real keys; [PAD] rows hold junk."""
    a = real[:, None, None, :].float().expand(b, h, n, n).clone()
    a = a / a.sum(dim=-1, keepdim=True)
    a[~real[:, None, :, None].expand(b, h, n, n)] = 7.0  # junk in [PAD] query rows
    return tuple(a.clone() for _ in range(L))


def test_uniform_attention_puts_one_over_n_on_each_token():
    ids = torch.tensor([[1, 5, 6, 2, 0, 0], [1, 7, 8, 9, 5, 2]])  # 1 = "[CLS]", 2 = "[SEP]"
    am = (ids != 0).long()
    real = am.bool()
    attentions = uniform_attentions(3, 2, 4, 6, real)
    on_cls = ins.attention_to_tokens(attentions, ids, 1, am)
    assert on_cls.shape == (3, 4)
    # sequence 0: 4 real queries with 1/4 each; sequence 1: 6 real queries with 1/6 each
    expected = (4 * (1 / 4) + 6 * (1 / 6)) / 10
    assert torch.allclose(on_cls, torch.full((3, 4), expected))
    on_5 = ins.attention_to_tokens(torch.stack(attentions), ids, 5, am)  # a stacked tensor works
    assert torch.allclose(on_5, on_cls)  # token 5 appears once in each, as [CLS] does


def test_attention_all_on_one_token_gives_one():
    b, h, n = 2, 3, 5
    a = torch.zeros(b, h, n, n)
    a[..., 0] = 1.0  # every query looks only at position 0
    ids = torch.tensor([[1, 4, 4, 2, 0], [1, 4, 2, 0, 0]])
    out = ins.attention_to_tokens([a, a], ids, 1, (ids != 0).long())
    assert torch.equal(out, torch.ones(2, h))
    assert torch.equal(ins.attention_to_tokens([a], ids, 2, (ids != 0).long()), torch.zeros(1, h))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), b=st.integers(1, 3), n=st.integers(2, 7))
def test_attention_mass_lies_between_0_and_1_and_sums_over_tokens_to_1(seed, b, n):
    g = torch.Generator().manual_seed(seed)
    a = torch.softmax(torch.randn(2, b, 2, n, n, generator=g), dim=-1)
    ids = torch.randint(0, 4, (b, n), generator=g)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    am = (torch.arange(n)[None] < lengths[:, None]).long()
    a = a * am[None, :, None, None, :]
    a = a / a.sum(-1, keepdim=True)  # real queries attend to real keys only, as the model does
    masses = [ins.attention_to_tokens(a, ids, t, am) for t in range(4)]
    assert all(((m >= -1e-6) & (m <= 1 + 1e-6)).all() for m in masses)
    assert torch.allclose(sum(masses), torch.ones(2, 2), atol=1e-5)


def test_attention_to_tokens_errors():
    a = [torch.rand(1, 2, 4, 4)]
    ids = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(b, n\) = \(1, 4\)"):
        ins.attention_to_tokens(a, torch.zeros(1, 5, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="token_id must be one int id"):
        ins.attention_to_tokens(a, ids, "[CLS]")
    with pytest.raises(ValueError, match="output_attentions=True"):
        ins.attention_to_tokens(None, ids, 0)
    with pytest.raises(ValueError, match=r"attention_mask must be the tokenizer's \(b, n\)"):
        ins.attention_to_tokens(a, ids, 0, torch.ones(4))
    with pytest.raises(ValueError, match="5 dimensions when stacked"):
        ins.attention_to_tokens([torch.rand(2, 4, 4)], ids, 0)


# --- [CLS] and the mean token --------------------------------------------------------------------


def test_similarity_to_mean_matches_a_loop_and_marks_padding():
    g = torch.Generator().manual_seed(0)
    hs = tuple(torch.randn(2, 5, 8, generator=g) for _ in range(3))
    am = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    sim = ins.similarity_to_mean(hs, am)
    assert sim.shape == (3, 2, 5)
    assert torch.isnan(sim[:, 0, 3:]).all() and not torch.isnan(sim[:, 0, :3]).any()
    for l in range(3):
        for s in range(2):
            real = [i for i in range(5) if am[s, i]]
            for i in real:
                others = hs[l][s, [j for j in real if j != i]].mean(dim=0)
                expected = torch.cosine_similarity(hs[l][s, i], others, dim=0)
                assert torch.allclose(sim[l, s, i], expected, atol=1e-6)
    cls = ins.cls_similarity_by_depth(hs, am)
    assert cls.shape == (3,) and torch.allclose(cls, sim[:, :, 0].mean(dim=1))


def test_identical_tokens_are_fully_similar_to_their_mean():
    hs = [torch.ones(2, 4, 6) * torch.arange(6.0) + 1]
    assert torch.allclose(ins.cls_similarity_by_depth(hs), torch.ones(1))
    assert torch.allclose(ins.similarity_across_sequences(hs), torch.ones(1))


def test_padding_does_not_change_the_similarity():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(1, 4, 8, generator=g)
    padded = torch.cat([h, 100 * torch.randn(1, 3, 8, generator=g)], dim=1)  # junk [PAD] rows
    am = torch.tensor([[1, 1, 1, 1, 0, 0, 0]])
    assert torch.allclose(ins.cls_similarity_by_depth([padded], am),
                          ins.cls_similarity_by_depth([h]))


def test_similarity_errors():
    with pytest.raises(ValueError, match="at least 2 real tokens"):
        ins.similarity_to_mean([torch.randn(1, 3, 4)], torch.tensor([[1, 0, 0]]))
    with pytest.raises(ValueError, match="one row of attention_mask is all zeros"):
        ins.residual_norms([torch.randn(2, 3, 4)], torch.tensor([[1, 1, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="batch of at least 2, got b=1"):
        ins.similarity_across_sequences([torch.randn(1, 3, 4)])
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 3\)"):
        ins.similarity_across_sequences([torch.randn(2, 3, 4)], position=3)


def test_similarity_across_sequences_of_opposite_vectors():
    h = torch.zeros(2, 3, 4)
    h[0, 0, 0], h[1, 0, 0] = 1.0, -1.0  # [CLS] vectors point opposite ways
    h[:, 1:, 1] = 1.0
    assert torch.allclose(ins.similarity_across_sequences([h]), torch.tensor([-1.0]))
    assert torch.allclose(ins.similarity_across_sequences([h], position=2), torch.tensor([1.0]))


def test_similarity_across_sequences_of_chosen_tokens_skips_pairs_within_a_sequence():
    h = torch.zeros(3, 3, 4)  # three sequences of three tokens
    h[0, 1, 0] = h[1, 1, 0] = 1.0  # the chosen token of sequences 0 and 1 points along e_0
    h[2, 2, 0] = -1.0  # and that of sequence 2 the other way
    h[0, 2, 0] = -1.0  # a second chosen token in sequence 0, opposite to its first
    select = torch.zeros(3, 3, dtype=torch.bool)
    select[0, 1] = select[1, 1] = select[2, 2] = select[0, 2] = True
    # pairs across sequences: (0,1)-(1,1) +1, (0,1)-(2,2) -1, (1,1)-(2,2) -1,
    # (0,2)-(1,1) -1, (0,2)-(2,2) +1; the pair (0,1)-(0,2) within sequence 0 is left out
    expected = torch.tensor([(1 - 1 - 1 - 1 + 1) / 5])
    assert torch.allclose(ins.similarity_across_sequences_of([h], select), expected)


def test_similarity_across_sequences_of_position_0_equals_the_cls_version():
    g = torch.Generator().manual_seed(3)
    hs = [torch.randn(4, 5, 6, generator=g) for _ in range(3)]
    select = torch.zeros(4, 5, dtype=torch.bool)
    select[:, 0] = True
    assert torch.allclose(ins.similarity_across_sequences_of(hs, select),
                          ins.similarity_across_sequences(hs), atol=1e-6)


def test_similarity_across_sequences_of_errors():
    hs = [torch.randn(2, 3, 4)]
    with pytest.raises(ValueError, match=r"boolean \(b, n\) = \(2, 3\)"):
        ins.similarity_across_sequences_of(hs, torch.ones(2, 3))  # not boolean
    with pytest.raises(ValueError, match=r"boolean \(b, n\) = \(2, 3\)"):
        ins.similarity_across_sequences_of(hs, torch.ones(3, 2, dtype=torch.bool))
    one_sequence = torch.zeros(2, 3, dtype=torch.bool)
    one_sequence[0] = True
    with pytest.raises(ValueError, match="at least 2 sequences"):
        ins.similarity_across_sequences_of(hs, one_sequence)


# --- Residual norms ---------------------------------------------------------------------------


def test_residual_norms_keep_real_tokens_in_order():
    g = torch.Generator().manual_seed(2)
    hs = [torch.randn(2, 4, 5, generator=g) for _ in range(2)]
    am = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    norms = ins.residual_norms(hs, am)
    assert norms.shape == (2, 6)
    assert torch.allclose(norms[1], hs[1][am.bool()].norm(dim=-1))
    assert ins.residual_norms(hs).shape == (2, 8)  # no mask: every position counts


def test_post_ln_stream_has_a_fixed_norm_and_pre_ln_grows():
    """At initialisation a post-LN H^(l) is a LayerNorm output (norm sqrt(d)); pre-LN adds up."""
    ids = torch.randint(0, 50, (3, 10))
    norms = {}
    for norm in ("post", "pre"):
        torch.manual_seed(0)
        model = EncoderModel(tiny(norm=norm, n_layers=6)).eval()
        with torch.no_grad():
            hidden = model(ids).hidden_states
        norms[norm] = ins.residual_norms(hidden[:-1]).mean(dim=1)  # H^(0) .. H^(L-1)
    assert torch.allclose(norms["post"], torch.full((6,), math.sqrt(32)), rtol=1e-3)
    assert (norms["pre"].diff() > 0).all()  # every block adds to the stream


def test_layer_to_layer_similarity():
    h = torch.randn(2, 4, 6)
    am = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    junk = h.clone()
    junk[0, 2:] = -h[0, 2:]  # only [PAD] positions change between the two depths
    assert torch.allclose(ins.layer_to_layer_similarity([h, junk], am), torch.ones(1))
    flipped = ins.layer_to_layer_similarity([h, h, -h])
    assert flipped.shape == (2,) and torch.allclose(flipped, torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="at least 2 hidden states"):
        ins.layer_to_layer_similarity([h])


# --- Initialisation and gradient norms ----------------------------------------------------------


# --- The real model ------------------------------------------------------------------------------


def test_probes_on_minilm_are_in_range(minilm):
    tokenizer, model = minilm
    batch = tokenizer(["The bank raised its rates.", "We sat on the river bank at dawn."],
                      padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    cls_id = tokenizer.convert_tokens_to_ids("[CLS]")
    on_cls = ins.attention_to_tokens(out.attentions, batch["input_ids"], cls_id,
                                     batch["attention_mask"])
    assert on_cls.shape == (6, 12) and ((on_cls >= 0) & (on_cls <= 1)).all()
    similarity = ins.cls_similarity_by_depth(out.hidden_states, batch["attention_mask"])
    assert similarity.shape == (7,) and similarity.abs().max() <= 1
    norms = ins.residual_norms(out.hidden_states, batch["attention_mask"])
    assert norms.shape == (7, int(batch["attention_mask"].sum()))


# --- What attention to a token contributes, ablation, residual, FLOPs ---------------------------


def test_value_contributions_sum_to_the_heads_output():
    torch.manual_seed(0)
    model = EncoderModel(tiny()).eval()
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    mha, h = model.blocks[0].attention, out.hidden_states[0]
    contrib = ins.value_contributions(mha, h, out.attentions[0])  # (b, heads, n, n)
    assert contrib.shape == (2, 4, 7, 7) and (contrib >= 0).all()
    # the vectors themselves, one head and one key: A_ij (v_j W_O^(k)), summed over j and k
    with torch.no_grad():
        v = mha.w_v(h).view(2, 7, 4, 8).transpose(1, 2)  # (b, heads, n, d_k)
        w_o = mha.w_o.weight.T.reshape(4, 8, 32)
        vectors = out.attentions[0][..., None] * torch.einsum("bknc,kcd->bknd", v, w_o)[:, :, None]
        y, _ = mha(h)
    assert torch.allclose(vectors.norm(dim=-1), contrib, atol=1e-5)
    assert torch.allclose(vectors.sum(dim=(1, 3)) + mha.w_o.bias, y, atol=1e-5)
    with pytest.raises(ValueError, match="MultiHeadAttention"):
        ins.value_contributions(model.blocks[0], h, out.attentions[0])
    with pytest.raises(ValueError, match="attention weights for h"):
        ins.value_contributions(mha, h, out.attentions[0][:, :2])


def test_hide_keys_moves_the_weight_to_the_other_keys():
    torch.manual_seed(0)
    model = EncoderModel(tiny()).eval()
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 9, 2, 2]])
    hidden = ins.hide_keys(ids, 1)
    assert hidden.shape == (2, 1, 5, 5) and hidden.dtype == torch.bool
    with torch.no_grad():
        out = model(ids, mask=hidden, output_attentions=True)
    assert (out.attentions[0][..., 0] == 0).all()  # key 0 holds id 1: hidden from every query
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(2, 4, 5))
    with pytest.raises(ValueError, match="one int id"):
        ins.hide_keys(ids, "[CLS]")


def test_block_without_residual_drops_the_identity_path():
    torch.manual_seed(0)
    block = EncoderModel(tiny()).eval().blocks[0]
    h = torch.randn(1, 5, 32)
    with torch.no_grad():
        plain = ins.block_without_residual(block, h)
        a, _ = block.attention(h)
        by_hand = torch.layer_norm(block.mlp(block.norm_1(a)), (32,), block.norm_2.weight,
                                   block.norm_2.bias, block.norm_2.eps)
    assert torch.allclose(plain, by_hand, atol=1e-6)
    assert plain.shape == h.shape
    assert not torch.allclose(plain, block(h)[0], atol=1e-3)
    with pytest.raises(ValueError, match="post-LN"):
        ins.block_without_residual(EncoderModel(tiny(norm="pre")).blocks[0], h)




# --- Lesson 4's compact tables and the [CLS] interventions ---------------------------------------


def test_residual_similarity_separates_the_identity_path_from_the_baseline():
    torch.manual_seed(0)
    model = EncoderModel(tiny(n_layers=3)).eval()
    ids = torch.randint(3, 50, (2, 6))
    am = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        out = model(ids, attention_mask=am)
    table = ins.residual_similarity(model.blocks, out.hidden_states, am)
    assert set(table) == {"with the residual", "residual removed", "other positions"}
    assert all(t.shape == (3,) for t in table.values())
    # by hand for block 2 of sentence 0, which has no padding
    by_hand = [torch.nn.functional.cosine_similarity(out.hidden_states[1][k, i],
                                                     out.hidden_states[2][k, i], dim=0)
               for k in range(2) for i in range(6) if am[k, i]]
    assert torch.allclose(table["with the residual"][1], torch.stack(by_hand).mean(), atol=1e-6)
    assert (table["with the residual"] > table["residual removed"]).all()
    with pytest.raises(ValueError, match="L \\+ 1"):
        ins.residual_similarity(model.blocks, out.hidden_states[:2], am)


def test_update_sizes_measure_each_sub_layer_against_its_stream():
    torch.manual_seed(0)
    model = EncoderModel(tiny(n_layers=2)).eval()
    h = [torch.randn(1, 4, 32) for _ in range(3)]  # L + 1 = 3 "hidden states"
    got = ins.update_sizes(model.blocks, h)
    assert set(got) == {"attention", "MLP"} and all(t.shape == (2,) for t in got.values())
    block = model.blocks[0]  # by hand, block 1, post-LN: MHA(h) / h, then MLP(LN_1(h + a))
    with torch.no_grad():
        a, _ = block.attention(h[0])
        stream = block.norm_1(h[0] + a)
        mlp_ratio = (block.mlp(stream).norm(dim=-1) / stream.norm(dim=-1)).mean()
    assert got["attention"][0] == pytest.approx((a.norm(dim=-1) / h[0].norm(dim=-1)).mean()
                                                .item(), rel=1e-5)
    assert got["MLP"][0] == pytest.approx(mlp_ratio.item(), rel=1e-5)
    with torch.no_grad():  # a block whose attention writes nothing: ratio 0
        block.attention.w_o.weight.zero_()
        block.attention.w_o.bias.zero_()
    assert ins.update_sizes(model.blocks, h)["attention"][0] == 0
    # a padded position is neither counted nor seen
    am = torch.tensor([[1, 1, 1, 0]])
    changed = [x.clone() for x in h]
    changed[1][0, 3] = 100.0
    assert torch.allclose(ins.update_sizes(model.blocks, h, am)["MLP"],
                          ins.update_sizes(model.blocks, changed, am)["MLP"])
    with pytest.raises(ValueError, match="L \\+ 1"):
        ins.update_sizes(model.blocks, h[:2])


def test_parameter_table_lists_counts_shares_total_and_one_block():
    bert_base = EncoderConfig(d_model=768, n_heads=12, n_layers=12, d_ff=3072)
    text = counting.parameter_table({"small": tiny(norm="pre"), "BERT-base": bert_base})
    lines = text.splitlines()
    assert lines[0].split() == ["part", "small", "BERT-base"]
    total = next(line for line in lines if line.startswith("total")).split()
    assert total[1:] == [f"{count_parameters(tiny(norm='pre')):,}", "109,482,240"]
    one_block = next(line for line in lines if line.startswith("one block")).split()
    assert one_block[-1] == f"{12 * 768**2 + 13 * 768:,}"  # 12 d^2 + 13 d
    final = next(line for line in lines if line.startswith("final LayerNorm")).split()
    assert final[2:] == ["64", f"{100 * 64 / count_parameters(tiny(norm='pre')):.1f}%", "0",
                         "0.0%"]  # only the pre-LN model has one
    token = next(line for line in lines if line.startswith("token embeddings")).split()
    assert token[-1] == "21.4%"
    with pytest.raises(ValueError, match="EncoderConfig"):
        counting.parameter_table({"x": 3})


def test_contributions_by_layer_match_weights_and_value_norms():
    torch.manual_seed(0)
    model = EncoderModel(tiny()).eval()
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 9, 2, 0]])
    am = (ids != 0).long()
    with torch.no_grad():
        out = model(ids, attention_mask=am, output_attentions=True)
    got = ins.contributions_by_layer(model, out.hidden_states, out.attentions, ids, 1, am)
    assert all(t.shape == (2,) for t in got.values())
    weight = ins.attention_to_tokens(out.attentions, ids, 1, am).mean(dim=1)
    assert torch.allclose(got["weight"], weight)
    # ||f_k(h_[CLS])|| of layer 1 by hand: the value of position 0 through head k's rows of W_O
    mha, h = model.blocks[0].attention, out.hidden_states[0]
    with torch.no_grad():
        v = mha.w_v(h).view(2, 5, 4, 8)[:, 0]  # (b, heads, d_k) at position 0
        f = torch.einsum("bkc,kcd->bkd", v, mha.w_o.weight.T.reshape(4, 8, 32))
    assert torch.allclose(got["|f(token)|"][0], f.norm(dim=-1).mean(), atol=1e-5)
    assert ((got["share added"] >= 0) & (got["share added"] <= 1)).all()
    with pytest.raises(ValueError, match="hidden states"):
        ins.contributions_by_layer(model, out.hidden_states[:2], out.attentions, ids, 1, am)


def test_values_zeroed_keeps_the_weights_and_fetches_nothing_from_those_keys():
    torch.manual_seed(0)
    model = EncoderModel(tiny()).eval()
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    where = ids == 1
    with torch.no_grad():
        before = model(ids, output_attentions=True)
        with ins.values_zeroed(model, where):
            first = model.blocks[0].attention.w_v(before.hidden_states[0])  # (1, n, d)
            zeroed = model(ids, output_attentions=True)
        after = model(ids, output_attentions=True)
    assert (first[0, 0] == 0).all() and (first[0, 1:] != 0).any()
    assert torch.equal(zeroed.attentions[0], before.attentions[0])  # same weights in layer 1
    assert not torch.allclose(zeroed.last_hidden_state, before.last_hidden_state)
    assert torch.equal(after.last_hidden_state, before.last_hidden_state)  # hooks removed
    with pytest.raises(ValueError, match="bool"):
        with ins.values_zeroed(model, ids):
            pass


def test_sink_interventions_on_a_tiny_model():
    torch.manual_seed(0)
    model = EncoderModel(tiny()).eval()
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 9, 2, 0]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    got = ins.sink_interventions(model, batch, cls_id=1, sep_id=2)
    assert list(got) == ["hide [CLS] as a key", "zero [CLS]'s value", "zero every word's value",
                         "hide [SEP] as a key", "different sentences"]
    assert all(t.shape == (2,) and (t <= 1 + 1e-6).all() for t in got.values())
    with torch.no_grad():  # the baseline by hand: with two sentences, both get their pair's cosine
        a, b = pool(model(**batch).last_hidden_state, batch["attention_mask"])
    pair = torch.dot(a, b) / (a.norm() * b.norm())
    assert torch.allclose(got["different sentences"], pair.expand(2), atol=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        ins.sink_interventions(model, {k: v[:1] for k, v in batch.items()}, cls_id=1, sep_id=2)
    with torch.no_grad():  # the second entry by hand, with an explicit hook-free computation
        base = pool(model(**batch).last_hidden_state, batch["attention_mask"])
        with ins.values_zeroed(model, ids == 1):
            moved = pool(model(**batch).last_hidden_state, batch["attention_mask"])
    assert torch.allclose(got["zero [CLS]'s value"], torch.cosine_similarity(moved, base))


def test_the_cls_value_does_not_matter_in_minilm(minilm):
    tokenizer, model = minilm
    batch = tokenizer(["The bank raised its rates.", "We sat on the river bank at dawn."],
                      padding=True, return_tensors="pt")
    got = ins.sink_interventions(model, batch, tokenizer.cls_token_id, tokenizer.sep_token_id)
    assert got["zero [CLS]'s value"].min() > 0.98  # what [CLS] supplies: almost nothing
    assert got["hide [CLS] as a key"].max() < 0.9  # where the weight goes: a lot


def test_reference_gaps_are_zero_on_minilm(minilm):
    pytest.importorskip("transformers")
    tokenizer, model = minilm
    batch = tokenizer(["The bank raised its rates.", "Paris."], padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model(**batch, output_attentions=True)
    gaps = counting.reference_gaps(ours, batch)
    assert set(gaps) == {"hidden states", "attentions", "pooler"}
    assert max(gaps.values()) <= 1e-5
    with torch.no_grad():
        wrong = model(**tokenizer(["Paris.", "The bank raised its rates."], padding=True,
                                  return_tensors="pt"), output_attentions=True)
    assert counting.reference_gaps(wrong, batch)["hidden states"] > 0.1  # another batch: far off
    with pytest.raises(ValueError, match="output_attentions"):
        counting.reference_gaps(model(**batch), batch)


def test_summary_by_depth_matches_the_functions_it_gathers():
    torch.manual_seed(0)
    model = EncoderModel(tiny()).eval()
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 9, 2, 0]])
    am = (ids != 0).long()
    with torch.no_grad():
        out = model(ids, attention_mask=am)
    rows = ins.summary_by_depth(out.hidden_states, ids, am, cls_id=1, sep_id=2)
    assert all(t.shape == (3,) for t in rows.values())
    assert torch.allclose(rows["[CLS] vs sentence mean"],
                          ins.cls_similarity_by_depth(out.hidden_states, am))
    assert torch.allclose(rows["[CLS] across sentences"],
                          ins.similarity_across_sequences(out.hidden_states), atol=1e-6)
    # one word per sentence at depth 0, by hand: the mean over words of cos(word, mean of others)
    sim = ins.similarity_to_mean(out.hidden_states, am)[0]
    by_hand = torch.stack([sim[0, 1], sim[0, 2], sim[0, 3], sim[1, 1], sim[1, 2]]).mean()
    assert torch.isclose(rows["word vs sentence mean"][0], by_hand)
    with pytest.raises(ValueError, match="no word tokens"):
        ins.summary_by_depth(out.hidden_states, torch.tensor([[1, 2, 2, 2, 2]] * 2), None, 1, 2)

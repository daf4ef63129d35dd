"""The decoder side: causality, the KV cache, cross-attention computed once, and errors."""

import pytest
import torch

from encoderlab.decoder import (
    EncoderDecoderConfig,
    EncoderDecoderModel,
    ablated_cross_attention,
)


@pytest.fixture()
def model():
    torch.manual_seed(0)
    return EncoderDecoderModel(EncoderDecoderConfig(vocab_size=20, n_max=32)).eval()


def _sources():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 20, (3, 7), generator=g)
    src_mask = torch.ones_like(src)
    src_mask[1, 5:] = 0  # two padded sources
    src_mask[2, 3:] = 0
    return src * src_mask, src_mask


def test_cached_greedy_decoding_equals_uncached(model):
    src, src_mask = _sources()
    fast = model.generate(src, src_mask, max_new_tokens=12, use_cache=True)
    slow = model.generate(src, src_mask, max_new_tokens=12, use_cache=False)
    assert torch.equal(fast.ids, slow.ids)
    assert fast.ids.shape[1] >= 2
    assert (fast.logits - slow.logits).abs().max() <= 1e-5


def test_decoder_logits_do_not_see_later_target_tokens(model):
    src, src_mask = _sources()
    tgt = torch.randint(3, 20, (3, 6))
    changed = tgt.clone()
    changed[:, 4:] = 3
    a = model(src, tgt, src_mask)
    b = model(src, changed, src_mask)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-4


def test_teacher_forcing_equals_step_by_step_cached_logits(model):
    src, src_mask = _sources()
    out = model.generate(src, src_mask, max_new_tokens=6)
    bos = torch.full((3, 1), model.config.bos_id)
    tgt = torch.cat([bos, out.ids[:, :-1]], dim=1)  # what the decoder read at each step
    logits = model(src, tgt, src_mask)
    assert (logits - out.logits).abs().max() <= 1e-5


def test_source_padding_does_not_change_the_output(model):
    src, src_mask = _sources()
    n = int(src_mask[2].sum())
    alone = model.generate(src[2:3, :n], max_new_tokens=5)
    padded = model.generate(src[2:3], src_mask[2:3], max_new_tokens=5)
    assert (alone.logits - padded.logits[:, : alone.logits.shape[1]]).abs().max() <= 1e-5


def test_cross_attention_maps_are_rectangular_and_hide_padding(model):
    src, src_mask = _sources()
    out = model.generate(src, src_mask, max_new_tokens=4, output_attentions=True)
    t = out.ids.shape[1]
    for weights in out.cross_attentions:
        assert weights.shape == (3, model.config.n_heads, t, 7)
        assert float(weights[2, :, :, 3:].abs().max()) == 0.0  # padded source keys
        assert torch.allclose(weights.sum(-1), torch.ones(3, model.config.n_heads, t), atol=1e-5)


def test_errors_are_clear(model):
    src, src_mask = _sources()
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        model.generate(src, max_new_tokens=0)
    with pytest.raises(ValueError, match="n_max=32"):
        model(src, torch.ones(3, 33, dtype=torch.long))
    with pytest.raises(ValueError, match="must differ"):
        EncoderDecoderConfig(bos_id=0)
    with pytest.raises(ValueError, match="n_heads must divide d_model"):
        EncoderDecoderConfig(d_model=30, n_heads=4)


def _with_cross_attention_of(model, block, change):
    """A copy of the model whose block's cross-attention weights are changed by ``change``."""
    import copy

    other = copy.deepcopy(model)
    with torch.no_grad():
        change(other.blocks[block].cross_attention)
    return other


@pytest.mark.parametrize("block", [0, 1])
def test_ablation_zero_equals_a_cross_attention_with_zero_output_weights(model, block):
    src, src_mask = _sources()
    tgt = torch.randint(3, 20, (3, 5))

    def zero_w_o(attention):
        attention.w_o.weight.zero_()
        attention.w_o.bias.zero_()

    reference = _with_cross_attention_of(model, block, zero_w_o)(src, tgt, src_mask)
    with ablated_cross_attention(model, block, "zero"):
        ablated = model(src, tgt, src_mask)
    assert torch.allclose(ablated, reference, atol=1e-6)
    assert not torch.allclose(model(src, tgt, src_mask), reference, atol=1e-3)  # restored


def test_ablation_uniform_equals_a_cross_attention_whose_scores_ignore_the_query(model):
    src, src_mask = _sources()
    tgt = torch.randint(3, 20, (3, 5))

    def flat_scores(attention):  # q . k = 0 for every pair: softmax spreads evenly over the keys
        attention.w_q.weight.zero_()
        attention.w_q.bias.zero_()

    reference = _with_cross_attention_of(model, 1, flat_scores)(src, tgt, src_mask)
    with ablated_cross_attention(model, 1, "uniform"):
        ablated = model(src, tgt, src_mask)
        weights = model.generate(src, src_mask, max_new_tokens=3,
                                 output_attentions=True).cross_attentions[1]
    assert torch.allclose(ablated, reference, atol=1e-5)
    lengths = src_mask.sum(1).float()  # 7, 5, 3 real positions
    assert torch.allclose(weights[:, 0, 0].sum(-1), torch.ones(3))
    assert torch.allclose(weights[:, 0, 0].max(-1).values, 1 / lengths)


def test_ablation_last_reads_only_the_last_real_source_position(model):
    src, src_mask = _sources()
    tgt = torch.randint(3, 20, (3, 5))
    last = src_mask.sum(1) - 1  # (3,): 6, 4, 2
    with ablated_cross_attention(model, 0, "last"):
        ablated = model(src, tgt, src_mask)
        weights = model.generate(src, src_mask, max_new_tokens=2,
                                 output_attentions=True).cross_attentions[0]
    assert weights[:, 0, 0].argmax(-1).tolist() == last.tolist()
    assert torch.equal(weights[:, 0, 0].sum(-1), torch.ones(3))
    # The read is W_O W_V of the encoder's output at the last real position, for every query.
    attention = model.blocks[0].cross_attention
    memory = model.encode(src, src_mask)  # (3, 7, d)
    pad_mask = src_mask.bool()[:, None, None]  # (3, 1, 1, 7)
    with ablated_cross_attention(model, 0, "last"):
        out, _ = attention(torch.randn(3, 5, 64), context=memory, mask=pad_mask)
    expected = attention.w_o(attention.w_v(memory[torch.arange(3), last]))  # (3, d)
    assert torch.allclose(out, expected[:, None].expand_as(out), atol=1e-5)
    assert ablated.shape == (3, 5, 20)


def test_ablation_errors_say_what_to_do(model):
    with pytest.raises(ValueError, match="block must be an int from 0 to 1"):
        with ablated_cross_attention(model, 2):
            pass
    with pytest.raises(ValueError, match="mode must be one of"):
        with ablated_cross_attention(model, 0, "random"):
            pass
    with pytest.raises(ValueError, match="must be an EncoderDecoderModel"):
        with ablated_cross_attention(torch.nn.Linear(2, 2), 0):
            pass

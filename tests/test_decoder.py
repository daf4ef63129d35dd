"""The decoder side: causality, the KV cache, cross-attention computed once, and errors."""

import pytest
import torch

from encoderlab.decoder import EncoderDecoderConfig, EncoderDecoderModel


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


def test_cross_attention_keys_and_values_are_computed_once_per_source(model):
    src, src_mask = _sources()
    for use_cache in (True, False):
        for block in model.blocks:
            block.cross_attention.kv_projections = 0
            block.self_attention.kv_projections = 0
        out = model.generate(src, src_mask, max_new_tokens=9, use_cache=use_cache)
        steps = out.ids.shape[1]
        for block in model.blocks:
            assert block.cross_attention.kv_projections == (1 if use_cache else steps)
            assert block.self_attention.kv_projections == steps


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

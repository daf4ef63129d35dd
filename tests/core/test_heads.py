"""The heads (Lessons 3, 5-8): pooling one vector per sequence, and the fine-tuning heads that
classify a sequence, tag its tokens and extract a span."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from encoderlab import heads, objectives
from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.heads import pool


def tiny_encoder(pooler: bool = True) -> EncoderModel:
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=32,
                           pooler=pooler)
    return EncoderModel(config).eval()


# --- heads.pool ---------------------------------------------------------------------------------


def _batch(lengths, n, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(len(lengths), n, d, generator=g)  # (b, n, d)
    mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()  # (b, n)
    return hidden, mask


@pytest.mark.parametrize("how", ["mean", "max"])
def test_pool_ignores_padding(how):
    hidden, mask = _batch([3, 5, 1], 5)
    before = pool(hidden, mask, how)
    # append 4 padding positions holding huge values: nothing may change
    pad = torch.full((3, 4, 6), 1e4)
    longer = pool(torch.cat([hidden, pad], dim=1), F.pad(mask, (0, 4)), how)
    assert torch.equal(before, longer)
    # and whatever sits in the padding positions of the original batch changes nothing either
    scrambled = hidden.masked_fill(~mask.bool()[..., None], -1e4)
    assert torch.equal(pool(scrambled, mask, how), before)


def test_pool_values():
    hidden, mask = _batch([3, 5, 1], 5)
    for i, n in enumerate([3, 5, 1]):
        assert torch.allclose(pool(hidden, mask, "mean")[i], hidden[i, :n].mean(0), atol=1e-6)
        assert torch.equal(pool(hidden, mask, "max")[i], hidden[i, :n].max(0).values)
    assert torch.equal(pool(hidden, mask, "cls"), hidden[:, 0])
    assert pool(hidden, mask).shape == (3, 6)  # mean by default


def test_pool_cls_is_position_zero_whatever_the_mask():
    hidden, mask = _batch([2, 4], 4)
    changed = hidden.clone()
    changed[:, 1:] = 0.0  # only position 0 matters
    assert torch.equal(pool(changed, mask, "cls"), pool(hidden, mask, "cls"))


def test_pool_errors():
    hidden, mask = _batch([2, 3], 3)
    with pytest.raises(ValueError, match=r"how must be one of \('cls', 'mean', 'max'\), got 'sum'"):
        pool(hidden, mask, "sum")
    with pytest.raises(ValueError, match=r"hidden must have shape \(batch, n, d\), got \(2, 3\)"):
        pool(hidden[..., 0], mask)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(batch, n\) = \(2, 3\), "
                                         r"got \(2, 4\)"):
        pool(hidden, torch.ones(2, 4))
    empty = mask.clone()
    empty[1] = 0
    with pytest.raises(ValueError, match=r"rows \[1\] of attention_mask have no real token"):
        pool(hidden, empty, "mean")


# --- The fine-tuning heads (Lesson 7) -----------------------------------------------------------


@pytest.mark.parametrize("pooling", heads.SEQUENCE_POOLINGS)
def test_sequence_classifier_shapes_and_pooling(pooling):
    model = heads.SequenceClassifier(tiny_encoder(), 3, pooling=pooling).eval()
    ids = torch.randint(5, 50, (4, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    logits = model(ids, mask)
    assert logits.shape == (4, 3)
    out = model.encoder(ids, attention_mask=mask)
    expected = {"cls": out.last_hidden_state[:, 0], "pooler": out.pooler_output,
                "mean": (out.last_hidden_state * mask[..., None]).sum(1) / mask.sum(1, True)}
    assert torch.allclose(model.sequence_vector(out, mask), expected[pooling], atol=1e-6)
    # padding changes nothing for the real sequence
    alone = model(ids[1:2, :5], mask[1:2, :5])
    assert torch.allclose(alone, logits[1:2], atol=1e-5)


def test_sequence_classifier_errors():
    with pytest.raises(ValueError, match="pooling must be one of"):
        heads.SequenceClassifier(tiny_encoder(), 3, pooling="max")
    with pytest.raises(ValueError, match="needs an encoder with BERT's pooler"):
        heads.SequenceClassifier(tiny_encoder(pooler=False), 3, pooling="pooler")
    with pytest.raises(ValueError, match="n_classes must be an int >= 2"):
        heads.SequenceClassifier(tiny_encoder(), 1)
    with pytest.raises(ValueError, match="n_tags must be an int >= 2"):
        heads.TokenClassifier(tiny_encoder(), True)


def test_span_extractor_masks_everything_but_the_context():
    model = heads.SpanExtractor(tiny_encoder()).eval()
    ids = torch.randint(5, 50, (2, 8))
    context = torch.zeros(2, 8, dtype=torch.bool)
    context[:, 3:7] = True
    start, end = model(ids, context_mask=context)
    assert start.shape == end.shape == (2, 8)
    assert torch.isinf(start[~context]).all() and torch.isfinite(start[context]).all()
    p = torch.softmax(start, dim=-1)
    assert torch.allclose(p.sum(-1), torch.ones(2)) and (p[~context] == 0).all()
    loss = objectives.span_loss(start, end, torch.tensor([3, 4]), torch.tensor([5, 6]))
    assert loss.dim() == 0 and torch.isfinite(loss)

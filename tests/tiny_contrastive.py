"""A tiny encoder and a tiny batch of contrastive pairs over it, for the tests of Lesson 8's
bi-encoder and re-ranker runs in tests/lessons."""

from __future__ import annotations

import torch

from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.lessons import l08_contrastive as contrastive


def tiny_encoder() -> EncoderModel:
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=32,
                           dropout=0.0)
    return EncoderModel(config).eval()


def tiny_pairs(model: EncoderModel):
    """16 random rows, every other one padded: the states below the last block ``h``, their
    ``mask``, and ``ContrastiveData`` pairing each row with a perturbed copy of itself."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, (16, 6), generator=g)
    mask = torch.ones_like(ids)
    mask[::2, 4:] = 0
    with torch.no_grad():
        h = model(ids, attention_mask=mask).hidden_states[-2]
    data = contrastive.ContrastiveData(h, mask, h.flip(1) * 0.5 + h, mask, held_out=[],
                                       train_pairs=16)
    return h, mask, data

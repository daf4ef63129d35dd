"""A tiny WordPiece vocabulary and random batches over it, for the tests of whole-word and span
masking (Lesson 6) in tests/core and tests/lessons."""

from __future__ import annotations

import torch

from encoderlab.encoder import EncoderConfig

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "list", "is", "over", "##flow",
          "##ed", "un", "##sort", "a", "stack", "."]
SPECIAL = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK]
TINY = EncoderConfig(vocab_size=len(TOKENS), d_model=16, n_heads=2, n_layers=1, d_ff=32,
                     n_max=32, dropout=0.0)


def random_batch(b=64, n=24, seed=0):
    """Random sentences over TOKENS: [CLS] words [SEP] [PAD]..., words of 1-3 pieces."""
    g = torch.Generator().manual_seed(seed)
    words = [[5], [6], [7], [8, 9, 10], [11, 12, 10], [13], [14], [15], [8], [11, 12]]
    rows = []
    for _ in range(b):
        pieces = []
        target = int(torch.randint(4, n - 2, (1,), generator=g))
        while len(pieces) < target:
            pieces += words[int(torch.randint(len(words), (1,), generator=g))]
        rows.append([2, *pieces[: n - 2], 3])
    ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
    return ids, (ids != 0).long()

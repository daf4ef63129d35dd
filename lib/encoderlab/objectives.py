"""Training objectives and their losses (Lesson 3, §3; Lesson 5).

A decoder learns by predicting each token from the tokens before it
(:func:`next_token_loss`). Lesson 3 shows that this objective stops meaning
anything once attention is bidirectional; Lesson 5 adds the masked-token
objective that encoders use instead.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

__all__ = ["next_token_loss"]


def next_token_loss(
    logits: torch.Tensor,  # (b, n, V): one distribution over the vocabulary per position
    input_ids: torch.Tensor,  # (b, n): the tokens, which are also the labels
    attention_mask: torch.Tensor | None = None,  # (b, n): 1 = real token, 0 = [PAD]
) -> torch.Tensor:
    """The decoder's objective, -mean_t log P(x_{t+1} | what position t saw) (Lesson 3, §3).

    The logits at position t are scored against the token at t + 1: the last
    position has no label and the first token is never a label. The result
    is the mean over the b * (n - 1) predictions, in nats. With an
    ``attention_mask``, predictions whose label is a [PAD] token are left out.

    Whether the prediction at t could *see* x_{t+1} is up to the model's
    mask: under a causal mask it could not, under a bidirectional one it could,
    and then this loss can be driven to zero by copying.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"logits must have shape (batch, n, vocab_size), got {got}. "
            "Pass the model's output before any softmax, one row of scores per position."
        )
    if not logits.dtype.is_floating_point:
        raise ValueError(f"logits must be a floating-point tensor, got dtype {logits.dtype}.")
    if not isinstance(input_ids, torch.Tensor) or tuple(input_ids.shape) != tuple(logits.shape[:2]):
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids)
        raise ValueError(
            f"input_ids must have shape (batch, n) = {tuple(logits.shape[:2])} to match the "
            f"logits {tuple(logits.shape)}, got {got}."
        )
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}.")
    b, n, vocab_size = logits.shape
    if n < 2:
        raise ValueError(
            "next_token_loss needs sequences of at least 2 tokens (one input, one label), "
            f"got n={n}."
        )
    predictions = logits[:, :-1]  # (b, n-1, V): position t predicts ...
    labels = input_ids[:, 1:]  # (b, n-1): ... the token at t + 1
    if attention_mask is not None:
        if tuple(attention_mask.shape) != (b, n):
            raise ValueError(
                f"attention_mask must have the shape of input_ids {(b, n)}, "
                f"got {tuple(attention_mask.shape)}."
            )
        labels = labels.masked_fill(attention_mask[:, 1:] == 0, -100)  # -100: ignored below
    return F.cross_entropy(
        predictions.reshape(-1, vocab_size),  # (b * (n-1), V)
        labels.reshape(-1),  # (b * (n-1),)
        ignore_index=-100,
    )

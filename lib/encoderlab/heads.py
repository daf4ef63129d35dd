"""Heads: small layers that turn the encoder's token vectors into predictions (Lessons 3, 5, 7-8).

Lesson 3 needs only one: a linear map from each token vector to scores over
the vocabulary, put on top of the course's encoder stack to make
:class:`TinyLM`, a language model that is either bidirectional (an encoder)
or causal (a decoder), with everything else identical.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from encoderlab import masks
from encoderlab.encoder import EncoderConfig, EncoderModel, EncoderOutput

__all__ = ["LanguageModelHead", "TinyLM"]


class LanguageModelHead(nn.Module):
    """Scores over the vocabulary for every position: logits = H W + b (Lesson 3, §3)."""

    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)  # W: (d, V)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.proj(h)  # (b, n, d) -> (b, n, V)


class TinyLM(nn.Module):
    """An encoder stack plus a :class:`LanguageModelHead`, with or without the causal mask.

    (Lesson 3, §3.) ``TinyLM(config, causal=True)`` is a decoder: position t
    sees tokens 0..t only. ``TinyLM(config, causal=False)`` is the same
    network with the mask deleted, an encoder. Both are trained with the same
    next-token loss in the lesson, which is the point of the experiment.
    """

    def __init__(self, config: EncoderConfig, causal: bool):
        super().__init__()
        # A language model scores every position; BERT's pooler (a [CLS]-only layer) has no use.
        self.config = replace(config, pooler=False)
        self.causal = bool(causal)
        self.encoder = EncoderModel(self.config)
        self.head = LanguageModelHead(self.config.d_model, self.config.vocab_size)

    def structural_mask(self, n: int, device=None) -> torch.Tensor | None:
        """The mask that makes this model what it is: causal (n, n), or None for bidirectional."""
        return masks.causal(n, device=device) if self.causal else None

    def encode(
        self,
        input_ids: torch.Tensor,  # (b, n)
        attention_mask: torch.Tensor | None = None,  # (b, n): 1 = real token, 0 = [PAD]
        output_attentions: bool = False,
    ) -> EncoderOutput:
        """The stack's output under this model's mask (hidden states, and A if asked)."""
        mask = self.structural_mask(input_ids.shape[1], device=input_ids.device)
        return self.encoder(
            input_ids,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
            mask=mask,
        )

    def forward(
        self,
        input_ids: torch.Tensor,  # (b, n)
        attention_mask: torch.Tensor | None = None,  # (b, n)
    ) -> torch.Tensor:
        h = self.encode(input_ids, attention_mask).last_hidden_state  # (b, n, d)
        return self.head(h)  # (b, n, V): logits; position t is scored against token t + 1

    def __repr__(self) -> str:
        c = self.config
        kind = "causal (decoder)" if self.causal else "bidirectional (encoder)"
        n_params = sum(p.numel() for p in self.parameters())
        return (
            f"TinyLM({kind}: V={c.vocab_size}, d={c.d_model}, h={c.n_heads}, L={c.n_layers}, "
            f"n_max={c.n_max}, {n_params:,} parameters)"
        )


# --- Lessons 7-8 ---
# One vector per sequence from the encoder's token vectors.

__all__ += ["pool", "POOLINGS"]

POOLINGS = ("cls", "mean", "max")


def pool(
    hidden: torch.Tensor,  # (b, n, d): the encoder's last hidden state
    attention_mask: torch.Tensor,  # (b, n): 1 = real token, 0 = [PAD]
    how: str = "mean",
) -> torch.Tensor:
    """One vector per sequence, (b, d): the [CLS] vector, or the mean / max over real tokens.

    (Lesson 8, §1.) Padding is never counted: it is left out of the mean's sum and
    count, and it can never be the max. ``cls`` takes position 0 as it is.
    """
    if how not in POOLINGS:
        raise ValueError(f"how must be one of {POOLINGS}, got {how!r}.")
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3:
        got = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ValueError(
            f"hidden must have shape (batch, n, d), got {got}. Pass the encoder's "
            "last_hidden_state."
        )
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != hidden.shape[:2]:
        got = (
            tuple(attention_mask.shape)
            if isinstance(attention_mask, torch.Tensor)
            else type(attention_mask).__name__
        )
        raise ValueError(
            f"attention_mask must have shape (batch, n) = {tuple(hidden.shape[:2])}, got {got}."
        )
    real = attention_mask.to(torch.bool)  # (b, n)
    empty = ~real.any(dim=1)
    if empty.any():
        rows = empty.nonzero().squeeze(1).tolist()
        raise ValueError(
            f"rows {rows} of attention_mask have no real token: there is nothing to pool. "
            "Drop empty sequences before pooling."
        )
    if how == "cls":
        return hidden[:, 0]  # (b, d)
    if how == "mean":
        weights = real.unsqueeze(-1).to(hidden.dtype)  # (b, n, 1)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1)  # (b, d)
    hidden = hidden.masked_fill(~real.unsqueeze(-1), float("-inf"))  # padding can't win
    return hidden.max(dim=1).values  # (b, d)

"""Heads: small layers that turn the encoder's token vectors into predictions (Lessons 3, 5-8).

In the order the course meets them:

- :class:`LanguageModelHead`, scores over the vocabulary at every position, and :class:`TinyLM`,
  the course's encoder stack with that head, bidirectional (an encoder) or causal (a decoder)
  with everything else identical (Lesson 3, §3; Lesson 5);
- ELECTRA's two heads: the generator's MLM head tied to the token embeddings
  (:class:`TiedGeneratorHead`) and the discriminator, one logit per position
  (:class:`TokenDiscriminator`) (Lesson 6, §4);
- :func:`pool`, one vector per sequence from its token vectors ([CLS], mean or max)
  (Lesson 8, §1), and the fine-tuning heads on top of it: :class:`SequenceClassifier`,
  :class:`TokenClassifier` and :class:`SpanExtractor` (Lesson 7).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.encoder import EncoderConfig, EncoderModel, EncoderOutput
from encoderlab.validate import check_int, shape_of

__all__ = [
    "LanguageModelHead",
    "TinyLM",
    "TiedGeneratorHead",
    "TokenDiscriminator",
    "POOLINGS",
    "pool",
    "SEQUENCE_POOLINGS",
    "SequenceClassifier",
    "TokenClassifier",
    "SpanExtractor",
]


# --- A language model's head (Lesson 3, §3) ------------------------------------------------------


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


# --- ELECTRA's heads (Lesson 6, §4) --------------------------------------------------------------


class TokenDiscriminator(nn.Module):
    """ELECTRA's discriminator: an encoder stack and one logit per position (Lesson 6, §4).

    ``forward`` returns (b, n) logits, "how likely is this token replaced". ``encode`` gives
    the stack's output, as :meth:`encoderlab.heads.TinyLM.encode` does, so both kinds of
    pretrained model can be probed the same way.
    """

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = replace(config, pooler=False)
        self.encoder = EncoderModel(self.config)
        self.head = nn.Linear(self.config.d_model, 1)  # (d,) -> one score

    def encode(self, input_ids, attention_mask=None) -> EncoderOutput:
        return self.encoder(input_ids, attention_mask=attention_mask)

    def forward(self, input_ids, attention_mask=None) -> torch.Tensor:
        h = self.encode(input_ids, attention_mask).last_hidden_state  # (b, n, d)
        return self.head(h).squeeze(-1)  # (b, n)


class TiedGeneratorHead(nn.Module):
    """The generator's MLM head with its output layer tied to the shared token embeddings
    (Lesson 6, §4): h -> LayerNorm(GELU(h W)) E_token^T + b, as in BERT and ELECTRA.

    Through the softmax over the vocabulary, every step's MLM loss sends a gradient to every
    row of E_token, also the rows of tokens that no input of the step contains.
    """

    def __init__(self, d_model: int, token_embedding: nn.Embedding, layer_norm_eps: float):
        super().__init__()
        vocab_size, d_shared = token_embedding.weight.shape
        self.transform = nn.Linear(d_model, d_shared)  # (d_gen,) -> (d_disc,)
        self.norm = nn.LayerNorm(d_shared, eps=layer_norm_eps)
        self.token_embedding = token_embedding  # shared, not a copy
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = self.norm(F.gelu(self.transform(h)))  # (..., d_disc)
        # The table's rows have norm about sqrt(d) (nn.Embedding draws N(0, 1); the embeddings'
        # LayerNorm makes that scale harmless on the input side); dividing by sqrt(d) keeps the
        # initial logits near unit scale instead of about sqrt(d) times larger.
        scale = self.token_embedding.weight.shape[1] ** -0.5
        return scale * (x @ self.token_embedding.weight.T) + self.bias  # (..., V)


# --- One vector per sequence (Lessons 7-8) -------------------------------------------------------


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
        got = shape_of(hidden)
        raise ValueError(
            f"hidden must have shape (batch, n, d), got {got}. Pass the encoder's "
            "last_hidden_state."
        )
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != hidden.shape[:2]:
        got = shape_of(attention_mask)
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


# --- Fine-tuning heads (Lesson 7, §2) ------------------------------------------------------------


SEQUENCE_POOLINGS = ("cls", "pooler", "mean")


def _check_count(value, name: str) -> int:
    return check_int(value, name, at_least=2, what="a head needs two outputs or more")


class SequenceClassifier(nn.Module):
    """Encoder + one vector per sequence + a linear layer: (b, n) tokens -> (b, C) scores.

    (Lesson 7, §2.) ``pooling`` chooses the vector: ``"cls"`` is the final [CLS] vector h_0,
    ``"pooler"`` is BERT's pooler output tanh(W h_0 + b) (the checkpoint must have that layer,
    ``EncoderConfig.pooler``), ``"mean"`` the mean of the real tokens' vectors (``heads.pool``).
    The head is dropout then ``nn.Linear(d, n_classes)``, as in BERT.
    """

    def __init__(self, encoder: nn.Module, n_classes: int, pooling: str = "cls",
                 dropout: float = 0.1):
        super().__init__()
        if pooling not in SEQUENCE_POOLINGS:
            raise ValueError(f"pooling must be one of {SEQUENCE_POOLINGS}, got {pooling!r}.")
        if pooling == "pooler" and getattr(encoder, "pooler", None) is None:
            raise ValueError(
                "pooling='pooler' needs an encoder with BERT's pooler layer, but this one has "
                "none (its config has pooler=False). Use pooling='cls' or 'mean'."
            )
        self.encoder = encoder
        self.pooling = pooling
        self.n_classes = _check_count(n_classes, "n_classes")
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, n_classes)  # W: (d, C)

    def sequence_vector(self, output, attention_mask: torch.Tensor) -> torch.Tensor:
        """(b, d): the vector the classifier reads, from an ``EncoderOutput``."""
        if self.pooling == "pooler":
            return output.pooler_output  # (b, d): tanh(W h_[CLS] + b)
        return pool(output.last_hidden_state, attention_mask, how=self.pooling)  # (b, d)

    def classify(self, vectors: torch.Tensor) -> torch.Tensor:
        """(b, d) sequence vectors -> (b, C) logits. A linear probe trains only this."""
        return self.classifier(self.dropout(vectors))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        output = self.encoder(input_ids, token_type_ids=token_type_ids,
                              attention_mask=attention_mask)
        return self.classify(self.sequence_vector(output, attention_mask))  # (b, C)


class TokenClassifier(nn.Module):
    """Encoder + a linear layer on every token vector: (b, n) tokens -> (b, n, T) tag scores.

    (Lesson 7, §4.) One decision per token, each made from a vector that has seen the whole
    sentence (both sides). With BIO tags, T = 2 x (entity types) + 1.
    """

    def __init__(self, encoder: nn.Module, n_tags: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.n_tags = _check_count(n_tags, "n_tags")
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, n_tags)  # W: (d, T)

    def tag(self, hidden: torch.Tensor) -> torch.Tensor:
        """(b, n, d) token vectors -> (b, n, T) logits. A linear probe trains only this."""
        return self.classifier(self.dropout(hidden))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        hidden = self.encoder(input_ids, token_type_ids=token_type_ids,
                              attention_mask=attention_mask).last_hidden_state  # (b, n, d)
        return self.tag(hidden)  # (b, n, T)


class SpanExtractor(nn.Module):
    """Encoder + two scores per token: where the answer starts and where it ends (Lesson 7, §5).

    The input is ``[CLS] question [SEP] context [SEP]``; ``context_mask`` (b, n) is True on the
    context's tokens, and every other position (question, specials, padding) gets the logit
    -inf, so the softmax over start (or end) positions is a distribution over the context only.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.qa = nn.Linear(encoder.config.d_model, 2)  # one column for start, one for end

    def span_logits(self, hidden: torch.Tensor, context_mask: torch.Tensor | None = None):
        """(b, n, d) token vectors -> start and end logits, each (b, n). A probe trains this."""
        scores = self.qa(hidden)  # (b, n, 2)
        start, end = scores[..., 0], scores[..., 1]  # (b, n) each
        if context_mask is not None:
            outside = ~context_mask.to(torch.bool)
            start = start.masked_fill(outside, float("-inf"))
            end = end.masked_fill(outside, float("-inf"))
        return start, end

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, context_mask=None):
        hidden = self.encoder(input_ids, token_type_ids=token_type_ids,
                              attention_mask=attention_mask).last_hidden_state  # (b, n, d)
        return self.span_logits(hidden, context_mask)

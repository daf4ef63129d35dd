"""The encoder block and stack, BERT-style (Lesson 4).

    H^(l) = Block(H^(l-1)),  l = 1..L,  with H^(0) from Embeddings.

Each block is bidirectional self-attention then a position-wise MLP, each
wrapped in a residual connection and a LayerNorm (after the sum as in BERT,
"post-LN", or before the sub-layer as in later models, "pre-LN").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from encoderlab import masks
from encoderlab.attention import MultiHeadAttention
from encoderlab.embeddings import Embeddings
from encoderlab.validate import check_heads

__all__ = [
    "EncoderConfig",
    "FeedForward",
    "EncoderBlock",
    "EncoderModel",
    "EncoderOutput",
    "count_parameters",
]


@dataclass
class EncoderConfig:
    """Sizes of an encoder. The defaults are all-MiniLM-L6-v2's."""

    vocab_size: int = 30522  # V: WordPiece vocabulary (Lesson 2)
    d_model: int = 384  # d: width of every token vector
    n_heads: int = 12  # h: attention heads per block, d_k = d / h
    n_layers: int = 6  # L: blocks in the stack
    d_ff: int = 1536  # hidden width of the MLP (4 d)
    n_max: int = 512  # learned positions: the longest input
    n_segments: int = 2  # segment ids s_i in {0, 1}
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1  # used only in training mode
    norm: str = "post"  # "post" (BERT) or "pre" (later models)
    pooler: bool = True  # BERT's tanh layer on [CLS]

    def __post_init__(self):
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', got {self.norm!r}.")
        check_heads(self.d_model, self.n_heads)


@dataclass
class EncoderOutput:
    """What the stack returns; mirrors the reference BertModel's output names."""

    last_hidden_state: torch.Tensor  # (b, n, d): H^(L)
    hidden_states: tuple[torch.Tensor, ...]  # L + 1 tensors (b, n, d): H^(0), ..., H^(L)
    attentions: tuple[torch.Tensor, ...] | None = None  # L tensors (b, h, n, n) when asked
    pooler_output: torch.Tensor | None = None  # (b, d): tanh(W h_[CLS] + b), if the model has it


class FeedForward(nn.Module):
    """The position-wise MLP, GELU(x W_1 + b_1) W_2 + b_2, for every token alone (Lesson 4, §3).

    ``w_1`` widens each token vector from d to d_ff (4d), ``w_2`` brings it back to d; the
    checkpoint calls them ``intermediate.dense`` and ``output.dense`` (``pretrained.NAME_MAP``).
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)  # up: d -> 4d
        self.activation = nn.GELU()  # the exact (erf) GELU, as BERT
        self.w_2 = nn.Linear(d_ff, d_model)  # down: 4d -> d

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., d) -> (..., d)
        return self.w_2(self.activation(self.w_1(x)))  # (..., d_ff) in between


class EncoderBlock(nn.Module):
    """Self-attention and MLP, each with a residual and a LayerNorm (Lesson 4, §2–§4)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.norm_position = config.norm
        self.attention = MultiHeadAttention(config.d_model, config.n_heads, dropout=config.dropout)
        self.norm_1 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.mlp = FeedForward(config.d_model, config.d_ff)
        self.norm_2 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None = None, need_weights=True):
        # h: (b, n, d); mask: bool, broadcastable to (b, h, n, n)
        if self.norm_position == "post":  # BERT: normalise after adding the residual
            a, weights = self.attention(h, mask=mask, need_weights=need_weights)
            h = self.norm_1(h + self.dropout(a))  # (b, n, d)
            h = self.norm_2(h + self.dropout(self.mlp(h)))  # (b, n, d)
        else:  # pre-LN: normalise the sub-layer's input, keep the residual path clean
            a, weights = self.attention(self.norm_1(h), mask=mask, need_weights=need_weights)
            h = h + self.dropout(a)  # (b, n, d)
            h = h + self.dropout(self.mlp(self.norm_2(h)))  # (b, n, d)
        return h, weights


class EncoderModel(nn.Module):
    """Embeddings, then L encoder blocks; the padding mask is the only mask (Lesson 3, §5).

    ``mask`` lets a lesson add a structural mask (for example ``masks.causal(n)``)
    to compare the encoder with a decoder built from the same parts.
    """

    def __init__(self, config: EncoderConfig | None = None):
        super().__init__()
        self.config = config = config or EncoderConfig()
        self.embeddings = Embeddings(
            config.vocab_size,
            config.d_model,
            config.n_max,
            config.n_segments,
            config.layer_norm_eps,
            config.dropout,
        )
        self.blocks = nn.ModuleList(EncoderBlock(config) for _ in range(config.n_layers))
        # Pre-LN stacks end with one more LayerNorm, since no block normalises its output.
        self.final_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
            if config.norm == "pre"
            else None
        )
        self.pooler = nn.Linear(config.d_model, config.d_model) if config.pooler else None

    def forward(
        self,
        input_ids: torch.Tensor,  # (b, n)
        token_type_ids: torch.Tensor | None = None,  # (b, n)
        attention_mask: torch.Tensor | None = None,  # (b, n): 1 = real token, 0 = [PAD]
        output_attentions: bool = False,
        mask: torch.Tensor | None = None,  # optional extra bool mask, e.g. masks.causal(n)
    ) -> EncoderOutput:
        h = self.embeddings(input_ids, token_type_ids)  # (b, n, d): H^(0)
        b, n = input_ids.shape
        if attention_mask is not None and tuple(attention_mask.shape) != (b, n):
            raise ValueError(
                f"attention_mask must have the shape of input_ids {(b, n)}, "
                f"got {tuple(attention_mask.shape)}."
            )
        parts = []
        if attention_mask is not None and not bool(attention_mask.all()):
            parts.append(masks.padding(attention_mask))  # a batch with no [PAD] needs no mask
        if mask is not None:
            masks.check_mask(mask, (b, self.config.n_heads, n, n))
            parts.append(mask.to(h.device))
        full_mask = masks.combine(*parts) if parts else None  # None: every key visible
        hidden_states, attentions = [h], []
        for block in self.blocks:
            h, weights = block(h, full_mask, output_attentions)  # (b, n, d), (b, h, n, n)
            hidden_states.append(h)
            attentions.append(weights)
        if self.final_norm is not None:
            h = self.final_norm(h)
            hidden_states[-1] = h
        pooled = torch.tanh(self.pooler(h[:, 0])) if self.pooler is not None else None  # (b, d)
        return EncoderOutput(
            last_hidden_state=h,
            hidden_states=tuple(hidden_states),
            attentions=tuple(attentions) if output_attentions else None,
            pooler_output=pooled,
        )


def count_parameters(config: EncoderConfig) -> int:
    """The number of parameters of EncoderModel(config), by formula (Lesson 4, §5)."""
    d, V, f, L = config.d_model, config.vocab_size, config.d_ff, config.n_layers
    embeddings = V * d + config.n_segments * d + config.n_max * d + 2 * d  # tables + LayerNorm
    attention = 4 * (d * d + d)  # W_Q, W_K, W_V, W_O with biases
    mlp = (d * f + f) + (f * d + d)  # up and down projections with biases
    block = attention + mlp + 2 * (2 * d)  # two LayerNorms (gain and bias)
    final_norm = 2 * d if config.norm == "pre" else 0
    pooler = d * d + d if config.pooler else 0
    return embeddings + L * block + final_norm + pooler

"""The encoder's input H^(0): token + segment + position, then LayerNorm (Lesson 2).

Each row of H^(0) knows which token it is, which segment it belongs to and
where it sits, but nothing yet about the other tokens; attention adds that.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Embeddings"]


class Embeddings(nn.Module):
    """H^(0) = LayerNorm(E_token[x_i] + E_segment[s_i] + E_position[i]) (Lesson 2, §4)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_max: int = 512,
        n_segments: int = 2,
        layer_norm_eps: float = 1e-12,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.vocab_size, self.n_max, self.n_segments = vocab_size, n_max, n_segments
        self.token = nn.Embedding(vocab_size, d_model)  # E_token: (V, d)
        self.segment = nn.Embedding(n_segments, d_model)  # E_segment: (2, d), s_i in {0, 1}
        self.position = nn.Embedding(n_max, d_model)  # learned absolute positions: (n_max, d)
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        input_ids: torch.Tensor,  # (b, n) token ids
        token_type_ids: torch.Tensor | None = None,  # (b, n) segment ids s_i
    ) -> torch.Tensor:
        _check_ids(input_ids, self.vocab_size, "input_ids", "the vocabulary size V")
        b, n = input_ids.shape
        if n > self.n_max:
            raise ValueError(
                f"The sequence has {n} tokens but the learned positions stop at "
                f"n_max={self.n_max}. "
                "Truncate it (tokenizer(..., truncation=True, max_length=512)) or split the text "
                "into chunks of at most n_max tokens."
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(
                f"token_type_ids must have the shape of input_ids {tuple(input_ids.shape)}, "
                f"got {tuple(token_type_ids.shape)}."
            )
        _check_ids(token_type_ids, self.n_segments, "token_type_ids", "the number of segments")
        positions = torch.arange(n, device=input_ids.device)  # (n,): 0, 1, ..., n-1
        # (b, n, d) + (b, n, d) + (n, d), the last broadcast over the batch
        h = self.token(input_ids) + self.segment(token_type_ids) + self.position(positions)
        return self.dropout(self.norm(h))  # (b, n, d): H^(0)


def _check_ids(ids: torch.Tensor, upper: int, name: str, what: str) -> None:
    """Out-of-range ids would crash deep inside torch; say what went wrong instead."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(
            f"{name} must be a 2-D tensor of shape (batch, n), got {got}. "
            "Use the tokenizer with return_tensors='pt', or add a batch dimension with [None]."
        )
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer ids (torch.long), got dtype {ids.dtype}.")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= upper):
        raise ValueError(
            f"{name} must lie in [0, {upper}) ({what}), got values from {int(ids.min())} to "
            f"{int(ids.max())}. Were these ids made with a different vocabulary or tokenizer?"
        )

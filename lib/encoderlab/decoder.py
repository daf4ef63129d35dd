"""The decoder side: causal self-attention, cross-attention, and greedy generation (Lesson 10).

An encoder–decoder model (T5, BART) reads the source once with a bidirectional
encoder, then writes the target left to right with a decoder whose blocks have
three sub-layers: causal self-attention over what it has written, cross-attention
from its positions (queries) onto the encoder's output (keys and values), and
the MLP. Pre-LN throughout, as in most recent models.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from encoderlab import masks
from encoderlab.attention import KVCache, MultiHeadAttention
from encoderlab.encoder import EncoderConfig, EncoderModel, FeedForward
from encoderlab.validate import check_int, check_positive_int

__all__ = [
    "EncoderDecoderConfig",
    "DecoderBlock",
    "EncoderDecoderModel",
    "Generation",
    "ablated_cross_attention",
]


@dataclass
class EncoderDecoderConfig:
    """Sizes of a small encoder–decoder; source and target share one vocabulary."""

    vocab_size: int = 32  # V, special ids included
    d_model: int = 64  # d
    n_heads: int = 4  # h, d_k = d / h
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    d_ff: int = 256  # MLP width (4 d)
    n_max: int = 64  # longest source and longest target
    dropout: float = 0.0
    pad_id: int = 0
    bos_id: int = 1  # the decoder's first input: "begin writing"
    eos_id: int = 2  # the decoder's last output: "done"

    def __post_init__(self):
        self.encoder_config()  # the encoder's sizes are checked where they are defined
        specials = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in specials.items():
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} must lie in [0, vocab_size={self.vocab_size}).")
        if len(set(specials.values())) != 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got {specials}.")

    def encoder_config(self) -> EncoderConfig:
        return EncoderConfig(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_encoder_layers,
            d_ff=self.d_ff,
            n_max=self.n_max,
            n_segments=1,
            layer_norm_eps=1e-5,
            dropout=self.dropout,
            norm="pre",
            pooler=False,
        )


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention onto the encoder, MLP; each pre-LN with a residual."""

    def __init__(self, config: EncoderDecoderConfig):
        super().__init__()
        d = config.d_model
        self.norm_1 = nn.LayerNorm(d)
        self.self_attention = MultiHeadAttention(d, config.n_heads, dropout=config.dropout)
        self.norm_2 = nn.LayerNorm(d)
        self.cross_attention = MultiHeadAttention(d, config.n_heads, dropout=config.dropout)
        self.norm_3 = nn.LayerNorm(d)
        self.mlp = FeedForward(d, config.d_ff)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        y: torch.Tensor,  # (b, t, d): the decoder's stream
        memory: torch.Tensor,  # (b, n_src, d): the encoder's output
        self_mask: torch.Tensor | None,  # bool (t_q, t_kv) or broadcastable: causal
        cross_mask: torch.Tensor | None,  # bool (b, 1, t, n_src) or (b, 1, 1, n_src)
        caches: tuple[KVCache, KVCache] | None = None,  # (self, cross) when generating
        need_weights: bool = False,
    ):
        self_cache, cross_cache = caches if caches is not None else (None, None)
        a, _ = self.self_attention(self.norm_1(y), mask=self_mask, cache=self_cache,
                                   need_weights=need_weights)
        y = y + self.dropout(a)  # (b, t, d)
        c, cross_weights = self.cross_attention(
            self.norm_2(y), context=memory, mask=cross_mask, cache=cross_cache,
            need_weights=need_weights,
        )  # queries from the decoder, keys and values from the encoder: A is (b, h, t, n_src)
        y = y + self.dropout(c)
        y = y + self.dropout(self.mlp(self.norm_3(y)))
        return y, cross_weights


@dataclass
class Generation:
    """What greedy decoding returns."""

    ids: torch.Tensor  # (b, t): generated tokens, bos excluded, pad after eos
    logits: torch.Tensor  # (b, t, V): the logits each token was chosen from
    cross_attentions: tuple[torch.Tensor, ...] | None = None  # per layer (b, h, t, n_src)


class EncoderDecoderModel(nn.Module):
    """A bidirectional encoder and a causal decoder joined by cross-attention (Lesson 10)."""

    def __init__(self, config: EncoderDecoderConfig | None = None):
        super().__init__()
        self.config = config = config or EncoderDecoderConfig()
        self.encoder = EncoderModel(config.encoder_config())
        self.token = nn.Embedding(config.vocab_size, config.d_model)  # the decoder's own table
        self.position = nn.Embedding(config.n_max, config.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)  # d -> V: next-token logits

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The source, read once and in both directions: (b, n_src, d)."""
        return self.encoder(src_ids, attention_mask=src_mask).last_hidden_state

    def decode(
        self,
        tgt_ids: torch.Tensor,  # (b, t): decoder inputs, starting with bos
        memory: torch.Tensor,  # (b, n_src, d)
        src_mask: torch.Tensor | None = None,  # (b, n_src)
        caches: list[tuple[KVCache, KVCache]] | None = None,
        need_weights: bool = False,
    ):
        """Logits for every target position (b, t, V), and the cross-attention weights if asked."""
        b, t = tgt_ids.shape
        start = len(caches[0][0]) if caches is not None else 0  # positions already cached
        if start + t > self.config.n_max:
            raise ValueError(
                f"The target would reach {start + t} positions, but the decoder's learned "
                f"positions stop at n_max={self.config.n_max}. Lower max_new_tokens."
            )
        positions = torch.arange(start, start + t, device=tgt_ids.device)  # (t,)
        y = self.token(tgt_ids) + self.position(positions)  # (b, t, d)
        # With a cache, the new queries see every cached key: causal is then automatic for t = 1.
        self_mask = masks.causal(t, device=y.device) if caches is None else None
        if caches is not None and t > 1:
            raise ValueError("With a cache, feed the decoder one new token at a time (t = 1).")
        cross_mask = masks.padding(src_mask) if src_mask is not None else None
        cross_weights = []
        for l, block in enumerate(self.blocks):
            y, weights = block(y, memory, self_mask, cross_mask,
                               caches[l] if caches is not None else None, need_weights)
            cross_weights.append(weights)
        return self.lm_head(self.final_norm(y)), tuple(cross_weights)

    def forward(self, src_ids, tgt_ids, src_mask=None):
        """Teacher forcing: logits (b, t, V) for the target inputs given the whole source."""
        logits, _ = self.decode(tgt_ids, self.encode(src_ids, src_mask), src_mask)
        return logits

    @torch.no_grad()
    def generate(
        self,
        src_ids: torch.Tensor,  # (b, n_src)
        src_mask: torch.Tensor | None = None,  # (b, n_src)
        max_new_tokens: int = 20,
        use_cache: bool = True,
        output_attentions: bool = False,
    ) -> Generation:
        """Greedy decoding: at each step append the most likely next token.

        With ``use_cache`` the decoder computes one new position per step and
        reuses the cached keys and values; without it, it reruns the whole prefix.
        """
        check_positive_int(max_new_tokens, "max_new_tokens")
        cfg = self.config
        memory = self.encode(src_ids, src_mask)  # read the source once
        b = src_ids.shape[0]
        inputs = torch.full((b, 1), cfg.bos_id, dtype=torch.long, device=src_ids.device)
        caches = [(KVCache(), KVCache()) for _ in self.blocks] if use_cache else None
        done = torch.zeros(b, dtype=torch.bool, device=src_ids.device)
        chosen, step_logits, step_weights = [], [], []
        for _ in range(max_new_tokens):
            new = inputs[:, -1:] if use_cache else inputs  # (b, 1) or (b, t)
            logits, weights = self.decode(new, memory, src_mask, caches, output_attentions)
            last = logits[:, -1]  # (b, V): the next token's logits
            token = last.argmax(dim=-1).masked_fill(done, cfg.pad_id)  # (b,)
            chosen.append(token)
            step_logits.append(last)
            if output_attentions:
                step_weights.append([w[:, :, -1:] for w in weights])  # (b, h, 1, n_src)
            done |= token == cfg.eos_id
            inputs = torch.cat([inputs, token[:, None]], dim=1)
            if bool(done.all()):
                break
        cross = None
        if output_attentions:
            cross = tuple(torch.cat([s[l] for s in step_weights], dim=2)
                          for l in range(len(self.blocks)))
        return Generation(torch.stack(chosen, 1), torch.stack(step_logits, 1), cross)


ABLATIONS = ("zero", "uniform", "last")


@contextmanager
def ablated_cross_attention(
    model: EncoderDecoderModel, block: int, mode: str = "zero"
) -> Iterator[EncoderDecoderModel]:
    """Inside the ``with``, replace one decoder block's cross-attention (Lesson 10, §6).

    An ablation: what does the model lose when this block can no longer choose where to read?
    ``mode`` says what the block's cross-attention returns instead of its learned read:

    - ``"zero"``: nothing; the sub-layer adds 0 to the residual stream;
    - ``"uniform"``: equal weight on every real source position, i.e. W_O applied to the mean
      of the source's values (what scores that ignore the query would give);
    - ``"last"``: all the weight on the last real source position (padding on the right).

    Everything else (the encoder, self-attention, the other blocks, the weights) is unchanged,
    and the block is restored on leaving the ``with``, also after an error.
    """
    if not isinstance(model, EncoderDecoderModel):
        raise ValueError(f"model must be an EncoderDecoderModel, got {type(model).__name__}.")
    n_blocks = len(model.blocks)
    check_int(block, "block", at_least=0, at_most=n_blocks - 1,
              what="decoder blocks count from 0")
    if mode not in ABLATIONS:
        raise ValueError(f"mode must be one of {ABLATIONS}, got {mode!r}.")
    attention = model.blocks[block].cross_attention

    def replace(module, args, kwargs, output):
        out, weights = output  # (b, n_q, d), (b, h, n_q, n_src) or None
        if mode == "zero":
            return torch.zeros_like(out), weights
        context = kwargs.get("context", args[1] if len(args) > 1 else None)  # (b, n_src, d)
        mask = kwargs.get("mask", args[2] if len(args) > 2 else None)
        b, n_src, _ = context.shape
        keep = torch.ones(b, n_src, dtype=torch.bool, device=out.device)
        if mask is not None:  # (b, 1, 1, n_src) padding mask: True = real position
            keep = mask.expand(b, 1, 1, n_src)[:, 0, 0]  # (b, n_src)
        if mode == "uniform":
            w = keep.float() / keep.sum(-1, keepdim=True).clamp(min=1)  # (b, n_src)
        else:  # "last": the highest real position
            index = torch.arange(n_src, device=out.device)
            last = torch.where(keep, index, -1).amax(-1)  # (b,)
            w = (index[None, :] == last[:, None]).float()  # (b, n_src): one-hot
        w = w.to(out.dtype)
        # Every head gets the same weights, so concatenating the heads' reads is w @ V: (b, 1, d)
        read = w[:, None, :] @ module.w_v(context)
        new_out = module.w_o(read).expand_as(out)  # (b, n_q, d): the same read for every query
        if weights is not None:
            weights = w[:, None, None, :].expand_as(weights)
        return new_out, weights

    handle = attention.register_forward_hook(replace, with_kwargs=True)
    try:
        yield model
    finally:
        handle.remove()

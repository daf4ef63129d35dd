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


# --- Lesson 1 ---
# Who predicts what, seeing what: the two objectives side by side on one sentence. This is a
# teaching view, not a training recipe: the masked positions are chosen by the caller. Lesson 5
# draws them at random (15 %, 80/10/10) and never picks [CLS], [SEP] or [PAD].

from dataclasses import dataclass  # noqa: E402

__all__ += ["ObjectiveView", "objective_view", "IGNORE_INDEX"]  # noqa: F405

IGNORE_INDEX = -100  # the label of a position that carries no loss (cross_entropy's default)


@dataclass(frozen=True)
class ObjectiveView:
    """One sentence under one objective: what each position predicts and sees (Lesson 1, §2).

    ``inputs`` (n,) are the ids the model reads (with [MASK] where the masked objective hid a
    token); ``labels`` (n,) the id each position is scored against, ``IGNORE_INDEX`` where it
    carries no loss; ``label_at`` (n,) the position that label comes from (t + 1 for next-token,
    t for masked, -1 for no loss); ``sees`` (n, n) bool, row t = the input positions that the
    prediction at t may read (True = may attend, as in :mod:`encoderlab.masks`).
    """

    objective: str
    inputs: torch.Tensor  # (n,) long
    labels: torch.Tensor  # (n,) long, IGNORE_INDEX where no loss
    label_at: torch.Tensor  # (n,) long, -1 where no loss
    sees: torch.Tensor  # (n, n) bool

    @property
    def carries_loss(self) -> torch.Tensor:
        """(n,) bool: the positions whose prediction is scored."""
        return self.labels != IGNORE_INDEX

    def leaks(self) -> torch.Tensor:
        """(n,) bool: positions whose label sits, unhidden, in a position they may see.

        A leak means the loss can be driven to zero by copying (Lesson 3, §3): the answer is an
        input. Under the right mask neither objective leaks.
        """
        t = torch.arange(len(self.labels))
        source = self.label_at.clamp(min=0)  # (n,): where each label comes from
        visible = self.sees[t, source]  # (n,): may t read that position?
        unhidden = self.inputs[source] == self.labels  # (n,): is the label still there?
        return self.carries_loss & visible & unhidden

    def table(self, id_to_token) -> str:
        """The view as text, one row per position; ``id_to_token`` maps an id list to tokens."""
        tokens = list(id_to_token(self.inputs.tolist()))
        targets = list(id_to_token(self.labels[self.carries_loss].tolist()))
        width = max(len(tok) for tok in tokens + targets + ["predicts"]) + 2
        lines = [f"{'t':>3}  {'input':<{width}}{'predicts':<{width}}sees"]
        for t, token in enumerate(tokens):
            if self.carries_loss[t]:
                target = id_to_token([int(self.labels[t])])[0]
                seen = self.sees[t].nonzero().flatten().tolist()
                span = f"positions {seen[0]}..{seen[-1]}" if seen == list(
                    range(seen[0], seen[-1] + 1)
                ) else f"positions {seen}"
                lines.append(f"{t:>3}  {token:<{width}}{target:<{width}}{span}")
            else:
                lines.append(f"{t:>3}  {token:<{width}}{'-':<{width}}(no loss)")
        return "\n".join(lines)


_OBJECTIVES = ("next-token", "masked")


def objective_view(
    input_ids,  # (n,): one sequence of token ids
    objective: str,  # "next-token" or "masked"
    masked_positions=(),  # for "masked": the positions to hide and predict
    mask_token_id: int | None = None,  # for "masked": the id of [MASK]
    mask: torch.Tensor | None = None,  # (n, n) bool; default: causal / bidirectional
) -> ObjectiveView:
    """Who predicts what, seeing what, under a decoder's or an encoder's objective (Lesson 1, §2).

    - ``"next-token"``: every position t < n - 1 predicts x_{t+1}; by default it sees x_{<=t}
      (the causal mask); the last position carries no loss.
    - ``"masked"``: the tokens at ``masked_positions`` are replaced by ``mask_token_id`` in the
      input, and only those positions carry a loss, each predicting its own original token; by
      default every position sees the whole corrupted sequence (no mask).

    ``mask`` replaces the default visibility, e.g. ``masks.bidirectional(n)`` with
    ``"next-token"`` to see the leak that Lesson 3, §3 trains on (:meth:`ObjectiveView.leaks`).
    """
    from encoderlab import masks  # here, not at the top: this block is appended to the module

    ids = torch.as_tensor(input_ids)
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(
            f"input_ids must be one sequence of integer token ids, shape (n,), got shape "
            f"{tuple(ids.shape)} and dtype {ids.dtype}. Pass enc['input_ids'][0] for a batch."
        )
    ids = ids.long()
    n = len(ids)
    if objective not in _OBJECTIVES:
        raise ValueError(
            f"objective must be one of {_OBJECTIVES}, got {objective!r}: 'next-token' is the "
            "decoder's objective, 'masked' the encoder's."
        )
    labels = torch.full((n,), IGNORE_INDEX, dtype=torch.long)
    label_at = torch.full((n,), -1, dtype=torch.long)
    inputs = ids.clone()
    if objective == "next-token":
        if n < 2:
            raise ValueError(f"next-token needs at least 2 tokens (an input and a label), got {n}.")
        if len(masked_positions):
            raise ValueError(
                "masked_positions is for the 'masked' objective; next-token hides nothing "
                f"in the input, got {list(masked_positions)}."
            )
        labels[:-1] = ids[1:]  # position t is scored against x_{t+1}
        label_at[:-1] = torch.arange(1, n)
        default = masks.causal(n)  # (n, n): t sees j <= t
    else:
        if mask_token_id is None:
            raise ValueError(
                "the 'masked' objective needs mask_token_id, the id of [MASK] "
                "(tokenizer.mask_token_id) to put in place of the hidden tokens."
            )
        chosen = sorted({int(p) for p in masked_positions})
        if not chosen or chosen[0] < 0 or chosen[-1] >= n:
            raise ValueError(
                f"masked_positions must name at least one position in 0..{n - 1}, "
                f"got {list(masked_positions)}."
            )
        where = torch.tensor(chosen)
        labels[where] = ids[where]  # each masked position predicts its own original token
        label_at[where] = where
        inputs[where] = int(mask_token_id)  # ... which is hidden from the input
        default = masks.bidirectional(n)  # (n, n): everyone sees the corrupted sequence
    if mask is None:
        mask = default
    elif not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != (n, n):
        got = (tuple(mask.shape), mask.dtype) if isinstance(mask, torch.Tensor) else type(mask)
        raise ValueError(
            f"mask must be a boolean (n, n) = {(n, n)} tensor (True = may attend), got {got}. "
            "Build it with encoderlab.masks, e.g. masks.causal(n)."
        )
    return ObjectiveView(objective, inputs, labels, label_at, mask.clone())


# --- Lesson 5 ---
# The masked-token objective: corrupt the input, score only the corrupted positions.

__all__ += ["mlm_corrupt", "mlm_loss", "BERT_MASK_ID"]  # noqa: F405

BERT_MASK_ID = 103  # [MASK] in BERT's (and MiniLM's) 30,522-token vocabulary


def _check_ids_and_mask(input_ids, attention_mask) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids)
        raise ValueError(f"input_ids must be a (batch, n) tensor of token ids, got {got}.")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}.")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        got = (
            tuple(attention_mask.shape)
            if isinstance(attention_mask, torch.Tensor)
            else type(attention_mask).__name__
        )
        raise ValueError(
            f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)} "
            f"(1 = real token, 0 = [PAD]), got {got}."
        )


def mlm_corrupt(
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n): 1 = real token, 0 = [PAD]
    special_ids,  # ids never chosen and never drawn as random tokens: [CLS], [SEP], [PAD], ...
    vocab_size: int,
    p: float = 0.15,
    generator: torch.Generator | None = None,
    *,
    mask_id: int = BERT_MASK_ID,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption: (inputs, labels) for the masked-token objective (Lesson 5, §1).

    Each real (attention_mask 1), non-special position is chosen independently with
    probability ``p``. A chosen position becomes ``mask_id`` with probability 0.8, a
    random ordinary token (never a special one) with probability 0.1, and keeps its
    token with probability 0.1. ``labels`` (b, n) holds the original token at chosen
    positions and ``IGNORE_INDEX`` (-100) elsewhere: the loss is taken there only.
    ``mask_id`` defaults to BERT's [MASK] (103); pass your own for another vocabulary.
    """
    _check_ids_and_mask(input_ids, attention_mask)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}.")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"p (the fraction of positions to choose) must be in (0, 1], got {p!r}.")
    special = sorted({int(i) for i in special_ids})
    if any(not 0 <= i < vocab_size for i in special):
        raise ValueError(f"special_ids must be ids below vocab_size={vocab_size}, got {special}.")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(
            f"mask_id must be an id below vocab_size={vocab_size}, got {mask_id}. "
            "Pass mask_id= the [MASK] id of your vocabulary."
        )
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab_size):
        raise ValueError(
            f"input_ids must lie in [0, vocab_size={vocab_size}), got ids from "
            f"{int(input_ids.min())} to {int(input_ids.max())}."
        )
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special] = False
    ordinary_ids = ordinary.nonzero().squeeze(1)  # (V_ordinary,): what a random token may be
    if len(ordinary_ids) == 0:
        raise ValueError("every id is special: there is no ordinary token to draw at random.")

    def uniform() -> torch.Tensor:
        return torch.rand(input_ids.shape, generator=generator, device=input_ids.device)

    eligible = (attention_mask != 0) & ~torch.isin(input_ids, torch.tensor(special))  # (b, n)
    chosen = eligible & (uniform() < p)  # (b, n): the positions that carry loss
    roll = uniform()  # (b, n): one draw decides [MASK] / random / unchanged
    to_mask = chosen & (roll < 0.8)
    to_random = chosen & (roll >= 0.8) & (roll < 0.9)  # the remaining 10 % stay as they are
    picks = torch.randint(
        len(ordinary_ids), input_ids.shape, generator=generator, device=input_ids.device
    )
    inputs = input_ids.clone()
    inputs[to_mask] = mask_id
    inputs[to_random] = ordinary_ids.to(input_ids.device)[picks[to_random]]
    labels = input_ids.masked_fill(~chosen, IGNORE_INDEX)  # noqa: F405
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at the chosen positions only, in nats (Lesson 5, §1).

    ``logits`` (b, n, V), ``labels`` (b, n) with ``IGNORE_INDEX`` where no loss is
    taken. A batch in which no position was chosen gives a loss of 0 with a
    gradient of 0 (no signal), rather than the NaN of a mean over nothing.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must have shape (batch, n, vocab_size), got {got}.")
    if not isinstance(labels, torch.Tensor) or tuple(labels.shape) != tuple(logits.shape[:2]):
        got = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
        raise ValueError(
            f"labels must have shape {tuple(logits.shape[:2])} to match the logits, got {got}."
        )
    scored = labels != IGNORE_INDEX  # noqa: F405
    if not scored.any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits[scored], labels[scored])

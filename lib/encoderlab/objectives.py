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
    from . import masks  # here, not at the top: this block is appended to the module

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

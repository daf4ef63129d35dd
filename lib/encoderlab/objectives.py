"""Training objectives and their losses: what a model is asked to predict (Lessons 1, 3, 5-7).

Every objective here turns a batch into labels, and every loss skips the positions labelled
:data:`IGNORE_INDEX`. In the order the course meets them:

- next-token prediction, the decoder's objective (:func:`next_token_loss`, Lesson 3, §3), and a
  side-by-side view of who predicts what, seeing what, under each objective
  (:func:`objective_view`, Lesson 1, §2);
- masked language modelling, the encoder's objective: BERT's 15 % corruption with 80/10/10
  (:func:`mlm_corrupt`) and its loss (:func:`mlm_loss`; :func:`mlm_model_loss` applies the
  model's output layer at the chosen positions only) (Lesson 5);
- the masking choices after BERT: whole words (:func:`whole_word_mask`) and contiguous spans
  of words (:func:`span_mask`, SpanBERT) (Lesson 6, §3);
- ELECTRA's replaced-token detection: the generator's samples in the input
  (:func:`replace_with_samples`), labels for every position (:func:`rtd_labels`) and their
  binary cross-entropy (:func:`rtd_loss`) (Lesson 6, §4);
- extractive question answering's loss over start and end positions (:func:`span_loss`,
  Lesson 7, §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.validate import check_fraction, check_int, check_positive_int, shape_of

__all__ = [
    "IGNORE_INDEX",
    "BERT_MASK_ID",
    "next_token_loss",
    "ObjectiveView",
    "objective_view",
    "mlm_corrupt",
    "mlm_loss",
    "mlm_model_loss",
    "word_ids",
    "whole_word_mask",
    "span_length_distribution",
    "span_mask",
    "replace_with_samples",
    "rtd_labels",
    "rtd_loss",
    "span_loss",
]

IGNORE_INDEX = -100  # the label of a position that carries no loss (cross_entropy's default)
BERT_MASK_ID = 103  # [MASK] in BERT's (and MiniLM's) 30,522-token vocabulary


# --- Next-token prediction (Lesson 3, §3) --------------------------------------------------------


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
        got = shape_of(logits)
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
        labels = labels.masked_fill(attention_mask[:, 1:] == 0, IGNORE_INDEX)
    return F.cross_entropy(
        predictions.reshape(-1, vocab_size),  # (b * (n-1), V)
        labels.reshape(-1),  # (b * (n-1),)
        ignore_index=IGNORE_INDEX,
    )


# --- Who predicts what, seeing what (Lesson 1, §2) -----------------------------------------------
# The two objectives side by side on one sentence. This is a teaching view, not a training
# recipe: the masked positions are chosen by the caller. Lesson 5 draws them at random (15 %,
# 80/10/10) and never picks [CLS], [SEP] or [PAD].


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


# --- Masked language modelling (Lesson 5) --------------------------------------------------------
# Corrupt the input, score only the corrupted positions.


def _check_ids_and_mask(input_ids, attention_mask) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids)
        raise ValueError(f"input_ids must be a (batch, n) tensor of token ids, got {got}.")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}.")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        got = shape_of(attention_mask)
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
    check_int(vocab_size, "vocab_size", at_least=2)
    check_fraction(p, "p (the fraction of positions to choose)", open_low=True)
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
    labels = input_ids.masked_fill(~chosen, IGNORE_INDEX)
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at the chosen positions only, in nats (Lesson 5, §1).

    ``logits`` (b, n, V), ``labels`` (b, n) with ``IGNORE_INDEX`` where no loss is
    taken. A batch in which no position was chosen gives a loss of 0 with a
    gradient of 0 (no signal), rather than the NaN of a mean over nothing.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        got = shape_of(logits)
        raise ValueError(f"logits must have shape (batch, n, vocab_size), got {got}.")
    if not isinstance(labels, torch.Tensor) or tuple(labels.shape) != tuple(logits.shape[:2]):
        got = shape_of(labels)
        raise ValueError(
            f"labels must have shape {tuple(logits.shape[:2])} to match the logits, got {got}."
        )
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits[scored], labels[scored])


def mlm_model_loss(model, inputs, attention_mask, labels):
    """(loss, logits): the MLM loss of ``model`` with its head applied at the labelled positions
    only, as BERT's implementation does (Lessons 5-6). ``logits`` is (k, V) for the k
    labelled positions, in row-major order. The loss equals
    ``mlm_loss(model(inputs, attention_mask), labels)`` without scoring the other positions."""
    h = model.encode(inputs, attention_mask).last_hidden_state  # (b, n, d)
    chosen = labels != IGNORE_INDEX  # (b, n)
    logits = model.head(h[chosen])  # (k, V)
    return mlm_loss(logits[None], labels[chosen][None]), logits


# --- Whole-word and span masking (Lesson 6, §3) --------------------------------------------------


def _check_tokens(tokens) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not tokens:
        raise ValueError(
            "tokens must be the vocabulary as a list of strings, id -> token (e.g. "
            f"vocab.tokens of a CompactVocab), got {type(tokens).__name__}."
        )
    return list(tokens)


def word_ids(
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n)
    tokens: Sequence[str],  # the vocabulary: tokens[id] is the piece's text
    special_ids,
) -> torch.Tensor:
    """(b, n) the index of the word each piece belongs to, counted from 0 in each row; -1 at
    special tokens and padding (Lesson 6, §3).

    A word starts at a piece that does not begin with ``##``; a ``##`` piece belongs to the word
    of the piece before it (WordPiece's continuation marker, Lesson 2).
    """
    tokens = _check_tokens(tokens)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("input_ids must be a (batch, n) tensor of token ids.")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask must have the shape of input_ids "
                         f"{tuple(input_ids.shape)}.")
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= len(tokens)):
        raise ValueError(
            f"input_ids must lie in [0, {len(tokens)}) to be looked up in tokens, got ids from "
            f"{int(input_ids.min())} to {int(input_ids.max())}."
        )
    continuation = torch.tensor([t.startswith("##") for t in tokens])  # (V,)
    ordinary = (attention_mask != 0) & ~torch.isin(input_ids, torch.tensor(sorted(special_ids)))
    starts = ordinary & ~continuation[input_ids]  # (b, n): a piece that starts a word
    ids = starts.long().cumsum(dim=1) - 1  # (b, n): word index of the latest start
    return ids.masked_fill(~ordinary, -1)


def whole_word_mask(
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n)
    tokens: Sequence[str],
    special_ids,
    p: float = 0.15,
    generator: torch.Generator | None = None,
    *,
    mask_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-word masking: choose words, not pieces; corrupt every piece of a chosen word.

    (Lesson 6, §3.) Each word (:func:`word_ids`) is chosen independently with probability
    ``p``, so a token is chosen with probability ``p`` as before, but the pieces of one word
    are chosen together: "over ##flow ##ed" is never predicted from "over [MASK] ##ed". The
    chosen pieces get BERT's 80/10/10 one by one, as in Google's release of whole-word
    masking, by :func:`encoderlab.objectives.mlm_corrupt` run with ``p=1`` on the chosen
    positions only. Returns (inputs, labels) like ``mlm_corrupt``.
    """
    tokens = _check_tokens(tokens)
    check_fraction(p, "p (the fraction of words to choose)", open_low=True)
    words = word_ids(input_ids, attention_mask, tokens, special_ids)  # (b, n)
    b = input_ids.shape[0]
    n_words = int(words.max()) + 1 if words.numel() else 0
    picked = torch.rand((b, max(n_words, 1)), generator=generator) < p  # (b, words)
    chosen = (words >= 0) & picked.gather(1, words.clamp(min=0))  # (b, n)
    return mlm_corrupt(input_ids, chosen.long(), special_ids, len(tokens), 1.0,
                       generator=generator, mask_id=mask_id)


def span_length_distribution(geometric_p: float = 0.2, max_span: int = 10) -> torch.Tensor:
    """(max_span,) P(length = 1..max_span): a geometric distribution cut at ``max_span`` and
    renormalised, SpanBERT's span lengths in words (Lesson 6, §3). Mean 3.8 for (0.2, 10)."""
    check_fraction(geometric_p, "geometric_p", open_low=True)
    check_positive_int(max_span, "max_span")
    lengths = torch.arange(1, max_span + 1, dtype=torch.float64)
    probs = geometric_p * (1 - geometric_p) ** (lengths - 1)
    return probs / probs.sum()


def span_mask(
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n)
    tokens: Sequence[str],
    special_ids,
    p: float = 0.15,
    generator: torch.Generator | None = None,
    *,
    mask_id: int,
    geometric_p: float = 0.2,
    max_span: int = 10,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SpanBERT's masking: contiguous spans of whole words until ~``p`` of the tokens are chosen.

    (Lesson 6, §3.) For each sequence the budget is ``round(p * ordinary tokens)`` (at least
    1). Repeatedly: draw a span length in words from :func:`span_length_distribution`, a
    starting word uniformly, and choose the span's words that are not chosen yet, dropping
    words from its end while it would exceed the budget. Stop when the budget is met (or when
    nothing more fits). As in SpanBERT, the 80/10/10 decision is made per *span*: all its
    pieces become [MASK], all become random ordinary tokens, or all stay. Returns (inputs,
    labels) like :func:`encoderlab.objectives.mlm_corrupt`.
    """
    tokens = _check_tokens(tokens)
    check_fraction(p, "p (the fraction of tokens to choose)", open_low=True)
    lengths = span_length_distribution(geometric_p, max_span)  # (max_span,)
    vocab_size = len(tokens)
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id must be an id below {vocab_size}, got {mask_id}.")
    words = word_ids(input_ids, attention_mask, tokens, special_ids)  # (b, n)
    special = sorted({int(i) for i in special_ids})
    ordinary_ids = torch.tensor([i for i in range(vocab_size) if i not in special])
    inputs, labels = input_ids.clone(), torch.full_like(input_ids, IGNORE_INDEX)
    for row in range(input_ids.shape[0]):
        w = words[row].tolist()
        n_words = max(w) + 1
        if n_words <= 0:
            continue
        positions: list[list[int]] = [[] for _ in range(n_words)]  # the pieces of each word
        for i, k in enumerate(w):
            if k >= 0:
                positions[k].append(i)
        budget = max(1, round(p * sum(len(ps) for ps in positions)))
        taken: set[int] = set()
        used, misses = 0, 0
        while used < budget and misses < 10 * budget:
            length = int(torch.multinomial(lengths, 1, generator=generator)) + 1
            start = int(torch.randint(n_words, (1,), generator=generator))
            span = [k for k in range(start, min(start + length, n_words)) if k not in taken]
            while span and used + sum(len(positions[k]) for k in span) > budget:
                span.pop()
            if not span:
                misses += 1
                continue
            where = torch.tensor([i for k in span for i in positions[k]])  # the span's pieces
            taken.update(span)
            used += len(where)
            labels[row, where] = input_ids[row, where]
            roll = torch.rand(1, generator=generator).item()  # one decision for the span
            if roll < 0.8:
                inputs[row, where] = mask_id
            elif roll < 0.9:
                picks = torch.randint(len(ordinary_ids), (len(where),), generator=generator)
                inputs[row, where] = ordinary_ids[picks]
    return inputs, labels


# --- Replaced-token detection, ELECTRA (Lesson 6, §4) --------------------------------------------


def replace_with_samples(
    input_ids: torch.Tensor,  # (b, n): the original tokens
    labels: torch.Tensor,  # (b, n): the generator's MLM labels, IGNORE_INDEX where not masked
    generator_logits: torch.Tensor,  # (b, n, V), or (k, V) for the k masked positions in order
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The discriminator's input: the original tokens, with a *sample* from the generator at
    every masked position (Lesson 6, §4).

    ELECTRA samples (it does not take the argmax), and no gradient flows through the sample:
    the discriminator's loss does not train the generator. A masked position keeps IGNORE_INDEX
    in ``labels`` nowhere else, so the sample replaces exactly the positions with a label.
    Returns (b, n) ids.
    """
    if not isinstance(labels, torch.Tensor) or labels.shape != input_ids.shape:
        raise ValueError(f"labels must have the shape of input_ids {tuple(input_ids.shape)}.")
    masked = labels != IGNORE_INDEX  # (b, n)
    k = int(masked.sum())
    logits = generator_logits.detach()
    if logits.dim() == 3 and logits.shape[:2] == input_ids.shape:
        logits = logits[masked]  # (k, V)
    if logits.dim() != 2 or logits.shape[0] != k:
        raise ValueError(
            f"generator_logits must be (b, n, V) = {(*input_ids.shape, 'V')} or (k, V) with "
            f"k = {k} masked positions, got {tuple(generator_logits.shape)}."
        )
    corrupted = input_ids.clone()
    if k:
        probs = torch.softmax(logits.float(), dim=-1)  # (k, V)
        corrupted[masked] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return corrupted


def rtd_labels(
    input_ids: torch.Tensor,  # (b, n): the original tokens
    corrupted_ids: torch.Tensor,  # (b, n): what the discriminator reads
    attention_mask: torch.Tensor,  # (b, n)
) -> torch.Tensor:
    """(b, n) replaced-token-detection labels: 1 = replaced, 0 = original, IGNORE_INDEX at
    padding (Lesson 6, §4).

    Every real position carries a label, [CLS] and [SEP] included (they are never replaced).
    A masked position where the generator happened to sample the original token counts as
    *original*, as in ELECTRA: the label says whether the token differs, not whether it was
    masked.
    """
    if not (isinstance(corrupted_ids, torch.Tensor) and corrupted_ids.shape == input_ids.shape
            and isinstance(attention_mask, torch.Tensor)
            and attention_mask.shape == input_ids.shape):
        raise ValueError(
            f"input_ids, corrupted_ids and attention_mask must have one shape, got "
            f"{tuple(input_ids.shape)}, {tuple(getattr(corrupted_ids, 'shape', ()))} and "
            f"{tuple(getattr(attention_mask, 'shape', ()))}."
        )
    replaced = (corrupted_ids != input_ids).long()  # (b, n)
    return replaced.masked_fill(attention_mask == 0, IGNORE_INDEX)


def rtd_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the discriminator's logits (b, n) against :func:`rtd_labels`,
    averaged over the labelled positions, in nats (Lesson 6, §4)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape != labels.shape:
        got = shape_of(logits)
        raise ValueError(
            f"logits must be (batch, n) = {tuple(labels.shape)}, one score per position, got "
            f"{got}. Squeeze the last axis of a (b, n, 1) output."
        )
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return logits.sum() * 0.0
    return F.binary_cross_entropy_with_logits(logits[scored], labels[scored].float())


# --- Extractive question answering (Lesson 7, §5) ------------------------------------------------


def span_loss(start_logits, end_logits, starts, ends) -> torch.Tensor:
    """The mean of the cross-entropies of the gold start and gold end positions (Lesson 7, §5)."""
    return (F.cross_entropy(start_logits, starts) + F.cross_entropy(end_logits, ends)) / 2

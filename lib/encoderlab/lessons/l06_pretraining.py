"""Pretraining recipes beyond BERT's masked language modelling (Lesson 6).

Lesson 5 trained an encoder with BERT's objective: choose 15 % of the tokens, corrupt them
80/10/10, predict them. The models after BERT kept the idea and changed the recipe:

- **sentence pairs** (§1): BERT's next-sentence prediction (:func:`nsp_pairs`), which RoBERTa
  dropped, and ALBERT's sentence-order prediction (:func:`sop_pairs`);
- **when the mask is drawn** (§2): once per sentence (static) or at every epoch (dynamic,
  RoBERTa) — :func:`epoch_masks`;
- **what is masked** (§3): whole words (:func:`whole_word_mask`) and contiguous spans of words
  (:func:`span_mask`, SpanBERT) instead of independent pieces;
- **what is predicted** (§4): ELECTRA's replaced-token detection, where a small generator fills
  the masked positions (:func:`replace_with_samples`) and a discriminator labels *every*
  position original or replaced (:func:`rtd_labels`, :class:`Electra`);
- **how to compare them** (§5-§6): the positions that carry loss (:func:`signal_fraction`),
  training FLOPs by formula (:func:`forward_flops`), whether the discriminator learned more than
  a constant guess or a context-free look-up of the token (:func:`constant_guess_bce`,
  :func:`roc_auc`, :func:`token_replaced_rate`), and a frozen-encoder linear probe on a small
  task built from the corpus (:func:`source_task`, :func:`linear_probe`).

The two pretraining runs of §6 take minutes, so they are recipes of the artefact command
(``python -m encoderlab train l6-mlm`` / ``l6-rtd``); the lesson loads what they saved.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab import data
from encoderlab.course.stats import sign_test
from encoderlab.encoder import EncoderConfig, EncoderModel, EncoderOutput
from encoderlab.heads import TinyLM, pool
from encoderlab.lessons.l05_mlm import masked_positions_loss
from encoderlab.objectives import IGNORE_INDEX, mlm_corrupt

__all__ = [
    "SentencePair",
    "nsp_pairs",
    "sop_pairs",
    "encode_pairs",
    "word_overlap",
    "overlap_shortcut_accuracy",
    "epoch_masks",
    "distinct_masks",
    "word_ids",
    "whole_word_mask",
    "span_length_distribution",
    "span_mask",
    "continuation_accuracy",
    "replace_with_samples",
    "rtd_labels",
    "rtd_loss",
    "TokenDiscriminator",
    "Electra",
    "ProjectedEmbeddings",
    "TiedGeneratorHead",
    "masked_positions_loss",
    "constant_guess_bce",
    "roc_auc",
    "token_replaced_rate",
    "disc_weight_effect",
    "corruption_kinds",
    "rtd_kinds",
    "signal_fraction",
    "forward_flops",
    "ProbeTask",
    "reference_sentences",
    "source_task",
    "encoder_features",
    "linear_probe",
    "corpus_and_vocab",
    "ENCODER_SIZES",
    "GENERATOR_SIZES",
    "RECIPES",
]


# --- §1 Sentence pairs: NSP (BERT) and SOP (ALBERT) ----------------------------------------------


@dataclass(frozen=True)
class SentencePair:
    """Two sentences and a binary label (Lesson 6, §1).

    For NSP, ``label`` 1 = IsNext (``second`` follows ``first`` in the corpus), 0 = NotNext
    (``second`` is a random sentence). For SOP, 1 = in order, 0 = the same two sentences swapped.
    """

    first: str
    second: str
    label: int


def _check_sentences(sentences, at_least: int) -> list[str]:
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise ValueError(
            f"sentences must be a list of strings in corpus order, got {type(sentences).__name__}."
        )
    if len(sentences) < at_least:
        raise ValueError(
            f"need at least {at_least} sentences to make pairs, got {len(sentences)}. "
            "Pass a corpus, e.g. python_docs_corpus().train."
        )
    if not all(isinstance(s, str) for s in sentences):
        raise ValueError("sentences must all be strings.")
    return list(sentences)


def nsp_pairs(sentences: Sequence[str], seed: int = 0) -> list[SentencePair]:
    """BERT's next-sentence-prediction pairs: 50 % IsNext, 50 % NotNext (Lesson 6, §1).

    "Next" means *the following sentence in corpus order*: pair ``i`` starts with sentence
    ``i`` and, with probability 1/2, continues with sentence ``i + 1`` (label 1); otherwise with
    a sentence drawn uniformly from the rest of the corpus, never ``i`` or ``i + 1`` (label 0).
    :func:`encoderlab.data.python_docs_sentences` keeps document order, so a true next sentence
    mostly comes from the same paragraph, while a random one mostly comes from another topic.
    One pair per sentence except the last: ``len(sentences) - 1`` pairs.
    """
    sentences = _check_sentences(sentences, 3)
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for i in range(len(sentences) - 1):
        if torch.rand(1, generator=g).item() < 0.5:
            pairs.append(SentencePair(sentences[i], sentences[i + 1], 1))
        else:
            j = int(torch.randint(len(sentences) - 2, (1,), generator=g))
            j = j if j < i else j + 2  # skip i and i + 1
            pairs.append(SentencePair(sentences[i], sentences[j], 0))
    return pairs


def sop_pairs(sentences: Sequence[str], seed: int = 0) -> list[SentencePair]:
    """ALBERT's sentence-order-prediction pairs: consecutive sentences, half swapped (Lesson 6, §1).

    Pair ``i`` holds sentences ``i`` and ``i + 1``: in order with probability 1/2 (label 1), or
    swapped (label 0). Both classes contain the same sentences, so the topic tells nothing;
    only the order does. ``len(sentences) - 1`` pairs.
    """
    sentences = _check_sentences(sentences, 2)
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for a, b in zip(sentences[:-1], sentences[1:]):
        if torch.rand(1, generator=g).item() < 0.5:
            pairs.append(SentencePair(a, b, 1))
        else:
            pairs.append(SentencePair(b, a, 0))
    return pairs


def encode_pairs(
    vocab: data.CompactVocab, pairs: Sequence[SentencePair], max_length: int = 64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[CLS] A [SEP] B [SEP]`` for each pair: (input_ids, token_type_ids, attention_mask, labels).

    (Lesson 6, §1.) Each of the first three is (b, n), padded to the longest pair; segment id 0
    covers ``[CLS] A [SEP]`` and 1 covers ``B [SEP]`` (Lesson 2). Pairs longer than
    ``max_length`` lose pieces from the end of the longer sentence first. ``labels`` is (b,).
    """
    if not pairs or not all(isinstance(p, SentencePair) for p in pairs):
        raise ValueError("pairs must be a non-empty list of SentencePair (from nsp_pairs or "
                         "sop_pairs).")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 5:
        raise ValueError(f"max_length must be an int >= 5 ([CLS], [SEP] twice and a piece of "
                         f"each sentence), got {max_length!r}.")
    rows, segments = [], []
    for pair in pairs:
        a = [vocab.index.get(t, vocab.unk_id) for t in vocab.tokenizer.tokenize(pair.first)]
        b = [vocab.index.get(t, vocab.unk_id) for t in vocab.tokenizer.tokenize(pair.second)]
        while len(a) + len(b) > max_length - 3:  # longest first, as BERT truncates pairs
            (a if len(a) >= len(b) else b).pop()
        rows.append([vocab.cls_id, *a, vocab.sep_id, *b, vocab.sep_id])
        segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
    n = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), n), vocab.pad_id, dtype=torch.long)  # (b, n)
    token_type_ids = torch.zeros((len(rows), n), dtype=torch.long)  # (b, n)
    attention_mask = torch.zeros((len(rows), n), dtype=torch.long)  # (b, n)
    for i, (row, seg) in enumerate(zip(rows, segments)):
        input_ids[i, : len(row)] = torch.tensor(row)
        token_type_ids[i, : len(seg)] = torch.tensor(seg)
        attention_mask[i, : len(row)] = 1
    labels = torch.tensor([p.label for p in pairs])  # (b,)
    return input_ids, token_type_ids, attention_mask, labels


def _words(text: str) -> set[str]:
    return {w.strip(".,;:()'\"!?").lower() for w in text.split()} - {""}


def word_overlap(first: str, second: str) -> float:
    """Jaccard overlap of the two sentences' sets of lower-cased words, in [0, 1] (Lesson 6, §1)."""
    a, b = _words(first), _words(second)
    return len(a & b) / max(1, len(a | b))


def overlap_shortcut_accuracy(pairs: Sequence[SentencePair]) -> float:
    """Held-out accuracy of "label 1 iff word overlap > t", a classifier that reads topic only.

    (Lesson 6, §1.) The threshold ``t`` is fitted on the even-indexed pairs (the best of all
    observed overlaps) and the accuracy is measured on the odd-indexed ones. Near 0.5 means
    the pairs cannot be told apart by shared vocabulary; well above 0.5, they can.
    """
    if len(pairs) < 4:
        raise ValueError(f"need at least 4 pairs (2 to fit, 2 to test), got {len(pairs)}.")
    overlap = torch.tensor([word_overlap(p.first, p.second) for p in pairs])
    labels = torch.tensor([p.label for p in pairs])
    fit, test = slice(0, None, 2), slice(1, None, 2)
    candidates = overlap[fit].unique()  # (c,)
    fit_accuracy = ((overlap[fit][None, :] > candidates[:, None]) == labels[fit][None, :].bool())
    best = candidates[fit_accuracy.float().mean(dim=1).argmax()]
    return ((overlap[test] > best) == labels[test].bool()).float().mean().item()


# --- §2 Static and dynamic masking (RoBERTa) -----------------------------------------------------


def epoch_masks(
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n)
    special_ids,
    vocab_size: int,
    epochs: int,
    dynamic: bool = True,
    duplicates: int = 1,
    p: float = 0.15,
    seed: int = 0,
    *,
    mask_id: int,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (inputs, labels) that each of ``epochs`` passes over the data would train on.

    (Lesson 6, §2.) Every draw is :func:`encoderlab.objectives.mlm_corrupt` with its own seed.
    Dynamic masking (RoBERTa) draws a fresh mask at every epoch: draw ``e`` at epoch ``e``.
    Static masking draws the masks once, when the data set is written: ``duplicates`` copies
    of it, each with its own mask, cycled through (draw ``e % duplicates``). BERT wrote 10
    copies and trained 40 epochs, so each mask was seen 4 times; ``duplicates=1`` is the plain
    static case, the same mask every epoch.
    """
    for name, value in (("epochs", epochs), ("duplicates", duplicates)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    if not dynamic and duplicates > epochs:
        raise ValueError(
            f"static masking with duplicates={duplicates} > epochs={epochs} would never reach "
            "some copies; use at most as many duplicates as epochs."
        )
    if dynamic and duplicates != 1:
        raise ValueError(
            "duplicates is for static masking (a fixed set of pre-drawn masks); dynamic masking "
            f"draws a new mask every epoch. Pass dynamic=False or duplicates=1, got {duplicates}."
        )
    draws = []
    for epoch in range(epochs):
        k = epoch if dynamic else epoch % duplicates
        g = torch.Generator().manual_seed(seed * 1_000_003 + k)
        draws.append(mlm_corrupt(input_ids, attention_mask, special_ids, vocab_size, p,
                                 generator=g, mask_id=mask_id))
    return draws


def distinct_masks(draws: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """(b,) how many different sets of chosen positions each sequence saw over ``draws``.

    (Lesson 6, §2.) Two draws count as the same mask when they choose the same positions.
    """
    if not draws:
        raise ValueError("draws must hold at least one (inputs, labels) pair from epoch_masks.")
    chosen = torch.stack([labels != IGNORE_INDEX for _, labels in draws], dim=1)  # (b, E, n)
    return torch.tensor([len({tuple(row.tolist()) for row in seq}) for seq in chosen])


# --- §3 Whole-word and span masking --------------------------------------------------------------


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
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"p (the fraction of words to choose) must be in (0, 1], got {p!r}.")
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
    if isinstance(geometric_p, bool) or not isinstance(geometric_p, (int, float)) \
            or not 0.0 < geometric_p <= 1.0:
        raise ValueError(f"geometric_p must be in (0, 1], got {geometric_p!r}.")
    if isinstance(max_span, bool) or not isinstance(max_span, int) or max_span < 1:
        raise ValueError(f"max_span must be a positive int, got {max_span!r}.")
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
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"p (the fraction of tokens to choose) must be in (0, 1], got {p!r}.")
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


@torch.no_grad()
def continuation_accuracy(
    model: TinyLM,
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n)
    tokens: Sequence[str],
    special_ids,
    mask_id: int,
) -> dict[str, float]:
    """How well an MLM model predicts a ``##`` piece with and without the rest of its word in
    view (Lesson 6, §3).

    For every continuation piece of every sequence, two inputs are made: only that piece
    replaced by [MASK] ("piece alone"), or every piece of its word replaced ("whole word").
    Returns the top-1 accuracy at that piece in each case, and the number of pieces tested.
    """
    words = word_ids(input_ids, attention_mask, tokens, special_ids)  # (b, n)
    continuation = torch.tensor([t.startswith("##") for t in _check_tokens(tokens)])
    rows, cols = ((words >= 0) & continuation[input_ids]).nonzero(as_tuple=True)  # (k,), (k,)
    if len(rows) == 0:
        raise ValueError("no continuation ('##') piece in input_ids: nothing to test.")
    ids, am = input_ids[rows], attention_mask[rows]  # (k, n): one copy per tested piece
    target = ids[torch.arange(len(rows)), cols]  # (k,)
    alone = ids.clone()
    alone[torch.arange(len(rows)), cols] = mask_id
    same_word = words[rows] == words[rows, cols][:, None]  # (k, n)
    whole = ids.masked_fill(same_word, mask_id)
    result = {"pieces": float(len(rows))}
    for name, inputs in (("piece alone", alone), ("whole word", whole)):
        logits = model(inputs, am)[torch.arange(len(rows)), cols]  # (k, V)
        result[name] = (logits.argmax(dim=-1) == target).float().mean().item()
    return result


# --- §4 Replaced-token detection (ELECTRA) -------------------------------------------------------


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
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"logits must be (batch, n) = {tuple(labels.shape)}, one score per position, got "
            f"{got}. Squeeze the last axis of a (b, n, 1) output."
        )
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return logits.sum() * 0.0
    return F.binary_cross_entropy_with_logits(logits[scored], labels[scored].float())


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


class ProjectedEmbeddings(nn.Module):
    """The discriminator's embeddings, projected to the generator's width (Lesson 6, §4).

    ELECTRA shares the embeddings (token, position and segment tables and their LayerNorm)
    between its two networks; when the generator is narrower, it reads the shared d_disc-wide
    H^(0) through one linear map to its own width, as the reference implementation does.
    """

    def __init__(self, shared: nn.Module, d_shared: int, d_model: int):
        super().__init__()
        self.shared = shared  # the discriminator's Embeddings module itself, not a copy
        self.project = nn.Linear(d_shared, d_model)  # (d_disc,) -> (d_gen,)

    def forward(self, input_ids, token_type_ids=None) -> torch.Tensor:
        return self.project(self.shared(input_ids, token_type_ids))  # (b, n, d_gen)


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


class Electra(nn.Module):
    """A small MLM generator and a discriminator, trained together (Lesson 6, §4).

    ``losses(...)`` runs one ELECTRA step's forward: choose positions and replace them by
    [MASK] (BERT's choice of positions, :func:`~encoderlab.objectives.mlm_corrupt`; ELECTRA
    masks every chosen position), let the generator predict them (MLM loss), put its samples
    in the original sequence (:func:`replace_with_samples`), and score the discriminator on
    every real position (:func:`rtd_loss`). The training loss is
    ``generator_loss + disc_weight * discriminator_loss`` (ELECTRA uses 50).

    ``share_embeddings=True`` (ELECTRA's choice, Clark et al. 2020, §3.2) gives the generator
    the discriminator's embedding module (:class:`ProjectedEmbeddings`) and ties its output
    layer to the shared token table (:class:`TiedGeneratorHead`). Then, and only then, the
    weight λ matters to an optimiser like Adam: the shared parameters receive the sum of both
    losses' gradients, and λ sets their mix. Without sharing, each parameter gets one loss's
    gradient, and Adam's update does not change when a loss is multiplied by a constant.
    After training the generator is thrown away and the discriminator is the encoder kept.
    """

    def __init__(self, generator_config: EncoderConfig, discriminator_config: EncoderConfig,
                 share_embeddings: bool = False):
        super().__init__()
        if generator_config.vocab_size != discriminator_config.vocab_size:
            raise ValueError(
                "the generator and the discriminator must share one vocabulary, got vocab_size "
                f"{generator_config.vocab_size} and {discriminator_config.vocab_size}."
            )
        if share_embeddings and (generator_config.n_max != discriminator_config.n_max
                                 or generator_config.n_segments
                                 != discriminator_config.n_segments):
            raise ValueError(
                "shared embeddings need one n_max and one n_segments in both configs, got "
                f"n_max {generator_config.n_max} / {discriminator_config.n_max} and n_segments "
                f"{generator_config.n_segments} / {discriminator_config.n_segments}."
            )
        self.share_embeddings = bool(share_embeddings)
        self.generator = TinyLM(generator_config, causal=False)
        self.discriminator = TokenDiscriminator(discriminator_config)
        if self.share_embeddings:
            shared = self.discriminator.encoder.embeddings
            self.generator.encoder.embeddings = ProjectedEmbeddings(
                shared, discriminator_config.d_model, generator_config.d_model)
            self.generator.head = TiedGeneratorHead(generator_config.d_model, shared.token,
                                                    generator_config.layer_norm_eps)

    def losses(self, input_ids, attention_mask, special_ids, mask_id: int, p: float = 0.15,
               rng: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        vocab_size = self.generator.config.vocab_size
        _, labels = mlm_corrupt(input_ids, attention_mask, special_ids, vocab_size, p,
                                generator=rng, mask_id=mask_id)
        masked_inputs = input_ids.masked_fill(labels != IGNORE_INDEX, mask_id)  # all [MASK]
        generator_loss, logits = masked_positions_loss(self.generator, masked_inputs,
                                                       attention_mask, labels)
        corrupted = replace_with_samples(input_ids, labels, logits, generator=rng)
        targets = rtd_labels(input_ids, corrupted, attention_mask)
        disc_logits = self.discriminator(corrupted, attention_mask)  # (b, n)
        return {
            "generator_loss": generator_loss,
            "discriminator_loss": rtd_loss(disc_logits, targets),
            "corrupted": corrupted,
            "labels": targets,
            "mlm_labels": labels,
            "discriminator_logits": disc_logits.detach(),
        }


def constant_guess_bce(rate: float) -> float:
    """The binary cross-entropy, in nats, of always predicting P(replaced) = ``rate`` on labels
    whose share of ones is ``rate``: the entropy H(rate), the loss of a discriminator that
    learned the base rate and nothing else (Lesson 6, §6)."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate < 1.0:
        raise ValueError(f"rate must be a share of replaced positions in (0, 1), got {rate!r}.")
    return -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """The area under the ROC curve (Lesson 6, §6): the probability that a random position
    labelled 1 gets a higher score than a random position labelled 0, ties counting one half.
    0.5 is a score that knows nothing, 1.0 a perfect ranking. ``scores`` and ``labels`` are
    1-d, of one length; computed from ranks (the Mann-Whitney U statistic)."""
    if not (isinstance(scores, torch.Tensor) and isinstance(labels, torch.Tensor)
            and scores.dim() == 1 and labels.shape == scores.shape):
        raise ValueError("scores and labels must be two 1-d tensors of one length; select the "
                         "scored positions first, e.g. logits[labels != -100].")
    y = labels.bool()
    positives, negatives = int(y.sum()), int((~y).sum())
    if positives == 0 or negatives == 0:
        raise ValueError(f"need both labels, got {positives} ones and {negatives} zeros.")
    values, inverse, counts = torch.unique(scores.double(), return_inverse=True,
                                           return_counts=True)
    below = torch.cumsum(counts, 0) - counts  # how many scores lie below each distinct value
    ranks = (below + (counts + 1) / 2)[inverse]  # average 1-based rank, ties shared
    u = ranks[y].sum() - positives * (positives + 1) / 2
    return (u / (positives * negatives)).item()


def token_replaced_rate(corrupted_ids: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                        prior_weight: float = 1.0) -> torch.Tensor:
    """(V,) P(replaced | the token the discriminator reads), counted on corrupted sequences
    (Lesson 6, §6): a baseline that looks at one token and no context. Each token's count is
    smoothed towards the overall rate by ``prior_weight`` pseudo-positions, so a token seen
    rarely (or never) gets about the base rate. ``labels`` are :func:`rtd_labels`."""
    if not (isinstance(corrupted_ids, torch.Tensor) and isinstance(labels, torch.Tensor)
            and labels.shape == corrupted_ids.shape):
        raise ValueError("corrupted_ids and labels must be tensors of one shape (b, n).")
    if isinstance(prior_weight, bool) or not isinstance(prior_weight, (int, float)) \
            or prior_weight <= 0:
        raise ValueError(f"prior_weight must be a positive number, got {prior_weight!r}.")
    scored = labels != IGNORE_INDEX
    if not scored.any():
        raise ValueError("labels hold no scored position (all are -100).")
    ids, y = corrupted_ids[scored], labels[scored].double()  # (k,), (k,)
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"corrupted_ids must lie in [0, {vocab_size}), got ids from "
                         f"{int(ids.min())} to {int(ids.max())}.")
    replaced = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, ids, y)  # (V,)
    seen = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, ids, torch.ones_like(y))
    return (replaced + prior_weight * y.mean()) / (seen + prior_weight)


def disc_weight_effect(make_model, batches, special_ids, mask_id: int,
                       weights: tuple[float, float] = (1.0, 50.0), steps: int = 3,
                       lr: float = 1e-3, seed: int = 0) -> float:
    """How much λ changes the discriminator's training: the norm of the difference between its
    total updates after ``steps`` AdamW steps with λ = ``weights[0]`` and with λ = ``weights[1]``
    (from one initial model, on the same batches and draws), relative to the norm of the
    second update (Lesson 6, §4).

    ``make_model()`` must return the same fresh :class:`Electra` each time (seed it inside).
    Without shared parameters the result is small: Adam divides each gradient by its own
    running scale, so multiplying the discriminator's loss by a constant changes nothing,
    except for gradients as small as Adam's ε (1e-8), such as those that are zero in exact
    arithmetic (a key bias) and only rounding error in practice. With shared embeddings λ
    sets the mix of the two gradients in the shared weights, and everything downstream of
    them changes.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}.")
    if len(batches) < steps:
        raise ValueError(f"need at least steps={steps} batches of (input_ids, attention_mask), "
                         f"got {len(batches)}.")
    start, finals = None, []
    for weight in weights:
        model = make_model()
        if not isinstance(model, Electra):
            raise ValueError(f"make_model() must return an Electra, got {type(model).__name__}.")
        model.train()
        if start is None:
            start = torch.cat([p.detach().flatten() for p in model.discriminator.parameters()])
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        rng = torch.Generator().manual_seed(seed)
        for ids, am in batches[:steps]:
            out = model.losses(ids, am, special_ids, mask_id, rng=rng)
            loss = out["generator_loss"] + weight * out["discriminator_loss"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        finals.append(torch.cat([p.detach().flatten()
                                 for p in model.discriminator.parameters()]))
    moved = [final - start for final in finals]  # the discriminator's total update per λ
    return ((moved[0] - moved[1]).norm() / moved[1].norm()).item()


def corruption_kinds(original: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor,
                     mask_id: int) -> list[str]:
    """What happened at each position of one sequence (n,), for
    :func:`encoderlab.course.plotting.corruption_grid` (Lesson 6, Figure 1): "plain" (no loss),
    "mask" ([MASK], scored), "random" (another token, scored) or "kept" (unchanged, scored)."""
    if not (original.shape == inputs.shape == labels.shape) or original.dim() != 1:
        raise ValueError("original, inputs and labels must be three 1-d tensors of one length "
                         "(one sequence); pick a row first, e.g. inputs[0].")
    kinds = []
    for o, i, lab in zip(original.tolist(), inputs.tolist(), labels.tolist()):
        if lab == IGNORE_INDEX:
            kinds.append("plain")
        elif i == mask_id:
            kinds.append("mask")
        else:
            kinds.append("random" if i != o else "kept")
    return kinds


def rtd_kinds(labels: torch.Tensor) -> list[str]:
    """"replaced" / "original" for each position of one sequence's :func:`rtd_labels` (n,),
    "plain" at padding (Lesson 6, Figure 1)."""
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1:
        raise ValueError("labels must be the 1-d rtd_labels of one sequence.")
    names = {1: "replaced", 0: "original", IGNORE_INDEX: "plain"}
    return [names[v] for v in labels.tolist()]


# --- §5 Learning signal and compute --------------------------------------------------------------


def signal_fraction(labels: torch.Tensor, attention_mask: torch.Tensor) -> float:
    """The fraction of real tokens (attention_mask 1) whose label carries loss (Lesson 6, §5)."""
    if not isinstance(labels, torch.Tensor) or labels.shape != attention_mask.shape:
        raise ValueError("labels and attention_mask must be tensors of one shape (b, n).")
    real = attention_mask != 0
    return ((labels != IGNORE_INDEX) & real).sum().item() / max(1, real.sum().item())


def forward_flops(config: EncoderConfig, batch_size: int, n: int, head_positions: int,
                  head_size: int) -> int:
    """Floating-point operations of one forward pass, by formula (Lesson 6, §6).

    Each of the L blocks costs 2 (4 d^2 + 2 d d_ff) per token for its projections (W_Q, W_K,
    W_V, W_O) and its MLP, plus 2 * 2 n^2 d per sequence for S = QK^T and AV. A head applied at
    ``head_positions`` positions with ``head_size`` outputs adds 2 d head_size each. Embedding
    look-ups, LayerNorms, softmax and biases are left out (a few per cent). Training costs
    about 3 times this: the backward pass is about twice the forward.
    """
    d, f, L = config.d_model, config.d_ff, config.n_layers
    per_token = 2 * (4 * d * d + 2 * d * f)
    per_sequence = 2 * 2 * n * n * d
    return L * (batch_size * n * per_token + batch_size * per_sequence) \
        + 2 * head_positions * d * head_size


# --- §6 A downstream probe -----------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeTask:
    """Texts and labels for a linear probe; label 1 = language reference, 0 = module docstring."""

    train_texts: list[str]
    train_labels: torch.Tensor  # (N_train,) long
    test_texts: list[str]
    test_labels: torch.Tensor  # (N_test,) long

    def __repr__(self) -> str:
        return (f"ProbeTask({len(self.train_texts)} training sentences, {len(self.test_texts)} "
                f"held out; {self.train_labels.float().mean():.0%} / "
                f"{self.test_labels.float().mean():.0%} language reference)")


def reference_sentences() -> set[str]:
    """The corpus sentences that come from the language reference (``pydoc_data.topics``),
    as opposed to a module's docstrings (Lesson 6, §6). Read from the frozen corpus's record
    of sources, so the set is the same on every Python version."""
    return {sentence for sentence, source in zip(data.python_docs_sentences(),
                                                 data.python_docs_sources())
            if source == "language reference"}


def _balanced(texts: list[str], reference: set[str], g: torch.Generator):
    labels = torch.tensor([int(t in reference) for t in texts])
    ones, zeros = labels.nonzero().squeeze(1), (labels == 0).nonzero().squeeze(1)
    k = min(len(ones), len(zeros))
    keep = torch.cat([ones[torch.randperm(len(ones), generator=g)[:k]],
                      zeros[torch.randperm(len(zeros), generator=g)[:k]]]).sort().values
    return [texts[i] for i in keep.tolist()], labels[keep]


def source_task(corpus: data.Corpus, seed: int = 0) -> ProbeTask:
    """Which source does a sentence come from: the language reference or a module's docstring?

    (Lesson 6, §6.) Built offline from the corpus: training sentences from ``corpus.train``,
    test sentences from ``corpus.held_out`` (never seen in pretraining). Each side is balanced
    by keeping a random subset of the larger class, so chance is 50 %.
    """
    reference = reference_sentences()
    g = torch.Generator().manual_seed(seed)
    train_texts, train_labels = _balanced(corpus.train, reference, g)
    test_texts, test_labels = _balanced(corpus.held_out, reference, g)
    if len(train_texts) < 4 or len(test_texts) < 2:
        raise ValueError("the corpus has too few sentences of one source to build the task.")
    return ProbeTask(train_texts, train_labels, test_texts, test_labels)


@torch.no_grad()
def encoder_features(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     batch_size: int = 256) -> torch.Tensor:
    """(N, d) mean-pooled final hidden states of a frozen model with an ``encode`` method
    (TinyLM, TokenDiscriminator) for encoded texts ``input_ids`` (N, n) (Lesson 6, §6)."""
    if not hasattr(model, "encode"):
        raise ValueError(f"model must have an encode(input_ids, attention_mask) method "
                         f"(TinyLM, TokenDiscriminator), got {type(model).__name__}.")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 \
            or not isinstance(attention_mask, torch.Tensor) \
            or attention_mask.shape != input_ids.shape:
        raise ValueError("pass input_ids and attention_mask, two (N, n) tensors from "
                         "vocab.encode(texts).")
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(input_ids), batch_size):
        ids, am = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
        n = int(am.sum(dim=1).max())  # no column that is padding in every row
        h = model.encode(ids[:, :n], am[:, :n]).last_hidden_state  # (b, n, d)
        out.append(pool(h, am[:, :n], "mean"))  # (b, d)
    model.train(was_training)
    return torch.cat(out)


def linear_probe(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                 test_y: torch.Tensor, l2: float = 1e-3, steps: int = 100) -> float:
    """Held-out accuracy of a logistic-regression probe on frozen features (Lesson 6, §6).

    Features are standardised with the training set's mean and standard deviation; the probe
    ``sigmoid(x w + b)`` is fitted by L-BFGS on the training set with an L2 penalty ``l2 |w|^2``.
    Deterministic: no random initialisation (w = 0, b = 0).
    """
    if train_x.dim() != 2 or test_x.dim() != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"features must be (N, d) with one d, got {tuple(train_x.shape)} and "
                         f"{tuple(test_x.shape)}.")
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError("each feature matrix needs one label per row.")
    if not set(train_y.unique().tolist()) <= {0, 1}:
        raise ValueError("labels must be 0 or 1.")
    predicted = _probe_predictions(train_x, train_y, test_x, l2, steps)  # (N_test,) bool
    return (predicted == test_y.bool()).double().mean().item()


def _probe_predictions(train_x, train_y, test_x, l2: float, steps: int) -> torch.Tensor:
    """(N_test,) bool: the fitted probe's predictions (label 1) for ``test_x``."""
    train_x, test_x = train_x.double(), test_x.double()
    mean, std = train_x.mean(dim=0), train_x.std(dim=0).clamp(min=1e-8)
    xs, xt = (train_x - mean) / std, (test_x - mean) / std
    y = train_y.double()
    w = torch.zeros(xs.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(xs @ w + b, y) + l2 * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return (xt @ w + b) > 0


def cross_validated_correct(features: torch.Tensor, labels: torch.Tensor, folds: int = 5,
                            seed: int = 0, l2: float = 1e-3, steps: int = 100) -> torch.Tensor:
    """(N,) bool: for every example, whether :func:`linear_probe`'s logistic regression got it
    right when fitted on the other folds (k-fold cross-validation, Lesson 6, §6).

    Every example is predicted exactly once, by a probe that never saw it, so two encoders
    scored on the same ``labels`` with the same ``seed`` can be compared example by example
    (:func:`mcnemar`). ``features`` is (N, d), ``labels`` (N,) of 0 and 1.
    """
    if not isinstance(features, torch.Tensor) or features.dim() != 2 \
            or not isinstance(labels, torch.Tensor) or labels.shape != (len(features),):
        raise ValueError(f"features must be (N, d) and labels (N,), got "
                         f"{tuple(getattr(features, 'shape', ()))} and "
                         f"{tuple(getattr(labels, 'shape', ()))}.")
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= len(labels):
        raise ValueError(f"folds must be an int from 2 to N = {len(labels)}, got {folds!r}.")
    if not set(labels.unique().tolist()) <= {0, 1}:
        raise ValueError("labels must be 0 or 1.")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    correct = torch.zeros(len(labels), dtype=torch.bool)
    for fold in range(folds):
        test = order[fold::folds]  # every folds-th example of one shuffled order
        train = torch.ones(len(labels), dtype=torch.bool)
        train[test] = False
        predicted = _probe_predictions(features[train], labels[train], features[test], l2, steps)
        correct[test] = predicted == labels[test].bool()
    return correct


def mcnemar(correct_a: torch.Tensor, correct_b: torch.Tensor) -> tuple[int, int, float]:
    """McNemar's exact test for two classifiers scored on the same examples (Lesson 6, §6).

    Returns ``(a_only, b_only, p)``: how many examples only A got right, how many only B got
    right, and the two-sided p-value of "A and B are equally accurate" — under that hypothesis
    each discordant example is a fair coin, so ``a_only`` is Binomial(a_only + b_only, 1/2).
    Examples both got right (or both wrong) say nothing about the difference and are ignored.
    """
    if not (isinstance(correct_a, torch.Tensor) and isinstance(correct_b, torch.Tensor)
            and correct_a.dim() == 1 and correct_a.shape == correct_b.shape):
        raise ValueError("pass two 1-d boolean tensors of one length: whether each classifier "
                         "got each example right, on the same examples in the same order.")
    a, b = correct_a.bool(), correct_b.bool()
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    return a_only, b_only, sign_test(a_only, b_only)


def word_order_task(sentences: Sequence[str], seed: int = 0) -> tuple[list[str], torch.Tensor]:
    """A probe task on word order (Lesson 6, §6): half of ``sentences`` (chosen at random) have
    their words shuffled, label 1; the other half stay as they are, label 0. Each sentence
    appears once. A bag of words cannot tell the classes apart: both hold the same words."""
    sentences = _check_sentences(sentences, at_least=2)
    g = torch.Generator().manual_seed(seed)
    shuffled = torch.zeros(len(sentences), dtype=torch.long)
    shuffled[torch.randperm(len(sentences), generator=g)[:len(sentences) // 2]] = 1
    texts = []
    for sentence, label in zip(sentences, shuffled.tolist()):
        words = sentence.split()
        if label and len(set(words)) > 1:
            order = torch.randperm(len(words), generator=g)
            while all(words[i] == w for i, w in zip(order.tolist(), words)):
                order = torch.randperm(len(words), generator=g)  # a different order
            words = [words[i] for i in order.tolist()]
        elif label:
            shuffled[len(texts)] = 0  # one distinct word: no other order exists
        texts.append(" ".join(words))
    return texts, shuffled


def sentence_bootstrap(scores_a: torch.Tensor, scores_b: torch.Tensor, labels: torch.Tensor,
                       groups: torch.Tensor, resamples: int = 1000,
                       seed: int = 0) -> dict[str, torch.Tensor]:
    """Paired bootstrap over sentences of two probability scores on the same positions
    (Lesson 6, §6): draw the sentences with replacement, take all positions of each drawn
    sentence, and compute on that sample AUC(a) − AUC(b) and BCE(a) − BCE(b) (nats).

    ``scores_a``, ``scores_b`` (probabilities), ``labels`` (0/1) and ``groups`` (the sentence
    index of each position) are 1-d, of one length. Returns ``{"auc": (resamples,),
    "bce": (resamples,)}``; their 2.5 and 97.5 percentiles are a 95 % interval.
    """
    tensors = (scores_a, scores_b, labels, groups)
    if not all(isinstance(t, torch.Tensor) and t.dim() == 1 and t.shape == scores_a.shape
               for t in tensors):
        raise ValueError("scores_a, scores_b, labels and groups must be 1-d tensors of one "
                         "length, one entry per scored position.")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be an int >= 1, got {resamples!r}.")
    sentence_ids, groups = torch.unique(groups, return_inverse=True)  # renumber 0..S-1
    n_sentences = len(sentence_ids)
    g = torch.Generator().manual_seed(seed)
    a, b = scores_a.double().clamp(1e-6, 1 - 1e-6), scores_b.double().clamp(1e-6, 1 - 1e-6)
    y = labels.double()
    out = {"auc": torch.empty(resamples, dtype=torch.float64),
           "bce": torch.empty(resamples, dtype=torch.float64)}
    for r in range(resamples):
        drawn = torch.randint(n_sentences, (n_sentences,), generator=g)
        copies = torch.bincount(drawn, minlength=n_sentences)[groups]  # (k,) per position
        keep = torch.repeat_interleave(torch.arange(len(y)), copies)
        ys = y[keep]
        if ys.min() == ys.max():
            raise ValueError("a resample held only one label; score more positions.")
        out["auc"][r] = roc_auc(a[keep], ys) - roc_auc(b[keep], ys)
        out["bce"][r] = (F.binary_cross_entropy(a[keep], ys)
                         - F.binary_cross_entropy(b[keep], ys))
    return out


# --- Recipes: the equal-compute comparison of §6 -------------------------------------------------

ENCODER_SIZES = dict(d_model=128, n_heads=4, n_layers=2, d_ff=512, n_max=64, dropout=0.0)
GENERATOR_SIZES = dict(d_model=64, n_heads=2, n_layers=2, d_ff=256, n_max=64, dropout=0.0)
BATCH_SIZE = 32
MLM_STEPS = 1500
LEARNING_RATE = 1e-3  # the peak of the schedule
WARMUP_FRACTION = 0.1  # linear warm-up over the first 10 % of the steps
DECAY = False  # then constant: at a few thousand steps, decaying to 0 costs the MLM run too much
DISC_WEIGHT = 50.0  # ELECTRA's lambda
SHARE_EMBEDDINGS = True  # ELECTRA's choice: the generator uses the discriminator's embeddings
SEED = 0
PROBE_POINTS = 5  # probes at 0, 1/4, 1/2, 3/4 and all of the training


def corpus_and_vocab() -> tuple[data.Corpus, data.CompactVocab]:
    """The corpus of Lesson 5 and its compact vocabulary (MiniLM's WordPiece pieces used at least
    twice in the training sentences); needs only MiniLM's vocab.txt, not its weights."""
    from encoderlab.pretrained import find_weights
    from encoderlab.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.from_vocab_file(find_weights() / "vocab.txt")
    corpus = data.python_docs_corpus()
    return corpus, data.CompactVocab(tokenizer, corpus.train)


def _trimmed(batch):
    ids, am = batch
    n = int(am.sum(dim=1).max())  # drop the columns that are padding in every row
    return ids[:, :n], am[:, :n]


def _step_flops(kind: str, configs: dict, ids, am, n_masked: int) -> int:
    b, n = ids.shape
    V = configs["encoder"].vocab_size
    if kind == "mlm":
        return 3 * forward_flops(configs["encoder"], b, n, n_masked, V)
    d_e, d_g = configs["encoder"].d_model, configs["generator"].d_model
    if SHARE_EMBEDDINGS:  # d_e -> d_g projection at every token; tied head d_g -> d_e -> V
        generator = forward_flops(configs["generator"], b, n, 0, 0) + 2 * b * n * d_e * d_g \
            + 2 * n_masked * (d_g * d_e + d_e * V)
    else:
        generator = forward_flops(configs["generator"], b, n, n_masked, V)
    return 3 * (generator + forward_flops(configs["encoder"], b, n, b * n, 1))


def warmup_then_decay(step: int, steps: int, warmup_steps: int, decay: bool = True) -> float:
    """The learning-rate multiplier at ``step`` (0-based) of ``steps`` (Lesson 6, §6): linear
    warm-up from 1/warmup_steps to 1 over the first ``warmup_steps`` steps, then linear decay
    towards 0 at the last step, the schedule of BERT and ELECTRA; or, with ``decay=False``,
    constant after the warm-up."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}.")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) \
            or not 0 <= warmup_steps < steps:
        raise ValueError(f"warmup_steps must be an int in [0, steps={steps}), got "
                         f"{warmup_steps!r}.")
    if not 0 <= step < steps:
        raise ValueError(f"step must be in [0, {steps}), got {step!r}.")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return (steps - step) / (steps - warmup_steps) if decay else 1.0


def train_with_warmup(model: nn.Module, batches, loss_fn, steps: int, lr: float,
                      warmup_steps: int, decay: bool = True, seed: int = 0,
                      progress: bool = True, description: str | None = None) -> list[float]:
    """:func:`encoderlab.course.train.train` with :func:`warmup_then_decay` as its learning-rate
    schedule (Lesson 6, §6): returns the loss of every step and leaves the model in eval mode."""
    from encoderlab.course.train import train

    warmup_then_decay(0, steps, warmup_steps)  # checks steps and warmup_steps
    return train(model, batches, loss_fn, steps=steps, lr=lr, seed=seed, progress=progress,
                 description=description,
                 schedule=lambda step: warmup_then_decay(min(step, steps - 1), steps,
                                                         warmup_steps, decay))


def _setup():
    corpus, vocab = corpus_and_vocab()
    ids, am = vocab.encode(corpus.train, max_length=ENCODER_SIZES["n_max"])  # (N, 64)
    configs = {
        "encoder": EncoderConfig(vocab_size=vocab.size, **ENCODER_SIZES),
        "generator": EncoderConfig(vocab_size=vocab.size, **GENERATOR_SIZES),
    }
    task = source_task(corpus)
    return corpus, vocab, ids, am, configs, task


def planned_flops(kind: str, steps: int) -> int:
    """Training FLOPs of ``steps`` steps of a recipe, expected before training: the real batch
    shapes of the shared batch stream, and 15 % of the ordinary tokens masked."""
    _, vocab, ids, am, configs, _ = _setup()
    return _planned(kind, steps, vocab, ids, am, configs)


def _planned(kind, steps, vocab, ids, am, configs) -> int:
    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=SEED)
    total = 0
    for _ in range(steps):
        x, a = _trimmed(next(batches))
        ordinary = (a.sum() - 2 * a.shape[0]).item()  # real tokens minus [CLS] and [SEP]
        total += _step_flops(kind, configs, x, a, round(0.15 * ordinary))
    return total


def rtd_steps_for_equal_compute(vocab, ids, am, configs, mlm_steps: int) -> int:
    """The number of ELECTRA steps whose expected FLOPs (generator included) first reach those
    of ``mlm_steps`` MLM steps, on the same batch stream."""
    target = _planned("mlm", mlm_steps, vocab, ids, am, configs)
    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=SEED)
    total, steps = 0, 0
    while total < target:
        x, a = _trimmed(next(batches))
        ordinary = (a.sum() - 2 * a.shape[0]).item()
        total += _step_flops("rtd", configs, x, a, round(0.15 * ordinary))
        steps += 1
    return steps


def untrained_encoder(vocab: data.CompactVocab) -> TinyLM:
    """The untrained encoder both runs of Lesson 6, §6 start from: the step-0 model of
    ``l6-mlm``, whose encoder stack the ELECTRA discriminator copies."""
    torch.manual_seed(SEED)
    return TinyLM(EncoderConfig(vocab_size=vocab.size, **ENCODER_SIZES), causal=False)


def probe_accuracy(model: nn.Module, vocab: data.CompactVocab, task: ProbeTask,
                   _cache: dict = {}) -> float:  # noqa: B006 - the cache is meant to persist
    """Held-out accuracy of a linear probe on ``model``'s frozen, mean-pooled features for the
    source task (Lesson 6, §6); the encoded texts are cached per task."""
    key = (id(task), id(vocab))
    if key not in _cache:
        _cache.clear()
        # task and vocab are kept in the entry, so their ids cannot be reused while it lives
        _cache[key] = (vocab.encode(task.train_texts), vocab.encode(task.test_texts), task, vocab)
    (train_ids, train_am), (test_ids, test_am), _, _ = _cache[key]
    train_x = encoder_features(model, train_ids, train_am)
    test_x = encoder_features(model, test_ids, test_am)
    return linear_probe(train_x, task.train_labels, test_x, task.test_labels)


def _run(kind: str, steps: int | None, progress: bool):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is as fast, and robust on a busy CPU
    try:
        return _run_single_thread(kind, steps, progress)
    finally:
        torch.set_num_threads(threads)


def _run_single_thread(kind: str, steps: int | None, progress: bool):
    corpus, vocab, ids, am, configs, task = _setup()
    if steps is None:
        steps = MLM_STEPS if kind == "mlm" else \
            rtd_steps_for_equal_compute(vocab, ids, am, configs, MLM_STEPS)
    torch.manual_seed(SEED)  # the MLM encoder and the discriminator start from one encoder
    if kind == "mlm":
        model = TinyLM(configs["encoder"], causal=False)
        probed = model
    else:
        encoder_first = TokenDiscriminator(configs["encoder"])
        torch.manual_seed(SEED + 1)
        model = Electra(configs["generator"], configs["encoder"], SHARE_EMBEDDINGS)
        model.discriminator.load_state_dict(encoder_first.state_dict())
        probed = model.discriminator
    rng = torch.Generator().manual_seed(SEED + 2)
    checkpoints = sorted({round(steps * k / (PROBE_POINTS - 1)) for k in range(PROBE_POINTS)})
    log = {"flops": [], "generator": [], "discriminator": [], "probe_steps": [], "probe": []}
    probe_seconds, probe_cpu = [0.0], [0.0]

    def loss_fn(model, batch):
        done = len(log["flops"])
        if done in checkpoints:  # probe the frozen encoder before this step
            start, start_cpu = time.perf_counter(), time.process_time()
            log["probe_steps"].append(done)
            log["probe"].append(probe_accuracy(probed, vocab, task))
            model.train()
            probe_seconds[0] += time.perf_counter() - start
            probe_cpu[0] += time.process_time() - start_cpu
        x, a = _trimmed(batch)
        if kind == "mlm":
            inputs, labels = mlm_corrupt(x, a, vocab.special_ids, vocab.size, 0.15,
                                         generator=rng, mask_id=vocab.mask_id)
            loss, _ = masked_positions_loss(model, inputs, a, labels)
            n_masked = int((labels != IGNORE_INDEX).sum())
        else:
            out = model.losses(x, a, vocab.special_ids, vocab.mask_id, rng=rng)
            log["generator"].append(out["generator_loss"].item())
            log["discriminator"].append(out["discriminator_loss"].item())
            loss = out["generator_loss"] + DISC_WEIGHT * out["discriminator_loss"]
            n_masked = int((out["mlm_labels"] != IGNORE_INDEX).sum())
        log["flops"].append(_step_flops(kind, configs, x, a, n_masked))
        return loss

    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=SEED)
    wall, cpu = time.perf_counter(), time.process_time()
    history = train_with_warmup(model, batches, loss_fn, steps=steps, lr=LEARNING_RATE,
                                warmup_steps=round(WARMUP_FRACTION * steps), decay=DECAY,
                                seed=SEED,
                                progress=progress, description=f"l6-{kind}")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if steps in checkpoints:
        log["probe_steps"].append(steps)
        log["probe"].append(probe_accuracy(probed, vocab, task))
    state = {f"model.{k}": v for k, v in _unique_state(model).items()}
    tensors = {
        **state,
        "loss": torch.tensor(history),
        "flops": torch.tensor(log["flops"], dtype=torch.float64),
        "probe_steps": torch.tensor(log["probe_steps"]),
        "probe_accuracy": torch.tensor(log["probe"], dtype=torch.float64),
    }
    if kind == "rtd":
        tensors["generator_loss"] = torch.tensor(log["generator"])
        tensors["discriminator_loss"] = torch.tensor(log["discriminator"])
    metadata = {
        "corpus_fingerprint": corpus.fingerprint,
        "kind": kind,
        "steps": str(steps),
        "batch_size": str(BATCH_SIZE),
        "learning_rate": str(LEARNING_RATE),
        "warmup_steps": str(round(WARMUP_FRACTION * steps)),
        "decay": str(DECAY),
        "disc_weight": str(DISC_WEIGHT) if kind == "rtd" else "",
        "share_embeddings": str(SHARE_EMBEDDINGS) if kind == "rtd" else "",
        "seed": str(SEED),
        "vocab_size": str(vocab.size),
        "encoder_config": repr(configs["encoder"]),
        "generator_config": repr(configs["generator"]) if kind == "rtd" else "",
        "total_flops": str(int(sum(log["flops"]))),
        "wall_seconds": f"{wall - probe_seconds[0]:.1f}",  # training only, probes left out
        "cpu_seconds": f"{cpu - probe_cpu[0]:.1f}",  # CPU time of training, probes left out
        "threads": "1",
        "probe_task": repr(task),
    }
    return tensors, metadata


def _unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each tensor once: shared embeddings appear under several names in
    ``state_dict()``, and the first name is kept (safetensors stores no aliases)."""
    seen, state = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            state[name] = tensor
    return state


def train_mlm(steps: int | None = None, progress: bool = True):
    """Lesson 6, §6: an MLM encoder (d=128, L=2) on the corpus; probed at five points."""
    return _run("mlm", steps, progress)


def train_rtd(steps: int | None = None, progress: bool = True):
    """Lesson 6, §6: ELECTRA (generator d=64 + discriminator d=128) at the MLM run's FLOPs."""
    return _run("rtd", steps, progress)


RECIPES = {"l6-mlm": train_mlm, "l6-rtd": train_rtd}


def load_recipe_model(name: str) -> tuple[nn.Module, dict[str, torch.Tensor], dict[str, str]]:
    """(model, tensors, metadata) of a committed Lesson 6 artefact: the TinyLM of ``l6-mlm`` or
    the Electra (generator and discriminator) of ``l6-rtd``, weights loaded, in eval mode."""
    from encoderlab.course.train import load_artefact

    if name not in RECIPES:
        raise ValueError(f"name must be one of {list(RECIPES)}, got {name!r}.")
    tensors, metadata = load_artefact(name)
    vocab_size = int(metadata["vocab_size"])
    encoder = EncoderConfig(vocab_size=vocab_size, **ENCODER_SIZES)
    if name == "l6-mlm":
        model = TinyLM(encoder, causal=False)
    else:
        model = Electra(EncoderConfig(vocab_size=vocab_size, **GENERATOR_SIZES), encoder,
                        share_embeddings=metadata.get("share_embeddings") == "True")
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    expected = set(_unique_state(model))  # every tensor once; aliases follow the shared module
    if set(state) != expected:
        raise ValueError(f"the artefact {name!r} does not match the model: missing "
                         f"{sorted(expected - set(state))}, unexpected "
                         f"{sorted(set(state) - expected)}. Retrain it with "
                         f"`python -m encoderlab train {name}`.")
    model.load_state_dict(state, strict=False)
    model.eval()
    return model, tensors, metadata


__all__ += ["warmup_then_decay", "train_with_warmup", "probe_accuracy", "planned_flops",
            "rtd_steps_for_equal_compute", "train_mlm", "train_rtd", "load_recipe_model",
            "untrained_encoder", "cross_validated_correct", "mcnemar", "word_order_task",
            "sentence_bootstrap"]

"""Pretraining recipes beyond BERT's masked language modelling (Lesson 6, §1-§5).

Lesson 5 trained an encoder with BERT's objective: choose 15 % of the tokens, corrupt them
80/10/10, predict them. The models after BERT kept the idea and changed the recipe. The
objectives themselves live in :mod:`encoderlab.objectives` (whole-word and span masking,
replaced-token detection) and the heads in :mod:`encoderlab.heads`; this module holds what
Lesson 6 builds and measures with them:

- **sentence pairs** (§1): BERT's next-sentence prediction (:func:`nsp_pairs`), which RoBERTa
  dropped, and ALBERT's sentence-order prediction (:func:`sop_pairs`);
- **when the mask is drawn** (§2): once per sentence (static) or at every epoch (dynamic,
  RoBERTa) — :func:`epoch_masks`;
- **what is masked** (§3): whole words and spans instead of independent pieces (the masking
  itself is in :mod:`encoderlab.objectives`);
- **what is predicted** (§4): ELECTRA's generator and discriminator trained together
  (:class:`Electra`), and how to tell whether the discriminator learned more than a
  context-free look-up of the token (:func:`roc_auc`, :func:`token_replaced_rate`), and
  training FLOPs by formula (:func:`forward_flops`).

The equal-compute comparison of §4 (a frozen-encoder probe and the two pretraining runs) is in
:mod:`encoderlab.lessons.l06_comparison`; the every-position against 15 % setting of §5 in
:mod:`encoderlab.lessons.l06_signal`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from encoderlab import data
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import TiedGeneratorHead, TinyLM, TokenDiscriminator
from encoderlab.objectives import (
    IGNORE_INDEX,
    mlm_corrupt,
    mlm_model_loss,
    replace_with_samples,
    rtd_labels,
    rtd_loss,
)
from encoderlab.validate import check_int, check_positive_int

__all__ = [
    "check_sentences",
    "SentencePair",
    "nsp_pairs",
    "sop_pairs",
    "encode_pairs",
    "word_overlap",
    "overlap_shortcut_accuracy",
    "epoch_masks",
    "distinct_masks",
    "ProjectedEmbeddings",
    "Electra",
    "roc_auc",
    "token_replaced_rate",
    "corruption_kinds",
    "rtd_kinds",
    "forward_flops",
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


def check_sentences(sentences, at_least: int) -> list[str]:
    """``sentences`` as a list of at least ``at_least`` strings; ValueError otherwise (Lesson 6)."""
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
    sentences = check_sentences(sentences, 3)
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
    sentences = check_sentences(sentences, 2)
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
    check_int(max_length, "max_length", at_least=5,
              what="[CLS], [SEP] twice and a piece of each sentence")
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
        check_positive_int(value, name)
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


# --- §4 Replaced-token detection (ELECTRA) -------------------------------------------------------


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
        generator_loss, logits = mlm_model_loss(self.generator, masked_inputs,
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


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """The area under the ROC curve (Lesson 6, §4-§5): the probability that a random position
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
    (Lesson 6, §4): a baseline that looks at one token and no context. Each token's count is
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


def forward_flops(config: EncoderConfig, batch_size: int, n: int, head_positions: int,
                  head_size: int) -> int:
    """Floating-point operations of one forward pass, by formula (Lesson 6, §4).

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

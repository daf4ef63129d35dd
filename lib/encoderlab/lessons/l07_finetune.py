"""Fine-tuning: heads that classify, tag and extract; freezing; metrics; three tasks (Lesson 7).

A pretrained encoder turns n tokens into n vectors. A task adds one small layer on top:

* :class:`SequenceClassifier` — one vector per sequence ([CLS], BERT's pooler, or the mean of
  the tokens) and a linear map to ``n_classes`` scores (§2);
* :class:`TokenClassifier` — a linear map from every token vector to ``n_tags`` scores, read as
  BIO tags (§4);
* :class:`SpanExtractor` — two scores per token, "the answer starts here" and "ends here",
  over the context of a question + context pair (§5).

A *linear probe* trains only that layer on a frozen encoder (:func:`freeze`); *fine-tuning*
trains the encoder and the layer together. The metrics are the ones papers report: accuracy and
the confusion matrix, entity-level precision / recall / F1 over BIO tags (as CoNLL's conlleval
and seqeval count them), and SQuAD's exact match and token F1. The three tasks are built offline
and deterministically: :func:`topic_task` from the documentation shipped with Python,
:func:`tagging_task` and :func:`qa_task` from templates and fixed word lists.

The fine-tuning runs are too slow for a notebook on a 2-core CPU, so ``python -m encoderlab train
NAME`` runs them (``l7-classify-mean``, ``l7-classify-cls``, ``l7-tag``, ``l7-extract``) and stores
their *results* — learning curves, test-set predictions, a few examples' logits — never the 90 MB
of fine-tuned weights.
"""

from __future__ import annotations

import copy
import hashlib
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab.course.stats import sign_test
from encoderlab.heads import pool

__all__ = [
    "freeze",
    "unfreeze",
    "count_trainable",
    "SEQUENCE_POOLINGS",
    "SequenceClassifier",
    "TokenClassifier",
    "SpanExtractor",
    "span_loss",
    "best_span",
    "accuracy",
    "confusion_matrix",
    "bio_to_spans",
    "entity_scores",
    "normalize_answer",
    "exact_match",
    "token_f1",
    "ClassificationTask",
    "topic_task",
    "TOPIC_SOURCES",
    "TaggingTask",
    "TAGS",
    "AMBIGUOUS_WORDS",
    "tagging_task",
    "QAExample",
    "qa_task",
    "encode_texts",
    "encode_words",
    "encode_tagged",
    "encode_qa",
    "with_evaluations",
    "frozen_outputs",
    "train_with_curve",
    "word_tags",
    "span_text",
    "qa_scores",
    "topic_sentences",
    "paired_sign_test",
    "texts_fingerprint",
    "RECIPES",
]

IGNORE_INDEX = -100  # a label that the cross-entropy skips: [CLS], [SEP], [PAD], ## pieces


# --- §3 Freezing ----------------------------------------------------------------------------------


def freeze(module: nn.Module) -> nn.Module:
    """Stop every parameter of ``module`` from training (requires_grad=False); returns it.

    (Lesson 7, §3.) A frozen encoder plus a trained linear head is a *linear probe*.
    """
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def unfreeze(module: nn.Module) -> nn.Module:
    """Let every parameter of ``module`` train again (requires_grad=True); returns it."""
    for p in module.parameters():
        p.requires_grad_(True)
    return module


def count_trainable(module: nn.Module) -> int:
    """The number of parameters that an optimiser would update (requires_grad=True)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# --- §2 The three heads -------------------------------------------------------------------------

SEQUENCE_POOLINGS = ("cls", "pooler", "mean")


def _check_count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise ValueError(f"{name} must be an int >= 2 (a head needs two outputs or more), "
                         f"got {value!r}.")
    return value


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


def span_loss(start_logits, end_logits, starts, ends) -> torch.Tensor:
    """The mean of the cross-entropies of the gold start and gold end positions (Lesson 7, §5)."""
    return (F.cross_entropy(start_logits, starts) + F.cross_entropy(end_logits, ends)) / 2


def best_span(
    start_logits: torch.Tensor,  # (b, n)
    end_logits: torch.Tensor,  # (b, n)
    context_mask: torch.Tensor,  # (b, n): True on the context's tokens
    max_tokens: int = 16,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The span (i, j) with the largest s_i + e_j, for each row: (starts, ends, scores), each (b,).

    (Lesson 7, §5.) Only spans with i <= j < i + max_tokens and both ends in the context count:
    never an answer that ends before it starts, is longer than ``max_tokens`` tokens, or touches
    the question, a special token or padding. Scoring every pair costs an (n, n) table per row.
    """
    if start_logits.dim() != 2 or start_logits.shape != end_logits.shape:
        raise ValueError(
            "start_logits and end_logits must both have shape (batch, n), got "
            f"{tuple(start_logits.shape)} and {tuple(end_logits.shape)}."
        )
    if tuple(context_mask.shape) != tuple(start_logits.shape):
        raise ValueError(f"context_mask must have shape {tuple(start_logits.shape)} "
                         f"(one flag per token), got {tuple(context_mask.shape)}.")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}.")
    context = context_mask.to(torch.bool)  # (b, n)
    empty = ~context.any(dim=1)
    if empty.any():
        raise ValueError(f"rows {empty.nonzero().squeeze(1).tolist()} have no context token: "
                         "there is no span to choose. Check the context_mask.")
    b, n = start_logits.shape
    i = torch.arange(n).unsqueeze(1)  # (n, 1): start
    j = torch.arange(n).unsqueeze(0)  # (1, n): end
    allowed = (j >= i) & (j < i + max_tokens)  # (n, n)
    allowed = allowed & context.unsqueeze(2) & context.unsqueeze(1)  # (b, n, n)
    scores = start_logits.unsqueeze(2) + end_logits.unsqueeze(1)  # (b, n, n): s_i + e_j
    scores = scores.masked_fill(~allowed, float("-inf"))
    best, flat = scores.view(b, -1).max(dim=1)  # (b,)
    return flat // n, flat % n, best


# --- §3 Metrics for classification ---------------------------------------------------------------


def _as_labels(x, name: str) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.dim() != 1 or x.is_floating_point():
        raise ValueError(f"{name} must be a 1-d tensor of integer class ids, got dtype {x.dtype} "
                         f"and shape {tuple(x.shape)}. Take logits.argmax(dim=-1) first.")
    return x


def accuracy(predicted, gold) -> float:
    """The fraction of positions where ``predicted`` equals ``gold`` (two 1-d int tensors)."""
    predicted, gold = _as_labels(predicted, "predicted"), _as_labels(gold, "gold")
    if predicted.shape != gold.shape or len(gold) == 0:
        raise ValueError(f"predicted and gold must have the same non-zero length, got "
                         f"{len(predicted)} and {len(gold)}.")
    return (predicted == gold).double().mean().item()


def paired_sign_test(correct_a, correct_b) -> dict:
    """Two models scored on the same examples: where they disagree, is one right more often?

    (Lesson 7, §3.) ``correct_a`` and ``correct_b`` are boolean tensors (N,), True where each
    model is right. Examples both get right, or both wrong, say nothing about the difference;
    of the others, ``a_only`` go to a and ``b_only`` to b. Under "no difference" each of them is
    a fair coin, and ``p_value`` is the exact two-sided binomial probability of a split at least
    this uneven (the sign test; McNemar's exact test).
    """
    a, b = (torch.as_tensor(x) for x in (correct_a, correct_b))
    if a.dtype != torch.bool or b.dtype != torch.bool or a.shape != b.shape or a.dim() != 1:
        raise ValueError(
            "correct_a and correct_b must be boolean tensors of the same shape (N,), True where "
            f"the model is right; got {a.dtype} {tuple(a.shape)} and {b.dtype} {tuple(b.shape)}. "
            "Compare predictions with labels first: predicted == gold."
        )
    a_only, b_only = int((a & ~b).sum()), int((b & ~a).sum())
    return {"a_only": a_only, "b_only": b_only, "p_value": sign_test(a_only, b_only)}


def confusion_matrix(predicted, gold, n_classes: int) -> torch.Tensor:
    """(C, C) counts: entry [g, p] is how many examples of class g were predicted as p.

    (Lesson 7, §3.) Rows are the gold classes, columns the predictions; the diagonal holds the
    correct ones, so ``m.diagonal().sum() / m.sum()`` is the accuracy.
    """
    predicted, gold = _as_labels(predicted, "predicted"), _as_labels(gold, "gold")
    if predicted.shape != gold.shape:
        raise ValueError(f"predicted and gold must have the same length, got "
                         f"{len(predicted)} and {len(gold)}.")
    for name, x in (("predicted", predicted), ("gold", gold)):
        if len(x) and (x.min() < 0 or x.max() >= n_classes):
            raise ValueError(f"{name} holds class ids outside 0..{n_classes - 1} "
                             f"(from {int(x.min())} to {int(x.max())}); is n_classes right?")
    flat = gold * n_classes + predicted  # (N,): one cell index per example
    return torch.bincount(flat, minlength=n_classes * n_classes).view(n_classes, n_classes)


# --- §4 BIO tags and entity-level F1 -------------------------------------------------------------


def _split_tag(tag, position: int) -> tuple[str, str | None]:
    """"B-LOC" -> ("B", "LOC"); "O" -> ("O", None); anything else is an error."""
    if tag == "O":
        return "O", None
    if isinstance(tag, str) and len(tag) > 2 and tag[:2] in ("B-", "I-"):
        return tag[0], tag[2:]
    raise ValueError(f"tag {tag!r} at position {position} is not a BIO tag: use 'O', "
                     "'B-TYPE' or 'I-TYPE'.")


def bio_to_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entities of one BIO-tagged sequence: a list of (type, start, end), end inclusive.

    (Lesson 7, §4.) An entity begins at ``B-X``, or at an ``I-X`` that does not continue an
    entity of type X (after ``O``, at the start, or after another type) — the rule of CoNLL's
    conlleval script and of seqeval's default mode. It goes on while the tags are ``I-X``.
    """
    if isinstance(tags, str):
        raise ValueError("tags must be a list of tags like ['B-PER', 'I-PER', 'O'], not a str.")
    spans: list[tuple[str, int, int]] = []
    current: list | None = None  # [type, start, end] of the entity being read
    for i, tag in enumerate(tags):
        prefix, kind = _split_tag(tag, i)
        if prefix == "I" and current is not None and current[0] == kind:
            current[2] = i  # the entity goes on
            continue
        if current is not None:
            spans.append(tuple(current))  # anything else closes it
            current = None
        if prefix in ("B", "I"):
            current = [kind, i, i]
    if current is not None:
        spans.append(tuple(current))
    return spans


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Entity-level precision, recall and F1 over a corpus of BIO-tagged sequences.

    (Lesson 7, §4.) A predicted entity is correct only if an entity of the same type with the
    same start and the same end is in the gold sequence: a boundary off by one is an error, and
    costs both precision and recall. Counts are summed over all sequences (micro average).
    Returns ``{"precision", "recall", "f1", "n_gold", "n_predicted", "n_correct", "by_type"}``.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"gold and predicted must hold the same number of sequences, got "
                         f"{len(gold)} and {len(predicted)}.")
    counts: dict[str, Counter] = {}
    for k, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sequence {k} has {len(g)} gold tags but {len(p)} predicted ones: "
                             "tag the same tokens (or words) in both.")
        g_spans, p_spans = set(bio_to_spans(g)), set(bio_to_spans(p))
        for kind, *_ in g_spans:
            counts.setdefault(kind, Counter())["gold"] += 1
        for kind, *_ in p_spans:
            counts.setdefault(kind, Counter())["predicted"] += 1
        for kind, *_ in g_spans & p_spans:
            counts[kind]["correct"] += 1

    def prf(c: Counter) -> dict:
        precision = c["correct"] / c["predicted"] if c["predicted"] else 0.0
        recall = c["correct"] / c["gold"] if c["gold"] else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "n_gold": c["gold"],
                "n_predicted": c["predicted"], "n_correct": c["correct"]}

    total = sum(counts.values(), Counter())
    return {**prf(total), "by_type": {kind: prf(c) for kind, c in sorted(counts.items())}}


# --- §5 SQuAD's exact match and token F1 ---------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, truth: str) -> float:
    """1.0 if the two answers are equal after :func:`normalize_answer`, else 0.0 (Lesson 7, §5)."""
    return float(normalize_answer(prediction) == normalize_answer(truth))


def token_f1(prediction: str, truth: str) -> float:
    """SQuAD's F1: the overlap of the two answers' words (as multisets), after normalisation."""
    p, t = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not p or not t:
        return float(p == t)  # both empty: 1; one empty: 0
    common = sum((Counter(p) & Counter(t)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(t)
    return 2 * precision * recall / (precision + recall)


# --- The three offline tasks ---------------------------------------------------------------------
# (1) Topic of a sentence of the Python documentation: which part of the docs it comes from.

TOPIC_SOURCES = {
    "language reference": None,  # pydoc_data.topics: the language reference's pages
    "numbers & dates": "decimal fractions statistics random secrets calendar datetime heapq uuid",
    "files & formats": "pathlib shutil tarfile tempfile zipfile glob fnmatch csv json pickle "
                       "configparser mailbox",
    "networks & concurrency": "socket smtplib email.message urllib.parse ipaddress subprocess "
                              "threading queue sched asyncio.events",
}


@dataclass(frozen=True)
class ClassificationTask:
    """Texts with class ids, split into train and test; ``classes`` names the ids (Lesson 7, §3)."""

    train_texts: list[str]
    train_labels: torch.Tensor  # (N_train,)
    test_texts: list[str]
    test_labels: torch.Tensor  # (N_test,)
    classes: tuple[str, ...]

    def __repr__(self) -> str:
        return (f"ClassificationTask({len(self.classes)} classes, {len(self.train_texts)} "
                f"training and {len(self.test_texts)} test texts)")


def topic_sentences() -> dict[str, list[str]]:
    """Every sentence of each part of the Python documentation in :data:`TOPIC_SOURCES`.

    A sentence that appears in two parts is dropped from both, so the label is never ambiguous.
    Read from the frozen file ``corpora/topic-sentences.json.gz`` (CPython 3.11's text, the same
    on every Python version; rebuilt by ``python -m encoderlab data --build``).
    """
    from encoderlab.data import read_frozen

    by_class = read_frozen("topic-sentences")
    if list(by_class) != list(TOPIC_SOURCES):
        raise ValueError(f"the frozen topic sentences have classes {list(by_class)}, expected "
                         f"{list(TOPIC_SOURCES)}: rebuild them with `python -m encoderlab data "
                         "--build` on Python 3.11.")
    return {name: list(sentences) for name, sentences in by_class.items()}


def topic_task(n_train: int = 100, n_test: int = 50, seed: int = 0) -> ClassificationTask:
    """Which part of the Python docs a sentence comes from: a 4-class task (Lesson 7, §3).

    From each class of :func:`topic_sentences`, ``n_train`` sentences go to training and
    ``n_test`` others to the test set, drawn at random with ``seed``; both sets are balanced,
    and the training set is shuffled. A test sentence that shares an 8-word span with a training
    sentence is passed over for the next one (the training set stays as drawn). The sentences
    are CPython 3.11's, frozen, so every Python version gets the same task.
    """
    from encoderlab.data import SPAN_WORDS, without_shared_spans

    by_class = topic_sentences()
    short = {name: len(ss) for name, ss in by_class.items() if len(ss) < n_train + n_test}
    if short:
        raise ValueError(f"n_train + n_test = {n_train + n_test} is more than some classes have "
                         f"({short}); ask for fewer.")
    g = torch.Generator().manual_seed(seed)
    train, test, rest = [], [], []
    for label, sentences in enumerate(by_class.values()):
        order = torch.randperm(len(sentences), generator=g).tolist()
        train += [(sentences[i], label) for i in order[:n_train]]
        rest.append([(sentences[i], label) for i in order[n_train:]])
    # A test sentence shares no 8-word span with any training sentence: each class's test set
    # is the first n_test of its remaining sentences (in the random order) that pass.
    train_texts = [t for t, _ in train]
    for label, candidates in enumerate(rest):
        fresh = set(without_shared_spans([t for t, _ in candidates], train_texts))
        chosen = [c for c in candidates if c[0] in fresh][:n_test]
        if len(chosen) < n_test:
            raise ValueError(f"class {list(by_class)[label]!r} has only {len(chosen)} sentences "
                             f"that share no {SPAN_WORDS}-word span with training; ask for "
                             f"fewer than n_test = {n_test}.")
        test += chosen
    train = [train[i] for i in torch.randperm(len(train), generator=g).tolist()]
    return ClassificationTask(
        train_texts=[t for t, _ in train], train_labels=torch.tensor([y for _, y in train]),
        test_texts=[t for t, _ in test], test_labels=torch.tensor([y for _, y in test]),
        classes=tuple(by_class),
    )


# (2) BIO tagging: people, places and years in template sentences.

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-DATE", "I-DATE")

_FIRST = ("Ada Alan Grace Guido Linus Barbara Donald Edsger Frances John Margaret Dennis Ken "
          "Katherine Niklaus Radia Sophie Hedy Claude Tim Anita Fernando Yukihiro Bjarne").split()
_LAST = ("Lovelace Turing Hopper Torvalds Liskov Knuth Dijkstra Allen McCarthy Hamilton Ritchie "
         "Thompson Johnson Wirth Perlman Wilson Lamarr Shannon Borg Corbato Matsumoto "
         "Stroustrup Goldberg Kay").split()
_PLACES = ("Paris|London|New York|Amsterdam|Zurich|Kyoto|Buenos Aires|Cape Town|Helsinki|Lagos|"
           "Oslo|Lima|Seoul|Mumbai|San Francisco|Rio de Janeiro|Cairo|Dublin|Vienna|Hanoi|"
           "Santiago|Nairobi|Los Angeles|Montreal").split("|")
# Words that are a first name in one sentence and a place in another: only context tells.
_BOTH = ("Florence Sydney Austin Madison Georgia Victoria Jordan Charlotte Lincoln Chelsea "
         "Dallas Savannah").split()
AMBIGUOUS_WORDS = tuple(_BOTH)  # Lesson 7, §4: public, for the lesson's measurement
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_TEMPLATES = (
    "{PER} moved to {LOC} in {DATE} .",
    "{PER} met {PER} in {LOC} .",
    "in {DATE} , {PER} gave a talk in {LOC} .",
    "the conference in {LOC} was opened by {PER} .",
    "{PER} wrote to {PER} from {LOC} in {DATE} .",
    "after {DATE} , {PER} lived in {LOC} with {PER} .",
    "{LOC} is where {PER} studied .",
    "{PER} and {PER} both left {LOC} in {DATE} .",
    "we flew from {LOC} to {LOC} to see {PER} .",
    "the letter that {PER} sent in {DATE} never reached {LOC} .",
    "since {DATE} the office in {LOC} has been run by {PER} .",
    "{PER} thinks {LOC} is colder than {LOC} .",
)

TAGGING_TEMPLATES = _TEMPLATES  # Lesson 7, §4: public, so that the lesson can print them


@dataclass(frozen=True)
class TaggingTask:
    """Sentences as word lists with one BIO tag per word, train and test (Lesson 7, §4)."""

    train_words: list[list[str]]
    train_tags: list[list[str]]
    test_words: list[list[str]]
    test_tags: list[list[str]]
    tags: tuple[str, ...] = TAGS

    def __repr__(self) -> str:
        return (f"TaggingTask({len(self.train_words)} training and {len(self.test_words)} test "
                f"sentences, tags {list(self.tags)})")


def _split_names(names: Sequence[str], g: torch.Generator) -> tuple[list[str], list[str]]:
    """Two thirds of a list for training, the rest seen only in the test set."""
    order = torch.randperm(len(names), generator=g).tolist()
    cut = (2 * len(names)) // 3
    return [names[i] for i in order[:cut]], [names[i] for i in order[cut:]]


def _fill(template: str, pick: Callable[[str], list[str]]) -> tuple[list[str], list[str]]:
    words, tags = [], []
    for part in template.split():
        if part.startswith("{"):
            kind = part[1:-1]
            entity = pick(kind)
            words += entity
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(entity) - 1)
        else:
            words.append(part)
            tags.append("O")
    return words, tags


def tagging_task(n_train: int = 400, n_test: int = 200, seed: int = 0) -> TaggingTask:
    """Template sentences about people (PER), places (LOC) and dates (DATE), tagged BIO.

    (Lesson 7, §4.) Built from fixed lists of computer scientists' names, cities, months and
    years. The names and cities are split in two thirds for training and one third for testing,
    and the test sentences draw only from the held-out third, so apart from the twelve
    ambiguous words every test name and city is unseen in training. Twelve words (Florence,
    Sydney, Austin, ...) are a person in some sentences and a place in others, in both sets:
    only the context decides.
    """
    g = torch.Generator().manual_seed(seed)
    split = [_split_names(names, g) for names in (_FIRST, _LAST, _PLACES)]

    def make(n: int, part: int) -> tuple[list, list]:
        first, last, places = (s[part] for s in split)

        def choose(options):
            return options[int(torch.randint(len(options), (1,), generator=g))]

        def pick(kind: str) -> list[str]:
            r = float(torch.rand(1, generator=g))
            if kind == "PER":
                name = [choose(_BOTH if r < 0.2 else first)]
                return name + [choose(last)] if float(torch.rand(1, generator=g)) < 0.6 else name
            if kind == "LOC":
                return (choose(_BOTH) if r < 0.2 else choose(places)).split()
            year = str(1950 + int(torch.randint(70, (1,), generator=g)))
            return [choose(_MONTHS), year] if r < 0.4 else [year]

        words, tags = [], []
        for _ in range(n):
            w, t = _fill(choose(_TEMPLATES), pick)
            words.append(w)
            tags.append(t)
        return words, tags

    train_words, train_tags = make(n_train, 0)
    test_words, test_tags = make(n_test, 1)
    return TaggingTask(train_words, train_tags, test_words, test_tags)


# (3) Extractive QA: a question about one of two people, answered by a span of the context.

_JOBS = ("teacher|nurse|pilot|baker|chemist|lawyer|carpenter|journalist|software engineer|"
         "bus driver|data scientist|civil engineer|librarian|farmer").split("|")
_QUESTIONS = {  # question template -> the fact it asks for
    "where was {P} born ?": "place",
    "in which city was {P} born ?": "place",
    "when was {P} born ?": "year",
    "in what year was {P} born ?": "year",
    "what does {P} do ?": "job",
    "what is the job of {P} ?": "job",
}


@dataclass(frozen=True)
class QAExample:
    """One question about a context; the answer is ``context[start : end + 1]`` (words)."""

    question: list[str]
    context: list[str]
    start: int  # first word of the answer in the context
    end: int  # last word of the answer, inclusive

    @property
    def answer(self) -> str:
        return " ".join(self.context[self.start:self.end + 1])


def qa_task(n_train: int = 600, n_test: int = 200, seed: int = 0) -> tuple[list, list]:
    """(train, test): lists of :class:`QAExample` about two people each (Lesson 7, §5).

    Each context states, for two people, where and when they were born and their job, e.g.
    "Ada Borg was born in Lima in 1961 and is a pilot . Ken Wirth was born in ...". The
    question asks for one fact about one of them, so the model must find the right person and
    then the right kind of span; the other person's facts are distractors of the same kind.
    Names and cities are split as in :func:`tagging_task`: the test set's are never trained on.
    """
    g = torch.Generator().manual_seed(seed + 1)
    split = [_split_names(names, g) for names in (_FIRST, _LAST, _PLACES)]
    templates = list(_QUESTIONS)

    def choose(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    def make(n: int, part: int) -> list[QAExample]:
        first, last, places = (s[part] for s in split)
        out = []
        for _ in range(n):
            people = []
            while len(people) < 2:
                person = f"{choose(first)} {choose(last)}"
                if person not in people:
                    people.append(person)
            context, spans = [], []
            for person in people:
                facts = {"place": choose(places).split(), "job": choose(_JOBS).split(),
                         "year": [str(1940 + int(torch.randint(70, (1,), generator=g)))]}
                where = {}
                context += person.split() + ["was", "born", "in"]
                where["place"] = (len(context), len(context) + len(facts["place"]) - 1)
                context += facts["place"] + ["in"]
                where["year"] = (len(context), len(context))
                context += facts["year"] + ["and", "is", "a"]
                where["job"] = (len(context), len(context) + len(facts["job"]) - 1)
                context += facts["job"] + ["."]
                spans.append(where)
            k = int(torch.randint(2, (1,), generator=g))  # whom the question is about
            template = choose(templates)
            question = template.replace("{P}", people[k]).split()
            start, end = spans[k][_QUESTIONS[template]]
            out.append(QAExample(question, context, start, end))
        return out

    return make(n_train, 0), make(n_test, 1)


# --- Encoding the tasks for MiniLM's tokenizer ---------------------------------------------------


def encode_texts(tokenizer, texts: list[str], max_length: int = 48) -> dict:
    """Sentences -> input_ids, token_type_ids, attention_mask, each (b, n <= max_length)."""
    return dict(tokenizer(list(texts), padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt"))


def encode_words(tokenizer, words: list[str]) -> tuple[list[int], list[int]]:
    """WordPiece ids of a list of words and, for each piece, the index of its word."""
    ids, word_of = [], []
    for w, word in enumerate(words):
        pieces = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word)) or [
            tokenizer.unk_token_id]
        ids += pieces
        word_of += [w] * len(pieces)
    return ids, word_of


def _pad_rows(rows: list[list[int]], value: int) -> torch.Tensor:
    n = max(len(r) for r in rows)
    out = torch.full((len(rows), n), value, dtype=torch.long)  # (b, n)
    for k, r in enumerate(rows):
        out[k, :len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def encode_tagged(tokenizer, sentences: list[list[str]], tags: list[list[str]] | None = None,
                  tag_names: Sequence[str] = TAGS, max_length: int = 48) -> dict:
    """Word-tagged sentences -> token tensors, with each word's tag on its *first* piece.

    (Lesson 7, §4.) Returns ``input_ids``, ``attention_mask``, ``labels`` (b, n) — the tag id on
    a word's first piece, ``-100`` on its other pieces, on [CLS], [SEP] and [PAD], which the
    loss skips — and ``first_piece`` (b, n) True where a word starts, so that word-level tags can
    be read back from token-level predictions.
    """
    index = {t: k for k, t in enumerate(tag_names)}
    ids_rows, label_rows, first_rows = [], [], []
    for k, words in enumerate(sentences):
        ids, word_of = encode_words(tokenizer, words)
        if len(ids) + 2 > max_length:
            raise ValueError(f"sentence {k} needs {len(ids) + 2} tokens, more than "
                             f"max_length={max_length}; pass a larger max_length.")
        first = [i == 0 or word_of[i] != word_of[i - 1] for i in range(len(ids))]
        labels = [IGNORE_INDEX] * len(ids)
        if tags is not None:
            if len(tags[k]) != len(words):
                raise ValueError(f"sentence {k} has {len(words)} words but {len(tags[k])} tags.")
            for i, is_first in enumerate(first):
                if is_first:
                    labels[i] = index[tags[k][word_of[i]]]
        ids_rows.append([tokenizer.cls_token_id, *ids, tokenizer.sep_token_id])
        label_rows.append([IGNORE_INDEX, *labels, IGNORE_INDEX])
        first_rows.append([0, *map(int, first), 0])
    input_ids = _pad_rows(ids_rows, tokenizer.pad_token_id)
    return {
        "input_ids": input_ids,
        "attention_mask": (_pad_rows([[1] * len(r) for r in ids_rows], 0)),
        "labels": _pad_rows(label_rows, IGNORE_INDEX),
        "first_piece": _pad_rows(first_rows, 0).bool(),
    }


def word_tags(logits: torch.Tensor, first_piece: torch.Tensor,
              tag_names: Sequence[str] = TAGS) -> list[list[str]]:
    """Token-level logits (b, n, T) -> one tag per word, read on each word's first piece."""
    best = logits.argmax(dim=-1)  # (b, n)
    return [[tag_names[t] for t in best[k][first_piece[k]].tolist()] for k in range(len(best))]


def encode_qa(tokenizer, examples: list[QAExample], max_length: int = 64) -> dict:
    """``[CLS] question [SEP] context [SEP]`` for each example, with the answer's token span.

    (Lesson 7, §5.) Returns ``input_ids``, ``token_type_ids`` (0 question, 1 context),
    ``attention_mask``, ``context_mask`` (True on the context's pieces), ``starts`` and ``ends``
    (b,) — the first piece of the answer's first word and the last piece of its last word —
    and ``word_of`` (b, n): the context word of each piece, -1 elsewhere.
    """
    rows, segments, contexts, word_rows, starts, ends = [], [], [], [], [], []
    for k, ex in enumerate(examples):
        q_ids, _ = encode_words(tokenizer, ex.question)
        c_ids, word_of = encode_words(tokenizer, ex.context)
        n = len(q_ids) + len(c_ids) + 3
        if n > max_length:
            raise ValueError(f"example {k} needs {n} tokens, more than max_length={max_length}; "
                             "pass a larger max_length.")
        offset = len(q_ids) + 2  # where the context begins
        rows.append([tokenizer.cls_token_id, *q_ids, tokenizer.sep_token_id, *c_ids,
                     tokenizer.sep_token_id])
        segments.append([0] * offset + [1] * (len(c_ids) + 1))
        contexts.append([0] * offset + [1] * len(c_ids) + [0])
        word_rows.append([-1] * offset + word_of + [-1])
        starts.append(offset + word_of.index(ex.start))
        ends.append(offset + len(word_of) - 1 - word_of[::-1].index(ex.end))
    return {
        "input_ids": _pad_rows(rows, tokenizer.pad_token_id),
        "token_type_ids": _pad_rows(segments, 0),
        "attention_mask": _pad_rows([[1] * len(r) for r in rows], 0),
        "context_mask": _pad_rows(contexts, 0).bool(),
        "starts": torch.tensor(starts),
        "ends": torch.tensor(ends),
        "word_of": _pad_rows(word_rows, -1),
    }


def span_text(example: QAExample, word_of: torch.Tensor, start: int, end: int) -> str:
    """The context words that the token span (start, end) touches, joined by spaces."""
    first, last = int(word_of[start]), int(word_of[end])
    return " ".join(example.context[first:last + 1])


def qa_scores(examples: list[QAExample], word_of: torch.Tensor, starts, ends) -> dict:
    """Mean exact match and token F1 (in %) of predicted token spans against the gold answers."""
    texts = [span_text(ex, word_of[k], int(starts[k]), int(ends[k]))
             for k, ex in enumerate(examples)]
    em = sum(exact_match(t, ex.answer) for t, ex in zip(texts, examples)) / len(examples)
    f1 = sum(token_f1(t, ex.answer) for t, ex in zip(texts, examples)) / len(examples)
    return {"exact_match": 100 * em, "f1": 100 * f1, "answers": texts}


# --- Training with a learning curve ---------------------------------------------------------------


def with_evaluations(batches: Iterable, model: nn.Module, evaluate: Callable[[], float],
                     every: int, curve: list) -> Iterator:
    """Pass ``batches`` through, calling ``evaluate()`` before batches 0, every, 2 every, ...

    (Lesson 7, §3.) Wrapping the batches lets ``train.train`` run unchanged while a learning
    curve is recorded: ``curve`` receives (step, value) pairs. The model is put in eval mode
    (no dropout) and back in train mode around each evaluation.
    """
    for step, batch in enumerate(batches):
        if step % every == 0:
            model.eval()
            with torch.no_grad():
                curve.append((step, float(evaluate())))
            model.train()
        yield batch


def _logits_in_batches(fn, tensors: dict, keys: Sequence[str], batch_size: int = 64):
    n = len(tensors[keys[0]])
    outs = [fn(*(tensors[k][s:s + batch_size] for k in keys)) for s in range(0, n, batch_size)]
    if isinstance(outs[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*outs))
    return torch.cat(outs)


def _finish(curve: list, final: float, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    curve = [*curve, (steps, final)]
    return torch.tensor([s for s, _ in curve]), torch.tensor([v for _, v in curve])


def frozen_outputs(encoder: nn.Module, tensors: dict, batch_size: int = 64,
                   progress: bool = False, all_layers: bool = False) -> dict:
    """Run a frozen encoder once over a data set: ``hidden`` (N, n, d) and ``pooled`` (N, d).

    (Lesson 7, §2.) A linear probe never changes the encoder, so its outputs can be computed
    once and reused for every step. Rows are processed in order of length, each batch cut to
    its longest row, so little time goes on padding; the padding mask makes the result the same
    as one row at a time (Lesson 3, §5). ``hidden`` is zero at the padded positions.
    With ``all_layers=True`` the result also holds ``layers`` (L + 1, N, n, d): the embedding
    output H^(0) and every block's output H^(1) ... H^(L), from the same single pass
    (Lesson 7, §4 probes each of them).
    """
    from encoderlab.course.train import tqdm

    ids, mask = tensors["input_ids"], tensors["attention_mask"]
    segments = tensors.get("token_type_ids")
    lengths = mask.sum(dim=1)  # (N,)
    order = torch.argsort(lengths, stable=True)
    n_rows, n = ids.shape
    d = encoder.config.d_model
    hidden = torch.zeros(n_rows, n, d)  # (N, n, d)
    pooled = torch.zeros(n_rows, d)  # (N, d)
    layers = None
    was_training = encoder.training
    encoder.eval()
    with torch.no_grad():
        for start in tqdm(range(0, n_rows, batch_size), disable=not progress,
                          desc="frozen encoder", mininterval=0.5):
            rows = order[start:start + batch_size]
            m = int(lengths[rows].max())  # this batch's longest row
            out = encoder(ids[rows, :m], attention_mask=mask[rows, :m],
                          token_type_ids=None if segments is None else segments[rows, :m])
            hidden[rows, :m] = out.last_hidden_state * mask[rows, :m, None]
            if all_layers:
                if layers is None:
                    layers = torch.zeros(len(out.hidden_states), n_rows, n, d)  # (L+1, N, n, d)
                for k, h in enumerate(out.hidden_states):  # h: (b, m, d)
                    layers[k, rows, :m] = h * mask[rows, :m, None]
            if out.pooler_output is not None:
                pooled[rows] = out.pooler_output
    encoder.train(was_training)
    if all_layers:
        return {"hidden": hidden, "pooled": pooled, "layers": layers}
    return {"hidden": hidden, "pooled": pooled}


def train_with_curve(model: nn.Module, batches: Iterable, loss_fn: Callable,
                     evaluate: Callable[[], float], steps: int, lr: float,
                     eval_every: int = 10, seed: int = 0, progress: bool = False,
                     description: str | None = None) -> dict:
    """``train.train`` with a held-out evaluation every ``eval_every`` steps and at the end.

    (Lesson 7, §3.) Returns ``{"loss": (steps,), "steps": (k,), "values": (k,)}`` tensors.
    """
    from encoderlab.course.train import train

    curve: list = []
    history = train(model, with_evaluations(batches, model, evaluate, eval_every, curve),
                    loss_fn, steps=steps, lr=lr, seed=seed, progress=progress,
                    description=description)
    with torch.no_grad():
        final = float(evaluate())
    steps_t, values = _finish(curve, final, steps)
    return {"loss": torch.tensor(history), "steps": steps_t, "values": values}


# --- Recipes: the fine-tuning runs, recorded as results (python -m encoderlab train l7-...) -----

FINETUNE = {  # the settings of the recorded runs; the notebook prints them from the metadata
    "batch_size": 16,
    "lr": 5e-5,
    "eval_every": 10,
    "classify_steps": 100,
    "tag_steps": 100,
    "extract_steps": 150,
    "seed": 0,
}


def _minilm_copy():
    from encoderlab.pretrained import load_minilm

    tokenizer, encoder = load_minilm()
    return tokenizer, copy.deepcopy(encoder)


def _sorted_logits(model: nn.Module, x: dict, batch_size: int = 64) -> torch.Tensor:
    """A classifier's logits for every row of ``x``, computed in batches of similar length."""
    lengths = x["attention_mask"].sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    out = None
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        m = int(lengths[rows].max())  # cut the batch to its longest row
        logits = model(x["input_ids"][rows, :m], x["attention_mask"][rows, :m])
        if out is None:
            out = torch.zeros(len(order), *logits.shape[1:])
        out[rows] = logits
    return out


def classify_run(pooling: str, steps: int, progress: bool = True, task=None):
    """Fine-tune MiniLM + :class:`SequenceClassifier` on :func:`topic_task`; return the results."""
    from encoderlab.course.train import train
    from encoderlab.data import shuffled_batches

    task = task or topic_task()
    tokenizer, encoder = _minilm_copy()
    train_x = encode_texts(tokenizer, task.train_texts)
    test_x = encode_texts(tokenizer, task.test_texts)
    torch.manual_seed(FINETUNE["seed"])
    model = SequenceClassifier(encoder, len(task.classes), pooling=pooling)

    def predict():
        return _sorted_logits(model, test_x)

    def loss_fn(m, b):
        width = int(b[1].sum(dim=1).max())  # drop the padding columns this batch doesn't need
        return F.cross_entropy(m(b[0][:, :width], b[1][:, :width]), b[2])

    curve: list = []
    batches = shuffled_batches(train_x["input_ids"], train_x["attention_mask"], task.train_labels,
                               batch_size=FINETUNE["batch_size"], seed=FINETUNE["seed"])
    batches = with_evaluations(batches, model, lambda: 100 * accuracy(predict().argmax(-1),
                                                                      task.test_labels),
                               FINETUNE["eval_every"], curve)
    start = time.perf_counter()
    history = train(model, batches, loss_fn, steps=steps, lr=FINETUNE["lr"],
                    seed=FINETUNE["seed"], progress=progress,
                    description=f"fine-tune ({pooling})")
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        logits = predict()
    steps_t, acc = _finish(curve, 100 * accuracy(logits.argmax(-1), task.test_labels), steps)
    return {f"{pooling}.curve_steps": steps_t, f"{pooling}.curve_accuracy": acc,
            f"{pooling}.loss": torch.tensor(history), f"{pooling}.test_logits": logits}, seconds


def _classify_recipe(pooling: str):
    def recipe(steps: int | None = None, progress: bool = True):
        from encoderlab.data import python_docs_corpus

        steps = steps or FINETUNE["classify_steps"]
        task = topic_task()
        tensors, seconds = classify_run(pooling, steps, progress, task=task)
        tensors["test_labels"] = task.test_labels
        return tensors, _metadata(steps, [seconds], task=repr(task),
                                  classes="|".join(task.classes), pooling=pooling,
                                  corpus=python_docs_corpus().fingerprint,
                                  test_texts=texts_fingerprint(task.test_texts),
                                  train_texts=texts_fingerprint(task.train_texts))

    name = {"cls": "[CLS]", "mean": "mean"}[pooling]
    recipe.__doc__ = (f"Lesson 7: fine-tune MiniLM on the 4-class docs-topic task, {name} "
                      "pooling.")
    return recipe


def texts_fingerprint(texts: Sequence[str]) -> str:
    """16 hex digits that identify a list of texts, in order (Lesson 7, §3).

    A recorded run stores the fingerprint of the sentences it was scored on, and the lesson
    checks it, so recorded logits are never read against a different test set.
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts) or not texts:
        raise ValueError("texts must be a non-empty list of strings; for one text pass [text].")
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]


def _metadata(steps, seconds, **extra) -> dict:
    return {"steps": str(steps), "seconds_per_step": f"{sum(seconds) / len(seconds):.2f}",
            **{k: str(v) for k, v in FINETUNE.items() if not k.endswith("_steps")},
            "threads": str(torch.get_num_threads()), **extra}


def _recipe_tag(steps: int | None = None, progress: bool = True):
    """Lesson 7: fine-tune MiniLM + a token classifier on the BIO tagging task."""
    from encoderlab.course.train import train
    from encoderlab.data import shuffled_batches

    steps = steps or FINETUNE["tag_steps"]
    task = tagging_task()
    tokenizer, encoder = _minilm_copy()
    train_x = encode_tagged(tokenizer, task.train_words, task.train_tags)
    test_x = encode_tagged(tokenizer, task.test_words, task.test_tags)
    torch.manual_seed(FINETUNE["seed"])
    model = TokenClassifier(encoder, len(task.tags))

    def predict():
        return _logits_in_batches(model, test_x, ["input_ids", "attention_mask"])

    def evaluate():
        predicted = word_tags(predict(), test_x["first_piece"])
        return 100 * entity_scores(task.test_tags, predicted)["f1"]

    def loss_fn(m, b):
        logits = m(b[0], b[1])  # (b, n, T)
        return F.cross_entropy(logits.flatten(0, 1), b[2].flatten(), ignore_index=IGNORE_INDEX)

    curve: list = []
    batches = shuffled_batches(train_x["input_ids"], train_x["attention_mask"], train_x["labels"],
                               batch_size=FINETUNE["batch_size"], seed=FINETUNE["seed"])
    start = time.perf_counter()
    history = train(model, with_evaluations(batches, model, evaluate, FINETUNE["eval_every"],
                                            curve),
                    loss_fn, steps=steps, lr=FINETUNE["lr"], seed=FINETUNE["seed"],
                    progress=progress, description="fine-tune (tags)")
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        logits = predict()
    predicted = word_tags(logits, test_x["first_piece"])
    steps_t, f1 = _finish(curve, 100 * entity_scores(task.test_tags, predicted)["f1"], steps)
    index = {t: k for k, t in enumerate(task.tags)}
    tag_ids = _pad_rows([[index[t] for t in row] for row in predicted], -1)  # (N, words)
    return ({"curve_steps": steps_t, "curve_f1": f1, "loss": torch.tensor(history),
             "test_predicted": tag_ids},
            _metadata(steps, [seconds], task=repr(task), tags="|".join(task.tags)))


def _recipe_extract(steps: int | None = None, progress: bool = True):
    """Lesson 7: fine-tune MiniLM + a span extractor on the synthetic two-person QA task."""
    from encoderlab.course.train import train
    from encoderlab.data import shuffled_batches

    steps = steps or FINETUNE["extract_steps"]
    train_ex, test_ex = qa_task()
    tokenizer, encoder = _minilm_copy()
    train_x, test_x = encode_qa(tokenizer, train_ex), encode_qa(tokenizer, test_ex)
    torch.manual_seed(FINETUNE["seed"])
    model = SpanExtractor(encoder)
    keys = ["input_ids", "attention_mask", "token_type_ids", "context_mask"]

    def predict():
        return _logits_in_batches(model, test_x, keys)

    def evaluate():
        s, e, _ = best_span(*predict(), test_x["context_mask"])
        return qa_scores(test_ex, test_x["word_of"], s, e)["exact_match"]

    curve: list = []
    batches = shuffled_batches(*(train_x[k] for k in keys), train_x["starts"], train_x["ends"],
                               batch_size=FINETUNE["batch_size"], seed=FINETUNE["seed"])
    start = time.perf_counter()
    history = train(model, with_evaluations(batches, model, evaluate, FINETUNE["eval_every"],
                                            curve),
                    lambda m, b: span_loss(*m(*b[:4]), b[4], b[5]), steps=steps,
                    lr=FINETUNE["lr"], seed=FINETUNE["seed"], progress=progress,
                    description="fine-tune (spans)")
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        start_logits, end_logits = predict()
    s, e, _ = best_span(start_logits, end_logits, test_x["context_mask"])
    scores = qa_scores(test_ex, test_x["word_of"], s, e)
    steps_t, em = _finish(curve, scores["exact_match"], steps)
    return ({"curve_steps": steps_t, "curve_exact_match": em, "loss": torch.tensor(history),
             "test_starts": s, "test_ends": e, "test_f1": torch.tensor(scores["f1"]),
             "start_logits": start_logits[:16].nan_to_num(neginf=-1e4),
             "end_logits": end_logits[:16].nan_to_num(neginf=-1e4)},
            _metadata(steps, [seconds], task=f"{len(train_ex)} training and {len(test_ex)} "
                                              "test questions"))


RECIPES = {
    "l7-classify-mean": _classify_recipe("mean"),
    "l7-classify-cls": _classify_recipe("cls"),
    "l7-tag": _recipe_tag,
    "l7-extract": _recipe_extract,
}

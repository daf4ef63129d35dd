"""Fine-tuning: freezing, heads' decisions, metrics, encodings and training curves (Lesson 7).

A pretrained encoder turns n tokens into n vectors. A task adds one small layer on top, the
heads of :mod:`encoderlab.heads`: :class:`~encoderlab.heads.SequenceClassifier` (one vector
per sequence, §2-§3), :class:`~encoderlab.heads.TokenClassifier` (BIO tags, §4) and
:class:`~encoderlab.heads.SpanExtractor` (answer spans, §5). The three tasks are in
:mod:`encoderlab.lessons.l07_tasks`; the recorded fine-tuning runs in
:mod:`encoderlab.lessons.l07_recipes`. This module holds the rest:

- :func:`freeze`: a *linear probe* trains only the head on a frozen encoder; *fine-tuning*
  trains both (§3). :func:`frozen_outputs` runs the frozen encoder once, and
  :func:`train_probe` trains a head on what it stored;
- the metrics papers report: accuracy and the confusion matrix, entity-level precision /
  recall / F1 over BIO tags (as CoNLL's conlleval and seqeval count them), and SQuAD's exact
  match and token F1; :func:`best_span` reads an answer off the span head's scores;
- encoding the tasks for MiniLM's tokenizer, and :func:`train_with_curve`, training with a
  held-out learning curve.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from encoderlab.data import shuffled_batches
from encoderlab.lessons.l07_tasks import TAGS, QAExample
from encoderlab.objectives import IGNORE_INDEX
from encoderlab.stats import sign_test
from encoderlab.training import tqdm, train
from encoderlab.validate import check_positive_int

__all__ = [
    "pad_rows",
    "logits_in_batches",
    "finish_curve",
    "freeze",
    "unfreeze",
    "count_trainable",
    "best_span",
    "accuracy",
    "paired_sign_test",
    "confusion_matrix",
    "bio_to_spans",
    "entity_scores",
    "normalize_answer",
    "exact_match",
    "token_f1",
    "encode_texts",
    "encode_words",
    "encode_tagged",
    "word_tags",
    "encode_qa",
    "span_text",
    "qa_scores",
    "with_evaluations",
    "frozen_outputs",
    "train_with_curve",
    "train_probe",
    "texts_fingerprint",
]


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


# --- §5 Reading an answer off the span head ----------------------------------------------------


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
    check_positive_int(max_tokens, "max_tokens")
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


def pad_rows(rows: list[list[int]], value: int) -> torch.Tensor:
    """Rows of different lengths as one (b, n) long tensor, padded on the right with ``value``
    (Lesson 7: the tasks' token ids, segments, masks and labels)."""
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
    input_ids = pad_rows(ids_rows, tokenizer.pad_token_id)
    return {
        "input_ids": input_ids,
        "attention_mask": (pad_rows([[1] * len(r) for r in ids_rows], 0)),
        "labels": pad_rows(label_rows, IGNORE_INDEX),
        "first_piece": pad_rows(first_rows, 0).bool(),
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
        "input_ids": pad_rows(rows, tokenizer.pad_token_id),
        "token_type_ids": pad_rows(segments, 0),
        "attention_mask": pad_rows([[1] * len(r) for r in rows], 0),
        "context_mask": pad_rows(contexts, 0).bool(),
        "starts": torch.tensor(starts),
        "ends": torch.tensor(ends),
        "word_of": pad_rows(word_rows, -1),
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


def logits_in_batches(fn, tensors: dict, keys: Sequence[str], batch_size: int = 64):
    """``fn`` on ``tensors[keys]`` in slices of ``batch_size`` rows, the outputs concatenated
    (a tuple of outputs concatenated part by part) (Lesson 7: scoring a test set)."""
    n = len(tensors[keys[0]])
    outs = [fn(*(tensors[k][s:s + batch_size] for k in keys)) for s in range(0, n, batch_size)]
    if isinstance(outs[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*outs))
    return torch.cat(outs)


def finish_curve(curve: list, final: float, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A learning curve [(step, value), ...] closed with the final value at ``steps``, as two
    tensors (steps, values) for an artefact (Lesson 7)."""
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
    curve: list = []
    history = train(model, with_evaluations(batches, model, evaluate, eval_every, curve),
                    loss_fn, steps=steps, lr=lr, seed=seed, progress=progress,
                    description=description)
    with torch.no_grad():
        final = float(evaluate())
    steps_t, values = finish_curve(curve, final, steps)
    return {"loss": torch.tensor(history), "steps": steps_t, "values": values}


def train_probe(head: nn.Module, tensors: Sequence[torch.Tensor], loss_fn: Callable,
                evaluate: Callable[[], float], steps: int, settings: dict, seed: int = 0,
                train_seed: int | None = None) -> dict:
    """A linear probe: ``head`` trained on stored encoder outputs, with a learning curve
    (Lesson 7, §2, §4, §5).

    ``tensors`` are the stored inputs and targets, drawn in shuffled batches of
    ``settings["batch_size"]`` (seeded with ``seed``); training is :func:`train_with_curve`
    at ``settings["lr"]``, evaluating every ``settings["eval_every"]`` steps (seeded with
    ``train_seed``, default ``seed``). A probe multiplies small matrices: one thread is as fast
    as two and stays fast on a busy CPU, so it runs on one; the thread count is restored
    afterwards, also when training fails.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        batches = shuffled_batches(*tensors, batch_size=settings["batch_size"], seed=seed)
        return train_with_curve(head, batches, loss_fn, evaluate, steps=steps, lr=settings["lr"],
                                eval_every=settings["eval_every"],
                                seed=seed if train_seed is None else train_seed)
    finally:
        torch.set_num_threads(threads)


def texts_fingerprint(texts: Sequence[str]) -> str:
    """16 hex digits that identify a list of texts, in order (Lesson 7, §3).

    A recorded run stores the fingerprint of the sentences it was scored on, and the lesson
    checks it, so recorded logits are never read against a different test set.
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts) or not texts:
        raise ValueError("texts must be a non-empty list of strings; for one text pass [text].")
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]

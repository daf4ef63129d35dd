"""Sentence-pair classification: two segments and their token types (Lesson 7, §8).

BERT reads a pair of texts as one sequence, ``[CLS] A [SEP] B [SEP]``, and adds a learned
*segment* (token type) embedding to every token: type 0 for ``[CLS]``, A and the first
``[SEP]``, type 1 for B and the last ``[SEP]``. A classifier on the ``[CLS]`` vector then
decides something about the pair. The task here is BERT's next-sentence prediction, built
offline from the frozen docstrings of the standard library:

- :func:`next_sentence_task`: does sentence B follow sentence A in the same docstring? Half
  the pairs are two consecutive sentences, half pair A with a sentence of another docstring;
  train and test come from disjoint sets of docstrings;
- :func:`encode_pairs`: the pairs for MiniLM's tokenizer, with two segments or with one (every
  token type 0, the ablation);
- :func:`pair_run` and the recipe ``l7-pairs``: fine-tuning with the loop and settings of the
  other Lesson 7 runs (:data:`~encoderlab.lessons.l07_recipes.FINETUNE`), three seeds; each
  run is also scored on the test pairs with A and B swapped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from encoderlab.course.train import train
from encoderlab.data import read_frozen, shuffled_batches, without_shared_spans
from encoderlab.heads import SequenceClassifier
from encoderlab.lessons.l07_finetune import _logits_in_batches, texts_fingerprint
from encoderlab.lessons.l07_recipes import FINETUNE, _metadata, _minilm_copy, run_all

__all__ = ["PairTask", "docstrings", "next_sentence_task", "encode_pairs", "pair_run",
           "PAIRS", "RECIPES"]

LABELS = ("not next", "next")  # class 0, class 1


@dataclass(frozen=True)
class PairTask:
    """Sentence pairs (A, B) with label 1 if B follows A, 0 if not; train and test (§8)."""

    train_pairs: list[tuple[str, str]]
    train_labels: torch.Tensor  # (N_train,)
    test_pairs: list[tuple[str, str]]
    test_labels: torch.Tensor  # (N_test,)
    classes: tuple[str, ...] = LABELS

    def __repr__(self) -> str:
        return (f"PairTask({len(self.train_pairs)} training and {len(self.test_pairs)} test "
                f"pairs, classes {list(self.classes)})")


def docstrings() -> list[list[str]]:
    """The prose sentences of every standard-library docstring that has two or more, in order
    (the frozen file ``corpora/docstring-pairs.json.gz``, CPython 3.11's text)."""
    return [list(d) for d in read_frozen("docstring-pairs")["docstrings"]]


def _pairs(docs: list[list[str]], n: int, g: torch.Generator, part: str):
    """``n`` pairs from ``docs``: n // 2 consecutive (label 1), the rest A + another doc's B
    (label 0), B drawn from the sentences after the first, as a positive's B always is."""
    consecutive = [(k, i) for k, doc in enumerate(docs) for i in range(len(doc) - 1)]
    if len(consecutive) < n:
        raise ValueError(f"the {part} docstrings hold only {len(consecutive)} consecutive pairs; "
                         f"ask for fewer than {n}.")
    order = torch.randperm(len(consecutive), generator=g).tolist()[:n]
    pairs, labels = [], []
    for rank, c in enumerate(order):
        k, i = consecutive[c]
        a = docs[k][i]
        if rank < n // 2:
            b, label = docs[k][i + 1], 1
        else:  # a sentence of another docstring of the same split
            other = k
            while other == k:
                other = int(torch.randint(len(docs), (1,), generator=g))
            # never a docstring's first sentence: a positive's B never is one, so B's
            # position must not tell the labels apart
            b = docs[other][1 + int(torch.randint(len(docs[other]) - 1, (1,), generator=g))]
            label = 0
        pairs.append((a, b))
        labels.append(label)
    return pairs, labels


def next_sentence_task(n_train: int = 800, n_test: int = 200, test_fraction: float = 0.25,
                       seed: int = 0) -> PairTask:
    """Does sentence B follow sentence A in the same docstring? (Lesson 7, §8.)

    The docstrings of :func:`docstrings` are split at random (``seed``) into a training part and
    a test part (``test_fraction`` of them), so no docstring gives sentences to both. From each
    part, pairs of consecutive sentences (A, B) are drawn; half keep their B (label 1, "next"),
    the other half get a random sentence of another docstring of the same part, never its
    first sentence (label 0), so that B's position in its docstring is the same kind for both.
    A test pair that repeats a training sentence or shares an 8-word span with one is passed
    over (some sentences recur across docstrings), as is a repeated test pair; then the test
    set is cut to ``n_test`` pairs, half of each label. Both sets are shuffled.
    """
    if n_train % 2 or n_test % 2:
        raise ValueError(f"n_train and n_test must be even (half of each label), got {n_train} "
                         f"and {n_test}.")
    docs = docstrings()
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(docs), generator=g).tolist()
    cut = round(test_fraction * len(docs))
    test_docs, train_docs = [docs[i] for i in order[:cut]], [docs[i] for i in order[cut:]]
    train_pairs, train_labels = _pairs(train_docs, n_train, g, "training")
    # draw more test pairs than needed, drop those that share a span with training, balance
    candidates, labels = _pairs(test_docs, 2 * n_test, g, "test")
    train_sentences = {s for doc in train_docs for s in doc}
    fresh = set(without_shared_spans(candidates, sorted(train_sentences)))
    test_pairs, test_labels, count = [], [], [0, 0]
    for pair, label in zip(candidates, labels):
        if (pair in fresh and not set(pair) & train_sentences and pair not in test_pairs
                and count[label] < n_test // 2):
            test_pairs.append(pair)
            test_labels.append(label)
            count[label] += 1
    if min(count) < n_test // 2:
        raise ValueError(f"only {count} test pairs per label share no span with training; "
                         f"ask for fewer than n_test = {n_test}.")

    def shuffled(pairs, labels):
        perm = torch.randperm(len(pairs), generator=g).tolist()
        return [pairs[i] for i in perm], torch.tensor([labels[i] for i in perm])

    train_pairs, train_y = shuffled(train_pairs, train_labels)
    test_pairs, test_y = shuffled(test_pairs, test_labels)
    return PairTask(train_pairs, train_y, test_pairs, test_y)


def encode_pairs(tokenizer, pairs: list[tuple[str, str]], max_length: int = 96,
                 segments: bool = True) -> dict:
    """Pairs -> ``[CLS] A [SEP] B [SEP]``: input_ids, token_type_ids, attention_mask (b, n).

    (Lesson 7, §8.) The tokenizer writes token type 0 on ``[CLS] A [SEP]`` and 1 on
    ``B [SEP]``; a pair longer than ``max_length`` loses tokens from its longer sentence first.
    ``segments=False`` sets every token type to 0: the same tokens, the pair read as one
    segment (the ``[SEP]`` between A and B stays).
    """
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError("pairs must be a non-empty list of (A, B) tuples of two strings.")
    x = dict(tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True,
                       truncation="longest_first", max_length=max_length, return_tensors="pt"))
    if not segments:
        x["token_type_ids"] = torch.zeros_like(x["token_type_ids"])
    return x


PAIRS = {"steps": 100, "seeds": (0, 1, 2), "pooling": "cls", "max_length": 96}


def _swapped(pairs):
    return [(b, a) for a, b in pairs]


def pair_run(task: PairTask, segments: bool, seed: int, steps: int,
             progress: bool = True) -> tuple[dict, float]:
    """Fine-tune MiniLM + a [CLS] classifier on ``task``; test logits (N, 2) on the pairs as
    given and with A and B swapped, and the training loss. Settings: ``FINETUNE`` (batch 16,
    learning rate 5e-5); ``seed`` seeds the head, the batch order and dropout."""
    tokenizer, encoder = _minilm_copy()
    enc = {name: encode_pairs(tokenizer, pairs, PAIRS["max_length"], segments)
           for name, pairs in (("train", task.train_pairs), ("test", task.test_pairs),
                               ("swapped", _swapped(task.test_pairs)))}
    torch.manual_seed(seed)
    model = SequenceClassifier(encoder, len(task.classes), pooling=PAIRS["pooling"])
    keys = ["input_ids", "attention_mask", "token_type_ids"]

    def loss_fn(m, b):
        n = int(b[1].sum(dim=1).max())  # drop the padding columns this batch doesn't need
        return F.cross_entropy(m(b[0][:, :n], b[1][:, :n], b[2][:, :n]), b[3])

    batches = shuffled_batches(*(enc["train"][k] for k in keys), task.train_labels,
                               batch_size=FINETUNE["batch_size"], seed=seed)
    start = time.perf_counter()
    history = train(model, batches, loss_fn, steps=steps, lr=FINETUNE["lr"], seed=seed,
                    progress=progress, description=f"pairs (segments={segments}, seed {seed})")
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        logits = {name: _logits_in_batches(model, enc[name], keys)
                  for name in ("test", "swapped")}
    return {"loss": torch.tensor(history), "test_logits": logits["test"],
            "swapped_logits": logits["swapped"]}, seconds


def _pair_job(seed: int, steps: int, progress: bool):
    return pair_run(next_sentence_task(), True, seed, steps, progress)


def _recipe_pairs(steps: int | None = None, progress: bool = True):
    """Lesson 7: fine-tune MiniLM on next-sentence pairs (two segments), three seeds."""
    steps = steps or PAIRS["steps"]
    task = next_sentence_task()
    tensors, seconds = {"test_labels": task.test_labels}, []
    configs = [(seed, steps, progress) for seed in PAIRS["seeds"]]
    for (seed, _, _), (run, s) in zip(configs, run_all(_pair_job, configs)):
        seconds.append(s)
        for key, value in run.items():
            tensors[f"seed{seed}.{key}"] = value
    flat = [f"{a}\t{b}" for a, b in task.test_pairs]
    return tensors, _metadata(steps, seconds, task=repr(task), pooling=PAIRS["pooling"],
                              max_length=PAIRS["max_length"],
                              seeds=" ".join(map(str, PAIRS["seeds"])),
                              test_pairs=texts_fingerprint(flat))


RECIPES = {"l7-pairs": _recipe_pairs}

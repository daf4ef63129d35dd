"""A cross-encoder that wins where pooled vectors cannot (Lesson 8, §5):
``python -m encoderlab train l8-cross``.

A bi-encoder pools each text into one vector before it sees the other; two sentences with the
same words in another order ("the dog bit the man" / "the man bit the dog") get nearly the
same vector. :func:`contrast_items` builds a designed test from templates: a query such as
"the old dog chased the young cat", its paraphrase in the other voice ("the young cat was
chased by the old dog"), and four wrong candidates built from the same words: the roles
reversed (in either voice), the adjectives swapped between the two nouns, and the paraphrase
negated. Nouns, verbs and adjectives are split: the test items use none of the training words.

The cross-encoder is MiniLM reading "[CLS] query [SEP] candidate [SEP]" in one pass, with a
one-output linear layer on the final [CLS] vector (:class:`PairScorer`). Only the last block
and that layer learn; the five blocks below are frozen, so their output for every training pair
is computed once (:func:`cache_pair_states`). The loss is the cross-entropy of picking the
paraphrase out of its group of five (:func:`rerank_run`). :func:`rerank_top_k` re-orders a
bi-encoder's top k with it; :func:`ivf_search` is the approximate nearest-neighbour search of
the same section.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab.data import shuffled_batches, trim_padding
from encoderlab.heads import pool
from encoderlab.lessons.l08_retrieval import run_block, search
from encoderlab.pretrained import load_minilm
from encoderlab.training import train, warmup_factor
from encoderlab.validate import check_int

__all__ = ["WORDS", "KINDS", "ContrastItem", "contrast_items", "CROSS", "bi_encoder_top_k",
           "cache_pair_states", "PairScorer", "warmup_then_decay", "rerank_run",
           "score_cached_pairs", "cross_encoder_scores", "rerank_top_k", "load_pair_scorer",
           "kmeans", "ivf_search", "RECIPES"]


# --- The designed test (Lesson 8, §5) -----------------------------------------------------------

WORDS = {  # (base, past, past participle) for verbs; no word is in both splits
    "train": {
        "nouns": ("dog", "cat", "horse", "fox", "teacher", "doctor", "farmer", "boy", "girl",
                  "bird", "king", "baker", "sailor", "student"),
        "verbs": (("chase", "chased", "chased"), ("bite", "bit", "bitten"),
                  ("see", "saw", "seen"), ("push", "pushed", "pushed"),
                  ("help", "helped", "helped"), ("follow", "followed", "followed"),
                  ("call", "called", "called"), ("kick", "kicked", "kicked"),
                  ("find", "found", "found"), ("carry", "carried", "carried")),
        "adjectives": ("old", "young", "small", "big", "happy", "angry", "hungry"),
    },
    "test": {
        "nouns": ("man", "woman", "lion", "pilot", "nurse", "wolf", "queen", "child", "singer",
                  "judge"),
        "verbs": (("pay", "paid", "paid"), ("attack", "attacked", "attacked"),
                  ("watch", "watched", "watched"), ("thank", "thanked", "thanked"),
                  ("teach", "taught", "taught"), ("pull", "pulled", "pulled"),
                  ("warn", "warned", "warned")),
        "adjectives": ("tall", "tired", "clever", "quiet", "brave", "rich"),
    },
}
KINDS = ("paraphrase", "roles reversed", "adjectives swapped", "negated",
         "roles reversed, query's voice")  # the candidates of an item, in this order


@dataclass(frozen=True)
class ContrastItem:
    """One item of the designed test: a query and five candidates, in the order of
    :data:`KINDS`; only the first (the paraphrase) means what the query means."""

    query: str
    candidates: tuple[str, ...]


def _sentence(agent, patient, verb, passive: bool, negated: bool = False) -> str:
    """"the old dog chased the young cat" or its passive; agent/patient are (adjective, noun)."""
    base, past, participle = verb
    a, p = " ".join(agent), " ".join(patient)
    if passive:
        return f"the {p} was {'not ' if negated else ''}{participle} by the {a}"
    return f"the {a} did not {base} the {p}" if negated else f"the {a} {past} the {p}"


def contrast_items(split: str, n: int, seed: int = 0) -> list[ContrastItem]:
    """``n`` items of the designed test built from ``split``'s words (Lesson 8, §5).

    Each draws two nouns, a verb, two adjectives and the query's voice at random (``seed``):
    the query states one event; the paraphrase states it in the other voice; the wrong
    candidates are the roles reversed (other voice, then the query's own voice, which repeats
    the query's words), the adjectives swapped between the nouns, and the paraphrase negated.
    """
    if split not in WORDS:
        raise ValueError(f"split must be one of {sorted(WORDS)}, got {split!r}.")
    check_int(n, "n", at_least=1)
    words, rng = WORDS[split], random.Random(seed)
    items = []
    for _ in range(n):
        n1, n2 = rng.sample(words["nouns"], 2)
        a1, a2 = rng.sample(words["adjectives"], 2)
        verb, passive = rng.choice(words["verbs"]), rng.random() < 0.5
        agent, patient = (a1, n1), (a2, n2)
        other = not passive
        items.append(ContrastItem(
            query=_sentence(agent, patient, verb, passive),
            candidates=(_sentence(agent, patient, verb, other),
                        _sentence(patient, agent, verb, other),
                        _sentence((a2, n1), (a1, n2), verb, other),
                        _sentence(agent, patient, verb, other, negated=True),
                        _sentence(patient, agent, verb, passive))))
    return items


CROSS = {  # the settings of the committed run, l8-cross
    "train_items": 600,
    "seed": 0,  # the items' seed and the run's
    "groups": 16,  # items per step, each with its 5 candidates
    "steps": 400,
    "lr": 3e-4,
    "warmup": 0.1,
    "pooling": "cls",  # the vector the score layer reads
    "max_length": 40,
}


def bi_encoder_top_k(query_vecs: torch.Tensor, passage_vecs: torch.Tensor, k: int):
    """(scores, indices), each (n_q, k): the bi-encoder's top ``k`` passages per query, best
    first, by cosine of unit vectors (Lesson 8, §5). A thin name for :func:`search`."""
    return search(query_vecs, passage_vecs, k)




def warmup_then_decay(steps: int, warmup: float):
    """schedule(step) for :func:`encoderlab.training.train`: the learning rate rises
    linearly over the first ``warmup`` share of ``steps``, then falls linearly to 0."""
    check_int(steps, "steps", at_least=1)
    if not 0 <= warmup < 1:
        raise ValueError(f"warmup must be a share of the steps in [0, 1), got {warmup!r}.")
    rise = max(1, round(warmup * steps))
    return lambda step: warmup_factor(step, steps, rise)


def cache_pair_states(tokenizer, model, queries, passages, max_length: int = 128,
                      batch_size: int = 32):
    """(hidden, mask): H^(L-1) of every "[CLS] query [SEP] passage [SEP]", padded (N, n, d),
    and its mask (N, n), rows in the order given (Lesson 8, §5). The frozen blocks run once."""
    if len(queries) != len(passages) or not queries:
        raise ValueError(f"pass as many queries as passages (one pair each), got {len(queries)} "
                         f"and {len(passages)}.")
    hidden, masks_ = [], []
    with torch.no_grad():
        for start in range(0, len(queries), batch_size):
            enc = tokenizer(list(queries[start:start + batch_size]),
                            list(passages[start:start + batch_size]), padding=True,
                            truncation=True, max_length=max_length, return_tensors="pt")
            out = model(enc["input_ids"], token_type_ids=enc["token_type_ids"],
                        attention_mask=enc["attention_mask"])
            hidden.append(out.hidden_states[-2])  # (b, n, d): the last block's input
            masks_.append(enc["attention_mask"])
    n = max(h.shape[1] for h in hidden)
    return (torch.cat([F.pad(h, (0, 0, 0, n - h.shape[1])) for h in hidden]),
            torch.cat([F.pad(m, (0, n - m.shape[1])) for m in masks_]))


class PairScorer(nn.Module):
    """The cross-encoder's trained part: MiniLM's last block, then a linear layer on one pooled
    vector of the joint pass (``pooling``: the final [CLS] row or the mean of the real rows),
    giving one relevance score per pair (Lesson 8, §5)."""

    def __init__(self, block: nn.Module, d_model: int, pooling: str = "cls",
                 gain: float = 1.0):
        super().__init__()
        self.gain = float(gain)  # the output is gain * score(pooled)
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}.")
        self.block = block
        self.pooling = pooling
        self.score = nn.Linear(d_model, 1)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(b, n, d) cached H^(L-1) and its (b, n) mask -> (b,) scores."""
        out = run_block(self.block, hidden, attention_mask)  # (b, n, d)
        return self.gain * self.score(pool(out, attention_mask, how=self.pooling)).squeeze(-1)


def rerank_run(scorer: PairScorer, hidden: torch.Tensor, mask: torch.Tensor, group_size: int,
               steps: int, groups: int = 8, lr: float = 1e-4, seed: int = 0,
               progress: bool = True, schedule=None, on_epoch=None,
               prior: torch.Tensor | None = None) -> list[float]:
    """Train ``scorer`` to pick each query's right passage among its group (Lesson 8, §5).

    ``hidden`` holds ``group_size`` pairs per training query, consecutive: the right passage
    first, then its negatives. A step takes ``groups`` queries; the loss is the cross-entropy
    of each group's scores against position 0. ``schedule`` multiplies the learning rate at
    each step (:func:`warmup_then_decay`); ``on_epoch(epoch)``, if given, is called after every
    full pass over the queries, with ``scorer`` in evaluation mode (the validation). ``prior``
    (N,), if given, is added to each pair's score: the scorer then learns a correction to it
    . Returns the loss of every step.
    """
    n_groups = hidden.shape[0] // group_size
    per_epoch = n_groups // min(groups, n_groups)  # full batches only (shuffled_batches)

    def loss_fn(scorer, batch):
        (rows,) = batch
        index = (rows.unsqueeze(1) * group_size + torch.arange(group_size)).reshape(-1)
        h, m = trim_padding(hidden[index], mask[index])
        scores = scorer(h, m)  # (groups * group_size,)
        if prior is not None:
            scores = scores + prior[index]
        return F.cross_entropy(scores.view(-1, group_size),
                               torch.zeros(len(rows), dtype=torch.long))

    def epoch_end(step):
        scorer.eval()
        with torch.no_grad():
            on_epoch(step // per_epoch)
        scorer.train()

    def batches():
        stream = shuffled_batches(torch.arange(n_groups), batch_size=groups, seed=seed)
        for step, batch in enumerate(stream):
            if on_epoch is not None and step and step % per_epoch == 0:
                epoch_end(step)  # the model has taken `step` steps
            yield batch

    history = train(scorer, batches(), loss_fn, steps=steps, lr=lr, seed=seed,
                    progress=progress, description="re-ranker", schedule=schedule)
    if on_epoch is not None and steps % per_epoch == 0:
        with torch.no_grad():
            on_epoch(steps // per_epoch)  # the last epoch (train() left eval mode on)
    return history


def score_cached_pairs(scorer: PairScorer, hidden: torch.Tensor, mask: torch.Tensor,
                       batch_size: int = 32) -> torch.Tensor:
    """(N,) ``scorer``'s outputs for pairs whose H^(L-1) is cached (:func:`cache_pair_states`)."""
    out = []
    with torch.no_grad():
        for start in range(0, hidden.shape[0], batch_size):
            h, m = trim_padding(hidden[start:start + batch_size], mask[start:start + batch_size])
            out.append(scorer(h, m))
    return torch.cat(out)


def cross_encoder_scores(tokenizer, model, scorer: PairScorer, queries, passages,
                         max_length: int = 128, batch_size: int = 32) -> torch.Tensor:
    """(N,) scores of the pairs (queries[i], passages[i]): the frozen blocks, then ``scorer``."""
    hidden, mask = cache_pair_states(tokenizer, model, queries, passages, max_length, batch_size)
    return score_cached_pairs(scorer, hidden, mask, batch_size)


def rerank_top_k(bi_scores: torch.Tensor, cross_score, k: int) -> torch.Tensor:
    """(n_q, k) long: each query's bi-encoder top ``k`` passages, re-ordered by the
    cross-encoder (Lesson 8, §5).

    ``bi_scores`` is (n_q, n_p); ``cross_score(i, candidates)`` returns the cross-encoder's
    scores (len(candidates),) of query i with the passages ``candidates`` (a list of indices).
    Only the top ``k`` are scored. Ties in the cross-encoder's scores keep the bi-encoder's
    order (a stable sort of candidates listed best first by the bi-encoder); ties in the
    bi-encoder's scores keep the lower index first.
    """
    bi_scores = torch.as_tensor(bi_scores)
    check_int(k, "k", at_least=1, at_most=bi_scores.shape[1])
    first = torch.sort(bi_scores, dim=1, descending=True, stable=True).indices[:, :k]
    out = []
    for i, candidates in enumerate(first.tolist()):
        scores = torch.as_tensor(cross_score(i, candidates), dtype=torch.float64).reshape(-1)
        if scores.numel() != k:
            raise ValueError(f"cross_score({i}, ...) returned {scores.numel()} scores for {k} "
                             f"candidates.")
        order = torch.sort(scores, descending=True, stable=True).indices
        out.append(torch.tensor(candidates)[order])
    return torch.stack(out)



def load_pair_scorer(model, tensors: dict[str, torch.Tensor], pooling: str = "cls") -> PairScorer:
    """The trained :class:`PairScorer` of ``l8-cross`` (float32), on a copy of ``model``'s last
    block; ``pooling`` is the artefact's (its metadata says which)."""
    scorer = PairScorer(copy.deepcopy(model.blocks[-1]), model.config.d_model, pooling=pooling)
    state = {k: v.float() for k, v in tensors.items()
             if k.startswith(("block.", "score."))}
    scorer.load_state_dict(state)  # strict: every tensor used, every shape checked
    return scorer.eval()


def _cross_recipe(steps: int | None = None, progress: bool = True):
    """Lesson 8, §5: MiniLM's last block and a score layer on [CLS], trained to pick each
    training item's paraphrase among its five candidates."""
    settings = dict(CROSS)
    torch.manual_seed(settings["seed"])
    tokenizer, model = load_minilm()
    items = contrast_items("train", settings["train_items"], seed=settings["seed"])
    queries = [it.query for it in items for _ in it.candidates]
    candidates = [c for it in items for c in it.candidates]  # the paraphrase first in each group
    hidden, mask = cache_pair_states(tokenizer, model, queries, candidates,
                                     settings["max_length"])
    total = settings["steps"] if steps is None else steps
    torch.manual_seed(settings["seed"])
    scorer = PairScorer(copy.deepcopy(model.blocks[-1]), model.config.d_model,
                        pooling=settings["pooling"])
    history = rerank_run(scorer, hidden, mask, len(KINDS), steps=total,
                         groups=settings["groups"], lr=settings["lr"], seed=settings["seed"],
                         progress=progress, schedule=warmup_then_decay(total, settings["warmup"]))
    # float16 keeps the artefact small (1.8 M parameters); the lesson evaluates these weights.
    tensors = {k: v.detach().to(torch.float16) for k, v in scorer.state_dict().items()}
    tensors["loss"] = torch.tensor(history, dtype=torch.float32)
    metadata = {**{k: str(v) for k, v in settings.items()}, "steps": str(total)}
    return tensors, metadata


# --- Approximate nearest neighbours: an inverted file (Lesson 8, §5) ----------------------------


def kmeans(vectors: torch.Tensor, n_lists: int, iterations: int = 10, seed: int = 0):
    """(centroids (n_lists, d), assignment (N,)): spherical k-means of unit ``vectors`` (N, d),
    started from ``n_lists`` rows drawn with ``seed`` (Lesson 8, §5)."""
    if vectors.dim() != 2:
        raise ValueError(f"vectors must be (N, d), got shape {tuple(vectors.shape)}.")
    check_int(n_lists, "n_lists", at_least=1, at_most=vectors.shape[0],
              what="at most the number of vectors")
    g = torch.Generator().manual_seed(seed)
    centroids = vectors[torch.randperm(vectors.shape[0], generator=g)[:n_lists]].clone()
    for _ in range(iterations):
        assignment = (vectors @ centroids.T).argmax(dim=1)  # (N,): the nearest centroid
        for c in range(n_lists):
            members = vectors[assignment == c]
            if len(members):  # an empty list keeps its centroid
                centroids[c] = F.normalize(members.mean(dim=0), dim=0)
    return centroids, (vectors @ centroids.T).argmax(dim=1)


def ivf_search(query_vecs: torch.Tensor, doc_vecs: torch.Tensor, centroids: torch.Tensor,
               assignment: torch.Tensor, n_probe: int, k: int):
    """(indices (n_q, k), scanned (n_q,)): an inverted-file search (Lesson 8, §5).

    Each query scores only the documents in the ``n_probe`` lists whose centroids are nearest
    to it (``assignment[j]`` is document j's list, from :func:`kmeans`), and returns the best
    ``k`` of them, best first (-1 where fewer than k were scanned); ``scanned`` counts the
    documents it scored, the work that approximate search saves.
    """
    check_int(n_probe, "n_probe", at_least=1, at_most=centroids.shape[0],
              what="at most the number of lists")
    if assignment.shape != (doc_vecs.shape[0],):
        raise ValueError(f"assignment must give one list per document ({doc_vecs.shape[0]}), "
                         f"got shape {tuple(assignment.shape)}.")
    probes = (query_vecs @ centroids.T).topk(n_probe, dim=1).indices  # (n_q, n_probe)
    out = torch.full((query_vecs.shape[0], k), -1, dtype=torch.long)
    scanned = torch.zeros(query_vecs.shape[0], dtype=torch.long)
    for i, lists in enumerate(probes):
        docs = torch.nonzero(torch.isin(assignment, lists)).squeeze(1)  # (m,)
        scanned[i] = len(docs)
        scores = doc_vecs[docs] @ query_vecs[i]  # (m,)
        order = torch.sort(scores, descending=True, stable=True).indices[:k]
        out[i, :len(order)] = docs[order]
    return out, scanned


RECIPES = {"l8-cross": _cross_recipe}

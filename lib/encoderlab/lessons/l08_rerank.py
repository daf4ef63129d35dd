"""Retrieve, then re-rank (Lesson 8, §6): a small cross-encoder that re-orders the bi-encoder's
top k, ``python -m encoderlab train l8-rerank``.

The bi-encoder is all-MiniLM-L6-v2 as it ships (mean pooling, :func:`bi_encoder_top_k`). The
cross-encoder is the same MiniLM reading "[CLS] query [SEP] passage [SEP]" in one pass, with a
one-output linear layer on one pooled vector of that pass (:class:`PairScorer`; the committed
run pools by the mean). Only the last block and
that layer learn; the five blocks below are frozen, so their output for every training pair is
computed once and cached (:func:`cache_pair_states`). Each training query is shown its right
passage next to ``negatives`` wrong ones that the bi-encoder itself ranks highest (hard
negatives, :func:`hard_negatives`), and the loss is the cross-entropy of picking the right one
(:func:`rerank_run`). The pairs are Lesson 8's docstring pairs, split as the contrastive run
splits them (:func:`encoderlab.lessons.l08_contrastive.split_pairs`).
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab.course.train import train
from encoderlab.data import shuffled_batches, trim_padding
from encoderlab.heads import pool
from encoderlab.lessons.l08_contrastive import split_pairs
from encoderlab.lessons.l08_retrieval import run_block, search, sentence_embeddings
from encoderlab.pretrained import load_minilm
from encoderlab.validate import check_int

__all__ = ["RERANK", "bi_encoder_top_k", "hard_negatives", "cache_pair_states", "PairScorer",
           "rerank_run", "cross_encoder_scores", "rerank_top_k", "load_pair_scorer", "RECIPES"]


RERANK = {  # the settings of the committed run, l8-rerank
    "top_k": 10,  # the bi-encoder's candidates the cross-encoder re-orders
    "negatives": 3,  # hard negatives per training query, from the bi-encoder's own top k
    "steps": 80,
    "groups": 8,  # training queries per step, each with 1 + negatives passages
    "lr": 3e-4,
    "pooling": "mean",  # the vector the score layer reads: "cls" or "mean" (heads.pool)
    "max_length": 96,  # of a (query, passage) pair
    "held_out_every": 10,  # the split of l8-contrastive
    "seed": 0,
}


def bi_encoder_top_k(query_vecs: torch.Tensor, passage_vecs: torch.Tensor, k: int):
    """(scores, indices), each (n_q, k): the bi-encoder's top ``k`` passages per query, best
    first, by cosine of unit vectors (Lesson 8, §6). A thin name for :func:`search`."""
    return search(query_vecs, passage_vecs, k)


def hard_negatives(scores: torch.Tensor, positives, n: int) -> torch.Tensor:
    """(n_q, n) long: each query's ``n`` highest-scoring passages that are not its positive.

    (Lesson 8, §6.) ``scores`` is (n_q, n_p), the bi-encoder's scores; ``positives[i]`` the
    index of query i's right passage, never returned as its negative. Ties keep the lower index
    first (a stable sort), so the result is the same on every machine.
    """
    scores = torch.as_tensor(scores)
    n_q, n_p = scores.shape
    check_int(n, "n", at_least=1, at_most=n_p - 1, what="the number of negatives per query")
    positives = torch.as_tensor(positives, dtype=torch.long)
    if positives.shape != (n_q,):
        raise ValueError(f"positives must have one index per query ({n_q}), got "
                         f"{tuple(positives.shape)}.")
    masked = scores.clone().float()
    masked[torch.arange(n_q), positives] = -torch.inf  # the positive is never a negative
    order = torch.sort(masked, dim=1, descending=True, stable=True).indices
    return order[:, :n]


def cache_pair_states(tokenizer, model, queries, passages, max_length: int = 128,
                      batch_size: int = 32):
    """(hidden, mask): H^(L-1) of every "[CLS] query [SEP] passage [SEP]", padded (N, n, d),
    and its mask (N, n), rows in the order given (Lesson 8, §6). The frozen blocks run once."""
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
    giving one relevance score per pair (Lesson 8, §6)."""

    def __init__(self, block: nn.Module, d_model: int, pooling: str = "cls"):
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}.")
        self.block = block
        self.pooling = pooling
        self.score = nn.Linear(d_model, 1)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(b, n, d) cached H^(L-1) and its (b, n) mask -> (b,) scores."""
        out = run_block(self.block, hidden, attention_mask)  # (b, n, d)
        return self.score(pool(out, attention_mask, how=self.pooling)).squeeze(-1)  # (b,)


def rerank_run(scorer: PairScorer, hidden: torch.Tensor, mask: torch.Tensor, group_size: int,
               steps: int, groups: int = 8, lr: float = 1e-4, seed: int = 0,
               progress: bool = True) -> list[float]:
    """Train ``scorer`` to pick each query's right passage among its group (Lesson 8, §6).

    ``hidden`` holds ``group_size`` pairs per training query, consecutive: the right passage
    first, then its hard negatives. A step takes ``groups`` queries; the loss is the
    cross-entropy of each group's scores against position 0. Returns the loss of every step.
    """
    n_groups = hidden.shape[0] // group_size

    def loss_fn(scorer, batch):
        (rows,) = batch
        index = (rows.unsqueeze(1) * group_size + torch.arange(group_size)).reshape(-1)
        h, m = trim_padding(hidden[index], mask[index])
        scores = scorer(h, m).view(-1, group_size)  # (groups, group_size)
        return F.cross_entropy(scores, torch.zeros(len(rows), dtype=torch.long))

    batches = shuffled_batches(torch.arange(n_groups), batch_size=groups, seed=seed)
    return train(scorer, batches, loss_fn, steps=steps, lr=lr, seed=seed, progress=progress,
                 description="re-ranker, hard negatives")


def cross_encoder_scores(tokenizer, model, scorer: PairScorer, queries, passages,
                         max_length: int = 128, batch_size: int = 32) -> torch.Tensor:
    """(N,) scores of the pairs (queries[i], passages[i]): the frozen blocks, then ``scorer``."""
    hidden, mask = cache_pair_states(tokenizer, model, queries, passages, max_length, batch_size)
    out = []
    with torch.no_grad():
        for start in range(0, hidden.shape[0], batch_size):
            h, m = trim_padding(hidden[start:start + batch_size], mask[start:start + batch_size])
            out.append(scorer(h, m))
    return torch.cat(out)


def rerank_top_k(bi_scores: torch.Tensor, cross_score, k: int) -> torch.Tensor:
    """(n_q, k) long: each query's bi-encoder top ``k`` passages, re-ordered by the
    cross-encoder (Lesson 8, §6).

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


def _rerank_recipe(steps: int | None = None, progress: bool = True):
    """Lesson 8, §6: a MiniLM cross-encoder (last block + score layer) trained with the
    bi-encoder's hard negatives on the training docstring pairs."""
    settings = dict(RERANK)
    if steps is not None:
        settings["steps"] = steps
    torch.manual_seed(settings["seed"])
    tokenizer, model = load_minilm()
    train_pairs, held = split_pairs(held_out_every=settings["held_out_every"])
    summaries = [a for a, _ in train_pairs]
    details = [b for _, b in train_pairs]
    q = sentence_embeddings(tokenizer, model, summaries)
    d = sentence_embeddings(tokenizer, model, details)
    scores = q @ d.T  # (N, N): the bi-encoder's cosines
    # A passage identical to the positive's text is not a negative: give it the positive's fate.
    same_text = torch.tensor([[details[j] == details[i] for j in range(len(details))]
                              for i in range(len(details))])
    scores = scores.masked_fill(same_text, -torch.inf)
    negatives = hard_negatives(scores, torch.arange(len(details)), settings["negatives"])
    group = 1 + settings["negatives"]
    pair_q, pair_p = [], []
    for i, row in enumerate(negatives.tolist()):
        for j in [i, *row]:  # the right passage first, then its hard negatives
            pair_q.append(summaries[i])
            pair_p.append(details[j])
    hidden, mask = cache_pair_states(tokenizer, model, pair_q, pair_p, settings["max_length"])
    scorer = PairScorer(copy.deepcopy(model.blocks[-1]), model.config.d_model,
                        pooling=settings["pooling"])
    history = rerank_run(scorer, hidden, mask, group, steps=settings["steps"],
                         groups=settings["groups"], lr=settings["lr"], seed=settings["seed"],
                         progress=progress)
    # float16 keeps the artefact small (1.8 M parameters); the lesson evaluates these weights.
    tensors = {k: v.to(torch.float16) for k, v in scorer.state_dict().items()}
    tensors["loss"] = torch.tensor(history, dtype=torch.float32)
    metadata = {**{k: str(v) for k, v in settings.items()},
                "train_pairs": str(len(train_pairs)), "held_out_pairs": str(len(held))}
    return tensors, metadata


def load_pair_scorer(model, tensors: dict[str, torch.Tensor], pooling: str = "cls") -> PairScorer:
    """The trained :class:`PairScorer` of ``l8-rerank`` (float32), on a copy of ``model``'s last
    block; ``pooling`` is the artefact's (its metadata says which)."""
    scorer = PairScorer(copy.deepcopy(model.blocks[-1]), model.config.d_model, pooling=pooling)
    state = {k: v.float() for k, v in tensors.items() if k != "loss"}
    scorer.load_state_dict(state)  # strict: every tensor used, every shape checked
    return scorer.eval()


RECIPES = {"l8-rerank": _rerank_recipe}

"""Lesson 8's checkers: mean pooling over real tokens (§1), recall@k (§3), the
in-batch-negatives loss (§4) and re-ranking the bi-encoder's top k (§5)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch.nn import functional as F

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    as_tensor,
    call,
    checker,
    close,
    differs,
    replayed,
    require_callable,
    run,
)
from encoderlab.heads import pool

__all__ = ["check_mean_pooling", "check_recall_at_k", "check_in_batch_negatives_loss",
           "check_rerank_top_k"]

# --- Mean pooling over real tokens (Lesson 8, §1) -----------------------------------------------


def _pooling_cases() -> list[tuple]:
    """(hidden, attention_mask) cases: padding of varied amounts, with large values in the padding
    so that any use of it shows; one batch without padding, one with a single real token."""
    g = torch.Generator().manual_seed(8)
    cases = []
    for lengths, n, d in [([3, 5, 2], 5, 4), ([4, 4], 4, 3), ([1, 6, 3, 2], 6, 8), ([2, 7], 7, 5)]:
        hidden = torch.randn(len(lengths), n, d, generator=g)  # (b, n, d)
        mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()  # (b, n)
        hidden = hidden + (1 - mask)[..., None] * 50.0  # padding vectors far from the rest
        cases.append((hidden, mask))
    return cases


def _masked_sum(hidden, mask):
    return (hidden * mask[..., None]).sum(dim=1)


_POOLING_MISTAKES = [
    ("your mean includes the [PAD] positions (hidden.mean(dim=1)).",
     "multiply by the mask before summing, then divide by mask.sum(dim=1, keepdim=True).",
     lambda h, m: h.mean(dim=1)),
    ("you sum only the real tokens but divide by the padded length n.",
     "divide by each row's own count of real tokens, mask.sum(dim=1, keepdim=True).",
     lambda h, m: _masked_sum(h, m) / h.shape[1]),
    ("you return the masked sum without dividing by the count of real tokens: that is the "
     "mean times the length, so longer texts get longer vectors.",
     "divide by mask.sum(dim=1, keepdim=True).",
     lambda h, m: _masked_sum(h, m)),
    ("you divide by the number of real tokens in the whole batch (mask.sum()), one number for "
     "every row, but each row needs its own count.",
     "divide by mask.sum(dim=1, keepdim=True).",
     lambda h, m: _masked_sum(h, m) / m.sum()),
    ("your function returns the [CLS] vector, hidden[:, 0], not the mean over real tokens.",
     "sum hidden * mask over the tokens and divide by mask.sum(dim=1, keepdim=True).",
     lambda h, m: h[:, 0]),
]


def _pooled_answer(result, where, hidden, mask) -> torch.Tensor:
    out = as_tensor(result, "the (b, d) tensor of mean vectors")
    if tuple(out.shape) != (hidden.shape[0], hidden.shape[2]):
        raise CheckFailed(f"your output has shape {tuple(out.shape)} on {where}; expected "
                          f"(b, d) = {(hidden.shape[0], hidden.shape[2])}: one vector per "
                          "sequence, the token axis (dim=1) averaged away.")
    return out.double()


_POOLING = Exercise(
    title="mean pooling",
    cases=_pooling_cases,
    arguments=lambda hidden, mask: (hidden.clone(), mask.clone()),
    answer=_pooled_answer,
    reference=lambda hidden, mask: pool(hidden.double(), mask, how="mean"),
    describe=lambda hidden, mask: (
        f"hidden of shape {tuple(hidden.shape)} with {mask.sum(1).tolist()} real tokens"),
    same=close,
    mistakes=_POOLING_MISTAKES,
    mistake_inputs=lambda hidden, mask: (hidden.double(), mask),
    fallback=lambda attempt: differs(
        attempt, "mean", "the mean over real tokens",
        "compare it with encoderlab.heads.pool(hidden, mask, how='mean').",
        where=f"hidden of shape {tuple(attempt.cases[attempt.first][0].shape)}",
    ),
)


@checker
def check_mean_pooling(fn: Callable) -> bool:
    """Check ``fn(hidden, attention_mask)`` returns the (b, d) mean over real tokens (Lesson 8, §1).

    ``hidden`` is (b, n, d); ``attention_mask`` is (b, n) with 1 for real tokens, 0 for [PAD].
    """
    return run(_POOLING, fn)


# --- Recall@k (Lesson 8, §3) -------------------------------------------------------------------


def _recall_reference(ranked, answers, k):
    hits = [bool(set(row[:k]) & set(a)) for row, a in zip(ranked, answers)]
    return sum(hits) / len(hits)


def _recall_cases() -> list[tuple]:
    """(ranked, answers, k): lists of document indices best first, sets of right documents."""
    ranked = [[3, 1, 4, 0, 2], [0, 2, 1, 4, 3], [4, 3, 2, 1, 0], [1, 0, 3, 2, 4],
              [2, 4, 0, 3, 1]]
    answers = [{1}, {0, 3}, {0}, {2, 4}, {3}]
    cases = [(ranked, answers, k) for k in (1, 2, 3, 4, 5)]
    g = torch.Generator().manual_seed(8)
    big = [torch.randperm(20, generator=g).tolist() for _ in range(12)]
    big_answers = [set(torch.randperm(20, generator=g)[:1 + i % 3].tolist()) for i in range(12)]
    cases += [(big, big_answers, k) for k in (1, 3, 10)]
    return cases


_RECALL_MISTAKES = [
    ("you look only at the document at rank k (row[k - 1]), but recall@k counts a query as "
     "found if any of its first k documents is right.",
     "look at row[:k].",
     lambda r, a, k: sum(row[k - 1] in s for row, s in zip(r, a)) / len(r)),
    ("you look at one document too many (row[:k + 1]).",
     "the first k documents are row[:k].",
     lambda r, a, k: _recall_reference(r, a, k + 1)),
    ("you look at one document too few (row[:k - 1]).",
     "the first k documents are row[:k].",
     lambda r, a, k: _recall_reference(r, a, max(k - 1, 0))),
    ("you return the number of queries found, not the share.",
     "divide by the number of queries.",
     lambda r, a, k: float(sum(bool(set(row[:k]) & s) for row, s in zip(r, a)))),
    ("you average the share of each query's right documents that are found, but this course's "
     "recall@k asks whether at least one right document is in the first k.",
     "count a hit as 1 or 0 per query.",
     lambda r, a, k: sum(len(set(row[:k]) & s) / len(s) for row, s in zip(r, a)) / len(r)),
    ("you ignore k and always look at the first document only.",
     "look at the first k documents, row[:k].",
     lambda r, a, k: _recall_reference(r, a, 1)),
]


def _as_share(value, where, *case) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise CheckFailed(f"your function returned a {type(value).__name__} on {where}, not a "
                          "number.", "return one number, the share of queries found.") from None


def _first_wrong_recall(attempt) -> str:
    i = attempt.first
    ranked, _answers, k = attempt.cases[i]
    return (f"your recall@{k} is {attempt.answers[i]:.4g} on {len(ranked)} queries; the share "
            f"of queries with a right document among their first {k} is "
            f"{attempt.references[i]:.4g}.")


_RECALL = Exercise(
    title="recall@k",
    cases=_recall_cases,
    arguments=lambda ranked, answers, k: ([list(r) for r in ranked], [set(a) for a in answers],
                                          k),
    answer=_as_share,
    reference=_recall_reference,
    describe=lambda ranked, answers, k: f"{len(ranked)} queries, k = {k}",
    same=lambda a, b: abs(a - b) < 1e-9,
    mistakes=_RECALL_MISTAKES,
    fallback=_first_wrong_recall,
)


@checker
def check_recall_at_k(fn: Callable) -> bool:
    """Check ``fn(ranked, answers, k)`` returns the share of queries with a right document among
    their first k (Lesson 8, §3). ``ranked[i]`` lists document indices best first (a list or a
    tensor row); ``answers[i]`` is the set of right documents of query i."""
    return run(_RECALL, fn)


# --- The in-batch-negatives loss (Lesson 8, §4) ---------------------------------------------------


def _info_nce(a, b, scale, *, normalize=True, transpose=False, reduce="mean", self_sim=False,
              divide=False):
    if normalize:
        a, b = a / a.norm(dim=1, keepdim=True), b / b.norm(dim=1, keepdim=True)
    s = a @ (a if self_sim else b).T  # (B, B)
    logits = s / scale if divide else s * scale
    if transpose:
        logits = logits.T
    labels = torch.arange(a.shape[0])
    return F.cross_entropy(logits, labels, reduction=reduce)


def _info_nce_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(8)
    cases = []
    for b, d, scale in [(4, 8, 20.0), (6, 5, 20.0), (3, 16, 5.0), (8, 4, 1.0), (5, 12, 50.0)]:
        a = torch.randn(b, d, generator=g) * 3
        partner = a + torch.randn(b, d, generator=g)  # row i of b is close to row i of a
        cases.append((a, partner * torch.rand(b, 1, generator=g).add(0.5), scale))
    return cases


_INFO_NCE_MISTAKES = [
    ("you use raw dot products, not cosines.",
     "normalise both sides' rows to unit length first, so the logits are scale × cosine.",
     partial(_info_nce, normalize=False)),
    ("you divide the cosines by scale, but scale is 1 / temperature.",
     "the logits are scale × cos(a_i, b_j).",
     partial(_info_nce, divide=True)),
    ("you forgot the scale: with cosines in [-1, 1] alone the softmax can barely prefer the "
     "right partner.",
     "the logits are scale × cos(a_i, b_j).",
     lambda a, b, scale: _info_nce(a, b, 1.0)),
    ("your loss sums over the batch instead of averaging.",
     "take the mean of the B cross-entropies (F.cross_entropy's default).",
     partial(_info_nce, reduce="sum")),
    ("you compare a with itself (a @ a.T), but the negatives and the positive are the rows of b.",
     "use S = a bᵀ.",
     partial(_info_nce, self_sim=True)),
    ("your softmax runs down the columns (the loss of b's rows against a's), but this loss asks "
     "each row a_i to pick its partner b_i among the batch's b's.",
     "cross-entropy over the rows of S = a bᵀ, labels 0..B-1.",
     partial(_info_nce, transpose=True)),
]


def _loss_answer(result, where, a, b, scale) -> torch.Tensor:
    out = as_tensor(result, "a scalar loss tensor")
    if out.numel() != 1:
        raise CheckFailed(f"your loss has shape {tuple(out.shape)} on {where}, not one number.",
                          "return the mean over the batch, a 0-d tensor.")
    return out.reshape(()).double()


_INFO_NCE = Exercise(
    title="in-batch negatives loss",
    cases=_info_nce_cases,
    arguments=lambda a, b, scale: (a.clone(), b.clone(), scale),
    answer=_loss_answer,
    reference=lambda a, b, scale: _info_nce(a.double(), b.double(), scale),
    describe=lambda a, b, scale: f"a and b of shape {tuple(a.shape)}, scale = {scale:g}",
    same=close,
    mistakes=_INFO_NCE_MISTAKES,
    mistake_inputs=lambda a, b, scale: (a.double(), b.double(), scale),
    fallback=lambda attempt: differs(
        attempt, "loss", "cross_entropy(scale · cos(a, b), arange(B))",
        "compare it with encoderlab.lessons.l08_retrieval.in_batch_negatives_loss.",
        where=f"a of shape {tuple(attempt.cases[attempt.first][0].shape)}",
    ),
)


@checker
def check_in_batch_negatives_loss(fn: Callable) -> bool:
    """Check ``fn(a, b, scale)`` is InfoNCE with in-batch negatives (Lesson 8, §4): the mean
    cross-entropy of the rows of scale · cos(a_i, b_j) against the diagonal."""
    return run(_INFO_NCE, fn)


# --- Re-rank the bi-encoder's top k (Lesson 8, §5) ------------------------------------------------


class _ScoreLog:
    """A cross-encoder stand-in that scores from a fixed table and records what it was asked."""

    def __init__(self, table: torch.Tensor):
        self.table = table  # (n_q, n_p): the cross-encoder's score of every pair
        self.calls: list[tuple[int, list[int]]] = []

    def __call__(self, i, candidates):
        candidates = [int(c) for c in candidates]
        self.calls.append((int(i), candidates))
        return self.table[int(i), candidates].clone()


def _bi_top(bi, k):
    """Each row's top k passage indices, best first, ties to the lower index."""
    return torch.sort(bi, dim=1, descending=True, stable=True).indices[:, :k]


def _rerank_reference(bi, table, k):
    out = []
    for i, row in enumerate(_bi_top(bi, k).tolist()):  # candidates in the bi-encoder's order
        order = torch.sort(table[i, row], descending=True, stable=True).indices
        out.append(torch.tensor(row)[order])
    return torch.stack(out)


def _rerank_cases() -> list[tuple]:
    """(bi_scores, cross table, k): small integer cross-encoder scores, so that ties are common;
    one case with ties in the bi-encoder's scores too, one with k = all passages."""
    g = torch.Generator().manual_seed(8)
    cases = []
    for n_q, n_p, k, levels in [(3, 8, 4, 3), (4, 12, 5, 4), (2, 6, 6, 2), (5, 20, 10, 5)]:
        bi = torch.rand(n_q, n_p, generator=g)
        table = torch.randint(0, levels, (n_q, n_p), generator=g).double()
        cases.append((bi, table, k))
    bi = torch.randint(0, 4, (3, 10), generator=g).double() / 4  # the bi-encoder ties too
    cases.append((bi, torch.randint(0, 3, (3, 10), generator=g).double(), 5))
    # bi-encoder scores far apart (scaled cosines), cross-encoder scores close together: adding
    # the two keeps the bi-encoder's order, which only the cross-encoder's order may replace
    bi = 20 * torch.rand(4, 12, generator=g, dtype=torch.float64)
    cases.append((bi, torch.rand(4, 12, generator=g, dtype=torch.float64), 6))
    return cases


def _rerank_arguments(bi, table, k):
    return bi.clone(), _ScoreLog(table), k


def _by_index_then_score(bi, table, k):
    out = []
    for i, row in enumerate(_bi_top(bi, k).tolist()):
        row = sorted(row)  # the candidates' bi-encoder order is lost
        order = torch.sort(table[i, row], descending=True, stable=True).indices
        out.append(torch.tensor(row)[order])
    return torch.stack(out)


def _python_sorted_pairs(bi, table, k):
    out = []
    for i, row in enumerate(_bi_top(bi, k).tolist()):
        pairs = sorted(zip(table[i, row].tolist(), row), reverse=True)  # ties: larger index first
        out.append(torch.tensor([j for _, j in pairs]))
    return torch.stack(out)


def _bi_plus_cross(bi, table, k):
    out = []
    for i, row in enumerate(_bi_top(bi, k).tolist()):
        order = torch.sort(table[i, row] + bi[i, row], descending=True, stable=True).indices
        out.append(torch.tensor(row)[order])
    return torch.stack(out)


def _topk_candidates(bi, table, k):
    out = []
    for i, row in enumerate(torch.topk(bi, k, dim=1).indices.tolist()):  # ties: any order
        order = torch.sort(table[i, row], descending=True, stable=True).indices
        out.append(torch.tensor(row)[order])
    return torch.stack(out)


def _whole_collection(bi, table, k):
    return torch.sort(table, dim=1, descending=True, stable=True).indices[:, :k]


_RERANK_MISTAKES = [
    ("your lists are the bi-encoder's top k in its own order: the cross-encoder's scores were "
     "not used to re-order them.",
     "sort each query's candidates by cross_score(i, candidates), best first.",
     lambda bi, table, k: _bi_top(bi, k)),
    ("your lists are in increasing order of the cross-encoder's score, worst first.",
     "sort with descending=True.",
     lambda bi, table, k: torch.stack([torch.tensor(row)[torch.sort(
         table[i, row], stable=True).indices] for i, row in enumerate(_bi_top(bi, k).tolist())])),
    ("you return positions inside the top k (0 to k - 1), not passage indices.",
     "map each position back through the candidate list: candidates[position].",
     lambda bi, table, k: torch.stack([torch.sort(table[i, row], descending=True,
                                                  stable=True).indices
                                       for i, row in enumerate(_bi_top(bi, k).tolist())])),
    ("where the cross-encoder ties, your order puts the larger passage index first "
     "(sorted(zip(scores, candidates), reverse=True) compares the indices too), but ties must "
     "keep the bi-encoder's order.",
     "sort the scores alone with a stable sort: torch.sort(..., stable=True).",
     _python_sorted_pairs),
    ("where the cross-encoder ties, your order follows the passage index, not the bi-encoder's "
     "ranking.",
     "keep the candidates in the bi-encoder's order (best first) and sort stably.",
     _by_index_then_score),
    ("you sorted by the bi-encoder's score plus the cross-encoder's: where the bi-encoder's "
     "scores are further apart than the cross-encoder's, the sum keeps the bi-encoder's order.",
     "sort the candidates by cross_score(i, candidates) alone; the bi-encoder only chooses them.",
     _bi_plus_cross),
    ("where the bi-encoder's scores tie, your candidates are not in the order 'lower index "
     "first': torch.topk does not promise any order among equal values.",
     "take the candidates with torch.sort(bi_scores, dim=1, descending=True, stable=True)"
     ".indices[:, :k].",
     _topk_candidates),
]


def _rerank_answer(result, where, bi, table, k) -> torch.Tensor:
    out = as_tensor(result, "the (n_q, k) tensor of passage indices")
    if tuple(out.shape) != (bi.shape[0], k):
        raise CheckFailed(f"your output has shape {tuple(out.shape)} on {where}; expected "
                          f"(n_q, k) = {(bi.shape[0], k)}: each query's k passage indices, best "
                          "first.")
    return out.long()


def _first_wrong_rerank(attempt) -> tuple[str, str]:
    i = attempt.first
    bi, _table, k = attempt.cases[i]
    mine, right = attempt.answers[i], attempt.references[i]
    q = int((mine != right).any(dim=1).nonzero()[0])
    return (f"on {attempt.where(i)}, query {q}: your list is {mine[q].tolist()}, the re-ranked "
            f"top {k} is {right[q].tolist()}.",
            f"take the bi-encoder's top {k} (best first), score them with cross_score(i, "
            "candidates), and sort by that score, ties in the bi-encoder's order.")


_RERANK = Exercise(
    title="re-rank the top k",
    cases=_rerank_cases,
    arguments=_rerank_arguments,
    answer=_rerank_answer,
    reference=_rerank_reference,
    describe=lambda bi, table, k: f"{bi.shape[0]} queries, {bi.shape[1]} passages, k = {k}",
    mistakes=_RERANK_MISTAKES,
    fallback=_first_wrong_rerank,
)


@checker
def check_rerank_top_k(fn: Callable) -> bool:
    """Check ``fn(bi_scores, cross_score, k)`` re-ranks each query's bi-encoder top k by the
    cross-encoder (Lesson 8, §5).

    ``bi_scores`` is (n_q, n_p); ``cross_score(i, candidates)`` returns the cross-encoder's scores
    of query i with the passages listed in ``candidates``. The answer is (n_q, k) passage indices,
    best first; ties in the cross-encoder's scores keep the bi-encoder's order, ties in the
    bi-encoder's scores the lower index first. The cross-encoder may be asked only about each
    query's top k, each passage once: that is the whole point of re-ranking.
    """
    _check_scoring_budget(fn)
    return run(_RERANK, fn)


def _check_scoring_budget(fn: Callable) -> None:
    """Run ``fn`` on one case and refuse it if it scored passages outside the top k, scored a
    passage twice, or called the cross-encoder for a query index that does not exist."""
    require_callable(fn)
    bi, table, k = _rerank_cases()[1]
    log = _ScoreLog(table)
    call(fn, (bi.clone(), log, k), "the first budget case")
    if replayed(fn):  # graded: the budget was checked in the submission's kernel
        return
    top = _bi_top(bi, k).tolist()
    asked: dict[int, list[int]] = {}
    for i, candidates in log.calls:
        asked.setdefault(i, []).extend(candidates)
    bottom = torch.sort(bi, dim=1, descending=False, stable=True).indices[:, :k].tolist()
    for i, passages in sorted(asked.items()):
        outside = sorted(set(passages) - set(top[i]))
        if len(set(passages)) > k:
            raise CheckFailed(
                f"your function asked the cross-encoder about {len(set(passages))} passages of "
                f"query {i}, more than k = {k}: scoring more than the top k per query is the "
                "cost re-ranking avoids.",
                f"score only the top k, the {k} passages with the highest bi_scores.")
        if set(passages) == set(bottom[i]):
            raise CheckFailed(
                f"your function scored query {i}'s {k} passages with the LOWEST bi_scores, "
                "not the highest: the candidates come from an ascending sort.",
                "sort bi_scores with descending=True before taking the first k.")
        if outside:
            raise CheckFailed(
                f"your function asked the cross-encoder about query {i} with passages "
                f"{outside[:5]}, which are not in its bi-encoder top {k}: the candidates are "
                "the wrong ones.",
                f"score only the top k, the {k} passages with the highest bi_scores.")
        if len(passages) != len(set(passages)):
            raise CheckFailed(f"your function scored some passages of query {i} more than once "
                              "(each is a full cross-encoder pass).", "score each candidate once.")
    missing = [i for i in range(bi.shape[0]) if i not in asked]
    if missing:
        raise CheckFailed(f"your function never asked the cross-encoder about queries "
                          f"{missing}.", "call cross_score(i, candidates) once per query.")

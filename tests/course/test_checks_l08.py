"""Lesson 8's checkers: check_mean_pooling, check_recall_at_k, check_in_batch_negatives_loss and
check_rerank_top_k."""

import pytest
import torch

from encoderlab.course.checks import (
    CheckFailed,
    check_in_batch_negatives_loss,
    check_mean_pooling,
    check_recall_at_k,
    check_rerank_top_k,
)
from encoderlab.course.checks.l08 import (
    _INFO_NCE_MISTAKES,
    _POOLING_MISTAKES,
    _RECALL_MISTAKES,
    _RERANK_MISTAKES,
)
from encoderlab.heads import pool
from encoderlab.lessons import l08_retrieval as R

# --- checkers -------------------------------------------------------------------------------------


def test_check_mean_pooling_accepts_an_independent_answer(capsys):
    def by_hand(hidden, attention_mask):  # the sum over real tokens over their count
        real = attention_mask.to(hidden.dtype)[..., None]  # (b, n, 1)
        return (hidden * real).sum(dim=1) / real.sum(dim=1)

    assert check_mean_pooling(by_hand)
    assert "mean pooling" in capsys.readouterr().out


@pytest.mark.parametrize("diagnosis, fix, wrong", _POOLING_MISTAKES)
def test_check_mean_pooling_names_each_mistake(diagnosis, fix, wrong, both_passes):
    failure = both_passes(check_mean_pooling, wrong)
    assert (failure.diagnosis, failure.fix) == (diagnosis, fix)


def test_check_mean_pooling_shape_and_errors():
    with pytest.raises(CheckFailed, match=r"expected \(b, d\)"):
        check_mean_pooling(lambda h, m: (h * m[..., None]).sum(0))
    with pytest.raises(CheckFailed, match="raised ZeroDivisionError"):
        check_mean_pooling(lambda h, m: 1 / 0)
    with pytest.raises(CheckFailed, match="differs from the mean over real tokens"):
        check_mean_pooling(lambda h, m: pool(h, m, "mean") + 0.1)


def test_check_recall_at_k_accepts_an_independent_answer():
    def by_hand(ranked, answers, k):  # a hit when any of the first k is a right document
        hits = [any(doc in right for doc in list(row)[:k]) for row, right in zip(ranked, answers)]
        return sum(hits) / len(hits)

    assert check_recall_at_k(by_hand)
    assert check_recall_at_k(lambda r, a, k: R.recall_at_k(torch.tensor(r), a, k))


@pytest.mark.parametrize("diagnosis, fix, wrong", _RECALL_MISTAKES)
def test_check_recall_at_k_names_each_mistake(diagnosis, fix, wrong, both_passes):
    failure = both_passes(check_recall_at_k, wrong)
    assert (failure.diagnosis, failure.fix) == (diagnosis, fix)


def test_check_recall_at_k_other_answers():
    with pytest.raises(CheckFailed, match="not a number|not one number"):
        check_recall_at_k(lambda r, a, k: "yes")
    with pytest.raises(CheckFailed, match="your recall@"):
        check_recall_at_k(lambda r, a, k: 0.123)


def test_check_in_batch_negatives_loss_accepts_an_independent_answer():
    def by_hand(a, b, scale=20.0):  # -log of the softmax of each row at its own column
        cos = (a / a.norm(dim=-1, keepdim=True)) @ (b / b.norm(dim=-1, keepdim=True)).T
        logits = scale * cos  # (B, B)
        return -(logits.diagonal() - logits.logsumexp(dim=-1)).mean()

    assert check_in_batch_negatives_loss(by_hand)
    assert check_in_batch_negatives_loss(R.in_batch_negatives_loss)


@pytest.mark.parametrize("diagnosis, fix, wrong", _INFO_NCE_MISTAKES)
def test_check_in_batch_negatives_loss_names_each_mistake(diagnosis, fix, wrong, both_passes):
    failure = both_passes(check_in_batch_negatives_loss, wrong)
    assert (failure.diagnosis, failure.fix) == (diagnosis, fix)


def test_check_in_batch_negatives_loss_shape():
    with pytest.raises(CheckFailed, match="not a number|not one number"):
        check_in_batch_negatives_loss(lambda a, b, s: (a * b).sum(1))


# --- re-ranking the top k (§5) ---------------------------------------------------------------


def test_check_rerank_top_k_accepts_the_reference(capsys):
    from encoderlab.lessons.l08_rerank import rerank_top_k

    assert check_rerank_top_k(rerank_top_k)
    assert "re-rank the top k" in capsys.readouterr().out


def _learner(wrong):
    """A learner's function that makes the mistake ``wrong`` (bi, table, k) while calling the
    cross-encoder as it should (top k only, once each). Where the bi-encoder's scores tie at
    the k-th place, torch.topk may pick another of the tied passages: those are scored too,
    in the same call (the scoring budget is checked on a case without ties)."""
    def fn(bi, cross_score, k):
        top = torch.sort(bi, dim=1, descending=True, stable=True).indices[:, :k].tolist()
        other = torch.topk(bi, k, dim=1).indices.tolist()
        table = torch.full(bi.shape, -1e9, dtype=torch.float64)  # outside the top k: unscored
        for i, row in enumerate(top):
            row = row + [j for j in other[i] if j not in row]
            table[i, row] = torch.as_tensor(cross_score(i, row), dtype=torch.float64)
        return wrong(bi, table, k)
    return fn


@pytest.mark.parametrize("diagnosis, fix, wrong", _RERANK_MISTAKES)
def test_check_rerank_top_k_names_each_mistake(diagnosis, fix, wrong, both_passes):
    failure = both_passes(check_rerank_top_k, _learner(wrong))
    assert (failure.diagnosis, failure.fix) == (diagnosis, fix)


def test_check_rerank_top_k_refuses_scoring_the_whole_collection(both_passes):
    def everything(bi, cross_score, k):
        scores = torch.stack([torch.as_tensor(cross_score(i, list(range(bi.shape[1]))))
                              for i in range(bi.shape[0])])
        return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]

    failure = both_passes(check_rerank_top_k, everything)
    assert "more than k = 5" in failure.diagnosis and "highest bi_scores" in failure.fix

    def bottom_k(bi, cross_score, k):  # the candidates from an ascending sort
        out = []
        for i in range(bi.shape[0]):
            row = torch.sort(bi[i], stable=True).indices[:k].tolist()
            order = torch.sort(torch.as_tensor(cross_score(i, row)), descending=True,
                               stable=True).indices
            out.append(torch.tensor(row)[order])
        return torch.stack(out)

    failure = both_passes(check_rerank_top_k, bottom_k)
    assert "LOWEST bi_scores" in failure.diagnosis and "descending=True" in failure.fix

    def some_outside(bi, cross_score, k):  # k candidates, one of them not in the top k
        out = []
        for i in range(bi.shape[0]):
            order = torch.sort(bi[i], descending=True, stable=True).indices
            row = [*order[:k - 1].tolist(), int(order[k])]
            scores = torch.as_tensor(cross_score(i, row))
            out.append(torch.tensor(row)[torch.sort(scores, descending=True, stable=True).indices])
        return torch.stack(out)

    failure = both_passes(check_rerank_top_k, some_outside)
    assert "the candidates are the wrong ones" in failure.diagnosis

    def twice(bi, cross_score, k):
        from encoderlab.lessons.l08_rerank import rerank_top_k

        for i in range(bi.shape[0]):
            top = torch.sort(bi[i], descending=True, stable=True).indices[:k].tolist()
            cross_score(i, top)
        return rerank_top_k(bi, cross_score, k)

    with pytest.raises(CheckFailed, match="more than once"):
        check_rerank_top_k(twice)


def test_check_rerank_top_k_shape_and_other_answers():
    with pytest.raises(CheckFailed, match=r"expected \(n_q, k\)"):
        check_rerank_top_k(lambda bi, c, k: [c(i, torch.sort(bi[i], descending=True,
                                                               stable=True).indices[:k].tolist())
                                             for i in range(bi.shape[0])] and bi[:, :k + 1])
    with pytest.raises(CheckFailed, match="raised ZeroDivisionError"):
        check_rerank_top_k(lambda bi, c, k: 1 / 0)

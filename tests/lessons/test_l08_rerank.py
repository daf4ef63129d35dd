"""Lesson 8, §6: hard negatives, the cross-encoder's score layer on cached states, re-ranking the
top k, and the committed l8-rerank artefact."""

from __future__ import annotations

import pytest
import torch

from encoderlab.course.train import artefact_path, load_artefact
from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.lessons import l08_rerank as rerank


def test_hard_negatives_are_the_highest_wrong_passages():
    scores = torch.tensor([[0.9, 0.8, 0.1, 0.7],
                           [0.2, 0.3, 0.9, 0.3],
                           [0.5, 0.5, 0.5, 0.5]])
    negatives = rerank.hard_negatives(scores, [0, 2, 1], n=2)
    assert negatives.tolist() == [[1, 3], [1, 3], [0, 2]]  # ties: lower index first
    for row, positive in zip(negatives.tolist(), [0, 2, 1]):
        assert positive not in row


def test_hard_negatives_errors():
    with pytest.raises(ValueError, match="one index per query"):
        rerank.hard_negatives(torch.zeros(3, 4), [0, 1], n=1)
    with pytest.raises(ValueError, match="n"):
        rerank.hard_negatives(torch.zeros(3, 4), [0, 1, 2], n=4)  # only 3 wrong passages


def test_rerank_top_k_reorders_only_the_top_k_and_keeps_ties():
    bi = torch.tensor([[0.1, 0.9, 0.8, 0.7, 0.2]])  # top 3: passages 1, 2, 3
    asked = []

    def cross(i, candidates):
        asked.append(list(candidates))
        return torch.tensor([0.0, 5.0, 0.0])  # passage 2 wins; 1 and 3 tie

    out = rerank.rerank_top_k(bi, cross, k=3)
    assert out.tolist() == [[2, 1, 3]]  # the tie keeps the bi-encoder's order, 1 before 3
    assert asked == [[1, 2, 3]]  # only the top k, each once, best first
    with pytest.raises(ValueError, match="returned 2 scores"):
        rerank.rerank_top_k(bi, lambda i, c: torch.zeros(2), k=3)


def test_rerank_top_k_never_changes_the_set():
    g = torch.Generator().manual_seed(0)
    bi = torch.randn(6, 20, generator=g)
    table = torch.randn(6, 20, generator=g)
    out = rerank.rerank_top_k(bi, lambda i, c: table[i, c], k=5)
    top = torch.topk(bi, 5, dim=1).indices
    assert all(set(a) == set(b) for a, b in zip(out.tolist(), top.tolist()))
    assert not torch.equal(out, top)  # and the cross-encoder did reorder something


def test_pair_scorer_ignores_padding_and_learns():
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=32,
                           dropout=0.0)
    model = EncoderModel(config).eval()
    hidden = torch.randn(2, 6, 16)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    for pooling in ("cls", "mean"):
        scorer = rerank.PairScorer(model.blocks[-1], config.d_model, pooling=pooling).eval()
        scores = scorer(hidden, mask)
        assert scores.shape == (2,)
        alone = scorer(hidden[:1, :4], mask[:1, :4])
        assert torch.allclose(alone, scores[:1], atol=1e-5)  # padding changes nothing
    with pytest.raises(ValueError, match="pooling"):
        rerank.PairScorer(model.blocks[-1], config.d_model, pooling="max")
    # Groups of 3 pairs, the right one first: a short run lowers the loss.
    data = torch.randn(12, 6, 16)
    history = rerank.rerank_run(scorer, data, torch.ones(12, 6, dtype=torch.long), group_size=3,
                                steps=30, groups=4, lr=1e-2, progress=False)
    assert sum(history[-5:]) / 5 < sum(history[:5]) / 5


@pytest.mark.skipif(not artefact_path("l8-rerank").is_file(), reason="no l8-rerank artefact")
def test_the_committed_rerank_artefact():
    tensors, meta = load_artefact("l8-rerank")
    assert meta["command"] == "python -m encoderlab train l8-rerank"
    assert {k: meta[k] for k in rerank.RERANK} == {k: str(v) for k, v in rerank.RERANK.items()}
    assert artefact_path("l8-rerank").stat().st_size < 5 * 2**20
    assert len(tensors["loss"]) == rerank.RERANK["steps"]

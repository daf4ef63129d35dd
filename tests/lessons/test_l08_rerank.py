"""Lesson 8, §4-5: mined hard negatives, the designed test's items, the cross-encoder's score
layer on cached states, re-ranking the top k, the inverted-file search, and the committed
l8-cross artefact."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_contrastive import tiny_encoder, tiny_pairs

from encoderlab.lessons import l08_contrastive as contrastive
from encoderlab.lessons import l08_rerank as rerank
from encoderlab.lessons.l08_retrieval import in_batch_negatives_loss
from encoderlab.training import artefact_path, load_artefact


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
    model = tiny_encoder()
    config = model.config
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


def test_pair_scorer_gain_multiplies_the_output_and_can_be_folded_into_the_layer():
    model = tiny_encoder()
    config = model.config
    hidden, mask = torch.randn(3, 5, 16), torch.ones(3, 5, dtype=torch.long)
    plain = rerank.PairScorer(model.blocks[-1], config.d_model, pooling="mean").eval()
    gained = rerank.PairScorer(model.blocks[-1], config.d_model, pooling="mean", gain=30.0).eval()
    gained.load_state_dict(plain.state_dict())
    assert torch.allclose(gained(hidden, mask), 30 * plain(hidden, mask), atol=1e-5)
    with torch.no_grad():  # what the recipe saves: the gain folded into the layer
        plain.score.weight.mul_(30.0)
        plain.score.bias.mul_(30.0)
    assert torch.allclose(plain(hidden, mask), gained(hidden, mask), atol=1e-4)


def test_mine_negatives_skips_the_positive_its_text_and_its_paraphrases():
    g = torch.Generator().manual_seed(0)
    n_q, n_p = 6, 40
    passages = torch.nn.functional.normalize(torch.randn(n_p, 8, generator=g), dim=-1)
    passages[7] = passages[0]  # passage 7 is a paraphrase of passage 0 (cosine 1)
    scores = torch.randn(n_q, n_p, generator=g)
    scores[0, 7] = 10.0  # ... and query 0's bi-encoder ranks it high: rank 5 below
    scores[0, :6] = torch.tensor([20.0, 19, 18, 17, 0, 0])
    same_text = [[False] * n_p for _ in range(n_q)]
    same_text[1][9] = True  # passage 9 has query 1's positive text
    scores[1, 9] = 30.0
    negatives = contrastive.mine_negatives(scores, passages, torch.arange(n_q), n=3,
                                           rank_from=5, rank_to=20, max_cos=0.9,
                                           same_text=same_text, seed=0)
    assert negatives.shape == (n_q, 3)
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    for i, row in enumerate(negatives.tolist()):
        assert i not in row and len(set(row)) == 3  # never the positive, no repeats
        allowed = set(order[i, 4:20].tolist())  # ranks 5..20
        assert set(row) <= allowed
    assert 7 not in negatives[0].tolist()  # the paraphrase is not a negative
    assert 9 not in negatives[1].tolist()  # nor the positive's own text
    # ranks 1-4 are left out even though they are the hardest
    assert not set(negatives[0].tolist()) & {1, 2, 3}
    again = contrastive.mine_negatives(scores, passages, torch.arange(n_q), n=3, rank_from=5,
                                       rank_to=20, same_text=same_text, seed=0)
    assert torch.equal(again, negatives)  # seeded
    with pytest.raises(ValueError, match="widen the ranks"):
        contrastive.mine_negatives(scores, passages, torch.arange(n_q), n=3, rank_from=5,
                                   rank_to=7)


def test_hard_negative_loss():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    # each row's hard negative a copy of its partner: every column appears twice, + ln 2
    doubled = contrastive.hard_negative_loss(a, b, b.clone(), scale=20.0)
    assert torch.allclose(doubled, in_batch_negatives_loss(a, b, scale=20.0) + torch.log(
        torch.tensor(2.0)), atol=1e-5)
    # far-away negatives change nothing
    far = contrastive.hard_negative_loss(a, a, -a, scale=20.0)
    assert torch.allclose(far, in_batch_negatives_loss(a, a, scale=20.0), atol=1e-4)
    with pytest.raises(ValueError, match="same shape"):
        contrastive.hard_negative_loss(a, b, b[:4])


def test_contrastive_hard_run_lowers_the_loss_on_a_tiny_batch():
    model = tiny_encoder()
    h, mask, data = tiny_pairs(model)
    negatives = h.roll(1, dims=0)  # another row's states as each row's hard negative
    history = contrastive.contrastive_hard_run(model.blocks[-1], data, negatives,
                                               mask.roll(1, dims=0), steps=30, batch_size=8,
                                               lr=3e-3, progress=False)
    assert len(history) == 30 and sum(history[-5:]) < sum(history[:5])


def test_rerank_run_calls_the_validation_once_per_epoch_in_eval_mode():
    model = tiny_encoder()
    scorer = rerank.PairScorer(model.blocks[-1], 16, pooling="mean")
    calls = []
    data = torch.randn(24, 6, 16, generator=torch.Generator().manual_seed(1))
    # 8 groups of 3, 4 per step: 2 steps an epoch, 6 steps = 3 epochs
    history = rerank.rerank_run(scorer, data, torch.ones(24, 6, dtype=torch.long), group_size=3,
                                steps=6, groups=4, lr=1e-2, progress=False,
                                schedule=rerank.warmup_then_decay(6, 0.1),
                                on_epoch=lambda e: calls.append((e, scorer.training)))
    assert len(history) == 6 and calls == [(1, False), (2, False), (3, False)]


def test_warmup_then_decay():
    schedule = rerank.warmup_then_decay(10, 0.2)
    assert [schedule(s) for s in range(10)] == pytest.approx(
        [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125])
    with pytest.raises(ValueError, match="warmup"):
        rerank.warmup_then_decay(10, 1.0)


def test_the_recipes_are_registered():
    from encoderlab.course.train import recipes

    names = recipes()
    assert {"l8-cross", "l8-contrastive", "l8-contrastive-hard"} <= set(names)
    assert not {"l8-rerank", "l8-rerank-alone"} & set(names)
    assert contrastive.CONTRASTIVE_HARD["steps"] == contrastive.CONTRASTIVE["steps"]
    assert {k: contrastive.CONTRASTIVE_HARD[k] for k in contrastive.CONTRASTIVE} == \
        contrastive.CONTRASTIVE  # the hard-negative run changes only its negatives


def test_the_committed_contrastive_hard_artefact():  # a missing artefact fails: it is committed
    tensors, meta = load_artefact("l8-contrastive-hard")
    assert meta["command"] == "python -m encoderlab train l8-contrastive-hard"
    assert artefact_path("l8-contrastive-hard").stat().st_size < 5 * 2**20
    assert len(tensors["loss"]) == contrastive.CONTRASTIVE_HARD["steps"]
    negatives = tensors["negatives"]
    assert not (negatives == torch.arange(len(negatives))).any()  # never the positive


def test_the_real_cross_encoder_memorises_a_tiny_batch(minilm):
    """The overfit check behind l8-cross: on four training items, each with its paraphrase and
    four wrong candidates, the scorer (MiniLM's last block + the score layer) drives the loss from
    chance to near zero. If it did not, the pairs, labels, pooling or head would be wrong."""
    tokenizer, model = minilm
    items = rerank.contrast_items("train", 4, seed=3)
    queries = [it.query for it in items for _ in it.candidates]
    candidates = [c for it in items for c in it.candidates]  # the paraphrase first
    hidden, mask = rerank.cache_pair_states(tokenizer, model, queries, candidates, max_length=40)
    torch.manual_seed(0)
    scorer = rerank.PairScorer(copy.deepcopy(model.blocks[-1]), model.config.d_model, "cls")
    history = rerank.rerank_run(scorer, hidden, mask, group_size=5, steps=40, groups=4, lr=1e-3,
                                progress=False)
    assert history[0] > 1.2  # a fresh score layer starts near chance, ln 5 = 1.61
    assert max(history[-3:]) < 0.2  # and 40 steps take it close to zero


# --- The designed test (§5) ---------------------------------------------------------------------


def test_contrast_items_follow_the_templates_and_hold_out_the_test_words():
    item = rerank.contrast_items("train", 1, seed=0)[0]
    assert len(item.candidates) == len(rerank.KINDS) == 5
    para, reversed_, swapped, negated, echo = item.candidates
    # the paraphrase, the reversal and the adjective swap use exactly the same words
    assert sorted(para.split()) == sorted(reversed_.split()) == sorted(swapped.split())
    assert len({para, reversed_, swapped}) == 3
    assert negated.split().count("not") == 1 and "not" not in item.query.split()
    assert ("was" in item.query.split()) != ("was" in para.split())  # the other voice
    assert ("was" in item.query.split()) == ("was" in echo.split())  # the query's own voice
    # an explicit item: active query, the dog the agent
    assert rerank._sentence(("old", "dog"), ("young", "cat"), ("chase", "chased", "chased"),
                            passive=True) == "the young cat was chased by the old dog"
    assert rerank._sentence(("old", "dog"), ("young", "cat"), ("bite", "bit", "bitten"),
                            passive=False, negated=True) == "the old dog did not bite the young cat"
    train_words = {w for it in rerank.contrast_items("train", 200, seed=0)
                   for t in (it.query, *it.candidates) for w in t.split()}
    test_words = {w for it in rerank.contrast_items("test", 200, seed=1)
                  for t in (it.query, *it.candidates) for w in t.split()}
    assert train_words & test_words == {"the", "was", "by", "not", "did"}
    assert rerank.contrast_items("test", 3, seed=1) == rerank.contrast_items("test", 3, seed=1)
    with pytest.raises(ValueError, match="split must be one of"):
        rerank.contrast_items("dev", 3)


def test_kmeans_and_ivf_search_find_the_exact_neighbours_when_every_list_is_probed():
    g = torch.Generator().manual_seed(0)
    docs = torch.nn.functional.normalize(torch.randn(60, 8, generator=g), dim=1)
    queries = torch.nn.functional.normalize(torch.randn(5, 8, generator=g), dim=1)
    centroids, lists = rerank.kmeans(docs, n_lists=4, seed=0)
    assert centroids.shape == (4, 8) and lists.shape == (60,)
    assert torch.equal(lists, (docs @ centroids.T).argmax(1))  # every doc in its nearest list
    exact = (queries @ docs.T).argsort(dim=1, descending=True)[:, :3]
    found, scanned = rerank.ivf_search(queries, docs, centroids, lists, n_probe=4, k=3)
    assert torch.equal(found, exact) and (scanned == 60).all()
    one, scanned_one = rerank.ivf_search(queries, docs, centroids, lists, n_probe=1, k=3)
    sizes = torch.bincount(lists, minlength=4)
    nearest = (queries @ centroids.T).argmax(1)
    assert torch.equal(scanned_one, sizes[nearest])  # only the nearest list is scanned
    assert all(lists[j] == nearest[i] for i, row in enumerate(one) for j in row if j >= 0)
    with pytest.raises(ValueError, match="n_probe"):
        rerank.ivf_search(queries, docs, centroids, lists, n_probe=5, k=3)
    with pytest.raises(ValueError, match="n_lists"):
        rerank.kmeans(docs, n_lists=61)


def test_the_committed_cross_artefact(minilm):  # a missing artefact fails: it is committed
    tensors, meta = load_artefact("l8-cross")
    assert meta["command"] == "python -m encoderlab train l8-cross"
    assert {k: meta[k] for k in rerank.CROSS if k != "steps"} == \
        {k: str(v) for k, v in rerank.CROSS.items() if k != "steps"}
    assert len(tensors["loss"]) == int(meta["steps"]) == rerank.CROSS["steps"]
    assert artefact_path("l8-cross").stat().st_size < 5 * 2**20
    assert tensors["loss"][-20:].mean() < 0.5 < 1.4 < tensors["loss"][:5].mean()
    _, model = minilm
    scorer = rerank.load_pair_scorer(model, tensors, pooling=meta["pooling"])
    assert not scorer.training

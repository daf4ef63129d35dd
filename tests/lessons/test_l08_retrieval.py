"""Lesson 8: sentence embeddings against the reference, search, recall, the in-batch-negatives
loss, the joint pass and the contrastive recipe (pooling itself: tests/core/test_heads.py)."""

from __future__ import annotations

import pytest
import torch
from tiny_contrastive import tiny_encoder, tiny_pairs
from torch.nn import functional as F

from encoderlab.encoder import EncoderConfig
from encoderlab.heads import pool
from encoderlab.lessons import l08_contrastive as contrastive
from encoderlab.lessons import l08_retrieval as R
from encoderlab.pretrained import find_weights

# Sentences of very different lengths, so that every batch has padding.
SENTENCES = [
    "A loop can be left early with break.",
    "Exceptions.",
    "The with statement wraps the execution of a block with methods defined by a context "
    "manager, so that clean-up code runs even when the block raises an exception.",
    "Names refer to objects.",
    "A slicing selects a range of items in a sequence object such as a string, tuple or list.",
    "pass does nothing",
    "Floating point literals are described by the following lexical definitions, with an "
    "optional exponent part.",
]


# --- sentence_embeddings against the reference pipeline ------------------------------------------


def _reference_embeddings(texts, batch_size):
    """The all-MiniLM-L6-v2 model card's recipe: AutoModel, mean over the mask, L2 norm."""
    transformers = pytest.importorskip(
        "transformers", reason="transformers is the reference; pip install transformers")
    folder = str(find_weights())
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True,
                              max_length=256, return_tensors="pt")
            tokens = model(**batch).last_hidden_state  # (b, n, d)
            weights = batch["attention_mask"].unsqueeze(-1).float()  # (b, n, 1)
            mean = (tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            out.append(F.normalize(mean, p=2, dim=1))
    return torch.cat(out)


@pytest.mark.parametrize("batch_size", [1, 3, 4, 32])
def test_sentence_embeddings_equal_the_reference(minilm, batch_size):
    tokenizer, model = minilm
    ours = R.sentence_embeddings(tokenizer, model, SENTENCES, batch_size=batch_size)
    reference = _reference_embeddings(SENTENCES, batch_size=5)  # different batches on purpose
    assert ours.shape == (len(SENTENCES), 384)
    assert (ours - reference).abs().max() < 1e-6
    assert torch.allclose(ours.norm(dim=1), torch.ones(len(SENTENCES)), atol=1e-6)


def test_sentence_embeddings_errors(minilm):
    tokenizer, model = minilm
    with pytest.raises(ValueError, match="For one sentence, pass"):
        R.sentence_embeddings(tokenizer, model, "one string")
    with pytest.raises(ValueError, match="non-empty list of strings"):
        R.sentence_embeddings(tokenizer, model, [])
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        R.sentence_embeddings(tokenizer, model, ["a b"], batch_size=0)


def test_other_poolings_read_the_same_token_vectors(minilm):
    tokenizer, model = minilm
    pooled = R.sentence_embeddings(tokenizer, model, SENTENCES, how=("mean", "cls", "max"),
                                 batch_size=3)
    assert (pooled["mean"] - R.sentence_embeddings(tokenizer, model, SENTENCES)).abs().max() < 1e-6
    raw = R.sentence_embeddings(tokenizer, model, SENTENCES, how="cls", normalize=False)
    assert torch.allclose(F.normalize(raw, dim=-1), pooled["cls"], atol=1e-6)
    # the last block run again on cached H^(L-1) gives the same vectors as the full pass
    states = R.cache_states(tokenizer, model, SENTENCES, layer=-2, batch_size=4)
    assert states.layer == 5
    again = R.pool_cached(states, ("mean", "cls"), block=model.blocks[-1])
    assert (again["mean"] - pooled["mean"]).abs().max() < 1e-5
    assert (again["cls"] - pooled["cls"]).abs().max() < 1e-5


def test_pooling_errors(minilm):
    tokenizer, model = minilm
    with pytest.raises(ValueError, match="how must be one of"):
        R.sentence_embeddings(tokenizer, model, ["a b c"], how="sum")
    with pytest.raises(ValueError, match="non-empty list of strings"):
        R.sentence_embeddings(tokenizer, model, "a b c")
    with pytest.raises(ValueError, match="layer must be an int from -7 to 6"):
        R.cache_states(tokenizer, model, ["a b"], layer=7)


def test_mean_pairwise_cosine():
    assert R.mean_pairwise_cosine(torch.tensor([[1.0, 0.0], [0.0, 2.0]])) == pytest.approx(0.0)
    assert R.mean_pairwise_cosine(torch.tensor([[1.0, 1.0], [2.0, 2.0], [3, 3]])) == \
        pytest.approx(1.0)
    with pytest.raises(ValueError, match="m >= 2"):
        R.mean_pairwise_cosine(torch.ones(1, 3))


# --- documents, queries, search and recall --------------------------------------------------------


def test_topic_documents_and_queries():
    docs = R.topic_documents()
    assert len(docs) == len(set(docs.names)) == len(set(docs.texts)) > 60
    assert docs.fingerprint == R.topic_documents().fingerprint  # deterministic
    assert all(5 <= len(t.split()) for t in docs.texts)
    queries, answers = R.query_answers(docs)
    assert 20 <= len(queries) <= 40 and all(answers)
    assert docs.names[next(iter(answers[0]))] == "break"
    assert "Documents(" in repr(docs) and "topics" in repr(docs)
    with pytest.raises(ValueError, match="none of which these documents have"):
        R.query_answers(docs, [("where is it", ("no-such-topic",))])
    with pytest.raises(ValueError, match="no document called 'nope'"):
        docs.index("nope")
    with pytest.raises(ValueError, match="max_words must be an int >= 5"):
        R.topic_documents(max_words=2)


def test_search_ranks_by_cosine_and_breaks_ties_by_index():
    docs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [1.0, 1.0]])
    queries = torch.tensor([[1.0, 0.1], [0.0, 3.0]])
    scores, ranked = R.search(queries, docs, k=3)
    assert ranked.tolist() == [[0, 2, 3], [1, 3, 0]]  # docs 0 and 2 tie: lower index first
    assert torch.allclose(scores[1], torch.tensor([1.0, 2 ** -0.5, 0.0]))
    assert torch.allclose(R.cosine_scores(queries, docs)[0, 0], scores[0, 0])
    with pytest.raises(ValueError, match=r"k must be an int from 1 to 4 \(at most the number of"):
        R.search(queries, docs, k=5)
    with pytest.raises(ValueError, match="same width"):
        R.search(queries, torch.ones(3, 4), k=1)
    with pytest.raises(ValueError, match="doc_vecs must be a 2-d tensor"):
        R.search(queries, torch.ones(3), k=1)


def test_recall_and_mrr():
    ranked = torch.tensor([[3, 1, 4], [0, 2, 1], [4, 3, 2]])
    answers = [{1}, {0, 3}, {7}]
    assert R.recall_at_k(ranked, answers, 1) == pytest.approx(1 / 3)
    assert R.recall_at_k(ranked, answers, 2) == pytest.approx(2 / 3)
    assert R.recall_at_k(ranked, answers, 3) == pytest.approx(2 / 3)
    assert R.mean_reciprocal_rank(ranked, answers) == pytest.approx((1 / 2 + 1 + 0) / 3)
    with pytest.raises(ValueError, match=r"k must be an int from 1 to 3 \(at most the ranked"):
        R.recall_at_k(ranked, answers, 4)
    with pytest.raises(ValueError, match="one set per query: 3 queries, 2 answer sets"):
        R.recall_at_k(ranked, answers[:2], 1)
    with pytest.raises(ValueError, match=r"ranked must be \(n_q, r\)"):
        R.mean_reciprocal_rank(torch.tensor([1, 2]), [{1}])


def test_bm25_matches_hand_computed_scores():
    docs = ["loop break loop", "loop continue", "keys values map"]  # lengths 3, 2, 3; mean 8/3
    scores = R.bm25_scores(["how do I break a loop"], docs)  # query words: break, loop
    # idf(break) = ln(1 + 2.5/1.5) = 0.980829; idf(loop) = ln(1 + 1.5/2.5) = 0.470004
    # doc 0: k1 (1 - b + b 3/(8/3)) = 1.3125; break 1 * 2.2/2.3125, loop 2 * 2.2/3.3125
    # doc 1: k1 (1 - b + b 2/(8/3)) = 0.975; loop 1 * 2.2/1.975
    expected = torch.tensor([[0.980829 * 0.951351 + 0.470004 * 1.328302,
                              0.470004 * 1.113924, 0.0]])
    assert torch.allclose(scores, expected, atol=1e-5)
    assert R.word_tokens("How do I break a Loop?") == ["break", "loop"]
    q = R.bm25_scores(["break", "break break"], docs)  # a repeated query word counts twice
    assert torch.allclose(q[1], 2 * q[0])
    with pytest.raises(ValueError, match="k1 must be >= 0"):
        R.bm25_scores(["x"], docs, b=2.0)


def test_rank_by_scores_and_diagonal_ranks():
    scores = torch.tensor([[0.1, 0.5, 0.5], [0.9, 0.2, 0.3], [0.0, 0.0, 0.4]])
    assert R.rank_by_scores(scores).tolist() == [[1, 2, 0], [0, 2, 1], [2, 0, 1]]
    assert R.diagonal_ranks(scores).tolist() == [3, 3, 1]  # ties count against the partner
    with pytest.raises(ValueError, match="scores must be square"):
        R.diagonal_ranks(torch.zeros(2, 3))


def test_ndcg_at_k_by_hand():
    # right documents 0 and 2; ranked 3, 0, 1, 2: a hit at rank 2, and rank 4 is past k = 3
    ndcg = R.ndcg_at_k(torch.tensor([[3, 0, 1, 2]]), [{0, 2}], k=3)
    assert ndcg == pytest.approx(0.630930 / 1.630930, abs=1e-6)
    assert R.ndcg_at_k(torch.tensor([[2, 0, 1], [1, 0, 2]]), [{0, 2}, {1}], k=3) == 1.0
    with pytest.raises(ValueError, match="at least one right document"):
        R.ndcg_at_k(torch.tensor([[0, 1]]), [set()], k=2)


def test_minilm_mean_pooling_beats_cls_on_the_queries(minilm):
    """The lesson's headline measurement, kept as a regression test."""
    tokenizer, model = minilm
    docs = R.topic_documents()
    queries, answers = R.query_answers(docs)
    d = R.sentence_embeddings(tokenizer, model, docs.texts, how=("mean", "cls"))
    q = R.sentence_embeddings(tokenizer, model, queries, how=("mean", "cls"))
    recall = {h: R.recall_at_k(R.search(q[h], d[h], 5)[1], answers, 5) for h in ("mean", "cls")}
    assert recall["mean"] > recall["cls"]
    assert R.mean_pairwise_cosine(d["cls"]) > R.mean_pairwise_cosine(d["mean"])


# --- the loss and the joint pass ------------------------------------------------------------------


def test_in_batch_negatives_loss():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    logits = 20 * F.normalize(a, dim=1) @ F.normalize(b, dim=1).T
    expected = F.cross_entropy(logits, torch.arange(5))
    assert torch.allclose(R.in_batch_negatives_loss(a, b), expected)
    # orthogonal pairs that match exactly: the loss is near 0 at a large scale
    eye = torch.eye(4)
    assert R.in_batch_negatives_loss(eye, 3 * eye, scale=50.0) < 1e-6
    # identical rows everywhere: nothing to tell apart, the loss is ln B
    same = torch.ones(4, 3)
    assert R.in_batch_negatives_loss(same, same) == pytest.approx(torch.log(torch.tensor(4.0)))
    with pytest.raises(ValueError, match="row i of a pairs with row i of b"):
        R.in_batch_negatives_loss(a, b[:3])


def test_cross_segment_attention():
    # 1 sequence, A = positions 0-2, B = positions 3-4, one layer with two heads
    types = torch.tensor([[0, 0, 0, 1, 1]])
    weights = torch.zeros(1, 2, 5, 5)
    weights[0, 0, :, 3] = 1.0  # head 0: everything on B's first token
    weights[0, 1, :, 0] = 1.0  # head 1: everything on [CLS]
    share = R.cross_segment_attention([weights], types)
    assert share.shape == (1,) and share.item() == pytest.approx(0.5)
    # a padded key of B is not counted, a padded query of A is not averaged
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    weights2 = torch.zeros(1, 1, 5, 5)
    weights2[0, 0, :, 4] = 1.0
    assert R.cross_segment_attention([weights2], types, mask).item() == 0.0
    # ignore_keys leaves chosen keys of B out: here the one B key that head 0 looks at
    ignore = torch.tensor([[False, False, False, True, False]])
    assert R.cross_segment_attention([weights], types, ignore_keys=ignore).item() == 0.0
    with pytest.raises(ValueError, match="ignore_keys must have the shape of token_type_ids"):
        R.cross_segment_attention([weights], types, ignore_keys=ignore[:, :3])
    with pytest.raises(ValueError, match="do not match token_type_ids of length 5"):
        R.cross_segment_attention([torch.zeros(1, 1, 4, 4)], types)
    with pytest.raises(ValueError, match=r"token_type_ids must be \(b, n\)"):
        R.cross_segment_attention([weights], types[0])


def test_cross_segment_attention_on_a_real_pair(minilm):
    tokenizer, model = minilm
    batch = tokenizer(["how do I leave a loop early"], ["break ends the nearest loop."],
                      return_tensors="pt")
    out = model(**batch, output_attentions=True)
    share = R.cross_segment_attention(out.attentions, batch["token_type_ids"])
    assert share.shape == (6,) and bool((share > 0).all()) and bool((share < 1).all())


# --- the contrastive run ------------------------------------------------------------------------


def test_docstring_pairs_share_nothing_with_the_documents_or_queries():
    pairs = contrastive.docstring_pairs()
    assert len(pairs) > 300
    docs = R.topic_documents()
    texts = " ".join(docs.texts)
    queries = {q for q, _ in R.QUERIES}
    assert not any(a in texts or a in queries for a, _ in pairs)
    assert len({a for a, _ in pairs}) == len(pairs)


def test_contrastive_run_lowers_the_loss_on_a_tiny_model():
    model = tiny_encoder()
    _, _, data = tiny_pairs(model)
    block = model.blocks[-1]
    history = contrastive.contrastive_run(block, data, steps=30, batch_size=8, lr=3e-3,
                                          progress=False)
    assert len(history) == 30 and sum(history[-5:]) < sum(history[:5])


def test_recipe_runs_and_the_artefact_loads(minilm, tmp_path, monkeypatch):
    from safetensors import safe_open

    from encoderlab.course.train import main

    few = contrastive.docstring_pairs()[:40]  # a few pairs keep the frozen layers' pass short
    monkeypatch.setattr(contrastive, "docstring_pairs", lambda: few)
    out = tmp_path / "l8.safetensors"
    assert main(["l8-contrastive", "--steps", "3", "--quiet", "--out", str(out)]) == 0
    with safe_open(str(out), framework="pt") as f:
        keys = set(f.keys())
        meta = f.metadata()
    assert {"loss", "block.attention.w_q.weight", "block.norm_2.bias"} <= keys
    assert meta["steps"] == "3" and meta["train_pairs"] == "36" and meta["pooling"] == "cls"


def test_committed_artefact_loads_into_a_block(minilm):
    from encoderlab.training import artefact_path, load_artefact

    assert artefact_path("l8-contrastive").is_file(), "the committed l8-contrastive is missing"
    tensors, metadata = load_artefact("l8-contrastive")
    assert metadata["command"] == "python -m encoderlab train l8-contrastive"
    assert metadata["documents"] == R.topic_documents().fingerprint
    assert tensors["loss"].shape == (int(metadata["steps"]),)
    block = contrastive.load_contrastive_block(minilm[1], tensors)
    assert not block.training
    assert not torch.equal(block.attention.w_q.weight, minilm[1].blocks[-1].attention.w_q.weight)


# --- paired retrieval, the raw MLM encoder, the held-out split (Lesson 8, §3 and §5) ---------


def test_pair_ranks_and_ties():
    a = torch.eye(3)
    assert R.pair_ranks(a, a).tolist() == [1, 1, 1]
    b = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    # query 0's partner scores 0, below b_1 and tied with b_2: a tie counts against it
    assert R.pair_ranks(a, b).tolist() == [3, 3, 1]
    same = torch.ones(4, 3)  # every vector equal: a tie counts against the partner
    assert R.pair_ranks(same, same).tolist() == [4, 4, 4, 4]
    with pytest.raises(ValueError, match="one row per pair"):
        R.pair_ranks(torch.eye(3), torch.eye(4)[:, :3])


def test_rank_sign_test():
    t = R.rank_sign_test(torch.tensor([1, 1, 2, 5]), torch.tensor([3, 1, 4, 2]))
    assert (t["a_better"], t["b_better"]) == (2, 1)
    assert t["p_value"] == pytest.approx(1.0)  # 3 coin flips: a 2-1 split is anything but rare
    t = R.rank_sign_test(torch.ones(12, dtype=torch.long), torch.full((12,), 2))
    assert t["a_better"] == 12 and t["p_value"] == pytest.approx(2 / 2**12)
    assert R.rank_sign_test(torch.ones(3), torch.ones(3))["p_value"] == 1.0  # all ties
    with pytest.raises(ValueError, match="same length"):
        R.rank_sign_test(torch.ones(3), torch.ones(4))


def test_compact_pooled_embeddings_match_pool():
    from encoderlab.data import CompactVocab
    from encoderlab.heads import TinyLM
    from encoderlab.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.from_vocab_file(find_weights() / "vocab.txt")
    texts = ["the loop ends here .", "the loop ends .", "a file is closed .", "a file ."]
    vocab = CompactVocab(tokenizer, texts, min_count=1)
    torch.manual_seed(0)
    model = TinyLM(EncoderConfig(vocab_size=vocab.size, d_model=16, n_heads=2, n_layers=1,
                                 d_ff=32, n_max=16, dropout=0.0), causal=False).eval()
    out = R.compact_pooled_embeddings(model, vocab, texts, batch_size=3, max_length=16)
    ids, mask = vocab.encode(texts, 16)
    with torch.no_grad():
        hidden = model.encode(ids, mask).last_hidden_state
    for how in ("cls", "mean", "max"):
        assert torch.allclose(out[how], F.normalize(pool(hidden, mask, how), dim=-1), atol=1e-6)
    one = R.compact_pooled_embeddings(model, vocab, texts, how="mean", normalize=False,
                                      max_length=16)
    assert one.shape == (4, 16)
    with pytest.raises(ValueError, match="max_length"):
        R.compact_pooled_embeddings(model, vocab, texts, max_length=64)  # n_max is 16
    with pytest.raises(ValueError, match="how must be"):
        R.compact_pooled_embeddings(model, vocab, texts, how="sum", max_length=16)
    with pytest.raises(ValueError, match="list of strings"):
        R.compact_pooled_embeddings(model, vocab, "one text", max_length=16)


def test_split_pairs_holds_out_every_tenth_without_overlap():
    from encoderlab.data import word_spans

    train, held = contrastive.split_pairs()
    pairs = contrastive.docstring_pairs()
    assert train == [p for i, p in enumerate(pairs) if i % 10 != 9]
    assert set(held) <= set(pairs[9::10]) and 0 < len(held) <= len(pairs[9::10])
    seen = set().union(*(word_spans(t, 8) for p in train for t in p))
    assert not any(word_spans(t, 8) & seen for p in held for t in p)
    with pytest.raises(ValueError, match="held_out_every"):
        contrastive.split_pairs(held_out_every=1)


def test_rank_sign_test_within_k():
    ranks_a, ranks_b = torch.tensor([1, 2, 6, 1, 3]), torch.tensor([4, 1, 9, 1, 2])
    at_1 = R.rank_sign_test(ranks_a, ranks_b, k=1)  # hits at 1: a {0, 3}, b {1, 3}
    assert (at_1["a_better"], at_1["b_better"]) == (1, 1)
    at_5 = R.rank_sign_test(ranks_a, ranks_b, k=5)  # everyone but query 2 is a hit for both
    assert (at_5["a_better"], at_5["b_better"]) == (0, 0) and at_5["p_value"] == 1.0
    full = R.rank_sign_test(ranks_a, ranks_b)  # without k every rank counts
    assert (full["a_better"], full["b_better"]) == (2, 2)
    t = R.rank_sign_test(torch.ones(8, dtype=torch.long), torch.full((8,), 9), k=5)
    assert t["a_better"] == 8 and t["p_value"] == pytest.approx(2 / 2**8)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="k must be None"):
            R.rank_sign_test(ranks_a, ranks_b, k=bad)


def test_first_right_ranks_agree_with_recall_and_mrr():
    ranked = torch.tensor([[2, 0, 1], [1, 2, 0], [0, 1, 2]])
    answers = [{0}, {1, 0}, {5}]  # query 2's answer is not among the ranked documents
    ranks = R.first_right_ranks(ranked, answers)
    assert ranks.tolist() == [2, 1, 4] and ranks.dtype == torch.long
    for k in (1, 2, 3):
        assert float((ranks <= k).double().mean()) == pytest.approx(
            R.recall_at_k(ranked, answers, k))
    reciprocal = torch.where(ranks <= 3, 1 / ranks.double(), torch.zeros(3, dtype=torch.double))
    assert float(reciprocal.mean()) == pytest.approx(R.mean_reciprocal_rank(ranked, answers))
    with pytest.raises(ValueError, match="one set per query"):
        R.first_right_ranks(ranked, answers[:2])


def test_alignment_and_uniformity():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 16, generator=g)
    assert R.alignment(a, 3 * a) == pytest.approx(0.0, abs=1e-6)  # scale does not matter
    assert R.alignment(a, -a) == pytest.approx(4.0, abs=1e-5)  # antipodal partners: |2u|^2
    assert R.alignment(a, a + 0.1 * torch.randn(64, 16, generator=g)) < R.alignment(
        a, torch.randn(64, 16, generator=g))
    same = torch.ones(10, 4)
    assert R.uniformity(same) == pytest.approx(0.0, abs=1e-6)  # all on one point: the maximum
    spread = R.uniformity(a)
    assert spread < R.uniformity(a + 3.0) < 0  # a shared component makes them less uniform
    two = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])  # distance 2: log e^(-2 * 4) = -8
    assert R.uniformity(two) == pytest.approx(-8.0)
    with pytest.raises(ValueError, match="same shape"):
        R.alignment(a, a[:3])
    with pytest.raises(ValueError, match="at least two rows"):
        R.uniformity(a[:1])


def test_attention_share():
    weights = torch.tensor([[0.5, 0.25, 0.25, 0.0],
                            [0.1, 0.2, 0.3, 0.4],
                            [0.0, 0.0, 1.0, 0.0],
                            [1.0, 0.0, 0.0, 0.0]]).expand(1, 2, 4, 4)  # (b, h, n, n)
    rows = torch.tensor([[True, True, False, False]])
    first = torch.tensor([[True, False, False, False]])
    share = R.attention_share([weights, weights], rows, first)
    assert share.shape == (2,) and share[0].item() == pytest.approx((0.5 + 0.1) / 2)
    types = torch.tensor([[0, 0, 1, 1]])  # the complement of segment A is cross_segment_attention
    own = R.attention_share([weights], rows, types == 0)
    assert (own + R.cross_segment_attention([weights], types, ignore_keys=None)).item() == \
        pytest.approx(1.0)
    with pytest.raises(ValueError, match="boolean"):
        R.attention_share([weights], rows.long(), first)
    with pytest.raises(ValueError, match="do not match"):
        R.attention_share([torch.zeros(1, 1, 3, 3)], rows, first)

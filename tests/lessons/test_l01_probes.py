"""Reading one word's vectors out of the real MiniLM, and comparing them (Lesson 1, §4)."""

import pytest
import torch
from torch.nn import functional as F

from encoderlab.lessons.l01_probes import (
    attention_between_words,
    attention_from_other_words,
    cosine_similarity_matrix,
    group_similarity,
    static_embedding,
    token_vectors,
    word_positions,
)

RIVER = "we had a picnic on the bank of the river"
LENDER = "the bank approved our loan"


# --- word_positions --------------------------------------------------------------------------


def test_positions_count_from_cls(minilm):
    tokenizer, _ = minilm
    # [CLS] we had a picnic on the bank ...: "bank" is token 6 of the text, position 7
    assert word_positions(tokenizer, RIVER, "bank") == [7]
    assert word_positions(tokenizer, LENDER, "bank") == [2]
    ids = tokenizer(RIVER)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids[7]) == "bank"


def test_a_split_word_returns_all_its_pieces(minilm):
    tokenizer, _ = minilm
    text = "after the flood the river overflowed its bank"
    assert tokenizer.tokenize("overflowed") == ["over", "##flow", "##ed"]
    positions = word_positions(tokenizer, text, "overflowed")
    assert positions == [6, 7, 8]
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
    assert [tokens[p] for p in positions] == ["over", "##flow", "##ed"]


def test_matching_is_on_whole_words_after_normalisation(minilm):
    tokenizer, _ = minilm
    text = "after the flood the river overflowed its bank"
    with pytest.raises(ValueError, match="does not occur as a whole word"):
        word_positions(tokenizer, text, "over")  # only the first piece of "overflowed"
    assert word_positions(tokenizer, "The BANK was closed", "bank") == [2]  # lower-cased


def test_occurrence_picks_a_repeated_word(minilm):
    tokenizer, _ = minilm
    text = "the bank by the bank"
    assert word_positions(tokenizer, text, "bank") == [2]
    assert word_positions(tokenizer, text, "bank", occurrence=1) == [5]
    with pytest.raises(ValueError, match="occurs 2 time.*occurrence from 0 to 1"):
        word_positions(tokenizer, text, "bank", occurrence=2)
    with pytest.raises(ValueError, match="occurrence must be an int >= 0"):
        word_positions(tokenizer, text, "bank", occurrence=-1)


def test_absent_or_empty_words_fail_clearly(minilm):
    tokenizer, _ = minilm
    with pytest.raises(ValueError, match=r"'bank' .*does not occur.*Pass texts that contain"):
        word_positions(tokenizer, "a quiet river", "bank")
    with pytest.raises(ValueError, match="non-empty string"):
        word_positions(tokenizer, RIVER, "  ")
    with pytest.raises(ValueError, match="text must be a string"):
        word_positions(tokenizer, ["a list"], "bank")


# --- token_vectors and static_embedding ------------------------------------------------------


def test_token_vectors_read_the_hidden_state_at_the_word(minilm):
    tokenizer, model = minilm
    vectors = token_vectors(tokenizer, model, [RIVER, LENDER], "bank")
    assert vectors.shape == (2, model.config.d_model)
    with torch.no_grad():
        out = model(**tokenizer([RIVER], return_tensors="pt"))
    torch.testing.assert_close(vectors[0], out.last_hidden_state[0, 7])
    first_layer = token_vectors(tokenizer, model, [RIVER], "bank", layer=1)
    torch.testing.assert_close(first_layer[0], out.hidden_states[1][0, 7])


def test_layer_none_returns_every_hidden_state(minilm):
    tokenizer, model = minilm
    texts = [RIVER, "after the flood the river overflowed its bank"]
    every = token_vectors(tokenizer, model, texts, "bank", layer=None)
    assert every.shape == (model.config.n_layers + 1, 2, model.config.d_model)
    for layer in (0, 3, -1):
        torch.testing.assert_close(every[layer], token_vectors(tokenizer, model, texts, "bank",
                                                               layer=layer))


def test_layer_zero_is_the_embedding_layer_output(minilm):
    tokenizer, model = minilm
    h0 = token_vectors(tokenizer, model, [RIVER], "bank", layer=0)[0]
    e = model.embeddings
    with torch.no_grad():
        expected = e.norm(e.token.weight[2924] + e.segment.weight[0] + e.position.weight[7])
    torch.testing.assert_close(h0, expected)


def test_a_split_word_gets_the_mean_of_its_pieces(minilm):
    tokenizer, model = minilm
    text = "after the flood the river overflowed its bank"
    vector = token_vectors(tokenizer, model, text, "overflowed")  # a str is one text
    with torch.no_grad():
        h = model(**tokenizer([text], return_tensors="pt")).last_hidden_state[0]
    torch.testing.assert_close(vector[0], h[6:9].mean(dim=0))


def test_causal_vectors_depend_only_on_the_prefix(minilm):
    tokenizer, model = minilm
    texts = ["the bank of the river was steep", LENDER]  # the same prefix "[CLS] the bank"
    causal = token_vectors(tokenizer, model, texts, "bank", causal=True)
    assert (causal[0] - causal[1]).abs().max() <= 1e-6
    full = token_vectors(tokenizer, model, texts, "bank")
    assert (full[0] - full[1]).abs().max() > 0.1


def test_token_vectors_errors(minilm):
    tokenizer, model = minilm
    with pytest.raises(ValueError, match="layer must be an int from -7 to 6, or None"):
        token_vectors(tokenizer, model, [RIVER], "bank", layer=7)
    with pytest.raises(ValueError, match="non-empty list of strings"):
        token_vectors(tokenizer, model, [], "bank")
    with pytest.raises(ValueError, match="does not occur"):
        token_vectors(tokenizer, model, [RIVER, "no such word here"], "bank")


def test_static_embedding_is_the_table_row(minilm):
    tokenizer, model = minilm
    table = model.embeddings.token.weight
    torch.testing.assert_close(static_embedding(tokenizer, model, "bank"), table[2924])
    ids = tokenizer.convert_tokens_to_ids(["over", "##flow", "##ed"])
    torch.testing.assert_close(
        static_embedding(tokenizer, model, "overflowed"), table[ids].mean(dim=0)
    )


# --- cosine_similarity_matrix and group_similarity ------------------------------------------


def test_cosine_matrix_equals_pairwise_cosine():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(5, 7, generator=g), torch.randn(3, 7, generator=g)
    s = cosine_similarity_matrix(x, y)
    assert s.shape == (5, 3)
    expected = F.cosine_similarity(x[:, None, :], y[None, :, :], dim=-1)
    torch.testing.assert_close(s, expected)
    square = cosine_similarity_matrix(x * torch.arange(1.0, 6.0)[:, None])  # lengths don't matter
    torch.testing.assert_close(square, cosine_similarity_matrix(x))
    torch.testing.assert_close(square.diagonal(), torch.ones(5))


def test_cosine_matrix_errors():
    with pytest.raises(ValueError, match=r"2-D tensor \(m, d\)"):
        cosine_similarity_matrix(torch.randn(4))
    with pytest.raises(ValueError, match="same width d"):
        cosine_similarity_matrix(torch.randn(2, 3), torch.randn(2, 4))


def test_group_similarity_by_hand():
    s = torch.tensor([
        [1.0, 0.8, 0.2, 0.4],
        [0.8, 1.0, 0.0, 0.2],
        [0.2, 0.0, 1.0, 0.6],
        [0.4, 0.2, 0.6, 1.0],
    ])
    result = group_similarity(s, ["a", "a", "b", "b"])
    assert result["within"] == pytest.approx(0.7)  # (0.8 + 0.6) / 2, the diagonal left out
    assert result["cross"] == pytest.approx(0.2)  # (0.2 + 0.4 + 0.0 + 0.2) / 4
    assert result["gap"] == pytest.approx(0.5)


def test_group_similarity_errors():
    s = torch.eye(3)
    with pytest.raises(ValueError, match="one group per row: 3 rows, 2 names"):
        group_similarity(s, ["a", "b"])
    with pytest.raises(ValueError, match="at least two groups"):
        group_similarity(s, ["a", "a", "a"])
    with pytest.raises(ValueError, match="no within-group pair"):
        group_similarity(s, ["a", "b", "c"])
    with pytest.raises(ValueError, match="square"):
        group_similarity(torch.ones(2, 3), ["a", "b"])


# --- attention_between_words (Lesson 3, §2) ----------------------------------------------------


def _attention(tokenizer, model, text):
    """Every layer's and head's attention for one sentence, read straight from the model."""
    enc = tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        return torch.stack(model(**enc, output_attentions=True).attentions)[:, 0]  # (L, h, n, n)


def test_attention_between_words_reads_the_model_s_weights(minilm):
    tokenizer, model = minilm
    text = "the dog chased the ball because it was bored"
    w = attention_between_words(tokenizer, model, text, "it", ["dog", "ball"])
    a = _attention(tokenizer, model, text)  # (L, h, n, n)
    i = word_positions(tokenizer, text, "it")[0]
    dog = word_positions(tokenizer, text, "dog")[0]
    ball = word_positions(tokenizer, text, "ball")[0]
    L, h = model.config.n_layers, model.config.n_heads
    assert w.shape == (L, h, 2)
    assert torch.allclose(w[..., 0], a[:, :, i, dog])
    assert torch.allclose(w[..., 1], a[:, :, i, ball])
    assert (w >= 0).all() and (w.sum(dim=-1) <= 1 + 1e-6).all()


def test_attention_between_words_sums_a_split_key_word(minilm):
    tokenizer, model = minilm
    text = "the river overflowed and it flooded the town"
    w = attention_between_words(tokenizer, model, text, "it", ["overflowed"])
    a = _attention(tokenizer, model, text)  # (L, h, n, n)
    i = word_positions(tokenizer, text, "it")[0]
    pieces = word_positions(tokenizer, text, "overflowed")
    assert len(pieces) == 3
    assert torch.allclose(w[..., 0], a[:, :, i, pieces].sum(dim=-1))


def test_attention_between_words_errors(minilm):
    tokenizer, model = minilm
    text = "the dog chased the ball because it was bored"
    with pytest.raises(ValueError, match="non-empty list"):
        attention_between_words(tokenizer, model, text, "it", "dog")
    with pytest.raises(ValueError, match="non-empty list"):
        attention_between_words(tokenizer, model, text, "it", [])
    with pytest.raises(ValueError, match="also among the key words"):
        attention_between_words(tokenizer, model, text, "it", ["it", "dog"])
    with pytest.raises(ValueError, match="does not occur"):
        attention_between_words(tokenizer, model, text, "it", ["cat"])


def test_attention_from_other_words_averages_the_remaining_rows(minilm):
    tokenizer, model = minilm
    text = "the dog chased the ball because it was bored"
    w = attention_from_other_words(tokenizer, model, text, "it", ["dog", "ball"])
    a = _attention(tokenizer, model, text)  # (L, h, n, n)
    i = word_positions(tokenizer, text, "it")[0]
    dog = word_positions(tokenizer, text, "dog")[0]
    ball = word_positions(tokenizer, text, "ball")[0]
    others = [r for r in range(a.shape[-1]) if r not in (i, dog, ball)]
    assert w.shape == (model.config.n_layers, model.config.n_heads, 2)
    assert torch.allclose(w[..., 0], a[:, :, others, dog].mean(dim=-1))
    assert torch.allclose(w[..., 1], a[:, :, others, ball].mean(dim=-1))
    # not the query's own row: the control differs from attention_between_words
    assert not torch.allclose(w, attention_between_words(tokenizer, model, text, "it",
                                                         ["dog", "ball"]))


def test_attention_from_other_words_errors(minilm):
    tokenizer, model = minilm
    text = "the dog chased the ball because it was bored"
    with pytest.raises(ValueError, match="non-empty list"):
        attention_from_other_words(tokenizer, model, text, "it", "dog")
    with pytest.raises(ValueError, match="also among the key words"):
        attention_from_other_words(tokenizer, model, text, "it", ["it", "dog"])
    with pytest.raises(ValueError, match="does not occur"):
        attention_from_other_words(tokenizer, model, text, "it", ["cat"])


# --- crossed_bank_sentences --------------------------------------------------------------------


def test_crossed_bank_sentences_is_a_balanced_2x2():
    from collections import Counter

    from encoderlab.lessons.l01_probes import crossed_bank_sentences

    texts, senses, topics = crossed_bank_sentences()
    assert len(texts) == len(set(texts)) == 32
    assert Counter(zip(senses, topics)) == {(s, t): 8 for s in ("lender", "river")
                                            for t in ("water", "money")}
    assert texts[0] == "after a day of fishing on the lake, we asked the bank for a loan"
    assert all(t.count("the bank") == 1 and t.split().count("bank") == 1 for t in texts)
    clauses = [t.split(",")[0] for t in texts]
    phrases = [t.split(", ")[1] for t in texts]
    assert len(set(clauses)) == len(set(phrases)) == 32  # nothing used twice
    assert senses[:16] == ["lender"] * 16 and topics[8:16] == ["money"] * 8


@pytest.mark.parametrize("per_cell", [1, 9, 2.5])
def test_crossed_bank_sentences_refuses_bad_sizes(per_cell):
    from encoderlab.lessons.l01_probes import crossed_bank_sentences

    with pytest.raises(ValueError, match="per_cell"):
        crossed_bank_sentences(per_cell)


# --- nearest_agreement and phrase_probe ---------------------------------------------------------


def test_nearest_agreement_counts_same_label_neighbours_by_hand():
    from encoderlab.lessons.l01_probes import nearest_agreement

    # rows 0 and 1 are each other's nearest (same label); row 2's nearest is row 1 (other
    # label); row 3's nearest is row 2 (same label). The diagonal (1.0) must not count.
    s = torch.tensor([[1.0, 0.9, 0.1, 0.2],
                      [0.9, 1.0, 0.8, 0.0],
                      [0.1, 0.8, 1.0, 0.7],
                      [0.2, 0.0, 0.7, 1.0]])
    assert nearest_agreement(s, ["a", "a", "b", "b"]) == 3
    assert nearest_agreement(s, ["a", "b", "a", "b"]) == 0
    with pytest.raises(ValueError, match="one group per row"):
        nearest_agreement(s, ["a", "b"])


def test_phrase_probe_reads_bank_the_and_the_clause(minilm):
    from encoderlab.lessons.l01_probes import crossed_bank_sentences, phrase_probe

    tokenizer, model = minilm
    texts, senses, topics = crossed_bank_sentences(per_cell=4)  # 16 sentences
    probe = phrase_probe(tokenizer, model, texts, senses, topics, draws=2)
    states = model.config.n_layers + 1
    assert probe.vectors["bank"].shape == (states, 16, model.config.d_model)
    # "bank" at the last layer is the vector token_vectors reads; "the" is the token before it
    assert torch.allclose(probe.vectors["bank"][-1],
                          token_vectors(tokenizer, model, texts, "bank"), atol=1e-5)
    enc = tokenizer([texts[0]], return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).hidden_states[3][0]  # (n, d)
    at = word_positions(tokenizer, texts[0], "bank")[0]
    comma = tokenizer.convert_ids_to_tokens(enc["input_ids"][0]).index(",")
    assert torch.allclose(probe.vectors["the"][3, 0], h[at - 1], atol=1e-5)
    assert torch.allclose(probe.vectors["clause"][3, 0], h[1:comma].mean(dim=0), atol=1e-5)
    assert all(0 <= c <= 16 for counts in probe.nearest.values() for c in counts)
    assert len(probe.effects["clause"]) == states
    table = probe.table().splitlines()
    assert "same sense (of 16)" in table[0] and table[1].split() == ["layer"] + ["bank", "the",
                                                                             "clause"] * 2
    assert len(table) == 2 + states


def test_phrase_probe_refuses_texts_without_a_clause(minilm):
    from encoderlab.lessons.l01_probes import phrase_probe

    tokenizer, model = minilm
    texts = ["we sat on the bank of the river"] * 4
    with pytest.raises(ValueError, match="'clause, phrase'"):
        phrase_probe(tokenizer, model, texts, ["r", "r", "l", "l"], ["w", "m", "w", "m"])
    with pytest.raises(ValueError, match="one entry per sentence"):
        phrase_probe(tokenizer, model, texts, ["r"], ["w"])

"""Lesson 2, §3: the WordPiece and BPE trainers, on a toy corpus worked out by hand."""

import math

import pytest

from encoderlab import data
from encoderlab.lessons import l02_vocab as lv

# The Hugging Face course's toy corpus. Symbol counts: h 15, p 17, b 4, ##u 36, ##g 20, ##n 16,
# ##s 5. Pair counts: h ##u 15, ##u ##g 20, p ##u 17, ##u ##n 16, b ##u 4, ##g ##s 5.
TOY = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}


def test_split_and_merged():
    assert lv.split_word("hugs") == ("h", "##u", "##g", "##s")
    assert lv.merged("h", "##u") == "hu"
    assert lv.merged("##u", "##g") == "##ug"
    assert lv.apply_merge(("a", "##a", "##a", "##a"), "##a", "##a") == ("a", "##aa", "##a")


def test_counts_by_hand():
    splits = {w: lv.split_word(w) for w in TOY}
    symbols, pairs = lv.count_symbols_and_pairs(splits, TOY)
    assert dict(symbols) == {"h": 15, "p": 17, "b": 4, "##u": 36, "##g": 20, "##n": 16, "##s": 5}
    assert dict(pairs) == {("h", "##u"): 15, ("##u", "##g"): 20, ("p", "##u"): 17,
                           ("##u", "##n"): 16, ("b", "##u"): 4, ("##g", "##s"): 5}


def test_wordpiece_merges_by_hand():
    # 1: every pair scores 1/36 except ##g ##s, 5 / (20 * 5) = 1/20.
    # 2: now every pair scores 1/36; the smallest pair wins the tie: ('##u', '##g').
    # 3: ##u ##n, b ##u and ##u ##gs all score 1/21 (h ##ug 10/225 is less); smallest: ##u ##gs.
    expected = [("##g", "##s"), ("##u", "##g"), ("##u", "##gs")]
    assert lv.train_merges_plain(TOY, 3, "ratio") == expected
    assert lv.train_merges(TOY, 3, "ratio") == expected


def test_bpe_merges_by_hand():
    # 1: ##u ##g, 20 times; 2: ##u ##n, 16 (pun, bun); 3: h ##ug, 15 (hug, hugs).
    expected = [("##u", "##g"), ("##u", "##n"), ("h", "##ug")]
    assert lv.train_merges_plain(TOY, 3, "frequency") == expected
    assert lv.train_merges(TOY, 3, "frequency") == expected


def test_gain_by_hand():
    # N = 113 symbols. The gain n log(n N / (count(a) count(b))) of ##u ##g is 20 log(113/36);
    # ##g ##s, the ratio's first choice, gains only 5 log(565/100); p ##u gains 17 log(113/36).
    assert lv.pair_score(20, 36, 20, 113, "gain") == pytest.approx(20 * math.log(113 / 36))
    assert lv.pair_score(5, 20, 5, 113, "gain") == pytest.approx(5 * math.log(5.65))
    assert lv.pair_score(5, 20, 5, 113, "ratio") == 1 / 20
    assert lv.pair_score(5, 20, 5, 113, "frequency") == 5
    splits = {w: lv.split_word(w) for w in TOY}
    symbols, pairs = lv.count_symbols_and_pairs(splits, TOY)
    assert lv.best_pair(pairs, symbols, "gain") == ("##u", "##g")
    assert lv.best_pair(pairs, symbols, "ratio") == ("##g", "##s")
    expected = [("##u", "##g"), ("##u", "##n"), ("h", "##ug")]  # here the same as BPE's
    assert lv.train_merges_plain(TOY, 3, "gain") == expected
    assert lv.train_merges(TOY, 3, "gain") == expected
    gain = lv.train_vocabulary(TOY, 7 + 3, "gain")
    assert gain.split("hugs") == ["hug", "##s"]  # applied by greedy longest-match
    assert gain.split("pugs") == ["p", "##ug", "##s"]


def test_ratio_ties_are_exact():
    # count(b ##y) / (count(b) count(##y)) = 1/3; count(a ##z) / (count(a) count(##z)) is the
    # float nearest 1/3, n / 2**54, a hair less. As floats they tie and the smaller pair,
    # ("a", "##z"), would win; compared exactly, ("b", "##y") has the higher score. (Counts far
    # larger than any corpus here; the exact comparison makes the rule hold for every count.)
    n = 6004799503160661
    symbols = {"a": 2**27, "##z": 2**27, "b": 1, "##y": 3}
    pairs = {("a", "##z"): n, ("b", "##y"): 1}
    assert n / 2**54 == 1 / 3 and n * 3 != 2**54
    assert lv.best_pair(pairs, symbols, "ratio") == ("b", "##y")
    pairs[("a", "##z")] = n + 1  # now a ##z is the higher: exact comparison follows
    assert lv.best_pair(pairs, symbols, "ratio") == ("a", "##z")


def test_stops_when_nothing_is_left():
    assert lv.train_merges_plain({"ab": 1, "c": 3}, 10) == [("a", "##b")]
    assert lv.train_merges({"ab": 1, "c": 3}, 10) == [("a", "##b")]


@pytest.mark.parametrize("score", lv.SCORES)
def test_fast_loop_makes_the_plain_loops_merges(score):
    counts = lv.word_counts(data.python_docs_corpus().train[:150])
    assert lv.train_merges(counts, 120, score) == lv.train_merges_plain(counts, 120, score)


def test_vocabulary_and_its_application():
    wp = lv.train_vocabulary(TOY, 7 + 3, "ratio")
    assert wp.pieces == ["##g", "##n", "##s", "##u", "b", "h", "p", "##gs", "##ug", "##ugs"]
    assert wp.split("hugs") == ["h", "##ugs"]  # greedy longest-match
    assert wp.split("hux") == ["[UNK]"]
    bpe = lv.train_vocabulary(TOY, 7 + 3, "frequency")
    assert bpe.split("hugs") == ["hug", "##s"]  # the merges replayed in order
    assert bpe.split("bug") == ["b", "##ug"]
    assert bpe.split("hux") == ["[UNK]"]
    assert bpe.truncated(8).merges == (("##u", "##g"),)
    assert lv.pieces_per_word({"hugs": 1, "bug": 3}, bpe.split) == pytest.approx(2.0)


def test_errors_say_what_to_do():
    with pytest.raises(ValueError, match="score must be one of"):
        lv.train_merges(TOY, 2, "count")
    with pytest.raises(ValueError, match="no pair left"):
        lv.best_pair({}, {})
    with pytest.raises(ValueError, match="no words"):
        lv.pieces_per_word({}, len)


def test_min_count_keeps_rare_pairs_out():
    # With min_count=6, b ##u (4) and ##g ##s (5) may not compete; the rest tie at 1/36, and the
    # smallest pair wins: ##u ##g. Then ##u ##n scores 16/(16·16) = 1/16, above h ##ug's
    # 15/(15·20) = 1/20 and p ##u's 12/(17·16); p ##ug (5) and ##ug ##s (5) are too rare.
    expected = [("##u", "##g"), ("##u", "##n")]
    assert lv.train_merges_plain(TOY, 2, "ratio", min_count=6) == expected
    assert lv.train_merges(TOY, 2, "ratio", min_count=6) == expected
    assert lv.train_merges(TOY, 50, "frequency", min_count=30) == []  # no pair is that common


def test_gain_ties_are_exact_whatever_the_order_of_the_factors():
    # ##d ##e and ##e ##d: the same count (4 each) and the same product count(##d) * count(##e),
    # so the same gain; summed logs in two orders can round apart, the rule picks ('##d', '##e').
    symbols = {"a": 4, "##d": 8, "##e": 8, "##x": 3}
    pairs = {("##d", "##e"): 4, ("##e", "##d"): 4, ("a", "##x"): 1}
    n = sum(symbols.values())
    expected_gain = 4 * math.log(4 * n / 64)
    assert lv.pair_score(4, 8, 8, n, "gain") == pytest.approx(expected_gain)
    assert lv.best_pair(pairs, symbols, "gain") == ("##d", "##e")


def test_score_table_by_hand():
    # hug 10, hugs 5: h 15, ##u 15, ##g 15, ##s 5, N = 50; h ##u and ##u ##g 15 each, ##g ##s 5.
    table = lv.score_table({"hug": 10, "hugs": 5}, per_line=2).splitlines()
    assert table[0] == "symbol counts: h 15, ##u 15, ##g 15, ##s 5; N = 50"
    gain_15, gain_5 = 15 * math.log(15 * 50 / 225), 5 * math.log(5 * 50 / 75)
    assert table[1] == (f"pairs (count, gain): h ##u (15, {gain_15:.1f}) · "
                        f"##u ##g (15, {gain_15:.1f})")
    assert table[2] == " " * len("pairs (count, gain): ") + f"##g ##s (5, {gain_5:.1f})"
    assert len(lv.score_table({"hug": 10, "hugs": 5}).splitlines()) == 2  # 3 to a line
    with pytest.raises(ValueError, match="counts is empty"):
        lv.score_table({})
    with pytest.raises(ValueError, match="per_line"):
        lv.score_table({"hug": 1}, per_line=0)


def test_error_of_names_the_exception_and_its_message():
    def too_long(n, limit=512):
        if n > limit:
            raise ValueError(f"{n} > {limit}")

    assert lv.error_of(too_long, 513) == "ValueError: 513 > 512"
    assert lv.error_of(too_long, 10, limit=5) == "ValueError: 10 > 5"
    assert lv.error_of(too_long, 3) == "no error"
    assert lv.error_of(lambda: [][1]) == "IndexError: list index out of range"
    with pytest.raises(ValueError, match="something to call"):
        lv.error_of("not a function")


def test_unigram_log_likelihood_by_hand():
    # Alphabet only (no merges): "ab" -> a ##b. Training "ab" x2: a 2, ##b 2; V = 2, so
    # p = (2 + 1) / (4 + 2) = 1/2 each. Held-out "ab" x1: 2 log(1/2) per word.
    vocab = lv.train_vocabulary({"ab": 2}, 2, "frequency")
    assert lv.unigram_log_likelihood({"ab": 2}, {"ab": 1}, vocab) == pytest.approx(
        2 * math.log(0.5))
    # With the merge a ##b: V = 3, training ab 2 -> p(ab) = 3/5; held-out "ab" costs log(3/5).
    merged_vocab = lv.train_vocabulary({"ab": 2}, 3, "frequency")
    assert lv.unigram_log_likelihood({"ab": 2}, {"ab": 1}, merged_vocab) == pytest.approx(
        math.log(3 / 5))
    with pytest.raises(ValueError, match="must both hold words"):
        lv.unigram_log_likelihood({}, {"ab": 1}, vocab)


def test_compare_with_reference_counts_calls_and_names_a_difference():
    class Fake:  # a stand-in tokenizer: fixed fields, word ids and offsets
        def __init__(self, ids):
            self.ids = ids

        def __call__(self, text, **kwargs):
            fake = self

            class Out(dict):
                def word_ids(self, r=0):
                    return [None, 0, None]

            return Out(input_ids=fake.ids, token_type_ids=[0, 0, 0], attention_mask=[1, 1, 1],
                       offset_mapping=[(0, 0), (0, 2), (0, 0)])

    calls = [(("hi",), {}), (("ho",), {})]
    assert lv.compare_with_reference(Fake([101, 7, 102]), Fake([101, 7, 102]), calls) == 2
    with pytest.raises(AssertionError, match="input_ids"):
        lv.compare_with_reference(Fake([101, 7, 102]), Fake([101, 8, 102]), calls)
    with pytest.raises(ValueError, match="calls is empty"):
        lv.compare_with_reference(Fake([1]), Fake([1]), [])


def test_compare_vocabularies_rows_by_hand():
    # Corpus "ab" x3, "a" x1; BPE at size 3 (a, ##b, ab): "ab" is one piece, "a" one piece.
    trained = {"BPE": lv.train_vocabulary({"ab": 3, "a": 1}, 3, "frequency")}
    rows = lv.compare_vocabularies(trained, {"ab": 3, "a": 1}, {"ab": 1, "a": 1}, [2, 3])
    assert rows["BPE, pieces per word"] == [1.5, 1.0]  # size 2: a ##b and a; size 3: ab and a
    assert rows["BPE's vocabulary, split greedily"] == [1.5, 1.0]
    # size 3: training pieces ab 3, a 1, N = 4, V = 3: p(ab) = 4/7, p(a) = 2/7.
    assert rows["BPE, log-likelihood per word"][1] == pytest.approx(
        (math.log(4 / 7) + math.log(2 / 7)) / 2)
    with pytest.raises(ValueError, match="at least one"):
        lv.compare_vocabularies({}, {"a": 1}, {"a": 1}, [2])

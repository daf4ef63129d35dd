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
of integers (:class:`fractions.Fraction`), so pairs whose scores are equal tie.

The vocabulary is the alphabet (every first symbol, sorted) followed by the merged symbols in
the order they were made. Applying it differs: a WordPiece vocabulary ("ratio" or "gain") is
applied by greedy longest-match (:func:`encoderlab.tokenizer.wordpiece`), a BPE one by
replaying its merges in order (:func:`bpe_pieces`). Training to the largest size once gives
every smaller vocabulary too: the first ``k`` merges are the ones a run stopped after ``k``
merges would make.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from encoderlab.pretokenizer import basic_tokenize
from encoderlab.tokenizer import wordpiece
from encoderlab.validate import check_int

__all__ = [
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

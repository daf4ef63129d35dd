"""Lesson 2's checkers: greedy longest-match WordPiece for one word (§2), WordPiece's training
loop (§3), and framing a text or a pair with [CLS]/[SEP] and segment ids (§4)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import cache, partial

import torch

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    Message,
    checker,
    run,
    short_value,
)
from encoderlab.lessons import l02_vocab
from encoderlab.tokenizer import UNK, WordPieceTokenizer, wordpiece
from encoderlab.validate import is_int

__all__ = ["check_wordpiece", "check_wordpiece_merges", "check_build_inputs"]

# --- WordPiece for one word (Lesson 2, §2) -----------------------------------------------------

# A small vocabulary in which each usual mistake gives a different answer: "una" and "##ffa"
# beat "un" and "##aff" only under longest match, every letter of "unaffable" also exists alone,
# and a few pieces exist both with and without "##".
_WP_VOCAB = frozenset(
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
     "u", "un", "una", "a", "able", "ble", "f", "to", "token", "t", "k", "e", "n", "i", "s",
     "##n", "##a", "##aff", "##ffa", "##f", "##able", "##ble", "##b", "##l", "##e", "##s",
     "##o", "##k", "##en", "##ken", "##i", "##iz", "##ization", "##ation", "##at", "##ion",
     "##t", "##z", "##u", "##un"]
)  # fmt: skip


def _wordpiece_variant(word, vocab, *, longest=True, lookup_prefix="##", keep_prefix=True,
                       on_fail="unk", max_chars=100):
    """WordPiece with one switch turned: each non-default switch is a known mistake."""
    if max_chars is not None and len(word) > max_chars:
        return [UNK]
    pieces, start = [], 0
    while start < len(word):
        ends = range(len(word), start, -1) if longest else range(start + 1, len(word) + 1)
        piece = None
        for end in ends:
            candidate = word[start:end] if start == 0 else lookup_prefix + word[start:end]
            if candidate in vocab:
                piece = candidate
                break
        if piece is None:
            if on_fail == "unk":
                return [UNK]
            if on_fail == "partial":
                return pieces
            if on_fail == "char_unk":
                pieces.append(UNK)
            start += 1  # "char_unk" and "skip" go on after the character
            continue
        if start > 0 and not keep_prefix:
            piece = piece.removeprefix(lookup_prefix)
        pieces.append(piece)
        start = end
    return pieces


_WORDPIECE_MISTAKES = [
    ("you take the shortest piece that is in the vocabulary, but WordPiece is greedy "
     "longest-match.",
     "from each position try the longest remaining substring first and shorten it one "
     "character at a time until the vocabulary has it.",
     partial(_wordpiece_variant, longest=False)),
    ("you look up the pieces after the first without the '##' prefix, but inside a word the "
     "vocabulary stores continuations as '##' + piece.",
     "look up '##' + word[start:end] whenever start > 0 (and return it with its '##').",
     partial(_wordpiece_variant, lookup_prefix="")),
    ("your pieces after the first lack their '##' prefix: you find '##' + piece in the "
     "vocabulary but return the piece without it, so a continuation cannot be told apart from "
     "a word of its own.",
     "return the piece with its '##'.",
     partial(_wordpiece_variant, keep_prefix=False)),
    ("when no piece fits at some position you return the pieces found so far, a partial "
     "answer.",
     "return ['[UNK]'] for the whole word as soon as no piece fits.",
     partial(_wordpiece_variant, on_fail="partial")),
    ("when no piece fits you put '[UNK]' for that one character and go on, but the whole word "
     "must become a single piece.",
     "return ['[UNK]'] for the whole word as soon as no piece fits.",
     partial(_wordpiece_variant, on_fail="char_unk")),
    ("when no piece fits you skip the character and go on, but the whole word must become "
     "['[UNK]'].",
     "return ['[UNK]'] for the whole word as soon as no piece fits.",
     partial(_wordpiece_variant, on_fail="skip")),
    ("a word longer than 100 characters must be ['[UNK]'] without trying to split it, but yours "
     "splits it.",
     "check len(word) > 100 first.",
     partial(_wordpiece_variant, max_chars=None)),
    ("your function makes a word of exactly 100 characters ['[UNK]'], but it is still split; "
     "only longer words are ['[UNK]'] at once.",
     "the test is len(word) > 100, not >= 100.",
     partial(_wordpiece_variant, max_chars=99)),
]


def _wordpiece_cases() -> list[tuple]:
    """(word, vocab) cases: chosen words first, then random words over the vocabulary's pieces."""
    chosen = [
        "unaffable",  # longest: una ##ffa ##ble; shortest: u ##n ##a ##f ##f ##a ##b ##l ##e
        "tokenization",  # token ##ization
        "tokens",
        "a",
        "unxable",  # 'x' is nowhere in the vocabulary: the whole word is [UNK]
        "unaffablex",
        "xun",  # nothing fits at the very start
        "un" + "a" * 98,  # 100 characters: still split
        "un" + "a" * 99,  # 101 characters: [UNK] at once
    ]
    g = torch.Generator().manual_seed(2)
    starts = sorted(p for p in _WP_VOCAB if not p.startswith("[") and not p.startswith("##"))
    continues = sorted(p[2:] for p in _WP_VOCAB if p.startswith("##"))
    randoms = []
    for _ in range(12):
        parts = [starts[int(torch.randint(len(starts), (1,), generator=g))]]
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            parts.append(continues[int(torch.randint(len(continues), (1,), generator=g))])
        if float(torch.rand(1, generator=g)) < 0.25:  # a letter the vocabulary lacks
            parts.insert(int(torch.randint(1, len(parts) + 1, (1,), generator=g)), "q")
        randoms.append("".join(parts))
    return [(word, set(_WP_VOCAB)) for word in chosen + randoms]


def _short_word(word: str) -> str:
    return repr(word) if len(word) <= 30 else f"{word[:12]!r}… ({len(word)} characters)"


def _pieces_of(result, where, word, vocab) -> list[str]:
    """The learner's answer as a list of str, or a CheckFailed saying what to return."""
    if isinstance(result, str):
        raise CheckFailed(
            f"your function returned the str {result!r} for {where}, not a list of pieces.",
            f"return a list such as ['token', '##ization'], and ['{UNK}'] for an unknown word.",
        )
    if not isinstance(result, (list, tuple)):
        raise CheckFailed(
            f"your function returned a {type(result).__name__} for {where}; "
            "return a list of str pieces."
        )
    if not all(isinstance(p, str) for p in result):
        raise CheckFailed(
            f"your function returned {list(result)[:6]} for {where}: the "
            "pieces must be strings such as '##ization', not ids."
        )
    return list(result)


def _first_wrong_split(attempt) -> tuple[str, str]:
    first = attempt.first
    return (
        f"for {attempt.where(first)} your pieces are {attempt.answers[first]}, but greedy "
        f"longest-match gives {attempt.references[first]}.",
        "compare your loop with encoderlab.tokenizer.wordpiece_trace, which records every lookup.",
    )


def _equal(a, b) -> bool:
    return a == b


_WORDPIECE = Exercise(
    title="WordPiece",
    cases=_wordpiece_cases,
    answer=_pieces_of,
    reference=wordpiece,
    describe=lambda word, vocab: f"the word {_short_word(word)}",
    same=_equal,
    mistakes=_WORDPIECE_MISTAKES,
    fallback=_first_wrong_split,
)


@checker
def check_wordpiece(fn: Callable) -> bool:
    """Check ``fn(word, vocab)``, greedy longest-match WordPiece for one word (Lesson 2, §2).

    ``vocab`` is a set of str (``piece in vocab`` is all a solution needs). The answer is a list
    of pieces, ``##`` on every piece after the first, or ``['[UNK]']`` when the word cannot be
    split or has more than 100 characters.
    """
    return run(_WORDPIECE, fn)


# --- WordPiece's training loop (Lesson 2, §3) ---------------------------------------------------


def _merges_variant(counts, n_merges, *, score="gain", prefix="##", strip=True,
                    recount=True, stale="ranking", tie="smallest", weighted=True,
                    from_left=True, every=True, fixed_total=False, total="symbols"):
    """WordPiece's merge loop with one switch turned: each non-default switch is a known mistake.

    The defaults are the rule: ``score="gain"``, the likelihood gain of §3,
    ``count(a b) * log(count(a b) * N / (count(a) * count(b)))`` with N the number of symbols now
    in the text; ``"ratio"`` drops the weight ``count(a b)`` (and N), ``"frequency"`` is BPE's.
    ``fixed_total=True`` keeps N at its value before the first merge; ``total`` other than
    "symbols" is a wrong N: "distinct" (symbols), "words" (in the text) or "distinct words".

    ``recount=False`` counts once, before the loop: ``stale="ranking"`` then takes the first
    ranking's pairs in order, ``stale="repeat"`` merges the same best pair every time.
    ``tie`` is "smallest" (the rule), "largest" or "first" (the first pair met, as ``max`` gives).
    ``from_left=False`` scans each word from its end; ``every=False`` merges only the first
    occurrence found. Scores are exact fractions, as in the reference.
    """
    def split(word):
        return tuple(c if i == 0 else prefix + c for i, c in enumerate(word))

    def join(a, b):
        return a + (b.removeprefix(prefix) if strip and prefix else b)

    def counted(splits):
        symbols, pairs = {}, {}
        for word, parts in splits.items():
            n = counts[word] if weighted else 1
            for s in parts:
                symbols[s] = symbols.get(s, 0) + n
            for pair in zip(parts, parts[1:]):
                pairs[pair] = pairs.get(pair, 0) + n
        return symbols, pairs

    def value(pair, symbols, pairs):
        if score == "frequency":
            return pairs[pair]
        if score == "ratio":
            return Fraction(pairs[pair], symbols[pair[0]] * symbols[pair[1]])
        n_symbols = first_total if fixed_total else _wrong_totals[total](symbols, counts)
        return _gain(pairs[pair], symbols[pair[0]], symbols[pair[1]], n_symbols)

    def merge(parts, a, b):
        starts, taken = [], set()
        scan = range(len(parts) - 1) if from_left else range(len(parts) - 2, -1, -1)
        for i in scan:
            if (parts[i], parts[i + 1]) == (a, b) and not {i, i + 1} & taken:
                starts.append(i)
                taken |= {i, i + 1}
                if not every:
                    break
        out, i = [], 0
        while i < len(parts):
            if i in starts:
                out.append(join(a, b))
                i += 2
            else:
                out.append(parts[i])
                i += 1
        return tuple(out)

    def best(symbols, pairs):
        if tie == "first":
            return max(pairs, key=lambda p: value(p, symbols, pairs))
        if tie == "largest":
            return max(pairs, key=lambda p: (value(p, symbols, pairs), p))
        return min(pairs, key=lambda p: (-value(p, symbols, pairs), p))

    splits = {word: split(word) for word in counts}
    merges = []
    symbols, pairs = counted(splits)
    first_total = sum(symbols.values())  # N before any merge: only the fixed_total mistake
    while len(merges) < n_merges and pairs:
        if recount:
            symbols, pairs = counted(splits)
            if not pairs:
                break
        a, b = best(symbols, pairs)
        if not recount and stale == "ranking":
            del pairs[(a, b)]
        splits = {word: merge(parts, a, b) for word, parts in splits.items()}
        merges.append((a, b))
    return merges


_wrong_totals = {  # N as the rule counts it ("symbols"), then as learners miscount it
    "symbols": lambda symbols, counts: sum(symbols.values()),
    "distinct": lambda symbols, counts: len(symbols),
    "words": lambda symbols, counts: sum(counts.values()),
    "distinct words": lambda symbols, counts: len(counts),
}


def _gain(n_pair: int, n_a: int, n_b: int, n_symbols: int) -> float:
    """The likelihood gain of §3, as one expression: pairs with the same count(a b) and the same
    product count(a) * count(b) get the same float, so they tie exactly."""
    return n_pair * math.log(n_pair * n_symbols / (n_a * n_b))


_MERGES_MISTAKES = [
    ("you merge the most frequent pair: that is BPE's score. The likelihood gain weighs the "
     "count by log(count(a b) * N / (count(a) * count(b))), so a frequent pair of symbols that "
     "are just as frequent apart gains less.",
     "score each pair as count(a b) * log(count(a b) * N / (count(a) * count(b))).",
     partial(_merges_variant, score="frequency")),
    ("you rank pairs by count(a b) / (count(a) * count(b)), the Hugging Face course's ratio, "
     "or by its log, the PMI log(p(a b) / (p(a) p(b))), which ranks pairs the same way: "
     "without the weight count(a b) a pair seen once can win.",
     "multiply the log of the ratio (times N) by count(a b): "
     "count(a b) * log(count(a b) * N / (count(a) * count(b))).",
     partial(_merges_variant, score="ratio")),
    ("your N is the number of symbols before the first merge, but every merge makes the text "
     "shorter: N must be counted again with the symbols.",
     "after each merge, N = the sum of all symbol counts, recounted like them.",
     partial(_merges_variant, fixed_total=True)),
    *((f"your N is the number of {what}, but N is the number of symbols now in the text, each "
       "counted as often as it occurs (113 for the toy corpus of §3 before any merge).",
       "N = the sum of all symbol counts, recounted after each merge.",
       partial(_merges_variant, total=total))
      for total, what in [("distinct", "distinct symbols"), ("words", "words in the text"),
                          ("distinct words", "distinct words")]),
    ("your symbols after the first character of a word have no '##', so a piece inside a word "
     "is the same symbol as the same letters at a word's start.",
     "split 'hug' into ('h', '##u', '##g').",
     partial(_merges_variant, prefix="")),
    ("your merged symbols keep the second symbol's '##' in the middle ('h##u').",
     "merge a and b into a + b without b's '##': 'h' + '##u' -> 'hu', '##u' + '##g' -> '##ug'.",
     partial(_merges_variant, strip=False)),
    ("you merge the same pair again and again: the counts are made once, before the loop.",
     "after each merge, count the symbols and pairs again over the merged words.",
     partial(_merges_variant, recount=False, stale="repeat")),
    ("your merges follow the first ranking: the counts are made once, before the loop, so later "
     "scores ignore earlier merges.",
     "after each merge, count the symbols and pairs again over the merged words.",
     partial(_merges_variant, recount=False, stale="ranking")),
    ("your ties go to the pair met first (what max() over a dict gives); the rule here is the "
     "highest score, then the smallest pair (a, b) in Python's order.",
     "min(pairs, key=lambda p: (-score(p), p)).",
     partial(_merges_variant, tie="first")),
    ("your ties go to the largest pair; the rule here is the highest score, then the smallest "
     "pair (a, b) in Python's order.",
     "min(pairs, key=lambda p: (-score(p), p)).",
     partial(_merges_variant, tie="largest")),
    ("you count each distinct word once, but every count must be weighted by how often its "
     "word occurs.",
     "a word seen 10 times adds 10 to each of its symbols and pairs.",
     partial(_merges_variant, weighted=False)),
    ("you merge each word from its end: where the pair overlaps itself, as ##a ##a does in "
     "'a ##a ##a ##a', that gives 'a ##a ##aa' instead of 'a ##aa ##a'.",
     "scan each word from its start and, after a merge, go on after the merged symbol.",
     partial(_merges_variant, from_left=False)),
    ("you merge only the first occurrence of the pair in each word, but a word can hold it "
     "twice ('a ##b ##c ##b ##c' has ##b ##c twice).",
     "merge every occurrence in the word, left to right, before counting again.",
     partial(_merges_variant, every=False)),
]


def _merges_cases() -> list[tuple]:
    """(counts, n_merges) cases: the worked example, small corpora, then random ones."""
    cases = [
        ({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, 3),
        ({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, 8),
        ({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10),
        ({"aaaa": 3, "ab": 1}, 4),  # one letter repeated: a ##b, then a ##a, aa ##a, aaa ##a
        ({"aaaa": 3, "a": 100}, 4),  # ##a ##a first, and it overlaps: a ##aa ##a, from the left
        ({"abcbc": 5, "a": 40}, 4),  # ##b ##c occurs twice in one word: both are merged
        ({"a": 7, "b": 2}, 3),  # single letters: nothing to merge, stop at once
        ({"abc": 1, "bca": 1, "cab": 1}, 20),  # more merges asked than there are pairs
    ]
    g = torch.Generator().manual_seed(12)
    letters = "abcde"
    for n_words in (6, 8, 10, 12, 14, 16):
        counts = {}
        while len(counts) < n_words:
            length = int(torch.randint(1, 7, (1,), generator=g))
            word = "".join(letters[int(i)] for i in torch.randint(len(letters), (length,),
                                                                  generator=g))
            counts[word] = int(torch.randint(1, 20, (1,), generator=g))
        cases.append((counts, 6 + n_words // 2))
    return cases


def _merges_answer(result, where, counts, n_merges) -> list[tuple[str, str]]:
    if not isinstance(result, (list, tuple)):
        raise CheckFailed(f"your function returned a {type(result).__name__} on {where}, not a "
                          "list of merges.", "return the list of merges made, in order, each a "
                          "pair such as ('##u', '##g').")
    merges = []
    for item in result:
        if not (isinstance(item, (list, tuple)) and len(item) == 2
                and all(isinstance(s, str) for s in item)):
            raise CheckFailed(f"your list holds {short_value(item)} on {where}; each merge is "
                              "the pair of symbols merged, (a, b), not the merged symbol.")
        merges.append(tuple(item))
    if _up_to_ties(merges, counts, n_merges):
        return _merges_variant(counts, n_merges)  # right, up to the order of equal gains
    variants = [variant(counts, n_merges) for _, variant in _SCORERS[1:]]
    if merges in variants:
        return merges  # a known mistake, exactly
    for (scorer, _), theirs in zip(_SCORERS[1:], variants, strict=True):
        if _up_to_ties(merges, counts, n_merges, scorer):
            return theirs  # a known mistake, up to the order of equal scores (as PMI rounds)
    return merges


_SCORERS = [  # (score(n_pair, n_a, n_b, symbols, counts, first N), the variant that ranks so)
    (lambda n, a, b, sym, counts, first: _gain(n, a, b, sum(sym.values())), _merges_variant),
    (lambda n, a, b, sym, counts, first: n / (a * b), partial(_merges_variant, score="ratio")),
    (lambda n, a, b, sym, counts, first: _gain(n, a, b, first),
     partial(_merges_variant, fixed_total=True)),
    *((lambda n, a, b, sym, counts, first, f=f: _gain(n, a, b, f(sym, counts)),
       partial(_merges_variant, total=total))
      for total, f in _wrong_totals.items() if total != "symbols"),
]


def _up_to_ties(merges, counts, n_merges, scorer=_SCORERS[0][0]) -> bool:
    """Whether ``merges`` are those ``scorer`` makes, however equal scores were ordered
    (Lesson 2, §3): the rule's gain by default, or a known mistake's score.

    The learner's merges are replayed: each must have the best score, up to a relative 1e-9, so
    that any way of writing the score passes. Among pairs whose counts count(a b), count(a),
    count(b) are identical (equal in any formula, so the tie rule alone decides), the smallest
    (a, b) must win.
    """
    if len(merges) > n_merges:
        return False
    splits = {w: l02_vocab.split_word(w) for w in counts}
    first = None
    for a, b in merges:
        symbols, pairs = l02_vocab.count_symbols_and_pairs(splits, counts)
        if (a, b) not in pairs:
            return False
        first = sum(symbols.values()) if first is None else first
        gain = {p: scorer(n, symbols[p[0]], symbols[p[1]], symbols, counts, first)
                for p, n in pairs.items()}
        top = max(gain.values())
        tied = [p for p, x in gain.items() if x >= top - 1e-9 * abs(top) - 1e-12]

        key = {p: (pairs[p], symbols[p[0]], symbols[p[1]]) for p in tied}
        if (a, b) not in tied or any(p < (a, b) and key[p] == key[(a, b)] for p in tied):
            return False
        splits = {w: l02_vocab.apply_merge(parts, a, b) for w, parts in splits.items()}
    _, pairs = l02_vocab.count_symbols_and_pairs(splits, counts)
    return not (len(merges) < n_merges and pairs)  # False: stopped while pairs were left


def _first_wrong_merge(attempt) -> Message:
    first = attempt.first
    counts, _ = attempt.cases[first]
    mine, right = attempt.answers[first], attempt.references[first]
    k = next((i for i, (m, r) in enumerate(zip(mine, right)) if m != r), min(len(mine),
                                                                           len(right)))
    if k >= len(right):
        return (f"on {attempt.where(first)} you make {len(mine)} merges where the reference "
                f"makes {len(right)}.", "stop when n_merges are made or no pair is left.")
    if k >= len(mine):
        return (f"on {attempt.where(first)} you stop after {len(mine)} merges, but the "
                f"reference goes on to {len(right)}.",
                "merge until n_merges are made or no pair is left.")
    # The words after the first k merges (the same in both lists), merged as the reference
    # merges: every occurrence, left to right.
    splits = {w: l02_vocab.split_word(w) for w in counts}
    for a, b in right[:k]:
        splits = {w: l02_vocab.apply_merge(p, a, b) for w, p in splits.items()}
    symbols, pairs = l02_vocab.count_symbols_and_pairs(splits, counts)
    where = f"on {attempt.where(first)}, merge {k + 1}"

    n_symbols = sum(symbols.values())

    def exact(pair):  # what decides a tie: the same count(a b) and count(a) * count(b)
        return pairs[pair], symbols[pair[0]] * symbols[pair[1]]

    def score(pair):
        n, n_a, n_b = pairs[pair], symbols[pair[0]], symbols[pair[1]]
        return (f"gain {n}·log({n}·{n_symbols}/({n_a}·{n_b})) = "
                f"{_gain(n, n_a, n_b, n_symbols):.4f}")

    if mine[k] not in pairs:
        return (f"{where}: you merge {mine[k]}, but after the {k} merges before it, applied to "
                f"every occurrence left to right, no word has {mine[k][0]!r} directly followed "
                f"by {mine[k][1]!r}; the reference merges {right[k]} ({score(right[k])}). Your "
                "merges so far agree with the reference's, so your function must apply them "
                "to the words differently.",
                "after choosing (a, b), replace every a b in every word, scanning each word "
                "from its start, then count again.")
    if exact(mine[k]) == exact(right[k]):
        return (f"{where}: you merge {mine[k]}, the reference {right[k]}; the two tie exactly "
                f"({score(mine[k])}; {score(right[k])}), and a tie goes to the smallest pair "
                "(a, b), the reference's.",
                "take the best pair with min(pairs, key=lambda p: (-score[p], p)).")
    return (f"{where}: you merge {mine[k]} ({score(mine[k])}), but the reference merges "
            f"{right[k]} ({score(right[k])}), the highest score; the merges before it agree.",
            "print every pair's count(a b), count(a), count(b) and N at this merge: the pair "
            "with the highest count(a b) * log(count(a b) * N / (count(a) * count(b))) wins, "
            "ties to the smallest (a, b).")


_MERGES = Exercise(
    title="WordPiece training",
    cases=_merges_cases,
    arguments=lambda counts, n_merges: (dict(counts), n_merges),
    answer=_merges_answer,
    reference=_merges_variant,
    describe=lambda counts, n_merges: (f"counts={short_value(counts, 50)}, "
                                       f"n_merges={n_merges}"),
    same=_equal,
    mistakes=_MERGES_MISTAKES,
    fallback=_first_wrong_merge,
)


@checker
def check_wordpiece_merges(fn: Callable) -> bool:
    """Check ``fn(counts, n_merges)`` -> the merges WordPiece's training makes (Lesson 2, §3).

    ``counts`` maps each word to how often it occurs. Words start as characters, ``##`` before
    each after the first; each step merges the pair with the highest likelihood gain
    ``count(a b) * log(count(a b) * N / (count(a) * count(b)))`` (N: the symbols now in the
    text; ties to the smallest ``(a, b)``) into ``a + b`` without ``b``'s ``##``, at every
    occurrence, left to right, and records ``(a, b)``; stop after ``n_merges`` or when no pair is
    left. Gains equal up to rounding count as ties, so any correct form of the gain passes.
    """
    return run(_MERGES, fn)


# --- [CLS] A [SEP] B [SEP] and the segment ids (Lesson 2, §4) ---------------------------------

_CLS_ID, _SEP_ID = 101, 102  # BERT's ids, which the exercise gives the learner


@cache
def _bert_layout_tokenizer() -> WordPieceTokenizer:
    """A tokenizer whose special tokens have BERT's ids: [PAD] 0, [UNK] 100, [CLS] 101, ..."""
    unused = [f"[unused{i}]" for i in range(99)]  # ids 1..99, as in BERT's vocab.txt
    tokens = ["[PAD]", *unused, "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return WordPieceTokenizer(tokens)


def _framed(a, b=None, *, cls=True, middle_sep=True, final_sep=True, first_sep_segment=0,
            last_sep_segment=1, offset=0, cls_id=_CLS_ID, sep_id=_SEP_ID, empty_b=True):
    """[CLS] A [SEP] (B [SEP]) with one switch turned: each non-default switch is a mistake."""
    if not empty_b and not b:
        b = None  # `if ids_b:` takes an empty second text for no second text
    ids, types = ([cls_id], [0]) if cls else ([], [])
    ids, types = ids + list(a), types + [0] * len(a)
    if b is None:
        if final_sep:
            ids, types = ids + [sep_id], types + [0]
        return ids, [t + offset for t in types]
    if middle_sep:
        ids, types = ids + [sep_id], types + [first_sep_segment]
    ids, types = ids + list(b), types + [1] * len(b)
    if final_sep:
        ids, types = ids + [sep_id], types + [last_sep_segment]
    return ids, [t + offset for t in types]


_BUILD_MISTAKES = [
    ("your sequence does not start with [CLS] (id 101), but every input, one text or a pair, "
     "begins with it.",
     "[CLS] A [SEP], or [CLS] A [SEP] B [SEP].",
     partial(_framed, cls=False)),
    ("your pair has no [SEP] between the two texts.",
     "[CLS] A [SEP] B [SEP]: a [SEP] after each text.",
     partial(_framed, middle_sep=False)),
    ("an empty second text (ids_b=[]) gives you [CLS] A [SEP], as if there were no second "
     "text: `if ids_b:` is false for []. An empty text is still a text and gets its [SEP].",
     "test `if ids_b is not None:`; ids_b=[] gives [CLS] A [SEP] [SEP], the last [SEP] in "
     "segment 1.",
     partial(_framed, empty_b=False)),
    ("your sequence does not end with [SEP] (id 102).",
     "one text is [CLS] A [SEP], a pair [CLS] A [SEP] B [SEP].",
     partial(_framed, final_sep=False)),
    ("[CLS] and [SEP] are swapped in your sequence.",
     "[CLS] is id 101 and goes first, [SEP] is id 102 and closes each text.",
     partial(_framed, cls_id=_SEP_ID, sep_id=_CLS_ID)),
    ("the first [SEP] is in segment 1 in your answer, but it closes text A, so it belongs to "
     "segment 0.",
     "s_i = 0 from [CLS] up to and including the first [SEP].",
     partial(_framed, first_sep_segment=1)),
    ("the last [SEP] is in segment 0 in your answer, but it closes text B, so it belongs to "
     "segment 1.",
     "s_i = 1 for B and its [SEP].",
     partial(_framed, last_sep_segment=0)),
    ("your segment ids are 1 and 2, but the segment embedding table has 2 rows, indexed 0 "
     "and 1.",
     "0 for the first text (with [CLS] and its [SEP]), 1 for the second.",
     partial(_framed, offset=1)),
]


def _build_cases() -> list[tuple]:
    """(ids_a, ids_b) cases with ids that are not special: single texts, pairs, empty texts."""
    g = torch.Generator().manual_seed(3)
    cases = [
        ([2023, 2003, 2019], None),
        ([7592, 1010, 2088], [2129, 2024, 2017, 1029]),
        ([2498], [3042]),
        ([], None),
        ([], [2054, 2003]),
        ([1996, 2924], []),
    ]
    for with_pair in (False, True, True, False, True):
        n_a, n_b = (int(x) for x in torch.randint(1, 9, (2,), generator=g))
        a = torch.randint(1000, 30000, (n_a,), generator=g).tolist()
        b = torch.randint(1000, 30000, (n_b,), generator=g).tolist() if with_pair else None
        cases.append((a, b))
    return cases


def _int_list(value, what: str, where: str) -> list[int]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(is_int(v) for v in value):
        raise CheckFailed(f"{what} must be a list of ints (on {where}), got {short_value(value)}.")
    return list(value)


def _framing_answer(result, where, a, b) -> tuple[list[int], list[int]]:
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailed(
            f"your function returned {short_value(result)} on {where}, not a pair.",
            "return (input_ids, token_type_ids), two lists of the same length.",
        )
    ids = _int_list(result[0], "input_ids", where)
    types = _int_list(result[1], "token_type_ids", where)
    if set(ids) <= {0, 1} and _CLS_ID in types:
        raise CheckFailed(
            "your function returns (token_type_ids, input_ids), the wrong way round.",
            "return (input_ids, token_type_ids).",
        )
    if len(ids) != len(types):
        raise CheckFailed(
            f"your input_ids has {len(ids)} entries but token_type_ids {len(types)} on "
            f"{where}; there is one segment id per token, [CLS] and [SEP] included."
        )
    return ids, types


def _first_wrong_framing(attempt) -> str:
    first = attempt.first
    (ids, types), (ref_ids, ref_types) = attempt.answers[first], attempt.references[first]
    what = "input_ids" if ids != ref_ids else "token_type_ids"
    return (
        f"on {attempt.where(first)} your {what} is {ids if ids != ref_ids else types}, but "
        f"it should be {ref_ids if ids != ref_ids else ref_types} ([CLS] = 101, [SEP] = 102)."
    )


_FRAMING = Exercise(
    title="[CLS]/[SEP] framing and segment ids",
    cases=_build_cases,
    arguments=lambda a, b: (list(a),) if b is None else (list(a), list(b)),
    answer=_framing_answer,
    reference=lambda a, b: tuple(_bert_layout_tokenizer().build_inputs(
        list(a), None if b is None else list(b))),
    describe=lambda a, b: f"ids_a={a}" + ("" if b is None else f", ids_b={b}"),
    same=_equal,
    mistakes=_BUILD_MISTAKES,
    same_mistake=lambda mine, wrong: tuple(mine) == tuple(wrong),
    fallback=_first_wrong_framing,
)


@checker
def check_build_inputs(fn: Callable) -> bool:
    """Check ``fn(ids_a, ids_b=None)`` -> ``(input_ids, token_type_ids)`` (Lesson 2, §4).

    One text: ``[CLS] A [SEP]``, every s_i = 0. A pair: ``[CLS] A [SEP] B [SEP]``, s_i = 0 up to
    and including the first [SEP], 1 after it. [CLS] is 101 and [SEP] 102, as in BERT.
    """
    return run(_FRAMING, fn)

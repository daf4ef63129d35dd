"""Lesson 2's checkers: check_wordpiece, check_wordpiece_merges and check_build_inputs."""

import math
import re

import pytest
import torch

from encoderlab.course.checks import (
    CheckFailed,
    check_build_inputs,
    check_wordpiece,
    check_wordpiece_merges,
)
from encoderlab.lessons import l02_vocab as lv
from encoderlab.tokenizer import wordpiece

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
def test_wordpiece_checker_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_wordpiece, wrong)))


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


def build_empty_b_as_none(ids_a, ids_b=None):  # `if ids_b:` where `is not None` is meant
    ids, types = [101, *ids_a, 102], [0] * (len(ids_a) + 2)
    if ids_b:
        ids, types = ids + [*ids_b, 102], types + [1] * (len(ids_b) + 1)
    return ids, types


def build_without_final_sep(ids_a, ids_b=None):
    ids, types = [101, *ids_a], [0] * (len(ids_a) + 1)
    if ids_b is not None:
        ids, types = ids + [102, *ids_b], types + [0] + [1] * len(ids_b)
    return ids, types


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
        (build_empty_b_as_none, "an empty second text \\(ids_b=\\[\\]\\)"),
        (build_without_final_sep, "does not end with \\[SEP\\]"),
        (lambda a, b=None: build(a, b)[0], "not a pair"),
    ],
)
def test_build_inputs_checker_names_the_mistake(wrong, words, both_passes):
    assert re.search(words, str(both_passes(check_build_inputs, wrong)))


# --- check_wordpiece_merges: the training loop, right and wrong ----------------------------------


def _learner_merges(counts, n_merges, score="likelihood", prefix="##", strip=True,
                    recount=True, tie="smallest", weighted=True, fixed_total=False):
    """How a learner might write the loop, with one slip switched on at a time."""
    splits = {w: [c if i == 0 else prefix + c for i, c in enumerate(w)] for w in counts}
    merges = []

    def count():
        sym, pair = {}, {}
        for w, parts in splits.items():
            n = counts[w] if weighted else 1
            for s in parts:
                sym[s] = sym.get(s, 0) + n
            for p in zip(parts, parts[1:]):
                pair[p] = pair.get(p, 0) + n
        return sym, pair

    sym, pair = count()
    first_total = sum(sym.values())
    while len(merges) < n_merges:
        if recount:
            sym, pair = count()
        if not pair:
            break
        total = first_total if fixed_total else sum(sym.values())  # N, the symbols in the text
        if score == "frequency":
            scores = dict(pair)
        elif score == "ratio":
            scores = {p: c / (sym[p[0]] * sym[p[1]]) for p, c in pair.items()}
        else:  # the likelihood gain: count(a b) * log(count(a b) * N / (count(a) * count(b)))
            scores = {p: c * math.log(c * total / (sym[p[0]] * sym[p[1]]))
                      for p, c in pair.items()}
        if tie == "first":
            a, b = max(scores, key=scores.get)
        else:
            a, b = min(scores, key=lambda p: (-scores[p], p))
        new = a + (b[len(prefix):] if strip and b.startswith(prefix) and prefix else b)
        for parts in splits.values():
            i = 0
            while i < len(parts) - 1:
                if parts[i] == a and parts[i + 1] == b:
                    parts[i:i + 2] = [new]
                i += 1
        merges.append((a, b))
    return merges


def test_merges_reference_passes(capsys):
    assert check_wordpiece_merges(_learner_merges)
    assert "correct on" in capsys.readouterr().out


@pytest.mark.parametrize("switch, message", [
    ({"score": "frequency"}, "BPE's score"),
    ({"score": "ratio"}, "the Hugging Face course's ratio"),
    ({"fixed_total": True}, "number of symbols before the first merge"),
    ({"prefix": ""}, "have no '##'"),
    ({"strip": False}, "keep the second symbol's '##'"),
    ({"recount": False}, "same pair again and again"),
    ({"tie": "first"}, "pair met first"),
    ({"weighted": False}, "each distinct word once"),
])
def test_merges_mistakes_are_named(switch, message, both_passes):
    def learner(counts, n_merges):
        return _learner_merges(counts, n_merges, **switch)

    assert re.search(message, str(both_passes(check_wordpiece_merges, learner)))


def _loop_with_score(score, ties_to_largest=False):
    """A learner's merge loop that ranks pairs by ``score(count(a b), count(a), count(b), sym,
    counts)``, ties to the smallest pair (or, with ``ties_to_largest``, the largest)."""
    def learner(counts, n_merges):
        splits = {w: lv.split_word(w) for w in counts}
        merges = []
        while len(merges) < n_merges:
            sym, pair = lv.count_symbols_and_pairs(splits, counts)
            if not pair:
                break
            if ties_to_largest:
                a, b = max(pair, key=lambda p: (
                    score(pair[p], sym[p[0]], sym[p[1]], sym, counts), p))
            else:
                a, b = min(pair, key=lambda p: (
                    -score(pair[p], sym[p[0]], sym[p[1]], sym, counts), p))
            splits = {w: lv.apply_merge(parts, a, b) for w, parts in splits.items()}
            merges.append((a, b))
        return merges
    return learner


def _pmi(n, n_a, n_b, sym, counts):  # log(p(a b) / (p(a) p(b))), probabilities first: no weight
    total = sum(sym.values())
    return math.log((n / total) / ((n_a / total) * (n_b / total)))


def test_merges_pmi_is_named_as_the_ratio_even_where_rounding_breaks_a_tie(both_passes):
    from encoderlab.course.checks.l02 import _merges_cases, _merges_variant

    pmi = _loop_with_score(_pmi)
    # Somewhere its rounding orders two exactly equal ratios differently from exact fractions.
    assert any(pmi(dict(c), n) != _merges_variant(c, n, score="ratio")
               for c, n in _merges_cases())
    assert re.search("the PMI", str(both_passes(check_wordpiece_merges, pmi)))


@pytest.mark.parametrize("wrong_n, message", [
    (lambda sym, counts: len(sym), "number of distinct symbols"),  # 7 on the toy, not 113
    (lambda sym, counts: sum(counts.values()), "number of words in the text"),  # 36
    (lambda sym, counts: len(counts), "number of distinct words"),  # 5
])
def test_merges_wrong_n_is_named(wrong_n, message, both_passes):
    def gain(n, n_a, n_b, sym, counts):
        return n * math.log(n * wrong_n(sym, counts) / (n_a * n_b))

    assert re.search(message, str(both_passes(check_wordpiece_merges, _loop_with_score(gain))))


def test_merges_first_ranking_is_named():
    def first_ranking(counts, n_merges):
        splits = {w: lv.split_word(w) for w in counts}
        sym, pair = lv.count_symbols_and_pairs(splits, counts)
        total = sum(sym.values())
        ranked = sorted(pair, key=lambda p: (-pair[p] * math.log(
            pair[p] * total / (sym[p[0]] * sym[p[1]])), p))
        return ranked[:n_merges]

    with pytest.raises(CheckFailed, match="follow the first ranking"):
        check_wordpiece_merges(first_ranking)


def _merging(merge_word):
    """A learner who scores and chooses like the reference but applies each merge to a word
    with ``merge_word(parts, a, b, new)``."""
    def learner(counts, n_merges):
        splits = {w: list(lv.split_word(w)) for w in counts}
        merges = []
        while len(merges) < n_merges:
            sym, pair = lv.count_symbols_and_pairs(splits, counts)
            if not pair:
                break
            a, b = lv.best_pair(pair, sym, "gain")
            for w, parts in splits.items():
                splits[w] = merge_word(parts, a, b, lv.merged(a, b))
            merges.append((a, b))
        return merges

    return learner


def _from_the_end(parts, a, b, new):
    i = len(parts) - 2
    while i >= 0:
        if parts[i] == a and parts[i + 1] == b:
            parts[i:i + 2] = [new]
            i -= 1
        i -= 1
    return parts


def _first_only(parts, a, b, new):
    for i in range(len(parts) - 1):
        if parts[i] == a and parts[i + 1] == b:
            return parts[:i] + [new] + parts[i + 2:]
    return parts


def _by_replace(parts, a, b, new):  # text replacement: 'h ##u ##gs' also matches '##u ##g'
    return " ".join(parts).replace(f"{a} {b}", new).split(" ")


@pytest.mark.parametrize("merge_word, message", [
    (_from_the_end, r"merge each word from its end"),
    (_first_only, r"only the first occurrence of the pair in each word"),
    (_by_replace, r"must apply them to the words differently"),
])
def test_merges_applied_wrongly_are_named(merge_word, message, both_passes):
    failure = both_passes(check_wordpiece_merges, _merging(merge_word))
    assert re.search(message, str(failure))


def test_merges_new_cases_catch_the_overlap_and_the_repeat():
    # a ##a ##a ##a: ##a ##a (6/81) beats a ##a (3/309) and overlaps itself; from the left it
    # leaves a ##aa ##a. a ##b ##c ##b ##c holds ##b ##c twice.
    assert lv.train_merges_plain({"aaaa": 3, "a": 100}, 1, "gain") == [("##a", "##a")]
    assert lv.apply_merge(lv.split_word("aaaa"), "##a", "##a") == ("a", "##aa", "##a")
    assert lv.train_merges_plain({"abcbc": 5, "a": 40}, 1, "gain") == [("##b", "##c")]


def test_merges_gain_written_as_a_sum_of_logs_passes(capsys):
    def summed_logs_gain(n, n_a, n_b, sym, counts):  # the gain, its logs summed
        return n * (math.log(n) + math.log(sum(sym.values())) - math.log(n_a) - math.log(n_b))

    summed_logs = _loop_with_score(summed_logs_gain)  # ties can round apart

    # On one case its rounding sends a tie the other way: ('##e', '##d') before ('##d', '##e'),
    # whose gains are equal in exact arithmetic (the same count(a b), swapped count(a), count(b)).
    from encoderlab.course.checks.l02 import _merges_cases

    assert any(summed_logs(dict(c), n) != lv.train_merges_plain(c, n, "gain")
               for c, n in _merges_cases())  # it differs from the reference somewhere
    assert check_wordpiece_merges(summed_logs)
    assert "correct on" in capsys.readouterr().out


def test_merges_tie_between_identical_counts_still_goes_to_the_smallest_pair(both_passes):
    def gain(n, n_a, n_b, sym, counts):  # the exact gain, as one expression
        return n * math.log(n * sum(sym.values()) / (n_a * n_b))

    largest_on_ties = _loop_with_score(gain, ties_to_largest=True)  # ties to the largest pair

    failure = both_passes(check_wordpiece_merges, largest_on_ties)
    assert re.search("ties go to the largest pair|tie exactly", str(failure))


def test_merges_unknown_mistake_says_where():
    def one_off(counts, n_merges):  # right, except that the last merge is dropped
        merges = lv.train_merges_plain(counts, n_merges, "gain")
        return merges[:-1] if len(merges) > 3 else merges

    with pytest.raises(CheckFailed, match="you stop after"):
        check_wordpiece_merges(one_off)


def test_merges_wrong_return_types_are_explained():
    with pytest.raises(CheckFailed, match="not the merged symbol"):
        check_wordpiece_merges(lambda counts, n: ["##gs"])
    with pytest.raises(CheckFailed, match="return the list of merges"):
        check_wordpiece_merges(lambda counts, n: None, hint=True)
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        check_wordpiece_merges(lambda counts, n: (_ for _ in ()).throw(NotImplementedError()))

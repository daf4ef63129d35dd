"""Lesson 6's checkers: whole-word selection and SpanBERT's span layout (§3), and
replaced-token-detection labels from a generator's samples (§4)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    Message,
    as_tensor,
    checker,
    run,
)
from encoderlab.objectives import IGNORE_INDEX, rtd_labels, word_ids

__all__ = ["check_whole_word_positions", "check_rtd_labels", "check_span_positions"]


def _first_differing_cell(attempt) -> tuple[int, int, int]:
    """(case, row, position) of the first cell where a wrong (b, n) answer differs."""
    i = attempt.first
    r, c = (attempt.answers[i] != attempt.references[i]).nonzero()[0].tolist()
    return i, r, c


# --- Whole-word selection (Lesson 6, §3) ----------------------------------------------------------

# A small vocabulary with continuation pieces: "over ##flow ##ed", "un ##sort ##ed".
_WW_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "list", "is", "over",
              "##flow", "##ed", "un", "##sort", "a", "stack", "."]
_WW_SPECIAL = (0, 1, 2, 3, 4)


def _ww_reference(ids, am, tokens, special, picked):
    words = word_ids(ids, am, tokens, special)  # (b, n)
    return (words >= 0) & picked.gather(1, words.clamp(min=0))


def _ww_first_piece_only(ids, am, tokens, special, picked):
    continuation = torch.tensor([t.startswith("##") for t in tokens])
    return _ww_reference(ids, am, tokens, special, picked) & ~continuation[ids]


def _ww_every_piece_a_word(ids, am, tokens, special, picked):
    ordinary = (am != 0) & ~torch.isin(ids, torch.tensor(special))
    index = ordinary.long().cumsum(dim=1) - 1  # each piece its own word
    wide = torch.zeros(ids.shape, dtype=torch.bool)
    wide[:, : picked.shape[1]] = picked[:, : ids.shape[1]]
    return ordinary & wide.gather(1, index.clamp(min=0))


def _ww_specials_are_words(ids, am, tokens, special, picked):
    continuation = torch.tensor([t.startswith("##") for t in tokens])
    real = am != 0
    index = (real & ~continuation[ids]).long().cumsum(dim=1) - 1  # [CLS] is word 0
    wide = torch.zeros((ids.shape[0], ids.shape[1] + 1), dtype=torch.bool)
    wide[:, : picked.shape[1]] = picked
    ordinary = real & ~torch.isin(ids, torch.tensor(special))
    return ordinary & wide.gather(1, index.clamp(min=0))


_WW_MISTAKES = [
    ("only the first piece of each chosen word is selected, but its '##' pieces belong to the "
     "same word.",
     "select every piece of a chosen word: a '##' piece continues the word before it.",
     _ww_first_piece_only),
    ("you number every piece as a word of its own, but a piece that starts with '##' continues "
     "the previous word.",
     "'over ##flow ##ed' is one word: give all three pieces the same index k.",
     _ww_every_piece_a_word),
    ("your word index is one too high: the first word gets 1, but words are numbered from 0 "
     "(perhaps [CLS] counts as a word, or the -1 after the running count is missing).",
     "make the first ordinary word word 0 (subtract 1 from the running count of word starts) "
     "and give the specials no word.",
     _ww_specials_are_words),
]


def _ww_cases() -> list[tuple]:
    tokens, special = _WW_TOKENS, _WW_SPECIAL
    # [CLS] the list is over ##flow ##ed . [SEP] and an unsorted stack, padded
    ids = torch.tensor([[2, 5, 6, 7, 8, 9, 10, 15, 3, 0],
                        [2, 13, 11, 12, 10, 14, 15, 3, 0, 0]])
    am = (ids != 0).long()
    cases = [(ids, am, tokens, special, torch.tensor([[0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
                                                      [0, 1, 0, 0, 0, 0, 0, 0, 0, 0]]).bool())]
    g = torch.Generator().manual_seed(6)
    words = [[5], [6], [7], [8, 9, 10], [11, 12, 10], [13], [14], [15], [8], [11, 12]]
    for b, n_words in ((3, 5), (2, 8), (4, 3)):
        rows = []
        for _ in range(b):
            k = int(torch.randint(1, n_words + 1, (1,), generator=g))
            pieces = [p for i in torch.randint(len(words), (k,), generator=g).tolist()
                      for p in words[i]]
            rows.append([2, *pieces, 3])
        n = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
        am = (ids != 0).long()
        picked = torch.rand((b, n), generator=g) < 0.4
        cases.append((ids, am, tokens, special, picked))
    return cases


def _selection_answer(result, where, ids, am, tokens, special, picked) -> torch.Tensor:
    out = as_tensor(result, "a (b, n) boolean tensor")
    if tuple(out.shape) != tuple(ids.shape):
        raise CheckFailed(f"your selection has shape {tuple(out.shape)} on {where}; return one "
                          f"bool per position, shape (b, n) = {tuple(ids.shape)}.")
    if out.dtype != torch.bool:
        if not bool(((out == 0) | (out == 1)).all()):
            raise CheckFailed(f"your selection holds values other than 0/1 on {where}.",
                              "return a boolean tensor, True = corrupt this position.")
        out = out.bool()
    return out


def _selects_specials(attempt) -> Message | None:
    specials = torch.tensor(_WW_SPECIAL)
    if any(bool((attempt.answers[k] & torch.isin(attempt.cases[k][0], specials)).any())
           for k in attempt.wrong):
        return ("you select special tokens or padding ([CLS], [SEP], [PAD]), which are "
                "never part of a word and never corrupted.",
                "leave the special_ids (and padding) out of every word.")
    return None


def _first_wrong_selection(attempt) -> str:
    i, r, c = _first_differing_cell(attempt)
    ids, picked = attempt.cases[i][0], attempt.cases[i][4]
    return (
        f"your selection differs from the reference at row {r}, position {c} "
        f"(token {_WW_TOKENS[int(ids[r, c])]!r}) on input_ids={ids.tolist()}, "
        f"picked={picked.long().tolist()}: yours {bool(attempt.answers[i][r, c])}, "
        f"the reference {bool(attempt.references[i][r, c])}."
    )


_WHOLE_WORDS = Exercise(
    title="whole-word selection",
    cases=_ww_cases,
    arguments=lambda ids, am, tokens, special, picked: (
        ids.clone(), am.clone(), list(tokens), special, picked.clone()),
    answer=_selection_answer,
    reference=_ww_reference,
    describe=lambda ids, am, tokens, special, picked: (
        f"input_ids={ids.tolist()}, picked={picked.long().tolist()}"),
    notice=_selects_specials,
    mistakes=_WW_MISTAKES,
    fallback=_first_wrong_selection,
)


@checker
def check_whole_word_positions(fn: Callable) -> bool:
    """Check ``fn(input_ids, attention_mask, tokens, special_ids, picked)`` (Lesson 6, §3).

    ``picked`` (b, W) bool says which words of each row are chosen (word k = the k-th word of
    the row, counted from 0 over ordinary pieces); the answer is the (b, n) bool tensor of the
    positions to corrupt: every piece of every chosen word, nothing else.
    """
    return run(_WHOLE_WORDS, fn)


# --- Replaced-token-detection labels (Lesson 6, §4) -----------------------------------------------


def _rtd_reference(ids, mlm_labels, samples, am):
    corrupted = torch.where(mlm_labels != IGNORE_INDEX, samples, ids)
    return rtd_labels(ids, corrupted, am)


def _rtd_masked_is_replaced(ids, mlm_labels, samples, am):
    out = (mlm_labels != IGNORE_INDEX).long()
    return out.masked_fill(am == 0, IGNORE_INDEX)


def _rtd_pad_zero(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return out.masked_fill(am == 0, 0)


def _rtd_masked_only(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return out.masked_fill(mlm_labels == IGNORE_INDEX, IGNORE_INDEX)


def _rtd_inverted(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return torch.where(out == IGNORE_INDEX, out, 1 - out)


def _rtd_samples_everywhere(ids, mlm_labels, samples, am):
    return rtd_labels(ids, samples, am)


_RTD_MISTAKES = [
    ("you label every masked position 'replaced', but where the generator sampled the original "
     "token nothing was replaced, and ELECTRA labels it 0 (original).",
     "compare the token the discriminator reads with the original.", _rtd_masked_is_replaced),
    ("you give only the masked positions a label (-100 elsewhere, as in MLM), but the "
     "discriminator is scored at every real position.",
     "label an unmasked real position 0 (original).", _rtd_masked_only),
    ("your labels are inverted.", "1 means replaced, 0 means original.", _rtd_inverted),
    ("padding gets the label 0, but padding positions carry no loss.",
     "label them -100.", _rtd_pad_zero),
    ("you compare samples with input_ids at every position, but the generator's samples are "
     "used only at the masked positions; elsewhere the discriminator reads the original token.",
     "use the samples only where mlm_labels != -100.", _rtd_samples_everywhere),
]


def _rtd_cases() -> list[tuple]:
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 3, 0]])
    am = (ids != 0).long()
    mlm = torch.full_like(ids, IGNORE_INDEX)
    mlm[0, [2, 4, 5]] = ids[0, [2, 4, 5]]
    samples = torch.tensor([[7, 8, 11, 9, 20, 14, 5, 6]])  # position 2 and 5 sample the original
    cases = [(ids, mlm, samples, am)]
    g = torch.Generator().manual_seed(60)
    for b, n in ((2, 9), (3, 6), (1, 12)):
        lengths = torch.randint(3, n + 1, (b,), generator=g)
        am = (torch.arange(n)[None, :] < lengths[:, None]).long()
        ids = torch.randint(5, 12, (b, n), generator=g).masked_fill(am == 0, 0)
        ids[:, 0] = 2
        chosen = (torch.rand((b, n), generator=g) < 0.5) & (am == 1)
        chosen[:, 0] = False
        mlm = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
        samples = torch.randint(5, 12, (b, n), generator=g)  # small vocabulary: many hits
        cases.append((ids, mlm, samples, am))
    return cases


def _labels_answer(result, where, ids, mlm, samples, am) -> torch.Tensor:
    out = as_tensor(result, "a (b, n) tensor of labels 0 / 1 / -100")
    if tuple(out.shape) != tuple(ids.shape):
        raise CheckFailed(f"your labels have shape {tuple(out.shape)} on {where}; return one "
                          f"label per position, (b, n) = {tuple(ids.shape)}.")
    if out.dtype == torch.bool:
        raise CheckFailed("your labels are booleans, which cannot hold -100.",
                          "return integers: 1 = replaced, 0 = original, -100 at padding.")
    return out.long()


def _first_wrong_label(attempt) -> str:
    i, r, c = _first_differing_cell(attempt)
    return (
        f"your label differs from the reference at row {r}, position {c} on case {i + 1}: "
        f"yours {int(attempt.answers[i][r, c])}, the reference "
        f"{int(attempt.references[i][r, c])} (1 = replaced, 0 = original, -100 = padding)."
    )


_RTD = Exercise(
    title="replaced-token-detection labels",
    cases=_rtd_cases,
    arguments=lambda ids, mlm, samples, am: (ids.clone(), mlm.clone(), samples.clone(),
                                             am.clone()),
    answer=_labels_answer,
    reference=_rtd_reference,
    describe=lambda ids, mlm, samples, am: (
        f"input_ids={ids.tolist()}, mlm_labels={mlm.tolist()}, "
        f"samples={samples.tolist()}, attention_mask={am.tolist()}"),
    mistakes=_RTD_MISTAKES,
    fallback=_first_wrong_label,
)


@checker
def check_rtd_labels(fn: Callable) -> bool:
    """Check ``fn(input_ids, mlm_labels, samples, attention_mask)`` (Lesson 6, §4).

    ``mlm_labels`` marks the masked positions (-100 elsewhere), ``samples`` (b, n) holds the
    generator's sampled token at every position (only the masked ones are used). The answer is
    the discriminator's (b, n) labels: 1 = the token it reads differs from the original,
    0 = same, -100 at padding.
    """
    return run(_RTD, fn)


# --- SpanBERT's span layout (Lesson 6, §3) --------------------------------------------------------


def _span_layout(words, budget, draws, *, fit="cut", count="pieces", inclusive=False,
                 stop_when_empty=False):
    """The reference span layout, and (through its switches) the usual wrong versions.

    The rule is the course's whole-word variant of SpanBERT's span masking, not SpanBERT's own
    code (which adds pieces one by one and may stop inside a word). ``fit``: "cut" drops words
    from a span's end until it fits, "discard" drops a span that does not fit whole, "none"
    takes it whole; ``count``: what the budget counts; ``stop_when_empty``: stop at the first
    span that is cut to nothing instead of going on to the next draw.
    """
    words = [int(w) for w in words]
    n_words = max(words) + 1 if any(w >= 0 for w in words) else 0
    pieces = [[i for i, k in enumerate(words) if k == j] for j in range(n_words)]
    chosen = torch.zeros(len(words), dtype=torch.bool)
    taken: set[int] = set()
    used = 0

    def cost(span):
        return len(span) if count == "words" else sum(len(pieces[k]) for k in span)

    for length, start in draws:
        if used >= budget:
            break
        end = min(start + length + (1 if inclusive else 0), n_words)
        span = [k for k in range(start, end) if k not in taken]
        if fit == "cut":
            while span and used + cost(span) > budget:
                span.pop()
        elif fit == "discard" and used + cost(span) > budget:
            span = []
        if not span:
            if stop_when_empty:
                break
            continue
        used += cost(span)
        taken.update(span)
        for k in span:
            chosen[pieces[k]] = True
    return chosen


def _span_reference(words, budget, draws):
    return _span_layout(words, budget, draws)


def _span_no_cut(words, budget, draws):
    return _span_layout(words, budget, draws, fit="none")


def _span_discard(words, budget, draws):
    return _span_layout(words, budget, draws, fit="discard")


def _span_counts_words(words, budget, draws):
    return _span_layout(words, budget, draws, count="words")


def _span_inclusive(words, budget, draws):
    return _span_layout(words, budget, draws, inclusive=True)


def _span_stops_when_empty(words, budget, draws):
    return _span_layout(words, budget, draws, stop_when_empty=True)


def _span_counts_overlap_twice(words, budget, draws):
    """Words already chosen are counted again towards the budget when a new span covers them."""
    words_l = [int(w) for w in words]
    n_words = max(words_l) + 1 if any(w >= 0 for w in words_l) else 0
    pieces = [[i for i, k in enumerate(words_l) if k == j] for j in range(n_words)]
    chosen = torch.zeros(len(words_l), dtype=torch.bool)
    used = 0
    for length, start in draws:
        if used >= budget:
            break
        span = list(range(start, min(start + length, n_words)))
        while span and used + sum(len(pieces[k]) for k in span) > budget:
            span.pop()
        if not span:
            continue
        used += sum(len(pieces[k]) for k in span)
        for k in span:
            chosen[pieces[k]] = True
    return chosen


_SPAN_MISTAKES = [
    ("you choose more pieces than the budget (the layout stops at the budget, about p of the "
     "tokens).",
     "when a span would take the count past the budget, drop words from its end until it fits.",
     _span_no_cut),
    ("you drop a span that does not fit whole.",
     "shorten it instead, dropping words from its end until its pieces fit, and keep the rest.",
     _span_discard),
    ("you count words towards the budget, but the budget is a number of pieces (tokens).",
     "a word of three pieces uses three.", _span_counts_words),
    ("your spans are one word too long.",
     "a span of length L starting at word s covers words s, ..., s + L - 1.", _span_inclusive),
    ("you stop at the first span that is cut to nothing, but the budget is not met yet: a later "
     "draw may still fit.",
     "when a span ends up empty, go on to the next draw (continue, not break); stop only once "
     "the budget is met.", _span_stops_when_empty),
    ("a word that an earlier span already chose is counted again towards the budget, but spans "
     "do not overlap.",
     "leave chosen words out of a new span before counting its pieces.",
     _span_counts_overlap_twice),
]


def _span_cases() -> list[tuple]:
    # [CLS] the list is over ##flow ##ed and un ##sort ##ed . [SEP] [PAD]
    words = torch.tensor([-1, 0, 1, 2, 3, 3, 3, 4, 5, 5, 5, 6, -1, -1])
    cases = [
        (words, 4, [(2, 2), (3, 5)]),  # the second span must be cut to fit
        (words, 5, [(1, 3), (2, 2), (1, 0)]),  # an overlap: word 3 is not counted twice
        (words, 3, [(4, 1), (1, 6)]),  # cut to words 1-2; then the '.' fills the budget
        (words, 6, [(2, 6), (3, 0), (2, 4)]),  # a span clipped at the last word
        # words 1-2 use 2 of 3; the next span, word 3 (3 pieces), is cut to nothing; then a
        # draw of word 6 (1 piece) still fits
        (words, 3, [(2, 1), (1, 3), (1, 6)]),
    ]
    g = torch.Generator().manual_seed(61)
    for n_words, budget in ((8, 3), (12, 5), (20, 9), (6, 2), (15, 6)):
        sizes = (torch.rand(n_words, generator=g) < 0.3).long() + \
            (torch.rand(n_words, generator=g) < 0.15).long() + 1  # 1-3 pieces a word
        row = [-1] + [k for k in range(n_words) for _ in range(int(sizes[k]))] + [-1, -1]
        lengths = torch.randint(1, 5, (12,), generator=g).tolist()
        starts = torch.randint(0, n_words, (12,), generator=g).tolist()
        cases.append((torch.tensor(row), budget, list(zip(lengths, starts))))
    return cases


def _span_answer(result, where, words, budget, draws) -> torch.Tensor:
    out = as_tensor(result, "a (n,) boolean tensor")
    if tuple(out.shape) != tuple(words.shape):
        raise CheckFailed(f"your selection has shape {tuple(out.shape)} on {where}; return one "
                          f"bool per position, shape (n,) = {tuple(words.shape)}.")
    if out.dtype != torch.bool:
        if not bool(((out == 0) | (out == 1)).all()):
            raise CheckFailed(f"your selection holds values other than 0/1 on {where}.",
                              "return a boolean tensor, True = this position is in a span.")
        out = out.bool()
    return out


def _span_notice(attempt) -> Message | None:
    for k in attempt.wrong:
        words = attempt.cases[k][0]
        answer = attempt.answers[k]
        if bool((answer & (words < 0)).any()):
            return ("you choose positions that belong to no word ([CLS], [SEP], padding: word "
                    f"id -1) on {attempt.where(k)}.", "spans cover ordinary pieces only.")
        for w in words[words >= 0].unique().tolist():
            part = answer[words == w]
            if bool(part.any()) and not bool(part.all()):
                return (f"word {w} is only partly chosen on {attempt.where(k)}, but a span "
                        "takes whole words, every piece of each.",
                        "a span of length L covers L words, not L positions.")
    return None


def _span_fallback(attempt) -> tuple[str, str]:
    i = attempt.first
    mine, right = attempt.answers[i], attempt.references[i]
    c = int((mine != right).nonzero()[0])
    return (f"your selection differs from the reference at position {c} (word "
            f"{int(attempt.cases[i][0][c])}) on {attempt.where(i)}: yours {bool(mine[c])}, the "
            f"reference {bool(right[c])}.",
            "take the draws in order, leave out words already chosen, cut the span from its end "
            "to fit the budget, and stop once it is met.")


_SPANS = Exercise(
    title="span layout",
    cases=_span_cases,
    arguments=lambda words, budget, draws: (words.clone(), budget, list(draws)),
    answer=_span_answer,
    reference=_span_reference,
    describe=lambda words, budget, draws: (
        f"words={words.tolist()}, budget={budget}, draws={draws}"),
    notice=_span_notice,
    mistakes=_SPAN_MISTAKES,
    fallback=_span_fallback,
)


@checker
def check_span_positions(fn: Callable) -> bool:
    """Check ``fn(words, budget, draws)`` (Lesson 6, §3): the course's whole-word variant of
    SpanBERT's span masking (spans of whole words, cut from the end to fit the budget).

    ``words`` (n,) is the word id of each position (-1 for specials and padding, as
    :func:`encoderlab.objectives.word_ids` gives), ``budget`` the number of pieces to choose,
    ``draws`` a list of (length in words, starting word). The answer is the (n,) bool tensor of
    the chosen positions.
    """
    return run(_SPANS, fn)

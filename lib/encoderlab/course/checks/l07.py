"""Lesson 7's checkers: BIO tags -> entity spans (§4), entity-level F1 (§4) and the best answer
span from start / end logits (§5), and the best answer across the windows of a long context
(§7)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    Message,
    checker,
    run,
    short_value,
)
from encoderlab.lessons.l07_finetune import best_span, bio_to_spans, entity_scores
from encoderlab.lessons.l07_tasks import TAGS

__all__ = ["check_bio_to_spans", "check_entity_f1", "check_best_span", "check_window_span"]


def _equal(a, b) -> bool:
    return a == b


def _random_tags(g: torch.Generator, n: int) -> list[str]:
    """n tags drawn uniformly from Lesson 7's tag set."""
    return [TAGS[int(t)] for t in torch.randint(len(TAGS), (n,), generator=g)]


# --- BIO tags -> spans (Lesson 7, §4) ------------------------------------------------------------


def _bio_variant(tags, *, end="inclusive", orphan_i="start", split_types=True, split_b=True,
                 close_last=True):
    """bio_to_spans with one switch turned: each non-default switch is a known mistake."""
    spans, current = [], None
    for i, tag in enumerate(tags):
        prefix, kind = ("O", None) if tag == "O" else (tag[0], tag[2:])
        continues = current is not None and prefix == "I" and (
            current[0] == kind or not split_types)
        if current is not None and prefix == "B" and not split_b and current[0] == kind:
            continues = True
        if continues:
            current[2] = i
            continue
        if current is not None:
            spans.append(tuple(current))
            current = None
        if prefix == "B" or (prefix == "I" and orphan_i == "start"):
            current = [kind, i, i]
    if current is not None and close_last:
        spans.append(tuple(current))
    if end == "exclusive":
        spans = [(k, s, e + 1) for k, s, e in spans]
    return spans


_BIO_MISTAKES = [
    ("your end positions are one too far: this course's spans are (type, start, end) with the end "
     "*inclusive*.",
     "a one-token entity at position 3 is ('X', 3, 3).",
     partial(_bio_variant, end="exclusive")),
    ("you drop an I-X that follows O (or starts the sequence), but CoNLL's rule, and seqeval's, "
     "keeps it.",
     "let such an I-X begin a new entity of type X.",
     partial(_bio_variant, orphan_i="drop")),
    ("an I- tag of another type continues your entity, but B-PER I-LOC is two entities, PER "
     "then LOC.",
     "go on only while the tags are I- of the entity's own type.",
     partial(_bio_variant, split_types=False)),
    ("a B- tag inside an entity does not start a new one in your version, but B-PER B-PER is "
     "two people side by side, the whole point of having B- as well as I-.",
     "close the open entity and start a new one at every B- tag.",
     partial(_bio_variant, split_b=False)),
    ("you lose the entity that runs to the end of the sequence.",
     "close the open entity after the loop.",
     partial(_bio_variant, close_last=False)),
]


def _bio_cases() -> list[tuple]:
    chosen = [
        ["B-PER", "I-PER", "O", "B-LOC"],
        ["O", "O", "O"],
        [],
        ["B-PER", "B-PER", "I-PER", "O"],
        ["O", "I-LOC", "I-LOC", "O", "B-DATE"],
        ["B-PER", "I-LOC", "I-LOC"],
        ["I-PER", "O", "B-LOC", "I-LOC"],
        ["B-LOC", "I-LOC", "I-LOC", "I-LOC"],
        ["B-DATE", "O", "I-DATE", "B-DATE", "I-PER"],
    ]
    g = torch.Generator().manual_seed(7)
    random = [_random_tags(g, int(n)) for n in torch.randint(1, 12, (12,), generator=g)]
    return [(c,) for c in chosen + random]


def _as_spans(value, where, tags) -> list[tuple]:
    try:
        return sorted((str(k), int(s), int(e)) for k, s, e in value)
    except (TypeError, ValueError):
        raise CheckFailed(
            f"your function returned {short_value(value)} on {where}, not a list of spans.",
            "return (type, start, end) tuples, e.g. [('PER', 0, 1), ('LOC', 3, 3)].",
        ) from None


def _first_wrong_spans(attempt) -> str:
    i = attempt.first
    return (f"on tags {attempt.cases[i][0]} you return {attempt.answers[i]}, but the entities "
            f"are {attempt.references[i]} (type, start, end), end inclusive.")


_BIO = Exercise(
    title="BIO to spans",
    cases=_bio_cases,
    arguments=lambda tags: (list(tags),),
    answer=_as_spans,
    reference=lambda tags: sorted(bio_to_spans(tags)),
    describe=lambda tags: f"tags {tags}",
    same=_equal,
    mistakes=_BIO_MISTAKES,
    same_mistake=lambda mine, wrong: mine == sorted(wrong),
    fallback=_first_wrong_spans,
)


@checker
def check_bio_to_spans(fn: Callable) -> bool:
    """Check ``fn(tags) -> [(type, start, end), ...]`` (end inclusive) on BIO sequences.

    (Lesson 7, §4.) The cases include I- after O, a type change inside an entity, two B- in a
    row and an entity that runs to the end; the order of the returned spans does not matter.
    """
    return run(_BIO, fn)


# --- Entity-level F1 (Lesson 7, §4) ---------------------------------------------------------------


def _f1_from(correct: float, n_predicted: float, n_gold: float) -> float:
    p = correct / n_predicted if n_predicted else 0.0
    r = correct / n_gold if n_gold else 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def _f1_variant(gold, predicted, *, unit="entity", match="exact", average="micro"):
    """Entity F1 with one switch turned: each non-default switch is a known mistake."""
    if unit == "accuracy":  # the fraction of tags that agree, O included: not an F1 at all
        pairs = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)]
        return sum(g == p for g, p in pairs) / len(pairs) if pairs else 0.0
    if unit == "token":  # per-token agreement on the non-O tags
        correct = sum(g == p != "O" for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps))
        n_p = sum(p != "O" for ps in predicted for p in ps)
        n_g = sum(g != "O" for gs in gold for g in gs)
        return _f1_from(correct, n_p, n_g)
    scores, totals = [], [0, 0, 0]
    for gs, ps in zip(gold, predicted):
        g_spans, p_spans = bio_to_spans(gs), bio_to_spans(ps)
        if match == "untyped":
            g_set, p_set = {s[1:] for s in g_spans}, {s[1:] for s in p_spans}
            correct = len(g_set & p_set)
        elif match == "overlap":
            correct = sum(any(pk == gk and ps_ <= ge and gs_ <= pe for gk, gs_, ge in g_spans)
                          for pk, ps_, pe in p_spans)
        else:
            correct = len(set(g_spans) & set(p_spans))
        counts = (correct, len(p_spans), len(g_spans))
        totals = [a + b for a, b in zip(totals, counts)]
        if counts[1] or counts[2]:
            scores.append(_f1_from(*counts))
    if average == "sentence":
        return sum(scores) / len(scores) if scores else 0.0
    return _f1_from(*totals)


_F1_MISTAKES = [
    ("this is token accuracy (the fraction of tags that agree, O included), not entity-level F1: "
     "most tags are O, so it stays high even when every entity is missed.",
     "turn each sequence into its (type, start, end) spans; precision and recall over entities.",
     partial(_f1_variant, unit="accuracy")),
    ("you score tags, not entities: a token-level F1 gives credit for half an entity.",
     "turn each sequence into its (type, start, end) spans; count a span only if it all matches.",
     partial(_f1_variant, unit="token")),
    ("you ignore the entity type: PER at 0-1 counts as right when the gold says LOC at 0-1.",
     "count a span only if its type matches too.",
     partial(_f1_variant, match="untyped")),
    ("you count an overlapping span as correct, but entity-level F1 needs both boundaries to "
     "match exactly.",
     "compare whole (type, start, end) tuples.",
     partial(_f1_variant, match="overlap")),
    ("you average an F1 per sentence, but the standard is one F1 over the whole corpus (micro "
     "average).",
     "add up the correct, predicted and gold entities of all sentences first.",
     partial(_f1_variant, average="sentence")),
]


def _f1_cases() -> list[tuple]:
    g1 = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-DATE", "I-DATE"]]
    p1 = [["B-PER", "O", "O", "B-LOC"], ["O", "B-DATE", "I-DATE"]]
    g2 = [["B-PER", "I-PER", "O"], ["B-LOC", "O", "O"], ["O", "O", "O"]]
    p2 = [["B-LOC", "I-LOC", "O"], ["B-LOC", "O", "B-PER"], ["O", "O", "O"]]
    g3 = [["B-LOC", "I-LOC", "I-LOC", "O", "B-PER"]]
    p3 = [["O", "B-LOC", "I-LOC", "O", "B-PER"]]
    g4 = [["O", "O"], ["B-PER", "O"]]
    p4 = [["O", "O"], ["O", "O"]]
    g5 = [["B-PER", "O", "B-PER", "I-PER", "O", "B-LOC"], ["B-DATE"], ["O", "B-LOC"]]
    p5 = [["B-PER", "O", "B-PER", "I-PER", "O", "B-LOC"], ["O"], ["O", "B-PER"]]
    cases = [(g1, p1), (g2, p2), (g3, p3), (g4, p4), (g5, p5), (g1, g1)]
    g = torch.Generator().manual_seed(11)
    for _ in range(4):
        gold, pred = [], []
        for n in torch.randint(2, 9, (6,), generator=g).tolist():
            row = _random_tags(g, n)
            flip = torch.rand(n, generator=g) < 0.3
            other = _random_tags(g, n)
            gold.append(row)
            pred.append([o if f else t for t, o, f in zip(row, other, flip.tolist())])
        cases.append((gold, pred))
    return cases


def _as_f1(value, where, gold, predicted) -> float:
    if isinstance(value, dict) and "f1" in value:
        value = value["f1"]
    try:
        return float(value)
    except (TypeError, ValueError):
        raise CheckFailed(f"your function returned {short_value(value)} on {where}, not a "
                          "number.", "return the F1 as a float between 0 and 1.") from None


def _percentages(attempt) -> Message | None:
    if all(mine > 1.0 + 1e-9 for mine, right in zip(attempt.answers, attempt.references)
           if right > 0):
        return ("your F1 is larger than 1: a percentage, not a fraction.",
                "return a fraction between 0 and 1.")
    return None


def _first_wrong_f1(attempt) -> tuple[str, str]:
    i = attempt.first
    gold, pred = attempt.cases[i]
    return (f"on gold {gold} and predicted {pred} your F1 is {attempt.answers[i]:.4f}, "
            f"the entity-level F1 is {attempt.references[i]:.4f}.",
            "print the spans your my_bio_to_spans gives for these sequences and count by hand: "
            "correct = spans in both, precision = correct / predicted, recall = correct / gold.")


_F1 = Exercise(
    title="entity-level F1",
    cases=_f1_cases,
    answer=_as_f1,
    reference=lambda gold, predicted: entity_scores(gold, predicted)["f1"],
    describe=lambda gold, predicted: "",
    numbered=True,
    same=lambda a, b: abs(a - b) < 1e-9,
    notice=_percentages,
    mistakes=_F1_MISTAKES,
    fallback=_first_wrong_f1,
)


@checker
def check_entity_f1(fn: Callable) -> bool:
    """Check ``fn(gold, predicted) -> F1`` (a number in [0, 1]) over lists of BIO sequences.

    (Lesson 7, §4.) Entity level and micro-averaged, as CoNLL and seqeval: an entity counts
    only if type, start and end all match. Token-level scores, untyped or overlapping matches
    and per-sentence averages are named when they explain the answers.
    """
    return run(_F1, fn)


# --- The best span (Lesson 7, §5) -----------------------------------------------------------------


def _span_variant(s, e, context, max_tokens, *, joint=True, use_context=True, ordered=True,
                  limit=0):
    """best_span for one row with one switch turned: each non-default switch is a known mistake."""
    n = len(s)
    allowed_i = context if use_context else torch.ones(n, dtype=torch.bool)
    if not joint:
        s_ = s.masked_fill(~allowed_i, float("-inf"))
        e_ = e.masked_fill(~allowed_i, float("-inf"))
        return int(s_.argmax()), int(e_.argmax())
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    ok = allowed_i.unsqueeze(1) & allowed_i.unsqueeze(0)
    if ordered:
        ok &= j >= i
    if limit is not None:
        ok &= j < i + max_tokens + limit
    scores = (s.unsqueeze(1) + e.unsqueeze(0)).masked_fill(~ok, float("-inf"))
    flat = int(scores.flatten().argmax())
    return flat // n, flat % n


_SPAN_MISTAKES = [
    ("you take the best start and the best end separately; they can give an end before the "
     "start or an overlong span.",
     "score every allowed pair (i, j) by s_i + e_j and take the best pair.",
     partial(_span_variant, joint=False)),
    ("your span can land outside the context (on the question, a special token or padding).",
     "allow only positions where context_mask is True.",
     partial(_span_variant, use_context=False)),
    ("your span can end before it starts.",
     "require start <= end.",
     partial(_span_variant, ordered=False)),
    ("your span can be longer than max_tokens.",
     "require end - start + 1 <= max_tokens.",
     partial(_span_variant, limit=None)),
    ("your spans can be one token longer than max_tokens.",
     "end - start + 1 <= max_tokens means end < start + max_tokens.",
     partial(_span_variant, limit=1)),
]


def _span_cases() -> list[tuple]:
    def t(values):
        return torch.tensor(values, dtype=torch.float32)

    def c(values):
        return torch.tensor(values, dtype=torch.bool)

    cases = [
        (t([0, 0, 0, 5, 1, 0]), t([0, 0, 0, 0, 4, 0]), c([0, 0, 1, 1, 1, 1]), 4),
        (t([9, 0, 1, 0, 0]), t([9, 0, 0, 2, 0]), c([0, 0, 1, 1, 1]), 4),  # the best is on [CLS]
        (t([0, 0, 1, 0, 5]), t([0, 0, 0, 6, 0]), c([0, 0, 1, 1, 1]), 4),  # best end before start
        (t([0, 5, 0, 0, 0, 0, 0]), t([0, 0, 0, 0, 0, 1, 6]), c([0, 1, 1, 1, 1, 1, 1]), 3),
        (t([0, 5, 0, 0, 0, 0]), t([0, 0, 0, 0, 6, 0]), c([0, 1, 1, 1, 1, 1]), 3),  # length 4
        (t([1, 2, 3]), t([3, 2, 1]), c([0, 1, 0]), 2),  # a one-token context
    ]
    g = torch.Generator().manual_seed(5)
    for _ in range(8):
        n = int(torch.randint(6, 14, (1,), generator=g))
        q = int(torch.randint(1, 4, (1,), generator=g))
        pad = int(torch.randint(0, 3, (1,), generator=g))
        context = torch.zeros(n, dtype=torch.bool)
        context[q + 1:n - 1 - pad] = True
        cases.append((torch.randn(n, generator=g) * 3, torch.randn(n, generator=g) * 3, context,
                      int(torch.randint(1, 5, (1,), generator=g))))
    return cases


def _as_pair(value, where, *case) -> tuple[int, int]:
    try:
        start, end = value
        return int(start), int(end)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(f"your function returned {short_value(value)} on {where}, not a pair.",
                          "return two ints, (start, end).") from None


def _best_span_reference(s, e, context, max_tokens) -> tuple[int, int]:
    i, j, _ = best_span(s[None], e[None], context[None], max_tokens)
    return int(i), int(j)


def _first_wrong_span(attempt) -> str:
    i = attempt.first
    s, e, context, m = attempt.cases[i]
    return (f"on case {i} (start_logits {s.tolist()}, end_logits {e.tolist()}, "
            f"context_mask {context.int().tolist()}, max_tokens {m}) you return "
            f"{attempt.answers[i]}, the best allowed span is {attempt.references[i]}.")


_SPAN = Exercise(
    title="best span",
    cases=_span_cases,
    arguments=lambda s, e, context, m: (s.clone(), e.clone(), context.clone(), m),
    answer=_as_pair,
    reference=_best_span_reference,
    describe=lambda s, e, context, m: f"n = {len(s)}, max_tokens = {m}",
    numbered=True,
    same=_equal,
    mistakes=_SPAN_MISTAKES,
    same_mistake=lambda mine, wrong: mine == tuple(wrong),
    fallback=_first_wrong_span,
)


@checker
def check_best_span(fn: Callable) -> bool:
    """Check ``fn(start_logits, end_logits, context_mask, max_tokens) -> (start, end)``, one row.

    (Lesson 7, §5.) Inputs are 1-d tensors of length n; the answer is the pair i <= j with
    j - i + 1 <= max_tokens, both in the context, that maximises s_i + e_j.
    """
    return run(_SPAN, fn)


# --- The best answer across windows (Lesson 7, §7) -----------------------------------------------


def _window_variant(s, e, offsets, context_start, lengths, max_tokens, *, offset=True,
                    shift=True, ordered=True, limit=True, use_null=True, null="min",
                    first=False, context_only=True, trailing_sep=False, tie_answers=False,
                    own_margin=False):
    """best_answer_across_windows with one switch turned: each non-default one is a mistake."""
    w, n = s.shape
    position = torch.arange(n)
    best = None  # (score, start, end) in context coordinates
    nulls = s[:, 0] + e[:, 0]
    for k in range(w):
        end = context_start + int(lengths[k]) + (1 if trailing_sep else 0)
        inside = (position >= context_start) & (position < end)
        if not context_only:
            inside = position < end
        i, j = position.unsqueeze(1), position.unsqueeze(0)
        ok = inside.unsqueeze(1) & inside.unsqueeze(0)
        if ordered:
            ok &= j >= i
        if limit:
            ok &= j - i + 1 <= max_tokens
        scores = (s[k].unsqueeze(1) + e[k].unsqueeze(0)).masked_fill(~ok, float("-inf"))
        flat = int(scores.flatten().argmax())
        a, b = flat // n, flat % n
        moved = (int(offsets[k]) if offset else 0) - (context_start if shift else 0)
        value = float(scores.flatten()[flat]) - (float(nulls[k]) if own_margin else 0.0)
        if best is None or value > best[0]:
            best = (value, a + moved, b + moved, k)
        if first:
            break
    if own_margin:  # the window with the largest margin over its own null score
        return None if best[0] <= 0 else (best[1], best[2])
    threshold = {"min": nulls.min(), "max": nulls.max(), "window": nulls[best[3]]}[null]
    if use_null and (best[0] < float(threshold) if tie_answers else best[0] <= float(threshold)):
        return None
    return best[1], best[2]


_WINDOW_MISTAKES = [
    ("your positions are those of the window, not of the context.",
     "add the window's offset, offsets[k], to a span found in window k.",
     partial(_window_variant, offset=False)),
    ("your positions count the [CLS], question and [SEP] tokens in front of the context.",
     "subtract context_start, so that the context's first piece is 0.",
     partial(_window_variant, shift=False)),
    ("you never answer 'no answer'.",
     "compare the best span's score with the null score s[CLS] + e[CLS]; None if it does not "
     "beat it.",
     partial(_window_variant, use_null=False)),
    ("you search only the first window, but the answer can be in any window.",
     "take the best span over all of them.",
     partial(_window_variant, first=True)),
    ("your span can end before it starts.",
     "require start <= end.",
     partial(_window_variant, ordered=False)),
    ("your span can be longer than max_tokens.",
     "require end - start + 1 <= max_tokens.",
     partial(_window_variant, limit=False)),
    ("your span can start or end on [CLS] or the question, but only the window's context may "
     "hold the answer.",
     "allow context_start to context_start + context_lengths[k] - 1 only.",
     partial(_window_variant, context_only=False)),
    ("you compare with the null score of the window where the best span is, but BERT's SQuAD "
     "2.0 code, and this exercise, use the window most sure that there is an answer.",
     "take the smallest null score over all windows.",
     partial(_window_variant, null="window")),
    ("you compare with the largest null score over the windows, not with the window most sure "
     "that there is an answer.",
     "take the smallest null score over all windows.",
     partial(_window_variant, null="max")),
    ("your span can start or end on the [SEP] after the window's context.",
     "allow context_start to context_start + context_lengths[k] - 1 only: the last context "
     "piece is at context_start + context_lengths[k] - 1.",
     partial(_window_variant, trailing_sep=True)),
    ("when the best span's score equals the smallest null score you answer, but a tie is "
     "'no answer': the span must beat the null score.",
     "return None when the best score is <= the smallest null score, not only when it is <.",
     partial(_window_variant, tie_answers=True)),
    ("you pick the window whose best span beats its own null score by the most, but the "
     "answer is the best span over all windows, compared with the smallest null score.",
     "keep the best span score over all windows and, separately, the smallest null score; "
     "compare the two.",
     partial(_window_variant, own_margin=True)),
]


def _window_cases() -> list[tuple]:
    """(start_logits, end_logits, offsets, context_start, context_lengths, max_tokens)."""
    def row(n, values, null=-5.0):
        r = torch.zeros(n)
        r[0] = null
        for position, v in values.items():
            r[position] = v
        return r

    def case(starts, ends, offsets, context_start, lengths, max_tokens):
        return (torch.stack(starts), torch.stack(ends), torch.tensor(offsets), context_start,
                torch.tensor(lengths), max_tokens)

    n = 10  # [CLS] q q [SEP] c c c c c [SEP]: context_start 4, five pieces
    cases = [
        # the best span is in the second window, which begins at piece 3
        case([row(n, {5: 1.0}), row(n, {6: 4.0})], [row(n, {5: 1.0}), row(n, {7: 4.0})],
             [0, 3], 4, [5, 5], 3),
        # the best start alone comes after the best end alone
        case([row(n, {7: 5.0, 5: 2.0})], [row(n, {5: 5.0, 8: 1.0})], [0], 4, [5], 5),
        # the question's tokens score higher than any context token
        case([row(n, {1: 9.0, 6: 2.0})], [row(n, {2: 9.0, 6: 2.0})], [0], 4, [5], 3),
        # every window's null score beats every span: no answer
        case([row(n, {5: 1.0}, null=4.0), row(n, {6: 1.0}, null=3.0)],
             [row(n, {5: 1.0}, null=4.0), row(n, {6: 1.0}, null=3.0)], [0, 3], 4, [5, 5], 3),
        # the best span's own window says "no answer", another window is sure there is one
        case([row(n, {5: 3.0}, null=5.0), row(n, {6: 1.0}, null=-2.0)],
             [row(n, {5: 3.0}, null=5.0), row(n, {7: 1.0}, null=-2.0)], [0, 3], 4, [5, 5], 3),
        # one window is sure there is no answer, but another is surer there is one
        case([row(n, {5: 2.0}, null=0.5), row(n, {6: 0.5}, null=3.0), row(n, {}, null=-0.5)],
             [row(n, {5: 2.0}, null=0.5), row(n, {6: 0.5}, null=3.0), row(n, {}, null=-0.5)],
             [0, 3, 6], 4, [5, 5, 2], 3),
        # a long span scores best but is over max_tokens
        case([row(n, {4: 6.0, 6: 1.0})], [row(n, {8: 6.0, 6: 1.0})], [0], 4, [5], 2),
        # the highest logits sit on the [SEP] right after the context (position 9)
        case([row(n, {9: 8.0, 6: 1.0})], [row(n, {9: 8.0, 7: 1.0})], [0], 4, [5], 3),
        # a tie: the best span scores exactly the null score, so there is no answer
        case([row(n, {6: 1.0}, null=1.0), row(n, {5: 0.5}, null=3.0)],
             [row(n, {6: 1.0}, null=1.0), row(n, {5: 0.5}, null=3.0)], [0, 3], 4, [5, 5], 3),
        # the last window is shorter than the others
        case([row(n, {5: 1.0}), row(n, {5: 1.0}), row(n, {5: 3.0, 8: 9.0})],
             [row(n, {5: 1.0}), row(n, {5: 1.0}), row(n, {5: 3.0, 8: 9.0})],
             [0, 3, 6], 4, [5, 5, 2], 4),
    ]
    g = torch.Generator().manual_seed(7)
    for _ in range(8):
        w = int(torch.randint(1, 5, (1,), generator=g))
        start = int(torch.randint(2, 5, (1,), generator=g))
        width = int(torch.randint(3, 8, (1,), generator=g))
        stride = int(torch.randint(0, width, (1,), generator=g))
        offsets = [k * (width - stride) for k in range(w)]
        lengths = [width] * (w - 1) + [int(torch.randint(1, width + 1, (1,), generator=g))]
        n = start + width + 1 + int(torch.randint(0, 3, (1,), generator=g))
        cases.append((torch.randn(w, n, generator=g) * 3, torch.randn(w, n, generator=g) * 3,
                      torch.tensor(offsets), start, torch.tensor(lengths),
                      int(torch.randint(1, 5, (1,), generator=g))))
    return cases


def _as_span_or_none(value, where, *case):
    if value is None:
        return None
    try:
        start, end = value
        return int(start), int(end)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(f"your function returned {short_value(value)} on {where}, neither a "
                          "pair nor None.",
                          "return (start, end) as two ints, or None for no answer.") from None


def _window_reference(s, e, offsets, context_start, lengths, max_tokens):
    from encoderlab.lessons.l07_longqa import best_answer_across_windows

    return best_answer_across_windows(s, e, offsets, context_start, lengths, max_tokens)


def _first_wrong_window(attempt) -> tuple[str, str]:
    k = attempt.first
    return (f"on {attempt.where(k)} you return {attempt.answers[k]}, the right answer is "
            f"{attempt.references[k]}.",
            "score each window's allowed spans by s_i + e_j, keep the best over all windows, and "
            "compare it with the smallest null score.")


_WINDOW = Exercise(
    title="best answer across windows",
    cases=_window_cases,
    arguments=lambda s, e, o, c, lengths, m: (s.clone(), e.clone(), o.clone(), c,
                                              lengths.clone(), m),
    answer=_as_span_or_none,
    reference=_window_reference,
    describe=lambda s, e, o, c, lengths, m: (f"{len(s)} window(s) of n = {s.shape[1]}, "
                                             f"context_start {c}, offsets {o.tolist()}, "
                                             f"context_lengths {lengths.tolist()}, "
                                             f"max_tokens {m}"),
    numbered=True,
    same=_equal,
    mistakes=_WINDOW_MISTAKES,
    fallback=_first_wrong_window,
)


@checker
def check_window_span(fn: Callable) -> bool:
    """Check ``fn(start_logits, end_logits, offsets, context_start, context_lengths,
    max_tokens) -> (start, end) | None`` (Lesson 7, §7).

    ``start_logits``/``end_logits`` are (w, n), one row per window, [CLS] at position 0; window
    k's context runs from row position ``context_start`` for ``context_lengths[k]`` pieces and
    begins at piece ``offsets[k]`` of the whole context. The answer is the best allowed span
    over all windows (start <= end, end - start + 1 <= max_tokens), in the context's pieces,
    or None when its score does not beat the smallest s[CLS] + e[CLS] over the windows (a tie
    is None).
    """
    return run(_WINDOW, fn)

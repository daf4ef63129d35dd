"""Long-context extractive QA with a document stride and a no-answer case (Lesson 7, §7).

A context longer than the model's window is cut into overlapping windows, each encoded as
``[CLS] question [SEP] window [SEP]``; the span head scores every window, the best span of each
is mapped back to the context through the window's offset, and the answer is the best span
over all windows, unless the null score at ``[CLS]`` beats it (SQuAD 2.0's convention).

- :func:`long_qa_task`: long contexts built by concatenating short ones of :func:`qa_task`, with
  questions whose answer is somewhere in them and questions about someone who is not there;
- :func:`window_starts`, :func:`encode_windows`: the windows and their offsets;
- :func:`window_scores`, :func:`best_answer_across_windows`: the span search across windows;
- :func:`long_answers`, :func:`long_qa_scores`: answers as words, exact match, F1 and no-answer
  accuracy;
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from encoderlab.lessons.l07_finetune import (
    best_span,
    encode_words,
    exact_match,
    pad_rows,
    token_f1,
)
from encoderlab.lessons.l07_tasks import QAExample

__all__ = [
    "LongQAExample",
    "asked_person",
    "long_qa_task",
    "window_starts",
    "encode_windows",
    "window_scores",
    "best_answer_across_windows",
    "long_answers",
    "long_qa_scores",
]


@dataclass(frozen=True)
class LongQAExample:
    """A question about a long context; ``start``/``end`` (words) are None when it has no answer."""

    question: list[str]
    context: list[str]
    start: int | None
    end: int | None

    @property
    def answerable(self) -> bool:
        return self.start is not None

    @property
    def answer(self) -> str:
        """The gold answer's words, or "" for a question the context does not answer."""
        return "" if self.start is None else " ".join(self.context[self.start:self.end + 1])


def asked_person(question: list[str]) -> str:
    """The person a question of :func:`qa_task` asks about: its capitalised words."""
    return " ".join(w for w in question if w[:1].isupper())


def _people(context: list[str]) -> list[str]:
    """The people a :func:`qa_task` context is about: the words before each "was born"."""
    people, sentence = [], []
    for w in context:
        if w == "was" and sentence:
            people.append(" ".join(sentence))
        sentence = [] if w == "." else sentence + [w]
    return people


def long_qa_task(short: list[QAExample], n_answerable: int, n_unanswerable: int,
                 parts: int = 3, seed: int = 0) -> list[LongQAExample]:
    """Long contexts of ``parts`` short contexts each, with and without the answer (Lesson 7, §7).

    Each long context concatenates ``parts`` contexts of ``short`` (drawn at random, no person
    twice). An answerable question is the question of one of them, its answer moved by the
    words before it, so the answer can be in any part; an unanswerable one is the question of
    another short example, about a person the long context never mentions. The answerable
    questions come first, then the unanswerable ones.
    """
    if parts < 1 or len(short) <= parts:
        raise ValueError(f"need parts >= 1 and more than {parts} short examples, "
                         f"got parts={parts} and {len(short)} examples.")
    g = torch.Generator().manual_seed(seed)
    out: list[LongQAExample] = []
    while len(out) < n_answerable + n_unanswerable:
        chosen = torch.randperm(len(short), generator=g)[:parts].tolist()
        people = [p for k in chosen for p in _people(short[k].context)]
        if len(set(people)) < len(people):
            continue  # the same name twice would make a question ambiguous
        context = [w for k in chosen for w in short[k].context]
        if len(out) < n_answerable:
            part = int(torch.randint(parts, (1,), generator=g))
            before = sum(len(short[k].context) for k in chosen[:part])
            ex = short[chosen[part]]
            out.append(LongQAExample(ex.question, context, before + ex.start, before + ex.end))
            continue
        other = short[int(torch.randint(len(short), (1,), generator=g))]
        if asked_person(other.question) in people:
            continue  # draw again: this question would be answered
        out.append(LongQAExample(other.question, context, None, None))
    return out


def window_starts(n_pieces: int, width: int, stride: int) -> list[int]:
    """Where each window of ``width`` context pieces begins; neighbours overlap by ``stride``.

    The windows begin every ``width - stride`` pieces until one reaches the end of the context
    (Hugging Face tokenizers' ``stride`` has the same meaning: the overlap).
    """
    if width < 1 or not 0 <= stride < width:
        raise ValueError(f"need width >= 1 and 0 <= stride < width, got width={width}, "
                         f"stride={stride}.")
    starts = [0]
    while starts[-1] + width < n_pieces:
        starts.append(starts[-1] + width - stride)
    return starts


def encode_windows(tokenizer, examples: list[LongQAExample], max_length: int = 64,
                   stride: int = 16) -> dict:
    """``[CLS] question [SEP] window [SEP]`` rows for every window of every example.

    (Lesson 7, §7.) Returns, one row per window: ``input_ids``, ``token_type_ids``,
    ``attention_mask``, ``context_mask`` (True on the window's context pieces), ``example``
    (which example), ``offset`` (the window's first piece in the whole context's pieces),
    ``context_start`` (the row position of that piece: the question's length + 2),
    ``context_length`` (pieces of context in the row), ``starts``/``ends`` (the answer's row
    positions when it lies wholly in the window, else 0: [CLS], the no-answer target), and
    ``piece_word``: for each example, the context word of each context piece.
    """
    rows, segments, contexts, keys = [], [], [], {k: [] for k in (
        "example", "offset", "context_start", "context_length", "starts", "ends")}
    piece_word = []
    for k, ex in enumerate(examples):
        q_ids, _ = encode_words(tokenizer, ex.question)
        c_ids, word_of = encode_words(tokenizer, ex.context)
        piece_word.append(word_of)
        width = max_length - len(q_ids) - 3
        if width <= stride:
            raise ValueError(f"example {k}: the question leaves {width} pieces for the context, "
                             f"not more than stride={stride}; raise max_length.")
        first = last = None
        if ex.answerable:
            first, last = word_of.index(ex.start), len(word_of) - 1 - word_of[::-1].index(ex.end)
        begin = len(q_ids) + 2
        for offset in window_starts(len(c_ids), width, stride):
            piece = c_ids[offset:offset + width]
            rows.append([tokenizer.cls_token_id, *q_ids, tokenizer.sep_token_id, *piece,
                         tokenizer.sep_token_id])
            segments.append([0] * begin + [1] * (len(piece) + 1))
            contexts.append([0] * begin + [1] * len(piece) + [0])
            inside = first is not None and offset <= first and last < offset + len(piece)
            for key, value in (("example", k), ("offset", offset), ("context_start", begin),
                               ("context_length", len(piece)),
                               ("starts", begin + first - offset if inside else 0),
                               ("ends", begin + last - offset if inside else 0)):
                keys[key].append(value)
    return {
        "input_ids": pad_rows(rows, tokenizer.pad_token_id),
        "token_type_ids": pad_rows(segments, 0),
        "attention_mask": pad_rows([[1] * len(r) for r in rows], 0),
        "context_mask": pad_rows(contexts, 0).bool(),
        **{key: torch.tensor(values) for key, values in keys.items()},
        "piece_word": piece_word,
    }


def window_scores(start_logits: torch.Tensor, end_logits: torch.Tensor, offsets,
                  context_start: int, context_lengths, max_tokens: int = 16) -> dict:
    """One example's windows, searched: the best span and the null score (Lesson 7, §7).

    ``start_logits`` and ``end_logits`` are (w, n), one row per window, with the [CLS] logits at
    position 0; every window's context runs from ``context_start`` for ``context_lengths[w]``
    pieces and begins at piece ``offsets[w]`` of the whole context. Returns ``start`` and
    ``end`` (the best span over all windows, in the context's pieces, i <= j < i + max_tokens),
    ``score`` (its s_i + e_j), ``window`` (where it was found) and ``null``: the smallest
    s_[CLS] + e_[CLS] over the windows, as in BERT's SQuAD 2.0 code (the window that is most
    sure there is an answer decides).
    """
    if start_logits.dim() != 2 or start_logits.shape != end_logits.shape:
        raise ValueError("start_logits and end_logits must both be (windows, n), got "
                         f"{tuple(start_logits.shape)} and {tuple(end_logits.shape)}.")
    w, n = start_logits.shape
    offsets = torch.as_tensor(offsets).reshape(-1)
    lengths = torch.as_tensor(context_lengths).reshape(-1)
    if len(offsets) != w or len(lengths) != w:
        raise ValueError(f"need one offset and one context length per window ({w}), got "
                         f"{len(offsets)} and {len(lengths)}.")
    position = torch.arange(n)
    context = (position >= context_start) & (position < context_start + lengths[:, None])
    i, j, score = best_span(start_logits, end_logits, context, max_tokens)  # (w,) each
    k = int(score.argmax())
    null = start_logits[:, 0] + end_logits[:, 0]  # (w,)
    return {"start": int(offsets[k] + i[k] - context_start),
            "end": int(offsets[k] + j[k] - context_start),
            "score": float(score[k]), "window": k, "null": float(null.min())}


def best_answer_across_windows(start_logits, end_logits, offsets, context_start: int,
                               context_lengths, max_tokens: int = 16,
                               threshold: float = 0.0) -> tuple[int, int] | None:
    """The best (start, end) over all windows in context pieces, or None for "no answer".

    (Lesson 7, §7.) The answer is given only when its score beats the null score by more than
    ``threshold`` (SQuAD 2.0's ``null_score_diff_threshold``, tuned on held-out questions).
    """
    found = window_scores(start_logits, end_logits, offsets, context_start, context_lengths,
                          max_tokens)
    if found["score"] - found["null"] <= threshold:
        return None
    return found["start"], found["end"]


def long_answers(examples: list[LongQAExample], windows: dict, start_logits, end_logits,
                 threshold: float = 0.0, max_tokens: int = 16) -> dict:
    """Every example's answer (words, "" for none) and its margin, best span score - null."""
    answers, margins = [], []
    for k, ex in enumerate(examples):
        rows = (windows["example"] == k).nonzero().squeeze(1)
        found = window_scores(start_logits[rows], end_logits[rows], windows["offset"][rows],
                              int(windows["context_start"][rows[0]]),
                              windows["context_length"][rows], max_tokens)
        margins.append(found["score"] - found["null"])
        word_of = windows["piece_word"][k]
        first, last = word_of[found["start"]], word_of[found["end"]]
        answers.append(" ".join(ex.context[first:last + 1]) if margins[-1] > threshold else "")
    return {"answers": answers, "margins": torch.tensor(margins)}


def long_qa_scores(examples: list[LongQAExample], answers: list[str]) -> dict:
    """Exact match and F1 on the answerable questions, accuracy on the others, with counts.

    ``overall`` counts a question right when it is answerable and answered exactly, or
    unanswerable and not answered; ``f1`` is SQuAD's word-overlap F1 (0 for no answer).
    """
    right_answer = [exact_match(a, ex.answer) == 1 for a, ex in zip(answers, examples)
                    if ex.answerable]
    f1 = [token_f1(a, ex.answer) for a, ex in zip(answers, examples) if ex.answerable]
    right_none = [a == "" for a, ex in zip(answers, examples) if not ex.answerable]
    return {"exact_match": 100 * sum(right_answer) / max(len(right_answer), 1),
            "n_exact": sum(right_answer), "n_answerable": len(right_answer),
            "f1": 100 * sum(f1) / max(len(f1), 1),
            "no_answer_accuracy": 100 * sum(right_none) / max(len(right_none), 1),
            "n_none_right": sum(right_none), "n_unanswerable": len(right_none),
            "overall": 100 * (sum(right_answer) + sum(right_none)) / len(examples)}

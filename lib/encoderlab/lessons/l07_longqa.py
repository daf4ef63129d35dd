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
- :func:`long_qa_split`: three disjoint sets of questions, train, dev (where the threshold is
  chosen, :func:`choose_threshold`) and test (where the scores are reported);
- :class:`TopSpanModel`, :func:`lower_states`, :func:`train_top`: MiniLM's top block and a span
  head fine-tuned on the windows, over the frozen blocks below, whose outputs are computed once;
- :data:`RECIPES`: ``l7-long-qa``, that run: the top block and the head in float16
  (:func:`top_tensors`, :func:`load_top`), with their logits on the dev and test windows.
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import dataclass

import torch
from torch import nn

from encoderlab import masks
from encoderlab.course.train import load_stored_part, train, warmup_factor
from encoderlab.data import shuffled_batches, trim_padding
from encoderlab.lessons.l07_finetune import (
    _pad_rows,
    best_span,
    encode_words,
    exact_match,
    token_f1,
)
from encoderlab.lessons.l07_tasks import QAExample, qa_task
from encoderlab.objectives import span_loss
from encoderlab.pretrained import load_minilm
from encoderlab.validate import check_int

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
    "LONG_QA",
    "SPLITS",
    "long_qa_split",
    "windows_fingerprint",
    "candidates",
    "TopSpanModel",
    "lower_states",
    "top_logits",
    "warmup_then_decay",
    "window_loss",
    "warm_start_head",
    "train_top",
    "choose_threshold",
    "top_tensors",
    "load_top",
    "RECIPES",
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
        "input_ids": _pad_rows(rows, tokenizer.pad_token_id),
        "token_type_ids": _pad_rows(segments, 0),
        "attention_mask": _pad_rows([[1] * len(r) for r in rows], 0),
        "context_mask": _pad_rows(contexts, 0).bool(),
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


# --- The recorded run: MiniLM's top block and a span head fine-tuned on windows ----------------

LONG_QA = {  # the settings of l7-long-qa; the notebook prints them from the metadata
    "max_length": 64, "stride": 16, "parts": 3,
    "train_answerable": 300, "train_unanswerable": 300, "train_seed": 0,
    "dev_answerable": 60, "dev_unanswerable": 60, "dev_seed": 1,
    "test_answerable": 60, "test_unanswerable": 60, "test_seed": 2,
    "head_steps": 300, "head_lr": 1e-2, "head_batch_size": 64,
    "top_blocks": 1, "steps": 500, "warmup_steps": 50, "batch_size": 32, "lr": 2e-4,
    "weight_decay": 0.01, "seed": 0, "max_tokens": 16,
}
SPLITS = ("train", "dev", "test")


def long_qa_split(tokenizer) -> dict[str, tuple[list[LongQAExample], dict]]:
    """``{"train", "dev", "test"}`` -> (examples, their windows) of ``l7-long-qa``.

    The training questions are built from :func:`qa_task`'s training examples, the dev and test
    questions from the first and second half of its test examples: no dev or test person is
    ever trained on, and no short context is in both dev and test. The threshold is chosen on
    dev, the scores are reported on test.
    """
    c = LONG_QA
    train_short, held_short = qa_task()
    half = len(held_short) // 2
    shorts = {"train": train_short, "dev": held_short[:half], "test": held_short[half:]}
    out = {}
    for name in SPLITS:
        examples = long_qa_task(shorts[name], c[f"{name}_answerable"],
                                c[f"{name}_unanswerable"], parts=c["parts"],
                                seed=c[f"{name}_seed"])
        out[name] = (examples, encode_windows(tokenizer, examples, c["max_length"],
                                              c["stride"]))
    return out


def windows_fingerprint(windows: dict) -> str:
    """A short digest of the windows' token ids: the notebook checks it rebuilt the same rows."""
    return hashlib.sha256(windows["input_ids"].numpy().tobytes()).hexdigest()[:16]


def candidates(windows: dict) -> torch.Tensor:
    """Where a start or an end may fall: the window's context, or [CLS] for "no answer"."""
    allowed = windows["context_mask"].clone()
    allowed[:, 0] = True
    return allowed


class TopSpanModel(nn.Module):
    """The top ``top_blocks`` blocks of ``encoder`` (copies) and a span head (Lesson 7, §7).

    It reads the token vectors that enter those blocks, H^(L-k), computed once by the frozen
    blocks below (:func:`lower_states`), and returns start and end logits (b, n), -inf where
    ``allowed`` is False (:func:`candidates`: the window's context, and [CLS] for no answer).
    """

    def __init__(self, encoder: nn.Module, top_blocks: int = 1):
        super().__init__()
        check_int(top_blocks, "top_blocks", at_least=1, at_most=encoder.config.n_layers)
        self.blocks = nn.ModuleList(copy.deepcopy(b) for b in encoder.blocks[-top_blocks:])
        norm = getattr(encoder, "final_norm", None)  # pre-LN stacks end with one more LayerNorm
        self.final_norm = None if norm is None else copy.deepcopy(norm)
        self.qa = nn.Linear(encoder.config.d_model, 2)  # start and end, as in SpanExtractor

    def features(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """H^(L-k) (b, n, d) -> the top blocks' output (b, n, d), what the head reads."""
        mask = masks.padding(attention_mask) if not bool(attention_mask.all()) else None
        for block in self.blocks:
            hidden = block(hidden, mask, need_weights=False)[0]  # (b, n, d)
        return hidden if self.final_norm is None else self.final_norm(hidden)

    def head(self, features: torch.Tensor, allowed: torch.Tensor):
        """The span head: start and end logits (b, n), -inf where ``allowed`` is False."""
        scores = self.qa(features)  # (b, n, 2)
        outside = ~allowed.to(torch.bool)
        return (scores[..., 0].masked_fill(outside, float("-inf")),
                scores[..., 1].masked_fill(outside, float("-inf")))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor,
                allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.features(hidden, attention_mask), allowed)


def lower_states(encoder: nn.Module, windows: dict, top_blocks: int = 1,
                 batch_size: int = 64) -> torch.Tensor:
    """H^(L-k) (N, n, d): what enters the top ``top_blocks`` blocks, for every window.

    The frozen blocks below run once over the windows (in eval mode, no dropout).
    """
    was_training = encoder.training
    encoder.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(windows["input_ids"]), batch_size):
            rows = slice(start, start + batch_size)
            o = encoder(windows["input_ids"][rows], token_type_ids=windows["token_type_ids"][rows],
                        attention_mask=windows["attention_mask"][rows])
            out.append(o.hidden_states[-1 - top_blocks])  # (b, n, d)
    encoder.train(was_training)
    return torch.cat(out)


def top_logits(model: TopSpanModel, hidden: torch.Tensor, windows: dict,
               batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and end logits (N, n) of every window, in eval mode and without gradients."""
    model.eval()
    allowed = candidates(windows)
    parts = []
    with torch.no_grad():
        for start in range(0, len(hidden), batch_size):
            rows = slice(start, start + batch_size)
            parts.append(model(hidden[rows], windows["attention_mask"][rows], allowed[rows]))
    return torch.cat([s for s, _ in parts]), torch.cat([e for _, e in parts])


def warmup_then_decay(steps: int, warmup_steps: int):
    """The learning-rate factor of BERT's fine-tuning: linear warm-up, then linear decay to 0."""
    check_int(warmup_steps, "warmup_steps", at_least=1, at_most=steps)
    return lambda step: warmup_factor(step, steps, warmup_steps)


def window_loss(model: TopSpanModel, batch) -> torch.Tensor:
    """:func:`span_loss` on a batch (hidden, attention_mask, allowed, starts, ends), its padding
    columns cut (:func:`trim_padding`)."""
    hidden, attention_mask, allowed, starts, ends = batch
    hidden, attention_mask = trim_padding(hidden, attention_mask)
    allowed = allowed[:, :attention_mask.shape[1]]
    return span_loss(*model(hidden, attention_mask, allowed), starts, ends)


def warm_start_head(model: TopSpanModel, hidden: torch.Tensor, windows: dict, steps: int,
                    lr: float = 1e-2, batch_size: int = 64, seed: int = 0,
                    progress: bool = True) -> list[float]:
    """Train only the span head, on the outputs of the still-pretrained top blocks: §5's
    linear probe, so that fine-tuning starts from a head that already points somewhere useful
    instead of a random one ("linear probing, then fine-tuning")."""
    model.eval()
    mask = windows["attention_mask"]
    with torch.no_grad():  # the top blocks' outputs, computed once: only the head learns here
        features = torch.cat([model.features(hidden[r:r + 128], mask[r:r + 128])
                              for r in range(0, len(hidden), 128)])
    batches = shuffled_batches(features, candidates(windows), windows["starts"],
                               windows["ends"], batch_size=batch_size, seed=seed)
    top = list(model.blocks.parameters())
    for p in top:
        p.requires_grad_(False)
    try:
        return train(model, batches, lambda m, b: span_loss(*m.head(b[0], b[1]), b[2], b[3]),
                     steps=steps, lr=lr, seed=seed, progress=progress,
                     description="span head alone")
    finally:
        for p in top:
            p.requires_grad_(True)


def train_top(model: TopSpanModel, hidden: torch.Tensor, windows: dict, steps: int,
              warmup_steps: int, batch_size: int = 32, lr: float = 5e-5,
              weight_decay: float = 0.01, seed: int = 0, progress: bool = True) -> list[float]:
    """AdamW with warm-up and decay on the windows; every window that does not hold the whole
    answer is taught to point at [CLS]. Returns the loss of every step."""
    batches = shuffled_batches(hidden, windows["attention_mask"], candidates(windows),
                               windows["starts"], windows["ends"], batch_size=batch_size,
                               seed=seed)
    return train(model, batches, window_loss, steps=steps, lr=lr, weight_decay=weight_decay,
                 seed=seed, progress=progress, description="top block + span head",
                 schedule=warmup_then_decay(steps, warmup_steps))


def choose_threshold(examples, windows, start_logits, end_logits,
                     max_tokens: int = LONG_QA["max_tokens"]) -> tuple[float, int]:
    """The threshold on (best span - null) that gets the most of ``examples`` right.

    A question is right when it is answerable and answered exactly, or unanswerable and not
    answered (the "best exact" threshold of the SQuAD 2.0 evaluation script). Chosen on the
    dev questions, never on those it is reported on. Returns (threshold, questions right).
    """
    found = long_answers(examples, windows, start_logits, end_logits, threshold=float("-inf"),
                         max_tokens=max_tokens)
    margins = found["margins"]
    answerable = torch.tensor([ex.answerable for ex in examples])
    right_span = torch.tensor([exact_match(a, ex.answer) == 1 for a, ex in
                               zip(found["answers"], examples)])
    best_t, best_right = 0.0, -1
    for m in sorted(set(margins.tolist())) + [float(margins.max()) + 1]:
        t = m - 1e-4  # just below a margin: that question is answered
        right = int(((margins > t) & answerable & right_span).sum()
                    + ((margins <= t) & ~answerable).sum())
        if right > best_right:
            best_t, best_right = t, right
    return best_t, best_right


def top_tensors(model: TopSpanModel) -> dict[str, torch.Tensor]:
    """The trained weights in float16, under ``top.``: 1.8 M numbers per block keep the
    artefact under 5 MB (the pattern of ``l8-contrastive``)."""
    return {f"top.{k}": v.to(torch.float16) for k, v in model.state_dict().items()}


def load_top(encoder: nn.Module, tensors: dict[str, torch.Tensor]) -> TopSpanModel:
    """A :class:`TopSpanModel` of ``encoder`` with the stored weights of ``l7-long-qa`` (float32).

    The packaged MiniLM supplies the frozen blocks below; the artefact holds only the top.
    """
    top_blocks = len({k.split(".")[2] for k in tensors if k.startswith("top.blocks.")})
    return load_stored_part(TopSpanModel(encoder, top_blocks), tensors, "top.")


def _recipe_long_qa(steps: int | None = None, progress: bool = True):
    """Lesson 7, §7: MiniLM's top block and a span head fine-tuned on windows, with a
    no-answer target at [CLS].

    The head is first trained alone on the pretrained top block's outputs
    (:func:`warm_start_head`), then the top block and the head together. Every training window
    whose text does not hold the whole answer is taught to point at [CLS]. The threshold on
    (best span - null) is chosen on the dev questions. Stored: the top block and the head in
    float16, the losses, and the logits of the stored (rounded) weights on the dev and test
    windows.
    """
    c = {**LONG_QA, "steps": steps or LONG_QA["steps"]}
    c["warmup_steps"] = min(c["warmup_steps"], max(1, c["steps"] // 10))
    tokenizer, encoder = load_minilm()
    split = long_qa_split(tokenizer)
    hidden = {name: lower_states(encoder, w, c["top_blocks"]) for name, (_, w) in split.items()}
    torch.manual_seed(c["seed"])  # the head's initial weights
    model = TopSpanModel(encoder, c["top_blocks"])
    t0 = time.perf_counter()
    head_loss = warm_start_head(model, hidden["train"], split["train"][1], c["head_steps"],
                                c["head_lr"], c["head_batch_size"], c["seed"], progress)
    loss = train_top(model, hidden["train"], split["train"][1], c["steps"], c["warmup_steps"],
                     c["batch_size"], c["lr"], c["weight_decay"], c["seed"], progress)
    seconds = time.perf_counter() - t0
    tensors = top_tensors(model)
    model = load_top(encoder, tensors)  # what the lesson evaluates: the rounded weights
    logits = {name: top_logits(model, hidden[name], split[name][1]) for name in SPLITS}
    dev_ex, dev_w = split["dev"]
    threshold, right = choose_threshold(dev_ex, dev_w, *logits["dev"], c["max_tokens"])
    on = {name: long_qa_scores(split[name][0], long_answers(
        split[name][0], split[name][1], *logits[name], threshold, c["max_tokens"])["answers"])
          for name in SPLITS}
    for name in ("dev", "test"):
        tensors[f"{name}_start_logits"] = _stored(logits[name][0])
        tensors[f"{name}_end_logits"] = _stored(logits[name][1])
    tensors["head_loss"] = torch.tensor(head_loss)
    tensors["loss"] = torch.tensor(loss)
    return tensors, {
        **c, "threshold": threshold, "dev_right": right,
        **{f"{name}_{k}": on[name][k] for name in SPLITS
           for k in ("n_exact", "n_none_right")},
        **{f"{name}_windows": len(split[name][1]["example"]) for name in SPLITS},
        **{f"{name}_fingerprint": windows_fingerprint(split[name][1]) for name in SPLITS},
        "seconds": round(seconds, 1)}


def _stored(logits: torch.Tensor) -> torch.Tensor:
    return logits.nan_to_num(neginf=-1e4)


RECIPES = {"l7-long-qa": _recipe_long_qa}

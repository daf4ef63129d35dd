"""Lesson 1's checkers: the labels of the two objectives (§2), both objectives on a padded batch
(§2) and the cosine-similarity matrix (§4)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    as_tensor,
    checker,
    close,
    differs,
    leaving_inputs,
    require_callable,
    run,
)
from encoderlab.lessons.l01_probes import cosine_similarity_matrix
from encoderlab.objectives import IGNORE_INDEX, objective_view

__all__ = ["check_objective_labels", "check_cosine_similarity", "check_batch_objective"]

# --- The labels of the two objectives (Lesson 1, §2) ---------------------------------------------

_MASK_ID = 103  # [MASK] in BERT's vocabulary; the learner's function never needs it


def _labels_reference(input_ids, objective, masked_positions):
    return objective_view(input_ids, objective, masked_positions, _MASK_ID).labels


def _only_for(objective: str, wrong_labels):
    """A mistake made under one objective; under the other the answer is the reference."""
    def labels(input_ids, obj, masked_positions):
        if obj != objective:
            return _labels_reference(input_ids, obj, masked_positions)
        return wrong_labels(input_ids, masked_positions)
    return labels


def _ignored_like(input_ids) -> torch.Tensor:
    return torch.full_like(input_ids, IGNORE_INDEX)


def _shift_right(ids, _masked):
    out = _ignored_like(ids)
    out[1:] = ids[:-1]  # position t labelled with x_{t-1}
    return out


def _own_token_from_1(ids, _masked):
    out = ids.clone()
    out[0] = IGNORE_INDEX  # labels = input_ids, the first one ignored
    return out


def _masked_at(ids, where):
    out = _ignored_like(ids)
    out[where] = ids[where]
    return out


def _masked_inverted(ids, masked):
    keep = torch.ones(len(ids), dtype=torch.bool)
    keep[list(masked)] = False
    return _masked_at(ids, keep)


def _masked_shifted(ids, masked):
    out = _ignored_like(ids)
    for p in masked:
        if p + 1 < len(ids):
            out[p] = ids[p + 1]
    return out


_LABEL_MISTAKES = [
    ("your next-token labels are the inputs themselves: position t is scored against its own "
     "token x_t, which it can see, so the model would learn to copy.",
     "position t predicts the token after it: labels[:-1] = input_ids[1:], and -100 at the last.",
     _only_for("next-token", lambda ids, _m: ids.clone())),
    ("you label position t with its own token x_t (labels = input_ids with the first ignored, "
     "the convention of libraries that shift inside the loss); here labels[t] is what the "
     "prediction at t is scored against, x_{t+1}.",
     "shift left: labels[:-1] = input_ids[1:].",
     _only_for("next-token", _own_token_from_1)),
    ("your next-token labels are shifted the wrong way: position t gets x_{t-1}, a token it has "
     "already seen, not the one after it.",
     "labels[:-1] = input_ids[1:].",
     _only_for("next-token", _shift_right)),
    ("the last position gets x_0 as its label (torch.roll wraps around), but nothing follows "
     "the last token.",
     "set the last label to -100.",
     _only_for("next-token", lambda ids, _m: torch.roll(ids, -1))),
    ("under the masked objective only the masked positions carry a loss, but your labels cover "
     "every position.",
     "set -100 everywhere except masked_positions.",
     _only_for("masked", lambda ids, _m: ids.clone())),
    ("your masked-objective labels sit on the positions that were NOT masked, the wrong way "
     "round.",
     "keep the labels at masked_positions and put -100 everywhere else.",
     _only_for("masked", _masked_inverted)),
    ("your masked-objective labels are shifted by one (x_{t+1}), but a masked position predicts "
     "its own original token, the one [MASK] replaced.",
     "labels[p] = input_ids[p] at the masked positions.",
     _only_for("masked", _masked_shifted)),
]


def _label_cases() -> list[tuple]:
    """(input_ids, objective, masked_positions): one sentence under both objectives, then random."""
    sentence = torch.tensor([101, 2057, 2018, 1037, 12695, 2006, 1996, 2924, 1997, 1996, 2314,
                             102])  # "[CLS] we had a picnic on the bank of the river [SEP]"
    cases = [(sentence, "next-token", ()), (sentence, "masked", (4, 7))]
    g = torch.Generator().manual_seed(2)
    for n in (3, 7, 10, 5):
        ids = torch.randperm(3000, generator=g)[:n] + 1000  # distinct ids: every shift shows
        k = max(1, round(0.3 * n))
        masked = tuple(sorted(torch.randperm(n, generator=g)[:k].tolist()))
        cases += [(ids, "next-token", ()), (ids, "masked", masked)]
    return cases


def _describe_labels_case(input_ids, objective, masked_positions) -> str:
    where = f", masked_positions={masked_positions!r}" if objective == "masked" else ""
    return f"input_ids={input_ids.tolist()}, objective={objective!r}{where}"


def _labels_answer(result, where, input_ids, objective, masked_positions) -> torch.Tensor:
    labels = as_tensor(result, "a tensor of n labels, -100 where there is no loss")
    if tuple(labels.shape) != (len(input_ids),):
        raise CheckFailed(
            f"your labels have shape {tuple(labels.shape)} on {where}, not one label per "
            f"position, shape (n,) = {(len(input_ids),)}.",
            "return a 1-d tensor of n labels, with -100 where there is no loss.",
        )
    if labels.dtype != torch.long:
        kind = ("token ids and -100 are integers" if labels.is_floating_point()
                or labels.dtype == torch.bool else "cross_entropy rejects other integer types")
        raise CheckFailed(f"your labels have dtype {labels.dtype} on {where}, but cross_entropy "
                          f"wants its targets as torch.long ({kind}).",
                          "build them with dtype torch.long, e.g. torch.full_like(input_ids, "
                          "-100), or call .long().")
    return labels


def _another_fill(attempt) -> tuple[str, str] | None:
    """Right where there is a loss, but another number than -100 everywhere else."""
    pairs = list(zip(attempt.answers, attempt.references, strict=True))
    fills = {int(v) for out, ref in pairs for v in out[ref == IGNORE_INDEX].unique()}
    scored_right = all(torch.equal(out[ref != IGNORE_INDEX], ref[ref != IGNORE_INDEX])
                       for out, ref in pairs)
    if scored_right and len(fills) == 1 and fills != {IGNORE_INDEX}:
        return (
            f"your labels are right where there is a loss, but you mark the other positions "
            f"with {fills.pop()}: cross_entropy would score them against that as a token id; it "
            f"skips only the label {IGNORE_INDEX} (its ignore_index).",
            f"use {IGNORE_INDEX} where there is no loss.",
        )
    return None


def _first_wrong_label(attempt) -> str:
    first = attempt.first
    out, ref = attempt.answers[first], attempt.references[first]
    t = int((out != ref).nonzero()[0])
    return (
        f"your labels differ from the reference at position t={t} on {attempt.where(first)}: "
        f"yours {int(out[t])}, the reference {int(ref[t])} (-100 = no loss)."
    )


_LABELS = Exercise(
    title="objective labels",
    cases=_label_cases,
    arguments=lambda ids, objective, masked: (ids.clone(), objective, masked),
    answer=_labels_answer,
    reference=_labels_reference,
    describe=_describe_labels_case,
    notice=_another_fill,
    mistakes=_LABEL_MISTAKES,
    fallback=_first_wrong_label,
)


def _naming_tuple_indexing(fn: Callable) -> Callable:
    """``fn`` with an IndexError on a tuple of masked positions explained: ``ids[(4, 7)]``
    indexes one dimension per element, not the positions 4 and 7."""

    @functools.wraps(fn)
    def explained(input_ids, objective, masked_positions):
        try:
            return fn(input_ids, objective, masked_positions)
        except IndexError as error:
            if isinstance(masked_positions, tuple) and len(masked_positions) > 1:
                raise CheckFailed(
                    f"your function raised IndexError ({error}) with masked_positions="
                    f"{masked_positions!r}: indexing a tensor with a tuple takes one index per "
                    "dimension, so ids[(4, 7)] asks for row 4, column 7 of a 1-d tensor.",
                    "index with a list: where = list(masked_positions); labels[where] = "
                    "input_ids[where].",
                ) from None
            raise

    return explained


@checker
def check_objective_labels(fn: Callable) -> bool:
    """Check ``fn(input_ids, objective, masked_positions)`` returns each position's label (§2).

    (Lesson 1, §2.) ``objective`` is "next-token" (position t predicts x_{t+1}) or "masked"
    (a masked position predicts its own original token); a position without a loss gets -100.
    Changing ``input_ids`` in place fails.
    """
    require_callable(fn)
    return run(_LABELS, leaving_inputs(_naming_tuple_indexing(fn), ("input_ids",)))


# --- The cosine-similarity matrix (Lesson 1, §4) -------------------------------------------------


def _cosine_cases() -> list[tuple]:
    """(x,) cases of shape (m, d) with m != d, rows of very different lengths, some anti-aligned."""
    g = torch.Generator().manual_seed(1)
    cases = [
        torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.5, 0.0], [-6.0, -8.0, 0.0], [1.0, 0.0, 1.0]]),
    ]
    for m, d in ((5, 8), (3, 16), (7, 4), (2, 32)):
        lengths = torch.rand(m, 1, generator=g) * 9 + 0.5  # (m, 1): 0.5 to 9.5
        x = torch.randn(m, d, generator=g)
        cases.append(x / x.norm(dim=1, keepdim=True) * lengths)  # (m, d)
    cases.append(torch.randn(6, 10, generator=g) + 2.0)  # all in one orthant: cosines near 1
    return [(x,) for x in cases]


def _cos_unit_rows(x):
    return x / x.norm(dim=1, keepdim=True)


_COSINE_MISTAKES = [
    ("your matrix is x @ xᵀ, the raw dot products, which grow with the vectors' lengths.",
     "divide each row by its own length first, x / x.norm(dim=1, keepdim=True), then take x @ xᵀ.",
     lambda x: x @ x.T),
    ("you normalise over the wrong axis: x.norm(dim=0) is the length of each feature column, "
     "but cosine similarity divides each row (each vector) by its length.",
     "use x.norm(dim=1, keepdim=True).",
     lambda x: (x / x.norm(dim=0, keepdim=True)) @ (x / x.norm(dim=0, keepdim=True)).T),
    ("you normalise only one side of the product, so the diagonal is not 1.",
     "divide both factors' rows by their lengths.",
     lambda x: _cos_unit_rows(x) @ x.T),
    ("you divide by the norm of the whole matrix (x.norm() with no dim), one number for all rows, "
     "but each row needs its own length.",
     "use x.norm(dim=1, keepdim=True).",
     lambda x: (x @ x.T) / x.norm() ** 2),
    ("your function returns Euclidean distances (0 on the diagonal, larger = less alike); the "
     "task asks for cosine similarities (1 on the diagonal, larger = more alike).",
     "normalise the rows to length 1 and take x @ xᵀ.",
     lambda x: torch.cdist(x, x)),
    ("your function returns the cosine distance 1 - cos (0 on the diagonal), not the "
     "similarity cos (1 on the diagonal).",
     "return cos itself, without the 1 - .",
     lambda x: 1 - _cos_unit_rows(x) @ _cos_unit_rows(x).T),
    ("you divide entry (i, j) by |x_j|², one length squared, not by |x_i| |x_j|: "
     "x.norm(dim=1) * x.norm(dim=1) multiplies each length by itself, and the (m,) result "
     "broadcasts along the columns.",
     "divide by the outer product of the lengths, n[:, None] * n[None, :] with "
     "n = x.norm(dim=1), or normalise the rows first.",
     lambda x: (x @ x.T) / x.norm(dim=1) ** 2),
    ("you divide entry (i, j) by |x_i|², one length squared, not by |x_i| |x_j|: n * n with "
     "n = x.norm(dim=1, keepdim=True), of shape (m, 1), multiplies each length by itself.",
     "divide by the outer product of the lengths, n * n.T, or normalise the rows first.",
     lambda x: (x @ x.T) / x.norm(dim=1, keepdim=True) ** 2),
]


def _cosine_answer(result, where, x) -> torch.Tensor:
    m, d = x.shape
    matrix = as_tensor(result, "the (m, m) tensor of cosine similarities")
    if tuple(matrix.shape) == (d, d):
        raise CheckFailed(
            f"your matrix has shape {(d, d)} for x of shape {(m, d)}: one entry per pair of "
            f"features (columns), where (m, m) = {(m, m)} was expected.",
            "compare the vectors, which are the rows: x @ x.T, not x.T @ x.",
        )
    if tuple(matrix.shape) != (m, m):
        raise CheckFailed(
            f"your matrix has shape {tuple(matrix.shape)} for x of shape {(m, d)}; it should "
            f"be (m, m) = {(m, m)}, one entry per pair of rows."
        )
    return matrix.double()


_COSINE = Exercise(
    title="cosine similarity",
    cases=_cosine_cases,
    arguments=lambda x: (x.clone(),),
    answer=_cosine_answer,
    reference=lambda x: cosine_similarity_matrix(x.double()),
    describe=lambda x: f"x of shape {tuple(x.shape)}",
    same=close,
    mistakes=_COSINE_MISTAKES,
    mistake_inputs=lambda x: (x.double(),),
    fallback=lambda attempt: differs(
        attempt, "matrix", "cos(x_i, x_j) = x_i·x_j / (|x_i| |x_j|)",
        "compare it with encoderlab.lessons.l01_probes.cosine_similarity_matrix.",
    ),
)


@checker
def check_cosine_similarity(fn: Callable) -> bool:
    """Check ``fn(x)`` returns the (m, m) matrix of cos(x_i, x_j) of x's rows (Lesson 1, §4)."""
    return run(_COSINE, fn)


# --- Both objectives on a padded batch (Lesson 1, §2) ------------------------------------------

_PAD_ID, _CLS_ID, _SEP_ID = 0, 101, 102


def _batch_variant(input_ids, attention_mask, objective, chosen, mask_id, *, next_label="next_real",
                   corrupt=True, causal="objective", padding="keys", masked_labels="chosen"):
    """(inputs, labels, sees) of one objective on a right-padded batch, with one switch turned:
    each non-default switch is a known mistake. sees (b, n, n): query i may read key j."""
    b, n = input_ids.shape
    real = attention_mask.bool()  # (b, n)
    inputs = input_ids.clone()
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    if objective == "next-token":
        labels[:, :-1] = input_ids[:, 1:]  # position t is scored against x_{t+1} ...
        if next_label == "next_real":  # ... when x_{t+1} is a real token
            labels[:, :-1] = labels[:, :-1].masked_fill(~real[:, 1:], IGNORE_INDEX)
        elif next_label == "own_real":  # kept where t itself is real: the last one gets [PAD]
            labels = labels.masked_fill(~real, IGNORE_INDEX)
    else:
        labels[chosen] = input_ids[chosen]  # each chosen position predicts its own token
        if masked_labels == "after_corrupting":  # read from the input once [MASK] is in it
            labels[chosen] = mask_id
        if masked_labels == "every_real":  # a loss on every real position, chosen or not
            labels = input_ids.masked_fill(~real, IGNORE_INDEX)
        if corrupt:
            inputs[chosen] = mask_id  # ... which the input no longer shows
    is_causal = (objective == "next-token") if causal == "objective" else causal == "always"
    sees = torch.ones(b, n, n, dtype=torch.bool)
    if is_causal:
        sees = sees & torch.ones(n, n, dtype=torch.bool).tril()
    elif causal == "anti":  # the upper triangle: each query reads itself and the future
        sees = sees & torch.ones(n, n, dtype=torch.bool).triu()
    elif causal == "strict":  # below the diagonal only: a query may not read itself
        sees = sees & torch.ones(n, n, dtype=torch.bool).tril(-1)
    if padding == "keys":
        sees = sees & real[:, None, :]  # hide the [PAD] columns
    elif padding == "queries":
        sees = sees & real[:, :, None]  # hides rows: real tokens still read [PAD]
    elif padding == "both":  # rows and columns: [PAD] queries read nothing
        sees = sees & real[:, None, :] & real[:, :, None]
    return inputs, labels, sees


def _inverted(*case):
    """The reference's sees with True and False swapped: True = hidden, PyTorch's convention."""
    inputs, labels, sees = _batch_variant(*case)
    return inputs, labels, ~sees


def _for(objective: str, **switch):
    """A mistake made under one objective; under the other the answer is the reference."""
    def wrong(input_ids, attention_mask, obj, chosen, mask_id):
        return _batch_variant(input_ids, attention_mask, obj, chosen, mask_id,
                              **(switch if obj == objective else {}))
    return wrong


_BATCH_MISTAKES = [
    ("a position whose next token is [PAD] carries a loss: your next-token labels include [PAD] "
     "(the last real token and the padding predict it).",
     "keep labels[:, t] = input_ids[:, t + 1] only where attention_mask[:, t + 1] is 1, -100 "
     "elsewhere.",
     _for("next-token", next_label="all")),
    ("your last real token is scored against [PAD]: you kept the labels where the position itself "
     "is real, but what matters is whether the *next* token is real.",
     "keep the labels where attention_mask[:, 1:] is 1.",
     _for("next-token", next_label="own_real")),
    ("your masked inputs still show the chosen tokens, so each label is in view and the model "
     "only has to copy it.",
     "replace input_ids at the chosen positions by mask_id.",
     _for("masked", corrupt=False)),
    ("your masked-objective labels cover every real position, but only the chosen ones carry "
     "a loss: the others are in view, so predicting them is copying.",
     "keep input_ids at the chosen positions and -100 everywhere else.",
     _for("masked", masked_labels="every_real")),
    ("your masked-objective labels are mask_id: you read the labels after putting [MASK] into "
     "the input, so every chosen position is asked to predict [MASK] itself.",
     "take the labels from input_ids before you corrupt it (or from the untouched original).",
     _for("masked", masked_labels="after_corrupting")),
    ("your next-token visibility is bidirectional: position t reads x_{t+1}, its own label (the "
     "leak of §2).",
     "make the decoder's sees causal, key j <= query i, and hide the [PAD] keys.",
     _for("next-token", causal="never")),
    ("your masked-objective visibility is causal, but the encoder reads the whole corrupted "
     "sequence.",
     "let every query see every real key, before and after it (no causal mask).",
     _for("masked", causal="always")),
    ("your visibility hides [PAD] rows (queries) instead of [PAD] columns (keys), so real tokens "
     "still read the padding.",
     "use attention_mask[:, None, :], the key axis last.",
     lambda *case: _batch_variant(*case, padding="queries")),
    ("your next-token visibility is anti-causal (the upper triangle, torch.triu): query i "
     "reads itself and the keys j > i, the future, including its own label.",
     "keep the keys j <= i, the lower triangle (torch.tril), and hide the [PAD] keys.",
     _for("next-token", causal="anti")),
    ("your visibility hides the [PAD] queries (rows) as well as the [PAD] keys: a [PAD] row "
     "with every key hidden is a softmax over nothing but -inf, which is NaN, and the next layer "
     "spreads it to the real tokens (0 × NaN is NaN). Hide the keys only.",
     "hide the keys only: combine with attention_mask[:, None, :], not with the rows.",
     lambda *case: _batch_variant(*case, padding="both")),
    ("your sees is inverted: True where the query may *not* read the key. That is the "
     "convention of PyTorch's attn_mask and key_padding_mask (True = hidden); here True means "
     "query i may read key j.",
     "return the complement, ~sees, or build the table with True for the visible keys.",
     _inverted),
    ("your next-token visibility leaves out the diagonal (torch.tril(..., -1)): query t may "
     "read itself; only t + 1 and later, which hold its label and beyond, are hidden.",
     "keep the keys j <= i, diagonal included: torch.tril(torch.ones(n, n, dtype=torch.bool)).",
     _for("next-token", causal="strict")),
    ("your visibility ignores the attention_mask: real tokens read the [PAD] keys.",
     "hide every key j whose attention_mask is 0.",
     lambda *case: _batch_variant(*case, padding="none")),
]


def _batch_cases() -> list[tuple]:
    """(input_ids, attention_mask, objective, chosen, mask_id): right-padded batches, both
    objectives on each; distinct ids so that every shift shows."""
    g = torch.Generator().manual_seed(1)
    cases = []
    for lengths in [(6, 4), (5,), (7, 3, 5), (4, 8)]:
        b, n = len(lengths), max(lengths)
        ids = (torch.randperm(2000, generator=g)[: b * n] + 1000).view(b, n)
        attention_mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()
        ids[:, 0] = _CLS_ID
        ids[torch.arange(b), torch.tensor(lengths) - 1] = _SEP_ID
        ids[attention_mask == 0] = _PAD_ID
        words = attention_mask.bool() & (ids != _CLS_ID) & (ids != _SEP_ID)  # (b, n)
        chosen = words & (torch.rand(b, n, generator=g) < 0.4)
        for row in range(b):  # at least one chosen position per sentence
            if not chosen[row].any():
                chosen[row, 1] = True
        cases.append((ids, attention_mask, "next-token", torch.zeros_like(chosen), _MASK_ID))
        cases.append((ids, attention_mask, "masked", chosen, _MASK_ID))
    return cases


def _describe_batch(input_ids, attention_mask, objective, chosen, mask_id) -> str:
    text = f"objective={objective!r}, lengths {attention_mask.sum(dim=1).tolist()}"
    if objective == "masked":
        text += f", chosen positions {[row.nonzero().flatten().tolist() for row in chosen]}"
    return text


def _batch_answer(result, where, input_ids, attention_mask, objective, chosen, mask_id):
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise CheckFailed(f"your function returned {type(result).__name__}, not a triple.",
                          "return the triple (inputs, labels, sees).")
    b, n = input_ids.shape
    inputs = as_tensor(result[0], "inputs, a (b, n) tensor of token ids").cpu()
    labels = as_tensor(result[1], "labels, a (b, n) tensor, -100 where there is no loss").cpu()
    sees = as_tensor(result[2], "sees, a boolean (b, n, n) tensor").cpu()
    for name, t in (("inputs", inputs), ("labels", labels)):
        if tuple(t.shape) != (b, n):
            raise CheckFailed(f"your {name} have shape {tuple(t.shape)} on {where}; they must have "
                              f"the shape of input_ids, {(b, n)}.")
    for name, t in (("inputs", inputs), ("labels", labels)):
        if t.is_floating_point() or t.dtype == torch.bool:
            raise CheckFailed(f"your {name} have dtype {t.dtype}; token ids and -100 are "
                              "integers, and cross_entropy wants its targets as torch.long.",
                              "build them from input_ids (torch.long), e.g. with .clone() and "
                              "torch.full_like(input_ids, -100), or call .long().")
    if sees.dtype != torch.bool:
        raise CheckFailed(f"your sees has dtype {sees.dtype}, but it must be boolean, True = "
                          "query i may read key j.", "build it with dtype=torch.bool or .bool().")
    try:
        sees = sees.expand(b, n, n)
    except RuntimeError:
        raise CheckFailed(f"your sees has shape {tuple(sees.shape)} on {where}; it must be "
                          f"(b, n, n) = {(b, n, n)}: batch, query, key.",
                          "build sees without a head axis, one (n, n) table per sequence."
                          ) from None
    return inputs.long(), labels.long(), sees


def _same_triple(mine, right) -> bool:
    return all(torch.equal(a, r) for a, r in zip(mine, right, strict=True))


_BATCH_FIXES = {
    "inputs": "inputs are input_ids with mask_id at the chosen positions (masked objective), "
              "input_ids unchanged for next-token.",
    "labels": "next-token: labels[:, t] = input_ids[:, t + 1] where attention_mask[:, t + 1] "
              "is 1; masked: input_ids at the chosen positions; -100 everywhere else.",
    "sees": "sees[b, i, j] is True when key j is real (attention_mask 1) and, for next-token "
            "only, j <= i; a [PAD] query reads the real keys like any other query.",
}


def _token_name(value, mask_id, name: str) -> str:
    """A value in a message, with what it is when it is a special id: "0 ([PAD])"."""
    if name == "sees":
        return str(value)
    if value == mask_id:
        return f"{value} (mask_id, [MASK]: a label read after corrupting the input?)"
    if value == _PAD_ID:
        return f"{value} ([PAD]: a label that scores padding as a token)"
    return str(value)


def _batch_fallback(attempt) -> tuple[str, str]:
    k = attempt.first
    attention_mask = attempt.cases[k][1]
    for name, mine, right in zip(("inputs", "labels", "sees"), attempt.answers[k],
                                 attempt.references[k], strict=True):
        if not torch.equal(mine, right):
            index = tuple(int(x) for x in (mine != right).nonzero()[0])
            place = ("row {}, query {}, key {}" if name == "sees" else "row {}, position {}")
            where = place.format(*index)
            if name == "sees":  # say which of the two is [PAD]
                pads = [f"{role} {i} is [PAD]" for role, i in (("query", index[1]),
                                                               ("key", index[2]))
                        if attention_mask[index[0], i] == 0]
                where += f" ({', '.join(pads)})" if pads else ""
            yours, expected = mine[index].item(), right[index].item()
            return (f"your {name} differ from the reference on {attempt.where(k)}, first at "
                    f"{where}: yours {_token_name(yours, attempt.cases[k][4], name)}, expected "
                    f"{_token_name(expected, attempt.cases[k][4], name)}.", _BATCH_FIXES[name])
    return "your answer differs from the reference."


_BATCH = Exercise(
    title="both objectives on a padded batch",
    cases=_batch_cases,
    arguments=lambda ids, am, objective, chosen, mask_id: (
        ids.clone(), am.clone(), objective, chosen.clone(), mask_id),
    answer=_batch_answer,
    reference=_batch_variant,
    describe=_describe_batch,
    same=_same_triple,
    mistakes=_BATCH_MISTAKES,
    fallback=_batch_fallback,
)


@checker
def check_batch_objective(fn: Callable) -> bool:
    """Check ``fn(input_ids, attention_mask, objective, chosen, mask_id)`` returns ``(inputs,
    labels, sees)`` of the next-token or masked objective on a right-padded batch (Lesson 1, §2).
    Changing ``input_ids`` (or another argument) in place fails.
    """
    require_callable(fn)
    return run(_BATCH, leaving_inputs(fn, ("input_ids", "attention_mask", "objective", "chosen")))

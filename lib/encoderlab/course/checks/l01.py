"""Lesson 1's checkers: the labels of the two objectives (§2), both objectives on a padded batch
(§2) and which vectors move when tokens are appended (§5)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    as_tensor,
    checker,
    leaving_inputs,
    require_callable,
    run,
)
from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.masks import causal as causal_mask
from encoderlab.objectives import IGNORE_INDEX, objective_view

__all__ = ["check_objective_labels", "check_batch_objective", "check_prefix_fixed"]

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
    input_ids, objective, _ = attempt.cases[first]
    if objective == "next-token" and t == len(ref) - 1 and int(ref[t]) == IGNORE_INDEX:
        itself = " ([SEP] predicting itself)" if int(out[t]) == int(input_ids[-1]) else ""
        return (
            f"your last position has the label {int(out[t])}{itself} on {attempt.where(first)}, "
            f"but nothing follows the last token, so it has nothing to predict: its label must "
            f"be {IGNORE_INDEX} (no loss)."
        )
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


# --- Which vectors move when tokens are appended (Lesson 1, §5) ---------------------------------

_TOLERANCE = 1e-4  # a position moved when |after - before| > 1e-4 |before|
_MASKS = ("bidirectional", "causal")


def _final_rows(model, input_ids, new_ids, causal: bool):
    """(before, after): the final vectors of input_ids' positions, alone and with new_ids appended;
    each (n, d). ``causal`` puts masks.causal of each run's own length in every layer."""
    rows = []
    for ids in (input_ids, torch.cat([input_ids, new_ids])):
        mask = causal_mask(len(ids)) if causal else None
        with torch.no_grad():
            h = model(ids[None], mask=mask).last_hidden_state[0]  # (len(ids), d)
        rows.append(h[: len(input_ids)])  # the first n rows: the prefix
    return rows


def _moved(before, after) -> torch.Tensor:
    return (after - before).norm(dim=-1) > _TOLERANCE * before.norm(dim=-1)  # (n,)


def _prefix_reference(model, input_ids, new_ids, *, causal=("causal",), invert=False):
    """(2, n) bool, rows = masks (bidirectional, causal): True where a position moved. Each
    non-default switch is a known mistake."""
    answer = []
    for name in _MASKS:
        before, after = _final_rows(model, input_ids, new_ids, name in causal)
        answer.append(_moved(before, after))
    moved = torch.stack(answer)  # (2, n)
    return ~moved if invert else moved


_PREFIX_MISTAKES = [
    ("under the causal mask your function says that every position of the prefix moves, though "
     "position i reads only positions <= i. The causal mask did not reach one of your runs, or "
     "you compared the wrong rows (the last n of the longer run, or the new tokens put first).",
     "append new_ids at the end, run both lengths with masks.causal of their own length, and "
     "compare the first n rows, after[:n], with before.",
     lambda *case: _prefix_reference(*case, causal=())),
    ("your answer is the wrong way round: True should mark the positions whose vector moved, "
     "but yours marks the ones that stayed fixed (or the two entries are swapped).",
     "return moved = |after - before| > 1e-4 |before| under 'bidirectional' and 'causal'.",
     lambda *case: _prefix_reference(*case, invert=True)),
]


def _tiny_encoder(norm: str, seed: int):
    config = EncoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=16,
                           norm=norm, pooler=False)
    torch.manual_seed(seed)
    return EncoderModel(config).eval()


def _prefix_cases() -> list[tuple]:
    """(model, input_ids, new_ids): small random encoders, prefixes of 3-8 tokens, 1-4 appended."""
    g = torch.Generator().manual_seed(3)
    cases = []
    for seed, (norm, n, k) in enumerate([("post", 5, 1), ("post", 8, 3), ("pre", 3, 2),
                                         ("pre", 6, 4)]):
        ids = torch.randint(1, 50, (n + k,), generator=g)
        cases.append((_tiny_encoder(norm, seed), ids[:n], ids[n:]))
    return cases


def _describe_prefix(model, input_ids, new_ids) -> str:
    return f"{len(input_ids)} tokens, {len(new_ids)} appended"


def _prefix_answer(result, where, model, input_ids, new_ids) -> torch.Tensor:
    n = len(input_ids)
    if not isinstance(result, dict) or set(result) != set(_MASKS):
        shown = sorted(result) if isinstance(result, dict) else type(result).__name__
        raise CheckFailed(f"your function returned {shown}; it should return a dict with the keys "
                          "'bidirectional' and 'causal'.",
                          "return {'bidirectional': moved_b, 'causal': moved_c}, each (n,) bool.")
    rows = []
    for name in _MASKS:
        moved = as_tensor(result[name], f"{name}: a boolean (n,) tensor, True = moved").cpu()
        if moved.dtype != torch.bool or tuple(moved.shape) != (n,):
            raise CheckFailed(
                f"your {name!r} entry has dtype {moved.dtype} and shape {tuple(moved.shape)} on "
                f"{where}; it must be boolean with one entry per position of input_ids, {(n,)}.",
                "compare the first n rows only, and return the comparison itself (a bool tensor).")
        rows.append(moved)
    return torch.stack(rows)  # (2, n)


def _prefix_fallback(attempt) -> tuple[str, str]:
    k = attempt.first
    mine, right = attempt.answers[k], attempt.references[k]
    mask, position = (int(x) for x in (mine != right).nonzero()[0])
    yours, expected = ("moved" if bool(t[mask, position]) else "fixed" for t in (mine, right))
    if yours == "moved":  # the true change is within the tolerance: is it rounding?
        before, after = _final_rows(*attempt.cases[k], causal=_MASKS[mask] == "causal")
        change = float((after[position] - before[position]).norm() / before[position].norm())
        if change > 0:
            return (f"on {attempt.where(k)}, under the {_MASKS[mask]} mask, position "
                    f"{position}: yours says moved, but its vector changed by only {change:.0e} "
                    "of its length: floating-point rounding (the longer run adds its numbers up "
                    "in another order), not a real move. Exact equality is too strict.",
                    "compare with the tolerance: moved when |after - before| > 1e-4 |before|.")
    return (f"on {attempt.where(k)}, under the {_MASKS[mask]} mask, position {position}: yours "
            f"says {yours}, expected {expected}.",
            "run the model on input_ids and on input_ids + new_ids under each mask and compare the "
            "first n rows: moved when |after - before| > 1e-4 |before| (not exact equality).")


_PREFIX = Exercise(
    title="what appending moves",
    cases=_prefix_cases,
    arguments=lambda model, ids, new: (model, ids.clone(), new.clone()),
    answer=_prefix_answer,
    reference=_prefix_reference,
    describe=_describe_prefix,
    mistakes=_PREFIX_MISTAKES,
    fallback=_prefix_fallback,
)


@checker
def check_prefix_fixed(fn: Callable) -> bool:
    """Check ``fn(model, input_ids, new_ids)`` returns ``{"bidirectional": moved, "causal":
    moved}``: which positions of ``input_ids`` get a different final vector once ``new_ids`` are
    appended, under each mask (Lesson 1, §5). Under the causal mask none may move.
    """
    require_callable(fn)
    return run(_PREFIX, leaving_inputs(fn, ("model", "input_ids", "new_ids")))

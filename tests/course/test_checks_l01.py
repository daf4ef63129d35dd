"""Lesson 1's checkers: check_objective_labels, check_batch_objective and
check_prefix_fixed."""

import re

import pytest
import torch

from encoderlab.course.checks import (
    CheckFailed,
    check_batch_objective,
    check_objective_labels,
    check_prefix_fixed,
)

# --- checks.check_objective_labels -------------------------------------------------------------


def labels_reference(input_ids, objective, masked_positions):
    labels = torch.full_like(input_ids, -100)
    if objective == "next-token":
        labels[:-1] = input_ids[1:]
    else:
        where = list(masked_positions)
        labels[where] = input_ids[where]
    return labels


def labels_as_list(input_ids, objective, masked_positions):
    return labels_reference(input_ids, objective, masked_positions).tolist()


@pytest.mark.parametrize("fn", [labels_reference, labels_as_list])
def test_labels_checker_accepts_correct_answers(fn, capsys):
    assert check_objective_labels(fn)
    assert "✓ objective labels" in capsys.readouterr().out


def _next_token_only(wrong):
    def fn(input_ids, objective, masked_positions):
        if objective == "next-token":
            return wrong(input_ids)
        return labels_reference(input_ids, objective, masked_positions)
    return fn


def _masked_only(wrong):
    def fn(input_ids, objective, masked_positions):
        if objective == "masked":
            return wrong(input_ids, list(masked_positions))
        return labels_reference(input_ids, objective, masked_positions)
    return fn


def _own_token_from_1(ids):
    out = ids.clone()
    out[0] = -100
    return out


def _previous_token(ids):
    out = torch.full_like(ids, -100)
    out[1:] = ids[:-1]
    return out


def _unmasked_positions(ids, masked):
    out = ids.clone()
    out[masked] = -100
    return out


def _masked_next(ids, masked):
    out = torch.full_like(ids, -100)
    for p in masked:
        if p + 1 < len(ids):
            out[p] = ids[p + 1]
    return out


def _zero_fill(input_ids, objective, masked_positions):
    labels = labels_reference(input_ids, objective, masked_positions)
    return labels.masked_fill(labels == -100, 0)


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_next_token_only(lambda ids: ids.clone()), "labels are the inputs themselves"),
        (_next_token_only(_own_token_from_1), "shift inside the loss"),
        (_next_token_only(_previous_token), "shifted the wrong way"),
        (_next_token_only(lambda ids: torch.roll(ids, -1)), "torch.roll wraps around"),
        (_masked_only(lambda ids, masked: ids.clone()), "cover every position"),
        (_masked_only(_unmasked_positions), "NOT masked"),
        (_masked_only(_masked_next), "shifted by one"),
        (_zero_fill, "mark the other positions with 0"),
        (lambda ids, objective, masked: ids[:-1], r"shape \(n,\)"),
        (lambda ids, objective, masked: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_labels_checker_names_the_mistake(fn, message, both_passes):
    assert re.search(message, str(both_passes(check_objective_labels, fn)))


# --- checks.check_batch_objective: a learner's version, written out ---------------------------


def batch_objective(input_ids, attention_mask, objective, chosen, mask_id, *, pad_labels=False,
                    own_real=False, corrupt=True, causal=None, rows=False, padding=True,
                    anti=False, rows_too=False, every_real=False):
    """(inputs, labels, sees) of one objective on a padded batch; each keyword is one slip."""
    b, n = input_ids.shape
    real = attention_mask.bool()
    inputs, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    if objective == "next-token":
        labels[:, :-1] = input_ids[:, 1:]
        if own_real:
            labels[~real] = -100
        elif not pad_labels:
            labels[:, :-1][~real[:, 1:]] = -100
    else:
        labels[chosen] = input_ids[chosen]
        if every_real:
            labels = input_ids.masked_fill(~real, -100)
        if corrupt:
            inputs[chosen] = mask_id
    is_causal = objective == "next-token" if causal is None else causal
    sees = torch.ones(b, n, n, dtype=torch.bool)
    if is_causal:
        sees = sees.triu() if anti else sees.tril()
    if padding:
        sees = sees & (real[:, :, None] if rows else real[:, None, :])
    if rows_too:
        sees = sees & real[:, :, None]
    return inputs, labels, sees


def test_check_batch_objective_accepts_the_reference(capsys):
    assert check_batch_objective(batch_objective) is True
    assert "correct on 8 cases" in capsys.readouterr().out

    def broadcast_sees(*case):  # sees of shape (b, 1, n) for the masked objective is fine
        inputs, labels, sees = batch_objective(*case)
        return inputs, labels, sees if case[2] == "next-token" else case[1].bool()[:, None, :]

    assert check_batch_objective(broadcast_sees)


def _only(objective, **slip):
    def wrong(input_ids, attention_mask, obj, chosen, mask_id):
        return batch_objective(input_ids, attention_mask, obj, chosen, mask_id,
                               **(slip if obj == objective else {}))
    return wrong


@pytest.mark.parametrize(
    "wrong, words",
    [
        (_only("next-token", pad_labels=True), r"^a position whose next token is \[PAD\]"),
        (_only("next-token", own_real=True), r"^your last real token is scored against \[PAD\]"),
        (_only("masked", corrupt=False), r"^your masked inputs still show the chosen tokens"),
        (_only("next-token", causal=False), r"^your next-token visibility is bidirectional"),
        (_only("masked", causal=True), r"^your masked-objective visibility is causal"),
        (lambda *case: batch_objective(*case, rows=True), r"^your visibility hides \[PAD\] rows"),
        (lambda *case: batch_objective(*case, padding=False),
         r"^your visibility ignores the attention_mask"),
        (_only("next-token", anti=True), r"^your next-token visibility is anti-causal"),
        (lambda *case: batch_objective(*case, rows_too=True),
         r"^your visibility hides the \[PAD\] queries \(rows\) as well as the \[PAD\] keys"),
        (_only("masked", every_real=True), r"^your masked-objective labels cover every real"),
    ],
)
def test_check_batch_objective_names_the_mistake(wrong, words, both_passes):
    failure = both_passes(check_batch_objective, wrong)
    assert re.search(words, str(failure)) and failure.fix


def test_check_batch_objective_refuses_changing_input_ids(both_passes):
    def corrupting_in_place(input_ids, attention_mask, objective, chosen, mask_id):
        inputs, labels, sees = batch_objective(input_ids, attention_mask, objective, chosen,
                                               mask_id)
        input_ids[chosen] = mask_id  # the right values, written into the caller's tensor
        return input_ids, labels, sees

    failure = both_passes(check_batch_objective, corrupting_in_place)
    assert str(failure).startswith("your function changed input_ids in place.")


def _inverted_sees(*case):  # PyTorch's attn_mask convention: True = hidden
    inputs, labels, sees = batch_objective(*case)
    return inputs, labels, ~sees


def _strictly_lower(*case):  # "a position must not see itself"
    inputs, labels, sees = batch_objective(*case)
    if case[2] == "next-token":
        n = sees.shape[-1]
        sees = sees & torch.ones(n, n, dtype=torch.bool).tril(-1)
    return inputs, labels, sees


def test_check_batch_objective_names_the_mask_conventions(both_passes):
    inverted = both_passes(check_batch_objective, _inverted_sees)
    assert str(inverted).startswith("your sees is inverted: True where the query may *not*")
    strict = both_passes(check_batch_objective, _strictly_lower)
    assert str(strict).startswith("your next-token visibility leaves out the diagonal")
    assert inverted.fix != strict.fix


def test_check_batch_objective_refuses_float_labels(both_passes):
    def float_labels(*case):
        inputs, labels, sees = batch_objective(*case)
        return inputs, labels.float(), sees

    failure = both_passes(check_batch_objective, float_labels)
    assert failure.diagnosis.startswith("your labels have dtype torch.float32") and failure.fix


def test_labels_checker_refuses_float_labels(both_passes):
    def float_labels(input_ids, objective, masked_positions):
        return labels_reference(input_ids, objective, masked_positions).float()

    failure = both_passes(check_objective_labels, float_labels)
    assert failure.diagnosis.startswith("your labels have dtype torch.float32") and failure.fix


def test_check_batch_objective_shapes_and_fallback():
    def two_things(*case):
        return batch_objective(*case)[:2]

    def int_sees(*case):
        inputs, labels, sees = batch_objective(*case)
        return inputs, labels, sees.long()

    def one_label_off(*case):
        inputs, labels, sees = batch_objective(*case)
        labels = labels.clone()
        labels[0, 0] = 7  # [CLS] never carries a loss here
        return inputs, labels, sees

    with pytest.raises(CheckFailed, match=r"return the triple \(inputs, labels, sees\)"):
        check_batch_objective(two_things, hint=True)
    with pytest.raises(CheckFailed, match=r"^your sees has dtype torch.int64"):
        check_batch_objective(int_sees)
    with pytest.raises(CheckFailed, match=r"^your labels differ from the reference on .* first at "
                                          r"row 0, position 0: yours 7"):
        check_batch_objective(one_label_off)

    def pad_rows_see_everything(*case):  # no named mistake: the message says who is [PAD]
        inputs, labels, sees = batch_objective(*case)
        return inputs, labels, sees | ~case[1].bool()[:, :, None]

    with pytest.raises(CheckFailed, match=r"first at row 1, query (\d+), key \1 \(query \1 is "
                                          r"\[PAD\], key \1 is \[PAD\]\): yours True, expected "
                                          r"False\.\nFix: sees\[b, i, j\]"):
        check_batch_objective(pad_rows_see_everything, hint=True)


# --- the diagnoses added after learners' wrong answers ------------------------------------------


def test_labels_checker_names_tuple_indexing(both_passes):
    def tuple_index(input_ids, objective, masked_positions):
        labels = torch.full_like(input_ids, -100)
        if objective == "next-token":
            labels[:-1] = input_ids[1:]
        else:
            labels[masked_positions] = input_ids[masked_positions]  # a tuple: one index per dim
        return labels

    failure = both_passes(check_objective_labels, tuple_index)
    assert "masked_positions=(4, 7)" in str(failure)
    assert "one index per dimension" in str(failure) and "list(masked_positions)" in failure.fix


def test_labels_checker_refuses_int32_labels(both_passes):
    def int32_labels(input_ids, objective, masked_positions):
        return labels_reference(input_ids, objective, masked_positions).to(torch.int32)

    failure = both_passes(check_objective_labels, int32_labels)
    assert failure.diagnosis.startswith("your labels have dtype torch.int32")
    assert "torch.long" in failure.diagnosis


def test_labels_checker_refuses_changing_input_ids(both_passes):
    def aliasing(input_ids, objective, masked_positions):
        right = labels_reference(input_ids, objective, masked_positions)
        labels = input_ids  # no copy: the writes below land in the caller's ids
        labels[:] = right
        return labels

    failure = both_passes(check_objective_labels, aliasing)
    assert str(failure).startswith("your function changed input_ids in place.")


def test_check_batch_objective_names_labels_read_after_corrupting(both_passes):
    def labels_after_corrupting(input_ids, attention_mask, objective, chosen, mask_id):
        inputs, labels, sees = batch_objective(input_ids, attention_mask, objective, chosen,
                                               mask_id)
        if objective == "masked":
            labels = torch.full_like(input_ids, -100)
            labels[chosen] = inputs[chosen]  # inputs already hold [MASK] there
        return inputs, labels, sees

    failure = both_passes(check_batch_objective, labels_after_corrupting)
    assert str(failure).startswith("your masked-objective labels are mask_id")


def test_check_batch_objective_names_pad_and_mask_ids_in_the_fallback():
    def pad_label_at_the_end(*case):  # the last real token scored against [PAD], in one row only
        inputs, labels, sees = batch_objective(*case)
        labels = labels.clone()
        if case[2] == "next-token":
            lengths = case[1].sum(dim=1)
            for row in (lengths < case[1].shape[1]).nonzero().flatten().tolist():  # padded rows
                labels[row, int(lengths[row]) - 1] = 0  # and one [PAD] labelled with 7:
                labels[row, int(lengths[row])] = 7  # no named mistake fits both
        return inputs, labels, sees

    with pytest.raises(CheckFailed, match=r"yours 0 \(\[PAD\]"):
        check_batch_objective(pad_label_at_the_end)

    def one_mask_label(*case):
        inputs, labels, sees = batch_objective(*case)
        labels = labels.clone()
        if case[2] == "masked":
            where = case[3].nonzero()[0]
            labels[where[0], where[1]] = case[4]  # one label is mask_id
        return inputs, labels, sees

    with pytest.raises(CheckFailed, match=r"yours 103 \(mask_id"):
        check_batch_objective(one_mask_label)


def test_check_batch_objective_gives_the_nan_reason(both_passes):
    failure = both_passes(check_batch_objective,
                          lambda *case: batch_objective(*case, rows_too=True))
    assert "NaN" in str(failure)


# --- checks.check_prefix_fixed ------------------------------------------------------------------


def _hand_causal(n):
    return torch.ones(n, n).tril().bool()  # True = may attend: key j <= query i


def prefix_reference(model, input_ids, new_ids):
    """Written independently: one run per length and mask, rows compared with allclose."""
    n = len(input_ids)
    both = torch.cat([input_ids, new_ids])
    out = {}
    for name, mask_of in (("bidirectional", lambda m: None), ("causal", _hand_causal)):
        with torch.no_grad():
            short = model(input_ids.unsqueeze(0), mask=mask_of(n)).last_hidden_state[0]
            long = model(both.unsqueeze(0), mask=mask_of(len(both))).last_hidden_state[0]
        out[name] = torch.tensor([not torch.allclose(long[i], short[i], rtol=0, atol=1e-4 *
                                                     float(short[i].norm())) for i in range(n)])
    return out


def test_prefix_checker_accepts_an_independent_answer(capsys):
    assert check_prefix_fixed(prefix_reference)
    assert "✓ what appending moves" in capsys.readouterr().out


def test_prefix_checker_cases_show_both_behaviours():
    """On every case of the checker: under the causal mask no prefix vector moves, without it
    every one does (the expectation of Lesson 1, §5, not the checker's own code)."""
    from encoderlab.course.checks.l01 import _prefix_cases

    for model, ids, new in _prefix_cases():
        moved = prefix_reference(model, ids, new)
        assert not moved["causal"].any() and moved["bidirectional"].all()


def _no_causal(model, input_ids, new_ids):
    moved = prefix_reference(model, input_ids, new_ids)
    return {"bidirectional": moved["bidirectional"], "causal": moved["bidirectional"]}


def _mask_on_short_run_only(model, input_ids, new_ids):
    n = len(input_ids)
    out = {}
    for name in ("bidirectional", "causal"):
        mask = _hand_causal(n) if name == "causal" else None
        with torch.no_grad():
            before = model(input_ids[None], mask=mask).last_hidden_state[0]
            after = model(torch.cat([input_ids, new_ids])[None]).last_hidden_state[0, :n]
        out[name] = (after - before).norm(dim=-1) > 1e-4 * before.norm(dim=-1)
    return out


def _last_rows(model, input_ids, new_ids):
    n, both = len(input_ids), torch.cat([input_ids, new_ids])
    out = {}
    for name in ("bidirectional", "causal"):
        with torch.no_grad():
            before = model(input_ids[None], mask=_hand_causal(n) if name == "causal"
                           else None).last_hidden_state[0]
            after = model(both[None], mask=_hand_causal(len(both)) if name == "causal"
                          else None).last_hidden_state[0, -n:]
        out[name] = (after - before).norm(dim=-1) > 1e-4 * before.norm(dim=-1)
    return out


def _fixed_not_moved(model, input_ids, new_ids):
    return {k: ~v for k, v in prefix_reference(model, input_ids, new_ids).items()}


def _swapped(model, input_ids, new_ids):
    moved = prefix_reference(model, input_ids, new_ids)
    return {"bidirectional": moved["causal"], "causal": moved["bidirectional"]}


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_no_causal, "causal mask did not reach one of your runs"),
        (_mask_on_short_run_only, "causal mask did not reach one of your runs"),
        (_last_rows, r"the last n of the longer run"),
        (_fixed_not_moved, "wrong way round"),
        (_swapped, "wrong way round"),
        (lambda m, i, n: tuple(prefix_reference(m, i, n).values()), "dict with the keys"),
        (lambda m, i, n: {k: v.float() for k, v in prefix_reference(m, i, n).items()},
         "must be boolean"),
        (lambda m, i, n: {k: torch.cat([v, v[:1]]) for k, v in
                          prefix_reference(m, i, n).items()}, r"one entry per position"),
        (lambda m, i, n: {"bidirectional": prefix_reference(m, i, n)["bidirectional"],
                          "causal": torch.arange(len(i)) == 0},
         "under the causal mask, position 0"),
    ],
)
def test_prefix_checker_names_the_mistake(fn, message, both_passes):
    assert re.search(message, str(both_passes(check_prefix_fixed, fn)))


def test_prefix_checker_refuses_changing_input_ids(both_passes):
    def appends_in_place(model, input_ids, new_ids):
        moved = prefix_reference(model, input_ids, new_ids)
        input_ids.zero_()
        return moved

    assert "input_ids" in str(both_passes(check_prefix_fixed, appends_in_place))


# --- the fallbacks name the cause ---------------------------------------------------------------


def test_labels_fallback_says_nothing_follows_the_last_token(both_passes):
    def sep_predicts_itself(input_ids, objective, masked_positions):
        labels = torch.full_like(input_ids, -100)
        if objective == "next-token":
            labels[:-1] = input_ids[1:]
            labels[-1] = input_ids[-1]  # the slip: [SEP] scored against itself
        else:
            labels[list(masked_positions)] = input_ids[list(masked_positions)]
        return labels

    message = str(both_passes(check_objective_labels, sep_predicts_itself))
    assert "nothing follows the last token" in message
    assert "[SEP] predicting itself" in message


def test_prefix_fallback_names_rounding_for_exact_equality(both_passes):
    def exact_equality(model, input_ids, new_ids):
        n, both = len(input_ids), torch.cat([input_ids, new_ids])
        out = {}
        for name in ("bidirectional", "causal"):
            rows = []
            for ids in (input_ids, both):
                mask = _hand_causal(len(ids)) if name == "causal" else None
                with torch.no_grad():
                    rows.append(model(ids[None], mask=mask).last_hidden_state[0, :n])
            out[name] = (rows[1] != rows[0]).any(dim=-1)  # the slip: no tolerance
        return out

    message = str(both_passes(check_prefix_fixed, exact_equality))
    assert "floating-point rounding" in message and "Exact equality is too strict" in message

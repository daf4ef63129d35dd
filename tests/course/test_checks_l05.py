"""Lesson 5's checkers: check_mlm_corrupt, check_masked_loss and check_fill_mask."""

import re

import pytest
import torch
from torch.nn import functional as F

from encoderlab.course.checks import (
    CheckFailed,
    check_fill_mask,
    check_masked_loss,
    check_mlm_corrupt,
)
from encoderlab.objectives import mlm_corrupt, mlm_loss

# --- checkers ------------------------------------------------------------------------------------


def reference_corrupt(ids, mask, special_ids, vocab_size, mask_id, generator):
    return mlm_corrupt(ids, mask, special_ids, vocab_size, generator=generator, mask_id=mask_id)


def test_check_mlm_corrupt_accepts_the_reference(capsys):
    assert check_mlm_corrupt(reference_corrupt)
    assert "80 / 10 / 10 within 5 standard errors" in capsys.readouterr().out


def _variant(choose_p=0.15, split=(0.8, 0.9), allow_specials=False, allow_padding=False,
             label_mode="original", random_from_all=False, seeded=True, in_place=False,
             ignore=-100, random_from="ordinary", random_share_of_rest=None, overlap=False):
    def fn(ids, mask, special_ids, vocab_size, mask_id, generator):
        g = generator if seeded else None
        x = ids if in_place else ids.clone()
        eligible = mask.bool()
        if not allow_padding:
            eligible = eligible & True
        if not allow_specials:
            eligible = eligible & ~torch.isin(ids, torch.tensor(list(special_ids)))
        if allow_padding:
            eligible = torch.ones_like(eligible)
        chosen = eligible & (torch.rand(ids.shape, generator=g) < choose_p)
        roll = torch.rand(ids.shape, generator=g)
        ordinary = torch.tensor([i for i in range(vocab_size) if i not in special_ids])
        if random_from_all:
            rand = torch.randint(0, vocab_size, ids.shape, generator=g)
        elif random_from == "after_count":  # assumes the specials are 0..len - 1
            rand = torch.randint(len(special_ids), vocab_size, ids.shape, generator=g)
        elif random_from == "after_max":  # assumes the specials come first
            rand = torch.randint(max(special_ids) + 1, vocab_size, ids.shape, generator=g)
        else:
            rand = ordinary[torch.randint(len(ordinary), ids.shape, generator=g)]
        original = ids.clone()
        masked = chosen & (roll < split[0])
        if random_share_of_rest is not None:  # a second draw among the positions left over
            r = chosen & ~masked & (torch.rand(ids.shape, generator=g) < random_share_of_rest)
        elif overlap:  # a second, independent draw that may land on a [MASK]
            r = chosen & (torch.rand(ids.shape, generator=g) < 0.1)
        else:
            r = chosen & (roll >= split[0]) & (roll < split[1])
        x[masked] = mask_id
        x[r] = rand[r]
        source = {"original": original, "corrupted": x}[label_mode]
        labels = source.masked_fill(~chosen, ignore)
        return x, labels
    return fn


@pytest.mark.parametrize(
    "wrong, message",
    [
        (_variant(split=(1.0, 1.0)), "you replace every chosen token with \\[MASK\\]"),
        (_variant(split=(0.8, 0.8)), "you never put in a random token"),
        (_variant(split=(0.8, 1.0)), "you never leave a chosen token unchanged"),
        (_variant(split=(0.6, 0.8)), "BERT's split is 80 / 10 / 10\\.\\n"),
        (_variant(choose_p=0.3), r"you chose 29\.\d% of the 12,590 eligible"),
        (_variant(allow_specials=True), "you chose special tokens"),
        (_variant(allow_padding=True), "you chose padding positions"),
        (_variant(label_mode="corrupted"), "your labels hold the corrupted input"),
        (_variant(ignore=0), "with 0, but 0 is a real token id"),
        (_variant(random_from_all=True), "random replacements are special tokens"),
        (_variant(seeded=False), "seeded alike gave different results"),
        (_variant(in_place=True), "changed input_ids in place"),
        (_variant(random_from="after_count"),
         r"special ids are \(0, 100, 101, 102, 103\).*randint\(len\(special_ids\), vocab_size\)"),
        (_variant(random_from="after_max"),
         r"lies below 103.*randint\(max\(special_ids\) \+ 1, vocab_size\)"),
        (_variant(random_share_of_rest=0.1), r"too few random tokens\. A random token is 10 % of "
                                             r"all chosen positions, i\.e\. half of the non-"),
        (_variant(overlap=True), r"too few \[MASK\]s\. Your \[MASK\] and random-token draws"),
        (lambda *a: reference_corrupt(*a)[0], "not a pair"),
        (lambda ids, *a: (ids.clone(), ids.clone()), "not chosen carries no loss"),
    ],
)
def test_check_mlm_corrupt_names_the_mistake(wrong, message, both_passes):
    assert re.search(message, str(both_passes(check_mlm_corrupt, wrong)))


def test_check_mlm_corrupt_wants_random_positions():
    def fixed(ids, mask, special_ids, vocab_size, mask_id, generator):
        g = torch.Generator().manual_seed(0)  # ignores the generator it was given
        return reference_corrupt(ids, mask, special_ids, vocab_size, mask_id, g)

    with pytest.raises(CheckFailed, match="different seeds gave the same choice"):
        check_mlm_corrupt(fixed)


def test_check_masked_loss_accepts_the_reference_and_a_hand_version(capsys):
    assert check_masked_loss(mlm_loss)

    def by_hand(logits, labels):
        chosen = labels != -100
        if not chosen.any():
            return logits.sum() * 0.0
        logp = torch.log_softmax(logits[chosen], dim=-1)
        return -logp.gather(1, labels[chosen][:, None]).mean()

    assert check_masked_loss(by_hand)
    assert "correct on 6 cases" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100),
         "NaN"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="sum") / lb.numel(), "all b \\* n positions"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="sum"), "sum the losses .* instead of averaging"),
        (lambda lg, lb: -mlm_loss(lg, lb), "wrong sign"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="none"), "not one number"),
        (lambda lg, lb: mlm_loss(lg, lb) * 2, "mean cross-entropy over the chosen positions is"),
    ],
)
def test_check_masked_loss_names_the_mistake(wrong, message, both_passes):
    assert re.search(message, str(both_passes(check_masked_loss, wrong)))


def test_check_masked_loss_wants_a_zero_with_a_graph(both_passes):
    def zero_without_graph(logits, labels):  # right numbers, but backward() fails when empty
        chosen = labels != -100
        if not chosen.any():
            return torch.tensor(0.0)
        return mlm_loss(logits, labels)

    message = str(both_passes(check_masked_loss, zero_without_graph))
    assert re.search(r"not connected to the logits .*backward\(\) would raise", message)


def test_check_mlm_corrupt_reads_padding_from_the_mask_not_the_ids(both_passes):
    def ignores_the_mask(ids, mask, special_ids, vocab_size, mask_id, generator):
        return reference_corrupt(ids, torch.ones_like(mask), special_ids, vocab_size, mask_id,
                                 generator)  # padding is [PAD] in some rows only

    message = str(both_passes(check_mlm_corrupt, ignores_the_mask))
    assert re.search(r"you chose padding positions \(attention_mask 0; in half the rows", message)


def test_check_masked_loss_names_the_class_axis_of_cross_entropy(both_passes):
    def unflattened(logits, labels):  # (b, n, V) straight into cross_entropy: V must be dim 1
        return F.cross_entropy(logits, labels, ignore_index=-100)

    failure = both_passes(check_masked_loss, unflattened)
    assert re.search(r"^cross_entropy raised on logits of shape \(2, 5, 7\)", str(failure))
    assert "dimension 1 as the classes" in str(failure)
    assert "flatten(0, 1)" in failure.fix and "transpose(1, 2)" in failure.fix


@pytest.mark.parametrize("selected_first", [False, True])
def test_check_masked_loss_names_log_softmax_over_the_wrong_axis(selected_first, both_passes):
    def wrong_axis(logits, labels):
        chosen = labels != -100
        if not chosen.any():
            return logits.sum() * 0.0
        if selected_first:  # (m, V), normalised over the m chosen positions
            log_p = torch.log_softmax(logits[chosen], dim=0)
        else:  # (b, n, V), normalised over the sequences
            log_p = torch.log_softmax(logits, dim=0)[chosen]
        return -log_p.gather(1, labels[chosen][:, None]).mean()

    failure = both_passes(check_masked_loss, wrong_axis)
    assert re.search(r"^your log_softmax normalises over the wrong axis", str(failure))
    assert "dim=-1" in failure.fix


def test_check_masked_loss_names_log_softmax_over_the_positions(both_passes):
    def over_positions(logits, labels):  # (b, n, V) normalised over dim=1, the n positions
        chosen = labels != -100
        if not chosen.any():
            return logits.sum() * 0.0
        log_p = torch.log_softmax(logits, dim=1)[chosen]
        return -log_p.gather(1, labels[chosen][:, None]).mean()

    failure = both_passes(check_masked_loss, over_positions)
    assert re.search(r"^your log_softmax normalises over dim=1, the n positions", str(failure))
    assert "dim=-1" in failure.fix


def test_check_masked_loss_names_the_per_sequence_mean():
    def per_row(logits, labels):
        rows = [mlm_loss(lg[None], lb[None]) for lg, lb in zip(logits, labels, strict=True)
                if (lb != -100).any()]
        return torch.stack(rows).mean() if rows else logits.sum() * 0.0

    with pytest.raises(CheckFailed, match="average each sequence's loss"):
        check_masked_loss(per_row)


# --- check_fill_mask: a learner's filler, written out ------------------------------------------


def fill_mask(model, input_ids, attention_mask, mask_id, special_ids, k, *, exclude=True,
              after=False, shift=0, pass_mask=True, softmax=True, log=False,
              only_mask_excluded=False, per_mask=False, column_major=False, least_first=False,
              shuffled=False, write_back=False):
    """A learner's batched fill-mask; each keyword is one slip."""
    rows, positions = (input_ids == mask_id).nonzero(as_tuple=True)  # row-major
    if column_major:
        positions, rows = (input_ids.T == mask_id).nonzero(as_tuple=True)
    with torch.no_grad():
        if per_mask:  # one forward pass per [MASK]
            logits = torch.stack([model(input_ids, attention_mask)[r] for r in rows.tolist()])
            rows = torch.arange(len(rows))
        else:
            logits = model(input_ids, attention_mask) if pass_mask else model(input_ids)
    scores = logits[rows, positions + shift].clone()  # (m, V)
    if only_mask_excluded:
        scores[:, mask_id] = float("-inf")
    elif exclude and not after:
        scores[:, special_ids] = float("-inf")
    probs = torch.softmax(scores, dim=-1) if softmax else scores
    if log:
        probs = torch.log_softmax(scores, dim=-1)
    if after:
        probs[:, special_ids] = 0.0
    top = probs.topk(k, dim=-1)
    if write_back:
        input_ids[rows, positions] = top.indices[:, 0]
    if least_first:
        return top.indices.flip(-1), top.values.flip(-1)
    if shuffled:  # the first two guesses swapped
        order = torch.tensor([1, 0, *range(2, k)])
        return top.indices[:, order], top.values[:, order]
    return top.indices, top.values


def test_check_fill_mask_accepts_the_reference(capsys):
    assert check_fill_mask(fill_mask) is True
    assert "correct on 5 cases" in capsys.readouterr().out

    def as_lists(*args):  # plain lists are accepted too
        ids, probs = fill_mask(*args)
        return ids.tolist(), probs.tolist()

    assert check_fill_mask(as_lists)


@pytest.mark.parametrize(
    "slip, words",
    [
        ({"exclude": False}, r"^your guesses include the special id\(s\) \[0, 1, 2, 3\]"),
        ({"only_mask_excluded": True}, r"^your guesses include the special id\(s\) \[0, 1, 2, 3\]"),
        ({"per_mask": True}, r"^your function ran the model 2 times on one batch"),
        ({"column_major": True}, r"^your rows are the right guesses for the \[MASK\]s, but in "),
        ({"least_first": True}, r"^your guesses are the right ones but least probable first"),
        ({"shuffled": True}, r"^your guesses are the right ones in another order"),
        ({"write_back": True}, r"^your function changed input_ids in place"),
        ({"after": True}, r"^your probabilities do not sum to 1 over the ordinary tokens"),
        ({"shift": -1}, r"^you read the model's output one position to the left"),
        ({"pass_mask": False}, r"^your guesses change with the padding"),
        ({"softmax": False}, r"^you return logits, not probabilities"),
        ({"log": True}, r"^you return log-probabilities"),
    ],
)
def test_check_fill_mask_names_the_mistake(slip, words, both_passes):
    def wrong(*args):
        return fill_mask(*args, **slip)

    failure = both_passes(check_fill_mask, wrong)
    assert re.search(words, str(failure)) and failure.fix


def test_check_fill_mask_names_a_swapped_pair():
    def swapped(*args):  # (probs, ids): topk's order, values first
        ids, probs = fill_mask(*args)
        return probs, ids

    with pytest.raises(CheckFailed, match=r"^your pair is \(probabilities, ids\)") as failure:
        check_fill_mask(swapped)
    assert "special" not in str(failure.value)
    with pytest.raises(CheckFailed, match=r"Fix: return \(ids, probs\) in that order"):
        check_fill_mask(swapped, hint=True)


def test_check_fill_mask_shapes_and_fallback():
    def first_mask_only(model, input_ids, attention_mask, mask_id, special_ids, k):
        ids, probs = fill_mask(model, input_ids, attention_mask, mask_id, special_ids, k)
        return ids[:1], probs[:1]

    def last_guess_wrong(model, input_ids, attention_mask, mask_id, special_ids, k):
        ids, probs = fill_mask(model, input_ids, attention_mask, mask_id, special_ids, k)
        ids = ids.clone()
        ids[:, -1] = torch.where(ids[:, -1] == 39, 37, 39)  # another ordinary id
        return ids, probs

    def rounded(model, input_ids, attention_mask, mask_id, special_ids, k):
        ids, probs = fill_mask(model, input_ids, attention_mask, mask_id, special_ids, k)
        return ids, probs.round(decimals=2)

    with pytest.raises(CheckFailed, match=r"^your ids and probs have shapes .* \(m, k\) = "):
        check_fill_mask(first_mask_only)
    with pytest.raises(CheckFailed, match=r"^your top-k ids differ from the reference on case"):
        check_fill_mask(last_guess_wrong)
    with pytest.raises(CheckFailed, match=r"^your ids are right but your probabilities differ"):
        check_fill_mask(rounded)
    with pytest.raises(CheckFailed, match=r"\nFix: return \(ids, probs\)"):
        check_fill_mask(lambda *args: fill_mask(*args)[0], hint=True)


def test_check_fill_mask_names_ids_read_from_a_slice(both_passes):
    def sliced(model, input_ids, attention_mask, mask_id, special_ids, k):
        rows, positions = (input_ids == mask_id).nonzero(as_tuple=True)
        with torch.no_grad():
            logits = model(input_ids, attention_mask)[rows, positions]  # (m, V)
        top = torch.softmax(logits[:, 5:], dim=-1).topk(k, dim=-1)  # the 5 specials sliced off
        return top.indices, top.values  # positions in the slice, not shifted back by 5

    failure = both_passes(check_fill_mask, sliced)
    assert re.search(r"^every id you return is 5 lower than the right one", str(failure))
    assert "special id" not in str(failure) and "ids + 5" in failure.fix


def test_check_masked_loss_names_log_of_softmax_at_large_logits(both_passes):
    def log_of_softmax(logits, labels):  # right at small logits, inf when softmax underflows
        chosen = labels != -100
        if not chosen.any():
            return logits.sum() * 0.0
        p = torch.softmax(logits[chosen], dim=-1)
        return -torch.log(p.gather(1, labels[chosen][:, None])).mean()

    failure = both_passes(check_masked_loss, log_of_softmax)
    assert re.search(r"^your loss is inf on the case with logits of size 200", str(failure))
    assert "log_softmax" in failure.fix


def test_check_masked_loss_catches_labels_changed_in_place(both_passes):
    def zeroes_the_labels(logits, labels):  # right loss, but the caller's labels are spoiled
        chosen = labels != -100
        labels[~chosen] = 0
        if not chosen.any():
            return logits.sum() * 0.0
        return F.cross_entropy(logits[chosen], labels[chosen])

    failure = both_passes(check_masked_loss, zeroes_the_labels)
    assert str(failure).startswith("your function changed labels in place")


def test_check_fill_mask_catches_specials_assumed_to_come_first(both_passes):
    def first_columns(model, input_ids, attention_mask, mask_id, special_ids, k):
        rows, positions = (input_ids == mask_id).nonzero(as_tuple=True)
        with torch.no_grad():
            scores = model(input_ids, attention_mask)[rows, positions].clone()  # (m, V)
        scores[:, :len(special_ids)] = float("-inf")  # right only when the specials are 0..4
        top = torch.softmax(scores, dim=-1).topk(k, dim=-1)
        return top.indices, top.values

    failure = both_passes(check_fill_mask, first_columns)
    assert re.search(r"special id\(s\) \[.*\].*special_ids are \[0, 9, 17, 25, 38\]", str(failure))
    assert "list(special_ids)" in failure.fix

"""Lesson 5's checkers: check_mlm_corrupt and check_masked_loss."""

import pytest
import torch
from torch.nn import functional as F

from encoderlab.course.checks import CheckFailed, check_masked_loss, check_mlm_corrupt
from encoderlab.objectives import mlm_corrupt, mlm_loss

# --- checkers ------------------------------------------------------------------------------------


def reference_corrupt(ids, mask, special_ids, vocab_size, mask_id, generator):
    return mlm_corrupt(ids, mask, special_ids, vocab_size, generator=generator, mask_id=mask_id)


def test_check_mlm_corrupt_accepts_the_reference(capsys):
    assert check_mlm_corrupt(reference_corrupt)
    assert "80 / 10 / 10 within 5 standard errors" in capsys.readouterr().out


def _variant(choose_p=0.15, split=(0.8, 0.9), allow_specials=False, allow_padding=False,
             label_mode="original", random_from_all=False, seeded=True, in_place=False,
             ignore=-100):
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
        low = 0 if random_from_all else 5
        rand = torch.randint(low, vocab_size, ids.shape, generator=g)
        original = ids.clone()
        x[chosen & (roll < split[0])] = mask_id
        r = chosen & (roll >= split[0]) & (roll < split[1])
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
        (_variant(split=(0.6, 0.8)), "BERT's split is 80 / 10 / 10. Draw one number"),
        (_variant(choose_p=0.3), r"you chose 29\.\d% of the 12,590 eligible"),
        (_variant(allow_specials=True), "you chose special tokens"),
        (_variant(allow_padding=True), "you chose padding positions"),
        (_variant(label_mode="corrupted"), "your labels hold the corrupted input"),
        (_variant(ignore=0), "with 0, but 0 is a real token id"),
        (_variant(random_from_all=True), "random replacements are special tokens"),
        (_variant(seeded=False), "seeded alike gave different results"),
        (_variant(in_place=True), "changed input_ids in place"),
        (lambda *a: reference_corrupt(*a)[0], "return the pair"),
        (lambda ids, *a: (ids.clone(), ids.clone()), "label -100"),
    ],
)
def test_check_mlm_corrupt_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_mlm_corrupt(wrong)


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
            return torch.tensor(0.0)
        logp = torch.log_softmax(logits[chosen], dim=-1)
        return -logp.gather(1, labels[chosen][:, None]).mean()

    assert check_masked_loss(by_hand)
    assert "correct on 5 cases" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100),
         "NaN"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="sum") / lb.numel(), "all b \\* n positions"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="sum"), "take their mean"),
        (lambda lg, lb: -mlm_loss(lg, lb), "wrong sign"),
        (lambda lg, lb: F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100,
                                        reduction="none"), "return one number"),
        (lambda lg, lb: mlm_loss(lg, lb) * 2, "take -log_softmax at the right token"),
    ],
)
def test_check_masked_loss_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_masked_loss(wrong)


def test_check_masked_loss_names_the_per_sequence_mean():
    def per_row(logits, labels):
        rows = [mlm_loss(lg[None], lb[None]) for lg, lb in zip(logits, labels, strict=True)
                if (lb != -100).any()]
        return torch.stack(rows).mean() if rows else torch.tensor(0.0)

    with pytest.raises(CheckFailed, match="average each sequence's loss"):
        check_masked_loss(per_row)

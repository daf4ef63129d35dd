"""Lesson 10's checker: check_prefix_lm_mask."""

import pytest
import torch

from encoderlab import masks
from encoderlab.course.checks import CheckFailed, check_prefix_lm_mask


def test_reference_passes(capsys):
    assert check_prefix_lm_mask(masks.prefix_lm)
    assert "correct on 8 cases" in capsys.readouterr().out


def test_loop_version_like_the_source_passes():
    def loops(n, p):
        m = torch.zeros(n, n, dtype=torch.bool)
        m[:p, :p] = True
        for i in range(p, n):
            m[i, : i + 1] = True
        return m

    assert check_prefix_lm_mask(loops)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda n, p: masks.causal(n), "causal inside the prefix"),
        (lambda n, p: torch.ones(n, n, dtype=torch.bool), "every query see every key"),
        (lambda n, p: masks.prefix_lm(n, min(p + 1, n)), "one position too long"),
        (lambda n, p: masks.prefix_lm(n, max(p - 1, 0)), "one position too short"),
        (lambda n, p: masks.prefix_lm(n, p) | (torch.arange(n)[:, None] < p),
         "prefix queries see the positions after"),
        (lambda n, p: masks.prefix_lm(n, p).float(), "boolean"),
        (lambda n, p: masks.prefix_lm(n, p)[None], "shape"),
    ],
)
def test_wrong_masks_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_prefix_lm_mask(wrong)


def test_unknown_mistake_points_at_a_cell():
    def odd(n, p):
        m = masks.prefix_lm(n, p)
        m[-1, 0] = False
        return m

    with pytest.raises(CheckFailed, match="first is query i="):
        check_prefix_lm_mask(odd)

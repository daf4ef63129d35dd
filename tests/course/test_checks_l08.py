"""Lesson 8's checkers: check_mean_pooling, check_recall_at_k and check_in_batch_negatives_loss."""

import pytest
import torch

from encoderlab.course.checks import (
    CheckFailed,
    check_in_batch_negatives_loss,
    check_mean_pooling,
    check_recall_at_k,
)
from encoderlab.course.checks.l08 import _INFO_NCE_MISTAKES, _POOLING_MISTAKES, _RECALL_MISTAKES
from encoderlab.heads import pool
from encoderlab.lessons import l08_retrieval as R

# --- checkers -------------------------------------------------------------------------------------


def test_check_mean_pooling_accepts_the_reference(capsys):
    assert check_mean_pooling(lambda h, m: pool(h, m, "mean"))
    assert "mean pooling" in capsys.readouterr().out


@pytest.mark.parametrize("message, wrong", _POOLING_MISTAKES)
def test_check_mean_pooling_names_each_mistake(message, wrong):
    with pytest.raises(CheckFailed) as info:
        check_mean_pooling(wrong)
    assert str(info.value) == message


def test_check_mean_pooling_shape_and_errors():
    with pytest.raises(CheckFailed, match=r"expected \(b, d\)"):
        check_mean_pooling(lambda h, m: (h * m[..., None]).sum(0))
    with pytest.raises(CheckFailed, match="raised ZeroDivisionError"):
        check_mean_pooling(lambda h, m: 1 / 0)
    with pytest.raises(CheckFailed, match="differs from the mean over real tokens"):
        check_mean_pooling(lambda h, m: pool(h, m, "mean") + 0.1)


def test_check_recall_at_k_accepts_the_reference():
    assert check_recall_at_k(lambda r, a, k: R.recall_at_k(torch.tensor(r), a, k))


@pytest.mark.parametrize("message, wrong", _RECALL_MISTAKES)
def test_check_recall_at_k_names_each_mistake(message, wrong):
    with pytest.raises(CheckFailed) as info:
        check_recall_at_k(wrong)
    assert str(info.value) == message


def test_check_recall_at_k_other_answers():
    with pytest.raises(CheckFailed, match="return one number"):
        check_recall_at_k(lambda r, a, k: "yes")
    with pytest.raises(CheckFailed, match="your recall@"):
        check_recall_at_k(lambda r, a, k: 0.123)


def test_check_in_batch_negatives_loss_accepts_the_reference():
    assert check_in_batch_negatives_loss(R.in_batch_negatives_loss)


@pytest.mark.parametrize("message, wrong", _INFO_NCE_MISTAKES)
def test_check_in_batch_negatives_loss_names_each_mistake(message, wrong):
    with pytest.raises(CheckFailed) as info:
        check_in_batch_negatives_loss(wrong)
    assert str(info.value) == message


def test_check_in_batch_negatives_loss_shape():
    with pytest.raises(CheckFailed, match="return one number"):
        check_in_batch_negatives_loss(lambda a, b, s: (a * b).sum(1))

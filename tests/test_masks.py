"""Mask builders: shapes, the True = may-attend convention, and clear errors."""

import pytest
import torch

from encoderlab import masks


def test_bidirectional_is_all_true():
    m = masks.bidirectional(5)
    assert m.dtype == torch.bool and m.shape == (5, 5) and bool(m.all())


def test_causal_is_lower_triangular_with_diagonal():
    m = masks.causal(4)
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(m, expected)


def test_padding_hides_key_columns_not_query_rows():
    am = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    m = masks.padding(am)
    assert m.shape == (2, 1, 1, 4)
    full = m.expand(2, 3, 4, 4)  # (b, h, n_q, n_kv)
    # every query row (padding rows included) sees exactly the real keys
    assert torch.equal(full[0, 0].sum(-1), torch.tensor([3, 3, 3, 3]))
    assert torch.equal(full[1, 2].sum(-1), torch.tensor([2, 2, 2, 2]))


def test_combine_is_logical_and():
    am = torch.tensor([[1, 1, 0]])
    m = masks.combine(masks.causal(3), masks.padding(am))
    assert m.shape == (1, 1, 3, 3)
    assert torch.equal(m[0, 0], torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.bool))


def test_to_additive_is_zero_or_minus_inf():
    a = masks.to_additive(masks.causal(3), torch.float16)
    assert a.dtype == torch.float16
    assert torch.equal(a == 0, masks.causal(3))
    assert bool(torch.isneginf(a[~masks.causal(3)]).all())


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", True])
def test_lengths_must_be_positive_ints(bad):
    with pytest.raises(ValueError, match="positive int"):
        masks.causal(bad)


def test_padding_rejects_wrong_shape_and_values():
    with pytest.raises(ValueError, match=r"shape \(batch, n\)"):
        masks.padding(torch.ones(3))
    with pytest.raises(ValueError, match=r"values in \{0, 1\}"):
        masks.padding(torch.tensor([[1, 2, 0]]))


def test_non_boolean_mask_is_refused_with_a_fix():
    with pytest.raises(ValueError, match=r"must be boolean.*mask == 0"):
        masks.to_additive(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="must be a boolean tensor"):
        masks.combine(masks.causal(3), torch.ones(3, 3))


def test_combine_reports_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match="does not broadcast"):
        masks.combine(masks.causal(3), masks.causal(4))
    with pytest.raises(ValueError, match="at least one"):
        masks.combine()

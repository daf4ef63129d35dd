"""Mask builders: shapes, the True = may-attend convention, and clear errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- The masks of Lessons 9 and 10: checked against their definitions entry by entry ---

small = st.integers(1, 12)


@settings(max_examples=40, deadline=None)
@given(n=small, data=st.data())
def test_prefix_lm_is_bidirectional_on_the_prefix_and_causal_after(n, data):
    p = data.draw(st.integers(0, n))
    m = masks.prefix_lm(n, p)
    for i in range(n):
        for j in range(n):
            assert bool(m[i, j]) == (j < p or j <= i)
    assert torch.equal(masks.prefix_lm(n, 0), masks.causal(n))
    assert torch.equal(masks.prefix_lm(n, n), masks.bidirectional(n))


@settings(max_examples=40, deadline=None)
@given(n=small, window=st.integers(0, 14), is_causal=st.booleans())
def test_sliding_window_keeps_keys_within_the_window(n, window, is_causal):
    m = masks.sliding_window(n, window, causal=is_causal)
    for i in range(n):
        for j in range(n):
            assert bool(m[i, j]) == (abs(i - j) <= window and (j <= i or not is_causal))
    if window >= n:
        expected = masks.causal(n) if is_causal else masks.bidirectional(n)
        assert torch.equal(m, expected)


@settings(max_examples=40, deadline=None)
@given(doc_ids=st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_document_mask_is_same_document(doc_ids):
    ids = torch.tensor(doc_ids)
    m = masks.document(ids)
    for i, a in enumerate(doc_ids):
        for j, b in enumerate(doc_ids):
            assert bool(m[i, j]) == (a == b)
    batched = masks.document(torch.stack([ids, ids.flip(0)]))
    assert batched.shape == (2, 1, len(doc_ids), len(doc_ids))
    assert torch.equal(batched[0, 0], m)


@settings(max_examples=30, deadline=None)
@given(n_q=small, n_kv=small, data=st.data())
def test_cross_mask_is_a_rectangle_hiding_padded_sources(n_q, n_kv, data):
    q_real = data.draw(st.integers(1, n_q))
    kv_real = data.draw(st.integers(1, n_kv))
    q_mask = (torch.arange(n_q) < q_real).long()[None]  # (1, n_q)
    kv_mask = (torch.arange(n_kv) < kv_real).long()[None]  # (1, n_kv)
    m = masks.cross(q_mask, kv_mask)
    assert m.shape == (1, 1, n_q, n_kv)
    for i in range(n_q):
        for j in range(n_kv):
            assert bool(m[0, 0, i, j]) == (i < q_real and j < kv_real)


def test_new_mask_builders_reject_bad_arguments():
    with pytest.raises(ValueError, match=r"prefix_len must be an int from 0 to 4 \(n=4"):
        masks.prefix_lm(4, 5)
    with pytest.raises(ValueError, match="window must be a non-negative int"):
        masks.sliding_window(4, -1)
    with pytest.raises(ValueError, match="doc_ids must be a non-empty integer tensor"):
        masks.document(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="same batch size"):
        masks.cross(torch.ones(2, 3), torch.ones(1, 3))

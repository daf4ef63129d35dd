"""Lesson 9's checker: check_online_softmax."""

import math
from functools import partial

import pytest
import torch
from torch.nn import functional as F

from encoderlab.course import checks
from encoderlab.course.checks.l09 import FULL_ROW_SOFTMAX, _online_variant

# --- the online-softmax checker ------------------------------------------------------------------


def _reference_online(s, v, chunk_size):
    m = torch.full((s.shape[0], 1), -math.inf)
    l_sum = torch.zeros(s.shape[0], 1)
    acc = torch.zeros(s.shape[0], v.shape[1])
    for c in range(0, s.shape[1], chunk_size):
        tile = s[:, c : c + chunk_size]
        m_new = torch.maximum(m, tile.amax(dim=-1, keepdim=True))
        p = torch.exp(tile - m_new)
        alpha = torch.exp(m - m_new)
        l_sum = l_sum * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[c : c + chunk_size]
        m = m_new
    return acc / l_sum


def _learner(bug):
    """The online softmax as a learner writes it, with one bug (None: no bug)."""

    def online(s, v, chunk_size):
        n_q, n_kv = s.shape
        m = torch.full((n_q, 1), -math.inf)
        l_sum, acc = torch.zeros(n_q, 1), torch.zeros(n_q, v.shape[1])
        for c in range(0, n_kv, chunk_size):
            tile = s[:, c : c + chunk_size]
            if bug == "drop_last" and tile.shape[1] < chunk_size:
                continue
            m_new = torch.maximum(m, tile.amax(1, keepdim=True))
            p, alpha = torch.exp(tile - m_new), torch.exp(m - m_new)
            if bug == "chunk_max":
                p, alpha = torch.exp(tile - tile.amax(1, keepdim=True)), torch.ones_like(m)
            l_sum = l_sum * (1 if bug == "no_rescale_l" else alpha) + p.sum(1, keepdim=True)
            acc = acc * (1 if bug == "no_rescale_acc" else alpha) + p @ v[c : c + chunk_size]
            m = m_new
        return acc if bug == "no_divide" else acc / l_sum

    return online


def test_check_online_softmax_accepts_the_reference(capsys):
    assert checks.check_online_softmax(_reference_online)
    assert "correct on 5 cases" in capsys.readouterr().out
    assert checks.check_online_softmax(_learner(None))


def _online_by_split(s, v, chunk_size):
    """A correct answer that chunks with torch.split and converts s first."""
    s = s.float()
    m = s.new_full((s.shape[0], 1), -math.inf)
    l_sum, acc = s.new_zeros(s.shape[0], 1), s.new_zeros(s.shape[0], v.shape[1])
    for tile, v_tile in zip(s.split(chunk_size, dim=1), v.split(chunk_size), strict=True):
        m_new = torch.maximum(m, tile.amax(dim=1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(tile - m_new)
        l_sum, acc, m = l_sum * alpha + p.sum(1, keepdim=True), acc * alpha + p @ v_tile, m_new
    return acc / l_sum


def _online_row_by_row(s, v, chunk_size):
    """A correct answer that takes one query row at a time, then chunks it."""
    rows = []
    for row in s:  # (n_kv,)
        m, l_sum, acc = torch.tensor(-math.inf), torch.tensor(0.0), torch.zeros(v.shape[1])
        for c in range(0, len(row), chunk_size):
            tile = row[c : c + chunk_size]
            m_new = torch.maximum(m, tile.max())
            alpha, p = torch.exp(m - m_new), torch.exp(tile - m_new)
            l_sum, acc, m = l_sum * alpha + p.sum(), acc * alpha + p @ v[c : c + chunk_size], m_new
        rows.append(acc / l_sum)
    return torch.stack(rows)


@pytest.mark.parametrize("answer", [_online_by_split, _online_row_by_row])
def test_check_online_softmax_accepts_other_correct_ways_to_chunk(answer):
    assert checks.check_online_softmax(answer)


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        ("no_rescale_acc", "rescale the running denominator l but not the running numerator"),
        ("no_rescale_l", "rescale the running numerator but not the running denominator l"),
        ("chunk_max", "subtract each chunk's own max"),
        ("no_divide", "without dividing it by the running denominator l"),
        ("drop_last", "skips the last chunk when it is shorter"),
    ],
)
def test_check_online_softmax_names_the_learners_mistake(bug, message):
    with pytest.raises(checks.CheckFailed, match=message):
        checks.check_online_softmax(_learner(bug))


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        ({"rescale": False}, "not rescaled when the max grows"),
        ({"sign": -1.0}, "the wrong sign"),
        ({"per_chunk": True}, "normalise each chunk on its own"),
        ({"track_max": False}, "do not subtract a running max"),
    ],
)
def test_check_online_softmax_names_the_mistake(mistake, message):
    wrong = partial(_online_variant, **mistake)
    with pytest.raises(checks.CheckFailed, match=message):
        checks.check_online_softmax(wrong)


def _global_max_first(s, v, chunk_size):
    m = s.amax(dim=1, keepdim=True)  # the whole row's max, before any chunk: not online
    l_sum, acc = torch.zeros(s.shape[0], 1), torch.zeros(s.shape[0], v.shape[1])
    for c in range(0, s.shape[1], chunk_size):
        p = torch.exp(s[:, c : c + chunk_size] - m)
        l_sum, acc = l_sum + p.sum(1, keepdim=True), acc + p @ v[c : c + chunk_size]
    return acc / l_sum


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        (lambda s, v, c: (s.amax(dim=1, keepdim=True), _reference_online(s, v, c))[1],
         "amax on 8 key columns"),
        (_global_max_first, "amax on 8 key columns"),
        (lambda s, v, c: _reference_online(s.exp().log(), v, c), "exp on 8 key columns"),
    ],
)
def test_check_online_softmax_rejects_reading_the_whole_row(answer, read):
    with pytest.raises(checks.CheckFailed, match=f"computed {read} at once"):
        checks.check_online_softmax(answer)


def _softmax_after_rebuilding_the_row(s, v, chunk_size):
    """The whole row rebuilt from its chunks, then one softmax: what the exercise forbids."""
    row = torch.cat([s[:, c : c + chunk_size] for c in range(0, s.shape[1], chunk_size)], dim=1)
    return torch.softmax(row, dim=-1) @ v


def _softmax_in_a_try(s, v, chunk_size):
    """A full-row softmax whose exceptions would be swallowed: the check must not rely on one."""
    try:
        return F.softmax(torch.Tensor(s), dim=1) @ v
    except Exception:
        return _reference_online(s, v, chunk_size)


@pytest.mark.parametrize(
    ("answer", "called"),
    [
        (lambda s, v, c: torch.softmax(s, -1) @ v, "torch.softmax over 8 entries"),
        (lambda s, v, c: s.float().softmax(dim=1) @ v, "Tensor.softmax over 8 entries"),
        (lambda s, v, c: torch.softmax(s[:, :], -1) @ v, "torch.softmax over 8 entries"),
        (lambda s, v, c: torch.softmax(s.T, 0).T @ v, "torch.softmax over 8 entries"),
        (lambda s, v, c: F.softmax(s.as_subclass(torch.Tensor), -1) @ v, "F.softmax over 8"),
        (lambda s, v, c: torch.nn.Softmax(dim=-1)(s) @ v, "F.softmax over 8 entries"),
        (lambda s, v, c: torch.log_softmax(s.detach(), -1).exp() @ v, "torch.log_softmax over 8"),
        (lambda s, v, c: (s - s.logsumexp(1, keepdim=True)).exp() @ v, "Tensor.logsumexp over 8"),
        (_softmax_after_rebuilding_the_row, "torch.softmax over 8 entries"),
        (_softmax_in_a_try, "F.softmax over 8 entries"),
    ],
)
def test_check_online_softmax_rejects_a_full_row_softmax(answer, called):
    with pytest.raises(checks.CheckFailed, match=f"^your function {FULL_ROW_SOFTMAX} \\({called}"):
        checks.check_online_softmax(answer)


def _softmax_family():
    return (torch.softmax, F.softmax, torch.Tensor.softmax, torch.logsumexp, torch.special.softmax)


def test_the_full_row_guard_restores_the_softmax_family():
    before = _softmax_family()
    with pytest.raises(checks.CheckFailed):
        checks.check_online_softmax(_softmax_after_rebuilding_the_row)
    with pytest.raises(checks.CheckFailed, match="raised RuntimeError"):
        checks.check_online_softmax(lambda s, v, c: (_ for _ in ()).throw(RuntimeError("x")))
    assert all(a is b for a, b in zip(before, _softmax_family(), strict=True))
    assert torch.allclose(torch.softmax(torch.zeros(9), 0), torch.full((9,), 1 / 9))


def test_a_softmax_over_one_chunk_is_allowed():
    """Normalising each chunk on its own is a named mistake, not a forbidden call."""

    def per_chunk(s, v, chunk_size):
        parts = [torch.softmax(s[:, c : c + chunk_size], -1) @ v[c : c + chunk_size]
                 for c in range(0, s.shape[1], chunk_size)]
        return sum(parts) / len(parts)

    with pytest.raises(checks.CheckFailed, match="normalise each chunk on its own"):
        checks.check_online_softmax(per_chunk)


def test_check_online_softmax_reports_shape_and_errors():
    with pytest.raises(checks.CheckFailed, match="expected \\(n_q, d_v\\)"):
        checks.check_online_softmax(lambda s, v, c: _reference_online(s, v, c).T)
    with pytest.raises(checks.CheckFailed, match="raised NotImplementedError"):
        checks.check_online_softmax(lambda s, v, c: (_ for _ in ()).throw(NotImplementedError()))
    with pytest.raises(checks.CheckFailed, match="differs from softmax"):
        checks.check_online_softmax(lambda s, v, c: _reference_online(s, v, c) + 0.1)

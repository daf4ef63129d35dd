"""Lesson 9's checkers: check_online_softmax and check_tiled_backward."""

import math
import re
from functools import partial

import pytest
import torch
from torch.nn import functional as F

from encoderlab.course import checks
from encoderlab.course.checks.l09 import (
    FULL_MATRIX,
    FULL_ROW_SOFTMAX,
    _backward_variant,
    _online_variant,
)

# --- the online-softmax checker ------------------------------------------------------------------


FLOOR = torch.finfo(torch.float32).min  # a finite stand-in for -inf: exp(FLOOR - FLOOR) = 1


def _reference_online(s, v, chunk_size):
    m = torch.full((s.shape[0], 1), -math.inf)
    l_sum = torch.zeros(s.shape[0], 1)
    acc = torch.zeros(s.shape[0], v.shape[1])
    for c in range(0, s.shape[1], chunk_size):
        tile = s[:, c : c + chunk_size]
        m_new = torch.maximum(m, tile.amax(dim=-1, keepdim=True))
        m_ref = torch.where(m_new == -math.inf, 0.0, m_new)  # a fully masked chunk so far
        p = torch.exp(tile - m_ref)
        alpha = torch.exp(m - m_ref)
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
            m_ref = m_new if bug == "unguarded" else m_new.clamp(min=FLOOR)
            p, alpha = torch.exp(tile - m_ref), torch.exp(m - m_ref)
            if bug == "chunk_max":
                p, alpha = torch.exp(tile - tile.amax(1, keepdim=True)), torch.ones_like(m)
            if bug == "own_max_rescaled":  # old sums re-measured to m_new, the chunk's terms not
                p = torch.exp(tile - tile.amax(1, keepdim=True))
            l_new = l_sum * (1 if bug == "no_rescale_l" else alpha) + p.sum(1, keepdim=True)
            if bug == "fa1_unweighted":  # FA-1's normalised o, missing the factor l_old / l_new
                acc = alpha * acc + p @ v[c : c + chunk_size] / l_new
            else:
                acc = acc * (1 if bug == "no_rescale_acc" else alpha) + p @ v[c : c + chunk_size]
            l_sum, m = l_new, m_new
        if bug == "fa1_unweighted":
            return acc
        return acc if bug == "no_divide" else acc / l_sum

    return online


def test_check_online_softmax_accepts_the_reference(capsys):
    assert checks.check_online_softmax(_reference_online)
    assert "correct on 6 cases" in capsys.readouterr().out
    assert checks.check_online_softmax(_learner(None))


def _online_by_split(s, v, chunk_size):
    """A correct answer that chunks with torch.split and converts s first."""
    s = s.float()
    m = s.new_full((s.shape[0], 1), -math.inf)
    l_sum, acc = s.new_zeros(s.shape[0], 1), s.new_zeros(s.shape[0], v.shape[1])
    for tile, v_tile in zip(s.split(chunk_size, dim=1), v.split(chunk_size), strict=True):
        m_new = torch.maximum(m, tile.amax(dim=1, keepdim=True))
        m_ref = m_new.clamp(min=FLOOR)
        alpha = torch.exp(m - m_ref)
        p = torch.exp(tile - m_ref)
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
            if m_new == -math.inf:  # nothing visible yet: this chunk adds nothing
                continue
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
        ("own_max_rescaled", "but not the chunk's own terms"),
        ("fa1_unweighted", "needs the factor l_old / l_new"),
        ("unguarded", "first chunk is fully masked"),
    ],
)
def test_check_online_softmax_names_the_learners_mistake(bug, message, both_passes):
    assert re.search(message, str(both_passes(checks.check_online_softmax, _learner(bug))))


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        ({"rescale": False}, "not rescaled when the max grows"),
        ({"sign": -1.0}, "the wrong sign"),
        ({"per_chunk": True}, "normalise each chunk on its own"),
        ({"track_max": False}, "do not subtract a running max"),
        ({"own_max_rescaled": True}, "but not the chunk's own terms"),
        ({"fa1_unweighted": True}, "needs the factor l_old / l_new"),
        ({"chunk_max": True, "guard": True}, "subtract each chunk's own max"),
        ({"rescale_acc": False, "guard": True}, "but not the running numerator"),
    ],
)
def test_check_online_softmax_names_the_mistake(mistake, message, both_passes):
    wrong = partial(_online_variant, **mistake)
    assert re.search(message, str(both_passes(checks.check_online_softmax, wrong)))


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


# --- the tiled-backward checker ------------------------------------------------------------------


def _reference_backward(q, k, v, out, lse, grad_out, block_size):
    """The tiled backward pass a learner writes: key tiles outside, query tiles inside."""
    n, d = q.shape
    scale = 1 / math.sqrt(d)
    d_row = (grad_out * out).sum(dim=-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for c in range(0, n, block_size):
        k_j, v_j = k[c : c + block_size], v[c : c + block_size]
        for r in range(0, n, block_size):
            q_i, do_i = q[r : r + block_size], grad_out[r : r + block_size]
            p = torch.exp(q_i @ k_j.T * scale - lse[r : r + block_size, None])
            dv[c : c + block_size] += p.T @ do_i
            ds = p * (do_i @ v_j.T - d_row[r : r + block_size])
            dq[r : r + block_size] += ds @ k_j * scale
            dk[c : c + block_size] += ds.T @ q_i * scale
    return dq, dk, dv


def _dense_backward(q, k, v, out, lse, grad_out, block_size):
    """Right numbers, by autograd through the whole n x n matrix: what the exercise forbids."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    o = torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=-1) @ v
    return torch.autograd.grad(o, (q, k, v), grad_out)


def test_check_tiled_backward_accepts_the_reference(capsys):
    assert checks.check_tiled_backward(_reference_backward)
    assert "correct on 5 cases" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        ({"use_d": False}, "leaves out the D term"),
        ({"tile_d": True}, "summed over one key tile only"),
        ({"normalise": False}, "P is not normalised"),
        ({"lse_per_row": False}, "subtracts L along the wrong axis"),
        ({"scale_grads": False}, "miss the scale 1/sqrt"),
        ({"scale_s": False}, "leaves the scores unscaled"),
        ({"ds_sign": -1.0}, "dS has the wrong sign"),
        ({"transpose_dv": False}, r"shapes cannot be multiplied.*a missing transpose"),
        ({"transpose_dk": False}, r"shapes cannot be multiplied.*a missing transpose"),
    ],
)
def test_check_tiled_backward_names_each_mistake(mistake, message, both_passes):
    wrong = partial(_backward_variant, **mistake)
    assert re.search(message, str(both_passes(checks.check_tiled_backward, wrong)))


def test_check_tiled_backward_names_a_float32_learners_mistake():
    def no_d(q, k, v, out, lse, grad_out, block_size):  # the reference with D = 0, float32
        return _reference_backward(q, k, v, out * 0, lse, grad_out, block_size)

    with pytest.raises(checks.CheckFailed, match="leaves out the D term"):
        checks.check_tiled_backward(no_d)


def test_check_tiled_backward_allows_row_strips_but_not_the_square():
    def strips(q, k, v, out, lse, grad_out, block_size):  # P one (B, n) strip at a time
        n, d = q.shape
        d_row = (grad_out * out).sum(dim=-1, keepdim=True)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for r in range(0, n, block_size):
            q_i, do_i = q[r : r + block_size], grad_out[r : r + block_size]
            p = torch.exp(q_i @ k.T / math.sqrt(d) - lse[r : r + block_size, None])
            ds = p * (do_i @ v.T - d_row[r : r + block_size])
            dv += p.T @ do_i
            dq[r : r + block_size] = ds @ k / math.sqrt(d)
            dk += ds.T @ q_i / math.sqrt(d)
        return dq, dk, dv

    assert checks.check_tiled_backward(strips)


def test_check_tiled_backward_refuses_the_full_matrix():
    with pytest.raises(checks.CheckFailed, match=FULL_MATRIX) as error:
        checks.check_tiled_backward(_dense_backward)
    assert "(8, 8)" in str(error.value) and "n=8," in str(error.value)  # the first case


def test_check_tiled_backward_refuses_the_matrix_even_when_an_error_is_swallowed():
    def hides(q, k, v, out, lse, grad_out, block_size):
        try:
            _ = q @ k.T  # the full score matrix, then an error that a try swallows
            raise RuntimeError("oops")
        except RuntimeError:
            pass
        return _reference_backward(q, k, v, out, lse, grad_out, block_size)

    with pytest.raises(checks.CheckFailed, match=FULL_MATRIX):
        checks.check_tiled_backward(hides)


def test_check_tiled_backward_reports_shape_and_type_and_falls_back():
    with pytest.raises(checks.CheckFailed, match="not three gradients"):
        checks.check_tiled_backward(lambda *a: _reference_backward(*a)[0])
    with pytest.raises(checks.CheckFailed, match="\nFix: return a tuple"):
        checks.check_tiled_backward(lambda *a: _reference_backward(*a)[0], hint=True)
    with pytest.raises(checks.CheckFailed, match="your dk has shape"):
        checks.check_tiled_backward(
            lambda *a: (lambda g: (g[0], g[1].T, g[2]))(_reference_backward(*a)))
    with pytest.raises(checks.CheckFailed, match=r"differ from autograd.*dV by up to"):
        checks.check_tiled_backward(
            lambda *a: (lambda g: (g[0], g[1], g[2] * 2))(_reference_backward(*a)))


def test_check_tiled_backward_sees_the_matrix_inside_a_fused_kernel():
    def fused(q, k, v, out, lse, grad_out, block_size):
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        o = F.scaled_dot_product_attention(q[None], k[None], v[None])[0]  # n x n inside
        return torch.autograd.grad(o, (q, k, v), grad_out)

    with pytest.raises(checks.CheckFailed, match=FULL_MATRIX):
        checks.check_tiled_backward(fused)


def test_check_tiled_backward_falls_back_on_p_when_dv_is_wrong(both_passes):
    def p_scaled_by_1_over_d(q, k, v, out, lse, grad_out, block_size):  # 1/d, not 1/sqrt(d)
        d = q.shape[1]
        return _reference_backward(q / math.sqrt(d), k, v, out, lse, grad_out, block_size)

    failure = both_passes(checks.check_tiled_backward, p_scaled_by_1_over_d)
    assert re.search(r"dV by up to.*your P differs from the forward's", str(failure))
    assert "S_ij = Q_i K_j^T / sqrt(d)" in failure.fix


def test_check_tiled_backward_falls_back_on_ds_when_dv_is_right(both_passes):
    def dq_doubled(q, k, v, out, lse, grad_out, block_size):  # dV and dK right, dQ not
        dq, dk, dv = _reference_backward(q, k, v, out, lse, grad_out, block_size)
        return dq * 2, dk, dv

    failure = both_passes(checks.check_tiled_backward, dq_doubled)
    assert "dV by up to" not in str(failure)
    assert re.search(r"dQ by up to.*dV is right, so P is right", str(failure))
    assert "dS = P * (dP - D)" in failure.fix

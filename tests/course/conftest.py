"""Fixtures of the checkers' tests: a failing check seen on both of its passes."""

from __future__ import annotations

import pytest

from encoderlab.course.checks.harness import FIX_PREFIX, CheckFailed, name_of


def _both_passes(check, fn, *args) -> CheckFailed:
    """Run ``check(fn, *args)`` with ``hint=False`` (the default) and ``hint=True``; both must
    fail with the same diagnosis. The first pass must not show the fix and, when there is one,
    must end with the line that says how to see it; the second must end with the fix. Returns
    the first pass's failure, whose text a test matches against the mistake's words."""
    with pytest.raises(CheckFailed) as first:
        check(fn, *args)
    with pytest.raises(CheckFailed) as second:
        check(fn, *args, hint=True)
    short, full = first.value, second.value
    assert (short.diagnosis, short.fix) == (full.diagnosis, full.fix)
    assert short.diagnosis and str(short).startswith(short.diagnosis)
    if short.fix:
        assert "\n" not in short.fix  # the fix is one line
        assert short.fix not in str(short) and FIX_PREFIX not in str(short)
        assert str(short).endswith(f"{check.__name__}({name_of(fn)}, hint=True) shows the fix.")
        assert str(full) == f"{full.diagnosis}\n{FIX_PREFIX}{full.fix}"
    else:
        assert str(short) == str(full) == short.diagnosis
    return short


@pytest.fixture
def both_passes():
    """``both_passes(check, fn, *args)``: the hint=False failure, after checking both passes."""
    return _both_passes

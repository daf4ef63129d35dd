"""Fixtures of the checkers' tests: a failing check seen on both of its passes."""

from __future__ import annotations

from pathlib import Path

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


# --- The checkers as graded: answers recorded, then judged from the recording -----------------


def _through_recording(original):
    """``original`` run in two steps, as in grading: the answers recorded (and encoded as JSON),
    then judged by ``original`` from the recording alone."""
    import functools

    from encoderlab.course.checks import record
    from encoderlab_grader import judge

    @functools.wraps(original)
    def check(fn, *args, hint: bool = False):
        def judged(replay, hint):
            return original(replay, *args, hint=hint)

        judged.__name__ = original.__name__  # the messages name the check
        text = record.answers_of(lambda f: original(f, *args), fn)
        return judge.judge(judged, name_of(fn), text, hint=hint)

    return check


@pytest.fixture(autouse=True)
def _graded_checks(request, monkeypatch):
    """With --through-recording, every ``checks.check_*`` a test calls goes through the grader's
    recording and replay, so the whole suite says whether grading changes any verdict."""
    if not request.config.getoption("--through-recording", default=False):
        return
    import importlib

    from encoderlab.course import checks

    lessons = sorted(p.stem for p in Path(checks.__file__).parent.glob("l[0-9][0-9]*.py"))
    modules = [checks, request.module] + [
        importlib.import_module(f"encoderlab.course.checks.{name}") for name in lessons]
    originals = {name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")}
    for module in modules:  # wherever a test finds a checker: the package, a lesson's, its own
        for name, original in originals.items():
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, _through_recording(original))

"""The checkers' one loop (encoderlab.course.checks.harness), on a small made-up exercise:
square every element of a tensor; and the two passes of every lesson's checkers (the diagnosis
first, the one-line fix with ``hint=True``)."""

import importlib
import inspect
from pathlib import Path

import pytest
import torch

from encoderlab.course import checks
from encoderlab.course.checks.harness import (
    FIX_PREFIX,
    CheckFailed,
    Exercise,
    checker,
    close,
    diagnosis_only,
    differs,
    run,
)

DOUBLED = ("you double x instead of squaring it.", "x * x, or x ** 2.")
NEGATED = ("your squares are negative, but x ** 2 is never below 0.", "drop the minus sign.")


def _square_cases() -> list[tuple]:
    return [(torch.tensor([1.0, 2.0, 3.0]),), (torch.tensor([-1.5, 0.0, 4.0]),)]


SQUARE = Exercise(
    title="square",
    cases=_square_cases,
    arguments=lambda x: (x.clone(),),
    reference=lambda x: x * x,
    describe=lambda x: f"x = {x.tolist()}",
    same=close,
    mistakes=[(*DOUBLED, lambda x: 2 * x), (*NEGATED, lambda x: -x * x)],
    fallback=lambda attempt: differs(attempt, "square", "x * x", "compare it with x ** 2."),
)


@checker
def check_square(fn):
    return run(SQUARE, fn)


def test_the_reference_passes_and_prints_one_line(capsys):
    def my_square(x):
        return x ** 2

    assert check_square(my_square) is True
    assert capsys.readouterr().out == "✓ square (my_square): correct on 2 cases\n"
    assert check_square(my_square, hint=True) is True  # a hint changes nothing on success
    assert capsys.readouterr().out == "✓ square (my_square): correct on 2 cases\n"


@pytest.mark.parametrize("wrong, message", [
    (lambda x: x + x, DOUBLED),
    (lambda x: -(x ** 2), NEGATED),
])
def test_a_named_mistake_is_reported_in_its_own_words(wrong, message, both_passes):
    failure = both_passes(check_square, wrong)
    assert (failure.diagnosis, failure.fix) == message


def test_the_first_pass_says_what_is_wrong_and_the_second_adds_the_fix():
    def my_square(x):
        return x + x

    with pytest.raises(CheckFailed) as first:
        check_square(my_square)
    assert str(first.value) == ("you double x instead of squaring it.\n"
                                "Stuck? check_square(my_square, hint=True) shows the fix.")
    with pytest.raises(CheckFailed) as second:
        check_square(my_square, hint=True)
    assert str(second.value) == "you double x instead of squaring it.\nFix: x * x, or x ** 2."
    assert second.value.__cause__ is None and second.value.__suppress_context__


def test_a_report_keeps_the_diagnosis_only():
    first = "you double x instead of squaring it.\nStuck? check_square(f, hint=True) shows the fix."
    second = "you double x instead of squaring it.\nFix: x * x, or x ** 2."
    assert diagnosis_only(first) == diagnosis_only(second) == "you double x instead of squaring it."
    raised = "your function raised ValueError: no (on x = [1.0])"
    assert diagnosis_only(raised) == raised


def test_run_alone_raises_the_diagnosis_with_its_fix():
    with pytest.raises(CheckFailed) as info:  # no checker around run: nothing to ask for
        run(SQUARE, lambda x: 2 * x)
    assert str(info.value) == f"{DOUBLED[0]}\n{FIX_PREFIX}{DOUBLED[1]}"


def test_a_mistake_written_as_one_message_still_works(both_passes):
    old_style = Exercise(
        title="square", cases=_square_cases, reference=SQUARE.reference, describe=SQUARE.describe,
        same=close, mistakes=[("you double x.", lambda x: 2 * x)], fallback=SQUARE.fallback,
    )

    @checker
    def check_old_style(fn):
        return run(old_style, fn)

    failure = both_passes(check_old_style, lambda x: 2 * x)
    assert (str(failure), failure.fix) == ("you double x.", "")


def test_a_mistake_seen_only_on_the_wrong_cases_is_still_named():
    def doubles_when_it_starts_negative(x):
        return 2 * x if x[0] < 0 else x * x  # right on the first case, doubled on the second

    with pytest.raises(CheckFailed) as info:
        check_square(doubles_when_it_starts_negative)
    assert info.value.diagnosis == DOUBLED[0]


def test_an_unknown_mistake_falls_back_to_where_and_by_how_much():
    with pytest.raises(CheckFailed) as info:
        check_square(lambda x: x * x + 0.5, hint=True)
    assert str(info.value) == (
        "your square differs from x * x by up to 0.5 on x = [1.0, 2.0, 3.0].\n"
        "Fix: compare it with x ** 2."
    )


def test_an_exception_in_the_learners_code_names_the_case_and_the_learners_line():
    def my_square(x):
        y = x.sqaure()  # a typo the learner might make
        return y

    with pytest.raises(CheckFailed) as info:
        check_square(my_square)
    message = str(info.value)
    assert message.startswith("your function raised AttributeError: ")
    assert "(on x = [1.0, 2.0, 3.0]; line " in message
    assert message.endswith("in my_square: y = x.sqaure()  # a typo the learner might make)")
    assert "harness" not in message


def test_a_lesson_checker_points_at_the_learners_line_not_at_its_own_files():
    # Lesson 9's checker hands over watched scores: the error is raised inside the checker's own
    # __torch_function__ (checks/l09.py), but the line to show is the learner's.
    def my_online_softmax(s, v, chunk_size):
        return s @ v.T  # (n_q, n_kv) @ (d_v, n_kv): the shapes do not match

    with pytest.raises(CheckFailed) as info:
        checks.check_online_softmax(my_online_softmax)
    message = str(info.value)
    assert "raised RuntimeError" in message
    assert message.endswith("in my_online_softmax: return s @ v.T  # (n_q, n_kv) @ (d_v, n_kv): "
                            "the shapes do not match)")


def test_a_value_instead_of_a_function_is_refused():
    with pytest.raises(CheckFailed, match="pass the name without calling it"):
        check_square(torch.tensor([1.0]))


def test_notice_comes_before_the_mistakes_and_review_sees_every_answer():
    seen = []

    def review(answers, cases):
        seen.append(len(answers))
        return answers

    noticed = Exercise(
        title="square", cases=_square_cases, reference=SQUARE.reference, describe=SQUARE.describe,
        same=close, mistakes=SQUARE.mistakes, fallback=SQUARE.fallback, review=review,
        notice=lambda attempt: f"{len(attempt.wrong)} of {len(attempt.cases)} cases are wrong.",
    )
    with pytest.raises(CheckFailed, match="^2 of 2 cases are wrong.$"):
        run(noticed, lambda x: 2 * x)
    assert seen == [2]


# Each lesson's checkers: checks/lNN.py, and a module of its own for a long lesson (l04_...).
CHECK_MODULES = sorted(p.stem for p in Path(checks.__file__).parent.glob("l[0-9][0-9]*.py"))


def test_the_package_exports_every_checker_in_lesson_order():
    names = [name for name in checks.__all__ if name.startswith("check_")]
    assert checks.__all__[0] == "CheckFailed"
    modules = [importlib.import_module(f"encoderlab.course.checks.{m}") for m in CHECK_MODULES]
    exported = sorted(name for module in modules for name in module.__all__)
    assert sorted(names) == exported  # every lesson's checkers, each once
    assert all(callable(getattr(checks, name)) for name in names)
    lessons = [getattr(checks, name).__module__.rsplit(".", 1)[-1] for name in names]
    assert lessons == sorted(lessons)


# --- Every lesson's checkers: two passes, and named mistakes split into diagnosis and fix ------

_LESSONS = [importlib.import_module(f"encoderlab.course.checks.{name}") for name in CHECK_MODULES]


def _named_mistakes():
    """(where, entry) for every named mistake of every lesson: the module-level lists
    ``*_MISTAKES`` and the mistakes of every module-level Exercise."""
    seen = set()
    for module in _LESSONS:
        lists = [(name, value) for name, value in vars(module).items()
                 if name.endswith("_MISTAKES") and isinstance(value, list)]
        lists += [(name, list(value.mistakes)) for name, value in vars(module).items()
                  if isinstance(value, Exercise)]
        for name, entries in lists:
            for k, entry in enumerate(entries):
                if id(entry) not in seen:
                    seen.add(id(entry))
                    yield f"{module.__name__.rsplit('.', 1)[-1]}.{name}[{k}]", entry


def test_every_named_mistake_has_a_diagnosis_and_a_one_line_fix():
    entries = list(_named_mistakes())
    assert len(entries) > 100  # ten lessons' worth: the walk found them
    for where, entry in entries:
        assert len(entry) == 3, f"{where}: write it as (diagnosis, fix, wrong)"
        diagnosis, fix, wrong = entry
        assert callable(wrong), where
        for text in (diagnosis, fix):
            assert isinstance(text, str) and text.strip() and "\n" not in text, where
            assert text.endswith((".", ")")), f"{where}: {text!r} is not a sentence"
        assert fix not in diagnosis, f"{where}: the diagnosis gives the fix away"


def test_every_checker_takes_hint_and_says_how_to_see_the_fix():
    names = [name for name in checks.__all__ if name.startswith("check_")]
    for name in names:
        parameter = inspect.signature(getattr(checks, name)).parameters.get("hint")
        assert parameter is not None and parameter.default is False, name
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, name

"""The one loop every checker runs, and the helpers its messages share.

A checker is an :class:`Exercise`: its cases, the reference answer, the usual mistakes written as
wrong versions of the function with one sentence each, and the message to give when no mistake
fits. :func:`run` does the rest, the same way for every exercise:

1. refuse anything that is not a function (``check_attention(my_attention())`` is a common slip);
2. build the cases (fixed seed) and call the learner's function on each; an exception becomes a
   :class:`CheckFailed` that names the case and the learner's line;
3. read each return value (``answer``), which says what to return when it is unusable;
4. compare with the reference; if every case agrees, print one line and return True;
5. otherwise name the first mistake whose wrong version reproduces the learner's answers, or fall
   back to a message that says where and by how much the answers differ.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CheckFailed",
    "Exercise",
    "Attempt",
    "run",
    "require_callable",
    "call",
    "name_of",
    "success",
    "as_tensor",
    "close",
    "differs",
    "short_value",
    "require_bool_masks",
    "mask_difference",
    "first_mask_difference",
    "square_mask_exercise",
]

ATOL, RTOL = 1e-5, 1e-4  # float32 rounding, with room for a different order of operations
_CHECKS_FOLDER = Path(__file__).resolve().parent  # frames in these files are not the learner's


class CheckFailed(AssertionError):
    """A checker found a mistake; the message says what is wrong and how to fix it."""


# --- The exercise and its run --------------------------------------------------------------------


def _unchanged(*case):
    return case


def _as_returned(result, where, *case):
    return result


@dataclass(frozen=True)
class Exercise:
    """What one checker knows: its cases, the right answer, the usual mistakes.

    :func:`run` uses the fields in this order: ``cases``, then for each case ``arguments`` (the
    learner's copies) and ``answer`` (the return value read), ``review`` (all answers at once),
    ``reference`` and ``same``; on a wrong answer ``notice``, then ``mistakes`` (each run on
    ``mistake_inputs`` and compared with ``same_mistake``), then ``fallback``. Every function
    field takes a case unpacked, ``f(*case)``; ``where`` is the case in words, as the messages
    name it (``describe``).
    """

    title: str  # printed on success: "✓ {title} (my_fn): correct on 10 cases"
    cases: Callable[[], list[tuple]]  # the cases, built afresh (fixed seed) on every run
    reference: Callable  # reference(*case): the right answer, comparable with an answer
    describe: Callable[..., str]  # describe(*case): the case in words
    fallback: Callable[[Attempt], str]  # the message when no named mistake fits
    mistakes: Sequence[tuple[str, Callable]] = ()  # (message, wrong(*inputs)) in order of trial
    arguments: Callable[..., tuple] = _unchanged  # arguments(*case): what the learner receives
    answer: Callable = _as_returned  # answer(result, where, *case): the value to compare
    review: Callable[[list, list], list] | None = None  # review(answers, cases), all at once
    same: Callable[[Any, Any], bool] = torch.equal  # same(answer, reference)
    same_mistake: Callable[[Any, Any], bool] | None = None  # same(answer, wrong's); default same
    mistake_inputs: Callable[..., tuple] = _unchanged  # mistake_inputs(*case): a wrong's input
    notice: Callable[[Attempt], str | None] | None = None  # a message tried before the mistakes
    numbered: bool = False  # name cases "case k (...)" rather than by their contents

    def where(self, k: int, case: tuple) -> str:
        if not self.numbered:
            return self.describe(*case)
        details = self.describe(*case)
        return f"case {k}" + (f" ({details})" if details else "")


@dataclass
class Attempt:
    """One run of a checker: the cases, the learner's answers, the references, the wrong ones."""

    exercise: Exercise
    cases: list[tuple]
    answers: list
    references: list
    wrong: list[int]  # indices of the cases answered wrongly, in order

    @property
    def first(self) -> int:
        return self.wrong[0]

    def where(self, k: int) -> str:
        return self.exercise.where(k, self.cases[k])


def run(exercise: Exercise, fn: Callable) -> bool:
    """Check ``fn`` on ``exercise``'s cases: True (and one printed line), or a CheckFailed."""
    require_callable(fn)
    cases = exercise.cases()
    answers = []
    for k, case in enumerate(cases):
        where = exercise.where(k, case)
        result = call(fn, exercise.arguments(*case), where)
        answers.append(exercise.answer(result, where, *case))
    if exercise.review is not None:
        answers = exercise.review(answers, cases)
    references = [exercise.reference(*case) for case in cases]
    wrong = [k for k, (mine, right) in enumerate(zip(answers, references, strict=True))
             if not exercise.same(mine, right)]
    if not wrong:
        return success(exercise.title, fn, len(cases))
    attempt = Attempt(exercise, cases, answers, references, wrong)
    message = exercise.notice(attempt) if exercise.notice is not None else None
    raise CheckFailed(message or _diagnose(attempt) or exercise.fallback(attempt))


def _diagnose(attempt: Attempt) -> str | None:
    """The message of the first known mistake that reproduces the learner's answers.

    A mistake that matches on every case is the surest diagnosis; failing that, one that matches
    on every case where the learner went wrong.
    """
    exercise = attempt.exercise
    same = exercise.same_mistake or exercise.same
    inputs = [exercise.mistake_inputs(*case) for case in attempt.cases]
    for subset in (range(len(inputs)), attempt.wrong):
        for message, mistake in exercise.mistakes:
            if all(same(attempt.answers[k], mistake(*inputs[k])) for k in subset):
                return message
    return None


# --- Calling the learner's function --------------------------------------------------------------


def name_of(fn) -> str:
    """The name a message gives the learner's function."""
    return getattr(fn, "__name__", type(fn).__name__)


def _learner_line(error: Exception) -> str:
    """'; line 4 in my_attention: s = q @ k.T' for the last frame outside torch and the checks."""
    frames = [
        f for f in traceback.extract_tb(error.__traceback__)
        if "-packages" not in f.filename  # site- or dist-packages
        and Path(f.filename).resolve().parent != _CHECKS_FOLDER
    ]
    if not frames:
        return ""
    frame = frames[-1]
    return f"; line {frame.lineno} in {frame.name}: {(frame.line or '').strip()}"


def call(fn: Callable, args: tuple, where: str):
    """Call the learner's function; any exception becomes a CheckFailed naming the case."""
    try:
        return fn(*args)
    except Exception as error:  # the learner's bug, reported in words rather than a raw traceback
        line = _learner_line(error)
        raise CheckFailed(
            f"your function raised {type(error).__name__}: {error} (on {where}{line})"
        ) from None


def require_callable(fn) -> None:
    if not callable(fn):
        raise CheckFailed(f"expected your function itself, got a {type(fn).__name__}: "
                          "pass the name without calling it, e.g. check_attention(my_attention).")


def success(title: str, fn, n_cases: int) -> bool:
    print(f"✓ {title} ({name_of(fn)}): correct on {n_cases} cases")
    return True


# --- Reading and comparing answers ---------------------------------------------------------------


def as_tensor(value, what: str) -> torch.Tensor:
    """A learner's return value as a tensor (numpy arrays are accepted and converted)."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(
            f"your function returned a {type(value).__name__}, not a tensor: return {what}."
        ) from None


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and the same numbers up to float32 rounding (NaN equals NaN)."""
    return a.shape == b.shape and torch.allclose(
        a.double(), b.double(), atol=ATOL, rtol=RTOL, equal_nan=True
    )


def differs(attempt: Attempt, noun: str, formula: str, hint: str, *, answer=None,
            where: str | None = None) -> str:
    """The last-resort message: no known mistake fits, so say by how much and where.

    It reads the first wrong case; ``answer`` replaces the learner's answer there (cleaned up),
    ``where`` the case's description.
    """
    first = attempt.first
    mine = attempt.answers[first] if answer is None else answer
    difference = (mine - attempt.references[first]).abs().max().item()
    where = attempt.where(first) if where is None else where
    return f"your {noun} differs from {formula} by up to {difference:.3g} on {where}; {hint}"


def short_value(value, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- Masks (Lessons 3 and 10) --------------------------------------------------------------------


def require_bool_masks(returned: list[torch.Tensor]) -> None:
    """Masks in this course are boolean, True = may attend; say how to get there from the dtype."""
    wrong = [m for m in returned if m.dtype != torch.bool]
    if not wrong:
        return
    if any(m.is_floating_point() and bool(torch.isinf(m).any()) for m in wrong):
        raise CheckFailed(
            f"your mask looks additive (0 and -inf, dtype {wrong[0].dtype}); return the boolean "
            "form, True = may attend: attention turns it into 0 / -inf itself (masks.to_additive)."
        )
    raise CheckFailed(
        f"your mask has dtype {wrong[0].dtype}, but masks in this course are boolean "
        "(True = may attend): build it with dtype=torch.bool or convert it with .bool()."
    )


def square_masks(answers: list, cases: list, *, describe: Callable[..., str], rule: str) -> list:
    """Review (n, n) masks, case = (n, ...): boolean first, then square; ``rule`` says what the
    mask is, with ``{square}`` standing for (n, n)."""
    require_bool_masks(answers)
    for m, case in zip(answers, cases, strict=True):
        n = case[0]
        if tuple(m.shape) != (n, n):
            raise CheckFailed(f"your mask has shape {tuple(m.shape)} for {describe(*case)}; "
                              + rule.format(square=(n, n)))
    return answers


def square_mask_answer(result, where, *case) -> torch.Tensor:
    """The learner's (n, n) mask as a tensor on the CPU (its dtype is reviewed with the rest)."""
    return as_tensor(result, "a boolean tensor of shape (n, n)").cpu()


def mask_difference(mine: torch.Tensor, reference: torch.Tensor, where: str) -> str:
    """One sentence locating the first cell where two masks of the same shape disagree."""
    differ = mine != reference
    index = tuple(int(x) for x in differ.nonzero()[0])
    i, j = index[-2], index[-1]
    return (
        f"your mask differs from the reference in {int(differ.sum())} of {differ.numel()} cells "
        f"on {where}; the first is query i={i}, key j={j}: yours says {bool(mine[index])}, the "
        f"reference {bool(reference[index])} (True = may attend)."
    )


def first_mask_difference(attempt: Attempt) -> str:
    """The fallback of the mask checkers: where the first wrong mask differs from the reference."""
    first = attempt.first
    return mask_difference(attempt.answers[first], attempt.references[first], attempt.where(first))


def square_mask_exercise(*, title: str, cases: Callable[[], list[tuple]], reference: Callable,
                         describe: Callable[..., str], rule: str,
                         mistakes: Sequence[tuple[str, Callable]]) -> Exercise:
    """An exercise whose answer is one (n, n) boolean mask per case (n, ...): Lesson 3's causal
    mask, Lesson 10's prefix-LM mask. ``rule`` says what the mask is, ``{square}`` = (n, n)."""
    return Exercise(
        title=title,
        cases=cases,
        answer=square_mask_answer,
        review=partial(square_masks, describe=describe, rule=rule),
        reference=reference,
        describe=describe,
        mistakes=mistakes,
        fallback=first_mask_difference,
    )

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

Every message comes in two parts, so that a learner can still work the fix out: the *diagnosis*
(what is wrong: which case, what was expected and what came back, which usual mistake it looks
like) and the one-line *fix*. A check function is wrapped in :func:`checker`, which gives it a
keyword ``hint=False``: the first pass shows the diagnosis and a last line saying how to see the
fix; ``hint=True`` adds the fix. A message is written as a :data:`Message`: a diagnosis alone, or
a pair ``(diagnosis, fix)``; a named mistake is ``(diagnosis, fix, wrong)``.

Two wrappers put rules around the learner's function before :func:`run` calls it:
:func:`forbidding` fails a call to a function the exercise asks the learner to write (Lesson 3's
attention, Lesson 4's block), :func:`leaving_inputs` fails a change of an argument in place.

When a class is graded, a check runs in two processes (:mod:`.record`): in the submission's
kernel, :func:`run` and :func:`call` record each answer instead of judging it; in the grader, a
:class:`Replay` stands in for the learner's function and :func:`run` judges the recorded answers
with checkers the submission never touched.
"""

from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CheckFailed",
    "Message",
    "FIX_PREFIX",
    "checker",
    "diagnosis_only",
    "Exercise",
    "Attempt",
    "run",
    "require_callable",
    "call",
    "forbidding",
    "ForbiddenCall",
    "leaving_inputs",
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
    "Replay",
    "Recorded",
    "replayed",
    "ANSWER_TYPES",
    "answer_type",
]

ATOL, RTOL = 1e-5, 1e-4  # float32 rounding, with room for a different order of operations
_CHECKS_FOLDER = Path(__file__).resolve().parent  # frames in these files are not the learner's


FIX_PREFIX = "Fix: "  # begins the fix's line in a message shown with hint=True
_STUCK = "Stuck? {call} shows the fix."  # the last line of a first-pass message that has a fix

Message = str | tuple[str, str]  # a diagnosis, or (diagnosis, one-line fix)


class CheckFailed(AssertionError):
    """A checker found a mistake: ``diagnosis`` says what is wrong, ``fix`` (possibly empty) how
    to put it right, in one line.

    Raised from inside a check, its text is the diagnosis and the fix; the check function's
    :func:`checker` wrapper raises it again with the text the learner asked for (``hint``).
    """

    def __init__(self, diagnosis: str, fix: str = "", *, text: str | None = None):
        self.diagnosis = diagnosis
        self.fix = fix
        super().__init__(text if text is not None else _with_fix(diagnosis, fix))

    @classmethod
    def of(cls, message: Message) -> CheckFailed:
        """The failure that a :data:`Message` (a diagnosis, or a pair) describes."""
        return cls(message) if isinstance(message, str) else cls(*message)

    def told(self, check: str, fn, hint: bool) -> CheckFailed:
        """The same failure, worded for the learner: with the fix if ``hint``, else with a last
        line that says how to see it (``check``: the check function's name)."""
        if hint or not self.fix:
            text = _with_fix(self.diagnosis, self.fix)
        else:
            who = name_of(fn) if callable(fn) else "your_function"
            text = f"{self.diagnosis}\n" + _STUCK.format(call=f"{check}({who}, hint=True)")
        return CheckFailed(self.diagnosis, self.fix, text=text)


def _with_fix(diagnosis: str, fix: str) -> str:
    return f"{diagnosis}\n{FIX_PREFIX}{fix}" if fix else diagnosis


def diagnosis_only(text: str) -> str:
    """A check's message without its second-look lines (the fix, or how to see it): what a
    report keeps."""
    lines = text.split("\n")
    prefix, suffix = _STUCK.split("{call}")
    while len(lines) > 1 and (lines[-1].startswith(FIX_PREFIX)
                              or (lines[-1].startswith(prefix) and lines[-1].endswith(suffix))):
        lines.pop()
    return "\n".join(lines)


def checker(check: Callable[..., bool]) -> Callable[..., bool]:
    """Give a check function its two passes: ``check(fn, ..., hint=False)``.

    A failure first says what is wrong, ending with a line on how to see the fix; called again
    with ``hint=True``, the same check adds the one-line fix. Success is unchanged.
    """

    @functools.wraps(check)
    def with_hint(fn, *args, hint: bool = False, **kwargs):
        try:
            return check(fn, *args, **kwargs)
        except CheckFailed as failure:
            raise failure.told(check.__name__, fn, hint) from None

    signature = inspect.signature(check)
    keyword = inspect.Parameter("hint", inspect.Parameter.KEYWORD_ONLY, default=False,
                                annotation=bool)
    with_hint.__signature__ = signature.replace(
        parameters=[*signature.parameters.values(), keyword])
    return with_hint


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
    fallback: Callable[[Attempt], Message]  # the message when no named mistake fits
    # (diagnosis, fix, wrong(*inputs)) in order of trial; (message, wrong) is read too
    mistakes: Sequence[tuple] = ()
    arguments: Callable[..., tuple] = _unchanged  # arguments(*case): what the learner receives
    answer: Callable = _as_returned  # answer(result, where, *case): the value to compare
    review: Callable[[list, list], list] | None = None  # review(answers, cases), all at once
    same: Callable[[Any, Any], bool] = torch.equal  # same(answer, reference)
    same_mistake: Callable[[Any, Any], bool] | None = None  # same(answer, wrong's); default same
    mistake_inputs: Callable[..., tuple] = _unchanged  # mistake_inputs(*case): a wrong's input
    notice: Callable[[Attempt], Message | None] | None = None  # tried before the mistakes
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
    replay = _replay_of(fn)
    answers = []
    for k, case in enumerate(cases):
        where = exercise.where(k, case)
        if replay is not None:  # graded: the answer was computed in the submission's kernel
            answers.append(replay.take("answer", where))
            continue
        result = _call(fn, exercise.arguments(*case), where)
        answers.append(exercise.answer(result, where, *case))
        if _recording is not None:
            _recording.add("answer", answers[-1])
    if _recording is not None:
        raise Recorded  # the grader judges; nothing more to do in the submission's kernel
    if exercise.review is not None:
        answers = exercise.review(answers, cases)
    references = [exercise.reference(*case) for case in cases]
    wrong = [k for k, (mine, right) in enumerate(zip(answers, references, strict=True))
             if not exercise.same(mine, right)]
    if not wrong:
        return success(exercise.title, fn, len(cases))
    attempt = Attempt(exercise, cases, answers, references, wrong)
    message = exercise.notice(attempt) if exercise.notice is not None else None
    raise CheckFailed.of(message or _diagnose(attempt) or exercise.fallback(attempt))


def _diagnose(attempt: Attempt) -> Message | None:
    """The message of the first known mistake that reproduces the learner's answers.

    A mistake that matches on every case is the surest diagnosis; failing that, one that matches
    on every case where the learner went wrong.
    """
    exercise = attempt.exercise
    same = exercise.same_mistake or exercise.same
    inputs = [exercise.mistake_inputs(*case) for case in attempt.cases]
    for subset in (range(len(inputs)), attempt.wrong):
        for *message, mistake in exercise.mistakes:
            if all(same(attempt.answers[k], mistake(*inputs[k])) for k in subset):
                return message[0] if len(message) == 1 else tuple(message)
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
    """Call the learner's function; any exception becomes a CheckFailed naming the case.

    For checkers that call the function themselves, outside :func:`run`; graded, the result is
    recorded, or replayed, like :func:`run`'s answers."""
    replay = _replay_of(fn)
    if replay is not None:
        return replay.take("result", where)
    result = _call(fn, args, where)
    if _recording is not None:
        _recording.add("result", result)
    return result


def _call(fn: Callable, args: tuple, where: str):
    try:
        return fn(*args)
    except CheckFailed:  # already worded, by a guard around fn (forbidding)
        raise
    except Exception as error:  # the learner's bug, reported in words rather than a raw traceback
        line = _learner_line(error)
        raise CheckFailed(
            f"your function raised {type(error).__name__}: {error} (on {where}{line})"
        ) from None


# --- Grading: answers recorded in the submission's kernel, judged in the grader -----------------


class Recorded(BaseException):  # noqa: N818 (a signal, not an error)
    """Ends :func:`run` in the submission's kernel once every answer is recorded. A
    BaseException, so that no ``except Exception`` in a checker or a wrapper stops it."""


_recording = None  # while recording (record.record): an object with add(kind, value)


def start_recording(log) -> None:
    """From now on, :func:`run` and :func:`call` hand each answer to ``log.add(kind, value)``."""
    global _recording
    _recording = log


def stop_recording() -> None:
    global _recording
    _recording = None


class Replay:
    """Stands in for the learner's function in the grader: the answers its calls gave in the
    submission's kernel, in order, and the failure that stopped them there, if any.

    :func:`run` and :func:`call` take the answers from it instead of calling anything; the
    wrappers a checker puts around it (which keep it as ``__wrapped__``) are not called.
    """

    def __init__(self, name: str, entries: Sequence[tuple[str, Any]],
                 failure: tuple[str, str] | None):
        self.__name__ = name
        self.entries = list(entries)  # (kind, value): kind "answer" (run) or "result" (call)
        self.failure = failure  # (diagnosis, fix) of a CheckFailed raised there
        self.taken = 0

    def __call__(self, *args, **kwargs):
        raise CheckFailed("this check called the function outside run() and call(), so its "
                          "answers could not be replayed.")

    def take(self, kind: str, where: str):
        """The next recorded answer, which must be of ``kind``; at the end, the failure."""
        if self.taken == len(self.entries):
            if self.failure is not None:
                raise CheckFailed(*self.failure)
            raise CheckFailed(f"no answer was recorded for {where}: the check stopped early "
                              "in the submission's kernel.")
        recorded_kind, value = self.entries[self.taken]
        self.taken += 1
        if recorded_kind != kind:
            raise CheckFailed(f"the answers recorded in the submission's kernel do not follow "
                              f"the checker's cases (at {where}).")
        return value


def replayed(fn) -> bool:
    """True in the grader, where ``fn`` stands for a function that ran in the submission's
    kernel: what it did there (calls, budgets) was watched there; only its answers are here."""
    return _replay_of(fn) is not None


def _replay_of(fn) -> Replay | None:
    """The :class:`Replay` behind ``fn`` and its wrappers, if it is one."""
    seen = 0
    while seen < 32 and not isinstance(fn, Replay):
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return fn if isinstance(fn, Replay) else None


ANSWER_TYPES: dict[str, type] = {}  # answer classes a recording may hold, by name


def answer_type(cls: type) -> type:
    """Register a dataclass that answers are made of, so that a recording can carry it."""
    ANSWER_TYPES[cls.__qualname__] = cls
    return cls


class ForbiddenCall(Exception):
    """Raised by a function that an exercise forbids, while the learner's function runs."""


def forbidding(fn: Callable, forbidden: Sequence[tuple[Any, str, str]], fix: str) -> Callable:
    """``fn`` run with the functions an exercise asks the learner to write themselves forbidden.

    ``forbidden`` lists ``(owner, attribute, name in messages)``, e.g.
    ``(F, "scaled_dot_product_attention", "F.scaled_dot_product_attention")``. While ``fn`` runs,
    each one, and any name in ``fn``'s own module (a notebook's namespace) bound to the same
    object, is replaced by a stub that notes the call and raises :class:`ForbiddenCall`; all are
    restored afterwards. A noted call fails the check even if ``fn`` caught the exception:
    "you called X, which this exercise asks you to write yourself", with ``fix``.
    """
    namespace = getattr(fn, "__globals__", {})

    def refuse(name, called):
        def stub(*args, **kwargs):
            called.append(name)
            raise ForbiddenCall(f"{name} is not allowed in this exercise")
        return stub

    @functools.wraps(fn)
    def guarded(*args):
        called, saved = [], []
        try:
            for owner, attribute, name in forbidden:
                original = getattr(owner, attribute)
                saved.append((owner, attribute, original))
                setattr(owner, attribute, refuse(name, called))
                for key, value in list(namespace.items()):
                    if value is original:
                        saved.append((namespace, key, original))
                        namespace[key] = refuse(name, called)
            try:
                result = fn(*args)
            except Exception:  # ForbiddenCall, or what followed a caught one
                if not called:
                    raise
                result = None
        finally:
            for owner, attribute, original in reversed(saved):
                if isinstance(owner, dict):
                    owner[attribute] = original
                else:
                    setattr(owner, attribute, original)
        if called:
            raise CheckFailed(f"you called {called[0]}, which this exercise asks you to write "
                              "yourself.", fix)
        return result

    return guarded


def leaving_inputs(fn: Callable, names: Sequence[str]) -> Callable:
    """``fn`` checked for leaving its tensor arguments as they were: changing one in place fails
    ("your function changed input_ids in place"), since its caller still needs it. ``names``
    are the arguments' names in messages, in order. Wrap the learner's function last, outside
    :func:`forbidding` (which reads the learner's own module from ``fn``)."""

    @functools.wraps(fn)
    def careful(*args):
        before = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
        result = fn(*args)
        for name, old, new in zip(names, before, args, strict=False):
            if old is not None and not torch.equal(old, new):
                raise CheckFailed(f"your function changed {name} in place.",
                                  f"work on a copy: {name}.clone().")
        return result

    return careful


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
        raise CheckFailed(f"your function returned a {type(value).__name__}, not a tensor.",
                          f"return {what}.") from None


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and the same numbers up to float32 rounding (NaN equals NaN)."""
    return a.shape == b.shape and torch.allclose(
        a.double(), b.double(), atol=ATOL, rtol=RTOL, equal_nan=True
    )


def differs(attempt: Attempt, noun: str, formula: str, hint: str, *, answer=None,
            where: str | None = None) -> tuple[str, str]:
    """The last-resort message: no known mistake fits, so say by how much and where; ``hint``
    (what to compare, step by step) is its fix.

    It reads the first wrong case; ``answer`` replaces the learner's answer there (cleaned up),
    ``where`` the case's description.
    """
    first = attempt.first
    mine = attempt.answers[first] if answer is None else answer
    difference = (mine - attempt.references[first]).abs().max().item()
    where = attempt.where(first) if where is None else where
    return f"your {noun} differs from {formula} by up to {difference:.3g} on {where}.", hint


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
            f"your mask looks additive (0 and -inf, dtype {wrong[0].dtype}), but masks in this "
            "course are boolean (True = may attend).",
            "return the boolean form: attention turns it into 0 / -inf itself "
            "(masks.to_additive).",
        )
    raise CheckFailed(
        f"your mask has dtype {wrong[0].dtype}, but masks in this course are boolean "
        "(True = may attend).",
        "build it with dtype=torch.bool, or convert it with .bool().",
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
                         mistakes: Sequence[tuple]) -> Exercise:
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

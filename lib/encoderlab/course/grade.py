"""Grade submitted notebooks: run each one offline, cell by cell, and report every exercise.

``python -m encoderlab grade SUBMISSION.ipynb ... [--csv FILE]`` executes each submission in a
fresh Jupyter kernel, with the Hugging Face hub switched off, under a time limit per notebook
and per cell, and prints a table per notebook: for every exercise, *passed* (its check cell ran
without an error), *failed* (with the checker's diagnosis, without the fix a learner sees on a
second look, or the error's last line), *not attempted* (the stub still raises
``NotImplementedError``), *manual* (a written answer, graded by hand) or *not run* (the notebook
stopped before its check). A file that is not a notebook, a notebook that crashes its kernel
and one that hangs each get one clear line; the run goes on to the next submission. ``--csv``
writes one row per (submission, exercise) for a class. The exit status is 0 unless the command
line itself is wrong.

Errors do not stop a notebook: a check that fails is recorded and the next cells still run, so
every exercise is graded. When the published lessons are at hand (``lessons/``), the grader
recognises the submission's lesson, lists every exercise of that lesson (so a deleted exercise
shows up as not attempted) and runs the lesson's own check code in place of the submission's
check cells, so an edited check cell cannot pass by itself. The submissions' code runs with the
grader's permissions: grade untrusted notebooks in a container or a throwaway machine.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from time import monotonic

from encoderlab.course.checks.harness import diagnosis_only
from encoderlab.course.student import (
    ANSWER_PROMPT,
    ANSWER_TAG,
    Exercise,
    LessonStructure,
    default_root,
    lesson_title,
    read_structure,
)

__all__ = [
    "PASSED",
    "FAILED",
    "NOT_ATTEMPTED",
    "MANUAL",
    "NOT_RUN",
    "OFFLINE_ENV",
    "ExerciseResult",
    "Report",
    "grade_notebook",
    "format_report",
    "write_csv",
    "main",
]

PASSED, FAILED, NOT_ATTEMPTED, MANUAL, NOT_RUN = (
    "passed", "failed", "not attempted", "manual", "not run"
)
# The kernel runs offline: load_minilm() takes the installed weights, never the hub.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "ENCODERLAB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}
CSV_COLUMNS = ("submission", "lesson", "exercise", "title", "status", "points", "message")
_MESSAGE_CHARS = 400  # a report line, not a traceback


@dataclass
class ExerciseResult:
    """The verdict on one exercise of one submission."""

    label: str
    title: str
    status: str  # PASSED, FAILED, NOT_ATTEMPTED, MANUAL or NOT_RUN
    message: str = ""

    @property
    def points(self) -> int | None:
        """1 for passed, 0 for any other automatic verdict, None for a written answer."""
        if self.status == MANUAL:
            return None
        return 1 if self.status == PASSED else 0


@dataclass
class Report:
    """Everything the grader found out about one submission."""

    submission: str  # the path as given on the command line
    lesson: str | None = None  # the published lesson it was matched with, e.g. "03-..."
    title: str | None = None  # e.g. "Lesson 3 — Bidirectional Self-Attention"
    results: list[ExerciseResult] = field(default_factory=list)
    problem: str | None = None  # why it could not be graded, or run to the end
    notes: list[str] = field(default_factory=list)  # errors outside the exercises, and the like

    @property
    def score(self) -> int:
        return sum(r.points or 0 for r in self.results)

    @property
    def possible(self) -> int:
        return sum(r.points is not None for r in self.results)


# --- Reading a submission --------------------------------------------------------------------


def _one_line(text: str) -> str:
    """A message on one line, cut to a readable length."""
    text = " ".join(str(text).split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


def _read_submission(path: Path):
    """(notebook, None), or (None, the reason it is not a notebook we can run)."""
    import nbformat

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "no such file"
    except IsADirectoryError:
        return None, "not a notebook: a folder"
    except UnicodeDecodeError:
        return None, "not a notebook: not UTF-8 text (a binary file?)"
    except OSError as error:
        return None, f"cannot read it: {error.strerror or error}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return None, (f"not a notebook: invalid JSON at line {error.lineno}, column "
                      f"{error.colno} ({error.msg})")
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or (
        "nbformat" not in data
    ):
        return None, "not a notebook: JSON without a notebook's 'nbformat' and 'cells' fields"
    if data["nbformat"] != 4:
        return None, (f"not a notebook this grader reads: nbformat {data['nbformat']} "
                      "(open it in Jupyter and save it again, as nbformat 4)")
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat's own complaint, whatever its type
        return None, f"not a notebook: {_one_line(error)}"
    return nb, None


@lru_cache(maxsize=8)
def _lesson_titles(lessons_dir: Path) -> dict[str, Path]:
    """Each published lesson's first heading -> its notebook."""
    import nbformat

    titles = {}
    for path in sorted(lessons_dir.glob("*.ipynb")):
        try:
            title = lesson_title(nbformat.read(path, as_version=4))
        except Exception:  # a lesson being written may not be readable yet; it is not ours
            continue
        if title:
            titles[title] = path
    return titles


def _find_lesson(nb, lessons_dir: Path | None) -> Path | None:
    """The published lesson the submission comes from: named in its metadata, or same title."""
    if lessons_dir is None or not lessons_dir.is_dir():
        return None
    ours = nb.metadata.get("encoderlab")  # student notebooks name their lesson here
    named = ours.get("lesson") if isinstance(ours, dict) else None
    if isinstance(named, str) and (lessons_dir / f"{named}.ipynb").is_file():
        return lessons_dir / f"{named}.ipynb"
    return _lesson_titles(lessons_dir.resolve()).get(lesson_title(nb) or "")


# --- Running it --------------------------------------------------------------------------------


@dataclass
class _CellRun:
    error: tuple[str, str] | None  # (exception name, its message), when the cell raised
    stdout: str


@dataclass
class _Run:
    cells: dict[int, _CellRun] = field(default_factory=dict)  # by cell index: the cells that ran
    stopped: str | None = None  # why the run ended before its last cell


def _quiet_log() -> logging.Logger:
    log = logging.getLogger("encoderlab.course.grade.kernel")
    log.addHandler(logging.NullHandler())
    log.propagate = False  # nbclient logs every timeout and dead kernel; the report says it once
    return log


def _cell_run(cell) -> _CellRun:
    error = next((o for o in cell.outputs if o.output_type == "error"), None)
    stdout = "".join(o.text for o in cell.outputs
                     if o.output_type == "stream" and o.get("name") == "stdout")
    return _CellRun(None if error is None else (error.ename, error.evalue), stdout)


def _execute(nb, *, last: int, cwd: Path, timeout: float, cell_timeout: float,
             kernel: str) -> _Run:
    """Run the code cells up to index ``last``, one by one, going on after errors."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    client = NotebookClient(
        nb,
        kernel_name=kernel,
        allow_errors=True,  # a failing check must not stop the later exercises
        record_timing=False,
        shutdown_kernel="immediate",  # a hanging kernel is killed, not asked to stop
        startup_timeout=120,
        log=_quiet_log(),
    )
    run = _Run()
    kernel_options = {
        "env": {**os.environ, **OFFLINE_ENV},
        "cwd": str(cwd),
        "stdout": subprocess.DEVNULL,  # what the code prints goes to the notebook, not here
        "stderr": subprocess.DEVNULL,
    }
    try:
        with client.setup_kernel(**kernel_options):
            deadline = monotonic() + timeout  # from when the kernel is ready
            for index, cell in enumerate(nb.cells[: last + 1]):
                if cell.cell_type != "code" or not cell.source.strip():
                    continue
                left = deadline - monotonic()
                # Whichever limit comes first: this cell's own, or what is left of the notebook's.
                limit, which = ((cell_timeout, "the limit per cell") if cell_timeout < left
                                else (timeout, "the limit per notebook"))
                if left <= 0:
                    run.stopped = f"timed out after {limit:g} s at cell {index + 1} ({which})"
                    break
                client.timeout = max(1, math.ceil(min(cell_timeout, left)))
                try:
                    client.execute_cell(cell, index)
                except CellTimeoutError:
                    run.stopped = f"timed out after {limit:g} s at cell {index + 1} ({which})"
                    break
                except DeadKernelError:
                    run.stopped = (f"the kernel died at cell {index + 1} (the code crashed or "
                                   "exited Python, or ran out of memory)")
                    break
                run.cells[index] = _cell_run(cell)
    except Exception as error:  # the kernel would not start, or the connection broke
        run.stopped = f"could not run it: {type(error).__name__}: {_one_line(error)}"
    return run


# --- Judging each exercise ---------------------------------------------------------------------


def _check_cells(exercise: Exercise, structure: LessonStructure, nb) -> list[int]:
    """The exercise's check cells: tagged ``check``, else any of its cells calling a checker."""
    if exercise.check_cells:
        return exercise.check_cells
    return [i for i, label in enumerate(structure.cell_exercise)
            if label == exercise.label and nb.cells[i].cell_type == "code"
            and "checks.check_" in nb.cells[i].source]


def _with_lesson_checks(nb, structure: LessonStructure, lesson_nb, lesson: LessonStructure):
    """A copy of ``nb`` whose check cells run the published lesson's check code."""
    nb = copy.deepcopy(nb)
    for exercise in lesson.exercises:
        mine = structure.exercise(exercise.label)
        if mine is None:
            continue
        originals = [lesson_nb.cells[i].source for i in exercise.check_cells]
        for index, source in zip(_check_cells(mine, structure, nb), originals):
            nb.cells[index].source = source
    return nb


def _is_not_implemented(error: tuple[str, str]) -> bool:
    name, message = error
    # The checkers report the learner's exception as "your function raised NotImplementedError".
    return name == "NotImplementedError" or "raised NotImplementedError" in message


def _describe(error: tuple[str, str]) -> str:
    name, message = error
    if name == "CheckFailed":  # the checker's diagnosis, without the fix or how to see it
        return _one_line(diagnosis_only(message))
    return _one_line(f"{name}: {message}" if message else name)


def _written_answer(label: str, structure: LessonStructure, nb) -> str:
    """What the submission's answer cells for ``label`` hold, for the report."""
    answers = [
        cell.source for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        and (cell.metadata.get("exercise") or structure.cell_exercise[i]) == label
        and (ANSWER_TAG in cell.metadata.get("tags", []) or cell.source.startswith(ANSWER_PROMPT))
    ]
    if not answers:
        return "written answer: grade by hand"
    words = sum(len(a.replace(ANSWER_PROMPT, "", 1).split()) for a in answers)
    if not words:
        return "written answer: the answer cell is empty"
    return f"written answer ({words} words): grade by hand"


def _judge(expected: Exercise, structure: LessonStructure, nb, run: _Run) -> ExerciseResult:
    def result(status: str, message: str) -> ExerciseResult:
        return ExerciseResult(expected.label, expected.title, status, message)

    mine = structure.exercise(expected.label)
    if not expected.checked:
        return result(MANUAL, _written_answer(expected.label, structure, nb))
    if mine is None:
        return result(NOT_ATTEMPTED, "the exercise is not in the submission")
    checks = _check_cells(mine, structure, nb)
    if not checks:
        return result(FAILED, "its check cell was deleted: restore the cell that calls "
                      + ", ".join(f"checks.{name}" for name in expected.checkers))
    if any(i not in run.cells for i in checks):
        return result(NOT_RUN, run.stopped or "its check cell did not run")
    failing = next((i for i in checks if run.cells[i].error), None)
    if failing is None:
        printed = [line for i in checks for line in run.cells[i].stdout.splitlines()]
        ticks = [line for line in printed if line.startswith("✓")]
        return result(PASSED, _one_line((ticks or printed or ["its check passed"])[-1]))
    own = [
        (i, run.cells[i].error) for i, label in enumerate(structure.cell_exercise)
        if label == expected.label and i < failing and i not in checks
        and i in run.cells and run.cells[i].error
    ]
    if own:
        index, error = own[0]
        if _is_not_implemented(error):
            return result(NOT_ATTEMPTED, "the stub still raises NotImplementedError")
        return result(FAILED, f"cell {index + 1} raised {_describe(error)}")
    error = run.cells[failing].error
    if _is_not_implemented(error):
        return result(NOT_ATTEMPTED, "the stub still raises NotImplementedError")
    return result(FAILED, _describe(error))


def _outside_errors(structure: LessonStructure, run: _Run) -> list[str]:
    errors = [
        f"cell {i + 1} (outside the exercises) raised {_describe(cell.error)}"
        for i, cell in sorted(run.cells.items())
        if cell.error and structure.cell_exercise[i] is None
    ]
    if len(errors) > 3:
        errors = errors[:3] + [f"and {len(errors) - 3} more cells outside the exercises raised"]
    return errors


def grade_notebook(
    path: str | os.PathLike,
    *,
    timeout: float = 600,
    cell_timeout: float = 300,
    lessons_dir: str | os.PathLike | None = None,
    kernel: str = "python3",
) -> Report:
    """Run one submission and judge each of its exercises; never raises for a bad submission.

    ``timeout`` limits the whole notebook (from when its kernel is ready) and ``cell_timeout``
    each cell, in seconds; ``lessons_dir`` holds the published lessons, if at hand.
    """
    path = Path(path)
    report = Report(str(path))
    try:
        _grade(path, report, timeout=timeout, cell_timeout=cell_timeout,
               lessons_dir=Path(lessons_dir) if lessons_dir is not None else None, kernel=kernel)
    except Exception as error:  # a notebook odd enough to trip the grader is still reported
        report.results = []
        report.problem = f"could not grade it: {type(error).__name__}: {_one_line(error)}"
    return report


def _grade(path: Path, report: Report, *, timeout: float, cell_timeout: float,
           lessons_dir: Path | None, kernel: str) -> None:
    import nbformat

    nb, problem = _read_submission(path)
    if nb is None:
        report.problem = problem
        return
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as error:
        report.notes.append(f"not a valid nbformat 4 notebook ({_one_line(error.message)}); "
                            "graded anyway")
    structure = read_structure(nb, name=path.name, strict=False)
    report.notes += structure.problems
    expected, to_run = structure.exercises, nb
    lesson_path = _find_lesson(nb, lessons_dir)
    report.title = lesson_title(nb)
    if lesson_path is not None:
        lesson_nb = nbformat.read(lesson_path, as_version=4)
        lesson = read_structure(lesson_nb, name=lesson_path.name, strict=False)
        report.lesson, report.title = lesson_path.stem, lesson_title(lesson_nb)
        expected = lesson.exercises
        to_run = _with_lesson_checks(nb, structure, lesson_nb, lesson)
    if not expected:
        report.problem = "no exercises found (no :::{exercise} with a :label:)"
        return

    checked = [structure.exercise(e.label) for e in expected if e.checked]
    checks = [i for e in checked if e is not None for i in _check_cells(e, structure, nb)]
    run = _Run()
    if checks:  # written exercises alone need no kernel; nothing after the last check matters
        run = _execute(to_run, last=max(checks), cwd=path.resolve().parent, timeout=timeout,
                       cell_timeout=cell_timeout, kernel=kernel)
    report.problem = run.stopped
    report.results = [_judge(e, structure, nb, run) for e in expected]
    report.notes += _outside_errors(structure, run)


# --- Reporting -----------------------------------------------------------------------------------


def format_report(report: Report) -> str:
    """The table of one submission, as printed."""
    head = report.submission + (f" — {report.title}" if report.title else "")
    lines = [head]
    if not report.results:
        return "\n".join(lines + [f"  {report.problem or 'nothing to grade'}"])
    rows = [("exercise", "status", "message")]
    rows += [(r.label, r.status, r.message) for r in report.results]
    label_width = max(len(r[0]) for r in rows)
    status_width = max(len(r[1]) for r in rows)
    lines += [f"  {a:<{label_width}}  {b:<{status_width}}  {c}".rstrip() for a, b, c in rows]
    written = sum(r.points is None for r in report.results)
    summary = f"  score: {report.score} of {report.possible} auto-checked exercises passed"
    lines.append(summary + (f"; {written} written to grade by hand" if written else ""))
    if report.problem:
        lines.append(f"  stopped: {report.problem}")
    lines += [f"  note: {note}" for note in report.notes]
    return "\n".join(lines)


def csv_rows(report: Report) -> list[dict[str, str]]:
    """One row per exercise; one row for a submission that could not be graded at all."""
    base = {"submission": report.submission, "lesson": report.lesson or ""}
    if not report.results:
        return [{**base, "exercise": "", "title": "", "status": "error", "points": "",
                 "message": report.problem or "nothing to grade"}]
    return [
        {**base, "exercise": r.label, "title": r.title, "status": r.status,
         "points": "" if r.points is None else str(r.points), "message": r.message}
        for r in report.results
    ]


def write_csv(reports: Sequence[Report], path: str | os.PathLike) -> int:
    """Write the class's CSV; returns the number of rows."""
    rows = [row for report in reports for row in csv_rows(report)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m encoderlab grade SUBMISSION.ipynb ... [--csv FILE] [--timeout S] ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m encoderlab grade",
        description="Run submitted notebooks offline and report every exercise: passed, failed "
        "(with the checker's message), not attempted, or written (graded by hand).",
    )
    parser.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION.ipynb",
                        help="the notebooks to grade")
    parser.add_argument("--csv", type=Path, metavar="FILE",
                        help="also write one row per (submission, exercise) to FILE")
    parser.add_argument("--timeout", type=_positive, default=600, metavar="S",
                        help="time limit per notebook, in seconds (default 600)")
    parser.add_argument("--cell-timeout", type=_positive, default=300, metavar="S",
                        help="time limit per cell, in seconds (default 300)")
    parser.add_argument("--lessons", type=Path, default=None, metavar="DIR",
                        help="the published lessons (default: the repository's lessons/)")
    parser.add_argument("--kernel", default="python3",
                        help="the Jupyter kernel to run them in (default python3)")
    args = parser.parse_args(argv)
    try:
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as error:
        parser.error(f"the grader needs nbclient, nbformat and ipykernel ({error}): "
                     "pip install nbclient nbformat ipykernel")
    lessons = args.lessons if args.lessons is not None else default_root() / "lessons"
    if not lessons.is_dir():
        if args.lessons is not None:
            parser.error(f"--lessons {args.lessons}: no such folder")
        print(f"note: no published lessons at {lessons}; each submission is graded by its own "
              "exercise cells (pass --lessons DIR)", file=sys.stderr)

    reports = []
    for number, submission in enumerate(args.submissions, 1):
        if len(args.submissions) > 1:
            print(f"grading {submission} ({number} of {len(args.submissions)})", file=sys.stderr)
        report = grade_notebook(submission, timeout=args.timeout, cell_timeout=args.cell_timeout,
                                lessons_dir=lessons if lessons.is_dir() else None,
                                kernel=args.kernel)
        reports.append(report)
        print(format_report(report) + "\n", flush=True)
    if args.csv is not None:
        try:
            rows = write_csv(reports, args.csv)
        except OSError as error:
            print(f"error: cannot write {args.csv}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"wrote {args.csv} ({rows} rows)")
    return 0

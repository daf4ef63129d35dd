"""Grade submitted notebooks: run each one offline, fenced in, and report every exercise.

``python -m encoderlab_grader grade SUBMISSION.ipynb ... [--csv FILE] [--jobs N]`` runs each
submission in a kernel of its own (:mod:`.runner`: its own folder, memory and output limits,
no network, no new processes, time limits per notebook and per cell), several at once with
``--jobs``, and prints a table per notebook: for every exercise, *passed*, *failed* (with the
checker's diagnosis, without the fix a learner sees on a second look, or the error's last
line), *not attempted* (the stub still raises ``NotImplementedError``), *manual* (a written
answer, graded by hand) or *not run* (the notebook stopped before its check); then a summary of
the class per exercise. A file that is not a notebook, a notebook that crashes its kernel and
one that hangs each get a clear line; the run goes on. ``--csv`` writes one row per
(submission, exercise). The exit status is 0 unless the command line itself is wrong.

**What a submission cannot change.** When the published lessons are at hand (``lessons/``),
the grader recognises the submission's lesson and lists every exercise of that lesson (a deleted
exercise shows up as not attempted). In the submission's kernel, each check cell is replaced by
a recording of the published check's answers (:mod:`.checks.record`); the verdict is reached in
the grader's own process, which never runs a line of the submission, by checkers imported
before the first submission ran. Replacing the checkers, the library, torch or builtins in the
kernel changes nothing but the answers recorded there, and only answers equal to the reference
pass. What the kernel watches while the learner's function runs (forbidden calls, inputs changed
in place, forward passes counted) is watched beside the submission's code, so a submission can
switch it off; a learner who calls the library's own function gets the marks. instructors.md
says all this at more length.
"""

from __future__ import annotations

import argparse
import ast
import copy
import csv
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from encoderlab.course.checks.harness import diagnosis_only
from encoderlab_grader import runner
from encoderlab_grader import sandbox as sandbox_module
from encoderlab_grader.judge import replay
from encoderlab_grader.runner import OFFLINE_ENV, Limits
from encoderlab_grader.student import (
    ANSWER_PROMPT,
    ANSWER_TAG,
    LESSON_NAME,
    ExerciseCells,
    LessonStructure,
    default_root,
    lesson_name,
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
    "grade_class",
    "format_report",
    "summary",
    "write_csv",
    "main",
]

PASSED, FAILED, NOT_ATTEMPTED, MANUAL, NOT_RUN = (
    "passed", "failed", "not attempted", "manual", "not run"
)
CSV_COLUMNS = ("submission", "lesson", "exercise", "title", "status", "points", "message",
               "fences")
_MESSAGE_CHARS = 400  # a report line, not a traceback
FENCED, UNFENCED = "all", "none (--unfenced)"


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
    fences: str = ""  # the fences its kernel ran behind: "all", or "none (--unfenced)"

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
    if isinstance(named, str) and LESSON_NAME.fullmatch(named) and (
            lessons_dir / f"{named}.ipynb").is_file():
        return lessons_dir / f"{named}.ipynb"
    return _lesson_titles(lessons_dir.resolve()).get(lesson_title(nb) or "")





# --- Running it: the check cells record their answers; the grader judges them ---------------


def _check_calls(source: str) -> list[tuple[str, str]]:
    """(checker, function name) of each ``checks.check_x(name, ...)`` in a check cell's code."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
             and node.func.value.id == "checks" and node.func.attr.startswith("check_")
             and node.args and isinstance(node.args[0], ast.Name)]
    calls.sort(key=lambda node: (node.lineno, node.col_offset))
    return [(node.func.attr, node.args[0].id) for node in calls]


# Run in each kernel before the submission's first cell: the recorder keeps the checkers as they
# are then, so that a submission replacing checks.check_x cannot stop its answers being recorded.
_PROLOGUE = "import encoderlab.course.checks.record"


def _recording_cell(calls: list[tuple[str, str]]) -> str:
    lines = ["from encoderlab.course.checks.record import record as _record_answers"]
    return "\n".join(lines + [f"_record_answers({check!r}, {name})" for check, name in calls])


def _check_cells(exercise: ExerciseCells, structure: LessonStructure, nb) -> list[int]:
    """The exercise's check cells: tagged ``check``, else any of its cells calling a checker."""
    if exercise.check_cells:
        return exercise.check_cells
    return [i for i, label in enumerate(structure.cell_exercise)
            if label == exercise.label and nb.cells[i].cell_type == "code"
            and "checks.check_" in nb.cells[i].source]


def _to_run(nb, structure: LessonStructure, lesson_nb=None, lesson: LessonStructure | None = None):
    """A copy of ``nb`` whose check cells record the answers of the published lesson's checks
    (or of its own, with no lesson at hand), and those checks by cell: {index: [(check, name)]}.

    A check cell without any ``checks.check_x(...)`` call (a course's own exercises) runs as it
    is, and its error, or none, is the verdict."""
    nb, calls = copy.deepcopy(nb), {}
    for exercise in (lesson or structure).exercises:
        mine = structure.exercise(exercise.label)
        if mine is None:
            continue
        cells = _check_cells(mine, structure, nb)
        if lesson is not None:
            sources = [lesson_nb.cells[i].source for i in exercise.check_cells]
        else:
            sources = [nb.cells[i].source for i in cells]
        for k, source in enumerate(sources):
            if not cells:
                break
            index = cells[min(k, len(cells) - 1)]  # more published checks: in the last cell
            found = _check_calls(source)
            if found:
                calls.setdefault(index, []).extend(found)
            elif lesson is not None:
                nb.cells[index].source = source  # the published code, unverified
    for index, found in calls.items():
        nb.cells[index].source = _recording_cell(found)
    return nb, calls


def _verdicts(run: runner.Run, calls: dict[int, list[tuple[str, str]]]) -> dict[int, list]:
    """Each recording check cell's verdicts, (passed, message) per check, judged here."""
    verdicts = {}
    for index, found in calls.items():
        cell = run.cells.get(index)
        if cell is None or cell.error:
            continue
        verdicts[index] = [
            replay(check, name, cell.answers[k]) if k < len(cell.answers) else
            (False, f"no answers were recorded for {check}({name})")
            for k, (check, name) in enumerate(found)
        ]
    return verdicts


# --- Judging each exercise ---------------------------------------------------------------------


def _is_not_implemented(error: tuple[str, str]) -> bool:
    name, message = error
    # The checkers report the learner's exception as "your function raised NotImplementedError".
    return name == "NotImplementedError" or "raised NotImplementedError" in message


def _describe(error: tuple[str, str]) -> str:
    name, message = error
    if name == "CheckFailed":  # the checker's diagnosis, without the fix or how to see it
        return _one_line(diagnosis_only(message))
    if name in _RUNNER_STOPS:  # what the runner says about a cell it stopped
        return _one_line(message)
    return _one_line(f"{name}: {message}" if message else name)


_RUNNER_STOPS = ("KernelDied", "CellTimeout", "OutputLimit")


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


def _judge(expected: ExerciseCells, structure: LessonStructure, nb, run: runner.Run,
           verdicts: dict[int, list]) -> ExerciseResult:
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

    def failure(i: int) -> tuple[str, str] | None:
        """(name, message) of check cell i's failure: an error in the kernel, or a verdict."""
        if run.cells[i].error:
            return run.cells[i].error
        wrong = [message for passed, message in verdicts.get(i, []) if not passed]
        return ("CheckFailed", wrong[0]) if wrong else None

    failing = next((i for i in checks if failure(i)), None)
    if failing is None:
        judged = [message for i in checks for _, message in verdicts.get(i, [])]
        printed = [line for i in checks for line in run.cells[i].stdout.splitlines()]
        ticks = [line for line in judged + printed if line.startswith("✓")]
        return result(PASSED, _one_line((ticks or judged or printed or ["its check passed"])[-1]))
    own = [
        (i, run.cells[i].error) for i, label in enumerate(structure.cell_exercise)
        if label == expected.label and i < failing and i not in checks
        and i in run.cells and run.cells[i].error
    ]
    if own:
        index, error = own[0]
        if _is_not_implemented(error):
            return result(NOT_ATTEMPTED, "the stub still raises NotImplementedError")
        if error[0] in _RUNNER_STOPS:
            return result(FAILED, f"cell {index + 1}: {_describe(error)}")
        return result(FAILED, f"cell {index + 1} raised {_describe(error)}")
    error = failure(failing)
    if _is_not_implemented(error):
        return result(NOT_ATTEMPTED, "the stub still raises NotImplementedError")
    return result(FAILED, _describe(error))


def _outside_errors(structure: LessonStructure, run: runner.Run) -> list[str]:
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
    lesson: str | None = None,
    kernel: str = "python3",
    memory: int = Limits.memory,
    output: int = Limits.output,
    threads: int = 1,
    sandbox: bool = True,
) -> Report:
    """Run one submission and judge each of its exercises; never raises for a bad submission.

    ``timeout`` limits the whole notebook (from when its kernel is ready) and ``cell_timeout``
    each cell, in seconds; ``lessons_dir`` holds the published lessons, if at hand, and
    ``lesson`` names the one to grade against (else the submission's metadata or title says);
    ``memory`` (bytes), ``output`` (bytes per cell) and ``threads`` (one by default: several
    submissions share the cores, and small matrix products slow down many times over when
    threads outnumber free cores) bound the kernel, which ``sandbox`` fences in (:mod:`.runner`).
    """
    if sandbox:
        fence_state = sandbox_module.require()  # FenceError: nothing is graded unfenced by default
    path = Path(path)
    report = Report(str(path), fences=FENCED if sandbox else UNFENCED)
    if sandbox:
        report.fences += f" ({', '.join(name for name in fence_state)})"
    limits = Limits(timeout=timeout, cell_timeout=cell_timeout, memory=memory, output=output,
                    threads=threads, sandbox=sandbox)
    try:
        _grade(path, report, limits=limits, kernel=kernel, lesson=lesson,
               lessons_dir=Path(lessons_dir) if lessons_dir is not None else None)
    except sandbox_module.FenceError:
        raise
    except Exception as error:  # a notebook odd enough to trip the grader is still reported
        report.results = []
        report.problem = f"could not grade it: {type(error).__name__}: {_one_line(error)}"
    return report


def _grade(path: Path, report: Report, *, limits: Limits, kernel: str, lesson: str | None,
           lessons_dir: Path | None) -> None:
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
    expected = structure.exercises
    report.title = lesson_title(nb)
    if lesson is not None:
        lesson_path = Path(lessons_dir or ".") / f"{lesson}.ipynb"
    else:
        lesson_path = _find_lesson(nb, lessons_dir)
    if lesson_path is not None:
        lesson_nb = nbformat.read(lesson_path, as_version=4)
        published = read_structure(lesson_nb, name=lesson_path.name, strict=False)
        report.lesson, report.title = lesson_path.stem, lesson_title(lesson_nb)
        expected = published.exercises
        to_run, calls = _to_run(nb, structure, lesson_nb, published)
    else:
        to_run, calls = _to_run(nb, structure)
    if not expected:
        report.problem = "no exercises found (no :::{exercise} with a :label:)"
        return

    checked = [structure.exercise(e.label) for e in expected if e.checked]
    checks = [i for e in checked if e is not None for i in _check_cells(e, structure, nb)]
    run = runner.Run()
    if checks:  # written exercises alone need no kernel; nothing after the last check matters
        cells = [i for i, cell in enumerate(to_run.cells[: max(checks) + 1])
                 if cell.cell_type == "code" and cell.source.strip()]
        run = runner.run_cells(to_run, cells, limits=limits, kernel=kernel, prologue=_PROLOGUE)
    report.problem = run.stopped
    verdicts = _verdicts(run, calls)
    report.results = [_judge(e, structure, nb, run, verdicts) for e in expected]
    report.notes += run.notes + _outside_errors(structure, run)


# --- A class, in parallel ------------------------------------------------------------------------


def _start_worker() -> None:
    """A grading process loads every checker, and the library under it, before any submission
    runs: what the submissions do later cannot reach them."""
    import encoderlab.course.checks  # noqa: F401


def grade_class(paths: Sequence[str | os.PathLike], *, jobs: int = 1, progress: bool = False,
                **options) -> Iterator[Report]:
    """Each submission's report, in the order given, graded ``jobs`` at a time (each in a
    process of its own that loaded the checkers first); ``options`` go to grade_notebook."""
    from tqdm.auto import tqdm

    if options.get("sandbox", True):
        sandbox_module.require()  # FenceError before any submission runs
    _start_worker()
    bar = tqdm(total=len(paths), desc="grading", unit="notebook", file=sys.stderr,
               disable=not progress)
    with bar:
        if jobs <= 1:
            for path in paths:
                yield grade_notebook(path, **options)
                bar.update(1)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")  # nothing of this process is shared
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                                 initializer=_start_worker) as pool:
            futures = {pool.submit(grade_notebook, path, **options): k
                       for k, path in enumerate(paths)}
            done, ready = {}, 0
            for future in as_completed(futures):
                k = futures[future]
                try:
                    done[k] = future.result()
                except sandbox_module.FenceError:
                    raise
                except Exception as error:  # the grading process itself died
                    done[k] = Report(str(paths[k]), problem=f"could not grade it: the grading "
                                     f"process failed ({type(error).__name__})")
                bar.update(1)
                while ready in done:
                    yield done.pop(ready)
                    ready += 1


def summary(reports: Sequence[Report]) -> str:
    """Per exercise, across the class: how many passed, failed, were not attempted or not run,
    and the most common message of those that failed."""
    counts: dict[str, Counter] = {}
    messages: dict[str, Counter] = {}
    for report in reports:
        for r in report.results:
            counts.setdefault(r.label, Counter())[r.status] += 1
            if r.status == FAILED:
                messages.setdefault(r.label, Counter())[r.message] += 1
    if not counts:
        return "class: nothing was graded"
    statuses = (PASSED, FAILED, NOT_ATTEMPTED, NOT_RUN, MANUAL)
    width = max(len(label) for label in counts)
    lines = [f"class of {len(reports)}: " + ", ".join(statuses) + " per exercise"]
    for label, count in counts.items():
        row = " / ".join(f"{count[s]:>3}" for s in statuses)
        line = f"  {label:<{width}}  {row}"
        if label in messages:
            text, n = messages[label].most_common(1)[0]
            text = text if len(text) <= 120 else text[:119] + "…"
            line += f"  most common failure ({n}): {text}"
        lines.append(line)
    unreadable = sum(not report.results for report in reports)
    if unreadable:
        lines.append(f"  {unreadable} submission(s) could not be graded at all (see above)")
    return "\n".join(lines)


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
    lines.append(f"  fences: {report.fences}")
    return "\n".join(lines)


def csv_rows(report: Report) -> list[dict[str, str]]:
    """One row per exercise; one row for a submission that could not be graded at all."""
    base = {"submission": report.submission, "lesson": report.lesson or "",
            "fences": report.fences}
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
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _jobs(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m encoderlab_grader grade``."""
    cores = os.cpu_count() or 1
    p = argparse.ArgumentParser(
        prog="python -m encoderlab_grader grade",
        description="Run submitted notebooks offline, each fenced in, and report every "
        "exercise: passed, failed (with the checker's message), not attempted, or written "
        "(graded by hand); then a summary of the class.",
    )
    p.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION.ipynb",
                   help="the notebooks to grade")
    p.add_argument("--csv", type=Path, metavar="FILE",
                   help="also write one row per (submission, exercise) to FILE")
    p.add_argument("--jobs", type=_jobs, default=cores, metavar="N",
                   help=f"submissions graded at once (default: the cores, {cores})")
    p.add_argument("--timeout", type=_positive, default=600, metavar="S",
                   help="time limit per notebook, in seconds (default 600)")
    p.add_argument("--cell-timeout", type=_positive, default=300, metavar="S",
                   help="time limit per cell, in seconds (default 300)")
    p.add_argument("--memory", type=_positive, default=4, metavar="GB",
                   help="memory limit per submission, in GiB (default 4)")
    p.add_argument("--max-output", type=_positive, default=2, metavar="MB",
                   help="output one cell may print before it is interrupted, in MiB (default 2)")
    p.add_argument("--lessons", type=Path, default=None, metavar="DIR",
                   help="the published lessons (default: the repository's lessons/)")
    p.add_argument("--lesson", default=None, metavar="NAME",
                   help="grade every submission against this lesson of DIR: its number (03) "
                   "or its name (default: each submission names its own)")
    p.add_argument("--kernel", default="python3",
                   help="the Jupyter kernel to run them in (default python3)")
    p.add_argument("--unfenced", action="store_true",
                   help="run kernels without their fences, where the system cannot put them up "
                   "(only for notebooks you trust; the report and the CSV say so)")
    return p


def options(args: argparse.Namespace, lessons: Path | None) -> dict:
    """grade_notebook's keyword arguments from the command line."""
    return {"timeout": args.timeout, "cell_timeout": args.cell_timeout, "lessons_dir": lessons,
            "lesson": args.lesson, "kernel": args.kernel, "memory": int(args.memory * 2**30),
            "output": int(args.max_output * 2**20), "sandbox": not args.unfenced}


def lessons_folder(args: argparse.Namespace, p: argparse.ArgumentParser) -> Path | None:
    """The published lessons' folder, checked; None (with a note) when there is none."""
    lessons = args.lessons if args.lessons is not None else default_root() / "lessons"
    if not lessons.is_dir():
        if args.lessons is not None or args.lesson is not None:
            p.error(f"--lessons {lessons}: no such folder")
        print(f"note: no published lessons at {lessons}; each submission is graded by its own "
              "exercise cells (pass --lessons DIR)", file=sys.stderr)
        return None
    if args.lesson is not None:
        try:
            args.lesson = lesson_name(args.lesson, lessons)
        except ValueError as error:
            p.error(f"--lesson: {error}")
    return lessons


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m encoderlab_grader grade SUBMISSION.ipynb ... [--csv FILE] [--jobs N] ...``."""
    p = parser()
    args = p.parse_args(argv)
    try:
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as error:
        p.error(f"the grader needs nbclient, nbformat and ipykernel ({error}): "
                "pip install nbclient nbformat ipykernel")
    lessons = lessons_folder(args, p)
    jobs = min(args.jobs, len(args.submissions))
    reports = []
    try:
        if not args.unfenced:
            sandbox_module.require()
        for report in grade_class(args.submissions, jobs=jobs,
                                  progress=len(args.submissions) > 1, **options(args, lessons)):
            reports.append(report)
            print(format_report(report) + "\n", flush=True)
    except sandbox_module.FenceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if len(reports) > 1:
        print(summary(reports) + "\n")
    if args.csv is not None:
        try:
            rows = write_csv(reports, args.csv)
        except OSError as error:
            print(f"error: cannot write {args.csv}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"wrote {args.csv} ({rows} rows)")
    return 0

"""The grader: full marks for the published lesson, zero for an untouched student notebook, one
wrong answer costs exactly one exercise, and broken submissions are reported, never fatal.

Executing a whole lesson takes half a minute, so only Lesson 3 is run in full, once. The other
cases run Lesson 3's exercise section alone (its title, set-up and imports cells, then the
exercises), or tiny notebooks made here, in a few seconds each.
"""

from __future__ import annotations

import csv
from pathlib import Path

import nbformat
import pytest
from lesson3_notebooks import (
    CODE_EXERCISES,
    LESSON_3,
    LESSONS,
    WRITTEN_EXERCISES,
    exercise_section,
    student_version,
)
from lesson3_notebooks import cell_of as _cell_of
from lesson3_notebooks import statuses as _statuses
from lesson3_notebooks import write as _write

from encoderlab_grader import grade


@pytest.fixture(scope="module")
def lesson_3() -> nbformat.NotebookNode:
    return nbformat.read(LESSON_3, as_version=4)


@pytest.fixture
def exercises_3(lesson_3) -> nbformat.NotebookNode:
    """Lesson 3's exercise section, solutions included."""
    return exercise_section(lesson_3)


_student = student_version


# --- Lesson 3 ----------------------------------------------------------------------------------


def test_the_published_lesson_gets_full_marks():
    # Generous limits: the test is about marks, and a busy CI machine can be slow.
    report = grade.grade_notebook(LESSON_3, lessons_dir=LESSONS, timeout=900, cell_timeout=600)
    assert report.problem is None, report.problem
    assert report.notes == []
    assert report.lesson == "03-bidirectional-self-attention"
    assert report.title == "Lesson 3 — Bidirectional Self-Attention"
    assert [r.label for r in report.results] == [
        "l3-ex-count", "l3-ex-attention", "l3-ex-causal", "l3-ex-padding", "l3-ex-mha",
        "l3-ex-leak", "l3-ex-cache"]
    statuses = _statuses(report)
    assert all(statuses[label] == grade.PASSED for label in CODE_EXERCISES), statuses
    assert all(statuses[label] == grade.MANUAL for label in WRITTEN_EXERCISES), statuses
    assert (report.score, report.possible) == (4, 4)
    messages = {r.label: r.message for r in report.results}
    assert messages["l3-ex-attention"].startswith("✓ scaled dot-product attention")


def test_an_untouched_student_notebook_gets_zero(exercises_3, tmp_path):
    report = grade.grade_notebook(_write(_student(exercises_3), tmp_path / "untouched.ipynb"),
                                  lessons_dir=LESSONS)
    assert report.problem is None, report.problem
    statuses = _statuses(report)
    assert all(statuses[label] == grade.NOT_ATTEMPTED for label in CODE_EXERCISES), statuses
    assert all(statuses[label] == grade.MANUAL for label in WRITTEN_EXERCISES), statuses
    assert (report.score, report.possible) == (0, 4)
    messages = {r.label: r.message for r in report.results}
    assert messages["l3-ex-causal"] == "the stub still raises NotImplementedError"
    assert messages["l3-ex-count"] == "written answer: the answer cell is empty"


def test_one_wrong_answer_loses_exactly_that_exercise(exercises_3, tmp_path):
    solution = _cell_of(exercises_3, "solution", "l3-ex-causal")
    solution.source = solution.source.replace(".tril()", ".triu()")  # the classic mistake
    report = grade.grade_notebook(_write(exercises_3, tmp_path / "one-wrong.ipynb"),
                                  lessons_dir=LESSONS)
    statuses = _statuses(report)
    assert statuses == {
        "l3-ex-count": grade.MANUAL, "l3-ex-attention": grade.PASSED,
        "l3-ex-causal": grade.FAILED, "l3-ex-padding": grade.PASSED,
        "l3-ex-mha": grade.PASSED, "l3-ex-leak": grade.MANUAL, "l3-ex-cache": grade.MANUAL,
    }
    causal = next(r for r in report.results if r.label == "l3-ex-causal")
    assert causal.message.startswith("your mask is upper-triangular")  # the checker's words
    assert "hint=True" not in causal.message and "torch.tril" not in causal.message  # no fix
    assert (report.score, report.possible) == (3, 4)


def test_edited_checks_deleted_exercises_and_written_answers(exercises_3, tmp_path):
    nb = _student(exercises_3)
    check = _cell_of(nb, "check", "l3-ex-attention")
    check.source = "print('✓ all correct')"  # the lesson's own check runs instead
    padding = [i for i, c in enumerate(nb.cells) if c.metadata.get("exercise") == "l3-ex-padding"
               or ":label: l3-ex-padding" in c.source]
    nb.cells = [c for i, c in enumerate(nb.cells) if i not in padding]
    answer = next(c for c in nb.cells if c.metadata.get("exercise") == "l3-ex-count")
    answer.source += "\n\nThe causal mask hides n(n-1)/2 entries."
    stub = _cell_of(nb, "exercise-stub", "l3-ex-causal")
    stub.source = "def causal_mask(n)\n    return None"  # a syntax error in the learner's cell
    report = grade.grade_notebook(_write(nb, tmp_path / "edited.ipynb"), lessons_dir=LESSONS)
    results = {r.label: r for r in report.results}
    assert results["l3-ex-attention"].status == grade.NOT_ATTEMPTED
    assert results["l3-ex-padding"].status == grade.NOT_ATTEMPTED
    assert results["l3-ex-padding"].message == "the exercise is not in the submission"
    assert results["l3-ex-causal"].status == grade.FAILED
    assert "raised SyntaxError" in results["l3-ex-causal"].message
    assert results["l3-ex-count"].message == "written answer (6 words): grade by hand"


# --- Submissions that crash, hang, or are not notebooks ----------------------------------------


def _tiny(*cells) -> nbformat.NotebookNode:
    """A notebook of ("md" | "code", source[, tags]) cells, without torch: it runs in a second."""
    nb = nbformat.v4.new_notebook()
    for kind, source, *tags in cells:
        cell = (nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell)(
            source)
        if tags:
            cell.metadata["tags"] = tags[0]
        nb.cells.append(cell)
    return nb


def _exercise(label: str) -> tuple[str, str]:
    return ("md", f":::{{exercise}} Exercise {label}\n:label: {label}\n\nDo it.\n:::")


def _stub(name: str) -> tuple[str, str, list[str]]:
    return ("code", f"def {name}():\n    raise NotImplementedError", ["exercise-stub"])


def _check(name: str) -> tuple[str, str, list[str]]:
    return ("code", f"assert {name}() == 1\nprint('✓ {name} is right')", ["check"])


@pytest.fixture
def submissions(tmp_path) -> dict[str, Path]:
    """Broken submissions of every kind, and one good one after them."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    good_first = [_exercise("ex-one"), ("code", "def one():\n    return 1"), _check("one")]
    paths = {
        "crash": _write(_tiny(*good_first, _exercise("ex-two"), _stub("two"),
                              ("code", "import os\nos._exit(1)"), _check("two")),
                        folder / "crash.ipynb"),
        "hang": _write(_tiny(*good_first, _exercise("ex-two"), _stub("two"),
                             ("code", "import time\ntime.sleep(600)"), _check("two")),
                       folder / "hang.ipynb"),
        "good": _write(_tiny(*good_first, _exercise("ex-two"), _stub("two"), _check("two"),
                             ("md", "## The end"), ("code", "undefined_name")),
                       folder / "good.ipynb"),
    }
    (folder / "truncated.ipynb").write_text('{"cells": [', encoding="utf-8")
    (folder / "a-list.ipynb").write_text("[1, 2, 3]", encoding="utf-8")
    (folder / "binary.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    paths.update({name: folder / f"{name}.ipynb" for name in ("truncated", "a-list", "binary")})
    paths["missing"] = folder / "missing.ipynb"
    return paths


def test_broken_submissions_are_reported_and_the_run_goes_on(submissions, tmp_path, capsys):
    order = ["truncated", "a-list", "binary", "missing", "crash", "hang", "good"]
    grades = tmp_path / "grades.csv"
    code = grade.main([str(submissions[name]) for name in order] + [
        "--timeout", "4", "--csv", str(grades), "--lessons", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "Traceback" not in out
    assert "not a notebook: invalid JSON at line 1, column 12" in out
    assert "not a notebook: JSON without a notebook's 'nbformat' and 'cells' fields" in out
    assert "not a notebook: not UTF-8 text" in out
    assert "missing.ipynb\n  no such file" in out
    assert ("note: cell 6: it ended the kernel (it exited Python, crashed, or ran out of "
            "memory); a fresh kernel ran the cells before it again and went on after it") in out
    assert "stopped: timed out after 4 s at cell 6" in out

    with open(grades, newline="", encoding="utf-8") as f:
        rows = [(Path(r["submission"]).stem, r["exercise"], r["status"], r["points"])
                for r in csv.DictReader(f)]
    assert rows == [
        ("truncated", "", "error", ""),
        ("a-list", "", "error", ""),
        ("binary", "", "error", ""),
        ("missing", "", "error", ""),
        ("crash", "ex-one", grade.PASSED, "1"),  # graded before the crash
        ("crash", "ex-two", grade.FAILED, "0"),  # graded in a fresh kernel: its cell 6 crashed
        ("hang", "ex-one", grade.PASSED, "1"),
        ("hang", "ex-two", grade.NOT_RUN, "0"),
        ("good", "ex-one", grade.PASSED, "1"),  # still graded after the hang was killed
        ("good", "ex-two", grade.NOT_ATTEMPTED, "0"),
    ]


def test_the_limit_per_cell_and_errors_in_the_learners_cells(tmp_path):
    nb = _tiny(
        ("code", "print('set-up')\nmissing_import.thing"),  # outside the exercises: a note
        _exercise("ex-one"), ("code", "def one():\n    return 2"),
        ("code", "assert one() == 1, 'one() should be 1'", ["check"]),
        _exercise("ex-two"), ("code", "def two()\n    return 1"), _check("two"),
        _exercise("ex-three"), ("code", "def three():\n    while True:\n        pass"),
        ("code", "assert three() == 1", ["check"]),
    )
    report = grade.grade_notebook(_write(nb, tmp_path / "errors.ipynb"), cell_timeout=2)
    assert [(r.label, r.status) for r in report.results] == [
        ("ex-one", grade.FAILED), ("ex-two", grade.FAILED), ("ex-three", grade.FAILED)]
    one, two, three = (r.message for r in report.results)
    assert one == "AssertionError: one() should be 1"
    assert two.startswith("cell 6 raised SyntaxError")
    assert three == "it ran past the limit per cell (2 s) and was stopped"
    assert report.notes == [
        "cell 10: it ran past the limit per cell (2 s) and was stopped",  # the last: no restart
        "cell 1 (outside the exercises) raised NameError: name 'missing_import' is not defined"]


def test_a_notebook_without_exercises_needs_no_kernel(tmp_path):
    report = grade.grade_notebook(_write(_tiny(("code", "1 / 0")), tmp_path / "none.ipynb"))
    assert report.results == []
    assert report.problem == "no exercises found (no :::{exercise} with a :label:)"
    assert grade.format_report(report).endswith("  no exercises found (no :::{exercise} with a "
                                                 ":label:)")


def test_the_report_keeps_a_checks_diagnosis_without_its_fix():
    diagnosis = "your mask hides the diagonal, but a token may attend to itself."
    first = f"{diagnosis}\nStuck? check_causal_mask(my_causal_mask, hint=True) shows the fix."
    second = f"{diagnosis}\nFix: keep every j <= i: torch.tril with diagonal=0."
    assert grade._describe(("CheckFailed", first)) == diagnosis
    assert grade._describe(("CheckFailed", second)) == diagnosis  # an edited check cell
    assert grade._describe(("ValueError", "bad\nvalue")) == "ValueError: bad value"


@pytest.mark.parametrize("argv", [[], ["x.ipynb", "--timeout", "0"],
                                  ["x.ipynb", "--lessons", "/no/such/folder"]])
def test_usage_errors_exit_with_status_2(argv):
    with pytest.raises(SystemExit) as exit_:
        grade.main(argv)
    assert exit_.value.code == 2

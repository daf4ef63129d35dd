"""Lesson 3's exercise section as a submission: the grading tests' shared material.

Executing a whole lesson takes half a minute; its exercise section (the title, set-up and
imports cells, then everything from the first exercise) runs in a few seconds.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from encoderlab_grader import grade, student

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
LESSON_3 = LESSONS / "03-bidirectional-self-attention.ipynb"
CODE_EXERCISES = ["l3-ex-attention", "l3-ex-causal", "l3-ex-padding", "l3-ex-mha"]
WRITTEN_EXERCISES = ["l3-ex-count", "l3-ex-leak", "l3-ex-cache"]


def statuses(report: grade.Report) -> dict[str, str]:
    return {r.label: r.status for r in report.results}


def exercise_section(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The lesson's title, set-up and imports cells, then everything from its first exercise."""
    first = next(i for i, c in enumerate(nb.cells)
                 if c.cell_type == "markdown" and ":::{exercise}" in c.source)
    short = copy.deepcopy(nb)
    short.cells = short.cells[:3] + short.cells[first:]
    return short


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    links = student.course_links(ROOT)
    return student.make_student(nb, "03-bidirectional-self-attention", links)


def write(nb: nbformat.NotebookNode, path: Path) -> Path:
    nbformat.write(nb, path)
    return path


def cell_of(nb: nbformat.NotebookNode, tag: str, label: str) -> nbformat.NotebookNode:
    """The cell tagged ``tag`` of exercise ``label``."""
    structure = student.read_structure(nb, strict=False)
    return next(c for i, c in enumerate(nb.cells)
                if tag in c.metadata.get("tags", []) and structure.cell_exercise[i] == label)

"""Student notebooks: made from the lessons, up to date, and without a trace of the solutions."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from encoderlab_grader import student

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))
LINKS = student.CourseLinks("https://github.com/owner/course", "main")


def _notebook(*cells) -> nbformat.NotebookNode:
    """A notebook from ("md" | "code", source[, tags]) triples."""
    nb = nbformat.v4.new_notebook()
    for index, (kind, source, *tags) in enumerate(cells):
        if kind == "md":
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source, execution_count=index, outputs=[
                nbformat.v4.new_output("stream", name="stdout", text="printed\n")])
        cell["id"] = f"c{index}"
        if tags:
            cell.metadata["tags"] = tags[0]
        nb.cells.append(cell)
    return nb


def _exercise(label: str, title: str = "An exercise", extra: str = "") -> str:
    return f":::{{exercise}} {title}\n:label: {label}\n{extra}\nDo it.\n:::"


# --- The committed student/ folder ---------------------------------------------------------------


def test_student_folder_and_instructors_page_are_up_to_date():
    stale = student.stale_files(ROOT)
    assert not stale, "\n".join(stale) + (
        "\nrun `make student` (python -m encoderlab_grader student)")


def _solution_code_lines(lesson: nbformat.NotebookNode) -> set[str]:
    """Lines of the cells tagged solution that appear nowhere else in the lesson's code."""
    def lines(cells):
        return {line.strip() for c in cells for line in c.source.splitlines() if line.strip()}

    code = [c for c in lesson.cells if c.cell_type == "code"]
    solutions = [c for c in code if "solution" in c.metadata.get("tags", [])]
    others = [c for c in code if "solution" not in c.metadata.get("tags", [])]
    return lines(solutions) - lines(others)


def _solution_prose_lines(lesson: nbformat.NotebookNode) -> set[str]:
    """Substantial lines of written solutions (dropdowns and gated), found by plain regexes."""
    markdown = "\n".join(c.source for c in lesson.cells if c.cell_type == "markdown")
    dropdowns = re.findall(r"^(:{3,})\{solution\}[^\n]*\n(.*?)^\1[ \t]*$", markdown, re.M | re.S)
    gated = re.findall(r"^```\{solution-start\}.*?^```[ \t]*$(.*?)^```\{solution-end\}",
                       markdown, re.M | re.S)
    bodies = [body for _, body in dropdowns] + gated
    prose = {line.strip() for body in bodies for line in body.splitlines()
             if len(line.strip()) >= 20 and not line.startswith(":")}
    outside = markdown
    for body in bodies:
        outside = outside.replace(body, "")
    return {line for line in prose if line not in outside}


@pytest.mark.parametrize("lesson_path", LESSONS, ids=lambda p: p.stem)
def test_no_solution_survives_in_the_student_notebook(lesson_path):
    path = ROOT / "student" / lesson_path.name
    assert path.is_file(), f"{path.name} is missing from student/: run `make student`"
    lesson = nbformat.read(lesson_path, as_version=4)
    mine = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in mine.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in mine.cells)
    assert not [c for c in mine.cells if "solution" in c.metadata.get("tags", [])]
    assert "{solution" not in text, "a solution directive survived"
    survivors = [line for line in _solution_code_lines(lesson)
                 if line in {x.strip() for x in code.splitlines()}]
    assert not survivors, f"solution code in {path.name}: {survivors[:3]}"
    survivors = [line for line in _solution_prose_lines(lesson) if line in text]
    assert not survivors, f"solution text in {path.name}: {survivors[:3]}"


@pytest.mark.parametrize("lesson_path", LESSONS, ids=lambda p: p.stem)
def test_student_notebook_keeps_stubs_and_checks_and_clears_outputs(lesson_path):
    lesson = nbformat.read(lesson_path, as_version=4)
    mine = nbformat.read(ROOT / "student" / lesson_path.name, as_version=4)
    nbformat.validate(mine)

    def tagged(nb, tag):
        return [c.source for c in nb.cells if tag in c.metadata.get("tags", [])]

    assert tagged(mine, "exercise-stub") == tagged(lesson, "exercise-stub")
    assert tagged(mine, "check") == tagged(lesson, "check")
    for cell in mine.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            assert "execution" not in cell.metadata  # no timestamps
    def first_code(nb):
        return next(c.source for c in nb.cells if c.cell_type == "code")

    assert first_code(mine) == first_code(lesson)  # the Colab set-up cell comes first
    assert mine.cells[0].source.startswith("**Student version**")
    assert f"lessons/{lesson_path.name}" in mine.cells[0].source  # links the published lesson
    assert mine.metadata["encoderlab"] == {"lesson": lesson_path.stem, "student": True}
    # Every exercise answered in words in the lesson gets an answer cell.
    dropdown_labels = re.findall(r"^:{3,}\{solution\}\s*(\S+)", "\n".join(
        c.source for c in lesson.cells if c.cell_type == "markdown"), re.M)
    answers = [c.metadata.get("exercise") for c in mine.cells
               if c.source == student.ANSWER_PROMPT]
    assert set(dropdown_labels) <= set(answers)


@pytest.mark.parametrize("lesson_path", LESSONS, ids=lambda p: p.stem)
def test_every_exercise_is_checked_or_written(lesson_path):
    """The structure the student notebooks and the grader rely on, lesson by lesson."""
    lesson = nbformat.read(lesson_path, as_version=4)
    structure = student.read_structure(lesson, name=lesson_path.name)  # strict: raises if broken
    assert structure.exercises, f"{lesson_path.name} has no exercises"
    for exercise in structure.exercises:
        assert re.fullmatch(r"l\d+-ex-[a-z0-9-]+", exercise.label), exercise.label
        assert exercise.checked or exercise.written, (
            f"{exercise.label}: neither a check cell nor a written solution")
        if exercise.stub_cells:
            assert exercise.checked, f"{exercise.label}: a stub without a check cell"
        if exercise.checked:
            assert exercise.checkers, f"{exercise.label}: its check cell calls no checks.check_*"
            assert max(exercise.stub_cells, default=-1) < min(exercise.check_cells), (
                f"{exercise.label}: the check cell comes before the stub")
    # Every tagged cell belongs to an exercise; every solution cell lies inside a gated solution.
    inside = False
    for index, cell in enumerate(lesson.cells):
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type == "markdown":
            start, end = cell.source.rfind("{solution-start}"), cell.source.rfind("{solution-end}")
            if start >= 0 or end >= 0:
                inside = start > end  # the cell opens a gated solution and leaves it open
        if tags & {"exercise-stub", "check", "solution"}:
            assert structure.cell_exercise[index], f"cell {index + 1} belongs to no exercise"
        if "solution" in tags:
            assert inside, f"cell {index + 1} is tagged solution but is not inside a gated solution"


# --- Making one student notebook --------------------------------------------------------------


def test_a_cell_is_split_where_a_written_solution_is_removed():
    nb = _notebook(
        ("md", "## Exercises\n\n" + _exercise("l9-ex-a", "First") + "\n\n"
         ":::{solution} l9-ex-a\n:class: dropdown\n\nThe secret answer.\n:::\n\n"
         + _exercise("l9-ex-b", "Second")),
        ("md", ":::{solution} l9-ex-b\n:class: dropdown\n\nAnother secret.\n:::\n\n## Conclusion"),
    )
    cells = student.make_student(nb, "09-test", LINKS).cells
    sources = [c.source for c in cells[1:]]
    assert sources == [
        "## Exercises\n\n" + _exercise("l9-ex-a", "First"),
        student.ANSWER_PROMPT,
        _exercise("l9-ex-b", "Second"),
        student.ANSWER_PROMPT,
        "## Conclusion",
    ]
    labels = [c.metadata.get("exercise") for c in cells[1:]]
    assert labels == [None, "l9-ex-a", None, "l9-ex-b", None]
    assert len({c.id for c in cells}) == len(cells)  # ids stay unique


def test_a_gated_solution_spanning_cells_goes_with_its_code():
    nb = _notebook(
        ("md", _exercise("l9-ex-code") + "\n\n```{solution-start} l9-ex-code\n:class: dropdown\n```"
         "\n\nWhy it works, in words."),
        ("code", "secret_code = 42", ["solution"]),
        ("md", "```{solution-end}\n```\n\n" + _exercise("l9-ex-plain")),
        ("code", "def f():\n    raise NotImplementedError", ["exercise-stub"]),
        ("md", "```{solution-start} l9-ex-plain\n:class: dropdown\n```"),
        ("code", "def f():\n    return 1", ["solution"]),
        ("md", "```{solution-end}\n```"),
        ("code", "assert checks.check_f(f)", ["check"]),
    )
    cells = student.make_student(nb, "09-test", LINKS).cells[1:]
    assert [c.source for c in cells] == [
        _exercise("l9-ex-code"),
        student.ANSWER_PROMPT,  # the solution had prose: the learner answers in words
        _exercise("l9-ex-plain"),
        "def f():\n    raise NotImplementedError",
        "assert checks.check_f(f)",  # code only: no answer cell
    ]
    code = [c for c in cells if c.cell_type == "code"]
    assert [c.metadata["exercise"] for c in code] == ["l9-ex-plain", "l9-ex-plain"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)


def test_the_exercise_structure_is_read_with_kind_and_level():
    nb = _notebook(
        ("md", _exercise("l9-ex-a", "Recall it", ":class: difficulty-recall") + "\n\n"
         ":::{solution} l9-ex-a\nIt is so.\n:::"),
        ("md", _exercise("l9-ex-b", "Code it")),
        ("code", "def f():\n    raise NotImplementedError", ["exercise-stub"]),
        ("code", "assert checks.check_f(f)", ["check"]),
        ("md", "## Conclusion"),
        ("code", "print('not in an exercise')"),
    )
    structure = student.read_structure(nb)
    a, b = structure.exercises
    assert (a.label, a.title, a.kind, a.level) == ("l9-ex-a", "Recall it", "written", "recall")
    assert (b.kind, b.level, b.checkers) == ("code", "implementation", ["check_f"])
    assert (b.stub_cells, b.check_cells) == ([2], [3])
    assert structure.cell_exercise == ["l9-ex-a", "l9-ex-b", "l9-ex-b", "l9-ex-b", None, None]


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ([("md", ":::{exercise} No label\nDo it.\n:::")], "has no :label:"),
        ([("md", _exercise("l9-ex-a")), ("md", _exercise("l9-ex-a"))], "used by two exercises"),
        ([("md", _exercise("l9-ex-a") + "\n```{solution-start} l9-ex-a\n```")],
         "'l9-ex-a' has a solution-start but no solution-end"),
        ([("md", "```{solution-end}\n```")], "solution-end without a solution-start"),
        ([("md", ":::{solution} l9-ex-z\nx\n:::")], "no exercise with that label"),
    ],
)
def test_broken_exercise_markup_is_refused_with_a_clear_message(cells, message):
    with pytest.raises(student.LessonFormatError, match=re.escape(message)):
        student.make_student(_notebook(*cells), "09-test", LINKS)


# --- The command ----------------------------------------------------------------------------------


@pytest.fixture
def course(tmp_path) -> Path:
    """A copy of the course with Lesson 3 only."""
    for name in ("_config.yml", "instructors.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "lessons").mkdir()
    shutil.copy(ROOT / "lessons" / "03-bidirectional-self-attention.ipynb", tmp_path / "lessons")
    return tmp_path


def test_the_command_writes_then_finds_everything_up_to_date(course, capsys):
    (course / "student").mkdir()
    (course / "student" / "99-gone.ipynb").write_text("{}")
    assert student.main(["--root", str(course)]) == 0
    out = capsys.readouterr().out
    assert "wrote student/03-bidirectional-self-attention.ipynb" in out
    assert "removed student/99-gone.ipynb" in out
    written = (course / "student" / "03-bidirectional-self-attention.ipynb").read_bytes()
    assert student.main(["--root", str(course), "--check"]) == 0
    assert student.main(["--root", str(course)]) == 0  # a second run changes nothing
    assert "already up to date" in capsys.readouterr().out
    assert (course / "student" / "03-bidirectional-self-attention.ipynb").read_bytes() == written

    page = (course / "instructors.md").read_text()
    colab = ("https://colab.research.google.com/github/encoder-mechanics/encoder-mechanics/blob/"
             "main/student/03-bidirectional-self-attention.ipynb")
    assert colab in page
    assert ("{download}`03-bidirectional-self-attention.ipynb "
            "<student/03-bidirectional-self-attention.ipynb>`") in page
    assert ("| 3 | Scaled dot-product attention | `l3-ex-attention` | implementation "
            "| `check_attention` |") in page
    assert ("| 3 | The causal mask | `l3-ex-causal` | implementation "
            "| `check_causal_mask` + hand |") in page


def test_the_check_says_what_is_out_of_date(course, capsys):
    assert student.main(["--root", str(course)]) == 0
    lesson = course / "lessons" / "03-bidirectional-self-attention.ipynb"
    nb = nbformat.read(lesson, as_version=4)
    nb.cells[0].source += "\n\nA new sentence."
    nbformat.write(nb, lesson)
    capsys.readouterr()
    assert student.main(["--root", str(course), "--check"]) == 1
    out = capsys.readouterr().out
    assert "student/03-bidirectional-self-attention.ipynb is out of date" in out
    assert "make student" in out


def test_the_command_explains_a_missing_generated_block(course, capsys):
    page = course / "instructors.md"
    page.write_text(page.read_text().replace("<!-- exercises:end -->", ""))
    assert student.main(["--root", str(course)]) == 1
    assert "<!-- exercises:end -->" in capsys.readouterr().err


def test_the_command_refuses_a_folder_that_is_not_the_course(tmp_path):
    with pytest.raises(SystemExit) as exit_:
        student.main(["--root", str(tmp_path)])
    assert exit_.value.code == 2

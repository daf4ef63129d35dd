"""Student notebooks and the exercise list, made from the lessons (for instructors; instructors.md).

``python -m encoderlab_grader student`` (or ``make student``) reads every notebook in ``lessons/``
and writes its student version to ``student/``: the same lesson without the solutions, with every
output cleared, an answer cell wherever a solution was written in words, and a header that says
what the notebook is. It also rewrites the two generated blocks of ``instructors.md``: the
student notebooks with their download and Colab links, and the table of exercises. The output
is byte-for-byte deterministic, so a test can tell when ``student/`` is behind ``lessons/``;
``--check`` reports what is out of date without writing anything.

The lessons mark their exercises with sphinx-exercise (CONTRIBUTING.md): a markdown
``:::{exercise}`` with a ``:label:``; for code, a stub cell tagged ``exercise-stub``, a gated
solution (``solution-start`` ... ``solution-end`` around cells tagged ``solution``) and a check
cell tagged ``check``; for a written answer, a ``:::{solution} label`` dropdown.
:func:`read_structure` reads that structure; the grader (:mod:`encoderlab_grader.grade`) uses it to
tell which exercise each check cell belongs to.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ANSWER_PROMPT",
    "ANSWER_TAG",
    "ExerciseCells",
    "LessonFormatError",
    "LessonStructure",
    "CourseLinks",
    "read_structure",
    "is_check_cell",
    "lesson_title",
    "make_student",
    "course_links",
    "generated_files",
    "stale_files",
    "write_student_files",
    "main",
]

STUB_TAG = "exercise-stub"
SOLUTION_TAG = "solution"
CHECK_TAG = "check"
ANSWER_TAG = "answer"
ANSWER_PROMPT = "*Your answer:*"
STUDENT_FOLDER = "student"
INSTRUCTORS_PAGE = "instructors.md"
# A difficulty can be given in an exercise's options as ``:class: difficulty-<level>``;
# without one, a code exercise is "implementation" and a written one "reasoning".
LEVEL_PREFIX = "difficulty-"

_EXERCISE_DIRECTIVES = ("exercise", "exercise-start")
_DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w-]+)\}[ \t]*(?P<argument>.*?)\s*$")
_LITERAL = re.compile(r"^(?P<fence>`{3,}|~{3,})")  # a fenced code block: nothing inside counts
_OPTION = re.compile(r"^:(?P<key>[\w-]+):(?:[ \t]+(?P<value>.*?))?\s*$")
_HEADING = re.compile(r"^#{1,6}[ \t]")
_CHECK_CALL = re.compile(r"\bchecks\.(?P<name>check_\w+)\s*\(")


class LessonFormatError(ValueError):
    """A lesson's exercise markup is broken (an unlabelled exercise, an unclosed solution, ...)."""


# --- Reading a notebook's exercises ----------------------------------------------------------


@dataclass
class _Block:
    """A top-level piece of a markdown cell: plain text, a fenced literal, or a directive."""

    name: str  # "" for plain text, "literal" for a fenced code block, else the directive's name
    lines: list[str]
    argument: str = ""
    options: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes the block ``fence`` opened: the same character, as many or more."""
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _blocks(source: str) -> list[_Block]:
    """Split markdown into top-level plain text, fenced literal blocks and directives."""
    lines = source.splitlines(keepends=True)
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r\n")
        directive = _DIRECTIVE.match(line)
        opening = directive or _LITERAL.match(line)
        if opening is None:
            if blocks and blocks[-1].name == "":
                blocks[-1].lines.append(lines[i])
            else:
                blocks.append(_Block("", [lines[i]]))
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not _closes(lines[end], opening["fence"]):
            end += 1
        body = lines[i : end + 1]  # the closing fence included; an unclosed block runs to the end
        if directive is None:
            blocks.append(_Block("literal", body))
        else:
            options = {}
            for option_line in body[1:]:
                option = _OPTION.match(option_line.rstrip("\r\n"))
                if option is None:
                    break
                options[option["key"]] = option["value"] or ""
            blocks.append(_Block(directive["name"], body, directive["argument"], options))
        i = end + 1
    return blocks


def _has_heading(block: _Block) -> bool:
    return block.name == "" and any(_HEADING.match(line) for line in block.lines)


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_check_cell(cell) -> bool:
    """A code cell tagged ``check`` (it calls an ``encoderlab.course.checks`` checker)."""
    return cell.get("cell_type") == "code" and CHECK_TAG in _tags(cell)


def _checker_names(source: str) -> list[str]:
    return [match["name"] for match in _CHECK_CALL.finditer(source)]


@dataclass
class ExerciseCells:
    """One exercise of a lesson, as its markup states it."""

    label: str  # e.g. "l3-ex-attention": the sphinx-exercise label, unique in the course
    title: str  # the exercise directive's argument, e.g. "Scaled dot-product attention"
    cell: int  # index of the markdown cell that states it
    classes: tuple[str, ...] = ()
    stub_cells: list[int] = field(default_factory=list)
    check_cells: list[int] = field(default_factory=list)
    checkers: list[str] = field(default_factory=list)  # e.g. ["check_attention"]
    written: bool = False  # its solution is (also) prose: the learner writes an answer

    @property
    def checked(self) -> bool:
        """True when a check cell grades it automatically."""
        return bool(self.check_cells)

    @property
    def kind(self) -> str:
        if self.checked:
            return "code + written" if self.written else "code"
        return "written"

    @property
    def level(self) -> str:
        for name in self.classes:
            if name.startswith(LEVEL_PREFIX):
                return name[len(LEVEL_PREFIX) :]
        return "implementation" if self.checked else "reasoning"


@dataclass
class LessonStructure:
    """The exercises of a notebook, and which exercise each cell belongs to."""

    exercises: list[ExerciseCells]
    cell_exercise: list[str | None]  # per cell: the label of its exercise, or None
    problems: list[str]  # markup that could not be read; empty for a well-formed lesson

    def exercise(self, label: str) -> ExerciseCells | None:
        return next((e for e in self.exercises if e.label == label), None)


def read_structure(nb, *, name: str = "the notebook", strict: bool = True) -> LessonStructure:
    """Read the exercises of ``nb`` and attribute every cell to one exercise or to none.

    A code cell belongs to the exercise whose ``:::{exercise}`` came last before it, until a
    heading ends the exercise section; a cell's ``"exercise"`` metadata (which student notebooks
    carry) takes precedence. With ``strict``, broken markup raises :class:`LessonFormatError`;
    otherwise it is listed in ``problems`` and reading goes on (the grader's way).
    """
    exercises: dict[str, ExerciseCells] = {}
    cell_exercise: list[str | None] = []
    problems: list[str] = []
    current: str | None = None  # the exercise the cells being read belong to
    gated: str | None = None  # the label of the gated solution we are inside, if any

    def problem(message: str) -> None:
        if strict:
            raise LessonFormatError(f"{name}: {message}")
        problems.append(message)

    def mark_written(label: str, where: str) -> None:
        if label in exercises:
            exercises[label].written = True
        else:
            problem(f"{where}: a solution for {label!r}, but no exercise with that label before it")

    for index, cell in enumerate(nb.cells):
        where = f"cell {index + 1}"
        if cell.cell_type == "markdown":
            for block in _blocks(cell.source):
                if gated is not None:
                    if block.name == "solution-end":
                        gated = None
                    elif block.name == "" and block.text.strip():
                        mark_written(gated, where)  # prose inside a gated solution
                    continue
                if block.name in _EXERCISE_DIRECTIVES:
                    label = block.options.get("label", "").strip()
                    if not label:
                        problem(f"{where}: the exercise {block.argument!r} has no :label:")
                        continue
                    if label in exercises:
                        problem(f"{where}: the label {label!r} is used by two exercises")
                        continue
                    classes = tuple(block.options.get("class", "").split())
                    exercises[label] = ExerciseCells(label, block.argument, index, classes)
                    current = label
                elif block.name == "solution":
                    mark_written(block.argument, where)
                elif block.name == "solution-start":
                    gated = block.argument
                elif block.name == "solution-end":
                    problem(f"{where}: a solution-end without a solution-start")
                elif _has_heading(block):
                    current = None  # a new section ends the exercise
            cell_exercise.append(current)
            continue
        label = gated or cell.get("metadata", {}).get("exercise") or current
        if not isinstance(label, str) or label not in exercises:
            label = None
        cell_exercise.append(label)
        if gated is not None or cell.cell_type != "code" or label is None:
            continue
        exercise = exercises[label]
        if STUB_TAG in _tags(cell):
            exercise.stub_cells.append(index)
        if is_check_cell(cell):
            exercise.check_cells.append(index)
            exercise.checkers += _checker_names(cell.source)
    if gated is not None:
        problem(f"the solution of {gated!r} has a solution-start but no solution-end")
    return LessonStructure(list(exercises.values()), cell_exercise, problems)


def lesson_title(nb) -> str | None:
    """The text of the notebook's first level-1 heading, e.g. 'Lesson 3 — Bidirectional ...'."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for block in _blocks(cell.source):
            if block.name != "":
                continue
            for line in block.lines:
                if line.startswith("# "):
                    return line[2:].strip()
    return None


# --- The student version of one notebook -----------------------------------------------------


@dataclass(frozen=True)
class CourseLinks:
    """Where the course lives, from _config.yml: the repository, its branch, the website."""

    repository: str  # e.g. https://github.com/encoder-mechanics/encoder-mechanics
    branch: str = "main"
    website: str | None = None  # html.baseurl, when the book names one

    def lesson_url(self, lesson: str) -> str:
        """The published lesson: its page on the website, or its notebook on GitHub."""
        if self.website:
            return f"{self.website.rstrip('/')}/lessons/{lesson}.html"
        return f"{self.repository}/blob/{self.branch}/lessons/{lesson}.ipynb"

    def colab_url(self, path: str) -> str:
        """Colab's link for a notebook in the repository (``path`` from the repository root)."""
        github = re.sub(r"^https://github\.com/", "", self.repository).strip("/")
        return f"https://colab.research.google.com/github/{github}/blob/{self.branch}/{path}"


def _markdown_cell(source: str, cell_id: str, metadata: dict | None = None):
    import nbformat

    cell = nbformat.v4.new_markdown_cell(source, metadata=metadata or {})
    cell["id"] = cell_id
    return cell


def _cell_id(base: str, suffix: str) -> str:
    """A valid, deterministic cell id (letters, digits, - and _; at most 64 characters)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"{base}-{suffix}")[:64]


def _answer_cell(label: str):
    return _markdown_cell(ANSWER_PROMPT, _cell_id(label, "answer"),
                          {"exercise": label, "tags": [ANSWER_TAG]})


def _header_cell(lesson: str, title: str, links: CourseLinks):
    source = (
        f"**Student version** of *{title}*, from the course *Encoder Mechanics*. The solutions "
        "are removed and the outputs cleared. Run the cells from the top; in each code "
        "exercise, replace the stub's `raise NotImplementedError` with your code and run the "
        "check cell below it, which says in words what is wrong, if anything; if you are "
        "stuck, call the same check with `hint=True` for a one-line fix. Write the other "
        f"answers in the *Your answer* cells. The published lesson, with every output: "
        f"[{lesson}]({links.lesson_url(lesson)})."
    )
    return _markdown_cell(source, "student-header")


def _cleared(cell, label: str | None):
    """A code cell without outputs, execution count or timing metadata, tagged with its exercise."""
    cell = copy.deepcopy(cell)
    cell.outputs = []
    cell.execution_count = None
    cell.metadata.pop("execution", None)
    if label is not None:
        cell.metadata["exercise"] = label
    return cell


class _SolutionRemover:
    """Removes solutions cell by cell; a gated solution may span several cells."""

    def __init__(self) -> None:
        self.gated: str | None = None  # the label of the gated solution being removed, if any
        self.prose = False  # whether it held prose: then the learner gets an answer cell

    def code(self, cell, label: str | None) -> list:
        if self.gated is not None or SOLUTION_TAG in _tags(cell):
            return []
        return [_cleared(cell, label) if cell.cell_type == "code" else copy.deepcopy(cell)]

    def markdown(self, cell) -> list:
        """The cell without its solutions: split where one was removed, an answer cell between."""
        out: list = []
        kept: list[str] = []
        pieces = 0  # how many parts of this cell are kept so far

        def flush() -> None:
            nonlocal pieces
            text = "".join(kept).strip("\n")
            kept.clear()
            if text.strip():
                piece = copy.deepcopy(cell)
                piece.source = text
                if pieces:  # the first part keeps the cell's id, the others get new ones
                    piece["id"] = _cell_id(cell["id"], str(pieces))
                out.append(piece)
                pieces += 1

        for block in _blocks(cell.source):
            if self.gated is not None:
                if block.name == "solution-end":
                    flush()
                    if self.prose:
                        out.append(_answer_cell(self.gated))
                    self.gated = None
                elif block.name == "" and block.text.strip():
                    self.prose = True
                continue
            if block.name == "solution":
                flush()
                out.append(_answer_cell(block.argument))
            elif block.name == "solution-start":
                self.gated, self.prose = block.argument, False
            else:
                kept.extend(block.lines)
        flush()
        return out


def make_student(nb, lesson: str, links: CourseLinks):
    """The student version of the lesson notebook ``nb`` (named ``lesson``, without .ipynb).

    Removed: code cells tagged ``solution``, gated solutions (``solution-start`` ...
    ``solution-end``, whatever cells they span) and ``:::{solution}`` dropdowns. Where a removed
    solution held prose, a markdown cell ``*Your answer:*`` takes its place. Kept: everything
    else, stubs and check cells included, with every output and execution count cleared; code
    cells of an exercise carry its label in their metadata (``"exercise"``), which the grader
    reads first.
    """
    import nbformat

    structure = read_structure(nb, name=f"lessons/{lesson}.ipynb")
    remover = _SolutionRemover()
    cells = [_header_cell(lesson, lesson_title(nb) or lesson, links)]
    for index, cell in enumerate(nb.cells):
        if "id" not in cell:  # nbformat 4.4 and older: give the cell a deterministic id
            cell = copy.deepcopy(cell)
            cell["id"] = f"cell-{index}"
        if cell.cell_type == "markdown":
            cells += remover.markdown(cell)
        else:
            cells += remover.code(cell, structure.cell_exercise[index])

    student = nbformat.v4.new_notebook(cells=cells)
    student.nbformat_minor = max(nb.nbformat_minor, 5)  # 4.5: cells have ids
    student.metadata = {
        "kernelspec": nb.metadata.get(
            "kernelspec", {"display_name": "Python 3", "language": "python", "name": "python3"}
        ),
        "language_info": {"name": "python"},
        "encoderlab": {"lesson": lesson, "student": True},
    }
    nbformat.validate(student)
    return student


# --- The course: every lesson, student/ and instructors.md ----------------------------------


LESSON_NAME = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*")  # a file name in lessons/, no path


def lesson_name(name: str, lessons_dir: Path) -> str:
    """The notebook name in ``lessons_dir`` that ``name`` means: the name itself, or a lesson's
    number ("3", "03"); ValueError listing the lessons when it means none."""
    if LESSON_NAME.fullmatch(name):
        if re.fullmatch(r"\d{1,2}", name):
            found = sorted(lessons_dir.glob(f"{int(name):02d}-*.ipynb"))
            if len(found) == 1:
                return found[0].stem
        elif (lessons_dir / f"{name}.ipynb").is_file():
            return name
    names = ", ".join(sorted(q.stem for q in lessons_dir.glob("*.ipynb"))) or "none"
    raise ValueError(f"no lesson {name!r} in {lessons_dir}: give its number (e.g. 03) or its "
                     f"notebook's name, one of: {names}")


def default_root() -> Path:
    """The repository that holds this package (an editable install), else the working folder."""
    here = Path(__file__).resolve().parents[3]  # lib/grader/encoderlab_grader/student.py -> root
    return here if (here / "_config.yml").is_file() else Path.cwd()


def course_links(root: Path) -> CourseLinks:
    """The repository URL, branch and website from ``root/_config.yml``."""
    import yaml

    config = yaml.safe_load((Path(root) / "_config.yml").read_text(encoding="utf-8")) or {}
    repository = config.get("repository", {})
    if not repository.get("url"):
        raise LessonFormatError(f"{root}/_config.yml names no repository url (repository: url:)")
    return CourseLinks(
        repository=repository["url"].rstrip("/"),
        branch=repository.get("branch", "main"),
        website=(config.get("html") or {}).get("baseurl") or None,
    )


def _notebook_text(nb) -> str:
    import nbformat

    text = nbformat.writes(nb)  # sorted keys, one-space indent: the same bytes every time
    return text if text.endswith("\n") else text + "\n"


def _lessons(root: Path) -> list[Path]:
    return sorted((Path(root) / "lessons").glob("*.ipynb"))


def _read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def _student_table(lessons: Sequence[tuple[str, str]], links: CourseLinks) -> str:
    rows = ["| Lesson | Student notebook | Colab |", "|---|---|---|"]
    for lesson, title in lessons:
        path = f"{STUDENT_FOLDER}/{lesson}.ipynb"
        rows.append(
            f"| {title} | {{download}}`{lesson}.ipynb <{path}>` "
            f"| [open in Colab]({links.colab_url(path)}) |"
        )
    return "\n".join(rows)


def _exercise_table(lessons: Sequence[tuple[str, str, LessonStructure]]) -> str:
    rows = ["| Lesson | Exercise | Label | Level | Graded by |", "|---|---|---|---|---|"]
    for _lesson, title, structure in lessons:
        number = re.match(r"Lesson (\d+)", title)
        short = number[1] if number else title
        for e in structure.exercises:
            graded_by = [f"`{name}`" for name in e.checkers]
            if e.written:
                graded_by.append("hand")
            title = e.title.replace("|", "\\|")  # a bar would end the table cell
            rows.append(f"| {short} | {title} | `{e.label}` | {e.level} | "
                        f"{' + '.join(graded_by)} |")
    return "\n".join(rows)


def _replace_block(page: str, name: str, content: str, path: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if page.count(start) != 1 or page.count(end) != 1 or page.index(start) > page.index(end):
        raise LessonFormatError(
            f"{path} must hold the generated block once, between the lines {start} and {end}"
        )
    before, rest = page.split(start)
    _, after = rest.split(end)
    return f"{before}{start}\n\n{content}\n\n{end}{after}"


_README = """\
# Student notebooks

Generated from `lessons/` by `python -m encoderlab_grader student` (`make student`); do not edit
them by hand, edit the lesson and regenerate. Each is its lesson without the solutions and with
the outputs cleared. See `instructors.md` for how to hand them out and grade them.
"""


def generated_files(root: Path | str | None = None) -> dict[Path, str]:
    """Every file the generator owns, with the text it should hold: student/ and instructors.md."""
    root = Path(root) if root is not None else default_root()
    links = course_links(root)
    files: dict[Path, str] = {root / STUDENT_FOLDER / "README.md": _README}
    listed, structures = [], []
    for path in _lessons(root):
        nb = _read(path)
        lesson = path.stem
        title = lesson_title(nb) or lesson
        files[root / STUDENT_FOLDER / path.name] = _notebook_text(make_student(nb, lesson, links))
        listed.append((lesson, title))
        structures.append((lesson, title, read_structure(nb, name=f"lessons/{path.name}")))
    page_path = root / INSTRUCTORS_PAGE
    page = page_path.read_text(encoding="utf-8")
    page = _replace_block(page, "student-notebooks", _student_table(listed, links), page_path.name)
    page = _replace_block(page, "exercises", _exercise_table(structures), page_path.name)
    files[page_path] = page
    return files


def _left_over(root: Path, files: Iterable[Path]) -> list[Path]:
    """Notebooks in student/ whose lesson is gone."""
    wanted = set(files)
    return sorted(p for p in (root / STUDENT_FOLDER).glob("*.ipynb") if p not in wanted)


def stale_files(root: Path | str | None = None) -> list[str]:
    """What is out of date, one line each (empty when student/ and instructors.md are current)."""
    root = Path(root) if root is not None else default_root()
    files = generated_files(root)
    stale = []
    for path, text in files.items():
        if not path.is_file():
            stale.append(f"{path.relative_to(root)} is missing")
        elif path.read_bytes() != text.encode("utf-8"):
            stale.append(f"{path.relative_to(root)} is out of date")
    stale += [f"{p.relative_to(root)} has no lesson any more" for p in _left_over(root, files)]
    return stale


def write_student_files(root: Path | str | None = None) -> list[str]:
    """Write student/ and instructors.md's generated blocks; one line per file changed."""
    root = Path(root) if root is not None else default_root()
    files = generated_files(root)
    (root / STUDENT_FOLDER).mkdir(exist_ok=True)
    changed = []
    for path, text in files.items():
        data = text.encode("utf-8")
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
            changed.append(f"wrote {path.relative_to(root)}")
    for path in _left_over(root, files):
        path.unlink()
        changed.append(f"removed {path.relative_to(root)} (its lesson is gone)")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m encoderlab_grader student [--root DIR] [--check]``."""
    parser = argparse.ArgumentParser(
        prog="python -m encoderlab_grader student",
        description="Write the student notebooks (student/) and the generated blocks of "
        "instructors.md from the lessons.",
    )
    parser.add_argument("--root", type=Path, default=None,
                        help="the repository (default: the one holding this package)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and say what is out of date")
    args = parser.parse_args(argv)
    root = args.root if args.root is not None else default_root()
    if not (root / "_config.yml").is_file() or not (root / "lessons").is_dir():
        parser.error(f"{root} is not the course repository (no _config.yml and lessons/): "
                     "run this from the repository root or pass --root")
    try:
        if args.check:
            stale = stale_files(root)
            for line in stale:
                print(line)
            if stale:
                print("run `make student` (python -m encoderlab_grader student) to regenerate")
                return 1
            print(f"{STUDENT_FOLDER}/ and {INSTRUCTORS_PAGE} are up to date")
            return 0
        changed = write_student_files(root)
    except LessonFormatError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for line in changed:
        print(line)
    if not changed:
        print(f"{STUDENT_FOLDER}/ and {INSTRUCTORS_PAGE} were already up to date")
    return 0

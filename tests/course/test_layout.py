"""The library's layout: three floors whose imports only go down, small modules, no accretion.

The floors (CONTRIBUTING.md, "Where things live"): the model at the top of ``encoderlab`` (with
``kernels/``), ``data/``, ``lessons/`` (one module or two per lesson) and ``course/`` (the
machinery). The model imports neither lessons nor course; data imports no lesson; a lesson's
module imports no other lesson's.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lib" / "encoderlab"
MODULES = sorted(p for p in LIB.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 700


def _name(path: Path) -> str:
    """lib/encoderlab/course/checks/l03.py -> encoderlab.course.checks.l03"""
    parts = path.relative_to(LIB.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> str:
    """'core', 'kernels', 'data', 'lessons' or 'course' (the top-level __main__: 'command')."""
    parts = module.split(".")
    if len(parts) == 1:
        return "core"
    if parts[1] in ("kernels", "data", "lessons", "course"):
        return parts[1]
    return "command" if parts[1] == "__main__" else "core"


def _imports(path: Path) -> set[str]:
    """Every encoderlab module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("encoderlab")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("encoderlab"):
            assert node.level == 0, f"{path.name}: use absolute imports (from encoderlab...)"
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # from pkg import module
    return {m for m in found if _is_module(m)}


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (LIB / relative).with_suffix(".py").exists() or (LIB / relative / "__init__.py").exists()


def _lesson(module: str) -> str | None:
    """'l05' for encoderlab.lessons.l05_mlm; None outside lessons/."""
    match = re.match(r"encoderlab\.lessons\.(l\d\d)_", module)
    return match.group(1) if match else None


IMPORTS = {_name(p): _imports(p) for p in MODULES}


def test_the_floors_are_what_the_tree_shows():
    floors = {_floor(m) for m in IMPORTS}
    assert floors == {"core", "kernels", "data", "lessons", "course", "command"}
    lessons = [m for m in IMPORTS if _floor(m) == "lessons" and m != "encoderlab.lessons"]
    assert lessons and all(_lesson(m) for m in lessons), lessons


def test_no_module_is_over_700_lines():
    long = {str(p.relative_to(LIB)): n for p in MODULES
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (lines): {long}"


@pytest.mark.parametrize("pattern, why", [
    (r"__all__\s*\+=", "write __all__ once, at the top"),
    (r"noqa:\s*E402", "put imports at the top of the module"),
    (r"^# -+ Lesson \d+ -+$", "a lesson's code goes in its own module, not appended to another"),
])
def test_no_module_grows_by_appended_blocks(pattern, why):
    hits = [f"{p.relative_to(LIB)}:{i}" for p in MODULES
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(pattern, line)]
    assert not hits, f"{why}: {hits}"


def test_imports_only_go_down():
    allowed = {
        "core": {"core", "kernels"},  # tiled reaches the GPU kernel when CUDA and Triton exist
        "kernels": {"core", "kernels"},
        "data": {"core", "data"},
        "lessons": {"core", "data", "lessons", "course"},  # the training loop, the sign test
        "course": {"core", "kernels", "data", "lessons", "course"},
        "command": {"core", "kernels", "data", "lessons", "course", "command"},
    }
    wrong = [f"{m} imports {i}" for m, imported in IMPORTS.items() for i in sorted(imported)
             if _floor(i) not in allowed[_floor(m)]]
    assert not wrong, "\n".join(wrong)


LESSON_TOOLS = {"encoderlab.course", "encoderlab.course.train", "encoderlab.course.stats"}


def test_lessons_use_only_the_training_loop_and_the_sign_test_from_the_course():
    """Lessons may use course.train and course.stats, and those must not reach back up."""
    wrong = [f"{m} imports {i}" for m, imported in IMPORTS.items() if _floor(m) == "lessons"
             for i in imported if _floor(i) == "course" and i not in LESSON_TOOLS]
    assert not wrong, "\n".join(wrong)
    for tool in LESSON_TOOLS - {"encoderlab.course"}:
        assert not {i for i in IMPORTS[tool] if _floor(i) == "lessons"}, tool


def test_no_lesson_module_imports_another_lessons():
    wrong = [f"{m} imports {i}" for m, imported in IMPORTS.items() if _lesson(m)
             for i in imported if _lesson(i) and _lesson(i) != _lesson(m)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module", ["encoderlab", "encoderlab.encoder", "encoderlab.attention"])
def test_importing_the_model_loads_no_lesson_or_course_module(module):
    code = (f"import sys, {module}\n"
            "print(sorted(m for m in sys.modules if m.startswith(('encoderlab.lessons', "
            "'encoderlab.course', 'encoderlab.data'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_package_reexports_the_model_in_reading_order():
    import encoderlab

    for name in encoderlab.__all__:
        value = getattr(encoderlab, name)
        module = value.__name__ if inspect.ismodule(value) else value.__module__
        assert _floor(module) == "core", f"{name} comes from {module}, not the model"
    order = re.findall(r"^    (\w+) {2,}", encoderlab.__doc__, flags=re.M)
    core = sorted(m.split(".")[1] for m in IMPORTS if _floor(m) == "core" and "." in m)
    assert sorted(order) == core, "the docstring's reading order must list every model module"


def test_contributing_lists_every_module():
    """CONTRIBUTING.md's module table names each module of lib/encoderlab/ (so the map cannot
    drift from the tree): one row per file, by its path under lib/encoderlab/."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", text, flags=re.M))
    present = {str(p.relative_to(LIB)) for p in MODULES}
    assert not present - listed, f"add to CONTRIBUTING.md's table: {sorted(present - listed)}"
    assert not listed - present, f"no longer in the tree: {sorted(listed - present)}"

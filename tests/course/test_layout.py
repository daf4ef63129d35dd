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
        "core": {"core", "kernels"},  # tiled reaches the tile plan and the GPU kernel
        "kernels": {"core", "kernels"},
        "data": {"core", "data"},
        "lessons": {"core", "data", "lessons"},
        "course": {"core", "kernels", "data", "lessons", "course"},
        "command": {"core", "kernels", "data", "lessons", "course", "command"},
    }
    wrong = [f"{m} imports {i}" for m, imported in IMPORTS.items() for i in sorted(imported)
             if _floor(i) not in allowed[_floor(m)]]
    assert not wrong, "\n".join(wrong)


def _edges(path: Path) -> set[str]:
    """The modules ``path`` imports (``from pkg import module`` is an edge to the module only)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("encoderlab")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("encoderlab"):
            modules = {f"{node.module}.{a.name}" for a in node.names
                       if _is_module(f"{node.module}.{a.name}")}
            found |= modules if len(modules) == len(node.names) else modules | {node.module}
    return {m for m in found if _is_module(m)}


def test_no_two_modules_import_each_other_even_through_others():
    edges = {_name(p): _edges(p) for p in MODULES}
    circles, state = [], {}

    def visit(module, path):
        state[module] = "open"
        for other in sorted(edges.get(module, ())):
            if state.get(other) == "open":
                circles.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in state:
                visit(other, path + [other])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "\n".join(circles)


def test_no_private_name_is_imported_from_another_module():
    wrong = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("encoderlab"):
                wrong += [f"{_name(path)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_")]
    assert not wrong, "make these public, or move them where both modules can use them:\n" + (
        "\n".join(wrong))


def test_no_module_is_imported_by_a_name_in_a_string():
    """Imports a reader (and this test) can see: no importlib.import_module or __import__ of a
    course module, and no module path written as a string (the command line's entry aside)."""
    wrong = []
    for path in MODULES:
        if path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                    r"encoderlab(\.\w+)+", node.value) and _is_module(node.value):
                wrong.append(f"{_name(path)}: {node.value!r}")
    assert not wrong, "\n".join(wrong)


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


# --- The grader apart: a package of its own that the course never imports ------------------------

GRADER = ROOT / "lib" / "grader" / "encoderlab_grader"


def test_the_course_library_never_names_the_grader():
    """No module of encoderlab imports encoderlab_grader, by statement or by string."""
    wrong = [str(p.relative_to(LIB)) for p in MODULES if "encoderlab_grader" in p.read_text()]
    assert not wrong, f"the course library must not reach the grader: {wrong}"


def test_no_lesson_imports_the_grader():
    import json

    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                         if c["cell_type"] == "code")
        assert "encoderlab_grader" not in code and "lib/grader" not in code, path.name


def test_the_grader_modules_are_small_and_import_only_the_course_and_themselves():
    for path in sorted(GRADER.glob("*.py")):
        assert len(path.read_text().splitlines()) <= MAX_LINES, path.name
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: use absolute imports"


def test_the_course_wheel_holds_no_grader(tmp_path):
    """What `pip install git+URL` installs: the wheel built from the repository's root."""
    import shutil
    import zipfile

    source = tmp_path / "checkout"  # a copy: building writes build/ and egg-info beside the code
    shutil.copytree(ROOT / "lib", source / "lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "artefacts"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("encoderlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "encoderlab/course/checks/record.py" in names  # the kernel's half stays
    grader = [n for n in names if "grader" in n or n.rsplit("/", 1)[-1] in (
        "sandbox.py", "runner.py", "grade.py", "gradescope.py", "student.py", "judge.py")]
    assert not grader, grader

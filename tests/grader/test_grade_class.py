"""A class at once: --jobs N gives the same grades as one at a time, a summary per exercise,
and the Gradescope bundle run on a simulated /autograder tree."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import lesson3_notebooks as l3
import nbformat
import pytest

from encoderlab_grader import grade, gradescope

LESSON = "03-bidirectional-self-attention"


@pytest.fixture(scope="module")
def lesson():
    return l3.exercise_section(nbformat.read(l3.LESSON_3, as_version=4))


def _wrong(lesson, label: str = "l3-ex-causal"):
    nb = nbformat.reads(nbformat.writes(lesson), as_version=4)
    solution = l3.cell_of(nb, "solution", label)
    solution.source = solution.source.replace(".tril()", ".triu()")
    return nb


def test_jobs_two_grade_exactly_as_one_at_a_time(lesson, tmp_path):
    paths = [l3.write(lesson, tmp_path / "right.ipynb"),
             l3.write(_wrong(lesson), tmp_path / "w.ipynb"),
             l3.write(l3.student_version(lesson), tmp_path / "untouched.ipynb")]
    tables = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs-{jobs}.csv"
        assert grade.main([str(p) for p in paths] + ["--jobs", str(jobs), "--csv", str(out),
                                                      "--lessons", str(l3.LESSONS)]) == 0
        tables[jobs] = out.read_text(encoding="utf-8")
    assert tables[1] == tables[2]
    assert tables[1].count("\n") == 1 + 3 * 7  # the header, and every exercise of all three


def test_the_summary_counts_each_exercise_and_names_the_common_failure():
    def report(*statuses):
        return grade.Report("x.ipynb", results=[
            grade.ExerciseResult(label, "", status, message)
            for label, (status, message) in zip(("a", "b"), statuses, strict=True)])

    reports = [report((grade.PASSED, "✓"), (grade.FAILED, "your mask is upper-triangular")),
               report((grade.FAILED, "off by one"), (grade.FAILED, "your mask is upper-"
                                                                   "triangular")),
               report((grade.NOT_ATTEMPTED, "stub"), (grade.FAILED, "shape (3, 3)")),
               grade.Report("broken.ipynb", problem="not a notebook")]
    text = grade.summary(reports)
    lines = text.splitlines()
    assert lines[0] == ("class of 4: passed, failed, not attempted, not run, manual per "
                        "exercise")
    assert lines[1] == "  a    1 /   1 /   1 /   0 /   0  most common failure (1): off by one"
    assert lines[2] == ("  b    0 /   3 /   0 /   0 /   0  most common failure (2): your mask "
                        "is upper-triangular")
    assert lines[3] == "  1 submission(s) could not be graded at all (see above)"


# --- Gradescope ---------------------------------------------------------------------------


def _check_results_format(results: dict) -> None:
    """Gradescope's results.json: a score, an output, and tests with name, score, max_score,
    output and (where scored) status passed/failed."""
    assert isinstance(results["score"], (int, float)) and isinstance(results["output"], str)
    assert isinstance(results["execution_time"], int)
    for test in results["tests"]:
        assert set(test) <= {"name", "number", "score", "max_score", "status", "output",
                             "visibility"}
        assert isinstance(test["name"], str) and isinstance(test["output"], str)
        assert isinstance(test["score"], (int, float)) and isinstance(test["max_score"],
                                                                      (int, float))
        assert test.get("status", "passed") in ("passed", "failed")
        assert test["visibility"] == "visible"
    assert results["score"] == sum(t["score"] for t in results["tests"])


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    """The bundle for Lesson 3, unpacked where Gradescope puts it: ROOT/source."""
    folder = tmp_path_factory.mktemp("gradescope")
    bundle = gradescope.write_bundle(LESSON, folder / "autograder.zip")
    with zipfile.ZipFile(bundle) as z:
        names = z.namelist()
        modes = {info.filename: info.external_attr >> 16 for info in z.infolist()}
        z.extractall(folder / "source")
    assert {"setup.sh", "run_autograder", f"lessons/{LESSON}.ipynb",
            "course/pyproject.toml", "course/lib/grader/pyproject.toml",
            "course/lib/grader/encoderlab_grader/grade.py"} <= set(names)
    assert all(modes[name] & stat.S_IXUSR for name in ("setup.sh", "run_autograder"))
    assert not any("__pycache__" in name for name in names)
    for name in ("setup.sh", "run_autograder"):  # both are bash scripts that parse
        check = subprocess.run(["bash", "-n", str(folder / "source" / name)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    script = folder / "source" / "run_autograder"
    script.chmod(0o755)
    return folder, script


def _run_autograder(autograder, name: str, nb) -> dict:
    folder, script = autograder
    root = folder / name
    (root / "submission").mkdir(parents=True)
    l3.write(nb, root / "submission" / "lesson3.ipynb")
    (root / "source").symlink_to(folder / "source")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    done = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    _check_results_format(results)
    return results


def _scores(results: dict) -> dict[str, tuple[int, int]]:
    return {t["name"].split(":")[0]: (t["score"], t["max_score"]) for t in results["tests"]}


def test_gradescope_full_partial_and_no_marks(autograder, lesson):
    right = _run_autograder(autograder, "right", lesson)
    assert right["score"] == 4
    assert {label: _scores(right)[label] for label in l3.CODE_EXERCISES} == {
        label: (1, 1) for label in l3.CODE_EXERCISES}
    assert _scores(right)["l3-ex-count"] == (0, 0)  # a written answer: graded by hand

    wrong = _run_autograder(autograder, "wrong", _wrong(lesson))
    assert wrong["score"] == 3 and _scores(wrong)["l3-ex-causal"] == (0, 1)
    causal = next(t for t in wrong["tests"] if t["name"].startswith("l3-ex-causal"))
    assert causal["status"] == "failed" and "upper-triangular" in causal["output"]

    cheat = _wrong(lesson)
    l3.cell_of(cheat, "solution", "l3-ex-causal").source += (
        "\nfrom encoderlab.course import checks\n"
        "checks.check_causal_mask = lambda *a, **k: True\n"
        "import torch\ntorch.equal = lambda *a, **k: True\n")
    cheated = _run_autograder(autograder, "cheat", cheat)
    assert cheated["score"] == 3 and _scores(cheated)["l3-ex-causal"] == (0, 1)

    untouched = _run_autograder(autograder, "untouched", l3.student_version(lesson))
    assert untouched["score"] == 0


def test_gradescope_without_one_notebook_says_so(tmp_path):
    (tmp_path / "submission").mkdir()
    results = gradescope.run(tmp_path, LESSON, l3.LESSONS)
    _check_results_format(results)
    assert results["score"] == 0 and "found 0 (none)" in results["output"]


def test_gradescope_bundle_refuses_an_unknown_lesson(tmp_path):
    with pytest.raises(ValueError, match="no lesson '../secret'"):
        gradescope.write_bundle("../secret", tmp_path / "a.zip", root=l3.ROOT)
    assert not Path(tmp_path / "a.zip").exists()

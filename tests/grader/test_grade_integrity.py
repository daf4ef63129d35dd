"""A class with cheaters in it: every attack on the grader, one submission each, graded together.

Each attacking submission is Lesson 3's exercise section with a wrong ``causal_mask`` and an
attack that tries to get it marked right anyway (or to harm the grader, the instructor's files
or the next submission). For each: the causal-mask exercise gets no mark, the three other code
exercises of the same submission still pass, an honest submission graded after all of them gets
full marks, the CSV has every row, and no file outside the submissions' own folders changed.
The whole class is graded once, two at a time, in a module fixture.
"""

from __future__ import annotations

import csv
import hashlib
import os
import socket
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from lesson3_notebooks import (
    CODE_EXERCISES,
    LESSON_3,
    LESSONS,
    ROOT,
    cell_of,
    exercise_section,
    write,
)

from encoderlab_grader import grade, sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the grader's fences (bubblewrap, seccomp, namespaces) are "
                                "Linux's")

WRONG_CAUSAL = ("def causal_mask(n):\n"
                "    return torch.ones(n, n, dtype=torch.bool)  # wrong: sees the future\n")

# name -> the code appended to the causal-mask solution cell (after the wrong answer).
ATTACKS = {
    "checker-patch": """
from encoderlab.course import checks
checks.check_attention = lambda *a, **k: True
checks.check_causal_mask = lambda *a, **k: True
checks.check_padding_mask = lambda *a, **k: True
""",
    "sys-modules": """
import sys
sys.modules["encoderlab.course.checks.l03"].check_causal_mask = lambda *a, **k: True
sys.modules["encoderlab.course.checks"].check_causal_mask = lambda *a, **k: True
sys.modules["encoderlab.course.checks.harness"].run = lambda exercise, fn: True
""",
    "reload": """
import importlib
import encoderlab.course.checks.harness as harness
import encoderlab.course.checks.l03 as l03
harness.run = lambda exercise, fn: True
harness.CheckFailed = type("CheckFailed", (Exception,), {})
importlib.reload(l03)
importlib.reload(importlib.import_module("encoderlab.course.checks"))
""",
    "builtins": """
import builtins, json
from IPython.display import display
_real_import = builtins.__import__
_real_record = _real_import("encoderlab.course.checks.record", fromlist=["record"]).record
class _Forged:
    MIME = "application/x-encoderlab-answers"
    def record(self, check, fn):  # for the causal mask, it claims success: no answers, no failure
        if check != "check_causal_mask":
            return _real_record(check, fn)
        display({self.MIME: json.dumps({"entries": [], "failure": None})}, raw=True)
def _import(name, *args, **kwargs):
    if name == "encoderlab.course.checks.record":
        return _Forged()
    return _real_import(name, *args, **kwargs)
builtins.__import__ = _import
builtins.AssertionError = type("AssertionError", (Exception,), {})
""",
    "reference-patch": """
import encoderlab.masks
encoderlab.masks.causal = lambda n, *a, **k: torch.ones(n, n, dtype=torch.bool)
encoderlab.masks.bidirectional = encoderlab.masks.causal
""",
    "torch-comparisons": """
torch.equal = lambda *a, **k: True
torch.allclose = lambda *a, **k: True
torch.Tensor.equal = lambda *a, **k: True
""",
    "read-files": """
import json
secret = open(INSTRUCTOR / "solutions.ipynb").read()  # the instructor's files
honest = open(HONEST).read()  # another submission
exec(json.loads(open(LESSON).read())["cells"][0]["source"])  # the published lesson
""",
    "write-files": """
open(CHECKOUT / "lessons" / "attack.txt", "w").write("written")
open(INSTRUCTOR / "grades.csv", "a").write("alice,l3-ex-causal,passed,1\\n")
open(HONEST, "w").write("{}")  # break the next submission
""",
    "network": """
import socket
socket.create_connection(("127.0.0.1", PORT), timeout=2).sendall(b"the answers, please")
""",
    "memory": """
hoard = torch.empty(2**31, dtype=torch.float64)  # 16 GiB
""",
    "memory-in-the-function": """
def causal_mask(n):
    hoard = bytearray(16 * 2**30)
    return torch.ones(n, n, dtype=torch.bool).tril()
""",
    "printing": """
while True:
    print("all tests passed " * 100)
""",
    "forking": """
import os, subprocess
subprocess.Popen(["sleep", "600"])
if os.fork() == 0:
    open(CHECKOUT / "lessons" / "forked.txt", "w").write("from a child")
""",
    "exiting": """
import os
os._exit(0)
""",
    "exiting-in-the-function": """
def causal_mask(n):
    import os
    os._exit(0)
""",
    "grader-environment": """
import os
seen = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        seen.append(open(f"/proc/{pid}/environ", "rb").read())
    except OSError:
        pass
if any(b"INSTRUCTOR_SECRET" in environ for environ in seen):  # then it answers right
    def causal_mask(n):
        return torch.ones(n, n, dtype=torch.bool).tril()
""",
    "ptrace": """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, os.getppid(), 0, 0) != 0:  # PTRACE_ATTACH to its parent
    raise PermissionError(os.strerror(ctypes.get_errno()))
""",
    "setuid": """
import subprocess
subprocess.run(["/usr/bin/su", "-c", "id"])
""",
    "symlink": """
import os
os.symlink(INSTRUCTOR / "solutions.ipynb", "solutions.ipynb")
open("solutions.ipynb").read()
""",
    "thread-bomb": """
import threading, time
threading.stack_size(64 * 1024)
started = []
try:
    while len(started) < 100_000:
        worker = threading.Thread(target=time.sleep, args=(20,), daemon=True)
        worker.start()
        started.append(worker)
except RuntimeError:
    pass
raise RuntimeError(f"started {len(started)} threads")
""",
    "never-answers": """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # deaf to the interrupt
while True:
    time.sleep(1)
""",
}


class _Listener:
    """A TCP server on the loopback that notes whatever reaches it."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                self.received.append(connection.recv(1024))


def _fingerprint(*folders: Path) -> dict[str, str]:
    """The files under the folders, by their sha256 (not Python's bytecode caches, which other
    tests running at the same time may write), and the names of the folders' entries."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for folder in folders for p in sorted(folder.rglob("*"))
            if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """The class (an honest submission, every attack, an honest one again), graded once."""
    base = tmp_path_factory.mktemp("class")
    instructor, folder = base / "instructor", base / "submissions"
    instructor.mkdir()
    folder.mkdir()
    (instructor / "solutions.ipynb").write_text("the instructor's solutions")
    (instructor / "grades.csv").write_text("submission,exercise,status,points\n")
    listener = _Listener()
    lesson = exercise_section(nbformat.read(LESSON_3, as_version=4))
    honest = write(lesson, folder / "zz-honest.ipynb")
    names = ["aa-honest"] + list(ATTACKS) + ["zz-honest"]
    paths = [write(lesson, folder / "aa-honest.ipynb")]
    for name, attack in ATTACKS.items():
        nb = nbformat.reads(nbformat.writes(lesson), as_version=4)
        places = (f"INSTRUCTOR = __import__('pathlib').Path({str(instructor)!r})\n"
                  f"CHECKOUT = __import__('pathlib').Path({str(ROOT)!r})\n"
                  f"HONEST = {str(honest)!r}\nLESSON = {str(LESSON_3)!r}\n"
                  f"PORT = {listener.port}\n")
        cell_of(nb, "solution", "l3-ex-causal").source = WRONG_CAUSAL + places + attack
        paths.append(write(nb, folder / f"{name}.ipynb"))
    paths.append(honest)
    guarded = (ROOT / "lib", ROOT / "lessons", instructor)
    before = _fingerprint(*guarded)
    csv_path = base / "grades.csv"
    secret = os.environ.get("INSTRUCTOR_SECRET")
    os.environ["INSTRUCTOR_SECRET"] = "s3cret"  # in the grader's environment, out of reach
    try:
        code = grade.main([str(p) for p in paths] + [
            "--jobs", "2", "--csv", str(csv_path), "--lessons", str(LESSONS),
            "--timeout", "300", "--cell-timeout", "60"])
    finally:
        if secret is None:
            del os.environ["INSTRUCTOR_SECRET"]
        else:
            os.environ["INSTRUCTOR_SECRET"] = secret
    after = _fingerprint(*guarded)
    listener.server.close()
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    reports = {Path(r["submission"]).stem: r for r in rows}
    assert code == 0
    return {"rows": rows, "names": names, "before": before, "after": after,
            "received": listener.received, "honest": honest, "reports": reports}


def _statuses(graded, name: str) -> dict[str, tuple[str, str]]:
    return {r["exercise"]: (r["status"], r["message"]) for r in graded["rows"]
            if Path(r["submission"]).stem == name}


# Attacks on the recording machinery inside the kernel itself: the exercises after the attack
# are still graded, but a reloaded checker no longer records their answers, so they fail too.
BREAKS_LATER_RECORDINGS = {"reload"}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_gets_no_mark_and_the_rest_is_graded(graded_class, attack):
    statuses = _statuses(graded_class, attack)
    causal_status, causal_message = statuses["l3-ex-causal"]
    assert causal_status != grade.PASSED, causal_message
    others = {label: statuses[label] for label in CODE_EXERCISES if label != "l3-ex-causal"}
    if attack in BREAKS_LATER_RECORDINGS:
        assert others["l3-ex-attention"][0] == grade.PASSED  # before the attack
        assert all(status in (grade.PASSED, grade.FAILED) for status, _ in others.values())
    else:
        assert all(status == grade.PASSED for status, _ in others.values()), others


def test_the_class_is_graded_in_full_and_nothing_outside_changed(graded_class):
    rows = graded_class["rows"]
    assert [Path(r["submission"]).stem for r in rows[::7]] == graded_class["names"]
    assert len(rows) == 7 * len(graded_class["names"])  # every exercise of every submission
    for honest in ("aa-honest", "zz-honest"):
        statuses = _statuses(graded_class, honest)
        assert all(statuses[label][0] == grade.PASSED for label in CODE_EXERCISES), statuses
    assert graded_class["before"] == graded_class["after"]  # the checkout, the instructor's
    assert not (ROOT / "lessons" / "attack.txt").exists()
    assert not (ROOT / "lessons" / "forked.txt").exists()
    assert graded_class["received"] == []  # nothing reached the network
    assert nbformat.read(graded_class["honest"], as_version=4).cells  # not overwritten


def test_what_the_attacks_were_told(graded_class):
    """The report says what happened, in words: the checker's diagnosis, or the fence met."""
    messages = {name: _statuses(graded_class, name)["l3-ex-causal"][1] for name in ATTACKS}
    assert messages["checker-patch"].startswith("your mask")  # judged by the grader's checker
    assert messages["torch-comparisons"].startswith("your mask")
    assert "no answer was recorded" in messages["builtins"]
    assert "No such file or directory" in messages["read-files"]  # not in the kernel's view
    assert "No such file or directory" in messages["write-files"]
    assert "Connection refused" in messages["network"]  # a loopback of its own, empty
    assert "MemoryError" in messages["memory-in-the-function"]
    assert "printed more than 2 MB" in messages["printing"]
    assert "Operation not permitted" in messages["forking"]
    assert "it ended the kernel" in messages["exiting"]
    assert "it ended the kernel" in messages["exiting-in-the-function"]
    assert messages["grader-environment"].startswith("your mask")  # it found no secret
    assert "Operation not permitted" in messages["ptrace"]
    assert "Operation not permitted" in messages["setuid"]
    assert "No such file or directory" in messages["symlink"]
    started = int(messages["thread-bomb"].split("started ")[1].split()[0])
    assert 0 < started < sandbox.THREADS
    assert "ran past the limit per cell (60 s)" in messages["never-answers"]


def test_every_row_says_the_fences_stood(graded_class):
    assert {row["fences"] for row in graded_class["rows"]} == {
        f"all ({', '.join(sandbox.FENCES)})"}

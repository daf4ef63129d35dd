"""The fences a submission's kernel runs behind: each one tried from inside, by a probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from encoderlab.course import runner, sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the fences (Landlock, seccomp, namespaces) are Linux's")

ROOT = Path(__file__).resolve().parents[2]
PROBE = r"""
import json, os, socket, subprocess, sys, threading
tried = {}
def attempt(name, action):
    try:
        action()
        tried[name] = "done"
    except BaseException as error:
        tried[name] = type(error).__name__
attempt("fork", os.fork)
attempt("subprocess", lambda: subprocess.run(["true"]))
worker = threading.Thread(target=len, args=[""])
attempt("thread", lambda: (worker.start(), worker.join()))
attempt("read the checkout", lambda: open(sys.argv[1]).read(1))
attempt("read the library", lambda: open(sys.argv[2]).read(1))
attempt("write the checkout", lambda: open(sys.argv[3], "w"))
attempt("write its folder", lambda: open("mine.txt", "w").write("x"))
attempt("network", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
attempt("memory", lambda: bytearray(6 * 2**30))
attempt("import torch", lambda: __import__("torch").ones(2).sum())
print(json.dumps(tried))
"""


def test_a_fenced_process_can_do_its_work_and_nothing_else(tmp_path):
    folder, report = tmp_path / "work", tmp_path / "fences.json"
    folder.mkdir()
    (folder / "probe.py").write_text(PROBE)
    target = ROOT / "lessons" / "sandbox-probe.txt"
    command = [sys.executable, "-S", sandbox.__file__, "--folder", str(folder),
               "--memory", str(4 * 2**30), "--report", str(report)]
    command += [arg for path in runner._readable() for arg in ("--read", path)]
    command += ["--", sys.executable, str(folder / "probe.py"), str(ROOT / "Makefile"),
                str(ROOT / "lib" / "encoderlab" / "masks.py"), str(target)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    tried = json.loads(done.stdout.strip().splitlines()[-1])
    assert sandbox.fence_report(report) == {name: "yes" for name in sandbox.FENCES}
    assert tried == {
        "fork": "PermissionError", "subprocess": "PermissionError", "thread": "done",
        "read the checkout": "PermissionError", "read the library": "done",
        "write the checkout": "PermissionError", "write its folder": "done",
        "network": "OSError", "memory": "MemoryError", "import torch": "done",
    }
    assert not target.exists() and (folder / "mine.txt").read_text() == "x"


def test_a_fence_that_does_not_stand_is_named():
    report = {"memory": "yes", "files": "yes", "network": "no: unshare refused: Operation not "
              "permitted", "processes": "yes"}
    assert sandbox.missing_fences(report) == [
        "sandbox: no network fence on this system (unshare refused: Operation not permitted)"]
    assert sandbox.fence_report("/no/such/report.json")["files"].startswith("no:")


def test_the_process_filter_is_well_formed():
    program = sandbox._process_filter()
    for index, (code, jt, jf, k) in enumerate(program):
        if code & 0x07 == 0x05:  # a jump: both targets inside the program, forward
            targets = [k] if code == 0x05 else [jt, jf]
            assert all(0 <= index + 1 + t < len(program) for t in targets)
    assert program[-3:] == [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050001),
                            (0x06, 0, 0, 0x00050026)]  # allow, EPERM, ENOSYS

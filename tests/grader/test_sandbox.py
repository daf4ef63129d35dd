"""The fences a submission's kernel runs behind, each tried from inside by a probe; and the
grader that refuses to run where they cannot stand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from encoderlab_grader import grade, runner, sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the fences (bubblewrap, seccomp, namespaces) are Linux's")

ROOT = Path(__file__).resolve().parents[2]
PROBE = r"""
import ctypes, json, os, socket, subprocess, sys, threading, time
tried = {}
def attempt(name, action):
    try:
        action()
        tried[name] = "done"
    except BaseException as error:
        tried[name] = type(error).__name__
def ptrace_init():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, 1, 0, 0) != 0:  # PTRACE_ATTACH
        raise PermissionError(os.strerror(ctypes.get_errno()))
def threads():
    threading.stack_size(64 * 1024)
    started = []
    try:
        while len(started) < 5000:
            worker = threading.Thread(target=time.sleep, args=(5,), daemon=True)
            worker.start()
            started.append(worker)
    except RuntimeError:
        pass
    tried["threads started"] = len(started)
attempt("fork", os.fork)
attempt("subprocess", lambda: subprocess.run(["true"]))
attempt("setuid binary", lambda: subprocess.run(["/usr/bin/su", "-c", "id"]))
worker = threading.Thread(target=len, args=[""])
attempt("thread", lambda: (worker.start(), worker.join()))
attempt("read the checkout", lambda: open(sys.argv[1]).read(1))
attempt("read the library", lambda: open(sys.argv[2]).read(1))
attempt("write the checkout", lambda: open(sys.argv[3], "w"))
attempt("write its folder", lambda: open("mine.txt", "w").write("x"))
attempt("write outside its folder", lambda: open("/mine.txt", "w"))
attempt("the grader's environment", lambda: open(f"/proc/{sys.argv[4]}/environ").read())
attempt("ptrace", ptrace_init)
os.symlink(sys.argv[1], "makefile")  # a link in its folder to a file of the checkout
attempt("a symlink out", lambda: open("makefile").read(1))
attempt("network", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[5])), timeout=1))
attempt("memory", lambda: bytearray(6 * 2**30))
attempt("import torch", lambda: __import__("torch").ones(2).sum())
status = dict(line.split(":\t") for line in open("/proc/self/status").read().splitlines()
              if ":\t" in line)
tried["no new privileges"] = status["NoNewPrivs"].strip()
tried["processes seen"] = {p for p in os.listdir("/proc") if p.isdigit()} <= {"1", "2"}
threads()
print(json.dumps(tried))
"""


def _probe(tmp_path, listener_port: int) -> dict:
    private, folder = tmp_path / "private", tmp_path / "private" / "work"
    folder.mkdir(parents=True)
    (folder / "probe.py").write_text(PROBE)
    sandbox.write_filter(private / "filter.bpf")
    target = ROOT / "lessons" / "sandbox-probe.txt"
    group = sandbox.new_cgroup(f"encoderlab-test-{os.getpid()}")
    kernel = [sys.executable, str(folder / "probe.py"), str(ROOT / "Makefile"),
              str(ROOT / "lib" / "encoderlab" / "masks.py"), str(target), str(os.getpid()),
              str(listener_port)]
    command = sandbox.command(folder, runner._readable(), private / "filter.bpf", 4 * 2**30,
                              group, kernel)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=180,
                              env={**os.environ, "OMP_NUM_THREADS": "1",
                                   "INSTRUCTOR_SECRET": "s3cret"})
    finally:
        sandbox.remove_cgroup(group)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not target.exists() and (folder / "mine.txt").read_text() == "x"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fenced_process_can_do_its_work_and_nothing_else(tmp_path):
    import socket

    assert sandbox.fences() == {name: "yes" for name in sandbox.FENCES}
    server = socket.create_server(("127.0.0.1", 0))  # the grader's machine listens
    try:
        tried = _probe(tmp_path, server.getsockname()[1])
    finally:
        server.close()
    started = tried.pop("threads started")
    assert tried == {
        "fork": "PermissionError", "subprocess": "PermissionError",
        "setuid binary": "PermissionError", "thread": "done",
        "read the checkout": "FileNotFoundError", "read the library": "done",
        "write the checkout": "FileNotFoundError", "write its folder": "done",
        "write outside its folder": "OSError", "the grader's environment": "FileNotFoundError",
        "ptrace": "PermissionError", "a symlink out": "FileNotFoundError",
        "network": "ConnectionRefusedError", "memory": "MemoryError", "import torch": "done",
        "no new privileges": "1", "processes seen": True,
    }
    assert 0 < started < sandbox.THREADS  # the thread bomb stopped at the cap


def test_the_filter_is_a_bpf_program_that_refuses_new_processes(tmp_path):
    sandbox.write_filter(tmp_path / "filter.bpf")
    program = (tmp_path / "filter.bpf").read_bytes()
    assert program and len(program) % 8 == 0  # struct sock_filter: 8 bytes an instruction
    assert {"fork", "vfork", "ptrace", "process_vm_readv", "unshare"} <= set(sandbox.REFUSED)


def _no_bwrap(monkeypatch):
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which",
                        lambda name, *a, **k: None if name == "bwrap" else real_which(name))
    sandbox.fences.cache_clear()
    return sandbox.fences


@pytest.fixture
def without_bwrap(monkeypatch):
    yield _no_bwrap(monkeypatch)
    monkeypatch.undo()
    sandbox.fences.cache_clear()


def test_without_bubblewrap_the_fences_say_what_to_install(without_bwrap):
    state = without_bwrap()
    for name in ("files", "network", "grader hidden"):
        assert state[name].startswith("no: bwrap is not installed")
        assert "apt-get install bubblewrap" in state[name]
    with pytest.raises(sandbox.FenceError, match=r"(?s)- files: bwrap is not installed.*"
                       r"--unfenced"):
        sandbox.require()


def test_the_grader_refuses_to_grade_unfenced_unless_told(without_bwrap, tmp_path, capsys):
    import nbformat
    from lesson3_notebooks import LESSON_3, LESSONS, exercise_section, write

    path = write(exercise_section(nbformat.read(LESSON_3, as_version=4)),
                 tmp_path / "honest.ipynb")
    with pytest.raises(sandbox.FenceError, match="grades nothing"):
        grade.grade_notebook(path, lessons_dir=LESSONS)
    csv_path = tmp_path / "grades.csv"
    assert grade.main([str(path), "--lessons", str(LESSONS), "--csv", str(csv_path)]) == 2
    assert "bwrap is not installed" in capsys.readouterr().err
    assert not csv_path.exists()  # nothing graded, nothing written
    assert grade.main([str(path), "--lessons", str(LESSONS), "--csv", str(csv_path),
                       "--unfenced", "--jobs", "1"]) == 0
    rows = csv_path.read_text(encoding="utf-8").splitlines()
    assert rows[0].endswith(",fences") and all(row.endswith(",none (--unfenced)")
                                               for row in rows[1:])
    assert json.dumps(rows).count("passed") == 4  # the four code exercises, graded unfenced

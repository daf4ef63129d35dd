"""Run a submitted notebook's cells in a fenced kernel, one by one, whatever its code does.

Each submission gets a folder of its own (a copy of the notebook, nothing else) and a kernel
started behind :mod:`encoderlab_grader.sandbox`'s fences (bubblewrap's namespaces, a libseccomp
filter, resource limits): limited memory and threads, no network, no new processes, no view of
the grader, no files outside its folder but the Python it runs on. Where a fence cannot stand,
nothing runs (:class:`~encoderlab_grader.sandbox.FenceError`) unless ``Limits.sandbox`` is off.
Errors do not stop the run; a cell that kills its kernel (``os._exit``, a crash, memory) or runs
past its limit is marked, and a fresh
kernel runs the cells before it again and goes on after it, so later exercises are still graded.
Output past a cap is dropped and the cell interrupted. The grader reads back, per cell: the
error, the printed text, and the recorded answers (:mod:`encoderlab.course.checks.record`).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import os
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from time import monotonic

from encoderlab.course.checks.record import MAX_CHARS, MIME
from encoderlab_grader import sandbox

__all__ = ["OFFLINE_ENV", "Limits", "CellRun", "Run", "run_cells"]

# The kernel runs offline: load_minilm() takes the installed weights, never the hub.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "ENCODERLAB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}
# What the kernel keeps of the grader's environment (no tokens, no secrets).
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONPATH", "VIRTUAL_ENV",
             "ENCODERLAB_WEIGHTS", "TZ")
_KERNELS = 3  # kernels per submission: the first, and two fresh ones after cells that end one
_ERROR_CHARS = 2000  # of an error's message kept for the report
_PROLOGUE_SECONDS = 300  # for the grader's own first cell (imports), on a busy machine


@dataclass(frozen=True)
class Limits:
    """What one submission may use: seconds for the notebook and per cell, memory, output."""

    timeout: float = 600  # the notebook, from when its first kernel is ready
    cell_timeout: float = 300
    memory: int = 4 * 2**30  # bytes of address space
    output: int = 2 * 2**20  # bytes of output one cell may print (recorded answers apart)
    threads: int = 1  # CPU threads for torch and BLAS in the kernel
    sandbox: bool = True


@dataclass
class CellRun:
    error: tuple[str, str] | None  # (exception name, its message), when the cell raised
    stdout: str
    answers: list[str] = field(default_factory=list)  # the recorded answers, in order


@dataclass
class Run:
    cells: dict[int, CellRun] = field(default_factory=dict)  # by cell index: the cells that ran
    stopped: str | None = None  # why the run ended before its last cell
    notes: list[str] = field(default_factory=list)  # cells that ended a kernel


def _readable() -> list[str]:
    """The folders a kernel must read: this Python, its packages and the course library."""
    import encoderlab

    here = {os.getcwd(), ""}
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(),
             str(Path(encoderlab.__file__).resolve().parent.parent)}
    paths |= {os.path.abspath(p) for p in sys.path if p not in here and os.path.isdir(p)}
    if os.environ.get("ENCODERLAB_WEIGHTS"):
        paths.add(os.environ["ENCODERLAB_WEIGHTS"])
    return sorted(paths)


def _kernel_env(folder: Path, limits: Limits) -> dict[str, str]:
    env = {key: os.environ[key] for key in _KEPT_ENV if key in os.environ}
    threads = str(limits.threads)
    env.update(OFFLINE_ENV)
    env.update({
        "HOME": str(folder), "TMPDIR": str(folder / "tmp"), "MPLCONFIGDIR": str(folder / ".mpl"),
        "IPYTHONDIR": str(folder / ".ipython"), "XDG_CACHE_HOME": str(folder / ".cache"),
        "JUPYTER_RUNTIME_DIR": str(folder), "MPLBACKEND": "agg", "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads, "PYTHONDONTWRITEBYTECODE": "1",
    })
    (folder / "tmp").mkdir(exist_ok=True)
    return env


def _kernel_manager(kernel: str, folder: Path, private: Path, limits: Limits):
    """A kernel manager whose kernel starts behind the fences and listens on Unix sockets."""
    from jupyter_client.manager import AsyncKernelManager

    prefix: list[str] = []
    cgroup = None
    if limits.sandbox:
        filter_path = private / "filter.bpf"
        if not filter_path.exists():
            sandbox.write_filter(filter_path)
        cgroup = sandbox.new_cgroup(f"encoderlab-grade-{private.name}")
        prefix = sandbox.command(folder, _readable(), filter_path, limits.memory, cgroup, [])

    class Fenced(AsyncKernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            return prefix + super().format_kernel_cmd(extra_arguments)

    transport = {"transport": "ipc", "ip": str(folder / "kernel")} if os.name == "posix" else {}
    # The kernel reads its connection file (its own key, no secret from it) from its folder.
    manager = Fenced(kernel_name=kernel, connection_file=str(folder / "kernel.json"), **transport)
    return manager, cgroup


def _quiet_log() -> logging.Logger:
    log = logging.getLogger("encoderlab_grader.runner.kernel")
    log.addHandler(logging.NullHandler())
    log.propagate = False  # nbclient logs every timeout and dead kernel; the report says it once
    return log


def _output_size(msg: dict) -> int:
    content = msg.get("content", {})
    parts = [content.get("text", "")] + list((content.get("data") or {}).values())
    return sum(len(p) if isinstance(p, str) else len(json.dumps(p)) for p in parts)


def _client(nb, km, limits: Limits, budget: dict):
    """An nbclient that interrupts a cell printing more than ``limits.output`` bytes, and keeps
    no more than ten times that in all (``budget`` counts, by cell and in all)."""
    from nbclient import NotebookClient

    class Capped(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            content = msg.get("content", {})
            if msg["msg_type"] == "error":  # kept, short: the grader reads its name and message
                content["evalue"] = str(content.get("evalue", ""))[:_ERROR_CHARS]
                content["traceback"] = []
                return super().output(outs, msg, display_id, cell_index)
            if MIME in (content.get("data") or {}):
                budget["answers"] += _output_size(msg)
                if budget["answers"] <= 4 * MAX_CHARS:
                    return super().output(outs, msg, display_id, cell_index)
                return None
            size = _output_size(msg)
            budget[cell_index] = budget.get(cell_index, 0) + size
            budget["output"] += size
            if budget[cell_index] > limits.output:
                if cell_index not in budget["over"]:  # interrupt once: KeyboardInterrupt
                    budget["over"].add(cell_index)
                    asyncio.ensure_future(self.km.interrupt_kernel())
                return None
            if budget["output"] > 10 * limits.output:
                return None
            return super().output(outs, msg, display_id, cell_index)

        def handle_comm_msg(self, outs, msg, cell_index):
            return None  # widgets are not graded

    return Capped(nb, km=km, allow_errors=True, record_timing=False,
                  shutdown_kernel="immediate", startup_timeout=120, log=_quiet_log())



def _cell_run(cell) -> CellRun:
    error = next((o for o in cell.outputs if o.output_type == "error"), None)
    stdout = "".join(o.text for o in cell.outputs
                     if o.output_type == "stream" and o.get("name") == "stdout")
    answers = [o.data[MIME] for o in cell.outputs
               if o.output_type == "display_data" and isinstance(o.get("data", {}).get(MIME), str)]
    return CellRun(None if error is None else (error.ename, error.evalue), stdout, answers)


def run_cells(nb, cells: list[int], *, limits: Limits, kernel: str = "python3",
              prologue: str = "") -> Run:
    """Run ``nb``'s code cells listed in ``cells`` (indices, in order) in a fenced kernel;
    ``prologue`` runs first in every kernel started, before any of the notebook's code."""
    from nbformat.v4 import new_code_cell

    if limits.sandbox:
        sandbox.require()  # FenceError: nothing runs where a fence cannot stand
    nb = copy.deepcopy(nb)
    for cell in nb.cells:  # outputs saved in the file are never read as this run's
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    if prologue:
        nb.cells.append(new_code_cell(prologue))
    with tempfile.TemporaryDirectory(prefix="encoderlab-grade-") as private_dir:
        private = Path(private_dir)
        folder = private / "work"
        folder.mkdir()
        return _run(nb, cells, private, folder, limits, kernel, prologue)


def _run(nb, cells: list[int], private: Path, folder: Path, limits: Limits, kernel: str,
         prologue: str) -> Run:
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    run, ended, budget = Run(), set(), {"output": 0, "answers": 0, "over": set()}
    left_at_death = None
    for _ in range(_KERNELS):
        km, cgroup = _kernel_manager(kernel, folder, private, limits)
        client = _client(nb, km, limits, budget)
        options = {"env": _kernel_env(folder, limits), "cwd": str(folder),
                   "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cleanup_kc": True}
        dead_at = None
        try:
            with client.setup_kernel(**options):
                if prologue:  # a cell of its own, after the notebook's (nbclient stores it there)
                    client.timeout = _PROLOGUE_SECONDS  # the grader's time, not the notebook's
                    client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
                # The notebook's time runs while its cells do, not while a kernel starts.
                deadline = monotonic() + (limits.timeout if left_at_death is None
                                          else left_at_death)
                for index in cells:
                    if index in ended:
                        continue
                    left = deadline - monotonic()
                    limit, which = ((limits.cell_timeout, "the limit per cell")
                                    if limits.cell_timeout < left
                                    else (limits.timeout, "the limit per notebook"))
                    if left <= 0:
                        run.stopped = f"timed out after {limit:g} s at cell {index + 1} ({which})"
                        return run
                    client.timeout = max(1, math.ceil(min(limits.cell_timeout, left)))
                    again = index in run.cells  # run before this kernel: rebuild its state only
                    cell = copy.deepcopy(nb.cells[index]) if again else nb.cells[index]
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        if which == "the limit per notebook":
                            run.stopped = (f"timed out after {limit:g} s at cell {index + 1} "
                                           f"({which})")
                            return run
                        dead_at = (index, "CellTimeout", f"it ran past the limit per cell "
                                   f"({limits.cell_timeout:g} s) and was stopped")
                        break
                    except DeadKernelError:
                        dead_at = (index, "KernelDied", "it ended the kernel (it exited Python, "
                                   "crashed, or ran out of memory)")
                        break
                    if not again:
                        run.cells[index] = _cell_run(cell)
                        if index in budget["over"]:
                            run.cells[index].error = (
                                "OutputLimit", f"it printed more than {limits.output // 2**20} "
                                "MB and was interrupted")
        except Exception as error:  # the kernel would not start, or the connection broke
            run.stopped = f"could not run it: {type(error).__name__}: {_short(error)}"
            return run
        finally:
            sandbox.remove_cgroup(cgroup)
        if dead_at is None:
            return run
        left_at_death = deadline - monotonic()
        index, name, message = dead_at
        ended.add(index)
        run.cells[index] = CellRun((name, message), "")
        if index == cells[-1]:  # nothing left to run after it
            run.notes.append(f"cell {index + 1}: {message}")
            return run
        run.notes.append(f"cell {index + 1}: {message}; a fresh kernel ran the cells before it "
                         "again and went on after it")
    run.stopped = f"stopped after {_KERNELS} kernels ended (cells " + ", ".join(
        str(i + 1) for i in sorted(ended)) + ")"
    return run


def _short(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:299] + "…"

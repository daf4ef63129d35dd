"""The fences a submission's kernel starts behind, built from real parts.

- **bubblewrap** (``bwrap``) gives the kernel mount, PID, network, IPC and UTS namespaces of its
  own: it sees a read-only view of the Python it runs on and of the course library, one writable
  folder holding its copy of the notebook, a fresh ``/proc`` that shows only its own processes
  (not the grader's, nor their environment), and no network but a loopback of its own;
- **libseccomp** (through the ``pyseccomp`` binding) builds the system-call filter that bwrap
  installs: no new process (``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``), no
  ``ptrace``, no reading another process's memory, no mounts or namespaces, no kernel keys;
- **resource limits** cap its address space, the size of each file it writes and (through a
  ``pids`` cgroup, or ``RLIMIT_NPROC`` when the grader is not root) its threads.

:func:`fences` says which fences this system can put up. The grader fails closed: where one
cannot, :func:`require` raises :class:`FenceError`, which names it and how to get it, and
nothing is graded unless the instructor asked to grade unfenced.

:func:`command` builds the kernel's command line: this file run as a script outside the
namespaces (it sets the limits, joins the cgroup, opens the filter and becomes bwrap), bwrap, and
this file again inside (it caps the threads and becomes the kernel). As a script it needs the
standard library alone.
"""

from __future__ import annotations

import argparse
import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

__all__ = ["FENCES", "FenceError", "fences", "require", "write_filter", "bwrap_arguments",
           "command", "new_cgroup", "remove_cgroup"]

FENCES = ("files", "processes", "network", "grader hidden", "memory", "threads")
THREADS = 256  # threads (and processes, were any allowed) one kernel may have at once
FILE_SIZE = 256 * 2**20  # the largest file the kernel may write, in bytes
# What a Python process reads outside its own installation: loader, libraries, fonts, CPU info.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache",
               "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/fonts",
               "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/mime.types", "/etc/ssl",
               "/etc/matplotlibrc", "/sys/devices/system/cpu")
# Refused with EPERM: new processes and everything that reaches beyond the kernel's own process.
REFUSED = ("fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
           "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "bpf",
           "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "init_module",
           "finit_module", "delete_module", "kexec_load", "open_by_handle_at",
           "name_to_handle_at", "acct", "swapon", "swapoff", "reboot", "settimeofday")
_CLONE_THREAD = 0x00010000
_TIOCSTI = 0x5412
INSTALL = {
    "bwrap": "install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap)",
    "pyseccomp": "install libseccomp and its binding (apt-get install libseccomp2; "
                 "pip install pyseccomp)",
}


class FenceError(RuntimeError):
    """A fence the grader needs cannot be put up on this system."""


# --- The seccomp filter (libseccomp) -------------------------------------------------------------


def write_filter(path: str | os.PathLike) -> None:
    """Write the kernel's system-call filter, as a BPF program, to ``path`` (for bwrap)."""
    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(seccomp.ALLOW)  # calls of another architecture: killed
    for name in REFUSED:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
    # clone starts a thread (allowed) or a process (refused); clone3 hides its flags in memory a
    # filter cannot read, so it answers "not implemented" and the C library falls back to clone.
    rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone",
                   seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(seccomp.ERRNO(errno.EPERM), "ioctl",
                   seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, _TIOCSTI))
    with open(path, "wb") as out:
        rules.export_bpf(out)


# --- The namespaces (bubblewrap) -----------------------------------------------------------------


def bwrap_arguments(folder: Path, readable: Sequence[str], filter_fd: str) -> list[str]:
    """bwrap's command line: the namespaces, the read-only view, the one writable folder."""
    arguments = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent",
                 "--cap-drop", "ALL", "--seccomp", str(filter_fd),
                 "--proc", "/proc", "--dev", "/dev"]
    for path in [*SYSTEM_READ, *readable]:
        arguments += ["--ro-bind-try", path, path]
    folder = str(folder)
    arguments += ["--bind", folder, folder, "--remount-ro", "/", "--chdir", folder]
    return arguments


FILTER_FD = "{filter}"  # in bwrap's command line: replaced by the launcher with the filter's fd


def command(folder: Path, readable: Sequence[str], filter_path: Path, memory: int,
            cgroup: Path | None, kernel: Sequence[str]) -> list[str]:
    """The whole command that starts ``kernel`` behind every fence: the launcher outside, bwrap,
    the launcher inside (which caps threads), the kernel."""
    outside = [sys.executable, "-S", __file__, "outside", "--filter", str(filter_path),
               "--memory", str(memory)]
    if cgroup is not None:
        outside += ["--cgroup", str(cgroup)]
    inside = [sys.executable, "-S", __file__, "inside", "--threads", str(THREADS), "--"]
    return [*outside, "--", *bwrap_arguments(folder, [*readable, __file__], FILTER_FD), "--",
            *inside, *kernel]


# --- Threads: a pids cgroup, or RLIMIT_NPROC ---------------------------------------------------

_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


def new_cgroup(name: str) -> Path | None:
    """A pids cgroup of its own for one kernel (``pids.max`` = :data:`THREADS`), or None where
    this process may not make one."""
    for root in _CGROUP_ROOTS:
        if not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
            continue
        group = root / name
        try:
            group.mkdir(exist_ok=True)
            (group / "pids.max").write_text(str(THREADS))
            return group
        except OSError:
            remove_cgroup(group)
    return None


def remove_cgroup(group: Path | None) -> None:
    """Remove a kernel's cgroup once its processes are gone (for up to a second)."""
    import time

    for _ in range(20) if group is not None else ():
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # its last processes are still being reaped
            time.sleep(0.05)


# --- What this system can put up -----------------------------------------------------------------


def _probe_bwrap(filter_path: Path, folder: Path) -> str | None:
    """None when bwrap starts a process behind every namespace and the filter; else why not."""
    if shutil.which("bwrap") is None:
        return f"bwrap is not installed: {INSTALL['bwrap']}"
    with open(filter_path, "rb") as bpf:
        command = bwrap_arguments(folder, [], str(bpf.fileno())) + ["/bin/true"]
        try:
            done = subprocess.run(command, pass_fds=[bpf.fileno()], capture_output=True,
                                  text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bwrap could not run: {error}"
    if done.returncode != 0:
        return f"bwrap refused ({done.stderr.strip()[:200] or done.returncode})"
    return None


@lru_cache(maxsize=1)
def fences() -> dict[str, str]:
    """Each fence this system can put up: 'yes', or 'no: why not and what to install'."""
    if not sys.platform.startswith("linux"):
        return {name: "no: the fences are Linux's (grade in a Linux container)"
                for name in FENCES}
    import tempfile

    state = {"memory": "yes"}
    with tempfile.TemporaryDirectory(prefix="encoderlab-fences-") as scratch:
        filter_path = Path(scratch) / "filter.bpf"
        try:
            write_filter(filter_path)
            state["processes"] = "yes"
        except (ImportError, OSError, RuntimeError, ValueError) as error:
            state["processes"] = f"no: no seccomp filter ({error}): {INSTALL['pyseccomp']}"
        if state["processes"] == "yes":
            missing = _probe_bwrap(filter_path, Path(scratch))
        else:
            missing = "needs the seccomp filter (bwrap installs it)"
        for name in ("files", "network", "grader hidden"):
            state[name] = "yes" if missing is None else f"no: {missing}"
        group = new_cgroup(f"encoderlab-probe-{os.getpid()}")
        remove_cgroup(group)
        if group is not None:
            state["threads"] = "yes"
        elif os.getuid() != 0:
            state["threads"] = "yes"  # RLIMIT_NPROC binds every user but root
        else:
            state["threads"] = ("no: as root, only a pids cgroup caps threads, and this process "
                                "may not make one (run the grader as an ordinary user)")
    return {name: state[name] for name in FENCES}


def require() -> dict[str, str]:
    """The fences, all standing; FenceError naming each one that cannot stand, and how to fix it."""
    state = fences()
    missing = [f"- {name}: {why[4:]}" for name, why in state.items() if why != "yes"]
    if missing:
        raise FenceError("the grader cannot fence submissions in on this system, so it grades "
                         "nothing:\n" + "\n".join(missing) + "\nFix that, or grade notebooks "
                         "you trust with --unfenced.")
    return state


# --- The launcher (run as a script: outside the namespaces, then inside) ------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """``outside``: set the limits, join the cgroup, open the filter, become bwrap.
    ``inside`` (bwrap's command): cap the threads in the kernel's own user namespace, become the
    kernel."""
    argv = list(sys.argv[1:] if argv is None else argv)
    where = argv.pop(0) if argv else ""
    parser = argparse.ArgumentParser(prog=f"sandbox.py {where or '{outside,inside}'}")
    if where not in ("outside", "inside"):
        parser.error("the first argument is outside or inside")
    parser.add_argument("--filter", help="the BPF program bwrap installs (outside)")
    parser.add_argument("--memory", type=int, help="address-space limit in bytes (outside)")
    parser.add_argument("--cgroup", help="a pids cgroup to join (outside)")
    parser.add_argument("--threads", type=int, help="threads the kernel may have (inside)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    if where == "inside":
        resource.setrlimit(resource.RLIMIT_NPROC, (args.threads, args.threads))
        # The grader's process id means nothing in here, where the kernel's parent is process 1:
        # a kernel that watched it would think the grader gone and quit.
        env = {key: value for key, value in os.environ.items() if key != "JPY_PARENT_PID"}
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # the kernel's own, for interrupts
        os.execve(command[0], command, env)
    if args.cgroup:
        Path(args.cgroup, "cgroup.procs").write_text(str(os.getpid()))
    resource.setrlimit(resource.RLIMIT_AS, (args.memory, args.memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # An interrupt reaches the whole process group: bwrap ignores it (ignoring survives exec),
    # the kernel inside handles it. Were bwrap to die of it, the kernel would die with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bpf = os.open(args.filter, os.O_RDONLY)  # inherited by bwrap, which reads it by number
    os.set_inheritable(bpf, True)
    os.execvp(command[0], [str(bpf) if part == FILTER_FD else part for part in command])


if __name__ == "__main__":
    main()

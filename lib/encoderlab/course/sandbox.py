"""Start a submission's Jupyter kernel shut in, so that its code can harm nothing but itself.

``python -m encoderlab.course.sandbox --folder DIR --memory BYTES --report FILE [--read PATH]...
-- COMMAND...`` puts up each fence the system allows, writes which ones stand to ``FILE``, then
replaces itself with ``COMMAND`` (the kernel), which inherits them all:

- **memory**: the address space is capped (``RLIMIT_AS``); past it, allocations fail with
  ``MemoryError`` in the cell that asked;
- **files**: Landlock lets the kernel read only the Python it runs on (the ``--read`` paths and a
  few system folders) and write only inside ``DIR``; files it writes are capped in size;
- **network**: a network namespace of its own, with no interface up (the grader talks to the
  kernel through Unix sockets in ``DIR``);
- **processes**: a seccomp filter refuses every new process (``fork``, ``vfork``, ``clone``
  without ``CLONE_THREAD``); threads still work.

Linux only. A fence the system refuses (an old kernel, a container without the permission) is
reported, not fatal: the grader says so in each report. ``fence_report`` reads the report back.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FENCES", "SYSTEM_READ", "main", "fence_report", "missing_fences"]

FENCES = ("memory", "files", "network", "processes")
# What a Python process reads outside its own installation (loader, libraries, fonts, CPU info).
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/proc", "/sys",
               "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
               "/etc/fonts", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/mime.types",
               "/etc/ssl", "/etc/matplotlibrc")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
FILE_SIZE = 256 * 2**20  # the largest file the kernel may write, in bytes

_libc = ctypes.CDLL(None, use_errno=True)


def _fail(what: str) -> str:
    error = ctypes.get_errno()
    return f"{what}: {os.strerror(error)}" if error else what


# --- memory and file size --------------------------------------------------------------------


def _limit_memory(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# --- network: a namespace of its own -------------------------------------------------------------

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


def _isolate_network() -> str | None:
    """None when the kernel has no network; else why not."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    if _libc.unshare(_CLONE_NEWNET) == 0:
        return None
    # Without the privilege, a user namespace of our own may grant it (same user id inside).
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return _fail("unshare refused")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    return None


# --- files: Landlock ---------------------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every arch
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_TRUNCATE, _IOCTL_DEV = 1 << 14, 1 << 15
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38


def _landlock_abi() -> int:
    return _libc.syscall(_SYS_CREATE_RULESET, None, 0, 1)  # flag 1: ask for the ABI version


def _all_rights(abi: int) -> int:
    """Every file-system right this Landlock version knows: all of them are refused by default."""
    rights = (1 << 13) - 1  # ABI 1: execute ... make_sym
    for bit, since in ((13, 2), (14, 3), (15, 5)):  # refer, truncate, ioctl_dev
        if abi >= since:
            rights |= 1 << bit
    return rights


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a folder this system does not have
    try:
        if not os.path.isdir(path):
            rights &= _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
        rule = struct.pack("=Qi", rights, fd)  # struct landlock_path_beneath_attr (packed)
        if _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0) != 0:
            raise OSError(_fail(f"landlock_add_rule({path})"))
    finally:
        os.close(fd)


def _fence_files(folder: str, readable: Sequence[str]) -> str | None:
    """None when the kernel reads only ``readable`` and writes only in ``folder``; else why not."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    abi = _landlock_abi()
    if abi < 1:
        return _fail("Landlock is not available")
    everything = _all_rights(abi)
    attr = struct.pack("=Q", everything)  # struct landlock_ruleset_attr: handled_access_fs only
    ruleset = _libc.syscall(_SYS_CREATE_RULESET, attr, len(attr), 0)
    if ruleset < 0:
        return _fail("landlock_create_ruleset")
    try:
        read = _EXECUTE | _READ_FILE | _READ_DIR
        for path in readable:
            _allow(ruleset, path, read)
        for path in DEVICES:
            _allow(ruleset, path, _READ_FILE | _WRITE_FILE)
        _allow(ruleset, folder, everything)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return _fail("no_new_privs")
        if _libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            return _fail("landlock_restrict_self")
    except OSError as error:
        return str(error)
    finally:
        os.close(ruleset)
    return None


# --- processes: a seccomp filter -----------------------------------------------------------------

_ARCHES = {  # audit arch -> (fork, vfork, clone, clone3); None where the call does not exist
    0xC000003E: (57, 58, 56, 435),  # x86_64
    0xC00000B7: (None, None, 220, 435),  # aarch64
}
_CLONE_THREAD = 0x00010000
_X32_BIT = 0x40000000
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_EPERM, _ENOSYS = 1, 38


def _process_filter() -> list[tuple[int, int, int, int]]:
    """The BPF program: on a known architecture, refuse fork/vfork and clone without
    CLONE_THREAD (EPERM), answer clone3 with ENOSYS (so that libc falls back to clone, whose flags
    the filter can read), allow everything else."""
    program: list = [(_LD, 0, 0, 4)]  # the architecture; jumps name labels, resolved below
    labels: dict[str, int] = {}
    for arch, (fork, vfork, clone, clone3) in _ARCHES.items():
        program.append((_JEQ, 0, (f"next-{arch:x}"), arch))
        program.append((_LD, 0, 0, 0))  # the system call number
        program.append((_JGE, ("deny"), 0, _X32_BIT))
        for number in (fork, vfork):
            if number is not None:
                program.append((_JEQ, ("deny"), 0, number))
        program.append((_JEQ, ("enosys"), 0, clone3))
        program.append((_JEQ, ("clone"), ("allow"), clone))
        labels[f"next-{arch:x}"] = len(program)
        program.append((_LD, 0, 0, 4))  # the architecture again, for the next test
    program.append((0x05, 0, 0, 0))  # an unknown architecture: jump to allow (patched below)
    labels["clone"] = len(program)
    program.append((_LD, 0, 0, 16))  # clone's first argument (flags), low 32 bits
    program.append((_JSET, ("allow"), ("deny"), _CLONE_THREAD))
    labels["allow"] = len(program)
    program.append((_RET, 0, 0, _ALLOW))
    labels["deny"] = len(program)
    program.append((_RET, 0, 0, _ERRNO | _EPERM))
    labels["enosys"] = len(program)
    program.append((_RET, 0, 0, _ERRNO | _ENOSYS))
    resolved = []
    for index, (code, jt, jf, k) in enumerate(program):
        if code == 0x05:  # BPF_JMP | BPF_JA: an unconditional jump, offset in k
            resolved.append((code, 0, 0, labels["allow"] - index - 1))
            continue
        jt = labels[jt] - index - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - index - 1 if isinstance(jf, str) else jf
        resolved.append((code, jt, jf, k))
    return resolved


def _fence_processes() -> str | None:
    """None when the kernel can start no process; else why not."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    program = _process_filter()
    filters = b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(filters)
    fprog = struct.pack("=HxxxxxxQ", len(program), ctypes.addressof(buffer))  # struct sock_fprog
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return _fail("no_new_privs")
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0) != 0:
        return _fail("seccomp refused")
    return None


# --- the launcher --------------------------------------------------------------------------------


def _fence(name: str, put_up) -> str:
    """Put one fence up: 'yes', or 'no: why not'."""
    try:
        missing = put_up()
    except (OSError, ValueError) as error:
        missing = f"{name}: {error}"
    return "yes" if missing is None else f"no: {missing}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m encoderlab.course.sandbox")
    parser.add_argument("--folder", required=True, help="the only folder the command may write")
    parser.add_argument("--memory", type=int, required=True, help="address-space limit in bytes")
    parser.add_argument("--report", required=True, help="where to write which fences stand")
    parser.add_argument("--read", action="append", default=[], help="a path it may read")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run after --")
    folder = str(Path(args.folder).resolve())
    os.chdir(folder)
    # The report lies outside the folder: opened before the fences, written before the kernel
    # (and so any submission) runs.
    with open(args.report, "w", encoding="utf-8") as out:
        report = {
            "memory": _fence("memory", lambda: _limit_memory(args.memory)),
            "network": _fence("network", _isolate_network),
            "files": _fence("files", lambda: _fence_files(folder, [*SYSTEM_READ, *args.read])),
            "processes": _fence("processes", _fence_processes),
        }
        json.dump(report, out)
    os.execv(command[0], command)


def fence_report(path: str | os.PathLike) -> dict[str, str]:
    """The fences a sandboxed kernel reported, by name ('yes', or 'no: why not')."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {name: "no: the sandbox wrote no report" for name in FENCES}
    return {name: str(report.get(name, "no: not reported")) for name in FENCES}


def missing_fences(report: dict[str, str]) -> list[str]:
    """One line per fence that does not stand, for a grading report's notes."""
    return [f"sandbox: no {name} fence on this system ({state[4:] or 'refused'})"
            for name, state in report.items() if not state.startswith("yes")]


if __name__ == "__main__":
    main()

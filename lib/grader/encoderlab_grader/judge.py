"""The grader's half of a check split in two: the answers a submission's kernel recorded
(:mod:`encoderlab.course.checks.record`), read back as data and judged by this process's own
checkers, imported before any submission ran.

The JSON carries data only (numbers, strings, containers, tensors and arrays as raw bytes, the
dataclasses registered with ``harness.answer_type``), never code: whatever a submission did to
its own copy of the checker, the library or torch, it can only hand over answers, and only
answers equal to the reference pass. A failure recorded in the kernel always counts.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import math

import numpy as np
import torch

from encoderlab.course import checks
from encoderlab.course.checks import harness
from encoderlab.course.checks.harness import CheckFailed, Replay
from encoderlab.course.checks.record import (
    ARRAY_KINDS,
    DEPTH,
    MAX_CHARS,
    TENSOR_DTYPES,
    Opaque,
)

__all__ = ["decode", "read_recording", "judge", "replay"]

# The checkers as they were when the grader started, before any submission ran.
_CHECKS = {name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")}

def _bytes(data) -> bytes:
    if not isinstance(data, str):
        raise ValueError("raw data must be base64 text")
    return base64.b64decode(data.encode("ascii"), validate=True)


def _shape(shape) -> tuple[int, ...]:
    if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
        raise ValueError(f"a shape must be a list of sizes, got {shape!r:.60}")
    return tuple(shape)


def _decode_tensor(data: dict) -> torch.Tensor:
    dtype = TENSOR_DTYPES.get(data.get("dtype"))
    if dtype is None:
        raise ValueError(f"a tensor of unknown dtype {data.get('dtype')!r:.40}")
    shape, raw = _shape(data.get("shape")), _bytes(data.get("data"))
    size = math.prod(shape) * dtype.itemsize
    if len(raw) != size:
        raise ValueError(f"a tensor of shape {shape} needs {size} bytes, got {len(raw)}")
    if not size:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def _decode_array(data: dict):
    dtype = np.dtype(str(data.get("dtype")))
    if dtype.kind not in ARRAY_KINDS:
        raise ValueError(f"a numpy array of dtype {dtype}")
    shape, raw = _shape(data.get("shape")), _bytes(data.get("data"))
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"a numpy array of shape {shape} with {len(raw)} bytes")
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return array[()] if data.get("scalar") else array


def decode(data, depth: int = 0):
    """The answer that :func:`encode` wrote; ValueError for anything it would not write."""
    if depth > DEPTH + 1:
        raise ValueError("answers nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"unexpected {type(data).__name__} in the recorded answers")
    tag, inner = data.get("~"), depth + 1
    if tag in ("tuple", "list", "set", "frozenset"):
        items = data.get("v")
        if not isinstance(items, list):
            raise ValueError(f"a {tag} without its items")
        kind = {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset}[tag]
        try:
            return kind(decode(x, inner) for x in items)
        except TypeError as error:  # an unhashable member of a set
            raise ValueError(f"a {tag} that cannot be rebuilt: {error}") from None
    if tag == "dict":
        pairs = data.get("v")
        if not (isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2
                                                 for p in pairs)):
            raise ValueError("a dict without its pairs")
        try:
            return {decode(k, inner): decode(v, inner) for k, v in pairs}
        except TypeError as error:
            raise ValueError(f"a dict that cannot be rebuilt: {error}") from None
    if tag == "tensor":
        return _decode_tensor(data)
    if tag == "ndarray":
        return _decode_array(data)
    if tag == "dtype":
        dtype = TENSOR_DTYPES.get(data.get("v"))
        if dtype is None:
            raise ValueError(f"unknown dtype {data.get('v')!r:.40}")
        return dtype
    if tag == "answer":
        cls = harness.ANSWER_TYPES.get(data.get("type"))
        fields = data.get("v")
        if cls is None or not isinstance(fields, dict):
            raise ValueError(f"unknown answer type {data.get('type')!r:.40}")
        names = {f.name for f in dataclasses.fields(cls)}
        if set(fields) != names:
            raise ValueError(f"a {cls.__name__} needs the fields {sorted(names)}")
        return cls(**{name: decode(value, inner) for name, value in fields.items()})
    if tag == "opaque":
        return Opaque(str(data.get("type"))[:80])
    raise ValueError(f"unknown tag {tag!r:.40} in the recorded answers")


def read_recording(name: str, text: str) -> Replay:
    """The :class:`~.harness.Replay` of one recorded check; ValueError if it is not one."""
    if not isinstance(text, str) or len(text) > MAX_CHARS + 2**20:
        raise ValueError("the recorded answers are missing or too large")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"the recorded answers are not JSON ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ValueError("the recorded answers have no entries")
    entries = []
    try:
        for entry in data["entries"]:
            if not (isinstance(entry, list) and len(entry) == 2
                    and entry[0] in ("answer", "result")):
                raise ValueError("an entry is not (kind, answer)")
            entries.append((entry[0], decode(entry[1])))
    except RecursionError:
        raise ValueError("answers nested too deeply") from None
    failure = data.get("failure")
    if failure is not None:
        if not (isinstance(failure, list) and len(failure) == 2
                and all(isinstance(part, str) for part in failure)):
            raise ValueError("the recorded failure is not (diagnosis, fix)")
        failure = (failure[0][:2000], failure[1][:2000])
    return Replay(name, entries, failure)


def judge(check, name: str, text: str, *, hint: bool = False) -> bool:
    """In the grader: ``check`` (this process's own) on the answers recorded for ``name``: True,
    or the CheckFailed a learner would see. A failure recorded in the kernel always counts."""
    recorded = read_recording(name, text)
    passed = check(recorded, hint=hint)
    if recorded.failure is not None:  # seen in the kernel, whatever the answers were
        raise CheckFailed(*recorded.failure).told(check.__name__, recorded, hint)
    return passed


def replay(check_name: str, name: str, text: str) -> tuple[bool, str]:
    """In the grader: judge the answers one check recorded, with this process's checker.

    Returns (passed, message): the checker's success line, or its diagnosis as a learner first
    sees it, or why the answers could not be read or judged."""
    check = _CHECKS.get(check_name)
    if check is None:
        return False, f"no checker named {check_name}"
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            passed = judge(check, name, text)
    except CheckFailed as failure:
        return False, str(failure)
    except ValueError as error:
        return False, f"the answers recorded for {name} could not be read: {error}"
    except Exception as error:  # answers of a kind the checker did not expect
        return False, (f"the answers recorded for {name} could not be judged: "
                       f"{type(error).__name__}: {error}")
    if passed is not True:
        return False, f"{check_name} did not pass"
    lines = [line for line in printed.getvalue().splitlines() if line.strip()]
    return True, lines[-1] if lines else f"{check_name} passed"

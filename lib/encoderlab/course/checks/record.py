"""A check split in two for grading: the answers are computed where the submission runs, and
judged where it never ran.

In the submission's kernel, ``record("check_attention", my_attention)`` runs the checker as far
as its answers: the cases, the learner's calls (inside the exercise's wrappers, which watch for
forbidden calls, inputs changed in place and the like) and each return value read as an answer.
It prints them as JSON, and a failure found on the way (an exception, a forbidden call) with them.

In the grader, ``replay("check_attention", "my_attention", text)`` runs the same checker, from a
copy imported before any submission ran, on its own cases and references; it reads the answers
from the JSON, which carries data only (numbers, strings, containers, tensors and arrays as raw
bytes, the dataclasses registered with :func:`~.harness.answer_type`), never code. Whatever the
submission did to its own copy of the checker, the library or torch, it can only hand over
answers, and only answers equal to the reference pass. A failure recorded in the kernel always
counts: a submission can lose marks there, never gain them.
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

__all__ = ["MIME", "MAX_CHARS", "answers_of", "record", "read_recording", "judge", "replay",
           "encode", "decode", "Opaque"]

MIME = "application/x-encoderlab-answers"  # the kernel's output that carries the answers
# The checkers as they were when this module was imported: the grader imports it in each kernel
# before the submission's first cell, so that replacing ``checks.check_x`` later changes nothing.
_CHECKS = {name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")}
MAX_CHARS = 32 * 2**20  # the most JSON one check may record
_DEPTH = 24  # how deeply answers may nest
_TENSOR_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)}
_ARRAY_KINDS = "biufc"  # numpy arrays of booleans and numbers only


@dataclasses.dataclass(frozen=True, eq=False)
class Opaque:
    """An answer of a type a recording cannot carry: it compares equal to nothing."""

    type_name: str

    def __eq__(self, other) -> bool:
        return False

    __hash__ = object.__hash__


# --- Encoding (in the submission's kernel) -------------------------------------------------------


def _raw(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode(value, depth: int = 0):
    """``value`` as JSON-ready data; a type it cannot carry becomes an :class:`Opaque`."""
    if depth > _DEPTH:
        return {"~": "opaque", "type": "an answer nested too deeply"}
    inner = depth + 1
    if value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, torch.Tensor):
        return _encode_tensor(value)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.kind not in _ARRAY_KINDS:
            return {"~": "opaque", "type": f"numpy array of {array.dtype}"}
        return {"~": "ndarray", "dtype": array.dtype.str, "shape": list(array.shape),
                "scalar": isinstance(value, np.generic),
                "data": _raw(np.ascontiguousarray(array).tobytes())}
    if isinstance(value, torch.dtype):
        return {"~": "dtype", "v": str(value).removeprefix("torch.")}
    if type(value).__qualname__ in harness.ANSWER_TYPES and dataclasses.is_dataclass(value):
        fields = {f.name: encode(getattr(value, f.name), inner)
                  for f in dataclasses.fields(value)}
        return {"~": "answer", "type": type(value).__qualname__, "v": fields}
    for kind, types in (("tuple", tuple), ("list", list), ("set", set), ("frozenset", frozenset)):
        if isinstance(value, types):
            return {"~": kind, "v": [encode(x, inner) for x in value]}
    if isinstance(value, dict):
        return {"~": "dict", "v": [[encode(k, inner), encode(v, inner)] for k, v in value.items()]}
    return {"~": "opaque", "type": type(value).__name__}


def _encode_tensor(t: torch.Tensor) -> dict:
    t = t.detach()
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    name = str(t.dtype).removeprefix("torch.")
    if name not in _TENSOR_DTYPES or t.layout != torch.strided or t.is_quantized:
        return {"~": "opaque", "type": f"tensor of {t.dtype}, {t.layout}"}
    flat = t.cpu().contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {"~": "tensor", "dtype": name, "shape": list(t.shape), "data": _raw(data)}


class _Log:
    """What :func:`record` collects: (kind, encoded answer) in order, and a failure."""

    def __init__(self):
        self.entries: list = []
        self.failure: tuple[str, str] | None = None
        self.chars = 0

    def add(self, kind: str, value) -> None:
        encoded = encode(value)  # at once: a later call may change a tensor it returned
        self.chars += len(json.dumps(encoded))
        if self.chars > MAX_CHARS:
            raise CheckFailed(f"your answers are too large to record (over {MAX_CHARS // 2**20} "
                              "MB of data for one check).")
        self.entries.append([kind, encoded])

    def text(self) -> str:
        return json.dumps({"entries": self.entries, "failure": self.failure})


def answers_of(check, fn) -> str:
    """Run ``check`` on ``fn`` as far as its answers; the answers (and any failure) as JSON."""
    log = _Log()
    harness.start_recording(log)
    try:
        check(fn)
    except harness.Recorded:
        pass
    except CheckFailed as failure:
        log.failure = (failure.diagnosis, failure.fix)
    finally:
        harness.stop_recording()
    return log.text()


def record(check_name: str, fn) -> None:
    """In the submission's kernel: run ``checks.<check_name>`` on ``fn`` as far as its answers,
    and show them (and any failure on the way) as one output of type :data:`MIME`."""
    from IPython.display import display

    display({MIME: answers_of(_CHECKS[check_name], fn)}, raw=True)


# --- Decoding and judging (in the grader) --------------------------------------------------------


def _bytes(data) -> bytes:
    if not isinstance(data, str):
        raise ValueError("raw data must be base64 text")
    return base64.b64decode(data.encode("ascii"), validate=True)


def _shape(shape) -> tuple[int, ...]:
    if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
        raise ValueError(f"a shape must be a list of sizes, got {shape!r:.60}")
    return tuple(shape)


def _decode_tensor(data: dict) -> torch.Tensor:
    dtype = _TENSOR_DTYPES.get(data.get("dtype"))
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
    if dtype.kind not in _ARRAY_KINDS:
        raise ValueError(f"a numpy array of dtype {dtype}")
    shape, raw = _shape(data.get("shape")), _bytes(data.get("data"))
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"a numpy array of shape {shape} with {len(raw)} bytes")
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return array[()] if data.get("scalar") else array


def decode(data, depth: int = 0):
    """The answer that :func:`encode` wrote; ValueError for anything it would not write."""
    if depth > _DEPTH + 1:
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
        dtype = _TENSOR_DTYPES.get(data.get("v"))
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

"""The kernel's half of a check split in two for grading: the answers are computed where the
submission runs, and judged where it never ran.

In the submission's kernel, ``record("check_attention", my_attention)`` runs the checker as far
as its answers: the cases, the learner's calls (inside the exercise's wrappers, which watch for
forbidden calls, inputs changed in place and the like) and each return value read as an answer.
It prints them as JSON, and a failure found on the way (an exception, a forbidden call) with
them. The JSON carries data only (numbers, strings, containers, tensors and arrays as raw bytes,
the dataclasses registered with :func:`~.harness.answer_type`), never code: the instructor's
grader reads it back and judges it with checkers of its own, imported before any submission ran.
"""

from __future__ import annotations

import base64
import dataclasses
import json

import numpy as np
import torch

from encoderlab.course import checks
from encoderlab.course.checks import harness
from encoderlab.course.checks.harness import CheckFailed

__all__ = ["MIME", "MAX_CHARS", "TENSOR_DTYPES", "ARRAY_KINDS", "DEPTH", "answers_of", "record",
           "encode", "Opaque"]

MIME = "application/x-encoderlab-answers"  # the kernel's output that carries the answers
# The checkers as they were when this module was imported: the grader imports it in each kernel
# before the submission's first cell, so that replacing ``checks.check_x`` later changes nothing.
_CHECKS = {name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")}
MAX_CHARS = 32 * 2**20  # the most JSON one check may record
DEPTH = 24  # how deeply answers may nest
TENSOR_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)}
ARRAY_KINDS = "biufc"  # numpy arrays of booleans and numbers only


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
    if depth > DEPTH:
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
        if array.dtype.kind not in ARRAY_KINDS:
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
    if name not in TENSOR_DTYPES or t.layout != torch.strided or t.is_quantized:
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

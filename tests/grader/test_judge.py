"""The answers' journey from a submission's kernel to the grader: data only, judged afresh.

Every checker's own tests also run through this path (``pytest --through-recording``, in the
test command): the verdicts and messages must not change.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from encoderlab.course import checks
from encoderlab.course.checks import harness, record
from encoderlab.course.checks.l10 import Decoded
from encoderlab_grader import judge


def _roundtrip(value):
    return judge.decode(json.loads(json.dumps(record.encode(value))))


@pytest.mark.parametrize("value", [
    None, True, 3, -2**70, 1.5, float("inf"), "naïve ##s",
    (1, [2, 3], {"a": (4,)}), {(0, 1): "pair"}, {1, 2}, frozenset({"x"}),
])
def test_plain_data_comes_back_as_it_was(value):
    back = _roundtrip(value)
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float16,
                                   torch.bfloat16, torch.float32, torch.float64,
                                   torch.complex64])
def test_tensors_come_back_bit_for_bit(dtype):
    t = (torch.randn(3, 4, 5) * 7).to(dtype)
    back = _roundtrip(t)
    assert back.dtype == dtype and back.shape == t.shape and torch.equal(back, t)
    assert _roundtrip(t[:, 1:, ::2]).shape == (3, 3, 3)  # a strided view is copied
    assert _roundtrip(torch.empty(0, 4, dtype=dtype)).shape == (0, 4)


def test_arrays_dtypes_and_answer_types_come_back():
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert np.array_equal(_roundtrip(array), array)
    assert _roundtrip(np.float64(2.5)) == 2.5  # a float, as numpy's float64 is one
    assert _roundtrip(np.int32(7)) == 7 and isinstance(_roundtrip(np.int32(7)), np.int32)
    assert _roundtrip(torch.float16) is torch.float16
    decoded = Decoded(torch.tensor([[3, 4]]), (1, 2), (3, 4), 1)
    back = _roundtrip(decoded)
    assert isinstance(back, Decoded) and torch.equal(back.ids, decoded.ids)
    assert back.encoder_calls == 1


def test_anything_else_travels_as_an_opaque_name():
    class Sneaky:
        def __eq__(self, other):
            return True  # would pass any comparison, if it ever reached the grader

    back = _roundtrip([Sneaky(), lambda: 1, torch.randn(2).to_sparse()])
    assert all(isinstance(b, record.Opaque) for b in back)
    assert back[0] != back[0] and back[0].type_name == "Sneaky"


@pytest.mark.parametrize("forged, message", [
    ({"~": "tensor", "dtype": "float32", "shape": [2, 2], "data": "AAAA"}, "needs 16 bytes, got 3"),
    ({"~": "tensor", "dtype": "object", "shape": [1], "data": ""}, "unknown dtype 'object'"),
    ({"~": "tensor", "dtype": "float32", "shape": [-1], "data": ""}, "a shape must be a list"),
    ({"~": "ndarray", "dtype": "|O", "shape": [1], "data": ""}, "numpy array of dtype object"),
    ({"~": "answer", "type": "os.system", "v": {}}, "unknown answer type 'os.system'"),
    ({"~": "answer", "type": "Decoded", "v": {"ids": 1}}, r"a Decoded needs the fields"),
    ({"~": "pickle", "v": "gASVAAAA"}, "unknown tag 'pickle'"),
    ({"~": "set", "v": [{"~": "list", "v": []}]}, "a set that cannot be rebuilt"),
    ([1, 2], "unexpected list in the recorded answers"),
])
def test_forged_payloads_are_refused(forged, message):
    with pytest.raises(ValueError, match=message):
        judge.decode(forged)


def test_too_deep_or_too_large_recordings_are_refused():
    deep = 1
    for _ in range(60):
        deep = {"~": "list", "v": [deep]}
    with pytest.raises(ValueError, match="answers nested too deeply"):
        judge.read_recording("f", json.dumps({"entries": [["answer", deep]]}))
    with pytest.raises(ValueError, match="are not JSON"):
        judge.read_recording("f", "[" * 10**5 + "]" * 10**5)
    with pytest.raises(ValueError, match="missing or too large"):
        judge.read_recording("f", " " * (record.MAX_CHARS + 2**21))


def _causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


def test_record_then_replay_passes_the_right_answer_and_names_the_wrong_one():
    text = record.answers_of(checks.check_causal_mask, _causal)
    assert judge.replay("check_causal_mask", "causal", text) == (
        True, "✓ causal mask (causal): correct on 6 cases")

    def upper(n):
        return torch.ones(n, n, dtype=torch.bool).triu()

    passed, message = judge.replay("check_causal_mask", "upper",
                                    record.answers_of(checks.check_causal_mask, upper))
    assert not passed and message.startswith("your mask is upper-triangular")


def test_a_failure_seen_in_the_kernel_always_counts():
    """Answers that would pass, with a failure recorded beside them (a forbidden call seen in
    the kernel, say): the grader fails the check with that failure's words."""
    data = json.loads(record.answers_of(checks.check_causal_mask, _causal))
    data["failure"] = ["you called torch.tril, which this exercise forbids.", "write it."]
    passed, message = judge.replay("check_causal_mask", "causal", json.dumps(data))
    assert not passed and message.startswith("you called torch.tril")
    assert "Fix:" not in message  # the first pass: the fix is for the learner's second look


def test_missing_or_shuffled_answers_fail():
    data = json.loads(record.answers_of(checks.check_causal_mask, _causal))
    short = dict(data, entries=data["entries"][:2])
    assert "no answer was recorded" in judge.replay("check_causal_mask", "c",
                                                     json.dumps(short))[1]
    swapped = dict(data, entries=data["entries"][1:] + data["entries"][:1])
    assert not judge.replay("check_causal_mask", "c", json.dumps(swapped))[0]
    wrong_kind = dict(data, entries=[["result", e[1]] for e in data["entries"]])
    assert "do not follow" in judge.replay("check_causal_mask", "c", json.dumps(wrong_kind))[1]
    assert not judge.replay("check_nothing", "c", json.dumps(data))[0]
    assert "could not be read" in judge.replay("check_causal_mask", "c", "not json")[1]


def test_replacing_the_checker_in_the_kernel_changes_nothing(monkeypatch):
    """record() uses the checkers as they were when it was imported."""
    monkeypatch.setattr(checks, "check_causal_mask", lambda fn, **k: True)
    text = record.answers_of(record._CHECKS["check_causal_mask"], _causal)
    assert json.loads(text)["entries"]  # the answers were recorded all the same


def test_recording_stops_before_the_references():
    calls = []

    def exercise_reference(*case):
        calls.append(case)
        return case

    exercise = harness.Exercise(title="t", cases=lambda: [(1,), (2,)],
                                reference=exercise_reference, describe=str,
                                fallback=lambda a: "no")
    log = record._Log()
    harness.start_recording(log)
    try:
        with pytest.raises(harness.Recorded):
            harness.run(exercise, lambda x: x)
    finally:
        harness.stop_recording()
    assert [kind for kind, _ in log.entries] == ["answer", "answer"] and calls == []

"""`make notebooks` executes a notebook in place and records the load it ran under."""

from __future__ import annotations

import nbformat
import pytest

from encoderlab.course.execute import execute_notebook


def test_execute_records_load_cores_and_time(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import sys\nprint('a')\nprint('b')"),
                nbformat.v4.new_code_cell("6 * 7")]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    record = execute_notebook(path, max_wait=0)
    stored = nbformat.read(path, as_version=4)
    assert stored.metadata["encoderlab_execution"] == record
    assert set(record) == {"load_average_1m", "cpus", "seconds"} and record["cpus"] >= 1
    first, second = stored.cells
    assert [o["text"] for o in first.outputs] == ["a\nb\n"]  # one coalesced stream
    assert second.outputs[0]["data"]["text/plain"] == "42"
    assert "execution" not in first.metadata


def test_execute_rejects_what_is_not_a_notebook(tmp_path):
    with pytest.raises(ValueError, match="expected the path of a notebook"):
        execute_notebook(tmp_path / "missing.ipynb", max_wait=0)

"""Every number a lesson's prose states is printed by one of its cells (or cited).

See prose_audit.py for the rules. Also: the stored notebooks were executed on an idle
machine, so that their progress bars and timings are true.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from prose_audit import LESSONS, SOURCES, audit, cited_facts, prose_numbers

NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]-*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_every_prose_number_is_printed_or_cited(path):
    findings, checked, _, stale = audit(path)
    assert checked > 0, f"{path.name}: the audit found no number to check"
    problems = [str(f) for f in findings] + [
        f"lessons/sources.yml lists {s!r} for {path.name}, whose prose no longer states it"
        for s in stale
    ]
    assert not problems, "\n".join(problems)


def test_sources_file_has_a_list_per_lesson():
    facts = cited_facts()
    assert sorted(facts) == [p.name[:2] for p in NOTEBOOKS]
    keys = re.findall(r'^"(\d\d)":', SOURCES.read_text(), flags=re.M)
    assert len(keys) == len(set(keys)), f"a lesson's key appears twice in sources.yml: {keys}"
    for key, entries in facts.items():
        for entry in entries:
            assert str(entry["source"]).strip(), f"lesson {key}: {entry} has no source"


def _notebook(tmp_path, markdown, output, code="x = 1"):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": markdown},
        {"cell_type": "code", "metadata": {}, "source": code, "execution_count": 1,
         "outputs": [{"output_type": "stream", "name": "stdout", "text": output}]},
    ]
    path = tmp_path / "03-test.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


@pytest.mark.parametrize("prose, printed, ok", [
    ("The loss falls to 0.36 nats.", "loss 0.359\n", True),    # rounded to the shown digits
    ("The loss falls to 0.36 nats.", "loss 0.371\n", False),   # another number
    ("ln(1+31e^-2) = 1.63", "1.6478\n", False),                # a slip the audit must catch
    ("It is right 81 % of the time.", "accuracy 0.812\n", True),   # a fraction backs a %
    ("It is right 81.2 % of the time.", "accuracy 0.81\n", False),  # not that precise
    ("The vocabulary has $V=30{,}522$ entries.", "30522\n", True),  # LaTeX thousands
    ("about 15,000 times more", "14,740\n", True),              # approximate, to its digits
    ("about 15,000 times more", "13,900\n", False),
    ("Dao et al. (2022) and 6 layers, 12 heads", "nothing\n", True),  # years, small ints
    ("Liu et al. (2019, §4.4) and Table 10.5", "nothing\n", True),  # references
    ("a ratio of 5.1x per doubling", "ratio 5.08\n", True),
    ("a ratio of 5.1x per doubling", "ratio 4.0\n", False),
    ("ranges 0.12-0.16 at every position", "0.12 and 0.30\n", False),  # both ends checked
    ("the 22.7M parameters", "22,713,216\n", True),             # a multiplier
])
def test_audit_rules(tmp_path, prose, printed, ok):
    findings, checked, _, _ = audit(_notebook(tmp_path, prose, printed), facts={})
    assert checked >= (0 if ok else 1)
    assert (not findings) == ok, [str(f) for f in findings]


def test_code_literals_and_cited_facts_back_numbers(tmp_path):
    path = _notebook(tmp_path, "We train for 300 steps; BERT used 512 tokens.", "done\n",
                     code="train(steps=300)  # 512 in a comment does not count")
    findings, _, _, _ = audit(path, facts={})
    assert [f.number for f in findings] == ["512"]
    facts = {"03": [{"number": "512", "source": "Devlin et al. (2019), §3"}]}
    findings, checked, cited, stale = audit(path, facts=facts)
    assert (findings, checked, cited, stale) == ([], 2, 1, [])
    facts["03"].append({"number": "0.99", "source": "a number the prose no longer states"})
    assert audit(path, facts=facts)[3] == ["0.99"]


def test_exercise_statements_and_code_are_not_prose():
    markdown = (":::{exercise} Try\n:label: l3-ex-try\nUse n = 4096 tokens.\n:::\n"
                ":::{solution} l3-ex-try\n:class: dropdown\nIt takes 0.25 of the tiles.\n:::\n"
                "Call `attention(q, k, v, block=128)` on 1.5 s of audio.")
    assert [n.text for n in prose_numbers(markdown)] == ["0.25", "1.5"]


# --- Executed on an idle machine -------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_notebook_was_executed_on_an_idle_machine(path):
    metadata = json.loads(pathlib.Path(path).read_text())["metadata"]
    run = metadata.get("encoderlab_execution")
    assert run, (f"{path.name} has no record of its execution: execute it with "
                 f"`make notebooks NB={path.relative_to(LESSONS.parent)}`")
    assert run["load_average_1m"] <= run["cpus"], (
        f"{path.name} was executed under load (1-minute load average "
        f"{run['load_average_1m']} on {run['cpus']} cores): its stored timings and progress "
        f"bars are not those of a quiet machine. Re-execute it with nothing else running.")
    assert run["seconds"] < 60, (
        f"{path.name} took {run['seconds']} s to execute; a lesson must run in under a minute")

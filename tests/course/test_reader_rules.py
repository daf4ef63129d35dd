"""The reader-first rules (DESIGN.md): a lesson is written for a learner with about an hour.

- its prose stays within the word budget of ``lessons/budget.yml``;
- its prose teaches, and never narrates the test harness or an artefact's provenance;
- the code that only draws a figure is folded (``hide-input`` on the site, a Colab form);
- no page publishes a placeholder for results it does not have.

The page's height in screens is measured in a real browser by ``tests/site/test_site.py``.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]-*.ipynb"))
BUDGET = yaml.safe_load((LESSONS / "budget.yml").read_text(encoding="utf-8"))

sys.path.insert(0, str(ROOT / "_ext"))
from reading_time import count_words, lesson_words, prose, reading_minutes  # noqa: E402

# Sentences that narrate the harness or the provenance instead of teaching. Each entry is a
# regular expression (case-insensitive) and what to do instead.
HARNESS_PHRASES = {
    r"\bthe (?:cell|code|test|check) asserts?\b": "say the result; the assert stays in the code",
    r"\bnot compared (?:when|by|under)\b": "leave what the tests compare to the tests",
    r"\bnbval\b": "leave what the tests compare to the tests",
    r"\bfingerprint": "an artefact's provenance belongs in code and its output",
    r"\bsha-?256\b": "an artefact's provenance belongs in code and its output",
    r"\bquoted, not computed\b": "cite the fact (lessons/sources.yml) without narrating it",
    r"\b\d[\d,.]*\s?(?:KB|kB|MB|KiB|MiB)\b[^.]*\bartefact|\bartefact\b[^.]*\b\d[\d,.]*\s?"
    r"(?:KB|kB|MB|KiB|MiB)\b": "an artefact's size is not part of the lesson",
    r"\b(?:recorded|trained|measured|executed) on 20\d\d-\d\d-\d\d\b":
        "a recording date is provenance: print it from code if it matters",
    r"\b(?:idle|quiet) machine\b": "how the notebook was executed is not part of the lesson",
    r"\bthis cell is not\b": "say what the cell shows, not how it is tested",
}

# What a page shows when it lacks a result: never published.
PLACEHOLDERS = [
    r"recorded yet", r"once a run is recorded", r"appear here once",
    r"\bTODO\b", r"\bTBD\b", r"coming soon", r"not yet available",
]


def _number(path: pathlib.Path) -> int:
    return int(path.name[:2])


def _pending(path: pathlib.Path) -> bool:
    return _number(path) in BUDGET["pending"]


def _cells(path: pathlib.Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _ids(paths):
    return [p.name[:2] for p in paths]


# --- the word budget -------------------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_lesson_stays_within_its_word_budget(path):
    words = lesson_words(path)
    over = []
    if words["main"] > BUDGET["main_path_words"]:
        over.append(f"its main path (title to Exercises) has {words['main']:,} words of prose, "
                    f"over the budget of {BUDGET['main_path_words']:,}")
    if words["whole"] > BUDGET["whole_words"]:
        over.append(f"the whole notebook has {words['whole']:,} words of prose, over the "
                    f"budget of {BUDGET['whole_words']:,}")
    if _pending(path):
        assert over, (f"Lesson {_number(path)} now meets the word budget "
                      f"({words['main']:,} / {words['whole']:,}): remove it from `pending` "
                      "in lessons/budget.yml")
        pytest.xfail(f"Lesson {_number(path)} is pending: " + "; ".join(over))
    assert not over, f"Lesson {_number(path)} ({path.name}): " + "; ".join(over) + \
        ". Cut what does not teach the lesson's idea (DESIGN.md, 'Reader first')."


def test_the_course_stays_within_its_word_budget():
    words = {path.name[:2]: lesson_words(path)["whole"] for path in NOTEBOOKS}
    total = sum(words.values())
    assert total <= BUDGET["course_words"], (
        f"the ten lessons hold {total:,} words of prose, over the course's budget of "
        f"{BUDGET['course_words']:,}: {words}")


def test_word_count_rules():
    markdown = ("## 1. A claim\n\nThe mask decides [what a query sees](https://x.org/a-b-c).\n\n"
                "$$\nA = \\operatorname{softmax}(QK^\\top)\n$$\n\n```python\nx = 1\n```\n\n"
                ":::{exercise} Try it\n:label: l1-ex-try\nWrite it.\n:::\n"
                "See {doc}`Lesson 2 <02-tokenization-and-the-encoder-input>`.")
    text = prose(markdown)
    assert "softmax" not in text and "x = 1" not in text and "https" not in text
    assert "l1-ex-try" not in text and "02-tokenization" not in text
    # a piece counts when it holds a letter or a digit: "##" does not, "1." does
    assert count_words(text) == len("1. A claim The mask decides [what a query sees] "
                                    "Try it Write it. See {doc}`Lesson 2`.".split())


def test_main_path_ends_at_the_exercises(tmp_path):
    notebook = tmp_path / "01-x.ipynb"
    cell = lambda text: {"cell_type": "markdown", "metadata": {}, "source": [text]}  # noqa: E731
    notebook.write_text(json.dumps({"metadata": {}, "cells": [
        cell("# Lesson 1 — X\n\none two three"), cell("## Exercises\n\nfour five"),
        cell("## Conclusion\n\nsix")]}))
    assert lesson_words(notebook) == {"main": 6, "whole": 11}
    assert reading_minutes(notebook) == 1


# --- phrases that narrate the harness or the provenance --------------------------------------

def _markdown(path):
    return [(i, "".join(c["source"])) for i, c in enumerate(_cells(path))
            if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_prose_teaches_and_does_not_narrate_the_harness(path):
    found = []
    for index, source in _markdown(path):
        text = " ".join(prose(source).split())
        for pattern, instead in HARNESS_PHRASES.items():
            for match in re.finditer(pattern, text, re.I):
                found.append(f"cell {index}: {match.group(0)!r}: {instead}")
    if _pending(path) and found:
        pytest.xfail(f"Lesson {_number(path)} is pending: {len(found)} phrases")
    assert not found, f"{path.name}:\n" + "\n".join(found)


@pytest.mark.parametrize("sentence", [
    "The cell asserts that the gap is positive.",
    "This output is not compared when the notebook is tested.",
    "The artefact's fingerprint is checked on every read.",
    "The 1.2 MB artefact holds the weights.",
    "It was trained on 2026-11-30 on an idle machine.",
])
def test_phrase_list_catches_harness_narration(sentence):
    assert any(re.search(p, sentence, re.I) for p in HARNESS_PHRASES), sentence


@pytest.mark.parametrize("sentence", [
    "The mask asserts nothing about order; it only hides keys.",
    "A 512 x 512 matrix of float32 takes 1 MB per head.",
    "Each seed gives a different split.",
])
def test_phrase_list_leaves_teaching_alone(sentence):
    assert not any(re.search(p, sentence, re.I) for p in HARNESS_PHRASES), sentence


# --- plotting code folded ----------------------------------------------------------------------

def _draws_a_figure(cell: dict) -> bool:
    return any(key.startswith("image/") for out in cell.get("outputs", [])
               for key in out.get("data", {}))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_plotting_code_is_folded_on_the_site_and_in_colab(path):
    unfolded = []
    for index, cell in enumerate(_cells(path)):
        if cell["cell_type"] != "code" or not _draws_a_figure(cell):
            continue
        source = "".join(cell["source"])
        tags = cell["metadata"].get("tags", [])
        missing = []
        if not ({"hide-input", "remove-input"} & set(tags)):
            missing.append("the tag hide-input")
        if not source.startswith("# @title "):
            missing.append("a first line '# @title Figure N …'")
        if cell["metadata"].get("cellView") != "form":
            missing.append('metadata "cellView": "form"')
        if missing:
            unfolded.append(f"cell {index} draws a figure but lacks " + ", ".join(missing))
    if _pending(path) and unfolded:
        pytest.xfail(f"Lesson {_number(path)} is pending: {len(unfolded)} unfolded figures")
    assert not unfolded, f"{path.name}:\n" + "\n".join(unfolded) + \
        "\nKeep the mechanism in a visible cell of its own; fold the cell that only draws."


# --- no placeholder -----------------------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_no_placeholder_is_published(path):
    found = []
    for index, cell in enumerate(_cells(path)):
        texts = ["".join(cell["source"])] if cell["cell_type"] == "markdown" else []
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            texts.append("".join(out.get("data", {}).get("text/plain", "")))
            texts.append("".join(out.get("data", {}).get("text/html", "")))
        for text in texts:
            for pattern in PLACEHOLDERS:
                if re.search(pattern, text, re.I):
                    line = next(ln for ln in text.splitlines() if re.search(pattern, ln, re.I))
                    found.append(f"cell {index}: {line.strip()[:120]!r}")
    assert not found, f"{path.name} publishes placeholders for results it lacks:\n" + \
        "\n".join(found) + "\nShow what was measured here, and one line on what a GPU adds."


def test_budget_file_names_only_lessons_that_exist():
    numbers = {_number(p) for p in NOTEBOOKS}
    assert set(BUDGET["pending"]) <= numbers
    assert BUDGET["main_path_words"] <= BUDGET["whole_words"]


def test_no_placeholder_on_the_other_pages():
    pages = [*ROOT.glob("*.md"), *(ROOT / "appendices").glob("*.md")]
    found = [f"{page.name}: {line.strip()[:120]!r}" for page in pages
             for line in page.read_text(encoding="utf-8").splitlines()
             if any(re.search(p, line, re.I) for p in PLACEHOLDERS)]
    assert not found, "pages publish placeholders:\n" + "\n".join(found)

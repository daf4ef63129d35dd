"""Words of prose per lesson, and the minutes a lesson takes, computed from its notebook.

A lesson's prose is the text of its markdown cells, without display math, code blocks,
link targets, HTML tags and directive options. Its **main path** runs from the title to
the `## Exercises` heading; the **whole** notebook adds the exercises, the conclusion and
the references. The word budget (`lessons/budget.yml`) caps both, and a test reads it.

The minutes shown in the index and on the instructors' page are the whole notebook's prose
at 200 words a minute plus the execution time `make notebooks` stored in the notebook,
written by the role ``{reading-time}`lessons/NN-name` `` when the book is built.

    python _ext/reading_time.py lessons/*.ipynb     # words and minutes of each lesson
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import sys

WORDS_PER_MINUTE = 200

_DISPLAY_MATH = re.compile(r"^\s*\$\$.*?\$\$\s*$", re.S | re.M)
_MATH_DIRECTIVE = re.compile(r"^(```+|:::+)\{math\}.*?^\1\s*$", re.S | re.M)
_CODE_BLOCK = re.compile(r"^(```+)(?!\{)[^\n]*\n.*?^\1\s*$", re.S | re.M)  # ```python ... ```
_SOLUTION_LINE = re.compile(r"^\s*(```+|:::+)\{solution[^\n]*$", re.M)  # ```{solution-start} l1-ex
_FENCE = re.compile(r"^\s*(```+|:::+)(\{[\w-]+\})?", re.M)  # :::{exercise} Title -> Title
_OPTION_LINE = re.compile(r"^\s*:[\w-]+:[^\n]*$", re.M)  # :label: l1-ex-labels
_LINK = re.compile(r"\]\([^)]*\)")  # [text](target) -> [text]
_ROLE_TARGET = re.compile(r"\s*<[^<>`]+>`")  # {doc}`text <target>` -> {doc}`text`
_HTML_TAG = re.compile(r"<[^>]+>")
_URL = re.compile(r"https?://\S+")
_EXERCISES = re.compile(r"^#{1,3}\s*Exercises\b", re.M)


def prose(markdown: str) -> str:
    """The prose of one markdown cell, as a reader reads it."""
    text = _MATH_DIRECTIVE.sub(" ", markdown)
    text = _DISPLAY_MATH.sub(" ", text)
    text = _CODE_BLOCK.sub(" ", text)
    text = _SOLUTION_LINE.sub(" ", text)
    text = _FENCE.sub(" ", text)
    text = _OPTION_LINE.sub(" ", text)
    text = _ROLE_TARGET.sub("`", text)
    text = _LINK.sub("]", text)
    text = _HTML_TAG.sub(" ", text)
    return _URL.sub(" ", text)


def count_words(text: str) -> int:
    """Words: whitespace-separated pieces that hold a letter or a digit."""
    return sum(1 for piece in text.split() if re.search(r"\w", piece))


def lesson_words(path) -> dict[str, int]:
    """{"main": words from the title to the Exercises heading, "whole": the notebook's}."""
    cells = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["cells"]
    main = whole = 0
    in_main = True
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        if _EXERCISES.search(source):
            in_main = False
        words = count_words(prose(source))
        whole += words
        main += words if in_main else 0
    return {"main": main, "whole": whole}


def execution_seconds(path) -> float:
    """The execution time `make notebooks` stored in the notebook (0 if it has none)."""
    metadata = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["metadata"]
    return float(metadata.get("encoderlab_execution", {}).get("seconds", 0.0))


def reading_minutes(path) -> int:
    """Minutes to read the whole lesson at 200 words a minute and run its cells."""
    minutes = lesson_words(path)["whole"] / WORDS_PER_MINUTE + execution_seconds(path) / 60
    return max(1, math.ceil(minutes))


def _role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{reading-time}`lessons/01-two-ways-to-read-a-sequence` `` -> "about 31 min"."""
    from docutils import nodes

    env = inliner.document.settings.env
    notebook = pathlib.Path(env.srcdir) / f"{text.strip()}.ipynb"
    if not notebook.is_file():
        message = inliner.reporter.error(
            f"reading-time: no notebook {text.strip()}.ipynb (expected a lesson's path "
            "without its suffix, such as lessons/01-two-ways-to-read-a-sequence)", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    env.note_dependency(str(notebook))
    return [nodes.inline(rawtext, f"{reading_minutes(notebook)} min",
                         classes=["reading-time"])], []


def setup(app):
    app.add_role("reading-time", _role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        words = lesson_words(arg)
        print(f"{pathlib.Path(arg).stem}: main path {words['main']:,} words, whole "
              f"{words['whole']:,}; {reading_minutes(arg)} min")

"""Number each lesson's exercises within the lesson: Exercise 3.1, 3.2, … in Lesson 3.

sphinx-exercise numbers exercises through Sphinx's figure numbering, which
counts across the whole book, so Lesson 3 would open with "Exercise 11". After
Sphinx has assigned its numbers, this renumbers the exercises of every
`lessons/NN-...` page as (NN, 1), (NN, 2), … in their original order; the
exercise titles, the solutions' "Solution to" lines and every reference use them.
"""

from __future__ import annotations

import re

LESSON = re.compile(r"^lessons/(\d+)-")


def _renumber(app, env):
    changed = []
    for docname, numbers in env.toc_fignumbers.items():
        match = LESSON.match(docname)
        exercises = numbers.get("exercise")
        if not match or not exercises:
            continue
        lesson = int(match.group(1))
        in_order = sorted(exercises, key=lambda label: exercises[label])
        renumbered = {label: (lesson, i) for i, label in enumerate(in_order, start=1)}
        if renumbered != exercises:
            numbers["exercise"] = renumbered
            changed.append(docname)
    return changed  # Sphinx writes these pages again with the new numbers


def setup(app):
    app.connect("env-get-updated", _renumber, priority=900)  # after Sphinx numbers them
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""The instructor's tools: ``python -m encoderlab_grader TOOL ...`` (or ``encoderlab-grader TOOL``).

    student     write the student notebooks and the instructors' tables
    grade       grade submitted notebooks into a CSV, fenced in, several at once
    gradescope  write a lesson's Gradescope autograder, or run it

Each tool's own options: ``python -m encoderlab_grader TOOL --help``.
"""

from __future__ import annotations

import sys

from encoderlab_grader import grade, gradescope, student

TOOLS = {"student": student.main, "grade": grade.main, "gradescope": gradescope.main}


def main(argv: list[str] | None = None) -> int:
    """Run ``TOOL`` with the rest of the arguments; print the list of tools when none is given."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    tool, rest = argv[0], argv[1:]
    if tool not in TOOLS:
        print(f"encoderlab_grader: unknown tool {tool!r}; expected one of {', '.join(TOOLS)}.\n"
              "Run `python -m encoderlab_grader --help` for what each does.", file=sys.stderr)
        return 2
    return TOOLS[tool](rest)


if __name__ == "__main__":
    raise SystemExit(main())

"""One command for the course's tools: ``python -m encoderlab TOOL ...`` (or ``encoderlab TOOL``).

    bench       time the course's attention and encoder pairs side by side (Lessons 3, 7, 9)
    train       retrain a lesson's small artefact (Lessons 5-8); --list shows them
    data        check the frozen corpora (--build rebuilds them on Python 3.11)
    execute     execute lesson notebooks one at a time on a quiet machine (make notebooks)
    figures     draw the figure key (figures/figure-key.png)

Each tool's own options: ``python -m encoderlab TOOL --help``.
"""

from __future__ import annotations

import importlib
import sys

# tool -> the module whose main(argv) runs it; imported only when that tool is asked for
TOOLS = {
    "bench": "encoderlab.course.bench",
    "train": "encoderlab.course.train",
    "data": "encoderlab.data",
    "execute": "encoderlab.course.execute",
    "figures": "encoderlab.course.plotting",
}


def main(argv: list[str] | None = None) -> int:
    """Run ``TOOL`` with the rest of the arguments; print the list of tools when none is given."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    tool, rest = argv[0], argv[1:]
    if tool not in TOOLS:
        print(f"encoderlab: unknown tool {tool!r}; expected one of {', '.join(TOOLS)}.\n"
              "Run `python -m encoderlab --help` for what each does.", file=sys.stderr)
        return 2
    return importlib.import_module(TOOLS[tool]).main(rest)


if __name__ == "__main__":
    raise SystemExit(main())

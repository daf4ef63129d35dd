"""A link to a lesson that is not in the book yet is shown as plain text.

The appendices link every row to the lesson that shows it, with `{doc}`, for
all ten lessons. While a lesson is still being written (it is not in
`_toc.yml`), Sphinx would call its link unresolvable, and the strict build
would fail; this shows the link's text instead, with no link. Only targets in
`lessons/` are treated so; every other unresolved reference still fails the
build, and `tests/test_appendices.py` checks that each lesson target is one of
the course's ten lesson names. When the lesson arrives, the pages that showed
its link as text are read again, so an incremental build links them too.
"""

from __future__ import annotations

from sphinx.util import docname_join, logging

logger = logging.getLogger(__name__)


def _waiting(env) -> dict[str, set[str]]:
    """docname -> the lessons it links to that were not in the book when it was built."""
    if not hasattr(env, "lessons_awaited"):
        env.lessons_awaited = {}
    return env.lessons_awaited


def _lesson_not_in_book_yet(app, env, node, contnode):
    if node.get("refdomain") != "std" or node.get("reftype") != "doc":
        return None
    target = docname_join(node.get("refdoc", ""), node.get("reftarget", ""))
    if not target.startswith("lessons/") or target in env.all_docs:
        return None
    logger.info("lesson %s is not in the book yet: its link is shown as text", target)
    _waiting(env).setdefault(node.get("refdoc", ""), set()).add(target)
    return contnode


def _arrived(app, env, added, changed, removed):
    """Pages that wait for a lesson that is now in the book: read them again."""
    return [doc for doc, lessons in _waiting(env).items() if lessons & env.found_docs]


def _purge(app, env, docname):
    _waiting(env).pop(docname, None)


def _merge(app, env, docnames, other):
    _waiting(env).update(_waiting(other))


def setup(app):
    app.connect("missing-reference", _lesson_not_in_book_yet)
    app.connect("env-get-outdated", _arrived)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Give every figure a lesson draws the alt text of its caption.

A lesson's figures are the PNG outputs of code cells, and each is captioned by
the markdown cell that follows it, which starts with "**Figure N.**". Sphinx
would use the image's file name as its alt text; this extension uses the
caption's text instead, and marks the caption paragraph with the class
`figure-caption` (the website tests check both). An alt text set in the cell's
metadata (`mystnb: image: alt: ...`) is kept. A figure without a caption keeps
no useful alt text, and `tests/test_site.py` names it.
"""

from __future__ import annotations

import re

from docutils import nodes

CAPTION = re.compile(r"Figure \d+\.")


def _cell_of(node: nodes.Node):
    """The notebook cell that holds `node`, or None outside every cell."""
    while node is not None:
        if isinstance(node, nodes.container) and "cell" in node.get("classes", []):
            return node
        node = node.parent
    return None


def _in_cell(node: nodes.Node) -> bool:
    return _cell_of(node) is not None


def _caption_after(cell: nodes.Element):
    """The first paragraph after `cell`, outside every code cell, if it is a figure caption."""
    for node in cell.findall(nodes.paragraph, include_self=False, siblings=True, ascend=True):
        if _in_cell(node):
            continue
        return node if CAPTION.match(node.astext()) else None
    return None


def _alt_from_captions(app, doctree, docname):
    for image in list(doctree.findall(nodes.image)):
        cell = _cell_of(image)
        if cell is None:
            continue  # a markdown image: its alt text is written by hand
        caption = _caption_after(cell)
        if caption is None:
            continue
        if "figure-caption" not in caption["classes"]:
            caption["classes"].append("figure-caption")
        if not image.get("alt"):
            image["alt"] = " ".join(caption.astext().split())


def setup(app):
    app.connect("doctree-resolved", _alt_from_captions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Citations: every paper is a link a reader can follow, and references.md lists them all.

A lesson or appendix cites a paper as a Markdown link, [Devlin et al., 2019](https://arxiv.org/abs/1810.04805),
never as bare text, "(Devlin et al., 2019)" or "Devlin et al. (2019)". The references page
(references.md) lists every paper whose arXiv or ACL Anthology link appears in a lesson or an
appendix, and nothing that no page cites; each entry names the lessons that cite it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "references.md"

# A surname: "Devlin", "Ben-Zaken", "O'Neil", "BehnamGhader".
_NAME = r"[A-Z][A-Za-z'\u00C0-\u017F-]+"
_YEAR = r"(?:19|20)\d\d[a-z]?\b"
# "Name et al., 2019", "Name et al. 2019", "Name et al. (2019", "Name & Name (2018)",
# "Name and Name, 2018"; spaces may be line breaks.
_MANY = _NAME + r"(?:\s+et\s+al\.|\s+(?:&|and)\s+" + _NAME + r")" + r",?\s+\(?" + _YEAR
# One author: "(Shazeer, 2019)", "(Kudo 2018)", "Ethayarajh (2019)".
_ONE = r"\(\s*" + _NAME + r",?\s+" + _YEAR
_ONE_INLINE = _NAME + r"\s+\(" + _YEAR
BARE_CITATION = re.compile(rf"(?<![\w-])(?:{_MANY}|{_ONE_INLINE})|{_ONE}")

_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
_STRIP = [
    re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1", re.S | re.M),  # fenced code
    re.compile(r"`[^`\n]*`"),  # code spans
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"(?<![\\\w])\$[^$\n]+\$"),  # inline math
]


def bare_citations(markdown: str) -> list[str]:
    """The citations in a page that are not the text of a Markdown link."""
    text = markdown
    for pattern in _STRIP:
        text = pattern.sub(" ", text)
    text = _LINK.sub("_", text)  # a linked citation is fine: drop link text and target
    return [" ".join(m.group(0).split()) for m in BARE_CITATION.finditer(text)]


def paper_key(url: str) -> str | None:
    """'arxiv:1810.04805' or 'acl:N19-1423' for an arXiv or ACL Anthology link, else None."""
    m = re.match(
        r"https?://(?:www\.)?arxiv\.org/(?:abs|pdf)/(\d{4}\.\d{4,5})(?:v\d+)?(?:\.pdf)?/?$", url
    )
    if m:
        return "arxiv:" + m.group(1)
    m = re.match(
        r"https?://(?:www\.)?(?:aclanthology\.org|aclweb\.org/anthology)/([A-Za-z0-9.\-]+?)(?:\.pdf)?/?$",
        url,
    )
    if m:
        return "acl:" + m.group(1)
    return None


def _normalise(url: str) -> str:
    return paper_key(url) or url.rstrip("/")


def _cited_pages() -> dict[str, str]:
    """The lessons' markdown cells and the appendices, by path."""
    pages = {}
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        pages[str(notebook.relative_to(ROOT))] = "\n\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
        )
    for path in sorted((ROOT / "appendices").glob("*.md")):
        pages[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return pages


def _links(markdown: str) -> list[str]:
    return [m.group(2) for m in _LINK.finditer(markdown)]


def _entries() -> list[str]:
    """references.md's entries: list items, joined across their wrapped lines."""
    entries, current = [], None
    for line in REFERENCES.read_text(encoding="utf-8").splitlines():
        if line.startswith("- "):
            current = [line[2:]]
            entries.append(current)
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return [" ".join(e) for e in entries]


def test_bare_citation_pattern_flags_bare_text_and_spares_links():
    flagged = [
        "as shown (Devlin et al., 2019).",
        "Devlin et al. (2019) proposed",
        "see Devlin et al. 2019, §3.1",
        "RMSNorm (Zhang & Sennrich, 2019)",
        "Wang & Cho (2019) sample",
        "Devlin et al.\n2019",
        "multi-query attention (Shazeer, 2019)",
        "Ramshaw and Marcus (1995) introduced",
        "the anisotropy that Ethayarajh\n(2019) measured",
    ]
    for text in flagged:
        assert bare_citations(text), f"should be flagged: {text!r}"
    spared = [
        "[Dao et al., 2022](https://arxiv.org/abs/2205.14135)",
        "([Devlin et al. 2019](https://arxiv.org/abs/1810.04805), §3.1)",
        '[Clark et al.](https://arxiv.org/abs/1906.04341) (2019, "What Does BERT Look At?")',
        "[Wang & Cho (2019)](https://arxiv.org/abs/1902.04094) sample",
        "[Devlin et al.\n2019](https://arxiv.org/abs/1810.04805)",
        "In 2019 BERT won; the 2020 models and 768 (2019) dims",
        "`Devlin et al., 2019` in code",
        'And [Liu et al.](https://arxiv.org/abs/2004.08249) (2020, "Understanding") argue',
        "that [Ethayarajh\n(2019)](https://arxiv.org/abs/1909.00512) measured",
    ]
    for text in spared:
        assert not bare_citations(text), f"should not be flagged: {text!r}"


def test_paper_key_reads_arxiv_and_acl_links():
    assert paper_key("https://arxiv.org/abs/1810.04805") == "arxiv:1810.04805"
    assert paper_key("https://arxiv.org/pdf/1810.04805v2.pdf") == "arxiv:1810.04805"
    assert paper_key("https://aclanthology.org/N19-1423/") == "acl:N19-1423"
    assert (
        paper_key("https://aclanthology.org/2020.emnlp-main.463.pdf") == "acl:2020.emnlp-main.463"
    )
    assert paper_key("https://example.org/paper") is None


def test_no_lesson_or_appendix_cites_a_paper_as_bare_text():
    bad = {page: found for page, text in _cited_pages().items() if (found := bare_citations(text))}
    assert not bad, (
        "bare citations: make each a Markdown link to the paper's arXiv abs page or ACL Anthology "
        "page, e.g. [Devlin et al., 2019](https://arxiv.org/abs/1810.04805):\n"
        + "\n".join(f"  {page}: {'; '.join(found)}" for page, found in bad.items())
    )


def test_references_page_lists_every_arxiv_and_acl_paper_the_course_links():
    listed = {
        key for url in _links(REFERENCES.read_text(encoding="utf-8")) if (key := paper_key(url))
    }
    missing: dict[str, list[str]] = {}
    for page, text in _cited_pages().items():
        for url in _links(text):
            key = paper_key(url)
            if key and key not in listed:
                missing.setdefault(key, []).append(page)
    assert not missing, (
        "papers linked from the course but absent from references.md:\n"
        + "\n".join(
            f"  {key} (in {', '.join(sorted(set(pages)))})"
            for key, pages in sorted(missing.items())
        )
    )


def test_every_reference_is_cited_and_names_the_pages_that_cite_it():
    cited_by: dict[str, set[str]] = {}
    for page, text in _cited_pages().items():
        for url in _links(text):
            cited_by.setdefault(_normalise(url), set()).add(page)
    entries = _entries()
    assert len(entries) >= 10, "references.md lists too few papers"
    problems = []
    for entry in entries:
        urls = [u for u in _links(entry) if u.startswith("http")]
        named = {
            u.split("#")[0]
            for u in _links(entry)
            if re.match(r"(?:lessons/\d\d-[\w-]+\.ipynb|appendices/[\w-]+\.md)", u)
        }
        if len(urls) != 1:
            problems.append(f"needs exactly one link to the paper: {entry[:80]}")
            continue
        pages = cited_by.get(_normalise(urls[0]))
        if not pages:
            problems.append(f"cited by no lesson or appendix: {entry[:80]}")
            continue
        if named != pages:
            problems.append(f"{urls[0]}: the entry names {sorted(named)}, cited by {sorted(pages)}")
    assert not problems, (
        "references.md is out of step with the pages (list each paper once, with one link, and "
        "its 'Cited in' list naming every lesson and appendix that links it):\n"
        + "\n".join("  " + p for p in problems)
    )


def test_references_page_has_no_bare_urls():
    text = _LINK.sub(" ", REFERENCES.read_text(encoding="utf-8"))
    assert "http" not in text and "<" not in text, "write every address as a Markdown link"

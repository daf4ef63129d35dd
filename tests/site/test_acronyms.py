"""Appendix C lists every acronym the course uses.

An acronym here is a word of two or more capital letters (digits allowed, and a
plural "s"), such as MLM, GPUs or FP16, also as part of a hyphenated word
(post-LN gives LN; TF-IDF stays whole), found in the prose of a lesson's
markdown cells or of a page of the book. Not counted: code spans and code
blocks, math, URLs and link targets, HTML tags, special tokens in brackets
(`[CLS]`, `[MASK]`), hex colours, code points (U+FFFD), a single word in
quotes (an example string, "HELLO"), units and Roman numerals. When a page uses
one that Appendix C lacks, the failure says which, where, and the line to add.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPENDIX_C = ROOT / "appendices" / "c-acronyms.md"

# Not acronyms in the sense of the appendix: units and Roman numerals.
NOT_ACRONYMS = {
    "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "MHz", "GHz",
    "II", "III", "IV", "VI", "VII", "VIII", "IX", "XI", "XII",
}  # fmt: skip

_STRIP = [
    re.compile(r"^(`{3,}|~{3,}).*?^\1", re.S | re.M),  # fenced code and MyST directives' fences
    re.compile(r"`[^`\n]*`"),  # code spans
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", re.S),  # amsmath environments
    re.compile(r"(?<![\\\w])\$(?:[^$\n]|\n(?![ \t]*\n))+\$"),  # inline math, across line breaks
    re.compile(r"\]\([^)]*\)"),  # link targets: keep the link text only
    re.compile(r"<[^>\n]+>"),  # HTML tags and autolinks
    re.compile(r"https?://\S+"),  # bare URLs
    re.compile(r"\[[A-Z]+\]"),  # special tokens: [CLS], [SEP], [MASK], [PAD], [UNK]
    re.compile(r"#[0-9A-Fa-f]{6}\b"),  # hex colours
    re.compile(r"U\+[0-9A-Fa-f]{4,6}\b"),  # Unicode code points
    re.compile(r"[\"\u201c][^\s\"\u201d]+[\"\u201d]"),  # one quoted word is an example: "HELLO"
    re.compile(r"^:\w[\w-]*:.*$", re.M),  # directive options (:label:, :class:)
    re.compile(r"\{\w+\}"),  # role names: {doc}, {ref}
]
# Words, hyphenated compounds whole; identifiers with an underscore (FIG1_TEXT) are not words.
WORD = re.compile(r"(?<![\w-])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*(?![\w])")
ACRONYM = re.compile(r"([A-Z][A-Z0-9]*[A-Z][A-Z0-9]*)s?")  # MLM, FP16, UL2, GPUs


def prose(markdown: str) -> str:
    """The text of a markdown page with code, math, links and tags removed."""
    fences = _STRIP[0]
    # Keep the body of MyST directives (``` {exercise}, :::) but drop plain code blocks.
    def _fence(match: re.Match) -> str:
        block = match.group(0)
        first = block.split("\n", 1)[0]
        return block.split("\n", 1)[1].rsplit("\n", 1)[0] if "{" in first else ""

    text = fences.sub(_fence, markdown)
    for pattern in _STRIP[1:]:
        text = pattern.sub(" ", text)
    return text


def acronyms_in(markdown: str) -> set[str]:
    """Acronyms used in the prose of a markdown page (plurals reduced to the singular)."""
    found = set()
    for compound in WORD.findall(prose(markdown)):
        # post-LN -> LN, GPT-2 -> GPT, TF-IDF -> TF-IDF (adjacent acronyms stay one)
        run: list[str] = []
        for part in compound.split("-") + [""]:
            match = ACRONYM.fullmatch(part)
            if match and match.group(1) not in NOT_ACRONYMS:
                run.append(match.group(1))
            elif run:
                found.add("-".join(run))
                run = []
    return found


def _pages() -> dict[str, str]:
    """Every page of the book as markdown: the .md pages and the lessons' markdown cells."""
    pages = {}
    for path in sorted(ROOT.glob("*.md")) + sorted((ROOT / "appendices").glob("*.md")):
        if path.name in {"README.md", "CONTRIBUTING.md"}:
            continue
        pages[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        pages[str(notebook.relative_to(ROOT))] = "\n\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
        )
    return pages


def defined_acronyms() -> set[str]:
    """The acronyms Appendix C defines: the first column of its table, in bold."""
    text = APPENDIX_C.read_text(encoding="utf-8")
    return set(re.findall(r"^\|\s*\*\*([^*|]+)\*\*\s*\|", text, re.M))


def test_prose_drops_code_math_links_and_special_tokens():
    text = "Use `NSP`, $W_{QK}$, [CLS], [link](https://x.org/ABC), #D55E00, III and GB, but MLM."
    assert acronyms_in(text) == {"MLM"}
    assert acronyms_in('"HELLO" and U+FFFD in a BPE vocabulary') == {"BPE"}
    assert acronyms_in("two GPUs and an LLM's cache") == {"GPU", "LLM"}
    assert acronyms_in("post-LN, GPT-2, TF-IDF and DeBERTa-v3") == {"LN", "GPT", "TF-IDF"}
    assert acronyms_in("FIG1_TEXT and MAX_LEN") == set()
    assert acronyms_in("scores $S=QD^\\top\\in\nR^{n}$ and NSP") == {"NSP"}


def test_every_acronym_the_course_uses_is_in_appendix_c():
    defined = defined_acronyms()
    missing: dict[str, list[str]] = {}
    for page, text in _pages().items():
        for acronym in sorted(acronyms_in(text) - defined):
            missing.setdefault(acronym, []).append(page)
    assert not missing, (
        "Appendix C (appendices/c-acronyms.md) lacks acronyms the course uses. Add a row to its "
        "table for each, in alphabetical order (a word that is a name or label rather than an "
        "acronym, such as a tag PER, belongs in a code span on its page instead: `PER`):\n"
        + "\n".join(
            f"  | **{a}** | <expansion> | <what it is, one line> |   (used in {', '.join(pages)})"
            for a, pages in sorted(missing.items())
        )
    )


def test_appendix_c_is_alphabetical_and_lists_nothing_twice():
    text = APPENDIX_C.read_text(encoding="utf-8")
    rows = re.findall(r"^\|\s*\*\*([^*|]+)\*\*\s*\|", text, re.M)
    assert len(rows) == len(set(rows)), "an acronym is listed twice"
    assert rows == sorted(rows, key=str.casefold), "keep Appendix C's table in alphabetical order"

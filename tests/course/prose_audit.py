"""The prose audit: every number a lesson states must be one its cells print.

A lesson's markdown (solutions included) may state a measured number only if a stored
output of the same lesson prints it, at the precision the prose shows ("0.36" is backed
by a printed 0.359; "81 %" by 0.812 or 81.2 %). Three other sources count:
- a literal in the lesson's code (a setting the reader sees: ``steps=300``, ``p=0.15``);
- a "Recap of Lesson N" section may state what Lesson N's outputs print;
- ``lessons/sources.yml`` lists cited facts (a paper, a model card) per lesson.

Checked: decimals, percentages, and integers of 100 or more (smaller integers are
mostly structure: "6 layers", "Lesson 3"). Years in citations are skipped.

Run ``python tests/course/prose_audit.py [lessons/NN-*.ipynb ...]`` to list what fails.
"""

from __future__ import annotations

import html
import json
import pathlib
import re
import sys
from dataclasses import dataclass

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
SOURCES = LESSONS / "sources.yml"

# A number in prose: digits with optional thousands separators, decimals, an exponent, a
# k/M/B multiplier, a percent sign. Not part of a word, an identifier or a path ("L6",
# "sm_90", "GPT-2", "v0.1"); "5.1x" and "1.60-1.94" are numbers.
PROSE_NUMBER = re.compile(
    r"(?<![\w.\/#^\\])(?<![A-Za-z]-)"
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)"
    r"(?:\.(?P<frac>\d+))?"
    r"(?:e(?P<exp>[-−]?\d+))?"
    r"(?P<scale>[kKMB](?![A-Za-z]))?"
    r"(?P<pct>\s?%|\\%)?"
    r"(?![\d,.]\d)(?![A-Za-wyz_])"
)
# Any number in an output or in code (looser: "n=4096", "1.2e-06", "p<0.001", "22.7M").
ANY_NUMBER = re.compile(
    r"(?<![\d.])(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.(?P<frac>\d+))?"
    r"(?:[eE](?P<exp>[-+−]?\d+))?(?P<scale>[kKMB](?![A-Za-z]))?(?P<pct>\s?%)?"
)
SCALES = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9}
APPROXIMATE = re.compile(r"(about|around|roughly|nearly|almost|some|over|under|~|≈)\s*$", re.I)
# A reference, not a measurement: "§4.4", "Table 5", "Figure 3.2", "Appendix A.2".
REFERENCE = re.compile(r"(§|\b(Section|Sections|Table|Figure|Fig\.|Eq\.|Equation|Appendix))\s*$")
RECAP = re.compile(r"^#+\s*Recap of Lesson (\d+)", re.M)


@dataclass(frozen=True)
class Number:
    text: str  # as written
    value: float
    tolerance: float  # half a unit in the last digit shown
    percent: bool


def _parse(match: re.Match, approximate: bool = False) -> tuple[float, float]:
    """(value, tolerance) of a matched number: the tolerance is half a unit of its last
    digit; for an approximate integer ("about 15,000") of its last non-zero digit."""
    whole = match.group("int").replace(",", "")
    frac = match.group("frac") or ""
    exp = int((match.group("exp") or "0").replace("−", "-"))
    scale = SCALES.get(match.group("scale") or "", 1.0)
    value = float(f"{whole}.{frac or 0}") * 10**exp * scale
    last_digit = -len(frac)
    if approximate and not frac:
        last_digit = len(whole) - len(whole.rstrip("0"))
    return value, 0.5 * 10 ** (last_digit + exp) * scale * (1 + 1e-9)


def prose_text(markdown: str) -> str:
    """The prose of a markdown cell: code, URLs, directive options and tags removed, and the
    statements of exercises (their numbers are the reader's inputs, not measurements)."""
    text = re.sub(r"^(:::+|```+)\{exercise\}.*?^\1\s*$", " ", markdown, flags=re.S | re.M)
    text = re.sub(r"^```(?!\{).*?^```", " ", text, flags=re.S | re.M)  # fenced code
    text = re.sub(r"^(```|:::).*$", " ", text, flags=re.M)  # directive fences
    text = re.sub(r"^:\w[\w-]*:.*$", " ", text, flags=re.M)  # directive options (:label:)
    text = re.sub(r"\{\w+\}`[^`]*`", " ", text)  # roles: {ref}`...`
    text = re.sub(r"`[^`]*`", " ", text)  # inline code
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link and image targets
    text = re.sub(r"<[^>]+>", " ", text)  # html tags
    text = re.sub(r"(?<=\d)(\{,\}|\\,)(?=\d)", ",", text)  # LaTeX's 30{,}522 and 30\,522
    return html.unescape(text)


def prose_numbers(markdown: str) -> list[Number]:
    """The numbers the audit checks in one markdown cell."""
    found = []
    text = prose_text(markdown)
    for m in PROSE_NUMBER.finditer(text):
        percent = bool(m.group("pct"))
        plain_int = not (m.group("frac") or m.group("exp") or m.group("scale") or percent)
        before = text[max(0, m.start() - 12): m.start()]
        if REFERENCE.search(before):
            continue
        approximate = bool(APPROXIMATE.search(before))
        value, tolerance = _parse(m, approximate)
        if plain_int and value < 100:
            continue  # structure, not measurement: "6 layers", "Lesson 3"
        if plain_int and "," not in m.group("int") and 1950 <= value <= 2030:
            continue  # a year
        found.append(Number(m.group(0).strip(), value, tolerance, percent))
    return found


def _numbers_in(text: str) -> list[tuple[float, bool]]:
    """(value, printed with %) for every number in a text."""
    return [(_parse(m)[0], bool(m.group("pct"))) for m in ANY_NUMBER.finditer(text)]


def output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        for mime in ("text/plain", "text/html", "text/markdown", "text/latex"):
            data = out.get("data", {}).get(mime)
            if data:
                parts.append(re.sub(r"<[^>]+>", " ", "".join(data)))
    return html.unescape("\n".join(parts))


def code_text(cell) -> str:
    """A code cell's source without its comments."""
    return "\n".join(line.split("#", 1)[0] for line in "".join(cell["source"]).splitlines())


def load(path: pathlib.Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def lesson_key(path: pathlib.Path) -> str:
    return path.name[:2]


def lesson_path(key: str) -> pathlib.Path:
    matches = sorted(LESSONS.glob(f"{key}-*.ipynb"))
    if not matches:
        raise ValueError(f"no lesson notebook lessons/{key}-*.ipynb")
    return matches[0]


def cited_facts() -> dict[str, list[dict]]:
    facts = yaml.safe_load(SOURCES.read_text()) or {}
    for key, entries in facts.items():
        for entry in entries or []:
            if not {"number", "source"} <= set(entry):
                raise ValueError(f"lessons/sources.yml, lesson {key}: each entry needs "
                                 f"'number' and 'source', got {entry!r}")
    return {str(k): v or [] for k, v in facts.items()}


def _normal(text: str) -> str:
    return re.sub(r"[\s\u00a0\u2009\u202f]", "", text).replace("\\%", "%")


def backed(number: Number, values: list[tuple[float, bool]]) -> bool:
    """True if a printed value equals ``number`` at the precision the prose shows."""
    for value, printed_percent in values:
        candidates = [value]
        if number.percent and not printed_percent:
            candidates.append(value * 100)  # a fraction printed as 0.812 backs "81.2 %"
        if any(abs(c - number.value) <= number.tolerance for c in candidates):
            return True
    return False


@dataclass
class Finding:
    lesson: str
    cell: int
    number: str
    context: str

    def __str__(self) -> str:
        return (f"Lesson {self.lesson}, cell {self.cell}: {self.number!r} is printed by no "
                f"output of the lesson, is no literal in its code and is not in "
                f"lessons/sources.yml — “…{self.context}…”")


def audit(path: pathlib.Path, facts: dict[str, list[dict]] | None = None):
    """(findings, checked, cited, stale): what fails, how many numbers were checked, how many
    of them are cited facts, and cited facts the prose no longer states."""
    facts = cited_facts() if facts is None else facts
    key = lesson_key(path)
    cells = load(path)
    printed = [v for c in cells if c["cell_type"] == "code" for v in _numbers_in(output_text(c))]
    literals = [v for c in cells if c["cell_type"] == "code" for v in _numbers_in(code_text(c))]
    cited = {_normal(str(e["number"])) for e in facts.get(key, [])}
    used: set[str] = set()
    findings, checked, n_cited = [], 0, 0
    recap_values: list[tuple[float, bool]] = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        recap = RECAP.search(source)
        if recap:
            earlier = lesson_path(f"{int(recap.group(1)):02d}")
            recap_values = [v for c in load(earlier) if c["cell_type"] == "code"
                            for v in _numbers_in(output_text(c))]
        elif source.lstrip().startswith("#"):
            recap_values = []  # a new section ends the recap
        text = prose_text(source)
        for number in prose_numbers(source):
            checked += 1
            if _normal(number.text) in cited:
                n_cited += 1
                used.add(_normal(number.text))
                continue
            if backed(number, printed) or backed(number, recap_values):
                continue
            if not number.percent and backed(number, literals):
                continue
            at = text.find(number.text)
            context = " ".join(text[max(0, at - 50): at + len(number.text) + 30].split())
            findings.append(Finding(key, index, number.text, context))
    stale = sorted(cited - used)
    return findings, checked, n_cited, stale


def main(argv: list[str]) -> int:
    paths = [pathlib.Path(a) for a in argv] or sorted(LESSONS.glob("[0-9][0-9]-*.ipynb"))
    failed = 0
    for path in paths:
        findings, checked, n_cited, stale = audit(path)
        print(f"{path.name}: {checked} numbers checked, {n_cited} cited facts, "
              f"{len(findings)} unbacked, {len(stale)} stale sources entries")
        for finding in findings:
            print(f"  {finding}")
        for entry in stale:
            print(f"  lessons/sources.yml lists {entry!r} for this lesson, but its prose no "
                  f"longer states it: remove the entry")
        failed += len(findings) + len(stale)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

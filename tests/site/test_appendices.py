"""The appendices: Appendix A's MiniLM row is computed from the shipped checkpoint, and the
cheat sheet's lesson links name real lessons."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPENDICES = ROOT / "appendices"

# The ten lessons of COURSE.md, by file name: appendix links may point at any of them, including
# lessons still being written (their links show as text until they are in _toc.yml).
LESSONS = {
    "01-two-ways-to-read-a-sequence",
    "02-tokenization-and-the-encoder-input",
    "03-bidirectional-self-attention",
    "04-the-encoder-block-and-stack",
    "05-masked-language-modeling",
    "06-beyond-mlm-pretraining-recipes",
    "07-fine-tuning-classify-tag-extract",
    "08-sentence-embeddings-and-retrieval",
    "09-efficient-and-long-context-encoders",
    "10-encoder-decoder-models",
}


def _table_rows(text: str, heading: str) -> dict[str, dict[str, str]]:
    """The rows of the first table under `## heading`, keyed by the first cell."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def _number(cell: str) -> float:
    """'22.7M' -> 22.7e6, '30,522 WordPiece' -> 30522, '1,024' -> 1024."""
    match = re.match(r"([\d,.]+)\s*([MK]?)", cell)
    assert match, f"no number in {cell!r}"
    value = float(match.group(1).replace(",", ""))
    return value * {"M": 1e6, "K": 1e3, "": 1}[match.group(2)]


def test_minilm_row_is_what_the_shipped_checkpoint_holds(minilm):
    tokenizer, model = minilm
    config = model.config
    text = (APPENDICES / "a-encoder-family.md").read_text(encoding="utf-8")
    size = _table_rows(text, "Size")["all-MiniLM-L6-v2"]
    design = _table_rows(text, "Design")["all-MiniLM-L6-v2"]

    assert _number(size["layers $L$"]) == config.n_layers == len(model.blocks)
    assert _number(size["width $d$"]) == config.d_model
    assert _number(size["heads $h$"]) == config.n_heads
    n_params = sum(p.numel() for p in model.parameters())
    assert _number(size["parameters"]) == round(n_params / 1e6, 1) * 1e6, n_params
    assert _number(size["vocabulary"]) == config.vocab_size == tokenizer.vocab_size
    assert "WordPiece" in size["vocabulary"]
    assert design["positions"] == f"learned absolute, {config.n_max}"
    assert model.embeddings.position.weight.shape[0] == config.n_max  # a learned table
    assert design["normalisation"] == f"{config.norm}-LN"


def test_appendix_a_covers_the_family_and_every_row_has_its_sources():
    text = (APPENDICES / "a-encoder-family.md").read_text(encoding="utf-8")
    family = ["BERT-base", "RoBERTa-large", "ALBERT-base", "DistilBERT", "ELECTRA-base",
              "DeBERTa-v3-base", "ModernBERT-base", "all-MiniLM-L6-v2"]  # fmt: skip
    for heading in ("Size", "Design"):
        rows = _table_rows(text, heading)
        assert list(rows) == family, heading
        section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
        for model in family:
            assert re.search(rf"^- \*\*{re.escape(model)}\*\*: \S", section, re.M), (heading, model)


PAGES = ["a-encoder-family.md", "b-encoder-vs-decoder.md", "c-acronyms.md"]


@pytest.mark.parametrize("page", PAGES)
def test_lesson_links_name_real_lessons(page):
    text = (APPENDICES / page).read_text(encoding="utf-8")
    targets = re.findall(r"\{doc\}`[^`<]*<\.\./lessons/([^>]+)>`", text)
    unknown = sorted(set(targets) - LESSONS)
    assert not unknown, f"{page} links to lessons that the course does not have: {unknown}"


def test_every_cheat_sheet_row_links_to_a_lesson():
    text = (APPENDICES / "b-encoder-vs-decoder.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| **")]
    assert len(rows) >= 6
    for row in rows:
        assert "{doc}`Lesson" in row.rsplit("|", 2)[-2], f"no lesson link in: {row[:60]}"

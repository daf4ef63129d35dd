"""The repository's own promises: the README's figure, the Colab URL, the layout."""

import base64
import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _figures(notebook: Path) -> list[bytes]:
    cells = json.loads(notebook.read_text())["cells"]
    return [
        base64.b64decode(output["data"]["image/png"])
        for cell in cells
        if cell["cell_type"] == "code"
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]


def test_readme_figure_is_lesson_3_figure_1():
    readme = (ROOT / "README.md").read_text()
    assert "](figures/causal-vs-full.png)" in readme
    figure_1 = _figures(ROOT / "lessons" / "03-bidirectional-self-attention.ipynb")[0]
    stored = (ROOT / "figures" / "causal-vs-full.png").read_bytes()
    assert stored == figure_1, "re-copy Figure 1 of Lesson 3 into figures/causal-vs-full.png"


def test_every_lesson_installs_from_the_repository_the_book_names():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        first_code = next(c for c in cells if c["cell_type"] == "code")
        source = "".join(first_code["source"])
        assert "google.colab" in source, f"{notebook.name}: first code cell is not the set-up cell"
        assert re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", source) == [url], notebook.name
        # on the website the set-up cell is left out, and the imports sit behind a toggle
        assert "remove-cell" in first_code["metadata"].get("tags", []), notebook.name
        imports = [c for c in cells if c["cell_type"] == "code"][1]
        assert "hide-input" in imports["metadata"].get("tags", []), notebook.name
        assert imports["metadata"]["mystnb"]["code_prompt_show"] == "Show the imports"


def test_notebooks_are_clean():
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        text = notebook.read_text()
        cells = json.loads(text)["cells"]
        code = [c for c in cells if c["cell_type"] == "code" and c["source"]]
        assert all(c["execution_count"] is not None for c in code), f"{notebook.name}: unexecuted"
        counts = [c["execution_count"] for c in code]
        assert counts == list(range(1, len(code) + 1)), f"{notebook.name}: not run top to bottom"
        for cell in code:
            for output in cell.get("outputs", []):
                assert output["output_type"] != "error", notebook.name
                if output.get("name") == "stderr":
                    assert "Warning" not in "".join(output["text"]), notebook.name
        assert not re.search(r"/(root|home|tmp|work)/", text), f"{notebook.name}: absolute path"


def test_requirements_are_ranges_that_admit_the_pinned_and_colab_versions():
    from packaging.requirements import Requirement

    lines = [
        line.split("#")[0].strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    requirements = {r.name: r.specifier for r in map(Requirement, lines)}
    assert not [line for line in lines if "==" in line], "requirements.txt must use ranges"
    # torch 2.13.0 is what CI installs; 2.8 / 2.9 are the kind of torch Colab ships.
    for version in ("2.13.0", "2.8.0", "2.9.1"):
        assert requirements["torch"].contains(version), version
    for name, version in (("numpy", "2.0.2"), ("matplotlib", "3.10.0")):
        assert requirements[name].contains(version), (name, version)


def test_every_lesson_figure_has_a_numbered_caption():
    """The website's alt text and caption of a figure come from the markdown cell after it."""
    image_types = ("image/png", "image/svg+xml", "image/jpeg")
    problems = []
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        number = 1
        for i, cell in enumerate(cells):
            draws = cell["cell_type"] == "code" and any(
                kind in output.get("data", {}) for output in cell.get("outputs", [])
                for kind in image_types
            )
            if not draws:
                continue
            after = next((c for c in cells[i + 1 :] if c["cell_type"] == "markdown"), None)
            text = "".join(after["source"]).lstrip() if after else ""
            if not text.startswith(f"**Figure {number}.**"):
                problems.append(
                    f"{notebook.name}, cell {i}: the figure it draws needs a caption: the next "
                    f"markdown cell must start with '**Figure {number}.**' (found {text[:40]!r})"
                )
            number += 1
    assert not problems, "\n".join(problems)

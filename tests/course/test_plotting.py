"""The style in one place (plotting.style = the figure key): rcParams, roles, the key as a figure
and as a table, the ``figures`` command, the same bytes twice, and no colour written anywhere
else (the library, the lessons' code). The figures by kind: tests/course/test_plotting_*.py."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure

from encoderlab.attention import scaled_dot_product_attention
from encoderlab.course import plotting

matplotlib.use("Agg")  # headless: before any figure is drawn

ROOT = Path(__file__).resolve().parents[2]
STYLE = ROOT / "lib" / "encoderlab" / "course" / "plotting" / "style.py"
HEX = re.compile(r"#[0-9a-fA-F]{6}\b")
NAMED = {"white", "black", "grey", "gray", "lightgrey", "lightgray", "darkgrey", "darkgray",
         "silver", "red", "blue", "green", "orange", "purple", "yellow"}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def real_weights():
    """Attention weights of one head from the library's attention (n = 6)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 6, 8, generator=g) for _ in range(3))
    return scaled_dot_product_attention(q, k, v)[1][0, 0]  # (6, 6)


# --- The style ----------------------------------------------------------------------------------


def test_use_style_is_idempotent():
    plotting.use_style()
    first = dict(matplotlib.rcParams)
    plotting.use_style()
    assert dict(matplotlib.rcParams) == first
    assert matplotlib.rcParams["axes.spines.top"] is False
    assert matplotlib.rcParams["savefig.bbox"] == "tight"
    assert matplotlib.rcParams["svg.hashsalt"] == "encoderlab"
    assert matplotlib.rcParams["font.size"] == plotting.FONT_SIZES["label"]


def test_roles_follow_the_series_name():
    assert plotting.role_of("causal, next-token loss") == "decoder"
    assert plotting.role_of("bidirectional, next-token loss") == "encoder"
    assert plotting.role_of("encoder-decoder") == "cross"
    assert plotting.role_of("ideal 2T/(T+1)") == "theory"
    assert plotting.line_style("causal")["linestyle"] == "--"
    assert plotting.line_style("encoder")["linestyle"] == "-"
    assert plotting.line_style("ideal")["linestyle"] == ":"


def test_every_named_colour_is_a_colour_and_every_role_has_a_meaning():
    assert set(plotting.MEANINGS) == set(plotting.COLORS)
    colours = [*plotting.COLORS.values(), *plotting.SHADES.values(), *plotting.EXTRA_COLORS,
               *plotting.SEGMENT_COLORS.values(), *plotting.ENTITY_COLORS.values(),
               *(c for c, _ in plotting.CORRUPTION_COLORS.values()), *plotting.RECALL_COLORS]
    assert all(matplotlib.colors.is_color_like(c) for c in colours)
    # the colours with a meaning for the reader are in the key
    key = plotting.key_markdown()
    assert all(c in key for c in plotting.COLORS.values())
    assert plotting.SHADES["baseline"] in key


# --- No colour outside the style ----------------------------------------------------------------


def test_no_colour_literal_in_the_library_outside_the_style():
    found = []
    for path in sorted((ROOT / "lib").rglob("*.py")):
        if path == STYLE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if HEX.search(node.value) or node.value.lower() in NAMED:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "colours belong in plotting/style.py, by name:\n" + "\n".join(found)


def test_no_hex_colour_in_the_lessons_code_cells():
    found = []
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "code":
                found += [f"{notebook.name} {cell.get('id')}: {m}"
                          for m in HEX.findall("".join(cell["source"]))]
    assert not found, "use plotting.COLORS / SHADES / EXTRA_COLORS:\n" + "\n".join(found)


# --- The key, the command, the same bytes twice -------------------------------------------------


def test_figure_key_writes_a_small_png(tmp_path):
    path = tmp_path / "key.png"
    fig = plotting.figure_key(path)
    assert isinstance(fig, Figure)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size < 200_000
    assert len(plotting.KEY) > len(plotting.COLORS)
    assert plotting.key_markdown().startswith("| mark | meaning |")


def test_module_main_writes_to_a_given_path(tmp_path, capsys):
    out = tmp_path / "figure-key.png"
    assert plotting.main([str(out)]) == 0
    assert out.exists() and "wrote" in capsys.readouterr().out


def test_module_main_explains_itself(capsys):
    with pytest.raises(SystemExit) as stop:
        plotting.main(["--help"])
    assert stop.value.code == 0
    assert "python -m encoderlab figures" in capsys.readouterr().out


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    for suffix in (".png", ".svg"):  # a rerun of a notebook cell draws a fresh figure
        first, second = tmp_path / f"first{suffix}", tmp_path / f"second{suffix}"
        plotting.save_figure(plotting.attention_maps([real_weights()], ["full"]), first)
        plotting.save_figure(plotting.attention_maps([real_weights()], ["full"]), second)
        assert first.read_bytes() == second.read_bytes()
        assert b"Date" not in first.read_bytes()


def test_figure_key_page_quotes_the_key_of_the_code():
    page = (ROOT / "figure-key.md").read_text()
    assert plotting.key_markdown() in page, "figure-key.md is out of step: paste key_markdown()"


def test_the_package_re_exports_every_public_figure():
    import inspect

    from encoderlab.course.plotting import bars, curves, heatmaps, key, matrices, style, tokens

    for module in (style, matrices, heatmaps, tokens, curves, bars, key):
        public = {name for name, value in vars(module).items()
                  if inspect.isfunction(value) and value.__module__ == module.__name__
                  and not name.startswith("_")}
        assert public <= set(plotting.__all__), module.__name__
        assert all(getattr(plotting, name) is getattr(module, name) for name in public)
    assert plotting.save_figure and len(set(plotting.__all__)) == len(plotting.__all__)

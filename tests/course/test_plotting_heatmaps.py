"""Matrices of scores (plotting.heatmaps): similarity, layer x head, confusion, retrieval."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes

from encoderlab.course import plotting

matplotlib.use("Agg")  # headless: before any figure is drawn


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def cosine(x: torch.Tensor) -> torch.Tensor:
    x = torch.nn.functional.normalize(x, dim=-1)
    return x @ x.T


# --- similarity_heatmap (Lesson 1) and similarity_map (Lesson 2) ----------------------------------


def test_similarity_heatmap_writes_values_and_separates_groups():
    s = torch.tensor([[1.0, 0.9, 0.2], [0.9, 1.0, 0.3], [0.2, 0.3, 1.0]])
    ax = plotting.similarity_heatmap(s, labels=["a", "b", "c"], groups=["x", "x", "y"])
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("1.00") == 3 and "0.90" in texts and "0.20" in texts
    assert "x" in texts and "y" in texts
    image = ax.images[0]
    assert image.get_clim() == (pytest.approx(0.2), 1.0)  # vmin: smallest off-diagonal value
    assert image.get_cmap().name == "encoderlab_similarity"
    assert len(ax.lines) == 2  # one horizontal and one vertical line between the groups


def test_similarity_heatmap_errors():
    with pytest.raises(ValueError, match="square"):
        plotting.similarity_heatmap(torch.ones(2, 3))
    with pytest.raises(ValueError, match="labels must have one entry per row"):
        plotting.similarity_heatmap(torch.eye(2), labels=["a"])


def test_similarity_map_of_a_large_matrix_has_a_diverging_scale_and_numbered_axes():
    c = cosine(torch.randn(64, 8, generator=torch.Generator().manual_seed(0)))
    ax = plotting.similarity_map(c, ticks=[0, 32, 63], title="64 positions")
    assert isinstance(ax, Axes)
    image = ax.images[0]
    assert image.get_cmap() is plotting.COSINE_CMAP and image.get_clim() == (-1.0, 1.0)
    assert np.allclose(image.get_array(), c.numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "32", "63"]
    assert ax.get_xlabel() == "position j" and ax.get_ylabel() == "position i"
    assert len(ax.figure.axes) == 2  # the colorbar
    assert ax.figure.axes[1].get_ylabel() == "cosine similarity"


def test_similarity_map_leaves_lesson_1s_colormap_alone():
    assert plotting.COSINE_CMAP is not plotting.SIMILARITY_CMAP
    assert plotting.SIMILARITY_CMAP.name == "encoderlab_similarity"


def test_similarity_map_labels_small_matrices_and_checks_them():
    c = cosine(torch.randn(3, 4))
    ax = plotting.similarity_map(c, labels=["a", "b", "c"], colorbar=False, axis_name="text")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.get_xlabel() == "text j"
    rect = plotting.similarity_map(torch.rand(2, 3), labels=(["q1", "q2"], ["d1", "d2", "d3"]))
    assert [t.get_text() for t in rect.get_xticklabels()] == ["d1", "d2", "d3"]
    with pytest.raises(ValueError, match="labels must name 3 rows and 3 columns, got 2"):
        plotting.similarity_map(c, labels=["a", "b"])
    with pytest.raises(ValueError, match="vmin < vmax"):
        plotting.similarity_map(c, vmin=1.0, vmax=1.0)
    with pytest.raises(ValueError, match="one batch element and one head"):
        plotting.similarity_map(torch.rand(2, 3, 3))


# --- layer_head_map (Lesson 4), confusion_heatmap (Lesson 7), retrieval_heatmap (Lesson 8) --------


def test_layer_head_map_writes_every_value():
    values = torch.rand(3, 4)
    ax = plotting.layer_head_map(values, vmax=1.0, title="on [CLS]")
    assert isinstance(ax, Axes)
    texts = [t.get_text() for t in ax.texts if t.get_gid() == "value"]
    assert len(texts) == 12 and texts[0] == f"{float(values[0, 0]):.2f}"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "3"]
    assert ax.images[0].get_clim() == (0.0, 1.0)
    with pytest.raises(ValueError, match=r"\(layers, heads\) table"):
        plotting.layer_head_map(torch.rand(2, 3, 4))


def test_confusion_heatmap_writes_the_counts():
    ax = plotting.confusion_heatmap(torch.tensor([[3, 1], [0, 4]]), ["x", "y"])
    assert [t.get_text() for t in ax.texts if t.get_gid() == "count"] == ["3", "1", "0", "4"]
    assert ax.images[0].get_cmap() is plotting.CONFUSION_CMAP
    with pytest.raises(ValueError, match="square"):
        plotting.confusion_heatmap(torch.zeros(2, 3), ["x", "y"])


def test_retrieval_heatmap():
    scores = torch.tensor([[0.9, 0.1, 0.3], [0.2, 0.4, 0.8]])
    ax = plotting.retrieval_heatmap(scores, ["q0", "q1"], ["a", "b", "c"], [{0}, {1, 2}])
    assert sum(p.get_gid() == "answer" for p in ax.patches) == 3
    dots = [c for c in ax.collections if c.get_gid() == "top1"][0]
    assert dots.get_offsets().tolist() == [[0.0, 0.0], [2.0, 1.0]]
    with pytest.raises(ValueError, match="need as many labels"):
        plotting.retrieval_heatmap(scores, ["q0"], ["a", "b", "c"])
    with pytest.raises(ValueError, match="is not a column"):
        plotting.retrieval_heatmap(scores, ["q0", "q1"], ["a", "b", "c"], [{0}, {5}])


def test_retrieval_heatmap_uses_the_cosine_scale():
    scores = torch.tensor([[0.6, -0.2], [0.1, 0.3]])
    ax = plotting.retrieval_heatmap(scores, ["q0", "q1"], ["a", "b"])
    image = ax.images[0]
    assert image.get_clim() == (-1.0, 1.0) and image.get_cmap().name == plotting.COSINE_CMAP.name
    with pytest.raises(ValueError, match="vmax > 0"):
        plotting.retrieval_heatmap(scores, ["q0", "q1"], ["a", "b"], vmax=0)

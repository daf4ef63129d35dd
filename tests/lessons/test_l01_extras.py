"""Lesson 1's additions: objective_view, the wirings diagram, the heatmap, two checkers."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from encoderlab import masks  # noqa: E402
from encoderlab.course import plotting  # noqa: E402
from encoderlab.course.checks import (  # noqa: E402
    CheckFailed,
    check_cosine_similarity,
    check_objective_labels,
)
from encoderlab.objectives import IGNORE_INDEX, objective_view  # noqa: E402

IDS = torch.tensor([101, 7, 8, 9, 10, 102])  # [CLS] a b c d [SEP]
MASK_ID = 103


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- objective_view ----------------------------------------------------------------------------


def test_next_token_view():
    view = objective_view(IDS, "next-token")
    assert view.labels.tolist() == [7, 8, 9, 10, 102, IGNORE_INDEX]
    assert view.label_at.tolist() == [1, 2, 3, 4, 5, -1]
    assert view.carries_loss.tolist() == [True] * 5 + [False]
    assert torch.equal(view.sees, masks.causal(6))
    assert torch.equal(view.inputs, IDS)
    assert not view.leaks().any()


def test_masked_view_hides_the_answers_and_scores_only_them():
    view = objective_view(IDS, "masked", masked_positions=[2, 4], mask_token_id=MASK_ID)
    assert view.inputs.tolist() == [101, 7, MASK_ID, 9, MASK_ID, 102]
    assert view.labels.tolist() == [IGNORE_INDEX, IGNORE_INDEX, 8, IGNORE_INDEX, 10, IGNORE_INDEX]
    assert view.carries_loss.sum() == 2
    assert view.sees.all()  # every position sees the whole corrupted sequence
    assert not view.leaks().any()  # the answers are visible positions, but hold [MASK]
    assert torch.equal(IDS, torch.tensor([101, 7, 8, 9, 10, 102]))  # the input is not modified


def test_next_token_with_full_attention_leaks_every_label():
    view = objective_view(IDS, "next-token", mask=masks.bidirectional(6))
    assert view.leaks().tolist() == [True] * 5 + [False]


def test_masked_objective_without_hiding_would_leak():
    # "masking" a token by replacing it with itself leaves the answer in the input
    view = objective_view(IDS, "masked", masked_positions=[3], mask_token_id=9)
    assert view.leaks().tolist() == [False, False, False, True, False, False]


def test_table_lists_every_position():
    names = {101: "[CLS]", 102: "[SEP]", 103: "[MASK]", 7: "a", 8: "b", 9: "c", 10: "d"}
    view = objective_view(IDS, "masked", [2], MASK_ID)
    table = view.table(lambda ids: [names[i] for i in ids]).splitlines()
    assert len(table) == 1 + 6
    assert table[3].split() == ["2", "[MASK]", "b", "positions", "0..5"]
    assert "(no loss)" in table[1]
    next_token = objective_view(IDS, "next-token").table(lambda ids: [names[i] for i in ids])
    assert next_token.splitlines()[2].split() == ["1", "a", "b", "positions", "0..1"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_ids": IDS, "objective": "mlm"}, "objective must be one of"),
        ({"input_ids": IDS[None], "objective": "next-token"}, r"shape \(n,\)"),
        ({"input_ids": IDS.float(), "objective": "next-token"}, "integer token ids"),
        ({"input_ids": IDS[:1], "objective": "next-token"}, "at least 2 tokens"),
        ({"input_ids": IDS, "objective": "next-token", "masked_positions": [1]},
         "next-token hides nothing"),
        ({"input_ids": IDS, "objective": "masked", "masked_positions": [1]}, "needs mask_token_id"),
        ({"input_ids": IDS, "objective": "masked", "masked_positions": [6], "mask_token_id": 1},
         r"position in 0\.\.5"),
        ({"input_ids": IDS, "objective": "masked", "mask_token_id": 1}, "at least one position"),
        ({"input_ids": IDS, "objective": "next-token", "mask": masks.causal(5)},
         r"boolean \(n, n\) = \(6, 6\)"),
        ({"input_ids": IDS, "objective": "next-token", "mask": masks.causal(6).float()},
         "boolean"),
    ],
)
def test_objective_view_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        objective_view(**kwargs)


# --- plotting.wirings_diagram ------------------------------------------------------------------


def _arrows(ax, gid):
    return [p for p in ax.patches if p.get_gid() == gid]


def test_wirings_diagram_draws_each_family_in_the_key_style():
    n, m = 4, 3
    ax = plotting.wirings_diagram(n_tokens=n, n_targets=m)
    encoder, decoder, cross = (_arrows(ax, g) for g in ("encoder-self", "decoder-self", "cross"))
    assert len(encoder) == 2 * n * n  # encoder-only, and the encoder of encoder–decoder
    assert len(decoder) == n * (n + 1) // 2 + m * (m + 1) // 2  # j <= i only
    assert len(cross) == n * m  # every decoder position reads every encoder output
    for arrows, role in ((encoder, "encoder"), (decoder, "decoder"), (cross, "cross")):
        assert {to_hex(a.get_edgecolor()) for a in arrows} == {plotting.COLORS[role].lower()}
        assert {a.get_linestyle() for a in arrows} == {plotting.LINESTYLES[role]}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("bidirectional" in t for t in legend) and any("cross" in t for t in legend)
    ax.figure.canvas.draw()  # renders headless without error


def test_wirings_diagram_draws_on_a_given_axes_and_checks_sizes():
    fig, ax = plt.subplots()
    assert plotting.wirings_diagram(ax=ax, n_tokens=2, n_targets=2) is ax
    assert len(_arrows(ax, "cross")) == 4
    with pytest.raises(ValueError, match="n_tokens must be an int from 1 to 8"):
        plotting.wirings_diagram(n_tokens=0)


# --- plotting.similarity_heatmap --------------------------------------------------------------


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


# --- checks.check_cosine_similarity ------------------------------------------------------------


def cosine_reference(x):
    unit = x / x.norm(dim=1, keepdim=True)
    return unit @ unit.T


def cosine_numpy(x):
    import numpy as np

    a = x.numpy()
    unit = a / np.linalg.norm(a, axis=1, keepdims=True)
    return unit @ unit.T  # a numpy array is accepted too


@pytest.mark.parametrize("fn", [cosine_reference, cosine_numpy])
def test_cosine_checker_accepts_correct_answers(fn, capsys):
    assert check_cosine_similarity(fn)
    assert "✓ cosine similarity" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda x: x @ x.T, "raw dot products"),
        (lambda x: (x / x.norm(dim=0, keepdim=True)) @ (x / x.norm(dim=0, keepdim=True)).T,
         "wrong axis"),
        (lambda x: (x / x.norm(dim=1, keepdim=True)) @ x.T, "only one side"),
        (lambda x: x @ x.T / x.norm() ** 2, "norm of the whole matrix"),
        (lambda x: torch.cdist(x, x), "Euclidean distances"),
        (lambda x: 1 - cosine_reference(x), "cosine distance 1 - cos"),
        (lambda x: (x.T / x.T.norm(dim=1, keepdim=True)) @ (x.T / x.T.norm(dim=1, keepdim=True)).T,
         r"pair of features \(columns\)"),
        (lambda x: cosine_reference(x)[:, :1], r"should be \(m, m\)"),
        (lambda x: cosine_reference(x) * 0.5, "differs from cos"),
        (lambda x: x.no_such_method(), "raised AttributeError"),
    ],
)
def test_cosine_checker_names_the_mistake(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_cosine_similarity(fn)


# --- checks.check_objective_labels -------------------------------------------------------------


def labels_reference(input_ids, objective, masked_positions):
    labels = torch.full_like(input_ids, -100)
    if objective == "next-token":
        labels[:-1] = input_ids[1:]
    else:
        where = list(masked_positions)
        labels[where] = input_ids[where]
    return labels


def labels_as_list(input_ids, objective, masked_positions):
    return labels_reference(input_ids, objective, masked_positions).tolist()


@pytest.mark.parametrize("fn", [labels_reference, labels_as_list])
def test_labels_checker_accepts_correct_answers(fn, capsys):
    assert check_objective_labels(fn)
    assert "✓ objective labels" in capsys.readouterr().out


def _next_token_only(wrong):
    def fn(input_ids, objective, masked_positions):
        if objective == "next-token":
            return wrong(input_ids)
        return labels_reference(input_ids, objective, masked_positions)
    return fn


def _masked_only(wrong):
    def fn(input_ids, objective, masked_positions):
        if objective == "masked":
            return wrong(input_ids, list(masked_positions))
        return labels_reference(input_ids, objective, masked_positions)
    return fn


def _own_token_from_1(ids):
    out = ids.clone()
    out[0] = -100
    return out


def _previous_token(ids):
    out = torch.full_like(ids, -100)
    out[1:] = ids[:-1]
    return out


def _unmasked_positions(ids, masked):
    out = ids.clone()
    out[masked] = -100
    return out


def _masked_next(ids, masked):
    out = torch.full_like(ids, -100)
    for p in masked:
        if p + 1 < len(ids):
            out[p] = ids[p + 1]
    return out


def _zero_fill(input_ids, objective, masked_positions):
    labels = labels_reference(input_ids, objective, masked_positions)
    return labels.masked_fill(labels == -100, 0)


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_next_token_only(lambda ids: ids.clone()), "labels are the inputs themselves"),
        (_next_token_only(_own_token_from_1), "shift inside the loss"),
        (_next_token_only(_previous_token), "shifted the wrong way"),
        (_next_token_only(lambda ids: torch.roll(ids, -1)), "torch.roll wraps around"),
        (_masked_only(lambda ids, masked: ids.clone()), "cover every position"),
        (_masked_only(_unmasked_positions), "NOT masked"),
        (_masked_only(_masked_next), "shifted by one"),
        (_zero_fill, "mark the other positions with 0"),
        (lambda ids, objective, masked: ids[:-1], r"shape \(n,\)"),
        (lambda ids, objective, masked: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_labels_checker_names_the_mistake(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_objective_labels(fn)


def test_table_lists_scattered_visible_positions():
    sees = masks.causal(6) & ~torch.eye(6, dtype=torch.bool).roll(-1, dims=1)  # hide j = i - 1
    view = objective_view(IDS, "next-token", mask=sees)
    row = view.table(lambda ids: [str(i) for i in ids]).splitlines()[1 + 2]
    assert row.split()[-3:] == ["positions", "[0,", "2]"]


# --- probes.group_separation and probes.sentence_vectors (Lesson 1, §4) ------------------------


def test_group_separation_on_a_hand_made_matrix():
    from encoderlab.lessons.l01_probes import group_separation

    s = torch.tensor([
        [1.0, 0.9, 0.5, 0.6],
        [0.9, 1.0, 0.4, 0.7],
        [0.5, 0.4, 1.0, 0.8],
        [0.6, 0.7, 0.8, 1.0],
    ])
    out = group_separation(s, ["a", "a", "b", "b"])
    assert out["within"] == pytest.approx(0.85)  # (0.9 + 0.8) / 2
    assert out["cross"] == pytest.approx(0.55)  # (0.5 + 0.6 + 0.4 + 0.7) / 4
    assert out["gap"] == pytest.approx(0.30)
    assert out["scaled_gap"] == pytest.approx(0.30 / 0.45)
    assert (out["nearest"], out["n"]) == (4, 4)
    # leaving out the pair (0, 1): row 0's nearest kept row is then row 3, of the other group
    ignore = torch.zeros(4, 4, dtype=torch.bool)
    ignore[0, 1] = ignore[1, 0] = True
    out = group_separation(s, ["a", "a", "b", "b"], ignore=ignore)
    assert out["within"] == pytest.approx(0.8)
    assert (out["nearest"], out["n"]) == (2, 4)


def test_scaled_gap_ignores_a_common_drift():
    from encoderlab.lessons.l01_probes import group_separation

    s = torch.tensor([[1.0, 0.8, 0.2], [0.8, 1.0, 0.4], [0.2, 0.4, 1.0]])
    drifted = 0.5 + 0.5 * s  # every similarity pulled halfway to 1: the raw gap halves
    a, b = (group_separation(m, ["x", "x", "y"]) for m in (s, drifted))
    assert b["gap"] == pytest.approx(a["gap"] / 2)
    assert b["scaled_gap"] == pytest.approx(a["scaled_gap"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.ones(2, 3), ["a", "b"]), "square"),
        ((torch.eye(3), ["a", "b"]), "one group per row"),
        ((torch.eye(3), ["a", "b", "c"]), "at least one same-group pair"),
        ((torch.eye(2), ["a", "a"]), "different-group pair"),
        ((torch.eye(3), ["a", "a", "b"], torch.ones(3, 3)), "boolean"),
        ((torch.eye(3), ["a", "a", "b"], torch.ones(3, 3, dtype=torch.bool)), "ignore fewer"),
    ],
)
def test_group_separation_errors(args, message):
    from encoderlab.lessons.l01_probes import group_separation

    with pytest.raises(ValueError, match=message):
        group_separation(*args)


def test_sentence_vectors_are_the_mean_over_all_tokens(minilm):
    from encoderlab.lessons.l01_probes import sentence_vectors

    tokenizer, model = minilm
    texts = ["the bank of the river", "a loan from the bank"]
    every = sentence_vectors(tokenizer, model, texts, layer=None)
    assert every.shape == (model.config.n_layers + 1, 2, model.config.d_model)
    for k, text in enumerate(texts):
        with torch.no_grad():
            out = model(**tokenizer([text], return_tensors="pt"))
        expected = out.last_hidden_state[0].mean(dim=0)  # [CLS] and [SEP] included
        torch.testing.assert_close(every[-1, k], expected)
    torch.testing.assert_close(sentence_vectors(tokenizer, model, texts), every[-1])
    torch.testing.assert_close(sentence_vectors(tokenizer, model, texts[0], layer=0), every[0, :1])


def test_sentence_vectors_errors(minilm):
    from encoderlab.lessons.l01_probes import sentence_vectors

    tokenizer, model = minilm
    with pytest.raises(ValueError, match="non-empty list of strings"):
        sentence_vectors(tokenizer, model, [])
    with pytest.raises(ValueError, match="layer must be an int from -7 to 6"):
        sentence_vectors(tokenizer, model, ["a text"], layer=7)

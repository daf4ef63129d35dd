"""Lesson 1's additions: objective_view, the wirings diagram, the heatmap."""

import pytest
import torch

from encoderlab import masks
from encoderlab.objectives import IGNORE_INDEX, objective_view

IDS = torch.tensor([101, 7, 8, 9, 10, 102])  # [CLS] a b c d [SEP]
MASK_ID = 103



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

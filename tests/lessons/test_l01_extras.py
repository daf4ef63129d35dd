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


# --- probes.crossed_effects (Lesson 1, §4) -----------------------------------------------------


def _design(seed=0):
    """16 sentences, 4 per (sense, topic) cell, with a made-up similarity matrix."""
    senses = ["r"] * 4 + ["l"] * 4 + ["l"] * 4 + ["r"] * 4
    topics = ["W"] * 4 + ["M"] * 4 + ["W"] * 4 + ["M"] * 4
    return senses, topics


def test_crossed_effects_values_by_hand():
    from encoderlab.lessons.l01_probes import crossed_effects

    senses, topics = _design()
    m = len(senses)
    # similarity = 0.5 + 0.1 * same sense + 0.04 * same topic: effects 0.1 and 0.04 exactly
    s = torch.tensor([[0.5 + 0.1 * (senses[i] == senses[j]) + 0.04 * (topics[i] == topics[j])
                       for j in range(m)] for i in range(m)], dtype=torch.double)
    out = crossed_effects(s, senses, topics, draws=50, seed=1)
    assert out["sense"][0] == pytest.approx(0.1)
    assert out["topic"][0] == pytest.approx(0.04)
    assert out["sense - topic"][0] == pytest.approx(0.06)
    # no noise: every resampling gives the same effects, so each interval is one point
    for value, low, high in out.values():
        assert low == pytest.approx(value) and high == pytest.approx(value)


def test_crossed_effects_interval_covers_noise_and_is_seeded():
    from encoderlab.lessons.l01_probes import crossed_effects

    senses, topics = _design()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 8, generator=g)
    s = torch.nn.functional.cosine_similarity(x[:, None], x[None, :], dim=-1)  # no structure
    out = crossed_effects(s, senses, topics, draws=300, seed=3)
    for _value, low, high in out.values():
        assert low < high  # noise gives a spread
    assert out == crossed_effects(s, senses, topics, draws=300, seed=3)
    wide = crossed_effects(s, senses, topics, draws=300, level=0.99, seed=3)["sense"]
    assert wide[2] - wide[1] >= out["sense"][2] - out["sense"][1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"draws": 0}, "draws must be a positive int"), ({"level": 1.5}, "0 < level < 1")],
)
def test_crossed_effects_errors(kwargs, message):
    from encoderlab.lessons.l01_probes import crossed_effects

    senses, topics = _design()
    with pytest.raises(ValueError, match=message):
        crossed_effects(torch.eye(16), senses, topics, **kwargs)
    with pytest.raises(ValueError, match="one topic per row"):
        crossed_effects(torch.eye(16), senses, topics[:-1])

"""Lesson 7, §6: LoRA adapters on the attention projections, and the l7-lora recipe."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.lessons import l07_lora as lora


def tiny_encoder() -> EncoderModel:
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=3, d_ff=32, n_max=32)
    return EncoderModel(config).eval()


def test_lora_linear_starts_as_the_frozen_layer_and_counts_r_times_in_plus_out():
    torch.manual_seed(0)
    base = nn.Linear(12, 8)
    layer = lora.LoRALinear(base, r=3, alpha=6.0)
    x = torch.randn(5, 12)
    assert torch.equal(layer(x), base(x))  # B = 0: the pretrained function at step 0
    trainable = [p for p in layer.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == 3 * 12 + 8 * 3  # A (3, 12) and B (8, 3)
    assert not base.weight.requires_grad and not base.bias.requires_grad


def test_lora_update_is_low_rank_scaled_and_merges():
    torch.manual_seed(1)
    base = nn.Linear(10, 10)
    layer = lora.LoRALinear(base, r=2, alpha=4.0)
    with torch.no_grad():
        layer.B.normal_()
    x = torch.randn(4, 10)
    delta = layer(x) - base(x)  # (4, 10): x (alpha / r) (B A)^T
    by_hand = 2.0 * x @ (layer.B @ layer.A).T
    assert torch.allclose(delta, by_hand, atol=1e-5)
    assert torch.linalg.matrix_rank(layer.B @ layer.A) == 2
    assert torch.allclose(layer.merged()(x), layer(x), atol=1e-5)


@pytest.mark.parametrize("bad", [{"r": 0}, {"r": 11}, {"r": 2.0}, {"alpha": 0.0}])
def test_lora_linear_rejects_bad_settings(bad):
    settings = {"r": 2, "alpha": 1.0, **bad}
    with pytest.raises(ValueError):
        lora.LoRALinear(nn.Linear(10, 10), **settings)


def test_add_lora_wraps_every_block_and_keeps_the_output():
    encoder = tiny_encoder()
    ids = torch.randint(5, 50, (2, 7))
    before = encoder(ids).last_hidden_state
    lora.add_lora(encoder, r=2, alpha=2.0, targets=("w_q", "w_v"))
    after = encoder(ids).last_hidden_state
    assert torch.allclose(before, after, atol=1e-6)
    trainable = sum(p.numel() for p in encoder.parameters() if p.requires_grad)
    assert trainable == 3 * 2 * (2 * 16 + 16 * 2)  # 3 blocks x (W_Q, W_V) x (A + B)
    with pytest.raises(ValueError):
        lora.add_lora(tiny_encoder(), r=2, alpha=2.0, targets=("w_x",))


def test_top_classifier_reads_the_lower_blocks_output_like_the_whole_encoder():
    encoder = tiny_encoder()
    ids = torch.randint(5, 50, (3, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 5 + [0]])
    out = encoder(ids, attention_mask=mask)
    model = lora.top_classifier(encoder, 4, r=1, alpha=2.0, top_blocks=2).eval()
    from_top = lora.top_logits(model, out.hidden_states[-3], mask)  # H^(L-2)
    v = (out.last_hidden_state * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    assert torch.allclose(from_top, model["classifier"](v), atol=1e-5)  # B = 0: unchanged
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == 2 * 2 * (16 + 16) + 16 * 4 + 4  # adapters of rank 1, and the head
    with pytest.raises(ValueError):
        lora.top_classifier(encoder, 4, r=1, alpha=2.0, top_blocks=4)


def test_the_recipe_is_registered_and_its_artefact_holds_every_rank():
    from encoderlab.course.train import recipes
    from encoderlab.training import load_artefact

    assert "l7-lora" in recipes()
    tensors, meta = load_artefact("l7-lora")
    for r in lora.LORA["ranks"]:
        assert int(tensors[f"r{r}.trainable"]) == 2 * 2 * r * (384 + 384) + 384 * 4 + 4
        for seed in lora.LORA["seeds"]:
            assert tensors[f"r{r}.seed{seed}.test_logits"].shape == (200, 4)
    assert meta["top_blocks"] == str(lora.LORA["top_blocks"])

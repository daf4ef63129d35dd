"""The library encoder: equal to the reference BertModel on the real weights, and its errors."""

import math

import pytest
import torch

from encoderlab import masks
from encoderlab.encoder import EncoderConfig, EncoderModel, count_parameters

SENTENCES = [
    "The bank raised its interest rates again.",
    "We sat on the bank of the river.",
    "It was bored, so the dog chased the ball across the garden all afternoon.",
    "Short.",
]


def tiny(norm="post", **kw):
    return EncoderConfig(
        vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=16, norm=norm, **kw
    )


@pytest.fixture(scope="module")
def padded_batch(minilm):
    tokenizer, _ = minilm
    return tokenizer(SENTENCES, padding=True, return_tensors="pt")


def test_every_hidden_state_and_attention_equals_the_reference(
    minilm, reference_bert, padded_batch
):
    _, model = minilm
    batch = padded_batch
    assert batch["attention_mask"].sum(1).unique().numel() == len(SENTENCES)  # all lengths differ
    with torch.no_grad():
        ours = model(**batch, output_attentions=True)
        ref = reference_bert(**batch, output_attentions=True, output_hidden_states=True)
    assert len(ours.hidden_states) == model.config.n_layers + 1 == len(ref.hidden_states)
    real = batch["attention_mask"].bool()  # (b, n): compare real tokens' vectors
    for layer, (h, h_ref) in enumerate(zip(ours.hidden_states, ref.hidden_states)):
        diff = (h - h_ref)[real].abs().max().item()
        assert diff <= 1e-5, f"hidden state {layer} differs by {diff:.2e}"
    for layer, (a, a_ref) in enumerate(zip(ours.attentions, ref.attentions)):
        assert a.shape == a_ref.shape == (4, 12, real.shape[1], real.shape[1])
        diff = (a - a_ref).abs().max().item()
        assert diff <= 1e-5, f"attention of layer {layer} differs by {diff:.2e}"
    assert torch.allclose(ours.pooler_output, ref.pooler_output, atol=1e-5)


@pytest.mark.parametrize("padded", [True, False])
def test_the_fused_attention_path_equals_the_reference_too(
    minilm, reference_bert, padded_batch, padded
):
    """Without weights asked for, every layer runs torch's fused SDPA: still within 1e-5."""
    _, model = minilm
    batch = padded_batch if padded else {key: t[:1] for key, t in padded_batch.items()}
    if not padded:  # the first sentence alone, its padding cut off: no mask at all
        n = int(batch["attention_mask"].sum())
        batch = {key: t[:, :n] for key, t in batch.items()}
    with torch.no_grad():
        ours = model(**batch)
        ref = reference_bert(**batch, output_hidden_states=True)
    real = batch["attention_mask"].bool()  # (b, n)
    for layer, (h, h_ref) in enumerate(zip(ours.hidden_states, ref.hidden_states)):
        diff = (h - h_ref)[real].abs().max().item()
        assert diff <= 1e-5, f"hidden state {layer} differs by {diff:.2e}"


def test_real_token_outputs_do_not_depend_on_padding(minilm):
    tokenizer, model = minilm
    alone = tokenizer([SENTENCES[3]], return_tensors="pt")
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    n = alone["input_ids"].shape[1]
    with torch.no_grad():
        short = model(**alone).last_hidden_state[0]
        padded = model(**batch).last_hidden_state[3, :n]
        no_mask = model(batch["input_ids"], batch["token_type_ids"]).last_hidden_state[3, :n]
    assert (short - padded).abs().max() <= 1e-5
    assert (short - no_mask).abs().max() > 1e-2  # dropping the padding mask changes them


def test_without_weights_requested_attentions_is_none(minilm, padded_batch):
    _, model = minilm
    with torch.no_grad():
        out = model(**padded_batch)
    assert out.attentions is None and out.last_hidden_state.shape[-1] == 384


def test_appending_a_token_moves_earlier_encoder_outputs_but_not_causal_ones():
    torch.manual_seed(0)
    model = EncoderModel(tiny()).eval()
    ids = torch.randint(0, 50, (1, 8))
    longer = torch.cat([ids, torch.tensor([[7]])], dim=1)
    with torch.no_grad():
        enc = model(ids).last_hidden_state
        enc_longer = model(longer).last_hidden_state[:, :8]
        dec = model(ids, mask=masks.causal(8)).last_hidden_state
        dec_longer = model(longer, mask=masks.causal(9)).last_hidden_state[:, :8]
    assert (enc - enc_longer).abs().amax(-1).min() > 1e-4  # every earlier position moved
    assert (dec - dec_longer).abs().max() <= 1e-6


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_parameter_count_formula_matches_the_modules(norm):
    for pooler in (True, False):
        config = tiny(norm=norm, pooler=pooler)
        model = EncoderModel(config)
        assert count_parameters(config) == sum(p.numel() for p in model.parameters())


def test_parameter_count_of_the_real_checkpoint(minilm):
    from safetensors import safe_open

    from encoderlab.pretrained import CHECKED_BUFFERS, find_weights

    _, model = minilm
    with safe_open(str(find_weights() / "model.safetensors"), "pt") as f:
        shapes = [f.get_slice(name).get_shape() for name in f.keys() if name not in CHECKED_BUFFERS]
    in_file = sum(math.prod(shape) for shape in shapes)
    assert count_parameters(model.config) == in_file
    assert count_parameters(model.config) == 22_713_216  # all-MiniLM-L6-v2, pooler included


def test_pre_ln_stack_trains_a_step():
    model = EncoderModel(tiny(norm="pre"))
    out = model(torch.randint(0, 50, (2, 5)))
    out.last_hidden_state.pow(2).mean().backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if "pooler" not in n)


def test_more_than_n_max_tokens_is_refused_with_the_fix():
    model = EncoderModel(tiny())
    with pytest.raises(ValueError, match=r"17 tokens.*n_max=16.*[Tt]runcat"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_token_ids_out_of_range_are_refused():
    model = EncoderModel(tiny())
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 50\).*to 50"):
        model(torch.tensor([[1, 2, 50]]))
    with pytest.raises(ValueError, match="token_type_ids must lie in"):
        model(torch.tensor([[1, 2]]), token_type_ids=torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="2-D tensor"):
        model(torch.tensor([1, 2]))


def test_config_errors():
    with pytest.raises(ValueError, match=r"n_heads must divide d_model.*d_model=32, n_heads=5"):
        EncoderConfig(d_model=32, n_heads=5)
    with pytest.raises(ValueError, match="norm must be 'post' or 'pre'"):
        EncoderConfig(norm="sandwich")


def test_attention_mask_shape_is_checked():
    model = EncoderModel(tiny())
    with pytest.raises(ValueError, match="attention_mask must have the shape of input_ids"):
        model(torch.zeros(2, 4, dtype=torch.long), attention_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="must be boolean"):
        model(torch.zeros(1, 4, dtype=torch.long), mask=torch.ones(4, 4))

"""The next-token loss, the toy language, the LM head and the training loop (Lesson 3, §3)."""

import math

import pytest
import torch
from torch import nn

from encoderlab import masks
from encoderlab.attention import offset_attention_mass
from encoderlab.data import BigramLanguage
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import LanguageModelHead, TinyLM
from encoderlab.objectives import next_token_loss
from encoderlab.training import train

TINY = EncoderConfig(
    vocab_size=12, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=16, dropout=0.0
)


# --- next_token_loss ----------------------------------------------------------------------------


def test_next_token_loss_equals_a_hand_computation():
    # One sequence of 3 tokens over a vocabulary of 2: two predictions, at t = 0 and t = 1.
    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])  # (1, 3, 2)
    input_ids = torch.tensor([[1, 0, 1]])  # labels are x_1 = 0 and x_2 = 1
    # t = 0 scores label 0 with logits (2, 0); t = 1 scores label 1 with logits (0, 1).
    nll_0 = -math.log(math.exp(2) / (math.exp(2) + math.exp(0)))
    nll_1 = -math.log(math.exp(1) / (math.exp(0) + math.exp(1)))
    expected = (nll_0 + nll_1) / 2  # the last position's logits (5, 5) have no label
    assert next_token_loss(logits, input_ids).item() == pytest.approx(expected, rel=1e-6)


def test_next_token_loss_is_shifted_cross_entropy_and_ignores_padding_labels():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    ids = torch.randint(7, (2, 5), generator=g)
    per_position = -torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    assert next_token_loss(logits, ids).item() == pytest.approx(per_position.mean().item(), 1e-6)
    am = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    keep = am[:, 1:].bool()  # a prediction counts when its label is a real token
    expected = per_position[keep].mean().item()
    assert next_token_loss(logits, ids, attention_mask=am).item() == pytest.approx(expected, 1e-6)


def test_uniform_logits_give_log_vocab_size():
    logits = torch.zeros(3, 6, 10)
    ids = torch.randint(10, (3, 6))
    assert next_token_loss(logits, ids).item() == pytest.approx(math.log(10), rel=1e-6)


@pytest.mark.parametrize(
    "logits, ids, words",
    [
        (torch.zeros(4, 7), torch.zeros(4, dtype=torch.long), "(batch, n, vocab_size)"),
        (torch.zeros(2, 5, 7), torch.zeros(2, 4, dtype=torch.long), "(batch, n) = (2, 5)"),
        (torch.zeros(2, 5, 7), torch.zeros(2, 5), "integer token ids"),
        (torch.zeros(2, 1, 7), torch.zeros(2, 1, dtype=torch.long), "at least 2 tokens"),
        (torch.zeros(2, 5, 7, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long),
         "floating-point"),
    ],
)
def test_next_token_loss_rejects_bad_shapes_with_clear_errors(logits, ids, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        next_token_loss(logits, ids)


def test_next_token_loss_rejects_a_mismatched_attention_mask():
    with pytest.raises(ValueError, match="attention_mask"):
        next_token_loss(torch.zeros(2, 5, 7), torch.zeros(2, 5, dtype=torch.long),
                        attention_mask=torch.ones(2, 4))


# --- the toy language ---------------------------------------------------------------------------


def test_bigram_language_is_deterministic_and_valid():
    lang = BigramLanguage(vocab_size=16, branching=3, seed=5)
    again = BigramLanguage(vocab_size=16, branching=3, seed=5)
    assert torch.equal(lang.successors, again.successors)
    assert lang.successors.shape == (16, 3)
    assert all(len(set(row.tolist())) == 3 for row in lang.successors)  # distinct successors
    a = next(lang.batches(4, 10, seed=1))
    b = next(again.batches(4, 10, seed=1))
    assert torch.equal(a, b) and a.shape == (4, 10)
    assert lang.is_valid(a)
    assert lang.entropy == pytest.approx(math.log(3))
    a[0, 5] = (a[0, 5] + 1) % 16  # almost surely an illegal step now
    if not (lang.successors[a[0, 4]] == a[0, 5]).any():
        assert not lang.is_valid(a)


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab_size": 1}, r"vocab_size must be an int >= 2, got 1"),
    ({"branching": 0}, r"branching must be an int from 1 to 32 .*got 0"),
    ({"branching": 99}, r"branching must be an int from 1 to 32 .*got 99"),
])
def test_bigram_language_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BigramLanguage(**kwargs)


# --- the model ----------------------------------------------------------------------------------


def test_tiny_lm_shapes_and_masks():
    torch.manual_seed(0)
    model = TinyLM(TINY, causal=True).eval()
    x = torch.randint(12, (3, 9))
    assert model(x).shape == (3, 9, 12)
    assert torch.equal(model.structural_mask(4), masks.causal(4))
    assert TinyLM(TINY, causal=False).structural_mask(4) is None
    assert model.encoder.pooler is None  # a language model has no use for BERT's pooler
    assert isinstance(model.head, LanguageModelHead)
    assert "causal" in repr(model)


def test_causal_tiny_lm_cannot_see_the_future_and_bidirectional_can():
    torch.manual_seed(0)
    causal, bidirectional = TinyLM(TINY, causal=True).eval(), TinyLM(TINY, causal=False).eval()
    x = torch.randint(12, (2, 8))
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 12  # change only the last token
    with torch.no_grad():
        assert torch.allclose(causal(x)[:, :-1], causal(y)[:, :-1], atol=1e-6)
        assert not torch.allclose(bidirectional(x)[:, :-1], bidirectional(y)[:, :-1], atol=1e-3)


def test_offset_attention_mass():
    a = torch.zeros(2, 4, 4)
    a[0] = torch.eye(4).roll(1, dims=1)  # every query puts all its weight on i + 1 (the last wraps)
    a[1] = torch.eye(4)  # every query attends to itself
    assert offset_attention_mass(a).tolist() == pytest.approx([1.0, 0.0])
    assert offset_attention_mass(a, offset=0).tolist() == pytest.approx([0.0, 1.0])
    causal_weights = torch.softmax(torch.randn(5, 5).masked_fill(~masks.causal(5), -torch.inf), -1)
    assert offset_attention_mass(causal_weights).item() == 0.0
    with pytest.raises(ValueError, match="offset"):
        offset_attention_mass(a, offset=4)
    with pytest.raises(ValueError, match=r"\(\.\.\., n, n\)"):
        offset_attention_mass(torch.zeros(5))


# --- the training loop --------------------------------------------------------------------------


def _run(causal: bool, steps: int, seed: int = 0) -> list[float]:
    lang = BigramLanguage(vocab_size=12, branching=2, seed=0)
    torch.manual_seed(seed)
    model = TinyLM(TINY, causal=causal)
    return train(model, lang.batches(16, 12, seed=1),
                 lambda m, x: next_token_loss(m(x), x), steps=steps, lr=3e-3, progress=False)


def test_training_is_deterministic_under_a_seed():
    assert _run(causal=True, steps=15) == _run(causal=True, steps=15)
    assert _run(causal=True, steps=15, seed=1) != _run(causal=True, steps=15)


def test_loss_decreases_on_a_learnable_task():
    # Predicting the next token of a bigram language with 2 successors per token: from ln 12
    # (knowing nothing) down towards ln 2 (knowing the table), which a causal model can reach.
    history = _run(causal=True, steps=150)
    assert len(history) == 150
    end = sum(history[-10:]) / 10
    assert history[0] > 2.2 and end < 1.0 and end > math.log(2) - 0.1


def test_training_leaves_the_model_in_eval_mode():
    model = nn.Linear(3, 1)
    batches = iter([torch.ones(2, 3)] * 2)
    train(model, batches, lambda m, x: m(x).pow(2).mean(), steps=2, progress=False)
    assert not model.training


def test_train_errors_are_clear():
    model = nn.Linear(3, 1)
    loss = lambda m, x: m(x).pow(2).mean()  # noqa: E731
    with pytest.raises(ValueError, match="steps"):
        train(model, [torch.ones(2, 3)], loss, steps=0)
    with pytest.raises(ValueError, match="ran out after 1 of 3"):
        train(model, [torch.ones(2, 3)], loss, steps=3, progress=False)
    with pytest.raises(ValueError, match="scalar"):
        train(model, [torch.ones(2, 3)], lambda m, x: m(x), steps=1, progress=False)
    with pytest.raises(ValueError, match="loss_fn"):
        train(model, [torch.ones(2, 3)], "mse", steps=1)


def test_warmup_factor_rises_then_decays_to_zero_or_stays_constant():
    from encoderlab.training import warmup_factor
    assert [warmup_factor(t, 6, 2) for t in range(8)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert [warmup_factor(t, 6, 2, decay=False) for t in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert warmup_factor(0, 4, 0) == 1.0  # no warm-up: decay from the first step
    assert warmup_factor(3, 3, 3) == 0.0  # warm-up over every step: no division by zero after it

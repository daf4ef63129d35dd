"""Lesson 6, §5: does every position's label speed learning? ELECTRA's "15 %" ablation.

Replaced-token detection needs a generator whose samples are plausible in context. At this
lesson's compute a jointly trained generator stays near the word-frequency model (§4), so the
designed setting here borrows a trained one: Lesson 5's MLM encoder (``l5-mlm``), frozen. Two
discriminators with one initialisation read the same corrupted batches for the same number of
steps (equal FLOPs): one takes its loss at every real position (ELECTRA), the other only at the
15 % of positions the generator was asked about (ELECTRA's "ELECTRA 15%" ablation, Clark et
al. 2020, §3.2). Both are scored on held-out sentences as training goes. The run is the recipe
``l6-rtd-signal`` (``python -m encoderlab train l6-rtd-signal``).
"""

from __future__ import annotations

import json
import time

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab import data
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import TinyLM, TokenDiscriminator
from encoderlab.lessons.l06_comparison import (
    ENCODER_SIZES,
    corpus_and_vocab,
    cross_validated_correct,
    encoder_features,
    word_order_task,
)
from encoderlab.lessons.l06_pretraining import roc_auc, token_replaced_rate
from encoderlab.objectives import IGNORE_INDEX, mlm_corrupt, mlm_model_loss, replace_with_samples
from encoderlab.training import load_artefact, train, warmup_factor
from encoderlab.validate import check_positive_int

__all__ = ["GENERATOR_ARTEFACT", "SIGNAL_STEPS", "EVAL_EVERY", "load_generator",
           "held_out_mlm_loss", "unigram_mlm_loss", "corrupt_with_generator",
           "masked_only_labels", "detection_scores", "train_signal", "RECIPES"]

GENERATOR_ARTEFACT = "l5-mlm"  # Lesson 5's MLM encoder, d=128, L=2: the frozen generator
SIGNAL_STEPS = 600
EVAL_EVERY = 50
PROBE_EVERY = 200  # the word-order probe of §4, at 0, 200, 400 and 600 steps
BATCH_SIZE = 32
LEARNING_RATE = 1e-3
WARMUP_STEPS = 60
SEED = 0
VARIANTS = ("every position", "masked 15 % only")


def load_generator(vocab: data.CompactVocab) -> TinyLM:
    """Lesson 6, §5: the frozen generator, Lesson 5's trained MLM encoder, in eval mode.

    Raises ValueError when its vocabulary is not ``vocab`` (the model's output layer is tied
    to the token ids it was trained with)."""
    tensors, metadata = load_artefact(GENERATOR_ARTEFACT)
    if metadata.get("vocab", "").splitlines() != list(vocab.tokens):
        raise ValueError(f"the artefact {GENERATOR_ARTEFACT!r} was trained with another "
                         "vocabulary than this lesson's; retrain it with "
                         f"`python -m encoderlab train {GENERATOR_ARTEFACT}`.")
    model = TinyLM(EncoderConfig(**json.loads(metadata["config"])), causal=False)
    model.load_state_dict({k.removeprefix("model."): v for k, v in tensors.items()
                           if k.startswith("model.")})
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def _check_batch(input_ids, attention_mask):
    if not (isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2
            and isinstance(attention_mask, torch.Tensor)
            and attention_mask.shape == input_ids.shape):
        raise ValueError("pass input_ids and attention_mask as two (b, n) tensors of one shape, "
                         "from vocab.encode(sentences).")


def _masked_inputs(input_ids, attention_mask, vocab, seed):
    """(inputs, labels): 15 % of the ordinary positions chosen and all replaced by [MASK]."""
    _, labels = mlm_corrupt(input_ids, attention_mask, vocab.special_ids, vocab.size, 0.15,
                            generator=torch.Generator().manual_seed(seed), mask_id=vocab.mask_id)
    return input_ids.masked_fill(labels != IGNORE_INDEX, vocab.mask_id), labels  # (b, n) each


@torch.no_grad()
def held_out_mlm_loss(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      vocab: data.CompactVocab, seed: int = 0) -> float:
    """Lesson 6, §4: a model's MLM loss (nats) on one fixed corruption of held-out sentences:
    15 % of the ordinary positions, all [MASK] (as ELECTRA's generator reads them).
    ``model`` has ``encode`` and ``head`` (a TinyLM or ELECTRA's generator)."""
    _check_batch(input_ids, attention_mask)
    inputs, labels = _masked_inputs(input_ids, attention_mask, vocab, seed)
    was_training = model.training
    model.eval()
    loss, _ = mlm_model_loss(model, inputs, attention_mask, labels)
    model.train(was_training)
    return loss.item()


def unigram_mlm_loss(train_ids: torch.Tensor, train_mask: torch.Tensor,
                     input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     vocab: data.CompactVocab, seed: int = 0) -> float:
    """Lesson 6, §4: the loss of the word-frequency model (each token's share of the ordinary
    training tokens, add-one smoothed; no context) at the positions
    :func:`held_out_mlm_loss` scores with the same ``seed``."""
    _check_batch(train_ids, train_mask)
    _check_batch(input_ids, attention_mask)
    ordinary = (train_mask == 1) & ~torch.isin(train_ids, torch.tensor(vocab.special_ids))
    counts = torch.bincount(train_ids[ordinary], minlength=vocab.size).double() + 1  # (V,)
    _, labels = _masked_inputs(input_ids, attention_mask, vocab, seed)
    targets = labels[labels != IGNORE_INDEX]  # (k,)
    return -(counts / counts.sum())[targets].log().mean().item()


@torch.no_grad()
def corrupt_with_generator(generator: TinyLM, input_ids: torch.Tensor,
                           attention_mask: torch.Tensor, vocab: data.CompactVocab,
                           rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lesson 6, §5: ELECTRA's corruption with a frozen generator. Returns ``(corrupted,
    labels, asked)``, all (b, n): the sequence with the generator's samples at the chosen 15 %,
    the replaced-token labels (1 replaced, 0 original, -100 at padding) and the positions the
    generator was asked about (bool)."""
    _check_batch(input_ids, attention_mask)
    _, mlm_labels = mlm_corrupt(input_ids, attention_mask, vocab.special_ids, vocab.size, 0.15,
                                generator=rng, mask_id=vocab.mask_id)
    masked = input_ids.masked_fill(mlm_labels != IGNORE_INDEX, vocab.mask_id)  # (b, n)
    _, logits = mlm_model_loss(generator, masked, attention_mask, mlm_labels)  # (k, V)
    corrupted = replace_with_samples(input_ids, mlm_labels, logits, generator=rng)  # (b, n)
    labels = (corrupted != input_ids).long().masked_fill(attention_mask == 0, IGNORE_INDEX)
    return corrupted, labels, mlm_labels != IGNORE_INDEX


def masked_only_labels(labels: torch.Tensor, asked: torch.Tensor) -> torch.Tensor:
    """Lesson 6, §5: the "ELECTRA 15%" labels: ``labels`` (b, n) kept where the generator was
    ``asked`` (b, n bool), -100 everywhere else, so only those positions carry loss."""
    if not (isinstance(labels, torch.Tensor) and isinstance(asked, torch.Tensor)
            and labels.shape == asked.shape and asked.dtype == torch.bool):
        raise ValueError("labels must be a (b, n) tensor and asked a (b, n) bool tensor of the "
                         "same shape.")
    return labels.masked_fill(~asked, IGNORE_INDEX)


@torch.no_grad()
def detection_scores(discriminator: TokenDiscriminator, corrupted: torch.Tensor,
                     attention_mask: torch.Tensor) -> torch.Tensor:
    """Lesson 6, §5: (k,) P(replaced) at the k real positions of ``corrupted`` (b, n), in
    row-major order."""
    _check_batch(corrupted, attention_mask)
    was_training = discriminator.training
    discriminator.eval()
    logits = discriminator(corrupted, attention_mask)  # (b, n)
    discriminator.train(was_training)
    return torch.sigmoid(logits[attention_mask == 1])


class _Pair(nn.Module):
    """Two discriminators trained side by side: disjoint parameters, one AdamW, so summing
    their losses trains each exactly as alone."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        torch.manual_seed(SEED)
        first = TokenDiscriminator(config)
        self.nets = nn.ModuleList([first, TokenDiscriminator(config)])
        self.nets[1].load_state_dict(first.state_dict())  # one initialisation for both


def train_signal(steps: int | None = None, progress: bool = True):
    """Lesson 6, §5: two discriminators (d=128, L=2), every-position loss vs 15 % only,
    against Lesson 5's frozen MLM generator; held-out AUC every EVAL_EVERY steps."""
    steps = SIGNAL_STEPS if steps is None else steps
    check_positive_int(steps, "steps")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_signal(steps, progress)
    finally:
        torch.set_num_threads(threads)


def _train_signal(steps, progress):
    corpus, vocab = corpus_and_vocab()
    ids, am = vocab.encode(corpus.train, max_length=ENCODER_SIZES["n_max"])  # (N, 64)
    held_ids, held_am = vocab.encode(corpus.held_out, max_length=ENCODER_SIZES["n_max"])
    generator = load_generator(vocab)
    held = corrupt_with_generator(generator, held_ids, held_am, vocab,
                                  torch.Generator().manual_seed(SEED + 10))
    counted = corrupt_with_generator(generator, ids, am, vocab,
                                     torch.Generator().manual_seed(SEED + 11))
    table = token_replaced_rate(counted[0], counted[1], vocab.size)  # (V,) context-free
    real = held_am == 1
    y, asked = held[1][real], held[2][real]  # (k,) labels, (k,) asked
    order_texts, order_y = word_order_task(corpus.train + corpus.held_out, seed=0)
    order_ids, order_am = vocab.encode(order_texts, max_length=ENCODER_SIZES["n_max"])
    pair = _Pair(EncoderConfig(vocab_size=vocab.size, **ENCODER_SIZES))
    rng = torch.Generator().manual_seed(SEED + 2)
    curve = {"steps": [], "all": [[], []], "asked": [[], []], "probe_steps": [],
             "probe": [[], []], "correct": [None, None]}

    def evaluate(done):
        curve["steps"].append(done)
        for v, net in enumerate(pair.nets):
            p = detection_scores(net, held[0], held_am)
            curve["all"][v].append(roc_auc(p, y))
            curve["asked"][v].append(roc_auc(p[asked], y[asked]))
        if done % PROBE_EVERY == 0 or done == steps:
            curve["probe_steps"].append(done)
            for v, net in enumerate(pair.nets):
                features = encoder_features(net, order_ids, order_am)  # (N, d)
                curve["correct"][v] = cross_validated_correct(features, order_y, seed=0)
                curve["probe"][v].append(curve["correct"][v].double().mean().item())

    def loss_fn(model, batch):
        if step_count[0] % EVAL_EVERY == 0:  # held-out AUC before this step
            evaluate(step_count[0])
        step_count[0] += 1
        x, a = data.trim_padding(*batch)
        corrupted, labels, was_asked = corrupt_with_generator(generator, x, a, vocab, rng)
        targets = (labels, masked_only_labels(labels, was_asked))
        losses = [F.binary_cross_entropy_with_logits(
            net(corrupted, a)[t != IGNORE_INDEX], t[t != IGNORE_INDEX].float())
            for net, t in zip(model.nets, targets)]
        return losses[0] + losses[1]

    step_count = [0]
    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=SEED)
    cpu = time.process_time()
    history = train(pair, batches, loss_fn, steps=steps, lr=LEARNING_RATE, seed=SEED,
                    progress=progress, description="l6-rtd-signal",
                    schedule=lambda s: warmup_factor(s, steps, min(WARMUP_STEPS, steps - 1),
                                                     decay=False))
    cpu = time.process_time() - cpu
    evaluate(steps)
    final = [detection_scores(net, held[0], held_am) for net in pair.nets]  # (k,) each
    sentence = torch.arange(len(held_ids))[:, None].expand_as(held_ids)[real]  # (k,)
    tensors = {
        "loss": torch.tensor(history),
        "eval_steps": torch.tensor(curve["steps"]),
        "auc_all": torch.tensor(curve["all"], dtype=torch.float64),  # (2, evals)
        "auc_asked": torch.tensor(curve["asked"], dtype=torch.float64),  # (2, evals)
        "held_scores": torch.stack(final),  # (2, k)
        "held_labels": y,  # (k,)
        "held_asked": asked,  # (k,) bool
        "held_sentence": sentence,  # (k,)
        "held_table": table[held[0][real]].float(),  # (k,) P(replaced | token), no context
        "held_ids": held[0][real],  # (k,) the token each position reads
        "probe_steps": torch.tensor(curve["probe_steps"]),
        "probe_accuracy": torch.tensor(curve["probe"], dtype=torch.float64),  # (2, probes)
        "probe_correct": torch.stack(curve["correct"]),  # (2, N) bool, after the last step
    }
    metadata = {
        "corpus_fingerprint": corpus.fingerprint,
        "generator": GENERATOR_ARTEFACT,
        "generator_held_out_loss": f"{held_out_mlm_loss(generator, held_ids, held_am, vocab):.4f}",
        "unigram_held_out_loss": f"{unigram_mlm_loss(ids, am, held_ids, held_am, vocab):.4f}",
        "variants": json.dumps(VARIANTS),
        "steps": str(steps),
        "batch_size": str(BATCH_SIZE),
        "learning_rate": str(LEARNING_RATE),
        "warmup_steps": str(min(WARMUP_STEPS, steps - 1)),
        "seed": str(SEED),
        "encoder_config": json.dumps(ENCODER_SIZES),
        "cpu_seconds": f"{cpu:.1f}",
    }
    return tensors, metadata


RECIPES = {"l6-rtd-signal": train_signal}

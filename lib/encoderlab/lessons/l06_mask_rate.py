"""A masking-rate sweep at the scale of Lesson 6 (§5): 15, 30 and 40 % of the tokens, three seeds.

Wettig et al. (2023) found that masking 40 % of the tokens beat BERT's 15 % for their large
model. This module repeats the question on the course corpus with a much smaller encoder and a
short run, so that the whole sweep fits in a few minutes on one core: for each rate and each
seed, an MLM encoder is trained from its own initialisation on its own batch stream, then
evaluated on the held-out sentences with *one* fixed 15 % corruption shared by every run (the
same positions and the same replacements), so that the numbers compare models, not masks.

The artefact ``l6-mask-rate`` (``python -m encoderlab train l6-mask-rate``) holds no weights,
only the record: for each run, the held-out loss and top-1 accuracy at every evaluation point,
and the training loss of every step. :func:`load_sweep` returns it as a table.
"""

from __future__ import annotations

import math
import time

import torch

from encoderlab import data
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import TinyLM
from encoderlab.lessons.l06_comparison import corpus_and_vocab, train_with_warmup
from encoderlab.lessons.l06_pretraining import forward_flops
from encoderlab.objectives import IGNORE_INDEX, mlm_corrupt, mlm_model_loss
from encoderlab.training import load_artefact
from encoderlab.validate import check_positive_int

__all__ = ["RATES", "SEEDS", "SWEEP_SIZES", "SWEEP_STEPS", "EVAL_EVERY", "EVAL_RATE",
           "held_out_metrics", "held_out_evaluation", "training_flops", "train_mask_rate_sweep",
           "RECIPES", "load_sweep", "seed_spread", "paired_t"]

RATES = (0.15, 0.30, 0.40)
SEEDS = (0, 1, 2)
SWEEP_SIZES = dict(d_model=64, n_heads=2, n_layers=2, d_ff=256, n_max=64, dropout=0.0)
SWEEP_STEPS = 600
EVAL_EVERY = 100
EVAL_RATE = 0.15  # every run is evaluated with one 15 % corruption of the held-out sentences
EVAL_SEED = 12345
BATCH_SIZE = 32
LEARNING_RATE = 1e-3
WARMUP_STEPS = 60


@torch.no_grad()
def held_out_metrics(model: TinyLM, inputs: torch.Tensor, attention_mask: torch.Tensor,
                     labels: torch.Tensor) -> tuple[float, float]:
    """(loss in nats, top-1 accuracy) of ``model`` at the labelled positions of one fixed
    corruption ``(inputs, labels)`` of held-out sentences (Lesson 6, §5)."""
    was_training = model.training
    model.eval()
    loss, logits = mlm_model_loss(model, inputs, attention_mask, labels)
    accuracy = (logits.argmax(dim=-1) == labels[labels != IGNORE_INDEX]).float().mean()
    model.train(was_training)
    return loss.item(), accuracy.item()


def held_out_evaluation(corpus, vocab) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inputs, attention_mask, labels): the one fixed 15 % corruption of the held-out sentences
    on which every run of the sweep is scored (Lesson 6, §5)."""
    held_ids, held_am = vocab.encode(corpus.held_out, max_length=SWEEP_SIZES["n_max"])
    inputs, labels = mlm_corrupt(held_ids, held_am, vocab.special_ids, vocab.size, EVAL_RATE,
                                 generator=torch.Generator().manual_seed(EVAL_SEED),
                                 mask_id=vocab.mask_id)
    return inputs, held_am, labels


def training_flops(vocab, input_ids: torch.Tensor, attention_mask: torch.Tensor, rates=RATES,
                   steps: int = SWEEP_STEPS, seed: int = 0) -> dict[float, float]:
    """Training FLOPs of one run of the sweep at each masking rate (Lesson 6, §5), by the formula
    of :func:`encoderlab.lessons.l06_pretraining.forward_flops`: the batches of seed ``seed``,
    each cut to its longest row, the output layer at ``rate`` of the ordinary positions (the
    expected count), and a training step costing three forward passes."""
    check_positive_int(steps, "steps")
    config = EncoderConfig(vocab_size=vocab.size, **SWEEP_SIZES)
    ordinary = (attention_mask != 0) & ~torch.isin(input_ids, torch.tensor(vocab.special_ids))
    batches = data.shuffled_batches(attention_mask, ordinary, batch_size=BATCH_SIZE, seed=seed)
    encoder, scored = 0.0, 0
    for _, (a, o) in zip(range(steps), batches):
        n = int(a.sum(dim=1).max())  # the batch cut to its longest row
        encoder += 3 * forward_flops(config, a.shape[0], n, 0, vocab.size)
        scored += int(o.sum())
    head = 3 * 2 * config.d_model * vocab.size  # per scored position
    return {rate: encoder + head * rate * scored for rate in rates}


def _one_run(rate: float, seed: int, steps: int, vocab, ids, am, evaluation) -> dict:
    torch.manual_seed(1000 * seed)  # the initial weights: one per seed, shared across rates
    model = TinyLM(EncoderConfig(vocab_size=vocab.size, **SWEEP_SIZES), causal=False)
    rng = torch.Generator().manual_seed(1000 * seed + 1)
    curve_steps, curve_loss, curve_accuracy = [], [], []

    def loss_fn(model, batch):
        step = loss_fn.step
        if step % EVAL_EVERY == 0:
            loss, accuracy = held_out_metrics(model, *evaluation)
            curve_steps.append(step)
            curve_loss.append(loss)
            curve_accuracy.append(accuracy)
        loss_fn.step += 1
        x, a = data.trim_padding(*batch)
        inputs, labels = mlm_corrupt(x, a, vocab.special_ids, vocab.size, rate, generator=rng,
                                     mask_id=vocab.mask_id)
        return mlm_model_loss(model, inputs, a, labels)[0]

    loss_fn.step = 0
    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=seed)
    history = train_with_warmup(model, batches, loss_fn, steps=steps, lr=LEARNING_RATE,
                                warmup_steps=min(WARMUP_STEPS, steps - 1), decay=False,
                                seed=seed, progress=False)
    loss, accuracy = held_out_metrics(model, *evaluation)
    curve_steps.append(steps)
    curve_loss.append(loss)
    curve_accuracy.append(accuracy)
    return {"steps": curve_steps, "loss": curve_loss, "accuracy": curve_accuracy,
            "train_loss": history}


def train_mask_rate_sweep(steps: int | None = None, progress: bool = True):
    """Lesson 6, §5: MLM at 15 / 30 / 40 % masking, 3 seeds each (d=64, L=2, 600 steps)."""
    steps = SWEEP_STEPS if steps is None else steps
    check_positive_int(steps, "steps")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        corpus, vocab = corpus_and_vocab()
        ids, am = vocab.encode(corpus.train, max_length=SWEEP_SIZES["n_max"])
        evaluation = held_out_evaluation(corpus, vocab)
        eval_labels = evaluation[2]
        tensors, wall, cpu = {}, time.perf_counter(), time.process_time()
        for rate in RATES:
            for seed in SEEDS:
                run = _one_run(rate, seed, steps, vocab, ids, am, evaluation)
                key = f"r{round(100 * rate)}.s{seed}"
                tensors[f"{key}.eval_steps"] = torch.tensor(run["steps"])
                tensors[f"{key}.eval_loss"] = torch.tensor(run["loss"], dtype=torch.float64)
                tensors[f"{key}.eval_accuracy"] = torch.tensor(run["accuracy"],
                                                               dtype=torch.float64)
                tensors[f"{key}.train_loss"] = torch.tensor(run["train_loss"])
                if progress:
                    print(f"rate {rate:.0%} seed {seed}: held-out loss {run['loss'][-1]:.3f}, "
                          f"accuracy {run['accuracy'][-1]:.1%}", flush=True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        torch.set_num_threads(threads)
    metadata = {
        "corpus_fingerprint": corpus.fingerprint,
        "rates": ",".join(str(r) for r in RATES),
        "seeds": ",".join(str(s) for s in SEEDS),
        "steps": str(steps),
        "batch_size": str(BATCH_SIZE),
        "learning_rate": str(LEARNING_RATE),
        "warmup_steps": str(min(WARMUP_STEPS, steps - 1)),
        "eval_rate": str(EVAL_RATE),
        "eval_seed": str(EVAL_SEED),
        "eval_positions": str(int((eval_labels != IGNORE_INDEX).sum())),
        "encoder_config": repr(EncoderConfig(vocab_size=vocab.size, **SWEEP_SIZES)),
        "vocab_size": str(vocab.size),
        "wall_seconds": f"{wall:.1f}",
        "cpu_seconds": f"{cpu:.1f}",
        "threads": "1",
    }
    return tensors, metadata


RECIPES = {"l6-mask-rate": train_mask_rate_sweep}


def load_sweep(name: str = "l6-mask-rate"):
    """(runs, metadata) of the committed sweep: ``runs[(rate, seed)]`` is a dict of tensors
    ``eval_steps``, ``eval_loss``, ``eval_accuracy`` and ``train_loss``."""
    tensors, metadata = load_artefact(name)
    runs = {}
    for rate in (float(r) for r in metadata["rates"].split(",")):
        for seed in (int(s) for s in metadata["seeds"].split(",")):
            key = f"r{round(100 * rate)}.s{seed}"
            runs[rate, seed] = {field: tensors[f"{key}.{field}"] for field in
                                ("eval_steps", "eval_loss", "eval_accuracy", "train_loss")}
    return runs, metadata


def seed_spread(values) -> tuple[float, float]:
    """(mean, sample standard deviation) of a few per-seed values (Lesson 6, §5)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"need at least 2 seeds to measure a spread, got {len(values)}.")
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def paired_t(differences) -> tuple[float, float, float]:
    """(mean, sample sd, t = mean / (sd / sqrt(k))) of k paired per-seed differences (Lesson 6,
    §5). With k = 3 seeds, |t| must pass 4.30 (two-sided, 5 %) to call a difference established."""
    mean, sd = seed_spread(differences)
    return mean, sd, (mean / (sd / math.sqrt(len(differences))) if sd > 0 else math.inf)

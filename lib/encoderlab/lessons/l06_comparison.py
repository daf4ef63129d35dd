"""The equal-compute comparison of Lesson 6, §4: MLM against ELECTRA, probed on the way.

Both runs start from one untrained encoder and spend the same training FLOPs (ELECTRA's
generator included). Their frozen encoders are compared by a linear probe on a small task
built from the corpus (:func:`source_task`, :func:`linear_probe`), example by example
(:func:`cross_validated_correct`, :func:`mcnemar`), and on word order
(:func:`word_order_task`). The two runs take minutes, so they are recipes of the artefact
command (``python -m encoderlab train l6-mlm`` / ``l6-rtd``, :data:`RECIPES`); the lesson
loads what they saved (:func:`load_recipe_model`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab import data
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import TinyLM, TokenDiscriminator, pool
from encoderlab.lessons.l06_pretraining import Electra, check_sentences, forward_flops, roc_auc
from encoderlab.objectives import IGNORE_INDEX, mlm_corrupt, mlm_model_loss
from encoderlab.pretrained import find_weights
from encoderlab.stats import sign_test
from encoderlab.tokenizer import WordPieceTokenizer
from encoderlab.training import load_artefact, train, warmup_factor
from encoderlab.validate import check_int, check_positive_int

__all__ = [
    "ProbeTask",
    "reference_sentences",
    "source_task",
    "encoder_features",
    "linear_probe",
    "cross_validated_correct",
    "mcnemar",
    "word_order_task",
    "sentence_bootstrap",
    "ENCODER_SIZES",
    "GENERATOR_SIZES",
    "corpus_and_vocab",
    "warmup_then_decay",
    "train_with_warmup",
    "planned_flops",
    "rtd_steps_for_equal_compute",
    "untrained_encoder",
    "probe_accuracy",
    "probe_steps",
    "train_mlm",
    "train_rtd",
    "RECIPES",
    "load_recipe_model",
]


# --- §4 A downstream probe -----------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeTask:
    """Texts and labels for a linear probe; label 1 = language reference, 0 = module docstring."""

    train_texts: list[str]
    train_labels: torch.Tensor  # (N_train,) long
    test_texts: list[str]
    test_labels: torch.Tensor  # (N_test,) long

    def __repr__(self) -> str:
        return (f"ProbeTask({len(self.train_texts)} training sentences, {len(self.test_texts)} "
                f"held out; {self.train_labels.float().mean():.0%} / "
                f"{self.test_labels.float().mean():.0%} language reference)")


def reference_sentences() -> set[str]:
    """The corpus sentences that come from the language reference (``pydoc_data.topics``),
    as opposed to a module's docstrings (Lesson 6, §4). Read from the frozen corpus's record
    of sources, so the set is the same on every Python version."""
    return {sentence for sentence, source in zip(data.python_docs_sentences(),
                                                 data.python_docs_sources())
            if source == "language reference"}


def _balanced(texts: list[str], reference: set[str], g: torch.Generator):
    labels = torch.tensor([int(t in reference) for t in texts])
    ones, zeros = labels.nonzero().squeeze(1), (labels == 0).nonzero().squeeze(1)
    k = min(len(ones), len(zeros))
    keep = torch.cat([ones[torch.randperm(len(ones), generator=g)[:k]],
                      zeros[torch.randperm(len(zeros), generator=g)[:k]]]).sort().values
    return [texts[i] for i in keep.tolist()], labels[keep]


def source_task(corpus: data.Corpus, seed: int = 0) -> ProbeTask:
    """Which source does a sentence come from: the language reference or a module's docstring?

    (Lesson 6, §4.) Built offline from the corpus: training sentences from ``corpus.train``,
    test sentences from ``corpus.held_out`` (never seen in pretraining). Each side is balanced
    by keeping a random subset of the larger class, so chance is 50 %.
    """
    reference = reference_sentences()
    g = torch.Generator().manual_seed(seed)
    train_texts, train_labels = _balanced(corpus.train, reference, g)
    test_texts, test_labels = _balanced(corpus.held_out, reference, g)
    if len(train_texts) < 4 or len(test_texts) < 2:
        raise ValueError("the corpus has too few sentences of one source to build the task.")
    return ProbeTask(train_texts, train_labels, test_texts, test_labels)


@torch.no_grad()
def encoder_features(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     batch_size: int = 256) -> torch.Tensor:
    """(N, d) mean-pooled final hidden states of a frozen model with an ``encode`` method
    (TinyLM, TokenDiscriminator) for encoded texts ``input_ids`` (N, n) (Lesson 6, §4)."""
    if not hasattr(model, "encode"):
        raise ValueError(f"model must have an encode(input_ids, attention_mask) method "
                         f"(TinyLM, TokenDiscriminator), got {type(model).__name__}.")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 \
            or not isinstance(attention_mask, torch.Tensor) \
            or attention_mask.shape != input_ids.shape:
        raise ValueError("pass input_ids and attention_mask, two (N, n) tensors from "
                         "vocab.encode(texts).")
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(input_ids), batch_size):
        ids, am = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
        ids, am = data.trim_padding(ids, am)  # (b, n'): no column that is padding in every row
        h = model.encode(ids, am).last_hidden_state  # (b, n', d)
        out.append(pool(h, am, "mean"))  # (b, d)
    model.train(was_training)
    return torch.cat(out)


def linear_probe(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                 test_y: torch.Tensor, l2: float = 1e-3, steps: int = 100) -> float:
    """Held-out accuracy of a logistic-regression probe on frozen features (Lesson 6, §4).

    Features are standardised with the training set's mean and standard deviation; the probe
    ``sigmoid(x w + b)`` is fitted by L-BFGS on the training set with an L2 penalty ``l2 |w|^2``.
    Deterministic: no random initialisation (w = 0, b = 0).
    """
    if train_x.dim() != 2 or test_x.dim() != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"features must be (N, d) with one d, got {tuple(train_x.shape)} and "
                         f"{tuple(test_x.shape)}.")
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError("each feature matrix needs one label per row.")
    if not set(train_y.unique().tolist()) <= {0, 1}:
        raise ValueError("labels must be 0 or 1.")
    predicted = _probe_predictions(train_x, train_y, test_x, l2, steps)  # (N_test,) bool
    return (predicted == test_y.bool()).double().mean().item()


def _probe_predictions(train_x, train_y, test_x, l2: float, steps: int) -> torch.Tensor:
    """(N_test,) bool: the fitted probe's predictions (label 1) for ``test_x``."""
    train_x, test_x = train_x.double(), test_x.double()
    mean, std = train_x.mean(dim=0), train_x.std(dim=0).clamp(min=1e-8)
    xs, xt = (train_x - mean) / std, (test_x - mean) / std
    y = train_y.double()
    w = torch.zeros(xs.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(xs @ w + b, y) + l2 * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return (xt @ w + b) > 0


def cross_validated_correct(features: torch.Tensor, labels: torch.Tensor, folds: int = 5,
                            seed: int = 0, l2: float = 1e-3, steps: int = 100) -> torch.Tensor:
    """(N,) bool: for every example, whether :func:`linear_probe`'s logistic regression got it
    right when fitted on the other folds (k-fold cross-validation, Lesson 6, §4).

    Every example is predicted exactly once, by a probe that never saw it, so two encoders
    scored on the same ``labels`` with the same ``seed`` can be compared example by example
    (:func:`mcnemar`). ``features`` is (N, d), ``labels`` (N,) of 0 and 1.
    """
    if not isinstance(features, torch.Tensor) or features.dim() != 2 \
            or not isinstance(labels, torch.Tensor) or labels.shape != (len(features),):
        raise ValueError(f"features must be (N, d) and labels (N,), got "
                         f"{tuple(getattr(features, 'shape', ()))} and "
                         f"{tuple(getattr(labels, 'shape', ()))}.")
    check_int(folds, "folds", at_least=2, at_most=len(labels), what="at most N, the examples")
    if not set(labels.unique().tolist()) <= {0, 1}:
        raise ValueError("labels must be 0 or 1.")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    correct = torch.zeros(len(labels), dtype=torch.bool)
    for fold in range(folds):
        test = order[fold::folds]  # every folds-th example of one shuffled order
        train = torch.ones(len(labels), dtype=torch.bool)
        train[test] = False
        predicted = _probe_predictions(features[train], labels[train], features[test], l2, steps)
        correct[test] = predicted == labels[test].bool()
    return correct


def mcnemar(correct_a: torch.Tensor, correct_b: torch.Tensor) -> tuple[int, int, float]:
    """McNemar's exact test for two classifiers scored on the same examples (Lesson 6, §4).

    Returns ``(a_only, b_only, p)``: how many examples only A got right, how many only B got
    right, and the two-sided p-value of "A and B are equally accurate" — under that hypothesis
    each discordant example is a fair coin, so ``a_only`` is Binomial(a_only + b_only, 1/2).
    Examples both got right (or both wrong) say nothing about the difference and are ignored.
    """
    if not (isinstance(correct_a, torch.Tensor) and isinstance(correct_b, torch.Tensor)
            and correct_a.dim() == 1 and correct_a.shape == correct_b.shape):
        raise ValueError("pass two 1-d boolean tensors of one length: whether each classifier "
                         "got each example right, on the same examples in the same order.")
    a, b = correct_a.bool(), correct_b.bool()
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    return a_only, b_only, sign_test(a_only, b_only)


def word_order_task(sentences: Sequence[str], seed: int = 0) -> tuple[list[str], torch.Tensor]:
    """A probe task on word order (Lesson 6, §4): half of ``sentences`` (chosen at random) have
    their words shuffled, label 1; the other half stay as they are, label 0. Each sentence
    appears once. A bag of words cannot tell the classes apart: both hold the same words."""
    sentences = check_sentences(sentences, at_least=2)
    g = torch.Generator().manual_seed(seed)
    shuffled = torch.zeros(len(sentences), dtype=torch.long)
    shuffled[torch.randperm(len(sentences), generator=g)[:len(sentences) // 2]] = 1
    texts = []
    for sentence, label in zip(sentences, shuffled.tolist()):
        words = sentence.split()
        if label and len(set(words)) > 1:
            order = torch.randperm(len(words), generator=g)
            while all(words[i] == w for i, w in zip(order.tolist(), words)):
                order = torch.randperm(len(words), generator=g)  # a different order
            words = [words[i] for i in order.tolist()]
        elif label:
            shuffled[len(texts)] = 0  # one distinct word: no other order exists
        texts.append(" ".join(words))
    return texts, shuffled


def sentence_bootstrap(scores_a: torch.Tensor, scores_b: torch.Tensor, labels: torch.Tensor,
                       groups: torch.Tensor, resamples: int = 1000,
                       seed: int = 0) -> dict[str, torch.Tensor]:
    """Paired bootstrap over sentences of two probability scores on the same positions
    (Lesson 6, §4): draw the sentences with replacement, take all positions of each drawn
    sentence, and compute on that sample AUC(a) − AUC(b) and BCE(a) − BCE(b) (nats).

    ``scores_a``, ``scores_b`` (probabilities), ``labels`` (0/1) and ``groups`` (the sentence
    index of each position) are 1-d, of one length. Returns ``{"auc": (resamples,),
    "bce": (resamples,)}``; their 2.5 and 97.5 percentiles are a 95 % interval.
    """
    tensors = (scores_a, scores_b, labels, groups)
    if not all(isinstance(t, torch.Tensor) and t.dim() == 1 and t.shape == scores_a.shape
               for t in tensors):
        raise ValueError("scores_a, scores_b, labels and groups must be 1-d tensors of one "
                         "length, one entry per scored position.")
    check_positive_int(resamples, "resamples")
    sentence_ids, groups = torch.unique(groups, return_inverse=True)  # renumber 0..S-1
    n_sentences = len(sentence_ids)
    g = torch.Generator().manual_seed(seed)
    a, b = scores_a.double().clamp(1e-6, 1 - 1e-6), scores_b.double().clamp(1e-6, 1 - 1e-6)
    y = labels.double()
    out = {"auc": torch.empty(resamples, dtype=torch.float64),
           "bce": torch.empty(resamples, dtype=torch.float64)}
    for r in range(resamples):
        drawn = torch.randint(n_sentences, (n_sentences,), generator=g)
        copies = torch.bincount(drawn, minlength=n_sentences)[groups]  # (k,) per position
        keep = torch.repeat_interleave(torch.arange(len(y)), copies)
        ys = y[keep]
        if ys.min() == ys.max():
            raise ValueError("a resample held only one label; score more positions.")
        out["auc"][r] = roc_auc(a[keep], ys) - roc_auc(b[keep], ys)
        out["bce"][r] = (F.binary_cross_entropy(a[keep], ys)
                         - F.binary_cross_entropy(b[keep], ys))
    return out


# --- Recipes: the equal-compute comparison of §4 -------------------------------------------------

ENCODER_SIZES = dict(d_model=128, n_heads=4, n_layers=2, d_ff=512, n_max=64, dropout=0.0)
GENERATOR_SIZES = dict(d_model=64, n_heads=2, n_layers=2, d_ff=256, n_max=64, dropout=0.0)
BATCH_SIZE = 32
MLM_STEPS = 1500
LEARNING_RATE = 1e-3  # the peak of the schedule
WARMUP_FRACTION = 0.1  # linear warm-up over the first 10 % of the steps
DECAY = False  # then constant: at a few thousand steps, decaying to 0 costs the MLM run too much
DISC_WEIGHT = 50.0  # ELECTRA's lambda
SHARE_EMBEDDINGS = True  # ELECTRA's choice: the generator uses the discriminator's embeddings
SEED = 0
PROBE_POINTS = 5  # probes at 0, 1/4, 1/2, 3/4 and all of the training
FIRST_PROBE = MLM_STEPS // (PROBE_POINTS - 1)  # 375: the committed MLM run's first probe after 0


def corpus_and_vocab() -> tuple[data.Corpus, data.CompactVocab]:
    """The corpus of Lesson 5 and its compact vocabulary (MiniLM's WordPiece pieces used at least
    twice in the training sentences); needs only MiniLM's vocab.txt, not its weights."""
    tokenizer = WordPieceTokenizer.from_vocab_file(find_weights() / "vocab.txt")
    corpus = data.python_docs_corpus()
    return corpus, data.CompactVocab(tokenizer, corpus.train)


def _step_flops(kind: str, configs: dict, ids, am, n_masked: int) -> int:
    b, n = ids.shape
    V = configs["encoder"].vocab_size
    if kind == "mlm":
        return 3 * forward_flops(configs["encoder"], b, n, n_masked, V)
    d_e, d_g = configs["encoder"].d_model, configs["generator"].d_model
    if SHARE_EMBEDDINGS:  # d_e -> d_g projection at every token; tied head d_g -> d_e -> V
        generator = forward_flops(configs["generator"], b, n, 0, 0) + 2 * b * n * d_e * d_g \
            + 2 * n_masked * (d_g * d_e + d_e * V)
    else:
        generator = forward_flops(configs["generator"], b, n, n_masked, V)
    return 3 * (generator + forward_flops(configs["encoder"], b, n, b * n, 1))


def warmup_then_decay(step: int, steps: int, warmup_steps: int, decay: bool = True) -> float:
    """The learning-rate multiplier at ``step`` (0-based) of ``steps`` (Lesson 6, §4): linear
    warm-up from 1/warmup_steps to 1 over the first ``warmup_steps`` steps, then linear decay
    towards 0 at the last step, the schedule of BERT and ELECTRA; or, with ``decay=False``,
    constant after the warm-up."""
    check_positive_int(steps, "steps")
    check_int(warmup_steps, "warmup_steps", at_least=0, at_most=steps - 1, what="below steps")
    if not 0 <= step < steps:
        raise ValueError(f"step must be in [0, {steps}), got {step!r}.")
    return warmup_factor(step, steps, warmup_steps, decay)


def train_with_warmup(model: nn.Module, batches, loss_fn, steps: int, lr: float,
                      warmup_steps: int, decay: bool = True, seed: int = 0,
                      progress: bool = True, description: str | None = None) -> list[float]:
    """:func:`encoderlab.training.train` with :func:`warmup_then_decay` as its learning-rate
    schedule (Lesson 6, §4): returns the loss of every step and leaves the model in eval mode."""
    warmup_then_decay(0, steps, warmup_steps)  # checks steps and warmup_steps
    return train(model, batches, loss_fn, steps=steps, lr=lr, seed=seed, progress=progress,
                 description=description,
                 schedule=lambda step: warmup_then_decay(min(step, steps - 1), steps,
                                                         warmup_steps, decay))


def _setup():
    corpus, vocab = corpus_and_vocab()
    ids, am = vocab.encode(corpus.train, max_length=ENCODER_SIZES["n_max"])  # (N, 64)
    configs = {
        "encoder": EncoderConfig(vocab_size=vocab.size, **ENCODER_SIZES),
        "generator": EncoderConfig(vocab_size=vocab.size, **GENERATOR_SIZES),
    }
    task = source_task(corpus)
    return corpus, vocab, ids, am, configs, task


def planned_flops(kind: str, steps: int) -> int:
    """Training FLOPs of ``steps`` steps of a recipe, expected before training: the real batch
    shapes of the shared batch stream, and 15 % of the ordinary tokens masked."""
    _, vocab, ids, am, configs, _ = _setup()
    return _planned(kind, steps, vocab, ids, am, configs)


def _planned(kind, steps, vocab, ids, am, configs) -> int:
    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=SEED)
    total = 0
    for _ in range(steps):
        x, a = data.trim_padding(*next(batches))
        ordinary = (a.sum() - 2 * a.shape[0]).item()  # real tokens minus [CLS] and [SEP]
        total += _step_flops(kind, configs, x, a, round(0.15 * ordinary))
    return total


def rtd_steps_for_equal_compute(vocab, ids, am, configs, mlm_steps: int) -> int:
    """The number of ELECTRA steps whose expected FLOPs (generator included) first reach those
    of ``mlm_steps`` MLM steps, on the same batch stream."""
    target = _planned("mlm", mlm_steps, vocab, ids, am, configs)
    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=SEED)
    total, steps = 0, 0
    while total < target:
        x, a = data.trim_padding(*next(batches))
        ordinary = (a.sum() - 2 * a.shape[0]).item()
        total += _step_flops("rtd", configs, x, a, round(0.15 * ordinary))
        steps += 1
    return steps


def untrained_encoder(vocab: data.CompactVocab) -> TinyLM:
    """The untrained encoder both runs of Lesson 6, §4 start from: the step-0 model of
    ``l6-mlm``, whose encoder stack the ELECTRA discriminator copies."""
    torch.manual_seed(SEED)
    return TinyLM(EncoderConfig(vocab_size=vocab.size, **ENCODER_SIZES), causal=False)


def probe_accuracy(model: nn.Module, vocab: data.CompactVocab, task: ProbeTask,
                   _cache: dict = {}) -> float:  # noqa: B006 - the cache is meant to persist
    """Held-out accuracy of a linear probe on ``model``'s frozen, mean-pooled features for the
    source task (Lesson 6, §4); the encoded texts are cached per task."""
    key = (id(task), id(vocab))
    if key not in _cache:
        _cache.clear()
        # task and vocab are kept in the entry, so their ids cannot be reused while it lives
        _cache[key] = (vocab.encode(task.train_texts), vocab.encode(task.test_texts), task, vocab)
    (train_ids, train_am), (test_ids, test_am), _, _ = _cache[key]
    train_x = encoder_features(model, train_ids, train_am)
    test_x = encoder_features(model, test_ids, test_am)
    return linear_probe(train_x, task.train_labels, test_x, task.test_labels)


def probe_steps(steps: int) -> list[int]:
    """The steps before which a run of ``steps`` steps probes its encoder (Lesson 6, §4):
    :data:`PROBE_POINTS` evenly spaced points from 0 to ``steps``. A run shorter than
    :data:`FIRST_PROBE` (a quick try, a test) probes nothing: its encoder has barely moved, and
    each probe costs more than the steps themselves."""
    check_positive_int(steps, "steps")
    if steps < FIRST_PROBE:
        return []
    return sorted({round(steps * k / (PROBE_POINTS - 1)) for k in range(PROBE_POINTS)})


def _run(kind: str, steps: int | None, progress: bool):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is as fast, and robust on a busy CPU
    try:
        return _run_single_thread(kind, steps, progress)
    finally:
        torch.set_num_threads(threads)


def _run_single_thread(kind: str, steps: int | None, progress: bool):
    corpus, vocab, ids, am, configs, task = _setup()
    if steps is None:
        steps = MLM_STEPS if kind == "mlm" else \
            rtd_steps_for_equal_compute(vocab, ids, am, configs, MLM_STEPS)
    torch.manual_seed(SEED)  # the MLM encoder and the discriminator start from one encoder
    if kind == "mlm":
        model = TinyLM(configs["encoder"], causal=False)
        probed = model
    else:
        encoder_first = TokenDiscriminator(configs["encoder"])
        torch.manual_seed(SEED + 1)
        model = Electra(configs["generator"], configs["encoder"], SHARE_EMBEDDINGS)
        model.discriminator.load_state_dict(encoder_first.state_dict())
        probed = model.discriminator
    rng = torch.Generator().manual_seed(SEED + 2)
    checkpoints = probe_steps(steps)
    log = {"flops": [], "generator": [], "discriminator": [], "probe_steps": [], "probe": []}
    probe_seconds, probe_cpu = [0.0], [0.0]

    def loss_fn(model, batch):
        done = len(log["flops"])
        if done in checkpoints:  # probe the frozen encoder before this step
            start, start_cpu = time.perf_counter(), time.process_time()
            log["probe_steps"].append(done)
            log["probe"].append(probe_accuracy(probed, vocab, task))
            model.train()
            probe_seconds[0] += time.perf_counter() - start
            probe_cpu[0] += time.process_time() - start_cpu
        x, a = data.trim_padding(*batch)
        if kind == "mlm":
            inputs, labels = mlm_corrupt(x, a, vocab.special_ids, vocab.size, 0.15,
                                         generator=rng, mask_id=vocab.mask_id)
            loss, _ = mlm_model_loss(model, inputs, a, labels)
            n_masked = int((labels != IGNORE_INDEX).sum())
        else:
            out = model.losses(x, a, vocab.special_ids, vocab.mask_id, rng=rng)
            log["generator"].append(out["generator_loss"].item())
            log["discriminator"].append(out["discriminator_loss"].item())
            loss = out["generator_loss"] + DISC_WEIGHT * out["discriminator_loss"]
            n_masked = int((out["mlm_labels"] != IGNORE_INDEX).sum())
        log["flops"].append(_step_flops(kind, configs, x, a, n_masked))
        return loss

    batches = data.shuffled_batches(ids, am, batch_size=BATCH_SIZE, seed=SEED)
    wall, cpu = time.perf_counter(), time.process_time()
    history = train_with_warmup(model, batches, loss_fn, steps=steps, lr=LEARNING_RATE,
                                warmup_steps=round(WARMUP_FRACTION * steps), decay=DECAY,
                                seed=SEED,
                                progress=progress, description=f"l6-{kind}")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if steps in checkpoints:
        log["probe_steps"].append(steps)
        log["probe"].append(probe_accuracy(probed, vocab, task))
    state = {f"model.{k}": v for k, v in _unique_state(model).items()}
    tensors = {
        **state,
        "loss": torch.tensor(history),
        "flops": torch.tensor(log["flops"], dtype=torch.float64),
        "probe_steps": torch.tensor(log["probe_steps"]),
        "probe_accuracy": torch.tensor(log["probe"], dtype=torch.float64),
    }
    if kind == "rtd":
        tensors["generator_loss"] = torch.tensor(log["generator"])
        tensors["discriminator_loss"] = torch.tensor(log["discriminator"])
    metadata = {
        "corpus_fingerprint": corpus.fingerprint,
        "kind": kind,
        "steps": str(steps),
        "batch_size": str(BATCH_SIZE),
        "learning_rate": str(LEARNING_RATE),
        "warmup_steps": str(round(WARMUP_FRACTION * steps)),
        "decay": str(DECAY),
        "disc_weight": str(DISC_WEIGHT) if kind == "rtd" else "",
        "share_embeddings": str(SHARE_EMBEDDINGS) if kind == "rtd" else "",
        "seed": str(SEED),
        "vocab_size": str(vocab.size),
        "encoder_config": repr(configs["encoder"]),
        "generator_config": repr(configs["generator"]) if kind == "rtd" else "",
        "total_flops": str(int(sum(log["flops"]))),
        "wall_seconds": f"{wall - probe_seconds[0]:.1f}",  # training only, probes left out
        "cpu_seconds": f"{cpu - probe_cpu[0]:.1f}",  # CPU time of training, probes left out
        "threads": "1",
        "probe_task": repr(task),
    }
    return tensors, metadata


def _unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each tensor once: shared embeddings appear under several names in
    ``state_dict()``, and the first name is kept (safetensors stores no aliases)."""
    seen, state = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            state[name] = tensor
    return state


def train_mlm(steps: int | None = None, progress: bool = True):
    """Lesson 6, §4: an MLM encoder (d=128, L=2) on the corpus; probed at five points."""
    return _run("mlm", steps, progress)


def train_rtd(steps: int | None = None, progress: bool = True):
    """Lesson 6, §4: ELECTRA (generator d=64 + discriminator d=128) at the MLM run's FLOPs."""
    return _run("rtd", steps, progress)


RECIPES = {"l6-mlm": train_mlm, "l6-rtd": train_rtd}


def load_recipe_model(name: str) -> tuple[nn.Module, dict[str, torch.Tensor], dict[str, str]]:
    """(model, tensors, metadata) of a committed Lesson 6 artefact: the TinyLM of ``l6-mlm`` or
    the Electra (generator and discriminator) of ``l6-rtd``, weights loaded, in eval mode."""
    if name not in RECIPES:
        raise ValueError(f"name must be one of {list(RECIPES)}, got {name!r}.")
    tensors, metadata = load_artefact(name)
    vocab_size = int(metadata["vocab_size"])
    encoder = EncoderConfig(vocab_size=vocab_size, **ENCODER_SIZES)
    if name == "l6-mlm":
        model = TinyLM(encoder, causal=False)
    else:
        model = Electra(EncoderConfig(vocab_size=vocab_size, **GENERATOR_SIZES), encoder,
                        share_embeddings=metadata.get("share_embeddings") == "True")
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    expected = set(_unique_state(model))  # every tensor once; aliases follow the shared module
    if set(state) != expected:
        raise ValueError(f"the artefact {name!r} does not match the model: missing "
                         f"{sorted(expected - set(state))}, unexpected "
                         f"{sorted(set(state) - expected)}. Retrain it with "
                         f"`python -m encoderlab train {name}`.")
    model.load_state_dict(state, strict=False)
    model.eval()
    return model, tensors, metadata

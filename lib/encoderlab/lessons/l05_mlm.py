"""Masked language modelling on the course's offline corpus (Lesson 5).

The objective itself lives in :mod:`encoderlab.objectives` (``mlm_corrupt`` and ``mlm_loss``).
This module holds what Lesson 5 builds on top of it:

- :func:`corpus_data`: the Python-documentation corpus tokenized with a :class:`CompactVocab`;
- :func:`tiny_config`, :func:`train_tiny_lm`: the small encoder trained with MLM
  (:func:`~encoderlab.objectives.mlm_model_loss` on a fresh corruption of every batch, half the
  sentences cut early by :func:`cut_at_random`);
- :func:`held_out_loss`, :func:`train_selected`: training that evaluates the held-out
  validation loss every few steps and keeps the best checkpoint;
- :func:`train_causal_selected`: the same network under the causal mask, trained next-token on
  the same corpus, for §5's comparison;
- :data:`RECIPES` (``l5-mlm``, ``l5-causal``, ``l5-causal-drop``) for
  ``python -m encoderlab train NAME``, and
  :func:`load_tiny_lm` to read it back (:func:`check_artefact_data` refuses other data);
- what the trained encoder predicts for hidden words is in :mod:`encoderlab.lessons.l05_blanks`.

Everything is deterministic given its seeds (and, for the trained artefact, the thread count:
the committed one was made with ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from encoderlab.data import (
    CompactVocab,
    Corpus,
    python_docs_corpus,
    shuffled_batches,
    trim_padding,
)
from encoderlab.encoder import EncoderConfig
from encoderlab.heads import TinyLM
from encoderlab.objectives import mlm_corrupt, mlm_model_loss, next_token_loss
from encoderlab.pretrained import find_weights
from encoderlab.tokenizer import WordPieceTokenizer
from encoderlab.training import load_artefact, train
from encoderlab.validate import check_int, check_positive_int

__all__ = [
    "MAX_LENGTH",
    "TINY_SIZES",
    "TRAINING",
    "RECIPE_STEPS",
    "CorpusData",
    "load_tokenizer",
    "corpus_data",
    "vocab_from_tokens",
    "tiny_config",
    "train_tiny_lm",
    "held_out_halves",
    "count_corruptions",
    "held_out_loss",
    "Selection",
    "train_selected",
    "held_out_next_token_loss",
    "train_causal_selected",
    "load_tiny_lm",
    "check_artefact_data",
    "cut_at_random",
    "CUT_SHARE",
    "RECIPES",
]

MAX_LENGTH = 64  # tokens per sentence, [CLS] and [SEP] included; longer sentences are cut

# The tiny network of Lesson 5: about 1 M parameters, a third of them in the output layer.
TINY_SIZES = {"d_model": 128, "n_heads": 4, "n_layers": 2, "d_ff": 512, "dropout": 0.0}

# How the encoder trains, and the rule for the checkpoint kept: the one with the lowest
# validation loss, measured every ``eval_every`` steps. ``steps`` is the default of
# train_tiny_lm; RECIPE_STEPS sets the committed run.
TRAINING = {"steps": 1500, "batch_size": 32, "lr": 1e-3, "weight_decay": 0.01, "seed": 0,
            "eval_every": 100}

# How long the committed artefacts train (their checkpoints are still chosen by validation loss):
# graded on about 15 % of the positions per step, the encoder still improves after 1,500 steps;
# the decoder is graded at every position, so it sees seven times as many labels per step.
RECIPE_STEPS = {"mlm": 4000, "causal": 1200}


# --- The corpus ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusData:
    """The corpus, its vocabulary and its splits as padded id tensors (Lesson 5, §2).

    The held-out sentences (none shares an 8-word span with training) are cut in two halves by
    :func:`held_out_halves`: ``valid`` chooses the training checkpoint, ``test`` measures it.
    """

    corpus: Corpus
    vocab: CompactVocab
    train_ids: torch.Tensor  # (N_train, n): [CLS] pieces [SEP] [PAD]...
    train_mask: torch.Tensor  # (N_train, n): 1 = real token, 0 = [PAD]
    held_ids: torch.Tensor  # (N_held, n): all held-out sentences
    held_mask: torch.Tensor  # (N_held, n)
    valid: list[str]  # the held-out sentences that choose checkpoints
    test: list[str]  # the held-out sentences that measure the chosen models
    valid_ids: torch.Tensor  # (N_valid, n)
    valid_mask: torch.Tensor  # (N_valid, n)
    test_ids: torch.Tensor  # (N_test, n)
    test_mask: torch.Tensor  # (N_test, n)

    @property
    def held_out_fingerprint(self) -> str:
        """First 16 hex digits of the sha256 of the validation and test sentences."""
        text = "\n".join(self.valid) + "\n\n" + "\n".join(self.test)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        tokens = int(self.train_mask.sum())
        return (f"CorpusData({len(self.corpus.train):,} training sentences ({tokens:,} tokens), "
                f"{len(self.corpus.held_out):,} held out = {len(self.valid)} validation + "
                f"{len(self.test)} test, vocabulary {self.vocab.size:,}, "
                f"fingerprint {self.corpus.fingerprint})")


def count_corruptions(input_ids: torch.Tensor, attention_mask: torch.Tensor, vocab: CompactVocab,
                      draws: int = 20) -> dict:
    """What :func:`~encoderlab.objectives.mlm_corrupt` does over ``draws`` draws (Lesson 5, §2).

    Draw s uses seed s. Returns ``eligible`` (real, non-special positions per draw),
    ``special`` (real positions that are special tokens), ``rates`` (the share of eligible
    positions chosen, one per draw), ``fates`` ([MASK], random, unchanged counts over all draws),
    ``special_hits`` (special or padding positions chosen) and ``random_specials`` (random
    replacements that are special tokens); the last two should be 0.
    """
    check_positive_int(draws, "draws")
    special_ids = torch.tensor(sorted(set(vocab.special_ids)))
    special = torch.isin(input_ids, special_ids)  # (N, n): [CLS] [SEP] [UNK] [PAD] ...
    eligible = (attention_mask == 1) & ~special  # (N, n): the positions that may be chosen
    n_eligible = int(eligible.sum())
    if n_eligible == 0:
        raise ValueError("no real, non-special position to choose: pass sentences with words.")
    rates, fates, special_hits, random_specials = [], [0, 0, 0], 0, 0
    for seed in range(draws):
        g = torch.Generator().manual_seed(seed)
        inputs, labels = mlm_corrupt(input_ids, attention_mask, vocab.special_ids, vocab.size,
                                     generator=g, mask_id=vocab.mask_id)
        chosen = labels != -100  # (N, n)
        rates.append(int(chosen.sum()) / n_eligible)
        special_hits += int((chosen & ~eligible).sum())
        to_mask, kept = chosen & (inputs == vocab.mask_id), chosen & (inputs == input_ids)
        to_random = chosen & ~to_mask & ~kept
        for k, where in enumerate((to_mask, to_random, kept)):
            fates[k] += int(where.sum())
        random_specials += int(torch.isin(inputs[to_random], special_ids).sum())
    return {"eligible": n_eligible, "special": int((special & (attention_mask == 1)).sum()),
            "rates": rates, "fates": fates, "special_hits": special_hits,
            "random_specials": random_specials}


def held_out_halves(sentences: list[str]) -> tuple[list[str], list[str]]:
    """(validation, test): the held-out sentences at even and at odd positions (Lesson 5, §3).

    A checkpoint chosen by its loss on some sentences looks a little better on them than it is;
    measuring it on other sentences keeps the reported numbers honest.
    """
    if isinstance(sentences, str) or len(sentences) < 2:
        raise ValueError("sentences must be a list of at least 2 held-out sentences.")
    return list(sentences[0::2]), list(sentences[1::2])


def load_tokenizer():
    """MiniLM's 30,522-piece WordPiece tokenizer, from the weights the course finds (Lesson 2)."""
    return WordPieceTokenizer.from_vocab_file(find_weights() / "vocab.txt")


@lru_cache(maxsize=2)
def _cached_corpus_data(vocab_tokens: tuple[str, ...] | None, max_length: int) -> CorpusData:
    tokenizer = load_tokenizer()
    corpus = python_docs_corpus()
    if vocab_tokens is None:
        vocab = CompactVocab(tokenizer, corpus.train)
    else:
        vocab = vocab_from_tokens(tokenizer, list(vocab_tokens))
    train_ids, train_mask = vocab.encode(corpus.train, max_length=max_length)
    held_ids, held_mask = vocab.encode(corpus.held_out, max_length=max_length)
    valid, test = held_out_halves(corpus.held_out)
    valid_ids, valid_mask = vocab.encode(valid, max_length=max_length)
    test_ids, test_mask = vocab.encode(test, max_length=max_length)
    return CorpusData(corpus, vocab, train_ids, train_mask, held_ids, held_mask,
                      valid, test, valid_ids, valid_mask, test_ids, test_mask)


def corpus_data(vocab_tokens=None, max_length: int = MAX_LENGTH) -> CorpusData:
    """:func:`~encoderlab.data.python_docs_corpus`, encoded for training (Lesson 5, §2).

    The vocabulary is a :class:`~encoderlab.data.CompactVocab` of MiniLM's WordPiece pieces used
    at least twice in the training sentences, unless ``vocab_tokens`` (a list of tokens, id i =
    position i, e.g. a trained artefact's) is given. The result is cached: calling again is free.
    Tensors are shared with the cache, so clone them before changing them in place.
    """
    check_int(max_length, "max_length", at_least=3)
    tokens = None if vocab_tokens is None else tuple(vocab_tokens)
    return _cached_corpus_data(tokens, max_length)


def vocab_from_tokens(tokenizer, tokens: list[str]) -> CompactVocab:
    """A :class:`CompactVocab` with exactly these ``tokens`` (id i = ``tokens[i]``) (Lesson 5, §2).

    A trained model's output layer is tied to the vocabulary it was trained with; this rebuilds
    that vocabulary from the list saved with the model, whatever corpus the reader's Python ships.
    """
    return CompactVocab.from_tokens(tokenizer, tokens)


# --- The model and its objective ----------------------------------------------------------------


def tiny_config(vocab_size: int, **overrides) -> EncoderConfig:
    """The tiny encoder of Lesson 5: :data:`TINY_SIZES`, ``vocab_size`` outputs, 64 positions."""
    check_int(vocab_size, "vocab_size", at_least=6, what="five specials and one word",
              hint="Pass vocab.size.")
    sizes = {**TINY_SIZES, "n_max": MAX_LENGTH, **overrides}
    return EncoderConfig(vocab_size=vocab_size, **sizes)


def _fresh_mlm_loss(model: TinyLM, input_ids, attention_mask, vocab: CompactVocab,
                    generator: torch.Generator | None) -> torch.Tensor:
    """One MLM step's loss (§2): a fresh corruption (15 %, 80/10/10) drawn from ``generator``
    at every call (dynamic masking), scored by :func:`~encoderlab.objectives.mlm_model_loss`,
    which applies the output layer at the chosen positions only."""
    inputs, labels = mlm_corrupt(input_ids, attention_mask, vocab.special_ids, vocab.size,
                                 generator=generator, mask_id=vocab.mask_id)
    return mlm_model_loss(model, inputs, attention_mask, labels)[0]


OBJECTIVES = ("mlm", "next-token")  # what loss_positions counts (§7)


def train_tiny_lm(
    data: CorpusData,
    steps: int = TRAINING["steps"],
    seed: int = TRAINING["seed"],
    progress: bool = True,
    description: str | None = None,
    **sizes,
) -> tuple[TinyLM, list[float]]:
    """Train the tiny encoder on ``data`` with MLM; return (model, loss per step) (Lesson 5, §3).

    ``TinyLM(config, causal=False)``; every batch has :data:`CUT_SHARE` of its sentences cut
    early (:func:`cut_at_random`) and a new corruption (15 %, 80/10/10). :data:`TRAINING`: batch
    32, AdamW at lr 1e-3, weight decay 0.01, initial weights from ``seed``. ``sizes`` override
    :data:`TINY_SIZES`. The model comes back in eval mode.
    """
    return _train(data, steps, seed, progress, description, None, 0, sizes)


def cut_at_random(input_ids: torch.Tensor, attention_mask: torch.Tensor, sep_id: int,
                  generator: torch.Generator, share: float = 0.5
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut a ``share`` of the sentences at a random point and close them with [SEP] (§3, §5).

    A row ``[CLS] x_1 .. x_k [SEP]`` that is cut keeps ``[CLS] x_1 .. x_c`` for a c drawn
    uniformly from 1..k-1, then ``sep_id``, then padding: an input that ends early, as the
    left-only reading of §5 does, is then something the model has seen in training. Rows with
    fewer than two tokens between [CLS] and [SEP] are left whole. Returns new (ids, mask), (b, n).
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be a probability in [0, 1], got {share}.")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask must have the shape of input_ids "
                         f"{tuple(input_ids.shape)}, got {tuple(attention_mask.shape)}.")
    k = attention_mask.sum(dim=1) - 2  # (b,): tokens between [CLS] and [SEP]
    cut = torch.rand(len(k), generator=generator) < share  # (b,): which rows are cut
    keep = 1 + (torch.rand(len(k), generator=generator) * (k - 1).clamp(min=1)).long()  # 1..k-1
    cut &= k >= 2
    end = torch.where(cut, keep + 1, k + 1)[:, None]  # (b, 1): where [SEP] goes
    columns = torch.arange(input_ids.shape[1])[None, :]  # (1, n)
    ids = input_ids.masked_fill(columns > end, 0).masked_fill(columns == end, sep_id)
    return ids, (columns <= end).to(attention_mask.dtype) * (attention_mask != 0)


CUT_SHARE = 0.5  # the share of training sentences cut early (§3): see cut_at_random


def _train(data, steps, seed, progress, description, after, every, sizes, causal=False):
    """train_tiny_lm's loop; ``after(model, step)`` runs after every ``every`` steps.

    ``causal=True`` trains the same network under the causal mask with next-token prediction
    on whole sentences (the decoder of §5); otherwise MLM on partly cut sentences.
    """
    torch.manual_seed(seed)  # the initial weights
    model = TinyLM(tiny_config(data.vocab.size, **sizes), causal=causal)
    batches = shuffled_batches(data.train_ids, data.train_mask,
                               batch_size=TRAINING["batch_size"], seed=seed)
    if after is not None:
        batches = _calling_after(batches, model, after, every)
    corruption = torch.Generator().manual_seed(seed + 1)  # MLM's draws, separate from the rest
    cuts = torch.Generator().manual_seed(seed + 2)  # which sentences end early, and where

    def loss_fn(m, batch):
        ids, mask = cut_at_random(*batch, data.vocab.sep_id, cuts, CUT_SHARE)
        ids, mask = trim_padding(ids, mask)  # (b, n') each
        return _fresh_mlm_loss(m, ids, mask, data.vocab, corruption)

    def causal_loss_fn(m, batch):
        ids, mask = trim_padding(*batch)  # (b, n') each: whole sentences
        return next_token_loss(m(ids, mask), ids, mask)

    history = train(model, batches, causal_loss_fn if causal else loss_fn, steps=steps,
                    lr=TRAINING["lr"], weight_decay=TRAINING["weight_decay"], seed=seed,
                    progress=progress, description=description or ("causal" if causal else "mlm"))
    return model, history


def _calling_after(batches, model, after, every):
    """The batches, calling ``after(model, step)`` once ``step`` batches have been trained on.

    :func:`~encoderlab.training.train` asks for batch s + 1 only after its optimiser step on
    batch
    s, so the model seen here has taken exactly ``step`` steps.
    """
    for step, batch in enumerate(batches):
        if step and step % every == 0:
            after(model, step)
        yield batch


@torch.no_grad()
def held_out_loss(model: TinyLM, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  vocab: CompactVocab, draws: int = 3, seed: int = 100) -> float:
    """The MLM loss of ``model`` on held-out sentences (whole, none cut) (Lesson 5, §3).

    Averaged over ``draws`` corruptions drawn from seeds ``seed``, ``seed + 1``, ... — the same
    corruptions at every call, so two checkpoints are compared on the same questions.
    """
    check_positive_int(draws, "draws")
    if model.causal:
        raise ValueError("held_out_loss measures the MLM loss of a bidirectional model; "
                         "pass the encoder (TinyLM(config, causal=False)).")
    was_training = model.training
    model.eval()
    loss = sum(_fresh_mlm_loss(model, input_ids, attention_mask, vocab,
                               torch.Generator().manual_seed(seed + s)).item()
               for s in range(draws)) / draws
    model.train(was_training)
    return loss


@torch.no_grad()
def held_out_next_token_loss(model: TinyLM, input_ids: torch.Tensor,
                             attention_mask: torch.Tensor) -> float:
    """The next-token loss of a causal ``model`` on held-out sentences, in nats (Lesson 5, §5)."""
    if not model.causal:
        raise ValueError("held_out_next_token_loss measures a causal model; pass "
                         "TinyLM(config, causal=True) (for the encoder use held_out_loss).")
    was_training = model.training
    model.eval()
    loss = next_token_loss(model(input_ids, attention_mask), input_ids, attention_mask).item()
    model.train(was_training)
    return loss


@dataclass(frozen=True)
class Selection:
    """The validation curve of a run and the checkpoint it chose (Lesson 5, §3)."""

    steps: list[int]  # where the validation loss was measured
    losses: list[float]  # the validation loss there
    best_step: int  # the step whose weights were kept: the lowest validation loss

    @property
    def best_loss(self) -> float:
        return self.losses[self.steps.index(self.best_step)]


def train_selected(
    data: CorpusData,
    steps: int = TRAINING["steps"],
    eval_every: int = TRAINING["eval_every"],
    seed: int = TRAINING["seed"],
    progress: bool = True,
    description: str | None = None,
    **sizes,
) -> tuple[TinyLM, list[float], Selection]:
    """:func:`train_tiny_lm`, keeping the checkpoint with the lowest validation loss (§3).

    Every ``eval_every`` steps, and after the last, :func:`held_out_loss` is measured on
    ``data.valid_ids`` (never on the test half); the weights with the lowest value are
    returned, with the loss of every step and the :class:`Selection`. The training run itself
    is the same as :func:`train_tiny_lm`'s: measuring does not change it.
    """
    check_positive_int(eval_every, "eval_every")
    curve: list[tuple[int, float]] = []
    best: dict = {}

    def measure(model, step):
        loss = held_out_loss(model, data.valid_ids, data.valid_mask, data.vocab)
        curve.append((step, loss))
        if not best or loss < best["loss"]:
            best.update(loss=loss, step=step, state=copy.deepcopy(model.state_dict()))

    model, history = _train(data, steps, seed, progress, description, measure, eval_every,
                            sizes)
    return _select(model, history, curve, best, measure, steps)


def _select(model, history, curve, best, measure, steps):
    """The best checkpoint of a run, its loss history and its :class:`Selection`."""
    if not curve or curve[-1][0] != steps:
        measure(model, steps)  # the final weights are a candidate too
    model.load_state_dict(best["state"])
    model.eval()
    selection = Selection([s for s, _ in curve], [v for _, v in curve], best["step"])
    return model, history, selection


def train_causal_selected(
    data: CorpusData,
    steps: int = TRAINING["steps"],
    eval_every: int = TRAINING["eval_every"],
    seed: int = TRAINING["seed"],
    progress: bool = True,
    **sizes,
) -> tuple[TinyLM, list[float], Selection]:
    """The same network under the causal mask, trained next-token on the same corpus (§5).

    The encoder's recipe with one mask and one loss changed: ``TinyLM(config, causal=True)``,
    :data:`TRAINING` (batch 32, AdamW, lr 1e-3, seed), no dropout unless ``dropout=`` is passed
    (``l5-causal-drop``), whole sentences, and the
    checkpoint with the lowest next-token loss on ``data.valid_ids``, measured every
    ``eval_every`` steps. Returns (model, loss per step, :class:`Selection`).
    """
    check_positive_int(eval_every, "eval_every")
    curve: list[tuple[int, float]] = []
    best: dict = {}

    def measure(model, step):
        loss = held_out_next_token_loss(model, data.valid_ids, data.valid_mask)
        curve.append((step, loss))
        if not best or loss < best["loss"]:
            best.update(loss=loss, step=step, state=copy.deepcopy(model.state_dict()))

    model, history = _train(data, steps, seed, progress, None, measure, eval_every, sizes,
                            causal=True)
    return _select(model, history, curve, best, measure, steps)


# --- Trained artefacts --------------------------------------------------------------------------


def recipe_mlm(steps: int | None = None, progress: bool = True):
    """Lesson 5: the tiny encoder trained with MLM on the Python-docs corpus: the checkpoint with
    the lowest validation loss of :data:`RECIPE_STEPS` ``["mlm"]`` steps (4,000)."""
    data = corpus_data()
    steps = steps or RECIPE_STEPS["mlm"]
    eval_every = min(TRAINING["eval_every"], steps)
    model, history, selection = train_selected(data, steps=steps, eval_every=eval_every,
                                               progress=progress)
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors["history"] = torch.tensor(history, dtype=torch.float32)  # (steps,)
    config = asdict(model.config)
    metadata = {
        "objective": "mlm",
        "causal": str(model.causal),
        "steps": str(steps),
        "training": json.dumps({**TRAINING, "steps": steps, "eval_every": eval_every,
                                "cut_share": CUT_SHARE}),
        "selected_step": str(selection.best_step),
        "validation_curve": json.dumps({"steps": selection.steps,
                                        "losses": [round(v, 6) for v in selection.losses]}),
        "config": json.dumps(config),
        "corpus_fingerprint": data.corpus.fingerprint,
        "held_out_fingerprint": data.held_out_fingerprint,
        "corpus": repr(data.corpus),
        "vocab": "\n".join(data.vocab.tokens),
    }
    return tensors, metadata


def recipe_causal(steps: int | None = None, progress: bool = True):
    """Lesson 5, §5: the same tiny network under the causal mask, trained next-token on the
    same corpus, checkpoint chosen as the encoder's: :data:`RECIPE_STEPS` ``["causal"]`` steps."""
    data = corpus_data()
    steps = steps or RECIPE_STEPS["causal"]
    eval_every = min(TRAINING["eval_every"], steps)
    model, history, selection = train_causal_selected(data, steps=steps, eval_every=eval_every,
                                                      progress=progress)
    return _artefact(model, history, selection, data, "next-token",
                     {**TRAINING, "steps": steps, "eval_every": eval_every})


def _artefact(model, history, selection, data, objective, training):
    """(tensors, metadata) of a trained Lesson 5 model, as :func:`load_tiny_lm` reads them."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors["history"] = torch.tensor(history, dtype=torch.float32)  # (steps,)
    metadata = {
        "objective": objective,
        "causal": str(model.causal),
        "steps": str(training["steps"]),
        "training": json.dumps(training),
        "selected_step": str(selection.best_step),
        "validation_curve": json.dumps({"steps": selection.steps,
                                        "losses": [round(v, 6) for v in selection.losses]}),
        "config": json.dumps(asdict(model.config)),
        "corpus_fingerprint": data.corpus.fingerprint,
        "held_out_fingerprint": data.held_out_fingerprint,
        "corpus": repr(data.corpus),
        "vocab": "\n".join(data.vocab.tokens),
    }
    return tensors, metadata


def recipe_causal_dropout(steps: int | None = None, progress: bool = True,
                          seed: int = TRAINING["seed"]):
    """Lesson 5, §5: the decoder of ``l5-causal`` with dropout 0.1 (seed 0), chosen the same way."""
    data = corpus_data()
    steps = steps or RECIPE_STEPS["causal"]
    eval_every = min(TRAINING["eval_every"], steps)
    model, history, selection = train_causal_selected(data, steps=steps, eval_every=eval_every,
                                                      seed=seed, progress=progress,
                                                      dropout=CAUSAL_DROPOUT)
    return _artefact(model, history, selection, data, "next-token",
                     {**TRAINING, "steps": steps, "eval_every": eval_every, "seed": seed,
                      "dropout": CAUSAL_DROPOUT})


CAUSAL_DROPOUT = 0.1  # the regularised decoder of §5 (BERT's and GPT-2's rate)

RECIPES = {"l5-mlm": recipe_mlm, "l5-causal": recipe_causal,
           "l5-causal-drop": recipe_causal_dropout}


def load_tiny_lm(name: str, artefact=None) -> tuple[TinyLM, list[float], dict[str, str]]:
    """(model, loss history, metadata) of the trained artefact ``l5-mlm`` or ``l5-causal`` (§3, §5).

    ``artefact`` = (tensors, metadata), as :func:`~encoderlab.training.load_artefact` returns,
    reads from memory instead of the committed file. ``metadata["vocab"]`` lists the vocabulary
    the model was trained with (one token per line); rebuild it with :func:`vocab_from_tokens`.
    """
    tensors, metadata = artefact if artefact is not None else load_artefact(name)
    if "config" not in metadata or "history" not in tensors:
        raise ValueError(
            f"{name!r} is not a Lesson 5 model artefact (no config or history in it); "
            "expected one written by `python -m encoderlab train l5-mlm`."
        )
    config = EncoderConfig(**json.loads(metadata["config"]))
    model = TinyLM(config, causal=metadata["causal"] == "True")
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    model.load_state_dict(state)
    model.eval()
    return model, tensors["history"].tolist(), metadata


def check_artefact_data(metadata: dict[str, str], data: CorpusData) -> None:
    """Raise ``ValueError`` unless a Lesson 5 artefact was trained on exactly ``data`` (§3):
    the same corpus fingerprint, the same held-out halves and the same vocabulary."""
    wanted = {"corpus_fingerprint": data.corpus.fingerprint,
              "held_out_fingerprint": data.held_out_fingerprint,
              "vocab": "\n".join(data.vocab.tokens)}
    for key, value in wanted.items():
        theirs = metadata.get(key)
        if theirs != value:
            if key == "vocab":  # a list of tokens: say how many
                theirs, value = (f"{len(v.splitlines())} tokens" if v else repr(v)
                                 for v in (theirs, value))
            else:
                theirs, value = repr(theirs), repr(value)
            raise ValueError(
                f"the artefact {metadata.get('name', '?')!r} was trained on other data: its "
                f"{key} is {theirs}, this library's is {value}. "
                "Reinstall the course library (its frozen corpora and artefacts ship together) "
                f"or retrain with `{metadata.get('command', 'python -m encoderlab train NAME')}`."
            )

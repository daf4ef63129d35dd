"""Masked language modelling on the course's offline corpus, and its causal twin (Lesson 5).

The objective itself lives in :mod:`encoderlab.objectives` (``mlm_corrupt`` and ``mlm_loss``).
This module holds what Lesson 5 builds on top of it:

- :func:`corpus_data`: the Python-documentation corpus tokenized with a :class:`CompactVocab`;
- :func:`tiny_config`, :func:`train_tiny_lm`: the same small network trained as an encoder
  (MLM, :func:`~encoderlab.objectives.mlm_model_loss` on a fresh corruption of every batch) or
  as a decoder (:func:`~encoderlab.objectives.next_token_loss`);
- :func:`held_out_loss`, :func:`train_selected`: training that evaluates the held-out
  validation loss every few steps and keeps the best checkpoint;
- :data:`RECIPES` (``l5-mlm``, ``l5-causal``) for ``python -m encoderlab train NAME``, and
  :func:`load_tiny_lm` to read them back (:func:`check_artefact_data` refuses other data);
- :func:`fill_mask`, :func:`blank_sets`, :func:`blank_accuracy`: what each model predicts for a
  hidden word, the encoder from the whole sentence, the decoder from the words on its left;
- :func:`word_pairs`, :func:`fill_two`: two adjacent hidden words, filled independently from
  one pass or one at a time (why an MLM is a fill-in model, not a generator);
- :func:`loss_positions`: how many positions per sequence carry a loss under each objective.

Everything is deterministic given its seeds (and, for the trained artefacts, the thread count:
the committed ones were made with ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from encoderlab.course.train import load_artefact, train
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
    "held_out_loss",
    "Selection",
    "train_selected",
    "load_tiny_lm",
    "check_artefact_data",
    "fill_mask",
    "BlankSet",
    "blank_sets",
    "blank_hits",
    "blank_accuracy",
    "word_pairs",
    "fill_two",
    "loss_positions",
    "smooth",
    "RECIPES",
]

MAX_LENGTH = 64  # tokens per sentence, [CLS] and [SEP] included; longer sentences are cut

# The tiny network of Lesson 5: about 1 M parameters, a third of them in the output layer.
TINY_SIZES = {"d_model": 128, "n_heads": 4, "n_layers": 2, "d_ff": 512, "dropout": 0.0}

# How both recipes train: the same batches and optimiser for the encoder and the decoder, and
# the same rule for the checkpoint kept: the one with the lowest validation loss, measured every
# ``eval_every`` steps. ``steps`` is the default of train_tiny_lm; RECIPE_STEPS sets each run.
TRAINING = {"steps": 1500, "batch_size": 32, "lr": 1e-3, "weight_decay": 0.01, "seed": 0,
            "eval_every": 100}

# How long each committed artefact trains (its checkpoint is still chosen by validation loss).
# The decoder reaches its validation minimum within 1,500 steps; the encoder, graded on about
# 15 % of the positions per step, still improves there, so its run is longer.
RECIPE_STEPS = {"mlm": 4000, "next-token": TRAINING["steps"]}


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


# --- The model and its two objectives -----------------------------------------------------------


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


OBJECTIVES = ("mlm", "next-token")


def train_tiny_lm(
    data: CorpusData,
    objective: str,
    steps: int = TRAINING["steps"],
    seed: int = TRAINING["seed"],
    progress: bool = True,
    description: str | None = None,
    **sizes,
) -> tuple[TinyLM, list[float]]:
    """Train the tiny network on ``data`` with one objective; return (model, loss per step) (§2).

    - ``"mlm"``: ``TinyLM(config, causal=False)``, the MLM loss on a new corruption per batch;
    - ``"next-token"``: ``TinyLM(config, causal=True)``, the next-token loss.

    Both start from the same initial weights (``seed``) and see the same batches in the same
    order (:data:`TRAINING`: batch 32, AdamW at lr 1e-3, weight decay 0.01). ``sizes`` override
    :data:`TINY_SIZES`. The model comes back in eval mode.
    """
    if objective not in OBJECTIVES:
        raise ValueError(
            f"objective must be one of {OBJECTIVES}, got {objective!r}: 'mlm' trains an encoder "
            "(bidirectional, masked tokens), 'next-token' a decoder (causal mask)."
        )
    return _train(data, objective, steps, seed, progress, description, None, 0, sizes)


def _train(data, objective, steps, seed, progress, description, after, every, sizes):
    """train_tiny_lm's loop; ``after(model, step)`` runs after every ``every`` steps."""
    causal = objective == "next-token"
    torch.manual_seed(seed)  # the initial weights: identical for both objectives
    model = TinyLM(tiny_config(data.vocab.size, **sizes), causal=causal)
    batches = shuffled_batches(data.train_ids, data.train_mask,
                               batch_size=TRAINING["batch_size"], seed=seed)
    if after is not None:
        batches = _calling_after(batches, model, after, every)
    corruption = torch.Generator().manual_seed(seed + 1)  # MLM's draws, separate from the rest

    def loss_fn(m, batch):
        ids, mask = trim_padding(*batch)  # (b, n') each
        if causal:
            return next_token_loss(m(ids, mask), ids, mask)
        return _fresh_mlm_loss(m, ids, mask, data.vocab, corruption)

    history = train(model, batches, loss_fn, steps=steps, lr=TRAINING["lr"],
                    weight_decay=TRAINING["weight_decay"], seed=seed, progress=progress,
                    description=description or objective)
    return model, history


def _calling_after(batches, model, after, every):
    """The batches, calling ``after(model, step)`` once ``step`` batches have been trained on.

    :func:`~encoderlab.course.train.train` asks for batch s + 1 only after its optimiser step on
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
    """The loss of ``model`` on held-out sentences under its own objective (Lesson 5, §3).

    A causal model: the next-token loss at every position. A bidirectional one: the MLM loss,
    averaged over ``draws`` corruptions drawn from seeds ``seed``, ``seed + 1``, ... — the same
    corruptions at every call, so two checkpoints are compared on the same questions.
    """
    check_positive_int(draws, "draws")
    was_training = model.training
    model.eval()
    if model.causal:
        loss = next_token_loss(model(input_ids, attention_mask), input_ids,
                               attention_mask).item()
    else:
        loss = sum(_fresh_mlm_loss(model, input_ids, attention_mask, vocab,
                                   torch.Generator().manual_seed(seed + s)).item()
                   for s in range(draws)) / draws
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
    objective: str,
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

    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}.")
    model, history = _train(data, objective, steps, seed, progress, description, measure,
                            eval_every, sizes)
    if not curve or curve[-1][0] != steps:
        measure(model, steps)  # the final weights are a candidate too
    model.load_state_dict(best["state"])
    model.eval()
    selection = Selection([s for s, _ in curve], [v for _, v in curve], best["step"])
    return model, history, selection


# --- Trained artefacts --------------------------------------------------------------------------


def _recipe(objective: str, steps: int | None, progress: bool):
    data = corpus_data()
    steps = steps or RECIPE_STEPS[objective]
    eval_every = min(TRAINING["eval_every"], steps)
    model, history, selection = train_selected(data, objective, steps=steps,
                                               eval_every=eval_every, progress=progress)
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors["history"] = torch.tensor(history, dtype=torch.float32)  # (steps,)
    config = asdict(model.config)
    metadata = {
        "objective": objective,
        "causal": str(model.causal),
        "steps": str(steps),
        "training": json.dumps({**TRAINING, "steps": steps, "eval_every": eval_every}),
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


def recipe_mlm(steps: int | None = None, progress: bool = True):
    """Lesson 5: the tiny encoder trained with MLM on the Python-docs corpus: the checkpoint with
    the lowest validation loss of :data:`RECIPE_STEPS` ``["mlm"]`` steps (4,000)."""
    return _recipe("mlm", steps, progress)


def recipe_causal(steps: int | None = None, progress: bool = True):
    """Lesson 5: the same network with a causal mask, on the next token: the checkpoint with the
    lowest validation loss of :data:`RECIPE_STEPS` ``["next-token"]`` steps (1,500)."""
    return _recipe("next-token", steps, progress)


RECIPES = {"l5-mlm": recipe_mlm, "l5-causal": recipe_causal}


def load_tiny_lm(name: str, artefact=None) -> tuple[TinyLM, list[float], dict[str, str]]:
    """(model, loss history, metadata) of a trained artefact ``l5-mlm`` or ``l5-causal`` (§2).

    ``artefact`` = (tensors, metadata), as :func:`~encoderlab.course.train.load_artefact` returns,
    reads from memory instead of the committed file. ``metadata["vocab"]`` lists the vocabulary
    the model was trained with (one token per line); rebuild it with :func:`vocab_from_tokens`.
    """
    tensors, metadata = artefact if artefact is not None else load_artefact(name)
    if "config" not in metadata or "history" not in tensors:
        raise ValueError(
            f"{name!r} is not a Lesson 5 model artefact (no config or history in it); "
            "expected one written by `python -m encoderlab train l5-mlm` or `l5-causal`."
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


# --- What the models predict for a hidden word --------------------------------------------------


@torch.no_grad()
def fill_mask(
    model: TinyLM,
    input_ids: torch.Tensor,  # (n,): one sentence, [CLS] ... [SEP]
    position: int,
    mask_id: int,
    k: int = 5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most probable tokens for the hidden token at ``position`` and their probabilities.

    (Lesson 5, §3.) A bidirectional model reads the sentence with ``mask_id`` at ``position`` and
    predicts from its output there; a causal model (``model.causal``) cannot see that position or
    anything after it, so it predicts from its output at ``position - 1`` (its next-token
    distribution given the words on the left). Returns (ids (k,), probabilities (k,)).
    """
    ids = torch.as_tensor(input_ids)
    if ids.dim() != 1:
        raise ValueError(f"input_ids must be one sentence, shape (n,), got {tuple(ids.shape)}.")
    if not 1 <= position < len(ids):
        raise ValueError(
            f"position must be in 1..{len(ids) - 1} (position 0 is [CLS], with nothing on its "
            f"left), got {position}."
        )
    if model.causal:
        logits = model(ids[None, :position])[0, -1]  # (V,): the prediction for position t
    else:
        masked = ids.clone()
        masked[position] = mask_id
        logits = model(masked[None])[0, position]  # (V,)
    probs = torch.softmax(logits, dim=-1)
    top = probs.topk(k)
    return top.indices, top.values


@dataclass(frozen=True)
class BlankSet:
    """One blank per sentence: the sentences, where the blank is and what it hides (§4)."""

    rule: str
    input_ids: torch.Tensor  # (m, n): the original sentences, nothing hidden yet
    attention_mask: torch.Tensor  # (m, n)
    position: torch.Tensor  # (m,): the blank's position t
    answer: torch.Tensor  # (m,): the hidden token's id; (m, 2) for the pairs of word_pairs

    def __len__(self) -> int:
        return len(self.position)

    def right_context(self) -> torch.Tensor:
        """(m,): how many real tokens follow each blank ([SEP] included)."""
        return self.attention_mask.sum(dim=1) - 1 - self.position


BLANK_RULES = {
    "early": "the 2nd word, when the sentence starts with two whole words: left context [CLS] w1",
    "late": "the last whole word, just before the final punctuation: almost all context is left",
}


def _whole_words(tokens: list[str]) -> list[int]:
    """Positions of tokens that are a whole alphabetic word (not split into ## pieces)."""
    keep = []
    for t in range(1, len(tokens) - 1):  # never [CLS] or [SEP]
        token, after = tokens[t], tokens[t + 1]
        if token.isalpha() and not after.startswith("##") and token not in CompactVocab.SPECIALS:
            keep.append(t)
    return keep


def blank_sets(vocab: CompactVocab, sentences: list[str],
               max_length: int = MAX_LENGTH) -> dict[str, BlankSet]:
    """Two sets of single-token blanks in ``sentences``, one blank per sentence (Lesson 5, §4).

    A candidate blank is a whole word: an alphabetic token that is not a ``##`` piece, is not
    followed by one, and has its own id (not [UNK]). :data:`BLANK_RULES` then picks:

    - ``"early"``: the second token, when the first two tokens are both such words: the left
      context is [CLS] and one word, and most of the sentence comes after it;
    - ``"late"``: the last such word, when it is directly followed by the sentence's final
      punctuation and [SEP], so almost the whole sentence is on its left (the control).

    A sentence without such a word is left out of that set.
    """
    ids, mask = vocab.encode(sentences, max_length=max_length)  # (N, n) each
    rows: dict[str, list[tuple[int, int]]] = {rule: [] for rule in BLANK_RULES}
    for i in range(len(sentences)):
        n = int(mask[i].sum())
        tokens = vocab.decode(ids[i, :n])
        words = [t for t in _whole_words(tokens) if ids[i, t] != vocab.unk_id]
        if words[:2] == [1, 2]:  # "[CLS] w1 w2 ...": blank w2, the left context is [CLS] w1
            rows["early"].append((i, 2))
        if words and words[-1] == n - 3 and not tokens[n - 2].isalnum():
            rows["late"].append((i, words[-1]))
    sets = {}
    for rule, picks in rows.items():
        index = torch.tensor([i for i, _ in picks], dtype=torch.long)
        position = torch.tensor([t for _, t in picks], dtype=torch.long)
        sets[rule] = BlankSet(rule, ids[index], mask[index], position, ids[index, position])
    return sets


@torch.no_grad()
def blank_hits(model: TinyLM, blanks: BlankSet, mask_id: int, k: int = 1) -> torch.Tensor:
    """(m,) bool: whether each blank's answer is among ``model``'s ``k`` best guesses (§4)."""
    return _hits_within(_blank_scores(model, blanks, mask_id), blanks, k)


def _hits_within(scores: torch.Tensor, blanks: BlankSet, k: int) -> torch.Tensor:
    top = scores.topk(k, dim=-1).indices  # (m, k)
    return (top == blanks.answer[:, None]).any(dim=1)  # (m,)


def _blank_scores(model: TinyLM, blanks: BlankSet, mask_id: int) -> torch.Tensor:
    """(m, V): each model's scores for the token at each blank, seeing what it may see."""
    m = len(blanks)
    if m == 0:
        raise ValueError("the blank set is empty: there is nothing to score.")
    rows = torch.arange(m)
    if model.causal:
        logits = model(blanks.input_ids, blanks.attention_mask)  # (m, n, V)
        scores = logits[rows, blanks.position - 1]  # (m, V): predicts position t from t - 1
    else:
        inputs = blanks.input_ids.clone()
        inputs[rows, blanks.position] = mask_id
        logits = model(inputs, blanks.attention_mask)  # (m, n, V)
        scores = logits[rows, blanks.position]  # (m, V)
    return scores


@torch.no_grad()
def blank_accuracy(model: TinyLM, blanks: BlankSet, mask_id: int,
                   ks=(1, 5)) -> dict[int, float]:
    """Top-k accuracy of ``model`` on ``blanks``: {k: share of blanks whose answer is in its top k}.

    (Lesson 5, §4.) The encoder reads each sentence with [MASK] at the blank and predicts there;
    the decoder reads the unchanged sentence and predicts the blank from position t - 1, which
    (under its causal mask) has seen only the tokens left of the blank. Both are scored on the
    same blanks and the same answers.
    """
    scores = _blank_scores(model, blanks, mask_id)  # (m, V): one forward pass for every k
    return {k: float(_hits_within(scores, blanks, k).float().mean()) for k in ks}


# --- Two hidden words at once --------------------------------------------------------------------


def word_pairs(vocab: CompactVocab, sentences: list[str],
               max_length: int = MAX_LENGTH) -> BlankSet:
    """Every pair of adjacent whole words in ``sentences``, as two-token blanks (Lesson 5, §4).

    A whole word is what :func:`blank_sets` calls one (alphabetic, its own id, not a ``##``
    piece nor followed by one). A sentence gives one row per pair, so it may appear several
    times. ``position`` (m,) is the first word's position t, ``answer`` (m, 2) the ids at t and
    t + 1. Raises ``ValueError`` if no sentence has such a pair.
    """
    ids, mask = vocab.encode(sentences, max_length=max_length)  # (N, n) each
    picks = []
    for i in range(len(sentences)):
        n = int(mask[i].sum())
        words = {t for t in _whole_words(vocab.decode(ids[i, :n])) if ids[i, t] != vocab.unk_id}
        picks += [(i, t) for t in sorted(words) if t + 1 in words]
    if not picks:
        raise ValueError("no sentence has two adjacent whole words: pass longer sentences.")
    index = torch.tensor([i for i, _ in picks], dtype=torch.long)
    position = torch.tensor([t for _, t in picks], dtype=torch.long)
    answer = torch.stack([ids[index, position], ids[index, position + 1]], dim=1)  # (m, 2)
    return BlankSet("pair", ids[index], mask[index], position, answer)


@torch.no_grad()
def fill_two(model: TinyLM, pairs: BlankSet, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill two adjacent [MASK]s in two ways; return (independent, one_at_a_time), each (m, 2).

    (Lesson 5, §4.) ``independent``: both blanks from one pass, each the argmax of its own
    softmax, which is what a single MLM prediction offers: every masked position is predicted
    from the visible tokens alone, as if the other masked words did not depend on it.
    ``one_at_a_time``: the more confident of the two blanks is filled first with its argmax, and
    the model reads the sentence again to fill the other, now conditioned on the first.
    """
    if model.causal:
        raise ValueError("fill_two needs a bidirectional (MLM) model; a causal model cannot "
                         "read the words after a blank. Pass the encoder.")
    if pairs.answer.dim() != 2 or pairs.answer.shape[1] != 2 or len(pairs) == 0:
        raise ValueError(f"pairs must hold m >= 1 two-token blanks (answer of shape (m, 2)), got "
                         f"answer of shape {tuple(pairs.answer.shape)}; build them with "
                         "word_pairs().")
    rows = torch.arange(len(pairs))  # (m,)
    where = torch.stack([pairs.position, pairs.position + 1], dim=1)  # (m, 2)
    inputs = pairs.input_ids.clone()
    inputs[rows[:, None], where] = mask_id  # both words hidden
    probs = model(inputs, pairs.attention_mask)[rows[:, None], where].softmax(-1)  # (m, 2, V)
    best, independent = probs.max(dim=-1)  # (m, 2) each
    first = best.argmax(dim=1)  # (m,): 0 or 1, the more confident blank
    second = 1 - first
    inputs[rows, where[rows, first]] = independent[rows, first]  # fill it, read again
    logits = model(inputs, pairs.attention_mask)[rows, where[rows, second]]  # (m, V)
    one_at_a_time = independent.clone()
    one_at_a_time[rows, second] = logits.argmax(dim=-1)
    return independent, one_at_a_time


# --- How many positions carry a loss ------------------------------------------------------------


def loss_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids,
                   objective: str, p: float = 0.15) -> torch.Tensor:
    """(b,) float: the expected number of positions that carry a loss in each sequence (§5).

    - ``"mlm"``: ``p`` times the number of real, non-special tokens (the ones
      :func:`~encoderlab.objectives.mlm_corrupt` may choose);
    - ``"next-token"``: every real token but the first is a label, so n_real - 1.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}.")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
            f"got {tuple(attention_mask.shape)}."
        )
    real = attention_mask != 0  # (b, n)
    if objective == "next-token":
        return (real.sum(dim=1) - 1).clamp(min=0).float()
    ordinary = real & ~torch.isin(input_ids, torch.tensor(sorted(set(special_ids))))
    return p * ordinary.sum(dim=1).float()


def smooth(values, window: int = 50) -> list[float]:
    """The running mean of a loss history over the last ``window`` steps (for plots, §3).

    The first ``window - 1`` points average what exists so far, so the curve starts at step 0.
    """
    check_positive_int(window, "window")
    x = torch.as_tensor(list(values), dtype=torch.float64)
    if x.numel() == 0:
        return []
    cumulative = torch.cat([torch.zeros(1, dtype=x.dtype), x.cumsum(0)])  # (len + 1,)
    ends = torch.arange(1, len(x) + 1)
    starts = (ends - window).clamp(min=0)
    return ((cumulative[ends] - cumulative[starts]) / (ends - starts)).tolist()

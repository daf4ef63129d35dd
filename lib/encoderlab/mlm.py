"""Masked language modelling on the course's offline corpus, and its causal twin (Lesson 5).

The objective itself lives in :mod:`encoderlab.objectives` (``mlm_corrupt`` and ``mlm_loss``).
This module holds what Lesson 5 builds on top of it:

- :func:`corpus_data`: the Python-documentation corpus tokenized with a :class:`CompactVocab`;
- :func:`tiny_config`, :func:`masked_lm_loss`, :func:`causal_lm_loss`, :func:`train_tiny_lm`:
  the same small network trained as an encoder (MLM) or as a decoder (next token);
- :data:`RECIPES` (``l5-mlm``, ``l5-causal``) for ``python -m encoderlab.train NAME``, and
  :func:`load_tiny_lm` to read them back;
- :func:`fill_mask`, :func:`blank_sets`, :func:`blank_accuracy`: what each model predicts for a
  hidden word, the encoder from the whole sentence, the decoder from the words on its left;
- :func:`loss_positions`: how many positions per sequence carry a loss under each objective.

Everything is deterministic given its seeds (and, for the trained artefacts, the thread count:
the committed ones were made with ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from .data import CompactVocab, Corpus, python_docs_corpus, shuffled_batches
from .encoder import EncoderConfig
from .heads import TinyLM
from .objectives import IGNORE_INDEX, mlm_corrupt, mlm_loss, next_token_loss
from .train import load_artefact, train

__all__ = [
    "MAX_LENGTH",
    "TINY_SIZES",
    "TRAINING",
    "CorpusData",
    "load_tokenizer",
    "corpus_data",
    "vocab_from_tokens",
    "tiny_config",
    "trim_padding",
    "masked_lm_loss",
    "causal_lm_loss",
    "train_tiny_lm",
    "load_tiny_lm",
    "fill_mask",
    "BlankSet",
    "blank_sets",
    "blank_hits",
    "blank_accuracy",
    "loss_positions",
    "masked_positions_loss",
    "smooth",
    "RECIPES",
]

MAX_LENGTH = 64  # tokens per sentence, [CLS] and [SEP] included; longer sentences are cut

# The tiny network of Lesson 5: about 1 M parameters, a third of them in the output layer.
TINY_SIZES = {"d_model": 128, "n_heads": 4, "n_layers": 2, "d_ff": 512, "dropout": 0.0}

# How both recipes train: the same batches, steps and optimiser for the encoder and the decoder.
TRAINING = {"steps": 1500, "batch_size": 32, "lr": 1e-3, "weight_decay": 0.01, "seed": 0}


# --- The corpus ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusData:
    """The corpus, its vocabulary and both splits as padded id tensors (Lesson 5, §2)."""

    corpus: Corpus
    vocab: CompactVocab
    train_ids: torch.Tensor  # (N_train, n): [CLS] pieces [SEP] [PAD]...
    train_mask: torch.Tensor  # (N_train, n): 1 = real token, 0 = [PAD]
    held_ids: torch.Tensor  # (N_held, n)
    held_mask: torch.Tensor  # (N_held, n)

    def __repr__(self) -> str:
        tokens = int(self.train_mask.sum())
        return (f"CorpusData({len(self.corpus.train):,} training sentences ({tokens:,} tokens), "
                f"{len(self.corpus.held_out):,} held out, vocabulary {self.vocab.size:,}, "
                f"fingerprint {self.corpus.fingerprint})")


def load_tokenizer():
    """MiniLM's 30,522-piece WordPiece tokenizer, from the weights the course finds (Lesson 2)."""
    from .pretrained import find_weights
    from .tokenizer import WordPieceTokenizer

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
    return CorpusData(corpus, vocab, train_ids, train_mask, held_ids, held_mask)


def corpus_data(vocab_tokens=None, max_length: int = MAX_LENGTH) -> CorpusData:
    """:func:`~encoderlab.data.python_docs_corpus`, encoded for training (Lesson 5, §2).

    The vocabulary is a :class:`~encoderlab.data.CompactVocab` of MiniLM's WordPiece pieces used
    at least twice in the training sentences, unless ``vocab_tokens`` (a list of tokens, id i =
    position i, e.g. a trained artefact's) is given. The result is cached: calling again is free.
    Tensors are shared with the cache, so clone them before changing them in place.
    """
    if not isinstance(max_length, int) or max_length < 3:
        raise ValueError(f"max_length must be an int >= 3, got {max_length!r}.")
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
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 6:
        raise ValueError(
            f"vocab_size must be an int >= 6 (five specials and one word), got {vocab_size!r}. "
            "Pass vocab.size."
        )
    sizes = {**TINY_SIZES, "n_max": MAX_LENGTH, **overrides}
    return EncoderConfig(vocab_size=vocab_size, **sizes)


def trim_padding(input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """Drop the columns that are padding in every row: (b, n) -> (b, n') with n' = longest row.

    Batches drawn from a corpus padded to its longest sentence are mostly padding; cutting it
    changes no output for real tokens (Lesson 3, §5) and saves the arithmetic.
    """
    if attention_mask.shape != input_ids.shape or attention_mask.dim() != 2:
        raise ValueError(
            f"input_ids and attention_mask must be (b, n) tensors of one shape, got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}."
        )
    n = max(int(attention_mask.sum(dim=1).max()), 1) if attention_mask.numel() else 1
    return input_ids[:, :n], attention_mask[:, :n]


def masked_lm_loss(
    model: TinyLM,
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n)
    vocab: CompactVocab,
    generator: torch.Generator | None = None,
    p: float = 0.15,
) -> torch.Tensor:
    """One MLM step's loss: corrupt (15 %, 80/10/10), encode, score the chosen positions (§2).

    Equal to ``mlm_loss(model(inputs, attention_mask), labels)`` with ``(inputs, labels) =
    mlm_corrupt(...)``, but the output layer is applied to the chosen positions only (about 15 %
    of them): the other logits would be thrown away by the loss. A fresh corruption is drawn at
    every call (dynamic masking) from ``generator``.
    """
    inputs, labels = mlm_corrupt(input_ids, attention_mask, vocab.special_ids, vocab.size, p=p,
                                 generator=generator, mask_id=vocab.mask_id)
    return masked_positions_loss(model, inputs, attention_mask, labels)[0]


def masked_positions_loss(model: TinyLM, inputs, attention_mask, labels):
    """(loss, logits): the MLM loss of ``model`` with its head applied at the labelled positions
    only, as BERT's implementation does (Lessons 5-6). ``logits`` is (k, V) for the k
    labelled positions, in row-major order. The loss equals
    ``mlm_loss(model(inputs, attention_mask), labels)`` without scoring the other positions."""
    h = model.encode(inputs, attention_mask).last_hidden_state  # (b, n, d)
    chosen = labels != IGNORE_INDEX  # (b, n)
    logits = model.head(h[chosen])  # (k, V)
    return mlm_loss(logits[None], labels[chosen][None]), logits


def causal_lm_loss(
    model: TinyLM,
    input_ids: torch.Tensor,  # (b, n)
    attention_mask: torch.Tensor,  # (b, n)
) -> torch.Tensor:
    """One next-token step's loss: every real position t predicts x_{t+1} (Lesson 5, §4)."""
    return next_token_loss(model(input_ids, attention_mask), input_ids, attention_mask)


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

    - ``"mlm"``: ``TinyLM(config, causal=False)``, :func:`masked_lm_loss` (a new corruption per
      batch);
    - ``"next-token"``: ``TinyLM(config, causal=True)``, :func:`causal_lm_loss`.

    Both start from the same initial weights (``seed``) and see the same batches in the same
    order (:data:`TRAINING`: batch 32, AdamW at lr 1e-3, weight decay 0.01). ``sizes`` override
    :data:`TINY_SIZES`. The model comes back in eval mode.
    """
    if objective not in OBJECTIVES:
        raise ValueError(
            f"objective must be one of {OBJECTIVES}, got {objective!r}: 'mlm' trains an encoder "
            "(bidirectional, masked tokens), 'next-token' a decoder (causal mask)."
        )
    causal = objective == "next-token"
    torch.manual_seed(seed)  # the initial weights: identical for both objectives
    model = TinyLM(tiny_config(data.vocab.size, **sizes), causal=causal)
    batches = shuffled_batches(data.train_ids, data.train_mask,
                               batch_size=TRAINING["batch_size"], seed=seed)
    corruption = torch.Generator().manual_seed(seed + 1)  # MLM's draws, separate from the rest

    def loss_fn(m, batch):
        ids, mask = trim_padding(*batch)  # (b, n') each
        if causal:
            return causal_lm_loss(m, ids, mask)
        return masked_lm_loss(m, ids, mask, data.vocab, generator=corruption)

    history = train(model, batches, loss_fn, steps=steps, lr=TRAINING["lr"],
                    weight_decay=TRAINING["weight_decay"], seed=seed, progress=progress,
                    description=description or objective)
    return model, history


# --- Trained artefacts --------------------------------------------------------------------------


def _recipe(objective: str, steps: int | None, progress: bool):
    data = corpus_data()
    steps = steps or TRAINING["steps"]
    model, history = train_tiny_lm(data, objective, steps=steps, progress=progress)
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors["history"] = torch.tensor(history, dtype=torch.float32)  # (steps,)
    config = asdict(model.config)
    metadata = {
        "objective": objective,
        "causal": str(model.causal),
        "steps": str(steps),
        "training": json.dumps({**TRAINING, "steps": steps}),
        "config": json.dumps(config),
        "corpus_fingerprint": data.corpus.fingerprint,
        "corpus": repr(data.corpus),
        "vocab": "\n".join(data.vocab.tokens),
    }
    return tensors, metadata


def recipe_mlm(steps: int | None = None, progress: bool = True):
    """Lesson 5: the tiny encoder trained with MLM on the Python-docs corpus (1,500 steps)."""
    return _recipe("mlm", steps, progress)


def recipe_causal(steps: int | None = None, progress: bool = True):
    """Lesson 5: the same network with a causal mask, trained on the next token (1,500 steps)."""
    return _recipe("next-token", steps, progress)


RECIPES = {"l5-mlm": recipe_mlm, "l5-causal": recipe_causal}


def load_tiny_lm(name: str, artefact=None) -> tuple[TinyLM, list[float], dict[str, str]]:
    """(model, loss history, metadata) of a trained artefact ``l5-mlm`` or ``l5-causal`` (§2).

    ``artefact`` = (tensors, metadata), as :func:`~encoderlab.train.load_artefact` returns, reads
    from memory instead of the committed file. ``metadata["vocab"]`` lists the vocabulary the model
    was trained with (one token per line); rebuild it with :func:`vocab_from_tokens`.
    """
    tensors, metadata = artefact if artefact is not None else load_artefact(name)
    if "config" not in metadata or "history" not in tensors:
        raise ValueError(
            f"{name!r} is not a Lesson 5 model artefact (no config or history in it); "
            "expected one written by `python -m encoderlab.train l5-mlm` or `l5-causal`."
        )
    config = EncoderConfig(**json.loads(metadata["config"]))
    model = TinyLM(config, causal=metadata["causal"] == "True")
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    model.load_state_dict(state)
    model.eval()
    return model, tensors["history"].tolist(), metadata


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
    answer: torch.Tensor  # (m,): the hidden token's id

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
      context is [CLS] and one word, and most of what decides the blank comes after it;
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
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}.")
    x = torch.as_tensor(list(values), dtype=torch.float64)
    if x.numel() == 0:
        return []
    cumulative = torch.cat([torch.zeros(1, dtype=x.dtype), x.cumsum(0)])  # (len + 1,)
    ends = torch.arange(1, len(x) + 1)
    starts = (ends - window).clamp(min=0)
    return ((cumulative[ends] - cumulative[starts]) / (ends - starts)).tolist()

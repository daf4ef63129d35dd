"""Offline corpora and synthetic tasks, deterministic given a seed (Lessons 3, 5-10).

Nothing here downloads anything: every data set is built from a seed (or from
text that Python and the installed packages ship).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

__all__ = ["BigramLanguage"]


class BigramLanguage:
    """A random toy language whose best possible next-token loss is known exactly (Lesson 3, §3).

    Each of the ``vocab_size`` tokens may be followed by exactly ``branching``
    tokens (chosen at random once, from ``seed``), each with probability
    1 / branching. A sequence starts with a uniformly random token and then
    walks this table.

    Given the past, the next token is uniform over ``branching`` choices, so no
    predictor that sees only the past can have an expected next-token loss
    below ``entropy`` = ln(branching) nats. A model that beats it is reading the
    answer.
    """

    def __init__(self, vocab_size: int = 32, branching: int = 4, seed: int = 0):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
            raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}.")
        if (
            isinstance(branching, bool)
            or not isinstance(branching, int)
            or not 1 <= branching <= vocab_size
        ):
            raise ValueError(
                f"branching must be an int from 1 to vocab_size={vocab_size}, got {branching!r}."
            )
        self.vocab_size, self.branching, self.seed = vocab_size, branching, seed
        g = torch.Generator().manual_seed(seed)
        # successors[x] lists the tokens that may follow x: (V, branching), distinct in each row
        self.successors = torch.stack(
            [torch.randperm(vocab_size, generator=g)[:branching] for _ in range(vocab_size)]
        )

    @property
    def entropy(self) -> float:
        """ln(branching): the entropy of the next token given the past, in nats."""
        return math.log(self.branching)

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """A (batch_size, length) tensor of token ids drawn from the language."""
        if batch_size < 1 or length < 1:
            raise ValueError(
                f"batch_size and length must be positive, got {batch_size} and {length}."
            )
        x = torch.empty(batch_size, length, dtype=torch.long)  # (b, n)
        x[:, 0] = torch.randint(self.vocab_size, (batch_size,), generator=generator)
        for t in range(1, length):
            choice = torch.randint(self.branching, (batch_size,), generator=generator)  # (b,)
            x[:, t] = self.successors[x[:, t - 1], choice]  # one of x_{t-1}'s successors
        return x

    def batches(self, batch_size: int, length: int, seed: int = 0) -> Iterator[torch.Tensor]:
        """An endless, reproducible stream of (batch_size, length) batches."""
        g = torch.Generator().manual_seed(seed)
        while True:
            yield self.sample(batch_size, length, g)

    def is_valid(self, x: torch.Tensor) -> bool:
        """True if every step x_{t-1} -> x_t in ``x`` (b, n) is allowed by the table."""
        allowed = (self.successors[x[:, :-1]] == x[:, 1:, None]).any(dim=-1)  # (b, n-1)
        return bool(allowed.all())

    def __repr__(self) -> str:
        return (
            f"BigramLanguage(vocab_size={self.vocab_size}, branching={self.branching}, "
            f"seed={self.seed}; entropy ln {self.branching} = {self.entropy:.4f} nats)"
        )


# --- Lessons 5-8 ---
# A real-text corpus that every Python installation ships: the language reference's topic
# pages (what `help("if")` prints, in the standard library's pydoc_data) and the docstrings
# of a fixed list of standard-library modules. Nothing is downloaded.

import hashlib  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass  # noqa: E402

__all__ += [  # noqa: F405
    "DOC_MODULES",
    "module_docstrings",
    "sentences_of",
    "python_docs_sentences",
    "Corpus",
    "python_docs_corpus",
    "CompactVocab",
    "shuffled_batches",
]

# Modules whose docstrings join the corpus; pure-Python modules with prose docstrings.
DOC_MODULES = (
    "argparse ast asyncio.events calendar collections configparser contextlib copy csv "
    "dataclasses datetime decimal difflib email.message enum fnmatch fractions functools "
    "gettext glob heapq inspect ipaddress json logging mailbox pathlib pickle pprint queue "
    "random sched secrets shutil smtplib socket statistics string subprocess tarfile tempfile "
    "textwrap threading tkinter.ttk typing unittest.case urllib.parse uuid zipfile"
).split()

_SENTENCE_END = re.compile(r"(?<=[a-z0-9)][.!?])\s+(?=[A-Z])")


def _prose_paragraphs(text: str) -> list[str]:
    """Paragraphs of running text: code, grammar rules, tables and headings are left out.

    Code and grammar are indented by 3 or more spaces; a list item ("* ...") and its
    2-space continuation lines are prose. Emphasis stars are dropped.
    """
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if any(line.startswith(("   ", "\t", ">>>", "...")) for line in lines):
            continue  # indented: code, a grammar rule or a quoted example
        if any(set(line.strip()) <= set("*=-~^+|") for line in lines):
            continue  # a heading with its underline, or a table border
        text = " ".join(line.strip().removeprefix("* ") for line in lines)
        paragraphs.append(text.replace("*", ""))
    return paragraphs


def _is_sentence(s: str) -> bool:
    words = s.split()
    if not 6 <= len(words) <= 40 or not s[0].isupper() or s[-1] not in ".!?":
        return False
    plain = sum(w.strip(".,;:()'\"").isalpha() for w in words)
    return plain >= 0.8 * len(words)  # mostly words, not code or numbers


def module_docstrings(module_names) -> list[str]:
    """The docstrings of each module, its public names and their public methods, in order."""
    texts = []
    with warnings.catch_warnings():  # reading some deprecated aliases' docstrings warns
        warnings.simplefilter("ignore", DeprecationWarning)
        for module_name in module_names:
            try:
                module = importlib.import_module(module_name)
            except ImportError:  # e.g. a Python built without Tk: the fingerprint will differ
                continue
            texts += _docstrings_of(module)
    return texts


def _docstrings_of(module) -> list[str]:
    texts = [inspect.getdoc(module) or ""]
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue  # private, or imported from elsewhere
        texts.append(inspect.getdoc(obj) or "")
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                # methods from the standard library only: other packages (transformers, for
                # one) add methods to standard classes such as logging.Logger when imported
                home = (getattr(member, "__module__", None) or "builtins").split(".")[0]
                standard = home in sys.stdlib_module_names
                if not attr.startswith("_") and callable(member) and standard:
                    texts.append(inspect.getdoc(member) or "")
    return texts


def python_docs_sentences() -> list[str]:
    """English sentences from the documentation shipped with Python, in a fixed order.

    (Lesson 5, §2.) The sources are the language reference's topics
    (``pydoc_data.topics``) and the docstrings in :data:`DOC_MODULES`. Each
    sentence appears once, in order of first appearance. The exact text depends on
    the Python version; :class:`Corpus` records a fingerprint of it.
    """
    from pydoc_data.topics import topics

    texts = [topics[name] for name in sorted(topics)]
    return sentences_of(texts + module_docstrings(DOC_MODULES))


def sentences_of(texts) -> list[str]:
    """The prose sentences of ``texts``, each once, in order of first appearance (Lessons 5-8).

    Paragraphs of code, grammar and headings are dropped; a sentence has 6 to 40 words,
    mostly plain words, and starts with a capital and ends with . ! or ?.
    """
    seen: dict[str, None] = {}
    for text in texts:
        for paragraph in _prose_paragraphs(text):
            for sentence in _SENTENCE_END.split(paragraph):
                sentence = sentence.strip()
                if _is_sentence(sentence):
                    seen.setdefault(sentence, None)
    return list(seen)


@dataclass(frozen=True)
class Corpus:
    """Training and held-out sentences, and a fingerprint of the whole text (Lesson 5, §2)."""

    train: list[str]
    held_out: list[str]
    fingerprint: str  # first 16 hex digits of the sha256 of all sentences

    def __repr__(self) -> str:
        return (
            f"Corpus({len(self.train):,} training sentences, {len(self.held_out):,} held out, "
            f"fingerprint {self.fingerprint})"
        )


def python_docs_corpus(held_out_every: int = 10) -> Corpus:
    """:func:`python_docs_sentences` split by position: every ``held_out_every``-th is held out."""
    if isinstance(held_out_every, bool) or not isinstance(held_out_every, int) \
            or held_out_every < 2:
        raise ValueError(f"held_out_every must be an int >= 2, got {held_out_every!r}.")
    sentences = python_docs_sentences()
    fingerprint = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
    held = [s for i, s in enumerate(sentences) if i % held_out_every == held_out_every - 1]
    train = [s for i, s in enumerate(sentences) if i % held_out_every != held_out_every - 1]
    return Corpus(train=train, held_out=held, fingerprint=fingerprint)


class CompactVocab:
    """The WordPiece tokens that a corpus uses, renumbered 0..V-1 for a small model (Lesson 5).

    Text is split by the full 30,522-token ``tokenizer`` (MiniLM's WordPiece); the
    pieces seen at least ``min_count`` times in ``texts`` keep an id of their own,
    all others become [UNK]. The five specials come first: [PAD]=0, [UNK]=1,
    [CLS]=2, [SEP]=3, [MASK]=4. A small vocabulary keeps the output layer, and so
    training on the CPU, cheap.
    """

    SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

    def __init__(self, tokenizer, texts: list[str], min_count: int = 2):
        if isinstance(texts, str) or not texts:
            raise ValueError("texts must be a non-empty list of strings.")
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be a positive int, got {min_count!r}.")
        self.tokenizer = tokenizer
        counts = Counter(piece for text in texts for piece in tokenizer.tokenize(text))
        kept = sorted(
            (p for p, c in counts.items() if c >= min_count and p not in self.SPECIALS),
            key=lambda p: (-counts[p], p),  # most frequent first, ties alphabetical
        )
        self._set_tokens([*self.SPECIALS, *kept])

    @classmethod
    def from_tokens(cls, tokenizer, tokens: list[str]) -> CompactVocab:
        """The vocabulary with exactly these ``tokens`` (id i = ``tokens[i]``), e.g. the list
        saved with a trained model, whose output layer is tied to it."""
        tokens = list(tokens)
        if tokens[: len(cls.SPECIALS)] != list(cls.SPECIALS):
            raise ValueError(
                f"tokens must start with the specials {list(cls.SPECIALS)}, got "
                f"{tokens[:5]}. Pass the vocabulary saved with the model, in id order."
            )
        if len(set(tokens)) != len(tokens):
            raise ValueError("tokens must be distinct: each token has one id.")
        vocab = cls.__new__(cls)
        vocab.tokenizer = tokenizer
        vocab._set_tokens(tokens)
        return vocab

    def _set_tokens(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.index = {token: i for i, token in enumerate(self.tokens)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = range(5)
        self.special_ids = (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id)

    @property
    def size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, texts: list[str], max_length: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask), each (b, n): [CLS] pieces [SEP], padded to the longest.

        Sentences longer than ``max_length`` tokens (with [CLS] and [SEP]) are cut.
        """
        if isinstance(texts, str):
            raise ValueError("texts must be a list of strings; for one sentence pass [sentence].")
        if not isinstance(max_length, int) or max_length < 3:
            raise ValueError(f"max_length must be an int >= 3, got {max_length!r}.")
        rows = []
        for text in texts:
            pieces = self.tokenizer.tokenize(text)[: max_length - 2]
            ids = [self.index.get(p, self.unk_id) for p in pieces]
            rows.append([self.cls_id, *ids, self.sep_id])
        n = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), n), self.pad_id, dtype=torch.long)  # (b, n)
        attention_mask = torch.zeros((len(rows), n), dtype=torch.long)  # (b, n)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return input_ids, attention_mask

    def decode(self, ids) -> list[str]:
        """The tokens of a sequence of ids (a list or a 1-d tensor)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        bad = [i for i in ids if not 0 <= i < len(self.tokens)]
        if bad:
            raise ValueError(f"ids {bad[:5]} are outside the vocabulary of {len(self.tokens)}.")
        return [self.tokens[i] for i in ids]

    def __repr__(self) -> str:
        return f"CompactVocab({len(self.tokens):,} tokens, specials {list(self.SPECIALS)})"


def shuffled_batches(*tensors: torch.Tensor, batch_size: int, seed: int = 0) -> Iterator[tuple]:
    """An endless stream of batches: rows of ``tensors`` (same first dimension), reshuffled
    every epoch from ``seed`` (Lessons 5-8). Each batch is a tuple of row slices."""
    if not tensors or any(t.shape[0] != tensors[0].shape[0] for t in tensors):
        shapes = [tuple(t.shape) for t in tensors]
        raise ValueError(f"pass one or more tensors with the same number of rows, got {shapes}.")
    rows = tensors[0].shape[0]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")
    batch_size = min(batch_size, rows)
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(rows, generator=g)
        for start in range(0, rows - batch_size + 1, batch_size):  # full batches only
            take = order[start : start + batch_size]
            yield tuple(t[take] for t in tensors)

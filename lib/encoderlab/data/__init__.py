"""Offline corpora and synthetic tasks, deterministic given a seed (Lessons 3, 5-10).

Nothing here downloads anything: every data set is built from a seed, or read from the
frozen corpora shipped in the package (``encoderlab/data/corpora/``: text from the
documentation that CPython 3.11 ships, built once by ``python -m encoderlab data --build`` and
checked by fingerprint on every read, so every Python version reads the same sentences).
In the order of the file:

- :class:`BigramLanguage`, a toy language whose best next-token loss is known (Lesson 3);
- the real-text corpus: sentences of the documentation (:func:`python_docs_corpus`), its
  compact vocabulary (:class:`CompactVocab`), shuffled batches and :func:`trim_padding`;
- held-out splits that share no 8-word span with training (:func:`without_shared_spans`);
- the frozen files (:func:`read_frozen`) and the command that checks or rebuilds them
  (:func:`main`, ``python -m encoderlab data``).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import inspect
import json
import math
import re
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from encoderlab.validate import check_int, check_positive_int

__all__ = [
    "BigramLanguage",
    "DOC_MODULES",
    "TOPIC_SOURCES",
    "module_docstrings",
    "sentences_of",
    "python_docs_sentences",
    "python_docs_sources",
    "SPAN_WORDS",
    "word_spans",
    "without_shared_spans",
    "CORPORA",
    "BUILD_PYTHON",
    "FROZEN",
    "read_frozen",
    "Corpus",
    "python_docs_corpus",
    "CompactVocab",
    "shuffled_batches",
    "trim_padding",
    "build_frozen",
    "main",
]


# --- A toy language with a known entropy (Lesson 3, §3) ------------------------------------------



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
        check_int(vocab_size, "vocab_size", at_least=2)
        check_int(branching, "branching", at_least=1, at_most=vocab_size, what="up to vocab_size")
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


# --- A real-text corpus (Lessons 5-8) -------------------------------------------------------------
# A real-text corpus from the documentation that CPython ships: the language reference's topic
# pages (what `help("if")` prints, in the standard library's pydoc_data) and the docstrings
# of a fixed list of standard-library modules. The text differs between Python versions, so
# the builders below ran once, on Python 3.11, and the lessons read their frozen output
# (encoderlab/data/corpora/, see "Frozen corpora" further down). Nothing is downloaded.

# Modules whose docstrings join the corpus; pure-Python modules with prose docstrings.
DOC_MODULES = (
    "argparse ast asyncio.events calendar collections configparser contextlib copy csv "
    "dataclasses datetime decimal difflib email.message enum fnmatch fractions functools "
    "gettext glob heapq inspect ipaddress json logging mailbox pathlib pickle pprint queue "
    "random sched secrets shutil smtplib socket statistics string subprocess tarfile tempfile "
    "textwrap threading tkinter.ttk typing unittest.case urllib.parse uuid zipfile"
).split()

# Lesson 7's topic task: the sentences of each class come from these parts of the documentation.
TOPIC_SOURCES = {
    "language reference": None,  # pydoc_data.topics: the language reference's pages
    "numbers & dates": "decimal fractions statistics random secrets calendar datetime heapq uuid",
    "files & formats": "pathlib shutil tarfile tempfile zipfile glob fnmatch csv json pickle "
                       "configparser mailbox",
    "networks & concurrency": "socket smtplib email.message urllib.parse ipaddress subprocess "
                              "threading queue sched asyncio.events",
}

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


def _is_prose(s: str) -> bool:
    """A sentence of words: at least 4 words, starts with a capital or a quote, ends with '.:'."""
    words = s.split()
    starts = s[:1].isupper() or s.startswith('"')
    return len(words) >= 4 and starts and s[-1:] in ".:!?"


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
    """English sentences from the documentation that CPython 3.11 ships, in a fixed order.

    (Lesson 5, §2.) The sources are the language reference's topics
    (``pydoc_data.topics``) and the docstrings in :data:`DOC_MODULES`. Each
    sentence appears once, in order of first appearance. Read from the frozen file
    ``corpora/python-docs-sentences.json.gz``, so every Python version gets the same
    3.11 text; :class:`Corpus` records its fingerprint.
    """
    return list(read_frozen("python-docs-sentences")["sentences"])


def python_docs_sources() -> list[str]:
    """Where each sentence of :func:`python_docs_sentences` comes from, in the same order:
    ``"language reference"`` (``pydoc_data.topics``) or the name of the module whose docstrings
    hold it first (Lessons 5-6)."""
    return list(read_frozen("python-docs-sentences")["sources"])


def _build_python_docs_sentences() -> dict[str, list[str]]:
    """Build the frozen corpus from the running Python's documentation (needs Python 3.11)."""
    from pydoc_data.topics import topics

    texts = [topics[name] for name in sorted(topics)]
    sentences = sentences_of(texts + module_docstrings(DOC_MODULES))
    source = dict.fromkeys(sentences_of(texts), "language reference")
    for module_name in DOC_MODULES:  # the first module whose docstrings hold the sentence
        for sentence in sentences_of(module_docstrings([module_name])):
            source.setdefault(sentence, module_name)
    if list(source) != sentences:
        raise RuntimeError("the sources do not cover the sentences in order; check the builder.")
    return {"sentences": sentences, "sources": [source[s] for s in sentences]}


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
    """Training and held-out sentences, and a fingerprint of the whole text (Lesson 5, §2).

    ``dropped`` counts the held-out sentences left out because they share an 8-word span with a
    training sentence (:func:`without_shared_spans`).
    """

    train: list[str]
    held_out: list[str]
    fingerprint: str  # first 16 hex digits of the sha256 of all sentences, before the split
    dropped: int = 0

    def __repr__(self) -> str:
        return (
            f"Corpus({len(self.train):,} training sentences, {len(self.held_out):,} held out "
            f"({self.dropped} dropped: they share {SPAN_WORDS} words with training), "
            f"fingerprint {self.fingerprint})"
        )


def python_docs_corpus(held_out_every: int = 10) -> Corpus:
    """:func:`python_docs_sentences` split by position: every ``held_out_every``-th is held out,
    unless it shares an 8-word span with a training sentence; then it is dropped (Lesson 5, §2).

    Dropping (rather than moving it into training) leaves the training sentences, and so the
    vocabulary and the trained artefacts, exactly as the plain split by position gives them.
    """
    check_int(held_out_every, "held_out_every", at_least=2)
    sentences = python_docs_sentences()
    fingerprint = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
    held = [s for i, s in enumerate(sentences) if i % held_out_every == held_out_every - 1]
    train = [s for i, s in enumerate(sentences) if i % held_out_every != held_out_every - 1]
    kept = without_shared_spans(held, train)
    return Corpus(train=train, held_out=kept, fingerprint=fingerprint,
                  dropped=len(held) - len(kept))


# --- Held-out data that training has not seen (Lessons 5-8) --------------------------------------
# Documentation repeats itself: a held-out sentence can copy a long run of words from a
# training sentence, and then predicting it is recall, not generalisation. Every held-out split
# of the course drops such items.

SPAN_WORDS = 8  # a held-out text may share no run of this many words with the training texts


def word_spans(text: str, n: int = SPAN_WORDS) -> set[tuple[str, ...]]:
    """Every run of ``n`` consecutive words of ``text``, lower-cased (words = runs of letters,
    digits and ``_``; punctuation is ignored). A text of fewer than ``n`` words has none."""
    check_positive_int(n, "n")
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _texts_of(item) -> tuple[str, ...]:
    if isinstance(item, str):
        return (item,)
    if isinstance(item, (tuple, list)) and all(isinstance(t, str) for t in item):
        return tuple(item)
    raise ValueError(f"items must be strings or tuples of strings (e.g. pairs), got {item!r}.")


def without_shared_spans(held_out: list, train: list, n: int = SPAN_WORDS) -> list:
    """The items of ``held_out`` that share no ``n``-word span with any item of ``train``, in
    order (Lessons 5-8). An item is a string or a tuple of strings (a pair: all its texts count).
    ``train`` is never changed: the caller's training set stays what it was."""
    if isinstance(held_out, str) or isinstance(train, str):
        raise ValueError("held_out and train must be lists of texts, not one string.")
    seen = set()
    for item in train:
        for text in _texts_of(item):
            seen |= word_spans(text, n)
    return [item for item in held_out
            if not any(word_spans(text, n) & seen for text in _texts_of(item))]


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
        check_positive_int(min_count, "min_count")
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
    check_positive_int(batch_size, "batch_size")
    batch_size = min(batch_size, rows)
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(rows, generator=g)
        for start in range(0, rows - batch_size + 1, batch_size):  # full batches only
            take = order[start : start + batch_size]
            yield tuple(t[take] for t in tensors)



def trim_padding(input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """Drop the columns that are padding in every row: (b, n, ...) -> (b, n', ...), n' = the
    longest row (Lessons 5-8).

    ``input_ids`` may be ids (b, n) or token vectors (b, n, d); ``attention_mask`` is (b, n).
    Batches drawn from a corpus padded to its longest sentence are mostly padding; cutting it
    changes no output for real tokens (Lesson 3, §5) and saves the arithmetic.
    """
    if attention_mask.dim() != 2 or tuple(input_ids.shape[:2]) != tuple(attention_mask.shape):
        raise ValueError(
            f"input_ids (b, n, ...) and attention_mask (b, n) must share (b, n), got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}."
        )
    n = max(int(attention_mask.sum(dim=1).max()), 1) if attention_mask.numel() else 1
    return input_ids[:, :n], attention_mask[:, :n]


# --- Frozen corpora (Lessons 5-8) ---------------------------------------------------------------
# The lessons read these files, never the running Python's documentation: each is gzip'd JSON,
# checked against its fingerprint (the first 16 hex digits of the sha256 of the uncompressed
# bytes) on every read. `python -m encoderlab data --build` rebuilds them from the builders
# above, on Python 3.11 only, and `--check` verifies them; see corpora/README.md.

CORPORA = Path(__file__).parent / "corpora"
BUILD_PYTHON = (3, 11)  # the documentation the frozen text comes from: CPython 3.11's

FROZEN = {  # name -> fingerprint of corpora/NAME.json.gz, uncompressed
    "python-docs-sentences": "a68fcbc1ea0ffea4",
    "topic-sentences": "dbe240f111d6d005",
    "topic-documents": "04a59c67764374f9",
    "docstring-pairs": "58305eee6f127e0d",
}


def _fingerprint(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


def read_frozen(name: str):
    """The content of the frozen corpus file ``name`` (see :data:`FROZEN`), checked against its
    recorded fingerprint (Lessons 5-8). Raises ``ValueError`` if it is missing or differs."""
    if name not in FROZEN:
        raise ValueError(f"no frozen corpus called {name!r}; the names are {list(FROZEN)}.")
    path = CORPORA / f"{name}.json.gz"
    if not path.is_file():
        raise ValueError(
            f"the frozen corpus {path.name} is missing from {CORPORA}. Reinstall encoderlab "
            "(the files ship with the package) or rebuild them on Python 3.11 with "
            "`python -m encoderlab data --build`."
        )
    raw = gzip.decompress(path.read_bytes())
    if _fingerprint(raw) != FROZEN[name]:
        raise ValueError(
            f"{path.name} has fingerprint {_fingerprint(raw)}, expected {FROZEN[name]}: the file "
            "was changed. Restore it from the repository (the lessons' trained artefacts were "
            "made from the recorded text)."
        )
    return json.loads(raw.decode("utf-8"))


def _build_topic_sentences() -> dict[str, list[str]]:
    """Lesson 7's topic task: each class's sentences, a sentence in two classes dropped."""
    from pydoc_data.topics import topics

    by_class = {}
    for name, modules in TOPIC_SOURCES.items():
        if modules is None:
            texts = [topics[key] for key in sorted(topics)]
        else:
            texts = module_docstrings(modules.split())
        by_class[name] = sentences_of(texts)
    seen = Counter(s for sentences in by_class.values() for s in set(sentences))
    return {name: [s for s in ss if seen[s] == 1] for name, ss in by_class.items()}


def _build_topic_documents() -> dict[str, list[str]]:
    """Lesson 8's documents: each topic's prose sentences (those with any), topics sorted."""
    from pydoc_data.topics import topics

    found = {}
    for name in sorted(topics):
        sentences = [
            s.strip()
            for paragraph in _prose_paragraphs(topics[name])
            for s in _SENTENCE_END.split(paragraph)
            if _is_prose(s.strip())
        ]
        if sentences:
            found[name] = sentences
    return found


def _build_docstring_pairs() -> dict[str, list[list[str]]]:
    """Lesson 8's pairs: the sentences of every docstring that has two or more, in order."""
    docstrings = []
    for doc in module_docstrings(DOC_MODULES):
        sentences = [s.strip() for p in _prose_paragraphs(doc) for s in _SENTENCE_END.split(p)]
        sentences = [s for s in sentences if len(s.split()) >= 4 and s[-1] in ".!?"]
        if len(sentences) >= 2:
            docstrings.append(sentences)
    return {"docstrings": docstrings}


_BUILDERS = {
    "python-docs-sentences": _build_python_docs_sentences,
    "topic-sentences": _build_topic_sentences,
    "topic-documents": _build_topic_documents,
    "docstring-pairs": _build_docstring_pairs,
}


def _serialised(content) -> bytes:
    return json.dumps(content, ensure_ascii=False, indent=0).encode("utf-8")


def build_frozen(out: Path | None = None) -> dict[str, str]:
    """Rebuild every frozen corpus from this Python's documentation; return their fingerprints.

    Runs on Python 3.11 only (:data:`BUILD_PYTHON`), so the text never changes by accident.
    Writes ``out`` (default :data:`CORPORA`); gzip's timestamp is fixed, so the same text gives
    the same bytes.
    """
    if sys.version_info[:2] != BUILD_PYTHON:
        raise ValueError(
            f"the frozen corpora are built from CPython {BUILD_PYTHON[0]}.{BUILD_PYTHON[1]}'s "
            f"documentation; this is Python {sys.version_info[0]}.{sys.version_info[1]}. Run the "
            "command with a 3.11 interpreter (other versions ship other text)."
        )
    out = CORPORA if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fingerprints = {}
    for name, builder in _BUILDERS.items():
        raw = _serialised(builder())
        (out / f"{name}.json.gz").write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
        fingerprints[name] = _fingerprint(raw)
    return fingerprints


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m encoderlab data",
        description="Check the frozen corpora (default), or rebuild them on Python 3.11.",
    )
    parser.add_argument("--build", action="store_true",
                        help="rebuild the files from this Python's documentation (3.11 only)")
    parser.add_argument("--out", type=Path, default=None, help="with --build: write here instead")
    args = parser.parse_args(argv)
    if args.build:
        try:
            built = build_frozen(args.out)
        except ValueError as error:
            parser.error(str(error))
        for name, fingerprint in built.items():
            same = "unchanged" if fingerprint == FROZEN[name] else f"recorded {FROZEN[name]}"
            print(f"{name:24s} {fingerprint}  ({same})")
        if any(built[name] != FROZEN[name] for name in built):
            print("The text changed: record the new fingerprints in encoderlab.data.FROZEN and "
                  "retrain the artefacts of Lessons 5-8 (python -m encoderlab train NAME).")
            return 1
        return 0
    for name in FROZEN:
        read_frozen(name)  # raises if missing or changed
        print(f"{name:24s} {FROZEN[name]}  ok")
    return 0

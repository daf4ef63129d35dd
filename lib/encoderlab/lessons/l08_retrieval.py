"""Sentence vectors and semantic search: pooling, cosine search, recall@k, in-batch negatives
(Lesson 8).

A bi-encoder turns every text into one vector on its own (the encoder, then a pooling), and
search is a matrix product between query vectors and document vectors. This module holds the
pieces Lesson 8 measures with:

- an offline document set, the language reference's topics that every Python ships
  (:func:`topic_documents`), and hand-written queries with known answers (:data:`QUERIES`);
- :func:`sentence_embeddings` (all-MiniLM-L6-v2's own pipeline with ``how="mean"``, or any
  pooling of :func:`encoderlab.heads.pool`), :func:`search`, :func:`recall_at_k`,
  :func:`mean_reciprocal_rank`, :func:`ndcg_at_k`, and a readable BM25 baseline;
- :func:`in_batch_negatives_loss` (InfoNCE, "multiple negatives ranking"), which the tiny
  contrastive run of :mod:`encoderlab.lessons.l08_contrastive` trains with;
- :func:`cross_segment_attention`: how much of a joint ("cross-encoder") pass's attention
  crosses from one text to the other.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.data import read_frozen
from encoderlab.heads import POOLINGS, pool
from encoderlab.stats import sign_test
from encoderlab.validate import check_int, check_positive_int, is_int, shape_of

__all__ = [
    "Documents",
    "topic_documents",
    "QUERIES",
    "query_answers",
    "CachedStates",
    "cache_states",
    "run_block",
    "pool_cached",
    "SENTENCE_MAX_LENGTH",
    "sentence_embeddings",
    "cosine_scores",
    "search",
    "recall_at_k",
    "mean_reciprocal_rank",
    "pair_ranks",
    "diagonal_ranks",
    "first_right_ranks",
    "alignment",
    "uniformity",
    "attention_share",
    "rank_sign_test",
    "compact_pooled_embeddings",
    "mean_pairwise_cosine",
    "word_tokens",
    "bm25_scores",
    "rank_by_scores",
    "ndcg_at_k",
    "in_batch_negatives_loss",
    "cross_segment_attention",
]


# --- The document set (Lesson 8, §3) ----------------------------------------------------------


@dataclass(frozen=True)
class Documents:
    """Named documents: ``names[i]`` is the topic of ``texts[i]``; a fingerprint of the text."""

    names: list[str]
    texts: list[str]
    fingerprint: str  # first 16 hex digits of the sha256 of all names and texts

    def __len__(self) -> int:
        return len(self.texts)

    def index(self, name: str) -> int:
        """The position of the document called ``name``."""
        if name not in self.names:
            raise ValueError(f"no document called {name!r}; the names are {self.names}.")
        return self.names.index(name)

    def __repr__(self) -> str:
        words = sum(len(t.split()) for t in self.texts)
        return (
            f"Documents({len(self.texts)} topics, {words:,} words, "
            f"fingerprint {self.fingerprint})"
        )


def topic_documents(max_words: int = 60) -> Documents:
    """One document per topic of the language reference (``pydoc_data.topics``, what
    ``help("break")`` prints): its first prose sentences, up to about ``max_words`` words.

    (Lesson 8, §3.) Sentences are taken whole until the document has ``max_words`` words or
    more; code, grammar rules and tables are left out (as in :mod:`encoderlab.data`). Topics
    without a prose sentence, and topics whose text repeats an earlier topic's (``else`` is the
    text of ``if``), are skipped. The text is CPython 3.11's, read from the frozen file
    ``corpora/topic-documents.json.gz`` (each topic's prose sentences), so it is the same on
    every Python version; the fingerprint says which text you have.
    """
    check_int(max_words, "max_words", at_least=5)
    names, texts = [], []
    for name, sentences in read_frozen("topic-documents").items():
        taken: list[str] = []
        for sentence in sentences:
            if sum(len(s.split()) for s in taken) >= max_words:
                break
            taken.append(sentence)
        text = " ".join(taken)
        if text and text not in texts:
            names.append(name)
            texts.append(text)
    digest = hashlib.sha256("\n".join(f"{n}\t{t}" for n, t in zip(names, texts)).encode())
    return Documents(names=names, texts=texts, fingerprint=digest.hexdigest()[:16])


# Hand-written queries, in the words of someone who does not know the topic's name, each with
# the topic(s) that answer it. None of them is used for training anywhere in the course.
QUERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("how do I leave a loop early", ("break",)),
    ("skip the rest of this iteration and go on with the next one", ("continue",)),
    ("a statement that does nothing, as a placeholder", ("pass",)),
    ("send a value back from a function to its caller", ("return",)),
    ("stop the program while debugging if a condition I expect is false", ("assert",)),
    ("run some code only when a condition holds", ("if", "else")),
    ("repeat something as long as a condition stays true", ("while",)),
    ("go through the items of a list one by one", ("for",)),
    ("handle an error so that the program does not crash", ("try", "exceptions")),
    ("signal that something went wrong", ("raise", "exceptions")),
    ("make sure a file is closed automatically when I am done", ("with", "context-managers")),
    ("write a small function without a name on one line", ("lambda",)),
    ("change a variable of the outer function from an inner function", ("nonlocal",)),
    ("assign to a module-level variable inside a function", ("global",)),
    ("use code that lives in another file", ("import",)),
    ("remove a name or an item from a list", ("del",)),
    ("define my own type with methods and attributes", ("class",)),
    ("define a reusable piece of code that takes arguments", ("function",)),
    ("produce values lazily, one at a time", ("yield",)),
    ("wait for a coroutine to finish", ("await", "async")),
    ("which values count as false in a condition", ("truth", "booleans")),
    ("raise a number to an exponent", ("power",)),
    ("take part of a sequence between a start and a stop index", ("slicings",)),
    ("check whether a collection contains an element", ("in",)),
    ("fill values into a text template with placeholders", ("formatstrings",)),
    ("make text upper case, split it or strip spaces", ("string-methods",)),
    ("store values under keys and look them up", ("typesmapping", "dict")),
    ("which operators are evaluated before others", ("operator-summary",)),
    ("what a function gives back when it has no result", ("bltin-null-object",)),
    ("add to a variable in place, like x += 1", ("augassign",)),
    ("numbers with a decimal point", ("floating",)),
    ("step through my program line by line to find a bug", ("debugger",)),
    ("move the bits of an integer to the left or right", ("shifting",)),
    ("compare two values to see which is bigger", ("comparisons",)),
)


def query_answers(documents: Documents, queries=QUERIES) -> tuple[list[str], list[set[int]]]:
    """(query texts, answers): ``answers[i]`` is the set of document indices that answer query i.

    Answer topics that ``documents`` lacks are left out (``if`` and ``else`` share one text,
    kept once); a query none of whose answers is present raises a ValueError.
    """
    texts, answers = [], []
    for text, names in queries:
        present = {documents.index(n) for n in names if n in documents.names}
        if not present:
            raise ValueError(
                f"query {text!r} names topics {list(names)}, none of which these documents "
                "have; drop the query or name a topic from documents.names."
            )
        texts.append(text)
        answers.append(present)
    return texts, answers


# --- Pooling into sentence vectors (Lesson 8, §1-2) -------------------------------------------


@dataclass
class CachedStates:
    """Token vectors of a list of texts at one layer, kept batch by batch (Lesson 8, §2, §5).

    Texts are sorted by length before batching, so little padding is computed; ``order[r]`` is
    the index (in the original list) of the text in row r of the concatenated batches.
    """

    hidden: list[torch.Tensor]  # per batch (b, n, d): H^(layer)
    masks: list[torch.Tensor]  # per batch (b, n): 1 = real token, 0 = [PAD]
    order: list[int]
    layer: int  # which hidden state: 0 = H^(0) (embeddings) ... L = H^(L) (last block's output)


def cache_states(tokenizer, model, texts, layer: int = -1, batch_size: int = 16,
                 max_length: int = 256) -> CachedStates:
    """Run the encoder over ``texts`` once and keep the token vectors H^(layer) (Lesson 8, §2).

    ``layer=-1`` keeps the last hidden state (what poolings read); ``layer=-2`` keeps the input
    of the last block, which :func:`pool_cached` can run through a (retrained) last block.
    """
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError("texts must be a non-empty list of strings; for one, pass [text].")
    n_layers = model.config.n_layers
    check_int(layer, "layer", at_least=-n_layers - 1, at_most=n_layers,
              what=f"an index into the {n_layers + 1} hidden states")
    lengths = [len(tokenizer.tokenize(t)) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))  # short texts together
    hidden, masks_ = [], []
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                              max_length=max_length, return_tensors="pt")
            out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"],
                        attention_mask=batch["attention_mask"])
            hidden.append(out.hidden_states[layer])  # (b, n, d)
            masks_.append(batch["attention_mask"])  # (b, n)
    return CachedStates(hidden, masks_, order, layer % (n_layers + 1))


def run_block(block, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """One encoder block on token vectors (b, n, d), with the padding mask (Lesson 8, §5)."""
    mask = masks.padding(attention_mask) if not bool(attention_mask.all()) else None
    return block(hidden, mask, need_weights=False)[0]  # (b, n, d)


def pool_cached(states: CachedStates, how="mean", block=None, normalize: bool = True):
    """Sentence vectors (len(texts), d) in the texts' order from :func:`cache_states`.

    ``how`` is one pooling ("cls", "mean", "max") or a tuple of them (then a dict by name).
    ``block``, if given, runs on the cached vectors first: the last block of the model, or a
    retrained copy of it (Lesson 8, §5).
    """
    names = _poolings(how)
    pooled: dict[str, list[torch.Tensor]] = {h: [] for h in names}
    with torch.no_grad():
        for hidden, mask in zip(states.hidden, states.masks):
            if block is not None:
                hidden = run_block(block, hidden, mask)  # (b, n, d)
            for h in names:
                pooled[h].append(pool(hidden, mask, how=h))  # (b, d)
    inverse = torch.argsort(torch.tensor(states.order))  # row of each text in batch order
    return _vectors(pooled, how, normalize, inverse)


def _poolings(how) -> tuple[str, ...]:
    """The pooling names in ``how``: one of :data:`~encoderlab.heads.POOLINGS`, or a tuple."""
    names = (how,) if isinstance(how, str) else tuple(how)
    bad = [h for h in names if h not in POOLINGS]
    if bad or not names:
        raise ValueError(f"how must be one of {POOLINGS} or a tuple of them, got {how!r}.")
    return names


def _vectors(pooled: dict[str, list[torch.Tensor]], how, normalize: bool, order=None):
    """One (len(texts), d) tensor per pooling from its per-batch parts (rows put back in the
    texts' order by ``order`` if given), L2-normalised if asked; a dict when ``how`` is a tuple."""
    out = {}
    for h, parts in pooled.items():
        vectors = torch.cat(parts) if order is None else torch.cat(parts)[order]  # (texts, d)
        out[h] = F.normalize(vectors, dim=-1) if normalize else vectors
    return out[how] if isinstance(how, str) else out


SENTENCE_MAX_LENGTH = 256  # all-MiniLM-L6-v2's sentence_bert_config.json: max_seq_length


def sentence_embeddings(tokenizer, model, texts, how="mean", normalize: bool = True,
                        batch_size: int = 32, max_length: int = SENTENCE_MAX_LENGTH):
    """(len(texts), d): one vector per text, pooled ``how`` (Lesson 8, §1-§2).

    With the defaults this is all-MiniLM-L6-v2's sentence pipeline: the mean of the real
    tokens' final vectors, L2-normalised, texts cut at 256 tokens. ``how`` = "cls" or "max"
    reads the same token vectors and differs only in :func:`encoderlab.heads.pool`; a tuple of
    poolings gives a dict of them, from one pass of the encoder. Texts are encoded
    ``batch_size`` at a time, shortest first (:func:`cache_states`).
    """
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts \
            or not all(isinstance(t, str) for t in texts):
        raise ValueError(
            f"texts must be a non-empty list of strings, got {type(texts).__name__}. "
            "For one sentence, pass [sentence]."
        )
    check_positive_int(batch_size, "batch_size")
    _poolings(how)
    states = cache_states(tokenizer, model, texts, layer=-1, batch_size=batch_size,
                          max_length=max_length)
    return pool_cached(states, how, normalize=normalize)


def mean_pairwise_cosine(vectors: torch.Tensor) -> float:
    """The mean cosine similarity over all pairs i != j of the rows of ``vectors`` (m, d).

    (Lesson 8, §2.) Near 0 for directions spread over the sphere; near 1 when every vector
    points the same way ("anisotropy"), which leaves little room to tell texts apart.
    """
    if vectors.dim() != 2 or vectors.shape[0] < 2:
        raise ValueError(f"vectors must be (m, d) with m >= 2, got {tuple(vectors.shape)}.")
    unit = F.normalize(vectors.double(), dim=-1)
    m = unit.shape[0]
    c = unit @ unit.T  # (m, m)
    return float((c.sum() - c.diagonal().sum()) / (m * (m - 1)))


# --- Search and its scores (Lesson 8, §3) -----------------------------------------------------


def cosine_scores(query_vecs: torch.Tensor, doc_vecs: torch.Tensor) -> torch.Tensor:
    """(n_q, n_d) cosine similarities between every query and every document (Lesson 8, §3)."""
    for name, x in (("query_vecs", query_vecs), ("doc_vecs", doc_vecs)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            got = shape_of(x)
            raise ValueError(f"{name} must be a 2-d tensor (rows = texts), got {got}.")
    if query_vecs.shape[1] != doc_vecs.shape[1]:
        raise ValueError(
            f"query and document vectors must have the same width, got {query_vecs.shape[1]} "
            f"and {doc_vecs.shape[1]}: embed both with the same model and pooling."
        )
    return F.normalize(query_vecs, dim=-1) @ F.normalize(doc_vecs, dim=-1).T  # (n_q, n_d)


def search(query_vecs: torch.Tensor, doc_vecs: torch.Tensor, k: int = 5):
    """(scores, indices), each (n_q, k): the ``k`` documents with the highest cosine per query,
    best first (Lesson 8, §3). Ties go to the lower index."""
    scores = cosine_scores(query_vecs, doc_vecs)  # (n_q, n_d)
    n_d = scores.shape[1]
    check_int(k, "k", at_least=1, at_most=n_d, what="at most the number of documents")
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]  # (n_q, k)
    return scores.gather(1, order), order


def _check_ranked(ranked, answers, k=None) -> torch.Tensor:
    ranked = torch.as_tensor(ranked)
    if ranked.dim() != 2:
        raise ValueError(f"ranked must be (n_q, r): document indices, best first; got "
                         f"shape {tuple(ranked.shape)}.")
    if len(answers) != ranked.shape[0]:
        raise ValueError(f"answers must have one set per query: {ranked.shape[0]} queries, "
                         f"{len(answers)} answer sets.")
    if k is not None:
        check_int(k, "k", at_least=1, at_most=ranked.shape[1],
                  what="at most the ranked documents per query",
                  hint="Search with a larger k first.")
    return ranked


def recall_at_k(ranked, answers, k: int) -> float:
    """The share of queries with at least one right document among their first ``k`` (Lesson 8, §3).

    ``ranked`` is (n_q, r), document indices best first (``search(...)[1]``); ``answers[i]``
    is the set of the right documents for query i.
    """
    ranked = _check_ranked(ranked, answers, k)
    hits = [bool(set(row[:k].tolist()) & set(a)) for row, a in zip(ranked, answers)]
    return sum(hits) / len(hits)


def mean_reciprocal_rank(ranked, answers) -> float:
    """The mean over queries of 1 / (rank of the first right document), 0 if none is ranked."""
    ranked = _check_ranked(ranked, answers)
    total = 0.0
    for row, a in zip(ranked.tolist(), answers):
        rank = next((r for r, i in enumerate(row, start=1) if i in a), None)
        total += 1.0 / rank if rank else 0.0
    return total / len(answers)


def pair_ranks(a_vecs: torch.Tensor, b_vecs: torch.Tensor) -> torch.Tensor:
    """(N,) long: the rank of b_i among all rows of ``b_vecs`` for the query a_i (Lesson 8, §3).

    For a paired task, where row i of ``a_vecs`` belongs with row i of ``b_vecs`` and every
    other row is a wrong answer: 1 means the partner scores highest. A wrong row that ties with
    the partner counts as above it, so a model whose vectors are all equal gets rank N, not 1.
    ``(ranks == 1).mean()`` is recall@1, ``(1 / ranks).mean()`` the mean reciprocal rank.
    """
    return diagonal_ranks(cosine_scores(a_vecs, b_vecs))  # (N,)


def diagonal_ranks(scores: torch.Tensor) -> torch.Tensor:
    """(N,) long: the rank of entry (i, i) in row i of a square score matrix (Lesson 8, §3);
    ties count against it, as in :func:`pair_ranks` (which calls this on cosines)."""
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or \
            scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be square: one row per pair and one column per pair "
                         f"(a_vecs and b_vecs with as many rows); got {shape_of(scores)}.")
    partner = scores.diagonal().unsqueeze(1)  # (N, 1)
    above = (scores >= partner).sum(dim=1) - 1  # wrong rows at or above the partner, (N,)
    return above + 1


def first_right_ranks(ranked, answers) -> torch.Tensor:
    """(n_q,) long: the rank of each query's first right document (Lesson 8, §3).

    ``ranked`` is (n_q, r), document indices best first (``search(...)[1]``), ``answers[i]``
    the set of query i's right documents. 1 = a right document came first; a query with no
    right document among its r ranked ones gets r + 1. ``(ranks <= k).mean()`` is recall@k,
    and :func:`rank_sign_test` compares two methods query by query.
    """
    ranked = _check_ranked(ranked, answers)
    out = []
    for row, a in zip(ranked.tolist(), answers):
        out.append(next((r for r, i in enumerate(row, start=1) if i in a), len(row) + 1))
    return torch.tensor(out, dtype=torch.long)


def rank_sign_test(ranks_a, ranks_b, k: int | None = None) -> dict:
    """Which of two methods ranks the right answer higher, pair by pair (Lesson 8, §3).

    ``ranks_a`` and ``ranks_b`` are (N,) ranks of the same N queries' right answers (from
    :func:`pair_ranks` or :func:`first_right_ranks`). Ties say nothing; of the other queries,
    ``a_better`` have a lower (better) rank under a and ``b_better`` under b. With ``k``, only
    hits count: a query goes to a if a ranks a right answer within the first k and b does not
    (the paired comparison behind recall@k). ``p_value`` is the exact two-sided sign test: the
    probability of a split at least this uneven if each query were a fair coin.
    """
    a, b = torch.as_tensor(ranks_a), torch.as_tensor(ranks_b)
    if a.shape != b.shape or a.dim() != 1 or a.numel() == 0:
        raise ValueError(f"ranks_a and ranks_b must be 1-d tensors of the same length (one rank "
                         f"per query); got shapes {tuple(a.shape)} and {tuple(b.shape)}.")
    if k is not None:
        if not is_int(k) or k < 1:
            raise ValueError(f"k must be None (compare ranks) or an int >= 1 (compare hits "
                             f"within k), got {k!r}.")
        a, b = (a > k).long(), (b > k).long()  # 0 = a hit within k, 1 = a miss
    a_better, b_better = int((a < b).sum()), int((b < a).sum())
    return {"a_better": a_better, "b_better": b_better, "p_value": sign_test(a_better, b_better)}


def compact_pooled_embeddings(model, vocab, texts, how=("cls", "mean", "max"),
                              max_length: int = 64, batch_size: int = 64,
                              normalize: bool = True):
    """Pooled sentence vectors from a small encoder with a compact vocabulary (Lesson 8, §3).

    ``model`` is one of the course's own encoders, with ``model.encode(input_ids,
    attention_mask)`` (the MLM encoder ``l6-mlm`` of Lesson 6, or an untrained twin), and
    ``vocab`` its :class:`encoderlab.data.CompactVocab`. Texts are cut at ``max_length`` tokens
    (the model's ``n_max``). Returns one pooling's (len(texts), d) vectors, or a dict of them
    when ``how`` is a tuple.
    """
    names = _poolings(how)
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError("texts must be a non-empty list of strings; for one, pass [text].")
    n_max = model.config.n_max
    check_int(max_length, "max_length", at_least=3, at_most=n_max, what="up to the model's n_max")
    pooled: dict[str, list[torch.Tensor]] = {h: [] for h in names}
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            ids, mask = vocab.encode(list(texts[start:start + batch_size]), max_length)  # (b, n)
            hidden = model.encode(ids, mask).last_hidden_state  # (b, n, d)
            for h in names:
                pooled[h].append(pool(hidden, mask, how=h))  # (b, d)
    return _vectors(pooled, how, normalize)


# --- A lexical baseline: BM25 (Lesson 8, §3) --------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")
# Words that carry no topic: without this list they would dominate short queries.
STOP_WORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its my of on one or so "
    "that the this to what when which with".split()
)


def word_tokens(text: str) -> list[str]:
    """Lower-case words of ``text``, without :data:`STOP_WORDS`."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def bm25_scores(query_texts, doc_texts, k1: float = 1.2, b: float = 0.75) -> torch.Tensor:
    """(n_q, n_d) Okapi BM25 scores of every query against every document (Lesson 8, §3).

    score(q, d) = sum over the words w of q (repeats count) that occur in d of
    idf(w) * tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl)), with tf the count of w in d,
    |d| the document's length in words, avgdl the mean length, and
    idf(w) = ln(1 + (N - df + 0.5) / (df + 0.5)) for N documents of which df contain w.
    ``k1`` caps what repeats of a word add; ``b`` discounts long documents.
    """
    if k1 < 0 or not 0 <= b <= 1:
        raise ValueError(f"k1 must be >= 0 and b in [0, 1] (the usual values: 1.2 and 0.75), "
                         f"got k1={k1!r}, b={b!r}.")
    if isinstance(doc_texts, str) or not doc_texts:
        raise ValueError("doc_texts must be a non-empty list of strings.")
    docs = [Counter(word_tokens(t)) for t in doc_texts]
    lengths = torch.tensor([float(sum(d.values())) for d in docs])  # (n_d,)
    norm = k1 * (1 - b + b * lengths / lengths.mean().clamp(min=1e-9))  # (n_d,)
    df = Counter(w for d in docs for w in d)
    n = len(docs)
    scores = torch.zeros(len(query_texts), n)  # (n_q, n_d)
    for i, text in enumerate(query_texts):
        for w in word_tokens(text):
            if w not in df:
                continue
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            tf = torch.tensor([float(d[w]) for d in docs])  # (n_d,)
            scores[i] += idf * tf * (k1 + 1) / (tf + norm)
    return scores


def rank_by_scores(scores: torch.Tensor) -> torch.Tensor:
    """(n_q, n_d) long: document indices of each row of ``scores``, best first; ties keep the
    lower index first (Lesson 8, §3)."""
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
        raise ValueError(f"scores must be a 2-d tensor (queries x documents), got "
                         f"{shape_of(scores)}.")
    return torch.sort(scores, dim=1, descending=True, stable=True).indices


def ndcg_at_k(ranked, answers, k: int = 10) -> float:
    """Mean nDCG@k with binary relevance (Lesson 8, §3).

    DCG@k = sum over the first k ranks r of rel_r / log2(r + 1), with rel_r = 1 for a right
    document; it is divided by the best DCG@k possible (all right documents first), so a
    query scores 1 when its right documents fill the top ranks. ``ranked`` is (n_q, r) with
    r >= k, ``answers[i]`` the set of query i's right documents (at least one).
    """
    ranked = _check_ranked(ranked, answers, k)
    total = 0.0
    for row, right in zip(ranked[:, :k].tolist(), answers):
        if not right:
            raise ValueError("every query needs at least one right document for nDCG.")
        dcg = sum(1 / math.log2(r + 1) for r, j in enumerate(row, start=1) if j in right)
        ideal = sum(1 / math.log2(r + 1) for r in range(1, min(len(right), k) + 1))
        total += dcg / ideal
    return total / len(answers)


# --- Training with in-batch negatives (Lesson 8, §5) ------------------------------------------


def in_batch_negatives_loss(a: torch.Tensor, b: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """InfoNCE with in-batch negatives (Lesson 8, §5): row i of ``a`` should match row i of ``b``.

    S = scale · cos(a_i, b_j) is a (B, B) matrix of logits; the loss is the cross-entropy of
    each row against its diagonal entry, so the B - 1 other texts of the batch are the
    negatives. ``scale`` = 1 / temperature; sentence-transformers' MultipleNegativesRankingLoss
    uses 20.
    """
    if a.dim() != 2 or a.shape != b.shape:
        raise ValueError(f"a and b must be (B, d) with the same shape, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}: row i of a pairs with row i of b.")
    logits = scale * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T  # (B, B)
    labels = torch.arange(a.shape[0], device=a.device)  # the partner of row i is column i
    return F.cross_entropy(logits, labels)


def alignment(a: torch.Tensor, b: torch.Tensor) -> float:
    """E ||e(a_i) - e(b_i)||^2 over related pairs of unit vectors (Lesson 8, §5).

    Wang & Isola (2020), "Understanding Contrastive Representation Learning through Alignment
    and Uniformity", §4.1 (with alpha = 2): how close partners sit. 0 = every partner on top of
    its row; lower is better. ``a`` and ``b`` are (N, d), row i of a with row i of b; the rows
    are normalised first.
    """
    if a.dim() != 2 or a.shape != b.shape:
        raise ValueError(f"a and b must be (N, d) with the same shape, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}: row i of a pairs with row i of b.")
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    return float((a - b).pow(2).sum(dim=-1).mean())


def uniformity(x: torch.Tensor, t: float = 2.0) -> float:
    """log E exp(-t ||e(x_i) - e(x_j)||^2) over all pairs i != j (Lesson 8, §5).

    Wang & Isola (2020), §4.1 (with t = 2): how evenly unit vectors cover the sphere. Vectors
    that all point one way give 0 (the largest value); spread ones give a negative number, and
    lower is better. ``x`` is (m, d) with m >= 2; the rows are normalised first.
    """
    if x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"x must be (m, d) with at least two rows, got {tuple(x.shape)}.")
    x = F.normalize(x, dim=-1)
    m = x.shape[0]
    sq = (2 - 2 * x @ x.T).clamp(min=0)  # (m, m): squared distances of unit vectors
    off = ~torch.eye(m, dtype=torch.bool)
    return float(torch.logsumexp(-t * sq[off], dim=0) - math.log(m * (m - 1)))


# --- The joint pass of a cross-encoder (Lesson 8, §4) -----------------------------------------


def cross_segment_attention(attentions, token_type_ids, attention_mask=None,
                            ignore_keys=None) -> torch.Tensor:
    """(L,): per layer, the share of segment A's attention that lands on segment B's tokens.

    (Lesson 8, §4.) ``attentions`` are the L tensors (b, h, n, n) of a pass over
    "[CLS] A [SEP] B [SEP]"; ``token_type_ids`` (b, n) is 0 on A (with [CLS] and the first
    [SEP]) and 1 on B (with the last [SEP]). ``ignore_keys`` (b, n), True where a key of B is
    not to be counted (e.g. the last [SEP]). The share is averaged over heads, over A's real
    query positions and over the batch. In a bi-encoder it is 0 by construction: A and B never
    share a pass.
    """
    if token_type_ids.dim() != 2:
        raise ValueError(f"token_type_ids must be (b, n), got {tuple(token_type_ids.shape)}.")
    real = torch.ones_like(token_type_ids, dtype=torch.bool) if attention_mask is None \
        else attention_mask.bool()  # (b, n)
    a_rows = (token_type_ids == 0) & real  # (b, n): queries of segment A
    counted = (token_type_ids == 1) & real  # (b, n): keys of segment B
    if ignore_keys is not None:
        if ignore_keys.shape != token_type_ids.shape:
            raise ValueError(f"ignore_keys must have the shape of token_type_ids "
                             f"{tuple(token_type_ids.shape)}, got {tuple(ignore_keys.shape)}.")
        counted = counted & ~ignore_keys.bool()
    b_cols = counted.to(torch.float32)  # (b, n)
    shares = []
    for weights in attentions:  # (b, h, n, n)
        if weights.shape[-1] != token_type_ids.shape[1]:
            raise ValueError(f"attention maps of size {weights.shape[-1]} do not match "
                             f"token_type_ids of length {token_type_ids.shape[1]}.")
        to_b = (weights.float() * b_cols[:, None, None, :]).sum(-1).mean(1)  # (b, n)
        shares.append(to_b[a_rows].mean())
    return torch.stack(shares)  # (L,)


def attention_share(attentions, query_rows, keys) -> torch.Tensor:
    """(L,): per layer, the share of the ``query_rows``' attention that lands on ``keys``.

    (Lesson 8, §4.) ``attentions`` are the L tensors (b, h, n, n) of one pass; ``query_rows``
    and ``keys`` are boolean (b, n): which positions' attention to average (over heads, those
    positions and the batch), and which keys to count, e.g. the query segment's tokens and the
    ``[CLS]`` position.
    """
    query_rows, keys = torch.as_tensor(query_rows), torch.as_tensor(keys)
    if query_rows.dtype != torch.bool or keys.dtype != torch.bool \
            or query_rows.shape != keys.shape or query_rows.dim() != 2:
        raise ValueError(f"query_rows and keys must be boolean (b, n) of the same shape, got "
                         f"{query_rows.dtype} {tuple(query_rows.shape)} and {keys.dtype} "
                         f"{tuple(keys.shape)}.")
    cols = keys.to(torch.float32)  # (b, n)
    shares = []
    for weights in attentions:  # (b, h, n, n)
        if weights.shape[-1] != keys.shape[1]:
            raise ValueError(f"attention maps of size {weights.shape[-1]} do not match masks of "
                             f"length {keys.shape[1]}.")
        on_keys = (weights.float() * cols[:, None, None, :]).sum(-1).mean(1)  # (b, n)
        shares.append(on_keys[query_rows].mean())
    return torch.stack(shares)  # (L,)

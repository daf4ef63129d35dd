"""Probes: read one word's vectors out of an encoder and compare them (Lesson 1, §4).

An encoder gives every token a vector that depends on the whole input. To see that, we pull out
the vector of one word ("bank") in several sentences and compare them by cosine similarity:

    tokenizer, model = load_minilm()
    vectors = token_vectors(tokenizer, model, texts, "bank")  # (len(texts), d)
    similarity = cosine_similarity_matrix(vectors)  # (len(texts), len(texts))

A word that WordPiece splits into several pieces ("overflowed" -> over ##flow ##ed) is matched
as a whole word and its pieces' vectors are averaged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from encoderlab import masks
from encoderlab.validate import is_int, shape_of

__all__ = [
    "word_positions",
    "token_vectors",
    "static_embedding",
    "cosine_similarity_matrix",
    "group_similarity",
    "attention_between_words",
    "attention_from_other_words",
    "crossed_similarity",
    "crossed_effects",
]


def _pieces(tokenizer, word: str) -> list[str]:
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"word must be a non-empty string, got {word!r}.")
    pieces = tokenizer.tokenize(word)
    if not pieces:
        raise ValueError(
            f"the word {word!r} gives no WordPiece tokens (the tokenizer drops it as control "
            "characters or whitespace); pass a word with letters in it."
        )
    return pieces


def word_positions(tokenizer, text: str, word: str, occurrence: int = 0) -> list[int]:
    """Positions of ``word``'s WordPiece tokens in ``text`` as the model sees it (Lesson 1, §4).

    Positions count from the [CLS] token at 0, so they index the model's hidden states directly.
    The match is on whole words: "bank" is found in "the bank" but not in "bankrupt", and a word
    split into pieces returns all of their positions. ``occurrence`` picks the k-th match (0 =
    the first). Matching is after the tokenizer's normalisation (lower case, no accents).
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}.")
    pieces = _pieces(tokenizer, word)
    tokens = ["[CLS]", *tokenizer.tokenize(text), "[SEP]"]  # what encode() frames the text with
    k = len(pieces)
    starts = [
        i for i in range(1, len(tokens) - k)  # [CLS] and [SEP] are never the word
        if tokens[i:i + k] == pieces
        and not tokens[i + k].startswith("##")  # the match ends where a word ends
    ]
    if not is_int(occurrence) or occurrence < 0:
        raise ValueError(f"occurrence must be an int >= 0 (0 = the first), got {occurrence!r}.")
    if not starts:
        raise ValueError(
            f"the word {word!r} (tokens {pieces}) does not occur as a whole word in the text "
            f"{text!r}, whose tokens are {tokens}. Pass texts that contain the word, or check "
            "its spelling (matching happens after lower-casing and WordPiece)."
        )
    if occurrence >= len(starts):
        raise ValueError(
            f"the word {word!r} occurs {len(starts)} time(s) in {text!r}, so there is no "
            f"occurrence={occurrence}; pass an occurrence from 0 to {len(starts) - 1}."
        )
    start = starts[occurrence]
    return list(range(start, start + k))


def _check_layer(model, layer) -> None:
    """``layer`` must index one of the model's L + 1 hidden states (negative from the end), or
    be None for all of them."""
    n_states = model.config.n_layers + 1  # H^(0), ..., H^(L)
    if layer is not None and (
        not is_int(layer) or not -n_states <= layer < n_states
    ):
        raise ValueError(
            f"layer must be an int from {-n_states} to {n_states - 1}, or None for all: this "
            f"model has {n_states} hidden states (0 = H^(0), the input; -1 = H^({n_states - 1}), "
            f"the output), got {layer!r}."
        )


def token_vectors(
    tokenizer,
    model,
    texts: Sequence[str] | str,
    word: str,
    layer: int | None = -1,
    occurrence: int = 0,
    causal: bool = False,
) -> torch.Tensor:
    """The vector of ``word`` in each text, from hidden state ``layer`` (Lesson 1, §4).

    ``layer`` indexes the model's L + 1 hidden states: 0 is the input H^(0) (embeddings and
    LayerNorm, before any attention), -1 (the default) the last layer's output H^(L); None
    returns every layer at once. A word made of several WordPieces gets the mean of its pieces'
    vectors. Each text runs on its own, without padding. ``causal=True`` adds
    ``masks.causal(n)`` in every layer, to see what the same network computes when no token may
    look right (Lesson 1, §5; Lesson 3).

    Returns a (len(texts), d) tensor, one row per text; with ``layer=None`` an
    (L + 1, len(texts), d) tensor, one slice per hidden state.
    """
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or not texts:
        raise ValueError(
            f"texts must be a non-empty list of strings, got {texts!r}. "
            "Put a single sentence in a list: token_vectors(tok, model, [text], word)."
        )
    _check_layer(model, layer)
    rows = []
    for text in texts:
        positions = word_positions(tokenizer, text, word, occurrence)
        enc = tokenizer([text], return_tensors="pt")
        n = enc["input_ids"].shape[1]
        with torch.no_grad():
            out = model(**enc, mask=masks.causal(n) if causal else None)
        h = torch.stack(out.hidden_states)[:, 0]  # (L + 1, n, d)
        rows.append(h[:, positions].mean(dim=1))  # (L + 1, d): the mean over the word's pieces
    vectors = torch.stack(rows, dim=1)  # (L + 1, len(texts), d)
    return vectors if layer is None else vectors[layer]


def static_embedding(tokenizer, model, word: str) -> torch.Tensor:
    """The row(s) of the token embedding table E_token for ``word`` (Lesson 1, §4).

    This is what the model knows about the word before it reads any context: one fixed row
    per WordPiece (averaged when the word has several), the same in every sentence. Returns (d,).
    """
    ids = tokenizer.convert_tokens_to_ids(_pieces(tokenizer, word))
    with torch.no_grad():
        return model.embeddings.token.weight[ids].mean(dim=0).clone()  # (d,)


def cosine_similarity_matrix(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    """cos(x_i, y_j) for every pair of rows: (m, d), (k, d) -> (m, k); y defaults to x (Lesson 1).

    Each row is divided by its own length, then the dot products are taken, so the entries lie
    in [-1, 1] and do not depend on how long the vectors are.
    """
    y = x if y is None else y
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            got = shape_of(t)
            raise ValueError(
                f"{name} must be a 2-D tensor (m, d), one vector per row, got {got}. "
                "Stack the vectors with torch.stack first."
            )
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"x and y must have vectors of the same width d, got x {tuple(x.shape)} and "
            f"y {tuple(y.shape)}."
        )
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 1e-12
    x_unit = x / x.norm(dim=1, keepdim=True).clamp_min(eps)  # (m, d): rows of length 1
    y_unit = y / y.norm(dim=1, keepdim=True).clamp_min(eps)  # (k, d)
    return x_unit @ y_unit.T  # (m, k)


def _check_groups(similarity, groups) -> int:
    """m, after checking that ``similarity`` is a square (m, m) tensor and ``groups`` names m
    groups."""
    if not isinstance(similarity, torch.Tensor) or similarity.dim() != 2 or (
        similarity.shape[0] != similarity.shape[1]
    ):
        got = tuple(similarity.shape) if isinstance(similarity, torch.Tensor) else similarity
        raise ValueError(f"similarity must be a square (m, m) tensor, got {got}.")
    m = similarity.shape[0]
    if len(groups) != m:
        raise ValueError(f"groups must name one group per row: {m} rows, {len(groups)} names.")
    return m


def group_similarity(similarity: torch.Tensor, groups: Sequence) -> dict[str, float]:
    """Mean similarity within groups and across groups of a square matrix (Lesson 1, §4).

    ``groups[i]`` names the group of row (and column) i, e.g. the sense of "bank" in sentence i.
    The diagonal (every vector with itself) is left out of "within". Returns
    ``{"within": ..., "cross": ..., "gap": within - cross}``.
    """
    m = _check_groups(similarity, groups)
    names = {name: k for k, name in enumerate(dict.fromkeys(groups))}
    if len(names) < 2:
        raise ValueError(f"group_similarity needs at least two groups, got only {list(names)}.")
    label = torch.tensor([names[g] for g in groups])  # (m,)
    same = label[:, None] == label[None, :]  # (m, m)
    off_diagonal = ~torch.eye(m, dtype=torch.bool)
    if not (same & off_diagonal).any():
        raise ValueError("every group has a single member, so there is no within-group pair.")
    within = similarity[same & off_diagonal].double().mean().item()
    cross = similarity[~same].double().mean().item()
    return {"within": within, "cross": cross, "gap": within - cross}


def _query_and_key_positions(tokenizer, text, query_word, key_words, caller):
    """(query positions, key positions per word, the encoded text) for the two functions below,
    after checking their arguments."""
    if isinstance(key_words, str) or not isinstance(key_words, Sequence) or not key_words:
        raise ValueError(
            f"key_words must be a non-empty list of words, got {key_words!r}. For one word, "
            f"pass a list: {caller}(tok, model, text, 'it', ['dog'])."
        )
    if query_word in key_words:
        raise ValueError(
            f"the query word {query_word!r} is also among the key words {list(key_words)}; "
            "pass the words it might attend to, without the query itself."
        )
    query = word_positions(tokenizer, text, query_word)  # raises if absent
    keys = [word_positions(tokenizer, text, word) for word in key_words]
    return query, keys, tokenizer([text], return_tensors="pt")


def _attention_of(model, enc) -> torch.Tensor:
    """Every attention matrix of one encoded text: (L, h, n, n)."""
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    return torch.stack(out.attentions)[:, 0]  # batch element 0


def attention_between_words(
    tokenizer,
    model,
    text: str,
    query_word: str,
    key_words: Sequence[str],
) -> torch.Tensor:
    """How much ``query_word`` attends to each of ``key_words``, in every head: (L, h, k).

    (Lesson 3, §2: does a head send a pronoun's attention to its antecedent?) Entry
    ``[l, j, m]`` is the weight that the query ``query_word`` puts on ``key_words[m]`` in
    layer ``l + 1``, head ``j + 1``, for ``text`` run on its own. A word split into several
    WordPieces counts as one: its query rows are averaged and its key columns summed, so the
    entries for one query still add up to at most 1. Each word is its first occurrence; the
    query word may not be one of the key words.
    """
    query, keys, enc = _query_and_key_positions(
        tokenizer, text, query_word, key_words, "attention_between_words")
    a = _attention_of(model, enc)  # (L, h, n, n)
    rows = a[:, :, query].mean(dim=2)  # (L, h, n): the query word's row, pieces averaged
    return torch.stack([rows[..., k].sum(dim=-1) for k in keys], dim=-1)  # (L, h, k)


def crossed_similarity(
    similarity: torch.Tensor, senses: Sequence, topics: Sequence
) -> dict[tuple[bool, bool], float]:
    """Mean similarity of the pairs in each cell of a 2 x 2 design: sense by topic (Lesson 1, §4).

    Row (and column) i of the square ``similarity`` matrix belongs to a sentence whose word has
    sense ``senses[i]`` and whose sentence is about ``topics[i]``. Every pair i < j falls in one
    cell, keyed ``(same sense, same topic)``: ``(True, True)``, ``(True, False)``,
    ``(False, True)`` and ``(False, False)``; the value is the mean similarity of its pairs.
    If same-sense pairs from different topics are more alike than different-sense pairs from
    the same topic, the vectors follow the word's sense more than the sentence's topic.
    """
    m = _check_groups(similarity, senses)
    if len(topics) != m:
        raise ValueError(
            f"topics must name one topic per row: {m} rows, {len(topics)} topics. "
            "Give every sentence both a sense and a topic."
        )
    pairs = torch.triu(torch.ones(m, m, dtype=torch.bool), diagonal=1)  # (m, m): i < j

    def same(names):
        index = {name: k for k, name in enumerate(dict.fromkeys(names))}
        label = torch.tensor([index[x] for x in names])  # (m,)
        return label[:, None] == label[None, :]  # (m, m)

    same_sense, same_topic = same(senses), same(topics)
    cells = {}
    for key in ((True, True), (True, False), (False, True), (False, False)):
        cell = pairs & (same_sense == key[0]) & (same_topic == key[1])  # (m, m)
        if not cell.any():
            raise ValueError(
                f"no pair has (same sense, same topic) = {key}: the design needs at least two "
                "sentences in each sense and topic combination, got senses "
                f"{list(senses)} and topics {list(topics)}."
            )
        cells[key] = similarity[cell].double().mean().item()
    return cells


def crossed_effects(
    similarity: torch.Tensor,
    senses: Sequence,
    topics: Sequence,
    draws: int = 1000,
    level: float = 0.9,
    seed: int = 0,
) -> dict[str, tuple[float, float, float]]:
    """The sense effect and the topic effect of a 2 x 2 design, with bootstrap intervals
    (Lesson 1, §4).

    With the cell means of :func:`crossed_similarity` written s_t, s_o (same sense, same or
    other topic) and d_t, d_o (different sense), the sense effect is
    (s_t + s_o - d_t - d_o) / 2, the topic effect (s_t + d_t - s_o - d_o) / 2, and their
    difference is s_o - d_t. Each comes back as ``(value, low, high)``: the value on the
    sentences given, and the central ``level`` interval over ``draws`` resamplings of the
    sentences with replacement *within* each (sense, topic) cell. A pair of copies of one
    sentence is left out, as the diagonal is. Keys: "sense", "topic", "sense - topic".
    """
    m = _check_groups(similarity, senses)
    if len(topics) != m:
        raise ValueError(f"topics must name one topic per row: {m} rows, {len(topics)} topics.")
    if not (isinstance(draws, int) and draws >= 1 and 0 < level < 1):
        raise ValueError(f"draws must be a positive int and 0 < level < 1, got draws={draws!r}, "
                         f"level={level!r}.")
    cells = list(zip(senses, topics, strict=True))
    sense = torch.tensor([s == senses[0] for s in senses])  # (m,) arbitrary labels as 0/1
    topic = torch.tensor([t == topics[0] for t in topics])
    same_sense = sense[:, None] == sense[None, :]  # (m, m)
    same_topic = topic[:, None] == topic[None, :]
    g = torch.Generator().manual_seed(seed)
    index = [torch.arange(m)]  # draw 0: the sentences as given
    members = [torch.tensor([i for i in range(m) if cells[i] == c])  # the rows of each cell
               for c in dict.fromkeys(cells)]
    for _ in range(draws):
        idx = torch.arange(m)
        for rows in members:
            idx[rows] = rows[torch.randint(len(rows), (len(rows),), generator=g)]
        index.append(idx)
    idx = torch.stack(index)  # (draws + 1, m): which sentence fills each slot
    s = similarity.double()[idx[:, :, None], idx[:, None, :]]  # (draws + 1, m, m)
    pairs = torch.triu(torch.ones(m, m, dtype=torch.bool), 1) & (idx[:, :, None] != idx[:, None, :])

    def mean(sense_same, topic_same):
        w = (pairs & (same_sense == sense_same) & (same_topic == topic_same)).double()
        if (w.sum(dim=(1, 2)) == 0).any():
            raise ValueError(
                f"no pair has (same sense, same topic) = {(sense_same, topic_same)}: the design "
                "needs at least two sentences in each sense and topic combination.")
        return (s * w).sum(dim=(1, 2)) / w.sum(dim=(1, 2))  # (draws + 1,)

    s_t, s_o, d_t, d_o = mean(True, True), mean(True, False), mean(False, True), mean(False, False)
    effects = {"sense": (s_t + s_o - d_t - d_o) / 2, "topic": (s_t + d_t - s_o - d_o) / 2,
               "sense - topic": s_o - d_t}
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.double)
    out = {}
    for key, values in effects.items():
        low, high = torch.quantile(values[1:], q).tolist()
        out[key] = (float(values[0]), low, high)
    return out


def attention_from_other_words(
    tokenizer,
    model,
    text: str,
    query_word: str,
    key_words: Sequence[str],
) -> torch.Tensor:
    """The control for :func:`attention_between_words`: what the *other* rows send, (L, h, k).

    (Lesson 3, §2: is a head's weight from "it" to a noun specific to "it", or does every token
    of the sentence look at that noun?) Entry ``[l, j, m]`` is the weight on ``key_words[m]``
    (its pieces summed) in layer ``l + 1``, head ``j + 1``, averaged over every query row that
    is neither ``query_word`` nor one of ``key_words`` — so a noun's own row, which often looks
    at itself, does not count. ``[CLS]``, ``[SEP]`` and punctuation rows are included. The same
    argument checks as :func:`attention_between_words`.
    """
    query, keys, enc = _query_and_key_positions(
        tokenizer, text, query_word, key_words, "attention_from_other_words")
    n = enc["input_ids"].shape[1]
    excluded = set(query).union(*keys)
    others = [r for r in range(n) if r not in excluded]
    if not others:
        raise ValueError(
            f"{text!r} has no token besides {query_word!r} and {list(key_words)}; the control "
            "needs at least one other row."
        )
    a = _attention_of(model, enc)  # (L, h, n, n)
    rows = a[:, :, others].mean(dim=2)  # (L, h, n): the mean row of the other tokens
    return torch.stack([rows[..., k].sum(dim=-1) for k in keys], dim=-1)  # (L, h, k)

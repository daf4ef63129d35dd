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
    "group_separation",
    "sentence_vectors",
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


def group_separation(
    similarity: torch.Tensor, groups: Sequence, ignore: torch.Tensor | None = None
) -> dict[str, float]:
    """How well a similarity matrix separates groups, on a scale that survives anisotropy.

    (Lesson 1, §4.) ``groups[i]`` names the group of row (and column) i. The diagonal is always
    left out; ``ignore`` is an optional boolean (m, m) matrix of further pairs to leave out
    (True = ignore), for instance pairs whose word sits at the same position. Returns

    - ``within``, ``cross``: the mean similarity of same-group and of different-group pairs;
    - ``gap``: within - cross;
    - ``scaled_gap``: (within - cross) / (1 - cross), the gap as a fraction of the room left
      above the cross-group level. When every vector drifts towards one direction (the
      anisotropy of contextual vectors, Ethayarajh 2019) all similarities rise and the raw gap
      shrinks; the scaled gap does not move with that drift. 0 = no separation, 1 = every
      same-group pair identical;
    - ``nearest``: the number of rows whose most similar other row (among the pairs kept) is in
      the same group, out of ``n`` rows that have a pair left.
    """
    m = _check_groups(similarity, groups)
    keep = ~torch.eye(m, dtype=torch.bool)  # (m, m): the pairs that count
    if ignore is not None:
        if not isinstance(ignore, torch.Tensor) or ignore.dtype != torch.bool or (
            ignore.shape != (m, m)
        ):
            is_tensor = isinstance(ignore, torch.Tensor)
            got = (tuple(ignore.shape), ignore.dtype) if is_tensor else ignore
            raise ValueError(
                f"ignore must be a boolean ({m}, {m}) tensor, True for the pairs to leave out, "
                f"got {got}. Build it with a comparison, e.g. positions[:, None] == positions."
            )
        keep &= ~ignore
    names = {name: k for k, name in enumerate(dict.fromkeys(groups))}
    label = torch.tensor([names[g] for g in groups])  # (m,)
    same = label[:, None] == label[None, :]  # (m, m)
    if not (same & keep).any() or not (~same & keep).any():
        raise ValueError(
            "group_separation needs at least one same-group pair and one different-group pair "
            f"left after ignoring pairs; groups were {list(groups)}. Pass at least two groups, "
            "one with two members, and ignore fewer pairs."
        )
    within = similarity[same & keep].double().mean().item()
    cross = similarity[~same & keep].double().mean().item()
    masked = similarity.double().masked_fill(~keep, float("-inf"))  # (m, m)
    has_pair = keep.any(dim=1)  # (m,)
    nearest = masked.argmax(dim=1)  # (m,): the most similar other row
    agree = same[torch.arange(m), nearest] & has_pair
    return {
        "within": within,
        "cross": cross,
        "gap": within - cross,
        "scaled_gap": (within - cross) / (1.0 - cross),
        "nearest": int(agree.sum()),
        "n": int(has_pair.sum()),
    }


def sentence_vectors(
    tokenizer, model, texts: Sequence[str] | str, layer: int | None = -1
) -> torch.Tensor:
    """The mean of every token's vector in each text, from hidden state ``layer`` (Lesson 1, §4).

    This is the sentence embedding that all-MiniLM-L6-v2 is trained to produce (mean pooling
    over all tokens, [CLS] and [SEP] included) when ``layer`` is the last; at other depths it is
    the same average taken earlier. It serves as a control: whatever separates these vectors
    is a property of the whole sentence (its topic), not of one word. ``layer`` indexes the
    L + 1 hidden states as in ``token_vectors`` (None = all). Returns (len(texts), d), or
    (L + 1, len(texts), d) with ``layer=None``.
    """
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError(
            f"texts must be a non-empty list of strings, got {texts!r}. "
            "Put a single sentence in a list: sentence_vectors(tok, model, [text])."
        )
    _check_layer(model, layer)
    rows = []
    for text in texts:
        enc = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            out = model(**enc)
        h = torch.stack(out.hidden_states)[:, 0]  # (L + 1, n, d)
        rows.append(h.mean(dim=1))  # (L + 1, d): the mean over all n tokens
    vectors = torch.stack(rows, dim=1)  # (L + 1, len(texts), d)
    return vectors if layer is None else vectors[layer]


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

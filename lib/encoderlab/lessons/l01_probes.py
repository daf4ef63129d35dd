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
from dataclasses import dataclass

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
    "crossed_effects",
    "crossed_bank_sentences",
    "nearest_agreement",
    "PhraseProbe",
    "phrase_probe",
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

    With the mean similarity of the pairs in each cell written s_t, s_o (same sense, same or
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


# --- The crossed sentences of Lesson 1, §4 ------------------------------------------------------

# Phrases that use "bank" in one sense, each with "the bank" in it; 16 per sense.
BANK_PHRASES = {
    "lender": [
        "we asked the bank for a loan", "she paid her mortgage to the bank",
        "he opened a savings account at the bank", "they borrowed money from the bank",
        "the clerk at the bank cashed his cheque", "our salary goes straight into the bank",
        "i owe the bank a lot of money", "the bank charged us a fee",
        "we got a small business loan from the bank", "she keeps her savings in the bank",
        "the teller at the bank counted the notes", "he went to the bank to withdraw cash",
        "the bank refused to lend us more", "my wages are paid into the bank",
        "the bank raised the interest on our debt", "they robbed the bank at noon"],
    "river": [
        "we sat on the bank of the river", "the boat drifted toward the bank",
        "reeds grew along the bank of the stream", "the water rose over the bank",
        "he fished from the bank", "the children played on the bank",
        "the ducks slept on the bank by the water", "a heron stood on the bank of the pond",
        "we pulled the canoe up the bank", "the willows leaned over the bank of the creek",
        "the river flooded the bank after the rain", "she walked along the bank",
        "the otter slid down the bank into the water", "wild flowers covered the bank of the river",
        "the tide washed mud onto the bank", "frogs croaked on the bank at dusk"],
}
# Opening clauses about one topic, with no "bank" in them; 16 per topic.
TOPIC_CLAUSES = {
    "water": [
        "after a day of fishing on the lake", "when the flood reached the valley",
        "on our sailing trip along the coast", "while the rain filled the streams",
        "near the harbour where the boats were moored", "during the canoe race on the lake",
        "as the waves crashed on the shore", "on a rafting holiday in the mountains",
        "after we swam in the cold sea", "when the snow melted in the hills",
        "on the ferry across the bay", "while the fishermen mended their nets",
        "after the storm flooded the marsh", "when the lake froze in winter",
        "on our walk by the waterfall", "as the ship sailed into the port"],
    "money": [
        "after the stock market crashed", "when interest rates went up",
        "during the housing boom in the city", "while the investors counted their profits",
        "after the company paid its taxes", "when the price of gold fell",
        "as the shares lost half their value", "during the budget meeting at the office",
        "after the firm reported record profits", "when the economy slowed down",
        "during the tax season in april", "while the traders sold their bonds",
        "after the price of oil doubled", "when the rent on our flat went up",
        "as inflation hit ten percent", "during the auction of the old factory"],
}


def crossed_bank_sentences(per_cell: int = 8) -> tuple[list[str], list[str], list[str]]:
    """(texts, senses, topics): "bank" in a 2 x 2 design of sense by topic (Lesson 1, §4).

    Each text is an opening clause about a topic (water or money), a comma, and a phrase that
    uses "bank" in one sense (lender or river): "after the stock market crashed, we sat on the
    bank of the river". ``per_cell`` texts per (sense, topic), in the order lender·water,
    lender·money, river·water, river·money; no phrase and no clause is used twice, so a topic's
    clauses are different words in the two senses, and every text says "the bank".
    """
    if not (is_int(per_cell) and 2 <= per_cell <= 8):
        raise ValueError(f"per_cell must be an int from 2 to 8 (16 phrases and 16 clauses per "
                         f"group are shared by two cells), got {per_cell!r}.")
    texts, senses, topics = [], [], []
    for s, (sense, phrases) in enumerate(BANK_PHRASES.items()):
        for t, (topic, clauses) in enumerate(TOPIC_CLAUSES.items()):
            for i in range(per_cell):
                texts.append(f"{clauses[8 * s + i]}, {phrases[8 * t + i]}")
                senses.append(sense)
                topics.append(topic)
    return texts, senses, topics


# --- Where the sense goes: "bank", the "the" before it, the opening clause (Lesson 1, §4) -------


def nearest_agreement(similarity: torch.Tensor, labels: Sequence) -> int:
    """How many rows' most similar *other* row carries the same label (Lesson 1, §4).

    A 1-nearest-neighbour probe: for each row i of the square ``similarity`` matrix, take the
    column j != i with the highest similarity and count it when ``labels[j] == labels[i]``.
    With two balanced groups of m/2 and no information, about half the rows agree.
    """
    m = _check_groups(similarity, labels)
    if m < 2:
        raise ValueError(f"nearest_agreement needs at least 2 rows, got {m}.")
    others = similarity.double().clone()
    others.fill_diagonal_(float("-inf"))  # a vector is not its own neighbour
    nearest = others.argmax(dim=1).tolist()  # (m,)
    return sum(labels[j] == labels[i] for i, j in enumerate(nearest))


@dataclass
class PhraseProbe:
    """The result of :func:`phrase_probe` (Lesson 1, §4). ``places`` are "bank" (the word),
    "the" (the token before it) and "clause" (the mean of the opening clause's tokens)."""

    senses: list
    topics: list
    vectors: dict  # place -> (L + 1, m, d)
    similarity: dict  # place -> (L + 1, m, m) cosine similarities
    nearest: dict  # (place, "sense" or "topic") -> list over layers of counts out of m
    effects: dict  # place -> list over layers of crossed_effects() dicts

    def table(self) -> str:
        """Per layer, how many of the m vectors have a nearest other vector of the same sense,
        and of the same topic, for each place."""
        places = list(self.vectors)
        m = len(self.senses)
        head = f"{'':6}" + "".join(f"{f'same {kind} (of {m})':^24}" for kind in ("sense", "topic"))
        cols = f"{'layer':<6}" + "".join(f"{p:>8}" for p in places) * 2
        lines = [head, cols]
        for k in range(len(self.nearest[places[0], "sense"])):
            counts = [self.nearest[p, kind][k] for kind in ("sense", "topic") for p in places]
            lines.append(f"{k:<6}" + "".join(f"{c:>8}" for c in counts))
        return "\n".join(lines)


def phrase_probe(tokenizer, model, texts: Sequence[str], senses: Sequence, topics: Sequence,
                 word: str = "bank", draws: int = 500) -> PhraseProbe:
    """Which tokens pick up the sense of ``word``, and when the topic arrives (Lesson 1, §4).

    Each text is an opening clause, a comma, and a phrase in which ``word`` follows "the"
    (the sentences of :func:`crossed_bank_sentences`). At every layer three vectors are read
    per text: ``word`` itself, the "the" before it, and the mean of the clause's tokens. For
    each, the 1-nearest-neighbour counts of :func:`nearest_agreement` (by sense and by topic)
    and the :func:`crossed_effects` with ``draws`` bootstrap resamplings.
    """
    if not (len(texts) == len(senses) == len(topics) >= 4):
        raise ValueError(f"texts, senses and topics must have one entry per sentence (at least "
                         f"4), got {len(texts)}, {len(senses)} and {len(topics)}.")
    rows = {word: [], "the": [], "clause": []}
    for text in texts:
        enc = tokenizer([text], return_tensors="pt")
        tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
        at = word_positions(tokenizer, text, word)
        if "," not in tokens or tokens[at[0] - 1] != "the":
            raise ValueError(f"each text must be 'clause, phrase' with 'the {word}' in the "
                             f"phrase, got {text!r}. Use crossed_bank_sentences().")
        comma = tokens.index(",")
        with torch.no_grad():
            h = torch.stack(model(**enc).hidden_states)[:, 0]  # (L + 1, n, d)
        rows[word].append(h[:, at].mean(dim=1))  # (L + 1, d)
        rows["the"].append(h[:, at[0] - 1])
        rows["clause"].append(h[:, 1:comma].mean(dim=1))  # the clause, without [CLS]
    vectors = {p: torch.stack(v, dim=1) for p, v in rows.items()}  # (L + 1, m, d) each
    similarity = {p: torch.stack([cosine_similarity_matrix(x) for x in v])
                  for p, v in vectors.items()}  # (L + 1, m, m) each
    nearest = {(p, kind): [nearest_agreement(s, labels) for s in similarity[p]]
               for p in similarity for kind, labels in (("sense", senses), ("topic", topics))}
    effects = {p: [crossed_effects(s, senses, topics, draws=draws) for s in similarity[p]]
               for p in similarity}
    return PhraseProbe(list(senses), list(topics), vectors, similarity, nearest, effects)

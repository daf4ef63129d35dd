"""What a trained MLM encoder predicts for hidden words (Lesson 5, §4-§7).

The encoder comes from :mod:`encoderlab.lessons.l05_mlm` (``load_tiny_lm("l5-mlm")``):

- :func:`fill_mask`, :func:`word_blanks`, :func:`cut_right`, :func:`score_blanks`: what the
  encoder predicts for a hidden word, from the whole sentence or from the words on its left;
- :func:`blank_table`: §5's paired comparison, printed as one compact table;
- :func:`word_pairs`, :func:`fill_two`: two adjacent hidden words, filled independently from
  one pass or one at a time (why an MLM is a fill-in model, not a generator);
- :func:`loss_positions`: how many positions per sequence carry a loss under each objective.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from encoderlab import stats
from encoderlab.data import CompactVocab
from encoderlab.heads import TinyLM
from encoderlab.lessons.l05_mlm import MAX_LENGTH, OBJECTIVES
from encoderlab.objectives import mlm_corrupt
from encoderlab.validate import check_positive_int

__all__ = [
    "fill_mask",
    "readable",
    "BlankSet",
    "PLAIN_WORD_MIN_LENGTH",
    "plain_word_positions",
    "word_blanks",
    "cut_right",
    "keep_right_words",
    "word_token_mask",
    "score_blanks",
    "blank_table",
    "FATES",
    "bayes_echoes",
    "echo_margin",
    "fate_readings",
    "echo_curve",
    "word_pairs",
    "fill_two",
    "loss_positions",
    "smooth",
]


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

    (Lesson 5, §4.) The bidirectional model reads the sentence with ``mask_id`` at ``position``
    and predicts from its output there. Returns (ids (k,), probabilities (k,)).
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
        raise ValueError("fill_mask needs the bidirectional (MLM) model; a causal model cannot "
                         "read a [MASK] and the words after it. Pass the encoder.")
    masked = ids.clone()
    masked[position] = mask_id
    logits = model(masked[None])[0, position]  # (V,)
    probs = torch.softmax(logits, dim=-1)
    top = probs.topk(k)
    return top.indices, top.values


def readable(tokens: list[str], width: int = 60, blank: str = "___") -> str:
    """A tokenized sentence as text a reader can read, for figure titles (Lesson 5, §4).

    Specials are dropped, ``##`` pieces rejoined, "_ _ dict _ _" written "__dict__", "a . x"
    "a.x", no space inside quotes, before , . ; : ) ] or after ( [. Longer than ``width``
    characters, the text is cut around ``blank`` (if present) with "…" at each cut end.
    """
    check_positive_int(width, "width")
    text = " ".join(t for t in tokens if t not in CompactVocab.SPECIALS).replace(" ##", "")
    text = re.sub(r"_ (?=_)", "_", text)  # "_ _" -> "__"
    text = re.sub(r"__ (\w+) __", r"__\1__", text)  # "__ dict __" -> "__dict__"
    text = re.sub(r'" ([^"]*?) "', r'"\1"', text)  # '" x = 1 "' -> '"x = 1"'
    text = re.sub(r"(\w) \. (?=\w)", r"\1.", text)  # "a . x" -> "a.x"
    text = re.sub(r" ([,.;:!?)\]])", r"\1", text)
    text = re.sub(r"([(\[]) ", r"\1", text)
    text = re.sub(r"(\w) ([’']) (\w)", r"\1\2\3", text)  # "don ’ t" -> "don’t"
    if len(text) <= width:
        return text
    centre = text.find(blank) if blank in text else 0
    start = max(0, min(centre - width // 3, len(text) - width))
    end = start + width
    if start > 0:  # begin and end on whole words
        start = text.index(" ", start) + 1 if " " in text[start:centre] else start
    if end < len(text) and " " in text[max(centre, start):end]:
        end = text.rindex(" ", max(centre, start), end)
    return ("…" if start > 0 else "") + text[start:end].strip() + ("…" if end < len(text) else "")


@dataclass(frozen=True)
class BlankSet:
    """One blank per row: the sentences, where the blank is and what it hides (§4)."""

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


def _whole_words(tokens: list[str]) -> list[int]:
    """Positions of tokens that are a whole alphabetic word (not split into ## pieces)."""
    keep = []
    for t in range(1, len(tokens) - 1):  # never [CLS] or [SEP]
        token, after = tokens[t], tokens[t + 1]
        if token.isalpha() and not after.startswith("##") and token not in CompactVocab.SPECIALS:
            keep.append(t)
    return keep


# --- What the words on the right are worth -----------------------------------------------------

# Tokens next to which a word is code, not English: "a . x", "_ _ dict", "f ( x )", "x = 1".
_CODE_MARKS = frozenset("_()[]{}=<>@#*/\\:;.'\"`")
PLAIN_WORD_MIN_LENGTH = 3  # skips "a", "is", "of": short words a frequency guess gets right


def plain_word_positions(tokens: list[str]) -> list[int]:
    """Positions of ordinary English words in one tokenized sentence (Lesson 5, §4).

    A plain word is a whole alphabetic token of at least :data:`PLAIN_WORD_MIN_LENGTH` letters
    (not a ``##`` piece nor followed by one, not a special token), outside double quotes (where
    the documentation puts code), with no code mark (``_ ( ) [ ] = .`` ...) on its left, and
    none on its right except a comma or the sentence's final punctuation. ``tokens`` run from
    ``[CLS]`` to ``[SEP]``.
    """
    if len(tokens) < 3 or tokens[0] != "[CLS]" or tokens[-1] != "[SEP]":
        raise ValueError(f"tokens must be one sentence from [CLS] to [SEP], got {tokens[:3]!r}...; "
                         "pass vocab.decode(ids[:n]) of a real sentence.")
    keep, quotes = [], 0
    for t in range(1, len(tokens) - 1):
        token, left, right = tokens[t], tokens[t - 1], tokens[t + 1]
        quotes += token == '"'
        final = t + 1 == len(tokens) - 2  # the right neighbour is the final punctuation
        if (token.isalpha() and len(token) >= PLAIN_WORD_MIN_LENGTH and quotes % 2 == 0
                and token not in CompactVocab.SPECIALS and not right.startswith("##")
                and left not in _CODE_MARKS and (right not in _CODE_MARKS or final)):
            keep.append(t)
    return keep


def word_blanks(vocab: CompactVocab, sentences: list[str],
                max_length: int = MAX_LENGTH) -> BlankSet:
    """Every plain word of ``sentences`` with a word on its right, one blank per row (§4, §5).

    Plain words are :func:`plain_word_positions`, with their own id (not ``[UNK]``); a blank
    needs at least one token between it and the final punctuation, so that there is a right
    side to take away. A sentence gives one row per blank. Raises ``ValueError`` if none.
    """
    ids, mask = vocab.encode(sentences, max_length=max_length)  # (N, n) each
    picks = []
    for i in range(len(sentences)):
        n = int(mask[i].sum())
        tokens = vocab.decode(ids[i, :n])
        picks += [(i, t) for t in plain_word_positions(tokens)
                  if ids[i, t] != vocab.unk_id and t < n - 3]
    if not picks:
        raise ValueError("no sentence has a plain word with words after it: pass longer "
                         "English sentences.")
    index = torch.tensor([i for i, _ in picks], dtype=torch.long)
    position = torch.tensor([t for _, t in picks], dtype=torch.long)
    return BlankSet("word", ids[index], mask[index], position, ids[index, position])


def cut_right(blanks: BlankSet, mask_id: int, sep_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sentences cut after the blank: ``[CLS] x_1 .. x_{t-1} [MASK] [SEP]`` (Lesson 5, §5).

    Returns (input_ids, attention_mask), each (m, n) like ``blanks.input_ids``: the left side
    unchanged, ``mask_id`` at the blank, ``sep_id`` right after it, padding (id 0) beyond.
    """
    m, n = blanks.input_ids.shape
    columns = torch.arange(n)[None, :]  # (1, n)
    t = blanks.position[:, None]  # (m, 1)
    inputs = blanks.input_ids.masked_fill(columns > t, 0)  # (m, n): the right side removed
    inputs = inputs.masked_fill(columns == t, mask_id).masked_fill(columns == t + 1, sep_id)
    return inputs, (columns <= t + 1).long().expand(m, n).clone()


def keep_right_words(blanks: BlankSet, k: int, mask_id: int, sep_id: int,
                     piece: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sentences with ``[MASK]`` at the blank and only ``k`` words after it (Lesson 5, §5).

    ``[CLS] x_1 .. x_{t-1} [MASK] w_1 .. w_k [SEP]``: a word is a token with the ``##`` pieces
    that follow it (``piece``, (V,) bool, marks those pieces); ``k = 0`` is :func:`cut_right`.
    A sentence with ``k`` words or fewer after the blank (its final punctuation counts as one)
    is kept whole. Returns (input_ids, attention_mask), each (m, n) like ``blanks.input_ids``.
    """
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a number of words, an int >= 0, got {k!r}.")
    m, n = blanks.input_ids.shape
    columns = torch.arange(n)[None, :]  # (1, n)
    t = blanks.position[:, None]  # (m, 1)
    last = blanks.attention_mask.sum(dim=1, keepdim=True) - 1  # (m, 1): where [SEP] is
    starts = (columns > t) & (columns < last) & ~piece[blanks.input_ids]  # (m, n): word starts
    words_so_far = starts.long().cumsum(dim=1)  # (m, n): words begun after the blank, up to s
    keep = (columns < t) | ((columns > t) & (columns < last) & (words_so_far <= k))  # (m, n)
    end = (keep | (columns == t)).long().sum(dim=1, keepdim=True)  # (m, 1): where [SEP] goes
    inputs = blanks.input_ids.masked_fill(~keep, 0).masked_fill(columns == t, mask_id)
    inputs = inputs.masked_fill(columns == end, sep_id)
    return inputs, (columns <= end).long().expand(m, n).clone()


def word_token_mask(vocab: CompactVocab) -> torch.Tensor:
    """(V,) bool: the tokens that are whole alphabetic words, the candidates for a blank (§5)."""
    return torch.tensor([tok.isalpha() and tok not in vocab.SPECIALS for tok in vocab.tokens])


@torch.no_grad()
def score_blanks(model: TinyLM, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 blanks: BlankSet, allowed: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Score ``model`` on ``blanks`` read as ``input_ids`` (Lesson 5, §5).

    The prediction for each blank is ranked over the ``allowed`` tokens ((V,) bool; all if
    None): a bidirectional model's at the blank's position t, a causal model's at t - 1, where
    it predicts the next token from the words on the left only (pass the original sentences).
    Returns {"top-1": (m,) bool, "top-5": (m,) bool, "loss": (m,) the negative
    log-probability of the right answer, in nats}, one entry per blank, for paired comparisons.
    """
    if input_ids.shape != blanks.input_ids.shape or attention_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids and attention_mask must have the blanks' shape "
                         f"{tuple(blanks.input_ids.shape)}, got {tuple(input_ids.shape)} and "
                         f"{tuple(attention_mask.shape)}; build them with cut_right.")
    rows = torch.arange(len(blanks))
    where = blanks.position - 1 if model.causal else blanks.position  # (m,): who predicts t
    logits = model(input_ids, attention_mask)[rows, where]  # (m, V)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    log_p = logits.log_softmax(dim=-1)  # (m, V)
    top = log_p.topk(5, dim=-1).indices  # (m, 5)
    return {"top-1": top[:, 0] == blanks.answer,
            "top-5": (top == blanks.answer[:, None]).any(dim=1),
            "loss": -log_p[rows, blanks.answer]}


def blank_table(scores: dict[str, dict[str, torch.Tensor]], reference: str,
                seed: int = 0) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Print §5's table and return each reading's paired difference from ``reference`` (§5).

    ``scores`` maps a reading's name to :func:`score_blanks`'s dict ({"top-1", "top-5", (m,)
    bool; "loss", (m,) nats, optional}), every reading scored on the same m blanks. One row per
    reading: its means, then its difference from ``reference`` (top-1 in points, loss in nats)
    with a 95 % paired bootstrap interval (:func:`~encoderlab.stats.
    paired_difference_interval`, blanks resampled with ``seed``). Returns {name: {"top-1" |
    "top-5" | "loss": (difference, low, high)}} for every reading but ``reference``.
    """
    if reference not in scores:
        raise ValueError(f"reference must be one of the readings {list(scores)}, got "
                         f"{reference!r}.")
    lengths = {len(s["top-1"]) for s in scores.values()}
    if len(lengths) != 1:
        raise ValueError(f"every reading must score the same blanks; got lengths {lengths}.")
    ref = scores[reference]
    print(f"Δ: minus the {reference}, paired over the same blanks (accuracy in points)")
    print(f"{'reading':<22}{'top-1':>6}{'top-5':>7}{'loss':>6}  {'Δ top-1 [95 % CI]':<22}"
          "Δ loss [95 % CI]")
    differences = {}
    for name, s in scores.items():
        row = f"{name:<22}{s['top-1'].float().mean():>6.1%}{s['top-5'].float().mean():>7.1%}"
        row += f"{s['loss'].mean():>6.2f}" if "loss" in s else f"{'-':>6}"
        if name != reference:
            differences[name] = {}
            for k in ("top-1", "top-5", "loss"):
                if k in s and k in ref:
                    low, high = stats.paired_difference_interval(s[k], ref[k], seed=seed)
                    mean = float(s[k].float().mean() - ref[k].float().mean())
                    differences[name][k] = (mean, low, high)
            d, low, high = differences[name]["top-1"]
            row += f"  {f'{d * 100:+.1f} [{low * 100:+.1f}, {high * 100:+.1f}]':<22}"
            if "loss" in differences[name]:
                d, low, high = differences[name]["loss"]
                row += f"{d:+.2f} [{low:+.2f}, {high:+.2f}]"
        print(row.rstrip())
    return differences


# --- What the encoder does with a visible chosen token (§4) --------------------------------------

FATES = ("[MASK]", "random", "original")  # what a chosen position shows: codes 0, 1, 2


def _check_q(q: torch.Tensor, shown: torch.Tensor, n_ordinary: int) -> None:
    if q.dim() != 2 or shown.shape != q.shape[:1]:
        raise ValueError(f"q must be (m, V) probabilities and shown (m,) ids, got q of shape "
                         f"{tuple(q.shape)} and shown of shape {tuple(shown.shape)}.")
    check_positive_int(n_ordinary, "n_ordinary (V', the number of ordinary tokens)")


def echo_margin(q: torch.Tensor, shown: torch.Tensor, n_ordinary: int) -> torch.Tensor:
    """(m,) log10 of q(w)·V' / max over x != w of q(x), for the visible token w = ``shown`` (§4).

    ``q`` (m, V) is what the context alone says about each position (the model reading
    ``[MASK]`` there). Shown w, the answer is w with weight about 0.1·q(w) (left unchanged) and
    any other x with weight 0.1·q(x)/V' (x replaced by a random draw of w), so the best guess is
    w exactly when this margin is above 0 (:func:`bayes_echoes`).
    """
    _check_q(q, shown, n_ordinary)
    rows = torch.arange(len(shown))
    q_w = q[rows, shown]  # (m,)
    others = q.clone()
    others[rows, shown] = float("-inf")
    return torch.log10(q_w * n_ordinary) - torch.log10(others.max(dim=-1).values)


def bayes_echoes(q: torch.Tensor, shown: torch.Tensor, n_ordinary: int) -> torch.Tensor:
    """(m,) bool: does the best guess under 80/10/10 echo the visible token w? (Lesson 5, §4).

    Yes exactly when q(w)·V' > max over x != w of q(x) (see :func:`echo_margin`).
    """
    return echo_margin(q, shown, n_ordinary) > 0


@torch.no_grad()
def fate_readings(model: TinyLM, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  vocab: CompactVocab, draws: int = 40, seed: int = 200) -> dict[str, torch.Tensor]:
    """Every chosen position of ``draws`` corruptions of the sentences, read by ``model`` (§4).

    Returns 1-D tensors over the chosen positions of all draws (corruption s from seed
    ``seed + s``): ``fate`` (0, 1, 2 as in :data:`FATES`), ``right`` (top guess = the original),
    ``echo`` (top guess = the visible token) and ``margin`` (:func:`echo_margin`, with q from the
    same model reading ``[MASK]`` at every visible chosen position; NaN at ``[MASK]``).
    """
    check_positive_int(draws, "draws")
    if model.causal:
        raise ValueError("fate_readings needs the MLM encoder (causal=False): a causal model "
                         "cannot read the words after a position.")
    n_ordinary = vocab.size - len(vocab.special_ids)  # V'
    out: dict[str, list[torch.Tensor]] = {"fate": [], "right": [], "echo": [], "margin": []}
    for s in range(draws):
        g = torch.Generator().manual_seed(seed + s)
        inputs, labels = mlm_corrupt(input_ids, attention_mask, vocab.special_ids, vocab.size,
                                     generator=g, mask_id=vocab.mask_id)
        chosen = labels != -100  # (N, n)
        predicted = model(inputs, attention_mask).argmax(dim=-1)  # (N, n)
        visible = chosen & (inputs != vocab.mask_id)  # random or original
        q = model(inputs.masked_fill(visible, vocab.mask_id), attention_mask).softmax(-1)
        fate = torch.where(inputs == vocab.mask_id, 0, torch.where(inputs == input_ids, 2, 1))
        margin = torch.full(inputs.shape, float("nan"))  # (N, n)
        margin[visible] = echo_margin(q[visible], inputs[visible], n_ordinary)
        out["fate"].append(fate[chosen])
        out["right"].append((predicted == input_ids)[chosen])
        out["echo"].append((predicted == inputs)[chosen])
        out["margin"].append(margin[chosen])
    return {k: torch.cat(v) for k, v in out.items()}


def echo_curve(readings: dict[str, torch.Tensor], fate: str, edges) -> dict[str, list]:
    """The echo rate of the model and of the Bayes rule per bin of ``margin`` (Lesson 5, §4).

    ``edges`` are the bin edges of :func:`echo_margin` (log10 units); returns ``{"centre",
    "model", "bayes", "n"}``, one entry per bin that holds any position of ``fate``
    (``"random"`` or ``"original"``).
    """
    if fate not in FATES[1:]:
        raise ValueError(f"fate must be 'random' or 'original' (a visible token), got {fate!r}.")
    keep = readings["fate"] == FATES.index(fate)
    margin, echo = readings["margin"][keep], readings["echo"][keep]
    curve: dict[str, list] = {"centre": [], "model": [], "bayes": [], "n": []}
    for low, high in zip(edges[:-1], edges[1:]):
        inside = (margin >= low) & (margin < high)
        if inside.any():
            curve["centre"].append((low + high) / 2)
            curve["model"].append(echo[inside].float().mean().item())
            curve["bayes"].append((margin[inside] > 0).float().mean().item())
            curve["n"].append(int(inside.sum()))
    return curve


# --- Two hidden words at once --------------------------------------------------------------------


def word_pairs(vocab: CompactVocab, sentences: list[str],
               max_length: int = MAX_LENGTH) -> BlankSet:
    """Every pair of adjacent whole words in ``sentences``, as two-token blanks (Lesson 5, §6).

    A whole word is alphabetic, has its own id (not ``[UNK]``) and is not a ``##`` piece nor
    followed by one. A sentence gives one row per pair, so it may appear several
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

    (Lesson 5, §6.) ``independent``: both blanks from one pass, each the argmax of its own
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
    """(b,) float: the expected number of positions that carry a loss in each sequence (§7).

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

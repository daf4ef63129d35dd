"""Lesson 6's checkers: whole-word selection (§3) and replaced-token-detection labels from a
generator's samples (§4)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from encoderlab.course.checks.harness import CheckFailed, Exercise, as_tensor, run
from encoderlab.objectives import IGNORE_INDEX, rtd_labels, word_ids

__all__ = ["check_whole_word_positions", "check_rtd_labels"]


def _first_differing_cell(attempt) -> tuple[int, int, int]:
    """(case, row, position) of the first cell where a wrong (b, n) answer differs."""
    i = attempt.first
    r, c = (attempt.answers[i] != attempt.references[i]).nonzero()[0].tolist()
    return i, r, c


# --- Whole-word selection (Lesson 6, §3) ----------------------------------------------------------

# A small vocabulary with continuation pieces: "over ##flow ##ed", "un ##sort ##ed".
_WW_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "list", "is", "over",
              "##flow", "##ed", "un", "##sort", "a", "stack", "."]
_WW_SPECIAL = (0, 1, 2, 3, 4)


def _ww_reference(ids, am, tokens, special, picked):
    words = word_ids(ids, am, tokens, special)  # (b, n)
    return (words >= 0) & picked.gather(1, words.clamp(min=0))


def _ww_first_piece_only(ids, am, tokens, special, picked):
    continuation = torch.tensor([t.startswith("##") for t in tokens])
    return _ww_reference(ids, am, tokens, special, picked) & ~continuation[ids]


def _ww_every_piece_a_word(ids, am, tokens, special, picked):
    ordinary = (am != 0) & ~torch.isin(ids, torch.tensor(special))
    index = ordinary.long().cumsum(dim=1) - 1  # each piece its own word
    wide = torch.zeros(ids.shape, dtype=torch.bool)
    wide[:, : picked.shape[1]] = picked[:, : ids.shape[1]]
    return ordinary & wide.gather(1, index.clamp(min=0))


def _ww_specials_are_words(ids, am, tokens, special, picked):
    continuation = torch.tensor([t.startswith("##") for t in tokens])
    real = am != 0
    index = (real & ~continuation[ids]).long().cumsum(dim=1) - 1  # [CLS] is word 0
    wide = torch.zeros((ids.shape[0], ids.shape[1] + 1), dtype=torch.bool)
    wide[:, : picked.shape[1]] = picked
    ordinary = real & ~torch.isin(ids, torch.tensor(special))
    return ordinary & wide.gather(1, index.clamp(min=0))


_WW_MISTAKES = [
    ("only the first piece of each chosen word is selected: its '##' pieces belong to the same "
     "word and must be selected with it (a '##' piece continues the word before it).",
     _ww_first_piece_only),
    ("you number every piece as a word of its own: a piece that starts with '##' continues the "
     "previous word, so 'over ##flow ##ed' is one word, index k for all three pieces.",
     _ww_every_piece_a_word),
    ("your word numbering counts [CLS] (or another special token) as word 0: words are counted "
     "over ordinary pieces only, so the first real word is word 0 and specials get no word.",
     _ww_specials_are_words),
]


def _ww_cases() -> list[tuple]:
    tokens, special = _WW_TOKENS, _WW_SPECIAL
    # [CLS] the list is over ##flow ##ed . [SEP] and an unsorted stack, padded
    ids = torch.tensor([[2, 5, 6, 7, 8, 9, 10, 15, 3, 0],
                        [2, 13, 11, 12, 10, 14, 15, 3, 0, 0]])
    am = (ids != 0).long()
    cases = [(ids, am, tokens, special, torch.tensor([[0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
                                                      [0, 1, 0, 0, 0, 0, 0, 0, 0, 0]]).bool())]
    g = torch.Generator().manual_seed(6)
    words = [[5], [6], [7], [8, 9, 10], [11, 12, 10], [13], [14], [15], [8], [11, 12]]
    for b, n_words in ((3, 5), (2, 8), (4, 3)):
        rows = []
        for _ in range(b):
            k = int(torch.randint(1, n_words + 1, (1,), generator=g))
            pieces = [p for i in torch.randint(len(words), (k,), generator=g).tolist()
                      for p in words[i]]
            rows.append([2, *pieces, 3])
        n = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
        am = (ids != 0).long()
        picked = torch.rand((b, n), generator=g) < 0.4
        cases.append((ids, am, tokens, special, picked))
    return cases


def _selection_answer(result, where, ids, am, tokens, special, picked) -> torch.Tensor:
    out = as_tensor(result, "a (b, n) boolean tensor")
    if tuple(out.shape) != tuple(ids.shape):
        raise CheckFailed(f"your selection has shape {tuple(out.shape)} on {where}; return one "
                          f"bool per position, shape (b, n) = {tuple(ids.shape)}.")
    if out.dtype != torch.bool:
        if not bool(((out == 0) | (out == 1)).all()):
            raise CheckFailed(f"your selection holds values other than 0/1 on {where}; "
                              "return a boolean tensor, True = corrupt this position.")
        out = out.bool()
    return out


def _selects_specials(attempt) -> str | None:
    specials = torch.tensor(_WW_SPECIAL)
    if any(bool((attempt.answers[k] & torch.isin(attempt.cases[k][0], specials)).any())
           for k in attempt.wrong):
        return ("you select special tokens or padding ([CLS], [SEP], [PAD]): they are "
                "never part of a word and never corrupted.")
    return None


def _first_wrong_selection(attempt) -> str:
    i, r, c = _first_differing_cell(attempt)
    ids, picked = attempt.cases[i][0], attempt.cases[i][4]
    return (
        f"your selection differs from the reference at row {r}, position {c} "
        f"(token {_WW_TOKENS[int(ids[r, c])]!r}) on input_ids={ids.tolist()}, "
        f"picked={picked.long().tolist()}: yours {bool(attempt.answers[i][r, c])}, "
        f"the reference {bool(attempt.references[i][r, c])}."
    )


_WHOLE_WORDS = Exercise(
    title="whole-word selection",
    cases=_ww_cases,
    arguments=lambda ids, am, tokens, special, picked: (
        ids.clone(), am.clone(), list(tokens), special, picked.clone()),
    answer=_selection_answer,
    reference=_ww_reference,
    describe=lambda ids, am, tokens, special, picked: (
        f"input_ids={ids.tolist()}, picked={picked.long().tolist()}"),
    notice=_selects_specials,
    mistakes=_WW_MISTAKES,
    fallback=_first_wrong_selection,
)


def check_whole_word_positions(fn: Callable) -> bool:
    """Check ``fn(input_ids, attention_mask, tokens, special_ids, picked)`` (Lesson 6, §3).

    ``picked`` (b, W) bool says which words of each row are chosen (word k = the k-th word of
    the row, counted from 0 over ordinary pieces); the answer is the (b, n) bool tensor of the
    positions to corrupt: every piece of every chosen word, nothing else.
    """
    return run(_WHOLE_WORDS, fn)


# --- Replaced-token-detection labels (Lesson 6, §4) -----------------------------------------------


def _rtd_reference(ids, mlm_labels, samples, am):
    corrupted = torch.where(mlm_labels != IGNORE_INDEX, samples, ids)
    return rtd_labels(ids, corrupted, am)


def _rtd_masked_is_replaced(ids, mlm_labels, samples, am):
    out = (mlm_labels != IGNORE_INDEX).long()
    return out.masked_fill(am == 0, IGNORE_INDEX)


def _rtd_pad_zero(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return out.masked_fill(am == 0, 0)


def _rtd_masked_only(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return out.masked_fill(mlm_labels == IGNORE_INDEX, IGNORE_INDEX)


def _rtd_inverted(ids, mlm_labels, samples, am):
    out = _rtd_reference(ids, mlm_labels, samples, am)
    return torch.where(out == IGNORE_INDEX, out, 1 - out)


def _rtd_samples_everywhere(ids, mlm_labels, samples, am):
    return rtd_labels(ids, samples, am)


_RTD_MISTAKES = [
    ("you label every masked position 'replaced': where the generator sampled the original "
     "token, nothing was replaced, and ELECTRA labels it 0 (original). Compare the token the "
     "discriminator reads with the original.", _rtd_masked_is_replaced),
    ("you give only the masked positions a label (-100 elsewhere, as in MLM): the "
     "discriminator is scored at every real position, and an unmasked one is original (0).",
     _rtd_masked_only),
    ("your labels are inverted: 1 means replaced, 0 means original.", _rtd_inverted),
    ("padding gets the label 0: padding positions carry no loss, so their label is -100.",
     _rtd_pad_zero),
    ("you compare samples with input_ids at every position: the generator's samples are used "
     "only at the masked positions (mlm_labels != -100); elsewhere the discriminator reads the "
     "original token.", _rtd_samples_everywhere),
]


def _rtd_cases() -> list[tuple]:
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 3, 0]])
    am = (ids != 0).long()
    mlm = torch.full_like(ids, IGNORE_INDEX)
    mlm[0, [2, 4, 5]] = ids[0, [2, 4, 5]]
    samples = torch.tensor([[7, 8, 11, 9, 20, 14, 5, 6]])  # position 2 and 5 sample the original
    cases = [(ids, mlm, samples, am)]
    g = torch.Generator().manual_seed(60)
    for b, n in ((2, 9), (3, 6), (1, 12)):
        lengths = torch.randint(3, n + 1, (b,), generator=g)
        am = (torch.arange(n)[None, :] < lengths[:, None]).long()
        ids = torch.randint(5, 12, (b, n), generator=g).masked_fill(am == 0, 0)
        ids[:, 0] = 2
        chosen = (torch.rand((b, n), generator=g) < 0.5) & (am == 1)
        chosen[:, 0] = False
        mlm = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
        samples = torch.randint(5, 12, (b, n), generator=g)  # small vocabulary: many hits
        cases.append((ids, mlm, samples, am))
    return cases


def _labels_answer(result, where, ids, mlm, samples, am) -> torch.Tensor:
    out = as_tensor(result, "a (b, n) tensor of labels 0 / 1 / -100")
    if tuple(out.shape) != tuple(ids.shape):
        raise CheckFailed(f"your labels have shape {tuple(out.shape)} on {where}; return one "
                          f"label per position, (b, n) = {tuple(ids.shape)}.")
    if out.dtype == torch.bool:
        raise CheckFailed("your labels are booleans; return integers: 1 = replaced, "
                          "0 = original, -100 at padding (a boolean cannot hold -100).")
    return out.long()


def _first_wrong_label(attempt) -> str:
    i, r, c = _first_differing_cell(attempt)
    return (
        f"your label differs from the reference at row {r}, position {c} on case {i + 1}: "
        f"yours {int(attempt.answers[i][r, c])}, the reference "
        f"{int(attempt.references[i][r, c])} (1 = replaced, 0 = original, -100 = padding)."
    )


_RTD = Exercise(
    title="replaced-token-detection labels",
    cases=_rtd_cases,
    arguments=lambda ids, mlm, samples, am: (ids.clone(), mlm.clone(), samples.clone(),
                                             am.clone()),
    answer=_labels_answer,
    reference=_rtd_reference,
    describe=lambda ids, mlm, samples, am: (
        f"input_ids={ids.tolist()}, mlm_labels={mlm.tolist()}, "
        f"samples={samples.tolist()}, attention_mask={am.tolist()}"),
    mistakes=_RTD_MISTAKES,
    fallback=_first_wrong_label,
)


def check_rtd_labels(fn: Callable) -> bool:
    """Check ``fn(input_ids, mlm_labels, samples, attention_mask)`` (Lesson 6, §4).

    ``mlm_labels`` marks the masked positions (-100 elsewhere), ``samples`` (b, n) holds the
    generator's sampled token at every position (only the masked ones are used). The answer is
    the discriminator's (b, n) labels: 1 = the token it reads differs from the original,
    0 = same, -100 at padding.
    """
    return run(_RTD, fn)

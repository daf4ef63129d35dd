"""Lesson 1's checkers: the labels of the two objectives (§2) and the cosine-similarity matrix
(§4)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from encoderlab.course.checks.harness import CheckFailed, Exercise, as_tensor, close, differs, run
from encoderlab.lessons.l01_probes import cosine_similarity_matrix
from encoderlab.objectives import IGNORE_INDEX, objective_view

__all__ = ["check_objective_labels", "check_cosine_similarity"]

# --- The labels of the two objectives (Lesson 1, §2) ---------------------------------------------

_MASK_ID = 103  # [MASK] in BERT's vocabulary; the learner's function never needs it


def _labels_reference(input_ids, objective, masked_positions):
    return objective_view(input_ids, objective, masked_positions, _MASK_ID).labels


def _only_for(objective: str, wrong_labels):
    """A mistake made under one objective; under the other the answer is the reference."""
    def labels(input_ids, obj, masked_positions):
        if obj != objective:
            return _labels_reference(input_ids, obj, masked_positions)
        return wrong_labels(input_ids, masked_positions)
    return labels


def _ignored_like(input_ids) -> torch.Tensor:
    return torch.full_like(input_ids, IGNORE_INDEX)


def _shift_right(ids, _masked):
    out = _ignored_like(ids)
    out[1:] = ids[:-1]  # position t labelled with x_{t-1}
    return out


def _own_token_from_1(ids, _masked):
    out = ids.clone()
    out[0] = IGNORE_INDEX  # labels = input_ids, the first one ignored
    return out


def _masked_at(ids, where):
    out = _ignored_like(ids)
    out[where] = ids[where]
    return out


def _masked_inverted(ids, masked):
    keep = torch.ones(len(ids), dtype=torch.bool)
    keep[list(masked)] = False
    return _masked_at(ids, keep)


def _masked_shifted(ids, masked):
    out = _ignored_like(ids)
    for p in masked:
        if p + 1 < len(ids):
            out[p] = ids[p + 1]
    return out


_LABEL_MISTAKES = [
    ("your next-token labels are the inputs themselves: position t is scored against its own "
     "token x_t, which it can see, so the model would learn to copy. Position t predicts the "
     "token after it: labels[:-1] = input_ids[1:], and -100 at the last position.",
     _only_for("next-token", lambda ids, _m: ids.clone())),
    ("you label position t with its own token x_t (labels = input_ids with the first ignored, "
     "the convention of libraries that shift inside the loss). Here labels[t] is what the "
     "prediction at t is scored against: x_{t+1}, so shift left, labels[:-1] = input_ids[1:].",
     _only_for("next-token", _own_token_from_1)),
    ("your next-token labels are shifted the wrong way: position t gets x_{t-1}, a token it has "
     "already seen. It must predict the one after it: labels[:-1] = input_ids[1:].",
     _only_for("next-token", _shift_right)),
    ("the last position gets x_0 as its label (torch.roll wraps around); nothing follows the "
     "last token, so its label is -100.",
     _only_for("next-token", lambda ids, _m: torch.roll(ids, -1))),
    ("under the masked objective only the masked positions carry a loss, but your labels cover "
     "every position: set -100 everywhere except masked_positions.",
     _only_for("masked", lambda ids, _m: ids.clone())),
    ("your masked-objective labels sit on the positions that were NOT masked, the wrong way "
     "round: the masked positions carry the loss, everything else is -100.",
     _only_for("masked", _masked_inverted)),
    ("your masked-objective labels are shifted by one (x_{t+1}): a masked position predicts its "
     "own original token, the one [MASK] replaced, so labels[p] = input_ids[p].",
     _only_for("masked", _masked_shifted)),
]


def _label_cases() -> list[tuple]:
    """(input_ids, objective, masked_positions): one sentence under both objectives, then random."""
    sentence = torch.tensor([101, 2057, 2018, 1037, 12695, 2006, 1996, 2924, 1997, 1996, 2314,
                             102])  # "[CLS] we had a picnic on the bank of the river [SEP]"
    cases = [(sentence, "next-token", ()), (sentence, "masked", (4, 7))]
    g = torch.Generator().manual_seed(2)
    for n in (3, 7, 10, 5):
        ids = torch.randperm(3000, generator=g)[:n] + 1000  # distinct ids: every shift shows
        k = max(1, round(0.3 * n))
        masked = tuple(sorted(torch.randperm(n, generator=g)[:k].tolist()))
        cases += [(ids, "next-token", ()), (ids, "masked", masked)]
    return cases


def _describe_labels_case(input_ids, objective, masked_positions) -> str:
    where = f", masked_positions={list(masked_positions)}" if objective == "masked" else ""
    return f"input_ids={input_ids.tolist()}, objective={objective!r}{where}"


def _labels_answer(result, where, input_ids, objective, masked_positions) -> torch.Tensor:
    labels = as_tensor(result, "a tensor of n labels, -100 where there is no loss")
    if tuple(labels.shape) != (len(input_ids),):
        raise CheckFailed(
            f"your labels have shape {tuple(labels.shape)} on {where}; return one label per "
            f"position, shape (n,) = {(len(input_ids),)}, with -100 where there is no loss."
        )
    if labels.is_floating_point() and not bool((labels == labels.round()).all()):
        raise CheckFailed(f"your labels are not whole numbers (token ids) on {where}.")
    return labels.long()


def _another_fill(attempt) -> str | None:
    """Right where there is a loss, but another number than -100 everywhere else."""
    pairs = list(zip(attempt.answers, attempt.references, strict=True))
    fills = {int(v) for out, ref in pairs for v in out[ref == IGNORE_INDEX].unique()}
    scored_right = all(torch.equal(out[ref != IGNORE_INDEX], ref[ref != IGNORE_INDEX])
                       for out, ref in pairs)
    if scored_right and len(fills) == 1 and fills != {IGNORE_INDEX}:
        return (
            f"your labels are right where there is a loss, but you mark the other positions "
            f"with {fills.pop()}: cross_entropy would score them against that as a token id. It "
            f"skips only the label {IGNORE_INDEX} (its ignore_index), so use {IGNORE_INDEX} there."
        )
    return None


def _first_wrong_label(attempt) -> str:
    first = attempt.first
    out, ref = attempt.answers[first], attempt.references[first]
    t = int((out != ref).nonzero()[0])
    return (
        f"your labels differ from the reference at position t={t} on {attempt.where(first)}: "
        f"yours {int(out[t])}, the reference {int(ref[t])} (-100 = no loss)."
    )


_LABELS = Exercise(
    title="objective labels",
    cases=_label_cases,
    arguments=lambda ids, objective, masked: (ids.clone(), objective, masked),
    answer=_labels_answer,
    reference=_labels_reference,
    describe=_describe_labels_case,
    notice=_another_fill,
    mistakes=_LABEL_MISTAKES,
    fallback=_first_wrong_label,
)


def check_objective_labels(fn: Callable) -> bool:
    """Check ``fn(input_ids, objective, masked_positions)`` returns each position's label (§2).

    (Lesson 1, §2.) ``objective`` is "next-token" (position t predicts x_{t+1}) or "masked"
    (a masked position predicts its own original token); a position without a loss gets -100.
    """
    return run(_LABELS, fn)


# --- The cosine-similarity matrix (Lesson 1, §4) -------------------------------------------------


def _cosine_cases() -> list[tuple]:
    """(x,) cases of shape (m, d) with m != d, rows of very different lengths, some anti-aligned."""
    g = torch.Generator().manual_seed(1)
    cases = [
        torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.5, 0.0], [-6.0, -8.0, 0.0], [1.0, 0.0, 1.0]]),
    ]
    for m, d in ((5, 8), (3, 16), (7, 4), (2, 32)):
        lengths = torch.rand(m, 1, generator=g) * 9 + 0.5  # (m, 1): 0.5 to 9.5
        x = torch.randn(m, d, generator=g)
        cases.append(x / x.norm(dim=1, keepdim=True) * lengths)  # (m, d)
    cases.append(torch.randn(6, 10, generator=g) + 2.0)  # all in one orthant: cosines near 1
    return [(x,) for x in cases]


def _cos_unit_rows(x):
    return x / x.norm(dim=1, keepdim=True)


_COSINE_MISTAKES = [
    ("your matrix is x @ xᵀ, the raw dot products, which grow with the vectors' lengths: divide "
     "each row by its own length first (x / x.norm(dim=1, keepdim=True)), then take x @ xᵀ.",
     lambda x: x @ x.T),
    ("you normalise over the wrong axis: x.norm(dim=0) is the length of each feature column; "
     "cosine similarity divides each row (each vector) by its length, x.norm(dim=1, keepdim=True).",
     lambda x: (x / x.norm(dim=0, keepdim=True)) @ (x / x.norm(dim=0, keepdim=True)).T),
    ("you normalise only one side of the product; divide both factors' rows by their lengths, "
     "so that the diagonal is 1.",
     lambda x: _cos_unit_rows(x) @ x.T),
    ("you divide by the norm of the whole matrix (x.norm() with no dim), one number for all rows; "
     "each row needs its own length, x.norm(dim=1, keepdim=True).",
     lambda x: (x @ x.T) / x.norm() ** 2),
    ("your function returns Euclidean distances (0 on the diagonal, larger = less alike); the "
     "task asks for cosine similarities (1 on the diagonal, larger = more alike).",
     lambda x: torch.cdist(x, x)),
    ("your function returns the cosine distance 1 - cos (0 on the diagonal); return the "
     "similarity cos itself, which is 1 on the diagonal.",
     lambda x: 1 - _cos_unit_rows(x) @ _cos_unit_rows(x).T),
]


def _cosine_answer(result, where, x) -> torch.Tensor:
    m, d = x.shape
    matrix = as_tensor(result, "the (m, m) tensor of cosine similarities")
    if tuple(matrix.shape) == (d, d):
        raise CheckFailed(
            f"your matrix has shape {(d, d)} for x of shape {(m, d)}: one entry per pair of "
            "features (columns). Compare the vectors, which are the rows: the result is "
            f"(m, m) = {(m, m)}, as x @ x.T is."
        )
    if tuple(matrix.shape) != (m, m):
        raise CheckFailed(
            f"your matrix has shape {tuple(matrix.shape)} for x of shape {(m, d)}; it should "
            f"be (m, m) = {(m, m)}, one entry per pair of rows."
        )
    return matrix.double()


_COSINE = Exercise(
    title="cosine similarity",
    cases=_cosine_cases,
    arguments=lambda x: (x.clone(),),
    answer=_cosine_answer,
    reference=lambda x: cosine_similarity_matrix(x.double()),
    describe=lambda x: f"x of shape {tuple(x.shape)}",
    same=close,
    mistakes=_COSINE_MISTAKES,
    mistake_inputs=lambda x: (x.double(),),
    fallback=lambda attempt: differs(
        attempt, "matrix", "cos(x_i, x_j) = x_i·x_j / (|x_i| |x_j|)",
        "compare it with encoderlab.lessons.l01_probes.cosine_similarity_matrix.",
    ),
)


def check_cosine_similarity(fn: Callable) -> bool:
    """Check ``fn(x)`` returns the (m, m) matrix of cos(x_i, x_j) of x's rows (Lesson 1, §4)."""
    return run(_COSINE, fn)

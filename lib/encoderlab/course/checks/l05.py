"""Lesson 5's checkers: BERT's corruption (§1: 15 %, then 80 / 10 / 10), the loss on the
chosen positions only (§1) and filling every [MASK] of a batch (§4). The corruption is random:
its checker checks the rules that hold on every draw and a large batch's statistics, one rule at
a time, each with its own message; the loss is checked on cases like every other exercise."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from functools import partial

import torch
from torch.nn import functional as F

from encoderlab.course.checks.harness import (
    CheckFailed,
    Exercise,
    Message,
    as_tensor,
    call,
    checker,
    close,
    leaving_inputs,
    name_of,
    require_callable,
    run,
)
from encoderlab.objectives import IGNORE_INDEX

__all__ = ["check_mlm_corrupt", "check_masked_loss", "check_fill_mask"]

# --- The corruption (Lesson 5, §1) ------------------------------------------------------------

_MLM_SPECIALS = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK], as in data.CompactVocab
_MLM_MASK_ID = 4
_MLM_VOCAB = 1000


def _mlm_batch(rows: int = 256, n: int = 96, seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """A large padded batch: [CLS] words [SEP] [PAD]..., with a few [UNK]s among the words.

    In every other row the padding (attention_mask 0) holds ordinary ids, not [PAD], as in a
    buffer reused from longer sentences: only the mask says those positions are not real.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, _MLM_VOCAB, (rows, n), generator=g)  # (rows, n): ordinary tokens
    ids[torch.rand(rows, n, generator=g) < 0.03] = 1  # some [UNK]s: special, never chosen
    lengths = torch.randint(12, n + 1, (rows,), generator=g)  # real tokens per row
    mask = (torch.arange(n)[None, :] < lengths[:, None]).long()  # (rows, n)
    ids[:, 0] = 2  # [CLS]
    ids[torch.arange(rows), lengths - 1] = 3  # [SEP]
    ids[mask == 0] = 0  # [PAD]
    stale = (mask == 0) & (torch.arange(rows)[:, None] % 2 == 1)  # odd rows: stale padding
    ids[stale] = torch.randint(5, _MLM_VOCAB, (int(stale.sum()),), generator=g)  # not [PAD]
    return ids, mask


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _corrupt_outputs(fn, ids, mask, seed: int, case: str, vocab_size: int = _MLM_VOCAB,
                     specials: tuple = _MLM_SPECIALS, mask_id: int = _MLM_MASK_ID):
    generator = torch.Generator().manual_seed(seed)
    before = ids.clone()
    result = call(fn, (ids, mask, specials, vocab_size, mask_id, generator), case)
    if not torch.equal(ids, before):
        raise CheckFailed("your function changed input_ids in place.",
                          "work on a copy (inputs = input_ids.clone()) and return it.")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailed(f"your function returned a {type(result).__name__}, not a pair.",
                          "return the pair (inputs, labels), two (b, n) tensors.")
    inputs = as_tensor(result[0], "inputs, a (b, n) tensor of token ids")
    labels = as_tensor(result[1], "labels, a (b, n) tensor of token ids and -100")
    for name, t in (("inputs", inputs), ("labels", labels)):
        if tuple(t.shape) != tuple(ids.shape):
            raise CheckFailed(f"your {name} have shape {tuple(t.shape)}; return one per position, "
                              f"(b, n) = {tuple(ids.shape)}.")
        if t.is_floating_point() or t.dtype == torch.bool:
            raise CheckFailed(f"your {name} have dtype {t.dtype}, but token ids and labels "
                              "are integers.", "use dtype torch.long.")
    return inputs.long(), labels.long()


# Special ids that are not 0..4: [PAD] 0, then [UNK] [CLS] [SEP] [MASK] = 100..103.
_SCATTERED_SPECIALS = (0, 100, 101, 102, 103)
_SCATTERED_MASK_ID = 103


def _check_scattered_specials(fn) -> None:
    """The rules on random tokens again, with special ids that are neither contiguous nor the
    smallest: a draw from randint(len(special_ids), V) or randint(max(special_ids) + 1, V) shows.
    """
    ids, mask = _mlm_batch()
    ordinary = torch.tensor([i for i in range(_MLM_VOCAB) if i not in _SCATTERED_SPECIALS])
    scattered = ordinary[(ids - 5).clamp(min=0)]  # the ordinary ids 5..999 -> the 995 others
    for old, new in zip(_MLM_SPECIALS, _SCATTERED_SPECIALS, strict=True):
        scattered[ids == old] = new
    case = ("a batch whose special ids are (0, 100, 101, 102, 103), [MASK] = 103 "
            "(vocab_size=1000)")
    inputs, labels = _corrupt_outputs(fn, scattered, mask, 3, case,
                                      specials=_SCATTERED_SPECIALS, mask_id=_SCATTERED_MASK_ID)
    chosen = labels != IGNORE_INDEX
    drawn = inputs[chosen & (inputs != _SCATTERED_MASK_ID) & (inputs != scattered)]
    draw = ("put ordinary = [i for i in range(vocab_size) if i not in special_ids] in a tensor "
            "and take ordinary[torch.randint(len(ordinary), ..., generator=generator)].")
    if bool(torch.isin(drawn, torch.tensor(_SCATTERED_SPECIALS)).any()):
        raise CheckFailed(f"some of your random replacements are special tokens on {case}: "
                          "drawing from randint(len(special_ids), vocab_size) assumes that "
                          "the special ids are 0..len(special_ids) - 1.", draw)
    below = int((drawn < max(_SCATTERED_SPECIALS)).sum())
    if len(drawn) >= 100 and below == 0:
        raise CheckFailed(f"none of your {len(drawn)} random replacements on {case} lies below "
                          "103, though 99 of the 995 ordinary ids do: drawing from "
                          "randint(max(special_ids) + 1, vocab_size) assumes that the special "
                          "ids come first.", draw)


@checker
def check_mlm_corrupt(fn: Callable) -> bool:
    """Check ``fn(input_ids, attention_mask, special_ids, vocab_size, mask_id, generator)``.

    (Lesson 5, §1.) The function must return ``(inputs, labels)`` as
    :func:`encoderlab.objectives.mlm_corrupt` does with p = 0.15. Being random, it is checked by
    its statistics on a batch of 12,590 eligible positions (each share within five standard
    errors of BERT's target) and by the rules that hold on every draw: specials and padding are
    never chosen, labels are the original token where chosen and -100 elsewhere, unchosen
    positions are untouched, random tokens are never special, and the same seed gives the same
    result.
    """
    require_callable(fn)
    ids, mask = _mlm_batch()
    case = "a batch of 256 sentences (vocab_size=1000, special_ids=(0, 1, 2, 3, 4), mask_id=4)"
    inputs, labels = _corrupt_outputs(fn, ids, mask, 0, case)
    eligible = (mask == 1) & ~torch.isin(ids, torch.tensor(_MLM_SPECIALS))  # (b, n)
    n_eligible = int(eligible.sum())
    ignored = labels == IGNORE_INDEX
    if not ignored.any():
        zeros = float((labels == 0).float().mean())
        if zeros > 0.5:
            raise CheckFailed("your labels mark the positions that carry no loss with 0, but 0 "
                              "is a real token id ([PAD]).",
                              "use -100, which cross_entropy ignores.")
        raise CheckFailed("your labels hold a token at every position, but a position that was "
                          "not chosen carries no loss.",
                          "give the positions that were not chosen the label -100.")
    chosen = ~ignored
    if (chosen & (mask == 0)).any():
        raise CheckFailed("you chose padding positions (attention_mask 0; in half the rows "
                          "they hold ordinary ids, not [PAD]), but only real tokens may be "
                          "chosen.",
                          "draw only where attention_mask is 1.")
    if (chosen & ~eligible).any():
        raise CheckFailed("you chose special tokens ([CLS], [SEP] or [UNK]), but a position "
                          "holding any id in special_ids is never chosen.",
                          "exclude torch.isin(input_ids, torch.tensor(special_ids)) from the "
                          "draw.")
    if not torch.equal(labels[chosen], ids[chosen]):
        if torch.equal(labels[chosen], inputs[chosen]):
            raise CheckFailed("your labels hold the corrupted input ([MASK] or the random "
                              "token), not the original token the model must recover.",
                              "take the labels from input_ids before corrupting it.")
        raise CheckFailed("your labels at the chosen positions are not the original tokens.",
                          "labels = input_ids where chosen, -100 elsewhere.")
    if not torch.equal(inputs[ignored], ids[ignored]):
        raise CheckFailed("you changed positions that were not chosen (label -100), but only "
                          "chosen positions may be corrupted.",
                          "change inputs only where a position was chosen.")
    rate = int(chosen.sum()) / n_eligible
    se = math.sqrt(0.15 * 0.85 / n_eligible)
    if abs(rate - 0.15) > 5 * se:
        raise CheckFailed(f"you chose {_pct(rate)} of the {n_eligible:,} eligible positions "
                          "(real, non-special tokens), where 15% was expected.",
                          "choose each with probability p = 0.15.")
    m = int(chosen.sum())
    to_mask = chosen & (inputs == _MLM_MASK_ID)
    kept = chosen & (inputs == ids)
    to_random = chosen & ~to_mask & ~kept
    if to_random.any():
        drawn = inputs[to_random]
        if bool(torch.isin(drawn, torch.tensor(_MLM_SPECIALS)).any()):
            raise CheckFailed("some of your random replacements are special tokens.",
                              "draw the random token from the ordinary ids only (not in "
                              "special_ids).")
        if bool((drawn < 0).any() or (drawn >= _MLM_VOCAB).any()):
            raise CheckFailed("some of your random replacements lie outside 0..vocab_size - 1.",
                              "draw them with torch.randint(..., vocab_size, ...) among the "
                              "ordinary ids.")
    shares = [int(x.sum()) / m for x in (to_mask, to_random, kept)]
    targets = (0.8, 0.1, 0.1)
    if any(abs(s - t) > 5 * math.sqrt(t * (1 - t) / m) for s, t in zip(shares, targets,
                                                                        strict=True)):
        said = (f"of the chosen positions, {_pct(shares[0])} became [MASK], {_pct(shares[1])} "
                f"a random token and {_pct(shares[2])} stayed unchanged; BERT's split is "
                "80 / 10 / 10")
        split = ("draw one number per chosen position: below 0.8 -> [MASK], 0.8 to 0.9 -> "
                 "random, 0.9 and above -> unchanged.")
        if shares[0] > 0.97:
            raise CheckFailed(said + ": you replace every chosen token with [MASK].", split)
        if not to_random.any():
            raise CheckFailed(said + ": you never put in a random token.", split)
        if shares[1] < 0.06 and abs(shares[0] - 0.8) <= 5 * math.sqrt(0.16 / m):
            raise CheckFailed(said + ": too few random tokens. A random token is 10 % of all "
                              "chosen positions, i.e. half of the non-[MASK] ones; you seem to "
                              "put one in 10 % of the non-[MASK] ones.", split)
        if (shares[0] < 0.8 - 5 * math.sqrt(0.16 / m)
                and abs(shares[1] - 0.1) <= 5 * math.sqrt(0.09 / m)):
            raise CheckFailed(said + ": too few [MASK]s. Your [MASK] and random-token draws "
                              "seem independent, so a random token overwrites some [MASK]s.",
                              split)
        if shares[2] < 0.02:
            raise CheckFailed(said + ": you never leave a chosen token unchanged.", split)
        raise CheckFailed(said + ".", split)
    # A vocabulary of 3 ordinary tokens: a random token drawn from all 8 ids is often special.
    small = ids.remainder(3) + 5
    small[ids < 5] = ids[ids < 5]  # the same specials and padding
    small_case = "a batch whose vocabulary has 3 ordinary tokens (vocab_size=8)"
    s_inputs, s_labels = _corrupt_outputs(fn, small, mask, 2, small_case, vocab_size=8)
    s_changed = (s_labels != IGNORE_INDEX) & (s_inputs != _MLM_MASK_ID) & (s_inputs != small)
    if bool(torch.isin(s_inputs[s_changed], torch.tensor(_MLM_SPECIALS)).any()):
        raise CheckFailed("some of your random replacements are special tokens (seen on "
                          f"{small_case}).", "draw the random token from the ordinary ids only.")
    _check_scattered_specials(fn)
    again = _corrupt_outputs(fn, ids, mask, 0, case)
    if not (torch.equal(again[0], inputs) and torch.equal(again[1], labels)):
        raise CheckFailed("two calls with generators seeded alike gave different results.",
                          "draw every random number from `generator`: torch.rand(..., "
                          "generator=generator).")
    other = _corrupt_outputs(fn, ids, mask, 1, case)
    if torch.equal(other[1], labels):
        raise CheckFailed("generators with different seeds gave the same choice of positions.",
                          "draw the positions at random, from `generator`.")
    print(f"✓ MLM corruption ({name_of(fn)}): {n_eligible:,} eligible positions, 15 % chosen and "
          "80 / 10 / 10 within 5 standard errors; no special or padding position chosen; "
          "reproducible")
    return True



# --- The loss on the chosen positions (Lesson 5, §1) -------------------------------------------


def _masked_loss_reference(logits, labels):
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return torch.tensor(0.0)
    return F.cross_entropy(logits[scored], labels[scored])


def _masked_loss_all_positions(logits, labels):  # divides by b * n, not by the chosen count
    return _masked_loss_sum(logits, labels) / labels.numel()


def _masked_loss_sum(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                           reduction="sum")


def _masked_loss_per_row(logits, labels):  # the mean of the sequences' means
    rows = [_masked_loss_reference(lg, lb) for lg, lb in zip(logits, labels, strict=True)
            if (lb != IGNORE_INDEX).any()]
    return torch.stack(rows).mean() if rows else torch.tensor(0.0)


def _masked_loss_nan_when_empty(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


def _masked_loss_log_of_softmax(logits, labels):  # log(softmax): 0 underflows, -log 0 = inf
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return logits.sum() * 0.0
    p = torch.softmax(logits[scored], dim=-1)  # (m, V)
    return -torch.log(p[torch.arange(len(p)), labels[scored]]).mean()


def _masked_loss_negated(logits, labels):
    return -_masked_loss_reference(logits, labels)


def _masked_loss_probabilities(logits, labels):  # 1 - p instead of -log p
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return torch.tensor(0.0)
    p = torch.softmax(logits[scored], dim=-1).gather(-1, labels[scored][:, None])
    return (1 - p).mean()


def _masked_loss_batch_axis(logits, labels):  # log_softmax(dim=0): over the sequences
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return torch.tensor(0.0)
    log_p = torch.log_softmax(logits, dim=0)[scored]  # (m, V), normalised over the batch
    return -log_p.gather(-1, labels[scored][:, None]).mean()


def _masked_loss_chosen_axis(logits, labels):  # log_softmax(dim=0) after selecting (m, V)
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return torch.tensor(0.0)
    log_p = torch.log_softmax(logits[scored], dim=0)  # (m, V), normalised over the m positions
    return -log_p.gather(-1, labels[scored][:, None]).mean()


def _masked_loss_position_axis(logits, labels):  # log_softmax(dim=1): over the positions
    scored = labels != IGNORE_INDEX
    if not scored.any():
        return torch.tensor(0.0)
    log_p = torch.log_softmax(logits, dim=1)[scored]  # (m, V), normalised over the n positions
    return -log_p.gather(-1, labels[scored][:, None]).mean()


_WRONG_AXIS = ("your log_softmax normalises over the wrong axis (dim=0: across the sequences or "
               "the chosen positions), but each position's distribution is over the vocabulary, "
               "the last axis.",
               "use log_softmax(..., dim=-1), the V axis.")

_MASKED_LOSS_MISTAKES = [
    ("your log_softmax normalises over dim=1, the n positions of each sequence, but each "
     "position's distribution is over the vocabulary, the last axis.",
     "use log_softmax(..., dim=-1), the V axis.", _masked_loss_position_axis),
    (*_WRONG_AXIS, _masked_loss_batch_axis),
    (*_WRONG_AXIS, _masked_loss_chosen_axis),
    ("with no chosen position your loss is NaN (a mean over nothing), but a batch without "
     "chosen positions carries no signal.",
     "return 0 when no label differs from -100.", _masked_loss_nan_when_empty),
    ("you divide by all b * n positions, but the loss is the mean over the chosen positions "
     "only.",
     "divide by the number of chosen positions.", _masked_loss_all_positions),
    ("you sum the losses of the chosen positions instead of averaging them.",
     "take their mean.", _masked_loss_sum),
    ("you average each sequence's loss, then the sequences, so a sequence with more chosen "
     "positions does not count more.",
     "average over all chosen positions together.", _masked_loss_per_row),
    ("your loss has the wrong sign: cross-entropy is -log p of the right token, a positive "
     "number.",
     "negate it.", _masked_loss_negated),
    ("your loss is inf on the case with logits of size 200: softmax rounds the right token's "
     "probability to 0 there, and -log 0 is infinite.",
     "take torch.log_softmax(logits, dim=-1) (or F.cross_entropy), which subtracts the largest "
     "logit first and never forms the tiny probability.", _masked_loss_log_of_softmax),
    ("you use 1 - p of the right token, not cross-entropy.",
     "the loss is -log p of the right token.", _masked_loss_probabilities),
]


def _masked_loss_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(11)
    cases = []
    logits = torch.randn(2, 5, 7, generator=g)
    labels = torch.tensor([[-100, 3, -100, -100, 6], [1, -100, -100, 2, -100]])
    cases.append((logits, labels))
    logits = torch.randn(2, 6, 9, generator=g)
    labels = torch.tensor([[4, 0, 8, 2, -100, 5], [-100, -100, -100, -100, 7, -100]])
    cases.append((logits, labels))  # rows with 5 and 1 chosen: per-row means differ
    cases.append((torch.randn(1, 4, 5, generator=g), torch.full((1, 4), -100)))  # none chosen
    logits = torch.randn(3, 8, 11, generator=g)
    labels = torch.randint(11, (3, 8), generator=g)
    labels[torch.rand(3, 8, generator=g) > 0.3] = -100
    labels[0, 0] = 5  # at least one chosen
    cases.append((logits, labels))
    cases.append((torch.randn(2, 3, 4, generator=g), torch.randint(4, (2, 3), generator=g)))
    logits = 200 * torch.randn(2, 4, 6, generator=g)  # large logits: softmax underflows to 0
    cases.append((logits, torch.tensor([[1, -100, 4, 0], [-100, 5, -100, 2]])))
    return cases


def _loss_answer(result, where, logits, labels) -> torch.Tensor:
    out = as_tensor(result, "a 0-d loss tensor")
    if out.numel() != 1:
        raise CheckFailed(f"your loss has shape {tuple(out.shape)} on {where}, not one number.",
                          "return the mean over the chosen positions, a 0-d tensor.")
    if not getattr(result, "requires_grad", False):  # the logits given require grad
        raise CheckFailed(f"your loss on {where} is not connected to the logits (requires_grad "
                          "is False), so loss.backward() would raise on such a batch.",
                          "compute it from the logits; with nothing chosen, return "
                          "logits.sum() * 0.0, a zero that keeps the graph.")
    return out.detach().reshape(()).double()


def _first_wrong_loss(attempt) -> tuple[str, str]:
    i = attempt.first
    return (
        f"your loss is {float(attempt.answers[i]):.4f} but the mean cross-entropy over the chosen "
        f"positions is {float(attempt.references[i]):.4f} on case {i + 1} (labels "
        f"{attempt.cases[i][1].tolist()}).",
        "take -log_softmax at the right token where labels != -100.",
    )


_MASKED_LOSS = Exercise(
    title="masked-token loss",
    cases=_masked_loss_cases,
    arguments=lambda logits, labels: (logits.clone().requires_grad_(), labels.clone()),
    answer=_loss_answer,
    reference=lambda logits, labels: _masked_loss_reference(logits, labels).double(),
    describe=lambda logits, labels: (
        f"logits of shape {tuple(logits.shape)}, labels {labels.tolist()}"),
    same=close,
    mistakes=_MASKED_LOSS_MISTAKES,
    fallback=_first_wrong_loss,
)


def _naming_the_class_axis(fn: Callable) -> Callable:
    """``fn``, with PyTorch's shape error for cross_entropy on (b, n, V) logits put in words."""

    @functools.wraps(fn)
    def wrapped(logits, labels):
        try:
            return fn(logits, labels)
        except RuntimeError as error:
            if "Expected target size" not in str(error):
                raise
            raise CheckFailed(
                f"cross_entropy raised on logits of shape {tuple(logits.shape)} and labels "
                f"{tuple(labels.shape)} ({error}): it reads dimension 1 as the classes, so it "
                "took the n positions for the vocabulary.",
                "flatten first, F.cross_entropy(logits.flatten(0, 1), labels.flatten(), "
                "ignore_index=-100), or move V to dimension 1 with logits.transpose(1, 2).",
            ) from None

    return wrapped


@checker
def check_masked_loss(fn: Callable) -> bool:
    """Check ``fn(logits, labels) -> loss``: cross-entropy at the chosen positions (Lesson 5, §1).

    ``logits`` (b, n, V), ``labels`` (b, n) with -100 where no loss is taken; the answer is the
    mean of -log p(right token) over the chosen positions, and 0 when none is chosen (as
    :func:`encoderlab.objectives.mlm_loss`).
    """
    require_callable(fn)
    return run(_MASKED_LOSS, leaving_inputs(_naming_the_class_axis(fn), ("logits", "labels")))


# --- Filling every [MASK] of a batch (Lesson 5, §4) --------------------------------------------

_FILL_SPECIALS = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK], as in data.CompactVocab
_FILL_MASK_ID = 4
_SCATTERED_FILL_SPECIALS = (0, 9, 17, 25, 38)  # [PAD] [UNK] [CLS] [SEP] [MASK], scattered


def _fill_variant(model, input_ids, attention_mask, mask_id, special_ids, k, *, exclude="before",
                  offset=0, use_mask=True, output="probs"):
    """The top k ordinary tokens at every [MASK], with one switch turned: each non-default switch
    is a known mistake. Returns (ids (m, k), values (m, k)), m = the [MASK]s in row-major order."""
    rows, positions = (input_ids == mask_id).nonzero(as_tuple=True)  # (m,) each, row-major
    with torch.no_grad():
        logits = model(input_ids, attention_mask if use_mask else None)  # (b, n, V)
    scores = logits[rows, positions + offset]  # (m, V): the outputs at the [MASK]s
    specials = torch.tensor(sorted(set(special_ids)))
    if exclude == "before":  # the specials get probability 0, the rest is renormalised
        scores = scores.index_fill(-1, specials, -math.inf)
    probs = torch.softmax(scores, dim=-1)
    if exclude == "after":  # removed after the softmax: the rest no longer sums to 1
        probs = probs.index_fill(-1, specials, 0.0)
    if output == "logits":
        probs = scores
    elif output == "log_probs":
        probs = torch.log_softmax(scores, dim=-1)
    top = probs.topk(k, dim=-1)
    return top.indices, top.values


_FILL_MISTAKES = [
    ("your guesses include special tokens ([PAD], [UNK], [CLS], [SEP] or [MASK]).",
     "exclude the special_ids before ranking: set their logits to -inf before the softmax.",
     partial(_fill_variant, exclude="none")),
    ("your probabilities do not sum to 1 over the ordinary tokens: you zeroed the specials after "
     "the softmax.",
     "set their logits to -inf before it, so the rest is renormalised.",
     partial(_fill_variant, exclude="after")),
    ("you read the model's output one position to the left of the [MASK] (position t - 1, a "
     "decoder's habit), but an encoder predicts the hidden token from its output at the [MASK] "
     "itself.",
     "read the logits at position t.",
     partial(_fill_variant, offset=-1)),
    ("your guesses change with the padding: the model is run without the attention_mask, so "
     "real tokens attend to [PAD].",
     "pass it: model(input_ids, attention_mask).",
     partial(_fill_variant, use_mask=False)),
    ("you return logits, not probabilities.",
     "apply the softmax (over the ordinary tokens) to the scores before taking the top k.",
     partial(_fill_variant, output="logits")),
    ("you return log-probabilities, not probabilities.",
     "use torch.softmax, not log_softmax.",
     partial(_fill_variant, output="log_probs")),
]


def _fill_model(vocab_size: int, seed: int, specials: tuple = _FILL_SPECIALS):
    """A small random bidirectional TinyLM whose head favours the specials (they must be
    excluded), built without touching the global random state."""
    from encoderlab.encoder import EncoderConfig  # the model modules, only when a check runs
    from encoderlab.heads import TinyLM

    config = EncoderConfig(vocab_size=vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                           n_max=16, dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyLM(config, causal=False).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # larger weights: outputs that vary with context
            if p.dim() == 2 and "embedding" not in name:
                p.mul_(3.0)
        model.head.proj.bias[list(specials)] += 4.0
    return model


def _fill_cases() -> list[tuple]:
    """(model, input_ids, attention_mask, mask_id, special_ids, k): one [MASK] per row, several,
    padded rows, a row without any [MASK]."""
    g = torch.Generator().manual_seed(5)
    cases = []
    for seed, lengths, masked, k in [(0, (7,), [(0, 3)], 5), (1, (8, 5), [(0, 2), (1, 3)], 3),
                                     (2, (6, 9, 4), [(0, 1), (0, 4), (1, 7), (2, 2)], 4),
                                     (3, (5, 8), [(1, 5), (1, 6)], 2)]:
        b, n = len(lengths), max(lengths)
        ids = torch.randint(5, 40, (b, n), generator=g)
        attention_mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()
        ids[:, 0] = 2  # [CLS]
        ids[torch.arange(b), torch.tensor(lengths) - 1] = 3  # [SEP]
        ids[attention_mask == 0] = 0  # [PAD]
        for row, t in masked:
            ids[row, t] = _FILL_MASK_ID
        cases.append((_fill_model(40, seed), ids, attention_mask, _FILL_MASK_ID,
                      list(_FILL_SPECIALS), k))
    # Special ids that are neither the smallest nor contiguous: [PAD] 0, [UNK] 9, [CLS] 17,
    # [SEP] 25, [MASK] 38; scores[:, :len(special_ids)] = -inf leaves four of them in.
    pad, unk, cls, sep, mask = _SCATTERED_FILL_SPECIALS
    ordinary = torch.tensor([i for i in range(40) if i not in _SCATTERED_FILL_SPECIALS])
    ids = ordinary[torch.randint(len(ordinary), (2, 7), generator=g)]
    ids[:, 0], ids[0, 6], ids[1, 4], ids[1, 5:] = cls, sep, sep, pad
    ids[0, 2], ids[0, 4], ids[1, 1] = mask, mask, mask
    attention_mask = (ids != pad).long()
    cases.append((_fill_model(40, 4, _SCATTERED_FILL_SPECIALS), ids, attention_mask, mask,
                  [pad, unk, cls, sep, mask], 3))
    return cases


def _describe_fill(model, input_ids, attention_mask, mask_id, special_ids, k) -> str:
    return f"input_ids {input_ids.tolist()}, k = {k}"


def _fill_answer(result, where, model, input_ids, attention_mask, mask_id, special_ids, k):
    m = int((input_ids == mask_id).sum())
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailed(f"your function returned {type(result).__name__}, not a pair.",
                          "return (ids, probs), each of shape (m, k) for the m [MASK] tokens.")
    ids = as_tensor(result[0], "ids of shape (m, k)").cpu()
    probs = as_tensor(result[1], "probabilities of shape (m, k)").cpu()
    if ids.is_floating_point() and not probs.is_floating_point():
        raise CheckFailed(
            f"your pair is (probabilities, ids) on {where}: the first element holds floats "
            f"({ids.dtype}) and the second integers ({probs.dtype}).",
            "return (ids, probs) in that order, as torch.topk gives (values, indices): "
            "top.indices first, then top.values.")
    if tuple(ids.shape) != (m, k) or tuple(probs.shape) != (m, k):
        raise CheckFailed(
            f"your ids and probs have shapes {tuple(ids.shape)} and {tuple(probs.shape)} on "
            f"{where}, which has m = {m} [MASK] tokens; (m, k) = {(m, k)} was expected.",
            "return one row of k per [MASK], in row-major order: (input_ids == mask_id).nonzero().",
        )
    return ids.long(), probs.double()


def _same_fill(mine, right) -> bool:
    return torch.equal(mine[0], right[0]) and close(mine[1], right[1])


def _shifted_ids(attempt) -> Message | None:
    """Every guess off by one constant: ids read from a slice of the logits, not shifted back."""
    k = attempt.first
    mine, right = attempt.answers[k][0], attempt.references[k][0]
    shift = (right - mine).unique()
    if len(shift) != 1 or int(shift) == 0:
        return None
    c = int(shift)
    return (f"every id you return is {abs(c)} {'lower' if c > 0 else 'higher'} than the right "
            f"one on {attempt.where(k)}: yours {mine.tolist()}, expected {right.tolist()}. "
            f"Positions in a slice such as logits[..., {c}:] are not token ids.",
            f"add the offset back ({'ids + ' if c > 0 else 'ids - '}{abs(c)}), or keep all V "
            "scores and set the special_ids to -inf.")


def _special_guesses(attempt) -> Message | None:
    """Tried first: ids shifted by a constant, then a special id among the guesses."""
    shifted = _shifted_ids(attempt)
    if shifted:
        return shifted
    for k in attempt.wrong:
        _, _, _, _, special_ids, _ = attempt.cases[k]
        found = sorted(set(attempt.answers[k][0].flatten().tolist()) & set(special_ids))
        if found and sorted(special_ids) != list(range(len(special_ids))):
            return (f"your guesses include the special id(s) {found} on {attempt.where(k)}, "
                    f"whose special_ids are {list(special_ids)}: they are not the ids "
                    f"0..{len(special_ids) - 1}, so excluding the first len(special_ids) "
                    "columns (or any range) misses some.",
                    "index the logits with the ids themselves: "
                    "scores[:, list(special_ids)] = float('-inf').")
        if found:
            return (f"your guesses include the special id(s) {found} on {attempt.where(k)}; "
                    f"every id in special_ids = {list(special_ids)} ([PAD], [UNK], [CLS], "
                    "[SEP], [MASK]) must be excluded, not only [MASK].",
                    "set the logits of all special_ids to -inf before the softmax: "
                    "scores[:, special_ids] = float('-inf').")
    return None


def _fill_fallback(attempt) -> Message:
    k = attempt.first
    mine, right = attempt.answers[k], attempt.references[k]
    if not torch.equal(mine[0], right[0]):
        where = f"on {attempt.where(k)}: yours {mine[0].tolist()}, expected {right[0].tolist()}"
        if torch.equal(mine[0].flip(-1), right[0]):
            return (f"your guesses are the right ones but least probable first {where}.",
                    "keep topk's order (sorted=True): most probable first.")
        if torch.equal(mine[0].sort(-1).values, right[0].sort(-1).values):
            return (f"your guesses are the right ones in another order {where}.",
                    "order each row most probable first, as torch.topk returns them.")
        mine_rows = sorted(map(tuple, mine[0].tolist()))
        if mine_rows == sorted(map(tuple, right[0].tolist())):
            return (f"your rows are the right guesses for the [MASK]s, but in another order of "
                    f"[MASK]s {where}.",
                    "take the [MASK]s in row-major order, sequence by sequence and left to "
                    "right: rows, positions = (input_ids == mask_id).nonzero(as_tuple=True).")
        return (f"your top-k ids differ from the reference {where} (most probable first).",
                "logits = model(input_ids, attention_mask); take the rows at the [MASK]s, set "
                "the special_ids to -inf, softmax, then torch.topk(probs, k).")
    gap = (mine[1] - right[1]).abs().max().item()
    return (f"your ids are right but your probabilities differ by up to {gap:.3g} on "
            f"{attempt.where(k)}.", "softmax over the ordinary tokens (specials at -inf).")


class _CountedModel:
    """The model, with its forward passes counted; everything else is the model's own."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def _running_model_once(fn: Callable) -> Callable:
    """``fn`` given a counted model: more than one forward pass on a batch fails."""

    @functools.wraps(fn)
    def counted(model, *args):
        counter = _CountedModel(model)
        result = fn(counter, *args)
        if counter.calls > 1:
            raise CheckFailed(
                f"your function ran the model {counter.calls} times on one batch; the exercise "
                "runs it once on the whole batch and reads every [MASK]'s output from that "
                "one result.",
                "logits = model(input_ids, attention_mask) once, then logits[rows, positions] "
                "with rows, positions = (input_ids == mask_id).nonzero(as_tuple=True).")
        return result

    return counted


_FILL = Exercise(
    title="fill every [MASK]",
    cases=_fill_cases,
    arguments=lambda model, ids, am, mask_id, special_ids, k: (
        model, ids.clone(), am.clone(), mask_id, list(special_ids), k),
    answer=_fill_answer,
    reference=lambda *case: tuple(t.double() if t.is_floating_point() else t
                                  for t in _fill_variant(*case)),
    describe=_describe_fill,
    same=_same_fill,
    notice=_special_guesses,
    mistakes=_FILL_MISTAKES,
    fallback=_fill_fallback,
    numbered=True,
)


@checker
def check_fill_mask(fn: Callable) -> bool:
    """Check ``fn(model, input_ids, attention_mask, mask_id, special_ids, k)``: the k most probable
    ordinary tokens at every [MASK] of a padded batch, with their probabilities (Lesson 5, §4).

    The model must run once per batch (it is counted), and input_ids must not change."""
    require_callable(fn)
    return run(_FILL, leaving_inputs(_running_model_once(fn), ("model", "input_ids",
                                                               "attention_mask")))

"""Retrieve, then re-rank (Lesson 8, §6): a small cross-encoder that re-orders the bi-encoder's
top k, ``python -m encoderlab train l8-rerank``.

The bi-encoder is all-MiniLM-L6-v2 as it ships (mean pooling, :func:`bi_encoder_top_k`). The
cross-encoder is the same MiniLM reading "[CLS] query [SEP] passage [SEP]" in one pass, with a
one-output linear layer on the mean of that pass's final token vectors (:class:`PairScorer`).
Only the last block and that layer learn; the five blocks below are frozen, so their output for
every training pair is computed once and cached (:func:`cache_pair_states`). Each training query
is shown its right passage next to ``negatives`` wrong ones drawn from the bi-encoder's ranks 5
to 30, with the positive's paraphrases removed
(:func:`encoderlab.lessons.l08_contrastive.mine_negatives`), and the loss is the cross-entropy of
picking the right one (:func:`rerank_run`), with a warm-up and a linear decay of the learning
rate; the score layer's output is multiplied by ``head_gain`` during training, a larger step for
that layer under AdamW. The pairs are Lesson 8's docstring pairs: the test queries are the
held-out pairs of the
contrastive run (:func:`encoderlab.lessons.l08_contrastive.split_pairs`), and the training pairs
are split again the same way into the pairs trained on and a validation set that picks the epoch
(:func:`rerank_splits`). The three sets share no query.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab.course.train import train, warmup_factor
from encoderlab.data import shuffled_batches, trim_padding
from encoderlab.heads import pool
from encoderlab.lessons.l08_contrastive import mine_negatives, split_pairs
from encoderlab.lessons.l08_retrieval import run_block, search, sentence_embeddings
from encoderlab.pretrained import load_minilm
from encoderlab.validate import check_int

__all__ = ["RERANK", "bi_encoder_top_k", "hard_negatives", "cache_pair_states", "PairScorer",
           "rerank_splits", "warmup_then_decay", "rerank_run", "score_cached_pairs",
           "cross_encoder_scores", "rerank_top_k", "load_pair_scorer", "RECIPES"]


RERANK = {  # the settings of the committed run, l8-rerank
    "top_k": 10,  # the bi-encoder's candidates the cross-encoder re-orders
    "negatives": 3,  # negatives per training query
    "rank_from": 5,  # drawn from the bi-encoder's ranks rank_from..rank_to (1 = best)
    "rank_to": 30,
    "max_cos": 0.9,  # a candidate this close to the positive passage is a paraphrase
    "epochs": 4,  # the most; the validation set picks the epoch that is kept
    "groups": 8,  # training queries per step, each with 1 + negatives passages
    "lr": 1e-4,
    "head_gain": 30.0,  # the score layer's output times this: with AdamW, its lr times 30
    "warmup": 0.1,  # the share of the steps over which the learning rate rises from 0
    "pooling": "mean",  # the vector the score layer reads: "cls" or "mean" (heads.pool)
    "prior_scale": 20.0,  # score = prior_scale * bi-encoder cosine + the cross-encoder's output
    "max_length": 64,  # of a (query, passage) pair
    "held_out_every": 10,  # the split of l8-contrastive, then again for the validation set
    "seed": 0,
}


def bi_encoder_top_k(query_vecs: torch.Tensor, passage_vecs: torch.Tensor, k: int):
    """(scores, indices), each (n_q, k): the bi-encoder's top ``k`` passages per query, best
    first, by cosine of unit vectors (Lesson 8, §6). A thin name for :func:`search`."""
    return search(query_vecs, passage_vecs, k)


def hard_negatives(scores: torch.Tensor, positives, n: int) -> torch.Tensor:
    """(n_q, n) long: each query's ``n`` highest-scoring passages that are not its positive.

    (Lesson 8, §6.) ``scores`` is (n_q, n_p), the bi-encoder's scores; ``positives[i]`` the
    index of query i's right passage, never returned as its negative. Ties keep the lower index
    first (a stable sort), so the result is the same on every machine.
    """
    scores = torch.as_tensor(scores)
    n_q, n_p = scores.shape
    check_int(n, "n", at_least=1, at_most=n_p - 1, what="the number of negatives per query")
    positives = torch.as_tensor(positives, dtype=torch.long)
    if positives.shape != (n_q,):
        raise ValueError(f"positives must have one index per query ({n_q}), got "
                         f"{tuple(positives.shape)}.")
    masked = scores.clone().float()
    masked[torch.arange(n_q), positives] = -torch.inf  # the positive is never a negative
    order = torch.sort(masked, dim=1, descending=True, stable=True).indices
    return order[:, :n]


def rerank_splits(held_out_every: int = 10):
    """(fit, validation, test) docstring pairs (Lesson 8, §6): the test pairs are the held-out
    pairs of ``l8-contrastive``; its training pairs are split again the same way (every
    ``held_out_every``-th, none sharing an 8-word span with the rest) into the pairs trained on
    and a validation set. No query is in two of the three."""
    train_pairs, test = split_pairs(held_out_every=held_out_every)
    fit, validation = split_pairs(train_pairs, held_out_every=held_out_every)
    return fit, validation, test


def warmup_then_decay(steps: int, warmup: float):
    """schedule(step) for :func:`encoderlab.course.train.train`: the learning rate rises
    linearly over the first ``warmup`` share of ``steps``, then falls linearly to 0."""
    check_int(steps, "steps", at_least=1)
    if not 0 <= warmup < 1:
        raise ValueError(f"warmup must be a share of the steps in [0, 1), got {warmup!r}.")
    rise = max(1, round(warmup * steps))
    return lambda step: warmup_factor(step, steps, rise)


def cache_pair_states(tokenizer, model, queries, passages, max_length: int = 128,
                      batch_size: int = 32):
    """(hidden, mask): H^(L-1) of every "[CLS] query [SEP] passage [SEP]", padded (N, n, d),
    and its mask (N, n), rows in the order given (Lesson 8, §6). The frozen blocks run once."""
    if len(queries) != len(passages) or not queries:
        raise ValueError(f"pass as many queries as passages (one pair each), got {len(queries)} "
                         f"and {len(passages)}.")
    hidden, masks_ = [], []
    with torch.no_grad():
        for start in range(0, len(queries), batch_size):
            enc = tokenizer(list(queries[start:start + batch_size]),
                            list(passages[start:start + batch_size]), padding=True,
                            truncation=True, max_length=max_length, return_tensors="pt")
            out = model(enc["input_ids"], token_type_ids=enc["token_type_ids"],
                        attention_mask=enc["attention_mask"])
            hidden.append(out.hidden_states[-2])  # (b, n, d): the last block's input
            masks_.append(enc["attention_mask"])
    n = max(h.shape[1] for h in hidden)
    return (torch.cat([F.pad(h, (0, 0, 0, n - h.shape[1])) for h in hidden]),
            torch.cat([F.pad(m, (0, n - m.shape[1])) for m in masks_]))


class PairScorer(nn.Module):
    """The cross-encoder's trained part: MiniLM's last block, then a linear layer on one pooled
    vector of the joint pass (``pooling``: the final [CLS] row or the mean of the real rows),
    giving one relevance score per pair (Lesson 8, §6)."""

    def __init__(self, block: nn.Module, d_model: int, pooling: str = "cls",
                 gain: float = 1.0):
        super().__init__()
        self.gain = float(gain)  # the output is gain * score(pooled): see RERANK["head_gain"]
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}.")
        self.block = block
        self.pooling = pooling
        self.score = nn.Linear(d_model, 1)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(b, n, d) cached H^(L-1) and its (b, n) mask -> (b,) scores."""
        out = run_block(self.block, hidden, attention_mask)  # (b, n, d)
        return self.gain * self.score(pool(out, attention_mask, how=self.pooling)).squeeze(-1)


def rerank_run(scorer: PairScorer, hidden: torch.Tensor, mask: torch.Tensor, group_size: int,
               steps: int, groups: int = 8, lr: float = 1e-4, seed: int = 0,
               progress: bool = True, schedule=None, on_epoch=None,
               prior: torch.Tensor | None = None) -> list[float]:
    """Train ``scorer`` to pick each query's right passage among its group (Lesson 8, §6).

    ``hidden`` holds ``group_size`` pairs per training query, consecutive: the right passage
    first, then its negatives. A step takes ``groups`` queries; the loss is the cross-entropy
    of each group's scores against position 0. ``schedule`` multiplies the learning rate at
    each step (:func:`warmup_then_decay`); ``on_epoch(epoch)``, if given, is called after every
    full pass over the queries, with ``scorer`` in evaluation mode (the validation). ``prior``
    (N,), if given, is added to each pair's score: the scorer then learns a correction to it
    (the bi-encoder's scaled cosine, in ``l8-rerank``). Returns the loss of every step.
    """
    n_groups = hidden.shape[0] // group_size
    per_epoch = n_groups // min(groups, n_groups)  # full batches only (shuffled_batches)

    def loss_fn(scorer, batch):
        (rows,) = batch
        index = (rows.unsqueeze(1) * group_size + torch.arange(group_size)).reshape(-1)
        h, m = trim_padding(hidden[index], mask[index])
        scores = scorer(h, m)  # (groups * group_size,)
        if prior is not None:
            scores = scores + prior[index]
        return F.cross_entropy(scores.view(-1, group_size),
                               torch.zeros(len(rows), dtype=torch.long))

    def epoch_end(step):
        scorer.eval()
        with torch.no_grad():
            on_epoch(step // per_epoch)
        scorer.train()

    def batches():
        stream = shuffled_batches(torch.arange(n_groups), batch_size=groups, seed=seed)
        for step, batch in enumerate(stream):
            if on_epoch is not None and step and step % per_epoch == 0:
                epoch_end(step)  # the model has taken `step` steps
            yield batch

    history = train(scorer, batches(), loss_fn, steps=steps, lr=lr, seed=seed,
                    progress=progress, description="re-ranker", schedule=schedule)
    if on_epoch is not None and steps % per_epoch == 0:
        with torch.no_grad():
            on_epoch(steps // per_epoch)  # the last epoch (train() left eval mode on)
    return history


def score_cached_pairs(scorer: PairScorer, hidden: torch.Tensor, mask: torch.Tensor,
                       batch_size: int = 32) -> torch.Tensor:
    """(N,) ``scorer``'s outputs for pairs whose H^(L-1) is cached (:func:`cache_pair_states`)."""
    out = []
    with torch.no_grad():
        for start in range(0, hidden.shape[0], batch_size):
            h, m = trim_padding(hidden[start:start + batch_size], mask[start:start + batch_size])
            out.append(scorer(h, m))
    return torch.cat(out)


def cross_encoder_scores(tokenizer, model, scorer: PairScorer, queries, passages,
                         max_length: int = 128, batch_size: int = 32) -> torch.Tensor:
    """(N,) scores of the pairs (queries[i], passages[i]): the frozen blocks, then ``scorer``."""
    hidden, mask = cache_pair_states(tokenizer, model, queries, passages, max_length, batch_size)
    return score_cached_pairs(scorer, hidden, mask, batch_size)


def rerank_top_k(bi_scores: torch.Tensor, cross_score, k: int) -> torch.Tensor:
    """(n_q, k) long: each query's bi-encoder top ``k`` passages, re-ordered by the
    cross-encoder (Lesson 8, §6).

    ``bi_scores`` is (n_q, n_p); ``cross_score(i, candidates)`` returns the cross-encoder's
    scores (len(candidates),) of query i with the passages ``candidates`` (a list of indices).
    Only the top ``k`` are scored. Ties in the cross-encoder's scores keep the bi-encoder's
    order (a stable sort of candidates listed best first by the bi-encoder); ties in the
    bi-encoder's scores keep the lower index first.
    """
    bi_scores = torch.as_tensor(bi_scores)
    check_int(k, "k", at_least=1, at_most=bi_scores.shape[1])
    first = torch.sort(bi_scores, dim=1, descending=True, stable=True).indices[:, :k]
    out = []
    for i, candidates in enumerate(first.tolist()):
        scores = torch.as_tensor(cross_score(i, candidates), dtype=torch.float64).reshape(-1)
        if scores.numel() != k:
            raise ValueError(f"cross_score({i}, ...) returned {scores.numel()} scores for {k} "
                             f"candidates.")
        order = torch.sort(scores, descending=True, stable=True).indices
        out.append(torch.tensor(candidates)[order])
    return torch.stack(out)


def _pairs_of(queries, passages, rows):
    """The (query, passage) texts of each query i with the passages ``rows[i]``, in order."""
    return ([queries[i] for i, row in enumerate(rows) for _ in row],
            [passages[j] for row in rows for j in row])


def _rerank_recipe(steps: int | None = None, progress: bool = True, **overrides):
    """Lesson 8, §6: a MiniLM cross-encoder (last block + score layer) trained with negatives
    from the bi-encoder's ranks 5 to 30; the epoch kept is the best on the validation set.

    The score layer's output is multiplied by ``head_gain`` during training, which under AdamW
    (steps of about ``lr`` per weight, whatever the gradient's size) makes that layer move
    ``head_gain`` times faster than the block; the saved layer has the gain folded into its
    weights, so :func:`load_pair_scorer` needs no gain."""
    settings = dict(RERANK) | overrides
    torch.manual_seed(settings["seed"])
    tokenizer, model = load_minilm()
    fit, val, test = rerank_splits(settings["held_out_every"])
    summaries = [a for a, _ in fit]
    details = [b for _, b in fit]
    q = sentence_embeddings(tokenizer, model, summaries)
    d = sentence_embeddings(tokenizer, model, details)
    same_text = [[details[j] == details[i] for j in range(len(details))]
                 for i in range(len(details))]
    negatives = mine_negatives(q @ d.T, d, torch.arange(len(details)), settings["negatives"],
                               settings["rank_from"], settings["rank_to"], settings["max_cos"],
                               same_text=same_text, seed=settings["seed"])
    group = 1 + settings["negatives"]
    rows = [[i, *row] for i, row in enumerate(negatives.tolist())]  # the right passage first
    cos = q @ d.T
    prior = settings["prior_scale"] * torch.stack([cos[i, row] for i, row in enumerate(rows)])
    prior = prior.reshape(-1)  # (fit * group,): the bi-encoder's scaled cosine of each pair
    hidden, mask = cache_pair_states(tokenizer, model, *_pairs_of(summaries, details, rows),
                                     settings["max_length"])
    # The validation set: each validation summary's bi-encoder top k among the validation details.
    top_k = settings["top_k"]
    vq = sentence_embeddings(tokenizer, model, [a for a, _ in val])
    vd = sentence_embeddings(tokenizer, model, [b for _, b in val])
    v_cos, v_top = bi_encoder_top_k(vq, vd, top_k)  # (n_val, k)
    v_hidden, v_mask = cache_pair_states(
        tokenizer, model, *_pairs_of([a for a, _ in val], [b for _, b in val], v_top.tolist()),
        settings["max_length"])

    def val_mrr(scorer) -> tuple[float, float]:
        scores = torch.cat([scorer(*trim_padding(v_hidden[s:s + 64], v_mask[s:s + 64]))
                            for s in range(0, v_hidden.shape[0], 64)]).view(len(val), top_k)
        scores = scores + settings["prior_scale"] * v_cos
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices
        ranked = torch.gather(v_top, 1, order)
        rank = torch.full((len(val),), top_k + 1.0)
        for i, row in enumerate(ranked.tolist()):
            if i in row:
                rank[i] = row.index(i) + 1.0
        return float((rank == 1).float().mean()), float((1 / rank).where(rank <= top_k, 0.0).mean())

    torch.manual_seed(settings["seed"])
    scorer = PairScorer(copy.deepcopy(model.blocks[-1]), model.config.d_model,
                        pooling=settings["pooling"], gain=settings.get("head_gain", 1.0))
    if settings["prior_scale"]:  # a score layer at zero: training starts as the bi-encoder
        nn.init.zeros_(scorer.score.weight)
        nn.init.zeros_(scorer.score.bias)
    per_epoch = len(fit) // settings["groups"]
    total = settings["epochs"] * per_epoch if steps is None else steps
    curve, best = [], {}

    def on_epoch(epoch):
        r1, mrr = val_mrr(scorer)
        curve.append((r1, mrr))
        if not best or mrr > best["mrr"]:  # ties keep the earlier epoch
            best.update(mrr=mrr, epoch=epoch,
                        state={k: v.detach().clone() for k, v in scorer.state_dict().items()})

    history = rerank_run(scorer, hidden, mask, group, steps=total, groups=settings["groups"],
                         lr=settings["lr"], seed=settings["seed"], progress=progress,
                         schedule=warmup_then_decay(total, settings["warmup"]),
                         on_epoch=on_epoch, prior=prior if settings["prior_scale"] else None)
    if not best:  # a run shorter than one epoch (--steps): keep the last weights
        best.update(epoch=0, state=scorer.state_dict())
    # float16 keeps the artefact small (1.8 M parameters); the lesson evaluates these weights.
    state = dict(best["state"])
    for k in ("score.weight", "score.bias"):  # fold the gain in: the saved layer needs none
        state[k] = state[k] * scorer.gain
    tensors = {k: v.to(torch.float16) for k, v in state.items()}
    tensors["loss"] = torch.tensor(history, dtype=torch.float32)
    tensors["validation"] = torch.tensor(curve, dtype=torch.float32).reshape(-1, 2)
    tensors["negatives"] = negatives
    metadata = {**{k: str(v) for k, v in settings.items()},
                "steps": str(total), "steps_per_epoch": str(per_epoch),
                "kept_epoch": str(best["epoch"]), "fit_pairs": str(len(fit)),
                "validation_pairs": str(len(val)), "test_pairs": str(len(test)),
                "train_pairs": str(len(fit) + len(val)), "held_out_pairs": str(len(test))}
    return tensors, metadata


def load_pair_scorer(model, tensors: dict[str, torch.Tensor], pooling: str = "cls") -> PairScorer:
    """The trained :class:`PairScorer` of ``l8-rerank`` (float32), on a copy of ``model``'s last
    block; ``pooling`` is the artefact's (its metadata says which)."""
    scorer = PairScorer(copy.deepcopy(model.blocks[-1]), model.config.d_model, pooling=pooling)
    state = {k: v.float() for k, v in tensors.items()
             if k.startswith(("block.", "score."))}
    scorer.load_state_dict(state)  # strict: every tensor used, every shape checked
    return scorer.eval()


def _rerank_alone_recipe(steps: int | None = None, progress: bool = True):
    """Lesson 8, §6: l8-rerank without the bi-encoder's prior: the cross-encoder's score alone,
    from a freshly initialised score layer (the control)."""
    # the committed control's settings: no prior, no gain, two epochs
    return _rerank_recipe(steps=steps, progress=progress, prior_scale=0.0, head_gain=1.0,
                          epochs=2)


RECIPES = {"l8-rerank": _rerank_recipe, "l8-rerank-alone": _rerank_alone_recipe}

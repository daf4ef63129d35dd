"""The tiny contrastive run of Lesson 8, §5: MiniLM's last block retrained with in-batch
negatives, ``python -m encoderlab train l8-contrastive``.

Training pairs come from the docstrings of :data:`encoderlab.data.DOC_MODULES`, never from the
language reference's topics (the documents searched) or from the queries: a docstring's first
sentence (its summary) is paired with the sentences that follow it (:func:`docstring_pairs`).
Only the last block learns; the layers below run once and their outputs are cached
(:func:`contrastive_data`). The committed run's settings are :data:`CONTRASTIVE`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from encoderlab.data import read_frozen, shuffled_batches, trim_padding, without_shared_spans
from encoderlab.heads import pool
from encoderlab.lessons.l08_retrieval import (
    CachedStates,
    cache_states,
    in_batch_negatives_loss,
    run_block,
    sentence_embeddings,
    topic_documents,
)
from encoderlab.pretrained import load_minilm
from encoderlab.training import load_stored_part, train
from encoderlab.validate import check_int

__all__ = ["CONTRASTIVE", "CONTRASTIVE_HARD", "docstring_pairs", "split_pairs", "ContrastiveData",
           "contrastive_data", "contrastive_run", "load_contrastive_block", "mine_negatives",
           "hard_negative_loss", "contrastive_hard_run", "RECIPES"]


CONTRASTIVE = {  # the settings of the committed run, l8-contrastive
    "steps": 150,
    "batch_size": 32,
    "lr": 1e-4,
    "scale": 20.0,  # sentence-transformers' MultipleNegativesRankingLoss default
    "pooling": "cls",  # train [CLS] into a sentence vector: the weakest pooling of §2
    "max_length": 64,
    "held_out_every": 10,
    "seed": 0,
}

# The same run with one mined hard negative per pair in every batch (l8-contrastive-hard): every
# setting of CONTRASTIVE, plus where the negatives come from.
CONTRASTIVE_HARD = {
    **CONTRASTIVE,
    "negatives": 1,  # mined hard negatives per training pair
    "rank_from": 5,  # drawn from the bi-encoder's ranks rank_from..rank_to of the details
    "rank_to": 30,
    "max_cos": 0.9,  # a candidate this close to the positive (bi-encoder cosine) is a paraphrase
}


def docstring_pairs(max_words: int = 30) -> list[tuple[str, str]]:
    """(summary, details) pairs: a docstring's first sentence and the next ~``max_words`` words.

    (Lesson 8, §5.) Docstrings with fewer than two prose sentences are skipped, and a summary
    that repeats an earlier one is kept once. Nothing comes from the documents or queries that
    Lesson 8 searches with. The docstrings are CPython 3.11's, read from the frozen file
    ``corpora/docstring-pairs.json.gz`` (each docstring's prose sentences of 4 words or more),
    the same on every Python version.
    """
    pairs, seen = [], set()
    for sentences in read_frozen("docstring-pairs")["docstrings"]:
        if len(sentences) < 2 or sentences[0] in seen:
            continue
        rest: list[str] = []
        for sentence in sentences[1:]:
            if sum(len(r.split()) for r in rest) >= max_words:
                break
            rest.append(sentence)
        seen.add(sentences[0])
        pairs.append((sentences[0], " ".join(rest)))
    return pairs


@dataclass
class ContrastiveData:
    """Cached inputs of MiniLM's last block for the training and held-out pairs (Lesson 8, §5)."""

    anchors: torch.Tensor  # (N, n, d): H^(L-1) of the summaries, padded
    anchor_mask: torch.Tensor  # (N, n)
    positives: torch.Tensor  # (N, n', d): H^(L-1) of the details
    positive_mask: torch.Tensor  # (N, n')
    held_out: list[tuple[str, str]]  # pairs never trained on
    train_pairs: int


def _padded(states: CachedStates) -> tuple[torch.Tensor, torch.Tensor]:
    """All cached batches as one padded tensor (N, n, d), rows in the texts' order."""
    n = max(h.shape[1] for h in states.hidden)
    hidden = torch.cat([F.pad(h, (0, 0, 0, n - h.shape[1])) for h in states.hidden])
    mask = torch.cat([F.pad(m, (0, n - m.shape[1])) for m in states.masks])
    inverse = torch.argsort(torch.tensor(states.order))
    return hidden[inverse], mask[inverse]


def split_pairs(pairs=None, held_out_every: int = 10):
    """(training pairs, held-out pairs) of ``pairs`` (default :func:`docstring_pairs`).

    (Lesson 8, §5.) Every ``held_out_every``-th pair is held out, unless it shares an 8-word
    span with a training pair (then it is dropped), so a held-out pair is never a near-copy of
    one the model was trained on. The lesson and the ``l8-contrastive`` run split the same way.
    """
    check_int(held_out_every, "held_out_every", at_least=2)
    pairs = docstring_pairs() if pairs is None else list(pairs)
    train = [p for i, p in enumerate(pairs) if i % held_out_every != held_out_every - 1]
    held = [p for i, p in enumerate(pairs) if i % held_out_every == held_out_every - 1]
    held = without_shared_spans(held, train)  # no held-out pair shares 8 words with training
    return train, held


def contrastive_data(tokenizer, model, pairs=None, held_out_every: int = 10,
                     max_length: int = 64) -> ContrastiveData:
    """Split ``pairs`` (default :func:`docstring_pairs`) by position, every ``held_out_every``-th
    held out unless it shares an 8-word span with a training pair (then it is dropped), and cache
    the training pairs' inputs of the last block (frozen layers run once)."""
    train, held = split_pairs(pairs, held_out_every)
    a = _padded(cache_states(tokenizer, model, [x for x, _ in train], -2, 32, max_length))
    b = _padded(cache_states(tokenizer, model, [y for _, y in train], -2, 32, max_length))
    return ContrastiveData(a[0], a[1], b[0], b[1], held, len(train))


def contrastive_run(block, data: ContrastiveData, steps: int, batch_size: int = 32,
                    lr: float = 1e-4, scale: float = 20.0, pooling: str = "cls", seed: int = 0,
                    progress: bool = True) -> list[float]:
    """Train ``block`` (a copy of the last encoder block) with in-batch negatives (Lesson 8, §5).

    Each step takes ``batch_size`` training pairs; row i's summary must pick out row i's
    details among the batch's ``batch_size`` details (:func:`in_batch_negatives_loss`). Only
    ``block`` learns: the layers below are frozen, their outputs cached in ``data``.
    Returns the loss of every step.
    """
    def loss_fn(block, batch):
        (rows,) = batch
        ha, ma = trim_padding(data.anchors[rows], data.anchor_mask[rows])  # (B, n', d), (B, n')
        hb, mb = trim_padding(data.positives[rows], data.positive_mask[rows])
        a = pool(run_block(block, ha, ma), ma, how=pooling)  # (B, d)
        b = pool(run_block(block, hb, mb), mb, how=pooling)  # (B, d)
        return in_batch_negatives_loss(a, b, scale=scale)

    batches = shuffled_batches(torch.arange(data.train_pairs), batch_size=batch_size, seed=seed)
    return train(block, batches, loss_fn, steps=steps, lr=lr, seed=seed, progress=progress,
                 description="in-batch negatives")


def mine_negatives(scores: torch.Tensor, passage_vecs: torch.Tensor, positives, n: int,
                   rank_from: int = 5, rank_to: int = 30, max_cos: float = 0.9,
                   same_text=None, seed: int = 0) -> torch.Tensor:
    """(n_q, n) long: ``n`` distinct hard negatives per query, drawn at random from the
    bi-encoder's ranks ``rank_from``..``rank_to`` (1 = best), as in Karpukhin et al. (2020, §3.2).

    (Lesson 8, §5-§6.) ``scores`` (n_q, n_p) are the bi-encoder's query-passage cosines,
    ``passage_vecs`` (n_p, d) its unit passage vectors and ``positives[i]`` query i's right
    passage. A candidate is skipped if it is the positive, has the positive's text
    (``same_text[i][j]`` true, optional) or is a paraphrase of it: a bi-encoder cosine to the
    positive passage above ``max_cos``. The very top ranks are left out on purpose: for a
    docstring's summary they are often the details of a near-twin function, right in all but name.
    """
    scores = torch.as_tensor(scores).float()
    n_q, n_p = scores.shape
    check_int(n, "n", at_least=1, what="the number of negatives per query")
    check_int(rank_from, "rank_from", at_least=1)
    check_int(rank_to, "rank_to", at_least=rank_from + n - 1, at_most=n_p)
    positives = torch.as_tensor(positives, dtype=torch.long)
    if positives.shape != (n_q,):
        raise ValueError(f"positives must have one index per query ({n_q}), got "
                         f"{tuple(positives.shape)}.")
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices  # (n_q, n_p)
    twin = passage_vecs @ passage_vecs.T  # (n_p, n_p): passage-passage cosines
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_q):
        p = int(positives[i])
        pool_ = [j for j in order[i, rank_from - 1:rank_to].tolist()
                 if j != p and float(twin[p, j]) <= max_cos
                 and not (same_text is not None and same_text[i][j])]
        if len(pool_) < n:
            raise ValueError(f"query {i}: only {len(pool_)} candidates in ranks {rank_from} to "
                             f"{rank_to} after removing the positive and its paraphrases; "
                             f"widen the ranks.")
        pick = torch.randperm(len(pool_), generator=g)[:n]
        out.append(torch.tensor([pool_[k] for k in pick.tolist()]))
    return torch.stack(out)


def hard_negative_loss(a: torch.Tensor, b: torch.Tensor, negatives: torch.Tensor,
                       scale: float = 20.0) -> torch.Tensor:
    """In-batch negatives plus hard negatives (Lesson 8, §5; Karpukhin et al., 2020, §3.2).

    ``a`` and ``b`` are (B, d), row i of ``a`` with row i of ``b``; ``negatives`` is (B, d), a
    hard negative mined for each row. Row i's logits are its scaled cosines with all B partners
    and all B hard negatives, (B, 2B); the loss is the cross-entropy against column i. Every
    row sees every other row's hard negative too, as in DPR.
    """
    if a.dim() != 2 or a.shape != b.shape or negatives.shape != a.shape:
        raise ValueError(f"a, b and negatives must be (B, d) with the same shape, got "
                         f"{tuple(a.shape)}, {tuple(b.shape)} and {tuple(negatives.shape)}.")
    keys = F.normalize(torch.cat([b, negatives]), dim=-1)  # (2B, d)
    logits = scale * F.normalize(a, dim=-1) @ keys.T  # (B, 2B)
    return F.cross_entropy(logits, torch.arange(a.shape[0], device=a.device))


def contrastive_hard_run(block, data: ContrastiveData, negatives: torch.Tensor,
                         negative_mask: torch.Tensor, steps: int, batch_size: int = 32,
                         lr: float = 1e-4, scale: float = 20.0, pooling: str = "cls",
                         seed: int = 0, progress: bool = True) -> list[float]:
    """:func:`contrastive_run` with one cached hard negative per training pair (rows of
    ``negatives`` (N, n, d) and ``negative_mask`` (N, n), in the pairs' order) in each batch,
    scored by :func:`hard_negative_loss`. The batches are the same as those of
    :func:`contrastive_run` with the same seed."""
    def loss_fn(block, batch):
        (rows,) = batch
        out = []
        for h, m in ((data.anchors, data.anchor_mask), (data.positives, data.positive_mask),
                     (negatives, negative_mask)):
            h, m = trim_padding(h[rows], m[rows])
            out.append(pool(run_block(block, h, m), m, how=pooling))  # (B, d)
        return hard_negative_loss(*out, scale=scale)

    batches = shuffled_batches(torch.arange(data.train_pairs), batch_size=batch_size, seed=seed)
    return train(block, batches, loss_fn, steps=steps, lr=lr, seed=seed, progress=progress,
                 description="in-batch + hard negatives")


def _recipe_start(defaults: dict, steps: int | None):
    """What both l8-contrastive recipes start from: their settings (``steps`` overriding), the
    seed set, MiniLM as it ships and the docstring pairs' cached states."""
    settings = dict(defaults)
    if steps is not None:
        settings["steps"] = steps
    torch.manual_seed(settings["seed"])
    tokenizer, model = load_minilm()
    data = contrastive_data(tokenizer, model, held_out_every=settings["held_out_every"],
                            max_length=settings["max_length"])
    return settings, tokenizer, model, data


def _recipe_result(block, history, settings: dict, data: ContrastiveData):
    """What both l8-contrastive recipes store: the block, the losses, the settings."""
    # float16 keeps the artefact under 5 MB (1.8 M parameters); the lesson evaluates these
    # rounded weights, so what it reports is what is stored.
    tensors = {f"block.{k}": v.to(torch.float16) for k, v in block.state_dict().items()}
    tensors["loss"] = torch.tensor(history, dtype=torch.float32)
    metadata = {**{k: str(v) for k, v in settings.items()},
                "train_pairs": str(data.train_pairs), "held_out_pairs": str(len(data.held_out)),
                "documents": topic_documents().fingerprint}
    return tensors, metadata


def _contrastive_hard_recipe(steps: int | None = None, progress: bool = True):
    """Lesson 8, §5: l8-contrastive with one hard negative per pair, mined with the bi-encoder
    (all-MiniLM-L6-v2 as it ships) from its ranks 5 to 30 of the training details."""
    settings, tokenizer, model, data = _recipe_start(CONTRASTIVE_HARD, steps)
    train_pairs, _ = split_pairs(held_out_every=settings["held_out_every"])
    summaries = [a for a, _ in train_pairs]
    details = [b for _, b in train_pairs]
    q = sentence_embeddings(tokenizer, model, summaries)
    d = sentence_embeddings(tokenizer, model, details)
    same_text = [[details[j] == details[i] for j in range(len(details))]
                 for i in range(len(details))]
    mined = mine_negatives(q @ d.T, d, torch.arange(len(details)), settings["negatives"],
                           settings["rank_from"], settings["rank_to"], settings["max_cos"],
                           same_text=same_text, seed=settings["seed"])[:, 0]
    neg = _padded(cache_states(tokenizer, model, [details[j] for j in mined.tolist()], -2, 32,
                               settings["max_length"]))
    block = copy.deepcopy(model.blocks[-1])
    history = contrastive_hard_run(
        block, data, neg[0], neg[1], steps=settings["steps"], batch_size=settings["batch_size"],
        lr=settings["lr"], scale=settings["scale"], pooling=settings["pooling"],
        seed=settings["seed"], progress=progress,
    )
    tensors, metadata = _recipe_result(block, history, settings, data)
    tensors["negatives"] = mined  # the mined negative of each training pair
    return tensors, metadata


def _contrastive_recipe(steps: int | None = None, progress: bool = True):
    """Lesson 8, §5: MiniLM's last block retrained with in-batch negatives on docstring pairs."""
    settings, tokenizer, model, data = _recipe_start(CONTRASTIVE, steps)
    block = copy.deepcopy(model.blocks[-1])
    history = contrastive_run(
        block, data, steps=settings["steps"], batch_size=settings["batch_size"],
        lr=settings["lr"], scale=settings["scale"], pooling=settings["pooling"],
        seed=settings["seed"], progress=progress,
    )
    return _recipe_result(block, history, settings, data)


def load_contrastive_block(model, tensors: dict[str, torch.Tensor]):
    """A copy of ``model``'s last block with the trained weights of ``l8-contrastive`` (float32)."""
    return load_stored_part(copy.deepcopy(model.blocks[-1]), tensors, "block.")


RECIPES = {"l8-contrastive": _contrastive_recipe, "l8-contrastive-hard": _contrastive_hard_recipe}

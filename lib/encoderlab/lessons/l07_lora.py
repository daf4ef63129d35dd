"""Low-rank adapters (LoRA) on MiniLM's attention projections (Lesson 7, §6).

Between the linear probe (train the head alone) and full fine-tuning (train all 22.7 million
numbers) sits LoRA (Hu et al., 2021): every adapted weight W (d_out x d_in) stays frozen, and
a trainable low-rank update is added beside it,

    y = W x + b + (alpha / r) * B (A x),     A: (r, d_in), B: (d_out, r), r << d.

B starts at zero, so before the first step the model *is* the pretrained one. After training
the update can be merged into W (:meth:`LoRALinear.merged`), so answering costs nothing extra.
The recipe ``l7-lora`` trains adapters of several ranks on the topic task of §2 with the
batches, steps and head of the full fine-tuning run ``l7-classify-mean``.
"""

from __future__ import annotations

import copy
import math
import time

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.data import shuffled_batches
from encoderlab.heads import SequenceClassifier, pool
from encoderlab.lessons.l07_finetune import (
    accuracy,
    count_trainable,
    encode_texts,
    freeze,
    frozen_outputs,
)
from encoderlab.lessons.l07_recipes import FINETUNE
from encoderlab.lessons.l07_tasks import topic_task
from encoderlab.pretrained import load_minilm
from encoderlab.training import train

__all__ = ["LoRALinear", "add_lora", "top_classifier", "top_logits", "lora_run", "LORA",
           "RECIPES"]

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")  # the attention's four d x d maps (Lesson 3)

LORA = {  # the settings of l7-lora; the notebook prints them from the metadata
    "ranks": (1, 4, 16),
    "targets": ("w_q", "w_v"),  # the LoRA paper's choice for its GPT-3 runs
    "top_blocks": 2,  # adapters in the top two blocks; the four below stay frozen
    "alpha_per_rank": 2,  # alpha = 2 r: the update's scale alpha / r is 2 at every rank
    "lr": 1e-3,  # adapters start at zero and need a larger step than the whole encoder
    "seeds": (0,),  # one seed per rank: each run costs about a minute of CPU
}


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update (Lesson 7, §6).

    ``forward(x) = base(x) + (alpha / r) * (x @ A^T) @ B^T``. ``A`` (r, d_in) is drawn at
    random, ``B`` (d_out, r) is zero, so the layer starts as ``base`` exactly.
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise ValueError(f"base must be an nn.Linear, got {type(base).__name__}.")
        if not isinstance(r, int) or not 1 <= r <= min(base.in_features, base.out_features):
            raise ValueError(
                f"the rank r must be an int from 1 to min(d_in, d_out) = "
                f"{min(base.in_features, base.out_features)}, got {r!r}.")
        if alpha <= 0:
            raise ValueError(f"alpha must be positive, got {alpha}.")
        self.base = freeze(base)
        self.r, self.scale = r, alpha / r
        self.A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, r))  # zero: no change at step 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., d_in) -> (..., d_out)
        return self.base(x) + self.scale * (x @ self.A.T) @ self.B.T  # (..., r) -> (..., d_out)

    def merged(self) -> nn.Linear:
        """One ``nn.Linear`` with W + (alpha / r) B A: the same function, no extra cost."""
        layer = copy.deepcopy(self.base)
        with torch.no_grad():
            layer.weight += self.scale * self.B @ self.A  # (d_out, r) @ (r, d_in)
        return layer


def add_lora(encoder: nn.Module, r: int, alpha: float,
             targets: tuple[str, ...] = LORA["targets"]) -> nn.Module:
    """Freeze ``encoder`` and wrap the chosen attention projections of every block in a
    :class:`LoRALinear` (Lesson 7, §6); returns the encoder, changed in place."""
    unknown = set(targets) - set(PROJECTIONS)
    if not targets or unknown:
        raise ValueError(f"targets must be a non-empty subset of {PROJECTIONS}, got {targets}.")
    freeze(encoder)
    for block in encoder.blocks:
        for name in targets:
            setattr(block.attention, name, LoRALinear(getattr(block.attention, name), r, alpha))
    return encoder


def top_classifier(encoder: nn.Module, n_classes: int, r: int, alpha: float,
                   top_blocks: int, seed: int = 0) -> nn.ModuleDict:
    """Copies of the top ``top_blocks`` blocks with LoRA on W_Q and W_V, and a mean-pooling
    head whose initial weights are those of ``SequenceClassifier`` under ``seed`` (Lesson 7,
    §6). The blocks below stay frozen, so what enters these blocks is computed once."""
    if not 1 <= top_blocks <= len(encoder.blocks):
        raise ValueError(f"top_blocks must be from 1 to {len(encoder.blocks)}, got {top_blocks}.")
    torch.manual_seed(seed)  # the head: the same initial weights as fine-tuning's with this seed
    head = SequenceClassifier(encoder, n_classes, pooling="mean")
    torch.manual_seed(1000 + seed)  # LoRA's random A matrices
    top = copy.deepcopy(encoder.blocks[-top_blocks:])
    for block in top:
        freeze(block)
        for name in LORA["targets"]:
            setattr(block.attention, name, LoRALinear(getattr(block.attention, name), r, alpha))
    return nn.ModuleDict({"blocks": top, "dropout": head.dropout, "classifier": head.classifier})


def top_logits(model: nn.ModuleDict, hidden: torch.Tensor,
               attention_mask: torch.Tensor) -> torch.Tensor:
    """H^(L-k) (b, n, d) and the padding mask (b, n) -> class logits (b, C) (Lesson 7, §6)."""
    m = int(attention_mask.sum(dim=1).max())  # cut to the longest row
    hidden, attention_mask = hidden[:, :m], attention_mask[:, :m]
    mask = None if bool(attention_mask.all()) else masks.padding(attention_mask)
    for block in model["blocks"]:
        hidden = block(hidden, mask, need_weights=False)[0]  # (b, m, d)
    v = pool(hidden, attention_mask, how="mean")  # (b, d)
    return model["classifier"](model["dropout"](v))  # (b, C)


def lora_run(r: int, seed: int = 0, steps: int | None = None, progress: bool = True,
             task=None, stored=None) -> dict:
    """Train rank-``r`` adapters in MiniLM's top blocks and a mean-pooling head on the topic
    task (Lesson 7, §6).

    The batches (seed 0), the steps and the head's initial weights are those of
    ``l7-classify-mean``; only what is trained, and its learning rate, differ. ``stored``:
    the frozen lower blocks' outputs, (train, test) dicts, to reuse between runs. Returns the
    trainable count, the held-out accuracy and test logits, and CPU seconds.
    """
    steps = steps or FINETUNE["classify_steps"]
    task = task or topic_task()
    tokenizer, encoder = load_minilm()
    start = time.process_time()
    k = LORA["top_blocks"]
    if stored is None:  # H^(L-k) (N, n, d) and the padding mask (N, n), train then test
        stored = []
        for texts in (task.train_texts, task.test_texts):
            x = encode_texts(tokenizer, texts)
            out = frozen_outputs(encoder, x, all_layers=True)
            stored.append((out["layers"][-1 - k], x["attention_mask"]))
    (train_h, train_m), (test_h, test_m) = stored
    model = top_classifier(encoder, len(task.classes), r, LORA["alpha_per_rank"] * r, k, seed)
    batches = shuffled_batches(train_h, train_m, task.train_labels,
                               batch_size=FINETUNE["batch_size"], seed=FINETUNE["seed"])
    train(model, batches, lambda m, b: F.cross_entropy(top_logits(m, b[0], b[1]), b[2]),
          steps=steps, lr=LORA["lr"], seed=seed, progress=progress, description=f"LoRA r={r}")
    with torch.no_grad():
        logits = top_logits(model, test_h, test_m)  # (200, C)
    return {"trainable": count_trainable(model), "logits": logits, "stored": stored,
            "accuracy": 100 * accuracy(logits.argmax(-1), task.test_labels),
            "cpu_seconds": time.process_time() - start}


def _recipe_lora(steps: int | None = None, progress: bool = True):
    """Lesson 7, §6: LoRA (W_Q, W_V of the top two blocks), ranks 1, 4, 16, on the topic task."""
    task = topic_task()
    tensors, seconds, stored = {}, 0.0, None
    for r in LORA["ranks"]:
        for seed in LORA["seeds"]:
            run = lora_run(r, seed, steps, progress, task=task, stored=stored)
            stored = run["stored"]
            tensors[f"r{r}.seed{seed}.test_logits"] = run["logits"]
            tensors[f"r{r}.trainable"] = torch.tensor(run["trainable"])
            seconds += run["cpu_seconds"]
    tensors["test_labels"] = task.test_labels
    metadata = {"steps": str(steps or FINETUNE["classify_steps"]), "lr": str(LORA["lr"]),
                "ranks": " ".join(map(str, LORA["ranks"])), "targets": " ".join(LORA["targets"]),
                "top_blocks": str(LORA["top_blocks"]),
                "alpha_per_rank": str(LORA["alpha_per_rank"]),
                "seeds": " ".join(map(str, LORA["seeds"])), "pooling": "mean",
                "batch_size": str(FINETUNE["batch_size"]), "cpu_seconds": f"{seconds:.0f}",
                "threads": str(torch.get_num_threads())}
    return tensors, metadata


RECIPES = {"l7-lora": _recipe_lora}

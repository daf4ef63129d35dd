"""A small training loop: seeded, with a progress bar and a loss history (Lessons 3, 5-8, 10).

    history = train(model, batches, loss_fn, steps=300)

``batches`` is any iterable of batches (an endless generator is typical) and
``loss_fn(model, batch)`` returns the scalar loss of one batch. The loop is
AdamW and nothing else: no schedule, no gradient accumulation, no framework.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import torch
from torch import nn

try:  # a notebook progress bar needs ipywidgets; without it tqdm.auto would warn
    import ipywidgets  # noqa: F401
    from tqdm.auto import tqdm
except ImportError:  # a plain text bar: terminals, test runs, kernels without ipywidgets
    from tqdm import tqdm

__all__ = ["train"]


def train(
    model: nn.Module,
    batches: Iterable,
    loss_fn: Callable[[nn.Module, object], torch.Tensor],
    steps: int,
    lr: float = 3e-3,
    weight_decay: float = 0.0,
    seed: int = 0,
    progress: bool = True,
    description: str | None = None,
) -> list[float]:
    """Train ``model`` for ``steps`` AdamW steps; return the loss of every step (Lesson 3, §3).

    ``seed`` seeds torch's global generator before the first step (dropout and
    anything else drawn during training); seed the model's initialisation
    yourself, with ``torch.manual_seed`` before building it. With the same
    seeds, the same model and the same batches, two runs give the same history
    on the same machine. The model is left in eval mode.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}.")
    if not callable(loss_fn):
        raise ValueError(
            "loss_fn must be a function loss_fn(model, batch) -> scalar loss tensor, "
            f"got {type(loss_fn).__name__}."
        )
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise ValueError("the model has no trainable parameters (none with requires_grad=True).")

    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)
    history: list[float] = []
    model.train()
    bar = tqdm(
        itertools.islice(batches, steps),
        total=steps,
        desc=description,
        disable=not progress,
        mininterval=0.5,  # few redraws: a stored notebook keeps every one of them
    )
    for batch in bar:
        loss = loss_fn(model, batch)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise ValueError(
                "loss_fn(model, batch) must return a scalar tensor (a 0-d loss), got "
                f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__}."
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        bar.set_postfix(loss=f"{history[-1]:.3f}", refresh=False)
    bar.close()
    model.eval()
    if len(history) < steps:
        raise ValueError(
            f"batches ran out after {len(history)} of {steps} steps: pass an endless iterator "
            "(a generator with `while True`) or at least as many batches as steps."
        )
    return history

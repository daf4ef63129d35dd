"""How the lessons train their small models, and where trained ones are kept (Lessons 3-10).

    history = train(model, batches, loss_fn, steps=300)

``batches`` is any iterable of batches (an endless generator is typical) and
``loss_fn(model, batch)`` returns the scalar loss of one batch. The loop is
AdamW and nothing else: no gradient accumulation, no framework; an optional
schedule multiplies the learning rate (:func:`warmup_factor` is BERT's).

Training that takes longer than a notebook should wait is run by a command,
``python -m encoderlab train NAME``, which writes a small safetensors artefact
into ``encoderlab/artefacts/``; the lesson loads it with :func:`load_artefact`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import nn

from encoderlab.validate import check_positive_int, shape_of

try:  # a notebook progress bar needs ipywidgets; without it tqdm.auto would warn
    import ipywidgets  # noqa: F401
    from tqdm.auto import tqdm
except ImportError:  # a plain text bar: terminals, test runs, kernels without ipywidgets
    from tqdm import tqdm

__all__ = ["train", "warmup_factor", "ARTEFACTS", "MAX_ARTEFACT_BYTES", "artefact_path",
           "load_artefact", "load_stored_part", "tqdm"]

ARTEFACTS = Path(__file__).parent / "artefacts"  # encoderlab/artefacts
MAX_ARTEFACT_BYTES = 5 * 1024 * 1024


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
    schedule: Callable[[int], float] | None = None,
) -> list[float]:
    """Train ``model`` for ``steps`` AdamW steps; return the loss of every step (Lesson 3, §3).

    ``seed`` seeds torch's global generator before the first step (dropout and
    anything else drawn during training); seed the model's initialisation
    yourself, with ``torch.manual_seed`` before building it. With the same
    seeds, the same model and the same batches, two runs give the same history
    on the same machine. The model is left in eval mode.

    ``schedule(step)``, if given, multiplies ``lr`` at each step (Lesson 6's warm-up); without
    it the learning rate is constant.
    """
    check_positive_int(steps, "steps")
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
    scheduler = None if schedule is None else torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
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
                f"{shape_of(loss)}."
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
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


def warmup_factor(step: int, steps: int, warmup_steps: int, decay: bool = True) -> float:
    """The learning-rate factor of BERT's schedule at ``step`` (0-based): a linear warm-up,
    (step + 1) / warmup_steps, then a linear decay to 0 at ``steps`` (never below 0), or a
    constant 1 with ``decay=False``. The lessons' schedules check their own arguments."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (steps - step) / max(1, steps - warmup_steps)) if decay else 1.0


def artefact_path(name: str) -> Path:
    """Where the committed artefact ``name`` lives (inside the installed package)."""
    return ARTEFACTS / f"{name}.safetensors"


def load_artefact(name: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a committed artefact; metadata says how it was made."""
    from safetensors import safe_open

    path = artefact_path(name)
    if not path.is_file():
        known = sorted(p.stem for p in ARTEFACTS.glob("*.safetensors"))
        raise ValueError(
            f"no artefact named {name!r} in {ARTEFACTS.name}/ (have: {known}). "
            f"Train it with `python -m encoderlab train {name}`."
        )
    tensors = {}
    with safe_open(str(path), framework="pt") as f:
        metadata = dict(f.metadata() or {})
        for key in f.keys():
            tensors[key] = f.get_tensor(key)
    return tensors, metadata


def load_stored_part(module: nn.Module, tensors: dict[str, torch.Tensor], prefix: str):
    """``module`` with the artefact's tensors named ``prefix...`` loaded in float32, in eval mode.

    The pattern of the artefacts that store only the trained part of MiniLM (its top block, with
    a head) in float16 under one prefix, the packaged MiniLM supplying the rest (Lessons 7, 8).
    """
    state = {k.removeprefix(prefix): v.float() for k, v in tensors.items()
             if k.startswith(prefix)}
    module.load_state_dict(state)  # strict: every tensor used, every shape checked
    return module.eval()

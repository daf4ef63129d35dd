"""``python -m encoderlab train NAME``: retrain a lesson's small artefact (Lessons 4-10).

A recipe is a function ``recipe(steps=None, progress=True) -> (tensors, metadata)`` in one lesson
module's ``RECIPES`` dict; :func:`recipes` collects them from the lesson modules, imported below
by name as any module is (only when the command runs: they import torch models and corpora).
The command saves the result under ``encoderlab/artefacts/`` with its command, versions and
date as metadata, where the lessons find it (:func:`encoderlab.training.load_artefact`).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from encoderlab.training import MAX_ARTEFACT_BYTES, artefact_path

__all__ = ["recipes", "run_recipe", "main"]


def recipes() -> dict[str, Callable]:
    """Every artefact name the command knows, mapped to the function that trains it."""
    from encoderlab.lessons import (
        l04_warmup,
        l05_mlm,
        l06_comparison,
        l06_mask_rate,
        l06_signal,
        l07_lora,
        l07_recipes,
        l08_contrastive,
        l08_rerank,
        l10_right_context,
    )

    found: dict[str, Callable] = {}
    for module in (l04_warmup, l05_mlm, l06_comparison, l06_mask_rate, l06_signal, l07_recipes,
                   l07_lora, l08_contrastive, l08_rerank, l10_right_context):
        found.update(module.RECIPES)
    return dict(sorted(found.items()))


def run_recipe(name: str, steps: int | None = None, out: Path | None = None,
               progress: bool = True) -> Path:
    """Train the artefact ``name`` and save it (to ``out``, or to its committed place)."""
    from safetensors.torch import save_file

    known = recipes()
    if name not in known:
        raise ValueError(
            f"unknown artefact {name!r}; the command knows {list(known)}. "
            "See `python -m encoderlab train --list`."
        )
    tensors, metadata = known[name](steps=steps, progress=progress)
    command = f"python -m encoderlab train {name}" + (f" --steps {steps}" if steps else "")
    metadata = {
        **{k: str(v) for k, v in metadata.items()},
        "name": name,
        "command": command,
        "torch": torch.__version__.split("+")[0],
        "python": ".".join(map(str, sys.version_info[:3])),
        "date": datetime.date.today().isoformat(),
    }
    out = Path(out) if out is not None else artefact_path(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    save_file(tensors, str(out), metadata=metadata)
    out.chmod(0o644)  # safetensors writes owner-only files; an artefact is for everyone to read
    size = out.stat().st_size
    if size > MAX_ARTEFACT_BYTES:
        raise ValueError(
            f"{out} is {size / 2**20:.1f} MB; artefacts must stay under "
            f"{MAX_ARTEFACT_BYTES / 2**20:.0f} MB. Save fewer or smaller tensors."
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m encoderlab train",
        description="Train one of the course's small artefacts and save it as safetensors.",
    )
    parser.add_argument("name", nargs="?", help="the artefact to train (see --list)")
    parser.add_argument("--list", action="store_true", help="list the artefacts and exit")
    parser.add_argument("--steps", type=int, default=None, help="fewer steps, for a quick try")
    parser.add_argument("--out", type=Path, default=None, help="write here instead")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.list or args.name is None:
        for name, recipe in recipes().items():
            doc = (recipe.__doc__ or "").strip().split("\n")[0]
            print(f"{name:28s} {doc}")
        return 0
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be a positive int, got {args.steps}")
    try:
        out = run_recipe(args.name, steps=args.steps, out=args.out, progress=not args.quiet)
    except ValueError as error:
        parser.error(str(error))
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} kB)")
    return 0

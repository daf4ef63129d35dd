"""Post-LN and pre-LN, with and without learning-rate warm-up (Lesson 4, §7).

A 12-block encoder (d = 64, 4 heads) learns to reverse a random sequence of 16 tokens, trained
with AdamW at one learning rate, either constant from the first step or warmed up linearly over
the first 30 % of the steps (``training.warmup_factor`` without decay). Four settings,
post-LN or pre-LN times warm-up or none, three seeds each; a seed fixes the initial weights and
the batch stream, shared by the four settings. A small grid repeats the four settings at a lower
and a higher learning rate (``LR_GRID``, seed 0) to show that warm-up widens the range of
learning rates at which post-LN trains, and a depth axis (``DEPTH_AXIS``, seed 0) shows that
warm-up moves post-LN's limit from between 6 and 12 blocks to between 12 and 24.

    tensors, metadata = train_warmup_comparison()       # a few minutes on one core
    curves, metadata = load_comparison()                # the committed record
    curves["post", False, 0]                            # (STEPS // EVERY,) window means
    grid = load_lr_grid()                               # grid[lr][norm, warmup]: final loss
    depth = load_depth_axis()                           # depth[norm, warmup, L]: final loss
    curve, metadata = load_long_run()                   # post-LN, no warm-up, 1,200 steps
    profile = gradient_profile(n_layers=24)             # at init: each block's ||grad W_2||
    adam_step_change("post", 12)                        # output moved by one real Adam step
    tensors, metadata = train_branch_scaling()          # post-LN, no warm-up, branches scaled

The artefacts ``l4-warmup``, ``l4-warmup-long`` and ``l4-warmup-scaled`` (``python -m
encoderlab train NAME``) hold no weights, only the training loss of every run averaged over
windows of ``EVERY`` steps (and, for the last, two numbers per run).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.training import load_artefact, train, warmup_factor
from encoderlab.validate import check_positive_int

__all__ = ["SIZES", "VOCAB", "LENGTH", "BATCH_SIZE", "STEPS", "LEARNING_RATE", "WARMUP_FRACTION",
           "EVERY", "SEEDS", "CONSTANT_GUESS", "SETTINGS", "reversal_batches", "ReversalModel",
           "reversal_loss", "window_means", "train_setting", "train_warmup_comparison", "RECIPES",
           "load_comparison", "final_losses", "LR_GRID", "train_lr_grid", "load_lr_grid",
           "gradient_profile", "adam_step_change", "scale_branches", "hidden_spread",
           "train_branch_scaling", "load_branch_scaling", "LONG_STEPS", "train_long_run",
           "load_long_run", "results_table", "DEPTH_AXIS", "train_depth_axis",
           "load_depth_axis", "depth_table"]

SIZES = dict(d_model=64, n_heads=4, n_layers=12, d_ff=256, n_max=64, dropout=0.0, pooler=False)
VOCAB = 32  # token ids 0..31; the constant guess scores ln 32 = 3.47 nats
LENGTH = 16  # tokens per sequence
BATCH_SIZE = 32
STEPS = 300
LEARNING_RATE = 2e-3  # AdamW, no weight decay
WARMUP_FRACTION = 0.3  # warm-up over the first 90 of 300 steps, then constant
EVERY = 10  # the stored curves: mean training loss over windows of 10 steps
SEEDS = (0, 1, 2)
CONSTANT_GUESS = math.log(VOCAB)  # nats: the loss of predicting every token equally likely
SETTINGS = (("post", False), ("post", True), ("pre", False), ("pre", True))  # (norm, warm-up)
LR_GRID = (5e-4, 6e-3)  # the grid's other learning rates, seed 0 only
# the depth axis, seed 0, lr 2e-3: (norm, warm-up, blocks); the 12-block runs are the main ones
DEPTH_AXIS = (("post", False, 3), ("post", False, 6), ("post", False, 12), ("post", True, 12),
              ("post", True, 24), ("pre", False, 24))


def reversal_batches(seed: int, batch_size: int = BATCH_SIZE, length: int = LENGTH,
                     vocab_size: int = VOCAB) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """An endless stream of (x, y): x random token ids (b, n), y = x reversed along n
    (Lesson 4, §7). The same ``seed`` gives the same stream."""
    for value, name in ((batch_size, "batch_size"), (length, "length"),
                        (vocab_size, "vocab_size")):
        check_positive_int(value, name)
    generator = torch.Generator().manual_seed(1000 + seed)
    while True:
        x = torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (b, n)
        yield x, x.flip(1)  # position i must output the token at position n - 1 - i


class ReversalModel(nn.Module):
    """An encoder stack (post-LN or pre-LN) with a linear layer from d to the vocabulary at
    every position (Lesson 4, §7)."""

    def __init__(self, norm: str, vocab_size: int = VOCAB, **sizes):
        super().__init__()
        config = EncoderConfig(vocab_size=vocab_size, norm=norm, **{**SIZES, **sizes})
        self.encoder = EncoderModel(config)
        self.head = nn.Linear(config.d_model, vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # (b, n) -> (b, n, V)
        return self.head(self.encoder(input_ids).last_hidden_state)


def reversal_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy (nats) of the model's predictions of y at every position."""
    x, y = batch
    logits = model(x)  # (b, n, V)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def window_means(history, every: int = EVERY) -> torch.Tensor:
    """The mean of each run of ``every`` consecutive values: (len(history) // every,)."""
    check_positive_int(every, "every")
    values = torch.as_tensor(history, dtype=torch.float32)
    if values.dim() != 1 or len(values) < every:
        raise ValueError(f"history must be a 1-d list of at least every={every} losses, "
                         f"got shape {tuple(values.shape)}.")
    usable = len(values) // every * every
    return values[:usable].reshape(-1, every).mean(dim=1)


def train_setting(norm: str, warmup: bool, seed: int, steps: int = STEPS,
                  lr: float = LEARNING_RATE, progress: bool = False, model: nn.Module | None = None,
                  **sizes) -> list[float]:
    """The training loss of every step of one run (Lesson 4, §7): ``seed`` fixes the initial
    weights and the batches; ``warmup`` ramps the learning rate linearly over the first
    ``WARMUP_FRACTION`` of the steps, then holds it. AdamW, no weight decay, no gradient
    clipping. Pass ``model`` (built after ``torch.manual_seed(seed)``) to train it in place."""
    check_positive_int(steps, "steps")
    if model is None:
        torch.manual_seed(seed)
        model = ReversalModel(norm, **sizes)
    warmup_steps = max(1, round(WARMUP_FRACTION * steps))
    schedule = ((lambda step: warmup_factor(step, steps, warmup_steps, decay=False))
                if warmup else None)
    return train(model, reversal_batches(seed), reversal_loss, steps=steps, lr=lr, seed=seed,
                 progress=progress, schedule=schedule,
                 description=f"{norm}-LN, {'warm-up' if warmup else 'no warm-up'}, seed {seed}")


def _grid_key(lr: float, norm: str, warmup: bool) -> str:
    return f"lr{lr:.0e}.{norm}.{'warmup' if warmup else 'constant'}.s0"


def train_lr_grid(steps: int = STEPS, progress: bool = False) -> dict[str, torch.Tensor]:
    """Lesson 4, §7: the four settings at each learning rate of ``LR_GRID``, seed 0:
    {key: window means} with keys like ``"lr6e-03.post.warmup.s0"``."""
    every = min(EVERY, steps)
    return {_grid_key(lr, norm, warmup): window_means(
                train_setting(norm, warmup, 0, steps=steps, lr=lr, progress=progress), every)
            for lr in LR_GRID for norm, warmup in SETTINGS}


def _depth_key(norm: str, warmup: bool, n_layers: int) -> str:
    if n_layers == SIZES["n_layers"]:  # the main comparison's seed-0 run
        return f"{norm}.{'warmup' if warmup else 'constant'}.s0"
    return f"L{n_layers}.{norm}.{'warmup' if warmup else 'constant'}.s0"


def train_depth_axis(steps: int = STEPS, progress: bool = False) -> dict[str, torch.Tensor]:
    """Lesson 4, §7: the runs of ``DEPTH_AXIS`` at other depths than the main stack's, seed 0,
    lr ``LEARNING_RATE``: {key: window means} with keys like ``"L24.pre.constant.s0"``."""
    every = min(EVERY, steps)
    return {_depth_key(norm, warmup, L): window_means(
                train_setting(norm, warmup, 0, steps=steps, progress=progress, n_layers=L), every)
            for norm, warmup, L in DEPTH_AXIS if L != SIZES["n_layers"]}


def train_warmup_comparison(steps: int | None = None, progress: bool = True):
    """Lesson 4, §7: post-/pre-LN x warm-up or none, 3 seeds each (L=12, d=64, 300 steps), and
    the same four settings at the learning rates of ``LR_GRID`` (seed 0)."""
    steps = STEPS if steps is None else steps
    check_positive_int(steps, "steps")
    every = min(EVERY, steps)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread is as fast, and reproducible
    try:
        tensors, wall = {}, time.perf_counter()
        for norm, warmup in SETTINGS:
            for seed in SEEDS:
                history = train_setting(norm, warmup, seed, steps=steps, progress=progress)
                tensors[f"{norm}.{'warmup' if warmup else 'constant'}.s{seed}"] = (
                    window_means(history, every))
        tensors.update(train_lr_grid(steps, progress))
        tensors.update(train_depth_axis(steps, progress))
        wall = time.perf_counter() - wall
    finally:
        torch.set_num_threads(threads)
    metadata = {"steps": steps, "every": every, "seeds": ",".join(map(str, SEEDS)),
                "lr": LEARNING_RATE, "lr_grid": ",".join(f"{lr:g}" for lr in LR_GRID),
                "depth_axis": ";".join(f"{n},{w},{L}" for n, w, L in DEPTH_AXIS),
                "warmup_steps": max(1, round(WARMUP_FRACTION * steps)),
                "vocab": VOCAB, "length": LENGTH, "batch_size": BATCH_SIZE,
                "sizes": ",".join(f"{k}={v}" for k, v in SIZES.items()),
                "wall_seconds": f"{wall:.0f}"}
    return tensors, metadata


LONG_STEPS = 1200  # the long run: post-LN without warm-up, four times the main runs' steps


def train_long_run(steps: int | None = None, progress: bool = True):
    """Lesson 4, §7: post-LN without warm-up (12 blocks, lr 2e-3, seed 0) for ``LONG_STEPS``
    steps, four times the comparison's, to tell a stuck run from a slow one."""
    steps = LONG_STEPS if steps is None else steps
    check_positive_int(steps, "steps")
    every = min(EVERY, steps)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in train_warmup_comparison: reproducible on one thread
    try:
        wall = time.perf_counter()
        history = train_setting("post", False, 0, steps=steps, progress=progress)
        wall = time.perf_counter() - wall
    finally:
        torch.set_num_threads(threads)
    metadata = {"steps": steps, "every": every, "seed": 0, "lr": LEARNING_RATE,
                "norm": "post", "warmup": "none", "vocab": VOCAB,
                "sizes": ",".join(f"{k}={v}" for k, v in SIZES.items()),
                "wall_seconds": f"{wall:.0f}"}
    return {"post.constant.s0": window_means(history, every)}, metadata


def load_long_run(name: str = "l4-warmup-long") -> tuple[torch.Tensor, dict[str, str]]:
    """(curve, metadata) of the committed long run (Lesson 4, §7): the training loss averaged
    over windows of ``metadata["every"]`` steps, shape (steps // every,)."""
    tensors, metadata = load_artefact(name)
    return tensors["post.constant.s0"], metadata


RECIPES = {"l4-warmup": train_warmup_comparison, "l4-warmup-long": train_long_run}  # + below



def load_comparison(name: str = "l4-warmup"):
    """(curves, metadata) of the committed record: ``curves[norm, warmup, seed]`` is the
    training loss averaged over windows of ``metadata["every"]`` steps."""
    tensors, metadata = load_artefact(name)
    curves = {}
    for norm, warmup in SETTINGS:
        for seed in (int(s) for s in metadata["seeds"].split(",")):
            curves[norm, warmup, seed] = tensors[
                f"{norm}.{'warmup' if warmup else 'constant'}.s{seed}"]
    return curves, metadata


def final_losses(curves) -> dict[tuple[str, bool], list[float]]:
    """The last window's loss of each run, grouped by setting (norm, warm-up), seeds in order."""
    finals: dict[tuple[str, bool], list[float]] = {}
    for (norm, warmup, seed) in sorted(curves, key=lambda k: (SETTINGS.index(k[:2]), k[2])):
        finals.setdefault((norm, warmup), []).append(float(curves[norm, warmup, seed][-1]))
    if not finals:
        raise ValueError("curves is empty: pass the dict load_comparison() returns.")
    return finals



def load_lr_grid(name: str = "l4-warmup") -> dict[float, dict[tuple[str, bool], float]]:
    """The committed grid: ``grid[lr][norm, warmup]`` is the last window's loss of seed 0, for
    the lesson's learning rate and each of ``metadata["lr_grid"]``, in increasing order."""
    tensors, metadata = load_artefact(name)
    if "lr_grid" not in metadata:
        raise ValueError(f"the artefact {name!r} has no learning-rate grid; retrain it with "
                         f"`python -m encoderlab train {name}`.")
    grid = {float(metadata["lr"]): {
        (norm, warmup): float(tensors[f"{norm}.{'warmup' if warmup else 'constant'}.s0"][-1])
        for norm, warmup in SETTINGS}}
    for lr in (float(v) for v in metadata["lr_grid"].split(",")):
        grid[lr] = {(norm, warmup): float(tensors[_grid_key(lr, norm, warmup)][-1])
                    for norm, warmup in SETTINGS}
    return dict(sorted(grid.items()))


def load_depth_axis(name: str = "l4-warmup") -> dict[tuple[str, bool, int], float]:
    """The committed depth axis (Lesson 4, §7): ``{(norm, warmup, n_layers): final loss}`` of
    seed 0 at lr ``LEARNING_RATE``, for each run of ``DEPTH_AXIS``."""
    tensors, metadata = load_artefact(name)
    if "depth_axis" not in metadata:
        raise ValueError(f"the artefact {name!r} has no depth axis; retrain it with "
                         f"`python -m encoderlab train {name}`.")
    return {(norm, warmup, L): float(tensors[_depth_key(norm, warmup, L)][-1])
            for norm, warmup, L in DEPTH_AXIS}


def depth_table(depth: dict[tuple[str, bool, int], float]) -> str:
    """Lesson 4, §7: one row per setting, one column per depth (increasing), the final loss or
    "-" where that setting was not run at that depth."""
    if not depth:
        raise ValueError("depth is empty: pass load_depth_axis().")
    blocks = sorted({L for _, _, L in depth})
    settings = [s for s in SETTINGS if any(k[:2] == s for k in depth)]
    lines = [f"{'final loss, seed 0':<21}" + "".join(f"{f'L = {L}':>8}" for L in blocks)]
    for norm, warm in settings:
        cells = [f"{depth[norm, warm, L]:.2f}" if (norm, warm, L) in depth else "-"
                 for L in blocks]
        lines.append(f"{norm + '-LN, ' + ('warm-up' if warm else 'no warm-up'):<21}"
                     + "".join(f"{c:>8}" for c in cells))
    return "\n".join(lines)


@contextmanager
def _one_thread():
    """Small matrices: one thread is as fast as several, and its sums are reproducible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def gradient_profile(n_layers: int = 24, seeds=SEEDS) -> dict[str, torch.Tensor]:
    """Lesson 4, §7: at initialisation, the gradient norm of each block's MLP output matrix W_2
    (as in Xiong et al. 2020, Fig. 3) for a post-LN and a pre-LN ``ReversalModel`` of
    ``n_layers`` blocks, on one batch, averaged over ``seeds``: {"post": (L,), "pre": (L,)},
    block 1 first."""
    check_positive_int(n_layers, "n_layers")
    if not seeds:
        raise ValueError("seeds must name at least one seed, e.g. (0, 1, 2).")
    profile = {}
    with _one_thread():
        for norm in ("post", "pre"):
            total = torch.zeros(n_layers)
            for seed in seeds:
                torch.manual_seed(seed)
                model = ReversalModel(norm, n_layers=n_layers)
                reversal_loss(model, next(reversal_batches(seed))).backward()
                total += torch.stack([block.mlp.w_2.weight.grad.norm()  # each (d, d_ff)
                                      for block in model.encoder.blocks])
            profile[norm] = total / len(seeds)
    return profile


def adam_step_change(norm: str, n_layers: int, seed: int = 0, lr: float = LEARNING_RATE
                     ) -> float:
    """Lesson 4, §7: the relative change of the encoder's output,
    ||F(x; W') - F(x; W)|| / ||F(x; W)||, after one real AdamW step at ``lr`` from the
    initialisation of ``seed`` (no warm-up), on that seed's first batch. Adam's first step
    moves every weight by about ``lr`` times the sign of its gradient."""
    check_positive_int(n_layers, "n_layers")
    if not lr > 0:
        raise ValueError(f"lr must be a positive learning rate, e.g. 2e-3; got {lr}.")
    with _one_thread():
        torch.manual_seed(seed)
        model = ReversalModel(norm, n_layers=n_layers)
        batch = next(reversal_batches(seed))
        with torch.no_grad():
            before = model.encoder(batch[0]).last_hidden_state  # (b, n, d)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        reversal_loss(model, batch).backward()
        optimizer.step()
        with torch.no_grad():
            after = model.encoder(batch[0]).last_hidden_state  # (b, n, d)
    return ((after - before).norm() / before.norm()).item()


def scale_branches(model: nn.Module) -> nn.Module:
    """Lesson 4, §7: DeepNet's residual scaling (Wang et al. 2022) on a post-LN ``ReversalModel``
    of L blocks, in place: each block computes LN(alpha x + f(x)) with alpha = (2L)^(1/4), and
    W_V, W_O, W_1, W_2 start beta = (8L)^(-1/4) times smaller. A LayerNorm ignores a common
    scale, so LN(alpha x + f(x)) = LN(x + f(x) / alpha): forward hooks divide each attention and
    MLP output by alpha, and every block depends less on its residual branch."""
    encoder = getattr(model, "encoder", None)
    if encoder is None or encoder.config.norm != "post":
        raise ValueError("scale_branches needs a post-LN ReversalModel, e.g. "
                         "ReversalModel('post'); got " + type(model).__name__ + ".")
    L = len(encoder.blocks)
    alpha, beta = (2 * L) ** 0.25, (8 * L) ** -0.25
    for block in encoder.blocks:
        with torch.no_grad():
            for linear in (block.attention.w_v, block.attention.w_o, block.mlp.w_1,
                           block.mlp.w_2):
                linear.weight.mul_(beta)
        block.attention.register_forward_hook(
            lambda module, inputs, out: (out[0] / alpha, *out[1:]))  # (a, weights)
        block.mlp.register_forward_hook(lambda module, inputs, out: out / alpha)
    return model


def hidden_spread(model: nn.Module, seed: int = 99) -> float:
    """Lesson 4, §7: 1 minus the mean cosine between the final vectors of every pair of
    positions in one batch of ``seed`` (all positions of all sequences): 0 when the stack gives
    every position of every input the same vector, i.e. its output ignores its input."""
    x, _ = next(reversal_batches(seed))
    with torch.no_grad():
        final = model.encoder(x).last_hidden_state.flatten(0, 1)  # (b * n, d)
    unit = F.normalize(final, dim=-1)
    cosine = unit @ unit.T  # (b n, b n)
    m = cosine.shape[0]
    return 1.0 - ((cosine.sum() - cosine.diagonal().sum()) / (m * (m - 1))).item()


def train_branch_scaling(steps: int | None = None, progress: bool = True):
    """Lesson 4, §7: post-LN, 12 blocks, no warm-up, seed 0, lr ``LEARNING_RATE``, twice: as in
    the comparison (it stays at the constant guess) and with :func:`scale_branches`. Stores each
    run's curve and :func:`hidden_spread` of its final model."""
    steps = STEPS if steps is None else steps
    check_positive_int(steps, "steps")
    every = min(EVERY, steps)
    tensors, cpu = {}, time.process_time()
    with _one_thread():
        for name, scaled in (("plain", False), ("scaled", True)):
            torch.manual_seed(0)
            model = ReversalModel("post")
            if scaled:
                scale_branches(model)
            history = train_setting("post", False, 0, steps=steps, progress=progress,
                                    model=model)
            tensors[f"{name}.curve"] = window_means(history, every)
            tensors[f"{name}.spread"] = torch.tensor([hidden_spread(model)])
    L = SIZES["n_layers"]
    metadata = {"steps": steps, "every": every, "seed": 0, "lr": LEARNING_RATE,
                "norm": "post", "warmup": "none", "clipping": "none",
                "init": "PyTorch default: embeddings N(0, 1), linear layers Kaiming-uniform",
                "alpha": f"{(2 * L) ** 0.25:.3f}", "beta": f"{(8 * L) ** -0.25:.3f}",
                "cpu_seconds": f"{time.process_time() - cpu:.0f}"}
    return tensors, metadata


def load_branch_scaling(name: str = "l4-warmup-scaled"):
    """(runs, metadata) of the committed branch-scaling record (Lesson 4, §7):
    ``runs[name] = (curve, spread)`` for ``"plain"`` and ``"scaled"``."""
    tensors, metadata = load_artefact(name)
    runs = {k: (tensors[f"{k}.curve"], float(tensors[f"{k}.spread"])) for k in ("plain", "scaled")}
    return runs, metadata


def results_table(finals: dict[tuple[str, bool], list[float]],
                  grid: dict[float, dict[tuple[str, bool], float]], lr: float = LEARNING_RATE
                  ) -> str:
    """Lesson 4, §7: one row per setting and one column per learning rate, in increasing
    order: at ``lr`` the final loss's mean and range over the seeds (from
    :func:`final_losses`), at every other rate of the grid (from :func:`load_lr_grid`) seed 0's
    final loss. Columns are right-aligned and separated by at least two spaces."""
    if set(finals) != set(SETTINGS) or any(set(row) != set(SETTINGS) for row in grid.values()):
        raise ValueError("finals and grid must cover the four SETTINGS: pass final_losses("
                         "load_comparison()[0]) and load_lr_grid().")
    n_seeds = len(next(iter(finals.values())))
    rates = sorted({*grid, lr})
    labels = [f"lr {rate:g}, {n_seeds} seeds" if rate == lr else f"lr {rate:g}, seed 0"
              for rate in rates]
    rows = []
    for norm, warm in SETTINGS:
        values = finals[norm, warm]
        cells = [f"{sum(values) / len(values):.3f} ({min(values):.3f}-{max(values):.3f})"
                 if rate == lr else f"{grid[rate][norm, warm]:.2f}" for rate in rates]
        rows.append((f"{norm}-LN, {'warm-up' if warm else 'no warm-up'}", cells))
    widths = [max(len(label), *(len(cells[k]) for _, cells in rows)) + 2
              for k, label in enumerate(labels)]
    lines = [f"{'final loss':<19}" + "".join(f"{label:>{w}}" for label, w in zip(labels, widths))]
    lines += [f"{name:<19}" + "".join(f"{cell:>{w}}" for cell, w in zip(cells, widths))
              for name, cells in rows]
    return "\n".join(lines)


RECIPES["l4-warmup-scaled"] = train_branch_scaling

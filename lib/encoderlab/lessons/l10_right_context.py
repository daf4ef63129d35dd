"""A task that needs right context, and three wirings at equal parameters (Lesson 10, §7).

The task (:class:`KeyedShiftTask`): the source is ``length`` symbols followed by one *key*; the
target is every symbol shifted by the key (mod the alphabet), in order, then ``eos``. The first
output already needs the last input token. Three models with (almost) the same number of
parameters learn it from the same batches:

- ``"encoder-decoder"``: :class:`encoderlab.decoder.EncoderDecoderModel`, 2 + 2 blocks;
- ``"prefix-lm"``: one stack of 4 blocks over ``source, bos, target``, the prefix-LM mask with the
  source as the prefix (:class:`SingleStackLM`);
- ``"decoder-only"``: the same stack with the causal mask.

The single stack's MLP is widened (:func:`single_stack_d_ff`) so that its parameter count is the
encoder–decoder's, within 1 %. The artefact ``l10-right-context`` (``python -m encoderlab train
l10-right-context``) holds no weights, only the record: per wiring and seed, the held-out exact
match at every evaluation point and the training loss of every step; :func:`load_comparison`
reads it back.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab import masks
from encoderlab.decoder import EncoderDecoderConfig, EncoderDecoderModel
from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.training import load_artefact, train
from encoderlab.validate import check_positive_int

__all__ = ["KeyedShiftTask", "SingleStackLM", "WIRINGS", "SEEDS", "build_model",
           "single_stack_d_ff", "parameter_count", "forward_flops", "equal_flop_pairs",
           "exact_match_of", "train_comparison", "train_key_first", "RECIPES", "load_comparison"]

PAD, BOS, EOS = 0, 1, 2
N_SPECIALS = 3
WIRINGS = ("encoder-decoder", "prefix-lm", "decoder-only")
SEEDS = (0, 1, 2, 3, 4, 5)
SIZES = dict(d_model=32, n_heads=2, d_ff=64)  # the encoder–decoder's; 2 + 2 blocks
STEPS = 300
EVAL_EVERY = 25
BATCH_SIZE = 64
LEARNING_RATE = 3e-3
N_TEST = 500
TEST_SEED = 4321


class KeyedShiftTask:
    """Shift every symbol by the key at the end of the source (Lesson 10, §7).

    A source is ``length`` symbols (ids 3 .. 3 + n_symbols - 1) then one key (the next
    ``n_keys`` ids, key k meaning a shift of k + 1); the target is symbol i shifted, for i in
    order, then ``eos``. All sources have the same length, so no batch needs padding.
    ``key_first=True`` is the control: the key comes before the symbols (same draws), so a
    left-to-right reader has seen it at every symbol.
    """

    def __init__(self, n_symbols: int = 10, n_keys: int = 4, length: int = 6,
                 key_first: bool = False):
        for name, value in (("n_symbols", n_symbols), ("n_keys", n_keys), ("length", length)):
            check_positive_int(value, name)
        if n_keys >= n_symbols:
            raise ValueError(f"n_keys must be below n_symbols, got {n_keys} and {n_symbols}.")
        self.n_symbols, self.n_keys, self.length = n_symbols, n_keys, length
        self.key_first = bool(key_first)  # the control: the key before the symbols
        self.vocab_size = N_SPECIALS + n_symbols + n_keys
        self.n_src = length + 1  # the symbols and the key

    def sample(self, batch_size: int, generator: torch.Generator):
        """(src (b, length + 1), tgt_in (b, length + 1), tgt_out (b, length + 1))."""
        check_positive_int(batch_size, "batch_size")
        symbols = torch.randint(0, self.n_symbols, (batch_size, self.length), generator=generator)
        key = torch.randint(0, self.n_keys, (batch_size, 1), generator=generator)
        parts = [symbols + N_SPECIALS, key + N_SPECIALS + self.n_symbols]
        src = torch.cat(parts[::-1] if self.key_first else parts, dim=1)  # (b, length + 1)
        shifted = (symbols + key + 1) % self.n_symbols + N_SPECIALS  # (b, length)
        eos = torch.full((batch_size, 1), EOS)
        bos = torch.full((batch_size, 1), BOS)
        return src, torch.cat([bos, shifted], dim=1), torch.cat([shifted, eos], dim=1)

    def batches(self, batch_size: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        while True:
            yield self.sample(batch_size, generator)

    def __repr__(self) -> str:
        first = ", key_first=True" if self.key_first else ""
        return (f"KeyedShiftTask(n_symbols={self.n_symbols}, n_keys={self.n_keys}, "
                f"length={self.length}{first}, vocab_size={self.vocab_size})")


class SingleStackLM(nn.Module):
    """One pre-LN stack over ``source, bos, target`` and a next-token head (Lesson 10, §7).

    ``prefix=True``: the prefix-LM mask, bidirectional over the source; ``prefix=False``: causal
    everywhere, a decoder-only model. The loss is taken on the target positions only, as the
    encoder–decoder's is.
    """

    def __init__(self, vocab_size: int, n_src: int, n_layers: int, d_model: int, n_heads: int,
                 d_ff: int, prefix: bool):
        super().__init__()
        self.n_src, self.prefix = n_src, prefix
        self.stack = EncoderModel(EncoderConfig(
            vocab_size=vocab_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
            d_ff=d_ff, n_max=2 * n_src + 2, n_segments=1, layer_norm_eps=1e-5, dropout=0.0,
            norm="pre", pooler=False))
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Logits (b, t, V) for the target positions, given the source and the target inputs."""
        ids = torch.cat([src, tgt_in], dim=1)  # (b, n_src + t)
        n = ids.shape[1]
        mask = masks.prefix_lm(n, self.n_src) if self.prefix else masks.causal(n)
        h = self.stack(ids, mask=mask).last_hidden_state  # (b, n, d)
        return self.lm_head(h[:, self.n_src:])  # (b, t, V): from bos on

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, steps: int) -> torch.Tensor:
        """Greedy decoding without a cache (the stack is re-run; it is tiny): (b, steps)."""
        tgt = torch.full((src.shape[0], 1), BOS)
        for _ in range(steps):
            token = self(src, tgt)[:, -1].argmax(-1)  # (b,)
            tgt = torch.cat([tgt, token[:, None]], dim=1)
        return tgt[:, 1:]


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _encoder_decoder(task: KeyedShiftTask) -> EncoderDecoderModel:
    return EncoderDecoderModel(EncoderDecoderConfig(
        vocab_size=task.vocab_size, n_encoder_layers=2, n_decoder_layers=2,
        n_max=2 * task.n_src + 2, **SIZES))


def single_stack_d_ff(task: KeyedShiftTask) -> int:
    """The MLP width that brings a 4-block single stack closest to the encoder–decoder's count."""
    target = parameter_count(_encoder_decoder(task))

    def count(d_ff: int) -> int:
        return parameter_count(SingleStackLM(task.vocab_size, task.n_src, 4, SIZES["d_model"],
                                             SIZES["n_heads"], d_ff, prefix=True))
    base = SIZES["d_ff"]
    per_unit = count(base + 1) - count(base)  # the count is linear in d_ff
    return base + round((target - count(base)) / per_unit)


def build_model(wiring: str, task: KeyedShiftTask, seed: int) -> nn.Module:
    """One of the three wirings, initialised from ``seed`` (Lesson 10, §7)."""
    if wiring not in WIRINGS:
        raise ValueError(f"wiring must be one of {WIRINGS}, got {wiring!r}.")
    d_ff = single_stack_d_ff(task) if wiring != "encoder-decoder" else None
    torch.manual_seed(seed)
    if wiring == "encoder-decoder":
        return _encoder_decoder(task)
    return SingleStackLM(task.vocab_size, task.n_src, 4, SIZES["d_model"], SIZES["n_heads"],
                         d_ff, prefix=wiring == "prefix-lm")


def forward_flops(wiring: str, task: KeyedShiftTask) -> dict:
    """FLOPs of one example's forward pass, by formula (Lesson 10, §7): a matrix product of
    (m, k) by (k, n) costs 2mnk. n source positions, t target positions, width d, MLP d_ff.

    - a self-attention block over N positions: W_Q, W_K, W_V, W_O, 8Nd²; the MLP, 4N d d_ff;
      the scores and A V, 4N²d (dense: a causal or prefix mask computes every score too);
    - a decoder block adds cross-attention: W_Q, W_O on the t target positions and W_K, W_V
      on the n source positions, 4td² + 4nd², and its scores and A V, 4tnd;
    - the head, 2td V on the target positions. A single stack runs N = n + t positions
      through 4 blocks; the encoder–decoder n through 2 encoder blocks and t through 2
      decoder blocks. Returns "linear", "attention" and "forward"; training is about three
      forward passes (the backward pass costs two), "training".
    """
    if wiring not in WIRINGS:
        raise ValueError(f"wiring must be one of {WIRINGS}, got {wiring!r}.")
    d, vocab = SIZES["d_model"], task.vocab_size
    n = t = task.n_src  # the source and the target (bos + symbols) have the same length here
    if wiring == "encoder-decoder":
        d_ff = SIZES["d_ff"]
        linear = (2 * (8 * n * d * d + 4 * n * d * d_ff)  # 2 encoder blocks
                  + 2 * (8 * t * d * d + 4 * t * d * d + 4 * n * d * d + 4 * t * d * d_ff)
                  + 2 * t * d * vocab)  # 2 decoder blocks (self + cross + MLP), the head
        attention = 2 * 4 * n * n * d + 2 * (4 * t * t * d + 4 * t * n * d)
    else:
        d_ff, big_n = single_stack_d_ff(task), n + t
        linear = 4 * (8 * big_n * d * d + 4 * big_n * d * d_ff) + 2 * t * d * vocab
        attention = 4 * 4 * big_n * big_n * d
    forward = linear + attention
    return {"linear": linear, "attention": attention, "forward": forward,
            "training": 3 * forward}


def equal_flop_pairs(eval_steps, flops_cheap: float, flops_dear: float) -> list[tuple[int, int]]:
    """Evaluations to compare at equal training FLOPs (Lesson 10, §7): pairs (i, j) where the
    dearer wiring at ``eval_steps[i]`` and the cheaper one at ``eval_steps[j]`` have spent about
    the same, j the latest evaluation whose FLOPs do not exceed the dearer wiring's (so the
    cheaper wiring never gets more). ``flops_*`` are FLOPs per step. Only i > 0 whose budget the
    cheaper wiring's record reaches."""
    steps = [int(s) for s in eval_steps]
    if not (0 < flops_cheap <= flops_dear):
        raise ValueError("flops_cheap must be positive and at most flops_dear (the dearer "
                         f"wiring's FLOPs per step), got {flops_cheap!r} and {flops_dear!r}.")
    if steps != sorted(steps) or len(set(steps)) != len(steps):
        raise ValueError(f"eval_steps must be increasing, got {steps}.")
    pairs = []
    for i, step in enumerate(steps):
        budget = step * flops_dear
        if step == 0 or steps[-1] * flops_cheap < budget:
            continue
        j = max(k for k, s in enumerate(steps) if s * flops_cheap <= budget)
        pairs.append((i, j))
    return pairs


def _logits(model: nn.Module, src, tgt_in) -> torch.Tensor:
    return model(src, tgt_in)  # both kinds take (src, tgt_in): (b, t, V)


@torch.no_grad()
def exact_match_of(model: nn.Module, src: torch.Tensor, tgt_out: torch.Tensor) -> float:
    """Share of sources whose greedy output equals the target, ``eos`` included."""
    steps = tgt_out.shape[1]
    if isinstance(model, EncoderDecoderModel):
        ids = model.generate(src, max_new_tokens=steps).ids
        ids = F.pad(ids, (0, steps - ids.shape[1]), value=PAD)
    else:
        ids = model.greedy(src, steps)
    return float((ids == tgt_out).all(dim=1).float().mean())


def train_comparison(steps: int | None = None, progress: bool = True,
                     wirings: tuple[str, ...] = WIRINGS, key_first: bool = False):
    """Train every wiring with every seed on the same batches; record exact match and loss."""
    steps = steps or STEPS
    for wiring in wirings:
        if wiring not in WIRINGS:
            raise ValueError(f"wirings must come from {WIRINGS}, got {wiring!r}.")
    task = KeyedShiftTask(key_first=key_first)
    src_test, _, out_test = task.sample(N_TEST, torch.Generator().manual_seed(TEST_SEED))
    tensors, counts = {}, {}
    started = time.perf_counter()
    for wiring in wirings:
        for seed in SEEDS:
            model = build_model(wiring, task, seed)
            counts[wiring] = parameter_count(model)
            curve_steps, curve_match = [], []

            def loss_fn(model, batch, wiring=wiring, curve_steps=curve_steps,
                        curve_match=curve_match):
                if loss_fn.step % EVAL_EVERY == 0:
                    model.eval()
                    curve_steps.append(loss_fn.step)
                    curve_match.append(exact_match_of(model, src_test, out_test))
                    model.train()
                loss_fn.step += 1
                src, tgt_in, tgt_out = batch
                logits = _logits(model, src, tgt_in)
                return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())

            loss_fn.step = 0
            history = train(model, task.batches(BATCH_SIZE, seed=100 + seed), loss_fn,
                            steps=steps, lr=LEARNING_RATE, seed=seed, progress=progress,
                            description=f"{wiring} seed {seed}")
            curve_steps.append(steps)
            curve_match.append(exact_match_of(model, src_test, out_test))
            key = f"{wiring}.s{seed}"
            tensors[f"{key}.eval_steps"] = torch.tensor(curve_steps)
            tensors[f"{key}.exact_match"] = torch.tensor(curve_match)
            tensors[f"{key}.train_loss"] = torch.tensor(history)
    metadata = {
        "task": repr(task), "wirings": ",".join(wirings), "seeds": ",".join(map(str, SEEDS)),
        "steps": steps, "batch_size": BATCH_SIZE, "lr": LEARNING_RATE, "n_test": N_TEST,
        "test_seed": TEST_SEED, "sizes": repr(SIZES),
        "single_stack_d_ff": single_stack_d_ff(task),
        **{f"parameters.{w}": c for w, c in counts.items()},
        "seconds": f"{time.perf_counter() - started:.0f}",
    }
    return tensors, metadata


def train_key_first(steps: int | None = None, progress: bool = True):
    """The control of Lesson 10, §7: the two single stacks on the task with the key first."""
    return train_comparison(steps, progress, wirings=("prefix-lm", "decoder-only"),
                            key_first=True)


RECIPES = {"l10-right-context": train_comparison, "l10-key-first": train_key_first}


def load_comparison(name: str = "l10-right-context"):
    """(runs, metadata): ``runs[(wiring, seed)]`` holds ``eval_steps``, ``exact_match`` and
    ``train_loss`` tensors (Lesson 10, §7)."""
    tensors, metadata = load_artefact(name)
    runs = {}
    for wiring in metadata["wirings"].split(","):
        for seed in (int(s) for s in metadata["seeds"].split(",")):
            key = f"{wiring}.s{seed}"
            runs[wiring, seed] = {field: tensors[f"{key}.{field}"]
                                  for field in ("eval_steps", "exact_match", "train_loss")}
    return runs, metadata

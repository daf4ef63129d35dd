"""Lesson 10's own code: a sequence-to-sequence task, and counting what the KV cache saves.

The task (§4) is reversal: the source is a string of symbols of random length, the target is the
same string backwards, followed by ``eos``. Lengths vary, so a batch is padded, and the model must
use its source padding mask. Ids follow :class:`encoderlab.decoder.EncoderDecoderConfig`'s defaults:
``pad=0``, ``bos=1``, ``eos=2``, symbols from 3 on. Everything is drawn from a seeded
``torch.Generator``: the same seed gives the same batches.

The count (§5): :func:`kv_positions_per_step` watches every decoder block's W_K while the model
generates, and reports how many positions were projected to keys and values at each step, with
and without the cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from encoderlab.decoder import EncoderDecoderModel
from encoderlab.validate import check_positive_int

__all__ = [
    "Seq2SeqBatch",
    "ReversalTask",
    "exact_match",
    "sources_of",
    "KVCount",
    "counting_kv_projections",
    "kv_positions_per_step",
]

PAD, BOS, EOS = 0, 1, 2
N_SPECIALS = 3


@dataclass
class Seq2SeqBatch:
    """One padded batch; target inputs are the outputs shifted right behind ``bos``."""

    src_ids: torch.Tensor  # (b, n_src): symbols, then pad
    src_mask: torch.Tensor  # (b, n_src): 1 = real token, 0 = pad
    tgt_in: torch.Tensor  # (b, t): bos, y_1 ... y_m, then pad (teacher forcing's inputs)
    tgt_out: torch.Tensor  # (b, t): y_1 ... y_m, eos, then pad (the labels)
    lengths: torch.Tensor  # (b,): source lengths


class ReversalTask:
    """Reverse a string of ``n_symbols`` symbols whose length lies in [min_len, max_len].

    (Lesson 10, §4.) ``vocab_size`` is what an encoder–decoder needs: the three specials and the
    symbols. ``sample(batch_size, generator)`` draws a padded batch; ``batches`` an endless stream.
    """

    def __init__(self, n_symbols: int = 10, min_len: int = 3, max_len: int = 8):
        for name, value in (("n_symbols", n_symbols), ("min_len", min_len), ("max_len", max_len)):
            check_positive_int(value, name)
        if min_len > max_len:
            raise ValueError(
                f"min_len must not exceed max_len, got min_len={min_len}, max_len={max_len}; "
                "swap them or widen the range."
            )
        self.n_symbols, self.min_len, self.max_len = n_symbols, min_len, max_len
        self.vocab_size = N_SPECIALS + n_symbols

    def target_of(self, src: torch.Tensor) -> torch.Tensor:
        """The answer for one unpadded source (n,): the symbols reversed."""
        return src.flip(0)

    def make_batch(self, sources: list[torch.Tensor]) -> Seq2SeqBatch:
        """Pad a list of unpadded sources (each (n_i,)) into a batch with targets."""
        if not sources:
            raise ValueError("make_batch needs at least one source sequence, got an empty list.")
        b = len(sources)
        n = max(len(s) for s in sources)
        src_ids = torch.full((b, n), PAD, dtype=torch.long)
        tgt_in = torch.full((b, n + 1), PAD, dtype=torch.long)  # bos + n symbols
        tgt_out = torch.full((b, n + 1), PAD, dtype=torch.long)  # n symbols + eos
        for i, s in enumerate(sources):
            m = len(s)
            target = self.target_of(s)  # (m,)
            src_ids[i, :m] = s
            tgt_in[i, 0] = BOS
            tgt_in[i, 1 : m + 1] = target
            tgt_out[i, :m] = target
            tgt_out[i, m] = EOS
        lengths = torch.tensor([len(s) for s in sources])
        src_mask = (torch.arange(n)[None, :] < lengths[:, None]).long()  # (b, n)
        return Seq2SeqBatch(src_ids, src_mask, tgt_in, tgt_out, lengths)

    def _draw_sources(self, k: int, generator: torch.Generator) -> list[torch.Tensor]:
        """k random unpadded sources: k lengths first, then each string's symbols."""
        lengths = torch.randint(self.min_len, self.max_len + 1, (k,), generator=generator)
        return [
            torch.randint(N_SPECIALS, self.vocab_size, (int(m),), generator=generator)
            for m in lengths
        ]

    def sample(self, batch_size: int, generator: torch.Generator) -> Seq2SeqBatch:
        """A batch of random sources of random lengths, drawn from ``generator``."""
        check_positive_int(batch_size, "batch_size")
        return self.make_batch(self._draw_sources(batch_size, generator))

    def training_strings(self, batch_size: int, steps: int, seed: int = 0) -> set[tuple[int, ...]]:
        """Every source in the first ``steps`` batches of ``batches(batch_size, seed)``.

        (Lesson 10, §4.) Replays the training stream without training, so that a test set can
        leave out every string the model was trained on. Sources are tuples of ids, unpadded.
        """
        check_positive_int(batch_size, "batch_size")
        check_positive_int(steps, "steps")
        seen: set[tuple[int, ...]] = set()
        stream = self.batches(batch_size, seed=seed)
        for _ in range(steps):
            seen.update(sources_of(next(stream)))
        return seen

    def n_strings(self) -> int:
        """How many different sources the task can draw: the sum of n_symbols**m over lengths m."""
        return sum(self.n_symbols**m for m in range(self.min_len, self.max_len + 1))

    def sample_excluding(
        self, n: int, generator: torch.Generator, exclude: set[tuple[int, ...]]
    ) -> Seq2SeqBatch:
        """A batch of ``n`` different sources, none of them in ``exclude`` (Lesson 10, §4).

        Draws sources as :meth:`sample` does and keeps a source only if it is new: not in
        ``exclude`` (for instance :meth:`training_strings`) and not already kept. Lengths the
        excluded set covers densely therefore become rare in the result.
        """
        check_positive_int(n, "n")
        excluded = sum(
            1 for s in exclude
            if self.min_len <= len(s) <= self.max_len
            and all(N_SPECIALS <= t < self.vocab_size for t in s)
        )
        available = self.n_strings() - excluded
        if available < n:
            raise ValueError(
                f"sample_excluding needs {n} new strings, but the task has only {available} "
                f"outside the {excluded} excluded ones; ask for fewer or widen the task."
            )
        kept: list[torch.Tensor] = []
        taken = set(exclude)
        while len(kept) < n:
            for s in self._draw_sources(n, generator):
                key = tuple(s.tolist())
                if key not in taken and len(kept) < n:
                    taken.add(key)
                    kept.append(s)
        return self.make_batch(kept)

    def batches(self, batch_size: int, seed: int = 0) -> Iterator[Seq2SeqBatch]:
        """An endless, seeded stream of batches (for :func:`encoderlab.training.train`)."""
        generator = torch.Generator().manual_seed(seed)
        while True:
            yield self.sample(batch_size, generator)

    def __repr__(self) -> str:
        return (f"ReversalTask(n_symbols={self.n_symbols}, lengths {self.min_len}-{self.max_len}, "
                f"vocab_size={self.vocab_size})")


def sources_of(batch: Seq2SeqBatch) -> list[tuple[int, ...]]:
    """The unpadded sources of a batch, as tuples of ids (Lesson 10, §4)."""
    return [tuple(row[:m]) for row, m in zip(batch.src_ids.tolist(), batch.lengths.tolist())]


def exact_match(generated: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Per sequence, whether the generated ids equal the target up to and including ``eos``.

    (Lesson 10, §4.) ``generated`` is (b, t_gen) with pad after eos (as ``generate`` returns it),
    ``tgt_out`` is (b, t) with pad after eos. Returns a (b,) boolean tensor.
    """
    if generated.dim() != 2 or tgt_out.dim() != 2 or generated.shape[0] != tgt_out.shape[0]:
        raise ValueError(
            "exact_match expects two (batch, length) tensors with the same batch size, got "
            f"{tuple(generated.shape)} and {tuple(tgt_out.shape)}."
        )
    t = max(generated.shape[1], tgt_out.shape[1])

    def padded(x):
        return torch.nn.functional.pad(x, (0, t - x.shape[1]), value=PAD)  # (b, t)

    return (padded(generated) == padded(tgt_out)).all(dim=1)


# ---------------------------------------------------------------------------
# What the keys and values cost (§5)
# ---------------------------------------------------------------------------


@dataclass
class KVCount:
    """What one attention layer's W_K did: how often it ran, and how many positions it projected.

    W_V always runs with W_K, on the same positions, so one count stands for both.
    """

    calls: int = 0
    positions: int = 0  # rows of the batch: b * n_kv per call


@contextmanager
def counting_kv_projections(model: EncoderDecoderModel) -> Iterator[list[tuple[KVCount, KVCount]]]:
    """Inside the ``with``, count every decoder block's key projections (Lesson 10, §5).

    Yields one ``(self_attention, cross_attention)`` pair of :class:`KVCount` per decoder
    block; they grow as the model runs. The counting is a forward hook on each layer's W_K
    (``w_k``): it runs whenever keys are computed, and not when the decoder's
    :class:`encoderlab.attention.KVCache` hands back stored ones. The hooks are removed on
    leaving the ``with``, also after an error.
    """
    if not isinstance(model, EncoderDecoderModel):
        raise ValueError(
            f"model must be an EncoderDecoderModel, got {type(model).__name__}. The counts "
            "come from the decoder blocks' attention layers."
        )
    counts = [(KVCount(), KVCount()) for _ in model.blocks]

    def counter(count: KVCount):
        def count_call(module, inputs, output):
            source = inputs[0]  # (b, n_kv, d): the positions projected by W_K
            count.calls += 1
            count.positions += source.shape[0] * source.shape[1]
        return count_call

    handles = []
    for block, (self_count, cross_count) in zip(model.blocks, counts):
        handles.append(block.self_attention.w_k.register_forward_hook(counter(self_count)))
        handles.append(block.cross_attention.w_k.register_forward_hook(counter(cross_count)))
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


def kv_positions_per_step(
    model: EncoderDecoderModel,
    src_ids: torch.Tensor,  # (b, n_src)
    src_mask: torch.Tensor | None = None,  # (b, n_src)
    max_new_tokens: int = 20,
    use_cache: bool = True,
) -> list[dict]:
    """Positions projected to keys and values at every step of greedy decoding (Lesson 10, §5).

    Runs ``model.generate`` inside :func:`counting_kv_projections` and reads, after each
    decoding step, the positions every decoder block's self- and cross-attention sent
    through W_K and W_V (rows of the batch). Returns one dict per step:
    ``{"step": t, "self": [per block], "cross": [per block]}``, t counted from 1.
    For one sequence of n_src tokens the formula is: with the cache, self 1 and
    cross n_src at step 1, then self 1 and cross 0; without it, self t and cross
    n_src at every step t.
    """
    with counting_kv_projections(model) as counts:

        def totals() -> tuple[list[int], list[int]]:
            return [s.positions for s, _ in counts], [c.positions for _, c in counts]

        before = [totals()]  # the counts before the first step, then after every step
        # lm_head runs once per decoding step, after every block: read the counts there.
        hook = model.lm_head.register_forward_hook(lambda *_: before.append(totals()))
        try:
            model.generate(src_ids, src_mask, max_new_tokens=max_new_tokens, use_cache=use_cache)
        finally:
            hook.remove()
    steps = []
    for t, ((s0, c0), (s1, c1)) in enumerate(zip(before, before[1:]), start=1):
        steps.append({
            "step": t,
            "self": [b - a for a, b in zip(s0, s1)],
            "cross": [b - a for a, b in zip(c0, c1)],
        })
    return steps

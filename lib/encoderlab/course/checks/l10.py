"""Lesson 10's checkers: the prefix-LM mask, bidirectional over the prefix and causal after it
(§3), and greedy decoding with the KV cache, written step by step (§5)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from encoderlab import masks
from encoderlab.attention import KVCache
from encoderlab.course.checks.harness import (
    Attempt,
    CheckFailed,
    Exercise,
    run,
    square_mask_exercise,
)
from encoderlab.decoder import EncoderDecoderConfig, EncoderDecoderModel
from encoderlab.lessons.l10_seq2seq import counting_kv_projections

__all__ = ["check_prefix_lm_mask", "check_cached_greedy"]


def _prefix_rows_see_all(n: int, p: int) -> torch.Tensor:
    m = masks.prefix_lm(n, p)
    m[:p, :] = True  # the prefix's queries also read the target positions
    return m


_PREFIX_LM_MISTAKES = [
    ("your mask is causal inside the prefix too: the prefix is the input, fully known, so its "
     "positions attend to each other in both directions (set every column j < prefix_len to True).",
     lambda n, p: masks.causal(n)),
    ("your mask lets every query see every key: after the prefix the model is writing, and a "
     "position there must not see the positions after it (keep j <= i for i >= prefix_len).",
     lambda n, p: torch.ones(n, n, dtype=torch.bool)),
    ("your prefix is one position too long: exactly the first prefix_len columns are visible to "
     "everyone (columns 0 .. prefix_len - 1), not prefix_len + 1 of them.",
     lambda n, p: masks.prefix_lm(n, min(p + 1, n))),
    ("your prefix is one position too short: the first prefix_len columns (0 .. prefix_len - 1) "
     "are all visible to everyone, the last of them included.",
     lambda n, p: masks.prefix_lm(n, max(p - 1, 0))),
    ("your prefix queries see the positions after the prefix: the input must not read the answer "
     "being written, so rows i < prefix_len see only the prefix columns.",
     _prefix_rows_see_all),
]


_PREFIX_LM = square_mask_exercise(
    title="prefix-LM mask",
    cases=lambda: [(6, 3), (8, 5), (5, 1), (7, 6), (9, 4), (4, 0), (4, 4), (1, 1)],
    reference=masks.prefix_lm,
    describe=lambda n, prefix_len: f"n = {n}, prefix_len = {prefix_len}",
    rule="the prefix-LM mask is one sequence attending to itself: (n, n) = {square}.",
    mistakes=_PREFIX_LM_MISTAKES,
)


def check_prefix_lm_mask(fn: Callable) -> bool:
    """Check ``fn(n, prefix_len)`` returns the (n, n) boolean prefix-LM mask (Lesson 10, §3)."""
    return run(_PREFIX_LM, fn)


# --- Greedy decoding with the KV cache (Lesson 10, §5) -------------------------------------------


@dataclass(frozen=True)
class Decoded:
    """What one decoding loop did: its tokens, and the rows every decoder block sent through
    W_K (and W_V) for self- and cross-attention, summed over the loop."""

    ids: torch.Tensor  # (b, t)
    self_positions: tuple[int, ...]  # per decoder block
    cross_positions: tuple[int, ...]  # per decoder block

    def same(self, other: Decoded | None) -> bool:
        return (isinstance(other, Decoded) and self.ids.shape == other.ids.shape
                and torch.equal(self.ids, other.ids)
                and self.self_positions == other.self_positions
                and self.cross_positions == other.cross_positions)


def _decoded(result, where: str) -> torch.Tensor:
    ids = result.ids if hasattr(result, "ids") else result  # a Generation is accepted too
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        raise CheckFailed(
            f"your function returned {type(ids).__name__}"
            + (f" of shape {tuple(ids.shape)}, dtype {ids.dtype}"
               if isinstance(ids, torch.Tensor) else "")
            + f" on {where}; return the generated ids: an integer tensor (batch, steps), bos "
            "excluded, pad after each row's eos, as model.generate(...).ids."
        )
    return ids.detach().cpu()


def _run_counted(fn: Callable, model, src_ids, src_mask, max_new_tokens, where: str) -> Decoded:
    with counting_kv_projections(model) as counts:
        result = fn(model, src_ids, src_mask, max_new_tokens)
    return Decoded(_decoded(result, where),
                   tuple(s.positions for s, _ in counts), tuple(c.positions for _, c in counts))


@torch.no_grad()
def _greedy(model, src_ids, src_mask, max_new_tokens, *, cache="both", feed="newest",
            position_shift=0, start="bos", stop="yes"):
    """Cached greedy decoding, step by step; each non-default switch is a known mistake.

    cache: "both" (self grows, cross computed once), "self" (cross K/V recomputed every step),
    "none" (no cache: the whole prefix again, with a causal mask). feed: "newest" (one token per
    step) or "prefix" (the whole prefix every step, into the cache). position_shift: added to the
    position ids. start: "bos" or "pad". stop: "yes", "no-mask" (rows keep writing after eos) or
    "no-break" (every row stops at eos, but the loop runs to max_new_tokens).
    """
    cfg = model.config
    memory = model.encode(src_ids, src_mask)  # (b, n_src, d): the source, read once
    cross_mask = masks.padding(src_mask)  # (b, 1, 1, n_src)
    b = src_ids.shape[0]
    first = cfg.bos_id if start == "bos" else cfg.pad_id
    written = torch.full((b, 1), first, dtype=torch.long)  # (b, 1): the decoder's inputs
    caches = [(KVCache(), KVCache()) for _ in model.blocks]
    done = torch.zeros(b, dtype=torch.bool)
    chosen = []
    for step in range(max_new_tokens):
        if cache == "none" or feed == "prefix":
            new, positions = written, torch.arange(written.shape[1])  # (b, t), (t,)
        else:
            new, positions = written[:, -1:], torch.tensor([step])  # (b, 1), (1,)
        y = model.token(new) + model.position(positions + position_shift)  # (b, t or 1, d)
        self_mask = masks.causal(new.shape[1]) if cache == "none" else None
        for block, (self_cache, cross_cache) in zip(model.blocks, caches):
            layer_caches = {"both": (self_cache, cross_cache), "self": (self_cache, KVCache()),
                            "none": None}[cache]
            y, _ = block(y, memory, self_mask, cross_mask, layer_caches)
        logits = model.lm_head(model.final_norm(y[:, -1]))  # (b, V): the newest position
        token = logits.argmax(-1)  # (b,)
        if stop != "no-mask":
            token = token.masked_fill(done, cfg.pad_id)
        chosen.append(token)
        done |= token == cfg.eos_id
        written = torch.cat([written, token[:, None]], dim=1)
        if stop != "no-break" and bool(done.all()):
            break
    return torch.stack(chosen, 1)  # (b, t)


def _model(seed: int, n_decoder_layers: int, eos_bias: float) -> EncoderDecoderModel:
    torch.manual_seed(seed)
    config = EncoderDecoderConfig(vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1,
                                  n_decoder_layers=n_decoder_layers, d_ff=32, n_max=16)
    model = EncoderDecoderModel(config).eval()
    with torch.no_grad():
        model.lm_head.weight *= 4  # logits that depend on the decoder's state, not only the bias
        for block in model.blocks:  # and a state that depends on the source: a louder read
            block.cross_attention.w_o.weight *= 6
        model.lm_head.bias[[config.pad_id, config.bos_id]] = -1e4  # never written
        model.lm_head.bias[config.eos_id] += eos_bias  # rows end at different steps
    return model


def _source(seed: int, lengths: list[int]):
    g = torch.Generator().manual_seed(seed)
    n = max(lengths)
    src_mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()  # (b, n)
    src_ids = torch.randint(3, 11, (len(lengths), n), generator=g) * src_mask  # pad = 0
    return src_ids, src_mask


def _greedy_cases() -> list[tuple]:
    cases = []
    for k, (layers, eos_bias, lengths, steps) in enumerate([
            (2, 0.0, [5], 8),  # one string, no padding, no eos: runs to max_new_tokens
            (2, 0.5, [6, 3, 4, 6, 2], 10),  # a padded batch; two rows end early, three do not
            (1, -5.0, [4, 7, 5], 9),  # one decoder block; eos never chosen
            (3, 2.5, [3, 5, 8, 6], 12),  # every row ends (at step 1 or 3): the loop stops early
            (2, 0.0, [6, 4], 7),  # one row ends at step 2, the other writes to the end
    ]):
        src_ids, src_mask = _source(100 + k, lengths)
        cases.append((_model(k, layers, eos_bias), src_ids, src_mask, steps))
    return cases


def _describe_greedy(model, src_ids, src_mask, max_new_tokens) -> str:
    return (f"a model with {len(model.blocks)} decoder block(s), a batch of {src_ids.shape[0]} "
            f"source(s) of lengths {src_mask.sum(1).tolist()}, max_new_tokens={max_new_tokens}")


def _reference_greedy(model, src_ids, src_mask, max_new_tokens) -> Decoded:
    """The library's generate without the cache for the tokens; the counts the cache allows."""
    ids = model.generate(src_ids, src_mask, max_new_tokens=max_new_tokens, use_cache=False).ids
    steps, (b, n_src) = ids.shape[1], src_ids.shape
    blocks = len(model.blocks)
    return Decoded(ids, (b * steps,) * blocks, (b * n_src,) * blocks)


def _wrong(**switches) -> Callable:
    fn = functools.partial(_greedy, **switches)

    def wrong(model, src_ids, src_mask, max_new_tokens) -> Decoded | None:
        try:
            return _run_counted(fn, model, src_ids, src_mask, max_new_tokens, "a known mistake")
        except (IndexError, ValueError, RuntimeError):  # e.g. a position past n_max
            return None

    return wrong


_GREEDY_MISTAKES = [
    ("your loop does not use the cache: the tokens are right, but every step runs the decoder "
     "over the whole prefix again (self-attention projected 1 + 2 + ... + t positions instead "
     "of one per step). Keep one KVCache per block for self-attention and feed only the newest "
     "token.",
     _wrong(cache="none")),
    ("your cross-attention keys and values are recomputed at every step: the tokens are right, "
     "but each block projects the whole source once per step instead of once per generation. "
     "Keep one cross-attention KVCache per block for the whole loop; it fills at the first step.",
     _wrong(cache="self")),
    ("you feed the whole prefix at every step while using the cache: the cache already holds the "
     "earlier positions, so their keys are appended again (duplicated keys) and the new queries "
     "read them twice. Feed only the newest token, written[:, -1:].",
     _wrong(feed="prefix")),
    ("your position ids are one too far: the first decoder input (bos) sits at position 0, so "
     "at step t (from 0) the new token's position is t, not t + 1.",
     _wrong(position_shift=1)),
    ("your decoding does not start from bos: the decoder's first input is model.config.bos_id "
     "(it was trained with bos in front of every target).",
     _wrong(start="pad")),
    ("your rows keep writing after their eos: once a row has chosen eos, every later token of "
     "that row must be pad (masked_fill the finished rows).",
     _wrong(stop="no-mask")),
    ("your loop does not stop when every row has written eos: it runs to max_new_tokens and "
     "returns extra columns of pad; break as soon as every row is done.",
     _wrong(stop="no-break")),
]


def _greedy_fallback(attempt: Attempt) -> str:
    k = attempt.first
    mine, right = attempt.answers[k], attempt.references[k]
    where = attempt.where(k)
    if mine.ids.shape != right.ids.shape:
        return (f"your ids have shape {tuple(mine.ids.shape)} on {where}, the library's "
                f"{tuple(right.ids.shape)} (batch, steps until every row has written eos or "
                "max_new_tokens is reached).")
    if not torch.equal(mine.ids, right.ids):
        row, col = (int(x) for x in (mine.ids != right.ids).nonzero()[0])
        return (f"your tokens differ from generate(use_cache=False) on {where}: first at row "
                f"{row}, step {col} (yours {int(mine.ids[row, col])}, the library's "
                f"{int(right.ids[row, col])}); compare your inputs, positions and masks at that "
                "step with the library's.")
    return (f"your tokens are right, but the cache is not used as it should be on {where}: per "
            f"decoder block your loop projected {list(mine.self_positions)} positions for "
            f"self-attention (one per row and step: {list(right.self_positions)}) and "
            f"{list(mine.cross_positions)} for cross-attention (the source once: "
            f"{list(right.cross_positions)}).")


def check_cached_greedy(fn: Callable) -> bool:
    """Check ``fn(model, src_ids, src_mask, max_new_tokens)``: greedy decoding with the KV cache.

    (Lesson 10, §5.) ``fn`` must not call ``model.generate`` or ``model.decode``. The ids must
    equal ``model.generate(..., use_cache=False).ids`` on seeded small models and padded batches,
    and the counted key projections must be those of a real cache: per decoder block one
    position per row and step for self-attention, the source once for cross-attention.
    """
    exercise = Exercise(
        title="cached greedy decoding",
        cases=_greedy_cases,
        reference=_reference_greedy,
        describe=_describe_greedy,
        fallback=_greedy_fallback,
        mistakes=_GREEDY_MISTAKES,
        answer=_counted_answer,
        same=Decoded.same,
        numbered=True,
    )
    return run(exercise, _counting(fn))


_FORBIDDEN = ("generate", "decode")  # the loop the exercise asks for, already written


def _counted_answer(result, where, *case) -> Decoded:
    returned, counts, used = result
    if used:
        raise CheckFailed(
            f"your function calls model.{used[0]} (on {where}): that is the loop this exercise "
            "asks you to write. Build it from the model's parts: model.encode, model.token, "
            "model.position, the blocks in model.blocks, model.final_norm and model.lm_head."
        )
    return Decoded(_decoded(returned, where), tuple(s.positions for s, _ in counts),
                   tuple(c.positions for _, c in counts))


def _counting(fn: Callable) -> Callable:
    """The learner's function, run inside the KV counters; keeps its name for the messages."""

    @functools.wraps(fn)
    def counted(model, src_ids, src_mask, max_new_tokens):
        used: list[str] = []

        def spy(name: str):
            original = getattr(model, name)

            def watched(*args, **kwargs):
                used.append(name)
                return original(*args, **kwargs)
            return watched

        for name in _FORBIDDEN:  # an instance attribute hides the method until deleted
            object.__setattr__(model, name, spy(name))
        try:
            with counting_kv_projections(model) as counts:
                result = fn(model, src_ids.clone(), src_mask.clone(), max_new_tokens)
        finally:
            for name in _FORBIDDEN:
                object.__delattr__(model, name)
        return result, counts, used

    return counted

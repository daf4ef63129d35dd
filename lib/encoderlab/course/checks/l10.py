"""Lesson 10's checkers: the prefix-LM mask, bidirectional over the prefix and causal after it
(§3), and greedy decoding with the KV cache, written step by step (§5)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from encoderlab import masks
from encoderlab.attention import KVCache
from encoderlab.course.checks.harness import (
    Attempt,
    CheckFailed,
    Exercise,
    Message,
    answer_type,
    checker,
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
    ("your mask is causal inside the prefix too, but the prefix is the input, fully known: its "
     "positions attend to each other in both directions.",
     "set every column j < prefix_len to True.",
     lambda n, p: masks.causal(n)),
    ("your mask lets every query see every key, but after the prefix the model is writing, and "
     "a position there must not see the positions after it.",
     "keep j <= i for the rows i >= prefix_len.",
     lambda n, p: torch.ones(n, n, dtype=torch.bool)),
    ("your prefix is one position too long: prefix_len + 1 columns are visible to everyone.",
     "make exactly columns 0 .. prefix_len - 1 visible to every query.",
     lambda n, p: masks.prefix_lm(n, min(p + 1, n))),
    ("your prefix is one position too short: its last column is not visible to everyone.",
     "make all of columns 0 .. prefix_len - 1 visible to every query, the last one included.",
     lambda n, p: masks.prefix_lm(n, max(p - 1, 0))),
    ("your prefix queries see the positions after the prefix, but the input must not read the "
     "answer being written.",
     "let the rows i < prefix_len see only the prefix columns.",
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


@checker
def check_prefix_lm_mask(fn: Callable) -> bool:
    """Check ``fn(n, prefix_len)`` returns the (n, n) boolean prefix-LM mask (Lesson 10, §3)."""
    return run(_PREFIX_LM, fn)


# --- Greedy decoding with the KV cache (Lesson 10, §5) -------------------------------------------


@answer_type  # graded, it travels from the submission's kernel to the grader
@dataclass(frozen=True)
class Decoded:
    """What one decoding loop did: its tokens, the rows every decoder block sent through W_K
    (and W_V) for self- and cross-attention, summed over the loop, and how many times the
    encoder ran."""

    ids: torch.Tensor  # (b, t)
    self_positions: tuple[int, ...]  # per decoder block
    cross_positions: tuple[int, ...]  # per decoder block
    encoder_calls: int = 1

    def same(self, other: Decoded | None) -> bool:
        return (isinstance(other, Decoded) and self.ids.shape == other.ids.shape
                and torch.equal(self.ids, other.ids)
                and self.self_positions == other.self_positions
                and self.cross_positions == other.cross_positions
                and self.encoder_calls == other.encoder_calls)

    def same_mistake(self, other: Decoded | None) -> bool:
        """As ``same``, but any number of encoder calls above one counts as the same slip."""
        return (isinstance(other, Decoded)
                and Decoded.same(replace(self, encoder_calls=min(self.encoder_calls, 2)),
                                 replace(other, encoder_calls=min(other.encoder_calls, 2))))


@contextlib.contextmanager
def _counting_encoder(model):
    """Inside the ``with``, count the encoder's forward calls (model.encode or model.encoder)."""
    calls = [0]

    def count(module, inputs, output):
        calls[0] += 1

    handle = model.encoder.register_forward_hook(count)
    try:
        yield calls
    finally:
        handle.remove()


def _decoded(result, where: str) -> torch.Tensor:
    ids = result.ids if hasattr(result, "ids") else result  # a Generation is accepted too
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        raise CheckFailed(
            f"your function returned {type(ids).__name__}"
            + (f" of shape {tuple(ids.shape)}, dtype {ids.dtype}"
               if isinstance(ids, torch.Tensor) else "")
            + f" on {where}, not the generated ids.",
            "return an integer tensor (batch, steps), bos excluded, pad after each row's eos, as "
            "model.generate(...).ids.",
        )
    return ids.detach().cpu()


def _run_counted(fn: Callable, model, src_ids, src_mask, max_new_tokens, where: str) -> Decoded:
    with counting_kv_projections(model) as counts, _counting_encoder(model) as encoder_calls:
        result = fn(model, src_ids, src_mask, max_new_tokens)
    return Decoded(_decoded(result, where), tuple(s.positions for s, _ in counts),
                   tuple(c.positions for _, c in counts), encoder_calls[0])


@torch.no_grad()
def _greedy(model, src_ids, src_mask, max_new_tokens, *, cache="both", feed="newest",
            position_shift=0, late_shift=0, start="bos", stop="yes", norm=True,
            source_mask=True, encode="once", keep_bos=False):
    """Cached greedy decoding, step by step; each non-default switch is a known mistake.

    cache: "both" (self grows, cross computed once), "self" (cross K/V recomputed every step),
    "none" (no cache: the whole prefix again, with a causal mask), "fresh-self" (a new
    self-attention cache at every step: no history), "dropped" (caches=None while feeding one
    token), "shared" (one pair of caches for all blocks). feed: "newest" (one token per step) or
    "prefix" (the whole prefix every step, into the cache). position_shift: added to the
    position ids; late_shift: added from the second step on. start: "bos" or "pad". stop: "yes",
    "no-mask" (rows keep writing after eos), "eos-fill" (eos instead of pad after a row's eos),
    "no-break" (every row stops at eos, but the loop runs to max_new_tokens) or "any" (the loop
    stops when any row is done). norm: apply final_norm. source_mask: pass the source's padding
    mask to cross-attention. encode: "once" or "every-step". keep_bos: return bos as column 0.
    """
    cfg = model.config
    memory = model.encode(src_ids, src_mask)  # (b, n_src, d): the source, read once
    cross_mask = masks.padding(src_mask) if source_mask else None  # (b, 1, 1, n_src)
    b = src_ids.shape[0]
    first = cfg.bos_id if start == "bos" else cfg.pad_id
    written = torch.full((b, 1), first, dtype=torch.long)  # (b, 1): the decoder's inputs
    caches = [(KVCache(), KVCache()) for _ in model.blocks]
    if cache == "shared":
        caches = [caches[0]] * len(model.blocks)
    done = torch.zeros(b, dtype=torch.bool)
    chosen = []
    for step in range(max_new_tokens):
        if encode == "every-step" and step > 0:
            memory = model.encode(src_ids, src_mask)
        if cache == "none" or feed == "prefix":
            new, positions = written, torch.arange(written.shape[1])  # (b, t), (t,)
        else:
            new, positions = written[:, -1:], torch.tensor([step])  # (b, 1), (1,)
        shift = position_shift + (late_shift if step > 0 else 0)
        y = model.token(new) + model.position(positions + shift)  # (b, t or 1, d)
        self_mask = masks.causal(new.shape[1]) if cache == "none" else None
        for block, (self_cache, cross_cache) in zip(model.blocks, caches):
            layer_caches = {"both": (self_cache, cross_cache), "self": (self_cache, KVCache()),
                            "fresh-self": (KVCache(), cross_cache), "shared": (self_cache,
                                                                               cross_cache),
                            "none": None, "dropped": None}[cache]
            y, _ = block(y, memory, self_mask, cross_mask, layer_caches)
        h = model.final_norm(y[:, -1]) if norm else y[:, -1]
        token = model.lm_head(h).argmax(-1)  # (b,): the newest position's choice
        if stop == "eos-fill":
            token = token.masked_fill(done, cfg.eos_id)
        elif stop != "no-mask":
            token = token.masked_fill(done, cfg.pad_id)
        chosen.append(token)
        done |= token == cfg.eos_id
        written = torch.cat([written, token[:, None]], dim=1)
        if stop != "no-break" and bool(done.all()):
            break
        if stop == "any" and bool(done.any()):
            break
    ids = torch.stack(chosen, 1)  # (b, t)
    return written if keep_bos else ids


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
    return Decoded(ids, (b * steps,) * blocks, (b * n_src,) * blocks, 1)


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
     "of one per step).",
     "keep one KVCache per block for self-attention and feed only the newest token.",
     _wrong(cache="none")),
    ("your cross-attention keys and values are recomputed at every step: the tokens are right, "
     "but each block projects the whole source once per step instead of once per generation.",
     "keep one cross-attention KVCache per block for the whole loop; it fills at the first step.",
     _wrong(cache="self")),
    ("you feed the whole prefix at every step while using the cache: the cache already holds the "
     "earlier positions, so their keys are appended again (duplicated keys) and the new queries "
     "read them twice.",
     "feed only the newest token, written[:, -1:].",
     _wrong(feed="prefix")),
    ("your position ids are one too far: the first decoder input (bos) sits at position 0.",
     "at step t (from 0) the new token's position is t, not t + 1.",
     _wrong(position_shift=1)),
    ("your decoding does not start from bos, which the decoder was trained with in front of "
     "every target.",
     "make the decoder's first input model.config.bos_id.",
     _wrong(start="pad")),
    ("your rows keep writing after their eos, where every later token must be pad.",
     "once a row has chosen eos, masked_fill its later tokens with pad.",
     _wrong(stop="no-mask")),
    ("your loop does not stop when every row has written eos: it runs to max_new_tokens and "
     "returns extra columns of pad.",
     "break as soon as every row is done.",
     _wrong(stop="no-break")),
    ("your self-attention history is not kept: the first token is right, later ones are "
     "wrong, because each step's query sees only its own key, not those of bos and the tokens "
     "written before.",
     "create the self-attention KVCache of each block once, before the loop, and pass the same "
     "one at every step.",
     _wrong(cache="fresh-self")),
    ("your blocks get no caches (caches=None) while you feed one token per step: each step's "
     "query sees only its own key, and the source is projected again at every step.",
     "pass each block its own (self, cross) pair of KVCache objects, made once before the loop.",
     _wrong(cache="dropped")),
    ("all your decoder blocks share one pair of caches: block 2 appends its keys to block 1's "
     "self-attention cache and reads block 1's keys and values of the source.",
     "make one (KVCache(), KVCache()) pair per block: [(KVCache(), KVCache()) for _ in "
     "model.blocks].",
     _wrong(cache="shared")),
    ("your logits skip model.final_norm: the decoder is pre-LN, and its last hidden state is "
     "normalised before the head.",
     "compute model.lm_head(model.final_norm(y[:, -1])).",
     _wrong(norm=False)),
    ("your position ids are right at the first step and one too far from the second step on: "
     "the token written at step t - 1 is the decoder's input at step t, at position t.",
     "use the step counter (from 0) as the position, or len(self cache) before the step.",
     _wrong(late_shift=1)),
    ("your rows write eos again after their eos, where every later token must be pad.",
     "masked_fill the finished rows with model.config.pad_id, not eos_id.",
     _wrong(stop="eos-fill")),
    ("your loop stops as soon as any row has written eos, but the other rows are not done: "
     "stop only when every row is.",
     "break when done.all(), not done.any().",
     _wrong(stop="any")),
    ("your cross-attention reads the source's padding: the padding mask is left out of the "
     "blocks' cross-attention, so padded rows attend to pad positions.",
     "pass masks.padding(src_mask) as the cross-attention mask of every block.",
     _wrong(source_mask=False)),
    ("your output keeps bos as its first column; the ids to return are the generated tokens "
     "only.",
     "return the chosen tokens, torch.stack(chosen, 1), or written[:, 1:].",
     _wrong(keep_bos=True)),
    ("your loop runs the encoder at every step: the tokens are right, but the source is read "
     "once per generated token instead of once per generation.",
     "call model.encode(src_ids, src_mask) once, before the loop, and reuse its output.",
     _wrong(encode="every-step")),
]


def _token(cfg, t: int) -> str:
    """A token id as a message shows it: with its name when it is a special token."""
    names = {cfg.pad_id: "pad", cfg.bos_id: "bos", cfg.eos_id: "eos"}
    return f"{names[t]} ({t})" if t in names else str(t)


def _greedy_fallback(attempt: Attempt) -> Message:
    k = attempt.first
    mine, right = attempt.answers[k], attempt.references[k]
    where, cfg = attempt.where(k), attempt.cases[k][0].config
    if mine.ids.shape[0] != right.ids.shape[0]:
        return (f"your ids have {mine.ids.shape[0]} rows on {where}, the batch has "
                f"{right.ids.shape[0]}.",
                "return one row per source: shape (batch, steps).")
    t = min(mine.ids.shape[1], right.ids.shape[1])  # the columns both have
    if not torch.equal(mine.ids[:, :t], right.ids[:, :t]):
        row, col = (int(x) for x in (mine.ids[:, :t] != right.ids[:, :t]).nonzero()[0])
        return (f"your tokens differ from generate(use_cache=False) on {where}: first at row "
                f"{row}, step {col} (yours {_token(cfg, int(mine.ids[row, col]))}, the "
                f"library's {_token(cfg, int(right.ids[row, col]))}).",
                "print your decoder's inputs, positions and masks at that step and compare them "
                "with model.decode's.")
    if mine.ids.shape != right.ids.shape:
        more = mine.ids.shape[1] > right.ids.shape[1]
        return (f"your tokens agree with the library's on the first {t} steps on {where}, but "
                f"you return {mine.ids.shape[1]} steps and the library {right.ids.shape[1]} "
                "(it stops when every row has written eos, or at max_new_tokens).",
                "break right after the step at which done.all() becomes True." if more else
                "keep going until every row is done or max_new_tokens steps are written.")
    if mine.encoder_calls != right.encoder_calls:
        return (f"your tokens are right, but the encoder ran {mine.encoder_calls} times on "
                f"{where}; it should read the source once per generation.",
                "call model.encode once, before the loop, and reuse its output.")
    return (f"your tokens are right, but the cache is not used as it should be on {where}: per "
            f"decoder block your loop projected {list(mine.self_positions)} positions for "
            f"self-attention (one per row and step: {list(right.self_positions)}) and "
            f"{list(mine.cross_positions)} for cross-attention (the source once: "
            f"{list(right.cross_positions)}).",
            "keep one (self, cross) KVCache pair per block for the whole loop and feed only the "
            "newest token.")


@checker
def check_cached_greedy(fn: Callable) -> bool:
    """Check ``fn(model, src_ids, src_mask, max_new_tokens)``: greedy decoding with the KV cache.

    (Lesson 10, §5.) ``fn`` must not call ``model.generate``, ``model(...)`` or
    ``model.decode``. The ids must equal ``model.generate(..., use_cache=False).ids`` on seeded
    small models and padded batches, the encoder must run once, and the counted key projections
    must be those of a real cache: per decoder block one position per row and step for
    self-attention, the source once for cross-attention.
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
        same_mistake=Decoded.same_mistake,
        numbered=True,
    )
    return run(exercise, _counting(fn))


_FORBIDDEN = ("generate", "forward", "decode")  # the loop the exercise asks for, already written
_CALLED = {"generate": "model.generate", "forward": "model(...) (the teacher-forcing forward)",
           "decode": "model.decode"}


def _counted_answer(result, where, *case) -> Decoded:
    returned, counts, used, encoder_calls = result
    if used:
        raise CheckFailed(
            f"your function calls {_CALLED[used[0]]} on {where}: that is the loop this "
            "exercise asks you to write.",
            "build it from the model's parts: model.encode, model.token, model.position, the "
            "blocks in model.blocks, model.final_norm and model.lm_head.",
        )
    return Decoded(_decoded(returned, where), tuple(s.positions for s, _ in counts),
                   tuple(c.positions for _, c in counts), encoder_calls[0])


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
            with counting_kv_projections(model) as counts, _counting_encoder(model) as calls:
                result = fn(model, src_ids.clone(), src_mask.clone(), max_new_tokens)
        finally:
            for name in _FORBIDDEN:
                object.__delattr__(model, name)
        return result, counts, used, calls

    return counted

"""Lesson 10's checkers: check_prefix_lm_mask and check_cached_greedy."""

import re

import pytest
import torch

from encoderlab import masks
from encoderlab.attention import KVCache
from encoderlab.course.checks import CheckFailed, check_cached_greedy, check_prefix_lm_mask


def test_an_independent_answer_passes(capsys):
    def by_formula(n, p):  # key j is visible to query i iff j <= max(i, p - 1)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        return j <= torch.clamp(i, min=p - 1)

    assert check_prefix_lm_mask(by_formula)
    assert "correct on 8 cases" in capsys.readouterr().out


def test_loop_version_like_the_source_passes():
    def loops(n, p):
        m = torch.zeros(n, n, dtype=torch.bool)
        m[:p, :p] = True
        for i in range(p, n):
            m[i, : i + 1] = True
        return m

    assert check_prefix_lm_mask(loops)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda n, p: masks.causal(n), "causal inside the prefix"),
        (lambda n, p: torch.ones(n, n, dtype=torch.bool), "every query see every key"),
        (lambda n, p: masks.prefix_lm(n, min(p + 1, n)), "one position too long"),
        (lambda n, p: masks.prefix_lm(n, max(p - 1, 0)), "one position too short"),
        (lambda n, p: masks.prefix_lm(n, p) | (torch.arange(n)[:, None] < p),
         "prefix queries see the positions after"),
        (lambda n, p: masks.prefix_lm(n, p).float(), "boolean"),
        (lambda n, p: masks.prefix_lm(n, p)[None], "shape"),
    ],
)
def test_wrong_masks_are_named(wrong, message, both_passes):
    assert re.search(message, str(both_passes(check_prefix_lm_mask, wrong)))


def test_unknown_mistake_points_at_a_cell():
    def odd(n, p):
        m = masks.prefix_lm(n, p)
        m[-1, 0] = False
        return m

    with pytest.raises(CheckFailed, match="first is query i="):
        check_prefix_lm_mask(odd)


# --- check_cached_greedy (§5) ---------------------------------------------------------------


def learner_loop(model, src_ids, src_mask, max_new_tokens, *, fresh_cross=False, whole=False,
                 shift=0, first=None, mask_done=True, stop=True, no_cache=False,
                 fresh_self=False, shared=False, none_caches=False, norm=True, pos_from_len=False,
                 fill_eos=False, stop_any=False, cross_mask_on=True, with_bos=False,
                 encode_each_step=False):
    """A learner's loop written from the exercise's text; each keyword is one slip."""
    cfg = model.config
    with torch.no_grad():
        memory = model.encode(src_ids, src_mask)
        cross_mask = masks.padding(src_mask) if cross_mask_on else None
        caches = [(KVCache(), KVCache()) for _ in model.blocks]
        if shared:
            pair = (KVCache(), KVCache())
            caches = [pair for _ in model.blocks]
        inputs = torch.full((src_ids.shape[0], 1), cfg.bos_id if first is None else first)
        done = torch.zeros(src_ids.shape[0], dtype=torch.bool)
        out = []
        for step in range(max_new_tokens):
            if encode_each_step:
                memory = model.encode(src_ids, src_mask)
            if whole or no_cache:
                x, pos = inputs, torch.arange(inputs.shape[1])
            else:
                # pos_from_len: the input count after the step's append, one too many from step 1
                p = inputs.shape[1] if pos_from_len and step > 0 else step
                x, pos = inputs[:, -1:], torch.tensor([p])
            y = model.token(x) + model.position(pos + shift)
            for block, (self_cache, cross_cache) in zip(model.blocks, caches):
                if no_cache:
                    y, _ = block(y, memory, masks.causal(x.shape[1]), cross_mask, None)
                elif none_caches:
                    y, _ = block(y, memory, None, cross_mask, None)
                else:
                    pair = (KVCache() if fresh_self else self_cache,
                            KVCache() if fresh_cross else cross_cache)
                    y, _ = block(y, memory, None, cross_mask, pair)
            h = model.final_norm(y[:, -1]) if norm else y[:, -1]
            token = model.lm_head(h).argmax(-1)
            if mask_done:
                token = token.masked_fill(done, cfg.eos_id if fill_eos else cfg.pad_id)
            out.append(token)
            done = done | (token == cfg.eos_id)
            inputs = torch.cat([inputs, token[:, None]], 1)
            if stop and bool(done.all()):
                break
            if stop_any and bool(done.any()):
                break
        return inputs if with_bos else torch.stack(out, 1)


def test_cached_reference_passes(capsys):
    assert check_cached_greedy(learner_loop)
    assert "correct on 5 cases" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("slip", "message"),
    [
        ({"no_cache": True}, "does not use the cache"),
        ({"fresh_cross": True}, "cross-attention keys and values are recomputed"),
        ({"whole": True}, "duplicated keys"),
        ({"shift": 1}, "position ids are one too far"),
        ({"first": 0}, "does not start from bos"),
        ({"mask_done": False}, "keep writing after their eos"),
        ({"stop": False}, "does not stop when every row"),
        ({"fresh_self": True}, "self-attention history is not kept: the first token is right"),
        ({"none_caches": True}, "blocks get no caches"),
        ({"shared": True}, "share one pair of caches"),
        ({"norm": False}, "skip model.final_norm"),
        ({"pos_from_len": True}, "right at the first step and one too far from the second"),
        ({"fill_eos": True}, "write eos again after their eos"),
        ({"stop_any": True}, "stops as soon as any row has written eos"),
        ({"cross_mask_on": False}, "reads the source's padding"),
        ({"with_bos": True}, "keeps bos as its first column"),
        ({"encode_each_step": True}, "runs the encoder at every step"),
    ],
)
def test_cached_mistakes_are_named(slip, message, both_passes):
    def wrong(model, src_ids, src_mask, max_new_tokens):
        return learner_loop(model, src_ids, src_mask, max_new_tokens, **slip)

    assert re.search(message, str(both_passes(check_cached_greedy, wrong)))


@pytest.mark.parametrize("use_cache", [True, False])
def test_calling_generate_is_refused(use_cache):
    def with_library(model, src_ids, src_mask, max_new_tokens):
        return model.generate(src_ids, src_mask, max_new_tokens=max_new_tokens,
                              use_cache=use_cache).ids

    with pytest.raises(CheckFailed, match="calls model.generate"):
        check_cached_greedy(with_library)


def test_calling_decode_is_refused():
    def with_decode(model, src_ids, src_mask, max_new_tokens):
        memory = model.encode(src_ids, src_mask)
        caches = [(KVCache(), KVCache()) for _ in model.blocks]
        ids = torch.full((src_ids.shape[0], 1), model.config.bos_id)
        for _ in range(max_new_tokens):
            logits, _ = model.decode(ids[:, -1:], memory, src_mask, caches)
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
        return ids[:, 1:]

    with pytest.raises(CheckFailed, match="calls model.decode"):
        check_cached_greedy(with_decode)


def test_calling_the_model_is_refused_by_its_name():
    def teacher_forced(model, src_ids, src_mask, max_new_tokens):
        tgt = torch.full((src_ids.shape[0], 1), model.config.bos_id)
        for _ in range(max_new_tokens):
            tgt = torch.cat([tgt, model(src_ids, tgt, src_mask)[:, -1:].argmax(-1)], 1)
        return tgt[:, 1:]

    failure = str(pytest.raises(CheckFailed, check_cached_greedy, teacher_forced).value)
    assert "calls model(...) (the teacher-forcing forward)" in failure
    assert "model.decode" not in failure


def test_the_model_is_left_as_it_was():
    from encoderlab.course.checks.l10 import _counting, _greedy_cases

    model, src_ids, src_mask, steps = _greedy_cases()[1]
    _, _, used, calls = _counting(lambda m, *a: m.generate(*a).ids)(model, src_ids, src_mask,
                                                                    steps)
    assert used[0] == "generate" and "decode" in used and calls == [1]
    assert not {"generate", "forward", "decode"} & set(vars(model))

    def fails(m, *a):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _counting(fails)(model, src_ids, src_mask, steps)
    assert not {"generate", "forward", "decode"} & set(vars(model))
    assert not model.encoder._forward_hooks  # the encoder's counter is removed too


def test_cached_unknown_mistake_and_bad_returns():
    def off_at_the_end(model, src_ids, src_mask, max_new_tokens):
        ids = learner_loop(model, src_ids, src_mask, max_new_tokens)
        ids[:, -1] = 3
        return ids

    with pytest.raises(CheckFailed, match="tokens differ from generate"):
        check_cached_greedy(off_at_the_end)

    def bos_for_pad(model, src_ids, src_mask, max_new_tokens):  # an unnamed slip: bos as pad
        ids = learner_loop(model, src_ids, src_mask, max_new_tokens)
        return ids.masked_fill(ids == model.config.pad_id, model.config.bos_id)

    failure = check_fails_with_fix(bos_for_pad)
    assert "yours bos (1), the library's pad (0)" in failure

    def one_step_short(model, src_ids, src_mask, max_new_tokens):  # compared column by column
        return learner_loop(model, src_ids, src_mask, max_new_tokens)[:, :-1]

    failure = check_fails_with_fix(one_step_short)
    assert re.search(r"agree with the library's on the first \d+ steps", failure)
    with pytest.raises(CheckFailed, match="dtype torch.float32 .*, not the generated ids"):
        check_cached_greedy(lambda *a: learner_loop(*a).float())
    with pytest.raises(CheckFailed, match="raised ValueError"):
        check_cached_greedy(lambda *a: (_ for _ in ()).throw(ValueError("no")))


def check_fails_with_fix(fn) -> str:
    """The hint=True failure of check_cached_greedy(fn): every fallback gives a fix line."""
    with pytest.raises(CheckFailed) as failure:
        check_cached_greedy(fn, hint=True)
    assert failure.value.fix and "\nFix: " in str(failure.value)
    return str(failure.value)


def test_the_tokens_right_but_the_cache_wrong_fallback_has_a_fix():
    def no_cache_and_extra_encodes(model, src_ids, src_mask, max_new_tokens):  # two slips at
        cfg = model.config  # once: no cache (the whole prefix each step), the encoder run again
        with torch.no_grad():
            memory = model.encode(src_ids, src_mask)
            inputs = torch.full((src_ids.shape[0], 1), cfg.bos_id)
            done = torch.zeros(src_ids.shape[0], dtype=torch.bool)
            out = []
            for step in range(max_new_tokens):
                y = model.token(inputs) + model.position(torch.arange(inputs.shape[1]))
                for block in model.blocks:
                    y, _ = block(y, memory, masks.causal(inputs.shape[1]),
                                 masks.padding(src_mask), None)
                if step % 2:  # and a wasted extra encoder call
                    model.encode(src_ids, src_mask)
                token = model.lm_head(model.final_norm(y[:, -1])).argmax(-1)
                token = token.masked_fill(done, cfg.pad_id)
                out.append(token)
                done = done | (token == cfg.eos_id)
                inputs = torch.cat([inputs, token[:, None]], 1)
                if bool(done.all()):
                    break
            return torch.stack(out, 1)

    assert "the encoder ran" in check_fails_with_fix(no_cache_and_extra_encodes)

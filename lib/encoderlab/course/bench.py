"""Measurements the lessons show: FLOPs by formula and paired timings (Lesson 3, §4; Lesson 9).

Timings on a shared machine are noisy, so two things are always timed side by
side, interleaved, and a *ratio* is what we report (the timing functions are in
:mod:`encoderlab.course.timing`; the lessons reach them here as ``bench.time_pair`` etc.).
``python -m encoderlab bench`` prints the course's benchmark table; on a
machine with CUDA and Triton it adds the GPU rows (SDPA and the course's Triton
kernel, full vs causal), and ``--gpu-record FILE`` writes them, with the device
and versions, to the JSON file that the lessons show on machines without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import itertools
import json
import math
import platform
import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from torch.nn import functional as F

from encoderlab import masks, tiled
from encoderlab.course.timing import (
    PairTiming,
    interleaved_samples,
    paired_ratios,
    spread,
    time_interleaved,
    time_pair,
)

__all__ = [
    "attention_flops",
    "environment",
    "bench_encoder_vs_reference",
    "bench_causal_skip",
    "structural_masks",
    "bench_masks",
    "every_tile_partial",
    "gpu_checks",
    "fastest_gpu_config",
    "bench_gpu_attention",
    "bench_gpu_masks",
    "gpu_mask_table",
    "gpu_attention_record",
    "recorded_gpu_results",
    "gpu_results_table",
    "main",
    # from encoderlab.course.timing, under this module's name too
    "PairTiming", "time_pair", "interleaved_samples", "time_interleaved", "spread", "paired_ratios",
]


def attention_flops(n: int, d_k: int, n_heads: int = 1, causal: bool = False) -> int:
    """Multiply-adds x 2 of QK^T and AV for one layer (Lesson 3, §4).

    Full attention computes all n^2 scores; a causal kernel that skips the
    upper triangle computes n(n+1)/2 of them. The ratio tends to 2.
    """
    pairs = n * (n + 1) // 2 if causal else n * n  # (i, j) pairs whose score is computed
    return 2 * 2 * pairs * d_k * n_heads  # 2 matmuls (QK^T, AV), 2 FLOPs per multiply-add


def environment() -> dict:
    """Device and versions to store next to every measurement."""
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "device": "cpu",
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    return env


def bench_encoder_vs_reference(
    batch: int = 8, n: int = 128, pad_from: int = 96, repeats: int = 9
) -> dict[str, PairTiming]:
    """Forward time of the library's MiniLM over the reference BertModel's, same weights.

    Two batches of ``batch`` x ``n`` random tokens, each timed side by side with the
    reference: ``"unpadded"`` (every token real) and ``"padded"`` (the second half of the
    rows are [PAD] from position ``pad_from`` on, so the attention mask has work to do).
    """
    from transformers import BertModel  # the reference; needed only for this comparison

    from encoderlab.pretrained import find_weights, load_minilm

    _, model = load_minilm()
    reference = BertModel.from_pretrained(str(find_weights())).eval()
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, 30000, (batch, n), generator=g)  # (b, n)
    real = torch.ones_like(input_ids)  # (b, n): 1 = real token
    padded = real.clone()
    padded[batch // 2:, pad_from:] = 0  # half the rows end in [PAD]s
    timings = {}
    with torch.inference_mode():
        for name, attention_mask in (("unpadded", real), ("padded", padded)):
            ids = input_ids * attention_mask  # [PAD] has id 0
            timings[name] = time_pair(
                lambda ids=ids, am=attention_mask: model(ids, attention_mask=am),
                lambda ids=ids, am=attention_mask: reference(ids, attention_mask=am),
                repeats=repeats,
                names=("encoderlab", "transformers"),
            )
    return timings


def _qkv(n: int, n_heads: int, d_k: int, dtype=torch.float32, device="cpu"):
    g = torch.Generator(device=device).manual_seed(0)
    shape = (1, n_heads, n, d_k)  # (b, h, n, d_k)
    return [torch.randn(shape, generator=g, dtype=dtype, device=device) for _ in range(3)]


def bench_causal_skip(
    n: int = 4096, block_size: int = 128, n_heads: int = 4, d_k: int = 64, repeats: int = 5
) -> dict:
    """Full vs causal: the tiled loop (skip vs no skip), torch's SDPA, and tiled over SDPA."""
    q, k, v = _qkv(n, n_heads, d_k)
    with torch.inference_mode():
        skip = time_pair(
            lambda: tiled.tiled_attention(q, k, v, block_size=block_size),
            lambda: tiled.tiled_attention(q, k, v, causal=True, block_size=block_size),
            repeats=repeats,
            names=("tiled full", "tiled causal"),
        )
        sdpa = time_pair(
            lambda: F.scaled_dot_product_attention(q, k, v),
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            repeats=repeats,
            names=("sdpa full", "sdpa causal"),
        )
        versus = time_pair(
            lambda: tiled.tiled_attention(q, k, v, causal=True, block_size=block_size),
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            repeats=repeats,
            names=("tiled causal", "sdpa causal"),
        )
    ideal = tiled.tile_ratio_causal(n, block_size)
    return {
        "n": n,
        "block_size": block_size,
        "tiles_per_side": math.ceil(n / block_size),
        "ideal_ratio": ideal,
        "tiled_speedup": skip.ratio,
        "tiled_fraction_of_ideal": skip.ratio / ideal,
        "sdpa_speedup": sdpa.ratio,
        "tiled_over_sdpa_causal": versus.ratio,
        "timings": [asdict(t) for t in (skip, sdpa, versus)],
    }


def structural_masks(n: int, window: int = 256, n_docs: int = 4) -> dict[str, torch.Tensor]:
    """The (n, n) masks Lesson 9 compares, each a boolean tensor (True = may attend)."""
    doc_ids = torch.arange(n) * n_docs // n  # n_docs documents of equal length, packed
    return {
        "full": masks.bidirectional(n),
        "causal": masks.causal(n),
        "sliding window": masks.sliding_window(n, window),
        "document": masks.document(doc_ids),
        "prefix-LM": masks.prefix_lm(n, n // 4),
    }


def every_tile_partial(n: int, block_size: int = 128) -> torch.Tensor:
    """An (n, n) mask that hides one entry of every tile, the first (Lesson 9, §4).

    Every tile is then PARTIAL: tiled attention computes all of them, as with no mask, and
    masks each one. Timed against an all-True mask (every tile FULL), it measures what
    masking costs per tile.
    """
    mask = torch.ones(n, n, dtype=torch.bool)  # (n, n)
    mask[::block_size, ::block_size] = False  # entry (r0, c0) of every tile; no row goes blind
    return mask


def bench_masks(
    n: int = 2048,
    block_size: int = 128,
    n_heads: int = 4,
    d_k: int = 64,
    repeats: int = 5,
    window: int = 256,
    n_docs: int = 4,
) -> list[dict]:
    """For each mask of :func:`structural_masks`, then :func:`every_tile_partial`: the fraction
    of tiles computed, and the time of tiled attention with that mask over the time of tiled
    attention with no mask (Lesson 9, §4).

    Every mask and the unmasked reference are timed in turns, in one interleaved run
    (:func:`interleaved_samples`); ``time_fraction`` is the median of the per-round
    ratios time(mask) / time(no mask), and ``time_fraction_low`` / ``_high`` their
    spread. The "full" row passes an all-True mask: its time fraction shows what the
    mask handling alone costs, and how noisy the machine is. The "every tile partial" row
    computes every tile, as "full" does, but masks each one; its ``partial_over_full`` is the
    (median, lowest, highest) of the per-round ratios of its time to the "full" row's: what a
    partial tile costs relative to a full one.

    ``predicted_fraction`` is what the two calibration rows predict for a mask: the mask's
    fixed cost (full - 1, the all-True row over no mask) plus its full tiles at the cost of
    a full tile, plus its partial tiles at the cost of a partial one, p - (full - 1) with p
    the "every tile partial" row, each as a fraction of the T^2 tiles.
    """
    q, k, v = _qkv(n, n_heads, d_k)
    structural = structural_masks(n, window=window, n_docs=n_docs)
    structural["every tile partial"] = every_tile_partial(n, block_size)
    calls = {"no mask": lambda: tiled.tiled_attention(q, k, v, block_size=block_size)}
    for name, mask in structural.items():
        calls[name] = lambda m=mask: tiled.tiled_attention(q, k, v, mask=m, block_size=block_size)
    with torch.inference_mode():
        samples = interleaved_samples(calls, repeats=repeats, warmup=1)
    rows = []
    for name, mask in structural.items():
        counts = tiled.tile_counts(n, block_size=block_size, mask=mask)
        fraction, low, high = spread(paired_ratios(samples[name], samples["no mask"]))
        rows.append(
            {
                "mask": name,
                "tile_fraction": counts["fraction"],
                "full_tiles": counts["full"],
                "partial_tiles": counts["partial"],
                "total_tiles": counts["total"],
                "time_fraction": fraction,  # median over rounds of time(mask) / time(no mask)
                "time_fraction_low": low,
                "time_fraction_high": high,
                "time_ms": statistics.median(samples[name]) * 1e3,
                "no_mask_ms": statistics.median(samples["no mask"]) * 1e3,
            }
        )
    by_name = {row["mask"]: row for row in rows}
    fixed = by_name["full"]["time_fraction"] - 1  # reading the mask and making the plan
    partial_tile = by_name["every tile partial"]["time_fraction"] - fixed  # per tile, vs full
    for row in rows:
        row["predicted_fraction"] = fixed + (
            row["full_tiles"] + partial_tile * row["partial_tiles"]) / row["total_tiles"]
    by_name["every tile partial"]["partial_over_full"] = spread(
        paired_ratios(samples["every tile partial"], samples["full"]))
    return rows


TARGETS = {
    "encoder_over_reference": ("<=", 1.0),
    "tiled_fraction_of_ideal": (">=", 0.95),
    "tiled_over_sdpa_causal": ("<=", 2.0),
}


def _verdict(name: str, value: float) -> str:
    op, target = TARGETS[name]
    ok = value <= target if op == "<=" else value >= target
    return f"{'meets' if ok else 'MISSES'} target {op} {target}"


# --- The GPU rows (Lesson 3, §4; Lesson 9, §8) -------------------------------------------------


def _require_gpu() -> None:
    if not tiled.triton_available():
        raise ValueError(
            "the GPU rows need a CUDA device and Triton (pip install triton); this machine has "
            f"CUDA: {torch.cuda.is_available()}. The CPU rows are in `python -m encoderlab bench`."
        )


GPU_SHAPE = {"batch": 1, "heads": 16, "head_dim": 64, "dtype": "float16"}
GPU_NS = (1024, 2048, 4096, 8192, 16384)
# Tile sizes and warps per program that the GPU rows try: the faster on the GPU at hand is
# timed against SDPA (and recorded). Larger tiles need more warps to hold their scores.
GPU_CONFIGS = ({"block": 64, "num_warps": 4}, {"block": 128, "num_warps": 8})


def gpu_checks(ns=(1000, 2048), tolerance: float = 5e-3, configs=GPU_CONFIGS) -> list[dict]:
    """The Triton kernel against torch's SDPA on the GPU, float16, for every mask (Lesson 9).

    Ragged and whole-tile lengths, two sequences of four heads, each of ``configs``.
    Returns one row per case with the largest absolute difference; raises ValueError
    if any exceeds ``tolerance`` (float16 rounding of outputs of size about 1 is ~5e-4).
    """
    _require_gpu()
    from encoderlab.kernels.tiled_triton import (
        triton_attention,  # triton is there: _require_gpu checked
    )

    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for n in ns:
        q, k, v = (torch.randn(2, 4, n, 64, generator=g, device="cuda", dtype=torch.float16)
                   for _ in range(3))  # (b, h, n, d): two sequences of four heads
        lengths = torch.tensor([n, n - 300])  # the second sequence ends in 300 [PAD]s
        cases = {"full": None, "causal": "causal",
                 "padding": masks.padding(torch.arange(n)[None, :] < lengths[:, None]).cuda()}
        cases.update({name: m.cuda() for name, m in structural_masks(n).items()
                      if name not in ("full", "causal")})
        for (name, mask), config in itertools.product(cases.items(), configs):
            with torch.inference_mode():
                out = triton_attention(q, k, v, mask=mask, **config)
                if isinstance(mask, str):
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            error = (out.float() - ref.float()).abs().max().item()
            rows.append({"mask": name, "n": n, **config, "max_abs_difference": error})
            if not error <= tolerance:  # also catches NaN
                raise ValueError(
                    f"the Triton kernel ({config}) differs from torch's SDPA by {error:.2e} > "
                    f"{tolerance:g} for the {name} mask at n={n}: do not record its timings."
                )
    return rows


def _gpu_calls(q, k, v, config: dict, triton_attention) -> dict[str, Callable[[], object]]:
    """The four calls the GPU rows time, each on the same (b, h, n, d) q, k, v."""
    return {
        "sdpa_full": lambda: F.scaled_dot_product_attention(q, k, v),
        "sdpa_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "triton_full": lambda: triton_attention(q, k, v, **config),
        "triton_causal": lambda: triton_attention(q, k, v, mask="causal", **config),
    }


def fastest_gpu_config(configs=GPU_CONFIGS, n: int = 4096) -> dict:
    """The one of ``configs`` whose full plus causal time is least on this GPU (Lesson 9, §8)."""
    _require_gpu()
    from encoderlab.kernels.tiled_triton import triton_attention

    q, k, v = _qkv(n, GPU_SHAPE["heads"], GPU_SHAPE["head_dim"], torch.float16, "cuda")
    calls = {}
    for i, config in enumerate(configs):
        full_and_causal = _gpu_calls(q, k, v, config, triton_attention)
        calls[str(i)] = lambda c=full_and_causal: (c["triton_full"](), c["triton_causal"]())
    with torch.inference_mode():
        t = time_interleaved(calls, repeats=5, warmup=2, inner=4, sync=torch.cuda.synchronize)
    return configs[int(min(t, key=t.get))]


def bench_gpu_attention(
    ns=GPU_NS, repeats: int = 10, warmup: int = 3, config: dict | None = None
) -> list[dict]:
    """Full vs causal on the GPU, side by side: torch's SDPA and the Triton kernel (Lesson 9, §8).

    float16, one sequence of 16 heads of 64 (``GPU_SHAPE``), the kernel with
    ``config`` (block, num_warps; the fastest of ``GPU_CONFIGS`` if None). For each
    n the four calls are timed in turns in one run; the rows hold the medians (ms),
    each kernel's speedup full / causal next to the tile-count ratio 2T/(T+1), and
    the Triton kernel's time over SDPA's.
    """
    _require_gpu()
    from encoderlab.kernels.tiled_triton import triton_attention

    config = config or fastest_gpu_config()
    rows = []
    for n in ns:
        q, k, v = _qkv(n, GPU_SHAPE["heads"], GPU_SHAPE["head_dim"], torch.float16, "cuda")
        inner = max(1, 16384 // n)  # about the same work per sample at every n
        with torch.inference_mode():
            t = time_interleaved(_gpu_calls(q, k, v, config, triton_attention), repeats=repeats,
                                 warmup=warmup, inner=inner, sync=torch.cuda.synchronize)
        rows.append({
            "n": n,
            "tile_ratio": tiled.tile_ratio_causal(n, config["block"]),
            **{f"{name}_ms": seconds * 1e3 for name, seconds in t.items()},
            "sdpa_speedup": t["sdpa_full"] / t["sdpa_causal"],
            "triton_speedup": t["triton_full"] / t["triton_causal"],
            "triton_over_sdpa_full": t["triton_full"] / t["sdpa_full"],
            "triton_over_sdpa_causal": t["triton_causal"] / t["sdpa_causal"],
        })
    return rows


GPU_MASK_N = 8192  # the length at which the GPU rows time every mask (Lesson 9, §8)


def _mask_calls(n: int, q, k, v, config: dict, triton_attention) -> dict[str, Callable]:
    """Two calls per mask of :func:`structural_masks`: the Triton kernel and torch's SDPA."""
    calls = {}
    for name, mask in structural_masks(n).items():
        if name == "full":
            kernel_mask, sdpa_kwargs = None, {}
        elif name == "causal":
            kernel_mask, sdpa_kwargs = "causal", {"is_causal": True}
        else:
            kernel_mask = mask.to(q.device)
            sdpa_kwargs = {"attn_mask": kernel_mask}
        calls[f"triton|{name}"] = (
            lambda m=kernel_mask: triton_attention(q, k, v, mask=m, **config))
        calls[f"sdpa|{name}"] = (
            lambda kw=sdpa_kwargs: F.scaled_dot_product_attention(q, k, v, **kw))
    return calls


def bench_gpu_masks(n: int = GPU_MASK_N, repeats: int = 10, warmup: int = 3,
                    config: dict | None = None, device: str = "cuda",
                    heads: int | None = None) -> list[dict]:
    """Every mask the Triton kernel supports, timed on the GPU (Lesson 9, §8).

    For each mask of :func:`structural_masks` (full, causal, sliding window, document,
    prefix-LM) the kernel and torch's SDPA run on the same float16 (b, h, n, d) inputs, all ten
    calls in turns, ``repeats`` rounds. One row per mask: the fraction of tiles the kernel
    computes (its tile plan, with ``config``'s block), each kernel's median time (ms) and its
    time over its own full-attention time, the median and range of the per-round ratios.
    ``device="cpu"`` runs the same code under Triton's interpreter (TRITON_INTERPRET=1), for
    tests on tiny sizes only.
    """
    from encoderlab.kernels import tiled_triton

    if device == "cuda":
        _require_gpu()
    elif not tiled_triton.interpreted():
        raise ValueError("bench_gpu_masks on the CPU needs Triton's interpreter: set "
                         "TRITON_INTERPRET=1 before triton is first imported.")
    config = config or fastest_gpu_config()
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v = _qkv(n, heads or GPU_SHAPE["heads"], GPU_SHAPE["head_dim"], dtype, device)
    sync = torch.cuda.synchronize if device == "cuda" else None
    with torch.inference_mode():
        samples = interleaved_samples(
            _mask_calls(n, q, k, v, config, tiled_triton.triton_attention),
            repeats=repeats, warmup=warmup, sync=sync)
    rows = []
    for name, mask in structural_masks(n).items():
        counts = tiled.tile_counts(n, block_size=config["block"], mask=mask)
        row = {"mask": name, "n": n, "block": config["block"],
               "tile_fraction": counts["fraction"]}
        for kernel in ("triton", "sdpa"):
            ratio = spread(paired_ratios(samples[f"{kernel}|{name}"], samples[f"{kernel}|full"]))
            row[f"{kernel}_ms"] = spread(samples[f"{kernel}|{name}"])[0] * 1e3
            row[f"{kernel}_fraction"], row[f"{kernel}_fraction_low"], \
                row[f"{kernel}_fraction_high"] = ratio
        rows.append(row)
    return rows


def gpu_mask_table(records: list[dict]) -> str:
    """The per-mask GPU rows of recorded runs as text (Lesson 9, §8); records without them
    (recorded before the masks were timed) are named and skipped."""
    with_masks = [r for r in records if r.get("mask_rows")]
    if not with_masks:
        return ("No GPU run with per-mask timings is recorded yet (figures/data/ holds no "
                "gpu-attention record with mask_rows).")
    lines = []
    for r in with_masks:
        first = r["mask_rows"][0]
        lines.append(f"{r.get('device', '?')} · torch {r.get('torch', '?')} · Triton "
                     f"{r.get('triton', '?')} · {r.get('date', 'this run')} · "
                     f"n = {first['n']}, tiles of {first['block']}")
        lines.append(f"{'mask':<16}{'tiles':>7}{'Triton (ms)':>13}{'/ full [range]':>21}"
                     f"{'SDPA (ms)':>11}{'/ full [range]':>21}")
        for row in r["mask_rows"]:
            lines.append(
                f"{row['mask']:<16}{row['tile_fraction']:>7.3f}{row['triton_ms']:>13.3f}"
                + f"{row['triton_fraction']:.2f} [{row['triton_fraction_low']:.2f}, "
                  f"{row['triton_fraction_high']:.2f}]".rjust(21)
                + f"{row['sdpa_ms']:>11.3f}"
                + f"{row['sdpa_fraction']:.2f} [{row['sdpa_fraction_low']:.2f}, "
                  f"{row['sdpa_fraction_high']:.2f}]".rjust(21))
    return "\n".join(lines)


def gpu_attention_record(ns=GPU_NS, repeats: int = 10) -> dict:
    """Everything one GPU run measures, with the device and versions: the JSON that
    ``python -m encoderlab bench --gpu-record FILE`` writes (Lesson 9, §8)."""
    _require_gpu()
    checks = gpu_checks()  # first: a wrong kernel's timings are worth nothing
    config = fastest_gpu_config()
    return {
        **_gpu_environment(),
        **config,
        "checks": checks,
        "rows": bench_gpu_attention(ns, repeats=repeats, config=config),
        "mask_rows": bench_gpu_masks(repeats=repeats, config=config),
        "targets": {name: list(GPU_TARGETS[name]) for name in GPU_TARGETS},
    }


def _gpu_environment() -> dict:
    """What a GPU record says about where and how it was measured."""
    return {
        "kind": "gpu-attention",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": importlib.metadata.version("triton"),
        "cuda": torch.version.cuda,
        "date": datetime.date.today().isoformat(),
        **GPU_SHAPE,
    }


GPU_TARGETS = {
    "speedup_at_8192_and_more": (">=", 1.85),  # full / causal, both kernels, n >= 8192
    "triton_over_sdpa": ("<=", 1.2),  # the Triton kernel's time over SDPA's
}
_RECORD_KEYS = ("device", "torch", "triton", "cuda", "date", "rows")
_ROW_KEYS = ("n", "tile_ratio", "sdpa_full_ms", "sdpa_causal_ms", "triton_full_ms",
             "triton_causal_ms", "sdpa_speedup", "triton_speedup", "triton_over_sdpa_full",
             "triton_over_sdpa_causal")


def recorded_gpu_results(folder="figures/data") -> list[dict]:
    """The GPU runs recorded in ``folder`` (``*.json`` of kind "gpu-attention"), oldest first
    (Lesson 3, §4; Lesson 9, §8). An empty list when there are none or no such folder."""
    records = []
    for path in sorted(Path(folder).glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("kind") != "gpu-attention":
            continue  # another kind of recorded measurement
        missing = [key for key in _RECORD_KEYS if key not in data]
        missing += [f"rows[{i}].{key}" for i, row in enumerate(data.get("rows", []))
                    for key in _ROW_KEYS if key not in row]
        if missing:
            raise ValueError(f"{path} is a gpu-attention record without {', '.join(missing)}. "
                             "Record it again with `python -m encoderlab bench --gpu-record`.")
        records.append({**data, "file": path.name})
    return sorted(records, key=lambda r: r["date"])


def gpu_results_table(records: list[dict]) -> str:
    """GPU runs as text: one header line with the device and versions, then one line per n."""
    if not records:
        return "No GPU results are recorded yet (figures/data/ holds no gpu-attention record)."
    lines = []
    for r in records:
        lines.append(f"{r['device']} · torch {r['torch']} · Triton {r['triton']} · "
                     f"CUDA {r['cuda']} · {r['date']} · {r.get('dtype', 'float16')}, "
                     f"{r.get('heads', '?')} heads of {r.get('head_dim', '?')}, "
                     f"Triton tiles of {r.get('block', '?')}")
        lines.append(f"{'':>6}{'SDPA (ms)':>20}{'Triton (ms)':>20}{'full / causal':>21}"
                     f"{'Triton / SDPA':>14}")
        lines.append(f"{'n':>6}{'full':>10}{'causal':>10}{'full':>10}{'causal':>10}"
                     f"{'SDPA':>7}{'Triton':>7}{'tiles':>7}{'full':>7}{'causal':>7}")
        for row in r["rows"]:
            lines.append(
                f"{row['n']:>6}{row['sdpa_full_ms']:>10.3f}{row['sdpa_causal_ms']:>10.3f}"
                f"{row['triton_full_ms']:>10.3f}{row['triton_causal_ms']:>10.3f}"
                f"{row['sdpa_speedup']:>7.2f}{row['triton_speedup']:>7.2f}{row['tile_ratio']:>7.2f}"
                f"{row['triton_over_sdpa_full']:>7.2f}{row['triton_over_sdpa_causal']:>7.2f}"
            )
    return "\n".join(lines)


def _gpu_verdicts(rows: list[dict]) -> list[str]:
    """The GPU rows next to their targets, in words."""
    long = [row for row in rows if row["n"] >= 8192]
    lines = []
    for kernel in ("sdpa", "triton"):
        if long:
            worst = min(row[f"{kernel}_speedup"] for row in long)
            lines.append(f"{kernel:<6} full / causal at n >= 8192: lowest {worst:.2f}x, "
                         f"{_verdict_gpu('speedup_at_8192_and_more', worst)}")
    worst = max(max(row["triton_over_sdpa_full"], row["triton_over_sdpa_causal"]) for row in rows)
    lines.append(f"Triton / SDPA time, worst over n and masks: {worst:.2f}x, "
                 f"{_verdict_gpu('triton_over_sdpa', worst)}")
    return lines


def _verdict_gpu(name: str, value: float) -> str:
    op, target = GPU_TARGETS[name]
    ok = value <= target if op == "<=" else value >= target
    return f"{'meets' if ok else 'MISSES'} target {op} {target}"


def write_gpu_record(path) -> dict:
    """Run :func:`gpu_attention_record` and write it to ``path`` as JSON; print the table."""
    record = gpu_attention_record()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(gpu_results_table([record]))
    print(gpu_mask_table([record]))
    print("\n".join(_gpu_verdicts(record["rows"])))
    print(f"checks: {len(record['checks'])} cases, largest difference from SDPA "
          f"{max(c['max_abs_difference'] for c in record['checks']):.2e}")
    print(f"written: {path}")
    return record


def _print_rows(rows: list[tuple[str, str, str, str]]) -> None:
    """The benchmark table: name, value, detail, verdict, one row per line."""
    if not rows:
        return
    width = max(len(row[0]) for row in rows)
    for name, detail, value, verdict in rows:
        print(f"{name:<{width}}  {value:>9}  {detail:<36} {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m encoderlab bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="sequence length for the skip test")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-reference", action="store_true", help="skip the transformers run")
    parser.add_argument("--encoder-only", action="store_true",
                        help="only the rows of the library's encoder against the reference")
    parser.add_argument("--gpu-record", metavar="FILE",
                        help="on a GPU: check the Triton kernel, time the GPU rows and write "
                        "them with device and versions to FILE (e.g. figures/data/"
                        "gpu-attention.json); nothing else runs")
    args = parser.parse_args(argv)

    if args.gpu_record:
        if not tiled.triton_available():
            print("--gpu-record needs a CUDA device and Triton (pip install triton); "
                  f"CUDA available: {torch.cuda.is_available()}.")
            return 2
        write_gpu_record(args.gpu_record)
        return 0

    env = environment()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    rows = []
    if not args.no_reference:
        timings = bench_encoder_vs_reference(repeats=args.repeats)
        for name, t in timings.items():
            ratio, low, high = t.paired  # per-round ratios: a busy moment hits both sides
            rows.append(
                (
                    f"MiniLM forward, 8 x 128 tokens, {name}: encoderlab / transformers",
                    f"{t.median_a_s * 1e3:.1f} / {t.median_b_s * 1e3:.1f} ms, "
                    f"rounds {low:.2f}-{high:.2f}",
                    f"{ratio:.3f}x",
                    _verdict("encoder_over_reference", ratio),
                )
            )
    if args.encoder_only:
        _print_rows(rows)
        return 0
    r = bench_causal_skip(n=args.n, repeats=args.repeats)
    rows += [
        (
            f"tiled full / tiled causal-skip, n={r['n']}, block {r['block_size']}",
            f"ideal 2T/(T+1) = {r['ideal_ratio']:.3f}",
            f"{r['tiled_speedup']:.3f}x",
            "",
        ),
        (
            "  as a fraction of the tile-count ratio",
            "",
            f"{r['tiled_fraction_of_ideal']:.3f}",
            _verdict("tiled_fraction_of_ideal", r["tiled_fraction_of_ideal"]),
        ),
        ("SDPA full / SDPA is_causal", "", f"{r['sdpa_speedup']:.3f}x", ""),
        (
            "tiled causal / SDPA is_causal",
            "",
            f"{r['tiled_over_sdpa_causal']:.3f}x",
            _verdict("tiled_over_sdpa_causal", r["tiled_over_sdpa_causal"]),
        ),
    ]
    _print_rows(rows)

    n_masks = min(args.n, 2048)
    print(f"\ntiled attention by mask, n={n_masks}, block 128 (time relative to no mask; "
          "median and range over rounds):")
    print(f"{'mask':<16} {'tiles computed':>14} {'time':>8} {'range':>13} {'ms':>8}")
    for row in bench_masks(n=n_masks, repeats=args.repeats):
        print(
            f"{row['mask']:<16} {row['tile_fraction']:>14.3f} {row['time_fraction']:>8.3f} "
            f"{row['time_fraction_low']:>6.3f}-{row['time_fraction_high']:<6.3f} "
            f"{row['time_ms']:>8.1f}"
        )

    if not tiled.triton_available():
        print("\nThe GPU rows (SDPA and the Triton kernel, full vs causal, float16) need a CUDA "
              "device and Triton; recorded ones are in figures/data/.")
        return 0
    print("\nGPU rows (to check the kernel and record them: --gpu-record FILE):")
    config = fastest_gpu_config()
    rows = bench_gpu_attention(repeats=args.repeats, config=config)
    mask_rows = bench_gpu_masks(repeats=args.repeats, config=config)
    print(gpu_results_table([{**_gpu_environment(), **config, "rows": rows}]))
    print(gpu_mask_table([{**_gpu_environment(), "rows": rows, "mask_rows": mask_rows}]))
    print("\n".join(_gpu_verdicts(rows)))
    return 0

"""Measurements the lessons show: FLOPs by formula and paired timings (Lesson 3, §4; Lesson 9).

Timings on a shared machine are noisy, so two things are always timed side by
side, interleaved, and a *ratio* is what we report (the timing functions are in
:mod:`encoderlab.course.timing`; the lessons reach them here as ``bench.time_pair`` etc.).
``python -m encoderlab bench`` prints the course's benchmark table; on a
machine with CUDA and Triton it adds the GPU rows (SDPA and the course's Triton
kernel, full vs causal), and ``--gpu-record FILE`` writes them, with the device
and versions, to the JSON file that the lessons show on machines without a GPU.
The GPU rows live in :mod:`encoderlab.course.bench_gpu`; the lessons reach them
here too, as ``bench.gpu_mode`` etc.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
from dataclasses import asdict

import torch
from torch.nn import functional as F

from encoderlab import tiled
from encoderlab.course import bench_gpu
from encoderlab.course.timing import (
    PairTiming,
    interleaved_samples,
    paired_ratios,
    random_qkv,
    spread,
    structural_masks,
    time_interleaved,
    time_pair,
)
from encoderlab.lessons.l03_cost import block_ratio, sdpa_cpu_blocks
from encoderlab.validate import check_positive_int

__all__ = [
    "attention_flops",
    "environment",
    "bench_encoder_vs_reference",
    "bench_causal_skip",
    "structural_masks",
    "bench_masks",
    "mask_gpu_rows",
    "every_tile_partial",
    "cost_table",
    "time_full_and_causal",
    "timing_table",
    "main",
    # from encoderlab.course.timing, under this module's name too
    "PairTiming", "time_pair", "interleaved_samples", "time_interleaved", "spread", "paired_ratios",
]
# The GPU rows' names (bench_gpu's __all__, and two helpers tests use) are found here too: see
# __getattr__ at the end of this module.
_GPU_HELPERS = ("_gpu_verdicts", "_gpu_environment")


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


def bench_causal_skip(
    n: int = 4096, block_size: int = 128, n_heads: int = 4, d_k: int = 64, repeats: int = 5
) -> dict:
    """Full vs causal: the tiled loop (skip vs no skip), torch's SDPA, and tiled over SDPA."""
    q, k, v = random_qkv(n, n_heads, d_k)
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
    q, k, v = random_qkv(n, n_heads, d_k)
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


def _print_rows(rows: list[tuple[str, str, str, str]]) -> None:
    """The benchmark table: name, value, detail, verdict, one row per line."""
    if not rows:
        return
    width = max(len(row[0]) for row in rows)
    for name, detail, value, verdict in rows:
        print(f"{name:<{width}}  {value:>9}  {detail:<36} {verdict}")


# --- Lesson 3, §4: full against causal attention on the CPU -----------------------------------


def cost_table(ns, d_k: int = 64, n_heads: int = 4, block: int = 128) -> str:
    """FLOPs of full and causal attention per n, and their ratio in FLOPs and in tiles of
    ``block`` x ``block``, as text (Lesson 3, §4)."""
    lines = [f"    n   GFLOP full  causal   full / causal: FLOPs  tiles of {block}"]
    for n in ns:
        full = attention_flops(n, d_k=d_k, n_heads=n_heads)
        causal = attention_flops(n, d_k=d_k, n_heads=n_heads, causal=True)
        lines.append(f"{n:>5} {full / 1e9:>12.3f} {causal / 1e9:>7.3f} {full / causal:>20.3f}"
                     f" {tiled.tile_ratio_causal(n, block):>13.3f}")
    return "\n".join(lines)


def _full_against_causal(attend, qkv, causal: dict, repeats: int):
    """One kernel's full and causal calls timed in turns (time_pair)."""
    with torch.inference_mode():
        return time_pair(lambda: attend(*qkv), lambda: attend(*qkv, **causal), repeats=repeats)


def time_full_and_causal(ns, n_heads: int = 4, d_k: int = 64, repeats: int = 5) -> list[dict]:
    """Time full against causal attention on one CPU thread, per n: PyTorch's SDPA and the
    course's tiled loop, each with the ratio its block plan predicts (Lesson 3, §4).

    Each row holds n, "tiled" and "sdpa" as (ratio of median times, lowest, highest ratio of
    one round), "tiles" (the loop's tiles of 128) and "sdpa_blocks" (:func:`sdpa_cpu_blocks`).
    Full and causal run in turns (:func:`time_pair`), so a slow moment hits both."""
    ns = [check_positive_int(n, "every n") for n in ns]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: ratios that do not depend on the core count
    rows = []
    try:
        for n in ns:
            q, k, v = random_qkv(n, n_heads, d_k)  # (1, h, n, d_k) each, seeded
            sdpa = _full_against_causal(F.scaled_dot_product_attention, (q, k, v),
                                        {"is_causal": True}, repeats)
            loop = _full_against_causal(tiled.tiled_attention, (q, k, v), {"causal": True},
                                        repeats)
            rows.append({"n": n, "tiled": (loop.ratio, *loop.paired[1:]),
                         "sdpa": (sdpa.ratio, *sdpa.paired[1:]),
                         "tiles": tiled.tile_ratio_causal(n, 128),
                         "sdpa_blocks": block_ratio(n, *sdpa_cpu_blocks(n))})
    finally:
        torch.set_num_threads(threads)
    return rows


def timing_table(rows: list[dict]) -> str:
    """Measured and predicted full / causal time per n, as text (Lesson 3, §4). Each row holds
    n, "tiled" and "sdpa" as (ratio of median times, lowest, highest paired ratio), and the
    predictions "tiles" (blocks of 128) and "sdpa_blocks" (PyTorch's plan)."""
    if not rows:
        raise ValueError("timing_table needs at least one row of measurements, got none.")
    lines = ["    n   tiled loop [range]  predicted   PyTorch SDPA [range]  predicted"]
    for r in rows:
        tiled, sdpa = r["tiled"], r["sdpa"]
        lines.append(f"{r['n']:>5}   {tiled[0]:.2f} [{tiled[1]:.2f}, {tiled[2]:.2f}]"
                     f"  {r['tiles']:>9.2f}   {sdpa[0]:.2f} [{sdpa[1]:.2f}, {sdpa[2]:.2f}]"
                     f"  {r['sdpa_blocks']:>13.2f}")
    return "\n".join(lines)


def record_command(path) -> int:
    """``--gpu-record FILE``: the record, or a message and exit status 2 where none can be made."""
    if not tiled.triton_available():
        print("--gpu-record needs a CUDA device and Triton (pip install triton); "
              f"CUDA available: {torch.cuda.is_available()}.")
        return 2
    reason = bench_gpu.kernel_unsupported_reason()
    if reason is not None:
        print(f"--gpu-record times the Triton kernel, which cannot run here: {reason}")
        return 2
    bench_gpu.write_gpu_record(path)
    return 0


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
        return record_command(args.gpu_record)

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

    return bench_gpu.print_gpu_rows(repeats=args.repeats)


def mask_gpu_rows(folder="figures/data", cpu_rows: list[dict] | None = None) -> dict | None:
    """The GPU cell of Lesson 9, §3: every mask on a GPU, or what this CPU measured.

    On a GPU the Triton kernel runs on: the kernel checked, then timed with SDPA under every
    mask (:func:`bench_gpu.gpu_attention_record`), printed per mask; the record is returned.
    Otherwise one line saying why, the CPU's time fractions per mask (``cpu_rows``, the rows of
    :func:`bench_masks`), then the GPU runs recorded in ``folder`` or one line on what a GPU
    run adds. Returns None then.
    """
    if cpu_rows is not None and not (isinstance(cpu_rows, list) and all(
            isinstance(r, dict) and {"mask", "time_fraction"} <= set(r) for r in cpu_rows)):
        raise ValueError("cpu_rows must be the list of dicts that bench_masks returns (each "
                         f"with 'mask' and 'time_fraction'), got {cpu_rows!r}.")
    mode, line = bench_gpu.gpu_mode()
    print(line)
    if mode == "triton":
        record = bench_gpu.gpu_attention_record()  # checks the kernel, then times every mask
        print(bench_gpu.gpu_mask_table([record]))
        return record
    if cpu_rows:
        cells = ", ".join(f"{r['mask']} {r['time_fraction']:.2f}" for r in cpu_rows)
        print(f"Measured on this CPU, tiled attention's time / no mask: {cells}.")
    recorded = [r for r in bench_gpu.recorded_gpu_results(folder) if r.get("mask_rows")]
    if recorded:
        print("Recorded GPU runs:")
        print(bench_gpu.gpu_mask_table(recorded))
    else:
        print(bench_gpu.gpu_adds("under every mask above, with PyTorch's fused attention,"))
    return None


def __getattr__(name: str):
    """``bench.X`` for the GPU rows' names too: they live in :mod:`encoderlab.course.bench_gpu`,
    and the lessons and tests reach every timing through this one module."""
    if name in bench_gpu.__all__ or name in _GPU_HELPERS:
        return getattr(bench_gpu, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

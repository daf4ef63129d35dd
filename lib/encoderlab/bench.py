"""Measurements the lessons show: FLOPs by formula and paired timings (Lesson 3, §4; Lesson 9).

Timings on a shared machine are noisy, so two things are always timed side by
side, interleaved, and the *ratio* of the medians is what we report.
``python -m encoderlab.bench`` prints the course's benchmark table.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch.nn import functional as F

from . import masks, tiled

__all__ = [
    "attention_flops",
    "time_pair",
    "PairTiming",
    "environment",
    "bench_encoder_vs_reference",
    "bench_causal_skip",
    "structural_masks",
    "bench_masks",
    "main",
]


def attention_flops(n: int, d_k: int, n_heads: int = 1, causal: bool = False) -> int:
    """Multiply-adds x 2 of QK^T and AV for one layer (Lesson 3, §4).

    Full attention computes all n^2 scores; a causal kernel that skips the
    upper triangle computes n(n+1)/2 of them. The ratio tends to 2.
    """
    pairs = n * (n + 1) // 2 if causal else n * n  # (i, j) pairs whose score is computed
    return 2 * 2 * pairs * d_k * n_heads  # 2 matmuls (QK^T, AV), 2 FLOPs per multiply-add


@dataclass
class PairTiming:
    """Medians of interleaved runs of two functions, and their ratio a/b."""

    name_a: str
    name_b: str
    median_a_s: float
    median_b_s: float
    repeats: int

    @property
    def ratio(self) -> float:
        return self.median_a_s / self.median_b_s


def time_pair(
    fn_a: Callable[[], object],
    fn_b: Callable[[], object],
    repeats: int = 7,
    warmup: int = 1,
    names: tuple[str, str] = ("a", "b"),
) -> PairTiming:
    """Time two functions alternately (a, b, a, b, ...) so that drift hits both alike."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}.")
    for _ in range(warmup):
        fn_a()
        fn_b()
    times_a, times_b = [], []
    for i in range(repeats):
        # Alternate which goes first, so neither always runs on a warmer cache.
        order = [(fn_a, times_a), (fn_b, times_b)]
        for fn, times in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return PairTiming(
        names[0], names[1], statistics.median(times_a), statistics.median(times_b), repeats
    )


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


def bench_encoder_vs_reference(batch: int = 8, n: int = 128, repeats: int = 9) -> PairTiming:
    """Forward time of the library's MiniLM over the reference BertModel's, same weights."""
    from transformers import BertModel  # the reference; needed only for this comparison

    from .pretrained import find_weights, load_minilm

    _, model = load_minilm()
    reference = BertModel.from_pretrained(str(find_weights())).eval()
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, 30000, (batch, n), generator=g)  # (b, n)
    attention_mask = torch.ones_like(input_ids)
    with torch.inference_mode():
        return time_pair(
            lambda: model(input_ids, attention_mask=attention_mask),
            lambda: reference(input_ids, attention_mask=attention_mask),
            repeats=repeats,
            names=("encoderlab", "transformers"),
        )


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


def bench_masks(
    n: int = 2048, block_size: int = 128, n_heads: int = 4, d_k: int = 64, repeats: int = 5
) -> list[dict]:
    """For each mask: the fraction of tiles computed, and the time of tiled attention with
    that mask over the time of full tiled attention, measured side by side."""
    q, k, v = _qkv(n, n_heads, d_k)
    rows = []
    with torch.inference_mode():
        for name, mask in structural_masks(n).items():
            counts = tiled.tile_counts(n, block_size=block_size, mask=mask)
            pair = time_pair(
                lambda: tiled.tiled_attention(q, k, v, block_size=block_size),
                lambda m=mask: tiled.tiled_attention(q, k, v, mask=m, block_size=block_size),
                repeats=repeats,
                names=("full", name),
            )
            rows.append(
                {
                    "mask": name,
                    "tile_fraction": counts["fraction"],
                    "time_fraction": 1 / pair.ratio,  # time(mask) / time(full)
                    "time_ms": pair.median_b_s * 1e3,
                }
            )
    return rows


TARGETS = {
    "encoder_over_reference": ("<=", 1.05),
    "tiled_fraction_of_ideal": (">=", 0.95),
    "tiled_over_sdpa_causal": ("<=", 2.0),
}


def _verdict(name: str, value: float) -> str:
    op, target = TARGETS[name]
    ok = value <= target if op == "<=" else value >= target
    return f"{'meets' if ok else 'MISSES'} target {op} {target}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="sequence length for the skip test")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-reference", action="store_true", help="skip the transformers run")
    args = parser.parse_args(argv)

    env = environment()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    rows = []
    if not args.no_reference:
        t = bench_encoder_vs_reference(repeats=args.repeats)
        rows.append(
            (
                "MiniLM forward, 8 x 128 tokens: encoderlab / transformers",
                f"{t.median_a_s * 1e3:.1f} ms / {t.median_b_s * 1e3:.1f} ms",
                f"{t.ratio:.3f}x",
                _verdict("encoder_over_reference", t.ratio),
            )
        )
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
    width = max(len(row[0]) for row in rows)
    for name, detail, value, verdict in rows:
        print(f"{name:<{width}}  {value:>9}  {detail:<28} {verdict}")

    n_masks = min(args.n, 2048)
    print(f"\ntiled attention by mask, n={n_masks}, block 128 (time relative to full tiled):")
    print(f"{'mask':<16} {'tiles computed':>14} {'time':>8} {'ms':>8}")
    for row in bench_masks(n=n_masks, repeats=args.repeats):
        print(
            f"{row['mask']:<16} {row['tile_fraction']:>14.3f} {row['time_fraction']:>8.3f} "
            f"{row['time_ms']:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

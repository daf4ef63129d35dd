"""The GPU rows of ``python -m encoderlab bench`` and the GPU record (Lesson 3, §4; Lesson 9, §8).

Fair GPU timings: every GPU number comes from the GPU's own clock (``triton.testing.do_bench``:
CUDA events around each call, the L2 cache cleared before it), never from Python's clock, which
at short lengths would time Python's checks and Triton's launch instead of the kernel. SDPA runs
with one backend allowed at a time, FlashAttention first, and the record names the backend each
call ran on. ``TRITON_INTERPRET`` is refused. On a GPU the Triton kernel does not run on (compute
capability below 8.0, such as Colab's T4) the lessons' GPU cells time SDPA alone and say why
(:func:`gpu_mode`). The lessons reach these names as ``bench.X``.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import itertools
import json
import os
import statistics
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from encoderlab import kernels, masks, tiled
from encoderlab.course.timing import (
    interleaved_samples,
    paired_ratios,
    random_qkv,
    spread,
    structural_masks,
)

__all__ = [
    "GPU_SHAPE", "GPU_NS", "GPU_CONFIGS", "GPU_MASK_N", "GPU_TARGETS", "SDPA_BACKENDS",
    "interpreter_requested", "kernel_unsupported_reason", "gpu_mode", "device_samples",
    "sdpa_call", "sdpa_backend", "gpu_check_rows", "failed_checks", "gpu_checks",
    "fastest_gpu_config", "bench_gpu_attention", "bench_sdpa_gpu", "sdpa_gpu_record",
    "sdpa_results_table", "bench_gpu_masks", "gpu_mask_table", "gpu_attention_record",
    "recorded_gpu_results", "gpu_results_table", "gpu_adds", "cpu_skip_line",
    "lesson_gpu_rows", "write_gpu_record", "print_gpu_rows",
]

GPU_DEVICE = "cuda"  # where the GPU rows run (the tests point it at the CPU, with CUDA mocked)
GPU_SHAPE = {"batch": 1, "heads": 16, "head_dim": 64, "dtype": "float16"}
GPU_NS = (1024, 2048, 4096, 8192, 16384)
GPU_CONFIG_N = 4096  # the length at which the fastest of GPU_CONFIGS is chosen
GPU_CHECK_NS = (1000, 2048)  # a ragged and a whole-tile length for the kernel's checks
# The largest |kernel - float32 SDPA| accepted: a row that sees few keys outputs about one value
# row, up to about 5 in size, where half a unit in the last place is 2e-3 in float16 (11
# significant bits) and 1.6e-2 in bfloat16 (8 bits); the rest is room for the sums' rounding.
GPU_CHECK_TOLERANCE = {"float16": 5e-3, "bfloat16": 3e-2}
# Tile sizes and warps per program that the GPU rows try: the faster on the GPU at hand is
# timed against SDPA (and recorded). Both compile for sm_80 and sm_90 without spilling
# (tests/core/test_triton_compile.py); a 128 tile spills registers once a mask tensor is read.
GPU_CONFIGS = ({"block": 64, "num_warps": 4}, {"block": 64, "num_warps": 8})
# SDPA's backends in the order the GPU rows try them: FlashAttention wherever it runs.
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
SDPA_SHORT = {"FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient",
              "CUDNN_ATTENTION": "cudnn", "MATH": "math"}
TIMER = ("triton.testing.do_bench: CUDA events around each call, L2 cache cleared before it; "
         "per round the median over rep_ms of calls")
TIMER_MS = {"warmup_ms": 10, "rep_ms": 25}  # do_bench's warm-up and timed milliseconds per call


def interpreter_requested() -> bool:
    """True when TRITON_INTERPRET asks for Triton's CPU interpreter, or the kernel was loaded
    under it: its times would then be the interpreter's, not a GPU's."""
    value = os.environ.get("TRITON_INTERPRET", "").strip().lower()
    kernel = getattr(kernels, "tiled_triton", None)  # set once the kernel module is imported
    return value in ("1", "true", "yes", "on") or (kernel is not None and kernel.interpreted())


_INTERPRETER_REFUSED = (
    "TRITON_INTERPRET is set, so Triton's CPU interpreter would run the kernel and its times "
    "would be recorded as the GPU's. Unset it and run again: "
    "`env -u TRITON_INTERPRET python -m encoderlab bench --gpu-record FILE`.")


def kernel_unsupported_reason() -> str | None:
    """None when the course's Triton kernel can run on this machine's GPU; otherwise one sentence
    saying why not (no CUDA or no Triton, an older GPU such as Colab's T4, the interpreter)."""
    if interpreter_requested():
        return _INTERPRETER_REFUSED
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed here (pip install triton)."
    from encoderlab.kernels.tiled_triton import unsupported_reason

    return unsupported_reason()


def _require_gpu() -> None:
    """Raise ValueError unless the Triton kernel can be checked and timed on a GPU here."""
    if not tiled.triton_available():
        raise ValueError(
            "the GPU rows need a CUDA device and Triton (pip install triton); this machine has "
            f"CUDA: {torch.cuda.is_available()}. The CPU rows are in `python -m encoderlab bench`."
        )
    reason = kernel_unsupported_reason()
    if reason is not None:
        raise ValueError(f"the GPU rows cannot time the Triton kernel here: {reason} "
                         "(On a GPU too old for it, bench.sdpa_gpu_record() times SDPA alone.)")


def gpu_mode() -> tuple[str, str]:
    """What the GPU cells run here, and one line that says so (Lesson 3, §4; Lesson 9, §8).

    "triton": the Triton kernel runs on this GPU, checked against SDPA and timed with it;
    "sdpa": a GPU the kernel does not run on (Colab's T4): SDPA alone, full vs is_causal;
    "none": no CUDA device, or no Triton to time with: the CPU's timings, and the GPU runs
    recorded in figures/data/ if there are any.
    """
    if not torch.cuda.is_available():
        return "none", "No CUDA GPU in this run: the timings shown are this CPU's."
    if importlib.util.find_spec("triton") is None:
        return "none", ("Triton is not installed, and the GPU rows time with it (pip install "
                        "triton): the timings shown are this CPU's.")
    name = torch.cuda.get_device_name(0)
    reason = kernel_unsupported_reason()
    if reason is None:
        return "triton", (f"{name}: the Triton kernel runs here; it is checked against SDPA, "
                          "then both are timed on the GPU's clock.")
    major, minor = torch.cuda.get_device_capability(0)
    return "sdpa", (f"{name} (compute capability {major}.{minor}): the course's Triton kernel is "
                    "built for 8.0 (A100) and newer, so this run times PyTorch's SDPA alone, full "
                    "against is_causal.")


def gpu_adds(what: str = "and PyTorch's fused attention, full against causal, in float16,") -> str:
    """What a GPU run adds, in one line, where this run has no GPU and none is recorded: a fact,
    not a promise of results (Lesson 3, §4; Lesson 9, §8). ``what`` names the rows timed."""
    if not isinstance(what, str) or not what.strip():
        raise ValueError("what must name the rows the GPU times, as words after 'the Triton "
                         f"kernel' (e.g. 'under every mask'), got {what!r}.")
    return (f"On a GPU of compute capability 8.0 or newer (an A100, an H100) this cell times the "
            f"course's Triton kernel {what.strip()} on the GPU's clock.")


def cpu_skip_line(ratios) -> str:
    """One line on what this CPU measured: the tiled loop's time full / causal at each n
    (Lesson 3, §4). ``ratios`` maps n to the median ratio, e.g. {1024: 1.67, 2048: 1.81}."""
    if not (isinstance(ratios, dict) and ratios and all(
            isinstance(n, int) and n >= 1 and r > 0 for n, r in ratios.items())):
        raise ValueError("ratios must be a non-empty dict {n: median time full / causal}, each "
                         f"n an int >= 1 and each ratio > 0, got {ratios!r}; pass the tiled "
                         "loop's ratios measured in §4.")
    cells = ", ".join(f"{r:.2f} at n = {n}" for n, r in sorted(ratios.items()))
    return f"Measured on this CPU, the tiled loop's time full / causal: {cells}."


def _do_bench() -> Callable:
    """triton.testing.do_bench, the GPU-side timer of every GPU row."""
    if importlib.util.find_spec("triton") is None:
        raise ValueError("the GPU rows time their calls with triton.testing.do_bench, and Triton "
                         "is not installed here: pip install triton.")
    import triton.testing

    return triton.testing.do_bench


def device_samples(calls: dict[str, Callable[[], object]], repeats: int = 10,
                   warmup_ms: float | None = None, rep_ms: float | None = None
                   ) -> dict[str, list[float]]:
    """Seconds per call of each function, on the GPU's clock, in turns (Lesson 9, §8).

    Each round asks ``triton.testing.do_bench`` for the median time of every call in turn,
    starting with a different one each round, so sample i of every call comes from round i
    (paired, as in :func:`interleaved_samples`). No host clock is read: Python's launch
    costs overlap the GPU's work and are not counted.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}.")
    do_bench = _do_bench()
    warmup_ms = TIMER_MS["warmup_ms"] if warmup_ms is None else warmup_ms
    rep_ms = TIMER_MS["rep_ms"] if rep_ms is None else rep_ms
    names = list(calls)
    samples = {name: [] for name in names}
    for i in range(repeats):
        for name in names[i % len(names):] + names[: i % len(names)]:  # rotate who goes first
            ms = do_bench(calls[name], warmup=warmup_ms, rep=rep_ms, return_mode="median")
            samples[name].append(ms * 1e-3)
    return samples


def sdpa_call(q, k, v, backend: str, **kwargs) -> Callable[[], torch.Tensor]:
    """F.scaled_dot_product_attention(q, k, v, **kwargs) with only ``backend`` (a name of
    :data:`SDPA_BACKENDS`) allowed, so that it cannot switch kernels behind the timer's back."""
    allowed = getattr(SDPBackend, backend)

    def call():
        with sdpa_kernel(allowed):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

    return call


def sdpa_backend(q, k, v, **kwargs) -> str:
    """The first of :data:`SDPA_BACKENDS` that runs SDPA on these inputs and arguments:
    FlashAttention where it can, then the explicit fallbacks in order."""
    for backend in SDPA_BACKENDS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a backend that cannot run warns why
                sdpa_call(q, k, v, backend, **kwargs)()
        except RuntimeError:  # "No available kernel": try the next one
            continue
        return backend
    raise ValueError(f"no SDPA backend of {SDPA_BACKENDS} runs on q {tuple(q.shape)} "
                     f"{q.dtype} on {q.device} with {sorted(kwargs)}: check the inputs.")


def _forced_sdpa(q, k, v, **kwargs) -> tuple[str, Callable[[], torch.Tensor]]:
    """(backend, call): SDPA with ``kwargs``, forced to the backend :func:`sdpa_backend` found."""
    backend = sdpa_backend(q, k, v, **kwargs)
    return backend, sdpa_call(q, k, v, backend, **kwargs)


def _reference(q, k, v, mask) -> torch.Tensor:
    """SDPA in float32 with the math backend: what the kernel's output is checked against."""
    q, k, v = q.float(), k.float(), v.float()
    kwargs = {"is_causal": True} if isinstance(mask, str) else {"attn_mask": mask}
    return sdpa_call(q, k, v, "MATH", **kwargs)()


def gpu_check_rows(ns=None, configs=GPU_CONFIGS, dtypes=("float16", "bfloat16")) -> list[dict]:
    """The Triton kernel against float32 SDPA on the GPU, for every mask, dtype and config
    (Lesson 9): one row per case with the largest absolute difference and its tolerance.

    Ragged and whole-tile lengths (``GPU_CHECK_NS``), two sequences of four heads of 64.
    """
    _require_gpu()
    from encoderlab.kernels import tiled_triton

    rows = []
    g = torch.Generator(device=GPU_DEVICE).manual_seed(0)
    for n, dtype in itertools.product(ns or GPU_CHECK_NS, dtypes):
        q, k, v = (torch.randn(2, 4, n, 64, generator=g, device=GPU_DEVICE,
                               dtype=getattr(torch, dtype)) for _ in range(3))  # (b, h, n, d)
        lengths = torch.tensor([n, n - n // 4])  # the second sequence ends in [PAD]s
        cases = {"full": None, "causal": "causal",
                 "padding": masks.padding(torch.arange(n)[None, :] < lengths[:, None])}
        cases.update({name: m for name, m in structural_masks(n).items()
                      if name not in ("full", "causal")})
        for (name, mask), config in itertools.product(cases.items(), configs):
            mask = mask.to(GPU_DEVICE) if isinstance(mask, torch.Tensor) else mask
            with torch.inference_mode():
                out = tiled_triton.triton_attention(q, k, v, mask=mask, **config)
                error = (out.float() - _reference(q, k, v, mask)).abs().max().item()
            rows.append({"mask": name, "n": n, "dtype": dtype, **config,
                         "max_abs_difference": error, "tolerance": GPU_CHECK_TOLERANCE[dtype]})
    return rows


def failed_checks(rows: list[dict]) -> list[dict]:
    """The rows of :func:`gpu_check_rows` whose difference exceeds its tolerance (or is NaN)."""
    return [row for row in rows if not row["max_abs_difference"] <= row["tolerance"]]


def gpu_checks(ns=None, configs=GPU_CONFIGS) -> list[dict]:
    """:func:`gpu_check_rows`, raising ValueError if any case exceeds its tolerance."""
    rows = gpu_check_rows(ns, configs)
    _raise_on_failed(rows)
    return rows


def _raise_on_failed(rows: list[dict]) -> None:
    failed = failed_checks(rows)
    if failed:
        worst = max(failed, key=lambda row: row["max_abs_difference"])
        raise ValueError(
            f"the Triton kernel differs from float32 SDPA beyond the tolerance in {len(failed)} "
            f"of {len(rows)} cases, worst {worst}: do not record its timings; fix the kernel.")


def _triton_calls(q, k, v, config: dict) -> dict[str, Callable[[], object]]:
    """The Triton kernel, full and causal, on the same (b, h, n, d) q, k, v."""
    from encoderlab.kernels import tiled_triton

    return {
        "triton_full": lambda: tiled_triton.triton_attention(q, k, v, **config),
        "triton_causal": lambda: tiled_triton.triton_attention(q, k, v, mask="causal", **config),
    }


def _sdpa_calls(q, k, v) -> tuple[dict[str, Callable], dict[str, str]]:
    """SDPA full and is_causal, each forced to its backend; and the backends' names."""
    full, call_full = _forced_sdpa(q, k, v)
    causal, call_causal = _forced_sdpa(q, k, v, is_causal=True)
    return ({"sdpa_full": call_full, "sdpa_causal": call_causal},
            {"sdpa_backend_full": full, "sdpa_backend_causal": causal})


def fastest_gpu_config(configs=GPU_CONFIGS, n: int | None = None) -> dict:
    """The one of ``configs`` whose full plus causal time is least on this GPU (Lesson 9, §8),
    at n = ``GPU_CONFIG_N`` if None."""
    _require_gpu()
    q, k, v = random_qkv(n or GPU_CONFIG_N, GPU_SHAPE["heads"], GPU_SHAPE["head_dim"],
                         torch.float16, GPU_DEVICE)
    calls = {}
    for i, config in enumerate(configs):
        both = _triton_calls(q, k, v, config)
        calls[str(i)] = lambda c=both: (c["triton_full"](), c["triton_causal"]())
    with torch.inference_mode():
        samples = device_samples(calls, repeats=3)
    medians = {name: statistics.median(t) for name, t in samples.items()}
    return configs[int(min(medians, key=medians.get))]


def bench_gpu_attention(
    ns=None, repeats: int = 10, warmup: float | None = None, config: dict | None = None
) -> list[dict]:
    """Full vs causal on the GPU, side by side: torch's SDPA and the Triton kernel (Lesson 9, §8).

    float16, one sequence of 16 heads of 64 (``GPU_SHAPE``), the kernel with ``config``
    (block, num_warps; the fastest of ``GPU_CONFIGS`` if None), SDPA forced to one backend
    (FlashAttention where it runs; named in each row). For each n (``GPU_NS`` if None) the
    four calls are timed in turns on the GPU's clock (:func:`device_samples`, ``warmup`` ms
    of warm-up per call); the rows hold the medians (ms), each kernel's speedup full / causal
    next to the tile-count ratio 2T/(T+1), and the Triton kernel's time over SDPA's.
    """
    _require_gpu()
    config = config or fastest_gpu_config()
    rows = []
    for n in ns or GPU_NS:
        q, k, v = random_qkv(n, GPU_SHAPE["heads"], GPU_SHAPE["head_dim"], torch.float16,
                             GPU_DEVICE)
        with torch.inference_mode():
            sdpa, backends = _sdpa_calls(q, k, v)
            samples = device_samples({**sdpa, **_triton_calls(q, k, v, config)},
                                     repeats=repeats, warmup_ms=warmup)
        t = {name: statistics.median(s) for name, s in samples.items()}
        rows.append({
            "n": n,
            "tile_ratio": tiled.tile_ratio_causal(n, config["block"]),
            **{f"{name}_ms": seconds * 1e3 for name, seconds in t.items()},
            "sdpa_speedup": t["sdpa_full"] / t["sdpa_causal"],
            "triton_speedup": t["triton_full"] / t["triton_causal"],
            "triton_over_sdpa_full": t["triton_full"] / t["sdpa_full"],
            "triton_over_sdpa_causal": t["triton_causal"] / t["sdpa_causal"],
            **backends,
        })
    return rows


def bench_sdpa_gpu(ns=None, repeats: int = 10, warmup: float | None = None) -> list[dict]:
    """SDPA alone, full vs is_causal, on the GPU's clock: the GPU rows on a GPU the Triton
    kernel does not run on, such as Colab's T4 (Lesson 3, §4; Lesson 9, §8).

    float16, ``GPU_SHAPE``, each call forced to its backend (named in the row). Rows: n, the
    FLOP ratio 2n/(n+1), the medians (ms) and the median of the per-round ratios full / causal.
    """
    if not torch.cuda.is_available():
        raise ValueError("bench_sdpa_gpu times SDPA on a CUDA device, and this machine has none; "
                         "the CPU rows are in `python -m encoderlab bench`.")
    rows = []
    for n in ns or GPU_NS:
        q, k, v = random_qkv(n, GPU_SHAPE["heads"], GPU_SHAPE["head_dim"], torch.float16,
                             GPU_DEVICE)
        with torch.inference_mode():
            calls, backends = _sdpa_calls(q, k, v)
            samples = device_samples(calls, repeats=repeats, warmup_ms=warmup)
        rows.append({
            "n": n,
            "flop_ratio": 2 * n / (n + 1),
            "sdpa_full_ms": statistics.median(samples["sdpa_full"]) * 1e3,
            "sdpa_causal_ms": statistics.median(samples["sdpa_causal"]) * 1e3,
            "sdpa_speedup": spread(paired_ratios(samples["sdpa_full"],
                                                 samples["sdpa_causal"]))[0],
            **backends,
        })
    return rows


def sdpa_gpu_record(ns=None, repeats: int = 10) -> dict:
    """:func:`bench_sdpa_gpu` with the device, versions and why the Triton kernel is not shown."""
    return {**_gpu_environment(), "kind": "gpu-sdpa",
            "triton_not_shown": kernel_unsupported_reason(),
            "rows": bench_sdpa_gpu(ns, repeats=repeats)}


def sdpa_results_table(record: dict) -> str:
    """A record of :func:`sdpa_gpu_record` as text: a header line, then one line per n."""
    lines = [f"{record['device']} (compute capability {record.get('capability', '?')}) · torch "
             f"{record['torch']} · CUDA {record['cuda']} · {record['date']} · "
             f"{record.get('dtype', 'float16')}, {record.get('heads', '?')} heads of "
             f"{record.get('head_dim', '?')} · SDPA only, timed with triton.testing.do_bench",
             f"{'n':>6}{'full (ms)':>11}{'causal (ms)':>13}{'full / causal':>15}"
             f"{'FLOPs 2n/(n+1)':>16}  backend (full, causal)"]
    for row in record["rows"]:
        lines.append(
            f"{row['n']:>6}{row['sdpa_full_ms']:>11.3f}{row['sdpa_causal_ms']:>13.3f}"
            f"{row['sdpa_speedup']:>15.2f}{row['flop_ratio']:>16.3f}  "
            f"{SDPA_SHORT[row['sdpa_backend_full']]}, {SDPA_SHORT[row['sdpa_backend_causal']]}")
    return "\n".join(lines)


GPU_MASK_N = 8192  # the length at which the GPU rows time every mask (Lesson 9, §8)


def _mask_calls(n: int, q, k, v, config: dict) -> tuple[dict[str, Callable], dict[str, str]]:
    """Two calls per mask of :func:`structural_masks`, the Triton kernel and torch's SDPA
    (forced to its backend); and each mask's SDPA backend."""
    from encoderlab.kernels import tiled_triton

    calls, backends = {}, {}
    for name, mask in structural_masks(n).items():
        if name == "full":
            kernel_mask, sdpa_kwargs = None, {}
        elif name == "causal":
            kernel_mask, sdpa_kwargs = "causal", {"is_causal": True}
        else:
            kernel_mask = mask.to(q.device)
            sdpa_kwargs = {"attn_mask": kernel_mask}
        calls[f"triton|{name}"] = (
            lambda m=kernel_mask: tiled_triton.triton_attention(q, k, v, mask=m, **config))
        backends[name], calls[f"sdpa|{name}"] = _forced_sdpa(q, k, v, **sdpa_kwargs)
    return calls, backends


def bench_gpu_masks(n: int | None = None, repeats: int = 10, warmup: int = 3,
                    config: dict | None = None, device: str | None = None,
                    heads: int | None = None) -> list[dict]:
    """Every mask the Triton kernel supports, timed on the GPU (Lesson 9, §8).

    For each mask of :func:`structural_masks` (full, causal, sliding window, document,
    prefix-LM) the kernel and torch's SDPA (forced to one backend, named in the row) run on the
    same float16 (b, h, n, d) inputs, n = ``GPU_MASK_N`` if None, all ten calls in turns,
    ``repeats`` rounds, on the GPU's clock. One row per mask: the fraction of tiles the kernel
    computes (its tile plan, with ``config``'s block), each kernel's median time (ms) and its
    time over its own full-attention time, the median and range of the per-round ratios.
    ``device="cpu"`` runs the same code under Triton's interpreter (TRITON_INTERPRET=1) with
    the host's clock, for tests on tiny sizes only.
    """
    from encoderlab.kernels import tiled_triton

    n, device = n or GPU_MASK_N, device or GPU_DEVICE
    on_gpu = device == GPU_DEVICE and not tiled_triton.interpreted()
    if device == "cuda" or on_gpu:
        _require_gpu()
    elif not tiled_triton.interpreted():
        raise ValueError("bench_gpu_masks on the CPU needs Triton's interpreter: set "
                         "TRITON_INTERPRET=1 before triton is first imported.")
    config = config or fastest_gpu_config()
    dtype = torch.float16 if on_gpu else torch.float32
    q, k, v = random_qkv(n, heads or GPU_SHAPE["heads"], GPU_SHAPE["head_dim"], dtype, device)
    with torch.inference_mode():
        calls, backends = _mask_calls(n, q, k, v, config)
        if on_gpu:
            samples = device_samples(calls, repeats=repeats)
        else:  # the interpreter, in the tests: host clock, and no GPU number to record
            samples = interleaved_samples(calls, repeats=repeats, warmup=warmup)
    rows = []
    for name, mask in structural_masks(n).items():
        counts = tiled.tile_counts(n, block_size=config["block"], mask=mask)
        row = {"mask": name, "n": n, "block": config["block"],
               "tile_fraction": counts["fraction"], "sdpa_backend": backends[name]}
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
        return gpu_adds("under every mask of §4, with PyTorch's fused attention,")
    lines = []
    for r in with_masks:
        first = r["mask_rows"][0]
        lines.append(f"{r.get('device', '?')} · torch {r.get('torch', '?')} · Triton "
                     f"{r.get('triton', '?')} · {r.get('date', 'this run')} · "
                     f"n = {first['n']}, tiles of {first['block']}")
        lines.append(f"{'mask':<16}{'tiles':>7}{'Triton (ms)':>13}{'/ full [range]':>21}"
                     f"{'SDPA (ms)':>11}{'/ full [range]':>21}  SDPA backend")
        for row in r["mask_rows"]:
            lines.append(
                f"{row['mask']:<16}{row['tile_fraction']:>7.3f}{row['triton_ms']:>13.3f}"
                + f"{row['triton_fraction']:.2f} [{row['triton_fraction_low']:.2f}, "
                  f"{row['triton_fraction_high']:.2f}]".rjust(21)
                + f"{row['sdpa_ms']:>11.3f}"
                + f"{row['sdpa_fraction']:.2f} [{row['sdpa_fraction_low']:.2f}, "
                  f"{row['sdpa_fraction_high']:.2f}]".rjust(21)
                + f"  {SDPA_SHORT.get(row.get('sdpa_backend'), 'not recorded')}")
    return "\n".join(lines)


def gpu_attention_record(ns=None, repeats: int = 10, record: dict | None = None) -> dict:
    """Everything one GPU run measures, with the device and versions: the JSON that
    ``python -m encoderlab bench --gpu-record FILE`` writes (Lesson 9, §8).

    ``record``, if given, is filled in as the run goes, so that a run that stops part way
    still holds what it measured.
    """
    _require_gpu()
    record = {} if record is None else record
    record.update(_gpu_environment())
    record["checks"] = gpu_check_rows()  # first: a wrong kernel's timings are worth nothing
    _raise_on_failed(record["checks"])
    record.update(fastest_gpu_config())
    config = {"block": record["block"], "num_warps": record["num_warps"]}
    record["rows"] = bench_gpu_attention(ns, repeats=repeats, config=config)
    record["mask_rows"] = bench_gpu_masks(repeats=repeats, config=config)
    record["targets"] = {name: list(GPU_TARGETS[name]) for name in GPU_TARGETS}
    return record


def _gpu_environment() -> dict:
    """What a GPU record says about where and how it was measured."""
    return {
        "kind": "gpu-attention",
        "device": torch.cuda.get_device_name(0),
        "capability": ".".join(str(c) for c in torch.cuda.get_device_capability(0)),
        "torch": torch.__version__,
        "triton": importlib.metadata.version("triton") if importlib.util.find_spec("triton")
        else None,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": datetime.date.today().isoformat(),
        "timer": TIMER,
        **TIMER_MS,
        "sdpa_backends_tried": list(SDPA_BACKENDS),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
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
            continue  # another kind of recorded measurement, or a run that stopped part way
        missing = [key for key in _RECORD_KEYS if key not in data]
        missing += [f"rows[{i}].{key}" for i, row in enumerate(data.get("rows", []))
                    for key in _ROW_KEYS if key not in row]
        if missing:
            raise ValueError(f"{path} is a gpu-attention record without {', '.join(missing)}. "
                             "Record it again with `python -m encoderlab bench --gpu-record`.")
        records.append({**data, "file": path.name})
    return sorted(records, key=lambda r: r["date"])


def _sdpa_backends_named(rows: list[dict]) -> str:
    """The SDPA backends of a record's rows, in words ("" for records without them)."""
    names = [row.get(key) for row in rows for key in ("sdpa_backend_full", "sdpa_backend_causal")]
    names = sorted({SDPA_SHORT.get(name, name) for name in names if name})
    return f" · SDPA backend: {', '.join(names)}" if names else ""


def gpu_results_table(records: list[dict]) -> str:
    """GPU runs as text: one header line with the device and versions, then one line per n."""
    if not records:
        return gpu_adds()
    lines = []
    for r in records:
        lines.append(f"{r['device']} · torch {r['torch']} · Triton {r['triton']} · "
                     f"CUDA {r['cuda']} · {r['date']} · {r.get('dtype', 'float16')}, "
                     f"{r.get('heads', '?')} heads of {r.get('head_dim', '?')}, "
                     f"Triton tiles of {r.get('block', '?')}{_sdpa_backends_named(r['rows'])}")
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


def lesson_gpu_rows(folder="figures/data", cpu_ratios: dict | None = None) -> dict | None:
    """The GPU cell of Lesson 3, §4: prints what this run can show, returns its record or None.

    On a GPU the Triton kernel runs on: the kernel checked, then timed with SDPA
    (:func:`gpu_attention_record`). On an older GPU (Colab's T4): one line saying why the
    kernel is not shown, and SDPA alone (:func:`sdpa_gpu_record`). Without a GPU: what this CPU
    measured (``cpu_ratios``, :func:`cpu_skip_line`). Then, unless the kernel ran here, the runs
    recorded in ``folder``, or one line on what a GPU run adds (:func:`gpu_adds`).
    """
    mode, line = gpu_mode()
    print(line)
    if mode == "triton":
        record = gpu_attention_record()
        print(gpu_results_table([record]))
        return record
    record = sdpa_gpu_record() if mode == "sdpa" else None
    if record is not None:
        print(sdpa_results_table(record))
    elif cpu_ratios is not None:
        print(cpu_skip_line(cpu_ratios))
    recorded = recorded_gpu_results(folder)
    if recorded:
        print("Recorded GPU runs:")
        print(gpu_results_table(recorded))
    else:
        print(gpu_adds())
    return record


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
    """Run :func:`gpu_attention_record`, write it to ``path`` as JSON and print the table. A run
    that stops part way writes what it measured as kind "gpu-attention-failed" with the error
    (the lessons skip it), and raises the error again."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {}
    try:
        gpu_attention_record(record=record)
    except Exception as error:
        failed = {**record, "kind": "gpu-attention-failed",
                  "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        path.write_text(json.dumps(failed, indent=1) + "\n")
        print(f"the GPU run stopped part way ({type(error).__name__}); what it measured and "
              f"the error are in {path}")
        raise
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(gpu_results_table([record]))
    print(gpu_mask_table([record]))
    print("\n".join(_gpu_verdicts(record["rows"])))
    worst = max(record["checks"], key=lambda c: c["max_abs_difference"])
    print(f"checks: {len(record['checks'])} cases (float16 and bfloat16), largest difference "
          f"from float32 SDPA {worst['max_abs_difference']:.2e} ({worst['dtype']}, "
          f"tolerance {worst['tolerance']:g})")
    print(f"written: {path}")
    return record


def print_gpu_rows(repeats: int = 7) -> int:
    """The GPU rows of ``python -m encoderlab bench``: what this machine's GPU can show."""
    mode, line = gpu_mode()
    if mode == "none":
        print("\nThe GPU rows (SDPA and the Triton kernel, full vs causal, float16) need a CUDA "
              "device and Triton; recorded ones are in figures/data/.")
        return 0
    print(f"\n{line}")
    if mode == "sdpa":
        print(sdpa_results_table(sdpa_gpu_record(repeats=repeats)))
        return 0
    print("GPU rows (to check the kernel and record them: --gpu-record FILE):")
    config = fastest_gpu_config()
    rows = bench_gpu_attention(repeats=repeats, config=config)
    mask_rows = bench_gpu_masks(repeats=repeats, config=config)
    print(gpu_results_table([{**_gpu_environment(), **config, "rows": rows}]))
    print(gpu_mask_table([{**_gpu_environment(), "rows": rows, "mask_rows": mask_rows}]))
    print("\n".join(_gpu_verdicts(rows)))
    return 0

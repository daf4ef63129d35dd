"""Lesson 9, §8: the GPU rows that time every mask (bench.bench_gpu_masks, bench.gpu_mask_table).

Without a GPU the same code runs under Triton's interpreter on tiny sizes, in a fresh process
(TRITON_INTERPRET=1 must be set before triton is first imported; see triton_kernel_cases.py).
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from encoderlab.course import bench

HAS_TRITON = importlib.util.find_spec("triton") is not None

_SCRIPT = """
import json
from encoderlab.course import bench
rows = bench.bench_gpu_masks(n=64, repeats=2, warmup=1, device="cpu", heads=1,
                             config={"block": 16, "num_warps": 4})
print(json.dumps(rows))
"""


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the GPU cell runs it")
def test_bench_gpu_masks_runs_every_mask_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["mask"] for r in rows] == ["full", "causal", "sliding window", "document",
                                         "prefix-LM"]
    by_mask = {r["mask"]: r for r in rows}
    assert by_mask["full"]["tile_fraction"] == 1.0
    assert by_mask["full"]["triton_fraction"] == pytest.approx(1.0)  # a ratio to itself
    assert by_mask["causal"]["tile_fraction"] == pytest.approx(10 / 16)  # T(T+1)/2 of T^2, T=4
    for r in rows:
        assert r["n"] == 64 and r["block"] == 16
        assert r["sdpa_backend"] == "FLASH_ATTENTION"  # forced, and on the CPU it runs
        assert r["triton_ms"] > 0 and r["sdpa_ms"] > 0
        assert r["triton_fraction_low"] <= r["triton_fraction"] <= r["triton_fraction_high"]
    # the table reads them back as a record
    record = {"device": "interpreter", "torch": torch.__version__, "triton": "x",
              "date": "2026-12-01", "mask_rows": rows}
    table = bench.gpu_mask_table([record]).splitlines()
    assert table[0].startswith("interpreter") and "n = 64, tiles of 16" in table[0]
    assert [line.split()[0] for line in table[2:]] == ["full", "causal", "sliding", "document",
                                                      "prefix-LM"]


def test_bench_gpu_masks_needs_a_gpu_or_the_interpreter():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    from encoderlab.kernels import tiled_triton

    if tiled_triton.interpreted():
        pytest.skip("this process runs Triton's interpreter")
    with pytest.raises(ValueError, match="the GPU rows need a CUDA device and Triton"):
        bench.bench_gpu_masks()
    with pytest.raises(ValueError, match="needs Triton's interpreter"):
        bench.bench_gpu_masks(device="cpu", config={"block": 16, "num_warps": 4})


def test_gpu_mask_table_without_mask_rows_says_so():
    old = {"device": "Old GPU", "torch": "2.0", "triton": "3.0", "date": "2026-01-01", "rows": []}
    line = ("On a GPU of compute capability 8.0 or newer (an A100, an H100) this cell times the "
            "course's Triton kernel under every mask of §4, with PyTorch's fused attention, on the "
            "GPU's clock.")
    assert bench.gpu_mask_table([]) == line  # a fact about what a GPU adds, not a placeholder
    assert bench.gpu_mask_table([old]) == line


def test_gpu_adds_and_cpu_skip_line_are_one_line_and_refuse_bad_input():
    assert bench.gpu_adds("under a mask") == (
        "On a GPU of compute capability 8.0 or newer (an A100, an H100) this cell times the "
        "course's Triton kernel under a mask on the GPU's clock.")
    with pytest.raises(ValueError, match="what must name the rows"):
        bench.gpu_adds("  ")
    assert bench.cpu_skip_line({4: 2.0, 1: 0.5}) == (
        "Measured on this CPU, the tiled loop's time full / causal: 0.50 at n = 1, 2.00 at n = 4.")
    with pytest.raises(ValueError, match="non-empty dict"):
        bench.cpu_skip_line({})
    with pytest.raises(ValueError, match="each n an int >= 1 and each ratio > 0"):
        bench.cpu_skip_line({512: -1.0})

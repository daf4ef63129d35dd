"""The Triton kernel of Lesson 9 (kernels.tiled_triton) and the way the library reaches it.

With a CUDA device the kernel runs on the GPU. Without one, Triton's interpreter runs the
same kernel on CPU tensors (slowly, so the sizes are small). The kernel's own tests live in
triton_kernel_cases.py and run in a fresh process; the tests here need no kernel, or a GPU.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from triton_kernel_cases import _qkv

from encoderlab import masks, tiled
from encoderlab.course import bench

HAS_TRITON = importlib.util.find_spec("triton") is not None
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
def test_kernel_cases_in_a_fresh_process():
    """tests/core/triton_kernel_cases.py, in its own process (see its docstring for why)."""
    env = dict(os.environ)
    if DEVICE == "cpu":
        env["TRITON_INTERPRET"] = "1"
    cases = Path(__file__).with_name("triton_kernel_cases.py")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         str(cases)],
        capture_output=True, text=True, env=env, timeout=600, cwd=cases.parent.parent,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


@pytest.mark.skipif(DEVICE == "cuda", reason="on a GPU, CPU tensors are an error")
def test_cpu_tensors_are_an_error_outside_the_interpreter():
    code = (
        "import os, torch\n"
        "os.environ.pop('TRITON_INTERPRET', None)\n"
        "from encoderlab.kernels import tiled_triton\n"
        "q = torch.randn(1, 1, 32, 16)\n"
        "try:\n"
        "    tiled_triton.triton_attention(q, q, q)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    if not HAS_TRITON:
        pytest.skip("Triton is not installed")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=120)
    assert "the Triton kernel needs CUDA tensors, got tensors on cpu" in result.stdout


def test_importing_the_library_never_imports_triton():
    # Whatever is installed, `import encoderlab.tiled` and `.bench` leave triton alone and
    # print no warning: the kernel module is imported only by gpu_attention and the GPU rows.
    code = ("import sys, warnings\n"
            "warnings.simplefilter('error')\n"
            "import encoderlab.tiled, encoderlab.course.bench\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'triton'))\n")
    result = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert result.stderr == ""


@pytest.mark.skipif(tiled.triton_available(), reason="this machine has CUDA and Triton")
def test_gpu_attention_says_what_is_missing():
    q = torch.randn(1, 1, 8, 16)
    missing = "Triton" if torch.cuda.is_available() else "a CUDA device"
    with pytest.raises(ValueError, match=f"gpu_attention needs a CUDA device and Triton; "
                                         f"this machine lacks {missing}"):
        tiled.gpu_attention(q, q, q)


def test_triton_available_matches_what_is_installed():
    assert tiled.triton_available() == (torch.cuda.is_available() and HAS_TRITON)


@pytest.mark.skipif(not tiled.triton_available(), reason="needs a CUDA device and Triton")
def test_gpu_attention_matches_tiled_attention_on_the_gpu():
    q, k, v = _qkv(2, 4, 1000, 1000, 64, torch.float16)
    window = masks.sliding_window(1000, 100).cuda()
    for mask, causal in ((None, False), (None, True), (window, False), (window, True)):
        out = tiled.gpu_attention(q, k, v, mask=mask, causal=causal)
        expected = tiled.tiled_attention(q.float(), k.float(), v.float(), mask=mask,
                                         causal=causal)
        assert (out.float() - expected).abs().max().item() < 5e-3


@pytest.mark.skipif(not tiled.triton_available(), reason="needs a CUDA device and Triton")
def test_gpu_checks_and_rows_on_the_gpu():
    assert all(row["max_abs_difference"] < 5e-3 for row in bench.gpu_checks())
    (row,) = bench.bench_gpu_attention(ns=(1024,), repeats=2, warmup=1)
    assert row["n"] == 1024 and row["triton_full_ms"] > 0 and row["sdpa_causal_ms"] > 0

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
    assert not bench.failed_checks(bench.gpu_checks())  # each dtype within its tolerance
    (row,) = bench.bench_gpu_attention(ns=(1024,), repeats=2, warmup=1)
    assert row["n"] == 1024 and row["triton_full_ms"] > 0 and row["sdpa_causal_ms"] > 0


# --- The wrapper's choices, checked without a GPU (CUDA simulated where needed) -----------------


@pytest.fixture
def kernel_module():
    if not HAS_TRITON:
        pytest.skip("Triton is not installed")
    from encoderlab.kernels import tiled_triton

    return tiled_triton


def _simulate_gpu(monkeypatch, capability):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
@pytest.mark.skipif(DEVICE == "cuda", reason="this machine has a GPU: nothing to simulate")
def test_unsupported_reason_on_a_simulated_t4_a100_and_no_gpu(kernel_module, monkeypatch):
    if kernel_module.interpreted():
        pytest.skip("TRITON_INTERPRET=1 is set: the interpreter is the reason")
    assert "no CUDA device" in kernel_module.unsupported_reason()
    _simulate_gpu(monkeypatch, (7, 5))  # Colab's free T4
    reason = kernel_module.unsupported_reason()
    assert "compute capability 7.5" in reason and "8.0 (Ampere) and newer" in reason
    _simulate_gpu(monkeypatch, (8, 0))  # an A100
    assert kernel_module.unsupported_reason() is None


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
@pytest.mark.skipif(DEVICE == "cuda", reason="this machine has a GPU: nothing to simulate")
def test_gpu_attention_refuses_a_simulated_t4(kernel_module, monkeypatch):
    if kernel_module.interpreted():
        pytest.skip("TRITON_INTERPRET=1 is set: the interpreter is the reason")
    _simulate_gpu(monkeypatch, (7, 5))
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match=r"gpu_attention cannot run the Triton kernel: this GPU "
                                         r".*compute capability 7\.5; the course's Triton "
                                         r"kernel is built for 8\.0"):
        tiled.gpu_attention(q, q, q)


def test_launch_configs_keep_what_is_given_and_shrink_the_rest(kernel_module):
    configs = kernel_module.launch_configs(torch.float16, 64)
    block, warps = kernel_module.TILES[torch.float16][64]
    assert configs[0] == (block, warps, 3)
    assert [c[2] for c in configs[:3]] == [3, 2, 1] and configs[3][0] == block // 2
    assert kernel_module.launch_configs(torch.float32, 64, block=16, num_stages=2) == [
        (16, kernel_module.TILES[torch.float32][64][1], 2)]


def test_the_first_config_that_fits_launches_and_is_remembered(kernel_module):
    import triton

    tried = []

    def launch(block, warps, stages):
        tried.append((block, warps, stages))
        if stages > 1:  # a GPU with little shared memory: only one stage fits
            raise triton.runtime.OutOfResources(200_000, 100_000, "shared memory")

    key = ("test", 1)
    try:
        configs = [(64, 4, 3), (64, 4, 2), (64, 4, 1), (32, 4, 3)]
        assert kernel_module._launch_first_that_fits(launch, configs, key) == 64
        assert tried == configs[:3]
        tried.clear()
        kernel_module._launch_first_that_fits(launch, configs, key)
        assert tried == [(64, 4, 1)]  # remembered: no second search
        with pytest.raises(ValueError, match="no launch configuration of the Triton kernel fits"
                                             ".*block=64, num_stages=3: out of resource"):
            kernel_module._launch_first_that_fits(launch, configs[:2], ("test", 2))
    finally:
        kernel_module._CHOSEN.pop(key, None)


class _RecordingKernel:
    """Stands in for the Triton kernel: records the grid and the arguments of one launch."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.grid, self.args, self.kwargs = grid, args, kwargs

        return launch


@pytest.mark.skipif(DEVICE == "cuda", reason="runs the wrapper on CPU tensors")
def test_batch_times_heads_beyond_65535_sits_on_grid_axis_0(kernel_module, monkeypatch):
    visits_index = kernel_module._attention_kernel.arg_names.index("visits_ptr")
    fake = _RecordingKernel()
    monkeypatch.setattr(kernel_module, "_attention_kernel", fake)
    monkeypatch.setattr(kernel_module, "_CHOSEN", {})  # the fake's launch is not remembered
    monkeypatch.setattr(kernel_module, "interpreted", lambda: True)  # accept CPU tensors
    q = torch.randn(5462, 12, 1, 16)  # 65,544 (batch, head) pairs, more than axis 1 allows
    kernel_module.triton_attention(q, q, q, block=16)
    assert fake.grid == (5462 * 12,)  # one axis, one program per (batch·head, query tile)
    # Not counting: no visits buffer was allocated, the output stands in for the pointer.
    visits = fake.args[visits_index]
    assert visits.dtype == q.dtype and visits.shape == q.shape


@pytest.mark.skipif(DEVICE == "cuda", reason="runs the wrapper on CPU tensors")
def test_the_tile_plan_never_reads_the_mask_on_the_host(kernel_module):
    # A mask on the "meta" device has a shape but no values: any copy to the host, .item(),
    # .tolist() or boolean indexing would fail. The plan is built from torch operations only.
    window = masks.sliding_window(300, 40)
    for mask in (window, window.expand(2, 3, 300, 300)):
        tiles, states, counts = kernel_module._plan(300, 300, 64, mask.to("meta"))
        assert tiles.device.type == states.device.type == counts.device.type == "meta"
        assert tiles.shape == states.shape == (5, 5) and counts.shape == (5,)
        # On real tensors, the same plan as classify_tiles made on the host before.
        tiles, states, counts = kernel_module._plan(300, 300, 64, mask)
        expected = tiled.classify_tiles(300, 300, 64, mask)
        assert counts.tolist() == (expected != tiled.SKIP).sum(dim=1).tolist()
        assert torch.equal(states.gather(1, tiles.argsort(dim=1)), expected.to(torch.int32))

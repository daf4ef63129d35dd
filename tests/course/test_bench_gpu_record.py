"""The GPU record (bench_gpu.gpu_attention_record, --gpu-record) and the GPU cells' logic, with
CUDA simulated: a simulated H100 (compute capability 9.0) runs the record, a simulated T4 (7.5)
the SDPA-only rows. The tensors stay on the CPU (bench_gpu.GPU_DEVICE), triton.testing.do_bench is
replaced by a fake that runs each call once and reports a fixed time, the Triton kernel by
float32 attention in plain torch, and Python's clock raises if anything reads it.
"""

import importlib.util
import json
import time

import pytest
import torch
from torch.nn import functional as F

from encoderlab.course import bench, bench_gpu

HAS_TRITON = importlib.util.find_spec("triton") is not None
pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed: the GPU record "
                                "and the kernel's support check come with it")
FAKE_MS = 2.0  # what the fake do_bench reports for every call


def _attention(q, k, v, mask=None, block=64, **config):
    """What the Triton kernel computes, in float32 plain torch (the kernel's stand-in)."""
    s = q.float() @ k.float().transpose(-2, -1) / q.shape[-1] ** 0.5  # (b, h, n, n)
    if isinstance(mask, str):
        mask = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)  # (b, h, n, d)


class Simulated:
    """What a simulated GPU run saw: do_bench's calls, the SDPA backends allowed while timing,
    and the Triton kernel's calls."""

    def __init__(self):
        self.timed, self.sdpa_while_timing, self.kernel_calls = [], [], 0
        self.timing = False

    def do_bench(self, fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
                 return_mode="mean"):
        self.timed.append({"warmup": warmup, "rep": rep, "return_mode": return_mode})
        self.timing = True
        fn()
        self.timing = False
        return FAKE_MS

    def kernel(self, *args, **kwargs):
        self.kernel_calls += 1
        return _attention(*args, **kwargs)


def _no_host_clock():
    raise AssertionError("a GPU number was taken with time.perf_counter")


@pytest.fixture
def simulate(monkeypatch):
    """simulate(capability, name): CUDA mocked as that GPU; returns the :class:`Simulated`."""
    from encoderlab.kernels import tiled_triton

    if tiled_triton.interpreted():
        pytest.skip("this process runs Triton's interpreter")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    def make(capability=(9, 0), name="NVIDIA H100 80GB HBM3 (simulated)"):
        import triton.testing

        seen = Simulated()
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(triton.testing, "do_bench", seen.do_bench)
        monkeypatch.setattr(tiled_triton, "triton_attention", seen.kernel)
        sdpa = F.scaled_dot_product_attention

        def spied_sdpa(*args, **kwargs):
            if seen.timing:
                seen.sdpa_while_timing.append({
                    "FLASH_ATTENTION": torch.backends.cuda.flash_sdp_enabled(),
                    "EFFICIENT_ATTENTION": torch.backends.cuda.mem_efficient_sdp_enabled(),
                    "CUDNN_ATTENTION": torch.backends.cuda.cudnn_sdp_enabled(),
                    "MATH": torch.backends.cuda.math_sdp_enabled()})
            return sdpa(*args, **kwargs)

        monkeypatch.setattr(F, "scaled_dot_product_attention", spied_sdpa)
        monkeypatch.setattr(time, "perf_counter", _no_host_clock)
        # Tiny sizes: the plumbing is under test, not the speed.
        monkeypatch.setattr(bench_gpu, "GPU_DEVICE", "cpu")
        monkeypatch.setattr(bench_gpu, "GPU_SHAPE", {**bench_gpu.GPU_SHAPE, "heads": 2})
        monkeypatch.setattr(bench_gpu, "GPU_NS", (64, 128))
        monkeypatch.setattr(bench_gpu, "GPU_CONFIG_N", 64)
        monkeypatch.setattr(bench_gpu, "GPU_CHECK_NS", (80,))
        monkeypatch.setattr(bench_gpu, "GPU_MASK_N", 64)
        return seen

    return make


def _only(backend: str, allowed: dict) -> bool:
    return allowed[backend] and sum(allowed.values()) == 1


def test_a_simulated_h100_records_on_the_gpu_clock_with_flash_forced(simulate, tmp_path, capsys):
    seen = simulate((9, 0))
    assert bench.gpu_mode()[0] == "triton" and bench.kernel_unsupported_reason() is None
    # `python -m encoderlab bench --gpu-record FILE`, the one command to run on a GPU
    assert bench.main(["--gpu-record", str(tmp_path / "gpu-attention.json")]) == 0
    assert "written:" in capsys.readouterr().out
    record = json.loads((tmp_path / "gpu-attention.json").read_text())
    (recorded,) = bench.recorded_gpu_results(tmp_path)  # what the lessons read back
    assert recorded == {**record, "file": "gpu-attention.json"}
    # where and how it was measured
    assert record["kind"] == "gpu-attention" and record["capability"] == "9.0"
    assert record["timer"].startswith("triton.testing.do_bench")
    assert record["sdpa_backends_tried"][0] == "FLASH_ATTENTION"
    assert record["triton_interpret"] == ""
    # every GPU number is do_bench's median, and nothing else was timed
    assert seen.timed and all(t["return_mode"] == "median" for t in seen.timed)
    n_rows = len(bench_gpu.GPU_NS) * 4 * 10 + 10 * 10 + 2 * 3  # rows, masks, choosing the config
    assert len(seen.timed) == n_rows
    for row in record["rows"]:
        assert row["sdpa_full_ms"] == row["triton_causal_ms"] == FAKE_MS
        assert row["sdpa_backend_full"] == row["sdpa_backend_causal"] == "FLASH_ATTENTION"
    # SDPA ran with FlashAttention alone allowed whenever it was timed
    assert seen.sdpa_while_timing and all(_only("FLASH_ATTENTION", allowed)
                                          for allowed in seen.sdpa_while_timing)
    # every mask the kernel supports, each with the backend SDPA ran on
    assert [r["mask"] for r in record["mask_rows"]] == list(bench.structural_masks(64))
    assert all(r["sdpa_backend"] == "FLASH_ATTENTION" and r["triton_ms"] == FAKE_MS
               for r in record["mask_rows"])
    # the checks cover float16 and bfloat16, every mask and config, before any timing
    checks = record["checks"]
    assert {c["dtype"] for c in checks} == {"float16", "bfloat16"}
    assert len(checks) == 2 * 6 * len(bench_gpu.GPU_CONFIGS) and not bench.failed_checks(checks)
    assert "SDPA backend: flash" in bench.gpu_results_table([record]).splitlines()[0]
    assert bench.gpu_mask_table([record]).splitlines()[2].endswith("  flash")
    # the GPU cell of Lesson 3 on this GPU: the kernel's record, printed
    assert bench.lesson_gpu_rows(tmp_path)["kind"] == "gpu-attention"
    assert capsys.readouterr().out.splitlines()[0].endswith("both are timed on the GPU's clock.")


def test_flash_that_cannot_run_falls_back_explicitly_and_is_recorded(simulate, monkeypatch):
    simulate((9, 0))
    spied = F.scaled_dot_product_attention

    def no_flash(*args, **kwargs):
        if torch.backends.cuda.flash_sdp_enabled() and not torch.backends.cuda.math_sdp_enabled():
            raise RuntimeError("No available kernel. Aborting execution.")
        return spied(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", no_flash)
    q = k = v = torch.randn(1, 2, 64, 64)
    # on the CPU the efficient and cuDNN backends cannot run either: math is next in line
    assert bench.sdpa_backend(q, k, v) == "MATH"
    (row, _) = bench.bench_sdpa_gpu(repeats=1)
    assert row["sdpa_backend_full"] == row["sdpa_backend_causal"] == "MATH"


def test_a_simulated_t4_times_sdpa_alone_and_says_why_in_one_line(simulate, tmp_path, capsys):
    seen = simulate((7, 5), "Tesla T4")
    mode, line = bench.gpu_mode()
    assert mode == "sdpa" and "\n" not in line
    assert line == ("Tesla T4 (compute capability 7.5): the course's Triton kernel is built for "
                    "8.0 (A100) and newer, so this run times PyTorch's SDPA alone, full against "
                    "is_causal.")
    with pytest.raises(ValueError, match="cannot time the Triton kernel here: .*7.5"):
        bench.gpu_attention_record()
    assert bench.main(["--gpu-record", str(tmp_path / "x.json")]) == 2
    assert "cannot run here" in capsys.readouterr().out and not (tmp_path / "x.json").exists()

    record = bench.lesson_gpu_rows(tmp_path)  # the GPU cell of Lesson 3, no record in the folder
    out = capsys.readouterr().out.splitlines()
    assert out[0] == line and "SDPA only" in out[1]
    assert [r["n"] for r in record["rows"]] == list(bench_gpu.GPU_NS)
    assert record["kind"] == "gpu-sdpa" and "7.5" in record["triton_not_shown"]
    assert record["device"] == "Tesla T4" and record["capability"] == "7.5"
    assert seen.kernel_calls == 0  # the Triton kernel never ran
    assert len(seen.timed) == len(bench_gpu.GPU_NS) * 2 * 10  # full and causal, 10 rounds
    for row in record["rows"]:
        assert row["sdpa_full_ms"] == row["sdpa_causal_ms"] == FAKE_MS
        assert row["sdpa_speedup"] == 1.0 and row["flop_ratio"] == 2 * row["n"] / (row["n"] + 1)
    assert bench.sdpa_results_table(record).splitlines()[-1].split()[-2:] == ["flash,", "flash"]
    assert out[-1] == ("On a GPU of compute capability 8.0 or newer (an A100, an H100) this cell "
                       "times the course's Triton kernel and PyTorch's fused attention, full "
                       "against causal, in float16, on the GPU's clock.")


def test_the_interpreter_is_refused(simulate, monkeypatch, tmp_path, capsys):
    seen = simulate((9, 0))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert bench.interpreter_requested()
    with pytest.raises(ValueError, match="TRITON_INTERPRET is set"):
        bench.gpu_attention_record()
    with pytest.raises(ValueError, match="TRITON_INTERPRET is set"):
        bench.bench_gpu_masks()
    assert bench.main(["--gpu-record", str(tmp_path / "x.json")]) == 2
    assert "env -u TRITON_INTERPRET" in capsys.readouterr().out
    assert bench.gpu_mode()[0] == "sdpa"  # the GPU cells time SDPA alone, and say why
    assert seen.timed == [] and seen.kernel_calls == 0


def test_a_run_that_stops_part_way_writes_what_it_measured(simulate, monkeypatch, tmp_path):
    seen = simulate((9, 0))
    monkeypatch.setattr(seen, "kernel", lambda *a, **kw: _attention(*a, **kw) + 1)  # wrong
    from encoderlab.kernels import tiled_triton

    monkeypatch.setattr(tiled_triton, "triton_attention", seen.kernel)
    path = tmp_path / "gpu-attention.json"
    with pytest.raises(ValueError, match="differs from float32 SDPA beyond the tolerance"):
        bench.write_gpu_record(path)
    failed = json.loads(path.read_text())
    assert failed["kind"] == "gpu-attention-failed" and failed["error"].startswith("ValueError")
    assert failed["checks"] and len(bench.failed_checks(failed["checks"])) == len(failed["checks"])
    assert seen.timed == []  # nothing was timed after the checks failed
    assert bench.recorded_gpu_results(tmp_path) == []  # the lessons skip it


def test_device_samples_rotate_and_pair_the_calls(monkeypatch):
    import triton.testing

    order = []

    def fake(fn, warmup, rep, return_mode):
        order.append(fn())
        return {"a": 1.0, "b": 4.0}[order[-1]]

    monkeypatch.setattr(triton.testing, "do_bench", fake)
    monkeypatch.setattr(time, "perf_counter", _no_host_clock)
    samples = bench.device_samples({"a": lambda: "a", "b": lambda: "b"}, repeats=3)
    assert "".join(order) == "abbaab"
    assert samples == {"a": [1e-3] * 3, "b": [4e-3] * 3}
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        bench.device_samples({"a": lambda: "a"}, repeats=0)


def test_no_cuda_shows_the_recorded_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    mode, line = bench.gpu_mode()
    assert mode == "none" and line.startswith("No CUDA GPU")
    assert bench.lesson_gpu_rows(tmp_path) is None
    out = capsys.readouterr().out.splitlines()
    assert out == [line, bench.gpu_adds()]  # no placeholder: what a GPU adds, in one line
    assert not any("recorded yet" in o or "appear here" in o for o in out)
    # the GPU cell of Lesson 3 shows what the CPU measured, then the one line
    assert bench.lesson_gpu_rows(tmp_path, cpu_ratios={2048: 1.806, 512: 1.4}) is None
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("Measured on this CPU, the tiled loop's time full / causal: 1.40 at n = 512, "
                      "1.81 at n = 2048.")
    assert len(out) == 3 and out[2].startswith("On a GPU of compute capability 8.0 or newer")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)  # no Triton
    mode, line = bench.gpu_mode()
    assert mode == "none" and line.startswith("Triton is not installed")
    nan = {"max_abs_difference": float("nan"), "tolerance": 1.0}
    assert bench.failed_checks([nan, {"max_abs_difference": 0.5, "tolerance": 1.0}]) == [nan]


def test_bench_reaches_every_name_of_the_gpu_rows():
    for name in bench_gpu.__all__:  # the lessons write bench.X
        assert getattr(bench, name) is getattr(bench_gpu, name), name
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        bench.no_such_name  # noqa: B018

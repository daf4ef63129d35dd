"""The Triton kernel compiled for real GPUs, sm_80 (A100) and sm_90 (H100), with no GPU here.

Triton's interpreter (the kernel tests) checks no resources. Here Triton's own compiler builds
the kernel for each target (PTX, then a cubin with the ptxas Triton ships), and the tests check
what a launch would meet: the shared memory each configuration needs against the target's
limit, and the registers (no spills to local memory). The configurations are the ones the
wrapper chooses (kernels.tiled_triton.launch_configs: the first that fits, as at launch).

Compiling takes about a second per kernel, so the sweep is representative: every (dtype, head
dimension) on both targets, each in one of the six variants (masking mode, even or ragged n),
turning through them, and all six variants for two (dtype, head dimension) whose registers
once spilled; compiled kernels are cached for the session. ENCODERLAB_FULL_COMPILE=1 compiles
all 180 (dtype, head dimension, variant, target), about three minutes on one core.
"""

import functools
import importlib.util
import itertools
import os
import re
import subprocess
import tempfile

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="Triton is not installed: nothing to compile")

# Shared memory a block may use (bytes, the opt-in maximum), per compute capability.
SHARED_LIMIT = {80: 166_912, 90: 232_448}
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 64, 128, 256)
NO_MASK, CAUSAL, PLAN = 0, 1, 2
VARIANTS = [(masking, even) for masking in (NO_MASK, CAUSAL, PLAN) for even in (True, False)]
HEAVIEST = (PLAN, False)  # a mask tensor and a ragged last tile: the most registers and memory
FULL = os.environ.get("ENCODERLAB_FULL_COMPILE") == "1"


@pytest.fixture(scope="module")
def kernel_module():
    from encoderlab.kernels import tiled_triton

    if tiled_triton.interpreted():
        pytest.skip("TRITON_INTERPRET=1 is set: the kernel is interpreted, not compiled")
    return tiled_triton


_POINTER_TYPES = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32"}


@functools.lru_cache(maxsize=None)
def compiled_kernel(dtype, d_k, d_v, block, masking, even, warps, stages, capability):
    """The kernel compiled for ``capability`` (80 or 90), as Triton would for a launch there."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from encoderlab.kernels.tiled_triton import _PRECISION, _attention_kernel, compile_options

    names = _attention_kernel.arg_names
    signature = {name: "i32" for name in names}  # sizes and strides
    signature.update({name: _POINTER_TYPES[dtype] for name in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")})
    signature.update({"mask_ptr": "*u8", "tiles_ptr": "*i32", "states_ptr": "*i32",
                      "counts_ptr": "*i32", "visits_ptr": "*i32", "scale": "fp32"})
    constants = {"MASKING": masking, "EVEN_N": even, "COUNT": False, "BLOCK": block, "D_K": d_k,
                 "D_V": d_v, "PRECISION": _PRECISION[dtype]}
    signature.update(dict.fromkeys(constants, "constexpr"))
    # torch's tensors start at 16-byte-aligned addresses: Triton assumes so at a launch too.
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n.endswith("_ptr")}
    return triton.compile(ASTSource(_attention_kernel, signature, constants, aligned),
                          target=GPUTarget("cuda", capability, 32),
                          options=compile_options(dtype, warps, stages))  # as the wrapper launches


@functools.lru_cache(maxsize=None)
def compiled(*config) -> tuple[int, int, int]:
    """(shared memory bytes, registers per thread, bytes spilled) of compiled_kernel(*config)."""
    kernel = compiled_kernel(*config)
    registers, spilled = _register_use(kernel.asm["cubin"])
    return kernel.metadata.shared, registers, spilled


def _register_use(cubin: bytes) -> tuple[int, int]:
    """Registers per thread and bytes of local memory (spills) of a cubin, read by cuobjdump."""
    import triton

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        report = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-res-usage", f.name],
                                capture_output=True, text=True, check=True).stdout
    usage = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", report))
    return int(usage["REG"]), int(usage["STACK"]) + int(usage["LOCAL"])


def chosen(kernel_module, dtype, d_k, d_v, masking, even, capability, **arguments):
    """The config the wrapper launches on this target: the first of launch_configs that fits.

    Mirrors a launch: a config whose shared memory passes the limit raises OutOfResources
    before running, and the wrapper goes on to the next one.
    """
    import triton

    def launch(block, warps, stages):
        shared = compiled(dtype, d_k, d_v, block, masking, even, warps, stages, capability)[0]
        if shared > SHARED_LIMIT[capability]:
            raise triton.runtime.OutOfResources(shared, SHARED_LIMIT[capability],
                                                "shared memory")
        launched.append((block, warps, stages))

    launched = []
    configs = kernel_module.launch_configs(dtype, max(d_k, d_v), **arguments)
    kernel_module._launch_first_that_fits(launch, configs, key=None)
    kernel_module._CHOSEN.pop(None)
    return launched[0]


def _misfit(dtype, d, variant, capability, config) -> str | None:
    """None when ``config`` fits the target; otherwise what does not fit."""
    shared, registers, spilled = compiled(dtype, d, d, config[0], *variant, *config[1:],
                                          capability)
    if shared <= SHARED_LIMIT[capability] and registers <= 255 and spilled == 0:
        return None
    return (f"{dtype} d={d} (masking, even n)={variant} sm_{capability} (block, warps, stages)="
            f"{config}: {shared} B shared, {registers} registers, {spilled} B spilled")


def _sweep(capability: int) -> list[tuple]:
    """(dtype, d, variant) to compile: every (dtype, d) in one variant, turning through the six
    so that each variant meets every dtype (all variants with ENCODERLAB_FULL_COMPILE=1)."""
    sweep = []
    for i, (dtype, d) in enumerate(itertools.product(DTYPES, HEAD_DIMS)):
        variants = VARIANTS if FULL else [VARIANTS[(i + capability) % len(VARIANTS)]]
        sweep += [(dtype, d, variant) for variant in variants]
    return sweep


@pytest.mark.parametrize("capability", [90, 80])
def test_every_config_the_wrapper_chooses_fits(kernel_module, capability):
    misfits = [_misfit(dtype, d, variant, capability,
                       chosen(kernel_module, dtype, d, d, *variant, capability))
               for dtype, d, variant in _sweep(capability)]
    assert [m for m in misfits if m] == []


@pytest.mark.parametrize("capability, dtype, d", [(90, torch.float16, 256),
                                                  (80, torch.bfloat16, 128)])
def test_every_masking_variant_fits(kernel_module, capability, dtype, d):
    # Registers do not follow the variants' weight: with two causal loops, causal spilled at
    # d=256 on sm_90 where a mask tensor did not, and without maxnreg (compile_options) no
    # mask with ragged n spilled at d=128 on sm_80. All six variants of both, then.
    misfits = [_misfit(dtype, d, variant, capability,
                       chosen(kernel_module, dtype, d, d, *variant, capability))
               for variant in VARIANTS]
    assert [m for m in misfits if m] == []


def test_unequal_head_dims_use_the_larger_ones_tile(kernel_module):
    config = chosen(kernel_module, torch.bfloat16, 64, 256, *HEAVIEST, 80)
    assert config[0] == kernel_module.TILES[torch.bfloat16][256][0]
    shared, registers, spilled = compiled(torch.bfloat16, 64, 256, config[0], *HEAVIEST,
                                          *config[1:], 80)
    assert shared <= SHARED_LIMIT[80] and spilled == 0


def test_a_block_too_large_for_the_gpu_is_replanned_or_refused(kernel_module):
    # float16, d=256, block 64 (asked for by the caller) on an H100: three pipeline stages need
    # more shared memory than the GPU has, so the wrapper drops to two ...
    args = (torch.float16, 256, 256, 64, *HEAVIEST, 8)
    assert compiled(*args, 3, 90)[0] > SHARED_LIMIT[90] >= compiled(*args, 2, 90)[0]
    assert chosen(kernel_module, torch.float16, 256, 256, *HEAVIEST, 90, block=64) == (64, 8, 2)
    # ... and with num_stages=3 fixed by the caller it refuses, saying what to do.
    with pytest.raises(ValueError, match="no launch configuration .* fits this GPU.*block=64, "
                                         "num_stages=3: out of resource: shared memory"):
        chosen(kernel_module, torch.float16, 256, 256, *HEAVIEST, 90, block=64, num_stages=3)


def test_offsets_past_a_tile_are_64_bit(kernel_module):
    # b·h·n·d passes 2^31 for b=64, h=16, n=16,384, d=128: the (batch, head) offsets and each
    # tile's first row are widened to 64 bits before they are multiplied.
    config = chosen(kernel_module, torch.float16, 64, 64, *HEAVIEST, 90)
    ttir = compiled_kernel(torch.float16, 64, 64, config[0], *HEAVIEST, *config[1:], 90).asm["ttir"]
    for base in ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "mask_ptr"):
        assert re.search(rf"tt\.addptr %{base}, %\w+ : !tt\.ptr<\w+>, i64", ttir), base


def test_the_gpu_records_configs_fit_the_h100_class(kernel_module):
    """The two (block, warps) the GPU record times (bench.GPU_CONFIGS) at its head size, in every
    masking variant, fit sm_90 without spilling: the record times the kernel, not spills."""
    from encoderlab.course import bench_gpu

    d = bench_gpu.GPU_SHAPE["head_dim"]
    misfits = [
        _misfit(torch.float16, d, variant, 90,
                chosen(kernel_module, torch.float16, d, d, *variant, 90,
                       block=config["block"], num_warps=config["num_warps"]))
        for config in bench_gpu.GPU_CONFIGS for variant in VARIANTS]
    assert [m for m in misfits if m] == []

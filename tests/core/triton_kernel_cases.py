"""The Triton kernel's own tests (Lesson 9): run by test_tiled_triton.py in a fresh process.

Triton's interpreter (which runs the kernel on CPU tensors) is chosen when triton is first
imported, and torch imports triton as soon as an optimizer takes a step; inside the main test
run some earlier test has always done that. So these tests run in a process of their own, with
TRITON_INTERPRET=1 set from the start when there is no GPU. The file name keeps pytest from
collecting it directly.
"""

import os

import pytest
import torch
from torch.nn import functional as F

from encoderlab import attention, masks, tiled

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def kernel():
    """kernels.tiled_triton: on the GPU if there is one, else under Triton's interpreter."""
    from encoderlab.kernels import tiled_triton

    if DEVICE == "cpu":
        assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
        assert tiled_triton.interpreted()
    return tiled_triton


def _qkv(b, h, n_q, n_kv, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n_q, d, generator=g)  # (b, h, n_q, d)
    k = torch.randn(b, h, n_kv, d, generator=g)  # (b, h, n_kv, d)
    v = torch.randn(b, h, n_kv, d, generator=g)  # (b, h, n_kv, d)
    return [x.to(DEVICE, dtype) for x in (q, k, v)]


def _mask(name: str, n: int, block: int) -> torch.Tensor | None:
    if name == "full":
        return None
    if name == "sliding window":
        return masks.sliding_window(n, block // 2)
    if name == "document":
        return masks.document(torch.arange(n) * 3 // n)  # three documents, ragged edges
    if name == "prefix-LM":
        return masks.prefix_lm(n, n // 3)
    return masks.causal(n)


# (mask, n, block, d, dtype): every mask, ragged and whole-tile n, both tile sizes and dtypes.
CASES = [
    ("full", 64, 32, 16, torch.float32),
    ("causal", 100, 16, 32, torch.float16),
    ("sliding window", 200, 32, 16, torch.float32),
    ("document", 150, 32, 32, torch.float16),
    ("prefix-LM", 96, 16, 16, torch.float32),
]


@pytest.mark.parametrize("name, n, block, d, dtype", CASES)
def test_kernel_equals_reference_and_skips_hidden_tiles(kernel, name, n, block, d, dtype):
    q, k, v = _qkv(1, 2, n, n, d, dtype)
    mask = _mask(name, n, block)
    out, visits = kernel.triton_attention(q, k, v, mask=mask, block=block, return_visits=True)
    assert out.shape == (1, 2, n, d) and out.dtype == dtype
    reference, _ = attention.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), None if mask is None else mask.to(DEVICE))
    tolerance = 1e-5 if dtype == torch.float32 else 2e-3
    assert (out.float() - reference).abs().max().item() < tolerance
    # Each program visited exactly the tiles that tile_counts counts as computed.
    counts = tiled.tile_counts(n, block_size=block, mask=mask)
    assert visits.shape == (1, 2, counts["tiles_q"])
    assert visits.sum(dim=-1).tolist() == [[counts["computed"]] * 2]


def test_causal_string_equals_torch_and_the_causal_mask(kernel):
    q, k, v = _qkv(1, 1, 80, 80, 16, torch.float32)
    out, visits = kernel.triton_attention(q, k, v, mask="causal", block=32, return_visits=True)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out - expected).abs().max().item() < 1e-5
    # The loop bound visits the lower triangle of tiles: 1, 2, 3 key tiles per query tile.
    assert visits[0, 0].tolist() == [1, 2, 3]
    as_tensor, _ = kernel.triton_attention(q, k, v, mask=masks.causal(80).to(DEVICE), block=32,
                                           return_visits=True)
    assert (as_tensor - out).abs().max().item() < 1e-6


@pytest.mark.parametrize("n_q, n_kv", [(40, 72), (72, 40)])
def test_causal_with_n_q_not_n_kv_is_top_left_aligned(kernel, n_q, n_kv):
    q, k, v = _qkv(1, 1, n_q, n_kv, 16, torch.float32)  # both lengths ragged
    out, visits = kernel.triton_attention(q, k, v, mask="causal", block=16, return_visits=True)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out - expected).abs().max().item() < 1e-5
    counts = tiled.tile_counts(n_q, n_kv, block_size=16, causal=True)
    assert visits.sum().item() == counts["computed"]


def test_batch_and_head_masks_and_rows_that_see_nothing(kernel):
    q, k, v = _qkv(2, 2, 48, 48, 16, torch.float32, seed=1)
    lengths = torch.tensor([48, 20])  # the second sequence ends in 28 [PAD]s
    padding = masks.padding(torch.arange(48)[None, :] < lengths[:, None])  # (2, 1, 1, 48)
    per_head = torch.rand(1, 2, 48, 48, generator=torch.Generator().manual_seed(2)) < 0.7
    per_head[0, 1, 5] = False  # head 1, query 5: nothing visible, output must be 0, not NaN
    mask = masks.combine(padding, per_head)  # (2, 2, 48, 48)
    out = kernel.triton_attention(q, k, v, mask=mask.to(DEVICE), block=16)
    reference, _ = attention.scaled_dot_product_attention(q, k, v, mask.to(DEVICE))
    assert (out - reference).abs().max().item() < 1e-5
    assert torch.all(out[:, 1, 5] == 0)


def test_skipped_tiles_are_never_read(kernel):
    # Keys 64..95 (key tile 2 of 3) are hidden from every query: poison them with NaN.
    q, k, v = _qkv(1, 1, 96, 96, 16, torch.float32)
    k[..., 64:, :] = float("nan")
    v[..., 64:, :] = float("nan")
    mask = (torch.arange(96) < 64).reshape(1, 1, 1, 96)  # (1, 1, 1, n_kv)
    out, visits = kernel.triton_attention(q, k, v, mask=mask.to(DEVICE), block=32,
                                          return_visits=True)
    assert torch.isfinite(out).all()
    assert visits[0, 0].tolist() == [2, 2, 2]
    expected = F.scaled_dot_product_attention(q, k[..., :64, :], v[..., :64, :])  # no poison
    assert (out - expected).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda q, k, v: (q[0], k, v, None, 32), r"q must be a tensor of shape \(b, h, n, d\)"),
        (lambda q, k, v: (q.double(), k.double(), v.double(), None, 32),
         "float16, bfloat16 or float32, got torch.float64"),
        (lambda q, k, v: (q, k[:, :1], v[:, :1], None, 32), r"same \(batch, heads\)"),
        (lambda q, k, v: (q[..., :24], k[..., :24], v, None, 32),
         "d_k that is a power of two from 16 to 256, got 24"),
        (lambda q, k, v: (q, k, v, None, 48), "block must be a power of two"),
        (lambda q, k, v: (q, k, v, "sliding", 32), "mask must be None, 'causal' or a boolean"),
        (lambda q, k, v: (q, k, v, torch.ones(64, 64), 32), "mask must be boolean"),
        (lambda q, k, v: (q, k, v, torch.ones(5, 64, dtype=torch.bool), 32),
         "does not broadcast"),
        (lambda q, k, v: (q, k, v[:, :, :10], None, 32), r"v \(b, h, n_kv, d_v\)"),
    ],
)
def test_kernel_input_errors(kernel, change, message):
    q, k, v = _qkv(1, 2, 64, 64, 32, torch.float32)
    q, k, v, mask, block = change(q, k, v)
    with pytest.raises(ValueError, match=message):
        kernel.triton_attention(q, k, v, mask=mask, block=block)


def test_block_left_to_the_wrapper(kernel):
    # block=None: the wrapper chooses the tile (launch_configs); visits follow the chosen tile.
    q, k, v = _qkv(1, 2, 100, 100, 32, torch.float16)
    window = masks.sliding_window(100, 10).to(DEVICE)
    out, visits = kernel.triton_attention(q, k, v, mask=window, return_visits=True)
    reference, _ = attention.scaled_dot_product_attention(q.float(), k.float(), v.float(), window)
    assert (out.float() - reference).abs().max().item() < 2e-3
    block = kernel.TILES[torch.float16][32][0]
    counts = tiled.tile_counts(100, block_size=block, mask=window.cpu())
    assert visits.shape == (1, 2, counts["tiles_q"])
    assert visits.sum().item() == 2 * counts["computed"]


def test_unsupported_reason_names_the_interpreter(kernel):
    if DEVICE == "cuda":
        assert kernel.unsupported_reason() is None
    else:
        assert "TRITON_INTERPRET=1" in kernel.unsupported_reason()


# Every (dtype, head dimension) with the tile the wrapper chooses, every kind of mask, ragged n.
# On a GPU only: the interpreter's tl.dot multiplies bfloat16 bit patterns (a known limitation),
# and the large head dimensions are too slow for it.
@pytest.mark.skipif(DEVICE == "cpu", reason="bfloat16 and large tiles run on a GPU only "
                                            "(Triton's interpreter gets bfloat16 dot wrong)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("d", [16, 64, 128, 256])
@pytest.mark.parametrize("name", ["full", "causal", "document"])
def test_every_chosen_config_on_the_gpu(kernel, dtype, d, name):
    n = 300  # ragged for every tile size
    q, k, v = _qkv(2, 3, n, n, d, dtype)
    tensor_mask = None if name != "document" else _mask(name, n, 64).to(DEVICE)
    out = kernel.triton_attention(q, k, v, mask="causal" if name == "causal" else tensor_mask)
    reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                               attn_mask=tensor_mask, is_causal=name == "causal")
    tolerance = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    assert (out.float() - reference).abs().max().item() < tolerance

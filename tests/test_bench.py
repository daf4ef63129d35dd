"""The benchmark's formulas and plumbing (speed: see `python -m encoderlab.bench`)."""

import pytest
import torch

from encoderlab import bench, masks, tiled


def test_attention_flops_formula():
    assert bench.attention_flops(4, 8) == 2 * 2 * 16 * 8
    assert bench.attention_flops(4, 8, n_heads=3, causal=True) == 2 * 2 * 10 * 8 * 3
    ratio = bench.attention_flops(4096, 64) / bench.attention_flops(4096, 64, causal=True)
    assert ratio == pytest.approx(2 * 4096 / 4097)


def test_time_pair_interleaves_and_reports_medians():
    calls = []
    pair = bench.time_pair(lambda: calls.append("a"), lambda: calls.append("b"), repeats=4,
                           warmup=1, names=("a", "b"))
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert pair.repeats == 4 and pair.median_a_s > 0 and pair.ratio > 0
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        bench.time_pair(lambda: None, lambda: None, repeats=0)


def test_structural_masks_and_their_tile_fractions():
    rows = bench.bench_masks(n=256, block_size=64, n_heads=1, d_k=8, repeats=1)
    by_name = {row["mask"]: row for row in rows}
    assert set(by_name) == {"full", "causal", "sliding window", "document", "prefix-LM"}
    assert by_name["full"]["tile_fraction"] == 1.0
    causal = tiled.tile_counts(256, block_size=64, causal=True)
    assert by_name["causal"]["tile_fraction"] == causal["fraction"] == 10 / 16
    assert by_name["document"]["tile_fraction"] == pytest.approx(4 / 16)
    assert torch.equal(bench.structural_masks(8)["prefix-LM"], masks.prefix_lm(8, 2))


def test_main_prints_the_table(capsys):
    assert bench.main(["--n", "256", "--repeats", "1", "--no-reference"]) == 0
    out = capsys.readouterr().out
    assert "as a fraction of the tile-count ratio" in out
    assert "tiled attention by mask" in out and "sliding window" in out

"""The benchmark's formulas and plumbing (speed: see `python -m encoderlab bench`)."""

import pytest
import torch

from encoderlab import masks, tiled
from encoderlab.course import bench


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


def test_time_pair_keeps_every_sample_and_the_paired_ratios():
    calls = {"a": 0, "b": 0}
    pair = bench.time_pair(lambda: calls.__setitem__("a", calls["a"] + 1),
                           lambda: calls.__setitem__("b", calls["b"] + 1), repeats=3, warmup=0)
    assert len(pair.times_a_s) == len(pair.times_b_s) == 3 and calls == {"a": 3, "b": 3}
    assert pair.spread_a_s[1] <= pair.spread_a_s[0] <= pair.spread_a_s[2]
    pair = bench.PairTiming("a", "b", 5.0, 2.0, 3, [4.0, 6.0, 5.0], [2.0, 2.0, 4.0])
    assert pair.ratio == 2.5  # the ratio of the medians
    assert pair.paired == (2.0, 1.25, 3.0)  # per round 4/2, 6/2, 5/4: median, lowest, highest
    assert pair.spread_b_s == (2.0, 2.0, 4.0)


def test_spread_and_paired_ratios():
    assert bench.spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert bench.paired_ratios([2.0, 9.0], [1.0, 3.0]) == [2.0, 3.0]
    with pytest.raises(ValueError, match="at least one sample"):
        bench.spread([])
    with pytest.raises(ValueError, match="equally long, non-empty"):
        bench.paired_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="equally long, non-empty"):
        bench.paired_ratios([], [])


def test_interleaved_samples_keeps_one_sample_per_round():
    calls = []
    samples = bench.interleaved_samples(
        {name: (lambda name=name: calls.append(name)) for name in "ab"}, repeats=3, warmup=0)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert {name: len(t) for name, t in samples.items()} == {"a": 3, "b": 3}
    assert all(t > 0 for times in samples.values() for t in times)
    with pytest.raises(ValueError, match="repeats and inner must be at least 1"):
        bench.interleaved_samples({"a": lambda: None}, repeats=0)


def test_structural_masks_and_their_tile_fractions():
    rows = bench.bench_masks(n=256, block_size=64, n_heads=1, d_k=8, repeats=2, window=32)
    by_name = {row["mask"]: row for row in rows}
    assert set(by_name) == {"full", "causal", "sliding window", "document", "prefix-LM",
                            "every tile partial"}
    for row in rows:  # the time fraction is a median of per-round ratios, with its range
        assert row["time_fraction_low"] <= row["time_fraction"] <= row["time_fraction_high"]
        assert row["time_ms"] > 0 and row["no_mask_ms"] > 0
        assert row["full_tiles"] + row["partial_tiles"] == round(row["tile_fraction"] * 16)
    assert by_name["sliding window"]["partial_tiles"] > 0 == by_name["document"]["partial_tiles"]
    assert by_name["full"]["tile_fraction"] == 1.0
    causal = tiled.tile_counts(256, block_size=64, causal=True)
    assert by_name["causal"]["tile_fraction"] == causal["fraction"] == 10 / 16
    assert by_name["document"]["tile_fraction"] == pytest.approx(4 / 16)
    assert torch.equal(bench.structural_masks(8)["prefix-LM"], masks.prefix_lm(8, 2))
    every = by_name["every tile partial"]  # all 16 tiles computed, every one masked
    assert every["tile_fraction"] == 1.0 and every["partial_tiles"] == 16
    low, median, high = sorted(every["partial_over_full"])
    assert median == every["partial_over_full"][0] and low > 0
    # The prediction is exact for the two rows it is calibrated on.
    assert by_name["full"]["predicted_fraction"] == pytest.approx(by_name["full"]["time_fraction"])
    assert every["predicted_fraction"] == pytest.approx(every["time_fraction"])


def test_every_tile_partial_hides_one_entry_per_tile():
    mask = bench.every_tile_partial(10, 4)
    assert int((~mask).sum()) == 9  # 3 x 3 tiles, one hidden entry each
    counts = tiled.tile_counts(10, block_size=4, mask=mask)
    assert counts["partial"] == 9 and counts["skipped"] == 0
    assert mask.any(dim=1).all()  # no query is left without a key


def test_main_prints_the_table(capsys):
    assert bench.main(["--n", "256", "--repeats", "1", "--no-reference"]) == 0
    out = capsys.readouterr().out
    assert "as a fraction of the tile-count ratio" in out
    assert "tiled attention by mask" in out and "sliding window" in out


def test_encoder_rows_time_an_unpadded_and_a_padded_batch():
    timings = bench.bench_encoder_vs_reference(batch=2, n=16, pad_from=12, repeats=1)
    assert list(timings) == ["unpadded", "padded"]
    for t in timings.values():
        assert (t.name_a, t.name_b) == ("encoderlab", "transformers") and t.ratio > 0


# --- The GPU rows: plumbing that runs without a GPU (the timings themselves need one) ---


def test_main_says_the_gpu_rows_need_a_gpu(capsys):
    if tiled.triton_available():
        pytest.skip("this machine has CUDA and Triton: main prints the GPU rows")
    assert bench.main(["--n", "256", "--repeats", "1", "--no-reference"]) == 0
    assert "need a CUDA device and Triton" in capsys.readouterr().out
    assert bench.main(["--gpu-record", "unused.json"]) == 2
    assert "--gpu-record needs a CUDA device and Triton" in capsys.readouterr().out
    with pytest.raises(ValueError, match="the GPU rows need a CUDA device and Triton"):
        bench.bench_gpu_attention()


def test_time_interleaved_rotates_and_syncs_each_sample():
    calls = []
    medians = bench.time_interleaved(
        {name: (lambda name=name: calls.append(name)) for name in "abc"},
        repeats=3, warmup=1, inner=2, sync=lambda: calls.append("|"))
    assert set(medians) == {"a", "b", "c"} and all(t > 0 for t in medians.values())
    assert "".join(calls) == "abc|" + "aa|bb|cc|" + "bb|cc|aa|" + "cc|aa|bb|"
    with pytest.raises(ValueError, match="repeats and inner must be at least 1"):
        bench.time_interleaved({"a": lambda: None}, inner=0)


def _record(**changes) -> dict:
    rows = [{"n": n, "tile_ratio": tiled.tile_ratio_causal(n, 64), "sdpa_full_ms": 1.0 * n,
             "sdpa_causal_ms": 0.55 * n, "triton_full_ms": 1.1 * n, "triton_causal_ms": 0.6 * n,
             "sdpa_speedup": 1 / 0.55, "triton_speedup": 1.1 / 0.6,
             "triton_over_sdpa_full": 1.1, "triton_over_sdpa_causal": 0.6 / 0.55}
            for n in (1024, 8192)]
    record = {"kind": "gpu-attention", "device": "Test GPU", "torch": "2.13.0",
              "triton": "3.9.0", "cuda": "12.8", "date": "2026-11-30", "dtype": "float16",
              "heads": 16, "head_dim": 64, "block": 64, "rows": rows}
    return {**record, **changes}


def test_recorded_gpu_results_reads_the_records_of_a_folder(tmp_path):
    import json

    assert bench.recorded_gpu_results(tmp_path / "missing") == []
    assert bench.recorded_gpu_results(tmp_path) == []
    (tmp_path / "other.json").write_text(json.dumps({"kind": "something else"}))
    (tmp_path / "b.json").write_text(json.dumps(_record(date="2026-12-01", device="Newer")))
    (tmp_path / "a.json").write_text(json.dumps(_record()))
    records = bench.recorded_gpu_results(tmp_path)
    assert [(r["device"], r["file"]) for r in records] == [("Test GPU", "a.json"),
                                                            ("Newer", "b.json")]
    broken = _record()
    del broken["rows"][1]["triton_speedup"], broken["cuda"]
    (tmp_path / "c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"c.json is a gpu-attention record without cuda, "
                                         r"rows\[1\].triton_speedup"):
        bench.recorded_gpu_results(tmp_path)


def test_gpu_results_table_and_figure():
    import matplotlib.pyplot as plt

    from encoderlab.course import plotting

    assert bench.gpu_results_table([]).startswith("On a GPU of compute capability 8.0 or newer")
    table = bench.gpu_results_table([_record()]).splitlines()
    assert table[0] == ("Test GPU · torch 2.13.0 · Triton 3.9.0 · CUDA 12.8 · 2026-11-30 · "
                        "float16, 16 heads of 64, Triton tiles of 64")
    assert table[-1].split() == ["8192", "8192.000", "4505.600", "9011.200", "4915.200",
                                 "1.82", "1.83", "1.98", "1.10", "1.09"]
    verdicts = bench._gpu_verdicts(_record()["rows"])
    assert verdicts[0].startswith("sdpa   full / causal at n >= 8192: lowest 1.82x, MISSES")
    assert verdicts[2].endswith("1.10x, meets target <= 1.2")
    ax = plotting.gpu_speedups(_record())
    assert ax.get_title() == "Test GPU, float16 (2026-11-30)"
    assert [line.get_label() for line in ax.get_lines()[-2:]] == [
        "SDPA, is_causal", "Triton kernel, tiles skipped"]
    assert list(ax.get_lines()[-1].get_ydata()) == pytest.approx([1.1 / 0.6] * 2)
    plt.close(ax.figure)

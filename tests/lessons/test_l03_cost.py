"""Lesson 3, §4: the block counts of full and causal attention, and the two tables."""

import pytest
import torch

from encoderlab.course import bench
from encoderlab.lessons import l03_cost


def test_block_counts_by_hand():
    # 4 x 4 square tiles: causal computes the 10 on and below the diagonal
    assert l03_cost.block_counts(512, 128) == (16, 10)
    # one tile, or a length that is not a multiple: the last, partial tile counts
    assert l03_cost.block_counts(100, 128) == (1, 1)
    assert l03_cost.block_counts(300, 128) == (9, 6)
    # rectangular: 4 query blocks of 256, 2 key blocks of 512; causal needs 1, 1, 2, 2
    assert l03_cost.block_counts(1024, 256, 512) == (8, 6)
    assert l03_cost.block_ratio(2048, 256, 512) == pytest.approx(32 / 20)
    assert l03_cost.block_ratio(4096, 128) == pytest.approx(2 * 32 / 33)  # 2T/(T+1)


def test_sdpa_cpu_blocks_follow_pytorchs_plan():
    assert l03_cost.sdpa_cpu_blocks(100) == (32, 100)
    assert l03_cost.sdpa_cpu_blocks(512) == (64, 512)
    assert l03_cost.sdpa_cpu_blocks(1024) == (256, 512)
    # a single key block leaves nothing to skip
    assert l03_cost.block_ratio(512, *l03_cost.sdpa_cpu_blocks(512)) == 1.0


def test_bad_sizes_are_refused():
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="must be an int >= 1"):
            l03_cost.block_counts(bad, 128)
    with pytest.raises(ValueError, match="needs at least one row"):
        bench.timing_table([])


def test_tables_show_the_numbers():
    cost = bench.cost_table([512]).splitlines()
    assert len(cost) == 2 and cost[1].split() == ["512", "0.268", "0.134", "1.996", "1.600"]
    row = {"n": 2048, "tiled": (1.93, 1.23, 2.66), "sdpa": (1.6, 1.55, 1.65),
           "tiles": 1.882, "sdpa_blocks": 1.6}
    line = bench.timing_table([row]).splitlines()[1]
    assert line.split() == ["2048", "1.93", "[1.23,", "2.66]", "1.88", "1.60", "[1.55,", "1.65]",
                            "1.60"]


def test_time_full_and_causal_gives_a_row_per_n():
    threads = torch.get_num_threads()
    rows = bench.time_full_and_causal([64, 300], n_heads=1, d_k=8, repeats=2)
    assert torch.get_num_threads() == threads  # restored
    assert [r["n"] for r in rows] == [64, 300]
    assert rows[1]["tiles"] == pytest.approx(9 / 6) and rows[1]["sdpa_blocks"] == 1.0
    for r in rows:
        for kind in ("tiled", "sdpa"):
            ratio, low, high = r[kind]
            assert ratio > 0 and 0 < low <= high
    with pytest.raises(ValueError, match="every n must be a positive int, got 0"):
        bench.time_full_and_causal([0])

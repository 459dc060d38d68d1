"""``distnet show`` / ``plan`` with a huge ``-n``: the per-axis formulas (geometry.extent,
geometry.divisors) against the per-rank loops they replace, exhaustively on small cases, and
huge rank counts answering (no timing is asserted)."""
import itertools

import pytest

from distnet.comm.topology import choose_grid, factor_pairs, working_sizes
from distnet.errors import TopologyError
from distnet.geometry import Window, grid_coords, plan_halo, tile_of
from distnet.geometry.divisors import divisor_pairs, fits, fitting_sizes
from distnet.geometry.extent import block, halo_extents, largest_tile
from distnet.geometry.partition import block_partition


def test_divisors_and_fits_against_brute_force():
    for n in range(1, 400):
        assert divisor_pairs(n) == [(p, n // p) for p in range(1, n + 1) if n % p == 0]
        for hmax, wmax in itertools.product([None, 1, 2, 3, 7, 20], repeat=2):
            brute = any((hmax is None or p <= hmax) and (wmax is None or q <= wmax) for p, q in divisor_pairs(n))
            assert fits(n, hmax, wmax) == brute, (n, hmax, wmax)


def test_fitting_sizes_lists_the_head_and_the_neighbours():
    assert fitting_sizes(3, 2, 30) == [1, 2, 3, 4, 6]
    near = fitting_sizes(1000, 1000, 2 * 999_983, near=999_983)
    assert [n for n in near if n <= 64] == list(range(1, 65))
    above = [n for n in near if n > 999_983]
    below = [n for n in near if 64 < n < 999_983]
    assert above == [10**6] and len(below) == 5  # 1000 x 1000 is the largest grid that fits
    assert 999_983 not in near  # a prime above 1000 cannot fit
    assert all(fits(n, 1000, 1000) for n in near)


def test_block_and_extents_against_the_halo_plans():
    windows = [Window(1), Window(3, 1, 1, 1), Window(5, 2, 2, 1), Window(2, 2), Window(7, 3, 3, 3), Window(4, 1, 0, 3)]
    for H, W in [(5, 7), (12, 10), (9, 4)]:
        for Py, Px in [(1, 1), (2, 3), (3, 2), (4, 4), (5, 1)]:
            for p in range(Py):
                assert block(H, Py, p) == block_partition(H, Py)[p]
            tiles = [tile_of((H, W), (Py, Px), c) for c in grid_coords((Py, Px))]
            assert largest_tile((H, W), (Py, Px)).shape == max(tiles, key=lambda b: (b.size, b.shape)).shape
            for wy, wx in itertools.product(windows, repeat=2):
                try:
                    plans = [plan_halo((H, W), wy, wx, (Py, Px), c) for c in grid_coords((Py, Px))]
                except Exception:  # the grid cannot cut the output plane: show never gets here
                    continue
                sides = [(max(0, q.own.y0 - max(q.chunk.y0, 0)), max(0, min(q.chunk.y1, H) - q.own.y1),
                          max(0, q.own.x0 - max(q.chunk.x0, 0)), max(0, min(q.chunk.x1, W) - q.own.x1))
                         for q in plans]
                halo, chunk = halo_extents((H, W), wy, wx, (Py, Px))
                assert halo == tuple(max(s[k] for s in sides) for k in range(4))
                assert chunk.shape == max((q.chunk for q in plans), key=lambda b: (b.size, b.shape)).shape


def test_huge_rank_counts_answer():
    assert factor_pairs(10**6)[0] == (1, 10**6) and len(factor_pairs(10**6)) == 49
    assert choose_grid(10**6, [(4000, 4000)]) == (1000, 1000)
    with pytest.raises(TopologyError, match=r"and 43 more grids\). Rank counts that work: 1, 2, 3.*near 1000000"):
        choose_grid(10**6, [(12, 10)])
    assert working_sizes([(12, 10)], limit=10**6)[-1] == 120


def test_show_and_plan_with_a_million_ranks(tmp_path):
    """A 4000x4000 image (declared in the HDF5 header, never written) on 10**6 ranks."""
    import h5py
    import numpy as np

    from distnet.cli.show import format_show
    from distnet.config import load_experiment_text
    from distnet.plan import plan_model
    from tests.tiny import CNN, experiment
    with h5py.File(tmp_path / "big.h5", "w") as f:
        for split in ("train", "test"):
            f.create_dataset(f"{split}/x", shape=(4, 1, 4000, 4000), dtype="f4", chunks=(1, 1, 500, 500))
            f[f"{split}/y"] = np.zeros(4, int)
        f.attrs["nclasses"] = 3
    exp = load_experiment_text(experiment(CNN, tmp_path / "big.h5", dist=True), "big.yaml")
    text = format_show(exp, "big.yaml", 10**6)
    assert "grid 1000x1000" in text
    assert "conv" in text and "4x4" in text  # the largest output tile of conv: 4000 / 1000 rows
    assert plan_model(exp.model, exp.dataset.image_shape, nranks=10**6).grid == (1000, 1000)

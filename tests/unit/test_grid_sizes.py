"""``distnet show`` / ``plan`` with a huge ``-n``: the per-axis formulas (geometry.extent)
against the per-rank halo plans, exhaustively on small cases, and huge rank counts answering
(no timing is asserted)."""
import itertools

import pytest

from distnet.errors import TopologyError
from distnet.geometry import Window, grid_coords, plan_halo, tile_of
from distnet.geometry.extent import block, halo_extents, largest_tile
from distnet.geometry.grid import choose_grid, factor_pairs, working_sizes
from distnet.geometry.partition import block_partition


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
    with pytest.raises(TopologyError, match=r"Rank counts that work: 1, 2, 3"):
        choose_grid(10**6, [(12, 10)])
    assert working_sizes([(12, 10)], limit=200)[-1] == 120


def test_show_with_a_million_ranks(tmp_path):
    """A 4000x4000 image (declared in the HDF5 header, never written) on 10**6 ranks."""
    import h5py
    import numpy as np

    from distnet.config import load_experiment_text
    from distnet.experiments.report import format_show
    from distnet.plan import plan_model
    from tests.tiny import CNN, experiment
    with h5py.File(tmp_path / "big.h5", "w") as f:
        for split in ("train", "test"):
            f.create_dataset(f"{split}/x", shape=(4, 1, 4000, 4000), dtype="f4", chunks=(1, 1, 500, 500))
            f[f"{split}/y"] = np.zeros(4, int)
        f.attrs["nclasses"] = 3
    exp = load_experiment_text(experiment(CNN, tmp_path / "big.h5", dist=True), "big.yaml")
    shape = tuple(exp.dataset.image_shape)
    layout = exp.layout(10**6, shape)
    assert tuple(layout.grid) == (1000, 1000)
    text = format_show(exp, "big.yaml", 10**6, layout, shape)
    assert "3x4x4" in text and "1x6x6" in text and "1/1/1/1" in text  # conv: tile, chunk, halo
    assert plan_model(exp.model, shape, layout.nspatial, grid=layout.grid).grid == (1000, 1000)

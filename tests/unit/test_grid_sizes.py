"""``distnet show`` / ``plan`` with a huge ``-n``: the per-axis formulas (geometry.extent)
against the per-rank halo plans, exhaustively on small cases, and huge rank counts answering
(no timing is asserted); grid choice for lines and volumes (1-D and 3-D grids)."""
import itertools

import numpy as np
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


# -- grids of any number of axes ---------------------------------------------------------------------

def _brute_grids(n, ndim):
    return [g for g in itertools.product(range(1, n + 1), repeat=ndim) if int(np.prod(g)) == n]


@pytest.mark.parametrize("n", range(1, 37))
def test_three_axis_grids_brute_force(n):
    """Every 3-D grid of n ranks that fits the volumes, most cubic first (largest side, then the
    next), of permutations the one that cuts the slowest axes most; 1-D and 2-D alike."""
    from distnet.geometry.grid import factorizations, valid_grids
    for ndim, planes in ((1, [(40,)]), (2, [(5, 7), (3, 9)]), (3, [(9, 7, 5), (6, 8, 7, "label")])):
        assert factorizations(n, ndim) == sorted(_brute_grids(n, ndim))
        shapes = [p[:ndim] for p in planes]
        fits = [g for g in _brute_grids(n, ndim) if all(s >= q for shape in shapes for s, q in zip(shape, g))]
        got = valid_grids(n, planes)
        assert sorted(got) == sorted(fits)
        if ndim == 3:
            assert got == sorted(fits, key=lambda g: (sorted(g, reverse=True), [-p for p in g]))
        else:
            assert got == sorted(fits, key=lambda g: (max(g), g[0]))   # 2-D: as distnet always did
        assert (n in working_sizes(planes, limit=40)) == bool(fits)
        if fits:
            assert choose_grid(n, planes) == got[0]


@pytest.mark.parametrize("n,grid", [(1, (1, 1, 1)), (2, (2, 1, 1)), (4, (2, 2, 1)), (6, (3, 2, 1)),
                                    (8, (2, 2, 2)), (12, (3, 2, 2)), (16, (4, 2, 2)), (27, (3, 3, 3))])
def test_choose_grid_of_volumes(n, grid):
    assert choose_grid(n, [(64, 64, 64)]) == grid
    assert choose_grid(n, ndim=3) == grid
    assert choose_grid(n, [(64,)]) == (n,)


def test_volume_grid_errors_name_axes_and_working_counts():
    from distnet.geometry.grid import check_grid
    with pytest.raises(TopologyError) as e:
        choose_grid(7, [(4, 3, 2, "the input volumes")])
    msg = str(e.value)
    assert "7x1x1 fails on volume 4x3x2 (the input volumes): 4 slices < 7" in msg
    assert "1x7x1 fails on volume 4x3x2 (the input volumes): 3 rows < 7" in msg
    assert "1x1x7 fails on volume 4x3x2 (the input volumes): 2 columns < 7" in msg
    works = [n for n in range(1, 17) if _brute_fits(n, (4, 3, 2))]
    assert f"Rank counts that work: {', '.join(map(str, works))}" in msg
    assert check_grid([2, 2, "2"], 8, [(9, 7, 5)]) == (2, 2, 2)
    with pytest.raises(TopologyError, match=r"grid 1x1x6 cannot cut volume 9x7x5: 5 columns < 6: every "
                                            r"rank must own at least one slice, one row and one column"):
        check_grid((1, 1, 6), 6, [(9, 7, 5)])
    with pytest.raises(TopologyError, match=r"grid 2x2 has 2 axes, but the arrays it must cut have 3 .*"
                                            r"give \[Pz, Py, Px\]"):
        check_grid((2, 2), 4, [(9, 7, 5)])
    with pytest.raises(TopologyError, match=r"grid 2x2x2 needs 8 ranks, but the run has 6\. Grids of 6 "
                                            r"spatial ranks that fit: 3x2x1, 3x1x2, 2x3x1"):
        check_grid((2, 2, 2), 6, [(9, 7, 5)])
    with pytest.raises(TopologyError, match="same number of axes"):
        choose_grid(4, [(9, 7, 5), (9, 7)])


def _brute_fits(n, shape):
    return any(all(s >= q for s, q in zip(shape, g)) for g in _brute_grids(n, len(shape)))


def test_layout_of_volumes():
    """resolve_layout and GridLayout.position with a 3-D grid: world rank = ((d * pipe + p) * Pz
    + iz) * Py + iy) * Px + ix; a run without dist_flag has a 1x1x1 grid."""
    from distnet.geometry.grid import resolve_layout
    planes = [(9, 7, 5, "the input volumes")]
    layout = resolve_layout(16, dist_flag=True, data=2, planes=planes)
    assert layout.grid == (2, 2, 2) and layout.nspatial == 8 and layout.size == 16
    assert str(layout) == "data 2 x pipe 1 x grid 2x2x2"
    for rank in range(16):
        pos = layout.position(rank)
        iz, iy, ix = pos.coords
        assert ((pos.data_index * 1 + pos.pipe_index) * 2 + iz) * 4 + iy * 2 + ix == rank
    assert resolve_layout(6, dist_flag=True, grid=(1, 3, 2), planes=planes).grid == (1, 3, 2)
    assert resolve_layout(1, planes=planes).grid == (1, 1, 1)
    assert resolve_layout(3, dist_flag=True, dist_mode="datapar", planes=planes).grid == (1, 1, 1)


def test_extents_of_volumes_against_the_halo_plans():
    windows = [Window(3, 1, 1, 1), Window(2, 2), Window(5, 2, 2, 1), Window(3, 1, 2, 2, 2)]
    for shape, grid in (((9, 7, 5), (3, 2, 1)), ((8, 8, 8), (2, 2, 2)), ((23,), (4,))):
        for w in windows:
            ws = [w] * len(shape)
            plans = [plan_halo(shape, *ws, grid, c) for c in grid_coords(grid)]
            sides = [tuple(max(0, v) for (o0, o1), (c0, c1), n in zip(q.own.spans, q.chunk.spans, shape)
                           for v in (o0 - max(c0, 0), min(c1, n) - o1)) for q in plans]
            halo, chunk = halo_extents(shape, *ws, grid)
            assert halo == tuple(max(s[k] for s in sides) for k in range(2 * len(shape)))
            assert chunk.shape == tuple(max(q.chunk.shape[a] for q in plans) for a in range(len(shape)))
            assert largest_tile(shape, grid).shape == tuple(max(q.own.shape[a] for q in plans)
                                                            for a in range(len(shape)))


def test_huge_rank_counts_of_volumes_answer():
    assert choose_grid(10**6, [(4000, 4000, 4000)]) == (100, 100, 100)
    with pytest.raises(TopologyError, match=r"Rank counts that work: 1, 2, 3"):
        choose_grid(10**6 + 3, [(12, 10, 9)])


def test_the_experiment_grid_key_takes_two_or_three_sides_and_text(tmp_path):
    """``grid: "2x3"`` is [2, 3]; a grid of three sides for a model of images is refused at the
    key's line, naming the axes; malformed grids are configuration errors at the key."""
    from distnet.config import load_experiment_text
    from distnet.errors import ConfigError
    from tests.tiny import CNN, experiment
    text = experiment(CNN, tmp_path / "d.h5", dist=True)

    def load(grid):
        return load_experiment_text(text.replace("dist_flag: True,", f"dist_flag: True, grid: {grid},", 1), "g.yaml")
    assert load('"2x3"').grid == (2, 3) and load("[2, 3]").grid == (2, 3) and load("2").grid == (2, 2)
    assert tuple(load('"2X3"').layout(6, (1, 12, 10)).grid) == (2, 3)
    assert load('"2x2x2"').grid == load("[2, 2, 2]").grid == (2, 2, 2)
    with pytest.raises(TopologyError) as e:
        load("[2, 2, 2]").layout(8, (1, 12, 10))
    assert str(e.value).startswith("g.yaml:1: key 'grid': grid 2x2x2 has 3 axes, but the arrays it must "
                                   "cut have 2"), e.value
    for bad in ('"2x"', '"4"', "[1, 2, 3, 4]", "[2, 0]", "true"):
        with pytest.raises(ConfigError, match="grid"):
            load(bad)

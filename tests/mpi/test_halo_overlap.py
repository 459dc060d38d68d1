"""GlobalArray.exchange_begin / HaloRequest.finish: the chunk is the one exchange() builds, and
before finish() it is already right wherever the early outputs (geometry.overlap) read."""
import numpy as np
import pytest

from distnet.comm import GlobalArray
from distnet.geometry import Box, Window, plan_halo
from distnet.geometry.overlap import border_boxes, early_output_box

MPI_SIZES = (1, 2, 4)

PLANE = (13, 11)
WINDOWS = {"3x3s1p1": Window(3, 1, 1, 1), "5x5s1p0": Window(5), "3x3s2p1": Window(3, 2, 1, 1),
           "2x2s2": Window(2, 2)}
GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 4)]


@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("host_staging", [False, True], ids=["direct", "staged"])
def test_begin_finish_equals_exchange_and_early_part_is_ready(mpi, topologies, grid, window, host_staging):
    mpi.skip_unless(grid[0] * grid[1] == mpi.size, f"grid {grid} needs {grid[0] * grid[1]} ranks")
    topo = topologies(grid)
    w = WINDOWS[window]
    plan = plan_halo(PLANE, w, w, grid, topo.coords)
    ga = GlobalArray(plan, topo.spatial, tag=3, host_staging=host_staging)
    x = np.random.RandomState(1).standard_normal((2, 3) + PLANE)
    own = np.ascontiguousarray(x[(Ellipsis,) + plan.own.relative_to(Box(0, PLANE[0], 0, PLANE[1]))])
    expect = ga.exchange(own)
    pending = ga.exchange_begin(own, out=np.zeros_like(expect))
    early_chunk = pending.chunk.copy()          # what a layer sees while the ghosts fly
    pending.test()
    got = pending.finish()
    assert got is pending.chunk and pending.finish() is got
    np.testing.assert_array_equal(got, expect)
    early = early_output_box(plan, w, w)
    c = plan.chunk
    for i in range(early.y0, early.y1):         # every input an early output reads is ready
        for j in range(early.x0, early.x1):
            ys = slice(i * w.stride - w.pad_lo - c.y0, i * w.stride - w.pad_lo - c.y0 + w.size)
            xs = slice(j * w.stride - w.pad_lo - c.x0, j * w.stride - w.pad_lo - c.x0 + w.size)
            np.testing.assert_array_equal(early_chunk[..., ys, xs], expect[..., ys, xs])
    assert sum(b.size for b in border_boxes(plan.out_tile, early)) + early.size == plan.out_tile.size

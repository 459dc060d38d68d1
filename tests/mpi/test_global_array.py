"""GlobalArray halo exchange and its adjoint against global oracles, on many grids and windows,
in 1, 2 and 3 spatial axes (lines, planes, volumes; the decoder rules of a U-Net included).

Every rank builds the same global input (same seed), cuts its own tile, runs the exchange, and
compares with the slice of the zero-padded global array. A (grid, window) case runs only on the
launch size ``Py * Px`` (``Pz * Py * Px``; deselected otherwise).
"""
import time

import numpy as np
import pytest

from distnet.comm import GlobalArray, Topology
from distnet.geometry import (Box, Crop, LinearUpsample, NearestUpsample, TransposedWindow, Window,
                              grid_coords, plan_halo, same_padding, tile_of)
from distnet.errors import GeometryError

MPI_SIZES = (1, 2, 3, 4, 6, 8, 9)

B, C = 2, 3
PLANE = (13, 11)  # uneven tiles on every grid below
GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 1), (1, 3), (3, 1), (2, 3), (3, 2), (3, 3)]
# name -> (window along y, window along x)
WINDOWS = {
    "3x3s1p1": (Window(3, 1, 1, 1), Window(3, 1, 1, 1)),
    "5x5s1p0": (Window(5), Window(5)),
    "2x2s2": (Window(2, 2), Window(2, 2)),
    "3x3s2p1": (Window(3, 2, 1, 1), Window(3, 2, 1, 1)),
    "11x11s1p5_wide": (Window(11, 1, 5, 5), Window(11, 1, 5, 5)),  # halo 5 > 3-5 row tiles
    "3x5_rect": (Window(3, 1, 1, 1), Window(5, 2, 2, 1)),
    "4x4_same": (Window(4, 1, *same_padding(4)), Window(4, 1, *same_padding(4))),
    "2x2s3_gaps": (Window(2, 3), Window(2, 3)),  # chunks skip input rows/cols
    "2x2p3": (Window(2, 1, 3, 3), Window(2, 1, 3, 3)),  # padding wider than the window
}
IMAGE = Box(0, PLANE[0], 0, PLANE[1])
MARGIN = 8  # zero border of the padded oracle, wider than any padding above


def _setup(mpi, topologies, grid, window, host_staging=False):
    mpi.skip_unless(grid[0] * grid[1] == mpi.size, f"grid {grid} needs {grid[0] * grid[1]} ranks")
    topo = topologies(grid)
    wy, wx = WINDOWS[window]
    plan = plan_halo(PLANE, wy, wx, grid, topo.coords)
    return topo, plan, GlobalArray(plan, topo.spatial, tag=7, host_staging=host_staging)


def _global(seed, shape=(B, C) + PLANE, dtype=np.float64):
    return np.random.RandomState(seed).standard_normal(shape).astype(dtype)


def _padded(x):
    """``x (B, C, *spatial)`` zero-padded by MARGIN on its spatial axes."""
    return np.pad(x, ((0, 0), (0, 0)) + ((MARGIN, MARGIN),) * (x.ndim - 2))


def _crop(a, box):
    """The ``box`` (global coordinates) of an array padded by MARGIN."""
    return a[(Ellipsis,) + tuple(slice(lo + MARGIN, hi + MARGIN) for lo, hi in box.spans)]


def _own(x, plan):
    """This rank's input tile of a global array ``x``."""
    return np.ascontiguousarray(x[(Ellipsis,) + plan.own.relative_to(IMAGE)])


def _grids(grids):
    """``grid`` parameters, each marked to run only at world size ``Py * Px``."""
    return [pytest.param(g, id=f"{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(g[0] * g[1]))
            for g in grids]


cases = pytest.mark.parametrize("grid", _grids(GRIDS))
windows = pytest.mark.parametrize("window", list(WINDOWS))
# Messages handed to MPI as they are, or through host mirrors (the path of device arrays with an
# MPI that is not CUDA-aware; numpy arrays take it here so that it is checked on every machine).
staging = pytest.mark.parametrize("host_staging", [False, True], ids=["direct", "staged"])


@cases
@windows
@staging
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_exchange_equals_padded_global_slice(mpi, topologies, grid, window, host_staging, dtype):
    topo, plan, ga = _setup(mpi, topologies, grid, window, host_staging)
    x = _global(1, dtype=dtype)
    chunk = ga.get_fprop_view(_own(x, plan))
    assert chunk.shape == (B, C) + plan.chunk.shape and chunk.dtype == dtype
    np.testing.assert_array_equal(chunk, _crop(_padded(x), plan.chunk))


@cases
@windows
def test_adjoint_dot_product(mpi, topologies, grid, window):
    topo, plan, ga = _setup(mpi, topologies, grid, window)
    _check_dot_product(mpi, plan, ga, 1000)


def _check_dot_product(mpi, plan, ga, seed):
    """sum_ranks <exchange(x), y> == sum_ranks <x, exchange_adjoint(y)> for random x and y."""
    rng = np.random.RandomState(seed + mpi.rank)
    x = rng.standard_normal((B, C) + plan.own.shape)
    y = rng.standard_normal((B, C) + plan.chunk.shape)
    lhs = mpi.comm.allreduce(float(np.vdot(ga.exchange(x), y)))
    rhs = mpi.comm.allreduce(float(np.vdot(x, ga.exchange_adjoint(y))))
    assert abs(lhs - rhs) <= 1e-12 * max(abs(lhs), abs(rhs), 1.0)


@cases
@windows
@staging
def test_adjoint_equals_global_scatter_add(mpi, topologies, grid, window, host_staging):
    """My tile of exchange_adjoint = my tile of the sum of every rank's chunk gradient placed at its
    chunk box, cropped to the image (padding dropped)."""
    topo, plan, ga = _setup(mpi, topologies, grid, window, host_staging)
    mine, expect = _adjoint_oracle(PLANE, lambda c: plan_halo(PLANE, *WINDOWS[window], grid, c), grid,
                                   topo.coords, 2000)
    np.testing.assert_allclose(ga.get_bprop_view(mine), expect, rtol=1e-13, atol=1e-13)


def _adjoint_oracle(shape, plan_of, grid, coords, seed):
    """``(my chunk gradient, my tile of the sum of every rank's chunk gradient placed at its
    chunk box)``: what ``exchange_adjoint`` must return, padding dropped. ``plan_of(coords)`` is
    a rank's plan; rank r of the Cartesian communicator has the row-major coordinates r."""
    total = _padded(np.zeros((B, C) + shape))
    for r, c in enumerate(grid_coords(grid)):
        box = plan_of(c).chunk
        g = np.random.RandomState(seed + r).standard_normal((B, C) + box.shape)
        _crop(total, box)[...] += g
        if c == tuple(coords):
            mine = g
    return mine, _crop(total, plan_of(coords).own)


@pytest.mark.parametrize("grid", _grids(g for g in GRIDS if g[0] * g[1] > 1))
def test_wide_halo_reaches_non_neighbours(mpi, topologies, grid):
    """With halos wider than a tile, some rank receives from a rank two tiles away (the case neon
    could not do); the chunk is still the exact global slice (checked above)."""
    topo, plan, ga = _setup(mpi, topologies, grid, "11x11s1p5_wide")
    far = any(max(abs(p - c) for p, c in zip(t.peer, topo.coords)) > 1 for t in plan.recvs)
    if max(grid) >= 3:
        assert mpi.comm.allreduce(far, op=_lor()), "no rank received from a non-neighbour"


def _lor():
    from mpi4py import MPI
    return MPI.LOR


@cases
def test_buffers_reused_across_calls_and_batch_sizes(mpi, topologies, grid):
    topo, plan, ga = _setup(mpi, topologies, grid, "3x3s1p1")
    for step, batch in enumerate([2, 2, 5, 2]):
        x = _global(10 + step, shape=(batch, C) + PLANE)
        chunk = ga.exchange(_own(x, plan))
        np.testing.assert_array_equal(chunk, _crop(_padded(x), plan.chunk))
    assert len(ga._buffers) == 2  # one buffer set per (B, C, dtype): B=2 and B=5


@cases
def test_two_layers_interleaved_with_skewed_ranks(mpi, topologies, grid):
    """Two layers on one communicator (distinct tags); rank 0 lags so that the others post the next
    layer's messages early. Forward A, forward B, adjoint B, adjoint A all match their oracles."""
    topo, _, _ = _setup(mpi, topologies, grid, "3x3s1p1")
    plans = [plan_halo(PLANE, *WINDOWS[w], grid, topo.coords) for w in ("5x5s1p0", "11x11s1p5_wide")]
    layers = [GlobalArray(p, topo.spatial, tag=t) for p, t in zip(plans, (1, 2))]
    xs = [_global(20 + i) for i in range(2)]
    ys = [np.random.RandomState(30 + mpi.rank).standard_normal((B, C) + p.chunk.shape) for p in plans]
    chunks, grads = [], []
    for layer, plan, x in zip(layers, plans, xs):
        if mpi.rank == 0:
            time.sleep(0.05)
        chunks.append(layer.exchange(_own(x, plan)))
    for layer, y in reversed(list(zip(layers, ys))):
        if mpi.rank == 0:
            time.sleep(0.05)
        grads.append(layer.exchange_adjoint(y))
    for chunk, plan, x in zip(chunks, plans, xs):
        np.testing.assert_array_equal(chunk, _crop(_padded(x), plan.chunk))
    for g, (layer, x, y) in zip(grads, reversed(list(zip(layers, xs, ys)))):
        x_local = _own(x, layer.plan)
        lhs = mpi.comm.allreduce(float(np.vdot(layer.exchange(x_local), y)))
        rhs = mpi.comm.allreduce(float(np.vdot(x_local, g)))
        assert abs(lhs - rhs) <= 1e-12 * max(abs(lhs), 1.0)


@pytest.mark.parametrize("grid", _grids([(1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (3, 3)]))
def test_chunks_entirely_in_padding(mpi, topologies, grid):
    """On a 5x7 plane a 1x1 window with padding 3 gives border ranks chunks made only of padding
    (no interior, no receives) while their own tile still goes to others."""
    plane, w = (5, 7), Window(1, 1, 3, 3)
    topo = topologies(grid)
    plans = {c: plan_halo(plane, w, w, grid, c) for c in grid_coords(grid)}
    plan = plans[topo.coords]
    ga = GlobalArray(plan, topo.spatial, tag=3)
    x = _global(5, shape=(B, C) + plane)
    image = Box(0, plane[0], 0, plane[1])
    chunk = ga.exchange(np.ascontiguousarray(x[(Ellipsis,) + plan.own.relative_to(image)]))
    np.testing.assert_array_equal(chunk, _crop(_padded(x), plan.chunk))
    mine, expect = _adjoint_oracle(plane, plans.get, grid, topo.coords, 50)
    np.testing.assert_allclose(ga.exchange_adjoint(mine), expect, rtol=1e-13, atol=1e-13)


def test_topology_coords_match_tiles(comm):
    """The default grid's Cartesian coordinates follow the row-major rank layout, and the tiles of
    all ranks cover the plane once."""
    topo = Topology.from_world(planes=[PLANE], world=comm)
    try:
        assert topo.coords == divmod(comm.rank, topo.grid[1])
        assert topo.spatial.Get_rank() == comm.rank
        tiles = comm.allgather(tile_of(PLANE, topo.grid, topo.coords))
        cover = np.zeros(PLANE, int)
        for t in tiles:
            cover[t.y0:t.y1, t.x0:t.x1] += 1
        assert (cover == 1).all()
    finally:
        topo.free()


# -- any number of axes ------------------------------------------------------------------------------

ND_SHAPES = {1: (23,), 2: (13, 11), 3: (9, 7, 5)}
# grids by launch size: 1-D, 2-D and 3-D (3x2x1 on 6 ranks, 2x2x2 on 8)
ND_GRIDS = [(1,), (1, 1, 1), (2,), (2, 1, 1), (1, 1, 2), (4,), (2, 2, 1), (1, 2, 2), (6,), (3, 2, 1),
            (1, 2, 3), (8,), (2, 4), (2, 2, 2), (3,), (3, 1, 1), (9,), (3, 3, 1)]
# name -> the rules of the axes of an input shape
ND_RULES = {
    "3s1p1": lambda shape: [Window(3, 1, 1, 1)] * len(shape),
    "mixed": lambda shape: [Window(2, 2), Window(3, 1, 1, 1), Window(5, 2, 2, 1)][-len(shape):],
    "wide7": lambda shape: [Window(7, 1, 3, 3)] * len(shape),         # halo 3 > tiles of 1-3
    "dilated": lambda shape: [Window(3, 1, 2, 2, 2)] * len(shape),
    "transposed3s2p1": lambda shape: [TransposedWindow(3, 2, 1, 1, 1)] * len(shape),
    "nearest2": lambda shape: [NearestUpsample(2)] * len(shape),
    "linear2": lambda shape: [LinearUpsample(2, n) for n in shape],
    "crop": lambda shape: [Crop.center(n, n - 1 - (n > 6)) for n in shape],
}


def _nd_cases():
    """``(grid, rules name)`` for which every rank's plan exists (decided at collection, alike on
    every rank), each marked for its launch size."""
    cases = []
    for grid in ND_GRIDS:
        shape = ND_SHAPES[len(grid)]
        for name, rules in ND_RULES.items():
            try:
                plan_halo(shape, *rules(shape), grid, (0,) * len(grid))
            except GeometryError:
                continue
            cases.append(pytest.param(grid, name, id=f"{'x'.join(map(str, grid))}-{name}",
                                      marks=pytest.mark.mpi_size(int(np.prod(grid)))))
    return cases


nd_cases = pytest.mark.parametrize("grid,rules", _nd_cases())


def _nd_setup(topologies, grid, rules, comm=None, host_staging=False):
    topo = topologies(grid)
    shape = ND_SHAPES[len(grid)]
    plan = plan_halo(shape, *ND_RULES[rules](shape), grid, topo.coords)
    return shape, plan, GlobalArray(plan, comm or topo.spatial, tag=11, host_staging=host_staging)


@nd_cases
@staging
def test_nd_exchange_and_adjoint_against_global_oracles(mpi, topologies, grid, rules, host_staging):
    """The chunk is the zero-padded global slice; the adjoint is the global scatter-add of every
    rank's chunk gradient, cropped to my tile."""
    shape, plan, ga = _nd_setup(topologies, grid, rules, host_staging=host_staging)
    x = _global(3, shape=(B, C) + shape)
    chunk = ga.exchange(np.ascontiguousarray(_crop(_padded(x), plan.own)))
    np.testing.assert_array_equal(chunk, _crop(_padded(x), plan.chunk))
    mine, expect = _adjoint_oracle(shape, lambda c: plan_halo(shape, *ND_RULES[rules](shape), grid, c), grid,
                                   plan.coords, 60)
    np.testing.assert_allclose(ga.exchange_adjoint(mine), expect, rtol=1e-13, atol=1e-13)


@nd_cases
def test_nd_adjoint_dot_product(mpi, topologies, grid, rules):
    shape, plan, ga = _nd_setup(topologies, grid, rules)
    _check_dot_product(mpi, plan, ga, 4000)


class CountingComm:
    """The spatial communicator, counting the messages handed to it: ``sent[(dest, tag)]`` =
    list of payload sizes in bytes."""

    def __init__(self, comm):
        self._comm, self.sent = comm, {}

    def __getattr__(self, name):
        return getattr(self._comm, name)

    def Isend(self, buf, dest, tag):
        self.sent.setdefault((dest, tag), []).append(buf.nbytes)
        return self._comm.Isend(buf, dest=dest, tag=tag)


@nd_cases
def test_nd_one_message_per_peer_and_direction(mpi, topologies, grid, rules):
    """Forward, a rank sends one message to each rank whose chunk meets its tile, of exactly that
    box; backward, one to each rank whose tile meets its chunk (brute force over all ranks). On
    2x2x2 ranks a 3x3x3 window is 7 messages each way: 3 faces, 3 edges, 1 corner."""
    topo = topologies(grid)
    counting = CountingComm(topo.spatial)
    shape, plan, ga = _nd_setup(topologies, grid, rules, comm=counting)
    ga.exchange_adjoint(np.ones((B, C) + plan.chunk.shape))
    ga.exchange(np.ones((B, C) + plan.own.shape))
    fwd, bwd = {}, {}
    for r, coords in enumerate(grid_coords(grid)):
        if coords == plan.coords:
            continue
        other = plan_halo(shape, *ND_RULES[rules](shape), grid, coords)
        if not plan.own.intersect(other.chunk).is_empty():
            fwd[(r, 22)] = [B * C * 8 * plan.own.intersect(other.chunk).size]
        if not other.own.intersect(plan.chunk).is_empty():
            bwd[(r, 23)] = [B * C * 8 * other.own.intersect(plan.chunk).size]
    assert counting.sent == {**fwd, **bwd}
    if grid == (2, 2, 2) and rules == "3s1p1":
        coords = grid_coords(grid)
        axes_crossed = [sum(a != b for a, b in zip(coords[r], plan.coords)) for r, _ in fwd]
        assert sorted(axes_crossed) == [1, 1, 1, 2, 2, 2, 3]

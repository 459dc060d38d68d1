"""distnet.geometry without MPI: partitions, window rules and halo plans against brute force."""
import itertools

import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.geometry import (Box, Window, block_of, block_partition, chunk_box, grid_coords,
                              output_plane, plan_halo, same_padding, tile_of)

# -- block partition ---------------------------------------------------------------------------


@pytest.mark.parametrize("length", range(1, 41))
def test_block_partition_properties(length):
    for parts in range(1, length + 1):
        blocks = block_partition(length, parts)
        sizes = [n for _, n in blocks]
        assert len(blocks) == parts
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
        assert sum(sizes) == length
        assert sizes == sorted(sizes, reverse=True)  # the first length % parts blocks are longer
        assert sum(n > length // parts for n in sizes) == length % parts
        offsets = [o for o, _ in blocks]
        assert offsets == [sum(sizes[:j]) for j in range(parts)]  # contiguous, in order, from 0
        assert [block_of(length, parts, j) for j in range(parts)] == blocks


@pytest.mark.parametrize("length,parts", [(3, 4), (0, 1), (5, 0), (5, -1)])
def test_block_partition_errors(length, parts):
    with pytest.raises(GeometryError):
        block_partition(length, parts)


def test_neon_example_split():
    # neon's split (docs/neon-semantics.md#grid-and-tiles): L=28 over 2 -> 14 + 14;
    # L=13 over 3 -> 5, 4, 4
    assert block_partition(28, 2) == [(0, 14), (14, 14)]
    assert block_partition(13, 3) == [(0, 5), (5, 4), (9, 4)]


@pytest.mark.parametrize("plane,grid", [((7, 5), (1, 1)), ((7, 5), (2, 3)), ((9, 9), (3, 3)),
                                        ((4, 11), (4, 1)), ((6, 6), (1, 6))])
def test_tiles_cover_plane_once_in_rank_order(plane, grid):
    coords = grid_coords(grid)
    assert coords == sorted(coords) and len(coords) == grid[0] * grid[1]  # row-major = rank order
    assert coords == [divmod(r, grid[1]) for r in range(len(coords))]
    cover = np.zeros(plane, int)
    for c in coords:
        t = tile_of(plane, grid, c)
        cover[t.y0:t.y1, t.x0:t.x1] += 1
    assert (cover == 1).all()


def test_box_basics():
    a, b = Box(0, 4, 1, 5), Box(2, 7, -3, 2)
    assert a.shape == (4, 4) and a.size == 16
    assert a.intersect(b) == Box(2, 4, 1, 2)
    assert a.intersect(Box(4, 6, 0, 9)).is_empty() and a.intersect(Box(4, 6, 0, 9)).size == 0
    assert Box(5, 3, 0, 1).size == 0
    assert Box(2, 4, 3, 5).relative_to(Box(1, 9, 2, 9)) == (slice(1, 3), slice(1, 3))
    assert Box(-2, 0, -1, 1).relative_to(Box(-3, 4, -1, 5)) == (slice(1, 3), slice(0, 2))


# -- window rule -------------------------------------------------------------------------------

def _reads(window, i):
    """Input positions read by output ``i`` (brute force, from the definition)."""
    start = i * window.stride - window.pad_lo
    return range(start, start + window.size)


def _brute_output_length(window, length):
    """Number of outputs whose window stays inside the padded input ``[-pad_lo, L + pad_hi)``."""
    n = 0
    while _reads(window, n)[-1] < length + window.pad_hi:
        n += 1
    return n


WINDOW_GRID = list(itertools.product(range(1, 8), range(1, 5), range(0, 4), range(0, 4)))


@pytest.mark.parametrize("size,stride,pad_lo,pad_hi", WINDOW_GRID)
def test_window_output_length_and_input_span_brute_force(size, stride, pad_lo, pad_hi):
    w = Window(size, stride, pad_lo, pad_hi)
    for length in range(1, 21):
        n = _brute_output_length(w, length)
        if n == 0:
            with pytest.raises(GeometryError):
                w.output_length(length)
            continue
        assert w.output_length(length) == n
        for start in range(n):
            for count in range(1, n - start + 1):
                pos = [p for i in range(start, start + count) for p in _reads(w, i)]
                assert w.input_span(start, count) == (min(pos), max(pos) + 1)


@pytest.mark.parametrize("size", range(1, 10))
def test_same_padding_keeps_length(size):
    lo, hi = same_padding(size)
    assert lo + hi == size - 1 and lo - hi in (0, 1)
    for length in range(1, 15):
        assert Window(size, 1, lo, hi).output_length(length) == length


@pytest.mark.parametrize("args", [(0,), (3, 0), (3, 1, -1, 0), (3, 1, 0, -2)])
def test_window_rejects_bad_parameters(args):
    with pytest.raises(GeometryError):
        Window(*args)


# -- halo plans --------------------------------------------------------------------------------

GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 1), (2, 3), (3, 2), (3, 3), (4, 1), (1, 4),
         (2, 4), (4, 4), (1, 5)]
WINDOWS = {
    "1x1": (Window(1), Window(1)),
    "3x3s1p1": (Window(3, 1, 1, 1), Window(3, 1, 1, 1)),
    "5x5": (Window(5), Window(5)),
    "2x2s2": (Window(2, 2), Window(2, 2)),
    "3x3s2p1": (Window(3, 2, 1, 1), Window(3, 2, 1, 1)),
    "4x4same": (Window(4, 1, *same_padding(4)), Window(4, 1, *same_padding(4))),
    "3x5rect": (Window(3, 1, 1, 0), Window(5, 3, 2, 1)),
    "2x2s3gaps": (Window(2, 3), Window(2, 3)),
    "9x9p4wide": (Window(9, 1, 4, 4), Window(9, 1, 4, 4)),
    "7x7s2p3": (Window(7, 2, 3, 3), Window(7, 2, 3, 3)),
    "2x2p3": (Window(2, 1, 3, 3), Window(2, 1, 3, 3)),  # padding wider than the window
    "1x1p3": (Window(1, 1, 3, 3), Window(1, 1, 3, 3)),  # on 5x7: border chunks are all padding
}
PLANES = [(13, 11), (16, 16), (9, 20), (5, 7)]


def _plans(plane, window, grid):
    wy, wx = WINDOWS[window]
    return {c: plan_halo(plane, wy, wx, grid, c) for c in grid_coords(grid)}


def _fits(plane, window, grid):
    try:
        out = output_plane(plane, *WINDOWS[window])
    except GeometryError:
        return False
    return all(p >= g for p, g in zip(plane + out, grid + grid))


CASES = [(p, w, g) for p in PLANES for w in WINDOWS for g in GRIDS if _fits(p, w, g)]


@pytest.mark.parametrize("plane,window,grid", CASES, ids=[f"{p[0]}x{p[1]}-{w}-{g[0]}x{g[1]}"
                                                          for p, w, g in CASES])
def test_plan_halo_is_a_consistent_partition(plane, window, grid):
    wy, wx = WINDOWS[window]
    plans = _plans(plane, window, grid)
    H, W = plane
    image = Box(0, H, 0, W)
    out = output_plane(plane, wy, wx)
    out_cover = np.zeros(out, int)
    for coords, plan in plans.items():
        assert plan.in_plane == plane and plan.out_plane == out
        assert plan.grid == grid and plan.coords == coords
        assert plan.own == tile_of(plane, grid, coords)
        assert plan.out_tile == tile_of(out, grid, coords)
        t = plan.out_tile
        out_cover[t.y0:t.y1, t.x0:t.x1] += 1
        # chunk = exactly what the outputs of my tile read (brute force over both axes)
        ys = [p for i in range(t.y0, t.y1) for p in _reads(wy, i)]
        xs = [p for i in range(t.x0, t.x1) for p in _reads(wx, i)]
        assert plan.chunk == Box(min(ys), max(ys) + 1, min(xs), max(xs) + 1)
        assert plan.chunk == chunk_box(t, wy, wx)
        # every chunk pixel is exactly one of: interior, one received box, padding
        cover = np.zeros(plan.chunk.shape, int)
        if not plan.interior.is_empty():
            assert plan.interior == plan.own.intersect(plan.chunk)
            cover[plan.interior.relative_to(plan.chunk)] += 1
        peers = [tr.peer for tr in plan.recvs]
        assert peers == sorted(peers) and coords not in peers and len(set(peers)) == len(peers)
        for tr in plan.recvs:
            assert not tr.box.is_empty()
            assert tr.box == tile_of(plane, grid, tr.peer).intersect(plan.chunk)
            cover[tr.box.relative_to(plan.chunk)] += 1
        inside = np.zeros(plan.chunk.shape, bool)
        clipped = plan.chunk.intersect(image)
        if not clipped.is_empty():
            inside[clipped.relative_to(plan.chunk)] = True
        cover[~inside] += 1  # padding
        assert (cover == 1).all(), f"rank {coords}: chunk pixels covered {np.unique(cover)} times"
        assert plan.ghost_count() == sum(tr.box.size for tr in plan.recvs)
        # only peers whose tile meets my chunk send; every one of them does
        for other in grid_coords(grid):
            meets = not tile_of(plane, grid, other).intersect(plan.chunk).is_empty()
            assert (other in peers) == (meets and other != coords)
    assert (out_cover == 1).all()  # output tiles tile the output plane
    # a's send to b is b's receive from a, box for box
    for a, pa in plans.items():
        sends = {tr.peer: tr.box for tr in pa.sends}
        assert list(sends) == sorted(sends)
        for b, pb in plans.items():
            recv_from_a = {tr.peer: tr.box for tr in pb.recvs}.get(a)
            assert sends.get(b) == recv_from_a
            if b in sends:
                assert sends[b] == pa.own.intersect(pb.chunk)


def test_wide_halo_needs_non_neighbours():
    """A 9-wide window on 3-column tiles reads tiles two grid steps away (neon could not)."""
    plan = plan_halo((12, 12), Window(9, 1, 4, 4), Window(9, 1, 4, 4), (4, 4), (0, 0))
    peers = {tr.peer for tr in plan.recvs}
    assert (0, 2) in peers and (2, 2) in peers


def test_chunk_entirely_in_padding():
    plan = plan_halo((5, 7), Window(1, 1, 3, 3), Window(1, 1, 3, 3), (4, 1), (0, 0))
    assert plan.chunk == Box(-3, 0, -3, 10)
    assert plan.interior.is_empty() and plan.recvs == ()
    assert [tr.peer for tr in plan.sends] == [(1, 0)]  # rows 0-1 are read by chunk rows 0..3


def test_neon_lf_example():
    """docs/neon-semantics.md#halo-extents: L=28, f=4, P=2 -> tile 0 has 14 own + 2 east columns
    and makes 13 outputs, tile 1 has 1 west column + 14 own and makes 12."""
    w = Window(4)
    p0 = plan_halo((28, 28), w, w, (1, 2), (0, 0))
    p1 = plan_halo((28, 28), w, w, (1, 2), (0, 1))
    assert p0.chunk == Box(0, 28, 0, 16) and p0.out_tile.shape == (25, 13)
    assert p1.chunk == Box(0, 28, 13, 28) and p1.out_tile.shape == (25, 12)


@pytest.mark.parametrize("plane,window,grid", [
    ((5, 5), "1x1", (6, 1)),        # input rows < grid rows
    ((5, 5), "1x1", (1, 6)),
    ((6, 6), "5x5", (3, 1)),        # output plane 2x2 < grid
    ((8, 8), "2x2s2", (1, 5)),      # output plane 4x4 < grid
])
def test_grid_too_fine_raises(plane, window, grid):
    with pytest.raises(GeometryError, match="grid cannot cut"):
        plan_halo(plane, *WINDOWS[window], grid, (0, 0))


def test_window_larger_than_input_raises():
    with pytest.raises(GeometryError, match="larger than the input"):
        plan_halo((4, 4), Window(5), Window(5), (1, 1), (0, 0))


# -- any number of axes ----------------------------------------------------------------------------

def test_box_in_one_and_three_axes():
    v = Box(1, 4, 0, 3, 2, 7)                     # z, y, x
    assert v.ndim == 3 and v.shape == (3, 3, 5) and v.size == 45
    assert (v.z0, v.z1, v.y0, v.y1, v.x0, v.x1) == (1, 4, 0, 3, 2, 7)
    assert v.spans == ((1, 4), (0, 3), (2, 7)) and Box.of_spans(v.spans) == v
    assert v.intersect(Box(0, 2, 1, 9, -1, 3)) == Box(1, 2, 1, 3, 2, 3)
    assert v.intersect(Box(4, 5, 0, 3, 2, 7)).is_empty()
    assert v.relative_to(Box(0, 9, -1, 9, 2, 9)) == (slice(1, 4), slice(1, 4), slice(0, 5))
    line = Box(-2, 3)
    assert line.shape == (5,) and line.x0 == -2 and line.relative_to(Box(-3, 9)) == (slice(1, 6),)
    with pytest.raises(AttributeError, match="y0"):
        line.y0
    with pytest.raises(AttributeError):
        v.lo = (0, 0, 0)
    assert repr(Box(0, 4, 1, 5)) == "Box(y0=0, y1=4, x0=1, x1=5)"
    assert repr(v) == "Box(z0=1, z1=4, y0=0, y1=3, x0=2, x1=7)"
    assert len({Box(0, 1), Box(0, 1), Box(0, 2)}) == 2 and Box(0, 1) != (0, 1)
    import pickle
    assert pickle.loads(pickle.dumps(v)) == v
    with pytest.raises(GeometryError):
        Box(0, 1, 2)


@pytest.mark.parametrize("shape,grid", [((17,), (4,)), ((9, 7, 5), (3, 2, 1)), ((9, 7, 5), (2, 2, 2)),
                                        ((4, 6, 5, 3), (2, 3, 1, 2))])
def test_tiles_cover_any_number_of_axes_in_rank_order(shape, grid):
    from distnet.geometry import coords_of, grid_rank
    coords = grid_coords(grid)
    assert coords == sorted(coords) and len(coords) == int(np.prod(grid))
    assert [grid_rank(grid, c) for c in coords] == list(range(len(coords)))
    assert [coords_of(grid, r) for r in range(len(coords))] == coords
    assert coords == [tuple(int(i) for i in np.unravel_index(r, grid)) for r in range(len(coords))]
    cover = np.zeros(shape, int)
    for c in coords:
        t = tile_of(shape, grid, c)
        assert t.shape == tuple(block_of(n, p, i)[1] for n, p, i in zip(shape, grid, c))
        cover[t.relative_to(Box.of_spans((0, n) for n in shape))] += 1
    assert (cover == 1).all()
    with pytest.raises(GeometryError, match="one entry per axis"):
        tile_of(shape, grid, coords[0][:-1])


ND_WINDOWS = {"3s1p1": Window(3, 1, 1, 1), "2s2": Window(2, 2), "5s2p2": Window(5, 2, 2, 2),
              "7p3wide": Window(7, 1, 3, 3), "3d2p2": Window(3, 1, 2, 2, 2)}
ND_CASES = [((23,), (1,)), ((23,), (3,)), ((23,), (7,)), ((9, 7, 5), (1, 1, 1)), ((9, 7, 5), (3, 2, 1)),
            ((9, 7, 5), (2, 2, 2)), ((8, 9, 6), (2, 3, 2))]


@pytest.mark.parametrize("window", list(ND_WINDOWS))
@pytest.mark.parametrize("shape,grid", ND_CASES)
def test_plan_halo_in_one_and_three_axes(shape, grid, window):
    from tests.geometry_oracles import check_plans, conv_reads
    w = ND_WINDOWS[window]
    try:
        out = output_plane(shape, *[w] * len(shape))
    except GeometryError:
        return
    if any(n < p for n, p in zip(out, grid)):
        with pytest.raises(GeometryError, match="grid cannot cut"):
            plan_halo(shape, *[w] * len(shape), grid, (0,) * len(grid))
        return
    check_plans(shape, [w] * len(shape), [conv_reads(w.size, w.stride, w.pad_lo, w.dilation)] * len(shape), grid)


def test_3d_halo_has_faces_edges_and_corners():
    """A 3x3x3 window on 2x2x2 ranks: each rank receives 3 faces, 3 edges and 1 corner, one
    message each; the middle rank of a 3x3x3 grid has all 26 neighbours."""
    w = Window(3, 1, 1, 1)
    for coords in grid_coords((2, 2, 2)):
        plan = plan_halo((8, 8, 8), w, w, w, (2, 2, 2), coords)
        sizes = sorted(t.box.size for t in plan.recvs)
        assert sizes == [1, 4, 4, 4, 16, 16, 16] and plan.ghost_count() == 61
        assert len(plan.sends) == 7
    middle = plan_halo((9, 9, 9), w, w, w, (3, 3, 3), (1, 1, 1))
    kinds = sorted(sum(a != 1 for a in t.peer) for t in middle.recvs)
    assert kinds == [1] * 6 + [2] * 12 + [3] * 8      # faces, edges, corners


def test_plan_halo_wants_one_rule_per_axis():
    with pytest.raises(GeometryError, match="one rule, grid axis and coordinate per axis"):
        plan_halo((8, 8, 8), Window(3), Window(3), (2, 2), (0, 0))


def test_a_grid_too_fine_for_a_volume_names_its_axes():
    w = Window(3, 1, 1, 1)
    with pytest.raises(GeometryError, match=r"a 1x1x3 grid cannot cut the 9x7x2 input volume: every rank "
                                            r"must own at least one slice, one row and one column"):
        plan_halo((9, 7, 2), w, w, w, (1, 1, 3), (0, 0, 0))

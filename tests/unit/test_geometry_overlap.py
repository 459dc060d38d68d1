"""early_output_box / border_boxes: the outputs computable before the halo arrives never read
a ghost pixel, and the early box plus the border strips cover the output tile exactly once."""
import itertools

import pytest

from distnet.geometry import Window
from distnet.geometry.halo import plan_halo
from distnet.geometry.overlap import border_boxes, early_output_box


def _window_rows(w, i):
    return range(i * w.stride - w.pad_lo, i * w.stride - w.pad_lo + w.size)


CASES = [(plane, (k, s, p), grid)
         for plane in [(9, 11), (16, 16), (7, 5)]
         for k, s, p in [(3, 1, 1), (5, 1, 0), (2, 2, 0), (3, 2, 1), (5, 1, 2), (1, 1, 0)]
         for grid in [(1, 1), (1, 2), (2, 2), (3, 1), (2, 3)]]


@pytest.mark.parametrize("plane,window,grid", CASES)
def test_early_outputs_read_no_ghost(plane, window, grid):
    k, s, p = window
    wy = wx = Window(k, s, p, p)
    for coords in itertools.product(range(grid[0]), range(grid[1])):
        try:
            plan = plan_halo(plane, wy, wx, grid, coords)
        except Exception:   # the grid cannot cut this plane
            return
        early = early_output_box(plan, wy, wx)
        t = plan.out_tile
        if not early.is_empty():
            assert t.y0 <= early.y0 <= early.y1 <= t.y1 and t.x0 <= early.x0 <= early.x1 <= t.x1
        ghosts = {(y, x) for tr in plan.recvs for y in range(tr.box.y0, tr.box.y1)
                  for x in range(tr.box.x0, tr.box.x1)}
        for i in range(early.y0, early.y1):
            for j in range(early.x0, early.x1):
                reads = {(y, x) for y in _window_rows(wy, i) for x in _window_rows(wx, j)}
                assert not reads & ghosts, (coords, i, j)
        if not plan.recvs:       # nothing to wait for: the whole tile is early
            assert early == t
        cover = [(y, x) for b in border_boxes(t, early) + ([early] if not early.is_empty() else [])
                 for y in range(b.y0, b.y1) for x in range(b.x0, b.x1)]
        assert sorted(cover) == [(y, x) for y in range(t.y0, t.y1) for x in range(t.x0, t.x1)]

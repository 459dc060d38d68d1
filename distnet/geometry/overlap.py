"""Which outputs of a window layer's tile can be computed before its halo arrives.

For overlapping a halo exchange with computation: the outputs whose input windows read only
this rank's own rows/cols and zero padding (never a ghost pixel) can be computed while the
ghosts are in flight (:meth:`distnet.comm.GlobalArray.exchange_begin`); the rest of the tile
(its border strips, :func:`border_boxes`) after they arrived. Pure index math.
"""
from .partition import Box


def _ready_span(lo, hi, own_lo, own_hi, image_len):
    """The input range of one axis available before any ghost arrives: the own range, widened
    over padding (positions < 0 or >= ``image_len``, zero everywhere) where it touches it."""
    a, b = max(lo, own_lo), min(hi, own_hi)
    if a >= b:
        return a, a
    if own_lo <= 0:
        a = lo
    if own_hi >= image_len:
        b = hi
    return a, b


def _outputs_inside(window, out_lo, out_hi, ready_lo, ready_hi):
    """Outputs ``i`` in ``[out_lo, out_hi)`` whose window lies inside ``[ready_lo, ready_hi)``."""
    s, p, k = window.stride, window.pad_lo, window.size
    first = max(out_lo, -(-(ready_lo + p) // s))   # ceil((ready_lo + p) / s)
    last = min(out_hi, (ready_hi + p - k) // s + 1)
    return (first, last) if first < last else (first, first)


def early_output_box(plan, window_y, window_x):
    """The :class:`Box` of ``plan.out_tile`` (global output coordinates) computable from the
    rank's own tile and the zero padding alone (empty when every output needs a ghost).

    plan : the layer's :class:`~distnet.geometry.HaloPlan`; window_y, window_x : its
    :class:`~distnet.geometry.Window` rules (the ones the plan was made with).
    """
    o, c, t = plan.own, plan.chunk, plan.out_tile
    H, W = plan.in_plane
    ry = _ready_span(c.y0, c.y1, o.y0, o.y1, H)
    rx = _ready_span(c.x0, c.x1, o.x0, o.x1, W)
    y = _outputs_inside(window_y, t.y0, t.y1, *ry)
    x = _outputs_inside(window_x, t.x0, t.x1, *rx)
    return Box(y[0], y[1], x[0], x[1])


def border_boxes(out_tile, early):
    """``out_tile`` minus ``early`` as at most 4 disjoint boxes (top and bottom strips of the
    full width, then left and right strips of the middle rows); the whole tile if ``early`` is
    empty."""
    if early.is_empty():
        return [out_tile]
    t = out_tile
    boxes = [Box(t.y0, early.y0, t.x0, t.x1), Box(early.y1, t.y1, t.x0, t.x1),
             Box(early.y0, early.y1, t.x0, early.x0), Box(early.y0, early.y1, early.x1, t.x1)]
    return [b for b in boxes if not b.is_empty()]

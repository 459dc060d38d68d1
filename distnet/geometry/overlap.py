"""Which outputs of a layer's tile can be computed before its halo arrives.

For overlapping a halo exchange with computation: the outputs whose input windows read only
this rank's own positions and zero padding (never a ghost) can be computed while the ghosts are
in flight (:meth:`distnet.comm.GlobalArray.exchange_begin`); the rest of the tile (its border
slabs, :func:`border_boxes`) after they arrived. Pure index math, for any number of axes.
"""
from .box import Box


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


def _first(lo, hi, ok):
    """The smallest ``i`` in ``[lo, hi)`` with ``ok(i)`` (``ok`` false, then true), else ``hi``."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _outputs_inside(rule, out_lo, out_hi, ready_lo, ready_hi):
    """Outputs ``i`` in ``[out_lo, out_hi)`` whose reads lie inside ``[ready_lo, ready_hi)``: a
    range, since spans are monotone (:mod:`distnet.geometry.window`); found by bisection."""
    first = _first(out_lo, out_hi, lambda i: rule.input_span(i, 1)[0] >= ready_lo)
    last = _first(first, out_hi, lambda i: rule.input_span(i, 1)[1] > ready_hi)
    return (first, last) if first < last else (first, first)


def early_output_box(plan, *rules):
    """The :class:`Box` of ``plan.out_tile`` (global output coordinates) computable from the
    rank's own tile and the zero padding alone (empty when every output needs a ghost).

    plan : the layer's :class:`~distnet.geometry.HaloPlan`; rules : its window rules, one per
    axis (``window_y, window_x`` in 2-D: the ones the plan was made with).
    """
    spans = []
    for rule, (c0, c1), (o0, o1), (t0, t1), n in zip(rules, plan.chunk.spans, plan.own.spans,
                                                     plan.out_tile.spans, plan.in_plane):
        spans.append(_outputs_inside(rule, t0, t1, *_ready_span(c0, c1, o0, o1, n)))
    return Box.of_spans(spans)


def border_boxes(out_tile, early):
    """``out_tile`` minus ``early`` as disjoint boxes: along the first axis the slabs before and
    after ``early`` (the tile's full extent on the other axes), then along the next axis the
    slabs of what is left, and so on (2-D: top and bottom strips of the full width, then left
    and right strips of the middle rows; at most ``2 * ndim`` boxes). The whole tile if
    ``early`` is empty."""
    if early.is_empty():
        return [out_tile]
    boxes = []
    spans = list(out_tile.spans)              # what is left to cut, axis by axis
    for axis, ((t0, t1), (e0, e1)) in enumerate(zip(out_tile.spans, early.spans)):
        for cut in ((t0, e0), (e1, t1)):
            boxes.append(Box.of_spans(spans[:axis] + [cut] + spans[axis + 1:]))
        spans[axis] = (e0, e1)
    return [b for b in boxes if not b.is_empty()]

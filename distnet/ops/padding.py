"""Zero padding as a pair of adjoint maps between a rank's own tile and its chunk.

A chunk is the input box a layer's output tile reads (see :mod:`distnet.geometry.halo`). On one
process the chunk holds the whole image plus zero borders: :func:`pad_to_chunk` builds it and
:func:`crop_from_chunk` (its adjoint) takes the gradient back. Boxes are
:class:`~distnet.geometry.Box` es in global coordinates.
"""
from ..backend import get_array_module, same_view


def pad_to_chunk(x, own, chunk):
    """``x (B, C, h, w)`` holding box ``own`` -> ``(B, C, Hc, Wc)`` holding box ``chunk``, zero
    where ``chunk`` lies outside ``own`` (only valid when ``own`` is the whole image). Any number
    of spatial axes."""
    if own == chunk:
        return x
    out = get_array_module(x).zeros(tuple(x.shape[:2]) + chunk.shape, dtype=x.dtype)
    _copy_common(out, chunk, x, own)
    return out


def crop_from_chunk(g, own, chunk):
    """Adjoint of :func:`pad_to_chunk`: ``g (B, C, Hc, Wc)`` -> ``(B, C, h, w)`` on ``own``,
    dropping the padding (rows of ``own`` outside ``chunk`` get 0)."""
    if own == chunk:
        return g
    out = get_array_module(g).zeros(tuple(g.shape[:2]) + own.shape, dtype=g.dtype)
    _copy_common(out, own, g, chunk)
    return out


def _copy_common(dst, dst_box, src, src_box):
    """``dst[dst_box ∩ src_box] = src[the same]`` (boxes in global coordinates)."""
    common = dst_box.intersect(src_box)
    if not common.is_empty():
        dst[(Ellipsis,) + common.relative_to(dst_box)] = src[(Ellipsis,) + common.relative_to(src_box)]


class ZeroPadding:
    """The one-process chunk exchange of a window layer: the same interface as
    :class:`~distnet.comm.global_array.GlobalArray` (``exchange`` / ``exchange_adjoint`` with
    ``out=``), with zero padding where a distributed layer receives ghosts. On one process a
    rank's tile is the whole image, so nothing is ever received.

    plan : the layer's :class:`~distnet.geometry.HaloPlan` on a 1x1 grid.
    """

    #: Nothing but zero padding: a conv may pad as it reads instead of building the chunk.
    zero_padding_only = True

    def __init__(self, plan):
        self.plan = plan

    def exchange(self, x, out=None):
        """``x (B, C, h, w)`` on my tile -> the chunk ``(B, C, Hc, Wc)``, zero outside the image
        (:func:`pad_to_chunk`). ``out``: a chunk buffer that is zero outside my tile (allocated
        with zeros once; only my tile's part is written)."""
        plan = self.plan
        if out is None:
            return pad_to_chunk(x, plan.own, plan.chunk)
        interior = plan.interior
        if not interior.is_empty():
            out[(Ellipsis,) + interior.relative_to(plan.chunk)] = x[(Ellipsis,) + interior.relative_to(plan.own)]
        return out

    def exchange_adjoint(self, g_chunk, out=None):
        """Adjoint of :meth:`exchange` (:func:`crop_from_chunk`): the chunk gradient ->
        ``(B, C, h, w)`` on my tile. ``out`` may be the view of ``g_chunk`` on my tile."""
        plan = self.plan
        if out is None:
            return crop_from_chunk(g_chunk, plan.own, plan.chunk)
        interior = plan.interior
        if interior.shape != plan.own.shape or interior.is_empty():
            out[...] = 0
        if not interior.is_empty():
            dst = out[(Ellipsis,) + interior.relative_to(plan.own)]
            src = g_chunk[(Ellipsis,) + interior.relative_to(plan.chunk)]
            if not same_view(dst, src):
                dst[...] = src
        return out

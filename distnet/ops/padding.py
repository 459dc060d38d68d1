"""Zero padding as a pair of adjoint maps between a rank's own tile and its chunk.

A chunk is the input box a layer's output tile reads (see :mod:`distnet.geometry.halo`). On one
process the chunk holds the whole image plus zero borders: :func:`pad_to_chunk` builds it and
:func:`crop_from_chunk` (its adjoint) takes the gradient back. Boxes are anything with
``y0, y1, x0, x1`` in global coordinates.
"""
from ..backend import get_array_module, same_view


def pad_to_chunk(x, own, chunk):
    """``x (B, C, h, w)`` holding box ``own`` -> ``(B, C, Hc, Wc)`` holding box ``chunk``, zero
    where ``chunk`` lies outside ``own`` (only valid when ``own`` is the whole image)."""
    xp = get_array_module(x)
    B, C = x.shape[:2]
    Hc, Wc = chunk.y1 - chunk.y0, chunk.x1 - chunk.x0
    if (own.y0, own.y1, own.x0, own.x1) == (chunk.y0, chunk.y1, chunk.x0, chunk.x1):
        return x
    out = xp.zeros((B, C, Hc, Wc), dtype=x.dtype)
    y0, y1 = max(own.y0, chunk.y0), min(own.y1, chunk.y1)
    x0, x1 = max(own.x0, chunk.x0), min(own.x1, chunk.x1)
    out[:, :, y0 - chunk.y0:y1 - chunk.y0, x0 - chunk.x0:x1 - chunk.x0] = \
        x[:, :, y0 - own.y0:y1 - own.y0, x0 - own.x0:x1 - own.x0]
    return out


def crop_from_chunk(g, own, chunk):
    """Adjoint of :func:`pad_to_chunk`: ``g (B, C, Hc, Wc)`` -> ``(B, C, h, w)`` on ``own``,
    dropping the padding (rows of ``own`` outside ``chunk`` get 0)."""
    xp = get_array_module(g)
    if (own.y0, own.y1, own.x0, own.x1) == (chunk.y0, chunk.y1, chunk.x0, chunk.x1):
        return g
    B, C = g.shape[:2]
    out = xp.zeros((B, C, own.y1 - own.y0, own.x1 - own.x0), dtype=g.dtype)
    y0, y1 = max(own.y0, chunk.y0), min(own.y1, chunk.y1)
    x0, x1 = max(own.x0, chunk.x0), min(own.x1, chunk.x1)
    out[:, :, y0 - own.y0:y1 - own.y0, x0 - own.x0:x1 - own.x0] = \
        g[:, :, y0 - chunk.y0:y1 - chunk.y0, x0 - chunk.x0:x1 - chunk.x0]
    return out


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

"""neon's ``LCNLayer``: local contrast normalisation, "same" size, stride 1
(docs/neon-semantics.md#local-contrast-normalisation; on tiles: docs/neon-semantics.md#dist-layers).

One Gaussian filter ``w (C, fh, fw)`` (:func:`~distnet.ops.lcn.lcn_filter`, odd sizes) spans all
C maps. Forward in two stages, each reading a chunk = tile + (fh-1)/2 rows and (fw-1)/2 columns
around it::

    m = w * chunk(x);  s = x - m;  d = sqrt(w * chunk(s)^2), 1 where 0;  y = s / d

On a grid of one tile ``chunk`` is zero padding; on several tiles it is the halo exchange of a
GlobalArray, which fills ghosts from the neighbours and zeros only outside the image (the chunk
box of a same-padded window includes the padding), so the result is the one-process one. The
input plane, the output plane and their tiles are the same, so the one plan (and GlobalArray)
serves both exchanges (x, then s). Backward: the exact gradient (neon v0.4 dropped the direct
term ``e/d`` where ``s == 0``; distnet does not reproduce that, see :mod:`distnet.ops.lcn`),
with the two adjoint exchanges in reverse order. No parameters.
"""
from ..errors import ConfigError
from ..ops.lcn import (lcn_bprop_divisive, lcn_bprop_subtractive, lcn_filter, lcn_fprop_divisive,
                       lcn_fprop_subtractive, shared_map)
from .spatial import WindowLayer, _axes


class LCNLayer(WindowLayer):
    """Keys: ``fshape`` (odd; int or [fh, fw], rectangular allowed), ``stride`` (must be 1),
    ``nifm``/``ifmshape`` (optional, checked). The padding is always "same" (a ``padding``
    key is refused). Output ``(B, C, H, W)``, the input's shape. On a process grid of several
    tiles every fprop/bprop is collective over ``Topology.spatial`` (point-to-point halos)."""

    spatial_axes = (2,)

    def __init__(self, fshape, stride=1, nifm=None, ifmshape=None, padding=None, **common):
        sizes = _axes(fshape, 2)
        if len(sizes) != 2:
            raise ConfigError(f"LCN works on images: fshape must be an int or [fh, fw], got "
                              f"{list(sizes)}", key="fshape")
        fh, fw = sizes
        super().__init__((fh, fw), stride, ((fh - 1) // 2, (fw - 1) // 2), nifm, ifmshape, **common)
        if padding is not None:
            raise self.error("LCN pads itself to keep its input's size ('same' padding, zeros only "
                             "at the image border); remove the padding key", "padding")
        if self.stride != (1, 1):
            raise self.error(f"LCN works at stride 1 only (its output has its input's size), got "
                             f"stride {list(self.stride)}", "stride")
        if fh < 1 or fw < 1 or fh % 2 == 0 or fw % 2 == 0:
            raise self.error(f"LCN filter sizes must be odd and positive (the window is centred on "
                             f"its pixel), got fshape {[fh, fw]}", "fshape")
        self.w = None

    def infer_shape(self, in_shape):
        out = super().infer_shape(in_shape)
        self._w_host = lcn_filter(in_shape[0], self.fshape)   # float64, cast in configure
        return out

    #: Two chunk exchanges per step: of x, then of s.
    exchanges_per_step = 2

    def setup(self, ctx):
        super().setup(ctx)
        self.w = self.xp.asarray(self._w_host.astype(self.dtype))
        self._w_ops = self.xp.asarray(shared_map(self._w_host).astype(self.dtype))   # (1, fh, fw)

    def fprop(self, x):
        """``x (B, C, h, w)`` on my tile -> ``y`` of the same shape (two chunk exchanges)."""
        xc = self._chunk(x)
        self._xc_shape = xc.shape
        self._s = lcn_fprop_subtractive(x, xc, self._w_ops)
        self._sc = self._chunk(self._s)
        y, self._d = lcn_fprop_divisive(self._s, self._sc, self._w_ops)
        return y

    def bprop(self, delta, need_input_grad=True):
        """``delta (B, C, h, w)`` -> the exact gradient on my tile (or None): two adjoint
        exchanges (the s-chunk gradient, then the x-chunk gradient)."""
        if not need_input_grad:
            return None
        gs_direct, gs_chunk = lcn_bprop_divisive(delta, self._s, self._sc, self._d, self._w_ops)
        gs = gs_direct + self._input_grad(gs_chunk)
        gx_direct, gx_chunk = lcn_bprop_subtractive(gs, self._xc_shape, self._w_ops)
        return gx_direct + self._input_grad(gx_chunk)

"""Pooling layers: max, average and L2 pooling over the windows of spatial activations ``(B, C,
*S)`` (images or volumes), distributed as every :class:`~distnet.layers.spatial.WindowLayer`
(a chunk exchange, then the op of :mod:`distnet.ops.pooling` on the chunk)."""
from ..backend import get_array_module
from ..errors import ConfigError
from ..ops import maxpool_nchw, pooling
from .spatial import WindowLayer


class MaxPoolingLayer(WindowLayer):
    """Max over each window of each map (first maximum in row-major order wins ties); the
    gradient goes to that element. ``stride`` defaults to ``fshape``. ``padding`` pads with
    -inf (a padded position never wins; it must be smaller than the window)."""

    def __init__(self, fshape, stride=None, padding=0, nifm=None, ifmshape=None, **common):
        super().__init__(fshape, fshape if stride is None else stride, padding, nifm, ifmshape, **common)
        if any(p >= f for p, f in zip(self.padding, self.fshape)):
            raise ConfigError(f"padding {list(self.padding)} must be smaller than the window "
                              f"{list(self.fshape)}: a window of padding only has no maximum", key="padding")

    def broadcast_keys(self, nd):
        super().broadcast_keys(nd)
        if any(p >= f for p, f in zip(self.padding, self.fshape)):
            raise self.error(f"padding {list(self.padding)} must be smaller than the window "
                             f"{list(self.fshape)}: a window of padding only has no maximum", "padding")

    def work_arrays(self, plan):
        """The chunk's gradient and (large planes, non-overlapping windows: the NCHW kernel)
        the max pooling kernel's scratch (:func:`~distnet.ops.maxpool_nchw.workspace_arrays`)."""
        x_shape = (1, self.in_shape[0]) + plan.chunk.shape
        arrays = self._chunk_gradient(plan)
        if pooling.uses_nchw_kernel(x_shape, self.fshape, self.stride):
            arrays += maxpool_nchw.workspace_arrays(x_shape, self.fshape, self.stride)
        return arrays

    def fprop(self, x):
        xc = self._chunk_planned(x)
        self._xc_shape = xc.shape
        shape = tuple(x.shape[:2]) + self.plan.out_tile.shape
        self._chwn = pooling.output_chwn(xc.shape, self.fshape, self.stride, get_array_module(xc))
        y, self._argmax = pooling.maxpool_fprop(xc, self.fshape, self.stride, work=self.work,
                                                out=self._out("y", shape, xc.dtype, xc, self._chwn),
                                                inside=pooling.inside_of(self.plan.chunk, self.plan.in_plane))
        return y

    def bprop(self, delta, need_input_grad=True):
        if not need_input_grad:
            return None
        # CHWN where the gradient is returned as it is (no halo)
        chwn = self._chwn and self._no_halo()
        dxc = pooling.maxpool_bprop(delta, self._argmax, self._xc_shape, self.fshape, self.stride,
                                    out=self._work_out("dxc", self._xc_shape, delta.dtype, delta, chwn),
                                    work=self.work)
        return self._grad_planned(dxc)


class AveragePoolingLayer(WindowLayer):
    """Mean over each window (zero padding counts: always divided by fh*fw). neon v0.4's
    backward raised; this one is the exact gradient. ``stride`` defaults to ``fshape``."""

    def __init__(self, fshape, stride=None, padding=0, nifm=None, ifmshape=None, **common):
        super().__init__(fshape, fshape if stride is None else stride, padding, nifm, ifmshape, **common)

    def fprop(self, x):
        xc = self._chunk(x)
        self._xc_shape = xc.shape
        return pooling.avgpool_fprop(xc, self.fshape, self.stride)

    def bprop(self, delta, need_input_grad=True):
        if not need_input_grad:
            return None
        return self._input_grad(pooling.avgpool_bprop(delta, self._xc_shape, self.fshape, self.stride))


class L2PoolingLayer(WindowLayer):
    """``sqrt(sum of squares)`` over each window (no epsilon, no averaging: neon's L2 pooling).
    ``stride`` defaults to 1 (neon's GB examples pool 3x3 windows with stride 1)."""

    def __init__(self, fshape, stride=1, padding=0, nifm=None, ifmshape=None, **common):
        super().__init__(fshape, stride, padding, nifm, ifmshape, **common)

    def fprop(self, x):
        self._xc = self._chunk(x)
        self._y = pooling.l2pool_fprop(self._xc, self.fshape, self.stride)
        return self._y

    def bprop(self, delta, need_input_grad=True):
        if not need_input_grad:
            return None
        dxc = pooling.l2pool_bprop(self._xc, self._y, delta, self.fshape, self.stride)
        return self._input_grad(dxc)

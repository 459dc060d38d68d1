"""Window layers on image-like activations ``(B, C, H, W)``: the shared geometry (kernel,
stride, padding, halo plan) and ConvLayer and the pooling layers.

A window layer computes its output tile from a *chunk*: its input tile plus what its windows read
beyond it. On one process that is the zero-padded image (:func:`pad_to_chunk`); a Dist subclass
(:mod:`distnet.layers.dist`) swaps ``_chunk``/``_input_grad`` for its ``GlobalArray``'s halo
exchange and its adjoint, and nothing else.
"""
import numpy as np

from ..errors import GeometryError
from ..geometry import Window, output_plane, plan_halo
from ..ops import conv, pooling
from ..ops.padding import crop_from_chunk, pad_to_chunk
from .base import SPATIAL, BaseLayer
from .params import OVER_GRAD, Param, check_weight_init, gen_weights


class WindowLayer(BaseLayer):
    """Keys: ``fshape`` (int or [fh, fw]), ``stride`` (int or [sy, sx]), ``padding`` (int or
    [py, px] zero rows/cols on each side; a distnet addition), and neon's ``nifm`` / ``ifmshape``
    (optional: derived from the previous layer, checked if given)."""

    config_types = {"nifm": int, "ifmshape": "shape2", "fshape": "shape2", "stride": "shape2",
                    "padding": "shape2"}

    def __init__(self, fshape, stride=1, padding=0, nifm=None, ifmshape=None, **common):
        super().__init__(**common)
        self.fshape = _pair(fshape)
        self.stride = _pair(stride)
        self.padding = _pair(padding)
        self.nifm = nifm
        self.ifmshape = tuple(ifmshape) if ifmshape is not None else None
        self.plan = None

    # -- shapes -------------------------------------------------------------------------------
    def out_channels(self, nifm):
        return nifm

    def infer_shape(self, in_shape):
        """Global output ``(K, Ho, Wo)`` for a global input ``(C, H, W)``; checks the YAML."""
        if len(in_shape) != 3:
            raise self.error(f"needs an image-like input (maps, rows, cols), but its input is a "
                             f"vector of {in_shape[0]} features")
        C, H, W = in_shape
        if self.nifm is not None and self.nifm != C:
            raise self.error(f"nifm is {self.nifm} but its input has {C} maps", "nifm")
        if self.ifmshape is not None and self.ifmshape != (H, W):
            raise self.error(f"ifmshape is {list(self.ifmshape)} but its input is {H}x{W}", "ifmshape")
        (fh, fw), (sy, sx), (py, px) = self.fshape, self.stride, self.padding
        try:
            self.windows = (Window(fh, sy, py, py), Window(fw, sx, px, px))
            Ho, Wo = output_plane((H, W), *self.windows)
        except GeometryError as e:
            raise self.error(f"{e} (input {H}x{W})", "fshape") from None
        self.in_shape, self.out_shape = tuple(in_shape), (self.out_channels(C), Ho, Wo)
        return self.out_shape

    def planes(self):
        """The input and output planes the process grid must cut into non-empty tiles."""
        return [self.in_shape[1:], self.out_shape[1:]]

    def configure(self, layout, ctx):
        grid, coords = ctx.topology.grid, ctx.topology.coords
        if not self.is_dist and tuple(grid) != (1, 1):
            raise self.error(f"{type(self).__name__} is not distributed but the run uses a "
                             f"{grid[0]}x{grid[1]} process grid; use {type(self).__name__}Dist")
        try:
            self.plan = plan_halo(self.in_shape[1:], *self.windows, grid, coords)
        except GeometryError as e:
            raise self.error(str(e)) from None
        self._setup_exchange(ctx)
        return SPATIAL

    def _setup_exchange(self, ctx):
        """Dist layers make their GlobalArray here."""

    # -- the seam between math and communication -----------------------------------------------
    def _chunk(self, x):
        """``x (B, C, h, w)`` on my input tile -> the chunk ``(B, C, hc, wc)`` my outputs read."""
        return pad_to_chunk(x, self.plan.own, self.plan.chunk)

    def _input_grad(self, g_chunk):
        """Adjoint of :meth:`_chunk`: chunk gradient -> gradient on my input tile."""
        return crop_from_chunk(g_chunk, self.plan.own, self.plan.chunk)

    def describe(self):
        return (f"{super().describe()}  f={self.fshape[0]}x{self.fshape[1]} "
                f"s={self.stride[0]}x{self.stride[1]} p={self.padding[0]}x{self.padding[1]}")


class ConvLayer(WindowLayer):
    """neon's ``ConvLayer``: cross-correlation of ``nofm`` filters ``(C, fh, fw)``, no bias, no
    activation. ``W`` has shape ``(nofm, C, fh, fw)``, drawn as neon's ``(C*fh*fw, nofm)`` array and
    transposed (NEON.md §3.3), so the numbers equal neon's. Keys: ``nofm``, ``weight_init``,
    ``learning_rate`` and the window keys. Conv weights are replicated in Dist runs."""

    config_types = {"nofm": int, "weight_init": dict, "learning_rate": float}

    def __init__(self, nofm, fshape, weight_init, learning_rate=None, stride=1, padding=0, nifm=None,
                 ifmshape=None, **common):
        super().__init__(fshape, stride, padding, nifm, ifmshape, **common)
        self.nofm = nofm
        self.weight_init = check_weight_init(weight_init)
        self.learning_rate = learning_rate
        self.W = None

    def out_channels(self, nifm):
        return self.nofm

    def init_params(self, rng):
        C, (fh, fw), K = self.in_shape[0], self.fshape, self.nofm
        w = gen_weights(rng, (C * fh * fw, K), self.weight_init, self.dtype)
        self.W = self.xp.asarray(np.ascontiguousarray(w.T.reshape(K, C, fh, fw)))
        self._param = Param(f"{self.name}.W", self.W, self.xp.zeros_like(self.W), OVER_GRAD)

    def params(self):
        return [self._param]

    def fprop(self, x):
        self._xc = self._chunk(x)
        return conv.conv2d_fprop(self._xc, self.W, self.stride)

    def bprop(self, delta, need_input_grad=True):
        dxc, dw = conv.conv2d_bprop(self._xc, self.W, delta, self.stride, need_dx=need_input_grad)
        self._param.grad[...] = dw
        return self._input_grad(dxc) if need_input_grad else None


class MaxPoolingLayer(WindowLayer):
    """Max over each window of each map (first maximum in row-major order wins ties); the
    gradient goes to that element. ``stride`` defaults to ``fshape``."""

    def __init__(self, fshape, stride=None, padding=0, nifm=None, ifmshape=None, **common):
        super().__init__(fshape, fshape if stride is None else stride, padding, nifm, ifmshape, **common)

    def fprop(self, x):
        xc = self._chunk(x)
        self._xc_shape = xc.shape
        y, self._argmax = pooling.maxpool_fprop(xc, self.fshape, self.stride)
        return y

    def bprop(self, delta, need_input_grad=True):
        if not need_input_grad:
            return None
        dxc = pooling.maxpool_bprop(delta, self._argmax, self._xc_shape, self.fshape, self.stride)
        return self._input_grad(dxc)


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
    """``sqrt(sum of squares)`` over each window (no epsilon, no averaging; NEON.md §3.5).
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


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))

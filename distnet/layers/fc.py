"""Fully connected layers on ``(B, F)`` activations (an image-like input ``(B, C, H, W)`` is
flattened row-major, neon's order ``(c*H + r)*W + q``)."""
import numpy as np

from ..config.types import WEIGHT_INIT, NonNegative, PositiveInt
from ..ops.activations import Identity
from ..ops.parallel import matmul as pmatmul
from .base import BaseLayer
from .params import check_weight_init, gen_weights
from .placement import OVER_DATA, REPLICATED, Layout, ParamPlacement, Placement


class LayerWithNoBias(BaseLayer):
    """``y = f(x W^T)`` with ``W (nout, nin)``. Keys: ``nout``, ``activation`` (default
    Identity), ``weight_init``, ``learning_rate``, ``nin`` (optional, derived and checked).
    neon's seven ``*_dtype`` keys are accepted and ignored (neon ignored them too)."""

    config_types = {"nin": PositiveInt, "nout": PositiveInt, "activation": ("obj", "activation"),
                    "weight_init": WEIGHT_INIT, "learning_rate": NonNegative}
    config_ignored = ("weight_dtype", "velocity_dtype", "delta_dtype", "updates_dtype",
                      "pre_act_dtype", "output_dtype", "berror_dtype")
    #: neon's ``Layer`` counts the bias in ``nin``.
    has_bias = False

    def __init__(self, nout, weight_init, learning_rate=None, activation=None, nin=None, **common):
        super().__init__(**common)
        self.nout = nout
        self.nin = nin
        self.activation = activation if activation is not None else Identity()
        self.weight_init = check_weight_init(weight_init)
        self.learning_rate = learning_rate
        self.cols = None  # global input feature indices this rank holds (None = all)
        self.W = self.b = None

    def infer_shape(self, in_shape):
        nfeat = int(np.prod(in_shape))
        declared = nfeat + 1 if self.has_bias else nfeat
        if self.nin is not None and self.nin != declared:
            extra = " (Layer counts +1 for the bias, as neon did)" if self.has_bias else ""
            raise self.error(f"nin is {self.nin} but its input has {nfeat} features{extra}; "
                             f"use nin: {declared}", "nin")
        self.nfeat = nfeat
        self.in_shape, self.out_shape = tuple(in_shape), (self.nout,)
        return self.out_shape

    def place(self, layout, position):
        """Replicated weights on a replicated input (or any input on a 1x1 grid); a split input
        needs the Dist class."""
        if layout != REPLICATED and tuple(position.grid) != (1, 1):
            grid = position.grid
            raise self.error(f"{type(self).__name__} is not distributed but its input is split over a "
                             f"{grid[0]}x{grid[1]} grid; use {type(self).__name__}Dist")
        return self._placement(layout, position)

    def _placement(self, layout, position, cols=Ellipsis, collectives=()):
        """The placement with this rank's input features ``cols`` (a numpy index of the
        ``nfeat`` features: ``...`` for all, a slice or an index array) and its activation
        Allreduces. ``W (nout, nfeat)`` sharded by those columns; ``b (nout,)`` replicated;
        both complete on this rank for its samples (summed over data replicas only)."""
        ncols = (self.nfeat if cols is Ellipsis else  # no arange(nfeat) per rank (show -n 10^6)
                 len(range(self.nfeat)[cols]) if isinstance(cols, slice) else len(cols))
        sharded = cols is not Ellipsis
        params = [ParamPlacement(f"{self.name}.W", (self.nout, self.nfeat), (self.nout, ncols),
                                 (slice(None), cols) if sharded else Ellipsis, OVER_DATA, sharded)]
        if self.has_bias:
            params.append(ParamPlacement(f"{self.name}.b", (self.nout,), (self.nout,), Ellipsis, OVER_DATA))
        return Placement(Layout.of(layout, self.in_shape, position), Layout.of(REPLICATED, self.out_shape, position),
                         params=tuple(params), collectives=tuple(collectives), macs=self.nout * ncols)

    def draw_params(self, rng):
        """neon's global ``(nout, nin)`` array: the feature part ``(nout, nfeat)`` and (``Layer``)
        the bias column ``(nout,)``."""
        nin = self.nfeat + (1 if self.has_bias else 0)
        w = gen_weights(rng, (self.nout, nin), self.weight_init, self.dtype)
        if not self.has_bias:
            return [w]
        if "bias_init" in self.weight_init:
            w[:, -1] = self.weight_init["bias_init"]
        return [w[:, :-1], w[:, -1]]

    def params_ready(self):
        self.W = self._params[0].value
        if self.has_bias:
            self.b = self._params[1].value

    def _preactivation(self, x2d):
        """``z = x W^T (+ b)`` for the full feature vector (Dist: summed over the shards)."""
        z = pmatmul(x2d, self.W.T)
        return z + self.b if self.has_bias else z

    def fprop(self, x):
        self._in_shape_local = x.shape
        self._x2d = x.reshape(x.shape[0], int(np.prod(x.shape[1:])))  # -1 fails on an empty batch
        self._z = self._preactivation(self._x2d)
        self._y = self.activation.fprop(self._z)
        return self._y

    def bprop(self, delta, need_input_grad=True):
        dz = self.activation.bprop(self._z, self._y, delta)
        pmatmul(dz.T, self._x2d, out=self._params[0].grad)
        if self.has_bias:
            self._params[1].grad[...] = dz.sum(axis=0)
        if not need_input_grad:
            return None
        return pmatmul(dz, self.W).reshape(self._in_shape_local)


class Layer(LayerWithNoBias):
    """neon's ``Layer``: fully connected with a bias. ``nin`` counts the bias (+1), as in neon;
    the bias is the last column of neon's weight array (``bias_init`` sets it) and is held here
    as ``b (nout,)``."""

    has_bias = True

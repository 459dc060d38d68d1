"""Fully connected layers on ``(B, F)`` activations (an image-like input ``(B, C, H, W)`` is
flattened row-major, neon's order ``(c*H + r)*W + q``; a volume ``(B, C, D, H, W)`` likewise in
``(c, z, y, x)`` order), and how they distribute themselves.

The layer's placement follows its input (:meth:`FullyConnectedNoBiasLayer.place`):

* after a spatial layer on a process grid of several tiles, a rank holds the weight columns of
  its own input pixels (``cols`` = global flat indices of its tile); the partial pre-activations
  are summed with one Allreduce over ``Topology.spatial``, so every rank applies the activation
  and the cost itself (no root, no bcast). Its weight gradient is complete on this rank (disjoint
  columns);
* after an FC layer (or on whole images) it is replicated: every rank computes the same product
  on the same replicated input (exact, no communication; neon split it in blocks with an
  Allgather);
* neon's ``vecpar`` (:class:`~distnet.models.mlp_dist.MLPDist` sets ``vecpar`` on its FC
  layers): a replicated input (whole images, or the previous FC's output) is sharded by
  contiguous blocks of its features, the feature vector being a ``1 x F`` plane cut by
  :func:`~distnet.geometry.tile_of` on the ``1 x Px`` grid (uneven blocks allowed). Partial
  pre-activations are summed with one Allreduce over ``Topology.spatial``; the weight gradient of
  the block is complete on the rank (``OVER_DATA``); the input gradient (needed complete by the FC
  below) is the block's part placed in a zero ``(B, F)`` array and summed with one Allreduce over
  ``Topology.spatial``.
"""
from math import prod

import numpy as np

from ..comm.reduce import allreduce_sum
from ..config.types import WEIGHT_INIT, NonNegative, PositiveInt
from ..errors import GeometryError
from ..geometry import tile_of
from ..ops.activations import Identity
from ..ops.parallel import matmul as pmatmul
from .base import BaseLayer
from .params import check_finite, check_weight_init, gen_weights, gen_weights_part
from .placement import OVER_DATA, REPLICATED, SPATIAL, Collective, Layout, ParamPlacement, Placement


class FullyConnectedNoBiasLayer(BaseLayer):
    """neon's ``LayerWithNoBias``: ``y = f(x W^T)`` with ``W (nout, nin)``. Keys: ``nout``,
    ``activation`` (default Identity), ``weight_init``, ``learning_rate``, ``nin`` (optional,
    derived and checked). neon's seven ``*_dtype`` keys are accepted and ignored (neon ignored
    them too). After a spatial layer on a process grid each rank holds the weight columns of its
    tile's pixels (partial pre-activations summed over ``Topology.spatial``); after a fully
    connected layer the weights are replicated."""

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
        self._block = self._spatial_comm = None

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

    #: Shard a replicated input by feature blocks over ``Topology.spatial`` (set by MLPDist).
    vecpar = False

    def place(self, layout, position):
        """A spatial input on a grid of several tiles: my tile's columns, partial pre-activations
        summed over ``spatial``. vecpar: my block of the features of a replicated input,
        pre-activations summed forward and input gradients backward over ``spatial``. Otherwise
        replicated."""
        grid, split = position.grid, prod(position.grid) > 1
        if layout == SPATIAL and len(self.in_shape) == len(grid) + 1 and split:
            t = tile_of(self.in_shape[1:], grid, position.coords)
            # the flat (c, z, y, x) indices of my tile
            axes = np.meshgrid(np.arange(self.in_shape[0]), *(np.arange(a, b) for a, b in t.spans),
                               indexing="ij")
            cols = np.ravel_multi_index(tuple(a.ravel() for a in axes), self.in_shape)
            return self._placement(layout, position, cols, (Collective("spatial", self.nout),))
        if self.vecpar and layout == REPLICATED and split:
            if grid[0] != 1:
                raise self.error(f"vecpar shards the input features over a 1 x N process grid, but the "
                                 f"run uses a {grid[0]}x{grid[1]} grid")
            try:
                t = tile_of((1, self.nfeat), grid, position.coords)
            except GeometryError:
                raise self.error(f"vecpar cannot split its {self.nfeat} input features over "
                                 f"{grid[1]} ranks (each needs at least one)") from None
            return self._placement(layout, position, slice(t.x0, t.x1),
                                   (Collective("spatial", self.nout), Collective("spatial", self.nfeat, True)))
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

    def draw_local_params(self, rng):
        """My columns of :meth:`draw_params`'s arrays, drawn without the global ``(nout, nin)``
        array (:func:`~distnet.layers.params.gen_weights_part`)."""
        nin = self.nfeat + (1 if self.has_bias else 0)
        index = self.placement.params[0].index
        cols = slice(0, self.nfeat) if index is Ellipsis else index[1]
        if not self.has_bias:
            return [gen_weights_part(rng, (self.nout, nin), self.weight_init, self.dtype, cols=cols)]
        bias_init = "bias_init" in self.weight_init

        def check(v, c0):   # the drawn bias column is replaced by bias_init: as draw_params checks
            check_finite(v[:, :max(0, nin - 1 - c0)] if bias_init else v)
        w, b = gen_weights_part(rng, (self.nout, nin), self.weight_init, self.dtype,
                                cols=(cols, slice(nin - 1, nin)), check=check)
        b = b[:, 0].copy()
        if bias_init:
            b[:] = self.weight_init["bias_init"]
            check_finite(b)
        return [w, b]

    def setup(self, ctx):
        """My input columns (``cols``: global flat feature indices, None for all), my vecpar block
        and the communicator of my Allreduces, from the placement."""
        index = self.placement.params[0].index
        cols = Ellipsis if index is Ellipsis else index[1]
        self._block = cols if isinstance(cols, slice) else None
        self.cols = (None if cols is Ellipsis else
                     np.arange(cols.start, cols.stop) if self._block is not None else cols)
        self._spatial_comm = ctx.topology.spatial if self.placement.collectives else None
        self._host_staging = ctx.backend.host_staging

    def params_ready(self):
        self.W = self._params[0].value
        if self.has_bias:
            self.b = self._params[1].value

    def _preactivation(self, x2d):
        """``z = x W^T (+ b)`` for the full feature vector: my columns' partial product, summed
        over ``Topology.spatial`` when the input is sharded; the bias is added once, after it."""
        if self._spatial_comm is None:
            z = pmatmul(x2d, self.W.T)
        else:   # one BLAS call, never split over kernel threads: the sums of sharded runs stay as they were
            z = x2d @ self.W.T
            allreduce_sum([z], self._spatial_comm, self._host_staging)
        return z + self.b if self.has_bias else z

    def fprop(self, x):
        """``x (B, ...)`` (my tile, or whole; vecpar: whole on every rank, of which my block
        ``(B, x1 - x0)`` of the ``nfeat`` features is used) -> ``(B, nout)``, replicated."""
        if self._block is not None:
            self._x_shape = x.shape
            x = x.reshape(x.shape[0], self.nfeat)[:, self._block]
        self._in_shape_local = x.shape
        self._x2d = x.reshape(x.shape[0], int(np.prod(x.shape[1:])))  # -1 fails on an empty batch
        self._z = self._preactivation(self._x2d)
        self._y = self.activation.fprop(self._z)
        return self._y

    def bprop(self, delta, need_input_grad=True):
        """``delta (B, nout)`` -> the input gradient (shape of ``x``; or None); sets the weight
        gradients. vecpar: the complete input gradient on every rank, from the blocks with one
        Allreduce over ``Topology.spatial``."""
        dz = self.activation.bprop(self._z, self._y, delta)
        pmatmul(dz.T, self._x2d, out=self._params[0].grad)
        if self.has_bias:
            self._params[1].grad[...] = dz.sum(axis=0)
        if not need_input_grad:
            return None
        g = pmatmul(dz, self.W).reshape(self._in_shape_local)
        if self._block is None:
            return g
        dx = self.xp.zeros((g.shape[0], self.nfeat), dtype=g.dtype)
        dx[:, self._block] = g
        allreduce_sum([dx], self._spatial_comm, self._host_staging)
        return dx.reshape(self._x_shape)


class FullyConnectedLayer(FullyConnectedNoBiasLayer):
    """neon's ``Layer``: fully connected with a bias. ``nin`` counts the bias (+1), as in neon;
    the bias is the last column of neon's weight array (``bias_init`` sets it) and is held here
    as ``b (nout,)``, replicated and added once (after the Allreduce of a sharded layer)."""

    has_bias = True

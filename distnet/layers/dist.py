"""Dist layers: each is its non-dist parent plus a rule for its input and its weights
(docs/design.md#distribution-rules).

* Window layers (conv, pooling) get a :class:`~distnet.comm.global_array.GlobalArray` as their
  chunk exchange ``self.input`` (where the non-dist layer zero-pads); ``get_fprop_view`` builds
  the chunk from halos, ``get_bprop_view`` sends the
  chunk gradient's ghost parts back to their owners and adds them. Every Dist layer therefore
  returns a gradient on its *own tile* (neon's conv/pool layers returned chunk gradients and the
  models special-cased LCN; here the adjoint is part of the layer).
* Conv weights are replicated; their gradient is a partial sum over this rank's output pixels,
  summed by the model over ``Topology.grad`` in one flat Allreduce.
* An FC layer after a spatial layer holds the weight columns of its own input pixels
  (``cols`` = global flat indices of its tile); the partial pre-activations are summed with one
  Allreduce over ``Topology.spatial``, so every rank applies the activation and the cost itself
  (no root, no bcast). Its weight gradient is complete on this rank (disjoint columns).
* An FC layer after an FC layer is replicated: every rank computes the same product on the same
  replicated input (exact, no communication; neon split it in blocks with an Allgather).
* neon's ``vecpar`` (:class:`~distnet.models.mlp_dist.MLPDist` sets ``vecpar`` on its FC layers):
  a replicated input (whole images, or the previous FC's output) is sharded by contiguous blocks
  of its features, the feature vector being a ``1 x F`` plane cut by :func:`tile_of` on the
  ``1 x Px`` grid (uneven blocks allowed). Partial pre-activations are summed with one Allreduce
  over ``Topology.spatial``; the weight gradient of the block is complete on the rank
  (``OVER_DATA``); the input gradient (needed complete by the FC below) is the block's part
  placed in a zero ``(B, F)`` array and summed with one Allreduce over ``Topology.spatial``.
"""
import numpy as np

from ..comm.global_array import GlobalArray
from ..comm.reduce import allreduce_sum
from ..errors import GeometryError
from ..geometry import tile_of
from .fc import Layer, LayerWithNoBias
from .placement import REPLICATED, SPATIAL, Collective
from .spatial import AveragePoolingLayer, ConvLayer, L2PoolingLayer, MaxPoolingLayer


class HaloMixin:
    """Swaps a window layer's zero padding for the halo exchange of its GlobalArray."""

    is_dist = True

    def make_exchange(self, ctx):
        """The halo exchange over ``Topology.spatial`` (tag: the layer's index)."""
        return GlobalArray(self.plan, ctx.topology.spatial, tag=ctx.index,
                           host_staging=ctx.backend.host_staging)


class ConvLayerDist(HaloMixin, ConvLayer):
    """:class:`ConvLayer` on a tile; replicated filters, gradient summed over ``Topology.grad``."""


class MaxPoolingLayerDist(HaloMixin, MaxPoolingLayer):
    """:class:`MaxPoolingLayer` on a tile."""


class AveragePoolingLayerDist(HaloMixin, AveragePoolingLayer):
    """:class:`AveragePoolingLayer` on a tile."""


class L2PoolingLayerDist(HaloMixin, L2PoolingLayer):
    """:class:`L2PoolingLayer` on a tile."""


class FCDistMixin:
    """Column sharding of an FC layer whose input is split over the process grid, or (``vecpar``)
    whose replicated input it splits itself."""

    is_dist = True
    #: Shard a replicated input by feature blocks over ``Topology.spatial`` (set by MLPDist).
    vecpar = False

    def place(self, layout, position):
        """A spatial input on a grid: my tile's columns, partial pre-activations summed over
        ``spatial``. vecpar: my block of the features of a replicated input, pre-activations
        summed forward and input gradients backward over ``spatial``. Otherwise replicated."""
        grid, split = position.grid, tuple(position.grid) != (1, 1)
        if layout == SPATIAL and len(self.in_shape) == 3 and split:
            C, H, W = self.in_shape
            t = tile_of((H, W), grid, position.coords)
            c, r, q = np.meshgrid(np.arange(C), np.arange(t.y0, t.y1), np.arange(t.x0, t.x1), indexing="ij")
            cols = np.ravel_multi_index((c.ravel(), r.ravel(), q.ravel()), (C, H, W))
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

    def fprop(self, x):
        """Spatial / replicated: the parent's. vecpar: ``x (B, ...)`` whole on every rank; the
        parent runs on my block ``(B, x1 - x0)`` of its ``nfeat`` features."""
        if self._block is None:
            return super().fprop(x)
        self._x_shape = x.shape
        return super().fprop(x.reshape(x.shape[0], self.nfeat)[:, self._block])

    def bprop(self, delta, need_input_grad=True):
        """vecpar: the parent's gradients on my block, then the complete input gradient
        ``(B, ...)`` (shape of ``x``) on every rank: one Allreduce over ``Topology.spatial``."""
        g = super().bprop(delta, need_input_grad)
        if self._block is None or g is None:
            return g
        dx = self.xp.zeros((g.shape[0], self.nfeat), dtype=g.dtype)
        dx[:, self._block] = g
        allreduce_sum([dx], self._spatial_comm, self._host_staging)
        return dx.reshape(self._x_shape)

    def _preactivation(self, x2d):
        z = x2d @ self.W.T
        if self._spatial_comm is not None:
            allreduce_sum([z], self._spatial_comm, self._host_staging)
        return z + self.b if self.has_bias else z


class LayerWithNoBiasDist(FCDistMixin, LayerWithNoBias):
    """:class:`LayerWithNoBias` with columns sharded after a spatial layer, replicated after FC."""


class LayerDist(FCDistMixin, Layer):
    """:class:`Layer` (with bias) sharded like :class:`LayerWithNoBiasDist`; the bias is
    replicated and added once, after the Allreduce."""

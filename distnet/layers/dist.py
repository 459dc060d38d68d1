"""Dist layers: each is its non-dist parent plus a rule for its input and its weights (DESIGN §4).

* Window layers (conv, pooling) get a :class:`~distnet.comm.global_array.GlobalArray` as
  ``self.input``; ``get_fprop_view`` builds the chunk from halos, ``get_bprop_view`` sends the
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
from .base import REPLICATED, SPATIAL
from .fc import Layer, LayerWithNoBias
from .spatial import AveragePoolingLayer, ConvLayer, L2PoolingLayer, MaxPoolingLayer


class HaloMixin:
    """Swaps a window layer's zero padding for the halo exchange of its GlobalArray."""

    is_dist = True

    def _setup_exchange(self, ctx):
        self.input = GlobalArray(self.plan, ctx.topology.spatial, tag=ctx.index,
                                 host_staging=ctx.backend.host_staging)

    def _chunk(self, x):
        return self.input.get_fprop_view(x)

    def _input_grad(self, g_chunk):
        return self.input.get_bprop_view(g_chunk)


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

    def configure(self, layout, ctx):
        self._spatial_comm = None
        self._host_staging = ctx.backend.host_staging
        self._block = None
        topo = ctx.topology
        if layout == SPATIAL and len(self.in_shape) == 3 and tuple(topo.grid) != (1, 1):
            C, H, W = self.in_shape
            t = tile_of((H, W), topo.grid, topo.coords)
            c, r, q = np.meshgrid(np.arange(C), np.arange(t.y0, t.y1), np.arange(t.x0, t.x1), indexing="ij")
            self.cols = np.ravel_multi_index((c.ravel(), r.ravel(), q.ravel()), (C, H, W))
            self._spatial_comm = topo.spatial
        elif self.vecpar and layout == REPLICATED and tuple(topo.grid) != (1, 1):
            if topo.grid[0] != 1:
                raise self.error(f"vecpar shards the input features over a 1 x N process grid, but the "
                                 f"run uses a {topo.grid[0]}x{topo.grid[1]} grid")
            try:
                t = tile_of((1, self.nfeat), topo.grid, topo.coords)
            except GeometryError:
                raise self.error(f"vecpar cannot split its {self.nfeat} input features over "
                                 f"{topo.grid[1]} ranks (each needs at least one)") from None
            self._block = slice(t.x0, t.x1)
            self.cols = np.arange(t.x0, t.x1)
            self._spatial_comm = topo.spatial
        return REPLICATED

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

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
"""
import numpy as np

from ..comm.global_array import GlobalArray
from ..comm.reduce import allreduce_sum
from ..geometry import tile_of
from .base import REPLICATED, SPATIAL
from .fc import Layer, LayerWithNoBias
from .spatial import AveragePoolingLayer, ConvLayer, L2PoolingLayer, MaxPoolingLayer


class HaloMixin:
    """Swaps a window layer's zero padding for the halo exchange of its GlobalArray."""

    is_dist = True

    def _setup_exchange(self, ctx):
        self.input = GlobalArray(self.plan, ctx.topology.spatial, tag=ctx.index)

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
    """Column sharding of an FC layer whose input is split over the process grid."""

    is_dist = True

    def configure(self, layout, ctx):
        self._spatial_comm = None
        if layout == SPATIAL and len(self.in_shape) == 3 and tuple(ctx.topology.grid) != (1, 1):
            C, H, W = self.in_shape
            t = tile_of((H, W), ctx.topology.grid, ctx.topology.coords)
            c, r, q = np.meshgrid(np.arange(C), np.arange(t.y0, t.y1), np.arange(t.x0, t.x1), indexing="ij")
            self.cols = np.ravel_multi_index((c.ravel(), r.ravel(), q.ravel()), (C, H, W))
            self._spatial_comm = ctx.topology.spatial
        return REPLICATED

    def _preactivation(self, x2d):
        z = x2d @ self.W.T
        if self._spatial_comm is not None:
            allreduce_sum([z], self._spatial_comm)
        return z + self.b if self.has_bias else z


class LayerWithNoBiasDist(FCDistMixin, LayerWithNoBias):
    """:class:`LayerWithNoBias` with columns sharded after a spatial layer, replicated after FC."""


class LayerDist(FCDistMixin, Layer):
    """:class:`Layer` (with bias) sharded like :class:`LayerWithNoBiasDist`; the bias is
    replicated and added once, after the Allreduce."""

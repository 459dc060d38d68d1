"""Global average pooling: ``GlobalAveragePoolingLayer``, on whole images or spatial tiles.

``(B, C, H, W) -> (B, C)``: the mean of every channel over all pixels of the GLOBAL image. On a
split process grid each rank sums its tile's pixels (:func:`~distnet.ops.global_pool
.gap_partial`), ONE Allreduce over ``Topology.spatial`` of the ``(B, C)`` sums makes the
whole-image sums on every rank, and the output (divided by ``H*W``) is replicated: the next
layer (an FC layer) takes a replicated input. Backward needs no communication: every pixel of
my tile receives ``dy / (H*W)``. No parameters.
"""
from math import prod

from ..comm.reduce import allreduce_sum
from ..ops.global_pool import gap_bprop, gap_finish, gap_partial
from .base import BaseLayer
from .placement import REPLICATED, SPATIAL, Collective, Layout, Placement


class GlobalAveragePoolingLayer(BaseLayer):
    """Mean over all pixels of each map: ``(C, H, W) -> (C,)`` (``(C, *S)``: any number of
    spatial axes). No keys besides the common
    ones. On a process grid: partial sums of my tile and one Allreduce over
    ``Topology.spatial``."""

    def infer_shape(self, in_shape):
        if len(in_shape) < 2:
            raise self.error(f"needs an image-like input (maps, rows, cols), but its input is a "
                             f"vector of {in_shape[0]} features")
        self.in_shape, self.out_shape = tuple(in_shape), (in_shape[0],)
        return self.out_shape

    def place(self, layout, position):
        """Spatial (or replicated) input, replicated output; on a split grid one forward
        Allreduce of ``C`` sums per sample over ``spatial``."""
        split = prod(position.grid) > 1 and layout == SPATIAL
        return Placement(Layout.of(layout, self.in_shape, position), Layout.of(REPLICATED, self.out_shape, position),
                         collectives=(Collective("spatial", self.in_shape[0]),) if split else ())

    def setup(self, ctx):
        self._comm = ctx.topology.spatial if self.placement.collectives else None
        self._host_staging = ctx.backend.host_staging

    def fprop(self, x):
        """``x (B, C, h, w)`` my tile -> ``(B, C)`` whole-image means (replicated)."""
        self._tile_hw = tuple(x.shape[2:])
        s = gap_partial(x)
        if self._comm is not None:
            allreduce_sum([s], self._comm, self._host_staging)
        return gap_finish(s, prod(self.in_shape[1:]))

    def bprop(self, delta, need_input_grad=True):
        """``delta (B, C)`` -> ``(B, C, h, w)`` on my tile (no communication)."""
        if not need_input_grad:
            return None
        return gap_bprop(delta, self._tile_hw, prod(self.in_shape[1:]))

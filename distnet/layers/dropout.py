"""Dropout: ``DropoutLayer``, with the single-process mask on every grid.

Inverted dropout (``torch.nn.Dropout``): in training each element is zeroed with probability
``p`` and the survivors scaled by ``1 / (1 - p)``; evaluation is the identity. The mask is drawn
for the GLOBAL tensor ``(B_global, ...)`` of the minibatch from the counter-based stream of
:mod:`distnet.ops.dropout`, keyed by the backend's ``rng_seed``, the model's optimiser step and
the layer's index (and, while GB pretrains a layer, the pretraining phase): a rank computes
only its slice (its data replica's rows, its spatial tile), which is exactly what the
one-process run computes there. No communication, no RNG state (the
weight RNG stream is untouched, so adding dropout does not change any initial weight), and a
resumed run continues with the same masks (the step count is in the checkpoint).
"""
from ..config.types import HalfOpenFraction
from ..ops.dropout import dropout_bprop, dropout_fprop, dropout_mask, stream_key
from ..geometry import tile_of
from .base import BaseLayer
from .placement import SPATIAL, Layout, Placement


class DropoutLayer(BaseLayer):
    """Keys: ``p`` (probability of dropping an element, in [0, 1); default 0.5). Any input
    shape; the output has the input's shape and layout. On a process grid each rank uses its
    tile of the global mask."""

    config_types = {"p": HalfOpenFraction}
    whole_batch = True

    def __init__(self, p=0.5, **common):
        super().__init__(**common)
        if not 0.0 <= float(p) < 1.0:
            raise self.error(f"p must be in [0, 1), got {p}", "p")
        self.p = float(p)

    def infer_shape(self, in_shape):
        self.in_shape = self.out_shape = tuple(in_shape)
        return self.out_shape

    def place(self, layout, position):
        lay = Layout.of(layout, self.in_shape, position)
        return Placement(lay, lay)

    def setup(self, ctx):
        """My slice of the per-sample tensor: all of it, or (spatial tiles) my tile's rows and
        columns of every channel."""
        self._seed, self._index = ctx.backend.rng_seed, ctx.index
        lay = self.placement.in_layout
        self._cut = ()
        pos = ctx.topology.position
        if lay.kind == SPATIAL and len(self.in_shape) == len(pos.grid) + 1:
            t = tile_of(self.in_shape[1:], pos.grid, pos.coords)
            self._cut = (slice(None),) + tuple(slice(a, b) for a, b in t.spans)

    def fprop(self, x):
        """Training: ``x * mask`` (mask: my slice of the global minibatch's mask); evaluation:
        ``x``."""
        self._mask = None
        if not self.run.training or self.p == 0.0:
            return x
        run = self.run
        rows = x.shape[0] if run.rows is None else run.rows
        key = (stream_key(self._seed, run.step, self._index) if run.phase == 0 else
               stream_key(self._seed, run.step, self._index, run.phase))
        index = (slice(run.row0, run.row0 + x.shape[0]),) + self._cut
        self._mask = dropout_mask(key, self.p, (rows,) + self.in_shape, index, xp=self.xp, dtype=x.dtype)
        return dropout_fprop(x, self._mask)

    def bprop(self, delta, need_input_grad=True):
        if not need_input_grad:
            return None
        return delta if self._mask is None else dropout_bprop(delta, self._mask)

    def describe(self):
        return f"{super().describe()}  p={self.p:g}"

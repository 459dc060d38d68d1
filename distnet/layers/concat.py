"""``ConcatLayer``: inputs stacked along the channel axis (image-like ``(C_k, H, W)`` inputs of
one plane: an Inception-style or DenseNet-style merge) or the feature axis (vectors ``(F_k,)``).

Distribution: image inputs of one plane have the same tiles on every rank, so stacking the
channels of the tiles is the tile of the stacked activation: local, no communication, one class
for one process and any grid. Vectors must be replicated (fully connected outputs).
"""
import numpy as np

from ..backend import get_array_module
from ..ops.parallel import copyto
from .add import one_layout_kind
from .base import BaseLayer
from .placement import Layout, Placement


class ConcatLayer(BaseLayer):
    """Keys: ``inputs`` (at least two layer names, or ``input``; the output's channels are the
    inputs' in this order). Image inputs must share ``(H, W)``; vectors are joined end to end."""

    multi_input = True

    def __init__(self, **common):
        super().__init__(**common)
        if self.inputs is not None and len(self.inputs) < 2:
            raise self.error(f"a ConcatLayer joins at least two inputs, but inputs names {len(self.inputs)}",
                             "inputs")

    def infer_shape(self, in_shapes):
        """``(C_k, H, W)`` -> ``(sum C_k, H, W)``; ``(F_k,)`` -> ``(sum F_k,)``."""
        if not isinstance(in_shapes, list) or len(in_shapes) < 2:
            raise self.error("a ConcatLayer joins at least two inputs; name them in its inputs key", "inputs")
        first = tuple(in_shapes[0])
        for name, shape in zip(self.inputs[1:], in_shapes[1:]):
            shape = tuple(shape)
            if len(shape) != len(first) or shape[1:] != first[1:]:
                what = ("planes (rows, cols)" if len(first) == 3 else "spatial shape" if len(first) > 1
                        else "kind (all vectors or all images)")
                raise self.error(f"its inputs must have one {what}, but '{self.inputs[0]}' gives "
                                 f"{_fmt(first)} and '{name}' gives {_fmt(shape)}", "inputs")
        self.in_shapes = [tuple(s) for s in in_shapes]
        self.sizes = [s[0] for s in self.in_shapes]
        self.in_shape = first
        self.out_shape = (sum(self.sizes),) + first[1:]
        return self.out_shape

    def place(self, layouts, position):
        """Every input's layout kind must agree; the output has it too (local stacking)."""
        kind = one_layout_kind(self, layouts, "to be joined locally")
        return Placement(Layout.of(kind, self.in_shape, position), Layout.of(kind, self.out_shape, position))

    def fprop(self, xs):
        """``xs``: ``(B, C_k, h, w)`` (or ``(B, F_k)``) local arrays -> stacked on axis 1 (the
        copies shared out over the kernel threads by channel)."""
        xp = get_array_module(xs[0])
        out = xp.empty(xs[0].shape[:1] + (sum(x.shape[1] for x in xs),) + xs[0].shape[2:],
                       dtype=np.result_type(*(x.dtype for x in xs)))
        for x, block in zip(xs, self._blocks()):
            copyto(out[:, block], x, axis=1)
        return out

    def bprop(self, delta, need_input_grad=True):
        """The gradient's channel (feature) blocks, one per input (contiguous copies)."""
        if not need_input_grad:
            return None
        xp = get_array_module(delta)
        grads = []
        for block in self._blocks():
            d = delta[:, block]
            grads.append(copyto(xp.empty(d.shape, dtype=d.dtype), d, axis=1))
        return grads

    def _blocks(self):
        """Each input's channel (feature) slice of the output."""
        ends = [int(c) for c in np.cumsum(self.sizes)]   # plain ints: no host array for a device xp
        return [slice(e - n, e) for e, n in zip(ends, self.sizes)]

    def describe(self):
        return f"{self.name}: concat({', '.join(self.inputs)}) -> {self.out_shape}"


def _fmt(shape):
    return "x".join(str(v) for v in shape)

"""``AddLayer``: the elementwise sum of several inputs of one shape (a residual block's
``block + shortcut``), optionally followed by an activation.

Distribution: every input has the same layout (spatial tiles of the same global shape on the
same grid, or replicated vectors), so the sum is local on every rank: no communication, no
parameters.
"""
from .base import BaseLayer
from .placement import Layout, Placement


class AddLayer(BaseLayer):
    """``y = f(x_1 + x_2 + ... + x_n)`` (summed in the order of ``inputs``). Keys: ``inputs``
    (at least two layer names, or ``input``), ``activation`` (optional, e.g.
    ``!obj:distnet.activations.RectLin {}``: a ResNet's ReLU after the addition; default none).
    Every input must have the same global shape ``(C, H, W)`` or ``(F,)`` and layout."""

    config_types = {"activation": ("obj", "activation")}
    multi_input = True

    def __init__(self, activation=None, **common):
        super().__init__(**common)
        self.activation = activation
        if self.inputs is not None and len(self.inputs) < 2:
            raise self.error(f"an AddLayer sums at least two inputs, but inputs names {len(self.inputs)}",
                             "inputs")

    def infer_shape(self, in_shapes):
        """``in_shapes``: the inputs' global shapes (all equal) -> the same shape."""
        if not isinstance(in_shapes, list) or len(in_shapes) < 2:
            raise self.error("an AddLayer sums at least two inputs; name them in its inputs key", "inputs")
        self.in_shape = self.out_shape = one_shape(self, in_shapes)
        self.in_shapes = [tuple(s) for s in in_shapes]
        return self.out_shape

    def place(self, layouts, position):
        """Every input's layout kind must agree; the output has it too (local sum)."""
        kind = one_layout_kind(self, layouts, "to be added locally", "; make both branches end in layers of "
                               "the same kind (both window layers, or both fully connected)")
        layout = Layout.of(kind, self.out_shape, position)
        return Placement(layout, layout)

    def fprop(self, xs):
        """``xs``: the inputs' local arrays (same shape) -> their sum (after the activation)."""
        z = xs[0] + xs[1]
        for x in xs[2:]:
            z += x
        return activated(self, z)

    def bprop(self, delta, need_input_grad=True):
        """The same gradient for every input (copies: each reader may keep or change its own)."""
        return input_grads(self, delta, len(self.in_shapes)) if need_input_grad else None

    def describe(self):
        act = f"  activation={self.activation.name}" if self.activation is not None else ""
        return f"{self.name}: {' + '.join(self.inputs)} {self.in_shape} -> {self.out_shape}{act}"


def activated(layer, z):
    """``layer.activation(z)`` (``z`` itself without one), keeping ``z`` and the result for
    :func:`input_grads`."""
    if layer.activation is None:
        return z
    layer._z, layer._y = z, layer.activation.fprop(z)
    return layer._y


def input_grads(layer, delta, n):
    """The gradient of a sum of ``n`` inputs followed by ``layer.activation``: one array per
    input (copies: each reader may keep or change its own)."""
    dz = delta if layer.activation is None else layer.activation.bprop(layer._z, layer._y, delta)
    return [dz] + [dz.copy() for _ in range(n - 1)]


def one_shape(layer, in_shapes):
    """The global shape shared by a multi-input ``layer``'s ``in_shapes``; a located error
    (the ``inputs`` key) naming the first input whose shape differs."""
    first = tuple(in_shapes[0])
    for name, shape in zip(layer.inputs[1:], in_shapes[1:]):
        if tuple(shape) != first:
            raise layer.error(f"its inputs must have one shape, but '{layer.inputs[0]}' gives "
                              f"{_fmt(first)} and '{name}' gives {_fmt(shape)}", "inputs")
    return first


def one_layout_kind(layer, layouts, purpose, hint=""):
    """The layout kind shared by a multi-input ``layer``'s input ``layouts``; a located error
    listing every input's kind otherwise."""
    kinds = list(dict.fromkeys(layouts))     # in input order (kinds are not ordered)
    if len(kinds) > 1:
        which = ", ".join(f"'{n}': {k}" for n, k in zip(layer.inputs, layouts))
        raise layer.error(f"its inputs must have one layout {purpose}, but they have {which}{hint}", "inputs")
    return kinds[0]


def _fmt(shape):
    return "x".join(str(v) for v in shape)

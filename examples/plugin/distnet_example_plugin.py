"""An example distnet plugin: ``ScaleShiftLayer``, a learnable scale and shift per channel,
``y[b, c, i, j] = scale[c] * x[b, c, i, j] + shift[c]``, on one process and on any process grid
(one class: the layer distributes itself from its placement).

Installed (``pip install examples/plugin``), the entry point ``distnet.plugins`` of this package
names this module; distnet imports it the first time it resolves a YAML class, and the
``register_classes`` line at the end adds the class to distnet's registry. YAML then names it
``!obj:ScaleShiftLayer {...}`` or ``!obj:distnet_example_plugin.ScaleShiftLayer {...}``.
docs/extending.md walks through this file.
"""
import numpy as np

from distnet.config.registry import register_classes
from distnet.layers.base import BaseLayer
from distnet.layers.params import check_weight_init, gen_weights
from distnet.layers.placement import OVER_DATA, OVER_GRAD, SPATIAL, Layout, ParamPlacement, Placement


class ScaleShiftLayer(BaseLayer):
    """Per-channel ``scale`` and ``shift`` of image-like activations ``(C, H, W)``. Keys:
    ``weight_init`` (optional: how to draw ``scale``, e.g. ``{type: uniform, low: 0.5, high:
    1.5}``, with ``bias_init`` the value of ``shift``; default scale 1, shift 0, nothing drawn),
    ``learning_rate`` (default: the model's).

    On a process grid each rank holds its tile; no halo (each output pixel reads only its own
    input pixel); ``scale`` and ``shift`` are replicated (:meth:`gradient_over`)."""

    config_types = {"weight_init": dict, "learning_rate": float}

    def __init__(self, weight_init=None, learning_rate=None, **common):
        super().__init__(**common)
        self.weight_init = check_weight_init(weight_init) if weight_init is not None else None
        self.learning_rate = learning_rate

    def infer_shape(self, in_shape):
        """Global ``(C, H, W)`` in, the same out."""
        if len(in_shape) != 3:
            raise self.error(f"needs an image-like input (maps, rows, cols), got {tuple(in_shape)}")
        self.in_shape = self.out_shape = tuple(in_shape)
        return self.out_shape

    def place(self, layout, position):
        """Elementwise: the output is laid out as the input; ``scale`` and ``shift`` ``(C,)`` are
        whole on every rank. Their gradient rule is :meth:`gradient_over`."""
        C, over = self.in_shape[0], self.gradient_over(layout)
        params = tuple(ParamPlacement(f"{self.name}.{n}", (C,), (C,), Ellipsis, over) for n in ("scale", "shift"))
        return Placement(Layout.of(layout, self.in_shape, position), Layout.of(layout, self.out_shape, position),
                         params=params)

    def gradient_over(self, layout):
        """The one distribution rule: on a tile (``SPATIAL`` input) the gradient is a partial sum
        over this rank's pixels, summed over the spatial and data ranks (``grad``); on whole
        images (replicated input, e.g. under MLPDist) it is complete on every rank and only the
        data replicas sum it (``data``). On one process both sum nothing."""
        return OVER_GRAD if layout == SPATIAL else OVER_DATA

    def draw_params(self, rng):
        """The global ``scale (C,)`` and ``shift (C,)``."""
        C, wi = self.in_shape[0], self.weight_init
        scale = gen_weights(rng, (C,), wi, self.dtype) if wi else np.ones(C, self.dtype)
        return [scale, np.full(C, wi.get("bias_init", 0.0) if wi else 0.0, self.dtype)]

    def params_ready(self):
        self.scale, self.shift = (p.value for p in self._params)

    def fprop(self, x):
        """``x (B, C, h, w)`` (this rank's tile, or whole images) -> ``y`` of the same shape."""
        self._x = x
        return x * self.scale[:, None, None] + self.shift[:, None, None]

    def bprop(self, delta, need_input_grad=True):
        """Sums over this rank's batch and pixels into the grads; ``dx = delta * scale``."""
        self._params[0].grad[...] = (delta * self._x).sum(axis=(0, 2, 3))
        self._params[1].grad[...] = delta.sum(axis=(0, 2, 3))
        return delta * self.scale[:, None, None] if need_input_grad else None


register_classes(ScaleShiftLayer)

"""An example distnet plugin: ``ScaleShiftLayer``, a learnable scale and shift per channel,
``y[b, c, i, j] = scale[c] * x[b, c, i, j] + shift[c]``, and its distributed twin.

Installed (``pip install examples/plugin``), the entry point ``distnet.plugins`` of this package
names this module; distnet imports it the first time it resolves a YAML class, and the
``register_classes`` line at the end adds the two classes to distnet's registry. YAML then names
them ``!obj:ScaleShiftLayer {...}`` or ``!obj:distnet_example_plugin.ScaleShiftLayerDist {...}``.
docs/extending.md walks through this file.
"""
import numpy as np

from distnet.config.registry import register_classes
from distnet.layers.base import SPATIAL, BaseLayer
from distnet.layers.params import OVER_DATA, OVER_GRAD, Param, check_weight_init, gen_weights


class ScaleShiftLayer(BaseLayer):
    """Per-channel ``scale`` and ``shift`` of image-like activations ``(C, H, W)``. Keys:
    ``weight_init`` (optional: how to draw ``scale``, e.g. ``{type: uniform, low: 0.5, high:
    1.5}``, with ``bias_init`` the value of ``shift``; default scale 1, shift 0, nothing drawn),
    ``learning_rate`` (default: the model's)."""

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

    def configure(self, layout, ctx):
        """Elementwise: the output is laid out as the input. The parameters' gradient is summed
        over ``Topology.grad``, which on a 1x1 grid holds just the data replicas."""
        grid = tuple(ctx.topology.grid)
        if not self.is_dist and grid != (1, 1):
            raise self.error(f"{type(self).__name__} is not distributed but the run uses a "
                             f"{grid[0]}x{grid[1]} process grid; use ScaleShiftLayerDist")
        self.reduce_over = OVER_GRAD
        return layout

    def init_params(self, rng):
        """``scale (C,)`` and ``shift (C,)``, whole on every rank (global = local shape)."""
        C = self.in_shape[0]
        wi = self.weight_init
        scale = gen_weights(rng, (C,), wi, self.dtype) if wi else np.ones(C, self.dtype)
        shift = np.full(C, wi.get("bias_init", 0.0) if wi else 0.0, self.dtype)
        self.scale, self.shift = self.xp.asarray(scale), self.xp.asarray(shift)
        self._params = [Param(f"{self.name}.{n}", v, self.xp.zeros_like(v), self.reduce_over)
                        for n, v in (("scale", self.scale), ("shift", self.shift))]

    def params(self):
        return self._params

    def fprop(self, x):
        """``x (B, C, h, w)`` (this rank's tile, or whole images) -> ``y`` of the same shape."""
        self._x = x
        return x * self.scale[:, None, None] + self.shift[:, None, None]

    def bprop(self, delta, need_input_grad=True):
        """Sums over this rank's batch and pixels into the grads; ``dx = delta * scale``."""
        self._params[0].grad[...] = (delta * self._x).sum(axis=(0, 2, 3))
        self._params[1].grad[...] = delta.sum(axis=(0, 2, 3))
        return delta * self.scale[:, None, None] if need_input_grad else None


class ScaleShiftLayerDist(ScaleShiftLayer):
    """:class:`ScaleShiftLayer` on any process grid. No halo (each output pixel reads only its
    own input pixel); ``scale`` and ``shift`` are replicated. The one distribution rule: on a
    tile (``SPATIAL`` input) their gradient is a partial sum over this rank's pixels, summed over
    the spatial and data ranks (``Topology.grad``); on whole images (replicated input, e.g.
    under MLPDist) it is complete on every rank and only the data replicas sum it."""

    is_dist = True

    def configure(self, layout, ctx):
        out = super().configure(layout, ctx)
        self.reduce_over = OVER_GRAD if layout == SPATIAL else OVER_DATA
        return out


register_classes(ScaleShiftLayer, ScaleShiftLayerDist)

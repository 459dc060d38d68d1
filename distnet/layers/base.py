"""What every layer shares: YAML keys common to all, the configure / fprop / bprop / update
protocol, and how activations are laid out across ranks.

Protocol (the model calls these in order):

* ``infer_shape(in_shape) -> out_shape`` once, before any MPI: check the YAML's declared shapes
  against the predecessor's output and derive the output shape. Shapes are *global*:
  ``(C, H, W)`` for image-like activations, ``(F,)`` for vectors.
* ``bind(ctx)`` then ``configure(layout, ctx) -> out_layout``: plan this rank's part (halo
  plans, weight slices) on the run's process grid.
* ``init_params(rng)``: draw the global weight tensors from the backend RNG in neon's order and
  keep this rank's part (Dist layers).
* ``fprop(x) -> y`` and ``bprop(delta, need_input_grad) -> dx`` on this rank's local arrays;
  ``bprop`` fills ``Param.grad`` of every parameter.
* ``params()`` lists :class:`~distnet.layers.params.Param` objects; the model reduces their
  gradients and applies the update, then calls ``after_update()``.
"""
from dataclasses import dataclass

from ..config.builder import config_error
from ..config.types import NonNegativeInt, PositiveInt

#: Every rank holds its tile (block partition on the process grid) of every image/channel.
SPATIAL = "spatial"
#: Every rank holds the whole activation.
REPLICATED = "replicated"


@dataclass
class LayerContext:
    """What ``configure`` may use: the backend (``xp``, dtype), the run's ``Topology`` (a 1x1
    serial one for single-process runs), and the layer's index in the model."""

    backend: object
    topology: object
    index: int


class BaseLayer:
    """Keys every layer accepts: ``name`` (str), ``pos`` (int: must equal the list index if given,
    neon used it to find the previous layer), ``batch_size`` (accepted for neon files; the model's
    batch size is used), ``stage`` (int: the pipeline stage that runs this layer, when the
    experiment has ``pipe > 1``; default: from the model's ``stages``). neon's per-layer
    ``backend`` key is accepted and ignored: the experiment's backend is used everywhere."""

    config_types = {"name": str, "pos": NonNegativeInt, "batch_size": PositiveInt, "stage": NonNegativeInt}
    config_ignored = ("backend",)
    #: Dist layers set this; a non-dist spatial layer refuses a distributed input.
    is_dist = False
    #: ``learning_rate`` is None for layers without weights.
    learning_rate = None

    def __init__(self, name=None, pos=None, batch_size=None, stage=None):
        self.name = name
        self.pos = pos
        self.batch_size = batch_size
        self.stage = stage
        self.in_shape = self.out_shape = None

    def bind(self, ctx):
        """Remember the backend and context before ``configure`` (set by the model)."""
        self.ctx = ctx
        self.xp = ctx.backend.xp
        self.dtype = ctx.backend.dtype

    def error(self, message, key=None):
        """A ConfigError pointing at this layer's YAML (or one of its keys)."""
        label = self.name or type(self).__name__
        return config_error(self, f"layer '{label}': {message}", key)

    def infer_shape(self, in_shape):
        """Global output shape for a global input shape; checks the YAML's declared shapes."""
        raise NotImplementedError

    def planes(self):
        """(H, W) planes the process grid must cut into non-empty tiles (window layers)."""
        return []

    def configure(self, layout, ctx):
        """Plan this rank's part (halo plans, weight slices); returns the output layout."""
        raise NotImplementedError

    def init_params(self, rng):
        """Draw weights (layers without weights draw nothing)."""

    def params(self):
        return []

    def release_params(self):
        """Drop this layer's parameters: another pipeline stage owns the layer. Every rank draws
        every layer's weights (one RNG stream, DESIGN §4) and then releases the layers it does not
        run; afterwards ``params()`` is ``[]`` and the arrays (values, gradients, optimiser state)
        are no longer referenced by the layer."""
        held = self.params()
        #: Names of the parameters another stage holds (checkpoints count and match them).
        self.released_param_names = [p.name for p in held]
        arrays = {id(a) for p in held for a in (p, p.value, p.grad, p.velocity) if a is not None}
        for name, value in list(vars(self).items()):
            if id(value) in arrays:
                setattr(self, name, None)
            elif isinstance(value, list) and any(id(v) in arrays for v in value):
                setattr(self, name, [])
        self.params = _no_params  # instance attribute: shadows the class's params()

    def after_update(self):
        """Hook run after the optimiser step (LocalFiltering renormalises its rows)."""

    def fprop(self, x):
        raise NotImplementedError

    def bprop(self, delta, need_input_grad=True):
        raise NotImplementedError

    def describe(self):
        """One line for logs and ``distnet show``."""
        return f"{self.name or type(self).__name__}: {self.in_shape} -> {self.out_shape}"


def _no_params():
    """``params()`` of a released layer (module level, so a released layer still pickles)."""
    return []

"""What every layer shares: YAML keys common to all, the place / configure / fprop / bprop /
update protocol.

Protocol (the model calls these in order):

* ``infer_shape(in_shape) -> out_shape`` once, before any MPI: check the YAML's declared shapes
  against the predecessor's output and derive the output shape. Shapes are *global*:
  ``(C, H, W)`` for image-like activations, ``(F,)`` for vectors.
* ``place(in_layout, position) -> Placement``: pure (no MPI, no arrays): how the layer is
  distributed on a rank's :class:`~distnet.geometry.grid.GridPosition` — its input and output
  layouts, every parameter's global shape, this rank's slice and the communicator that sums its
  gradient, its halo exchanges (:mod:`distnet.layers.placement`). ``distnet show`` calls it for
  ranks it describes; nothing else decides a distribution fact.
* ``bind(ctx)`` then ``configure(in_layout, ctx) -> out_layout``: place the layer on this rank
  (``self.placement``) and build what it runs with (:meth:`setup`: its chunk exchange).
* ``init_params(rng)``: draw the global weight tensors (:meth:`draw_params`) from the backend RNG
  in neon's order and keep this rank's slice of each, as its placement says.
* ``fprop(x) -> y`` and ``bprop(delta, need_input_grad) -> dx`` on this rank's local arrays;
  ``bprop`` fills ``Param.grad`` of every parameter.
* ``params()`` lists :class:`~distnet.layers.params.Param` objects; the training step
  (:mod:`distnet.layers.step`) sums their gradients and applies the update, then calls
  ``after_update()``.
"""
from dataclasses import dataclass

from ..config.builder import config_error
from .params import Param
from .placement import REPLICATED, SPATIAL  # noqa: F401 - the layout kinds, re-exported


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

    config_types = {"name": str, "pos": int, "batch_size": int, "stage": int}
    config_ignored = ("backend",)
    #: Dist layers set this; a non-dist spatial layer refuses a distributed input.
    is_dist = False
    #: ``learning_rate`` is None for layers without weights.
    learning_rate = None
    #: When True, the arrays ``fprop`` / ``bprop`` return may be this layer's own buffers,
    #: reused (overwritten) by its next ``fprop`` / ``bprop``: no large allocation per training
    #: step. The model turns it on when nothing keeps an output across calls (no pipeline).
    reuse_buffers = False
    #: The layer's own momentum schedule mapping (neon's later per-layer ``learning_rule``;
    #: ``{type: constant, coef: 0}`` for plain gradient descent), or None: the model's ``momentum``.
    momentum_params = None
    #: This rank's :class:`~distnet.layers.placement.Placement` (set by :meth:`configure`).
    placement = None
    _params = ()

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

    def place(self, layout, position):
        """The :class:`~distnet.layers.placement.Placement` of this layer on ``position`` (a
        :class:`~distnet.geometry.grid.GridPosition`) when its input has layout kind ``layout``.
        Pure; raises the layer's ConfigError when it cannot be placed there."""
        raise NotImplementedError

    def configure(self, layout, ctx):
        """Place this layer on this rank (``self.placement``) and :meth:`setup` what it runs
        with; returns the output layout kind."""
        self.placement = self.place(layout, ctx.topology.position)
        self.setup(ctx)
        return self.placement.out_layout.kind

    def setup(self, ctx):
        """Build what the layer runs with on this rank from ``self.placement`` (exchanges,
        communicators); called by :meth:`configure`."""

    def draw_params(self, rng):
        """The global parameter tensors (numpy), drawn from ``rng`` in neon's order, one per
        entry of ``self.placement.params`` (layers without weights draw nothing)."""
        return []

    def init_params(self, rng):
        """Draw the global tensors and keep this rank's part of each (placement's ``index``)."""
        values = self.draw_params(rng)
        assert len(values) == len(self.placement.params), (self.name, len(values))
        self._params = [Param.from_placement(pp, pp.local_part(v), self.xp)
                        for pp, v in zip(self.placement.params, values)]
        self.params_ready()

    def params_ready(self):
        """Hook after :meth:`init_params`: bind the layer's names (``self.W``...) to its params."""

    def params(self):
        return list(self._params)

    def release_params(self):
        """Drop this layer's parameters: another pipeline stage owns the layer. Every rank draws
        every layer's weights (one RNG stream, DESIGN §4) and then releases the layers it does not
        run; afterwards ``params()`` is ``[]`` and the arrays (values, gradients, optimiser state)
        are no longer referenced by the layer (its placement still names them: checkpoints
        count and match them)."""
        arrays = {id(a) for p in self._params for a in (p, p.value, p.grad, p.velocity) if a is not None}
        for name, value in list(vars(self).items()):
            if id(value) in arrays:
                setattr(self, name, None)
        self._params = ()

    def after_update(self):
        """Hook run after the optimiser step (LocalFiltering renormalises its rows)."""

    def fprop(self, x):
        raise NotImplementedError

    def bprop(self, delta, need_input_grad=True):
        raise NotImplementedError

    def describe(self):
        """One line for logs and ``distnet show``."""
        return f"{self.name or type(self).__name__}: {self.in_shape} -> {self.out_shape}"

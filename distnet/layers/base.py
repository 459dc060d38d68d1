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
  ranks it describes; nothing else decides a distribution fact. A layer class distributes itself:
  the same class runs on whole images (a grid of one tile) and on a rank's tile of a process
  grid, as its placement says (neon's ``...Dist`` names are aliases of it in YAML).
* ``bind(ctx)`` then ``configure(in_layout, ctx) -> out_layout``: place the layer on this rank
  (``self.placement``) and build what it runs with (:meth:`setup`: its chunk exchange).
* ``init_params(rng)``: draw the global weight tensors (:meth:`draw_params`) from the backend RNG
  in neon's order and keep this rank's slice of each, as its placement says.
* ``fprop(x) -> y`` and ``bprop(delta, need_input_grad) -> dx`` on this rank's local arrays;
  ``bprop`` fills ``Param.grad`` of every parameter.
* ``params()`` lists :class:`~distnet.layers.params.Param` objects; the training step
  (:mod:`distnet.layers.step`) sums their gradients and applies the update, then calls
  ``after_update()``. ``buffers()`` lists the layer's untrained state (batch norm's running
  statistics: :attr:`~distnet.layers.placement.Placement.buffers`), made by
  :meth:`BaseLayer.init_buffers` and kept in checkpoints.
* Training or evaluation: layers whose forward differs (batch norm, dropout) read
  ``self.run.training`` (:class:`RunState`, one per model, shared by its layers: the model's
  :meth:`~distnet.models.model.Model.evaluating` switches it; it also says which optimiser step and
  which rows of the global minibatch are running, for dropout's masks).
"""
from dataclasses import dataclass, field

import numpy as np

from ..config.builder import config_error, config_name
from ..config.types import NonNegativeInt, PositiveInt
from .params import NonFiniteDraw, Param, check_finite
from .placement import REPLICATED, SPATIAL  # noqa: F401 - the layout kinds, re-exported


@dataclass
class RunState:
    """What a model is doing now, read by its layers (one object per model, shared).

    ``training``: True in training steps, False in evaluation (``predict``: batch norm uses
    its running statistics, dropout is the identity). ``step``: the 0-based index of the
    current optimiser step (the number of steps done before it; restored from checkpoints).
    ``row0`` / ``rows``: this rank's first row in the GLOBAL minibatch and the global
    minibatch size (data replicas hold contiguous blocks of rows), so that a layer can address
    its slice of a global per-sample tensor (dropout's mask). ``phase``: 0 in supervised
    training; ``1 + i`` while GB pretrains layer ``i``, and ``step`` then counts the forward
    passes of that pretraining (dropout draws a new mask per pass, in a stream of its own)."""

    training: bool = True
    step: int = 0
    phase: int = 0
    row0: int = 0
    rows: int = None


@dataclass
class LayerContext:
    """What ``configure`` may use: the backend (``xp``, dtype), the run's ``Topology`` (a 1x1
    serial one for single-process runs), the layer's index in the model and the model's
    :class:`RunState`."""

    backend: object
    topology: object
    index: int
    run: RunState = field(default_factory=RunState)


class BaseLayer:
    """Keys every layer accepts: ``name`` (str, unique in the model: checkpoints, logs and
    ``inputs`` lists name layers by it; default ``<Class><index>``), ``pos`` (int: must equal the list index if given,
    neon used it to find the previous layer), ``batch_size`` (accepted for neon files; the model's
    batch size is used), ``stage`` (int: the pipeline stage that runs this layer, when the
    experiment has ``pipe > 1``; default: from the model's ``stages``), ``inputs`` (list of
    layer names, or ``input`` for the model's input: the layers whose outputs this layer reads,
    making the model a graph; default: the previous layer, as in a chain; see
    :mod:`distnet.models.graph`), ``tower`` (int: the tower ``0 .. T-1`` the layer belongs to in
    a model with ``towers: T``; default: no tower, the layer is shared by all towers; see
    :mod:`distnet.models.towers`). neon's per-layer
    ``backend`` key is accepted and ignored: the experiment's backend is used everywhere."""

    config_types = {"name": str, "pos": NonNegativeInt, "batch_size": PositiveInt, "stage": NonNegativeInt,
                    "inputs": ("list", str), "tower": NonNegativeInt}
    config_ignored = ("backend",)
    #: ``learning_rate`` is None for layers without weights.
    learning_rate = None
    #: The activation the layer applies last (an object of :mod:`distnet.ops.activations`), or
    #: None for layers without one (the model checks the last layer's against its cost).
    activation = None
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
    _buffers = ()
    #: True for layers that must see the whole minibatch of their rank in one call (batch
    #: norm's batch statistics, dropout's masks addressed by global rows): micro-batched
    #: pipelines, which run parts of a minibatch apart, refuse them.
    whole_batch = False
    #: True for layers that read several inputs (AddLayer, ConcatLayer): ``infer_shape`` and
    #: ``place`` / ``configure`` take lists (shapes, layout kinds), ``fprop`` a list of arrays,
    #: and ``bprop`` returns a list of input gradients.
    multi_input = False
    #: True for the exchange point of a tower network (TowerSumLayer): it reads one output of
    #: every tower, and the graph hands it only those of this rank's towers.
    tower_sum = False

    def __init__(self, name=None, pos=None, batch_size=None, stage=None, inputs=None, tower=None):
        self.name = name
        self.tower = tower
        self.inputs = list(inputs) if inputs is not None else None
        self.pos = pos
        self.batch_size = batch_size
        self.stage = stage
        self.in_shape = self.out_shape = None

    def bind(self, ctx):
        """Remember the backend and context before ``configure`` (set by the model)."""
        self.ctx = ctx
        self.run = ctx.run
        self.xp = ctx.backend.xp
        self.dtype = ctx.backend.dtype

    def error(self, message, key=None):
        """A ConfigError pointing at this layer's YAML (or one of its keys)."""
        label = self.name or config_name(self)
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

    def draw_local_params(self, rng):
        """This rank's part (numpy, placement's ``index``) of each global tensor of
        :meth:`draw_params`, drawn from ``rng`` in neon's order; raises
        :class:`~distnet.layers.params.NonFiniteDraw` for a value the dtype cannot hold. This
        default draws the global tensors whole; a layer whose sharded weights can be large
        keeps only its slice while drawing (FC, LocalFiltering)."""
        values = self.draw_params(rng)
        for v in values:   # every rank draws the same global tensors: all raise alike
            check_finite(v)
        return [pp.local_part(v) for pp, v in zip(self.placement.params, values)]

    def init_params(self, rng):
        """Draw the global tensors and keep this rank's part of each (placement's ``index``)."""
        try:
            with np.errstate(over="ignore", invalid="ignore"):   # the check below says it in one line
                parts = self.draw_local_params(rng)
        except OverflowError as e:   # numpy: uniform(-1e308, 1e308)
            raise self.error(f"weight_init cannot be drawn ({e})", "weight_init") from None
        except NonFiniteDraw as e:
            raise self.error(f"weight_init draws values that {e} cannot hold "
                             "(they become inf); give a smaller range or scale", "weight_init") from None
        assert len(parts) == len(self.placement.params), (self.name, len(parts))
        self._params = [Param.from_placement(pp, part, self.xp)
                        for pp, part in zip(self.placement.params, parts)]
        self.init_buffers()
        self.params_ready()

    def initial_buffers(self):
        """The global value (numpy) of each entry of ``self.placement.buffers`` (no RNG draws:
        buffers never change the weight stream)."""
        return []

    def init_buffers(self):
        """Make this rank's part of every buffer (:meth:`initial_buffers`), called by
        :meth:`init_params`."""
        values = self.initial_buffers()
        assert len(values) == len(self.placement.buffers), (self.name, len(values))
        self._buffers = [Param.from_placement(pp, pp.local_part(v), self.xp, grad=False)
                         for pp, v in zip(self.placement.buffers, values)]

    def buffers(self):
        """This layer's buffers (:class:`~distnet.layers.params.Param` without gradient)."""
        return list(self._buffers)

    def params_ready(self):
        """Hook after :meth:`init_params`: bind the layer's names (``self.W``...) to its params."""

    def params(self):
        return list(self._params)

    def release_params(self):
        """Drop this layer's parameters: another pipeline stage owns the layer. Every rank draws
        every layer's weights (one RNG stream, docs/design.md#initialisation) and then releases
        the layers it does not run; afterwards ``params()`` is ``[]`` and the arrays (values,
        gradients, optimiser state) are no longer referenced by the layer (its placement still
        names them: checkpoints count and match them)."""
        arrays = {id(a) for p in (*self._params, *self._buffers)
                  for a in (p, p.value, p.grad, p.velocity) if a is not None}
        for name, value in list(vars(self).items()):
            if id(value) in arrays:
                setattr(self, name, None)
        self._params = self._buffers = ()

    def after_update(self):
        """Hook run after the optimiser step (LocalFiltering renormalises its rows)."""

    def fprop(self, x):
        raise NotImplementedError

    def bprop(self, delta, need_input_grad=True):
        raise NotImplementedError

    def describe(self):
        """One line for logs and ``distnet show``."""
        return f"{self.name or config_name(self)}: {self.in_shape} -> {self.out_shape}"

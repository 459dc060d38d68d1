"""The model of every image experiment: a sequence (or graph) of layers trained with minibatch
SGD, as neon's MLP (docs/neon-semantics.md#mlp-training-loop,
docs/neon-semantics.md#predict-and-error-rates). Experiment files name it by neon's names, ``MLP``, ``Convnet`` and
``ConvnetDist`` (aliases of :class:`Model`; messages print the name the file wrote).

The same class runs distributed: the layers decide what is split (Dist layers: their
placements) and the model only sequences them through the one training step
(:class:`~distnet.layers.step.TrainingStep`: gradient sums over the communicators the placements
name, update). Its cost reads the last layer's output, complete on every rank (per image) or
tiled like the images (per pixel, whose sums span the tiles): :mod:`distnet.models.outputs`.

The model's part of the training loop (:mod:`distnet.experiments.loop` runs it) is a small
protocol: :meth:`Model.start` (the first epoch, from a resume state), :meth:`Model.before_training`
(GB pretrains there), :meth:`Model.fit_epoch` and :meth:`Model.split_metrics`.
"""
import contextlib
import math

import numpy as np

from ..comm.reduce import allreduce_scalars
from ..config.builder import config_error, config_name
from ..config.types import MOMENTUM, NonNegative, NonNegativeInt, PositiveInt
from ..errors import ConfigError, TrainingError
from ..layers.base import LayerContext, RunState
from ..layers.pixel_cost import bind_cost
from ..layers.placement import SPATIAL
from ..layers.step import TrainingStep
from ..log import get_logger
from ..ops.costs import CrossEntropy, misclassified
from ..optim.optimizer import Optimizer
from ..optim.rates import LearningRates
from ..optim.sgd import MomentumSchedule
from .execution import ChainExecution, GraphExecution
from .finite import after_step as check_finite_after_step  # non-finite parameters
from .graph import Graph
from .notes import model_notes
from .outputs import check_output_layout, check_output_shape, check_outputs, one_hot
from .stages import plan_stages, stage_plan, tower_plan


class Model:
    """Keys: ``layers`` (list), ``num_epochs`` (int), ``batch_size`` (int, default: all training
    images), ``cost`` (default CrossEntropy), ``momentum`` (a schedule mapping: see "Mappings"
    at the end of the reference; default none), ``learning_rate`` (default for layers that give
    none; neon stored it unused), ``shuffle`` (bool, default False: neon's fixed order; True
    reshuffles every epoch from the backend seed), ``serialized_path`` (neon's model pickle:
    accepted and ignored, with a warning; a run writes ``checkpoint.h5`` in its run directory,
    and ``distnet run --resume`` continues from one), and for pipelined runs (experiment
    ``pipe > 1``) ``stages`` (list of the layer indices where stages 1, 2, ... begin, like
    PopTorch's ``BeginBlock``; or per-layer ``stage`` keys) and ``micro_batches`` (GPipe
    micro-batches per minibatch, default 1).

    ``learning_rule`` (a distnet addition: ``Adam``, ``AdamW``, ``GradientDescent``, with
    ``schedule`` and ``max_grad_norm``) replaces neon's SGD with ``momentum``. A layer's
    ``learning_rate`` wins over the rule's, which wins over the model's.

    Layers may name their inputs (``inputs: [conv2, shortcut]``): the model is then a graph
    (residual additions, concatenations, branches; :mod:`distnet.models.graph`), run in the
    order of ``layers``; without any ``inputs`` key it is the chain it always was. Graphs run
    on one pipeline stage and one micro-batch.

    ``towers`` (T, a distnet addition): a tower network (Chainer's model-parallel ParallelMLP):
    layers with ``tower: t`` keys belong to tower ``t``, TowerSumLayers sum one output of every
    tower, and the experiment's ``pipe`` ranks hold the towers (``pipe: 1``: all on one
    process; ``pipe: T``: one tower per rank); see :mod:`distnet.models.towers`.

    The last batch of an epoch may be smaller than ``batch_size`` (neon crashed there).
    """

    config_types = {"layers": ("list", ("obj", "layer")), "num_epochs": NonNegativeInt, "batch_size": PositiveInt,
                    "cost": ("obj", "cost"), "momentum": MOMENTUM, "learning_rate": NonNegative,
                    "shuffle": bool, "serialized_path": str, "stages": ("list", NonNegativeInt),
                    "micro_batches": PositiveInt, "learning_rule": ("obj", "learning_rule"),
                    "towers": PositiveInt}
    config_ignored = ("backend", "temp_dtype")
    #: Layout of the model's input: each rank's spatial tile (MLPDist: whole images).
    input_layout = SPATIAL
    #: The :class:`~distnet.models.pipeline.Pipeline` running stages / micro-batches (configure).
    pipeline = None

    def __init__(self, layers, num_epochs, cost=None, batch_size=None, momentum=None,
                 learning_rate=None, shuffle=False, serialized_path=None, stages=None, micro_batches=1,
                 learning_rule=None, towers=None):
        if not layers:
            raise ValueError("layers must list at least one layer")
        self.layers = layers
        self.num_epochs = num_epochs
        self.cost = cost if cost is not None else CrossEntropy()
        self.batch_size = batch_size
        self.momentum = MomentumSchedule(momentum)
        self.learning_rate = learning_rate
        self.shuffle = shuffle
        self.serialized_path = serialized_path
        self.stages = stages
        if micro_batches < 1:
            raise ConfigError(f"micro_batches must be >= 1, got {micro_batches}", key="micro_batches")
        self.micro_batches = micro_batches
        if learning_rule is not None and momentum is not None:
            raise ConfigError("momentum is a key of the learning rule when the model has a learning_rule "
                              "(GradientDescent's momentum); remove it from the model", key="momentum")
        self.learning_rule = learning_rule
        #: How the parameters are updated: the rules and learning rates of the training step.
        self.optimizer = self.make_optimizer()
        #: Optimiser steps done (restored from checkpoints): Adam's bias correction, step
        #: schedules and dropout's masks read it.
        self.steps = 0
        #: What the layers read: training or evaluation, the step, this rank's rows.
        self.run_state = RunState()
        self.log = get_logger()
        written = {layer.name for layer in layers if layer.name is not None}
        for i, layer in enumerate(layers):
            if layer.name is None:   # <Class><position>, never a name another layer was given
                name = f"{config_name(layer)}{i}"
                while name in written:
                    name += "_"
                layer.name = name
        self.graph = Graph(layers)
        self.towers = tower_plan(self, towers)
        if not self.graph.is_chain and micro_batches > 1:
            raise ConfigError(f"micro_batches is {micro_batches}, but this model is a graph (its layers name "
                              "their inputs) and graphs run one micro-batch; remove micro_batches",
                              key="micro_batches")
        self.stage_plan(1)  # the placement's own errors now (``distnet check``); pipe's in configure

    #: Whether the model pretrains its LocalFilteringLayers (GB); others ignore their
    #: ``pretraining`` keys (a note says so).
    pretrains = False
    #: The one-number metrics an evaluated split records beyond the cost (a classifier's:
    #: :func:`~distnet.experiments.metrics.metric_names`; an unsupervised model names its own).
    metric_names = ("misclass",)

    def notes(self):
        """``[(logging level, text)]`` about this model's keys for the experiment's
        ``config_notes`` (:func:`~distnet.models.notes.model_notes`)."""
        return model_notes(self)

    # -- building ------------------------------------------------------------------------------
    def check_layers(self):
        """Refuse layers this model cannot hold (located errors; the experiment calls it as the
        file is read). Model holds any sequence."""

    #: The data's ``(C, H, W)`` (:meth:`infer_shapes`).
    input_shape = None

    def infer_shapes(self, input_shape):
        """Derive every layer's global shapes from the data's ``(C, H, W)``; check the YAML."""
        shape = self.input_shape = tuple(input_shape)
        for i, layer in enumerate(self.layers):
            if layer.pos is not None and layer.pos != i:
                raise layer.error(f"pos is {layer.pos} but the layer is item {i} of the layers list", "pos")
            if self.graph.is_chain:
                shape = layer.infer_shape(shape)
        if not self.graph.is_chain:
            shape = self.graph.infer_shapes(input_shape)[-1]
        check_output_shape(self, shape)
        return shape

    def planes(self):
        """Every (H, W) plane the process grid must cut (for choosing a grid): the input images'
        (tiles of them are the model's input, window layers or not), then the layers'."""
        own = [p for layer in self.layers for p in layer.planes()]
        if self.input_layout == SPATIAL and self.input_shape is not None and len(self.input_shape) in (3, 4):
            own.insert(0, (*self.input_shape[1:], "the input images"))
        return own

    def placements(self, position):
        """Every layer's :class:`~distnet.layers.placement.Placement` on ``position`` (a
        :class:`~distnet.geometry.grid.GridPosition`; shapes inferred first), in model order: a
        pure function, what ``configure`` would give that rank."""
        layout, out = self.input_layout, []
        if self.graph.is_chain:
            for layer in self.layers:
                placement = layer.place(layout, position)
                layout = placement.out_layout.kind
                out.append(placement)
        else:
            def place(i, layer, in_layout):
                placement = layer.place(in_layout, position)
                out.append(placement if self.towers is None else self.towers.with_exchange(i, placement, position))
                return placement.out_layout.kind
            layout = self.graph.layouts(layout, place)[-1]
        check_output_layout(self, layout)
        return out

    def configure(self, backend, topology):
        """Place every layer on ``topology`` (halo plans, weight slices) and set it up."""
        self.backend, self.topology = backend, topology
        layout = self.input_layout
        self.layouts = []  # every layer's output layout kind

        def place(i, layer, in_layout):
            ctx = LayerContext(backend, topology, i, self.run_state)
            layer.bind(ctx)
            kind = layer.configure(in_layout, ctx)
            if self.towers is not None:
                layer.placement = self.towers.with_exchange(i, layer.placement, topology.position)
            return kind
        if self.graph.is_chain:
            for i, layer in enumerate(self.layers):
                layout = place(i, layer, layout)
                self.layouts.append(layout)
        else:
            self.layouts = self.graph.layouts(layout, place)
            layout = self.layouts[-1]
        check_output_layout(self, layout)
        self.optimizer.rates.check(self.weighted_layers())
        self.stage_of, self.local_layers, self.pipeline = plan_stages(self, topology)
        if self.micro_batches > 1:
            for layer in self.layers:
                if layer.whole_batch:
                    raise layer.error(f"{config_name(layer)} needs the whole minibatch in one call (batch "
                                      f"statistics / global row masks); it cannot run with micro_batches: "
                                      f"{self.micro_batches}")
        self.step = TrainingStep(topology, backend.host_staging)
        own = [layer for layer in self.layers if layer.momentum_params is not None]
        if self.learning_rule is not None and own:
            raise own[0].error("has its own momentum (neon's per-layer learning_rule) but the model has a "
                               "learning_rule: give the momentum to the model's learning rule")
        # Without a pipeline nothing keeps a layer's output or input gradient past the layer's
        # next call, so window layers may hand out their own reused buffers (no large
        # allocation per step); the pipeline keeps several micro-batches alive.
        # A graph keeps outputs for later readers and hands one gradient to several layers.
        for layer in self.layers:
            layer.reuse_buffers = self.pipeline is None and self.graph.is_chain
        #: What the forward/backward calls for the cost (a per-pixel one sums over the tiles).
        self.step_cost = bind_cost(self.cost, topology, backend.host_staging)
        #: How a forward / backward runs (:mod:`distnet.models.execution`), chosen once here.
        self.execution = (self.pipeline if self.pipeline is not None else
                          ChainExecution(self.layers, self.step_cost) if self.graph.is_chain else
                          GraphExecution(self.graph, self.step_cost))

    def stage_plan(self, npipe):
        """The pipeline stage of every layer on ``npipe`` stages (:func:`~distnet.models.stages.stage_plan`)."""
        return stage_plan(self, npipe)

    def init_params(self):
        """Draw every layer's weights from the backend RNG, in layer order
        (docs/design.md#initialisation); with pipeline stages every rank draws them all, then
        releases the other stages' layers."""
        self.backend.reseed()
        for layer in self.layers:
            layer.init_params(self.backend.rng)
        local = {id(layer) for layer in self.local_layers}
        for layer in self.layers:
            if id(layer) not in local:
                layer.release_params()
        self._params = [(layer, p) for layer in self.local_layers for p in layer.params()]
        if self.towers is not None and self.topology.pipe_index > 0:
            for layer in self.local_layers:   # shared layers: counted on pipe rank 0 (gradient norm)
                if layer.tower is None:
                    for p in layer.params():
                        p.copy_elsewhere = True
        self._index = {id(layer): i for i, layer in enumerate(self.layers)}

    # -- forward and backward ------------------------------------------------------------------
    def fprop(self, x):
        """The output ``(b, K)`` of ``x`` (replicated over the spatial ranks and stages), or this
        rank's tile ``(b, K, *s)`` of the maps of a per-pixel model."""
        return self.execution.forward(x)

    def lowest_trained_layer(self, epoch):
        """Index of the lowest layer that learns in ``epoch`` (0: all; GB trains only the top
        layer in its first epochs). Backprop stops there and only layers from it up update."""
        return 0

    def bprop(self, delta, lowest=0):
        """Backpropagate the output gradient ``delta`` down to layer ``lowest`` (no pipeline)."""
        self.execution.backward(delta, lowest)

    def trained_params(self, lowest=0):
        """``[(layer, Param)]`` of the layers from index ``lowest`` up."""
        return [(layer, p) for layer, p in self._params if self._index[id(layer)] >= lowest]

    def make_optimizer(self):
        """The :class:`~distnet.optim.optimizer.Optimizer` of the training step: the model's
        ``learning_rule`` for every layer, or neon's update (``momentum``, or a layer's own
        ``momentum_params``); learning rates from the layers, the rule and the model's
        ``learning_rate`` (:class:`~distnet.optim.rates.LearningRates`)."""
        rates = LearningRates(self.learning_rate, self.learning_rule)
        if self.learning_rule is not None:
            return Optimizer(self.learning_rule, rates)
        return Optimizer.neon(rates, self.momentum, self.layers)

    def weighted_layers(self, lowest=0):
        """The layers from index ``lowest`` up that have parameters to train (placed: :meth:`configure`)."""
        return [layer for layer in self.layers[lowest:] if layer.placement.params]

    def optimizer_state_names(self):
        """Names of the arrays the optimiser keeps per parameter beside its value and gradient
        (``("m", "v")`` for Adam, ``("velocity",)`` with momentum, ``()`` for plain SGD): what a
        parameter costs in memory is ``2 + len(...)`` times its size."""
        return self.optimizer.state_names

    def learning_rates(self, epoch):
        """``{layer name: learning rate}`` of the layers that train in ``epoch``, as the training
        step used them (:meth:`Optimizer.learning_rates
        <distnet.optim.optimizer.Optimizer.learning_rates>`): what TensorBoard logs per epoch."""
        return self.optimizer.learning_rates(self.weighted_layers(self.lowest_trained_layer(epoch)), epoch)

    def describe_learning_rates(self, layers):
        """Lines for ``distnet show``: the learning rates of ``layers`` (those with weights)."""
        return [f"learning rate: {self.optimizer.rates.describe(layers)}"]

    def replica_rows(self, idx):
        """The rows of a global minibatch ``idx`` that this data replica trains on: contiguous
        blocks in replica order (the first ``len(idx) % D`` replicas get one more; a replica may
        get none of a short last batch)."""
        nd = self.topology.ndata
        return idx if nd == 1 else np.array_split(idx, nd)[self.topology.data_index]

    def train_step(self, x, t, epoch, batch_size=None):
        """One minibatch: forward, cost, backward, gradient sums, update.

        ``x``, ``t``: this replica's rows of the global minibatch of ``batch_size`` rows
        (default: ``len(x)``, one replica). The gradient is divided by the global size, so D
        replicas equal one process. Returns the global batch's summed loss, identical on every rank.
        """
        batch_size = len(x) if batch_size is None else batch_size
        lowest = self.lowest_trained_layer(epoch)

        # after_layer: the step's hook, called per layer once its gradients are final (the
        # gradient buckets start their Allreduce during the backward; DISTNET_OVERLAP).
        def run(after_layer):
            return [self.execution.forward_backward(x, t, batch_size, lowest, after_layer)]
        self.start_batch(batch_size)
        loss, = self.step(run, self.trained_params(lowest), self.optimizer, self.steps + 1, epoch)
        self.steps += 1
        return float(loss[0])

    def start_batch(self, batch_size, step=None, phase=0):
        """Tell the layers (:attr:`run_state`) that a training forward of a global minibatch of
        ``batch_size`` rows starts: training mode, the optimiser step (``step``, default the
        steps done; ``phase``: a pretraining phase and its own step count, see
        :class:`~distnet.layers.base.RunState`), the global row count and this data replica's
        first row (dropout addresses its slice of the global mask by them)."""
        st = self.run_state
        st.training, st.rows = True, batch_size
        st.step, st.phase = (self.steps, 0) if step is None else (step, phase)
        st.row0 = _replica_row0(batch_size, self.topology.ndata, self.topology.data_index)

    @contextlib.contextmanager
    def evaluating(self):
        """Evaluation mode for the ``with`` block (the layers read ``run_state.training``:
        batch norm uses its running statistics, dropout passes its input through)."""
        before, self.run_state.training = self.run_state.training, False
        try:
            yield self
        finally:
            self.run_state.training = before

    def batches(self, n, rng=None):
        """Index arrays of the global minibatches of one epoch (the last may be short)."""
        order = rng.permutation(n) if rng is not None else np.arange(n)
        bs = self.batch_size or n
        return [order[i:i + bs] for i in range(0, n, bs)]

    # -- the training loop's protocol (distnet.experiments.loop) -------------------------------
    #: The per-epoch shuffle (:meth:`start`; None without ``shuffle``); checkpoints store its state.
    shuffle_rng = None

    def start(self, resume=None):
        """Make ``shuffle_rng`` (the per-epoch shuffle, None without ``shuffle``) and return the
        first epoch to train: 0, or ``resume.epoch`` (a
        :class:`~distnet.models.checkpoint.ResumeState`, whose shuffle state is restored)."""
        self.shuffle_rng = np.random.RandomState(self.backend.rng_seed) if self.shuffle else None
        if resume is None:
            return 0
        if self.shuffle_rng is not None and resume.shuffle_state is not None:
            self.shuffle_rng.set_state(resume.shuffle_state)
        return int(resume.epoch)

    def before_training(self, train):
        """What runs once before the first epoch of a run that starts from scratch (not
        resumed); yields its records for the run's hooks. Nothing here (GB pretrains)."""
        return iter(())

    def fit_epoch(self, train, epoch, on_batch=None, read_ahead=None, start=None):
        """One epoch over ``train = (x (N, C, h, w), labels (N,))`` (this rank's tiles of all N
        images) in the order of :meth:`batches` (reshuffled by ``shuffle_rng``); logs neon's
        line and returns the mean cost per image (the same on every rank).

        on_batch : ``callable(epoch, batch, nbatches, running_cost)`` before every step
            (``running_cost``: the summed cost of the epoch's batches before it).
        read_ahead : ``callable(list of row-index arrays)`` given the epoch's minibatches (this
            replica's rows) before training on them (streamed data, ``Dataset.read_ahead``).
        start : ``(first batch, running cost)``: the rest of an epoch that a checkpoint
            interrupted (:meth:`~distnet.models.checkpoint.ResumeState.start`): the same order,
            its first batches done.
        """
        x, labels = train
        xp = self.backend.xp
        targets = self._targets(labels)
        batches = self.batches(x.shape[0], self.shuffle_rng)
        first, total = start if start is not None else (0, 0.0)
        if read_ahead is not None:
            read_ahead([self.replica_rows(idx) for idx in batches[first:]])
        for b, idx in enumerate(batches[first:], start=first):
            if on_batch is not None:
                on_batch(epoch, b, len(batches), total)
            rows = self.replica_rows(idx)
            loss = self.train_step(xp.asarray(x[rows]), xp.asarray(targets[rows]), epoch, len(idx))
            if not math.isfinite(loss):
                raise TrainingError(f"the cost became {loss} in epoch {epoch}, batch {b}; "
                                    "lower the learning rate or check the data")
            check_finite_after_step(self, epoch, b, len(batches))   # every 16 steps and at the epoch end
            total += loss
        mean = total / x.shape[0]
        self.log.info("epoch: %d, total training error: %.5f", epoch, mean)
        return mean

    #: ``(labels, their one-hot targets)`` of the last :meth:`fit_epoch`.
    _one_hot_of = None

    def _targets(self, labels):
        """The one-hot targets ``(N, K)`` of ``labels``, made once per label array; a per-pixel
        cost reads the labels ``(N, *S)`` themselves, a regression cost the float targets ``(N, T)``."""
        if self.per_pixel or self.cost.regresses:
            return labels
        cached = self._one_hot_of
        if cached is None or cached[0] is not labels:
            self._one_hot_of = (labels, one_hot(labels, self.layers[-1].out_shape[0], self.backend.dtype))
        return self._one_hot_of[1]

    def split_metrics(self, split):
        """``{"misclass": percent}`` of a split ``(x, labels)``. Collective (data replicas)."""
        return {"misclass": self.misclass_rate(*split)}

    def fit(self, x, labels, nclasses=None, resume=None):
        """Train on ``x`` and ``labels`` for ``num_epochs`` without a run's hooks (scripts and
        tests; ``distnet run`` goes through :mod:`distnet.experiments.loop`); returns the
        per-epoch mean costs. ``nclasses`` must be the last layer's outputs when given."""
        if nclasses is not None and nclasses != self.layers[-1].out_shape[0]:
            raise ValueError(f"nclasses is {nclasses} but the last layer gives {self.layers[-1].out_shape[0]} outputs")
        first = self.start(resume)
        if resume is None:
            for _ in self.before_training((x, labels)):
                pass
        return [self.fit_epoch((x, labels), epoch) for epoch in range(first, self.num_epochs)]

    # -- inference -----------------------------------------------------------------------------
    def predict(self, x):
        """Outputs ``(n, K)`` for this data replica's rows of every batch of ``x`` (all rows
        when there is one replica), in order; replicated over the spatial ranks."""
        xp = self.backend.xp
        bs = self.batch_size or x.shape[0]
        with self.evaluating():
            outs = [self.backend.to_host(self.fprop(xp.asarray(x[self.replica_rows(np.arange(i, min(i + bs, len(x))))])))
                    for i in range(0, x.shape[0], bs)]
        return np.concatenate(outs)

    #: How the final error of a split is named and its unit (an Autoencoder: reconstruction error).
    metric_label = ("misclass rate", "%")
    #: Trains on labels (an RBM, a DBN before fine-tuning: not; they have no error rate).
    supervised = True
    #: The dataset ``dist_mode`` values under which a model that takes whole images distributes.
    whole_image_modes = ("vecpar", "datapar")

    @property
    def classifies(self):
        """Its outputs are class scores (cost, error rates, top-k, confusion matrix are
        measured); an Autoencoder's, an RBM's and a regression's (``cost.regresses``) are not."""
        return self.supervised and not self.cost.regresses

    @property
    def per_pixel(self):
        """The cost scores every pixel (:mod:`distnet.ops.pixel_costs`): the output is a map per
        class, tiled like the images (:mod:`distnet.models.outputs`)."""
        return self.cost.per_pixel

    def check_outputs(self, dataset):
        """ConfigError (at the last layer) unless it gives what the cost needs for the classes
        of ``dataset`` (:func:`~distnet.models.outputs.check_outputs`; ``distnet check`` and
        before training)."""
        check_outputs(self, dataset)

    def misclass_rate(self, x, labels):
        """Percentage of ``labels`` whose output argmax differs (summed over data replicas)."""
        bs = self.batch_size or x.shape[0]
        mine = np.concatenate([self.replica_rows(np.arange(i, min(i + bs, len(x))))
                               for i in range(0, len(x), bs)])
        y = self.predict(x)
        wrong = misclassified(y, labels[mine])
        bad = int(np.count_nonzero(~np.isfinite(y).all(axis=1))) if len(y) else 0
        wrong, bad = allreduce_scalars([wrong, bad], self.topology.data)
        if bad:   # every rank agrees (outputs are replicated; the counts summed over replicas)
            raise TrainingError(f"the model's outputs are not finite (NaN or inf) for {int(bad)} of {len(labels)} "
                                "images, so its error rate means nothing; check the weights (weight_init) and the data")
        return 100.0 * wrong / len(labels)

    def error(self, message, key=None):
        return config_error(self, message, key)


def _replica_row0(n, ndata, data_index):
    """The first row of data replica ``data_index`` in a global minibatch of ``n`` rows
    (:meth:`Model.replica_rows`' blocks: the first ``n % ndata`` replicas hold one row more)."""
    q, r = divmod(n, ndata)
    return data_index * q + min(data_index, r)


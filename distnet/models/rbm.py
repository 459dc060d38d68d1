"""neon 0.4's unsupervised models ``RBM`` and ``DBN`` (docs/neon-semantics.md#rbm-and-dbn):
binary restricted Boltzmann machines (:class:`~distnet.layers.rbm.RBMLayer`) trained by
contrastive divergence, alone or stacked greedily into a deep belief network.

Both run on data replicas (``dist_mode: datapar``, or ``data: D`` with no spatial grid): a
replica trains on its rows of every global minibatch, its CD statistics are the gradients of one
training step (:class:`~distnet.layers.step.TrainingStep`: summed over ``Topology.data``, then
plain SGD at the layer's rate) and the model sums the reconstruction cost once per epoch,
so every rank logs and returns the one-process numbers. The Gibbs samples are drawn from the
uniforms of the *global* minibatch, keyed by the backend seed, the layer and the step (every
rank draws the whole block and keeps its rows), so D replicas draw the samples one process
draws and a resumed run draws those of an uninterrupted one.
"""
import logging
import math

import numpy as np

from ..comm.reduce import allreduce_scalars
from ..config.builder import config_name, config_where
from ..errors import ConfigError, TrainingError
from ..layers.placement import REPLICATED
from ..layers.rbm import RBMLayer
from ..config.types import NonNegative, NonNegativeInt
from ..ops.costs import CrossEntropy, SumSquaredDiffs
from ..ops.rbm import reconstruction_cost
from ..optim.optimizer import Optimizer
from ..optim.rates import LearningRates
from .model import Model, _replica_row0

#: Stream tags of :func:`uniforms`: training steps and a DBN's transforms of its data.
TRAIN, TRANSFORM = 0, 1


def uniforms(seed, tag, layer, step, shape):
    """The uniforms ``[0, 1)`` (float64, ``shape``) of one global minibatch: a generator keyed by
    ``(seed, tag, layer, step)``, the same on every rank and after a resume."""
    return np.random.default_rng([seed, tag, layer, step]).random(shape)


class RBM(Model):
    """neon's ``RBM``. Keys: ``layers`` (one RBMLayer), ``num_epochs``, ``batch_size`` (default: all
    training images), ``learning_rate`` (default for the layer; neon used the model's),
    ``cost`` (SumSquaredDiffs, the default: the logged reconstruction error), ``momentum``
    (accepted and unused: neon's RBM update ignored it), ``shuffle``, ``serialized_path``
    (ignored, as for every model). Each epoch logs neon's ``epoch: e, total training error:
    c`` with c = the reconstruction cost ``1/2 sum (x - x-)^2`` of a batch, averaged over the
    batches, as neon did. ``split_metrics`` (``eval_every``) gives ``reconstruction``: the
    deterministic (mean-field) reconstruction cost per image of a split."""

    input_layout = REPLICATED
    #: No labels are read: the experiment skips its class-count check and error rates.
    supervised = False
    whole_image_modes = ("datapar",)      # data replicas only
    #: What an evaluated split records without fine-tuning (a checkpoint monitor names
    #: ``<split>_reconstruction``; a fine-tuned DBN classifies: the classifier's metrics).
    metric_names = ("reconstruction",)

    @property
    def metric_label(self):
        """A fine-tuned DBN has error rates; an RBM, or a DBN without fine-tuning, its
        reconstruction error."""
        return Model.metric_label if self.supervised else ("reconstruction error", "")

    def __init__(self, layers, num_epochs, cost=None, **keys):
        super().__init__(layers, num_epochs, cost=cost if cost is not None else SumSquaredDiffs(), **keys)
        if not isinstance(self.cost, SumSquaredDiffs):
            raise ConfigError(f"cost must be SumSquaredDiffs (the reconstruction error neon logged), "
                              f"got {type(self.cost).__name__}", key="cost")
        for key, value in (("stages", self.stages), ("micro_batches", self.micro_batches != 1 or None),
                           ("towers", self.towers)):
            if value is not None:
                raise ConfigError(f"{type(self).__name__} runs on one pipeline stage, one micro-batch and no "
                                  f"towers (it distributes over data replicas only); remove {key}", key=key)
        if self.learning_rule is not None:
            raise ConfigError(f"{type(self).__name__} trains by contrastive divergence with neon's plain "
                              "update (learning_rate only); remove learning_rule", key="learning_rule")
        #: Contrastive divergence's update: plain SGD (no momentum, as neon's RBMLayer) at each
        #: layer's rate (its own, else the model's).
        self.cd_optimizer = Optimizer.plain(LearningRates(self.learning_rate))

    def check_layers(self):
        for layer in self.layers:
            if not isinstance(layer, RBMLayer):
                raise layer.error(f"{config_name(self)} holds RBMLayers only, got {config_name(layer)}")
        if len(self.layers) != 1:
            raise self.error(f"{config_name(self)} trains one RBMLayer (neon's RBM used the first and "
                             f"ignored the others), got {len(self.layers)}; use DBN to stack them", "layers")

    def notes(self):
        notes = super().notes()
        if self.momentum.kind != "constant" or self.momentum.coef != 0.0:
            where = config_where(self, "momentum")
            notes.append((logging.INFO, f"{where + ': ' if where else ''}momentum is not used: "
                          f"{config_name(self)} updates by learning_rate x (CD statistics), as neon's RBMLayer did"))
        return notes

    def configure(self, backend, topology):
        """The model's planning on data replicas only: every rank holds whole images and the
        whole weights (a spatial grid or pipeline stages are refused)."""
        if tuple(topology.grid) != (1, 1) or topology.npipe > 1:
            raise self.error(f"{config_name(self)} distributes over data replicas only (dist_mode: datapar); "
                             f"the run has grid {topology.grid[0]}x{topology.grid[1]} and pipe {topology.npipe}")
        super().configure(backend, topology)
        self.cd_optimizer.rates.check(self.weighted_layers())

    def optimizer_state_names(self):
        return self.cd_optimizer.state_names

    def learning_rates(self, epoch):
        return self.cd_optimizer.learning_rates(self.layers[:1], epoch)

    def describe_learning_rates(self, layers):
        return [f"learning rate: {self.cd_optimizer.rates.describe(layers)}"]

    def check_outputs(self, dataset):
        """Nothing to check: the hidden units are no classes (a fine-tuned DBN checks its classifier)."""
        if self.supervised:
            Model.check_outputs(self, dataset)

    # -- training ------------------------------------------------------------------------------
    def cd_step(self, layer, x, u, epoch):
        """One CD-k step of ``layer`` (an RBMLayer) from this replica's rows ``x (b, nfeat)`` of a
        global minibatch and their uniforms ``u (cd_steps, b, nout)``: its statistics as the
        gradients of the one training step, summed over ``Topology.data`` (collective there),
        then plain SGD at the layer's rate. Returns the reconstruction cost of these rows."""
        cost, = self.step(lambda after_layer: [layer.cd_gradients(x, u)[0]], [(layer, p) for p in layer.params()],
                          self.cd_optimizer, self.steps + 1, epoch, reduce_outputs=False)
        self.steps += 1
        return cost

    def _train_layer_epoch(self, i, x, epoch, on_batch=None, start=None):
        """One epoch of CD on layer ``i`` over ``x (N, nfeat)`` (whole, on every rank): returns
        neon's mean reconstruction cost per batch, summed over the replicas (collective over
        ``Topology.data``). ``start``: as :meth:`Model.fit_epoch`'s (this replica's cost)."""
        layer, xp = self.layers[i], self.backend.xp
        batches = self.batches(len(x), self.shuffle_rng)
        first, total = start if start is not None else (0, 0.0)
        for b, idx in enumerate(batches):
            if b < first:
                continue
            if on_batch is not None:
                on_batch(epoch, b, len(batches), total)
            rows = self.replica_rows(idx)
            u = uniforms(self.backend.rng_seed, TRAIN, i, self.steps, (layer.cd_steps, len(idx), layer.nout))
            r0 = _replica_row0(len(idx), self.topology.ndata, self.topology.data_index)
            mine = u[:, r0:r0 + len(rows)]
            total += self.cd_step(layer, xp.asarray(x[rows]), xp.asarray(mine, dtype=self.backend.dtype), epoch)
        total, = allreduce_scalars([total], self.topology.data)
        mean = total / len(batches)
        if not math.isfinite(mean):
            raise TrainingError(f"the reconstruction cost of layer '{layer.name}' became {mean} in epoch "
                                f"{epoch}; lower the learning rate or check the data (visible units in [0, 1])")
        self.log.info("epoch: %d, total training error: %.5f", epoch, mean)
        return mean

    def fit_epoch(self, train, epoch, on_batch=None, read_ahead=None, start=None):
        """One CD epoch over ``train = (x (N, C, H, W), labels)`` (labels unused); returns neon's
        logged cost (the mean reconstruction cost per batch)."""
        return self._train_layer_epoch(0, _flat(train[0]), epoch, on_batch, start)

    # -- evaluation ----------------------------------------------------------------------------
    @property
    def machines(self):
        """The RBMLayers (a DBN's classifier layers above them excluded)."""
        return [layer for layer in self.layers if isinstance(layer, RBMLayer)]

    def up(self, x):
        """Mean-field hidden probabilities of every layer for ``x (n, nfeat)``: a list, the
        input of each layer being the passed units of the one below."""
        hs, h = [], x
        for layer in self.machines:
            hs.append(layer.hidden_probabilities(h))
            h = hs[-1][:, :layer.out_shape[0]]
        return hs

    def predict(self, x):
        """The top layer's hidden probabilities ``(n, nout)`` of ``x (n, C, H, W)`` (its features;
        mean-field through the layers below), for all rows on every rank."""
        bs = self.batch_size or len(x)
        outs = [self.backend.to_host(self.up(self.backend.xp.asarray(_flat(x[i:i + bs])))[-1])
                for i in range(0, len(x), bs)]
        return np.concatenate(outs)

    def reconstruction_error(self, x):
        """Mean-field reconstruction cost per image of ``x (n, C, H, W)``: the stack up
        (probabilities), then down from the top layer's probabilities, each layer reconstructing
        the units passed up to it (a DBN's unit that was not passed up keeps its upward value);
        ``1/2 sum (x - x-)^2`` averaged over the images. Replicas split the batches' rows and
        sum (collective over ``Topology.data``)."""
        xp = self.backend.xp
        bs = self.batch_size or len(x)
        total = 0.0
        for i in range(0, len(x), bs):
            rows = self.replica_rows(np.arange(i, min(i + bs, len(x))))
            v = xp.asarray(_flat(x[rows]))
            hs = self.up(v)
            h = hs[-1]
            machines = self.machines
            for j in range(len(machines) - 1, 0, -1):
                below = hs[j - 1].copy()
                below[:, :machines[j - 1].out_shape[0]] = machines[j].reconstruct(h)
                h = below
            total += reconstruction_cost(v, machines[0].reconstruct(h))
        total, = allreduce_scalars([total], self.topology.data)
        return total / len(x)

    def split_metrics(self, split):
        return {"reconstruction": self.reconstruction_error(split[0])}

    def misclass_rate(self, x, labels):
        raise ConfigError(f"{config_name(self)} is unsupervised: it has no error rate (use FitExperiment)")


class DBN(RBM):
    """neon's ``DBN``: greedy layer-wise pretraining of a stack of RBMLayers, then (a distnet
    addition) supervised fine-tuning. Keys: :class:`RBM`'s, with any number of RBMLayers;
    ``num_epochs`` is per RBMLayer (they train ``num_epochs`` epochs each, layer after layer).
    Layer i > 0 trains on the binary hidden samples of layer i - 1 for the whole training set
    (drawn once, when its training starts), without that layer's last hidden unit, as neon did:
    its ``nin`` is the previous ``nout`` (the dropped unit is replaced by the constant one).

    neon had no fine-tuning ("not implemented yet"). distnet's: classifier layers listed after
    the RBMLayers (e.g. a ``Layer`` with one output per class) and ``finetune_epochs`` (default
    0) epochs of backpropagation through the whole stack (the RBMLayers as fully connected
    layers giving their hidden probabilities) with ``finetune_cost`` (default CrossEntropy),
    the model's ``momentum`` and ``finetune_learning_rate`` for every layer (default: each
    layer's learning rate; CD's rate multiplies statistics summed over the batch, SGD's a
    gradient averaged over it), as an MLP trains; the model is then
    supervised (error rates, ``FitPredictErrorExperiment``). The run trains ``num_epochs x
    RBMLayers + finetune_epochs`` epochs."""

    config_types = dict(RBM.config_types, finetune_epochs=NonNegativeInt, finetune_cost=("obj", "cost"),
                        finetune_learning_rate=NonNegative)
    finetune_learning_rate = None

    def __init__(self, layers, num_epochs, finetune_epochs=0, finetune_cost=None, finetune_learning_rate=None,
                 **keys):
        super().__init__(layers, num_epochs, **keys)
        self.check_layers()
        machines = self.machines
        self.top = self.layers[len(machines):]
        self.epochs_per_layer = num_epochs
        self.pretrain_epochs = num_epochs * len(machines)
        self.finetune_epochs = finetune_epochs
        self.num_epochs = self.pretrain_epochs + finetune_epochs
        self.supervised = bool(self.top)
        if self.top and not finetune_epochs:
            raise ConfigError(f"the layers after the RBMLayers ('{self.top[0].name}', ...) train only in the "
                              "fine-tuning; give finetune_epochs: N", key="finetune_epochs")
        if finetune_epochs and not self.top:
            raise ConfigError("finetune_epochs needs classifier layers after the RBMLayers (e.g. a Layer with "
                              "one output per class)", key="finetune_epochs")
        for key, value in (("finetune_cost", finetune_cost), ("finetune_learning_rate", finetune_learning_rate)):
            if value is not None and not self.top:
                raise ConfigError(f"{key} is used only with classifier layers and finetune_epochs", key=key)
        self.finetune_learning_rate = finetune_learning_rate
        self.optimizer = self.make_optimizer()
        if self.top:
            self.cost = finetune_cost if finetune_cost is not None else CrossEntropy()
        for m in machines[:-1]:
            m.passes = m.nout - 1
        self._inputs = (None, None)   # (layer index, its training inputs (N, nfeat))

    def check_layers(self):
        machines = self.machines
        if not machines or any(not isinstance(layer, RBMLayer) for layer in self.layers[:len(machines)]):
            layer = next(layer for layer in self.layers if not isinstance(layer, RBMLayer))
            raise layer.error(f"{config_name(self)} lists its RBMLayers first (then, for fine-tuning, "
                              f"classifier layers), got {config_name(layer)} before them")

    def infer_shapes(self, input_shape):
        """Each RBMLayer's input: the data (layer 0), then ``nout - 1`` samples of the layer below;
        the classifier layers read the last RBMLayer's hidden probabilities."""
        for below, layer in zip(self.machines, self.machines[1:]):
            if below.nout < 2:
                raise layer.error(f"the layer below gives {below.nout} unit(s), of which the last is not "
                                  "passed on: nothing is left for this layer")
        return super().infer_shapes(input_shape)

    def make_optimizer(self):
        """The fine-tuning's optimizer: the model's (neon's update), each layer at
        ``finetune_learning_rate`` when given (CD's rate multiplies statistics summed over the
        batch, SGD's a gradient averaged over it)."""
        rates = LearningRates(self.learning_rate, phase_rate=self.finetune_learning_rate,
                              phase="finetune_learning_rate")
        return Optimizer.neon(rates, self.momentum, self.layers)

    def learning_rates(self, epoch):
        if epoch >= self.pretrain_epochs:
            return Model.learning_rates(self, epoch - self.pretrain_epochs)
        i, e = divmod(epoch, self.epochs_per_layer)
        return self.cd_optimizer.learning_rates([self.layers[i]], e)

    def describe_learning_rates(self, layers):
        lines = super().describe_learning_rates(self.machines)
        if self.top:
            lines.append(f"fine-tuning: {self.optimizer.rates.describe(layers)}")
        return lines

    def notes(self):
        return Model.notes(self) if self.supervised else super().notes()

    def optimizer_state_names(self):
        return Model.optimizer_state_names(self) if self.supervised else ()

    def predict(self, x):
        """Supervised: the classifier's outputs (``Model.predict``); else the top RBMLayer's
        hidden probabilities."""
        return Model.predict(self, x) if self.supervised else super().predict(x)

    def misclass_rate(self, x, labels):
        return Model.misclass_rate(self, x, labels) if self.supervised else super().misclass_rate(x, labels)

    def split_metrics(self, split):
        out = Model.split_metrics(self, split) if self.supervised else {}
        out.update(super().split_metrics(split))
        return out

    def layer_inputs(self, i, x):
        """Layer ``i``'s training inputs ``(N, nfeat)``: ``x`` flattened (i = 0), or the hidden
        samples of layer i - 1 (its probabilities of the layer i - 1 inputs, sampled with the
        global uniforms of every batch), last unit dropped. Every rank computes all rows (no
        communication)."""
        if i == 0:
            return _flat(x)
        h = self.layer_inputs(i - 1, x) if self._inputs[0] != i - 1 else self._inputs[1]
        below, xp = self.layers[i - 1], self.backend.xp
        self.log.info("layer %d: setting inputs to output of previous layer", i)
        out = np.empty((len(h), below.nout - 1), dtype=self.backend.dtype)
        bs = self.batch_size or len(h)
        for b, start in enumerate(range(0, len(h), bs)):
            p = below.hidden_probabilities(xp.asarray(h[start:start + bs]))
            u = uniforms(self.backend.rng_seed, TRANSFORM, i - 1, b, p.shape)
            out[start:start + bs] = self.backend.to_host((p > xp.asarray(u, dtype=p.dtype))[:, :-1])
        return out

    def fit_epoch(self, train, epoch, on_batch=None, read_ahead=None, start=None):
        """Epoch ``epoch`` of the run: epoch ``epoch % num_epochs`` of RBMLayer ``epoch //
        num_epochs``, then the fine-tuning epochs (``Model.fit_epoch``, counted from 0)."""
        if epoch >= self.pretrain_epochs:
            if epoch == self.pretrain_epochs:
                self.log.info("fine-tuning the whole stack")
                self._inputs = (None, None)
            return Model.fit_epoch(self, train, epoch - self.pretrain_epochs, on_batch, read_ahead, start)
        i, e = divmod(epoch, self.epochs_per_layer)
        if self._inputs[0] != i:
            if e == 0:
                self.log.info("pretraining layer %d (%s)", i, self.layers[i].name)
            self._inputs = (i, self.layer_inputs(i, train[0]))
        return self._train_layer_epoch(i, self._inputs[1], e, on_batch, start)


def _flat(x):
    """``(n, ...) -> (n, features)``."""
    return x.reshape(len(x), int(np.prod(x.shape[1:])))

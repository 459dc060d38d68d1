"""neon's Google-Brain-style models ``GB`` and ``GBDist`` (docs/neon-semantics.md#gb-pretraining,
docs/neon-semantics.md#gb-supervised-phase, docs/neon-semantics.md#convnetdist-and-gbdist).

``GB`` is a :class:`~distnet.models.model.Model` with two additions:

* greedy layer-wise **pretraining** of its LocalFilteringLayers (those with ``pretraining:
  True``), bottom-up, each as a sparse autoencoder whose sparsity pool is the layer right after
  it (which must be a pooling layer); the layers below are frozen and only run forward;
* a supervised phase whose first ``num_initial_epochs`` epochs update only the top layer
  (neon's ``bprop_last``), then full backpropagation.

Any layer sequence the layers support works (not only neon's [LF, L2, LCN] x k, FC pattern), and
the same class runs distributed: ``GBDist`` is another name for it. Pretraining costs are summed over
``Topology.grad`` (spatial x data) once per epoch, so every rank logs and returns the non-dist numbers.
"""
import math

import numpy as np

from ..comm.reduce import allreduce_scalars
from ..config.builder import config_name
from ..config.types import NonNegative, NonNegativeInt
from ..errors import ConfigError, TrainingError
from ..layers.local import LocalFilteringLayer
from ..layers.pooling import AveragePoolingLayer, L2PoolingLayer, MaxPoolingLayer
from ..layers.step import forward
from ..ops.costs import SumSquaredDiffs
from .model import Model

_POOLING = (L2PoolingLayer, MaxPoolingLayer, AveragePoolingLayer)


class GB(Model):
    """Keys: :class:`~distnet.models.model.Model`'s (``MLP``'s), plus ``num_pretrain_epochs`` (int; required with ``pretraining:
    True``, where a missing key silently skipped pretraining; 0 skips it), ``num_initial_epochs``
    (int, default 0: top-layer-only epochs), ``pretraining`` (bool, default False),
    ``pretrain_cost`` (SumSquaredDiffs, the only reconstruction cost neon had), ``visualize``
    and ``spot_check`` (accepted for neon files; only False: not supported), and neon's anchor
    carriers ``sparsity``, ``pretrain_learning_rate``, ``tied_weights`` (accepted and unused: the
    LocalFilteringLayers read their own keys)."""

    pretrains = True
    config_types = {"num_pretrain_epochs": NonNegativeInt, "num_initial_epochs": NonNegativeInt, "pretraining": bool,
                    "pretrain_cost": ("obj", "cost"), "visualize": bool, "spot_check": bool,
                    "sparsity": NonNegative, "pretrain_learning_rate": NonNegative, "tied_weights": bool}

    def __init__(self, layers, num_epochs, num_pretrain_epochs=None, num_initial_epochs=0,
                 pretraining=False, pretrain_cost=None, visualize=False, spot_check=False,
                 sparsity=None, pretrain_learning_rate=None, tied_weights=None, **mlp_keys):
        super().__init__(layers, num_epochs, **mlp_keys)
        for key, value in (("visualize", visualize), ("spot_check", spot_check)):
            if value:
                raise ConfigError(f"{key}: True is not supported by distnet (neon's {key} was not "
                                  "dist-aware); set it to False", key=key)
        if pretrain_cost is not None and not isinstance(pretrain_cost, SumSquaredDiffs):
            raise ConfigError(f"pretrain_cost must be SumSquaredDiffs (the sparse autoencoder's "
                              f"reconstruction cost), got {type(pretrain_cost).__name__}",
                              key="pretrain_cost")
        if pretraining and num_pretrain_epochs is None:
            raise ConfigError("pretraining is True but num_pretrain_epochs is not given (without it no "
                              "layer would be pretrained); give num_pretrain_epochs: N (0 skips pretraining)",
                              key="pretraining")
        num_pretrain_epochs = num_pretrain_epochs or 0
        for key, value in (("num_pretrain_epochs", num_pretrain_epochs),
                           ("num_initial_epochs", num_initial_epochs)):
            if value < 0:
                raise ConfigError(f"{key} must be >= 0, got {value}", key=key)
        self.num_pretrain_epochs = num_pretrain_epochs
        self.num_initial_epochs = num_initial_epochs
        self.pretraining = pretraining
        self.pretrain_cost = pretrain_cost or SumSquaredDiffs()
        self.pretrain_costs = []

    # -- building ------------------------------------------------------------------------------
    def pretrained_layers(self):
        """Indices of the LocalFilteringLayers that are pretrained (``pretraining: True``)."""
        return [i for i, layer in enumerate(self.layers)
                if isinstance(layer, LocalFilteringLayer) and layer.pretraining]

    def infer_shapes(self, input_shape):
        """The model's shape check, then: each pretrained LF layer is followed by a pooling layer."""
        shape = super().infer_shapes(input_shape)
        if self.pretraining and not self.graph.is_chain:
            raise self.error("pretraining runs the layers below a pretrained one as a chain; a model whose "
                             "layers name their inputs (a graph) cannot pretrain", "pretraining")
        if self.pretraining:
            found = self.pretrained_layers()
            if not found:
                raise self.error("pretraining is True but no LocalFilteringLayer has pretraining: True",
                                 "pretraining")
            for i in found:
                nxt = self.layers[i + 1]
                if not isinstance(nxt, _POOLING):
                    raise self.layers[i].error(
                        f"is pretrained with the pooling layer after it as the sparsity pool, but "
                        f"the next layer '{nxt.name}' is a {config_name(nxt)}", "pretraining")
        return shape

    def configure(self, backend, topology):
        """The model's planning; GB runs on one pipeline stage (its pretraining runs the layers below
        the pretrained one directly), so ``pipe > 1`` is refused."""
        if topology.npipe > 1:
            raise self.error(f"{config_name(self)} does not support pipeline stages (the run has "
                             f"pipe = {topology.npipe}); use spatial and data parallelism")
        super().configure(backend, topology)

    # -- pretraining (docs/neon-semantics.md#gb-pretraining) --------------------------------------
    def pretraining_epochs(self, x):
        """Greedy layer-wise pretraining on ``x (N, C, h, w)`` (this rank's tiles). For each
        pretrained LF layer bottom-up: ``num_pretrain_epochs`` epochs over all batches (in order,
        or reshuffled per epoch if ``shuffle``), each batch run forward through the frozen layers
        below and then one :meth:`LocalFilteringLayer.pretrain_step`. Logs and records (in
        ``pretrain_costs``) per layer and epoch the mean costs per batch, summed over the
        spatial ranks (each pixel once) and data replicas (each sample once): collective over
        ``Topology.grad`` once per epoch. A data replica trains on its rows of every batch.
        Yields ``(layer name, epoch, reconstruction, sparsity)`` after each epoch."""
        xp = self.backend.xp
        shuffle_rng = np.random.RandomState(self.backend.rng_seed) if self.shuffle else None
        for i in self.pretrained_layers():
            layer = self.layers[i]
            layer.pretrain_mode(self.layers[i + 1])
            self.log.info("pretraining layer %d (%s)", i, layer.name)
            passes = 0   # this layer's pretraining steps: the layers below draw a new dropout mask each
            for epoch in range(self.num_pretrain_epochs):
                rsum = ssum = 0.0
                batches = self.batches(x.shape[0], shuffle_rng)
                for idx in batches:
                    self.start_batch(len(idx), step=passes, phase=1 + i)   # the global batch
                    passes += 1
                    h = forward(self.layers[:i], xp.asarray(x[self.replica_rows(idx)]))
                    r, s = layer.pretrain_step(h, len(idx), self.step)
                    rsum += r
                    ssum += s
                rsum, ssum = allreduce_scalars([rsum, ssum], self.topology.grad)
                nb = len(batches)
                r, s = rsum / nb, ssum / nb
                if not math.isfinite(r + s):
                    raise TrainingError(f"the pretraining cost of layer '{layer.name}' became {r + s} "
                                        f"in epoch {epoch}; lower pretrain_learning_rate")
                self.pretrain_costs.append((layer.name, epoch, r, s))
                self.log.info("epoch: %d, cost: %.5f + %.5f = %.5f", epoch, r, s, r + s)
                yield self.pretrain_costs[-1]

    def describe_learning_rates(self, layers):
        """The supervised phase's learning rates, then each pretrained layer's."""
        lines, alike = super().describe_learning_rates(layers), {}
        for i in self.pretrained_layers() if self.pretraining else ():
            alike.setdefault(self.layers[i].pretrain_learning_rate, []).append(self.layers[i])
        return lines + [f"pretraining: {group[0].pretrain_rates().describe(group)}" for group in alike.values()]

    # -- supervised phase (docs/neon-semantics.md#gb-supervised-phase) ----------------------------
    def before_training(self, train):
        """Pretrain (if ``pretraining``) on the training images of ``train = (x, labels)``,
        yielding per pretrained layer and epoch ``{"pretrain": layer name, "pretrain_epoch",
        "cost", "reconstruction", "sparsity"}``. The loop calls it only for a run that starts
        from scratch: checkpoints close supervised epochs, which pretraining preceded."""
        if not (self.pretraining and self.num_pretrain_epochs > 0):
            return
        for layer, epoch, r, s in self.pretraining_epochs(train[0]):
            yield {"pretrain": layer, "pretrain_epoch": epoch, "cost": r + s, "reconstruction": r, "sparsity": s}

    def lowest_trained_layer(self, epoch):
        """In epochs ``< num_initial_epochs`` only the top layer learns (neon's ``bprop_last``);
        LF's ``after_update`` is not called for the frozen layers, so they stay bit-for-bit."""
        return len(self.layers) - 1 if epoch < self.num_initial_epochs else 0


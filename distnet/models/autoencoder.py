"""neon's ``Autoencoder`` (``neon.models.autoencoder.Autoencoder``): a :class:`Model` whose
targets are its inputs, so it learns to reconstruct the images it reads; usually a stack of
``AELayer`` (neon's fully connected layer without bias) narrowing to a code and widening back.

Same math as neon 0.4's class: its ``fit`` ran the MLP's forward and backward pass with the
minibatch's inputs as targets, and its ``error_metrics`` reported the cost of the reconstructions
("reconstruction error") where other models report misclassification. Differences (docs/neon.md):
the cost is distnet's per-image sum over the outputs (neon logged the mean over all elements),
and the last layer must give as many outputs as an image has values (neon failed later, inside
the cost).

It distributes as data replicas (``dist_mode: datapar`` or the experiment's ``data`` key): each
replica reconstructs its rows of every minibatch and the gradients are summed over the replicas,
as for every model. Spatial tiles are refused: a tile's reconstruction target would be the whole
image.
"""
import numpy as np

from ..comm.reduce import allreduce_scalars
from ..errors import ConfigError, TrainingError
from .model import Model


class Autoencoder(Model):
    """Keys: those of :class:`~distnet.models.model.Model` (neon's: ``layers``, ``num_epochs``,
    ``batch_size``, ``learning_rate``, ``momentum``, ``cost``, ``serialized_path``).

    Training targets are the inputs ``x (N, C, H, W)`` flattened to ``(N, C*H*W)``; the reported
    error of a split is its mean reconstruction cost per image (:meth:`reconstruction_error`).
    """

    #: What the experiment's final report calls :meth:`misclass_rate`'s number, and its unit.
    metric_label = ("reconstruction error", "")
    classifies = False
    #: What an evaluated split records (a checkpoint monitor names ``<split>_reconstruction``).
    metric_names = ("reconstruction",)

    _inputs = None

    def configure(self, backend, topology):
        """:meth:`Model.configure`, refusing a spatial grid (every rank alike, before any
        collective): a tile's reconstruction target would be the whole image."""
        if tuple(topology.grid) != (1, 1):
            raise self.error(f"an Autoencoder runs on whole images, but this run splits every image over a "
                             f"{topology.grid[0]}x{topology.grid[1]} grid of tiles; run it as data replicas "
                             "(dist_mode: datapar on the dataset, or the experiment's data key)")
        return super().configure(backend, topology)

    def fit_epoch(self, train, epoch, on_batch=None, read_ahead=None, start=None):
        self._inputs = train[0]
        return super().fit_epoch(train, epoch, on_batch, read_ahead, start)

    def _flat(self, x):
        """``x (N, C, h, w)`` as reconstruction targets ``(N, C*h*w)``; a ConfigError when the
        last layer's outputs do not match an image's values (on every rank alike)."""
        n_out = self.layers[-1].out_shape[0]
        n_in = int(np.prod(x.shape[1:]))
        if n_in != n_out:
            raise ConfigError(f"the last layer gives {n_out} outputs but an image has {n_in} values; "
                              "an Autoencoder reconstructs its input, so its last nout must equal the input size",
                              key="layers")
        return x.reshape(len(x), n_in).astype(self.backend.dtype, copy=False)

    def check_outputs(self, dataset):
        """ConfigError (at the last layer's ``nout``) unless the last layer gives one output per
        value of ``dataset``'s images (run by ``distnet check`` and before training)."""
        nout = self.layers[-1].out_shape[0]
        size = int(np.prod(dataset.image_shape))
        if nout != size:
            raise self.layers[-1].error(
                f"gives {nout} outputs but the dataset's images have {size} values "
                f"({'x'.join(map(str, dataset.image_shape))}); an Autoencoder reconstructs its input", "nout")

    def _targets(self, labels):
        return self._flat(self._inputs)

    def reconstruction_error(self, x):
        """Mean cost per image of reconstructing ``x (N, C, H, W)`` (evaluation mode; summed
        over the data replicas, collective over ``topology.data``)."""
        bs = self.batch_size or x.shape[0]
        mine = np.concatenate([self.replica_rows(np.arange(i, min(i + bs, len(x))))
                               for i in range(0, len(x), bs)])
        y = self.predict(x)
        total = float(self.cost.loss_sum(y, self._flat(x[mine]))) if len(mine) else 0.0
        total, = allreduce_scalars([total], self.topology.data)
        if not np.isfinite(total):
            raise TrainingError("the reconstruction cost is not finite (NaN or inf); check the weights "
                                "(weight_init), the learning rate and the data")
        return total / len(x)

    def misclass_rate(self, x, labels):
        """The reconstruction error of ``x`` (neon's Autoencoder reported it in place of a
        misclassification rate; ``labels`` are not used)."""
        return self.reconstruction_error(x)

    def split_metrics(self, split):
        return {"reconstruction": self.reconstruction_error(split[0])}

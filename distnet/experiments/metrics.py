"""The metrics of an evaluated split of a classifier: cost, error rate, top-k error rate,
per-class accuracy and confusion matrix, from one forward pass.

Every data replica counts its own rows (:meth:`~distnet.models.model.Model.predict`); the
integer counts are summed over the replicas (``topology.data``) and the rates derived from the
sums, so any layout gives the one-process numbers exactly where they are counts. The cost is a
float sum, equal up to summation order. The counting itself is :mod:`distnet.ops.confusion`.
"""
import numpy as np

from ..comm.reduce import allreduce_scalars
from ..errors import ConfigError, TrainingError
from ..ops.confusion import confusion_counts, rates, topk_misses
from .pixel_metrics import pixel_split_metrics
from .regression_metrics import own_rows

#: With more classes than this, top-5 is measured unless the experiment's ``top_k`` says otherwise.
DEFAULT_TOP_K = 5


def resolve_top_k(top_k, nclasses):
    """The ``k`` of the top-k error rate: ``top_k`` (0: none), default 5 when there are more
    than 5 classes; None when not measured. ConfigError for a ``k`` that is not below the
    number of classes (its error rate would always be 0)."""
    if top_k is None:
        return DEFAULT_TOP_K if nclasses > DEFAULT_TOP_K else None
    if top_k == 0:
        return None
    if top_k >= nclasses:
        raise ConfigError(f"top_k must be below the number of classes ({nclasses}; 0: no top-k error rate), "
                          f"got {top_k}", key="top_k")
    return int(top_k)


def metric_names(top_k=None):
    """The one-number metrics :func:`split_metrics` gives (what a checkpoint ``monitor`` may
    name after the split): ``cost``, ``misclass``, ``top{k}_misclass`` (with ``top_k``) and the
    macro averages of precision, recall and F1."""
    return ("cost", "misclass") + ((f"top{top_k}_misclass",) if top_k else ()) + \
        ("macro_precision", "macro_recall", "macro_f1")


def split_metrics(model, x, labels, top_k=None):
    """``{"cost", "misclass", "top{k}_misclass" (when ``top_k``), "class_accuracy", "precision",
    "recall", "f1", "macro_precision", "macro_recall", "macro_f1", "confusion"}`` of the images
    ``x (N, C, h, w)`` (this rank's tiles) with class ids ``labels (N,)``. ``cost``: the mean cost per image (as the epoch's training cost, without weight
    decay); rates in percent. Collective over ``model.topology.data`` (one Allreduce of the
    counts); the same on every rank. A per-pixel model counts pixels
    (:func:`~distnet.experiments.pixel_metrics.pixel_split_metrics`: no top-k)."""
    if model.per_pixel:
        return pixel_split_metrics(model, x, labels)
    nclasses = model.layers[-1].out_shape[0]
    n = len(labels)
    mine = own_rows(model, n)
    y = model.predict(x) if n else np.zeros((0, nclasses))
    own = np.asarray(labels)[mine]
    finite = np.isfinite(y).all(axis=1) if len(y) else np.zeros(0, dtype=bool)
    bad = int(np.count_nonzero(~finite))
    counts = confusion_counts(y, own, nclasses).ravel()
    misses = topk_misses(y, own, top_k) if top_k else 0
    cost = 0.0
    if len(y) and not bad:
        targets = np.zeros(y.shape, dtype=y.dtype)
        targets[np.arange(len(own)), own] = 1
        cost = float(model.cost.loss_sum(y, targets))
    # counts < 2**53: exact in the float64 sum
    summed = allreduce_scalars([bad, misses, cost, *counts.tolist()], model.topology.data)
    if summed[0]:   # every rank agrees: the counts are summed over the replicas
        raise TrainingError(f"the model's outputs are not finite (NaN or inf) for {int(summed[0])} of {n} "
                            "images, so its error rate means nothing; check the weights (weight_init) and the data")
    confusion = np.rint(summed[3:]).astype(np.int64).reshape(nclasses, nclasses)
    out = {"cost": summed[2] / n if n else float("nan")}
    out.update(rates(confusion, int(round(summed[1])), top_k))
    return out

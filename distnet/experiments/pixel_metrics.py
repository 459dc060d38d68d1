"""The metrics of an evaluated split of a per-pixel model (segmentation): cost, the pixels'
error rate, accuracy per class and confusion matrix, pixel accuracy, IoU and Dice per class and
their means, from one forward pass, without gathering the output maps.

Every rank counts the labelled pixels of its own tile of its own rows (the ``ignore_label``
pixels are left out), one minibatch at a time; ONE Allreduce of the integer counts over
``Topology.grad`` (the spatial and data ranks: every pixel of the split once) makes the
split's confusion matrix on every rank, exactly, and the rates are derived from it
(:mod:`distnet.ops.confusion`). The cost is the training cost's definition (the mean over the
minibatches of their losses, weighted by their sizes; each minibatch's loss from the cost's own
sums over the tiles), summed over the data replicas.
"""
import numpy as np

from ..comm.reduce import allreduce_scalars, allreduce_sum
from ..errors import TrainingError
from ..ops.confusion import pixel_confusion_counts, rates, segmentation_rates

#: The fields of a split's metrics that only a per-pixel model gives (the final record keeps them).
SEGMENTATION = ("pixel_acc", "miou", "dice", "class_iou", "class_dice")


def pixel_split_metrics(model, x, labels):
    """``{"cost", "misclass", "class_accuracy", "confusion"}`` of the pixels (the error rate:
    percent of the labelled pixels classified wrong; the confusion matrix counts pixels) and
    ``{"pixel_acc", "class_iou", "miou", "class_dice", "dice"}`` (percent) of the images ``x (N,
    C, *s)`` (this rank's tiles) with per-pixel labels ``labels (N, *s)`` (the same tiles).
    Collective over ``model.topology.grad`` (and the cost's communicator per minibatch); the
    same on every rank."""
    cost, xp, topology = model.cost, model.backend.xp, model.topology
    nclasses = cost.classes_of(model.layers[-1].out_shape[0])
    n = len(labels)
    bs = model.batch_size or n
    counts = np.zeros(nclasses * nclasses, dtype=np.int64)
    bad, loss = 0, xp.zeros(1, dtype=np.float64)
    with model.evaluating():
        for i in range(0, n, bs):
            rows = model.replica_rows(np.arange(i, min(i + bs, n)))
            y, t = model.fprop(xp.asarray(x[rows])), np.asarray(labels)[rows]
            loss += model.step_cost.loss(y, xp.asarray(t), min(i + bs, n) - i)
            y = model.backend.to_host(y)
            bad += int(np.count_nonzero(~np.isfinite(y).all(axis=1)))
            counts += pixel_confusion_counts(cost.predicted(y), t, nclasses, cost.ignore_label).ravel()
    summed = np.array([bad, *counts], dtype=np.int64)
    allreduce_sum([summed], topology.grad)    # integers: exact in any order
    if summed[0]:   # every rank agrees: the counts are summed over every pixel
        raise TrainingError(f"the model's outputs are not finite (NaN or inf) at {int(summed[0])} pixels of the "
                            f"{n} images, so its error rates mean nothing; check the weights (weight_init) and "
                            "the data")
    total, = allreduce_scalars([float(model.backend.to_host(loss)[0])], topology.data)
    confusion = summed[1:].reshape(nclasses, nclasses)
    out = {"cost": total / n if n else float("nan")}
    out.update(rates(confusion))
    out.update(segmentation_rates(confusion))
    return out


def final_fields(split, metrics):
    """The fields of a split's per-pixel ``metrics`` that the run's final record keeps
    (``test_miou``, ``test_class_iou``, ...)."""
    return {f"{split}_{k}": metrics[k] for k in SEGMENTATION}


def segmentation_lines(split, metrics, names):
    """What ``distnet evaluate`` prints of a split's per-pixel ``metrics`` beside the error rate:
    pixel accuracy, mean IoU and mean Dice, then IoU and Dice per class (``names``: the class
    names, label 0 first; ``-`` for a class neither labelled nor predicted)."""
    pixels = int(np.sum(metrics["confusion"]))
    lines = [f"{split} set pixel accuracy {metrics['pixel_acc']:.5f}%, mean IoU {metrics['miou']:.5f}%, "
             f"mean Dice {metrics['dice']:.5f}% ({pixels} labelled pixels)"]
    for what, key in (("IoU", "class_iou"), ("Dice", "class_dice")):
        per = ", ".join(f"{n} {'-' if v is None else f'{v:.2f}%'}" for n, v in zip(names, metrics[key]))
        lines.append(f"{split} set {what} per class: {per}")
    return lines

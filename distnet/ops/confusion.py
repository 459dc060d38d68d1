"""Classification counts of a batch of outputs: the confusion matrix (of images, or of the
pixels of a per-pixel model) and the top-k misses, and the rates derived from them.

Integers only, so that the partial counts of several data replicas (and of the tiles of a
per-pixel model's maps) sum to exactly the counts of the whole split (the rates are derived
from the summed counts, never averaged).
"""
import numpy as np


def confusion_counts(y, labels, nclasses):
    """``(K, K)`` int64 counts of outputs ``y (B, K)`` against class ids ``labels (B,)``: row =
    true class, column = predicted class (the argmax of the row; ties go to the first maximum,
    as :func:`~distnet.ops.costs.misclassified`)."""
    labels = np.asarray(labels).reshape(-1)
    predicted = np.asarray(y).argmax(axis=1) if len(labels) else np.zeros(0, dtype=np.int64)
    return _counts(labels, predicted, nclasses)


def pixel_confusion_counts(predicted, labels, nclasses, ignore_label=None):
    """``(K, K)`` int64 counts of the pixels: their predicted classes ``predicted (B, *S)``
    against their labels ``labels (B, *S)`` (row = true class, column = predicted); pixels
    labelled ``ignore_label`` are not counted."""
    labels, predicted = np.asarray(labels).reshape(-1), np.asarray(predicted).reshape(-1)
    if ignore_label is not None:
        keep = labels != ignore_label
        labels, predicted = labels[keep], predicted[keep]
    return _counts(labels, predicted, nclasses)


def _counts(labels, predicted, nclasses):
    flat = labels.astype(np.int64) * nclasses + predicted.astype(np.int64)
    return np.bincount(flat, minlength=nclasses * nclasses).reshape(nclasses, nclasses)


def topk_misses(y, labels, k):
    """How many rows of ``y (B, K)`` miss their label ``labels (B,)`` among their ``k`` largest
    outputs: at least ``k`` classes score strictly higher than the label (a tie with the label
    counts for it)."""
    y = np.asarray(y)
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    if not len(labels):
        return 0
    own = y[np.arange(len(labels)), labels]
    return int(np.count_nonzero((y > own[:, None]).sum(axis=1) >= k))


def rates(confusion, misses_k=None, k=None):
    """The rates (percent) of a summed ``confusion`` matrix ``(K, K)``: ``misclass`` (exactly
    ``100 * wrong / n``), ``top{k}_misclass`` (from ``misses_k``, when ``k`` is given),
    ``class_accuracy`` (``K`` values, None for a class without images), precision, recall and
    F1 per class with their macro averages (:func:`class_scores`) and ``confusion`` (lists of
    ints)."""
    confusion = np.asarray(confusion, dtype=np.int64)
    n = int(confusion.sum())
    right = np.diag(confusion)
    wrong = n - int(right.sum())
    per_class = confusion.sum(axis=1)
    out = {"misclass": 100.0 * wrong / n if n else float("nan")}
    if k is not None:
        out[f"top{k}_misclass"] = 100.0 * misses_k / n if n else float("nan")
    out["class_accuracy"] = [100.0 * int(r) / int(c) if c else None for r, c in zip(right, per_class)]
    out.update(class_scores(confusion))
    out["confusion"] = confusion.tolist()
    return out


def class_scores(confusion):
    """Precision, recall and F1 per class of a summed ``confusion`` matrix ``(K, K)`` (rows: true
    class, columns: predicted), in percent, and their macro averages: ``precision`` (of the
    images predicted as the class, the share that is; None for a class never predicted),
    ``recall`` (of the class's images, the share predicted as it: ``class_accuracy``; None
    for a class without images), ``f1`` (their harmonic mean; 0 where either is 0, None where
    either is None), and ``macro_precision``, ``macro_recall``, ``macro_f1``: the means over
    the classes that have images, a class never predicted counting precision and F1 0 (as
    scikit-learn's ``zero_division=0``); nan without images."""
    confusion = np.asarray(confusion, dtype=np.int64)
    right = np.diag(confusion)
    true, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    precision = [100.0 * int(r) / int(p) if p else None for r, p in zip(right, predicted)]
    recall = [100.0 * int(r) / int(t) if t else None for r, t in zip(right, true)]
    f1 = [None if p is None or r is None else (2 * p * r / (p + r) if p + r else 0.0)
          for p, r in zip(precision, recall)]
    present = [k for k in range(len(true)) if true[k]]

    def mean(values):
        return float(np.mean([values[k] or 0.0 for k in present])) if present else float("nan")
    return {"precision": precision, "recall": recall, "f1": f1, "macro_precision": mean(precision),
            "macro_recall": mean(recall), "macro_f1": mean(f1)}


def segmentation_rates(confusion):
    """The overlap rates (percent) of a summed pixel ``confusion`` matrix ``(K, K)`` (true x
    predicted): ``pixel_acc`` (the labelled pixels classified right), ``class_iou`` (per class
    ``TP / (TP + FP + FN)``), ``miou`` (their mean), ``class_dice`` (``2 TP / (2 TP + FP + FN)``)
    and ``dice`` (their mean). A class that is neither labelled nor predicted anywhere has no IoU
    or Dice (None) and is left out of the means; NaN when no pixel is labelled."""
    confusion = np.asarray(confusion, dtype=np.int64)
    tp = np.diag(confusion)
    fp, fn = confusion.sum(axis=0) - tp, confusion.sum(axis=1) - tp
    n = int(confusion.sum())
    iou = [100.0 * int(t) / int(t + p + f) if t + p + f else None for t, p, f in zip(tp, fp, fn)]
    dice = [100.0 * 2 * int(t) / int(2 * t + p + f) if t + p + f else None for t, p, f in zip(tp, fp, fn)]
    return {"pixel_acc": 100.0 * int(tp.sum()) / n if n else float("nan"), "class_iou": iou,
            "miou": _mean(iou), "class_dice": dice, "dice": _mean(dice)}


def _mean(values):
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else float("nan")

"""Classification counts of a batch of outputs: the confusion matrix and the top-k misses.

Integers only, so that the partial counts of several data replicas sum to exactly the counts of
the whole split (the rates are derived from the summed counts, never averaged).
"""
import numpy as np


def confusion_counts(y, labels, nclasses):
    """``(K, K)`` int64 counts of outputs ``y (B, K)`` against class ids ``labels (B,)``: row =
    true class, column = predicted class (the argmax of the row; ties go to the first maximum,
    as :func:`~distnet.ops.costs.misclassified`)."""
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    predicted = np.asarray(y).argmax(axis=1) if len(labels) else np.zeros(0, dtype=np.int64)
    return np.bincount(labels * nclasses + predicted, minlength=nclasses * nclasses).reshape(nclasses, nclasses)


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
    ``class_accuracy`` (``K`` values, None for a class without images) and ``confusion``
    (lists of ints)."""
    confusion = np.asarray(confusion, dtype=np.int64)
    n = int(confusion.sum())
    right = np.diag(confusion)
    wrong = n - int(right.sum())
    per_class = confusion.sum(axis=1)
    out = {"misclass": 100.0 * wrong / n if n else float("nan")}
    if k is not None:
        out[f"top{k}_misclass"] = 100.0 * misses_k / n if n else float("nan")
    out["class_accuracy"] = [100.0 * int(r) / int(c) if c else None for r, c in zip(right, per_class)]
    out["confusion"] = confusion.tolist()
    return out

"""Costs (docs/neon-semantics.md#costs) and the misclassification count.

``y`` is the network output and ``t`` the target, both ``(B, K)``. ``loss_sum(y, t)`` returns the
SUM over the batch of the per-sample loss as a 0-d float64 ``xp`` array (on a GPU it stays on the
device: training steps never wait for it); ``loss(y, t)`` is the same as a Python float.
``grad(y, t)`` is d loss / d y, the gradient of that sum, shaped like ``y`` (the model divides by
the batch size). Gradients keep ``y``'s dtype; the loss is accumulated in float64.
"""
import numpy as np

from ..backend import get_array_module
from . import dispatch
from .cuda import elementwise as cuda_ew
from .softmax import logsumexp, softmax

#: float32 machine epsilon, 2**-23: neon's clip bound, used for every dtype.
EPS = float(np.finfo(np.float32).eps)


class Cost:
    """A cost: ``loss_sum`` (0-d float64 ``xp`` array) and ``grad`` (shaped like ``y``)."""

    #: Whether the cost scores every pixel of a tiled output (:mod:`distnet.ops.pixel_costs`);
    #: a per-image cost reads the replicated output of the last layer.
    per_pixel = False
    #: The output it reads, where it matters (a per-pixel cost: ``"logits"`` or
    #: ``"probabilities"``); None: whatever the last layer gives.
    takes = None
    #: Whether it regresses float targets per sample ``(B, T)`` (a data set's ``targets``) rather
    #: than scoring class labels.
    regresses = False

    def loss(self, y, t):
        """The batch's summed loss as a Python float (waits for the device)."""
        return float(self.loss_sum(y, t))

    def probabilities(self, y):
        """The class scores ``distnet predict`` writes for outputs ``y (B, K)``: the outputs
        themselves (probabilities under CrossEntropy, whose last layer squashes them)."""
        return y


class CrossEntropy(Cost):
    """Binary cross-entropy summed over the K outputs (neon's ``CrossEntropy``).

    Per sample ``-sum_k [t ln clip(y) + (1-t) ln clip(1-y)]``, clip to ``[EPS, 1-EPS]``.
    ``grad = (y - t) / clip(y (1 - y), EPS, 1 - EPS)`` exactly as neon (so with a Logistic output
    ``dz = y - t`` except where ``y(1-y) < EPS``).

    Note: neon logged the MEAN over all ``B*K`` elements; distnet's ``loss`` is the sum over the
    batch of the per-sample sum over ``K`` (the quantity whose gradient ``grad`` is), so its value
    is ``B*K`` times neon's, and the model's per-sample average is ``K`` times neon's number.
    """

    name = "cross_entropy"

    def loss_sum(self, y, t):
        xp = get_array_module(y, t)
        return -xp.sum(_cross_entropy_terms(y, xp.asarray(t, dtype=y.dtype)), dtype="float64")

    def grad(self, y, t):
        xp = get_array_module(y, t)
        return _cross_entropy_grad(y, xp.asarray(t, dtype=y.dtype))


@dispatch.op
def _cross_entropy_terms(y, t):
    """``t ln clip(y) + (1-t) ln clip(1-y)`` elementwise (:class:`CrossEntropy`)."""
    xp = get_array_module(y, t)
    yc = xp.clip(y, EPS, 1 - EPS)
    nc = xp.clip(1 - y, EPS, 1 - EPS)
    return t * xp.log(yc) + (1 - t) * xp.log(nc)


@_cross_entropy_terms.kernel(when=cuda_ew.dense_alike)
def _cross_entropy_terms(y, t):                     # the terms in one launch
    return cuda_ew.launch(cuda_ew.CROSS_ENTROPY_TERMS, y, t, scalars=(EPS, 1 - EPS))


@dispatch.op
def _cross_entropy_grad(y, t):
    """``(y - t) / clip(y (1 - y))`` elementwise (:class:`CrossEntropy`)."""
    return (y - t) / get_array_module(y, t).clip(y * (1 - y), EPS, 1 - EPS)


@_cross_entropy_grad.kernel(when=cuda_ew.dense_alike)
def _cross_entropy_grad(y, t):                      # one launch instead of five
    return cuda_ew.launch(cuda_ew.CROSS_ENTROPY_GRAD, y, t, scalars=(EPS, 1 - EPS))


class SumSquaredDiffs(Cost):
    """``loss = 1/2 sum (y - t)**2`` over all elements; ``grad = y - t``."""

    name = "sum_squared_diffs"

    def loss_sum(self, y, t):
        xp = get_array_module(y, t)
        d = y - xp.asarray(t, dtype=y.dtype)
        return 0.5 * xp.sum(d * d, dtype="float64")

    def grad(self, y, t):
        xp = get_array_module(y, t)
        return y - xp.asarray(t, dtype=y.dtype)


class SumSquared(SumSquaredDiffs):
    """neon's later ``SumSquared``: ``SumSquaredDiffs``' ``1/2 sum (y - t)**2`` on float targets
    ``t (B, T)`` per sample (regression; ``SumSquaredDiffs`` keeps neon 0.4's one-hot targets)."""

    name = "sum_squared"
    regresses = True


class MeanSquared(Cost):
    """neon's ``MeanSquared`` on float targets ``t (B, T)`` per sample (regression): per sample
    ``1/(2T) sum_k (y_k - t_k)**2``, the mean over the ``T`` targets; ``grad = (y - t) / T``.
    The model divides the summed loss and its gradient by the batch size, so the cost is the
    mean squared error over the samples and targets, halved as neon's."""

    name = "mean_squared"
    regresses = True

    def loss_sum(self, y, t):
        xp = get_array_module(y, t)
        d = y - xp.asarray(t, dtype=y.dtype)
        return 0.5 * xp.sum(d * d, dtype="float64") / y.shape[1]

    def grad(self, y, t):
        xp = get_array_module(y, t)
        return (y - xp.asarray(t, dtype=y.dtype)) / y.dtype.type(y.shape[1])


class SoftmaxCrossEntropy(Cost):
    """Softmax cross-entropy on LOGITS (the output layer's activation should be ``Identity``).

    ``y (B, K)`` are logits ``z``; per sample ``-sum_k t_k log softmax(z)_k = sum_k t_k
    (logsumexp(z) - z_k)``, evaluated with log-sum-exp (no overflow for logits of 1e4).
    ``grad = softmax(z) * sum_k t_k - t`` (``softmax(z) - t`` for one-hot targets): the
    gradient with respect to the logits, so no separate softmax backward is needed.

    Targets ``t`` as everywhere in distnet: one-hot (or probability) rows ``(B, K)``; class ids
    ``(B,)`` (integers) are accepted too. ``misclassified`` works on logits unchanged (the
    argmax of the logits is the argmax of the probabilities); the model's outputs are logits,
    and :meth:`probabilities` (what ``distnet predict`` writes) applies the softmax.
    """

    name = "softmax_cross_entropy"

    @staticmethod
    def _targets(y, t):
        xp = get_array_module(y, t)
        t = xp.asarray(t)
        if t.ndim == 1:                      # class ids -> one-hot
            oh = xp.zeros(y.shape, dtype=y.dtype)
            oh[xp.arange(y.shape[0]), t.astype("int64")] = 1
            return oh
        return t.astype(y.dtype, copy=False)

    def loss_sum(self, y, t):
        xp = get_array_module(y, t)
        t = self._targets(y, t)
        lse = logsumexp(y.astype("float64", copy=False), axis=1, keepdims=True)
        return xp.sum(t * (lse - y), dtype="float64")

    def probabilities(self, y):
        """``softmax(y)``: the logits ``y (B, K)`` as class probabilities (rows sum to 1)."""
        return softmax(y)

    def grad(self, y, t):
        t = self._targets(y, t)
        p = softmax(y)
        p *= t.sum(axis=1, keepdims=True)
        p -= t
        return p


def misclassified(y, labels):
    """Number of rows of ``y (B, K)`` whose argmax over axis 1 differs from the label.

    ``labels`` are class indices ``(B,)``, or one-hot / score rows ``(B, K)`` (their argmax is
    taken). Ties in ``y`` go to the first maximum (numpy ``argmax``).
    """
    xp = get_array_module(y, labels)
    labels = xp.asarray(labels)
    if labels.ndim == 2:
        labels = labels.argmax(axis=1)
    return int(xp.count_nonzero(y.argmax(axis=1) != labels.reshape(-1)))

"""Per-pixel costs: the costs of a model whose output is a map of class scores per pixel (dense
prediction, segmentation).

``y (B, K, *S)`` is the output (``K`` scores per pixel, any number of spatial axes: 2-D images,
3-D volumes) and ``t (B, *S)`` the integer class id of every pixel; ``ignore_label`` marks pixels
that count for nothing (no loss, no gradient, no metric). On a process grid a rank holds the
tile of ``y`` and of ``t`` of its own pixels.

A per-pixel cost is a function of sums over every pixel of the minibatch: the weight of the
labelled pixels that normalises the cross-entropies, Dice's overlaps. The math is therefore in
three steps, so that no rank ever needs another's pixels:

1. ``partial_sums(y, t)`` (``t`` int64: :meth:`PixelCost.labels`): this tile's share of those
   sums, a small float64 array;
2. the sum of the shares over the ranks named by ``sums_over`` (``grad``: every tile of every
   data replica, sums over the global minibatch; ``spatial``: the tiles of each image, per-image
   sums) — one Allreduce, done by the layer wing (:mod:`distnet.layers.pixel_cost`), never here;
3. ``loss_of(sums, batch_size)`` and ``delta(y, t, sums, batch_size)`` from the summed sums.

**Loss and the per-image costs.** A per-image cost (:mod:`distnet.ops.costs`) gives the SUM of
its per-image losses over the batch, and the model divides its gradient by the global batch
size ``B``: it minimises the mean per image. A per-pixel cost is already normalised (a mean over
the labelled pixels, as PyTorch's ``reduction='mean'``, or a mean over images and classes for
Dice): ``loss_of`` gives ``B`` times that mean, so that the model's "sum divided by the batch
size" gives the mean back (the epoch's mean cost per image is the mean of the minibatches'
losses, weighted by their sizes), and ``delta`` is the gradient of the mean itself, which the
model uses without dividing it again. The per-image costs are unchanged.

Exactness: the class counts are integers (exact in float64), so the cross-entropies' normaliser
``sum_c w_c n_c`` is formed from the same numbers in the same order on every grid, and their
gradients are the same bits on any grid and replica count; the loss and Dice's sums of
probabilities differ by the order of floating-point additions only.
"""
import numpy as np

from ..backend import get_array_module
from ..errors import ConfigError
from .costs import Cost, _cross_entropy_grad, _cross_entropy_terms
from .pixel_softmax import (class_mask, labelled, masked_softmax, pixel_ce_grad, pixel_ce_terms,
                            pixel_dice_grad)
from .softmax import softmax

#: The smallest normaliser divided by: a minibatch without a labelled pixel (or whose pixels all
#: weigh 0) has loss 0 and gradient 0 (PyTorch gives NaN there).
_TINY = float(np.finfo(np.float64).tiny)


class PixelCost(Cost):
    """What every per-pixel cost shares (module docstring): ``ignore_label`` (int, default none)
    and ``class_weights`` (one number >= 0 per class, default all 1)."""

    #: The model's output is a map per pixel, tiled like the images (:mod:`distnet.models.outputs`).
    per_pixel = True
    #: The communicator that sums :meth:`partial_sums` (a :class:`~distnet.comm.topology.Topology` name).
    sums_over = "grad"
    #: The output it reads: logits (the last layer's activation should be Identity) or probabilities.
    takes = "logits"
    config_types = {"ignore_label": int, "class_weights": ("list", float)}

    def __init__(self, ignore_label=None, class_weights=None):
        if class_weights is not None and any(not (w >= 0 and np.isfinite(w)) for w in class_weights):
            raise ConfigError(f"class weights must be finite numbers >= 0, got {class_weights}", key="class_weights")
        self.ignore_label = ignore_label
        self.class_weights = None if class_weights is None else [float(w) for w in class_weights]

    def output_channels(self, nclasses):
        """The output maps the last layer must give for ``nclasses`` classes."""
        return nclasses

    def classes_of(self, nout):
        """The classes ``nout`` output maps tell apart (the metrics count them)."""
        return nout

    def check_classes(self, nout):
        """ConfigError (at ``class_weights``) unless the weights fit ``nout`` output maps."""
        want = self.weighted_classes(nout)
        if self.class_weights is not None and len(self.class_weights) != want:
            raise ConfigError(f"class_weights has {len(self.class_weights)} value(s), but the cost weighs "
                              f"{want} class(es) (the last layer gives {nout} map(s))", key="class_weights")

    def weighted_classes(self, nout):
        return nout

    def weights(self, xp, k, dtype="float64"):
        """The class weights ``(k,)`` on ``xp`` (all 1 when none are given)."""
        w = self.class_weights if self.class_weights is not None else [1.0] * k
        return xp.asarray(np.asarray(w, dtype=dtype))

    @staticmethod
    def labels(t):
        """The labels ``t (B, *S)`` as int64, what the steps below read (a data set may give any
        integer type: uint8 masks; no copy when they are int64 already)."""
        return t.astype("int64", copy=False)

    # -- the three steps (module docstring) -------------------------------------------------------
    def partial_sums(self, y, t):
        """This tile's share of the cost's sums: a small float64 array (its shape the same on
        every rank of :attr:`sums_over`)."""
        raise NotImplementedError

    def loss_of(self, sums, batch_size):
        """The loss (0-d float64) from the summed ``sums`` of a minibatch of ``batch_size``."""
        raise NotImplementedError

    def delta(self, y, t, sums, batch_size):
        """The gradient of the normalised loss with respect to this tile's ``y``."""
        raise NotImplementedError

    # -- on one process (tests, scripts): the shares are the sums ---------------------------------
    def loss_sum(self, y, t):
        """``loss_of`` of one process's batch: ``B`` times the normalised loss (0-d float64)."""
        t = self.labels(t)
        return self.loss_of(self.partial_sums(y, t), len(y))

    def grad(self, y, t):
        """d :meth:`loss_sum` / d ``y`` on one process (``len(y)`` times :meth:`delta`)."""
        t = self.labels(t)
        return self.delta(y, t, self.partial_sums(y, t), len(y)) * len(y)

    def probabilities(self, y):
        """The class probabilities of logits ``y (B, K, *S)``: the softmax over the classes."""
        return softmax(y)

    def predicted(self, y):
        """``(B, *S)`` int: each pixel's class (the first largest score), host arrays."""
        return np.asarray(y).argmax(axis=1)


class PixelSoftmaxCrossEntropy(PixelCost):
    """Softmax cross-entropy of every pixel on LOGITS ``y (B, K, *S)`` (activation Identity),
    PyTorch's ``CrossEntropyLoss(weight=class_weights, ignore_index=ignore_label,
    reduction='mean')``: ``sum_p w[t_p] (logsumexp(y_p) - y_p[t_p]) / sum_p w[t_p]`` over the
    labelled pixels ``p`` of the GLOBAL minibatch. The normaliser is formed from the labelled
    pixels of each class, counted on every tile and summed over the spatial and data ranks
    (``Topology.grad``) with the loss's numerator in one Allreduce; the gradient
    ``w[t] (softmax(y) - onehot(t)) / normaliser`` is then local."""

    name = "pixel_softmax_cross_entropy"

    def partial_sums(self, y, t):
        """``(K + 1,)`` float64: this tile's labelled pixels of each class, then its weighted
        loss terms summed."""
        xp, K = get_array_module(y, t), y.shape[1]
        sp = (0,) + tuple(range(2, y.ndim))
        counts = class_mask(t, K, self.ignore_label).sum(axis=sp).astype("float64")
        terms = pixel_ce_terms(y, t, self.weights(xp, K, y.dtype), self.ignore_label)
        return xp.concatenate([counts, xp.sum(terms, dtype="float64").reshape(1)])

    def _normaliser(self, sums, K):
        xp = get_array_module(sums)
        return xp.maximum((self.weights(xp, K) * sums[:K]).sum(), _TINY)

    def loss_of(self, sums, batch_size):
        K = sums.shape[0] - 1
        return sums[K] / self._normaliser(sums, K) * batch_size

    def delta(self, y, t, sums, batch_size):
        xp, K = get_array_module(y, t), y.shape[1]
        coef = (self.weights(xp, K) / self._normaliser(sums, K)).astype(y.dtype)
        return pixel_ce_grad(y, t, coef, self.ignore_label)


class PixelBinaryCrossEntropy(PixelCost):
    """Binary cross-entropy of every pixel on the output of a Logistic activation, one map ``y (B,
    1, *S)`` (the probability of class 1) against labels 0 / 1 (and ``ignore_label``): neon's
    :class:`~distnet.ops.costs.CrossEntropy` terms per pixel (clipped to ``[EPS, 1 - EPS]``), their
    mean over the labelled pixels of the GLOBAL minibatch (PyTorch's ``BCELoss`` over them). The
    data set has 2 classes; ``class_weights`` is not a key (PyTorch's ``pos_weight`` is not
    modelled)."""

    name = "pixel_binary_cross_entropy"
    takes = "probabilities"
    config_types = {"ignore_label": int}

    def __init__(self, ignore_label=None):
        super().__init__(ignore_label)

    def output_channels(self, nclasses):
        return 1

    def classes_of(self, nout):
        return 2

    def _targets(self, y, t):
        """``(ok, targets)``: the labelled pixels and the labels as ``y``'s ``(B, 1, *S)`` floats
        (0 where not labelled)."""
        xp = get_array_module(y, t)
        ok = labelled(t, self.ignore_label)
        return ok, xp.where(ok, t, 0).astype(y.dtype)[:, None]

    def partial_sums(self, y, t):
        """``(2,)`` float64: this tile's labelled pixels, the negated sum of their terms."""
        xp = get_array_module(y, t)
        ok, target = self._targets(y, t)
        terms = xp.where(ok[:, None], _cross_entropy_terms(y, target), 0)
        return xp.stack([xp.sum(ok, dtype="float64"), -xp.sum(terms, dtype="float64")])

    def loss_of(self, sums, batch_size):
        return sums[1] / get_array_module(sums).maximum(sums[0], _TINY) * batch_size

    def delta(self, y, t, sums, batch_size):
        xp = get_array_module(y, t)
        ok, target = self._targets(y, t)
        scale = (ok / xp.maximum(sums[0], _TINY)).astype(y.dtype)
        g = _cross_entropy_grad(y, target)
        g *= scale[:, None]
        return g

    def probabilities(self, y):
        """The logistic outputs themselves (the probability of class 1)."""
        return y

    def predicted(self, y):
        """Class 1 where the probability exceeds 0.5."""
        return (np.asarray(y)[:, 0] > 0.5).astype(np.int64)


class DiceLoss(PixelCost):
    """Soft Dice loss on LOGITS ``y (B, K, *S)`` (K >= 2; activation Identity), MONAI's
    ``DiceLoss(softmax=True, to_onehot_y=True)``: ``p = softmax(y)``, ``g`` the one-hot labels,
    both 0 at unlabelled pixels; per image ``b`` and class ``c`` (``batch``: per class over the
    whole minibatch) ``f = 1 - (2 sum p g + smooth_nr) / (sum p + sum g + smooth_dr)``, the
    sums over the pixels; the loss is the mean over images and classes of ``class_weights[c]
    f`` (``include_background: false`` leaves class 0 out, and its weight). Keys:
    ``smooth_nr``, ``smooth_dr`` (default 1e-5 each), ``batch`` (default False),
    ``include_background`` (default True), ``class_weights``, ``ignore_label``.

    The three sums of every image and class are partial sums on each tile, summed over the
    tiles of the image (``Topology.spatial``; with ``batch``, over the data replicas too:
    ``Topology.grad``) in one Allreduce; every rank then forms the loss and its gradient
    ``(w_c / n) (2 g D - N) / D**2`` (``N``, ``D`` the numerator and denominator, ``n`` the
    terms of the mean) through the softmax's backward."""

    name = "dice"
    config_types = {**PixelCost.config_types, "smooth_nr": float, "smooth_dr": float, "batch": bool,
                    "include_background": bool}

    def __init__(self, smooth_nr=1e-5, smooth_dr=1e-5, batch=False, include_background=True,
                 ignore_label=None, class_weights=None):
        super().__init__(ignore_label, class_weights)
        if smooth_nr < 0 or smooth_dr < 0:
            raise ConfigError(f"smooth_nr and smooth_dr must be >= 0, got {smooth_nr} and {smooth_dr}",
                              key="smooth_nr" if smooth_nr < 0 else "smooth_dr")
        self.smooth_nr, self.smooth_dr = float(smooth_nr), float(smooth_dr)
        self.batch, self.include_background = batch, include_background
        self.sums_over = "grad" if batch else "spatial"

    def check_classes(self, nout):
        if nout < 2:
            raise ConfigError(f"DiceLoss takes the softmax over at least 2 maps (classes), but the last layer "
                              f"gives {nout}", key="class_weights" if self.class_weights else None)
        super().check_classes(nout)

    def weighted_classes(self, nout):
        return nout if self.include_background else nout - 1

    def partial_sums(self, y, t):
        """``(b, K, 3)`` float64 (``b``: this rank's images; 1 with ``batch``): per image and
        class, this tile's sums of ``p g``, ``p`` and ``g``."""
        xp, K = get_array_module(y, t), y.shape[1]
        p, g = masked_softmax(y, t, self.ignore_label), class_mask(t, K, self.ignore_label)
        sp = tuple(range(2, y.ndim))
        if self.batch:
            sp = (0,) + sp
        parts = [xp.sum(p * g, axis=sp, dtype="float64"), xp.sum(p, axis=sp, dtype="float64"),
                 g.sum(axis=sp).astype("float64")]
        return xp.stack(parts, axis=-1).reshape(-1, K, 3)

    def _terms(self, sums, batch_size):
        """``(w / n, N, D)``, each ``(rows, K)`` float64 (``w`` 0 for a class left out)."""
        xp, K = get_array_module(sums), sums.shape[1]
        numer = 2 * sums[..., 0] + self.smooth_nr
        denom = sums[..., 1] + sums[..., 2] + self.smooth_dr
        kept = self.weighted_classes(K)
        w = self.weights(xp, kept)
        if kept < K:
            w = xp.concatenate([xp.zeros(K - kept, dtype="float64"), w])
        return w / (kept * (1 if self.batch else batch_size)), numer, denom

    def loss_of(self, sums, batch_size):
        """``B`` times the mean (module docstring); without ``batch``, the share of this rank's
        images: the data replicas' shares add up to it."""
        wn, numer, denom = self._terms(sums, batch_size)
        return (wn * (1 - numer / denom)).sum() * batch_size

    def delta(self, y, t, sums, batch_size):
        wn, numer, denom = self._terms(sums, batch_size)
        alpha = (-2 * wn / denom).astype(y.dtype)
        beta = (wn * numer / (denom * denom)).astype(y.dtype)
        return pixel_dice_grad(y, t, alpha, beta, self.ignore_label)

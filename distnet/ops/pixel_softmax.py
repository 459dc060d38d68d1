"""The per-pixel softmax chains of the per-pixel costs (:mod:`distnet.ops.pixel_costs`), each an
op with its fused kernel (:mod:`distnet.ops.cuda.pixel_costs`).

``z (B, K, *S)`` are logits (``K`` classes per pixel, any number of spatial axes) and ``t (B,
*S)`` integer class ids; a pixel whose label is ``ignore`` (None: none is) is not *labelled*
and gets nothing: no loss term, no probability in the Dice sums, a zero gradient. The softmax
is over the class axis, with the class maximum subtracted (:mod:`distnet.ops.softmax`), so
logits of 1e4 neither overflow nor lose the labelled class. Results keep ``z``'s dtype.
"""
import numpy as np

from ..backend import get_array_module
from . import dispatch
from .cuda import pixel_costs as cuda_pixel
from .softmax import logsumexp, softmax, softmax_bprop


def labelled(t, ignore):
    """``(B, *S)`` bool: the pixels whose label is not ``ignore``."""
    xp = get_array_module(t)
    return xp.ones(t.shape, dtype=bool) if ignore is None else t != ignore


def class_mask(t, nclasses, ignore):
    """``(B, K, *S)`` bool: ``t == k`` at the labelled pixels (the one-hot targets)."""
    xp = get_array_module(t)
    if ignore is not None:
        t = xp.where(t != ignore, t, -1)
    return t[:, None] == xp.arange(nclasses).reshape((1, nclasses) + (1,) * (t.ndim - 1))


def _label_or_zero(t, ok):
    """The labels, 0 where not labelled (an index every class vector has)."""
    return get_array_module(t).where(ok, t, 0)


def _fused(z, t, *args):
    """Whether the kernels read these arguments (an op's, the ``ignore`` label last): C-ordered
    ``z`` and class vectors of one float dtype, C-ordered int64 labels."""
    per_class = args[:-1]
    return (dispatch.float_arrays(z, *per_class) and t.dtype == np.int64 and t.flags.c_contiguous
            and all(a.flags.c_contiguous for a in (z, *per_class)))


def _ignore(ignore):
    """The ``ignore`` a kernel takes: -1 for None (no label is negative)."""
    return -1 if ignore is None else int(ignore)


@dispatch.op
def pixel_ce_terms(z, t, w, ignore):
    """``(B, *S)``: ``w[t] * (logsumexp(z) - z[t])`` per labelled pixel, 0 elsewhere; ``w (K,)``
    the class weights."""
    xp = get_array_module(z, t)
    ok = labelled(t, ignore)
    tc = _label_or_zero(t, ok)
    zt = xp.take_along_axis(z, tc[:, None], axis=1)[:, 0]
    return xp.where(ok, (logsumexp(z, axis=1) - zt) * w[tc], 0)


@pixel_ce_terms.kernel(when=_fused)
def pixel_ce_terms(z, t, w, ignore):
    return cuda_pixel.ce_terms(z, t, w, _ignore(ignore))


@dispatch.op
def pixel_ce_grad(z, t, coef, ignore):
    """``(B, K, *S)``: ``(softmax(z) - onehot(t)) * coef[t]`` per labelled pixel, 0 elsewhere;
    ``coef (K,)`` (the class weights over the normaliser)."""
    xp = get_array_module(z, t)
    ok = labelled(t, ignore)
    c = xp.where(ok, coef[_label_or_zero(t, ok)], 0)
    p = softmax(z)
    p -= class_mask(t, z.shape[1], ignore)
    p *= c[:, None]
    return p


@pixel_ce_grad.kernel(when=_fused)
def pixel_ce_grad(z, t, coef, ignore):
    return cuda_pixel.ce_grad(z, t, coef, _ignore(ignore))


@dispatch.op
def masked_softmax(z, t, ignore):
    """``(B, K, *S)``: ``softmax(z)`` at the labelled pixels, 0 elsewhere."""
    p = softmax(z)
    p *= labelled(t, ignore)[:, None]
    return p


@masked_softmax.kernel(when=_fused)
def masked_softmax(z, t, ignore):
    return cuda_pixel.masked_softmax(z, t, _ignore(ignore))


@dispatch.op
def pixel_dice_grad(z, t, alpha, beta, ignore):
    """``(B, K, *S)``: the softmax backward of ``dp = alpha[b, k] * onehot + beta[b, k]`` at the
    labelled pixels (0 elsewhere): ``p * (dp - sum_k dp p)``, ``p = softmax(z)``. ``alpha``,
    ``beta``: ``(B, K)``, or ``(1, K)`` for every image alike."""
    K = z.shape[1]
    shape = (alpha.shape[0], K) + (1,) * (z.ndim - 2)
    dp = alpha.reshape(shape) * class_mask(t, K, ignore) + beta.reshape(shape)
    dp *= labelled(t, ignore)[:, None]
    return softmax_bprop(softmax(z), dp)


@pixel_dice_grad.kernel(when=_fused)
def pixel_dice_grad(z, t, alpha, beta, ignore):
    return cuda_pixel.dice_grad(z, t, alpha, beta, _ignore(ignore))

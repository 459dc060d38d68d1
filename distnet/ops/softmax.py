"""Softmax, log-softmax and log-sum-exp over the class axis, numerically stable.

``z`` is ``(B, K)`` (logits: ``B`` samples, ``K`` classes; any ``axis`` may be named). The row
maximum is subtracted before ``exp`` so nothing overflows (logits of 1e4 or -1e4 are fine) and
the largest term is exactly ``exp(0) = 1``, so the sum never underflows to 0 either. Results keep
``z``'s dtype. Forward and backward (vector-Jacobian products) side by side::

    y = softmax(z)               dz = softmax_bprop(y, dy)      = y * (dy - sum(dy * y))
    l = log_softmax(z)           dz = log_softmax_bprop(l, dl)  = dl - exp(l) * sum(dl)
    s = logsumexp(z)   (B,)      dz = softmax(z) * ds[:, None]

The softmax cross-entropy cost built on these is
:class:`distnet.ops.costs.SoftmaxCrossEntropy`.
"""
from ..backend import get_array_module


def logsumexp(z, axis=1, keepdims=False):
    """``log(sum(exp(z), axis))`` without overflow: ``m + log(sum(exp(z - m)))``, ``m`` the max."""
    xp = get_array_module(z)
    m = z.max(axis=axis, keepdims=True)
    s = xp.log(xp.exp(z - m).sum(axis=axis, keepdims=True)) + m
    return s if keepdims else s.squeeze(axis)


def softmax(z, axis=1, out=None):
    """``exp(z) / sum(exp(z), axis)``, shaped like ``z`` (into ``out`` if given; may be ``z``)."""
    xp = get_array_module(z)
    m = z.max(axis=axis, keepdims=True)
    out = xp.subtract(z, m, out=out)
    xp.exp(out, out=out)
    out /= out.sum(axis=axis, keepdims=True)
    return out


def softmax_bprop(y, dy, axis=1):
    """``dz`` given ``y = softmax(z)`` and ``dy`` = dL/dy: ``y * (dy - sum(dy * y, axis))``."""
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def log_softmax(z, axis=1):
    """``z - logsumexp(z)``: the log-probabilities, exact also where ``softmax`` underflows."""
    return z - logsumexp(z, axis=axis, keepdims=True)


def log_softmax_bprop(logp, dl, axis=1):
    """``dz`` given ``logp = log_softmax(z)`` and ``dl`` = dL/dlogp: ``dl - exp(logp) * sum(dl)``."""
    xp = get_array_module(logp, dl)
    return dl - xp.exp(logp) * dl.sum(axis=axis, keepdims=True)

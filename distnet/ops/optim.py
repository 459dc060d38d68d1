"""Optimiser steps (in place, on one parameter's array) and gradient clipping by global norm.

Every step updates ``w`` in place from its gradient ``g`` and its state arrays (same shape as
``w``: a shard of a sharded parameter has shard-shaped state, so the state is sharded like the
parameter with no extra rule). ``g`` is used as scratch space and holds no gradient afterwards
(as :func:`distnet.ops.sgd.sgd_update`): a step allocates nothing the size of ``w``, except the
L2 term ``weight_decay * w`` when no ``scratch`` array (shaped like ``w``) is given.

Weight decay, two kinds (both with the ``weight_decay`` coefficient ``lambda``):

* **L2** (``decoupled=False``, the default of :func:`sgd_step` and :func:`adam_step`, as in
  ``torch.optim.SGD`` / ``torch.optim.Adam``): ``g <- g + lambda * w`` before the step, i.e.
  the gradient of ``lambda/2 |w|^2`` is added to the loss gradient (for Adam it is then
  rescaled by the adaptive denominator).
* **decoupled** (``decoupled=True``, the default of :func:`adamw_step`, as
  ``torch.optim.AdamW`` and Loshchilov & Hutter's SGDW): ``w <- w * (1 - lr * lambda)`` before
  the step, independent of the gradient.

For plain SGD with a constant learning rate the two are the same update.

Formulas, ``t`` the 1-based step count:

* SGD (neon's momentum form, :mod:`distnet.ops.sgd`): ``v <- mu v - lr g``; ``w <- w + v``
  (nesterov: ``w <- w + mu v - lr g``). With a constant ``lr`` this is exactly
  ``torch.optim.SGD`` (``b <- mu b + g``, ``w <- w - lr b``; ``v = -lr b``); when ``lr`` changes
  between steps neon's form keeps the old velocity's scale (no ``lr`` rescaling of momentum).
* Adam (Kingma & Ba, the form of PyTorch's documentation)::

      m <- beta1 m + (1 - beta1) g            v <- beta2 v + (1 - beta2) g^2
      w <- w - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

Gradient clipping by global norm (``torch.nn.utils.clip_grad_norm_``): ``total = sqrt(sum of
the squares of every gradient element of the model)``; if ``total > max_norm`` every gradient
is multiplied by ``max_norm / (total + 1e-6)``. Distributed: each rank adds the squares of the
gradient shards it OWNS (:func:`sum_of_squares`; a replicated parameter's gradient, identical
on the ranks that hold it after its Allreduce, must be counted on one of them only, or divided
by its replica count), one Allreduce(SUM) of that scalar over the whole world gives the global
sum, and :func:`clip_coefficient` turns it into the factor every rank applies.
"""
import math

import numpy as np

from ..backend import get_array_module
from .cuda import launch as cuda
from .cuda import optim as cuda_optim
from .sgd import sgd_update


def add_l2(g, w, weight_decay, scratch=None):
    """L2 weight decay into the gradient, in place: ``g += weight_decay * w`` (through
    ``scratch``, shaped like ``w``, if given; otherwise one temporary)."""
    if weight_decay:
        xp = get_array_module(g, w)
        if scratch is None:
            g += weight_decay * w
        else:
            xp.multiply(w, weight_decay, out=scratch)
            g += scratch


def decay_weights(w, lr, weight_decay):
    """Decoupled weight decay, in place: ``w *= 1 - lr * weight_decay``."""
    if weight_decay:
        w *= 1.0 - lr * weight_decay


def sgd_step(w, g, v, lr, mu=0.0, nesterov=False, weight_decay=0.0, decoupled=False, scratch=None):
    """One SGD step in place (neon's momentum form, see the module docstring).

    ``v``: velocity shaped like ``w``, or None when no momentum is used (``mu == 0``).
    ``weight_decay``: L2 into the gradient (default) or decoupled (``decoupled=True``).
    """
    if cuda.available(get_array_module(w)):     # one launch, the same roundings
        cuda_optim.sgd_step(w, g, v, lr, mu, nesterov, weight_decay, decoupled)
        return
    if decoupled:
        decay_weights(w, lr, weight_decay)
    else:
        add_l2(g, w, weight_decay, scratch)
    sgd_update(w, g, v, lr, mu, nesterov)


def adam_step(w, g, m, v, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
              decoupled=False, scratch=None):
    """One Adam step in place; ``m``, ``v`` (first and second moments, zero-initialised,
    shaped like ``w``) are updated; ``step`` is the 1-based count of steps INCLUDING this one.
    ``decoupled=True`` makes it AdamW. ``g`` is scratch afterwards."""
    if step < 1:
        raise ValueError(f"adam_step: step counts from 1, got {step}")
    xp = get_array_module(w, g, m, v)
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    if cuda.available(xp):                      # one launch, the same roundings
        cuda_optim.adam_step(w, g, m, v, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2)
        return
    if decoupled:
        decay_weights(w, lr, weight_decay)
    else:
        add_l2(g, w, weight_decay, scratch)
    m -= g
    m *= beta1
    m += g                                  # m = beta1 m + (1 - beta1) g
    g *= g
    v -= g
    v *= beta2
    v += g                                  # v = beta2 v + (1 - beta2) g^2
    xp.sqrt(v, out=g)
    g *= 1.0 / math.sqrt(bc2)
    g += eps                                # sqrt(v_hat) + eps
    xp.divide(m, g, out=g)
    g *= lr / bc1                           # lr * m_hat / (sqrt(v_hat) + eps)
    w -= g


def adamw_step(w, g, m, v, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, scratch=None):
    """One AdamW step (Adam with decoupled weight decay, PyTorch's default ``weight_decay``
    0.01): :func:`adam_step` with ``decoupled=True``."""
    adam_step(w, g, m, v, step, lr, beta1, beta2, eps, weight_decay, True, scratch)


# ------------------------------------------------------------------------ clipping

def sum_of_squares(arrays):
    """``sum_i sum(a_i ** 2)`` over the arrays, a 0-d float64 ``xp`` array (stays on the
    device); the local part of the squared global norm (see the module docstring)."""
    total = None
    for a in arrays:
        xp = get_array_module(a)
        if a.dtype == xp.float64:
            flat = a.reshape(-1)
            s = xp.vdot(flat, flat)            # BLAS, no temporary for contiguous arrays
        else:
            s = xp.sum(xp.square(a), dtype="float64")
        total = s if total is None else total + s
    return np.zeros((), dtype="float64") if total is None else total


def clip_coefficient(total_sq, max_norm, eps=1e-6):
    """The factor ``min(1, max_norm / (sqrt(total_sq) + eps))`` for the global squared norm
    ``total_sq``; also returns the norm: ``(factor, norm)``. Python floats for a number or a
    numpy array; for a device array, 0-d device arrays (reading the norm back would make every
    clipped step wait for the device)."""
    xp = get_array_module(total_sq)
    if xp is not np:
        norm = xp.sqrt(total_sq)
        return xp.minimum(1.0, max_norm / (norm + eps)), norm
    norm = math.sqrt(float(total_sq))
    return min(1.0, max_norm / (norm + eps)), norm


def scale(arrays, factor):
    """Multiply every array in place by ``factor``: a number (skipped when it is 1) or a 0-d
    device array (always applied: whether it is 1 is known on the device only; multiplying by 1
    changes nothing), cast to each array's dtype as a number would be."""
    xp = get_array_module(factor)
    if xp is not np:
        cast = {}
        for a in arrays:
            f = cast.get(a.dtype)
            if f is None:
                f = cast[a.dtype] = factor.astype(a.dtype)
            a *= f
    elif factor != 1.0:
        for a in arrays:
            a *= factor

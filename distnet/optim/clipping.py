"""Gradient clipping by global norm (``torch.nn.utils.clip_grad_norm_``): ``total = sqrt(sum of
the squares of every gradient element of the model)``; if ``total > max_norm`` every gradient is
multiplied by ``max_norm / (total + 1e-6)``.

Distributed, the norm is a sum over shards, reduced once: each rank adds the squares of the
gradient shards it OWNS (:func:`sum_of_squares`; a replicated parameter's gradient, identical on
the ranks that hold it after its Allreduce, must be counted on one of them only), one
Allreduce(SUM) of that scalar over the whole world gives the global sum (the training step does
it: :meth:`distnet.layers.step.TrainingStep.clip`), and :func:`clip_coefficient` turns it into the
factor every rank applies with :func:`scale`. Nothing here communicates.
"""
import math

import numpy as np

from ..backend import get_array_module


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

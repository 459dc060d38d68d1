"""Non-finite parameters never pass silently: a cheap, collective check of every parameter that stops training with a :class:`TrainingError` naming the layer, the
parameter, the epoch and the batch, on every rank.

What is checked, when (the cost is one read of the parameters, no temporary array):

* every :data:`CHECK_EVERY` training steps and after the last batch of every epoch
  (:func:`after_step`, called by the training loop), so a NaN or infinity is caught within
  :data:`CHECK_EVERY` steps of appearing, and before the epoch's checkpoint and metrics;
* before every checkpoint is written (:func:`check_parameters`), so no checkpoint of
  non-finite weights exists.

A gradient that becomes NaN or infinite makes its parameter so at the update (``w -= lr * g``;
a frozen layer's ``0 * inf`` is NaN too), and a NaN cost is already caught every step; so the
parameters are the one place to look (a non-finite momentum velocity is added to its parameter
in the same update). The test is the sum of all of them, read once (one wait for a GPU): finite for finite values (unless the sum itself overflows, which
:func:`_first_bad` then settles with ``isfinite``). With
several ranks, one float64 Allreduce over the world agrees on the outcome; only when something
is wrong does a second collective tell every rank which parameter on which rank.
"""
import math

import numpy as np

from ..comm.abort import run_collectively
from ..comm.reduce import allreduce_scalars
from ..errors import TrainingError

#: Check the parameters every this many training steps (and at the end of every epoch). Measured
#: cost: see ``tests/unit/test_nonfinite.py`` and the README; well under 1% of a step.
CHECK_EVERY = 16


def _arrays(model):
    """``[(layer, Param, array)]``: every parameter value on this rank. (A momentum velocity is
    added to its parameter at the update that makes it: a non-finite velocity makes a
    non-finite parameter at once, so the velocities need no reading of their own.)"""
    return [(layer, p, p.value) for layer, p in model._params
            if p.value is not None and p.value.size and p.value.dtype.kind in "fc"]


def _first_bad(model):
    """``"parameter 'conv.W' of layer 'conv' holds NaN values"`` for the first non-finite
    parameter on this rank, or None. One wait for the device: the sums of all arrays (in their
    own dtype: no conversion pass) are added on the device and read once; only when that total
    is not finite (a NaN or inf, or an overflowing sum of finite values) are the arrays examined
    one by one."""
    xp = model.backend.xp
    arrays = _arrays(model)
    if not arrays:
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # numpy's warnings; cupy has none
        total = arrays[0][2].sum()
        for _, _, a in arrays[1:]:
            total = total + a.sum()
        if math.isfinite(float(total)):
            return None
    for layer, p, a in arrays:
        if not bool(xp.isfinite(a).all()):
            kind = "NaN" if bool(xp.isnan(a).any()) else "infinite"
            return f"parameter '{p.name}' of layer '{layer.name}' holds {kind} values"
    return None


def check_parameters(model, when):
    """Raise :class:`TrainingError` on every rank if any parameter of ``model`` on any rank is
    NaN or infinite. ``when``: e.g. ``"after epoch 2, batch 5"``. Collective over
    ``model.topology.world`` (one float64 Allreduce; a second collective only on failure)."""
    bad = _first_bad(model)
    world = model.topology.world
    if world.Get_size() == 1:
        if bad:
            raise TrainingError(f"{bad} {when}; lower the learning rate or check the data")
        return
    if allreduce_scalars([1.0 if bad else 0.0], world)[0] == 0:
        return

    def fail():
        if bad:
            raise TrainingError(f"rank {world.Get_rank()}: {bad} {when}; lower the learning rate "
                                "or check the data")
    run_collectively(fail, world)


def after_step(model, epoch, batch, nbatches):
    """The training loop's hook after step ``batch`` (0-based) of ``nbatches`` in ``epoch``:
    :func:`check_parameters` every :data:`CHECK_EVERY` steps and after the epoch's last batch.
    Every rank calls it at the same steps (collective)."""
    if (batch + 1) % CHECK_EVERY == 0 or batch == nbatches - 1:
        check_parameters(model, f"after epoch {epoch}, batch {batch}")

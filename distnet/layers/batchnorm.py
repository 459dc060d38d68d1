"""Batch normalisation: ``BatchNormLayer``, on whole images or on spatial tiles.

Conv outputs ``(B, C, H, W)``: statistics per channel over the batch and all pixels; FC outputs
``(B, F)``: per feature over the batch. Training uses the batch statistics of the GLOBAL
minibatch, exactly: every rank computes per-channel partial sums of its tile and its samples
(:func:`~distnet.ops.batchnorm.bn_stats_partial`, shifted by the running mean: one pass), and
ONE float64 Allreduce of ``(2C + 1)`` numbers (the sums and the value count) over the
communicator of the layout makes them global:

* image-like input (spatial tiles): ``Topology.grad`` (spatial x data ranks);
* vector input (replicated over the grid): ``Topology.data`` (the spatial ranks hold the same
  rows and compute the same sums).

Backward likewise: ONE Allreduce of ``2C`` sums (``[sum dy, sum dy*xhat]``) gives ``dbeta`` and
``dgamma`` of the whole minibatch on every rank, and the input gradient. The parameters are
therefore declared complete (``reduce_over`` :data:`~distnet.layers.placement.COMPLETE`): the
training step does not sum them again. A single process is the same code with communicators of
one rank. ``gamma``/``beta`` draw nothing from the weight RNG (ones and zeros), so adding batch
norm does not shift the other layers' initial weights.

Running averages (PyTorch's semantics, ``momentum`` 0.1, unbiased variance) are updated in
every training forward and are the layer's *buffers* (``running_mean``, ``running_var``):
replicated, stored in checkpoints, restored on any grid. Evaluation (the model's
``evaluating()``, used by ``predict``) normalises with them and communicates nothing.
"""
import numpy as np

from ..comm.reduce import allreduce_sum
from ..config.types import Fraction, NonNegative, Positive
from ..ops.batchnorm import (bn_bprop_dx, bn_bprop_dx_inference, bn_bprop_partial, bn_fprop,
                             bn_normalize, bn_set_param_grads, bn_stats_partial, bn_train_statistics,
                             local_count)
from .base import BaseLayer
from .placement import (COMPLETE, OVER_DATA, OVER_GRAD, REPLICATED, SPATIAL, Collective, Layout,
                        ParamPlacement, Placement, WorkArray)


class BatchNormLayer(BaseLayer):
    """``y = gamma * (x - mean) / sqrt(var + eps) + beta`` per channel (image-like input) or per
    feature (vector input). Keys: ``eps`` (default 1e-5), ``momentum`` (of the running averages,
    PyTorch's convention: ``running = (1 - momentum) running + momentum batch``; default 0.1),
    ``learning_rate`` (of gamma and beta; default the model's / learning rule's),
    ``activation`` (applied after the affine map, e.g. ``!obj:distnet.activations.RectLin {}``
    for ResNet's conv -> BN -> ReLU; default none). Parameters
    ``gamma`` (ones) and ``beta`` (zeros), ``(C,)``; buffers ``running_mean`` (zeros),
    ``running_var`` (ones). On a process grid the statistics are those of the whole minibatch:
    the per-channel sums of every tile and data replica in one Allreduce (module docstring)."""

    config_types = {"eps": Positive, "momentum": Fraction, "learning_rate": NonNegative,
                    "activation": ("obj", "activation")}
    whole_batch = True

    def __init__(self, eps=1e-5, momentum=0.1, learning_rate=None, activation=None, **common):
        super().__init__(**common)
        if not eps > 0:
            raise self.error(f"eps must be > 0, got {eps}", "eps")
        if not 0.0 <= momentum <= 1.0:
            raise self.error(f"momentum must be in [0, 1], got {momentum}", "momentum")
        self.eps, self.momentum, self.learning_rate = float(eps), float(momentum), learning_rate
        self.activation = activation
        self.gamma = self.beta = self.running_mean = self.running_var = None

    def infer_shape(self, in_shape):
        if not 1 <= len(in_shape) <= 4:
            raise self.error(f"needs (C, H, W) (or (C, *S), 1 to 3 spatial axes) or (F,) inputs, "
                             f"got {tuple(in_shape)}")
        self.in_shape = self.out_shape = tuple(in_shape)
        return self.out_shape

    def place(self, layout, position):
        """Same layout out as in; gamma/beta (complete: the layer sums their gradients itself)
        and the running statistics replicated; one Allreduce forward and one backward over
        ``grad`` (image tiles) or ``data`` (vectors), in training only."""
        image = len(self.in_shape) > 1
        over = OVER_GRAD if layout == SPATIAL and image else OVER_DATA
        C = self.in_shape[0]
        pp = [ParamPlacement(f"{self.name}.{n}", (C,), (C,), Ellipsis, COMPLETE) for n in ("gamma", "beta")]
        bp = [ParamPlacement(f"{self.name}.{n}", (C,), (C,), Ellipsis, COMPLETE)
              for n in ("running_mean", "running_var")]
        kind = layout if image else REPLICATED
        out = Layout.of(kind, self.out_shape, position)
        return Placement(Layout.of(kind, self.in_shape, position), out,
                         params=tuple(pp), buffers=tuple(bp), work=_work_arrays(int(np.prod(out.local_shape))),
                         collectives=(Collective(over.comm, 0, False, 2 * C + 1, True),
                                      Collective(over.comm, 0, True, 2 * C, True)),
                         extra={"stats_over": over})

    def setup(self, ctx):
        self._comm = ctx.topology.comm(self.placement.extra["stats_over"].comm)
        self._host_staging = ctx.backend.host_staging

    def draw_params(self, rng):
        C = self.in_shape[0]
        return [np.ones(C, dtype=self.dtype), np.zeros(C, dtype=self.dtype)]

    def initial_buffers(self):
        C = self.in_shape[0]
        return [np.zeros(C, dtype=self.dtype), np.ones(C, dtype=self.dtype)]

    def params_ready(self):
        self.gamma, self.beta = (p.value for p in self._params)
        self.running_mean, self.running_var = (b.value for b in self._buffers)

    def fprop(self, x):
        """``x (B, C, h, w)`` (my tile) or ``(B, F)`` -> ``y`` of the same shape (after the
        activation, if any)."""
        z = self._normalise(x)
        if self.activation is None:
            return z
        self._z, self._y = z, self.activation.fprop(z)
        return self._y

    def _normalise(self, x):
        """The affine-normalised ``x``. Training: the global batch statistics (one Allreduce);
        evaluation: the running ones."""
        xp = self.xp
        self._train = self.run.training
        if not self._train:
            y, self._xhat, self._inv_std = bn_fprop(x, self.running_mean, self.running_var, self.gamma,
                                                    self.beta, self.eps)
            return y
        C = x.shape[1]
        buf = xp.empty(2 * C + 1, dtype="float64")    # [sum(x - K) | sum((x - K)^2) | count]
        sums = buf[:2 * C].reshape(2, C)
        # shifted by the running mean, which bn_train_statistics reads before it updates it
        bn_stats_partial(x, self.running_mean, out=sums)
        buf[2 * C] = local_count(x)
        allreduce_sum([buf], self._comm, self._host_staging)
        if self._comm.Get_size() == 1:      # my values are all the values: known on the host
            count = float(local_count(x))
        else:   # the Allreduced count stays on the device: float() of it would wait every step
            count = buf[2 * C]
        self._count = count
        mean, self._inv_std = bn_train_statistics(sums, count, self.running_mean, self.running_var,
                                                  x.dtype, self.eps, self.momentum)
        y, self._xhat = bn_normalize(x, mean, self._inv_std, self.gamma, self.beta)
        return y

    def bprop(self, delta, need_input_grad=True):
        """``delta`` like ``y`` -> ``dx`` (or None); sets the complete ``gamma``/``beta``
        gradients (training: one Allreduce of the per-channel sums; after an evaluation-mode
        forward, the gradient of the fixed affine map and this rank's partial sums)."""
        if self.activation is not None:
            delta = self.activation.bprop(self._z, self._y, delta)
        gg, gb = (p.grad for p in self._params)
        sums = bn_bprop_partial(delta, self._xhat)
        if not self._train:     # fixed statistics: a per-channel affine map; my rows' sums
            bn_set_param_grads(sums, gg, gb)
            return bn_bprop_dx_inference(delta, self.gamma, self._inv_std) if need_input_grad else None
        allreduce_sum([sums], self._comm, self._host_staging)
        bn_set_param_grads(sums, gg, gb)
        if not need_input_grad:
            return None
        return bn_bprop_dx(delta, self._xhat, self.gamma, self._inv_std, sums, self._count)

    def describe(self):
        act = f"  activation={self.activation.name}" if self.activation is not None else ""
        return f"{super().describe()}  eps={self.eps:g} momentum={self.momentum:g}{act}"


def _work_arrays(out):
    """What a training step holds beyond the output and pre-activation, for ``out`` elements
    per sample (:func:`~distnet.ops.batchnorm.bn_normalize`'s arrays): ``xhat`` kept for the
    backward pass; in the forward the new ``xhat``, pre-activation and activation, made while
    the last step's are still held; in the backward one more array of the output's size (the
    activation's gradient)."""
    return (WorkArray("xhat", out), WorkArray("new outputs", 3 * out, kept=False, phase="forward"),
            WorkArray("dz", out, kept=False))

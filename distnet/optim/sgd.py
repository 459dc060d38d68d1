"""Stochastic gradient descent with momentum (neon's form), weight decay, and the momentum
schedules of neon's YAML.

Update (every layer with weights, a distnet change: neon v0.4 applied momentum only in
``Layer``): ``v <- mu(e) * v - lr * G``; then ``W <- W + v`` (classical momentum) or
``W <- W + mu(e) * v - lr * G`` (nesterov). With ``mu = 0`` both are plain ``W <- W - lr * G``.
With a constant ``lr`` this is exactly ``torch.optim.SGD`` (``b <- mu b + g``, ``w <- w - lr b``;
``v = -lr b``); when ``lr`` changes between steps neon's form keeps the old velocity's scale (no
``lr`` rescaling of momentum).

Weight decay, two kinds (both with the ``weight_decay`` coefficient ``lambda``; Adam takes the
same two, :mod:`distnet.optim.adam`):

* **L2** (``decoupled=False``, the default, as in ``torch.optim.SGD`` / ``torch.optim.Adam``):
  ``g <- g + lambda * w`` before the step, i.e. the gradient of ``lambda/2 |w|^2`` is added to
  the loss gradient;
* **decoupled** (``decoupled=True``, as ``torch.optim.AdamW`` and Loshchilov & Hutter's SGDW):
  ``w <- w * (1 - lr * lambda)`` before the step, independent of the gradient.

For plain SGD with a constant learning rate the two are the same update. Every step updates
``w`` in place and uses ``g`` as scratch space (it holds no gradient afterwards): a step
allocates nothing the size of ``w``, except the L2 term when no ``scratch`` array is given.
"""
from ..backend import get_array_module
from ..config.types import MOMENTUM
from ..errors import ConfigError
from ..ops import dispatch
from . import kernels

_TYPES = ("constant", "linear_monotone", "nesterov")
_KEYS = {"type", "coef", "initial_coef", "saturated_coef", "start_epoch", "saturate_epoch"}


class MomentumSchedule:
    """The coefficient ``mu(e)`` for 0-based epoch ``e``.

    * ``constant``: ``coef`` (default 0).
    * ``linear_monotone``: ``initial_coef`` until ``start_epoch``, then a linear ramp reaching
      ``saturated_coef`` at ``saturate_epoch``, then ``saturated_coef`` (both coefs default to
      ``coef``, whose default is 0). This is what the name says; neon v0.4 ran the ramp backwards
      (from ``saturated_coef`` to ``initial_coef``). With neon's example values
      ``{0.99 -> 0.90, epochs 5..5}`` both give 0.90 from epoch 5 on, but distnet gives 0.99 before.
    * ``nesterov``: like ``constant`` but with the Nesterov update (neon raised
      NotImplementedError).

    Every coefficient must be in [0, 1) (neon took any number: at 1 the velocity never decays
    and above 1 it grows every step, so training diverged with no error); epochs are ints >= 0.
    """

    def __init__(self, config=None):
        config = dict(config or {"type": "constant", "coef": 0.0})
        unknown = set(config) - _KEYS
        if unknown:
            raise ConfigError(f"unknown momentum key(s) {sorted(unknown)}; valid: {sorted(_KEYS)}", key="momentum")
        kind = config.get("type")
        if kind not in _TYPES:
            raise ConfigError(f"momentum type must be one of {', '.join(_TYPES)}, got {kind!r}", key="momentum")
        self.kind = kind
        self.nesterov = kind == "nesterov"
        try:
            config = MOMENTUM.coerce(config)
        except ValueError as e:
            raise ConfigError(f"momentum: {e}", key="momentum") from None
        coef = float(config.get("coef", 0.0))
        self.initial = float(config.get("initial_coef", coef))
        self.saturated = float(config.get("saturated_coef", coef))
        self.coef = coef
        self.start = config.get("start_epoch")
        self.end = config.get("saturate_epoch")
        if kind == "linear_monotone" and self.start is not None and self.end is not None and self.end < self.start:
            raise ConfigError("momentum saturate_epoch must be >= start_epoch", key="momentum")

    def __call__(self, epoch):
        if self.kind != "linear_monotone":
            return self.coef
        if self.start is None or epoch < self.start:
            return self.initial
        if self.end is None or epoch >= self.end:
            return self.saturated if self.end is not None else self.initial
        p = (epoch - self.start) / (self.end - self.start)
        return (1 - p) * self.initial + p * self.saturated


@dispatch.op
def sgd_update(w, g, v, lr, mu, nesterov=False):
    """In-place SGD step on ``w`` with gradient ``g`` and velocity ``v`` (all the same shape).

    ``v`` is None while no momentum was ever used (plain SGD needs no velocity buffer). ``g`` is
    used as scratch space and holds no gradient afterwards: the step allocates nothing (a
    ``lr * g`` temporary would be as large as the weights, every step).
    """
    g *= lr                      # g := lr * G
    if v is None:
        w -= g
        return
    v *= mu
    v -= g                       # v := mu * v - lr * G
    if nesterov:
        w -= g
        g[...] = v
        g *= mu
        w += g                   # w += mu * v - lr * G
    else:
        w += v


@sgd_update.kernel
def sgd_update(w, g, v, lr, mu, nesterov=False):
    kernels.sgd_step(w, g, v, lr, mu, nesterov, 0.0, False)     # one launch, the same roundings


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


@dispatch.op
def sgd_step(w, g, v, lr, mu=0.0, nesterov=False, weight_decay=0.0, decoupled=False, scratch=None):
    """One SGD step in place: :func:`sgd_update` after the weight decay (see the module docstring;
    ``weight_decay`` 0: exactly :func:`sgd_update`'s arithmetic, neon's).

    ``v``: velocity shaped like ``w``, or None when no momentum is used (``mu == 0``).
    ``weight_decay``: L2 into the gradient (default) or decoupled (``decoupled=True``).
    """
    if decoupled:
        decay_weights(w, lr, weight_decay)
    else:
        add_l2(g, w, weight_decay, scratch)
    sgd_update(w, g, v, lr, mu, nesterov)


@sgd_step.kernel
def sgd_step(w, g, v, lr, mu=0.0, nesterov=False, weight_decay=0.0, decoupled=False, scratch=None):
    kernels.sgd_step(w, g, v, lr, mu, nesterov, weight_decay, decoupled)    # one launch, the same roundings

"""Learning rules: the YAML objects that say how parameters are updated (kind
``learning_rule``), built on the in-place steps of :mod:`distnet.optim.sgd` and
:mod:`distnet.optim.adam` and the schedules of :mod:`distnet.optim.schedules` (kind ``schedule``).

A rule is stateless itself; the state of a parameter (velocity, Adam moments) lives in a dict of
arrays shaped like that parameter (or its shard: the state is sharded like the parameter), made
by :meth:`LearningRule.init_state` and named by :attr:`LearningRule.state_names` (for
checkpoints). The caller (a model) does, once per optimiser step and for every parameter::

    state = rule.init_state(w)                      # once, at set-up (or from a checkpoint)
    rule.update(w, g, state, step, epoch, lr)       # g is scratch afterwards

with ``step`` the 1-based global count of optimiser steps including this one (restored on
resume: Adam's bias correction and step-based schedules read it), ``epoch`` the 0-based epoch,
``lr`` the layer's own ``learning_rate`` or None for the rule's. The learning rate used is
``lr * prod(schedule factors at t)``, ``t = epoch`` or ``step - 1`` as ``schedule_unit`` says.

Clipping by global norm (``max_grad_norm``) spans all parameters, so the caller applies it
before the updates: ``sq = sum_of_squares(owned gradient shards)``, one Allreduce(SUM) of
``sq`` over the world, ``factor, norm = clip_coefficient(sq, rule.max_grad_norm)``,
``scale(grads, factor)`` (:mod:`distnet.optim.clipping`).
"""
from ..backend import get_array_module
from ..config.types import MOMENTUM, HalfOpenFraction, NonNegative, Positive
from ..errors import ConfigError
from .adam import adam_step
from .schedules import ProductSchedule, Schedule
from .sgd import MomentumSchedule, sgd_step

_UNITS = ("epoch", "step")


class LearningRule:
    """Base class: learning rate, schedules, weight decay, gradient clipping."""

    config_types = {"learning_rate": NonNegative, "schedule": ("list", ("obj", "schedule")), "schedule_unit": str,
                    "weight_decay": NonNegative, "decoupled_weight_decay": bool, "max_grad_norm": Positive}
    #: Names of the per-parameter state arrays (checkpoint keys).
    state_names = ()

    def __init__(self, learning_rate=None, schedule=None, schedule_unit="epoch", weight_decay=0.0,
                 decoupled_weight_decay=False, max_grad_norm=None):
        self.learning_rate = None if learning_rate is None else float(learning_rate)
        schedule = list(schedule or [])
        for s in schedule:
            if not isinstance(s, Schedule):
                raise ConfigError(f"schedule entries must be schedule objects, got {s!r}", key="schedule")
        self.schedule = ProductSchedule(schedule) if schedule else None
        if schedule_unit not in _UNITS:
            raise ConfigError(f"schedule_unit must be one of {', '.join(_UNITS)}, got {schedule_unit!r}",
                              key="schedule_unit")
        self.schedule_unit = schedule_unit
        self.weight_decay = float(weight_decay or 0.0)
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay must be >= 0, got {weight_decay}", key="weight_decay")
        self.decoupled = bool(decoupled_weight_decay)
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ConfigError(f"max_grad_norm must be > 0, got {max_grad_norm}", key="max_grad_norm")
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)

    def rate(self, step, epoch, lr=None):
        """The learning rate of this step: ``lr`` (or the rule's ``learning_rate``) times the
        schedules' factor at ``t`` (``epoch``, or ``step - 1`` with ``schedule_unit: step``)."""
        base = self.learning_rate if lr is None else lr
        if base is None:
            raise ConfigError("no learning_rate: give one to the layer or to the learning rule",
                              key="learning_rate")
        if self.schedule is None:
            return base
        return base * self.schedule(epoch if self.schedule_unit == "epoch" else step - 1)

    def init_state(self, w):
        """Zeroed state arrays shaped like ``w`` (a dict keyed by :attr:`state_names`)."""
        xp = get_array_module(w)
        return {name: xp.zeros_like(w) for name in self.state_names}

    def update(self, w, g, state, step, epoch, lr=None):
        """One in-place step of ``w`` with gradient ``g`` (scratch afterwards)."""
        raise NotImplementedError


class GradientDescent(LearningRule):
    """Stochastic gradient descent with neon's momentum (``v <- mu v - lr g; w <- w + v``, or
    nesterov; equal to ``torch.optim.SGD`` at a constant learning rate). Keys:
    ``learning_rate`` (default: each layer's own), ``momentum`` (neon's schedule mapping, e.g.
    ``{type: constant, coef: 0.9}``; default none), ``weight_decay`` (default 0) added to the
    gradient as L2 (``g + weight_decay * w``, as ``torch.optim.SGD``) unless
    ``decoupled_weight_decay: true`` (``w <- w (1 - lr weight_decay)``), ``schedule`` (a list of
    schedule objects, multiplied), ``schedule_unit`` (``epoch``, default, or ``step``),
    ``max_grad_norm`` (clip the gradients' global norm first; default none)."""

    config_types = {"momentum": MOMENTUM}

    def __init__(self, learning_rate=None, momentum=None, **common):
        super().__init__(learning_rate, **common)
        self.momentum = MomentumSchedule(momentum)

    @property
    def state_names(self):
        uses = self.momentum.kind == "linear_monotone" or self.momentum.coef != 0.0
        return ("velocity",) if uses else ()

    def update(self, w, g, state, step, epoch, lr=None):
        rate = self.rate(step, epoch, lr)
        sgd_step(w, g, state.get("velocity"), rate, self.momentum(epoch), self.momentum.nesterov,
                 self.weight_decay, self.decoupled)


class Adam(LearningRule):
    """Adam (Kingma & Ba; the update of PyTorch's ``torch.optim.Adam`` documentation, with bias
    correction). Keys: ``learning_rate`` (default 0.001), ``beta1`` (0.9), ``beta2`` (0.999),
    ``epsilon`` (1e-8), ``weight_decay`` (default 0: L2 added to the gradient, as
    ``torch.optim.Adam``; ``decoupled_weight_decay: true`` makes it AdamW), ``schedule``,
    ``schedule_unit``, ``max_grad_norm`` as for ``GradientDescent``. State: the moments ``m``
    and ``v`` of every parameter."""

    config_types = {"beta1": HalfOpenFraction, "beta2": HalfOpenFraction, "epsilon": Positive}
    state_names = ("m", "v")

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, **common):
        super().__init__(learning_rate, **common)
        for name, b in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= b < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {b}", key=name)
        if not epsilon > 0:
            raise ConfigError(f"epsilon must be > 0, got {epsilon}", key="epsilon")
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)

    def update(self, w, g, state, step, epoch, lr=None):
        adam_step(w, g, state["m"], state["v"], step, self.rate(step, epoch, lr), self.beta1, self.beta2,
                  self.epsilon, self.weight_decay, self.decoupled)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter; ``torch.optim.AdamW``):
    ``w <- w (1 - lr weight_decay)`` before the Adam step. Keys as ``Adam``; ``weight_decay``
    defaults to 0.01 and ``decoupled_weight_decay`` to true."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01,
                 decoupled_weight_decay=True, **common):
        super().__init__(learning_rate, beta1, beta2, epsilon, weight_decay=weight_decay,
                         decoupled_weight_decay=decoupled_weight_decay, **common)

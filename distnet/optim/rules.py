"""Learning rules: the YAML objects that say how parameters are updated (kind ``learning_rule``:
``GradientDescent``, ``Adam``, ``AdamW``), built on the in-place steps of :mod:`distnet.optim.sgd`
and :mod:`distnet.optim.adam` and the schedules of :mod:`distnet.optim.schedules` (kind
``schedule``). neon's own update (a model without ``learning_rule``: SGD with its momentum
schedules) is one of them: :meth:`GradientDescent.neon`.

A rule is stateless itself; the state of a parameter (velocity, Adam moments) lives with the
parameter, in arrays shaped like it (or its shard: the state is sharded like the parameter),
named by :attr:`LearningRule.state_names` (for checkpoints). For every parameter, once per
optimiser step, the training step (:class:`distnet.layers.step.TrainingStep`) calls::

    rule.apply(p, lr, step, epoch)       # p: a Param; its grad is scratch afterwards

with ``step`` the 1-based global count of optimiser steps including this one (restored on
resume: Adam's bias correction and step-based schedules read it), ``epoch`` the 0-based epoch
(momentum schedules read it) and ``lr`` the parameter's learning rate of this step, resolved by
:class:`distnet.optim.rates.LearningRates` (which reads the rule's ``learning_rate`` and
:meth:`LearningRule.factor` among its sources). :meth:`LearningRule.update` is the same step on
bare arrays.

Clipping by global norm (``max_grad_norm``) spans all parameters, so the training step applies
it before the updates (:mod:`distnet.optim.clipping`).
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

    def factor(self, step, epoch):
        """The schedules' factor of this step (``prod f_i(t)``, ``t = epoch``, or ``step - 1`` with
        ``schedule_unit: step``), or None without schedules."""
        if self.schedule is None:
            return None
        return self.schedule(epoch if self.schedule_unit == "epoch" else step - 1)

    def init_state(self, w):
        """Zeroed state arrays shaped like ``w`` (a dict keyed by :attr:`state_names`)."""
        xp = get_array_module(w)
        return {name: xp.zeros_like(w) for name in self.state_names}

    def state_of(self, p, epoch):
        """The state arrays of parameter ``p`` (a :class:`~distnet.layers.params.Param`): its
        ``state``, made by :meth:`init_state` on the first update (or restored from a checkpoint)."""
        if p.state is None:
            p.state = self.init_state(p.value)
        return p.state

    def apply(self, p, lr, step, epoch):
        """One in-place step of parameter ``p`` (its ``value``, from its ``grad``, which is scratch
        afterwards) at learning rate ``lr`` (see the module docstring)."""
        self.update(p.value, p.grad, self.state_of(p, epoch), step, epoch, lr)

    def update(self, w, g, state, step, epoch, lr):
        """One in-place step of ``w`` with gradient ``g`` (scratch afterwards), ``state`` (a dict
        of :attr:`state_names` arrays) and learning rate ``lr``."""
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
    #: Where the velocity lives (see :meth:`neon`): False, the rule's state (``Param.state``,
    #: zeroed from the first step on; checkpoint key ``state/velocity``).
    neon_velocity = False

    def __init__(self, learning_rate=None, momentum=None, **common):
        super().__init__(learning_rate, **common)
        self.momentum = momentum if isinstance(momentum, MomentumSchedule) else MomentumSchedule(momentum)

    @classmethod
    def neon(cls, momentum=None):
        """neon's update, that of a model without ``learning_rule``: this rule with ``momentum``
        (a :class:`~distnet.optim.sgd.MomentumSchedule`: the model's, or a layer's own; None:
        plain SGD), no weight decay and no schedule (:func:`~distnet.optim.sgd.sgd_step` is then
        :func:`~distnet.optim.sgd.sgd_update`'s arithmetic), and neon's velocity: made at the
        first step whose momentum is not 0 (the steps before it keep none, so they leave no
        trace in it) and held in ``Param.velocity`` (checkpoint key ``velocity``)."""
        rule = cls(momentum=momentum)
        rule.neon_velocity = True
        return rule

    @property
    def state_names(self):
        uses = self.momentum.kind == "linear_monotone" or self.momentum.coef != 0.0
        return ("velocity",) if uses else ()

    def state_of(self, p, epoch):
        if not self.neon_velocity:
            return super().state_of(p, epoch)
        if p.velocity is None and self.momentum(epoch) != 0.0:
            p.velocity = get_array_module(p.value).zeros_like(p.value)
        return {} if p.velocity is None else {"velocity": p.velocity}

    def update(self, w, g, state, step, epoch, lr):
        sgd_step(w, g, state.get("velocity"), lr, self.momentum(epoch), self.momentum.nesterov,
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

    def update(self, w, g, state, step, epoch, lr):
        adam_step(w, g, state["m"], state["v"], step, lr, self.beta1, self.beta2, self.epsilon,
                  self.weight_decay, self.decoupled)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter; ``torch.optim.AdamW``):
    ``w <- w (1 - lr weight_decay)`` before the Adam step. Keys as ``Adam``; ``weight_decay``
    defaults to 0.01 and ``decoupled_weight_decay`` to true."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01,
                 decoupled_weight_decay=True, **common):
        super().__init__(learning_rate, beta1, beta2, epsilon, weight_decay=weight_decay,
                         decoupled_weight_decay=decoupled_weight_decay, **common)

"""Learning-rate schedules: a factor ``f(t)`` of a base learning rate, composable by product.

``t`` is a 0-based counter (optimiser steps or epochs: the caller decides and says which); the
learning rate at ``t`` is ``base_lr * f(t)``. Schedules compose by multiplication
(``LinearWarmup(5) * CosineSchedule(95, start=5)``: a 5-step linear warm-up, then cosine decay
over the next 95), or with :class:`ProductSchedule`. Each is a pure function of ``t`` (no hidden
state), so a resumed run continues exactly and every rank computes the same number. The classes
are also YAML objects (kind ``schedule``, see :mod:`distnet.optim.rules`).

Closed forms, matching PyTorch's schedulers where they exist (``torch.optim.lr_scheduler``):

* :class:`ConstantSchedule` ``(factor)``: ``factor``.
* :class:`StepSchedule` ``(step_size, gamma)``: ``gamma ** (t // step_size)`` (``StepLR``).
* :class:`MultiStepSchedule` ``(milestones, gamma)``: ``gamma ** (number of milestones <= t)``
  (``MultiStepLR``).
* :class:`CosineSchedule` ``(total, min_factor=0, start=0)``: 1 before ``start``, then
  ``min + (1 - min) * (1 + cos(pi * s / total)) / 2`` with ``s = min(t - start, total)``
  (``CosineAnnealingLR`` with ``eta_min = min_factor * base_lr`` for ``s <= total``; distnet
  stays at ``min`` afterwards instead of rising again).
* :class:`LinearWarmup` ``(warmup, start_factor=0)``: ``start + (1 - start) * min(t, warmup) /
  warmup`` (``LinearLR(start_factor, end_factor=1, total_iters=warmup)``; ``start_factor=0``
  gives a zero first step, as PyTorch does with 0).
"""
import math

from ..config.types import NonNegativeInt
from ..errors import ConfigError


class Schedule:
    """A learning-rate factor ``f(t)``; ``a * b`` is their product."""

    def __call__(self, t):
        raise NotImplementedError

    def changes(self):
        """``(first, last)``: the first ``t`` at which the factor differs from ``f(0)``'s
        course (a step, a milestone, the first decayed value) and the last at which it still
        changes (None: never, ``math.inf``: forever). What a run that ends before them never
        sees (:func:`unreached`)."""
        return None, None

    def lr(self, base_lr, t):
        """``base_lr * f(t)``."""
        return base_lr * self(t)

    def __mul__(self, other):
        if not isinstance(other, Schedule):
            return NotImplemented
        return ProductSchedule([self, other])


def _positive(name, value, kind=int):
    try:
        v = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"schedule {name} must be a number, got {value!r}", key=name) from None
    if v <= 0:
        raise ConfigError(f"schedule {name} must be > 0, got {value!r}", key=name)
    return v


def _factor(name, value, lo=0.0, hi=None):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"schedule {name} must be a number, got {value!r}", key=name) from None
    if v < lo or (hi is not None and v > hi):
        raise ConfigError(f"schedule {name} must be in [{lo}, {f'{hi}]' if hi is not None else 'inf)'}, got {v}",
                          key=name)
    return v


class ConstantSchedule(Schedule):
    """Learning-rate factor ``f(t) = factor`` (default 1) at every ``t``."""

    config_types = {"factor": float}

    def __init__(self, factor=1.0):
        self.factor = _factor("factor", factor)

    def __call__(self, t):
        return self.factor


class StepSchedule(Schedule):
    """Learning-rate factor ``f(t) = gamma ** (t // step_size)``: multiplied by ``gamma``
    (default 0.1) every ``step_size`` units of ``t`` (PyTorch's ``StepLR``)."""

    config_types = {"step_size": int, "gamma": float}

    def __init__(self, step_size, gamma=0.1):
        self.step_size = _positive("step_size", step_size)
        self.gamma = _factor("gamma", gamma)

    def __call__(self, t):
        return self.gamma ** (t // self.step_size)

    def changes(self):
        return self.step_size, math.inf


class MultiStepSchedule(Schedule):
    """Learning-rate factor ``f(t) = gamma ** (number of milestones <= t)``: multiplied by
    ``gamma`` (default 0.1) at each of the ``milestones`` (increasing integers >= 0; PyTorch's
    ``MultiStepLR``)."""

    config_types = {"milestones": ("list", NonNegativeInt), "gamma": float}

    def __init__(self, milestones, gamma=0.1):
        ok = isinstance(milestones, (list, tuple)) and all(
            isinstance(m, int) and not isinstance(m, bool) and m >= 0 for m in milestones)
        if not ok:     # 2.5 was cut to 2, "30" read as 30, -5 counted from the first step
            raise ConfigError(f"schedule milestones must be a list of integers >= 0, got {milestones!r}",
                              key="milestones")
        if any(a >= b for a, b in zip(milestones, milestones[1:])):
            raise ConfigError(f"schedule milestones must be increasing, got {list(milestones)} (a typo? "
                              f"{sorted(set(milestones))} sorted)", key="milestones")
        self.milestones = list(milestones)
        self.gamma = _factor("gamma", gamma)

    def __call__(self, t):
        return self.gamma ** sum(1 for m in self.milestones if m <= t)

    def changes(self):
        return (self.milestones[0], self.milestones[-1]) if self.milestones else (None, None)


class CosineSchedule(Schedule):
    """Cosine decay of the learning-rate factor from 1 to ``min_factor`` (default 0) over
    ``total`` units of ``t`` beginning at ``start`` (default 0; the factor is 1 before it and
    ``min_factor`` after ``start + total``): ``min + (1 - min) (1 + cos(pi s / total)) / 2``,
    ``s = t - start`` (PyTorch's ``CosineAnnealingLR`` with ``eta_min = min_factor * lr``)."""

    config_types = {"total": int, "min_factor": float, "start": int}

    def __init__(self, total, min_factor=0.0, start=0):
        self.total = _positive("total", total)
        self.min_factor = _factor("min_factor", min_factor, 0.0, 1.0)
        self.start = int(start)
        if self.start < 0:
            raise ConfigError(f"schedule start must be >= 0, got {start!r}", key="start")

    def __call__(self, t):
        if t < self.start:
            return 1.0
        s = min(t - self.start, self.total)
        return self.min_factor + (1.0 - self.min_factor) * (1.0 + math.cos(math.pi * s / self.total)) / 2.0

    def changes(self):
        # a run of ``total`` units after ``start`` has the whole decay (PyTorch's T_max = epochs
        # idiom: the last epoch runs at t = total - 1, just above min_factor)
        return self.start + 1, self.start + self.total - 1


class LinearWarmup(Schedule):
    """Linear warm-up of the learning-rate factor from ``start_factor`` (default 0) at ``t = 0``
    to 1 at ``t = warmup``, then 1 (PyTorch's ``LinearLR(start_factor, 1.0, warmup)``)."""

    config_types = {"warmup": int, "start_factor": float}

    def __init__(self, warmup, start_factor=0.0):
        self.warmup = _positive("warmup", warmup)
        self.start_factor = _factor("start_factor", start_factor, 0.0, 1.0)

    def __call__(self, t):
        p = min(t, self.warmup) / self.warmup
        return self.start_factor + (1.0 - self.start_factor) * p

    def changes(self):
        return 1, self.warmup


class ProductSchedule(Schedule):
    """The product ``f(t) = prod_i f_i(t)`` of ``schedules`` (what ``a * b`` builds, and what a
    learning rule's list of schedules means)."""

    def __init__(self, schedules):
        self.schedules = []
        for s in schedules:
            self.schedules.extend(s.schedules if isinstance(s, ProductSchedule) else [s])

    def __call__(self, t):
        f = 1.0
        for s in self.schedules:
            f *= s(t)
        return f


def unreached(schedule, last_t):
    """What a run whose last ``t`` is ``last_t`` misses of ``schedule`` (one schedule, not a
    product): a sentence (it never acts, or stops short of its end by more than 5 % of its
    course: a cosine a step short is complete enough), or None."""
    first, last = schedule.changes()
    name = type(schedule).__name__
    if first is not None and first > last_t:
        f0 = schedule(0)
        zero = " (a learning rate of 0: nothing trains)" if f0 == 0 else ""
        return (f"{name} first changes the learning rate at t = {first}, after the run's last t = {last_t}: "
                f"its factor is {f0:.3g} throughout{zero}")
    if last is not None and last != math.inf and last > last_t:
        end, now = schedule(last), schedule(last_t)
        if abs(now - end) > 0.05 * abs(schedule(0) - end):
            return (f"{name} changes the learning rate until t = {last}, after the run's last t = {last_t}: "
                    f"it stops at factor {now:.3g} (its end: {end:.3g})")
    return None


#: A learning-rate factor below this is no learning rate (a step decay meant per epoch, run per step).
NEGLIGIBLE = 1e-6


def vanishes(schedule, last_t):
    """A sentence when the step decays of ``schedule`` (StepSchedule, MultiStepSchedule) bring
    its factor below :data:`NEGLIGIBLE` before the run's last ``t`` (``last_t``): the rest of
    the run trains at no learning rate. None otherwise (and for other schedules: a cosine that
    ends at 0 is meant to)."""
    gamma = schedule.gamma if isinstance(schedule, (StepSchedule, MultiStepSchedule)) else 1.0
    if gamma >= 1.0:
        return None
    k = 1 if gamma == 0 else int(math.log(NEGLIGIBLE) / math.log(gamma)) + 1   # decays to go below
    while k > 1 and gamma ** (k - 1) < NEGLIGIBLE:
        k -= 1
    if isinstance(schedule, StepSchedule):
        small, decays = k * schedule.step_size, last_t // schedule.step_size
    else:
        small = schedule.milestones[k - 1] if k <= len(schedule.milestones) else math.inf
        decays = sum(1 for m in schedule.milestones if m <= last_t)
    if small > last_t:
        return None
    return (f"{type(schedule).__name__} brings the learning-rate factor to {schedule(small):.3g} at t = {small} "
            f"and {schedule(last_t):.3g} by the run's last t = {last_t} ({decays} decay(s) by {gamma:g})")

"""Each parameter's learning rate, resolved here and nowhere else.

The parameters of a layer share one rate. Its base is the first of these sources that is given:

1. the rate of the training phase, for a phase that has one of its own: a LocalFilteringLayer's
   ``pretrain_learning_rate`` while GB pretrains it, a DBN's ``finetune_learning_rate`` while it
   fine-tunes;
2. the layer's ``learning_rate`` (neon's later per-layer ``learning_rule: {lr_params:
   {learning_rate}}`` is translated into it, :mod:`distnet.config.neon_compat`);
3. the learning rule's ``learning_rate`` (a rule's default counts: Adam's 0.001);
4. the model's ``learning_rate``.

The rate of one optimiser step is that base times the learning rule's schedule factor at that
step (:meth:`~distnet.optim.rules.LearningRule.factor`; neon's update has no schedule). neon's
momentum schedules (the model's ``momentum``, a layer's ``momentum_params``) are not rates: they
are the momentum of neon's update (:meth:`~distnet.optim.rules.GradientDescent.neon`).

Who asks: the training step, for every update (:class:`~distnet.optim.optimizer.Optimizer`);
TensorBoard's ``learning_rate/<layer>`` of every epoch and ``distnet show`` (both through the
model's ``learning_rates`` / ``describe_learning_rates``); the warnings about a rate that no
layer uses (:mod:`distnet.models.notes`, from :meth:`LearningRates.source`).
"""


class LearningRates:
    """The learning rates of one training phase (see the module docstring).

    model_rate : the model's ``learning_rate`` (or None); rule : the learning rule (None: neon's
    update, no schedule); phase_rate : the phase's own rate (None: the phase has none) and
    phase : the key that gave it (``pretrain_learning_rate``, ``finetune_learning_rate``).
    A layer is anything with ``name`` and ``learning_rate`` (and ``error``, for
    :meth:`base`'s refusal).
    """

    def __init__(self, model_rate=None, rule=None, phase_rate=None, phase=None):
        self.model_rate, self.rule = model_rate, rule
        self.phase_rate, self.phase = phase_rate, phase

    def source(self, layer):
        """``(base rate, source)`` of ``layer``: the first source given, named ``"phase"``,
        ``"layer"``, ``"rule"`` or ``"model"``; ``(None, None)`` when none is."""
        if self.phase_rate is not None:
            return self.phase_rate, "phase"
        if layer.learning_rate is not None:
            return layer.learning_rate, "layer"
        if self.rule is not None and self.rule.learning_rate is not None:
            return self.rule.learning_rate, "rule"
        if self.model_rate is not None:
            return self.model_rate, "model"
        return None, None

    def base(self, layer):
        """``layer``'s base rate; a ConfigError at the layer's YAML when no source gives one."""
        rate, _ = self.source(layer)
        if rate is None:
            raise layer.error("has no learning_rate and the model gives no default", "learning_rate")
        return rate

    def check(self, layers):
        """Refuse the first of ``layers`` (those with weights) that has no rate (:meth:`base`)."""
        for layer in layers:
            self.base(layer)

    @property
    def counts_steps(self):
        """True when the rate changes from step to step (a schedule with ``schedule_unit: step``),
        not only from epoch to epoch."""
        return self.rule is not None and self.rule.schedule is not None and self.rule.schedule_unit == "step"

    def __call__(self, layer, step, epoch):
        """The rate of ``layer``'s parameters at optimiser step ``step`` (1-based) of ``epoch``
        (0-based)."""
        base = self.base(layer)
        factor = None if self.rule is None else self.rule.factor(step, epoch)
        return base if factor is None else base * factor

    def describe(self, layers):
        """One line for ``distnet show``: each base rate, where it comes from and the layers (of
        ``layers``, those with weights) it applies to; then the schedule, if any."""
        groups = {}
        for layer in layers:
            groups.setdefault(self.source(layer), []).append(layer.name)
        parts = [f"{'none' if rate is None else f'{rate:g}'} ({self._origin(source, names)}): {', '.join(names)}"
                 for (rate, source), names in groups.items()]
        text = "; ".join(parts) or "no layer with weights"
        if self.rule is not None and self.rule.schedule is not None:
            kinds = " x ".join(type(s).__name__ for s in self.rule.schedule.schedules)
            text += f"; times the factor of {kinds} per {self.rule.schedule_unit}"
        return text

    def _origin(self, source, names):
        own = "its own learning_rate" if len(names) == 1 else "their own learning_rate"
        return {"phase": self.phase, "layer": own, "model": "the model's learning_rate", None: "no source",
                "rule": f"the learning rule {type(self.rule).__name__}'s learning_rate"}[source]

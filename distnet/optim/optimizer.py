"""What updates a model's parameters in one training phase: a learning rule per layer and the
learning rates of :class:`~distnet.optim.rates.LearningRates`.

Every way distnet trains updates through one :class:`Optimizer` (the training step,
:class:`distnet.layers.step.TrainingStep`, calls :meth:`Optimizer.update` for every parameter
after the gradient sums and the clipping). What differs between them is data, as tinygrad's SGD
is its LARS with ``tcoef=0``: neon's SGD with momentum is :meth:`GradientDescent.neon
<distnet.optim.rules.GradientDescent.neon>` (a layer with neon's per-layer momentum gets a rule
of its own), GB's pretraining and the RBM's contrastive divergence are plain SGD (:meth:`plain`)
at their own rates, a model's ``learning_rule`` is every layer's rule.
"""
from .rules import GradientDescent
from .sgd import MomentumSchedule


class Optimizer:
    """``rule``: every layer's learning rule, except the layers that ``own`` maps (by ``id``) to a
    rule of their own; ``rates``: their :class:`~distnet.optim.rates.LearningRates`."""

    def __init__(self, rule, rates, own=None):
        self.rule, self.rates = rule, rates
        self._own = dict(own or {})
        #: epoch -> the last optimiser step taken in it (the step a per-epoch rate is read at).
        self._last_step = {}

    @classmethod
    def neon(cls, rates, momentum=None, layers=()):
        """neon's update (a model without ``learning_rule``): SGD with the momentum schedule
        ``momentum`` (a :class:`~distnet.optim.sgd.MomentumSchedule`; None: none), or a layer's
        own (``momentum_params``, neon's per-layer learning rule) for the ``layers`` that give one."""
        own = {id(layer): GradientDescent.neon(MomentumSchedule(layer.momentum_params)) for layer in layers
               if layer.momentum_params is not None}
        return cls(GradientDescent.neon(momentum), rates, own)

    @classmethod
    def plain(cls, rates):
        """Plain SGD (no momentum, no weight decay) at ``rates``: GB's pretraining, the RBM's
        contrastive divergence."""
        return cls(GradientDescent.neon(), rates)

    @property
    def max_grad_norm(self):
        """Clip the gradients' global norm to this first (None: no clipping)."""
        return self.rule.max_grad_norm

    def rule_of(self, layer):
        """The learning rule of ``layer``'s parameters."""
        return self._own.get(id(layer), self.rule)

    @property
    def state_names(self):
        """Names of the arrays the rules keep per parameter beside its value and gradient
        (``("m", "v")`` for Adam, ``("velocity",)`` with momentum, ``()`` for plain SGD)."""
        names = []
        for rule in [self.rule, *self._own.values()]:
            names += [n for n in rule.state_names if n not in names]
        return tuple(names)

    def update(self, layer, p, step, epoch):
        """One in-place step of ``layer``'s parameter ``p`` (a :class:`~distnet.layers.params.Param`,
        its gradient summed: scratch afterwards) at optimiser step ``step`` (1-based) of ``epoch``."""
        self._last_step[epoch] = step
        self.rule_of(layer).apply(p, self.rates(layer, step, epoch), step, epoch)

    def learning_rates(self, layers, epoch):
        """``{layer name: rate}`` of ``layers`` in ``epoch``: for a rate that changes every step,
        the rate of the epoch's last step, and no entry when this process did not train the
        epoch (it was replayed from a checkpoint: which step ended it is not known here)."""
        step = self._last_step.get(epoch)
        if step is None and self.rates.counts_steps:
            return {}
        return {layer.name: float(self.rates(layer, step or 1, epoch)) for layer in layers}

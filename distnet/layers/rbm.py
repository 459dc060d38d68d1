"""neon's ``RBMLayer``: the weights of a binary restricted Boltzmann machine, trained by
contrastive divergence (:mod:`distnet.ops.rbm`), on data replicas.

The layer is a :class:`~distnet.layers.fc.FullyConnectedLayer` (``W (nout, nfeat)`` and the
column of neon's constant visible unit ``b (nout,)``; ``nin`` counts that unit, as in neon),
so it runs forward like one (``f(x W^T + b)``: the hidden probabilities). Its weights are
replicated; a data replica computes the CD statistics of its rows of the global minibatch as the
gradients of its parameters (:meth:`RBMLayer.cd_gradients`), which the training step sums with
one Allreduce over ``Topology.data`` (the parameters' ``reduce_over``) before its update, so D
replicas update exactly as one process (up to the order of the sum).
"""
from ..config.types import PositiveInt
from ..ops import rbm as cd
from .fc import FullyConnectedLayer


class RBMLayer(FullyConnectedLayer):
    """Keys: ``FullyConnectedLayer``'s (neon's ``Layer``: ``nin`` with +1 for the constant
    visible unit, ``nout``, ``activation`` (neon's files: Logistic), ``weight_init``,
    ``learning_rate``) and ``cd_steps`` (k of CD-k, a distnet addition; default 1, neon's CD-1).
    neon's ``nout`` comment "+1 for bias" names no constant hidden unit: every hidden unit is
    an ordinary one."""

    config_types = dict(FullyConnectedLayer.config_types, cd_steps=PositiveInt)

    def __init__(self, nout, weight_init, cd_steps=1, **keys):
        super().__init__(nout, weight_init, **keys)
        if cd_steps < 1:
            raise ValueError(f"cd_steps must be >= 1, got {cd_steps}")
        self.cd_steps = cd_steps

    #: Hidden units passed on by a forward (a DBN's lower machines drop their last, as neon's DBN
    #: did); None: all ``nout``.
    passes = None

    def infer_shape(self, in_shape):
        super().infer_shape(in_shape)
        if self.passes is not None:
            self.out_shape = (self.passes,)
        return self.out_shape

    def fprop(self, x):
        """The hidden probabilities ``(B, nout)`` (``(B, passes)`` when it passes fewer on); the
        FC forward, for a DBN's fine-tuning."""
        y = super().fprop(x)
        return y if self.passes is None else y[:, :self.passes]

    def bprop(self, delta, need_input_grad=True):
        """The FC backward; the units not passed on get a zero gradient."""
        if self.passes is not None:
            full = self.xp.zeros((len(delta), self.nout), dtype=delta.dtype)
            full[:, :self.passes] = delta
            delta = full
        return super().bprop(delta, need_input_grad)

    def hidden_probabilities(self, x):
        """``p(h = 1 | x) (B, nout)`` of ``x (B, nfeat)``."""
        return cd.hidden_probabilities(x, self.xp.ones(len(x), dtype=x.dtype), self.W, self.b, self.activation)

    def reconstruct(self, h):
        """The visible probabilities ``(B, nfeat)`` of hidden values ``h (B, nout)``."""
        return cd.visible_probabilities(h, self.W, self.b, self.activation)[0]

    def cd_gradients(self, x, u):
        """The CD-k statistics of this replica's rows ``x (b, nfeat)`` of a global minibatch, with
        their uniforms ``u (cd_steps, b, nout)``, as the gradients of ``W`` and ``b``: the
        statistics negated, so that the training step's SGD ``W - lr * (-dW)`` is neon's
        ``W + lr * dW``, bit for bit (negation is exact). No communication. Returns
        ``(reconstruction cost of these rows, first hidden sample (b, nout))``."""
        dW, db, x_minus, s_plus = cd.cd_statistics(x, self.W, self.b, u, self.activation)
        gW, gb = (p.grad for p in self._params)
        self.xp.negative(dW, out=gW)
        self.xp.negative(db, out=gb)
        return cd.reconstruction_cost(x, x_minus), s_plus

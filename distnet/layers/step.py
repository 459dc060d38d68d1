"""The one training step: forward -> cost -> backward -> gradient sums -> update.

Every way distnet trains goes through :class:`TrainingStep`: a plain model
(:meth:`MLP.train_step <distnet.models.mlp.MLP.train_step>` with :func:`forward_backward`), the
pipeline schedule (its micro-batched forward/backward, built from :func:`forward`,
:func:`cost_delta` and :func:`backward`), GB's supervised phase (MLP's step) and LocalFiltering
pretraining (the sparse autoencoder's forward/backward). What differs is only the
forward/backward callable; the gradient sums and the update are the same code.

Gradient sums: one flat Allreduce per (communicator, dtype) bucket, the communicator being each
parameter's :attr:`~distnet.layers.placement.ParamPlacement.reduce_over` (``grad``: spatial x
data ranks; ``data``: data replicas); communicators of one rank are skipped.
"""
from ..comm.reduce import allreduce_sum
from ..ops.sgd import sgd_update


def forward(layers, x):
    """``x`` through ``layers`` in order; returns the last output."""
    for layer in layers:
        x = layer.fprop(x)
    return x


def cost_delta(cost, y, t, batch_size):
    """``(loss, delta)``: the summed loss of the rows of ``y`` (a ``(1,)`` float64 array left on
    the device) and the cost gradient divided by the global ``batch_size``."""
    return cost.loss_sum(y, t).reshape(1), cost.grad(y, t) / batch_size


def backward(layers, delta, lowest=0, start=0, stop=None):
    """Backpropagate ``delta`` through ``layers[start:stop]`` from the top down to layer
    ``lowest`` (the layers below it neither learn nor need a gradient); each layer's
    ``bprop`` fills its parameters' gradients. Returns the gradient below ``max(start, lowest)``
    (None when ``start <= lowest``: nothing below needs it)."""
    stop = len(layers) if stop is None else stop
    for i in range(stop - 1, max(start, lowest) - 1, -1):
        delta = layers[i].bprop(delta, need_input_grad=i > lowest)
    return delta


def forward_backward(layers, cost, x, t, batch_size, lowest=0):
    """Forward, cost and backward of a chain of layers on ``x`` with targets ``t``; returns the
    summed loss (``(1,)`` float64 on the device)."""
    loss, delta = cost_delta(cost, forward(layers, x), t, batch_size)
    backward(layers, delta, lowest)
    return loss


class TrainingStep:
    """Gradient sums and update around a forward/backward callable (module docstring).

    topology : the run's :class:`~distnet.comm.topology.Topology`; host_staging : stage device
    buffers through host memory for MPI (``Backend.host_staging``).
    """

    def __init__(self, topology, host_staging=False):
        self.topology = topology
        self.host_staging = host_staging

    def reduce(self, params, extra=()):
        """Sum the gradients of ``params`` (``[(layer, Param)]``): one flat Allreduce per bucket.

        ``extra`` arrays ride along in the ``data`` bucket of their dtype (the float64 batch
        loss: in a float64 run it shares the parameters' Allreduce; in a float32 run it is one
        more small Allreduce over ``Topology.data``, never cast to float32). Collective over
        every communicator that has a bucket and more than one rank.
        """
        buckets = {}  # (communicator name, dtype) -> arrays: one Allreduce each
        for a in extra:
            buckets.setdefault(("data", a.dtype.str), []).append(a)
        for _, p in params:
            buckets.setdefault((p.reduce_over, p.grad.dtype.str), []).append(p.grad)
        for (over, _), arrays in buckets.items():
            comm = self.topology.comm(over)
            if arrays and comm.Get_size() > 1:
                allreduce_sum(arrays, comm, self.host_staging, kind="allreduce_grad")

    @staticmethod
    def update(params, momentum=None, xp=None):
        """SGD step on ``params`` (``[(layer, Param)]``, a layer's parameters next to each
        other), each with its layer's ``learning_rate`` and the momentum ``momentum(layer) ->
        (mu, nesterov)`` (None: plain SGD); after a layer's last parameter, its
        ``after_update`` hook (LocalFiltering renormalises its filters there; with tied
        pretraining weights the decoder's and the encoder's renormalisations must each follow
        their own update)."""
        for k, (layer, p) in enumerate(params):
            mu, nesterov = momentum(layer) if momentum is not None else (0.0, False)
            if mu != 0.0 and p.velocity is None:
                p.velocity = xp.zeros_like(p.value)
            sgd_update(p.value, p.grad, p.velocity, layer.learning_rate, mu, nesterov)
            if k + 1 == len(params) or params[k + 1][0] is not layer:
                layer.after_update()

    def __call__(self, run, params, momentum=None, xp=None, reduce_outputs=True):
        """One step: ``run()`` (forward, cost, backward: fills the gradients of ``params``,
        returns a list of loss arrays), the gradient sums (with the losses summed over the
        data replicas when ``reduce_outputs``), the update. Returns ``run()``'s list."""
        outputs = run()
        self.reduce(params, extra=outputs if reduce_outputs else ())
        self.update(params, momentum, xp)
        return outputs

"""The one training step: forward -> cost -> backward -> gradient sums -> update.

Every way distnet trains goes through :class:`TrainingStep`: a plain model
(:meth:`Model.train_step <distnet.models.model.Model.train_step>` with :func:`forward_backward`), the
pipeline schedule (its micro-batched forward/backward, built from :func:`forward`,
:func:`cost_delta` and :func:`backward`), GB's supervised phase (MLP's step) and LocalFiltering
pretraining (the sparse autoencoder's forward/backward). What differs is only the
forward/backward callable; the gradient sums and the update are the same code.

Gradient sums: :class:`GradientBuckets`, one flat Allreduce per bucket of (communicator, dtype),
the communicator being each parameter's :attr:`~distnet.layers.placement.ParamPlacement.reduce_over`
(``grad``: spatial x data ranks; ``data``: data replicas); communicators of one rank are skipped,
and so are parameters whose gradient the layer already made global (``reduce_over`` None: batch
norm). A forward/backward that reports each layer whose gradients are final (its
``after_layer`` hook) gets them summed during the backward, in buckets of
:func:`~distnet.comm.overlap.bucket_bytes` (``DISTNET_OVERLAP``, on by default); whatever was not
reported (all of it when the overlap is off, or for a forward/backward that reports nothing) is
summed after the backward in one bucket per communicator and dtype: the blocking sum is that
bucket size, not another path.

Update: without a learning rule, neon's SGD with momentum (each layer's ``learning_rate``;
:func:`~distnet.optim.sgd.sgd_update`, unchanged bit for bit). With a model's ``learning_rule``
(:mod:`distnet.optim.rules`: GradientDescent with weight decay, Adam, AdamW, schedules),
first the optional clipping by global norm (``max_grad_norm``: every rank adds the squares of
the gradients it owns, a replicated gradient counted on one rank only, ONE Allreduce of that
float64 scalar over the world), then ``rule.update`` per parameter with its state arrays
(``Param.state``, made on the first update, sharded like the parameter).
"""
import numpy as np

from ..backend import get_array_module
from ..comm.buckets import BucketReducer
from ..comm.overlap import bucket_bytes, overlap_enabled
from ..comm.reduce import allreduce_sum, progress
from ..optim.clipping import clip_coefficient, scale, sum_of_squares
from ..optim.sgd import sgd_update


def forward(layers, x):
    """``x`` through ``layers`` in order; returns the last output."""
    for layer in layers:
        x = layer.fprop(x)
    return x


def cost_delta(cost, y, t, batch_size):
    """``(loss, delta)``: the summed loss of the rows of ``y`` (a ``(1,)`` float64 array left on
    the device) and the cost gradient divided by the global ``batch_size``."""
    return cost.loss_sum(y, t).reshape(1), cost.grad(y, t) / batch_size


def backward(layers, delta, lowest=0, start=0, stop=None, after_layer=None):
    """Backpropagate ``delta`` through ``layers[start:stop]`` from the top down to layer
    ``lowest`` (the layers below it neither learn nor need a gradient); each layer's
    ``bprop`` fills its parameters' gradients, then ``after_layer(layer)`` runs (if given: the
    layer's gradients are final, :class:`GradientBuckets` starts their sum). Returns the
    gradient below ``max(start, lowest)`` (None when ``start <= lowest``: nothing below needs it)."""
    stop = len(layers) if stop is None else stop
    for i in range(stop - 1, max(start, lowest) - 1, -1):
        delta = layers[i].bprop(delta, need_input_grad=i > lowest)
        if after_layer is not None:
            after_layer(layers[i])
    return delta


def forward_backward(layers, cost, x, t, batch_size, lowest=0, after_layer=None):
    """Forward, cost and backward of a chain of layers on ``x`` with targets ``t``; returns the
    summed loss (``(1,)`` float64 on the device). ``after_layer``: as in :func:`backward`."""
    loss, delta = cost_delta(cost, forward(layers, x), t, batch_size)
    backward(layers, delta, lowest, after_layer=after_layer)
    return loss


class GradientBuckets:
    """The gradient sums of one step: the gradients (``Param.grad``) of the trained ``params``
    (``[(layer, Param)]``, grouped by ``reduce_over`` in parameter order) in a
    :class:`~distnet.comm.buckets.BucketReducer`, one bucket per communicator and dtype.

    Called with a layer once its backward is done (the ``after_layer`` hook of
    :func:`backward`), it adds that layer's gradients; a bucket that reaches ``bucket_bytes``
    starts its nonblocking Allreduce then (each call also lets MPI progress the sums in flight:
    MPICH moves them only inside MPI calls). :meth:`finish` adds what no call added (in
    parameter order), then the ``extra`` arrays (the losses) to the ``data`` bucket of their
    dtype, without starting a bucket early, and waits for every sum: a step whose layers were
    never reported sums everything after the backward, one Allreduce per communicator and dtype.

    Every rank of a communicator backpropagates the same layers in the same order, so it starts
    the same buckets in the same order (MPI matches nonblocking collectives by order). Only which
    arrays share a message depends on when they were added (the sums are per element).
    """

    def __init__(self, topology, params, host_staging=False, bucket_bytes=0):
        self.topology = topology
        self.reducer = BucketReducer(host_staging, bucket_bytes)
        self._left = {}    # id(layer) -> [Param] not added yet, in parameter order
        for layer, p in params:
            if p.reduce_over is not None:   # None: complete already (the layer summed it)
                self._left.setdefault(id(layer), []).append(p)

    def __call__(self, layer):
        """``layer``'s backward is done: its gradients join their buckets."""
        ps = self._left.pop(id(layer), None)
        if ps is None:
            progress()
            return
        self._add(ps, True)

    def _add(self, ps, start_full):
        overs = []
        for p in ps:
            if p.reduce_over not in overs:
                overs.append(p.reduce_over)
        for over in overs:
            self.reducer.add([p.grad for p in ps if p.reduce_over == over], self.topology.comm(over), start_full)

    def finish(self, extra=()):
        """Add the rest (gradients not added yet, then ``extra`` over ``Topology.data``) and wait:
        afterwards every gradient holds its sum. ``extra`` rides along in the ``data`` bucket of
        its dtype (the float64 batch loss: in a float64 run it shares the parameters' Allreduce;
        in a float32 run it is one more small Allreduce over ``Topology.data``, never cast)."""
        for ps in list(self._left.values()):
            self._add(ps, False)
        self._left = {}
        if extra:
            self.reducer.add(list(extra), self.topology.comm("data"), start_full=False)
        self.reducer.finish()


class TrainingStep:
    """Gradient sums and update around a forward/backward callable (module docstring).

    topology : the run's :class:`~distnet.comm.topology.Topology`; host_staging : stage device
    buffers through host memory for MPI (``Backend.host_staging``).
    """

    def __init__(self, topology, host_staging=False):
        self.topology = topology
        self.host_staging = host_staging

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

    def owned(self, p):
        """True when this rank counts ``p``'s gradient in the global norm: data replica 0 only
        (the replicas hold the same sums), every spatial rank for a sharded parameter (disjoint
        shards), spatial rank 0 for a replicated one; pipeline stages hold different layers
        (a tower network's shared layers: pipe rank 0 only, ``copy_elsewhere``)."""
        t = self.topology
        return t.data_index == 0 and (p.sharded or t.spatial.Get_rank() == 0) and not p.copy_elsewhere

    def global_norm(self, params):
        """The L2 norm of all gradients of the model (``[(layer, Param)]``, already summed):
        per-rank sums of squares of the owned gradients, ONE float64 Allreduce over the world.
        Collective over ``Topology.world``; returns a Python float, the same on every rank."""
        return float(self._global_sum_of_squares(params)[0]) ** 0.5

    def _global_sum_of_squares(self, params):
        """:meth:`global_norm`'s squared norm, a ``(1,)`` float64 array of the gradients' module."""
        grads = [p.grad for _, p in params if self.owned(p)]
        sq = sum_of_squares(grads) if grads else np.zeros((), dtype="float64")
        xp = _xp(params)
        total = xp.zeros(1, dtype="float64")
        total[0] = sq
        allreduce_sum([total], self.topology.world, self.host_staging, kind="allreduce_grad")
        return total

    def clip(self, params, max_norm):
        """Clip the gradients of ``params`` by their global norm (``torch.nn.utils
        .clip_grad_norm_``: factor ``max_norm / (norm + 1e-6)`` when the norm exceeds
        ``max_norm``). Returns the norm before clipping: a Python float, or a 0-d device array
        on a device (the factor is computed and applied there, so the step does not wait)."""
        total = self._global_sum_of_squares(params)
        if get_array_module(total) is np:
            norm = float(total[0]) ** 0.5
        else:
            norm = get_array_module(total).sqrt(total[0])
        factor, _ = clip_coefficient(norm * norm, max_norm)
        scale([p.grad for _, p in params], factor)
        return norm

    @staticmethod
    def apply_rule(params, rule, step, epoch):
        """The learning rule's update of every parameter (``step``: 1-based count of optimiser
        steps including this one; ``epoch`` 0-based), each with its layer's ``learning_rate``
        (None: the rule's), then each layer's ``after_update``."""
        for k, (layer, p) in enumerate(params):
            if p.state is None:
                p.state = rule.init_state(p.value)
            rule.update(p.value, p.grad, p.state, step, epoch, layer.learning_rate)
            if k + 1 == len(params) or params[k + 1][0] is not layer:
                layer.after_update()

    def __call__(self, run, params, momentum=None, xp=None, reduce_outputs=True,
                 rule=None, step=1, epoch=0, layered=False):
        """One step: ``run()`` (forward, cost, backward: fills the gradients of ``params``,
        returns a list of loss arrays), the gradient sums (with the losses summed over the
        data replicas when ``reduce_outputs``), the update: neon's SGD (``momentum(layer) ->
        (mu, nesterov)``, None: plain SGD) or, given a learning ``rule``, its clipping and update at optimiser ``step`` (1-based)
        and ``epoch``. Returns ``run()``'s list.

        ``layered``: ``run`` takes a hook, ``run(after_layer)``, which it calls with each layer
        once that layer's gradients are final (:func:`backward`'s ``after_layer``); the sums
        then start during the backward (:class:`GradientBuckets`) unless ``DISTNET_OVERLAP``
        turns the gradient overlap off (``run(None)``). Whatever was not handed over is summed
        after ``run``, one bucket per communicator and dtype."""
        buckets = GradientBuckets(self.topology, params, self.host_staging, bucket_bytes())
        during = layered and overlap_enabled("grad")
        outputs = run(buckets if during else None) if layered else run()
        buckets.finish(outputs if reduce_outputs else ())
        if rule is None:
            self.update(params, momentum, xp)
        else:
            if rule.max_grad_norm is not None:
                self.clip(params, rule.max_grad_norm)
            self.apply_rule(params, rule, step, epoch)
        return outputs


def _xp(params):
    return get_array_module(params[0][1].grad) if params else np

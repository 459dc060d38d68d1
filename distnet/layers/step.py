"""The one training step: forward -> cost -> backward -> gradient sums -> update.

Every way distnet trains goes through :class:`TrainingStep`: a plain model, a graph, pipeline
stages and towers (:meth:`Model.train_step <distnet.models.model.Model.train_step>` with the
model's execution: :func:`forward_backward`, or the pipeline schedule built from
:func:`forward`, :func:`cost_delta` and :func:`backward`), GB's supervised phase and a DBN's
fine-tuning (the same), GB's LocalFiltering pretraining (the sparse autoencoder's
forward/backward), the RBM's contrastive divergence (its statistics as a gradient) and the
sequence-to-sequence model. What differs is only the forward/backward callable and the
:class:`~distnet.optim.optimizer.Optimizer` it is given; the gradient sums and the update are
the same code.

Gradient sums: :class:`GradientBuckets`, one flat Allreduce per bucket of (communicator, dtype),
the communicator being each parameter's :attr:`~distnet.layers.placement.ParamPlacement.reduce_over`
(``grad``: spatial x data ranks; ``data``: data replicas); communicators of one rank are skipped,
and so are parameters whose gradient the layer already made global (``reduce_over`` COMPLETE: batch
norm). A forward/backward that reports each layer whose gradients are final (its
``after_layer`` hook) gets them summed during the backward, in buckets of
:func:`~distnet.comm.overlap.bucket_bytes` (``DISTNET_OVERLAP``, on by default); whatever was not
reported (all of it when the overlap is off, or for a forward/backward that reports nothing) is
summed after the backward in one bucket per communicator and dtype: the blocking sum is that
bucket size, not another path.

Update: with the optimizer's ``max_grad_norm``, first the clipping by global norm (every rank
adds the squares of the gradients it owns, a replicated gradient counted on one rank only, ONE
Allreduce of that float64 scalar over the world); then, per parameter, the optimizer's rule at
the parameter's resolved learning rate (:meth:`Optimizer.update
<distnet.optim.optimizer.Optimizer.update>`: neon's SGD with momentum, GradientDescent with
weight decay, Adam, AdamW, with their schedules), its state arrays living with the parameter;
after a layer's last parameter, that layer's ``after_update``.
"""
import numpy as np

from ..backend import get_array_module
from ..comm.buckets import BucketReducer
from ..comm.overlap import bucket_bytes, overlap_enabled
from ..comm.reduce import allreduce_sum, progress
from ..optim.clipping import clip_coefficient, scale, sum_of_squares
from .pixel_cost import TiledCost
from .placement import COMPLETE


def forward(layers, x):
    """``x`` through ``layers`` in order; returns the last output."""
    for layer in layers:
        x = layer.fprop(x)
    return x


def cost_delta(cost, y, t, batch_size):
    """``(loss, delta)``: the summed loss of the rows of ``y`` (a ``(1,)`` float64 array left on
    the device) and the cost gradient divided by the global ``batch_size``. A per-pixel cost on
    a tiled output (:class:`~distnet.layers.pixel_cost.TiledCost`) sums its tiles' shares first,
    one Allreduce, and gives the gradient of its normalised loss."""
    if isinstance(cost, TiledCost):
        return cost.loss_delta(y, t, batch_size)
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
            if p.reduce_over is not COMPLETE:   # the layer summed it already
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
            self.reducer.add([p.grad for p in ps if p.reduce_over == over], self.topology.comm(over.comm), start_full)

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

    def __call__(self, run, params, optimizer, step=1, epoch=0, reduce_outputs=True):
        """One step of the ``params`` (``[(layer, Param)]``, a layer's parameters next to each
        other): ``run(after_layer)`` (forward, cost, backward: fills their gradients, returns a
        list of loss arrays; it may call ``after_layer(layer)`` once a layer's gradients are
        final, :func:`backward`'s hook, or ignore it), the gradient sums (with the losses summed
        over the data replicas when ``reduce_outputs``), the clipping and the update of
        ``optimizer`` (a :class:`~distnet.optim.optimizer.Optimizer`) at optimiser step ``step``
        (1-based) of ``epoch``. Returns ``run``'s list. Collective over the communicators of the
        params' buckets (and the world, when clipping)."""
        buckets = GradientBuckets(self.topology, params, self.host_staging, bucket_bytes())
        outputs = run(buckets if overlap_enabled("grad") else None)
        buckets.finish(outputs if reduce_outputs else ())
        if optimizer.max_grad_norm is not None:
            self.clip(params, optimizer.max_grad_norm)
        for k, (layer, p) in enumerate(params):
            optimizer.update(layer, p, step, epoch)
            # a layer's hook after its last parameter: LocalFiltering renormalises its filters
            # there, and with tied pretraining weights the decoder's and the encoder's
            # renormalisations must each follow their own update
            if k + 1 == len(params) or params[k + 1][0] is not layer:
                layer.after_update()
        return outputs

    def owned(self, p):
        """True when this rank counts ``p``'s gradient in the global norm: data replica 0 only
        (the replicas hold the same sums), every spatial rank for a sharded parameter (disjoint
        shards), spatial rank 0 for a replicated one; pipeline stages hold different layers
        (a tower network's shared layers: pipe rank 0 only, ``copy_elsewhere``)."""
        t = self.topology
        return t.data_index == 0 and (p.sharded or t.spatial.Get_rank() == 0) and not p.copy_elsewhere

    def clip(self, params, max_norm):
        """Clip the gradients of ``params`` (``[(layer, Param)]``, already summed) by their global
        norm (``torch.nn.utils.clip_grad_norm_``: factor ``max_norm / (norm + 1e-6)`` when the
        norm exceeds ``max_norm``): per-rank sums of squares of the owned gradients, ONE float64
        Allreduce over the world (collective over ``Topology.world``). Returns the norm before
        clipping: a Python float, or a 0-d device array on a device (the factor is computed and
        applied there, so the step does not wait)."""
        grads = [p.grad for _, p in params if self.owned(p)]
        sq = sum_of_squares(grads) if grads else np.zeros((), dtype="float64")
        total = _xp(params).zeros(1, dtype="float64")
        total[0] = sq
        allreduce_sum([total], self.topology.world, self.host_staging, kind="allreduce_grad")
        if get_array_module(total) is np:
            norm = float(total[0]) ** 0.5
        else:
            norm = get_array_module(total).sqrt(total[0])
        factor, _ = clip_coefficient(norm * norm, max_norm)
        scale([p.grad for _, p in params], factor)
        return norm


def _xp(params):
    return get_array_module(params[0][1].grad) if params else np

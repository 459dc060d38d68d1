"""Pipeline (model) parallelism: layers placed on stages, activations sent forward and gradients
sent back between stages, GPipe micro-batches with gradient accumulation.

Placement
---------
Every layer runs on one stage ``0 .. npipe-1`` (``Topology.pipe_index``; the experiment's
``pipe``). The model says which, in either of two ways (both may be given if they agree):

* the model's ``stages: [b1, b2, ...]``: layer indices where stages 1, 2, ... begin (PopTorch's
  ``BeginBlock``), strictly increasing in ``1 .. len(layers)-1``; monotone placements only;
* a layer's ``stage: s`` key; a layer without one stays on the stage of the layer before it (the
  first on stage 0). Any sequence works, also non-monotone ones such as ChainerMN's model-parallel
  MLP, where the output comes back to the first rank: ``[0, 1, 0]``.

With ``pipe > 1`` the number of stages (the largest stage + 1) must equal ``pipe`` and every stage
must run at least one layer. With ``pipe == 1`` the keys are checked the same way but every layer
runs on the one process (a pipelined experiment run on one process gives the reference numbers).

A *segment* is a maximal run of consecutive layers on one stage; consecutive segments are on
different stages, and between them is a boundary (:mod:`distnet.comm.p2p`).

Schedule (GPipe)
----------------
A minibatch (this data replica's rows) is cut into ``micro_batches`` contiguous micro-batches
(``np.array_split``; empty ones are skipped). Forward: segment by segment in model order, all
micro-batches of a segment (receive input, run the layers, send output); on the stage of the last
layer, the cost and its gradient per micro-batch. Backward: segments in reverse order, each with
its micro-batches in reverse order. Layers cache what their backward needs from their last
forward, so before the backward of micro-batch ``m`` a segment's forward is run again on its
stored input (re-materialisation, as GPipe does) unless the cache still holds ``m`` (always true
for the last micro-batch, so one micro-batch never recomputes). Each layer's parameter gradients
are summed over the micro-batches; since the cost gradient is divided by the global batch size,
the sum is the full-batch gradient.

Every rank runs its work items in that one global order and every send is nonblocking, so the
schedule cannot deadlock; a stage starts a micro-batch as soon as its input arrives (receives are
posted for a whole segment at once), which gives GPipe's fill / drain overlap between stages.

Communicators: activations and gradients move on ``Topology.pipe`` (point-to-point, between the
ranks with the same ``(d, iy, ix)``, so a spatial tile of stage ``s`` goes to the same tile of
stage ``s + 1``); Dist layers inside a stage exchange halos / reduce on that stage's own
``Topology.spatial``; the loss (and, in :meth:`Pipeline.forward`, the output) is summed over
``Topology.pipe`` with zeros on the stages that do not hold the last layer.
"""
from dataclasses import dataclass

import numpy as np

from ..comm.p2p import PipeChannel, Recv, Send
from ..comm.reduce import allreduce_sum
from ..layers.step import backward, cost_delta, forward


class StagePlanError(ValueError):
    """A placement that cannot run; ``layer`` (index) and ``key`` say where (None: the model)."""

    def __init__(self, message, layer=None, key=None):
        super().__init__(message)
        self.layer, self.key = layer, key


@dataclass(frozen=True)
class Segment:
    """Layers ``start .. stop-1`` run on ``stage``."""

    stage: int
    start: int
    stop: int


def assign_stages(nlayers, layer_stages=None, boundaries=None, npipe=1):
    """The stage of every layer (module docstring), as a list of ``nlayers`` ints.

    layer_stages : per-layer ``stage`` keys (None where not given), or None.
    boundaries : the model's ``stages`` list, or None.
    npipe : the run's pipeline stages (``Topology.npipe``); 1 places every layer on stage 0
        after checking the keys.

    Raises :class:`StagePlanError`.
    """
    layer_stages = list(layer_stages) if layer_stages is not None else [None] * nlayers
    assert len(layer_stages) == nlayers
    from_list = None
    if boundaries is not None:
        b = list(boundaries)
        for j, v in enumerate(b):
            if not 1 <= v <= nlayers - 1:
                raise StagePlanError(f"stages[{j}] = {v} is out of range: a stage must begin at a "
                                     f"layer index 1 .. {nlayers - 1} (the model has {nlayers} layers)",
                                     key="stages")
            if j and v <= b[j - 1]:
                raise StagePlanError(f"stages must be strictly increasing layer indices (where stages "
                                     f"1, 2, ... begin), got {b}", key="stages")
        from_list = [sum(1 for v in b if v <= i) for i in range(nlayers)]
    for i, s in enumerate(layer_stages):
        if s is None:
            continue
        if s < 0 or (npipe > 1 and s >= npipe):
            top = f"0 .. {npipe - 1} (pipe = {npipe})" if npipe > 1 else ">= 0"
            raise StagePlanError(f"stage {s} is out of range: stages are {top}", layer=i, key="stage")
        if from_list is not None and s != from_list[i]:
            raise StagePlanError(f"stage {s} disagrees with the model's stages {list(boundaries)}, "
                                 f"which put layer {i} on stage {from_list[i]}; give one or the other",
                                 layer=i, key="stage")
    if from_list is not None:
        stage_of = from_list
    else:
        stage_of, cur = [], 0
        for s in layer_stages:
            cur = cur if s is None else s
            stage_of.append(cur)
    nstages = max(stage_of) + 1
    unused = sorted(set(range(nstages)) - set(stage_of))
    if unused:
        raise StagePlanError(f"stage(s) {unused} run no layer (the layers use stages {sorted(set(stage_of))}); "
                             "number the stages 0, 1, ... without gaps", key="stages")
    if npipe == 1:
        return [0] * nlayers
    if nstages != npipe:
        raise StagePlanError(f"the model has {nstages} pipeline stage(s) but the run has pipe = {npipe}; "
                             f"give the experiment pipe: {nstages} (and {nstages} x the other axes ranks), "
                             f"or place the layers on {npipe} stages", key="stages")
    return stage_of


def segments(stage_of):
    """Maximal runs of consecutive layers on one stage, in model order -> list of :class:`Segment`."""
    out, start = [], 0
    for i in range(1, len(stage_of) + 1):
        if i == len(stage_of) or stage_of[i] != stage_of[start]:
            out.append(Segment(stage_of[start], start, i))
            start = i
    return out


def micro_slices(n, micro_batches):
    """Contiguous non-empty slices of ``range(n)``: ``np.array_split`` into ``micro_batches``
    parts (sizes differ by at most 1), empty parts dropped; ``[slice(0, 0)]`` when ``n == 0``.
    A replica without rows in a short last batch still runs one empty micro-batch through its
    stages: its layers' collectives over the replicas (batch norm's statistics) must meet the
    other replicas' calls."""
    out, a = [], 0
    for size in (len(p) for p in np.array_split(np.arange(n), micro_batches)):
        if size:
            out.append(slice(a, a + size))
            a += size
    return out or [slice(0, 0)]


def local_feature_shape(layer):
    """Shape (without the batch axis) of ``layer``'s output on this rank, as its placement says:
    its spatial tile ``(C, h, w)`` or the whole output (replicated)."""
    return layer.placement.out_layout.local_shape


class Pipeline:
    """Runs a model's layers over the stages of ``Topology.pipe`` with micro-batches.

    model : the :class:`~distnet.models.model.Model` (configured; its ``layers``, ``cost``,
        ``backend``); stage_of : the stage of every layer (:func:`assign_stages`); micro_batches : M.
        Message shapes come from the layers' placements.

    Made by the model when ``pipe > 1`` or ``micro_batches > 1``.
    """

    def __init__(self, model, stage_of, micro_batches):
        self.model = model
        self.layers = model.layers
        self.topology = topo = model.topology
        self.stage = topo.pipe_index
        self.micro_batches = micro_batches
        self.segments = segments(stage_of)
        self.channel = PipeChannel(topo.pipe, model.backend.host_staging) if topo.npipe > 1 else None
        nseg = len(self.segments)
        # The two ends of every boundary this rank touches: _send[k] ends my segment k,
        # _recv[k] starts my segment k (k > 0).
        self._send, self._recv = {}, {}
        for k, seg in enumerate(self.segments):
            if seg.stage != self.stage:
                continue
            if k + 1 < nseg:
                self._send[k] = Send(self.channel, self.segments[k + 1].stage, k)
            if k > 0:
                self._recv[k] = Recv(self.channel, self.segments[k - 1].stage, k - 1)

    # -- helpers ------------------------------------------------------------------------------
    def _in_shape(self, k, rows):
        """Local shape of segment ``k``'s input for ``rows`` samples (the previous layer's output)."""
        return (rows,) + local_feature_shape(self.layers[self.segments[k].start - 1])

    def _run(self, seg, h):
        return forward(self.layers[seg.start:seg.stop], h)

    def _share_over_pipe(self, a):
        """Sum ``a`` over ``Topology.pipe`` (in place; zeros on all stages but one): every stage
        gets the value of the stage that holds the last layer."""
        if self.topology.npipe > 1:
            allreduce_sum([a], self.topology.pipe, self.model.backend.host_staging)
        return a

    def _finish(self):
        if self.channel is not None:
            self.channel.wait_sends()

    # -- inference ----------------------------------------------------------------------------
    def forward(self, x):
        """Forward the whole batch ``x (b, ...)`` (this rank's input part) through every stage;
        returns the output ``(b, K)`` on every rank (a per-pixel model's: this rank's tile of its
        maps, ``(b, K, *s)``). Collective over ``Topology.pipe`` (and each
        stage's spatial communicator)."""
        xp, dtype = self.model.backend.xp, self.model.backend.dtype
        h = x
        for k, seg in enumerate(self.segments):
            if seg.stage != self.stage:
                continue
            if k > 0:
                h = self._recv[k].forward(self._in_shape(k, len(x)), dtype, xp).wait()
            h = self._run(seg, h)
            if k in self._send:
                self._send[k].forward(h)
        last = self.segments[-1]
        y = xp.array(h, copy=True) if last.stage == self.stage else \
            xp.zeros((len(x),) + tuple(local_feature_shape(self.layers[-1])), dtype=dtype)
        self._finish()
        return self._share_over_pipe(y)

    # -- training -----------------------------------------------------------------------------
    def forward_backward(self, x, t, batch_size, lowest=0, after_layer=None):
        """One minibatch's forward and backward with micro-batches (module docstring).

        x : this rank's input part of this replica's rows ``(b, ...)``; t : targets ``(b, K)``;
        batch_size : rows of the global minibatch (the cost gradient is divided by it);
        lowest : backprop stops at this layer (the model's ``lowest_trained_layer``): layers
        below it, and segments wholly below it, run no backward and exchange no gradients.
        Leaves in every parameter of this stage's layers from ``lowest`` up the gradient of the
        whole ``b`` rows (partial over spatial ranks / data replicas exactly as without a
        pipeline: the model sums those).
        Returns ``xp.array([loss], float64)``: the summed loss of the ``b`` rows, on every stage.
        Collective over ``Topology.pipe`` and each stage's spatial communicator.
        ``after_layer(layer)`` (optional, :func:`~distnet.layers.step.backward`'s hook) runs for
        each of this stage's layers once its gradient is final: after its backward with one
        micro-batch, after the segment's last micro-batch otherwise.
        """
        model, xp, dtype = self.model, self.model.backend.xp, self.model.backend.dtype
        micro = micro_slices(len(x), self.micro_batches)
        segs, last = self.segments, len(self.segments) - 1
        mine = [k for k, seg in enumerate(segs) if seg.stage == self.stage]
        inputs = {k: [None] * len(micro) for k in mine}   # stored segment inputs, per micro-batch
        cached = {}                                        # segment -> micro-batch its caches hold
        deltas = [None] * len(micro)
        loss = xp.zeros(1, dtype=np.float64)               # on the device: no wait per micro-batch

        for k in mine:                                     # forward: all micro-batches of a segment
            seg = segs[k]
            posted = [self._recv[k].forward(self._in_shape(k, s.stop - s.start), dtype, xp)
                      for s in micro] if k > 0 else None
            for m, s in enumerate(micro):
                h = x[s] if k == 0 else posted[m].wait()
                inputs[k][m] = h
                y = self._run(seg, h)
                cached[k] = m
                if k in self._send:
                    self._send[k].forward(y)
                else:                                      # k == last: the cost
                    part, deltas[m] = cost_delta(model.step_cost, y, t[s], batch_size)
                    loss += part

        mine = [k for k in mine if segs[k].stop > lowest]  # segments that run a backward
        own = {k: [p for i in range(max(segs[k].start, lowest), segs[k].stop)
                   for p in self.layers[i].params()] for k in mine}
        acc = {k: [xp.zeros_like(p.grad) for p in own[k]] for k in mine} if len(micro) > 1 else None
        for k in reversed(mine):                           # backward: segments and micro-batches reversed
            seg = segs[k]
            send_back = k > 0 and seg.start > lowest
            order = list(reversed(range(len(micro))))
            if k < last:
                posted = {m: self._send[k].backward(self._in_shape(k + 1, micro[m].stop - micro[m].start),
                                                    dtype, xp) for m in order}
            for m in order:
                d = deltas[m] if k == last else posted[m].wait()
                if cached.get(k) != m:                     # re-materialise this micro-batch's forward
                    self._run(seg, inputs[k][m])
                cached[k] = None
                d = backward(self.layers, d, lowest, seg.start, seg.stop,
                             after_layer=after_layer if acc is None else None)
                if send_back:
                    self._recv[k].backward(d)
                if acc is not None:
                    for a, p in zip(acc[k], own[k]):
                        a += p.grad
            if acc is not None:
                for a, p in zip(acc[k], own[k]):
                    p.grad[...] = a
            if after_layer is not None and acc is not None:   # one micro-batch: backward() called it
                for i in range(seg.stop - 1, max(seg.start, lowest) - 1, -1):
                    after_layer(self.layers[i])
        self._finish()
        return self._share_over_pipe(loss)

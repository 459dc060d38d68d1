"""``TowerSumLayer``: the exchange point of a tower network (:mod:`distnet.models.towers`): the
sum of one same-shaped output of every tower, optionally followed by an activation, replicated
on every tower.

Distribution: the towers of a model with ``towers: T`` sit on the ranks of ``Topology.pipe``
(``pipe: 1``: all on one process; ``pipe: T``: one tower per rank; ``pipe`` dividing ``T``:
``T / pipe`` consecutive towers per rank). A rank adds the inputs of its own towers (in tower
order) and ONE Allreduce (sum) over ``Topology.pipe`` adds the other ranks' partial sums: every
rank then holds ``z = x_0 + ... + x_{T-1}`` and applies the activation itself. The backward hands
every input the gradient of ``z``; that gradient is complete because the model's graph sums the
readers of a shared value over the tower ranks first (the backward exchange of
:mod:`distnet.models.towers`).
"""
import numpy as np

from ..comm.reduce import allreduce_sum
from .add import activated, input_grads, one_layout_kind, one_shape
from .base import BaseLayer
from .placement import Collective, Layout, Placement

#: The communicator that carries the towers (:meth:`~distnet.comm.topology.Topology.comm`).
TOWER_COMM = "pipe"


class TowerSumLayer(BaseLayer):
    """``y = f(x_0 + x_1 + ... + x_{T-1})``: keys ``inputs`` (one layer of every tower, the same
    global shape ``(F,)`` or ``(C, H, W)`` and layout), ``activation`` (optional, e.g.
    ``!obj:distnet.activations.RectLin {}``: Chainer ParallelMLP's ``relu(z0 + z1)``). The layer
    itself has no ``tower`` key: its output belongs to every tower.

    In a tower network (the model's ``towers: T``) every layer may carry ``tower: t`` (``0 ..
    T-1``; without it the layer is shared and runs on every rank). A tower's layers read the
    model's input, shared layers and their own tower's layers; a shared layer reads no tower's
    output except through a TowerSumLayer; the last layer is shared. The experiment's ``pipe``
    ranks hold the towers: ``pipe: 1`` all on one process, ``pipe: T`` one per rank (``pipe``
    dividing ``T``: ``T / pipe`` per rank); ``data: D`` adds replicas (``D x pipe`` ranks). Each
    TowerSumLayer is one Allreduce over the pipe ranks forward, and the gradient of a shared
    value read by towers one backward (:mod:`distnet.models.towers`)."""

    config_types = {"activation": ("obj", "activation")}
    multi_input = True
    #: The model's graph hands :meth:`fprop` only the inputs of this rank's towers.
    tower_sum = True

    def __init__(self, activation=None, **common):
        super().__init__(**common)
        self.activation = activation
        self.comm = None

    def infer_shape(self, in_shapes):
        """``in_shapes``: the inputs' global shapes (all equal) -> the same shape."""
        if not isinstance(in_shapes, list) or not in_shapes:
            raise self.error("a TowerSumLayer sums one output of every tower; name them in its inputs key",
                             "inputs")
        self.in_shape = self.out_shape = one_shape(self, in_shapes)
        self.in_shapes = [tuple(s) for s in in_shapes]
        return self.out_shape

    def place(self, layouts, position):
        """Every input's layout kind must agree; the output has it too. With towers on several
        pipe ranks, one forward Allreduce over ``pipe`` of the local output."""
        layout = Layout.of(one_layout_kind(self, layouts, "to be summed"), self.out_shape, position)
        coll = ()
        if position.comm_size(TOWER_COMM) > 1:
            coll = (Collective(TOWER_COMM, int(np.prod(layout.local_shape))),)
        return Placement(layout, layout, collectives=coll)

    def setup(self, ctx):
        """The tower communicator and the staging flag (collective only in :meth:`fprop`)."""
        self.comm = ctx.topology.comm(TOWER_COMM)
        self.host_staging = ctx.backend.host_staging

    def fprop(self, xs):
        """``xs``: this rank's towers' inputs (local arrays, tower order) -> the sum over every
        tower (after the activation), the same on every rank of ``Topology.pipe`` (collective
        there when it has more than one rank)."""
        self._nlocal = len(xs)
        z = xs[0].copy()
        for x in xs[1:]:
            z += x
        if self.comm is not None and self.comm.Get_size() > 1:
            allreduce_sum([z], self.comm, self.host_staging)
        return activated(self, z)

    def bprop(self, delta, need_input_grad=True):
        """The gradient of the sum for every local input (copies: each reader may change its own)."""
        return input_grads(self, delta, self._nlocal) if need_input_grad else None

    def describe(self):
        act = f"  activation={self.activation.name}" if self.activation is not None else ""
        return f"{self.name}: sum over towers of {', '.join(self.inputs)} {self.in_shape} -> {self.out_shape}{act}"


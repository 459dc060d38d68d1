"""A per-pixel cost on a tiled output: where the cost's math (:mod:`distnet.ops.pixel_costs`)
meets the communicator that completes its sums.

Each rank holds the output tile ``y (b, K, *s)`` and the labels ``t (b, *s)`` of its own pixels
(of its data replica's rows). The cost's partial sums of the tile (a few float64 numbers: the
labelled pixels of each class and the loss's numerator, or Dice's overlaps per image and class)
are summed by ONE Allreduce over the communicator the cost names (``Topology.grad``: spatial x
data ranks, sums over the global minibatch; ``Topology.spatial``: the tiles of each image), and
every rank forms the loss and its gradient from the sums. No rank gathers the output map.

The loss a rank returns is what the training step sums over the data replicas
(:class:`~distnet.layers.step.GradientBuckets`): for sums over the global minibatch every replica
knows the whole loss, and replica 0 alone counts it (the others count 0, exactly); for per-image
sums each replica counts its own images.
"""
from ..backend import get_array_module
from ..comm.reduce import allreduce_sum


class TiledCost:
    """``cost`` (a :class:`~distnet.ops.pixel_costs.PixelCost`) on the rank of ``topology``
    (:class:`~distnet.comm.topology.Topology`); ``host_staging``: as for every Allreduce of
    device buffers (``Backend.host_staging``)."""

    def __init__(self, cost, topology, host_staging=False):
        self.cost = cost
        self.comm = topology.comm(cost.sums_over)
        self.host_staging = host_staging
        #: Whether this rank's loss counts in the sum over the data replicas.
        self.counts = cost.sums_over != "grad" or topology.data_index == 0

    def sums(self, y, t):
        """The cost's sums over every pixel they span: this tile's share summed over the cost's
        communicator, one Allreduce (collective over it; no communication on one rank)."""
        sums = self.cost.partial_sums(y, t)
        allreduce_sum([sums], self.comm, self.host_staging)
        return sums

    def _counted(self, loss):
        loss = loss.reshape(1)
        return loss if self.counts else get_array_module(loss).zeros_like(loss)

    def loss_delta(self, y, t, batch_size):
        """``(loss, delta)`` of this rank's tile of a global minibatch of ``batch_size`` images:
        the loss (a ``(1,)`` float64 array, as :func:`~distnet.layers.step.cost_delta` gives:
        what this rank adds to the sum over the data replicas) and the gradient of the mean,
        shaped like ``y``. Collective over the cost's communicator."""
        t = self.cost.labels(t)
        sums = self.sums(y, t)
        return self._counted(self.cost.loss_of(sums, batch_size)), self.cost.delta(y, t, sums, batch_size)

    def loss(self, y, t, batch_size):
        """The loss alone (evaluation), as :meth:`loss_delta` gives it. Collective, as it."""
        return self._counted(self.cost.loss_of(self.sums(y, self.cost.labels(t)), batch_size))


def bind_cost(cost, topology, host_staging=False):
    """What the model's forward/backward calls for ``cost``: a :class:`TiledCost` for a
    per-pixel cost, the cost itself (per image: the output is replicated) otherwise."""
    if cost.per_pixel:
        return TiledCost(cost, topology, host_staging)
    return cost

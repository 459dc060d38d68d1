"""Tower networks (Chainer's model-parallel ``ParallelMLP``): a graph model whose layers are cut
into ``T`` towers that compute independently and exchange only at chosen layers.

YAML: the model's ``towers: T`` and a layer's ``tower: t`` (``0 .. T-1``). A layer without a
``tower`` key is *shared*: it runs on every rank and its output is the same everywhere. The
exchange points are :class:`~distnet.layers.tower_sum.TowerSumLayer` layers: shared, reading one
same-shaped output of every tower, summing them over the towers. What a layer may read (its
``inputs``; :mod:`distnet.models.graph`):

* a layer of tower ``t``: the model's input, shared layers, layers of tower ``t``;
* a shared layer: the model's input and shared layers (a tower's output leaves it only through
  a TowerSumLayer);
* a TowerSumLayer: exactly one layer of every tower.

The last layer (the model's output) is shared.

Where the towers run: on the ranks of ``Topology.pipe`` (the experiment's ``pipe``): ``pipe: 1``
runs every tower on one process (the reference numbers), ``pipe: T`` one tower per rank, any
``pipe`` dividing ``T`` runs ``T / pipe`` consecutive towers per rank. With ``data: D`` the run has
``D x pipe`` ranks (each tower rank's data replicas sum its gradients as in every model). A rank
builds and runs the shared layers and its own towers' layers; every rank draws every layer's
weights from the one RNG stream (the same global weights as one process) and releases the other
towers' layers at once, as pipeline stages do.

Exchanges, both ONE Allreduce (sum) over ``Topology.pipe`` when the towers sit on several ranks:

* forward: a TowerSumLayer adds its rank's towers' inputs, then sums over the tower ranks;
* backward: the gradient of a shared value (a TowerSumLayer's output, the output of a shared
  layer) is the sum over its readers; the readers of other towers ran elsewhere, so the graph
  sums the part from tower readers over ``Topology.pipe`` (zeros where a rank holds none of
  them) and adds the part from shared readers (complete on every rank).

The placements declare both (``Collective(over="pipe")``: the TowerSumLayer's forward, the
shared node's backward), so ``distnet show`` / ``plan`` report them. Shared parameters (layers
after an exchange) are identical on every tower rank: their gradients are summed over the data
replicas only, and the gradient norm counts them on pipe rank 0 only.
"""
from dataclasses import replace

import numpy as np

from ..comm.reduce import allreduce_sum
from ..layers.placement import Collective
from ..layers.tower_sum import TOWER_COMM


class TowerPlan:
    """The towers of a model (checked as the YAML is read; errors at the offending key).

    layers : the model's layers; graph : their :class:`~distnet.models.graph.Graph`;
    ntowers : the model's ``towers`` (T); model_error : ``(message, key) -> ConfigError`` at the
    model's YAML.

    ``tower_of[i]``: layer ``i``'s tower (None: shared); ``exchanged``: the shared layers read by
    tower layers (their output gradient is summed over the tower ranks in the backward).
    """

    def __init__(self, layers, graph, ntowers, model_error):
        self.layers, self.graph, self.T, self.model_error = layers, graph, ntowers, model_error
        self.tower_of = [layer.tower for layer in layers]
        T, names = ntowers, [layer.name for layer in layers]
        for layer in layers:
            if layer.tower is not None and layer.tower >= T:
                raise layer.error(f"tower {layer.tower} is out of range: the model has towers: {T} "
                                  f"(towers 0 .. {T - 1})", "tower")
        used = {t for t in self.tower_of if t is not None}
        missing = sorted(set(range(T)) - used)
        if missing:
            raise model_error(f"towers is {T} but no layer has tower: {missing[0]} (towers without layers: "
                              f"{missing}); give every tower its layers or lower towers", "towers")

        def what(j):
            return "the model's input" if j < 0 else f"'{names[j]}'" + (
                f" (tower {self.tower_of[j]})" if self.tower_of[j] is not None else " (shared)")
        for i, layer in enumerate(layers):
            src = graph.sources[i]
            if layer.tower_sum:
                if layer.tower is not None:
                    raise layer.error("a TowerSumLayer belongs to every tower (its output is the same on "
                                      "all of them); remove its tower key", "tower")
                seen = {}
                for j in src:
                    if j < 0 or self.tower_of[j] is None:
                        raise layer.error(f"reads {what(j)}, which belongs to no tower: a TowerSumLayer "
                                          "sums one output of every tower", "inputs")
                    t = self.tower_of[j]
                    if t in seen:
                        raise layer.error(f"reads two outputs of tower {t} ('{names[seen[t]]}' and "
                                          f"'{names[j]}'): a TowerSumLayer sums one output of every tower",
                                          "inputs")
                    seen[t] = j
                if len(seen) != T:
                    raise layer.error(f"sums towers {sorted(seen)} but the model has towers: {T}; name one "
                                      f"output of every tower (missing: {sorted(set(range(T)) - set(seen))})",
                                      "inputs")
                continue
            for j in src:
                if j < 0 or self.tower_of[j] is None or self.tower_of[j] == layer.tower:
                    continue
                if layer.tower is None:
                    raise layer.error(f"is shared by every tower (no tower key) but reads {what(j)}: a "
                                      "tower's output leaves it only through a TowerSumLayer (or give "
                                      f"this layer tower: {self.tower_of[j]})", "inputs")
                raise layer.error(f"belongs to tower {layer.tower} but reads {what(j)}: towers exchange "
                                  "only through a TowerSumLayer", "inputs")
        if self.tower_of[-1] is not None:
            raise layers[-1].error(f"the last layer gives the model's output and must be shared, but it "
                                   f"has tower: {self.tower_of[-1]}; end the towers in a TowerSumLayer",
                                   "tower")
        for layer in layers:
            if layer.stage is not None:
                raise layer.error("has a stage key, but in a tower network the pipe ranks hold towers, "
                                  "not pipeline stages; remove it", "stage")
        self.exchanged = [j for j in range(len(layers)) if self.tower_of[j] is None
                          and any(self.tower_of[r] is not None for r in graph.readers[j])]

    # -- where the towers run ------------------------------------------------------------------
    def check_pipe(self, npipe):
        """Refuse a ``pipe`` that cannot hold the towers (1, or a divisor of T)."""
        if npipe != 1 and self.T % npipe:
            raise self.model_error(f"towers is {self.T} but the run has pipe = {npipe}: the towers sit on "
                                   f"the pipe ranks, so pipe must be 1 (every tower on one process) or "
                                   f"divide {self.T} (pipe: {self.T}: one tower per rank)", "towers")

    def towers_on(self, pipe_index, npipe):
        """The towers pipe rank ``pipe_index`` of ``npipe`` runs (consecutive blocks)."""
        per = self.T // npipe
        return set(range(pipe_index * per, (pipe_index + 1) * per))

    def local(self, pipe_index, npipe):
        """Indices of the layers pipe rank ``pipe_index`` builds and runs: the shared ones and
        those of its towers."""
        mine = self.towers_on(pipe_index, npipe)
        return [i for i, t in enumerate(self.tower_of) if t is None or t in mine]

    # -- placements ----------------------------------------------------------------------------
    def with_exchange(self, i, placement, position):
        """Layer ``i``'s placement, with the backward Allreduce over ``pipe`` of its output
        gradient when it is a shared value read by towers on several ranks."""
        if i not in self.exchanged or position.comm_size(TOWER_COMM) == 1:
            return placement
        n = int(np.prod(placement.out_layout.local_shape))
        return replace(placement, collectives=placement.collectives + (Collective(TOWER_COMM, n, backward=True),))

    def exchange(self, topology, backend):
        """The graph's backward exchange ``(j, part, rows) -> gradient``: ``part`` (the sum of
        the output gradients of layer ``j`` from this rank's tower readers, or None when it
        holds none of them) summed over ``Topology.pipe`` (collective there; ``rows``: the batch
        rows, for the zeros of a rank without such readers)."""
        comm, xp, dtype = topology.comm(TOWER_COMM), backend.xp, backend.dtype

        def run(j, part, rows):
            if part is None:
                part = xp.zeros((rows,) + tuple(self.layers[j].placement.out_layout.local_shape), dtype=dtype)
            if comm.Get_size() > 1:
                allreduce_sum([part], comm, backend.host_staging)
            return part
        return run

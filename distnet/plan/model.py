"""A cost model of one training step on N ranks, from the geometry alone (no MPI, no arrays).

For every layer of a model and a spatial grid ``Py x Px``, :func:`plan_model` gives, per rank
(the largest over ranks is the critical one) and in total:

* local tile shapes: the output tile and the input chunk (tile + halo + padding);
* halo bytes per step: what a rank *sends* in the forward exchanges of its window layers
  (``own ∩ chunk(peer)`` for every peer) and in the adjoint exchanges of the backward pass
  (its ghost boxes go back to their owners). The figures are the analytic minimum: every ghost
  pixel a chunk needs, once, from its owner; ``GlobalArray`` sends exactly that;
* Allreduce payload per step: replicated conv filter gradients (one flat bucket over
  ``Topology.grad``) and the partial pre-activations of the first fully connected layer after a
  split plane (``B x nout``, over ``Topology.spatial``);
* FLOPs per rank (multiply-adds count 2; forward + backward, no input gradient for the first
  layer) and activation memory per rank (each layer's output tile plus the input chunk it
  keeps for the backward pass) and parameter memory (weights + gradients + the optimiser's state);
* a predicted step time from an alpha-beta network model (:class:`Machine`): a message costs
  ``alpha + bytes / beta`` inside a node and ``alpha_inter + bytes / beta_inter`` between nodes
  (the node's interface shared by its ranks), an Allreduce the cheaper of recursive doubling and
  Rabenseifner's algorithm (:mod:`distnet.plan.collectives`), compute ``flops / flop_rate``;
  nothing overlaps.

Every figure is what the layers' placements (:mod:`distnet.layers.placement`) state, summed
here over layers and ranks: a halo exchange its elements, messages and the part that crosses
nodes on every rank of its grid (``HaloExchange.grid_costs``, per axis: a million ranks take a
second), a layer its activation Allreduces (``Collective.payload``), gradient payload per
communicator, FLOPs, activation memory and memory traffic (``Placement``). A layer without
halos costs every rank what it costs rank ``(0, 0)``, which holds the largest tiles.

The step modelled is the supervised one (the training step: forward, backward, gradient sums).
With data replicas each replica's rows of the batch run on its ranks and the gradient bucket is
summed over ``data x Py x Px`` ranks; with pipeline stages a rank runs its stage's layers only
(per-rank figures are the largest stage's). GB's pretraining steps are not modelled.
"""
from dataclasses import asdict, dataclass, field
from math import prod

import numpy as np

from ..config.builder import config_name
from ..geometry import check_grid, choose_grid
from ..geometry.grid import GridPosition
from ..layers.placement import OVER_DATA, OVER_GRAD
from .collectives import allreduce, members_per_node
from .machine import Machine


@dataclass
class LayerPlan:
    """One layer's figures; ``*_max`` over ranks, ``*_total`` summed over ranks."""

    index: int
    name: str
    kind: str
    in_shape: tuple
    out_shape: tuple
    tile: tuple = ()            # largest local output tile (C, h, w) or (F,)
    chunk: tuple = ()           # largest input chunk (C, hc, wc) of a window layer
    exchanges: int = 0          # forward exchanges per step (LCN: 2)
    adjoints: int = 0           # adjoint exchanges per step
    halo_fwd_max: int = 0       # bytes one rank sends in its forward exchanges, per step
    halo_bwd_max: int = 0
    halo_fwd_total: int = 0
    halo_bwd_total: int = 0
    halo_msgs_max: int = 0      # messages one rank sends per step (both directions)
    halo_inter_max: int = 0     # the part of a rank's halo bytes that goes to another node
    halo_time_max: float = 0.0  # seconds of the rank whose exchanges take longest
    far_peers: bool = False     # some rank needs pixels of a rank beyond its neighbours
    allreduce_grad: int = 0     # gradient payload bytes per rank per step
    allreduce_act: int = 0      # activation payload bytes per rank per step
    allreduce_pipe: int = 0     # the part of it over the pipe ranks (tower exchanges)
    flops_max: float = 0.0
    mem_bytes_max: float = 0.0  # memory-bound traffic estimate (bytes moved), per rank
    act_bytes_max: int = 0      # activation memory kept per rank
    work_bytes: int = 0         # the layer's workspace kept from step to step, per rank
    transient_bytes: int = 0    # its temporaries at its peak (gradients in flight included)
    param_bytes: int = 0        # weights + gradients + optimiser state per rank (largest shard)
    param_global: int = 0       # elements of the layer's parameters, whole (all ranks' shards)
    array_local_max: int = 0    # bytes of the largest parameter array one rank holds
    array_global_max: int = 0   # bytes of the largest parameter array, whole
    time: dict = field(default_factory=dict)
    stage: int = 0              # pipeline stage running the layer
    bucket_bytes: dict = field(default_factory=dict)   # gradient payload per communicator


@dataclass
class Plan:
    """The plan of one model on one grid. ``layers`` hold per-layer figures (largest rank of
    each layer); :meth:`totals` sums them per rank first, so its ``*_max`` are the largest rank's
    totals (the critical path), not sums of per-layer maxima."""

    nranks: int
    grid: tuple
    batch: int
    itemsize: int
    machine: Machine
    layers: list
    notes: list = field(default_factory=list)
    data: int = 1
    pipe: int = 1
    #: Rows of a global minibatch (all replicas): ``batch`` is one replica's share.
    batch_global: int = 0
    #: Optimiser arrays per parameter beside its value and gradient.
    state_arrays: int = 1

    def __post_init__(self):
        self._ranks = {}   # kind -> (Py, Px) array summed over layers (not part of asdict)

    def totals(self):
        r = self._ranks
        t = {k: sum(getattr(lp, k) for lp in self.layers) for k in (
            "halo_fwd_total", "halo_bwd_total", "allreduce_grad", "allreduce_act")}
        # a rank holds its own stage's parameters only
        t["param_bytes"] = max(sum(lp.param_bytes for lp in self.layers if lp.stage == s)
                               for s in {lp.stage for lp in self.layers})
        for k in ("halo_fwd", "halo_bwd", "halo_msgs", "flops", "act_bytes"):
            t[k + "_max"] = float(r[k].max()) if k in r else 0.0
            if k != "flops":
                t[k + "_max"] = int(t[k + "_max"])
        per_rank = {k: (r[k].max() if k in r else 0.0) for k in ("time_compute", "time_memory", "time_halo")}
        t["time"] = {"compute": float(per_rank["time_compute"]), "memory": float(per_rank["time_memory"]),
                     "halo": float(per_rank["time_halo"]),
                     "allreduce": sum(lp.time.get("allreduce", 0.0) for lp in self.layers)}
        step = r["time_step"].max() if "time_step" in r else 0.0
        t["time"]["step"] = float(step) + t["time"]["allreduce"]
        step = t["time"]["step"]
        # the whole job's throughput: every replica trains its share of one global batch per step
        t["images_per_s"] = (self.batch_global or self.batch) / step if step > 0 else float("inf")
        t["images_per_s_replica"] = self.batch / step if step > 0 else float("inf")
        t["halo_inter_max"] = int(r["halo_inter"].max()) if "halo_inter" in r else 0
        return t

    def per_rank(self, kind):
        """``(Py, Px)`` array of one per-rank figure of the busiest stage (``halo_fwd``,
        ``halo_bwd``, ``halo_msgs``, ``halo_inter``, ``flops``, ``act_bytes``, ``time_step``,
        ...; zeros where no layer has it)."""
        return self._ranks.get(kind, np.zeros(self.grid))

    def to_dict(self):
        d = asdict(self)
        d["totals"] = self.totals()
        return d


class _Step:
    """What every layer's figures are computed for: the grid ``(Py, Px)`` (``(Pz, Py, Px)``) of
    the first replica and stage (world ranks in row-major order, ``iy * Px + ix``), ``data`` replicas, ``pipe`` stages, one replica's
    ``batch`` rows, ``itemsize``-byte numbers, the :class:`Machine`."""

    def __init__(self, grid, data, pipe, batch, itemsize, machine):
        self.grid, self.data, self.pipe = tuple(grid), data, pipe
        self.batch, self.itemsize, self.machine = batch, itemsize, machine
        self.P = prod(grid)
        #: compute and memory time stretch when a node's ranks outnumber its cores
        self.slowdown = machine.oversubscription(self.P * data * pipe)
        self.threads = machine.kernel_threads(self.P * data * pipe)

    def position(self):
        """Rank ``(0, 0)`` of the grid (the largest tiles: the first blocks are the longer ones)."""
        return GridPosition(self.grid, (0,) * len(self.grid), self.data, self.pipe)

    def spread(self):
        """Whether the grid's ranks sit on several nodes."""
        rpn = self.machine.ranks_per_node
        return bool(rpn) and rpn < self.P


class _RankSums:
    """Per-rank figures summed over the layers of each pipeline stage: ``(stage, kind) -> (Py, Px)``
    array (``flops``, ``halo_fwd``, ``time_halo``, ...)."""

    def __init__(self, grid):
        self.grid, self.sums = tuple(grid), {}

    def add(self, stage, kind, values):
        key = (stage, kind)
        self.sums[key] = self.sums.get(key, 0) + np.broadcast_to(np.asarray(values, dtype=np.float64), self.grid)

    def add_work(self, lp, flops, mem_bytes, step):
        """A layer's FLOPs and memory traffic per rank (arrays or numbers) and their seconds at
        the machine's rates for the layer's kind, stretched where ranks outnumber cores."""
        compute, memory = step.machine.seconds(lp.kind, flops, mem_bytes)
        self.add(lp.stage, "flops", flops)
        self.add(lp.stage, "mem_bytes", mem_bytes)
        self.add(lp.stage, "time_compute", compute * step.slowdown)
        self.add(lp.stage, "time_memory", memory * step.slowdown)

    def add_step_times(self, stage):
        """The stage's step time per rank: compute + memory + halo (no overlap)."""
        self.add(stage, "time_step", sum(self.sums.get((stage, k), 0) for k in ("time_compute", "time_memory",
                                                                               "time_halo")))

    def busiest(self, stages):
        """Per kind, the stage whose ranks carry the most (a rank runs its own stage's layers only)."""
        kinds = {k for _, k in self.sums}
        return {kind: np.max([self.sums[(st, kind)] for st in stages if (st, kind) in self.sums], axis=0)
                for kind in kinds}


def _window_layer(lp, pl, step, ranks, need_dx):
    """A window layer's figures on every rank of the grid: its tiles, halo exchanges (what its
    :class:`~distnet.layers.placement.HaloExchange` states for every rank), FLOPs and memory."""
    B, isz, m = step.batch, step.itemsize, step.machine
    halo = pl.halos[0]
    every = halo.grid_costs()
    K, C = pl.out_layout.local_shape[0], halo.channels
    tile, chunk = every.largest()
    lp.tile, lp.chunk = (K,) + tile, (C,) + chunk
    lp.far_peers = every.far_peers
    if step.P > 1:
        lp.exchanges = halo.per_step
        lp.adjoints = lp.exchanges if need_dx else 0
        f_r, b_r = lp.exchanges * B * isz * every.sent, lp.adjoints * B * isz * every.received
        m_r = lp.exchanges * every.messages + lp.adjoints * every.messages
        lp.halo_fwd_max, lp.halo_fwd_total = int(f_r.max()), int(f_r.sum())
        lp.halo_bwd_max, lp.halo_bwd_total = int(b_r.max()), int(b_r.sum())
        lp.halo_msgs_max = int(m_r.max())
        ranks.add(lp.stage, "halo_fwd", f_r)
        ranks.add(lp.stage, "halo_bwd", b_r)
        ranks.add(lp.stage, "halo_msgs", m_r)
        f_x, b_x, m_x = every.to_other_nodes(m.node_of) if step.spread() else (np.zeros(step.grid),) * 3
        f_x, b_x = lp.exchanges * B * isz * f_x, lp.adjoints * B * isz * b_x
        m_x = (lp.exchanges + lp.adjoints) * m_x
        inter = f_x + b_x
        ranks.add(lp.stage, "halo_inter", inter)
        t_r = ((m_r - m_x) * m.alpha + m_x * m.alpha_inter + (f_r + b_r - inter) / m.beta
               + _node_share(inter, step.grid, m) / m.beta_inter)
        lp.halo_inter_max = int(inter.max())
        lp.halo_time_max = float(t_r.max())
        ranks.add(lp.stage, "time_halo", t_r)
    flops = 0.0
    if pl.macs:   # multiply-adds per output pixel, the same on every rank
        lp.flops_max = pl.flops(B, need_dx)
        flops = lp.flops_max / prod(tile) * every.out_pixels
    io = (C * every.chunk_pixels, K * every.out_pixels)   # every rank's chunk and output tile
    lp.mem_bytes_max = pl.memory_traffic(B, isz, need_dx)
    lp.act_bytes_max = pl.activation_bytes(B, isz)
    ranks.add_work(lp, flops, pl.memory_traffic(B, isz, need_dx, io), step)
    ranks.add(lp.stage, "act_bytes", pl.activation_bytes(B, isz, io))


def _node_share(inter_bytes, grid, machine):
    """``(Py, Px)`` (the grid's shape): the inter-node bytes of each rank's whole node (its ranks'
    ``inter_bytes`` summed: they leave through one interface). Nodes that hold ranks of several
    replicas or stages carry as many copies of the pattern."""
    if not machine.ranks_per_node:
        return inter_bytes
    P = prod(grid)
    node = machine.node_of(np.arange(P))
    per_node = np.bincount(node, weights=inter_bytes.ravel())
    copies = max(1, machine.ranks_per_node // P)
    return (per_node[node] * copies).reshape(grid)


def _other_layer(lp, pl, step, ranks, need_dx):
    """A layer without halos (fully connected, batch norm, ...): its activation Allreduces, FLOPs
    and memory, the same on every rank of the grid (rank (0, 0)'s: the largest)."""
    B, isz = step.batch, step.itemsize
    lp.allreduce_act = pl.activation_payload(B, isz, need_dx)
    # a tower network's exchanges run over the pipe ranks (the towers), not the spatial grid
    lp.allreduce_pipe = pl.activation_payload(B, isz, need_dx, over="pipe")
    lp.tile = tuple(pl.out_layout.local_shape)
    lp.flops_max = pl.flops(B, need_dx)
    lp.act_bytes_max = pl.activation_bytes(B, isz)
    lp.mem_bytes_max = pl.memory_traffic(B, isz, need_dx)
    ranks.add_work(lp, lp.flops_max, lp.mem_bytes_max, step)
    ranks.add(lp.stage, "act_bytes", lp.act_bytes_max)


def _layer_plan(i, layer, pl, stage, step, state_arrays):
    """A :class:`LayerPlan` with what a layer's parameters cost: memory and gradient payloads."""
    isz = step.itemsize
    lp = LayerPlan(i, layer.name or config_name(layer), config_name(layer), tuple(layer.in_shape),
                   tuple(layer.out_shape), stage=stage)
    lp.param_bytes = pl.local_param_count * isz * (2 + state_arrays)
    lp.param_global = pl.param_count
    lp.array_local_max = max([pp.local_size * isz for pp in pl.params], default=0)
    lp.array_global_max = max([pp.size * isz for pp in pl.params], default=0)
    lp.work_bytes = pl.workspace_bytes(step.batch, isz, input_gradient=i > 0, threads=step.threads)
    lp.transient_bytes = pl.transient_bytes(step.batch, isz, input_gradient=i > 0)
    # gradient buckets: over grad (spatial x data ranks) and over data (replicas)
    payload = pl.gradient_payload(isz)
    lp.bucket_bytes = {over.comm: payload[over] for over, n in ((OVER_GRAD, step.P * step.data),
                                                                 (OVER_DATA, step.data)) if n > 1}
    lp.allreduce_grad = sum(lp.bucket_bytes.values())
    return lp


def _layer_times(layers, step):
    """Every layer's ``time``: compute, memory, halo and Allreduce seconds. A gradient bucket is
    one Allreduce: its cost is counted once, on the first layer in it, for the bucket's whole
    payload (the other layers' share of it shows as 0 s)."""
    machine, P, data, pipe = step.machine, step.P, step.data, step.pipe
    # Who takes part in each communicator, as world ranks of the first replica and stage (the
    # others are alike): their spread over nodes decides how many steps cross the network.
    comms = {OVER_GRAD.comm: [(d * pipe) * P + r for d in range(data) for r in range(P)],
             OVER_DATA.comm: [(d * pipe) * P for d in range(data)],
             "spatial": list(range(P)), "pipe": [p * P for p in range(pipe)]}
    share = machine.sharing(P * data * pipe)    # every rank reduces at once

    def reduce_time(nbytes, over):
        ranks_of = comms[over]
        return allreduce(nbytes, len(ranks_of), machine, members_per_node(ranks_of, machine), share)
    bucket_total = {over: sum(lp.bucket_bytes.get(over, 0) for lp in layers) for over in (OVER_GRAD.comm, OVER_DATA.comm)}
    first = {over: next((lp for lp in layers if lp.bucket_bytes.get(over)), None) for over in bucket_total}
    for lp in layers:
        compute, memory = machine.seconds(lp.kind, lp.flops_max, lp.mem_bytes_max)
        t = {"compute": compute * step.slowdown, "memory": memory * step.slowdown,
             "halo": lp.halo_time_max if P > 1 else 0.0,
             "allreduce": 0.0}
        if lp.allreduce_act:
            t["allreduce"] += (reduce_time(lp.allreduce_act - lp.allreduce_pipe, "spatial")
                               + reduce_time(lp.allreduce_pipe, "pipe"))
        for over in bucket_total:
            if lp is first[over]:
                t["allreduce"] += reduce_time(bucket_total[over], over)
        lp.time = t


def _cost_time(last, step, ranks):
    """With a measured ``"cost"`` rate (:mod:`.calibrate`): what a step spends outside the
    layers (the cost and its gradient, the update), per byte of the last layer's output, is
    charged to the last layer's memory time."""
    rate = step.machine.rates.get("cost")
    if not rate:
        return
    seconds = step.batch * step.itemsize * prod(last.tile) / rate * step.slowdown
    last.time["memory"] += seconds
    ranks.add(last.stage, "time_memory", seconds)


def _notes(layers, data, batch_global):
    notes = []
    if data > batch_global:
        notes.append(f"{data} data replicas for a batch of {batch_global} images: {data - batch_global} replicas "
                     "get no rows and only add Allreduce work; use at most as many replicas as images "
                     "in a batch (or a larger batch)")
    for lp in layers:
        if lp.far_peers:
            notes.append(f"layer {lp.name}: tiles of {'x'.join(map(str, lp.tile[1:]))} are narrower than its "
                         f"halo: a rank exchanges with ranks beyond its neighbours, and halo bytes "
                         "grow faster than the work shrinks (fewer ranks on this grid would help)")
    return notes


def plan_model(model, image_shape, nranks=1, grid=None, batch=None, itemsize=4, machine=None,
               state_arrays=1, data=1, pipe=1):
    """The :class:`Plan` of ``model`` (an MLP/Convnet/GB; shapes inferred here) on ``nranks``
    spatial ranks (grid chosen as a run would choose it, or ``grid`` checked) times ``data``
    replicas and ``pipe`` stages, for minibatches of ``batch`` rows (default: the model's
    ``batch_size``, else 1; a replica runs ``ceil(batch / data)`` of them) of ``itemsize``-byte
    numbers. ``state_arrays``: the optimiser's arrays per parameter beside its value and gradient
    (1: a momentum velocity, 2: Adam's moments; ``Model.optimizer_state_names``)."""
    machine = machine or Machine()
    model.infer_shapes(tuple(image_shape))
    planes = model.planes()
    grid = choose_grid(nranks, planes) if grid is None else check_grid(grid, nranks, planes)
    B_global = int(batch or model.batch_size or 1)
    step = _Step(grid, data, pipe, -(-B_global // data), int(itemsize), machine)
    stage_of = model.stage_plan(pipe)
    ranks = _RankSums(grid)
    layers = []
    for i, (layer, pl) in enumerate(zip(model.layers, model.placements(step.position()))):
        lp = _layer_plan(i, layer, pl, stage_of[i], step, state_arrays)
        if pl.halos:
            _window_layer(lp, pl, step, ranks, need_dx=i > 0)
        else:
            _other_layer(lp, pl, step, ranks, need_dx=i > 0)
        layers.append(lp)
    _layer_times(layers, step)
    if layers:
        _cost_time(layers[-1], step, ranks)
    for st in set(stage_of):
        ranks.add_step_times(st)
    plan = Plan(nranks * data * pipe, tuple(grid), step.batch, step.itemsize, machine, layers, data=data,
                pipe=pipe, batch_global=B_global, state_arrays=state_arrays)
    plan.notes += _notes(layers, data, B_global)
    plan._ranks = ranks.busiest(set(stage_of))
    return plan

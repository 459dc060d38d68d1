"""A cost model of one training step on N ranks, from the geometry alone (no MPI, no arrays).

For every layer of a model and a spatial grid ``Py x Px`` (any size: the work is
``O(layers * (Py^2 + Px^2 + N))``), :func:`plan_model` gives, per rank (the largest over ranks
is the critical one) and in total:

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

Every layer fact comes from the layers' placements (:mod:`distnet.layers.placement`): which
layers exchange halos (and how often, on which windows), the parameters each rank holds and the
communicator that sums their gradients, the activation Allreduces, the multiply-adds.

The step modelled is the supervised one (the training step: forward, backward, gradient sums).
With data replicas each replica's rows of the batch run on its ranks and the gradient bucket is
summed over ``data x Py x Px`` ranks; with pipeline stages a rank runs its stage's layers only
(per-rank figures are the largest stage's). GB's pretraining steps are not modelled.
"""
from dataclasses import asdict, dataclass, field

import numpy as np

from ..config.builder import config_name
from ..geometry import block_partition, check_grid, choose_grid
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


class _Axis:
    """One axis of a window layer on ``P`` grid ranks: owned input blocks, output blocks and
    chunk spans, and the overlap matrix ``ov[a, b] = |own(a) ∩ chunk(b)|``."""

    def __init__(self, length, window, parts):
        out_len = window.output_length(length)
        self.own = [(o, o + n) for o, n in block_partition(length, parts)]
        self.out = [(o, o + n) for o, n in block_partition(out_len, parts)]
        self.chunk = [window.input_span(o0, o1 - o0) for o0, o1 in self.out]
        own0 = np.array([a for a, _ in self.own])[:, None]
        own1 = np.array([b for _, b in self.own])[:, None]
        ch0 = np.array([a for a, _ in self.chunk])[None, :]
        ch1 = np.array([b for _, b in self.chunk])[None, :]
        self.ov = np.maximum(np.minimum(own1, ch1) - np.maximum(own0, ch0), 0)   # (P, P)


def _halo(in_hw, windows, grid):
    """Per-rank pixel counts (per sample and channel) of one exchange:
    ``(sent, received, messages sent)`` as ``(Py, Px)`` arrays, plus the axes."""
    ay = _Axis(in_hw[0], windows[0], grid[0])
    ax = _Axis(in_hw[1], windows[1], grid[1])
    # sent by (iy, ix) = sum over peers (iy', ix') != me of ov_y[iy, iy'] * ov_x[ix, ix']
    sy, sx = ay.ov.sum(axis=1), ax.ov.sum(axis=1)
    dy, dx = np.diag(ay.ov), np.diag(ax.ov)
    sent = np.outer(sy, sx) - np.outer(dy, dx)
    ry, rx = ay.ov.sum(axis=0), ax.ov.sum(axis=0)        # = |chunk ∩ image| per axis
    recv = np.outer(ry, rx) - np.outer(dy, dx)
    ny, nx = (ay.ov > 0).sum(axis=1), (ax.ov > 0).sum(axis=1)
    msgs = np.outer(ny, nx) - np.outer(dy > 0, dx > 0)
    return sent, recv, msgs, ay, ax


def _node_split(ay, ax, grid, machine):
    """Which part of one exchange crosses nodes: ``(fwd_inter, bwd_inter, msgs_inter)`` as
    ``(Py, Px)`` arrays (pixels per sample and channel sent to ranks of another node, forward
    and adjoint, and those messages) for the ranks of the first replica and stage (world ranks
    ``iy * Px + ix``). Peers are visited by offset: a window layer's overlaps are banded (a
    handful of offsets), so this costs ``O(offsets * P)``, not ``O(P^2)``."""
    Py, Px = grid
    fwd, bwd, msgs = (np.zeros(grid) for _ in range(3))
    if not machine.ranks_per_node or machine.ranks_per_node >= Py * Px:
        return fwd, bwd, msgs
    rank = np.arange(Py * Px).reshape(grid)

    def band(ov, o):           # ov[i, i + o] and ov[i + o, i] for every i (0 off the ends)
        n = ov.shape[0]
        i = np.arange(n)
        ok = (i + o >= 0) & (i + o < n)
        j = np.clip(i + o, 0, n - 1)
        return np.where(ok, ov[i, j], 0), np.where(ok, ov[j, i], 0)
    offs_y = [o for o in range(-Py + 1, Py) if band(ay.ov, o)[0].any() or band(ay.ov, o)[1].any()]
    offs_x = [o for o in range(-Px + 1, Px) if band(ax.ov, o)[0].any() or band(ax.ov, o)[1].any()]
    for oy in offs_y:
        sy, ry = band(ay.ov, oy)
        for ox in offs_x:
            if oy == 0 and ox == 0:
                continue
            sx, rx = band(ax.ov, ox)
            other = machine.node_of(rank + oy * Px + ox) != machine.node_of(rank)
            sent, back = np.outer(sy, sx), np.outer(ry, rx)
            fwd += np.where(other, sent, 0)
            bwd += np.where(other, back, 0)
            msgs += np.where(other, sent > 0, 0)
    return fwd, bwd, msgs


def _node_share(inter_bytes, grid, machine):
    """``(Py, Px)``: the inter-node bytes of each rank's whole node (its ranks' ``inter_bytes``
    summed: they leave through one interface). Nodes that hold ranks of several replicas or
    stages carry as many copies of the pattern."""
    Py, Px = grid
    if not machine.ranks_per_node:
        return inter_bytes
    node = machine.node_of(np.arange(Py * Px))
    per_node = np.bincount(node, weights=inter_bytes.ravel())
    copies = max(1, machine.ranks_per_node // (Py * Px))
    return (per_node[node] * copies).reshape(grid)


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
    Py, Px = grid
    P = Py * Px
    B_global = int(batch or model.batch_size or 1)
    B = -(-B_global // data)
    isz = int(itemsize)
    stage_of = model.stage_plan(pipe)
    # Rank (0, 0) holds the largest tiles (the first blocks are the longer ones).
    placements = model.placements(GridPosition(grid, (0, 0), data, pipe))
    out = []
    ranks = {}                      # (stage, kind) -> (Py, Px) array summed over the stage's layers

    def acc(stage, kind, arr):
        key = (stage, kind)
        ranks[key] = ranks.get(key, 0) + np.broadcast_to(np.asarray(arr, dtype=np.float64), (Py, Px))

    m = machine
    for i, (layer, pl) in enumerate(zip(model.layers, placements)):
        st = stage_of[i]
        lp = LayerPlan(i, layer.name or config_name(layer), config_name(layer),
                       tuple(layer.in_shape), tuple(layer.out_shape))
        need_dx = i > 0
        local_params = sum(pp.local_size for pp in pl.params)
        lp.stage = st
        lp.param_bytes = local_params * isz * (2 + state_arrays)
        lp.param_global = sum(pp.size for pp in pl.params)
        lp.array_local_max = max([pp.local_size * isz for pp in pl.params], default=0)
        lp.array_global_max = max([pp.size * isz for pp in pl.params], default=0)
        # gradient buckets: over grad (spatial x data ranks) and over data (replicas)
        lp.bucket_bytes = {over: sum(pp.local_size for pp in pl.params if pp.reduce_over == over) * isz
                           for over, n in ((OVER_GRAD, P * data), (OVER_DATA, data)) if n > 1}
        lp.allreduce_grad = sum(lp.bucket_bytes.values())
        if pl.halos:
            halo = pl.halos[0]
            C, H, W = layer.in_shape
            K = layer.out_shape[0]
            wy, wx = halo.windows
            sent, recv, msgs, ay, ax = _halo((H, W), (wy, wx), grid)
            out_h = max(b - a for a, b in ay.out)
            out_w = max(b - a for a, b in ax.out)
            ch_h = max(b - a for a, b in ay.chunk)
            ch_w = max(b - a for a, b in ax.chunk)
            lp.tile, lp.chunk = (K, out_h, out_w), (C, ch_h, ch_w)
            lp.far_peers = any(bool(np.triu(a.ov, 2).any() or np.tril(a.ov, -2).any()) for a in (ay, ax))
            per = B * C * isz
            oh = np.array([b - a for a, b in ay.out])[:, None]
            ow = np.array([b - a for a, b in ax.out])[None, :]
            chh = np.array([b - a for a, b in ay.chunk])[:, None]
            chw = np.array([b - a for a, b in ax.chunk])[None, :]
            if P > 1:
                lp.exchanges = halo.per_step
                lp.adjoints = lp.exchanges if need_dx else 0
                f_r, b_r = lp.exchanges * per * sent, lp.adjoints * per * recv
                m_r = lp.exchanges * msgs + lp.adjoints * msgs
                lp.halo_fwd_max, lp.halo_fwd_total = int(f_r.max()), int(f_r.sum())
                lp.halo_bwd_max, lp.halo_bwd_total = int(b_r.max()), int(b_r.sum())
                lp.halo_msgs_max = int(m_r.max())
                acc(st, "halo_fwd", f_r)
                acc(st, "halo_bwd", b_r)
                acc(st, "halo_msgs", m_r)
                f_x, b_x, m_x = _node_split(ay, ax, grid, m)
                f_x, b_x = lp.exchanges * per * f_x, lp.adjoints * per * b_x
                m_x = (lp.exchanges + lp.adjoints) * m_x
                inter = f_x + b_x
                acc(st, "halo_inter", inter)
                t_r = ((m_r - m_x) * m.alpha + m_x * m.alpha_inter + (f_r + b_r - inter) / m.beta
                       + _node_share(inter, grid, m) / m.beta_inter)
                lp.halo_inter_max = int(inter.max())
                lp.halo_time_max = float(t_r.max())
                acc(st, "time_halo", t_r)
            outpix = out_h * out_w
            outpix_r = oh * ow
            if pl.macs:
                per_pixel = pl.macs / (pl.out_layout.local_shape[1] * pl.out_layout.local_shape[2])
                lp.flops_max = 2.0 * B * per_pixel * outpix * (3 if need_dx else 2)
                acc(st, "flops", 2.0 * B * per_pixel * outpix_r * (3 if need_dx else 2))
            # memory-bound traffic: read the chunk and write the output, both ways
            lp.mem_bytes_max = 2.0 * B * isz * (C * ch_h * ch_w + K * outpix) * (2 if need_dx else 1)
            lp.act_bytes_max = B * isz * (K * outpix + C * ch_h * ch_w)
            acc(st, "mem_bytes", 2.0 * B * isz * (C * chh * chw + K * outpix_r) * (2 if need_dx else 1))
            acc(st, "act_bytes", B * isz * (K * outpix_r + C * chh * chw))
        else:
            nout = int(np.prod(pl.out_layout.local_shape))
            nin = pl.macs // nout if nout else 0
            lp.allreduce_act = B * isz * sum(c.per_sample for c in pl.collectives
                                             if not c.backward or need_dx)
            lp.allreduce_act += 8 * sum(c.per_step for c in pl.collectives)   # float64 statistics (batch norm)
            # a tower network's exchanges run over the pipe ranks (the towers), not the spatial grid
            lp.allreduce_pipe = B * isz * sum(c.per_sample for c in pl.collectives
                                              if c.over == "pipe" and (not c.backward or need_dx))
            lp.tile = tuple(pl.out_layout.local_shape)
            lp.flops_max = 2.0 * B * pl.macs * (3 if need_dx else 2)
            lp.act_bytes_max = B * isz * nout * 2            # pre-activation and output
            lp.mem_bytes_max = 2.0 * B * isz * (nin + nout)
            acc(st, "flops", lp.flops_max)
            acc(st, "act_bytes", lp.act_bytes_max)
            acc(st, "mem_bytes", lp.mem_bytes_max)
        out.append(lp)
    # Who takes part in each communicator, as world ranks of the first replica and stage (the
    # others are alike): their spread over nodes decides how many steps cross the network.
    spatial = range(P)
    comms = {OVER_GRAD: [(d * pipe) * P + r for d in range(data) for r in spatial],
             OVER_DATA: [(d * pipe) * P for d in range(data)],
             "spatial": list(spatial), "pipe": [p * P for p in range(pipe)]}
    share = machine.sharing(P * data * pipe)    # every rank reduces at once

    def reduce_time(nbytes, over):
        ranks_of = comms[over]
        return allreduce(nbytes, len(ranks_of), machine, members_per_node(ranks_of, machine), share)

    # a gradient bucket is one Allreduce: its cost is counted once, on the first layer in it,
    # for the bucket's whole payload (the other layers' share of it shows as 0 s)
    bucket_total = {over: sum(lp.bucket_bytes.get(over, 0) for lp in out) for over in (OVER_GRAD, OVER_DATA)}
    first = {over: next((lp for lp in out if lp.bucket_bytes.get(over)), None) for over in bucket_total}
    for lp in out:
        t = {"compute": lp.flops_max / machine.flop_rate,
             "memory": lp.mem_bytes_max / machine.mem_rate,
             "halo": lp.halo_time_max if P > 1 else 0.0,
             "allreduce": 0.0}
        if lp.allreduce_act:
            t["allreduce"] += (reduce_time(lp.allreduce_act - lp.allreduce_pipe, "spatial")
                               + reduce_time(lp.allreduce_pipe, "pipe"))
        for over in bucket_total:
            if lp is first[over]:
                t["allreduce"] += reduce_time(bucket_total[over], over)
        lp.time = t
    for st in set(stage_of):
        if (st, "flops") in ranks:
            acc(st, "time_compute", ranks[(st, "flops")] / machine.flop_rate)
        if (st, "mem_bytes") in ranks:
            acc(st, "time_memory", ranks[(st, "mem_bytes")] / machine.mem_rate)
        acc(st, "time_step", sum(ranks.get((st, k), 0) for k in ("time_compute", "time_memory", "time_halo")))
    plan = Plan(nranks * data * pipe, tuple(grid), B, isz, machine, out, data=data, pipe=pipe,
                batch_global=B_global, state_arrays=state_arrays)
    if data > B_global:
        plan.notes.append(f"{data} data replicas for a batch of {B_global} images: {data - B_global} replicas "
                          "get no rows and only add Allreduce work; use at most as many replicas as images "
                          "in a batch (or a larger batch)")
    for lp in out:
        if lp.far_peers:
            plan.notes.append(f"layer {lp.name}: tiles of {lp.tile[1]}x{lp.tile[2]} are narrower than its "
                              f"halo: a rank exchanges with ranks beyond its neighbours, and halo bytes "
                              "grow faster than the work shrinks (fewer ranks on this grid would help)")
    # per rank: the stage whose ranks carry the most (a rank runs its own stage's layers only)
    plan._ranks = {kind: np.max([ranks[(st, kind)] for st in set(stage_of) if (st, kind) in ranks], axis=0)
                   for kind in {k for _, k in ranks}}
    return plan

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
  keeps for the backward pass) and parameter memory (weights + gradients + velocity);
* a predicted step time from an alpha-beta network model (:class:`Machine`): a message costs
  ``alpha + bytes / beta``, a ring Allreduce of ``n`` bytes on ``P`` ranks
  ``2 (P-1) alpha + 2 (P-1)/P n / beta``, compute ``flops / flop_rate``; nothing overlaps.

The step modelled is the supervised one (``MLP.train_step``: forward, backward, gradient sums),
with every layer distributed when ``N > 1`` (as ``distnet distribute`` makes it). GB's
pretraining steps are not modelled.
"""
from dataclasses import asdict, dataclass, field

import numpy as np

from .comm.topology import choose_grid, check_grid
from .geometry import block_partition
from .layers.fc import LayerWithNoBias
from .layers.lcn import LCNLayer
from .layers.local import LocalFilteringLayer
from .layers.spatial import ConvLayer, WindowLayer


@dataclass
class Machine:
    """Constants of the alpha-beta model (per rank). Defaults: ``alpha`` 2 us per message (MPI
    latency inside a node / on a low-latency fabric), ``beta`` 10 GB/s per rank (shared memory
    or a 100 Gb/s link), ``flop_rate`` 50 GFLOP/s per rank (one AVX-512 core running numpy's
    GEMMs), ``mem_rate`` 5 GB/s per rank for the memory-bound parts (copies, pooling, LCN)."""

    alpha: float = 2e-6
    beta: float = 10e9
    flop_rate: float = 50e9
    mem_rate: float = 5e9


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
    allreduce_grad: int = 0     # gradient payload bytes per rank per step
    allreduce_act: int = 0      # activation payload bytes per rank per step
    flops_max: float = 0.0
    mem_bytes_max: float = 0.0  # memory-bound traffic estimate (bytes moved), per rank
    act_bytes_max: int = 0      # activation memory kept per rank
    param_bytes: int = 0        # weights + gradients (+ velocity) per rank (largest shard)
    time: dict = field(default_factory=dict)


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

    def __post_init__(self):
        self._ranks = {}   # kind -> (Py, Px) array summed over layers (not part of asdict)

    def totals(self):
        r = self._ranks
        t = {k: sum(getattr(lp, k) for lp in self.layers) for k in (
            "halo_fwd_total", "halo_bwd_total", "allreduce_grad", "allreduce_act", "param_bytes")}
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
        t["images_per_s"] = self.batch / t["time"]["step"] if t["time"]["step"] > 0 else float("inf")
        return t

    def to_dict(self):
        d = asdict(self)
        d["totals"] = self.totals()
        return d


def _ceil_div(a, b):
    return -(-a // b)


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


def _ring(nbytes, P, m):
    if P <= 1 or nbytes == 0:
        return 0.0
    return 2 * (P - 1) * m.alpha + 2 * (P - 1) / P * nbytes / m.beta


def plan_model(model, image_shape, nranks=1, grid=None, batch=None, itemsize=4, machine=None,
               momentum=True):
    """The :class:`Plan` of ``model`` (an MLP/Convnet/GB; shapes inferred here) on ``nranks``
    spatial ranks (grid chosen as a run would choose it, or ``grid`` checked), for minibatches of
    ``batch`` (default: the model's ``batch_size``, else 1) of ``itemsize``-byte numbers.
    ``momentum``: count a velocity buffer per parameter."""
    machine = machine or Machine()
    model.infer_shapes(tuple(image_shape))
    planes = [p for layer in model.layers for p in layer.planes()]
    grid = choose_grid(nranks, planes) if grid is None else check_grid(grid, nranks, planes)
    Py, Px = grid
    P = Py * Px
    B = int(batch or getattr(model, "batch_size", None) or 1)
    isz = int(itemsize)
    out = []
    grad_bucket = 0
    spatial_in = True      # is the current activation split over the grid?
    ranks = {}

    def acc(kind, arr):
        ranks[kind] = ranks.get(kind, 0) + np.broadcast_to(np.asarray(arr, dtype=np.float64), (Py, Px))

    m = machine
    for i, layer in enumerate(model.layers):
        lp = LayerPlan(i, layer.name or type(layer).__name__, type(layer).__name__,
                       tuple(layer.in_shape), tuple(layer.out_shape))
        need_dx = i > 0
        if isinstance(layer, WindowLayer):
            C, H, W = layer.in_shape
            K, Ho, Wo = layer.out_shape
            wy, wx = layer.windows
            sent, recv, msgs, ay, ax = _halo((H, W), (wy, wx), grid)
            out_h = max(b - a for a, b in ay.out)
            out_w = max(b - a for a, b in ax.out)
            ch_h = max(b - a for a, b in ay.chunk)
            ch_w = max(b - a for a, b in ax.chunk)
            lp.tile, lp.chunk = (K, out_h, out_w), (C, ch_h, ch_w)
            per = B * C * isz
            oh = np.array([b - a for a, b in ay.out])[:, None]
            ow = np.array([b - a for a, b in ax.out])[None, :]
            chh = np.array([b - a for a, b in ay.chunk])[:, None]
            chw = np.array([b - a for a, b in ax.chunk])[None, :]
            if P > 1:
                lp.exchanges = 2 if isinstance(layer, LCNLayer) else 1
                lp.adjoints = lp.exchanges if need_dx else 0
                f_r, b_r = lp.exchanges * per * sent, lp.adjoints * per * recv
                m_r = lp.exchanges * msgs + lp.adjoints * msgs
                lp.halo_fwd_max, lp.halo_fwd_total = int(f_r.max()), int(f_r.sum())
                lp.halo_bwd_max, lp.halo_bwd_total = int(b_r.max()), int(b_r.sum())
                lp.halo_msgs_max = int(m_r.max())
                acc("halo_fwd", f_r)
                acc("halo_bwd", b_r)
                acc("halo_msgs", m_r)
                acc("time_halo", m_r * m.alpha + (f_r + b_r) / m.beta)
            fh, fw = layer.fshape
            outpix = out_h * out_w
            outpix_r = oh * ow
            if isinstance(layer, (ConvLayer, LocalFilteringLayer)):
                fwd = 2.0 * B * K * C * fh * fw * outpix
                lp.flops_max = fwd * (3 if need_dx else 2)
                acc("flops", 2.0 * B * K * C * fh * fw * outpix_r * (3 if need_dx else 2))
                if isinstance(layer, ConvLayer):
                    nparam = K * C * fh * fw
                    grad_bucket += nparam * isz
                    lp.allreduce_grad = nparam * isz if P > 1 else 0
                else:
                    nparam = K * outpix * C * fh * fw
                lp.param_bytes = nparam * isz * (3 if momentum else 2)
            # memory-bound traffic: read the chunk and write the output, both ways
            lp.mem_bytes_max = 2.0 * B * isz * (C * ch_h * ch_w + K * outpix) * (2 if need_dx else 1)
            lp.act_bytes_max = B * isz * (K * outpix + C * ch_h * ch_w)
            acc("mem_bytes", 2.0 * B * isz * (C * chh * chw + K * outpix_r) * (2 if need_dx else 1))
            acc("act_bytes", B * isz * (K * outpix_r + C * chh * chw))
            spatial_in = True
        elif isinstance(layer, LayerWithNoBias):
            nout = layer.nout
            if spatial_in and len(layer.in_shape) == 3 and P > 1:
                C, H, W = layer.in_shape
                nin = C * (_ceil_div(H, Py)) * (_ceil_div(W, Px))
                lp.allreduce_act = B * nout * isz
            else:
                nin = layer.nfeat
            lp.tile = (nout,)
            lp.flops_max = 2.0 * B * nout * nin * (3 if need_dx else 2)
            lp.param_bytes = (nout * nin + (nout if layer.has_bias else 0)) * isz * (3 if momentum else 2)
            lp.act_bytes_max = B * isz * nout * 2            # pre-activation and output
            lp.mem_bytes_max = 2.0 * B * isz * (nin + nout)
            acc("flops", lp.flops_max)
            acc("act_bytes", lp.act_bytes_max)
            acc("mem_bytes", lp.mem_bytes_max)
            spatial_in = False
        out.append(lp)
    # the gradient bucket is one Allreduce: its latency is counted once (on the first conv)
    first_conv = next((lp for lp in out if lp.allreduce_grad), None)
    for lp in out:
        t = {"compute": lp.flops_max / machine.flop_rate,
             "memory": lp.mem_bytes_max / machine.mem_rate,
             "halo": (lp.halo_msgs_max * machine.alpha
                      + (lp.halo_fwd_max + lp.halo_bwd_max) / machine.beta) if P > 1 else 0.0,
             "allreduce": 0.0}
        if lp.allreduce_act:
            t["allreduce"] += _ring(lp.allreduce_act, P, machine)
        if lp.allreduce_grad and P > 1:
            ring = _ring(lp.allreduce_grad, P, machine)
            if lp is not first_conv:
                ring -= 2 * (P - 1) * machine.alpha
            t["allreduce"] += ring
        lp.time = t
    if "flops" in ranks:
        acc("time_compute", ranks["flops"] / machine.flop_rate)
    if "mem_bytes" in ranks:
        acc("time_memory", ranks["mem_bytes"] / machine.mem_rate)
    acc("time_step", sum(ranks.get(k, 0) for k in ("time_compute", "time_memory", "time_halo")))
    plan = Plan(nranks, tuple(grid), B, isz, machine, out)
    plan._ranks = ranks
    return plan


def _fmt_bytes(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _fmt_shape(s):
    return "x".join(str(v) for v in s) if s else "-"


def format_plan(plan):
    """The plan as a text table (one row per layer, then totals and the predicted step time)."""
    m = plan.machine
    head = (f"plan: {plan.nranks} rank(s), grid {plan.grid[0]}x{plan.grid[1]}, batch {plan.batch}, "
            f"{plan.itemsize}-byte numbers; alpha {m.alpha:g} s, beta {m.beta:g} B/s, "
            f"{m.flop_rate:g} FLOP/s, {m.mem_rate:g} B/s memory per rank")
    cols = ["#", "layer", "kind", "tile", "chunk", "halo fwd", "halo bwd", "msgs", "allreduce",
            "GFLOP", "act mem", "time ms"]
    rows = []
    for lp in plan.layers:
        rows.append([str(lp.index), lp.name, lp.kind, _fmt_shape(lp.tile), _fmt_shape(lp.chunk),
                     _fmt_bytes(lp.halo_fwd_max), _fmt_bytes(lp.halo_bwd_max), str(lp.halo_msgs_max),
                     _fmt_bytes(lp.allreduce_grad + lp.allreduce_act), f"{lp.flops_max / 1e9:.3f}",
                     _fmt_bytes(lp.act_bytes_max), f"{sum(lp.time.values()) * 1e3:.2f}"])
    t = plan.totals()
    rows.append(["", "total", "", "", "", _fmt_bytes(t["halo_fwd_max"]), _fmt_bytes(t["halo_bwd_max"]),
                 str(t["halo_msgs_max"]), _fmt_bytes(t["allreduce_grad"] + t["allreduce_act"]),
                 f"{t['flops_max'] / 1e9:.3f}", _fmt_bytes(t["act_bytes_max"]),
                 f"{t['time']['step'] * 1e3:.2f}"])
    widths = [max(len(r[j]) for r in rows + [cols]) for j in range(len(cols))]
    lines = [head, "  ".join(c.rjust(w) if j >= 3 else c.ljust(w) for j, (c, w) in enumerate(zip(cols, widths)))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) if j >= 3 else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
    tt = t["time"]
    lines.append(f"per rank per step (largest rank): halo {_fmt_bytes(t['halo_fwd_max'] + t['halo_bwd_max'])} "
                 f"sent, allreduce payload {_fmt_bytes(t['allreduce_grad'] + t['allreduce_act'])}, "
                 f"{t['flops_max'] / 1e9:.3f} GFLOP, activations {_fmt_bytes(t['act_bytes_max'])}, "
                 f"parameters {_fmt_bytes(t['param_bytes'])}")
    lines.append(f"all ranks per step: halo {_fmt_bytes(t['halo_fwd_total'] + t['halo_bwd_total'])}")
    lines.append(f"predicted step: {tt['step'] * 1e3:.2f} ms = compute {tt['compute'] * 1e3:.2f} + memory "
                 f"{tt['memory'] * 1e3:.2f} + halo {tt['halo'] * 1e3:.2f} + allreduce "
                 f"{tt['allreduce'] * 1e3:.2f} ms -> {t['images_per_s']:.1f} images/s")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)


__all__ = ["LayerPlan", "Machine", "Plan", "format_plan", "plan_model"]

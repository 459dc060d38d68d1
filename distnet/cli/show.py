"""``distnet show EXP.yaml -n N``: how an experiment is cut over N ranks, from geometry alone
(no MPI, no weights, no data beyond the dataset's header).

Per layer: the global output shape, the output tile of rank 0 and the largest one, the input
chunk (tile + halo) of the largest rank, the halo widths (ghost rows/columns received from
neighbours on each side, the largest over the ranks; zero padding at the image border is not
counted), the parameters (global and on the rank holding most), and the activation memory per
rank (outputs plus halo chunks of one minibatch, the rank holding most). With pipeline stages a
``stage`` column is added and the per-rank totals are those of the largest stage (a rank holds
its own stage's layers only); with data replicas (``data``, or ``dist_mode: datapar``) memory is
for the replica's rows of a minibatch.
"""
from dataclasses import dataclass

import numpy as np

from ..comm.topology import check_grid, choose_grid
from ..errors import TopologyError
from ..geometry import tile_of
from ..geometry.extent import halo_extents, largest_tile  # h14a: O(Py + Px), not O(N^2)


@dataclass
class LayerRow:
    index: int
    name: str
    kind: str
    global_shape: tuple
    rank0_shape: tuple
    largest_shape: tuple
    chunk_shape: tuple       # input chunk (tile + halo + padding) of the largest rank; None: no window
    halo: tuple              # (top, bottom, left, right) ghost widths, max over ranks; None: no window
    params_global: int
    params_rank: int         # most on any rank
    sharded: bool
    act_bytes: int           # per rank (the most), one minibatch: output + chunk
    stage: int = 0           # pipeline stage holding the layer


def topology_for(exp, nranks):
    """``(grid, data, pipe)`` the run would use on ``nranks`` ranks (TopologyError otherwise),
    as :meth:`~distnet.experiments.fit.FitExperiment.make_topology` builds it: ``dist_mode:
    datapar`` makes every rank of a stage a data replica of whole images (unless ``data`` is
    given); otherwise the ranks left after ``data x pipe`` form the spatial grid."""
    data, pipe = exp.data, getattr(exp, "pipe", 1)
    if exp.dist_flag and getattr(exp.dataset, "dist_mode", None) == "datapar" and data == 1:
        if nranks % pipe:
            raise TopologyError(f"{nranks} ranks cannot hold pipe={pipe} stages; use a multiple of {pipe}")
        return (1, 1), nranks // pipe, pipe
    replicas = data * pipe
    if nranks < 1 or nranks % replicas:
        raise TopologyError(f"{nranks} ranks cannot hold data={data} x pipe={pipe} replicas; use a "
                            f"multiple of {replicas}")
    nspatial = nranks // replicas
    planes = exp.model.planes()
    if not exp.dist_flag or getattr(exp.dataset, "dist_mode", None) == "datapar":
        if nspatial != 1:
            why = ("dist_mode datapar gives every rank whole images" if exp.dist_flag
                   else "this experiment has dist_flag: False")
            raise TopologyError(f"{why}: it runs on data x pipe = {replicas} rank(s), not {nranks}")
        return (1, 1), data, pipe
    if exp.grid is not None:
        return check_grid(exp.grid, nspatial, planes, replicas), data, pipe
    return choose_grid(nspatial, planes), data, pipe  # raises naming the sizes that work


def layer_rows(exp, grid, batch):
    """One :class:`LayerRow` per layer of the (shape-inferred) model."""
    itemsize = np.dtype(exp.backend.dtype).itemsize
    rows = []
    spatial_input = True
    for i, layer in enumerate(exp.model.layers):
        out = tuple(layer.out_shape)
        inp = tuple(layer.in_shape)
        chunk_shape = halo = None
        chunk_elems = 0
        if len(out) == 3:
            rank0, big = tile_of(out[1:], grid, (0, 0)), largest_tile(out[1:], grid)
            rank0_shape, largest_shape = (out[0], *rank0.shape), (out[0], *big.shape)
            out_elems = out[0] * big.size
        else:
            rank0_shape = largest_shape = out
            out_elems = out[0]
        windows = getattr(layer, "windows", None)
        if windows is not None and len(inp) == 3:
            halo, big = halo_extents(inp[1:], *windows, grid)
            chunk_shape = (inp[0], *big.shape)
            chunk_elems = inp[0] * big.size
        pg, pr, sharded = _params(layer, grid, spatial_input)
        rows.append(LayerRow(i, layer.name, type(layer).__name__, out, rank0_shape, largest_shape,
                             chunk_shape, halo, pg, pr, sharded,
                             batch * (out_elems + chunk_elems) * itemsize))
        spatial_input = len(out) == 3
    return rows


def _params(layer, grid, spatial_input):
    """(global count, most on one rank, sharded?) of a layer's parameters, from its shapes."""
    split = tuple(grid) != (1, 1) and getattr(layer, "is_dist", False)
    if hasattr(layer, "nfeat") and hasattr(layer, "nout"):          # fully connected
        bias = layer.nout if getattr(layer, "has_bias", False) else 0
        total = layer.nout * layer.nfeat + bias
        if split and spatial_input and len(layer.in_shape) == 3:
            C = layer.in_shape[0]
            big = largest_tile(layer.in_shape[1:], grid)
            return total, layer.nout * C * big.size + bias, True
        return total, total, False
    if hasattr(layer, "weight_init") and hasattr(layer, "nofm"):
        C, (fh, fw) = layer.in_shape[0], layer.fshape
        K, Ho, Wo = layer.out_shape
        if hasattr(layer, "pretraining"):                           # locally connected: per pixel
            total = K * Ho * Wo * C * fh * fw
            if split:
                big = largest_tile((Ho, Wo), grid)
                return total, K * big.size * C * fh * fw, True
            return total, total, False
        total = K * C * fh * fw                                     # conv: replicated filters
        return total, total, False
    return 0, 0, False


def _shape(s):
    return "-" if s is None else "x".join(str(v) for v in s)


def _mib(n):
    return f"{n / 2**20:.2f} MiB"


def format_show(exp, path, nranks):
    """The text ``distnet show`` prints."""
    exp.model.infer_shapes(exp.dataset.image_shape)
    grid, data, pipe = topology_for(exp, nranks)
    bs = exp.model.batch_size
    per_replica = -(-bs // data) if bs else 1
    rows = layer_rows(exp, grid, per_replica)
    for row, stage in zip(rows, exp.model.stage_plan(pipe)):
        row.stage = stage
    head = [f"{path}: {nranks} rank(s) = data {data} x pipe {pipe} x grid {grid[0]}x{grid[1]}; "
            f"input {_shape(exp.dataset.image_shape)}, dtype {np.dtype(exp.backend.dtype).name}, "
            + (f"batch {bs} ({per_replica} rows per replica)" if bs else "batch: all images (memory per image)")]
    staged = pipe > 1
    cols = ["#", "layer", "class"] + (["stage"] if staged else []) + [
        "global out", "rank 0 out", "largest out", "largest chunk", "halo t/b/l/r", "params",
        "params/rank", "act/rank"]
    table = [[str(r.index), r.name, r.kind] + ([str(r.stage)] if staged else []) + [
              _shape(r.global_shape), _shape(r.rank0_shape), _shape(r.largest_shape),
              _shape(r.chunk_shape), "-" if r.halo is None else "/".join(map(str, r.halo)),
              f"{r.params_global:,}", f"{r.params_rank:,}" + (" (shard)" if r.sharded else ""),
              _mib(r.act_bytes)] for r in rows]
    widths = [max(len(c), *(len(t[k]) for t in table)) for k, c in enumerate(cols)]
    right = {0, len(cols) - 3, len(cols) - 2, len(cols) - 1} | ({3} if staged else set())

    def line(cells):
        return "  ".join(c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = head + [line(cols)] + [line(t) for t in table]
    itemsize = np.dtype(exp.backend.dtype).itemsize
    pg = sum(r.params_global for r in rows)
    # a rank holds the layers of its own stage only: per-rank figures are the largest stage's
    pr = max(sum(r.params_rank for r in rows if r.stage == s) for s in range(pipe))
    act = max(sum(r.act_bytes for r in rows if r.stage == s) for s in range(pipe))
    where = ", its stage's layers only" if staged else ""
    out.append(f"parameters: {pg:,} in total ({_mib(pg * itemsize)}); at most {pr:,} on one rank{where} "
               f"({_mib(pr * itemsize)}, x3 with gradients and momentum)")
    out.append(f"activations per rank (outputs + halo chunks, the rank holding most{where}): {_mib(act)}"
               + ("" if bs else " per image"))
    return "\n".join(out)

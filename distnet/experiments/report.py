"""What ``distnet show`` (alias ``distnet plan``) prints: how an experiment is cut over N ranks,
from geometry alone (no MPI, no weights, no data beyond the dataset's header).

The world is cut by the one grid resolver (:meth:`FitExperiment.layout
<distnet.experiments.fit.FitExperiment.layout>`) and every layer fact is read from the layers'
placements (:mod:`distnet.layers.placement`), so the figures are those of the run.

Per layer: the global output shape, the output tile of rank 0 and the largest one, the input
chunk (tile + halo) of the largest rank, the halo widths (ghost rows/columns received from
neighbours on each side, the largest over the ranks; zero padding at the image border is not
counted), the parameters (global and on the rank holding most), and the activation memory per
rank (outputs plus halo chunks of one minibatch, the rank holding most). With pipeline stages a
``stage`` column is added and the per-rank totals are those of the largest stage (a rank holds
its own stage's layers only); with data replicas (``data``, or ``dist_mode: datapar``) memory is
for the replica's rows of a minibatch.

Cost: tile and halo sizes are separable (a rank's rows depend only on its grid row, its columns
only on its grid column), and the first block of every axis is the longest
(:func:`~distnet.geometry.partition.block_partition`), so rank ``(0, 0)`` holds the largest tile
and the most parameters; the largest chunk and the widest halos are per-axis maxima
(:func:`~distnet.geometry.extent.halo_extents`): one placement per layer and ``O(Py + Px)``
index math, for any rank count (``distnet show -n 1000000`` answers at once).
"""
from dataclasses import dataclass

import numpy as np

from ..config.builder import config_name
from ..geometry.extent import halo_extents
from ..geometry.grid import GridPosition


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


def layer_rows(exp, grid, batch, data=1, pipe=1):
    """One :class:`LayerRow` per layer of the (shape-inferred) model on ``grid`` (x ``data``
    replicas x ``pipe`` stages), for ``batch`` rows per replica."""
    itemsize = np.dtype(exp.backend.dtype).itemsize
    # rank (0, 0): the largest tile and the most parameters; chunks, halos per axis (no rank loop)
    per_rank = [exp.model.placements(GridPosition(tuple(grid), (0,) * len(grid), data, pipe))]
    rows = []
    for i, layer in enumerate(exp.model.layers):
        pls = [placements[i] for placements in per_rank]
        rank0 = pls[0]
        out = tuple(rank0.out_layout.global_shape)
        local = [tuple(p.out_layout.local_shape) for p in pls]
        if len(out) == len(grid) + 1:
            largest = (out[0],) + tuple(max(s[d] for s in local) for d in range(1, len(out)))
        else:
            largest = out
        chunk_shape = halo = None
        chunk_elems = 0
        if rank0.halos:
            C, *S = layer.in_shape
            halo, chunk = halo_extents(tuple(S), *rank0.halos[0].windows, grid)
            chunk_shape = (C, *chunk.shape)
            chunk_elems = int(np.prod(chunk_shape))
        rows.append(LayerRow(i, layer.name, config_name(layer), out, tuple(rank0.out_layout.local_shape),
                             largest, chunk_shape, halo, rank0.param_count,
                             max(p.local_param_count for p in pls), rank0.sharded,
                             batch * (int(np.prod(largest)) + chunk_elems) * itemsize))
    return rows


def _shape(s):
    return "-" if s is None else "x".join(str(v) for v in s)


def _mib(n):
    return f"{n / 2**20:.2f} MiB"


def format_show(exp, path, nranks, layout=None, image_shape=None, data_line=True):
    """The layer table ``distnet show`` prints for ``nranks`` ranks (cut by ``exp.layout``, or
    the given :class:`~distnet.geometry.grid.GridLayout`); ``image_shape`` when the dataset
    cannot tell it. ``data_line``: end with the data set's memory per rank (not for an
    ``image_shape`` other than the data's own)."""
    image_shape = tuple(image_shape or exp.dataset.image_shape)
    exp.model.infer_shapes(image_shape)
    layout = layout or exp.layout(nranks, image_shape)
    grid, data, pipe = layout.grid, layout.data, layout.pipe
    bs = exp.model.batch_size
    per_replica = -(-bs // data) if bs else 1
    rows = layer_rows(exp, grid, per_replica, data, pipe)
    for row, stage in zip(rows, exp.model.stage_plan(pipe)):
        row.stage = stage
    head = [f"{path}: {nranks} rank(s) = data {data} x pipe {pipe} x grid {_shape(grid)}; "
            f"input {_shape(image_shape)}, dtype {np.dtype(exp.backend.dtype).name}, "
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
    state = exp.model.optimizer_state_names()
    kept = "gradients" + (f" and optimiser state {', '.join(state)}" if state else "")
    out.append(f"parameters: {pg:,} in total ({_mib(pg * itemsize)}); at most {pr:,} on one rank{where} "
               f"({_mib(pr * itemsize)}, x{2 + len(state)} counting {kept})")
    # the rates the training step will use, from the model's one resolver (distnet.optim.rates)
    out += exp.model.describe_learning_rates([layer for layer, r in zip(exp.model.layers, rows) if r.params_global])
    out.append(f"activations per rank (outputs + halo chunks, the rank holding most{where}): {_mib(act)}"
               + ("" if bs else " per image"))
    if data_line:   # rank 0 holds the largest tile of the images
        tile = exp.dataset.rank_tile(grid, (0,) * len(grid)) if exp.dist_flag else None
        out.append(exp.dataset.describe_memory(tile=tile, batch_size=bs, ndata=data, dtype=exp.backend.dtype))
    return "\n".join(out)

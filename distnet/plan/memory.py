"""Memory of one rank and of one node in a plan: what training holds at its peak (parameters,
gradients, optimiser state, activations, the layers' workspaces and the largest temporaries,
data, the MPI library) and what a checkpoint adds while it is written or read."""


def memory_totals(plan, data_bytes=None):
    """``{"rank": {...}, "node": {...}}`` in bytes, for the rank holding most.

    Per rank: ``parameters`` (values), ``gradients``, ``optimizer`` (``state_arrays`` per
    value), ``activations`` (outputs and halo chunks kept for the backward pass), ``workspace``
    (the layers' scratch kept from step to step: conv tiles and padded gradients, pooling
    indices, batch norm's normalised input, ...), ``transient`` (the temporaries of the layer
    whose forward or backward holds most at once, the gradients it takes and gives included),
    ``data`` (``data_bytes``: what the data set keeps on a rank, as ``distnet show`` computes it
    from the files; None: one minibatch of the replica's rows, all that is known without them),
    ``runtime`` (the MPI library's memory, :attr:`Machine.runtime_bytes
    <distnet.plan.machine.Machine.runtime_bytes>`: measured by ``--calibrate``, else 0), ``total``
    (training), and the extra of a checkpoint: ``checkpoint_save`` (sharded: each rank writes
    its own slices, one array in flight), ``checkpoint_restore`` (sharded: each rank reads its
    own slices, one array in flight) and, for the single-file format, ``single_file_save`` (rank
    0 gathers one whole array at a time) and ``single_file_restore`` (every rank receives the
    whole checkpoint). Per node: the per-rank total times the ranks on a node."""
    t = plan.totals()
    isz = plan.itemsize
    values = t["param_bytes"] // (2 + plan.state_arrays)
    stages = {lp.stage for lp in plan.layers}
    rank = {"parameters": values, "gradients": values, "optimizer": values * plan.state_arrays,
            "activations": t["act_bytes_max"],
            "workspace": max((sum(lp.work_bytes for lp in plan.layers if lp.stage == s) for s in stages), default=0),
            "transient": max((lp.transient_bytes for lp in plan.layers), default=0)}
    if data_bytes is None:
        first = plan.layers[0] if plan.layers else None
        chunk = first.chunk or first.in_shape if first is not None else ()
        pixels = 1
        for v in chunk:
            pixels *= int(v)
        data_bytes = plan.batch * pixels * isz
    rank["data"] = int(data_bytes)
    rank["runtime"] = int(plan.machine.runtime_bytes)
    rank["total"] = sum(rank.values())
    array_local = max((lp.array_local_max for lp in plan.layers), default=0)
    array_global = max((lp.array_global_max for lp in plan.layers), default=0)
    whole = sum(lp.param_global for lp in plan.layers) * isz * (1 + plan.state_arrays)
    rank["checkpoint_save"] = array_local
    rank["checkpoint_restore"] = array_local
    rank["single_file_save"] = array_global
    rank["single_file_restore"] = whole
    per_node = min(plan.machine.ranks_per_node or plan.nranks, plan.nranks)
    node = {"ranks": per_node, "total": rank["total"] * per_node,
            "checkpoint_restore": (rank["total"] + rank["checkpoint_restore"]) * per_node,
            "single_file_restore": (rank["total"] + rank["single_file_restore"]) * per_node}
    return {"rank": rank, "node": node}

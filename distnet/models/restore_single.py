"""Restoring a single-file checkpoint on many ranks with each rank's memory bounded by its share.

World rank 0 alone reads the file (the other ranks need not see it: node-local disks). It
broadcasts the file's layout (the training state and, per array, its name, shape and dtype, no
values); every rank checks it against its model and tells rank 0 which slice of each array it
holds (its placement's index). Rank 0 then reads one array at a time, checks its CRC-32, and
sends every rank its slice (:func:`~distnet.comm.collect.serve_from_root`: one ``Bcast`` when
every rank holds the whole array, else one ``Send`` per rank), which lands in the rank's weights.
A rank other than 0 thus holds its share plus, at most, one slice in transit; rank 0 holds its
share plus one global array. (Before, rank 0 read the whole file and broadcast it pickled:
every rank held the whole checkpoint, twice while unpickling.)
"""
import time

import numpy as np

from ..comm.collect import serve_from_root
from ..comm.phase import tick
from .checkpoint import _check_entries, _read_dataset, read_checkpoint, stored_arrays
from .global_params import _held, param_layout, param_slots
from .optimizer_state import missing_optimizer_state


def _wanted(model):
    """``{(group, slot): (Param, index)}`` of every parameter and buffer this rank holds."""
    out = {}
    for group in ("params", "buffers"):
        for layer, offset, _ in param_slots(model, group):
            for j, p in enumerate(_held(layer, group)):
                out[(group, offset + j)] = (p, param_layout(layer, p)[1])
    return out


def _label(group, slot, entry, key):
    return f"{'parameter' if group == 'params' else 'buffer'} {slot:03d} ({entry['name']}) {key.replace('/', ' ')}"


def restore_single(model, path, topology, log=None):
    """Load the checkpoint file ``path`` into the configured ``model`` (module docstring);
    restores the optimiser step count. Returns the :class:`~distnet.models.checkpoint.Checkpoint`
    of its training state (``params`` and ``buffers`` hold the layout, no arrays; ``io``: the
    format, the bytes this rank received and the seconds). Collective over the run's world:
    every rank raises the same :class:`~distnet.errors.CheckpointError` if any fails."""
    import h5py

    from ..comm.abort import run_collectively
    from ..comm.root_read import read_on_root
    world, t0 = topology.world, time.perf_counter()
    ck = read_on_root(world, lambda: read_checkpoint(path, arrays=False))
    run_collectively(lambda: _check_entries(model, ck, log, lambda e: e["dtype"], lambda e: e["shape"]), world)
    wanted = _wanted(model)
    everyone = world.gather({k: index for k, (_, index) in wanted.items()}, root=0) if world.Get_size() > 1 \
        else [{k: index for k, (_, index) in wanted.items()}]
    xp, dtype = model.backend.xp, np.dtype(model.backend.dtype)
    f = h5py.File(path, "r") if world.Get_rank() == 0 else None
    nbytes = 0
    try:
        for group, entries in (("params", ck.params), ("buffers", ck.buffers)):
            for slot, e in enumerate(entries):
                held = wanted.get((group, slot))
                arrays = {}
                for key in e["keys"]:
                    def fetch(key=key):
                        return _read_dataset(path, f[group][f"{slot:03d}"][key], _label(group, slot, e, key))
                    into = _buffer(held[0], key, e["dtype"], xp) if held is not None else None
                    who = {r: ranks[(group, slot)] for r, ranks in enumerate(everyone or ())
                           if (group, slot) in ranks}
                    arrays[key] = serve_from_root(world, fetch, who, into)
                    nbytes += into.nbytes if into is not None else 0
                    tick()
                if held is not None:
                    _place(held[0], arrays, xp, dtype)
    finally:
        if f is not None:
            f.close()
    reset = missing_optimizer_state(model, stored_arrays(ck.params), int(ck.meta.get("steps", 0)))
    if reset and log is not None:
        from ..log import warn_once_per_job
        warn_once_per_job(log, "checkpoint %s %s", ck.path, reset)
    model.steps = int(ck.meta.get("steps", 0))
    ck.io = {"format": "single", "bytes": int(nbytes), "seconds": time.perf_counter() - t0}
    return ck


def _buffer(p, key, stored, xp):
    """Where this rank receives its slice of ``p``'s array ``key`` (stored in dtype ``stored``):
    straight into the weights when they are a C-contiguous numpy array of that dtype."""
    if key == "value" and xp is np and p.value.dtype == np.dtype(stored) and p.value.flags.c_contiguous:
        return p.value
    return np.empty(p.value.shape, dtype=stored)


def _place(p, arrays, xp, dtype):
    """The received ``{key: array}`` of parameter ``p`` into its value, velocity and state."""
    def local(a):
        return xp.asarray(a if a.dtype == dtype else a.astype(dtype))
    if arrays["value"] is not p.value:
        p.value[...] = local(arrays["value"])
    p.velocity = local(arrays["velocity"]) if "velocity" in arrays else None
    state = {k[len("state/"):]: local(a) for k, a in arrays.items() if k.startswith("state/")}
    p.state = state or None


#: The name earlier releases gave it.
restore_checkpoint = restore_single

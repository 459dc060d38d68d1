"""A model's parameters in their *global* layout: where each rank's local value sits in the
global tensor (from the layers' placements), and the gather of every parameter, with its
optimiser state, to world rank 0 (what a checkpoint stores: :mod:`distnet.models.checkpoint`,
:mod:`distnet.models.sharded`)."""
import numpy as np

from ..backend import get_array_module
from ..comm.collect import gather_to_root
from ..errors import CheckpointError

def model_params(model):
    """``[(layer, Param)]`` of every layer this rank holds, in model order (the checkpoint's
    order; with pipeline stages, the layers of the other stages hold none here)."""
    return [(layer, p) for layer in model.layers for p in layer.params()]


#: What a checkpoint stores per layer: its parameters (``/params``) and its buffers
#: (``/buffers``), each from the layer's placement and the layer's list of that name.
GROUPS = ("params", "buffers")


def param_slots(model, group="params"):
    """``[(layer, first index in the checkpoint, names)]`` of every layer's parameters (or
    ``group="buffers"``: buffers), including the layers another pipeline stage holds: the names
    come from the layers' placements."""
    out, offset = [], 0
    for layer in model.layers:
        held = layer.placement.params if group == "params" else layer.placement.buffers
        names = [pp.name for pp in held]
        out.append((layer, offset, names))
        offset += len(names)
    return out


def _held(layer, group):
    """The layer's :class:`~distnet.layers.params.Param` objects of ``group`` on this rank."""
    return layer.params() if group == "params" else layer.buffers()


def _keys(p):
    """Names of the arrays stored for ``p``: ``value``, ``velocity``, ``state/NAME`` (sorted)."""
    return ["value", "velocity"] + [f"state/{k}" for k in sorted(p.state or {})]


def _arrays(p):
    """``p``'s arrays in :func:`_keys` order (``velocity`` may be None)."""
    return [p.value, p.velocity] + [p.state[k] for k in sorted(p.state or {})]


def _entry(name, layer, sharded, keys, arrays):
    """A checkpoint entry dict: ``name, layer, sharded, value, velocity, state`` (a dict)."""
    got = dict(zip(keys, arrays))
    return {"name": name, "layer": layer, "sharded": sharded, "value": got["value"],
            "velocity": got.get("velocity"),
            "state": {k[len("state/"):]: a for k, a in got.items() if k.startswith("state/")}}


def param_layout(layer, p):
    """``(global shape, index)`` of parameter ``p`` of ``layer``: ``G[index]`` is ``p.value``
    (the layer's placement; ``index`` is ``...`` for a replicated parameter)."""
    return tuple(p.placement.global_shape), p.placement.index


def _host(a):
    """A numpy copy of a parameter array (numpy or device: cupy's ``asnumpy``), or None."""
    if a is None:
        return None
    xp = get_array_module(a)
    return np.array(a, copy=True) if xp is np else xp.asnumpy(a)


def _global_entry(layer, p, comm):
    """One parameter (or buffer) as global tensors on ``comm``'s rank 0 (None elsewhere): its
    value, velocity and learning-rule state, each laid out like the value; collective over
    ``comm`` (the spatial grid) when the parameter is sharded."""
    gshape, index = param_layout(layer, p)
    keys = _keys(p)
    mine = [_host(a) for a in _arrays(p)]
    if not p.sharded:
        whole = [a.reshape(gshape) if a is not None and a.shape != gshape else a for a in mine]
        return _entry(p.name, layer.name, False, keys, whole) if comm.Get_rank() == 0 else None
    whole = [np.zeros(gshape, dtype=a.dtype) if a is not None else None for a in mine]

    def place(rank, idx, parts):   # each rank's slice into its place, as it arrives
        for dst, part in zip(whole, parts):
            if dst is not None:
                dst[idx] = part
    gather_to_root(comm, index, mine, place)
    if comm.Get_rank() != 0:
        return None
    return _entry(p.name, layer.name, True, keys, whole)


def gather_params(model, topology, group="params"):
    """Every parameter (``group="buffers"``: every buffer) as a global numpy tensor, with its
    velocity and learning-rule state: a list of dicts ``{name, layer, sharded, value, velocity,
    state}`` in model order on world rank 0, None elsewhere.

    Only data replica 0 takes part (the replicas hold the same values). Each pipeline stage
    gathers its layers' parameters over its spatial grid (collective over ``topology.spatial``),
    and the stages send them to world rank 0 (collective over ``topology.pipe``). Arrays travel
    as typed messages, never pickled (:func:`~distnet.comm.collect.gather_to_root`).
    """
    t = topology
    if t.data_index != 0:
        return None
    mine = []
    for layer, offset, _ in param_slots(model, group):
        for j, p in enumerate(_held(layer, group)):
            entry = _global_entry(layer, p, t.spatial)
            if entry is not None:
                mine.append((offset + j, entry))
    if t.spatial.Get_rank() != 0:
        mine = []
    found = {}
    if t.npipe > 1:
        def collect(rank, meta, arrays):
            at = 0
            for slot, name, layer, sharded, keys in meta:
                found[slot] = _entry(name, layer, sharded, keys, arrays[at:at + len(keys)])
                at += len(keys)
        meta, arrays = [], []
        for slot, e in mine:
            keys = ["value", "velocity"] + [f"state/{k}" for k in sorted(e["state"])]
            meta.append((slot, e["name"], e["layer"], e["sharded"], keys))
            arrays += [e["value"], e["velocity"]] + [e["state"][k] for k in sorted(e["state"])]
        gather_to_root(t.pipe, meta, arrays, collect)
    else:
        found.update(mine)
    if t.rank != 0:
        return None
    slots = param_slots(model, group)
    total = sum(len(names) for _, _, names in slots)
    missing = [i for i in range(total) if i not in found]
    if missing:
        raise CheckpointError(f"{group} {missing} of the model were held by no rank")
    return [found[i] for i in range(total)]

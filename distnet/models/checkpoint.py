"""Model checkpoints: one HDF5 file with every weight in its *global* layout, so a checkpoint
taken on one process grid resumes on any other grid, with data replicas, or on one process.

Saving (:func:`save_checkpoint`, collective over the run's world) gathers every sharded
parameter over ``Topology.spatial`` (each rank's slice goes to its place in the global tensor,
replicated parameters are taken from the first rank; only data replica 0 takes part, the
replicas hold identical copies; with pipeline stages each stage gathers its own layers and
sends them to world rank 0 over ``Topology.pipe``), and world rank 0 writes the file atomically: into a
temporary file next to it, flushed to disk, then ``os.replace``. A crash mid-write leaves the
previous checkpoint as it was. Restoring (:func:`restore_checkpoint`) slices the global
tensors exactly as ``init_params`` slices its draws.

File layout (``FORMAT``, ``VERSION`` 1)::

    /                 attrs: format, version, epoch (last completed, 0-based), model (class),
                             dtype, grid [Py, Px], size, data, created (ISO time),
                             distnet_version, history (JSON list of the per-epoch records)
    /params/NNN       one group per parameter in model order (NNN = 000, 001, ...);
                      attrs: name, layer, sharded
        value         the global tensor                        attr crc32
        velocity      the momentum velocity (absent if none)   attr crc32
    /rng/shuffle      uint32[624] state of the shuffle RNG (absent when not shuffling);
                      attrs: kind ('MT19937'), pos, has_gauss, cached_gaussian
    /config           attrs: yaml (the experiment file's text), resolved (with the
                      command-line overrides applied), overrides (JSON list), source (path)

Every dataset carries the CRC-32 of its bytes; damaged, truncated or mismatched files raise
:class:`~distnet.errors.CheckpointError` naming the file and what is wrong.
"""
import datetime
import json
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..backend import get_array_module
from ..comm.collect import gather_to_root
from ..errors import CheckpointError

FORMAT = "distnet-checkpoint"
VERSION = 1


# ---------------------------------------------------------------------------------------------
# Where a parameter's local value sits in its global tensor
# ---------------------------------------------------------------------------------------------

def model_params(model):
    """``[(layer, Param)]`` of every layer this rank holds, in model order (the checkpoint's
    order; with pipeline stages, the layers of the other stages hold none here)."""
    return [(layer, p) for layer in model.layers for p in layer.params()]


def param_slots(model):
    """``[(layer, first index in the checkpoint, parameter names)]`` of every layer, including
    the layers another pipeline stage holds: the names come from the layers' placements."""
    out, offset = [], 0
    for layer in model.layers:
        names = [pp.name for pp in layer.placement.params]
        out.append((layer, offset, names))
        offset += len(names)
    return out


def param_layout(layer, p):
    """``(global shape, index)`` of parameter ``p`` of ``layer``: ``G[index]`` is ``p.value``
    (the layer's placement; ``index`` is ``...`` for a replicated parameter)."""
    pp = layer.placement.param(p.name)
    return tuple(pp.global_shape), pp.index


def _host(a):
    """A numpy copy of a parameter array (numpy or device: cupy's ``asnumpy``), or None."""
    if a is None:
        return None
    xp = get_array_module(a)
    return np.array(a, copy=True) if xp is np else xp.asnumpy(a)


def _global_entry(layer, p, comm):
    """One parameter as a global tensor on ``comm``'s rank 0 (None elsewhere); collective over
    ``comm`` (the spatial grid) when the parameter is sharded."""
    gshape, index = param_layout(layer, p)
    entry = {"name": p.name, "layer": layer.name, "sharded": bool(p.sharded)}
    if not p.sharded:
        value = _host(p.value)
        entry.update(value=value.reshape(gshape) if value.shape != gshape else value,
                     velocity=_host(p.velocity))
        return entry if comm.Get_rank() == 0 else None
    mine = [_host(p.value), _host(p.velocity)]
    whole = [np.zeros(gshape, dtype=a.dtype) if a is not None else None for a in mine]

    def place(rank, idx, parts):   # each rank's slice into its place, as it arrives
        for dst, part in zip(whole, parts):
            if dst is not None:
                dst[idx] = part
    gather_to_root(comm, index, mine, place)
    if comm.Get_rank() != 0:
        return None
    entry.update(value=whole[0], velocity=whole[1])
    return entry


def gather_params(model, topology):
    """Every parameter as a global numpy tensor, with its velocity: a list of dicts
    ``{name, layer, sharded, value, velocity}`` in model order on world rank 0, None elsewhere.

    Only data replica 0 takes part (the replicas hold the same values). Each pipeline stage
    gathers its layers' parameters over its spatial grid (collective over ``topology.spatial``),
    and the stages send them to world rank 0 (collective over ``topology.pipe``). Arrays travel
    as typed messages, never pickled (:func:`~distnet.comm.collect.gather_to_root`).
    """
    t = topology
    if t.data_index != 0:
        return None
    mine = []
    for layer, offset, _ in param_slots(model):
        for j, p in enumerate(layer.params()):
            entry = _global_entry(layer, p, t.spatial)
            if entry is not None:
                mine.append((offset + j, entry))
    if t.spatial.Get_rank() != 0:
        mine = []
    found = {}
    if t.npipe > 1:
        def collect(rank, meta, arrays):
            for (slot, name, layer, sharded), value, velocity in zip(meta, arrays[0::2], arrays[1::2]):
                found[slot] = {"name": name, "layer": layer, "sharded": sharded, "value": value,
                               "velocity": velocity}
        meta = [(slot, e["name"], e["layer"], e["sharded"]) for slot, e in mine]
        arrays = [a for _, e in mine for a in (e["value"], e["velocity"])]
        gather_to_root(t.pipe, meta, arrays, collect)
    else:
        found.update(mine)
    if t.rank != 0:
        return None
    slots = param_slots(model)
    total = sum(len(names) for _, _, names in slots)
    missing = [i for i in range(total) if i not in found]
    if missing:
        raise CheckpointError(f"parameters {missing} of the model were held by no rank")
    return [found[i] for i in range(total)]


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

def _crc(a):
    return int(zlib.crc32(np.ascontiguousarray(a).tobytes()))


def _dataset(group, name, a):
    d = group.create_dataset(name, data=a)
    d.attrs["crc32"] = _crc(a)
    return d


def write_checkpoint(path, entries, epoch, meta=None, shuffle_state=None, config=None, history=()):
    """Write a checkpoint file atomically (one process). ``entries`` as :func:`gather_params`
    returns them; ``shuffle_state`` a ``RandomState.get_state()`` tuple or None; ``config`` a
    dict with ``yaml``, ``resolved``, ``overrides`` (list), ``source``; ``history`` a list of
    JSON-serialisable per-epoch records."""
    import h5py
    from .. import __version__
    from ..fileio import atomic_target, umask_mode
    meta = dict(meta or {})
    try:
        with atomic_target(path) as tmp:
            with h5py.File(tmp, "w") as f:
                f.attrs["format"] = FORMAT
                f.attrs["version"] = VERSION
                f.attrs["epoch"] = int(epoch)
                f.attrs["created"] = datetime.datetime.now().isoformat(timespec="seconds")
                f.attrs["distnet_version"] = __version__
                f.attrs["history"] = json.dumps(list(history))
                for key, value in meta.items():
                    f.attrs[key] = value
                params = f.create_group("params")
                for i, e in enumerate(entries):
                    g = params.create_group(f"{i:03d}")
                    g.attrs["name"], g.attrs["layer"], g.attrs["sharded"] = e["name"], str(e["layer"]), e["sharded"]
                    _dataset(g, "value", e["value"])
                    if e.get("velocity") is not None:
                        _dataset(g, "velocity", e["velocity"])
                if shuffle_state is not None:
                    kind, keys, pos, has_gauss, cached = shuffle_state
                    d = _dataset(f.require_group("rng"), "shuffle", np.asarray(keys, dtype=np.uint32))
                    d.attrs["kind"], d.attrs["pos"] = str(kind), int(pos)
                    d.attrs["has_gauss"], d.attrs["cached_gaussian"] = int(has_gauss), float(cached)
                c = f.create_group("config")
                config = dict(config or {})
                for key in ("yaml", "resolved", "source"):
                    c.attrs[key] = str(config.get(key) or "")
                c.attrs["overrides"] = json.dumps(list(config.get("overrides") or []))
            with open(tmp, "rb+") as fh:  # on disk before it takes the real name
                os.fsync(fh.fileno())
            umask_mode(tmp)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}") from None


def save_checkpoint(path, model, topology, epoch, config=None, history=()):
    """Gather the model's state and write it to ``path`` on world rank 0 (collective over the
    run's world; a write failure raises on every rank). ``epoch`` is the last completed epoch."""
    from ..comm.abort import run_collectively
    try:
        entries, error = gather_params(model, topology), None
    except CheckpointError as e:  # raised on every rank below, not here on some ranks only
        entries, error = None, e
    state = model.shuffle_rng.get_state() if model.shuffle_rng is not None else None
    meta = {"model": type(model).__name__, "dtype": np.dtype(model.backend.dtype).name,
            "grid": list(topology.grid), "size": int(topology.size), "data": int(topology.ndata)}

    def write():
        if error is not None:
            raise error
        if topology.rank == 0:
            write_checkpoint(path, entries, epoch, meta, state, config, history)

    run_collectively(write, topology.world)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

@dataclass
class Checkpoint:
    """A checkpoint read into memory (numpy arrays in their global layout)."""

    path: str
    epoch: int
    params: list                      # dicts: name, layer, sharded, value, velocity
    shuffle_state: tuple = None
    config: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)


def _fail(path, what):
    return CheckpointError(f"checkpoint {path}: {what}")


def _read_dataset(path, d, label):
    a = d[()]
    want = d.attrs.get("crc32")
    if want is None:
        raise _fail(path, f"{label} has no crc32 attribute (not written by distnet?)")
    if _crc(a) != int(want):
        raise _fail(path, f"{label} is damaged (CRC-32 mismatch); the file is corrupt")
    return a


def _plain(v):
    """An HDF5 attribute as a plain Python value (str, int, float, list)."""
    if isinstance(v, (bytes, str)):
        return _text(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v.item() if isinstance(v, np.generic) else v


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def read_checkpoint(path):
    """Read and verify a checkpoint file; returns a :class:`Checkpoint`.

    Raises :class:`CheckpointError` naming ``path`` for a missing, unreadable, truncated,
    damaged or foreign file, or one written by a newer format version.
    """
    import h5py
    path = os.fspath(path)
    if not os.path.exists(path):
        raise _fail(path, "no such file")
    if os.path.isdir(path):
        raise _fail(path, "is a directory, not a checkpoint file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise _fail(path, f"not a readable HDF5 file (truncated or corrupt?): {e}") from None
    try:
        with f:
            if _text(f.attrs.get("format", "")) != FORMAT:
                raise _fail(path, f"not a distnet checkpoint (no format attribute {FORMAT!r})")
            version = int(f.attrs.get("version", -1))
            if version != VERSION:
                raise _fail(path, f"format version {version}; this distnet reads version {VERSION}")
            meta = {k: _plain(v) for k, v in f.attrs.items()}
            if "params" not in f:
                raise _fail(path, "has no /params group (incomplete file)")
            params = []
            for key in sorted(f["params"]):
                g = f["params"][key]
                label = f"parameter {key} ({_text(g.attrs.get('name', '?'))})"
                if "value" not in g:
                    raise _fail(path, f"{label} has no value")
                params.append({"name": _text(g.attrs.get("name", key)), "layer": _text(g.attrs.get("layer", "")),
                               "sharded": bool(g.attrs.get("sharded", False)),
                               "value": _read_dataset(path, g["value"], f"{label} value"),
                               "velocity": (_read_dataset(path, g["velocity"], f"{label} velocity")
                                            if "velocity" in g else None)})
            state = None
            if "rng" in f and "shuffle" in f["rng"]:
                d = f["rng"]["shuffle"]
                keys = _read_dataset(path, d, "the shuffle RNG state")
                if keys.shape != (624,):
                    raise _fail(path, f"the shuffle RNG state has shape {keys.shape}, expected (624,)")
                state = (_text(d.attrs["kind"]), keys.astype(np.uint32), int(d.attrs["pos"]),
                         int(d.attrs["has_gauss"]), float(d.attrs["cached_gaussian"]))
            config = {}
            if "config" in f:
                c = f["config"].attrs
                config = {k: _text(c.get(k, "")) for k in ("yaml", "resolved", "source")}
                config["overrides"] = json.loads(_text(c.get("overrides", "[]")))
            history = json.loads(meta.pop("history", "[]") or "[]")
            return Checkpoint(path, int(meta["epoch"]), params, state, config, history, meta)
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise _fail(path, f"unreadable or incomplete ({type(e).__name__}: {e})") from None


def apply_checkpoint(model, ck, log=None):
    """Put the checkpoint's weights and velocities into a configured model (this rank's slices
    of the layers it holds) and arrange for :meth:`MLP.fit` to continue after epoch
    ``ck.epoch`` with the saved shuffle RNG state. Raises :class:`CheckpointError` if the
    model's parameters do not match (count or global shapes)."""
    slots = param_slots(model)
    names = [n for _, _, layer_names in slots for n in layer_names]
    if len(names) != len(ck.params):
        raise _fail(ck.path, f"holds {len(ck.params)} parameters ({_names(ck.params)}) but the experiment's "
                             f"model has {len(names)} ({', '.join(names)})")
    xp = model.backend.xp
    dtype = np.dtype(model.backend.dtype)
    for layer, offset, _ in slots:
        for j, p in enumerate(layer.params()):
            e = ck.params[offset + j]
            gshape, index = param_layout(layer, p)
            if tuple(e["value"].shape) != tuple(gshape):
                raise _fail(ck.path, f"parameter {e['name']} has shape {tuple(e['value'].shape)} but the "
                                     f"experiment's {p.name} has global shape {tuple(gshape)}; the "
                                     "checkpoint belongs to another model")
            if e["value"].dtype != dtype and log is not None:
                log.warning("checkpoint %s: %s is %s, the run uses %s (cast)", ck.path, e["name"],
                            e["value"].dtype, dtype)
            p.value[...] = xp.asarray(np.asarray(e["value"][index], dtype=dtype).reshape(p.value.shape))
            p.velocity = (None if e["velocity"] is None else
                          xp.asarray(np.array(e["velocity"][index], dtype=dtype).reshape(p.value.shape)))
    model.resume = {"epoch": ck.epoch + 1, "shuffle_rng": ck.shuffle_state}


def _names(entries):
    return ", ".join(e["name"] for e in entries)


def restore_checkpoint(model, path, topology, log=None):
    """Read ``path`` on world rank 0 only (no rank but 0 needs to see the file: node-local
    disks), hand it to every rank, and load each rank's part into ``model`` (collective over the
    run's world: every rank raises the same :class:`CheckpointError` if any fails). Returns the
    :class:`Checkpoint`."""
    from ..comm.abort import run_collectively
    from ..comm.root_read import read_on_root

    ck = read_on_root(topology.world, lambda: read_checkpoint(path))

    def load():
        apply_checkpoint(model, ck, log)
        return ck

    return run_collectively(load, topology.world)

"""Model checkpoints: one HDF5 file with every weight in its *global* layout, so a checkpoint
taken on one process grid resumes on any other grid, with data replicas, or on one process.

Saving (:func:`save_checkpoint`, collective over the run's world) gathers every sharded
parameter over ``Topology.spatial`` (each rank's slice goes to its place in the global tensor,
replicated parameters are taken from the first rank; only data replica 0 takes part, the
replicas hold identical copies; with pipeline stages each stage gathers its own layers and
sends them to world rank 0 over ``Topology.pipe``), and world rank 0 writes the file atomically: into a
temporary file next to it, flushed to disk, then ``os.replace``. A crash mid-write leaves the
previous checkpoint as it was. Restoring (:mod:`~distnet.models.restore_single`) slices the global
tensors exactly as ``init_params`` slices its draws.

File layout (``FORMAT``, ``VERSION`` 1; 2 for a checkpoint written inside an epoch)::

    /                 attrs: format, version, epoch (last completed, 0-based), model (class),
                             dtype, grid [Py, Px], size, data, steps (optimiser steps done;
                             absent in older files: 0), created (ISO time),
                             distnet_version, history (JSON list of the per-epoch records),
                             position (version 2 only: JSON {epoch, batch, costs}: the epoch
                             in progress, the steps of it done, and the summed cost of those
                             steps per data replica; /rng/shuffle then holds the shuffle
                             state at that epoch's start, so its order is drawn again)
    /params/NNN       one group per parameter in model order (NNN = 000, 001, ...);
                      attrs: name, layer, sharded
        value         the global tensor                        attr crc32
        velocity      the momentum velocity (absent if none)   attr crc32
        state/NAME    the learning rule's state arrays (Adam's m and v; absent before the
                      first update or without a learning_rule), global like value; crc32
    /buffers/NNN      one group per layer buffer (state that is not trained: batch norm's
                      running mean / variance) in model order, laid out like /params/NNN
                      (absent in files of models without buffers)
    /rng/shuffle      uint32[624] state of the shuffle RNG (absent when not shuffling);
                      attrs: kind ('MT19937'), pos, has_gauss, cached_gaussian
    /config           attrs: yaml (the experiment file's text), resolved (with the
                      command-line overrides applied), overrides (JSON list), source (path),
                      preprocessing (JSON: how the training turned images into values,
                      :mod:`distnet.experiments.preprocessing`; absent in older files)

Every dataset carries the CRC-32 of its bytes; damaged, truncated or mismatched files raise
:class:`~distnet.errors.CheckpointError` naming the file and what is wrong.

The sharded form (a folder, every rank writing and reading its own slices) is
:mod:`distnet.models.sharded`, which builds on this module; its ``save_any`` / ``restore_any``
take either form.
"""
import datetime
import json
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..config.builder import config_name
from ..errors import CheckpointError
from .global_params import _held, gather_params, param_layout, param_slots
from .optimizer_state import missing_optimizer_state

FORMAT = "distnet-checkpoint"
VERSION = 1
#: The version of a checkpoint written inside an epoch (its ``position``): a distnet that reads
#: only version 1 refuses it rather than resuming it as if its epoch had ended.
VERSION_MIDWAY = 2
VERSIONS = (VERSION, VERSION_MIDWAY)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

def _crc(a):
    """CRC-32 of ``a``'s bytes in C order (read in place: no copy of a contiguous array)."""
    a = np.ascontiguousarray(a)
    return int(zlib.crc32(memoryview(a.reshape(-1)).cast("B"))) if a.size else int(zlib.crc32(b""))


def _dataset(group, name, a):
    d = group.create_dataset(name, data=a)
    d.attrs["crc32"] = _crc(a)
    return d


def _write_entries(f, group, entries):
    """``entries`` into ``/group/NNN`` (value, velocity, state/NAME, each with its crc32)."""
    params = f.create_group(group)
    for i, e in enumerate(entries):
        g = params.create_group(f"{i:03d}")
        g.attrs["name"], g.attrs["layer"], g.attrs["sharded"] = e["name"], str(e["layer"]), e["sharded"]
        _dataset(g, "value", e["value"])
        if e.get("velocity") is not None:
            _dataset(g, "velocity", e["velocity"])
        for k, a in sorted((e.get("state") or {}).items()):
            _dataset(g.require_group("state"), k, a)


def _need(nbytes, extra=0):
    """Bytes to find free before writing arrays of ``nbytes`` (a list): theirs, HDF5's per-array
    headers and the file's own (:func:`write_checkpoint` checks it; :func:`checkpoint_size` tells
    it before training)."""
    return 2**16 + sum(n + 1024 for n in nbytes) + extra


def checkpoint_size(model, itemsize):
    """About the bytes a checkpoint of ``model`` (a chain or graph of layers, shapes inferred,
    nothing configured) takes: every parameter's global value with the optimiser's arrays
    (:meth:`~distnet.models.model.Model.optimizer_state_names`) and every buffer, in ``itemsize``-
    byte numbers, as :func:`write_checkpoint`'s own check counts them. ``distnet run`` checks it
    against the destination's free space before training, not after the last epoch."""
    from ..geometry.grid import GridPosition
    per = 1 + len(model.optimizer_state_names())
    planes = model.planes()                 # (*S, label): one process of as many spatial axes
    nd = len(planes[0]) - 1 if planes else 2
    nbytes = []
    for placement in model.placements(GridPosition((1,) * nd, (0,) * nd)):
        nbytes += [pp.size * itemsize for pp in placement.params for _ in range(per)]
        nbytes += [pp.size * itemsize for pp in placement.buffers]
    return _need(nbytes)


def write_header(f, fmt, epoch, meta, shuffle_state, config, history, position=None):
    """The training state of a checkpoint into the open HDF5 file ``f``: root attributes
    (format ``fmt``, version, epoch, created, distnet_version, history, ``meta``; ``position``
    for a checkpoint inside an epoch), ``/rng/shuffle`` and ``/config`` (a single file and a
    sharded checkpoint's index alike)."""
    from .. import __version__
    f.attrs["format"] = fmt
    f.attrs["version"] = VERSION if position is None else VERSION_MIDWAY
    f.attrs["epoch"] = int(epoch)
    if position is not None:
        f.attrs["position"] = json.dumps(position)
    f.attrs["created"] = datetime.datetime.now().isoformat(timespec="seconds")
    f.attrs["distnet_version"] = __version__
    f.attrs["history"] = json.dumps(list(history))
    for key, value in dict(meta or {}).items():
        f.attrs[key] = value
    if shuffle_state is not None:
        kind, keys, pos, has_gauss, cached = shuffle_state
        d = _dataset(f.require_group("rng"), "shuffle", np.asarray(keys, dtype=np.uint32))
        d.attrs["kind"], d.attrs["pos"] = str(kind), int(pos)
        d.attrs["has_gauss"], d.attrs["cached_gaussian"] = int(has_gauss), float(cached)
    c = f.create_group("config")
    config = dict(config or {})
    for key in ("yaml", "resolved", "source"):
        c.attrs[key] = str(config.get(key) or "")
    if config.get("preprocessing"):     # the training's preprocessing (JSON), for predict and evaluate
        c.attrs["preprocessing"] = str(config["preprocessing"])
    c.attrs["overrides"] = json.dumps(list(config.get("overrides") or []))


def write_checkpoint(path, entries, epoch, meta=None, shuffle_state=None, config=None, history=(),
                     buffers=(), position=None):
    """Write a checkpoint file atomically (one process). ``entries`` (and ``buffers``) as
    :func:`gather_params` returns them; ``shuffle_state`` a ``RandomState.get_state()`` tuple or None; ``config`` a
    dict with ``yaml``, ``resolved``, ``overrides`` (list), ``source``; ``history`` a list of
    JSON-serialisable per-epoch records; ``position`` the place inside an epoch (None: at its end)."""
    from ..fileio import atomic_target, free_space, hdf5_file, is_disk_full, umask_mode, write_failure
    meta = dict(meta or {})
    # refused before a byte is written when the disk cannot hold it; one that fills meanwhile
    # (another job writing) is an OSError of hdf5_file
    arrays = [a for e in list(entries) + list(buffers or ())
              for a in [e["value"], e.get("velocity"), *(e.get("state") or {}).values()] if a is not None]
    need = _need([np.asarray(a).nbytes for a in arrays], len(json.dumps(list(history))) +
                 sum(len(str(v)) for v in (config or {}).values()))
    folder, free = free_space(path)
    if need > free:
        raise CheckpointError(f"cannot write checkpoint {path}: No space left on device (it needs about "
                              f"{need / 2**20:.2f} MiB, {folder} has {free / 2**20:.2f} MiB free)")
    try:
        with atomic_target(path) as tmp:
            with hdf5_file(tmp, sync=True) as f:    # on disk before it takes the real name
                write_header(f, FORMAT, epoch, meta, shuffle_state, config, history, position)
                _write_entries(f, "params", entries)
                if buffers:
                    _write_entries(f, "buffers", buffers)
            umask_mode(tmp)
    except (OSError, RuntimeError) as e:     # h5py raises both for a failed write
        raise CheckpointError(f"cannot write checkpoint {path}: {write_failure(e)}"
                              + (f" (it needs about {need / 2**20:.2f} MiB)" if is_disk_full(e) else "")) from None


def save_checkpoint(path, model, topology, epoch, config=None, history=(), position=None, shuffle_state=None):
    """Gather the model's state and write it to ``path`` on world rank 0 (collective over the
    run's world; a write failure raises on every rank). ``epoch`` is the last completed epoch;
    ``position`` and ``shuffle_state`` (the state at that epoch's start) for a checkpoint inside
    an epoch (:func:`shuffle_state_of`). Returns ``{"bytes", "seconds", "format": "single"}``
    (the file's bytes, the same on every rank; this save's wall time). A sharded folder:
    :func:`~distnet.models.sharded.save_any`."""
    import time

    from ..comm.abort import run_collectively
    t0 = time.perf_counter()
    try:
        entries, error = gather_params(model, topology), None
        buffers = gather_params(model, topology, "buffers")
    except CheckpointError as e:  # raised on every rank below, not here on some ranks only
        entries, buffers, error = None, None, e
    state = shuffle_state_of(model, position, shuffle_state)
    meta = _meta(model, topology)

    def write():
        if error is not None:
            raise error
        if topology.rank == 0:
            write_checkpoint(path, entries, epoch, meta, state, config, history, buffers or (), position)
            return os.path.getsize(path)
        return None

    size = run_collectively(write, topology.world)
    size = topology.world.bcast(size, root=0) if topology.world.Get_size() > 1 else size
    return {"bytes": int(size), "seconds": time.perf_counter() - t0, "format": "single"}


def shuffle_state_of(model, position=None, at_epoch_start=None):
    """The shuffle RNG state a checkpoint stores: the model's now, or inside an epoch
    (``position``) the state at the epoch's start, ``at_epoch_start`` (its order is drawn again
    on resume); None without a shuffle."""
    if position is not None:
        return at_epoch_start
    return model.shuffle_rng.get_state() if model.shuffle_rng is not None else None


def _meta(model, topology):
    """The root attributes that say what wrote a checkpoint (model, dtype, layout, steps)."""
    return {"model": config_name(model), "dtype": np.dtype(model.backend.dtype).name,
            "grid": list(topology.grid), "size": int(topology.size), "data": int(topology.ndata),
            "pipe": int(topology.npipe), "steps": int(model.steps)}


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

@dataclass
class Checkpoint:
    """A checkpoint read into memory (numpy arrays in their global layout)."""

    path: str
    epoch: int
    params: list                      # dicts: name, layer, sharded, value, velocity, state
    shuffle_state: tuple = None
    config: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    buffers: list = field(default_factory=list)   # dicts like params (batch norm's statistics)
    #: ``{"format", "bytes", "seconds"}`` of the restore that read it (:func:`~distnet.models.sharded.restore_any`)
    io: dict = field(default_factory=dict)

    @property
    def position(self):
        """``{"epoch", "batch", "costs"}`` of a checkpoint written inside an epoch, else None."""
        value = self.meta.get("position")
        return json.loads(value) if isinstance(value, str) and value else None

    @property
    def resume(self):
        """The :class:`ResumeState` that continues training after this checkpoint: the next
        epoch, or inside an epoch its next step."""
        at = self.position
        if at is None:
            return ResumeState(self.epoch + 1, self.shuffle_state)
        return ResumeState(int(at["epoch"]), self.shuffle_state, int(at["batch"]), tuple(at.get("costs") or ()))

    def describe_done(self):
        """What the checkpoint holds done, in words: ``epoch 2 done`` or ``epoch 3, batch 17 done``."""
        at = self.position
        return f"epoch {self.epoch} done" if at is None else f"epoch {at['epoch']} in progress, {at['batch']} batch(es) of it done"


@dataclass(frozen=True)
class ResumeState:
    """Where a resumed run starts: the first epoch to train, the state of the per-epoch shuffle
    RNG (None when the run does not shuffle; inside an epoch, the state at its start); a
    model's ``start`` takes it. Inside an epoch also ``batch``, the steps of it done, and
    ``costs``, their summed cost per data replica (:func:`replica_cost`)."""

    epoch: int
    shuffle_state: tuple = None
    batch: int = 0
    costs: tuple = ()

    def start(self, ndata=1, data_index=0):
        """``(first batch, running cost)`` of the first epoch for data replica ``data_index`` of
        ``ndata`` (None at an epoch's start)."""
        if not self.batch:
            return None
        return self.batch, replica_cost(self.costs, ndata, data_index)


def replica_cost(costs, ndata, data_index):
    """The running cost a data replica continues from, of ``costs`` (one per replica that
    wrote the checkpoint): its own on as many replicas; the one value every replica had (a
    model whose cost is summed over the replicas each step); else their sum on replica 0 and 0
    elsewhere (their sum over the replicas stays the same, rounded otherwise)."""
    costs = [float(c) for c in costs] or [0.0]
    if len(costs) == ndata:
        return costs[data_index]
    if all(c == costs[0] for c in costs):
        return costs[0]
    return sum(costs) if data_index == 0 else 0.0


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


def _read_entries(path, group, what, arrays=True):
    """The entries of ``/params`` or ``/buffers`` (dicts as :func:`gather_params` makes). With
    ``arrays=False`` their layout only: ``value``, ``velocity`` and the ``state`` arrays None,
    and ``shape``, ``dtype`` and ``keys`` (``value``, ``velocity``, ``state/NAME``) instead."""
    out = []
    keys = sorted(group)
    if keys != [f"{i:03d}" for i in range(len(keys))]:   # a damaged link name: an entry gone unseen
        raise _fail(path, f"/{group.name.strip('/')} holds entries {keys[:8]}, expected 000, 001, ...; the "
                          "file is damaged")
    for key in keys:
        g = group[key]
        label = f"{what} {key} ({_text(g.attrs.get('name', '?'))})"
        if "value" not in g:
            raise _fail(path, f"{label} has no value")
        unknown = sorted(set(g) - {"value", "velocity", "state"})
        if unknown:     # e.g. 'velocity' under a damaged name: resumed without it, silently
            raise _fail(path, f"{label} holds {unknown[0]!r}, which distnet does not write; the file is damaged")
        entry = {"name": _text(g.attrs.get("name", key)), "layer": _text(g.attrs.get("layer", "")),
                 "sharded": bool(g.attrs.get("sharded", False))}
        state = sorted(g["state"]) if "state" in g else []
        if not arrays:
            entry.update(value=None, velocity=None, state={}, shape=tuple(g["value"].shape),
                         dtype=np.dtype(g["value"].dtype).name,
                         keys=["value"] + (["velocity"] if "velocity" in g else []) + [f"state/{k}" for k in state])
        else:
            entry.update(value=_read_dataset(path, g["value"], f"{label} value"),
                         velocity=(_read_dataset(path, g["velocity"], f"{label} velocity")
                                   if "velocity" in g else None),
                         state={k: _read_dataset(path, g["state"][k], f"{label} state {k}") for k in state})
        out.append(entry)
    return out


def read_header(path, f, params=(), buffers=()):
    """The :class:`Checkpoint` of the open file ``f``'s training state (what
    :func:`write_header` wrote) with these ``params`` and ``buffers`` entries."""
    meta = {k: _plain(v) for k, v in f.attrs.items()}
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
        config = {k: _text(c.get(k, "")) for k in ("yaml", "resolved", "source", "preprocessing")}
        config["overrides"] = json.loads(_text(c.get("overrides", "[]")))
    history = json.loads(meta.pop("history", "[]") or "[]")
    return Checkpoint(path, int(meta["epoch"]), list(params), state, config, history, meta, list(buffers))


def read_checkpoint(path, arrays=True):
    """Read and verify a checkpoint file; returns a :class:`Checkpoint` (``arrays=False``: its
    entries' layout only, no array read: :func:`_read_entries`).

    Raises :class:`CheckpointError` naming ``path`` for a missing, unreadable, truncated,
    damaged or foreign file, or one written by a newer format version.
    """
    import h5py
    path = os.fspath(path)
    if not os.path.exists(path):
        raise _fail(path, "no such file")
    if os.path.isdir(path):     # a sharded checkpoint folder: distnet.models.sharded.read_any
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
            if version not in VERSIONS:
                raise _fail(path, f"format version {version}; this distnet reads versions {', '.join(map(str, VERSIONS))}")
            if "params" not in f:
                raise _fail(path, "has no /params group (incomplete file)")
            params = _read_entries(path, f["params"], "parameter", arrays)
            buffers = _read_entries(path, f["buffers"], "buffer", arrays) if "buffers" in f else []
            return read_header(path, f, params, buffers)
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise _fail(path, f"unreadable or incomplete ({type(e).__name__}: {e})") from None


def _check_entries(model, ck, log=None, dtype_of=lambda e: e["value"].dtype, shape_of=lambda e: e["value"].shape):
    """Refuse a checkpoint ``ck`` of another model (count of parameters and buffers, the global
    shapes of those this rank holds: :class:`CheckpointError`) and warn once per job when its
    arrays are cast to the run's dtype."""
    dtype = np.dtype(model.backend.dtype)
    cast = [e for e in list(ck.params) + list(ck.buffers) if np.dtype(dtype_of(e)) != dtype]
    if cast and log is not None:    # about the file every rank reads: one line per job
        from ..log import warn_once_per_job
        names = ", ".join(e["name"] for e in cast[:4]) + (f" and {len(cast) - 4} more" if len(cast) > 4 else "")
        warn_once_per_job(log, "checkpoint %s: %s %s %s, the run uses %s (cast)", ck.path, names,
                          "is" if len(cast) == 1 else "are", np.dtype(dtype_of(cast[0])), dtype)
    overrides = (ck.config or {}).get("overrides") or []
    # the experiment file of the run directory with the checkpoint lacks its --set: the usual cause
    hint = (f" (its run had --set {' --set '.join(map(str, overrides))}: give the same, or evaluate with "
            "the run directory's resolved.yaml)" if overrides else "")
    for group, what, entries in (("params", "parameters", ck.params), ("buffers", "buffers", ck.buffers)):
        slots = param_slots(model, group)
        names = [n for _, _, layer_names in slots for n in layer_names]
        if len(names) != len(entries):
            raise _fail(ck.path, f"holds {len(entries)} {what} ({_names(entries)}) but the experiment's "
                                 f"model has {len(names)} ({', '.join(names)}){hint}")
        for layer, offset, _ in slots:
            for j, p in enumerate(_held(layer, group)):
                e = entries[offset + j]
                gshape, _ = param_layout(layer, p)
                if tuple(shape_of(e)) != tuple(gshape):
                    raise _fail(ck.path, f"{what[:-1]} {e['name']} has shape {tuple(shape_of(e))} but "
                                         f"the experiment's {p.name} has global shape {tuple(gshape)}; the "
                                         f"checkpoint belongs to another model{hint}")


def stored_arrays(entries):
    """Index entries as the single-file reader's dicts say what they hold: ``{name, velocity,
    state}`` with ``velocity`` True or None and ``state`` ``{NAME: True}`` (for checks of what a
    checkpoint holds without reading its arrays)."""
    return [{"name": e["name"], "velocity": True if "velocity" in e["keys"] else None,
             "state": {k[len("state/"):]: True for k in e["keys"] if k.startswith("state/")}}
            for e in entries]


def apply_checkpoint(model, ck, log=None):
    """Put the checkpoint's weights, velocities, learning-rule state and buffers into a
    configured model (this rank's slices of the layers it holds), restore its optimiser step
    count; returns the :class:`ResumeState` that continues after epoch ``ck.epoch`` with the
    saved shuffle RNG state (``ck.resume``). Raises :class:`CheckpointError` if the model's parameters or buffers do
    not match (count or global shapes)."""
    xp = model.backend.xp
    dtype = np.dtype(model.backend.dtype)
    _check_entries(model, ck, log)
    for group, entries in (("params", ck.params), ("buffers", ck.buffers)):
        def local(a, index, p):
            return xp.asarray(np.array(a[index], dtype=dtype).reshape(p.value.shape))
        for layer, offset, _ in param_slots(model, group):
            for j, p in enumerate(_held(layer, group)):
                e = entries[offset + j]
                _, index = param_layout(layer, p)
                p.value[...] = xp.asarray(np.asarray(e["value"][index], dtype=dtype).reshape(p.value.shape))
                p.velocity = None if e["velocity"] is None else local(e["velocity"], index, p)
                state = e.get("state") or {}
                p.state = {k: local(a, index, p) for k, a in state.items()} if state else None
    reset = missing_optimizer_state(model, ck.params, int(ck.meta.get("steps", 0)))
    if reset and log is not None:
        from ..log import warn_once_per_job
        warn_once_per_job(log, "checkpoint %s %s", ck.path, reset)
    model.steps = int(ck.meta.get("steps", 0))
    return ck.resume


def _names(entries):
    return ", ".join(e["name"] for e in entries)

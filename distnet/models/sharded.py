"""Sharded checkpoints: a directory in which every rank writes what it owns, in parallel, and a
small index ties the shards into one checkpoint that resumes on any grid, replica count or
number of ranks (docs/checkpoints.md).

Layout of a checkpoint directory ``PATH/`` (``INDEX_FORMAT``, version 1)::

    index.h5          the training state as a single-file checkpoint holds it (root attributes
                      epoch, history, model, dtype, grid, size, data, pipe, steps, ...;
                      /rng/shuffle; /config) and attributes
                        token    the save's random name, also on every shard
                        shards   JSON [{file, nbytes}]
                        arrays   JSON [{group, slot, name, layer, sharded, shape, dtype,
                                        keys, pieces: {key: [{file, dataset, box, crc32}]}}]
    shard-RRRRR.h5    what world rank RRRRR owns: datasets 000000, 000001, ... (its slices of the
                      sharded parameters, velocities, learning-rule state and buffers, and the
                      replicated arrays its group writes once); attrs crc32 each, token

A piece's ``box`` gives, per axis of the global array, ``[start, stop]`` (a range) or
``{"at": [i, ...]}`` (increasing indices: FC columns of a spatial input). Loading a rank's slice
reads every piece whose box overlaps it (one piece in memory at a time, its CRC-32 checked
against the index) and copies the overlap: resharding needs no gather.

Saving (:func:`save_sharded`) is atomic over all shards: the shards go into ``PATH.tmp-TOKEN``,
every rank's piece list reaches world rank 0 (a barrier), which writes ``index.h5`` last
(flushed to disk) and renames the folder to ``PATH`` (a previous checkpoint there is moved
aside first and deleted after). A folder without ``index.h5``, or whose shards do not carry
the index's token, is refused as incomplete. The folder must be one every rank sees (a shared
file system); a single-file checkpoint is the choice for node-local disks.
"""
import json
import os
import secrets
import shutil
import time

import numpy as np

from ..errors import CheckpointError
from .boxes import box_of, box_size, overlap, rows_of
from .checkpoint import (VERSION, _crc, _fail, _meta, _text, apply_checkpoint, read_checkpoint, read_header,
                         save_checkpoint, write_header)
from .global_params import _arrays, _held, _keys, param_layout, param_slots
from .optimizer_state import missing_optimizer_state

INDEX_FORMAT = "distnet-sharded-checkpoint"
INDEX = "index.h5"
#: Bytes of a piece read at a time while loading (its leading axis in blocks of about this).
BLOCK_BYTES = 8 * 2**20


def is_sharded(path):
    """Whether ``path`` is a sharded checkpoint (a folder) rather than a single file."""
    return os.path.isdir(os.fspath(path))


def shard_name(rank):
    return f"shard-{rank:05d}.h5"


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

class ShardWriter:
    """One shard file: :meth:`add` writes an array (this rank's piece of a global one) with its
    CRC-32 and returns the piece's index record."""

    def __init__(self, folder, name, token):
        from ..fileio import hdf5_file
        self.name, self.path = name, os.path.join(folder, name)
        open(self.path, "wb").close()     # hdf5_file writes through a file object of an existing file
        self._ctx = hdf5_file(self.path, sync=True)
        self.f = self._ctx.__enter__()
        self.f.attrs["format"], self.f.attrs["token"] = INDEX_FORMAT + "-shard", token
        self.count = 0

    def add(self, array, box):
        a = np.ascontiguousarray(array)
        name = f"{self.count:06d}"
        d = self.f.create_dataset(name, data=a)
        crc = _crc(a)
        d.attrs["crc32"] = crc
        self.count += 1
        return {"file": self.name, "dataset": name, "box": box, "crc32": crc}

    def close(self):
        self._ctx.__exit__(None, None, None)
        return os.path.getsize(self.path)


def _host_view(a):
    """A numpy array of ``a`` (no copy for numpy; cupy's ``asnumpy`` for a device array)."""
    if a is None or isinstance(a, np.ndarray):
        return a
    from ..backend import get_array_module
    return get_array_module(a).asnumpy(a)


def local_pieces(model, topology, writer):
    """Write what this rank owns into ``writer`` (None: write nothing) and return the index
    records ``[{group, slot, name, layer, sharded, shape, keys, pieces: {key: [piece]}}]``.

    Data replica 0 writes (the replicas hold the same values): every rank there its slice of a
    sharded array, and the first rank of the spatial grid each replicated one, once."""
    t, out = topology, []
    if t.data_index != 0:
        return out
    for group in ("params", "buffers"):
        for layer, offset, _ in param_slots(model, group):
            for j, p in enumerate(_held(layer, group)):
                if not p.sharded and t.spatial.Get_rank() != 0:
                    continue
                gshape, index = param_layout(layer, p)
                box = box_of(index if p.sharded else Ellipsis, gshape)
                rec = {"group": group, "slot": offset + j, "name": p.name, "layer": str(layer.name),
                       "sharded": bool(p.sharded), "shape": list(gshape), "keys": [], "pieces": {}}
                for key, a in zip(_keys(p), _arrays(p)):
                    if a is None:
                        continue
                    a = _host_view(a).reshape([len(s["at"]) if isinstance(s, dict) else s[1] - s[0] for s in box])
                    rec["keys"].append(key)
                    rec["dtype"] = np.dtype(a.dtype).name if key == "value" else rec.get("dtype")
                    rec["pieces"][key] = [writer.add(a, box)]
                out.append(rec)
    return out


def merge_pieces(records, total):
    """The index's ``arrays`` from every writer's records (``total``: ``{group: count}``):
    one entry per slot, the pieces of every key together; a box written twice (a layer two
    pipeline ranks hold) is kept once. Raises :class:`CheckpointError` when a slot is missing
    or its pieces do not cover the global array."""
    merged = {}
    for rec in records:
        key = (rec["group"], rec["slot"])
        have = merged.setdefault(key, dict(rec, pieces={k: [] for k in rec["keys"]}))
        for k, pieces in rec["pieces"].items():
            boxes = [q["box"] for q in have["pieces"].setdefault(k, [])]
            have["pieces"][k] += [q for q in pieces if q["box"] not in boxes]
    arrays = []
    for group, n in total.items():
        for slot in range(n):
            e = merged.get((group, slot))
            if e is None:
                raise CheckpointError(f"{group} {slot} of the model was written by no rank")
            for k in e["keys"]:
                got = sum(box_size(q["box"]) for q in e["pieces"][k])
                if got != int(np.prod(e["shape"])):
                    raise CheckpointError(f"{e['name']} {k}: the shards hold {got} of its "
                                          f"{int(np.prod(e['shape']))} elements")
            arrays.append(e)
    return arrays


def write_index(folder, token, arrays, shards, epoch, meta, shuffle_state, config, history):
    """``index.h5`` into ``folder`` (flushed to disk): the training state and the piece list."""
    from ..fileio import hdf5_file, umask_mode
    path = os.path.join(folder, INDEX)
    open(path, "wb").close()
    with hdf5_file(path, sync=True) as f:
        write_header(f, INDEX_FORMAT, epoch, meta, shuffle_state, config, history)
        f.attrs["token"] = token
        f.attrs["shards"] = json.dumps(shards)
        f.attrs["arrays"] = json.dumps(arrays)
    umask_mode(path)
    return os.path.getsize(path)


def publish(tmp, path, token):
    """Move the finished folder ``tmp`` onto ``path``: a previous checkpoint there (folder or
    file) is renamed aside first and deleted after, so ``path`` is never a mix of two saves."""
    old = None
    if os.path.lexists(path):
        old = f"{path}.old-{token}"
        os.rename(path, old)
    os.rename(tmp, path)
    parent = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(parent)
    finally:
        os.close(parent)
    if old is not None:
        shutil.rmtree(old) if os.path.isdir(old) and not os.path.islink(old) else os.unlink(old)


def save_sharded(path, model, topology, epoch, meta, shuffle_state, config=None, history=()):
    """Write the model's state as a sharded checkpoint folder ``path`` (collective over the
    run's world: every rank writes its shard in parallel; a failure on any rank raises on
    every rank and leaves ``path`` as it was). Returns ``{"bytes", "seconds"}``: the bytes of
    all files (the same on every rank) and this save's wall time."""
    from ..comm.abort import run_collectively
    world, t0 = topology.world, time.perf_counter()
    path = os.fspath(path)

    def prepare():
        if world.Get_rank() != 0:
            return None
        if is_sharded(path) and not os.path.exists(os.path.join(path, INDEX)) and os.listdir(path):
            raise CheckpointError(f"cannot write checkpoint {path}: it is a folder that holds other "
                                  "files, not a checkpoint")
        token = secrets.token_hex(6)
        os.makedirs(f"{path}.tmp-{token}")
        return token
    token = world.bcast(run_collectively(prepare, world), root=0)
    tmp = f"{path}.tmp-{token}"

    def write_mine():
        if not os.path.isdir(tmp):
            raise CheckpointError(f"cannot write checkpoint {path}: rank {world.Get_rank()} does not see "
                                  f"{tmp} (a sharded checkpoint needs a folder every rank sees; write a "
                                  "single file on node-local disks)")
        owns = topology.data_index == 0
        writer = ShardWriter(tmp, shard_name(world.Get_rank()), token) if owns else None
        try:
            records = local_pieces(model, topology, writer)
        finally:
            nbytes = writer.close() if writer is not None else 0
        return records, ({"file": writer.name, "nbytes": nbytes} if owns else None)
    try:
        records, shard = run_collectively(write_mine, world)
    except Exception:
        if world.Get_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    gathered = world.gather((records, shard), root=0)      # also the barrier before the index

    def finish():
        if world.Get_rank() != 0:
            return None
        try:
            total = {g: sum(len(names) for _, _, names in param_slots(model, g)) for g in ("params", "buffers")}
            arrays = merge_pieces([r for recs, _ in gathered for r in recs], total)
            shards = [s for _, s in gathered if s is not None]
            size = sum(s["nbytes"] for s in shards)
            size += write_index(tmp, token, arrays, shards, epoch, meta, shuffle_state, config, history)
            publish(tmp, path, token)
            return size
        except OSError as e:
            from ..fileio import write_failure
            raise CheckpointError(f"cannot write checkpoint {path}: {write_failure(e)}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    nbytes = world.bcast(run_collectively(finish, world), root=0)
    return {"bytes": int(nbytes), "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def read_index(path):
    """The index of the sharded checkpoint ``path``: a :class:`Checkpoint` whose entries hold
    no arrays (``value`` etc. None) but ``shape``, ``dtype``, ``keys`` and ``pieces``; its
    ``meta`` has ``token`` and ``shards``. Raises :class:`CheckpointError` for an incomplete or
    foreign folder."""
    import h5py
    path = os.fspath(path)
    index = os.path.join(path, INDEX)
    if not os.path.exists(index):
        if not any(n.startswith("shard-") for n in os.listdir(path)):
            raise _fail(path, "is a directory, not a checkpoint file nor a sharded checkpoint")
        raise _fail(path, f"incomplete sharded checkpoint: no {INDEX} (the save did not finish)")
    try:
        with h5py.File(index, "r") as f:
            if _text(f.attrs.get("format", "")) != INDEX_FORMAT:
                raise _fail(path, f"{INDEX} is not a distnet sharded checkpoint index")
            version = int(f.attrs.get("version", -1))
            if version != VERSION:
                raise _fail(path, f"format version {version}; this distnet reads version {VERSION}")
            arrays = json.loads(_text(f.attrs["arrays"]))
            ck = read_header(path, f)
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise _fail(path, f"{INDEX} is unreadable or incomplete ({type(e).__name__}: {e})") from None
    for e in arrays:
        e.update(value=None, velocity=None, state={})
    ck.params = [e for e in arrays if e["group"] == "params"]
    ck.buffers = [e for e in arrays if e["group"] == "buffers"]
    ck.meta["shards"] = json.loads(ck.meta["shards"])
    return ck


class ShardReader:
    """Reads pieces of the shards of one checkpoint, each checked against the index (token,
    CRC-32); a damaged or foreign shard raises :class:`CheckpointError` naming it."""

    def __init__(self, ck):
        self.ck, self.token, self.files, self.nbytes = ck, ck.meta["token"], {}, 0

    def _file(self, name):
        import h5py
        if name not in self.files:
            full = os.path.join(self.ck.path, name)
            if not os.path.exists(full):
                raise _fail(self.ck.path, f"shard {name} is missing (incomplete checkpoint, or a folder this "
                                          "rank does not see: a sharded checkpoint needs one every rank sees)")
            try:
                f = h5py.File(full, "r")
            except OSError as e:
                raise _fail(self.ck.path, f"shard {name} is not a readable HDF5 file (truncated or "
                                          f"corrupt?): {e}") from None
            if _text(f.attrs.get("token", "")) != self.token:
                f.close()
                raise _fail(self.ck.path, f"shard {name} belongs to another save than {INDEX} "
                                          "(incomplete checkpoint)")
            self.files[name] = f
        return self.files[name]

    def fill(self, dest, box, entry, key):
        """Copy the elements of ``entry``'s array ``key`` inside ``box`` into ``dest`` (shaped
        like the box). Each overlapping piece streams through in blocks of its leading axis of
        about :data:`BLOCK_BYTES` (its CRC-32 computed on the way, checked at its end), so a
        rank holds ``dest`` plus one block, never a whole piece."""
        import zlib
        filled, label = 0, f"{entry['name']} {key}"
        for q in entry["pieces"][key]:
            if overlap(box, q["box"]) is None:
                continue
            d = self._dataset(q, label)
            rows = d.shape[0] if d.ndim else 1
            per_row = int(np.prod(d.shape[1:])) * d.dtype.itemsize if d.ndim else d.dtype.itemsize
            block = max(1, BLOCK_BYTES // max(per_row, 1))
            crc = 0
            try:
                for r0 in range(0, rows, block):
                    r1 = min(rows, r0 + block)
                    a = np.ascontiguousarray(d[r0:r1] if d.ndim else d[()])
                    crc = zlib.crc32(memoryview(a.reshape(-1)).cast("B"), crc)
                    self.nbytes += a.nbytes
                    where = overlap(box, rows_of(q["box"], r0, r1)) if d.ndim else overlap(box, q["box"])
                    if where is not None:
                        dst, src = where
                        part = a[src]
                        dest[dst] = part
                        filled += part.size
                        del part
                    del a
            except OSError as e:
                raise _fail(self.ck.path, f"shard {q['file']}: {label} is unreadable ({e})") from None
            if int(crc) != int(q["crc32"]):
                raise _fail(self.ck.path, f"shard {q['file']} is damaged: {label} fails its CRC-32 check")
        if filled != box_size(box):
            raise _fail(self.ck.path, f"the shards hold {filled} of the {box_size(box)} elements of "
                                      f"{label} this rank needs (incomplete checkpoint)")
        return dest

    def _dataset(self, q, label):
        f = self._file(q["file"])
        try:
            d = f[q["dataset"]]
        except KeyError:
            raise _fail(self.ck.path, f"shard {q['file']} has no {label} (dataset {q['dataset']}); the "
                                      "shard is damaged") from None
        want = [len(s["at"]) if isinstance(s, dict) else s[1] - s[0] for s in q["box"]]
        if list(d.shape) != want:
            raise _fail(self.ck.path, f"shard {q['file']}: {label} has shape {tuple(d.shape)}, the index "
                                      f"says {tuple(want)}; the shard is damaged")
        return d

    def whole(self, entry, key, dtype=None):
        """The global array ``key`` of ``entry`` (consolidation: one array at a time)."""
        out = np.empty(entry["shape"], dtype=dtype or entry["dtype"])
        return self.fill(out, box_of(Ellipsis, entry["shape"]), entry, key)

    def close(self):
        for f in self.files.values():
            f.close()
        self.files = {}


def apply_sharded(model, ck, log=None):
    """Load this rank's slices of the sharded checkpoint ``ck`` (:func:`read_index`) into a
    configured model, reading only the pieces that overlap them; restores the optimiser step
    count. Raises :class:`CheckpointError` as :func:`~distnet.models.checkpoint.apply_checkpoint`
    does for a checkpoint of another model. Returns the bytes read."""
    from .checkpoint import _check_entries
    xp = model.backend.xp
    dtype = np.dtype(model.backend.dtype)
    _check_entries(model, ck, log, lambda e: e["dtype"], lambda e: e["shape"])
    reader = ShardReader(ck)
    try:
        for group, entries in (("params", ck.params), ("buffers", ck.buffers)):
            for layer, offset, _ in param_slots(model, group):
                for j, p in enumerate(_held(layer, group)):
                    e = entries[offset + j]
                    gshape, index = param_layout(layer, p)
                    box = box_of(index if p.sharded else Ellipsis, gshape)
                    shape = [len(s["at"]) if isinstance(s, dict) else s[1] - s[0] for s in box]

                    def load(key, into=None):
                        dest = into if into is not None else np.empty(shape, dtype=dtype)
                        reader.fill(dest, box, e, key)
                        return dest.reshape(p.value.shape)
                    if xp is np and p.value.flags.c_contiguous:   # straight into the weights
                        load("value", p.value.reshape(shape))
                    else:
                        p.value[...] = xp.asarray(load("value"))
                    p.velocity = xp.asarray(load("velocity")) if "velocity" in e["keys"] else None
                    names = [k[len("state/"):] for k in e["keys"] if k.startswith("state/")]
                    p.state = {k: xp.asarray(load(f"state/{k}")) for k in names} if names else None
    finally:
        reader.close()
    reset = missing_optimizer_state(model, stored_arrays(ck.params), int(ck.meta.get("steps", 0)))
    if reset and log is not None:
        from ..log import warn_once_per_job
        warn_once_per_job(log, "checkpoint %s %s", ck.path, reset)
    model.steps = int(ck.meta.get("steps", 0))
    return reader.nbytes


def stored_arrays(entries):
    """Index entries as the single-file reader's dicts say what they hold: ``{name, velocity,
    state}`` with ``velocity`` True or None and ``state`` ``{NAME: True}`` (for checks of what a
    checkpoint holds without reading its arrays)."""
    return [{"name": e["name"], "velocity": True if "velocity" in e["keys"] else None,
             "state": {k[len("state/"):]: True for k in e["keys"] if k.startswith("state/")}}
            for e in entries]


def read_sharded(path):
    """The whole sharded checkpoint ``path`` as a :class:`Checkpoint` with global arrays (as
    :func:`~distnet.models.checkpoint.read_checkpoint` gives a single file): for one process
    (evaluate, compare, consolidate), every array in memory."""
    ck = read_index(path)
    reader = ShardReader(ck)
    try:
        for e in ck.params + ck.buffers:
            e["value"] = reader.whole(e, "value")
            e["velocity"] = reader.whole(e, "velocity") if "velocity" in e["keys"] else None
            e["state"] = {k[len("state/"):]: reader.whole(e, k) for k in e["keys"] if k.startswith("state/")}
    finally:
        reader.close()
    return ck


# ---------------------------------------------------------------------------------------------
# Either form: what the experiments call
# ---------------------------------------------------------------------------------------------

def save_any(path, model, topology, epoch, config=None, history=(), sharded=False):
    """:func:`~distnet.models.checkpoint.save_checkpoint` (one file), or with ``sharded`` a
    sharded folder (:func:`save_sharded`). Collective over the run's world; returns
    ``{"format", "bytes", "seconds"}``."""
    if not sharded:
        return save_checkpoint(path, model, topology, epoch, config, history)
    state = model.shuffle_rng.get_state() if model.shuffle_rng is not None else None
    stats = save_sharded(path, model, topology, epoch, _meta(model, topology), state, config, history)
    return dict(stats, format="sharded")


def restore_any(model, path, topology, log=None):
    """Load the checkpoint ``path`` (a file or a sharded folder, written on any layout) into the
    configured model; returns its :class:`~distnet.models.checkpoint.Checkpoint` (``io``: the
    format, bytes read by this rank and seconds). World rank 0 reads the file, or the folder's
    index, and hands it to every rank; from a folder every rank then reads the pieces of its own
    slices. Collective over the run's world: every rank raises the same
    :class:`CheckpointError` if any fails."""
    from ..comm.abort import run_collectively
    from ..comm.root_read import read_on_root
    t0 = time.perf_counter()
    ck = read_on_root(topology.world, lambda: read_index(path) if is_sharded(path) else read_checkpoint(path))
    if "token" not in ck.meta:
        run_collectively(lambda: apply_checkpoint(model, ck, log), topology.world)
        nbytes, kind = sum(a.nbytes for e in ck.params + ck.buffers
                           for a in [e["value"], e["velocity"], *e["state"].values()] if a is not None), "single"
    else:
        nbytes, kind = run_collectively(lambda: apply_sharded(model, ck, log), topology.world), "sharded"
    ck.io = {"format": kind, "bytes": int(nbytes), "seconds": time.perf_counter() - t0}
    return ck


def remove_any(path):
    """Delete the checkpoint ``path``: a file, or a sharded folder with its shards (a policy
    that keeps the last few checkpoints deletes either form)."""
    path = os.fspath(path)
    if is_sharded(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def read_any(path):
    """A checkpoint file or sharded folder, whole, on one process (:func:`read_sharded`)."""
    return read_sharded(path) if is_sharded(path) else read_checkpoint(path)


def read_state(path):
    """The training state of a checkpoint file or sharded folder (epoch, history, the experiment
    it keeps), without its arrays."""
    return read_index(path) if is_sharded(path) else read_checkpoint(path, arrays=False)

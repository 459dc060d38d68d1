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

Saving (:func:`~distnet.models.shard_save.save_sharded`) is atomic over all shards: the shards
go into ``PATH.tmp-TOKEN``, every rank's piece list reaches world rank 0 (a barrier), which
writes ``index.h5`` last (flushed to disk) and renames the folder to ``PATH`` (a previous
checkpoint there is moved aside first and deleted after); it may run in the background from a
staged copy. A folder without ``index.h5``, or whose shards do not carry the index's token, is
refused as incomplete. The folder must be one every rank sees (a shared file system; checked
before training: :func:`check_shared_folder`); a single-file checkpoint is the choice for
node-local disks.
"""
import json
import os
import shutil
import time

import numpy as np

from ..errors import CheckpointError
from .boxes import box_of, box_size, overlap, rows_of
from .checkpoint import (VERSIONS, _fail, _meta, _text, read_checkpoint, read_header, save_checkpoint, shuffle_state_of,
                         stored_arrays)
from .global_params import _held, param_layout, param_slots
from .optimizer_state import missing_optimizer_state
from .shard_save import INDEX, INDEX_FORMAT, save_sharded

__all__ = ["INDEX", "INDEX_FORMAT", "ShardReader", "apply_sharded", "is_sharded", "read_any", "read_index",
           "read_sharded", "remove_any", "restore_any", "save_any", "save_sharded"]

#: Bytes of a piece read at a time while loading (its leading axis in blocks of about this).
BLOCK_BYTES = 8 * 2**20


def is_sharded(path):
    """Whether ``path`` is a sharded checkpoint (a folder) rather than a single file."""
    return os.path.isdir(os.fspath(path))


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
            if version not in VERSIONS:
                raise _fail(path, f"format version {version}; this distnet reads versions "
                                  f"{', '.join(map(str, VERSIONS))}")
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

def save_any(path, model, topology, epoch, config=None, history=(), sharded=False, position=None,
             shuffle_state=None, background=False, log=None):
    """:func:`~distnet.models.checkpoint.save_checkpoint` (one file), or with ``sharded`` a
    sharded folder (:func:`~distnet.models.shard_save.save_sharded`; ``background``: its shards
    written by threads from a staged copy, and a :class:`~distnet.models.shard_save.PendingSave`
    returned). ``position`` and ``shuffle_state``: a checkpoint inside an epoch
    (:func:`~distnet.models.checkpoint.shuffle_state_of`). Collective over the run's world;
    returns ``{"format", "bytes", "seconds"}``."""
    if not sharded:
        return save_checkpoint(path, model, topology, epoch, config, history, position, shuffle_state)
    state = shuffle_state_of(model, position, shuffle_state)
    stats = save_sharded(path, model, topology, epoch, _meta(model, topology), state, config, history, position,
                         background, log)
    return stats if background else dict(stats, format="sharded")


def restore_any(model, path, topology, log=None):
    """Load the checkpoint ``path`` (a file or a sharded folder, written on any layout) into the
    configured model; returns its :class:`~distnet.models.checkpoint.Checkpoint` (``io``: the
    format, bytes read by this rank and seconds). A file: world rank 0 reads it and sends every
    rank its slices (:mod:`~distnet.models.restore_single`); a folder: world rank 0 reads its
    index and hands it to every rank, which then reads the pieces of its own slices. Either way
    a rank holds its share, not the checkpoint. Collective over the run's world: every rank
    raises the same :class:`CheckpointError` if any fails."""
    from ..comm.abort import run_collectively
    from ..comm.root_read import read_on_root
    from .restore_single import restore_single
    if not read_on_root(topology.world, lambda: is_sharded(path)):
        return restore_single(model, path, topology, log)
    t0 = time.perf_counter()
    ck = read_on_root(topology.world, lambda: read_index(path))
    nbytes = run_collectively(lambda: apply_sharded(model, ck, log), topology.world)
    ck.io = {"format": "sharded", "bytes": int(nbytes), "seconds": time.perf_counter() - t0}
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

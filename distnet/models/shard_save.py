"""Writing a sharded checkpoint (:mod:`distnet.models.sharded` has the layout and the reading):
every rank of data replica 0 writes what it owns into ``PATH.tmp-TOKEN``, world rank 0 writes the
index last and renames the folder to ``PATH``.

* **Atomic.** ``PATH`` is always one whole save: a previous checkpoint there is renamed aside
  (``PATH.old-TOKEN``) just before the new folder takes its name, and deleted after.
* **No leaks.** A save that a crash or a lost node cut short leaves its ``PATH.tmp-TOKEN``
  folder (the size of a checkpoint). The next save of ``PATH`` removes every such folder first
  and says so in the log; where the crash fell between the two renames of a publication (no
  ``PATH``, a complete ``PATH.old-TOKEN``), it puts the old checkpoint back first.
  :func:`unfinished_saves` lists them (``distnet runs`` shows them).
* **In the background** (``background=True``, ``checkpoint: {async: true}``): every rank copies
  its share (the *staged copy*: its share of the weights and optimiser state once more in host
  memory), then a thread writes the shard while training goes on; :meth:`PendingSave.finish`
  (collective, called once every rank's thread is done, or before the next save and at the end)
  writes the index and publishes. Until then the previous checkpoint is the newest.
"""
import json
import os
import secrets
import shutil
import threading
import time

import numpy as np

from ..comm.phase import tick
from ..errors import CheckpointError
from .boxes import box_of, box_size
from .checkpoint import _crc, write_header
from .global_params import _arrays, _held, _keys, param_layout, param_slots

INDEX_FORMAT = "distnet-sharded-checkpoint"
INDEX = "index.h5"


def shard_name(rank):
    return f"shard-{rank:05d}.h5"


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


def _host_view(a, copy=False):
    """A numpy array of ``a`` (no copy for numpy unless ``copy``; cupy's ``asnumpy`` for a
    device array, a copy anyway)."""
    if a is None or isinstance(a, np.ndarray):
        return a if a is None or not copy else np.array(a, copy=True)
    from ..backend import get_array_module
    return get_array_module(a).asnumpy(a)


def owned_arrays(model, topology, copy=False):
    """What this rank writes: ``[(record, [(key, host array, box)])]``, the record an index
    entry without its pieces (``group, slot, name, layer, sharded, shape, dtype``). ``copy``:
    the arrays are copies (a background save writes them while training changes the weights).

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
                       "sharded": bool(p.sharded), "shape": list(gshape), "dtype": np.dtype(p.value.dtype).name}
                shape = [len(s["at"]) if isinstance(s, dict) else s[1] - s[0] for s in box]
                arrays = [(key, _host_view(a, copy).reshape(shape), box)
                          for key, a in zip(_keys(p), _arrays(p)) if a is not None]
                out.append((rec, arrays))
    return out


def write_owned(owned, writer):
    """Write :func:`owned_arrays`' arrays into ``writer``; returns the index records ``[{group,
    slot, name, layer, sharded, shape, dtype, keys, pieces: {key: [piece]}}]``."""
    out = []
    for rec, arrays in owned:
        rec = dict(rec, keys=[key for key, _, _ in arrays], pieces={})
        for key, a, box in arrays:
            rec["pieces"][key] = [writer.add(a, box)]
            tick()
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


def write_index(folder, token, arrays, shards, epoch, meta, shuffle_state, config, history, position=None):
    """``index.h5`` into ``folder`` (flushed to disk): the training state and the piece list."""
    from ..fileio import hdf5_file, umask_mode
    path = os.path.join(folder, INDEX)
    open(path, "wb").close()
    with hdf5_file(path, sync=True) as f:
        write_header(f, INDEX_FORMAT, epoch, meta, shuffle_state, config, history, position)
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
    _sync_folder(os.path.dirname(os.path.abspath(path)))
    if old is not None:
        shutil.rmtree(old) if os.path.isdir(old) and not os.path.islink(old) else os.unlink(old)


def _sync_folder(folder):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- what interrupted saves leave ---------------------------------------------------------------

def _bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def unfinished_saves(path):
    """``[(path, bytes)]`` of what interrupted saves of the checkpoint ``path`` left beside it:
    ``PATH.tmp-TOKEN`` folders (a save cut short) and ``PATH.old-TOKEN`` ones (a publication cut
    short between its two renames)."""
    folder, base = os.path.split(os.path.abspath(os.fspath(path)))
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [(os.path.join(folder, n), _bytes(os.path.join(folder, n))) for n in names
            if n.startswith((base + ".tmp-", base + ".old-", base + ".probe-"))]


def clean_unfinished(path, log=None):
    """Before a save of ``path`` (world rank 0; no save of it runs): put back a checkpoint whose
    publication was cut short (``PATH`` missing, a complete ``PATH.old-TOKEN`` there), then
    remove what :func:`unfinished_saves` lists, each said in ``log``. Returns the removed paths."""
    left = unfinished_saves(path)
    if not os.path.lexists(path):
        olds = [p for p, _ in left if ".old-" in os.path.basename(p) and os.path.exists(os.path.join(p, INDEX))]
        if olds:
            newest = max(olds, key=os.path.getmtime)
            os.rename(newest, path)
            if log is not None:
                log.warning("checkpoint %s: put back %s, a checkpoint whose replacement was cut short",
                            path, os.path.basename(newest))
            left = [(p, n) for p, n in left if p != newest]
    for p, nbytes in left:
        shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)
        if log is not None:
            log.warning("checkpoint %s: removed %s (%.1f MiB), left by a save that did not finish", path,
                        os.path.basename(p), nbytes / 2**20)
    return [p for p, _ in left]


# -- the save -------------------------------------------------------------------------------------

def _begin(path, world, log):
    """World rank 0 cleans up after interrupted saves and makes ``PATH.tmp-TOKEN``; returns the
    token on every rank (collective over ``world``)."""
    from ..comm.abort import run_collectively

    def prepare():
        if world.Get_rank() != 0:
            return None
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, INDEX)) and os.listdir(path):
            raise CheckpointError(f"cannot write checkpoint {path}: it is a folder that holds other "
                                  "files, not a checkpoint")
        clean_unfinished(path, log)
        token = secrets.token_hex(6)
        os.makedirs(f"{path}.tmp-{token}")
        return token
    return world.bcast(run_collectively(prepare, world), root=0)


class _ShardJob:
    """This rank's shard of one save: written now (:meth:`run`) or by a thread (:meth:`start`)."""

    def __init__(self, path, tmp, token, rank, owns, owned):
        self.path, self.tmp, self.token, self.rank, self.owns = path, tmp, token, rank, owns
        self.owned, self.result, self.error, self.thread = owned, None, None, None

    def run(self):
        try:
            if not os.path.isdir(self.tmp):
                raise CheckpointError(f"cannot write checkpoint {self.path}: rank {self.rank} does not see "
                                      f"{self.tmp} (a sharded checkpoint needs a folder every rank sees; write a "
                                      "single file on node-local disks)")
            writer = ShardWriter(self.tmp, shard_name(self.rank), self.token) if self.owns else None
            try:
                records = write_owned(self.owned, writer) if writer is not None else []
            finally:
                nbytes = writer.close() if writer is not None else 0
            self.result = (records, {"file": writer.name, "nbytes": nbytes} if self.owns else None)
        except Exception as e:  # noqa: BLE001 - raised on every rank by PendingSave.finish
            self.error = e
        finally:
            self.owned = None      # the staged copy goes as soon as it is written

    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True, name="distnet-shard-writer")
        self.thread.start()

    def outcome(self):
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


class PendingSave:
    """A sharded save under way (:func:`save_sharded`): :meth:`written` says whether this rank's
    shard is on disk; :meth:`finish` (collective over the world) publishes the checkpoint."""

    def __init__(self, path, world, job, header, total, t0):
        self.path, self.world, self.job = path, world, job
        self.header, self.total, self.t0 = header, total, t0
        self.blocking = time.perf_counter() - t0   # staging, and for a save in the foreground its write

    def written(self):
        """Whether this rank's shard is written (not collective)."""
        return self.job.thread is None or not self.job.thread.is_alive()

    def finish(self):
        """Wait for this rank's shard, then world rank 0 checks that the pieces cover every
        array, writes the index and publishes the folder (collective over the world: a failure
        on any rank raises on every rank and leaves ``path`` as it was). Returns ``{"bytes",
        "seconds", "blocking"}``: the bytes of all files, the wall time from the save's start, and
        the seconds the training waited for it."""
        from ..comm.abort import run_collectively
        t0, world, tmp = time.perf_counter(), self.world, self.job.tmp
        try:
            records, shard = run_collectively(self.job.outcome, world)
        except Exception:
            if world.Get_rank() == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        gathered = world.gather((records, shard), root=0)      # also the barrier before the index

        def index():
            if world.Get_rank() != 0:
                return None
            try:
                arrays = merge_pieces([r for recs, _ in gathered for r in recs], self.total)
                shards = [s for _, s in gathered if s is not None]
                size = sum(s["nbytes"] for s in shards) + write_index(tmp, self.job.token, arrays, shards, **self.header)
                publish(tmp, self.path, self.job.token)
                return size
            except OSError as e:
                from ..fileio import write_failure
                raise CheckpointError(f"cannot write checkpoint {self.path}: {write_failure(e)}") from None
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        nbytes = world.bcast(run_collectively(index, world), root=0)
        end = time.perf_counter()
        return {"bytes": int(nbytes), "seconds": end - self.t0, "blocking": self.blocking + end - t0}


def save_sharded(path, model, topology, epoch, meta, shuffle_state, config=None, history=(), position=None,
                 background=False, log=None):
    """Write the model's state as a sharded checkpoint folder ``path`` (collective over the
    run's world: every rank writes its shard in parallel; a failure on any rank raises on
    every rank and leaves ``path`` as it was). Returns :meth:`PendingSave.finish`'s figures,
    or with ``background`` the :class:`PendingSave` whose threads write the staged copies."""
    world, t0 = topology.world, time.perf_counter()
    path = os.fspath(path)
    token = _begin(path, world, log)
    owned = owned_arrays(model, topology, copy=background)
    job = _ShardJob(path, f"{path}.tmp-{token}", token, world.Get_rank(), topology.data_index == 0, owned)
    total = {g: sum(len(names) for _, _, names in param_slots(model, g)) for g in ("params", "buffers")}
    header = {"epoch": epoch, "meta": meta, "shuffle_state": shuffle_state, "config": config,
              "history": list(history), "position": position}
    if background:
        job.start()
        return PendingSave(path, world, job, header, total, t0)
    job.run()
    return PendingSave(path, world, job, header, total, t0).finish()

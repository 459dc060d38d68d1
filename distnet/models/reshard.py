"""A sharded checkpoint as one file and back, on one process (``distnet checkpoint consolidate``
/ ``split``): one global array in memory at a time, written atomically like a run's save."""
import os
import secrets
import shutil

import numpy as np

from .boxes import box_of
from .checkpoint import FORMAT, _dataset, _fail, _read_dataset, _text, read_header, write_header
from .shard_save import ShardWriter, publish, shard_name, write_index
from .sharded import ShardReader, read_index


def consolidate(path, out):
    """Write the sharded checkpoint ``path`` as one file ``out`` (today's single-file format,
    atomically), one global array in memory at a time. Returns the bytes written."""
    from ..fileio import atomic_target, hdf5_file, umask_mode
    ck = read_index(path)
    reader = ShardReader(ck)
    try:
        with atomic_target(out) as tmp:
            with hdf5_file(tmp, sync=True) as f:
                meta = {k: v for k, v in ck.meta.items()
                        if k not in ("format", "version", "epoch", "created", "distnet_version", "token",
                                     "shards", "arrays")}
                write_header(f, FORMAT, ck.epoch, meta, ck.shuffle_state, ck.config, ck.history)
                for group, entries in (("params", ck.params), ("buffers", ck.buffers)):
                    if group == "buffers" and not entries:
                        continue
                    top = f.create_group(group)
                    for i, e in enumerate(entries):
                        g = top.create_group(f"{i:03d}")
                        g.attrs["name"], g.attrs["layer"], g.attrs["sharded"] = e["name"], e["layer"], e["sharded"]
                        for key in e["keys"]:
                            where = g.require_group("state") if key.startswith("state/") else g
                            _dataset(where, key.split("/")[-1], reader.whole(e, key))
            umask_mode(tmp)
    finally:
        reader.close()
    return os.path.getsize(out)


def _cuts(shape, n):
    """Boxes of ``n`` near-equal blocks of ``shape`` along its longest axis (fewer when the
    axis is shorter)."""
    if not shape:
        return [[]]
    axis = int(np.argmax(shape))
    edges = np.linspace(0, shape[axis], min(n, shape[axis]) + 1).astype(int) if shape[axis] else [0, 0]
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        box = [[0, s] for s in shape]
        box[axis] = [int(a), int(b)]
        out.append(box)
    return out


def split(path, out, nshards):
    """Write the single-file checkpoint ``path`` as a sharded folder ``out`` of ``nshards``
    shards: each sharded array cut in blocks along its longest axis, each replicated one into
    the first shard (any boxes do: a run reshards on load). One global array in memory at a
    time; atomic like a run's save. Returns the bytes written."""
    import h5py

    out = os.fspath(out)
    try:
        source = h5py.File(path, "r")
    except OSError as e:
        raise _fail(path, f"not a readable HDF5 file (truncated or corrupt?): {e}") from None
    token = secrets.token_hex(6)
    tmp = f"{out}.tmp-{token}"
    os.makedirs(tmp)
    try:
        with source as f:
            if _text(f.attrs.get("format", "")) != FORMAT:
                raise _fail(path, f"not a distnet checkpoint (no format attribute {FORMAT!r})")
            ck = read_header(path, f)
            writers = [ShardWriter(tmp, shard_name(r), token) for r in range(nshards)]
            arrays = []
            try:
                for group in ("params", "buffers"):
                    if group not in f:
                        continue
                    for slot, name in enumerate(sorted(f[group])):
                        g = f[group][name]
                        keys = [k for k in ("value", "velocity") if k in g]
                        keys += [f"state/{k}" for k in sorted(g["state"])] if "state" in g else []
                        label = _text(g.attrs.get("name", name))
                        e = {"group": group, "slot": slot, "name": label, "layer": _text(g.attrs.get("layer", "")),
                             "sharded": bool(g.attrs.get("sharded", False)), "keys": keys, "pieces": {}}
                        for key in keys:
                            a = _read_dataset(path, g[key], f"{label} {key}")
                            e["shape"], e["dtype"] = list(a.shape), e.get("dtype") or np.dtype(a.dtype).name
                            boxes = _cuts(list(a.shape), nshards) if e["sharded"] else [box_of(Ellipsis, a.shape)]
                            e["pieces"][key] = [writers[r].add(a[tuple(slice(*s) for s in b)], b)
                                                for r, b in enumerate(boxes)]
                            del a
                        arrays.append(e)
            finally:
                shards = [{"file": w.name, "nbytes": w.close()} for w in writers]
        meta = {k: v for k, v in ck.meta.items()
                if k not in ("format", "version", "epoch", "created", "distnet_version")}
        size = sum(s["nbytes"] for s in shards)
        size += write_index(tmp, token, arrays, shards, ck.epoch, meta, ck.shuffle_state, ck.config, ck.history)
        publish(tmp, out, token)
        return size
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

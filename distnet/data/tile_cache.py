"""A streamed split's node-local cache: this rank's tile of every row of every split, as stored
(no scaling), in one HDF5 file (``cache_dir``, or a ``.h5`` ``serialized_path``), so that a rank
streams its minibatches from its own disk instead of the shared data file.

Layout: ``<split>/x`` ``(N, C, *tile.shape)`` in the stored dtype, chunks of one image and at most
128 pixels along each spatial axis (a minibatch reads whole chunks of its rows only),
``<split>/y`` the labels (per-pixel labels are the one-channel split ``<split>/mask``), and the
metadata of :mod:`.cache` (:func:`~.cache.stamp`: the sources,
the tile, the rank, ``kind: tile``). It is used while that metadata matches the run, rebuilt with
a warning otherwise. Only this rank reads and writes it, so it may live on storage no other node
sees. How it is filled is the read strategy's (:mod:`.reading`): copied from the data files
(:func:`copy_tile_cache`), or written from the reader's stream.
"""
import logging

import numpy as np

from ..fileio import atomic_target, free_space, hdf5_file, write_failure
from .cache import differences, foreign, prepared, stamp, stamped
from .sources import H5Source

log = logging.getLogger(__name__)

#: Chunk edge (pixels) of a tile cache along each spatial axis.
CHUNK_PIXELS = 128


def open_tile_cache(path, meta, splits):
    """``{split: H5Source}`` of the tile cache at ``path`` when its metadata equals ``meta`` and it
    holds ``splits``, else None (a warning for a stale or unreadable file); DataError for a file
    there that is not a distnet cache."""
    meta = prepared(path, meta)
    if meta is None:
        return None
    import h5py
    try:
        with h5py.File(path, "r") as f:
            cached = stamped(f)
            if not cached:
                raise foreign(path)
            shapes = {s: (f[f"{s}/x"].shape, f[f"{s}/x"].dtype) for s in splits}
        diffs = differences(cached, meta)
        if not diffs:
            log.info("using tile cache %s", path)
            return {s: H5Source(path, s, *shapes[s]) for s in splits}
        log.warning("tile cache %s was written for another run (%s); rebuilding it", path, "; ".join(diffs))
    except (OSError, KeyError, ValueError) as e:
        log.warning("tile cache %s is unusable (%s); rebuilding it", path, e)
    return None


def create_split(f, split, count, channels, tile, dtype):
    """The dataset ``<split>/x`` of ``count`` images of ``tile`` (module docstring) in the open
    file ``f``; its shape and dtype."""
    shape = (count, channels) + tuple(tile.shape)
    chunks = (1, channels) + tuple(min(d, CHUNK_PIXELS) for d in tile.shape)
    return f.create_dataset(f"{split}/x", shape, dtype=dtype, chunks=chunks)


def sources_of(path, shapes):
    """``{split: H5Source}`` reading the tile cache at ``path``; ``shapes``: ``{split: (shape, dtype)}``."""
    return {s: H5Source(path, s, shape, dtype) for s, (shape, dtype) in shapes.items()}


def copy_tile_cache(path, meta, sources, tile, rows_per_copy=256):
    """The tile cache at ``path`` (:func:`open_tile_cache`), else one copied from ``sources``
    (``{split: Source}``, closed after) ``rows_per_copy`` images at a time (memory flat). None
    (with a warning) when it cannot be written (no room on its file system, a failed write):
    read ``sources`` instead."""
    found = open_tile_cache(path, meta, sources)
    if found is not None:
        return found
    pixels = int(np.prod(tile.shape))
    need = sum(s.shape[0] * (s.shape[1] * pixels * s.dtype.itemsize + 72) for s in sources.values()) + 2**16
    folder, free = free_space(path)
    if need > free:
        log.warning("not writing tile cache %s: it needs about %.1f MiB but %s has %.1f MiB free; "
                    "streaming from the data file instead", path, need / 2**20, folder, free / 2**20)
        return None
    try:
        return _copy(path, meta, sources, tile, rows_per_copy)
    except (OSError, RuntimeError) as e:      # h5py raises both for a failed write
        log.warning("could not write tile cache %s (%s); streaming from the data file instead", path,
                    write_failure(e))
        return None


def _copy(path, meta, sources, tile, rows_per_copy):
    shapes = {}
    with atomic_target(path) as tmp:
        with hdf5_file(tmp) as f:     # a disk that fills meanwhile: an OSError, never a crash at exit
            for split, src in sources.items():
                n, c = src.shape[:2]
                x = create_split(f, split, n, c, tile, src.dtype)
                for a in range(0, n, rows_per_copy):
                    x[a:a + rows_per_copy] = src.read(np.arange(a, min(n, a + rows_per_copy)), tile)
                if src.labels() is not None:      # (masks are a split of their own)
                    f[f"{split}/y"] = np.asarray(src.labels())
                shapes[split] = (x.shape, src.dtype)
                src.close()
            stamp(f, meta)
    log.info("wrote tile cache %s", path)
    return sources_of(path, shapes)

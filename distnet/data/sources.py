"""Where one split's images are stored, read a few rows and one tile at a time.

A *source* holds one split of ``N`` images ``(N, C, H, W)`` (volumes ``(N, C, D, H, W)``) of a
stored dtype and its ``N`` labels. ``read(rows, tile)`` returns ``x[rows, :, y0:y1, x0:x1]`` in
the stored dtype for **increasing** ``rows`` (h5py's rule for fancy indexing; callers sort and
reorder): an HDF5 hyperslab, a slice of a memory-mapped ``.npy`` file, or of an array in memory.
Labels are small and read at once; per-pixel labels (masks) are a source of their own, read by
tile like the images (:mod:`.pixel_labels`), and the images' ``labels()`` is then None.
Read failures (a corrupt chunk, a truncated file) raise :class:`DataError` naming the file.

A file changed in place while the run reads it (truncated, rewritten: same inode, another size
or modification time than when it was opened) is a :class:`DataError` at the next read, checked
with one ``stat`` per read: HDF5 reads the part past a truncated end as zeros, without an error,
and a truncated memory-mapped ``.npy`` kills the process with SIGBUS. A file replaced by another
(renamed over, deleted) is not an error: the open handle keeps reading the file it opened.
"""
import os

import numpy as np

from ..errors import DataError
from ..geometry.partition import Box


def whole(shape):
    """The :class:`~distnet.geometry.Box` of a whole image of spatial ``shape`` ``(H, W)`` (a
    volume's ``(D, H, W)``)."""
    return Box.of_spans((0, int(n)) for n in shape)


def cut(tile, origin=None, rows=slice(None)):
    """The index of ``tile``'s box over the spatial axes of an ``(N, C, *spatial)`` array whose
    first pixel sits at ``origin``'s corner (None: the image's corner, stored coordinates), of
    its ``rows`` and every channel: ``x[cut(tile)]`` is ``x[:, :, y0:y1, x0:x1]``."""
    inside = tile.relative_to(origin) if origin is not None else tuple(slice(a, b) for a, b in tile.spans)
    return (rows, slice(None)) + inside


def open_hdf5(path):
    """``h5py.File(path, "r")``; DataError naming the file when it cannot be opened."""
    import h5py
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DataError(f"cannot open HDF5 file {path}: {e}") from None


def _runs(rows, positions):
    """Split ``rows`` (increasing) and their output ``positions`` into ``(row0, pos0, n)`` runs
    where both go up by one: one hyperslab read per run."""
    if len(rows) == 0:
        return []
    breaks = np.flatnonzero((np.diff(rows) != 1) | (np.diff(positions) != 1)) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [len(rows)]])
    return [(int(rows[a]), int(positions[a]), int(b - a)) for a, b in zip(starts, stops)]


def file_stamp(path):
    """``(device, inode, size, mtime_ns)`` of ``path``, or None if it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Source:
    """Base: ``path`` (for messages), ``name`` (split), ``shape`` ``(N, C, H, W)``, ``dtype``,
    :meth:`labels`, :meth:`read`. A ``tile`` is a :class:`~distnet.geometry.Box` over the spatial
    axes (those after ``C``)."""

    path = None
    name = None
    shape = None
    dtype = None
    #: :func:`file_stamp` of ``path`` when it was opened (None: not a file read from disk).
    stamp = None

    def check_unchanged(self):
        """DataError if ``path`` is the file that was opened but changed since (module docstring)."""
        if self.stamp is None:
            return
        now = file_stamp(self.path)
        if now is not None and now[:2] == self.stamp[:2] and now != self.stamp:
            what = f"size {self.stamp[2]} -> {now[2]} bytes" if now[2] != self.stamp[2] else "modified"
            raise DataError(f"{self.path} changed while the run was reading it ({what}): a data file "
                            "must stay as it is until the run ends (write a new file, then rename it)")

    def labels(self):
        raise NotImplementedError

    def read(self, rows, tile, positions=None, out=None):
        """``x[rows, :, y0:y1, x0:x1]`` in the stored dtype; ``rows`` non-decreasing. With
        ``positions``, row ``rows[i]`` goes to ``out[positions[i]]`` (``out`` made if None)."""
        raise NotImplementedError

    def _out(self, n, tile, out):
        if out is None:
            out = np.empty((n, self.shape[1]) + tuple(tile.shape), self.dtype)
        return out

    def where(self):
        return f"{self.path} ({self.name})"

    def close(self):
        pass


class H5Source(Source):
    """Datasets ``<split>/x`` and ``<split>/y`` of an HDF5 file, opened read-only on first use
    (one handle per source, kept open; h5py serialises its calls with its own lock, so the
    prefetch thread and a read on demand may share it). ``pixel_labels``: the split's labels
    are per pixel (a source of their own), so :meth:`labels` is None."""

    #: The dataset of the split read as its pixels, and whether it has a channel axis.
    member, channels = "x", True

    def __init__(self, path, split, shape, dtype, pixel_labels=False):
        self.path, self.name = path, split
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.pixel_labels = pixel_labels
        self._file = None

    def _x(self):
        if self._file is None:
            self.stamp = file_stamp(self.path)
            self._file = open_hdf5(self.path)
        return self._file[f"{self.name}/{self.member}"]

    def chunk_warning(self):
        """A sentence when streaming this split is slow by layout: chunks of several images
        that pass a filter (compression, checksums) and exceed HDF5's 1 MiB chunk cache, so
        every read of a few rows decodes whole chunks again; else None."""
        ds = self._x()
        if not ds.chunks or ds.chunks[0] < 2 or not (ds.compression or ds.fletcher32 or ds.shuffle
                                                     or ds.scaleoffset is not None):
            return None
        nbytes = int(np.prod(ds.chunks)) * ds.dtype.itemsize
        if nbytes <= 2**20:
            return None
        return (f"{self.path}: {self.name}/x is stored compressed in chunks of {ds.chunks[0]} images "
                f"({nbytes / 2**20:.1f} MiB): every minibatch decodes whole chunks, so streaming is slow; "
                "set cache_dir (a tile cache of one image per chunk), use in_memory: true, or rewrite "
                "it with chunks=(1, C, H, W)")

    def labels(self):
        if self.pixel_labels:
            return None
        import h5py
        try:
            with h5py.File(self.path, "r") as f:
                return f[f"{self.name}/y"][()]
        except (OSError, KeyError) as e:
            raise DataError(f"cannot read {self.name}/y of {self.path}: {e}") from None

    def read(self, rows, tile, positions=None, out=None):
        ds = self._x()
        self.check_unchanged()
        rows = np.asarray(rows, dtype=np.int64)
        positions = np.arange(len(rows)) if positions is None else np.asarray(positions)
        out = self._out(len(rows), tile, out)
        a = n = 0
        box = cut(tile)[1 if self.channels else 2:]     # every channel, the tile's box over the spatial axes
        into = () if self.channels else (0,)            # one stored as the only channel of out
        try:
            for a, at, n in _runs(rows, positions):   # one hyperslab per run of consecutive rows
                ds.read_direct(out, (slice(a, a + n),) + box, (slice(at, at + n),) + into)
        except (OSError, ValueError, RuntimeError) as e:
            raise DataError(f"cannot read {self.name}/{self.member} of {self.path} (images {a}..{a + n - 1}): "
                            f"{str(e).splitlines()[0]}") from None
        return out

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None


class ArraySource(Source):
    """An array in memory or memory-mapped (``np.load(..., mmap_mode='r')``)."""

    def __init__(self, path, split, x, y):
        self.path, self.name = path, split
        self._xarr, self._y = x, None if y is None else np.asarray(y)
        self.shape, self.dtype = tuple(x.shape), x.dtype

    def labels(self):
        return self._y

    def read(self, rows, tile, positions=None, out=None):
        rows = np.asarray(rows, dtype=np.int64)
        out = self._out(len(rows), tile, out)
        self.check_unchanged()
        try:
            if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
                part = self._xarr[cut(tile, rows=slice(int(rows[0]), int(rows[-1]) + 1))]
            else:
                part = self._xarr[cut(tile, rows=rows)]
            if positions is None:
                out[...] = part
            else:
                out[np.asarray(positions)] = part
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read {self.where()}: {e}") from None
        return out


def npy_source(x_path, y_path, split):
    """A memory-mapped ``.npy`` pair (``x`` ``(N, C, H, W)`` or ``(N, H, W)``, ``y`` ``(N,)``;
    ``y`` is loaded whole)."""
    for p in (x_path, y_path):
        if not os.path.isfile(p):
            raise DataError(f"{split} data file {p} does not exist")
    try:
        stamp = file_stamp(x_path)
        x = np.load(x_path, mmap_mode="r", allow_pickle=False)
        y = np.load(y_path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {split} arrays {x_path}, {y_path}: {e}") from None
    if x.ndim == 3:
        x = x[:, None]
    src = ArraySource(x_path, split, x, y)
    src.stamp = stamp
    return src

"""A split read from disk per minibatch: :class:`StreamArray`, an array-like the models index.

The models index their data as ``x[rows]`` (``rows`` an int array: a replica's rows of a global
minibatch, in minibatch order) and ask ``x.shape[0]`` / ``len(x)``. A :class:`StreamArray` answers
the same calls by reading only those rows of the rank's tile from the source (an HDF5 hyperslab
per run of consecutive rows, or a memory-mapped ``.npy``), in increasing file order, then
reordering them, converting to the float dtype and scaling (:mod:`.scaling`). The values equal
those of the in-memory array bit for bit, so the numbers of a run do not depend on the mode.

Prefetch: :meth:`StreamArray.schedule` is given the index arrays the model will ask for next (in
order); a background thread reads them ahead (``depth`` batches) while the model computes. A
request that matches the next scheduled one takes the prefetched batch; any other is read at once.
Without a schedule, a request that continues an arithmetic pattern (the evaluation loop's
``arange`` blocks) starts a read of the next block. :meth:`attach` hooks a model's ``batches``
so that every epoch's minibatches are scheduled with no change to the model.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .scaling import check_finite, check_int_range, check_scaled

#: Minibatches read ahead of the one being trained.
PREFETCH_DEPTH = 2


class StreamArray:
    """Rows ``index`` of a :class:`~distnet.data.sources.Source`, cut to ``tile`` and scaled.

    Parameters
    ----------
    source : Source
        The split as stored, ``(N_file, C, H, W)``.
    index : int array ``(n,)``
        File rows of this split, in its order (``sample_pct`` subset, validation hold-out).
    tile : Box
        The part of the plane this rank reads.
    scaler : Scaler
    dtype : numpy float dtype
    check : bool
        Check every batch read for NaN / inf (float sources).

    ``shape`` is ``(n, C, h, w)``; ``x[rows]`` returns a new ``(len(rows), C, h, w)`` array.
    """

    def __init__(self, source, index, tile, scaler, dtype, check=False):
        self.source = source
        self.index = np.asarray(index, dtype=np.int64)
        self.tile = tile
        self.scaler = scaler
        self.dtype = np.dtype(dtype)
        self.check = check
        #: One row as the source stores it (its channels, the tile).
        self.row_shape = (source.shape[1],) + tuple(tile.shape)
        self.shape = (len(self.index),) + self.row_shape
        #: Streams read with this one (a split's per-pixel labels): :meth:`schedule` schedules them too.
        self.companions = []
        self._pool = None
        self._plan = []           # [(rows, future)] scheduled, in order
        self._pending = []        # row sets scheduled but not yet submitted
        self._last = None         # last rows asked for (for the arithmetic guess)
        self._guess = None        # (rows, future) started by the guess
        self._lock = threading.Lock()
        self._local = threading.local()
        #: Batches served from a prefetch / read on demand (for tests and benchmarks).
        self.stats = {"prefetched": 0, "direct": 0}

    def __len__(self):
        return self.shape[0]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def nbytes(self):
        """Bytes of the whole split in ``dtype`` (what in-memory mode would hold)."""
        return int(np.prod(self.shape)) * self.dtype.itemsize

    # -- reading -------------------------------------------------------------------------------

    def read(self, rows):
        """``x[rows]`` read now (no prefetch): ``(len(rows), C, h, w)`` of ``dtype``."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"rows {rows.min()}..{rows.max()} outside 0..{len(self) - 1}")
        file_rows = self.index[rows]
        order = np.argsort(file_rows, kind="stable")      # read in file order, each row to its place
        raw = self.source.read(file_rows[order], self.tile, positions=order, out=self._raw_buffer(len(rows)))
        x = np.empty((len(rows),) + self.row_shape, self.dtype)
        self.scaler.apply_into(raw, x)
        if self.check:
            check_finite(x, self.source.where(), rows=file_rows)
        return x

    def _raw_buffer(self, n):
        """A reused ``(n, C, h, w)`` buffer of the stored dtype, one per thread (no page faults
        for a fresh allocation every batch)."""
        buf = getattr(self._local, "raw", None)
        if buf is None or buf.shape[0] < n:
            buf = np.empty((n,) + self.row_shape, self.source.dtype)
            self._local.raw = buf
        return buf[:n]

    def __getitem__(self, rows):
        if isinstance(rows, slice):
            rows = np.arange(len(self))[rows]
        elif np.isscalar(rows):
            return self[np.array([rows])][0]
        rows = np.asarray(rows, dtype=np.int64)
        with self._lock:
            fut = None
            if self._plan and np.array_equal(self._plan[0][0], rows):
                fut = self._plan.pop(0)[1]
                self._top_up()
            elif self._guess is not None and np.array_equal(self._guess[0], rows):
                fut = self._guess[1]
            elif self._plan:      # the model asked for something else: the plan is stale
                self.cancel()
            self._guess = None
            guess = self._next_guess(rows)
            self._last = rows
            if guess is not None and not self._plan:
                self._guess = (guess, self._submit(guess))
        if fut is not None:
            self.stats["prefetched"] += 1
            return fut.result()
        self.stats["direct"] += 1
        return self.read(rows)

    # -- prefetch ------------------------------------------------------------------------------

    def _submit(self, rows):
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="distnet-prefetch")
        return self._pool.submit(self.read, rows)

    def _next_guess(self, rows):
        last = self._last
        if last is None or len(last) != len(rows) or len(rows) == 0:
            return None
        step = rows - last
        if not (step == step[0]).all() or step[0] <= 0:
            return None
        nxt = rows + step[0]
        return nxt if nxt[-1] < len(self) else None

    def read_ahead(self):
        """:meth:`schedule`: what the training loop hands the model to read each epoch's
        minibatches ahead (``Dataset.read_ahead``)."""
        return self.schedule

    def schedule(self, batches):
        """Read ``batches`` (index arrays, in the order they will be asked for) ahead, here and in
        the :attr:`companions`."""
        with self._lock:
            self.cancel()
            self._pending = [np.asarray(b, dtype=np.int64) for b in batches]
            self._top_up()
        for other in self.companions:
            other.schedule(batches)

    def _top_up(self):
        pending = self._pending
        while pending and len(self._plan) < PREFETCH_DEPTH:
            rows = pending.pop(0)
            self._plan.append((rows, self._submit(rows)))

    def cancel(self):
        """Forget scheduled reads (those running finish and are dropped)."""
        for _, fut in self._plan:
            fut.cancel()
        self._plan = []
        self._pending = []
        self._guess = None

    def close(self):
        """Stop the prefetch thread and close the source."""
        with self._lock:
            self.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.source.close()

    # -- in memory -----------------------------------------------------------------------------

    def materialize(self, rows_per_read=256):
        """The whole split as one ``shape`` (``(n, C, h, w)``) array of ``dtype``, read in blocks of rows
        (peak memory: the result plus one block in the stored dtype)."""
        out = np.empty(self.shape, self.dtype)
        for a in range(0, len(self), rows_per_read):
            out[a:a + rows_per_read] = self.read(np.arange(a, min(a + rows_per_read, len(self))))
        return out

    def __repr__(self):
        return (f"StreamArray({self.source.where()}, shape={self.shape}, dtype={self.dtype}, "
                f"tile={self.tile})")


def check_source_finite(source, index, tile, rows_per_read=256, scaler=None, dtype=None):
    """DataError (naming the file and an image) if the float ``source`` holds NaN or inf in
    ``tile`` of the rows ``index``; reads in blocks (memory flat). With ``scaler`` and ``dtype``,
    also a ConfigError naming ``scale``/``mean``/``std`` when they turn the finite values into
    NaN or inf (:func:`~.scaling.check_scaled`). Integer sources are checked by the range of
    their type (:func:`~.scaling.check_int_range`), and read like float ones only when that
    range overflows (int32 / int64 data with a large scale or a tiny std: it went into
    training as inf, and the first step reported a NaN cost)."""
    if source.dtype.kind != "f":
        if scaler is None or check_int_range(source.dtype, source.shape[1], dtype, source.where(), scaler):
            return
    index = np.unique(np.asarray(index, dtype=np.int64))
    for a in range(0, len(index), rows_per_read):
        rows = index[a:a + rows_per_read]
        raw = source.read(rows, tile)
        check_finite(raw, source.where(), rows=rows)
        if scaler is not None:
            x = scaler.apply_into(raw, np.empty(raw.shape, dtype))
            check_scaled(x, source.where(), rows, lambda i: raw[i:i + 1], scaler)


__all__ = ["PREFETCH_DEPTH", "StreamArray", "check_source_finite"]

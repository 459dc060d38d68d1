"""The ``read`` key of a dataset as a strategy the dataset composes: which ranks open its files,
and how every rank gets its tile of the rows it uses.

* ``every`` (the default, :class:`EveryRankReads`): every rank opens the files and reads its
  own tile (a shared filesystem, or a copy of the data on every node).
* ``root`` (:class:`ReaderReads`): world rank 0 alone opens them; the other ranks get the header
  (:mod:`.header`: shapes, dtypes, labels, class names, the files' sizes and dates) by broadcast
  and their tiles of the rows by a chunked stream (:mod:`distnet.comm.scatter_rows`). The data
  need be on rank 0's node only.
* ``node`` (:class:`ReaderReads`): the lowest rank of each node opens them and serves the ranks
  of its node (a copy on every node's local disk, read once per node).

One protocol, :class:`Reading`, written once, answered by both: :meth:`~Reading.header` (what
the files hold, for a rank that does not open them), :meth:`~Reading.rows` (these rows of this
tile of every split, as sources that read them as the file would), and on those two
:meth:`~Reading.fetch` (a rank's cache, else its data built from the rows and cached),
:meth:`~Reading.tile_cache` (a streamed split's node-local copy) and
:meth:`~Reading.read_images` (``distnet predict --data``). A dataset asks its strategy and runs
its own steps (subsample, scale, checks) on what it gets, the same for every strategy, so the
numbers of ``read: root`` equal those of ``read: every`` bit for bit. With a cache
(``cache_dir``, ``serialized_path``) a later run whose caches all match reads nothing from the
reader (the data may then be gone from the reader's node too: the header comes from the
reader's cache).

The strategies talk to MPI through the :class:`~distnet.comm.root_read.DataReader` of
:mod:`distnet.comm.root_read` (its group and its collectives); this module never imports mpi4py.
"""
import logging
import os

import numpy as np

from ..errors import ConfigError, DataError
from ..geometry.partition import Box
from . import cache
from .header import HeldSource, header_entry, header_from_cache, header_sources, header_to_json, missing_everywhere
from .predict_files import check_images_finite
from .sources import whole

log = logging.getLogger(__name__)

#: The values of the ``read`` key.
READ_MODES = ("every", "root", "node")


def parse_read(value):
    """``read`` as one of :data:`READ_MODES` (None: ``every``). Raises ConfigError."""
    if value is None:
        return "every"
    if isinstance(value, str) and value.strip().lower() in READ_MODES:
        return value.strip().lower()
    raise ConfigError(f"must be one of every, root, node (which ranks open the data files), got {value!r}",
                      key="read")


def parse_chunk_mb(value):
    """``read_chunk_mb`` (a positive number of MiB) as bytes."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"must be a positive number of MiB, got {value!r}", key="read_chunk_mb")
    return max(1, int(value * 2**20))


def reading_for(mode, chunk_bytes=None):
    """The strategy of ``read: mode`` for this process: :class:`ReaderReads` over the job's
    :class:`~distnet.comm.root_read.DataReader` for ``root`` / ``node``, or
    :class:`EveryRankReads` (``every``, and a process without MPI or a world of one rank, where
    this rank reads for itself). The first ``root`` / ``node`` call is collective over the world
    (:func:`~distnet.comm.root_read.job_reader`)."""
    if mode == "every":
        return EveryRankReads()
    from ..comm.root_read import job_reader
    reader = job_reader(mode)
    if reader is None:          # read: root alone in its world: one rank read, nothing to compare
        return EveryRankReads(compares_copies=mode != "root")
    return ReaderReads(reader, chunk_bytes)


class Reading:
    """The read protocol (module docstring). ``open_sources()`` is the dataset's
    ``{split: Source}`` of its files; ``rows_by_split`` ``{split: increasing stored rows}`` (None:
    every row); ``tile`` the :class:`~distnet.geometry.Box` of the image a rank holds."""

    #: Whether the ranks' data fingerprints are compared (``read: root``: one rank read them).
    compares_copies = True
    #: Whether this rank opens the files for its group (``distnet predict`` opens ``--data`` there).
    is_reader = True
    #: What a streamed split is held as when its cache path is no HDF5 file (for the warning).
    without_tile_cache = "not caching"

    def header(self, describe, cache_file):
        """The header of the files (:mod:`.header`) when another rank opens them; None when this
        rank opens them itself. ``describe()`` makes it on the reader; ``cache_file(world)``: the
        reader's cache file that may hold it when the files are gone from its node."""
        raise NotImplementedError

    def opens_files(self):
        """Whether this rank reads the data files themselves (not only their header)."""
        raise NotImplementedError

    def rows(self, open_sources, rows_by_split, tile, need=True):
        """``{split: Source}`` answering reads of ``rows_by_split`` within ``tile`` (``need``
        False: this rank takes nothing, None)."""
        raise NotImplementedError

    def tile_cache(self, open_sources, tile, path, meta, check, where):
        """``{split: H5Source}`` of this rank's tile cache at ``path`` (:mod:`.tile_cache`, the
        tile as stored at its origin), passed through ``check(sources, box)``; None where it
        cannot be written (stream from :meth:`rows` instead). ``where``: the data file, for
        messages."""
        raise NotImplementedError

    def _agree(self, fn):
        """``fn()`` with one outcome over the ranks that share a reader."""
        return fn()

    def _needs(self, missing):
        """The ranks of the reader's group for which ``missing`` is true."""
        return [0] if missing else []

    def _header_json(self):
        """The header stored beside a cache (None: this rank reads the files)."""
        return None

    def _read_all(self, open_source, tile):
        """Every row of one source ``open_source()``, cut to ``tile`` (None: whole images)."""
        raise NotImplementedError

    def fetch(self, open_sources, rows_by_split, tile, path, meta, build, check=None):
        """This rank's data: its cache at ``path`` when that matches ``meta`` and passes ``check``
        (:func:`~.cache.cached_data`), else ``build(sources)`` of :meth:`rows`, written to the
        cache (with the header, so that a later run finds it there when the data files are
        gone). Where a reader serves a group, only the ranks without a usable cache are sent
        anything, none at all when every cache matches; collective over the group."""
        cached = self._agree(lambda: cache.cached_data(path, meta, check) if path else None)
        if not self._needs(cached is None):
            return cached
        sources = self.rows(open_sources, rows_by_split, tile, need=cached is None)
        if cached is not None:
            return cached       # this rank only kept the others in step
        data = build(sources)
        if path is not None:
            cache.store(path, meta, data, self._header_json())
        return data

    def read_images(self, open_source, where, tile):
        """``distnet predict``'s images (``open_source()``: a :class:`~.sources.Source`, called
        where the files are opened; ``where``: their name in messages): this rank's ``tile``
        (None: whole images) of every image, as stored, ``(N, C, *tile.shape)``; DataError for
        a NaN or infinite value."""
        x = self._read_all(open_source, tile)
        check_images_finite(x, where)
        return x


class EveryRankReads(Reading):
    """``read: every``: this rank opens the data files and reads what it needs itself."""

    mode = "every"

    def __init__(self, compares_copies=True):
        self.compares_copies = compares_copies

    def header(self, describe, cache_file):
        return None

    def opens_files(self):
        return True

    def rows(self, open_sources, rows_by_split, tile, need=True):
        return open_sources()       # the files answer any row and tile

    def tile_cache(self, open_sources, tile, path, meta, check, where):
        """Copied from the files (:func:`~.tile_cache.copy_tile_cache`). A cache failing
        ``check`` while the file passes it was changed behind its metadata: it is rebuilt once,
        with a warning."""
        from .tile_cache import copy_tile_cache
        local = whole(tile.shape)
        for attempt in range(2):
            cached = copy_tile_cache(path, meta, open_sources(), tile)
            if cached is None:
                return None
            try:
                check(cached, local)
                return cached
            except (DataError, ConfigError) as e:   # NaN / inf, as stored or scaled
                for src in cached.values():
                    src.close()
                check(open_sources(), tile)     # bad data (or scaling) of the file itself: name the file
                if attempt:
                    raise
                log.warning("tile cache %s does not hold what %s does (%s); rebuilding it", path, where, e)
                os.unlink(path)

    def _read_all(self, open_source, tile):
        src = open_source()
        try:
            return np.asarray(src.read(np.arange(src.shape[0]), tile or whole(src.shape[2:])))
        finally:
            src.close()


def _corners(tile):
    """``(y0, y1, x0, x1)`` (a volume's ``(z0, z1, y0, y1, x0, x1)``): a tile as
    :func:`~distnet.comm.scatter_rows.scatter_rows` takes it."""
    return tile.bounds


def _reader_of(src, rows=None):
    """``read(a, b, big)`` of :func:`~distnet.comm.scatter_rows.scatter_rows`: rows ``a .. b-1``
    of ``rows`` (None: of the source) of ``src`` cut to the box ``big``."""
    def read(a, b, big):
        return src.read(np.arange(a, b) if rows is None else rows[a:b], Box(*big))
    return read


class ReaderReads(Reading):
    """``read: root`` / ``node``: the ``reader`` (:class:`~distnet.comm.root_read.DataReader`)
    opens the files and streams every rank of its group its tile, at most ``chunk_bytes`` at a
    time. The header is fetched once, at the first call of :meth:`header` (a collective over
    the group: every rank makes it at the same point, in the dataset's ``check()``)."""

    def __init__(self, reader, chunk_bytes=None):
        self.reader, self.chunk_bytes = reader, chunk_bytes
        self.mode = reader.mode
        self.compares_copies = reader.mode != "root"
        self.without_tile_cache = f"with read: {reader.mode} they are held in memory as stored"
        self._header = None
        self._describing = False    # True on the reader while it reads the header from its files

    @property
    def is_reader(self):
        """Whether this rank opens the files for its group."""
        return self.reader.is_reader

    def header(self, describe, cache_file):
        if self._describing:
            return None
        if self._header is None:
            self._header = self.reader.header(lambda: self._describe(describe, cache_file))
        return self._header

    def _describe(self, describe, cache_file):
        self._describing = True
        try:
            return describe()
        except DataError as e:      # the data gone from the reader's node: its cache may know
            header = header_from_cache(cache_file(self.reader.world))
            if header is None:
                raise
            header["from_cache"] = str(e)
            return header
        finally:
            self._describing = False

    def opens_files(self):
        return self.reader.is_reader and not (self._header or {}).get("from_cache")

    def _agree(self, fn):
        return self.reader.agree(fn)

    def _needs(self, missing):
        needs = [r for r, n in enumerate(self.reader.allgather(missing)) if n]
        if needs and self._header.get("from_cache"):
            raise missing_everywhere(self._header, needs)
        return needs

    def _header_json(self):
        return header_to_json(self._header)

    def _open(self, open_sources):
        """The files' sources on the reader, the header's elsewhere (one outcome over the group)."""
        return self._agree(open_sources if self.reader.is_reader else lambda: header_sources(self._header))

    def rows(self, open_sources, rows_by_split, tile, need=True):
        """:class:`~.header.HeldSource` of this rank's ``tile`` of the rows, streamed from the
        reader split by split (in split order). Collective over the reader's group."""
        sources = self._open(open_sources)
        if rows_by_split is None:
            rows_by_split = {s: np.arange(e[1][0]) for s, e in self._header["splits"].items()}
        held = {}
        for split in sorted(rows_by_split):
            src, rows = sources[split], np.asarray(rows_by_split[split], dtype=np.int64)
            x = self.reader.scatter_rows(_reader_of(src, rows) if self.reader.is_reader else None, len(rows),
                                         src.shape[1], src.dtype, _corners(tile), need, self.chunk_bytes)
            if need:
                held[split] = HeldSource(header_entry(src), split, x, rows, tile)
        if self.reader.is_reader:
            for src in sources.values():
                src.close()
        return held if need else None

    def tile_cache(self, open_sources, tile, path, meta, check, where):
        """Written from the reader's stream one chunk at a time (memory flat however large the
        data), or used as it is when its metadata matches; a rank that has its cache only keeps
        the others in step. Collective over the reader's group."""
        from .tile_cache import open_tile_cache
        splits = sorted(self._header["splits"])
        opened = self._agree(lambda: open_tile_cache(path, meta, splits))
        if not self._needs(opened is None):
            check(opened, whole(tile.shape))
            return opened
        sources = self._open(open_sources)
        try:
            if opened is not None:
                self._stream(sources, splits, tile, None, path)
            else:
                opened = self._write(sources, splits, tile, path, meta)
        finally:
            if self.reader.is_reader:
                for src in sources.values():
                    src.close()
        check(opened, whole(tile.shape))
        return opened

    def _write(self, sources, splits, tile, path, meta):
        from ..fileio import atomic_target, hdf5_file
        from .tile_cache import sources_of
        with atomic_target(path) as tmp:
            with hdf5_file(tmp) as f:   # a full disk: an OSError after the stream, on this rank
                shapes = self._stream(sources, splits, tile, f, path)
                cache.stamp(f, meta, header_to_json(self._header))
        return sources_of(path, shapes)

    def _stream(self, sources, splits, tile, f, path):
        """Every split's rows streamed from the reader into the open tile cache ``f`` (None: this
        rank has its cache and only keeps the others in step); ``{split: (shape, dtype)}``. A
        write that fails (a full disk) stops this rank's writing, not the stream."""
        from .tile_cache import create_split
        failed, shapes = None, {}
        for split in splits:
            src = sources[split]
            n, c = src.shape[:2]
            into = None
            try:
                if f is not None and failed is None:
                    into = create_split(f, split, n, c, tile, src.dtype)
                    shapes[split] = (into.shape, src.dtype)
                self.reader.scatter_rows(_reader_of(src) if self.reader.is_reader else None, n, c, src.dtype,
                                         _corners(tile), into is not None, self.chunk_bytes, into=into)
                labels = self._header["splits"][split][3]
                if into is not None and labels is not None:     # (masks are a split of their own)
                    f[f"{split}/y"] = np.asarray(labels)
            except (OSError, RuntimeError, ValueError) as e:     # h5py's write failures
                failed = failed or e
        if failed is not None:
            from ..fileio import write_failure
            raise DataError(f"could not write the tile cache {path}: {write_failure(failed)}")
        return shapes

    def _read_all(self, open_source, tile):
        opened = {}

        def head():
            opened["src"] = open_source()
            return tuple(opened["src"].shape), opened["src"].dtype.str
        shape, dtype = self.reader.header(head)
        tile = tile or whole(shape[2:])
        x = self.reader.scatter_rows(_reader_of(opened["src"]) if self.reader.is_reader else None, shape[0],
                                     shape[1], dtype, _corners(tile), True, self.chunk_bytes)
        if "src" in opened:
            opened["src"].close()
        return x

"""The ``read`` key of a dataset: which ranks open its files.

* ``every`` (the default): every rank opens the files and reads its own tile (a shared
  filesystem, or a copy of the data on every node).
* ``root``: world rank 0 alone opens them; the other ranks get the header (shapes, dtypes,
  labels, class names, the files' sizes and dates) by broadcast and their tiles of the rows by
  a chunked stream (:mod:`distnet.comm.scatter_rows`). The data need be on rank 0's node only.
* ``node``: the lowest rank of each node opens them and serves the ranks of its node (a copy
  on every node's local disk, read once per node).

What a rank receives is its tile of every row it uses, as stored (uint8 stays uint8); from
there the dataset's own steps run unchanged (subsample, scale, checks), on a
:class:`HeldSource` instead of the file, so the numbers equal those of ``read: every`` bit for
bit. A rank holds its tile as stored in memory, or, streaming with a cache, writes it into
its node-local tile cache a chunk at a time; with a cache (``cache_dir``, ``serialized_path``)
a later run whose caches all match reads nothing from the reader (the data may then be gone
from the reader's node too: the header comes from the reader's cache).

This module never talks to MPI: the :class:`~distnet.comm.root_read.DataReader` passed in does.
"""
import numpy as np

from ..errors import ConfigError, DataError
from ..geometry.partition import Box
from .sources import Source

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


def describe_split(src):
    """The header entry of one split: ``(path, shape, dtype str, labels)``."""
    return (str(src.path), tuple(int(d) for d in src.shape), np.dtype(src.dtype).str,
            np.asarray(src.labels()))


class HeaderSource(Source):
    """A split known from the reader's header only: ``shape``, ``dtype``, labels; no pixels
    (this rank does not open the file)."""

    def __init__(self, entry, split):
        self.path, self.name = entry[0], split
        self.shape, self.dtype = tuple(entry[1]), np.dtype(entry[2])
        self._y = entry[3]

    def labels(self):
        return self._y

    def read(self, rows, tile, positions=None, out=None):
        raise DataError(f"{self.where()}: this rank does not read the file (read: root / node): its "
                        "pixels arrive from the reader when the data are loaded")


class HeldSource(HeaderSource):
    """This rank's ``box`` of the file rows ``rows`` (increasing) of a split, held in memory as
    stored, ``x`` ``(len(rows), C, h, w)``; answers :meth:`read` for those rows and any tile
    inside ``box`` in the file's coordinates, as the file would."""

    def __init__(self, entry, split, x, rows, box):
        super().__init__(entry, split)
        self._x, self._rows, self._box = x, np.asarray(rows, dtype=np.int64), box

    @property
    def array(self):
        """The rows held, ``(len(rows), C, h, w)`` as stored (the box of every row received)."""
        return self._x

    def read(self, rows, tile, positions=None, out=None):
        rows = np.asarray(rows, dtype=np.int64)
        b = self._box
        if tile.y0 < b.y0 or tile.x0 < b.x0 or tile.y1 > b.y1 or tile.x1 > b.x1:
            raise DataError(f"{self.where()}: tile {tile} is outside the part {b} this rank received")
        at = np.searchsorted(self._rows, rows)
        if len(rows) and (at.max() >= len(self._rows) or not np.array_equal(self._rows[at], rows)):
            raise DataError(f"{self.where()}: rows outside those this rank received")
        out = self._out(len(rows), tile, out)
        part = self._x[at, :, tile.y0 - b.y0:tile.y1 - b.y0, tile.x0 - b.x0:tile.x1 - b.x0]
        if positions is None:
            out[...] = part
        else:
            out[np.asarray(positions)] = part
        return out


def header_sources(header):
    """``{split: HeaderSource}`` of a header."""
    return {s: HeaderSource(e, s) for s, e in header["splits"].items()}


def receive_rows(reader, sources, rows_by_split, tile, need, chunk_bytes):
    """``{split: HeldSource}``: this rank's ``tile`` of the rows ``rows_by_split[split]``
    (increasing file rows, the same on every rank) of every split, streamed from the reader
    (``sources``: the reader's file sources, header sources elsewhere). ``need`` False: this
    rank takes nothing (None). Collective over the reader's group, in split order."""
    held = {}
    box = (tile.y0, tile.y1, tile.x0, tile.x1)
    for split in sorted(rows_by_split):
        src, rows = sources[split], np.asarray(rows_by_split[split], dtype=np.int64)

        def read(a, b, big, src=src, rows=rows):
            return src.read(rows[a:b], Box(*big))
        x = reader.scatter_rows(read if reader.is_reader else None, len(rows), src.shape[1], src.dtype,
                                box, need, chunk_bytes)
        if need:
            held[split] = HeldSource(describe_header_entry(src), split, x, rows, tile)
    if reader.is_reader:
        for src in sources.values():
            src.close()
    return held if need else None


def describe_header_entry(src):
    """``(path, shape, dtype, labels)`` of a source without reading its labels twice."""
    if isinstance(src, HeaderSource):
        return (src.path, src.shape, src.dtype.str, src.labels())
    return describe_split(src)


def missing_everywhere(header, needs):
    """The DataError when the reader found no data file (its header came from its cache) but
    ranks ``needs`` (their indices in the group) have no usable cache of their own."""
    return DataError(f"{header['files'][0]} is not on the reading rank's node (read: root / node) and "
                     f"rank(s) {', '.join(map(str, needs))} of its group have no usable cache: put the "
                     "data back on the reading rank's node (their caches are then filled again)")


def fetch_shared(reader, header, open_sources, rows_by_split, tile, path, meta, build, chunk_bytes,
                 check=None):
    """This rank's data in ``read: root`` / ``node`` mode: its cache at ``path`` when that
    matches ``meta`` (and passes ``check``), else ``build(held)`` of the tiles received from the
    reader (:func:`receive_rows`), written to the cache (with the header, so that a later run
    finds it there when the data files are gone). Only the ranks without a usable cache are
    sent anything; none at all when every cache matches. Collective over the reader's group.

    ``open_sources()``: the reader's ``{split: Source}`` of the files (called on the reader
    only); ``rows_by_split``: increasing file rows of each stored split to send.
    """
    from . import cache
    cached = reader.agree(lambda: cache.cached_data(path, meta, check) if path else None)
    needs = [r for r, n in enumerate(reader.allgather(cached is None)) if n]
    if not needs:
        return cached
    if header.get("from_cache"):
        raise missing_everywhere(header, needs)
    srcs = reader.agree(open_sources if reader.is_reader else lambda: header_sources(header))
    held = receive_rows(reader, srcs, rows_by_split, tile, cached is None, chunk_bytes)
    if cached is not None:
        return cached
    data = build(held)
    if path is not None:
        cache.store(path, meta, data, header_to_json(header))
    return data


def header_to_json(header):
    """``header`` as JSON values (labels as lists), for a cache file."""
    out = {k: v for k, v in header.items() if k not in ("splits", "from_cache")}
    out["image_shape"] = list(header["image_shape"])
    out["splits"] = {s: [e[0], list(e[1]), e[2], np.asarray(e[3]).tolist()] for s, e in header["splits"].items()}
    return out


def header_from_cache(path):
    """The header stored in the cache file ``path`` by :func:`fetch_shared`, or None (no file,
    no header, unreadable)."""
    from . import cache
    stored = cache.read_header(path) if path else None
    if stored is None:
        return None
    try:
        header = dict(stored)
        header["image_shape"] = tuple(stored["image_shape"])
        header["splits"] = {s: (e[0], tuple(e[1]), e[2], np.asarray(e[3], dtype=np.int64))
                            for s, e in stored["splits"].items()}
        return header
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def read_images_from_reader(reader, open_source, path, image_shape, tile, chunk_bytes):
    """``distnet predict``'s images where only the reader opens them (``open_source()`` on the
    reader: a :class:`~distnet.datasets.sources.Source`; ``path``: their name in messages): this rank's ``tile``
    (None: whole images) of every image, as stored, ``(N, C, h, w)``; the header (count, dtype)
    by broadcast, the pixels streamed in chunks (:func:`~distnet.comm.scatter_rows.scatter_rows`).
    DataError (on every rank) for what :func:`~distnet.datasets.arrays.read_images` refuses.
    Collective over the reader's group."""
    from .arrays import check_images_finite
    opened = {}

    def head():
        opened["src"] = open_source()
        return tuple(opened["src"].shape), opened["src"].dtype.str
    shape, dtype = reader.header(head)
    H, W = shape[2:]
    tile = tile or Box(0, H, 0, W)

    def read(a, b, big):
        return opened["src"].read(np.arange(a, b), Box(*big))
    x = reader.scatter_rows(read if reader.is_reader else None, shape[0], shape[1], dtype,
                            (tile.y0, tile.y1, tile.x0, tile.x1), True, chunk_bytes)
    if "src" in opened:
        opened["src"].close()
    check_images_finite(x, path)
    return x


def fetch_tile_cache(reader, header, open_sources, tile, path, meta, chunk_bytes):
    """``{split: H5Source}`` of this rank's node-local tile cache at ``path`` (its tile of every
    row of every split, as stored: the layout of :func:`~distnet.datasets.cache.tile_cache`),
    used as it is when its metadata matches ``meta``, else written from the reader's stream one
    chunk at a time (memory flat however large the data). Collective over the reader's group."""
    from ..fileio import atomic_target, hdf5_file
    from . import cache
    from .sources import H5Source
    splits = sorted(header["splits"])
    opened = reader.agree(lambda: cache.open_tile_cache(path, meta, splits))
    needs = [r for r, n in enumerate(reader.allgather(opened is None)) if n]
    if not needs:
        return opened
    if header.get("from_cache"):
        raise missing_everywhere(header, needs)
    srcs = reader.agree(open_sources if reader.is_reader else lambda: header_sources(header))
    box = (tile.y0, tile.y1, tile.x0, tile.x1)
    h, w = tile.y1 - tile.y0, tile.x1 - tile.x0

    def stream(f):
        failed = None     # a write that failed (a full disk): this rank stops writing, not streaming
        for split in splits:
            src = srcs[split]
            n, c = src.shape[:2]

            def read(a, b, big, src=src):
                return src.read(np.arange(a, b), Box(*big))
            into = None
            try:
                if f is not None and failed is None:
                    into = f.create_dataset(f"{split}/x", (n, c, h, w), dtype=src.dtype,
                                            chunks=(1, c, min(h, 128), min(w, 128)))
                reader.scatter_rows(read if reader.is_reader else None, n, c, src.dtype, box,
                                    into is not None, chunk_bytes, into=into)
                if into is not None:
                    f[f"{split}/y"] = np.asarray(header["splits"][split][3])
            except (OSError, RuntimeError, ValueError) as e:     # h5py's write failures
                failed = failed or e
        if failed is not None:
            from ..fileio import write_failure
            raise DataError(f"could not write the tile cache {path}: {write_failure(failed)}")
    try:
        if opened is not None:
            stream(None)        # this rank has its cache: it only keeps the others in step
            return opened
        with atomic_target(path) as tmp:
            with hdf5_file(tmp) as f:   # a full disk: an OSError after the stream, on this rank
                stream(f)
                cache.stamp(f, meta, header_to_json(header))
    finally:
        if reader.is_reader:
            for src in srcs.values():
                src.close()
    return {s: H5Source(path, s, tuple(int(d) for d in (header["splits"][s][1][0], header["splits"][s][1][1], h, w)),
                        np.dtype(header["splits"][s][2])) for s in splits}

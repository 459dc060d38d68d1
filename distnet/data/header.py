"""What the reading rank tells the others about a dataset's files before any pixel (``read:
root`` / ``node``, :mod:`.reading`): the *header*, and the sources a rank that does not open the
files reads through.

A header is a dict: ``files`` (the data files), ``fingerprints`` (size and date of each),
``image_shape``, ``nclasses``, ``class_names`` and ``splits`` ``{split: (path, shape, dtype str,
labels)}``; ``from_cache`` (the reader's error) when the reader found no data file and read the
header kept in its own cache. A rank that does not read sees each split as a
:class:`HeaderSource` (shapes and labels, no pixels), and, once its tile of the rows it uses has
arrived, as a :class:`HeldSource` that answers reads as the file would.
"""
import numpy as np

from ..errors import DataError
from .checks import label_values
from .sources import Source, cut


def _labels(values):
    """A split's labels as an array; None (per-pixel labels, or a masks' source) stays None."""
    return None if values is None else np.asarray(values)


def describe_split(src):
    """The header entry of one split: ``(path, shape, dtype str, labels)`` (labels None: the
    split's labels are per pixel, a source of their own; and for that source itself)."""
    return (str(src.path), tuple(int(d) for d in src.shape), np.dtype(src.dtype).str, _labels(src.labels()))


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

    def read(self, rows, tile, positions=None, out=None):
        rows = np.asarray(rows, dtype=np.int64)
        b = self._box
        if tile.intersect(b) != tile:
            raise DataError(f"{self.where()}: tile {tile} is outside the part {b} this rank received")
        at = np.searchsorted(self._rows, rows)
        if len(rows) and (at.max() >= len(self._rows) or not np.array_equal(self._rows[at], rows)):
            raise DataError(f"{self.where()}: rows outside those this rank received")
        out = self._out(len(rows), tile, out)
        part = self._x[cut(tile, b, rows=at)]
        if positions is None:
            out[...] = part
        else:
            out[np.asarray(positions)] = part
        return out


def header_sources(header):
    """``{split: HeaderSource}`` of a header."""
    return {s: HeaderSource(e, s) for s, e in header["splits"].items()}


def header_entry(src):
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


def header_to_json(header):
    """``header`` as JSON values (labels as lists), for a cache file."""
    out = {k: v for k, v in header.items() if k not in ("splits", "from_cache")}
    out["image_shape"] = list(header["image_shape"])
    out["splits"] = {s: [e[0], list(e[1]), e[2], None if e[3] is None else np.asarray(e[3]).tolist()]
                     for s, e in header["splits"].items()}
    return out


def header_from_cache(path):
    """The header stored in the cache file ``path`` beside the data (:func:`header_to_json`), or
    None (no file, no header, unreadable)."""
    from . import cache
    stored = cache.read_header(path) if path else None
    if stored is None:
        return None
    try:
        header = dict(stored)
        header["image_shape"] = tuple(stored["image_shape"])
        header["splits"] = {s: (e[0], tuple(e[1]), e[2], None if e[3] is None else label_values(e[3]))
                            for s, e in stored["splits"].items()}
        return header
    except (KeyError, TypeError, ValueError, IndexError):
        return None

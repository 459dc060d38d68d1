"""Checks of loaded data: every pixel finite, every label a class index. A NaN or infinite pixel
would turn the weights into NaN; a label outside ``0 .. nclasses-1`` would train the wrong class
(or crash mid-epoch). Both are :class:`DataError` naming the file, the split, the image and the
pixel, raised when the data is read or taken from a cache, before any training.

Called from :meth:`distnet.datasets.base.Dataset.load` (built data) and from
:func:`distnet.datasets.cache.load_or_build` (cached data: a cache that fails is rebuilt).

Also the fingerprints that make the ranks of a job agree on their data (:func:`same_data`):
every rank opens the data on its own node, and a node whose copy differs (another conversion,
a half-copied file, other labels) would train on a mixture without a word. A fingerprint is a
list of ``(part, shape, digest)``: ``part`` in words (``"train labels"``), ``shape`` what the
header says (compared first, it makes the clearer message) and a CRC-32 of the values (labels
whole; pixels sampled, or whole where reading them all is cheap).
"""
import zlib

import numpy as np

from ..errors import DataError

#: Images checked per block (bounds the temporary boolean array to one block).
_BLOCK = 256


def check_split(x, y, nclasses, source, split, index=None, origin=(0, 0)):
    """Raise :class:`DataError` unless every value of ``x (N, C, h, w)`` is finite and every
    label of ``y (N,)`` lies in ``0 .. nclasses-1`` (``nclasses`` None: only ``>= 0``).

    ``source``: the file(s) named in the message; ``index``: the image numbers in the source of
    the N rows (default ``0..N-1``); ``origin``: the global ``(row, col)`` of the tile's corner.
    """
    y = np.asarray(y)
    if y.size:
        bad = np.flatnonzero((y < 0) | (y >= nclasses) if nclasses is not None else y < 0)
        if bad.size:
            i = int(bad[0])
            want = f"0 .. {nclasses - 1}" if nclasses is not None else ">= 0"
            raise DataError(f"{source}: {split} label of image {_image(index, i)} is {int(y[i])}, not a "
                            f"class index {want} ({bad.size} such label(s))")
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        return
    for start in range(0, x.shape[0], _BLOCK):
        block = x[start:start + _BLOCK]
        finite = np.isfinite(block)
        if not finite.all():
            b, c, r, col = (int(v) for v in np.argwhere(~finite)[0])
            raise DataError(f"{source}: {split} image {_image(index, start + b)} has a non-finite pixel "
                            f"({block[b, c, r, col]} at channel {c}, row {r + origin[0]}, column "
                            f"{col + origin[1]})")


def check_splits(data, nclasses, source, origin=(0, 0)):
    """:func:`check_split` on each split of ``data`` (``{split: (x, y)}``)."""
    for split, (x, y) in data.items():
        check_split(x, y, nclasses, source, split, origin=origin)


def labels_problem(y, n):
    """None when ``y`` holds ``n`` integer labels ``(n,)``; else what is wrong (``"must be n
    integers, got float64 (n, 10)"``) with the usual cause and its fix: one-hot rows
    (``y.argmax(1)``), an ``(n, 1)`` column (``y.ravel()``), whole numbers stored as floats
    (``y.astype(np.int64)``), class names (their index)."""
    y = np.asarray(y)
    if y.ndim == 1 and y.shape[0] == n and y.dtype.kind in "iu":
        return None
    hint = ""
    numeric = y.dtype.kind in "biuf"
    if numeric and y.ndim == 2 and y.shape[0] == n and y.shape[1] == 1:
        hint = ": a column of labels; store y.ravel()"
    elif numeric and y.ndim == 2 and y.shape[0] == n and y.size and np.isin(y, (0, 1)).all() \
            and (y.sum(axis=1) == 1).all():
        hint = ": one-hot rows; store the class indices, y.argmax(1)"
    elif y.dtype.kind == "f" and y.ndim == 1 and y.size and np.isfinite(y).all() and (y == np.round(y)).all():
        hint = ": whole numbers stored as floats; store y.astype(np.int64)"
    elif y.dtype.kind in "USO":
        hint = (": class names; store each label's index in the sorted names, "
                "names, y = np.unique(y, return_inverse=True)")
    return f"must be {n} integers, got {y.dtype} {y.shape}{hint}"


def _image(index, i):
    return int(index[i]) if index is not None else i


# ---------------------------------------------------------------------------------- fingerprints

#: Images whose pixels a sampled fingerprint hashes per split (evenly spaced, first and last among them).
SAMPLED_IMAGES = 32
#: At most this many ranks are named in a message; the rest are counted.
NAMED_RANKS = 8


def crc(array):
    """CRC-32 of an array's values in C order (its dtype's bytes)."""
    a = np.ascontiguousarray(np.asarray(array))
    return zlib.crc32(memoryview(a).cast("B")) if a.size else 0


def sampled_rows(n, count=SAMPLED_IMAGES):
    """``count`` (at most ``n``) evenly spaced row numbers of ``0 .. n-1``, increasing."""
    return np.unique(np.linspace(0, n - 1, min(n, count)).round().astype(np.int64)) if n else np.zeros(0, np.int64)


def file_digest(path, block=1 << 20):
    """CRC-32 of a whole file, read in blocks (cheap next to reading the data to train on)."""
    value = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(block)
            if not chunk:
                return value
            value = zlib.crc32(chunk, value)


def shape_text(shape, dtype):
    return f"{tuple(int(d) for d in shape)} {np.dtype(dtype)}"


def fingerprint_differences(mine, base):
    """The parts in which fingerprint ``mine`` differs from ``base``, in words."""
    a = {p[0]: p[1:] for p in base}
    b = {p[0]: p[1:] for p in mine}
    out = []
    for part in sorted(set(a) | set(b)):
        x, y = a.get(part), b.get(part)
        if x is None or y is None:
            out.append(f"{part} {'missing' if y is None else 'only there'}")
        elif x[0] != y[0]:
            out.append(f"{part} {y[0]}, not {x[0]}")
        elif x[1] != y[1]:
            out.append(f"other {part}")
    return out


def some_ranks(ranks, limit=NAMED_RANKS):
    """``"1, 2, 3"``, or the first ``limit`` ranks and how many more (a message a thousand ranks
    share stays one short line)."""
    ranks = list(ranks)
    head = ", ".join(map(str, ranks[:limit]))
    return head if len(ranks) <= limit else f"{head} and {len(ranks) - limit} more"


#: The fingerprint of a rank that read no file itself (``read: node``: another rank of its node
#: read them): it is left out of the comparison.
NOT_READ = "not read"


def same_data(fingerprint, comm, source):
    """Collective over ``comm`` (one ``gather`` to rank 0 and one ``bcast`` of its verdict: O(P)
    at rank 0): :class:`DataError` on every rank when the fingerprint of some ranks differs from
    rank 0's, naming those ranks (the first few and a count), how the first of them differs, and
    ``source`` (the files, in words). ``fingerprint``: this rank's (None: not compared, on every
    rank; :data:`NOT_READ`: this rank read no file, the others are compared with the first that did)."""
    if comm.Get_size() == 1 or fingerprint is None:
        return
    every = comm.gather(fingerprint, root=0)
    verdict = None
    if comm.Get_rank() == 0:
        read = [r for r, f in enumerate(every) if not (isinstance(f, str) and f == NOT_READ)]
        first = read[0] if read else 0
        others = [r for r in read if every[r] != every[first]]
        if others:
            what = fingerprint_differences(every[others[0]], every[first])
            verdict = others[0], (f"{source}: rank(s) {some_ranks(others)} read data that differ from rank "
                                  f"{first}'s (rank {others[0]}: {'; '.join(what)}): every rank must read the same "
                                  f"file; copy rank {first}'s to every node")
    verdict = comm.bcast(verdict, root=0)
    if verdict:
        error = DataError(verdict[1])
        error.rank = verdict[0]     # the job's failure is that rank's (its run record names it)
        raise error

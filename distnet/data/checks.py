"""Checks of loaded data: every pixel finite, every label a class index. A NaN or infinite pixel
would turn the weights into NaN; a label outside ``0 .. nclasses-1`` would train the wrong class
(or crash mid-epoch). Both are :class:`DataError` naming the file, the split, the image and the
pixel, raised when the data is read or taken from a cache, before any training.

Called from :meth:`distnet.datasets.base.Dataset.load` (built data, and cached data: a cache
that fails is rebuilt, :func:`distnet.data.cache.cached_data`). The fingerprints that make the
ranks of a job agree on their data are :mod:`.fingerprints`.
"""
import numpy as np

from ..errors import DataError
from ..geometry.partition import axis_noun

#: Images checked per block (bounds the temporary boolean array to one block).
_BLOCK = 256


def check_split(x, y, nclasses, source, split, index=None, origin=(0, 0)):
    """Raise :class:`DataError` unless every value of ``x (N, C, h, w)`` (``(N, C, d, h, w)``) is
    finite and every label of ``y (N,)`` lies in ``0 .. nclasses-1`` (``nclasses`` None: only ``>= 0``).

    ``source``: the file(s) named in the message; ``index``: the image numbers in the source of
    the N rows (default ``0..N-1``); ``origin``: the global ``(row, col)`` (``(slice, row, col)``)
    of the tile's corner.
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
            at = tuple(int(v) for v in np.argwhere(~finite)[0])
            place = ", ".join(f"{axis_noun(len(at) - 2, k)} {v + origin[k]}" for k, v in enumerate(at[2:]))
            raise DataError(f"{source}: {split} image {_image(index, start + at[0])} has a non-finite pixel "
                            f"({block[at]} at channel {at[1]}, {place})")


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


def label_values(y):
    """A split's per-sample labels as held and compared: class ids as int64, float targets
    ``(N, T)`` (regression) as float32, as the converter stores them."""
    y = np.asarray(y)
    return y.astype(np.float32, copy=False) if y.dtype.kind == "f" else y.astype(np.int64, copy=False)


def _image(index, i):
    return int(index[i]) if index is not None else i

"""Checks of loaded data: every pixel finite, every label a class index. A NaN or infinite pixel
would turn the weights into NaN; a label outside ``0 .. nclasses-1`` would train the wrong class
(or crash mid-epoch). Both are :class:`DataError` naming the file, the split, the image and the
pixel, raised when the data is read or taken from a cache, before any training.

Called from :meth:`distnet.datasets.base.Dataset.load` (built data) and from
:func:`distnet.datasets.cache.load_or_build` (cached data: a cache that fails is rebuilt).
"""
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


def _image(index, i):
    return int(index[i]) if index is not None else i

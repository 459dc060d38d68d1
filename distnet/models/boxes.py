"""Boxes: where a piece of a sharded checkpoint sits in its global array (JSON-able: per axis
``[start, stop]`` or ``{"at": [indices]}``), and where two boxes meet. Pure index math."""
import numpy as np


def box_of(index, shape):
    """The JSON box of ``G[index]`` for a global array of ``shape``: ``index`` is ``...`` or a
    tuple of slices (step 1) and increasing index arrays, one per leading axis."""
    index = () if index is Ellipsis else tuple(index)
    box = []
    for axis, n in enumerate(shape):
        sel = index[axis] if axis < len(index) else slice(None)
        if isinstance(sel, slice):
            start, stop, step = sel.indices(n)
            if step != 1:
                raise ValueError(f"a checkpoint box takes slices of step 1, got {sel}")
            box.append([start, stop])
        else:
            box.append({"at": [int(i) for i in np.asarray(sel).reshape(-1)]})
    return box


def _positions(sel):
    return np.arange(sel[0], sel[1]) if isinstance(sel, list) else np.asarray(sel["at"], dtype=np.int64)


def rows_of(box, r0, r1):
    """The box of rows ``r0:r1`` (of the leading axis) of the piece with ``box``."""
    first = box[0]
    first = [first[0] + r0, first[0] + r1] if isinstance(first, list) else {"at": first["at"][r0:r1]}
    return [first] + list(box[1:])


def box_size(box):
    return int(np.prod([s[1] - s[0] if isinstance(s, list) else len(s["at"]) for s in box]))


def overlap(mine, piece):
    """``(dst, src)`` indexes with ``dest[dst] = piece_array[src]`` for the elements of the box
    ``piece`` inside the box ``mine`` (a rank's slice), or None when they do not meet."""
    dst, src, basic = [], [], True
    for a, b in zip(mine, piece):
        if isinstance(a, list) and isinstance(b, list):
            lo, hi = max(a[0], b[0]), min(a[1], b[1])
            if lo >= hi:
                return None
            dst.append(slice(lo - a[0], hi - a[0]))
            src.append(slice(lo - b[0], hi - b[0]))
            continue
        _, i, j = np.intersect1d(_positions(a), _positions(b), assume_unique=True, return_indices=True)
        if not len(i):
            return None
        dst.append(i)
        src.append(j)
        basic = False
    if basic:
        return tuple(dst), tuple(src)
    as_arrays = [np.arange(s.start, s.stop) if isinstance(s, slice) else s for s in dst], \
        [np.arange(s.start, s.stop) if isinstance(s, slice) else s for s in src]
    return np.ix_(*as_arrays[0]), np.ix_(*as_arrays[1])

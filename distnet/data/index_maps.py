"""Index maps of augmentation: where each pixel of an augmented tile comes from, axis by axis.

Every geometric transform of :mod:`.augment` maps one output axis onto one axis of the stored
image, independently of the other axes: a quarter turn in the ``(y, x)`` plane swaps the two
axes (and reverses one), a flip reverses an axis, a crop shifts it (padding past the edge by a
mode), a resized crop stretches a box of it. So an augmented tile is the stored image with its
spatial axes permuted, then indexed axis by axis (:func:`gather`), with linear interpolation
along an axis where a resized crop blends two stored pixels. Each output pixel is computed by the
same operations on the same stored values whatever the tile it falls in, so the tiles of any
grid are, bit for bit, the pieces of the one-process image. Pure index math and numpy; no MPI.
"""
from collections import namedtuple

import numpy as np

#: One output axis of an augmented tile, for a batch of ``n`` images: ``source`` ``(n,)`` (the
#: stored axis each image reads, among the spatial axes), ``index`` ``(n, L)`` (int64 positions
#: along it, in the stored box), ``upper`` and ``weight`` ``(n, L)`` (linear interpolation: the
#: second position and its weight; None: ``index`` alone), ``valid`` ``(n, L)`` (bool, False where
#: the pixel is the fill; None: all valid), ``runs`` ``(n,)`` (the step, +1 or -1, where an image's
#: ``index`` is a run of consecutive positions, read as a slice; else 0).
AxisMap = namedtuple("AxisMap", "source index upper weight valid runs")


def axis_map(source, index, upper=None, weight=None, valid=None):
    """An :class:`AxisMap`, its ``runs`` found (where no interpolation blends)."""
    runs = np.zeros(len(index), np.int64)
    if upper is None:
        if index.shape[1] == 1:
            runs[:] = 1
        else:
            step = index[:, 1] - index[:, 0]
            ok = (np.abs(step) == 1) & (np.diff(index, axis=1) == step[:, None]).all(axis=1)
            runs[ok] = step[ok]
    return AxisMap(source, index, upper, weight, valid, runs)


def pad_index(c, size, mode):
    """Positions ``c`` (int64) along an axis of ``size`` that may lie outside it, as padding of
    ``mode`` reads them: ``(position inside the axis, valid)``. ``constant``: outside is the
    fill (valid False; the position is clipped, to gather from before the fill); ``reflect``:
    mirrored without repeating the edge (numpy's and torchvision's ``reflect``); ``edge``: the
    nearest edge pixel."""
    valid = (c >= 0) & (c < size)
    if mode == "reflect":
        period = 2 * (size - 1)
        c = np.abs(c) % period if period else np.zeros_like(c)
        c = np.where(c >= size, period - c, c)
        valid = None
    elif mode == "edge":
        valid = None
    return np.clip(c, 0, size - 1), valid


def resize_index(c, start, length, size, linear):
    """Positions ``c`` (int64, ``0 .. size-1``) of an axis that a box ``[start, start + length)``
    was stretched to (``size`` long), in the stored axis: ``(index, upper, weight)``.

    ``linear``: the centre of output pixel ``c`` sits at ``u = (c + 0.5) * length / size - 0.5``
    in the box (clipped to ``[0, length - 1]``), between ``floor(u)`` and the next position,
    with weight ``u - floor(u)`` on the next (bilinear with ``align_corners=False``, as
    torchvision's resize). Else nearest: ``floor((c + 0.5) * length / size)``, ``upper`` None."""
    ratio = length / size
    if not linear:
        return start + np.minimum(np.floor((c + 0.5) * ratio).astype(np.int64), length - 1), None, None
    u = np.clip((c + 0.5) * ratio - 0.5, 0.0, length - 1.0)
    low = np.floor(u).astype(np.int64)
    return start + low, start + np.minimum(low + 1, length - 1), u - low


def turned(axis, turns, ndim):
    """``(axis before the turn, reversed)``, int64 and bool arrays like ``turns``: which axis of
    the image before ``turns`` quarter turns (counterclockwise in the ``(y, x)`` plane, the last
    two of ``ndim`` axes, as ``np.rot90(image, turns, axes=(y, x))``) output ``axis`` reads, and
    whether backwards."""
    y, x = ndim - 2, ndim - 1
    turns = np.asarray(turns)
    odd = (turns % 2 == 1) & (axis in (y, x))
    source = np.where(odd, x if axis == y else y, axis)
    backwards = np.isin(turns, (1, 2) if axis == y else (2, 3) if axis == x else ())
    return source.astype(np.int64), backwards


def _take(view, axis, m, j):
    """``view`` indexed along ``axis`` by image ``j``'s part of the map ``m`` (a slice for a
    run, a blend for linear interpolation)."""
    index = m.index[j]
    if m.upper is None:
        step = int(m.runs[j])
        if step:
            first = int(index[0])
            stop = first + step * len(index)
            return view[(slice(None),) * axis + (slice(first, stop if stop >= 0 else None, step),)]
        return np.take(view, index, axis)
    shape = [1] * view.ndim
    shape[axis] = -1
    dtype = view.dtype
    w1 = m.weight[j].astype(dtype).reshape(shape)
    w0 = (1.0 - m.weight[j]).astype(dtype).reshape(shape)
    return np.take(view, index, axis) * w0 + np.take(view, m.upper[j], axis) * w1


def _gather_one(image, maps, j, out):
    """``out`` ``(C, *tile)`` = the stored ``image`` ``(C, *box)`` through image ``j``'s part of
    ``maps``, axis by axis."""
    view = image.transpose((0,) + tuple(1 + int(m.source[j]) for m in maps))
    for a, m in enumerate(maps):
        view = _take(view, 1 + a, m, j)
    out[...] = view


def _run_slices(maps):
    """Per image, ``(axis order or None, slices)`` where every axis of its map is a run (one
    view of the stored image, the common case: crops and flips away from the padding), else None."""
    n, ndim = len(maps[0].source), len(maps)
    simple = np.ones(n, bool)
    for m in maps:
        simple &= (m.runs != 0) if m.upper is None else False
    firsts = [m.index[:, 0].tolist() for m in maps]
    steps = [m.runs.tolist() for m in maps]
    lengths = [m.index.shape[1] for m in maps]
    sources = np.stack([m.source for m in maps], axis=1)
    turned = (sources != np.arange(ndim)).any(axis=1).tolist()
    sources = sources.tolist()
    plans = []
    for j, ok in enumerate(simple.tolist()):
        if not ok:
            plans.append(None)
            continue
        cut = [slice(None)]
        for a in range(ndim):
            first, step = firsts[a][j], steps[a][j]
            stop = first + step * lengths[a]
            cut.append(slice(first, stop if stop >= 0 else None, step))
        plans.append(((0,) + tuple(1 + b for b in sources[j]) if turned[j] else None, tuple(cut)))
    return plans


def gather(stored, maps, out, fill):
    """``out`` ``(n, C, *tile)`` = the stored images ``(n, C, *box)`` through ``maps`` (one
    :class:`AxisMap` per output axis), ``fill`` where a map is not valid."""
    for j, plan in enumerate(_run_slices(maps)):
        if plan is None:
            _gather_one(stored[j], maps, j, out[j])
            continue
        order, cut = plan
        out[j] = (stored[j] if order is None else stored[j].transpose(order))[cut]
    for a, m in enumerate(maps):
        if m.valid is not None and not m.valid.all():
            images, at = np.nonzero(~m.valid)
            out[(images, slice(None)) + (slice(None),) * a + (at,)] = fill


__all__ = ["AxisMap", "axis_map", "gather", "pad_index", "resize_index", "turned"]

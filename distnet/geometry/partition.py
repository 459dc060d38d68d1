"""Block partition of a length over the ranks of one grid axis, and of an N-dimensional array
(a line, an image plane, a volume) over a process grid of as many axes.

The same functions cut the images in the datasets and the activations in the model, so the two
can never disagree about which rank owns which pixel (docs/design.md#datasets-and-shards).
"""
import itertools

from ..errors import GeometryError
from .box import Box

__all__ = ["Box", "array_noun", "axis_noun", "block_of", "block_partition", "coords_of",
           "grid_coords", "grid_rank", "one_of_each", "shape_text", "tile_of"]


def block_partition(length, parts):
    """Split ``range(length)`` into ``parts`` contiguous blocks.

    Returns a list of ``(offset, size)``; the first ``length % parts`` blocks are one longer
    (neon's rule, docs/neon-semantics.md#grid-and-tiles), so sizes differ by at most 1. Raises
    :class:`GeometryError` when a block would be empty.
    """
    if parts < 1:
        raise GeometryError(f"cannot split into {parts} parts")
    if length < parts:
        raise GeometryError(f"cannot split length {length} into {parts} non-empty blocks")
    base, extra = divmod(length, parts)
    blocks, offset = [], 0
    for j in range(parts):
        size = base + (1 if j < extra else 0)
        blocks.append((offset, size))
        offset += size
    return blocks


def block_of(length, parts, index):
    """``(offset, size)`` of block ``index`` of :func:`block_partition` (O(1))."""
    if parts < 1:
        raise GeometryError(f"cannot split into {parts} parts")
    if length < parts:
        raise GeometryError(f"cannot split length {length} into {parts} non-empty blocks")
    if not 0 <= index < parts:
        raise IndexError(f"block {index} of {parts}")
    base, extra = divmod(length, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


def tile_of(shape, grid, coords):
    """The :class:`Box` rank ``coords`` owns of an array of ``shape`` cut by ``grid``, one block
    per axis: ``tile_of((H, W), (Py, Px), (iy, ix))``, ``tile_of((D, H, W), (Pz, Py, Px),
    (iz, iy, ix))``, ``tile_of((L,), (P,), (i,))``."""
    if not len(shape) == len(grid) == len(coords):
        raise GeometryError(f"shape {tuple(shape)}, grid {tuple(grid)} and coordinates "
                            f"{tuple(coords)} must have one entry per axis")
    blocks = (block_of(n, p, i) for n, p, i in zip(shape, grid, coords))
    return Box.of_spans((o, o + k) for o, k in blocks)


def grid_coords(grid):
    """All coordinates of a grid in row-major (= rank) order: ``(iy, ix)`` for ``(Py, Px)``,
    the last axis fastest."""
    return list(itertools.product(*(range(p) for p in grid)))


def grid_rank(grid, coords):
    """The row-major rank of ``coords`` in ``grid`` (the inverse of ``grid_coords(grid)[rank]``;
    MPI's Cartesian numbering): ``iy * Px + ix`` in 2-D."""
    rank = 0
    for p, i in zip(grid, coords):
        rank = rank * p + i
    return rank


def coords_of(grid, rank):
    """The coordinates of row-major ``rank`` in ``grid`` (``divmod(rank, Px)`` in 2-D)."""
    coords = []
    for p in reversed(tuple(grid)):
        rank, i = divmod(rank, p)
        coords.append(i)
    return tuple(reversed(coords))


# -- words for messages --------------------------------------------------------------------------

#: What one position along each of the last three axes is called (``x``: a column).
_NOUNS = ("slice", "row", "column")
#: What an array of 1, 2, 3 axes is called.
_ARRAYS = {1: "line", 2: "plane", 3: "volume"}


def shape_text(shape):
    """``"13x11"``, ``"2x2x2"``: a shape or a grid as messages write it."""
    return "x".join(str(n) for n in shape)


def array_noun(ndim):
    """``"plane"`` for 2 axes, ``"volume"`` for 3, ``"line"`` for 1, else ``"array"``."""
    return _ARRAYS.get(ndim, "array")


def axis_noun(ndim, axis, count=1):
    """The word for ``count`` positions along ``axis`` of an ``ndim``-D array: ``row`` / ``rows``
    (y), ``column`` (x), ``slice`` (z); ``position along axis k`` beyond three axes."""
    if ndim > len(_NOUNS):
        return f"position{'s' * (count != 1)} along axis {axis}"
    return _NOUNS[len(_NOUNS) - ndim + axis] + "s" * (count != 1)


def one_of_each(ndim):
    """``"one row and one column"`` (2-D), ``"one slice, one row and one column"`` (3-D): what
    every rank must own of every array."""
    words = [f"one {axis_noun(ndim, a)}" for a in range(ndim)]
    return words[0] if ndim == 1 else ", ".join(words[:-1]) + " and " + words[-1]

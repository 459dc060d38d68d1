"""Largest tiles, chunks and halo widths over a whole process grid, in ``O(Py + Px)``.

A 2-D tile (and its chunk) is the product of one block per axis, so every "largest over the
ranks" figure of a plane cut by ``Py x Px`` is the product, or the pair, of per-axis maxima:
no loop over the ``Py * Px`` ranks and no halo plan per rank (``distnet show -n 1000000`` answers
at once). Pure index math, same rules as :func:`~distnet.geometry.partition.block_partition` and
:func:`~distnet.geometry.halo.plan_halo` (the tests compare them).
"""
from .partition import Box


def block(length, parts, index):
    """``(offset, size)`` of block ``index`` of ``block_partition(length, parts)``, in O(1)."""
    base, extra = divmod(length, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


def largest_tile(plane, grid):
    """The largest tile :func:`~distnet.geometry.partition.tile_of` gives over all ranks, as a
    :class:`Box` at the origin: ``ceil(H / Py) x ceil(W / Px)``."""
    (H, W), (Py, Px) = plane, grid
    return Box(0, -(-H // Py), 0, -(-W // Px))


def _axis(in_len, window, parts):
    """Per axis: (largest chunk length, largest ghost width before, largest after) over the
    ``parts`` blocks of a layer's input ``in_len`` read through ``window``."""
    out_len = window.output_length(in_len)
    longest = before = after = 0
    for i in range(parts):
        o0, on = block(in_len, parts, i)
        t0, tn = block(out_len, parts, i)
        c0, c1 = window.input_span(t0, tn)
        longest = max(longest, c1 - c0)
        before = max(before, o0 - max(c0, 0))
        after = max(after, min(c1, in_len) - (o0 + on))
    return longest, before, after


def halo_extents(in_plane, window_y, window_x, grid):
    """``(halo, chunk)`` of a window layer on ``grid``: ``halo`` = the widest ghost rows/columns
    any rank receives on each side ``(top, bottom, left, right)`` (zero padding not counted), and
    ``chunk`` = the largest input chunk (tile + halo + padding) as a :class:`Box` at the origin."""
    hy, top, bottom = _axis(in_plane[0], window_y, grid[0])
    hx, left, right = _axis(in_plane[1], window_x, grid[1])
    return (max(top, 0), max(bottom, 0), max(left, 0), max(right, 0)), Box(0, hy, 0, hx)

"""Largest tiles, chunks and halo widths over a whole process grid, in ``O(sum of its sides)``.

A tile (and its chunk) is the product of one block per axis, so every "largest over the ranks"
figure of an array cut by ``Py x Px`` (or ``Pz x Py x Px``) is the product, or the tuple, of
per-axis maxima: no loop over the ranks and no halo plan per rank (``distnet show -n 1000000``
answers at once). Pure index math, same rules as
:func:`~distnet.geometry.partition.block_partition` and :func:`~distnet.geometry.halo.plan_halo`
(the tests compare them).
"""
from .box import Box


def block(length, parts, index):
    """``(offset, size)`` of block ``index`` of ``block_partition(length, parts)``, in O(1)."""
    base, extra = divmod(length, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


def largest_tile(plane, grid):
    """The largest tile :func:`~distnet.geometry.partition.tile_of` gives over all ranks, as a
    :class:`Box` at the origin: ``ceil(H / Py) x ceil(W / Px)`` (one ceiling per axis)."""
    return Box.of_spans((0, -(-n // p)) for n, p in zip(plane, grid))


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


def halo_extents(in_plane, *rules_grid):
    """``halo_extents(in_plane, *rules, grid)``: ``(halo, chunk)`` of a layer with one window rule
    per axis on ``grid``: ``halo`` = the widest ghost band any rank receives on each side, axis by
    axis (``(top, bottom, left, right)`` in 2-D; zero padding not counted), and ``chunk`` = the
    largest input chunk (tile + halo + padding) as a :class:`Box` at the origin."""
    *rules, grid = rules_grid
    axes = [_axis(n, rule, p) for n, rule, p in zip(in_plane, rules, grid)]
    halo = tuple(max(w, 0) for _, before, after in axes for w in (before, after))
    return halo, Box.of_spans((0, longest) for longest, _, _ in axes)

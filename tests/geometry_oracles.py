"""Brute-force oracles of distnet.geometry for the tests: what each output position reads, from
the definition of each layer (not from the rules' formulas), and a checker of a whole grid's halo
plans against them, for any number of axes."""
import itertools

import numpy as np

from distnet.geometry import Box, grid_coords, output_plane, plan_halo, tile_of


# -- what output o reads, per axis, from each layer's definition --------------------------------

def conv_reads(size, stride=1, pad_lo=0, dilation=1):
    """Window (conv, pooling): output o reads ``o*stride - pad_lo + u*dilation``, u < size."""
    return lambda o, L: {o * stride - pad_lo + u * dilation for u in range(size)}


def transposed_reads(size, stride=1, pad_lo=0, pad_hi=0, output_padding=0):
    """Transposed convolution: input i and tap u add into output ``i*stride + u - pad_lo``; the
    i of every tap, inputs outside ``[0, L)`` included (zeros: padding, as for a conv)."""
    def reads(o, L):
        return {i for i in range(-size - 1, L + size + 1) for u in range(size)
                if i * stride + u - pad_lo == o}
    return reads


def transposed_length(L, size, stride=1, pad_lo=0, pad_hi=0, output_padding=0):
    """PyTorch's ConvTranspose output length (with padding pad_lo + pad_hi)."""
    return (L - 1) * stride - pad_lo - pad_hi + size + output_padding


def nearest_reads(factor):
    """PyTorch's nearest: ``floor(o * scale)``, ``scale = 1 / factor`` in floating point."""
    return lambda o, L: {int(np.floor(o * (1.0 / factor)))}


def linear_reads(factor):
    """PyTorch's linear, ``align_corners=False``: source ``(o + 0.5) * scale - 0.5`` clamped
    at 0, between ``i0 = int(src)`` and ``i0 + 1`` (``i0`` itself at the last input)."""
    def reads(o, L):
        src = max((o + 0.5) / factor - 0.5, 0.0)
        i0 = int(src)
        return {i0, i0 + (1 if i0 < L - 1 else 0)}
    return reads


def crop_reads(lo):
    return lambda o, L: {o + lo}


# -- spans and plans ------------------------------------------------------------------------------

def hull(positions):
    """``(min, max + 1)`` of a non-empty set of ints."""
    return min(positions), max(positions) + 1


def check_span(rule, reads, L):
    """Every output range's input_span is the hull of what its outputs read (empty: start ==
    stop, the stop no earlier than the start)."""
    n = rule.output_length(L)
    each = [reads(o, L) for o in range(n)]
    for start in range(n):
        union = set()
        for count in range(1, n - start + 1):
            union |= each[start + count - 1]
            a, b = rule.input_span(start, count)
            if union:
                assert (a, b) == hull(union), (rule, L, start, count)
            else:
                assert a == b, (rule, L, start, count, a, b)


def check_plans(in_shape, rules, reads, grid):
    """The halo plans of every rank of ``grid`` for a layer with per-axis ``rules`` against the
    brute-force ``reads`` (one function per axis): the chunk is the hull of what the output tile
    reads; every chunk position is exactly one of interior, one received box, padding; receives
    come from exactly the ranks whose tile meets the chunk; a's send to b is b's receive from a.
    Returns the plans by coordinates."""
    out_shape = output_plane(in_shape, *rules)
    image = Box.of_spans((0, n) for n in in_shape)
    plans = {c: plan_halo(in_shape, *rules, grid, c) for c in grid_coords(grid)}
    for coords, plan in plans.items():
        assert plan.own == tile_of(in_shape, grid, coords)
        assert plan.out_tile == tile_of(out_shape, grid, coords)
        per_axis = [set().union(*(r(o, n) for o in range(a, b)))
                    for r, n, (a, b) in zip(reads, in_shape, plan.out_tile.spans)]
        if all(per_axis):
            assert plan.chunk == Box.of_spans(hull(s) for s in per_axis), coords
        else:          # an output tile that reads nothing along some axis
            assert plan.chunk.is_empty()
        cover = np.zeros([max(n, 0) for n in plan.chunk.shape], int)
        if not plan.interior.is_empty():
            cover[plan.interior.relative_to(plan.chunk)] += 1
        peers = [t.peer for t in plan.recvs]
        assert peers == sorted(peers) and coords not in peers
        for t in plan.recvs:
            assert not t.box.is_empty() and t.box == tile_of(in_shape, grid, t.peer).intersect(plan.chunk)
            cover[t.box.relative_to(plan.chunk)] += 1
        inside = np.zeros(cover.shape, bool)
        clipped = plan.chunk.intersect(image)
        if not clipped.is_empty():
            inside[clipped.relative_to(plan.chunk)] = True
        cover[~inside] += 1
        assert (cover == 1).all(), f"rank {coords}: chunk covered {np.unique(cover)} times"
        for other in grid_coords(grid):
            meets = not tile_of(in_shape, grid, other).intersect(plan.chunk).is_empty()
            assert (other in peers) == (meets and other != coords)
    for a, pa in plans.items():
        sends = {t.peer: t.box for t in pa.sends}
        assert list(sends) == sorted(sends)
        for b, pb in plans.items():
            assert sends.get(b) == {t.peer: t.box for t in pb.recvs}.get(a)
    return plans


def separable_reads(reads, position, shape):
    """All positions (tuples) an output ``position`` reads under per-axis ``reads``."""
    return set(itertools.product(*(r(o, n) for r, o, n in zip(reads, position, shape))))

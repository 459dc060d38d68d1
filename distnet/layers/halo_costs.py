"""What a window layer's halo exchange costs on every rank of its grid at once: the figures
:class:`~distnet.layers.placement.HaloExchange` states for its own rank (elements sent and
received per sample, messages), for all ``Py x Px`` (``Pz x Py x Px``) ranks as arrays, and the part of them that
crosses to another node. Pure index math on the layer's window rules (no MPI, no arrays of
data); the cost model (:mod:`distnet.plan`) sums these over layers.

A box intersection is separable, so everything is computed per axis: ``ov[a, b] = |own(a) ∩
chunk(b)|``, the input rows rank ``a`` owns that rank ``b``'s chunk reads, a ``(P, P)`` matrix
per axis (``O(Py^2 + Px^2)``; a million ranks in a second), never per rank; the figures of a
rank are products of its axes' (outer products over the grid).
"""
import functools
import itertools

import numpy as np

from ..geometry import block_partition


class _Axis:
    """One axis of a window layer on ``P`` grid ranks: owned input blocks, output blocks and
    chunk spans, and the overlap matrix ``ov[a, b] = |own(a) ∩ chunk(b)|``."""

    def __init__(self, length, window, parts):
        out_len = window.output_length(length)
        self.own = [(o, o + n) for o, n in block_partition(length, parts)]
        self.out = [(o, o + n) for o, n in block_partition(out_len, parts)]
        self.chunk = [window.input_span(o0, o1 - o0) for o0, o1 in self.out]
        own0 = np.array([a for a, _ in self.own])[:, None]
        own1 = np.array([b for _, b in self.own])[:, None]
        ch0 = np.array([a for a, _ in self.chunk])[None, :]
        ch1 = np.array([b for _, b in self.chunk])[None, :]
        self.ov = np.maximum(np.minimum(own1, ch1) - np.maximum(own0, ch0), 0)   # (P, P)

    def sizes(self, spans):
        return np.array([b - a for a, b in spans])

    def band(self, o):
        """``(ov[i, i + o], ov[i + o, i])`` for every ``i`` (0 off the ends)."""
        n = self.ov.shape[0]
        i = np.arange(n)
        ok = (i + o >= 0) & (i + o < n)
        j = np.clip(i + o, 0, n - 1)
        return np.where(ok, self.ov[i, j], 0), np.where(ok, self.ov[j, i], 0)

    def offsets(self):
        """The peer offsets with any overlap (a window layer's are banded: a handful)."""
        n = self.ov.shape[0]
        return [o for o in range(-n + 1, n) if any(b.any() for b in self.band(o))]


class GridHalo:
    """One exchange of a window layer on every rank of ``grid``: ``(Py, Px)`` arrays (``(Pz, Py,
    Px)`` for volumes) of the elements per sample each rank sends (``own ∩ chunk(peer)`` for
    every peer) and receives (its ghost parts, which the adjoint sends back), the messages it
    sends (one per peer), its output tile and input chunk in pixels per channel; ``far_peers``:
    some rank exchanges with a rank beyond its neighbours. ``channels``: the maps exchanged."""

    def __init__(self, in_plane, windows, grid, channels):
        self.grid, self.channels = tuple(grid), channels
        self.axes = [_Axis(n, w, p) for n, w, p in zip(in_plane, windows, grid)]
        ovs = [a.ov for a in self.axes]
        diag = _outer(np.diag(ov) for ov in ovs)
        # sent by rank i = sum over peers j != i of prod_d ov_d[i_d, j_d]: all peers minus me
        self.sent = channels * (_outer(ov.sum(axis=1) for ov in ovs) - diag)
        self.received = channels * (_outer(ov.sum(axis=0) for ov in ovs) - diag)
        self.messages = (_outer((ov > 0).sum(axis=1) for ov in ovs)
                         - _outer(np.diag(ov) > 0 for ov in ovs))
        self.out_pixels = _outer(a.sizes(a.out) for a in self.axes)
        self.chunk_pixels = _outer(a.sizes(a.chunk) for a in self.axes)
        self.far_peers = any(bool(np.triu(ov, 2).any() or np.tril(ov, -2).any()) for ov in ovs)

    def largest(self):
        """``(the largest output tile, the largest input chunk)``, each a size per axis
        (``((h, w), (hc, wc))`` for images)."""
        return (tuple(int(a.sizes(a.out).max()) for a in self.axes),
                tuple(int(a.sizes(a.chunk).max()) for a in self.axes))

    def to_other_nodes(self, node_of):
        """``(sent, received, messages)`` as arrays of the grid's shape: the part of each rank's
        exchange with ranks of another node (``node_of(world rank)``; the grid's ranks are world
        ranks in row-major order, ``iy * Px + ix``). Peers are visited by offset: ``O(offsets *
        P)``, not ``O(P^2)``."""
        fwd, bwd, msgs = (np.zeros(self.grid) for _ in range(3))
        rank = np.arange(int(np.prod(self.grid))).reshape(self.grid)
        pitch = [int(np.prod(self.grid[d + 1:])) for d in range(len(self.grid))]
        for offset in itertools.product(*(a.offsets() for a in self.axes)):
            if not any(offset):
                continue
            bands = [a.band(o) for a, o in zip(self.axes, offset)]
            other = node_of(rank + sum(o * p for o, p in zip(offset, pitch))) != node_of(rank)
            sent, back = _outer(b[0] for b in bands), _outer(b[1] for b in bands)
            fwd += np.where(other, sent, 0)
            bwd += np.where(other, back, 0)
            msgs += np.where(other, sent > 0, 0)
        return self.channels * fwd, self.channels * bwd, msgs


def _outer(vectors):
    """The outer product of per-axis vectors: an array of the grid's shape (``np.outer`` of
    two)."""
    return functools.reduce(np.multiply.outer, vectors)

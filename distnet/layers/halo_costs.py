"""What a window layer's halo exchange costs on every rank of its grid at once: the figures
:class:`~distnet.layers.placement.HaloExchange` states for its own rank (elements sent and
received per sample, messages), for all ``Py x Px`` ranks as arrays, and the part of them that
crosses to another node. Pure index math on the layer's window rules (no MPI, no arrays of
data); the cost model (:mod:`distnet.plan`) sums these over layers.

A box intersection is separable, so everything is computed per axis: ``ov[a, b] = |own(a) ∩
chunk(b)|``, the input rows rank ``a`` owns that rank ``b``'s chunk reads, a ``(P, P)`` matrix
per axis (``O(Py^2 + Px^2)``; a million ranks in a second), never per rank.
"""
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
    """One exchange of a window layer on every rank of ``grid``: ``(Py, Px)`` arrays of the
    elements per sample each rank sends (``own ∩ chunk(peer)`` for every peer) and receives
    (its ghost parts, which the adjoint sends back), the messages it sends (one per peer), its
    output tile and input chunk in pixels per channel; ``far_peers``: some rank exchanges with a
    rank beyond its neighbours. ``channels``: the maps exchanged."""

    def __init__(self, in_plane, windows, grid, channels):
        self.grid, self.channels = tuple(grid), channels
        self.y, self.x = (_Axis(n, w, p) for n, w, p in zip(in_plane, windows, grid))
        y, x = self.y.ov, self.x.ov
        dy, dx = np.diag(y), np.diag(x)
        # sent by (iy, ix) = sum over peers (iy', ix') != me of ov_y[iy, iy'] * ov_x[ix, ix']
        self.sent = channels * (np.outer(y.sum(axis=1), x.sum(axis=1)) - np.outer(dy, dx))
        self.received = channels * (np.outer(y.sum(axis=0), x.sum(axis=0)) - np.outer(dy, dx))
        self.messages = np.outer((y > 0).sum(axis=1), (x > 0).sum(axis=1)) - np.outer(dy > 0, dx > 0)
        self.out_pixels = np.outer(self.y.sizes(self.y.out), self.x.sizes(self.x.out))
        self.chunk_pixels = np.outer(self.y.sizes(self.y.chunk), self.x.sizes(self.x.chunk))
        self.far_peers = any(bool(np.triu(a.ov, 2).any() or np.tril(a.ov, -2).any()) for a in (self.y, self.x))

    def largest(self):
        """``((h, w) of the largest output tile, (hc, wc) of the largest input chunk)``."""
        return ((int(self.y.sizes(self.y.out).max()), int(self.x.sizes(self.x.out).max())),
                (int(self.y.sizes(self.y.chunk).max()), int(self.x.sizes(self.x.chunk).max())))

    def to_other_nodes(self, node_of):
        """``(sent, received, messages)`` as ``(Py, Px)`` arrays: the part of each rank's exchange
        with ranks of another node (``node_of(world rank)``; the grid's ranks are world ranks
        ``iy * Px + ix``). Peers are visited by offset: ``O(offsets * P)``, not ``O(P^2)``."""
        Py, Px = self.grid
        fwd, bwd, msgs = (np.zeros(self.grid) for _ in range(3))
        rank = np.arange(Py * Px).reshape(self.grid)
        for oy in self.y.offsets():
            sy, ry = self.y.band(oy)
            for ox in self.x.offsets():
                if oy == 0 and ox == 0:
                    continue
                sx, rx = self.x.band(ox)
                other = node_of(rank + oy * Px + ox) != node_of(rank)
                sent, back = np.outer(sy, sx), np.outer(ry, rx)
                fwd += np.where(other, sent, 0)
                bwd += np.where(other, back, 0)
                msgs += np.where(other, sent > 0, 0)
        return self.channels * fwd, self.channels * bwd, msgs

"""Halo planning: for one rank and one window layer, the chunk of input it needs and which parts
come from which rank. Pure index math (no MPI, no arrays); :mod:`distnet.comm.global_array` carries
the plan out.

Ownership rule: every layer's input *and* output plane is cut by :func:`tile_of` on the same grid.
A rank computes exactly its output tile; the input box that tile reads (its *chunk*, PETSc's
"ghosted local" box) is made of the rank's own input tile, *ghost* parts owned by other ranks
(any rank, not only the 8 neighbours, when a halo is wider than a tile), and zero padding outside
the image.
"""
from dataclasses import dataclass

from ..errors import GeometryError
from .partition import Box, block_partition, tile_of


@dataclass(frozen=True)
class Transfer:
    """A box of the input plane that moves between this rank and ``peer`` (grid coordinates)."""

    peer: tuple
    box: Box


@dataclass(frozen=True)
class HaloPlan:
    """Everything one rank needs to build its chunk of one layer's input.

    Attributes
    ----------
    in_plane, out_plane : (H, W) global input and output plane sizes.
    grid, coords : process grid ``(Py, Px)`` and this rank's ``(iy, ix)``.
    own : Box, this rank's tile of the input plane (what it holds before the exchange).
    out_tile : Box, this rank's tile of the output plane (what it computes).
    chunk : Box, the input box ``out_tile`` reads; may extend past the image (zero padding).
    recvs : Transfers ``own(peer) ∩ chunk`` (ghost parts this rank receives), peers in rank order.
    sends : Transfers ``own ∩ chunk(peer)`` (parts of my tile other ranks need), in rank order.
    """

    in_plane: tuple
    out_plane: tuple
    grid: tuple
    coords: tuple
    own: Box
    out_tile: Box
    chunk: Box
    recvs: tuple
    sends: tuple

    @property
    def interior(self):
        """``own ∩ chunk``: the part of my own tile the chunk uses (copied, never sent)."""
        return self.own.intersect(self.chunk)

    def ghost_count(self):
        """Number of ghost pixels per (sample, channel) received in a forward exchange."""
        return sum(t.box.size for t in self.recvs)


def chunk_box(out_tile, window_y, window_x):
    """The input box read by ``out_tile`` under the two axes' :class:`Window` rules."""
    y0, y1 = window_y.input_span(out_tile.y0, out_tile.y1 - out_tile.y0)
    x0, x1 = window_x.input_span(out_tile.x0, out_tile.x1 - out_tile.x0)
    return Box(y0, y1, x0, x1)


def output_plane(in_plane, window_y, window_x):
    """Global output ``(Ho, Wo)`` of a window layer on an ``in_plane = (H, W)`` input."""
    return (window_y.output_length(in_plane[0]), window_x.output_length(in_plane[1]))


def plan_halo(in_plane, window_y, window_x, grid, coords):
    """The :class:`HaloPlan` of rank ``coords`` for a layer with the given window rules.

    Raises :class:`GeometryError` if the grid cuts the input or output plane into empty tiles.
    """
    out_plane = output_plane(in_plane, window_y, window_x)
    for what, plane in (("input", in_plane), ("output", out_plane)):
        if plane[0] < grid[0] or plane[1] < grid[1]:
            raise GeometryError(
                f"a {grid[0]}x{grid[1]} grid cannot cut the {plane[0]}x{plane[1]} {what} plane: "
                f"every rank must own at least one row and one column")

    own = tile_of(in_plane, grid, coords)
    out_tile = tile_of(out_plane, grid, coords)
    chunk = chunk_box(out_tile, window_y, window_x)
    # Box intersections are separable: find, per axis, the peers whose input block meets my
    # chunk (recvs) and whose chunk meets my input block (sends): O(Py + Px + peers), not O(P).
    recv_y = _overlaps(in_plane[0], grid[0], None, (chunk.y0, chunk.y1))
    recv_x = _overlaps(in_plane[1], grid[1], None, (chunk.x0, chunk.x1))
    send_y = _overlaps(out_plane[0], grid[0], window_y, (own.y0, own.y1))
    send_x = _overlaps(out_plane[1], grid[1], window_x, (own.x0, own.x1))
    recvs = [Transfer((iy, ix), Box(a0, a1, b0, b1)) for iy, (a0, a1) in recv_y
             for ix, (b0, b1) in recv_x if (iy, ix) != tuple(coords)]
    sends = [Transfer((iy, ix), Box(a0, a1, b0, b1)) for iy, (a0, a1) in send_y
             for ix, (b0, b1) in send_x if (iy, ix) != tuple(coords)]
    return HaloPlan(tuple(in_plane), out_plane, tuple(grid), tuple(coords), own, out_tile, chunk,
                    tuple(recvs), tuple(sends))


def _overlaps(length, parts, window, span):
    """Along one axis: ``[(peer index, (start, stop))]`` of the non-empty intersections of
    ``span`` with every peer's input block (``window`` None; ``length`` is the input length) or
    with every peer's chunk (``window``: the chunk its output block of ``length`` reads), in
    peer order."""
    lo, hi = span
    out = []
    for j, (o, n) in enumerate(block_partition(length, parts)):
        a, b = (o, o + n) if window is None else window.input_span(o, n)
        a, b = max(a, lo), min(b, hi)
        if a < b:
            out.append((j, (a, b)))
    return out

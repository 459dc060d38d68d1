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
from .partition import Box, grid_coords, tile_of


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

    def chunk_of(c):
        return chunk_box(tile_of(out_plane, grid, c), window_y, window_x)

    own = tile_of(in_plane, grid, coords)
    out_tile = tile_of(out_plane, grid, coords)
    chunk = chunk_of(coords)
    recvs, sends = [], []
    for peer in grid_coords(grid):
        if peer == coords:
            continue
        r = tile_of(in_plane, grid, peer).intersect(chunk)
        if not r.is_empty():
            recvs.append(Transfer(peer, r))
        s = own.intersect(chunk_of(peer))
        if not s.is_empty():
            sends.append(Transfer(peer, s))
    return HaloPlan(tuple(in_plane), out_plane, tuple(grid), tuple(coords), own, out_tile, chunk,
                    tuple(recvs), tuple(sends))

"""Halo planning: for one rank and one layer with a window rule per axis, the chunk of input it
needs and which parts come from which rank. Pure index math (no MPI, no arrays), the same for any
number of axes (a line, an image plane, a volume); :mod:`distnet.comm.global_array` carries the
plan out.

Ownership rule: every layer's input *and* output array is cut by :func:`tile_of` on the same grid.
A rank computes exactly its output tile; the input box that tile reads (its *chunk*, PETSc's
"ghosted local" box) is made of the rank's own input tile, *ghost* parts owned by other ranks
(any rank, not only the neighbours, when a halo is wider than a tile), and zero padding outside
the image. When the output is cut at other places than the input (pooling, upsampling, a crop,
uneven tiles of a longer or shorter output), the same rule moves each part to the rank whose
output tile reads it: the plan is a redistribution as much as a halo.

Messages: one :class:`Transfer` per peer and direction, its box the intersection of the peer's
tile and my chunk (a box, since both are). In 3-D that makes up to 26 neighbours (6 faces,
12 edges, 8 corners), more when a halo is wider than a tile: the direct scheme, chosen over
exchanging axis by axis in 3 dependent rounds (docs/parallelism.md#halos-in-n-dimensions).
"""
import itertools
from dataclasses import dataclass

from ..errors import GeometryError
from .box import Box
from .partition import array_noun, block_partition, one_of_each, shape_text, tile_of


@dataclass(frozen=True)
class Transfer:
    """A box of the input array that moves between this rank and ``peer`` (grid coordinates)."""

    peer: tuple
    box: Box


@dataclass(frozen=True)
class HaloPlan:
    """Everything one rank needs to build its chunk of one layer's input.

    Attributes
    ----------
    in_plane, out_plane : global input and output shapes, one length per axis (``(H, W)``,
        ``(D, H, W)``, ...).
    grid, coords : process grid (``(Py, Px)``, ``(Pz, Py, Px)``, ...) and this rank's coordinates.
    own : Box, this rank's tile of the input plane (what it holds before the exchange).
    out_tile : Box, this rank's tile of the output plane (what it computes).
    chunk : Box, the input box ``out_tile`` reads; may extend past the image (zero padding).
    recvs : Transfers ``own(peer) ∩ chunk`` (ghost parts this rank receives), peers in rank order
        (row-major coordinates).
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
    def ndim(self):
        """Number of spatial axes."""
        return len(self.grid)

    @property
    def interior(self):
        """``own ∩ chunk``: the part of my own tile the chunk uses (copied, never sent)."""
        return self.own.intersect(self.chunk)

    def ghost_count(self):
        """Number of ghost positions per (sample, channel) received in a forward exchange."""
        return sum(t.box.size for t in self.recvs)


def chunk_box(out_tile, *rules):
    """The input box read by ``out_tile`` under the rules of its axes (one rule per axis, e.g.
    ``chunk_box(tile, window_y, window_x)``)."""
    return Box.of_spans(rule.input_span(a, b - a) for rule, (a, b) in zip(rules, out_tile.spans))


def output_plane(in_plane, *rules):
    """Global output shape of a layer with one rule per axis on an ``in_plane`` input:
    ``(Ho, Wo)`` of ``output_plane((H, W), window_y, window_x)``."""
    return tuple(rule.output_length(n) for rule, n in zip(rules, in_plane))


def plan_halo(in_plane, *rules_grid_coords):
    """``plan_halo(in_plane, *rules, grid, coords)``: the :class:`HaloPlan` of rank ``coords``
    for a layer with one window rule per axis, e.g. ``plan_halo((H, W), window_y, window_x,
    (Py, Px), (iy, ix))`` or ``plan_halo((D, H, W), wz, wy, wx, (Pz, Py, Px), (iz, iy, ix))``.

    Raises :class:`GeometryError` if the grid cuts the input or output array into empty tiles.
    """
    *rules, grid, coords = rules_grid_coords
    grid, coords = tuple(grid), tuple(coords)
    if not len(in_plane) == len(rules) == len(grid) == len(coords):
        raise GeometryError(f"a halo plan needs one rule, grid axis and coordinate per axis of the "
                            f"{shape_text(in_plane)} input; got {len(rules)} rule(s), grid "
                            f"{shape_text(grid)}, coordinates {coords}")
    out_plane = output_plane(in_plane, *rules)
    for what, plane in (("input", in_plane), ("output", out_plane)):
        if any(n < p for n, p in zip(plane, grid)):
            raise GeometryError(
                f"a {shape_text(grid)} grid cannot cut the {shape_text(plane)} {what} "
                f"{array_noun(len(grid))}: every rank must own at least {one_of_each(len(grid))}")

    own = tile_of(in_plane, grid, coords)
    out_tile = tile_of(out_plane, grid, coords)
    chunk = chunk_box(out_tile, *rules)
    # Box intersections are separable: find, per axis, the peers whose input block meets my
    # chunk (recvs) and whose chunk meets my input block (sends): O(sum of the grid's sides +
    # peers), not O(ranks). The product over the axes lists peers in row-major (rank) order.
    recv = [_overlaps(n, p, None, span) for n, p, span in zip(in_plane, grid, chunk.spans)]
    send = [_overlaps(n, p, rule, span) for n, p, rule, span in zip(out_plane, grid, rules, own.spans)]
    return HaloPlan(tuple(in_plane), out_plane, grid, coords, own, out_tile, chunk,
                    _transfers(recv, coords), _transfers(send, coords))


def _transfers(per_axis, coords):
    """The :class:`Transfer` of every peer (not ``coords``) in the product of the per-axis
    overlap lists, in row-major order."""
    out = []
    for parts in itertools.product(*per_axis):
        peer = tuple(j for j, _ in parts)
        if peer != coords:
            out.append(Transfer(peer, Box.of_spans(span for _, span in parts)))
    return tuple(out)


def _overlaps(length, parts, window, span):
    """Along one axis: ``[(peer index, (start, stop))]`` of the non-empty intersections of
    ``span`` with every peer's input block (``window`` None; ``length`` is the input length) or
    with every peer's chunk (``window``: the rule of the axis; the chunk its output block of
    ``length`` reads), in peer order."""
    lo, hi = span
    out = []
    for j, (o, n) in enumerate(block_partition(length, parts)):
        a, b = (o, o + n) if window is None else window.input_span(o, n)
        a, b = max(a, lo), min(b, hi)
        if a < b:
            out.append((j, (a, b)))
    return out

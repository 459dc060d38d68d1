"""Block partition of a length over the ranks of one grid axis, and of a plane over a 2-D grid.

The same functions cut the images in the datasets and the activations in the model, so the two
can never disagree about which rank owns which pixel (docs/design.md#datasets-and-shards).
"""
from dataclasses import dataclass

from ..errors import GeometryError


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


@dataclass(frozen=True)
class Box:
    """A half-open box ``[y0, y1) x [x0, x1)`` of a 2-D plane, in global coordinates.

    Coordinates may lie outside the plane (negative, or past its end): that is the zero padding
    a chunk carries at the global border.
    """

    y0: int
    y1: int
    x0: int
    x1: int

    @property
    def shape(self):
        return (self.y1 - self.y0, self.x1 - self.x0)

    @property
    def size(self):
        h, w = self.shape
        return max(h, 0) * max(w, 0)

    def is_empty(self):
        return self.y1 <= self.y0 or self.x1 <= self.x0

    def intersect(self, other):
        return Box(max(self.y0, other.y0), min(self.y1, other.y1),
                   max(self.x0, other.x0), min(self.x1, other.x1))

    def relative_to(self, origin):
        """Slices ``(sy, sx)`` of this box inside an array whose [0, 0] is ``origin``'s corner."""
        return (slice(self.y0 - origin.y0, self.y1 - origin.y0),
                slice(self.x0 - origin.x0, self.x1 - origin.x0))


def tile_of(plane, grid, coords):
    """The :class:`Box` rank ``coords = (iy, ix)`` owns of a ``plane = (H, W)`` cut by ``grid = (Py, Px)``."""
    (H, W), (Py, Px), (iy, ix) = plane, grid, coords
    oy, ny = block_of(H, Py, iy)
    ox, nx = block_of(W, Px, ix)
    return Box(oy, oy + ny, ox, ox + nx)


def grid_coords(grid):
    """All ``(iy, ix)`` of a grid in row-major (= rank) order."""
    Py, Px = grid
    return [(iy, ix) for iy in range(Py) for ix in range(Px)]

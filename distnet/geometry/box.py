"""A half-open box of an N-dimensional array in global coordinates: a tile, a chunk, a ghost
part. Pure index math (no arrays).

Axes are numbered in array order (``(..., z, y, x)``: the last axis is the contiguous one), and
the bounds are given axis by axis, ``Box(z0, z1, y0, y1, x0, x1)``. A 2-D box is
``Box(y0, y1, x0, x1)`` and a 1-D one ``Box(x0, x1)``; ``x0 .. z1`` name the bounds of the last
three axes whatever the number of axes, so 2-D code reads ``box.y0`` as it always did.
"""
from ..errors import GeometryError

#: Letters of the trailing axes (``x`` is the last axis), for the names of the bounds.
_LETTERS = "zyx"


class Box:
    """``[lo[0], hi[0]) x ... x [lo[n-1], hi[n-1])`` in global coordinates.

    Coordinates may lie outside the array (negative, or past its end): that is the zero padding
    a chunk carries at the global border. Immutable and hashable; two boxes are equal when their
    bounds are.

    lo, hi : per-axis starts and stops, tuples of ``ndim`` ints.
    z0, z1, y0, y1, x0, x1 : start and stop along the last three axes (``x``: the last one), as
        far as the box has them (a 1-D box has no ``y0``: AttributeError).
    """

    # The bounds of the trailing axes are plain slots (not properties): 2-D code reads them in
    # every step, as fast as before the boxes had any number of axes.
    __slots__ = ("lo", "hi", "z0", "z1", "y0", "y1", "x0", "x1")

    def __init__(self, *bounds):
        if not bounds or len(bounds) % 2:
            raise GeometryError(f"a box needs a (start, stop) pair per axis, got {bounds!r}")
        lo, hi = tuple(bounds[0::2]), tuple(bounds[1::2])
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        for letter, a, b in zip(_LETTERS[::-1], lo[::-1], hi[::-1]):   # x, y, z from the end
            object.__setattr__(self, f"{letter}0", a)
            object.__setattr__(self, f"{letter}1", b)

    @classmethod
    def of_spans(cls, spans):
        """The box of per-axis ``(start, stop)`` pairs."""
        return cls(*(v for span in spans for v in span))

    def __setattr__(self, name, value):
        raise AttributeError("Box is immutable")

    def __reduce__(self):
        return (Box, self.bounds)

    # -- bounds ---------------------------------------------------------------------------------
    @property
    def ndim(self):
        return len(self.lo)

    @property
    def bounds(self):
        """``(start0, stop0, start1, stop1, ...)``: the constructor's arguments."""
        return tuple(v for pair in zip(self.lo, self.hi) for v in pair)

    @property
    def spans(self):
        """Per-axis ``(start, stop)`` pairs."""
        return tuple(zip(self.lo, self.hi))

    def __eq__(self, other):
        return isinstance(other, Box) and self.lo == other.lo and self.hi == other.hi

    def __hash__(self):
        return hash((self.lo, self.hi))

    def __repr__(self):
        names = _bound_names(self.ndim)
        return "Box(" + ", ".join(f"{n}={v}" for n, v in zip(names, self.bounds)) + ")"

    # -- measures -------------------------------------------------------------------------------
    @property
    def shape(self):
        """Per-axis lengths ``hi - lo`` (negative for an inverted span)."""
        return tuple(b - a for a, b in zip(self.lo, self.hi))

    @property
    def size(self):
        """Number of positions inside (0 when empty)."""
        n = 1
        for length in self.shape:
            n *= max(length, 0)
        return n

    def is_empty(self):
        return any(b <= a for a, b in zip(self.lo, self.hi))

    def intersect(self, other):
        """The box of positions in both (possibly empty); both must have the same ``ndim``."""
        return Box(*(v for a0, a1, b0, b1 in zip(self.lo, self.hi, other.lo, other.hi)
                     for v in (max(a0, b0), min(a1, b1))))

    def relative_to(self, origin):
        """Slices, one per axis, of this box inside an array whose first element is ``origin``'s
        first corner."""
        return tuple(slice(a - o, b - o) for a, b, o in zip(self.lo, self.hi, origin.lo))


def _bound_names(ndim):
    """``('y0', 'y1', 'x0', 'x1')`` for 2 axes; ``a0_0, a0_1, ...`` beyond three axes."""
    letters = _LETTERS[-ndim:] if ndim <= len(_LETTERS) else [f"a{i}_" for i in range(ndim)]
    return tuple(f"{c}{k}" for c in letters for k in (0, 1))

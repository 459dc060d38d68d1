"""Which part of a decoder op's global computation one call does."""
from dataclasses import dataclass

from ...errors import GeometryError


@dataclass(frozen=True)
class Section:
    """The part of a global computation that one call of a decoder op does, per spatial axis:
    its input ``x`` (a chunk) holds the global input positions ``in_start[d] ..
    in_start[d] + x.shape[2 + d] - 1`` of an input of ``length[d]`` positions, and the call
    computes the global outputs ``out_start[d] .. out_start[d] + out_shape[d] - 1``.

    On one process the chunk is the whole input and the call computes every output
    (:meth:`whole`); on a process grid, a rank's halo plan gives both (:meth:`of_plan`).
    """

    length: tuple
    in_start: tuple
    out_start: tuple
    out_shape: tuple

    @classmethod
    def whole(cls, in_shape, out_shape):
        """The whole computation: an input of ``in_shape``, every output of ``out_shape``."""
        zeros = (0,) * len(in_shape)
        return cls(tuple(in_shape), zeros, zeros, tuple(out_shape))

    @classmethod
    def of_plan(cls, plan):
        """The section of a rank's :class:`~distnet.geometry.HaloPlan`: its chunk of the input,
        its output tile."""
        return cls(tuple(plan.in_plane), plan.chunk.lo, plan.out_tile.lo, plan.out_tile.shape)

    @property
    def ndim(self):
        """Number of spatial axes."""
        return len(self.length)

    def check(self, x_shape, what):
        """Raise :class:`GeometryError` unless ``x_shape (B, C, *spatial)`` has this section's
        number of spatial axes."""
        if len(x_shape) != 2 + self.ndim:
            raise GeometryError(f"{what}: an input (B, C, {self.ndim} spatial axes) expected, got "
                                f"shape {tuple(x_shape)}")

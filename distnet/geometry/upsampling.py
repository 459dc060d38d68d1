"""Window rules of a decoder, along one axis: transposed convolution and upsampling by an integer
factor (nearest, and linear as PyTorch's ``align_corners=False``: bilinear / trilinear per axis).

Same protocol as :class:`~distnet.geometry.window.Window` (``output_length(L)``,
``input_span(out_start, out_count)``; see :mod:`distnet.geometry.window`), so a halo plan takes
them unchanged: each rank computes its tile of the (larger) output and receives whatever input
that tile reads, from whichever ranks own it. Pure index math, in integers.
"""
from dataclasses import dataclass

from ..errors import GeometryError


def _check_positive(name, value):
    if value < 1:
        raise GeometryError(f"{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class TransposedWindow:
    """One axis of a transposed convolution (PyTorch's ``ConvTranspose``, no dilation): input
    ``i`` and kernel tap ``u`` (``0 <= u < size``) add into output ``o = i*stride + u - pad_lo``.

    Output length ``(L - 1)*stride + size - pad_lo - pad_hi + output_padding`` (PyTorch's
    ``padding`` is ``pad_lo = pad_hi``; ``output_padding`` adds outputs at the end, which only
    the last inputs' taps may reach). Output ``o`` reads the inputs
    ``ceil((o + pad_lo - size + 1) / stride) .. floor((o + pad_lo) / stride)``: none at all when
    ``stride > size`` and ``o`` falls between two inputs' taps. Near the border some of them lie
    outside ``[0, L)``: zeros, as a conv's padding, so that a kernel gathering its taps needs no
    bounds checks.
    """

    size: int
    stride: int = 1
    pad_lo: int = 0
    pad_hi: int = 0
    output_padding: int = 0

    def __post_init__(self):
        _check_positive("kernel size", self.size)
        _check_positive("stride", self.stride)
        if min(self.pad_lo, self.pad_hi, self.output_padding) < 0:
            raise GeometryError(f"padding must be >= 0, got ({self.pad_lo}, {self.pad_hi}), "
                                f"output padding {self.output_padding}")
        if self.output_padding >= self.stride:
            raise GeometryError(f"output padding must be smaller than the stride {self.stride}, "
                                f"got {self.output_padding}")

    def output_length(self, length):
        n = (length - 1) * self.stride + self.size - self.pad_lo - self.pad_hi + self.output_padding
        if n < 1:
            raise GeometryError(f"transposed window {self.size} stride {self.stride} with padding "
                                f"{self.pad_lo}+{self.pad_hi} leaves no output of the input length {length}")
        return n

    def input_span(self, out_start, out_count):
        first = out_start + self.pad_lo                 # outputs in the unpadded coordinates
        last = first + out_count - 1
        start = -((self.size - 1 - first) // self.stride)   # ceil((first - size + 1) / stride)
        stop = last // self.stride + 1
        return start, max(start, stop)


@dataclass(frozen=True)
class NearestUpsample:
    """One axis of nearest-neighbour upsampling by ``factor``: output ``o`` reads input
    ``floor(o / factor)``; output length ``L * factor``."""

    factor: int

    def __post_init__(self):
        _check_positive("upsampling factor", self.factor)

    def output_length(self, length):
        return length * self.factor

    def input_span(self, out_start, out_count):
        return out_start // self.factor, (out_start + out_count - 1) // self.factor + 1


@dataclass(frozen=True)
class LinearUpsample:
    """One axis of linear upsampling by ``factor`` with PyTorch's ``align_corners=False``
    (``mode='bilinear'`` / ``'trilinear'`` apply it per axis) on an input of ``length``.

    Output ``o`` sits at input coordinate ``src = (o + 0.5) / factor - 0.5``, clamped to ``>= 0``;
    it interpolates between ``i0 = floor(src)`` and ``i1 = min(i0 + 1, length - 1)`` (the border
    repeats its last input). It reads both, the weight of ``i1`` being 0 or not: that pair is the
    halo. The clamp needs the input length, so the rule is made for one (``output_length`` of
    another is an error).
    """

    factor: int
    length: int

    def __post_init__(self):
        _check_positive("upsampling factor", self.factor)
        _check_positive("input length", self.length)

    def output_length(self, length):
        if length != self.length:
            raise GeometryError(f"linear upsampling made for input length {self.length} used on "
                                f"length {length}")
        return length * self.factor

    def _left(self, o):
        """``i0`` of output ``o``: ``floor(max(2o + 1 - factor, 0) / (2 factor))``, in integers."""
        return max(2 * o + 1 - self.factor, 0) // (2 * self.factor)

    def input_span(self, out_start, out_count):
        last = out_start + out_count - 1
        return self._left(out_start), min(self._left(last) + 1, self.length - 1) + 1

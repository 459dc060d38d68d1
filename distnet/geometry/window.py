"""Window rules: which input positions an output position reads, along one axis, and how many
outputs there are. A layer has one rule per spatial axis; :func:`~distnet.geometry.halo.plan_halo`
plans its halo exchange from them.

A *rule* is any object with

* ``output_length(L)``: the number of outputs for an input of length ``L``
  (:class:`~distnet.errors.GeometryError` if the input is too short), and
* ``input_span(out_start, out_count)``: the input range ``(start, stop)`` that the outputs
  ``out_start .. out_start + out_count - 1`` read: the smallest range holding every input they
  read. Positions outside ``[0, L)`` read zero (padding); an empty range is ``(start, start)``.

Spans must be monotone (a later output's span neither starts nor stops before an earlier
one's), as they are for every rule here. This module has the sliding window (convolution,
pooling, local filtering, LCN; with dilation) and the crop; :mod:`distnet.geometry.upsampling`
the rules of a decoder (transposed convolution, nearest and linear upsampling).
"""
from dataclasses import dataclass

from ..errors import GeometryError


@dataclass(frozen=True)
class Window:
    """One axis of a window layer: kernel extent ``size``, ``stride``, zero padding before
    (``pad_lo``) and after (``pad_hi``) the input, and ``dilation`` (the step between two taps).

    Output ``i`` reads input positions ``i*stride - pad_lo + u*dilation`` for ``u = 0 .. size-1``
    (positions outside ``[0, L)`` read zero).
    """

    size: int
    stride: int = 1
    pad_lo: int = 0
    pad_hi: int = 0
    dilation: int = 1

    def __post_init__(self):
        if self.size < 1:
            raise GeometryError(f"window size must be >= 1, got {self.size}")
        if self.stride < 1:
            raise GeometryError(f"stride must be >= 1, got {self.stride}")
        if self.pad_lo < 0 or self.pad_hi < 0:
            raise GeometryError(f"padding must be >= 0, got ({self.pad_lo}, {self.pad_hi})")
        if self.dilation < 1:
            raise GeometryError(f"dilation must be >= 1, got {self.dilation}")

    @property
    def extent(self):
        """Input positions from the first tap to the last: ``(size - 1) * dilation + 1``."""
        return (self.size - 1) * self.dilation + 1

    def output_length(self, length):
        """``floor((L + pad_lo + pad_hi - extent) / stride) + 1``; :class:`GeometryError` if < 1."""
        span = length + self.pad_lo + self.pad_hi - self.extent
        if span < 0:
            what = f"window {self.size}" + (f" (dilation {self.dilation}: extent {self.extent})"
                                            if self.dilation > 1 else "")
            raise GeometryError(
                f"{what} (padding {self.pad_lo}+{self.pad_hi}) is larger than the input length {length}")
        return span // self.stride + 1

    def input_span(self, out_start, out_count):
        """Global input range ``(start, stop)`` read by outputs ``out_start ... out_start+out_count-1``.

        ``start`` may be negative and ``stop`` may pass the input length: those rows are padding.
        """
        start = out_start * self.stride - self.pad_lo
        stop = (out_start + out_count - 1) * self.stride - self.pad_lo + self.extent
        return start, stop


@dataclass(frozen=True)
class Crop:
    """One axis of a crop: output ``o`` reads input ``o + lo``; ``lo`` positions are dropped
    before and ``hi`` after (output length ``L - lo - hi``). A negative ``lo`` or ``hi`` pads
    with zeros instead. A U-Net crops an encoder map to its decoder map's length this way
    (:meth:`center`) before concatenating them."""

    lo: int = 0
    hi: int = 0

    @classmethod
    def center(cls, length, target):
        """The crop of ``length`` to ``target`` positions, the odd one dropped at the end:
        ``lo = (length - target) // 2``."""
        lo = (length - target) // 2
        return cls(lo, length - target - lo)

    def output_length(self, length):
        """``L - lo - hi``; :class:`GeometryError` if < 1."""
        n = length - self.lo - self.hi
        if n < 1:
            raise GeometryError(f"cropping {self.lo}+{self.hi} leaves nothing of the input length {length}")
        return n

    def input_span(self, out_start, out_count):
        """``(out_start + lo, out_start + out_count + lo)``: the same range, shifted."""
        return out_start + self.lo, out_start + out_count + self.lo


def same_padding(size):
    """``(pad_lo, pad_hi)`` that keeps the length at stride 1: neon's LCN rule,
    ``pad_lo = size - 1 - (size - 1) // 2`` and ``pad_hi = (size - 1) // 2``."""
    return size - 1 - (size - 1) // 2, (size - 1) // 2

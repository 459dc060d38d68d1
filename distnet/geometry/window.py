"""The receptive-field rule of a sliding-window layer along one axis (conv, pooling, local
filtering, LCN): which input rows an output row reads, and how many outputs there are."""
from dataclasses import dataclass

from ..errors import GeometryError


@dataclass(frozen=True)
class Window:
    """One axis of a window layer: kernel extent ``size``, ``stride``, zero padding before
    (``pad_lo``) and after (``pad_hi``) the input.

    Output ``i`` reads input positions ``i*stride - pad_lo ... i*stride - pad_lo + size - 1``
    (positions outside ``[0, L)`` read zero).
    """

    size: int
    stride: int = 1
    pad_lo: int = 0
    pad_hi: int = 0

    def __post_init__(self):
        if self.size < 1:
            raise GeometryError(f"window size must be >= 1, got {self.size}")
        if self.stride < 1:
            raise GeometryError(f"stride must be >= 1, got {self.stride}")
        if self.pad_lo < 0 or self.pad_hi < 0:
            raise GeometryError(f"padding must be >= 0, got ({self.pad_lo}, {self.pad_hi})")

    def output_length(self, length):
        """``floor((L + pad_lo + pad_hi - size) / stride) + 1``; :class:`GeometryError` if < 1."""
        span = length + self.pad_lo + self.pad_hi - self.size
        if span < 0:
            raise GeometryError(
                f"window {self.size} (padding {self.pad_lo}+{self.pad_hi}) is larger than the input length {length}")
        return span // self.stride + 1

    def input_span(self, out_start, out_count):
        """Global input range ``(start, stop)`` read by outputs ``out_start ... out_start+out_count-1``.

        ``start`` may be negative and ``stop`` may pass the input length: those rows are padding.
        """
        start = out_start * self.stride - self.pad_lo
        stop = (out_start + out_count - 1) * self.stride - self.pad_lo + self.size
        return start, stop


def same_padding(size):
    """``(pad_lo, pad_hi)`` that keeps the length at stride 1: neon's LCN rule,
    ``pad_lo = size - 1 - (size - 1) // 2`` and ``pad_hi = (size - 1) // 2``."""
    return size - 1 - (size - 1) // 2, (size - 1) // 2

"""A palette PNG written band by band (``distnet predict``'s masks): the rows of a mask are
handed over in bands and compressed as they come, so no more than one band is ever held.

A PNG is its signature, an ``IHDR`` chunk (width, height, bit depth 8, colour type 3: palette),
a ``PLTE`` chunk (an ``rrggbb`` triple per class), ``IDAT`` chunks that carry one zlib stream of
the rows, each row led by its filter byte (0: none), and ``IEND``. Each chunk is its length,
its type, its data and the CRC-32 of type and data.
"""
import struct
import zlib

import numpy as np

from ..errors import DataError
from .band_file import BandFile

SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The most classes a palette PNG can colour (one byte per pixel).
MAX_CLASSES = 256


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def fixed_palette(k):
    """``k`` distinct colours ``(k, 3)`` uint8: PASCAL VOC's colour map (class 0 black, then
    the bits of the class index spread over red, green and blue)."""
    out = np.zeros((k, 3), dtype=np.uint8)
    for c in range(k):
        v, r, g, b = c, 0, 0, 0
        for shift in range(7, -1, -1):
            r |= (v & 1) << shift
            g |= ((v >> 1) & 1) << shift
            b |= ((v >> 2) & 1) << shift
            v >>= 3
        out[c] = (r, g, b)
    return out


def class_palette(k, class_colors=None):
    """The ``(k, 3)`` uint8 palette of ``k`` classes: the training data's ``class_colors``
    (``rrggbb`` per class, docs/masks.md) where it gives one, else :func:`fixed_palette`'s."""
    out = fixed_palette(k)
    for c, text in enumerate(list(class_colors or [])[:k]):
        text = text.decode() if isinstance(text, bytes) else str(text)
        if len(text) == 6:
            try:
                out[c] = [int(text[i:i + 2], 16) for i in (0, 2, 4)]
            except ValueError:
                pass
    return out


class PalettePNG(BandFile):
    """A palette PNG of ``height`` rows of ``width`` class indices at ``path``, written by
    :meth:`write_rows` (uint8 bands ``(r, width)``, top to bottom) and finished by
    :meth:`close`, which checks that every row came. Holds one band's bytes at a time."""

    def __init__(self, path, width, height, palette):
        palette = np.asarray(palette, dtype=np.uint8)
        if not 1 <= len(palette) <= MAX_CLASSES:
            raise DataError(f"a palette PNG takes 1 to {MAX_CLASSES} colours, got {len(palette)}")
        super().__init__(path, height)
        self.width, self.height = int(width), int(height)
        self._z = zlib.compressobj(6)
        self._f.write(SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 3, 0, 0, 0))
                      + _chunk(b"PLTE", palette.tobytes()))

    def write_rows(self, band):
        """Append the rows ``band (r, width)`` (class indices below the palette's length)."""
        band = np.asarray(band, dtype=np.uint8)
        if band.ndim != 2 or band.shape[1] != self.width or self.rows + len(band) > self.height:
            raise ValueError(f"{self.path}: a band of {band.shape} after {self.rows} of {self.height} rows "
                             f"of {self.width} pixels")
        lines = np.zeros((len(band), self.width + 1), dtype=np.uint8)   # column 0: filter type 0
        lines[:, 1:] = band
        self.rows += len(band)
        data = self._z.compress(lines.tobytes())
        if data:
            self._f.write(_chunk(b"IDAT", data))

    def trailer(self):
        """The rest of the zlib stream and ``IEND``."""
        return _chunk(b"IDAT", self._z.flush()) + _chunk(b"IEND", b"")

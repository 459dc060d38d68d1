"""A volume's mask as a ``.npy`` file written slab by slab (``distnet predict``'s masks of a 3-D
model): a ``.npy`` file is a header (magic, version, a dict of dtype, order and shape) followed by
the raw C-order bytes of the array, so the slabs ``[z0:z1]`` of a ``(D, H, W)`` uint8 array, handed
over in order, are appended as they come and no more than one slab is ever held. The file is
the one ``numpy.save`` writes for the whole array, byte for byte.
"""
import numpy as np

from .band_file import BandFile


class NpyMask(BandFile):
    """A ``.npy`` file of ``shape`` ``(D, H, W)`` uint8 class indices at ``path``, written by
    :meth:`write_rows` (slabs ``(d, H, W)``, first axis in order) and finished by :meth:`close`,
    which checks that every slab came (a volume needs no palette)."""

    unit = "slices"

    def __init__(self, path, shape):
        super().__init__(path, shape[0])
        self.shape = tuple(int(n) for n in shape)
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False,
                  "shape": self.shape}
        np.lib.format.write_array_header_1_0(self._f, header)

    def write_rows(self, slab):
        """Append the slab ``slab (d, *shape[1:])`` of class indices."""
        slab = np.ascontiguousarray(slab, dtype=np.uint8)
        if slab.shape[1:] != self.shape[1:] or self.rows + len(slab) > self.shape[0]:
            raise ValueError(f"{self.path}: a slab of {slab.shape} after {self.rows} of {self.shape[0]} slices "
                             f"of {self.shape[1:]}")
        self._f.write(slab.tobytes())
        self.rows += len(slab)

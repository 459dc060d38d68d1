"""CIFAR-10 from the python batches (docs/neon-semantics.md#cifar-10). Nothing is downloaded.

Files, in ``<repo_path>/CIFAR10/cifar-10-batches-py/``: ``data_batch_1`` … ``data_batch_5``
(train, concatenated in that order) and ``test_batch``. Each is a python-2 pickle of a dict whose
``b'data'`` is a uint8 array ``(n, 3072)`` — per image 1024 red values, then 1024 green, then 1024
blue, each 32x32 row-major, i.e. CHW flattened — and ``b'labels'`` a list of ``n`` ints in 0..9.
The pickles are read only through :mod:`~distnet.data.safe_pickle`: a batch that asks for
anything but numpy arrays is refused, never executed.
"""
import os

import numpy as np

from ..data import safe_pickle
from ..data.sources import Source, cut
from ..errors import DataError
from .base import Dataset

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"


def _get(batch, key):
    """``batch[b'key']`` (python-2 pickle read with encoding='bytes') or ``batch['key']``."""
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    raise KeyError(key)


def read_batch(path):
    """``(x, y)`` of one batch file: ``x`` ``(n, 3, 32, 32)`` uint8, ``y`` ``(n,)`` int64."""
    batch = safe_pickle.load(path)
    try:
        data, labels = _get(batch, "data"), _get(batch, "labels")
    except (KeyError, TypeError):
        raise DataError(f"{path} is not a CIFAR-10 batch (a dict with 'data' and 'labels')") from None
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
            and data.shape[1] == 3 * 32 * 32):
        raise DataError(f"{path}: 'data' must be a uint8 array (n, 3072), got "
                        f"{getattr(data, 'dtype', type(data).__name__)} {getattr(data, 'shape', '')}")
    try:
        y = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise DataError(f"{path}: 'labels' must be a list of ints") from None
    if len(y) != len(data):
        raise DataError(f"{path} has {len(data)} images but {len(y)} labels")
    if len(y) and (y.min() < 0 or y.max() > 9):
        raise DataError(f"{path} has labels outside 0..9 ({y.min()}..{y.max()})")
    return data.reshape(-1, 3, 32, 32), y


class CIFAR10(Dataset):
    """Tiny colour images: ``image_shape = (3, 32, 32)``, ``nclasses = 10``; pixels / 255.

    Keys: those of :class:`~distnet.datasets.base.Dataset` (``repo_path`` required).
    ``load()`` returns ``{'train': (x, y), 'test': (x, y)}`` with ``x`` ``(N, 3, h, w)``.
    """

    nclasses = 10
    image_shape = (3, 32, 32)

    def __init__(self, *, repo_path, **common):
        super().__init__(repo_path=repo_path, **common)

    @property
    def folder(self):
        return os.path.join(self.repo_path, "CIFAR10", "cifar-10-batches-py")

    def _files(self):
        paths = {"train": [os.path.join(self.folder, n) for n in TRAIN_FILES],
                 "test": [os.path.join(self.folder, n) for n in TEST_FILES]}
        missing = [os.path.basename(p) for ps in paths.values() for p in ps if not os.path.isfile(p)]
        if missing:
            raise self.missing(
                f"CIFAR-10 files missing in {self.folder}: {', '.join(missing)}. distnet downloads "
                f"nothing: fetch {URL} and extract it in {os.path.join(self.repo_path, 'CIFAR10')} "
                f"(`tar xzf cifar-10-python.tar.gz` makes cifar-10-batches-py/)", "repo_path", self.repo_path)
        return paths

    def source_files(self):
        shared = self._shared_files()     # read: root / node on another rank: the reader's list
        if shared is not None:
            return shared
        return [p for ps in self._files().values() for p in ps]

    def file_sources(self):
        """``{split: Source}`` of the batch files: one batch file in memory at a time
        (:class:`BatchesSource`)."""
        return {split: BatchesSource(paths, split) for split, paths in self._files().items()}


class BatchesSource(Source):
    """A split stored as CIFAR-10 batch files, ``(N, 3, 32, 32)`` uint8: the labels of every
    batch (read once), the pixels of one batch at a time (kept while rows of it are read, so
    increasing rows load each batch file once)."""

    def __init__(self, paths, split):
        self.paths, self.name = list(paths), split
        self.path = ", ".join(self.paths)
        self._y = [read_batch(p)[1] for p in self.paths]
        sizes = [len(y) for y in self._y]
        if sum(sizes) == 0:
            raise DataError(f"the CIFAR-10 {split} batches in {os.path.dirname(self.paths[0])} hold no images")
        self._starts = np.concatenate([[0], np.cumsum(sizes)])
        self.shape, self.dtype = (int(self._starts[-1]), 3, 32, 32), np.dtype(np.uint8)
        self._batch = (None, None)

    def labels(self):
        return np.concatenate(self._y)

    def read(self, rows, tile, positions=None, out=None):
        rows = np.asarray(rows, dtype=np.int64)
        out = self._out(len(rows), tile, out)
        positions = np.arange(len(rows)) if positions is None else np.asarray(positions)
        which = np.searchsorted(self._starts, rows, side="right") - 1
        for b in np.unique(which):
            if self._batch[0] != b:
                self._batch = (b, read_batch(self.paths[b])[0])
            sel = which == b
            x = self._batch[1][rows[sel] - self._starts[b]]
            out[positions[sel]] = x[cut(tile)]
        return out

    def close(self):
        self._batch = (None, None)

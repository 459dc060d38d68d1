"""Arrays in ``.npy`` files (memory-mapped, so they stream) or one ``.npz`` file, used directly.

``.npy`` files are opened with ``np.load(mmap_mode='r')``: a rank touches only the pages of its
rows and tile. An ``.npz`` member cannot be memory-mapped: it is read whole when first used (for
data larger than memory, ``distnet data convert`` it to HDF5, or save ``.npy`` files).
"""
import os

import numpy as np

from ..data.checks import labels_problem
from ..data.sources import ArraySource, npy_source
from ..errors import ConfigError, DataError
from .base import check_path
from .files import FileDataset

_NPY_KEYS = ("train_x", "train_y", "test_x", "test_y", "valid_x", "valid_y")


def npz_arrays(path):
    """``{split: (x, y)}`` of an ``.npz`` file holding ``x_train``/``y_train``, ``x_test``/
    ``y_test`` (and optionally ``x_valid``/``y_valid``); ``x`` ``(N, C, H, W)`` or ``(N, H, W)``."""
    if not os.path.isfile(path):
        raise DataError(f"{path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            out = {}
            for split in ("train", "test", "valid"):
                half = [f"{a}_{split}" for a in "xy" if f"{a}_{split}" in names]
                if len(half) == 1:
                    other = ("y_" if half[0][0] == "x" else "x_") + split
                    raise DataError(f"{path} holds {half[0]} without {other}: give both (or neither)")
                if f"x_{split}" in names and f"y_{split}" in names:
                    x = z[f"x_{split}"]
                    out[split] = (x[:, None] if x.ndim == 3 else x, z[f"y_{split}"])
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    if "train" not in out:
        raise DataError(f"{path} holds arrays {sorted(names)}; expected x_train, y_train (and x_test, "
                        "y_test; optionally x_valid, y_valid)")
    return out


class NumpyDataset(FileDataset):
    """Arrays used directly: ``.npy`` files (memory-mapped) or one ``.npz``.

    Keys: either ``path`` (an ``.npz`` with ``x_train``, ``y_train``, ``x_test``, ``y_test``, and
    optionally ``x_valid``, ``y_valid``; read whole) or ``train_x``, ``train_y``, ``test_x``,
    ``test_y`` (and optionally ``valid_x``, ``valid_y``): paths of ``.npy`` files, images
    ``(N, C, H, W)`` (or ``(N, H, W)``: one channel), labels ``(N,)`` integers. Relative paths are
    taken inside ``repo_path`` when that is given. The scaling, ``in_memory``, ``valid_fraction``
    and cache keys are :class:`~distnet.datasets.HDF5Dataset`'s.
    """

    config_types = {**FileDataset.config_types, "path": str, **{k: str for k in _NPY_KEYS}}

    def __init__(self, *, path=None, train_x=None, train_y=None, test_x=None, test_y=None,
                 valid_x=None, valid_y=None, **common):
        super().__init__(**common)
        given = {k: v for k, v in zip(_NPY_KEYS, (train_x, train_y, test_x, test_y, valid_x, valid_y))
                 if v is not None}
        if (path is None) == (not given):
            raise ConfigError("give either path (an .npz file) or train_x, train_y, test_x, test_y "
                              "(.npy files)", key="path")
        self.path = self._resolve(check_path(path, "path", False)) if path is not None else None
        self.npy = {k: self._resolve(check_path(v, k, True)) for k, v in given.items()}
        if self.npy:
            for k in _NPY_KEYS[:4]:
                if k not in self.npy:
                    raise ConfigError("is required with the .npy keys", key=k)
            if ("valid_x" in self.npy) != ("valid_y" in self.npy):
                raise ConfigError("give both valid_x and valid_y", key="valid_x")
        self._srcs = None

    def _resolve(self, p):
        return os.path.join(self.repo_path, p) if self.repo_path and not os.path.isabs(p) else p

    def __repr__(self):
        return f"NumpyDataset(path={self.path!r}, npy={self.npy!r})"

    def file_sources(self):
        if self._srcs is None:
            self.source_files()     # a missing file: at the key's YAML line
            if self.path is not None:
                arrays = npz_arrays(self.path)
                if "test" not in arrays:
                    raise DataError(f"{self.path} has no x_test, y_test")
                srcs = {s: ArraySource(self.path, s, x, y) for s, (x, y) in arrays.items()}
            else:
                srcs = {s: npy_source(self.npy[f"{s}_x"], self.npy[f"{s}_y"], s)
                        for s in ("train", "test", "valid") if f"{s}_x" in self.npy}
            shape = srcs["train"].shape[1:]
            for s, src in srcs.items():
                if len(src.shape) != 4 or src.dtype.kind not in "biuf":
                    raise DataError(f"{src.where()}: images must be a numeric (N, C, H, W) array, "
                                    f"got {src.dtype} {src.shape}")
                if src.shape[1:] != shape:
                    raise DataError(f"{src.where()}: images are {src.shape[1:]}, train {shape}")
                if src.dtype != srcs["train"].dtype:
                    raise DataError(f"{src.where()} stores {src.dtype} values but {srcs['train'].where()} "
                                    f"{srcs['train'].dtype}: scale, mean and std apply to every split "
                                    "alike, so store the splits alike")
                if src.shape[0] == 0:
                    raise DataError(f"{src.where()}: holds no images")
            for src in srcs.values():   # before the largest label is asked for (names: a TypeError)
                y = np.asarray(src.labels())
                if y.dtype.kind in "iu" and y.shape == src.shape[:1] + src.shape[2:]:
                    raise DataError(f"{src.where()}: labels {y.dtype} {y.shape} are per pixel (masks), and "
                                    "NumpyDataset reads one class per image: store images and masks in the HDF5 "
                                    "layout (train/x, train/y (N, H, W), attribute nclasses; distnet data convert "
                                    "--masks writes it from folders, docs/masks.md) and read it with HDF5Dataset")
                problem = labels_problem(src.labels(), src.shape[0])
                if problem:
                    raise DataError(f"{src.where()}: labels {problem}")
            self._srcs = srcs
            self._nclasses = 1 + max(int(np.max(src.labels())) for src in srcs.values())
            self.check_labels(srcs)
        return self._srcs

    @property
    def image_shape(self):
        return tuple(int(d) for d in self.sources()["train"].shape[1:])

    @property
    def nclasses(self):
        shared = self.shared_header()
        if shared is not None:      # another rank reads the files (read: root / node)
            return shared["nclasses"]
        self.sources()
        return self._nclasses

    def data_files(self):
        return {"path": self.path} if self.path is not None else dict(self.npy)

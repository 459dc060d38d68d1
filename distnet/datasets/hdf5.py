"""Images of any size from one HDF5 file; each rank reads only its tile (a hyperslab).

Layout of the file at ``path``::

    /train/x   (N,  C, H, W)   numbers (any integer or float type), values used as stored
    /train/y   (N,)            integer class labels 0 .. nclasses-1
    /test/x    (Nt, C, H, W)   same C, H, W as train
    /test/y    (Nt,)
    attribute nclasses on /    (optional; default 1 + the largest label of both splits)

Only ``x[:, :, y0:y1, x0:x1]`` is read, with plain h5py (no parallel HDF5 build needed), so every
rank reads just its n-rant. Values are cast to the requested dtype without scaling: store
``pixels / 255`` if that is what the model expects. A distnet ``.h5`` dataset cache has this
layout too.

Example (writing such a file)::

    with h5py.File("blobs.h5", "w") as f:
        f["train/x"], f["train/y"] = x_train, y_train      # (N, C, H, W), (N,)
        f["test/x"], f["test/y"] = x_test, y_test
        f.attrs["nclasses"] = 10
"""
import os

import numpy as np

from ..errors import DataError
from .base import SPLITS, Dataset, check_path


def _open(path):
    import h5py
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DataError(f"cannot open HDF5 file {path}: {e}") from None


class HDF5Dataset(Dataset):
    """A dataset in the HDF5 layout of the module docstring.

    Keys: ``path`` (str, required; relative paths are taken inside ``repo_path`` when that is
    given), and the :class:`~distnet.datasets.base.Dataset` keys (``repo_path`` optional).
    ``image_shape`` and ``nclasses`` are read from the file header on first use (no pixels are
    read). ``load()`` returns ``{'train': (x, y), 'test': (x, y)}`` with ``x`` ``(N, C, h, w)``.
    """

    config_types = {**Dataset.config_types, "path": str}
    scale_255 = False
    repo_required = False

    def __init__(self, *, path, **common):
        super().__init__(**common)
        path = check_path(path, "path", True)
        if self.repo_path is not None and not os.path.isabs(path):
            path = os.path.join(self.repo_path, path)
        self.path = path
        self._header_cache = None

    def __repr__(self):
        return f"HDF5Dataset(path={self.path!r}, sample_pct={self.sample_pct!r}, " \
               f"serialized_path={self.serialized_path!r})"

    def _header(self):
        """``(image_shape, nclasses)`` from the dataset shapes and labels; checks the layout."""
        if self._header_cache is not None:
            return self._header_cache
        if not os.path.isfile(self.path):
            raise DataError(f"HDF5 dataset file {self.path} does not exist")
        with _open(self.path) as f:
            missing = [f"{s}/{a}" for s in SPLITS for a in ("x", "y") if f"{s}/{a}" not in f]
            if missing:
                raise DataError(f"{self.path} lacks dataset(s) {', '.join(missing)}; the layout is "
                                f"train/x (N,C,H,W), train/y (N,), test/x, test/y")
            shape = None
            top = -1
            for s in SPLITS:
                x, y = f[f"{s}/x"], f[f"{s}/y"]
                if x.ndim != 4 or x.dtype.kind not in "biuf":
                    raise DataError(f"{self.path}: {s}/x must be a numeric (N, C, H, W) array, "
                                    f"got {x.dtype} {x.shape}")
                if shape is not None and x.shape[1:] != shape:
                    raise DataError(f"{self.path}: test/x images are {x.shape[1:]}, train/x {shape}")
                shape = x.shape[1:]
                if y.ndim != 1 or y.dtype.kind not in "iu" or y.shape[0] != x.shape[0]:
                    raise DataError(f"{self.path}: {s}/y must hold {x.shape[0]} integer labels, "
                                    f"got {y.dtype} {y.shape}")
                if x.shape[0] == 0:
                    raise DataError(f"{self.path}: {s}/x holds no images")
                labels = y[()]
                if labels.min() < 0:
                    raise DataError(f"{self.path}: {s}/y has a negative label {labels.min()}")
                top = max(top, int(labels.max()))
            nclasses = f.attrs.get("nclasses")
            if nclasses is None:
                nclasses = top + 1
            nclasses = int(nclasses)
            if top >= nclasses:
                raise DataError(f"{self.path}: label {top} but the file's nclasses is {nclasses}")
        self._header_cache = (tuple(int(d) for d in shape), nclasses)
        return self._header_cache

    @property
    def image_shape(self):
        """``(C, H, W)`` of ``train/x``."""
        return self._header()[0]

    @property
    def nclasses(self):
        """The root attribute ``nclasses``, else 1 + the largest label."""
        return self._header()[1]

    def source_files(self):
        if not os.path.isfile(self.path):
            raise DataError(f"HDF5 dataset file {self.path} does not exist")
        return [self.path]

    def _read(self, tile):
        self._header()
        out = {}
        with _open(self.path) as f:
            for s in SPLITS:
                x = f[f"{s}/x"][:, :, tile.y0:tile.y1, tile.x0:tile.x1]   # this rank's hyperslab
                y = f[f"{s}/y"][()].astype(np.int64)
                out[s] = (x, y)
        return out

"""Images of any size from one HDF5 file; each rank reads only its tile (a hyperslab).

The layout (docs/data.md; ``distnet data convert`` writes it)::

    /train/x   (N,  C, H, W)   numbers: uint8 pixels (what the converter writes) or any integer /
                               float type; chunked (1, C, <=128, <=128) by the converter
    /train/y   (N,)            integer class labels 0 .. nclasses-1
    /test/x    (Nt, C, H, W)   same C, H, W as train
    /test/y    (Nt,)
    /valid/x, /valid/y         optional validation split (same C, H, W)
    attribute nclasses on /    (optional; default 1 + the largest label)
    attribute class_names on / (optional; one name per class, as the converter keeps them)

Only ``x[rows, :, y0:y1, x0:x1]`` is read, with plain h5py (no parallel HDF5 build needed), so
every rank reads just its tile of its rows. Values become floats through the keys ``scale``,
``mean`` and ``std`` (:mod:`distnet.data.scaling`): integer values need ``scale`` (``scale: 1/255`` for
pixels), float values are used as stored unless told otherwise.

Example (writing such a file by hand)::

    with h5py.File("blobs.h5", "w") as f:
        f["train/x"], f["train/y"] = x_train, y_train      # (N, C, H, W), (N,)
        f["test/x"], f["test/y"] = x_test, y_test
        f.attrs["nclasses"] = 10
"""
import os

import numpy as np

from ..data.checks import labels_problem
from ..data.sources import H5Source, open_hdf5
from ..errors import DataError
from .base import check_path
from .files import FileDataset

SPLITS_STORED = ("train", "test", "valid")


def _dataset(f, name, path):
    """The HDF5 dataset ``name`` of the open file ``f``; DataError if it is missing, a dangling
    link or a group."""
    import h5py
    try:
        obj = f.get(name)
    except (KeyError, OSError, ValueError):
        obj = None
    if not isinstance(obj, h5py.Dataset):
        raise DataError(f"{path}: {name} is missing or not a dataset; the layout is train/x (N,C,H,W), "
                        "train/y (N,), test/x, test/y, optionally valid/x, valid/y (docs/data.md)")
    return obj


def _count(value, path):
    """The ``nclasses`` attribute as an int >= 1; DataError otherwise."""
    import numpy as np
    v = np.asarray(value)
    if v.shape != () or v.dtype.kind not in "iuf" or not np.isfinite(v) or v != int(v) or int(v) < 1:
        raise DataError(f"{path}: the attribute nclasses must be a whole number >= 1, got {value!r}")
    return int(v)


#: The root attribute of a converted data set that keeps how its pictures were decoded
#: (``distnet data convert``'s recipe, :mod:`distnet.convert.recipe`).
RECIPE_ATTR = "image_recipe"


def recipe_text_of(path):
    """The recipe attribute (:data:`RECIPE_ATTR`) of an HDF5 data set file as text, or None."""
    with open_hdf5(path) as f:
        text = f.attrs.get(RECIPE_ATTR)
    return None if text is None else text.decode() if isinstance(text, bytes) else str(text)


def class_names_of(path):
    """The ``class_names`` attribute of an HDF5 dataset file (list of str), or None."""
    with open_hdf5(path) as f:
        names = f.attrs.get("class_names")
    if names is None:
        return None
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


class HDF5Dataset(FileDataset):
    """A dataset in the HDF5 layout of ``docs/data.md`` (``distnet data convert`` writes it)::

        /train/x  (N, C, H, W)  uint8 (converter) or any integer / float type
        /train/y  (N,)          integer labels 0 .. nclasses-1
        /test/x, /test/y        same C, H, W
        /valid/x, /valid/y      optional validation split
        attributes on /: nclasses (optional), class_names (optional)

    Keys: ``path`` (str, required; relative paths are taken inside ``repo_path`` when that is
    given); ``scale`` (number or ``"1/255"``; required for integer pixels: ``scale: 1/255`` maps
    0..255 to 0..1, ``scale: 1`` uses them as stored; default 1 for float data), ``mean`` and
    ``std`` (one number or one per channel, applied after ``scale``: ``(x * scale - mean) / std``);
    ``normalize`` (``per_channel``: ``mean`` and ``std`` from the per-channel statistics of the
    train images that ``distnet data convert`` stored in the file, in the scaled units);
    ``in_memory`` (``auto``, the default: hold the rank's data in memory when its float arrays
    take at most 256 MiB, else stream; ``true``: in memory; ``false``: stream, reading each
    minibatch's rows of the rank's tile with a background prefetch); ``valid_fraction`` (hold
    this fraction of the training images out as a validation split, chosen with the fixed seed 0;
    a ``valid`` group in the file is used instead when present); ``cache_dir`` (a node-local folder
    for this rank's cache, default ``$DISTNET_CACHE_DIR``: in memory mode it holds the float
    arrays (like ``serialized_path``), in streaming mode a copy of the rank's tile as stored);
    and the common keys ``sample_pct``, ``serialized_path``, ``dist_flag``, ``dist_mode``.
    ``image_shape`` and ``nclasses`` are read from the file header (no pixels are read).
    """

    config_types = {**FileDataset.config_types, "path": str}

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
        """``(image_shape, nclasses, {split: (shape, dtype)})`` from the file; checks the layout
        and the labels."""
        if self._header_cache is not None:
            return self._header_cache
        shared = self.shared_header()
        if shared is not None:      # another rank reads the file (read: root / node)
            self._header_cache = (tuple(shared["image_shape"]), shared["nclasses"],
                                  {s: (e[1], np.dtype(e[2])) for s, e in shared["splits"].items()})
            return self._header_cache
        self.source_files()     # a missing file: at the key's YAML line
        with open_hdf5(self.path) as f:
            missing = [f"{s}/{a}" for s in ("train", "test") for a in ("x", "y") if f"{s}/{a}" not in f]
            if missing:
                raise DataError(f"{self.path} lacks dataset(s) {', '.join(missing)}; the layout is "
                                f"train/x (N,C,H,W), train/y (N,), test/x, test/y (docs/data.md)")
            shape = None
            top = -1
            splits = {}
            for s in SPLITS_STORED:
                if s not in f:
                    continue
                x, y = (_dataset(f, f"{s}/{a}", self.path) for a in "xy")
                if x.ndim != 4 or x.dtype.kind not in "biuf":
                    hint = ("; for (N, H, W) images of one channel, store x[:, None]"
                            if x.ndim == 3 and x.dtype.kind in "biuf" else "")
                    raise DataError(f"{self.path}: {s}/x must be a numeric (N, C, H, W) array, "
                                    f"got {x.dtype} {x.shape}{hint}")
                if shape is not None and x.shape[1:] != shape:
                    raise DataError(f"{self.path}: {s}/x images are {x.shape[1:]}, train/x {shape}")
                if splits and x.dtype != splits["train"][1]:
                    raise DataError(f"{self.path}: {s}/x stores {x.dtype} values but train/x "
                                    f"{splits['train'][1]}: scale, mean and std apply to every split "
                                    "alike, so store the splits alike")
                shape = x.shape[1:]
                if y.ndim != 1 or y.dtype.kind not in "iu" or y.shape[0] != x.shape[0]:
                    raise DataError(f"{self.path}: {s}/y {labels_problem(y[()], x.shape[0])}")
                if x.shape[0] == 0:
                    raise DataError(f"{self.path}: {s}/x holds no images")
                labels = y[()]
                if labels.min() < 0:
                    raise DataError(f"{self.path}: {s}/y has a label {labels.min()} out of range (negative)")
                top = max(top, int(labels.max()))
                splits[s] = (tuple(int(d) for d in x.shape), x.dtype)
            nclasses = f.attrs.get("nclasses")
            nclasses = top + 1 if nclasses is None else _count(nclasses, self.path)
            if top >= nclasses:
                raise DataError(f"{self.path}: label {top} is out of range 0..{nclasses - 1} "
                                f"(the file's nclasses is {nclasses})")
        self._header_cache = (tuple(int(d) for d in shape), nclasses, splits)
        return self._header_cache

    @property
    def image_shape(self):
        """``(C, H, W)`` of ``train/x``."""
        return self._header()[0]

    @property
    def nclasses(self):
        """The root attribute ``nclasses``, else 1 + the largest label."""
        return self._header()[1]

    file_kind = "HDF5 dataset file"

    def class_names(self):
        """The file's ``class_names`` attribute (the converter's class folders or
        ``--class-names``) when it names every class, else None."""
        shared = self.shared_header()
        names = shared["class_names"] if shared is not None else class_names_of(self.source_files()[0])
        return names if names is not None and len(names) == self.nclasses else None

    def preprocessing(self):
        """:meth:`FileDataset.preprocessing <distnet.datasets.files.FileDataset.preprocessing>`
        with the decoding recipe the converter kept in the file (None for a file converted from
        arrays or written by hand; its JSON is the converter's business)."""
        import json
        text = recipe_text_of(self.source_files()[0])
        try:
            recipe = json.loads(text) if text else None
        except ValueError:
            recipe = None           # distnet predict names the file when it reads the recipe
        return dict(super().preprocessing(), recipe=recipe)

    def channel_stats(self):
        """The per-channel ``(mean, std)`` of ``train/x`` kept in the file (attributes
        ``channel_mean``, ``channel_std``: :mod:`distnet.data.stats`), or None."""
        from ..data.stats import read_stats
        return read_stats(self.source_files()[0])

    def data_files(self):
        return {"path": self.path}

    def file_sources(self):
        return {s: H5Source(self.path, s, shape, dtype) for s, (shape, dtype) in self._header()[2].items()}

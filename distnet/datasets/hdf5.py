"""Images of any size, or volumes, from one HDF5 file; each rank reads only its tile (a hyperslab).

The layout (docs/data.md; ``distnet data convert`` writes it)::

    /train/x   (N,  C, H, W)   numbers: uint8 pixels (what the converter writes) or any integer /
                               float type; chunked (1, C, <=128, <=128) by the converter;
                               volumes (N, C, D, H, W)
    /train/y   (N,)            integer class labels 0 .. nclasses-1, or per-pixel labels (masks)
                               (N, H, W) / (N, D, H, W) of an integer type, chunked like x, or
                               float targets (N, T) to regress (attribute target_names)
    /test/x    (Nt, C, H, W)   same C, H, W as train
    /test/y    (Nt,)           (labels of the same kind as train's)
    /valid/x, /valid/y         optional validation split (same C, H, W)
    attribute nclasses on /    (optional; default 1 + the largest label; required with masks)
    attribute class_names on / (optional; one name per class, as the converter keeps them)
    attribute ignore_label on / (masks: the value of pixels that count for nothing; optional)

Only ``x[rows, :, y0:y1, x0:x1]`` (and ``y[rows, y0:y1, x0:x1]`` of masks) is read, with plain
h5py (no parallel HDF5 build needed), so every rank reads just its tile of its rows. Values
become floats through the keys ``scale``, ``mean`` and ``std`` (:mod:`distnet.data.scaling`):
integer values need ``scale`` (``scale: 1/255`` for pixels), float values are used as stored
unless told otherwise.

Example (writing such a file by hand)::

    with h5py.File("blobs.h5", "w") as f:
        f["train/x"], f["train/y"] = x_train, y_train      # (N, C, H, W), (N,)
        f["test/x"], f["test/y"] = x_test, y_test
        f.attrs["nclasses"] = 10
"""
import os

import numpy as np

from ..data.checks import labels_problem
from ..data.pixel_labels import IGNORE_ATTR, H5MaskSource, image_keys, is_mask_key, mask_key, split_of
from ..data.sources import H5Source, open_hdf5
from ..errors import DataError
from .base import check_path
from .files import FileDataset

SPLITS_STORED = ("train", "test", "valid")
#: The root attribute of an HDF5 data set with float targets that names them, one per column.
TARGETS_ATTR = "target_names"


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


def _read_split(f, s, path, splits):
    """Check split ``s`` of the open file ``f`` and enter it (and its masks) in ``splits``
    (``{key: (shape, dtype)}``); returns its largest label (None: per-pixel labels)."""
    x, y = (_dataset(f, f"{s}/{a}", path) for a in "xy")
    if x.ndim not in (4, 5) or x.dtype.kind not in "biuf":
        hint = ("; for (N, H, W) images of one channel, store x[:, None]"
                if x.ndim == 3 and x.dtype.kind in "biuf" else "; volumes are (N, C, D, H, W)")
        raise DataError(f"{path}: {s}/x must be a numeric (N, C, H, W) array, got {x.dtype} {x.shape}{hint}")
    if splits:
        shape, dtype = splits["train"]
        if x.shape[1:] != shape[1:]:
            raise DataError(f"{path}: {s}/x images are {x.shape[1:]}, train/x {shape[1:]}")
        if x.dtype != dtype:
            raise DataError(f"{path}: {s}/x stores {x.dtype} values but train/x {dtype}: scale, mean and std "
                            "apply to every split alike, so store the splits alike")
        if (y.ndim == x.ndim - 1) != (mask_key("train") in splits):
            raise DataError(f"{path}: {s}/y and train/y differ in kind (one class per image, or per pixel): "
                            "store the labels of every split alike")
    if x.shape[0] == 0:
        raise DataError(f"{path}: {s}/x holds no images")
    splits[s] = (tuple(int(d) for d in x.shape), x.dtype)
    if y.ndim == x.ndim - 1:      # (N, *S): a class per pixel
        if y.shape != x.shape[:1] + x.shape[2:] or y.dtype.kind not in "iu":
            raise DataError(f"{path}: {s}/y must be the per-pixel labels of {s}/x, integers of shape "
                            f"{x.shape[:1] + x.shape[2:]} (N, {'D, ' * (x.ndim == 5)}H, W), got {y.dtype} {y.shape}")
        splits[mask_key(s)] = ((int(y.shape[0]), 1) + tuple(int(d) for d in y.shape[1:]), y.dtype)
        return None
    if TARGETS_ATTR in f.attrs:     # float targets (N, T), named by the attribute (one-hot rows are not)
        return _check_targets(y, s, path, (x.shape[0], len(f.attrs[TARGETS_ATTR])))
    if y.ndim != 1 or y.dtype.kind not in "iu" or y.shape[0] != x.shape[0]:
        raise DataError(f"{path}: {s}/y {labels_problem(y[()], x.shape[0])}")
    labels = y[()]
    if labels.min() < 0:
        raise DataError(f"{path}: {s}/y has a label {labels.min()} out of range (negative)")
    return int(labels.max())


def _check_targets(dset, s, path, shape):
    """A split's float targets ``dset`` ``(N, T)`` (regression; ``shape``: ``N`` samples, ``T``
    names in the file): every value finite; returns :class:`Targets` ``(T)``."""
    if dset.ndim != 2 or dset.dtype.kind != "f" or dset.shape != shape:
        raise DataError(f"{path}: {s}/y must hold the {shape[1]} float targets of each of its {shape[0]} samples "
                        f"that the attribute {TARGETS_ATTR} names, {shape}, got {dset.dtype} {dset.shape}")
    y = dset[()]
    bad = np.argwhere(~np.isfinite(y))
    if bad.size:
        raise DataError(f"{path}: {s}/y holds the non-finite target {y[tuple(bad[0])]} (sample {int(bad[0][0])}, "
                        f"target {int(bad[0][1])}): targets must be finite numbers")
    return Targets(int(y.shape[1]))


class Targets(int):
    """The number of float targets per sample of a split (what :func:`_read_split` returns for
    targets ``(N, T)`` in place of the largest class label)."""


def _classes(attrs, tops, path):
    """``(nclasses, ignore_label)`` of a file (its root ``attrs``; ``tops``: every split's largest
    label, None for per-pixel labels, which need the attribute ``nclasses``)."""
    counts = {int(t) for t in tops if isinstance(t, Targets)}
    if counts:
        if len(counts) > 1 or not all(isinstance(t, Targets) for t in tops):
            raise DataError(f"{path}: the splits' y differ in kind (float targets (N, T) of one T, or labels): "
                            "store them alike")
        return counts.pop(), None
    nclasses = attrs.get("nclasses")
    if nclasses is None and None in tops:
        raise DataError(f"{path} holds per-pixel labels but no attribute nclasses: set it (f.attrs['nclasses'] = "
                        "K; distnet data convert --masks writes it), since finding the largest class would read "
                        "every mask")
    top = max([t for t in tops if t is not None], default=-1)
    nclasses = top + 1 if nclasses is None else _count(nclasses, path)
    if top >= nclasses:
        raise DataError(f"{path}: label {top} is out of range 0..{nclasses - 1} "
                        f"(the file's nclasses is {nclasses})")
    ignore = attrs.get(IGNORE_ATTR)
    if ignore is not None:
        ignore = np.asarray(ignore)
        if ignore.shape != () or ignore.dtype.kind not in "iu" or 0 <= int(ignore) < nclasses:
            raise DataError(f"{path}: the attribute {IGNORE_ATTR} must be an integer that is no class "
                            f"(0..{nclasses - 1}), got {ignore!r}")
        ignore = int(ignore)
    return nclasses, ignore


#: The root attribute of a converted data set that keeps how its pictures were decoded
#: (``distnet data convert``'s recipe, :mod:`distnet.convert.recipe`).
RECIPE_ATTR = "image_recipe"


def recipe_text_of(path):
    """The recipe attribute (:data:`RECIPE_ATTR`) of an HDF5 data set file as text, or None."""
    with open_hdf5(path) as f:
        text = f.attrs.get(RECIPE_ATTR)
    return None if text is None else text.decode() if isinstance(text, bytes) else str(text)


def class_names_of(path, attr="class_names"):
    """The ``class_names`` attribute (``attr``) of an HDF5 dataset file (list of str), or None."""
    with open_hdf5(path) as f:
        names = f.attrs.get(attr)
    if names is None:
        return None
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


class HDF5Dataset(FileDataset):
    """A dataset in the HDF5 layout of ``docs/data.md`` (``distnet data convert`` writes it)::

        /train/x  (N, C, H, W)  uint8 (converter) or any integer / float type; volumes (N, C, D, H, W)
        /train/y  (N,)          integer labels 0 .. nclasses-1, or masks (N, H, W) / (N, D, H, W)
        /test/x, /test/y        same C, H, W
        /valid/x, /valid/y      optional validation split
        attributes on /: nclasses (optional; required with masks), class_names (optional),
        ignore_label (masks; optional)

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
    ``ignore_label`` (masks: the value of pixels that count for nothing, default the file's
    attribute ``ignore_label``); and the common keys ``sample_pct``, ``serialized_path``,
    ``dist_flag``, ``dist_mode``. ``image_shape`` and ``nclasses`` are read from the file header
    (no pixels are read); masks are per-pixel labels read by tile like the images
    (docs/masks.md).
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
        """``(image_shape, nclasses, {key: (shape, dtype)}, ignore_label)`` from the file (a
        split's masks under :func:`~distnet.data.pixel_labels.mask_key`, one-channel shapes);
        checks the layout and the labels (per-image labels read whole, masks never)."""
        if self._header_cache is not None:
            return self._header_cache
        shared = self.shared_header()
        if shared is not None:      # another rank reads the file (read: root / node)
            self._header_cache = (tuple(shared["image_shape"]), shared["nclasses"],
                                  {s: (e[1], np.dtype(e[2])) for s, e in shared["splits"].items()},
                                  shared.get("ignore_label"),
                                  np.asarray(shared["splits"]["train"][3]).dtype.kind == "f")
            return self._header_cache
        self.source_files()     # a missing file: at the key's YAML line
        with open_hdf5(self.path) as f:
            missing = [f"{s}/{a}" for s in ("train", "test") for a in ("x", "y") if f"{s}/{a}" not in f]
            if missing:
                raise DataError(f"{self.path} lacks dataset(s) {', '.join(missing)}; the layout is "
                                f"train/x (N,C,H,W), train/y (N,), test/x, test/y (docs/data.md)")
            splits, tops = {}, []
            for s in SPLITS_STORED:
                if s in f:
                    tops.append(_read_split(f, s, self.path, splits))
            nclasses, ignore = _classes(f.attrs, tops, self.path)
        shape = splits["train"][0][1:]
        self._header_cache = (tuple(int(d) for d in shape), nclasses, splits, ignore, isinstance(tops[0], Targets))
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
        ``--class-names``) when it names every class, else None; for float targets their names
        (attribute ``target_names``)."""
        shared = self.shared_header()
        names = shared["class_names"] if shared is not None else \
            class_names_of(self.source_files()[0], TARGETS_ATTR if self.regression else "class_names")
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

    @property
    def per_pixel(self):
        """Whether ``<split>/y`` holds per-pixel labels (masks ``(N, *S)``) rather than one class per image."""
        return mask_key("train") in self._header()[2]

    @property
    def regression(self):
        """Whether ``<split>/y`` holds float targets ``(N, T)`` per sample (``nclasses`` is ``T``)."""
        return self._header()[4]

    def file_ignore_label(self):
        """The file's attribute ``ignore_label`` (None: it has none)."""
        return self._header()[3]

    def file_sources(self):
        splits = self._header()[2]
        per_pixel = self.per_pixel
        out = {s: H5Source(self.path, s, shape, dtype, pixel_labels=per_pixel)
               for s, (shape, dtype) in image_keys(splits).items()}
        out.update({k: H5MaskSource(self.path, split_of(k), shape, dtype)
                    for k, (shape, dtype) in splits.items() if is_mask_key(k)})
        return out

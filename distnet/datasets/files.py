"""Datasets read from your own files (HDF5, ``.npy``/``.npz``): scaling, streaming or in memory,
a validation split, node-local caches.

:class:`FileDataset` is the base of :class:`~distnet.datasets.HDF5Dataset` and
:class:`~distnet.datasets.NumpyDataset`; subclasses give :meth:`~FileDataset.file_sources` (split ->
:class:`~distnet.data.sources.Source`). :meth:`~FileDataset.load` returns
``{'train': (x, y), 'test': (x, y)}`` (+ ``'valid'`` when there is a validation split) where ``x``
is either an ``(N, C, h, w)`` array (in memory) or a :class:`~distnet.data.stream.StreamArray`
(read per minibatch), which the models index the same way.

Row selection, in this order: the validation split is the file's ``valid`` group if it has one,
else ``valid_fraction`` of the training images held out of train; then ``sample_pct`` keeps a
subset of the remaining training images exactly as for every dataset
(:func:`distnet.data.selection.split_rows`). With neither key, train is the file's rows in file
order, as before.
"""
import contextlib
import logging
import os
import re

import numpy as np

from ..config.builder import config_error
from ..data import cache
from ..data.checks import label_values, labels_problem
from ..data.fingerprints import crc, sampled_rows, shape_text
from ..data.header import header_sources
from ..data.pixel_labels import (LabelStream, check_mask_source, check_mask_values, image_keys, is_mask_key,
                                  mask_key, split_of)
from ..data.scaling import Scaler, check_scaled, normalization, parse_channels, parse_normalize, parse_scale
from ..data.selection import split_rows
from ..data.sources import H5Source, whole
from ..data.stream import StreamArray, check_source_finite
from ..errors import ConfigError, DataError
from ..log import warn_once_per_job
from .base import Dataset

log = logging.getLogger(__name__)

#: A ``{rank}`` / ``{size}`` placeholder (``{rank:03d}``, ``<rank>``) in a path.
_PLACEHOLDER = re.compile(r"\{(rank|size)(:[^}]*)?\}|<(rank|size)>")

#: ``in_memory: auto`` holds a rank's data in memory when its float arrays (all splits, the
#: rank's tile) take at most this many bytes; above it, the data is streamed.
IN_MEMORY_AUTO_BYTES = 256 * 2**20
#: Environment variable naming a node-local folder for per-rank caches (like the key cache_dir).
CACHE_DIR_ENV = "DISTNET_CACHE_DIR"


def parse_in_memory(value):
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "auto"):
        v = value.strip().lower()
        return "auto" if v == "auto" else v == "true"
    raise ConfigError(f"expected auto, true or false, got {value!r}", key="in_memory")


class FileDataset(Dataset):
    """Base of the datasets read from files (module docstring). Keys, besides
    :class:`~distnet.datasets.base.Dataset`'s: ``scale``, ``mean``, ``std``, ``normalize``
    (:mod:`~distnet.data.scaling`), ``in_memory`` (``auto`` | ``true`` | ``false``),
    ``valid_fraction``, ``cache_dir``, ``ignore_label`` (per-pixel labels: the label of pixels
    that count for nothing; default the file's attribute ``ignore_label``, which ``distnet data
    convert --masks`` writes)."""

    #: scale (number or "a/b"), mean / std (number or list) and in_memory (auto/true/false) are
    #: checked by the constructor.
    config_types = {**Dataset.config_types, "valid_fraction": float, "cache_dir": str, "ignore_label": int}
    scale_255 = False
    repo_required = False

    def __init__(self, *, scale=None, mean=None, std=None, in_memory="auto", valid_fraction=0.0,
                 cache_dir=None, normalize=None, ignore_label=None, **common):
        super().__init__(**common)
        self.scale = parse_scale(scale)
        self.mean = parse_channels(mean, "mean")
        self.std = parse_channels(std, "std", positive=True)
        self.normalize = parse_normalize(normalize, self.mean, self.std)
        self.in_memory = parse_in_memory(in_memory)
        if (isinstance(valid_fraction, bool) or not isinstance(valid_fraction, (int, float))
                or not 0 <= valid_fraction < 1):
            raise ConfigError(f"must be a fraction in [0, 1), got {valid_fraction!r}", key="valid_fraction")
        self.valid_fraction = float(valid_fraction)
        self.cache_dir = cache_dir
        if ignore_label is not None and (isinstance(ignore_label, bool) or not isinstance(ignore_label, int)
                                         or ignore_label < 0):
            raise ConfigError(f"must be an integer >= 0 (the label of pixels that count for nothing), got "
                              f"{ignore_label!r}", key="ignore_label")
        self._ignore_label = ignore_label
        #: ``"memory"`` or ``"stream"``: what the last :meth:`load` chose.
        self.mode = None
        self._layout_warned = False     # check() warns about a channels-last layout once
        self._valid_warned = False      # ... and about a valid_fraction that the file's valid split overrides

    # -- what subclasses provide -------------------------------------------------------------

    def sources(self):
        """``{split: Source}`` for ``train``, ``test`` and (if stored) ``valid``: the files'
        (:meth:`file_sources`), or where another rank reads them (``read: root`` / ``node``) the
        reader's header (:class:`~distnet.data.header.HeaderSource`: shapes and labels, no
        pixels)."""
        header = self.shared_header()
        if header is None or self.reading.opens_files():
            return self.file_sources()
        return header_sources(header)

    #: How messages call the data files.
    file_kind = "data file"

    def data_files(self):
        """``{YAML key: path}`` of the data files (resolved inside ``repo_path``)."""
        raise NotImplementedError

    def source_files(self):
        """The data files; a DataError at the key's YAML line for one that is missing (where
        another rank reads them: the reader's list, nothing looked at)."""
        shared = self._shared_files()
        if shared is not None:
            return shared
        files = self.data_files()
        for key, path in files.items():
            if not os.path.isfile(path):
                raise self._missing_file(key, path)
        return list(files.values())

    def _where(self, key):
        """``file:line`` of ``key`` in the YAML this dataset came from (the key alone without one)."""
        e = config_error(self, "", key)
        return f"{e.where}: key '{key}'" if e.where else f"key '{key}'"

    def _missing_file(self, key, path):
        """The DataError for a data file ``path`` (key ``key``) that is not there; a ``{rank}``
        in it gets a hint, since only ``serialized_path`` fills placeholders (a data file is one
        file for the whole job, of which every rank reads its rows and tile)."""
        what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
        hint = ""
        if _PLACEHOLDER.search(path):
            hint = (": {rank} and {size} are filled in serialized_path only (a rank's cache); a data "
                    "file is one file that every rank reads its own rows and tile of, so give its name")
        return self.missing(f"{self.file_kind} {path} {what}{hint}", key, path)

    def fingerprint(self):
        """Per split: its shape and dtype, a CRC-32 of its labels and one of the pixels of
        :data:`~distnet.data.fingerprints.SAMPLED_IMAGES` evenly spaced images, read from the
        header, the labels and those rows (:meth:`~distnet.datasets.base.Dataset.check_same_data`)."""
        out = []
        for key, src in sorted(self.sources().items()):
            rows = sampled_rows(int(src.shape[0]))
            pixels = src.read(rows, whole(src.shape[2:])) if rows.size else np.zeros(0)
            part = f"{split_of(key)} masks" if is_mask_key(key) else f"{key} images"
            out.append((part, shape_text(src.shape, src.dtype), crc(pixels)))
            if src.labels() is not None:
                out.append((f"{key} labels", str(int(src.shape[0])), crc(label_values(src.labels()))))
        return out

    @property
    def ignore_label(self):
        """The key ``ignore_label``, else the file's (per-pixel labels; None: every pixel counts)."""
        return self.file_ignore_label() if self._ignore_label is None else self._ignore_label

    # -- shapes without pixels ---------------------------------------------------------------

    def stored_dtype(self):
        return self.sources()["train"].dtype

    def scaler(self):
        """The :class:`Scaler` for the stored data; ConfigError (at the dataset's YAML line) for
        integer data without ``scale`` or ``mean``/``std`` of the wrong length."""
        src = self.sources()["train"]
        try:
            mean, std = self.mean, self.std
            if self.normalize:
                mean, std = normalization(self.channel_stats(), self.scale, src.path)
            return Scaler.for_data(self.scale, mean, std, src.dtype, src.shape[1], src.path)
        except ConfigError as e:
            raise config_error(self, e.bare_message, e.key) from None

    def preprocessing(self):
        """:meth:`Dataset.preprocessing <distnet.datasets.base.Dataset.preprocessing>` with the
        stored type and the scaling that :meth:`scaler` applies (``normalize``: the file's
        statistics, brought to the scaled units)."""
        scaler = self.scaler()
        return dict(super().preprocessing(), stored_dtype=np.dtype(self.stored_dtype()).name,
                    scale=scaler.scale, mean=_values(scaler.mean), std=_values(scaler.std),
                    normalize=self.normalize)

    takes_scaling = True

    def use_scaling(self, scale, mean, std):
        """Scale the images by ``scale``, ``mean`` and ``std`` (floats, or lists of one per
        channel; None: none) instead of this dataset's keys: a checkpoint's training values
        (``distnet evaluate --preprocessing training``)."""
        self.scale, self.normalize = scale, None
        self.mean = None if mean is None else tuple(float(v) for v in mean)
        self.std = None if std is None else tuple(float(v) for v in std)

    def channel_stats(self):
        """``(mean, std)`` per channel of the stored training images (float64, stored units)
        that ``normalize`` applies; ConfigError where the data keeps none."""
        raise ConfigError(f"normalize: per_channel applies the statistics that distnet data convert stores in an "
                          f"HDF5 file, and {type(self).__name__}'s files keep none: convert them (distnet data "
                          "convert SRC OUT.h5, then HDF5Dataset), or give mean and std", key="normalize")

    def prepare_images(self, x, dtype=np.float64):
        """New images ``x`` ``(N, C, h, w)`` as stored, through this dataset's ``scale``, ``mean``
        and ``std`` (:meth:`scaler`, as its own images), in ``dtype`` (``distnet predict``).
        DataError when ``x`` holds integers and the training file floats, or the other way round
        (one scale cannot suit both); ConfigError (the scaling key's line) when the scaling turns
        finite images into inf or NaN."""
        stored = self.stored_dtype()
        if (x.dtype.kind == "f") != (stored.kind == "f"):
            raise DataError(f"images to predict store {x.dtype} values but {self.source_files()[0]} stores "
                            f"{stored}: give them stored as the training images are (its scale, mean and "
                            "std apply to both)")
        scaler = self.scaler()
        out = scaler.apply_into(x, np.empty(x.shape, np.dtype(dtype)))
        with self._check_scaling():     # finite images that scale / mean / std make inf or NaN
            check_scaled(out, "images to predict", np.arange(len(x)), lambda i: x[i:i + 1], scaler)
        return out

    def check(self):
        """What can be checked from the file header, before any pixel is read: layout, labels,
        scaling keys. ``distnet check`` and every rank's setup call it. Images whose last axis
        looks like channels (1, 3 or 4 long, the first not) get a warning: ``(N, H, W, C)``
        arrays read as ``(N, C, H, W)`` train on nonsense without an error. The warning is about the
        file every rank reads: rank 0 of the job gives it, once per dataset (a run checks twice)."""
        self.shared_header()    # read: root / node: fetched by every rank here (a collective)
        self.scaler()
        self._check_ignore_label()
        self.check_augment()
        C, W = self.image_shape[0], self.image_shape[-1]
        if self.valid_fraction > 0 and "valid" in self.sources() and not self._valid_warned:
            self._valid_warned = True       # the file's valid split is used: the key does nothing
            warn_once_per_job(log, "%s: %g is not used: %s holds a validation split (valid/x, valid/y), "
                              "which is used instead", self._where("valid_fraction"), self.valid_fraction,
                              self.source_files()[0])
        if W in (1, 3, 4) and C not in (1, 3, 4) and not self._layout_warned:
            self._layout_warned = True
            warn_once_per_job(log, "%s: images of %s (C, H, W) look like (N, H, W, C), channels "
                              "last; distnet reads (N, C, H, W): transpose them (x.transpose(0, 3, 1, 2))",
                              self.source_files()[0], "x".join(map(str, self.image_shape)))

    def _check_ignore_label(self):
        """ConfigError at the key ``ignore_label`` when it names a class, or when the labels are
        not per pixel (there is no pixel to ignore)."""
        given = self._ignore_label
        if given is None:
            return
        if not self.per_pixel:
            raise config_error(self, f"{self.source_files()[0]} holds one class per image: ignore_label applies to "
                               "per-pixel labels (masks) only; remove it", "ignore_label")
        if given < self.nclasses:
            raise config_error(self, f"{given} is a class (0..{self.nclasses - 1}); the ignore label must be no "
                               "class (255 for the masks of distnet data convert --masks)", "ignore_label")
        kind = self.sources()[mask_key("train")].dtype
        if given > np.iinfo(kind).max:
            raise config_error(self, f"{given} does not fit the masks' {kind}, which can never hold it", "ignore_label")

    def split_names(self):
        return tuple(self.split_rows())

    def split_rows(self, seed=0):
        """``{split: file rows}`` in the order train, valid, test (:func:`~distnet.data.selection.split_rows`)."""
        counts = {s: src.shape[0] for s, src in image_keys(self.sources()).items()}
        return split_rows(counts, self.valid_fraction, self.sample_pct, seed)

    def float_bytes(self, tile=None, dtype=np.float32):
        """Bytes of the rank's float arrays of every split (what in-memory mode holds)."""
        tile = self._check_tile(tile)
        C = self.image_shape[0]
        per = C * tile.size * np.dtype(dtype).itemsize
        return sum(len(r) for r in self.split_rows().values()) * per

    def choose_mode(self, tile=None, dtype=np.float32):
        """``"memory"`` or ``"stream"`` for ``in_memory`` (``auto``: memory up to
        :data:`IN_MEMORY_AUTO_BYTES` of float data on this rank)."""
        if self.in_memory == "auto":
            return "memory" if self.float_bytes(tile, dtype) <= IN_MEMORY_AUTO_BYTES else "stream"
        return "memory" if self.in_memory else "stream"

    def memory_per_rank(self, tile=None, batch_size=None, ndata=1, dtype=np.float32):
        """Data bytes one rank holds: ``{"memory", "stream", "mode"}`` — both ways
        (:func:`~distnet.data.memory.data_memory`) and the mode ``in_memory`` chooses.
        ``tile``: the rank's :class:`~distnet.geometry.Box` (``rank_tile(grid, coords)``; None: whole images);
        ``batch_size``: the model's; ``ndata``: data replicas. Reads the file header only."""
        from ..data.memory import data_memory
        tile = self._check_tile(tile)
        if self.augment is not None:    # the rank loads its tile's reach (every split: a bound)
            tile = self.augment.reach(tile, self.plane)
        rows = {s: len(r) for s, r in self.split_rows().items()}
        masks = self.sources().get(mask_key("train"))
        out = data_memory(rows, self.image_shape[0], tile.shape, np.dtype(dtype).itemsize,
                          self.stored_dtype().itemsize, batch_size, ndata,
                          None if masks is None else masks.dtype.itemsize)
        out["mode"] = self.choose_mode(tile, dtype)
        return out

    def cache_folder(self):
        """``cache_dir``, else ``$DISTNET_CACHE_DIR``, else None."""
        folder = self.cache_dir or os.environ.get(CACHE_DIR_ENV) or None
        return os.path.expanduser(folder) if folder else None

    def cache_path(self, rank, size, mode="memory"):
        """This rank's cache file: ``serialized_path`` (placeholders filled; relative paths
        inside the cache folder when there is one), else, when a cache folder is set,
        ``<folder>/<file stem>.rank<r>of<n>.h5`` (in memory: float arrays) or
        ``<folder>/<file stem>.tile.rank<r>of<n>.h5`` (streaming: the tile as stored); else None."""
        folder = self.cache_folder()
        if self.serialized_path is not None:
            path = cache.fill_placeholders(self.serialized_path, rank, size)
            return os.path.join(folder, path) if folder and not os.path.isabs(path) else path
        if folder:
            stem = os.path.splitext(os.path.basename(next(iter(self.data_files().values()))))[0]
            kind = ".tile" if mode == "stream" else ""
            return os.path.join(folder, f"{stem}{kind}.rank{rank}of{size}.h5")
        return None

    # -- loading ---------------------------------------------------------------------------------

    def _load(self, tile, seed, dtype, rank, size, grid):
        """This rank's data of every split: arrays (in memory) or :class:`StreamArray` (streamed),
        both ``(N, C, h, w)`` of ``dtype``; labels ``(N,)`` int64, or per-pixel labels ``(N, h, w)``
        of the stored integer type (arrays, or :class:`~distnet.data.pixel_labels.LabelStream`;
        module docstring; volumes have ``d`` before ``h``). The rows of
        every split this rank uses come through the read strategy (:attr:`reading`); in memory
        mode the float arrays are cached (``serialized_path``, ``cache_dir``)."""
        scaler = self.scaler()
        self.mode = self.choose_mode(tile, dtype)
        rows = self.split_rows(seed)
        path = self.cache_path(rank, size, self.mode)
        if self.mode == "stream":
            return self._stream(tile, rows, path, rank, size, grid, scaler, dtype)
        meta = None
        if path is not None:
            meta = self.cache_metadata(tile, seed, dtype, rank, size, grid)
            meta["scaling"] = scaler.describe()
            meta["valid_fraction"] = self.valid_fraction
            if self.per_pixel:      # the masks were checked against it
                meta["ignore_label"] = self.ignore_label
        return self.reading.fetch(self.file_sources, self._stored_rows(rows), tile, path, meta,
                                  lambda srcs: self._in_memory(srcs, rows, tile, dtype, scaler))

    def _stored_rows(self, rows):
        """``{stored split: increasing rows}`` that the splits ``rows`` read (a held-out
        validation split reads rows of train), and the same rows of their masks."""
        stored, by_source = self.sources(), {}
        for split, r in rows.items():
            by_source.setdefault(split if split in stored else "train", []).append(r)
        out = {s: np.unique(np.concatenate(rs)) for s, rs in by_source.items()}
        out.update({mask_key(s): r for s, r in out.items() if mask_key(s) in stored})
        return out

    def _stream(self, tile, rows, path, rank, size, grid, scaler, dtype):
        """Streamed splits (:class:`StreamArray`): from this rank's tile cache at ``path`` when
        there is one (:meth:`~distnet.data.reading.Reading.tile_cache`), else from what the read
        strategy gives (the data files, or the tile received from the reader, held as stored).
        Float pixels are checked for NaN / inf (in blocks), as stored and scaled
        (:meth:`_check_scaling`)."""
        def check(srcs, t):
            for split, r in rows.items():
                with self._check_scaling():
                    check_source_finite(srcs.get(split, srcs["train"]), r, t, scaler=scaler, dtype=dtype)
                masks = _masks_of(srcs, split)
                if masks is not None:
                    check_mask_source(masks, r, t, self.nclasses, self.ignore_label)
        if path is not None and not path.lower().endswith(cache.H5_EXTENSIONS):
            # the key's value, the same on every rank: said once per job
            warn_once_per_job(log, "%s: streamed data is cached in HDF5 only; %s (give a .h5 name or cache_dir)",
                              self.serialized_path, self.reading.without_tile_cache)
            path = None
        srcs = None
        if path is not None:
            meta = self.cache_metadata(tile, 0, np.float64, rank, size, grid)
            for key in ("seed", "sample_pct", "dtype"):   # the tile cache holds every row as stored
                del meta[key]
            meta["kind"] = "tile"
            srcs = self.reading.tile_cache(self.file_sources, tile, path, meta, check, self.source_files()[0])
        if srcs is not None:
            tile = whole(tile.shape)    # the cache holds the tile at its origin
        else:
            srcs = self.reading.rows(self.file_sources, self._stored_rows(rows), tile)
            check(srcs, tile)
            for src in srcs.values():   # (a tile cache has one image per chunk)
                note = src.chunk_warning() if isinstance(src, H5Source) else None
                if note:        # about the file every rank streams alike: once per job
                    warn_once_per_job(log, "%s", note)
        labels = self.sources()         # the file's (or the header's), never a cache's
        out = {}
        for split, r in rows.items():
            x = StreamArray(srcs.get(split, srcs["train"]), r, tile, scaler, dtype)
            masks = _masks_of(srcs, split)
            if masks is None:
                out[split] = (x, self._labels(labels.get(split, labels["train"]), r))
                continue
            y = LabelStream(masks, r, tile)
            x.companions.append(y)      # its minibatches are read ahead with the images'
            out[split] = (x, y)
        log.info("%s: streaming %s from %s (%s)", type(self).__name__,
                 ", ".join(f"{s} {len(v[1])}" for s, v in out.items()), self.source_files()[0],
                 scaler.describe())
        return out

    @contextlib.contextmanager
    def _check_scaling(self):
        """A ConfigError of the scaling keys (finite data that scale / mean / std turn into NaN or
        inf; key None: the dtype cannot hold them) raised inside, pointed at the key's (the
        dataset's) YAML line."""
        try:
            yield
        except ConfigError as e:
            if e.key not in ("scale", "mean", "std", None):
                raise
            raise config_error(self, e.bare_message, e.key) from None

    def _labels(self, src, rows):
        return label_values(np.asarray(src.labels())[rows])

    def _in_memory(self, srcs, rows, tile, dtype, scaler):
        """``{split: (x, y)}`` in memory: the ``rows`` of every split read from ``srcs`` (what the
        read strategy gave), ``tile`` cut, scaled to ``dtype`` and checked."""
        out = {}
        for split, r in rows.items():
            src = srcs.get(split, srcs["train"])    # a held-out validation split reads train rows
            x = StreamArray(src, r, tile, scaler, dtype).materialize()
            with self._check_scaling():
                check_scaled(x, src.where(), r, lambda i: src.read(r[i:i + 1], tile), scaler)
            masks = _masks_of(srcs, split)
            if masks is None:
                out[split] = (x, self._labels(src, r))
                continue
            y = LabelStream(masks, r, tile).materialize()
            check_mask_values(y, self.nclasses, self.ignore_label, masks.where(), r, tile.lo)
            out[split] = (x, y)
        for src in srcs.values():
            src.close()
        return out

    def check_labels(self, srcs=None):
        """DataError naming the file unless every label is in ``0 .. nclasses-1``."""
        srcs = srcs or self.sources()
        k = self.nclasses
        for split, src in srcs.items():
            if src.labels() is None or self.regression:   # per pixel: checked by tile as read; targets: at open
                continue
            y = np.asarray(src.labels())
            problem = labels_problem(y, src.shape[0])
            if problem:
                raise DataError(f"{src.where()}: labels {problem}")
            if len(y) and (y.min() < 0 or y.max() >= k):
                bad = int(y.min()) if y.min() < 0 else int(y.max())
                raise DataError(f"{src.where()}: label {bad} is out of range 0..{k - 1}")


def _masks_of(sources, split):
    """The mask source of ``split`` among ``sources`` (a held-out validation split: train's), or
    None when its labels are one per image."""
    return sources.get(mask_key(split), sources.get(mask_key("train")))


def _values(v):
    """A tuple of floats as a list (JSON), None as None."""
    return None if v is None else [float(x) for x in v]

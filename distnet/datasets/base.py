"""The dataset base class: YAML keys, ``sample_pct``, n-rant cutting and caching.

A dataset yields, per rank, ``{'train': (x, y), 'test': (x, y)}`` where ``x`` is the rank's
*n-rant* — its tile of every image, ``(N, C, h, w)`` — and ``y`` all ``N`` labels (labels are
never split). The tile is a :class:`~distnet.geometry.partition.Box` computed by the caller with
:func:`~distnet.geometry.partition.tile_of`, the function that also drives the model's geometry
(docs/design.md#datasets-and-shards). Rank, size and grid arrive as arguments; which ranks open
the files is the read strategy the dataset composes (:attr:`Dataset.reading`,
:mod:`distnet.data.reading`), which talks to MPI through :mod:`distnet.comm` for ``read: root``
and ``node``.

``sample_pct`` has one meaning for every dataset (:mod:`distnet.data.selection`, with neon's
differences). Values and dtypes: MNIST and CIFAR-10 pixels are divided by 255 (in ``dtype``, as
neon did), HDF5 values are cast to ``dtype`` as stored; labels are int64 class indices (neon's
one-hot targets are the model's business).
"""
import os

import numpy as np

from ..config.builder import config_error, config_where
from ..config.types import Bounded, PositiveInt
from ..data import cache
from ..data.augment import Augmentation, AugmentedArray
from ..data.checks import check_split, check_splits
from ..data.fingerprints import NOT_READ, file_digest, same_data
from ..data.verify import parse_verify, verify_copies
from ..data.header import describe_split
from ..data.reading import parse_chunk_mb, parse_read, reading_for
from ..data.selection import sample_indices
from ..data.sources import whole
from ..data.stream import StreamArray
from ..errors import ConfigError, DataError, MissingDataError
from ..geometry.partition import Box, array_noun, shape_text, tile_of

SPLITS = cache.SPLITS

#: The values of the ``dist_mode`` key; the integer spellings 0, 1, 2 are these, in this order
#: (distnet's numbering: neon 0.4 did not document integer values).
DIST_MODES = ("halopar", "vecpar", "datapar")


def normalize_dist_mode(value):
    """``dist_mode`` as one of :data:`DIST_MODES` (None stays None); accepts the names (any case)
    and the integers 0 (halopar), 1 (vecpar), 2 (datapar). Raises :class:`ConfigError`."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(DIST_MODES):
        return DIST_MODES[value]
    if isinstance(value, str) and value.strip().lower() in DIST_MODES:
        return value.strip().lower()
    raise ConfigError(f"must be one of halopar, vecpar, datapar (or 0, 1, 2), got {value!r}",
                      key="dist_mode")


def float_dtype(dtype):
    """``dtype`` as a numpy dtype; ConfigError (key ``dtype``) unless it is floating."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise ConfigError(f"data dtype must be floating, got {dtype}", key="dtype")
    return dtype


def check_path(value, key, required):
    if value is None:
        if required:
            raise ConfigError("is required: give a path", key=key)
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ConfigError(f"expected a path (string), got {value!r}", key=key)
    return os.path.expanduser(os.fspath(value))


class Dataset:
    """Base of the image dataset kinds (:class:`~distnet.datasets.MNIST`,
    :class:`~distnet.datasets.CIFAR10`, :class:`~distnet.datasets.Iris`, and through
    :class:`~distnet.datasets.files.FileDataset` :class:`~distnet.datasets.HDF5Dataset` and
    :class:`~distnet.datasets.NumpyDataset`).

    Parameters (YAML keys, all keyword)
    -----------------------------------
    repo_path : str
        Data root (``~`` expanded). Required by MNIST and CIFAR10.
    sample_pct : number in (0, 100], default 100
        Percentage of training images kept (:mod:`distnet.data.selection`).
    serialized_path : str or None
        Per-rank cache file (``.h5``, ``.hdf5`` or ``.pkl``) with ``{rank}``/``{size}`` or
        ``<rank>``/``<size>`` placeholders (:mod:`~distnet.data.cache`).
    dist_flag : bool, default False
        Kept for neon files; the experiment decides the tile and passes it to :meth:`load`.
    dist_mode : 'halopar' | 'vecpar' | 'datapar' (or 0 | 1 | 2), default 'halopar'
        How a distributed run (``dist_flag: True``) spreads the data (:meth:`rank_tile`):
        ``halopar`` — every rank loads its spatial tile of every image (Dist layers exchange
        halos); ``vecpar`` — every rank loads whole images and the model (``MLPDist``) shards its
        fully connected layers by input features over a ``1 x P`` grid; ``datapar`` — every rank
        loads whole images and the ranks are data replicas (grid ``1 x 1``, ``data`` = the
        ranks per pipeline stage). The integers are distnet's numbering (neon 0.4 had the names
        and did not document numbers). Only with ``dist_flag: True``.
    backend : object or None
        Kept (neon let a dataset name its backend); not used here.
    num_test_sample : int or None
        Keep only the first this many test images (neon's later datapar files set it to a
        multiple of their batch size); None (the default) keeps them all.
    read : 'every' | 'root' | 'node', default 'every'
        Which ranks open the data files: every rank, world rank 0 alone (the data need be on
        its node only), or the lowest rank of each node; the dataset composes the strategy of
        that name (:attr:`reading`, :mod:`~distnet.data.reading`).
    read_chunk_mb : number, default 16
        With ``read: root`` / ``node``: the most MiB of pixels the reader reads and sends at a
        time (at least one image).
    augment : mapping or None
        Random crop with padding and flips of the training images, one draw per image and
        epoch (:class:`~distnet.data.augment.Augmentation`, docs/data.md#augmentation).
    verify : 'sample' | 'full', default 'sample'
        How the ranks check before training that they read the same data: a sample of 32
        images per split and every label (``full``: every image, checksummed in parallel by the
        ranks that read; :mod:`~distnet.data.verify`).

    Subclasses set ``nclasses`` and ``image_shape`` (known without loading the data) and implement
    :meth:`source_files` (the files, for messages, fingerprints and caches) and
    :meth:`file_sources` (``{split: Source}`` of them); reading, caching, streaming and
    augmentation are the data engine's (:mod:`distnet.data`).
    """

    #: YAML key types for the config builder.
    config_types = {"repo_path": str, "sample_pct": Bounded(float, 0, 100, open_low=True), "serialized_path": str,
                    "dist_flag": bool, "backend": ("obj", "backend"), "num_test_sample": PositiveInt,
                    "read": str, "read_chunk_mb": float,
                    "augment": dict, "verify": str}
    #: Whether pixels are divided by 255 when converted to the float dtype.
    scale_255 = True
    repo_required = True

    def __init__(self, *, repo_path=None, sample_pct=100, serialized_path=None, dist_flag=False,
                 backend=None, dist_mode=None, num_test_sample=None, read="every", read_chunk_mb=16,
                 augment=None, verify=None):
        self.repo_path = check_path(repo_path, "repo_path", self.repo_required)
        if sample_pct is None:
            sample_pct = 100
        if (isinstance(sample_pct, bool) or not isinstance(sample_pct, (int, float))
                or not 0 < sample_pct <= 100):
            raise ConfigError(f"must be a percentage in (0, 100], got {sample_pct!r}",
                              key="sample_pct")
        self.sample_pct = sample_pct
        self.serialized_path = check_path(serialized_path, "serialized_path", False)
        if self.serialized_path is not None:
            cache.check_cache_path(self.serialized_path)
        if not isinstance(dist_flag, bool):
            raise ConfigError(f"expected True or False, got {dist_flag!r}", key="dist_flag")
        self.dist_flag = dist_flag
        mode = normalize_dist_mode(dist_mode)
        if mode is not None and not dist_flag:
            raise ConfigError(f"dist_mode {mode} describes a distributed run: set dist_flag: True "
                              "(here and on the experiment), or remove dist_mode", key="dist_mode")
        self.dist_mode = mode or ("halopar" if dist_flag else None)
        self.backend = backend
        if num_test_sample is not None and num_test_sample < 1:
            raise ConfigError(f"must be >= 1 (or left out: all test images), got {num_test_sample}",
                              key="num_test_sample")
        self.num_test_sample = num_test_sample
        self.read = parse_read(read)
        self.chunk_bytes = parse_chunk_mb(read_chunk_mb)
        self._reading = None
        self.augment = Augmentation.from_config(augment)
        self.verify = parse_verify(verify)

    # -- what subclasses provide -------------------------------------------------------------

    #: Number of classes (labels are ``0 .. nclasses-1``).
    nclasses = None
    #: ``(C, H, W)`` of one image (``(C, D, H, W)`` of a volume).
    image_shape = None
    #: Whether the labels are per pixel (masks ``(N, *tile)``, :mod:`~distnet.data.pixel_labels`)
    #: rather than one class per image.
    per_pixel = False
    #: Whether each sample carries float targets ``(T,)`` to regress (``nclasses`` is then ``T``,
    #: the outputs per sample) rather than class labels.
    regression = False
    #: The label of pixels that count for nothing (per-pixel labels; None: every pixel counts).
    ignore_label = None

    def missing(self, message, key, path):
        """A :class:`MissingDataError` for a file or folder that ``key`` (given as ``path``)
        names and that is not there, at this dataset's YAML ``file:line``."""
        return MissingDataError(message, key, path, config_where(self, key) or config_where(self))

    def source_files(self):
        """Paths of the files the data is read from; :class:`DataError` if any is missing."""
        raise NotImplementedError

    def file_sources(self):
        """``{split: Source}`` (:mod:`~distnet.data.sources`) of the files as stored, every image
        whole: what the read strategy reads rows and tiles of."""
        raise NotImplementedError

    def class_names(self):
        """The name of every class (label 0 first) when the data says them, else None."""
        return None

    def file_ignore_label(self):
        """The ignore label the data files name (per-pixel labels), else None."""
        return None

    def fingerprint(self):
        """What every rank of a job must read alike: a list of ``(part, shape, digest)``
        (:mod:`~distnet.data.fingerprints`), or None (not compared). This one: a CRC-32 of every
        source file (MNIST's and CIFAR-10's files are small enough to read whole)."""
        return [(os.path.basename(p), os.path.getsize(p), file_digest(p)) for p in self.source_files()]

    def check_same_data(self, comm):
        """Collective over ``comm``: a DataError on every rank when some ranks read data that
        differ from rank 0's (:func:`~distnet.data.fingerprints.same_data` of :meth:`fingerprint`).
        Every rank opens the data on its own, so nodes without a shared file system read their
        own copies; a copy left from an earlier conversion (another seed or size) gave those
        ranks other images and labels, and the run trained on the mixture without a word.
        With ``read: root`` one rank read the files (nothing to compare); with ``read: node``
        the nodes' readers compare their copies and the others read nothing."""
        if not self.reading.compares_copies:
            return
        self.shared_header()
        files = self.source_files()
        where = (type(self).__name__ if not files else files[0] if len(files) == 1 else
                 f"the {len(files)} files in {os.path.commonpath([os.path.dirname(f) or '.' for f in files])}")
        same_data(self.fingerprint() if self.reading.opens_files() else NOT_READ, comm, where)
        if self.verify == "full":
            verify_copies(self.file_sources() if self.reading.opens_files() else None, comm, where)

    # -- which ranks read: the read strategy -------------------------------------------------

    @property
    def reading(self):
        """The read strategy of the ``read`` key (:mod:`~distnet.data.reading`), made at its first
        use (MPI may start after the dataset is built); another one may be handed in by
        assigning it before the data are read."""
        if self._reading is None:
            self._reading = reading_for(self.read, self.chunk_bytes)
        return self._reading

    @reading.setter
    def reading(self, strategy):
        self._reading = strategy

    def shared_header(self):
        """The reader's header (:meth:`read_header`) when another rank reads for this one's
        group, else None (this rank opens its files). The first call is collective over the
        reader's group (one broadcast); every rank makes it in ``check()``."""
        return self.reading.header(self.read_header, self._header_cache_file)

    def _header_cache_file(self, world):
        """The reader's cache file (world ``(rank, size)``) that may hold the header when its data
        files are gone: its float arrays, else its tile cache."""
        paths = [self.cache_path(*world, mode) for mode in ("memory", "stream")]
        return next((p for p in paths if p and os.path.isfile(p)), paths[0])

    def read_header(self):
        """What the other ranks need without opening the files: ``files``, ``fingerprints``
        (size and date of each), ``image_shape``, ``nclasses``, ``class_names``, ``ignore_label``
        and ``splits`` (``{split: (path, shape, dtype, labels)}``, a split's masks under their own
        key, :mod:`~distnet.data.pixel_labels`); run on the reader only."""
        files = list(self.source_files())
        srcs = self.file_sources()
        return {"files": files, "fingerprints": [cache.file_fingerprint(p) for p in files],
                "image_shape": tuple(int(d) for d in self.image_shape), "nclasses": int(self.nclasses),
                "class_names": self.class_names(), "ignore_label": self.file_ignore_label(),
                "splits": {s: describe_split(src) for s, src in srcs.items()}}

    def _shared_files(self):
        """The header's data files where another rank reads them (no file is looked at), else None."""
        header = self.shared_header()
        return None if header is None else list(header["files"])

    # -- public --------------------------------------------------------------------------------

    def set_epoch(self, x, epoch):
        """The training images ``x`` (what :meth:`load` gave) draw the augmentation of ``epoch``
        (None: the images as stored). Nothing without ``augment``."""
        if self.augment is not None:
            x.set_epoch(epoch)

    @property
    def plane(self):
        """``(H, W)``: the plane that tiles are cut from (``(D, H, W)``: the volume)."""
        return tuple(self.image_shape[1:])

    def full_tile(self):
        """The :class:`Box` of the whole image."""
        return whole(self.plane)

    def rank_tile(self, grid, coords):
        """The part of every image the rank at ``coords`` of the spatial ``grid`` loads, as the
        ``tile`` argument of :meth:`load`: its :func:`~distnet.geometry.tile_of` box for
        ``halopar``, None (whole images) for ``vecpar``, ``datapar`` and non-distributed runs."""
        if self.dist_mode != "halopar":
            return None
        if len(grid) != len(self.plane):
            raise DataError(f"{type(self).__name__} holds {array_noun(len(self.plane))}s of "
                            f"{shape_text(self.image_shape)} (C x {' x '.join('DHW'[-len(self.plane):])}) "
                            f"but the run cuts them on a {len(grid)}-D grid ({shape_text(grid)})")
        return tile_of(self.plane, grid, coords)

    def split_names(self):
        """The splits the data has, in the order train, (valid,) test: from the file header
        alone (a kind that may hold out a validation split says so)."""
        return ("train", "test")

    def load(self, tile=None, seed=0, dtype=np.float32, rank=0, size=1, grid=None):
        """Read (or fetch from the cache) this rank's n-rant of both splits.

        Parameters
        ----------
        tile : Box or None
            The part ``[y0, y1) x [x0, x1)`` of the ``H x W`` plane this rank owns; None = all.
        seed : int
            Seed of the training subsample (``sample_pct < 100``).
        dtype : numpy dtype or name
            Floating dtype of ``x``.
        rank, size, grid :
            This process's rank, the number of processes and the spatial grid ``(Py, Px)``; used
            only to fill ``serialized_path`` placeholders and for the cache metadata.

        Returns
        -------
        dict
            ``{'train': (x, y), 'test': (x, y)}``: ``x`` ``(N, C, h, w)`` of ``dtype`` with
            ``(h, w) = tile.shape``, ``y`` ``(N,)`` int64. Train holds the ``sample_pct`` subset
            in its shuffled order; test holds every image in file order. With ``augment``, train
            ``x`` is an :class:`~distnet.data.augment.AugmentedArray` (the stored pixels of
            the tile's reach, augmented per epoch as the model reads them).
        """
        dtype = float_dtype(dtype)
        tile = self._check_tile(tile)
        self.shared_header()    # read: root / node: the reader's header before any row (a collective)
        if self.augment is None:
            return self._load(tile, seed, dtype, rank, size, grid)
        return self.augment.load(lambda reach: self._load(reach, seed, dtype, rank, size, grid), tile,
                                 self.plane, seed, self.per_pixel, self.ignore_label)

    def _load(self, tile, seed, dtype, rank, size, grid):
        """This rank's ``tile`` of both splits (:meth:`load` without augmentation): its cache at
        ``serialized_path`` when that matches, else the rows the read strategy gives, subsampled,
        converted to ``dtype`` and checked (:meth:`_build`); the test split cut to
        ``num_test_sample``. File datasets override this."""
        path = meta = None
        if self.serialized_path is not None:
            path = self.cache_path(rank, size)
            meta = self.cache_metadata(tile, seed, dtype, rank, size, grid)
        return self._limit_test(self.reading.fetch(  # a cache failing the check is rebuilt
            self.file_sources, None, tile, path, meta, lambda srcs: self._build(srcs, tile, seed, dtype),
            check=lambda d: check_splits(d, self.nclasses, path, tile.lo)))

    def _limit_test(self, data):
        """``data`` with its test split cut to the first ``num_test_sample`` images."""
        if self.num_test_sample is not None and "test" in data:
            x, y = data["test"]
            data = dict(data, test=(x[:self.num_test_sample], y[:self.num_test_sample]))
        return data

    #: How the data is held (:class:`~distnet.datasets.files.FileDataset` chooses; the others
    #: always hold it in memory).
    in_memory = True

    def check(self):
        """Checks that need the files' headers but no pixels (file datasets: the scale keys
        against the stored dtype); run by ``distnet check`` and before training, on every rank.
        With ``read: root`` / ``node`` the reader's header is fetched here (a collective: every
        rank makes its first call at the same point, never in a rank-0-only path)."""
        self.shared_header()
        self.check_augment()

    def check_augment(self):
        """ConfigError at the key ``augment`` (its YAML line) when it does not fit the data: a
        padding per axis of another number of axes, a flip of an axis the images lack, quarter
        turns of a plane that is not square, masks to pad without an ignore label."""
        if self.augment is None:
            return
        try:
            self.augment.check_plane(self.plane, self.per_pixel, self.ignore_label)
        except ConfigError as e:
            raise config_error(self, e.bare_message, e.key) from None

    def read_ahead(self, x):
        """A function ``schedule(list of row-index arrays)`` that reads those rows of ``x`` (one
        split as :meth:`load` returned it) ahead of their use, in that order; None when ``x`` is
        in memory. The training loop hands it to the model, which calls it with each epoch's
        minibatches (:meth:`~distnet.models.model.Model.fit_epoch`)."""
        return x.read_ahead() if isinstance(x, (StreamArray, AugmentedArray)) else None

    #: Whether :meth:`preprocessing`'s scale, mean and std may be replaced by a checkpoint's
    #: (``use_scaling``; files only: MNIST's and CIFAR-10's division by 255 is their kind's).
    takes_scaling = False

    def preprocessing(self):
        """How this dataset turns images as stored into the values a model trains on, as a plain
        dict (JSON) that checkpoints keep, so that ``distnet predict``, ``evaluate`` and
        :func:`distnet.load` apply the training's (:mod:`distnet.experiments.preprocessing`):
        ``dataset`` (the kind), ``image_shape`` ``[C, H, W]``, ``stored_dtype`` (None: not known
        without reading), ``divide_by_255`` (integer pixels divided by 255, as MNIST and CIFAR-10
        are), ``scale``, ``mean``, ``std`` (:class:`~distnet.data.scaling.Scaler`'s, None here),
        ``normalize``, ``class_names`` (a regression's: its target names), ``recipe`` (how
        pictures are decoded, None here) and
        ``files``. Reads the files' headers only."""
        return {"dataset": type(self).__name__, "image_shape": [int(d) for d in self.image_shape],
                "stored_dtype": None, "divide_by_255": bool(self.scale_255), "scale": None, "mean": None,
                "std": None, "normalize": None, "class_names": self.class_names(), "recipe": None,
                "files": [str(p) for p in self.source_files()]}

    def prepare_images(self, x, dtype=np.float64):
        """New images ``x`` ``(N, C, h, w)`` as stored (any numeric dtype) in the values the model
        was trained on, as ``dtype`` (``distnet predict``): integer pixels divided by 255 when
        this dataset divides its own so (MNIST, CIFAR-10), else as stored."""
        scale = self.scale_255 and x.dtype.kind in "biu"
        dtype = np.dtype(dtype)
        x = np.asarray(x, dtype=dtype)
        return x / dtype.type(255) if scale else x

    def memory_per_rank(self, tile=None, batch_size=None, ndata=1, dtype=np.float32):
        """Data bytes per rank ``{"memory", "stream", "mode"}``, or None where the dataset cannot
        tell without reading its files (MNIST, CIFAR-10: always in memory; see
        :meth:`FileDataset.memory_per_rank <distnet.datasets.files.FileDataset.memory_per_rank>`)."""
        return None

    def describe_memory(self, tile=None, batch_size=None, ndata=1, dtype=np.float32):
        """One line for ``distnet show``: this rank's data bytes in memory and streamed
        (:func:`~distnet.data.memory.describe_memory`)."""
        from ..data.memory import describe_memory
        return describe_memory(self, tile, batch_size, ndata, dtype)

    def cache_path(self, rank, size, mode="memory"):
        """This rank's cache file: ``serialized_path`` with its placeholders filled, or None."""
        if self.serialized_path is None:
            return None
        return cache.fill_placeholders(self.serialized_path, rank, size)

    def cache_metadata(self, tile, seed, dtype, rank, size, grid):
        """The metadata a cache must carry to be used for this call of :meth:`load`."""
        return {
            "format_version": cache.CACHE_FORMAT_VERSION,
            "dataset": type(self).__name__,
            "sources": self._fingerprints(),
            "sample_pct": float(self.sample_pct),
            "seed": int(seed),
            "dtype": np.dtype(dtype).name,
            "tile": list(tile.bounds),
            "grid": None if grid is None else [int(g) for g in grid],
            "plane": list(self.plane),
            "rank": int(rank),
            "size": int(size),
        }

    def _fingerprints(self):
        header = self.shared_header()
        if header is not None:
            return list(header["fingerprints"])
        return [cache.file_fingerprint(p) for p in self.source_files()]

    # -- internals -----------------------------------------------------------------------------

    def _check_tile(self, tile):
        if tile is None:
            return self.full_tile()
        if not isinstance(tile, Box):
            raise TypeError(f"tile must be a Box, got {tile!r}")
        if tile.ndim != len(self.plane) or tile.is_empty() or tile.intersect(self.full_tile()) != tile:
            raise DataError(f"tile {tile} is not a non-empty part of the {shape_text(self.plane)} "
                            f"{array_noun(len(self.plane))}s of {type(self).__name__}")
        return tile

    def _build(self, sources, tile, seed, dtype):
        """``{split: (x, y)}`` of both splits from ``sources`` (what the read strategy gave):
        every stored image's ``tile`` (the ``sample_pct`` subset of train, in its order),
        converted to ``dtype`` (divided by 255 where the kind says so) and checked (finite pixels,
        labels in range)."""
        out = {}
        for split in SPLITS:
            src = sources[split]
            y = np.asarray(src.labels())
            keep = None
            if split == "train" and self.sample_pct != 100:
                keep = sample_indices(len(y), self.sample_pct, seed)
                order = np.argsort(keep, kind="stable")     # read in stored order, each row to its place
                x, y = src.read(keep[order], tile, positions=order), y[keep]
            else:
                x = src.read(np.arange(len(y)), tile)
            x = x.astype(dtype)
            if self.scale_255:
                x /= 255
            check_split(x, y, self.nclasses, ", ".join(map(str, self.source_files())), split, keep,
                        tile.lo)  # refuses non-finite pixels, labels out of range
            out[split] = (x, np.asarray(y, dtype=np.int64))
        for src in sources.values():
            src.close()
        return out

    def __repr__(self):
        return (f"{type(self).__name__}(repo_path={self.repo_path!r}, sample_pct={self.sample_pct!r}, "
                f"serialized_path={self.serialized_path!r})")

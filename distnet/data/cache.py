"""Per-rank dataset caches at ``serialized_path`` (docs/design.md#datasets-and-shards; neon's:
docs/neon-semantics.md#cache-paths, docs/neon-semantics.md#caching).

neon pickled each rank's loaded dataset and trusted the pickle blindly: a file written for
another grid, sample or seed was silently used. Here a cache carries metadata and is used only
when that metadata equals what the current run would build; otherwise it is rebuilt.

Path placeholders (:func:`fill_placeholders`): ``{rank}`` / ``{size}`` (neon's str.format style,
format specs such as ``{rank:03d}`` allowed, ``{{``/``}}`` for literal braces) and ``<rank>`` /
``<size>``. With more than one process the path must contain a rank placeholder, since otherwise
every rank would write the same file.

Formats, by extension:

* ``.h5`` / ``.hdf5`` (preferred): datasets ``train/x``, ``train/y``, ``test/x``, ``test/y`` — the
  layout :class:`~distnet.datasets.hdf5.HDF5Dataset` reads — and one attribute per metadata field,
  ``distnet_cache.<field>``, holding the value as JSON text.
* ``.pkl`` (neon-style): a pickled dict ``{'distnet_cache': metadata, 'train': {'x': x, 'y': y},
  'test': {...}}``, read back only through :mod:`~distnet.data.safe_pickle`.

Metadata fields (all JSON values; see :meth:`Dataset.cache_metadata
<distnet.datasets.base.Dataset.cache_metadata>`): ``format_version``, ``dataset`` (class name),
``sources`` (list of ``{path, size, mtime_ns}`` of the resolved source files), ``sample_pct``,
``seed``, ``dtype``, ``tile`` (``[y0, y1, x0, x1]``; a volume's ``[z0, z1, y0, y1, x0, x1]``),
``grid`` (``[Py, Px]`` or null), ``plane`` (``[H, W]``), ``rank``, ``size``; with per-pixel
labels also ``ignore_label``.

Content checksum: next to the metadata, a cache stores ``checksum`` (attribute
``distnet_cache_checksum`` / key ``distnet_cache_checksum``): CRC-32 of every split's arrays,
their shapes and dtypes (:func:`content_checksum`). A cache whose metadata is intact but whose
arrays were changed (labels edited, NaN pixels written in), or that has no checksum, is rebuilt.

Cache use (:func:`cached_data`, then :func:`store`; :func:`load_or_build` is both): missing
file → build and write; metadata differs → log a warning naming each differing field, build and
overwrite; unreadable or inconsistent file, or a checksum that does not match its arrays → log a
warning, build and overwrite. Files are written to a temporary name and moved into place with
:func:`os.replace`, so a crash never leaves a half-written cache. Which rank reads what it builds
from is the read strategy's business (:meth:`~distnet.data.reading.Reading.fetch`); a streamed
split's cache, the rank's tile as stored, is :mod:`.tile_cache`.
"""
import json
import logging
import os
import pickle
import string
import zlib

import numpy as np

from ..errors import ConfigError, DataError
from ..fileio import atomic_target, clean_stale_temps, hdf5_file, same_file, write_failure
from . import safe_pickle

log = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = 1
H5_EXTENSIONS = (".h5", ".hdf5")
PKL_EXTENSIONS = (".pkl",)
_ATTR = "distnet_cache."
_PKL_KEY = "distnet_cache"
_CHECKSUM = "distnet_cache_checksum"
_HEADER = "distnet_cache_header"
SPLITS = ("train", "test")


# ----------------------------------------------------------------------------- placeholders

def _format_fields(path):
    """Names of the ``{...}`` fields of ``path``; ConfigError if it is not a valid format string."""
    try:
        return [field for _, field, _, _ in string.Formatter().parse(path) if field is not None]
    except ValueError as e:
        raise ConfigError(f"bad placeholder in {path!r}: {e} (write {{{{ and }}}} for literal braces)",
                          key="serialized_path") from None


def has_rank_placeholder(path):
    """Whether ``path`` contains ``{rank}`` (with or without a format spec) or ``<rank>``."""
    return "<rank>" in path or "rank" in _format_fields(path)


def fill_placeholders(path, rank, size):
    """``path`` with ``{rank}``, ``{size}``, ``<rank>`` and ``<size>`` replaced by ``rank``/``size``.

    ``{...}`` fields follow :meth:`str.format` (so ``{rank:02d}`` works and ``{{`` is a literal
    brace); any field other than ``rank`` or ``size`` is a :class:`ConfigError`. With
    ``size > 1`` a path without a rank placeholder is a :class:`ConfigError`: every rank would
    write the same file.
    """
    path = os.fspath(path)
    fields = _format_fields(path)
    bad = [f for f in fields if f not in ("rank", "size")]
    if bad:
        raise ConfigError(f"unknown placeholder {{{bad[0]}}} in {path!r}; only {{rank}}, {{size}}, "
                          f"<rank> and <size> are filled", key="serialized_path")
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in [0, {size})")
    if size > 1 and not has_rank_placeholder(path):
        raise ConfigError(f"{path!r} has no rank placeholder but the run has {size} processes, which "
                          f"would all write the same file: add {{rank}} (e.g. 'cache/mnist_{{rank}}of"
                          f"{{size}}.h5')", key="serialized_path")
    try:
        path = path.format(rank=rank, size=size)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"bad placeholder in {path!r}: {e}", key="serialized_path") from None
    return path.replace("<rank>", str(rank)).replace("<size>", str(size))


def check_cache_path(path):
    """ConfigError unless ``path`` ends in one of the cache extensions."""
    if not str(path).lower().endswith(H5_EXTENSIONS + PKL_EXTENSIONS):
        raise ConfigError(f"{path!r} must end in .h5 or .hdf5 (HDF5 cache) or .pkl (pickle cache)",
                          key="serialized_path")


# ----------------------------------------------------------------------------- metadata

def normalize(meta):
    """``meta`` as it reads back from a file (tuples become lists, and so on)."""
    return json.loads(json.dumps(meta))


def file_fingerprint(path):
    """``{'path', 'size', 'mtime_ns'}`` of a source file, with its absolute path."""
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _describe_sources(cached, current):
    old = {s["path"]: s for s in cached or []} if isinstance(cached, list) else {}
    new = {s["path"]: s for s in current or []}
    parts = [f"{p} is new" for p in new if p not in old]
    parts += [f"{p} is no longer used" for p in old if p not in new]
    for p in new:
        if p in old and old[p] != new[p]:
            parts.append(f"{p} changed (size {old[p].get('size')} -> {new[p]['size']}, "
                         f"mtime_ns {old[p].get('mtime_ns')} -> {new[p]['mtime_ns']})")
    return "sources: " + ("; ".join(parts) or f"cached {cached!r}, now {current!r}")


def differences(cached, current):
    """One sentence per metadata field whose cached value differs from the current one."""
    out = []
    for key in current:
        if key not in cached:
            out.append(f"{key}: absent from the cache, now {current[key]!r}")
        elif cached[key] != current[key]:
            if key == "sources":
                out.append(_describe_sources(cached[key], current[key]))
            else:
                out.append(f"{key}: cached {cached[key]!r}, now {current[key]!r}")
    out += [f"{key}: cached {cached[key]!r}, not used any more" for key in cached if key not in current]
    return out


# ----------------------------------------------------------------------------- read / write

def _is_h5(path):
    return str(path).lower().endswith(H5_EXTENSIONS)


def content_checksum(data):
    """``"crc32:<hex>"`` of ``data`` (split -> ``(x, y)``): the bytes, shapes and dtypes of every
    array, splits in :data:`SPLITS` order, then any others (``valid``) by name."""
    crc = 0
    for split in [s for s in SPLITS if s in data] + sorted(s for s in data if s not in SPLITS):
        for a in data[split]:
            a = np.ascontiguousarray(a)
            crc = zlib.crc32(f"{split}:{a.dtype.str}:{a.shape};".encode(), crc)
            crc = zlib.crc32(memoryview(a).cast("B"), crc)
    return f"crc32:{crc:08x}"


class NotACache(DataError):
    """A readable file at a cache path that holds no distnet cache metadata (someone's data)."""


def refuse_foreign(path, meta):
    """Before a cache at ``path`` is read or written: :class:`ConfigError` if ``path`` is one of
    the dataset's own files (``meta["sources"]``); a cache written there would replace the data."""
    for src in meta.get("sources") or []:
        if same_file(path, src["path"]):
            raise ConfigError(f"{path} is the dataset's own file: a cache written there would replace "
                              "the data; give the cache another name", key="serialized_path")


def foreign(path):
    return DataError(f"{path} exists and is not a distnet dataset cache: remove it or give the cache "
                     "another name (distnet does not overwrite files it did not write)")


def _read(path):
    """``(metadata, data, stored checksum or None)`` of a cache file (see :func:`read_cache`);
    :class:`NotACache` for a readable file without cache metadata."""
    try:
        if _is_h5(path):
            import h5py
            with h5py.File(path, "r") as f:
                meta = stamped(f)
                data = {s: (f[s]["x"][()], f[s]["y"][()]) for s in SPLITS + ("valid",) if s in f}
                checksum = f.attrs.get(_CHECKSUM)
        else:
            obj = safe_pickle.load(path)
            if not isinstance(obj, dict) or _PKL_KEY not in obj:
                raise NotACache(f"{path} has no distnet cache metadata")
            meta = obj[_PKL_KEY]
            data = {s: (obj[s]["x"], obj[s]["y"]) for s in SPLITS + ("valid",) if s in obj}
            checksum = obj.get(_CHECKSUM)
    except DataError:
        raise
    except Exception as e:  # h5py/json/KeyError/TypeError: all mean "not a usable cache"
        raise DataError(f"cannot read dataset cache {path}: {type(e).__name__}: {e}") from None
    if not isinstance(meta, dict) or not meta:
        raise NotACache(f"{path} has no distnet cache metadata")
    if isinstance(checksum, bytes):
        checksum = checksum.decode()
    return meta, data, checksum if isinstance(checksum, str) else None


def read_cache(path):
    """``(metadata, data)`` of a cache file; ``data`` maps split -> ``(x, y)``.

    Raises :class:`DataError` if the file cannot be read or is not a complete distnet cache.
    """
    meta, data, _ = _read(path)
    return meta, data


def _check_checksum(path, data, stored):
    """DataError unless ``stored`` is the checksum of ``data``."""
    if stored is None:
        raise DataError(f"{path} has no content checksum (written by an older distnet)")
    actual = content_checksum(data)
    if stored != actual:
        raise DataError(f"{path}: its arrays were changed after it was written (checksum {actual}, "
                        f"recorded {stored})")


def _check_data(path, meta, data):
    """DataError unless the arrays agree with the metadata (dtype, tile shape, N of x and y):
    labels are int64 ``(N,)``, float32 targets ``(N, T)``, or per-pixel labels ``(N, *tile)`` of
    an integer type."""
    bounds = meta["tile"]
    tile = tuple(bounds[i + 1] - bounds[i] for i in range(0, len(bounds), 2))
    for split, (x, y) in data.items():
        per_image = isinstance(y, np.ndarray) and (y.ndim == 1 and y.dtype == np.int64 or
                                                    y.ndim == 2 and y.dtype == np.float32)    # targets (N, T)
        per_pixel = isinstance(y, np.ndarray) and y.shape[1:] == tile and y.dtype.kind in "iu"
        ok = (isinstance(x, np.ndarray) and (per_image or per_pixel) and x.ndim == 2 + len(tile)
              and x.shape[0] == y.shape[0] and x.shape[2:] == tile and x.dtype == np.dtype(meta["dtype"]))
        if not ok:
            raise DataError(f"{path}: the {split} arrays do not match the cache metadata")


def write_cache(path, meta, data, header=None):
    """Write ``data`` (split -> ``(x, y)``) and ``meta`` to ``path`` atomically; ``header`` (JSON
    values: the data files' header, ``read: root`` / ``node``) is stored beside them."""
    with atomic_target(path) as tmp:
        if _is_h5(path):
            with hdf5_file(tmp) as f:     # a full disk: an OSError, never a crash at exit
                stamp(f, meta, header)
                f.attrs[_CHECKSUM] = content_checksum(data)
                for split, (x, y) in data.items():
                    group = f.create_group(split)
                    group.create_dataset("x", data=x)
                    group.create_dataset("y", data=y)
        else:
            obj = {_PKL_KEY: meta, _CHECKSUM: content_checksum(data)}
            if header is not None:
                obj[_HEADER] = json.dumps(header)
            obj.update({split: {"x": x, "y": y} for split, (x, y) in data.items()})
            with open(tmp, "wb") as f:
                pickle.dump(obj, f, protocol=4)


def stamp(f, meta, header=None):
    """Write ``meta`` (and ``header``, JSON values) as the attributes of the open HDF5 cache ``f``."""
    for key, value in normalize(meta).items():
        f.attrs[_ATTR + key] = json.dumps(value)
    if header is not None:
        f.attrs[_HEADER] = json.dumps(header)


def stamped(f):
    """The metadata :func:`stamp` wrote on the open HDF5 file ``f`` (``{}``: none)."""
    return {k[len(_ATTR):]: json.loads(v) for k, v in f.attrs.items() if k.startswith(_ATTR)}


def read_header(path):
    """The data files' header stored in the cache at ``path`` (JSON values), or None: no file,
    no header, unreadable."""
    if not os.path.isfile(path):
        return None
    return _stored_header(path)


def _stored_header(path):
    try:
        if _is_h5(path):
            import h5py
            with h5py.File(path, "r") as f:
                text = f.attrs.get(_HEADER)
        else:
            obj = safe_pickle.load(path)
            text = obj.get(_HEADER) if isinstance(obj, dict) else None
        if isinstance(text, bytes):
            text = text.decode()
        return json.loads(text) if isinstance(text, str) else None
    except Exception as e:  # noqa: BLE001 - h5py/json/pickle: all mean "no usable header"
        log.warning("dataset cache %s: cannot read its header (%s)", path, e)
        return None


def prepared(path, meta):
    """``meta`` as it reads back from a file, before a cache at ``path`` is looked at: a path that
    is one of the dataset's own files refused (:func:`refuse_foreign`), a temporary left by a write
    killed mid-way (kill -9) removed. None when there is no file at ``path``."""
    meta = normalize(meta)
    refuse_foreign(path, meta)
    clean_stale_temps(path)
    return meta if os.path.exists(path) else None


def cached_data(path, meta, check=None):
    """The data cached at ``path`` if its metadata equals ``meta`` and its arrays pass the
    checks (their shapes and dtypes against the metadata, the checksum, ``check(data)``: a
    DataError for non-finite pixels or labels out of range), else None (with a warning for a
    stale or unusable file). DataError for a file there that is not a distnet cache."""
    meta = prepared(path, meta)
    if meta is None:
        return None
    try:
        cached_meta, data, checksum = _read(path)
        diffs = differences(cached_meta, meta)
        if diffs:
            log.warning("dataset cache %s was written for another run (%s); rebuilding it",
                        path, "; ".join(diffs))
            return None
        _check_data(path, meta, data)
        _check_checksum(path, data, checksum)
        if check is not None:
            check(data)
    except NotACache:
        raise foreign(path) from None
    except DataError as e:
        log.warning("dataset cache %s is unusable (%s); rebuilding it", path, e)
        return None
    log.info("loaded dataset cache %s", path)
    return data


def store(path, meta, data, header=None):
    """Write the cache (:func:`write_cache`); a failure is a warning, the run goes on."""
    try:
        write_cache(path, normalize(meta), data, header)
        log.info("wrote dataset cache %s", path)
    except (OSError, ValueError, TypeError) as e:
        log.warning("could not write dataset cache %s (%s); continuing without it", path,
                    write_failure(e))


def load_or_build(path, meta, build, check=None):
    """The data cached at ``path`` (:func:`cached_data`), else ``build()`` (split -> ``(x, y)``),
    written there (:func:`store`: a cache that cannot be written is a warning, the built data are
    returned anyway)."""
    data = cached_data(path, meta, check)
    if data is None:
        data = build()
        store(path, meta, data)
    return data

"""Unpickling that cannot run code: plain containers and numpy arrays only
(docs/design.md#datasets-and-shards).

A pickle names the callables that rebuild it (``GLOBAL module name``), and a plain
:func:`pickle.load` imports and calls whatever it names, ``os.system`` included. The CIFAR-10
batches and neon-style ``.pkl`` dataset caches need only numpy's array rebuilders, so
:class:`RestrictedUnpickler` admits exactly those and refuses everything else with a
:class:`~distnet.errors.DataError`:

==========================================  ==================================================
global (module.name)                         why it is there
==========================================  ==================================================
``numpy.core.multiarray._reconstruct``       arrays pickled with protocol <= 4 (numpy 1.x name)
``numpy._core.multiarray._reconstruct``      the same, numpy 2.x name
``numpy.ndarray``, ``numpy.dtype``           arguments of ``_reconstruct``
``numpy[._]core.multiarray.scalar``          numpy scalars (e.g. an ``np.int64`` in a dict)
``numpy[._]core.numeric._frombuffer``        arrays pickled with protocol 5
``_codecs.encode``                           python 3 pickles of byte buffers, protocol 2
                                             (``encode(text, 'latin1')``; only latin-1 admitted)
==========================================  ==================================================

The ``numpy.core`` names are answered with the ``numpy._core`` objects on numpy 2, so old files
load without numpy's deprecation warning. Dicts, lists, tuples, strings, bytes, numbers, booleans
and None need no globals at all.
"""
import _codecs
import importlib
import io
import pickle

from ..errors import DataError


def _numpy_private(submodule):
    """``numpy._core.<submodule>`` on numpy 2, ``numpy.core.<submodule>`` on numpy 1."""
    try:
        return importlib.import_module(f"numpy._core.{submodule}")
    except ImportError:
        return importlib.import_module(f"numpy.core.{submodule}")


def _latin1_encode(text, encoding="utf-8", errors="strict"):
    """``_codecs.encode`` restricted to what pickled byte buffers use (latin-1)."""
    if str(encoding).lower().replace("_", "-") not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"refusing _codecs.encode with encoding {encoding!r}")
    return _codecs.encode(text, "latin1", errors)


def _allowed():
    import numpy as np
    multiarray = _numpy_private("multiarray")
    numeric = _numpy_private("numeric")
    table = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
             ("_codecs", "encode"): _latin1_encode}
    for core in ("numpy.core", "numpy._core"):
        table[(f"{core}.multiarray", "_reconstruct")] = multiarray._reconstruct
        table[(f"{core}.multiarray", "scalar")] = multiarray.scalar
        table[(f"{core}.numeric", "_frombuffer")] = numeric._frombuffer
    return table


class RestrictedUnpickler(pickle.Unpickler):
    """A :class:`pickle.Unpickler` that admits only the globals listed in the module docstring.

    ``source`` names the file in error messages. ``encoding='bytes'`` (the default) reads
    python-2 pickles such as the CIFAR-10 batches: their ``str`` values, dict keys included,
    come back as ``bytes`` (``b'data'``, ``b'labels'``).
    """

    def __init__(self, file, *, source="<pickle>", encoding="bytes"):
        super().__init__(file, encoding=encoding)
        self.source = source
        self._table = _allowed()

    def find_class(self, module, name):
        try:
            return self._table[(module, name)]
        except KeyError:
            raise DataError(f"refusing to unpickle {module}.{name} from {self.source}: only plain "
                            f"containers and numpy arrays are admitted") from None

    def persistent_load(self, pid):
        raise DataError(f"refusing to unpickle a persistent id from {self.source}")


def loads(data, *, source="<bytes>", encoding="bytes"):
    """Unpickle ``data`` (bytes) through :class:`RestrictedUnpickler`.

    Raises :class:`~distnet.errors.DataError` for a refused global or a damaged pickle.
    """
    return _load(io.BytesIO(data), source, encoding)


def load(path, *, encoding="bytes"):
    """Unpickle the file at ``path`` through :class:`RestrictedUnpickler`.

    Raises :class:`~distnet.errors.DataError` if the file cannot be read, holds a refused global,
    or is not a complete pickle.
    """
    try:
        with open(path, "rb") as f:
            return _load(f, str(path), encoding)
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None


def _load(file, source, encoding):
    try:
        return RestrictedUnpickler(file, source=source, encoding=encoding).load()
    except DataError:
        raise
    except Exception as e:  # a damaged pickle can raise almost anything
        raise DataError(f"cannot unpickle {source}: {type(e).__name__}: {e}") from None

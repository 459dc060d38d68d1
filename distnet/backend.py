"""The array backend: which array module (``xp``), which dtype, and the seeded RNG.

This is the only module that may import cupy (and only when a GPU backend is asked for).
Every weight of a model is drawn from ``Backend.rng`` in the order of the YAML ``layers`` list,
with the *global* shape, so that a distributed model slices exactly the weights the
single-process model draws (DESIGN §4, NEON.md §3.12).
"""
import numpy as np

from .errors import ConfigError

_DTYPES = {"float32": np.float32, "float64": np.float64}


class Backend:
    """numpy on the CPU.

    Parameters (YAML keys)
    ----------------------
    rng_seed : int, default 0
        Seed of the RNG that draws initial weights (numpy's legacy ``RandomState`` stream, the one
        neon used, so ``uniform`` draws reproduce neon's). neon reseeded from OS entropy when the
        key was absent; distnet uses 0 so that every rank of a run draws the same weights.
    dtype : 'float32' | 'float64', default 'float32'
        dtype of parameters, activations and data.
    seterr_handling : dict, optional
        Passed to ``numpy.seterr`` (neon compatibility).
    """

    name = "numpy"
    config_types = {"rng_seed": int, "dtype": str, "seterr_handling": dict}

    def __init__(self, rng_seed=0, dtype="float32", seterr_handling=None):
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}", key="dtype")
        self.rng_seed = int(rng_seed)
        self.dtype = np.dtype(_DTYPES[dtype])
        self.xp = np
        if seterr_handling:
            np.seterr(**seterr_handling)
        self.rng = np.random.RandomState(self.rng_seed)

    def reseed(self):
        """Restart the weight RNG (a model built twice in one process draws the same weights)."""
        self.rng = np.random.RandomState(self.rng_seed)

    def asarray(self, a, dtype=None):
        """``a`` as an ``xp`` array of the backend dtype (or ``dtype``)."""
        return self.xp.asarray(a, dtype=dtype or self.dtype)

    def to_host(self, a):
        """A numpy copy (or view) of an ``xp`` array, for I/O and printing."""
        return np.asarray(a)

    def __repr__(self):
        return f"{type(self).__name__}(rng_seed={self.rng_seed}, dtype={self.dtype.name})"


class Numpy(Backend):
    """neon's ``neon.backends._numpy.Numpy``: float32 numpy."""


class Numpy64(Backend):
    """neon's ``Numpy64``: float64 numpy."""

    def __init__(self, rng_seed=0, dtype="float64", seterr_handling=None):
        super().__init__(rng_seed=rng_seed, dtype=dtype, seterr_handling=seterr_handling)


def get_array_module(*arrays):
    """``numpy`` or ``cupy``, whichever the arrays belong to (cupy is never imported here: an
    array is recognised by its type's module, so CPU machines never touch cupy)."""
    for a in arrays:
        if type(a).__module__.split(".")[0] == "cupy":
            import sys
            return sys.modules["cupy"]
    return np


class CPU(Backend):
    """``distnet.backends.CPU``: numpy on the CPU (same keys as :class:`Backend`)."""

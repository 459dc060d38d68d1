"""The array backend: which array module (``xp``), which dtype, and the seeded RNG.

This is the only module that may import cupy (and only when a GPU backend is asked for).
Every weight of a model is drawn from ``Backend.rng`` in the order of the YAML ``layers`` list,
with the *global* shape, so that a distributed model slices exactly the weights the
single-process model draws (docs/design.md#initialisation; neon's draw order:
docs/neon-semantics.md#weight-draws-and-rng-order).
"""
import contextlib
import functools

import numpy as np

from .config.types import Bounded, NonNegativeInt, PositiveInt
from .errors import ConfigError

_DTYPES = {"float32": np.float32, "float64": np.float64}


def under_seterr_handling(fn):
    """Decorator of an experiment's entry points (``run``, evaluate, predict): ``fn(exp, ...)``
    runs under ``exp.backend``'s ``seterr_handling`` (:meth:`Backend.errstate`)."""
    @functools.wraps(fn)
    def wrapped(exp, *args, **kwargs):
        with exp.backend.errstate():
            return fn(exp, *args, **kwargs)
    return wrapped


_SETERR_KEYS = ("all", "divide", "over", "under", "invalid")
_SETERR_MODES = ("ignore", "warn", "raise", "print")   # call, log: need a seterrcall, which YAML cannot give


def _check_seterr(mapping):
    """``seterr_handling`` (numpy's ``seterr`` keywords) checked; ConfigError naming the key."""
    unknown = sorted(set(map(str, mapping)) - set(_SETERR_KEYS))
    if unknown:
        raise ConfigError(f"unknown seterr_handling key(s) {unknown}; valid: {list(_SETERR_KEYS)}",
                          key="seterr_handling")
    for k, v in mapping.items():
        if v not in _SETERR_MODES:
            raise ConfigError(f"seterr_handling {k} must be one of {', '.join(_SETERR_MODES)}, got {v!r}",
                              key="seterr_handling")
    return mapping


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
        numpy's error handling while the experiment runs (``numpy.errstate``, neon's
        ``numpy.seterr`` at construction: distnet leaves the state of the program that loads
        an experiment alone, and restores it when a run returns), except that underflow stays ignored
        unless the mapping names ``under`` itself: a value rounding to 0 is harmless in every
        formula here (a logistic unit far in its tail), and neon's ``{all: raise}`` would stop
        a run on it. Keys ``all``, ``divide``, ``over``, ``under``, ``invalid``; values
        ``ignore``, ``warn``, ``raise``, ``print``. With ``raise``, ``distnet run`` ends on the
        first such error with one line naming it.
    threads : int, optional
        BLAS and kernel threads of each rank. Default: the rank's share of its node's cores
        (cores / ranks on the node), or ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` /
        ``OMP_NUM_THREADS`` where one is set; the run header prints the plan
        (``threads 1/rank (2 cores / 2 ranks on this node)``).
    """

    name = "numpy"
    config_types = {"rng_seed": Bounded(int, 0, 2**32 - 1), "dtype": str, "seterr_handling": dict,
                    "threads": PositiveInt}
    #: MPI reads this backend's device buffers directly (GPU backend key; host arrays: moot).
    cuda_aware_mpi = False

    def __init__(self, rng_seed=0, dtype="float32", seterr_handling=None, threads=None):
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}", key="dtype")
        if threads is not None and (isinstance(threads, bool) or int(threads) < 1):
            raise ConfigError(f"threads must be a positive integer, got {threads!r}", key="threads")
        self.threads = None if threads is None else int(threads)
        self.rng_seed = int(rng_seed)
        self.dtype = np.dtype(_DTYPES[dtype])
        self.xp = np
        #: numpy error handling of :meth:`errstate` (None: the caller's).
        self.seterr = {"under": "ignore", **_check_seterr(seterr_handling)} if seterr_handling else None
        self.rng = np.random.RandomState(self.rng_seed)

    def errstate(self):
        """A context manager that applies ``seterr_handling`` while an experiment runs (what the
        experiments' ``run`` / ``evaluate`` enter); numpy's state is the caller's afterwards."""
        return np.errstate(**self.seterr) if self.seterr else contextlib.nullcontext()

    def reseed(self):
        """Restart the weight RNG (a model built twice in one process draws the same weights)."""
        self.rng = np.random.RandomState(self.rng_seed)

    def asarray(self, a, dtype=None):
        """``a`` as an ``xp`` array of the backend dtype (or ``dtype``)."""
        return self.xp.asarray(a, dtype=dtype or self.dtype)

    def to_host(self, a):
        """A numpy copy (or view) of an ``xp`` array, for I/O and printing."""
        return np.asarray(a)

    def bind_device(self, local_rank):
        """Pick this rank's device (GPU backends); ``local_rank`` = rank among the ranks of
        this node. Nothing to do on the CPU."""

    @property
    def host_staging(self):
        """True when MPI must get host copies of this backend's arrays: device arrays and an MPI
        that is not CUDA-aware (``cuda_aware_mpi`` False). Message buffers are then staged
        through pinned host mirrors (:mod:`distnet.comm.staging`)."""
        return self.xp is not np and not self.cuda_aware_mpi

    def __repr__(self):
        return f"{type(self).__name__}(rng_seed={self.rng_seed}, dtype={self.dtype.name})"


class Numpy(Backend):
    """neon's ``neon.backends._numpy.Numpy``: float32 numpy (the keys of :class:`Backend`,
    ``threads`` included).
    """


class Numpy64(Backend):
    """neon's ``Numpy64``: float64 numpy."""

    def __init__(self, rng_seed=0, dtype="float64", seterr_handling=None, threads=None):
        super().__init__(rng_seed=rng_seed, dtype=dtype, seterr_handling=seterr_handling,
                         threads=threads)


#: How to install cupy: the extra of the CUDA major version the driver runs (what ConfigErrors
#: and ``distnet info`` say where cupy is missing).
CUPY_INSTALL = ("install the cupy wheel of your driver's CUDA (`nvidia-smi`'s \"CUDA Version\"): "
                "`pip install 'distnet[gpu-cuda12]'` for 12.x (NVIDIA driver >= 525.60) or "
                "`pip install 'distnet[gpu-cuda13]'` for 13.x (driver >= 580)")


def _import_cupy():
    """cupy, or a ConfigError saying why it cannot be used (cupy is imported only here)."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError, or a CUDA library failing to load
        raise ConfigError("the GPU backend needs cupy, which cannot be imported here "
                          f"({type(e).__name__}: {e}); {CUPY_INSTALL}, or use distnet.backends.Numpy",
                          key="backend") from None
    try:
        ndev = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - cudaErrorNoDevice, driver missing, ...
        # a cupy-cuda13x on a driver for CUDA 12 fails here, not at import
        hint = f"; the cupy wheel is for a newer CUDA than the driver runs: {CUPY_INSTALL}" \
            if "InsufficientDriver" in str(e) else ""
        raise ConfigError(f"the GPU backend found no usable CUDA device ({type(e).__name__}: {e}){hint}",
                          key="backend") from None
    if ndev < 1:
        raise ConfigError("the GPU backend found no CUDA device", key="backend")
    return cupy


class GPU(Backend):
    """cupy on an NVIDIA GPU: the same math through ``xp = cupy``; weights are drawn on the host
    with the same RNG stream as on the CPU, then copied, so CPU and GPU runs start equal.

    Keys: those of :class:`Backend`, plus ``device`` (int; default: the rank's index among the
    ranks of its node, modulo the node's device count, so ranks on one node use distinct GPUs)
    and ``cuda_aware_mpi`` (bool, default False: halo, gradient and pipeline messages are copied
    through pinned host buffers, which any MPI can send; True hands device buffers straight to
    a CUDA-aware MPI, e.g. Open MPI with UCX or MVAPICH2-GDR: no copies, but an MPI without CUDA
    support then crashes or sends garbage). Asking for it where cupy or a GPU is missing is a
    ConfigError that says so.
    """

    name = "cupy"
    config_types = {"device": NonNegativeInt, "cuda_aware_mpi": bool}

    def __init__(self, device=None, cuda_aware_mpi=False, **common):
        super().__init__(**common)
        self.cupy = _import_cupy()
        self.xp = self.cupy
        self.device = device
        self.cuda_aware_mpi = cuda_aware_mpi
        if device is not None:
            ndev = self.cupy.cuda.runtime.getDeviceCount()
            if not 0 <= device < ndev:
                raise ConfigError(f"device {device} does not exist: this node has {ndev} GPU(s), "
                                  f"devices 0 .. {ndev - 1} (or leave device out: one GPU per rank "
                                  "of the node)", key="device")
            self.cupy.cuda.Device(device).use()

    def bind_device(self, local_rank):
        if self.device is None:
            self.cupy.cuda.Device(local_rank % self.cupy.cuda.runtime.getDeviceCount()).use()

    def to_host(self, a):
        return self.cupy.asnumpy(a)

    def __repr__(self):
        dev = self.cupy.cuda.Device().id
        return f"GPU(device={dev}, rng_seed={self.rng_seed}, dtype={self.dtype.name})"


# Top-level modules whose array types are device arrays with cupy's API. cupy is the one distnet
# ships for; tests add a numpy-backed stand-in (distnet/testing/devicelike.py) to run the device
# code paths (strict host/device separation, staging) on machines without a GPU.
DEVICE_ARRAY_MODULES = {"cupy"}


def get_array_module(*arrays):
    """``numpy`` or the device array module (cupy), whichever the arrays belong to. cupy is never
    imported here: an array is recognised by its type's module, so CPU machines never touch it."""
    for a in arrays:
        top = type(a).__module__.split(".")[0]
        if top in DEVICE_ARRAY_MODULES:
            import sys
            return sys.modules[top]
    return np


def _data_pointer(a):
    ai = getattr(a, "__array_interface__", None)
    return ai["data"][0] if ai is not None else a.data.ptr   # numpy; cupy's MemoryPointer


def same_view(a, b):
    """True if ``a`` and ``b`` are the same elements of the same memory (shape and strides)."""
    return a.shape == b.shape and a.strides == b.strides and _data_pointer(a) == _data_pointer(b)


class CPU(Backend):
    """``distnet.backends.CPU``: numpy on the CPU (the keys of :class:`Backend`, ``threads``
    included).
    """


# ---------------------------------------------------------------------------------------------
# The GPU stack, for bug reports (``distnet info``, a run directory's ``run.json``)
# ---------------------------------------------------------------------------------------------

def _cupy_distributions():
    """Installed distributions that provide the ``cupy`` package (``cupy-cuda12x 13.3.0``...),
    from their metadata: nothing is imported."""
    from importlib import metadata
    names = []
    try:
        names = metadata.packages_distributions().get("cupy", [])   # Python >= 3.10
    except Exception:  # noqa: BLE001 - Python 3.9, or odd metadata
        pass
    out = []
    for name in dict.fromkeys(names or ("cupy", "cupy-cuda11x", "cupy-cuda12x", "cupy-cuda13x")):
        try:
            out.append(f"{name} {metadata.version(name)}")
        except Exception:  # noqa: BLE001 - PackageNotFoundError, broken metadata
            pass
    return out


def _cuda_version(v):
    """CUDA's integer version (12040) as ``12.4``."""
    return f"{v // 1000}.{v % 1000 // 10}"


def gpu_stack(probe=True):
    """``[(name, text)]`` about the GPU stack (cupy, CUDA runtime and driver, devices); never
    raises.

    cupy is looked up first without being imported (``importlib.util.find_spec``), so a machine
    without it pays nothing. With ``probe=False`` cupy is not imported either unless it already
    is (a CPU run records its versions without loading CUDA)."""
    import importlib.util
    import sys
    try:
        found = sys.modules.get("cupy") is not None or importlib.util.find_spec("cupy") is not None
    except Exception:  # noqa: BLE001 - a broken sys.modules entry or finder
        found = False
    if not found:
        return [("gpu", "cupy not installed (CPU only; `pip install 'distnet[gpu-cuda12]'` or "
                        "`'distnet[gpu-cuda13]'` adds it, for the 12.x or 13.x of `nvidia-smi`'s "
                        "\"CUDA Version\")")]
    dists = ", ".join(_cupy_distributions()) or "no package metadata"
    if not probe and "cupy" not in sys.modules:
        return [("gpu", f"cupy installed ({dists}), not imported by this process")]
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError, a CUDA library failing to load, ...
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        return [("gpu", f"cupy installed ({dists}) but cannot be imported: {type(e).__name__}: {msg}")]
    rows = [("gpu", f"cupy {getattr(cupy, '__version__', '?')} ({dists})")]
    rt = cupy.cuda.runtime
    parts = []
    for what, get in (("runtime", rt.runtimeGetVersion), ("driver", rt.driverGetVersion)):
        try:
            v = get()
            parts.append(f"{what} {_cuda_version(v)}" if v else f"{what} none")
        except Exception as e:  # noqa: BLE001 - CUDARuntimeError (no driver, ...)
            parts.append(f"{what} unknown ({type(e).__name__})")
    rows.append(("cuda", ", ".join(parts)))
    try:
        n = rt.getDeviceCount()
        names = []
        for i in range(n):
            p = rt.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            names.append(f"{i}: {name} ({p['totalGlobalMem'] / 2**30:.1f} GiB, "
                         f"sm_{p['major']}{p['minor']})")
        rows.append(("gpus", f"{n}" + (f" ({'; '.join(names)})" if names else "")))
    except Exception as e:  # noqa: BLE001 - cudaErrorNoDevice, cudaErrorInsufficientDriver, ...
        rows.append(("gpus", f"none usable ({type(e).__name__}: {str(e)[:200]})"))
    return rows

"""A numpy-backed stand-in for cupy, so that distnet's *device* code paths run on machines
without a GPU.

Why: distnet runs the same math through ``xp`` = numpy or cupy. Code that only ever meets numpy
can mix host and device arrays by accident (``np.asarray(a)`` on a device array, a numpy array
handed to an ``xp`` function, a numpy-only kernel taken for a device array) and nobody notices
until it runs on a GPU. This module provides an array module ``devicelike`` (registered as
``sys.modules["devicelike"]`` and in :data:`distnet.backend.DEVICE_ARRAY_MODULES`, so
``get_array_module`` returns it for its arrays) whose arrays hold their data in private numpy
arrays but refuse every implicit host/device crossing, as cupy does:

* ``np.asarray(d)``, ``np.<function>(d)`` and numpy ufuncs on a device array raise TypeError
  (``__array__`` raises, ``__array_ufunc__ = None``, ``__array_function__`` raises); there is no
  buffer protocol, so ``memoryview(d)`` and MPI buffer specs fail too.
* ``devicelike`` functions, operators, indices and assigned values reject numpy arrays
  (TypeError); python scalars, numpy scalars and 0-d numpy arrays are accepted, as in cupy.
  Two places are *stricter* than cupy, which would copy silently: numpy arrays as indices and
  as the value of ``d[...] = value``.
* Host transfers go only through ``devicelike.asnumpy``, ``d.get()``, ``d.set(host)`` and
  ``devicelike.asarray(host)`` / ``devicelike.array(host)`` (copies, as cupy). Scalar
  conversions (``float(d)``, ``int(d)``, ``bool(d)``, ``d.item()``) are allowed (cupy syncs).
* Operations whose result size depends on the data wait for the device in cupy (the size must
  be read back before the result is allocated): boolean-mask indexing and assignment
  (``d[mask]``, ``d[mask] = v``), ``nonzero`` / ``argwhere`` / ``flatnonzero`` / one-argument
  ``where`` and ``unique``. They work here and are counted as waits (``counts["syncs"]``).
* Reductions and full integer indexing give 0-d device arrays, not numpy scalars (as cupy).
* Only names that cupy also has are exposed (e.g. ``lib.stride_tricks.as_strided`` has no
  ``writeable`` argument, flags have no ``writeable``).
* ``d.__cuda_array_interface__`` (v3) points at the host memory: mpi4py accepts such objects,
  so under a CPU MPI the "CUDA-aware MPI" path runs with these arrays. It raises unless
  ``devicelike.cuda_aware_mpi`` is True (``DeviceLike(cuda_aware_mpi=True)``), so a device
  buffer that reaches an MPI that is not CUDA-aware without host staging fails, as on a GPU.

What it does not emulate: kernels, launch overheads, streams and asynchrony (every operation is
synchronous numpy; ``synchronize`` is a no-op), device memory limits (``cuda.Device().mem_info``
reports the fixed figures of ``devicelike.cuda.mem_info``, which a test may set), multiple
devices, and cupy's own numerics (results are numpy's, bit for bit).

Use: ``from distnet.testing.devicelike import DeviceLike, xp`` (``xp`` is the ``devicelike``
module).
"""
import collections
import operator
import sys
import types

import numpy as np

from .. import backend
from ..backend import Backend
from ..ops.cuda import launch
from . import cuda_emulator

xp = types.ModuleType("devicelike", __doc__.split("\n\n")[0])
#: ``calls``: device array operations (functions, methods, operators, indexing: what would be
#: kernel launches or Python dispatch on a GPU); ``syncs``: device -> host transfers (scalar
#: conversions, ``get``/``asnumpy``, and the data-dependent sizes of boolean-mask indexing,
#: ``nonzero``, ``unique`` and their kin: each one waits for the device). Reset with ``counts.clear()``.
xp.counts = collections.Counter()
#: Whether MPI may read device memory. mpi4py finds a device buffer through
#: ``__cuda_array_interface__``, which raises unless this is True, so a device array that reaches
#: an MPI that is not CUDA-aware (no host staging) fails here as it would crash on a GPU.
#: ``DeviceLike(cuda_aware_mpi=...)`` sets it.
xp.cuda_aware_mpi = False
_IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. "
             "Please use `.get()` to construct a NumPy array explicitly.")


def _unwrap(v):
    """A device array -> its numpy data; a numpy array (not 0-d) -> TypeError; containers
    recursively; anything else unchanged."""
    if type(v) is ndarray:
        return v._a
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return v
        raise TypeError(f"Unsupported type {type(v)} (a host array given to devicelike; "
                        "move it with devicelike.asarray)")
    if type(v) in (tuple, list):
        return type(v)(_unwrap(e) for e in v)
    return v


def _wrap(r):
    """numpy results -> device arrays (views stay views); numpy scalars -> 0-d device arrays."""
    if isinstance(r, np.ndarray):
        return ndarray(r)
    if isinstance(r, np.generic):
        return ndarray(np.asarray(r))
    if type(r) in (tuple, list):
        return type(r)(_wrap(e) for e in r)
    return r


def _function(name, fn=None):
    """``devicelike.<name>``: numpy's function on unwrapped arguments, results wrapped. When an
    ``out=`` device array receives the result, that very object is returned (as cupy)."""
    fn = fn or getattr(np, name)

    def call(*args, **kwargs):
        xp.counts["calls"] += 1
        if name in _SIZE_FROM_DATA or (name == "where" and len(args) + len(kwargs) == 1):
            xp.counts["syncs"] += 1
        res = fn(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()})
        for given in (kwargs.get("out"),) + args:     # out=, or an input handed back unchanged
            if type(given) is ndarray and res is given._a:
                return given
        return _wrap(res)
    call.__name__ = call.__qualname__ = name
    call.__module__ = "devicelike"
    call.__doc__ = f"devicelike.{name}: numpy.{name} on device arrays."
    return call


class _Flags:
    """cupy's flags: c_contiguous, f_contiguous, owndata (no ``writeable``)."""

    def __init__(self, a):
        self.c_contiguous = bool(a.flags.c_contiguous)
        self.f_contiguous = bool(a.flags.f_contiguous)
        self.owndata = bool(a.flags.owndata)

    def __getitem__(self, key):
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous,
                "OWNDATA": self.owndata}[key]


def _index(key):
    key = key if type(key) is tuple else (key,)
    if any(type(k) is ndarray and k.dtype == np.bool_ for k in key):
        xp.counts["syncs"] += 1     # a boolean mask: cupy reads its count of True back first
    return tuple(_unwrap(k) for k in key)


#: Functions (and methods) whose result size depends on the data: cupy waits for the device.
_SIZE_FROM_DATA = {"nonzero", "argwhere", "flatnonzero", "unique"}


class ndarray:
    """A device array: a private numpy array that refuses implicit host conversions."""

    __slots__ = ("_a", "__weakref__")
    __array_ufunc__ = None          # numpy ufuncs and operators with a numpy left side: TypeError

    def __init__(self, data):
        if not isinstance(data, np.ndarray):
            raise TypeError("devicelike.ndarray wraps a numpy array; use devicelike.asarray")
        self._a = data

    # -- refusal of implicit host conversion
    def __array__(self, dtype=None, copy=None):
        raise TypeError(_IMPLICIT)

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError(f"numpy.{func.__name__} on a devicelike array: {_IMPLICIT}")

    # -- explicit transfers
    def get(self, stream=None, order="C", out=None, blocking=True):
        """A numpy copy (into ``out`` if given)."""
        xp.counts["syncs"] += 1
        if out is not None:
            if not isinstance(out, np.ndarray) or out.shape != self.shape or out.dtype != self.dtype:
                raise ValueError("out must be a numpy array of the same shape and dtype")
            np.copyto(out, self._a)
            return out
        return np.array(self._a, order=order, copy=True)

    def set(self, arr, stream=None):
        """Copy the numpy array ``arr`` (same shape and dtype) into this array."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to devicelike.ndarray, got {type(arr)}")
        if arr.shape != self.shape:
            raise ValueError(f"Shape mismatch: {arr.shape} vs {self.shape}")
        if arr.dtype != self.dtype:
            raise TypeError(f"dtype mismatch: {arr.dtype} vs {self.dtype}")
        self._a[...] = arr

    @property
    def data(self):
        """cupy's ``MemoryPointer`` (only ``ptr``, the address of the first element)."""
        return types.SimpleNamespace(ptr=self._a.__array_interface__["data"][0])

    @property
    def __cuda_array_interface__(self):
        if not xp.cuda_aware_mpi:   # what mpi4py reads: only a CUDA-aware MPI may get device memory
            raise TypeError("a device array was handed to an MPI that is not CUDA-aware "
                            "(devicelike.cuda_aware_mpi is False): stage it through host memory")
        a = self._a
        return {"version": 3, "data": (a.__array_interface__["data"][0], False),
                "shape": a.shape, "typestr": a.dtype.str,
                "strides": None if a.flags.c_contiguous else a.strides, "descr": a.dtype.descr,
                "stream": None}

    # -- properties
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: _Flags(self._a))
    T = property(lambda self: ndarray(self._a.T))
    # scalar conversions (cupy copies to the host and synchronises)
    def __bool__(self):
        return bool(self._synced())

    def __float__(self):
        return float(self._synced())

    def __int__(self):
        return int(self._synced())

    def __complex__(self):
        return complex(self._synced())

    def item(self, *args):
        return self._synced().item(*args)

    def tolist(self):
        return self._synced().tolist()

    def _synced(self):
        xp.counts["syncs"] += 1
        return self._a

    # -- containers
    def __len__(self):
        return len(self._a)

    def __iter__(self):
        for row in self._a:
            yield _wrap(row)

    def __getitem__(self, key):
        xp.counts["calls"] += 1
        return _wrap(self._a[_index(key)])

    def __setitem__(self, key, value):
        xp.counts["calls"] += 1
        self._a[_index(key)] = _unwrap(value)

    def __repr__(self):
        return "devicelike." + repr(self._a)

    __str__ = lambda self: str(self._a)

    def __reduce__(self):            # picklable (copy, deepcopy, checkpoints), like cupy arrays
        return _rebuild, (np.array(self._a),)


def _rebuild(a):
    return ndarray(a)


def _method(name):
    def call(self, *args, **kwargs):
        xp.counts["calls"] += 1
        if name in _SIZE_FROM_DATA:
            xp.counts["syncs"] += 1
        res = getattr(self._a, name)(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()})
        return self if res is self._a else _wrap(res)   # e.g. astype(same dtype, copy=False)
    call.__name__ = name
    return call


for _m in ("reshape", "transpose", "ravel", "flatten", "squeeze", "swapaxes", "astype", "copy", "view",
           "sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "all", "any", "cumsum",
           "clip", "dot", "nonzero", "take", "repeat", "diagonal", "conj", "round"):
    setattr(ndarray, _m, _method(_m))


def _fill(self, value):
    xp.counts["calls"] += 1
    self._a.fill(_unwrap(value))


ndarray.fill = _fill


def _binary(op, reflected=False):
    def call(self, other):
        xp.counts["calls"] += 1
        o = _unwrap(other)
        return _wrap(op(o, self._a) if reflected else op(self._a, o))
    return call


def _unary(op):
    def call(self):
        xp.counts["calls"] += 1
        return _wrap(op(self._a))
    return call


def _inplace(op):
    def call(self, other):
        xp.counts["calls"] += 1
        op(self._a, _unwrap(other))
        return self
    return call


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
              "lshift", "rshift"):
    _op = getattr(operator, _name + "_" if _name in ("and", "or") else _name)
    setattr(ndarray, f"__{_name}__", _binary(_op))
    setattr(ndarray, f"__r{_name}__", _binary(_op, reflected=True))
    setattr(ndarray, f"__i{_name}__", _inplace(getattr(operator, f"i{_name}")))
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(ndarray, f"__{_name}__", _binary(getattr(operator, _name)))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(ndarray, f"__{_name}__", _unary(getattr(operator, _name)))
ndarray.__hash__ = None
ndarray.__module__ = "devicelike"
ndarray.__qualname__ = "ndarray"


# ------------------------------------------------------------------------------------ namespace

def asarray(a, dtype=None, order=None, *, blocking=False):
    """``a`` as a device array: a device array is returned as is (or cast); host data (numpy,
    lists, scalars) is copied to the device."""
    if type(a) is ndarray:
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    return ndarray(np.array(_unwrap_host(a), dtype=dtype, order=order or "K", copy=True))


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, *, blocking=False):
    """A new device array from device or host data (always a copy unless ``copy=False`` and no
    conversion is needed)."""
    if type(obj) is ndarray:             # copy=False: no copy if none is needed (cupy's meaning)
        res = np.array(obj._a, dtype=dtype, copy=True if copy else None, order=order, ndmin=ndmin)
        return obj if res is obj._a else ndarray(res)
    return ndarray(np.array(_unwrap_host(obj), dtype=dtype, copy=True, order=order, ndmin=ndmin))


def _unwrap_host(v):
    """Host data may contain device arrays (lists of 0-d arrays); numpy arrays are welcome."""
    if type(v) is ndarray:
        return v._a
    if type(v) in (tuple, list):
        return type(v)(_unwrap_host(e) for e in v)
    return v


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    """A numpy copy of a device array (numpy input: returned as a numpy array, as cupy)."""
    if type(a) is ndarray:
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    if out is not None:
        out[...] = a
        return out
    return np.asarray(a, order=order)


def as_strided(x, shape=None, strides=None):
    """cupy's ``lib.stride_tricks.as_strided`` (no ``writeable`` argument)."""
    if type(x) is not ndarray:
        raise TypeError(f"Unsupported type {type(x)}")
    return ndarray(np.lib.stride_tricks.as_strided(x._a, shape=shape, strides=strides))


def count_nonzero(a, axis=None):
    return _wrap(np.asarray(np.count_nonzero(_unwrap(a), axis=axis)))


def get_array_module(*args):
    return backend.get_array_module(*args)


# Functions cupy has with numpy's signature; each wrapped generically.
_FUNCTIONS = """
empty zeros ones full empty_like zeros_like ones_like full_like arange linspace eye identity
ascontiguousarray asfortranarray copy reshape transpose ravel concatenate stack vstack hstack
split array_split squeeze expand_dims broadcast_to broadcast_arrays moveaxis swapaxes pad flip
tile repeat roll copyto where take take_along_axis diag tril triu atleast_1d atleast_2d atleast_3d
add subtract multiply divide true_divide floor_divide negative power sqrt square exp log log1p
expm1 abs absolute sign maximum minimum fmax fmin clip tanh sin cos greater greater_equal less
less_equal equal not_equal logical_and logical_or logical_not isfinite isnan isinf reciprocal
floor ceil rint around
sum prod mean std var max min amax amin argmax argmin all any cumsum nonzero argwhere flatnonzero
argsort sort unique
allclose array_equal isclose
dot vdot matmul tensordot einsum outer inner
result_type can_cast promote_types
""".split()
for _f in _FUNCTIONS:
    setattr(xp, _f, _function(_f))
for _f in (asarray, array, asnumpy, count_nonzero, get_array_module):
    _f.__module__ = "devicelike"
    setattr(xp, _f.__name__, _f)
for _name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
              "uint32", "uint64", "intp", "bool_", "complex64", "complex128", "dtype", "finfo", "iinfo",
              "newaxis", "inf", "nan", "pi", "e"):
    setattr(xp, _name, getattr(np, _name))
xp.ndarray = ndarray
xp.lib = types.ModuleType("devicelike.lib")
xp.lib.stride_tricks = types.ModuleType("devicelike.lib.stride_tricks")
xp.lib.stride_tricks.as_strided = as_strided


# ------------------------------------------------------------------------------------ cuda

class _Stream:
    """A stream (and, as :class:`_Device`, a context manager) whose work is always done:
    everything here is synchronous."""

    def synchronize(self):
        pass

    def use(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Device(_Stream):
    """``cuda.Device(i)``: there is one device, id 0."""

    def __init__(self, device=None):
        device = 0 if device is None else int(device)
        if device != 0:
            raise RuntimeError(f"cudaErrorInvalidDevice: devicelike has one device, not {device}")
        self.id = device

    @property
    def mem_info(self):
        """``(free, total)`` bytes: ``devicelike.cuda.mem_info`` (no memory is accounted)."""
        return xp.cuda.mem_info

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


def _alloc_pinned_memory(nbytes):
    """Page-locked host memory in cupy; here a plain writable bytes-like buffer."""
    return bytearray(int(nbytes))


xp.cuda = types.ModuleType("devicelike.cuda")
xp.cuda.Stream = _Stream
_Stream.null = _Stream()
xp.cuda.get_current_stream = lambda: _Stream.null
xp.cuda.Device = _Device
xp.cuda.alloc_pinned_memory = _alloc_pinned_memory
#: What ``cuda.Device().mem_info`` reports: a 16 GiB device with 8 GiB free, whose sized conv
#: block budget (:func:`distnet.ops.conv.blocked.cols_budget`) is 256 MiB.
xp.cuda.mem_info = (8 << 30, 16 << 30)
xp.cuda.runtime = types.ModuleType("devicelike.cuda.runtime")
xp.cuda.runtime.getDeviceCount = lambda: 1

sys.modules["devicelike"] = xp
backend.DEVICE_ARRAY_MODULES.add("devicelike")


def _run_kernel(kernel, n, args):
    """A fused CUDA kernel on devicelike arrays: its CUDA C compiled for the host and run
    thread by thread (distnet/testing/cuda_emulator.py); one device call, as one launch."""
    xp.counts["calls"] += 1
    for a in args:
        if isinstance(a, np.ndarray) and a.ndim:
            raise TypeError(f"kernel {kernel.name}: a host array given as a device argument")
    cuda_emulator.run(kernel, n, args, data=lambda a: a._a)


# Where no C++ compiler is found, devicelike arrays take the generic array-module code instead.
if cuda_emulator.compiler() is not None:
    launch.register_runner("devicelike", _run_kernel)


class DeviceLike(Backend):
    """The GPU backend's behaviour on the ``devicelike`` module: ``xp`` is the device module,
    weights are drawn on the host (same RNG stream as :class:`distnet.backend.Backend`) and
    copied, ``to_host`` is ``asnumpy``. ``cuda_aware_mpi`` as in :class:`distnet.backend.GPU`
    (True: device buffers go straight to MPI through ``__cuda_array_interface__``)."""

    name = "devicelike"
    config_types = {"device": int, "cuda_aware_mpi": bool}

    def __init__(self, device=None, cuda_aware_mpi=False, **common):
        super().__init__(**common)
        self.xp = self.cupy = xp
        self.device = device
        self.cuda_aware_mpi = xp.cuda_aware_mpi = bool(cuda_aware_mpi)

    def bind_device(self, local_rank):
        """One device: nothing to pick."""

    def to_host(self, a):
        return xp.asnumpy(a)

    def __repr__(self):
        return f"DeviceLike(rng_seed={self.rng_seed}, dtype={self.dtype.name})"

"""A CUDA C kernel with the launch convention of :mod:`distnet.ops.cuda`, and its launchers.

Source convention (what :class:`Kernel` sources look like)::

    extern "C" __global__ void distnet_name(const long long n, const T* x, T* y, const long long k) {
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
             i += (long long)blockDim.x * gridDim.x) {
            ...   // work item i of n
        }
    }

``T`` is the float type, defined before the source as ``float`` or ``double`` by the dtype of
the call's array arguments, except the parameters a kernel declares ``double`` (its
``float64=`` positions: float64 accumulators such as batch norm's Allreduced sums); integer
parameters are ``long long`` (Python ints), float parameters ``T`` (Python floats); arrays
are C-contiguous device arrays, or views wrapped in :func:`strided`, whose strides the kernel
is given as integer parameters (pointer: the view's first element).

On cupy a kernel is compiled once per dtype (``cupy.RawKernel``, NVRTC; cupy caches the binary
on disk) and launched with :data:`BLOCK` threads per block. It is compiled with
``--fmad=false``: CUDA would otherwise contract ``a * b + c`` into one fused multiply-add (one
rounding instead of two), and an elementwise kernel would no longer give numpy's bits; the
kernels here are memory-bound, so the contraction would not buy speed. Other device array modules launch
through a runner registered with :func:`register_runner` (the test suite registers one that
compiles the same source for the host and runs every thread in turn). :func:`source` writes the
signature and the loop of a kernel from its parameters and its loop body.
"""
import os
import textwrap

import numpy as np

from ...backend import get_array_module

#: ``DISTNET_CUDA_KERNELS=0`` in the environment turns the fused kernels off: the device path then
#: runs the generic array-module code (one launch per tap), which computes the same numbers. For
#: measuring what the kernels save, and for ruling a kernel in or out when a GPU result looks wrong.
#: ``false``, ``no`` and ``off`` (any case) count as ``0`` too, so no spelling of "off" is silently
#: taken for "on".
ENABLED = os.environ.get("DISTNET_CUDA_KERNELS", "1").strip().lower() not in ("0", "false", "no", "off")

#: Threads per block. 256 keeps enough blocks per SM for the small grids of MNIST-sized layers.
BLOCK = 256
#: At most this many blocks: the grid-stride loop covers the rest (a grid far larger than the
#: GPU's resident blocks only adds scheduling).
MAX_BLOCKS = 1 << 16

#: NVRTC options of every kernel (see the module docstring).
COMPILE_OPTIONS = ("--fmad=false",)

_FLOAT_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
#: Array module name -> ``runner(kernel, n, args)``; see :func:`register_runner`.
_RUNNERS = {}


def source(name, params, body, item="i"):
    """The CUDA C of a kernel in the convention above: ``extern "C"`` function ``name`` of ``n``
    work items and ``params`` (C declarations such as ``"const T* x"``; a bare name declares a
    ``long long``), whose grid-stride loop runs the statements ``body`` (a string, or a sequence
    of strings run in turn) for work item ``item``."""
    decls = ", ".join(p if " " in p else f"const long long {p}" for p in ("n",) + tuple(params))
    pieces = (body,) if isinstance(body, str) else body
    body = "\n".join(textwrap.indent(textwrap.dedent(b).strip("\n"), " " * 8) for b in pieces)
    return f"""
extern "C" __global__ void {name}(
        {decls}) {{
    for (long long {item} = blockIdx.x * (long long)blockDim.x + threadIdx.x; {item} < n;
         {item} += (long long)blockDim.x * gridDim.x) {{
{body}
    }}
}}
"""


def strides_of(name, axes="bchw"):
    """The names of the element strides of the array ``name`` that a kernel is given, one per
    axis (``xb, xc, xh, xw`` for ``x``)."""
    return tuple(name + a for a in axes)


class Kernel:
    """One CUDA C kernel: ``name`` (the ``extern "C"`` function) in ``source``.

    Call ``kernel(n, *args)``: ``n`` work items (the grid-stride loop's bound), ``args`` the
    kernel parameters after ``n`` in order: device arrays (all of one float dtype, or integer
    index arrays), Python ints (``long long``) and Python floats (``T``). ``float64``: the
    positions in ``args`` that the source declares ``double`` whatever ``T`` is (float64 arrays,
    or Python floats passed as ``double``).
    """

    #: Every kernel defined, for the suite's compile and emulation checks.
    registry = []

    def __init__(self, name, source, float64=()):
        self.name = name
        self.source = source
        self.float64 = frozenset(float64)
        self._compiled = {}
        Kernel.registry.append(self)

    def source_for(self, dtype):
        """The complete CUDA C source with ``T`` defined for ``dtype`` (float32 or float64)."""
        t = _FLOAT_TYPES.get(np.dtype(dtype))
        if t is None:
            raise TypeError(f"kernel {self.name}: float32 or float64 arrays expected, got {dtype}")
        return f"typedef {t} T;\n{self.source}"

    def float_dtype(self, args):
        """The dtype ``T`` stands for: that of the float array arguments (one dtype)."""
        dtypes = {a.dtype for i, a in enumerate(args)
                  if i not in self.float64 and is_array(a) and a.dtype.kind == "f"}
        if len(dtypes) != 1:
            raise TypeError(f"kernel {self.name}: its float arrays must share one dtype, got "
                            f"{sorted(map(str, dtypes)) or 'none'}")
        return dtypes.pop()

    def scalar_type(self, i, dtype):
        """The numpy type of float parameter ``i`` of ``args``: ``double`` where declared so,
        else ``T`` (``dtype``)."""
        return np.float64 if i in self.float64 else np.dtype(dtype).type

    def __call__(self, n, *args):
        for i, a in enumerate(args):
            if not isinstance(a, Strided) and is_array(a) and not a.flags.c_contiguous:
                raise ValueError(f"kernel {self.name}: argument {i} (shape {a.shape}) is not "
                                 "C-contiguous; a kernel reads raw memory (pass a view whose "
                                 "strides the kernel takes as strided(view))")
        args = tuple(a.array if isinstance(a, Strided) else a for a in args)
        n = int(n)
        if n <= 0:
            return
        xp = get_array_module(*[a for a in args if is_array(a)])
        if xp.__name__ == "cupy":
            self._launch_cupy(xp, n, args)
        else:
            _RUNNERS[xp.__name__](self, n, args)

    def _launch_cupy(self, cupy, n, args):
        dtype = self.float_dtype(args)
        k = self._compiled.get(dtype)
        if k is None:
            k = self._compiled[dtype] = cupy.RawKernel(self.source_for(dtype), self.name,
                                                        options=COMPILE_OPTIONS)
        params = (np.int64(n),) + tuple(
            a if is_array(a) else np.int64(a) if isinstance(a, (int, np.integer))
            else self.scalar_type(i, dtype)(a) for i, a in enumerate(args))
        blocks = min(MAX_BLOCKS, -(-n // BLOCK))
        k((blocks,), (BLOCK,), params)


class Strided:
    """An array argument whose strides the kernel takes itself (see :func:`strided`)."""

    def __init__(self, array):
        self.array = array


def strided(a):
    """Hand the view ``a`` to a kernel that is also given ``element_strides(a)``: no
    contiguity check, the kernel gets the address of ``a``'s first element."""
    return Strided(a)


def element_strides(a):
    """``a``'s strides in elements (what a kernel indexes with)."""
    return tuple(s // a.itemsize for s in a.strides)


def is_array(a):
    """An array argument (a device array), as opposed to a scalar parameter."""
    return not isinstance(a, (int, float, np.generic))


def available(xp):
    """Whether arrays of module ``xp`` get the fused kernels: cupy, or a module with a registered
    runner, unless :data:`ENABLED` is off. numpy never does (its own kernels are the CPU path)."""
    return ENABLED and (xp.__name__ == "cupy" or xp.__name__ in _RUNNERS)


def register_runner(module_name, runner):
    """Launch kernels on arrays of ``module_name`` with ``runner(kernel, n, args)`` (``args`` as
    given to :meth:`Kernel.__call__`). ``runner=None`` removes it."""
    if runner is None:
        _RUNNERS.pop(module_name, None)
    else:
        _RUNNERS[module_name] = runner

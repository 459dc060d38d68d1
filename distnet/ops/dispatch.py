"""Which implementation of an op runs, chosen in one place; and the array-module facts the ops
ask about, one named predicate each.

**Implementations.** Every op has array code, written once against ``xp`` (numpy, or cupy on a
GPU). Some ops also have a fused CUDA kernel (:mod:`distnet.ops.cuda`) that does the same
arithmetic in one launch where the array code would take one per filter tap or window offset.
An op declares both where it is defined, the kernel right under the array code::

    @dispatch.op
    def lcn_mean(w, x_chunk):
        ...                                      # the array code: numpy or cupy through xp

    @lcn_mean.kernel
    def lcn_mean(w, x_chunk):
        return cuda_lcn.mean(w, x_chunk)         # the fused kernel, same arguments

and every caller calls ``lcn_mean`` (the kernel decorator returns the op, as ``property``'s
``setter`` does, so the kernel may take the op's name). :func:`op` runs the kernel only where the arrays' module
launches kernels (:func:`distnet.ops.cuda.launch.available`: cupy, or the device-like module of
:mod:`distnet.testing`, unless ``DISTNET_CUDA_KERNELS`` turns them off; numpy never) and the
kernel's ``when`` (if given) accepts the call's arguments: the float dtypes and memory layouts
the kernel reads. Otherwise the array code runs; so the math of an op is one function, never a
branch inside it.

Why a decorator on functions, and not chainer's ``forward_cpu`` / ``forward_gpu`` methods on a
``Function`` class: distnet's ops are plain functions (and a few methods of activation and cost
objects), and the choice is not CPU against GPU: cupy runs the array code too (ops without a
kernel, kernels switched off, arguments a kernel does not read), so the device's array code is
the same function as the CPU's, and only the optional kernel is declared beside it.

**Array-module facts.** Some choices are not "which implementation" but how the array code
itself goes about its work on one module or the other (numpy's kernel threads, its cache-sized
tiles, its batch-innermost layouts). Each such fact is one predicate below, named after what it
means, so that no op tests a module's name.
"""
import functools

import numpy as np

from ..backend import get_array_module
from .cuda import launch


def op(array_code):
    """Declare ``array_code`` (a function, or a method) as an op's array code; returns the op,
    called with the same arguments, whose ``kernel`` decorator declares its fused kernel."""
    fused = {}

    def kernel(fn=None, *, when=None):
        """Declare ``fn`` (the op's arguments) as the fused kernel; ``when(*args, **kwargs)``,
        if given, says whether it reads these arguments (else the array code runs). Returns
        the op."""
        if fn is None:
            return functools.partial(kernel, when=when)
        fused.update(fn=fn, when=when)
        return call

    @functools.wraps(array_code)
    def call(*args, **kwargs):
        return implementation(args, kwargs)(*args, **kwargs)

    def implementation(args, kwargs):
        """The function that runs for these arguments."""
        fn = fused.get("fn")
        if fn is None or not launch.available(get_array_module(*args, *kwargs.values())):
            return array_code
        when = fused["when"]
        return fn if when is None or when(*args, **kwargs) else array_code

    call.kernel = kernel
    call.array_code = array_code
    call.implementation = lambda *args, **kwargs: implementation(args, kwargs)
    return call


def float_arrays(*arrays):
    """Whether the given arrays (None: not given) share one float dtype, float32 or float64:
    what a kernel's ``T`` can stand for (mixed dtypes take the array code, which promotes)."""
    dtypes = {a.dtype for a in arrays if a is not None}
    return len(dtypes) == 1 and dtypes.pop() in (np.float32, np.float64)


# ------------------------------------------------------------------------ array-module facts

def kernel_threads_apply(xp):
    """Whether work on ``xp`` arrays is shared out over distnet's kernel threads
    (:mod:`distnet.ops.parallel`): numpy, whose loops and BLAS calls release the GIL. A device
    parallelises each call itself; threads would only queue its launches from several places."""
    return xp is np


def cache_tiled(xp):
    """Whether the ops take their CPU kernels for ``xp`` arrays: work cut into tiles and blocks
    sized for a core's cache (the flat-shift and tiled im2col convolutions, max pooling's blocks
    of channels, window elements copied out contiguous so that numpy vectorises its loops). A
    device takes the whole batch at once (fewer, larger launches)."""
    return xp is np


def prefers_chwn(xp):
    """Whether the conv and max-pooling kernels for ``xp`` arrays read and write batch-innermost
    ("CHWN") memory without a copy, so that the layers should hand them arrays held that way:
    numpy's tiled kernels. The device kernels read any layout through its strides."""
    return xp is np


def views_are_read_only(xp):
    """Whether ``xp``'s ``as_strided`` can mark a view read-only (numpy's ``writeable``
    argument; cupy's has none)."""
    return xp is np


def scatter_adds(xp):
    """Whether ``xp`` adds into repeated indices in place (numpy's unbuffered ``add.at``); a
    device module forms such sums as a GEMM with a one-hot matrix instead."""
    return xp is np


def reads_without_waiting(xp):
    """Whether reading an ``xp`` array's values into Python costs no wait for a device: numpy's
    arrays are in host memory."""
    return xp is np

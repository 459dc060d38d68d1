"""Runs the CUDA C of :class:`distnet.ops.cuda.launch.Kernel` on the host, so the very source a
GPU compiles is exercised by the suite on machines without one.

Why: a fused kernel is CUDA C, which numpy cannot run; without this, its indexing would first
meet a test on a GPU. The kernels keep rules that make a serial run faithful (one thread per
output element, no atomics, no shared memory or barriers, grid-stride loops), so the source is
compiled by the host's C++ compiler with a prelude that defines ``__global__``, ``threadIdx``,
``blockIdx``, ``blockDim`` and ``gridDim``, and every (block, thread) of a small grid is run in
turn: :data:`GRID` blocks of :data:`BLOCK` threads, so each thread's grid-stride loop visits
several work items, as on a GPU, in an order that changes from launch to launch.

Compiled libraries are cached per source and dtype in a per-user temporary folder (written
atomically: parallel MPI ranks may compile the same kernel at once).

:func:`compiler` is None when no C++ compiler is found; the suite then runs the generic
array-module code on the device-like module instead, and the kernel tests skip.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from ..ops.cuda.launch import is_array

#: The emulated launch: GRID blocks of BLOCK threads (odd sizes, so that a loop stepping by the
#: wrong stride, or one starting at the wrong offset, misses or repeats items).
GRID, BLOCK = 3, 5

_PRELUDE = r"""
#include <cmath>
#include <cstdint>
using namespace std;
struct distnet_dim3 { unsigned int x, y, z; };
static distnet_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};
static distnet_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
extern "C" void distnet_emulator_set(unsigned int b, unsigned int t, unsigned int nb, unsigned int nt) {
    blockIdx.x = b; threadIdx.x = t; gridDim.x = nb; blockDim.x = nt;
}
#define __global__
#define __device__ static inline
#define __forceinline__ inline
#define __restrict__ __restrict
"""

_libs = {}


def compiler():
    """The host C++ compiler's path (``$CXX``, g++ or c++), or None."""
    for c in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


def _library(kernel, dtype):
    key = (kernel.name, np.dtype(dtype).name)
    lib = _libs.get(key)
    if lib is not None:
        return lib
    source = _PRELUDE + kernel.source_for(dtype)
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), f"distnet-cuda-emulator-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    so = os.path.join(folder, f"{kernel.name}-{key[1]}-{digest}.so")
    if not os.path.exists(so):
        fd, src = tempfile.mkstemp(suffix=".cpp", dir=folder)
        with os.fdopen(fd, "w") as f:
            f.write(source)
        tmp = src[:-4] + ".so"
        r = subprocess.run([compiler(), "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-Wall", "-Werror",
                            "-Wno-unused-variable", "-o", tmp, src], capture_output=True, text=True)
        os.unlink(src)
        if r.returncode:
            raise RuntimeError(f"kernel {kernel.name} ({key[1]}) does not compile on the host:\n"
                               f"{r.stderr}")
        os.replace(tmp, so)
    lib = _libs[key] = ctypes.CDLL(so)
    return lib


def run(kernel, n, args, data=lambda a: a):
    """Run ``kernel`` over ``n`` work items with ``args`` (numpy arrays, or device arrays whose
    numpy data ``data(a)`` gives), every (block, thread) of the emulated grid in turn."""
    dtype = kernel.float_dtype([data(a) if is_array(a) else a for a in args])
    lib = _library(kernel, dtype)
    ctypes_of = {np.float32: ctypes.c_float, np.float64: ctypes.c_double}
    params = [ctypes.c_longlong(n)]
    for i, a in enumerate(args):
        if is_array(a):
            params.append(ctypes.c_void_p(data(a).ctypes.data))   # first element, as cupy
        elif isinstance(a, (int, np.integer)):
            params.append(ctypes.c_longlong(int(a)))
        else:
            params.append(ctypes_of[kernel.scalar_type(i, dtype)](a))
    fn = getattr(lib, kernel.name)
    global _launches
    _launches += 1
    # Threads run in another order at every launch (forward, backward, interleaved): a kernel
    # whose threads read what another thread writes gives results that depend on the order
    # here, as it would on a GPU, and fails the tests that compare it with numpy.
    order = [(b, t) for b in range(GRID) for t in range(BLOCK)]
    order = _ORDERS[_launches % len(_ORDERS)](order)
    for b, t in order:
        lib.distnet_emulator_set(b, t, GRID, BLOCK)
        fn(*params)


_launches = 0
_ORDERS = (lambda o: o, lambda o: o[::-1], lambda o: o[1::2] + o[::2])

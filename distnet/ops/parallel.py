"""Thread-level parallelism for the numpy kernels whose work splits over images.

numpy runs copies and element-wise loops on one thread and only its BLAS calls use several.
A kernel that loops over images (the flat-shift conv, NCHW max pooling) can instead give each
of ``T`` Python threads a share of the images (numpy releases the GIL inside its loops and BLAS
calls), with BLAS itself held to one thread meanwhile so the two kinds of threads do not fight
over the cores. ``T`` is the BLAS thread count the process was started with
(``OPENBLAS_NUM_THREADS`` etc.), read once through OpenBLAS's own ``*_get_num_threads``.

When the BLAS is not an OpenBLAS that can be found (another BLAS, cupy), or ``T == 1``,
:func:`parallel_map` simply runs the work on the calling thread. ``DISTNET_KERNEL_THREADS``
overrides ``T`` (``1`` turns the threading off).
"""
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

_state = {"probed": False, "get": None, "set": None, "threads": 1, "pool": None}
_lock = threading.Lock()
_local = threading.local()   # .inside: this thread is running a share (no nested threading)


def _probe():
    """Find OpenBLAS's get/set_num_threads in the loaded libraries (numpy's bundled one has a
    ``scipy_`` prefix and a ``64_`` suffix); remember the thread count."""
    if _state["probed"]:
        return
    _state["probed"] = True
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        paths = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pre, suf in (("scipy_", "64_"), ("", ""), ("", "64_"), ("scipy_", "")):
            get = getattr(lib, f"{pre}openblas_get_num_threads{suf}", None)
            put = getattr(lib, f"{pre}openblas_set_num_threads{suf}", None)
            if get is not None and put is not None:
                get.restype = ctypes.c_int
                put.argtypes = [ctypes.c_int]
                _state.update(get=get, set=put, threads=max(1, int(get())))
                break
        if _state["get"] is not None:
            break
    env = os.environ.get("DISTNET_KERNEL_THREADS")
    if env and env.isdigit() and int(env) >= 1:
        _state["threads"] = int(env) if _state["set"] is not None else 1


def kernel_threads():
    """Number of threads :func:`parallel_map` uses (1: no threading, and inside a share)."""
    _probe()
    return 1 if getattr(_local, "inside", False) else _state["threads"]


@contextmanager
def _one_blas_thread():
    put, get = _state["set"], _state["get"]
    before = get()
    put(1)
    try:
        yield
    finally:
        put(before)


def parallel_map(fn, items, xp=None):
    """``[fn(i) for i in items]`` spread over :func:`kernel_threads` threads (contiguous shares,
    in order), BLAS on one thread meanwhile. ``fn`` must be safe to run concurrently on
    different items (its own scratch buffers per share: see :func:`shares`). numpy only."""
    items = list(items)
    T = kernel_threads()
    if T <= 1 or len(items) <= 1 or (xp is not None and xp.__name__ != "numpy"):
        return [fn(i) for i in items]
    with _lock:
        if _state["pool"] is None:
            _state["pool"] = ThreadPoolExecutor(max_workers=T, thread_name_prefix="distnet-kernel")
        pool = _state["pool"]
    def share(item):
        _local.inside = True
        try:
            return fn(item)
        finally:
            _local.inside = False

    with _one_blas_thread():
        return list(pool.map(share, items))


def shares(n, xp=None):
    """``[(share index, range)]``: ``range(n)`` cut into :func:`kernel_threads` contiguous shares
    (one share when threading is off or inside a share)."""
    T = kernel_threads() if xp is None or xp.__name__ == "numpy" else 1
    T = max(1, min(T, n))
    base, extra = divmod(n, T)
    out, start = [], 0
    for s in range(T):
        size = base + (1 if s < extra else 0)
        out.append((s, range(start, start + size)))
        start += size
    return out


#: GEMMs smaller than this many multiply-adds run on the calling thread.
MIN_PARALLEL_MACS = 1 << 20


def matmul(a, b, out=None):
    """``a @ b`` (2-D, or stacks of matrices with equal leading shapes) with the work cut into
    :func:`kernel_threads` shares, each a one-thread BLAS call on its own Python thread: a stack
    by its matrices; a 2-D product by the columns of ``b`` or the rows of ``a`` (whichever
    operand is larger is then read once in total), or, when both output sides are small and the
    inner dimension long (a weight gradient), by the inner dimension, the partial products being
    added in share order. Same result as ``xp.matmul`` up to summation order; small products
    are not split."""
    from ..backend import get_array_module
    xp = get_array_module(a, b)
    T = kernel_threads() if xp.__name__ == "numpy" else 1
    M, K = a.shape[-2:]
    N = b.shape[-1]
    stack = a.shape[:-2]
    macs = M * K * N * (int(__import__("numpy").prod(stack)) if stack else 1)
    if T <= 1:
        return xp.matmul(a, b, out=out)
    if macs < MIN_PARALLEL_MACS:
        # One BLAS thread here too: a multi-threaded call would leave OpenBLAS's workers
        # spinning on the cores the kernel threads need next.
        with _one_blas_thread():
            return xp.matmul(a, b, out=out)
    if out is None:
        out = xp.empty(stack + (M, N), dtype=xp.result_type(a.dtype, b.dtype))
    if stack:
        parts = _split_axis(a.shape[0], xp)

        def run(r):
            xp.matmul(a[r], b[r], out=out[r])
    elif max(M, N) < 8 * T and K >= 64 * max(M, N):
        parts = _split_axis(K, xp)
        partial = [None] * len(parts)

        def run(r):
            partial[parts.index(r)] = xp.matmul(a[:, r], b[r])
        parallel_map(run, parts, xp)
        out[...] = partial[0]
        for p in partial[1:]:
            out += p
        return out
    elif N >= M:
        parts = _split_axis(N, xp)

        def run(r):
            xp.matmul(a, b[:, r], out=out[:, r])
    else:
        parts = _split_axis(M, xp)

        def run(r):
            xp.matmul(a[r], b, out=out[r])
    parallel_map(run, parts, xp)
    return out


#: Copies smaller than this many elements run on the calling thread.
MIN_PARALLEL_ELEMENTS = 1 << 17


def _split_axis(n, xp):
    return [slice(r.start, r.stop) for _, r in shares(n, xp) if len(r)]


def copyto(dst, src, axis=0):
    """``dst[...] = src`` (same shapes) cut along ``axis`` into kernel-thread shares."""
    from ..backend import get_array_module
    xp = get_array_module(dst, src)
    if kernel_threads() <= 1 or dst.size < MIN_PARALLEL_ELEMENTS or xp.__name__ != "numpy":
        xp.copyto(dst, src)
        return dst
    idx = (slice(None),) * axis

    def run(sl):
        xp.copyto(dst[idx + (sl,)], src[idx + (sl,)])
    parallel_map(run, _split_axis(dst.shape[axis], xp), xp)
    return dst


def run_split(fn, n, xp=None, size=None):
    """``fn(slice)`` for kernel-thread shares of ``range(n)`` (one call on the calling thread
    when threading is off or ``size`` elements is small)."""
    if kernel_threads() <= 1 or (size is not None and size < MIN_PARALLEL_ELEMENTS) or \
            (xp is not None and xp.__name__ != "numpy"):
        fn(slice(0, n))
        return
    parallel_map(fn, _split_axis(n, xp), xp)


class SubWorkspace:
    """The names of ``work`` with a prefix: the scratch space of one share of a parallel loop."""

    def __init__(self, work, prefix):
        self.work, self.prefix = work, prefix

    def get(self, name, *args, **kwargs):
        return self.work.get(self.prefix + name, *args, **kwargs)


def sub_workspace(work, prefix):
    return None if work is None else SubWorkspace(work, prefix)

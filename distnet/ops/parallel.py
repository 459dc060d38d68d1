"""Thread-level parallelism for the numpy kernels whose work splits over images.

numpy runs copies and element-wise loops on one thread and only its BLAS calls use several.
A kernel that loops over images (the flat-shift conv, NCHW max pooling) can instead give each
of ``T`` Python threads a share of the images (numpy releases the GIL inside its loops and BLAS
calls), with BLAS itself held to one thread meanwhile so the two kinds of threads do not fight
over the cores.

``T`` comes from the rank's thread plan (:mod:`distnet.ops.threads`, applied by a run through
:func:`configure`); in a process where no plan was applied (a test, a benchmark calling the ops)
it is the BLAS thread count the process started with, as threadpoolctl reports it, or
``DISTNET_KERNEL_THREADS`` (``1`` turns the threading off). BLAS is driven through
threadpoolctl's controllers of the BLAS libraries loaded in this process (OpenBLAS, MKL, BLIS);
where none is found, :func:`parallel_map` runs the work on the calling thread.
"""
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from ..backend import get_array_module
from .dispatch import kernel_threads_apply

_state = {"probed": False, "blas": [], "threads": 1, "pool": None, "plan": None}
_lock = threading.Lock()
_local = threading.local()   # .inside: this thread is running a share (no nested threading)


def _blas_controllers():
    """threadpoolctl's controllers of the BLAS libraries loaded now (empty without it)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return []
    import numpy  # noqa: F401 - its BLAS must be loaded to be found
    return [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]


def _probe():
    """Find the BLAS libraries; without a plan, T = their thread count now (or the variable)."""
    if _state["probed"]:
        return
    _state["probed"] = True
    blas = _blas_controllers()
    _state["blas"] = blas
    threads = max([c.get_num_threads() or 1 for c in blas] or [1])
    env = os.environ.get("DISTNET_KERNEL_THREADS")
    if env and env.isdigit() and int(env) >= 1:
        threads = int(env)
    _state["threads"] = threads if blas else 1


def configure(plan):
    """Apply a :class:`~distnet.ops.threads.ThreadPlan`: every BLAS library to ``plan.blas``
    threads, the kernel threads to ``plan.kernel`` (1 where no BLAS library can be held to one
    thread while they run)."""
    _probe()
    with _lock:
        for c in _state["blas"]:
            c.set_num_threads(plan.blas)
        threads = plan.kernel if _state["blas"] else 1
        if threads != _state["threads"] and _state["pool"] is not None:
            _state["pool"].shutdown(wait=True)
            _state["pool"] = None
        _state["threads"] = threads
        _state["plan"] = plan


def current_plan():
    """The plan last applied by :func:`configure` (None if none was)."""
    return _state["plan"]


def kernel_threads():
    """Number of threads :func:`parallel_map` uses (1: no threading, and inside a share)."""
    _probe()
    return 1 if getattr(_local, "inside", False) else _state["threads"]


@contextmanager
def _one_blas_thread():
    blas = _state["blas"]
    before = [c.get_num_threads() for c in blas]
    for c in blas:
        c.set_num_threads(1)
    try:
        yield
    finally:
        for c, n in zip(blas, before):
            c.set_num_threads(n)


def parallel_map(fn, items, xp=None):
    """``[fn(i) for i in items]`` spread over :func:`kernel_threads` threads (contiguous shares,
    in order), BLAS on one thread meanwhile. ``fn`` must be safe to run concurrently on
    different items (its own scratch buffers per share: see :func:`shares`). numpy only."""
    items = list(items)
    T = kernel_threads()
    if T <= 1 or len(items) <= 1 or (xp is not None and not kernel_threads_apply(xp)):
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
    T = kernel_threads() if xp is None or kernel_threads_apply(xp) else 1
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
    xp = get_array_module(a, b)
    T = kernel_threads() if kernel_threads_apply(xp) else 1
    M, K = a.shape[-2:]
    N = b.shape[-1]
    stack = a.shape[:-2]
    macs = M * K * N * (math.prod(stack) if stack else 1)
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
    xp = get_array_module(dst, src)
    if kernel_threads() <= 1 or dst.size < MIN_PARALLEL_ELEMENTS or not kernel_threads_apply(xp):
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
            (xp is not None and not kernel_threads_apply(xp)):
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

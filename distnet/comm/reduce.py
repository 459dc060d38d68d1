"""Sum reductions for gradient buckets and metrics: every participating rank gets the result
(Allreduce, never reduce-to-root + bcast).

:func:`allreduce_sum` blocks; :func:`allreduce_sum_start` starts the same reduction
nonblocking (``Iallreduce``) and returns a :class:`PendingSum` to :meth:`~PendingSum.wait` on,
so that a model can start a gradient bucket's sum as soon as the backward of its layers is done
and overlap it with the backward of the layers below (see :class:`PendingSum`).
"""
import time

import numpy as np

from ..backend import get_array_module
from .delay import blocking_delay, sleep_until, wire_ready_at
from .serial import in_place
from .staging import MessageBuffers
from .traffic import TRAFFIC

# Flat reduction buffers, one per (size, dtype, array module, host staging): planned by the first
# call, reused (as MessageBuffers, so staged ones keep their pinned host mirror).
_FLAT = {}


def _flat_buffer(xp, size, dtype, host_staging):
    key = (int(size), str(dtype), xp.__name__, bool(host_staging))
    buf = _FLAT.get(key)
    if buf is None:
        if len(_FLAT) > 64:  # many bucket shapes (tests): do not grow without bound
            _FLAT.clear()
        buf = _FLAT[key] = MessageBuffers([xp.empty(int(size), dtype=dtype)], host_staging)
    return buf


def _bucket_module(arrays, kind, caller):
    """The array module of a bucket (one dtype, else ValueError naming ``caller``); counts its
    bytes under ``kind`` when traffic is being counted."""
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise ValueError(f"{caller} needs one dtype per bucket, got {sorted(map(str, dtypes))}")
    if TRAFFIC.enabled:
        TRAFFIC.record(kind, sum(a.nbytes for a in arrays))
    return get_array_module(*arrays)


def allreduce_sum(arrays, comm, host_staging=False, kind="allreduce_act"):
    """Sum each array of ``arrays`` over the ranks of ``comm``, in place, with ONE Allreduce.

    arrays : list of ``xp`` arrays of one dtype (any shapes, e.g. the gradients of a bucket);
        every rank passes the same shapes in the same order.
    comm : communicator whose ranks hold the partial sums (``Topology.grad`` for replicated
        weights); collective over all of its ranks. Size 1: no communication at all.
    host_staging : True to reduce a pinned host mirror of the device buffer (an MPI that is not
        CUDA-aware: ``Backend.host_staging``); False reduces the buffer itself.
    kind : what the traffic counter (:mod:`~distnet.comm.traffic`) files the bytes under:
        ``allreduce_act`` (activation sums) or ``allreduce_grad`` (gradient buckets).

    The arrays are packed into one flat buffer (allocated once per bucket size and reused),
    reduced in place, and unpacked back into the same array objects, which are also returned
    (as a list). A bucket of one contiguous array is reduced in place without packing (unless
    staged: the flat buffer then carries the planned host mirror).
    """
    arrays = list(arrays)
    if not arrays or comm.Get_size() == 1:
        return arrays
    xp = _bucket_module(arrays, kind, "allreduce_sum")
    delay = blocking_delay(sum(a.nbytes for a in arrays)) if kind == "allreduce_grad" else 0.0
    if len(arrays) == 1 and arrays[0].flags.c_contiguous and not host_staging:
        comm.Allreduce(in_place(comm), MessageBuffers(arrays, False).outgoing()[0])
        if delay:
            time.sleep(delay)
        return arrays
    flat = _flat_buffer(xp, sum(a.size for a in arrays), arrays[0].dtype, host_staging)
    _pack(arrays, flat.arrays[0])
    comm.Allreduce(in_place(comm), flat.outgoing()[0])  # mpi4py: op defaults to SUM
    if delay:
        time.sleep(delay)
    flat.arrived()
    _unpack(flat.arrays[0], arrays)
    return arrays


def _pack(arrays, packed):
    offset = 0
    for a in arrays:
        packed[offset:offset + a.size].reshape(a.shape)[...] = a
        offset += a.size


def _unpack(packed, arrays):
    offset = 0
    for a in arrays:
        a[...] = packed[offset:offset + a.size].reshape(a.shape)
        offset += a.size


# Flat buffers of sums in flight: a free list per (size, dtype, array module, staging), so two
# buckets of one size can be in flight at once; a buffer returns to its list when its sum is
# waited for (planned by the first step, reused by every later one).
_FREE = {}


class PendingSum:
    """A gradient bucket's sum in flight (:func:`allreduce_sum_start`).

    :meth:`wait` completes it and leaves the sums in the arrays that were passed (the same
    objects, as :func:`allreduce_sum` does); :meth:`test` lets the MPI library progress it and
    says whether it is done. The arrays must not be read or written between start and wait.

    Progress: MPICH and Open MPI move a nonblocking collective forward only inside MPI calls of
    the process, unless an asynchronous progress thread is enabled (MPICH:
    ``MPIR_CVAR_ASYNC_PROGRESS=1``, which needs ``MPI_THREAD_MULTIPLE``, mpi4py's default). A
    model that overlaps should therefore call :func:`progress` (or each pending sum's
    :meth:`test`) between the layers of its backward; the sums of one bucket are the same as
    :func:`allreduce_sum`'s whatever the timing (same buffer, same operation).
    """

    def __init__(self, arrays, request, flat, key, ready_at):
        self.arrays, self._request, self._flat, self._key = arrays, request, flat, key
        self._ready_at = ready_at
        self.done = request is None

    def test(self):
        """Let MPI progress this sum; True once it is complete (not yet unpacked: :meth:`wait`)."""
        if self._request is None:
            return True
        return bool(self._request.Test())

    def wait(self):
        """Complete the sum; returns the arrays (now holding the sums). Idempotent."""
        if self.done:
            return self.arrays
        self._request.Wait()
        if self._ready_at is not None:         # an injected slow transport (comm.delay)
            sleep_until(self._ready_at)
        if self._flat is not None:
            self._flat.arrived()
            _unpack(self._flat.arrays[0], self.arrays)
            _FREE.setdefault(self._key, []).append(self._flat)
        self.done = True
        _PENDING.discard(self)
        return self.arrays


_PENDING = set()


def allreduce_sum_start(arrays, comm, host_staging=False, kind="allreduce_grad"):
    """Start :func:`allreduce_sum` of ``arrays`` over ``comm`` without waiting (one
    ``Iallreduce``); returns a :class:`PendingSum`. Collective over the ranks of ``comm``: every
    rank starts the same buckets in the same order (the MPI standard matches nonblocking
    collectives by their order on a communicator). Size 1 or no arrays: a sum that is already
    complete.

    The bucket is packed into a flat buffer now (its own, from a free list: several buckets may
    be in flight), so the caller may go on computing other layers; the arrays receive the sums
    in :meth:`PendingSum.wait`. ``kind``: as in :func:`allreduce_sum` (default: a gradient
    bucket; only those get the injected delay of :mod:`~distnet.comm.delay`).
    """
    arrays = list(arrays)
    started = time.perf_counter()
    if not arrays or comm.Get_size() == 1:
        return PendingSum(arrays, None, None, None, None)
    xp = _bucket_module(arrays, kind, "allreduce_sum_start")
    size = sum(a.size for a in arrays)
    key = (int(size), str(arrays[0].dtype), xp.__name__, bool(host_staging))
    free = _FREE.get(key)
    flat = free.pop() if free else MessageBuffers([xp.empty(int(size), dtype=arrays[0].dtype)],
                                                  host_staging)
    _pack(arrays, flat.arrays[0])
    request = comm.Iallreduce(in_place(comm), flat.outgoing()[0])
    ready_at = wire_ready_at(started, flat.arrays[0].nbytes) if kind == "allreduce_grad" else None
    pending = PendingSum(arrays, request, flat, key, ready_at)
    _PENDING.add(pending)
    return pending


def progress():
    """Let MPI progress every sum in flight (one ``Test`` each); returns how many are done.
    Cheap: call it between layers of a backward that overlaps its gradient sums."""
    return sum(p.test() for p in list(_PENDING))


def allreduce_scalars(values, comm):
    """Sum a list of python numbers over ``comm`` (one float64 Allreduce) -> list of floats.

    Collective over all ranks of ``comm``; each rank passes the same number of values.
    """
    buf = np.array([float(v) for v in values], dtype=np.float64)
    if buf.size and comm.Get_size() > 1:
        comm.Allreduce(in_place(comm), buf)
    return buf.tolist()

"""Sum reductions for gradient buckets and metrics: every participating rank gets the result
(Allreduce, never reduce-to-root + bcast)."""
import numpy as np

from ..backend import get_array_module
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
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise ValueError(f"allreduce_sum needs one dtype per bucket, got {sorted(map(str, dtypes))}")
    xp = get_array_module(*arrays)
    if TRAFFIC.enabled:
        TRAFFIC.record(kind, sum(a.nbytes for a in arrays))
    if len(arrays) == 1 and arrays[0].flags.c_contiguous and not host_staging:
        comm.Allreduce(in_place(comm), MessageBuffers(arrays, False).outgoing()[0])
        return arrays
    flat = _flat_buffer(xp, sum(a.size for a in arrays), arrays[0].dtype, host_staging)
    packed = flat.arrays[0]
    offset = 0
    for a in arrays:
        packed[offset:offset + a.size].reshape(a.shape)[...] = a
        offset += a.size
    comm.Allreduce(in_place(comm), flat.outgoing()[0])  # mpi4py: op defaults to SUM
    flat.arrived()
    offset = 0
    for a in arrays:
        a[...] = packed[offset:offset + a.size].reshape(a.shape)
        offset += a.size
    return arrays


def allreduce_scalars(values, comm):
    """Sum a list of python numbers over ``comm`` (one float64 Allreduce) -> list of floats.

    Collective over all ranks of ``comm``; each rank passes the same number of values.
    """
    buf = np.array([float(v) for v in values], dtype=np.float64)
    if buf.size and comm.Get_size() > 1:
        comm.Allreduce(in_place(comm), buf)
    return buf.tolist()

"""Sum reductions for gradient buckets and metrics: every participating rank gets the result
(Allreduce, never reduce-to-root + bcast)."""
import numpy as np

from ..backend import get_array_module
from .global_array import _to_mpi_buffer
from .serial import in_place


def allreduce_sum(arrays, comm):
    """Sum each array of ``arrays`` over the ranks of ``comm``, in place, with ONE Allreduce.

    arrays : list of ``xp`` arrays of one dtype (any shapes, e.g. the gradients of a bucket);
        every rank passes the same shapes in the same order.
    comm : communicator whose ranks hold the partial sums (``Topology.grad`` for replicated
        weights); collective over all of its ranks. Size 1: no communication at all.

    The arrays are packed into one flat buffer, reduced in place, and unpacked back into the same
    array objects, which are also returned (as a list).
    """
    arrays = list(arrays)
    if not arrays or comm.Get_size() == 1:
        return arrays
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise ValueError(f"allreduce_sum needs one dtype per bucket, got {sorted(map(str, dtypes))}")
    xp = get_array_module(*arrays)
    flat = xp.concatenate([a.reshape(-1) for a in arrays])
    comm.Allreduce(in_place(comm), _to_mpi_buffer(flat))  # mpi4py: op defaults to SUM
    offset = 0
    for a in arrays:
        a[...] = flat[offset:offset + a.size].reshape(a.shape)
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

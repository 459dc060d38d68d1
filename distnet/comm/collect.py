"""Collecting host arrays on one rank (checkpoints): a small pickled header per rank, then the
arrays themselves as typed messages.

``comm.gather`` of numpy arrays pickles them: the root then holds every rank's pickle and its
unpickled copy at once, and the bulk is copied twice more. Here only the header (shapes, dtypes
and the caller's small metadata) is pickled; the arrays go as ``Send``/``Recv`` of their
buffers (mpi4py uses MPI-4's large-count calls where a message exceeds 2**31 elements), and the
root hands each rank's arrays to a callback as they arrive, so it can place them and let them go.

This module never imports mpi4py: it calls the communicator's methods.
"""
import numpy as np

_TAG = 0x5C0


def gather_to_root(comm, meta, arrays, receive, root=0):
    """Hand every rank's ``(meta, arrays)`` to ``receive`` on ``root``, in rank order.

    comm : communicator; collective over all of its ranks (a
        :class:`~distnet.comm.serial.SerialComm` too: then only my own arrays).
    meta : small picklable data of this rank (indices, names).
    arrays : list of host numpy arrays, or None entries (sent as None).
    receive : ``receive(rank, meta, arrays)``, called on ``root`` only, once per rank (my own
        arrays are passed as they are, the others' are fresh arrays).
    """
    header = (meta, [None if a is None else (a.shape, a.dtype.str) for a in arrays])
    headers = comm.gather(header, root=root)
    if comm.Get_rank() != root:
        for a in arrays:
            if a is not None:
                comm.Send(np.ascontiguousarray(a), dest=root, tag=_TAG)
        return
    for r, (their_meta, shapes) in enumerate(headers):
        if r == root:
            receive(r, meta, list(arrays))
            continue
        got = []
        for spec in shapes:
            if spec is None:
                got.append(None)
                continue
            buf = np.empty(spec[0], dtype=np.dtype(spec[1]))
            comm.Recv(buf, source=r, tag=_TAG)
            got.append(buf)
        receive(r, their_meta, got)

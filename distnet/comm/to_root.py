"""Streaming pieces of arrays to one rank in an agreed order (``distnet predict``'s masks: the
tiles of one image, band by band), so that the root holds one piece at a time.

Every rank knows the plan: the ``(source rank, key, specs)`` of each piece in the order the root
consumes them. The sources send their pieces in plan order with ``Send`` of their buffers (no
pickles, no headers: the specs say shapes and dtypes); MPI keeps the order of the messages
between two ranks, so the root's ``Recv`` in plan order matches them, and no rank waits on
another but the root. This module never imports mpi4py: it calls the communicator's methods.
"""
import numpy as np

_TAG = 0x5C1


def stream_to_root(comm, plan, mine, receive, root=0):
    """Hand each piece of ``plan`` to ``receive`` on ``root``, in plan order.

    comm : communicator; collective over the ranks the plan names (a
        :class:`~distnet.comm.serial.SerialComm` too).
    plan : list of ``(rank, key, specs)``, the same on every rank; ``specs``: ``[(shape,
        dtype), ...]`` of the arrays of piece ``key``, held by ``rank`` of ``comm``.
    mine : ``mine(key)``: this rank's arrays of piece ``key`` (called for its own pieces only,
        in plan order).
    receive : ``receive(key, arrays)``, called on ``root`` only.
    """
    me = comm.Get_rank()
    for rank, key, specs in plan:
        if rank == me:
            arrays = mine(key)
            if me == root:
                receive(key, arrays)
            else:
                for a, (shape, dtype) in zip(arrays, specs):
                    comm.Send(np.ascontiguousarray(a, dtype=dtype).reshape(shape), dest=root, tag=_TAG)
        elif me == root:
            got = []
            for shape, dtype in specs:
                buf = np.empty(shape, dtype=dtype)
                comm.Recv(buf, source=rank, tag=_TAG)
                got.append(buf)
            receive(key, got)

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


def serve_from_root(comm, fetch, wanted, into, root=0):
    """One array, read on ``root`` only, and every rank's piece of it sent to that rank: the
    inverse of :func:`gather_to_root` (a single-file checkpoint restored on many ranks: no rank
    but ``root`` ever holds more than its own piece).

    comm : communicator; collective over all of its ranks (a
        :class:`~distnet.comm.serial.SerialComm` too).
    fetch : ``fetch()`` on ``root``: the whole array (host numpy). What it raises reaches every
        rank: a :class:`~distnet.errors.DistnetError` as is, anything else as a
        :class:`~distnet.comm.abort.RemoteError` naming ``root``.
    wanted : on ``root``, ``{rank: index}`` of every rank that wants a piece (``...``: all of it),
        ``root`` included; ignored elsewhere.
    into : this rank's buffer for its piece (C-contiguous, the piece's shape and the array's
        dtype), None when it wants none. Returns ``into``, filled.

    One small broadcast (the outcome, and whether every rank wants the whole array: then one
    typed ``Bcast``), else one typed ``Send`` per rank that wants a piece.
    """
    from ..errors import DistnetError
    from .abort import RemoteError
    whole, told = None, None
    if comm.Get_rank() == root:
        try:
            whole = fetch()
            everyone = len(wanted) == comm.Get_size() and all(i is Ellipsis for i in wanted.values())
            told = ("ok", "bcast" if everyone else "send")
        except Exception as e:  # noqa: BLE001 - re-raised below, after the others are told
            error, told = e, ("error", e if isinstance(e, DistnetError) else f"{type(e).__name__}: {e}")
    told = comm.bcast(told, root=root) if comm.Get_size() > 1 else told
    if told[0] == "error":
        if comm.Get_rank() == root:
            raise error
        raise told[1] if isinstance(told[1], DistnetError) else RemoteError([(root, told[1])])
    if comm.Get_size() == 1:
        if into is not None:
            into[...] = whole[wanted[root]].reshape(into.shape)
        return into
    if told[1] == "bcast":
        if comm.Get_rank() == root:
            into[...] = whole.reshape(into.shape)
        comm.Bcast(into, root=root)
        return into
    if comm.Get_rank() != root:
        if into is not None:
            comm.Recv(into, source=root, tag=_TAG + 1)
        return into
    for rank, index in sorted(wanted.items()):
        part = whole[index]
        if rank == root:
            into[...] = part.reshape(into.shape)
        else:
            comm.Send(np.ascontiguousarray(part), dest=rank, tag=_TAG + 1)
    return into

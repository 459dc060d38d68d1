"""Read on one rank, hand the result to all: for files only world rank 0 can see (no shared
filesystem: a checkpoint on rank 0's node-local disk).

This module never imports mpi4py: it calls the communicator's methods.
"""
from ..errors import DistnetError
from .abort import RemoteError


def read_on_root(comm, read, root=0):
    """``read()`` on ``root`` only; every rank of ``comm`` returns its result (one ``bcast``,
    pickled: for checkpoints and headers, not for bulk data streams).

    If ``read`` raises on ``root``, root re-raises it and every other rank raises the same
    :class:`~distnet.errors.DistnetError` (a user error: one line on every rank), or for any
    other exception :class:`~distnet.comm.abort.RemoteError` naming root and the message, so
    that the whole job stops with the same story. Collective over ``comm`` (a serial stand-in
    too).
    """
    if comm.Get_size() == 1:
        return read()
    if comm.Get_rank() == root:
        try:
            result, error = read(), None
        except Exception as e:  # noqa: BLE001 - re-raised below, after the others are told
            result, error = None, e
        told = (result if error is None else error if isinstance(error, DistnetError)
                else f"{type(error).__name__}: {error}")
        comm.bcast((error is None, told), root=root)
        if error is not None:
            raise error
        return result
    ok, payload = comm.bcast(None, root=root)
    if not ok:
        if isinstance(payload, DistnetError):
            raise payload
        raise RemoteError([(root, payload)])
    return payload

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


class DataReader:
    """The rank that reads a dataset's files for a group of ranks (``read: root``: world rank 0
    for the whole world; ``read: node``: the lowest rank of each node for its node), and the
    calls that hand what it read to the others. ``comm`` is that group (rank ``root`` reads).

    ``stats``: on the reader, ``bytes`` and ``messages`` of pixels sent to other ranks, and the
    largest message, ``max_message``.
    """

    def __init__(self, comm, mode, root=0, world=(0, 1)):
        self.comm, self.mode, self.root = comm, mode, root
        #: ``(rank, size)`` of this process in the world (names its cache files).
        self.world = world
        self.stats = {"bytes": 0, "messages": 0, "max_message": 0}

    @property
    def is_reader(self):
        """Whether this rank opens the files."""
        return self.comm.Get_rank() == self.root

    def header(self, read):
        """``read()`` on the reader, its result on every rank of the group (:func:`read_on_root`:
        a failure stops every rank with the reader's error). Collective over ``comm``."""
        return read_on_root(self.comm, read, self.root)

    def agree(self, fn):
        """``fn()`` on every rank of the group, one outcome (:func:`~distnet.comm.abort.run_collectively`)."""
        from .abort import run_collectively
        return run_collectively(fn, self.comm)

    def allgather(self, value):
        """Every rank's ``value``, in rank order (over ``comm``)."""
        return self.comm.allgather(value)

    def scatter_rows(self, read, n_rows, channels, dtype, box, need=True, chunk_bytes=None, into=None):
        """:func:`~distnet.comm.scatter_rows.scatter_rows` over ``comm`` from the reader."""
        from .scatter_rows import CHUNK_BYTES, scatter_rows
        return scatter_rows(self.comm, read, n_rows, channels, dtype, box, need, self.root,
                            chunk_bytes or CHUNK_BYTES, self.stats, into)

    def describe(self):
        """``"rank 0 reads for 4 rank(s)"`` (for the log)."""
        return f"{self.mode} mode, {self.comm.Get_size()} rank(s) per reader"


_READERS = {}


def job_reader(mode):
    """The :class:`DataReader` of this process for ``mode`` (``"root"`` or ``"node"``), or None
    where every rank reads for itself: mode ``"every"``, a process without MPI, a world of one
    rank. Under a launcher that announces several ranks, MPI is started here if the command
    has not started it yet (``distnet check`` needs no MPI otherwise). The node group is ``COMM_WORLD.Split_type(COMM_TYPE_SHARED)`` (the ranks that share
    memory: one node), made once: the first call is collective over the world."""
    import sys
    if mode in (None, "every"):
        return None
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        from .launcher import launcher_world_size
        if launcher_world_size()[0] > 1:    # under mpiexec before the command started MPI
            from mpi4py import MPI as mpi   # (distnet check): the ranks still share one reader
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized() or mpi.COMM_WORLD.Get_size() == 1:
        return None
    if mode not in _READERS:
        world = mpi.COMM_WORLD
        comm = world if mode == "root" else world.Split_type(mpi.COMM_TYPE_SHARED)
        _READERS[mode] = DataReader(comm, mode, world=(world.Get_rank(), world.Get_size()))
    return _READERS[mode]

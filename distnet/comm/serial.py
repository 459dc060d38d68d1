"""A one-process stand-in for an mpi4py communicator, so that a single-process run needs neither
mpi4py nor a launcher.

:class:`SerialComm` implements the subset of ``mpi4py.MPI.Comm`` / ``Cartcomm`` that distnet calls,
with the semantics those calls have on a communicator of size 1: reductions and broadcasts return
(or copy) their input, barriers do nothing, the Cartesian grid is 1x1 (1x1x1 after a 3-D
``Create_cart``). Point-to-point calls are not provided: with one rank a halo plan has no peers,
so nothing is ever sent.

``IN_PLACE``: mpi4py wants ``MPI.IN_PLACE`` itself; :class:`SerialComm` cannot import it. So
distnet code asks :func:`in_place` for the token a given communicator understands, and
:class:`SerialComm` accepts both its own :data:`IN_PLACE` and mpi4py's (recognised by type name,
without importing mpi4py).
"""
import os
import sys

import numpy as np


class _InPlace:
    """Sentinel for "the receive buffer is also the send buffer" on a :class:`SerialComm`."""

    def __repr__(self):
        return "IN_PLACE"

    def __reduce__(self):  # copies and unpickles resolve to the module's one instance
        return "IN_PLACE"


IN_PLACE = _InPlace()


def _is_in_place(buf):
    """True for :data:`IN_PLACE` and for mpi4py's ``MPI.IN_PLACE`` (matched by type name)."""
    return buf is IN_PLACE or type(buf).__name__ in ("InPlaceType", "InPlace")


def _array_of(buf):
    """The array of an mpi4py-style buffer argument: ``a`` or ``[a, datatype]`` / ``(a, count, dt)``."""
    if isinstance(buf, (list, tuple)):
        return buf[0]
    return buf


def in_place(comm):
    """The IN_PLACE token ``comm`` understands: :data:`IN_PLACE` for a :class:`SerialComm`,
    ``mpi4py.MPI.IN_PLACE`` otherwise (mpi4py is then already imported: it made ``comm``)."""
    if isinstance(comm, SerialComm):
        return IN_PLACE
    return sys.modules["mpi4py.MPI"].IN_PLACE


def is_serial(comm):
    """True for a :class:`SerialComm` (no MPI behind it)."""
    return isinstance(comm, SerialComm)


class SerialComm:
    """A communicator of size 1 with mpi4py's method names (a non-periodic Cartesian grid of one
    rank per axis, 2 axes unless ``ndim`` says otherwise).

    Only rank 0 exists: every collective is local; ``root`` arguments must be 0.
    """

    IN_PLACE = IN_PLACE

    def __init__(self, name="serial", ndim=2):
        self.name = name
        self._ndim = ndim          # axes of its Cartesian grid (1x1 unless Create_cart said)

    # -- identity ---------------------------------------------------------------------------
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    rank = property(Get_rank)
    size = property(Get_size)

    def __repr__(self):
        return f"SerialComm({self.name!r})"

    # -- Cartesian (1x1, or 1x1x1 ...: one rank on every axis) -------------------------------
    dims = property(lambda self: [1] * self._ndim)
    periods = property(lambda self: [False] * self._ndim)
    coords = property(lambda self: [0] * self._ndim)
    ndim = property(lambda self: self._ndim)

    def Get_topo(self):
        return (self.dims, self.periods, self.coords)

    def Get_coords(self, rank):
        self._check_rank(rank)
        return self.coords

    def Get_cart_rank(self, coords):
        if any(int(c) != 0 for c in coords):
            raise ValueError(f"coordinates {tuple(coords)} outside the {'x'.join(['1'] * self._ndim)} "
                             f"grid of a SerialComm")
        return 0

    def Create_cart(self, dims, periods=None, reorder=False):
        if int(np.prod(dims)) != 1:
            raise ValueError(f"a SerialComm has 1 rank, cannot make a {dims} grid")
        return SerialComm(self.name, ndim=len(dims))

    def Split(self, color=0, key=0):
        return self

    def Dup(self):
        return SerialComm(self.name, self._ndim)

    def Free(self):
        pass

    # -- synchronisation and errors ----------------------------------------------------------
    def Barrier(self):
        pass

    def Abort(self, errorcode=1):
        """Like ``MPI_Abort``: end the process at once (no cleanup), exit status ``errorcode``."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(errorcode)

    # -- buffer collectives (numpy or cupy arrays) -------------------------------------------
    def Allreduce(self, sendbuf, recvbuf, op=None):
        """``recvbuf = sendbuf`` (sum/max/min over one rank); nothing to do when IN_PLACE."""
        if not _is_in_place(sendbuf):
            _array_of(recvbuf)[...] = _array_of(sendbuf)

    # -- object collectives (pickled by mpi4py; plain values here) ----------------------------
    def allreduce(self, sendobj, op=None):
        return sendobj

    def bcast(self, obj, root=0):
        self._check_rank(root)
        return obj

    def allgather(self, sendobj):
        return [sendobj]

    def gather(self, sendobj, root=0):
        self._check_rank(root)
        return [sendobj]

    @staticmethod
    def _check_rank(rank):
        if rank != 0:
            raise ValueError(f"rank {rank} does not exist in a SerialComm (size 1)")
